//! `GET_TOPICS` (code 301): `[topics_count: u32]` + that many topic headers (the only
//! count-prefixed list). An empty body also decodes as no topics, as the SDK accepts it.

use crate::stream::codec::{wire_struct, Field, Reader, WireDecode, WireEncode};
use crate::stream::entities::TopicHeader;
use crate::stream::error::CodecError;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `GET_TOPICS`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GetTopics {
        /// Stream, by id or name.
        pub stream_id: Identifier,
    }
}

/// Smallest encoded topic header (1-byte name, two empty option blocks).
const MIN_TOPIC_HEADER_LEN: usize = 49 + 2 + 8;

/// The topic list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicList(pub Vec<TopicHeader>);

impl WireEncode for TopicList {
    fn encoded_len(&self) -> usize {
        4 + self.0.iter().map(Field::field_len).sum::<usize>()
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.0.len() as u32).to_le_bytes());
        for topic in &self.0 {
            topic.put(out);
        }
    }
}

impl WireDecode for TopicList {
    fn decode(body: &[u8]) -> Result<Self, CodecError> {
        if body.is_empty() {
            return Ok(Self::default());
        }
        let mut reader = Reader::new(body);
        let count = reader.count("topics_count", MIN_TOPIC_HEADER_LEN)?;
        let mut topics = Vec::with_capacity(count);
        for _ in 0..count {
            topics.push(TopicHeader::take(&mut reader, "topic")?);
        }
        Ok(Self(topics))
    }
}

crate::stream::commands::command!(GetTopics, GetTopics, TopicList);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;
    use crate::stream::name::WireName;
    use eddy_options::OptionsBlock;

    #[test]
    fn round_trips() {
        round_trip_strict(&GetTopics {
            stream_id: Identifier::numeric(0),
        });
        let topic = TopicHeader {
            id: 1,
            created_at: 2,
            partitions_count: 3,
            message_expiry: u64::MAX,
            compression_algorithm: 1,
            max_topic_size: u64::MAX,
            size_bytes: 0,
            messages_count: 0,
            name: WireName::new("t").unwrap(),
            options: OptionsBlock::empty(),
            derived_options: OptionsBlock::empty(),
        };
        assert_eq!(topic.field_len(), MIN_TOPIC_HEADER_LEN);
        round_trip(&TopicList(vec![topic.clone(), topic]));
        assert_eq!(round_trip(&TopicList::default()), [0, 0, 0, 0]);
        assert_eq!(TopicList::decode(&[]).unwrap(), TopicList::default());
    }
}
