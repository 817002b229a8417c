//! Partitions: a [`Log`] whose records are message batches, exactly as admitted and stamped.
//!
//! The storage layer does not parse batches. A batch is opaque bytes plus a message count; the
//! partition assigns its base offset (the log's next sequence number) and its base timestamp
//! (`max(now, previous)`, so timestamps never go backwards), then asks the batch to stamp itself
//! through [`StampableBatch::stamp`] (the server implements it with the codec's batch type:
//! write `partition_id`, `base_offset`, `base_timestamp`, recompute the batch checksum). The
//! stamped bytes are stored verbatim and served verbatim by polls; slicing a partially requested
//! batch is the caller's job (it has the codec).
//!
//! Offsets are the log's sequence numbers: a batch of `n` messages at base offset `b` covers
//! `b..b + n`. Offsets are never issued twice within one purge generation:
//!
//! * with [`Durability::Fsync`] every acknowledged batch is on disk, so the log proves the
//!   offsets it handed out;
//! * with [`Durability::Background`] a batch can be acknowledged before it is synced, so the
//!   partition persists an *offset frontier* ahead of the acknowledged offsets (in reserved
//!   blocks, so that costs one small synced write per block), and on open the next offset is the
//!   maximum of the frontier and what the log proves (a crash can leave a gap, never a reuse).
//!
//! Purge empties a partition and restarts offsets at 0 (stream protocol 7.4); its crash safety
//! comes from the purge generation recorded in the metadata before the purge and in the
//! partition state file after it: a partition whose generation lags is purged again at open.
//!
//! Files in a partition directory: the log's segments and indexes, and `state` (48 bytes):
//!
//! ```text
//! 0  8  magic "EDDYPST\0"      24  8  purge generation u64
//! 8  4  version u32 (1)        32  8  offset frontier u64 (next offset is at least this)
//! 12 4  reserved (0)           40  4  CRC-32C of bytes 0..40
//! 16 8  partition uid u64      44  4  reserved (0)
//! ```
//!
//! It is replaced atomically (temp file, fdatasync, rename, directory fsync).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use crate::cache::Cache;
use crate::completion::Completion;
use crate::error::{Corruption, IoOp, Result, StorageError};
use crate::file::{OpenMode, StorageBackend};
use crate::format::FORMAT_VERSION;
use crate::log::{
    Assigned, CommitHook, Durability, Log, LogConfig, OpenOptions, RecordMeta, RecoveryReport,
    SegmentSummary, StoredRecord,
};
use crate::pool::PoolShared;

/// Name of the partition state file.
pub const STATE_FILE: &str = "state";
const STATE_MAGIC: [u8; 8] = *b"EDDYPST\0";
const STATE_LEN: usize = 48;
/// Offsets reserved ahead of the acknowledged ones by one frontier write, at least.
pub const MIN_FRONTIER_RESERVE: u64 = 4096;

/// Where a partition sits in the stream/topic/partition tree.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct PartitionAddr {
    /// Stream id.
    pub stream_id: u32,
    /// Topic id within the stream.
    pub topic_id: u32,
    /// Partition id within the topic.
    pub partition_id: u32,
}

/// The storage-assigned fields a batch is stamped with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The partition id.
    pub partition_id: u32,
    /// Offset of the batch's first message.
    pub base_offset: u64,
    /// Append time (µs), shared by every message of the batch.
    pub base_timestamp: u64,
}

/// A batch the partition can store: it knows its message count and can stamp itself.
///
/// The server implements this for the codec's batch type. [`StampWith`] adapts a closure.
pub trait StampableBatch {
    /// Number of messages in the batch (at least 1).
    fn message_count(&self) -> u32;
    /// Writes the stamp into the batch and returns the bytes to store. Called exactly once,
    /// under the partition's admission lock: keep it cheap and infallible.
    fn stamp(self, stamp: &Stamp) -> Bytes;
}

/// A [`StampableBatch`] made of a message count and a stamping closure.
#[derive(Debug, Clone, Copy)]
pub struct StampWith<F> {
    /// Number of messages.
    pub count: u32,
    /// Produces the stored bytes.
    pub stamp: F,
}

impl<F: FnOnce(&Stamp) -> Bytes> StampableBatch for StampWith<F> {
    fn message_count(&self) -> u32 {
        self.count
    }

    fn stamp(self, stamp: &Stamp) -> Bytes {
        (self.stamp)(stamp)
    }
}

/// A stored batch: its storage-owned metadata and its bytes exactly as stamped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBatch {
    /// Offset of its first message.
    pub base_offset: u64,
    /// Number of messages.
    pub message_count: u32,
    /// Its append timestamp (first and newest timestamp of the batch: every message of a batch
    /// reports the batch's base timestamp).
    pub timestamp: u64,
    /// The stamped batch bytes.
    pub bytes: Bytes,
}

impl StoredBatch {
    /// Offset after its last message.
    pub fn end_offset(&self) -> u64 {
        self.base_offset + u64::from(self.message_count)
    }

    fn from_record(record: StoredRecord) -> Self {
        StoredBatch {
            base_offset: record.meta.seq,
            message_count: record.meta.count,
            timestamp: record.meta.timestamp,
            bytes: record.payload,
        }
    }
}

/// The acknowledgement of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Offset of the batch's first message.
    pub base_offset: u64,
    /// Number of messages.
    pub message_count: u32,
    /// The stamped timestamp.
    pub timestamp: u64,
    /// Stored bytes.
    pub len: u32,
}

impl Appended {
    /// Offset of the batch's last message.
    pub fn last_offset(&self) -> u64 {
        self.base_offset + u64::from(self.message_count) - 1
    }

    fn from_meta(meta: RecordMeta) -> Self {
        Appended {
            base_offset: meta.seq,
            message_count: meta.count,
            timestamp: meta.timestamp,
            len: meta.len,
        }
    }
}

/// A pending durable append: wait or `.await` it for the [`Appended`] acknowledgement.
#[derive(Debug)]
#[must_use = "the append is acknowledged through this handle"]
pub struct AppendTicket {
    inner: Completion<RecordMeta>,
    /// The assigned base offset (known at once; durable only when the ticket resolves).
    pub base_offset: u64,
}

impl AppendTicket {
    /// Blocks until the batch is durable.
    pub fn wait(self) -> Result<Appended> {
        self.inner.wait().map(Appended::from_meta)
    }
}

impl std::future::Future for AppendTicket {
    type Output = Result<Appended>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.get_mut();
        std::pin::Pin::new(&mut this.inner)
            .poll(cx)
            .map(|r| r.map(Appended::from_meta))
    }
}

/// Where a poll starts (stream protocol 7.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PollStrategy {
    /// From this offset.
    Offset(u64),
    /// From the first message whose batch timestamp is at or after this (µs).
    Timestamp(u64),
    /// From the earliest retained message.
    First,
    /// The last `count` messages.
    Last,
    /// From the consumer's stored offset + 1 (0 when it has none).
    Next,
}

/// The result of a poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Polled {
    /// The polled partition.
    pub partition_id: u32,
    /// Offset of the newest message in the partition (0 when it is empty).
    pub current_offset: u64,
    /// First offset to serve (meaningful when `batches` is not empty).
    pub start_offset: u64,
    /// Offset after the last one to serve: serve offsets in `start_offset..end_offset`.
    pub end_offset: u64,
    /// Stored batches covering the range; the first and last may extend outside it and must be
    /// sliced by the caller.
    pub batches: Vec<StoredBatch>,
}

impl Polled {
    /// Number of messages to serve (offsets in range that exist; retention can leave gaps only
    /// between segments).
    pub fn message_count(&self) -> u64 {
        self.batches
            .iter()
            .map(|b| {
                let lo = b.base_offset.max(self.start_offset);
                let hi = b.end_offset().min(self.end_offset);
                hi.saturating_sub(lo)
            })
            .sum()
    }

    /// Offset of the last message to serve, if any.
    pub fn last_offset(&self) -> Option<u64> {
        let last = self.batches.last()?;
        Some(last.end_offset().min(self.end_offset) - 1)
    }

    fn empty(partition_id: u32, current_offset: u64) -> Self {
        Polled {
            partition_id,
            current_offset,
            start_offset: 0,
            end_offset: 0,
            batches: Vec::new(),
        }
    }
}

/// Counters of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionStats {
    /// First retained offset.
    pub first_offset: u64,
    /// Next offset to be assigned (as readers see it).
    pub next_offset: u64,
    /// Offset of the newest message (0 when empty).
    pub current_offset: u64,
    /// Messages stored (retention gaps excluded).
    pub messages: u64,
    /// Bytes on disk.
    pub size_bytes: u64,
    /// Segments.
    pub segments: u32,
}

/// Retention rules for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionPolicy {
    /// Delete sealed segments whose newest timestamp + this ≤ now (µs). `None`: never.
    pub message_expiry: Option<u64>,
    /// Delete the oldest sealed segments while the sealed bytes exceed this. `None`: unlimited.
    pub max_bytes: Option<u64>,
    /// Never delete a segment holding offsets above this (the lowest committed consumer offset,
    /// if the server pins retention to consumers). `None`: no pin.
    pub keep_above: Option<u64>,
}

/// Storage configuration of a partition (from the topic's options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionConfig {
    /// The log configuration.
    pub log: LogConfig,
}

// ------------------------------------------------------------------------------------------------
// The state file.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StateRecord {
    uid: u64,
    generation: u64,
    frontier: u64,
}

fn encode_state(s: &StateRecord) -> [u8; STATE_LEN] {
    let mut out = [0u8; STATE_LEN];
    out[0..8].copy_from_slice(&STATE_MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[16..24].copy_from_slice(&s.uid.to_le_bytes());
    out[24..32].copy_from_slice(&s.generation.to_le_bytes());
    out[32..40].copy_from_slice(&s.frontier.to_le_bytes());
    let crc = crc32c::crc32c(&out[0..40]);
    out[40..44].copy_from_slice(&crc.to_le_bytes());
    out
}

fn decode_state(bytes: &[u8]) -> std::result::Result<StateRecord, Corruption> {
    if bytes.len() != STATE_LEN {
        return Err(Corruption::Truncated);
    }
    let u64_at = |at: usize| {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(raw)
    };
    let u32_at = |at: usize| {
        let mut raw = [0u8; 4];
        raw.copy_from_slice(&bytes[at..at + 4]);
        u32::from_le_bytes(raw)
    };
    if bytes[0..8] != STATE_MAGIC || crc32c::crc32c(&bytes[0..40]) != u32_at(40) {
        return Err(Corruption::FileChecksum);
    }
    if u32_at(8) != FORMAT_VERSION {
        return Err(Corruption::UnknownVersion(u32_at(8)));
    }
    Ok(StateRecord {
        uid: u64_at(16),
        generation: u64_at(24),
        frontier: u64_at(32),
    })
}

/// Writes a small file atomically: temp file, fdatasync, rename, directory fsync.
pub(crate) fn write_atomic(
    backend: &dyn StorageBackend,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    match backend.remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let file = backend.open(&tmp, OpenMode::CreateNew)?;
    file.append(&[bytes])?;
    file.sync()?;
    backend.rename(&tmp, &path)?;
    backend.sync_dir(dir)
}

/// The partition's state file and the frontier gate the log calls before acknowledging.
#[derive(Debug)]
struct StateFile {
    backend: Arc<dyn StorageBackend>,
    dir: PathBuf,
    uid: u64,
    record: Mutex<StateRecord>,
    /// Frontier value on disk (mirrors `record.frontier`, readable without the lock).
    persisted: AtomicU64,
    reserve: u64,
}

impl StateFile {
    fn lock(&self) -> MutexGuard<'_, StateRecord> {
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self, record: StateRecord) -> io::Result<()> {
        let mut current = self.lock();
        write_atomic(
            &*self.backend,
            &self.dir,
            STATE_FILE,
            &encode_state(&record),
        )?;
        *current = record;
        self.persisted.store(record.frontier, Ordering::Release);
        Ok(())
    }
}

impl CommitHook for StateFile {
    fn before_ack(&self, end_seq: u64) -> io::Result<()> {
        if end_seq <= self.persisted.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut record = *self.lock();
        record.frontier = end_seq.saturating_add(self.reserve);
        self.write(record)
    }
}

// ------------------------------------------------------------------------------------------------
// The partition.

/// A partition: message batches on a [`Log`].
pub struct Partition {
    addr: PartitionAddr,
    log: Log,
    state: Arc<StateFile>,
    /// Serialises appends with purge (a purge must finish, state file included, before any
    /// append after it is acknowledged).
    admission: Mutex<()>,
}

impl fmt::Debug for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Partition")
            .field("addr", &self.addr)
            .field("uid", &self.state.uid)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

/// Everything needed to open a partition.
#[derive(Debug, Clone)]
pub struct PartitionOpen {
    /// Where it sits.
    pub addr: PartitionAddr,
    /// Its unique, never reused id (names its directory).
    pub uid: u64,
    /// Its directory, relative to the backend root.
    pub dir: PathBuf,
    /// Storage configuration.
    pub config: PartitionConfig,
    /// The purge generation the metadata records: a lower one on disk means an unfinished
    /// purge, which is redone.
    pub generation: u64,
}

impl Partition {
    /// Opens (creating if needed) and recovers a partition.
    pub fn open(
        backend: Arc<dyn StorageBackend>,
        pool: &crate::CommitPool,
        cache: Arc<Cache>,
        open: PartitionOpen,
    ) -> Result<(Partition, RecoveryReport)> {
        Self::open_shared(backend, pool.shared(), cache, open)
    }

    pub(crate) fn open_shared(
        backend: Arc<dyn StorageBackend>,
        pool: Arc<PoolShared>,
        cache: Arc<Cache>,
        open: PartitionOpen,
    ) -> Result<(Partition, RecoveryReport)> {
        let PartitionOpen {
            addr,
            uid,
            dir,
            config,
            generation,
        } = open;
        backend
            .create_dir_all(&dir)
            .map_err(|e| StorageError::io(IoOp::CreateDir, &dir, e))?;
        let state_path = dir.join(STATE_FILE);
        let on_disk = match backend.open(&state_path, OpenMode::Existing) {
            Ok(file) => {
                let len = file
                    .len()
                    .map_err(|e| StorageError::io(IoOp::Len, &state_path, e))?;
                if len != STATE_LEN as u64 {
                    return Err(StorageError::corrupt(state_path, 0, Corruption::Truncated));
                }
                let mut buf = [0u8; STATE_LEN];
                file.read_at(0, &mut buf)
                    .map_err(|e| StorageError::io(IoOp::Read, &state_path, e))?;
                let record = decode_state(&buf)
                    .map_err(|kind| StorageError::corrupt(&state_path, 0, kind))?;
                if record.uid != uid {
                    return Err(StorageError::corrupt(
                        state_path,
                        16,
                        Corruption::NameMismatch,
                    ));
                }
                Some(record)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(StorageError::io(IoOp::Open, &state_path, e)),
        };
        let reserve = match config.log.durability {
            Durability::Fsync => 0,
            Durability::Background {
                max_unsynced_records,
                ..
            } => max_unsynced_records
                .saturating_mul(4)
                .max(MIN_FRONTIER_RESERVE),
        };
        let state = Arc::new(StateFile {
            backend: Arc::clone(&backend),
            dir: dir.clone(),
            uid,
            record: Mutex::new(on_disk.unwrap_or(StateRecord {
                uid,
                generation,
                frontier: 0,
            })),
            persisted: AtomicU64::new(on_disk.map_or(0, |r| r.frontier)),
            reserve,
        });
        let write_state = |record: StateRecord| {
            state
                .write(record)
                .map_err(|e| StorageError::io(IoOp::Append, &state_path, e))
        };
        let mut frontier = on_disk.map_or(0, |r| r.frontier);
        match on_disk {
            None => write_state(StateRecord {
                uid,
                generation,
                frontier: 0,
            })?,
            Some(record) if record.generation < generation => {
                // An interrupted purge: finish it before anything else.
                tracing::warn!(dir = %dir.display(), "redoing an interrupted purge");
                remove_segments(&*backend, &dir)?;
                write_state(StateRecord {
                    uid,
                    generation,
                    frontier: 0,
                })?;
                frontier = 0;
            }
            Some(record) if record.generation > generation => {
                return Err(StorageError::corrupt(
                    state_path,
                    24,
                    Corruption::NameMismatch,
                ));
            }
            Some(_) => {}
        }
        let hook: Option<Arc<dyn CommitHook>> = match config.log.durability {
            Durability::Fsync => None,
            Durability::Background { .. } => Some(Arc::clone(&state) as Arc<dyn CommitHook>),
        };
        let (log, report) = Log::open_shared(
            backend,
            dir,
            config.log,
            pool,
            cache,
            OpenOptions {
                initial_seq: 0,
                min_next_seq: frontier,
                hook,
            },
        )?;
        Ok((
            Partition {
                addr,
                log,
                state,
                admission: Mutex::new(()),
            },
            report,
        ))
    }

    fn admission(&self) -> MutexGuard<'_, ()> {
        self.admission
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the partition sits.
    pub fn addr(&self) -> PartitionAddr {
        self.addr
    }

    /// The partition's unique id.
    pub fn uid(&self) -> u64 {
        self.state.uid
    }

    /// The underlying log.
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The purge generation on disk.
    pub fn generation(&self) -> u64 {
        self.state.lock().generation
    }

    /// Appends a batch: assigns its base offset and timestamp (`max(now_us, last)`), stamps it,
    /// and queues it for the group commit. The ticket resolves once the batch is durable.
    pub fn append<B: StampableBatch>(&self, batch: B, now_us: u64) -> Result<AppendTicket> {
        let count = batch.message_count();
        let partition_id = self.addr.partition_id;
        let _guard = self.admission();
        let mut base_offset = 0;
        let inner = self
            .log
            .append_with(count, 0, now_us, |assigned: Assigned| {
                base_offset = assigned.seq;
                Ok(batch.stamp(&Stamp {
                    partition_id,
                    base_offset: assigned.seq,
                    base_timestamp: assigned.timestamp,
                }))
            })?;
        Ok(AppendTicket { inner, base_offset })
    }

    /// Appends a batch stamped elsewhere (a replicated operation): `base_offset` must be the
    /// partition's next offset.
    pub fn append_stamped(
        &self,
        base_offset: u64,
        timestamp: u64,
        message_count: u32,
        bytes: Bytes,
    ) -> Result<AppendTicket> {
        let _guard = self.admission();
        let inner = self
            .log
            .append_assigned(base_offset, timestamp, message_count, 0, bytes)?;
        Ok(AppendTicket { inner, base_offset })
    }

    /// Counters.
    pub fn stats(&self) -> PartitionStats {
        let segments = self.log.segments();
        let first_offset = segments.first().map_or(0, |s| s.base);
        let next_offset = segments.last().map_or(0, |s| s.end);
        let messages = segments.iter().map(|s| s.end - s.base).sum();
        PartitionStats {
            first_offset,
            next_offset,
            current_offset: if messages == 0 { 0 } else { next_offset - 1 },
            messages,
            size_bytes: segments.iter().map(|s| s.bytes).sum(),
            segments: u32::try_from(segments.len()).unwrap_or(u32::MAX),
        }
    }

    /// Reads batches covering offsets `start..start + count` (clamped to what is retained and
    /// acknowledged), stopping early past `max_bytes`.
    pub fn read(&self, start: u64, count: u64, max_bytes: u64) -> Result<Vec<StoredBatch>> {
        Ok(self
            .log
            .read(start, count, max_bytes)?
            .into_iter()
            .map(StoredBatch::from_record)
            .collect())
    }

    /// The first offset whose batch timestamp is at or after `timestamp`.
    pub fn offset_at_timestamp(&self, timestamp: u64) -> Result<Option<u64>> {
        self.log.seq_at_timestamp(timestamp)
    }

    /// Polls per the stream protocol's rules (7.5): `stored_offset` is the consumer's stored
    /// offset, used by [`PollStrategy::Next`]. At most `count` messages and roughly `max_bytes`
    /// of batches are returned (at least one batch when any message qualifies).
    pub fn poll(
        &self,
        strategy: PollStrategy,
        count: u32,
        stored_offset: Option<u64>,
        max_bytes: u64,
    ) -> Result<Polled> {
        let stats = self.stats();
        let partition_id = self.addr.partition_id;
        if stats.messages == 0 || count == 0 {
            return Ok(Polled::empty(partition_id, stats.current_offset));
        }
        let current = stats.current_offset;
        let start = match strategy {
            PollStrategy::Offset(v) => v,
            PollStrategy::First => stats.first_offset,
            PollStrategy::Last => current.saturating_sub(u64::from(count) - 1),
            PollStrategy::Next => stored_offset.map_or(0, |o| o.saturating_add(1)),
            PollStrategy::Timestamp(t) => match self.offset_at_timestamp(t)? {
                Some(offset) => offset,
                None => return Ok(Polled::empty(partition_id, current)),
            },
        };
        if start > current {
            return Ok(Polled::empty(partition_id, current));
        }
        let start = start.max(stats.first_offset);
        let end = start.saturating_add(u64::from(count)).min(current + 1);
        let batches = self.read(start, end - start, max_bytes)?;
        // The byte limit can stop early: serve only what the batches hold.
        let end = batches.last().map_or(start, |b| b.end_offset().min(end));
        let start = batches.first().map_or(start, |b| b.base_offset.max(start));
        Ok(Polled {
            partition_id,
            current_offset: current,
            start_offset: start,
            end_offset: end,
            batches,
        })
    }

    /// Applies retention; returns the deleted segments. Never blocks appends.
    pub fn apply_retention(
        &self,
        policy: &RetentionPolicy,
        now_us: u64,
    ) -> Result<Vec<SegmentSummary>> {
        let segments = self.log.segments();
        let mut sealed_bytes: u64 = segments.iter().filter(|s| s.sealed).map(|s| s.bytes).sum();
        self.log.delete_sealed_while(|seg| {
            if let Some(pin) = policy.keep_above {
                if seg.end > pin.saturating_add(1) {
                    return false;
                }
            }
            // Unknown timestamps never look expired.
            let expired = policy.message_expiry.is_some_and(|expiry| {
                seg.max_timestamp
                    .is_some_and(|ts| ts.saturating_add(expiry) <= now_us)
            });
            let oversized = policy.max_bytes.is_some_and(|max| sealed_bytes > max);
            if expired || oversized {
                sealed_bytes -= seg.bytes;
                true
            } else {
                false
            }
        })
    }

    /// Deletes the `n` oldest sealed segments.
    pub fn delete_oldest_segments(&self, n: usize) -> Result<Vec<SegmentSummary>> {
        self.log.delete_oldest_segments(n)
    }

    /// Empties the partition and restarts offsets at 0, recording purge generation
    /// `generation`. Appends wait until it is done.
    pub fn purge(&self, generation: u64) -> Result<()> {
        let _guard = self.admission();
        self.log.purge(0).wait()?;
        self.state
            .write(StateRecord {
                uid: self.state.uid,
                generation,
                frontier: 0,
            })
            .map_err(|e| StorageError::io(IoOp::Append, self.state.dir.join(STATE_FILE), e))
    }

    /// Makes every acknowledged batch durable (for topics without `enforce_fsync`).
    pub fn flush(&self) -> Completion<()> {
        self.log.flush()
    }

    /// Flushes and, for background durability, records the exact frontier so a clean restart
    /// leaves no offset gap.
    pub fn close(&self) -> Result<()> {
        let _guard = self.admission();
        self.log.close()?;
        if matches!(self.log.config().durability, Durability::Background { .. }) {
            let mut record = *self.state.lock();
            record.frontier = self.log.bounds().next;
            self.state
                .write(record)
                .map_err(|e| StorageError::io(IoOp::Append, self.state.dir.join(STATE_FILE), e))?;
        }
        Ok(())
    }
}

/// Removes every segment and index file of a directory, oldest first.
fn remove_segments(backend: &dyn StorageBackend, dir: &Path) -> Result<()> {
    let listing = match backend.list(dir) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StorageError::io(IoOp::List, dir, e)),
    };
    let mut names: Vec<(u64, bool, String)> = listing
        .into_iter()
        .filter(|e| !e.is_dir)
        .filter_map(|e| {
            crate::format::parse_file_name(&e.name).map(|(base, idx)| (base, !idx, e.name))
        })
        .collect();
    // Oldest first, each segment's log before its index (an orphan index is cleaned at open).
    names.sort();
    names.sort_by_key(|(base, is_log, _)| (*base, !*is_log));
    for (_, _, name) in names {
        let path = dir.join(name);
        backend
            .remove_file(&path)
            .map_err(|e| StorageError::io(IoOp::Remove, &path, e))?;
    }
    backend
        .sync_dir(dir)
        .map_err(|e| StorageError::io(IoOp::SyncDir, dir, e))
}

#[cfg(test)]
mod tests;
