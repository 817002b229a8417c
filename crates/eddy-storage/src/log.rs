//! The segmented, checksummed, append-only log: the one log machinery of eddy.
//!
//! A [`Log`] is a directory of segment files (`<base:020>.log`) with a sparse index beside each
//! (`<base:020>.index`). Records carry a first sequence number and a count of sequence numbers
//! they cover (a partition record is one message batch: its sequence numbers are the message
//! offsets). Sequence numbers are contiguous inside a segment; between segments they may jump
//! forward (never backward). The byte layouts are in the crate docs.
//!
//! # Writing
//!
//! [`Log::append_with`] assigns the next sequence number and a non-decreasing timestamp under
//! the log's admission lock, lets the caller build (stamp) the payload with them, and queues the
//! record. The log's writer (one turn at a time on the [`CommitPool`])
//! drains the queue, writes every pending record in one vectored append, issues **one**
//! `fdatasync`, publishes the records to readers and completes every acknowledgement. With
//! [`Durability::Background`] the writer acknowledges after the write and syncs when the
//! unsynced records or bytes reach the configured bounds (or on [`Log::flush`]).
//!
//! * An fsync error is fatal for the log (fail-stop): every pending and future write is refused
//!   with [`StorageError::LogFailed`] and nothing more is acknowledged; the page cache is never
//!   trusted again.
//! * `ENOSPC` (or `EDQUOT`) while appending truncates the partial write away and refuses the
//!   group and everything queued behind it with [`StorageError::NoSpace`]; acknowledged records
//!   are untouched and the log keeps accepting writes once space returns.
//!
//! # Recovery
//!
//! On open every segment is checked (fully with [`VerifyOnOpen::Full`], the default; from the
//! last index entry with [`VerifyOnOpen::Tail`]). A damaged record in the active segment is a
//! *torn tail* when no later record proves that its bytes had been synced (each record header
//! carries the file length that was durable when it was written); the tail is truncated. If a
//! later record proves it, the damage is *interior corruption* and open refuses with
//! [`StorageError::Corrupt`] naming the file and byte offset, unless [`LogConfig::repair`] is
//! set. Sealed segments are synced before the next segment is created, so any damage in them
//! is corruption. Indexes are derived data: an index that is missing, torn, zero-filled or
//! inconsistent with its segment is rebuilt from the segment.
//!
//! # Rewriting sealed segments
//!
//! [`Log::rewrite_sealed`] replaces the payloads of a sealed segment's records (the event
//! store elides the bytes of dead batches this way) without changing any record's sequence
//! number, count, timestamp or tag. The new version is written beside the old one under a
//! temporary name, synced, and renamed over it, so the segment file is always one complete
//! version or the other; recovery needs nothing new (leftover `*.tmp` files are removed and a
//! missing index is rebuilt). Readers find a segment's file through a cache key that changes
//! with every rewrite: a reader holding the old version finishes on it, one whose version is
//! gone takes fresh targets and reads the new one.
//!
//! # Invariants
//!
//! 1. Inside a segment, record `i + 1` starts at sequence `seq_i + count_i`; the first record
//!    starts at the segment's base (its file name and header).
//! 2. Segment bases increase; segment `i + 1`'s base is at least segment `i`'s end.
//! 3. Only the last segment (the active one) is ever appended to; a segment with a successor is
//!    sealed, and was synced before its successor was created. A sealed segment's file is
//!    never modified: a rewrite installs a new file whose records carry the same sequence
//!    numbers, counts, timestamps and tags (its record headers carry `synced_len` 0).
//! 4. Readers never see a record before it is acknowledged: records are published to the read
//!    view after their fdatasync (after their write with [`Durability::Background`]).
//! 5. Timestamps are non-decreasing along the log.
//! 6. A record header's `synced_len` is at most its own position, and every byte below it was
//!    durable when the record was written.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};

use bytes::{Bytes, BytesMut};

use crate::cache::{Cache, SealedSegment};
use crate::completion::{completion, Completer, Completion};
use crate::error::{Corruption, IoOp, Result, StorageError};
use crate::file::{OpenMode, StorageBackend, StorageFile};
use crate::format::{
    decode_index_header, decode_segment_header, encode_index_header, encode_segment_header,
    index_file_name, parse_file_name, segment_file_name, IndexEntry, IndexKind, RecordHeader,
    INDEX_ENTRY_LEN, INDEX_HEADER_LEN, MAX_RECORD_COUNT, MAX_RECORD_PAYLOAD, RECORD_HEADER_LEN,
    RECORD_MAGIC, SEGMENT_HEADER_LEN,
};
use crate::pool::{CommitPool, Job, PoolShared};

/// Smallest accepted segment size (tiny segments are for tests).
pub const MIN_SEGMENT_SIZE: u64 = 128;
/// Largest accepted segment size: 4 GiB.
pub const MAX_SEGMENT_SIZE: u64 = 4 * 1024 * 1024 * 1024;
/// Default segment size: 1 GiB, as Iggy.
pub const DEFAULT_SEGMENT_SIZE: u64 = 1024 * 1024 * 1024;
/// Default distance in bytes between sparse index entries.
pub const DEFAULT_INDEX_INTERVAL: u64 = 64 * 1024;
/// Default bound on the bytes one group commit writes (a larger record is written alone).
pub const DEFAULT_MAX_GROUP_BYTES: u64 = 16 * 1024 * 1024;
/// Appends block while this many record bytes (headers included) are queued on one log
/// (back-pressure).
pub const MAX_QUEUED_BYTES: u64 = 256 * 1024 * 1024;
/// Read size used by recovery scans and torn-tail searches.
const SCAN_CHUNK: u64 = 1024 * 1024;
/// Smallest read issued by the read path.
const MIN_READ_CHUNK: u64 = 64 * 1024;
/// Read size of [`Log::read_record`]'s walk from an index entry.
const POINT_READ_CHUNK: u64 = 8 * 1024;
/// Largest read the read path issues at once (a larger record is read alone).
const MAX_READ_CHUNK: u64 = 16 * 1024 * 1024;

/// When an append is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// After fdatasync of its bytes (group-committed). eddy's default.
    Fsync,
    /// After the write reaches the page cache; the writer syncs once this many records or bytes
    /// are unsynced (Iggy's `messages_required_to_save` / `size_of_messages_required_to_save`),
    /// and on [`Log::flush`], rolls and purges.
    Background {
        /// Sync when at least this many records are unsynced (at least 1).
        max_unsynced_records: u64,
        /// Sync when at least this many bytes are unsynced (at least 1).
        max_unsynced_bytes: u64,
    },
}

/// How much of the log is verified when it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyOnOpen {
    /// Read every record of every segment and verify both checksums; cross-check every index
    /// entry (rebuilding only indexes that disagree).
    Full,
    /// Trust a sealed segment whose index verifies and carries a seal entry matching the file
    /// length; scan the active segment from its last index entry.
    Tail,
}

/// Configuration of one log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// The active segment is sealed once it holds at least this many bytes (soft limit: a
    /// segment ends after the record that crosses it).
    pub segment_size: u64,
    /// A sparse index entry is written for the first record at least this many bytes after the
    /// previous entry (and for the first record of each segment).
    pub index_interval: u64,
    /// When appends are acknowledged.
    pub durability: Durability,
    /// How much recovery verifies.
    pub verify_on_open: VerifyOnOpen,
    /// Verify the payload checksum of every record a read returns.
    pub verify_on_read: bool,
    /// Instead of refusing to open on interior corruption, cut the damaged segment at the damage
    /// (losing the rest of that segment) and report it in [`RecoveryReport::repairs`].
    pub repair: bool,
    /// Upper bound of the bytes one group commit writes.
    pub max_group_bytes: u64,
    /// Group-commit window (Celeriant's `fsync_delay`): when appends arrived while the last
    /// group was being written and synced, the next group waits until this long after that
    /// sync before it is taken, so one fdatasync covers more appends. A log that was idle
    /// writes its first append at once, and a full group (`max_group_bytes`) never waits.
    /// Zero (the default) takes every group as soon as the writer is free.
    pub group_window: std::time::Duration,
}

/// Largest accepted [`LogConfig::group_window`].
pub const MAX_GROUP_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_size: DEFAULT_SEGMENT_SIZE,
            index_interval: DEFAULT_INDEX_INTERVAL,
            durability: Durability::Fsync,
            verify_on_open: VerifyOnOpen::Full,
            verify_on_read: true,
            repair: false,
            max_group_bytes: DEFAULT_MAX_GROUP_BYTES,
            group_window: std::time::Duration::ZERO,
        }
    }
}

impl LogConfig {
    /// Checks every field against its limits.
    pub fn validate(&self) -> Result<()> {
        if !(MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&self.segment_size) {
            return Err(StorageError::InvalidConfig {
                field: "segment_size",
                value: self.segment_size,
            });
        }
        if self.index_interval == 0 {
            return Err(StorageError::InvalidConfig {
                field: "index_interval",
                value: 0,
            });
        }
        if self.max_group_bytes == 0 {
            return Err(StorageError::InvalidConfig {
                field: "max_group_bytes",
                value: 0,
            });
        }
        if self.group_window > MAX_GROUP_WINDOW {
            return Err(StorageError::InvalidConfig {
                field: "group_window",
                value: u64::try_from(self.group_window.as_micros()).unwrap_or(u64::MAX),
            });
        }
        if let Durability::Background {
            max_unsynced_records,
            max_unsynced_bytes,
        } = self.durability
        {
            if max_unsynced_records == 0 {
                return Err(StorageError::InvalidConfig {
                    field: "max_unsynced_records",
                    value: 0,
                });
            }
            if max_unsynced_bytes == 0 {
                return Err(StorageError::InvalidConfig {
                    field: "max_unsynced_bytes",
                    value: 0,
                });
            }
        }
        Ok(())
    }
}

/// What a record is, without its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecordMeta {
    /// First sequence number (for a partition: the batch's base offset).
    pub seq: u64,
    /// Sequence numbers covered (for a partition: the batch's message count).
    pub count: u32,
    /// The timestamp assigned at append (µs).
    pub timestamp: u64,
    /// Application tag.
    pub tag: u32,
    /// Payload length in bytes.
    pub len: u32,
}

impl RecordMeta {
    /// The sequence number after the record.
    pub fn end_seq(&self) -> u64 {
        self.seq + u64::from(self.count)
    }
}

/// A record read back from the log: its metadata and its payload bytes exactly as appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    /// The record's metadata.
    pub meta: RecordMeta,
    /// The payload (a slice of a shared read buffer; cheap to clone).
    pub payload: Bytes,
}

/// A summary of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSummary {
    /// First sequence number of the segment.
    pub base: u64,
    /// Sequence number after its last record (`base` when empty).
    pub end: u64,
    /// File size in bytes (headers included).
    pub bytes: u64,
    /// Timestamp of its first record (`None` when empty).
    pub first_timestamp: Option<u64>,
    /// Newest timestamp in it (`None` when empty).
    pub max_timestamp: Option<u64>,
    /// True when sealed (immutable).
    pub sealed: bool,
}

/// The readable range of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBounds {
    /// The first retained sequence number (equals `next` when the log holds nothing).
    pub first: u64,
    /// The sequence number the next append will get, as far as readers know (the visible end).
    pub next: u64,
    /// Total bytes of all segment files.
    pub bytes: u64,
    /// Number of segments.
    pub segments: usize,
}

/// One repair performed because [`LogConfig::repair`] was set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// The damaged file.
    pub path: PathBuf,
    /// Where the damage starts.
    pub offset: u64,
    /// What was wrong.
    pub kind: Corruption,
    /// Bytes cut off the file.
    pub dropped_bytes: u64,
}

/// What recovery found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments opened.
    pub segments: usize,
    /// A torn tail that was truncated: (file, offset it was cut at, bytes cut).
    pub torn_tail: Option<(PathBuf, u64, u64)>,
    /// Interior corruption cut away (only with [`LogConfig::repair`]).
    pub repairs: Vec<Repair>,
    /// Bases of the segments whose index was rebuilt.
    pub indexes_rebuilt: Vec<u64>,
    /// Record bytes read and verified.
    pub bytes_verified: u64,
    /// Stray files removed (orphan indexes, temporary files, an empty segment replaced).
    pub removed: Vec<PathBuf>,
}

/// Called by the writer around acknowledgements, so an upper layer can act in log order on
/// the writer thread: the partition persists its offset frontier in `before_ack`; the metadata
/// store hands durable operations to its applier there and forgets refused ones in
/// `on_refused`.
pub trait CommitHook: Send + Sync + fmt::Debug {
    /// Records up to (not including) `end_seq` are durable (written, for background durability)
    /// and about to be acknowledged. An error fail-stops the log.
    fn before_ack(&self, end_seq: u64) -> io::Result<()>;

    /// Every queued record from `next_seq` on was refused with `error()`. Called under the
    /// log's admission lock (so no append can slip in between): do not append from here.
    fn on_refused(&self, next_seq: u64, error: &dyn Fn() -> StorageError) {
        let _ = (next_seq, error);
    }

    /// Records up to (not including) `end_seq` are durable **and** visible to [`Log::read`];
    /// their acknowledgements follow. Called on the writer thread, in log order, without the
    /// admission lock: the event store moves its per-aggregate state from speculative to
    /// committed here, so state never points at a record readers cannot see yet.
    fn after_publish(&self, end_seq: u64) {
        let _ = end_seq;
    }
}

// ------------------------------------------------------------------------------------------------
// Internal state.

struct PendingRecord {
    header: RecordHeader,
    payload: Bytes,
    done: Completer<RecordMeta>,
}

enum Item {
    Append(PendingRecord),
    Flush(Completer<()>),
    Purge { base: u64, done: Completer<()> },
}

impl Item {
    fn fail(self, error: &dyn Fn() -> StorageError) {
        match self {
            Item::Append(r) => r.done.complete(Err(error())),
            Item::Flush(done) | Item::Purge { done, .. } => done.complete(Err(error())),
        }
    }
}

struct Admission {
    /// Incremented whenever queued appends are refused (see [`Assigned::epoch`]).
    epoch: u64,
    next_seq: u64,
    last_ts: u64,
    queue: VecDeque<Item>,
    queued_bytes: u64,
    scheduled: bool,
    failed: Option<Arc<io::Error>>,
    closed: bool,
    /// Appenders blocked on `room` (a turn notifies only when there are some: a condvar
    /// notify is a syscall even with nobody waiting).
    room_waiters: usize,
}

struct ActiveSegment {
    base: u64,
    file: Arc<dyn StorageFile>,
    /// `None` when the index file could not be written: it will be rebuilt at the next open.
    index_file: Option<Arc<dyn StorageFile>>,
    len: u64,
    synced_len: u64,
    last_index_pos: Option<u64>,
    /// Entries of the in-memory index already in the index file.
    index_written: usize,
    has_records: bool,
}

struct Writer {
    active: ActiveSegment,
    next_seq: u64,
    last_ts: u64,
    unsynced_records: u64,
    unsynced_bytes: u64,
    failed: Option<Arc<io::Error>>,
}

#[derive(Debug, Clone)]
struct SegmentState {
    base: u64,
    end: u64,
    len: u64,
    first_ts: Option<u64>,
    max_ts: Option<u64>,
    sealed: bool,
    /// Owner half of the segment's cache key: the log's id until the segment is rewritten,
    /// then a fresh id per rewrite, so a cached handle always belongs to the file version the
    /// view describes (see [`Log::rewrite_sealed`]).
    owner: u64,
}

impl SegmentState {
    fn summary(&self) -> SegmentSummary {
        SegmentSummary {
            base: self.base,
            end: self.end,
            bytes: self.len,
            first_timestamp: self.first_ts,
            max_timestamp: self.max_ts,
            sealed: self.sealed,
        }
    }
}

struct View {
    segments: VecDeque<SegmentState>,
    active_file: Arc<dyn StorageFile>,
    active_index: Vec<IndexEntry>,
}

/// Per-log counters.
#[derive(Debug, Default)]
struct LogCounters {
    records: AtomicU64,
    fsyncs: AtomicU64,
    groups: AtomicU64,
}

/// Per-log group-commit counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Records written.
    pub records: u64,
    /// Group writes.
    pub groups: u64,
    /// fdatasync calls on segment files.
    pub fsyncs: u64,
}

pub(crate) struct LogInner {
    id: u64,
    dir: PathBuf,
    backend: Arc<dyn StorageBackend>,
    config: LogConfig,
    cache: Arc<Cache>,
    pool: Arc<PoolShared>,
    hook: Option<Arc<dyn CommitHook>>,
    admission: Mutex<Admission>,
    room: Condvar,
    /// Set by a turn that ended with appends queued behind it (see
    /// [`LogConfig::group_window`]): the next group is not taken before this instant.
    hold_until: Mutex<Option<std::time::Instant>>,
    /// Orders segment file swaps ([`Log::rewrite_sealed`], write side) against everything
    /// that maps a segment's name to its file or removes segment files (loading a sealed
    /// segment into the cache, retention, purge: read side). Never taken by appends. Lock
    /// order: `swap` before `view`.
    swap: RwLock<()>,
    /// One rewrite at a time per log.
    rewriting: Mutex<()>,
    writer: Mutex<Writer>,
    view: Mutex<View>,
    counters: LogCounters,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read_lock<T>(m: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(PoisonError::into_inner)
}

fn is_no_space(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// A handle on an open log. Cheap to clone; all clones share one writer.
#[derive(Clone)]
pub struct Log {
    inner: Arc<LogInner>,
}

impl fmt::Debug for Log {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.inner.dir)
            .field("bounds", &self.bounds())
            .finish()
    }
}

/// Options of [`Log::open`] beyond the [`LogConfig`].
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Base sequence number of the first segment when the directory holds no segment.
    pub initial_seq: u64,
    /// The next sequence number must be at least this (an offset frontier persisted by an upper
    /// layer). If recovery ends lower, a new segment is started at this sequence number.
    pub min_next_seq: u64,
    /// Called around acknowledgements (see [`CommitHook`]).
    pub hook: Option<Arc<dyn CommitHook>>,
}

// ------------------------------------------------------------------------------------------------
// Recovery.

struct Ctx<'a> {
    backend: &'a dyn StorageBackend,
    dir: &'a Path,
    config: &'a LogConfig,
    report: &'a mut RecoveryReport,
}

/// Outcome of scanning a run of records.
struct Scan {
    /// Next expected sequence number after the last good record.
    end_seq: u64,
    /// File position after the last good record.
    end_pos: u64,
    first_ts: Option<u64>,
    max_ts: Option<u64>,
    /// Index entries generated at `index_interval` (for rebuilding).
    entries: Vec<IndexEntry>,
    /// Positions and seqs of every record start seen (only when cross-checking an index).
    damage: Option<(u64, Corruption)>,
}

impl Ctx<'_> {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn io(&self, op: IoOp, name: &str) -> impl Fn(io::Error) -> StorageError + '_ {
        let path = self.path(name);
        move |e| StorageError::io(op, path.clone(), e)
    }
}

/// Reads `[pos, pos + len)` of a file into a fresh buffer.
fn read_exact(file: &dyn StorageFile, pos: u64, len: u64) -> io::Result<Bytes> {
    let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut buf = BytesMut::zeroed(len);
    file.read_at(pos, &mut buf)?;
    Ok(buf.freeze())
}

/// Scans records from `pos` (expecting `seq`) to `file_len`, verifying both checksums and
/// contiguity. Stops at the first damage.
fn scan_records(
    file: &dyn StorageFile,
    mut pos: u64,
    mut seq: u64,
    file_len: u64,
    interval: u64,
    mut last_index_pos: Option<u64>,
    mut on_record: impl FnMut(u64, &RecordHeader),
) -> io::Result<Scan> {
    let mut scan = Scan {
        end_seq: seq,
        end_pos: pos,
        first_ts: None,
        max_ts: None,
        entries: Vec::new(),
        damage: None,
    };
    let mut chunk = Bytes::new();
    let mut chunk_pos = pos;
    let in_chunk = |at: u64, len: u64, chunk: &Bytes, chunk_pos: u64| {
        at >= chunk_pos && at + len <= chunk_pos + chunk.len() as u64
    };
    while pos < file_len {
        let remaining = file_len - pos;
        if remaining < RECORD_HEADER_LEN as u64 {
            scan.damage = Some((pos, Corruption::Truncated));
            break;
        }
        // Make sure the header is in the chunk.
        if !in_chunk(pos, RECORD_HEADER_LEN as u64, &chunk, chunk_pos) {
            chunk = read_exact(file, pos, remaining.min(SCAN_CHUNK))?;
            chunk_pos = pos;
        }
        let off = usize::try_from(pos - chunk_pos).unwrap_or(usize::MAX);
        let header = match RecordHeader::decode(&chunk[off..off + RECORD_HEADER_LEN], pos) {
            Ok(h) => h,
            Err(kind) => {
                scan.damage = Some((pos, kind));
                break;
            }
        };
        if header.seq != seq {
            scan.damage = Some((
                pos,
                Corruption::NonContiguous {
                    expected: seq,
                    found: header.seq,
                },
            ));
            break;
        }
        let record_len = header.record_len();
        if record_len > remaining {
            scan.damage = Some((pos, Corruption::Truncated));
            break;
        }
        if !in_chunk(pos, record_len, &chunk, chunk_pos) {
            chunk = read_exact(file, pos, remaining.min(SCAN_CHUNK.max(record_len)))?;
            chunk_pos = pos;
        }
        let off = usize::try_from(pos - chunk_pos).unwrap_or(usize::MAX);
        let payload_start = off + RECORD_HEADER_LEN;
        let payload_end = payload_start + header.payload_len as usize;
        if let Err(kind) = header.verify_payload(&chunk[payload_start..payload_end]) {
            scan.damage = Some((pos, kind));
            break;
        }
        on_record(pos, &header);
        if last_index_pos.is_none_or(|last| pos - last >= interval) {
            scan.entries.push(IndexEntry {
                seq: header.seq,
                timestamp: header.timestamp,
                position: pos,
                kind: IndexKind::Record,
            });
            last_index_pos = Some(pos);
        }
        scan.first_ts.get_or_insert(header.timestamp);
        scan.max_ts = Some(
            scan.max_ts
                .map_or(header.timestamp, |m| m.max(header.timestamp)),
        );
        pos += record_len;
        seq = header.end_seq();
        scan.end_pos = pos;
        scan.end_seq = seq;
    }
    Ok(scan)
}

/// Looks in `(damage_at, file_len)` for a genuine record header (magic and header checksum)
/// whose `synced_len` is above `damage_at`: proof that the damaged bytes had been synced.
fn find_durable_proof(
    file: &dyn StorageFile,
    damage_at: u64,
    file_len: u64,
) -> io::Result<Option<u64>> {
    let magic = RECORD_MAGIC.to_le_bytes();
    let mut pos = damage_at + 1;
    while pos + RECORD_HEADER_LEN as u64 <= file_len {
        let len = (file_len - pos).min(SCAN_CHUNK);
        let chunk = read_exact(file, pos, len)?;
        let mut i = 0usize;
        while i + RECORD_HEADER_LEN <= chunk.len() {
            if chunk[i..i + 4] == magic {
                let at = pos + i as u64;
                if let Ok(header) = RecordHeader::decode(&chunk[i..i + RECORD_HEADER_LEN], at) {
                    if header.synced_len > damage_at {
                        return Ok(Some(at));
                    }
                }
            }
            i += 1;
        }
        // The next chunk starts at the first position not yet tried, so a header straddling
        // two chunks is still seen.
        pos += (chunk.len() + 1 - RECORD_HEADER_LEN) as u64;
    }
    Ok(None)
}

/// A loaded index: its valid entries (record kind) and its seal entry, if any.
struct LoadedIndex {
    entries: Vec<IndexEntry>,
    seal: Option<IndexEntry>,
}

/// Loads and validates an index file. `None` when it is missing or any entry is damaged or
/// inconsistent (entries must increase strictly in sequence and position, stay inside the log
/// file and start at or after the segment header). A trailing partial entry is ignored.
fn load_index(
    backend: &dyn StorageBackend,
    path: &Path,
    base: u64,
    log_len: u64,
) -> Result<Option<LoadedIndex>> {
    let file = match backend.open(path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::io(IoOp::Open, path, e)),
    };
    let len = file
        .len()
        .map_err(|e| StorageError::io(IoOp::Len, path, e))?;
    // An index has one entry per `index_interval` bytes at most one per record; a record is at
    // least RECORD_HEADER_LEN bytes, so this bounds the allocation by the log's size.
    let max_len =
        INDEX_HEADER_LEN as u64 + (log_len / RECORD_HEADER_LEN as u64 + 2) * INDEX_ENTRY_LEN as u64;
    if len < INDEX_HEADER_LEN as u64 || len > max_len {
        return Ok(None);
    }
    let bytes = read_exact(&*file, 0, len).map_err(|e| StorageError::io(IoOp::Read, path, e))?;
    if decode_index_header(&bytes) != Ok(base) {
        return Ok(None);
    }
    let mut entries: Vec<IndexEntry> = Vec::new();
    let mut seal = None;
    for raw in bytes[INDEX_HEADER_LEN..].chunks_exact(INDEX_ENTRY_LEN) {
        let Ok(entry) = IndexEntry::decode(raw) else {
            return Ok(None);
        };
        if seal.is_some() {
            return Ok(None); // nothing may follow a seal
        }
        match entry.kind {
            IndexKind::Seal => seal = Some(entry),
            IndexKind::Record => {
                if entry.position < SEGMENT_HEADER_LEN as u64 || entry.seq < base {
                    return Ok(None);
                }
                if let Some(prev) = entries.last() {
                    if entry.position <= prev.position
                        || entry.seq <= prev.seq
                        || entry.timestamp < prev.timestamp
                    {
                        return Ok(None);
                    }
                }
                entries.push(entry);
            }
        }
    }
    Ok(Some(LoadedIndex { entries, seal }))
}

/// Writes a complete index file atomically (temp file, sync, rename, directory sync).
fn write_index(
    backend: &dyn StorageBackend,
    dir: &Path,
    base: u64,
    entries: &[IndexEntry],
    seal: Option<IndexEntry>,
) -> Result<()> {
    let name = index_file_name(base);
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(&name);
    let _ = backend.remove_file(&tmp);
    let file = backend
        .open(&tmp, OpenMode::CreateNew)
        .map_err(|e| StorageError::io(IoOp::Open, &tmp, e))?;
    let mut bytes = Vec::with_capacity(INDEX_HEADER_LEN + (entries.len() + 1) * INDEX_ENTRY_LEN);
    bytes.extend_from_slice(&encode_index_header(base));
    for entry in entries.iter().chain(seal.iter()) {
        bytes.extend_from_slice(&entry.encode());
    }
    file.append(&[&bytes])
        .map_err(|e| StorageError::io(IoOp::Append, &tmp, e))?;
    file.sync()
        .map_err(|e| StorageError::io(IoOp::Sync, &tmp, e))?;
    backend
        .rename(&tmp, &path)
        .map_err(|e| StorageError::io(IoOp::Rename, &path, e))?;
    backend
        .sync_dir(dir)
        .map_err(|e| StorageError::io(IoOp::SyncDir, dir, e))?;
    Ok(())
}

/// Creates a fresh segment (and its index) at `base`, synced, with the directory synced.
fn create_segment(
    backend: &dyn StorageBackend,
    dir: &Path,
    base: u64,
) -> io::Result<(Arc<dyn StorageFile>, Arc<dyn StorageFile>)> {
    let log_path = dir.join(segment_file_name(base));
    let index_path = dir.join(index_file_name(base));
    let result = (|| {
        let file = backend.open(&log_path, OpenMode::CreateNew)?;
        file.append(&[&encode_segment_header(base)])?;
        file.sync()?;
        let _ = backend.remove_file(&index_path);
        let index = backend.open(&index_path, OpenMode::CreateNew)?;
        index.append(&[&encode_index_header(base)])?;
        index.sync()?;
        backend.sync_dir(dir)?;
        Ok((file, index))
    })();
    if result.is_err() {
        // Leave no half-made segment behind (best effort; recovery copes with leftovers too).
        let _ = backend.remove_file(&index_path);
        let _ = backend.remove_file(&log_path);
    }
    result
}

/// The recovered state of one segment.
struct Recovered {
    state: SegmentState,
    file: Arc<dyn StorageFile>,
    index: Vec<IndexEntry>,
}

fn recover_segment(ctx: &mut Ctx<'_>, base: u64, is_last: bool) -> Result<Recovered> {
    let name = segment_file_name(base);
    let path = ctx.path(&name);
    let file = ctx
        .backend
        .open(&path, OpenMode::Existing)
        .map_err(ctx.io(IoOp::Open, &name))?;
    let mut len = file.len().map_err(ctx.io(IoOp::Len, &name))?;

    // Segment header.
    let header_bytes = if len >= SEGMENT_HEADER_LEN as u64 {
        Some(read_exact(&*file, 0, SEGMENT_HEADER_LEN as u64).map_err(ctx.io(IoOp::Read, &name))?)
    } else {
        None
    };
    match header_bytes.as_deref().map(decode_segment_header) {
        Some(Ok(found)) if found == base => {}
        Some(Ok(_)) => {
            return Err(StorageError::corrupt(path, 0, Corruption::NameMismatch));
        }
        // A crash while creating the newest segment leaves it short or zero-filled: nothing in
        // it was ever acknowledged. Rewrite it.
        _ if is_last && len <= SEGMENT_HEADER_LEN as u64 => {
            file.truncate(0).map_err(ctx.io(IoOp::Truncate, &name))?;
            file.append(&[&encode_segment_header(base)])
                .map_err(ctx.io(IoOp::Append, &name))?;
            file.sync().map_err(ctx.io(IoOp::Sync, &name))?;
            ctx.report.torn_tail = Some((path.clone(), 0, len));
            len = SEGMENT_HEADER_LEN as u64;
        }
        Some(Err(kind)) => return Err(StorageError::corrupt(path, 0, kind)),
        None => {
            return Err(StorageError::corrupt(path, 0, Corruption::BadSegmentHeader));
        }
    }

    let loaded = load_index(ctx.backend, &ctx.path(&index_file_name(base)), base, len)?;
    let seal_wanted = !is_last;

    if ctx.config.verify_on_open == VerifyOnOpen::Tail {
        if let Some(found) = recover_tail(ctx, &file, base, len, is_last, loaded.as_ref())? {
            return Ok(found);
        }
    }

    // Full verification: scan every record, cross-checking the loaded index entries.
    let checked: Vec<IndexEntry> = loaded
        .as_ref()
        .map(|l| l.entries.clone())
        .unwrap_or_default();
    let mut pending = checked.iter().peekable();
    let mut index_matches = loaded.is_some();
    let scan = scan_records(
        &*file,
        SEGMENT_HEADER_LEN as u64,
        base,
        len,
        ctx.config.index_interval,
        None,
        |pos, header| {
            while let Some(entry) = pending.peek() {
                match entry.position.cmp(&pos) {
                    std::cmp::Ordering::Less => index_matches = false, // inside a record
                    std::cmp::Ordering::Equal => {
                        if entry.seq != header.seq || entry.timestamp != header.timestamp {
                            index_matches = false;
                        }
                    }
                    std::cmp::Ordering::Greater => break,
                }
                pending.next();
            }
        },
    )
    .map_err(ctx.io(IoOp::Read, &name))?;
    if pending.next().is_some() {
        index_matches = false; // entries past the last verified record
    }
    ctx.report.bytes_verified += scan.end_pos - SEGMENT_HEADER_LEN as u64;
    let end_pos = settle_damage(ctx, &file, &path, len, is_last, scan.damage.clone())?;
    debug_assert_eq!(end_pos, scan.end_pos);

    let index = if index_matches
        && checked
            .first()
            .is_some_and(|e| e.position == SEGMENT_HEADER_LEN as u64)
    {
        checked
    } else {
        scan.entries
    };
    let state = SegmentState {
        base,
        end: scan.end_seq,
        len: end_pos,
        first_ts: scan.first_ts,
        max_ts: scan.max_ts,
        sealed: seal_wanted,
        owner: 0, // set by `open_shared` once the log has its id
    };
    finish_segment(ctx, file, state, index, loaded.as_ref())
}

/// Decides what a damaged record means and acts on it: a torn tail (or, with repair, interior
/// corruption) is truncated away; interior corruption otherwise refuses to open. Returns the
/// verified end position.
fn settle_damage(
    ctx: &mut Ctx<'_>,
    file: &Arc<dyn StorageFile>,
    path: &Path,
    len: u64,
    is_last: bool,
    damage: Option<(u64, Corruption)>,
) -> Result<u64> {
    let Some((at, kind)) = damage else {
        return Ok(len);
    };
    let io = |op| {
        let path = path.to_path_buf();
        move |e| StorageError::io(op, path.clone(), e)
    };
    // Sealed segments were synced before their successor existed: they cannot be torn.
    let torn = is_last
        && find_durable_proof(&**file, at, len)
            .map_err(io(IoOp::Read))?
            .is_none();
    let kind = if is_last {
        kind
    } else if matches!(kind, Corruption::Truncated) {
        Corruption::SealedSegmentTail
    } else {
        kind
    };
    if torn {
        tracing::warn!(path = %path.display(), offset = at, cut = len - at, "truncating torn tail");
        ctx.report.torn_tail = Some((path.to_path_buf(), at, len - at));
    } else if ctx.config.repair {
        tracing::error!(path = %path.display(), offset = at, %kind, "repair: cutting a corrupt segment");
        ctx.report.repairs.push(Repair {
            path: path.to_path_buf(),
            offset: at,
            kind,
            dropped_bytes: len - at,
        });
    } else {
        return Err(StorageError::corrupt(path, at, kind));
    }
    file.truncate(at).map_err(io(IoOp::Truncate))?;
    file.sync().map_err(io(IoOp::Sync))?;
    Ok(at)
}

/// Tail verification. Returns `None` when it cannot decide cheaply (no usable index, or damage
/// found): the caller then verifies the whole segment.
fn recover_tail(
    ctx: &mut Ctx<'_>,
    file: &Arc<dyn StorageFile>,
    base: u64,
    len: u64,
    is_last: bool,
    loaded: Option<&LoadedIndex>,
) -> Result<Option<Recovered>> {
    let Some(loaded) = loaded else {
        return Ok(None);
    };
    if loaded
        .entries
        .first()
        .is_none_or(|e| e.position != SEGMENT_HEADER_LEN as u64 || e.seq != base)
    {
        return Ok(None);
    }
    // A sealed segment whose seal matches its file is trusted as is.
    if !is_last {
        if let Some(seal) = loaded.seal {
            if seal.position == len {
                let state = SegmentState {
                    base,
                    end: seal.seq,
                    len,
                    first_ts: loaded.entries.first().map(|e| e.timestamp),
                    max_ts: Some(seal.timestamp),
                    sealed: true,
                    owner: 0,
                };
                return Ok(Some(Recovered {
                    state,
                    file: Arc::clone(file),
                    index: loaded.entries.clone(),
                }));
            }
        }
    }
    // Scan from the last entry that points at the record it claims.
    let name = segment_file_name(base);
    let usable: Vec<IndexEntry> = loaded
        .entries
        .iter()
        .copied()
        .filter(|e| e.position + RECORD_HEADER_LEN as u64 <= len)
        .collect();
    let Some(last) = usable.last().copied() else {
        return Ok(None);
    };
    let raw = read_exact(&**file, last.position, RECORD_HEADER_LEN as u64)
        .map_err(ctx.io(IoOp::Read, &name))?;
    match RecordHeader::decode(&raw, last.position) {
        Ok(h) if h.seq == last.seq && h.timestamp == last.timestamp => {}
        _ => return Ok(None),
    }
    let scan = scan_records(
        &**file,
        last.position,
        last.seq,
        len,
        ctx.config.index_interval,
        Some(last.position),
        |_, _| {},
    )
    .map_err(ctx.io(IoOp::Read, &name))?;
    if scan.damage.is_some() || scan.end_pos == last.position {
        return Ok(None);
    }
    ctx.report.bytes_verified += scan.end_pos - last.position;
    let mut index = usable;
    index.extend(scan.entries);
    let state = SegmentState {
        base,
        end: scan.end_seq,
        len,
        first_ts: index.first().map(|e| e.timestamp),
        max_ts: scan.max_ts,
        sealed: !is_last,
        owner: 0,
    };
    finish_segment(ctx, Arc::clone(file), state, index, Some(loaded)).map(Some)
}

/// Rewrites the index file when it differs from what recovery established.
fn finish_segment(
    ctx: &mut Ctx<'_>,
    file: Arc<dyn StorageFile>,
    state: SegmentState,
    index: Vec<IndexEntry>,
    loaded: Option<&LoadedIndex>,
) -> Result<Recovered> {
    let seal = state.sealed.then(|| IndexEntry {
        seq: state.end,
        timestamp: state.max_ts.unwrap_or(0),
        position: state.len,
        kind: IndexKind::Seal,
    });
    let on_disk_ok = loaded.is_some_and(|l| l.entries == index && l.seal == seal);
    if !on_disk_ok {
        write_index(ctx.backend, ctx.dir, state.base, &index, seal)?;
        ctx.report.indexes_rebuilt.push(state.base);
    }
    Ok(Recovered { state, file, index })
}

// ------------------------------------------------------------------------------------------------
// Opening.

impl Log {
    /// Opens (or creates) the log in `dir`, recovering it as described in the module docs.
    pub fn open(
        backend: Arc<dyn StorageBackend>,
        dir: impl Into<PathBuf>,
        config: LogConfig,
        pool: &CommitPool,
        cache: Arc<Cache>,
        options: OpenOptions,
    ) -> Result<(Log, RecoveryReport)> {
        Self::open_shared(backend, dir.into(), config, pool.shared(), cache, options)
    }

    pub(crate) fn open_shared(
        backend: Arc<dyn StorageBackend>,
        dir: PathBuf,
        config: LogConfig,
        pool: Arc<PoolShared>,
        cache: Arc<Cache>,
        options: OpenOptions,
    ) -> Result<(Log, RecoveryReport)> {
        config.validate()?;
        let mut report = RecoveryReport::default();
        backend
            .create_dir_all(&dir)
            .map_err(|e| StorageError::io(IoOp::CreateDir, &dir, e))?;
        let listing = backend
            .list(&dir)
            .map_err(|e| StorageError::io(IoOp::List, &dir, e))?;
        let mut logs = Vec::new();
        let mut indexes = Vec::new();
        for entry in listing.iter().filter(|e| !e.is_dir) {
            if Path::new(&entry.name)
                .extension()
                .is_some_and(|ext| ext.eq_ignore_ascii_case("tmp"))
            {
                let path = dir.join(&entry.name);
                backend
                    .remove_file(&path)
                    .map_err(|e| StorageError::io(IoOp::Remove, &path, e))?;
                report.removed.push(path);
                continue;
            }
            match parse_file_name(&entry.name) {
                Some((base, false)) => logs.push(base),
                Some((base, true)) => indexes.push(base),
                None => {}
            }
        }
        logs.sort_unstable();
        for base in indexes {
            if logs.binary_search(&base).is_err() {
                let path = dir.join(index_file_name(base));
                backend
                    .remove_file(&path)
                    .map_err(|e| StorageError::io(IoOp::Remove, &path, e))?;
                report.removed.push(path);
            }
        }
        if logs.is_empty() {
            create_segment(&*backend, &dir, options.initial_seq).map_err(|e| {
                StorageError::io(
                    IoOp::Open,
                    dir.join(segment_file_name(options.initial_seq)),
                    e,
                )
            })?;
            logs.push(options.initial_seq);
        }

        let mut recovered: Vec<Recovered> = Vec::with_capacity(logs.len());
        {
            let mut ctx = Ctx {
                backend: &*backend,
                dir: &dir,
                config: &config,
                report: &mut report,
            };
            for (i, base) in logs.iter().copied().enumerate() {
                let is_last = i + 1 == logs.len();
                let seg = recover_segment(&mut ctx, base, is_last)?;
                if let Some(prev) = recovered.last() {
                    if seg.state.base < prev.state.end {
                        return Err(StorageError::corrupt(
                            dir.join(segment_file_name(base)),
                            0,
                            Corruption::SegmentOrder,
                        ));
                    }
                }
                recovered.push(seg);
            }
        }
        // A sealed segment must hold records (rolls only happen after a record). With repair an
        // emptied sealed segment is removed.
        let mut i = 0;
        while i + 1 < recovered.len() {
            if recovered[i].state.end == recovered[i].state.base {
                let base = recovered[i].state.base;
                let path = dir.join(segment_file_name(base));
                if !config.repair {
                    return Err(StorageError::corrupt(path, 0, Corruption::SegmentOrder));
                }
                remove_segment_files(&*backend, &dir, base)?;
                report.removed.push(path);
                recovered.remove(i);
            } else {
                i += 1;
            }
        }

        // Honour the persisted frontier: never hand out a sequence number below it.
        let last_end = recovered
            .last()
            .map_or(options.initial_seq, |r| r.state.end);
        if options.min_next_seq > last_end {
            let last = recovered.pop().expect("a log always has a segment");
            if last.state.end == last.state.base {
                remove_segment_files(&*backend, &dir, last.state.base)?;
                report
                    .removed
                    .push(dir.join(segment_file_name(last.state.base)));
            } else {
                let mut sealed = last;
                sealed.state.sealed = true;
                write_index(
                    &*backend,
                    &dir,
                    sealed.state.base,
                    &sealed.index,
                    Some(IndexEntry {
                        seq: sealed.state.end,
                        timestamp: sealed.state.max_ts.unwrap_or(0),
                        position: sealed.state.len,
                        kind: IndexKind::Seal,
                    }),
                )?;
                recovered.push(sealed);
            }
            let base = options.min_next_seq;
            let (file, _) = create_segment(&*backend, &dir, base)
                .map_err(|e| StorageError::io(IoOp::Open, dir.join(segment_file_name(base)), e))?;
            recovered.push(Recovered {
                state: SegmentState {
                    base,
                    end: base,
                    len: SEGMENT_HEADER_LEN as u64,
                    first_ts: None,
                    max_ts: None,
                    sealed: false,
                    owner: 0,
                },
                file,
                index: Vec::new(),
            });
        }
        report.segments = recovered.len();

        let last = recovered.pop().expect("a log always has a segment");
        let index_path = dir.join(index_file_name(last.state.base));
        let index_file = backend
            .open(&index_path, OpenMode::Existing)
            .map_err(|e| StorageError::io(IoOp::Open, &index_path, e))?;
        let index_len = index_file
            .len()
            .map_err(|e| StorageError::io(IoOp::Len, &index_path, e))?;
        let expected_index_len = (INDEX_HEADER_LEN + last.index.len() * INDEX_ENTRY_LEN) as u64;
        if index_len != expected_index_len {
            // Only a partial trailing entry can differ here; drop it.
            index_file
                .truncate(expected_index_len)
                .map_err(|e| StorageError::io(IoOp::Truncate, &index_path, e))?;
        }
        let max_ts_all = recovered
            .iter()
            .filter_map(|r| r.state.max_ts)
            .chain(last.state.max_ts)
            .max()
            .unwrap_or(0);
        let active = ActiveSegment {
            base: last.state.base,
            file: Arc::clone(&last.file),
            index_file: Some(index_file),
            len: last.state.len,
            synced_len: last.state.len,
            last_index_pos: last.index.last().map(|e| e.position),
            index_written: last.index.len(),
            has_records: last.state.end > last.state.base,
        };
        let next_seq = last.state.end;
        let id = crate::cache::next_owner_id();
        let mut segments: VecDeque<SegmentState> = recovered.into_iter().map(|r| r.state).collect();
        let active_file = Arc::clone(&last.file);
        let active_index = last.index;
        segments.push_back(last.state);
        for seg in &mut segments {
            seg.owner = id;
        }

        let inner = Arc::new(LogInner {
            id,
            dir,
            backend,
            config,
            cache,
            pool,
            hook: options.hook,
            admission: Mutex::new(Admission {
                epoch: 0,
                next_seq,
                last_ts: max_ts_all,
                queue: VecDeque::new(),
                queued_bytes: 0,
                scheduled: false,
                failed: None,
                closed: false,
                room_waiters: 0,
            }),
            room: Condvar::new(),
            hold_until: Mutex::new(None),
            swap: RwLock::new(()),
            rewriting: Mutex::new(()),
            writer: Mutex::new(Writer {
                active,
                next_seq,
                last_ts: max_ts_all,
                unsynced_records: 0,
                unsynced_bytes: 0,
                failed: None,
            }),
            view: Mutex::new(View {
                segments,
                active_file,
                active_index,
            }),
            counters: LogCounters::default(),
        });
        Ok((Log { inner }, report))
    }
}

fn remove_segment_files(backend: &dyn StorageBackend, dir: &Path, base: u64) -> Result<()> {
    let log_path = dir.join(segment_file_name(base));
    let index_path = dir.join(index_file_name(base));
    match backend.remove_file(&log_path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(StorageError::io(IoOp::Remove, &log_path, e)),
    }
    match backend.remove_file(&index_path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(StorageError::io(IoOp::Remove, &index_path, e)),
    }
    backend
        .sync_dir(dir)
        .map_err(|e| StorageError::io(IoOp::SyncDir, dir, e))
}

// ------------------------------------------------------------------------------------------------
// Appending.

/// The sequence number and timestamp assigned to a record being appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assigned {
    /// The record's first sequence number.
    pub seq: u64,
    /// The record's timestamp: `max(now, previous timestamp)`.
    pub timestamp: u64,
    /// The log's refusal epoch: it changes whenever queued appends were refused (a full disk),
    /// which tells a caller that validated against speculative state to start over.
    pub epoch: u64,
}

impl Log {
    /// The log's directory (relative to the backend root).
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The log's configuration.
    pub fn config(&self) -> &LogConfig {
        &self.inner.config
    }

    /// Appends a record covering `count` sequence numbers. Under the admission lock the log
    /// assigns the next sequence number and the timestamp `max(now, last timestamp)`, calls
    /// `build` with them to produce the payload (this is where a partition stamps its batch),
    /// and queues the record. The returned completion resolves once the record is durable (see
    /// [`Durability`]) with its metadata.
    ///
    /// Blocks while more than [`MAX_QUEUED_BYTES`] are queued on this log (back-pressure).
    pub fn append_with<F>(
        &self,
        count: u32,
        tag: u32,
        now: u64,
        build: F,
    ) -> Result<Completion<RecordMeta>>
    where
        F: FnOnce(Assigned) -> Result<Bytes>,
    {
        self.enqueue(count, tag, |adm| {
            let assigned = Assigned {
                seq: adm.next_seq,
                timestamp: now.max(adm.last_ts),
                epoch: adm.epoch,
            };
            build(assigned).map(|payload| (assigned, payload))
        })
    }

    /// Appends a record whose sequence number and timestamp were assigned earlier (by a leader,
    /// or by [`Log::append_with`] on another replica). `seq` must be the log's next sequence
    /// number and `timestamp` must not be below the last one.
    pub fn append_assigned(
        &self,
        seq: u64,
        timestamp: u64,
        count: u32,
        tag: u32,
        payload: Bytes,
    ) -> Result<Completion<RecordMeta>> {
        let dir = self.inner.dir.clone();
        self.enqueue(count, tag, move |adm| {
            let assigned = Assigned {
                seq,
                timestamp,
                epoch: adm.epoch,
            };
            if assigned.seq != adm.next_seq {
                return Err(StorageError::OutOfOrder {
                    path: dir,
                    expected: adm.next_seq,
                    found: assigned.seq,
                });
            }
            if assigned.timestamp < adm.last_ts {
                return Err(StorageError::LimitExceeded {
                    what: "timestamp below the log's last timestamp",
                    size: assigned.timestamp,
                    limit: adm.last_ts,
                });
            }
            Ok((assigned, payload))
        })
    }

    /// The refusal epoch (see [`Assigned::epoch`]).
    pub fn current_epoch(&self) -> u64 {
        lock(&self.inner.admission).epoch
    }

    /// The next sequence number an append would get right now (including queued appends).
    pub fn next_seq_to_assign(&self) -> u64 {
        lock(&self.inner.admission).next_seq
    }

    fn enqueue(
        &self,
        count: u32,
        tag: u32,
        assign: impl FnOnce(&Admission) -> Result<(Assigned, Bytes)>,
    ) -> Result<Completion<RecordMeta>> {
        if count == 0 || count > MAX_RECORD_COUNT {
            return Err(StorageError::LimitExceeded {
                what: "record count",
                size: u64::from(count),
                limit: u64::from(MAX_RECORD_COUNT),
            });
        }
        let inner = &self.inner;
        let mut adm = lock(&inner.admission);
        while adm.queued_bytes > MAX_QUEUED_BYTES && adm.failed.is_none() && !adm.closed {
            adm.room_waiters += 1;
            adm = inner.room.wait(adm).unwrap_or_else(PoisonError::into_inner);
            adm.room_waiters -= 1;
        }
        if let Some(err) = &adm.failed {
            return Err(StorageError::LogFailed {
                path: inner.dir.clone(),
                source: Arc::clone(err),
            });
        }
        if adm.closed {
            return Err(StorageError::Shutdown);
        }
        let (assigned, payload) = assign(&adm)?;
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|len| *len <= MAX_RECORD_PAYLOAD)
            .ok_or(StorageError::LimitExceeded {
                what: "record payload bytes",
                size: payload.len() as u64,
                limit: u64::from(MAX_RECORD_PAYLOAD),
            })?;
        if assigned.seq.checked_add(u64::from(count)).is_none() {
            return Err(StorageError::LimitExceeded {
                what: "sequence number",
                size: assigned.seq,
                limit: u64::MAX - u64::from(count),
            });
        }
        let header = RecordHeader {
            payload_len: len,
            count,
            seq: assigned.seq,
            timestamp: assigned.timestamp,
            synced_len: 0, // set by the writer
            tag,
            payload_crc: 0, // computed by the writer, outside the admission lock
        };
        let (done, completion) = completion();
        adm.next_seq = header.end_seq();
        adm.last_ts = assigned.timestamp;
        adm.queued_bytes += header.record_len();
        adm.queue.push_back(Item::Append(PendingRecord {
            header,
            payload,
            done,
        }));
        let schedule = !adm.scheduled;
        adm.scheduled = true;
        drop(adm);
        if schedule {
            self.schedule();
        }
        Ok(completion)
    }

    fn schedule(&self) {
        let job: Arc<dyn Job> = Arc::clone(&self.inner) as Arc<dyn Job>;
        self.inner.pool.schedule(job);
    }

    fn enqueue_control(&self, item: impl FnOnce(&mut Admission) -> Item) {
        let mut adm = lock(&self.inner.admission);
        let item = item(&mut adm);
        if let Some(err) = &adm.failed {
            let err = Arc::clone(err);
            let dir = self.inner.dir.clone();
            drop(adm);
            item.fail(&|| StorageError::LogFailed {
                path: dir.clone(),
                source: Arc::clone(&err),
            });
            return;
        }
        adm.queue.push_back(item);
        let schedule = !adm.scheduled;
        adm.scheduled = true;
        drop(adm);
        if schedule {
            self.schedule();
        }
    }

    /// Makes everything appended so far durable (a no-op with [`Durability::Fsync`] beyond
    /// waiting for queued appends).
    pub fn flush(&self) -> Completion<()> {
        let (done, completion) = completion();
        self.enqueue_control(|_| Item::Flush(done));
        completion
    }

    /// Deletes every segment and restarts the log empty at sequence number `base`. Ordered with
    /// appends: appends queued before it are written (then deleted), appends after it start at
    /// `base`. Not atomic across a crash by itself: an upper layer that needs that records its
    /// intent durably first and redoes the purge at open (the partition does).
    pub fn purge(&self, base: u64) -> Completion<()> {
        let (done, completion) = completion();
        self.enqueue_control(|adm| {
            adm.next_seq = base;
            Item::Purge { base, done }
        });
        completion
    }

    /// Group-commit counters of this log.
    pub fn stats(&self) -> LogStats {
        let c = &self.inner.counters;
        LogStats {
            records: c.records.load(Ordering::Relaxed),
            groups: c.groups.load(Ordering::Relaxed),
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
        }
    }

    /// The error that fail-stopped this log, if any.
    pub fn failure(&self) -> Option<Arc<io::Error>> {
        lock(&self.inner.admission).failed.clone()
    }

    /// Refuses further appends, waits for queued work, syncs, and drops this log's cache
    /// entries.
    pub fn close(&self) -> Result<()> {
        let flushed = self.flush().wait();
        lock(&self.inner.admission).closed = true;
        self.inner.room.notify_all();
        self.inner.forget_cached();
        flushed
    }
}

// ------------------------------------------------------------------------------------------------
// The writer.

struct Group {
    records: Vec<PendingRecord>,
    headers: Vec<[u8; RECORD_HEADER_LEN]>,
    positions: Vec<u64>,
    bytes: u64,
}

impl Group {
    fn new() -> Self {
        Group {
            records: Vec::new(),
            headers: Vec::new(),
            positions: Vec::new(),
            bytes: 0,
        }
    }
}

/// How a group or roll failed.
enum WriteFailure {
    NoSpace(Arc<io::Error>),
    Fatal(Arc<io::Error>),
}

impl Job for LogInner {
    fn run_turn(&self) -> bool {
        self.hold_for_group();
        let mut writer = lock(&self.writer);
        let (items, room_waiters): (Vec<Item>, usize) = {
            let mut adm = lock(&self.admission);
            let mut taken = Vec::new();
            let mut bytes = 0u64;
            while let Some(item) = adm.queue.front() {
                let size = match item {
                    Item::Append(r) => r.header.record_len(),
                    _ => 0,
                };
                if !taken.is_empty() && bytes + size > self.config.max_group_bytes {
                    break;
                }
                bytes += size;
                let item = adm.queue.pop_front().expect("front exists");
                if let Item::Append(r) = &item {
                    adm.queued_bytes -= r.header.record_len();
                }
                taken.push(item);
            }
            if taken.is_empty() {
                adm.scheduled = false;
                return false;
            }
            (taken, adm.room_waiters)
        };
        if room_waiters > 0 {
            self.room.notify_all();
        }

        let mut group = Group::new();
        // Set once a write failed in this turn: every later item of the turn is refused with it.
        let mut refused: Option<StorageErrorKind> =
            writer.failed.clone().map(StorageErrorKind::Failed);
        for item in items {
            if let Some(kind) = &refused {
                item.fail(&|| self.error_for(kind));
                continue;
            }
            match item {
                Item::Append(record) => {
                    let needs_roll = writer.active.has_records || !group.records.is_empty();
                    let len_after_group = writer.active.len + group.bytes;
                    if needs_roll && len_after_group >= self.config.segment_size {
                        let outcome = self
                            .commit_group(&mut writer, &mut group)
                            .and_then(|()| self.roll(&mut writer).map_err(|f| (f, Vec::new())));
                        if let Err((failure, records)) = outcome {
                            let kind = self.handle_failure(&mut writer, failure);
                            for r in records.into_iter().chain(std::iter::once(record)) {
                                r.done.complete(Err(self.error_for(&kind)));
                            }
                            refused = Some(kind);
                            continue;
                        }
                    }
                    Self::push_record(&writer, &mut group, record);
                }
                Item::Flush(done) => {
                    self.write_pending_index(&mut writer);
                    let outcome = self
                        .commit_group(&mut writer, &mut group)
                        .and_then(|()| self.sync_active(&mut writer).map_err(|f| (f, Vec::new())));
                    match outcome {
                        Ok(()) => done.complete(Ok(())),
                        Err((failure, records)) => {
                            let kind = self.handle_failure(&mut writer, failure);
                            for r in records {
                                r.done.complete(Err(self.error_for(&kind)));
                            }
                            done.complete(Err(self.error_for(&kind)));
                            refused = Some(kind);
                        }
                    }
                }
                Item::Purge { base, done } => {
                    let outcome = self.commit_group(&mut writer, &mut group).and_then(|()| {
                        self.purge_now(&mut writer, base)
                            .map_err(|f| (f, Vec::new()))
                    });
                    match outcome {
                        Ok(()) => done.complete(Ok(())),
                        Err((failure, records)) => {
                            let kind = self.handle_failure(&mut writer, failure);
                            for r in records {
                                r.done.complete(Err(self.error_for(&kind)));
                            }
                            done.complete(Err(self.error_for(&kind)));
                            refused = Some(kind);
                        }
                    }
                }
            }
        }
        if refused.is_none() {
            if let Err((failure, records)) = self.commit_group(&mut writer, &mut group) {
                let kind = self.handle_failure(&mut writer, failure);
                for r in records {
                    r.done.complete(Err(self.error_for(&kind)));
                }
            }
        }
        drop(writer);
        let mut adm = lock(&self.admission);
        if adm.queue.is_empty() {
            adm.scheduled = false;
            false
        } else {
            if !self.config.group_window.is_zero() {
                *lock(&self.hold_until) =
                    Some(std::time::Instant::now() + self.config.group_window);
            }
            true
        }
    }
}

impl LogInner {
    /// Waits out the group-commit window set by the previous turn, unless a full group is
    /// already queued or the log is closing or failed. (A plain sleep: the window is short,
    /// and waking the writer early would cost every append a notify.)
    fn hold_for_group(&self) {
        if self.config.group_window.is_zero() {
            return;
        }
        let Some(until) = lock(&self.hold_until).take() else {
            return;
        };
        {
            let adm = lock(&self.admission);
            if adm.queued_bytes >= self.config.max_group_bytes || adm.closed || adm.failed.is_some()
            {
                return;
            }
        }
        let now = std::time::Instant::now();
        if until > now {
            std::thread::sleep(until - now);
        }
    }
}

/// The two ways a write can be refused, with the shared cause.
#[derive(Clone)]
enum StorageErrorKind {
    NoSpace(Arc<io::Error>),
    Failed(Arc<io::Error>),
}

impl LogInner {
    fn failed_error(&self, err: &Arc<io::Error>) -> StorageError {
        StorageError::LogFailed {
            path: self.dir.clone(),
            source: Arc::clone(err),
        }
    }

    fn no_space_error(&self, err: &Arc<io::Error>) -> StorageError {
        StorageError::NoSpace {
            path: self.dir.clone(),
            source: Arc::clone(err),
        }
    }

    fn error_for(&self, kind: &StorageErrorKind) -> StorageError {
        match kind {
            StorageErrorKind::NoSpace(err) => self.no_space_error(err),
            StorageErrorKind::Failed(err) => self.failed_error(err),
        }
    }

    /// Reacts to a failed write, **before** any waiter is told about it (so nobody can learn of
    /// the failure and still slip an append in with a stale sequence number): appends queued
    /// behind the failure carry sequence numbers that will never exist, so they are refused and
    /// admission rewinds to what was really written. A fatal failure also fail-stops the log.
    fn handle_failure(&self, writer: &mut Writer, failure: WriteFailure) -> StorageErrorKind {
        let kind = match failure {
            WriteFailure::NoSpace(err) => StorageErrorKind::NoSpace(err),
            WriteFailure::Fatal(err) => {
                if writer.failed.is_none() {
                    tracing::error!(dir = %self.dir.display(), error = %err, "log fail-stopped");
                    writer.failed = Some(Arc::clone(&err));
                }
                StorageErrorKind::Failed(err)
            }
        };
        let drained: Vec<Item> = {
            let mut adm = lock(&self.admission);
            if let StorageErrorKind::Failed(err) = &kind {
                if adm.failed.is_none() {
                    adm.failed = Some(Arc::clone(err));
                }
            }
            adm.next_seq = writer.next_seq;
            adm.last_ts = writer.last_ts;
            adm.queued_bytes = 0;
            adm.epoch += 1;
            if let Some(hook) = &self.hook {
                hook.on_refused(writer.next_seq, &|| self.error_for(&kind));
            }
            adm.queue.drain(..).collect()
        };
        self.room.notify_all();
        for item in drained {
            item.fail(&|| self.error_for(&kind));
        }
        kind
    }

    fn push_record(writer: &Writer, group: &mut Group, mut record: PendingRecord) {
        let expected = writer.next_seq
            + group
                .records
                .iter()
                .map(|r| u64::from(r.header.count))
                .sum::<u64>();
        assert_eq!(
            record.header.seq, expected,
            "admission and writer disagree on the next sequence number"
        );
        let position = writer.active.len + group.bytes;
        record.header.synced_len = writer.active.synced_len;
        record.header.payload_crc = crc32c::crc32c(&record.payload);
        debug_assert!(record.header.synced_len <= position);
        group.headers.push(record.header.encode());
        group.positions.push(position);
        group.bytes += record.header.record_len();
        group.records.push(record);
    }

    /// Writes the group, syncs (per durability), publishes and acknowledges it.
    ///
    /// On failure the records not yet acknowledged are handed back, for the caller to refuse
    /// after [`LogInner::handle_failure`].
    fn commit_group(
        &self,
        writer: &mut Writer,
        group: &mut Group,
    ) -> Result<(), (WriteFailure, Vec<PendingRecord>)> {
        if group.records.is_empty() {
            return Ok(());
        }
        let group = std::mem::replace(group, Group::new());
        let start = writer.active.len;
        let mut parts: Vec<&[u8]> = Vec::with_capacity(group.records.len() * 2);
        for (header, record) in group.headers.iter().zip(&group.records) {
            parts.push(header);
            parts.push(&record.payload);
        }
        if let Err(e) = writer.active.file.append(&parts) {
            drop(parts);
            let no_space = is_no_space(&e);
            let err = Arc::new(e);
            // Take the partial write back so the next group starts at a record boundary.
            let rolled_back = writer.active.file.truncate(start);
            let failure = match rolled_back {
                Ok(()) if no_space => WriteFailure::NoSpace(Arc::clone(&err)),
                Ok(()) => WriteFailure::Fatal(Arc::clone(&err)),
                Err(e2) => WriteFailure::Fatal(Arc::new(e2)),
            };
            return Err((failure, group.records));
        }
        drop(parts);
        writer.active.len += group.bytes;
        let count = group.records.len() as u64;
        self.counters.records.fetch_add(count, Ordering::Relaxed);
        self.counters.groups.fetch_add(1, Ordering::Relaxed);
        self.pool.stats.add_group(count, group.bytes);

        let sync_now = match self.config.durability {
            Durability::Fsync => true,
            Durability::Background {
                max_unsynced_records,
                max_unsynced_bytes,
            } => {
                writer.unsynced_records += count;
                writer.unsynced_bytes += group.bytes;
                writer.unsynced_records >= max_unsynced_records
                    || writer.unsynced_bytes >= max_unsynced_bytes
            }
        };
        let ack_before_sync = !matches!(self.config.durability, Durability::Fsync);
        if sync_now && !ack_before_sync {
            if let Err(failure) = self.sync_active(writer) {
                return Err((failure, group.records));
            }
        }
        let end_seq = group
            .records
            .last()
            .map_or(writer.next_seq, |r| r.header.end_seq());
        if let Some(hook) = &self.hook {
            if let Err(e) = hook.before_ack(end_seq) {
                return Err((WriteFailure::Fatal(Arc::new(e)), group.records));
            }
        }

        // Index entries for the new records.
        let mut new_entries = Vec::new();
        for (record, position) in group.records.iter().zip(&group.positions) {
            if writer
                .active
                .last_index_pos
                .is_none_or(|last| position - last >= self.config.index_interval)
            {
                new_entries.push(IndexEntry {
                    seq: record.header.seq,
                    timestamp: record.header.timestamp,
                    position: *position,
                    kind: IndexKind::Record,
                });
                writer.active.last_index_pos = Some(*position);
            }
        }
        let index_grew = !new_entries.is_empty();

        // Publish, then acknowledge.
        let first_ts = group.records.first().map(|r| r.header.timestamp);
        let last_ts = group.records.last().map(|r| r.header.timestamp);
        writer.next_seq = end_seq;
        if let Some(ts) = last_ts {
            writer.last_ts = ts;
        }
        writer.active.has_records = true;
        {
            let mut view = lock(&self.view);
            let seg = view
                .segments
                .back_mut()
                .expect("a log always has a segment");
            debug_assert_eq!(seg.base, writer.active.base);
            seg.end = end_seq;
            seg.len = writer.active.len;
            if seg.first_ts.is_none() {
                seg.first_ts = first_ts;
            }
            seg.max_ts = last_ts.or(seg.max_ts);
            view.active_index.extend(new_entries);
        }
        if index_grew || writer.active.index_written < self.view_index_len() {
            self.write_pending_index(writer);
        }
        if let Some(hook) = &self.hook {
            hook.after_publish(end_seq);
        }
        for record in group.records {
            let meta = RecordMeta {
                seq: record.header.seq,
                count: record.header.count,
                timestamp: record.header.timestamp,
                tag: record.header.tag,
                len: record.header.payload_len,
            };
            record.done.complete(Ok(meta));
        }
        if sync_now && ack_before_sync {
            self.sync_active(writer).map_err(|f| (f, Vec::new()))?;
        }
        Ok(())
    }

    fn view_index_len(&self) -> usize {
        lock(&self.view).active_index.len()
    }

    /// Appends the active segment's index entries not yet in its file. On failure (a full
    /// disk) the partial entry is cut off and the entries are retried with the next group; the
    /// index is derived data, so a file that cannot be repaired is abandoned and rebuilt at the
    /// next open.
    fn write_pending_index(&self, writer: &mut Writer) {
        let Some(index) = writer.active.index_file.clone() else {
            return;
        };
        let pending: Vec<IndexEntry> =
            lock(&self.view).active_index[writer.active.index_written..].to_vec();
        if pending.is_empty() {
            return;
        }
        let bytes: Vec<u8> = pending.iter().flat_map(IndexEntry::encode).collect();
        match index.append(&[&bytes]) {
            Ok(()) => writer.active.index_written += pending.len(),
            Err(e) => {
                let keep =
                    (INDEX_HEADER_LEN + writer.active.index_written * INDEX_ENTRY_LEN) as u64;
                if let Err(e2) = index.truncate(keep) {
                    tracing::warn!(dir = %self.dir.display(), error = %e2, "index repair failed; it will be rebuilt at next open");
                    writer.active.index_file = None;
                } else {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "index append failed; retrying with the next write");
                }
            }
        }
    }

    fn sync_active(&self, writer: &mut Writer) -> Result<(), WriteFailure> {
        if writer.active.synced_len == writer.active.len {
            return Ok(());
        }
        writer
            .active
            .file
            .sync()
            .map_err(|e| WriteFailure::Fatal(Arc::new(e)))?;
        self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.pool.stats.add_fsync();
        writer.active.synced_len = writer.active.len;
        writer.unsynced_records = 0;
        writer.unsynced_bytes = 0;
        Ok(())
    }

    /// Seals the active segment and starts a new one at the next sequence number.
    fn roll(&self, writer: &mut Writer) -> Result<(), WriteFailure> {
        // Invariant 3: the old segment is durable before its successor exists.
        self.sync_active(writer)?;
        self.write_pending_index(writer);
        let base = writer.next_seq;
        let (file, index_file) = match create_segment(&*self.backend, &self.dir, base) {
            Ok(pair) => pair,
            Err(e) if is_no_space(&e) => return Err(WriteFailure::NoSpace(Arc::new(e))),
            Err(e) => return Err(WriteFailure::Fatal(Arc::new(e))),
        };
        let old = std::mem::replace(
            &mut writer.active,
            ActiveSegment {
                base,
                file: Arc::clone(&file),
                index_file: Some(index_file),
                len: SEGMENT_HEADER_LEN as u64,
                synced_len: SEGMENT_HEADER_LEN as u64,
                last_index_pos: None,
                index_written: 0,
                has_records: false,
            },
        );
        let (max_ts, old_index) = {
            let view = lock(&self.view);
            let seg = view.segments.back().expect("a log always has a segment");
            (seg.max_ts, view.active_index.clone())
        };
        // Seal the old index (best effort: a missing seal only costs a rescan at open).
        if let Some(old_index_file) = &old.index_file {
            let seal = IndexEntry {
                seq: base,
                timestamp: max_ts.unwrap_or(0),
                position: old.len,
                kind: IndexKind::Seal,
            };
            let sealed = old_index_file
                .append(&[&seal.encode()])
                .and_then(|()| old_index_file.sync());
            if let Err(e) = sealed {
                tracing::warn!(dir = %self.dir.display(), error = %e, "sealing index failed; it will be rebuilt at next open");
            }
        }
        {
            let mut view = lock(&self.view);
            if let Some(seg) = view.segments.back_mut() {
                seg.sealed = true;
            }
            view.segments.push_back(SegmentState {
                base,
                end: base,
                len: SEGMENT_HEADER_LEN as u64,
                first_ts: None,
                max_ts: None,
                sealed: false,
                owner: self.id,
            });
            view.active_file = file;
            view.active_index = Vec::new();
        }
        // Keep the just-sealed segment hot in the cache.
        self.cache.insert(
            (self.id, old.base),
            Arc::new(SealedSegment {
                file: old.file,
                index: old_index,
            }),
        );
        Ok(())
    }

    fn purge_now(&self, writer: &mut Writer, base: u64) -> Result<(), WriteFailure> {
        let fatal = |e: StorageError| WriteFailure::Fatal(Arc::new(io::Error::other(e)));
        // No segment file may be swapped in while they are removed (see `swap`).
        let _swap = read_lock(&self.swap);
        let old: Vec<(u64, u64)> = lock(&self.view)
            .segments
            .iter()
            .map(|s| (s.owner, s.base))
            .collect();
        for (owner, seg_base) in &old {
            self.cache.remove((*owner, *seg_base));
            remove_segment_files(&*self.backend, &self.dir, *seg_base).map_err(fatal)?;
        }
        let (file, index_file) = match create_segment(&*self.backend, &self.dir, base) {
            Ok(pair) => pair,
            Err(e) if is_no_space(&e) => return Err(WriteFailure::NoSpace(Arc::new(e))),
            Err(e) => return Err(WriteFailure::Fatal(Arc::new(e))),
        };
        writer.active = ActiveSegment {
            base,
            file: Arc::clone(&file),
            index_file: Some(index_file),
            len: SEGMENT_HEADER_LEN as u64,
            synced_len: SEGMENT_HEADER_LEN as u64,
            last_index_pos: None,
            index_written: 0,
            has_records: false,
        };
        writer.next_seq = base;
        writer.unsynced_bytes = 0;
        writer.unsynced_records = 0;
        let mut view = lock(&self.view);
        view.segments.clear();
        view.segments.push_back(SegmentState {
            base,
            end: base,
            len: SEGMENT_HEADER_LEN as u64,
            first_ts: None,
            max_ts: None,
            sealed: false,
            owner: self.id,
        });
        view.active_file = file;
        view.active_index = Vec::new();
        Ok(())
    }
}

impl LogInner {
    /// Drops every cache entry of this log (rewritten segments have their own owner ids).
    fn forget_cached(&self) {
        self.cache.remove_log(self.id);
        for seg in &lock(&self.view).segments {
            if seg.owner != self.id {
                self.cache.remove((seg.owner, seg.base));
            }
        }
    }
}

impl Drop for LogInner {
    fn drop(&mut self) {
        self.forget_cached();
    }
}

// ------------------------------------------------------------------------------------------------
// Reading.

/// A segment as seen by one read.
struct ReadTarget {
    base: u64,
    end: u64,
    len: u64,
    sealed: bool,
    /// Owner half of the cache key of the file version `len` describes.
    owner: u64,
    /// Active segment: its file and the index position to start from.
    active: Option<(Arc<dyn StorageFile>, u64)>,
}

impl Log {
    /// The readable range.
    pub fn bounds(&self) -> LogBounds {
        let view = lock(&self.inner.view);
        LogBounds {
            first: view.segments.front().map_or(0, |s| s.base),
            next: view.segments.back().map_or(0, |s| s.end),
            bytes: view.segments.iter().map(|s| s.len).sum(),
            segments: view.segments.len(),
        }
    }

    /// Summaries of every segment, oldest first.
    pub fn segments(&self) -> Vec<SegmentSummary> {
        lock(&self.inner.view)
            .segments
            .iter()
            .map(SegmentState::summary)
            .collect()
    }

    fn targets_from(&self, from_seq: u64) -> Vec<ReadTarget> {
        let view = lock(&self.inner.view);
        let count = view.segments.len();
        let first = view.segments.partition_point(|s| s.end <= from_seq);
        view.segments
            .iter()
            .enumerate()
            .skip(first)
            .filter(|(_, s)| s.end > s.base)
            .map(|(i, s)| {
                let active = (i + 1 == count).then(|| {
                    let pos = index_lower_bound(&view.active_index, from_seq);
                    (Arc::clone(&view.active_file), pos)
                });
                ReadTarget {
                    base: s.base,
                    end: s.end,
                    len: s.len,
                    sealed: s.sealed,
                    owner: s.owner,
                    active,
                }
            })
            .collect()
    }

    /// Loads (or finds in the cache) the version of a sealed segment's file and index that
    /// `target` describes. `None` when that version is gone (the segment was rewritten or
    /// deleted since the target was taken): the caller takes fresh targets and tries again.
    fn sealed(&self, target: &ReadTarget) -> Result<Option<Arc<SealedSegment>>> {
        let inner = &self.inner;
        let (owner, base) = (target.owner, target.base);
        if let Some(hit) = inner.cache.get((owner, base)) {
            return Ok(Some(hit));
        }
        // Under the swap lock the files behind the segment's names are the ones the view
        // describes: no rewrite can rename a new version in while we open them.
        let _swap = read_lock(&inner.swap);
        let current = lock(&inner.view)
            .segments
            .iter()
            .any(|s| s.base == base && s.owner == owner);
        if !current {
            return Ok(None);
        }
        let path = inner.dir.join(segment_file_name(base));
        let file = inner
            .backend
            .open(&path, OpenMode::Existing)
            .map_err(|e| StorageError::io(IoOp::Open, &path, e))?;
        let len = file
            .len()
            .map_err(|e| StorageError::io(IoOp::Len, &path, e))?;
        let index = load_index(
            &*inner.backend,
            &inner.dir.join(index_file_name(base)),
            base,
            len,
        )?
        .map(|i| i.entries)
        .unwrap_or_default();
        let loaded = Arc::new(SealedSegment { file, index });
        inner.cache.insert((owner, base), Arc::clone(&loaded));
        Ok(Some(loaded))
    }

    /// Reads records covering sequence numbers from `from_seq` on: the first returned record is
    /// the one containing `from_seq` (or the first retained one after it, when `from_seq` was
    /// deleted or falls in a gap). Stops once the records cover `max_seqs` sequence numbers at or
    /// after `from_seq`, or hold at least `max_bytes` payload bytes (at least one record is
    /// returned when any exists). Only acknowledged records are visible.
    ///
    /// A segment rewritten ([`Log::rewrite_sealed`]) or deleted while the read runs is read
    /// either in the version the read found first or, after a retry, in its new version.
    pub fn read(&self, from_seq: u64, max_seqs: u64, max_bytes: u64) -> Result<Vec<StoredRecord>> {
        loop {
            if let Some(records) = self.read_once(from_seq, max_seqs, max_bytes)? {
                return Ok(records);
            }
        }
    }

    /// One attempt of [`Log::read`]; `None` when a segment changed under it.
    fn read_once(
        &self,
        from_seq: u64,
        max_seqs: u64,
        max_bytes: u64,
    ) -> Result<Option<Vec<StoredRecord>>> {
        let mut out = Vec::new();
        if max_seqs == 0 {
            return Ok(Some(out));
        }
        let mut covered = 0u64;
        let mut bytes = 0u64;
        for target in self.targets_from(from_seq) {
            let (file, start_pos, index_hint) = if let Some((file, pos)) = &target.active {
                (Arc::clone(file), *pos, None)
            } else {
                let Some(sealed) = self.sealed(&target)? else {
                    return Ok(None);
                };
                let pos = index_lower_bound(&sealed.index, from_seq);
                let past = from_seq.saturating_add(max_seqs);
                let i = sealed.index.partition_point(|e| e.seq <= past);
                let next = sealed.index.get(i).map(|e| e.position);
                (Arc::clone(&sealed.file), pos, next)
            };
            let done = self.read_segment(
                &target,
                &*file,
                start_pos,
                index_hint,
                from_seq,
                max_seqs,
                max_bytes,
                &mut covered,
                &mut bytes,
                &mut out,
            )?;
            if done {
                break;
            }
        }
        Ok(Some(out))
    }

    #[allow(clippy::too_many_arguments)]
    fn read_segment(
        &self,
        target: &ReadTarget,
        file: &dyn StorageFile,
        start_pos: u64,
        end_hint: Option<u64>,
        from_seq: u64,
        max_seqs: u64,
        max_bytes: u64,
        covered: &mut u64,
        bytes: &mut u64,
        out: &mut Vec<StoredRecord>,
    ) -> Result<bool> {
        let path = || self.inner.dir.join(segment_file_name(target.base));
        let mut pos = start_pos;
        // First read: up to the index entry past the wanted range, or a size estimate.
        let per_seq = (target.len - SEGMENT_HEADER_LEN as u64) / (target.end - target.base).max(1);
        let estimate = per_seq
            .saturating_mul(max_seqs.saturating_add(1))
            .min(max_bytes.saturating_add(per_seq));
        let mut want = end_hint
            .map_or(estimate, |hint| hint.saturating_sub(pos).max(estimate))
            .clamp(MIN_READ_CHUNK, MAX_READ_CHUNK);
        let mut expected_seq: Option<u64> = None;
        while pos < target.len {
            if target.len - pos < RECORD_HEADER_LEN as u64 {
                // The visible length always ends at a record boundary.
                return Err(StorageError::corrupt(path(), pos, Corruption::Truncated));
            }
            let len = want.min(target.len - pos);
            let chunk =
                read_exact(file, pos, len).map_err(|e| StorageError::io(IoOp::Read, path(), e))?;
            let mut off = 0usize;
            let mut progressed = false;
            while off + RECORD_HEADER_LEN <= chunk.len() {
                let at = pos + off as u64;
                let header = RecordHeader::decode(&chunk[off..off + RECORD_HEADER_LEN], at)
                    .map_err(|kind| StorageError::corrupt(path(), at, kind))?;
                if let Some(expected) = expected_seq {
                    if header.seq != expected {
                        return Err(StorageError::corrupt(
                            path(),
                            at,
                            Corruption::NonContiguous {
                                expected,
                                found: header.seq,
                            },
                        ));
                    }
                }
                let record_len = usize::try_from(header.record_len()).unwrap_or(usize::MAX);
                if off + record_len > chunk.len() {
                    if at + header.record_len() > target.len {
                        return Err(StorageError::corrupt(path(), at, Corruption::Truncated));
                    }
                    break;
                }
                progressed = true;
                expected_seq = Some(header.end_seq());
                let payload_range = off + RECORD_HEADER_LEN..off + record_len;
                off += record_len;
                if header.end_seq() <= from_seq {
                    continue;
                }
                let payload = chunk.slice(payload_range);
                if self.inner.config.verify_on_read {
                    header
                        .verify_payload(&payload)
                        .map_err(|kind| StorageError::corrupt(path(), at, kind))?;
                }
                let start = header.seq.max(from_seq);
                *covered += header.end_seq() - start;
                *bytes += u64::from(header.payload_len);
                out.push(StoredRecord {
                    meta: RecordMeta {
                        seq: header.seq,
                        count: header.count,
                        timestamp: header.timestamp,
                        tag: header.tag,
                        len: header.payload_len,
                    },
                    payload,
                });
                if *covered >= max_seqs || *bytes >= max_bytes {
                    return Ok(true);
                }
            }
            pos += off as u64;
            if progressed {
                want = (want * 2).min(MAX_READ_CHUNK);
            } else {
                // The next record is larger than the chunk: read exactly it.
                let raw = read_exact(file, pos, RECORD_HEADER_LEN as u64)
                    .map_err(|e| StorageError::io(IoOp::Read, path(), e))?;
                let header = RecordHeader::decode(&raw, pos)
                    .map_err(|kind| StorageError::corrupt(path(), pos, kind))?;
                want = header.record_len();
            }
        }
        Ok(false)
    }

    /// Reads the one visible record containing sequence number `seq` with small reads (8 KiB
    /// at a time from the nearest index entry), for point lookups such as the event
    /// store's: [`Log::read`] reads ahead in large chunks, which suits scans. `None` when no
    /// visible record contains `seq`.
    pub fn read_record(&self, seq: u64) -> Result<Option<StoredRecord>> {
        let (target, file, mut pos) = loop {
            let Some(target) = self.targets_from(seq).into_iter().next() else {
                return Ok(None);
            };
            if seq < target.base {
                return Ok(None);
            }
            let (file, pos) = if let Some((file, pos)) = &target.active {
                (Arc::clone(file), *pos)
            } else {
                let Some(sealed) = self.sealed(&target)? else {
                    continue; // rewritten or deleted meanwhile: look again
                };
                let pos = index_lower_bound(&sealed.index, seq);
                (Arc::clone(&sealed.file), pos)
            };
            break (target, file, pos);
        };
        let path = || self.inner.dir.join(segment_file_name(target.base));
        // One small read usually covers the walk from the index entry to the record.
        let mut chunk = Bytes::new();
        let mut chunk_pos = pos;
        while pos + RECORD_HEADER_LEN as u64 <= target.len {
            let in_chunk = |at: u64, len: u64, chunk: &Bytes, chunk_pos: u64| {
                at >= chunk_pos && at + len <= chunk_pos + chunk.len() as u64
            };
            if !in_chunk(pos, RECORD_HEADER_LEN as u64, &chunk, chunk_pos) {
                let len = (target.len - pos).min(POINT_READ_CHUNK);
                chunk = read_exact(&*file, pos, len)
                    .map_err(|e| StorageError::io(IoOp::Read, path(), e))?;
                chunk_pos = pos;
            }
            let off = usize::try_from(pos - chunk_pos).unwrap_or(usize::MAX);
            let header = RecordHeader::decode(&chunk[off..off + RECORD_HEADER_LEN], pos)
                .map_err(|kind| StorageError::corrupt(path(), pos, kind))?;
            if header.seq > seq {
                return Ok(None);
            }
            if seq < header.end_seq() {
                if pos + header.record_len() > target.len {
                    return Err(StorageError::corrupt(path(), pos, Corruption::Truncated));
                }
                let start = pos + RECORD_HEADER_LEN as u64;
                let payload = if in_chunk(start, u64::from(header.payload_len), &chunk, chunk_pos) {
                    let from = off + RECORD_HEADER_LEN;
                    chunk.slice(from..from + header.payload_len as usize)
                } else {
                    read_exact(&*file, start, u64::from(header.payload_len))
                        .map_err(|e| StorageError::io(IoOp::Read, path(), e))?
                };
                if self.inner.config.verify_on_read {
                    header
                        .verify_payload(&payload)
                        .map_err(|kind| StorageError::corrupt(path(), pos, kind))?;
                }
                return Ok(Some(StoredRecord {
                    meta: RecordMeta {
                        seq: header.seq,
                        count: header.count,
                        timestamp: header.timestamp,
                        tag: header.tag,
                        len: header.payload_len,
                    },
                    payload,
                }));
            }
            pos += header.record_len();
        }
        Ok(None)
    }

    /// The first sequence number whose record's timestamp is at or after `timestamp`, or `None`
    /// when every retained record is older.
    pub fn seq_at_timestamp(&self, timestamp: u64) -> Result<Option<u64>> {
        let (target, file, mut pos) = loop {
            let target = {
                let view = lock(&self.inner.view);
                let count = view.segments.len();
                let Some((i, seg)) = view
                    .segments
                    .iter()
                    .enumerate()
                    .find(|(_, s)| s.max_ts.is_some_and(|m| m >= timestamp))
                else {
                    return Ok(None);
                };
                let active = (i + 1 == count).then(|| {
                    let pos = index_lower_bound_ts(&view.active_index, timestamp);
                    (Arc::clone(&view.active_file), pos)
                });
                ReadTarget {
                    base: seg.base,
                    end: seg.end,
                    len: seg.len,
                    sealed: seg.sealed,
                    owner: seg.owner,
                    active,
                }
            };
            let (file, pos) = if let Some((file, pos)) = &target.active {
                (Arc::clone(file), *pos)
            } else {
                let Some(sealed) = self.sealed(&target)? else {
                    continue; // rewritten or deleted meanwhile: look again
                };
                let pos = index_lower_bound_ts(&sealed.index, timestamp);
                (Arc::clone(&sealed.file), pos)
            };
            break (target, file, pos);
        };
        debug_assert!(target.sealed || target.active.is_some());
        let path = || self.inner.dir.join(segment_file_name(target.base));
        while pos < target.len {
            let raw = read_exact(&*file, pos, RECORD_HEADER_LEN as u64)
                .map_err(|e| StorageError::io(IoOp::Read, path(), e))?;
            let header = RecordHeader::decode(&raw, pos)
                .map_err(|kind| StorageError::corrupt(path(), pos, kind))?;
            if header.timestamp >= timestamp {
                return Ok(Some(header.seq));
            }
            pos += header.record_len();
        }
        // The segment's max timestamp said a record qualifies.
        Err(StorageError::corrupt(path(), pos, Corruption::Truncated))
    }
}

/// Position of the last index entry with `seq <= target` (or the first record).
fn index_lower_bound(index: &[IndexEntry], target: u64) -> u64 {
    let i = index.partition_point(|e| e.seq <= target);
    if i == 0 {
        SEGMENT_HEADER_LEN as u64
    } else {
        index[i - 1].position
    }
}

/// Position of the last index entry with `timestamp < target` (or the first record).
fn index_lower_bound_ts(index: &[IndexEntry], target: u64) -> u64 {
    let i = index.partition_point(|e| e.timestamp < target);
    if i == 0 {
        SEGMENT_HEADER_LEN as u64
    } else {
        index[i - 1].position
    }
}

// ------------------------------------------------------------------------------------------------
// Rewriting sealed segments.

/// What [`Log::rewrite_sealed`] did to one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SegmentRewrite {
    /// The segment's base sequence number.
    pub base: u64,
    /// Records read.
    pub records: u64,
    /// Records whose payload was replaced.
    pub rewritten: u64,
    /// File bytes before.
    pub old_bytes: u64,
    /// File bytes after (`old_bytes` when no payload changed: then nothing was written).
    pub new_bytes: u64,
}

/// Bytes a rewrite buffers before appending them to the new file.
const REWRITE_CHUNK: usize = 1024 * 1024;

/// Calls `visit(position, header, payload)` for every record of a sealed segment file, from
/// its first record to `len`, verifying both checksums and that sequence numbers run
/// contiguously from `base` to `end`. Any damage is corruption: sealed segments are never torn.
fn visit_records(
    file: &dyn StorageFile,
    path: &Path,
    (base, end, len): (u64, u64, u64),
    mut visit: impl FnMut(u64, &RecordHeader, Bytes) -> Result<()>,
) -> Result<()> {
    let corrupt = |at: u64, kind| StorageError::corrupt(path, at, kind);
    let read = |at: u64, n: u64| {
        read_exact(file, at, n).map_err(|e| StorageError::io(IoOp::Read, path, e))
    };
    let mut pos = SEGMENT_HEADER_LEN as u64;
    let mut seq = base;
    let mut chunk = Bytes::new();
    let mut chunk_pos = pos;
    let in_chunk = |at: u64, n: u64, chunk: &Bytes, chunk_pos: u64| {
        at >= chunk_pos && at + n <= chunk_pos + chunk.len() as u64
    };
    while pos < len {
        let remaining = len - pos;
        if remaining < RECORD_HEADER_LEN as u64 {
            return Err(corrupt(pos, Corruption::SealedSegmentTail));
        }
        if !in_chunk(pos, RECORD_HEADER_LEN as u64, &chunk, chunk_pos) {
            chunk = read(pos, remaining.min(SCAN_CHUNK))?;
            chunk_pos = pos;
        }
        let off = usize::try_from(pos - chunk_pos).unwrap_or(usize::MAX);
        let header = RecordHeader::decode(&chunk[off..off + RECORD_HEADER_LEN], pos)
            .map_err(|kind| corrupt(pos, kind))?;
        if header.seq != seq {
            return Err(corrupt(
                pos,
                Corruption::NonContiguous {
                    expected: seq,
                    found: header.seq,
                },
            ));
        }
        let record_len = header.record_len();
        if record_len > remaining {
            return Err(corrupt(pos, Corruption::SealedSegmentTail));
        }
        if !in_chunk(pos, record_len, &chunk, chunk_pos) {
            chunk = read(pos, remaining.min(SCAN_CHUNK.max(record_len)))?;
            chunk_pos = pos;
        }
        let off = usize::try_from(pos - chunk_pos).unwrap_or(usize::MAX);
        let payload = chunk
            .slice(off + RECORD_HEADER_LEN..off + RECORD_HEADER_LEN + header.payload_len as usize);
        header
            .verify_payload(&payload)
            .map_err(|kind| corrupt(pos, kind))?;
        visit(pos, &header, payload)?;
        pos += record_len;
        seq = header.end_seq();
    }
    if seq != end {
        return Err(corrupt(
            pos,
            Corruption::NonContiguous {
                expected: end,
                found: seq,
            },
        ));
    }
    Ok(())
}

/// The new version of a segment being written by [`Log::rewrite_sealed`].
struct NewSegment {
    file: Arc<dyn StorageFile>,
    path: PathBuf,
    buf: BytesMut,
    /// Bytes already appended to `file`.
    written: u64,
    index: Vec<IndexEntry>,
    last_index_pos: Option<u64>,
    interval: u64,
}

impl NewSegment {
    fn io(&self, op: IoOp) -> impl Fn(io::Error) -> StorageError + '_ {
        move |e| StorageError::io(op, &self.path, e)
    }

    fn len(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.file
                .append(&[&self.buf])
                .map_err(self.io(IoOp::Append))?;
            self.written += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    fn push(&mut self, header: &RecordHeader, payload: &[u8]) -> Result<()> {
        let position = self.len();
        if self
            .last_index_pos
            .is_none_or(|last| position - last >= self.interval)
        {
            self.index.push(IndexEntry {
                seq: header.seq,
                timestamp: header.timestamp,
                position,
                kind: IndexKind::Record,
            });
            self.last_index_pos = Some(position);
        }
        let encoded = header.encode();
        if payload.len() >= REWRITE_CHUNK {
            // A large record goes out as is, without a copy into the buffer.
            self.flush()?;
            self.file
                .append(&[&encoded, payload])
                .map_err(self.io(IoOp::Append))?;
            self.written += header.record_len();
            return Ok(());
        }
        self.buf.extend_from_slice(&encoded);
        self.buf.extend_from_slice(payload);
        if self.buf.len() >= REWRITE_CHUNK {
            self.flush()?;
        }
        Ok(())
    }
}

impl Log {
    /// Rewrites sealed segment `base` with new payloads: `rewrite` is called with every record
    /// of the segment, in order, and returns a replacement payload or `None` to keep the
    /// record as it is. Sequence numbers, counts, timestamps and tags never change (only bytes
    /// move), so anything that refers to a record by sequence number stays valid. This is the
    /// event store's compaction primitive; an upper layer that replaces a payload must be able
    /// to read both the old and the new payload (a crash may leave either).
    ///
    /// Returns `None` when `base` is not (or no longer) a sealed segment of this log. When no
    /// payload changes, nothing is written. Rewrites of one log run one at a time; appends are
    /// never blocked (the active segment is not involved).
    ///
    /// # Protocol
    ///
    /// 1. Every record is read and verified from the segment's current file, and the new
    ///    version is written to `<base>.log.rewrite.tmp` (record headers re-encoded with the
    ///    new payload's length and CRC, `synced_len` 0) together with its sparse index in
    ///    `<base>.index.rewrite.tmp` (sealed); both are fdatasynced, then the directory.
    /// 2. Under the swap lock (which keeps segment loads, retention and purges out): the old
    ///    index is removed, the new file is renamed over `<base>.log` (the atomic switch), the
    ///    read view and the cache move to the new version, the new index is renamed into
    ///    place; then the directory is synced.
    ///
    /// A crash at any point leaves `<base>.log` as either the old or the new version, each a
    /// complete, valid segment with the same records; recovery removes the leftover `*.tmp`
    /// files and rebuilds a missing index (or one that disagrees with its segment). Readers
    /// that hold the old version (a cached file handle) keep reading it; readers that come
    /// later, or that find their version gone, take the new one.
    pub fn rewrite_sealed(
        &self,
        base: u64,
        mut rewrite: impl FnMut(&RecordMeta, &Bytes) -> Result<Option<Bytes>>,
    ) -> Result<Option<SegmentRewrite>> {
        let inner = &self.inner;
        let _one = lock(&inner.rewriting);
        let (target, max_ts, old) = loop {
            let (target, max_ts) = {
                let view = lock(&inner.view);
                let Some(seg) = view.segments.iter().find(|s| s.base == base && s.sealed) else {
                    return Ok(None);
                };
                let target = ReadTarget {
                    base,
                    end: seg.end,
                    len: seg.len,
                    sealed: true,
                    owner: seg.owner,
                    active: None,
                };
                (target, seg.max_ts)
            };
            if let Some(old) = self.sealed(&target)? {
                break (target, max_ts, old);
            }
        };
        let log_path = inner.dir.join(segment_file_name(base));
        let index_path = inner.dir.join(index_file_name(base));
        let log_tmp = inner
            .dir
            .join(format!("{}.rewrite.tmp", segment_file_name(base)));
        let index_tmp = inner
            .dir
            .join(format!("{}.rewrite.tmp", index_file_name(base)));
        let discard = || {
            let _ = inner.backend.remove_file(&log_tmp);
            let _ = inner.backend.remove_file(&index_tmp);
        };
        discard();
        let mut report = SegmentRewrite {
            base,
            old_bytes: target.len,
            new_bytes: target.len,
            ..SegmentRewrite::default()
        };
        let written = (|| -> Result<Option<NewSegment>> {
            let file = inner
                .backend
                .open(&log_tmp, OpenMode::CreateNew)
                .map_err(|e| StorageError::io(IoOp::Open, &log_tmp, e))?;
            let mut new = NewSegment {
                file,
                path: log_tmp.clone(),
                buf: BytesMut::with_capacity(REWRITE_CHUNK + RECORD_HEADER_LEN),
                written: 0,
                index: Vec::new(),
                last_index_pos: None,
                interval: inner.config.index_interval,
            };
            new.buf.extend_from_slice(&encode_segment_header(base));
            visit_records(
                &*old.file,
                &log_path,
                (base, target.end, target.len),
                |_, header, payload| {
                    report.records += 1;
                    let meta = RecordMeta {
                        seq: header.seq,
                        count: header.count,
                        timestamp: header.timestamp,
                        tag: header.tag,
                        len: header.payload_len,
                    };
                    let (payload, payload_crc) = match rewrite(&meta, &payload)? {
                        None => (payload, header.payload_crc),
                        Some(replaced) => {
                            report.rewritten += 1;
                            let crc = crc32c::crc32c(&replaced);
                            (replaced, crc)
                        }
                    };
                    let payload_len = u32::try_from(payload.len())
                        .ok()
                        .filter(|len| *len <= MAX_RECORD_PAYLOAD)
                        .ok_or(StorageError::LimitExceeded {
                            what: "rewritten record payload bytes",
                            size: payload.len() as u64,
                            limit: u64::from(MAX_RECORD_PAYLOAD),
                        })?;
                    let header = RecordHeader {
                        payload_len,
                        payload_crc,
                        synced_len: 0,
                        ..*header
                    };
                    new.push(&header, &payload)
                },
            )?;
            if report.rewritten == 0 {
                return Ok(None);
            }
            new.flush()?;
            new.file.sync().map_err(new.io(IoOp::Sync))?;
            let seal = IndexEntry {
                seq: target.end,
                timestamp: max_ts.unwrap_or(0),
                position: new.len(),
                kind: IndexKind::Seal,
            };
            let index_file = inner
                .backend
                .open(&index_tmp, OpenMode::CreateNew)
                .map_err(|e| StorageError::io(IoOp::Open, &index_tmp, e))?;
            let mut bytes =
                Vec::with_capacity(INDEX_HEADER_LEN + (new.index.len() + 1) * INDEX_ENTRY_LEN);
            bytes.extend_from_slice(&encode_index_header(base));
            for entry in new.index.iter().chain(std::iter::once(&seal)) {
                bytes.extend_from_slice(&entry.encode());
            }
            index_file
                .append(&[&bytes])
                .and_then(|()| index_file.sync())
                .map_err(|e| StorageError::io(IoOp::Append, &index_tmp, e))?;
            inner
                .backend
                .sync_dir(&inner.dir)
                .map_err(|e| StorageError::io(IoOp::SyncDir, &inner.dir, e))?;
            Ok(Some(new))
        })();
        let new = match written {
            Ok(Some(new)) => new,
            Ok(None) => {
                discard();
                return Ok(Some(report));
            }
            Err(e) => {
                discard();
                return Err(e);
            }
        };
        report.new_bytes = new.len();
        let owner = crate::cache::next_owner_id();
        {
            let _swap = inner.swap.write().unwrap_or_else(PoisonError::into_inner);
            let present = lock(&inner.view)
                .segments
                .iter()
                .any(|s| s.base == base && s.owner == target.owner);
            if !present {
                // Deleted by retention or a purge meanwhile: nothing to replace.
                discard();
                return Ok(None);
            }
            // From here until the rename a crash leaves the old version without an index.
            match inner.backend.remove_file(&index_path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    discard();
                    return Err(StorageError::io(IoOp::Remove, &index_path, e));
                }
            }
            if let Err(e) = inner.backend.rename(&log_tmp, &log_path) {
                discard();
                return Err(StorageError::io(IoOp::Rename, &log_path, e));
            }
            // The file behind the name is the new version: the view and the cache follow.
            {
                let mut view = lock(&inner.view);
                let seg = view
                    .segments
                    .iter_mut()
                    .find(|s| s.base == base)
                    .expect("segments leave the view only under the swap lock");
                seg.len = report.new_bytes;
                seg.owner = owner;
            }
            inner.cache.remove((target.owner, base));
            inner.cache.insert(
                (owner, base),
                Arc::new(SealedSegment {
                    file: new.file,
                    index: new.index,
                }),
            );
            if let Err(e) = inner.backend.rename(&index_tmp, &index_path) {
                // Derived data: rebuilt at the next open; until then a load of this segment
                // walks from its first record.
                tracing::warn!(path = %index_path.display(), error = %e, "installing a rewritten segment's index failed");
                let _ = inner.backend.remove_file(&index_tmp);
            }
        }
        if let Err(e) = inner.backend.sync_dir(&inner.dir) {
            // Either version of the segment is a correct segment: a lost rename only loses the
            // space it reclaimed.
            tracing::warn!(dir = %inner.dir.display(), error = %e, "syncing a rewritten segment's directory failed");
        }
        Ok(Some(report))
    }
}

// ------------------------------------------------------------------------------------------------
// Retention.

impl Log {
    /// Deletes sealed segments oldest first while `pred` holds, stopping at the first segment it
    /// rejects. The active segment is never deleted. Appends are not blocked: segments leave the
    /// read view under a short lock and their files are removed afterwards. Returns what was
    /// deleted.
    pub fn delete_sealed_while(
        &self,
        mut pred: impl FnMut(&SegmentSummary) -> bool,
    ) -> Result<Vec<SegmentSummary>> {
        // No rewrite may rename a new version of a segment in while it is being removed.
        let _swap = read_lock(&self.inner.swap);
        let removed: Vec<(u64, SegmentSummary)> = {
            let mut view = lock(&self.inner.view);
            let mut removed = Vec::new();
            while view.segments.len() > 1 {
                let front = view.segments.front().expect("len > 1");
                let (owner, summary) = (front.owner, front.summary());
                debug_assert!(summary.sealed);
                if !summary.sealed || !pred(&summary) {
                    break;
                }
                view.segments.pop_front();
                removed.push((owner, summary));
            }
            removed
        };
        for (owner, seg) in &removed {
            self.inner.cache.remove((*owner, seg.base));
            remove_segment_files(&*self.inner.backend, &self.inner.dir, seg.base)?;
        }
        Ok(removed.into_iter().map(|(_, s)| s).collect())
    }

    /// Deletes the `n` oldest sealed segments (fewer if there are fewer).
    pub fn delete_oldest_segments(&self, n: usize) -> Result<Vec<SegmentSummary>> {
        let mut left = n;
        self.delete_sealed_while(|_| {
            if left == 0 {
                false
            } else {
                left -= 1;
                true
            }
        })
    }
}

#[cfg(test)]
mod tests;
