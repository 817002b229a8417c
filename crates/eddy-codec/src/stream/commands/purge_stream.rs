//! `PURGE_STREAM` (code 205, operation 131): deletes all messages and offsets.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `PURGE_STREAM`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct PurgeStream {
        /// Stream, by id or name.
        pub stream_id: Identifier,
    }
}

crate::stream::commands::command!(PurgeStream, PurgeStream, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&PurgeStream {
            stream_id: Identifier::numeric(1),
        });
        round_trip_strict(&PurgeStream {
            stream_id: Identifier::named("orders").unwrap(),
        });
    }
}
