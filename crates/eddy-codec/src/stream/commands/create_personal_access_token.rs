//! `CREATE_PERSONAL_ACCESS_TOKEN` (code 42, operation 146): reply is the raw token, shown once.

use crate::stream::codec::wire_struct;
use crate::stream::name::WireName;

wire_struct! {
    /// Request body of `CREATE_PERSONAL_ACCESS_TOKEN`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CreatePersonalAccessToken {
        /// Token name (unique per user).
        pub name: WireName,
        /// Lifetime in µs; 0 = server default, `u64::MAX` = never expires.
        pub expiry: u64,
    }
}

wire_struct! {
    /// The raw token (a `WireName`, 1..=255 bytes).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RawPersonalAccessToken {
        /// The token.
        pub token: WireName,
    }
}

crate::stream::commands::command!(
    CreatePersonalAccessToken,
    CreatePersonalAccessToken,
    RawPersonalAccessToken
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        round_trip_strict(&CreatePersonalAccessToken {
            name: WireName::new("test-name").unwrap(),
            expiry: 42,
        });
        round_trip_strict(&CreatePersonalAccessToken {
            name: WireName::new("x").unwrap(),
            expiry: u64::MAX,
        });
    }
    #[test]
    fn reply_round_trips() {
        round_trip_strict(&RawPersonalAccessToken {
            token: WireName::new("a".repeat(68)).unwrap(),
        });
    }
}
