//! Per-stream encryption keys: the `encryption_key` option of `CREATE_STREAM` (the 0.12.2
//! SDK's `StreamCreateOptions::encryption_key`).
//!
//! A client may give a stream its own data key: 32 bytes, raw (the SDK sends it so) or as
//! standard padded base64. The server needs `--encryption-key` to take one (else
//! `StreamEncryptionUnavailable`, 4106); any other length is `InvalidEncryptionKey` (70). The
//! key is never stored in the clear, never returned and never logged: it is sealed with the
//! server key ([`Cipher`], AES-256-GCM, the stream id and [`WRAP_TAG`] as associated data)
//! and kept in the stream's stored options as the internal entry [`WRAPPED`]:
//!
//! ```text
//! [version 1: u8][origin 1 (client): u8][key fingerprint: 8][server key fingerprint: 8]
//! [sealed key: 8 magic + 12 nonce + 32 + 16 tag]
//! ```
//!
//! The stream's partitions (a single node's partition logs, a member's partition groups'
//! Raft logs) are sealed with the stream's key instead of the server's. Reads show, in place
//! of the entry, three string entries (in the 0.12.2 layout as derived options, where the SDK
//! reads them): `encryption_key_source = stream`, `encryption_key_fingerprint` (the SDK's
//! `StreamEncryptionKey::fingerprint`: the first 8 bytes of SHA-256 over
//! `iggy/stream-key-fingerprint/v1` and the key, 16 hex digits) and
//! `encryption_kek_fingerprint` (the same over `eddy/server-key-fingerprint/v1` and the server
//! key). A stream without its own key shows none of them and its stored options are served
//! as they are.

use base64::Engine as _;
use eddy_log::Cipher;
use eddy_options::{validate_block, Mode, OptionsBlock, Scope, ValueKind};
use sha2::{Digest as _, Sha256};

use eddy_replicated::stream::error::StreamError;

/// The create option carrying the key.
pub const KEY: &str = "encryption_key";
/// The internal stored entry: the sealed key (never returned).
pub const WRAPPED: &str = "encryption_key_wrapped";
/// Read-only projection: who chose the key (`stream`).
pub const SOURCE: &str = "encryption_key_source";
/// Read-only projection: the key's fingerprint.
pub const FINGERPRINT: &str = "encryption_key_fingerprint";
/// Read-only projection: the fingerprint of the server key that seals it.
pub const KEK_FINGERPRINT: &str = "encryption_kek_fingerprint";
/// The associated-data tag of a sealed stream key.
pub const WRAP_TAG: u32 = u32::from_le_bytes(*b"STK1");

const KEY_LEN: usize = eddy_log::cipher::KEY_LEN;
const FINGERPRINT_LEN: usize = 8;
const VERSION: u8 = 1;
const ORIGIN_CLIENT: u8 = 1;
const HEAD_LEN: usize = 2 + 2 * FINGERPRINT_LEN;
/// Length of the stored entry's value.
pub const WRAPPED_LEN: usize = HEAD_LEN + eddy_log::cipher::SEALED_OVERHEAD + KEY_LEN;
const KEY_FINGERPRINT_LABEL: &[u8] = b"iggy/stream-key-fingerprint/v1";
const SERVER_FINGERPRINT_LABEL: &[u8] = b"eddy/server-key-fingerprint/v1";
/// The longest value accepted for the key: 44 characters of padded base64.
const MAX_KEY_VALUE: usize = 44;

/// The server key as the wrapper of stream keys. `Debug` shows nothing.
#[derive(Clone)]
pub struct ServerKey {
    cipher: Cipher,
    fingerprint: [u8; FINGERPRINT_LEN],
}

impl std::fmt::Debug for ServerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerKey(<redacted>)")
    }
}

fn fingerprint(label: &[u8], key: &[u8]) -> [u8; FINGERPRINT_LEN] {
    let digest = Sha256::new()
        .chain_update(label)
        .chain_update(key)
        .finalize();
    let mut out = [0u8; FINGERPRINT_LEN];
    out.copy_from_slice(&digest[..FINGERPRINT_LEN]);
    out
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

impl ServerKey {
    /// The wrapper of the server key `key` (`--encryption-key`).
    pub fn new(key: &[u8; KEY_LEN]) -> Self {
        Self {
            cipher: Cipher::new(key),
            fingerprint: fingerprint(SERVER_FINGERPRINT_LABEL, key),
        }
    }

    /// The stored entry's value of `key` for stream `stream_id`.
    fn wrap(&self, stream_id: u32, key: &[u8; KEY_LEN]) -> Vec<u8> {
        let mut out = Vec::with_capacity(WRAPPED_LEN);
        out.extend_from_slice(&[VERSION, ORIGIN_CLIENT]);
        out.extend_from_slice(&fingerprint(KEY_FINGERPRINT_LABEL, key));
        out.extend_from_slice(&self.fingerprint);
        out.extend_from_slice(&self.cipher.seal(u64::from(stream_id), 0, WRAP_TAG, key));
        out
    }

    /// The cipher of stream `stream_id`'s partitions from its stored options: `Ok(None)` when
    /// the stream has no key of its own.
    ///
    /// # Errors
    /// When the entry does not open with this server key (another key, altered bytes).
    pub fn partition_cipher(
        &self,
        stream_id: u32,
        stored: &[u8],
    ) -> Result<Option<Cipher>, String> {
        let Some(wrapped) = wrapped_of(stored) else {
            return Ok(None);
        };
        if wrapped.len() != WRAPPED_LEN || wrapped[0] != VERSION {
            return Err(format!("stream {stream_id}: malformed stream key entry"));
        }
        let opened = self
            .cipher
            .open(u64::from(stream_id), 0, WRAP_TAG, &wrapped[HEAD_LEN..])
            .map_err(|_| {
                format!("stream {stream_id}: its key does not open with the server key")
            })?;
        let key: [u8; KEY_LEN] = opened[..]
            .try_into()
            .map_err(|_| format!("stream {stream_id}: malformed stream key"))?;
        if fingerprint(KEY_FINGERPRINT_LABEL, &key)[..] != wrapped[2..2 + FINGERPRINT_LEN] {
            return Err(format!(
                "stream {stream_id}: stream key fingerprint mismatch"
            ));
        }
        Ok(Some(Cipher::new(&key)))
    }
}

/// The sealed key entry of stored stream options, if any.
fn wrapped_of(stored: &[u8]) -> Option<Vec<u8>> {
    let block = OptionsBlock::from_slice(stored).ok()?;
    block.get(WRAPPED).map(|entry| entry.value.to_vec())
}

/// The key in a create's `encryption_key` value: 32 raw bytes, or 44 characters of standard
/// padded base64 of 32 bytes.
fn key_of(kind: u8, value: &[u8]) -> Result<[u8; KEY_LEN], StreamError> {
    if value.len() > MAX_KEY_VALUE {
        return Err(StreamError::InvalidEncryptionKey);
    }
    if kind == ValueKind::Raw.code() {
        return value
            .try_into()
            .map_err(|_| StreamError::InvalidEncryptionKey);
    }
    if kind == ValueKind::String.code() {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(value)
            .map_err(|_| StreamError::InvalidEncryptionKey)?;
        return decoded[..]
            .try_into()
            .map_err(|_| StreamError::InvalidEncryptionKey);
    }
    Err(StreamError::InvalidEncryptionKey)
}

/// The options a new stream `stream_id` stores for a create's `block`: the block as it is when
/// it has no `encryption_key` (the stream catalog takes no other key), else the sealed key
/// alone.
///
/// # Errors
/// Any key but `encryption_key` (a forged `encryption_key_wrapped` or projection included):
/// `UnsupportedOptionKey`; a key of another length: `InvalidEncryptionKey`; a key without a
/// server key: `StreamEncryptionUnavailable`.
pub fn create_options(
    block: &OptionsBlock,
    stream_id: u32,
    server: Option<&ServerKey>,
) -> Result<Vec<u8>, StreamError> {
    let Some(entry) = block.get(KEY) else {
        validate_block(Scope::Stream, block, Mode::Create)?;
        return Ok(block.as_bytes().to_vec());
    };
    let rest = OptionsBlock::from_entries(block.entries().filter(|e| e.key != KEY).map(|e| {
        (
            e.key,
            ValueKind::from_code(e.kind).unwrap_or(ValueKind::Raw),
            e.value,
        )
    }))?;
    validate_block(Scope::Stream, &rest, Mode::Create)?;
    let key = key_of(entry.kind, entry.value)?;
    let server = server.ok_or(StreamError::StreamEncryptionUnavailable)?;
    let wrapped = server.wrap(stream_id, &key);
    Ok(
        OptionsBlock::from_entries([(WRAPPED, ValueKind::Raw, &wrapped[..])])?
            .as_bytes()
            .to_vec(),
    )
}

/// The options a read shows of stored stream options: without the sealed key, with its
/// projections; stored options without a key as they are.
pub fn public_options(stored: &[u8]) -> OptionsBlock {
    let Ok(block) = OptionsBlock::from_slice(stored) else {
        return OptionsBlock::empty();
    };
    let Some(wrapped) = block.get(WRAPPED).map(|e| e.value) else {
        return block;
    };
    let (key_fp, server_fp) = if wrapped.len() >= HEAD_LEN {
        (
            hex(&wrapped[2..2 + FINGERPRINT_LEN]),
            hex(&wrapped[2 + FINGERPRINT_LEN..HEAD_LEN]),
        )
    } else {
        (String::new(), String::new())
    };
    let mut entries: Vec<(&str, ValueKind, &[u8])> = block
        .entries()
        .filter(|e| e.key != WRAPPED)
        .map(|e| {
            (
                e.key,
                ValueKind::from_code(e.kind).unwrap_or(ValueKind::Raw),
                e.value,
            )
        })
        .collect();
    entries.push((SOURCE, ValueKind::String, b"stream"));
    if !key_fp.is_empty() {
        entries.push((FINGERPRINT, ValueKind::String, key_fp.as_bytes()));
        entries.push((KEK_FINGERPRINT, ValueKind::String, server_fp.as_bytes()));
    }
    OptionsBlock::from_entries(entries).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(entries: &[(&str, ValueKind, &[u8])]) -> OptionsBlock {
        OptionsBlock::from_entries(entries.iter().copied()).unwrap()
    }

    const CLIENT_KEY: [u8; 32] = [0x42; 32];

    #[test]
    fn a_client_key_is_stored_sealed_and_never_shown() {
        let server = ServerKey::new(&[7; 32]);
        let stored = create_options(
            &block(&[(KEY, ValueKind::Raw, &CLIENT_KEY)]),
            3,
            Some(&server),
        )
        .unwrap();
        assert!(
            !stored.windows(32).any(|w| w == CLIENT_KEY),
            "the key is not stored in the clear"
        );
        let shown = public_options(&stored);
        assert!(shown.get(WRAPPED).is_none() && shown.get(KEY).is_none());
        assert!(!shown.as_bytes().windows(32).any(|w| w == CLIENT_KEY));
        assert_eq!(shown.get(SOURCE).unwrap().value, b"stream");
        // The SDK's StreamEncryptionKey::fingerprint of this key.
        let expected = hex(&fingerprint(KEY_FINGERPRINT_LABEL, &CLIENT_KEY));
        assert_eq!(shown.get(FINGERPRINT).unwrap().value, expected.as_bytes());
        assert_eq!(expected.len(), 16);
        assert_eq!(
            shown.get(KEK_FINGERPRINT).unwrap().value,
            hex(&server.fingerprint).as_bytes()
        );
        // The partitions' cipher opens what the client's key sealed, and only for stream 3.
        let cipher = server.partition_cipher(3, &stored).unwrap().unwrap();
        let sealed = Cipher::new(&CLIENT_KEY).seal(1, 1, 1, b"message");
        assert_eq!(&cipher.open(1, 1, 1, &sealed).unwrap()[..], b"message");
        assert!(
            server.partition_cipher(4, &stored).is_err(),
            "bound to its stream"
        );
        assert!(ServerKey::new(&[8; 32])
            .partition_cipher(3, &stored)
            .is_err());
        assert!(format!("{server:?}").contains("redacted"));
    }

    #[test]
    fn base64_keys_are_taken_and_streams_without_keys_are_unchanged() {
        let server = ServerKey::new(&[7; 32]);
        let text = base64::engine::general_purpose::STANDARD.encode(CLIENT_KEY);
        let stored = create_options(
            &block(&[(KEY, ValueKind::String, text.as_bytes())]),
            0,
            Some(&server),
        )
        .unwrap();
        assert!(server.partition_cipher(0, &stored).unwrap().is_some());
        let plain = create_options(&OptionsBlock::empty(), 0, Some(&server)).unwrap();
        assert!(plain.is_empty());
        assert_eq!(public_options(&plain), OptionsBlock::empty());
        assert!(server.partition_cipher(0, &plain).unwrap().is_none());
    }

    #[test]
    fn forged_and_wrong_keys_are_refused() {
        use eddy_codec::stream::ErrorCode as C;
        let server = ServerKey::new(&[7; 32]);
        let refused = |entries: &[(&str, ValueKind, &[u8])], server: Option<&ServerKey>| {
            create_options(&block(entries), 0, server)
                .unwrap_err()
                .code()
        };
        for len in [1, 16, 31, 33, 44, 64, 255] {
            let key = vec![1u8; len];
            assert_eq!(
                refused(&[(KEY, ValueKind::Raw, &key)], Some(&server)),
                C::InvalidEncryptionKey,
                "{len} bytes"
            );
        }
        assert_eq!(
            refused(&[(KEY, ValueKind::String, b"not base64!")], Some(&server)),
            C::InvalidEncryptionKey
        );
        assert_eq!(
            refused(&[(KEY, ValueKind::Uint64, &[1; 8])], Some(&server)),
            C::InvalidEncryptionKey
        );
        assert_eq!(
            refused(&[(KEY, ValueKind::Raw, &CLIENT_KEY)], None),
            C::StreamEncryptionUnavailable
        );
        // A client cannot plant a sealed key or a projection of its own.
        for forged in [WRAPPED, SOURCE, FINGERPRINT, KEK_FINGERPRINT] {
            assert_eq!(
                refused(&[(forged, ValueKind::Raw, &[9; 86])], Some(&server)),
                C::UnsupportedOptionKey,
                "{forged}"
            );
            assert_eq!(
                refused(
                    &[
                        (KEY, ValueKind::Raw, &CLIENT_KEY),
                        (forged, ValueKind::Raw, &[9; 86])
                    ],
                    Some(&server)
                ),
                C::UnsupportedOptionKey,
                "{forged} beside a key"
            );
        }
        // Altered stored bytes do not open.
        let mut stored = create_options(
            &block(&[(KEY, ValueKind::Raw, &CLIENT_KEY)]),
            0,
            Some(&server),
        )
        .unwrap();
        let last = stored.len() - 1;
        stored[last] ^= 1;
        assert!(server.partition_cipher(0, &stored).is_err());
    }
}
