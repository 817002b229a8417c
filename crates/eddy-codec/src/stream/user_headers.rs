//! Per-message user headers (spec §3.10): a TLV block of typed keys and values, at most
//! [`MAX_USER_HEADERS_BYTES`] bytes, encoded in key order (kind, then bytes) as the SDK does.
//!
//! The server stores and serves these bytes verbatim and does not validate them; this typed
//! form is for producers and consumers.

use std::collections::BTreeMap;

use eddy_options::tlv::{self, TlvEntry, MAX_FIELD_LEN};
pub use eddy_options::ValueKind;

use super::batch::MAX_USER_HEADERS_BYTES;
use super::error::CodecError;

/// One typed key or value: a known kind and 1..=255 bytes matching it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HeaderField {
    kind: ValueKind,
    value: Vec<u8>,
}

impl HeaderField {
    /// Validates the size against the kind (fixed sizes, or 1..=255 for raw and string;
    /// string values must be UTF-8, bools 0 or 1).
    pub fn new(kind: ValueKind, value: Vec<u8>) -> Result<Self, CodecError> {
        let ok_len = match kind.fixed_size() {
            Some(size) => value.len() == size,
            None => (1..=MAX_FIELD_LEN).contains(&value.len()),
        };
        let bad = |reason| CodecError::InvalidValue {
            field: "user header",
            offset: 0,
            reason,
        };
        if !ok_len {
            return Err(bad("value size does not match its kind"));
        }
        if kind == ValueKind::String && std::str::from_utf8(&value).is_err() {
            return Err(bad("string value is not utf-8"));
        }
        if kind == ValueKind::Bool && value[0] > 1 {
            return Err(bad("bool value must be 0 or 1"));
        }
        Ok(Self { kind, value })
    }

    /// A string field.
    pub fn string(text: &str) -> Result<Self, CodecError> {
        Self::new(ValueKind::String, text.as_bytes().to_vec())
    }

    /// A u64 field.
    pub fn uint64(value: u64) -> Self {
        Self {
            kind: ValueKind::Uint64,
            value: value.to_le_bytes().to_vec(),
        }
    }

    /// A bool field.
    pub fn bool(value: bool) -> Self {
        Self {
            kind: ValueKind::Bool,
            value: vec![u8::from(value)],
        }
    }

    /// The kind.
    pub fn kind(&self) -> ValueKind {
        self.kind
    }

    /// The raw little-endian or UTF-8 bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.value
    }

    /// The text of a string field.
    pub fn as_str(&self) -> Option<&str> {
        (self.kind == ValueKind::String)
            .then(|| std::str::from_utf8(&self.value).ok())
            .flatten()
    }
}

/// A message's user headers, ordered by key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct UserHeaders(pub BTreeMap<HeaderField, HeaderField>);

impl UserHeaders {
    /// No headers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a string-keyed header.
    pub fn insert(&mut self, key: &str, value: HeaderField) -> Result<(), CodecError> {
        self.0.insert(HeaderField::string(key)?, value);
        Ok(())
    }

    /// Encoded size.
    pub fn encoded_len(&self) -> usize {
        self.0
            .iter()
            .map(|(k, v)| tlv::PAIR_OVERHEAD + k.value.len() + v.value.len())
            .sum()
    }

    /// The TLV block, checked against [`MAX_USER_HEADERS_BYTES`].
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        let len = self.encoded_len();
        if len > MAX_USER_HEADERS_BYTES {
            return Err(CodecError::LimitExceeded {
                field: "user headers",
                value: len as u64,
                limit: MAX_USER_HEADERS_BYTES as u64,
            });
        }
        let mut out = Vec::with_capacity(len);
        for (key, value) in &self.0 {
            TlvEntry {
                key_kind: key.kind.code(),
                key: &key.value,
                value_kind: value.kind.code(),
                value: &value.value,
            }
            .encode(&mut out);
        }
        Ok(out)
    }

    /// Decodes a block strictly (known kinds with matching sizes), as the SDK's typed decoding
    /// does. An empty block is no headers.
    pub fn decode(block: &[u8]) -> Result<Self, CodecError> {
        if block.len() > MAX_USER_HEADERS_BYTES {
            return Err(CodecError::LimitExceeded {
                field: "user headers",
                value: block.len() as u64,
                limit: MAX_USER_HEADERS_BYTES as u64,
            });
        }
        let mut map = BTreeMap::new();
        for entry in tlv::entries(block) {
            let entry = entry.map_err(|_| CodecError::InvalidValue {
                field: "user headers",
                offset: 0,
                reason: "malformed tlv block",
            })?;
            let kind = |code| {
                ValueKind::from_code(code).ok_or(CodecError::InvalidDiscriminant {
                    field: "user header kind",
                    value: u64::from(code),
                    offset: 0,
                })
            };
            let key = HeaderField::new(kind(entry.key_kind)?, entry.key.to_vec())?;
            let value = HeaderField::new(kind(entry.value_kind)?, entry.value.to_vec())?;
            map.insert(key, value);
        }
        Ok(Self(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_key_val() {
        let mut headers = UserHeaders::new();
        headers
            .insert("key", HeaderField::string("val").unwrap())
            .unwrap();
        let bytes = headers.encode().unwrap();
        assert_eq!(
            bytes,
            [2, 3, 0, 0, 0, b'k', b'e', b'y', 2, 3, 0, 0, 0, b'v', b'a', b'l']
        );
        assert_eq!(UserHeaders::decode(&bytes).unwrap(), headers);
        assert_eq!(UserHeaders::decode(&[]).unwrap(), UserHeaders::new());
    }

    #[test]
    fn typed_rules() {
        assert!(HeaderField::new(ValueKind::Uint64, vec![1, 2]).is_err());
        assert!(HeaderField::new(ValueKind::Bool, vec![2]).is_err());
        assert!(HeaderField::new(ValueKind::String, vec![0xff]).is_err());
        assert!(HeaderField::new(ValueKind::Raw, vec![]).is_err());
        let mut unknown = Vec::new();
        TlvEntry {
            key_kind: 16,
            key: b"k",
            value_kind: 2,
            value: b"v",
        }
        .encode(&mut unknown);
        assert!(UserHeaders::decode(&unknown).is_err());
        assert_eq!(HeaderField::uint64(5).as_bytes(), &5u64.to_le_bytes());
        assert_eq!(HeaderField::string("x").unwrap().as_str(), Some("x"));
    }
}
