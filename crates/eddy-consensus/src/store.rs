//! What a replicated group needs from the application: its durable log, its hard state and its
//! state machine, in one object.
//!
//! The store is both the log and the state machine on purpose: eddy's data groups keep one copy
//! of each byte (a partition's replicated log *is* its message log), so "append" and "apply"
//! are two views of the same files, and only the store knows how they relate.

use crate::types::{HardState, LogEntry, Membership, Snapshot, SnapshotMeta};

/// Why a store could not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The entry was discarded by compaction or retention (a snapshot replaces it).
    #[error("entries before index {first_index} are compacted")]
    Compacted {
        /// The first index the log still holds.
        first_index: u64,
    },
    /// The entry is beyond the end of the durable log.
    #[error("entry {index} is beyond the log's end {last_index}")]
    Unavailable {
        /// The index asked for.
        index: u64,
        /// The log's last durable index.
        last_index: u64,
    },
    /// A snapshot cannot be produced right now; the engine asks again later.
    #[error("snapshot temporarily unavailable")]
    SnapshotTemporarilyUnavailable,
    /// A snapshot could not be installed because its bytes are not a snapshot of this store.
    #[error("invalid snapshot at index {index}: {reason}")]
    InvalidSnapshot {
        /// The snapshot's index.
        index: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The underlying storage failed (I/O, corruption, full disk).
    #[error("storage failed")]
    Storage(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Called once when appended entries (and the truncation before them) are durable, or failed.
pub type Durable = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// A replicated group's durable log, hard state and state machine.
///
/// Contract (the engine relies on every line of it):
/// * indexes are contiguous from [`first_index`](GroupStore::first_index) to the last appended
///   entry; `snapshot_meta().index + 1 == first_index()`;
/// * [`append`](GroupStore::append) first discards every entry at or after the first new index,
///   then writes the new ones; its `durable` callbacks are called in append order, each only
///   once everything it wrote (and discarded) is on stable storage;
/// * [`term`](GroupStore::term) and [`entries`](GroupStore::entries) are asked only for entries
///   whose append completed durably (newer ones are served from the engine's own cache);
/// * [`apply`](GroupStore::apply) is called once per committed entry, in index order, only for
///   durable entries; it must be deterministic: every member computes the same outcome;
/// * [`save_hard_state`](GroupStore::save_hard_state) makes a changed term or vote durable
///   before it returns; a change of the commit index alone may be persisted later, or never
///   (the engine passes `sync` whenever its ready carries entries, which their append makes
///   durable). The commit index read back at open is used only up to
///   [`applied_index`](GroupStore::applied_index): entries after it are committed again by the
///   leader, so `applied_index` must never count an entry that was not applied, and the log
///   must hold every entry after it;
/// * compaction (in [`maintain`](GroupStore::maintain) or by the application) discards only
///   applied entries, and makes the new [`snapshot_meta`](GroupStore::snapshot_meta) durable
///   before it discards any.
pub trait GroupStore: Send {
    /// What applying one entry yields for the proposer (an ack, an error answer...).
    type Outcome: Send + 'static;

    /// The hard state recovered at open.
    fn hard_state(&self) -> HardState;
    /// The end of the snapshot or compacted prefix the log starts after.
    fn snapshot_meta(&self) -> SnapshotMeta;
    /// First index held by the log.
    fn first_index(&self) -> u64;
    /// Last durable index (`first_index() - 1` when empty).
    fn last_index(&self) -> u64;
    /// Term of a durable entry, or of `snapshot_meta().index`.
    fn term(&self, index: u64) -> Result<u64, StoreError>;
    /// Durable entries `lo..hi`, stopping once `max_bytes` is reached (always at least one).
    fn entries(&self, lo: u64, hi: u64, max_bytes: u64) -> Result<Vec<LogEntry>, StoreError>;
    /// Discards entries at or after `entries[0].index`, appends `entries`, reports durability.
    fn append(&mut self, entries: Vec<LogEntry>, durable: Durable);
    /// Persists the hard state (durably before returning when `sync`).
    fn save_hard_state(&mut self, state: HardState, sync: bool) -> Result<(), StoreError>;

    /// Index of the last entry applied to the state machine (recovered at open).
    fn applied_index(&self) -> u64;
    /// Applies one committed entry (empty data: a new leader's marker entry).
    fn apply(&mut self, entry: &LogEntry) -> Self::Outcome;
    /// A snapshot of the applied state, for a member that needs entries the log no longer has.
    fn snapshot(&self) -> Result<Snapshot, StoreError>;
    /// Replaces log and state with a snapshot (durable on return): the log then starts at
    /// `snapshot.meta.index + 1` and the applied index is `snapshot.meta.index`.
    fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError>;

    /// The group's membership as last saved with
    /// [`save_membership`](GroupStore::save_membership) (`None`: it never changed, and its
    /// members are the node's configured voters).
    fn membership(&self) -> Option<Membership> {
        None
    }

    /// Makes the group's membership durable before it returns. Called when a membership
    /// change applies (before anything after it applies) and when a snapshot brings one.
    /// The default refuses: such a store's group cannot change its members (the change
    /// fails the group).
    fn save_membership(&mut self, membership: &Membership) -> Result<(), StoreError> {
        let _ = membership;
        Err(StoreError::Storage(
            "this store cannot record a change of its group's members".into(),
        ))
    }

    /// Upkeep the node runs every few ticks (see
    /// [`NodeConfig::maintain_ticks`](crate::NodeConfig::maintain_ticks)) with the caller's
    /// clock in µs: log compaction and retention (only ever through an applied index, the
    /// snapshot boundary durable before any entry is deleted). Keep each call short: it runs
    /// on the node's thread. An error fails the group on this node. The default does
    /// nothing.
    fn maintain(&mut self, now_us: u64) -> Result<(), StoreError> {
        let _ = now_us;
        Ok(())
    }
}

/// A store that adds to another one: implement [`inner`](WrapStore::inner) and
/// [`inner_mut`](WrapStore::inner_mut), override the `wrap_` form of only the writes it
/// observes or changes, and it is a [`GroupStore`] whose every other method is the inner
/// store's. One forwarding for
/// the simulator's probes, its held durability reports and tests' counters: a wrapper cannot
/// forget a method (before, one that did answered with the trait's default).
pub trait WrapStore: Send {
    /// The wrapped store.
    type Inner: GroupStore + ?Sized;

    /// The wrapped store.
    fn inner(&self) -> &Self::Inner;
    /// The wrapped store, to change.
    fn inner_mut(&mut self) -> &mut Self::Inner;

    /// [`GroupStore::append`]; by default the inner store's.
    fn wrap_append(&mut self, entries: Vec<LogEntry>, durable: Durable) {
        self.inner_mut().append(entries, durable);
    }
    /// [`GroupStore::save_hard_state`]; by default the inner store's.
    ///
    /// # Errors
    /// The inner store's.
    fn wrap_save_hard_state(&mut self, state: HardState, sync: bool) -> Result<(), StoreError> {
        self.inner_mut().save_hard_state(state, sync)
    }
    /// [`GroupStore::apply`]; by default the inner store's.
    fn wrap_apply(&mut self, entry: &LogEntry) -> <Self::Inner as GroupStore>::Outcome {
        self.inner_mut().apply(entry)
    }
    /// [`GroupStore::install_snapshot`]; by default the inner store's.
    ///
    /// # Errors
    /// The inner store's.
    fn wrap_install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        self.inner_mut().install_snapshot(snapshot)
    }
    /// [`GroupStore::save_membership`]; by default the inner store's.
    ///
    /// # Errors
    /// The inner store's.
    fn wrap_save_membership(&mut self, membership: &Membership) -> Result<(), StoreError> {
        self.inner_mut().save_membership(membership)
    }
    /// [`GroupStore::maintain`]; by default the inner store's.
    ///
    /// # Errors
    /// The inner store's.
    fn wrap_maintain(&mut self, now_us: u64) -> Result<(), StoreError> {
        self.inner_mut().maintain(now_us)
    }
}

impl<W: WrapStore> GroupStore for W {
    type Outcome = <W::Inner as GroupStore>::Outcome;

    fn hard_state(&self) -> HardState {
        self.inner().hard_state()
    }
    fn snapshot_meta(&self) -> SnapshotMeta {
        self.inner().snapshot_meta()
    }
    fn first_index(&self) -> u64 {
        self.inner().first_index()
    }
    fn last_index(&self) -> u64 {
        self.inner().last_index()
    }
    fn term(&self, index: u64) -> Result<u64, StoreError> {
        self.inner().term(index)
    }
    fn entries(&self, lo: u64, hi: u64, max_bytes: u64) -> Result<Vec<LogEntry>, StoreError> {
        self.inner().entries(lo, hi, max_bytes)
    }
    fn append(&mut self, entries: Vec<LogEntry>, durable: Durable) {
        self.wrap_append(entries, durable);
    }
    fn save_hard_state(&mut self, state: HardState, sync: bool) -> Result<(), StoreError> {
        self.wrap_save_hard_state(state, sync)
    }
    fn applied_index(&self) -> u64 {
        self.inner().applied_index()
    }
    fn apply(&mut self, entry: &LogEntry) -> Self::Outcome {
        self.wrap_apply(entry)
    }
    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        self.inner().snapshot()
    }
    fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        self.wrap_install_snapshot(snapshot)
    }
    fn membership(&self) -> Option<Membership> {
        self.inner().membership()
    }
    fn save_membership(&mut self, membership: &Membership) -> Result<(), StoreError> {
        self.wrap_save_membership(membership)
    }
    fn maintain(&mut self, now_us: u64) -> Result<(), StoreError> {
        self.wrap_maintain(now_us)
    }
}
