//! Optional partition id, polling strategy and ack level (spec §3.6-§3.8).
//!
//! ```text
//! optional partition  [flag: u8][partition_id: u32]   flag 1 = Some, anything else = None (5 bytes)
//! polling strategy    [kind: u8][value: u64]          1 offset, 2 timestamp, 3 first, 4 last, 5 next
//! ack level           [u8]                            0 no-ack, 1 quorum
//! ```

use super::codec::{Field, Reader};
use super::error::CodecError;

/// `[flag: u8][partition_id: u32]`: `Some(id)` when the flag is 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct OptionalPartition(pub Option<u32>);

impl Field for OptionalPartition {
    fn field_len(&self) -> usize {
        5
    }

    fn put(&self, out: &mut Vec<u8>) {
        match self.0 {
            Some(id) => {
                out.push(1);
                out.extend_from_slice(&id.to_le_bytes());
            }
            None => out.extend_from_slice(&[0; 5]),
        }
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let flag = reader.u8(name)?;
        let id = reader.u32(name)?;
        Ok(Self((flag == 1).then_some(id)))
    }
}

/// Where a poll starts (spec §3.7, semantics §7.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PollingStrategy {
    /// Kind 1: from this offset.
    Offset(u64),
    /// Kind 2: messages whose batch append time is at or after this µs timestamp.
    Timestamp(u64),
    /// Kind 3: from the earliest retained message.
    First,
    /// Kind 4: the last `count` messages.
    Last,
    /// Kind 5: after the consumer's stored offset.
    Next,
}

impl PollingStrategy {
    /// The kind byte.
    pub const fn kind(&self) -> u8 {
        match self {
            Self::Offset(_) => 1,
            Self::Timestamp(_) => 2,
            Self::First => 3,
            Self::Last => 4,
            Self::Next => 5,
        }
    }

    /// The value field (0 for First/Last/Next, as the SDK sends).
    pub const fn value(&self) -> u64 {
        match self {
            Self::Offset(v) | Self::Timestamp(v) => *v,
            Self::First | Self::Last | Self::Next => 0,
        }
    }
}

impl Field for PollingStrategy {
    fn field_len(&self) -> usize {
        9
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.push(self.kind());
        out.extend_from_slice(&self.value().to_le_bytes());
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let offset = reader.position();
        let kind = reader.u8(name)?;
        let value = reader.u64(name)?;
        Ok(match kind {
            1 => Self::Offset(value),
            2 => Self::Timestamp(value),
            3 => Self::First,
            4 => Self::Last,
            5 => Self::Next,
            other => {
                return Err(CodecError::InvalidDiscriminant {
                    field: name,
                    value: u64::from(other),
                    offset,
                })
            }
        })
    }
}

/// Consumer-offset write durability (spec §3.8). A single node treats both alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum AckLevel {
    /// 0: apply on the leader and answer at once.
    NoAck = 0,
    /// 1: answer after a quorum commit (the SDK's value).
    #[default]
    Quorum = 1,
}

impl Field for AckLevel {
    fn field_len(&self) -> usize {
        1
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.push(*self as u8);
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let offset = reader.position();
        match reader.u8(name)? {
            0 => Ok(Self::NoAck),
            1 => Ok(Self::Quorum),
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

    #[test]
    fn golden_and_rules() {
        let mut out = Vec::new();
        PollingStrategy::Offset(0).put(&mut out);
        OptionalPartition(Some(0)).put(&mut out);
        OptionalPartition(None).put(&mut out);
        AckLevel::Quorum.put(&mut out);
        assert_eq!(
            out,
            [1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
        );
        let strategy = [5u8, 9, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            PollingStrategy::take(&mut Reader::new(&strategy), "s").unwrap(),
            PollingStrategy::Next
        );
        assert!(
            PollingStrategy::take(&mut Reader::new(&[6, 0, 0, 0, 0, 0, 0, 0, 0]), "s").is_err()
        );
        assert_eq!(
            OptionalPartition::take(&mut Reader::new(&[2, 7, 0, 0, 0]), "p").unwrap(),
            OptionalPartition(None),
            "any flag other than 1 means none"
        );
        assert!(AckLevel::take(&mut Reader::new(&[2]), "a").is_err());
    }
}
