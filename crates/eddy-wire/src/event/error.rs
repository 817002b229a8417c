//! Errors of the event framing layer, one narrow enum per operation.
//!
//! A [`FrameError`] means the peer sent something that is not a valid frame: the server
//! closes the connection without answering. [`CompressionError`] covers the body
//! decompression step, [`DictionaryError`] loading a dictionary.

use super::header::ProtocolVersion;

/// Which of the two header lengths broke a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthField {
    /// `compressed_length`: bytes on the wire.
    Compressed,
    /// `uncompressed_length`: bytes after decompression.
    Uncompressed,
}

/// Whether a frame is read as a request (server side) or a response (client side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to server.
    Request,
    /// Server to client.
    Response,
}

/// A frame header or frame sequence that must be refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The version field is neither 2 nor 3 (also what a TLS `ClientHello` looks like).
    #[error("unsupported protocol version {version}")]
    UnsupportedVersion {
        /// The value received.
        version: u32,
    },
    /// The compression byte is neither 0 nor 1.
    #[error("unknown compression byte {byte}")]
    UnknownCompression {
        /// The value received.
        byte: u8,
    },
    /// A header length is above the configured maximum.
    #[error("{field:?} body length {length} exceeds the maximum of {max} bytes")]
    BodyTooLarge {
        /// Which length.
        field: LengthField,
        /// The claimed length.
        length: u32,
        /// The limit in force.
        max: u64,
    },
    /// An uncompressed frame whose two lengths differ.
    #[error("uncompressed frame with different lengths (compressed {compressed}, uncompressed {uncompressed})")]
    LengthMismatch {
        /// `compressed_length`.
        compressed: u32,
        /// `uncompressed_length`.
        uncompressed: u32,
    },
    /// A type id that is not valid in this direction.
    #[error("unknown {direction:?} message type {message_type}")]
    UnknownMessageType {
        /// Request or response table.
        direction: Direction,
        /// The id received.
        message_type: u32,
    },
    /// A fixed-size message whose body is longer than 1007 bytes.
    #[error("fixed-size message type {message_type} has a {length}-byte body (max {max})")]
    FixedBodyTooLarge {
        /// The type id.
        message_type: u32,
        /// Body length on the wire.
        length: u32,
        /// [`super::MAX_FIXED_BODY_LEN`].
        max: usize,
    },
    /// A compressed frame of a type that is never compressed.
    #[error("message type {message_type} must not be compressed")]
    CompressedNotAllowed {
        /// The type id.
        message_type: u32,
    },
    /// A frame whose version differs from the one pinned by the connection's first frame.
    #[error("protocol version changed from {pinned:?} to {received:?} on one connection")]
    VersionChanged {
        /// Version of the first frame.
        pinned: ProtocolVersion,
        /// Version of this frame.
        received: ProtocolVersion,
    },
    /// An Identify request after the first frame of a connection.
    #[error("identify request is only valid as the first frame")]
    IdentifyNotFirst,
}

/// Decompressing (or compressing) a body failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompressionError {
    /// A compressed frame arrived but this side holds no dictionary (a client that never
    /// identified).
    #[error("compressed frame but no dictionary is loaded")]
    NoDictionary,
    /// `uncompressed_length` above the limit (also checked by the header; repeated here so
    /// the decompressor is safe on its own).
    #[error("declared uncompressed length {length} exceeds the maximum of {max} bytes")]
    TooLarge {
        /// Declared length.
        length: u64,
        /// Limit in force.
        max: u64,
    },
    /// The zstd frame header declares a content size different from the frame header's
    /// `uncompressed_length`; refused before allocating.
    #[error("zstd frame declares {declared} bytes, header says {expected}")]
    DeclaredSizeMismatch {
        /// Content size in the zstd frame header.
        declared: u64,
        /// `uncompressed_length`.
        expected: u32,
    },
    /// Decompression produced fewer bytes than `uncompressed_length`.
    #[error("decompressed {actual} bytes, header says {expected}")]
    ShortOutput {
        /// Bytes produced.
        actual: usize,
        /// `uncompressed_length`.
        expected: u32,
    },
    /// zstd refused the input (corrupt frame, wrong dictionary, output above the capacity).
    #[error("zstd error: {reason}")]
    Zstd {
        /// zstd's error name (a static string of the C library).
        reason: &'static str,
    },
}

/// A dictionary could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DictionaryError {
    /// The bytes do not start with the zstd dictionary magic `37 A4 30 EC`.
    #[error("not a zstd dictionary (missing magic number)")]
    BadMagic,
    /// Larger than [`super::MAX_DICTIONARY_LEN`].
    #[error("dictionary of {length} bytes exceeds the maximum of {max} bytes")]
    TooLarge {
        /// Length of the file.
        length: usize,
        /// The limit.
        max: usize,
    },
    /// zstd could not build the prepared dictionary (corrupt entropy tables).
    #[error("zstd rejected the dictionary")]
    Rejected,
    /// Compression level outside zstd's range.
    #[error("compression level {level} outside {min}..={max}")]
    BadLevel {
        /// The requested level.
        level: i32,
        /// Lowest level zstd accepts.
        min: i32,
        /// Highest level zstd accepts.
        max: i32,
    },
}

impl FrameError {
    /// Convenience for the request table.
    pub(crate) fn unknown_request(message_type: u32) -> Self {
        Self::UnknownMessageType {
            direction: Direction::Request,
            message_type,
        }
    }

    /// Convenience for the response table.
    pub(crate) fn unknown_response(message_type: u32) -> Self {
        Self::UnknownMessageType {
            direction: Direction::Response,
            message_type,
        }
    }
}
