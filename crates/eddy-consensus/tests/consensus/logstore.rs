//! The on-disk group store, [`Replicated`] over an eddy-log directory, against the engine's
//! storage contract: entries, terms and hard state survive reopens; a conflicting suffix is
//! replaced; a snapshot resets the log; compaction goes only through what the machine keeps
//! and writes its boundary first; a crash loses only unsynced entries; a crash inside a
//! snapshot installation is finished at open. The node's upkeep cadence is checked here too.
//! The three-node cluster over real directories is in `logstore_cluster.rs`.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use eddy_consensus::testing::{ListMachine, MachineDisk, MemDisk, MemStore};
use eddy_consensus::{
    EntryKind, GroupId, GroupStore, HardState, LogEntry, Node, NodeConfig, RaftLog, Replicated,
    Snapshot, SnapshotMeta, StateMachine, StoreError, WrapStore,
};
use eddy_log::{Cache, CommitPool, Durability, LogConfig, MemBackend};

fn small() -> LogConfig {
    LogConfig {
        segment_size: 1024,
        index_interval: 256,
        ..LogConfig::default()
    }
}

/// A group's disks: its directory's backend and its machine's durable snapshot.
struct Disks {
    mem: MemBackend,
    machine: MachineDisk,
    pool: CommitPool,
    config: LogConfig,
}

impl Disks {
    fn new(config: LogConfig) -> Self {
        Disks {
            mem: MemBackend::new(),
            machine: MachineDisk::new(),
            pool: CommitPool::new(1).unwrap(),
            config,
        }
    }

    fn open(&self) -> Replicated<ListMachine> {
        self.try_open().unwrap()
    }

    fn try_open(&self) -> Result<Replicated<ListMachine>, StoreError> {
        Replicated::open(self.raft_log()?, ListMachine::open(self.machine.clone()))
    }

    /// The group's Raft log, for a store over another machine.
    fn raft_log(&self) -> Result<RaftLog, StoreError> {
        RaftLog::open(
            Arc::new(self.mem.clone()),
            "g1",
            self.config,
            &self.pool,
            Arc::new(Cache::new(1 << 20)),
        )
    }
}

fn entries(first: u64, last: u64, term: u64) -> Vec<LogEntry> {
    (first..=last)
        .map(|index| LogEntry {
            index,
            term,
            kind: EntryKind::Normal,
            data: Bytes::from(format!("e{index}t{term}")),
        })
        .collect()
}

/// Appends and waits for the durability report.
fn append(store: &mut dyn GroupStore<Outcome = u64>, batch: Vec<LogEntry>) {
    let (tx, rx) = mpsc::channel();
    store.append(batch, Box::new(move |r| tx.send(r.is_ok()).unwrap()));
    assert!(rx.recv().unwrap(), "append failed");
}

/// (index, term) of every entry the store serves.
fn log_of(store: &dyn GroupStore<Outcome = u64>) -> Vec<(u64, u64)> {
    let (first, last) = (store.first_index(), store.last_index());
    if last < first {
        return Vec::new();
    }
    let got = store.entries(first, last + 1, u64::MAX).unwrap();
    for e in &got {
        assert_eq!(store.term(e.index).unwrap(), e.term);
        assert_eq!(e.data, Bytes::from(format!("e{}t{}", e.index, e.term)));
    }
    got.iter().map(|e| (e.index, e.term)).collect()
}

fn terms(ranges: &[(u64, u64, u64)]) -> Vec<(u64, u64)> {
    ranges
        .iter()
        .flat_map(|&(a, b, t)| (a..=b).map(move |i| (i, t)))
        .collect()
}

#[test]
fn entries_terms_and_hard_state_survive_a_reopen() {
    let d = Disks::new(small());
    let mut store = d.open();
    assert_eq!((store.first_index(), store.last_index()), (1, 0));
    append(&mut store, entries(1, 10, 1));
    append(&mut store, entries(11, 40, 2));
    let hard = HardState {
        term: 2,
        vote: 3,
        commit: 12,
    };
    store.save_hard_state(hard, true).unwrap();
    assert_eq!(store.term(0).unwrap(), 0);
    assert!(matches!(
        store.term(41),
        Err(StoreError::Unavailable { index: 41, .. })
    ));
    // Byte limits: at least one entry, never past the limit after the first.
    let one = store.entries(5, 41, 1).unwrap();
    assert_eq!(one.len(), 1);
    let some = store.entries(5, 41, 3 * one[0].size()).unwrap();
    assert_eq!(some.len(), 3);
    drop(store);
    d.mem.crash();
    let store = d.open();
    assert_eq!(store.hard_state(), hard);
    assert_eq!(log_of(&store), terms(&[(1, 10, 1), (11, 40, 2)]));
    assert!(
        store.raft_log().log().segments().len() > 1,
        "segments rolled"
    );
    // A commit-only change is not written by itself (it is trusted only up to applied).
    let mut store = store;
    store
        .save_hard_state(HardState { commit: 30, ..hard }, true)
        .unwrap();
    drop(store);
    assert_eq!(d.open().hard_state(), hard);
}

#[test]
fn a_conflicting_suffix_is_replaced_in_the_active_segment_and_across_segments() {
    let d = Disks::new(small());
    let mut store = d.open();
    append(&mut store, entries(1, 60, 1));
    append(&mut store, entries(58, 61, 2));
    assert_eq!(log_of(&store), terms(&[(1, 57, 1), (58, 61, 2)]));
    let segments = store.raft_log().log().segments();
    let cut = segments[1].base + 2;
    append(&mut store, entries(cut, cut + 1, 3));
    assert_eq!(log_of(&store), terms(&[(1, cut - 1, 1), (cut, cut + 1, 3)]));
    assert!(store.raft_log().log().segments().len() < segments.len());
    drop(store);
    d.mem.crash();
    let mut store = d.open();
    assert_eq!(log_of(&store), terms(&[(1, cut - 1, 1), (cut, cut + 1, 3)]));
    // An append that would leave a hole is refused.
    let (tx, rx) = mpsc::channel();
    store.append(
        entries(cut + 5, cut + 5, 3),
        Box::new(move |r| tx.send(r).unwrap()),
    );
    assert!(matches!(
        rx.recv().unwrap(),
        Err(StoreError::Unavailable { .. })
    ));
}

#[test]
fn a_snapshot_resets_the_log_and_the_machine() {
    let d = Disks::new(small());
    let mut store = d.open();
    append(&mut store, entries(1, 30, 1));
    for e in entries(1, 5, 1) {
        store.apply(&e);
    }
    let snapshot = Snapshot {
        meta: SnapshotMeta { index: 50, term: 3 },
        data: Bytes::new(),
    };
    store.install_snapshot(&snapshot).unwrap();
    let check = |store: &Replicated<ListMachine>| {
        assert_eq!(store.snapshot_meta(), snapshot.meta);
        assert_eq!((store.first_index(), store.last_index()), (51, 50));
        assert_eq!(store.applied_index(), 50);
        assert_eq!(store.term(50).unwrap(), 3);
        assert!(matches!(
            store.term(30),
            Err(StoreError::Compacted { first_index: 51 })
        ));
        assert!(matches!(
            store.entries(20, 30, u64::MAX),
            Err(StoreError::Compacted { .. })
        ));
        assert!(store.machine().applied_list().get().is_empty());
    };
    check(&store);
    drop(store);
    d.mem.crash();
    let mut store = d.open();
    check(&store);
    append(&mut store, entries(51, 55, 3));
    assert_eq!(log_of(&store), terms(&[(51, 55, 3)]));
}

#[test]
fn compaction_goes_through_what_the_machine_keeps_and_deletes_sealed_segments() {
    let d = Disks::new(small());
    let mut store = d.open();
    append(&mut store, entries(1, 200, 1));
    for e in entries(1, 180, 1) {
        store.apply(&e);
    }
    let segments = store.raft_log().log().segments().len();
    // Not asked: nothing happens.
    store.maintain(0).unwrap();
    assert_eq!(store.first_index(), 1);
    // Asked beyond what is applied: clamped to the applied index.
    d.machine.request_compaction(150);
    store.maintain(0).unwrap();
    assert_eq!(
        d.machine.snapshot_meta().index,
        180,
        "state persisted first"
    );
    assert_eq!(
        store.snapshot_meta(),
        SnapshotMeta {
            index: 150,
            term: 1
        }
    );
    assert_eq!(store.first_index(), 151);
    assert!(store.raft_log().log().segments().len() < segments);
    assert!(matches!(
        store.entries(150, 160, u64::MAX),
        Err(StoreError::Compacted { .. })
    ));
    assert_eq!(store.entries(151, 152, u64::MAX).unwrap()[0].index, 151);
    drop(store);
    d.mem.crash();
    // The machine resumes from what it persisted; the engine re-applies the rest.
    let store = d.open();
    assert_eq!(store.first_index(), 151);
    assert_eq!(store.applied_index(), 180);
    assert_eq!(store.machine().applied_list().get().len(), 180);
    assert_eq!(log_of(&store), terms(&[(151, 200, 1)]));
}

#[test]
fn a_compaction_whose_boundary_cannot_be_written_deletes_nothing() {
    let d = Disks::new(small());
    let mut store = d.open();
    append(&mut store, entries(1, 100, 1));
    for e in entries(1, 100, 1) {
        store.apply(&e);
    }
    let segments = store.raft_log().log().segments();
    d.machine.request_compaction(90);
    d.mem.fail_syncs(1); // the boundary's write fails
    assert!(store.maintain(0).is_err());
    assert_eq!(store.raft_log().log().segments(), segments);
    drop(store);
    d.mem.crash();
    let store = d.open();
    assert_eq!(store.first_index(), 1);
    assert_eq!(log_of(&store), terms(&[(1, 100, 1)]));
}

#[test]
fn a_crash_mid_append_loses_only_unsynced_entries_and_never_the_hard_state() {
    // Background durability: entries are written at once and synced by a flush, so a power
    // cut finds an unsynced tail, torn at every byte.
    let config = LogConfig {
        durability: Durability::Background {
            max_unsynced_records: 1 << 20,
            max_unsynced_bytes: 1 << 30,
        },
        ..small()
    };
    let mut keep = 0usize;
    loop {
        let d = Disks::new(config);
        let mut store = d.open();
        append(&mut store, entries(1, 20, 1));
        store.raft_log().log().flush().wait().unwrap();
        let hard = HardState {
            term: 2,
            vote: 2,
            commit: 20,
        };
        store.save_hard_state(hard, true).unwrap();
        append(&mut store, entries(18, 26, 2)); // replaces 18..=20, then unsynced
        let mut longest = 0;
        d.mem.crash_with(|path, tail| {
            if path.extension().is_some_and(|e| e == "log") {
                longest = longest.max(tail.len());
            }
            tail[..keep.min(tail.len())].to_vec()
        });
        drop(store);
        let store = d.open();
        assert_eq!(store.hard_state(), hard, "keep {keep}");
        let got = log_of(&store);
        let last = store.last_index();
        assert!((17..=26).contains(&last), "keep {keep}: {got:?}");
        let want = if last <= 17 {
            terms(&[(1, 17, 1)])
        } else {
            terms(&[(1, 17, 1), (18, last, 2)])
        };
        assert_eq!(got, want, "keep {keep}");
        if keep >= longest {
            assert_eq!(last, 26);
            break;
        }
        keep += 5;
    }
}

#[test]
fn a_crash_inside_a_snapshot_installation_is_finished_at_open() {
    let d = Disks::new(small());
    let mut store = d.open();
    append(&mut store, entries(1, 40, 1));
    for e in entries(1, 10, 1) {
        store.apply(&e);
    }
    drop(store);
    // The machine installed a snapshot at 60 durably; the crash came before the log was
    // reset and before raft.state recorded the boundary.
    let mut machine = ListMachine::open(d.machine.clone());
    let state = Snapshot {
        meta: SnapshotMeta { index: 60, term: 4 },
        data: Bytes::new(),
    };
    machine.install_snapshot(&state).unwrap();
    let store = d.open();
    assert_eq!(store.snapshot_meta(), state.meta);
    assert_eq!((store.first_index(), store.last_index()), (61, 60));
    assert_eq!(store.applied_index(), 60);
    // A machine behind the log's boundary cannot resume: refused, not papered over.
    let d2 = Disks::new(small());
    {
        let mut store = d2.open();
        append(&mut store, entries(1, 100, 1));
        for e in entries(1, 100, 1) {
            store.apply(&e);
        }
        d2.machine.request_compaction(80);
        store.maintain(0).unwrap();
    }
    let lost = Disks {
        mem: d2.mem.clone(),
        machine: MachineDisk::new(),
        pool: CommitPool::new(1).unwrap(),
        config: small(),
    };
    assert!(lost.try_open().is_err());
}

/// Counts upkeep calls on a MemStore.
struct Counting {
    inner: MemStore,
    calls: Arc<Mutex<Vec<u64>>>,
}

impl WrapStore for Counting {
    type Inner = MemStore;
    fn inner(&self) -> &MemStore {
        &self.inner
    }
    fn inner_mut(&mut self) -> &mut MemStore {
        &mut self.inner
    }
    fn wrap_maintain(&mut self, now_us: u64) -> Result<(), StoreError> {
        self.calls.lock().unwrap().push(now_us);
        if now_us == 666 {
            return Err(StoreError::SnapshotTemporarilyUnavailable);
        }
        Ok(())
    }
}

#[test]
fn the_node_maintains_each_group_about_once_per_maintain_ticks() {
    for groups in [1u64, 3, 25] {
        let mut config = NodeConfig::new(1, vec![1]);
        config.maintain_ticks = 5;
        let mut node: Node<u64> = Node::new(config, || {});
        let calls: Vec<Arc<Mutex<Vec<u64>>>> = (0..groups)
            .map(|g| {
                let calls = Arc::new(Mutex::new(Vec::new()));
                let store = Counting {
                    inner: MemStore::open(MemDisk::new()),
                    calls: Arc::clone(&calls),
                };
                node.add_group(GroupId(g), Box::new(store)).unwrap();
                calls
            })
            .collect();
        for t in 0..100u64 {
            node.tick_at(t * 1000);
            node.process();
        }
        for (g, c) in calls.iter().enumerate() {
            let n = c.lock().unwrap().len();
            assert!(
                (15..=25).contains(&n),
                "{groups} groups: group {g} maintained {n} times"
            );
        }
    }
    // An upkeep failure fails the group.
    let mut node: Node<u64> = Node::new(NodeConfig::new(1, vec![1]), || {});
    let calls = Arc::new(Mutex::new(Vec::new()));
    let store = Counting {
        inner: MemStore::open(MemDisk::new()),
        calls: Arc::clone(&calls),
    };
    node.add_group(GroupId(1), Box::new(store)).unwrap();
    for _ in 0..20 {
        node.tick_at(666);
        node.process();
    }
    assert!(node.status(GroupId(1)).unwrap().failed);
    assert_eq!(
        calls.lock().unwrap().len(),
        1,
        "a failed group is not maintained"
    );
}

/// A machine that can no longer apply on this member (`StateMachine::health`) fails its
/// store's upkeep, which fails the group here as a failed log write does.
#[test]
fn an_unhealthy_machine_fails_the_upkeep() {
    struct Sick {
        inner: ListMachine,
        sick: Arc<std::sync::atomic::AtomicBool>,
    }
    impl StateMachine for Sick {
        type Outcome = u64;
        fn applied(&self) -> SnapshotMeta {
            self.inner.applied()
        }
        fn apply(&mut self, entry: &LogEntry) -> u64 {
            self.inner.apply(entry)
        }
        fn snapshot(&self) -> Result<Snapshot, StoreError> {
            self.inner.snapshot()
        }
        fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
            self.inner.install_snapshot(snapshot)
        }
        fn health(&self) -> Result<(), StoreError> {
            if self.sick.load(std::sync::atomic::Ordering::Acquire) {
                return Err(StoreError::Storage("stopped after a failed write".into()));
            }
            Ok(())
        }
    }
    let disks = Disks::new(small());
    let log = disks.raft_log().unwrap();
    let sick = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let machine = Sick {
        inner: ListMachine::open(disks.machine.clone()),
        sick: Arc::clone(&sick),
    };
    let mut store = Replicated::open(log, machine).unwrap();
    store.maintain(0).unwrap();
    sick.store(true, std::sync::atomic::Ordering::Release);
    let e = store.maintain(0).unwrap_err();
    assert!(
        e.to_string().contains("failed write") || format!("{e:?}").contains("failed write"),
        "{e:?}"
    );
}
