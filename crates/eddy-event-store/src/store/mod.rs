//! The event store: the shards, their indexes and watchers, the shared index threads, and
//! the request API (write, trim, delete, read, details, schemas, watch, listings, compaction).

mod config;
mod flusher;
mod listing;
mod meta;
mod open;
mod replay;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use eddy_log::{
    create_dir_durable, lock, Cache, CommitPool, CommitStats, Completion, IoOp, StorageBackend,
};

use crate::compact::{self, CompactionPolicy, CompactionReport, PassMark, SegmentReclaim};
use crate::error::{EventStoreError, Refusal, Result};
use crate::placement::Placement;
use crate::record::{self, EncodedEvents, EventCodec};
use crate::schema::Schemas;
use crate::shard::{FlushSignal, Shard};
use crate::types::{
    AggregateDetails, AggregateKey, AggregateWrite, DeleteOutcome, DeleteRequest, ReadPage,
    ReadQuery, SchemaKey, SchemaRegistration, StoredSchema, TrimOutcome, TrimRequest, WriteOutcome,
    WriteRequest,
};
use crate::watch::{SubscriptionId, WatchFilter, WatchSink};
use flusher::Flusher;
use meta::{create_or_check_meta, Meta};
use open::{check_shard_config, shard_log_config, start_index_threads, ShardOpener};

pub use config::{
    EventStoreConfig, EventStoreRecovery, EventStoreStats, DEFAULT_EVENT_INDEX_INTERVAL,
    DEFAULT_LIST_PAGE, DEFAULT_READ_MAX_BATCHES, DEFAULT_READ_MAX_BYTES, MAX_LIST_PAGE, MAX_SHARDS,
};

/// The event store. Cheap to share (`Arc`); every method takes `&self`.
pub struct EventStore {
    backend: Arc<dyn StorageBackend>,
    config: EventStoreConfig,
    placement: Placement,
    shards: Vec<Shard>,
    cache: Arc<Cache>,
    codec: Arc<EventCodec>,
    /// Compiled schemas of shard 0's registrations, and the keys known to have none.
    schemas: Arc<Schemas>,
    flusher: Arc<Flusher>,
    merger: Arc<Flusher>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Per shard, where its last compaction pass left off; the lock serializes passes.
    compaction: Mutex<Vec<PassMark>>,
    /// This store's group-commit counters (the pool may be shared with the stream store).
    stats: Arc<CommitStats>,
    // Dropped last: when this is the pool's last handle, finishes every queued group commit,
    // then joins the writer threads.
    pool: CommitPool,
}

impl fmt::Debug for EventStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStore")
            .field("backend", &self.backend)
            .field("placement", &self.placement)
            .field("commit", &self.stats.snapshot())
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl EventStore {
    /// Opens (or creates) the event store under `events/` of `backend` on a commit pool
    /// ([`EventStoreConfig::commit_threads`]) and a cache (`cache_bytes`) of its own. See
    /// [`EventStore::open_shared`].
    pub fn open(
        backend: Arc<dyn StorageBackend>,
        config: EventStoreConfig,
    ) -> Result<(EventStore, EventStoreRecovery)> {
        let pool = CommitPool::new(config.commit_threads())
            .map_err(|e| EventStoreError::io(IoOp::Open, "events/pool", e))?;
        let cache = Arc::new(Cache::new(config.cache_bytes));
        Self::open_shared(backend, config, &pool, cache)
    }

    /// Opens (or creates) the event store under `events/` of `backend`, on the storage
    /// engine's shared commit pool and cache (the server hands the same ones to the stream
    /// store), recovering every shard: each log is recovered, then its index is brought up to
    /// date by replaying the log from the index's checkpoint (or rebuilt from the start when
    /// it is unusable). The pool gets at least [`EventStoreConfig::commit_threads`] threads;
    /// `config.cache_bytes` is not used.
    pub fn open_shared(
        backend: Arc<dyn StorageBackend>,
        config: EventStoreConfig,
        pool: &CommitPool,
        cache: Arc<Cache>,
    ) -> Result<(EventStore, EventStoreRecovery)> {
        check_shard_config(&config)?;
        let root = PathBuf::from("events");
        create_dir_durable(&*backend, &root)?;
        let mut recovery = EventStoreRecovery::default();
        if create_or_check_meta(&*backend, &root, &Meta::wanted(&config))? {
            recovery.created = true;
        }

        // A shard waiting out its group-commit window holds a pool thread: give every shard one.
        pool.ensure_threads(config.commit_threads())
            .map_err(|e| EventStoreError::io(IoOp::Open, root.join("pool"), e))?;
        let stats = Arc::new(CommitStats::new());
        let codec = Arc::new(EventCodec::new(
            config.compression_level,
            config.dictionary.clone(),
        ));
        let flusher = Arc::new(Flusher::default());
        let opener = ShardOpener {
            backend: &backend,
            root: &root,
            config: &config,
            log_config: shard_log_config(&config),
            pool,
            cache: &cache,
            codec: &codec,
            flusher: &flusher,
            stats: &stats,
        };
        let mut shards = Vec::with_capacity(config.num_shards as usize);
        for id in 0..config.num_shards {
            shards.push(opener.open(id, &mut recovery)?);
        }
        let merger = Arc::new(Flusher::default());
        let threads = if config.index_threads {
            start_index_threads(&root, &flusher, &merger, &shards)?
        } else {
            Vec::new()
        };
        let marks = vec![PassMark::new(); config.num_shards as usize];
        let placement = Placement::new(
            config.num_shards,
            config.routing_rule,
            config.reserve_coordinator_shard,
        );
        Ok((
            EventStore {
                backend,
                placement,
                schemas: Arc::new(Schemas::new(config.max_schema_bytes)),
                config,
                shards,
                cache,
                codec,
                flusher,
                merger,
                threads: Mutex::new(threads),
                compaction: Mutex::new(marks),
                stats,
                pool: pool.clone(),
            },
            recovery,
        ))
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &EventStoreConfig {
        &self.config
    }

    /// The shard layout (shard count, routing rule, reserved coordinator): how the store
    /// routes, for callers that must route before they call it (a watch's shard).
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The number of shards.
    pub fn num_shards(&self) -> u32 {
        self.placement.num_shards()
    }

    /// The shard that holds `key` (the protocol's placement rule on the full u128).
    pub fn shard_of(&self, key: &AggregateKey) -> u32 {
        self.placement.shard_of(key)
    }

    /// A shard by number, or [`Refusal::NoSuchShard`].
    pub(crate) fn shard(&self, id: u64) -> Result<&Shard> {
        let id = self.placement.shard(id)?;
        Ok(&self.shards[id as usize])
    }

    /// The shard of `key`.
    fn home(&self, key: &AggregateKey) -> &Shard {
        &self.shards[self.placement.shard_of(key) as usize]
    }

    /// The one shard of a multi-key request, or the refusal.
    fn route<'a>(&self, keys: impl Iterator<Item = &'a AggregateKey>) -> Result<&Shard> {
        let shard = self.placement.shard_of_keys(keys)?;
        Ok(&self.shards[shard as usize])
    }

    /// Writes one batch per part, atomically: the whole write path of the event protocol, in
    /// its check order (§4.3): routing (one shard), input checks of every part (events
    /// present, no event type 0), schema validation of unencrypted payloads, limits, then the
    /// per-aggregate checks against the write-ahead state (existence, OCC, idempotency).
    /// Refusals resolve at once (nothing written); success resolves after the record is
    /// durable and visible.
    ///
    /// Schema validation runs on the store's schema threads and this call waits for it at
    /// most [`VALIDATION_DEADLINE`](crate::schema::VALIDATION_DEADLINE) (2022 past it): when
    /// [`EventStore::needs_schema_work`] says so, an async caller makes this call from a
    /// thread that may block.
    pub fn write(&self, mut request: WriteRequest) -> Completion<WriteOutcome, EventStoreError> {
        match self.checked_parts(&mut request) {
            Ok((shard, parts)) => self.shards[shard as usize].write(
                request.client_id,
                request.user_id,
                request.now,
                &parts,
                None,
            ),
            Err(e) => Completion::ready(Err(e)),
        }
    }

    /// The checks of a write before its validation against the shard's state (routing to one
    /// shard, input, schemas, limits) and the encoding of its events: the shard, and the
    /// parts taken out of `request` (their `events` emptied, encoded beside each).
    pub(crate) fn checked_parts(
        &self,
        request: &mut WriteRequest,
    ) -> Result<(u32, Vec<(AggregateWrite, EncodedEvents)>)> {
        let shard = self
            .placement
            .shard_of_keys(request.writes.iter().map(|w| &w.key))?;
        check_input(request)?;
        self.schemas.validate(&self.shards[0], request)?;
        for w in &request.writes {
            if w.events.len() > record::MAX_EVENTS_PER_BATCH as usize {
                return Err(Refusal::Limit {
                    what: "events in one batch",
                    value: w.events.len() as u64,
                    limit: u64::from(record::MAX_EVENTS_PER_BATCH),
                }
                .into());
            }
            let raw: usize = w
                .events
                .iter()
                .map(|e| record::EVENT_HEADER_LEN + e.value.len())
                .sum();
            if raw > record::MAX_BATCH_BYTES as usize {
                return Err(Refusal::Limit {
                    what: "batch bytes",
                    value: raw as u64,
                    limit: u64::from(record::MAX_BATCH_BYTES),
                }
                .into());
            }
        }
        // Encode (and compress) outside every lock.
        let mut parts = Vec::with_capacity(request.writes.len());
        for mut w in std::mem::take(&mut request.writes) {
            match self.codec.encode_events(&w.events) {
                Ok(e) => {
                    w.events = Vec::new();
                    parts.push((w, e));
                }
                Err(e) => {
                    return Err(EventStoreError::io(
                        IoOp::Append,
                        self.shards[shard as usize].log.dir(),
                        e,
                    ))
                }
            }
        }
        Ok((shard, parts))
    }

    /// The compiled-schema cache.
    pub(crate) fn schemas(&self) -> &Schemas {
        &self.schemas
    }

    /// The compiled-schema cache, shared (for a completion to update it).
    pub(crate) fn schemas_handle(&self) -> Arc<Schemas> {
        Arc::clone(&self.schemas)
    }

    /// Whether [`EventStore::write`] may have schema work to do for `request`: false when
    /// every unencrypted event's type is known to have no schema (the write then never waits
    /// for the schema threads; nor does one without unencrypted events). A registration
    /// racing this answer is ordered after the write, as a registration racing the write
    /// itself would be.
    pub fn needs_schema_work(&self, request: &WriteRequest) -> bool {
        self.schemas.needs_work(request)
    }

    /// Raises the readable floor of an aggregate. At or below the floor: success, nothing
    /// written.
    pub fn trim(&self, request: TrimRequest) -> Completion<TrimOutcome, EventStoreError> {
        self.home(&request.key).trim(&request, None)
    }

    /// Soft-deletes aggregates, atomically.
    pub fn delete(&self, request: &DeleteRequest) -> Completion<DeleteOutcome, EventStoreError> {
        match self.route(request.deletes.iter().map(|d| &d.key)) {
            Ok(shard) => shard.delete(
                request.client_id,
                request.user_id,
                request.now,
                &request.deletes,
                None,
            ),
            Err(e) => Completion::ready(Err(e)),
        }
    }

    /// Reads one page of an aggregate's batches (committed data only).
    pub fn read(&self, key: &AggregateKey, query: &ReadQuery) -> Result<ReadPage> {
        self.home(key).read(key, query)
    }

    /// An aggregate's details; [`Refusal::NotFound`] when it never existed (a deleted one
    /// answers with `is_deleted`).
    pub fn details(&self, key: &AggregateKey) -> Result<AggregateDetails> {
        match self.home(key).committed_agg(key)? {
            Some(s) => Ok(s.details()),
            None => Err(Refusal::NotFound { part: 0, key: *key }.into()),
        }
    }

    /// Registers a schema (stored on shard 0 for the whole store; immutable once stored),
    /// in the protocol's check order (§4.10): a known schema type, the size cap
    /// ([`EventStoreConfig::max_schema_bytes`]), a schema that compiles, then uniqueness.
    /// Later writes of its event type are validated against it. Compilation runs on the
    /// store's schema threads and this call waits for it at most
    /// [`VALIDATION_DEADLINE`](crate::schema::VALIDATION_DEADLINE) (2021 past it): an async
    /// caller makes this call from a thread that may block.
    pub fn register_schema(
        &self,
        registration: SchemaRegistration,
    ) -> Completion<(), EventStoreError> {
        let (registration, compiled) = match self.schemas.compile_registration(registration) {
            Ok(compiled) => compiled,
            Err(e) => return Completion::ready(Err(e.into())),
        };
        if registration.schema.len() > record::MAX_SCHEMA_BYTES {
            return Completion::ready(Err(Refusal::Limit {
                what: "schema bytes",
                value: registration.schema.len() as u64,
                limit: record::MAX_SCHEMA_BYTES as u64,
            }
            .into()));
        }
        let key = registration.key;
        let schemas = Arc::clone(&self.schemas);
        self.shards[0]
            .register_schema(registration, None)
            .map(move |done| {
                if done.is_ok() {
                    schemas.insert(key, Some(Arc::new(compiled)));
                }
                done
            })
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

    /// Scans every sealed segment of `shard` and reports what compaction could reclaim
    /// (computed now from the log and the per-aggregate index; nothing is stored).
    pub fn reclaimable(&self, shard: u32) -> Result<Vec<SegmentReclaim>> {
        compact::reclaimable(self.shard(u64::from(shard))?)
    }

    /// One compaction pass over every shard: scans the sealed segments (see the
    /// [compaction docs](crate::compact)) and rewrites each whose reclaimable share reaches
    /// `policy.min_reclaimable_ratio`, without blocking writers (the active segments are never
    /// touched) or readers. Passes run one at a time; the server calls this every
    /// `--compaction-check-interval-secs` on a thread of its own.
    pub fn compact(&self, policy: CompactionPolicy) -> Result<CompactionReport> {
        self.compact_until(policy, &AtomicBool::new(false))
    }

    /// [`EventStore::compact`] that stops between two segments once `stop` is set (shutdown
    /// waits at most for one segment's scan or rewrite). Work done so far is kept and a shard
    /// left part-way is scanned again by the next pass; the report says `interrupted`.
    pub fn compact_until(
        &self,
        policy: CompactionPolicy,
        stop: &AtomicBool,
    ) -> Result<CompactionReport> {
        let mut marks = lock(&self.compaction);
        compact::compact_shards(&self.shards, &mut marks, policy, stop)
    }

    /// Counters for `/metrics`.
    pub fn stats(&self) -> EventStoreStats {
        EventStoreStats {
            commit: self.stats.snapshot(),
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
                first_error.get_or_insert(e.into());
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

    /// Runs the index work queued since the last call (each shard's frozen memtables
    /// written as runs, then its runs merged) on this thread, and returns the shards it
    /// flushed. For a store opened without index threads
    /// ([`EventStoreConfig::index_threads`] false), whose owner decides when the index is
    /// written; with the threads, they take the work and this finds none. A failed flush is
    /// kept queued for the next call; while it fails, the shard refuses mutations once its
    /// memtables are full, as with the threads.
    pub fn run_index_work(&self) -> usize {
        let mut flushed = 0;
        let mut failed = Vec::new();
        while let Some(shard) = self.flusher.take_queued() {
            let Some(s) = self.shards.get(shard as usize) else {
                continue;
            };
            match s.index.flush_pending() {
                Ok(()) => {
                    s.index.set_flush_failure(None);
                    flushed += 1;
                    if let Err(e) = s.index.merge_runs() {
                        tracing::error!(shard, error = %e, "merging event index runs failed");
                    }
                }
                Err(e) => {
                    tracing::debug!(shard, error = %e, "flushing the event index failed; it is retried at the next call");
                    s.index.set_flush_failure(Some(Arc::new(e)));
                    failed.push(shard);
                }
            }
        }
        for shard in failed {
            self.flusher.flush_needed(shard);
        }
        flushed
    }

    fn stop_flusher(&self) {
        for s in &self.shards {
            s.index.set_served(false);
        }
        self.flusher.stop();
        self.merger.stop();
        let threads: Vec<JoinHandle<()>> = lock(&self.threads).drain(..).collect();
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

/// The input checks of a write, every part first (§4.3 step 4): events present (or the part
/// is a guard, and some part appends), no event of type 0.
pub(crate) fn check_input(request: &WriteRequest) -> std::result::Result<(), Refusal> {
    for (part, w) in request.writes.iter().enumerate() {
        if w.is_guard() {
            continue;
        }
        if w.events.is_empty() {
            return Err(if w.expected_version.is_some() {
                Refusal::MalformedGuard { part }
            } else {
                Refusal::EmptyEvents { part }
            });
        }
        if let Some(e) = w.events.iter().find(|e| e.event_type_major == 0) {
            return Err(Refusal::ZeroEventType {
                part,
                client_seq: e.client_seq,
            });
        }
    }
    if request.writes.iter().all(AggregateWrite::is_guard) {
        return Err(Refusal::MalformedGuard { part: 0 });
    }
    Ok(())
}
