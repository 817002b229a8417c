//! Replicated metadata: the state machine half of the cluster's metadata group (users, tokens,
//! streams, topics, partitions, consumer groups and offsets, in one total order).
//!
//! In a cluster the metadata group's Raft log *is* the metadata log: each committed entry's
//! data is one encoded [`MetadataOp`](crate::MetadataOp) (or empty, the no-op a new leader appends), and
//! [`ReplicatedMetadata::apply`] applies it to the [`MetadataState`] every member holds. Apply
//! is deterministic (an operation the state refuses is refused on every member alike and
//! changes nothing), so proposers need no pending state of their own: the apply outcome is the
//! answer.
//!
//! # Exactly once across restarts
//!
//! The state is kept durably only as snapshots in `<dir>/`[`SNAPSHOT_FILE`]: the same header
//! and state as the single-node metadata snapshot (`next_seq` = the Raft index after the last
//! applied entry), then the entry's term (u64 LE) and a CRC-32C of everything before it. A
//! snapshot is written (atomically) every `snapshot_every` entries (on a thread of its own
//! with [`SnapshotWrites::Background`]) and whenever one is
//! installed from the leader. After a restart the state is the snapshot's, and the Raft layer
//! applies the committed entries after it again, in order: each entry is applied exactly once
//! to a state that has not seen it. The Raft log may drop entries only through the last
//! durable snapshot ([`ReplicatedMetadata::durable_through`]).
//!
//! Partition effects ([`Effect`]) are returned, not performed: in a cluster a partition is a
//! Raft group of its own, which the server creates, purges and removes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock, RwLockReadGuard};

use eddy_log::{create_dir_durable, write_atomic, Corruption, StorageBackend};

use crate::changes::{apply_recording, load_or_create_log_id, ChangeJournal};
use crate::error::{MetadataError, Result, StreamStoreError};
use crate::metadata::{decode_op, Effect, MetadataState};
use crate::store::snapshot::{decode_snapshot, encode_snapshot, read_snapshot_with_trailer};

/// The replicated metadata snapshot's file name (in the metadata group's directory).
pub const SNAPSHOT_FILE: &str = "metadata.snapshot";
/// Bytes after the snapshot proper: term (u64) and CRC-32C (u32) of everything before.
const TRAILER_LEN: usize = 12;

/// What applying one committed entry did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataApplied {
    /// The operation changed the state; these partition effects follow from it.
    Applied(Vec<Effect>),
    /// The state refused the operation (every member refuses it alike); nothing changed.
    Refused(MetadataError),
    /// A leader's no-op entry.
    Noop,
    /// The entry's data is not an operation (a bug in a proposer, or damage the log's
    /// checksums did not catch); skipped on every member alike.
    Undecodable,
}

/// A read handle on the applied state, shared with request handlers.
#[derive(Debug, Clone, Default)]
pub struct MetadataView(Arc<RwLock<MetadataState>>, Arc<Mutex<ChangeJournal>>);

impl MetadataView {
    /// A view of `state` alone (tests, and tools that inspect a state).
    pub fn of(state: MetadataState) -> Self {
        MetadataView(
            Arc::new(RwLock::new(state)),
            Arc::new(Mutex::new(ChangeJournal::new(0, 0))),
        )
    }

    /// Reads the change journal with the applied state it describes (consistent: `apply`
    /// records an entry's changes while it holds the state).
    pub fn read_changes<R>(&self, f: impl FnOnce(&ChangeJournal, &MetadataState) -> R) -> R {
        let state = self.guard();
        let journal = self.1.lock().unwrap_or_else(PoisonError::into_inner);
        f(&journal, &state)
    }

    /// Names the change journal's history `log_id` from now on (a cluster member: the
    /// cluster's id, so a cursor taken on one member holds on another; see
    /// [`ChangeJournal::set_log_id`]). A snapshot installed later keeps it.
    pub fn adopt_history(&self, log_id: u128) {
        self.1
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set_log_id(log_id);
    }

    fn set_journal(&self, journal: ChangeJournal) {
        *self.1.lock().unwrap_or_else(PoisonError::into_inner) = journal;
    }

    /// Reads the applied state.
    pub fn read<R>(&self, f: impl FnOnce(&MetadataState) -> R) -> R {
        f(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn guard(&self) -> RwLockReadGuard<'_, MetadataState> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn replace(&self, state: MetadataState) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = state;
    }
}

/// Where the periodic snapshots are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotWrites {
    /// On the applying thread, durable before `apply` returns (deterministic runs: the
    /// simulator, tests).
    Inline,
    /// On a thread of the machine's own: the applying thread (a cluster member's Raft
    /// thread, which sends every group's heartbeats) only encodes the state and hands the
    /// bytes over. The log may drop entries once the write is durable.
    Background,
}

/// The snapshot file and the highest index written to it: a write in progress holds it, so
/// an installed snapshot is never overwritten by an older one written late.
#[derive(Debug)]
struct SnapshotFile {
    backend: Arc<dyn StorageBackend>,
    dir: PathBuf,
    /// Index of the snapshot the file holds.
    written: Mutex<u64>,
    /// The same, readable without waiting for a write in progress.
    durable: AtomicU64,
}

impl SnapshotFile {
    /// Writes `bytes` (the snapshot at `index`) unless the file already holds a later one.
    fn write(&self, index: u64, bytes: &[u8]) -> Result<()> {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if index <= *written && index != 0 {
            return Ok(());
        }
        write_atomic(&*self.backend, &self.dir, SNAPSHOT_FILE, bytes)?;
        *written = index;
        self.durable.store(index, Ordering::Release);
        Ok(())
    }
}

/// The snapshot waiting for the writer (its index and bytes), and the writer's wake-up.
type NextSnapshot = Arc<(Mutex<Option<(u64, Vec<u8>)>>, Condvar)>;

/// The background writer: the newest snapshot not yet taken (an older one waiting is
/// replaced), and the thread that writes them.
#[derive(Debug)]
struct Writer {
    next: NextSnapshot,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(file: Arc<SnapshotFile>) -> std::io::Result<Self> {
        let next: NextSnapshot = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (queue, stopping) = (Arc::clone(&next), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("eddy-meta-snap".into())
            .spawn(move || loop {
                let job = {
                    let mut slot = queue.0.lock().unwrap_or_else(PoisonError::into_inner);
                    loop {
                        if let Some(job) = slot.take() {
                            break Some(job);
                        }
                        if stopping.load(Ordering::Acquire) {
                            break None;
                        }
                        slot = queue.1.wait(slot).unwrap_or_else(PoisonError::into_inner);
                    }
                };
                let Some((index, bytes)) = job else {
                    return;
                };
                if let Err(e) = file.write(index, &bytes) {
                    tracing::warn!(index, error = %e, "metadata snapshot failed; the Raft log keeps every entry since the last one");
                }
            })?;
        Ok(Writer {
            next,
            stop,
            thread: Some(thread),
        })
    }

    fn hand_over(&self, index: u64, bytes: Vec<u8>) {
        *self.next.0.lock().unwrap_or_else(PoisonError::into_inner) = Some((index, bytes));
        self.next.1.notify_one();
    }

    /// Forgets a waiting snapshot at or below `index` (an installed one replaces it).
    fn forget_through(&self, index: u64) {
        let mut slot = self.next.0.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_some_and(|(at, _)| *at <= index) {
            *slot = None;
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.next.1.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The metadata group's state on one member.
pub struct ReplicatedMetadata {
    file: Arc<SnapshotFile>,
    view: MetadataView,
    /// Index and term of the last entry applied (or of the snapshot installed).
    applied: (u64, u64),
    /// Index of the last snapshot taken (written, or handed to the writer; 0: none).
    snapshot_at: u64,
    snapshot_every: u64,
    /// The background writer (`None`: snapshots are written inline).
    writer: Option<Writer>,
}

impl std::fmt::Debug for ReplicatedMetadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicatedMetadata")
            .field("dir", &self.file.dir)
            .field("applied", &self.applied)
            .field("snapshot_at", &self.snapshot_at)
            .finish_non_exhaustive()
    }
}

impl ReplicatedMetadata {
    /// Opens the state in `dir` from its last snapshot (empty, at index 0, without one). A
    /// snapshot is written every `snapshot_every` applied entries (at least 1).
    ///
    /// # Errors
    /// The directory cannot be made, or a snapshot file exists but does not read back whole.
    pub fn open(
        backend: Arc<dyn StorageBackend>,
        dir: impl Into<PathBuf>,
        snapshot_every: u64,
    ) -> Result<Self> {
        Self::open_with(backend, dir, snapshot_every, SnapshotWrites::Inline)
    }

    /// [`open`](Self::open), with the periodic snapshots written `writes`.
    ///
    /// # Errors
    /// As [`open`](Self::open) (a writer thread that cannot start leaves the writes inline).
    pub fn open_with(
        backend: Arc<dyn StorageBackend>,
        dir: impl Into<PathBuf>,
        snapshot_every: u64,
        writes: SnapshotWrites,
    ) -> Result<Self> {
        let dir = dir.into();
        create_dir_durable(&*backend, &dir)?;
        let (state, applied) = match read(&*backend, &dir)? {
            Some((state, index, term)) => (state, (index, term)),
            None => (MetadataState::default(), (0, 0)),
        };
        // The change journal of this member's history (`GET_METADATA_CHANGES`): positions
        // are Raft indexes; what the snapshot covers is not held (a cursor before it is
        // expired), and the entries applied again after a restart are recorded again.
        let log_id = load_or_create_log_id(&*backend, &dir)?;
        let journal = ChangeJournal::new(log_id, applied.0);
        let file = Arc::new(SnapshotFile {
            backend,
            dir,
            written: Mutex::new(applied.0),
            durable: AtomicU64::new(applied.0),
        });
        let writer = match writes {
            SnapshotWrites::Inline => None,
            SnapshotWrites::Background => match Writer::start(Arc::clone(&file)) {
                Ok(writer) => Some(writer),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the metadata snapshot writer; snapshots are written on the applying thread");
                    None
                }
            },
        };
        Ok(ReplicatedMetadata {
            file,
            view: MetadataView(Arc::new(RwLock::new(state)), Arc::new(Mutex::new(journal))),
            applied,
            snapshot_at: applied.0,
            snapshot_every: snapshot_every.max(1),
            writer,
        })
    }

    /// The shared read handle.
    pub fn view(&self) -> MetadataView {
        self.view.clone()
    }

    /// Index and term of the last entry applied.
    pub fn applied(&self) -> (u64, u64) {
        self.applied
    }

    /// Through which index the state is durable without the log (its last snapshot on disk).
    pub fn durable_through(&self) -> u64 {
        self.file.durable.load(Ordering::Acquire)
    }

    /// Applies the committed entry at `index` (term `term`) whose data is `data`. Entries at
    /// or below the applied index are ignored (they are in the state already).
    ///
    /// # Errors
    /// Only the periodic snapshot's write; the entry is applied either way (the log keeps it
    /// until a later snapshot succeeds).
    pub fn apply(&mut self, index: u64, term: u64, data: &[u8]) -> (MetadataApplied, Result<()>) {
        if index <= self.applied.0 {
            return (MetadataApplied::Noop, Ok(()));
        }
        let outcome = if data.is_empty() {
            MetadataApplied::Noop
        } else {
            match decode_op(data) {
                Ok(op) => {
                    let mut state = self.view.0.write().unwrap_or_else(PoisonError::into_inner);
                    match apply_recording(&mut state, &op) {
                        Ok((effects, changes)) => {
                            // Recorded while the state is held: a reader sees both or neither.
                            self.view
                                .1
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .record(index, data, now_micros(), changes);
                            MetadataApplied::Applied(effects)
                        }
                        Err(e) => MetadataApplied::Refused(e),
                    }
                }
                Err(e) => {
                    tracing::error!(index, error = %e, "a committed metadata entry does not decode; skipped on every member");
                    MetadataApplied::Undecodable
                }
            }
        };
        self.applied = (index, term);
        let saved = if index - self.snapshot_at >= self.snapshot_every {
            self.save()
        } else {
            Ok(())
        };
        (outcome, saved)
    }

    /// The state at the applied index as snapshot bytes (what [`install`](Self::install)
    /// takes on another member).
    ///
    /// # Errors
    /// The state does not encode (it always does).
    pub fn snapshot(&self) -> Result<Vec<u8>> {
        let state = self.view.guard();
        encode(&state, self.applied.0, self.applied.1)
    }

    /// Replaces the state with a leader's snapshot (from [`snapshot`](Self::snapshot)),
    /// durably before returning. Returns the snapshot's index and term.
    ///
    /// # Errors
    /// The bytes are not a snapshot, or the file cannot be written.
    pub fn install(&mut self, bytes: &[u8]) -> Result<(u64, u64)> {
        let (state, index, term) = decode(&self.file.dir.join(SNAPSHOT_FILE), bytes)?;
        if let Some(writer) = &self.writer {
            writer.forget_through(index);
        }
        // Waits for a background write in progress; a later one of an older state is
        // then skipped.
        let mut written = self
            .file
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        write_atomic(&*self.file.backend, &self.file.dir, SNAPSHOT_FILE, bytes)?;
        *written = index;
        self.file.durable.store(index, Ordering::Release);
        drop(written);
        let log_id = self
            .view
            .1
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .log_id();
        self.view.replace(state);
        // The operations the snapshot covers were never seen here: a cursor before it is
        // expired (the client rebuilds from the current state).
        self.view.set_journal(ChangeJournal::new(log_id, index));
        self.applied = (index, term);
        self.snapshot_at = index;
        Ok((index, term))
    }

    /// Writes a snapshot of the applied state now.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn save(&mut self) -> Result<()> {
        let bytes = self.snapshot()?;
        let index = self.applied.0;
        self.snapshot_at = index;
        match &self.writer {
            Some(writer) => {
                writer.hand_over(index, bytes);
                Ok(())
            }
            None => self.file.write(index, &bytes),
        }
    }
}

fn encode(state: &MetadataState, index: u64, term: u64) -> Result<Vec<u8>> {
    let mut out = encode_snapshot(index + 1, state)?;
    out.extend_from_slice(&term.to_le_bytes());
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Checks and splits the trailer of a whole snapshot (`bytes`), returning index and term.
fn trailer(path: &Path, next_seq: u64, bytes: &[u8]) -> Result<(u64, u64)> {
    let at = bytes.len() - TRAILER_LEN;
    let crc = u32::from_le_bytes(bytes[at + 8..].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[..at + 8]) != crc {
        return Err(StreamStoreError::corrupt(
            path,
            at as u64,
            Corruption::FileChecksum,
        ));
    }
    let term = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let index = next_seq.checked_sub(1).ok_or_else(|| {
        StreamStoreError::corrupt(path, 16, Corruption::BadHeaderField("next index 0"))
    })?;
    Ok((index, term))
}

fn read(backend: &dyn StorageBackend, dir: &Path) -> Result<Option<(MetadataState, u64, u64)>> {
    let path = dir.join(SNAPSHOT_FILE);
    let Some((next, state, bytes)) = read_snapshot_with_trailer(backend, &path, TRAILER_LEN)?
    else {
        return Ok(None);
    };
    let (index, term) = trailer(&path, next, &bytes)?;
    Ok(Some((state, index, term)))
}

/// Decodes snapshot bytes received from a leader (checked like a file).
fn decode(path: &Path, bytes: &[u8]) -> Result<(MetadataState, u64, u64)> {
    let (next, state) = decode_snapshot(path, bytes, TRAILER_LEN)?;
    let (index, term) = trailer(path, next, bytes)?;
    Ok((state, index, term))
}

impl From<MetadataError> for MetadataApplied {
    fn from(e: MetadataError) -> Self {
        MetadataApplied::Refused(e)
    }
}

#[cfg(test)]
mod tests;

/// The wall clock in µs (the time a change record carries: when this member applied it).
fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}
