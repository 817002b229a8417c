//! Sans-IO frame decoding and encoding over byte buffers.
//!
//! Decoding is incremental: hand the decoder whatever bytes have arrived and it answers
//! [`Decoded::NeedMore`] with the number of further bytes it needs, a complete
//! [`Frame`] borrowing the body from the buffer, or a [`FrameError`] (the server then closes
//! the connection without answering). The header is validated as soon as its 17 bytes are
//! there, so an oversized or malformed frame is refused before its body is awaited or any
//! buffer is sized for it.
//!
//! Checks per direction, on top of [`EventHeader::parse`]:
//!
//! | check | requests | responses |
//! |---|---|---|
//! | type id known | table of [`RequestType`] | table of [`ResponseType`] |
//! | fixed type: uncompressed, body ≤ 1007 | yes | yes (the 0.2.0 client's rule) |
//! | never-compressed variable type | — | Identify (16) |
//! | version pinned by the first frame | [`RequestFrameDecoder`] | — |
//! | Identify only as the first frame | [`RequestFrameDecoder`] | — |

use super::compression::DictCodec;
use super::error::{CompressionError, FrameError};
use super::header::{Compression, EventHeader, ProtocolVersion, HEADER_LEN, MAX_FIXED_BODY_LEN};
use super::types::{RequestType, ResponseType, SizeClass};

/// Default `--max-request-size` of the client port (16 MiB), both header lengths.
pub const DEFAULT_MAX_REQUEST_LEN: u64 = 16 * 1024 * 1024;

/// Default `--max-response-size` (64 MiB); also the 0.2.0 client's default response cap.
pub const DEFAULT_MAX_RESPONSE_LEN: u64 = 64 * 1024 * 1024;

/// Size limits applied while decoding; values come from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    /// Maximum of both `compressed_length` and `uncompressed_length`.
    pub max_body_len: u64,
}

impl FrameLimits {
    /// Limits with the given maximum body length.
    pub const fn new(max_body_len: u64) -> Self {
        Self { max_body_len }
    }

    /// The server's default request limits.
    pub const fn default_requests() -> Self {
        Self::new(DEFAULT_MAX_REQUEST_LEN)
    }

    /// The default response limits (server writer and 0.2.0 client reader).
    pub const fn default_responses() -> Self {
        Self::new(DEFAULT_MAX_RESPONSE_LEN)
    }
}

/// One complete frame whose body borrows from the input buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a, K> {
    /// The validated header.
    pub header: EventHeader,
    /// The classified type id ([`RequestType`] or [`ResponseType`]).
    pub kind: K,
    /// Exactly `header.compressed_length` bytes, still compressed if the header says so.
    pub body: &'a [u8],
}

impl<K> Frame<'_, K> {
    /// Bytes this frame occupies in the buffer (header plus body): drop them once processed.
    pub fn len(&self) -> usize {
        HEADER_LEN + self.body.len()
    }

    /// Never true: a frame has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The body after decompression, `header.uncompressed_length` bytes. A compressed body
    /// needs `codec`; without one the result is [`CompressionError::NoDictionary`].
    pub fn decompressed_body(
        &self,
        codec: Option<&mut DictCodec>,
        limits: FrameLimits,
    ) -> Result<std::borrow::Cow<'_, [u8]>, CompressionError> {
        match self.header.compression {
            Compression::None => Ok(std::borrow::Cow::Borrowed(self.body)),
            Compression::ZstdDict => {
                let codec = codec.ok_or(CompressionError::NoDictionary)?;
                codec
                    .decompress(
                        self.body,
                        self.header.uncompressed_length,
                        limits.max_body_len,
                    )
                    .map(std::borrow::Cow::Owned)
            }
        }
    }
}

/// Result of offering a buffer to a decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded<'a, K> {
    /// The buffer holds no complete frame yet; at least `needed` more bytes are required.
    NeedMore {
        /// Further bytes required beyond the buffer's current length (at least 1).
        needed: usize,
    },
    /// A complete, validated frame at the start of the buffer.
    Frame(Frame<'a, K>),
}

fn split_frame<K>(buf: &[u8], header: EventHeader, kind: K) -> Decoded<'_, K> {
    let total = header.frame_len();
    match buf.get(HEADER_LEN..total) {
        Some(body) => Decoded::Frame(Frame { header, kind, body }),
        None => Decoded::NeedMore {
            needed: total - buf.len(),
        },
    }
}

fn check_fixed(header: &EventHeader) -> Result<(), FrameError> {
    if header.compression != Compression::None {
        return Err(FrameError::CompressedNotAllowed {
            message_type: header.message_type,
        });
    }
    if header.compressed_length as usize > MAX_FIXED_BODY_LEN {
        return Err(FrameError::FixedBodyTooLarge {
            message_type: header.message_type,
            length: header.compressed_length,
            max: MAX_FIXED_BODY_LEN,
        });
    }
    Ok(())
}

fn parse_request_header(
    buf: &[u8],
    limits: FrameLimits,
) -> Result<Option<(EventHeader, RequestType)>, FrameError> {
    let Some(header) = EventHeader::parse(buf, limits.max_body_len)? else {
        return Ok(None);
    };
    let kind = RequestType::from_id(header.message_type)
        .ok_or(FrameError::unknown_request(header.message_type))?;
    if kind.size_class() == SizeClass::Fixed {
        check_fixed(&header)?;
    }
    Ok(Some((header, kind)))
}

/// Decodes one request frame from the start of `buf` (stateless; see
/// [`RequestFrameDecoder`] for the per-connection rules).
pub fn decode_request_frame(
    buf: &[u8],
    limits: FrameLimits,
) -> Result<Decoded<'_, RequestType>, FrameError> {
    match parse_request_header(buf, limits)? {
        None => Ok(Decoded::NeedMore {
            needed: HEADER_LEN - buf.len(),
        }),
        Some((header, kind)) => Ok(split_frame(buf, header, kind)),
    }
}

/// Decodes one response frame from the start of `buf` (the client side, and tests).
pub fn decode_response_frame(
    buf: &[u8],
    limits: FrameLimits,
) -> Result<Decoded<'_, ResponseType>, FrameError> {
    let Some(header) = EventHeader::parse(buf, limits.max_body_len)? else {
        return Ok(Decoded::NeedMore {
            needed: HEADER_LEN - buf.len(),
        });
    };
    let kind = ResponseType::from_id(header.message_type)
        .ok_or(FrameError::unknown_response(header.message_type))?;
    match kind.size_class() {
        SizeClass::Fixed => check_fixed(&header)?,
        SizeClass::Variable if !kind.compressible() && header.compression != Compression::None => {
            return Err(FrameError::CompressedNotAllowed {
                message_type: header.message_type,
            });
        }
        SizeClass::Variable => {}
    }
    Ok(split_frame(buf, header, kind))
}

/// The per-connection request decoder of the server: [`decode_request_frame`] plus the
/// connection rules. The first frame pins the protocol version and a later frame with the
/// other version is refused; Identify is valid only as the first frame.
///
/// State changes only when a complete frame is returned, so offering a growing buffer
/// repeatedly is safe.
#[derive(Debug, Clone)]
pub struct RequestFrameDecoder {
    limits: FrameLimits,
    pinned: Option<ProtocolVersion>,
    frames: u64,
}

impl RequestFrameDecoder {
    /// A decoder for a fresh connection.
    pub fn new(limits: FrameLimits) -> Self {
        Self {
            limits,
            pinned: None,
            frames: 0,
        }
    }

    /// The version pinned by the first frame, if one was decoded.
    pub fn pinned_version(&self) -> Option<ProtocolVersion> {
        self.pinned
    }

    /// Complete frames returned so far.
    pub fn frames_decoded(&self) -> u64 {
        self.frames
    }

    /// Decodes the next request frame from the start of `buf`.
    pub fn decode<'a>(&mut self, buf: &'a [u8]) -> Result<Decoded<'a, RequestType>, FrameError> {
        let Some((header, kind)) = parse_request_header(buf, self.limits)? else {
            return Ok(Decoded::NeedMore {
                needed: HEADER_LEN - buf.len(),
            });
        };
        if let Some(pinned) = self.pinned {
            if pinned != header.version {
                return Err(FrameError::VersionChanged {
                    pinned,
                    received: header.version,
                });
            }
        }
        if kind == RequestType::Identify && self.frames > 0 {
            return Err(FrameError::IdentifyNotFirst);
        }
        let decoded = split_frame(buf, header, kind);
        if let Decoded::Frame(_) = decoded {
            self.pinned = Some(header.version);
            self.frames += 1;
        }
        Ok(decoded)
    }
}

/// Errors of frame encoding: the message cannot be sent as is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameEncodeError {
    /// A fixed-size message whose body exceeds 1007 bytes (nothing was written).
    #[error("fixed-size message type {message_type} would have a {length}-byte body (max {max})")]
    FixedBodyTooLarge {
        /// Type id.
        message_type: u32,
        /// Serialised body length.
        length: usize,
        /// [`MAX_FIXED_BODY_LEN`].
        max: usize,
    },
    /// A body (compressed or not) above the configured maximum or above `u32::MAX`.
    #[error("message type {message_type} would have a {length}-byte body (max {max})")]
    BodyTooLarge {
        /// Type id.
        message_type: u32,
        /// Offending length.
        length: usize,
        /// Limit in force.
        max: u64,
    },
    /// Compression was requested for a fixed-size message.
    #[error("message type {message_type} is fixed-size and cannot be compressed")]
    CompressedNotAllowed {
        /// Type id.
        message_type: u32,
    },
    /// zstd failed.
    #[error("compressing the body failed")]
    Compression(#[source] CompressionError),
}

/// What goes into a frame's header apart from the lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSpec {
    /// Body encoding.
    pub version: ProtocolVersion,
    /// Type id.
    pub message_type: u32,
    /// Size class of the type (fixed bodies are capped at 1007 bytes).
    pub size_class: SizeClass,
}

impl FrameSpec {
    /// The spec of a request frame.
    pub const fn request(version: ProtocolVersion, kind: RequestType) -> Self {
        Self {
            version,
            message_type: kind.id(),
            size_class: kind.size_class(),
        }
    }

    /// The spec of a response frame.
    pub const fn response(version: ProtocolVersion, kind: ResponseType) -> Self {
        Self {
            version,
            message_type: kind.id(),
            size_class: kind.size_class(),
        }
    }
}

/// Builds one frame in place at the end of an output buffer: [`FrameBuilder::begin`]
/// reserves the header, the caller appends the serialised body, [`FrameBuilder::finish`]
/// checks the limits, optionally compresses, and writes the header. On error the buffer is
/// restored to its length before `begin`, so nothing partial is ever sent.
#[derive(Debug)]
#[must_use = "a begun frame must be finished"]
pub struct FrameBuilder {
    start: usize,
}

impl FrameBuilder {
    /// Reserves the 17 header bytes at the end of `out`.
    pub fn begin(out: &mut Vec<u8>) -> Self {
        let start = out.len();
        out.extend_from_slice(&[0u8; HEADER_LEN]);
        Self { start }
    }

    /// Bytes of body appended since [`Self::begin`].
    pub fn body_len(&self, out: &[u8]) -> usize {
        out.len() - self.start - HEADER_LEN
    }

    /// Completes the frame. With `compress_with`, the body is replaced by its zstd
    /// compression, unless that is not smaller (then it is sent uncompressed, which every
    /// receiver accepts). Returns the header written.
    pub fn finish(
        self,
        out: &mut Vec<u8>,
        spec: FrameSpec,
        max_body_len: u64,
        compress_with: Option<&mut DictCodec>,
    ) -> Result<EventHeader, FrameEncodeError> {
        let result = self.finish_inner(out, spec, max_body_len, compress_with);
        if result.is_err() {
            out.truncate(self.start);
        }
        result
    }

    fn finish_inner(
        &self,
        out: &mut Vec<u8>,
        spec: FrameSpec,
        max_body_len: u64,
        compress_with: Option<&mut DictCodec>,
    ) -> Result<EventHeader, FrameEncodeError> {
        let body_start = self.start + HEADER_LEN;
        let body_len = out.len() - body_start;
        let too_large = |length: usize| FrameEncodeError::BodyTooLarge {
            message_type: spec.message_type,
            length,
            max: max_body_len,
        };
        let uncompressed_length = u32::try_from(body_len).map_err(|_| too_large(body_len))?;
        if u64::from(uncompressed_length) > max_body_len {
            return Err(too_large(body_len));
        }
        let mut compression = Compression::None;
        let mut compressed_length = uncompressed_length;
        match (spec.size_class, compress_with) {
            (SizeClass::Fixed, Some(_)) => {
                return Err(FrameEncodeError::CompressedNotAllowed {
                    message_type: spec.message_type,
                });
            }
            (SizeClass::Fixed, None) => {
                if body_len > MAX_FIXED_BODY_LEN {
                    return Err(FrameEncodeError::FixedBodyTooLarge {
                        message_type: spec.message_type,
                        length: body_len,
                        max: MAX_FIXED_BODY_LEN,
                    });
                }
            }
            (SizeClass::Variable, Some(codec)) => {
                let compressed = codec
                    .compress(&out[body_start..])
                    .map_err(FrameEncodeError::Compression)?;
                if compressed.len() < body_len {
                    // Smaller than the body, which fits u32 and the limit.
                    compressed_length = compressed.len() as u32;
                    compression = Compression::ZstdDict;
                    out.truncate(body_start);
                    out.extend_from_slice(compressed);
                }
            }
            (SizeClass::Variable, None) => {}
        }
        let header = EventHeader {
            version: spec.version,
            message_type: spec.message_type,
            compressed_length,
            uncompressed_length,
            compression,
        };
        out[self.start..body_start].copy_from_slice(&header.to_bytes());
        debug_assert_eq!(out.len(), self.start + header.frame_len());
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::compression::{Dictionary, DEFAULT_COMPRESSION_LEVEL};
    use std::sync::Arc;

    fn frame(version: u32, ty: u32, body: &[u8], compression: u8, uncompressed: u32) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&version.to_le_bytes());
        v.extend_from_slice(&ty.to_le_bytes());
        v.extend_from_slice(&(body.len() as u32).to_le_bytes());
        v.extend_from_slice(&uncompressed.to_le_bytes());
        v.push(compression);
        v.extend_from_slice(body);
        v
    }

    fn plain(version: u32, ty: u32, body: &[u8]) -> Vec<u8> {
        frame(version, ty, body, 0, body.len() as u32)
    }

    const LIMITS: FrameLimits = FrameLimits::default_requests();

    #[test]
    fn every_prefix_needs_exactly_the_missing_bytes() {
        let bytes = plain(2, 3, &[7u8; 40]);
        for len in 0..bytes.len() {
            match decode_request_frame(&bytes[..len], LIMITS).unwrap() {
                Decoded::NeedMore { needed } if len < HEADER_LEN => {
                    assert_eq!(needed, HEADER_LEN - len);
                }
                Decoded::NeedMore { needed } => assert_eq!(needed, bytes.len() - len),
                Decoded::Frame(_) => panic!("frame from a {len}-byte prefix"),
            }
        }
        let Decoded::Frame(f) = decode_request_frame(&bytes, LIMITS).unwrap() else {
            panic!("no frame");
        };
        assert_eq!(f.kind, RequestType::Write);
        assert_eq!(f.body, &[7u8; 40]);
        assert_eq!(f.len(), bytes.len());
    }

    #[test]
    fn trailing_bytes_belong_to_the_next_frame() {
        let mut bytes = plain(3, 1, &[1, 2, 3]);
        bytes.extend_from_slice(&plain(3, 2, &[4]));
        let Decoded::Frame(f) = decode_request_frame(&bytes, LIMITS).unwrap() else {
            panic!("no frame");
        };
        assert_eq!(f.body, &[1, 2, 3]);
        let Decoded::Frame(g) = decode_request_frame(&bytes[f.len()..], LIMITS).unwrap() else {
            panic!("no second frame");
        };
        assert_eq!(g.kind, RequestType::Read);
    }

    #[test]
    fn unknown_types_are_refused_in_each_direction() {
        for ty in [0, 11, 12, 13, 15, 16, 100] {
            assert!(matches!(
                decode_request_frame(&plain(2, ty, &[]), LIMITS),
                Err(FrameError::UnknownMessageType { message_type, .. }) if message_type == ty
            ));
        }
        // 13 and 14 are 0.3.0's conflict responses (a client of eddy's may receive them).
        for ty in [0, 15, 17, 107] {
            assert!(decode_response_frame(&plain(2, ty, &[]), LIMITS).is_err());
        }
    }

    #[test]
    fn fixed_types_must_be_small_and_uncompressed() {
        let big = vec![0u8; MAX_FIXED_BODY_LEN + 1];
        assert!(matches!(
            decode_request_frame(&plain(2, 1, &big), LIMITS),
            Err(FrameError::FixedBodyTooLarge { length: 1008, .. })
        ));
        // Refused from the header alone, before the body arrives.
        assert!(decode_request_frame(&plain(2, 1, &big)[..HEADER_LEN], LIMITS).is_err());
        let exact = vec![0u8; MAX_FIXED_BODY_LEN];
        assert!(matches!(
            decode_request_frame(&plain(2, 1, &exact), LIMITS),
            Ok(Decoded::Frame(_))
        ));
        assert!(matches!(
            decode_request_frame(&frame(2, 14, &[1], 1, 10), LIMITS),
            Err(FrameError::CompressedNotAllowed { message_type: 14 })
        ));
        // Variable requests may exceed 1007 bytes and be compressed.
        assert!(matches!(
            decode_request_frame(&plain(2, 3, &big), LIMITS),
            Ok(Decoded::Frame(_))
        ));
        assert!(matches!(
            decode_request_frame(&frame(2, 10, &[1], 1, 10), LIMITS),
            Ok(Decoded::Frame(_))
        ));
        // Responses: fixed error responses capped, identify never compressed.
        assert!(decode_response_frame(&plain(2, 7, &big), LIMITS).is_err());
        assert!(matches!(
            decode_response_frame(&frame(2, 16, &[1], 1, 10), LIMITS),
            Err(FrameError::CompressedNotAllowed { message_type: 16 })
        ));
        assert!(matches!(
            decode_response_frame(&frame(2, 2, &[1], 1, 10), LIMITS),
            Ok(Decoded::Frame(_))
        ));
    }

    #[test]
    fn connection_decoder_pins_the_version_and_identify_first() {
        let mut decoder = RequestFrameDecoder::new(LIMITS);
        assert_eq!(decoder.pinned_version(), None);
        // Partial first frame changes nothing.
        let identify = plain(3, 14, &[0x96]);
        assert!(matches!(
            decoder.decode(&identify[..5]),
            Ok(Decoded::NeedMore { needed: 12 })
        ));
        assert_eq!(decoder.frames_decoded(), 0);
        assert!(matches!(decoder.decode(&identify), Ok(Decoded::Frame(_))));
        assert_eq!(decoder.pinned_version(), Some(ProtocolVersion::V3));
        assert_eq!(
            decoder.decode(&plain(3, 14, &[0x96])),
            Err(FrameError::IdentifyNotFirst)
        );
        assert_eq!(
            decoder.decode(&plain(2, 1, &[])[..HEADER_LEN]),
            Err(FrameError::VersionChanged {
                pinned: ProtocolVersion::V3,
                received: ProtocolVersion::V2
            })
        );
        assert!(matches!(
            decoder.decode(&plain(3, 2, &[])),
            Ok(Decoded::Frame(_))
        ));
        assert_eq!(decoder.frames_decoded(), 2);
    }

    #[test]
    fn builder_writes_headers_and_enforces_limits() {
        let mut out = vec![0xAA];
        let b = FrameBuilder::begin(&mut out);
        out.extend_from_slice(&[1, 2, 3]);
        assert_eq!(b.body_len(&out), 3);
        let header = b
            .finish(
                &mut out,
                FrameSpec::response(ProtocolVersion::V2, ResponseType::Write),
                100,
                None,
            )
            .unwrap();
        assert_eq!(header.compressed_length, 3);
        assert_eq!(
            &out[..],
            &[&[0xAA][..], &plain(2, 3, &[1, 2, 3])].concat()[..]
        );

        let mut out = vec![0xAA];
        let b = FrameBuilder::begin(&mut out);
        out.extend_from_slice(&[0u8; MAX_FIXED_BODY_LEN + 1]);
        let err = b
            .finish(
                &mut out,
                FrameSpec::response(ProtocolVersion::V2, ResponseType::Error),
                u64::MAX,
                None,
            )
            .unwrap_err();
        assert!(matches!(
            err,
            FrameEncodeError::FixedBodyTooLarge { length: 1008, .. }
        ));
        assert_eq!(out, [0xAA], "buffer restored");

        let mut out = Vec::new();
        let b = FrameBuilder::begin(&mut out);
        out.extend_from_slice(&[0u8; 101]);
        let err = b
            .finish(
                &mut out,
                FrameSpec::response(ProtocolVersion::V3, ResponseType::Read),
                100,
                None,
            )
            .unwrap_err();
        assert!(matches!(
            err,
            FrameEncodeError::BodyTooLarge {
                length: 101,
                max: 100,
                ..
            }
        ));
        assert!(out.is_empty());
    }

    #[test]
    fn builder_compresses_and_the_decoder_decompresses() {
        let dict = Arc::new(Dictionary::builtin(DEFAULT_COMPRESSION_LEVEL).unwrap());
        let mut codec = DictCodec::new(dict);
        let body: Vec<u8> = crate::event::sample::SampleEvents::new(5)
            .take(10)
            .flatten()
            .collect();
        let mut out = Vec::new();
        let b = FrameBuilder::begin(&mut out);
        out.extend_from_slice(&body);
        let header = b
            .finish(
                &mut out,
                FrameSpec::response(ProtocolVersion::V2, ResponseType::Read),
                1 << 20,
                Some(&mut codec),
            )
            .unwrap();
        assert_eq!(header.compression, Compression::ZstdDict);
        assert!((header.compressed_length as usize) < body.len());
        assert_eq!(header.uncompressed_length as usize, body.len());
        let Decoded::Frame(f) =
            decode_response_frame(&out, FrameLimits::default_responses()).unwrap()
        else {
            panic!("no frame");
        };
        assert_eq!(
            f.decompressed_body(None, FrameLimits::default_responses()),
            Err(CompressionError::NoDictionary)
        );
        let back = f
            .decompressed_body(Some(&mut codec), FrameLimits::default_responses())
            .unwrap();
        assert_eq!(&back[..], &body[..]);

        // Incompressible tiny body: sent uncompressed.
        let mut out = Vec::new();
        let b = FrameBuilder::begin(&mut out);
        out.push(0x90);
        let header = b
            .finish(
                &mut out,
                FrameSpec::response(ProtocolVersion::V3, ResponseType::Watch),
                1 << 20,
                Some(&mut codec),
            )
            .unwrap();
        assert_eq!(header.compression, Compression::None);

        // Fixed types refuse compression.
        let mut out = Vec::new();
        let b = FrameBuilder::begin(&mut out);
        out.push(0x90);
        assert!(matches!(
            b.finish(
                &mut out,
                FrameSpec::response(ProtocolVersion::V3, ResponseType::Error),
                1 << 20,
                Some(&mut codec)
            ),
            Err(FrameEncodeError::CompressedNotAllowed { message_type: 7 })
        ));
    }
}
