//! Compaction running concurrently with writers (writes, trims, deletes, recreates) and
//! readers loses nothing: every acknowledged, still-readable event reads back exactly, readers
//! never see an error other than the refusals the semantics allow, and the hash chain still
//! verifies; on real files and on the in-memory backend (then also after a power cut).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use eddy_event_store::{
    AggregateDelete, AggregateKey, AggregateWrite, DeleteRequest, EventStore, EventStoreConfig,
    EventStoreError, NewEvent, ReadQuery, Refusal, TrimRequest, WriteRequest,
};
use eddy_event_store::{CompactionPolicy, CompactionReport};
use eddy_log::{lock, FsBackend, MemBackend, StorageBackend};

const WRITERS: u64 = 3;
const AGGS_PER_WRITER: u64 = 6;
const OPS_PER_WRITER: u64 = 400;

fn config() -> EventStoreConfig {
    EventStoreConfig {
        num_shards: 2,
        pool_threads: 2,
        segment_size: 8 * 1024,
        index_interval: 512,
        memtable_bytes: 16 * 1024,
        cache_bytes: 64 * 1024, // small: segment loads race segment swaps
        compression_level: 1,
        ..EventStoreConfig::default()
    }
}

fn key(writer: u64, n: u64) -> AggregateKey {
    AggregateKey::new(
        3,
        1 + u128::from(writer),
        u128::from(writer * AGGS_PER_WRITER + n),
    )
}

/// The value of the event a writer stores with `client_seq` on `key`: readers check it.
fn value(key: &AggregateKey, client_seq: u64) -> Bytes {
    let len = 64 + (client_seq as usize * 37) % 400;
    let seed = (key.aggregate_id as u64).wrapping_mul(1_000_003) ^ client_seq;
    Bytes::from(
        (0..len)
            .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// What the owning writer knows of an aggregate after each acknowledgement.
#[derive(Debug, Clone, Default)]
struct Known {
    floor: u64,
    version: u64,
    deleted: bool,
    /// version → client_seq of its one event.
    batches: BTreeMap<u64, u64>,
}

fn writer(store: &EventStore, w: u64, known: &Mutex<BTreeMap<AggregateKey, Known>>) {
    let mut client_seq = 0u64;
    for op in 0..OPS_PER_WRITER {
        let k = key(w, op % AGGS_PER_WRITER);
        let now = lock(known).get(&k).cloned().unwrap_or_default();
        let step = op / AGGS_PER_WRITER;
        if !now.deleted && now.version > 4 && step % 5 == 4 {
            let keep_from = now.version - 2;
            let out = store
                .trim(TrimRequest {
                    key: k,
                    keep_from_version: keep_from,
                    client_id: u128::from(w),
                    user_id: None,
                    now: op,
                })
                .wait()
                .unwrap();
            let mut known = lock(known);
            let a = known.get_mut(&k).unwrap();
            a.floor = out.floor;
            a.batches.retain(|v, _| *v >= out.floor);
        } else if !now.deleted && now.version > 0 && step % 11 == 10 {
            let continuation = step.is_multiple_of(2);
            store
                .delete(&DeleteRequest {
                    client_id: u128::from(w),
                    user_id: None,
                    now: op,
                    deletes: vec![AggregateDelete {
                        key: k,
                        allow_recreate: true,
                        allow_sequence_continuation: continuation,
                        expected_version: Some(now.version),
                    }],
                })
                .wait()
                .unwrap();
            let mut known = lock(known);
            let a = known.get_mut(&k).unwrap();
            a.deleted = true;
            if !continuation {
                // The next write starts a fresh incarnation.
                *a = Known {
                    deleted: true,
                    ..Known::default()
                };
            }
        } else {
            client_seq += 1;
            let out = store
                .write(WriteRequest {
                    client_id: u128::from(w),
                    user_id: None,
                    now: op,
                    writes: vec![AggregateWrite {
                        key: k,
                        events: vec![NewEvent {
                            client_seq,
                            event_type_major: 1,
                            value: value(&k, client_seq),
                            ..NewEvent::default()
                        }],
                        allow_create: true,
                        // A recreate needs none (and the version it would check is the old one).
                        expected_version: (!now.deleted).then_some(now.version),
                        enforce_client_idempotency: true,
                    }],
                })
                .wait()
                .unwrap();
            let version = out.versions[0];
            let mut known = lock(known);
            let a = known.entry(k).or_default();
            if a.floor == 0 {
                a.floor = 1;
            }
            a.deleted = false;
            a.version = version;
            a.batches.insert(version, client_seq);
        }
    }
}

/// Reads everything readable of `key` and checks each event against its value; refusals the
/// semantics allow under concurrent trims and deletes are fine.
fn read_and_check(store: &EventStore, key: &AggregateKey) -> Option<Vec<(u64, u64)>> {
    let details = match store.details(key) {
        Ok(d) => d,
        Err(EventStoreError::Refused(Refusal::NotFound { .. })) => return None,
        Err(e) => panic!("details of {key:?}: {e:?}"),
    };
    if details.is_deleted {
        return None;
    }
    let mut q = ReadQuery::from_version(details.min_aggregate_version);
    let mut out = Vec::new();
    loop {
        let page = match store.read(key, &q) {
            Ok(p) => p,
            Err(EventStoreError::Refused(Refusal::Trimmed { .. } | Refusal::Deleted { .. })) => {
                return None
            }
            Err(e) => panic!("read of {key:?}: {e:?}"),
        };
        for b in &page.batches {
            assert_eq!(b.events.len(), 1);
            let e = &b.events[0];
            assert_eq!(e.value, value(key, e.client_seq), "{key:?} v{}", b.version);
            assert!(out.last().is_none_or(|(v, _)| *v < b.version));
            out.push((b.version, e.client_seq));
        }
        match page.next_version {
            Some(v) => q.from_version = v,
            None => return Some(out),
        }
    }
}

/// Every acknowledged batch still readable reads back exactly.
fn check_known(store: &EventStore, known: &BTreeMap<AggregateKey, Known>) {
    for (k, a) in known {
        let d = store.details(k).unwrap();
        assert_eq!(d.is_deleted, a.deleted, "{k:?}");
        if a.deleted {
            continue;
        }
        assert_eq!(
            (d.min_aggregate_version, d.max_aggregate_version),
            (a.floor, a.version)
        );
        let got = read_and_check(store, k).unwrap();
        let want: Vec<(u64, u64)> = a.batches.iter().map(|(v, s)| (*v, *s)).collect();
        assert_eq!(got, want, "{k:?}");
    }
}

fn run(
    backend: Arc<dyn StorageBackend>,
) -> (EventStore, BTreeMap<AggregateKey, Known>, CompactionReport) {
    let store = EventStore::open(backend, config()).unwrap().0;
    let known = Mutex::new(BTreeMap::new());
    let done = AtomicBool::new(false);
    let mut total = CompactionReport::default();
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (store, known) = (&store, &known);
                s.spawn(move || writer(store, w, known))
            })
            .collect();
        for r in 0..2u64 {
            let (store, done) = (&store, &done);
            s.spawn(move || {
                let mut n = r;
                while !done.load(Ordering::SeqCst) {
                    n += 1;
                    let k = key(n % WRITERS, (n / WRITERS) % AGGS_PER_WRITER);
                    read_and_check(store, &k);
                }
            });
        }
        let compactor = {
            let (store, done) = (&store, &done);
            s.spawn(move || {
                let mut total = CompactionReport::default();
                while !done.load(Ordering::SeqCst) {
                    let r = store
                        .compact(CompactionPolicy {
                            min_reclaimable_ratio: 0.0,
                            ..CompactionPolicy::default()
                        })
                        .unwrap();
                    total.segments_rewritten += r.segments_rewritten;
                    total.batches_elided += r.batches_elided;
                    total.bytes_before += r.bytes_before;
                    total.bytes_after += r.bytes_after;
                    std::thread::yield_now();
                }
                total
            })
        };
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
        total = compactor.join().unwrap();
    });
    // One last pass with everything quiet.
    let last = store
        .compact(CompactionPolicy {
            min_reclaimable_ratio: 0.0,
            ..CompactionPolicy::default()
        })
        .unwrap();
    total.segments_rewritten += last.segments_rewritten;
    total.batches_elided += last.batches_elided;
    let known = known.into_inner().unwrap();
    check_known(&store, &known);
    for shard in 0..store.num_shards() {
        assert_eq!(
            store.verify_chain(shard).unwrap(),
            store.chain_tip(shard).unwrap()
        );
        assert!(store
            .reclaimable(shard)
            .unwrap()
            .iter()
            .all(|seg| seg.reclaimable == 0));
    }
    (store, known, total)
}

#[test]
fn compaction_beside_writers_and_readers_loses_nothing_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FsBackend::new(dir.path()).unwrap());
    let (store, known, total) = run(backend.clone());
    assert!(total.segments_rewritten > 0, "{total:?}");
    assert!(total.batches_elided > 0, "{total:?}");
    store.close().unwrap();
    drop(store);
    let store = EventStore::open(backend, config()).unwrap().0;
    check_known(&store, &known);
}

#[test]
fn compaction_beside_writers_and_readers_loses_nothing_in_memory_and_after_a_power_cut() {
    let disk = MemBackend::new();
    let (store, known, total) = run(Arc::new(disk.clone()));
    assert!(total.segments_rewritten > 0, "{total:?}");
    disk.crash();
    drop(store);
    let store = EventStore::open(Arc::new(disk.clone()), config())
        .unwrap()
        .0;
    check_known(&store, &known);
    for shard in 0..store.num_shards() {
        assert_eq!(
            store.verify_chain(shard).unwrap(),
            store.chain_tip(shard).unwrap()
        );
    }
}
