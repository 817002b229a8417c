//! Storage faults, model-checked: random event writes, trims and compaction passes run while
//! the crash-simulating backend
//! fails chosen storage calls (`ENOSPC`, `EIO`, `EMFILE` at opens, creations, appends, syncs,
//! directory syncs, renames, removals, truncations, reads, listings) of one shard's log, one
//! shard's index, or anything, for a few calls or until the fault clears; then clean restarts
//! and power cuts. No write may hang; every acknowledged write above its aggregate's
//! acknowledged trim floor must be readable after every reopen with its version and value; a
//! refused write or trim may or may not have taken effect, but nothing else may appear. The memtables are tiny, so index flushes (and their failures) happen all the
//! time.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eddy_event_store::{
    AggregateKey, AggregateWrite, CompactionPolicy, EventStore, EventStoreConfig, NewEvent,
    ReadQuery, TrimRequest, WriteRequest,
};
use eddy_log::{Errno, FsCall, MemBackend};
use proptest::prelude::*;

const SHARDS: u32 = 2;
const KEYS: usize = 4;
/// A write that has not answered after this long is a stalled shard.
const PATIENCE: Duration = Duration::from_secs(30);

fn config() -> EventStoreConfig {
    EventStoreConfig {
        num_shards: SHARDS,
        pool_threads: 2,
        segment_size: 2048,
        index_interval: 256,
        memtable_bytes: 700,
        ..EventStoreConfig::default()
    }
}

fn key(k: usize) -> AggregateKey {
    // aggregate id mod 2 is the shard
    AggregateKey::new(1, 1, k as u128)
}

#[derive(Debug, Clone, Copy)]
enum Target {
    Anything,
    Log(u32),
    Index(u32),
}

const CALLS: [FsCall; 11] = [
    FsCall::Open,
    FsCall::Create,
    FsCall::Read,
    FsCall::Append,
    FsCall::Truncate,
    FsCall::Sync,
    FsCall::List,
    FsCall::CreateDir,
    FsCall::Remove,
    FsCall::Rename,
    FsCall::SyncDir,
];

#[derive(Debug, Clone, Copy)]
enum Op {
    Write {
        key: usize,
        events: usize,
        len: usize,
    },
    /// Trims `key` to keep the newest `keep` acknowledged versions (at least one).
    Trim {
        key: usize,
        keep: u64,
    },
    /// One compaction pass that rewrites every sealed segment with anything to reclaim.
    Compact,
    Fault {
        target: Target,
        call: FsCall,
        errno: Errno,
        budget: Option<u32>,
    },
    Clear,
    Reopen,
    Crash {
        keep: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let target = prop_oneof![
        Just(Target::Anything),
        (0..SHARDS).prop_map(Target::Log),
        (0..SHARDS).prop_map(Target::Index),
    ];
    let errno = prop_oneof![
        Just(Errno::NoSpace),
        Just(Errno::Io),
        Just(Errno::TooManyFiles)
    ];
    prop_oneof![
        12 => (0..KEYS, 1usize..3, 1usize..120).prop_map(|(key, events, len)| Op::Write { key, events, len }),
        2 => (0..KEYS, 1u64..4).prop_map(|(key, keep)| Op::Trim { key, keep }),
        1 => Just(Op::Compact),
        4 => (target, 0..CALLS.len(), errno, proptest::option::of(1u32..4)).prop_map(
            |(target, call, errno, budget)| Op::Fault { target, call: CALLS[call], errno, budget }
        ),
        2 => Just(Op::Clear),
        1 => Just(Op::Reopen),
        1 => (0usize..200).prop_map(|keep| Op::Crash { keep }),
    ]
}

/// What a batch reads back as: its version and its events' values.
type Batch = (u64, Vec<Bytes>);

#[derive(Debug, Default)]
struct KeyModel {
    /// Acknowledged batches by version.
    acked: BTreeMap<u64, Vec<Bytes>>,
    /// Refused batches by the version they were given: each may or may not be there.
    maybe: BTreeMap<u64, Vec<Bytes>>,
    /// The acknowledged trim floor (1: untrimmed), and the higher one of a refused trim.
    floor: u64,
    floor_maybe: Option<u64>,
}

struct Harness {
    mem: MemBackend,
    store: Option<EventStore>,
    keys: Vec<KeyModel>,
    seq: u64,
}

impl Harness {
    fn new() -> Self {
        let mem = MemBackend::new();
        let (store, _) = EventStore::open(Arc::new(mem.clone()), config()).unwrap();
        Harness {
            mem,
            store: Some(store),
            keys: (0..KEYS)
                .map(|_| KeyModel {
                    floor: 1,
                    ..KeyModel::default()
                })
                .collect(),
            seq: 0,
        }
    }

    fn store(&self) -> &EventStore {
        self.store.as_ref().expect("open")
    }

    fn run(&mut self, op: Op) {
        match op {
            Op::Write {
                key: k,
                events,
                len,
            } => self.write(k, events, len),
            Op::Trim { key: k, keep } => self.trim(k, keep),
            Op::Compact => {
                let policy = CompactionPolicy {
                    min_reclaimable_ratio: 0.0,
                    ..CompactionPolicy::default()
                };
                // Fails or not: compaction never changes what reads return.
                let _ = self.store().compact(policy);
            }
            Op::Fault {
                target,
                call,
                errno,
                budget,
            } => {
                let dir = match target {
                    Target::Anything => None,
                    Target::Log(s) => Some(PathBuf::from(format!("events/shard-{s:03}"))),
                    Target::Index(s) => Some(PathBuf::from(format!("events/index-{s:03}"))),
                };
                let left = budget.map(AtomicU32::new);
                self.mem.inject_faults(move |c, path| {
                    if c != call || dir.as_ref().is_some_and(|d| !path.starts_with(d)) {
                        return None;
                    }
                    if let Some(left) = &left {
                        left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .ok()?;
                    }
                    Some(errno.error())
                });
            }
            Op::Clear => self.mem.clear_faults(),
            Op::Reopen => {
                self.mem.clear_faults();
                self.store = None;
                self.reopen();
            }
            Op::Crash { keep } => {
                self.mem
                    .crash_with(|_, tail| tail[..keep.min(tail.len())].to_vec());
                self.store = None;
                self.reopen();
            }
        }
    }

    fn write(&mut self, k: usize, events: usize, len: usize) {
        let values: Vec<Bytes> = (0..events)
            .map(|i| {
                self.seq += 1;
                Bytes::from(format!("{:0>len$}", self.seq * 10 + i as u64))
            })
            .collect();
        let request = WriteRequest {
            client_id: 1,
            user_id: None,
            writes: vec![AggregateWrite {
                key: key(k),
                events: values
                    .iter()
                    .enumerate()
                    .map(|(i, value)| NewEvent {
                        client_seq: self.seq + i as u64,
                        event_id: None,
                        event_timestamp: self.seq,
                        event_type_major: 1,
                        event_type_minor: 0,
                        value: value.clone(),
                        iv: None,
                    })
                    .collect(),
                allow_create: true,
                expected_version: None,
                enforce_client_idempotency: false,
            }],
            now: self.seq,
        };
        let answer = self
            .store()
            .write(request)
            .wait_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("a write to key {k} did not answer: a stalled shard"));
        let model = &mut self.keys[k];
        if let Ok(outcome) = answer {
            let version = outcome.versions[0];
            let current = model.acked.keys().next_back().copied().unwrap_or(0);
            assert!(version > current, "key {k}: version {version} reused");
            model.maybe.retain(|v, _| *v < version);
            model.acked.insert(version, values);
        } else {
            // Which version it would have had is not known; the next possible one.
            let next = model
                .acked
                .keys()
                .chain(model.maybe.keys())
                .max()
                .map_or(1, |v| v + 1);
            model.maybe.insert(next, values);
        }
    }

    fn trim(&mut self, k: usize, keep: u64) {
        let model = &mut self.keys[k];
        let Some(&newest) = model.acked.keys().next_back() else {
            return;
        };
        let keep_from = newest.saturating_sub(keep - 1).max(1);
        if keep_from <= model.floor {
            return;
        }
        self.seq += 1;
        let answer = self
            .store()
            .trim(TrimRequest {
                key: key(k),
                keep_from_version: keep_from,
                client_id: 1,
                user_id: None,
                now: self.seq,
            })
            .wait_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("a trim of key {k} did not answer: a stalled shard"));
        let model = &mut self.keys[k];
        if answer.is_ok() {
            model.floor = keep_from;
            model.floor_maybe = None;
        } else {
            model.floor_maybe = Some(model.floor_maybe.unwrap_or(0).max(keep_from));
        }
    }

    fn reopen(&mut self) {
        let (store, _) = EventStore::open(Arc::new(self.mem.clone()), config())
            .expect("the store opens after the faults are gone");
        self.store = Some(store);
        for k in 0..KEYS {
            let floor = self.floor_of(k);
            let found: Vec<Batch> =
                match self.store().read(&key(k), &ReadQuery::from_version(floor)) {
                    Ok(page) => page
                        .batches
                        .into_iter()
                        .map(|b| (b.version, b.events.into_iter().map(|e| e.value).collect()))
                        .collect(),
                    Err(e) => {
                        assert!(
                            self.keys[k].acked.is_empty(),
                            "key {k}: unreadable ({e:?}) with acknowledged writes"
                        );
                        Vec::new()
                    }
                };
            let model = &mut self.keys[k];
            model.floor = floor;
            model.floor_maybe = None;
            model.acked.retain(|v, _| *v >= floor);
            model.maybe.retain(|v, _| *v >= floor);
            let found: BTreeMap<u64, Vec<Bytes>> = found.into_iter().collect();
            for (version, values) in &model.acked {
                assert_eq!(
                    found.get(version),
                    Some(values),
                    "key {k}: acknowledged version {version} lost or changed"
                );
            }
            for (version, values) in &found {
                if model.acked.get(version) != Some(values) {
                    // A refused write that survived: its values are one of the refused ones.
                    assert!(
                        model.maybe.values().any(|m| m == values),
                        "key {k}: version {version} was never written"
                    );
                }
            }
            let versions: Vec<u64> = found.keys().copied().collect();
            assert_eq!(
                versions,
                (floor..floor + versions.len() as u64).collect::<Vec<_>>(),
                "key {k}: versions are contiguous from the floor"
            );
            model.acked = found;
            model.maybe.clear();
        }
    }
}

impl Harness {
    /// The trim floor the store reports for `k`, which must be the acknowledged one or the
    /// one a refused trim asked for.
    fn floor_of(&self, k: usize) -> u64 {
        let model = &self.keys[k];
        let Ok(details) = self.store().details(&key(k)) else {
            assert!(
                model.acked.is_empty(),
                "key {k}: no details with acknowledged writes"
            );
            return 1;
        };
        let floor = details.min_aggregate_version;
        assert!(
            floor == model.floor || Some(floor) == model.floor_maybe,
            "key {k}: floor {floor}, acknowledged {}, refused {:?}",
            model.floor,
            model.floor_maybe
        );
        floor
    }
}

fn run_ops(ops: &[Op]) {
    let mut h = Harness::new();
    for op in ops {
        h.run(*op);
    }
    h.run(Op::Reopen);
    // Without faults every shard takes writes again.
    for k in 0..KEYS {
        let before = h.keys[k].acked.len();
        h.run(Op::Write {
            key: k,
            events: 1,
            len: 4,
        });
        assert_eq!(
            h.keys[k].acked.len(),
            before + 1,
            "key {k} takes writes again"
        );
    }
    h.run(Op::Crash { keep: 0 });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn acknowledged_events_survive_storage_faults(ops in proptest::collection::vec(op(), 1..60)) {
        run_ops(&ops);
    }
}
