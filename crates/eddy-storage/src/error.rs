//! The crate's error type.
//!
//! One enum, [`StorageError`], for everything the storage layer can report, plus small detail
//! enums ([`Corruption`], [`IoOp`], [`MetadataError`]) that give callers something to match on.
//! Causes are chained with `#[source]`, never stringified. Errors that must be delivered to many
//! waiters at once (a failed group commit) share their cause through an [`Arc`].

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Everything eddy-storage can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// An I/O call failed.
    #[error("i/o error during {op} of {path}")]
    Io {
        /// What the storage layer was doing.
        op: IoOp,
        /// The file or directory, relative to the backend root.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The device (or the fault-injecting backend) is full; the write was refused and rolled
    /// back. Everything acknowledged before it is intact and the log keeps accepting writes.
    #[error("no space left while appending to {path}; the write was refused and nothing acknowledged was lost")]
    NoSpace {
        /// The file that could not grow.
        path: PathBuf,
        /// The operating system's error (shared by every write of the refused group).
        #[source]
        source: Arc<io::Error>,
    },
    /// An fsync (or the write before it) failed in a way that cannot be retried safely: the log
    /// is fail-stopped, every pending and future write is refused, nothing more is acknowledged.
    #[error("log {path} has fail-stopped after an unrecoverable i/o error and refuses writes")]
    LogFailed {
        /// The log directory.
        path: PathBuf,
        /// The error that stopped it.
        #[source]
        source: Arc<io::Error>,
    },
    /// Stored bytes do not verify.
    #[error("corrupt data in {path} at byte {offset}: {kind}")]
    Corrupt {
        /// The damaged file, relative to the backend root.
        path: PathBuf,
        /// Byte position of the damaged record or structure in that file.
        offset: u64,
        /// What is wrong.
        kind: Corruption,
    },
    /// A value read from disk claims a size above a named limit.
    #[error("{what} of {size} bytes in {path} exceeds the limit of {limit} bytes")]
    TooLarge {
        /// What was measured.
        what: &'static str,
        /// The claimed size.
        size: u64,
        /// The named limit it exceeds.
        limit: u64,
        /// Where it was read.
        path: PathBuf,
    },
    /// A record or batch handed to the storage layer exceeds a named limit.
    #[error("{what} of {size} exceeds the limit of {limit}")]
    LimitExceeded {
        /// What was measured.
        what: &'static str,
        /// The offending value.
        size: u64,
        /// The named limit.
        limit: u64,
    },
    /// An append carried a sequence number other than the log's next one.
    #[error("out-of-order append to {path}: expected sequence {expected}, got {found}")]
    OutOfOrder {
        /// The log directory.
        path: PathBuf,
        /// The log's next sequence number.
        expected: u64,
        /// What the caller supplied.
        found: u64,
    },
    /// The storage layer is shutting down (or the writer thread is gone) and cannot complete the
    /// request.
    #[error("the storage writer has shut down")]
    Shutdown,
    /// A metadata operation was rejected by validation; nothing was written.
    #[error("metadata operation rejected")]
    Metadata(#[from] MetadataError),
    /// An event-store request was refused by validation; nothing was written.
    #[error("event store request refused")]
    Event(#[from] crate::events::EventError),
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
    /// A configuration value is out of its allowed range.
    #[error("invalid configuration: {field} = {value}")]
    InvalidConfig {
        /// The configuration field.
        field: &'static str,
        /// The rejected value.
        value: u64,
    },
    /// A metadata snapshot or state file could not be encoded or decoded.
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

impl StorageError {
    /// Builds an [`StorageError::Io`] from its parts.
    pub(crate) fn io(op: IoOp, path: impl Into<PathBuf>, source: io::Error) -> Self {
        StorageError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Builds a [`StorageError::Corrupt`] from its parts.
    pub(crate) fn corrupt(path: impl Into<PathBuf>, offset: u64, kind: Corruption) -> Self {
        StorageError::Corrupt {
            path: path.into(),
            offset,
            kind,
        }
    }

    /// True when the error is the clear "interior corruption" refusal of recovery.
    pub fn is_corruption(&self) -> bool {
        matches!(self, StorageError::Corrupt { .. })
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

/// The I/O step that failed, for [`StorageError::Io`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoOp {
    /// Opening or creating a file.
    Open,
    /// Reading.
    Read,
    /// Appending.
    Append,
    /// Truncating.
    Truncate,
    /// fdatasync of a file.
    Sync,
    /// fsync of a directory.
    SyncDir,
    /// Listing a directory.
    List,
    /// Creating a directory.
    CreateDir,
    /// Removing a file or directory.
    Remove,
    /// Renaming a file.
    Rename,
    /// Reading a file's length.
    Len,
}

impl fmt::Display for IoOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoOp::Open => "open",
            IoOp::Read => "read",
            IoOp::Append => "append",
            IoOp::Truncate => "truncate",
            IoOp::Sync => "sync",
            IoOp::SyncDir => "directory sync",
            IoOp::List => "listing",
            IoOp::CreateDir => "directory creation",
            IoOp::Remove => "removal",
            IoOp::Rename => "rename",
            IoOp::Len => "length query",
        })
    }
}

/// What exactly failed to verify, for [`StorageError::Corrupt`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Corruption {
    /// A record does not start with the record magic.
    BadRecordMagic,
    /// The record header's checksum does not match.
    HeaderChecksum,
    /// The record payload's checksum does not match.
    PayloadChecksum,
    /// A reserved or structural header field holds an impossible value.
    BadHeaderField(&'static str),
    /// A record's sequence number does not continue the previous record's.
    NonContiguous {
        /// The sequence number the log expected.
        expected: u64,
        /// The sequence number the record carries.
        found: u64,
    },
    /// The record (or header) runs past the end of the file.
    Truncated,
    /// A segment file header is damaged or of an unknown version.
    BadSegmentHeader,
    /// A sealed segment is damaged at its end (sealed segments are fully synced before the next
    /// one is created, so they can never have a torn tail).
    SealedSegmentTail,
    /// A segment's file name does not agree with its header or first record.
    NameMismatch,
    /// Segments overlap or a non-last segment is missing its records.
    SegmentOrder,
    /// A snapshot or state file failed its checksum.
    FileChecksum,
    /// A snapshot or state file has an unknown format version.
    UnknownVersion(u32),
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::BadRecordMagic => f.write_str("record magic mismatch"),
            Corruption::HeaderChecksum => f.write_str("record header checksum mismatch"),
            Corruption::PayloadChecksum => f.write_str("record payload checksum mismatch"),
            Corruption::BadHeaderField(field) => write!(f, "impossible value in field {field}"),
            Corruption::NonContiguous { expected, found } => {
                write!(f, "sequence {found} does not follow {expected}")
            }
            Corruption::Truncated => f.write_str("record runs past the end of the file"),
            Corruption::BadSegmentHeader => {
                f.write_str("segment header damaged or unknown version")
            }
            Corruption::SealedSegmentTail => f.write_str("sealed segment ends in a damaged record"),
            Corruption::NameMismatch => f.write_str("file name disagrees with its contents"),
            Corruption::SegmentOrder => {
                f.write_str("segments overlap or a sealed segment is empty")
            }
            Corruption::FileChecksum => f.write_str("file checksum mismatch"),
            Corruption::UnknownVersion(v) => write!(f, "unknown format version {v}"),
        }
    }
}

/// Why a metadata operation was rejected. Rejection is deterministic: every replica applying
/// the same ordered operations rejects the same ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
        what: &'static str,
        /// The value.
        value: u64,
        /// The limit.
        limit: u64,
    },
    /// An id counter is exhausted.
    #[error("{0} ids are exhausted")]
    IdsExhausted(Entity),
}

/// The kinds of metadata entities, for error reporting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
pub type Result<T, E = StorageError> = std::result::Result<T, E>;
