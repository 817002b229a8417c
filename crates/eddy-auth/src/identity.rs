//! Event-protocol client identity: the RSA half of the Identify handshake.
//!
//! A client proves it holds an RSA key by signing the current time (Unix milliseconds as a
//! decimal string) with RSASSA-PKCS1-v1_5 / SHA-256. The server checks the nonce window, verifies
//! the signature against the presented public key (base64 DER SubjectPublicKeyInfo) and derives
//! the client id: the first 16 bytes of SHA-256(DER), read little-endian. Same key, same id.

use base64::Engine as _;
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::pkcs8::DecodePublicKey as _;
use rsa::signature::Verifier as _;
use rsa::RsaPublicKey;
use sha2::{Digest as _, Sha256};

/// Oldest accepted nonce, in milliseconds before the server clock (exactly this old is accepted).
pub const NONCE_MAX_AGE_MS: u64 = 120_000;
/// Furthest accepted nonce, in milliseconds ahead of the server clock.
pub const NONCE_MAX_FUTURE_MS: u64 = 60_000;
/// Largest base64 public key accepted (an RSA-4096 SPKI is ~736 characters; the fixed frame
/// bounds it anyway).
pub const MAX_PUBLIC_KEY_B64: usize = 2048;
/// Largest base64 signature accepted.
pub const MAX_SIGNATURE_B64: usize = 1024;

/// Why an RSA identity was refused. Each maps to one event-protocol error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// The nonce does not parse, is too old or too far ahead (10001).
    #[error("nonce outside the accepted window")]
    InvalidNonce,
    /// The key or signature does not decode, or the signature does not verify (10002).
    #[error("signature does not verify")]
    InvalidSignature,
}

/// Checks the nonce window against `now_ms` (server clock, Unix milliseconds).
pub fn check_nonce(nonce: &str, now_ms: u64) -> Result<(), IdentityError> {
    let Ok(ts) = nonce.parse::<u64>() else {
        return Err(IdentityError::InvalidNonce);
    };
    if ts > now_ms.saturating_add(NONCE_MAX_FUTURE_MS) {
        return Err(IdentityError::InvalidNonce);
    }
    if now_ms.saturating_sub(ts) > NONCE_MAX_AGE_MS {
        return Err(IdentityError::InvalidNonce);
    }
    Ok(())
}

/// Derives a client id from the DER bytes of a public key.
pub fn client_id_from_der(der: &[u8]) -> u128 {
    let digest = Sha256::digest(der);
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_le_bytes(first)
}

/// Verifies an RSA identity (nonce first, then signature) and returns the client id.
pub fn verify_identity(
    public_key_b64: &str,
    nonce: &str,
    signature_b64: &str,
    now_ms: u64,
) -> Result<u128, IdentityError> {
    check_nonce(nonce, now_ms)?;
    if public_key_b64.len() > MAX_PUBLIC_KEY_B64 || signature_b64.len() > MAX_SIGNATURE_B64 {
        return Err(IdentityError::InvalidSignature);
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let der = b64
        .decode(public_key_b64)
        .map_err(|_| IdentityError::InvalidSignature)?;
    let sig = b64
        .decode(signature_b64)
        .map_err(|_| IdentityError::InvalidSignature)?;
    let key =
        RsaPublicKey::from_public_key_der(&der).map_err(|_| IdentityError::InvalidSignature)?;
    let signature =
        Signature::try_from(sig.as_slice()).map_err(|_| IdentityError::InvalidSignature)?;
    VerifyingKey::<Sha256>::new(key)
        .verify(nonce.as_bytes(), &signature)
        .map_err(|_| IdentityError::InvalidSignature)?;
    Ok(client_id_from_der(&der))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The spec's RSA-2048 test vector (event-protocol.md §6.3).
    const KEY: &str = "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA3Tu+uPPfp80iCksRXgFhPGQKsue2x/grZnmGnVmVZ1ei57e0ZliMBQy/Y8h377dLfyfNmNBpd9iWxrl71vNGePaEdmer9f4Zpz4YuRlPc4u1teKvKfPLHAi2PRl36m9nsAKORkIVG0bScg/50H54W18GEJTIRxyChvfPXmHNhgYYvwE/68c96hP18CPBanO7OLsnMoCy/fjMyp98DNw60kMiKwkflNPJNWZQv81Nax+2sMgvQ4rQjA/6zt+uzn4zlfmXFYtAQSmF+bnKDjd+JJESVYb5h6Kb62KekmOIcojW8xRv8KUmGtsktMgmrVOglIF8yi0bOsHMU7PfcG52IwIDAQAB";
    const SIG: &str = "aqSVb4ufcHYLIjmwHxdFYiJ4amSFCUC/1c98FC9kAofU7zKLGLOXwk9BA1yRo/2AB62jXlgrA5FXTRc8Vv8ZJ10yU6ikXr+6Ydn0wZyZIvWEO8HH/fb82tdCKat/KHF89Cv7PxqLvKSuF0sJ5hnSFGB6S1iaWnpglsX44ytsQQnU09vApvX2C3GXABZTz86LJa4/bwrsDuVdQ1gx5ztLWzrvvLIIqSyFjteRRaoXEPosXEx2u12X/bjclLZMPr/s53D5gBvVUmDwsnwMvx8Ed+yQ06oGCl2le19m6Zrby7oLm6Y9f9kCxfoEOELJSa+oq0wvQ6Dze/WaTH96qUv5uQ==";
    const NONCE: &str = "1700000000000";
    const NONCE_MS: u64 = 1_700_000_000_000;

    #[test]
    fn derivation_vector() {
        assert_eq!(
            client_id_from_der(b"abc"),
            0x2322_ae5d_de40_4141_eacf_018f_bf16_78ba
        );
    }

    #[test]
    fn spec_rsa_vector_verifies_and_derives_the_documented_id() {
        let id = verify_identity(KEY, NONCE, SIG, NONCE_MS + 1_000).unwrap();
        assert_eq!(id, 0x181e_2f04_789b_f283_6b65_5b17_2c19_2032);
        assert_eq!(id, 32_058_194_432_084_777_381_667_255_800_525_561_906);
    }

    #[test]
    fn nonce_window_is_checked_first() {
        // Exactly 120 s old is accepted, one ms more is not.
        assert!(verify_identity(KEY, NONCE, SIG, NONCE_MS + NONCE_MAX_AGE_MS).is_ok());
        assert_eq!(
            verify_identity(KEY, NONCE, SIG, NONCE_MS + NONCE_MAX_AGE_MS + 1),
            Err(IdentityError::InvalidNonce)
        );
        // 60 s ahead is accepted, further is not.
        assert!(check_nonce(NONCE, NONCE_MS - NONCE_MAX_FUTURE_MS).is_ok());
        assert_eq!(
            verify_identity(KEY, NONCE, SIG, NONCE_MS - NONCE_MAX_FUTURE_MS - 1),
            Err(IdentityError::InvalidNonce)
        );
        assert_eq!(
            check_nonce("12x", NONCE_MS),
            Err(IdentityError::InvalidNonce)
        );
        assert_eq!(check_nonce("", NONCE_MS), Err(IdentityError::InvalidNonce));
    }

    #[test]
    fn a_signature_over_another_nonce_fails() {
        let other = (NONCE_MS + 1).to_string();
        assert_eq!(
            verify_identity(KEY, &other, SIG, NONCE_MS),
            Err(IdentityError::InvalidSignature)
        );
        assert_eq!(
            verify_identity("not base64!", NONCE, SIG, NONCE_MS),
            Err(IdentityError::InvalidSignature)
        );
        assert_eq!(
            verify_identity(KEY, NONCE, "AAAA", NONCE_MS),
            Err(IdentityError::InvalidSignature)
        );
    }
}
