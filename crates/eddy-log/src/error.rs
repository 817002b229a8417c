//! The crate's error type.
//!
//! One enum, [`LogError`], for everything the log machinery can report, plus two detail enums
//! ([`Corruption`], [`IoOp`]) that give callers something to match on. It knows nothing of
//! what the records mean: the stores above keep their own error enums and wrap this one.
//! Causes are chained with `#[source]`, never stringified. Errors that must be delivered to many
//! waiters at once (a failed group commit) share their cause through an [`Arc`].

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Everything the log machinery can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
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
    /// Also the answer of [`write_atomic`](crate::write_atomic) on a full disk (the file keeps
    /// its old version).
    #[error("no space left while writing {path}; the write was refused and nothing acknowledged was lost")]
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
    /// [`Log::truncate_from`](crate::Log::truncate_from) was asked to cut where a log cannot be
    /// cut (inside a record, or below its first retained sequence number). Nothing changed,
    /// and the appends queued behind the truncation were refused with it.
    #[error("cannot truncate {path} from sequence {seq}: {reason}")]
    BadTruncation {
        /// The log directory.
        path: PathBuf,
        /// The requested cut.
        seq: u64,
        /// Why it is not a cut point.
        reason: &'static str,
    },
    /// The log is closed (or its writer thread is gone) and cannot complete the request.
    #[error("the storage writer has shut down")]
    Shutdown,
    /// A configuration value is out of its allowed range.
    #[error("invalid configuration: {field} = {value}")]
    InvalidConfig {
        /// The configuration field.
        field: &'static str,
        /// The rejected value.
        value: u64,
    },
}

impl LogError {
    /// Builds an [`LogError::Io`] from its parts.
    pub fn io(op: IoOp, path: impl Into<PathBuf>, source: io::Error) -> Self {
        LogError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Builds a [`LogError::Corrupt`] from its parts.
    pub fn corrupt(path: impl Into<PathBuf>, offset: u64, kind: Corruption) -> Self {
        LogError::Corrupt {
            path: path.into(),
            offset,
            kind,
        }
    }

    /// [`LogError::NoSpace`] when `source` says the device or quota is full, else
    /// [`LogError::Io`].
    pub fn io_or_no_space(op: IoOp, path: impl Into<PathBuf>, source: io::Error) -> Self {
        if is_no_space(&source) {
            LogError::NoSpace {
                path: path.into(),
                source: Arc::new(source),
            }
        } else {
            LogError::io(op, path, source)
        }
    }

    /// True when the error is the clear "interior corruption" refusal of recovery.
    pub fn is_corruption(&self) -> bool {
        matches!(self, LogError::Corrupt { .. })
    }
}

/// True for the errors of a full device or quota (`ENOSPC`, `EDQUOT`).
pub(crate) fn is_no_space(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// The I/O step that failed, for [`LogError::Io`].
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

/// What exactly failed to verify, for [`LogError::Corrupt`].
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
    /// An encrypted record payload does not open: no encryption key is configured, or another
    /// key than the one it was written with (see [`crate::cipher`]).
    Undecryptable,
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
            Corruption::Undecryptable => {
                f.write_str("encrypted payload does not decrypt (missing or different key)")
            }
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = LogError> = std::result::Result<T, E>;
