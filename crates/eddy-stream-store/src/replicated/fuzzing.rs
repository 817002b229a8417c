//! Fuzz entry point of the replicated partition's codecs (for a target such as
//! `fuzz/fuzz_targets/storage_replicated_entry.rs`), also run by this crate's tests over the
//! seeds and their mutations.

use bytes::Bytes;

use super::entry::{Cursor, PartitionEntry, ReplicatedSnapshot, Step};

/// The entry and snapshot decoders and the apply state machine on arbitrary bytes.
///
/// Whatever the input: no panic; an entry that decodes re-encodes to the same bytes and its
/// batch is a slice of the input (no copy); a snapshot that decodes re-encodes to the same
/// bytes; stepping the state machine from a few states either makes exactly the documented
/// change or none at all.
pub fn fuzz_partition_entry(data: &[u8]) {
    let payload = Bytes::copy_from_slice(data);
    let decoded = PartitionEntry::decode(&payload);
    if let Ok(entry) = &decoded {
        assert_eq!(entry.encode().expect("re-encode"), payload, "canonical");
        if let PartitionEntry::Append { batch, .. } = entry {
            let start = payload.as_ptr() as usize;
            let at = batch.as_ptr() as usize;
            assert!(
                batch.is_empty() || (at >= start && at + batch.len() <= start + payload.len()),
                "the batch is a slice of the payload"
            );
        }
    }
    if let Ok(snapshot) = ReplicatedSnapshot::decode(data) {
        assert_eq!(&snapshot.encode()[..], data, "canonical");
    }
    let seed = data
        .iter()
        .fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(*b));
    for before in [
        Cursor::default(),
        Cursor {
            next_offset: seed,
            last_timestamp: seed >> 3,
            generation: seed % 4,
        },
        Cursor {
            next_offset: u64::MAX - 1,
            last_timestamp: u64::MAX,
            generation: u64::MAX,
        },
    ] {
        let mut cursor = before;
        match cursor.step(&payload) {
            Step::Appended {
                base_offset,
                message_count,
                timestamp,
                ..
            } => {
                assert_eq!(base_offset, before.next_offset);
                assert_eq!(cursor.next_offset, base_offset + u64::from(message_count));
                assert!(timestamp >= before.last_timestamp);
                assert_eq!(cursor.last_timestamp, timestamp);
                assert_eq!(cursor.generation, before.generation);
            }
            Step::Purged { generation } => {
                assert!(generation > before.generation);
                assert_eq!(cursor.next_offset, 0);
                assert_eq!(cursor.last_timestamp, before.last_timestamp);
            }
            Step::NoOp => {
                assert!(data.is_empty());
                assert_eq!(cursor, before);
            }
            Step::Corrupt(_) => {
                assert!(decoded.is_err());
                assert_eq!(cursor, before);
            }
            Step::Refused { .. } | Step::StalePurge { .. } | Step::Forget { .. } => {
                assert_eq!(cursor, before);
            }
        }
    }
}

/// Seed inputs built from real encodings: (file name, bytes).
pub fn partition_entry_seeds() -> Vec<(String, Vec<u8>)> {
    let append = PartitionEntry::Append {
        base_offset: 0,
        message_count: 3,
        timestamp: 1_700_000_000_000_000,
        batch: Bytes::from_static(b"three stamped messages"),
    };
    let snapshot = ReplicatedSnapshot {
        index: 12,
        next_offset: 40,
        first_offset: 10,
        last_timestamp: 1_700_000_000_000_000,
        generation: 2,
    };
    vec![
        ("no-op".to_owned(), Vec::new()),
        (
            "append".to_owned(),
            append.encode().expect("encodes").to_vec(),
        ),
        (
            "purge".to_owned(),
            PartitionEntry::Purge { generation: 1 }
                .encode()
                .expect("encodes")
                .to_vec(),
        ),
        (
            "forget".to_owned(),
            PartitionEntry::Forget { through_index: 7 }
                .encode()
                .expect("encodes")
                .to_vec(),
        ),
        ("snapshot".to_owned(), snapshot.encode().to_vec()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_partition_entry_corpus() {
        eddy_log::fuzzing::replay_corpus(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus"),
            "storage_partition_entry",
            &partition_entry_seeds(),
            fuzz_partition_entry,
        );
    }

    #[test]
    fn seeds_and_their_mutations_never_panic() {
        for (_, seed) in partition_entry_seeds() {
            fuzz_partition_entry(&seed);
            for cut in 0..seed.len() {
                fuzz_partition_entry(&seed[..cut]);
            }
            for at in 0..seed.len() {
                for bit in 0..8 {
                    let mut flipped = seed.clone();
                    flipped[at] ^= 1 << bit;
                    fuzz_partition_entry(&flipped);
                }
            }
            let mut longer = seed.clone();
            longer.push(0);
            fuzz_partition_entry(&longer);
        }
    }
}
