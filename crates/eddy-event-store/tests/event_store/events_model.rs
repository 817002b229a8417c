//! Model-based test of the whole event store API against an in-memory model: writes with OCC
//! and client sequences (single and multi-aggregate, across shards), trims, deletes,
//! recreates (fresh and continued), reads with filters and pages, details, listings,
//! compaction passes (also cut short by a power cut at any of their file operations), and
//! crashes/reopens on the in-memory backend. After every operation every observable answer
//! of the store must equal the model's; after a compaction pass no sealed segment that
//! qualified keeps reclaimable bytes, and compacting after most data died shrinks the logs.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use eddy_event_store::CompactionPolicy;
use eddy_event_store::{
    AggregateDelete, AggregateKey, AggregateWrite, DeleteRequest, EventStore, EventStoreConfig,
    EventStoreError, NewEvent, ReadQuery, Refusal, TrimRequest, VersionMismatch, WriteRequest,
};
use eddy_log::{DirEntry, MemBackend, OpenMode, StorageBackend, StorageFile};
use proptest::prelude::*;

const SHARDS: u32 = 2;
const KEYS: [AggregateKey; 5] = [
    AggregateKey::new(1, 1, 0),
    AggregateKey::new(1, 1, 1),
    AggregateKey::new(1, 2, 2),
    AggregateKey::new(2, 1, 3),
    AggregateKey::new(2, 2, 4),
];

#[derive(Debug, Clone)]
struct PartSpec {
    key: usize,
    events: Vec<(u64, u64, usize)>, // (client_seq, type, value len)
    allow_create: bool,
    expected: Option<i64>, // offset from the model's current version
    enforce: bool,
}

#[derive(Debug, Clone)]
enum Op {
    Write {
        client: u128,
        parts: Vec<PartSpec>,
    },
    Trim {
        key: usize,
        keep_from: u64,
    },
    Delete {
        keys: Vec<(usize, bool, bool, Option<i64>)>,
    },
    Read {
        key: usize,
        from: u64,
        to: Option<u64>,
        types: Option<Vec<u64>>,
        page: usize,
    },
    Crash,
    Reopen,
    /// A compaction pass rewriting segments at least `ratio_pct` % reclaimable.
    Compact {
        ratio_pct: u8,
    },
    /// A compaction pass (ratio 0) cut short by a power cut at its `at`-th file operation on
    /// a shard log, then a reopen.
    CrashInCompaction {
        at: i64,
    },
}

fn part_spec() -> impl Strategy<Value = PartSpec> {
    (
        0..KEYS.len(),
        prop_oneof![
            30 => prop::collection::vec((0u64..12, 1u64..4, 0usize..300), 1..4),
            1 => prop::collection::vec((0u64..12, 0u64..4, 0usize..300), 0..3),
        ],
        prop::bool::weighted(0.85),
        prop::option::weighted(0.4, -1i64..=1),
        any::<bool>(),
    )
        .prop_map(|(key, events, allow_create, expected, enforce)| PartSpec {
            key,
            events,
            allow_create,
            expected,
            enforce,
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0u128..3, part_spec()).prop_map(|(client, p)| Op::Write { client, parts: vec![p] }),
        3 => (0u128..3, prop::collection::vec(part_spec(), 2..4))
            .prop_map(|(client, parts)| Op::Write { client, parts }),
        1 => (0u128..3, prop::collection::vec(part_spec(), 0..1))
            .prop_map(|(client, parts)| Op::Write { client, parts }),
        3 => (0..KEYS.len(), 0u64..5).prop_map(|(key, keep_from)| Op::Trim { key, keep_from }),
        2 => prop::collection::vec(
                (0..KEYS.len(), any::<bool>(), any::<bool>(), prop::option::weighted(0.3, -1i64..=1)),
                0..3,
            )
            .prop_map(|keys| Op::Delete { keys }),
        3 => (0..KEYS.len(), any::<bool>(), any::<bool>())
            .prop_map(|(k, recreate, cont)| Op::Delete { keys: vec![(k, recreate, cont, None)] }),
        4 => (
                0..KEYS.len(),
                0u64..5,
                prop::option::of(0u64..8),
                prop::option::of(prop::collection::vec(0u64..4, 0..3)),
                1usize..4,
            )
            .prop_map(|(key, from, to, types, page)| Op::Read { key, from, to, types, page }),
        1 => Just(Op::Crash),
        1 => Just(Op::Reopen),
        2 => prop_oneof![Just(0u8), Just(20), Just(50)].prop_map(|ratio_pct| Op::Compact { ratio_pct }),
        2 => (0i64..30).prop_map(|at| Op::CrashInCompaction { at }),
    ]
}

// ------------------------------------------------------------------------------------------------
// A backend that can cut the power at a chosen file operation on a shard log.

/// The store's backend: a [`MemBackend`] whose mutating calls on shard-log files count down
/// once armed; the call that reaches zero crashes the disk (unsynced bytes lost, every handle
/// of this "process" dead) and fails, as does everything after it.
#[derive(Debug, Clone)]
struct Disk {
    mem: MemBackend,
    left: Arc<AtomicI64>,
}

#[derive(Debug)]
struct DiskFile {
    file: Arc<dyn StorageFile>,
    disk: Disk,
    counted: bool,
}

impl Disk {
    /// A fresh process's view of `mem`, disarmed.
    fn new(mem: &MemBackend) -> Self {
        Disk {
            mem: mem.clone(),
            left: Arc::new(AtomicI64::new(i64::MAX)),
        }
    }

    fn arm(&self, at: i64) {
        self.left.store(at, Ordering::SeqCst);
    }

    fn fired(&self) -> bool {
        self.left.load(Ordering::SeqCst) < 0
    }

    fn tick(&self, path: &Path) -> io::Result<()> {
        if !path.to_string_lossy().contains("shard-") {
            return if self.fired() {
                Err(io::Error::other("simulated power cut"))
            } else {
                Ok(())
            };
        }
        match self.left.fetch_sub(1, Ordering::SeqCst) {
            0 => {
                self.mem.crash();
                Err(io::Error::other("simulated power cut"))
            }
            left if left < 0 => Err(io::Error::other("simulated power cut")),
            _ => Ok(()),
        }
    }
}

impl DiskFile {
    fn tick(&self) -> io::Result<()> {
        if self.counted {
            self.disk.tick(Path::new("shard-"))
        } else {
            self.disk.tick(Path::new(""))
        }
    }
}

impl StorageFile for DiskFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_at(offset, buf)
    }
    fn append(&self, parts: &[&[u8]]) -> io::Result<()> {
        self.tick()?;
        self.file.append(parts)
    }
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.tick()?;
        self.file.truncate(len)
    }
    fn sync(&self) -> io::Result<()> {
        self.tick()?;
        self.file.sync()
    }
}

impl StorageBackend for Disk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>> {
        if mode != OpenMode::Existing {
            self.tick(path)?;
        }
        Ok(Arc::new(DiskFile {
            file: self.mem.open(path, mode)?,
            disk: self.clone(),
            counted: path.to_string_lossy().contains("shard-"),
        }))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        self.mem.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.tick(dir)?;
        self.mem.create_dir_all(dir)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.tick(path)?;
        self.mem.remove_file(path)
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.tick(dir)?;
        self.mem.remove_dir_all(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.tick(to)?;
        self.mem.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.tick(dir)?;
        self.mem.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.mem.exists(path)
    }
}

/// (version, client id, events with their `event_seq`) as reads must return them.
type ModelBatch = (u64, u128, Vec<(u64, NewEvent)>);

#[derive(Debug, Clone, PartialEq)]
struct MBatch {
    client: u128,
    first_event_seq: u64,
    events: Vec<NewEvent>,
}

#[derive(Debug, Clone, Default)]
struct MAgg {
    exists: bool,
    version: u64,
    floor: u64,
    max_event_seq: u64,
    deleted: Option<(bool, bool)>,
    batches: BTreeMap<u64, MBatch>,
    batch_count: u64,
    last_client: u128,
}

#[derive(Default)]
struct Model {
    aggs: HashMap<usize, MAgg>,
    marks: HashMap<(usize, u128), (u64, u64)>,
}

fn shard_of(key: usize) -> u32 {
    (KEYS[key].aggregate_id % u128::from(SHARDS)) as u32
}

/// Routing as the store does it: part by part, a repeated key, then a foreign shard.
fn route(keys: &[usize]) -> Result<(), Refusal> {
    for (part, k) in keys.iter().enumerate() {
        if keys[..part].contains(k) {
            return Err(Refusal::DuplicateKey { part });
        }
        if shard_of(*k) != shard_of(keys[0]) {
            return Err(Refusal::CrossShard { num_shards: SHARDS });
        }
    }
    Ok(())
}

fn make_event(seq: u64, ty: u64, len: usize) -> NewEvent {
    NewEvent {
        client_seq: seq,
        event_id: seq.is_multiple_of(2).then_some(u128::from(seq) * 3),
        event_timestamp: seq * 10,
        event_type_major: ty,
        event_type_minor: seq % 3,
        value: Bytes::from(
            (0..len)
                .map(|i| (i as u64 * 7 + seq) as u8)
                .collect::<Vec<u8>>(),
        ),
        iv: (len % 5 == 1).then_some([seq as u8; 12]),
    }
}

/// The OCC refusal of a request whose part `at` conflicts, as the store answers it: that
/// conflict and every later part's whose expected version (`pins`: each part's key, expected
/// and current version) differs, one conflict alone as `VersionConflict`.
fn occ_refusal(at: usize, pins: &[(AggregateKey, Option<u64>, u64)]) -> Refusal {
    let mut conflicts: Vec<VersionMismatch> = pins
        .iter()
        .enumerate()
        .skip(at)
        .filter_map(|(part, &(key, expected, current))| {
            let expected = expected?;
            (expected != current).then_some(VersionMismatch {
                part,
                key,
                expected,
                current,
            })
        })
        .collect();
    if conflicts.len() == 1 {
        let c = conflicts.remove(0);
        Refusal::VersionConflict {
            part: c.part,
            key: c.key,
            expected: c.expected,
            current: c.current,
        }
    } else {
        Refusal::VersionConflicts { conflicts }
    }
}

fn expected_version(current: u64, offset: i64) -> u64 {
    current.saturating_add_signed(offset)
}

impl Model {
    /// The model's answer to a write: Ok(versions) or the refusal.
    fn write(&mut self, client: u128, parts: &[PartSpec]) -> Result<Vec<u64>, Refusal> {
        if parts.is_empty() {
            return Err(Refusal::EmptyRequest);
        }
        route(&parts.iter().map(|p| p.key).collect::<Vec<_>>())?;
        let guard = |p: &PartSpec| {
            p.events.is_empty() && p.expected.is_some() && !p.allow_create && !p.enforce
        };
        for (part, p) in parts.iter().enumerate() {
            if guard(p) {
                continue;
            }
            if p.events.is_empty() {
                return Err(if p.expected.is_some() {
                    Refusal::MalformedGuard { part }
                } else {
                    Refusal::EmptyEvents { part }
                });
            }
            if let Some(e) = p.events.iter().find(|e| e.1 == 0) {
                return Err(Refusal::ZeroEventType {
                    part,
                    client_seq: e.0,
                });
            }
        }
        if parts.iter().all(guard) {
            return Err(Refusal::MalformedGuard { part: 0 });
        }
        let pins: Vec<(AggregateKey, Option<u64>, u64)> = parts
            .iter()
            .map(|p| {
                let current = self.aggs.get(&p.key).map_or(0, |a| a.version);
                let expected = p.expected.map(|off| expected_version(current, off));
                (KEYS[p.key], expected, current)
            })
            .collect();
        let mut plans = Vec::new();
        for (part, p) in parts.iter().enumerate() {
            let key = KEYS[p.key];
            let a = self.aggs.get(&p.key).cloned().unwrap_or_default();
            let current = a.version;
            if guard(p) {
                // A guard: its version only, nothing written.
                let e = expected_version(current, p.expected.unwrap_or(0));
                if e != current {
                    return Err(occ_refusal(part, &pins));
                }
                continue;
            }
            let (version, first_seq, fresh) = if !a.exists {
                if !p.allow_create {
                    return Err(Refusal::NotFound { part, key });
                }
                (1, 1, true)
            } else if let Some((recreate, cont)) = a.deleted {
                if !recreate {
                    return Err(Refusal::RecreateNotAllowed { part, key });
                }
                if cont {
                    (a.version + 1, a.max_event_seq + 1, false)
                } else {
                    (1, 1, true)
                }
            } else {
                (a.version + 1, a.max_event_seq + 1, false)
            };
            if let Some(off) = p.expected {
                let e = expected_version(current, off);
                if e != current {
                    return Err(occ_refusal(part, &pins));
                }
            }
            let min_seq = p.events.iter().map(|e| e.0).min().unwrap_or(0);
            if p.enforce && a.exists {
                if let Some((last, v)) = self.marks.get(&(p.key, client)) {
                    if min_seq <= *last {
                        return Err(Refusal::Duplicate {
                            part,
                            key,
                            last_client_seq: *last,
                            attempted_client_seq: min_seq,
                            committed_version: *v,
                        });
                    }
                }
            }
            plans.push((version, first_seq, fresh));
        }
        let mut versions = Vec::new();
        for (p, (version, first_seq, fresh)) in parts.iter().filter(|p| !guard(p)).zip(plans) {
            let a = self.aggs.entry(p.key).or_default();
            if fresh {
                // A fresh incarnation counts only its own batches.
                a.batches.clear();
                a.batch_count = 0;
                a.floor = 1;
            }
            a.exists = true;
            a.deleted = None;
            a.version = version;
            let events: Vec<NewEvent> =
                p.events.iter().map(|e| make_event(e.0, e.1, e.2)).collect();
            a.max_event_seq = first_seq + events.len() as u64 - 1;
            a.batch_count += 1;
            a.last_client = client;
            a.batches.insert(
                version,
                MBatch {
                    client,
                    first_event_seq: first_seq,
                    events,
                },
            );
            let max_seq = p.events.iter().map(|e| e.0).max().unwrap_or(0);
            match self.marks.get(&(p.key, client)) {
                Some((last, _)) if max_seq <= *last => {}
                _ => {
                    self.marks.insert((p.key, client), (max_seq, version));
                }
            }
            versions.push(version);
        }
        Ok(versions)
    }
}

fn write_request(client: u128, parts: &[PartSpec], model: &Model) -> WriteRequest {
    WriteRequest {
        client_id: client,
        user_id: Some(client + 100),
        now: 1,
        writes: parts
            .iter()
            .map(|p| {
                let current = model.aggs.get(&p.key).map_or(0, |a| a.version);
                AggregateWrite {
                    key: KEYS[p.key],
                    events: p.events.iter().map(|e| make_event(e.0, e.1, e.2)).collect(),
                    allow_create: p.allow_create,
                    expected_version: p.expected.map(|o| expected_version(current, o)),
                    enforce_client_idempotency: p.enforce,
                }
            })
            .collect(),
    }
}

fn refusal<T: std::fmt::Debug>(r: Result<T, EventStoreError>) -> Result<T, Refusal> {
    r.map_err(|e| match e {
        EventStoreError::Refused(e) => e,
        other => panic!("unexpected storage error {other:?}"),
    })
}

fn config() -> EventStoreConfig {
    EventStoreConfig {
        num_shards: SHARDS,
        pool_threads: 1,
        segment_size: 1024, // many sealed segments for compaction to work on
        index_interval: 256,
        memtable_bytes: 2048, // flushes and merges runs constantly
        compression_level: 1,
        ..EventStoreConfig::default()
    }
}

fn check_all(store: &EventStore, model: &Model) {
    for (i, key) in KEYS.iter().enumerate() {
        let got = store.details(key);
        match model.aggs.get(&i).filter(|a| a.exists) {
            None => assert!(matches!(refusal(got), Err(Refusal::NotFound { .. }))),
            Some(a) => {
                let d = got.expect("details");
                assert_eq!(d.max_aggregate_version, a.version, "version of {i}");
                assert_eq!(d.min_aggregate_version, a.floor, "floor of {i}");
                assert_eq!(d.max_event_seq, a.max_event_seq, "event seq of {i}");
                assert_eq!(d.is_deleted, a.deleted.is_some());
                assert_eq!(d.allow_recreate, a.deleted.is_some_and(|d| d.0));
                assert_eq!(
                    d.allow_sequence_continuation,
                    a.deleted.is_some_and(|d| d.1)
                );
                assert_eq!(d.last_client_id, a.last_client, "last client of {i}");
            }
        }
    }
    for shard in 0..u64::from(SHARDS) {
        let mut listed = BTreeMap::new();
        let mut cursor = None;
        for _ in 0..100 {
            let page = store.list_aggregates(shard, None, None, cursor, 2).unwrap();
            for item in page.items {
                listed.insert(item.key, item);
            }
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        assert!(cursor.is_none(), "listing did not end");
        let expected: Vec<AggregateKey> = (0..KEYS.len())
            .filter(|i| {
                u64::from(shard_of(*i)) == shard && model.aggs.get(i).is_some_and(|a| a.exists)
            })
            .map(|i| KEYS[i])
            .collect();
        assert_eq!(listed.keys().copied().collect::<Vec<_>>(), expected);
        for (key, item) in &listed {
            let i = KEYS.iter().position(|k| k == key).unwrap();
            let a = &model.aggs[&i];
            assert_eq!(item.is_deleted, a.deleted.is_some());
            assert_eq!(item.event_batch_count, a.batch_count);
            assert_eq!(item.max_aggregate_version, a.version);
        }
    }
}

/// Every batch of `key` from its floor, all pages.
fn read_everything(store: &EventStore, key: &AggregateKey) -> Vec<ModelBatch> {
    let floor = store.details(key).unwrap().min_aggregate_version;
    let mut q = ReadQuery::from_version(floor);
    let mut out = Vec::new();
    loop {
        let page = store.read(key, &q).unwrap();
        out.extend(page.batches.into_iter().map(|b| {
            let events = b
                .events
                .into_iter()
                .map(|e| {
                    let event = NewEvent {
                        client_seq: e.client_seq,
                        event_id: e.event_id,
                        event_timestamp: e.event_timestamp,
                        event_type_major: e.event_type_major,
                        event_type_minor: e.event_type_minor,
                        value: e.value,
                        iv: e.iv,
                    };
                    (e.event_seq, event)
                })
                .collect();
            (b.version, b.client_id, events)
        }));
        match page.next_version {
            Some(v) => q.from_version = v,
            None => return out,
        }
    }
}

/// Every readable batch of every live aggregate equals the model's.
fn check_reads(store: &EventStore, model: &Model) {
    for (i, key) in KEYS.iter().enumerate() {
        let Some(a) = model
            .aggs
            .get(&i)
            .filter(|a| a.exists && a.deleted.is_none())
        else {
            continue;
        };
        let want: Vec<ModelBatch> = a
            .batches
            .range(a.floor..=a.version)
            .map(|(v, b)| {
                let events = b
                    .events
                    .iter()
                    .enumerate()
                    .map(|(n, e)| (b.first_event_seq + n as u64, e.clone()))
                    .collect();
                (*v, b.client, events)
            })
            .collect();
        assert_eq!(read_everything(store, key), want, "everything of {i}");
    }
}

/// After a pass at `ratio`, no sealed segment that qualifies has anything left to reclaim.
fn check_compacted(store: &EventStore, ratio: f64) {
    for shard in 0..SHARDS {
        for seg in store.reclaimable(shard).unwrap() {
            assert!(
                seg.reclaimable == 0 || seg.ratio() < ratio,
                "shard {shard} after a pass at {ratio}: {seg:?}"
            );
        }
    }
}

fn run(ops: Vec<Op>) {
    let disk = MemBackend::new();
    let open = |disk: &MemBackend| {
        let process = Disk::new(disk);
        let store = EventStore::open(Arc::new(process.clone()), config())
            .unwrap()
            .0;
        (store, process)
    };
    let (mut store, mut process) = open(&disk);
    let mut model = Model::default();
    for op in ops {
        match op {
            Op::Write { client, parts } => {
                let req = write_request(client, &parts, &model);
                let got = refusal(store.write(req).wait()).map(|o| o.versions);
                let want = model.write(client, &parts);
                assert_eq!(got, want, "write {parts:?}");
            }
            Op::Trim { key, keep_from } => {
                let got = refusal(
                    store
                        .trim(TrimRequest {
                            key: KEYS[key],
                            keep_from_version: keep_from,
                            client_id: 9,
                            user_id: None,
                            now: 2,
                        })
                        .wait(),
                );
                let a = model.aggs.entry(key).or_default();
                match (a.exists, a.deleted) {
                    (false, _) => assert!(matches!(got, Err(Refusal::NotFound { .. }))),
                    (true, Some(_)) => assert!(matches!(got, Err(Refusal::Deleted { .. }))),
                    (true, None) if keep_from <= a.floor => {
                        assert_eq!(got.map(|t| t.written), Ok(false));
                    }
                    (true, None) if keep_from > a.version => {
                        assert_eq!(
                            got,
                            Err(Refusal::TrimOutOfRange {
                                requested: keep_from,
                                max_aggregate_version: a.version
                            })
                        );
                    }
                    (true, None) => {
                        assert_eq!(got.map(|t| (t.written, t.floor)), Ok((true, keep_from)));
                        a.floor = keep_from;
                        a.last_client = 9;
                    }
                }
            }
            Op::Delete { keys } => {
                let mut deletes = Vec::new();
                for (k, recreate, cont, off) in &keys {
                    let current = model.aggs.get(k).map_or(0, |a| a.version);
                    deletes.push(AggregateDelete {
                        key: KEYS[*k],
                        allow_recreate: *recreate,
                        allow_sequence_continuation: *cont,
                        expected_version: off.map(|o| expected_version(current, o)),
                    });
                }
                let got = refusal(
                    store
                        .delete(&DeleteRequest {
                            client_id: 8,
                            user_id: None,
                            deletes: deletes.clone(),
                            now: 3,
                        })
                        .wait(),
                );
                // Model.
                let want: Result<(), Refusal> = (|| {
                    if keys.is_empty() {
                        return Err(Refusal::EmptyRequest);
                    }
                    route(&keys.iter().map(|k| k.0).collect::<Vec<_>>())?;
                    for (part, d) in deletes.iter().enumerate() {
                        let k = keys[part].0;
                        let a = model.aggs.get(&k).cloned().unwrap_or_default();
                        if !a.exists {
                            return Err(Refusal::NotFound { part, key: d.key });
                        }
                        if a.deleted.is_some() {
                            return Err(Refusal::Deleted { part, key: d.key });
                        }
                        if let Some(e) = d.expected_version {
                            if e != a.version {
                                let pins: Vec<_> = deletes
                                    .iter()
                                    .zip(&keys)
                                    .map(|(d, k)| {
                                        let current = model.aggs.get(&k.0).map_or(0, |a| a.version);
                                        (d.key, d.expected_version, current)
                                    })
                                    .collect();
                                return Err(occ_refusal(part, &pins));
                            }
                        }
                    }
                    for (k, recreate, cont, _) in &keys {
                        let a = model.aggs.get_mut(k).unwrap();
                        a.deleted = Some((*recreate, *cont));
                        a.last_client = 8;
                    }
                    Ok(())
                })();
                assert_eq!(got.map(|_| ()), want, "delete {keys:?}");
            }
            Op::Read {
                key,
                from,
                to,
                types,
                page,
            } => {
                let query = ReadQuery {
                    from_version: from,
                    to_version: to,
                    include_event_types: types.clone(),
                    max_batches: page,
                    ..ReadQuery::default()
                };
                let a = model.aggs.get(&key).cloned().unwrap_or_default();
                let first = refusal(store.read(&KEYS[key], &query));
                if !a.exists {
                    assert!(matches!(first, Err(Refusal::NotFound { .. })));
                    continue;
                }
                if a.deleted.is_some() {
                    assert!(matches!(first, Err(Refusal::Deleted { .. })));
                    continue;
                }
                if from < a.floor {
                    assert_eq!(
                        first,
                        Err(Refusal::Trimmed {
                            requested: from,
                            minimum_available: a.floor
                        })
                    );
                    continue;
                }
                // Collect every page.
                let mut got = Vec::new();
                let mut q = query.clone();
                let mut page_result = first.unwrap();
                loop {
                    assert!(page_result.batches.len() <= page);
                    if page_result.next_version.is_some() {
                        assert!(
                            !page_result.batches.is_empty(),
                            "empty page with a continuation"
                        );
                    }
                    let last = page_result.batches.last().map(|b| b.version);
                    got.extend(page_result.batches);
                    match page_result.next_version {
                        None => break,
                        Some(n) => {
                            assert!(last.is_some_and(|l| n > l));
                            q.from_version = n;
                            page_result = store.read(&KEYS[key], &q).unwrap();
                        }
                    }
                }
                let wanted_types: Option<Vec<u64>> = types.filter(|t| !t.is_empty());
                let upper = to.unwrap_or(u64::MAX).min(a.version);
                let want: Vec<ModelBatch> = a
                    .batches
                    .range(from..)
                    .filter(|(v, _)| **v <= upper && **v >= a.floor)
                    .filter_map(|(v, b)| {
                        let events: Vec<(u64, NewEvent)> = b
                            .events
                            .iter()
                            .enumerate()
                            .map(|(i, e)| (b.first_event_seq + i as u64, e.clone()))
                            .filter(|(_, e)| {
                                wanted_types
                                    .as_ref()
                                    .is_none_or(|t| t.contains(&e.event_type_major))
                            })
                            .collect();
                        (!events.is_empty()).then_some((*v, b.client, events))
                    })
                    .collect();
                let got: Vec<ModelBatch> = got
                    .into_iter()
                    .map(|b| {
                        (
                            b.version,
                            b.client_id,
                            b.events
                                .into_iter()
                                .map(|e| {
                                    (
                                        e.event_seq,
                                        NewEvent {
                                            client_seq: e.client_seq,
                                            event_id: e.event_id,
                                            event_timestamp: e.event_timestamp,
                                            event_type_major: e.event_type_major,
                                            event_type_minor: e.event_type_minor,
                                            value: e.value,
                                            iv: e.iv,
                                        },
                                    )
                                })
                                .collect(),
                        )
                    })
                    .collect();
                assert_eq!(got, want, "read of {key} from {from} to {to:?}");
            }
            Op::Crash => {
                disk.crash();
                drop(store);
                (store, process) = open(&disk);
            }
            Op::Reopen => {
                store.close().unwrap();
                drop(store);
                (store, process) = open(&disk);
            }
            Op::Compact { ratio_pct } => {
                let ratio = f64::from(ratio_pct) / 100.0;
                let report = store
                    .compact(CompactionPolicy {
                        min_reclaimable_ratio: ratio,
                        ..CompactionPolicy::default()
                    })
                    .unwrap();
                assert!(report.bytes_after <= report.bytes_before, "{report:?}");
                check_compacted(&store, ratio);
                check_reads(&store, &model);
            }
            Op::CrashInCompaction { at } => {
                process.arm(at);
                let outcome = store.compact(CompactionPolicy {
                    min_reclaimable_ratio: 0.0,
                    ..CompactionPolicy::default()
                });
                if process.fired() {
                    drop(store);
                    (store, process) = open(&disk);
                } else {
                    outcome.unwrap();
                    process.arm(i64::MAX);
                    check_compacted(&store, 0.0);
                }
                check_reads(&store, &model);
            }
        }
        check_all(&store, &model);
    }
    check_reads(&store, &model);
    for shard in 0..SHARDS {
        assert_eq!(
            store.verify_chain(shard).unwrap(),
            store.chain_tip(shard).unwrap()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn event_store_matches_the_model(ops in prop::collection::vec(op(), 1..100)) {
        run(ops);
    }
}

/// Incompressible bytes, distinct per `seed`.
fn noise(seed: u64, len: usize) -> Bytes {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Bytes of every shard log segment file.
fn log_bytes(disk: &MemBackend) -> u64 {
    disk.file_paths()
        .iter()
        .filter(|p| {
            p.to_string_lossy().contains("shard-") && p.extension().is_some_and(|e| e == "log")
        })
        .map(|p| disk.read_file(p).map_or(0, |b| b.len() as u64))
        .sum()
}

/// Writes batches of the given value sizes round-robin over 20 aggregates, then deletes or
/// trims most aggregates (`fates`: 0–3 delete, 4–7 trim to the newest batch, 8–9 keep),
/// seals everything, compacts, and checks that the logs shrank by at least the value bytes
/// of every dead batch and that every answer is unchanged, before and after a crash.
fn shrink_after_most_data_dies(sizes: &[usize], fates: &[u8]) {
    let config = EventStoreConfig {
        compression_level: 0,
        ..config()
    };
    let disk = MemBackend::new();
    let store = EventStore::open(Arc::new(disk.clone()), config.clone())
        .unwrap()
        .0;
    let key = |i: usize| AggregateKey::new(7, 1, i as u128);
    let event = |seq: u64, value: Bytes| NewEvent {
        client_seq: seq,
        event_type_major: 1,
        value,
        ..NewEvent::default()
    };
    let write = |k: AggregateKey, seq: u64, value: Bytes| {
        store
            .write(WriteRequest {
                client_id: 1,
                user_id: None,
                now: seq,
                writes: vec![AggregateWrite {
                    key: k,
                    events: vec![event(seq, value)],
                    allow_create: true,
                    ..AggregateWrite::default()
                }],
            })
            .wait()
            .unwrap()
    };
    let mut versions: Vec<Vec<usize>> = vec![Vec::new(); fates.len()];
    for (n, size) in sizes.iter().enumerate() {
        let i = n % fates.len();
        write(key(i), n as u64 + 1, noise(n as u64, *size));
        versions[i].push(*size);
    }
    let mut dead_value_bytes = 0u64;
    for (i, fate) in fates.iter().enumerate() {
        let sizes = &versions[i];
        if sizes.is_empty() {
            continue;
        }
        match fate {
            0..=3 => {
                store
                    .delete(&DeleteRequest {
                        client_id: 2,
                        user_id: None,
                        now: 0,
                        deletes: vec![AggregateDelete {
                            key: key(i),
                            allow_recreate: false,
                            allow_sequence_continuation: false,
                            expected_version: None,
                        }],
                    })
                    .wait()
                    .unwrap();
                dead_value_bytes += sizes.iter().sum::<usize>() as u64;
            }
            4..=7 if sizes.len() > 1 => {
                store
                    .trim(TrimRequest {
                        key: key(i),
                        keep_from_version: sizes.len() as u64,
                        client_id: 2,
                        user_id: None,
                        now: 0,
                    })
                    .wait()
                    .unwrap();
                dead_value_bytes += sizes[..sizes.len() - 1].iter().sum::<usize>() as u64;
            }
            _ => {}
        }
    }
    // Seal every segment holding a dead batch: fill each shard's active segment.
    for shard in 0..SHARDS as usize {
        for f in 0..4u64 {
            write(key(1000 + shard), 10_000 + f, noise(f, 400));
        }
    }
    let live: Vec<usize> = (0..fates.len())
        .filter(|i| !versions[*i].is_empty() && fates[*i] > 3)
        .chain([1000, 1001])
        .collect();
    let answers = |store: &EventStore| -> Vec<_> {
        live.iter()
            .map(|i| {
                (
                    store.details(&key(*i)).unwrap(),
                    read_everything(store, &key(*i)),
                )
            })
            .collect()
    };
    let before = answers(&store);
    let bytes_before = log_bytes(&disk);
    let report = store
        .compact(CompactionPolicy {
            min_reclaimable_ratio: 0.0,
            ..CompactionPolicy::default()
        })
        .unwrap();
    let bytes_after = log_bytes(&disk);
    assert_eq!(bytes_before - bytes_after, report.bytes_reclaimed());
    assert!(
        report.bytes_reclaimed() >= dead_value_bytes,
        "reclaimed {} of {dead_value_bytes} dead value bytes: {report:?}",
        report.bytes_reclaimed()
    );
    assert_eq!(answers(&store), before);
    for shard in 0..SHARDS {
        assert_eq!(
            store.verify_chain(shard).unwrap(),
            store.chain_tip(shard).unwrap()
        );
    }
    disk.crash();
    drop(store);
    let store = EventStore::open(Arc::new(disk.clone()), config).unwrap().0;
    assert_eq!(log_bytes(&disk), bytes_after);
    assert_eq!(answers(&store), before);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn compaction_shrinks_the_logs_after_most_data_dies(
        sizes in prop::collection::vec(100usize..700, 20..80),
        fates in prop::collection::vec(prop_oneof![8 => 0u8..8, 2 => 8u8..10], 20),
    ) {
        shrink_after_most_data_dies(&sizes, &fates);
    }
}
