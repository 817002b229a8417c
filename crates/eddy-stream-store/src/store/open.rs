//! The steps of opening a store ([`StreamStore::open_shared`](super::StreamStore::open_shared)):
//! recovering the metadata (snapshot, then log replay), reconciling the partition directories
//! with it, and starting the applier thread.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use eddy_log::{
    create_dir_durable, lock, write_lock, Cache, CommitPool, CommitStats, Corruption, IoOp, Log,
    OpenOptions, RecoveryReport, StorageBackend,
};

use crate::error::{Result, StreamStoreError};
use crate::metadata::{decode_op, MetadataState, TopicConfig};
use crate::partition::PartitionAddr;

use super::config::StreamStoreConfig;
use super::metadata_log::{applier, Job, MetaHook, MetaShared};
use super::registry::{open_partitions, Registry, PARTITIONS_DIR};
use super::snapshot::{read_snapshot, METADATA_DIR};
use super::{StreamStoreRecovery, REPLAY_CHUNK_BYTES};

/// The metadata as recovered at open.
pub(super) struct RecoveredMetadata {
    /// The shared metadata, its log set and its durable and pending states the recovered one.
    pub(super) meta: Arc<MetaShared>,
    /// The recovered state.
    pub(super) state: MetadataState,
    /// The sequence number the snapshot was taken at (0 without one).
    pub(super) snapshot_next: u64,
}

/// Recovers the metadata: loads the snapshot (if any), opens the metadata log on the shared
/// pool and cache, checks that the log follows on from the snapshot, replays the operations
/// after it, and publishes the result in a new [`MetaShared`] (durable and pending state,
/// applied position, log). Records the log's recovery and the replay count in `recovery`.
pub(super) fn recover_metadata(
    backend: &Arc<dyn StorageBackend>,
    config: &StreamStoreConfig,
    pool: &CommitPool,
    cache: &Arc<Cache>,
    stats: &Arc<CommitStats>,
    recovery: &mut StreamStoreRecovery,
) -> Result<RecoveredMetadata> {
    create_dir_durable(&**backend, Path::new(METADATA_DIR))?;
    let (snapshot_next, mut state) =
        read_snapshot(&**backend)?.unwrap_or((0, MetadataState::default()));
    let log_id = crate::changes::load_or_create_log_id(&**backend, Path::new(METADATA_DIR))?;
    let mut journal = crate::changes::ChangeJournal::new(log_id, snapshot_next);
    let meta = Arc::new(MetaShared::new());
    let (log, report) = Log::open(
        Arc::clone(backend),
        PathBuf::from(METADATA_DIR),
        config.metadata_log_config(),
        pool,
        Arc::clone(cache),
        OpenOptions {
            initial_seq: snapshot_next,
            min_next_seq: snapshot_next,
            hook: Some(Arc::new(MetaHook {
                shared: Arc::clone(&meta),
            })),
            stats: Some(Arc::clone(stats)),
            // Names, settings and hashes: no message is ever in the metadata log.
            cipher: None,
            window_gate: None,
        },
    )?;
    recovery.metadata = report;
    let bounds = log.bounds();
    if bounds.first > snapshot_next {
        // Operations between the snapshot and the log's first record are missing.
        return Err(StreamStoreError::corrupt(
            Path::new(METADATA_DIR).join(eddy_log::format::segment_file_name(bounds.first)),
            0,
            Corruption::NonContiguous {
                expected: snapshot_next,
                found: bounds.first,
            },
        ));
    }
    recovery.replayed_ops +=
        replay_metadata(&log, snapshot_next, bounds.next, &mut state, &mut journal)?;
    *lock(&meta.journal) = journal;
    publish_recovered(&meta, log, &state, bounds.next.max(snapshot_next));
    Ok(RecoveredMetadata {
        meta,
        state,
        snapshot_next,
    })
}

/// Applies to `state` every operation of the metadata log from `from` up to `end` (the log's
/// next sequence number), and returns how many it applied.
fn replay_metadata(
    log: &Log,
    from: u64,
    end: u64,
    state: &mut MetadataState,
    journal: &mut crate::changes::ChangeJournal,
) -> Result<u64> {
    let mut replayed = 0;
    let mut next = from;
    while next < end {
        let records = log.read(next, u64::MAX, REPLAY_CHUNK_BYTES)?;
        let Some(last) = records.last() else {
            break;
        };
        let chunk_end = last.meta.end_seq();
        for record in records {
            if record.meta.seq < next {
                continue;
            }
            let op = decode_op(&record.payload).map_err(|source| StreamStoreError::Encoding {
                action: "decode",
                path: PathBuf::from(METADATA_DIR),
                source,
            })?;
            // An operation that was accepted once is accepted again (apply is
            // deterministic); a refusal here means the log and snapshot disagree.
            let (_, changes) =
                crate::changes::apply_recording(state, &op).map_err(StreamStoreError::Metadata)?;
            journal.record(
                record.meta.seq + 1,
                &record.payload,
                record.meta.timestamp,
                changes,
            );
            replayed += 1;
        }
        next = chunk_end;
    }
    Ok(replayed)
}

/// Makes the recovered `state` both the durable and the pending state of `meta` (pending at
/// epoch 0), with every operation below `applied_to` applied, and gives `meta` its log.
fn publish_recovered(meta: &MetaShared, log: Log, state: &MetadataState, applied_to: u64) {
    *lock(&meta.applied) = applied_to;
    write_lock(&meta.durable).clone_from(state);
    {
        let mut pending = lock(&meta.pending);
        pending.state = state.clone();
        pending.epoch = Some(0);
    }
    meta.log
        .set(log)
        .unwrap_or_else(|_| unreachable!("the metadata log is set once"));
}

/// Creates `partitions/` if needed and removes every partition directory in it that `state`
/// does not know, adding each to `removed` (which starts empty); then, if it removed any,
/// syncs `partitions/`.
pub(super) fn remove_unknown_partitions(
    backend: &dyn StorageBackend,
    state: &MetadataState,
    removed: &mut Vec<PathBuf>,
) -> Result<()> {
    create_dir_durable(backend, Path::new(PARTITIONS_DIR))?;
    let known: BTreeSet<String> = state
        .partitions()
        .map(|(_, p, _)| format!("{:020}", p.uid))
        .collect();
    for entry in backend
        .list(Path::new(PARTITIONS_DIR))
        .map_err(|e| StreamStoreError::io(IoOp::List, PARTITIONS_DIR, e))?
    {
        if entry.is_dir && !known.contains(&entry.name) {
            let dir = Path::new(PARTITIONS_DIR).join(&entry.name);
            backend
                .remove_dir_all(&dir)
                .map_err(|e| StreamStoreError::io(IoOp::Remove, &dir, e))?;
            removed.push(dir);
        }
    }
    if !removed.is_empty() {
        backend
            .sync_dir(Path::new(PARTITIONS_DIR))
            .map_err(|e| StreamStoreError::io(IoOp::SyncDir, PARTITIONS_DIR, e))?;
    }
    Ok(())
}

/// Opens every partition `state` knows into the registry (on up to the registry config's
/// `pool_threads` threads), adding each one's recovery to `reports`.
pub(super) fn open_known_partitions(
    registry: &Registry,
    state: &MetadataState,
    reports: &mut Vec<(PartitionAddr, RecoveryReport)>,
) -> Result<()> {
    let wanted: Vec<(PartitionAddr, u64, TopicConfig, u64, Vec<u8>)> = state
        .partitions()
        .map(|(addr, p, config)| {
            let options = state
                .stream(addr.stream_id)
                .map(|s| s.options.clone())
                .unwrap_or_default();
            (addr, p.uid, *config, p.purge_generation, options)
        })
        .collect();
    let opened = open_partitions(registry, &wanted, registry.config.pool_threads)?;
    let mut map = write_lock(&registry.partitions);
    for (addr, partition, report) in opened {
        map.insert(addr, partition);
        reports.push((addr, report));
    }
    Ok(())
}

/// Starts the applier thread, which applies committed metadata operations (and their
/// effects) in log order, and gives `meta` the sender of its job queue.
pub(super) fn start_applier(
    meta: &Arc<MetaShared>,
    registry: &Arc<Registry>,
    backend: &Arc<dyn StorageBackend>,
    config: &StreamStoreConfig,
    snapshot_next: u64,
) -> Result<JoinHandle<()>> {
    let (tx, rx) = mpsc::channel::<Job>();
    *lock(&meta.jobs) = Some(tx);
    let meta = Arc::clone(meta);
    let registry = Arc::clone(registry);
    let backend = Arc::clone(backend);
    let config = config.clone();
    std::thread::Builder::new()
        .name("eddy-storage-applier".into())
        .spawn(move || applier(&rx, &meta, &registry, &*backend, &config, snapshot_next))
        .map_err(|e| StreamStoreError::io(IoOp::Open, "applier thread", e))
}
