//! The steps of opening the event store ([`EventStore::open_shared`](super::EventStore::open_shared)):
//! the shard-count checks, opening and recovering each shard, and starting the shared index
//! threads.

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use eddy_log::{Cache, CommitPool, CommitStats, IoOp, Log, LogConfig, OpenOptions, StorageBackend};

use crate::error::{EventStoreError, Result};
use crate::index::{Index, IndexOpen};
use crate::record::{EventCodec, GENESIS_TIP};
use crate::shard::{FlushSignal, Shard};
use crate::watch;

use super::config::{EventStoreConfig, EventStoreRecovery, MAX_SHARDS};
use super::flusher::{run_flusher, run_merger, Flusher};
use super::replay::replay;

/// The shard count must be 1 to [`MAX_SHARDS`], and at least 2 when shard 0 is reserved for
/// the coordinator.
pub(super) fn check_shard_config(config: &EventStoreConfig) -> Result<()> {
    if config.num_shards == 0 || config.num_shards > MAX_SHARDS {
        return Err(EventStoreError::InvalidConfig {
            field: "num_shards",
            value: u64::from(config.num_shards),
        });
    }
    if config.reserve_coordinator_shard && config.num_shards < 2 {
        return Err(EventStoreError::InvalidConfig {
            field: "reserve_coordinator_shard",
            value: 1,
        });
    }
    Ok(())
}

/// The log settings every shard's log is opened with.
pub(super) fn shard_log_config(config: &EventStoreConfig) -> LogConfig {
    LogConfig {
        segment_size: config.segment_size,
        index_interval: config.index_interval,
        verify_on_open: config.verify_on_open,
        group_window: config.fsync_delay,
        preallocate: config.preallocate,
        durability: config.durability,
        ..LogConfig::default()
    }
}

/// What every shard of one store is opened with: the store's root, settings, engine (pool
/// and cache) and the parts its shards share.
pub(super) struct ShardOpener<'a> {
    pub(super) backend: &'a Arc<dyn StorageBackend>,
    /// `events/`: shard `id` keeps its index in `index-<id>` and its log in `shard-<id>`.
    pub(super) root: &'a Path,
    pub(super) config: &'a EventStoreConfig,
    pub(super) log_config: LogConfig,
    pub(super) pool: &'a CommitPool,
    pub(super) cache: &'a Arc<Cache>,
    pub(super) codec: &'a Arc<EventCodec>,
    pub(super) flusher: &'a Arc<Flusher>,
    pub(super) stats: &'a Arc<CommitStats>,
}

impl ShardOpener<'_> {
    /// Opens shard `id`: its index, then its log (recovered, with the shard's commit hook
    /// feeding the index and the watchers), then brings the index up to date by replaying
    /// the log from [`replay_start`]. Adds the log's recovery report, the replay count and
    /// (when the index starts empty) the shard's id to `recovery`.
    pub(super) fn open(&self, id: u32, recovery: &mut EventStoreRecovery) -> Result<Shard> {
        let config = self.config;
        let (index, opened) = Index::open(
            Arc::clone(self.backend),
            self.root.join(format!("index-{id:03}")),
            Arc::clone(self.cache),
            config.memtable_bytes,
        )?;
        let index = Arc::new(index);
        let watchers = Arc::new(watch::Watchers::new(config.max_subscribers_per_shard));
        let signal: Arc<dyn FlushSignal> = Arc::clone(self.flusher) as Arc<dyn FlushSignal>;
        let (hook, shared) = Shard::hook(id, &index, &watchers, signal);
        let (log, report) = Log::open(
            Arc::clone(self.backend),
            self.root.join(format!("shard-{id:03}")),
            self.log_config,
            self.pool,
            Arc::clone(self.cache),
            OpenOptions {
                hook: Some(hook),
                stats: Some(Arc::clone(self.stats)),
                cipher: config.cipher.clone(),
                window_gate: config.fsync_delay_gate.clone(),
                ..OpenOptions::default()
            },
        )?;
        recovery.logs.push(report);
        index.set_log(&log);
        let from = replay_start(id, &index, &log, &opened)?;
        if from.rebuilt {
            recovery.rebuilt.push(id);
        }
        let shard = Shard::new(
            id,
            log,
            index,
            Arc::clone(self.codec),
            watchers,
            shared,
            GENESIS_TIP,
        );
        let (replayed, tip) = replay(&shard, from.seq)?;
        shard.set_tip(tip);
        shard.set_raft_through(crate::replicated::last_raft_index(&shard)?);
        recovery.replayed.push(replayed);
        Ok(shard)
    }
}

/// Where a shard's index replay starts ([`replay_start`]).
struct ReplayStart {
    /// The first sequence number to replay.
    seq: u64,
    /// The index starts empty: rebuilt at open, or reset here.
    rebuilt: bool,
}

/// Where shard `id`'s index catches up with its log from: the index's checkpoint, or the
/// log's first sequence number when the checkpoint lies outside the log (the index
/// disagrees with it, so it is reset and rebuilt).
fn replay_start(id: u32, index: &Index, log: &Log, opened: &IndexOpen) -> Result<ReplayStart> {
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
    Ok(ReplayStart { seq: from, rebuilt })
}

/// Hands every shard's index to the shared index threads (marks it served) and starts them:
/// the flusher, which `flusher` wakes, then the merger, which `merger` wakes.
pub(super) fn start_index_threads(
    root: &Path,
    flusher: &Arc<Flusher>,
    merger: &Arc<Flusher>,
    shards: &[Shard],
) -> Result<Vec<JoinHandle<()>>> {
    let indexes: Vec<Arc<Index>> = shards.iter().map(|s| Arc::clone(&s.index)).collect();
    for index in &indexes {
        index.set_served(true);
    }
    let mut threads = Vec::new();
    let (flusher, flush_merger, flush_indexes) =
        (Arc::clone(flusher), Arc::clone(merger), indexes.clone());
    threads.push(
        std::thread::Builder::new()
            .name("eddy-events-flush".into())
            .spawn(move || run_flusher(&flusher, &flush_merger, &flush_indexes))
            .map_err(|e| EventStoreError::io(IoOp::Open, root.join("index"), e))?,
    );
    let merger = Arc::clone(merger);
    threads.push(
        std::thread::Builder::new()
            .name("eddy-events-merge".into())
            .spawn(move || run_merger(&merger, &indexes))
            .map_err(|e| EventStoreError::io(IoOp::Open, root.join("index"), e))?,
    );
    Ok(threads)
}
