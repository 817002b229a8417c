//! Fuzz entry points of the event store (one line per target in
//! `fuzz/fuzz_targets/storage_events_*.rs`), also replayed over the committed corpus by this
//! crate's tests.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use eddy_log::{Cache, MemBackend, StorageBackend};

use crate::index::{Index, MANIFEST};
use crate::record::{
    decode_record, encode_record, EventCodec, EventRecord, RecordBody, TAG_DELETE, TAG_SCHEMA,
    TAG_TRIM, TAG_WRITE,
};
use crate::state::derive_update;
use crate::types::{AggregateKey, NewEvent, SchemaKey};

/// The dictionary the fuzzer's codec uses for `ZstdDict` parts.
const FUZZ_DICTIONARY: &[u8] = b"{\"type\":\"order\",\"status\":\"created\",\"amount\":1}";

/// The event-record decoder on arbitrary bytes.
///
/// Byte 0 picks the log tag (low two bits: write, trim, delete, schema) and whether the codec
/// has a dictionary (bit 2); the rest is the payload. Whatever the input: no panic; a payload
/// that decodes re-encodes to the same bytes, its events decode or fail cleanly, and applying
/// it to an empty store state either works or reports corruption.
pub fn fuzz_event_record(data: &[u8]) {
    let Some((&mode, payload)) = data.split_first() else {
        return;
    };
    let tag = [TAG_WRITE, TAG_TRIM, TAG_DELETE, TAG_SCHEMA][usize::from(mode & 3)];
    let payload = Bytes::copy_from_slice(payload);
    let Ok(record) = decode_record(tag, &payload) else {
        return;
    };
    assert_eq!(encode_record(&record), payload, "decoding is canonical");
    let dictionary = (mode & 4 != 0).then(|| Bytes::from_static(FUZZ_DICTIONARY));
    let codec = EventCodec::new(1, dictionary);
    if let RecordBody::Write(parts) = &record.body {
        for part in parts {
            if let Ok(events) = codec.decode_events(part) {
                assert_eq!(events.len(), part.events.count as usize);
                assert!(events
                    .windows(2)
                    .all(|w| w[1].event_seq == w[0].event_seq + 1));
            }
        }
    }
    let _ = derive_update(
        1,
        1,
        &record,
        |_| Ok::<_, ()>(None),
        |_, _| Ok(None),
        |_| (),
    );
}

/// Opening an event index whose run file is arbitrary bytes (the manifest lists it), then
/// looking keys up and scanning. Whatever the input: no panic; an unusable run means a
/// rebuild, never an error or a wrong answer shape.
pub fn fuzz_event_index(data: &[u8]) {
    let backend = MemBackend::new();
    let dir = PathBuf::from("idx");
    if backend.create_dir_all(&dir).is_err() {
        return;
    }
    backend.write_file(&dir.join("run-00000000000000000001.eix"), data);
    let mut manifest = Vec::new();
    manifest.extend_from_slice(b"EDDYEMF\0");
    manifest.extend_from_slice(&1u32.to_le_bytes());
    manifest.extend_from_slice(&1u32.to_le_bytes());
    manifest.extend_from_slice(&7u64.to_le_bytes());
    manifest.extend_from_slice(&2u64.to_le_bytes());
    manifest.extend_from_slice(&1u64.to_le_bytes());
    let crc = crc32c::crc32c(&manifest);
    manifest.extend_from_slice(&crc.to_le_bytes());
    backend.write_file(&dir.join(MANIFEST), &manifest);
    let Ok((index, opened)) = Index::open(
        Arc::new(backend.clone()),
        dir,
        Arc::new(Cache::new(1 << 20)),
        1 << 20,
    ) else {
        return;
    };
    if opened.rebuilt {
        assert_eq!(opened.checkpoint, 0);
        return;
    }
    for key in [
        crate::keys::key_agg(&AggregateKey::new(1, 2, 3)),
        crate::keys::key_org(1),
        crate::keys::key_version(&AggregateKey::new(1, 2, 3), 1),
    ] {
        let _ = index.get(&key);
    }
    if let Ok(entries) = index.scan(&[0], &[0xff], 64) {
        assert!(entries.len() <= 64);
        assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
    }
}

fn sample_events(n: u64, len: usize, encrypted: bool) -> Vec<NewEvent> {
    (0..n)
        .map(|i| NewEvent {
            client_seq: i + 1,
            event_id: (i % 2 == 1).then_some(u128::from(i) << 70),
            event_timestamp: 1_700_000_000_000 + i,
            event_type_major: 1 + i % 3,
            event_type_minor: i % 2,
            value: Bytes::from(
                "{\"type\":\"order\",\"status\":\"created\",\"amount\":1}"
                    .repeat(len / 40 + 1)
                    .into_bytes(),
            ),
            iv: (encrypted && i == 2).then_some([9; 12]),
        })
        .collect()
}

/// Seed inputs for `fuzz/corpus/storage_events_record/`: real encodings of each kind.
pub fn event_record_seeds() -> Vec<(String, Vec<u8>)> {
    let key = AggregateKey::new(11, 22, 33);
    let mut out = Vec::new();
    for (name, mode, dict, len) in [
        ("write-raw", 0u8, None, 10),
        ("write-dict", 4u8, Some(FUZZ_DICTIONARY), 400),
        ("write-plain-zstd", 0u8, None, 400),
    ] {
        let codec = EventCodec::new(3, dict.map(Bytes::from_static));
        let events = sample_events(3, len, len < 100);
        let encoded = codec.encode_events(&events).expect("encodes");
        let body = RecordBody::Write(vec![
            crate::record::WritePart {
                key,
                version: 1,
                first_event_seq: 1,
                recreate: crate::record::Recreate::No,
                events: encoded.clone(),
                elided: None,
            },
            crate::record::WritePart {
                key: AggregateKey::new(11, 22, 35),
                version: 4,
                first_event_seq: 9,
                recreate: crate::record::Recreate::Continue,
                events: encoded,
                elided: None,
            },
        ]);
        let r = EventRecord {
            prev_tip: [1; 32],
            client_id: 5,
            user_id: Some(6),
            body,
            compacted_tip: None,
            raft_index: None,
        };
        let mut bytes = vec![mode];
        bytes.extend_from_slice(&encode_record(&r));
        out.push((name.to_owned(), bytes));
    }
    let others = [
        (1u8, RecordBody::Trim { key, keep_from: 3 }),
        (
            2u8,
            RecordBody::Delete(vec![crate::record::DeletePart {
                key,
                allow_recreate: true,
                allow_sequence_continuation: false,
                version: 7,
            }]),
        ),
        (
            3u8,
            RecordBody::Schema {
                key: SchemaKey {
                    org_id: 11,
                    aggregate_type_id: 22,
                    event_type_major: 1,
                    event_type_minor: 0,
                },
                schema_type: 0,
                schema: Bytes::from_static(b"{\"type\":\"object\"}"),
            },
        ),
    ];
    for (mode, body) in others {
        let r = EventRecord {
            prev_tip: [2; 32],
            client_id: 1,
            user_id: None,
            body,
            compacted_tip: None,
            raft_index: Some(u64::from(mode) << 40 | 7),
        };
        let mut bytes = vec![mode];
        bytes.extend_from_slice(&encode_record(&r));
        out.push((format!("kind-{mode}"), bytes));
    }
    out
}

/// Seed inputs for `fuzz/corpus/storage_events_index/`: run files the index itself wrote.
pub fn event_index_seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, n) in [("run-small", 3u64), ("run-blocks", 120)] {
        let backend = MemBackend::new();
        let (index, _) = Index::open(
            Arc::new(backend.clone()),
            PathBuf::from("idx"),
            Arc::new(Cache::new(1 << 20)),
            1,
        )
        .expect("opens");
        // The fuzz harness lists run id 1: this is the first run the index writes.
        let mut entries: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        for i in 0..n {
            let k = AggregateKey::new(1, 2, u128::from(i));
            entries.insert(crate::keys::key_agg(&k), vec![i as u8; 129]);
            entries.insert(crate::keys::key_version(&k, 1), i.to_le_bytes().to_vec());
            entries.insert(crate::keys::key_org(u128::from(i % 3)), Vec::new());
        }
        index.apply(&entries.into_iter().collect(), 7, false);
        index.flush_all().expect("flushes");
        let bytes = backend
            .read_file(&PathBuf::from("idx/run-00000000000000000001.eix"))
            .expect("the first run");
        out.push((name.to_owned(), bytes));
    }
    out
}

/// The replicated-command decoder on arbitrary bytes (a shard group's entry, from a peer or
/// the group's log). Whatever the input: no panic; a command that decodes re-encodes to the
/// same bytes, and applying it to a fresh two-shard store either works, is refused, or is
/// refused as misrouted (a command decoded from noise names any shard).
pub fn fuzz_event_command(data: &[u8]) {
    use crate::replicated::Command;
    let bytes = Bytes::copy_from_slice(data);
    let Ok(command) = Command::decode(&bytes) else {
        return;
    };
    assert_eq!(command.encode(), bytes, "canonical");
    let config = crate::store::EventStoreConfig {
        num_shards: 2,
        pool_threads: 1,
        ..crate::store::EventStoreConfig::default()
    };
    let backend: Arc<dyn StorageBackend> = Arc::new(MemBackend::new());
    let (store, _) = crate::store::EventStore::open(backend, config).expect("a fresh store opens");
    for shard in 0..2 {
        let _ = store.apply(shard, 1, command.clone()).wait();
    }
}

/// The decoders of a shard snapshot's transfer on arbitrary bytes (a snapshot's bytes, a
/// request for records and its answer, all from a peer; the `shard.installed` file on disk):
/// no panic; what decodes re-encodes to the same bytes. The first byte picks the decoder.
pub fn fuzz_snapshot_transfer(data: &[u8]) {
    use crate::replicated::{
        answer_records_request, decode_installed, decode_records_answer, encode_installed,
        ShardSnapshot,
    };
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 4 {
        3 => {
            if let Some((index, term)) = decode_installed(rest) {
                assert_eq!(&encode_installed(index, term)[..], rest, "canonical");
            }
        }
        0 => {
            if let Some(snapshot) = ShardSnapshot::decode(rest) {
                assert_eq!(&snapshot.encode()[..], rest, "canonical");
            }
        }
        1 => {
            if let Ok(records) = decode_records_answer(Bytes::copy_from_slice(rest)) {
                assert!(records.iter().map(|r| 24 + r.payload.len()).sum::<usize>() < rest.len());
            }
        }
        _ => {
            // A request for records of a fresh store: refused, or an empty answer.
            let config = crate::store::EventStoreConfig {
                num_shards: 2,
                pool_threads: 1,
                ..crate::store::EventStoreConfig::default()
            };
            let backend: Arc<dyn StorageBackend> = Arc::new(MemBackend::new());
            let (store, _) =
                crate::store::EventStore::open(backend, config).expect("a fresh store opens");
            let answer = answer_records_request(&store, rest, 1 << 20);
            if let Ok(records) = decode_records_answer(answer) {
                assert!(records.is_empty());
            }
        }
    }
}

/// Seed inputs for `fuzz/corpus/replication_snapshot/`: a snapshot, an answer with records,
/// a request.
pub fn snapshot_transfer_seeds() -> Vec<(String, Vec<u8>)> {
    use crate::replicated::{
        encode_installed, encode_records_request, ShardPosition, ShardSnapshot,
    };
    let snapshot = ShardSnapshot {
        shard: 3,
        position: ShardPosition {
            next_seq: 77,
            tip: [9; 32],
        },
    };
    let mut answer = vec![1u8, 0];
    for (seq, payload) in [(5u64, &b"first record"[..]), (6, b"second")] {
        answer.extend_from_slice(&seq.to_le_bytes());
        answer.extend_from_slice(&1_700_000u64.to_le_bytes());
        answer.extend_from_slice(&1u32.to_le_bytes());
        answer.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_le_bytes());
        answer.extend_from_slice(payload);
    }
    let with = |which: u8, bytes: &[u8]| {
        let mut v = vec![which];
        v.extend_from_slice(bytes);
        v
    };
    vec![
        ("snapshot".into(), with(0, &snapshot.encode())),
        ("answer".into(), answer),
        (
            "request".into(),
            with(2, &encode_records_request(1, 1, 100)),
        ),
        ("installed".into(), with(3, &encode_installed(46, 3))),
    ]
}

/// Seed inputs for `fuzz/corpus/storage_events_command/`: one command of each kind.
pub fn event_command_seeds() -> Vec<(String, Vec<u8>)> {
    use crate::record::{Compression, EncodedEvents};
    use crate::replicated::Command;
    use crate::types::{
        AggregateDelete, AggregateWrite, DeleteRequest, SchemaRegistration, TrimRequest,
    };
    let key = AggregateKey::new(1, 2, 4);
    let commands = [
        (
            "write",
            Command::Write {
                client_id: 7,
                user_id: Some(8),
                now: 1_000,
                parts: vec![(
                    AggregateWrite {
                        key,
                        events: Vec::new(),
                        allow_create: true,
                        expected_version: Some(0),
                        enforce_client_idempotency: true,
                    },
                    EncodedEvents {
                        count: 1,
                        min_client_seq: 1,
                        max_client_seq: 1,
                        min_event_timestamp: 5,
                        max_event_timestamp: 5,
                        compression: Compression::None,
                        raw_len: 0,
                        stored: Bytes::new(),
                    },
                )],
            },
        ),
        (
            "trim",
            Command::Trim(TrimRequest {
                key,
                keep_from_version: 1,
                client_id: 7,
                user_id: None,
                now: 1_001,
            }),
        ),
        (
            "delete",
            Command::Delete(DeleteRequest {
                client_id: 7,
                user_id: None,
                deletes: vec![AggregateDelete {
                    key,
                    allow_recreate: true,
                    allow_sequence_continuation: false,
                    expected_version: None,
                }],
                now: 1_002,
            }),
        ),
        (
            "schema",
            Command::RegisterSchema(SchemaRegistration {
                key: SchemaKey {
                    org_id: 1,
                    aggregate_type_id: 2,
                    event_type_major: 1,
                    event_type_minor: 0,
                },
                schema_type: 0,
                schema: "{\"type\":\"object\"}".into(),
                client_id: 7,
                user_id: None,
                now: 1_003,
            }),
        ),
    ];
    commands
        .into_iter()
        .map(|(name, c)| (name.to_owned(), c.encode().to_vec()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn corpus() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
    }

    #[test]
    fn replay_event_record_corpus() {
        eddy_log::fuzzing::replay_corpus(
            &corpus(),
            "storage_events_record",
            &event_record_seeds(),
            fuzz_event_record,
        );
    }

    #[test]
    fn replay_event_command_corpus() {
        eddy_log::fuzzing::replay_corpus(
            &corpus(),
            "storage_events_command",
            &event_command_seeds(),
            fuzz_event_command,
        );
    }

    #[test]
    fn replay_snapshot_transfer_corpus() {
        eddy_log::fuzzing::replay_corpus(
            &corpus(),
            "replication_snapshot",
            &snapshot_transfer_seeds(),
            fuzz_snapshot_transfer,
        );
    }

    #[test]
    fn replay_event_index_corpus() {
        eddy_log::fuzzing::replay_corpus(
            &corpus(),
            "storage_events_index",
            &event_index_seeds(),
            fuzz_event_index,
        );
    }

    #[test]
    fn seeds_decode_and_every_prefix_is_refused_cleanly() {
        for (name, bytes) in event_record_seeds() {
            let tag = [TAG_WRITE, TAG_TRIM, TAG_DELETE, TAG_SCHEMA][usize::from(bytes[0] & 3)];
            assert!(
                decode_record(tag, &Bytes::copy_from_slice(&bytes[1..])).is_ok(),
                "{name}"
            );
            for cut in 1..bytes.len() {
                fuzz_event_record(&bytes[..cut]);
            }
        }
        let seeds = event_index_seeds();
        let run = &seeds[1].1;
        for cut in (0..run.len()).step_by(97) {
            fuzz_event_index(&run[..cut]);
        }
        // A whole valid run opens without a rebuild and answers lookups.
        let backend = MemBackend::new();
        let _ = backend.create_dir_all(Path::new("idx"));
        fuzz_event_index(run);
    }
}
