//! Personal access tokens: generation, hashing and expiry.
//!
//! A token is 50 random bytes encoded as standard base64 with padding (68 ASCII characters),
//! returned once by `CREATE_PERSONAL_ACCESS_TOKEN`. Only its BLAKE3 hash (lowercase hex) is
//! stored; login hashes the presented token and looks the hash up.

use base64::Engine as _;
use rand::RngCore as _;

use crate::secret::ct_eq;

/// Random bytes in a generated token.
pub const TOKEN_RANDOM_BYTES: usize = 50;
/// Length of a generated token in characters (base64 of [`TOKEN_RANDOM_BYTES`]).
pub const TOKEN_LEN: usize = 68;
/// Personal access tokens a user may hold (the reference server's default).
pub const MAX_TOKENS_PER_USER: usize = 100;
/// Shortest accepted token name.
pub const MIN_TOKEN_NAME_LEN: usize = 3;
/// Longest accepted token name.
pub const MAX_TOKEN_NAME_LEN: usize = 30;

/// A freshly generated token: the raw value (shown once) and the hash to store.
#[derive(Clone, PartialEq, Eq)]
pub struct GeneratedToken {
    /// The raw token, to be returned to the creator and then forgotten.
    pub token: String,
    /// The hash to store.
    pub hash: String,
}

impl std::fmt::Debug for GeneratedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeneratedToken")
            .field("token", &"<redacted>")
            .field("hash", &self.hash)
            .finish()
    }
}

/// Generates a new random token.
pub fn generate_token() -> GeneratedToken {
    let mut raw = [0u8; TOKEN_RANDOM_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    let token = base64::engine::general_purpose::STANDARD.encode(raw);
    debug_assert_eq!(token.len(), TOKEN_LEN);
    let hash = hash_token(&token);
    GeneratedToken { token, hash }
}

/// The stored form of a token: lowercase hex BLAKE3 of its bytes.
pub fn hash_token(token: &str) -> String {
    blake3::hash(token.as_bytes()).to_hex().to_string()
}

/// True when `token` hashes to `stored` (constant-time on the hashes).
pub fn token_matches(token: &str, stored: &str) -> bool {
    ct_eq(hash_token(token).as_bytes(), stored.as_bytes())
}

/// The BLAKE3 hash of a presented token as bytes: what a session logged in with a token keeps,
/// so every later request can check that the token is still stored (not deleted) and not
/// expired. Small and `Copy`; never the token itself.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    /// The digest of a presented token.
    pub fn of(token: &str) -> Self {
        Self(*blake3::hash(token.as_bytes()).as_bytes())
    }

    /// True when `stored` (the stored lowercase hex hash) is this digest (constant-time).
    pub fn matches_stored(&self, stored: &str) -> bool {
        ct_eq(hex::encode(self.0).as_bytes(), stored.as_bytes())
    }
}

impl std::fmt::Debug for TokenDigest {
    // The digest is not secret, but it identifies a live token; keep it out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenDigest(..)")
    }
}

/// When a token expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TokenExpiry {
    /// Never.
    Never,
    /// At this absolute time, microseconds since the Unix epoch.
    At(u64),
}

impl TokenExpiry {
    /// Resolves the wire's `expiry` (a duration in µs from `now_us`) into an absolute expiry.
    ///
    /// `0` means the server default, which is "never"; `u64::MAX` means never. A duration that
    /// overflows the clock is refused (`None`): the caller answers
    /// `InvalidPersonalAccessTokenExpiry`.
    pub fn from_wire(expiry_us: u64, now_us: u64) -> Option<Self> {
        match expiry_us {
            0 | u64::MAX => Some(TokenExpiry::Never),
            d => now_us.checked_add(d).map(TokenExpiry::At),
        }
    }

    /// The wire's `expiry_at`: absolute µs, 0 for never.
    pub fn to_wire(self) -> u64 {
        match self {
            TokenExpiry::Never => 0,
            TokenExpiry::At(t) => t,
        }
    }

    /// True when the token is expired at `now_us`.
    pub fn is_expired(self, now_us: u64) -> bool {
        match self {
            TokenExpiry::Never => false,
            TokenExpiry::At(t) => now_us >= t,
        }
    }
}

/// Checks a token name's length (3..=30 bytes).
pub fn valid_token_name(name: &str) -> bool {
    (MIN_TOKEN_NAME_LEN..=MAX_TOKEN_NAME_LEN).contains(&name.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_are_68_chars_and_only_their_hash_matches() {
        let a = generate_token();
        let b = generate_token();
        assert_eq!(a.token.len(), TOKEN_LEN);
        assert_ne!(a.token, b.token);
        assert_eq!(a.hash.len(), 64);
        assert!(token_matches(&a.token, &a.hash));
        assert!(!token_matches(&b.token, &a.hash));
        assert!(!format!("{a:?}").contains(&a.token));
        let digest = TokenDigest::of(&a.token);
        assert!(digest.matches_stored(&a.hash));
        assert!(!digest.matches_stored(&b.hash));
        assert!(!format!("{digest:?}").contains(&a.hash[..8]));
    }

    #[test]
    fn expiry_sentinels_and_overflow() {
        assert_eq!(TokenExpiry::from_wire(0, 5), Some(TokenExpiry::Never));
        assert_eq!(
            TokenExpiry::from_wire(u64::MAX, 5),
            Some(TokenExpiry::Never)
        );
        assert_eq!(TokenExpiry::from_wire(10, 5), Some(TokenExpiry::At(15)));
        assert_eq!(TokenExpiry::from_wire(u64::MAX - 1, 5), None);
        assert!(TokenExpiry::At(15).is_expired(15));
        assert!(!TokenExpiry::At(15).is_expired(14));
        assert!(!TokenExpiry::Never.is_expired(u64::MAX));
        assert_eq!(TokenExpiry::Never.to_wire(), 0);
    }
}
