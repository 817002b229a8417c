//! `GET_USERS` (code 32): every user, concatenated with no count.

use crate::stream::codec::ToEnd;
use crate::stream::entities::UserResponse;

crate::stream::commands::empty_body! {
    /// Request body of `GET_USERS` (empty).
    GetUsers
}

crate::stream::commands::command!(GetUsers, GetUsers, ToEnd<UserResponse>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        assert!(round_trip(&GetUsers).is_empty());
    }
}
