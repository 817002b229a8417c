//! `CHANGE_PASSWORD` (code 37, operation 144).

use crate::stream::codec::wire_struct;
use crate::stream::codec::ShortString;
use crate::stream::commands::Empty;
use crate::stream::identifier::Identifier;

wire_struct! {
    /// Request body of `CHANGE_PASSWORD`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ChangePassword {
        /// User, by id or username.
        pub user_id: Identifier,
        /// Current password (u8-prefixed, plaintext).
        pub current_password: ShortString,
        /// New password (u8-prefixed, plaintext).
        pub new_password: ShortString,
    }
}

crate::stream::commands::command!(ChangePassword, ChangePassword, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&ChangePassword {
            user_id: Identifier::numeric(1),
            current_password: ShortString::new("secret").unwrap(),
            new_password: ShortString::new("secret").unwrap(),
        });
        round_trip_strict(&ChangePassword {
            user_id: Identifier::named("orders").unwrap(),
            current_password: ShortString::new("").unwrap(),
            new_password: ShortString::new("").unwrap(),
        });
    }
}
