//! `DELETE_CONSUMER_OFFSET` (code 122, operation 162): the trailing ack byte is mandatory.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::identifier::Consumer;
use crate::stream::identifier::Identifier;
use crate::stream::polling::{AckLevel, OptionalPartition};

wire_struct! {
    /// Request body of `DELETE_CONSUMER_OFFSET`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct DeleteConsumerOffset {
        /// Consumer or consumer group.
        pub consumer: Consumer,
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// Partition (none = partition 0 for gets).
        pub partition: OptionalPartition,
        /// Ack level (the SDK sends quorum).
        pub ack: AckLevel,
    }
}

crate::stream::commands::command!(DeleteConsumerOffset, DeleteConsumerOffset, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&DeleteConsumerOffset {
            consumer: Consumer::new(Identifier::numeric(1)),
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
            partition: OptionalPartition(Some(0)),
            ack: AckLevel::Quorum,
        });
        round_trip_strict(&DeleteConsumerOffset {
            consumer: Consumer::group(Identifier::named("g").unwrap()),
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
            partition: OptionalPartition(None),
            ack: AckLevel::NoAck,
        });
    }
}
