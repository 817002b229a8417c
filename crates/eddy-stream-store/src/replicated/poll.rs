//! The poll strategies (stream protocol 7.5), written once for every partition kind.
//!
//! [`poll_batches`] is the one poll logic, over the three reads a poll needs ([`PollSource`]):
//! `Partition::poll` and [`ReplicatedPartition`](super::ReplicatedPartition)'s poll both call
//! it, so the two answer every poll the same way.

use crate::error::StreamStoreError;
use crate::partition::{Partition, PartitionStats, PollStrategy, Polled, StoredBatch};

/// What a poll reads from a partition.
pub trait PollSource {
    /// The read error.
    type Error;

    /// Counters: `first_offset`, `current_offset` and `messages` are used.
    fn poll_stats(&self) -> PartitionStats;

    /// The first visible offset whose batch timestamp is at or after `timestamp` (µs).
    fn first_offset_at(&self, timestamp: u64) -> Result<Option<u64>, Self::Error>;

    /// Batches covering offsets `start..start + count` (clamped to what is visible), stopping
    /// once they hold `max_bytes` (at least one batch when any qualifies).
    fn read_batches(
        &self,
        start: u64,
        count: u64,
        max_bytes: u64,
    ) -> Result<Vec<StoredBatch>, Self::Error>;
}

/// Polls per the stream protocol's rules (7.5): `stored_offset` is the consumer's stored
/// offset, used by [`PollStrategy::Next`]. At most `count` messages and roughly `max_bytes` of
/// batches are returned (at least one batch when any message qualifies).
pub fn poll_batches<S: PollSource + ?Sized>(
    source: &S,
    partition_id: u32,
    strategy: PollStrategy,
    count: u32,
    stored_offset: Option<u64>,
    max_bytes: u64,
) -> Result<Polled, S::Error> {
    let stats = source.poll_stats();
    if stats.messages == 0 || count == 0 {
        return Ok(Polled::empty(partition_id, stats.current_offset));
    }
    let current = stats.current_offset;
    let start = match strategy {
        PollStrategy::Offset(v) => v,
        PollStrategy::First => stats.first_offset,
        PollStrategy::Last => current.saturating_sub(u64::from(count) - 1),
        PollStrategy::Next => stored_offset.map_or(0, |o| o.saturating_add(1)),
        PollStrategy::Timestamp(t) => match source.first_offset_at(t)? {
            Some(offset) => offset,
            None => return Ok(Polled::empty(partition_id, current)),
        },
    };
    if start > current {
        return Ok(Polled::empty(partition_id, current));
    }
    let start = start.max(stats.first_offset);
    let end = start.saturating_add(u64::from(count)).min(current + 1);
    let batches = source.read_batches(start, end - start, max_bytes)?;
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

impl PollSource for Partition {
    type Error = StreamStoreError;

    fn poll_stats(&self) -> PartitionStats {
        self.stats()
    }

    fn first_offset_at(&self, timestamp: u64) -> Result<Option<u64>, StreamStoreError> {
        self.offset_at_timestamp(timestamp)
    }

    fn read_batches(
        &self,
        start: u64,
        count: u64,
        max_bytes: u64,
    ) -> Result<Vec<StoredBatch>, StreamStoreError> {
        self.read(start, count, max_bytes)
    }
}
