//! `GET_CONSUMER_OFFSET` (code 120): 20-byte reply, or empty when no offset is stored.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Maybe;
use crate::stream::identifier::Consumer;
use crate::stream::identifier::Identifier;
use crate::stream::polling::OptionalPartition;

wire_struct! {
    /// Request body of `GET_CONSUMER_OFFSET`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GetConsumerOffset {
        /// Consumer or consumer group.
        pub consumer: Consumer,
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// Partition (none = partition 0 for gets).
        pub partition: OptionalPartition,
    }
}

wire_struct! {
    /// A stored consumer offset.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct ConsumerOffsetInfo {
        /// Partition id.
        pub partition_id: u32,
        /// Newest offset of the partition.
        pub current_offset: u64,
        /// The consumer's stored offset.
        pub stored_offset: u64,
    }
}

crate::stream::commands::command!(
    GetConsumerOffset,
    GetConsumerOffset,
    Maybe<ConsumerOffsetInfo>
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&GetConsumerOffset {
            consumer: Consumer::new(Identifier::numeric(1)),
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
            partition: OptionalPartition(Some(0)),
        });
        round_trip_strict(&GetConsumerOffset {
            consumer: Consumer::group(Identifier::named("g").unwrap()),
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
            partition: OptionalPartition(None),
        });
    }
    #[test]
    fn reply_round_trips() {
        let bytes = round_trip(&Maybe(Some(ConsumerOffsetInfo {
            partition_id: 1,
            current_offset: 9,
            stored_offset: 4,
        })));
        assert_eq!(bytes.len(), 20);
        assert!(round_trip(&Maybe::<ConsumerOffsetInfo>(None)).is_empty());
    }
}
