//! Legacy `LOGIN_WITH_PERSONAL_ACCESS_TOKEN` (code 44): never sent by the 0.11 SDK; a server answers it with a `MalformedLogin` eviction. Decoded for completeness.

use crate::stream::codec::wire_struct;
use crate::stream::commands::login_user::LegacyLoginReply;
use crate::stream::name::WireName;

wire_struct! {
    /// Request body of `LOGIN_WITH_PERSONAL_ACCESS_TOKEN`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct LoginWithPersonalAccessToken {
        /// The raw token.
        pub token: WireName,
    }
}

crate::stream::commands::command!(
    LoginWithPersonalAccessToken,
    LoginWithPersonalAccessToken,
    LegacyLoginReply
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&LoginWithPersonalAccessToken {
            token: WireName::new("test-name").unwrap(),
        });
        round_trip_strict(&LoginWithPersonalAccessToken {
            token: WireName::new("x").unwrap(),
        });
    }
}
