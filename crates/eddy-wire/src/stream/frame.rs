//! Sans-IO framing (spec §1.2): a frame is a 256-byte header whose u32 `size` (offset 48) is the
//! total frame length, followed by `size - 256` body bytes.
//!
//! [`decode`] looks at a byte buffer and answers one of three things:
//!
//! * [`Decoded::Incomplete`]: the buffer holds a valid prefix, `needed` more bytes are required;
//! * [`Decoded::Complete`]: a whole frame is present (the buffer may hold more after it);
//! * `Err(WireError)`: the bytes can never become a valid frame (size below 256, size above the
//!   limit, unknown command byte) and the connection should be closed.
//!
//! Invariants: the `size` field is checked against the limit as soon as its 52-byte prefix is
//! present, before the caller reserves or reads anything for the body; nothing here allocates
//! except [`FrameDecoder::decode_buf`], which only splits the caller's buffer; no input panics.

use bytes::{Bytes, BytesMut};

use super::command::Command;
use super::error::WireError;
use super::header::{
    read_size, EvictionHeader, GenericHeader, HeaderBytes, ReplyHeader, RequestHeader,
    COMMAND_OFFSET, HEADER_SIZE, SIZE_OFFSET,
};

/// Default frame limit: 64 MiB, the reference server's `message_bus.max_message_size`.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 64 * 1024 * 1024;

/// The typed header of a decoded frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Header {
    /// Command 5.
    Request(RequestHeader),
    /// Command 8.
    Reply(ReplyHeader),
    /// Command 13.
    Eviction(EvictionHeader),
    /// Any other valid command (replica traffic, never valid from a client).
    Other(GenericHeader),
}

impl Header {
    /// The frame type at byte 60.
    pub fn command(&self) -> Command {
        match self {
            Self::Request(h) => h.frame.command,
            Self::Reply(h) => h.frame.command,
            Self::Eviction(h) => h.frame.command,
            Self::Other(h) => h.frame.command,
        }
    }

    /// Decodes the header matching byte 60.
    pub fn decode(buf: &HeaderBytes) -> Result<Self, WireError> {
        Ok(match Command::from_u8(buf[COMMAND_OFFSET])? {
            Command::Request => Self::Request(RequestHeader::decode(buf)?),
            Command::Reply => Self::Reply(ReplyHeader::decode(buf)?),
            Command::Eviction => Self::Eviction(EvictionHeader::decode(buf)?),
            _ => Self::Other(GenericHeader::decode(buf)?),
        })
    }
}

/// A whole frame borrowed from the input buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The decoded header.
    pub header: Header,
    /// The raw header bytes.
    pub header_bytes: &'a HeaderBytes,
    /// The body (`size - 256` bytes).
    pub body: &'a [u8],
}

impl Frame<'_> {
    /// Total frame length (header + body): how many bytes to consume from the input.
    pub fn len(&self) -> usize {
        HEADER_SIZE + self.body.len()
    }

    /// Always false: a frame has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// A whole frame that owns its body (zero-copy split off the reader's buffer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedFrame {
    /// The decoded header.
    pub header: Header,
    /// The body bytes.
    pub body: Bytes,
}

/// Result of looking at a buffer.
///
/// The `Complete` variant carries the decoded 256-byte header by value; boxing it would put an
/// allocation on the per-frame hot path, so the size difference is deliberate.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A valid prefix; at least `needed` more bytes must arrive.
    Incomplete {
        /// Bytes missing before the frame (or at least its header) is complete.
        needed: usize,
    },
    /// A complete frame at the start of the buffer.
    Complete(Frame<'a>),
}

/// Checks the frame prefix and returns the total frame length once `size` is readable.
///
/// `Ok(None)`: fewer than 52 bytes, size unknown yet. Errors exactly when [`decode`] would.
pub fn peek_frame_len(buf: &[u8], max_frame_size: u32) -> Result<Option<usize>, WireError> {
    let Some(size) = read_size(buf) else {
        return Ok(None);
    };
    if (size as usize) < HEADER_SIZE {
        return Err(WireError::FrameTooSmall {
            size,
            min: HEADER_SIZE as u32,
        });
    }
    if size > max_frame_size {
        return Err(WireError::FrameTooLarge {
            size,
            limit: max_frame_size,
        });
    }
    if let Some(&command) = buf.get(COMMAND_OFFSET) {
        Command::from_u8(command)?;
    }
    Ok(Some(size as usize))
}

/// Decodes the frame at the start of `buf` with the default 64 MiB limit.
pub fn decode(buf: &[u8]) -> Result<Decoded<'_>, WireError> {
    decode_with_limit(buf, DEFAULT_MAX_FRAME_SIZE)
}

/// Decodes the frame at the start of `buf`, rejecting frames whose `size` exceeds
/// `max_frame_size`.
pub fn decode_with_limit(buf: &[u8], max_frame_size: u32) -> Result<Decoded<'_>, WireError> {
    let Some(total) = peek_frame_len(buf, max_frame_size)? else {
        return Ok(Decoded::Incomplete {
            needed: HEADER_SIZE - buf.len(),
        });
    };
    if buf.len() < total {
        return Ok(Decoded::Incomplete {
            needed: total - buf.len(),
        });
    }
    let (head, rest) = buf.split_at(HEADER_SIZE);
    let header_bytes: &HeaderBytes = head.try_into().map_err(|_| WireError::ShortHeader {
        need: HEADER_SIZE,
        have: head.len(),
    })?;
    let header = Header::decode(header_bytes)?;
    Ok(Decoded::Complete(Frame {
        header,
        header_bytes,
        body: &rest[..total - HEADER_SIZE],
    }))
}

/// A frame decoder with a configured limit, for readers that accumulate into a `BytesMut`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameDecoder {
    max_frame_size: u32,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_SIZE)
    }
}

impl FrameDecoder {
    /// A decoder rejecting frames larger than `max_frame_size` (never below one header).
    pub fn new(max_frame_size: u32) -> Self {
        Self {
            max_frame_size: max_frame_size.max(HEADER_SIZE as u32),
        }
    }

    /// The limit in force.
    pub fn max_frame_size(&self) -> u32 {
        self.max_frame_size
    }

    /// See [`decode_with_limit`].
    pub fn decode<'a>(&self, buf: &'a [u8]) -> Result<Decoded<'a>, WireError> {
        decode_with_limit(buf, self.max_frame_size)
    }

    /// Takes one complete frame off the front of `buf`, or returns `Ok(None)` leaving `buf`
    /// untouched. The body is split off without copying. Use [`peek_frame_len`] to size reads.
    pub fn decode_buf(&self, buf: &mut BytesMut) -> Result<Option<OwnedFrame>, WireError> {
        let header = match self.decode(buf)? {
            Decoded::Incomplete { .. } => return Ok(None),
            Decoded::Complete(frame) => frame.header,
        };
        let Some(total) = peek_frame_len(buf, self.max_frame_size)? else {
            return Ok(None);
        };
        let mut frame = buf.split_to(total);
        let body = frame.split_off(HEADER_SIZE).freeze();
        Ok(Some(OwnedFrame { header, body }))
    }
}

/// Concatenates a header image and a body into one frame, checking that the header's `size`
/// matches the body.
pub fn encode_frame(header: &HeaderBytes, body: &[u8]) -> Result<Vec<u8>, WireError> {
    let size = read_size(header).unwrap_or(0) as usize;
    let expected = size.saturating_sub(HEADER_SIZE);
    if size < HEADER_SIZE || expected != body.len() {
        return Err(WireError::BodyLengthMismatch {
            expected,
            actual: body.len(),
        });
    }
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(header);
    out.extend_from_slice(body);
    Ok(out)
}

const _: () = assert!(SIZE_OFFSET + 4 <= COMMAND_OFFSET);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::header::EvictionReason;
    use crate::stream::operation::Operation;
    use proptest::prelude::*;

    fn ping_frame(body: &[u8]) -> Vec<u8> {
        let mut header = RequestHeader::new(Operation::NonReplicated, body.len()).unwrap();
        header.client = 9;
        header.command_code = 1;
        encode_frame(&header.encode(), body).unwrap()
    }

    #[test]
    fn complete_frame_and_trailing_bytes() {
        let mut bytes = ping_frame(b"abc");
        bytes.extend_from_slice(b"next");
        match decode(&bytes).unwrap() {
            Decoded::Complete(frame) => {
                assert_eq!(frame.body, b"abc");
                assert_eq!(frame.len(), 259);
                assert!(matches!(frame.header, Header::Request(h) if h.command_code == 1));
            }
            Decoded::Incomplete { .. } => panic!("frame is complete"),
        }
    }

    #[test]
    fn every_prefix_needs_exactly_the_missing_bytes() {
        let bytes = ping_frame(&[7u8; 40]);
        for cut in 0..bytes.len() {
            match decode(&bytes[..cut]).unwrap() {
                Decoded::Incomplete { needed } => {
                    if cut < 52 {
                        assert_eq!(needed, HEADER_SIZE - cut);
                    } else {
                        assert_eq!(needed, bytes.len() - cut);
                    }
                }
                Decoded::Complete(_) => panic!("prefix {cut} is not complete"),
            }
        }
    }

    #[test]
    fn size_checked_before_header_completes() {
        let mut prefix = vec![0u8; 52];
        prefix[48..52].copy_from_slice(&100u32.to_le_bytes());
        assert!(matches!(
            decode(&prefix),
            Err(WireError::FrameTooSmall { size: 100, .. })
        ));
        prefix[48..52].copy_from_slice(&(DEFAULT_MAX_FRAME_SIZE + 1).to_le_bytes());
        assert!(matches!(
            decode(&prefix),
            Err(WireError::FrameTooLarge { .. })
        ));
        let small = FrameDecoder::new(1024);
        prefix[48..52].copy_from_slice(&1025u32.to_le_bytes());
        assert!(small.decode(&prefix).is_err());
        prefix[48..52].copy_from_slice(&1024u32.to_le_bytes());
        assert_eq!(
            small.decode(&prefix).unwrap(),
            Decoded::Incomplete { needed: 1024 - 52 }
        );
    }

    #[test]
    fn unknown_command_is_invalid_early() {
        let mut bytes = ping_frame(b"");
        bytes[COMMAND_OFFSET] = 30;
        assert_eq!(
            decode(&bytes[..61]),
            Err(WireError::UnknownCommand { value: 30 })
        );
    }

    #[test]
    fn decode_buf_splits_frames() {
        let eviction = EvictionHeader::new(5, EvictionReason::StaleClient).encode();
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&ping_frame(b"xy"));
        buf.extend_from_slice(&eviction[..100]);
        let decoder = FrameDecoder::default();
        let first = decoder.decode_buf(&mut buf).unwrap().unwrap();
        assert_eq!(&first.body[..], b"xy");
        assert!(decoder.decode_buf(&mut buf).unwrap().is_none());
        buf.extend_from_slice(&eviction[100..]);
        let second = decoder.decode_buf(&mut buf).unwrap().unwrap();
        assert!(matches!(second.header, Header::Eviction(_)));
        assert!(second.body.is_empty());
        assert!(buf.is_empty());
    }

    #[test]
    fn encode_frame_checks_size() {
        let header = RequestHeader::new(Operation::NonReplicated, 3)
            .unwrap()
            .encode();
        assert!(encode_frame(&header, b"ab").is_err());
        assert_eq!(encode_frame(&header, b"abc").unwrap().len(), 259);
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode(&bytes);
            let _ = FrameDecoder::new(300).decode(&bytes);
        }

        #[test]
        fn valid_size_field_frames_decode(body in proptest::collection::vec(any::<u8>(), 0..300),
                                          command in prop::sample::select(vec![1u8, 5, 8, 13, 29])) {
            let mut frame = vec![0u8; HEADER_SIZE];
            frame[48..52].copy_from_slice(&((HEADER_SIZE + body.len()) as u32).to_le_bytes());
            frame[COMMAND_OFFSET] = command;
            frame[208] = 2;
            frame.extend_from_slice(&body);
            match decode(&frame).unwrap() {
                Decoded::Complete(f) => {
                    prop_assert_eq!(f.body, &body[..]);
                    prop_assert_eq!(f.header.command().as_u8(), command);
                }
                Decoded::Incomplete { .. } => prop_assert!(false),
            }
        }
    }
}
