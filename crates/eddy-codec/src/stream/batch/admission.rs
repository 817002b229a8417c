//! Server-side admission (spec §4.5) and stamping.
//!
//! [`admit`] checks, in one pass over the bytes: header complete with zero reserved bytes;
//! `batch_length` equal to the bytes given (no trailing bytes) and within [`MAX_BATCH_BYTES`];
//! `message_count` non-zero, within [`MAX_BATCH_MESSAGES`] and equal to the request's
//! `messages_count`; frames complete, with zero reserved bytes, `offset_delta == index`, every
//! frame checksum correct, tiling the batch with exactly `message_count` frames; and the batch
//! checksum correct as received. [`AdmittedBatch::stamp`] then rewrites only the 256-byte
//! header: `partition_id`, `base_offset`, `base_timestamp` and the recomputed checksum.

use bytes::{Bytes, BytesMut};
use eddy_wire::stream::xxh3_64;

use super::{BatchHeader, FrameWalk, BATCH_HEADER_SIZE, MAX_BATCH_BYTES, MAX_BATCH_MESSAGES};
use crate::stream::error::BatchError;

/// A batch that passed every admission check; not yet stamped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmittedBatch {
    bytes: Bytes,
    header: BatchHeader,
    max_timestamp_delta: u32,
}

/// Checks a received batch (the bytes after the `SendMessages` metadata section).
/// `expected_count` is the request's `messages_count`.
pub fn admit(bytes: Bytes, expected_count: u32) -> Result<AdmittedBatch, BatchError> {
    if bytes.len() > MAX_BATCH_BYTES {
        return Err(BatchError::TooLarge {
            bytes: bytes.len() as u64,
            limit: MAX_BATCH_BYTES as u64,
        });
    }
    let header = BatchHeader::decode(&bytes)?;
    if header.batch_length != bytes.len() as u64 {
        return Err(BatchError::LengthMismatch {
            batch_length: header.batch_length,
            actual: bytes.len(),
        });
    }
    if header.message_count == 0 {
        return Err(BatchError::Empty);
    }
    if header.message_count > MAX_BATCH_MESSAGES {
        return Err(BatchError::TooManyMessages {
            count: header.message_count,
            limit: MAX_BATCH_MESSAGES,
        });
    }
    if header.message_count != expected_count {
        return Err(BatchError::CountMismatch {
            declared: expected_count,
            found: header.message_count,
        });
    }
    let frames = &bytes[BATCH_HEADER_SIZE..];
    let mut hasher = header.checksum_hasher();
    let mut found = 0u32;
    let mut max_timestamp_delta = 0u32;
    for step in FrameWalk::new(frames) {
        let (start, frame) = step?;
        if found == header.message_count {
            return Err(BatchError::CountMismatch {
                declared: header.message_count,
                found: found + 1,
            });
        }
        if frame.offset_delta != found {
            return Err(BatchError::OffsetDelta {
                index: found,
                offset_delta: frame.offset_delta,
            });
        }
        let computed = xxh3_64(&frames[start + 8..start + frame.frame_len()]);
        if computed != frame.checksum {
            return Err(BatchError::MessageChecksum {
                index: found,
                stored: frame.checksum,
                computed,
            });
        }
        hasher.update(&frames[start..start + 8]);
        max_timestamp_delta = max_timestamp_delta.max(frame.timestamp_delta);
        found += 1;
    }
    if found != header.message_count {
        return Err(BatchError::CountMismatch {
            declared: header.message_count,
            found,
        });
    }
    let computed = hasher.digest();
    if computed != header.batch_checksum {
        return Err(BatchError::BatchChecksum {
            stored: header.batch_checksum,
            computed,
        });
    }
    Ok(AdmittedBatch {
        bytes,
        header,
        max_timestamp_delta,
    })
}

impl AdmittedBatch {
    /// The header as received.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// Number of messages.
    pub fn message_count(&self) -> u32 {
        self.header.message_count
    }

    /// Batch size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: an admitted batch has at least one message.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Earliest producer timestamp (the header's `origin_timestamp`).
    pub fn first_origin_timestamp(&self) -> u64 {
        self.header.origin_timestamp
    }

    /// Latest producer timestamp (`origin_timestamp + max timestamp_delta`).
    pub fn last_origin_timestamp(&self) -> u64 {
        self.header
            .origin_timestamp
            .saturating_add(u64::from(self.max_timestamp_delta))
    }

    /// The batch bytes as received.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Stamps the three server fields and recomputes the batch checksum. Only the header is
    /// rewritten; the frames stay the received `Bytes`.
    pub fn stamp(self, partition_id: u64, base_offset: u64, base_timestamp: u64) -> StampedBatch {
        let header = self.stamped_header(partition_id, base_offset, base_timestamp);
        StampedBatch {
            header_bytes: header.encode(),
            header,
            frames: self.bytes.slice(BATCH_HEADER_SIZE..),
            max_timestamp_delta: self.max_timestamp_delta,
        }
    }

    /// Stamps as [`AdmittedBatch::stamp`] does and returns the stored batch's bytes (stamped
    /// header, then the frames): the received buffer with its header rewritten in place when
    /// nothing else shares it (the usual case for a large send), a fresh copy otherwise.
    pub fn stamp_into_bytes(
        self,
        partition_id: u64,
        base_offset: u64,
        base_timestamp: u64,
    ) -> Bytes {
        let header = self
            .stamped_header(partition_id, base_offset, base_timestamp)
            .encode();
        match self.bytes.try_into_mut() {
            Ok(mut unique) => {
                unique[..BATCH_HEADER_SIZE].copy_from_slice(&header);
                unique.freeze()
            }
            Err(shared) => {
                let mut copy = BytesMut::with_capacity(shared.len());
                copy.extend_from_slice(&header);
                copy.extend_from_slice(&shared[BATCH_HEADER_SIZE..]);
                copy.freeze()
            }
        }
    }

    /// The received header with the three server fields set and the batch checksum recomputed.
    fn stamped_header(
        &self,
        partition_id: u64,
        base_offset: u64,
        base_timestamp: u64,
    ) -> BatchHeader {
        let mut header = self.header;
        header.partition_id = partition_id;
        header.base_offset = base_offset;
        header.base_timestamp = base_timestamp;
        let frames = &self.bytes[BATCH_HEADER_SIZE..];
        let mut hasher = header.checksum_hasher();
        for step in FrameWalk::new(frames) {
            // Admission proved the layout, so the walk cannot fail.
            let Ok((start, _)) = step else {
                unreachable!("admitted batches tile exactly");
            };
            hasher.update(&frames[start..start + 8]);
        }
        header.batch_checksum = hasher.digest();
        header
    }
}

/// A stamped batch, ready to be stored: a fresh 256-byte header and the received frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StampedBatch {
    header: BatchHeader,
    header_bytes: [u8; BATCH_HEADER_SIZE],
    frames: Bytes,
    max_timestamp_delta: u32,
}

impl StampedBatch {
    /// The stamped header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The encoded stamped header.
    pub fn header_bytes(&self) -> &[u8; BATCH_HEADER_SIZE] {
        &self.header_bytes
    }

    /// The frames, shared with the received request (never copied).
    pub fn frames(&self) -> &Bytes {
        &self.frames
    }

    /// Offset of the first message.
    pub fn base_offset(&self) -> u64 {
        self.header.base_offset
    }

    /// Offset of the last message.
    pub fn last_offset(&self) -> u64 {
        self.header.base_offset + u64::from(self.header.message_count) - 1
    }

    /// Number of messages.
    pub fn message_count(&self) -> u32 {
        self.header.message_count
    }

    /// Append time (every message of the batch reports it), µs.
    pub fn base_timestamp(&self) -> u64 {
        self.header.base_timestamp
    }

    /// Earliest producer timestamp.
    pub fn first_origin_timestamp(&self) -> u64 {
        self.header.origin_timestamp
    }

    /// Latest producer timestamp.
    pub fn last_origin_timestamp(&self) -> u64 {
        self.header
            .origin_timestamp
            .saturating_add(u64::from(self.max_timestamp_delta))
    }

    /// Total size (header + frames).
    pub fn len(&self) -> usize {
        BATCH_HEADER_SIZE + self.frames.len()
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Header and frames as two chunks for a vectored write.
    pub fn chunks(&self) -> [Bytes; 2] {
        [
            Bytes::copy_from_slice(&self.header_bytes),
            self.frames.clone(),
        ]
    }

    /// The whole batch in one buffer (copies the frames; for tests and small batches).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        out.extend_from_slice(&self.header_bytes);
        out.extend_from_slice(&self.frames);
        out
    }
}
