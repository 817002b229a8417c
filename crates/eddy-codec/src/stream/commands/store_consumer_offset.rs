//! `STORE_CONSUMER_OFFSET` (code 121, operation 161): the trailing ack byte is mandatory.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::identifier::Consumer;
use crate::stream::identifier::Identifier;
use crate::stream::polling::{AckLevel, OptionalPartition};

wire_struct! {
    /// Request body of `STORE_CONSUMER_OFFSET`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct StoreConsumerOffset {
        /// Consumer or consumer group.
        pub consumer: Consumer,
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// Partition (none = partition 0 for gets).
        pub partition: OptionalPartition,
        /// Offset to store.
        pub offset: u64,
        /// Ack level (the SDK sends quorum).
        pub ack: AckLevel,
    }
}

crate::stream::commands::command!(StoreConsumerOffset, StoreConsumerOffset, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&StoreConsumerOffset {
            consumer: Consumer::new(Identifier::numeric(1)),
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
            partition: OptionalPartition(Some(0)),
            offset: 42,
            ack: AckLevel::Quorum,
        });
        round_trip_strict(&StoreConsumerOffset {
            consumer: Consumer::group(Identifier::named("g").unwrap()),
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
            partition: OptionalPartition(None),
            offset: u64::MAX,
            ack: AckLevel::NoAck,
        });
    }
    #[test]
    fn ack_byte_is_mandatory() {
        use crate::stream::codec::{WireDecode, WireEncode};
        let request = StoreConsumerOffset {
            consumer: Consumer::new(Identifier::numeric(1)),
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::numeric(0),
            partition: OptionalPartition(Some(0)),
            offset: 5,
            ack: AckLevel::Quorum,
        };
        let bytes = request.to_vec();
        assert!(StoreConsumerOffset::decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
