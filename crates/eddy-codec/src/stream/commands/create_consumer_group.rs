//! `CREATE_CONSUMER_GROUP` (code 602, operation 139): ids are server-assigned; the reply is the new group's details.

use crate::stream::codec::wire_struct;
use crate::stream::entities::ConsumerGroupDetails;
use crate::stream::identifier::Identifier;
use crate::stream::name::WireName;

wire_struct! {
    /// Request body of `CREATE_CONSUMER_GROUP`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CreateConsumerGroup {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// Group name (unique per topic).
        pub name: WireName,
    }
}

crate::stream::commands::command!(
    CreateConsumerGroup,
    CreateConsumerGroup,
    ConsumerGroupDetails
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&CreateConsumerGroup {
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
            name: WireName::new("test-name").unwrap(),
        });
        round_trip_strict(&CreateConsumerGroup {
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
            name: WireName::new("x").unwrap(),
        });
    }
    #[test]
    fn reply_round_trips() {
        use crate::stream::entities::{ConsumerGroupMember, ConsumerGroupResponse};
        let details = ConsumerGroupDetails {
            group: ConsumerGroupResponse {
                id: 0,
                partitions_count: 3,
                members_count: 2,
                name: WireName::new("g").unwrap(),
            },
            members: vec![
                ConsumerGroupMember {
                    id: 0,
                    partitions: vec![0, 2],
                },
                ConsumerGroupMember {
                    id: 1,
                    partitions: vec![1],
                },
            ],
        };
        round_trip_strict(&details);
    }
}
