//! The byte layouts of a replicated partition: [`PartitionEntry`] (one raft entry's payload)
//! and [`ReplicatedSnapshot`] (the state a member starts from), and the pure state machine
//! ([`Cursor::step`]) that both `apply` and every read's forward scan run, so the two can never
//! disagree about which entries are visible.
//!
//! Entry payload (little-endian; the empty payload is the leader's no-op and is never decoded):
//!
//! ```text
//! 0  1  version (1)
//! 1  1  kind: 1 append, 2 purge, 3 forget
//! append:                               purge:
//! 2  8  base_offset u64                 2  8  generation u64   (10 bytes in all)
//! 10 4  message_count u32 (>= 1)        forget:
//! 14 8  timestamp u64 (µs)              2  8  through_index u64 (10 bytes in all)
//! 22 4  batch_len u32
//! 26 .. the stamped batch, exactly batch_len bytes, nothing after it
//! ```
//!
//! Snapshot (64 bytes):
//!
//! ```text
//! 0  8  magic "EDDYRSN\0"          32 8  first_offset u64 (<= next_offset)
//! 8  4  version u32 (1)            40 8  last_timestamp u64
//! 12 4  reserved (0)               48 8  purge generation u64
//! 16 8  index u64 (raft index)     56 4  CRC-32C of bytes 0..56
//! 24 8  next_offset u64            60 4  reserved (0)
//! ```

use std::fmt;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use eddy_log::format::MAX_RECORD_PAYLOAD;

/// Version byte of every encoded [`PartitionEntry`].
pub const ENTRY_VERSION: u8 = 1;
const KIND_APPEND: u8 = 1;
const KIND_PURGE: u8 = 2;
const KIND_FORGET: u8 = 3;
/// Bytes in front of the batch in an encoded [`PartitionEntry::Append`].
pub const APPEND_HEADER_LEN: usize = 26;
/// Length of an encoded [`PartitionEntry::Purge`].
pub const PURGE_LEN: usize = 10;
/// Length of an encoded [`PartitionEntry::Forget`].
pub const FORGET_LEN: usize = 10;
/// Largest batch an entry carries: the entry must fit one log record.
pub const MAX_BATCH_BYTES: usize = MAX_RECORD_PAYLOAD as usize - APPEND_HEADER_LEN;

const SNAPSHOT_MAGIC: [u8; 8] = *b"EDDYRSN\0";
const SNAPSHOT_VERSION: u32 = 1;
/// Length of an encoded [`ReplicatedSnapshot`].
pub const SNAPSHOT_LEN: usize = 64;

/// Why bytes are not a valid [`PartitionEntry`] or [`ReplicatedSnapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EntryError {
    /// Fewer bytes than the fixed part needs.
    #[error("{have} bytes where at least {need} are needed")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// Bytes after the end of the value.
    #[error("{0} trailing bytes")]
    Trailing(usize),
    /// An unknown format version.
    #[error("unknown format version {0}")]
    UnknownVersion(u32),
    /// An unknown entry kind.
    #[error("unknown entry kind {0}")]
    UnknownKind(u8),
    /// An append of zero messages.
    #[error("an append carries no message")]
    NoMessages,
    /// `base_offset + message_count` does not fit a `u64`.
    #[error("offsets overflow")]
    OffsetOverflow,
    /// The batch exceeds [`MAX_BATCH_BYTES`].
    #[error("batch of {0} bytes exceeds the limit")]
    TooLarge(usize),
    /// Magic, checksum or a reserved field of a snapshot is wrong.
    #[error("snapshot magic, checksum or reserved field mismatch")]
    Checksum,
    /// A snapshot whose first visible offset is above its next offset.
    #[error("first offset above next offset")]
    Inconsistent,
}

/// One raft entry of a replicated partition (the payload of its log record).
#[derive(Clone, PartialEq, Eq)]
pub enum PartitionEntry {
    /// A batch stamped by the leader with its predicted base offset and its timestamp.
    Append {
        /// Offset of the batch's first message, as the leader predicted it.
        base_offset: u64,
        /// Messages in the batch (at least 1).
        message_count: u32,
        /// The batch's base timestamp (µs).
        timestamp: u64,
        /// The stamped batch, stored and served verbatim (decoding gives a slice of the
        /// payload, not a copy).
        batch: Bytes,
    },
    /// Empties the partition and restarts offsets at 0, recording purge `generation` (the
    /// metadata's purge generation of the partition). A purge whose generation is not above
    /// the partition's is a duplicate (a retried proposal) and changes nothing.
    Purge {
        /// The new purge generation.
        generation: u64,
    },
    /// An operator's `DELETE_SEGMENTS`: stop serving every record at or below raft index
    /// `through_index` (the last entry of the newest segment the leader deleted), so the first
    /// visible offset becomes the next offset after it, on every member alike; each member
    /// then deletes its own sealed segments that lie wholly below. Offsets do not change. A
    /// forget at or below the visible floor (a retried proposal, or retention got there
    /// first) changes nothing.
    Forget {
        /// The last raft index no longer served.
        through_index: u64,
    },
}

impl fmt::Debug for PartitionEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartitionEntry::Append {
                base_offset,
                message_count,
                timestamp,
                batch,
            } => f
                .debug_struct("Append")
                .field("base_offset", base_offset)
                .field("message_count", message_count)
                .field("timestamp", timestamp)
                .field("batch_len", &batch.len())
                .finish(),
            PartitionEntry::Purge { generation } => f
                .debug_struct("Purge")
                .field("generation", generation)
                .finish(),
            PartitionEntry::Forget { through_index } => f
                .debug_struct("Forget")
                .field("through_index", through_index)
                .finish(),
        }
    }
}

fn need(bytes: &[u8], need: usize) -> Result<(), EntryError> {
    if bytes.len() < need {
        return Err(EntryError::Truncated {
            need,
            have: bytes.len(),
        });
    }
    Ok(())
}

fn exact(bytes: &[u8], len: usize) -> Result<(), EntryError> {
    need(bytes, len)?;
    if bytes.len() > len {
        return Err(EntryError::Trailing(bytes.len() - len));
    }
    Ok(())
}

fn check_append(base_offset: u64, message_count: u32, batch_len: usize) -> Result<(), EntryError> {
    if message_count == 0 {
        return Err(EntryError::NoMessages);
    }
    if base_offset.checked_add(u64::from(message_count)).is_none() {
        return Err(EntryError::OffsetOverflow);
    }
    if batch_len > MAX_BATCH_BYTES {
        return Err(EntryError::TooLarge(batch_len));
    }
    Ok(())
}

impl PartitionEntry {
    /// Encoded length.
    pub fn encoded_len(&self) -> usize {
        match self {
            PartitionEntry::Append { batch, .. } => APPEND_HEADER_LEN + batch.len(),
            PartitionEntry::Purge { .. } => PURGE_LEN,
            PartitionEntry::Forget { .. } => FORGET_LEN,
        }
    }

    /// Encodes the entry (one copy of the batch, behind its 26-byte header). Refuses what
    /// [`PartitionEntry::decode`] would refuse.
    pub fn encode(&self) -> Result<Bytes, EntryError> {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        out.put_u8(ENTRY_VERSION);
        match self {
            PartitionEntry::Append {
                base_offset,
                message_count,
                timestamp,
                batch,
            } => {
                check_append(*base_offset, *message_count, batch.len())?;
                out.put_u8(KIND_APPEND);
                out.put_u64_le(*base_offset);
                out.put_u32_le(*message_count);
                out.put_u64_le(*timestamp);
                // MAX_BATCH_BYTES < u32::MAX, checked above.
                out.put_u32_le(batch.len() as u32);
                out.put_slice(batch);
            }
            PartitionEntry::Purge { generation } => {
                out.put_u8(KIND_PURGE);
                out.put_u64_le(*generation);
            }
            PartitionEntry::Forget { through_index } => {
                out.put_u8(KIND_FORGET);
                out.put_u64_le(*through_index);
            }
        }
        Ok(out.freeze())
    }

    /// Decodes an entry; an append's batch is a slice of `payload` (no copy). Every length is
    /// checked before use; any input gives a value or an error, never a panic.
    pub fn decode(payload: &Bytes) -> Result<PartitionEntry, EntryError> {
        need(payload, 2)?;
        if payload[0] != ENTRY_VERSION {
            return Err(EntryError::UnknownVersion(u32::from(payload[0])));
        }
        match payload[1] {
            KIND_APPEND => {
                need(payload, APPEND_HEADER_LEN)?;
                let mut header = &payload[2..APPEND_HEADER_LEN];
                let base_offset = header.get_u64_le();
                let message_count = header.get_u32_le();
                let timestamp = header.get_u64_le();
                let batch_len = header.get_u32_le() as usize;
                let Some(total) = APPEND_HEADER_LEN.checked_add(batch_len) else {
                    return Err(EntryError::TooLarge(batch_len));
                };
                check_append(base_offset, message_count, batch_len)?;
                exact(payload, total)?;
                Ok(PartitionEntry::Append {
                    base_offset,
                    message_count,
                    timestamp,
                    batch: payload.slice(APPEND_HEADER_LEN..total),
                })
            }
            KIND_PURGE => {
                exact(payload, PURGE_LEN)?;
                Ok(PartitionEntry::Purge {
                    generation: (&payload[2..]).get_u64_le(),
                })
            }
            KIND_FORGET => {
                exact(payload, FORGET_LEN)?;
                Ok(PartitionEntry::Forget {
                    through_index: (&payload[2..]).get_u64_le(),
                })
            }
            other => Err(EntryError::UnknownKind(other)),
        }
    }
}

/// The state of a replicated partition after a raft index: what a member starts from when its
/// log begins after that index (a snapshot install, or a restart after retention deleted the
/// segments up to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicatedSnapshot {
    /// The raft index the state is taken after (everything at or below it is applied).
    pub index: u64,
    /// The next message offset.
    pub next_offset: u64,
    /// The sender's first visible offset when the snapshot was taken (at most `next_offset`).
    /// A partition started from the snapshot serves from `next_offset` on: its log holds
    /// nothing it may serve at or below `index`.
    pub first_offset: u64,
    /// The newest batch timestamp applied (µs): later batches may not be older.
    pub last_timestamp: u64,
    /// The purge generation.
    pub generation: u64,
}

impl ReplicatedSnapshot {
    /// Encodes the snapshot in its 64-byte checksummed form.
    pub fn encode(&self) -> [u8; SNAPSHOT_LEN] {
        let mut out = [0u8; SNAPSHOT_LEN];
        let mut w = &mut out[..];
        w.put_slice(&SNAPSHOT_MAGIC);
        w.put_u32_le(SNAPSHOT_VERSION);
        w.put_u32_le(0);
        for field in [
            self.index,
            self.next_offset,
            self.first_offset,
            self.last_timestamp,
            self.generation,
        ] {
            w.put_u64_le(field);
        }
        let crc = crc32c::crc32c(&out[0..56]);
        out[56..60].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and verifies a snapshot (length, magic, checksum, version, reserved fields,
    /// `first_offset <= next_offset`).
    pub fn decode(bytes: &[u8]) -> Result<ReplicatedSnapshot, EntryError> {
        exact(bytes, SNAPSHOT_LEN)?;
        let mut r = &bytes[8..];
        let version = r.get_u32_le();
        let reserved = r.get_u32_le();
        let snapshot = ReplicatedSnapshot {
            index: r.get_u64_le(),
            next_offset: r.get_u64_le(),
            first_offset: r.get_u64_le(),
            last_timestamp: r.get_u64_le(),
            generation: r.get_u64_le(),
        };
        let crc = r.get_u32_le();
        let reserved_tail = r.get_u32_le();
        if bytes[0..8] != SNAPSHOT_MAGIC
            || crc32c::crc32c(&bytes[0..56]) != crc
            || reserved != 0
            || reserved_tail != 0
        {
            return Err(EntryError::Checksum);
        }
        if version != SNAPSHOT_VERSION {
            return Err(EntryError::UnknownVersion(version));
        }
        if snapshot.first_offset > snapshot.next_offset {
            return Err(EntryError::Inconsistent);
        }
        Ok(snapshot)
    }
}

/// What applying one entry did (the outcome of [`Cursor::step`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The empty payload.
    NoOp,
    /// The batch became visible.
    Appended {
        base_offset: u64,
        message_count: u32,
        timestamp: u64,
        batch: Bytes,
    },
    /// A stale prediction: nothing changed.
    Refused {
        expected_offset: u64,
        min_timestamp: u64,
    },
    /// The partition was emptied.
    Purged { generation: u64 },
    /// A duplicate purge: nothing changed.
    StalePurge { current_generation: u64 },
    /// Records through this raft index are to be forgotten (offsets unchanged).
    Forget { through_index: u64 },
    /// Undecodable: nothing changed.
    Corrupt(EntryError),
}

/// The offset state machine of a replicated partition: everything `apply` decides is decided
/// here, from the entry bytes and these three numbers, so a forward scan that starts from a
/// recorded cursor reproduces exactly what `apply` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Cursor {
    /// The next message offset.
    pub(crate) next_offset: u64,
    /// The newest batch timestamp accepted (kept across purges: timestamps never go back).
    pub(crate) last_timestamp: u64,
    /// The purge generation.
    pub(crate) generation: u64,
}

impl Cursor {
    /// Applies one entry payload. Deterministic, never panics.
    pub(crate) fn step(&mut self, payload: &Bytes) -> Step {
        if payload.is_empty() {
            return Step::NoOp;
        }
        match PartitionEntry::decode(payload) {
            Err(e) => Step::Corrupt(e),
            Ok(PartitionEntry::Append {
                base_offset,
                message_count,
                timestamp,
                batch,
            }) => {
                if base_offset != self.next_offset || timestamp < self.last_timestamp {
                    return Step::Refused {
                        expected_offset: self.next_offset,
                        min_timestamp: self.last_timestamp,
                    };
                }
                // Decoding checked that this does not overflow.
                self.next_offset = base_offset + u64::from(message_count);
                self.last_timestamp = timestamp;
                Step::Appended {
                    base_offset,
                    message_count,
                    timestamp,
                    batch,
                }
            }
            Ok(PartitionEntry::Purge { generation }) => {
                if generation <= self.generation {
                    return Step::StalePurge {
                        current_generation: self.generation,
                    };
                }
                self.generation = generation;
                self.next_offset = 0;
                Step::Purged { generation }
            }
            Ok(PartitionEntry::Forget { through_index }) => Step::Forget { through_index },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn append(
        base_offset: u64,
        message_count: u32,
        timestamp: u64,
        batch: &[u8],
    ) -> PartitionEntry {
        PartitionEntry::Append {
            base_offset,
            message_count,
            timestamp,
            batch: Bytes::copy_from_slice(batch),
        }
    }

    #[test]
    fn append_layout_is_pinned() {
        let bytes = append(0x0102, 3, 0x0a0b, b"xyz").encode().unwrap();
        let mut expected = vec![1, 1];
        expected.extend_from_slice(&0x0102u64.to_le_bytes());
        expected.extend_from_slice(&3u32.to_le_bytes());
        expected.extend_from_slice(&0x0a0bu64.to_le_bytes());
        expected.extend_from_slice(&3u32.to_le_bytes());
        expected.extend_from_slice(b"xyz");
        assert_eq!(&bytes[..], &expected[..]);
        let purge = PartitionEntry::Purge { generation: 7 }.encode().unwrap();
        assert_eq!(&purge[..], &[1, 2, 7, 0, 0, 0, 0, 0, 0, 0]);
        let forget = PartitionEntry::Forget { through_index: 9 }
            .encode()
            .unwrap();
        assert_eq!(&forget[..], &[1, 3, 9, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn decoded_batch_is_a_slice_of_the_payload() {
        let payload = append(5, 2, 9, b"the batch").encode().unwrap();
        let PartitionEntry::Append { batch, .. } = PartitionEntry::decode(&payload).unwrap() else {
            panic!("an append decodes as an append");
        };
        assert_eq!(&batch[..], b"the batch");
        let start = payload.as_ptr() as usize + APPEND_HEADER_LEN;
        assert_eq!(batch.as_ptr() as usize, start, "no copy");
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        for entry in [
            append(1, 1, 1, b"abc"),
            append(0, 4, 0, b""),
            PartitionEntry::Purge { generation: 3 },
            PartitionEntry::Forget { through_index: 4 },
        ] {
            let bytes = entry.encode().unwrap();
            assert_eq!(PartitionEntry::decode(&bytes).unwrap(), entry);
            for cut in 0..bytes.len() {
                let short = bytes.slice(..cut);
                assert!(
                    matches!(
                        PartitionEntry::decode(&short),
                        Err(EntryError::Truncated { .. })
                    ),
                    "{entry:?} cut at {cut}"
                );
            }
            let mut long = bytes.to_vec();
            long.push(0);
            assert_eq!(
                PartitionEntry::decode(&Bytes::from(long)),
                Err(EntryError::Trailing(1))
            );
        }
    }

    #[test]
    fn invalid_fields_are_refused() {
        let good = append(1, 1, 1, b"ab").encode().unwrap().to_vec();
        let with = |at: usize, bytes: &[u8]| {
            let mut v = good.clone();
            v[at..at + bytes.len()].copy_from_slice(bytes);
            PartitionEntry::decode(&Bytes::from(v))
        };
        assert_eq!(with(0, &[2]), Err(EntryError::UnknownVersion(2)));
        assert_eq!(with(1, &[9]), Err(EntryError::UnknownKind(9)));
        assert_eq!(with(10, &0u32.to_le_bytes()), Err(EntryError::NoMessages));
        assert_eq!(
            with(2, &u64::MAX.to_le_bytes()),
            Err(EntryError::OffsetOverflow)
        );
        assert_eq!(
            with(22, &3u32.to_le_bytes()),
            Err(EntryError::Truncated { need: 29, have: 28 })
        );
        assert_eq!(with(22, &1u32.to_le_bytes()), Err(EntryError::Trailing(1)));
        assert_eq!(
            with(22, &u32::MAX.to_le_bytes()),
            Err(EntryError::TooLarge(u32::MAX as usize))
        );
        assert_eq!(append(0, 0, 0, b"").encode(), Err(EntryError::NoMessages));
        assert_eq!(
            append(u64::MAX, 1, 0, b"").encode(),
            Err(EntryError::OffsetOverflow)
        );
    }

    #[test]
    fn snapshot_round_trips_and_every_flip_is_caught() {
        let snapshot = ReplicatedSnapshot {
            index: 42,
            next_offset: 100,
            first_offset: 60,
            last_timestamp: 1_700_000,
            generation: 3,
        };
        let bytes = snapshot.encode();
        assert_eq!(ReplicatedSnapshot::decode(&bytes), Ok(snapshot));
        for at in 0..SNAPSHOT_LEN {
            let mut bad = bytes;
            bad[at] ^= 0x10;
            assert!(ReplicatedSnapshot::decode(&bad).is_err(), "flip at {at}");
        }
        assert!(matches!(
            ReplicatedSnapshot::decode(&bytes[..63]),
            Err(EntryError::Truncated { .. })
        ));
        let inconsistent = ReplicatedSnapshot {
            first_offset: 101,
            ..snapshot
        };
        assert_eq!(
            ReplicatedSnapshot::decode(&inconsistent.encode()),
            Err(EntryError::Inconsistent)
        );
    }

    #[test]
    fn the_cursor_refuses_stale_predictions_and_duplicate_purges() {
        let mut cursor = Cursor::default();
        let step = |c: &mut Cursor, e: &PartitionEntry| c.step(&e.encode().unwrap());
        assert!(matches!(
            step(&mut cursor, &append(0, 2, 10, b"a")),
            Step::Appended { .. }
        ));
        let before = cursor;
        assert_eq!(
            step(&mut cursor, &append(1, 1, 10, b"b")),
            Step::Refused {
                expected_offset: 2,
                min_timestamp: 10
            }
        );
        assert_eq!(
            step(&mut cursor, &append(2, 1, 9, b"b")),
            Step::Refused {
                expected_offset: 2,
                min_timestamp: 10
            }
        );
        assert_eq!(cursor, before, "a refusal changes nothing");
        assert_eq!(
            step(&mut cursor, &PartitionEntry::Purge { generation: 1 }),
            Step::Purged { generation: 1 }
        );
        assert_eq!(cursor.next_offset, 0);
        assert_eq!(cursor.last_timestamp, 10, "timestamps never go back");
        assert_eq!(
            step(&mut cursor, &PartitionEntry::Purge { generation: 1 }),
            Step::StalePurge {
                current_generation: 1
            }
        );
        assert_eq!(cursor.step(&Bytes::new()), Step::NoOp);
        assert!(matches!(
            cursor.step(&Bytes::from_static(&[1])),
            Step::Corrupt(EntryError::Truncated { .. })
        ));
    }

    fn any_entry() -> impl Strategy<Value = PartitionEntry> {
        prop_oneof![
            (
                any::<u64>(),
                1u32..,
                any::<u64>(),
                proptest::collection::vec(any::<u8>(), 0..64)
            )
                .prop_filter("offsets fit", |(b, c, _, _)| b
                    .checked_add(u64::from(*c))
                    .is_some())
                .prop_map(|(b, c, t, v)| append(b, c, t, &v)),
            any::<u64>().prop_map(|generation| PartitionEntry::Purge { generation }),
            any::<u64>().prop_map(|through_index| PartitionEntry::Forget { through_index }),
        ]
    }

    proptest! {
        #[test]
        fn entries_round_trip(entry in any_entry()) {
            let bytes = entry.encode().unwrap();
            prop_assert_eq!(bytes.len(), entry.encoded_len());
            let decoded = PartitionEntry::decode(&bytes).unwrap();
            prop_assert_eq!(&decoded, &entry);
            prop_assert_eq!(decoded.encode().unwrap(), bytes);
        }

        #[test]
        fn snapshots_round_trip(
            index in any::<u64>(), next in any::<u64>(), back in any::<u64>(),
            ts in any::<u64>(), generation in any::<u64>(),
        ) {
            let snapshot = ReplicatedSnapshot {
                index, next_offset: next, first_offset: back.min(next),
                last_timestamp: ts, generation,
            };
            prop_assert_eq!(ReplicatedSnapshot::decode(&snapshot.encode()), Ok(snapshot));
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..80)) {
            super::super::fuzzing::fuzz_partition_entry(&data);
        }
    }
}
