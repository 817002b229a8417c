//! Replicated partitions: the state machine and read side of a partition whose [`Log`] is its
//! raft log.
//!
//! The cluster runs one raft group per partition, and the group's raft log is the partition's
//! message log (one copy of each byte per node). Each log record is one raft entry:
//!
//! * `seq` is the raft index (contiguous from 1, or from a snapshot boundary + 1), `count` 1;
//! * `tag` is the entry's term (opaque here), with bit 31 ([`MEMBERSHIP_TAG`]) set on a change
//!   of the group's members, which is no entry of the partition: it reads as the no-op;
//! * `timestamp` is the batch's base timestamp for an append entry and the previous record's
//!   timestamp otherwise (records' timestamps never decrease along a log; this module only
//!   reads them for expiry);
//! * the payload is an encoded [`PartitionEntry`], or empty for the no-op a new leader appends.
//!
//! The raft layer appends records, truncates uncommitted suffixes and decides what is
//! committed. [`ReplicatedPartition::apply`] is called once per committed entry, in index
//! order; only applied entries are visible to reads, whatever else the log holds.
//!
//! # Offsets
//!
//! Offsets are message offsets as in a [`Partition`](crate::Partition) (a batch of `n`
//! messages at base offset `b` covers `b..b + n`), distinct from raft indexes. The leader stamps
//! a batch with the base offset it predicts from its own log tail and a timestamp, then
//! proposes it. `apply` checks the prediction: an append becomes visible only when its base
//! offset is the partition's next offset and its timestamp is not below the newest one;
//! otherwise it is refused, on every replica alike, and changes nothing. A purge (with a purge
//! generation above the partition's) makes everything at or below its index invisible and
//! restarts offsets at 0.
//!
//! Visible offsets are therefore contiguous from the first visible offset to the next offset,
//! and the *visible floor* (a raft index) is the highest index whose records are never served:
//! the last purge, the snapshot the partition started from, or the last retention cut.
//!
//! # Reads
//!
//! Reads translate offsets to raft indexes with a sampled translator (see
//! [`ReplicatedConfig`] for its memory bound): the nearest sample at or below the wanted offset
//! (or timestamp) gives a raft index and the offset state in front of it; the read then walks
//! the records forward with [`Log::read`], replaying the same state machine `apply` ran, up to
//! the applied index and never past it. Reads follow [`Partition`](crate::Partition)'s
//! contract and types ([`StoredBatch`], [`Polled`], [`PollStrategy`], [`PartitionStats`]); a
//! batch's bytes are the batch slice of the entry, not the whole payload. Polls run
//! [`poll_batches`], the strategy logic shared with `Partition`.
//!
//! # Retention and snapshots
//!
//! [`ReplicatedPartition::retention`] says how far whole sealed segments may be deleted under a
//! [`RetentionPolicy`] (segments a purge made wholly invisible always may) and returns the
//! boundary state, a [`ReplicatedSnapshot`]. The caller records it durably (a node restarting
//! after the deletion starts from it: `new(.., Some(boundary))`, then re-applies the entries
//! after it), calls [`ReplicatedPartition::forget_through`], then deletes the segments with
//! [`Log::delete_sealed_while`] and [`RetentionCut::covers`]. Forget before deleting: a read
//! that meets a deleted record it may still serve fails instead of skipping it.
//!
//! [`ReplicatedPartition::snapshot`] is the state a member that must catch up past deleted
//! segments installs: `new(.., Some(snapshot))` on a log the raft layer reset to start at
//! `snapshot.index + 1`.
//!
//! # Using it
//!
//! What the raft layer does, on one node:
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use eddy_stream_store::replicated::{ApplyOutcome, PartitionEntry, ReplicatedPartition};
//! use eddy_log::{Cache, CommitPool, Log, LogConfig, MemBackend, OpenOptions};
//! use eddy_stream_store::PartitionAddr;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = CommitPool::new(1)?;
//! let options = OpenOptions { initial_seq: 1, ..OpenOptions::default() }; // raft indexes from 1
//! let (log, _) = Log::open(Arc::new(MemBackend::new()), "p", LogConfig::default(), &pool,
//!                          Arc::new(Cache::new(1 << 20)), options)?;
//! let addr = PartitionAddr { stream_id: 0, topic_id: 0, partition_id: 0 };
//! let partition = ReplicatedPartition::new(addr, log, None)?;
//!
//! // The leader stamps a batch from its log tail and proposes it: one record per entry.
//! let stamp = partition.predict(&[]);
//! let entry = PartitionEntry::Append {
//!     base_offset: stamp.next_offset,
//!     message_count: 2,
//!     timestamp: stamp.min_timestamp.max(1_000),
//!     batch: Bytes::from_static(b"two messages"),
//! }
//! .encode()?;
//! partition.log().append_assigned(1, 1_000, 1, /* term */ 1, entry.clone())?.wait()?;
//! assert!(partition.read(0, 10, u64::MAX)?.is_empty()); // in the log, not applied
//!
//! // Committed: applied, then visible.
//! let outcome = partition.apply(1, &entry);
//! assert_eq!(outcome, ApplyOutcome::Appended { base_offset: 0, message_count: 2, timestamp: 1_000 });
//! let batches = partition.read(0, 10, u64::MAX)?;
//! assert_eq!(&batches[0].bytes[..], b"two messages");
//! # Ok(()) }
//! ```

mod entry;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod poll;
mod translator;

/// The bit of a record's tag that marks a change of the group's members (the raft layer's
/// `eddy_consensus::logstore::MEMBERSHIP_TAG`): such a record is read as the no-op.
pub const MEMBERSHIP_TAG: u32 = 1 << 31;

use std::fmt;
use std::ops::ControlFlow;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

pub use entry::{
    EntryError, PartitionEntry, ReplicatedSnapshot, APPEND_HEADER_LEN, ENTRY_VERSION,
    MAX_BATCH_BYTES, PURGE_LEN, SNAPSHOT_LEN,
};
pub use poll::{poll_batches, PollSource};

use crate::error::StreamStoreError;
use crate::partition::{
    PartitionAddr, PartitionStats, PollStrategy, Polled, RetentionPolicy, StoredBatch,
};
use eddy_log::format::RECORD_HEADER_LEN;
use eddy_log::{Log, SegmentSummary};
use entry::{Cursor, Step};
use translator::{Sample, Translator, SAMPLE_SIZE};

/// Payload bytes one step of a forward scan asks [`Log::read`] for.
const SCAN_READ_BYTES: u64 = 1024 * 1024;

/// Errors of a replicated partition.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicatedError {
    /// The log failed.
    #[error("log error")]
    Storage(#[from] StreamStoreError),
    /// The log machinery failed.
    #[error("log error")]
    Log(#[from] eddy_log::LogError),
    /// An applied entry that may be served is missing from the log (its segment was deleted
    /// before [`ReplicatedPartition::forget_through`], or the log does not hold it).
    #[error("raft index {index} is applied but missing from the log (found {found:?})")]
    Missing {
        /// The raft index looked for.
        index: u64,
        /// The record found instead, if any.
        found: Option<u64>,
    },
    /// A log record is not a raft entry (it covers more than one sequence number).
    #[error("the record at raft index {index} covers {count} sequence numbers, not 1")]
    NotAnEntry {
        /// Its raft index.
        index: u64,
        /// Its count.
        count: u32,
    },
    /// A forward scan reached a sample with another state than the one it recorded: the log
    /// does not hold the entries that were applied.
    #[error("replaying the log diverges from the applied state at raft index {index}")]
    Diverged {
        /// The raft index where the states differ.
        index: u64,
    },
    /// The log does not reach the first entry the partition needs: it holds raft indexes
    /// `first..next`, and `needed` is neither in that range nor its end.
    #[error("the log holds raft indexes {first}..{next}, not reaching index {needed} the partition applies next")]
    LogGap {
        /// The log's first index.
        first: u64,
        /// The log's next index.
        next: u64,
        /// The first index the partition needs (its floor + 1).
        needed: u64,
    },
    /// A state asked for at a raft index outside `floor..=applied`.
    #[error("raft index {index} is outside the visible range {floor}..={applied}")]
    NotVisible {
        /// The index asked for.
        index: u64,
        /// The visible floor.
        floor: u64,
        /// The applied index.
        applied: u64,
    },
}

/// Sampling of the offset → raft index translator.
///
/// Memory bound: at most `max_samples` samples of 24 bytes each (the deque's capacity can
/// reach about twice that), whatever the partition's size: 96 KiB at the default 4096. The
/// first `max_samples` samples are one per `sample_bytes` of log (or `sample_records` records,
/// whichever comes first); past that the intervals double each time the samples would exceed
/// the bound, so a lookup's forward scan reads about `max(sample_bytes, 2 * visible log bytes /
/// max_samples)`: 64 KiB up to 256 MiB of visible log, 512 KiB at 1 GiB (with the defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicatedConfig {
    /// Log bytes (record headers included) between samples, at least 1.
    pub sample_bytes: u64,
    /// Records between samples, at least 1.
    pub sample_records: u64,
    /// Samples kept at most, at least 2.
    pub max_samples: usize,
}

impl Default for ReplicatedConfig {
    fn default() -> Self {
        ReplicatedConfig {
            sample_bytes: 64 * 1024,
            sample_records: 512,
            max_samples: 4096,
        }
    }
}

impl ReplicatedConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), StreamStoreError> {
        let invalid = |field, value| Err(eddy_log::LogError::InvalidConfig { field, value }.into());
        if self.sample_bytes == 0 {
            return invalid("sample_bytes", 0);
        }
        if self.sample_records == 0 {
            return invalid("sample_records", 0);
        }
        if self.max_samples < 2 {
            return invalid("max_samples", self.max_samples as u64);
        }
        Ok(())
    }

    /// The most bytes the samples take (capacity slack excluded).
    pub fn max_sample_bytes(&self) -> usize {
        self.max_samples * SAMPLE_SIZE
    }
}

/// What [`ReplicatedPartition::apply`] did with an entry. Every replica gets the same outcome
/// for the same entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// The empty payload (a new leader's no-op).
    NoOp,
    /// The batch is visible.
    Appended {
        /// Offset of its first message.
        base_offset: u64,
        /// Its messages.
        message_count: u32,
        /// Its timestamp.
        timestamp: u64,
    },
    /// A stale prediction (base offset not the next offset, or timestamp below the newest):
    /// nothing changed. The leader re-stamps with these and proposes again.
    Refused {
        /// The partition's next offset.
        expected_offset: u64,
        /// The lowest timestamp an append may carry.
        min_timestamp: u64,
    },
    /// The partition was emptied; offsets restart at 0.
    Purged {
        /// The new purge generation.
        generation: u64,
    },
    /// A purge whose generation is not above the partition's (a retried proposal): nothing
    /// changed.
    StalePurge {
        /// The partition's generation.
        current_generation: u64,
    },
    /// A [`PartitionEntry::Forget`]: nothing changed yet. The caller forgets through
    /// `through_index` as it does for a retention cut (see the module's docs): it records
    /// [`ReplicatedPartition::snapshot_at`]`(through_index)` (with `first_offset` set to its
    /// `next_offset`) durably, then calls [`ReplicatedPartition::forget_through`].
    Forget {
        /// The last raft index no longer to be served.
        through_index: u64,
    },
    /// The payload does not decode: nothing became visible (the index is applied).
    Corrupt(EntryError),
    /// Not the next index (a caller bug): nothing was applied.
    OutOfOrder {
        /// The index `apply` expects.
        expected_index: u64,
    },
}

/// What a leader stamps its next batch with, from [`ReplicatedPartition::predict`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prediction {
    /// The base offset the batch must carry.
    pub next_offset: u64,
    /// The lowest timestamp it may carry.
    pub min_timestamp: u64,
    /// The purge generation it will land in.
    pub generation: u64,
}

/// How far retention may delete, from [`ReplicatedPartition::retention`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionCut {
    /// Sealed segments whose records are all at or below this raft index may be deleted.
    pub through_index: u64,
    /// The state after the cut (its `index` is `through_index`, or the visible floor when that
    /// is higher): record it durably, then [`ReplicatedPartition::forget_through`] it.
    pub boundary: ReplicatedSnapshot,
}

impl RetentionCut {
    /// True when `segment` lies wholly at or below the cut (the predicate for
    /// [`Log::delete_sealed_while`]).
    pub fn covers(&self, segment: &SegmentSummary) -> bool {
        segment.sealed && segment.end <= self.through_index.saturating_add(1)
    }
}

#[derive(Debug)]
struct State {
    /// The last applied raft index.
    applied: u64,
    /// Records at or below this raft index are never served.
    floor: u64,
    /// The first visible offset.
    first_offset: u64,
    /// The state after `applied`.
    cursor: Cursor,
    translator: Translator,
}

/// What one read works from: a consistent copy of the state, taken under the lock.
#[derive(Debug, Clone, Copy)]
struct View {
    applied: u64,
    floor: u64,
    first_offset: u64,
    next_offset: u64,
    generation: u64,
    /// Where the scan starts.
    start: Sample,
    /// The sample after it, checked when the scan passes it.
    check: Option<Sample>,
}

/// A replicated partition: the state machine and read side of a partition over its raft log.
pub struct ReplicatedPartition {
    addr: PartitionAddr,
    log: Log,
    state: Mutex<State>,
}

impl fmt::Debug for ReplicatedPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicatedPartition")
            .field("addr", &self.addr)
            .field("log", &self.log)
            .field("state", &*self.lock())
            .finish()
    }
}

impl ReplicatedPartition {
    /// A partition over `log` whose state starts at `snapshot` (or empty at raft index 0).
    /// Nothing at or below the snapshot's index is served. The log must reach the next index
    /// to apply, `snapshot.index + 1` (or 1): start at or below it and end at or after it (a
    /// log the raft layer reset for a snapshot install starts exactly there; a restarted
    /// node's log may hold invisible records below it and unapplied ones above it).
    pub fn new(
        addr: PartitionAddr,
        log: Log,
        snapshot: Option<ReplicatedSnapshot>,
    ) -> Result<Self, ReplicatedError> {
        Self::with_config(addr, log, snapshot, ReplicatedConfig::default())
    }

    /// [`ReplicatedPartition::new`] with explicit translator sampling.
    pub fn with_config(
        addr: PartitionAddr,
        log: Log,
        snapshot: Option<ReplicatedSnapshot>,
        config: ReplicatedConfig,
    ) -> Result<Self, ReplicatedError> {
        config.validate()?;
        let (floor, cursor) = snapshot.map_or((0, Cursor::default()), |s| {
            (
                s.index,
                Cursor {
                    next_offset: s.next_offset,
                    last_timestamp: s.last_timestamp,
                    generation: s.generation,
                },
            )
        });
        let needed = floor.saturating_add(1);
        let bounds = log.bounds();
        if bounds.first > needed || bounds.next < needed {
            return Err(ReplicatedError::LogGap {
                first: bounds.first,
                next: bounds.next,
                needed,
            });
        }
        let translator = Translator::new(
            Sample::at(needed, &cursor),
            config.sample_bytes,
            config.sample_records,
            config.max_samples,
        );
        Ok(ReplicatedPartition {
            addr,
            log,
            state: Mutex::new(State {
                applied: floor,
                floor,
                first_offset: cursor.next_offset,
                cursor,
                translator,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the partition sits.
    pub fn addr(&self) -> PartitionAddr {
        self.addr
    }

    /// The log (the raft layer appends to it and truncates it).
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The last applied raft index.
    pub fn applied_index(&self) -> u64 {
        self.lock().applied
    }

    /// The visible floor: records at or below this raft index are never served (sealed
    /// segments wholly at or below it may be deleted).
    pub fn visible_floor(&self) -> u64 {
        self.lock().floor
    }

    /// The purge generation.
    pub fn generation(&self) -> u64 {
        self.lock().cursor.generation
    }

    /// Samples the translator holds (for metrics and tests).
    pub fn translator_samples(&self) -> usize {
        self.lock().translator.len()
    }

    /// Applies committed entry `index` (its record's payload). Called once per committed
    /// entry, in index order, once its record is acknowledged by the log (reads replay applied
    /// entries from the log, and a read that finds an applied record missing fails with
    /// [`ReplicatedError::Missing`]). Never panics, whatever the payload.
    pub fn apply(&self, index: u64, payload: &Bytes) -> ApplyOutcome {
        let mut state = self.lock();
        let state = &mut *state;
        let expected_index = state.applied.saturating_add(1);
        if index != expected_index {
            return ApplyOutcome::OutOfOrder { expected_index };
        }
        let step = state.cursor.step(payload);
        state.applied = index;
        if let Step::Purged { .. } = step {
            state.floor = index;
            state.first_offset = 0;
            state
                .translator
                .reset(Sample::at(index.saturating_add(1), &state.cursor));
        } else {
            let record_bytes = (payload.len() + RECORD_HEADER_LEN) as u64;
            state.translator.note(index, record_bytes, &state.cursor);
        }
        match step {
            Step::NoOp => ApplyOutcome::NoOp,
            Step::Appended {
                base_offset,
                message_count,
                timestamp,
                ..
            } => ApplyOutcome::Appended {
                base_offset,
                message_count,
                timestamp,
            },
            Step::Refused {
                expected_offset,
                min_timestamp,
            } => ApplyOutcome::Refused {
                expected_offset,
                min_timestamp,
            },
            Step::Purged { generation } => ApplyOutcome::Purged { generation },
            Step::StalePurge { current_generation } => {
                ApplyOutcome::StalePurge { current_generation }
            }
            Step::Forget { through_index } => ApplyOutcome::Forget { through_index },
            Step::Corrupt(e) => ApplyOutcome::Corrupt(e),
        }
    }

    /// What the leader stamps its next batch with: the state after the applied index folded
    /// over `pending`, the payloads of the entries after it in its log (in index order,
    /// committed or not). A batch stamped with `next_offset` and a timestamp of at least
    /// `min_timestamp` is accepted when applied right after `pending`, on every replica.
    pub fn predict<'a>(&self, pending: impl IntoIterator<Item = &'a Bytes>) -> Prediction {
        let mut cursor = self.lock().cursor;
        for payload in pending {
            cursor.step(payload);
        }
        Prediction {
            next_offset: cursor.next_offset,
            min_timestamp: cursor.last_timestamp,
            generation: cursor.generation,
        }
    }

    /// The state after the applied index, for a member that must catch up past deleted
    /// segments (or for the raft layer's own snapshot).
    pub fn snapshot(&self) -> ReplicatedSnapshot {
        let state = self.lock();
        ReplicatedSnapshot {
            index: state.applied,
            next_offset: state.cursor.next_offset,
            first_offset: state.first_offset,
            last_timestamp: state.cursor.last_timestamp,
            generation: state.cursor.generation,
        }
    }

    /// The state after raft index `index`, which must lie between the visible floor and the
    /// applied index (found by a forward scan from the nearest sample).
    pub fn snapshot_at(&self, index: u64) -> Result<ReplicatedSnapshot, ReplicatedError> {
        self.retrying(
            |state| {
                if index < state.floor || index > state.applied {
                    return Err(ReplicatedError::NotVisible {
                        index,
                        floor: state.floor,
                        applied: state.applied,
                    });
                }
                Ok(Self::view(state, |t| t.for_index(index.saturating_add(1))))
            },
            |view| {
                let cursor = self.scan(view, index, |_| ControlFlow::Continue(()))?;
                Ok(ReplicatedSnapshot {
                    index,
                    next_offset: cursor.next_offset,
                    first_offset: view.first_offset,
                    last_timestamp: cursor.last_timestamp,
                    generation: cursor.generation,
                })
            },
        )
    }

    /// Counters of what is visible (`size_bytes` and `segments` are the log's, unapplied
    /// records included).
    pub fn stats(&self) -> PartitionStats {
        let (first_offset, next_offset) = {
            let state = self.lock();
            (state.first_offset, state.cursor.next_offset)
        };
        let bounds = self.log.bounds();
        let messages = next_offset - first_offset;
        PartitionStats {
            first_offset,
            next_offset,
            current_offset: if messages == 0 { 0 } else { next_offset - 1 },
            messages,
            size_bytes: bounds.bytes,
            segments: u32::try_from(bounds.segments).unwrap_or(u32::MAX),
        }
    }

    /// Reads visible batches covering offsets `start..start + count` (from the first visible
    /// one when `start` is below it), stopping once they hold `max_bytes` batch bytes (at least
    /// one batch is returned when any qualifies).
    pub fn read(
        &self,
        start: u64,
        count: u64,
        max_bytes: u64,
    ) -> Result<Vec<StoredBatch>, ReplicatedError> {
        self.retrying(
            |state| {
                let from = start.max(state.first_offset);
                Ok(Self::view(state, |t| t.for_offset(from)))
            },
            |view| {
                let from = start.max(view.first_offset);
                let mut out = Vec::new();
                if count == 0 || from >= view.next_offset {
                    return Ok(out);
                }
                let (mut covered, mut bytes) = (0u64, 0u64);
                self.scan(view, view.applied, |batch| {
                    if batch.end_offset() <= from {
                        return ControlFlow::Continue(());
                    }
                    covered += batch.end_offset() - batch.base_offset.max(from);
                    bytes += batch.bytes.len() as u64;
                    out.push(batch);
                    if covered >= count || bytes >= max_bytes {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })?;
                Ok(out)
            },
        )
    }

    /// The first visible offset whose batch timestamp is at or after `timestamp` (µs), or
    /// `None` when every visible batch is older.
    pub fn offset_at_timestamp(&self, timestamp: u64) -> Result<Option<u64>, ReplicatedError> {
        self.retrying(
            |state| Ok(Self::view(state, |t| t.for_timestamp(timestamp))),
            |view| {
                if view.first_offset == view.next_offset {
                    return Ok(None);
                }
                let mut found = None;
                self.scan(view, view.applied, |batch| {
                    if batch.timestamp >= timestamp {
                        found = Some(batch.base_offset);
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })?;
                Ok(found)
            },
        )
    }

    /// Polls per the stream protocol's rules (7.5), exactly as
    /// [`Partition::poll`](crate::Partition::poll) does.
    pub fn poll(
        &self,
        strategy: PollStrategy,
        count: u32,
        stored_offset: Option<u64>,
        max_bytes: u64,
    ) -> Result<Polled, ReplicatedError> {
        poll_batches(
            self,
            self.addr.partition_id,
            strategy,
            count,
            stored_offset,
            max_bytes,
        )
    }

    /// How far whole sealed segments may be deleted under `policy` at `now_us`: oldest first,
    /// never the active segment, never a segment holding a record above the applied index.
    /// Segments wholly at or below the visible floor (a purge made them invisible) always go;
    /// a segment holding visible records goes when its newest record timestamp has expired
    /// (`message_expiry`), or while the sealed bytes exceed `max_bytes`, unless the offset
    /// after its last visible batch is above `keep_above + 1` (it holds an offset a consumer
    /// has not committed). `None` when nothing may go.
    pub fn retention(
        &self,
        policy: &RetentionPolicy,
        now_us: u64,
    ) -> Result<Option<RetentionCut>, ReplicatedError> {
        loop {
            let (applied, floor) = {
                let state = self.lock();
                (state.applied, state.floor)
            };
            match self.retention_cut(policy, now_us, applied, floor) {
                // A purge applied meanwhile moved the floor: look again.
                Err(ReplicatedError::NotVisible { .. }) if self.visible_floor() != floor => {}
                other => return other,
            }
        }
    }

    fn retention_cut(
        &self,
        policy: &RetentionPolicy,
        now_us: u64,
        applied: u64,
        floor: u64,
    ) -> Result<Option<RetentionCut>, ReplicatedError> {
        let segments = self.log.segments();
        let mut sealed_bytes: u64 = segments.iter().filter(|s| s.sealed).map(|s| s.bytes).sum();
        let mut through = None;
        for (i, seg) in segments.iter().enumerate() {
            if i + 1 == segments.len() || !seg.sealed || seg.end == seg.base {
                break;
            }
            let last = seg.end - 1;
            if last > applied {
                break;
            }
            if last > floor {
                if let Some(pin) = policy.keep_above {
                    if self.snapshot_at(last)?.next_offset > pin.saturating_add(1) {
                        break;
                    }
                }
                // Unknown timestamps never look expired.
                let expired = policy.message_expiry.is_some_and(|expiry| {
                    seg.max_timestamp
                        .is_some_and(|ts| ts.saturating_add(expiry) <= now_us)
                });
                let oversized = policy.max_bytes.is_some_and(|max| sealed_bytes > max);
                if !(expired || oversized) {
                    break;
                }
            }
            sealed_bytes -= seg.bytes;
            through = Some(last);
        }
        let Some(through_index) = through else {
            return Ok(None);
        };
        let mut boundary = self.snapshot_at(through_index.max(floor))?;
        boundary.first_offset = boundary.next_offset;
        Ok(Some(RetentionCut {
            through_index,
            boundary,
        }))
    }

    /// Where an operator's `DELETE_SEGMENTS` of the `count` oldest segments cuts: the last
    /// raft index of the `count`-th oldest sealed segment that still holds a visible record
    /// (fewer when fewer are sealed; never the active segment, never past the applied index).
    /// `None` when there is nothing to delete. The leader proposes a
    /// [`PartitionEntry::Forget`] with it, so every member forgets the same records whatever
    /// its own segment boundaries.
    pub fn oldest_segments_end(&self, count: u32) -> Option<u64> {
        let (applied, floor) = {
            let state = self.lock();
            (state.applied, state.floor)
        };
        let segments = self.log.segments();
        let sealed = segments.len().saturating_sub(1);
        segments[..sealed]
            .iter()
            .filter(|seg| seg.sealed && seg.end > seg.base)
            .map(|seg| seg.end - 1)
            .filter(|&last| last > floor && last <= applied)
            .take(usize::try_from(count).unwrap_or(usize::MAX))
            .last()
    }

    /// The state to record before forgetting through `through_index` (a
    /// [`PartitionEntry::Forget`]'s, applied): [`snapshot_at`](Self::snapshot_at) with the
    /// first visible offset moved to the next offset. `None` when `through_index` is at or
    /// below the visible floor already (retention or a purge got there first).
    ///
    /// # Errors
    /// `through_index` is above the applied index, or the log cannot be read.
    pub fn forget_boundary(
        &self,
        through_index: u64,
    ) -> Result<Option<ReplicatedSnapshot>, ReplicatedError> {
        loop {
            let floor = self.visible_floor();
            if through_index <= floor {
                return Ok(None);
            }
            match self.snapshot_at(through_index) {
                Ok(mut boundary) => {
                    boundary.first_offset = boundary.next_offset;
                    return Ok(Some(boundary));
                }
                // The floor moved meanwhile: look again.
                Err(ReplicatedError::NotVisible { .. }) if self.visible_floor() != floor => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Stops serving everything at or below `boundary.index` (a [`RetentionCut::boundary`] or
    /// another state of this partition from [`ReplicatedPartition::snapshot_at`]): the first
    /// visible offset becomes `boundary.next_offset` and the translator drops the samples
    /// below. Returns false (and changes nothing) when the boundary is not above the visible
    /// floor, is above the applied index, or belongs to another purge generation.
    pub fn forget_through(&self, boundary: &ReplicatedSnapshot) -> bool {
        let mut state = self.lock();
        if boundary.index <= state.floor
            || boundary.index > state.applied
            || boundary.generation != state.cursor.generation
            || boundary.next_offset < state.first_offset
            || boundary.next_offset > state.cursor.next_offset
        {
            return false;
        }
        state.floor = boundary.index;
        state.first_offset = boundary.next_offset;
        let base = Sample {
            index: boundary.index.saturating_add(1),
            next_offset: boundary.next_offset,
            last_timestamp: boundary.last_timestamp,
        };
        state.translator.forget_through(base);
        true
    }

    fn view(state: &State, pick: impl FnOnce(&Translator) -> (Sample, Option<Sample>)) -> View {
        let (start, check) = pick(&state.translator);
        View {
            applied: state.applied,
            floor: state.floor,
            first_offset: state.first_offset,
            next_offset: state.cursor.next_offset,
            generation: state.cursor.generation,
            start,
            check,
        }
    }

    /// Runs `attempt` on a view taken by `view_of` under the lock, again on a fresh view
    /// whenever it misses a record because the visible floor moved meanwhile (retention forgot
    /// and deleted the records, or a purge hid them): each retry follows a floor change.
    fn retrying<T>(
        &self,
        view_of: impl Fn(&State) -> Result<View, ReplicatedError>,
        mut attempt: impl FnMut(&View) -> Result<T, ReplicatedError>,
    ) -> Result<T, ReplicatedError> {
        loop {
            let view = view_of(&self.lock())?;
            match attempt(&view) {
                Err(ReplicatedError::Missing { .. }) if self.visible_floor() != view.floor => {}
                other => return other,
            }
        }
    }

    /// Replays the entries from `view.start` through raft index `through` (at most the applied
    /// index of the view), handing every visible batch to `visit` until it breaks. Returns the
    /// state after the last entry replayed.
    fn scan(
        &self,
        view: &View,
        through: u64,
        mut visit: impl FnMut(StoredBatch) -> ControlFlow<()>,
    ) -> Result<Cursor, ReplicatedError> {
        debug_assert!(through <= view.applied);
        let mut cursor = view.start.cursor(view.generation);
        let mut index = view.start.index;
        while index <= through {
            let records = self.log.read(index, through - index + 1, SCAN_READ_BYTES)?;
            if records.is_empty() {
                return Err(ReplicatedError::Missing { index, found: None });
            }
            for record in records {
                if record.meta.seq != index {
                    return Err(ReplicatedError::Missing {
                        index,
                        found: Some(record.meta.seq),
                    });
                }
                if record.meta.count != 1 {
                    return Err(ReplicatedError::NotAnEntry {
                        index,
                        count: record.meta.count,
                    });
                }
                let step = if record.meta.tag & MEMBERSHIP_TAG == 0 {
                    cursor.step(&record.payload)
                } else {
                    // As `apply` was given it: the no-op.
                    cursor.step(&Bytes::new())
                };
                index += 1;
                // The state in front of the next sample must be the one `apply` recorded there.
                if let Some(check) = view.check.filter(|c| c.index == index) {
                    if check != Sample::at(index, &cursor) {
                        return Err(ReplicatedError::Diverged { index });
                    }
                }
                if let Step::Appended {
                    base_offset,
                    message_count,
                    timestamp,
                    batch,
                } = step
                {
                    let batch = StoredBatch {
                        base_offset,
                        message_count,
                        timestamp,
                        bytes: batch,
                    };
                    if visit(batch).is_break() {
                        return Ok(cursor);
                    }
                }
                if index > through {
                    break;
                }
            }
        }
        Ok(cursor)
    }
}

impl PollSource for ReplicatedPartition {
    type Error = ReplicatedError;

    fn poll_stats(&self) -> PartitionStats {
        self.stats()
    }

    fn first_offset_at(&self, timestamp: u64) -> Result<Option<u64>, ReplicatedError> {
        self.offset_at_timestamp(timestamp)
    }

    fn read_batches(
        &self,
        start: u64,
        count: u64,
        max_bytes: u64,
    ) -> Result<Vec<StoredBatch>, ReplicatedError> {
        self.read(start, count, max_bytes)
    }
}
