//! eddy's one log machinery: everything durable in eddy is written through it.
//!
//! This crate depends on no other eddy crate and on no async runtime. The two stores above it
//! (`eddy-stream-store`: metadata and partitions; `eddy-event-store`: event shards) and the
//! replication layer build on exactly this API:
//!
//! * [`file`](mod@file): the small file trait ([`StorageFile`]: `read_at`, `append`, `len`,
//!   `truncate`, `sync`; [`StorageBackend`]: open, list, rename, remove, directory sync) and its
//!   backends: [`FsBackend`] (real files) and [`MemBackend`] (in memory, with crash simulation
//!   and fault injection for tests).
//! * [`format`](mod@format): the record format (segment header, record header, sparse index entries).
//! * [`log`]: the segmented, checksummed, append-only [`Log`]: admission ([`Log::reserve`]),
//!   group commit, recovery, index files, reads, rewrite of sealed segments, retention, and
//!   truncation of a suffix ([`Log::truncate_from`], a replicated log's conflict repair).
//! * [`pool`]: the [`CommitPool`] of writer threads that runs group commits for every log.
//! * [`cache`]: the byte-budgeted block [`Cache`] shared by every log (and the event index).
//! * [`completion`](mod@completion): [`Completion`]s, the runtime-agnostic acknowledgements
//!   you block on or `.await`, and [`Completion::map`] to answer with an upper layer's types.
//! * [`write_atomic`]: the one atomic small-file writer (temp file, fdatasync, rename,
//!   directory fsync), [`create_dir_durable`] (creates a directory and fsyncs its parent, so
//!   the new entry survives a crash) and [`lock`] / [`read_lock`] / [`write_lock`], the one
//!   poison-tolerant lock helper.
//!
//! **An acknowledged write is on stable storage.** Appends are group-committed: one writer per
//! log drains everything queued, writes it in one vectored append, issues one `fdatasync`, then
//! acknowledges every record of the group. A lone writer waits for one fdatasync; a thousand
//! concurrent writers share one.
//!
//! # Using it
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use eddy_log::{Cache, CommitPool, Log, LogConfig, MemBackend, OpenOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = CommitPool::new(2)?;
//! let cache = Arc::new(Cache::new(1 << 20));
//! let (log, _) = Log::open(Arc::new(MemBackend::new()), "log", LogConfig::default(), &pool,
//!                          cache, OpenOptions::default())?;
//! // Reserve the next record, build its payload from the assignment, append it.
//! let reservation = log.reserve(1, 0, 42)?;
//! let seq = reservation.assigned().seq;
//! let ack = reservation.append(Bytes::from(format!("record {seq}")))?;
//! let meta = ack.wait()?; // after one group-committed fdatasync
//! let records = log.read(meta.seq, 1, u64::MAX)?;
//! assert_eq!(&records[0].payload[..], b"record 0");
//! # Ok(()) }
//! ```
//!
//! Crash and reopen on the in-memory backend (a [`MemBackend`] clone made before the crash
//! belongs to the dead process; open again with a fresh clone):
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use eddy_log::{Cache, CommitPool, Log, LogConfig, MemBackend, OpenOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (disk, pool) = (MemBackend::new(), CommitPool::new(1)?);
//! let open = || Log::open(Arc::new(disk.clone()), "log", LogConfig::default(), &pool,
//!                         Arc::new(Cache::new(1 << 20)), OpenOptions::default());
//! let (log, _) = open()?;
//! log.append_with(1, 0, 0, |_| Ok(Bytes::from_static(b"kept")))?.wait()?;
//! disk.crash(); // power cut: every unsynced byte is gone
//! drop(log);
//! let (log, _) = open()?;
//! assert_eq!(&log.read(0, 1, u64::MAX)?[0].payload[..], b"kept"); // acknowledged: durable
//! # Ok(()) }
//! ```
//!
//! Every [`Completion`] implements [`Future`](std::future::Future), so async code writes
//! `reservation.append(payload)?.await`.
//!
//! # On-disk format
//!
//! All integers are little-endian; structures have fixed sizes; CRC-32C is the Castagnoli CRC
//! (`crc32c` crate). A log directory holds, per segment, `<base:020>.log` and
//! `<base:020>.index`, where `base` is the first sequence number of the segment.
//!
//! **Segment file** = 32-byte header, then records back to back.
//!
//! | Offset | Size | Field | Meaning |
//! |---|---|---|---|
//! | 0 | 8 | magic | `"EDDYSEG\0"` |
//! | 8 | 4 | version | `1` ([`format::FORMAT_VERSION`]); others are refused |
//! | 12 | 4 | flags | `0` |
//! | 16 | 8 | `base_seq` | first sequence number (equals the file name) |
//! | 24 | 4 | `header_crc` | CRC-32C of bytes 0..24 |
//! | 28 | 4 | reserved | `0` |
//!
//! **Record** = 48-byte header, then `payload_len` payload bytes.
//!
//! | Offset | Size | Field | Meaning |
//! |---|---|---|---|
//! | 0 | 4 | magic | `"eREC"` |
//! | 4 | 4 | `header_crc` | CRC-32C of header bytes 8..48 |
//! | 8 | 4 | `payload_len` | payload bytes, ≤ [`format::MAX_RECORD_PAYLOAD`] (64 MiB) |
//! | 12 | 4 | count | sequence numbers covered, 1..=[`format::MAX_RECORD_COUNT`] (a batch's message count) |
//! | 16 | 8 | seq | first sequence number (a batch's base offset) |
//! | 24 | 8 | timestamp | µs; non-decreasing along the log (a batch's base timestamp) |
//! | 32 | 8 | `synced_len` | bytes of this file that were durable when the record was written (≤ its own position) |
//! | 40 | 4 | tag | application tag, opaque to the log (the stores above give it meaning) |
//! | 44 | 4 | `payload_crc` | CRC-32C of the payload |
//!
//! **Index file** = 32-byte header, then 32-byte entries. Derived data: rebuilt from the segment
//! whenever it is missing, torn, zero-filled or disagrees with the segment.
//!
//! | Offset | Size | Header field | | Offset | Size | Entry field |
//! |---|---|---|---|---|---|---|
//! | 0 | 8 | magic `"EDDYIDX\0"` | | 0 | 8 | seq |
//! | 8 | 4 | version `1` | | 8 | 8 | timestamp |
//! | 12 | 4 | entry size `32` (a parser of another stride refuses) | | 16 | 8 | position (byte offset in the segment) |
//! | 16 | 8 | `base_seq` | | 24 | 4 | kind: 0 record, 1 seal |
//! | 24 | 4 | CRC-32C of bytes 0..24 | | 28 | 4 | CRC-32C of entry bytes 0..28 (a zero entry fails it) |
//! | 28 | 4 | reserved `0` | | | | |
//!
//! A *record* entry says the record at `position` starts at `seq` with `timestamp`; one is
//! written for the first record of a segment and then for the first record at least
//! `index_interval` bytes after the previous entry (sparse; it serves both offset and
//! timestamp lookups because timestamps never decrease). A *seal* entry, last in the index of a
//! sealed segment, records the segment's final length (`position`), end sequence (`seq`) and
//! newest timestamp.
//!
//! **Truncation intent** = `truncate.intent` (written atomically, present only while a
//! [`Log::truncate_from`] that crosses segments runs): magic `"EDDYCUT\0"` (8 bytes), the cut
//! sequence number (u64), CRC-32C of the 16 bytes before it. Open finishes the truncation it
//! records (every segment at or after the cut is removed, the last one left is cut at the
//! record starting at the cut), then removes it.
//!
//! Files that upper layers replace whole (a partition's `state`, the metadata snapshot, the
//! event store's `META`) are written by [`write_atomic`]; their layouts are in those crates.
//!
//! # Recovery
//!
//! * A damaged or incomplete record in the last segment is a **torn tail** unless a later
//!   genuine record header (magic + header CRC) carries a `synced_len` above the damage, which
//!   proves the damaged bytes had been synced: then it is **interior corruption**.
//! * Zeros after the last record of the last segment (its preallocated space, see
//!   [`LogConfig::preallocate`], or pages a crash lost whole) are cut without a report of a
//!   tear; they are counted in [`RecoveryReport::zero_tail_bytes`].
//! * A torn tail is truncated; interior corruption makes open fail with
//!   [`LogError::Corrupt`] naming the file and byte offset, unless
//!   [`LogConfig::repair`] is set (the segment is cut at the damage and the cut reported).
//! * Sealed segments were synced before their successor was created, so any damage in them is
//!   corruption. With [`VerifyOnOpen::Full`] (the default) every record is verified at open;
//!   with [`VerifyOnOpen::Tail`] a sealed segment whose seal matches is trusted and only the
//!   active segment's tail is scanned.
//! * Known limit: damage confined to the last group commit of the active segment, with no later
//!   write, looks exactly like a torn write and is truncated.
//!
//! # Invariants
//!
//! 1. An acknowledged record (with [`Durability::Fsync`]) was fdatasynced before its
//!    acknowledgement; readers never see a record before it is acknowledged.
//! 2. Sequence numbers are contiguous inside a segment and increase across segments; a
//!    sequence number handed out is never handed out again (until a purge restarts the log
//!    or a truncation drops it).
//! 3. Only the active segment is appended to; sealed segments change only by a rewrite
//!    (same records, new payloads) or a truncation (cut at a record boundary, durably).
//! 4. An fsync failure fail-stops the log; a full disk refuses the write and keeps the log.
//! 5. Resident memory per sealed segment is a few dozen bytes; indexes and handles of sealed
//!    segments live in a byte-budgeted [`Cache`].
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

pub mod atomic;
pub mod cache;
pub mod cipher;
pub mod completion;
pub mod error;
pub mod file;
pub mod format;
pub mod log;
pub mod pool;
pub mod sync;

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;

pub use atomic::{create_dir_durable, write_atomic};
pub use cache::{next_owner_id, Cache, CacheKey, DEFAULT_CACHE_BYTES};
pub use cipher::Cipher;
pub use completion::{completion, Completer, Completion};
pub use error::{Corruption, IoOp, LogError, Result};
pub use file::{
    DirEntry, Errno, FsBackend, FsCall, MemBackend, OpenMode, StorageBackend, StorageFile,
};
pub use log::{
    Assigned, CommitHook, Durability, Log, LogBounds, LogConfig, LogStats, OpenOptions, RecordMeta,
    RecoveryReport, Repair, Reservation, SegmentRewrite, SegmentSummary, StoredRecord,
    VerifyOnOpen, WeakLog, WindowGate, DEFAULT_INDEX_INTERVAL, DEFAULT_MAX_GROUP_BYTES,
    DEFAULT_PREALLOCATE, DEFAULT_SEGMENT_SIZE, MAX_GROUP_WINDOW, MAX_QUEUED_BYTES,
    MAX_SEGMENT_SIZE, MIN_SEGMENT_SIZE,
};
pub use pool::{CommitPool, CommitStats, CommitStatsSnapshot};
pub use sync::{lock, read_lock, write_lock};
