//! What a run did: counts of operations, faults injected by kind, and the run's hash.

use std::fmt;

use crate::config::Millis;

/// A kind of fault the simulator injects (or a consequence of one worth counting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// A minority cut from the rest, both ways.
    PartitionSymmetric,
    /// Some directed links cut.
    PartitionOneWay,
    /// One node cut from every other.
    Isolate,
    /// Every link restored.
    Heal,
    /// A batch lost by the network.
    MessageLost,
    /// A batch delivered twice.
    MessageDuplicated,
    /// A batch held back so later ones overtake it.
    MessageReordered,
    /// A batch dropped by a cut link.
    MessageCut,
    /// A process crash.
    Crash,
    /// A crash while writes were not synced yet.
    CrashUnsynced,
    /// A crash after which part of the unsynced tail was on disk anyway.
    TornWrite,
    /// A crashed node started again.
    Restart,
    /// A node lost its data directory.
    DataLoss,
    /// A data loss that would not have been survivable, so not injected.
    DataLossRefused,
    /// A node's ticks stalled, then burst.
    ClockJump,
    /// A node's disk full for a while.
    DiskFull,
    /// I/O errors on a node's fsyncs for a while.
    IoError,
    /// A group failed on a node (a consequence of the two above).
    GroupFailed,
    /// A node restarted by its operator after a group failed on it.
    Reboot,
    /// An fsync that took long.
    SlowFsync,
    /// A node discarded the applied prefix of its logs.
    Compaction,
    /// A snapshot whose data a node had copied from the sender never reached its engine (a
    /// crash or a dropped connection between copy and delivery in the server).
    SnapshotLostAfterCopy,
    /// An operator's `DELETE_SEGMENTS` proposed on a partition's leader.
    DeleteSegments,
    /// An operator's purge proposed on a partition's leader.
    Purge,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [FaultKind; 24] = [
        FaultKind::PartitionSymmetric,
        FaultKind::PartitionOneWay,
        FaultKind::Isolate,
        FaultKind::Heal,
        FaultKind::MessageLost,
        FaultKind::MessageDuplicated,
        FaultKind::MessageReordered,
        FaultKind::MessageCut,
        FaultKind::Crash,
        FaultKind::CrashUnsynced,
        FaultKind::TornWrite,
        FaultKind::Restart,
        FaultKind::DataLoss,
        FaultKind::DataLossRefused,
        FaultKind::ClockJump,
        FaultKind::DiskFull,
        FaultKind::IoError,
        FaultKind::GroupFailed,
        FaultKind::Reboot,
        FaultKind::SlowFsync,
        FaultKind::Compaction,
        FaultKind::SnapshotLostAfterCopy,
        FaultKind::DeleteSegments,
        FaultKind::Purge,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::PartitionSymmetric => "partition-symmetric",
            FaultKind::PartitionOneWay => "partition-one-way",
            FaultKind::Isolate => "isolate-one",
            FaultKind::Heal => "heal",
            FaultKind::MessageLost => "batch-lost",
            FaultKind::MessageDuplicated => "batch-duplicated",
            FaultKind::MessageReordered => "batch-reordered",
            FaultKind::MessageCut => "batch-cut",
            FaultKind::Crash => "crash",
            FaultKind::CrashUnsynced => "crash-with-unsynced-writes",
            FaultKind::TornWrite => "torn-write",
            FaultKind::Restart => "restart",
            FaultKind::DataLoss => "data-dir-loss",
            FaultKind::DataLossRefused => "data-dir-loss-refused",
            FaultKind::ClockJump => "clock-jump",
            FaultKind::DiskFull => "disk-full",
            FaultKind::IoError => "io-error",
            FaultKind::GroupFailed => "group-failed",
            FaultKind::Reboot => "reboot-after-failure",
            FaultKind::SlowFsync => "slow-fsync",
            FaultKind::Compaction => "compaction",
            FaultKind::SnapshotLostAfterCopy => "snapshot-lost-after-copy",
            FaultKind::DeleteSegments => "delete-segments",
            FaultKind::Purge => "purge",
        }
    }

    fn slot(self) -> usize {
        FaultKind::ALL
            .iter()
            .position(|k| *k == self)
            .expect("listed")
    }
}

/// How many faults of each kind a run (or a campaign) injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts([u64; FaultKind::ALL.len()]);

impl FaultCounts {
    /// Counts one.
    pub fn add(&mut self, kind: FaultKind, n: u64) {
        self.0[kind.slot()] += n;
    }

    /// The count of a kind.
    pub fn get(&self, kind: FaultKind) -> u64 {
        self.0[kind.slot()]
    }

    /// Adds another run's counts.
    pub fn merge(&mut self, other: &FaultCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }

    /// Every kind with a non-zero count.
    pub fn nonzero(&self) -> impl Iterator<Item = (FaultKind, u64)> + '_ {
        FaultKind::ALL
            .iter()
            .map(|k| (*k, self.get(*k)))
            .filter(|(_, n)| *n > 0)
    }
}

impl fmt::Display for FaultCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (kind, n) in self.nonzero() {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{} {n}", kind.name())?;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Virtual time simulated.
    pub simulated_ms: Millis,
    /// Events processed.
    pub events: u64,
    /// Rolling hash of every event processed: two runs of a seed must agree.
    pub hash: u64,
    /// Operations the clients started.
    pub ops: u64,
    /// Operations acknowledged.
    pub acked: u64,
    /// Attempts after the first.
    pub retries: u64,
    /// Attempts whose outcome stayed unknown to the client.
    pub uncertain: u64,
    /// Operations given up after the last attempt.
    pub abandoned: u64,
    /// Operations applied twice (each after a retry of an unknown outcome).
    pub duplicates: u64,
    /// Entries in the final state machines.
    pub entries: u64,
    /// Leader elections won.
    pub elections: u64,
    /// Snapshots installed.
    pub snapshots: u64,
    /// Slowest group's first acknowledgement after the faults stopped.
    pub liveness_ms: Millis,
    /// Faults injected.
    pub faults: FaultCounts,
    /// Membership changes, when the run makes one.
    pub membership: MembershipCounts,
}

/// What a run's (or a campaign's) membership changes did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MembershipCounts {
    /// Runs that made a membership change.
    pub runs: u64,
    /// Changes proposed to a leader (one step of one group, each proposal counted: a change
    /// the engine dropped is proposed again).
    pub proposed: u64,
    /// Changes applied by their proposer (a learner added, a learner promoted, a member
    /// removed, on one group).
    pub completed: u64,
    /// Proposals answered with an error (dropped, superseded, not leader, unknown outcome).
    pub refused: u64,
    /// Members that became voters of every group.
    pub added: u64,
    /// Members removed from every group (and then stopped).
    pub removed: u64,
    /// Learners cut from every other for good, that had to stay learners.
    pub stuck_learners: u64,
    /// Calm phases run with only a bare majority of the new voters up, which is no majority
    /// once the removed member counted: every group still had to commit.
    pub removal_proofs: u64,
    /// Leader hand-overs asked before removing a group's leader.
    pub transfers: u64,
}

impl MembershipCounts {
    /// Adds another run's counts.
    pub fn merge(&mut self, o: &MembershipCounts) {
        self.runs += o.runs;
        self.proposed += o.proposed;
        self.completed += o.completed;
        self.refused += o.refused;
        self.added += o.added;
        self.removed += o.removed;
        self.removal_proofs += o.removal_proofs;
        self.stuck_learners += o.stuck_learners;
        self.transfers += o.transfers;
    }
}

impl fmt::Display for MembershipCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} runs changed members: {} changes proposed, {} completed, {} refused (proposed \
             again), {} leader hand-overs; {} members added to every group, {} removed, {} \
             learners cut for good kept from voting; {} calm phases committed without the \
             removed member's vote",
            self.runs,
            self.proposed,
            self.completed,
            self.refused,
            self.transfers,
            self.added,
            self.removed,
            self.stuck_learners,
            self.removal_proofs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_merge_and_print_by_name() {
        let mut a = FaultCounts::default();
        assert_eq!(a.to_string(), "none");
        a.add(FaultKind::Crash, 2);
        a.add(FaultKind::Compaction, 1);
        let mut b = FaultCounts::default();
        b.add(FaultKind::Crash, 1);
        b.merge(&a);
        assert_eq!(b.get(FaultKind::Crash), 3);
        assert_eq!(b.to_string(), "crash 3, compaction 1");
        let names: std::collections::BTreeSet<_> =
            FaultKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), FaultKind::ALL.len(), "names are distinct");
    }
}
