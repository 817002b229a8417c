//! The store: metadata plus every partition, behind one commit entry point.
//!
//! ```text
//! <root>/metadata/                 the metadata log (segments + indexes) and `snapshot`
//! <root>/partitions/<uid:020>/     one directory per partition (segments, indexes, `state`)
//! ```
//!
//! # Commit pipeline
//!
//! [`Store::commit`] takes an [`Operation`]: an ordered, serialisable value with every id,
//! offset and timestamp already assigned. It is the seam for replication: today the pipeline is
//! local (append to a log, group-committed fdatasync, apply, acknowledge); a consensus layer can
//! replicate the same operations first and then commit them on every replica.
//!
//! * A metadata operation is validated against the *pending* state (the durable state plus the
//!   operations queued behind it), appended to the metadata log and acknowledged once it is
//!   durable **and** applied: an applier thread applies it to the durable state and performs its
//!   effects (opening, deleting or purging partition logs) in log order. Readers
//!   ([`Store::read_metadata`]) only ever see durable, applied state.
//! * An append carries a batch already stamped; it goes to its partition's log.
//!
//! [`Store::append`] is the local shortcut for the common case: it assigns the base offset and
//! timestamp, stamps the batch and commits the resulting append in one step.
//!
//! # Metadata persistence
//!
//! Each metadata operation is one record of the metadata log. Every
//! [`StoreConfig::snapshot_every_ops`] operations the applier writes a snapshot of the whole
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
//! delete interrupted by a crash) are removed.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::thread::JoinHandle;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::cache::{Cache, DEFAULT_CACHE_BYTES};
use crate::completion::{completion, Completer, Completion};
use crate::error::{Corruption, IoOp, Result, StorageError};
use crate::file::{OpenMode, StorageBackend};
use crate::log::{
    CommitHook, Durability, Log, LogConfig, OpenOptions, RecoveryReport, SegmentSummary,
    VerifyOnOpen, DEFAULT_INDEX_INTERVAL, DEFAULT_MAX_GROUP_BYTES,
};
use crate::metadata::{
    decode_op, decode_state, encode_op, encode_state, ConsumerKey, Effect, MetadataOp,
    MetadataState, TopicConfig, MAX_SNAPSHOT_BYTES,
};
use crate::partition::{
    write_atomic, AppendTicket, Appended, Partition, PartitionAddr, PartitionConfig, PartitionOpen,
    PollStrategy, Polled, RetentionPolicy, StampableBatch,
};
use crate::pool::{CommitPool, CommitStatsSnapshot};

/// Directory of the metadata log.
pub const METADATA_DIR: &str = "metadata";
/// Directory holding one directory per partition.
pub const PARTITIONS_DIR: &str = "partitions";
/// Snapshot file name (inside [`METADATA_DIR`]).
pub const SNAPSHOT_FILE: &str = "snapshot";
/// Tag of metadata operation records.
pub const METADATA_TAG: u32 = 1;
const SNAPSHOT_MAGIC: [u8; 8] = *b"EDDYSNAP";
const SNAPSHOT_HEADER_LEN: usize = 40;
/// Replay reads the metadata log in chunks of about this many bytes.
const REPLAY_CHUNK_BYTES: u64 = 8 * 1024 * 1024;
/// The per-partition share of `max_topic_size` is floored at one segment plus one maximum
/// batch (a smaller share would delete every segment the moment it seals).
pub const MAX_BATCH_BYTES: u64 = crate::format::MAX_RECORD_PAYLOAD as u64;

/// Store-wide configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// Writer threads of the commit pool.
    pub pool_threads: usize,
    /// Byte budget of the shared cache (sealed-segment indexes and handles).
    pub cache_bytes: u64,
    /// Distance between sparse index entries.
    pub index_interval: u64,
    /// Recovery verification depth.
    pub verify_on_open: VerifyOnOpen,
    /// Verify payload checksums on every read.
    pub verify_on_read: bool,
    /// Cut interior corruption away instead of refusing to open.
    pub repair: bool,
    /// Upper bound of one group commit's bytes.
    pub max_group_bytes: u64,
    /// Segment size of the metadata log.
    pub metadata_segment_size: u64,
    /// Write a metadata snapshot every this many operations.
    pub snapshot_every_ops: u64,
    /// Retention never deletes a segment holding offsets above the lowest stored consumer
    /// offset of its partition (Iggy's behaviour; off by default because an abandoned consumer
    /// would pin the disk forever).
    pub retention_respects_consumer_offsets: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            pool_threads: 8,
            cache_bytes: DEFAULT_CACHE_BYTES,
            index_interval: DEFAULT_INDEX_INTERVAL,
            verify_on_open: VerifyOnOpen::Full,
            verify_on_read: true,
            repair: false,
            max_group_bytes: DEFAULT_MAX_GROUP_BYTES,
            metadata_segment_size: 4 * 1024 * 1024,
            snapshot_every_ops: 10_000,
            retention_respects_consumer_offsets: false,
        }
    }
}

impl StoreConfig {
    /// The log configuration of a partition of a topic with `topic` options.
    pub fn partition_config(&self, topic: &TopicConfig) -> PartitionConfig {
        PartitionConfig {
            log: LogConfig {
                segment_size: topic.segment_size,
                index_interval: self.index_interval,
                durability: if topic.enforce_fsync {
                    Durability::Fsync
                } else {
                    Durability::Background {
                        max_unsynced_records: u64::from(topic.messages_required_to_save.max(1)),
                        max_unsynced_bytes: topic.size_of_messages_required_to_save.max(1),
                    }
                },
                verify_on_open: self.verify_on_open,
                verify_on_read: self.verify_on_read,
                repair: self.repair,
                max_group_bytes: self.max_group_bytes,
                group_window: std::time::Duration::ZERO,
            },
        }
    }

    fn metadata_log_config(&self) -> LogConfig {
        LogConfig {
            segment_size: self.metadata_segment_size,
            index_interval: self.index_interval,
            durability: Durability::Fsync,
            verify_on_open: VerifyOnOpen::Full,
            verify_on_read: true,
            repair: self.repair,
            max_group_bytes: self.max_group_bytes,
            group_window: std::time::Duration::ZERO,
        }
    }
}

/// An ordered, serialisable state change: the unit the commit pipeline (and, later,
/// replication) works on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Operation {
    /// A metadata operation.
    Metadata(MetadataOp),
    /// Appends a batch stamped earlier with `base_offset` and `timestamp`.
    Append {
        /// The partition.
        addr: PartitionAddr,
        /// Its base offset (must be the partition's next offset).
        base_offset: u64,
        /// Its timestamp (must not be below the partition's last one).
        timestamp: u64,
        /// Messages in it.
        message_count: u32,
        /// The stamped batch.
        #[serde(with = "bytes_serde")]
        bytes: Bytes,
    },
    /// Deletes the `count` oldest sealed segments of a partition.
    DeleteSegments {
        /// The partition.
        addr: PartitionAddr,
        /// How many.
        count: u32,
    },
}

mod bytes_serde {
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        Vec::<u8>::deserialize(d).map(Bytes::from)
    }
}

/// What a committed operation did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Applied {
    /// A metadata operation is durable and applied; `seq` is its position in the metadata log.
    Metadata {
        /// Metadata log sequence number.
        seq: u64,
    },
    /// A batch is durable.
    Appended(Appended),
    /// Segments were deleted.
    SegmentsDeleted(Vec<SegmentSummary>),
}

/// The pending result of [`Store::commit`]: block on it with [`Commit::wait`] or `.await` it.
#[derive(Debug)]
#[must_use = "the commit is acknowledged through this handle"]
pub struct Commit {
    inner: CommitInner,
}

#[derive(Debug)]
enum CommitInner {
    Ready(Option<Result<Applied>>),
    Metadata(Completion<Applied>),
    Append(AppendTicket),
}

impl Commit {
    fn ready(result: Result<Applied>) -> Self {
        Commit {
            inner: CommitInner::Ready(Some(result)),
        }
    }

    /// Blocks until the operation is durable and applied.
    pub fn wait(self) -> Result<Applied> {
        match self.inner {
            CommitInner::Ready(result) => result.unwrap_or(Err(StorageError::Shutdown)),
            CommitInner::Metadata(c) => c.wait(),
            CommitInner::Append(t) => t.wait().map(Applied::Appended),
        }
    }
}

impl std::future::Future for Commit {
    type Output = Result<Applied>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::pin::Pin;
        use std::task::Poll;
        match &mut self.get_mut().inner {
            CommitInner::Ready(result) => {
                Poll::Ready(result.take().unwrap_or(Err(StorageError::Shutdown)))
            }
            CommitInner::Metadata(c) => Pin::new(c).poll(cx),
            CommitInner::Append(t) => Pin::new(t).poll(cx).map(|r| r.map(Applied::Appended)),
        }
    }
}

/// What opening a store found.
#[derive(Debug, Clone, Default)]
pub struct StoreRecovery {
    /// The metadata log's recovery.
    pub metadata: RecoveryReport,
    /// Metadata operations replayed after the snapshot.
    pub replayed_ops: u64,
    /// Each partition's recovery.
    pub partitions: Vec<(PartitionAddr, RecoveryReport)>,
    /// Partition directories removed because the metadata no longer knows them.
    pub removed_partitions: Vec<PathBuf>,
}

/// Per-partition outcome of a retention run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Deleted segments by partition.
    pub deleted: Vec<(PartitionAddr, Vec<SegmentSummary>)>,
}

impl RetentionReport {
    /// Total deleted segments.
    pub fn segments(&self) -> usize {
        self.deleted.iter().map(|(_, s)| s.len()).sum()
    }
}

// ------------------------------------------------------------------------------------------------
// Internals.

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Registry {
    backend: Arc<dyn StorageBackend>,
    pool: Arc<crate::pool::PoolShared>,
    cache: Arc<Cache>,
    config: StoreConfig,
    partitions: RwLock<BTreeMap<PartitionAddr, Arc<Partition>>>,
}

impl Registry {
    fn partition_dir(uid: u64) -> PathBuf {
        Path::new(PARTITIONS_DIR).join(format!("{uid:020}"))
    }

    fn open_partition(
        &self,
        addr: PartitionAddr,
        uid: u64,
        topic: &TopicConfig,
        generation: u64,
    ) -> Result<(Arc<Partition>, RecoveryReport)> {
        let (partition, report) = Partition::open_shared(
            Arc::clone(&self.backend),
            Arc::clone(&self.pool),
            Arc::clone(&self.cache),
            PartitionOpen {
                addr,
                uid,
                dir: Self::partition_dir(uid),
                config: self.config.partition_config(topic),
                generation,
            },
        )?;
        Ok((Arc::new(partition), report))
    }

    fn get(&self, addr: PartitionAddr) -> Option<Arc<Partition>> {
        self.partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&addr)
            .cloned()
    }

    fn perform(&self, effect: &Effect) -> Result<()> {
        match effect {
            Effect::CreatePartition { addr, uid, config } => {
                let (partition, _) = self.open_partition(*addr, *uid, config, 0)?;
                self.partitions
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(*addr, partition);
            }
            Effect::DeletePartition { addr, uid } => {
                let removed = self
                    .partitions
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(addr);
                if let Some(p) = removed {
                    // Best effort: the directory goes away next.
                    let _ = p.log().close();
                }
                let dir = Self::partition_dir(*uid);
                match self.backend.remove_dir_all(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StorageError::io(IoOp::Remove, dir, e)),
                }
                self.backend
                    .sync_dir(Path::new(PARTITIONS_DIR))
                    .map_err(|e| StorageError::io(IoOp::SyncDir, PARTITIONS_DIR, e))?;
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

struct InFlight {
    op: MetadataOp,
    done: Completer<Applied>,
}

struct Pending {
    state: MetadataState,
    /// The log refusal epoch `state` was built for; `None` when it must be rebuilt.
    epoch: Option<u64>,
}

struct MetaShared {
    log: OnceLock<Log>,
    pending: Mutex<Pending>,
    inflight: Mutex<BTreeMap<u64, InFlight>>,
    durable: RwLock<MetadataState>,
    /// Every operation below this sequence number is applied to `durable`.
    applied: Mutex<u64>,
    applied_cv: Condvar,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
}

struct Job {
    seq: u64,
    op: MetadataOp,
    done: Completer<Applied>,
}

impl fmt::Debug for MetaShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetaShared")
            .field("applied", &*lock(&self.applied))
            .finish_non_exhaustive()
    }
}

/// The metadata log's hook: durable operations go to the applier in log order; refused ones are
/// answered with the refusal.
#[derive(Debug)]
struct MetaHook {
    shared: Arc<MetaShared>,
}

impl CommitHook for MetaHook {
    fn before_ack(&self, end_seq: u64) -> io::Result<()> {
        let durable: Vec<(u64, InFlight)> = {
            let mut inflight = lock(&self.shared.inflight);
            let rest = inflight.split_off(&end_seq);
            std::mem::replace(&mut *inflight, rest)
                .into_iter()
                .collect()
        };
        let jobs = lock(&self.shared.jobs);
        for (seq, InFlight { op, done }) in durable {
            match jobs.as_ref() {
                Some(tx) => {
                    if let Err(mpsc::SendError(job)) = tx.send(Job { seq, op, done }) {
                        job.done.complete(Err(StorageError::Shutdown));
                    }
                }
                None => done.complete(Err(StorageError::Shutdown)),
            }
        }
        Ok(())
    }

    fn on_refused(&self, next_seq: u64, error: &dyn Fn() -> StorageError) {
        let refused = lock(&self.shared.inflight).split_off(&next_seq);
        for (_, InFlight { done, .. }) in refused {
            done.complete(Err(error()));
        }
    }
}

/// The store.
pub struct Store {
    backend: Arc<dyn StorageBackend>,
    config: StoreConfig,
    pool: CommitPool,
    registry: Arc<Registry>,
    meta: Arc<MetaShared>,
    applier: Option<JoinHandle<()>>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("config", &self.config)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

// ------------------------------------------------------------------------------------------------
// Snapshots.

fn encode_snapshot(next_seq: u64, state: &MetadataState) -> Result<Vec<u8>> {
    let payload = encode_state(state).map_err(|source| StorageError::Encoding {
        action: "encode",
        path: Path::new(METADATA_DIR).join(SNAPSHOT_FILE),
        source,
    })?;
    let mut out = Vec::with_capacity(SNAPSHOT_HEADER_LEN + payload.len());
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.extend_from_slice(&crate::format::FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&next_seq.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    let header_crc = crc32c::crc32c(&out[0..36]);
    out.extend_from_slice(&header_crc.to_le_bytes());
    debug_assert_eq!(out.len(), SNAPSHOT_HEADER_LEN);
    out.extend_from_slice(&payload);
    Ok(out)
}

fn read_snapshot(backend: &dyn StorageBackend) -> Result<Option<(u64, MetadataState)>> {
    let path = Path::new(METADATA_DIR).join(SNAPSHOT_FILE);
    let file = match backend.open(&path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::io(IoOp::Open, path, e)),
    };
    let len = file
        .len()
        .map_err(|e| StorageError::io(IoOp::Len, &path, e))?;
    // An unreadable snapshot is not a fresh store: refuse rather than start empty.
    if len < SNAPSHOT_HEADER_LEN as u64 {
        return Err(StorageError::corrupt(path, 0, Corruption::Truncated));
    }
    let mut header = [0u8; SNAPSHOT_HEADER_LEN];
    file.read_at(0, &mut header)
        .map_err(|e| StorageError::io(IoOp::Read, &path, e))?;
    let u32_at = |at: usize| {
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let u64_at = |at: usize| {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&header[at..at + 8]);
        u64::from_le_bytes(raw)
    };
    if header[0..8] != SNAPSHOT_MAGIC || crc32c::crc32c(&header[0..36]) != u32_at(36) {
        return Err(StorageError::corrupt(path, 0, Corruption::FileChecksum));
    }
    if u32_at(8) != crate::format::FORMAT_VERSION {
        return Err(StorageError::corrupt(
            path,
            8,
            Corruption::UnknownVersion(u32_at(8)),
        ));
    }
    let next_seq = u64_at(16);
    let payload_len = u64_at(24);
    if payload_len > MAX_SNAPSHOT_BYTES as u64 {
        return Err(StorageError::TooLarge {
            what: "metadata snapshot",
            size: payload_len,
            limit: MAX_SNAPSHOT_BYTES as u64,
            path,
        });
    }
    if len != SNAPSHOT_HEADER_LEN as u64 + payload_len {
        return Err(StorageError::corrupt(path, 0, Corruption::Truncated));
    }
    let mut payload = vec![0u8; usize::try_from(payload_len).unwrap_or(usize::MAX)];
    file.read_at(SNAPSHOT_HEADER_LEN as u64, &mut payload)
        .map_err(|e| StorageError::io(IoOp::Read, &path, e))?;
    if crc32c::crc32c(&payload) != u32_at(32) {
        return Err(StorageError::corrupt(
            path,
            SNAPSHOT_HEADER_LEN as u64,
            Corruption::FileChecksum,
        ));
    }
    let state = decode_state(&payload).map_err(|source| StorageError::Encoding {
        action: "decode",
        path: path.clone(),
        source,
    })?;
    Ok(Some((next_seq, state)))
}

// ------------------------------------------------------------------------------------------------
// Opening.

impl Store {
    /// Opens (or creates) a store on `backend` and recovers it.
    pub fn open(
        backend: Arc<dyn StorageBackend>,
        config: StoreConfig,
    ) -> Result<(Store, StoreRecovery)> {
        let pool = CommitPool::new(config.pool_threads)
            .map_err(|e| StorageError::io(IoOp::Open, "commit pool", e))?;
        let cache = Arc::new(Cache::new(config.cache_bytes));
        let mut recovery = StoreRecovery::default();

        // Metadata: snapshot, then log replay.
        backend
            .create_dir_all(Path::new(METADATA_DIR))
            .map_err(|e| StorageError::io(IoOp::CreateDir, METADATA_DIR, e))?;
        let (snapshot_next, mut state) =
            read_snapshot(&*backend)?.unwrap_or((0, MetadataState::default()));
        let meta = Arc::new(MetaShared {
            log: OnceLock::new(),
            pending: Mutex::new(Pending {
                state: MetadataState::default(),
                epoch: None,
            }),
            inflight: Mutex::new(BTreeMap::new()),
            durable: RwLock::new(MetadataState::default()),
            applied: Mutex::new(0),
            applied_cv: Condvar::new(),
            jobs: Mutex::new(None),
        });
        let (log, report) = Log::open_shared(
            Arc::clone(&backend),
            PathBuf::from(METADATA_DIR),
            config.metadata_log_config(),
            pool.shared(),
            Arc::clone(&cache),
            OpenOptions {
                initial_seq: snapshot_next,
                min_next_seq: snapshot_next,
                hook: Some(Arc::new(MetaHook {
                    shared: Arc::clone(&meta),
                })),
            },
        )?;
        recovery.metadata = report;
        let bounds = log.bounds();
        if bounds.first > snapshot_next {
            // Operations between the snapshot and the log's first record are missing.
            return Err(StorageError::corrupt(
                Path::new(METADATA_DIR).join(crate::format::segment_file_name(bounds.first)),
                0,
                Corruption::NonContiguous {
                    expected: snapshot_next,
                    found: bounds.first,
                },
            ));
        }
        let mut next = snapshot_next;
        while next < bounds.next {
            let records = log.read(next, u64::MAX, REPLAY_CHUNK_BYTES)?;
            let Some(last) = records.last() else {
                break;
            };
            let chunk_end = last.meta.end_seq();
            for record in records {
                if record.meta.seq < next {
                    continue;
                }
                let op = decode_op(&record.payload).map_err(|source| StorageError::Encoding {
                    action: "decode",
                    path: PathBuf::from(METADATA_DIR),
                    source,
                })?;
                // An operation that was accepted once is accepted again (apply is
                // deterministic); a refusal here means the log and snapshot disagree.
                state.apply(&op).map_err(StorageError::Metadata)?;
                recovery.replayed_ops += 1;
            }
            next = chunk_end;
        }
        let applied_to = bounds.next.max(snapshot_next);
        *lock(&meta.applied) = applied_to;
        meta.durable
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .clone_from(&state);
        {
            let mut pending = lock(&meta.pending);
            pending.state = state.clone();
            pending.epoch = Some(0);
        }
        meta.log
            .set(log)
            .unwrap_or_else(|_| unreachable!("the metadata log is set once"));

        // Partitions: open what the metadata knows, remove what it does not.
        let registry = Arc::new(Registry {
            backend: Arc::clone(&backend),
            pool: pool.shared(),
            cache,
            config,
            partitions: RwLock::new(BTreeMap::new()),
        });
        backend
            .create_dir_all(Path::new(PARTITIONS_DIR))
            .map_err(|e| StorageError::io(IoOp::CreateDir, PARTITIONS_DIR, e))?;
        let known: std::collections::BTreeSet<String> = state
            .partitions()
            .map(|(_, p, _)| format!("{:020}", p.uid))
            .collect();
        for entry in backend
            .list(Path::new(PARTITIONS_DIR))
            .map_err(|e| StorageError::io(IoOp::List, PARTITIONS_DIR, e))?
        {
            if entry.is_dir && !known.contains(&entry.name) {
                let dir = Path::new(PARTITIONS_DIR).join(&entry.name);
                backend
                    .remove_dir_all(&dir)
                    .map_err(|e| StorageError::io(IoOp::Remove, &dir, e))?;
                recovery.removed_partitions.push(dir);
            }
        }
        if !recovery.removed_partitions.is_empty() {
            backend
                .sync_dir(Path::new(PARTITIONS_DIR))
                .map_err(|e| StorageError::io(IoOp::SyncDir, PARTITIONS_DIR, e))?;
        }
        let wanted: Vec<(PartitionAddr, u64, TopicConfig, u64)> = state
            .partitions()
            .map(|(addr, p, config)| (addr, p.uid, *config, p.purge_generation))
            .collect();
        let opened = open_partitions(&registry, &wanted, config.pool_threads)?;
        {
            let mut map = registry
                .partitions
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            for (addr, partition, report) in opened {
                map.insert(addr, partition);
                recovery.partitions.push((addr, report));
            }
        }

        // The applier thread.
        let (tx, rx) = mpsc::channel::<Job>();
        *lock(&meta.jobs) = Some(tx);
        let applier = {
            let meta = Arc::clone(&meta);
            let registry = Arc::clone(&registry);
            let backend = Arc::clone(&backend);
            std::thread::Builder::new()
                .name("eddy-storage-applier".into())
                .spawn(move || applier(&rx, &meta, &registry, &*backend, config, snapshot_next))
                .map_err(|e| StorageError::io(IoOp::Open, "applier thread", e))?
        };
        Ok((
            Store {
                backend,
                config,
                pool,
                registry,
                meta,
                applier: Some(applier),
            },
            recovery,
        ))
    }
}

type Opened = (PartitionAddr, Arc<Partition>, RecoveryReport);

/// Opens partitions in parallel (recovery time is dominated by verification reads).
fn open_partitions(
    registry: &Registry,
    wanted: &[(PartitionAddr, u64, TopicConfig, u64)],
    threads: usize,
) -> Result<Vec<Opened>> {
    let threads = threads.clamp(1, 16);
    let next = AtomicU64::new(0);
    let results: Mutex<Vec<Result<Opened>>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.min(wanted.len().max(1)) {
            scope.spawn(|| loop {
                let i = usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(usize::MAX);
                let Some((addr, uid, config, generation)) = wanted.get(i) else {
                    break;
                };
                let result = registry
                    .open_partition(*addr, *uid, config, *generation)
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

fn applier(
    rx: &mpsc::Receiver<Job>,
    meta: &MetaShared,
    registry: &Registry,
    backend: &dyn StorageBackend,
    config: StoreConfig,
    mut snapshot_next: u64,
) {
    while let Ok(Job { seq, op, done }) = rx.recv() {
        let outcome = {
            let mut durable = meta.durable.write().unwrap_or_else(PoisonError::into_inner);
            match durable.apply(&op) {
                // Effects run before readers see the new state, so a topic is never visible
                // without its partitions.
                Ok(effects) => effects.iter().try_for_each(|e| registry.perform(e)),
                Err(e) => {
                    // The pending state accepted it: the two disagree, which is a bug.
                    tracing::error!(seq, error = %e, "durable apply refused an accepted operation");
                    Err(StorageError::Metadata(e))
                }
            }
        };
        if let Err(e) = &outcome {
            tracing::error!(seq, error = %e, "metadata effect failed; it is retried at the next open");
        }
        {
            let mut applied = lock(&meta.applied);
            *applied = seq + 1;
        }
        meta.applied_cv.notify_all();
        if (seq + 1).saturating_sub(snapshot_next) >= config.snapshot_every_ops {
            match write_snapshot(meta, backend, seq + 1) {
                Ok(()) => snapshot_next = seq + 1,
                Err(e) => {
                    tracing::warn!(error = %e, "metadata snapshot failed; the log keeps everything");
                }
            }
        }
        done.complete(outcome.map(|()| Applied::Metadata { seq }));
    }
}

fn write_snapshot(meta: &MetaShared, backend: &dyn StorageBackend, next_seq: u64) -> Result<()> {
    let bytes = {
        let durable = meta.durable.read().unwrap_or_else(PoisonError::into_inner);
        encode_snapshot(next_seq, &durable)?
    };
    write_atomic(backend, Path::new(METADATA_DIR), SNAPSHOT_FILE, &bytes).map_err(|e| {
        StorageError::io(IoOp::Append, Path::new(METADATA_DIR).join(SNAPSHOT_FILE), e)
    })?;
    if let Some(log) = meta.log.get() {
        log.delete_sealed_while(|seg| seg.end <= next_seq)?;
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Public API.

impl Store {
    fn meta_log(&self) -> &Log {
        self.meta.log.get().expect("set during open")
    }

    /// The single commit entry point: makes `op` durable and applies it.
    pub fn commit(&self, op: Operation) -> Commit {
        match op {
            Operation::Metadata(op) => match self.commit_metadata(&op) {
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

    /// Validates `op` against the pending state and queues it on the metadata log. A
    /// validation failure returns at once and writes nothing.
    fn commit_metadata(&self, op: &MetadataOp) -> Result<Completion<Applied>> {
        let log = self.meta_log();
        let payload = Bytes::from(encode_op(op).map_err(|source| StorageError::Encoding {
            action: "encode",
            path: PathBuf::from(METADATA_DIR),
            source,
        })?);
        loop {
            let mut pending = lock(&self.meta.pending);
            let epoch = pending.epoch;
            let current_epoch = log.current_epoch();
            if epoch != Some(current_epoch) {
                // Queued operations were refused (or a previous attempt failed): rebuild the
                // pending state from the durable one once everything acknowledged is applied.
                let target = log.next_seq_to_assign();
                let mut applied = lock(&self.meta.applied);
                while *applied < target {
                    applied = self
                        .meta
                        .applied_cv
                        .wait(applied)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                drop(applied);
                pending.state = self
                    .meta
                    .durable
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                pending.epoch = Some(current_epoch);
            }
            // Apply leaves the state untouched on error.
            pending.state.apply(op)?;
            let (done, completion) = completion();
            let mut done = Some(done);
            let mut stale = false;
            let inflight = &self.meta.inflight;
            let op_for_log = op.clone();
            let queued = log.append_with(1, METADATA_TAG, 0, |assigned| {
                if assigned.epoch != current_epoch {
                    stale = true;
                    return Err(StorageError::Shutdown);
                }
                let done = done.take().expect("called once");
                lock(inflight).insert(
                    assigned.seq,
                    InFlight {
                        op: op_for_log,
                        done,
                    },
                );
                Ok(payload.clone())
            });
            match queued {
                Ok(_log_ack) => return Ok(completion),
                Err(_) if stale => {
                    pending.epoch = None;
                }
                Err(e) => {
                    pending.epoch = None;
                    return Err(e);
                }
            }
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
            .ok_or(StorageError::PartitionNotFound {
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

    /// Reads the durable, applied metadata state.
    pub fn read_metadata<R>(&self, f: impl FnOnce(&MetadataState) -> R) -> R {
        f(&self
            .meta
            .durable
            .read()
            .unwrap_or_else(PoisonError::into_inner))
    }

    /// Applies every topic's retention (`message_expiry`, `max_topic_size` split equally over
    /// its partitions and floored at one segment plus one maximum batch) at time `now_us`.
    /// Never blocks appends.
    pub fn run_retention(&self, now_us: u64) -> Result<RetentionReport> {
        let plans: Vec<(PartitionAddr, RetentionPolicy)> = self.read_metadata(|state| {
            let mut plans = Vec::new();
            for stream in state.streams.values() {
                for topic in stream.topics.values() {
                    let count = topic.partitions.len().max(1) as u64;
                    let floor = topic.config.segment_size.saturating_add(MAX_BATCH_BYTES);
                    let max_bytes = topic
                        .config
                        .max_topic_size
                        .map(|max| (max / count).max(floor));
                    for p in topic.partitions.values() {
                        let keep_above = if self.config.retention_respects_consumer_offsets {
                            p.offsets.values().min().copied()
                        } else {
                            None
                        };
                        plans.push((
                            PartitionAddr {
                                stream_id: stream.id,
                                topic_id: topic.id,
                                partition_id: p.id,
                            },
                            RetentionPolicy {
                                message_expiry: topic.config.message_expiry,
                                max_bytes,
                                keep_above,
                            },
                        ));
                    }
                }
            }
            plans
        });
        let mut report = RetentionReport::default();
        for (addr, policy) in plans {
            let Some(partition) = self.registry.get(addr) else {
                continue;
            };
            let deleted = partition.apply_retention(&policy, now_us)?;
            if !deleted.is_empty() {
                report.deleted.push((addr, deleted));
            }
        }
        Ok(report)
    }

    /// Syncs every partition whose topic acknowledges before fdatasync (the background flush;
    /// call it periodically).
    pub fn flush_unsynced(&self) -> Result<()> {
        let partitions: Vec<Arc<Partition>> = self
            .registry
            .partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
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
        self.pool.stats()
    }

    /// The store's configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The backend the store runs on.
    pub fn backend(&self) -> &Arc<dyn StorageBackend> {
        &self.backend
    }

    /// Flushes everything and stops the store (dropping it does the same, ignoring errors).
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        let mut first_error = None;
        if let Some(log) = self.meta.log.get() {
            if let Err(e) = log.close() {
                first_error.get_or_insert(e);
            }
        }
        lock(&self.meta.jobs).take();
        if let Some(handle) = self.applier.take() {
            let _ = handle.join();
        }
        let partitions: Vec<Arc<Partition>> = self
            .registry
            .partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
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

impl Drop for Store {
    fn drop(&mut self) {
        if self.applier.is_some() {
            if let Err(e) = self.shutdown() {
                tracing::warn!(error = %e, "store shutdown error");
            }
        }
    }
}

#[cfg(test)]
mod tests;
