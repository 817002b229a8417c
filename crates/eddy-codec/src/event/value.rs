//! The field-level codec trait and its implementations for every field type, plus the
//! `wire_struct!` macro that defines a message struct together with both encodings.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use eddy_wire::event::{BodyEncoding, ProtocolVersion};

use super::error::DecodeError;
use super::v2::{self, V2Reader};
use super::v3::{self, V3Reader};

/// Upper bound of what a decoder preallocates for a container before its elements have been
/// read; larger containers grow as elements actually arrive.
pub(crate) const MAX_PREALLOC_BYTES: usize = 1024 * 1024;

/// Capacity to preallocate for `count` elements of `T` (counts are already checked against
/// the remaining body length).
pub(crate) fn cautious_capacity<T>(count: usize) -> usize {
    count.min(MAX_PREALLOC_BYTES / std::mem::size_of::<T>().max(1))
}

/// Both encodings of one field type.
pub(crate) trait WireValue: Sized {
    /// Smallest V2 encoding in bytes (for count checks before allocating).
    const MIN_V2: usize;

    /// Smallest V3 encoding in bytes.
    const MIN_V3: usize = 1;

    fn encode_v2(&self, out: &mut Vec<u8>);
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError>;
    fn encode_v3(&self, out: &mut Vec<u8>);
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError>;

    /// The value of a V3 struct field that is absent from the encoding, or `None` when the
    /// field is required. Options default to `None` (serde does the same for a missing
    /// `Option` field of a map-encoded struct).
    fn v3_absent() -> Option<Self> {
        None
    }
}

/// Looks up the value of an absent V3 field.
pub(crate) fn absent<T: WireValue>(
    message: &'static str,
    field: &'static str,
) -> Result<T, DecodeError> {
    T::v3_absent().ok_or(DecodeError::MissingField { message, field })
}

impl WireValue for u8 {
    const MIN_V2: usize = 1;
    fn encode_v2(&self, out: &mut Vec<u8>) {
        v2::put_u8(out, *self);
    }
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        r.u8()
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        v3::put_uint(out, u64::from(*self));
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        r.uint(u64::from(u8::MAX), "u8").map(|v| v as u8)
    }
}

impl WireValue for u32 {
    const MIN_V2: usize = 4;
    fn encode_v2(&self, out: &mut Vec<u8>) {
        v2::put_u32(out, *self);
    }
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        r.u32()
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        v3::put_uint(out, u64::from(*self));
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        r.uint(u64::from(u32::MAX), "u32").map(|v| v as u32)
    }
}

impl WireValue for u64 {
    const MIN_V2: usize = 8;
    fn encode_v2(&self, out: &mut Vec<u8>) {
        v2::put_u64(out, *self);
    }
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        r.u64()
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        v3::put_uint(out, *self);
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        r.uint(u64::MAX, "u64")
    }
}

impl WireValue for u128 {
    const MIN_V2: usize = 16;
    fn encode_v2(&self, out: &mut Vec<u8>) {
        v2::put_u128(out, *self);
    }
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        r.u128()
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        v3::put_u128(out, *self);
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        r.u128()
    }
}

impl WireValue for bool {
    const MIN_V2: usize = 1;
    fn encode_v2(&self, out: &mut Vec<u8>) {
        v2::put_u8(out, u8::from(*self));
    }
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        r.bool()
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        v3::put_bool(out, *self);
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        r.bool()
    }
}

impl WireValue for String {
    const MIN_V2: usize = 8;
    fn encode_v2(&self, out: &mut Vec<u8>) {
        v2::put_bytes(out, self.as_bytes());
    }
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        r.string()
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        v3::put_str(out, self);
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        r.string()
    }
}

/// Byte payloads (`event_value`, dictionary bytes): V2 length-prefixed, V3 bin.
impl WireValue for Bytes {
    const MIN_V2: usize = 8;
    fn encode_v2(&self, out: &mut Vec<u8>) {
        v2::put_bytes(out, self);
    }
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        r.bytes()
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        v3::put_bin(out, self);
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        r.bytes()
    }
}

/// The AES-GCM nonce `iv`: V2 12 raw bytes, V3 bin(12).
impl WireValue for [u8; 12] {
    const MIN_V2: usize = 12;
    fn encode_v2(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        r.fixed12()
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        v3::put_bin(out, self);
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        let offset = r.offset();
        let bytes = r.bytes()?;
        <[u8; 12]>::try_from(&bytes[..]).map_err(|_| DecodeError::WrongByteLength {
            offset,
            expected: 12,
            actual: bytes.len(),
        })
    }
}

impl<T: WireValue> WireValue for Option<T> {
    const MIN_V2: usize = 1;
    fn encode_v2(&self, out: &mut Vec<u8>) {
        match self {
            None => v2::put_u8(out, 0),
            Some(v) => {
                v2::put_u8(out, 1);
                v.encode_v2(out);
            }
        }
    }
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        if r.option_tag()? {
            T::decode_v2(r).map(Some)
        } else {
            Ok(None)
        }
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        match self {
            None => v3::put_nil(out),
            Some(v) => v.encode_v3(out),
        }
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        if r.nil()? {
            Ok(None)
        } else {
            T::decode_v3(r).map(Some)
        }
    }
    fn v3_absent() -> Option<Self> {
        Some(None)
    }
}

impl<T: WireValue> WireValue for Vec<T> {
    const MIN_V2: usize = 8;
    fn encode_v2(&self, out: &mut Vec<u8>) {
        v2::put_len(out, self.len());
        for v in self {
            v.encode_v2(out);
        }
    }
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        let count = r.count(T::MIN_V2)?;
        let mut out = Vec::with_capacity(cautious_capacity::<T>(count));
        for _ in 0..count {
            out.push(T::decode_v2(r)?);
        }
        Ok(out)
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        v3::put_array_len(out, self.len());
        for v in self {
            v.encode_v3(out);
        }
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        let count = r.array_len(T::MIN_V3)?;
        let mut out = Vec::with_capacity(cautious_capacity::<T>(count));
        for _ in 0..count {
            out.push(T::decode_v3(r)?);
        }
        Ok(out)
    }
}

/// Sets (`HashSet` upstream): encoded like a `Vec`, in ascending order; duplicates collapse.
impl<T: WireValue + Ord> WireValue for BTreeSet<T> {
    const MIN_V2: usize = 8;
    fn encode_v2(&self, out: &mut Vec<u8>) {
        v2::put_len(out, self.len());
        for v in self {
            v.encode_v2(out);
        }
    }
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        let count = r.count(T::MIN_V2)?;
        let mut out = BTreeSet::new();
        for _ in 0..count {
            out.insert(T::decode_v2(r)?);
        }
        Ok(out)
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        v3::put_array_len(out, self.len());
        for v in self {
            v.encode_v3(out);
        }
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        let count = r.array_len(T::MIN_V3)?;
        let mut out = BTreeSet::new();
        for _ in 0..count {
            out.insert(T::decode_v3(r)?);
        }
        Ok(out)
    }
}

/// Maps (`HashMap` upstream): V2 count then key/value pairs, V3 a map; ascending key order
/// on output; a repeated key keeps the last value, as upstream.
impl<K: WireValue + Ord, V: WireValue> WireValue for BTreeMap<K, V> {
    const MIN_V2: usize = 8;
    fn encode_v2(&self, out: &mut Vec<u8>) {
        v2::put_len(out, self.len());
        for (k, v) in self {
            k.encode_v2(out);
            v.encode_v2(out);
        }
    }
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        let count = r.count(K::MIN_V2 + V::MIN_V2)?;
        let mut out = BTreeMap::new();
        for _ in 0..count {
            let k = K::decode_v2(r)?;
            out.insert(k, V::decode_v2(r)?);
        }
        Ok(out)
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        v3::put_map_len(out, self.len());
        for (k, v) in self {
            k.encode_v3(out);
            v.encode_v3(out);
        }
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        let count = r.map_len(K::MIN_V3 + V::MIN_V3)?;
        let mut out = BTreeMap::new();
        for _ in 0..count {
            let k = K::decode_v3(r)?;
            out.insert(k, V::decode_v3(r)?);
        }
        Ok(out)
    }
}

/// Encodes a top-level value.
pub(crate) fn encode<T: WireValue>(value: &T, version: ProtocolVersion, out: &mut Vec<u8>) {
    match version.encoding() {
        BodyEncoding::Bincode => value.encode_v2(out),
        BodyEncoding::MessagePack => value.encode_v3(out),
    }
}

/// Decodes a top-level value occupying the whole body (trailing bytes are an error).
pub(crate) fn decode<T: WireValue>(
    version: ProtocolVersion,
    body: &[u8],
    owner: Option<&Bytes>,
) -> Result<T, DecodeError> {
    let (value, offset, remaining) = match version.encoding() {
        BodyEncoding::Bincode => {
            let mut r = V2Reader::new(body, owner);
            let v = T::decode_v2(&mut r)?;
            (v, r.offset(), r.remaining())
        }
        BodyEncoding::MessagePack => {
            let mut r = V3Reader::new(body, owner);
            let v = T::decode_v3(&mut r)?;
            (v, r.offset(), r.remaining())
        }
    };
    if remaining != 0 {
        return Err(DecodeError::TrailingBytes { offset, remaining });
    }
    Ok(value)
}

/// Defines a message struct (public fields, wire order = declaration order) and implements
/// [`WireValue`] for it. `required = N` declares that only the first `N` fields must be
/// present in a V3 array (the rest have serde defaults upstream).
macro_rules! wire_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident $([required = $required:expr])? {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $crate::event::value::WireValue for $name {
            const MIN_V2: usize = 0 $(+ <$ty as $crate::event::value::WireValue>::MIN_V2)*;

            fn encode_v2(&self, out: &mut Vec<u8>) {
                $( $crate::event::value::WireValue::encode_v2(&self.$field, out); )*
            }

            fn decode_v2(r: &mut $crate::event::v2::V2Reader<'_>) -> Result<Self, $crate::event::DecodeError> {
                Ok(Self {
                    $( $field: <$ty as $crate::event::value::WireValue>::decode_v2(r)?, )*
                })
            }

            fn encode_v3(&self, out: &mut Vec<u8>) {
                $crate::event::v3::put_array_len(out, Self::FIELD_NAMES.len());
                $( $crate::event::value::WireValue::encode_v3(&self.$field, out); )*
            }

            // The position counters are advanced after the last field too; harmless.
            #[allow(unused_assignments)]
            fn decode_v3(r: &mut $crate::event::v3::V3Reader<'_>) -> Result<Self, $crate::event::DecodeError> {
                use $crate::event::value::{absent, WireValue};
                let message = stringify!($name);
                let fields = Self::FIELD_NAMES.len();
                let required = fields $(.min($required))?;
                match r.struct_start(message, fields, required)? {
                    $crate::event::v3::StructForm::Array(len) => {
                        let mut index = 0usize;
                        Ok(Self {
                            $( $field: {
                                let present = index < len;
                                index += 1;
                                if present {
                                    <$ty as WireValue>::decode_v3(r)?
                                } else {
                                    absent::<$ty>(message, stringify!($field))?
                                }
                            }, )*
                        })
                    }
                    $crate::event::v3::StructForm::Map(len) => {
                        $( let mut $field: Option<$ty> = None; )*
                        for _ in 0..len {
                            let key = r.field_key()?;
                            let mut index = 0usize;
                            let mut matched = false;
                            $(
                                if !matched && key.is(stringify!($field), index) {
                                    matched = true;
                                    if $field.is_some() {
                                        return Err($crate::event::DecodeError::DuplicateField {
                                            message,
                                            field: stringify!($field),
                                        });
                                    }
                                    $field = Some(<$ty as WireValue>::decode_v3(r)?);
                                }
                                index += 1;
                            )*
                            if !matched {
                                r.skip_value()?;
                            }
                        }
                        Ok(Self {
                            $( $field: match $field {
                                Some(v) => v,
                                None => absent::<$ty>(message, stringify!($field))?,
                            }, )*
                        })
                    }
                }
            }
        }

        impl $name {
            /// Field names in wire order.
            pub const FIELD_NAMES: &'static [&'static str] = &[$(stringify!($field)),*];
        }
    };
}

pub(crate) use wire_struct;
