//! The event shard machine: each event-store shard is a replicated group whose entries
//! are the shard's changes ([`Command`]s), applied in log order on every member
//! ([`EventStore::apply`]), so OCC, idempotency and multi-aggregate atomicity are decided once
//! per member with the same answer everywhere.
//!
//! Group ids: shard `s` is `GroupId(EVENT_GROUP_BASE + s)`; its Raft log lives in
//! `raft/events/shard-<s, 3 digits>/`, encrypted like the event store with
//! `--encryption-key`.
//!
//! A shard's record of an entry carries the entry's index, so a restarted member resumes its
//! group after the last entry its shard log holds ([`EventStore::replicated_through`]); the
//! shard log completes writes before its fdatasync (`Durability::Background`, see
//! `event::store_config`): an entry is applied only once this member's group log holds it
//! durably, so a restart applies again whatever the shard log had not synced, each entry
//! still once.
//!
//! **Compaction and snapshots.** Every [`EventCompaction::every`] applied entries a shard's
//! machine has its shard log synced and then lets the group's log go through that point (minus
//! [`EventCompaction::keep`] entries, so a follower a little behind still catches up from the
//! log). A member that needs entries the log dropped gets a snapshot whose bytes are only a
//! [`ShardSnapshot`] (the shard, the sequence number its log had reached and the chain tip):
//! before the engine sees it, the receiving member copies the shard's records it lacks from
//! the snapshot's sender, chunk by chunk, out of band ([`copy_shard`]; the server over the
//! replication port, the simulator from the sender's store), and makes them durable; installing
//! then only checks that the shard reached that point. A copied record must continue the
//! shard's hash chain, so the member held the same records as the sender before it; entries
//! the copied records cover are never applied again (`Refusal::AlreadyApplied`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use eddy_consensus::logstore::{RaftLog, StateMachine};
use eddy_consensus::{LogEntry, ProposeError, Snapshot, SnapshotMeta, StoreError};
pub use eddy_event_store::replicated::{
    decode_records_answer, encode_records_request, ShardSnapshot,
};
use eddy_event_store::replicated::{Command, EventApplied, ShardRecord};
use eddy_event_store::{EventStore, EventStoreError};
use eddy_log::{write_atomic, Completion, OpenMode, StorageBackend};

/// When an event shard's group log is compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventCompaction {
    /// Applied entries between two compactions (the shard log is synced before each).
    pub every: u64,
    /// Entries kept below the compaction point, for followers a little behind.
    pub keep: u64,
}

impl EventCompaction {
    /// Compaction every `every` entries, keeping a quarter of them.
    pub fn every(every: u64) -> Self {
        EventCompaction {
            every: every.max(1),
            keep: every / 4,
        }
    }
}

/// Default [`EventCompaction::every`]: the group log of a shard holds about this many entries
/// (tens of MiB of commands) beyond what its shard log already keeps.
pub const DEFAULT_EVENT_COMPACT_ENTRIES: u64 = 100_000;

/// Records fetched per chunk while copying a shard (about this many payload bytes).
pub const COPY_CHUNK_BYTES: u64 = 4 << 20;

/// Answers a peer's request for a shard's records (at most [`COPY_CHUNK_BYTES`] of them).
pub fn answer_records_request(store: &EventStore, request: &[u8]) -> bytes::Bytes {
    eddy_event_store::replicated::answer_records_request(store, request, COPY_CHUNK_BYTES)
}

/// Copies into `store` the records of `snapshot`'s shard it lacks, up to the snapshot's
/// position, chunk by chunk from `fetch(from_seq, until_seq)` (the sender's
/// [`EventStore::export_records`], at least one record per call), then makes them durable;
/// returns what it imported. Done before the engine installs the snapshot, off its thread in
/// the server.
///
/// # Errors
/// [`CopyError::Fetch`]: a fetch failed or returned nothing; [`CopyError::Local`]: the
/// records do not continue this shard (see [`EventStore::import_records`]), or its store
/// failed.
pub fn copy_shard(
    store: &EventStore,
    snapshot: &ShardSnapshot,
    mut fetch: impl FnMut(u64, u64) -> Result<Vec<ShardRecord>, String>,
) -> Result<CopyStats, CopyError> {
    let shard = snapshot.shard;
    let until = snapshot.position.next_seq;
    let mut stats = CopyStats::default();
    loop {
        let next = store
            .shard_position(shard)
            .map_err(|e| CopyError::Local(e.to_string()))?
            .next_seq;
        if next >= until {
            break;
        }
        let chunk = fetch(next, until).map_err(CopyError::Fetch)?;
        if chunk.is_empty() {
            return Err(CopyError::Fetch(format!(
                "the sender has no record of shard {shard} from {next} on"
            )));
        }
        for r in chunk.iter().filter(|r| r.seq >= next) {
            stats.records += 1;
            stats.bytes += r.payload.len() as u64;
        }
        let local = |e: EventStoreError| CopyError::Local(e.to_string());
        store
            .import_records(shard, chunk)
            .map_err(local)?
            .wait()
            .map_err(local)?;
    }
    store
        .sync_shard(shard)
        .wait()
        .map_err(|e| CopyError::Local(e.to_string()))?;
    Ok(stats)
}

/// Why a [`copy_shard`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyError {
    /// The records could not be fetched (the sender is gone, the connection broke, it no
    /// longer has them): the leader sends another snapshot, the copy is tried again.
    #[error("fetching the shard's records failed: {0}")]
    Fetch(String),
    /// This member's shard could not take them (its log failed, or its records are not the
    /// sender's): the shard stops on this member, as after a failed apply, until a restart.
    #[error("this member's shard could not take the copied records: {0}")]
    Local(String),
}

/// What one [`copy_shard`] brought over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Records imported.
    pub records: u64,
    /// Their payload bytes.
    pub bytes: u64,
}

/// The state machine of one event shard's group: the shard of the node's event store.
///
/// A record the store fails to write (an I/O error, a full disk) leaves this member without
/// it while its group moves on: from then on the machine applies nothing (every later entry
/// answers [`EventApplied::Stopped`]) so the shard's log never has a hole, its group fails on
/// this member at the next upkeep ([`StateMachine::health`]) so another member leads it, and
/// a restart resumes after the last record the shard holds.
pub struct EventShardMachine {
    shard: u32,
    store: Arc<EventStore>,
    /// Where [`INSTALLED_FILE`] goes: the group's directory on its backend.
    backend: Arc<dyn StorageBackend>,
    dir: PathBuf,
    applied: SnapshotMeta,
    stopped: Arc<AtomicBool>,
    compaction: EventCompaction,
    /// Where the last compaction was asked for (an applied index).
    compacted_at: u64,
    /// A sync of the shard log asked for at an applied index, not yet done.
    syncing: Option<(u64, Completion<(), EventStoreError>)>,
}

impl std::fmt::Debug for EventShardMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventShardMachine")
            .field("shard", &self.shard)
            .field("applied", &self.applied)
            .finish_non_exhaustive()
    }
}

fn storage(e: impl std::fmt::Display) -> StoreError {
    StoreError::Storage(e.to_string().into())
}

/// In an event shard group's directory: the last snapshot this member installed
/// ([`encode_installed`]), written durably before the group's log is reset to start after it. Installing resets the
/// log (emptied, then the boundary recorded): a crash in between leaves a log that starts
/// after a boundary it does not record, and the shard's records cannot say which entry they
/// stand for (entries after the last record may have been refused). This file can.
pub const INSTALLED_FILE: &str = "shard.installed";
use eddy_event_store::replicated::{decode_installed, encode_installed, INSTALLED_LEN};

/// The snapshot recorded in `dir`'s [`INSTALLED_FILE`], if any.
fn read_installed(
    backend: &dyn StorageBackend,
    dir: &std::path::Path,
) -> Result<Option<SnapshotMeta>, StoreError> {
    let path = dir.join(INSTALLED_FILE);
    let file = match backend.open(&path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(storage(format!("{}: {e}", path.display()))),
    };
    let mut buf = [0u8; INSTALLED_LEN];
    let len = file
        .len()
        .map_err(|e| storage(format!("{}: {e}", path.display())))?;
    if len != INSTALLED_LEN as u64 {
        return Err(storage(format!(
            "{}: damaged (written atomically)",
            path.display()
        )));
    }
    file.read_at(0, &mut buf)
        .map_err(|e| storage(format!("{}: {e}", path.display())))?;
    decode_installed(&buf)
        .map(|(index, term)| Some(SnapshotMeta { index, term }))
        .ok_or_else(|| storage(format!("{}: damaged (checksum)", path.display())))
}

impl EventShardMachine {
    /// The machine of `shard`, resuming after the last entry the shard's log holds (whose term
    /// `log` tells), or at the last snapshot it installed ([`INSTALLED_FILE`], in `log`'s
    /// directory on `backend`) when that is later.
    ///
    /// # Errors
    /// The shard's log holds an entry the group's log does not (the group's directory was
    /// lost while the event store's was kept), or cannot be read.
    pub fn open(
        store: Arc<EventStore>,
        shard: u32,
        log: &RaftLog,
        backend: Arc<dyn StorageBackend>,
        compaction: EventCompaction,
    ) -> Result<Self, StoreError> {
        let index = store.replicated_through(shard).map_err(storage)?;
        let dir = log.dir().to_path_buf();
        let installed = read_installed(&*backend, &dir)?;
        let boundary = log.snapshot_meta();
        // Resume at the last entry this member knows committed that the shard's records
        // cover (or at the boundary). Entries up to the last record are refused as already
        // applied, so resuming below it only costs their skipping, while an entry of the
        // log at the last record's index is not trusted beyond the known commit: records
        // copied from a peer for a snapshot that was then lost can reach past what this
        // member's log holds as committed (its entries there may be another term's).
        let known = index.min(log.hard_state().commit);
        let mut applied = match log.term(known) {
            Ok(term) if known > boundary.index => SnapshotMeta { index: known, term },
            _ => boundary,
        };
        if let Some(meta) = installed.filter(|m| m.index > applied.index.max(boundary.index)) {
            // A snapshot installed (its records copied and synced first) whose log reset a
            // crash interrupted: the group finishes it at open.
            tracing::warn!(
                shard,
                index = meta.index,
                "finishing an event shard snapshot installation a crash interrupted"
            );
            applied = meta;
        }
        if applied.index < index {
            tracing::debug!(
                shard,
                records_through = index,
                resumed = applied.index,
                "event shard resumes below its last record; the entries between are skipped"
            );
        }
        Ok(EventShardMachine {
            shard,
            store,
            backend,
            dir,
            applied,
            stopped: Arc::new(AtomicBool::new(false)),
            compaction,
            compacted_at: applied.index,
            syncing: None,
        })
    }
}

impl EventShardMachine {
    /// Set once this member stopped applying the shard (read by `/health`, which answers 503
    /// from then on, before the next upkeep fails the group).
    pub fn stopped_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stopped)
    }
}

impl StateMachine for EventShardMachine {
    type Outcome = EventApplied;

    fn applied(&self) -> SnapshotMeta {
        self.applied
    }

    fn apply(&mut self, entry: &LogEntry) -> EventApplied {
        self.applied = SnapshotMeta {
            index: entry.index,
            term: entry.term,
        };
        // A leader's no-op, or a change of the group's members (the engine's).
        if entry.data.is_empty() || entry.kind != eddy_consensus::EntryKind::Normal {
            return EventApplied::Nothing;
        }
        if self.stopped.load(Ordering::Acquire) {
            return EventApplied::Stopped;
        }
        // A record an earlier apply queued and the log then refused is known to nobody on a
        // follower (no proposer waits on its outcome): seen here, before anything is queued
        // after the hole.
        if self.store.shard_dropped_writes(self.shard) {
            tracing::error!(shard = self.shard, index = entry.index, "this member's shard log dropped a record it applied; it stops applying the shard until it restarts");
            self.stopped.store(true, Ordering::Release);
            return EventApplied::Stopped;
        }
        let command = match Command::decode(&entry.data) {
            Ok(c) => c,
            Err(kind) => {
                // Every member has the same bytes: a command this version cannot read stops
                // the shard here rather than skip it.
                tracing::error!(shard = self.shard, index = entry.index, error = %kind, "an event entry does not decode; this member stops applying the shard");
                self.stopped.store(true, Ordering::Release);
                return EventApplied::Stopped;
            }
        };
        let stopped = Arc::clone(&self.stopped);
        let (shard, index) = (self.shard, entry.index);
        EventApplied::Applied(self.store.apply(self.shard, entry.index, command).map(
            move |r| {
                if let Err(e) = &r {
                    if !matches!(e, EventStoreError::Refused(_)) {
                        tracing::error!(shard, index, error = %e, "an event entry could not be stored; this member stops applying the shard until it restarts");
                        stopped.store(true, Ordering::Release);
                    }
                }
                r
            },
        ))
    }

    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        if self.stopped.load(Ordering::Acquire) {
            return Err(StoreError::SnapshotTemporarilyUnavailable);
        }
        // On the consensus thread, after the applied entry: every record it queued is below
        // this position.
        let position = self.store.shard_position(self.shard).map_err(storage)?;
        Ok(Snapshot {
            meta: self.applied,
            data: ShardSnapshot {
                shard: self.shard,
                position,
            }
            .encode(),
        })
    }

    fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        let invalid = |reason| StoreError::InvalidSnapshot {
            index: snapshot.meta.index,
            reason,
        };
        let wanted = ShardSnapshot::decode(&snapshot.data)
            .ok_or_else(|| invalid("not an event shard snapshot"))?;
        if wanted.shard != self.shard {
            return Err(invalid("a snapshot of another shard"));
        }
        // The records were copied (and synced) before the engine got the snapshot. The shard
        // may be further on, holding records copied for a later snapshot that was lost: then
        // it must hold the same records up to this one's position (the entries after it that
        // the records cover are skipped as already applied).
        let position = self.store.shard_position(self.shard).map_err(storage)?;
        let reached = position == wanted.position
            || (position.next_seq > wanted.position.next_seq
                && self
                    .store
                    .chain_tip_before(self.shard, wanted.position.next_seq)
                    .map_err(storage)?
                    == Some(wanted.position.tip));
        if !reached {
            return Err(storage(format!(
                "event shard {}: installing the snapshot at entry {} needs the shard's log at \
                 record {}, but it is at {} (its records were not copied, or differ)",
                self.shard, snapshot.meta.index, wanted.position.next_seq, position.next_seq
            )));
        }
        // Durable before the log is reset (see INSTALLED_FILE).
        write_atomic(
            &*self.backend,
            &self.dir,
            INSTALLED_FILE,
            &encode_installed(snapshot.meta.index, snapshot.meta.term),
        )
        .map_err(storage)?;
        self.applied = snapshot.meta;
        self.compacted_at = snapshot.meta.index;
        self.syncing = None;
        Ok(())
    }

    /// Every [`EventCompaction::every`] entries: the shard log is synced (without waiting on
    /// this thread), and once it is, the group's log may go through that point less
    /// [`EventCompaction::keep`]. A restart resumes after the last record the shard log
    /// holds, so the log must keep every entry after the last synced record.
    fn compactable_through(&mut self, _now_us: u64) -> Option<u64> {
        if let Some((at, done)) = &mut self.syncing {
            let at = *at;
            let result = done.try_take()?;
            self.syncing = None;
            return match result {
                Ok(()) => Some(at.saturating_sub(self.compaction.keep)),
                Err(e) => {
                    tracing::warn!(shard = self.shard, error = %e, "event shard sync before compaction failed");
                    None
                }
            };
        }
        if self.stopped.load(Ordering::Acquire)
            || self.applied.index < self.compacted_at + self.compaction.every
        {
            return None;
        }
        self.compacted_at = self.applied.index;
        self.syncing = Some((self.applied.index, self.store.sync_shard(self.shard)));
        None
    }

    /// A stopped shard fails its group on this member: leadership moves to a member whose
    /// shard applies, instead of this one answering every write with an error until it is
    /// restarted.
    fn health(&self) -> Result<(), StoreError> {
        if self.store.shard_dropped_writes(self.shard) || self.store.shard_log_failed(self.shard) {
            self.stopped.store(true, Ordering::Release);
        }
        if self.stopped.load(Ordering::Acquire) {
            return Err(storage(format!(
                "event shard {} stopped applying after a failed write; restart this member to \
                 resume it",
                self.shard
            )));
        }
        Ok(())
    }
}

/// Why a change was not taken.
#[derive(Debug, thiserror::Error)]
pub enum EventClusterError {
    /// Another member leads the shard's group (its client address, when known).
    #[error("this node does not lead the shard; the leader is {leader_address:?}")]
    NotLeader {
        /// The leader's advertised client address.
        leader_address: Option<String>,
    },
    /// The group could not commit it now (no majority reachable, too much uncommitted, the
    /// member stopping applying); nothing is known to have changed, the client may retry.
    #[error("the cluster cannot take the change now: {0}")]
    Unavailable(String),
    /// The store's answer.
    #[error(transparent)]
    Store(#[from] EventStoreError),
}

/// What a change whose proposal its group refused with `e` is answered: not the leader (with
/// `leader_address`, the leader's client address) when leadership moved or the entry was
/// superseded, otherwise unavailable (its outcome is unknown: it may still commit).
pub fn refused(
    e: &ProposeError,
    leader_address: impl FnOnce() -> Option<String>,
) -> EventClusterError {
    match e {
        ProposeError::NotLeader { .. } | ProposeError::Superseded => EventClusterError::NotLeader {
            leader_address: leader_address(),
        },
        e => EventClusterError::Unavailable(e.to_string()),
    }
}

/// What a change applied on a member whose shard stopped (its store failed) is answered.
pub fn stopped(shard: u32) -> EventClusterError {
    EventClusterError::Unavailable(format!(
        "this member stopped applying event shard {shard} after a storage failure"
    ))
}
