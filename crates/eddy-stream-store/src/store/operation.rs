//! The unit of the commit pipeline: an [`Operation`], what committing it did ([`Applied`]),
//! and the handle that acknowledges it ([`Commit`]).

use bytes::Bytes;
use eddy_log::{Completion, LogError, SegmentSummary};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StreamStoreError};
use crate::metadata::MetadataOp;
use crate::partition::{AppendTicket, Appended, PartitionAddr};

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

/// The pending result of [`StreamStore::commit`](super::StreamStore::commit): block on it with
/// [`Commit::wait`] or `.await` it.
#[derive(Debug)]
#[must_use = "the commit is acknowledged through this handle"]
pub struct Commit {
    pub(super) inner: CommitInner,
}

#[derive(Debug)]
pub(super) enum CommitInner {
    Ready(Option<Result<Applied>>),
    Metadata(Completion<Applied, StreamStoreError>),
    Append(AppendTicket),
}

impl Commit {
    pub(super) fn ready(result: Result<Applied>) -> Self {
        Commit {
            inner: CommitInner::Ready(Some(result)),
        }
    }

    /// Blocks until the operation is durable and applied.
    pub fn wait(self) -> Result<Applied> {
        match self.inner {
            CommitInner::Ready(result) => result.unwrap_or(Err(LogError::Shutdown.into())),
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
                Poll::Ready(result.take().unwrap_or(Err(LogError::Shutdown.into())))
            }
            CommitInner::Metadata(c) => Pin::new(c).poll(cx),
            CommitInner::Append(t) => Pin::new(t).poll(cx).map(|r| r.map(Applied::Appended)),
        }
    }
}
