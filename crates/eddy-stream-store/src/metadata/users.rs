//! User and personal access token operations.

use std::collections::BTreeMap;

use crate::error::{Entity, MetadataError};

use super::checks::{check_blob, check_name};
use super::config::MAX_TOKENS_PER_USER;
use super::op::MetadataOp;
use super::records::{user_mut, TokenRecord, UserRecord};

/// Applies a user or token operation.
pub(super) fn apply(
    users: &mut BTreeMap<u32, UserRecord>,
    op: &MetadataOp,
) -> Result<(), MetadataError> {
    match op {
        MetadataOp::CreateUser {
            id,
            username,
            password_hash,
            status,
            permissions,
            options,
            created_at,
        } => create_user(
            users,
            UserRecord {
                id: *id,
                username: username.clone(),
                password_hash: password_hash.clone(),
                status: *status,
                permissions: permissions.clone(),
                options: options.clone(),
                created_at: *created_at,
                tokens: BTreeMap::new(),
            },
        ),
        MetadataOp::UpdateUser {
            id,
            username,
            status,
            options,
        } => update_user(users, *id, username.as_deref(), *status, options.as_deref()),
        MetadataOp::ChangePassword { id, password_hash } => {
            check_blob("password hash", password_hash.as_bytes())?;
            user_mut(users, *id)?
                .password_hash
                .clone_from(password_hash);
            Ok(())
        }
        MetadataOp::UpdatePermissions { id, permissions } => {
            if let Some(p) = permissions {
                check_blob("permissions", p)?;
            }
            user_mut(users, *id)?.permissions.clone_from(permissions);
            Ok(())
        }
        MetadataOp::DeleteUser { id } => {
            users.remove(id).ok_or(MetadataError::UserNotFound(*id))?;
            Ok(())
        }
        MetadataOp::CreateToken {
            user_id,
            name,
            token_hash,
            expiry_at,
        } => create_token(
            users,
            *user_id,
            TokenRecord {
                name: name.clone(),
                token_hash: token_hash.clone(),
                expiry_at: *expiry_at,
            },
        ),
        MetadataOp::DeleteToken { user_id, name } => {
            let user = user_mut(users, *user_id)?;
            user.tokens
                .remove(name)
                .ok_or_else(|| MetadataError::TokenNotFound {
                    user_id: *user_id,
                    name: name.clone(),
                })?;
            Ok(())
        }
        other => unreachable!("not a user operation: {other:?}"),
    }
}

/// Adds `user` (as built from its `CreateUser` op, without tokens). Checks, in order: the
/// username, the password hash, options and permissions blocks, then that the id and the
/// username are free.
fn create_user(
    users: &mut BTreeMap<u32, UserRecord>,
    user: UserRecord,
) -> Result<(), MetadataError> {
    check_name(&user.username)?;
    check_blob("password hash", user.password_hash.as_bytes())?;
    check_blob("user options", &user.options)?;
    if let Some(p) = &user.permissions {
        check_blob("permissions", p)?;
    }
    if users.contains_key(&user.id) {
        return Err(MetadataError::IdTaken {
            entity: Entity::User,
            id: user.id,
        });
    }
    if users.values().any(|u| u.username == user.username) {
        return Err(MetadataError::NameTaken {
            entity: Entity::User,
            name: user.username,
        });
    }
    users.insert(user.id, user);
    Ok(())
}

/// Changes what an `UpdateUser` op names (`None`: unchanged) of user `id`. Checks the new
/// username (valid, and no other user's), then the options block, then that the user exists.
fn update_user(
    users: &mut BTreeMap<u32, UserRecord>,
    id: u32,
    username: Option<&str>,
    status: Option<u8>,
    options: Option<&[u8]>,
) -> Result<(), MetadataError> {
    if let Some(name) = username {
        check_name(name)?;
        if users.values().any(|u| u.username == name && u.id != id) {
            return Err(MetadataError::NameTaken {
                entity: Entity::User,
                name: name.to_owned(),
            });
        }
    }
    if let Some(o) = options {
        check_blob("user options", o)?;
    }
    let user = user_mut(users, id)?;
    if let Some(name) = username {
        name.clone_into(&mut user.username);
    }
    if let Some(s) = status {
        user.status = s;
    }
    if let Some(o) = options {
        o.clone_into(&mut user.options);
    }
    Ok(())
}

/// Gives user `user_id` the personal access token `token` (as built from its `CreateToken`
/// op). Checks, in order: the token's name and hash, that the user exists, that the name is
/// free among its tokens and that it has room for one more ([`MAX_TOKENS_PER_USER`]).
fn create_token(
    users: &mut BTreeMap<u32, UserRecord>,
    user_id: u32,
    token: TokenRecord,
) -> Result<(), MetadataError> {
    check_name(&token.name)?;
    check_blob("token hash", token.token_hash.as_bytes())?;
    let user = user_mut(users, user_id)?;
    if user.tokens.contains_key(&token.name) {
        return Err(MetadataError::NameTaken {
            entity: Entity::Token,
            name: token.name,
        });
    }
    if user.tokens.len() >= MAX_TOKENS_PER_USER {
        return Err(MetadataError::Limit {
            what: "tokens per user".into(),
            value: user.tokens.len() as u64 + 1,
            limit: MAX_TOKENS_PER_USER as u64,
        });
    }
    user.tokens.insert(token.name.clone(), token);
    Ok(())
}
