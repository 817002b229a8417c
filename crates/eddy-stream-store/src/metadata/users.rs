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
        } => {
            check_name(username)?;
            check_blob("password hash", password_hash.as_bytes())?;
            check_blob("user options", options)?;
            if let Some(p) = permissions {
                check_blob("permissions", p)?;
            }
            if users.contains_key(id) {
                return Err(MetadataError::IdTaken {
                    entity: Entity::User,
                    id: *id,
                });
            }
            if users.values().any(|u| u.username == *username) {
                return Err(MetadataError::NameTaken {
                    entity: Entity::User,
                    name: username.clone(),
                });
            }
            users.insert(
                *id,
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
            );
        }
        MetadataOp::UpdateUser {
            id,
            username,
            status,
            options,
        } => {
            if let Some(name) = username {
                check_name(name)?;
                if users.values().any(|u| u.username == *name && u.id != *id) {
                    return Err(MetadataError::NameTaken {
                        entity: Entity::User,
                        name: name.clone(),
                    });
                }
            }
            if let Some(o) = options {
                check_blob("user options", o)?;
            }
            let user = user_mut(users, *id)?;
            if let Some(name) = username {
                user.username.clone_from(name);
            }
            if let Some(s) = status {
                user.status = *s;
            }
            if let Some(o) = options {
                user.options.clone_from(o);
            }
        }
        MetadataOp::ChangePassword { id, password_hash } => {
            check_blob("password hash", password_hash.as_bytes())?;
            user_mut(users, *id)?
                .password_hash
                .clone_from(password_hash);
        }
        MetadataOp::UpdatePermissions { id, permissions } => {
            if let Some(p) = permissions {
                check_blob("permissions", p)?;
            }
            user_mut(users, *id)?.permissions.clone_from(permissions);
        }
        MetadataOp::DeleteUser { id } => {
            users.remove(id).ok_or(MetadataError::UserNotFound(*id))?;
        }
        MetadataOp::CreateToken {
            user_id,
            name,
            token_hash,
            expiry_at,
        } => {
            check_name(name)?;
            check_blob("token hash", token_hash.as_bytes())?;
            let user = user_mut(users, *user_id)?;
            if user.tokens.contains_key(name) {
                return Err(MetadataError::NameTaken {
                    entity: Entity::Token,
                    name: name.clone(),
                });
            }
            if user.tokens.len() >= MAX_TOKENS_PER_USER {
                return Err(MetadataError::Limit {
                    what: "tokens per user",
                    value: user.tokens.len() as u64 + 1,
                    limit: MAX_TOKENS_PER_USER as u64,
                });
            }
            user.tokens.insert(
                name.clone(),
                TokenRecord {
                    name: name.clone(),
                    token_hash: token_hash.clone(),
                    expiry_at: *expiry_at,
                },
            );
        }
        MetadataOp::DeleteToken { user_id, name } => {
            let user = user_mut(users, *user_id)?;
            user.tokens
                .remove(name)
                .ok_or_else(|| MetadataError::TokenNotFound {
                    user_id: *user_id,
                    name: name.clone(),
                })?;
        }
        other => unreachable!("not a user operation: {other:?}"),
    }
    Ok(())
}
