//! Test support: nodes on Raft threads in one process, wired to each other in memory.

use std::path::Path;
use std::sync::{mpsc, Arc};

use eddy_consensus::logstore::RaftLog;
use eddy_consensus::{NodeId, Replicated, Runner};
use eddy_log::{Cache, CommitPool, FsBackend, StorageBackend};
use eddy_stream_store::replicated_metadata::MetadataView;

use super::raft_groups::{AsCluster, ClusterOutcome, GroupStorage, PartitionGroups};
use eddy_replicated::metadata::MetadataMachine;

use eddy_replicated::groups::METADATA_GROUP;
pub use eddy_replicated::testkit::{
    eventually, leader, small_log, small_topic, spawn, Peers, TICK,
};

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
