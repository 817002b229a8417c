//! What a partition takes and gives: its address, the stamp a batch gets, stored batches,
//! append acknowledgements, poll strategies and results, counters, retention policies.

use bytes::Bytes;
use eddy_log::{Completion, LogConfig, RecordMeta, StoredRecord};

use crate::error::Result;

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

    pub(super) fn from_record(record: StoredRecord) -> Self {
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

    pub(super) fn from_meta(meta: RecordMeta) -> Self {
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
    pub(super) inner: Completion<RecordMeta>,
    /// The assigned base offset (known at once; durable only when the ticket resolves).
    pub base_offset: u64,
}

impl AppendTicket {
    /// Blocks until the batch is durable.
    pub fn wait(self) -> Result<Appended> {
        Ok(self.inner.wait().map(Appended::from_meta)?)
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
            .map(|r| r.map(Appended::from_meta).map_err(Into::into))
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

    pub(crate) fn empty(partition_id: u32, current_offset: u64) -> Self {
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
    /// Bytes of the stored batches, exactly as appended (stream protocol `size_bytes`: file
    /// and record headers are not counted, so an empty partition holds 0 bytes).
    pub size_bytes: u64,
    /// Segments.
    pub segments: u32,
}

/// Retention rules for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionPolicy {
    /// Delete sealed segments whose newest timestamp + this ≤ now (µs). `None`: never.
    pub message_expiry: Option<u64>,
    /// Delete the oldest sealed segments while the partition's sealed file bytes exceed this.
    /// `None`: unlimited. (The store applies `max_topic_size` over a whole topic instead: see
    /// [`StreamStore::run_retention`](crate::StreamStore::run_retention).)
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
