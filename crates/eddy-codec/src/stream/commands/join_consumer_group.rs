//! `JOIN_CONSUMER_GROUP` (code 604, operation 148): the member is the caller's session.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `JOIN_CONSUMER_GROUP`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct JoinConsumerGroup {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// Consumer group, by id or name.
        pub group_id: Identifier,
    }
}

crate::stream::commands::command!(JoinConsumerGroup, JoinConsumerGroup, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&JoinConsumerGroup {
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
            group_id: Identifier::numeric(1),
        });
        round_trip_strict(&JoinConsumerGroup {
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
            group_id: Identifier::named("orders").unwrap(),
        });
    }
}
