//! `LOGIN_REGISTER_WITH_PAT` (code 45, operation 1): version prefix, then
//! `[token: u8-prefixed][context: u32-prefixed]`. Reply as for code 40.

use crate::stream::codec::{wire_struct, LongString, ShortString};
use crate::stream::commands::login_register::{ClientVersionInfo, LoginRegisterReply};

wire_struct! {
    /// Request body of `LOGIN_REGISTER_WITH_PAT`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct LoginRegisterWithPat {
        /// Version prefix.
        pub client: ClientVersionInfo,
        /// The raw token (the SDK sends 1..=255 bytes).
        pub token: ShortString,
        /// Context; the SDK sends an empty one.
        pub context: LongString,
    }
}

crate::stream::commands::command!(
    LoginRegisterWithPat,
    LoginRegisterWithPat,
    LoginRegisterReply
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;
    use crate::stream::name::WireName;

    #[test]
    fn round_trips() {
        let body = round_trip_strict(&LoginRegisterWithPat {
            client: ClientVersionInfo {
                protocol_version: 0x2C00,
                sdk_name: WireName::new("rust-sdk").unwrap(),
                sdk_version: WireName::new("0.11.0-edge.4").unwrap(),
            },
            token: ShortString::new("abc").unwrap(),
            context: LongString::new(""),
        });
        assert_eq!(&body[body.len() - 8..], &[3, b'a', b'b', b'c', 0, 0, 0, 0]);
    }
}
