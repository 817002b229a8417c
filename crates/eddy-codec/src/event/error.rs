//! Errors of the event codecs: [`DecodeError`] for a body that does not decode,
//! [`EventCodecError`] for the frame-level operations that wrap decoding, decompression and
//! framing.

use eddy_wire::event::{CompressionError, FrameEncodeError};

/// A body that is not a valid encoding of the expected message. Offsets are byte offsets
/// into the (decompressed) body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The body ends before the value does.
    #[error("body truncated at offset {offset}: need {needed} more bytes, {available} available")]
    UnexpectedEnd {
        /// Where the missing value starts.
        offset: usize,
        /// Bytes the value needs.
        needed: usize,
        /// Bytes left in the body.
        available: usize,
    },
    /// A length or element count that cannot fit in the rest of the body (refused before
    /// allocating anything for it).
    #[error("length {length} at offset {offset} exceeds the {available} bytes left")]
    LengthTooLarge {
        /// Where the length prefix is.
        offset: usize,
        /// The claimed length or count.
        length: u64,
        /// Bytes left in the body.
        available: usize,
    },
    /// A bool byte other than 0 or 1 (V2).
    #[error("invalid bool byte {byte:#04x} at offset {offset}")]
    InvalidBool {
        /// Where.
        offset: usize,
        /// The byte.
        byte: u8,
    },
    /// An option tag other than 0 or 1 (V2).
    #[error("invalid option tag {tag:#04x} at offset {offset}")]
    InvalidOptionTag {
        /// Where.
        offset: usize,
        /// The tag.
        tag: u8,
    },
    /// A string that is not UTF-8.
    #[error("invalid utf-8 in the string at offset {offset}")]
    InvalidUtf8 {
        /// Where the string bytes start.
        offset: usize,
        /// The UTF-8 error.
        #[source]
        source: std::str::Utf8Error,
    },
    /// A `MessagePack` marker of the wrong kind (V3).
    #[error("unexpected marker {marker:#04x} at offset {offset}, expected {expected}")]
    UnexpectedMarker {
        /// Where.
        offset: usize,
        /// The marker byte.
        marker: u8,
        /// What was expected.
        expected: &'static str,
    },
    /// An integer outside the field's range (negative, or too large).
    #[error("integer at offset {offset} out of range for {target}")]
    IntegerOutOfRange {
        /// Where.
        offset: usize,
        /// The field's type.
        target: &'static str,
    },
    /// A byte string of the wrong length (u128 as bin other than 16 bytes, an `iv` other
    /// than 12 bytes).
    #[error("byte string of {actual} bytes at offset {offset}, expected {expected}")]
    WrongByteLength {
        /// Where.
        offset: usize,
        /// Required length.
        expected: usize,
        /// Received length.
        actual: usize,
    },
    /// A V3 struct array with too few or too many elements.
    #[error("{message} encoded with {actual} fields, expected {min}..={max}")]
    FieldCount {
        /// Struct name.
        message: &'static str,
        /// Fields without a default.
        min: usize,
        /// All fields.
        max: usize,
        /// Received.
        actual: usize,
    },
    /// A V3 struct map without a required field.
    #[error("{message} is missing field {field}")]
    MissingField {
        /// Struct name.
        message: &'static str,
        /// Field name.
        field: &'static str,
    },
    /// A V3 struct map naming a field twice.
    #[error("{message} has field {field} twice")]
    DuplicateField {
        /// Struct name.
        message: &'static str,
        /// Field name.
        field: &'static str,
    },
    /// An enum value that is not defined.
    #[error("invalid {type_name} value {value} at offset {offset}")]
    InvalidEnumValue {
        /// Where.
        offset: usize,
        /// Enum name.
        type_name: &'static str,
        /// Received value.
        value: u64,
    },
    /// Bytes left after the top-level message.
    #[error("{remaining} trailing bytes after the message at offset {offset}")]
    TrailingBytes {
        /// End of the message.
        offset: usize,
        /// Bytes after it.
        remaining: usize,
    },
}

/// Frame-level failures of [`super::decode_request`], [`super::encode_response`] and their
/// client-side counterparts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventCodecError {
    /// The (decompressed) body does not decode as the frame's message type.
    #[error("malformed {message} body")]
    Decode {
        /// Message type name.
        message: &'static str,
        /// Why.
        #[source]
        source: DecodeError,
    },
    /// A compressed body could not be decompressed.
    #[error("body decompression failed")]
    Decompress(#[source] CompressionError),
    /// The message cannot be framed (fixed body above 1007 bytes, body above the limit).
    #[error("message cannot be framed")]
    Encode(#[source] FrameEncodeError),
}
