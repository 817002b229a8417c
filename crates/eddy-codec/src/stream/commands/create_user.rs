//! `CREATE_USER` (code 33, operation 141):
//! `[username: WireName][password: u8-prefixed][status: u8][has_permissions: u8]`
//! `[permissions_len: u32][permissions]` (only when `has_permissions == 1`)
//! `[options block to end]`. The reply is the new user's details.

use crate::stream::codec::{wire_struct, ShortString};
use crate::stream::commands::TrailingOptions;
use crate::stream::entities::UserDetails;
use crate::stream::name::WireName;
use crate::stream::permissions::FlaggedPermissions;

/// User status byte: active.
pub const USER_STATUS_ACTIVE: u8 = 1;
/// User status byte: inactive.
pub const USER_STATUS_INACTIVE: u8 = 2;
/// Username lengths the server accepts (`InvalidUsername` otherwise).
pub const USERNAME_LEN: std::ops::RangeInclusive<usize> = 3..=50;
/// Password lengths the server accepts (`InvalidPassword` otherwise).
pub const PASSWORD_LEN: std::ops::RangeInclusive<usize> = 3..=100;

wire_struct! {
    /// Request body of `CREATE_USER`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CreateUser {
        /// Username (3..=50 bytes, checked by the server).
        pub username: WireName,
        /// Plaintext password (3..=100 bytes, checked by the server).
        pub password: ShortString,
        /// 1 active, 2 inactive (the reference stores unknown values as active).
        pub status: u8,
        /// Optional permissions.
        pub permissions: FlaggedPermissions,
        /// User options to the end of the body (user catalog is empty).
        pub options: TrailingOptions,
    }
}

crate::stream::commands::command!(CreateUser, CreateUser, UserDetails);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;
    use crate::stream::permissions::{GlobalPermissions, Permissions};

    #[test]
    fn round_trips_with_and_without_permissions() {
        let without = CreateUser {
            username: WireName::new("alice").unwrap(),
            password: ShortString::new("secret").unwrap(),
            status: USER_STATUS_ACTIVE,
            permissions: FlaggedPermissions(None),
            options: TrailingOptions::default(),
        };
        let bytes = round_trip(&without);
        assert_eq!(
            bytes[bytes.len() - 1],
            0,
            "flag 0 and the block starts at once"
        );
        let with = CreateUser {
            permissions: FlaggedPermissions(Some(Permissions {
                global: GlobalPermissions::ALL,
                ..Permissions::default()
            })),
            status: USER_STATUS_INACTIVE,
            ..without
        };
        let bytes = round_trip(&with);
        assert_eq!(
            &bytes[bytes.len() - 16..bytes.len() - 11],
            &[1, 11, 0, 0, 0]
        );
    }
}
