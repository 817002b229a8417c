//! The error type of the stream framing layer.

use super::command::Command;

/// Everything that can go wrong while framing or interpreting a stream-protocol header.
///
/// "Need more bytes" is *not* an error: [`super::frame::decode`] reports it as
/// [`super::frame::Decoded::Incomplete`]. Every variant here means the bytes are invalid and the
/// connection (or at least the request) cannot be interpreted as sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The `size` field is below the 256-byte header size.
    #[error("frame size {size} is smaller than the {min}-byte header")]
    FrameTooSmall {
        /// Value of the `size` field.
        size: u32,
        /// The minimum, [`super::header::HEADER_SIZE`].
        min: u32,
    },
    /// The `size` field exceeds the configured frame limit.
    #[error("frame size {size} exceeds the limit of {limit} bytes")]
    FrameTooLarge {
        /// Value of the `size` field.
        size: u32,
        /// The limit in force.
        limit: u32,
    },
    /// Byte 60 holds a value that is not a `Command` discriminant (0..=29).
    #[error("unknown frame command {value}")]
    UnknownCommand {
        /// The byte found.
        value: u8,
    },
    /// A typed header decode found a different frame command than it expects.
    #[error("expected a {expected:?} header, found {found:?}")]
    UnexpectedCommand {
        /// Command the decoder handles.
        expected: Command,
        /// Command found at byte 60.
        found: Command,
    },
    /// An operation byte that is not a valid `Operation` discriminant.
    #[error("invalid operation byte {value}")]
    InvalidOperation {
        /// The byte found.
        value: u8,
    },
    /// An eviction reason byte that is not a known `EvictionReason`.
    #[error("invalid eviction reason {value}")]
    InvalidEvictionReason {
        /// The byte found.
        value: u8,
    },
    /// A header field breaks a rule of the header it belongs to.
    #[error("invalid {header} header field `{field}`: {rule}")]
    InvalidField {
        /// Which header (`request`, `reply`, `eviction`).
        header: &'static str,
        /// The field name as in the spec.
        field: &'static str,
        /// The rule that was broken.
        rule: &'static str,
    },
    /// The buffer handed to a fixed-size decoder is shorter than a header.
    #[error("header needs {need} bytes, got {have}")]
    ShortHeader {
        /// Bytes required.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A frame body does not match the size the header announces.
    #[error("frame announces {expected} body bytes but {actual} were given")]
    BodyLengthMismatch {
        /// `size - 256`.
        expected: usize,
        /// Bytes actually present.
        actual: usize,
    },
    /// A body too large to describe in the u32 `size` field, or over the frame limit.
    #[error("body of {len} bytes does not fit a frame of at most {limit} bytes")]
    BodyTooLarge {
        /// Body length.
        len: usize,
        /// Frame limit.
        limit: u32,
    },
}
