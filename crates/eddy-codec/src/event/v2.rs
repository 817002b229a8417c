//! V2 primitives: bincode 2 with `standard().with_fixed_int_encoding().with_little_endian()`
//! and the native derive, written by hand.
//!
//! | type | bytes |
//! |---|---|
//! | `u8` / `u32` / `u64` / `u128` | 1 / 4 / 8 / 16, little-endian |
//! | `bool` | `00` or `01`; anything else is an error |
//! | `Option<T>` | `00`, or `01` then `T`; other tags are an error |
//! | `String`, bytes | u64 LE length, then the bytes (strings must be UTF-8) |
//! | `Vec<T>`, sets | u64 LE count, then the elements |
//! | maps | u64 LE count, then key, value, key, value… |
//! | `[u8; 12]` | 12 raw bytes |
//! | struct | fields in declaration order, nothing else |
//! | derived enum | u32 LE variant *position* (explicit discriminants ignored) |

use bytes::Bytes;

use super::cursor::Cursor;
use super::error::DecodeError;

/// Reads V2 values from a body, never past its end, never panicking.
#[derive(Debug)]
pub(crate) struct V2Reader<'a>(Cursor<'a>);

impl<'a> std::ops::Deref for V2Reader<'a> {
    type Target = Cursor<'a>;

    fn deref(&self) -> &Cursor<'a> {
        &self.0
    }
}

impl std::ops::DerefMut for V2Reader<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<'a> V2Reader<'a> {
    /// A reader over `buf`; with `owner` (the `Bytes` that `buf` is), byte fields are
    /// zero-copy slices of it instead of copies.
    pub(crate) fn new(buf: &'a [u8], owner: Option<&'a Bytes>) -> Self {
        Self(Cursor::new(buf, owner))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }

    pub(crate) fn u128(&mut self) -> Result<u128, DecodeError> {
        self.array().map(u128::from_le_bytes)
    }

    pub(crate) fn fixed12(&mut self) -> Result<[u8; 12], DecodeError> {
        self.array()
    }

    pub(crate) fn bool(&mut self) -> Result<bool, DecodeError> {
        let offset = self.offset();
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            byte => Err(DecodeError::InvalidBool { offset, byte }),
        }
    }

    /// An `Option` tag: `true` when a value follows.
    pub(crate) fn option_tag(&mut self) -> Result<bool, DecodeError> {
        let offset = self.offset();
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(DecodeError::InvalidOptionTag { offset, tag }),
        }
    }

    /// A u64 count of elements that each take at least `min_element_len` bytes; refused when
    /// the rest of the body cannot hold them.
    pub(crate) fn count(&mut self, min_element_len: usize) -> Result<usize, DecodeError> {
        let offset = self.offset();
        let count = self.u64()?;
        let available = self.remaining();
        let fits = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(min_element_len.max(1)))
            .is_some_and(|bytes| bytes <= available);
        if !fits {
            return Err(DecodeError::LengthTooLarge {
                offset,
                length: count,
                available,
            });
        }
        Ok(count as usize)
    }

    fn length_prefixed(&mut self) -> Result<(usize, &'a [u8]), DecodeError> {
        let len = self.count(1)?;
        let start = self.offset();
        Ok((start, self.take(len)?))
    }

    pub(crate) fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.count(1)?;
        self.take_bytes(len)
    }

    pub(crate) fn string(&mut self) -> Result<String, DecodeError> {
        let (offset, raw) = self.length_prefixed()?;
        std::str::from_utf8(raw)
            .map(str::to_owned)
            .map_err(|source| DecodeError::InvalidUtf8 { offset, source })
    }
}

pub(crate) fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}

pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u128(out: &mut Vec<u8>, v: u128) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_len(out: &mut Vec<u8>, len: usize) {
    put_u64(out, len as u64);
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_integers() {
        let data = [1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0xff];
        let mut r = V2Reader::new(&data, None);
        assert_eq!(r.u32().unwrap(), 1);
        assert_eq!(r.u64().unwrap(), 2);
        assert_eq!(r.u8().unwrap(), 0xff);
        assert!(matches!(
            r.u8(),
            Err(DecodeError::UnexpectedEnd {
                offset: 13,
                needed: 1,
                available: 0
            })
        ));
    }

    #[test]
    fn rejects_bad_bool_and_option_tags() {
        assert!(matches!(
            V2Reader::new(&[2], None).bool(),
            Err(DecodeError::InvalidBool { offset: 0, byte: 2 })
        ));
        assert!(matches!(
            V2Reader::new(&[7], None).option_tag(),
            Err(DecodeError::InvalidOptionTag { offset: 0, tag: 7 })
        ));
    }

    #[test]
    fn huge_counts_are_refused_before_allocating() {
        let mut data = u64::MAX.to_le_bytes().to_vec();
        data.extend_from_slice(&[0; 10]);
        assert!(matches!(
            V2Reader::new(&data, None).count(1),
            Err(DecodeError::LengthTooLarge {
                length: u64::MAX,
                available: 10,
                ..
            })
        ));
        let mut data = 3u64.to_le_bytes().to_vec();
        data.extend_from_slice(&[0; 10]);
        assert!(V2Reader::new(&data, None).count(4).is_err());
        assert_eq!(V2Reader::new(&data, None).count(3).unwrap(), 3);
    }

    #[test]
    fn strings_must_be_utf8_and_bytes_can_be_zero_copy() {
        let mut data = Vec::new();
        put_bytes(&mut data, &[0xff, 0xfe]);
        assert!(matches!(
            V2Reader::new(&data, None).string(),
            Err(DecodeError::InvalidUtf8 { offset: 8, .. })
        ));
        let owner = Bytes::from(data.clone());
        let b = V2Reader::new(&owner, Some(&owner)).bytes().unwrap();
        assert_eq!(&b[..], &[0xff, 0xfe]);
        assert_eq!(b.as_ptr(), owner[8..].as_ptr(), "sliced, not copied");
    }
}
