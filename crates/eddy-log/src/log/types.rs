//! The values a log hands out and takes in: record metadata, read results, segment summaries,
//! recovery reports, counters, open options and the commit hook.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::cipher::Cipher;
use crate::error::{Corruption, LogError};
use crate::format::{RECORD_HEADER_LEN, SEGMENT_HEADER_LEN};
use crate::pool::CommitStats;

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
    /// Records in it.
    pub records: u64,
    /// Timestamp of its first record (`None` when empty).
    pub first_timestamp: Option<u64>,
    /// Newest timestamp in it (`None` when empty).
    pub max_timestamp: Option<u64>,
    /// True when sealed (immutable).
    pub sealed: bool,
}

impl SegmentSummary {
    /// Bytes of its record payloads as stored: the file without its segment header and record
    /// headers (for a partition: the stored batches, exactly as appended; a log with a
    /// [`Cipher`] stores them sealed, [`SEALED_OVERHEAD`](crate::cipher::SEALED_OVERHEAD)
    /// bytes longer each).
    pub fn payload_bytes(&self) -> u64 {
        self.bytes
            .saturating_sub(SEGMENT_HEADER_LEN as u64)
            .saturating_sub(self.records.saturating_mul(RECORD_HEADER_LEN as u64))
    }
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

/// One repair performed because [`LogConfig::repair`](crate::LogConfig::repair) was set.
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
    /// Interior corruption cut away (only with [`LogConfig::repair`](crate::LogConfig::repair)).
    pub repairs: Vec<Repair>,
    /// Bases of the segments whose index was rebuilt.
    pub indexes_rebuilt: Vec<u64>,
    /// Record bytes read and verified.
    pub bytes_verified: u64,
    /// Stray files removed (orphan indexes, temporary files, an empty segment replaced).
    pub removed: Vec<PathBuf>,
    /// Zeros cut from the end of the active segment: its preallocated space after a crash
    /// (see [`LogConfig::preallocate`](crate::LogConfig::preallocate)). Nothing is lost there.
    pub zero_tail_bytes: u64,
}

/// Called by the writer around acknowledgements, so an upper layer can act in log order on
/// the writer thread: the partition persists its offset frontier in `before_ack`; the metadata
/// store hands durable operations to its applier in `after_publish` (the applier's answer is
/// the operation's acknowledgement, so the operation must be readable by then) and forgets
/// refused ones in `on_refused`.
pub trait CommitHook: Send + Sync + fmt::Debug {
    /// Records up to (not including) `end_seq` are durable (written, for background durability)
    /// and about to be acknowledged. An error fail-stops the log.
    fn before_ack(&self, end_seq: u64) -> io::Result<()>;

    /// Every queued record from `next_seq` on was refused with `error()`. Called under the
    /// log's admission lock (so no append can slip in between): do not append from here.
    fn on_refused(&self, next_seq: u64, error: &dyn Fn() -> LogError) {
        let _ = (next_seq, error);
    }

    /// Records up to (not including) `end_seq` are durable **and** visible to [`Log::read`](crate::Log::read);
    /// their acknowledgements follow. Called on the writer thread, in log order, without the
    /// admission lock: the event store moves its per-aggregate state from speculative to
    /// committed here, so state never points at a record readers cannot see yet.
    fn after_publish(&self, end_seq: u64) {
        let _ = end_seq;
    }
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

/// Options of [`Log::open`](crate::Log::open) beyond the [`LogConfig`](crate::LogConfig).
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Base sequence number of the first segment when the directory holds no segment.
    pub initial_seq: u64,
    /// The next sequence number must be at least this (an offset frontier persisted by an upper
    /// layer). If recovery ends lower, a new segment is started at this sequence number.
    pub min_next_seq: u64,
    /// Called around acknowledgements (see [`CommitHook`]).
    pub hook: Option<Arc<dyn CommitHook>>,
    /// Group-commit counters of the store that owns this log (besides the pool's totals), so
    /// each store on a shared [`CommitPool`](crate::CommitPool) reports its own.
    pub stats: Option<Arc<CommitStats>>,
    /// Encrypt record payloads at rest with this key (see [`crate::cipher`]).
    pub cipher: Option<Cipher>,
    /// Switches the group-commit window ([`LogConfig::group_window`](crate::LogConfig::group_window))
    /// on and off while the log runs; `None`: a configured window always applies.
    pub window_gate: Option<Arc<WindowGate>>,
}

/// Whether logs wait out their group-commit window now, switched by their owner while they
/// run and shared by any number of logs. A window costs every acknowledgement behind a busy
/// writer up to its length and saves fdatasyncs (CPU, device round trips); it pays while the
/// machine has no idle CPU, where a sync sooner only makes the next group smaller, and costs
/// throughput while the writers wait on the disk, where the syncs themselves are the pace.
#[derive(Debug, Default)]
pub struct WindowGate {
    open: AtomicBool,
}

impl WindowGate {
    /// A gate, open or closed.
    pub fn new(open: bool) -> Self {
        WindowGate {
            open: AtomicBool::new(open),
        }
    }

    /// Opens (`true`) or closes the gate; the next turn of each log sees it.
    pub fn set(&self, open: bool) {
        self.open.store(open, Ordering::Relaxed);
    }

    /// Whether windows apply now.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }
}

/// Gates compare by identity (an event store's configuration holds one).
impl PartialEq for WindowGate {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for WindowGate {}
