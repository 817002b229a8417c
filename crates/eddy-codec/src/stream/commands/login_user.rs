//! Legacy `LOGIN_USER` (code 38): never sent by the 0.11 SDK; a server answers it with a
//! `MalformedLogin` eviction. Body
//! `[username: WireName][password: u8-prefixed][version_len: u32][version][context_len: u32][context]`,
//! reply `[user_id: u32]`. Decoded for completeness.

use crate::stream::codec::{wire_struct, LongString, ShortString};
use crate::stream::name::WireName;

wire_struct! {
    /// Request body of legacy `LOGIN_USER`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct LoginUser {
        /// Username.
        pub username: WireName,
        /// Plaintext password.
        pub password: ShortString,
        /// Client version text.
        pub version: LongString,
        /// Client context.
        pub context: LongString,
    }
}

wire_struct! {
    /// Reply of the legacy login commands (38 and 44).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct LegacyLoginReply {
        /// The authenticated user.
        pub user_id: u32,
    }
}

crate::stream::commands::command!(LoginUser, LoginUser, LegacyLoginReply);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn round_trips() {
        round_trip_strict(&LoginUser {
            username: WireName::new("iggy").unwrap(),
            password: ShortString::new("iggy").unwrap(),
            version: LongString::new("0.9.0"),
            context: LongString::new(""),
        });
        assert_eq!(
            round_trip_strict(&LegacyLoginReply { user_id: 5 }),
            [5, 0, 0, 0]
        );
    }
}
