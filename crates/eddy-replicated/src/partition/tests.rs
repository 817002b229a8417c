//! Three members of one partition group, each on its own Raft thread over real files in a
//! temporary directory: produce through the leader, lose the leader, produce through the next
//! one, restart the lost member from its directory, and every member serves the same messages
//! at the same offsets, each body stored once per member (the Raft log is the partition log).

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use eddy_consensus::logstore::{RaftLog, Replicated};
use eddy_consensus::{GroupId, NodeId, ProposeError, Runner};
use eddy_log::{Cache, CommitPool, FsBackend, LogConfig, StorageBackend};
use eddy_stream_store::replicated::{ApplyOutcome, PartitionEntry};
use eddy_stream_store::{PartitionAddr, PollStrategy};

use super::{PartitionGroup, PartitionMachine};
use crate::testkit;

const G: GroupId = GroupId(7);
const ADDR: PartitionAddr = PartitionAddr {
    stream_id: 1,
    topic_id: 1,
    partition_id: 1,
};

type Peers = testkit::Peers<ApplyOutcome>;

struct Member {
    runner: Runner<ApplyOutcome>,
    group: PartitionGroup,
}

fn open_member(id: NodeId, root: &Path, peers: &Peers, pool: &CommitPool) -> Member {
    let backend: Arc<dyn StorageBackend> = Arc::new(FsBackend::new(root).unwrap());
    let raft_log = RaftLog::open(
        Arc::clone(&backend),
        PathBuf::from(format!("node-{id}")),
        LogConfig {
            segment_size: 64 * 1024,
            ..LogConfig::default()
        },
        pool,
        Arc::new(Cache::new(1 << 20)),
    )
    .unwrap();
    let (machine, group) =
        PartitionMachine::open(ADDR, raft_log.log().clone(), backend, raft_log.dir()).unwrap();
    let store = Replicated::open(raft_log, machine).unwrap();
    let runner = testkit::spawn(id, 3, peers, false);
    let (tx, rx) = mpsc::channel();
    runner.add_group(
        G,
        Box::new(store),
        Box::new(move |r| tx.send(r.is_ok()).unwrap()),
    );
    assert!(rx.recv().unwrap());
    Member { runner, group }
}

fn leader(peers: &Peers) -> NodeId {
    testkit::leader(peers, G)
}

/// Stamps `body` as the next batch of `count` messages on the leader and proposes it; returns
/// the outcome once committed and applied (what the producer's acknowledgement carries).
fn produce(member: &Member, count: u32, body: &[u8]) -> Result<ApplyOutcome, ProposeError> {
    let stamp = member.group.predict([]);
    let entry = PartitionEntry::Append {
        base_offset: stamp.next_offset,
        message_count: count,
        timestamp: stamp.min_timestamp.max(1_000),
        batch: Bytes::copy_from_slice(body),
    }
    .encode()
    .unwrap();
    let (tx, rx) = mpsc::channel();
    member.runner.propose(
        G,
        entry,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

/// Every batch a member serves from offset 0: (base offset, count, bytes).
fn served(group: &PartitionGroup) -> Vec<(u64, u32, Bytes)> {
    let polled = group
        .partition()
        .poll(PollStrategy::Offset(0), 1_000, None, u64::MAX)
        .unwrap();
    polled
        .batches
        .into_iter()
        .map(|b| (b.base_offset, b.message_count, b.bytes))
        .collect()
}

fn wait_for(group: &PartitionGroup, want: &[(u64, u32, Bytes)]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = served(group);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "member serves {got:?}, want {want:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Bytes in the segment files under `dir` (all `*.log` files).
fn segment_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

#[test]
fn a_partition_group_survives_its_leader_and_a_restart_with_one_copy_per_member() {
    let tmp = tempfile::tempdir().unwrap();
    let pool = CommitPool::new(2).unwrap();
    let peers: Peers = Arc::new(Mutex::new(vec![None, None, None]));
    let mut members: Vec<Option<Member>> = Vec::new();
    for id in 1..=3 {
        let m = open_member(id, tmp.path(), &peers, &pool);
        peers.lock().unwrap()[usize::try_from(id - 1).unwrap()] = Some(m.runner.clone());
        members.push(Some(m));
    }
    let idx = |id: NodeId| usize::try_from(id - 1).unwrap();

    let first = leader(&peers);
    let mut want = Vec::new();
    let mut offset = 0;
    for i in 0..20u8 {
        let body = vec![i; 2_000];
        let ack = produce(members[idx(first)].as_ref().unwrap(), 4, &body).unwrap();
        assert_eq!(
            ack,
            ApplyOutcome::Appended {
                base_offset: offset,
                message_count: 4,
                timestamp: 1_000
            }
        );
        want.push((offset, 4, Bytes::from(body)));
        offset += 4;
    }
    for m in members.iter().flatten() {
        wait_for(&m.group, &want);
    }
    // One copy of each body per member: the Raft log is the partition log.
    let bodies: u64 = 20 * 2_000;
    for id in 1..=3 {
        let on_disk = segment_bytes(&tmp.path().join(format!("node-{id}")));
        assert!(
            on_disk >= bodies && on_disk < bodies + bodies / 5,
            "node {id} holds {on_disk} segment bytes for {bodies} bytes of bodies"
        );
    }

    // The leader's process dies: the others elect a leader and keep producing.
    let lost = members[idx(first)].take().unwrap();
    lost.runner.stop();
    peers.lock().unwrap()[idx(first)] = None;
    drop(lost);
    let second = leader(&peers);
    assert_ne!(second, first);
    for i in 20..30u8 {
        let body = vec![i; 1_000];
        let ack = produce(members[idx(second)].as_ref().unwrap(), 1, &body).unwrap();
        assert!(
            matches!(ack, ApplyOutcome::Appended { base_offset, .. } if base_offset == offset),
            "{ack:?}"
        );
        want.push((offset, 1, Bytes::from(body)));
        offset += 1;
    }

    // The lost member restarts from its directory, catches up, and serves the same messages.
    let back = open_member(first, tmp.path(), &peers, &pool);
    peers.lock().unwrap()[idx(first)] = Some(back.runner.clone());
    members[idx(first)] = Some(back);
    for m in members.iter().flatten() {
        wait_for(&m.group, &want);
    }

    // A stale prediction (a batch stamped before the one that won) is refused on every member
    // alike and changes nothing.
    let leader_now = members[idx(leader(&peers))].as_ref().unwrap();
    let stale = PartitionEntry::Append {
        base_offset: 3,
        message_count: 1,
        timestamp: 1_000,
        batch: Bytes::from_static(b"late"),
    }
    .encode()
    .unwrap();
    let (tx, rx) = mpsc::channel();
    leader_now.runner.propose(
        G,
        stale,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    let refused = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert!(
        matches!(refused, ApplyOutcome::Refused { expected_offset, .. } if expected_offset == offset),
        "{refused:?}"
    );
    for m in members.iter().flatten() {
        wait_for(&m.group, &want);
    }
    for m in members.iter().flatten() {
        m.runner.stop();
    }
}

fn machine_in(
    root: &Path,
    name: &str,
    pool: &CommitPool,
) -> (RaftLog, PartitionMachine, PartitionGroup) {
    let backend: Arc<dyn StorageBackend> = Arc::new(FsBackend::new(root).unwrap());
    let raft_log = RaftLog::open(
        Arc::clone(&backend),
        PathBuf::from(name),
        LogConfig::default(),
        pool,
        Arc::new(Cache::new(1 << 20)),
    )
    .unwrap();
    let (machine, group) =
        PartitionMachine::open(ADDR, raft_log.log().clone(), backend, raft_log.dir()).unwrap();
    (raft_log, machine, group)
}

#[test]
fn an_installed_snapshot_is_where_a_restart_resumes() {
    use eddy_consensus::logstore::StateMachine as _;
    use eddy_consensus::{EntryKind, LogEntry};

    let tmp = tempfile::tempdir().unwrap();
    let pool = CommitPool::new(1).unwrap();
    // The source: three batches of 5 messages at indexes 1..=3, term 2.
    let (source_log, mut source, source_group) = machine_in(tmp.path(), "source", &pool);
    for index in 1..=3u64 {
        let data = PartitionEntry::Append {
            base_offset: (index - 1) * 5,
            message_count: 5,
            timestamp: 10 * index,
            batch: Bytes::from(vec![1u8; 100]),
        }
        .encode()
        .unwrap();
        source_log
            .log()
            .append_assigned(index, 10 * index, 1, 2, data.clone())
            .unwrap()
            .wait()
            .unwrap();
        let entry = LogEntry {
            index,
            term: 2,
            kind: EntryKind::Normal,
            data,
        };
        assert!(matches!(
            source.apply(&entry),
            ApplyOutcome::Appended { .. }
        ));
    }
    let snapshot = source.snapshot().unwrap();
    assert_eq!((snapshot.meta.index, snapshot.meta.term), (3, 2));
    assert_eq!(source_group.partition().stats().next_offset, 15);

    // A member that needs it installs it on its empty log; a restart resumes there.
    let (target_log, mut target, target_group) = machine_in(tmp.path(), "target", &pool);
    target.install_snapshot(&snapshot).unwrap();
    assert_eq!(target.applied(), snapshot.meta);
    assert_eq!(target_group.predict([]).next_offset, 15);
    drop((target, target_group, target_log));
    let (_log, reopened, group) = machine_in(tmp.path(), "target", &pool);
    assert_eq!(reopened.applied(), snapshot.meta);
    assert_eq!(group.predict([]).next_offset, 15);

    // Bytes that are not a partition snapshot are refused and change nothing.
    let (_other_log, mut other, _) = machine_in(tmp.path(), "other", &pool);
    let bogus = eddy_consensus::Snapshot {
        meta: snapshot.meta,
        data: Bytes::from_static(b"not a snapshot"),
    };
    assert!(other.install_snapshot(&bogus).is_err());
    assert_eq!(other.applied().index, 0);
}

#[test]
fn proposals_stamp_each_append_after_those_not_yet_answered() {
    use eddy_codec::stream::{admit, build_batch, Message};

    let tmp = tempfile::tempdir().unwrap();
    let pool = CommitPool::new(1).unwrap();
    let (_log, _machine, group) = machine_in(tmp.path(), "proposals", &pool);
    let batch = |count: u32| {
        let messages: Vec<Message> = (0..count)
            .map(|i| Message {
                id: u128::from(i) + 1,
                origin_timestamp: 0,
                payload: Bytes::from_static(b"m"),
                user_headers: Bytes::new(),
            })
            .collect();
        crate::stream::Stampable(admit(build_batch(&messages).unwrap(), count).unwrap())
    };
    let mut proposals = super::Proposals::<PartitionAddr, u64>::default();
    let first = proposals.stamp(ADDR, 1, &group, batch(3), 100).unwrap();
    let second = proposals.stamp(ADDR, 2, &group, batch(2), 100).unwrap();
    assert_eq!((first.base_offset, second.base_offset), (0, 3));
    assert_eq!(proposals.waiting(ADDR), 2);
    // The first was lost with a leadership change: the second, stamped after it, will be
    // refused as stale, so the next stamp takes the first's place.
    proposals.answered(ADDR, &1);
    let third = proposals.stamp(ADDR, 3, &group, batch(1), 100).unwrap();
    assert_eq!(third.base_offset, 0);
    proposals.answered(ADDR, &2);
    proposals.answered(ADDR, &3);
    assert_eq!(proposals.waiting(ADDR), 0);
    let after = proposals.stamp(ADDR, 4, &group, batch(1), 100).unwrap();
    assert_eq!(after.base_offset, 0, "nothing applied, nothing waiting");
    proposals.clear();
    assert_eq!(proposals.waiting(ADDR), 0);
}
