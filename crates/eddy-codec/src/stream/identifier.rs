//! Identifier, Consumer and Partitioning (spec §3.3-§3.5).
//!
//! ```text
//! Identifier   [kind: u8][length: u8][value]   kind 1 numeric (length 4, u32 LE), 2 name (1..=255)
//! Consumer     [kind: u8][id: Identifier]       kind 1 consumer, 2 consumer group
//! Partitioning [kind: u8][length: u8][value]   1 balanced (0), 2 partition id (4), 3 key (1..=255)
//! ```

use super::codec::{Field, Reader};
use super::error::CodecError;
use super::name::WireName;

/// A resource addressed by numeric id (0-based) or by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Identifier {
    /// Kind 1: a 0-based numeric id.
    Numeric(u32),
    /// Kind 2: a name, matched byte for byte.
    Named(WireName),
}

impl Identifier {
    /// A numeric identifier.
    pub const fn numeric(id: u32) -> Self {
        Self::Numeric(id)
    }

    /// A named identifier.
    pub fn named(name: &str) -> Result<Self, CodecError> {
        Ok(Self::Named(WireName::new(name)?))
    }

    /// The numeric id, if numeric.
    pub fn as_numeric(&self) -> Option<u32> {
        match self {
            Self::Numeric(id) => Some(*id),
            Self::Named(_) => None,
        }
    }

    /// The name, if named.
    pub fn as_name(&self) -> Option<&str> {
        match self {
            Self::Numeric(_) => None,
            Self::Named(name) => Some(name.as_str()),
        }
    }
}

impl std::fmt::Display for Identifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Numeric(id) => write!(f, "{id}"),
            Self::Named(name) => write!(f, "{name}"),
        }
    }
}

impl Field for Identifier {
    fn field_len(&self) -> usize {
        match self {
            Self::Numeric(_) => 6,
            Self::Named(name) => 2 + name.len(),
        }
    }

    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Self::Numeric(id) => {
                out.extend_from_slice(&[1, 4]);
                out.extend_from_slice(&id.to_le_bytes());
            }
            Self::Named(name) => {
                out.push(2);
                name.put(out);
            }
        }
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let offset = reader.position();
        match reader.u8(name)? {
            1 => {
                let len_at = reader.position();
                let len = reader.u8(name)?;
                if len != 4 {
                    return Err(CodecError::InvalidValue {
                        field: name,
                        offset: len_at,
                        reason: "numeric identifier length must be 4",
                    });
                }
                Ok(Self::Numeric(reader.u32(name)?))
            }
            2 => Ok(Self::Named(WireName::take(reader, name)?)),
            kind => Err(CodecError::InvalidDiscriminant {
                field: name,
                value: u64::from(kind),
                offset,
            }),
        }
    }
}

/// Consumer kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ConsumerKind {
    /// 1: a single consumer.
    Consumer = 1,
    /// 2: a consumer group.
    ConsumerGroup = 2,
    /// 3: the offsets of a consumer group managed outside Iggy (a Kafka bridge's): offset
    /// calls only, no membership or range check, never polled (the 0.12.2 clients).
    ExternalGroup = 3,
}

/// Who polls or owns an offset (spec §3.4).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Consumer {
    /// Single consumer or group.
    pub kind: ConsumerKind,
    /// Consumer id, or the group id/name.
    pub id: Identifier,
}

impl Consumer {
    /// A single consumer.
    pub fn new(id: Identifier) -> Self {
        Self {
            kind: ConsumerKind::Consumer,
            id,
        }
    }

    /// A consumer group.
    pub fn group(id: Identifier) -> Self {
        Self {
            kind: ConsumerKind::ConsumerGroup,
            id,
        }
    }

    /// The offsets of consumer group `id`, kept for a group managed outside Iggy.
    pub fn external_group(id: Identifier) -> Self {
        Self {
            kind: ConsumerKind::ExternalGroup,
            id,
        }
    }

    /// The numeric key of a single consumer: its numeric id, or `XXH32(name)` (spec §3.4).
    pub fn numeric_key(&self) -> u32 {
        match &self.id {
            Identifier::Numeric(id) => *id,
            Identifier::Named(name) => eddy_wire::stream::xxh32(name.as_str().as_bytes()),
        }
    }
}

impl Field for Consumer {
    fn field_len(&self) -> usize {
        1 + self.id.field_len()
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.push(self.kind as u8);
        self.id.put(out);
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let offset = reader.position();
        let kind = match reader.u8(name)? {
            1 => ConsumerKind::Consumer,
            2 => ConsumerKind::ConsumerGroup,
            3 => ConsumerKind::ExternalGroup,
            other => {
                return Err(CodecError::InvalidDiscriminant {
                    field: name,
                    value: u64::from(other),
                    offset,
                })
            }
        };
        Ok(Self {
            kind,
            id: Identifier::take(reader, name)?,
        })
    }
}

/// Maximum `MessagesKey` length.
pub const MAX_MESSAGES_KEY_LEN: usize = 255;

/// How `SendMessages` picks a partition (spec §3.5).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Partitioning {
    /// Kind 1: round-robin over the topic's partitions.
    Balanced,
    /// Kind 2: an explicit 0-based partition id (what the SDK always sends).
    PartitionId(u32),
    /// Kind 3: `partitions[XXH32(key) % count]`; key 1..=255 bytes.
    MessagesKey(Vec<u8>),
}

impl Partitioning {
    /// Validates a messages key (1..=255 bytes).
    pub fn messages_key(key: &[u8]) -> Result<Self, CodecError> {
        if key.is_empty() || key.len() > MAX_MESSAGES_KEY_LEN {
            return Err(CodecError::Unencodable {
                field: "partitioning",
                reason: "messages key must be 1..=255 bytes",
            });
        }
        Ok(Self::MessagesKey(key.to_vec()))
    }

    /// The partition among `0..partitions_count` for a key: `XXH32(key) % count`.
    pub fn partition_for_key(key: &[u8], partitions_count: u32) -> Option<u32> {
        (partitions_count > 0).then(|| eddy_wire::stream::xxh32(key) % partitions_count)
    }
}

impl Field for Partitioning {
    fn field_len(&self) -> usize {
        match self {
            Self::Balanced => 2,
            Self::PartitionId(_) => 6,
            Self::MessagesKey(key) => 2 + key.len(),
        }
    }

    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Self::Balanced => out.extend_from_slice(&[1, 0]),
            Self::PartitionId(id) => {
                out.extend_from_slice(&[2, 4]);
                out.extend_from_slice(&id.to_le_bytes());
            }
            Self::MessagesKey(key) => {
                assert!(
                    !key.is_empty() && key.len() <= MAX_MESSAGES_KEY_LEN,
                    "messages key invariant: 1..=255 bytes"
                );
                out.push(3);
                out.push(key.len() as u8);
                out.extend_from_slice(key);
            }
        }
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let offset = reader.position();
        let kind = reader.u8(name)?;
        let len_at = reader.position();
        let len = reader.u8(name)? as usize;
        let bad_len = |reason| CodecError::InvalidValue {
            field: name,
            offset: len_at,
            reason,
        };
        match kind {
            1 if len == 0 => Ok(Self::Balanced),
            1 => Err(bad_len("balanced partitioning must have length 0")),
            2 if len == 4 => Ok(Self::PartitionId(reader.u32(name)?)),
            2 => Err(bad_len("partition id partitioning must have length 4")),
            3 if len > 0 => Ok(Self::MessagesKey(reader.bytes(len, name)?.to_vec())),
            3 => Err(bad_len("messages key must not be empty")),
            other => Err(CodecError::InvalidDiscriminant {
                field: name,
                value: u64::from(other),
                offset,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::codec::WireDecode;
    use proptest::prelude::*;

    fn enc<T: Field>(value: &T) -> Vec<u8> {
        let mut out = Vec::new();
        value.put(&mut out);
        assert_eq!(out.len(), value.field_len());
        out
    }

    #[test]
    fn golden() {
        assert_eq!(enc(&Identifier::numeric(0)), [1, 4, 0, 0, 0, 0]);
        assert_eq!(
            enc(&Consumer::new(Identifier::numeric(1))),
            [1, 1, 4, 1, 0, 0, 0]
        );
        assert_eq!(enc(&Partitioning::PartitionId(0)), [2, 4, 0, 0, 0, 0]);
        assert_eq!(enc(&Partitioning::Balanced), [1, 0]);
        assert_eq!(enc(&Identifier::named("ab").unwrap()), [2, 2, b'a', b'b']);
    }

    #[test]
    fn decode_errors() {
        for bad in [
            &[1u8, 3, 0, 0, 0][..],
            &[3, 1, 0],
            &[2, 0],
            &[0, 4, 0, 0, 0, 0],
        ] {
            assert!(
                Identifier::take(&mut Reader::new(bad), "id").is_err(),
                "{bad:?}"
            );
        }
        for bad in [&[1u8, 1, 0][..], &[2, 3, 0, 0, 0], &[3, 0], &[4, 0]] {
            assert!(
                Partitioning::take(&mut Reader::new(bad), "p").is_err(),
                "{bad:?}"
            );
        }
        for kind in [0u8, 4, 255] {
            assert!(
                Consumer::take(&mut Reader::new(&[kind, 1, 4, 0, 0, 0, 0]), "c").is_err(),
                "kind {kind}"
            );
        }
        // Kind 3, the 0.12.2 clients' external group, reads back as one.
        let external = Consumer::take(&mut Reader::new(&[3, 1, 4, 7, 0, 0, 0]), "c").unwrap();
        assert_eq!(external, Consumer::external_group(Identifier::Numeric(7)));
    }

    #[test]
    fn named_consumer_key_is_xxh32() {
        let consumer = Consumer::new(Identifier::named("user-42").unwrap());
        assert_eq!(consumer.numeric_key(), 0x6181_9a7e);
        assert_eq!(Partitioning::partition_for_key(b"user-42", 0), None);
        assert_eq!(
            Partitioning::partition_for_key(b"user-42", 7),
            Some(0x6181_9a7e % 7)
        );
    }

    pub(crate) fn identifier() -> impl Strategy<Value = Identifier> {
        prop_oneof![
            any::<u32>().prop_map(Identifier::Numeric),
            "[a-z0-9._-]{1,40}".prop_map(|s| Identifier::named(&s).unwrap()),
        ]
    }

    proptest! {
        #[test]
        fn round_trips(id in identifier(), group in any::<bool>(),
                       key in proptest::collection::vec(any::<u8>(), 1..=255), p in any::<u32>()) {
            let consumer = if group { Consumer::group(id.clone()) } else { Consumer::new(id.clone()) };
            for part in [Partitioning::Balanced, Partitioning::PartitionId(p), Partitioning::MessagesKey(key.clone())] {
                let bytes = enc(&part);
                prop_assert_eq!(Partitioning::take(&mut Reader::new(&bytes), "p").unwrap(), part);
                for cut in 0..bytes.len() {
                    prop_assert!(Partitioning::take(&mut Reader::new(&bytes[..cut]), "p").is_err());
                }
            }
            let bytes = enc(&consumer);
            prop_assert_eq!(Consumer::take(&mut Reader::new(&bytes), "c").unwrap(), consumer);
            for cut in 0..bytes.len() {
                prop_assert!(Consumer::take(&mut Reader::new(&bytes[..cut]), "c").is_err());
            }
            let _ = crate::stream::commands::get_stream::GetStream::decode(&enc(&id));
        }
    }
}
