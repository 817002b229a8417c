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
//! A purge that fails part-way (no space for the fresh segment or the state file, an I/O
//! error) fail-stops the partition: appends and polls are refused with
//! [`StreamStoreError::PurgeUnfinished`] until a purge completes, since the open that finishes
//! it would delete whatever was accepted in between.
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

mod state_file;
mod types;

#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use eddy_log::{
    create_dir_durable, lock, Cache, Cipher, CommitHook, CommitPool, CommitStats, Completion,
    Corruption, Durability, IoOp, Log, OpenMode, OpenOptions, RecoveryReport, SegmentSummary,
    StorageBackend,
};

use crate::error::{Result, StreamStoreError};
use state_file::{decode_state, StateFile, StateRecord, STATE_LEN};

pub use state_file::STATE_FILE;
pub use types::{
    AppendTicket, Appended, PartitionAddr, PartitionConfig, PartitionStats, PollStrategy, Polled,
    RetentionPolicy, Stamp, StampWith, StampableBatch, StoredBatch,
};

/// Offsets reserved ahead of the acknowledged ones by one frontier write, at least.
pub const MIN_FRONTIER_RESERVE: u64 = 4096;

/// A partition: message batches on a [`Log`].
pub struct Partition {
    addr: PartitionAddr,
    log: Log,
    state: Arc<StateFile>,
    /// Serialises appends with purge (a purge must finish, state file included, before any
    /// append after it is acknowledged).
    admission: Mutex<()>,
    /// Set (under `admission`) while a purge is unfinished: from its start until its log purge
    /// and its state file are both done. A failed purge leaves it set, and the partition
    /// refuses appends and polls until a later purge completes: the metadata already records
    /// the purge, so the restart would finish it and delete whatever was accepted meanwhile.
    purge_unfinished: AtomicBool,
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
    /// The owning store's group-commit counters (see [`OpenOptions::stats`]).
    pub stats: Option<Arc<CommitStats>>,
    /// Encrypts the stored batches (see [`OpenOptions::cipher`]).
    pub cipher: Option<Cipher>,
}

impl Partition {
    /// Opens (creating if needed) and recovers a partition.
    pub fn open(
        backend: Arc<dyn StorageBackend>,
        pool: &CommitPool,
        cache: Arc<Cache>,
        open: PartitionOpen,
    ) -> Result<(Partition, RecoveryReport)> {
        let PartitionOpen {
            addr,
            uid,
            dir,
            config,
            generation,
            stats,
            cipher,
        } = open;
        // Durably: an acknowledged partition survives a crash with its directory.
        create_dir_durable(&*backend, &dir)?;
        let on_disk = read_state(&*backend, &dir.join(STATE_FILE), uid)?;
        let reserve = frontier_reserve(config.log.durability);
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
        let frontier = settle_generation(&state, on_disk, generation)?;
        let hook: Option<Arc<dyn CommitHook>> = match config.log.durability {
            Durability::Fsync => None,
            Durability::Background { .. } => Some(Arc::clone(&state) as Arc<dyn CommitHook>),
        };
        let (log, report) = Log::open(
            backend,
            dir,
            config.log,
            pool,
            cache,
            OpenOptions {
                initial_seq: 0,
                min_next_seq: frontier,
                hook,
                stats,
                cipher,
                window_gate: None,
            },
        )?;
        Ok((
            Partition {
                addr,
                log,
                state,
                admission: Mutex::new(()),
                purge_unfinished: AtomicBool::new(false),
            },
            report,
        ))
    }

    fn admission(&self) -> MutexGuard<'_, ()> {
        lock(&self.admission)
    }

    /// Refuses while a purge is unfinished (see [`StreamStoreError::PurgeUnfinished`]).
    fn check_not_stopped(&self) -> Result<()> {
        if self.purge_unfinished.load(Ordering::Acquire) {
            return Err(StreamStoreError::PurgeUnfinished {
                stream_id: self.addr.stream_id,
                topic_id: self.addr.topic_id,
                partition_id: self.addr.partition_id,
            });
        }
        Ok(())
    }

    /// True while the partition refuses appends and polls because its last purge failed.
    pub fn purge_unfinished(&self) -> bool {
        self.purge_unfinished.load(Ordering::Acquire)
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
        self.check_not_stopped()?;
        let reservation = self.log.reserve(count, 0, now_us)?;
        let assigned = reservation.assigned();
        let bytes = batch.stamp(&Stamp {
            partition_id,
            base_offset: assigned.seq,
            base_timestamp: assigned.timestamp,
        });
        let inner = reservation.append(bytes)?;
        Ok(AppendTicket {
            inner,
            base_offset: assigned.seq,
        })
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
        self.check_not_stopped()?;
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
            size_bytes: segments.iter().map(SegmentSummary::payload_bytes).sum(),
            segments: u32::try_from(segments.len()).unwrap_or(u32::MAX),
        }
    }

    /// Reads batches covering offsets `start..start + count` (clamped to what is retained and
    /// acknowledged), stopping early past `max_bytes`.
    pub fn read(&self, start: u64, count: u64, max_bytes: u64) -> Result<Vec<StoredBatch>> {
        self.check_not_stopped()?;
        Ok(self
            .log
            .read(start, count, max_bytes)?
            .into_iter()
            .map(StoredBatch::from_record)
            .collect())
    }

    /// The first offset whose batch timestamp is at or after `timestamp`.
    pub fn offset_at_timestamp(&self, timestamp: u64) -> Result<Option<u64>> {
        Ok(self.log.seq_at_timestamp(timestamp)?)
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
        self.check_not_stopped()?;
        crate::replicated::poll_batches(
            self,
            self.addr.partition_id,
            strategy,
            count,
            stored_offset,
            max_bytes,
        )
    }

    /// Applies retention; returns the deleted segments. Never blocks appends.
    pub fn apply_retention(
        &self,
        policy: &RetentionPolicy,
        now_us: u64,
    ) -> Result<Vec<SegmentSummary>> {
        let segments = self.log.segments();
        let mut sealed_bytes: u64 = segments.iter().filter(|s| s.sealed).map(|s| s.bytes).sum();
        let deleted = self.log.delete_sealed_while(|seg| {
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
        })?;
        Ok(deleted)
    }

    /// Deletes the oldest sealed segments as long as they start at `bases`, in order; stops at
    /// the first that does not (a concurrent deletion or purge moved the partition on). The
    /// active segment is never deleted. Returns what was deleted.
    pub fn delete_sealed_segments(&self, bases: &[u64]) -> Result<Vec<SegmentSummary>> {
        let mut expected = bases.iter();
        Ok(self
            .log
            .delete_sealed_while(|seg| expected.next() == Some(&seg.base))?)
    }

    /// Deletes the `n` oldest sealed segments.
    pub fn delete_oldest_segments(&self, n: usize) -> Result<Vec<SegmentSummary>> {
        Ok(self.log.delete_oldest_segments(n)?)
    }

    /// Empties the partition and restarts offsets at 0, recording purge generation
    /// `generation`. Appends wait until it is done. If it fails (a full disk while creating
    /// the fresh segment or replacing the state file, an I/O error), the partition is
    /// fail-stopped: appends and polls are refused with
    /// [`StreamStoreError::PurgeUnfinished`] until a purge succeeds (the caller retries it with
    /// a new generation, or the next open finishes it), so nothing is acknowledged that
    /// finishing the purge would delete.
    pub fn purge(&self, generation: u64) -> Result<()> {
        let _guard = self.admission();
        self.purge_unfinished.store(true, Ordering::Release);
        self.log.purge(0).wait()?;
        self.state.write(StateRecord {
            uid: self.state.uid,
            generation,
            frontier: 0,
        })?;
        self.purge_unfinished.store(false, Ordering::Release);
        Ok(())
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
            self.state.write(record)?;
        }
        Ok(())
    }
}

/// Reads partition `uid`'s state file at `state_path`; `None` when there is none. A file of
/// the wrong length, one that does not decode, and one naming another uid are corruption.
fn read_state(
    backend: &dyn StorageBackend,
    state_path: &Path,
    uid: u64,
) -> Result<Option<StateRecord>> {
    let file = match backend.open(state_path, OpenMode::Existing) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StreamStoreError::io(IoOp::Open, state_path, e)),
    };
    let len = file
        .len()
        .map_err(|e| StreamStoreError::io(IoOp::Len, state_path, e))?;
    if len != STATE_LEN as u64 {
        return Err(StreamStoreError::corrupt(
            state_path,
            0,
            Corruption::Truncated,
        ));
    }
    let mut buf = [0u8; STATE_LEN];
    file.read_at(0, &mut buf)
        .map_err(|e| StreamStoreError::io(IoOp::Read, state_path, e))?;
    let record =
        decode_state(&buf).map_err(|kind| StreamStoreError::corrupt(state_path, 0, kind))?;
    if record.uid != uid {
        return Err(StreamStoreError::corrupt(
            state_path,
            16,
            Corruption::NameMismatch,
        ));
    }
    Ok(Some(record))
}

/// How far the state file's frontier is kept ahead of acknowledged offsets: nothing when
/// every group is synced before it is acknowledged; under background durability four times
/// the unsynced-records bound, at least [`MIN_FRONTIER_RESERVE`].
fn frontier_reserve(durability: Durability) -> u64 {
    match durability {
        Durability::Fsync => 0,
        Durability::Background {
            max_unsynced_records,
            ..
        } => max_unsynced_records
            .saturating_mul(4)
            .max(MIN_FRONTIER_RESERVE),
    }
}

/// Brings the partition's state file (`on_disk`, as read at open) to the purge `generation`
/// the metadata records, and returns the frontier the log's next offset must not fall below.
/// Without a file, writes one at `generation`. An older generation on disk is an interrupted
/// purge, finished now: the segments are removed and the state rewritten at `generation`
/// with frontier 0. A newer one is corruption.
fn settle_generation(
    state: &StateFile,
    on_disk: Option<StateRecord>,
    generation: u64,
) -> Result<u64> {
    let uid = state.uid;
    let mut frontier = on_disk.map_or(0, |r| r.frontier);
    match on_disk {
        None => state.write(StateRecord {
            uid,
            generation,
            frontier: 0,
        })?,
        Some(record) if record.generation < generation => {
            // An interrupted purge: finish it before anything else.
            tracing::warn!(dir = %state.dir.display(), "redoing an interrupted purge");
            remove_segments(&*state.backend, &state.dir)?;
            state.write(StateRecord {
                uid,
                generation,
                frontier: 0,
            })?;
            frontier = 0;
        }
        Some(record) if record.generation > generation => {
            return Err(StreamStoreError::corrupt(
                state.dir.join(STATE_FILE),
                24,
                Corruption::NameMismatch,
            ));
        }
        Some(_) => {}
    }
    Ok(frontier)
}

/// Removes every segment and index file of a directory, oldest first.
fn remove_segments(backend: &dyn StorageBackend, dir: &Path) -> Result<()> {
    let listing = match backend.list(dir) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StreamStoreError::io(IoOp::List, dir, e)),
    };
    let mut names: Vec<(u64, bool, String)> = listing
        .into_iter()
        .filter(|e| !e.is_dir)
        .filter_map(|e| {
            eddy_log::format::parse_file_name(&e.name).map(|(base, idx)| (base, !idx, e.name))
        })
        .collect();
    // Oldest first, each segment's log before its index (an orphan index is cleaned at open).
    names.sort();
    names.sort_by_key(|(base, is_log, _)| (*base, !*is_log));
    for (_, _, name) in names {
        let path = dir.join(name);
        backend
            .remove_file(&path)
            .map_err(|e| StreamStoreError::io(IoOp::Remove, &path, e))?;
    }
    backend
        .sync_dir(dir)
        .map_err(|e| StreamStoreError::io(IoOp::SyncDir, dir, e))
}
