//! `GET_PERSONAL_ACCESS_TOKENS` (code 41): the caller's tokens, concatenated with no count.

use crate::stream::codec::wire_struct;
use crate::stream::codec::ToEnd;
use crate::stream::name::WireName;

crate::stream::commands::empty_body! {
    /// Request body of `GET_PERSONAL_ACCESS_TOKENS` (empty).
    GetPersonalAccessTokens
}

wire_struct! {
    /// One token in the list.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct PersonalAccessTokenInfo {
        /// Token name.
        pub name: WireName,
        /// Absolute expiry in µs; 0 = never.
        pub expiry_at: u64,
    }
}

crate::stream::commands::command!(
    GetPersonalAccessTokens,
    GetPersonalAccessTokens,
    ToEnd<PersonalAccessTokenInfo>
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        assert!(round_trip(&GetPersonalAccessTokens).is_empty());
    }
    #[test]
    fn reply_round_trips() {
        let info = PersonalAccessTokenInfo {
            name: WireName::new("ci").unwrap(),
            expiry_at: 0,
        };
        let bytes = round_trip(&ToEnd(vec![info.clone(), info]));
        assert_eq!(bytes.len(), 2 * 11);
    }
}
