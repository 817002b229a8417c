//! The message batch (spec §4): the one layout used for a `SendMessages` payload, for storage
//! and for poll replies.
//!
//! ```text
//! batch  = [batch header: 256 bytes][frame 1]...[frame N]
//! frame  = [frame header: 48 bytes][payload][user headers]
//!
//! batch header                                   frame header
//!  0  partition_id      u64  (server stamps)      0  checksum         u64  XXH3(frame[8..] ++ payload ++ headers)
//!  8  base_offset       u64  (server stamps)      8  id               u128
//! 16  base_timestamp    u64  (server stamps)     24  offset_delta     u32  = frame index
//! 24  origin_timestamp  u64  (min producer time) 28  timestamp_delta  u32  origin - batch origin
//! 32  batch_length      u64  (256 + frames)      32  user_headers_len u32
//! 40  batch_checksum    u64                      36  payload_length   u32
//! 48  message_count     u32                      40  reserved         u64  = 0
//! 52  reserved (204 bytes, zero)
//!
//! batch_checksum = XXH3(partition_id ++ base_offset ++ base_timestamp ++ origin_timestamp
//!                       ++ batch_length ++ message_count ++ checksum of frame 1 .. frame N)
//! ```
//!
//! * [`builder`]: producer-side construction ([`build_batch`]).
//! * [`admission`]: server-side checks ([`admit`]) and stamping ([`AdmittedBatch::stamp`]).
//! * [`stored`]: a stored batch ([`StoredBatch`]), its metadata accessors and zero-copy sliced
//!   views ([`PollRecord`]) for poll replies.
//!
//! Invariants: an [`AdmittedBatch`] has passed every check (all checksums, reserved bytes,
//! counts, lengths, `offset_delta == index`), so its frames tile exactly and offsets are
//! `base_offset + index`; message bodies are never copied after they arrive (stamping rewrites
//! only the 256-byte header, slicing shares the stored `Bytes`).

pub mod admission;
pub mod builder;
pub mod stored;

pub use admission::{admit, AdmittedBatch, StampedBatch};
pub use builder::{build_batch, Message};
pub use stored::{PollRecord, PolledMessage, StoredBatch};

use eddy_wire::stream::checksum::Xxh3Stream;

use super::error::BatchError;

/// Batch header size.
pub const BATCH_HEADER_SIZE: usize = 256;
/// Frame header size.
pub const FRAME_HEADER_SIZE: usize = 48;
/// Offset of `batch_checksum` in the batch header.
pub const BATCH_CHECKSUM_OFFSET: usize = 40;
/// Offset of `message_count` in the batch header.
pub const MESSAGE_COUNT_OFFSET: usize = 48;
/// Start of the zero-filled reserved region of the batch header.
pub const BATCH_RESERVED_OFFSET: usize = 52;
/// Start of the zero reserved u64 of a frame header.
pub const FRAME_RESERVED_OFFSET: usize = 40;
/// Largest batch accepted or built: the default frame limit.
pub const MAX_BATCH_BYTES: usize = eddy_wire::stream::DEFAULT_MAX_FRAME_SIZE as usize;
/// Most messages in one batch.
pub const MAX_BATCH_MESSAGES: u32 = 1 << 21;
/// Largest payload the SDK sends (`MAX_PAYLOAD_SIZE`).
pub const MAX_PAYLOAD_BYTES: usize = 64_000_000;
/// Largest user-header block the SDK sends (`MAX_USER_HEADERS_SIZE`).
pub const MAX_USER_HEADERS_BYTES: usize = 100_000;

#[inline]
fn read_u32(buf: &[u8], at: usize) -> u32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(raw)
}

#[inline]
fn read_u64(buf: &[u8], at: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(raw)
}

/// The decoded batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BatchHeader {
    /// Partition the batch belongs to (stamped by the server).
    pub partition_id: u64,
    /// Offset of the first message (stamped on append).
    pub base_offset: u64,
    /// Append time in µs (stamped on append).
    pub base_timestamp: u64,
    /// Minimum producer timestamp of the messages, µs.
    pub origin_timestamp: u64,
    /// 256 + total frame bytes.
    pub batch_length: u64,
    /// See the module docs.
    pub batch_checksum: u64,
    /// Number of frames.
    pub message_count: u32,
}

impl BatchHeader {
    /// Decodes the first 256 bytes: needs the whole header, `batch_length >= 256` and a zero
    /// reserved region.
    pub fn decode(buf: &[u8]) -> Result<Self, BatchError> {
        if buf.len() < BATCH_HEADER_SIZE {
            return Err(BatchError::Truncated {
                offset: 0,
                need: BATCH_HEADER_SIZE,
                have: buf.len(),
            });
        }
        if let Some(at) = buf[BATCH_RESERVED_OFFSET..BATCH_HEADER_SIZE]
            .iter()
            .position(|&b| b != 0)
        {
            return Err(BatchError::HeaderReserved {
                offset: BATCH_RESERVED_OFFSET + at,
            });
        }
        let header = Self {
            partition_id: read_u64(buf, 0),
            base_offset: read_u64(buf, 8),
            base_timestamp: read_u64(buf, 16),
            origin_timestamp: read_u64(buf, 24),
            batch_length: read_u64(buf, 32),
            batch_checksum: read_u64(buf, BATCH_CHECKSUM_OFFSET),
            message_count: read_u32(buf, MESSAGE_COUNT_OFFSET),
        };
        if header.batch_length < BATCH_HEADER_SIZE as u64 {
            return Err(BatchError::LengthMismatch {
                batch_length: header.batch_length,
                actual: buf.len(),
            });
        }
        Ok(header)
    }

    /// Encodes the header (reserved bytes zero).
    pub fn encode(&self) -> [u8; BATCH_HEADER_SIZE] {
        let mut out = [0u8; BATCH_HEADER_SIZE];
        out[0..8].copy_from_slice(&self.partition_id.to_le_bytes());
        out[8..16].copy_from_slice(&self.base_offset.to_le_bytes());
        out[16..24].copy_from_slice(&self.base_timestamp.to_le_bytes());
        out[24..32].copy_from_slice(&self.origin_timestamp.to_le_bytes());
        out[32..40].copy_from_slice(&self.batch_length.to_le_bytes());
        out[40..48].copy_from_slice(&self.batch_checksum.to_le_bytes());
        out[48..52].copy_from_slice(&self.message_count.to_le_bytes());
        out
    }

    /// A hasher primed with the six header fields of the batch checksum.
    pub(crate) fn checksum_hasher(&self) -> Xxh3Stream {
        let mut fields = [0u8; 44];
        fields[0..8].copy_from_slice(&self.partition_id.to_le_bytes());
        fields[8..16].copy_from_slice(&self.base_offset.to_le_bytes());
        fields[16..24].copy_from_slice(&self.base_timestamp.to_le_bytes());
        fields[24..32].copy_from_slice(&self.origin_timestamp.to_le_bytes());
        fields[32..40].copy_from_slice(&self.batch_length.to_le_bytes());
        fields[40..44].copy_from_slice(&self.message_count.to_le_bytes());
        let mut hasher = Xxh3Stream::new();
        hasher.update(&fields);
        hasher
    }

    /// The batch checksum of this header over the given frame checksums (in frame order).
    pub fn checksum_over(&self, frame_checksums: impl IntoIterator<Item = u64>) -> u64 {
        let mut hasher = self.checksum_hasher();
        for checksum in frame_checksums {
            hasher.update(&checksum.to_le_bytes());
        }
        hasher.digest()
    }
}

/// The decoded 48-byte frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FrameHeader {
    /// XXH3-64 of the frame after this field.
    pub checksum: u64,
    /// Message id.
    pub id: u128,
    /// Index of the frame within its batch.
    pub offset_delta: u32,
    /// Producer timestamp minus the batch origin timestamp, µs.
    pub timestamp_delta: u32,
    /// User header block length.
    pub user_headers_length: u32,
    /// Payload length.
    pub payload_length: u32,
}

impl FrameHeader {
    /// Decodes a frame header at the start of `buf`; the reserved u64 must be zero.
    /// `index` labels errors.
    pub fn decode(buf: &[u8], index: u32, offset: usize) -> Result<Self, BatchError> {
        if buf.len() < FRAME_HEADER_SIZE {
            return Err(BatchError::Truncated {
                offset,
                need: FRAME_HEADER_SIZE,
                have: buf.len(),
            });
        }
        if read_u64(buf, FRAME_RESERVED_OFFSET) != 0 {
            return Err(BatchError::FrameReserved { index });
        }
        let mut id = [0u8; 16];
        id.copy_from_slice(&buf[8..24]);
        Ok(Self {
            checksum: read_u64(buf, 0),
            id: u128::from_le_bytes(id),
            offset_delta: read_u32(buf, 24),
            timestamp_delta: read_u32(buf, 28),
            user_headers_length: read_u32(buf, 32),
            payload_length: read_u32(buf, 36),
        })
    }

    /// Encodes the header (reserved zero).
    pub fn encode(&self) -> [u8; FRAME_HEADER_SIZE] {
        let mut out = [0u8; FRAME_HEADER_SIZE];
        out[0..8].copy_from_slice(&self.checksum.to_le_bytes());
        out[8..24].copy_from_slice(&self.id.to_le_bytes());
        out[24..28].copy_from_slice(&self.offset_delta.to_le_bytes());
        out[28..32].copy_from_slice(&self.timestamp_delta.to_le_bytes());
        out[32..36].copy_from_slice(&self.user_headers_length.to_le_bytes());
        out[36..40].copy_from_slice(&self.payload_length.to_le_bytes());
        out
    }

    /// Whole frame size: header + payload + user headers.
    pub fn frame_len(&self) -> usize {
        FRAME_HEADER_SIZE + self.payload_length as usize + self.user_headers_length as usize
    }
}

/// Walks the frames of a frames region (the batch minus its header), checking that each frame
/// header is complete, has zero reserved bytes and fits. Yields `(start, header)` pairs; stops
/// after the first error.
pub(crate) struct FrameWalk<'a> {
    frames: &'a [u8],
    pos: usize,
    index: u32,
    failed: bool,
}

impl<'a> FrameWalk<'a> {
    pub(crate) fn new(frames: &'a [u8]) -> Self {
        Self {
            frames,
            pos: 0,
            index: 0,
            failed: false,
        }
    }
}

impl Iterator for FrameWalk<'_> {
    type Item = Result<(usize, FrameHeader), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.frames.len() {
            return None;
        }
        let start = self.pos;
        let offset = BATCH_HEADER_SIZE + start;
        let result =
            FrameHeader::decode(&self.frames[start..], self.index, offset).and_then(|header| {
                let len = header.frame_len();
                let have = self.frames.len() - start;
                if len > have {
                    return Err(BatchError::Truncated {
                        offset,
                        need: len,
                        have,
                    });
                }
                Ok((start, header))
            });
        match result {
            Ok((start, header)) => {
                self.pos = start + header.frame_len();
                self.index += 1;
                Some(Ok((start, header)))
            }
            Err(err) => {
                self.failed = true;
                Some(Err(err))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_rules() {
        let header = BatchHeader {
            partition_id: 1,
            base_offset: 2,
            base_timestamp: 3,
            origin_timestamp: 4,
            batch_length: 300,
            batch_checksum: 5,
            message_count: 6,
        };
        let bytes = header.encode();
        assert_eq!(BatchHeader::decode(&bytes).unwrap(), header);
        let mut reserved = bytes;
        reserved[255] = 1;
        assert_eq!(
            BatchHeader::decode(&reserved),
            Err(BatchError::HeaderReserved { offset: 255 })
        );
        let mut short = bytes;
        short[32..40].copy_from_slice(&255u64.to_le_bytes());
        assert!(BatchHeader::decode(&short).is_err());
        assert!(BatchHeader::decode(&bytes[..255]).is_err());
        let frame = FrameHeader {
            checksum: 1,
            id: 2,
            offset_delta: 3,
            timestamp_delta: 4,
            user_headers_length: 5,
            payload_length: 6,
        };
        let bytes = frame.encode();
        assert_eq!(FrameHeader::decode(&bytes, 0, 0).unwrap(), frame);
        let mut reserved = bytes;
        reserved[47] = 1;
        assert_eq!(
            FrameHeader::decode(&reserved, 9, 0),
            Err(BatchError::FrameReserved { index: 9 })
        );
    }
}
