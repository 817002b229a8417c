//! The 17-byte frame header of the Celeriant protocol.
//!
//! ```text
//!  offset  size  field                 rule
//!  ------  ----  --------------------  ----------------------------------------------------
//!       0     4  version (u32 LE)      2 or 4 = bincode body, 3 or 5 = MessagePack body,
//!                                      else reject (4/5: the 0.3.0 clients, same bodies)
//!       4     4  message_type (u32 LE) request or response type id (separate id spaces)
//!       8     4  compressed_length     body bytes that follow on the wire
//!      12     4  uncompressed_length   body length after decompression; equal to
//!                                      compressed_length when compression = 0
//!      16     1  compression (u8)      0 = none, 1 = zstd with the cluster dictionary
//! ```
//!
//! Both lengths are checked against the configured maximum before anything is allocated,
//! so compression gives no headroom and a tiny frame claiming a huge decompressed size is
//! refused at the header.

use super::error::{FrameError, LengthField};

/// Size of the frame header in bytes.
pub const HEADER_LEN: usize = 17;

/// Size of a "fixed" frame: header plus the largest fixed body.
pub const FIXED_FRAME_LEN: usize = 1024;

/// Largest body of a fixed-size message (1024 − 17 = 1007 bytes), requests and responses alike.
pub const MAX_FIXED_BODY_LEN: usize = FIXED_FRAME_LEN - HEADER_LEN;

/// Protocol version carried in every header; it selects the body encoding.
///
/// Versions 4 and 5 (`celeriant_*` 0.3.0) encode bodies exactly as 2 and 3 do; what they
/// change is behaviour: an OCC conflict is answered with a typed conflict response (13/14)
/// instead of an `ErrorResponse`, and a write may carry guard entries
/// (docs/celeriant-client-revisions.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtocolVersion {
    /// Version 2: bincode bodies (fixed-width little-endian integers). The 0.2.0 Rust client.
    V2,
    /// Version 3: `MessagePack` bodies (positional arrays). The .NET client.
    V3,
    /// Version 4: version 2's bincode bodies. The 0.3.0 Rust client.
    V4,
    /// Version 5: version 3's `MessagePack` bodies, 0.3.0 generation.
    V5,
}

/// How a body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BodyEncoding {
    /// bincode 2, fixed-width little-endian integers (versions 2 and 4).
    Bincode,
    /// `MessagePack`, structs as positional arrays (versions 3 and 5).
    MessagePack,
}

impl ProtocolVersion {
    /// Every version, in numeric order.
    pub const ALL: [Self; 4] = [Self::V2, Self::V3, Self::V4, Self::V5];

    /// The numeric value on the wire.
    pub const fn as_u32(self) -> u32 {
        match self {
            Self::V2 => 2,
            Self::V3 => 3,
            Self::V4 => 4,
            Self::V5 => 5,
        }
    }

    /// Parses the header's version field; anything but 2 to 5 is `None`.
    pub const fn from_u32(value: u32) -> Option<Self> {
        match value {
            2 => Some(Self::V2),
            3 => Some(Self::V3),
            4 => Some(Self::V4),
            5 => Some(Self::V5),
            _ => None,
        }
    }

    /// The body encoding this version selects.
    pub const fn encoding(self) -> BodyEncoding {
        match self {
            Self::V2 | Self::V4 => BodyEncoding::Bincode,
            Self::V3 | Self::V5 => BodyEncoding::MessagePack,
        }
    }

    /// Whether the client answers OCC conflicts with typed conflict responses (13/14) and
    /// may send guard entries: versions 4 and 5.
    pub const fn typed_conflicts(self) -> bool {
        matches!(self, Self::V4 | Self::V5)
    }
}

/// The header's compression byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// `0`: the body is sent as is.
    None,
    /// `1`: the body is one zstd frame compressed with the cluster dictionary.
    ZstdDict,
}

impl Compression {
    /// The byte on the wire.
    pub const fn as_u8(self) -> u8 {
        match self {
            Self::None => 0,
            Self::ZstdDict => 1,
        }
    }

    /// Parses the compression byte; unknown values are `None`.
    pub const fn from_u8(value: u8) -> Option<Self> {
        match value {
            0 => Some(Self::None),
            1 => Some(Self::ZstdDict),
            _ => None,
        }
    }
}

/// A parsed and validated frame header.
///
/// Invariants (established by [`EventHeader::parse`]): both lengths are at most the limit
/// given to `parse`, and `compressed_length == uncompressed_length` when `compression` is
/// [`Compression::None`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventHeader {
    /// Body encoding.
    pub version: ProtocolVersion,
    /// Request or response type id (not yet checked against a table: see [`super::decode_request_frame`]).
    pub message_type: u32,
    /// Body bytes on the wire.
    pub compressed_length: u32,
    /// Body bytes after decompression.
    pub uncompressed_length: u32,
    /// Whether the body is zstd-compressed.
    pub compression: Compression,
}

impl EventHeader {
    /// Parses the first [`HEADER_LEN`] bytes of `bytes` and applies the checks every receiver
    /// performs before allocating a body: version 2 to 5, a known compression byte, both
    /// lengths at most `max_body_len`, and equal lengths for uncompressed frames.
    ///
    /// Returns `Ok(None)` when fewer than [`HEADER_LEN`] bytes are available.
    pub fn parse(bytes: &[u8], max_body_len: u64) -> Result<Option<Self>, FrameError> {
        let Some(raw) = bytes.first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        let word = |at: usize| u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
        let raw_version = word(0);
        let version =
            ProtocolVersion::from_u32(raw_version).ok_or(FrameError::UnsupportedVersion {
                version: raw_version,
            })?;
        let message_type = word(4);
        let compressed_length = word(8);
        let uncompressed_length = word(12);
        let compression = Compression::from_u8(raw[16])
            .ok_or(FrameError::UnknownCompression { byte: raw[16] })?;
        for (field, length) in [
            (LengthField::Compressed, compressed_length),
            (LengthField::Uncompressed, uncompressed_length),
        ] {
            if u64::from(length) > max_body_len {
                return Err(FrameError::BodyTooLarge {
                    field,
                    length,
                    max: max_body_len,
                });
            }
        }
        if compression == Compression::None && compressed_length != uncompressed_length {
            return Err(FrameError::LengthMismatch {
                compressed: compressed_length,
                uncompressed: uncompressed_length,
            });
        }
        Ok(Some(Self {
            version,
            message_type,
            compressed_length,
            uncompressed_length,
            compression,
        }))
    }

    /// The 17 header bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..4].copy_from_slice(&self.version.as_u32().to_le_bytes());
        out[4..8].copy_from_slice(&self.message_type.to_le_bytes());
        out[8..12].copy_from_slice(&self.compressed_length.to_le_bytes());
        out[12..16].copy_from_slice(&self.uncompressed_length.to_le_bytes());
        out[16] = self.compression.as_u8();
        out
    }

    /// Total frame length: header plus the body bytes on the wire.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.compressed_length as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 16 * 1024 * 1024;

    fn raw(version: u32, ty: u32, c: u32, u: u32, comp: u8) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&version.to_le_bytes());
        v.extend_from_slice(&ty.to_le_bytes());
        v.extend_from_slice(&c.to_le_bytes());
        v.extend_from_slice(&u.to_le_bytes());
        v.push(comp);
        v
    }

    #[test]
    fn parses_the_spec_example_header() {
        // §2.3: V2 AggregateDetailsRequest, 65-byte body.
        let bytes = [
            0x02, 0, 0, 0, 0x01, 0, 0, 0, 0x41, 0, 0, 0, 0x41, 0, 0, 0, 0x00,
        ];
        let header = EventHeader::parse(&bytes, MAX).unwrap().unwrap();
        assert_eq!(header.version, ProtocolVersion::V2);
        assert_eq!(header.message_type, 1);
        assert_eq!(header.compressed_length, 65);
        assert_eq!(header.uncompressed_length, 65);
        assert_eq!(header.compression, Compression::None);
        assert_eq!(header.frame_len(), 82);
        assert_eq!(header.to_bytes(), bytes);
    }

    #[test]
    fn short_input_needs_more() {
        let bytes = raw(2, 1, 0, 0, 0);
        for len in 0..HEADER_LEN {
            assert_eq!(EventHeader::parse(&bytes[..len], MAX).unwrap(), None);
        }
    }

    #[test]
    fn rejects_versions_other_than_2_to_5() {
        for version in [0, 1, 6, 0x1603_0100, u32::MAX] {
            let err = EventHeader::parse(&raw(version, 1, 0, 0, 0), MAX).unwrap_err();
            assert_eq!(err, FrameError::UnsupportedVersion { version });
        }
        for version in ProtocolVersion::ALL {
            let header = EventHeader::parse(&raw(version.as_u32(), 1, 0, 0, 0), MAX)
                .unwrap()
                .unwrap();
            assert_eq!(header.version, version);
        }
    }

    #[test]
    fn versions_4_and_5_encode_as_2_and_3_and_only_they_answer_typed_conflicts() {
        use ProtocolVersion::{V2, V3, V4, V5};
        assert_eq!(V4.encoding(), V2.encoding());
        assert_eq!(V5.encoding(), V3.encoding());
        assert_eq!(V2.encoding(), BodyEncoding::Bincode);
        assert_eq!(V3.encoding(), BodyEncoding::MessagePack);
        assert!(!V2.typed_conflicts() && !V3.typed_conflicts());
        assert!(V4.typed_conflicts() && V5.typed_conflicts());
    }

    #[test]
    fn rejects_unknown_compression() {
        let err = EventHeader::parse(&raw(2, 3, 4, 4, 2), MAX).unwrap_err();
        assert_eq!(err, FrameError::UnknownCompression { byte: 2 });
    }

    #[test]
    fn checks_both_lengths_against_the_cap() {
        let err = EventHeader::parse(&raw(2, 3, 101, 10, 1), 100).unwrap_err();
        assert_eq!(
            err,
            FrameError::BodyTooLarge {
                field: LengthField::Compressed,
                length: 101,
                max: 100
            }
        );
        // A tiny compressed frame claiming a huge decompressed size is refused.
        let err = EventHeader::parse(&raw(2, 3, 10, u32::MAX, 1), 100).unwrap_err();
        assert_eq!(
            err,
            FrameError::BodyTooLarge {
                field: LengthField::Uncompressed,
                length: u32::MAX,
                max: 100
            }
        );
    }

    #[test]
    fn uncompressed_lengths_must_match() {
        let err = EventHeader::parse(&raw(2, 3, 10, 11, 0), MAX).unwrap_err();
        assert_eq!(
            err,
            FrameError::LengthMismatch {
                compressed: 10,
                uncompressed: 11
            }
        );
        assert!(EventHeader::parse(&raw(2, 3, 10, 11, 1), MAX)
            .unwrap()
            .is_some());
    }
}
