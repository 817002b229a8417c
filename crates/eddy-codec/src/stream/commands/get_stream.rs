//! `GET_STREAM` (code 200): stream details, or empty when unknown.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Maybe;
use crate::stream::entities::StreamDetails;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `GET_STREAM`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GetStream {
        /// Stream, by id or name.
        pub stream_id: Identifier,
    }
}

crate::stream::commands::command!(GetStream, GetStream, Maybe<StreamDetails>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&GetStream {
            stream_id: Identifier::numeric(1),
        });
        round_trip_strict(&GetStream {
            stream_id: Identifier::named("orders").unwrap(),
        });
    }
}
