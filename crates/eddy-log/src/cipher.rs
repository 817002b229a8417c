//! At-rest encryption of record payloads: AES-256-GCM with a random 96-bit nonce per record.
//!
//! A log opened with a [`Cipher`] ([`OpenOptions::cipher`](crate::OpenOptions::cipher))
//! seals every payload it is handed before the record is queued, and opens every sealed
//! payload it reads back, so nothing above the log sees ciphertext and nothing on disk holds a
//! payload in the clear. A sealed payload is
//!
//! ```text
//! [magic "EDDYAE1\0": 8][nonce: 12][ciphertext][GCM tag: 16]
//! ```
//!
//! and the associated data is the record's sequence number, count and tag, so a sealed payload
//! only opens in the record it was written for. Record checksums cover the sealed bytes:
//! recovery and compaction need no key to verify a log, only to read it.
//!
//! A payload without the magic was written without encryption and is read as it is (turning
//! encryption on encrypts new records; older ones stay as they were until retention, deletion
//! or compaction removes them). A sealed payload read without a key, or with another key, is
//! [`Corruption::Undecryptable`].

use std::fmt;
use std::sync::Arc;

use aes_gcm::aead::{Aead, Generate, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use bytes::Bytes;

use crate::error::Corruption;

/// Bytes of an encryption key.
pub const KEY_LEN: usize = 32;
/// The first bytes of every sealed payload.
pub const SEALED_MAGIC: [u8; 8] = *b"EDDYAE1\0";
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
/// Bytes sealing adds to a payload.
pub const SEALED_OVERHEAD: usize = SEALED_MAGIC.len() + NONCE_LEN + TAG_LEN;

/// An AES-256-GCM key for record payloads. Cheap to clone (the expanded key is shared); its
/// `Debug` never shows the key; two handles are equal when they are clones of one handle.
#[derive(Clone)]
pub struct Cipher {
    aead: Arc<Aes256Gcm>,
}

impl fmt::Debug for Cipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Cipher(<redacted>)")
    }
}

impl PartialEq for Cipher {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.aead, &other.aead)
    }
}

impl Eq for Cipher {}

fn associated_data(seq: u64, count: u32, tag: u32) -> [u8; 16] {
    let mut aad = [0u8; 16];
    aad[..8].copy_from_slice(&seq.to_le_bytes());
    aad[8..12].copy_from_slice(&count.to_le_bytes());
    aad[12..].copy_from_slice(&tag.to_le_bytes());
    aad
}

/// True when `payload` was sealed by a [`Cipher`].
pub fn is_sealed(payload: &[u8]) -> bool {
    payload.len() >= SEALED_OVERHEAD && payload[..SEALED_MAGIC.len()] == SEALED_MAGIC
}

impl Cipher {
    /// A cipher with `key`.
    pub fn new(key: &[u8; KEY_LEN]) -> Self {
        Cipher {
            aead: Arc::new(Aes256Gcm::new(&(*key).into())),
        }
    }

    /// Seals the payload of the record at `seq` covering `count` sequence numbers with `tag`.
    pub fn seal(&self, seq: u64, count: u32, tag: u32, payload: &[u8]) -> Bytes {
        let nonce = Nonce::generate();
        let aad = associated_data(seq, count, tag);
        let sealed = self
            .aead
            .encrypt(
                &nonce,
                Payload {
                    msg: payload,
                    aad: &aad,
                },
            )
            .expect("AES-GCM encrypts any payload below 64 GiB");
        let mut out = Vec::with_capacity(SEALED_OVERHEAD + payload.len());
        out.extend_from_slice(&SEALED_MAGIC);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Bytes::from(out)
    }

    /// Opens a payload [`seal`](Cipher::seal)ed for the same record.
    pub fn open(&self, seq: u64, count: u32, tag: u32, sealed: &[u8]) -> Result<Bytes, Corruption> {
        if !is_sealed(sealed) {
            return Err(Corruption::Undecryptable);
        }
        let nonce_end = SEALED_MAGIC.len() + NONCE_LEN;
        let nonce = Nonce::try_from(&sealed[SEALED_MAGIC.len()..nonce_end])
            .map_err(|_| Corruption::Undecryptable)?;
        let aad = associated_data(seq, count, tag);
        self.aead
            .decrypt(
                &nonce,
                Payload {
                    msg: &sealed[nonce_end..],
                    aad: &aad,
                },
            )
            .map(Bytes::from)
            .map_err(|_| Corruption::Undecryptable)
    }
}

/// What a reader hands on for a stored payload: a sealed one opened with `cipher`, any other
/// as it is.
pub(crate) fn reveal(
    cipher: Option<&Cipher>,
    (seq, count, tag): (u64, u32, u32),
    stored: Bytes,
) -> Result<Bytes, Corruption> {
    if !is_sealed(&stored) {
        return Ok(stored);
    }
    match cipher {
        Some(c) => c.open(seq, count, tag, &stored),
        None => Err(Corruption::Undecryptable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_and_open_bind_the_record() {
        let cipher = Cipher::new(&[7; KEY_LEN]);
        let sealed = cipher.seal(10, 2, 0, b"hello payload");
        assert!(is_sealed(&sealed));
        assert_eq!(sealed.len(), 13 + SEALED_OVERHEAD);
        assert!(!sealed.windows(5).any(|w| w == b"hello"));
        assert_eq!(
            &cipher.open(10, 2, 0, &sealed).unwrap()[..],
            b"hello payload"
        );
        // Another record, another key, a flipped byte: nothing opens.
        assert_eq!(
            cipher.open(11, 2, 0, &sealed),
            Err(Corruption::Undecryptable)
        );
        let other = Cipher::new(&[8; KEY_LEN]);
        assert_eq!(
            other.open(10, 2, 0, &sealed),
            Err(Corruption::Undecryptable)
        );
        let mut bad = sealed.to_vec();
        bad[SEALED_OVERHEAD] ^= 1;
        assert_eq!(cipher.open(10, 2, 0, &bad), Err(Corruption::Undecryptable));
        // Two seals of one payload differ (fresh nonces).
        assert_ne!(cipher.seal(10, 2, 0, b"hello payload"), sealed);
        // Plain payloads pass through; sealed ones need the key.
        let plain = Bytes::from_static(b"plain");
        assert_eq!(reveal(None, (1, 1, 0), plain.clone()), Ok(plain));
        assert_eq!(
            reveal(None, (10, 2, 0), sealed),
            Err(Corruption::Undecryptable)
        );
        assert_eq!(format!("{cipher:?}"), "Cipher(<redacted>)");
    }
}
