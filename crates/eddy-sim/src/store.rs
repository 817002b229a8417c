//! Where the simulated nodes keep their groups: a [`StoreFactory`] opens each group's store on
//! a node's data directory and plays the disk's part in faults (fsync completion, power cut,
//! full disk, lost directory).
//!
//! [`MemFactory`] runs the consensus crate's in-memory store. The server's stream and event
//! stores plug in the same way, over the crash-simulating file backend: one backend per data
//! directory, `sync` completing their pending fdatasyncs on the caller's thread, `crash` being
//! the backend's power cut.

use std::collections::BTreeMap;

use bytes::Bytes;
use eddy_consensus::testing::{Applied, MemDisk, MemStore};
use eddy_consensus::{GroupId, GroupStore, NodeId, ProposeError, StoreError};

pub use eddy_consensus::testing::DiskFault;

use crate::config::Millis;
use crate::rng::SimRng;
use crate::workload::OpId;

/// Which store the simulated nodes run on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StoreKind {
    /// The consensus crate's in-memory [`MemStore`] ([`MemFactory`]).
    #[default]
    Mem,
    /// [`Replicated`](eddy_consensus::Replicated) over eddy-log directories on the
    /// crash-simulating backend ([`LogFactory`](crate::LogFactory)).
    Log,
    /// The server's event-store shard groups over a real event store per node, on the
    /// crash-simulating backend ([`crate::events`]).
    Events,
    /// The server's stream partition groups on the crash-simulating backend
    /// ([`crate::streams`]).
    Streams,
    /// Both, on one Raft node per member ([`crate::server`]).
    Server,
}

impl StoreKind {
    /// The store by name: `mem`, `log`, `events`, `streams` or `server`.
    pub fn by_name(name: &str) -> Option<Self> {
        match name {
            "mem" => Some(StoreKind::Mem),
            "log" => Some(StoreKind::Log),
            "events" => Some(StoreKind::Events),
            "streams" => Some(StoreKind::Streams),
            "server" => Some(StoreKind::Server),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Mem => "mem",
            StoreKind::Log => "log",
            StoreKind::Events => "events",
            StoreKind::Streams => "streams",
            StoreKind::Server => "server",
        }
    }
}

/// Opens the stores of simulated nodes and simulates their disks.
///
/// Every call happens on the simulator's thread, in an order fixed by the seed; durability
/// callbacks must run inside [`StoreFactory::sync`] (or inside an append when the store syncs
/// at once), never on a thread of the store's own, or a seed would not replay.
pub trait StoreFactory {
    /// What applying an entry yields (the node's proposal outcome type).
    type Outcome: Send + 'static;
    /// A node's data directory: outlives crashes, replaced when the node loses its data.
    type Dir;

    /// An empty data directory for `node` (at start, and after a data loss).
    fn create(&mut self, node: NodeId) -> Self::Dir;

    /// Opens (recovers) a group's store on a directory. Its appends must stay unsynced until
    /// [`StoreFactory::sync`], so a crash can lose them.
    fn open(
        &mut self,
        dir: &mut Self::Dir,
        group: GroupId,
    ) -> Result<Box<dyn GroupStore<Outcome = Self::Outcome>>, StoreError>;

    /// Whether writes wait for a sync.
    fn unsynced(&self, dir: &Self::Dir) -> bool;

    /// An fsync completes: every pending write becomes durable (or fails under a fault) and
    /// its callback runs, here.
    fn sync(&mut self, dir: &mut Self::Dir);

    /// A power cut: unsynced writes are lost, their callbacks never run. With `tear`, part of
    /// the unsynced tail (chosen with `rng`) reaches the disk anyway. Write faults are cleared
    /// (the node comes back on a repaired disk). Returns how many entries the tear kept.
    fn crash(&mut self, dir: &mut Self::Dir, tear: bool, rng: &mut SimRng) -> u64;

    /// Makes the directory's writes fail (`Some`) or succeed again (`None`).
    fn set_fault(&mut self, dir: &mut Self::Dir, fault: Option<DiskFault>);

    /// Retention: discards the group's log up to `through` (an index the node has applied),
    /// leaving a snapshot in its place. A store that cannot compact does nothing and says so
    /// (false: not counted as a fault).
    fn compact(&mut self, dir: &mut Self::Dir, group: GroupId, through: u64) -> bool;

    /// A snapshot of `group` (its bytes `data`) sent from the node of `from` is about to reach
    /// the node of `to`: what the server does before its node sees it (an event shard's
    /// records are copied from the sender, out of band): `Ok(true)` when something was copied.
    /// An error drops the message, as the server drops a snapshot it could not copy. By
    /// default nothing is needed.
    fn copy_snapshot(
        &mut self,
        _from: &Self::Dir,
        _to: &mut Self::Dir,
        _group: GroupId,
        _data: &Bytes,
    ) -> Result<bool, String> {
        Ok(false)
    }

    /// An operator's `DELETE_SEGMENTS` of one segment of `group`, which the node of `dir`
    /// leads: the entry the server's leader would propose, if the group has segments and a
    /// sealed one. By default the store has none.
    fn delete_segments(&mut self, _dir: &mut Self::Dir, _group: GroupId) -> Option<Bytes> {
        None
    }

    /// A client reads `group` on the node of `dir` (a poll, an aggregate's events), during
    /// the faults: the store remembers what it was served, which must never contradict what
    /// another read was served nor the final state ([`StoreFactory::check_final`]). An error
    /// (two reads served differently) fails the run.
    fn observe(
        &mut self,
        _dir: &mut Self::Dir,
        _group: GroupId,
        _rng: &mut SimRng,
    ) -> Result<(), String> {
        Ok(())
    }

    /// An operator's purge of `group` (a partition), which the node of `dir` leads: the entry
    /// its leader proposes, or `None` when the store has nothing to purge.
    fn purge(&mut self, _dir: &mut Self::Dir, _group: GroupId) -> Option<Bytes> {
        None
    }

    /// The group's state machine as last opened on this directory: the payloads applied, each
    /// with its index, in index order (what the checker reads at the end of a run).
    fn state(&self, dir: &Self::Dir, group: GroupId) -> Vec<(u64, Bytes)>;

    /// What a node proposes for a client's request: `payload` as the client sent it, turned
    /// into the entry the server would propose (a leader stamps a stream batch with the offset
    /// it predicts, for instance). `attempt` numbers the client's tries of `op`; every proposal
    /// prepared here is [`settled`](StoreFactory::settled) once its answer is known. `now` is
    /// the node's wall clock (ms), which clock jumps step backwards and forwards.
    fn prepare(
        &mut self,
        _dir: &mut Self::Dir,
        _group: GroupId,
        _attempt: (OpId, u64),
        payload: Bytes,
        _now: Millis,
    ) -> Result<Bytes, String> {
        Ok(payload)
    }

    /// The proposal [`prepare`](StoreFactory::prepare)d for `attempt` was answered (applied,
    /// refused or dropped) on the node of `dir`.
    fn settled(&mut self, _dir: &mut Self::Dir, _group: GroupId, _attempt: (OpId, u64)) {}

    /// Operation `op` applied at `index` of `group` on the node of `dir`, which answers its
    /// client: a store whose answers carry more than the index (a version, a refusal) records
    /// what this node answered, for [`StoreFactory::check_final`]. False when that answer is a
    /// transient refusal the client retries ([`Answer::Transient`](crate::client::Answer));
    /// an error fails the run.
    fn acked(
        &mut self,
        _dir: &mut Self::Dir,
        _group: GroupId,
        _index: u64,
        _op: OpId,
    ) -> Result<bool, String> {
        Ok(true)
    }

    /// The proposal of the attempt just [`settled`](StoreFactory::settled) on the node of
    /// `dir` was refused or lost with `error`: what its client understands of the node's
    /// answer (a store whose server answers in its own protocol maps it through the server's
    /// codes and the client's decoding). An error fails the run.
    fn told_error(
        &mut self,
        _dir: &mut Self::Dir,
        _group: GroupId,
        error: ProposeError,
    ) -> Result<ProposeError, String> {
        Ok(error)
    }

    /// True when the node of `dir` stopped applying a group until it restarts (its store
    /// failed a write): the drain restarts it, as an operator would, before the final check.
    fn stalled(&self, _dir: &Self::Dir) -> bool {
        false
    }

    /// The store's own guarantees over every member's final state, once every member caught
    /// up (beyond the consensus checker's agreement on the applied entries): what the
    /// clients were told must be what the stores hold. Returns a summary for the trace.
    fn check_final(&self, _dirs: &[(NodeId, &Self::Dir)]) -> Result<String, String> {
        Ok(String::new())
    }
}

/// The consensus crate's [`MemStore`]s, one [`MemDisk`] per group.
#[derive(Debug, Default)]
pub struct MemFactory;

/// A node's data directory for [`MemFactory`].
#[derive(Debug, Default)]
pub struct MemDir {
    disks: BTreeMap<GroupId, MemDisk>,
    applied: BTreeMap<GroupId, Applied>,
}

impl MemDir {
    /// A group's disk (created empty when first asked for).
    pub fn disk(&mut self, group: GroupId) -> &MemDisk {
        self.disks.entry(group).or_default()
    }
}

impl StoreFactory for MemFactory {
    type Outcome = u64;
    type Dir = MemDir;

    fn create(&mut self, _node: NodeId) -> MemDir {
        MemDir::default()
    }

    fn open(
        &mut self,
        dir: &mut MemDir,
        group: GroupId,
    ) -> Result<Box<dyn GroupStore<Outcome = u64>>, StoreError> {
        let mut store = MemStore::open(dir.disk(group).clone());
        store.hold_syncs();
        dir.applied.insert(group, store.applied());
        Ok(Box::new(store))
    }

    fn unsynced(&self, dir: &MemDir) -> bool {
        dir.disks.values().any(|d| d.unsynced_appends() > 0)
    }

    fn sync(&mut self, dir: &mut MemDir) {
        for disk in dir.disks.values() {
            disk.flush();
        }
    }

    fn crash(&mut self, dir: &mut MemDir, tear: bool, rng: &mut SimRng) -> u64 {
        let mut kept = 0;
        for disk in dir.disks.values() {
            let survive = if tear && disk.unsynced_appends() > 0 {
                usize::try_from(rng.below(16)).expect("small")
            } else {
                0
            };
            kept += disk.crash(survive) as u64;
        }
        kept
    }

    fn set_fault(&mut self, dir: &mut MemDir, fault: Option<DiskFault>) {
        for disk in dir.disks.values() {
            disk.fail_writes(fault);
        }
    }

    fn compact(&mut self, dir: &mut MemDir, group: GroupId, through: u64) -> bool {
        dir.disks
            .get(&group)
            .map(|disk| disk.compact(through))
            .is_some()
    }

    fn state(&self, dir: &MemDir, group: GroupId) -> Vec<(u64, Bytes)> {
        dir.applied
            .get(&group)
            .map(Applied::get)
            .unwrap_or_default()
    }
}
