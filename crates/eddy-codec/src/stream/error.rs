//! Errors of the stream codecs: [`CodecError`] for bodies, [`BatchError`] for message batches.

use eddy_options::OptionsError;
use eddy_wire::stream::WireError;

/// A body that cannot be decoded (or a value that cannot be encoded) as the spec describes.
///
/// At the server edge every variant except `Options` and `Batch` (which carry more precise
/// codes) answers `InvalidCommand` (3); `UnknownCommand` is also `InvalidCommand`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The body ends before a field is complete.
    #[error("`{field}` truncated at offset {offset}: need {need} bytes, have {have}")]
    Truncated {
        /// Field being read.
        field: &'static str,
        /// Offset of the field in the body.
        offset: usize,
        /// Bytes the field needs.
        need: usize,
        /// Bytes left.
        have: usize,
    },
    /// A tag or enum byte outside its allowed values.
    #[error("`{field}` has invalid value {value} at offset {offset}")]
    InvalidDiscriminant {
        /// Field being read.
        field: &'static str,
        /// The value found.
        value: u64,
        /// Offset of the field.
        offset: usize,
    },
    /// A field breaks a rule of the spec.
    #[error("`{field}` at offset {offset} is invalid: {reason}")]
    InvalidValue {
        /// Field being read.
        field: &'static str,
        /// Offset of the field.
        offset: usize,
        /// The rule broken.
        reason: &'static str,
    },
    /// A string field is not valid UTF-8.
    #[error("`{field}` at offset {offset} is not valid utf-8")]
    InvalidUtf8 {
        /// Field being read.
        field: &'static str,
        /// Offset of the field.
        offset: usize,
    },
    /// A structure that must fill its buffer exactly has bytes left over.
    #[error("{extra} unexpected trailing bytes after `{field}`")]
    TrailingBytes {
        /// The structure.
        field: &'static str,
        /// Bytes left over.
        extra: usize,
    },
    /// A count or length beyond a named limit.
    #[error("`{field}` is {value}, over the limit of {limit}")]
    LimitExceeded {
        /// Field being read or written.
        field: &'static str,
        /// The value.
        value: u64,
        /// The limit.
        limit: u64,
    },
    /// A value that cannot be encoded (for example a name longer than 255 bytes).
    #[error("cannot encode `{field}`: {reason}")]
    Unencodable {
        /// Field being written.
        field: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// A command code unknown to the catalog.
    #[error("unknown command code {code}")]
    UnknownCommand {
        /// The code.
        code: u32,
    },
    /// A request whose operation byte cannot be routed to a command.
    #[error("operation {operation} cannot be routed to a command")]
    UnroutableOperation {
        /// The raw operation byte.
        operation: u8,
    },
    /// A login body without a decodable version prefix, or decodable in neither shape.
    #[error("malformed login body")]
    MalformedLogin,
    /// A reply carried an error (non-zero status or a rejection result section).
    #[error("reply carries error code {code}")]
    ErrorReply {
        /// The error code.
        code: u32,
    },
    /// An options block in a body is malformed or over the limits.
    #[error("invalid options block")]
    Options {
        /// The options error.
        #[source]
        source: OptionsError,
    },
    /// A header problem found while building or reading a frame.
    #[error("invalid frame header")]
    Wire {
        /// The framing error.
        #[source]
        source: WireError,
    },
    /// A message batch failed its checks.
    #[error("invalid message batch")]
    Batch {
        /// The batch error.
        #[source]
        source: BatchError,
    },
}

impl From<OptionsError> for CodecError {
    fn from(source: OptionsError) -> Self {
        Self::Options { source }
    }
}

impl From<WireError> for CodecError {
    fn from(source: WireError) -> Self {
        Self::Wire { source }
    }
}

impl From<BatchError> for CodecError {
    fn from(source: BatchError) -> Self {
        Self::Batch { source }
    }
}

/// Why a message batch was rejected (spec §4). Each variant names the first defect found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// Fewer bytes than a batch header, a frame header or a frame's declared contents.
    #[error("batch truncated at offset {offset}: need {need} bytes, have {have}")]
    Truncated {
        /// Offset within the batch.
        offset: usize,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// `batch_length` is below 256, or does not match the bytes given.
    #[error("batch_length {batch_length} does not match the {actual} bytes of the batch")]
    LengthMismatch {
        /// Header field.
        batch_length: u64,
        /// Bytes present.
        actual: usize,
    },
    /// The batch exceeds [`super::batch::MAX_BATCH_BYTES`].
    #[error("batch of {bytes} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// Batch size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// Non-zero reserved bytes in the batch header (52..256).
    #[error("batch header reserved byte at offset {offset} is not zero")]
    HeaderReserved {
        /// Offset within the header.
        offset: usize,
    },
    /// Non-zero reserved bytes in a frame header (40..48).
    #[error("frame {index} has non-zero reserved bytes")]
    FrameReserved {
        /// Frame index.
        index: u32,
    },
    /// `message_count` is zero.
    #[error("batch has no messages")]
    Empty,
    /// `message_count` exceeds [`super::batch::MAX_BATCH_MESSAGES`].
    #[error("batch declares {count} messages, over the limit of {limit}")]
    TooManyMessages {
        /// Declared count.
        count: u32,
        /// The limit.
        limit: u32,
    },
    /// The frames do not tile the batch exactly with `message_count` frames.
    #[error("frames do not tile the batch: header says {declared} messages, found {found}")]
    CountMismatch {
        /// `message_count` (or the request's `messages_count`).
        declared: u32,
        /// Frames found.
        found: u32,
    },
    /// A frame's `offset_delta` differs from its index.
    #[error("frame {index} has offset_delta {offset_delta}")]
    OffsetDelta {
        /// Frame index.
        index: u32,
        /// The delta found.
        offset_delta: u32,
    },
    /// A frame checksum does not match its contents (`InvalidMessageChecksum`, 4027).
    #[error("frame {index} checksum mismatch: stored {stored:#018x}, computed {computed:#018x}")]
    MessageChecksum {
        /// Frame index.
        index: u32,
        /// Checksum in the frame.
        stored: u64,
        /// Checksum computed.
        computed: u64,
    },
    /// The batch checksum does not match (`InvalidBatchChecksum`, 4039).
    #[error("batch checksum mismatch: stored {stored:#018x}, computed {computed:#018x}")]
    BatchChecksum {
        /// Checksum in the header.
        stored: u64,
        /// Checksum computed.
        computed: u64,
    },
    /// A message cannot be put in a batch (builder side).
    #[error("message {index} cannot be batched: {reason}")]
    InvalidMessage {
        /// Message index.
        index: usize,
        /// Why.
        reason: &'static str,
    },
    /// The requested offset range does not intersect the stored batch.
    #[error("offsets {start}..{end} are outside the batch")]
    OutOfRange {
        /// First offset asked for.
        start: u64,
        /// One past the last offset asked for.
        end: u64,
    },
}
