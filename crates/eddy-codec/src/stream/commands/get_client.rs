//! `GET_CLIENT` (code 21): one connection by its id; empty reply when unknown.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Maybe;
use crate::stream::entities::ClientDetails;

wire_struct! {
    /// Request body of `GET_CLIENT`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GetClient {
        /// Connection id as shown in `ClientResponse`.
        pub client_id: u32,
    }
}

crate::stream::commands::command!(GetClient, GetClient, Maybe<ClientDetails>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&GetClient { client_id: 7 });
        round_trip_strict(&GetClient {
            client_id: u32::MAX,
        });
    }
    #[test]
    fn reply_round_trips() {
        use crate::stream::entities::{ClientGroup, ClientResponse};
        let details = ClientDetails {
            client: ClientResponse {
                client_id: 3,
                user_id: 0,
                transport: 1,
                address: crate::stream::codec::LongString::new("10.0.0.1:4000"),
                consumer_groups_count: 1,
            },
            groups: vec![ClientGroup {
                stream_id: 1,
                topic_id: 2,
                group_id: 3,
            }],
        };
        round_trip(&Maybe(Some(details)));
        assert!(round_trip(&Maybe::<ClientDetails>(None)).is_empty());
    }
}
