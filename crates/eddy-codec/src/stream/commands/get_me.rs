//! `GET_ME` (code 20): details of the calling connection.

use crate::stream::entities::ClientDetails;

crate::stream::commands::empty_body! {
    /// Request body of `GET_ME` (empty).
    GetMe
}

crate::stream::commands::command!(GetMe, GetMe, ClientDetails);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        assert!(round_trip(&GetMe).is_empty());
    }
}
