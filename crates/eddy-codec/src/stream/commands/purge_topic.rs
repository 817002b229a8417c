//! `PURGE_TOPIC` (code 305, operation 135): every partition reset to empty.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `PURGE_TOPIC`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct PurgeTopic {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Topic, by id or name.
        pub topic_id: Identifier,
    }
}

crate::stream::commands::command!(PurgeTopic, PurgeTopic, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&PurgeTopic {
            stream_id: Identifier::numeric(1),
            topic_id: Identifier::numeric(1),
        });
        round_trip_strict(&PurgeTopic {
            stream_id: Identifier::named("orders").unwrap(),
            topic_id: Identifier::named("orders").unwrap(),
        });
    }
}
