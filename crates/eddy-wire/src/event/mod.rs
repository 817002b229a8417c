//! Event protocol (Celeriant) framing: the 17-byte header, type ids and size classes, the
//! incremental frame decoder, frame building, and zstd compression with the cluster
//! dictionary. Body encodings (V2 bincode, V3 `MessagePack`) live in `eddy-codec`.
//!
//! # Frame layout
//!
//! ```text
//! +---------+--------------+-------------------+---------------------+-------------+------------------+
//! | version | message_type | compressed_length | uncompressed_length | compression | body             |
//! | u32 LE  | u32 LE       | u32 LE            | u32 LE              | u8          | compressed_length|
//! | 0..4    | 4..8         | 8..12             | 12..16              | 16          | 17..             |
//! +---------+--------------+-------------------+---------------------+-------------+------------------+
//!   2 or 3                   ≤ max               ≤ max; = compressed   0 none
//!                                                when compression = 0  1 zstd + cluster dictionary
//! ```
//!
//! Fixed-size message types (every request but Write and `RegisterSchema`; responses 1, 3, 4,
//! 5, 6, 7, 12) have bodies of at most [`MAX_FIXED_BODY_LEN`] = 1007 bytes and are never
//! compressed. Variable-size types are bounded by the configured maximum only.
//!
//! # Invariants
//!
//! - No input makes any function here panic; malformed input is a [`FrameError`] (close the
//!   connection) or [`CompressionError`].
//! - Both header lengths are checked against [`FrameLimits::max_body_len`] as soon as the 17
//!   header bytes are available, before a body is awaited, allocated or decompressed.
//! - Decompression allocates at most `uncompressed_length` bytes (already checked) and
//!   produces exactly that many or fails.
//! - [`FrameBuilder`] never leaves a partial frame in the output buffer.
//!
//! # Typical server loop (sans-IO)
//!
//! 1. [`RequestFrameDecoder::decode`] on the bytes read so far: `NeedMore` → read more;
//!    `Frame` → process it and drop [`Frame::len`] bytes; error → close.
//! 2. [`Frame::decompressed_body`] with the connection's [`DictCodec`].
//! 3. Decode the body with `eddy_codec::event`, answer with a frame built by
//!    [`FrameBuilder`], compressing when [`should_compress_response`] says so.

mod compression;
mod error;
mod frame;
mod header;
pub mod sample;
mod types;

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;

pub use compression::{
    sha256_hex, should_compress_request, should_compress_response, DictCodec, Dictionary,
    BUILTIN_DICTIONARY_BYTES, BUILTIN_DICTIONARY_NAME, COMPRESSION_THRESHOLD,
    DEFAULT_COMPRESSION_LEVEL, DICTIONARY_FILE_NAME, MAX_DICTIONARY_LEN, ZSTD_DICTIONARY_MAGIC,
};
pub use error::{CompressionError, DictionaryError, Direction, FrameError, LengthField};
pub use frame::{
    decode_request_frame, decode_response_frame, Decoded, Frame, FrameBuilder, FrameEncodeError,
    FrameLimits, FrameSpec, RequestFrameDecoder, DEFAULT_MAX_REQUEST_LEN, DEFAULT_MAX_RESPONSE_LEN,
};
pub use header::{
    BodyEncoding, Compression, EventHeader, ProtocolVersion, FIXED_FRAME_LEN, HEADER_LEN,
    MAX_FIXED_BODY_LEN,
};
pub use types::{RequestType, ResponseType, SizeClass};
