//! The one error enum of this crate, with the narrow [`TlvError`] for structural block defects.

/// A structural defect of a TLV block (spec §3.10): the bytes are not a well-formed sequence of
/// key/value pairs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlvError {
    /// The block ends inside an entry.
    #[error("block truncated at offset {offset}: {need} more bytes needed")]
    Truncated {
        /// Offset of the incomplete field.
        offset: usize,
        /// Bytes missing.
        need: usize,
    },
    /// A kind byte is 0 (reserved).
    #[error("kind byte at offset {offset} is 0")]
    ZeroKind {
        /// Offset of the kind byte.
        offset: usize,
    },
    /// A field length is outside 1..=255.
    #[error("field length {len} at offset {offset} is outside 1..=255")]
    FieldLength {
        /// Offset of the u32 length.
        offset: usize,
        /// The length found.
        len: u32,
    },
    /// The entries do not pair up into key/value pairs.
    #[error("odd number of tlv entries ({entries})")]
    OddEntries {
        /// Entries found.
        entries: usize,
    },
}

/// Everything that can be wrong with an options block, a catalog lookup or a
/// `DESCRIBE_OPTIONS` body.
///
/// The server maps these to protocol codes at its edge: `Malformed`, `KeyNotString`,
/// `KeyNotUtf8`, `DuplicateKey`, `UnknownScope`, `Describe` are undecodable input
/// (`InvalidCommand`); `TooLarge`/`TooManyEntries` are `OptionsBlockTooLarge`;
/// `UnsupportedKey` is `UnsupportedOptionKey`; `InvalidValue` is `InvalidOptionValue`;
/// `MaxTopicSizeBelowSegment` is `InvalidTopicSize`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionsError {
    /// The block is not a well-formed TLV block.
    #[error("malformed options block")]
    Malformed {
        /// The structural defect.
        #[source]
        defect: TlvError,
    },
    /// The block exceeds the byte limit.
    #[error("options block is {bytes} bytes, over the limit of {limit}")]
    TooLarge {
        /// Block size.
        bytes: usize,
        /// [`crate::block::MAX_OPTIONS_BYTES`].
        limit: usize,
    },
    /// The block has too many entries.
    #[error("options block has {entries} entries, over the limit of {limit}")]
    TooManyEntries {
        /// Entries in the block.
        entries: usize,
        /// [`crate::block::MAX_OPTIONS`].
        limit: usize,
    },
    /// An option key is not of kind String (2).
    #[error("option key kind {kind} is not string")]
    KeyNotString {
        /// The kind byte found.
        kind: u8,
    },
    /// An option key is not valid UTF-8.
    #[error("option key is not valid utf-8")]
    KeyNotUtf8,
    /// The same key appears twice.
    #[error("duplicate option key `{key}`")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },
    /// The key is not in the scope's catalog, or not updatable in an update.
    #[error("unsupported {scope} option key `{key}`")]
    UnsupportedKey {
        /// Catalog scope.
        scope: &'static str,
        /// The key (at most 255 bytes).
        key: String,
    },
    /// The value is of a kind the key does not accept, or out of bounds.
    #[error("invalid value for option `{key}`: {reason}")]
    InvalidValue {
        /// The option key.
        key: &'static str,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// An explicit `max_topic_size` is smaller than the topic's segment size.
    #[error("max_topic_size {max_topic_size} is below the segment size {segment_size}")]
    MaxTopicSizeBelowSegment {
        /// Requested cap.
        max_topic_size: u64,
        /// Resolved segment size.
        segment_size: u64,
    },
    /// A scope byte other than 1 (topic), 2 (stream), 3 (user).
    #[error("unknown options scope {value}")]
    UnknownScope {
        /// The byte found.
        value: u8,
    },
    /// A `DESCRIBE_OPTIONS` reply body that cannot be decoded.
    #[error("malformed describe-options body at offset {offset}: {reason}")]
    Describe {
        /// Offset of the problem.
        offset: usize,
        /// What was wrong.
        reason: &'static str,
    },
}

impl From<TlvError> for OptionsError {
    fn from(defect: TlvError) -> Self {
        Self::Malformed { defect }
    }
}
