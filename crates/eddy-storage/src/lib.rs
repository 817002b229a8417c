//! eddy's storage engine: segmented checksummed logs, partitions, metadata and recovery.
//!
//! **An acknowledged write is on stable storage.** Appends are group-committed: one writer per
//! log drains everything queued, writes it in one vectored append, issues one `fdatasync`, then
//! acknowledges every record of the group. A lone writer waits for one fdatasync; a thousand
//! concurrent writers share one.
//!
//! The crate is synchronous and runtime-agnostic: it runs its own threads (a [`CommitPool`] of
//! writers and a metadata applier) and hands acknowledgements back through [`Completion`]s you
//! can block on or `.await` from any executor. It does not depend on tokio.
//!
//! # Layers
//!
//! * [`file`](mod@file): the small file trait ([`StorageFile`]: `read_at`, `append`, `len`, `truncate`,
//!   `sync`) and its backends: [`FsBackend`] (real files) and [`MemBackend`] (in memory, with
//!   crash simulation and fault injection for tests).
//! * [`log`]: the one log machinery ([`Log`]): segments, records, sparse indexes, group commit,
//!   recovery, retention.
//! * [`partition`]: message batches on a log ([`Partition`]): stamping, offsets, polling
//!   strategies, retention policies, purge.
//! * [`metadata`]: the metadata state machine ([`MetadataState`], [`MetadataOp`]).
//! * [`store`]: everything together behind one commit entry point ([`Store::commit`]).
//! * [`events`]: the event store ([`EventStore`]): aggregates on sharded logs, OCC,
//!   idempotency, trims, deletes, reads, listings, schemas and watch.
//!
//! # Using it
//!
//! A store in a directory, one topic, one durable append, one poll:
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use eddy_storage::{
//!     FsBackend, MetadataOp, Operation, PartitionAddr, PollStrategy, Stamp, StampWith, Store,
//!     StoreConfig, TopicConfig,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let (store, _recovery) = Store::open(Arc::new(FsBackend::new(dir.path())?), StoreConfig::default())?;
//!
//! // Metadata changes are operations with every id and timestamp already chosen.
//! store.commit(Operation::Metadata(MetadataOp::CreateStream {
//!     id: 0, name: "orders".into(), created_at: 1, options: vec![],
//! })).wait()?;
//! store.commit(Operation::Metadata(MetadataOp::CreateTopic {
//!     stream_id: 0, id: 0, name: "events".into(), created_at: 2, partitions: 1,
//!     config: TopicConfig::default(), explicit_options: vec![], derived_options: vec![],
//! })).wait()?;
//!
//! // A batch is opaque bytes plus a message count; storage assigns the base offset and the
//! // timestamp and lets the batch stamp itself (the server does this with the codec's batch).
//! let addr = PartitionAddr { stream_id: 0, topic_id: 0, partition_id: 0 };
//! let batch = StampWith {
//!     count: 3,
//!     stamp: |s: &Stamp| {
//!         let mut bytes = s.base_offset.to_le_bytes().to_vec();
//!         bytes.extend_from_slice(b"three messages");
//!         Bytes::from(bytes)
//!     },
//! };
//! let ack = store.append(addr, batch, 1_700_000_000_000_000)?.wait()?; // durable now
//! assert_eq!((ack.base_offset, ack.last_offset()), (0, 2));
//!
//! // Polls return stored batches covering the offsets asked for, plus the range to serve.
//! let polled = store.poll(addr, None, PollStrategy::Offset(1), 10, 1 << 20)?;
//! assert_eq!((polled.start_offset, polled.end_offset), (1, 3));
//! assert_eq!(&polled.batches[0].bytes[8..], b"three messages");
//! store.close()?;
//! # Ok(()) }
//! ```
//!
//! Crash and reopen on the in-memory backend (a [`MemBackend`] clone made before the crash
//! belongs to the dead process; open again with a fresh clone):
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use eddy_storage::{
//!     MemBackend, MetadataOp, Operation, PartitionAddr, StampWith, Store, StoreConfig,
//!     TopicConfig,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let disk = MemBackend::new();
//! let (store, _) = Store::open(Arc::new(disk.clone()), StoreConfig::default())?;
//! store.commit(Operation::Metadata(MetadataOp::CreateStream {
//!     id: 0, name: "s".into(), created_at: 0, options: vec![],
//! })).wait()?;
//! store.commit(Operation::Metadata(MetadataOp::CreateTopic {
//!     stream_id: 0, id: 0, name: "t".into(), created_at: 0, partitions: 1,
//!     config: TopicConfig::default(), explicit_options: vec![], derived_options: vec![],
//! })).wait()?;
//! let addr = PartitionAddr { stream_id: 0, topic_id: 0, partition_id: 0 };
//! let batch = StampWith { count: 1, stamp: |_: &eddy_storage::Stamp| Bytes::from_static(b"kept") };
//! store.append(addr, batch, 0)?.wait()?;
//!
//! disk.crash(); // power cut: every unsynced byte is gone
//! drop(store);
//! let (store, _) = Store::open(Arc::new(disk.clone()), StoreConfig::default())?;
//! let batches = store.partition(addr)?.read(0, 10, u64::MAX)?;
//! assert_eq!(&batches[0].bytes[..], b"kept"); // acknowledged, therefore durable
//! # Ok(()) }
//! ```
//!
//! The log on its own (the event store builds on it the same way):
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use eddy_storage::{Cache, CommitPool, Log, LogConfig, MemBackend, OpenOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = CommitPool::new(2)?;
//! let cache = Arc::new(Cache::new(1 << 20));
//! let (log, _) = Log::open(Arc::new(MemBackend::new()), "log", LogConfig::default(), &pool,
//!                          cache, OpenOptions::default())?;
//! let ack = log.append_with(1, 0, 42, |a| Ok(Bytes::from(format!("record {}", a.seq))))?;
//! let meta = ack.wait()?; // after one group-committed fdatasync
//! let records = log.read(meta.seq, 1, u64::MAX)?;
//! assert_eq!(&records[0].payload[..], b"record 0");
//! # Ok(()) }
//! ```
//!
//! Every [`Completion`] (and [`AppendTicket`], [`Commit`]) also implements
//! [`Future`](std::future::Future), so async code writes `store.append(..)?.await`.
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
//! | 40 | 4 | tag | application tag (0 for partition batches, 1 for metadata operations) |
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
//! Partition `state` files and metadata snapshots are described in [`partition`] and
//! [`store`].
//!
//! # Recovery
//!
//! * A damaged or incomplete record in the last segment is a **torn tail** unless a later
//!   genuine record header (magic + header CRC) carries a `synced_len` above the damage, which
//!   proves the damaged bytes had been synced: then it is **interior corruption**.
//! * A torn tail is truncated; interior corruption makes open fail with
//!   [`StorageError::Corrupt`] naming the file and byte offset, unless
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
//! 2. Sequence numbers are contiguous inside a segment and increase across segments; an offset
//!    handed out is never handed out again within one purge generation.
//! 3. Only the active segment is written; sealed segments are immutable.
//! 4. An fsync failure fail-stops the log; a full disk refuses the write and keeps the log.
//! 5. Metadata apply is deterministic; readers see only durable, applied metadata.
//! 6. Resident memory per sealed segment is a few dozen bytes; indexes and handles of sealed
//!    segments live in a byte-budgeted [`Cache`].

pub mod cache;
pub mod completion;
pub mod error;
pub mod events;
pub mod file;
pub mod format;
pub mod log;
pub mod metadata;
pub mod partition;
pub mod pool;
pub mod store;

#[doc(hidden)]
pub mod fuzzing;

pub use cache::Cache;
pub use completion::{completion, Completer, Completion};
pub use error::{Corruption, IoOp, MetadataError, Result, StorageError};
pub use events::{
    channel_sink, AggregateDelete, AggregateDetails, AggregateKey, AggregateListItem,
    AggregateTypeItem, AggregateWrite, DeleteOutcome, DeleteRequest, EventBatch, EventError,
    EventStore, EventStoreConfig, EventStoreRecovery, EventStoreStats, ListPage, NewEvent,
    ReadPage, ReadQuery, RoutingRule, SchemaKey, SchemaRegistration, StoredEvent, StoredSchema,
    SubscriptionId, TrimOutcome, TrimRequest, WatchEvent, WatchFilter, WatchOperation, WatchSink,
    WriteOutcome, WriteRequest,
};
pub use file::{DirEntry, FsBackend, MemBackend, OpenMode, StorageBackend, StorageFile};
pub use log::{
    Assigned, CommitHook, Durability, Log, LogBounds, LogConfig, OpenOptions, RecordMeta,
    RecoveryReport, SegmentSummary, StoredRecord, VerifyOnOpen,
};
pub use metadata::{ConsumerKey, MetadataOp, MetadataState, TopicConfig};
pub use partition::{
    AppendTicket, Appended, Partition, PartitionAddr, PartitionConfig, PartitionOpen,
    PartitionStats, PollStrategy, Polled, RetentionPolicy, Stamp, StampWith, StampableBatch,
    StoredBatch,
};
pub use pool::{CommitPool, CommitStatsSnapshot};
pub use store::{Applied, Commit, Operation, RetentionReport, Store, StoreConfig, StoreRecovery};
