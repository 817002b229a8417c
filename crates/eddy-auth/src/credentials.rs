//! Credential rules of the stream protocol: username and password shapes, user status, and the
//! two login checks (password, personal access token) in the order the spec gives them
//! (stream protocol §1.6.6).
//!
//! The server hands in what it read from storage ([`UserCredentials`], [`TokenCandidate`]);
//! this module decides. Verification of a password is an Argon2id computation (tens of
//! milliseconds): call it off the async reactor.
//!
//! Invariants: an unknown user costs the same Argon2 work as a known one (a fixed decoy hash is
//! verified), so response time does not reveal which usernames exist; an inactive user and a
//! wrong password are the same refusal; token hashes are compared in constant time.

use std::ops::RangeInclusive;
use std::sync::OnceLock;

use crate::password::{hash_password, verify_password};
use crate::secret::ct_eq;
use crate::token::{hash_token, TokenDigest};

/// Accepted username lengths in bytes (`InvalidUsername` otherwise).
pub const USERNAME_LEN: RangeInclusive<usize> = 3..=50;
/// Accepted password lengths in bytes (`InvalidPassword` otherwise).
pub const PASSWORD_LEN: RangeInclusive<usize> = 3..=100;
/// User status byte: active.
pub const STATUS_ACTIVE: u8 = 1;
/// User status byte: inactive.
pub const STATUS_INACTIVE: u8 = 2;

/// True when `name` has an accepted username length.
pub fn valid_username(name: &str) -> bool {
    USERNAME_LEN.contains(&name.len())
}

/// True when `password` has an accepted password length.
pub fn valid_password(password: &str) -> bool {
    PASSWORD_LEN.contains(&password.len())
}

/// A status byte as stored: 2 is inactive; 1 and any unknown value are active (the reference
/// server stores unknown codes as active).
pub fn normalize_status(status: u8) -> u8 {
    if status == STATUS_INACTIVE {
        STATUS_INACTIVE
    } else {
        STATUS_ACTIVE
    }
}

/// Why a login was refused. Each maps to one eviction reason at the server edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoginRefusal {
    /// Bad username or password, or an inactive user logging in with a password.
    #[error("invalid credentials")]
    InvalidCredentials,
    /// Unknown or expired personal access token.
    #[error("invalid personal access token")]
    InvalidToken,
    /// A valid token of an inactive user.
    #[error("user is inactive")]
    UserInactive,
}

/// A user as the password check needs it.
#[derive(Debug, Clone, Copy)]
pub struct UserCredentials<'a> {
    /// Id.
    pub id: u32,
    /// Stored status byte.
    pub status: u8,
    /// Stored Argon2 PHC string.
    pub password_hash: &'a str,
}

fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| {
        // A hash of a password nobody can send (it is longer than PASSWORD_LEN allows).
        hash_password(&"x".repeat(PASSWORD_LEN.end() + 1)).unwrap_or_default()
    })
}

/// The username/password check: shape, lookup result, Argon2 verification, status. `user` is
/// the user with exactly this username, if any. Returns the user id.
pub fn check_password_login(
    username: &str,
    password: &str,
    user: Option<UserCredentials<'_>>,
) -> Result<u32, LoginRefusal> {
    let shaped = valid_username(username) && valid_password(password);
    let Some(user) = user.filter(|_| shaped) else {
        // Same work as a real check, so timing does not tell which usernames exist.
        let _ = verify_password(password, decoy_hash());
        return Err(LoginRefusal::InvalidCredentials);
    };
    let verified = verify_password(password, user.password_hash);
    if !verified || normalize_status(user.status) != STATUS_ACTIVE {
        return Err(LoginRefusal::InvalidCredentials);
    }
    Ok(user.id)
}

/// A stored token as the token check needs it.
#[derive(Debug, Clone, Copy)]
pub struct TokenCandidate<'a> {
    /// Owner.
    pub user_id: u32,
    /// Owner's status byte.
    pub user_status: u8,
    /// Stored BLAKE3 hex hash of the token.
    pub token_hash: &'a str,
    /// Absolute expiry in µs, `None` for never.
    pub expiry_at: Option<u64>,
}

/// The personal-access-token check: hashes `token`, finds the stored token with that hash
/// (constant-time comparisons), then checks expiry and the owner's status. Returns the user id.
pub fn check_token_login<'a>(
    token: &str,
    candidates: impl IntoIterator<Item = TokenCandidate<'a>>,
    now_us: u64,
) -> Result<u32, LoginRefusal> {
    let presented = hash_token(token);
    let mut found = None;
    for candidate in candidates {
        // No early exit: every stored hash is compared.
        if ct_eq(presented.as_bytes(), candidate.token_hash.as_bytes()) {
            found = Some(candidate);
        }
    }
    let Some(candidate) = found else {
        return Err(LoginRefusal::InvalidToken);
    };
    if candidate.expiry_at.is_some_and(|at| now_us >= at) {
        return Err(LoginRefusal::InvalidToken);
    }
    if normalize_status(candidate.user_status) != STATUS_ACTIVE {
        return Err(LoginRefusal::UserInactive);
    }
    Ok(candidate.user_id)
}

/// Whether a session that logged in with the token `digest` may go on: one of its user's
/// stored tokens (`(stored hash, expiry in µs)`) is that token and it is not expired at
/// `now_us`. A deleted token, a token replaced under the same name and an expired one all end
/// the session.
pub fn token_session_valid<'a>(
    digest: &TokenDigest,
    user_tokens: impl IntoIterator<Item = (&'a str, Option<u64>)>,
    now_us: u64,
) -> bool {
    let mut valid = false;
    for (stored, expiry_at) in user_tokens {
        // No early exit: every stored hash is compared.
        if digest.matches_stored(stored) && expiry_at.is_none_or(|at| now_us < at) {
            valid = true;
        }
    }
    valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::generate_token;

    #[test]
    fn shapes_and_status() {
        assert!(!valid_username("ab"));
        assert!(valid_username("abc"));
        assert!(valid_username(&"a".repeat(50)));
        assert!(!valid_username(&"a".repeat(51)));
        assert!(!valid_password("pw"));
        assert!(valid_password(&"p".repeat(100)));
        assert!(!valid_password(&"p".repeat(101)));
        assert_eq!(normalize_status(2), STATUS_INACTIVE);
        assert_eq!(normalize_status(1), STATUS_ACTIVE);
        assert_eq!(normalize_status(9), STATUS_ACTIVE);
    }

    #[test]
    fn password_login() {
        let hash = hash_password("secret").unwrap();
        let user = |status| UserCredentials {
            id: 4,
            status,
            password_hash: &hash,
        };
        assert_eq!(
            check_password_login("alice", "secret", Some(user(1))),
            Ok(4)
        );
        assert_eq!(
            check_password_login("alice", "wrong!", Some(user(1))),
            Err(LoginRefusal::InvalidCredentials)
        );
        assert_eq!(
            check_password_login("alice", "secret", Some(user(2))),
            Err(LoginRefusal::InvalidCredentials),
            "inactive users are not revealed"
        );
        assert_eq!(
            check_password_login("alice", "secret", None),
            Err(LoginRefusal::InvalidCredentials)
        );
        assert_eq!(
            check_password_login("al", "secret", Some(user(1))),
            Err(LoginRefusal::InvalidCredentials),
            "shape is checked first"
        );
    }

    #[test]
    fn token_login() {
        let a = generate_token();
        let b = generate_token();
        let candidates = |status, expiry| {
            vec![
                TokenCandidate {
                    user_id: 1,
                    user_status: 1,
                    token_hash: &b.hash,
                    expiry_at: None,
                },
                TokenCandidate {
                    user_id: 2,
                    user_status: status,
                    token_hash: &a.hash,
                    expiry_at: expiry,
                },
            ]
        };
        assert_eq!(check_token_login(&a.token, candidates(1, None), 10), Ok(2));
        assert_eq!(check_token_login(&b.token, candidates(1, None), 10), Ok(1));
        assert_eq!(
            check_token_login(&a.token, candidates(1, Some(10)), 10),
            Err(LoginRefusal::InvalidToken),
            "expired at its expiry instant"
        );
        assert_eq!(
            check_token_login(&a.token, candidates(1, Some(11)), 10),
            Ok(2)
        );
        assert_eq!(
            check_token_login(&a.token, candidates(2, None), 10),
            Err(LoginRefusal::UserInactive)
        );
        assert_eq!(
            check_token_login("not-a-token", candidates(1, None), 10),
            Err(LoginRefusal::InvalidToken)
        );
    }

    #[test]
    fn token_sessions_end_with_their_token() {
        let a = generate_token();
        let b = generate_token();
        let digest = TokenDigest::of(&a.token);
        let stored = |expiry| vec![(b.hash.as_str(), None), (a.hash.as_str(), expiry)];
        assert!(token_session_valid(&digest, stored(None), 10));
        assert!(token_session_valid(&digest, stored(Some(11)), 10));
        assert!(
            !token_session_valid(&digest, stored(Some(10)), 10),
            "expired at its expiry instant"
        );
        assert!(
            !token_session_valid(&digest, vec![(b.hash.as_str(), None)], 10),
            "deleted"
        );
    }
}
