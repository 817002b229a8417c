//! `GET_PARTITION_ROUTE` (code 105) of the 0.12.2 wire: where a partition's sends, polls and
//! offsets go. The edge.9 SDK asks before its first call on a partition.
//!
//! ```text
//! request  [stream_id][topic_id][partition_id: u32]
//! reply    [incarnation: u64][metadata_op: u64][view: u32][partitions_count: u32]
//!          [primary_replica: u8]                          (exactly 25 bytes)
//! ```

use crate::stream::codec::wire_struct;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `GET_PARTITION_ROUTE`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GetPartitionRoute {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// The partition.
        pub partition_id: u32,
    }
}

wire_struct! {
    /// Reply payload of `GET_PARTITION_ROUTE`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct PartitionRoute {
        /// The partition's creation revision (eddy: 1; ids are not reused while it exists).
        pub incarnation: u64,
        /// The metadata position the route was read at.
        pub metadata_op: u64,
        /// The consensus view of the partition's group.
        pub view: u32,
        /// The topic's partition count (the SDK partitions sends with it).
        pub partitions_count: u32,
        /// Replica id of the partition's primary, as `GET_CLUSTER_METADATA` names it.
        pub primary_replica: u8,
    }
}

crate::stream::commands::command!(GetPartitionRoute, GetPartitionRoute, PartitionRoute);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::codec::WireEncode;
    use crate::stream::commands::testing::*;

    /// The golden bytes of the reference crate's own test.
    #[test]
    fn reply_bytes() {
        let route = PartitionRoute {
            incarnation: 0x0102_0304_0506_0708,
            metadata_op: 0x1112_1314_1516_1718,
            view: 0x2122_2324,
            partitions_count: 0x3132_3334,
            primary_replica: 0x41,
        };
        assert_eq!(
            route.to_vec(),
            hex("08 07 06 05 04 03 02 01 18 17 16 15 14 13 12 11 \
                 24 23 22 21 34 33 32 31 41")
        );
        round_trip_strict(&route);
        round_trip_strict(&GetPartitionRoute {
            stream_id: Identifier::named("events").unwrap(),
            topic_id: Identifier::numeric(7),
            partition_id: 2,
        });
    }
}
