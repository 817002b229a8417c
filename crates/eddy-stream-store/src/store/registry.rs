//! The open partitions by address, and the partition effects of applied metadata operations
//! (create, delete, purge), performed in log order by the applier.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use eddy_log::{
    lock, read_lock, write_lock, Cache, CommitPool, CommitStats, IoOp, RecoveryReport,
    StorageBackend,
};

use crate::error::{Result, StreamStoreError};
use crate::metadata::{Effect, MetadataState, TopicConfig};
use crate::partition::{Partition, PartitionAddr, PartitionOpen};

use super::config::StreamStoreConfig;

/// Directory holding one directory per partition.
pub const PARTITIONS_DIR: &str = "partitions";

pub(super) struct Registry {
    pub(super) backend: Arc<dyn StorageBackend>,
    pub(super) pool: CommitPool,
    pub(super) cache: Arc<Cache>,
    pub(super) stats: Arc<CommitStats>,
    pub(super) config: StreamStoreConfig,
    pub(super) partitions: RwLock<BTreeMap<PartitionAddr, Arc<Partition>>>,
}

impl Registry {
    pub(super) fn partition_dir(uid: u64) -> PathBuf {
        Path::new(PARTITIONS_DIR).join(format!("{uid:020}"))
    }

    pub(super) fn open_partition(
        &self,
        addr: PartitionAddr,
        uid: u64,
        topic: &TopicConfig,
        generation: u64,
        stream_options: &[u8],
    ) -> Result<(Arc<Partition>, RecoveryReport)> {
        let dir = Self::partition_dir(uid);
        // A stream key that cannot be opened (another server key) leaves the partition shut,
        // never sealed with a different key.
        let cipher = self
            .config
            .partition_cipher(addr.stream_id, stream_options)
            .map_err(|_| {
                StreamStoreError::corrupt(dir.clone(), 0, eddy_log::Corruption::Undecryptable)
            })?;
        let (partition, report) = Partition::open(
            Arc::clone(&self.backend),
            &self.pool,
            Arc::clone(&self.cache),
            PartitionOpen {
                addr,
                uid,
                dir,
                config: self.config.partition_config(topic),
                generation,
                stats: Some(Arc::clone(&self.stats)),
                cipher,
            },
        )?;
        Ok((Arc::new(partition), report))
    }

    pub(super) fn get(&self, addr: PartitionAddr) -> Option<Arc<Partition>> {
        read_lock(&self.partitions).get(&addr).cloned()
    }

    /// Performs `effect` of an operation applied to `state`.
    pub(super) fn perform(&self, effect: &Effect, state: &MetadataState) -> Result<()> {
        match effect {
            Effect::CreatePartition { addr, uid, config } => {
                let options = state
                    .stream(addr.stream_id)
                    .map_or(&[][..], |s| s.options.as_slice());
                let (partition, _) = self.open_partition(*addr, *uid, config, 0, options)?;
                write_lock(&self.partitions).insert(*addr, partition);
            }
            Effect::DeletePartition { addr, uid } => {
                let removed = write_lock(&self.partitions).remove(addr);
                if let Some(p) = removed {
                    // Best effort: the directory goes away next.
                    let _ = p.log().close();
                }
                let dir = Self::partition_dir(*uid);
                match self.backend.remove_dir_all(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StreamStoreError::io(IoOp::Remove, dir, e)),
                }
                self.backend
                    .sync_dir(Path::new(PARTITIONS_DIR))
                    .map_err(|e| StreamStoreError::io(IoOp::SyncDir, PARTITIONS_DIR, e))?;
            }
            Effect::PurgePartition {
                addr, generation, ..
            } => {
                if let Some(p) = self.get(*addr) {
                    p.purge(*generation)?;
                }
            }
        }
        Ok(())
    }
}

pub(super) type Opened = (PartitionAddr, Arc<Partition>, RecoveryReport);

/// Opens partitions in parallel (recovery time is dominated by verification reads).
pub(super) fn open_partitions(
    registry: &Registry,
    wanted: &[(PartitionAddr, u64, TopicConfig, u64, Vec<u8>)],
    threads: usize,
) -> Result<Vec<Opened>> {
    let threads = threads.clamp(1, 16);
    let next = AtomicU64::new(0);
    let results: Mutex<Vec<Result<Opened>>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.min(wanted.len().max(1)) {
            scope.spawn(|| loop {
                let i = usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(usize::MAX);
                let Some((addr, uid, config, generation, options)) = wanted.get(i) else {
                    break;
                };
                let result = registry
                    .open_partition(*addr, *uid, config, *generation, options)
                    .map(|(p, r)| (*addr, p, r));
                lock(&results).push(result);
            });
        }
    });
    let mut out = Vec::with_capacity(wanted.len());
    for r in results.into_inner().unwrap_or_else(PoisonError::into_inner) {
        out.push(r?);
    }
    out.sort_by_key(|(addr, _, _)| *addr);
    Ok(out)
}
