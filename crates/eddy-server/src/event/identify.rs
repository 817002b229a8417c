//! The Identify handshake (event protocol §6) and the per-connection checks it enables.
//!
//! Identify is valid only as the first frame (the frame decoder enforces that). Two
//! independent checks, RSA first:
//!
//! 1. **RSA identity**, only when `public_key`, `nonce` and `signature` are all present (a
//!    partial set is ignored): nonce window (10001), then signature (10002), then the client
//!    id = first 16 bytes of SHA-256(DER) read little-endian. From then on a mutation
//!    (Write, TrimStart, Delete, RegisterSchema) naming another `client_id` gets 10003.
//! 2. **API key**, only when the server loaded `api_keys.toml`: none sent is 10005; not base64,
//!    not 32 bytes or unknown is 10006; a read-only key then gets 10007 on every mutation.
//!    Without keys configured a sent key is ignored and `access_level` is `None`.
//!
//! Every failure closes the connection after its error frame. On success the response carries
//! the dictionary's sha always and its bytes unless the client already holds them, and the
//! connection may receive compressed bodies from then on.

use base64::Engine as _;
use eddy_auth::api_keys::{AccessLevel as KeyAccess, ApiKeyError, ApiKeys, API_KEY_BYTES};
use eddy_auth::identity::{verify_identity, IdentityError};
use eddy_codec::event::{
    AccessLevel, IdentifyRequest, IdentifyResponse, InvalidKeyReason, ServerError,
};
use eddy_wire::event::Dictionary;

/// What a connection proved in its Identify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Identity {
    /// The RSA-verified client id.
    pub client_id: Option<u128>,
    /// The API key's access, when keys are configured.
    pub access: Option<AccessLevel>,
}

/// Why an API key is refused: the three upstream sentences of 10006.
fn invalid_key_reason(presented: &str) -> InvalidKeyReason {
    match base64::engine::general_purpose::STANDARD.decode(presented) {
        Err(_) => InvalidKeyReason::Format,
        Ok(bytes) if bytes.len() != API_KEY_BYTES => InvalidKeyReason::Length,
        Ok(_) => InvalidKeyReason::Unknown,
    }
}

/// Runs both checks of an Identify against the server clock `now_ms` (Unix milliseconds).
pub fn verify(
    request: &IdentifyRequest,
    api_keys: Option<&ApiKeys>,
    now_ms: u64,
) -> Result<Identity, ServerError> {
    let mut identity = Identity::default();
    if let (Some(key), Some(nonce), Some(signature)) =
        (&request.public_key, &request.nonce, &request.signature)
    {
        let id = verify_identity(key, nonce, signature, now_ms).map_err(|e| match e {
            IdentityError::InvalidNonce => ServerError::IdentifyInvalidNonce,
            _ => ServerError::IdentifyInvalidSignature,
        })?;
        identity.client_id = Some(id);
    }
    if let Some(keys) = api_keys {
        let presented = request.api_key.as_deref();
        let access = keys.check(presented).map_err(|e| match (e, presented) {
            (ApiKeyError::Invalid, Some(p)) => ServerError::AuthInvalidKey {
                reason: invalid_key_reason(p),
            },
            _ => ServerError::AuthRequired,
        })?;
        identity.access = Some(match access {
            KeyAccess::ReadWrite => AccessLevel::ReadWrite,
            KeyAccess::ReadOnly => AccessLevel::ReadOnly,
        });
    }
    Ok(identity)
}

/// The success response: sha always, bytes only when the client's sha differs.
pub fn response(
    request: &IdentifyRequest,
    identity: Identity,
    dictionary: &Dictionary,
) -> IdentifyResponse {
    let known = dictionary.matches_sha(request.known_dict_sha256.as_deref());
    IdentifyResponse {
        correlation_id: request.correlation_id,
        client_id: identity.client_id,
        access_level: identity.access,
        compression_dict_sha256: Some(dictionary.sha256_hex().to_owned()),
        compression_dict_bytes: (!known).then(|| bytes::Bytes::copy_from_slice(dictionary.bytes())),
    }
}

impl Identity {
    /// The connection-level checks of a mutation carrying `client_id`: 10003 when it differs
    /// from the RSA-verified id, then 10007 for a read-only key.
    pub fn check_mutation(&self, client_id: u128) -> Result<(), ServerError> {
        if let Some(verified) = self.client_id {
            if verified != client_id {
                return Err(ServerError::IdentifyMismatch {
                    request_client_id: client_id,
                    verified_client_id: verified,
                });
            }
        }
        if self.access == Some(AccessLevel::ReadOnly) {
            return Err(ServerError::AuthInsufficientPermissions);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use eddy_codec::event::ErrorCode;

    use super::*;

    // The spec's RSA-2048 vector (§6.3): a valid signature over a stale nonce.
    const KEY: &str = "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA3Tu+uPPfp80iCksRXgFhPGQKsue2x/grZnmGnVmVZ1ei57e0ZliMBQy/Y8h377dLfyfNmNBpd9iWxrl71vNGePaEdmer9f4Zpz4YuRlPc4u1teKvKfPLHAi2PRl36m9nsAKORkIVG0bScg/50H54W18GEJTIRxyChvfPXmHNhgYYvwE/68c96hP18CPBanO7OLsnMoCy/fjMyp98DNw60kMiKwkflNPJNWZQv81Nax+2sMgvQ4rQjA/6zt+uzn4zlfmXFYtAQSmF+bnKDjd+JJESVYb5h6Kb62KekmOIcojW8xRv8KUmGtsktMgmrVOglIF8yi0bOsHMU7PfcG52IwIDAQAB";
    const SIG: &str = "aqSVb4ufcHYLIjmwHxdFYiJ4amSFCUC/1c98FC9kAofU7zKLGLOXwk9BA1yRo/2AB62jXlgrA5FXTRc8Vv8ZJ10yU6ikXr+6Ydn0wZyZIvWEO8HH/fb82tdCKat/KHF89Cv7PxqLvKSuF0sJ5hnSFGB6S1iaWnpglsX44ytsQQnU09vApvX2C3GXABZTz86LJa4/bwrsDuVdQ1gx5ztLWzrvvLIIqSyFjteRRaoXEPosXEx2u12X/bjclLZMPr/s53D5gBvVUmDwsnwMvx8Ed+yQ06oGCl2le19m6Zrby7oLm6Y9f9kCxfoEOELJSa+oq0wvQ6Dze/WaTH96qUv5uQ==";
    const NONCE_MS: u64 = 1_700_000_000_000;
    // Key bytes 00..1f and its hash (§6.4).
    const API_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const API_HASH: &str = "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd";
    const OTHER_HASH: &str = "1111111111111111111111111111111111111111111111111111111111111111";

    fn rsa(nonce: &str) -> IdentifyRequest {
        IdentifyRequest {
            public_key: Some(KEY.into()),
            nonce: Some(nonce.into()),
            signature: Some(SIG.into()),
            ..IdentifyRequest::default()
        }
    }

    fn keys(rw: &str, ro: &str) -> ApiKeys {
        ApiKeys::parse(&format!(
            "[keys]\nprimary_rw = \"{rw}\"\nsecondary_rw = \"{OTHER_HASH}\"\nprimary_ro = \"{ro}\"\nsecondary_ro = \"{OTHER_HASH}\"\n"
        ))
        .unwrap()
    }

    fn code(r: Result<Identity, ServerError>) -> ErrorCode {
        r.unwrap_err().code()
    }

    #[test]
    fn rsa_vector_verifies_inside_the_window_only() {
        let id = verify(&rsa("1700000000000"), None, NONCE_MS + 1_000).unwrap();
        assert_eq!(
            id.client_id,
            Some(32_058_194_432_084_777_381_667_255_800_525_561_906)
        );
        assert_eq!(id.access, None);
        // Exactly two minutes old is accepted; one more millisecond is not.
        assert!(verify(&rsa("1700000000000"), None, NONCE_MS + 120_000).is_ok());
        assert_eq!(
            code(verify(&rsa("1700000000000"), None, NONCE_MS + 120_001)),
            ErrorCode::IdentifyInvalidNonce
        );
        assert_eq!(
            code(verify(&rsa("1700000000000"), None, NONCE_MS - 60_001)),
            ErrorCode::IdentifyInvalidNonce,
            "future nonce"
        );
        assert_eq!(
            code(verify(&rsa("not-a-number"), None, NONCE_MS)),
            ErrorCode::IdentifyInvalidNonce
        );
        // The signature covers another nonce.
        assert_eq!(
            code(verify(&rsa("1700000000001"), None, NONCE_MS)),
            ErrorCode::IdentifyInvalidSignature
        );
    }

    #[test]
    fn a_partial_rsa_set_is_ignored() {
        let mut r = rsa("garbage");
        r.signature = None;
        assert_eq!(verify(&r, None, NONCE_MS).unwrap(), Identity::default());
    }

    #[test]
    fn api_key_codes_and_levels() {
        let k = keys(API_HASH, OTHER_HASH);
        let with = |key: Option<&str>| IdentifyRequest {
            api_key: key.map(str::to_owned),
            ..IdentifyRequest::default()
        };
        assert_eq!(
            verify(&with(Some(API_KEY)), Some(&k), 0).unwrap().access,
            Some(AccessLevel::ReadWrite)
        );
        let ro = keys(OTHER_HASH, API_HASH);
        assert_eq!(
            verify(&with(Some(API_KEY)), Some(&ro), 0).unwrap().access,
            Some(AccessLevel::ReadOnly)
        );
        assert_eq!(
            code(verify(&with(None), Some(&k), 0)),
            ErrorCode::AuthRequired
        );
        for (bad, reason) in [
            ("!!!", InvalidKeyReason::Format),
            ("AAEC", InvalidKeyReason::Length),
            (
                "AQECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
                InvalidKeyReason::Unknown,
            ),
        ] {
            assert_eq!(
                verify(&with(Some(bad)), Some(&k), 0).unwrap_err(),
                ServerError::AuthInvalidKey { reason }
            );
        }
        // Without configured keys a sent key is ignored.
        assert_eq!(verify(&with(Some("!!!")), None, 0).unwrap().access, None);
    }

    #[test]
    fn rsa_runs_before_the_key_check() {
        let k = keys(API_HASH, OTHER_HASH);
        assert_eq!(
            code(verify(&rsa("1700000000000"), Some(&k), NONCE_MS + 500_000)),
            ErrorCode::IdentifyInvalidNonce
        );
    }

    #[test]
    fn mutation_checks_mismatch_before_read_only() {
        let both = Identity {
            client_id: Some(5),
            access: Some(AccessLevel::ReadOnly),
        };
        assert_eq!(
            both.check_mutation(6).unwrap_err().code(),
            ErrorCode::IdentifyMismatch
        );
        assert_eq!(
            both.check_mutation(5).unwrap_err().code(),
            ErrorCode::AuthInsufficientPermissions
        );
        let rw = Identity {
            client_id: Some(5),
            access: Some(AccessLevel::ReadWrite),
        };
        assert!(rw.check_mutation(5).is_ok());
        assert!(Identity::default().check_mutation(99).is_ok());
    }

    #[test]
    fn dictionary_bytes_only_when_the_sha_differs() {
        let dict = Dictionary::builtin(3).unwrap();
        let mut req = IdentifyRequest {
            correlation_id: Some(9),
            ..IdentifyRequest::default()
        };
        let r = response(&req, Identity::default(), &dict);
        assert_eq!(r.correlation_id, Some(9));
        assert_eq!(
            r.compression_dict_sha256.as_deref(),
            Some(dict.sha256_hex())
        );
        assert_eq!(r.compression_dict_bytes.as_deref(), Some(dict.bytes()));
        req.known_dict_sha256 = Some(dict.sha256_hex().to_uppercase());
        assert!(
            response(&req, Identity::default(), &dict)
                .compression_dict_bytes
                .is_some(),
            "the comparison is case-sensitive"
        );
        req.known_dict_sha256 = Some(dict.sha256_hex().to_owned());
        assert!(response(&req, Identity::default(), &dict)
            .compression_dict_bytes
            .is_none());
    }
}
