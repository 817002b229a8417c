//! `UPDATE_TOPIC` (code 304, operation 133): only `compression_algorithm`, `message_expiry` and `max_topic_size` may appear in the block.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::commands::TrailingOptions;
use crate::stream::identifier::Identifier;
use crate::stream::name::WireName;

wire_struct! {
    /// Request body of `UPDATE_TOPIC`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct UpdateTopic {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
        /// New name.
        pub name: WireName,
        /// Options block to the end of the body.
        pub options: TrailingOptions,
    }
}

crate::stream::commands::command!(UpdateTopic, UpdateTopic, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    fn sample_options() -> TrailingOptions {
        TrailingOptions(
            eddy_options::OptionsBlock::from_entries([(
                "message_expiry",
                eddy_options::ValueKind::Uint64,
                &[0xff; 8][..],
            )])
            .unwrap(),
        )
    }

    #[test]
    fn request_round_trips() {
        round_trip(&UpdateTopic {
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
            name: WireName::new("test-name").unwrap(),
            options: TrailingOptions::default(),
        });
        round_trip(&UpdateTopic {
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
            name: WireName::new("x").unwrap(),
            options: sample_options(),
        });
    }
}
