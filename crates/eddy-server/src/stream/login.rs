//! Login-register and logout (stream protocol §1.6, §1.8, §5.3).
//!
//! A Register body is read both ways ([`RegisterAttempts`]); the server tries the
//! username/password shape first, then the token shape, and answers a failure with the
//! eviction the spec names for it (the connection stays open, the SDK may retry on it):
//!
//! | Failure | Eviction reason |
//! |---|---|
//! | undecodable version prefix, neither shape parses | `MalformedLogin` (15) |
//! | protocol version outside the window | `IncompatibleProtocol` (14), window in the header |
//! | bad username/password, inactive user (password login) | `InvalidCredentials` (9) |
//! | unknown or expired token | `InvalidToken` (10) |
//! | valid token of an inactive user | `UserInactive` (11) |
//!
//! A success binds a new session to the connection (a re-login replaces the previous session,
//! as a logout would) and replies `[user_id][session][server_protocol_version][server_version]`.
//! Attempts are throttled ([`super::throttle`]): a bounded number of Argon2id checks at once,
//! a growing delay after failures of the connection or its address, and the connection closes
//! after `login_max_failures_per_connection` failures.
//! A token session remembers the token's digest: it ends when the token is deleted or expires
//! (checked on every request by `dispatch`).

use bytes::Bytes;
use eddy_auth::credentials::{
    check_password_login, check_token_login, LoginRefusal, TokenCandidate, UserCredentials,
};
use eddy_auth::sessions::{ClientId, Credential};
use eddy_auth::token::TokenDigest;
use eddy_codec::stream::commands::login_register::{
    LoginRegister, LoginRegisterReply, RegisterAttempts,
};
use eddy_codec::stream::CommandCode;
use eddy_wire::stream::version::{Revision, PROTOCOL_VERSION_MAX, PROTOCOL_VERSION_MIN};
use eddy_wire::stream::{EvictionHeader, EvictionReason, RequestHeader};

use super::handler::{Ctx, Outcome, SERVER_VERSION};
use super::throttle::Check;
use super::{views, StreamState};
use eddy_replicated::stream::error::StreamError;

/// Handles a Register body. Returns the command it turned out to be (for metrics).
pub(crate) async fn register(
    state: &StreamState,
    client_id: ClientId,
    header: &RequestHeader,
    body: &Bytes,
) -> (CommandCode, Result<Outcome, StreamError>) {
    let evict = |reason| {
        Ok(Outcome::Evict(Box::new(EvictionHeader::new(
            header.client,
            reason,
        ))))
    };
    let Ok(attempts) = RegisterAttempts::decode(body) else {
        return (
            CommandCode::LoginRegister,
            evict(EvictionReason::MalformedLogin),
        );
    };
    let code = if attempts.password.is_some() {
        CommandCode::LoginRegister
    } else {
        CommandCode::LoginRegisterWithPat
    };
    // 0.11.x and 0.12.2 are served, each in its own dialect; the window advertised spans both.
    let Some(revision) = Revision::of(attempts.client.protocol_version) else {
        return (
            code,
            Ok(Outcome::Evict(Box::new(
                EvictionHeader::incompatible_protocol(
                    header.client,
                    PROTOCOL_VERSION_MAX,
                    PROTOCOL_VERSION_MIN,
                ),
            ))),
        );
    };
    // On a cluster member the credentials are checked against metadata that includes every
    // change acknowledged before the login arrived (a token created, a password changed or a
    // user deleted through another member): a lagging follower neither refuses a new
    // credential nor accepts a revoked one. A member that cannot confirm answers a transient
    // error, never a stale check.
    if let Some(cluster) = &state.cluster {
        if let Err(e) = cluster.linearize_metadata().await {
            return (code, Err(e.into()));
        }
    }
    let peer = state.peer_ip(client_id);
    state
        .login
        .before_attempt(Check::Login, peer, state.clients.login_failures(client_id))
        .await;
    let mut refusal = LoginRefusal::InvalidCredentials;
    if let Some(login) = attempts.password {
        match check_password(state, login).await {
            Ok(user_id) => {
                return (
                    CommandCode::LoginRegister,
                    bind(state, client_id, user_id, Credential::Password, revision),
                )
            }
            Err(r) => refusal = r,
        }
    }
    if let Some(login) = attempts.token {
        match check_token(state, login.token.as_str()) {
            Ok(user_id) => {
                let credential = Credential::Token(TokenDigest::of(login.token.as_str()));
                return (
                    CommandCode::LoginRegisterWithPat,
                    bind(state, client_id, user_id, credential, revision),
                );
            }
            Err(r) => refusal = r,
        }
    }
    state.login.failed(Check::Login, peer);
    let failures = state.clients.login_failed(client_id);
    tracing::debug!(client_id, %refusal, failures, "login refused");
    let reason = match refusal {
        LoginRefusal::InvalidToken => EvictionReason::InvalidToken,
        LoginRefusal::UserInactive => EvictionReason::UserInactive,
        _ => EvictionReason::InvalidCredentials,
    };
    (code, evict(reason))
}

/// Checks a username and password against the stored hash (off the async threads, within
/// the bound on concurrent hashes): the user's id, or why the login is refused.
async fn check_password(state: &StreamState, login: LoginRegister) -> Result<u32, LoginRefusal> {
    let username = login.username.into_string();
    let password = login.password.0;
    let user = state.read(|meta| {
        meta.user_by_name(&username)
            .map(|u| (u.id, u.status, u.password_hash.clone()))
    });
    let permit = state.login.hash_permit().await;
    crate::offload::blocking(move || {
        let _permit = permit;
        let credentials = user.as_ref().map(|(id, status, hash)| UserCredentials {
            id: *id,
            status: *status,
            password_hash: hash,
        });
        check_password_login(&username, &password, credentials)
    })
    .await
}

/// Checks a personal access token against every stored one: its user's id, or why the login
/// is refused.
fn check_token(state: &StreamState, presented: &str) -> Result<u32, LoginRefusal> {
    let now = crate::clock::now_micros();
    state.read(|meta| {
        let candidates = meta.users.values().flat_map(|user| {
            user.tokens.values().map(move |token| TokenCandidate {
                user_id: user.id,
                user_status: user.status,
                token_hash: &token.token_hash,
                expiry_at: token.expiry_at,
            })
        });
        check_token_login(presented, candidates, now)
    })
}

/// Binds a session for `user_id` to the connection and builds the login reply.
fn bind(
    state: &StreamState,
    client_id: ClientId,
    user_id: u32,
    credential: Credential,
    revision: Revision,
) -> Result<Outcome, StreamError> {
    let protocol_version = revision.protocol_version();
    let Ok((session, previous)) =
        state
            .clients
            .login_with(client_id, user_id, credential, protocol_version)
    else {
        return Err(StreamError::Unauthenticated);
    };
    if previous.is_some() {
        state.leave_all_groups(client_id);
    }
    tracing::debug!(client_id, user_id, session = session.number, "logged in");
    Ok(Outcome::payload(&LoginRegisterReply {
        user_id,
        session: session.number,
        server_protocol_version: protocol_version,
        server_version: views::wire_name(SERVER_VERSION),
    }))
}

/// Ends the connection's session (a no-op success when it has none).
pub(crate) fn logout(ctx: Ctx<'_>) -> Outcome {
    if ctx.state.clients.logout(ctx.client_id).is_some() {
        ctx.state.leave_all_groups(ctx.client_id);
    }
    Outcome::empty()
}
