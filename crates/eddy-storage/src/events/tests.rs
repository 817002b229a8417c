//! Unit tests of the event store's semantics (the model-based proptest and the crash tests
//! live in `tests/events_*.rs`).

use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::file::MemBackend;

fn cfg() -> EventStoreConfig {
    EventStoreConfig {
        num_shards: 2,
        pool_threads: 1,
        segment_size: 4096,
        index_interval: 256,
        memtable_bytes: 4096,
        ..EventStoreConfig::default()
    }
}

fn open(disk: &MemBackend, config: EventStoreConfig) -> EventStore {
    EventStore::open(Arc::new(disk.clone()), config).unwrap().0
}

fn ev(client_seq: u64, ty: u64, value: &str) -> NewEvent {
    NewEvent {
        client_seq,
        event_id: Some(u128::from(client_seq) << 64),
        event_timestamp: 1000 + client_seq,
        event_type_major: ty,
        event_type_minor: 0,
        value: Bytes::copy_from_slice(value.as_bytes()),
        iv: None,
    }
}

fn part(key: AggregateKey, events: Vec<NewEvent>) -> AggregateWrite {
    AggregateWrite {
        key,
        events,
        allow_create: true,
        expected_version: None,
        enforce_client_idempotency: false,
    }
}

fn write(store: &EventStore, client_id: u128, parts: Vec<AggregateWrite>) -> Result<WriteOutcome> {
    store
        .write(WriteRequest {
            client_id,
            user_id: Some(9),
            writes: parts,
            now: 5,
        })
        .wait()
}

fn event_err(r: Result<impl fmt::Debug>) -> EventError {
    match r {
        Err(StorageError::Event(e)) => e,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

const K: AggregateKey = AggregateKey::new(1, 2, 4); // shard 0 of 2
const K2: AggregateKey = AggregateKey::new(1, 3, 6); // shard 0 of 2
const K_ODD: AggregateKey = AggregateKey::new(1, 2, 5); // shard 1 of 2

#[test]
fn versions_event_seqs_and_reads() {
    let disk = MemBackend::new();
    let store = open(&disk, cfg());
    let a = write(&store, 1, vec![part(K, vec![ev(1, 1, "a"), ev(2, 2, "b")])]).unwrap();
    assert_eq!(a.versions, vec![1]);
    let b = write(&store, 1, vec![part(K, vec![ev(3, 1, "c")])]).unwrap();
    assert_eq!(b.max_aggregate_version(), Some(2));
    let page = store.read(&K, &ReadQuery::from_version(1)).unwrap();
    assert_eq!(page.next_version, None);
    let seqs: Vec<u64> = page
        .batches
        .iter()
        .flat_map(|b| b.events.iter().map(|e| e.event_seq))
        .collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(page.batches[0].user_id, Some(9));
    assert_eq!(page.batches[0].events[1].value, Bytes::from_static(b"b"));
    assert_eq!(page.batches[0].events[0].event_id, Some(1 << 64));
    // Event type filter drops the batch with no matching event.
    let q = ReadQuery {
        include_event_types: Some(vec![2]),
        ..ReadQuery::from_version(1)
    };
    let page = store.read(&K, &q).unwrap();
    assert_eq!(page.batches.len(), 1);
    assert_eq!(page.batches[0].events.len(), 1);
    // Paging by batch count.
    let q = ReadQuery {
        max_batches: 1,
        ..ReadQuery::from_version(1)
    };
    let page = store.read(&K, &q).unwrap();
    assert_eq!((page.batches.len(), page.next_version), (1, Some(2)));
    // Beyond the current version: empty, no continuation; below the floor: refused.
    let page = store.read(&K, &ReadQuery::from_version(9)).unwrap();
    assert!(page.batches.is_empty() && page.next_version.is_none());
    assert_eq!(
        event_err(store.read(&K, &ReadQuery::from_version(0))),
        EventError::Trimmed {
            requested: 0,
            minimum_available: 1
        }
    );
    let d = store.details(&K).unwrap();
    assert_eq!(
        (
            d.min_aggregate_version,
            d.max_aggregate_version,
            d.max_event_seq
        ),
        (1, 2, 3)
    );
    assert_eq!(
        (d.last_client_id, d.last_user_id, d.last_server_timestamp),
        (1, Some(9), 5)
    );
}

#[test]
fn refusals_write_nothing() {
    let disk = MemBackend::new();
    let store = open(&disk, cfg());
    let mut p = part(K, vec![ev(1, 1, "a")]);
    p.allow_create = false;
    assert!(matches!(
        event_err(write(&store, 1, vec![p])),
        EventError::NotFound { .. }
    ));
    assert_eq!(
        event_err(write(&store, 1, vec![part(K, vec![])])),
        EventError::EmptyEvents { part: 0 }
    );
    assert_eq!(
        event_err(write(&store, 1, vec![part(K, vec![ev(4, 0, "z")])])),
        EventError::ZeroEventType {
            part: 0,
            client_seq: 4
        }
    );
    assert!(matches!(
        event_err(write(
            &store,
            1,
            vec![
                part(K, vec![ev(1, 1, "a")]),
                part(K_ODD, vec![ev(1, 1, "a")])
            ]
        )),
        EventError::CrossShard { num_shards: 2 }
    ));
    assert!(matches!(
        event_err(write(&store, 1, vec![])),
        EventError::EmptyRequest
    ));
    assert!(matches!(
        event_err(store.details(&K)),
        EventError::NotFound { .. }
    ));
    assert_eq!(store.stats().commit.records, 0);
}

#[test]
fn occ_before_idempotency_and_duplicates() {
    let disk = MemBackend::new();
    let store = open(&disk, cfg());
    let mut p = part(K, vec![ev(5, 1, "a")]);
    p.expected_version = Some(0);
    p.enforce_client_idempotency = true;
    write(&store, 1, vec![p.clone()]).unwrap();
    // Same write again: OCC fires first.
    assert!(matches!(
        event_err(write(&store, 1, vec![p.clone()])),
        EventError::VersionConflict {
            expected: 0,
            current: 1,
            ..
        }
    ));
    p.expected_version = None;
    assert_eq!(
        event_err(write(&store, 1, vec![p.clone()])),
        EventError::Duplicate {
            part: 0,
            key: K,
            last_client_seq: 5,
            attempted_client_seq: 5,
            committed_version: 1
        }
    );
    // Another client is not affected; the unenforced write still records a mark.
    write(&store, 2, vec![part(K, vec![ev(5, 1, "b")])]).unwrap();
    p.events = vec![ev(6, 1, "c")];
    assert_eq!(write(&store, 1, vec![p]).unwrap().versions, vec![3]);
    let mut q = part(K, vec![ev(5, 1, "d")]);
    q.enforce_client_idempotency = true;
    assert!(matches!(
        event_err(write(&store, 2, vec![q])),
        EventError::Duplicate {
            last_client_seq: 5,
            ..
        }
    ));
}

#[test]
fn multi_aggregate_writes_are_atomic() {
    let disk = MemBackend::new();
    let store = open(&disk, cfg());
    write(&store, 1, vec![part(K, vec![ev(1, 1, "a")])]).unwrap();
    let mut bad = part(K, vec![ev(2, 1, "b")]);
    bad.expected_version = Some(7);
    let err = event_err(write(&store, 1, vec![part(K2, vec![ev(1, 1, "x")]), bad]));
    assert!(matches!(
        err,
        EventError::VersionConflict {
            part: 1,
            expected: 7,
            current: 1,
            ..
        }
    ));
    assert!(matches!(
        event_err(store.details(&K2)),
        EventError::NotFound { .. }
    ));
    let ok = write(
        &store,
        1,
        vec![part(K2, vec![ev(1, 1, "x")]), part(K, vec![ev(2, 1, "b")])],
    )
    .unwrap();
    assert_eq!(ok.versions, vec![1, 2]);
    assert_eq!(ok.max_aggregate_version(), None);
}

#[test]
fn trim_delete_and_recreate() {
    let disk = MemBackend::new();
    let store = open(&disk, cfg());
    for i in 1..=5 {
        write(&store, 1, vec![part(K, vec![ev(i, 1, "v")])]).unwrap();
    }
    let trim = |k: u64| {
        store
            .trim(TrimRequest {
                key: K,
                keep_from_version: k,
                client_id: 3,
                user_id: None,
                now: 6,
            })
            .wait()
    };
    assert_eq!(
        trim(3).unwrap(),
        TrimOutcome {
            written: true,
            floor: 3
        }
    );
    assert_eq!(
        trim(2).unwrap(),
        TrimOutcome {
            written: false,
            floor: 3
        }
    );
    assert_eq!(
        event_err(trim(6)),
        EventError::TrimOutOfRange {
            requested: 6,
            max_aggregate_version: 5
        }
    );
    let d = store.details(&K).unwrap();
    assert_eq!(
        (
            d.min_aggregate_version,
            d.max_aggregate_version,
            d.last_client_id
        ),
        (3, 5, 3)
    );
    assert!(matches!(
        event_err(store.read(&K, &ReadQuery::from_version(2))),
        EventError::Trimmed { .. }
    ));
    assert_eq!(
        store
            .read(&K, &ReadQuery::from_version(3))
            .unwrap()
            .batches
            .len(),
        3
    );

    let delete = |allow_recreate, cont, expected| {
        store
            .delete(&DeleteRequest {
                client_id: 4,
                user_id: None,
                deletes: vec![AggregateDelete {
                    key: K,
                    allow_recreate,
                    allow_sequence_continuation: cont,
                    expected_version: expected,
                }],
                now: 7,
            })
            .wait()
    };
    assert!(matches!(
        event_err(delete(true, false, Some(4))),
        EventError::VersionConflict { .. }
    ));
    delete(true, false, Some(5)).unwrap();
    assert!(matches!(
        event_err(delete(true, false, None)),
        EventError::Deleted { .. }
    ));
    assert!(matches!(
        event_err(store.read(&K, &ReadQuery::from_version(3))),
        EventError::Deleted { .. }
    ));
    let d = store.details(&K).unwrap();
    assert!(d.is_deleted && d.allow_recreate && !d.allow_sequence_continuation);
    // OCC after delete compares with the version at deletion.
    let mut p = part(K, vec![ev(10, 1, "new")]);
    p.allow_create = false;
    p.expected_version = Some(0);
    assert!(matches!(
        event_err(write(&store, 1, vec![p.clone()])),
        EventError::VersionConflict { current: 5, .. }
    ));
    p.expected_version = Some(5);
    assert_eq!(write(&store, 1, vec![p]).unwrap().versions, vec![1]);
    let page = store.read(&K, &ReadQuery::from_version(1)).unwrap();
    assert_eq!(page.batches.len(), 1);
    assert_eq!(page.batches[0].events[0].event_seq, 1);
    // Marks survive the delete.
    let mut dup = part(K, vec![ev(4, 1, "old")]);
    dup.enforce_client_idempotency = true;
    assert!(matches!(
        event_err(write(&store, 1, vec![dup])),
        EventError::Duplicate {
            last_client_seq: 10,
            ..
        }
    ));

    // Delete forbidding recreation; then with continuation.
    delete(false, false, None).unwrap();
    assert!(matches!(
        event_err(write(&store, 1, vec![part(K, vec![ev(11, 1, "x")])])),
        EventError::RecreateNotAllowed { .. }
    ));
    write(
        &store,
        1,
        vec![part(K2, vec![ev(1, 1, "a"), ev(2, 1, "b")])],
    )
    .unwrap();
    write(&store, 1, vec![part(K2, vec![ev(3, 1, "c")])]).unwrap();
    store
        .delete(&DeleteRequest {
            client_id: 4,
            user_id: None,
            deletes: vec![AggregateDelete {
                key: K2,
                allow_recreate: true,
                allow_sequence_continuation: true,
                expected_version: None,
            }],
            now: 8,
        })
        .wait()
        .unwrap();
    assert_eq!(
        write(&store, 1, vec![part(K2, vec![ev(4, 1, "d")])])
            .unwrap()
            .versions,
        vec![3]
    );
    let page = store.read(&K2, &ReadQuery::from_version(1)).unwrap();
    let seqs: Vec<u64> = page
        .batches
        .iter()
        .flat_map(|b| b.events.iter().map(|e| e.event_seq))
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
}

#[test]
fn crash_and_reopen_keeps_acknowledged_state_and_rebuilds_indexes() {
    let disk = MemBackend::new();
    let store = open(&disk, cfg());
    for i in 1..=200u64 {
        let key = AggregateKey::new(1, 1, u128::from(i % 17) * 2);
        write(
            &store,
            1,
            vec![part(
                key,
                vec![ev(i, 1 + i % 3, &"p".repeat(i as usize % 300))],
            )],
        )
        .unwrap();
    }
    let tip = store.verify_chain(0).unwrap();
    assert_eq!(tip, store.chain_tip(0).unwrap());
    let expected: Vec<_> = (0..17u128)
        .map(|i| {
            store
                .read(&AggregateKey::new(1, 1, i * 2), &ReadQuery::from_version(1))
                .unwrap()
        })
        .collect();
    disk.crash();
    drop(store);
    let (store, recovery) = EventStore::open(Arc::new(disk.clone()), cfg()).unwrap();
    assert!(!recovery.created);
    for i in 0..17u128 {
        let got = store
            .read(&AggregateKey::new(1, 1, i * 2), &ReadQuery::from_version(1))
            .unwrap();
        assert_eq!(got, expected[i as usize]);
    }
    assert_eq!(store.chain_tip(0).unwrap(), tip);
    drop(store);
    // Wipe the index entirely: it is rebuilt from the log.
    for path in disk.file_paths() {
        if path.starts_with("events/index-000") {
            disk.write_file(&path, b"garbage");
        }
    }
    let (store, recovery) = EventStore::open(Arc::new(disk.clone()), cfg()).unwrap();
    assert_eq!(recovery.rebuilt, vec![0]);
    for i in 0..17u128 {
        let got = store
            .read(&AggregateKey::new(1, 1, i * 2), &ReadQuery::from_version(1))
            .unwrap();
        assert_eq!(got, expected[i as usize]);
    }
    drop(store);
    let bad = EventStoreConfig {
        num_shards: 3,
        ..cfg()
    };
    assert!(matches!(
        EventStore::open(Arc::new(disk.clone()), bad).map(|_| ()),
        Err(StorageError::Event(EventError::ImmutableConfig {
            field: "num_shards",
            stored: 2,
            requested: 3
        }))
    ));
}

#[test]
fn listings_page_with_stable_cursors() {
    let disk = MemBackend::new();
    let store = open(&disk, cfg());
    let mut keys = Vec::new();
    for org in 1..=3u128 {
        for ty in 1..=2u128 {
            for id in 0..10u128 {
                let key = AggregateKey::new(org, ty, id * 2);
                keys.push(key);
                write(&store, 1, vec![part(key, vec![ev(1, 1, "x")])]).unwrap();
            }
        }
    }
    store
        .delete(&DeleteRequest {
            client_id: 1,
            user_id: None,
            deletes: vec![AggregateDelete {
                key: keys[0],
                ..AggregateDelete::default()
            }],
            now: 9,
        })
        .wait()
        .unwrap();
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = store.list_aggregates(0, None, None, cursor, 7).unwrap();
        pages += 1;
        seen.extend(page.items);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
        assert!(pages < 100, "cursor loop");
    }
    let mut got: Vec<AggregateKey> = seen.iter().map(|i| i.key).collect();
    got.sort();
    got.dedup();
    keys.sort();
    assert_eq!(got, keys);
    let deleted = seen.iter().find(|i| i.key == keys[0]).unwrap();
    assert!(deleted.is_deleted);
    let item = seen.iter().find(|i| i.key == keys[1]).unwrap();
    assert_eq!(
        (
            item.event_batch_count,
            item.max_aggregate_version,
            item.uncompressed_size
        ),
        (1, 1, 67)
    );
    let orgs = store.list_orgs(0, None, 100).unwrap();
    let mut orgs = orgs.items;
    orgs.sort_unstable();
    assert_eq!(orgs, [1, 2, 3]);
    let types = store.list_aggregate_types(0, Some(2), None, 100).unwrap();
    assert_eq!(types.items.len(), 2);
    assert!(matches!(
        event_err(store.list_orgs(2, None, 10)),
        EventError::NoSuchShard {
            shard: 2,
            num_shards: 2
        }
    ));
    let only = store
        .list_aggregates(0, Some(3), Some(1), None, 1000)
        .unwrap();
    assert_eq!(only.items.len(), 10);
    assert_eq!(
        store.list_orgs(1, None, 10).unwrap(),
        ListPage {
            items: vec![],
            next_cursor: None
        }
    );
}

#[test]
fn schemas_are_durable_and_immutable() {
    let disk = MemBackend::new();
    let store = open(&disk, cfg());
    let key = SchemaKey {
        org_id: 1,
        aggregate_type_id: 2,
        event_type_major: 3,
        event_type_minor: 0,
    };
    let reg = SchemaRegistration {
        key,
        schema_type: 0,
        schema: "{\"type\":\"object\"}".into(),
        client_id: 1,
        user_id: None,
        now: 42,
    };
    store.register_schema(reg.clone()).wait().unwrap();
    assert!(matches!(
        event_err(store.register_schema(reg).wait()),
        EventError::SchemaExists {
            event_type_major: 3,
            ..
        }
    ));
    disk.crash();
    drop(store);
    let store = open(&disk, cfg());
    let s = store.schema(&key).unwrap().unwrap();
    assert_eq!(
        (s.schema_type, s.schema.as_str(), s.registered_at),
        (0, "{\"type\":\"object\"}", 42)
    );
    assert!(store
        .schema(&SchemaKey {
            event_type_minor: 1,
            ..key
        })
        .unwrap()
        .is_none());
}

#[test]
fn watch_delivers_after_commit_in_order_and_caps_subscribers() {
    let disk = MemBackend::new();
    let config = EventStoreConfig {
        max_subscribers_per_shard: 1,
        ..cfg()
    };
    let store = open(&disk, config);
    let (sink, rx) = channel_sink(64);
    let sub = store.subscribe(0, WatchFilter::default(), sink).unwrap();
    let (other, _rx2) = channel_sink(1);
    assert!(matches!(
        store
            .subscribe(0, WatchFilter::default(), other)
            .map(|_| ()),
        Err(StorageError::Event(EventError::TooManySubscribers {
            active: 1,
            max: 1
        }))
    ));
    write(&store, 1, vec![part(K, vec![ev(1, 1, "a")])]).unwrap();
    write(&store, 1, vec![part(K, vec![ev(2, 1, "a")])]).unwrap();
    store
        .trim(TrimRequest {
            key: K,
            keep_from_version: 2,
            ..TrimRequest::default()
        })
        .wait()
        .unwrap();
    let got: Vec<WatchEvent> = rx.try_iter().flatten().collect();
    let ops: Vec<(WatchOperation, Option<u64>, Option<u64>)> = got
        .iter()
        .map(|e| (e.operation, e.to_version, e.keep_from_version))
        .collect();
    assert_eq!(
        ops,
        [
            (WatchOperation::Create, None, None),
            (WatchOperation::Write, Some(1), None),
            (WatchOperation::Write, Some(2), None),
            (WatchOperation::TrimStart, None, Some(2)),
        ]
    );
    assert!(store.unsubscribe(sub));
    assert!(!store.unsubscribe(sub));
}

#[test]
fn compression_with_a_dictionary_round_trips_and_is_pinned() {
    let disk = MemBackend::new();
    let dict = Bytes::from(
        "{\"type\":\"order\",\"status\":\"created\",\"amount\":"
            .repeat(40)
            .into_bytes(),
    );
    let config = EventStoreConfig {
        dictionary: Some(dict.clone()),
        ..cfg()
    };
    let store = open(&disk, config.clone());
    let body = "{\"type\":\"order\",\"status\":\"created\",\"amount\":12}".repeat(20);
    write(&store, 1, vec![part(K, vec![ev(1, 1, &body)])]).unwrap();
    let item = store
        .list_aggregates(0, None, None, None, 10)
        .unwrap()
        .items[0];
    assert!(
        item.compressed_size < item.uncompressed_size / 4,
        "{item:?}"
    );
    let page = store.read(&K, &ReadQuery::from_version(1)).unwrap();
    assert_eq!(page.batches[0].events[0].value, Bytes::from(body.clone()));
    // Encrypted payloads are never compressed.
    let mut secret = ev(2, 1, &body);
    secret.iv = Some([7; 12]);
    write(&store, 1, vec![part(K2, vec![secret.clone()])]).unwrap();
    let page = store.read(&K2, &ReadQuery::from_version(1)).unwrap();
    assert_eq!(page.batches[0].events[0].iv, Some([7; 12]));
    drop(store);
    let other = EventStoreConfig {
        dictionary: Some(Bytes::from_static(b"another dictionary")),
        ..cfg()
    };
    assert!(matches!(
        EventStore::open(Arc::new(disk.clone()), other).map(|_| ()),
        Err(StorageError::Event(EventError::DictionaryMismatch))
    ));
    let store = open(&disk, config);
    let page = store.read(&K, &ReadQuery::from_version(1)).unwrap();
    assert_eq!(page.batches[0].events[0].value, Bytes::from(body));
}

#[test]
fn record_codec_round_trips_and_rejects_every_prefix() {
    let codec = EventCodec::new(3, None);
    let events = vec![ev(1, 1, &"x".repeat(400)), ev(2, 2, "y")];
    let encoded = codec.encode_events(&events).unwrap();
    assert_eq!(encoded.compression, Compression::Zstd);
    let record = EventRecord {
        prev_tip: [3; 32],
        client_id: 5,
        user_id: Some(6),
        body: RecordBody::Write(vec![WritePart {
            key: K,
            version: 2,
            first_event_seq: 3,
            recreate: Recreate::No,
            events: encoded,
        }]),
    };
    let bytes = encode_record(&record);
    let decoded = decode_record(record::TAG_WRITE, &bytes).unwrap();
    assert_eq!(decoded, record);
    let RecordBody::Write(parts) = &decoded.body else {
        unreachable!()
    };
    let stored = codec.decode_events(&parts[0]).unwrap();
    assert_eq!(stored[1].event_seq, 4);
    assert_eq!(stored[0].value.len(), 400);
    for cut in 0..bytes.len() {
        assert!(decode_record(record::TAG_WRITE, &bytes.slice(..cut)).is_err());
    }
    assert!(decode_record(record::TAG_TRIM, &bytes).is_err());
}

#[test]
fn dropping_without_close_never_hangs_and_loses_nothing_acknowledged() {
    let disk = MemBackend::new();
    let config = EventStoreConfig {
        memtable_bytes: 512, // freezes on almost every commit
        ..cfg()
    };
    let store = open(&disk, config.clone());
    let pending: Vec<_> = (0..300u64)
        .map(|i| {
            store.write(WriteRequest {
                client_id: 1,
                user_id: None,
                now: i,
                writes: vec![part(
                    AggregateKey::new(1, 1, u128::from(i % 10) * 2),
                    vec![ev(i, 1, "v")],
                )],
            })
        })
        .collect();
    drop(store); // no close: the flusher stops while commits may still be finishing
    let acked = pending.into_iter().filter_map(|c| c.wait().ok()).count() as u64;
    let store = open(&disk, config);
    let total: u64 = (0..10u128)
        .map(|i| {
            store
                .details(&AggregateKey::new(1, 1, i * 2))
                .map_or(0, |d| d.max_aggregate_version)
        })
        .sum();
    assert!(total >= acked, "{total} stored < {acked} acknowledged");
}
