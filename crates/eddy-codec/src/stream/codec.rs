//! The encode/decode machinery every body type uses: [`WireEncode`], [`WireDecode`], the
//! per-field [`Field`] trait, the bounds-checked [`Reader`], and the `wire_struct!` macro that
//! turns a field list into an encoder and decoder in declaration order.
//!
//! Conventions (spec §3.1): integers are little-endian; a decoder ignores bytes after a fully
//! decoded structure unless a type says otherwise; counts read from the wire never size an
//! allocation beyond what the remaining bytes can hold.

use super::error::CodecError;

/// Types that encode to a body (or part of one).
pub trait WireEncode {
    /// Exact encoded size.
    fn encoded_len(&self) -> usize;

    /// Appends the encoding to `out`.
    fn encode(&self, out: &mut Vec<u8>);

    /// Encodes into a fresh vector of exactly [`WireEncode::encoded_len`] bytes.
    fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode(&mut out);
        debug_assert_eq!(out.len(), self.encoded_len(), "encoded_len must be exact");
        out
    }
}

/// Types that decode from a whole body.
pub trait WireDecode: Sized {
    /// Decodes from `body`. Never panics; truncated input is a [`CodecError`].
    fn decode(body: &[u8]) -> Result<Self, CodecError>;

    /// Decodes from shared bytes; types that keep parts of the body (message batches)
    /// override this to slice instead of copying.
    fn decode_bytes(body: &bytes::Bytes) -> Result<Self, CodecError> {
        Self::decode(body)
    }
}

/// A bounds-checked cursor over a body.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Current offset.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Whether every byte was consumed.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Takes `n` bytes.
    pub fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], CodecError> {
        let have = self.remaining();
        if n > have {
            return Err(CodecError::Truncated {
                field,
                offset: self.pos,
                need: n,
                have,
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Takes a fixed-size array.
    pub fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], CodecError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N, field)?);
        Ok(out)
    }

    /// Takes everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }

    /// Reads a u8.
    pub fn u8(&mut self, field: &'static str) -> Result<u8, CodecError> {
        Ok(self.array::<1>(field)?[0])
    }

    /// Reads a u16 LE.
    pub fn u16(&mut self, field: &'static str) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    /// Reads a u32 LE.
    pub fn u32(&mut self, field: &'static str) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    /// Reads a u64 LE.
    pub fn u64(&mut self, field: &'static str) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// Reads a u128 LE.
    pub fn u128(&mut self, field: &'static str) -> Result<u128, CodecError> {
        Ok(u128::from_le_bytes(self.array(field)?))
    }

    /// Reads UTF-8 of `n` bytes.
    pub fn utf8(&mut self, n: usize, field: &'static str) -> Result<&'a str, CodecError> {
        let offset = self.pos;
        std::str::from_utf8(self.bytes(n, field)?)
            .map_err(|_| CodecError::InvalidUtf8 { field, offset })
    }

    /// Reads a wire count and checks it against what `min_item_len`-byte items could fit in
    /// the remaining bytes, so it can size an allocation safely.
    pub fn count(&mut self, field: &'static str, min_item_len: usize) -> Result<usize, CodecError> {
        let offset = self.pos;
        let count = self.u32(field)? as usize;
        if count > self.remaining() / min_item_len.max(1) {
            return Err(CodecError::Truncated {
                field,
                offset,
                need: count.saturating_mul(min_item_len.max(1)),
                have: self.remaining(),
            });
        }
        Ok(count)
    }

    /// Errors if bytes remain (for structures that must fill their buffer).
    pub fn finish(&self, field: &'static str) -> Result<(), CodecError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(CodecError::TrailingBytes {
                field,
                extra: self.remaining(),
            })
        }
    }
}

/// A value that is one field of a body.
pub trait Field: Sized {
    /// Encoded size.
    fn field_len(&self) -> usize;
    /// Appends the encoding.
    fn put(&self, out: &mut Vec<u8>);
    /// Reads the field; `name` labels errors.
    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError>;
}

macro_rules! int_field {
    ($($t:ty => $read:ident),*) => {$(
        impl Field for $t {
            fn field_len(&self) -> usize {
                std::mem::size_of::<$t>()
            }
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
                reader.$read(name)
            }
        }
    )*};
}

int_field!(u8 => u8, u16 => u16, u32 => u32, u64 => u64, u128 => u128);

impl Field for bool {
    fn field_len(&self) -> usize {
        1
    }
    fn put(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    /// Any non-zero byte is true (spec §0.1).
    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        Ok(reader.u8(name)? != 0)
    }
}

/// IEEE-754 f32, little-endian (stats).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct F32(pub f32);

impl Eq for F32 {}

impl Field for F32 {
    fn field_len(&self) -> usize {
        4
    }
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_le_bytes());
    }
    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        Ok(Self(f32::from_le_bytes(reader.array(name)?)))
    }
}

/// A `[len: u32][UTF-8]` string (stats strings, client addresses, cluster names, contexts).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct LongString(pub String);

impl LongString {
    /// Wraps a string.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }
}

impl Field for LongString {
    fn field_len(&self) -> usize {
        4 + self.0.len()
    }
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.0.len() as u32).to_le_bytes());
        out.extend_from_slice(self.0.as_bytes());
    }
    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let len = reader.u32(name)? as usize;
        Ok(Self(reader.utf8(len, name)?.to_owned()))
    }
}

/// A `[len: u8][UTF-8]` string whose length may be 0 (passwords, the PAT in a login body).
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct ShortString(pub String);

impl std::fmt::Debug for ShortString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Used for secrets: never print the contents.
        write!(f, "ShortString({} bytes)", self.0.len())
    }
}

impl ShortString {
    /// Wraps a string of at most 255 bytes.
    pub fn new(text: impl Into<String>) -> Result<Self, CodecError> {
        let text = text.into();
        if text.len() > 255 {
            return Err(CodecError::LimitExceeded {
                field: "short string",
                value: text.len() as u64,
                limit: 255,
            });
        }
        Ok(Self(text))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Field for ShortString {
    fn field_len(&self) -> usize {
        1 + self.0.len()
    }
    fn put(&self, out: &mut Vec<u8>) {
        assert!(
            self.0.len() <= 255,
            "ShortString invariant: at most 255 bytes"
        );
        out.push(self.0.len() as u8);
        out.extend_from_slice(self.0.as_bytes());
    }
    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let len = reader.u8(name)? as usize;
        Ok(Self(reader.utf8(len, name)?.to_owned()))
    }
}

/// A list running to the end of the body with no count (`GET_STREAMS`, `GET_USERS`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToEnd<T>(pub Vec<T>);

impl<T: Field> Field for ToEnd<T> {
    fn field_len(&self) -> usize {
        self.0.iter().map(Field::field_len).sum()
    }
    fn put(&self, out: &mut Vec<u8>) {
        for item in &self.0 {
            item.put(out);
        }
    }
    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let mut items = Vec::new();
        while !reader.is_empty() {
            items.push(T::take(reader, name)?);
        }
        Ok(Self(items))
    }
}

/// A list prefixed by a u32 count. `MIN` is the smallest encoded item (bounds the allocation).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Counted<T, const MIN: usize>(pub Vec<T>);

impl<T: Field> WireEncode for ToEnd<T> {
    fn encoded_len(&self) -> usize {
        self.field_len()
    }
    fn encode(&self, out: &mut Vec<u8>) {
        self.put(out);
    }
}

impl<T: Field> WireDecode for ToEnd<T> {
    fn decode(body: &[u8]) -> Result<Self, CodecError> {
        Self::take(&mut Reader::new(body), "list")
    }
}

impl<T: Field, const MIN: usize> Field for Counted<T, MIN> {
    fn field_len(&self) -> usize {
        4 + self.0.iter().map(Field::field_len).sum::<usize>()
    }
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.0.len() as u32).to_le_bytes());
        for item in &self.0 {
            item.put(out);
        }
    }
    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let count = reader.count(name, MIN)?;
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            items.push(T::take(reader, name)?);
        }
        Ok(Self(items))
    }
}

impl Field for eddy_options::OptionsBlock {
    /// In replies, blocks are u32-length-prefixed.
    fn field_len(&self) -> usize {
        self.prefixed_len()
    }
    fn put(&self, out: &mut Vec<u8>) {
        self.encode_prefixed(out);
    }
    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let len = reader.u32(name)? as usize;
        if len > eddy_options::MAX_OPTIONS_BYTES {
            return Err(CodecError::LimitExceeded {
                field: name,
                value: len as u64,
                limit: eddy_options::MAX_OPTIONS_BYTES as u64,
            });
        }
        let bytes = reader.bytes(len, name)?;
        Ok(eddy_options::OptionsBlock::from_slice(bytes)?)
    }
}

/// Implements [`WireEncode`] and [`WireDecode`] for a [`Field`] type (decoding ignores
/// trailing bytes, as the SDK does).
macro_rules! body_via_field {
    ($($t:ty),* $(,)?) => {$(
        impl $crate::stream::codec::WireEncode for $t {
            fn encoded_len(&self) -> usize {
                $crate::stream::codec::Field::field_len(self)
            }
            fn encode(&self, out: &mut Vec<u8>) {
                $crate::stream::codec::Field::put(self, out);
            }
        }
        impl $crate::stream::codec::WireDecode for $t {
            fn decode(body: &[u8]) -> Result<Self, $crate::stream::error::CodecError> {
                let mut reader = $crate::stream::codec::Reader::new(body);
                <$t as $crate::stream::codec::Field>::take(&mut reader, stringify!($t))
            }
        }
    )*};
}
pub(crate) use body_via_field;

/// Declares a struct whose wire form is its fields in order, each a [`Field`], and implements
/// [`Field`], [`WireEncode`] and [`WireDecode`] for it.
macro_rules! wire_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty ),*
        }

        impl $crate::stream::codec::Field for $name {
            #[allow(unused_variables)]
            fn field_len(&self) -> usize {
                0 $( + $crate::stream::codec::Field::field_len(&self.$field) )*
            }
            #[allow(unused_variables)]
            fn put(&self, out: &mut Vec<u8>) {
                $( $crate::stream::codec::Field::put(&self.$field, out); )*
            }
            #[allow(unused_variables)]
            fn take(
                reader: &mut $crate::stream::codec::Reader<'_>,
                name: &'static str,
            ) -> Result<Self, $crate::stream::error::CodecError> {
                Ok(Self {
                    $( $field: <$ty as $crate::stream::codec::Field>::take(
                        reader,
                        concat!(stringify!($name), ".", stringify!($field)),
                    )?, )*
                })
            }
        }

        $crate::stream::codec::body_via_field!($name);
    };
}
pub(crate) use wire_struct;

#[cfg(test)]
mod tests {
    use super::*;

    wire_struct! {
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Sample {
            pub a: u8,
            pub b: u32,
            pub c: LongString,
            pub d: ShortString,
            pub e: bool,
        }
    }

    #[test]
    fn struct_macro_round_trip_and_truncation() {
        let sample = Sample {
            a: 1,
            b: 0x0403_0201,
            c: LongString::new("xy"),
            d: ShortString::new("").unwrap(),
            e: true,
        };
        let bytes = sample.to_vec();
        assert_eq!(bytes, [1, 1, 2, 3, 4, 2, 0, 0, 0, b'x', b'y', 0, 1]);
        assert_eq!(Sample::decode(&bytes).unwrap(), sample);
        for cut in 0..bytes.len() {
            assert!(matches!(
                Sample::decode(&bytes[..cut]),
                Err(CodecError::Truncated { .. })
            ));
        }
    }

    #[test]
    fn counts_are_bounded_by_remaining_bytes() {
        let mut reader = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0, 0]);
        assert!(reader.count("items", 4).is_err());
        let bytes = [2, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0];
        let list = Counted::<u32, 4>::take(&mut Reader::new(&bytes), "list").unwrap();
        assert_eq!(list.0, vec![1, 2]);
    }

    #[test]
    fn short_string_limit_and_secret_debug() {
        assert!(ShortString::new("x".repeat(256)).is_err());
        let secret = ShortString::new("hunter2").unwrap();
        assert!(!format!("{secret:?}").contains("hunter2"));
    }
}
