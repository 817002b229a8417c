//! Stored batches and the records of poll replies (spec §4.6).
//!
//! A [`StoredBatch`] wraps the bytes of one stamped batch as the storage layer reads them back.
//! [`StoredBatch::slice`] selects the messages of an offset range and returns a [`PollRecord`]:
//! when the whole batch is selected the record *is* the stored bytes; otherwise it is a new
//! 256-byte header (same partition, base offset and timestamps; `batch_length`,
//! `message_count` and `batch_checksum` of the slice) in front of a `Bytes` slice of the stored
//! frames. Message bodies are never copied.

use bytes::Bytes;
use eddy_wire::stream::xxh3_64;

use super::{BatchHeader, FrameHeader, FrameWalk, BATCH_HEADER_SIZE};
use crate::stream::error::BatchError;

/// One stamped batch as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBatch {
    bytes: Bytes,
    header: BatchHeader,
    first_delta: u32,
}

impl StoredBatch {
    /// Wraps a stored batch after checking its layout: header, `batch_length` equal to the
    /// bytes, frames tiling exactly `message_count` with consecutive `offset_delta`s. A batch
    /// as admitted starts at delta 0; a sliced record keeps the deltas of its frames. Checksums
    /// are not re-verified here (see [`StoredBatch::verify`]).
    pub fn parse(bytes: Bytes) -> Result<Self, BatchError> {
        let header = BatchHeader::decode(&bytes)?;
        if header.batch_length != bytes.len() as u64 {
            return Err(BatchError::LengthMismatch {
                batch_length: header.batch_length,
                actual: bytes.len(),
            });
        }
        let mut found = 0u32;
        let mut first_delta = 0u32;
        for step in FrameWalk::new(&bytes[BATCH_HEADER_SIZE..]) {
            let (_, frame) = step?;
            if found == 0 {
                first_delta = frame.offset_delta;
            } else if Some(frame.offset_delta) != first_delta.checked_add(found) {
                return Err(BatchError::OffsetDelta {
                    index: found,
                    offset_delta: frame.offset_delta,
                });
            }
            found = found.saturating_add(1);
        }
        if found != header.message_count || found == 0 {
            return Err(BatchError::CountMismatch {
                declared: header.message_count,
                found,
            });
        }
        Ok(Self {
            bytes,
            header,
            first_delta,
        })
    }

    /// Re-verifies every frame checksum and the batch checksum (for recovery scans).
    pub fn verify(&self) -> Result<(), BatchError> {
        let frames = &self.bytes[BATCH_HEADER_SIZE..];
        let mut hasher = self.header.checksum_hasher();
        for (index, step) in FrameWalk::new(frames).enumerate() {
            let (start, frame) = step?;
            let computed = xxh3_64(&frames[start + 8..start + frame.frame_len()]);
            if computed != frame.checksum {
                return Err(BatchError::MessageChecksum {
                    index: index as u32,
                    stored: frame.checksum,
                    computed,
                });
            }
            hasher.update(&frames[start..start + 8]);
        }
        let computed = hasher.digest();
        if computed != self.header.batch_checksum {
            return Err(BatchError::BatchChecksum {
                stored: self.header.batch_checksum,
                computed,
            });
        }
        Ok(())
    }

    /// The header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The stored bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The header's `base_offset` (offsets are `base_offset + offset_delta`).
    pub fn base_offset(&self) -> u64 {
        self.header.base_offset
    }

    /// Offset of the first message (`base_offset` for a batch as admitted).
    pub fn first_offset(&self) -> u64 {
        self.header
            .base_offset
            .saturating_add(u64::from(self.first_delta))
    }

    /// Offset of the last message.
    pub fn last_offset(&self) -> u64 {
        self.first_offset()
            .saturating_add(u64::from(self.header.message_count) - 1)
    }

    /// Number of messages.
    pub fn message_count(&self) -> u32 {
        self.header.message_count
    }

    /// Append time, µs.
    pub fn base_timestamp(&self) -> u64 {
        self.header.base_timestamp
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The whole batch as a poll record (zero copy).
    pub fn record(&self) -> PollRecord {
        PollRecord {
            header: self.bytes.slice(..BATCH_HEADER_SIZE),
            frames: self.bytes.slice(BATCH_HEADER_SIZE..),
            message_count: self.header.message_count,
        }
    }

    /// How many messages from `start` (clamped to this batch, at most `max_count`) a record of
    /// at most `max_bytes` (its 256-byte header included) holds: the count to pass to
    /// [`StoredBatch::slice`] for a reply with a byte budget. 0 when not even the first fits
    /// or the range misses the batch.
    pub fn fitting(&self, start: u64, max_count: u32, max_bytes: u64) -> Result<u32, BatchError> {
        let first = start.max(self.first_offset());
        if first > self.last_offset() || max_count == 0 {
            return Ok(0);
        }
        let skip = (first - self.first_offset()) as u32;
        let mut used = BATCH_HEADER_SIZE as u64;
        let mut fit = 0u32;
        for (index, step) in FrameWalk::new(&self.bytes[BATCH_HEADER_SIZE..]).enumerate() {
            let (_, frame) = step?;
            if (index as u32) < skip {
                continue;
            }
            used = used.saturating_add(frame.frame_len() as u64);
            if used > max_bytes || fit == max_count {
                break;
            }
            fit += 1;
        }
        Ok(fit)
    }

    /// The messages with offsets in `start..start + max_count` (clamped to this batch) as a
    /// poll record. Errors if the range does not intersect the batch or `max_count` is 0.
    pub fn slice(&self, start: u64, max_count: u32) -> Result<PollRecord, BatchError> {
        let end = start.saturating_add(u64::from(max_count));
        let first = start.max(self.first_offset());
        let last_exclusive = end.min(self.last_offset().saturating_add(1));
        if first >= last_exclusive {
            return Err(BatchError::OutOfRange { start, end });
        }
        let skip = (first - self.first_offset()) as u32;
        let take = (last_exclusive - first) as u32;
        if skip == 0 && take == self.header.message_count {
            return Ok(self.record());
        }
        let frames = &self.bytes[BATCH_HEADER_SIZE..];
        let mut range_start = frames.len();
        let mut range_end = frames.len();
        for (index, step) in FrameWalk::new(frames).enumerate() {
            let (at, frame) = step?;
            let index = index as u32;
            if index == skip {
                range_start = at;
            }
            if index + 1 == skip + take {
                range_end = at + frame.frame_len();
                break;
            }
        }
        let mut header = self.header;
        header.message_count = take;
        header.batch_length = (BATCH_HEADER_SIZE + range_end - range_start) as u64;
        let selected = &frames[range_start..range_end];
        let mut hasher = header.checksum_hasher();
        for step in FrameWalk::new(selected) {
            let (at, _) = step?;
            hasher.update(&selected[at..at + 8]);
        }
        header.batch_checksum = hasher.digest();
        Ok(PollRecord {
            header: Bytes::copy_from_slice(&header.encode()),
            frames: self
                .bytes
                .slice(BATCH_HEADER_SIZE + range_start..BATCH_HEADER_SIZE + range_end),
            message_count: take,
        })
    }
}

/// One batch record of a poll reply: a 256-byte header and the frames it describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollRecord {
    header: Bytes,
    frames: Bytes,
    message_count: u32,
}

impl PollRecord {
    /// Decodes one record at the start of `body` (client side; layout only, as the SDK reads
    /// it: header, record fits, frames with zero reserved bytes fit). Returns the record and
    /// the bytes consumed.
    pub fn decode(body: &Bytes) -> Result<(Self, usize), BatchError> {
        let header = BatchHeader::decode(body)?;
        let len = usize::try_from(header.batch_length)
            .ok()
            .filter(|&len| len <= body.len())
            .ok_or(BatchError::Truncated {
                offset: 0,
                need: usize::try_from(header.batch_length).unwrap_or(usize::MAX),
                have: body.len(),
            })?;
        let mut found = 0u32;
        for step in FrameWalk::new(&body[BATCH_HEADER_SIZE..len]) {
            step?;
            found = found.saturating_add(1);
        }
        if found != header.message_count {
            return Err(BatchError::CountMismatch {
                declared: header.message_count,
                found,
            });
        }
        Ok((
            Self {
                header: body.slice(..BATCH_HEADER_SIZE),
                frames: body.slice(BATCH_HEADER_SIZE..len),
                message_count: found,
            },
            len,
        ))
    }

    /// The header bytes (256).
    pub fn header_bytes(&self) -> &Bytes {
        &self.header
    }

    /// The frames.
    pub fn frames(&self) -> &Bytes {
        &self.frames
    }

    /// The decoded header.
    pub fn header(&self) -> BatchHeader {
        // Built from a checked header or produced by `encode`: always decodes.
        BatchHeader::decode(&self.header).unwrap_or_default()
    }

    /// Number of messages in the record.
    pub fn message_count(&self) -> u32 {
        self.message_count
    }

    /// Record size.
    pub fn len(&self) -> usize {
        self.header.len() + self.frames.len()
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The messages, as the SDK reports them: `offset = base_offset + offset_delta`,
    /// `timestamp = base_timestamp`, `origin_timestamp = batch origin + timestamp_delta`.
    pub fn messages(&self) -> impl Iterator<Item = PolledMessage> + '_ {
        let header = self.header();
        FrameWalk::new(&self.frames).map_while(Result::ok).map(
            move |(at, frame): (usize, FrameHeader)| {
                let payload_start = at + super::FRAME_HEADER_SIZE;
                let payload_end = payload_start + frame.payload_length as usize;
                let headers_end = payload_end + frame.user_headers_length as usize;
                PolledMessage {
                    offset: header
                        .base_offset
                        .saturating_add(u64::from(frame.offset_delta)),
                    timestamp: header.base_timestamp,
                    origin_timestamp: header
                        .origin_timestamp
                        .saturating_add(u64::from(frame.timestamp_delta)),
                    checksum: frame.checksum,
                    id: frame.id,
                    payload: self.frames.slice(payload_start..payload_end),
                    user_headers: self.frames.slice(payload_end..headers_end),
                }
            },
        )
    }
}

/// One message of a poll reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolledMessage {
    /// Partition offset.
    pub offset: u64,
    /// Append time of its batch, µs.
    pub timestamp: u64,
    /// Producer time, µs.
    pub origin_timestamp: u64,
    /// Frame checksum (not verified by readers).
    pub checksum: u64,
    /// Message id.
    pub id: u128,
    /// Payload (shared with the reply body).
    pub payload: Bytes,
    /// User-header block (empty for none).
    pub user_headers: Bytes,
}
