//! History checks with concurrent writers (on the real file backend, so group commits really
//! batch): exactly one winner per version under OCC, and idempotent retries that race with
//! their original are never written twice.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Barrier};

use bytes::Bytes;
use eddy_event_store::{
    AggregateKey, AggregateWrite, EventStore, EventStoreConfig, EventStoreError, NewEvent,
    ReadQuery, Refusal, WriteRequest,
};
use eddy_log::FsBackend;

const THREADS: u64 = 8;
const ATTEMPTS: u64 = 60;
const CLIENTS: u64 = 4;
const SEQS: u64 = 80;

fn open(dir: &std::path::Path) -> EventStore {
    let config = EventStoreConfig {
        num_shards: 2,
        pool_threads: 2,
        memtable_bytes: 16 * 1024,
        ..EventStoreConfig::default()
    };
    EventStore::open(Arc::new(FsBackend::new(dir).unwrap()), config)
        .unwrap()
        .0
}

fn event(client_seq: u64, value: Vec<u8>) -> NewEvent {
    NewEvent {
        client_seq,
        event_type_major: 1,
        value: Bytes::from(value),
        ..NewEvent::default()
    }
}

fn read_all(store: &EventStore, key: &AggregateKey) -> Vec<eddy_event_store::EventBatch> {
    let mut out = Vec::new();
    let mut q = ReadQuery {
        max_batches: 17,
        ..ReadQuery::from_version(1)
    };
    loop {
        let page = store.read(key, &q).unwrap();
        out.extend(page.batches);
        match page.next_version {
            Some(n) => q.from_version = n,
            None => return out,
        }
    }
}

#[test]
fn occ_has_exactly_one_winner_per_version() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()));
    let key = AggregateKey::new(1, 1, 1);
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = Arc::clone(&store);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let mut wins = Vec::new();
                let mut conflicts = 0;
                for attempt in 0..ATTEMPTS {
                    let current = store.details(&key).map_or(0, |d| d.max_aggregate_version);
                    let payload = format!("{t}:{attempt}").into_bytes();
                    let result = store
                        .write(WriteRequest {
                            client_id: u128::from(t),
                            user_id: None,
                            now: 0,
                            writes: vec![AggregateWrite {
                                key,
                                events: vec![event(attempt, payload.clone())],
                                allow_create: true,
                                expected_version: Some(current),
                                enforce_client_idempotency: false,
                            }],
                        })
                        .wait();
                    match result {
                        Ok(done) => {
                            assert_eq!(done.versions, vec![current + 1]);
                            wins.push((current + 1, payload));
                        }
                        Err(EventStoreError::Refused(Refusal::VersionConflict {
                            expected,
                            current: now,
                            ..
                        })) => {
                            assert_eq!(expected, current);
                            assert!(now > current, "a conflict means someone else won");
                            conflicts += 1;
                        }
                        Err(e) => panic!("unexpected {e:?}"),
                    }
                }
                (wins, conflicts)
            })
        })
        .collect();
    let mut winners: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut conflicts = 0;
    for h in handles {
        let (wins, c) = h.join().unwrap();
        conflicts += c;
        for (version, payload) in wins {
            assert!(
                winners.insert(version, payload).is_none(),
                "two winners for version {version}"
            );
        }
    }
    let batches = read_all(&store, &key);
    let stored: BTreeMap<u64, Vec<u8>> = batches
        .iter()
        .map(|b| (b.version, b.events[0].value.to_vec()))
        .collect();
    assert_eq!(stored, winners, "the read history is exactly the winners");
    let n = winners.len() as u64;
    assert_eq!(
        winners.keys().copied().collect::<Vec<_>>(),
        (1..=n).collect::<Vec<_>>()
    );
    assert_eq!(n + conflicts, THREADS * ATTEMPTS);
    let stats = store.stats();
    eprintln!(
        "occ history: {n} winners, {conflicts} conflicts, {:.1} records per fsync",
        stats.commit.records_per_fsync()
    );
}

#[test]
fn racing_idempotent_retries_never_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()));
    let key = AggregateKey::new(2, 2, 2);
    let handles: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut committed = Vec::new();
                for seq in 1..=SEQS {
                    let request = WriteRequest {
                        client_id: u128::from(c),
                        user_id: None,
                        now: 0,
                        writes: vec![AggregateWrite {
                            key,
                            events: vec![event(seq, format!("{c}/{seq}").into_bytes())],
                            allow_create: true,
                            expected_version: None,
                            enforce_client_idempotency: true,
                        }],
                    };
                    // The original and its "retry" race; then retry until a definite answer.
                    let first = store.write(request.clone());
                    let second = store.write(request.clone());
                    let mut oks = 0;
                    let mut definite = false;
                    for r in [first.wait(), second.wait()] {
                        match r {
                            Ok(_) => {
                                oks += 1;
                                definite = true;
                            }
                            Err(EventStoreError::Refused(Refusal::Duplicate {
                                last_client_seq,
                                ..
                            })) => {
                                assert!(last_client_seq >= seq);
                                definite = true;
                            }
                            Err(EventStoreError::Refused(Refusal::InFlightDuplicate {
                                ..
                            })) => {}
                            Err(e) => panic!("unexpected {e:?}"),
                        }
                    }
                    assert!(oks <= 1, "a retry was written twice");
                    while !definite {
                        match store.write(request.clone()).wait() {
                            Err(EventStoreError::Refused(Refusal::Duplicate { .. })) => {
                                definite = true;
                            }
                            Err(EventStoreError::Refused(Refusal::InFlightDuplicate {
                                ..
                            })) => {}
                            other => {
                                panic!("after an in-flight answer the write landed once: {other:?}")
                            }
                        }
                    }
                    committed.push(seq);
                }
                committed
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap().len() as u64, SEQS);
    }
    let batches = read_all(&store, &key);
    let mut seen = HashSet::new();
    for b in &batches {
        let e = &b.events[0];
        assert!(
            seen.insert((b.client_id, e.client_seq)),
            "({}, {}) stored twice",
            b.client_id,
            e.client_seq
        );
        assert_eq!(
            e.value,
            Bytes::from(format!("{}/{}", b.client_id, e.client_seq))
        );
    }
    assert_eq!(seen.len() as u64, CLIENTS * SEQS);
    let versions: Vec<u64> = batches.iter().map(|b| b.version).collect();
    assert_eq!(versions, (1..=CLIENTS * SEQS).collect::<Vec<_>>());
}

#[test]
fn pipelined_writes_to_many_aggregates_share_fsyncs_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    // Queue everything before waiting: the write-ahead state must number them correctly.
    let mut pending = Vec::new();
    for i in 0..2000u64 {
        let key = AggregateKey::new(1, 1, u128::from(i % 97));
        pending.push((
            key,
            store.write(WriteRequest {
                client_id: 1,
                user_id: None,
                now: i,
                writes: vec![AggregateWrite {
                    key,
                    events: vec![event(i, i.to_le_bytes().to_vec())],
                    allow_create: true,
                    expected_version: None,
                    enforce_client_idempotency: true,
                }],
            }),
        ));
    }
    let mut last: BTreeMap<AggregateKey, u64> = BTreeMap::new();
    for (key, c) in pending {
        let v = c.wait().unwrap().versions[0];
        let prev = last.insert(key, v).unwrap_or(0);
        assert_eq!(
            v,
            prev + 1,
            "versions of one aggregate follow submission order"
        );
    }
    let stats = store.stats();
    assert!(
        stats.commit.fsyncs < 2000,
        "group commit shares fsyncs: {stats:?}"
    );
    store.close().unwrap();
    drop(store);
    let store = open(dir.path());
    for (key, v) in &last {
        assert_eq!(store.details(key).unwrap().max_aggregate_version, *v);
        assert_eq!(read_all(&store, key).len() as u64, *v);
    }
}
