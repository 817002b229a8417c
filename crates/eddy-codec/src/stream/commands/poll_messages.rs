//! `POLL_MESSAGES` (code 100; spec §5.5.1, §4.6).
//!
//! ```text
//! request  [consumer][stream_id][topic_id][partition: flag u8 + u32][strategy: 9 bytes]
//!          [count: u32][auto_commit: u8]
//! reply    [partition_id: u32][current_offset: u64][messages_count: u32][batch records to end]
//! ```
//!
//! The reply always carries the 16-byte prefix, even with zero messages. Records are stored
//! batches or server-sliced views; [`PollMessagesReply::chunks`] hands them to the writer
//! without copying.

use bytes::Bytes;

use crate::stream::batch::{PollRecord, PolledMessage};
use crate::stream::codec::{wire_struct, Reader, WireDecode, WireEncode};
use crate::stream::error::CodecError;
use crate::stream::identifier::{Consumer, Identifier};
use crate::stream::polling::{OptionalPartition, PollingStrategy};

wire_struct! {
    /// Request body of `POLL_MESSAGES`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct PollMessages {
        /// Consumer or consumer group.
        pub consumer: Consumer,
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// Partition (a single consumer without one polls partition 0).
        pub partition: OptionalPartition,
        /// Where to start.
        pub strategy: PollingStrategy,
        /// Maximum messages to return.
        pub count: u32,
        /// Store the offset of the last returned message.
        pub auto_commit: bool,
    }
}

/// Partition id of the "re-sync required" reply to a fenced group poll.
pub const RESYNC_PARTITION: u32 = u32::MAX;

/// Reply payload of `POLL_MESSAGES`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PollMessagesReply {
    /// The polled partition.
    pub partition_id: u32,
    /// The partition's newest offset (0 when empty).
    pub current_offset: u64,
    /// Sum of the records' message counts.
    pub messages_count: u32,
    /// Batch records, in offset order.
    pub records: Vec<PollRecord>,
}

impl PollMessagesReply {
    /// A reply over `records`, with `messages_count` computed from them.
    pub fn new(partition_id: u32, current_offset: u64, records: Vec<PollRecord>) -> Self {
        let messages_count = records.iter().map(PollRecord::message_count).sum();
        Self {
            partition_id,
            current_offset,
            messages_count,
            records,
        }
    }

    /// The empty "re-sync required" reply for a consumer-group poll of a partition the member
    /// does not own.
    pub fn resync() -> Self {
        Self::new(RESYNC_PARTITION, 0, Vec::new())
    }

    /// The 16-byte prefix.
    pub fn prefix(&self) -> [u8; 16] {
        Self::encode_prefix(self.partition_id, self.current_offset, self.messages_count)
    }

    /// The 16-byte prefix of a reply whose records are assembled elsewhere (the server serves
    /// stored batches and sliced views as they are, behind this prefix).
    pub fn encode_prefix(partition_id: u32, current_offset: u64, messages_count: u32) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..4].copy_from_slice(&partition_id.to_le_bytes());
        out[4..12].copy_from_slice(&current_offset.to_le_bytes());
        out[12..].copy_from_slice(&messages_count.to_le_bytes());
        out
    }

    /// The body as chunks: prefix, then each record's header and frames (shared, not copied).
    pub fn chunks(&self) -> Vec<Bytes> {
        let mut out = Vec::with_capacity(1 + 2 * self.records.len());
        out.push(Bytes::copy_from_slice(&self.prefix()));
        for record in &self.records {
            out.push(record.header_bytes().clone());
            out.push(record.frames().clone());
        }
        out
    }

    /// Every message of every record.
    pub fn messages(&self) -> impl Iterator<Item = PolledMessage> + '_ {
        self.records.iter().flat_map(PollRecord::messages)
    }
}

impl WireEncode for PollMessagesReply {
    fn encoded_len(&self) -> usize {
        16 + self.records.iter().map(PollRecord::len).sum::<usize>()
    }

    fn encode(&self, out: &mut Vec<u8>) {
        for chunk in self.chunks() {
            out.extend_from_slice(&chunk);
        }
    }
}

impl WireDecode for PollMessagesReply {
    fn decode(body: &[u8]) -> Result<Self, CodecError> {
        Self::decode_bytes(&Bytes::copy_from_slice(body))
    }

    /// Decodes without copying message bytes.
    fn decode_bytes(body: &Bytes) -> Result<Self, CodecError> {
        let mut reader = Reader::new(body);
        let partition_id = reader.u32("partition_id")?;
        let current_offset = reader.u64("current_offset")?;
        let messages_count = reader.u32("messages_count")?;
        let mut records = Vec::new();
        let mut at = 16;
        while at < body.len() {
            let (record, used) = PollRecord::decode(&body.slice(at..))?;
            records.push(record);
            at += used;
        }
        Ok(Self {
            partition_id,
            current_offset,
            messages_count,
            records,
        })
    }
}

crate::stream::commands::command!(PollMessages, PollMessages, PollMessagesReply);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::batch::StoredBatch;
    use crate::stream::commands::send_messages::tests::spec_request;
    use crate::stream::commands::testing::*;

    /// Spec §1.13.6: the 38-byte poll body.
    #[test]
    fn golden_request() {
        let request = PollMessages {
            consumer: Consumer::new(Identifier::numeric(1)),
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::numeric(0),
            partition: OptionalPartition(Some(0)),
            strategy: PollingStrategy::Offset(0),
            count: 10,
            auto_commit: false,
        };
        assert_eq!(
            round_trip_strict(&request),
            hex("01 01 04 01 00 00 00 01 04 00 00 00 00 01 04 00 00 00 00 \
                 01 00 00 00 00 01 00 00 00 00 00 00 00 00 0a 00 00 00 00")
        );
    }

    /// Spec §1.13.6 and §4.6: the stamped record and the sliced view of offset 1.
    #[test]
    fn golden_reply_and_slice() {
        let stamped = spec_request()
            .admit()
            .unwrap()
            .stamp(0, 0, 1_700_000_000_500_000);
        let stored = StoredBatch::parse(Bytes::from(stamped.to_vec())).unwrap();
        let header = stored.bytes();
        assert_eq!(&header[16..24], &hex("20 e1 25 18 24 0a 06 00")[..]);
        assert_eq!(&header[40..48], &hex("22 51 d6 ef 2b 49 54 b9")[..]);

        let reply = PollMessagesReply::new(0, 1, vec![stored.record()]);
        let body = round_trip(&reply);
        assert_eq!(
            &body[..16],
            &hex("00 00 00 00 01 00 00 00 00 00 00 00 02 00 00 00")[..]
        );
        assert_eq!(&body[16..], &stored.bytes()[..]);

        let slice = stored.slice(1, 1).unwrap();
        let sliced = slice.header();
        assert_eq!(sliced.batch_length, 0x136);
        assert_eq!(sliced.message_count, 1);
        assert_eq!(sliced.base_offset, 0);
        assert_eq!(sliced.batch_checksum, 0x86a0_39da_5fb4_1d51);
        let reply = PollMessagesReply::new(0, 1, vec![slice]);
        let decoded = PollMessagesReply::decode(&reply.to_vec()).unwrap();
        let messages: Vec<_> = decoded.messages().collect();
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].offset, 1);
        assert_eq!(&messages[0].payload[..], b"world!");
        assert_eq!(messages[0].timestamp, 1_700_000_000_500_000);
        assert_eq!(messages[0].origin_timestamp, 1_700_000_000_000_010);
    }

    #[test]
    fn empty_and_resync_replies_carry_the_prefix() {
        let bytes = round_trip_strict(&PollMessagesReply::resync());
        assert_eq!(bytes.len(), 16);
        assert_eq!(&bytes[..4], &[0xff; 4]);
    }
}
