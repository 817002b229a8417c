//! `GET_CONSUMER_GROUPS` (code 601): the topic's groups, concatenated with no count.

use crate::stream::codec::wire_struct;
use crate::stream::codec::ToEnd;
use crate::stream::entities::ConsumerGroupResponse;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `GET_CONSUMER_GROUPS`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GetConsumerGroups {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
    }
}

crate::stream::commands::command!(
    GetConsumerGroups,
    GetConsumerGroups,
    ToEnd<ConsumerGroupResponse>
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&GetConsumerGroups {
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
        });
        round_trip_strict(&GetConsumerGroups {
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
        });
    }
}
