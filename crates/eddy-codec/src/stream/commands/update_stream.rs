//! `UPDATE_STREAM` (code 204, operation 129): patch semantics for options.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::commands::TrailingOptions;
use crate::stream::identifier::Identifier;
use crate::stream::name::WireName;

wire_struct! {
    /// Request body of `UPDATE_STREAM`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct UpdateStream {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// New name (may equal the old one).
        pub name: WireName,
        /// Options block to the end of the body (stream catalog is empty).
        pub options: TrailingOptions,
    }
}

crate::stream::commands::command!(UpdateStream, UpdateStream, Empty);

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
        round_trip(&UpdateStream {
            stream_id: Identifier::numeric(1),
            name: WireName::new("test-name").unwrap(),
            options: TrailingOptions::default(),
        });
        round_trip(&UpdateStream {
            stream_id: Identifier::named("orders").unwrap(),
            name: WireName::new("x").unwrap(),
            options: sample_options(),
        });
    }
}
