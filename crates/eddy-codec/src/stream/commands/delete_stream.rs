//! `DELETE_STREAM` (code 203, operation 130): reply `00 00 00 00`.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `DELETE_STREAM`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct DeleteStream {
        /// Stream, by id or name.
        pub stream_id: Identifier,
    }
}

crate::stream::commands::command!(DeleteStream, DeleteStream, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&DeleteStream {
            stream_id: Identifier::numeric(1),
        });
        round_trip_strict(&DeleteStream {
            stream_id: Identifier::named("orders").unwrap(),
        });
    }
}
