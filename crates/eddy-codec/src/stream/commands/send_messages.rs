//! `SEND_MESSAGES` (code 101, operation 160; spec §4.4, §5.5.2):
//!
//! ```text
//! [metadata_length: u32]                 bytes from stream_id through messages_count
//! [stream_id: Identifier][topic_id: Identifier][partitioning: Partitioning][messages_count: u32]
//! [batch: 256-byte batch header + frames]
//! ```
//!
//! Decoding keeps the batch as a zero-copy slice of the body; [`SendMessages::admit`] runs the
//! admission checks. The reply is not result-framed:
//! `[count: u32] count x [stream_id u32][topic_id u32][partition_id u32][base_offset u64]`, and
//! an empty body is also valid.

use bytes::Bytes;

use crate::stream::batch::{admit, build_batch, AdmittedBatch, Message};
use crate::stream::codec::{wire_struct, Field, Reader, WireDecode, WireEncode};
use crate::stream::error::{BatchError, CodecError};
use crate::stream::identifier::{Identifier, Partitioning};

/// Request body of `SEND_MESSAGES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendMessages {
    /// Stream, by id or name.
    pub stream_id: Identifier,
    /// Topic, by id or name.
    pub topic_id: Identifier,
    /// Target partition (the SDK always sends an explicit id).
    pub partitioning: Partitioning,
    /// Number of messages; must equal the batch's `message_count`.
    pub messages_count: u32,
    /// The batch as sent (header + frames), shared with the received frame.
    pub batch: Bytes,
}

impl SendMessages {
    /// Builds a request for `messages` (producer side).
    pub fn new(
        stream_id: Identifier,
        topic_id: Identifier,
        partitioning: Partitioning,
        messages: &[Message],
    ) -> Result<Self, CodecError> {
        let batch = build_batch(messages)?;
        Ok(Self {
            stream_id,
            topic_id,
            partitioning,
            messages_count: messages.len() as u32,
            batch,
        })
    }

    /// `metadata_length`: the bytes from `stream_id` through `messages_count`.
    pub fn metadata_len(&self) -> usize {
        self.stream_id.field_len() + self.topic_id.field_len() + self.partitioning.field_len() + 4
    }

    /// Runs the admission checks on the batch (spec §4.5, step 5).
    pub fn admit(&self) -> Result<AdmittedBatch, BatchError> {
        admit(self.batch.clone(), self.messages_count)
    }
}

impl WireEncode for SendMessages {
    fn encoded_len(&self) -> usize {
        4 + self.metadata_len() + self.batch.len()
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.metadata_len() as u32).to_le_bytes());
        self.stream_id.put(out);
        self.topic_id.put(out);
        self.partitioning.put(out);
        out.extend_from_slice(&self.messages_count.to_le_bytes());
        out.extend_from_slice(&self.batch);
    }
}

impl WireDecode for SendMessages {
    fn decode(body: &[u8]) -> Result<Self, CodecError> {
        Self::decode_bytes(&Bytes::copy_from_slice(body))
    }

    /// Decodes without copying message bytes.
    fn decode_bytes(body: &Bytes) -> Result<Self, CodecError> {
        let mut reader = Reader::new(body);
        let metadata_len = reader.u32("metadata_length")? as usize;
        let metadata = reader.bytes(metadata_len, "metadata")?;
        let mut meta = Reader::new(metadata);
        let stream_id = Identifier::take(&mut meta, "stream_id")?;
        let topic_id = Identifier::take(&mut meta, "topic_id")?;
        let partitioning = Partitioning::take(&mut meta, "partitioning")?;
        let messages_count = meta.u32("messages_count")?;
        meta.finish("metadata")?;
        Ok(Self {
            stream_id,
            topic_id,
            partitioning,
            messages_count,
            batch: body.slice(4 + metadata_len..),
        })
    }
}

wire_struct! {
    /// Where a batch landed.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SendConfirmation {
        /// Numeric stream id.
        pub stream_id: u32,
        /// Numeric topic id.
        pub topic_id: u32,
        /// Partition id.
        pub partition_id: u32,
        /// Offset of the first message.
        pub base_offset: u64,
    }
}

/// Reply payload of `SEND_MESSAGES`. Decoding is strict (no trailing bytes); an empty body is
/// "committed, no offsets reported".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SendMessagesReply {
    /// Confirmations (the reference sends one).
    pub confirmations: Vec<SendConfirmation>,
}

impl WireEncode for SendMessagesReply {
    fn encoded_len(&self) -> usize {
        4 + 20 * self.confirmations.len()
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.confirmations.len() as u32).to_le_bytes());
        for confirmation in &self.confirmations {
            confirmation.put(out);
        }
    }
}

impl WireDecode for SendMessagesReply {
    fn decode(body: &[u8]) -> Result<Self, CodecError> {
        if body.is_empty() {
            return Ok(Self::default());
        }
        let mut reader = Reader::new(body);
        let count = reader.count("confirmations_count", 20)?;
        let mut confirmations = Vec::with_capacity(count);
        for _ in 0..count {
            confirmations.push(SendConfirmation::take(&mut reader, "confirmation")?);
        }
        reader.finish("send confirmations")?;
        Ok(Self { confirmations })
    }
}

crate::stream::commands::command!(SendMessages, SendMessages, SendMessagesReply);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    /// The two messages of spec §1.13.5.
    pub(crate) fn spec_messages() -> Vec<Message> {
        vec![
            Message::new(1, 1_700_000_000_000_000, &b"hello"[..]),
            Message::new(2, 1_700_000_000_000_010, &b"world!"[..]),
        ]
    }

    pub(crate) fn spec_request() -> SendMessages {
        SendMessages::new(
            Identifier::numeric(0),
            Identifier::numeric(0),
            Partitioning::PartitionId(0),
            &spec_messages(),
        )
        .unwrap()
    }

    /// Spec §1.13.5: the 389-byte body, byte for byte where the spec shows it.
    #[test]
    fn golden_request() {
        let request = spec_request();
        let body = round_trip(&request);
        assert_eq!(body.len(), 389);
        assert_eq!(
            &body[..26],
            &hex("16 00 00 00 01 04 00 00 00 00 01 04 00 00 00 00 02 04 00 00 00 00 02 00 00 00")[..]
        );
        let batch = &body[26..];
        assert_eq!(&batch[24..32], &hex("00 40 1e 18 24 0a 06 00")[..]);
        assert_eq!(&batch[32..40], &363u64.to_le_bytes());
        assert_eq!(&batch[40..48], &hex("68 b5 ab d4 ec b8 56 ad")[..]);
        assert_eq!(&batch[48..52], &2u32.to_le_bytes());
        assert!(batch[52..256].iter().all(|&b| b == 0));
        let first = &batch[256..];
        assert_eq!(&first[..8], &hex("8e 5c a5 9e db bd bf b9")[..]);
        assert_eq!(first[8], 1);
        assert_eq!(&first[36..40], &5u32.to_le_bytes());
        assert_eq!(&first[48..53], b"hello");
        let second = &batch[256 + 53..];
        assert_eq!(&second[..8], &hex("9b 1b 76 3f a5 87 45 54")[..]);
        assert_eq!(&second[24..28], &1u32.to_le_bytes());
        assert_eq!(&second[28..32], &10u32.to_le_bytes());
        assert_eq!(&second[48..], b"world!");
        assert!(request.admit().is_ok());
    }

    #[test]
    fn metadata_must_be_exact() {
        let mut body = spec_request().to_vec();
        body[0] = 0x17;
        assert!(SendMessages::decode(&body).is_err());
        body[0] = 0x15;
        assert!(SendMessages::decode(&body).is_err());
        for cut in 0..30 {
            assert!(SendMessages::decode(&body[..cut]).is_err());
        }
    }

    #[test]
    fn decode_is_zero_copy() {
        let body = Bytes::from(spec_request().to_vec());
        let request = SendMessages::decode_bytes(&body).unwrap();
        assert_eq!(request.batch.as_ptr(), body[26..].as_ptr());
    }

    /// Spec §1.13.5: the 24-byte confirmation.
    #[test]
    fn golden_reply() {
        let reply = SendMessagesReply {
            confirmations: vec![SendConfirmation {
                stream_id: 0,
                topic_id: 0,
                partition_id: 0,
                base_offset: 0,
            }],
        };
        let bytes = round_trip(&reply);
        for cut in 1..bytes.len() {
            assert!(SendMessagesReply::decode(&bytes[..cut]).is_err());
        }
        assert_eq!(
            bytes,
            hex("01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00")
        );
        assert_eq!(
            SendMessagesReply::decode(&[]).unwrap(),
            SendMessagesReply::default()
        );
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(SendMessagesReply::decode(&trailing).is_err());
    }
}
