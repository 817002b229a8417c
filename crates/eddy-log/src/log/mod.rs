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
//! [`Log::reserve`] assigns the next sequence number and a non-decreasing timestamp under the
//! log's admission lock; the caller builds (stamps) the payload with them and queues the record
//! with [`Reservation::append`], which returns the record's [`Completion`](crate::Completion).
//! The log's writer (one turn at a time on the [`CommitPool`](crate::CommitPool))
//! drains the queue, writes every pending record in one vectored append, issues **one**
//! `fdatasync`, publishes the records to readers and completes every acknowledgement. With
//! [`Durability::Background`] the writer acknowledges after the write and syncs when the
//! unsynced records or bytes reach the configured bounds (or on [`Log::flush`]).
//!
//! * An fsync error is fatal for the log (fail-stop): every pending and future write is refused
//!   with [`LogError::LogFailed`](crate::LogError::LogFailed) and nothing more is acknowledged; the page cache is never
//!   trusted again. With [`Durability::Fsync`] the bytes written since the last good fsync
//!   (all of them unacknowledged) are cut off the file, so a restart does not bring back a
//!   record whose writer was told it failed.
//! * `ENOSPC` (or `EDQUOT`) while appending truncates the partial write away and refuses the
//!   group and everything queued behind it with [`LogError::NoSpace`](crate::LogError::NoSpace); acknowledged records
//!   are untouched and the log keeps accepting writes once space returns.
//!
//! # Recovery
//!
//! On open every segment is checked (fully with [`VerifyOnOpen::Full`], the default; from the
//! last index entry with [`VerifyOnOpen::Tail`]). A damaged record in the active segment is a
//! *torn tail* when no later record proves that its bytes had been synced (each record header
//! carries the file length that was durable when it was written); the tail is truncated. If a
//! later record proves it, the damage is *interior corruption* and open refuses with
//! [`LogError::Corrupt`](crate::LogError::Corrupt) naming the file and byte offset, unless [`LogConfig::repair`] is
//! set. Sealed segments are synced before the next segment is created, so any damage in them
//! is corruption. Indexes are derived data: an index that is missing, torn, zero-filled or
//! inconsistent with its segment is rebuilt from the segment. The newest segment is synced
//! before the log is served: whole records that were written but never synced (the process
//! died before its fdatasync) become readable at open, so they must survive a later power
//! cut.
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
//! # Truncating a suffix
//!
//! [`Log::truncate_from`] drops every record from a sequence number on (a replicated log
//! replacing a conflicting uncommitted suffix). It runs on the writer in order with appends
//! and is durable when it completes. A cut in the active segment is one `ftruncate` and one
//! fdatasync; a cut in a sealed segment records its intent in `truncate.intent` first, then
//! removes the later segments, cuts the one holding it and starts a new segment at the cut,
//! so that a crash at any point recovers the old log or the truncated one. Readers never see
//! a failure from a file being cut: a read that overlapped a truncation runs again.
//!
//! # Invariants
//!
//! 1. Inside a segment, record `i + 1` starts at sequence `seq_i + count_i`; the first record
//!    starts at the segment's base (its file name and header).
//! 2. Segment bases increase; segment `i + 1`'s base is at least segment `i`'s end.
//! 3. Only the last segment (the active one) is ever appended to; a segment with a successor is
//!    sealed, and was synced before its successor was created. A sealed segment's file is
//!    never appended to: a rewrite installs a new file whose records carry the same sequence
//!    numbers, counts, timestamps and tags (its record headers carry `synced_len` 0), and a
//!    truncation cuts it at a record boundary (synced before its successor is created).
//! 4. Readers never see a record before it is acknowledged: records are published to the read
//!    view after their fdatasync (after their write with [`Durability::Background`]).
//! 5. Timestamps are non-decreasing along the log.
//! 6. A record header's `synced_len` is at most its own position, and every byte below it was
//!    durable when the record was written.

mod admission;
mod config;
mod open;
mod read;
mod read_buffers;
mod recovery;
mod retention;
mod rewrite;
mod segment_files;
mod state;
mod truncate;
mod types;
mod writer;

pub use admission::{Assigned, Reservation};
pub use config::{
    Durability, LogConfig, VerifyOnOpen, DEFAULT_INDEX_INTERVAL, DEFAULT_MAX_GROUP_BYTES,
    DEFAULT_PREALLOCATE, DEFAULT_SEGMENT_SIZE, MAX_GROUP_WINDOW, MAX_QUEUED_BYTES,
    MAX_SEGMENT_SIZE, MIN_SEGMENT_SIZE,
};
pub use rewrite::SegmentRewrite;
pub use state::{Log, WeakLog};
pub use types::{
    CommitHook, LogBounds, LogStats, OpenOptions, RecordMeta, RecoveryReport, Repair,
    SegmentSummary, StoredRecord, WindowGate,
};

#[cfg(test)]
mod prealloc_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod truncate_tests;
