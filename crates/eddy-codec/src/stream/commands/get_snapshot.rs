//! `GET_SNAPSHOT_FILE` (code 11): `[compression: u8][types_count: u8][snapshot_type: u8] x count`;
//! the reply is the raw bytes of a ZIP archive. A server without snapshots answers
//! `FeatureUnavailable`.

use bytes::Bytes;

use crate::stream::codec::{body_via_field, Field, Reader, WireDecode, WireEncode};
use crate::stream::error::CodecError;

/// Snapshot compression codes: 1 Stored, 2 Deflated, 3 Bzip2, 4 Zstd, 5 Lzma, 6 Xz.
pub const SNAPSHOT_COMPRESSIONS: std::ops::RangeInclusive<u8> = 1..=6;
/// Snapshot type codes: 1 filesystem overview, 2 process list, 3 resource usage, 4 test,
/// 5 server logs, 6 server config, 100 all.
pub const SNAPSHOT_TYPES: [u8; 7] = [1, 2, 3, 4, 5, 6, 100];

/// Request body of `GET_SNAPSHOT_FILE`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GetSnapshot {
    /// Compression code.
    pub compression: u8,
    /// Snapshot type codes (at most 255).
    pub types: Vec<u8>,
}

impl Field for GetSnapshot {
    fn field_len(&self) -> usize {
        2 + self.types.len()
    }

    fn put(&self, out: &mut Vec<u8>) {
        assert!(
            self.types.len() <= 255,
            "snapshot types invariant: at most 255"
        );
        out.push(self.compression);
        out.push(self.types.len() as u8);
        out.extend_from_slice(&self.types);
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let at = reader.position();
        let compression = reader.u8(name)?;
        if !SNAPSHOT_COMPRESSIONS.contains(&compression) {
            return Err(CodecError::InvalidDiscriminant {
                field: "snapshot compression",
                value: u64::from(compression),
                offset: at,
            });
        }
        let count = reader.u8(name)? as usize;
        let at = reader.position();
        let types = reader.bytes(count, name)?.to_vec();
        if let Some(bad) = types.iter().position(|t| !SNAPSHOT_TYPES.contains(t)) {
            return Err(CodecError::InvalidDiscriminant {
                field: "snapshot type",
                value: u64::from(types[bad]),
                offset: at + bad,
            });
        }
        Ok(Self { compression, types })
    }
}

body_via_field!(GetSnapshot);

/// Reply payload: the archive bytes, uninterpreted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Snapshot(pub Bytes);

impl WireEncode for Snapshot {
    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }
}

impl WireDecode for Snapshot {
    fn decode(body: &[u8]) -> Result<Self, CodecError> {
        Ok(Self(Bytes::copy_from_slice(body)))
    }
}

crate::stream::commands::command!(GetSnapshot, GetSnapshot, Snapshot);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn round_trips_and_rejects_unknown_codes() {
        let bytes = round_trip_strict(&GetSnapshot {
            compression: 4,
            types: vec![1, 100],
        });
        assert_eq!(bytes, [4, 2, 1, 100]);
        assert!(GetSnapshot::decode(&[7, 0]).is_err());
        assert!(GetSnapshot::decode(&[1, 1, 99]).is_err());
        round_trip(&Snapshot(Bytes::from_static(b"PK\x03\x04")));
    }
}
