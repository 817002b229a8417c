//! The store: metadata plus every partition, behind one commit entry point.
//!
//! ```text
//! <root>/metadata/                 the metadata log (segments + indexes) and `snapshot`
//! <root>/partitions/<uid:020>/     one directory per partition (segments, indexes, `state`)
//! ```
//!
//! # Commit pipeline
//!
//! [`StreamStore::commit`] takes an [`Operation`]: an ordered, serialisable value with every id,
//! offset and timestamp already assigned. It is the seam for replication: today the pipeline is
//! local (append to a log, group-committed fdatasync, apply, acknowledge); a consensus layer can
//! replicate the same operations first and then commit them on every replica.
//!
//! * A metadata operation is validated against the *pending* state (the durable state plus the
//!   operations queued behind it), appended to the metadata log and acknowledged once it is
//!   durable **and** applied: an applier thread applies it to the durable state and performs its
//!   effects (opening, deleting or purging partition logs) in log order. Readers
//!   ([`StreamStore::read_metadata`]) only ever see durable, applied state.
//! * An append carries a batch already stamped; it goes to its partition's log.
//!
//! [`StreamStore::append`] is the local shortcut for the common case: it assigns the base offset and
//! timestamp, stamps the batch and commits the resulting append in one step.
//!
//! # Metadata persistence
//!
//! Each metadata operation is one record of the metadata log. Every
//! [`StreamStoreConfig::snapshot_every_ops`] operations the applier writes a snapshot of the whole
//! state (temp file, fdatasync, rename, directory fsync) and deletes the metadata segments it
//! covers. Open loads the snapshot and replays the log records after it. Snapshot layout
//! (little-endian):
//!
//! ```text
//! 0  8  magic "EDDYSNAP"           24 8  payload length u64
//! 8  4  version u32 (1)            32 4  CRC-32C of the payload
//! 12 4  reserved (0)               36 4  CRC-32C of bytes 0..36
//! 16 8  next sequence number u64 (operations below it are in the snapshot)
//! 40 .. payload: the state, bincode (fixed-width little-endian integers)
//! ```
//!
//! # Recovery
//!
//! Open recovers the metadata (snapshot + log replay), then reconciles partitions with it:
//! every partition in the metadata is opened (created if its directory is missing, purged again
//! if its purge generation lags), and partition directories the metadata does not know (a
//! deletion whose files outlived a crash) are removed, then `partitions/` is synced.

mod config;
mod metadata_log;
mod open;
mod operation;
mod registry;
mod retention;
pub(crate) mod snapshot;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use eddy_log::{
    lock, read_lock, Cache, CommitPool, CommitStats, CommitStatsSnapshot, Completion, Durability,
    IoOp, RecoveryReport, StorageBackend,
};

use crate::error::{Result, StreamStoreError};
use crate::metadata::{ConsumerKey, MetadataState};
use crate::partition::{
    AppendTicket, Partition, PartitionAddr, PollStrategy, Polled, StampableBatch,
};
use metadata_log::MetaShared;
use open::{
    open_known_partitions, recover_metadata, remove_unknown_partitions, start_applier,
    RecoveredMetadata,
};
use operation::CommitInner;
use registry::Registry;

pub use config::{StreamCipherFn, StreamCiphers, StreamStoreConfig};
pub use metadata_log::METADATA_TAG;
pub use operation::{Applied, Commit, Operation};
pub use registry::PARTITIONS_DIR;
pub use retention::RetentionReport;
pub use snapshot::{METADATA_DIR, SNAPSHOT_FILE};

/// Replay reads the metadata log in chunks of about this many bytes.
const REPLAY_CHUNK_BYTES: u64 = 8 * 1024 * 1024;

/// What opening a store found.
#[derive(Debug, Clone, Default)]
pub struct StreamStoreRecovery {
    /// The metadata log's recovery.
    pub metadata: RecoveryReport,
    /// Metadata operations replayed after the snapshot.
    pub replayed_ops: u64,
    /// Each partition's recovery.
    pub partitions: Vec<(PartitionAddr, RecoveryReport)>,
    /// Partition directories removed because the metadata no longer knows them.
    pub removed_partitions: Vec<PathBuf>,
}

/// The stream store: metadata and every partition, behind one commit entry point. Cheap to
/// share (`Arc`); every method but [`StreamStore::close`] takes `&self`.
pub struct StreamStore {
    backend: Arc<dyn StorageBackend>,
    config: StreamStoreConfig,
    /// This store's group-commit counters (the pool may be shared with the event store).
    stats: Arc<CommitStats>,
    registry: Arc<Registry>,
    meta: Arc<MetaShared>,
    /// `None` once the store is shut down.
    applier: Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for StreamStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamStore")
            .field("config", &self.config)
            .field("commit", &self.stats.snapshot())
            .finish_non_exhaustive()
    }
}

impl StreamStore {
    /// Opens (or creates) a store on `backend` and recovers it, on a commit pool of
    /// `config.pool_threads` threads and a cache of `config.cache_bytes` of its own.
    pub fn open(
        backend: Arc<dyn StorageBackend>,
        config: StreamStoreConfig,
    ) -> Result<(StreamStore, StreamStoreRecovery)> {
        let pool = CommitPool::new(config.pool_threads)
            .map_err(|e| StreamStoreError::io(IoOp::Open, "commit pool", e))?;
        let cache = Arc::new(Cache::new(config.cache_bytes));
        Self::open_shared(backend, config, &pool, cache)
    }

    /// Opens (or creates) a store on `backend` and recovers it, on the storage engine's
    /// shared commit pool and cache (the server hands the same ones to the event store).
    /// `config.pool_threads` and `config.cache_bytes` are not used: the pool and cache are
    /// sized by whoever made them.
    pub fn open_shared(
        backend: Arc<dyn StorageBackend>,
        config: StreamStoreConfig,
        pool: &CommitPool,
        cache: Arc<Cache>,
    ) -> Result<(StreamStore, StreamStoreRecovery)> {
        let stats = Arc::new(CommitStats::new());
        let mut recovery = StreamStoreRecovery::default();

        // Metadata: snapshot, then log replay.
        let RecoveredMetadata {
            meta,
            state,
            snapshot_next,
        } = recover_metadata(&backend, &config, pool, &cache, &stats, &mut recovery)?;

        // Partitions: open what the metadata knows, remove what it does not.
        let registry = Arc::new(Registry {
            backend: Arc::clone(&backend),
            pool: pool.clone(),
            cache,
            stats: Arc::clone(&stats),
            config: config.clone(),
            partitions: RwLock::new(BTreeMap::new()),
        });
        remove_unknown_partitions(&*backend, &state, &mut recovery.removed_partitions)?;
        open_known_partitions(&registry, &state, &mut recovery.partitions)?;

        // The applier thread.
        let applier = start_applier(&meta, &registry, &backend, &config, snapshot_next)?;
        Ok((
            StreamStore {
                backend,
                config,
                stats,
                registry,
                meta,
                applier: Mutex::new(Some(applier)),
            },
            recovery,
        ))
    }
}

impl StreamStore {
    #[cfg(test)]
    fn meta_log(&self) -> &eddy_log::Log {
        self.meta.log()
    }

    /// The single commit entry point: makes `op` durable and applies it.
    pub fn commit(&self, op: Operation) -> Commit {
        match op {
            Operation::Metadata(op) => match self.meta.commit(&op) {
                Ok(c) => Commit {
                    inner: CommitInner::Metadata(c),
                },
                Err(e) => Commit::ready(Err(e)),
            },
            Operation::Append {
                addr,
                base_offset,
                timestamp,
                message_count,
                bytes,
            } => match self
                .partition(addr)
                .and_then(|p| p.append_stamped(base_offset, timestamp, message_count, bytes))
            {
                Ok(ticket) => Commit {
                    inner: CommitInner::Append(ticket),
                },
                Err(e) => Commit::ready(Err(e)),
            },
            Operation::DeleteSegments { addr, count } => Commit::ready(
                self.partition(addr)
                    .and_then(|p| p.delete_oldest_segments(count as usize))
                    .map(Applied::SegmentsDeleted),
            ),
        }
    }

    /// Appends a batch to a partition: assigns its base offset and timestamp (`max(now_us,
    /// last)`), stamps it and commits it. The ticket resolves once it is durable.
    pub fn append<B: StampableBatch>(
        &self,
        addr: PartitionAddr,
        batch: B,
        now_us: u64,
    ) -> Result<AppendTicket> {
        self.partition(addr)?.append(batch, now_us)
    }

    /// A partition by address.
    pub fn partition(&self, addr: PartitionAddr) -> Result<Arc<Partition>> {
        self.registry
            .get(addr)
            .ok_or(StreamStoreError::PartitionNotFound {
                stream_id: addr.stream_id,
                topic_id: addr.topic_id,
                partition_id: addr.partition_id,
            })
    }

    /// Polls a partition (stream protocol 7.5). `consumer` is needed for
    /// [`PollStrategy::Next`]: its stored offset is read from the metadata.
    pub fn poll(
        &self,
        addr: PartitionAddr,
        consumer: Option<ConsumerKey>,
        strategy: PollStrategy,
        count: u32,
        max_bytes: u64,
    ) -> Result<Polled> {
        let partition = self.partition(addr)?;
        let stored = match (strategy, consumer) {
            (PollStrategy::Next, Some(consumer)) => self.consumer_offset(addr, consumer),
            _ => None,
        };
        partition.poll(strategy, count, stored, max_bytes)
    }

    /// A consumer's stored offset on a partition.
    pub fn consumer_offset(&self, addr: PartitionAddr, consumer: ConsumerKey) -> Option<u64> {
        self.read_metadata(|s| {
            s.partition(addr)
                .and_then(|p| p.offsets.get(&consumer).copied())
        })
    }

    /// Reads the change journal with the durable state it describes (consistent: the
    /// applier records an operation's changes while it holds the state).
    pub fn read_changes<R>(
        &self,
        f: impl FnOnce(&crate::changes::ChangeJournal, &MetadataState) -> R,
    ) -> R {
        let durable = read_lock(&self.meta.durable);
        let journal = lock(&self.meta.journal);
        f(&journal, &durable)
    }

    /// Reads the durable, applied metadata state.
    pub fn read_metadata<R>(&self, f: impl FnOnce(&MetadataState) -> R) -> R {
        f(&read_lock(&self.meta.durable))
    }

    /// Syncs every partition whose topic acknowledges before fdatasync (the background flush;
    /// call it periodically).
    pub fn flush_unsynced(&self) -> Result<()> {
        let partitions: Vec<Arc<Partition>> = read_lock(&self.registry.partitions)
            .values()
            .filter(|p| matches!(p.log().config().durability, Durability::Background { .. }))
            .cloned()
            .collect();
        let pending: Vec<Completion<()>> = partitions.iter().map(|p| p.flush()).collect();
        for c in pending {
            c.wait()?;
        }
        Ok(())
    }

    /// Group-commit counters of every log (records, fdatasyncs, ...).
    pub fn commit_stats(&self) -> CommitStatsSnapshot {
        self.stats.snapshot()
    }

    /// The store's configuration.
    pub fn config(&self) -> &StreamStoreConfig {
        &self.config
    }

    /// The backend the store runs on.
    pub fn backend(&self) -> &Arc<dyn StorageBackend> {
        &self.backend
    }

    /// Flushes everything and stops the store (dropping it does the same, ignoring errors).
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    /// [`StreamStore::close`] through a shared handle: flushes everything and stops the store
    /// even while other handles are alive (a connection that outlived the server's drain).
    /// From then on every commit and append is refused with
    /// [`LogError::Shutdown`](eddy_log::LogError::Shutdown); reads keep working. Calling it
    /// again does nothing.
    pub fn shutdown(&self) -> Result<()> {
        let Some(applier) = lock(&self.applier).take() else {
            return Ok(());
        };
        let mut first_error = None;
        if let Some(log) = self.meta.log.get() {
            if let Err(e) = log.close() {
                first_error.get_or_insert(e.into());
            }
        }
        lock(&self.meta.jobs).take();
        let _ = applier.join();
        let partitions: Vec<Arc<Partition>> = read_lock(&self.registry.partitions)
            .values()
            .cloned()
            .collect();
        for p in partitions {
            if let Err(e) = p.close() {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for StreamStore {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!(error = %e, "store shutdown error");
        }
    }
}

#[cfg(test)]
mod tests;
