//! A group's Raft log on an eddy [`Log`], its hard state beside it, and [`Replicated`]: that log
//! plus an application [`StateMachine`], which is the [`GroupStore`] the node runs.
//!
//! # Layout
//! A group's directory holds the log's segments and `raft.state`. One record per entry:
//!
//! | record field | holds |
//! |---|---|
//! | `seq` | the entry's index (contiguous; the log starts after the snapshot boundary) |
//! | `count` | 1 |
//! | `tag` | the entry's term (a term beyond `u32::MAX` fail-stops the group) |
//! | `timestamp` | what the state machine says the entry's time is (a partition's batch time), never below the previous record's |
//! | payload | the entry's data, exactly as proposed |
//!
//! Conf-change entries never occur (membership is static); one arriving fails the group.
//!
//! `raft.state` (48 bytes, replaced atomically): magic `"EDRAFT\0\0"`, version u32 (1), reserved
//! u32, term u64, vote u64, commit u64, snapshot index u64, snapshot term u64... then a CRC-32C
//! of the bytes before it; see [`encode_state`]. Term and vote are written before any message
//! that depends on them leaves; the commit index is written lazily (it is recomputed after a
//! restart), the snapshot boundary before the segments it replaces are deleted.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use eddy_log::{
    write_atomic, Cache, CommitPool, Completion, Log, LogConfig, LogError, OpenMode,
    OpenOptions, StorageBackend,
};

use crate::store::{Durable, GroupStore, StoreError};
use crate::types::{EntryKind, HardState, LogEntry, Snapshot, SnapshotMeta};

/// Name of the hard-state file in a group's directory.
pub const STATE_FILE: &str = "raft.state";
const STATE_MAGIC: [u8; 8] = *b"EDRAFT\0\0";
const STATE_VERSION: u32 = 1;
const STATE_LEN: usize = 60;

fn storage(e: LogError) -> StoreError {
    StoreError::Storage(Box::new(e))
}

/// Encodes the hard state and snapshot boundary.
pub fn encode_state(hard: HardState, snap: SnapshotMeta) -> [u8; STATE_LEN] {
    let mut out = [0u8; STATE_LEN];
    out[0..8].copy_from_slice(&STATE_MAGIC);
    out[8..12].copy_from_slice(&STATE_VERSION.to_le_bytes());
    out[16..24].copy_from_slice(&hard.term.to_le_bytes());
    out[24..32].copy_from_slice(&hard.vote.to_le_bytes());
    out[32..40].copy_from_slice(&hard.commit.to_le_bytes());
    out[40..48].copy_from_slice(&snap.index.to_le_bytes());
    out[48..56].copy_from_slice(&snap.term.to_le_bytes());
    let crc = crc32c::crc32c(&out[..56]);
    out[56..60].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes [`encode_state`]'s bytes; `None` when they are not a valid state.
pub fn decode_state(bytes: &[u8]) -> Option<(HardState, SnapshotMeta)> {
    if bytes.len() != STATE_LEN || bytes[0..8] != STATE_MAGIC {
        return None;
    }
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    if u32_at(8) != STATE_VERSION || crc32c::crc32c(&bytes[..56]) != u32_at(56) {
        return None;
    }
    Some((
        HardState {
            term: u64_at(16),
            vote: u64_at(24),
            commit: u64_at(32),
        },
        SnapshotMeta {
            index: u64_at(40),
            term: u64_at(48),
        },
    ))
}

/// Calls `f` with the completion's result once it resolves (on the thread that resolves it, or
/// at once when it already has).
pub(crate) fn on_complete<T: Send + 'static>(
    completion: Completion<T>,
    f: impl FnOnce(eddy_log::Result<T>) + Send + 'static,
) {
    type Slot<T> = Mutex<Option<(Completion<T>, Box<dyn FnOnce(eddy_log::Result<T>) + Send>)>>;
    struct Notify<T>(Slot<T>);
    impl<T: Send + 'static> Notify<T> {
        fn poll(self: &Arc<Self>) {
            let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            let Some((completion, _)) = slot.as_mut() else {
                return;
            };
            let waker = Waker::from(Arc::clone(self));
            let mut cx = Context::from_waker(&waker);
            if let Poll::Ready(result) = std::pin::Pin::new(completion).poll(&mut cx) {
                let (_, f) = slot.take().expect("checked");
                drop(slot);
                f(result);
            }
        }
    }
    impl<T: Send + 'static> Wake for Notify<T> {
        fn wake(self: Arc<Self>) {
            self.poll();
        }
    }
    use std::future::Future as _;
    let notify = Arc::new(Notify(Mutex::new(Some((completion, Box::new(f) as _)))));
    notify.poll();
}

/// A group's Raft log on an eddy [`Log`] and its hard state.
pub struct RaftLog {
    log: Log,
    backend: Arc<dyn StorageBackend>,
    dir: PathBuf,
    hard: HardState,
    snap: SnapshotMeta,
    /// The commit index changed since `raft.state` was written.
    dirty: bool,
    last_timestamp: u64,
}

impl std::fmt::Debug for RaftLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftLog")
            .field("dir", &self.dir)
            .field("hard", &self.hard)
            .field("snap", &self.snap)
            .finish_non_exhaustive()
    }
}

impl RaftLog {
    /// Opens (creating if needed) the group's log and state in `dir`.
    pub fn open(
        backend: Arc<dyn StorageBackend>,
        dir: impl Into<PathBuf>,
        config: LogConfig,
        pool: &CommitPool,
        cache: Arc<Cache>,
    ) -> Result<Self, StoreError> {
        let dir = dir.into();
        backend
            .create_dir_all(&dir)
            .map_err(|e| storage(LogError::io(eddy_log::IoOp::CreateDir, &dir, e)))?;
        let (hard, snap) = read_state(&*backend, &dir)?;
        let (log, _report) = Log::open(
            Arc::clone(&backend),
            dir.clone(),
            config,
            pool,
            cache,
            OpenOptions {
                initial_seq: snap.index + 1,
                min_next_seq: snap.index + 1,
                ..OpenOptions::default()
            },
        )
        .map_err(storage)?;
        let last_timestamp = match log.bounds().next.checked_sub(1) {
            Some(last) if last > snap.index => log
                .read_record(last)
                .map_err(storage)?
                .map_or(0, |r| r.meta.timestamp),
            _ => 0,
        };
        Ok(RaftLog {
            log,
            backend,
            dir,
            hard,
            snap,
            dirty: false,
            last_timestamp,
        })
    }

    /// The underlying log (a state machine reads its entries from it).
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The group's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn write_state(&mut self) -> Result<(), StoreError> {
        write_atomic(
            &*self.backend,
            &self.dir,
            STATE_FILE,
            &encode_state(self.hard, self.snap),
        )
        .map_err(storage)?;
        self.dirty = false;
        Ok(())
    }

    /// Writes a commit index saved lazily, if any.
    pub fn persist(&mut self) -> Result<(), StoreError> {
        if self.dirty {
            self.write_state()?;
        }
        Ok(())
    }

    /// Records that entries through `index` (applied by the state machine) are replaced by a
    /// snapshot, then deletes the sealed segments holding only such entries.
    pub fn compact_through(&mut self, index: u64) -> Result<(), StoreError> {
        if index <= self.snap.index || index > self.last_durable() {
            return Ok(());
        }
        let term = self.term(index)?;
        self.snap = SnapshotMeta { index, term };
        self.write_state()?;
        self.log
            .delete_sealed_while(|seg| seg.end <= index + 1)
            .map_err(storage)?;
        Ok(())
    }

    fn last_durable(&self) -> u64 {
        self.log.bounds().next.saturating_sub(1).max(self.snap.index)
    }

    /// The timestamp the next record gets for an entry the state machine dates `at`.
    fn timestamp(&mut self, at: Option<u64>) -> u64 {
        let ts = at.unwrap_or(0).max(self.last_timestamp);
        self.last_timestamp = ts;
        ts
    }
}

fn read_state(
    backend: &dyn StorageBackend,
    dir: &Path,
) -> Result<(HardState, SnapshotMeta), StoreError> {
    let path = dir.join(STATE_FILE);
    let file = match backend.open(&path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((HardState::default(), SnapshotMeta::default()));
        }
        Err(e) => return Err(storage(LogError::io(eddy_log::IoOp::Open, &path, e))),
    };
    let mut buf = [0u8; STATE_LEN];
    let len = file
        .len()
        .map_err(|e| storage(LogError::io(eddy_log::IoOp::Len, &path, e)))?;
    if len != STATE_LEN as u64 {
        return Err(StoreError::InvalidSnapshot {
            index: 0,
            reason: "raft.state has the wrong length",
        });
    }
    file.read_at(0, &mut buf)
        .map_err(|e| storage(LogError::io(eddy_log::IoOp::Read, &path, e)))?;
    decode_state(&buf).ok_or(StoreError::InvalidSnapshot {
        index: 0,
        reason: "raft.state fails its checksum",
    })
}

/// The application half of a replicated group.
pub trait StateMachine: Send {
    /// What applying an entry yields for its proposer.
    type Outcome: Send + 'static;
    /// Last applied index (after open: the snapshot's, or what the machine persisted itself).
    fn applied_index(&self) -> u64;
    /// Applies one committed entry (in index order; empty data: a leader's no-op).
    fn apply(&mut self, entry: &LogEntry) -> Self::Outcome;
    /// The state at the applied index, for a member that needs entries the log dropped.
    fn snapshot(&self) -> Result<Snapshot, StoreError>;
    /// Replaces the state with a snapshot (the log was reset to start after it).
    fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError>;
    /// The time stored with an entry's record (a partition's batch time), if it has one.
    fn entry_timestamp(&self, entry: &LogEntry) -> Option<u64> {
        let _ = entry;
        None
    }
    /// Through which index the log may be dropped now (retention, or a snapshot the machine
    /// persisted); asked by [`GroupStore::maintain`].
    fn compactable_through(&mut self, now_us: u64) -> Option<u64> {
        let _ = now_us;
        None
    }
}

/// A Raft log plus a state machine: the store of one replicated group.
pub struct Replicated<M> {
    log: RaftLog,
    machine: M,
}

impl<M> std::fmt::Debug for Replicated<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicated")
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl<M: StateMachine> Replicated<M> {
    /// Joins a log and the machine applying it.
    pub fn new(log: RaftLog, machine: M) -> Self {
        Replicated { log, machine }
    }

    /// The state machine.
    pub fn machine(&self) -> &M {
        &self.machine
    }

    /// The Raft log.
    pub fn raft_log(&self) -> &RaftLog {
        &self.log
    }
}

impl<M: StateMachine> GroupStore for Replicated<M> {
    type Outcome = M::Outcome;

    fn hard_state(&self) -> HardState {
        self.log.hard
    }

    fn snapshot_meta(&self) -> SnapshotMeta {
        self.log.snap
    }

    fn first_index(&self) -> u64 {
        self.log.snap.index + 1
    }

    fn last_index(&self) -> u64 {
        self.log.last_durable()
    }

    fn term(&self, index: u64) -> Result<u64, StoreError> {
        if index == self.log.snap.index {
            return Ok(self.log.snap.term);
        }
        if index < self.log.snap.index {
            return Err(StoreError::Compacted {
                first_index: self.log.snap.index + 1,
            });
        }
        match self.log.log.read_record(index).map_err(storage)? {
            Some(r) if r.meta.seq == index => Ok(u64::from(r.meta.tag)),
            _ => Err(StoreError::Unavailable {
                index,
                last_index: self.log.last_durable(),
            }),
        }
    }

    fn entries(&self, lo: u64, hi: u64, max_bytes: u64) -> Result<Vec<LogEntry>, StoreError> {
        if lo <= self.log.snap.index {
            return Err(StoreError::Compacted {
                first_index: self.log.snap.index + 1,
            });
        }
        let records = self
            .log
            .log
            .read(lo, hi - lo, max_bytes)
            .map_err(storage)?;
        let mut out = Vec::with_capacity(records.len());
        let mut expected = lo;
        for r in records {
            if r.meta.seq >= hi {
                break;
            }
            if r.meta.seq != expected {
                // A hole: the entries are not there (deleted under us): report compaction.
                return Err(StoreError::Compacted {
                    first_index: r.meta.seq,
                });
            }
            expected += 1;
            out.push(LogEntry {
                index: r.meta.seq,
                term: u64::from(r.meta.tag),
                kind: EntryKind::Normal,
                data: r.payload,
            });
        }
        if out.is_empty() && lo < hi {
            return Err(StoreError::Unavailable {
                index: lo,
                last_index: self.log.last_durable(),
            });
        }
        Ok(out)
    }

    fn append(&mut self, entries: Vec<LogEntry>, durable: Durable) {
        let first = entries[0].index;
        let next = self.log.log.next_seq_to_assign();
        if first < next {
            // An uncommitted suffix another leader replaced: ordered before the appends.
            let _ = self.log.log.truncate_from(first);
            self.log.last_timestamp = 0;
        } else if first > next {
            durable(Err(StoreError::Unavailable {
                index: first,
                last_index: next - 1,
            }));
            return;
        }
        let mut last = None;
        for e in &entries {
            if e.kind != EntryKind::Normal {
                durable(Err(StoreError::InvalidSnapshot {
                    index: e.index,
                    reason: "membership changes are not supported (static membership)",
                }));
                return;
            }
            let Ok(tag) = u32::try_from(e.term) else {
                durable(Err(StoreError::InvalidSnapshot {
                    index: e.index,
                    reason: "term beyond u32::MAX",
                }));
                return;
            };
            let at = self.machine.entry_timestamp(e);
            let ts = self.log.timestamp(at);
            match self
                .log
                .log
                .append_assigned(e.index, ts, 1, tag, e.data.clone())
            {
                Ok(c) => last = Some(c),
                Err(err) => {
                    durable(Err(storage(err)));
                    return;
                }
            }
        }
        if let Some(last) = last {
            on_complete(last, move |r| durable(r.map(|_| ()).map_err(storage)));
        }
    }

    fn save_hard_state(&mut self, state: HardState, sync: bool) -> Result<(), StoreError> {
        let term_or_vote = state.term != self.log.hard.term || state.vote != self.log.hard.vote;
        self.log.hard = state;
        if sync || term_or_vote {
            self.log.write_state()
        } else {
            self.log.dirty = true;
            Ok(())
        }
    }

    fn applied_index(&self) -> u64 {
        self.machine.applied_index().max(self.log.snap.index)
    }

    fn apply(&mut self, entry: &LogEntry) -> M::Outcome {
        self.machine.apply(entry)
    }

    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        self.machine.snapshot()
    }

    fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        self.log.snap = snapshot.meta;
        self.log.hard.commit = self.log.hard.commit.max(snapshot.meta.index);
        self.log.write_state()?;
        self.log
            .log
            .purge(snapshot.meta.index + 1)
            .wait()
            .map_err(storage)?;
        self.log.last_timestamp = 0;
        self.machine.install_snapshot(snapshot)
    }

    fn maintain(&mut self, now_us: u64) -> Result<(), StoreError> {
        self.log.persist()?;
        if let Some(through) = self.machine.compactable_through(now_us) {
            self.log.compact_through(through)?;
        }
        Ok(())
    }
}
