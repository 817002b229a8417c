//! Users and personal access tokens (stream protocol §5.2, §5.4, §7.2).
//!
//! Passwords are hashed with Argon2id off the reactor and only the hash is stored; a token is
//! shown once by `CREATE_PERSONAL_ACCESS_TOKEN` and only its BLAKE3 hash is stored. The root user
//! (id 0) cannot be deleted, deactivated, or have its permissions changed. Deleting or
//! deactivating a user ends its sessions at once (their next request is unauthenticated), and
//! so does deleting or the expiry of the token a session logged in with. Expired tokens are
//! purged when their owner creates a token and every `token_purge_interval_secs`.

use eddy_auth::credentials::{
    normalize_status, valid_password, valid_username, STATUS_ACTIVE, STATUS_INACTIVE,
};
use eddy_auth::permissions::ROOT_USER_ID;
use eddy_auth::token::{generate_token, valid_token_name, TokenExpiry, MAX_TOKENS_PER_USER};
use eddy_codec::stream::codec::ToEnd;
use eddy_codec::stream::commands::change_password::ChangePassword;
use eddy_codec::stream::commands::create_personal_access_token::{
    CreatePersonalAccessToken, RawPersonalAccessToken,
};
use eddy_codec::stream::commands::create_user::CreateUser;
use eddy_codec::stream::commands::delete_personal_access_token::DeletePersonalAccessToken;
use eddy_codec::stream::commands::get_personal_access_tokens::PersonalAccessTokenInfo;
use eddy_codec::stream::commands::update_permissions::UpdatePermissions;
use eddy_codec::stream::commands::update_user::UpdateUser;
use eddy_codec::stream::commands::Maybe;
use eddy_options::{validate_block, Mode, Scope};
use eddy_stream_store::{Entity, MetadataError, MetadataOp, StreamStoreError};

use super::handler::{Ctx, Outcome};
use super::throttle::Check;
use super::{views, StreamState};
use eddy_replicated::stream::error::{Missing, StreamError};

/// Hashes a password on the blocking pool (Argon2id takes tens of milliseconds), within the
/// bound on concurrent hashes.
async fn hash(state: &StreamState, password: String) -> Result<String, StreamError> {
    let permit = state.login.hash_permit().await;
    crate::offload::blocking(move || {
        let _permit = permit;
        eddy_auth::password::hash_password(&password)
    })
    .await
    .map_err(StreamError::Auth)
}

/// Verifies a password on the blocking pool, within the bound on concurrent hashes.
async fn verify(state: &StreamState, password: String, stored: String) -> bool {
    let permit = state.login.hash_permit().await;
    crate::offload::blocking(move || {
        let _permit = permit;
        eddy_auth::password::verify_password(&password, &stored)
    })
    .await
}

/// `GET_USER`.
pub(crate) fn get_user(ctx: Ctx<'_>, user_id: u32) -> Outcome {
    let details = ctx
        .state
        .read(|meta| meta.users.get(&user_id).map(views::user_details));
    Outcome::payload(&Maybe(details))
}

/// `GET_USERS`.
pub(crate) fn get_users(ctx: Ctx<'_>) -> Outcome {
    let users = ctx
        .state
        .read(|meta| meta.users.values().map(views::user_response).collect());
    Outcome::payload(&ToEnd(users))
}

/// `CREATE_USER`.
pub(crate) async fn create_user(ctx: Ctx<'_>, request: CreateUser) -> Result<Outcome, StreamError> {
    let username = request.username.into_string();
    if !valid_username(&username) {
        return Err(StreamError::InvalidUsername {
            len: username.len(),
        });
    }
    let password = request.password.0;
    if !valid_password(&password) {
        return Err(StreamError::InvalidPassword {
            len: password.len(),
        });
    }
    validate_block(Scope::User, &request.options.0, Mode::Create)?;
    let taken = |name: &str| {
        ctx.state
            .read(|meta| meta.user_by_name(name).is_some())
            .then(|| StreamError::NameTaken {
                entity: Entity::User,
                name: name.to_owned(),
            })
    };
    if let Some(taken) = taken(&username) {
        return Err(taken);
    }
    let password_hash = hash(ctx.state, password).await?;
    let permissions = request
        .permissions
        .0
        .as_ref()
        .map(views::encode_permissions);
    let id = {
        let _creating = ctx.state.creation.lock().await;
        let id = ctx
            .state
            .read(eddy_stream_store::MetadataState::lowest_free_user_id);
        ctx.state
            .commit(MetadataOp::CreateUser {
                id,
                username,
                password_hash,
                status: normalize_status(request.status),
                permissions,
                options: request.options.0.as_bytes().to_vec(),
                created_at: crate::clock::now_micros(),
            })
            .await?;
        id
    };
    let details = ctx
        .state
        .read(|meta| meta.users.get(&id).map(views::user_details))
        .ok_or(StreamError::NotFound(Missing::User))?;
    Ok(Outcome::payload(&details))
}

/// `DELETE_USER`.
pub(crate) async fn delete_user(ctx: Ctx<'_>, user_id: u32) -> Result<Outcome, StreamError> {
    if user_id == ROOT_USER_ID {
        return Err(StreamError::CannotDeleteRoot);
    }
    ctx.state
        .commit(MetadataOp::DeleteUser { id: user_id })
        .await?;
    ctx.state.end_sessions_of(user_id);
    Ok(Outcome::empty())
}

/// `UPDATE_USER`: username and status (absent fields keep their value; an unknown status code
/// is ignored, as the reference server does).
pub(crate) async fn update_user(
    ctx: Ctx<'_>,
    user_id: u32,
    request: UpdateUser,
) -> Result<Outcome, StreamError> {
    let username = request
        .username
        .map(eddy_codec::stream::WireName::into_string);
    if let Some(name) = &username {
        if !valid_username(name) {
            return Err(StreamError::InvalidUsername { len: name.len() });
        }
    }
    validate_block(Scope::User, &request.options.0, Mode::Update)?;
    let status = request
        .status
        .filter(|s| *s == STATUS_ACTIVE || *s == STATUS_INACTIVE);
    if user_id == ROOT_USER_ID && status == Some(STATUS_INACTIVE) {
        return Err(StreamError::CannotDeactivateRoot);
    }
    ctx.state
        .commit(MetadataOp::UpdateUser {
            id: user_id,
            username,
            status,
            options: None,
        })
        .await?;
    if status == Some(STATUS_INACTIVE) {
        ctx.state.end_sessions_of(user_id);
    }
    Ok(Outcome::empty())
}

/// `UPDATE_PERMISSIONS`.
pub(crate) async fn update_permissions(
    ctx: Ctx<'_>,
    user_id: u32,
    request: UpdatePermissions,
) -> Result<Outcome, StreamError> {
    if user_id == ROOT_USER_ID {
        return Err(StreamError::CannotChangeRootPermissions);
    }
    ctx.state
        .commit(MetadataOp::UpdatePermissions {
            id: user_id,
            permissions: request
                .permissions
                .0
                .as_ref()
                .map(views::encode_permissions),
        })
        .await?;
    Ok(Outcome::empty())
}

/// `CHANGE_PASSWORD`: the current password must match, whoever asks. The check is a password
/// guess like a login: it waits the backoff its connection's and address's failures owe, and a
/// wrong current password counts as a failure of both (the connection closes after
/// `login_max_failures_per_connection` of them).
pub(crate) async fn change_password(
    ctx: Ctx<'_>,
    user_id: u32,
    request: ChangePassword,
) -> Result<Outcome, StreamError> {
    let new_password = request.new_password.0;
    if !valid_password(&new_password) {
        return Err(StreamError::InvalidPassword {
            len: new_password.len(),
        });
    }
    let state = ctx.state;
    let peer = state.peer_ip(ctx.client_id);
    state
        .login
        .before_attempt(
            Check::PasswordChange,
            peer,
            state.clients.login_failures(ctx.client_id),
        )
        .await;
    let stored = state
        .read(|meta| meta.users.get(&user_id).map(|u| u.password_hash.clone()))
        .ok_or(StreamError::NotFound(Missing::User))?;
    if !verify(state, request.current_password.0, stored).await {
        state.login.failed(Check::PasswordChange, peer);
        let failures = state.clients.login_failed(ctx.client_id);
        tracing::debug!(
            client_id = ctx.client_id,
            user_id,
            failures,
            "password change refused: wrong current password"
        );
        return Err(StreamError::WrongPassword);
    }
    let password_hash = hash(ctx.state, new_password).await?;
    ctx.state
        .commit(MetadataOp::ChangePassword {
            id: user_id,
            password_hash,
        })
        .await?;
    Ok(Outcome::empty())
}

/// `GET_PERSONAL_ACCESS_TOKENS`: the caller's own tokens.
pub(crate) fn get_tokens(ctx: Ctx<'_>) -> Outcome {
    let tokens = ctx.state.read(|meta| {
        meta.users
            .get(&ctx.user_id)
            .map(|user| {
                user.tokens
                    .values()
                    .map(|t| PersonalAccessTokenInfo {
                        name: views::wire_name(&t.name),
                        expiry_at: t.expiry_at.unwrap_or(0),
                    })
                    .collect()
            })
            .unwrap_or_default()
    });
    Outcome::payload(&ToEnd(tokens))
}

/// `CREATE_PERSONAL_ACCESS_TOKEN`: returns the raw token, once.
pub(crate) async fn create_token(
    ctx: Ctx<'_>,
    request: CreatePersonalAccessToken,
) -> Result<Outcome, StreamError> {
    let name = request.name.into_string();
    if !valid_token_name(&name) {
        return Err(StreamError::InvalidTokenName { len: name.len() });
    }
    let now = crate::clock::now_micros();
    let expiry =
        TokenExpiry::from_wire(request.expiry, now).ok_or(StreamError::InvalidTokenExpiry {
            expiry: request.expiry,
        })?;
    // Expired tokens neither count against the limit nor keep their names taken.
    purge_expired_tokens(ctx.state, Some(ctx.user_id), now).await?;
    let (exists, count) = ctx.state.read(|meta| {
        meta.users.get(&ctx.user_id).map_or((false, 0), |u| {
            (u.tokens.contains_key(&name), u.tokens.len())
        })
    });
    if exists {
        return Err(StreamError::NameTaken {
            entity: Entity::Token,
            name,
        });
    }
    if count >= MAX_TOKENS_PER_USER {
        return Err(StreamError::TooManyTokens {
            limit: MAX_TOKENS_PER_USER,
        });
    }
    let generated = generate_token();
    ctx.state
        .commit(MetadataOp::CreateToken {
            user_id: ctx.user_id,
            name,
            token_hash: generated.hash,
            expiry_at: match expiry {
                TokenExpiry::Never => None,
                TokenExpiry::At(at) => Some(at),
            },
        })
        .await?;
    Ok(Outcome::payload(&RawPersonalAccessToken {
        token: views::wire_name(&generated.token),
    }))
}

/// `DELETE_PERSONAL_ACCESS_TOKEN`: one of the caller's own tokens.
pub(crate) async fn delete_token(
    ctx: Ctx<'_>,
    request: DeletePersonalAccessToken,
) -> Result<Outcome, StreamError> {
    ctx.state
        .commit(MetadataOp::DeleteToken {
            user_id: ctx.user_id,
            name: request.name.into_string(),
        })
        .await?;
    Ok(Outcome::empty())
}

/// Deletes the expired personal access tokens of `user` (of every user when `None`) at
/// `now_us`; returns how many were deleted. A token deleted meanwhile by its owner is skipped.
/// Sessions that logged in with them have already stopped working (`dispatch` checks expiry
/// on every request); this gives their names and their share of the per-user limit back.
pub(crate) async fn purge_expired_tokens(
    state: &StreamState,
    user: Option<u32>,
    now_us: u64,
) -> Result<usize, StreamError> {
    let expired: Vec<(u32, String)> = state.read(|meta| {
        meta.users
            .values()
            .filter(|u| user.is_none_or(|id| id == u.id))
            .flat_map(|u| {
                u.tokens
                    .values()
                    .filter(|t| t.expiry_at.is_some_and(|at| now_us >= at))
                    .map(|t| (u.id, t.name.clone()))
            })
            .collect()
    });
    let mut purged = 0;
    for (user_id, name) in expired {
        match state
            .commit(MetadataOp::DeleteToken { user_id, name })
            .await
        {
            Ok(()) => purged += 1,
            Err(StreamError::Storage(StreamStoreError::Metadata(
                MetadataError::TokenNotFound { .. } | MetadataError::UserNotFound(_),
            ))) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(purged)
}
