//! `GET_USER` (code 31): one user with permissions; empty reply when unknown.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Maybe;
use crate::stream::entities::UserDetails;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `GET_USER`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GetUser {
        /// User, by id or username.
        pub user_id: Identifier,
    }
}

crate::stream::commands::command!(GetUser, GetUser, Maybe<UserDetails>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&GetUser {
            user_id: Identifier::numeric(1),
        });
        round_trip_strict(&GetUser {
            user_id: Identifier::named("orders").unwrap(),
        });
    }
}
