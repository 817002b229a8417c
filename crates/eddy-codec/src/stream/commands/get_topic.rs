//! `GET_TOPIC` (code 300): topic details, or empty when unknown.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Maybe;
use crate::stream::entities::TopicDetails;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `GET_TOPIC`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GetTopic {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
    }
}

crate::stream::commands::command!(GetTopic, GetTopic, Maybe<TopicDetails>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&GetTopic {
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
        });
        round_trip_strict(&GetTopic {
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
        });
    }
}
