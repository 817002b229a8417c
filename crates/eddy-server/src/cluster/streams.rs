//! The stream store of a cluster member: what request handlers call instead of the single
//! node's `StreamStore` (metadata commits and reads, appends, polls, partition figures), on the
//! metadata group and the partition groups of [`PartitionGroups`].
//!
//! * A metadata commit is proposed to the metadata group by its leader and answered with the
//!   apply outcome every member computes; elsewhere it is refused with
//!   [`ClusterError::NotLeader`] (the stream protocol's `TransientNotAccepted`, on which the
//!   SDK looks for the leader again).
//! * An append is stamped by the partition group's leader with the offset and time it
//!   predicts after everything it proposed and has not seen applied, then proposed; the
//!   acknowledgement waits for the entry to be committed (fdatasynced on a majority) and
//!   applied here. Predictions and proposals happen under one lock per node, so the Raft log
//!   receives them in prediction order; a prediction that went stale (a proposal ahead of it
//!   was lost with a leadership change) is refused at apply on every member and answered
//!   transiently.
//! * Reads (metadata, polls, figures) are served by any member from what it has applied:
//!   committed data, possibly behind the leader's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use eddy_consensus::{GroupId, ProposeError, Role, Runner};
use eddy_stream_store::metadata::{encode_op, Effect};
use eddy_stream_store::replicated::{ApplyOutcome, PartitionEntry};
use eddy_stream_store::replicated_metadata::{MetadataApplied, MetadataView};
use eddy_stream_store::{
    Appended, ConsumerKey, MetadataOp, MetadataState, PartitionAddr, PartitionStats, PollStrategy,
    Polled, StampableBatch,
};

use super::raft_groups::{ClusterOutcome, PartitionGroups};
use eddy_replicated::groups::{partition_group_id, METADATA_GROUP};
use eddy_replicated::partition::{PartitionGroup, Proposals, StampedEntry};
use eddy_replicated::stream::error::ClusterError;

/// Proposed, not yet answered appends per partition, by proposal id.
type Pending = Proposals<PartitionAddr, u64>;

/// A member's replicated stream store (cheap to clone).
#[derive(Clone)]
pub struct ClusterStreams {
    runner: Runner<ClusterOutcome>,
    groups: PartitionGroups,
    view: MetadataView,
    pending: Arc<Mutex<Pending>>,
    next_id: Arc<AtomicU64>,
    directory: super::transport::Directory,
    /// This member's id, and whether its replication port authenticates members.
    me: u64,
    peer_tls: bool,
    /// The transport's peers, and this member's replication address (membership changes).
    peers: super::transport::PeerBook,
    replication: String,
    /// Carries requests for groups this member does not lead to their leaders.
    forwarder: Option<super::transport::Forwarder>,
    /// Membership changes running on this member (their leaderships stay here meanwhile).
    changing: Arc<std::sync::atomic::AtomicUsize>,
}

impl std::fmt::Debug for ClusterStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterStreams")
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

async fn proposed(
    runner: &Runner<ClusterOutcome>,
    group: GroupId,
    data: Bytes,
) -> Result<ClusterOutcome, ClusterError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    runner.propose(
        group,
        data,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    match rx.await {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(e)) => Err(ClusterError::NotCommitted(e)),
        Err(_) => Err(ClusterError::NotCommitted(ProposeError::Unknown)),
    }
}

/// Longest a linearizable read waits for its confirmation (the node answers sooner: within an
/// election timeout, or at once when no leader is known).
pub const READ_CONFIRM_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits until this member may serve a linearizable read of `group`: it has applied every
/// entry the group had committed when asked, as its leader and a quorum confirmed
/// (`Node::read_index`). A member that cannot confirm (an isolated former leader, no known
/// leader) gets `NotLeader`, never stale data.
pub async fn linearized(
    runner: &Runner<ClusterOutcome>,
    group: GroupId,
    what: &'static str,
) -> Result<(), ClusterError> {
    let deadline = tokio::time::Instant::now() + READ_CONFIRM_WAIT;
    loop {
        let (tx, rx) = tokio::sync::oneshot::channel();
        runner.read_index(
            group,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        if let Ok(Ok(Ok(()))) = tokio::time::timeout_at(deadline, rx).await {
            return Ok(());
        }
        // Not confirmed (no leader known while the group's leadership moves, cut off from a
        // quorum, the group failed or went away): asked again until the deadline, then the
        // client retries on another member or later.
        if tokio::time::Instant::now() + READ_RETRY >= deadline {
            return Err(ClusterError::NotLeader(what));
        }
        tokio::time::sleep(READ_RETRY).await;
    }
}

/// The pause before a linearizable read that was not confirmed asks again.
const READ_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

impl ClusterStreams {
    /// Waits until the metadata this member applied includes every change acknowledged before
    /// now (see [`linearized`]).
    ///
    /// # Errors
    /// `NotLeader` when the metadata group's leadership cannot be confirmed.
    pub async fn linearize_metadata(&self) -> Result<(), ClusterError> {
        linearized(&self.runner, METADATA_GROUP, "metadata group").await
    }

    /// Waits until partition `addr`'s messages here include every batch acknowledged before
    /// now.
    ///
    /// # Errors
    /// No such partition here, or its leadership cannot be confirmed.
    pub async fn linearize_partition(&self, addr: PartitionAddr) -> Result<(), ClusterError> {
        let (uid, _) = self
            .groups
            .get(addr)
            .ok_or(ClusterError::NoPartition(addr))?;
        linearized(&self.runner, partition_group_id(uid), "partition's group").await
    }

    /// Waits, for every partition of `addrs` this member holds, until its figures here include
    /// every batch acknowledged before now: the reads run side by side, so a listing of many
    /// partitions waits about one confirmation round, at most [`READ_CONFIRM_WAIT`].
    ///
    /// # Errors
    /// The first partition whose leadership cannot be confirmed (`NotLeader`).
    pub async fn linearize_partitions(
        &self,
        addrs: impl IntoIterator<Item = PartitionAddr>,
    ) -> Result<(), ClusterError> {
        let mut reads = tokio::task::JoinSet::new();
        for addr in addrs {
            // A partition with no group here (created or deleted a moment ago) has no figures
            // of its own to bring up to date.
            let Some((uid, _)) = self.groups.get(addr) else {
                continue;
            };
            let runner = self.runner.clone();
            reads.spawn(async move {
                linearized(&runner, partition_group_id(uid), "partition's group").await
            });
        }
        while let Some(read) = reads.join_next().await {
            read.map_err(|_| ClusterError::NotLeader("partition's group"))??;
        }
        Ok(())
    }

    /// The store over a running node's groups.
    pub fn new(
        runner: Runner<ClusterOutcome>,
        groups: PartitionGroups,
        view: MetadataView,
    ) -> Self {
        ClusterStreams {
            runner,
            groups,
            view,
            pending: Arc::default(),
            next_id: Arc::default(),
            directory: super::transport::Directory::default(),
            me: 0,
            peer_tls: false,
            peers: super::transport::PeerBook::default(),
            replication: String::new(),
            forwarder: None,
            changing: Arc::default(),
        }
    }

    /// Who this member is (for `EDDY_CLUSTER_STATUS`).
    #[must_use]
    pub fn with_identity(mut self, me: u64, peer_tls: bool) -> Self {
        self.me = me;
        self.peer_tls = peer_tls;
        self
    }

    /// What this member knows of the cluster (`EDDY_CLUSTER_STATUS`): the members it has
    /// heard from or replicates to, and every group it holds with its role, indexes and, where
    /// it leads, each other member's lag. Blocks briefly (the statuses are read on the Raft
    /// thread): call it off the async workers.
    pub fn status(&self) -> eddy_codec::stream::commands::cluster_status::ClusterStatus {
        use eddy_codec::stream::codec::{Counted, LongString};
        use eddy_codec::stream::commands::cluster_status::{
            ClusterStatus, GroupState, MemberLag, MemberState, GROUP_EVENT_SHARD, GROUP_METADATA,
            GROUP_PARTITION, ROLE_CANDIDATE, ROLE_FOLLOWER, ROLE_LEADER,
        };
        let statuses = self.runner.statuses();
        let partitions: std::collections::HashMap<u64, PartitionAddr> = self
            .groups
            .all()
            .into_iter()
            .map(|(addr, uid)| (uid, addr))
            .collect();
        let mut members: std::collections::BTreeMap<u64, MemberState> = self
            .current_members()
            .into_iter()
            .map(|(id, info)| {
                let address = info.hello.prop(super::transport::props::STREAM);
                let state = MemberState {
                    id,
                    stream_address: LongString::new(address.unwrap_or_default()),
                    connected: info.connected || id == self.me,
                };
                (id, state)
            })
            .collect();
        let mut groups = Vec::with_capacity(statuses.len());
        for (gid, status) in statuses {
            let (kind, id, addr) = if gid == METADATA_GROUP {
                (GROUP_METADATA, 0, None)
            } else if gid.0 >= eddy_replicated::groups::EVENT_GROUP_BASE {
                (
                    GROUP_EVENT_SHARD,
                    gid.0 - eddy_replicated::groups::EVENT_GROUP_BASE,
                    None,
                )
            } else {
                let uid = gid.0 - 1;
                (GROUP_PARTITION, uid, partitions.get(&uid).copied())
            };
            let lag = status
                .matched
                .iter()
                .filter(|(member, _)| *member != self.me)
                .map(|&(member, matched)| {
                    // A member the leader replicates to but never heard from still counts.
                    members.entry(member).or_insert_with(|| MemberState {
                        id: member,
                        stream_address: LongString::default(),
                        connected: false,
                    });
                    MemberLag {
                        member,
                        behind: status.last_index.saturating_sub(matched),
                    }
                })
                .collect();
            groups.push(GroupState {
                kind,
                id,
                stream_id: addr.map_or(0, |a| a.stream_id),
                topic_id: addr.map_or(0, |a| a.topic_id),
                partition_id: addr.map_or(0, |a| a.partition_id),
                role: match status.role {
                    Role::Leader => ROLE_LEADER,
                    Role::Candidate => ROLE_CANDIDATE,
                    Role::Follower => ROLE_FOLLOWER,
                },
                leader: status.leader.unwrap_or(0),
                term: status.term,
                commit: status.commit,
                applied: status.applied,
                last_index: status.last_index,
                failed: status.failed,
                lag: Counted(lag),
                voters: Counted(status.voters),
                learners: Counted(status.learners),
            });
        }
        ClusterStatus {
            node_id: self.me,
            peer_tls: self.peer_tls,
            members: Counted(members.into_values().collect()),
            groups: Counted(groups),
        }
    }

    /// The members' greetings (addresses for `GET_CLUSTER_METADATA`), from the transport.
    #[must_use]
    pub fn with_directory(mut self, directory: super::transport::Directory) -> Self {
        self.directory = directory;
        self
    }

    /// Every member: id, greeting (when known), whether it is reachable, whether it leads
    /// the metadata group.
    pub fn members(&self) -> Vec<(u64, Option<eddy_consensus::wire::Hello>, bool, bool)> {
        let leader = self
            .runner
            .view()
            .get(METADATA_GROUP)
            .and_then(|v| v.leader);
        self.current_members()
            .into_iter()
            .map(|(id, info)| (id, Some(info.hello), info.connected, leader == Some(id)))
            .collect()
    }

    /// The directory's entries of the current members: this one and its peers now (a
    /// removed member's greeting may linger in the directory; it is not a member).
    fn current_members(&self) -> std::collections::BTreeMap<u64, super::transport::PeerInfo> {
        let mut all = self.directory.all();
        all.retain(|&id, _| id == self.me || self.peers.contains(id));
        all
    }

    /// The node's runner (roles, leaders, statuses).
    pub fn runner(&self) -> &Runner<ClusterOutcome> {
        &self.runner
    }

    /// The partition groups.
    pub fn groups(&self) -> &PartitionGroups {
        &self.groups
    }

    fn leads(&self, group: GroupId) -> bool {
        self.runner
            .view()
            .get(group)
            .is_some_and(|v| v.role == Role::Leader)
    }

    /// Whether this member leads the metadata group.
    pub fn is_metadata_leader(&self) -> bool {
        self.leads(METADATA_GROUP)
    }

    /// Whether a membership change runs on this member: it gathers the leaderships of the
    /// groups it changes, and its balancer leaves them here until it is done.
    pub fn changing_membership(&self) -> bool {
        self.changing.load(Ordering::SeqCst) > 0
    }

    /// Periodic partition upkeep: leaderships move to their preferred members (unless a
    /// membership change runs here), and purges the metadata holds reach partitions that
    /// missed them.
    pub fn maintain_partitions(&self) {
        if !self.changing_membership() {
            self.groups.balance_leaders();
        }
        self.groups.repurge(&self.view);
    }

    /// Reads the metadata this member has applied.
    pub fn read<R>(&self, f: impl FnOnce(&MetadataState) -> R) -> R {
        self.view.read(f)
    }

    /// Reads this member's change journal of the metadata group with the state it describes
    /// (`GET_METADATA_CHANGES`).
    pub fn read_changes<R>(
        &self,
        f: impl FnOnce(&eddy_stream_store::changes::ChangeJournal, &MetadataState) -> R,
    ) -> R {
        self.view.read_changes(f)
    }

    /// Commits a metadata operation through the metadata group (on its leader only) and
    /// returns its partition effects once it is committed and applied here.
    ///
    /// # Errors
    /// Not the leader, not committed, or refused by the state.
    pub(crate) async fn commit_here(&self, op: &MetadataOp) -> Result<Vec<Effect>, ClusterError> {
        if !self.is_metadata_leader() {
            return Err(ClusterError::NotLeader("metadata group"));
        }
        let placed;
        let op = if matches!(
            op,
            MetadataOp::CreateTopic { .. } | MetadataOp::CreatePartitions { .. }
        ) {
            placed = MetadataOp::Placed {
                replicas: self.placement().await?,
                op: Box::new(op.clone()),
            };
            &placed
        } else {
            op
        };
        let data = encode_op(op).map_err(|e| ClusterError::Encode(e.to_string()))?;
        match proposed(&self.runner, METADATA_GROUP, Bytes::from(data)).await? {
            ClusterOutcome::Metadata(MetadataApplied::Applied(effects)) => Ok(effects),
            ClusterOutcome::Metadata(MetadataApplied::Refused(e)) => Err(e.into()),
            other => Err(ClusterError::Encode(format!(
                "the metadata group answered {other:?}"
            ))),
        }
    }

    /// The members a partition created now is founded on: the metadata group's voters as
    /// this member (its leader) sees them. The creating operation carries them, so every
    /// member founds the partition's group on the same voters whatever its own view.
    async fn placement(&self) -> Result<Vec<u64>, ClusterError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.runner.with(move |node| {
            let _ = tx.send(node.membership(METADATA_GROUP).map(|m| m.voters));
        });
        match rx.await {
            Ok(Some(voters)) if !voters.is_empty() => Ok(voters),
            _ => Err(ClusterError::NotLeader("metadata group")),
        }
    }

    /// The group of partition `addr` and its id, when this member leads it (elsewhere a write
    /// is forwarded to its leader: see `forwarding`).
    fn led_partition(
        &self,
        addr: PartitionAddr,
    ) -> Result<(GroupId, PartitionGroup), ClusterError> {
        let (uid, group) = self
            .groups
            .get(addr)
            .ok_or(ClusterError::NoPartition(addr))?;
        let gid = partition_group_id(uid);
        if self.leads(gid) {
            Ok((gid, group))
        } else {
            Err(ClusterError::NotLeader("partition's group"))
        }
    }

    /// Appends a batch through the partition's group (on its leader only): stamped with the
    /// predicted offset and `now_us` (or the partition's newest time, if later), acknowledged
    /// once committed and applied here.
    ///
    /// # Errors
    /// Not the partition's leader, not committed, a stale prediction, or no such partition.
    pub async fn append<B: StampableBatch>(
        &self,
        addr: PartitionAddr,
        batch: B,
        now_us: u64,
    ) -> Result<Appended, ClusterError> {
        let (gid, group) = self.led_partition(addr)?;
        let (rx, base_offset, len) = {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let StampedEntry {
                entry,
                base_offset,
                len,
            } = pending
                .stamp(addr, id, &group, batch, now_us)
                .map_err(|e| ClusterError::Encode(e.to_string()))?;
            let (tx, rx) = tokio::sync::oneshot::channel();
            let all = Arc::clone(&self.pending);
            // Proposed under the lock: the node receives proposals in prediction order.
            self.runner.propose(
                gid,
                entry,
                Box::new(move |r| {
                    all.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .answered(addr, &id);
                    let _ = tx.send(r);
                }),
            );
            (rx, base_offset, len)
        };
        let outcome = match rx.await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => return Err(ClusterError::NotCommitted(e)),
            Err(_) => return Err(ClusterError::NotCommitted(ProposeError::Unknown)),
        };
        match outcome {
            ClusterOutcome::Partition(ApplyOutcome::Appended {
                base_offset: applied,
                message_count,
                timestamp,
            }) if applied == base_offset => Ok(Appended {
                base_offset,
                message_count,
                timestamp,
                len,
            }),
            _ => Err(ClusterError::Stale(base_offset)),
        }
    }

    /// `DELETE_SEGMENTS` of a replicated partition (on its leader only): the leader finds
    /// where its `count` oldest sealed segments end and proposes a
    /// [`PartitionEntry::Forget`] through there. Once committed and applied here, every member
    /// serves from the same first offset (each applies it alike) and deletes its own sealed
    /// segments below at its next retention run. Nothing to delete is a success.
    ///
    /// # Errors
    /// Not the partition's leader, not committed, or no such partition.
    pub(crate) async fn delete_segments_here(
        &self,
        addr: PartitionAddr,
        count: u32,
    ) -> Result<(), ClusterError> {
        let (gid, group) = self.led_partition(addr)?;
        let Some(through_index) = group.partition().oldest_segments_end(count) else {
            return Ok(());
        };
        let entry = PartitionEntry::Forget { through_index }
            .encode()
            .map_err(|e| ClusterError::Encode(e.to_string()))?;
        match proposed(&self.runner, gid, entry).await? {
            ClusterOutcome::Partition(ApplyOutcome::Forget { .. }) => Ok(()),
            other => Err(ClusterError::Encode(format!(
                "the partition's group answered {other:?}"
            ))),
        }
    }

    /// Polls a partition from what this member has applied; `consumer`'s stored offset
    /// (for [`PollStrategy::Next`]) comes from the metadata.
    ///
    /// # Errors
    /// No such partition here, or the read failed.
    pub fn poll(
        &self,
        addr: PartitionAddr,
        consumer: Option<ConsumerKey>,
        strategy: PollStrategy,
        count: u32,
        max_bytes: u64,
    ) -> Result<Polled, ClusterError> {
        let (_, group) = self
            .groups
            .get(addr)
            .ok_or(ClusterError::NoPartition(addr))?;
        let stored = match (strategy, consumer) {
            (PollStrategy::Next, Some(consumer)) => self.consumer_offset(addr, consumer),
            _ => None,
        };
        Ok(group.partition().poll(strategy, count, stored, max_bytes)?)
    }

    /// A consumer's stored offset on a partition.
    pub fn consumer_offset(&self, addr: PartitionAddr, consumer: ConsumerKey) -> Option<u64> {
        self.view.read(|s| {
            s.partition(addr)
                .and_then(|p| p.offsets.get(&consumer).copied())
        })
    }

    /// A partition's figures on this member (`None` without its group).
    pub fn partition_stats(&self, addr: PartitionAddr) -> Option<PartitionStats> {
        self.groups.get(addr).map(|(_, g)| g.partition().stats())
    }
}

mod forwarding;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use forwarding::{forwarded_seeds, fuzz_forwarded};
pub use forwarding::{not_there, FORWARD_PATIENCE, FORWARD_RETRY, STREAM_FORWARD_KIND};
mod membership;
#[cfg(test)]
mod tests;
