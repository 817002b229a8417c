//! `GET_CLIENTS` (code 22): every connection, concatenated with no count.

use crate::stream::codec::ToEnd;
use crate::stream::entities::ClientResponse;

crate::stream::commands::empty_body! {
    /// Request body of `GET_CLIENTS` (empty).
    GetClients
}

crate::stream::commands::command!(GetClients, GetClients, ToEnd<ClientResponse>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        assert!(round_trip(&GetClients).is_empty());
    }
    #[test]
    fn reply_round_trips() {
        let client = ClientResponse {
            client_id: 3,
            user_id: u32::MAX,
            transport: 1,
            address: crate::stream::codec::LongString::new("127.0.0.1:5000"),
            consumer_groups_count: 0,
        };
        round_trip(&ToEnd(vec![client.clone(), client]));
        round_trip(&ToEnd::<ClientResponse>(vec![]));
    }
}
