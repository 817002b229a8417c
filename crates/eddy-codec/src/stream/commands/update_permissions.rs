//! `UPDATE_PERMISSIONS` (code 36, operation 145): `[user_id][has_permissions: u8]` then, only
//! when 1, `[permissions_len: u32][permissions]`. With 0 the body ends after the flag and the
//! user's permissions are cleared.

use crate::stream::codec::wire_struct;
use crate::stream::commands::Empty;
use crate::stream::identifier::Identifier;
use crate::stream::permissions::FlaggedPermissions;

wire_struct! {
    /// Request body of `UPDATE_PERMISSIONS`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct UpdatePermissions {
        /// User, by id or username.
        pub user_id: Identifier,
        /// New permissions; `None` clears them.
        pub permissions: FlaggedPermissions,
    }
}

crate::stream::commands::command!(UpdatePermissions, UpdatePermissions, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;
    use crate::stream::permissions::Permissions;

    #[test]
    fn round_trips() {
        let cleared = UpdatePermissions {
            user_id: Identifier::numeric(2),
            permissions: FlaggedPermissions(None),
        };
        assert_eq!(round_trip_strict(&cleared), [1, 4, 2, 0, 0, 0, 0]);
        round_trip_strict(&UpdatePermissions {
            user_id: Identifier::named("bob").unwrap(),
            permissions: FlaggedPermissions(Some(Permissions::default())),
        });
    }
}
