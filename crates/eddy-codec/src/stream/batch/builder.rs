//! Producer-side batch construction (spec §4.4): frames with `offset_delta = index`,
//! `timestamp_delta = origin - min origin`, per-frame checksums, then the batch header with the
//! three server fields zero and the batch checksum.

use bytes::Bytes;
use eddy_wire::stream::xxh3_64;

use super::{
    BatchHeader, FrameHeader, BATCH_HEADER_SIZE, FRAME_HEADER_SIZE, MAX_BATCH_BYTES,
    MAX_BATCH_MESSAGES, MAX_PAYLOAD_BYTES, MAX_USER_HEADERS_BYTES,
};
use crate::stream::error::BatchError;

/// One message to send.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Message {
    /// Message id. The SDK replaces 0 with a random UUID before encoding; callers of this
    /// builder choose their own ids.
    pub id: u128,
    /// Producer timestamp, µs since the epoch.
    pub origin_timestamp: u64,
    /// Payload (1..=64,000,000 bytes).
    pub payload: Bytes,
    /// Encoded user-header TLV block (empty for none; see
    /// [`crate::stream::user_headers::UserHeaders::encode`]).
    pub user_headers: Bytes,
}

impl Message {
    /// A message without user headers.
    pub fn new(id: u128, origin_timestamp: u64, payload: impl Into<Bytes>) -> Self {
        Self {
            id,
            origin_timestamp,
            payload: payload.into(),
            user_headers: Bytes::new(),
        }
    }

    /// Encoded frame size.
    pub fn frame_len(&self) -> usize {
        FRAME_HEADER_SIZE + self.payload.len() + self.user_headers.len()
    }
}

/// Builds the batch for `messages` (header + frames), as a producer sends it.
///
/// Fails on an empty list, an empty or oversized payload, oversized or malformed user headers,
/// a timestamp spread above `u32::MAX` µs, or a batch over [`MAX_BATCH_BYTES`].
pub fn build_batch(messages: &[Message]) -> Result<Bytes, BatchError> {
    if messages.is_empty() {
        return Err(BatchError::Empty);
    }
    let count = u32::try_from(messages.len())
        .ok()
        .filter(|&n| n <= MAX_BATCH_MESSAGES)
        .ok_or(BatchError::TooManyMessages {
            count: u32::try_from(messages.len()).unwrap_or(u32::MAX),
            limit: MAX_BATCH_MESSAGES,
        })?;
    let mut total = BATCH_HEADER_SIZE;
    let mut min_origin = u64::MAX;
    for (index, message) in messages.iter().enumerate() {
        let invalid = |reason| BatchError::InvalidMessage { index, reason };
        if message.payload.is_empty() {
            return Err(invalid("empty payload"));
        }
        if message.payload.len() > MAX_PAYLOAD_BYTES {
            return Err(invalid("payload over 64,000,000 bytes"));
        }
        if message.user_headers.len() > MAX_USER_HEADERS_BYTES {
            return Err(invalid("user headers over 100,000 bytes"));
        }
        if eddy_options::tlv::validate(&message.user_headers).is_err() {
            return Err(invalid("user headers are not a valid tlv block"));
        }
        total = total.saturating_add(message.frame_len());
        min_origin = min_origin.min(message.origin_timestamp);
    }
    if total > MAX_BATCH_BYTES {
        return Err(BatchError::TooLarge {
            bytes: total as u64,
            limit: MAX_BATCH_BYTES as u64,
        });
    }
    let mut out = Vec::with_capacity(total);
    out.resize(BATCH_HEADER_SIZE, 0);
    let mut checksums = Vec::with_capacity(messages.len());
    for (index, message) in messages.iter().enumerate() {
        let delta = u32::try_from(message.origin_timestamp - min_origin).map_err(|_| {
            BatchError::InvalidMessage {
                index,
                reason: "timestamp spread over u32::MAX microseconds",
            }
        })?;
        let start = out.len();
        let header = FrameHeader {
            checksum: 0,
            id: message.id,
            offset_delta: index as u32,
            timestamp_delta: delta,
            user_headers_length: message.user_headers.len() as u32,
            payload_length: message.payload.len() as u32,
        };
        out.extend_from_slice(&header.encode());
        out.extend_from_slice(&message.payload);
        out.extend_from_slice(&message.user_headers);
        let checksum = xxh3_64(&out[start + 8..]);
        out[start..start + 8].copy_from_slice(&checksum.to_le_bytes());
        checksums.push(checksum);
    }
    debug_assert_eq!(out.len(), total);
    let mut header = BatchHeader {
        partition_id: 0,
        base_offset: 0,
        base_timestamp: 0,
        origin_timestamp: min_origin,
        batch_length: total as u64,
        batch_checksum: 0,
        message_count: count,
    };
    header.batch_checksum = header.checksum_over(checksums);
    out[..BATCH_HEADER_SIZE].copy_from_slice(&header.encode());
    Ok(Bytes::from(out))
}
