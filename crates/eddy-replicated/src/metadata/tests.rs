//! Three members of the metadata group, each on its own Raft thread over real files: metadata
//! operations go through the leader, conflicting ones are refused on every member alike, the
//! leader is lost and the next one goes on, a restarted member applies each entry exactly once,
//! and a member whose directory was wiped is rebuilt from a snapshot after the log it missed
//! was compacted away.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use eddy_consensus::logstore::{RaftLog, Replicated};
use eddy_consensus::{GroupId, NodeId, ProposeError, Runner};
use eddy_log::{Cache, CommitPool, FsBackend, LogConfig, StorageBackend};
use eddy_stream_store::metadata::{encode_op, Effect};
use eddy_stream_store::replicated_metadata::{MetadataApplied, MetadataView};
use eddy_stream_store::{MetadataOp, MetadataState};

use super::{EffectSink, MetadataMachine};
use crate::testkit;

const G: GroupId = GroupId(0);
/// Small, so the test crosses several snapshots and compactions.
const SNAPSHOT_EVERY: u64 = 8;

type Peers = testkit::Peers<MetadataApplied>;
type Seen = Arc<Mutex<Vec<(u64, Vec<Effect>)>>>;

/// Records every effect a member's machine passes on, and installs.
struct Recorder {
    seen: Seen,
    installs: Arc<Mutex<Vec<u64>>>,
}

impl EffectSink for Recorder {
    fn applied(&mut self, index: u64, effects: &[Effect]) {
        self.seen.lock().unwrap().push((index, effects.to_vec()));
    }
    fn installed(&mut self, index: u64, _view: &MetadataView) {
        self.installs.lock().unwrap().push(index);
    }
}

struct Member {
    runner: Runner<MetadataApplied>,
    view: MetadataView,
    seen: Seen,
    installs: Arc<Mutex<Vec<u64>>>,
}

fn open_member(id: NodeId, root: &Path, peers: &Peers, pool: &CommitPool, wiped: bool) -> Member {
    let backend: Arc<dyn StorageBackend> = Arc::new(FsBackend::new(root).unwrap());
    let raft_log = RaftLog::open(
        Arc::clone(&backend),
        PathBuf::from(format!("node-{id}/raft/0")),
        LogConfig {
            // Small segments, so compaction has sealed segments to delete.
            segment_size: 4 * 1024,
            ..LogConfig::default()
        },
        pool,
        Arc::new(Cache::new(1 << 20)),
    )
    .unwrap();
    let seen: Seen = Arc::default();
    let installs = Arc::new(Mutex::new(Vec::new()));
    let (machine, view) = MetadataMachine::open(
        backend,
        raft_log.dir().to_path_buf(),
        SNAPSHOT_EVERY,
        Box::new(Recorder {
            seen: Arc::clone(&seen),
            installs: Arc::clone(&installs),
        }),
    )
    .unwrap();
    let store = Replicated::open(raft_log, machine).unwrap();
    let runner = testkit::spawn(id, 3, peers, wiped);
    let (tx, rx) = mpsc::channel();
    runner.add_group(
        G,
        Box::new(store),
        Box::new(move |r| tx.send(r.is_ok()).unwrap()),
    );
    assert!(rx.recv().unwrap());
    Member {
        runner,
        view,
        seen,
        installs,
    }
}

fn leader(peers: &Peers) -> NodeId {
    testkit::leader(peers, G)
}

fn propose(member: &Member, op: &MetadataOp) -> Result<MetadataApplied, ProposeError> {
    let (tx, rx) = mpsc::channel();
    member.runner.propose(
        G,
        encode_op(op).unwrap().into(),
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

fn create_stream(id: u32) -> MetadataOp {
    MetadataOp::CreateStream {
        id,
        name: format!("stream-{id}"),
        created_at: u64::from(id),
        options: vec![],
    }
}

fn create_topic(stream_id: u32) -> MetadataOp {
    MetadataOp::CreateTopic {
        stream_id,
        id: 1,
        name: "events".into(),
        created_at: 7,
        partitions: 2,
        config: crate::testkit::small_topic(),
        explicit_options: vec![],
        derived_options: vec![],
    }
}

fn wait_for(view: &MetadataView, want: &MetadataState) {
    testkit::eventually(
        || view.read(|s| s == want),
        || {
            format!(
                "member has {} streams, want {}",
                view.read(|s| s.streams.len()),
                want.streams.len()
            )
        },
    );
}

/// The effects a member passed on, deduplicated by entry index (a restart passes the entries
/// after its snapshot again; the sink is idempotent).
fn effects_by_index(seen: &Seen) -> Vec<(u64, Vec<Effect>)> {
    let mut all = seen.lock().unwrap().clone();
    all.sort_by_key(|(i, _)| *i);
    all.dedup();
    all
}

#[test]
fn the_metadata_group_survives_its_leader_a_restart_and_a_wiped_member() {
    let tmp = tempfile::tempdir().unwrap();
    let pool = CommitPool::new(2).unwrap();
    let peers: Peers = Arc::new(Mutex::new(vec![None, None, None]));
    let mut members: Vec<Option<Member>> = Vec::new();
    for id in 1..=3 {
        let m = open_member(id, tmp.path(), &peers, &pool, false);
        peers.lock().unwrap()[usize::try_from(id - 1).unwrap()] = Some(m.runner.clone());
        members.push(Some(m));
    }
    let idx = |id: NodeId| usize::try_from(id - 1).unwrap();
    let mut model = MetadataState::default();
    let apply = |model: &mut MetadataState, op: &MetadataOp| model.apply(op).unwrap();

    let first = leader(&peers);
    for id in 1..=10 {
        let op = create_stream(id);
        let out = propose(members[idx(first)].as_ref().unwrap(), &op).unwrap();
        assert_eq!(out, MetadataApplied::Applied(vec![]));
        apply(&mut model, &op);
    }
    let op = create_topic(1);
    let out = propose(members[idx(first)].as_ref().unwrap(), &op).unwrap();
    assert!(
        matches!(&out, MetadataApplied::Applied(e) if e.len() == 2),
        "{out:?}"
    );
    apply(&mut model, &op);
    // A conflicting operation is refused by the state, on every member alike.
    let out = propose(members[idx(first)].as_ref().unwrap(), &create_stream(3)).unwrap();
    assert!(matches!(out, MetadataApplied::Refused(_)), "{out:?}");
    for m in members.iter().flatten() {
        wait_for(&m.view, &model);
    }

    // The leader's process dies: the others elect a leader and go on.
    let lost = members[idx(first)].take().unwrap();
    lost.runner.stop();
    peers.lock().unwrap()[idx(first)] = None;
    drop(lost);
    let second = leader(&peers);
    assert_ne!(second, first);
    for id in 11..=30 {
        let op = create_stream(id);
        let out = propose(members[idx(second)].as_ref().unwrap(), &op).unwrap();
        assert_eq!(out, MetadataApplied::Applied(vec![]));
        apply(&mut model, &op);
    }
    let op = create_topic(11);
    propose(members[idx(second)].as_ref().unwrap(), &op).unwrap();
    apply(&mut model, &op);

    // The lost member restarts from its directory: it resumes from its snapshot and applies
    // every later entry once (a second application of a CreateStream would be refused and
    // leave the states different; they are equal).
    let back = open_member(first, tmp.path(), &peers, &pool, false);
    peers.lock().unwrap()[idx(first)] = Some(back.runner.clone());
    members[idx(first)] = Some(back);
    for m in members.iter().flatten() {
        wait_for(&m.view, &model);
    }

    // A follower loses its data directory while the others compact their logs past what it
    // would need: it comes back empty, is sent a snapshot and the entries after it.
    let now = leader(&peers);
    let victim = (1..=3).find(|&id| id != now).unwrap();
    let gone = members[idx(victim)].take().unwrap();
    gone.runner.stop();
    peers.lock().unwrap()[idx(victim)] = None;
    drop(gone);
    std::fs::remove_dir_all(tmp.path().join(format!("node-{victim}"))).unwrap();
    for id in 31..=60 {
        let op = create_stream(id);
        propose(members[idx(now)].as_ref().unwrap(), &op).unwrap();
        apply(&mut model, &op);
    }
    let leader_dir = tmp.path().join(format!("node-{now}/raft/0"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while first_segment_base(&leader_dir) <= 1 {
        assert!(
            Instant::now() < deadline,
            "the leader never compacted its log"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // What the transport's incarnation check will tell the others (see ARCHITECTURE.md).
    for m in members.iter().flatten() {
        m.runner.with(move |n| n.peer_lost_state(victim));
    }
    let rebuilt = open_member(victim, tmp.path(), &peers, &pool, true);
    peers.lock().unwrap()[idx(victim)] = Some(rebuilt.runner.clone());
    members[idx(victim)] = Some(rebuilt);
    for m in members.iter().flatten() {
        wait_for(&m.view, &model);
    }
    let rebuilt = members[idx(victim)].as_ref().unwrap();
    assert!(
        !rebuilt.installs.lock().unwrap().is_empty(),
        "the wiped member was rebuilt from a snapshot"
    );
    // Every member passed on the same effects for the same entry (a restarted member only
    // those after its snapshot, the rebuilt one none before the snapshot it installed).
    let reference = effects_by_index(&members[idx(now)].as_ref().unwrap().seen);
    assert_eq!(reference.len(), 2, "two topics, one entry each");
    for m in members.iter().flatten() {
        for seen in effects_by_index(&m.seen) {
            assert!(reference.contains(&seen), "{seen:?} not in {reference:?}");
        }
    }
    for m in members.iter().flatten() {
        m.runner.stop();
    }
}

/// The lowest segment base in a Raft log directory (1 until compaction deletes a segment).
fn first_segment_base(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(1, |entries| {
        entries
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".log")?.parse::<u64>().ok()
            })
            .min()
            .unwrap_or(1)
    })
}
