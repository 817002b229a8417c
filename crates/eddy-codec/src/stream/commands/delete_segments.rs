//! `DELETE_SEGMENTS` (code 503, operation 138): deletes the oldest sealed segments. Not result-framed: empty success body, errors via status only.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `DELETE_SEGMENTS`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct DeleteSegments {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// Partition id.
        pub partition_id: u32,
        /// How many of the oldest sealed segments.
        pub segments_count: u32,
    }
}

crate::stream::commands::command!(DeleteSegments, DeleteSegments, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&DeleteSegments {
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
            partition_id: 7,
            segments_count: 7,
        });
        round_trip_strict(&DeleteSegments {
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
            partition_id: u32::MAX,
            segments_count: u32::MAX,
        });
    }
}
