//! Users, passwords, permissions, tokens, sessions, RSA identity and API keys.
//!
//! Pure logic over data it is handed: no I/O, no runtime. The server loads users and tokens from
//! storage (they are durable metadata), hands them here to check credentials and permissions, and
//! maps the typed refusals to each protocol's error codes at its edge.
//!
//! Invariants:
//! - plaintext passwords and tokens are never stored and never appear in `Debug` output;
//! - every comparison of a secret (or of a hash of one) is constant-time ([`secret::ct_eq`]);
//! - the event protocol's nonce window and signature checks run in the spec's order (nonce first).
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

pub mod api_keys;
pub mod credentials;
pub mod identity;
pub mod password;
pub mod permissions;
pub mod secret;
pub mod sessions;
pub mod token;

/// Failures of this crate's operations that are not a plain refusal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// Hashing a password failed (argon2 refused its input).
    #[error("cannot hash password")]
    PasswordHash {
        /// The hasher's error.
        #[source]
        source: argon2::password_hash::Error,
    },
}
