//! `CREATE_PARTITIONS` (code 402, operation 136): appends partitions after the highest id.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `CREATE_PARTITIONS`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CreatePartitions {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// How many to add (1..=1000).
        pub partitions_count: u32,
    }
}

crate::stream::commands::command!(CreatePartitions, CreatePartitions, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&CreatePartitions {
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
            partitions_count: 7,
        });
        round_trip_strict(&CreatePartitions {
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
            partitions_count: u32::MAX,
        });
    }
}
