//! Event shard groups on three in-process members over real files, with a network that can
//! cut a member off: every member applies the same committed changes with the same answers,
//! and a leader cut off from its majority neither acknowledges nor ever shows the writes it
//! proposed alone; back with the others it drops them and takes the majority's.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use eddy_consensus::{Node, NodeConfig, NodeId, ProposeError, Role, Runner};
use eddy_event_store::replicated::Applied;
use eddy_event_store::{
    AggregateKey, AggregateWrite, EventStore, EventStoreConfig, NewEvent, ReadQuery, WriteRequest,
};
use eddy_log::{Cache, CommitPool, FsBackend, LogConfig, StorageBackend};

use super::{event_group_id, open_shard_group, EventApplied, EventCompaction};
use crate::cluster::raft_groups::{ClusterOutcome, GroupStorage};
use crate::cluster::testkit::{eventually, TICK};

const K: AggregateKey = AggregateKey::new(1, 2, 3);

/// Members by id - 1, and the members cut off from every other.
#[derive(Clone, Default)]
struct Net {
    runners: Arc<Mutex<Vec<Option<Runner<ClusterOutcome>>>>>,
    cut: Arc<Mutex<BTreeSet<NodeId>>>,
}

struct Member {
    runner: Runner<ClusterOutcome>,
    store: Arc<EventStore>,
}

fn open(id: NodeId, root: &std::path::Path, net: &Net, pool: &CommitPool) -> Member {
    let dir = root.join(format!("node-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let backend: Arc<dyn StorageBackend> = Arc::new(FsBackend::new(&dir).unwrap());
    let cache = Arc::new(Cache::new(1 << 20));
    let config = EventStoreConfig {
        num_shards: 1,
        ..EventStoreConfig::default()
    };
    let store = Arc::new(
        EventStore::open_shared(Arc::clone(&backend), config, pool, Arc::clone(&cache))
            .unwrap()
            .0,
    );
    let storage = GroupStorage {
        backend,
        pool: pool.clone(),
        cache,
        log: LogConfig::default(),
        cipher: None,
    };
    let group = open_shard_group(&storage, &store, 0, EventCompaction::every(100_000)).unwrap();
    let out = net.clone();
    let runner = Runner::spawn(
        &format!("raft-{id}"),
        move |wake| Node::new(NodeConfig::new(id, vec![1, 2, 3]), wake),
        TICK,
        Box::new(move |to, batch| {
            let cut = out.cut.lock().unwrap();
            if cut.contains(&id) || cut.contains(&to) {
                return;
            }
            drop(cut);
            let target = out.runners.lock().unwrap()[usize::try_from(to - 1).unwrap()].clone();
            if let Some(r) = target {
                r.receive(id, batch);
            }
        }),
        Box::new(|_| {}),
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    runner.add_group(
        event_group_id(0),
        Box::new(group),
        Box::new(move |r| tx.send(r.is_ok()).unwrap()),
    );
    assert!(rx.recv().unwrap());
    net.runners.lock().unwrap()[usize::try_from(id - 1).unwrap()] = Some(runner.clone());
    Member { runner, store }
}

fn write(store: &EventStore, expected: u64, text: &str) -> Bytes {
    let request = WriteRequest {
        client_id: 9,
        user_id: None,
        writes: vec![AggregateWrite {
            key: K,
            events: vec![NewEvent {
                client_seq: expected + 1,
                event_id: None,
                event_timestamp: 1,
                event_type_major: 1,
                event_type_minor: 0,
                value: Bytes::copy_from_slice(text.as_bytes()),
                iv: None,
            }],
            allow_create: true,
            expected_version: Some(expected),
            enforce_client_idempotency: true,
        }],
        now: 1_000 + expected,
    };
    store.prepare_write(request).unwrap().1.encode()
}

type Answer = Result<Result<Applied, String>, ProposeError>;

/// Proposes on `m` and returns a slot the answer lands in once applied (or refused).
fn propose(m: &Member, data: Bytes) -> Arc<Mutex<Option<Answer>>> {
    let slot = Arc::new(Mutex::new(None));
    let out = Arc::clone(&slot);
    m.runner.propose(
        event_group_id(0),
        data,
        Box::new(move |r| match r {
            // Waited for off the Raft thread (the record's group commit runs on the pool).
            Ok(ClusterOutcome::Event(EventApplied::Applied(done))) => {
                std::thread::spawn(move || {
                    *out.lock().unwrap() = Some(Ok(done.wait().map_err(|e| format!("{e:?}"))));
                });
            }
            Ok(other) => *out.lock().unwrap() = Some(Ok(Err(format!("{other:?}")))),
            Err(e) => *out.lock().unwrap() = Some(Err(e)),
        }),
    );
    slot
}

/// The events of K a member shows: one string per version.
fn shown(m: &Member) -> Vec<String> {
    match m.store.read(&K, &ReadQuery::default()) {
        Ok(page) => page
            .batches
            .iter()
            .flat_map(|b| b.events.iter())
            .map(|e| String::from_utf8_lossy(&e.value).into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn leader_of(members: &[Member], among: &[NodeId]) -> NodeId {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for &id in among {
            let m = &members[usize::try_from(id - 1).unwrap()];
            if m.runner
                .view()
                .get(event_group_id(0))
                .is_some_and(|v| v.role == Role::Leader)
            {
                return id;
            }
        }
        assert!(Instant::now() < deadline, "no leader among {among:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn an_isolated_leaders_uncommitted_event_writes_never_become_visible() {
    let dir = tempfile::tempdir().unwrap();
    let pool = CommitPool::new(2).unwrap();
    let net = Net::default();
    *net.runners.lock().unwrap() = vec![None, None, None];
    let members: Vec<Member> = (1..=3)
        .map(|id| open(id, dir.path(), &net, &pool))
        .collect();
    let at = |id: NodeId| &members[usize::try_from(id - 1).unwrap()];

    let first = leader_of(&members, &[1, 2, 3]);
    let w1 = propose(at(first), write(&at(first).store, 0, "one"));
    eventually(
        || w1.lock().unwrap().is_some(),
        || "first write not answered".into(),
    );
    assert!(matches!(
        *w1.lock().unwrap(),
        Some(Ok(Ok(Applied::Write(_))))
    ));
    eventually(
        || members.iter().all(|m| shown(m) == ["one"]),
        || "every member shows the first write".into(),
    );

    // The leader is cut off; what it proposes alone is never acknowledged.
    net.cut.lock().unwrap().insert(first);
    let lost = propose(at(first), write(&at(first).store, 1, "lost"));
    let others: Vec<NodeId> = (1..=3).filter(|&i| i != first).collect();
    let second = leader_of(&members, &others);
    let kept = propose(at(second), write(&at(second).store, 1, "kept"));
    eventually(
        || kept.lock().unwrap().is_some(),
        || "the majority's write not answered".into(),
    );
    assert!(matches!(
        *kept.lock().unwrap(),
        Some(Ok(Ok(Applied::Write(_))))
    ));
    // An OCC write on the majority that expects the lost write's version is refused alike on
    // every member of the majority.
    let stale = propose(at(second), write(&at(second).store, 5, "stale"));
    eventually(
        || stale.lock().unwrap().is_some(),
        || "stale write not answered".into(),
    );
    assert!(
        matches!(&*stale.lock().unwrap(), Some(Ok(Err(e))) if e.contains("VersionConflict")),
        "{:?}",
        stale.lock().unwrap()
    );
    assert!(lost.lock().unwrap().is_none() || !matches!(*lost.lock().unwrap(), Some(Ok(Ok(_)))));
    assert_eq!(
        shown(at(first)),
        ["one"],
        "the cut-off leader shows nothing uncommitted"
    );

    // Healed: the old leader drops its uncommitted write and takes the majority's.
    net.cut.lock().unwrap().clear();
    let deadline = Instant::now() + Duration::from_secs(10);
    while shown(at(first)) != ["one", "kept"] {
        assert!(
            !shown(at(first)).contains(&"lost".to_owned()),
            "an uncommitted write became visible"
        );
        assert!(
            Instant::now() < deadline,
            "the old leader shows {:?}",
            shown(at(first))
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    eventually(
        || members.iter().all(|m| shown(m) == ["one", "kept"]),
        || {
            format!(
                "members show {:?}",
                members.iter().map(shown).collect::<Vec<_>>()
            )
        },
    );
    let tips: Vec<[u8; 32]> = members
        .iter()
        .map(|m| m.store.chain_tip(0).unwrap())
        .collect();
    assert!(
        tips.windows(2).all(|w| w[0] == w[1]),
        "the same chain everywhere"
    );
    assert!(
        !matches!(*lost.lock().unwrap(), Some(Ok(Ok(_)))),
        "the lost write was never acknowledged: {:?}",
        lost.lock().unwrap()
    );
    for m in &members {
        m.runner.stop();
    }
}

#[test]
fn a_forwarded_answer_tells_a_refusal_from_a_member_that_does_not_lead() {
    use super::{decode_forward_answer, forward_not_leader, forward_refusal, EventClusterError};
    // Nothing proposed: the forwarding member may send the change again.
    assert!(matches!(
        decode_forward_answer(&forward_not_leader()),
        Err(EventClusterError::NotLeader {
            leader_address: None
        })
    ));
    // Taken and refused, or not understood: never sent again.
    assert!(matches!(
        decode_forward_answer(&forward_refusal("full")),
        Err(EventClusterError::Unavailable(why)) if why.contains("full")
    ));
    for malformed in [&[][..], &[0, 1][..], &[3][..]] {
        assert!(matches!(
            decode_forward_answer(&Bytes::copy_from_slice(malformed)),
            Err(EventClusterError::Unavailable(_))
        ));
    }
}

/// A follower's apply is waited on by nobody: when its shard log refuses the record (a full
/// disk), the machine must still notice, before queueing the next entry's record behind the
/// hole, and stop applying (its group fails on this member until a restart).
#[test]
fn a_shard_whose_log_drops_an_applied_record_stops_applying() {
    use eddy_consensus::{EntryKind, LogEntry, StateMachine};
    use std::sync::atomic::{AtomicBool, Ordering};

    let disk = eddy_log::MemBackend::new();
    let backend: Arc<dyn StorageBackend> = Arc::new(disk.clone());
    let pool = CommitPool::new(1).unwrap();
    let cache = Arc::new(Cache::new(1 << 20));
    let config = EventStoreConfig {
        num_shards: 1,
        ..EventStoreConfig::default()
    };
    let store = Arc::new(
        EventStore::open_shared(Arc::clone(&backend), config, &pool, Arc::clone(&cache))
            .unwrap()
            .0,
    );
    let log = eddy_consensus::RaftLog::open_sealed(
        Arc::clone(&backend),
        std::path::PathBuf::from(super::EVENTS_DIR).join("shard-000"),
        LogConfig::default(),
        &pool,
        Arc::clone(&cache),
        None,
    )
    .unwrap();
    let mut machine = super::EventShardMachine::open(
        Arc::clone(&store),
        0,
        &log,
        Arc::clone(&backend),
        EventCompaction::every(100_000),
    )
    .unwrap();
    let entry = |index: u64, data: Bytes| LogEntry {
        index,
        term: 1,
        kind: EntryKind::Normal,
        data,
    };
    // The first record is stored; its outcome is dropped, as on a follower.
    assert!(matches!(
        machine.apply(&entry(1, write(&store, 0, "one"))),
        EventApplied::Applied(_)
    ));
    eventually(
        || store.read(&K, &ReadQuery::default()).is_ok(),
        || "the first record visible".into(),
    );
    // The shard's next segment write fails: the disk is full.
    let full = Arc::new(AtomicBool::new(true));
    let gate = Arc::clone(&full);
    disk.inject_faults(move |call, path| {
        let shard_log = path.to_string_lossy().contains("shard-000")
            && !path.to_string_lossy().contains(super::EVENTS_DIR);
        (call == eddy_log::FsCall::Append && shard_log && gate.load(Ordering::Acquire))
            .then(|| eddy_log::Errno::NoSpace.error())
    });
    let dropped = machine.apply(&entry(2, write(&store, 1, "two")));
    assert!(matches!(dropped, EventApplied::Applied(_)));
    drop(dropped);
    eventually(
        || store.shard_dropped_writes(0),
        || "the log refused the record".into(),
    );
    full.store(false, Ordering::Release);
    // The next entry is not queued behind the hole, and the group fails here.
    assert!(matches!(
        machine.apply(&entry(3, write(&store, 1, "three"))),
        EventApplied::Stopped
    ));
    assert!(machine.health().is_err());
    assert_eq!(
        store.read(&K, &ReadQuery::default()).unwrap().batches.len(),
        1
    );
}
