//! The event protocol's store: aggregates, versions, optimistic concurrency, idempotency,
//! trims, soft deletes, reads, listings, schemas and watch (the Celeriant semantics of the
//! event protocol §4), on `eddy-log`'s one log machinery. It depends on no other eddy crate
//! (not on the codecs, not on the stream store) and on no async runtime.
//!
//! # Shape
//!
//! * `N` **shards** (`num_shards`, fixed when the store is created and persisted in `META`;
//!   opening with another value is refused). An aggregate lives on shard
//!   `routing_id mod N` (`routing_id mod (N − 1) + 1` with a reserved coordinator shard),
//!   exactly as the protocol's placement rule says: [`Placement`] is the one place that
//!   computes it, for the store and for the server.
//! * **One call per request.** [`EventStore::write`] runs the whole check order of a write
//!   (routing, input checks, schema validation, limits, then existence, OCC and idempotency
//!   against the write-ahead state) and answers once, with the outcome or an
//!   [`EventStoreError`]: a [`Refusal`] (nothing written) or a failure of the log.
//! * Each shard is one [`Log`](eddy_log::Log) whose records are **committed requests**: one record
//!   per write (all its aggregates), trim, delete or schema registration. A multi-aggregate
//!   write is therefore atomic: its parts are in one checksummed record that is durable whole
//!   or not at all. A write naming aggregates of different shards is refused
//!   ([`Refusal::CrossShard`], wire 9001), as the protocol requires: the docs tell users to
//!   pick ids on one shard, and refusing keeps atomicity trivially true without a coordinator.
//! * Every shard log is group-committed on the engine's [`CommitPool`](eddy_log::CommitPool)
//!   (shared with the stream store when the server opens both): all concurrent writes to a
//!   shard share one `fdatasync`. A request is acknowledged only after its record is durable
//!   **and** visible: the log publishes the record, the shard's hook applies it to the index
//!   ([`CommitHook::after_publish`](eddy_log::CommitHook::after_publish)), and only then does
//!   the log's acknowledgement of the record, which is the request's answer, resolve.
//! * Per-aggregate state (version, floor, deleted flags, event sequence, client marks, the log
//!   position of every batch, list statistics) lives in a per-shard on-disk index (a small
//!   LSM tree derived from the log, see [`index`]) behind the shared byte-budgeted
//!   [`Cache`](eddy_log::Cache). Memory does not grow with the number of aggregates: a memtable
//!   of bounded bytes, plus per run a block index and a bloom filter (~10 bits per key) so a
//!   write to a new aggregate touches no disk.
//! * Validation (existence, OCC, then idempotency) runs against the *write-ahead* state: a
//!   write queued but not yet durable already counts, so two concurrent writers expecting the
//!   same version cannot both win, and a retry of an in-flight write is told so
//!   ([`Refusal::InFlightDuplicate`]).
//! * Each shard's records form a BLAKE3 hash chain (not carried by the 0.2.0 protocol; kept for
//!   tamper evidence): a record stores the previous tip, and the tip after record `s` is
//!   `BLAKE3(prev_tip ‖ s ‖ rest of the payload)`, replica-independent. Recovery verifies the
//!   links it replays; [`EventStore::verify_chain`] audits a whole shard.
//! * Trims and deletes make batches unreadable at once; their bytes are reclaimed later by
//!   [`EventStore::compact`], which rewrites sealed segments with the events of dead batches
//!   elided (same sequence numbers, same replay; see [`compact`]).
//!
//! # Using it
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use eddy_event_store::{
//!     AggregateKey, AggregateWrite, EventStore, EventStoreConfig, EventStoreError, NewEvent,
//!     ReadQuery, Refusal, WriteRequest,
//! };
//! use eddy_log::MemBackend;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (store, _recovery) = EventStore::open(Arc::new(MemBackend::new()), EventStoreConfig::default())?;
//! let key = AggregateKey::new(1, 2, 3);
//! let event = |seq: u64| NewEvent {
//!     client_seq: seq, event_type_major: 1, value: Bytes::from_static(b"{\"a\":1}"),
//!     ..NewEvent::default()
//! };
//! let write = |seq: u64, expected: Option<u64>| WriteRequest {
//!     client_id: 7, user_id: None, now: 1_700_000_000_000,
//!     writes: vec![AggregateWrite {
//!         key, events: vec![event(seq)], allow_create: true, expected_version: expected,
//!         enforce_client_idempotency: true,
//!     }],
//! };
//! // Durable when the completion resolves (it is also a Future).
//! let done = store.write(write(1, Some(0))).wait()?;
//! assert_eq!(done.max_aggregate_version(), Some(1));
//!
//! // A stale expected version is refused and nothing is written.
//! match store.write(write(2, Some(0))).wait() {
//!     Err(EventStoreError::Refused(Refusal::VersionConflict { expected: 0, current: 1, .. })) => {}
//!     other => panic!("{other:?}"),
//! }
//! // A retry of the committed write is answered, never written twice.
//! match store.write(write(1, None)).wait() {
//!     Err(EventStoreError::Refused(Refusal::Duplicate { committed_version: 1, .. })) => {}
//!     other => panic!("{other:?}"),
//! }
//! let page = store.read(&key, &ReadQuery::from_version(1))?;
//! assert_eq!(page.batches.len(), 1);
//! assert_eq!(page.batches[0].events[0].event_seq, 1);
//! assert_eq!(page.next_version, None);
//! # Ok(()) }
//! ```
//!
//! Watching a shard (a sink is called on the writer thread after durability):
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use eddy_event_store::{
//!     channel_sink, AggregateKey, AggregateWrite, EventStore, EventStoreConfig, NewEvent,
//!     WatchFilter, WatchOperation, WriteRequest,
//! };
//! use eddy_log::MemBackend;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (store, _) = EventStore::open(Arc::new(MemBackend::new()), EventStoreConfig::default())?;
//! let key = AggregateKey::new(1, 1, 1);
//! let (sink, rx) = channel_sink(1024);
//! let sub = store.subscribe(store.shard_of(&key), WatchFilter::default(), sink)?;
//! store.write(WriteRequest {
//!     client_id: 1, user_id: None, now: 0,
//!     writes: vec![AggregateWrite {
//!         key, allow_create: true,
//!         events: vec![NewEvent { event_type_major: 1, value: Bytes::from_static(b"x"), ..NewEvent::default() }],
//!         ..AggregateWrite::default()
//!     }],
//! }).wait()?;
//! let ops: Vec<WatchOperation> = rx.recv()?.iter().map(|e| e.operation).collect();
//! assert_eq!(ops, [WatchOperation::Create, WatchOperation::Write]);
//! store.unsubscribe(sub);
//! # Ok(()) }
//! ```
//!
//! # Record layout
//!
//! The payload of a shard log record (its tag: `0x10` write, `0x11` trim, `0x12` delete,
//! `0x13` schema). Integers little-endian; ids are u128; an optional value is a flag byte
//! (0/1) followed by the value's bytes (zero when absent).
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 32 | previous chain tip of the shard |
//! | 32 | 1 | record version `1` |
//! | 33 | 1 | kind: 1 write, 2 trim, 3 delete, 4 schema (must agree with the tag) |
//! | 34 | 2 | reserved `0` |
//! | 36 | 16 | `client_id` |
//! | 52 | 1 + 16 | `user_id` (optional) |
//! | 69 | 3 | reserved `0` |
//! | 72 | … | body |
//!
//! * **Write** body: part count u32, then per part (110 bytes + stored events): key (48),
//!   version u64, first `event_seq` u64, recreate u8 (0 no, 1 fresh, 2 continue), event
//!   count u32, min/max `client_seq` u64, min/max `event_timestamp` u64, compression u8
//!   (0 none, 1 zstd with the store's dictionary, 2 zstd), raw length u32, stored length u32,
//!   stored bytes. The raw events are, per event (66 bytes + value): `client_seq` u64,
//!   `event_id` (optional u128), `event_timestamp` u64, type major u64, type minor u64, `iv`
//!   (flag + 12 bytes), value length u32, value. `event_seq` is implied by the order.
//! * **Trim** body: key (48), new floor u64.
//! * **Delete** body: count u32, then per part key (48), flags u8 (bit 0 allow recreate,
//!   bit 1 allow sequence continuation), version at deletion u64.
//! * **Schema** body: org u128, type u128, major u64, minor u64, schema type u8, length u32,
//!   UTF-8 text.
//!
//! A **compacted** write record (written only by [`EventStore::compact`]) has record version
//! `2`, and the 32 bytes after the header (offset 72) hold the chain tip after the record as
//! it was originally written; its body follows at offset 104. A part whose compression byte
//! has bit 7 set is *elided*: its stored length is the original one and no stored bytes
//! follow. At least one part of a compacted record is elided.
//!
//! The record's log timestamp is the batch's `server_timestamp` (`max(now, previous)` per
//! shard, in whatever unit the server passes).
//!
//! # Files
//!
//! `events/META` (immutable settings), `events/shard-NNN/` (the shard log),
//! `events/index-NNN/` (its index: `MANIFEST` and `run-*.eix`, see [`index`]).
//!
//! # Invariants
//!
//! 1. A request's completion resolves `Ok` only after its record is fdatasynced and visible.
//! 2. Committed state (what reads, details and listings see) never includes a record that is
//!    not durable; write-ahead state includes every record queued and not refused.
//! 3. Versions of an aggregate incarnation are 1, 2, 3… without gaps; `event_seq` likewise.
//! 4. A client mark only increases and survives delete and recreate.
//! 5. The index is derived data: after any crash it equals the replay of the log (compacted
//!    records replay exactly as their originals did).
//! 6. Refusals (any [`Refusal`]) write nothing.
//! 7. Compaction elides only batches no committed state can list again, and moves bytes
//!    only: sequence numbers, versions and the order of records never change.
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

pub mod compact;
pub mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
pub(crate) mod keys;
mod memtable;
pub mod placement;
pub(crate) mod record;
pub mod replicated;
pub mod schema;
mod shard;
pub(crate) mod state;
pub mod store;
pub mod types;
pub mod watch;

pub use compact::{
    CompactionPolicy, CompactionReport, SegmentReclaim, DEFAULT_COMPACTION_CHECK_INTERVAL_SECS,
    DEFAULT_COMPACTION_MIN_RECLAIMABLE_RATIO,
};
pub use error::{EventStoreError, Refusal, Result, VersionMismatch};
pub use index::IndexStats;
pub use placement::{Placement, RoutingRule};
pub use record::{
    decode_record, encode_record, Compression, DeletePart, EncodedEvents, EventCodec, EventRecord,
    RecordBody, Recreate, WritePart, GENESIS_TIP, MAX_PARTS,
};
pub use store::{
    EventStore, EventStoreConfig, EventStoreRecovery, EventStoreStats,
    DEFAULT_EVENT_INDEX_INTERVAL, DEFAULT_LIST_PAGE, DEFAULT_READ_MAX_BATCHES,
    DEFAULT_READ_MAX_BYTES, MAX_LIST_PAGE, MAX_SHARDS,
};
pub use types::{
    AggregateDelete, AggregateDetails, AggregateKey, AggregateListItem, AggregateTypeItem,
    AggregateWrite, DeleteOutcome, DeleteRequest, EventBatch, ListPage, NewEvent, ReadPage,
    ReadQuery, SchemaKey, SchemaRegistration, StoredEvent, StoredSchema, TrimOutcome, TrimRequest,
    WatchEvent, WatchOperation, WriteOutcome, WriteRequest,
};
pub use watch::{channel_sink, ChannelSink, SubscriptionId, WatchFilter, WatchSink};

/// The hash map of the event store's hot paths: keyed per process (client-chosen keys cannot
/// aim at collisions) and fast, unlike std's SipHash.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The hash set of the event store's hot paths (see [`FastMap`]).
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
