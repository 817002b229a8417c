//! A group's Raft log on an eddy [`Log`], its hard state beside it, and [`Replicated`]: that log
//! plus an application [`StateMachine`], which is the [`GroupStore`] the node runs.
//!
//! # Layout
//! A group's directory holds the log's segments and `raft.state`. One record per entry:
//!
//! | record field | holds |
//! |---|---|
//! | `seq` | the entry's index (contiguous; the log starts at or before the snapshot boundary + 1) |
//! | `count` | 1 |
//! | `tag` | the entry's term in bits 0-30 (a term of 2^31 or more fails the group); bit 31 ([`MEMBERSHIP_TAG`]) marks a membership change (ConfChangeV2) |
//! | `timestamp` | what the state machine says the entry's time is (a partition's batch time), never below the previous record's |
//! | payload | the entry's data, exactly as proposed |
//!
//! A membership change is a record like any entry, its tag marked with [`MEMBERSHIP_TAG`]; a
//! state machine that reads the log itself (a partition) must not take it for one of its
//! entries. The membership a change produced is saved in `raft.members` when it applies:
//! magic `"EDMEMB\0\0"`, the [`Membership`] encoding, then a CRC-32C of everything before
//! it, replaced atomically.
//!
//! `raft.state` (60 bytes, replaced atomically with [`write_atomic`]): magic `"EDRAFT\0\0"`,
//! version u32 (1), reserved u32 (0), then term, vote, commit, snapshot index and snapshot
//! term (u64 each), then a CRC-32C of the 56 bytes before it.
//!
//! # Durability
//! * Appends are group-committed by the log; their `durable` callback runs once the log
//!   acknowledged the last of them (a conflicting suffix is cut first, in the same queue).
//! * A changed term or vote is written before [`GroupStore::save_hard_state`] returns, so no
//!   message that depends on it leaves earlier. A commit-only change is not written by
//!   itself (the commit index is trusted after a restart only up to the applied index, see
//!   [`GroupStore`]); it rides along with the next write of `raft.state`.
//! * Compaction ([`GroupStore::maintain`]) writes the new snapshot boundary before any
//!   segment is deleted, and only ever through an index the machine reports durable.
//! * A snapshot is installed machine first (durable on return), then the log is reset to
//!   start after it, then `raft.state` records the boundary. Open reconciles a crash in
//!   between: a machine ahead of the boundary whose applied entry the log does not hold
//!   (with that term) had a snapshot installed, and the log is reset to it again.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use eddy_log::{
    create_dir_durable, write_atomic, Cache, Cipher, CommitPool, Completion, Corruption, IoOp, Log,
    LogConfig, LogError, OpenMode, OpenOptions, StorageBackend,
};

use crate::store::{Durable, GroupStore, StoreError};
use crate::types::{EntryKind, HardState, LogEntry, Membership, Snapshot, SnapshotMeta};

/// Name of the hard-state file in a group's directory.
pub const STATE_FILE: &str = "raft.state";
/// Name of the membership file in a group's directory (absent: the founding members).
pub const MEMBERS_FILE: &str = "raft.members";
const MEMBERS_MAGIC: [u8; 8] = *b"EDMEMB\0\0";
/// The bit of a record's tag that marks a membership change (the rest is the term).
pub const MEMBERSHIP_TAG: u32 = 1 << 31;

/// The record tag of an entry: its term, marked when it changes the group's members.
fn entry_tag(entry: &LogEntry) -> Result<u32, &'static str> {
    let term = u32::try_from(entry.term)
        .ok()
        .filter(|t| t & MEMBERSHIP_TAG == 0)
        .ok_or("term of 2^31 or more")?;
    match entry.kind {
        EntryKind::Normal => Ok(term),
        EntryKind::ConfChangeV2 => Ok(term | MEMBERSHIP_TAG),
        EntryKind::ConfChange => Err("a membership change in the engine's first encoding"),
    }
}

/// An entry's term and kind from its record's tag.
fn split_tag(tag: u32) -> (u64, EntryKind) {
    let kind = if tag & MEMBERSHIP_TAG == 0 {
        EntryKind::Normal
    } else {
        EntryKind::ConfChangeV2
    };
    (u64::from(tag & !MEMBERSHIP_TAG), kind)
}

fn encode_members(m: &Membership) -> Vec<u8> {
    let mut out = MEMBERS_MAGIC.to_vec();
    out.extend_from_slice(&m.encode());
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn decode_members(bytes: &[u8]) -> Option<Membership> {
    let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    if crc32c::crc32c(body).to_le_bytes() != crc || body.get(..8)? != MEMBERS_MAGIC {
        return None;
    }
    let (m, rest) = Membership::decode(&body[8..])?;
    rest.is_empty().then_some(m)
}
const STATE_MAGIC: [u8; 8] = *b"EDRAFT\0\0";
const STATE_VERSION: u32 = 1;
const STATE_LEN: usize = 60;

fn storage(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
    StoreError::Storage(e.into())
}

/// Encodes the hard state and snapshot boundary (the layout is in the module docs).
fn encode_state(hard: HardState, snap: SnapshotMeta) -> [u8; STATE_LEN] {
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
fn decode_state(bytes: &[u8]) -> Option<(HardState, SnapshotMeta)> {
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
fn on_complete<T: Send + 'static>(
    completion: Completion<T>,
    f: impl FnOnce(eddy_log::Result<T>) + Send + 'static,
) {
    type Callback<T> = Box<dyn FnOnce(eddy_log::Result<T>) + Send>;
    struct Notify<T>(Mutex<Option<(Completion<T>, Callback<T>)>>);
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
    membership: Option<Membership>,
}

impl std::fmt::Debug for RaftLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftLog")
            .field("dir", &self.dir)
            .field("hard", &self.hard)
            .field("snap", &self.snap)
            .field("bounds", &self.log.bounds())
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
        Self::open_sealed(backend, dir, config, pool, cache, None)
    }

    /// [`open`](Self::open), with entry payloads encrypted at rest by `cipher` (a partition
    /// group's messages; `raft.state` holds no payload and stays as it is).
    pub fn open_sealed(
        backend: Arc<dyn StorageBackend>,
        dir: impl Into<PathBuf>,
        config: LogConfig,
        pool: &CommitPool,
        cache: Arc<Cache>,
        cipher: Option<Cipher>,
    ) -> Result<Self, StoreError> {
        let dir = dir.into();
        // Durably: a group's directory, like every one eddy makes, survives a crash with it.
        create_dir_durable(&*backend, &dir).map_err(storage)?;
        let (hard, snap) = read_state(&*backend, &dir)?;
        let membership = read_members(&*backend, &dir)?;
        let (log, _report) = Log::open(
            Arc::clone(&backend),
            dir.clone(),
            config,
            pool,
            cache,
            OpenOptions {
                initial_seq: snap.index + 1,
                min_next_seq: snap.index + 1,
                cipher,
                ..OpenOptions::default()
            },
        )
        .map_err(storage)?;
        Ok(RaftLog {
            log,
            backend,
            dir,
            hard,
            snap,
            membership,
        })
    }

    /// The group's membership as last saved (`None`: its founding members).
    pub fn membership(&self) -> Option<&Membership> {
        self.membership.as_ref()
    }

    fn save_membership(&mut self, m: &Membership) -> Result<(), StoreError> {
        write_atomic(&*self.backend, &self.dir, MEMBERS_FILE, &encode_members(m))
            .map_err(storage)?;
        self.membership = Some(m.clone());
        Ok(())
    }

    /// The underlying log (a state machine may read its entries from it).
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The group's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The hard state as last saved.
    pub fn hard_state(&self) -> HardState {
        self.hard
    }

    /// Where the log starts: the snapshot or compacted prefix it follows.
    pub fn snapshot_meta(&self) -> SnapshotMeta {
        self.snap
    }

    fn write_state(&mut self) -> Result<(), StoreError> {
        write_atomic(
            &*self.backend,
            &self.dir,
            STATE_FILE,
            &encode_state(self.hard, self.snap),
        )
        .map_err(storage)
    }

    /// The last entry the log holds (acknowledged), or the snapshot boundary.
    pub fn last_index(&self) -> u64 {
        self.log
            .bounds()
            .next
            .saturating_sub(1)
            .max(self.snap.index)
    }

    /// The term of `index`, when the log holds it (the boundary's term for the boundary).
    ///
    /// # Errors
    /// `index` compacted away or not in the log.
    pub fn term(&self, index: u64) -> Result<u64, StoreError> {
        if index == self.snap.index {
            return Ok(self.snap.term);
        }
        if index < self.snap.index {
            return Err(StoreError::Compacted {
                first_index: self.snap.index + 1,
            });
        }
        match self.log.read_record(index).map_err(storage)? {
            Some(r) if r.meta.seq == index => Ok(split_tag(r.meta.tag).0),
            _ => Err(StoreError::Unavailable {
                index,
                last_index: self.last_index(),
            }),
        }
    }

    /// Records that the entries through `index` (applied, and durable in the state machine)
    /// are no longer needed, then deletes the sealed segments holding only such entries.
    fn compact_through(&mut self, index: u64) -> Result<(), StoreError> {
        if index <= self.snap.index || index > self.last_index() {
            return Ok(());
        }
        let term = self.term(index)?;
        self.snap = SnapshotMeta { index, term };
        // The boundary is durable before any entry below it goes.
        self.write_state()?;
        self.log
            .delete_sealed_while(|seg| seg.end <= index + 1)
            .map_err(storage)?;
        Ok(())
    }

    /// Starts the log over after `meta` (a snapshot the machine installed durably): the log
    /// is emptied first, then the boundary recorded.
    fn reset_to(&mut self, meta: SnapshotMeta) -> Result<(), StoreError> {
        self.log.purge(meta.index + 1).wait().map_err(storage)?;
        self.snap = meta;
        self.hard.commit = self.hard.commit.max(meta.index);
        self.write_state()
    }
}

fn read_members(
    backend: &dyn StorageBackend,
    dir: &Path,
) -> Result<Option<Membership>, StoreError> {
    let path = dir.join(MEMBERS_FILE);
    let file = match backend.open(&path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(storage(LogError::io(IoOp::Open, &path, e))),
    };
    let len = file
        .len()
        .map_err(|e| storage(LogError::io(IoOp::Len, &path, e)))?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= 64 * 1024)
        .ok_or_else(|| storage(LogError::corrupt(&path, 0, Corruption::Truncated)))?;
    let mut buf = vec![0u8; len];
    file.read_at(0, &mut buf)
        .map_err(|e| storage(LogError::io(IoOp::Read, &path, e)))?;
    decode_members(&buf)
        .map(Some)
        .ok_or_else(|| storage(LogError::corrupt(&path, 0, Corruption::FileChecksum)))
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
        Err(e) => return Err(storage(LogError::io(IoOp::Open, &path, e))),
    };
    let len = file
        .len()
        .map_err(|e| storage(LogError::io(IoOp::Len, &path, e)))?;
    let mut buf = [0u8; STATE_LEN];
    if len != STATE_LEN as u64 {
        // Written atomically: any other length is damage, not a torn write.
        return Err(storage(LogError::corrupt(&path, 0, Corruption::Truncated)));
    }
    file.read_at(0, &mut buf)
        .map_err(|e| storage(LogError::io(IoOp::Read, &path, e)))?;
    decode_state(&buf).ok_or_else(|| storage(LogError::corrupt(&path, 0, Corruption::FileChecksum)))
}

/// The application half of a replicated group.
pub trait StateMachine: Send {
    /// What applying an entry yields for its proposer.
    type Outcome: Send + 'static;
    /// The last entry applied (index and term), or the snapshot installed. After open: what
    /// the machine kept durably (its own snapshot, or what it persisted while applying), at
    /// least the log's compaction boundary.
    fn applied(&self) -> SnapshotMeta;
    /// Applies one committed entry (in index order; empty data: a leader's no-op).
    fn apply(&mut self, entry: &LogEntry) -> Self::Outcome;
    /// The state at the applied index, for a member that needs entries the log dropped.
    fn snapshot(&self) -> Result<Snapshot, StoreError>;
    /// What a member that needs entries the log dropped installs, given where the log starts
    /// now (`log_start`: the compaction boundary, every later entry still held). By default
    /// the state at the applied index ([`snapshot`](Self::snapshot)). A machine whose data
    /// lives in the log itself (a partition: the log is its message log) gives its state at
    /// the boundary instead, so the member is then sent every entry the log still holds and
    /// ends up holding the same data, not only what comes after the snapshot.
    fn snapshot_after(&self, log_start: SnapshotMeta) -> Result<Snapshot, StoreError> {
        let _ = log_start;
        self.snapshot()
    }
    /// Replaces the state with a snapshot, durably before returning (the log is reset to
    /// start after it right after).
    fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError>;
    /// The time stored with an entry's record (a partition's batch time), if it has one.
    fn entry_timestamp(&self, entry: &LogEntry) -> Option<u64> {
        let _ = entry;
        None
    }
    /// Through which index the log may be dropped now (retention, or a snapshot the machine
    /// persisted): never past what the machine keeps durably, since a restart resumes from
    /// there. Asked by [`GroupStore::maintain`].
    fn compactable_through(&mut self, now_us: u64) -> Option<u64> {
        let _ = now_us;
        None
    }
    /// Why this machine can no longer apply on this member (its own store failed a write and
    /// it stopped, so its state would fall behind the group's). Checked by
    /// [`GroupStore::maintain`]: the group then fails on this member as when its log fails, so
    /// leadership moves to a member that can apply, and a restart resumes it.
    fn health(&self) -> Result<(), StoreError> {
        Ok(())
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
    /// Joins a log and the machine applying it, finishing a snapshot installation a crash
    /// interrupted (see the module docs).
    pub fn open(mut log: RaftLog, machine: M) -> Result<Self, StoreError> {
        let applied = machine.applied();
        let snap = log.snap;
        if applied.index < snap.index {
            return Err(storage(format!(
                "{}: the state machine resumes at {} but the log was compacted through {}",
                log.dir.display(),
                applied.index,
                snap.index
            )));
        }
        if applied.index > snap.index {
            let held = match log.term(applied.index) {
                Ok(term) => term == applied.term,
                Err(StoreError::Unavailable { .. }) => false,
                Err(e) => return Err(e),
            };
            if !held {
                tracing::warn!(dir = %log.dir.display(), index = applied.index, "finishing a snapshot installation a crash interrupted");
                log.reset_to(applied)?;
            }
        }
        let first = log.log.bounds().first;
        if first > log.snap.index + 1 {
            return Err(storage(format!(
                "{}: the log starts at {first}, after its snapshot boundary {}",
                log.dir.display(),
                log.snap.index
            )));
        }
        Ok(Replicated { log, machine })
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
        self.log.last_index()
    }

    fn term(&self, index: u64) -> Result<u64, StoreError> {
        self.log.term(index)
    }

    fn entries(&self, lo: u64, hi: u64, max_bytes: u64) -> Result<Vec<LogEntry>, StoreError> {
        if lo <= self.log.snap.index {
            return Err(StoreError::Compacted {
                first_index: self.log.snap.index + 1,
            });
        }
        if hi <= lo {
            return Ok(Vec::new());
        }
        let records = self.log.log.read(lo, hi - lo, max_bytes).map_err(storage)?;
        let mut out = Vec::with_capacity(records.len());
        let mut size = 0u64;
        for r in records {
            let index = lo + out.len() as u64;
            if r.meta.seq >= hi {
                break;
            }
            if r.meta.seq != index || r.meta.count != 1 {
                return Err(storage(LogError::corrupt(
                    self.log.dir.clone(),
                    0,
                    Corruption::NonContiguous {
                        expected: index,
                        found: r.meta.seq,
                    },
                )));
            }
            let (term, kind) = split_tag(r.meta.tag);
            let entry = LogEntry {
                index,
                term,
                kind,
                data: r.payload,
            };
            size += entry.size();
            if !out.is_empty() && size > max_bytes {
                break;
            }
            out.push(entry);
        }
        if out.is_empty() {
            return Err(StoreError::Unavailable {
                index: lo,
                last_index: self.log.last_index(),
            });
        }
        Ok(out)
    }

    fn append(&mut self, entries: Vec<LogEntry>, durable: Durable) {
        let Some(first) = entries.first().map(|e| e.index) else {
            durable(Ok(()));
            return;
        };
        let log = &self.log.log;
        let next = log.next_seq_to_assign();
        if first < next {
            // A suffix another leader replaced: the cut is queued ahead of the new entries,
            // and a refused cut refuses them, so the last one's acknowledgement covers it.
            tracing::debug!(dir = %self.log.dir.display(), from = first, to = next, "replacing a conflicting suffix");
            let _cut = log.truncate_from(first);
        } else if first > next {
            durable(Err(StoreError::Unavailable {
                index: first,
                last_index: next - 1,
            }));
            return;
        }
        let mut last = None;
        for e in &entries {
            let tag = match entry_tag(e) {
                Ok(tag) => tag,
                Err(reason) => {
                    durable(Err(StoreError::InvalidSnapshot {
                        index: e.index,
                        reason,
                    }));
                    return;
                }
            };
            let at = self.machine.entry_timestamp(e).unwrap_or(0);
            let ts = at.max(log.last_timestamp());
            match log.append_assigned(e.index, ts, 1, tag, e.data.clone()) {
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
        // The engine asks for `sync` whenever its ready carries entries; those are made
        // durable by their append. Only a changed term or vote must be on disk now.
        let _ = sync;
        let term_or_vote = state.term != self.log.hard.term || state.vote != self.log.hard.vote;
        self.log.hard = state;
        if term_or_vote {
            self.log.write_state()?;
        }
        Ok(())
    }

    fn applied_index(&self) -> u64 {
        self.machine.applied().index
    }

    fn membership(&self) -> Option<Membership> {
        self.log.membership.clone()
    }

    fn save_membership(&mut self, membership: &Membership) -> Result<(), StoreError> {
        self.log.save_membership(membership)
    }

    fn apply(&mut self, entry: &LogEntry) -> M::Outcome {
        self.machine.apply(entry)
    }

    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        self.machine.snapshot_after(self.log.snap)
    }

    fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        self.machine.install_snapshot(snapshot)?;
        self.log.reset_to(snapshot.meta)
    }

    fn maintain(&mut self, now_us: u64) -> Result<(), StoreError> {
        self.machine.health()?;
        let Some(through) = self.machine.compactable_through(now_us) else {
            return Ok(());
        };
        let through = through.min(self.machine.applied().index);
        self.log.compact_through(through)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_round_trips_and_refuses_damage() {
        let hard = HardState {
            term: 7,
            vote: 2,
            commit: 40,
        };
        let snap = SnapshotMeta { index: 30, term: 6 };
        let bytes = encode_state(hard, snap);
        assert_eq!(decode_state(&bytes), Some((hard, snap)));
        for i in 0..STATE_LEN {
            let mut damaged = bytes;
            damaged[i] ^= 0x10;
            assert_eq!(decode_state(&damaged), None, "byte {i}");
        }
        assert_eq!(decode_state(&bytes[..59]), None);
    }
}
