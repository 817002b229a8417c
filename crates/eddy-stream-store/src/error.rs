//! The stream store's error type.
//!
//! [`StreamStoreError`] is what every operation of this crate can fail with: a refusal of the
//! metadata state machine ([`MetadataError`], deterministic: every replica refuses the same
//! operations), a partition that does not exist, an encoding failure of a snapshot or state
//! file, or a failure of the log machinery underneath ([`LogError`], carried whole). Causes are
//! chained with `#[source]`, never stringified.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::path::PathBuf;

use eddy_log::{Corruption, IoOp, LogError};

/// Everything the stream store can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamStoreError {
    /// The log machinery failed (I/O, corruption, a full disk, a fail-stopped log, a limit,
    /// shutdown).
    #[error(transparent)]
    Log(#[from] LogError),
    /// A metadata operation was rejected by validation; nothing was written.
    #[error("metadata operation rejected")]
    Metadata(#[from] MetadataError),
    /// The partition does not exist (or was deleted while the request was in flight).
    #[error("partition {stream_id}/{topic_id}/{partition_id} not found")]
    PartitionNotFound {
        /// Stream id.
        stream_id: u32,
        /// Topic id.
        topic_id: u32,
        /// Partition id.
        partition_id: u32,
    },
    /// The partition's last purge did not finish (purging its log or replacing its state file
    /// failed: a full disk, an I/O error). The partition is fail-stopped: it refuses appends
    /// and polls until a purge completes (a retry of the purge, or the restart that finishes
    /// it), because whatever it accepted before that would be deleted when the purge finishes.
    #[error("partition {stream_id}/{topic_id}/{partition_id} is stopped until its unfinished purge completes (retry the purge or restart the server)")]
    PurgeUnfinished {
        /// Stream id.
        stream_id: u32,
        /// Topic id.
        topic_id: u32,
        /// Partition id.
        partition_id: u32,
    },
    /// A metadata snapshot or operation could not be encoded or decoded.
    #[error("cannot {action} {path}")]
    Encoding {
        /// `"encode"` or `"decode"`.
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The codec's error.
        #[source]
        source: EncodingError,
    },
}

impl StreamStoreError {
    /// An I/O failure of `op` on `path`.
    pub(crate) fn io(op: IoOp, path: impl Into<PathBuf>, source: io::Error) -> Self {
        LogError::io(op, path, source).into()
    }

    /// Bytes at `offset` of `path` do not verify.
    pub(crate) fn corrupt(path: impl Into<PathBuf>, offset: u64, kind: Corruption) -> Self {
        LogError::corrupt(path, offset, kind).into()
    }

    /// True when the error is the clear "interior corruption" refusal of recovery.
    pub fn is_corruption(&self) -> bool {
        matches!(self, StreamStoreError::Log(e) if e.is_corruption())
    }
}

/// A bincode encode or decode failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodingError {
    /// Encoding failed.
    #[error("bincode encode failed")]
    Encode(#[source] bincode::error::EncodeError),
    /// Decoding failed.
    #[error("bincode decode failed")]
    Decode(#[source] bincode::error::DecodeError),
    /// Decoding left bytes unread.
    #[error("{0} trailing bytes after the encoded value")]
    Trailing(usize),
}

/// Why a metadata operation was rejected. Rejection is deterministic: every replica applying
/// the same ordered operations rejects the same ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum MetadataError {
    /// The stream does not exist.
    #[error("stream {0} not found")]
    StreamNotFound(u32),
    /// The topic does not exist.
    #[error("topic {topic_id} not found in stream {stream_id}")]
    TopicNotFound {
        /// Stream id.
        stream_id: u32,
        /// Topic id.
        topic_id: u32,
    },
    /// The partition does not exist.
    #[error("partition {partition_id} not found in topic {stream_id}/{topic_id}")]
    PartitionNotFound {
        /// Stream id.
        stream_id: u32,
        /// Topic id.
        topic_id: u32,
        /// Partition id.
        partition_id: u32,
    },
    /// An id is already taken.
    #[error("{entity} id {id} already exists")]
    IdTaken {
        /// Which kind of entity.
        entity: Entity,
        /// The id.
        id: u32,
    },
    /// A name is already taken in its scope.
    #[error("{entity} name already exists")]
    NameTaken {
        /// Which kind of entity.
        entity: Entity,
        /// The name.
        name: String,
    },
    /// The user does not exist.
    #[error("user {0} not found")]
    UserNotFound(u32),
    /// The personal access token does not exist.
    #[error("personal access token {name} of user {user_id} not found")]
    TokenNotFound {
        /// Owner.
        user_id: u32,
        /// Token name.
        name: String,
    },
    /// The consumer group does not exist.
    #[error("consumer group {group_id} not found in topic {stream_id}/{topic_id}")]
    GroupNotFound {
        /// Stream id.
        stream_id: u32,
        /// Topic id.
        topic_id: u32,
        /// Group id.
        group_id: u32,
    },
    /// The consumer has no stored offset on that partition.
    #[error("no stored offset for that consumer")]
    OffsetNotFound,
    /// A count or size is outside its named limit.
    #[error("{what} = {value} is outside its limit {limit}")]
    Limit {
        /// What was measured.
        what: Cow<'static, str>,
        /// The value.
        value: u64,
        /// The limit.
        limit: u64,
    },
    /// An id counter is exhausted.
    #[error("{0} ids are exhausted")]
    IdsExhausted(Entity),
    /// A placed operation ([`crate::metadata::MetadataOp::Placed`]) that does not create
    /// partitions, or whose replicas are empty, too many or repeated.
    #[error("invalid placement: {0}")]
    Placement(Cow<'static, str>),
    /// The cluster member is not recorded.
    #[error("member {0} is not a recorded cluster member")]
    MemberNotFound(u64),
}

impl MetadataError {
    /// The refusal as bytes, to carry it to another member (the cluster's forwarded writes).
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        // Plain data (integers, strings, unit-like enums): encoding cannot fail.
        bincode::serde::encode_to_vec(self, bincode::config::standard()).unwrap_or_default()
    }

    /// A refusal [`MetadataError::to_bytes`] encoded, or `None` when `bytes` is not exactly one.
    #[must_use]
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        match bincode::serde::decode_from_slice(bytes, bincode::config::standard()) {
            Ok((refusal, used)) if used == bytes.len() => Some(refusal),
            _ => None,
        }
    }
}

/// The kinds of metadata entities, for error reporting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Entity {
    /// A stream.
    Stream,
    /// A topic.
    Topic,
    /// A partition.
    Partition,
    /// A user.
    User,
    /// A personal access token.
    Token,
    /// A consumer group.
    ConsumerGroup,
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Entity::Stream => "stream",
            Entity::Topic => "topic",
            Entity::Partition => "partition",
            Entity::User => "user",
            Entity::Token => "personal access token",
            Entity::ConsumerGroup => "consumer group",
        })
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = StreamStoreError> = std::result::Result<T, E>;
