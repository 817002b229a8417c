//! The event store: aggregates, versions, optimistic concurrency, idempotency, trims, soft
//! deletes, reads, listings, schemas and watch (the Celeriant semantics of the event protocol
//! §4), on the crate's one log machinery.
//!
//! # Shape
//!
//! * `N` **shards** (`num_shards`, fixed when the store is created and persisted in `META`;
//!   opening with another value is refused). An aggregate lives on shard
//!   `routing_id mod N` (`routing_id mod (N − 1) + 1` with a reserved coordinator shard),
//!   exactly as the protocol's placement rule says.
//! * Each shard is one [`Log`](crate::Log) whose records are **committed requests**: one record
//!   per write (all its aggregates), trim, delete or schema registration. A multi-aggregate
//!   write is therefore atomic: its parts are in one checksummed record that is durable whole
//!   or not at all. A write naming aggregates of different shards is refused
//!   ([`EventError::CrossShard`], wire 9001), as the protocol requires: the docs tell users to
//!   pick ids on one shard, and refusing keeps atomicity trivially true without a coordinator.
//! * Every shard log is group-committed on one shared [`CommitPool`]: all
//!   concurrent writes to a shard share one `fdatasync`. A request is acknowledged only after
//!   its record is durable **and** visible: the index is updated after the log publishes the
//!   record, and completions resolve after that ([`CommitHook::after_publish`](crate::CommitHook)).
//! * Per-aggregate state (version, floor, deleted flags, event sequence, client marks, the log
//!   position of every batch, list statistics) lives in a per-shard on-disk index (a small
//!   LSM tree derived from the log, see [`index`]) behind the shared byte-budgeted
//!   [`Cache`]. Memory does not grow with the number of aggregates: a memtable
//!   of bounded bytes, plus per run a block index and a bloom filter (~10 bits per key) so a
//!   write to a new aggregate touches no disk.
//! * Validation (existence, OCC, then idempotency) runs against the *write-ahead* state: a
//!   write queued but not yet durable already counts, so two concurrent writers expecting the
//!   same version cannot both win, and a retry of an in-flight write is told so
//!   ([`EventError::InFlightDuplicate`]).
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
//! use eddy_storage::{
//!     AggregateKey, AggregateWrite, EventError, EventStore, EventStoreConfig, MemBackend, NewEvent,
//!     ReadQuery, StorageError, WriteRequest,
//! };
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
//!     Err(StorageError::Event(EventError::VersionConflict { expected: 0, current: 1, .. })) => {}
//!     other => panic!("{other:?}"),
//! }
//! // A retry of the committed write is answered, never written twice.
//! match store.write(write(1, None)).wait() {
//!     Err(StorageError::Event(EventError::Duplicate { committed_version: 1, .. })) => {}
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
//! use eddy_storage::{
//!     channel_sink, AggregateKey, AggregateWrite, EventStore, EventStoreConfig, MemBackend,
//!     NewEvent, WatchFilter, WatchOperation, WriteRequest,
//! };
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
//! 6. Refusals (any [`EventError`]) write nothing.
//! 7. Compaction elides only batches no committed state can list again, and moves bytes
//!    only: sequence numbers, versions and the order of records never change.

pub mod compact;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
mod memtable;
pub(crate) mod record;
mod shard;
pub(crate) mod state;
pub mod types;
pub mod watch;

#[cfg(test)]
mod tests;

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use bytes::Bytes;

use crate::cache::Cache;
use crate::completion::Completion;
use crate::error::{Corruption, IoOp, Result, StorageError};
use crate::file::{OpenMode, StorageBackend};
use crate::log::{LogConfig, LogStats, OpenOptions, VerifyOnOpen};
use crate::pool::{CommitPool, CommitStatsSnapshot};

pub use compact::{
    CompactionPolicy, CompactionReport, SegmentReclaim, DEFAULT_COMPACTION_CHECK_INTERVAL_SECS,
    DEFAULT_COMPACTION_MIN_RECLAIMABLE_RATIO,
};
pub use error::EventError;
pub use index::IndexStats;
pub use record::{
    decode_record, encode_record, Compression, DeletePart, EncodedEvents, EventCodec, EventRecord,
    RecordBody, Recreate, WritePart, GENESIS_TIP, MAX_PARTS,
};
pub use types::{
    AggregateDelete, AggregateDetails, AggregateKey, AggregateListItem, AggregateTypeItem,
    AggregateWrite, DeleteOutcome, DeleteRequest, EventBatch, ListPage, NewEvent, ReadPage,
    ReadQuery, RoutingRule, SchemaKey, SchemaRegistration, StoredEvent, StoredSchema, TrimOutcome,
    TrimRequest, WatchEvent, WatchOperation, WriteOutcome, WriteRequest,
};
pub use watch::{channel_sink, ChannelSink, SubscriptionId, WatchFilter, WatchSink};

use index::Index;
use shard::{FlushSignal, Shard};
use state::{
    key_hash, parse_agg_key, parse_org_key, parse_type_key, AggState, KIND_AGG, KIND_ORG, KIND_TYPE,
};

/// The hash map of the event store's hot paths: keyed per process (client-chosen keys cannot
/// aim at collisions) and fast, unlike std's SipHash.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Default batches per read page.
pub const DEFAULT_READ_MAX_BATCHES: usize = 1000;
/// Default stored bytes per read page (well under the protocol's response caps).
pub const DEFAULT_READ_MAX_BYTES: u64 = 4 * 1024 * 1024;
/// Default sparse index interval of a shard log: denser than a partition's, because reads
/// fetch single records by sequence number (see [`Log::read_record`](crate::Log::read_record)).
pub const DEFAULT_EVENT_INDEX_INTERVAL: u64 = 4096;
/// Largest shard count.
pub const MAX_SHARDS: u32 = 1024;
/// Default items per list page (`--list-page-size`).
pub const DEFAULT_LIST_PAGE: usize = 2000;
/// Most items one list page may hold.
pub const MAX_LIST_PAGE: usize = 100_000;
/// Name of the immutable settings file.
pub const META_FILE: &str = "META";
const META_MAGIC: [u8; 8] = *b"EDDYEVM\0";
const META_LEN: usize = 64;

/// Configuration of an event store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventStoreConfig {
    /// Shards (immutable once created).
    pub num_shards: u32,
    /// Which id places an aggregate (immutable).
    pub routing_rule: RoutingRule,
    /// Shard 0 holds no data (immutable; needs at least two shards).
    pub reserve_coordinator_shard: bool,
    /// Writer threads of the commit pool.
    pub pool_threads: usize,
    /// Shard log segment size.
    pub segment_size: u64,
    /// Shard log sparse index interval.
    pub index_interval: u64,
    /// How much of the shard logs recovery verifies.
    pub verify_on_open: VerifyOnOpen,
    /// zstd level for stored events (`--wal-compression-level`); 0 stores them raw.
    pub compression_level: i32,
    /// The zstd dictionary (immutable: its BLAKE3 is persisted).
    pub dictionary: Option<Bytes>,
    /// Memtable bytes per shard before it is flushed to a run.
    pub memtable_bytes: u64,
    /// Bytes of the shared cache (sealed log segments and index blocks).
    pub cache_bytes: u64,
    /// Watch subscribers per shard (`--max-watch-subscribers`).
    pub max_subscribers_per_shard: usize,
    /// Group-commit window of the shard logs (`--fsync-delay-us`, see
    /// [`LogConfig::group_window`]). With a window the commit pool gets at least one thread
    /// per shard, so a shard waiting out its window never delays another.
    pub fsync_delay: std::time::Duration,
}

impl Default for EventStoreConfig {
    fn default() -> Self {
        EventStoreConfig {
            num_shards: 1,
            routing_rule: RoutingRule::AggregateId,
            reserve_coordinator_shard: false,
            pool_threads: 2,
            segment_size: 256 * 1024 * 1024,
            index_interval: DEFAULT_EVENT_INDEX_INTERVAL,
            verify_on_open: VerifyOnOpen::Full,
            compression_level: 3,
            dictionary: None,
            memtable_bytes: 32 * 1024 * 1024,
            cache_bytes: 64 * 1024 * 1024,
            max_subscribers_per_shard: watch::DEFAULT_MAX_SUBSCRIBERS,
            fsync_delay: std::time::Duration::ZERO,
        }
    }
}

/// What opening found, per shard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventStoreRecovery {
    /// The shard logs' recovery reports.
    pub logs: Vec<crate::log::RecoveryReport>,
    /// Records replayed into each shard's index.
    pub replayed: Vec<u64>,
    /// Shards whose index was unusable and was rebuilt from the log.
    pub rebuilt: Vec<u32>,
    /// True when the store was created by this open.
    pub created: bool,
}

/// Counters for `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventStoreStats {
    /// Group commit counters of the store's pool (all shards).
    pub commit: CommitStatsSnapshot,
    /// Per shard: log counters.
    pub logs: Vec<LogStats>,
    /// Per shard: index counters.
    pub indexes: Vec<IndexStats>,
    /// Per shard: watch subscribers.
    pub subscribers: Vec<usize>,
    /// Bytes in the shared cache.
    pub cache_bytes: u64,
}

// ------------------------------------------------------------------------------------------------
// The background index flusher.

#[derive(Default)]
struct FlushQueue {
    shards: VecDeque<u32>,
    stop: bool,
}

#[derive(Default)]
struct Flusher {
    queue: Mutex<FlushQueue>,
    wake: Condvar,
}

impl FlushSignal for Flusher {
    fn flush_needed(&self, shard: u32) {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if !q.shards.contains(&shard) {
            q.shards.push_back(shard);
        }
        drop(q);
        self.wake.notify_one();
    }
}

impl Flusher {
    /// The next shard to work on; `None` once stopped and drained.
    fn next(&self) -> Option<u32> {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(s) = q.shards.pop_front() {
                return Some(s);
            }
            if q.stop {
                return None;
            }
            q = self.wake.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn stop(&self) {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stop = true;
        self.wake.notify_all();
    }
}

/// Writes frozen memtables as runs, then hands the shard to the merger. Flushes never wait
/// for merges, so writers (which wait only when two memtables are already frozen) do not
/// stall behind a large merge.
fn run_flusher(flusher: &Flusher, merger: &Flusher, indexes: &[Arc<Index>]) {
    while let Some(shard) = flusher.next() {
        if let Some(index) = indexes.get(shard as usize) {
            match index.flush_pending() {
                Ok(()) => merger.flush_needed(shard),
                // The frozen memtable stays in memory (and the log still holds its records);
                // the next signal retries.
                Err(e) => tracing::error!(shard, error = %e, "flushing the event index failed"),
            }
        }
    }
}

fn run_merger(merger: &Flusher, indexes: &[Arc<Index>]) {
    while let Some(shard) = merger.next() {
        if let Some(index) = indexes.get(shard as usize) {
            if let Err(e) = index.merge_runs() {
                tracing::error!(shard, error = %e, "merging event index runs failed");
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Immutable settings.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Meta {
    num_shards: u32,
    routing: u64,
    reserve: bool,
    dictionary: [u8; 32],
}

fn encode_meta(m: &Meta) -> [u8; META_LEN] {
    let mut b = [0u8; META_LEN];
    b[0..8].copy_from_slice(&META_MAGIC);
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&m.num_shards.to_le_bytes());
    b[16..24].copy_from_slice(&m.routing.to_le_bytes());
    b[24] = u8::from(m.reserve);
    b[28..60].copy_from_slice(&m.dictionary);
    let crc = crc32c::crc32c(&b[0..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    b
}

fn decode_meta(b: &[u8]) -> Option<Meta> {
    if b.len() != META_LEN || b[0..8] != META_MAGIC {
        return None;
    }
    let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    if u32_at(8) != 1 || crc32c::crc32c(&b[0..60]) != u32_at(60) {
        return None;
    }
    let mut routing = [0u8; 8];
    routing.copy_from_slice(&b[16..24]);
    let mut dictionary = [0u8; 32];
    dictionary.copy_from_slice(&b[28..60]);
    Some(Meta {
        num_shards: u32_at(12),
        routing: u64::from_le_bytes(routing),
        reserve: b[24] != 0,
        dictionary,
    })
}

fn read_small(backend: &dyn StorageBackend, path: &Path, max: u64) -> Result<Option<Vec<u8>>> {
    match backend.open(path, OpenMode::Existing) {
        Ok(f) => {
            let len = f.len().map_err(|e| StorageError::io(IoOp::Len, path, e))?;
            if len > max {
                return Err(StorageError::TooLarge {
                    what: "event store settings",
                    size: len,
                    limit: max,
                    path: path.to_path_buf(),
                });
            }
            let mut b = vec![0u8; len as usize];
            f.read_at(0, &mut b)
                .map_err(|e| StorageError::io(IoOp::Read, path, e))?;
            Ok(Some(b))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StorageError::io(IoOp::Open, path, e)),
    }
}

fn write_atomic(backend: &dyn StorageBackend, dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let _ = backend.remove_file(&tmp);
    let f = backend
        .open(&tmp, OpenMode::CreateNew)
        .map_err(|e| StorageError::io(IoOp::Open, &tmp, e))?;
    f.append(&[bytes])
        .map_err(|e| StorageError::io(IoOp::Append, &tmp, e))?;
    f.sync()
        .map_err(|e| StorageError::io(IoOp::Sync, &tmp, e))?;
    backend
        .rename(&tmp, &path)
        .map_err(|e| StorageError::io(IoOp::Rename, &path, e))?;
    backend
        .sync_dir(dir)
        .map_err(|e| StorageError::io(IoOp::SyncDir, dir, e))
}

// ------------------------------------------------------------------------------------------------
// The store.

/// The event store. Cheap to share (`Arc`); every method takes `&self`.
pub struct EventStore {
    backend: Arc<dyn StorageBackend>,
    config: EventStoreConfig,
    shards: Vec<Shard>,
    cache: Arc<Cache>,
    codec: Arc<EventCodec>,
    flusher: Arc<Flusher>,
    merger: Arc<Flusher>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Per shard, where its last compaction pass left off; the lock serializes passes.
    compaction: Mutex<Vec<compact::PassMark>>,
    // Dropped last: finishes every queued group commit, then joins the writer threads.
    pool: CommitPool,
}

impl fmt::Debug for EventStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStore")
            .field("backend", &self.backend)
            .field("num_shards", &self.config.num_shards)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl EventStore {
    /// Opens (or creates) the event store under `events/` of `backend`, recovering every
    /// shard: each log is recovered, then its index is brought up to date by replaying the
    /// log from the index's checkpoint (or rebuilt from the start when it is unusable).
    pub fn open(
        backend: Arc<dyn StorageBackend>,
        config: EventStoreConfig,
    ) -> Result<(EventStore, EventStoreRecovery)> {
        if config.num_shards == 0 || config.num_shards > MAX_SHARDS {
            return Err(StorageError::InvalidConfig {
                field: "num_shards",
                value: u64::from(config.num_shards),
            });
        }
        if config.reserve_coordinator_shard && config.num_shards < 2 {
            return Err(StorageError::InvalidConfig {
                field: "reserve_coordinator_shard",
                value: 1,
            });
        }
        let root = PathBuf::from("events");
        backend
            .create_dir_all(&root)
            .map_err(|e| StorageError::io(IoOp::CreateDir, &root, e))?;
        let dict_hash = config
            .dictionary
            .as_ref()
            .map_or([0u8; 32], |d| *blake3::hash(d).as_bytes());
        let wanted = Meta {
            num_shards: config.num_shards,
            routing: config.routing_rule.code(),
            reserve: config.reserve_coordinator_shard,
            dictionary: dict_hash,
        };
        let mut recovery = EventStoreRecovery::default();
        let meta_path = root.join(META_FILE);
        match read_small(&*backend, &meta_path, 4096)? {
            None => {
                write_atomic(&*backend, &root, META_FILE, &encode_meta(&wanted))?;
                recovery.created = true;
            }
            Some(bytes) => {
                let stored = decode_meta(&bytes).ok_or_else(|| {
                    StorageError::corrupt(&meta_path, 0, Corruption::FileChecksum)
                })?;
                let mismatch = |field, stored: u64, requested: u64| {
                    Err(StorageError::Event(EventError::ImmutableConfig {
                        field,
                        stored,
                        requested,
                    }))
                };
                if stored.num_shards != wanted.num_shards {
                    return mismatch(
                        "num_shards",
                        u64::from(stored.num_shards),
                        u64::from(wanted.num_shards),
                    );
                }
                if stored.routing != wanted.routing {
                    return mismatch("routing_rule", stored.routing, wanted.routing);
                }
                if stored.reserve != wanted.reserve {
                    return mismatch(
                        "reserve_coordinator_shard",
                        u64::from(stored.reserve),
                        u64::from(wanted.reserve),
                    );
                }
                if stored.dictionary != wanted.dictionary {
                    return Err(EventError::DictionaryMismatch.into());
                }
            }
        }

        // A shard waiting out its group-commit window holds a pool thread: give every shard one.
        let pool_threads = if config.fsync_delay.is_zero() {
            config.pool_threads
        } else {
            config.pool_threads.max(config.num_shards as usize)
        };
        let pool = CommitPool::new(pool_threads)
            .map_err(|e| StorageError::io(IoOp::Open, root.join("pool"), e))?;
        let cache = Arc::new(Cache::new(config.cache_bytes));
        let codec = Arc::new(EventCodec::new(
            config.compression_level,
            config.dictionary.clone(),
        ));
        let flusher = Arc::new(Flusher::default());
        let log_config = LogConfig {
            segment_size: config.segment_size,
            index_interval: config.index_interval,
            verify_on_open: config.verify_on_open,
            group_window: config.fsync_delay,
            ..LogConfig::default()
        };
        let mut shards = Vec::with_capacity(config.num_shards as usize);
        for id in 0..config.num_shards {
            let (index, opened) = Index::open(
                Arc::clone(&backend),
                root.join(format!("index-{id:03}")),
                Arc::clone(&cache),
                config.memtable_bytes,
            )?;
            let index = Arc::new(index);
            let watchers = Arc::new(watch::Watchers::new(config.max_subscribers_per_shard));
            let signal: Arc<dyn FlushSignal> = Arc::clone(&flusher) as Arc<dyn FlushSignal>;
            let (hook, pending) = Shard::hook(id, &index, &watchers, signal);
            let (log, report) = crate::log::Log::open(
                Arc::clone(&backend),
                root.join(format!("shard-{id:03}")),
                log_config,
                &pool,
                Arc::clone(&cache),
                OpenOptions {
                    hook: Some(hook),
                    ..OpenOptions::default()
                },
            )?;
            recovery.logs.push(report);
            let mut rebuilt = opened.rebuilt;
            let bounds = log.bounds();
            let mut from = opened.checkpoint;
            if from > bounds.next || from < bounds.first {
                tracing::warn!(
                    shard = id,
                    checkpoint = from,
                    log_end = bounds.next,
                    "event index disagrees with its log; rebuilding it"
                );
                index.reset()?;
                from = bounds.first;
                rebuilt = true;
            }
            if rebuilt {
                recovery.rebuilt.push(id);
            }
            let shard = Shard::new(
                id,
                log,
                index,
                Arc::clone(&codec),
                watchers,
                pending,
                GENESIS_TIP,
            );
            let (replayed, tip) = replay(&shard, from)?;
            shard.set_tip(tip);
            recovery.replayed.push(replayed);
            shards.push(shard);
        }
        let indexes: Vec<Arc<Index>> = shards.iter().map(|s| Arc::clone(&s.index)).collect();
        let merger = Arc::new(Flusher::default());
        for index in &indexes {
            index.set_served(true);
        }
        let mut threads = Vec::new();
        {
            let (flusher, merger, indexes) =
                (Arc::clone(&flusher), Arc::clone(&merger), indexes.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("eddy-events-flush".into())
                    .spawn(move || run_flusher(&flusher, &merger, &indexes))
                    .map_err(|e| StorageError::io(IoOp::Open, root.join("index"), e))?,
            );
        }
        {
            let merger = Arc::clone(&merger);
            threads.push(
                std::thread::Builder::new()
                    .name("eddy-events-merge".into())
                    .spawn(move || run_merger(&merger, &indexes))
                    .map_err(|e| StorageError::io(IoOp::Open, root.join("index"), e))?,
            );
        }
        let marks = vec![compact::PassMark::new(); config.num_shards as usize];
        Ok((
            EventStore {
                backend,
                config,
                shards,
                cache,
                codec,
                flusher,
                merger,
                threads: Mutex::new(threads),
                compaction: Mutex::new(marks),
                pool,
            },
            recovery,
        ))
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &EventStoreConfig {
        &self.config
    }

    /// The number of shards.
    pub fn num_shards(&self) -> u32 {
        self.config.num_shards
    }

    /// The shard that holds `key` (the protocol's placement rule on the full u128).
    pub fn shard_of(&self, key: &AggregateKey) -> u32 {
        let id = self.config.routing_rule.routing_id(key);
        let n = u128::from(self.config.num_shards);
        let shard = if self.config.reserve_coordinator_shard {
            id % (n - 1) + 1
        } else {
            id % n
        };
        u32::try_from(shard).expect("below num_shards")
    }

    fn shard(&self, id: u64) -> Result<&Shard> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.shards.get(i))
            .ok_or(StorageError::Event(EventError::NoSuchShard {
                shard: id,
                num_shards: self.config.num_shards,
            }))
    }

    /// The one shard of a multi-key request, or the refusal.
    fn route<'a>(&self, keys: impl Iterator<Item = &'a AggregateKey>) -> Result<&Shard> {
        let mut seen = HashSet::new();
        let mut shard = None;
        for (part, key) in keys.enumerate() {
            if part >= MAX_PARTS {
                return Err(EventError::Limit {
                    what: "aggregates in one request",
                    value: part as u64 + 1,
                    limit: MAX_PARTS as u64,
                }
                .into());
            }
            if !seen.insert(*key) {
                return Err(EventError::DuplicateKey { part }.into());
            }
            let s = self.shard_of(key);
            if shard.is_some_and(|x| x != s) {
                return Err(EventError::CrossShard {
                    num_shards: self.config.num_shards,
                }
                .into());
            }
            shard = Some(s);
        }
        match shard {
            Some(s) => self.shard(u64::from(s)),
            None => Err(EventError::EmptyRequest.into()),
        }
    }

    /// Writes one batch per part, atomically. Refusals resolve at once (nothing written);
    /// success resolves after the record is durable and visible.
    pub fn write(&self, request: WriteRequest) -> Completion<WriteOutcome> {
        let shard = match self.route(request.writes.iter().map(|w| &w.key)) {
            Ok(s) => s,
            Err(e) => return Completion::ready(Err(e)),
        };
        for (part, w) in request.writes.iter().enumerate() {
            if w.events.is_empty() {
                return Completion::ready(Err(EventError::EmptyEvents { part }.into()));
            }
            if let Some(e) = w.events.iter().find(|e| e.event_type_major == 0) {
                return Completion::ready(Err(EventError::ZeroEventType {
                    part,
                    client_seq: e.client_seq,
                }
                .into()));
            }
            if w.events.len() > record::MAX_EVENTS_PER_BATCH as usize {
                return Completion::ready(Err(EventError::Limit {
                    what: "events in one batch",
                    value: w.events.len() as u64,
                    limit: u64::from(record::MAX_EVENTS_PER_BATCH),
                }
                .into()));
            }
            let raw: usize = w
                .events
                .iter()
                .map(|e| record::EVENT_HEADER_LEN + e.value.len())
                .sum();
            if raw > record::MAX_BATCH_BYTES as usize {
                return Completion::ready(Err(EventError::Limit {
                    what: "batch bytes",
                    value: raw as u64,
                    limit: u64::from(record::MAX_BATCH_BYTES),
                }
                .into()));
            }
        }
        // Encode (and compress) outside every lock.
        let mut parts = Vec::with_capacity(request.writes.len());
        for w in request.writes {
            match self.codec.encode_events(&w.events) {
                Ok(e) => parts.push((w, e)),
                Err(e) => {
                    return Completion::ready(Err(StorageError::io(
                        IoOp::Append,
                        shard.log.dir(),
                        e,
                    )))
                }
            }
        }
        shard.write(request.client_id, request.user_id, request.now, &parts)
    }

    /// Raises the readable floor of an aggregate. At or below the floor: success, nothing
    /// written.
    pub fn trim(&self, request: TrimRequest) -> Completion<TrimOutcome> {
        match self.shard(u64::from(self.shard_of(&request.key))) {
            Ok(shard) => shard.trim(&request),
            Err(e) => Completion::ready(Err(e)),
        }
    }

    /// Soft-deletes aggregates, atomically.
    pub fn delete(&self, request: &DeleteRequest) -> Completion<DeleteOutcome> {
        match self.route(request.deletes.iter().map(|d| &d.key)) {
            Ok(shard) => shard.delete(
                request.client_id,
                request.user_id,
                request.now,
                &request.deletes,
            ),
            Err(e) => Completion::ready(Err(e)),
        }
    }

    /// Reads one page of an aggregate's batches (committed data only).
    pub fn read(&self, key: &AggregateKey, query: &ReadQuery) -> Result<ReadPage> {
        self.shard(u64::from(self.shard_of(key)))?.read(key, query)
    }

    /// An aggregate's details; [`EventError::NotFound`] when it never existed (a deleted one
    /// answers with `is_deleted`).
    pub fn details(&self, key: &AggregateKey) -> Result<AggregateDetails> {
        match self
            .shard(u64::from(self.shard_of(key)))?
            .committed_agg(key)?
        {
            Some(s) => Ok(s.details()),
            None => Err(EventError::NotFound { part: 0, key: *key }.into()),
        }
    }

    /// Registers a schema (stored on shard 0 for the whole store; immutable once stored).
    pub fn register_schema(&self, registration: SchemaRegistration) -> Completion<()> {
        if registration.schema.len() > record::MAX_SCHEMA_BYTES {
            return Completion::ready(Err(EventError::Limit {
                what: "schema bytes",
                value: registration.schema.len() as u64,
                limit: record::MAX_SCHEMA_BYTES as u64,
            }
            .into()));
        }
        self.shards[0].register_schema(registration)
    }

    /// A registered schema.
    pub fn schema(&self, key: &SchemaKey) -> Result<Option<StoredSchema>> {
        self.shards[0].schema(key)
    }

    /// Subscribes to the committed changes of one shard.
    pub fn subscribe(
        &self,
        shard: u32,
        filter: WatchFilter,
        sink: Arc<dyn WatchSink>,
    ) -> Result<SubscriptionId> {
        let s = self.shard(u64::from(shard))?;
        Ok(s.watchers.subscribe(shard, filter, sink)?)
    }

    /// Ends a subscription; false when it was already gone.
    pub fn unsubscribe(&self, id: SubscriptionId) -> bool {
        self.shards
            .get(id.shard as usize)
            .is_some_and(|s| s.watchers.unsubscribe(id.id))
    }

    /// One page of a scan over index entries of `kind` whose listing hash is at least
    /// `cursor`, keeping what `keep` maps to an item.
    fn list<T>(
        &self,
        shard: u64,
        kind: u8,
        cursor: Option<u64>,
        limit: usize,
        mut keep: impl FnMut(&[u8], &[u8]) -> Result<Option<T>>,
    ) -> Result<ListPage<T>> {
        let shard = self.shard(shard)?;
        let limit = limit.clamp(1, MAX_LIST_PAGE);
        let mut start = vec![kind];
        start.extend_from_slice(&cursor.unwrap_or(0).to_be_bytes());
        let end = vec![kind + 1];
        let scan_budget = limit.saturating_mul(4);
        let entries = shard.index.scan(&start, &end, scan_budget)?;
        let mut items = Vec::new();
        let mut cut: Option<u64> = None;
        for (i, (k, v)) in entries.iter().enumerate() {
            if items.len() >= limit {
                // Finish the hash of the last item so no entry is skipped at the boundary.
                let h = key_hash(k);
                if i > 0 && key_hash(&entries[i - 1].0) == h {
                    if let Some(item) = keep(k, v)? {
                        items.push(item);
                    }
                    continue;
                }
                cut = Some(h);
                break;
            }
            if let Some(item) = keep(k, v)? {
                items.push(item);
            }
        }
        let next_cursor = match cut {
            Some(h) => Some(h),
            None if entries.len() >= scan_budget => {
                let last = key_hash(&entries[entries.len() - 1].0);
                let first = key_hash(&entries[0].0);
                // Progress even in the (astronomically unlikely) all-one-hash page.
                if first == last {
                    last.checked_add(1)
                } else {
                    Some(last)
                }
            }
            None => None,
        };
        Ok(ListPage { items, next_cursor })
    }

    /// Distinct orgs with batches on `shard`.
    pub fn list_orgs(
        &self,
        shard: u64,
        cursor: Option<u64>,
        limit: usize,
    ) -> Result<ListPage<u128>> {
        self.list(shard, KIND_ORG, cursor, limit, |k, _| Ok(parse_org_key(k)))
    }

    /// Distinct (org, type) pairs on `shard`, optionally of one org.
    pub fn list_aggregate_types(
        &self,
        shard: u64,
        org_id: Option<u128>,
        cursor: Option<u64>,
        limit: usize,
    ) -> Result<ListPage<AggregateTypeItem>> {
        self.list(shard, KIND_TYPE, cursor, limit, |k, _| {
            Ok(parse_type_key(k)
                .filter(|(o, _)| org_id.is_none_or(|x| x == *o))
                .map(|(org_id, aggregate_type_id)| AggregateTypeItem {
                    org_id,
                    aggregate_type_id,
                }))
        })
    }

    /// Aggregates on `shard` (deleted ones included, flagged), optionally filtered by org
    /// and/or type, with their statistics.
    pub fn list_aggregates(
        &self,
        shard: u64,
        org_id: Option<u128>,
        aggregate_type_id: Option<u128>,
        cursor: Option<u64>,
        limit: usize,
    ) -> Result<ListPage<AggregateListItem>> {
        let path = PathBuf::from("events").join(format!("index-{shard:03}"));
        self.list(shard, KIND_AGG, cursor, limit, |k, v| {
            let Some(key) = parse_agg_key(k) else {
                return Ok(None);
            };
            if org_id.is_some_and(|o| o != key.org_id)
                || aggregate_type_id.is_some_and(|t| t != key.aggregate_type_id)
            {
                return Ok(None);
            }
            let s =
                AggState::decode(v).map_err(|kind| StorageError::corrupt(path.clone(), 0, kind))?;
            Ok(Some(s.list_item(key)))
        })
    }

    /// Verifies the hash chain of every retained record of `shard`; returns the tip. A
    /// compacted record is checked by its link and continues from the tip it recorded (its
    /// elided bytes can no longer be hashed; see [`compact`]).
    pub fn verify_chain(&self, shard: u32) -> Result<[u8; 32]> {
        let s = self.shard(u64::from(shard))?;
        let bounds = s.log.bounds();
        let mut tip = GENESIS_TIP;
        let mut seq = bounds.first;
        let mut first = true;
        while seq < bounds.next {
            let records = s.log.read(seq, 1024, 16 << 20)?;
            if records.is_empty() {
                break;
            }
            for r in records {
                let rec = decode_record(r.meta.tag, &r.payload)
                    .map_err(|k| StorageError::corrupt(s.log.dir().to_path_buf(), r.meta.seq, k))?;
                if !first && rec.prev_tip != tip {
                    return Err(StorageError::corrupt(
                        s.log.dir().to_path_buf(),
                        r.meta.seq,
                        Corruption::BadHeaderField("hash chain link"),
                    ));
                }
                first = false;
                tip = rec.tip_after(r.meta.seq, &r.payload);
                seq = r.meta.end_seq();
            }
        }
        Ok(tip)
    }

    /// The chain tip of a shard's last committed record.
    pub fn chain_tip(&self, shard: u32) -> Result<[u8; 32]> {
        Ok(self.shard(u64::from(shard))?.committed_tip())
    }

    /// Counters for `/metrics`.
    pub fn stats(&self) -> EventStoreStats {
        EventStoreStats {
            commit: self.pool.stats(),
            logs: self.shards.iter().map(|s| s.log.stats()).collect(),
            indexes: self.shards.iter().map(|s| s.index.stats()).collect(),
            subscribers: self.shards.iter().map(|s| s.watchers.count()).collect(),
            cache_bytes: self.cache.used_bytes(),
        }
    }

    /// Waits for queued requests, refuses further writes, stops the index thread and writes
    /// the index memtables out (so the next open has nothing to replay).
    pub fn close(&self) -> Result<()> {
        let mut first_error = None;
        for s in &self.shards {
            if let Err(e) = s.log.close() {
                first_error.get_or_insert(e);
            }
        }
        self.stop_flusher();
        for s in &self.shards {
            // Everything is committed now: write it all, so the next open replays nothing.
            s.index.freeze();
            if let Err(e) = s.index.flush_all() {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn stop_flusher(&self) {
        for s in &self.shards {
            s.index.set_served(false);
        }
        self.flusher.stop();
        self.merger.stop();
        let threads: Vec<JoinHandle<()>> = self
            .threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for EventStore {
    fn drop(&mut self) {
        self.stop_flusher();
    }
}

/// Replays the shard's log from `from` into its index (verifying chain links); returns the
/// number of records replayed and the chain tip.
fn replay(shard: &Shard, from: u64) -> Result<(u64, [u8; 32])> {
    let log = &shard.log;
    let bounds = log.bounds();
    let corrupt = |seq: u64| move |k| StorageError::corrupt(log.dir().to_path_buf(), seq, k);
    // The tip before `from`: the chain of the record just below it.
    let mut tip = GENESIS_TIP;
    if from > bounds.first {
        let prev = log.read(from - 1, 1, u64::MAX)?;
        if let Some(r) = prev.into_iter().find(|r| r.meta.seq == from - 1) {
            let rec = decode_record(r.meta.tag, &r.payload)
                .map_err(|k| StorageError::corrupt(log.dir().to_path_buf(), r.meta.seq, k))?;
            tip = rec.tip_after(r.meta.seq, &r.payload);
        }
    }
    let mut seq = from;
    let mut replayed = 0u64;
    let mut checked_link = from > bounds.first;
    while seq < bounds.next {
        let records = log.read(seq, 4096, 16 << 20)?;
        if records.is_empty() {
            break;
        }
        for r in records {
            let s = r.meta.seq;
            let rec = decode_record(r.meta.tag, &r.payload).map_err(corrupt(s))?;
            if checked_link && rec.prev_tip != tip {
                return Err(corrupt(s)(Corruption::BadHeaderField("hash chain link")));
            }
            checked_link = true;
            let up = state::derive_update(
                s,
                r.meta.timestamp,
                &rec,
                |k| shard.committed_agg(k),
                |k, c| {
                    shard
                        .index
                        .get(&state::key_mark(k, c))?
                        .map(|v| state::Mark::decode(&v).map_err(corrupt(s)))
                        .transpose()
                },
                corrupt(s),
            )?;
            if shard.index.apply(up.entries(s), r.meta.end_seq(), false) {
                shard.index.flush_all()?;
            }
            tip = rec.tip_after(s, &r.payload);
            seq = r.meta.end_seq();
            replayed += 1;
        }
    }
    Ok((replayed, tip))
}
