//! `SYNC_CONSUMER_GROUP` (code 606): the caller's pollable partitions and the group generation; empty when the caller is not a member.

use crate::stream::codec::wire_struct;
use crate::stream::codec::Counted;
use crate::stream::commands::Maybe;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `SYNC_CONSUMER_GROUP`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SyncConsumerGroup {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// Consumer group, by id or name.
        pub group_id: Identifier,
    }
}

wire_struct! {
    /// A member's current assignment.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GroupAssignment {
        /// Group generation (incremented on every rebalance).
        pub generation: u64,
        /// Pollable partition ids, count-prefixed.
        pub partitions: Counted<u32, 4>,
    }
}

crate::stream::commands::command!(SyncConsumerGroup, SyncConsumerGroup, Maybe<GroupAssignment>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&SyncConsumerGroup {
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
            group_id: Identifier::numeric(1),
        });
        round_trip_strict(&SyncConsumerGroup {
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
            group_id: Identifier::named("orders").unwrap(),
        });
    }
    #[test]
    fn reply_round_trips() {
        let bytes = round_trip(&Maybe(Some(GroupAssignment {
            generation: 3,
            partitions: Counted(vec![0, 2]),
        })));
        assert_eq!(
            bytes,
            [3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0]
        );
        let none = round_trip(&Maybe(Some(GroupAssignment {
            generation: 1,
            partitions: Counted(vec![]),
        })));
        assert_eq!(
            none.len(),
            12,
            "a member without partitions still gets a non-empty reply"
        );
        assert!(round_trip(&Maybe::<GroupAssignment>(None)).is_empty());
    }
}
