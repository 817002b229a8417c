//! `FLUSH_UNSAVED_BUFFER` (code 102): parses, then the server answers `FeatureUnavailable` (durability is the topic option `enforce_fsync`).

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `FLUSH_UNSAVED_BUFFER`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct FlushUnsavedBuffer {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// Partition id.
        pub partition_id: u32,
        /// Whether to fsync.
        pub fsync: bool,
    }
}

crate::stream::commands::command!(FlushUnsavedBuffer, FlushUnsavedBuffer, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&FlushUnsavedBuffer {
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
            partition_id: 7,
            fsync: true,
        });
        round_trip_strict(&FlushUnsavedBuffer {
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
            partition_id: u32::MAX,
            fsync: false,
        });
    }
}
