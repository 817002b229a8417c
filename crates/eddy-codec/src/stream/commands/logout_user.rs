//! `LOGOUT_USER` (code 39, operation 3): empty request, empty (not result-framed) reply.

use crate::stream::commands::Empty;

crate::stream::commands::empty_body! {
    /// Request body of `LOGOUT_USER` (empty).
    LogoutUser
}

crate::stream::commands::command!(LogoutUser, LogoutUser, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        assert!(round_trip(&LogoutUser).is_empty());
    }
}
