//! The event store's configuration, limits, and what it reports (recovery, counters).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eddy_log::{
    Cipher, CommitStatsSnapshot, Durability, LogStats, RecoveryReport, VerifyOnOpen, WindowGate,
};

use crate::index::IndexStats;
use crate::placement::RoutingRule;
use crate::watch;

/// Default batches per read page.
pub const DEFAULT_READ_MAX_BATCHES: usize = 1000;
/// Default stored bytes per read page (well under the protocol's response caps).
pub const DEFAULT_READ_MAX_BYTES: u64 = 4 * 1024 * 1024;
/// Default sparse index interval of a shard log: denser than a partition's, because reads
/// fetch single records by sequence number (see [`Log::read_record`](eddy_log::Log::read_record)).
pub const DEFAULT_EVENT_INDEX_INTERVAL: u64 = 4096;
/// Largest shard count.
pub const MAX_SHARDS: u32 = 1024;
/// Default items per list page (`--list-page-size`).
pub const DEFAULT_LIST_PAGE: usize = 2000;
/// Most items one list page may hold.
pub const MAX_LIST_PAGE: usize = 100_000;
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
    /// Largest schema text a registration may carry, in bytes (`--max-schema-size-bytes`;
    /// above it the registration is refused as invalid).
    pub max_schema_bytes: usize,
    /// Group-commit window of the shard logs (`--fsync-delay-us`, see
    /// [`LogConfig::group_window`](eddy_log::LogConfig::group_window)). With a window the commit pool gets at least one thread
    /// per shard, so a shard waiting out its window never delays another.
    pub fsync_delay: Duration,
    /// While this gate is closed the shard logs take every group at once, window or not
    /// ([`OpenOptions::window_gate`](eddy_log::OpenOptions::window_gate)); `None`: the
    /// window always applies.
    pub fsync_delay_gate: Option<Arc<WindowGate>>,
    /// Zeros written ahead of the records of each shard's active segment, this many bytes at a
    /// time, so a group's fdatasync commits no new file size
    /// ([`LogConfig::preallocate`](eddy_log::LogConfig::preallocate)); 0 (the default) appends.
    pub preallocate: u64,
    /// Encrypt the shard logs' records at rest with this key (events, trims, deletes and
    /// schema registrations alike; the per-shard index holds no event body and is not).
    pub cipher: Option<Cipher>,
    /// When a shard log's write completes: after its fdatasync (`Fsync`, a single node's
    /// only choice, since the shard log is what makes a write durable), or once written
    /// (`Background`, a cluster member's: its group's Raft log already holds every entry it
    /// applies durably, and a restart applies again whatever the shard log had not synced).
    pub durability: Durability,
    /// Run the index's flusher and merger threads (the default). Without them, nothing
    /// writes the index in the background: the owner runs the queued flushes and merges
    /// itself with [`EventStore::run_index_work`](crate::EventStore::run_index_work), on its
    /// own thread and at its own points (a deterministic simulation), and writers never wait
    /// for a flush.
    pub index_threads: bool,
}

impl EventStoreConfig {
    /// Writer threads the store's shard logs need: `pool_threads`, or one per shard with a
    /// group-commit window (a shard waiting out its window holds a thread, and must never
    /// delay another).
    pub fn commit_threads(&self) -> usize {
        if self.fsync_delay.is_zero() {
            self.pool_threads
        } else {
            self.pool_threads.max(self.num_shards as usize)
        }
    }
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
            max_schema_bytes: crate::record::MAX_SCHEMA_BYTES,
            fsync_delay: Duration::ZERO,
            fsync_delay_gate: None,
            preallocate: 0,
            cipher: None,
            durability: Durability::Fsync,
            index_threads: true,
        }
    }
}

/// What opening found, per shard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventStoreRecovery {
    /// The shard logs' recovery reports.
    pub logs: Vec<RecoveryReport>,
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
