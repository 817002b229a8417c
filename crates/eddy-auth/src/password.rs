//! Password hashing with Argon2id.
//!
//! Hashes are PHC strings (`$argon2id$v=19$m=...,t=...,p=...$salt$hash`), so the parameters
//! travel with each hash and can be raised later without invalidating stored ones. Plaintext
//! passwords are never stored, logged or kept longer than the call that checks them.

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};

use crate::AuthError;

/// Argon2id memory cost in KiB (19 MiB, the OWASP baseline for Argon2id).
pub const ARGON2_MEMORY_KIB: u32 = 19 * 1024;
/// Argon2id iterations.
pub const ARGON2_ITERATIONS: u32 = 2;
/// Argon2id lanes.
pub const ARGON2_LANES: u32 = 1;

fn argon2() -> Argon2<'static> {
    // The parameters are compile-time constants inside argon2's accepted ranges.
    let params = Params::new(ARGON2_MEMORY_KIB, ARGON2_ITERATIONS, ARGON2_LANES, None)
        .expect("constant argon2 parameters are valid");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// Hashes `password` with a fresh random salt. Returns the PHC string to store.
pub fn hash_password(password: &str) -> Result<String, AuthError> {
    let salt = SaltString::generate(&mut OsRng);
    argon2()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|source| AuthError::PasswordHash { source })
}

/// Checks `password` against a stored PHC string. A malformed stored hash never verifies.
/// The comparison inside argon2 is constant-time.
pub fn verify_password(password: &str, stored: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(stored) else {
        return false;
    };
    argon2()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_then_verify() {
        let h = hash_password("s3cret-pass").unwrap();
        assert!(h.starts_with("$argon2id$v=19$"), "{h}");
        assert!(!h.contains("s3cret-pass"));
        assert!(verify_password("s3cret-pass", &h));
        assert!(!verify_password("s3cret-pasS", &h));
        assert!(!verify_password("", &h));
        assert!(!verify_password("s3cret-pass", "not a phc string"));
    }

    #[test]
    fn salts_differ() {
        assert_ne!(
            hash_password("same").unwrap(),
            hash_password("same").unwrap()
        );
    }
}
