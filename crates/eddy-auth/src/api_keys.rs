//! Event-protocol API keys: `api_keys.toml` in the data directory.
//!
//! The file holds four SHA-256 hashes (64 hex characters, either case) under `[keys]`:
//! `primary_rw`, `secondary_rw` (read-write) and `primary_ro`, `secondary_ro` (read-only). Keys are
//! 32 random bytes handed out as standard base64. A presented key is decoded, checked for length,
//! hashed and compared in constant time against the read-write hashes, then the read-only ones.

use base64::Engine as _;
use sha2::{Digest as _, Sha256};

use crate::secret::ct_eq;

/// Bytes in an API key.
pub const API_KEY_BYTES: usize = 32;
/// Largest `api_keys.toml` accepted.
pub const MAX_API_KEYS_FILE: usize = 64 * 1024;

/// What an API key grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessLevel {
    /// Every request.
    ReadWrite,
    /// Everything but write, trim, delete and register-schema (10007).
    ReadOnly,
}

/// Why an API key was refused. Each maps to one event-protocol error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApiKeyError {
    /// Keys are configured but the client sent none (10005).
    #[error("api key required")]
    Missing,
    /// Not base64, not 32 bytes, or unknown (10006).
    #[error("api key invalid")]
    Invalid,
}

/// Why `api_keys.toml` cannot be loaded (a start-up error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiKeysFileError {
    /// The file is larger than [`MAX_API_KEYS_FILE`].
    #[error("api keys file is {len} bytes, more than {MAX_API_KEYS_FILE}")]
    TooLarge {
        /// Its size.
        len: usize,
    },
    /// Not TOML of the expected shape.
    #[error("api keys file is not valid")]
    Parse {
        /// The parser's error.
        #[source]
        source: toml::de::Error,
    },
    /// A hash is not 64 hex characters.
    #[error("api keys file: {field} is not a 64-character hex sha-256")]
    BadHash {
        /// Which field.
        field: &'static str,
    },
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    keys: Keys,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Keys {
    primary_rw: String,
    secondary_rw: String,
    primary_ro: String,
    secondary_ro: String,
}

/// The loaded key hashes.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKeys {
    read_write: [[u8; 32]; 2],
    read_only: [[u8; 32]; 2],
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKeys(<4 hashes>)")
    }
}

fn parse_hash(field: &'static str, hex_text: &str) -> Result<[u8; 32], ApiKeysFileError> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_text.trim(), &mut out)
        .map_err(|_| ApiKeysFileError::BadHash { field })?;
    Ok(out)
}

impl ApiKeys {
    /// Parses the contents of `api_keys.toml`.
    pub fn parse(text: &str) -> Result<Self, ApiKeysFileError> {
        if text.len() > MAX_API_KEYS_FILE {
            return Err(ApiKeysFileError::TooLarge { len: text.len() });
        }
        let file: File =
            toml::from_str(text).map_err(|source| ApiKeysFileError::Parse { source })?;
        Ok(Self {
            read_write: [
                parse_hash("primary_rw", &file.keys.primary_rw)?,
                parse_hash("secondary_rw", &file.keys.secondary_rw)?,
            ],
            read_only: [
                parse_hash("primary_ro", &file.keys.primary_ro)?,
                parse_hash("secondary_ro", &file.keys.secondary_ro)?,
            ],
        })
    }

    /// Renders a file for the given hashes (what a key generator writes).
    pub fn render(read_write: [[u8; 32]; 2], read_only: [[u8; 32]; 2]) -> String {
        format!(
            "# eddy API keys: SHA-256 of each key; the keys themselves are never stored.\n\
             [keys]\nprimary_rw = \"{}\"\nsecondary_rw = \"{}\"\nprimary_ro = \"{}\"\nsecondary_ro = \"{}\"\n",
            hex::encode(read_write[0]),
            hex::encode(read_write[1]),
            hex::encode(read_only[0]),
            hex::encode(read_only[1]),
        )
    }

    /// Checks a presented key (`None` when the client sent none).
    pub fn check(&self, presented: Option<&str>) -> Result<AccessLevel, ApiKeyError> {
        let presented = presented.ok_or(ApiKeyError::Missing)?;
        if presented.len() > 4 * API_KEY_BYTES {
            return Err(ApiKeyError::Invalid);
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(presented)
            .map_err(|_| ApiKeyError::Invalid)?;
        if bytes.len() != API_KEY_BYTES {
            return Err(ApiKeyError::Invalid);
        }
        let hash = Sha256::digest(&bytes);
        // Compare against all four so the time does not reveal which slot matched.
        let rw = self
            .read_write
            .iter()
            .fold(false, |m, h| m | ct_eq(h, &hash));
        let ro = self
            .read_only
            .iter()
            .fold(false, |m, h| m | ct_eq(h, &hash));
        match (rw, ro) {
            (true, _) => Ok(AccessLevel::ReadWrite),
            (false, true) => Ok(AccessLevel::ReadOnly),
            (false, false) => Err(ApiKeyError::Invalid),
        }
    }
}

/// SHA-256 of a key's bytes, as stored in the file.
pub fn hash_key(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTOR_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const VECTOR_HASH: &str = "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd";

    fn keys_with(rw0: &str, ro0: &str) -> ApiKeys {
        let other = "11".repeat(32);
        ApiKeys::parse(&format!(
            "[keys]\nprimary_rw = \"{rw0}\"\nsecondary_rw = \"{other}\"\nprimary_ro = \"{ro0}\"\nsecondary_ro = \"{other}\"\n"
        ))
        .unwrap()
    }

    #[test]
    fn spec_vector() {
        let bytes: Vec<u8> = (0u8..32).collect();
        assert_eq!(hex::encode(hash_key(&bytes)), VECTOR_HASH);
        let keys = keys_with(VECTOR_HASH, &"22".repeat(32));
        assert_eq!(keys.check(Some(VECTOR_KEY)), Ok(AccessLevel::ReadWrite));
        let keys = keys_with(&"33".repeat(32), &VECTOR_HASH.to_uppercase());
        assert_eq!(keys.check(Some(VECTOR_KEY)), Ok(AccessLevel::ReadOnly));
    }

    #[test]
    fn refusals() {
        let keys = keys_with(VECTOR_HASH, &"22".repeat(32));
        assert_eq!(keys.check(None), Err(ApiKeyError::Missing));
        assert_eq!(keys.check(Some("***")), Err(ApiKeyError::Invalid));
        assert_eq!(keys.check(Some("AAECAw==")), Err(ApiKeyError::Invalid));
        let unknown = base64::engine::general_purpose::STANDARD.encode([9u8; 32]);
        assert_eq!(keys.check(Some(&unknown)), Err(ApiKeyError::Invalid));
    }

    #[test]
    fn malformed_files() {
        assert!(matches!(
            ApiKeys::parse("[keys]\nprimary_rw = \"x\""),
            Err(ApiKeysFileError::Parse { .. })
        ));
        let short = "[keys]\nprimary_rw = \"ab\"\nsecondary_rw = \"ab\"\nprimary_ro = \"ab\"\nsecondary_ro = \"ab\"\n";
        assert!(matches!(
            ApiKeys::parse(short),
            Err(ApiKeysFileError::BadHash {
                field: "primary_rw"
            })
        ));
        let rendered = ApiKeys::render([[1; 32], [2; 32]], [[3; 32], [4; 32]]);
        let parsed = ApiKeys::parse(&rendered).unwrap();
        assert_eq!(parsed.read_only[1], [4; 32]);
    }
}
