//! `DELETE_USER` (code 34, operation 143): reply `00 00 00 00`.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `DELETE_USER`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct DeleteUser {
        /// User, by id or username.
        pub user_id: Identifier,
    }
}

crate::stream::commands::command!(DeleteUser, DeleteUser, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&DeleteUser {
            user_id: Identifier::numeric(1),
        });
        round_trip_strict(&DeleteUser {
            user_id: Identifier::named("orders").unwrap(),
        });
    }
}
