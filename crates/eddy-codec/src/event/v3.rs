//! V3 primitives: `MessagePack` as `rmp_serde` 1.3 emits and accepts it, written by hand.
//!
//! Emitted: structs as positional arrays; unsigned integers in their smallest form
//! (fixint, `cc`, `cd`, `ce`, `cf`); `u128` as `c4 10` + 16 big-endian bytes; `None` as
//! `c0` and `Some(x)` as `x`; strings as fixstr/`d9`/`da`/`db`; byte fields as bin
//! (`c4`/`c5`/`c6`); arrays and maps with the smallest header.
//!
//! Accepted besides: structs as maps keyed by field name (or position), shorter arrays when
//! the missing trailing fields have defaults; signed integer markers holding non-negative
//! values; `u128` as any non-negative integer; bytes as bin, str or an array of integers
//! 0–255; strings as bin holding UTF-8. Unknown map keys are skipped with an iterative
//! skipper (no recursion, so no stack exhaustion on nested input).

use bytes::Bytes;

use super::cursor::Cursor;
use super::error::DecodeError;

const NIL: u8 = 0xc0;
const FALSE: u8 = 0xc2;
const TRUE: u8 = 0xc3;
const BIN8: u8 = 0xc4;
const BIN16: u8 = 0xc5;
const BIN32: u8 = 0xc6;
const UINT8: u8 = 0xcc;
const UINT16: u8 = 0xcd;
const UINT32: u8 = 0xce;
const UINT64: u8 = 0xcf;
const INT8: u8 = 0xd0;
const INT16: u8 = 0xd1;
const INT32: u8 = 0xd2;
const INT64: u8 = 0xd3;
const STR8: u8 = 0xd9;
const STR16: u8 = 0xda;
const STR32: u8 = 0xdb;
const ARRAY16: u8 = 0xdc;
const ARRAY32: u8 = 0xdd;
const MAP16: u8 = 0xde;
const MAP32: u8 = 0xdf;

/// How a V3 struct was encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StructForm {
    /// Positional array with this many elements.
    Array(usize),
    /// Map with this many entries, keyed by field name or position.
    Map(usize),
}

/// A key of a struct encoded as a map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldKey<'a> {
    /// A field name (str or bin).
    Name(&'a [u8]),
    /// A field position.
    Index(u64),
    /// Any other key: the entry is ignored.
    Other,
}

impl FieldKey<'_> {
    pub(crate) fn is(&self, name: &str, index: usize) -> bool {
        match *self {
            FieldKey::Name(n) => n == name.as_bytes(),
            FieldKey::Index(i) => i == index as u64,
            FieldKey::Other => false,
        }
    }
}

enum Int {
    Unsigned(u64),
    Negative,
}

/// Reads V3 values from a body, never past its end, never panicking.
#[derive(Debug)]
pub(crate) struct V3Reader<'a>(Cursor<'a>);

impl<'a> std::ops::Deref for V3Reader<'a> {
    type Target = Cursor<'a>;

    fn deref(&self) -> &Cursor<'a> {
        &self.0
    }
}

impl std::ops::DerefMut for V3Reader<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<'a> V3Reader<'a> {
    /// A reader over `buf`; with `owner` (the `Bytes` that `buf` is), byte fields are
    /// zero-copy slices of it.
    pub(crate) fn new(buf: &'a [u8], owner: Option<&'a Bytes>) -> Self {
        Self(Cursor::new(buf, owner))
    }

    fn be(&mut self, n: usize) -> Result<u64, DecodeError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn marker(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn unexpected(offset: usize, marker: u8, expected: &'static str) -> DecodeError {
        DecodeError::UnexpectedMarker {
            offset,
            marker,
            expected,
        }
    }

    fn int_after(
        &mut self,
        offset: usize,
        marker: u8,
        expected: &'static str,
    ) -> Result<Int, DecodeError> {
        let signed = |v: i64| {
            if v < 0 {
                Int::Negative
            } else {
                Int::Unsigned(v.unsigned_abs())
            }
        };
        Ok(match marker {
            0x00..=0x7f => Int::Unsigned(u64::from(marker)),
            0xe0..=0xff => Int::Negative,
            UINT8 => Int::Unsigned(self.be(1)?),
            UINT16 => Int::Unsigned(self.be(2)?),
            UINT32 => Int::Unsigned(self.be(4)?),
            UINT64 => Int::Unsigned(self.be(8)?),
            // Sign-extend the big-endian two's complement value.
            INT8 => signed(i64::from((self.be(1)? as u8).cast_signed())),
            INT16 => signed(i64::from((self.be(2)? as u16).cast_signed())),
            INT32 => signed(i64::from((self.be(4)? as u32).cast_signed())),
            INT64 => signed(self.be(8)?.cast_signed()),
            _ => return Err(Self::unexpected(offset, marker, expected)),
        })
    }

    /// An unsigned integer of at most `max` (any integer marker holding a non-negative value).
    pub(crate) fn uint(&mut self, max: u64, target: &'static str) -> Result<u64, DecodeError> {
        let offset = self.offset();
        let marker = self.marker()?;
        match self.int_after(offset, marker, target)? {
            Int::Unsigned(v) if v <= max => Ok(v),
            _ => Err(DecodeError::IntegerOutOfRange { offset, target }),
        }
    }

    /// A `u128`: `c4 10` + 16 big-endian bytes, or a non-negative integer.
    pub(crate) fn u128(&mut self) -> Result<u128, DecodeError> {
        let offset = self.offset();
        let marker = self.marker()?;
        if marker == BIN8 {
            let len = self.be(1)? as usize;
            if len != 16 {
                return Err(DecodeError::WrongByteLength {
                    offset,
                    expected: 16,
                    actual: len,
                });
            }
            let mut raw = [0u8; 16];
            raw.copy_from_slice(self.take(16)?);
            return Ok(u128::from_be_bytes(raw));
        }
        match self.int_after(offset, marker, "u128 (bin8 of 16 bytes or an integer)")? {
            Int::Unsigned(v) => Ok(u128::from(v)),
            Int::Negative => Err(DecodeError::IntegerOutOfRange {
                offset,
                target: "u128",
            }),
        }
    }

    pub(crate) fn bool(&mut self) -> Result<bool, DecodeError> {
        let offset = self.offset();
        match self.marker()? {
            FALSE => Ok(false),
            TRUE => Ok(true),
            m => Err(Self::unexpected(offset, m, "bool")),
        }
    }

    /// Consumes a nil marker if one is next.
    pub(crate) fn nil(&mut self) -> Result<bool, DecodeError> {
        if self.peek()? == NIL {
            self.take(1)?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Checks that `count` items of at least `min_len` bytes each fit in the rest of the body.
    fn check_count(
        &self,
        offset: usize,
        count: usize,
        min_len: usize,
    ) -> Result<usize, DecodeError> {
        let available = self.remaining();
        if count
            .checked_mul(min_len.max(1))
            .is_none_or(|bytes| bytes > available)
        {
            return Err(DecodeError::LengthTooLarge {
                offset,
                length: count as u64,
                available,
            });
        }
        Ok(count)
    }

    fn array_len_after(&mut self, marker: u8) -> Result<Option<usize>, DecodeError> {
        Ok(Some(match marker {
            0x90..=0x9f => usize::from(marker & 0x0f),
            ARRAY16 => self.be(2)? as usize,
            ARRAY32 => self.be(4)? as usize,
            _ => return Ok(None),
        }))
    }

    fn map_len_after(&mut self, marker: u8) -> Result<Option<usize>, DecodeError> {
        Ok(Some(match marker {
            0x80..=0x8f => usize::from(marker & 0x0f),
            MAP16 => self.be(2)? as usize,
            MAP32 => self.be(4)? as usize,
            _ => return Ok(None),
        }))
    }

    /// An array header whose elements take at least `min_element_len` bytes each.
    pub(crate) fn array_len(&mut self, min_element_len: usize) -> Result<usize, DecodeError> {
        let offset = self.offset();
        let marker = self.marker()?;
        let len = self
            .array_len_after(marker)?
            .ok_or_else(|| Self::unexpected(offset, marker, "array"))?;
        self.check_count(offset, len, min_element_len)
    }

    /// A map header whose entries take at least `min_entry_len` bytes each.
    pub(crate) fn map_len(&mut self, min_entry_len: usize) -> Result<usize, DecodeError> {
        let offset = self.offset();
        let marker = self.marker()?;
        let len = self
            .map_len_after(marker)?
            .ok_or_else(|| Self::unexpected(offset, marker, "map"))?;
        self.check_count(offset, len, min_entry_len)
    }

    /// The start of a struct: an array of `required..=fields` elements, or a map.
    pub(crate) fn struct_start(
        &mut self,
        message: &'static str,
        fields: usize,
        required: usize,
    ) -> Result<StructForm, DecodeError> {
        let offset = self.offset();
        let marker = self.marker()?;
        if let Some(len) = self.array_len_after(marker)? {
            if len < required || len > fields {
                return Err(DecodeError::FieldCount {
                    message,
                    min: required,
                    max: fields,
                    actual: len,
                });
            }
            return Ok(StructForm::Array(len));
        }
        if let Some(len) = self.map_len_after(marker)? {
            return Ok(StructForm::Map(self.check_count(offset, len, 2)?));
        }
        Err(Self::unexpected(offset, marker, "struct (array or map)"))
    }

    /// The key of a struct encoded as a map (a name, a position, or anything else, which
    /// is consumed and reported as [`FieldKey::Other`]).
    pub(crate) fn field_key(&mut self) -> Result<FieldKey<'a>, DecodeError> {
        let marker = self.peek()?;
        match marker {
            0xa0..=0xbf | STR8 | STR16 | STR32 | BIN8 | BIN16 | BIN32 => {
                Ok(FieldKey::Name(self.raw_str_or_bin()?.1))
            }
            0x00..=0x7f | UINT8 | UINT16 | UINT32 | UINT64 => {
                Ok(FieldKey::Index(self.uint(u64::MAX, "field index")?))
            }
            _ => {
                self.skip_value()?;
                Ok(FieldKey::Other)
            }
        }
    }

    /// The length of a str or bin value, its marker and length read.
    fn str_or_bin_len(&mut self) -> Result<usize, DecodeError> {
        let offset = self.offset();
        let marker = self.marker()?;
        Ok(match marker {
            0xa0..=0xbf => usize::from(marker & 0x1f),
            STR8 | BIN8 => self.be(1)? as usize,
            STR16 | BIN16 => self.be(2)? as usize,
            STR32 | BIN32 => self.be(4)? as usize,
            m => return Err(Self::unexpected(offset, m, "str or bin")),
        })
    }

    /// The payload of a str or bin value, with its offset.
    fn raw_str_or_bin(&mut self) -> Result<(usize, &'a [u8]), DecodeError> {
        let len = self.str_or_bin_len()?;
        let start = self.offset();
        Ok((start, self.take(len)?))
    }

    /// A string: str, or bin holding UTF-8.
    pub(crate) fn string(&mut self) -> Result<String, DecodeError> {
        let (offset, raw) = self.raw_str_or_bin()?;
        std::str::from_utf8(raw)
            .map(str::to_owned)
            .map_err(|source| DecodeError::InvalidUtf8 { offset, source })
    }

    /// A byte string: bin, str, or an array of integers 0–255.
    pub(crate) fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        let marker = self.peek()?;
        if matches!(marker, 0x90..=0x9f | ARRAY16 | ARRAY32) {
            let len = self.array_len(1)?;
            let mut out = Vec::with_capacity(len);
            for _ in 0..len {
                out.push(self.uint(u64::from(u8::MAX), "byte")? as u8);
            }
            return Ok(Bytes::from(out));
        }
        let len = self.str_or_bin_len()?;
        self.take_bytes(len)
    }

    /// Skips one complete value of any kind, iteratively.
    pub(crate) fn skip_value(&mut self) -> Result<(), DecodeError> {
        let mut pending: usize = 1;
        while pending > 0 {
            pending -= 1;
            let offset = self.offset();
            let marker = self.marker()?;
            let skip = match marker {
                0x00..=0x7f | 0xe0..=0xff | NIL | FALSE | TRUE => 0,
                0x80..=0x8f | MAP16 | MAP32 => {
                    let len = self.map_len_after(marker)?.unwrap_or(0);
                    let items = len.saturating_mul(2);
                    pending = pending.saturating_add(self.check_count(offset, items, 1)?);
                    self.check_count(offset, pending, 1)?;
                    0
                }
                0x90..=0x9f | ARRAY16 | ARRAY32 => {
                    let len = self.array_len_after(marker)?.unwrap_or(0);
                    pending = pending.saturating_add(self.check_count(offset, len, 1)?);
                    self.check_count(offset, pending, 1)?;
                    0
                }
                0xa0..=0xbf => usize::from(marker & 0x1f),
                STR8 | BIN8 => self.be(1)? as usize,
                STR16 | BIN16 => self.be(2)? as usize,
                STR32 | BIN32 => self.be(4)? as usize,
                0xc7 => 1 + self.be(1)? as usize,
                0xc8 => 1 + self.be(2)? as usize,
                0xc9 => 1 + self.be(4)? as usize,
                UINT8 | INT8 => 1,
                UINT16 | INT16 | 0xd4 => 2,
                0xd5 => 3,
                UINT32 | INT32 | 0xca => 4,
                0xd6 => 5,
                UINT64 | INT64 | 0xcb => 8,
                0xd7 => 9,
                0xd8 => 17,
                m => return Err(Self::unexpected(offset, m, "a msgpack value")),
            };
            self.take(skip)?;
        }
        Ok(())
    }
}

/// Writes an unsigned integer in its smallest form.
pub(crate) fn put_uint(out: &mut Vec<u8>, v: u64) {
    if v < 0x80 {
        out.push(v as u8);
    } else if let Ok(b) = u8::try_from(v) {
        out.extend_from_slice(&[UINT8, b]);
    } else if let Ok(h) = u16::try_from(v) {
        out.push(UINT16);
        out.extend_from_slice(&h.to_be_bytes());
    } else if let Ok(w) = u32::try_from(v) {
        out.push(UINT32);
        out.extend_from_slice(&w.to_be_bytes());
    } else {
        out.push(UINT64);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

pub(crate) fn put_u128(out: &mut Vec<u8>, v: u128) {
    out.extend_from_slice(&[BIN8, 16]);
    out.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_bool(out: &mut Vec<u8>, v: bool) {
    out.push(if v { TRUE } else { FALSE });
}

pub(crate) fn put_nil(out: &mut Vec<u8>) {
    out.push(NIL);
}

/// Markers of one length-prefixed family: the optional fix form (`marker | len` up to a
/// maximum), then the optional 8-bit form, then 16 and 32 bits.
struct LenMarkers {
    fix: Option<(u8, usize)>,
    m8: Option<u8>,
    m16: u8,
    m32: u8,
}

const ARRAY_MARKERS: LenMarkers = LenMarkers {
    fix: Some((0x90, 15)),
    m8: None,
    m16: ARRAY16,
    m32: ARRAY32,
};
const MAP_MARKERS: LenMarkers = LenMarkers {
    fix: Some((0x80, 15)),
    m8: None,
    m16: MAP16,
    m32: MAP32,
};
const STR_MARKERS: LenMarkers = LenMarkers {
    fix: Some((0xa0, 31)),
    m8: Some(STR8),
    m16: STR16,
    m32: STR32,
};
const BIN_MARKERS: LenMarkers = LenMarkers {
    fix: None,
    m8: Some(BIN8),
    m16: BIN16,
    m32: BIN32,
};

fn put_len(out: &mut Vec<u8>, len: usize, markers: &LenMarkers) {
    if let Some((fix, max)) = markers.fix.filter(|&(_, max)| len <= max) {
        debug_assert!(max < 32);
        out.push(fix | len as u8);
    } else if let (Some(m8), Ok(b)) = (markers.m8, u8::try_from(len)) {
        out.extend_from_slice(&[m8, b]);
    } else if let Ok(h) = u16::try_from(len) {
        out.push(markers.m16);
        out.extend_from_slice(&h.to_be_bytes());
    } else {
        // Bodies are capped far below 4 GiB before encoding (frame limits).
        out.push(markers.m32);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
}

pub(crate) fn put_array_len(out: &mut Vec<u8>, len: usize) {
    put_len(out, len, &ARRAY_MARKERS);
}

pub(crate) fn put_map_len(out: &mut Vec<u8>, len: usize) {
    put_len(out, len, &MAP_MARKERS);
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_len(out, s.len(), &STR_MARKERS);
    out.extend_from_slice(s.as_bytes());
}

pub(crate) fn put_bin(out: &mut Vec<u8>, b: &[u8]) {
    put_len(out, b.len(), &BIN_MARKERS);
    out.extend_from_slice(b);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut v = Vec::new();
        f(&mut v);
        v
    }

    #[test]
    fn unsigned_integers_use_the_smallest_form() {
        assert_eq!(enc(|o| put_uint(o, 0)), [0x00]);
        assert_eq!(enc(|o| put_uint(o, 127)), [0x7f]);
        assert_eq!(enc(|o| put_uint(o, 128)), [0xcc, 0x80]);
        assert_eq!(enc(|o| put_uint(o, 2003)), [0xcd, 0x07, 0xd3]);
        assert_eq!(enc(|o| put_uint(o, 70_000)), [0xce, 0, 1, 0x11, 0x70]);
        assert_eq!(
            enc(|o| put_uint(o, 1_700_000_000_000)),
            [0xcf, 0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0]
        );
    }

    #[test]
    fn integers_decode_from_every_marker() {
        for (bytes, value) in [
            (&[0x05][..], 5u64),
            (&[0xcc, 0xff], 255),
            (&[0xcd, 1, 0], 256),
            (&[0xce, 0, 1, 0, 0], 65536),
            (&[0xcf, 0, 0, 0, 1, 0, 0, 0, 0], 1 << 32),
            (&[0xd0, 0x7f], 127),
            (&[0xd1, 0, 5], 5),
            (&[0xd2, 0, 0, 0, 9], 9),
            (&[0xd3, 0, 0, 0, 0, 0, 0, 0, 9], 9),
        ] {
            assert_eq!(
                V3Reader::new(bytes, None).uint(u64::MAX, "u64").unwrap(),
                value
            );
        }
        for negative in [
            &[0xff][..],
            &[0xd0, 0x80],
            &[0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ] {
            assert!(matches!(
                V3Reader::new(negative, None).uint(u64::MAX, "u64"),
                Err(DecodeError::IntegerOutOfRange { .. })
            ));
        }
        assert!(V3Reader::new(&[0xcd, 1, 0], None).uint(255, "u8").is_err());
        assert!(V3Reader::new(&[0xca, 0, 0, 0, 0], None)
            .uint(255, "u8")
            .is_err());
    }

    #[test]
    fn u128_is_bin16_big_endian_or_an_integer() {
        let bytes = enc(|o| put_u128(o, 0x0102));
        assert_eq!(bytes[..2], [0xc4, 0x10]);
        assert_eq!(bytes[16..], [0x01, 0x02]);
        assert_eq!(V3Reader::new(&bytes, None).u128().unwrap(), 0x0102);
        assert_eq!(V3Reader::new(&[0x2a], None).u128().unwrap(), 42);
        assert!(matches!(
            V3Reader::new(&[0xc4, 0x02, 1, 2], None).u128(),
            Err(DecodeError::WrongByteLength {
                expected: 16,
                actual: 2,
                ..
            })
        ));
        assert!(V3Reader::new(&[0xe0], None).u128().is_err());
    }

    #[test]
    fn strings_bins_and_headers() {
        assert_eq!(enc(|o| put_str(o, "ab")), [0xa2, b'a', b'b']);
        let long = "x".repeat(52);
        assert_eq!(enc(|o| put_str(o, &long))[..2], [0xd9, 52]);
        assert_eq!(
            enc(|o| put_str(o, &"y".repeat(300)))[..3],
            [0xda, 0x01, 0x2c]
        );
        assert_eq!(enc(|o| put_bin(o, &[1, 0xc8])), [0xc4, 2, 1, 0xc8]);
        assert_eq!(enc(|o| put_bin(o, &[0; 300]))[..3], [0xc5, 0x01, 0x2c]);
        assert_eq!(enc(|o| put_array_len(o, 15)), [0x9f]);
        assert_eq!(enc(|o| put_array_len(o, 16)), [0xdc, 0, 16]);
        assert_eq!(enc(|o| put_map_len(o, 1)), [0x81]);
    }

    #[test]
    fn bytes_accept_bin_str_and_integer_arrays() {
        assert_eq!(
            &V3Reader::new(&[0xc4, 2, 1, 0xc8], None).bytes().unwrap()[..],
            &[1, 0xc8]
        );
        assert_eq!(
            &V3Reader::new(&[0x92, 0x01, 0xcc, 0xc8], None)
                .bytes()
                .unwrap()[..],
            &[1, 0xc8]
        );
        assert_eq!(
            &V3Reader::new(&[0xa1, b'z'], None).bytes().unwrap()[..],
            b"z"
        );
        assert!(V3Reader::new(&[0x91, 0xcd, 1, 0], None).bytes().is_err());
    }

    #[test]
    fn skipping_is_iterative_and_bounded() {
        // 100 000 nested arrays: no stack overflow, then a clean error.
        let deep = vec![0x91u8; 100_000];
        assert!(matches!(
            V3Reader::new(&deep, None).skip_value(),
            Err(DecodeError::LengthTooLarge { offset: 99_999, .. })
        ));
        let mut ok = vec![0x91u8; 1000];
        ok.push(0xc0);
        let mut r = V3Reader::new(&ok, None);
        r.skip_value().unwrap();
        assert_eq!(r.remaining(), 0);
        // A map claiming 2^32-1 entries in 6 bytes.
        assert!(matches!(
            V3Reader::new(&[0xdf, 0xff, 0xff, 0xff, 0xff, 0], None).skip_value(),
            Err(DecodeError::LengthTooLarge { .. })
        ));
        let mut r = V3Reader::new(
            &[
                0x82, 0xa1, b'a', 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xd6, 0, 1, 2, 3, 4,
            ],
            None,
        );
        r.skip_value().unwrap();
        assert_eq!(r.remaining(), 0);
    }
}
