//! `FETCH_MESSAGES` (code 109) of the 0.12.2 wire: reads many partitions of one topic in one
//! request, after waiting until they hold `min_count` messages. The edge.9 SDK's high-level
//! reader (`IggyConsumer`) polls with it.
//!
//! ```text
//! request  [consumer][stream_id][topic_id][wait_us: u64][request_timeout_us: u64]
//!          [min_count: u32][count: u32][max_bytes: u32][auto_commit: u8]
//!          [targets_count: u32] targets_count x
//!            [partition_id: u32][strategy: 9 bytes][max_bytes: u32][incarnation: u64]
//!            [owner_generation: u64]
//! reply    [sections_count: u32] sections_count x
//!            [partition_id: u32][status: u32][current_offset: u64][messages_count: u32]
//!            [context: 24 bytes][next_offset: u64][records_len: u32]
//!          [records of section 1][records of section 2]...   (as in a poll reply)
//! ```
//!
//! `count` bounds the messages of the whole reply, `max_bytes` the records of the whole reply
//! and a target's `max_bytes` (at most the request's) the records of its section; the first
//! message of the reply comes alone when it is larger (the SDK's `PollOptions::max_bytes`).
//! Every limit is at least [`MIN_MAX_BYTES`]. A section's `status` is 0 or the error code of
//! its partition (then it holds no records).

use bytes::Bytes;

use crate::stream::codec::{wire_struct, Counted, Reader, WireDecode, WireEncode};
pub use crate::stream::commands::poll_messages_deferred::MIN_MAX_BYTES;
use crate::stream::error::CodecError;
use crate::stream::identifier::{Consumer, Identifier};
use crate::stream::polling::PollingStrategy;
use crate::stream::v0_12::PartitionContext;

wire_struct! {
    /// One partition a fetch reads.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct FetchTarget {
        /// The partition.
        pub partition_id: u32,
        /// Where its read starts (`Offset` or `Next`).
        pub strategy: PollingStrategy,
        /// Record bytes of its section.
        pub max_bytes: u32,
        /// The incarnation the client routed with (eddy does not fence by it).
        pub incarnation: u64,
        /// The consumer-group owner generation the client holds.
        pub owner_generation: u64,
    }
}

/// Smallest encoded target.
const TARGET_LEN: usize = 4 + 9 + 4 + 8 + 8;

wire_struct! {
    /// Request body of `FETCH_MESSAGES`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct FetchMessages {
        /// Consumer or consumer group.
        pub consumer: Consumer,
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// How long to wait for `min_count` messages.
        pub wait_us: u64,
        /// The client's deadline for the reply.
        pub request_timeout_us: u64,
        /// Messages that end the wait early.
        pub min_count: u32,
        /// Messages of the whole reply.
        pub count: u32,
        /// Record bytes of the whole reply.
        pub max_bytes: u32,
        /// Store each partition's offset of the last message served.
        pub auto_commit: bool,
        /// The partitions, each once.
        pub targets: Counted<FetchTarget, TARGET_LEN>,
    }
}

impl FetchMessages {
    /// The byte limits the SDK promises (and checks before sending): the request's at least
    /// [`MIN_MAX_BYTES`], each target's between that and the request's.
    pub fn byte_limits_valid(&self) -> bool {
        self.max_bytes >= MIN_MAX_BYTES
            && self
                .targets
                .0
                .iter()
                .all(|t| (MIN_MAX_BYTES..=self.max_bytes).contains(&t.max_bytes))
    }
}

/// Size of one section table entry.
pub const SECTION_LEN: usize = 4 + 4 + 8 + 4 + PartitionContext::LEN + 8 + 4;

/// One entry of the section table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchSection {
    /// The partition.
    pub partition_id: u32,
    /// 0, or the error code of this partition's read.
    pub status: u32,
    /// The partition's newest offset.
    pub current_offset: u64,
    /// Messages in the section's records.
    pub messages_count: u32,
    /// The context of the read.
    pub context: PartitionContext,
    /// Where the next fetch of this partition starts.
    pub next_offset: u64,
    /// Length of the section's records.
    pub records_len: u32,
}

/// The reply: a head (count and table) and the records, kept as the chunks they came in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchMessagesReply {
    /// The sections, in table order.
    pub sections: Vec<FetchSection>,
    /// The records of every section, in table order.
    pub records: Vec<Bytes>,
}

impl FetchMessagesReply {
    /// The count and the table.
    pub fn head(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + SECTION_LEN * self.sections.len());
        out.extend_from_slice(&(self.sections.len() as u32).to_le_bytes());
        for s in &self.sections {
            out.extend_from_slice(&s.partition_id.to_le_bytes());
            out.extend_from_slice(&s.status.to_le_bytes());
            out.extend_from_slice(&s.current_offset.to_le_bytes());
            out.extend_from_slice(&s.messages_count.to_le_bytes());
            out.extend_from_slice(&s.context.incarnation.to_le_bytes());
            out.extend_from_slice(&s.context.owner_generation.to_le_bytes());
            out.extend_from_slice(&s.context.metadata_op.to_le_bytes());
            out.extend_from_slice(&s.next_offset.to_le_bytes());
            out.extend_from_slice(&s.records_len.to_le_bytes());
        }
        out
    }

    /// The head and the records, for the writer.
    pub fn chunks(self) -> Vec<Bytes> {
        let mut chunks = Vec::with_capacity(1 + self.records.len());
        chunks.push(Bytes::from(self.head()));
        chunks.extend(self.records);
        chunks
    }
}

impl WireEncode for FetchMessagesReply {
    fn encoded_len(&self) -> usize {
        4 + SECTION_LEN * self.sections.len() + self.records.iter().map(Bytes::len).sum::<usize>()
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head());
        for record in &self.records {
            out.extend_from_slice(record);
        }
    }
}

impl WireDecode for FetchMessagesReply {
    fn decode(body: &[u8]) -> Result<Self, CodecError> {
        let mut reader = Reader::new(body);
        let count = reader.count("sections_count", SECTION_LEN)?;
        let mut sections = Vec::with_capacity(count);
        for _ in 0..count {
            sections.push(FetchSection {
                partition_id: reader.u32("partition_id")?,
                status: reader.u32("status")?,
                current_offset: reader.u64("current_offset")?,
                messages_count: reader.u32("messages_count")?,
                context: PartitionContext {
                    incarnation: reader.u64("incarnation")?,
                    owner_generation: reader.u64("owner_generation")?,
                    metadata_op: reader.u64("metadata_op")?,
                },
                next_offset: reader.u64("next_offset")?,
                records_len: reader.u32("records_len")?,
            });
        }
        let mut records = Vec::with_capacity(count);
        for section in &sections {
            let bytes = reader.bytes(section.records_len as usize, "records")?;
            records.push(Bytes::copy_from_slice(bytes));
        }
        if !reader.is_empty() {
            return Err(CodecError::InvalidValue {
                field: "records",
                offset: reader.position(),
                reason: "records longer than the table says",
            });
        }
        Ok(Self { sections, records })
    }
}

crate::stream::commands::command!(FetchMessages, FetchMessages, FetchMessagesReply);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_and_reply_round_trip() {
        let request = FetchMessages {
            consumer: Consumer::group(Identifier::named("g").unwrap()),
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(2),
            wait_us: 1_000,
            request_timeout_us: 30_000_000,
            min_count: 1,
            count: 10,
            max_bytes: 1 << 20,
            auto_commit: true,
            targets: Counted(vec![FetchTarget {
                partition_id: 0,
                strategy: PollingStrategy::Next,
                max_bytes: 1 << 20,
                incarnation: 1,
                owner_generation: 3,
            }]),
        };
        round_trip_strict(&request);
        assert!(request.byte_limits_valid());
        let mut low = request.clone();
        low.max_bytes = MIN_MAX_BYTES - 1;
        low.targets.0[0].max_bytes = MIN_MAX_BYTES - 1;
        assert!(!low.byte_limits_valid(), "both below the least");
        let mut above = request.clone();
        above.targets.0[0].max_bytes = request.max_bytes + 1;
        assert!(!above.byte_limits_valid(), "a target above the request");
        let mut forged = request.clone();
        forged.targets.0[0].max_bytes = 0;
        assert!(!forged.byte_limits_valid(), "a zero target");
        let reply = FetchMessagesReply {
            sections: vec![FetchSection {
                partition_id: 0,
                status: 0,
                current_offset: 9,
                messages_count: 1,
                context: PartitionContext::EDDY,
                next_offset: 10,
                records_len: 3,
            }],
            records: vec![Bytes::from_static(b"abc")],
        };
        assert_eq!(reply.head().len(), 4 + SECTION_LEN);
        assert_eq!(SECTION_LEN, 56, "the SDK's table entry");
        round_trip(&reply);
    }
}
