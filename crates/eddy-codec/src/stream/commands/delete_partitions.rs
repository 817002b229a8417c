//! `DELETE_PARTITIONS` (code 403, operation 137): removes the highest-id partitions.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `DELETE_PARTITIONS`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct DeletePartitions {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// How many to remove (1..=1000).
        pub partitions_count: u32,
    }
}

crate::stream::commands::command!(DeletePartitions, DeletePartitions, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&DeletePartitions {
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
            partitions_count: 7,
        });
        round_trip_strict(&DeletePartitions {
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
            partitions_count: u32::MAX,
        });
    }
}
