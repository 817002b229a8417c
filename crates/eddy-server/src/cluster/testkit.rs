//! Test support: nodes on Raft threads in one process, wired to each other in memory.

use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use eddy_consensus::logstore::RaftLog;
use eddy_consensus::{GroupId, Node, NodeConfig, NodeId, Replicated, Role, Runner};
use eddy_log::{Cache, CommitPool, FsBackend, LogConfig, StorageBackend};
use eddy_stream_store::replicated_metadata::MetadataView;

use super::metadata::MetadataMachine;
use super::raft_groups::{
    AsCluster, ClusterOutcome, GroupStorage, PartitionGroups, METADATA_GROUP,
};

/// The engine's clock period in tests.
pub const TICK: Duration = Duration::from_millis(20);

/// Every member's runner by id - 1 (`None`: down).
pub type Peers<O> = Arc<Mutex<Vec<Option<Runner<O>>>>>;

/// Spawns member `id` of a `size`-member cluster whose messages go to `peers`. A member that
/// lost its disk (`wiped`) neither votes nor campaigns until it has caught up.
pub fn spawn<O: Send + 'static>(id: NodeId, size: u64, peers: &Peers<O>, wiped: bool) -> Runner<O> {
    let out = Arc::clone(peers);
    Runner::spawn(
        &format!("raft-{id}"),
        move |wake| {
            let mut config = NodeConfig::new(id, (1..=size).collect());
            config.maintain_ticks = 2;
            let mut node = Node::new(config, wake);
            if wiped {
                node.set_rebuilding();
            }
            node
        },
        TICK,
        Box::new(move |to, batch| {
            let target = out.lock().unwrap()[usize::try_from(to - 1).unwrap()].clone();
            if let Some(r) = target {
                r.receive(id, batch);
            }
        }),
        Box::new(|_| {}),
    )
    .unwrap()
}

/// The one leader of `group` among the running members (panics after 10 s without one).
pub fn leader<O: Send + 'static>(peers: &Peers<O>, group: GroupId) -> NodeId {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let runners = peers.lock().unwrap().clone();
        let leaders: Vec<NodeId> = runners
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let v = r.as_ref()?.view().get(group)?;
                (v.role == Role::Leader).then_some(i as u64 + 1)
            })
            .collect();
        if leaders.len() == 1 {
            return leaders[0];
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no single leader of {group:?}");
}

/// Waits up to 10 s for `done`, then panics with `what()`.
pub fn eventually(mut done: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{}", what());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A topic whose partitions roll segments as often as [`small_log`]'s (partition groups take
/// their topic's segment size).
pub(crate) fn small_topic() -> eddy_stream_store::TopicConfig {
    eddy_stream_store::TopicConfig {
        segment_size: small_log().segment_size,
        ..eddy_stream_store::TopicConfig::default()
    }
}

fn small_log() -> LogConfig {
    LogConfig {
        segment_size: 16 * 1024,
        ..LogConfig::default()
    }
}

/// Starts member `id` of a 3-member cluster in `root/node-<id>`: the metadata group (a
/// snapshot every 8 entries) and the partition groups its effects create, on one Raft thread,
/// registered in `peers`.
pub fn open_node(
    id: NodeId,
    root: &Path,
    peers: &Peers<ClusterOutcome>,
    pool: &CommitPool,
) -> (Runner<ClusterOutcome>, PartitionGroups, MetadataView) {
    open_node_with(id, root, peers, pool, None)
}

/// [`open_node`] with partition logs encrypted by `cipher`.
pub fn open_node_with(
    id: NodeId,
    root: &Path,
    peers: &Peers<ClusterOutcome>,
    pool: &CommitPool,
    cipher: Option<eddy_log::Cipher>,
) -> (Runner<ClusterOutcome>, PartitionGroups, MetadataView) {
    let node_root = root.join(format!("node-{id}"));
    std::fs::create_dir_all(&node_root).unwrap();
    let backend: Arc<dyn StorageBackend> = Arc::new(FsBackend::new(&node_root).unwrap());
    let cache = Arc::new(Cache::new(1 << 20));
    let raft_log = RaftLog::open(
        Arc::clone(&backend),
        "raft/metadata",
        small_log(),
        pool,
        Arc::clone(&cache),
    )
    .unwrap();
    let groups = PartitionGroups::new(GroupStorage {
        backend: Arc::clone(&backend),
        pool: pool.clone(),
        cache,
        log: small_log(),
        cipher,
    });
    let (machine, view) = MetadataMachine::open(
        backend,
        raft_log.dir().to_path_buf(),
        8,
        Box::new(groups.clone()),
    )
    .unwrap();
    let store = Replicated::open(raft_log, AsCluster(machine)).unwrap();
    let runner = spawn(id, 3, peers, false);
    groups.start(runner.clone(), &view);
    let (tx, rx) = mpsc::channel();
    runner.add_group(
        METADATA_GROUP,
        Box::new(store),
        Box::new(move |r| tx.send(r.is_ok()).unwrap()),
    );
    assert!(rx.recv().unwrap());
    peers.lock().unwrap()[usize::try_from(id - 1).unwrap()] = Some(runner.clone());
    (runner, groups, view)
}
