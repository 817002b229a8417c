//! Options blocks (spec §3.11): a TLV block whose keys are UTF-8 strings (kind 2), unique, at
//! most [`MAX_OPTIONS`] pairs and [`MAX_OPTIONS_BYTES`] bytes.
//!
//! Two placements:
//! * in requests the block is the last field and runs to the end of the body (no prefix);
//! * in replies it is prefixed by its byte length: `[len: u32][block]`.

use bytes::Bytes;

use crate::error::OptionsError;
use crate::tlv::{self, TlvEntry, ValueKind, MAX_FIELD_LEN};

/// Maximum pairs in a block.
pub const MAX_OPTIONS: usize = 1024;
/// Maximum bytes in a block.
pub const MAX_OPTIONS_BYTES: usize = 100_000;

/// A structurally valid options block (owns its bytes; cloning is cheap).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct OptionsBlock {
    bytes: Bytes,
    pairs: usize,
}

/// One option of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionEntry<'a> {
    /// The UTF-8 key.
    pub key: &'a str,
    /// The raw value kind code (1..=255; not restricted structurally).
    pub kind: u8,
    /// The value bytes (1..=255).
    pub value: &'a [u8],
}

impl OptionsBlock {
    /// The empty block.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Validates `bytes` as an options block (size limit checked first).
    pub fn from_bytes(bytes: Bytes) -> Result<Self, OptionsError> {
        let pairs = validate(&bytes)?;
        Ok(Self { bytes, pairs })
    }

    /// Validates and copies a slice.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, OptionsError> {
        if bytes.len() > MAX_OPTIONS_BYTES {
            return Err(OptionsError::TooLarge {
                bytes: bytes.len(),
                limit: MAX_OPTIONS_BYTES,
            });
        }
        Self::from_bytes(Bytes::copy_from_slice(bytes))
    }

    /// Builds a block from `(key, kind, value)` triples, in the given order.
    pub fn from_entries<'a, I>(entries: I) -> Result<Self, OptionsError>
    where
        I: IntoIterator<Item = (&'a str, ValueKind, &'a [u8])>,
    {
        let mut out = Vec::new();
        for (key, kind, value) in entries {
            if key.is_empty() || key.len() > MAX_FIELD_LEN {
                return Err(OptionsError::Malformed {
                    defect: crate::error::TlvError::FieldLength {
                        offset: out.len() + 1,
                        len: key.len() as u32,
                    },
                });
            }
            if value.is_empty() || value.len() > MAX_FIELD_LEN {
                return Err(OptionsError::Malformed {
                    defect: crate::error::TlvError::FieldLength {
                        offset: out.len() + tlv::PAIR_OVERHEAD / 2 + key.len() + 1,
                        len: value.len() as u32,
                    },
                });
            }
            TlvEntry {
                key_kind: ValueKind::String.code(),
                key: key.as_bytes(),
                value_kind: kind.code(),
                value,
            }
            .encode(&mut out);
            if out.len() > MAX_OPTIONS_BYTES {
                return Err(OptionsError::TooLarge {
                    bytes: out.len(),
                    limit: MAX_OPTIONS_BYTES,
                });
            }
        }
        Self::from_bytes(Bytes::from(out))
    }

    /// The encoded block.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The encoded block as shared bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.pairs
    }

    /// Whether the block has no entries (zero bytes).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Encoded size without prefix.
    pub fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    /// Encoded size with the u32 length prefix used in replies.
    pub fn prefixed_len(&self) -> usize {
        4 + self.bytes.len()
    }

    /// Appends `[len: u32][block]`.
    pub fn encode_prefixed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.bytes);
    }

    /// Decodes a `[len: u32][block]` at the start of `buf`, returning the block and the bytes
    /// consumed. The length is checked against [`MAX_OPTIONS_BYTES`] before anything is copied.
    pub fn decode_prefixed(buf: &[u8]) -> Result<(Self, usize), OptionsError> {
        let len_bytes = buf.get(..4).ok_or_else(|| OptionsError::Malformed {
            defect: crate::error::TlvError::Truncated {
                offset: 0,
                need: 4usize.saturating_sub(buf.len()),
            },
        })?;
        let mut raw = [0u8; 4];
        raw.copy_from_slice(len_bytes);
        let len = u32::from_le_bytes(raw) as usize;
        if len > MAX_OPTIONS_BYTES {
            return Err(OptionsError::TooLarge {
                bytes: len,
                limit: MAX_OPTIONS_BYTES,
            });
        }
        let block = buf.get(4..4 + len).ok_or_else(|| OptionsError::Malformed {
            defect: crate::error::TlvError::Truncated {
                offset: 4,
                need: (4 + len).saturating_sub(buf.len()),
            },
        })?;
        Ok((Self::from_slice(block)?, 4 + len))
    }

    /// The entries in block order.
    pub fn entries(&self) -> impl Iterator<Item = OptionEntry<'_>> + '_ {
        // Validated at construction: keys are UTF-8 and the block tiles exactly.
        tlv::entries(&self.bytes)
            .filter_map(Result::ok)
            .filter_map(|entry| {
                std::str::from_utf8(entry.key).ok().map(|key| OptionEntry {
                    key,
                    kind: entry.value_kind,
                    value: entry.value,
                })
            })
    }

    /// Looks a key up.
    pub fn get(&self, key: &str) -> Option<OptionEntry<'_>> {
        self.entries().find(|entry| entry.key == key)
    }
}

/// Validates an options block and returns its number of pairs: size limit, TLV structure,
/// pair limit, String keys, UTF-8 keys, no duplicates.
pub fn validate(buf: &[u8]) -> Result<usize, OptionsError> {
    if buf.len() > MAX_OPTIONS_BYTES {
        return Err(OptionsError::TooLarge {
            bytes: buf.len(),
            limit: MAX_OPTIONS_BYTES,
        });
    }
    let pairs = tlv::validate(buf)?;
    if pairs > MAX_OPTIONS {
        return Err(OptionsError::TooManyEntries {
            entries: pairs,
            limit: MAX_OPTIONS,
        });
    }
    let mut keys: Vec<&[u8]> = Vec::with_capacity(pairs);
    for entry in tlv::entries(buf) {
        let entry = entry?;
        if entry.key_kind != ValueKind::String.code() {
            return Err(OptionsError::KeyNotString {
                kind: entry.key_kind,
            });
        }
        if std::str::from_utf8(entry.key).is_err() {
            return Err(OptionsError::KeyNotUtf8);
        }
        keys.push(entry.key);
    }
    keys.sort_unstable();
    if let Some(pair) = keys.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(OptionsError::DuplicateKey {
            key: String::from_utf8_lossy(pair[0]).into_owned(),
        });
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spec §3.11 example: `message_expiry` = never expire.
    #[test]
    fn golden_message_expiry_block() {
        let mut expected = vec![0x02, 0x0e, 0, 0, 0];
        expected.extend_from_slice(b"message_expiry");
        expected.extend_from_slice(&[0x0c, 0x08, 0, 0, 0]);
        expected.extend_from_slice(&[0xff; 8]);
        let built =
            OptionsBlock::from_entries([("message_expiry", ValueKind::Uint64, &[0xff; 8][..])])
                .unwrap();
        assert_eq!(built.as_bytes(), &expected[..]);
        let decoded = OptionsBlock::from_slice(&expected).unwrap();
        assert_eq!(decoded.len(), 1);
        let entry = decoded.get("message_expiry").unwrap();
        assert_eq!(entry.kind, 12);
        assert_eq!(entry.value, &[0xff; 8]);
    }

    #[test]
    fn options_rules() {
        let dup = OptionsBlock::from_entries([
            ("a", ValueKind::Bool, &[1u8][..]),
            ("a", ValueKind::Bool, &[0u8][..]),
        ]);
        assert_eq!(dup, Err(OptionsError::DuplicateKey { key: "a".into() }));
        let mut raw_key = Vec::new();
        TlvEntry {
            key_kind: 1,
            key: b"k",
            value_kind: 3,
            value: &[1],
        }
        .encode(&mut raw_key);
        assert_eq!(
            OptionsBlock::from_slice(&raw_key),
            Err(OptionsError::KeyNotString { kind: 1 })
        );
        let mut bad_utf8 = Vec::new();
        TlvEntry {
            key_kind: 2,
            key: &[0xff],
            value_kind: 3,
            value: &[1],
        }
        .encode(&mut bad_utf8);
        assert_eq!(
            OptionsBlock::from_slice(&bad_utf8),
            Err(OptionsError::KeyNotUtf8)
        );
        assert!(matches!(
            OptionsBlock::from_slice(&vec![0u8; MAX_OPTIONS_BYTES + 1]),
            Err(OptionsError::TooLarge { .. })
        ));
    }

    #[test]
    fn too_many_entries() {
        let keys: Vec<String> = (0..=MAX_OPTIONS).map(|i| format!("k{i}")).collect();
        let mut out = Vec::new();
        for key in &keys {
            TlvEntry {
                key_kind: 2,
                key: key.as_bytes(),
                value_kind: 3,
                value: &[0],
            }
            .encode(&mut out);
        }
        assert!(out.len() <= MAX_OPTIONS_BYTES);
        assert_eq!(
            OptionsBlock::from_slice(&out),
            Err(OptionsError::TooManyEntries {
                entries: MAX_OPTIONS + 1,
                limit: MAX_OPTIONS
            })
        );
    }

    #[test]
    fn prefixed_round_trip_and_truncation() {
        let block = OptionsBlock::from_entries([
            ("enforce_fsync", ValueKind::Bool, &[1u8][..]),
            (
                "segment_size",
                ValueKind::Uint64,
                &[0, 0, 0, 0x40, 0, 0, 0, 0][..],
            ),
        ])
        .unwrap();
        let mut out = Vec::new();
        block.encode_prefixed(&mut out);
        assert_eq!(out.len(), block.prefixed_len());
        let (decoded, used) = OptionsBlock::decode_prefixed(&out).unwrap();
        assert_eq!(used, out.len());
        assert_eq!(decoded, block);
        for cut in 0..out.len() {
            assert!(OptionsBlock::decode_prefixed(&out[..cut]).is_err());
        }
        assert_eq!(
            OptionsBlock::decode_prefixed(&[0, 0, 0, 0]).unwrap().0,
            OptionsBlock::empty()
        );
        assert!(matches!(
            OptionsBlock::decode_prefixed(&[0xff, 0xff, 0xff, 0xff]),
            Err(OptionsError::TooLarge { .. })
        ));
    }
}
