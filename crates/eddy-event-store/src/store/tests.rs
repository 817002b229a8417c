//! Unit tests of the event store's semantics (the model-based proptest and the crash tests
//! live in `tests/events_*.rs`).

use std::sync::Arc;

use bytes::Bytes;

use eddy_log::{Corruption, MemBackend};

use super::*;
use crate::error::EventStoreError;
use crate::fuzzing;
use crate::record::{
    decode_record, encode_record, Compression, EventRecord, RecordBody, Recreate, WritePart,
};
use crate::state::{self, AggState};
use crate::types::*;
use crate::watch::{channel_sink, WatchFilter};

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

fn event_err(r: Result<impl fmt::Debug>) -> Refusal {
    match r {
        Err(EventStoreError::Refused(e)) => e,
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
        Refusal::Trimmed {
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
        Refusal::NotFound { .. }
    ));
    assert_eq!(
        event_err(write(&store, 1, vec![part(K, vec![])])),
        Refusal::EmptyEvents { part: 0 }
    );
    assert_eq!(
        event_err(write(&store, 1, vec![part(K, vec![ev(4, 0, "z")])])),
        Refusal::ZeroEventType {
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
        Refusal::CrossShard { num_shards: 2 }
    ));
    assert!(matches!(
        event_err(write(&store, 1, vec![])),
        Refusal::EmptyRequest
    ));
    assert!(matches!(
        event_err(store.details(&K)),
        Refusal::NotFound { .. }
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
        Refusal::VersionConflict {
            expected: 0,
            current: 1,
            ..
        }
    ));
    p.expected_version = None;
    assert_eq!(
        event_err(write(&store, 1, vec![p.clone()])),
        Refusal::Duplicate {
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
        Refusal::Duplicate {
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
        Refusal::VersionConflict {
            part: 1,
            expected: 7,
            current: 1,
            ..
        }
    ));
    assert!(matches!(
        event_err(store.details(&K2)),
        Refusal::NotFound { .. }
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

/// A guard (no events, an expected version, no create, no idempotency) is decided with the
/// write's appends and writes nothing; a part without events that is not a guard, or a write
/// of guards alone, is refused.
#[test]
fn guards_are_decided_with_the_appends_and_write_nothing() {
    let disk = MemBackend::new();
    let store = open(&disk, cfg());
    let guard = |key, expected| AggregateWrite {
        key,
        events: Vec::new(),
        allow_create: false,
        expected_version: Some(expected),
        enforce_client_idempotency: false,
    };
    // K never existed: a guard of 0 holds, and the append beside it commits alone.
    let ok = write(&store, 1, vec![guard(K, 0), part(K2, vec![ev(1, 1, "x")])]).unwrap();
    assert_eq!(ok.versions, vec![1]);
    assert_eq!(ok.max_aggregate_version(), Some(1));
    assert!(matches!(
        event_err(store.details(&K)),
        Refusal::NotFound { .. }
    ));
    write(&store, 1, vec![part(K, vec![ev(1, 1, "a")])]).unwrap();
    // A stale guard refuses the append beside it.
    let err = event_err(write(
        &store,
        1,
        vec![part(K2, vec![ev(2, 1, "y")]), guard(K, 0)],
    ));
    assert!(matches!(
        err,
        Refusal::VersionConflict {
            part: 1,
            expected: 0,
            current: 1,
            ..
        }
    ));
    assert_eq!(store.details(&K2).unwrap().max_aggregate_version, 1);
    let ok = write(&store, 1, vec![part(K2, vec![ev(2, 1, "y")]), guard(K, 1)]).unwrap();
    assert_eq!(ok.versions, vec![2]);
    assert_eq!(store.details(&K).unwrap().max_aggregate_version, 1);
    // Guards alone, and parts without events that are not guards.
    assert_eq!(
        event_err(write(&store, 1, vec![guard(K, 1)])),
        Refusal::MalformedGuard { part: 0 }
    );
    let mut creating = guard(K, 1);
    creating.allow_create = true;
    assert_eq!(
        event_err(write(
            &store,
            1,
            vec![part(K2, vec![ev(3, 1, "z")]), creating]
        )),
        Refusal::MalformedGuard { part: 1 }
    );
    let mut unpinned = guard(K, 1);
    unpinned.expected_version = None;
    assert_eq!(
        event_err(write(
            &store,
            1,
            vec![part(K2, vec![ev(3, 1, "z")]), unpinned]
        )),
        Refusal::EmptyEvents { part: 1 }
    );
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
        Refusal::TrimOutOfRange {
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
        Refusal::Trimmed { .. }
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
        Refusal::VersionConflict { .. }
    ));
    delete(true, false, Some(5)).unwrap();
    assert!(matches!(
        event_err(delete(true, false, None)),
        Refusal::Deleted { .. }
    ));
    assert!(matches!(
        event_err(store.read(&K, &ReadQuery::from_version(3))),
        Refusal::Deleted { .. }
    ));
    let d = store.details(&K).unwrap();
    assert!(d.is_deleted && d.allow_recreate && !d.allow_sequence_continuation);
    // OCC after delete compares with the version at deletion.
    let mut p = part(K, vec![ev(10, 1, "new")]);
    p.allow_create = false;
    p.expected_version = Some(0);
    assert!(matches!(
        event_err(write(&store, 1, vec![p.clone()])),
        Refusal::VersionConflict { current: 5, .. }
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
        Refusal::Duplicate {
            last_client_seq: 10,
            ..
        }
    ));

    // Delete forbidding recreation; then with continuation.
    delete(false, false, None).unwrap();
    assert!(matches!(
        event_err(write(&store, 1, vec![part(K, vec![ev(11, 1, "x")])])),
        Refusal::RecreateNotAllowed { .. }
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
fn a_new_store_survives_a_crash_after_the_first_ack() {
    let disk = MemBackend::new();
    let store = open(&disk, cfg());
    write(&store, 1, vec![part(K, vec![ev(1, 1, "first")])]).unwrap();
    write(&store, 1, vec![part(K_ODD, vec![ev(1, 1, "odd")])]).unwrap();
    // Power cut right after the acks: the store's directories were all created in this run.
    disk.crash();
    drop(store);
    let (store, recovery) = EventStore::open(Arc::new(disk.clone()), cfg()).unwrap();
    assert!(!recovery.created, "META survived");
    for (key, value) in [(K, "first"), (K_ODD, "odd")] {
        let page = store.read(&key, &ReadQuery::from_version(1)).unwrap();
        assert_eq!(page.batches.len(), 1);
        assert_eq!(page.batches[0].events[0].value, Bytes::from(value));
    }
}

/// Writes one event to `key` and waits at most `deadline` for the answer: `None` when none came
/// (a stalled shard).
fn write_within(
    store: &EventStore,
    key: AggregateKey,
    seq: u64,
    deadline: std::time::Duration,
) -> Option<Result<WriteOutcome>> {
    let value = format!("{seq:>60}");
    store
        .write(WriteRequest {
            client_id: 1,
            user_id: None,
            writes: vec![part(key, vec![ev(seq, 1, &value)])],
            now: 5,
        })
        .wait_timeout(deadline)
        .ok()
}

#[test]
fn a_failing_index_flush_neither_stalls_writes_nor_loses_them_and_they_resume_when_it_clears() {
    use eddy_log::{Errno, FsCall};
    use std::time::{Duration, Instant};
    const PATIENCE: Duration = Duration::from_secs(20);
    for errno in [Errno::Io, Errno::NoSpace] {
        let disk = MemBackend::new();
        let config = EventStoreConfig {
            num_shards: 3,
            pool_threads: 2,
            memtable_bytes: 1024,
            segment_size: 1 << 20,
            ..cfg()
        };
        let store = open(&disk, config.clone());
        let keys: Vec<AggregateKey> = (0..3u128).map(|s| AggregateKey::new(1, 1, s)).collect();
        // Shards 0 and 1 cannot write index runs (nor their manifests): every flush fails.
        disk.inject_faults(move |call, path| {
            let index =
                path.starts_with("events/index-000") || path.starts_with("events/index-001");
            (call == FsCall::Create && index).then(|| errno.error())
        });
        let mut acked: Vec<Vec<String>> = vec![Vec::new(); 3];
        let mut refused = 0;
        let mut seq = 0;
        for round in 0..60 {
            for shard in 0..2 {
                seq += 1;
                let answer = write_within(&store, keys[shard], seq, PATIENCE)
                    .unwrap_or_else(|| panic!("{errno:?}: write {round} to shard {shard} stalled"));
                match answer {
                    Ok(_) => acked[shard].push(format!("{seq:>60}")),
                    Err(EventStoreError::IndexBacklog { shard: s, .. }) => {
                        assert_eq!(s as usize, shard);
                        refused += 1;
                    }
                    Err(e) => panic!("{errno:?}: unexpected {e:?}"),
                }
            }
        }
        assert!(
            refused > 0,
            "{errno:?}: the backlog must refuse writes at some point"
        );
        // The commit pool is not held by the stalled shards: shard 2 writes on.
        seq += 1;
        write_within(&store, keys[2], seq, PATIENCE)
            .expect("shard 2 answers while shards 0 and 1 cannot flush")
            .unwrap();
        acked[2].push(format!("{seq:>60}"));
        // The fault clears: the flusher's retries succeed and both shards take writes again.
        disk.clear_faults();
        for shard in 0..2 {
            let since = Instant::now();
            loop {
                seq += 1;
                match write_within(&store, keys[shard], seq, PATIENCE).expect("no stall") {
                    Ok(_) => {
                        acked[shard].push(format!("{seq:>60}"));
                        break;
                    }
                    Err(EventStoreError::IndexBacklog { .. }) if since.elapsed() < PATIENCE => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => panic!("{errno:?}: writes did not resume: {e:?}"),
                }
            }
        }
        // Nothing acknowledged is lost, crash or not.
        disk.crash();
        drop(store);
        let store = open(&disk, config);
        for (shard, values) in acked.iter().enumerate() {
            let page = store
                .read(&keys[shard], &ReadQuery::from_version(1))
                .unwrap();
            let got: Vec<String> = page
                .batches
                .iter()
                .map(|b| String::from_utf8(b.events[0].value.to_vec()).unwrap())
                .collect();
            assert_eq!(&got, values, "{errno:?}: shard {shard}");
        }
    }
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
        Err(EventStoreError::Refused(Refusal::ImmutableConfig {
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
        Refusal::NoSuchShard {
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
        Refusal::SchemaExists {
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
fn writes_are_validated_against_their_schemas_in_order() {
    let disk = MemBackend::new();
    let store = open(&disk, cfg());
    let schema = |major| SchemaKey {
        org_id: K.org_id,
        aggregate_type_id: K.aggregate_type_id,
        event_type_major: major,
        event_type_minor: 0,
    };
    let unrelated = || WriteRequest {
        client_id: 1,
        user_id: None,
        now: 5,
        writes: vec![part(K, vec![ev(1, 8, "not json")])],
    };
    // Nothing known yet: the first write of a type may have schema work to do, later ones not.
    assert!(store.needs_schema_work(&unrelated()));
    store.write(unrelated()).wait().unwrap();
    assert!(!store.needs_schema_work(&unrelated()));
    store
        .register_schema(SchemaRegistration {
            key: schema(3),
            schema_type: 0,
            schema: r#"{"type":"object","required":["a"]}"#.into(),
            client_id: 1,
            user_id: None,
            now: 6,
        })
        .wait()
        .unwrap();
    // Events are checked in order: the first failing one is named; encrypted ones are not
    // validated; types without a schema pass whatever their payload.
    let mut encrypted = ev(2, 3, "opaque");
    encrypted.iv = Some([7; 12]);
    let refused = event_err(write(
        &store,
        1,
        vec![part(
            K,
            vec![
                encrypted,
                ev(3, 8, "not json"),
                ev(4, 3, r#"{"a":1}"#),
                ev(5, 3, r#"{"b":1}"#),
                ev(6, 3, "not json"),
            ],
        )],
    ));
    assert!(
        matches!(
            &refused,
            Refusal::SchemaValidationFailed {
                event_type_major: 3,
                client_seq: 5,
                validation_error,
                ..
            } if validation_error.contains("required")
        ),
        "{refused:?}"
    );
    write(&store, 1, vec![part(K, vec![ev(7, 3, r#"{"a":2}"#)])]).unwrap();
    // After a restart the stored schema is compiled again on its first use.
    drop(store);
    let store = open(&disk, cfg());
    let probe = WriteRequest {
        client_id: 1,
        user_id: None,
        now: 5,
        writes: vec![part(K, vec![ev(8, 3, "[]")])],
    };
    assert!(store.needs_schema_work(&probe));
    assert!(matches!(
        event_err(store.write(probe).wait()),
        Refusal::SchemaValidationFailed { client_seq: 8, .. }
    ));
    write(&store, 1, vec![part(K, vec![ev(9, 3, r#"{"a":3}"#)])]).unwrap();
    // Avro and Protobuf registrations compile too (their bad texts are 2021).
    for (schema_type, text) in [(1, "{\"type\": 7}"), (2, "not base64!:x.Y")] {
        let refused = event_err(
            store
                .register_schema(SchemaRegistration {
                    key: schema(4),
                    schema_type,
                    schema: text.into(),
                    client_id: 1,
                    user_id: None,
                    now: 7,
                })
                .wait(),
        );
        assert!(
            matches!(refused, Refusal::SchemaInvalid { schema_type: t, .. } if t == schema_type),
            "{refused:?}"
        );
    }
    store
        .register_schema(SchemaRegistration {
            key: schema(4),
            schema_type: 1,
            schema: r#""int""#.into(),
            client_id: 1,
            user_id: None,
            now: 7,
        })
        .wait()
        .unwrap();
    write(&store, 1, vec![part(K, vec![ev(10, 4, "\u{2}")])]).unwrap();
    assert!(matches!(
        event_err(write(&store, 1, vec![part(K, vec![ev(11, 4, "")])])),
        Refusal::SchemaValidationFailed { client_seq: 11, .. }
    ));
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
        Err(EventStoreError::Refused(Refusal::TooManySubscribers {
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
        Err(EventStoreError::Refused(Refusal::DictionaryMismatch))
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
            elided: None,
        }]),
        compacted_tip: None,
        raft_index: None,
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

/// Write `i` of a small stream of one-event writes over ten aggregates.
fn small_write(i: u64) -> WriteRequest {
    WriteRequest {
        client_id: 1,
        user_id: None,
        now: i,
        writes: vec![part(
            AggregateKey::new(1, 1, u128::from(i % 10) * 2),
            vec![ev(i, 1, "v")],
        )],
    }
}

#[test]
fn dropping_without_close_never_hangs_and_loses_nothing_acknowledged() {
    let disk = MemBackend::new();
    let config = EventStoreConfig {
        memtable_bytes: 512, // freezes on almost every commit
        ..cfg()
    };
    let store = open(&disk, config.clone());
    let pending: Vec<_> = (0..300u64).map(|i| store.write(small_write(i))).collect();
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

// ------------------------------------------------------------------------------------------------
// Compaction.

/// Incompressible bytes (so stored sizes are predictable), distinct per `seed`.
fn noise(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'!' + (x % 90) as u8)
        })
        .collect()
}

fn trim_to(store: &EventStore, key: AggregateKey, keep_from: u64) {
    let out = store
        .trim(TrimRequest {
            key,
            keep_from_version: keep_from,
            client_id: 3,
            user_id: None,
            now: 7,
        })
        .wait()
        .unwrap();
    assert!(out.written);
}

fn delete(store: &EventStore, key: AggregateKey, recreate: bool, continuation: bool) {
    store
        .delete(&DeleteRequest {
            client_id: 4,
            user_id: None,
            now: 8,
            deletes: vec![AggregateDelete {
                key,
                allow_recreate: recreate,
                allow_sequence_continuation: continuation,
                expected_version: None,
            }],
        })
        .wait()
        .unwrap();
}

fn shard_log_bytes(disk: &MemBackend, shard: u32) -> u64 {
    let dir = format!("events/shard-{shard:03}");
    disk.file_paths()
        .iter()
        .filter(|p| p.starts_with(&dir) && p.extension().is_some_and(|e| e == "log"))
        .map(|p| disk.read_file(p).map_or(0, |b| b.len() as u64))
        .sum()
}

fn all_batches(store: &EventStore, key: &AggregateKey) -> Result<Vec<EventBatch>> {
    let floor = store.details(key)?.min_aggregate_version;
    let mut q = ReadQuery::from_version(floor);
    let mut out = Vec::new();
    loop {
        let page = store.read(key, &q)?;
        out.extend(page.batches);
        match page.next_version {
            Some(v) => q.from_version = v,
            None => return Ok(out),
        }
    }
}

/// What reads, details and listings answer, for comparing a store before and after.
fn observable(store: &EventStore, keys: &[AggregateKey]) -> Vec<String> {
    let mut out = Vec::new();
    for k in keys {
        out.push(format!("{:?}", store.details(k)));
        out.push(format!(
            "{:?}",
            all_batches(store, k).map_err(|e| e.to_string())
        ));
    }
    for shard in 0..u64::from(store.num_shards()) {
        out.push(format!(
            "{:?}",
            store
                .list_aggregates(shard, None, None, None, 1000)
                .unwrap()
        ));
    }
    out
}

#[test]
fn compacted_records_round_trip_and_every_prefix_is_refused() {
    let codec = EventCodec::new(0, None);
    let live = codec.encode_events(&[ev(1, 1, "kept")]).unwrap();
    let dead = codec
        .encode_events(&[ev(2, 1, &"gone".repeat(50))])
        .unwrap();
    let original = EventRecord {
        prev_tip: [7; 32],
        client_id: 5,
        user_id: None,
        body: RecordBody::Write(vec![
            WritePart {
                key: K,
                version: 4,
                first_event_seq: 9,
                recreate: Recreate::No,
                events: live.clone(),
                elided: None,
            },
            WritePart {
                key: K2,
                version: 1,
                first_event_seq: 1,
                recreate: Recreate::No,
                events: dead.clone(),
                elided: None,
            },
        ]),
        compacted_tip: None,
        raft_index: None,
    };
    let payload = encode_record(&original);
    let tip = record::chain_tip(42, &payload);
    assert_eq!(original.tip_after(42, &payload), tip);
    let mut compacted = original.clone();
    compacted.compacted_tip = Some(tip);
    if let RecordBody::Write(parts) = &mut compacted.body {
        parts[1].elided = Some(dead.stored.len() as u32);
        parts[1].events.stored = Bytes::new();
    }
    let bytes = encode_record(&compacted);
    assert_eq!(bytes.len(), payload.len() + 32 - dead.stored.len());
    assert_eq!(bytes[32], record::RECORD_VERSION_COMPACTED);
    let decoded = decode_record(record::TAG_WRITE, &bytes).unwrap();
    assert_eq!(decoded, compacted);
    // The recorded tip, not a hash of the shorter payload.
    assert_eq!(decoded.tip_after(42, &bytes), tip);
    let RecordBody::Write(parts) = &decoded.body else {
        unreachable!()
    };
    assert_eq!(parts[1].stored_len(), dead.stored.len() as u64);
    assert_eq!(codec.decode_events(&parts[0]).unwrap()[0].value, "kept");
    assert!(codec.decode_events(&parts[1]).is_err());
    // Replaying the compacted record derives what the original derives.
    let derive = |r: &EventRecord| {
        let up = state::derive_update(
            1,
            2,
            r,
            |k| {
                Ok::<_, Corruption>((*k == K).then_some(AggState {
                    version: 3,
                    floor: 1,
                    first_event_seq: 1,
                    max_event_seq: 8,
                    ..AggState::default()
                }))
            },
            |_, _| Ok(None),
            |k| k,
        )
        .unwrap();
        up.changes
    };
    assert_eq!(derive(&decoded), derive(&original));
    for cut in 0..bytes.len() {
        assert!(decode_record(record::TAG_WRITE, &bytes.slice(..cut)).is_err());
    }
    let mut fuzz_input = vec![0u8];
    fuzz_input.extend_from_slice(&bytes);
    fuzzing::fuzz_event_record(&fuzz_input);
    // A compacted record elides something; an elision flag outside one is refused.
    let mut nothing = original.clone();
    nothing.compacted_tip = Some(tip);
    assert!(decode_record(record::TAG_WRITE, &encode_record(&nothing)).is_err());
    let mut flagged = payload.to_vec();
    let code_at = record::RECORD_HEADER_LEN + 4 + 48 + 8 + 8 + 1 + 4 + 32;
    flagged[code_at] |= record::ELIDED_FLAG;
    assert!(decode_record(record::TAG_WRITE, &Bytes::from(flagged)).is_err());
}

fn compaction_cfg() -> EventStoreConfig {
    EventStoreConfig {
        segment_size: 8 * 1024,
        compression_level: 0,
        ..cfg()
    }
}

#[test]
fn compaction_reclaims_trimmed_and_deleted_batches_and_changes_no_answer() {
    let disk = MemBackend::new();
    let store = open(&disk, compaction_cfg());
    let (trimmed, deleted, kept) = (K, K2, AggregateKey::new(1, 4, 8));
    for i in 1..=40u64 {
        for (n, key) in [trimmed, deleted, kept].into_iter().enumerate() {
            let seq = i * 3 + n as u64;
            write(
                &store,
                1,
                vec![AggregateWrite {
                    enforce_client_idempotency: true,
                    ..part(key, vec![ev(seq, 1 + seq % 2, &noise(seq, 300))])
                }],
            )
            .unwrap();
        }
    }
    trim_to(&store, trimmed, 36);
    delete(&store, deleted, false, false);
    // Seal the segments holding the trim and the delete.
    for i in 0..30u64 {
        write(
            &store,
            2,
            vec![part(kept, vec![ev(1000 + i, 1, &noise(i, 300))])],
        )
        .unwrap();
    }
    let keys = [trimmed, deleted, kept];
    let before = observable(&store, &keys);
    let disk_before = shard_log_bytes(&disk, 0);
    let found = store.reclaimable(0).unwrap();
    let dead: u64 = found.iter().map(|s| s.dead_batches).sum();
    assert_eq!(dead, 35 + 40, "{found:?}");
    let reclaimable: u64 = found.iter().map(|s| s.reclaimable).sum();
    // A high bar first: nothing qualifies.
    let none = store
        .compact(CompactionPolicy {
            min_reclaimable_ratio: 1.0,
            ..CompactionPolicy::default()
        })
        .unwrap();
    assert_eq!(none.segments_rewritten, 0);
    assert!(none.segments_scanned > 0);
    assert!(!none.interrupted);
    // A pass told to stop does nothing more and says so; the next pass does the whole job.
    let stopped = store
        .compact_until(
            CompactionPolicy {
                min_reclaimable_ratio: 0.0,
                ..CompactionPolicy::default()
            },
            &std::sync::atomic::AtomicBool::new(true),
        )
        .unwrap();
    assert!(stopped.interrupted, "{stopped:?}");
    assert_eq!(
        (stopped.segments_scanned, stopped.segments_rewritten),
        (0, 0)
    );
    assert_eq!(shard_log_bytes(&disk, 0), disk_before);
    let report = store
        .compact(CompactionPolicy {
            min_reclaimable_ratio: 0.0,
            ..CompactionPolicy::default()
        })
        .unwrap();
    assert_eq!(report.batches_elided, 75, "{report:?}");
    assert_eq!(report.bytes_reclaimed(), reclaimable, "{report:?}");
    assert_eq!(shard_log_bytes(&disk, 0), disk_before - reclaimable);
    assert!(reclaimable > (35 + 40) * 300, "{report:?}");
    assert!(store
        .reclaimable(0)
        .unwrap()
        .iter()
        .all(|s| s.reclaimable == 0));
    assert_eq!(observable(&store, &keys), before);
    assert_eq!(store.verify_chain(0).unwrap(), store.chain_tip(0).unwrap());
    // Nothing died since: the next pass skips the shard's old segments.
    let again = store.compact(CompactionPolicy::default()).unwrap();
    assert_eq!((again.segments_scanned, again.segments_rewritten), (0, 0));
    // Idempotency marks survive in the compacted records.
    let retry = write(
        &store,
        1,
        vec![AggregateWrite {
            enforce_client_idempotency: true,
            ..part(trimmed, vec![ev(3, 1, "again")])
        }],
    );
    assert!(matches!(event_err(retry), Refusal::Duplicate { .. }));
    // Crash, close/reopen, and a rebuild from the log alone: the same answers.
    disk.crash();
    drop(store);
    let store = open(&disk, compaction_cfg());
    assert_eq!(observable(&store, &keys), before);
    store.close().unwrap();
    drop(store);
    for path in disk.file_paths() {
        if path.starts_with("events/index-000") {
            disk.write_file(&path, b"garbage");
        }
    }
    let (store, recovery) = EventStore::open(Arc::new(disk.clone()), compaction_cfg()).unwrap();
    assert_eq!(recovery.rebuilt, vec![0]);
    assert_eq!(observable(&store, &keys), before);
    assert_eq!(store.verify_chain(0).unwrap(), store.chain_tip(0).unwrap());
    assert_eq!(shard_log_bytes(&disk, 0), disk_before - reclaimable);
}

#[test]
fn continued_deletes_keep_their_batches_and_fresh_recreates_free_them() {
    let disk = MemBackend::new();
    let store = open(&disk, compaction_cfg());
    let (continued, fresh, filler) = (K, K2, AggregateKey::new(1, 4, 8));
    for i in 1..=10u64 {
        write(
            &store,
            1,
            vec![part(continued, vec![ev(i, 1, &noise(i, 200))])],
        )
        .unwrap();
        write(
            &store,
            1,
            vec![part(fresh, vec![ev(i, 1, &noise(i + 50, 200))])],
        )
        .unwrap();
    }
    delete(&store, continued, true, true);
    delete(&store, fresh, true, false);
    write(
        &store,
        1,
        vec![part(fresh, vec![ev(100, 1, &noise(100, 200))])],
    )
    .unwrap();
    for i in 0..40u64 {
        write(
            &store,
            2,
            vec![part(filler, vec![ev(i, 1, &noise(i, 300))])],
        )
        .unwrap();
    }
    let report = store
        .compact(CompactionPolicy {
            min_reclaimable_ratio: 0.0,
            ..CompactionPolicy::default()
        })
        .unwrap();
    // The fresh incarnation's predecessor is gone; the continued aggregate's history is not.
    assert_eq!(report.batches_elided, 10, "{report:?}");
    let recreated = write(&store, 1, vec![part(continued, vec![ev(11, 1, "back")])]).unwrap();
    assert_eq!(recreated.versions, vec![11]);
    let batches = all_batches(&store, &continued).unwrap();
    assert_eq!(batches.len(), 11);
    assert_eq!(batches[0].events[0].value, Bytes::from(noise(1, 200)));
    let fresh_batches = all_batches(&store, &fresh).unwrap();
    assert_eq!(fresh_batches.len(), 1);
    assert_eq!(
        fresh_batches[0].events[0].value,
        Bytes::from(noise(100, 200))
    );
    assert_eq!(store.verify_chain(0).unwrap(), store.chain_tip(0).unwrap());
}

#[test]
fn invalid_compaction_ratios_are_refused() {
    let disk = MemBackend::new();
    let store = open(&disk, cfg());
    for ratio in [-0.1, 1.5, f64::NAN] {
        assert!(matches!(
            store.compact(CompactionPolicy {
                min_reclaimable_ratio: ratio,
                ..CompactionPolicy::default()
            }),
            Err(EventStoreError::InvalidConfig { .. })
        ));
    }
}

/// A store whose writes complete before their fdatasync (a cluster member's) syncs its shard
/// log through an index checkpoint before recording it: a power cut then never leaves the
/// index ahead of the log, and the next open replays instead of rebuilding the index.
#[test]
fn an_index_checkpoint_never_outruns_a_shard_log_that_syncs_in_the_background() {
    let disk = MemBackend::new();
    let config = EventStoreConfig {
        memtable_bytes: 512, // freezes on almost every commit
        durability: eddy_log::Durability::Background {
            max_unsynced_records: u64::MAX,
            max_unsynced_bytes: u64::MAX,
        },
        ..cfg()
    };
    let store = open(&disk, config.clone());
    for i in 0..300u64 {
        store.write(small_write(i)).wait().unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let checkpoint = loop {
        let checkpoint = store.stats().indexes[0].checkpoint;
        if checkpoint > 0 || std::time::Instant::now() > deadline {
            break checkpoint;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert!(checkpoint > 0, "the flusher wrote no run");
    disk.crash();
    drop(store);
    let (store, recovery) = EventStore::open(Arc::new(disk.clone()), config).unwrap();
    assert!(recovery.rebuilt.is_empty(), "{recovery:?}");
    assert!(store.stats().indexes[0].checkpoint >= checkpoint);
}

#[test]
fn without_index_threads_the_owner_writes_the_index_and_a_crash_keeps_every_write() {
    let disk = MemBackend::new();
    let config = EventStoreConfig {
        memtable_bytes: 512, // freezes on almost every commit
        index_threads: false,
        ..cfg()
    };
    let index_files = || {
        disk.file_paths()
            .iter()
            .filter(|p| p.starts_with("events/index-000"))
            .count()
    };
    let store = open(&disk, config.clone());
    let before = index_files();
    for i in 1..=100u64 {
        write(&store, 1, vec![part(K, vec![ev(i, 1, &format!("v{i}"))])]).unwrap();
    }
    // Nothing wrote the index meanwhile: no thread does, and writers did not wait for one.
    assert_eq!(index_files(), before);
    assert!(store.run_index_work() > 0);
    assert!(index_files() > before);
    assert_eq!(store.run_index_work(), 0, "nothing queued any more");
    for i in 101..=120u64 {
        write(&store, 1, vec![part(K, vec![ev(i, 1, &format!("v{i}"))])]).unwrap();
    }
    disk.crash();
    drop(store);
    let store = open(&disk, config);
    let page = store.read(&K, &ReadQuery::from_version(1)).unwrap();
    let got: Vec<String> = page
        .batches
        .iter()
        .map(|b| String::from_utf8(b.events[0].value.to_vec()).unwrap())
        .collect();
    let want: Vec<String> = (1..=120).map(|i| format!("v{i}")).collect();
    assert_eq!(got, want);
}
