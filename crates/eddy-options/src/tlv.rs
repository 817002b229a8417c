//! TLV blocks (spec §3.10), the format shared by options blocks and message user headers.
//!
//! ```text
//! repeat (pairs):
//! +----------+-------------+-----------+------------+---------------+-------------+
//! | kind: u8 | key_len: u32| key bytes | kind: u8   | value_len: u32| value bytes |
//! +----------+-------------+-----------+------------+---------------+-------------+
//! ```
//! Rules: every kind byte is non-zero, every length is in 1..=255, the entries tile the block
//! exactly and pair up. An empty block (zero bytes) is valid and means "no entries". Unknown
//! kinds (16..=255) are structurally valid.

use crate::error::TlvError;

/// Maximum length of one key or value.
pub const MAX_FIELD_LEN: usize = 255;

/// Per-pair overhead: two kind bytes and two u32 lengths.
pub const PAIR_OVERHEAD: usize = 2 * (1 + 4);

/// The typed kinds of spec §3.10 (`HeaderKind`). Unknown codes are representable as raw bytes
/// in [`TlvEntry`] but not here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ValueKind {
    /// 1: raw bytes, 1..=255.
    Raw = 1,
    /// 2: UTF-8, 1..=255.
    String = 2,
    /// 3: one byte 0 or 1.
    Bool = 3,
    /// 4: i8.
    Int8 = 4,
    /// 5: i16 LE.
    Int16 = 5,
    /// 6: i32 LE.
    Int32 = 6,
    /// 7: i64 LE.
    Int64 = 7,
    /// 8: i128 LE.
    Int128 = 8,
    /// 9: u8.
    Uint8 = 9,
    /// 10: u16 LE.
    Uint16 = 10,
    /// 11: u32 LE.
    Uint32 = 11,
    /// 12: u64 LE.
    Uint64 = 12,
    /// 13: u128 LE.
    Uint128 = 13,
    /// 14: f32 LE.
    Float32 = 14,
    /// 15: f64 LE.
    Float64 = 15,
}

impl ValueKind {
    /// All kinds in code order.
    pub const ALL: [ValueKind; 15] = [
        Self::Raw,
        Self::String,
        Self::Bool,
        Self::Int8,
        Self::Int16,
        Self::Int32,
        Self::Int64,
        Self::Int128,
        Self::Uint8,
        Self::Uint16,
        Self::Uint32,
        Self::Uint64,
        Self::Uint128,
        Self::Float32,
        Self::Float64,
    ];

    /// The wire code.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The kind for a code in 1..=15.
    pub const fn from_code(code: u8) -> Option<Self> {
        if code >= 1 && code <= 15 {
            Some(Self::ALL[(code - 1) as usize])
        } else {
            None
        }
    }

    /// The exact value size for fixed-size kinds; `None` for Raw and String (1..=255).
    pub const fn fixed_size(self) -> Option<usize> {
        match self {
            Self::Raw | Self::String => None,
            Self::Bool | Self::Int8 | Self::Uint8 => Some(1),
            Self::Int16 | Self::Uint16 => Some(2),
            Self::Int32 | Self::Uint32 | Self::Float32 => Some(4),
            Self::Int64 | Self::Uint64 | Self::Float64 => Some(8),
            Self::Int128 | Self::Uint128 => Some(16),
        }
    }

    /// Lower-case name as used in docs and errors.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::String => "string",
            Self::Bool => "bool",
            Self::Int8 => "int8",
            Self::Int16 => "int16",
            Self::Int32 => "int32",
            Self::Int64 => "int64",
            Self::Int128 => "int128",
            Self::Uint8 => "uint8",
            Self::Uint16 => "uint16",
            Self::Uint32 => "uint32",
            Self::Uint64 => "uint64",
            Self::Uint128 => "uint128",
            Self::Float32 => "float32",
            Self::Float64 => "float64",
        }
    }
}

const _: () = {
    let mut i = 0;
    while i < ValueKind::ALL.len() {
        assert!(ValueKind::ALL[i] as usize == i + 1);
        i += 1;
    }
};

/// One key/value pair borrowed from a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TlvEntry<'a> {
    /// Key kind code (non-zero).
    pub key_kind: u8,
    /// Key bytes (1..=255).
    pub key: &'a [u8],
    /// Value kind code (non-zero).
    pub value_kind: u8,
    /// Value bytes (1..=255).
    pub value: &'a [u8],
}

impl TlvEntry<'_> {
    /// Encoded size of this pair.
    pub fn encoded_len(&self) -> usize {
        PAIR_OVERHEAD + self.key.len() + self.value.len()
    }

    /// Appends the pair to `out`. The caller guarantees the lengths are in 1..=255.
    pub fn encode(&self, out: &mut Vec<u8>) {
        debug_assert!((1..=MAX_FIELD_LEN).contains(&self.key.len()));
        debug_assert!((1..=MAX_FIELD_LEN).contains(&self.value.len()));
        out.push(self.key_kind);
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        out.extend_from_slice(self.key);
        out.push(self.value_kind);
        out.extend_from_slice(&(self.value.len() as u32).to_le_bytes());
        out.extend_from_slice(self.value);
    }
}

/// Reads one TLV field at `pos`, returning `(kind, data, next_pos)`.
fn field(buf: &[u8], pos: usize) -> Result<(u8, &[u8], usize), TlvError> {
    let kind = *buf.get(pos).ok_or(TlvError::Truncated {
        offset: pos,
        need: 1,
    })?;
    if kind == 0 {
        return Err(TlvError::ZeroKind { offset: pos });
    }
    let len_at = pos + 1;
    let len_bytes = buf
        .get(len_at..len_at + 4)
        .ok_or_else(|| TlvError::Truncated {
            offset: len_at,
            need: (len_at + 4).saturating_sub(buf.len()),
        })?;
    let mut len_raw = [0u8; 4];
    len_raw.copy_from_slice(len_bytes);
    let len = u32::from_le_bytes(len_raw);
    if len == 0 || len as usize > MAX_FIELD_LEN {
        return Err(TlvError::FieldLength {
            offset: len_at,
            len,
        });
    }
    let start = len_at + 4;
    let end = start + len as usize;
    let data = buf.get(start..end).ok_or_else(|| TlvError::Truncated {
        offset: start,
        need: end.saturating_sub(buf.len()),
    })?;
    Ok((kind, data, end))
}

/// Validates a whole block and returns its number of pairs.
pub fn validate(buf: &[u8]) -> Result<usize, TlvError> {
    let mut pos = 0;
    let mut fields = 0usize;
    while pos < buf.len() {
        let (_, _, next) = field(buf, pos)?;
        pos = next;
        fields += 1;
    }
    if !fields.is_multiple_of(2) {
        return Err(TlvError::OddEntries { entries: fields });
    }
    Ok(fields / 2)
}

/// Iterates the pairs of a block, reporting the first defect (then stopping).
pub fn entries(buf: &[u8]) -> Entries<'_> {
    Entries {
        buf,
        pos: 0,
        failed: false,
    }
}

/// Iterator returned by [`entries`].
#[derive(Debug, Clone)]
pub struct Entries<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<TlvEntry<'a>, TlvError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let pair = field(self.buf, self.pos).and_then(|(key_kind, key, next)| {
            if next >= self.buf.len() {
                return Err(TlvError::OddEntries { entries: 1 });
            }
            let (value_kind, value, end) = field(self.buf, next)?;
            Ok((
                TlvEntry {
                    key_kind,
                    key,
                    value_kind,
                    value,
                },
                end,
            ))
        });
        match pair {
            Ok((entry, end)) => {
                self.pos = end;
                Some(Ok(entry))
            }
            Err(err) => {
                self.failed = true;
                Some(Err(err))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode_all(entries: &[TlvEntry<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        for entry in entries {
            entry.encode(&mut out);
        }
        out
    }

    #[test]
    fn spec_user_header_example() {
        let bytes = encode_all(&[TlvEntry {
            key_kind: 2,
            key: b"key",
            value_kind: 2,
            value: b"val",
        }]);
        assert_eq!(
            bytes,
            [2, 3, 0, 0, 0, b'k', b'e', b'y', 2, 3, 0, 0, 0, b'v', b'a', b'l']
        );
        assert_eq!(validate(&bytes), Ok(1));
    }

    #[test]
    fn structural_rules() {
        assert_eq!(validate(&[]), Ok(0));
        assert_eq!(
            validate(&[0, 1, 0, 0, 0, 1]),
            Err(TlvError::ZeroKind { offset: 0 })
        );
        assert_eq!(
            validate(&[2, 0, 0, 0, 0]),
            Err(TlvError::FieldLength { offset: 1, len: 0 })
        );
        assert_eq!(
            validate(&[2, 0, 1, 0, 0]),
            Err(TlvError::FieldLength {
                offset: 1,
                len: 256
            })
        );
        assert_eq!(
            validate(&[2, 1, 0, 0, 0, b'k']),
            Err(TlvError::OddEntries { entries: 1 })
        );
        assert!(matches!(
            validate(&[2, 2, 0, 0, 0, b'k']),
            Err(TlvError::Truncated { .. })
        ));
        let unknown = encode_all(&[TlvEntry {
            key_kind: 16,
            key: b"a",
            value_kind: 255,
            value: b"b",
        }]);
        assert_eq!(validate(&unknown), Ok(1));
    }

    #[test]
    fn value_kinds() {
        for code in 0..=u8::MAX {
            match ValueKind::from_code(code) {
                Some(kind) => assert_eq!(kind.code(), code),
                None => assert!(code == 0 || code > 15),
            }
        }
        assert_eq!(ValueKind::Uint64.fixed_size(), Some(8));
        assert_eq!(ValueKind::String.fixed_size(), None);
    }

    proptest! {
        #[test]
        fn round_trip(pairs in proptest::collection::vec(
            (1u8.., proptest::collection::vec(any::<u8>(), 1..=255),
             1u8.., proptest::collection::vec(any::<u8>(), 1..=255)), 0..8)) {
            let entries: Vec<TlvEntry<'_>> = pairs.iter().map(|(kk, k, vk, v)| TlvEntry {
                key_kind: *kk, key: k, value_kind: *vk, value: v }).collect();
            let bytes = encode_all(&entries);
            prop_assert_eq!(bytes.len(), entries.iter().map(TlvEntry::encoded_len).sum::<usize>());
            prop_assert_eq!(validate(&bytes), Ok(entries.len()));
            let decoded: Vec<TlvEntry<'_>> = super::entries(&bytes).map(Result::unwrap).collect();
            prop_assert_eq!(&decoded, &entries);
            for cut in 0..bytes.len() {
                let prefix = &bytes[..cut];
                let ok = validate(prefix);
                // A prefix is valid only at a pair boundary.
                if let Ok(n) = ok {
                    prop_assert_eq!(encode_all(&entries[..n]).len(), cut);
                }
            }
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let valid = validate(&bytes);
            let iterated: Result<Vec<_>, _> = entries(&bytes).collect();
            prop_assert_eq!(valid.is_ok(), iterated.is_ok());
        }
    }
}
