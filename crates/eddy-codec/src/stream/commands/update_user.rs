//! `UPDATE_USER` (code 35, operation 142):
//! `[user_id][has_username: u8][username: WireName if 1][has_status: u8][status: u8 if 1]`
//! `[options block to end]`. Flag values other than 1 mean "absent".

use crate::stream::codec::{body_via_field, Field, Reader};
use crate::stream::commands::{Empty, TrailingOptions};
use crate::stream::error::CodecError;
use crate::stream::identifier::Identifier;
use crate::stream::name::WireName;

/// Request body of `UPDATE_USER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateUser {
    /// User, by id or username.
    pub user_id: Identifier,
    /// New username, if changing.
    pub username: Option<WireName>,
    /// New status (1 active, 2 inactive), if changing.
    pub status: Option<u8>,
    /// Options to the end of the body (user catalog is empty).
    pub options: TrailingOptions,
}

impl Field for UpdateUser {
    fn field_len(&self) -> usize {
        self.user_id.field_len()
            + 1
            + self.username.as_ref().map_or(0, Field::field_len)
            + 1
            + usize::from(self.status.is_some())
            + self.options.field_len()
    }

    fn put(&self, out: &mut Vec<u8>) {
        self.user_id.put(out);
        match &self.username {
            Some(name) => {
                out.push(1);
                name.put(out);
            }
            None => out.push(0),
        }
        match self.status {
            Some(status) => out.extend_from_slice(&[1, status]),
            None => out.push(0),
        }
        self.options.put(out);
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let user_id = Identifier::take(reader, "UpdateUser.user_id")?;
        let username = if reader.u8(name)? == 1 {
            Some(WireName::take(reader, "UpdateUser.username")?)
        } else {
            None
        };
        let status = if reader.u8(name)? == 1 {
            Some(reader.u8("UpdateUser.status")?)
        } else {
            None
        };
        let options = TrailingOptions::take(reader, name)?;
        Ok(Self {
            user_id,
            username,
            status,
            options,
        })
    }
}

body_via_field!(UpdateUser);

crate::stream::commands::command!(UpdateUser, UpdateUser, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::codec::WireDecode;
    use crate::stream::commands::testing::*;

    #[test]
    fn round_trips() {
        let full = UpdateUser {
            user_id: Identifier::numeric(3),
            username: Some(WireName::new("bob").unwrap()),
            status: Some(2),
            options: TrailingOptions::default(),
        };
        assert_eq!(
            round_trip(&full),
            [1, 4, 3, 0, 0, 0, 1, 3, b'b', b'o', b'b', 1, 2]
        );
        let none = UpdateUser {
            user_id: Identifier::numeric(3),
            username: None,
            status: None,
            options: TrailingOptions::default(),
        };
        assert_eq!(round_trip(&none), [1, 4, 3, 0, 0, 0, 0, 0]);
        let odd_flags = UpdateUser::decode(&[1, 4, 3, 0, 0, 0, 7, 9]).unwrap();
        assert_eq!(odd_flags, none, "flags other than 1 mean absent");
    }
}
