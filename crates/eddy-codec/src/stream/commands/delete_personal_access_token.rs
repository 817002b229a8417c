//! `DELETE_PERSONAL_ACCESS_TOKEN` (code 43, operation 147): reply `00 00 00 00`.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::name::WireName;

wire_struct! {
    /// Request body of `DELETE_PERSONAL_ACCESS_TOKEN`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct DeletePersonalAccessToken {
        /// Token name.
        pub name: WireName,
    }
}

crate::stream::commands::command!(DeletePersonalAccessToken, DeletePersonalAccessToken, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&DeletePersonalAccessToken {
            name: WireName::new("test-name").unwrap(),
        });
        round_trip_strict(&DeletePersonalAccessToken {
            name: WireName::new("x").unwrap(),
        });
    }
}
