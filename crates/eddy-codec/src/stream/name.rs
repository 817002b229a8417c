//! `WireName` (spec §3.1, §3.2): `[len: u8][len bytes UTF-8]`, `len` in 1..=255. Used for every
//! resource name, usernames, token names, the raw token in replies, SDK name/version and the
//! server version. No charset or trimming rules: names compare byte for byte.

use super::codec::{Field, Reader};
use super::error::CodecError;

/// Maximum name length.
pub const MAX_NAME_LEN: usize = 255;

/// A validated name of 1..=255 UTF-8 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WireName(String);

impl WireName {
    /// Validates the length (1..=255 bytes).
    pub fn new(name: impl Into<String>) -> Result<Self, CodecError> {
        let name = name.into();
        if name.is_empty() {
            return Err(CodecError::Unencodable {
                field: "name",
                reason: "names must not be empty",
            });
        }
        if name.len() > MAX_NAME_LEN {
            return Err(CodecError::LimitExceeded {
                field: "name",
                value: name.len() as u64,
                limit: MAX_NAME_LEN as u64,
            });
        }
        Ok(Self(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: names are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::fmt::Display for WireName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for WireName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for WireName {
    type Error = CodecError;

    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl Field for WireName {
    fn field_len(&self) -> usize {
        1 + self.0.len()
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.push(self.0.len() as u8);
        out.extend_from_slice(self.0.as_bytes());
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let offset = reader.position();
        let len = reader.u8(name)? as usize;
        if len == 0 {
            return Err(CodecError::InvalidValue {
                field: name,
                offset,
                reason: "name length must be 1..=255",
            });
        }
        Ok(Self(reader.utf8(len, name)?.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        assert!(WireName::new("").is_err());
        assert!(WireName::new("x".repeat(256)).is_err());
        assert_eq!(WireName::new("x".repeat(255)).unwrap().len(), 255);
        let mut out = Vec::new();
        WireName::new("test-stream").unwrap().put(&mut out);
        assert_eq!(out[0], 0x0b);
        assert!(WireName::take(&mut Reader::new(&[0]), "n").is_err());
        assert!(WireName::take(&mut Reader::new(&[1, 0xff]), "n").is_err());
        assert!(WireName::take(&mut Reader::new(&[2, b'a']), "n").is_err());
    }
}
