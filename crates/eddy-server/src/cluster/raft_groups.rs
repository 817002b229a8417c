//! One node's replicated groups: the metadata group and a partition group per stream
//! partition, on one Raft node (one [`Runner`], one transport). The metadata group's partition
//! effects create, purge and remove partition groups on every member ([`PartitionGroups`] is
//! the metadata machine's [`EffectSink`]).
//!
//! Group ids: the metadata group is `GroupId(0)`; the partition with uid `u` (unique for the
//! cluster's lifetime, assigned by the metadata state) is `GroupId(u + 1)`. Its Raft log lives
//! in `raft/partitions/<uid, 20 digits>/` under the data directory.
//!
//! Everything here is idempotent, because a restart passes the effects after the metadata
//! snapshot again: a partition group is created when missing, removed when present. After a
//! restart or a snapshot install [`PartitionGroups::reconcile`] makes the groups match the
//! metadata state (and deletes the directories of partitions the state no longer has).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use eddy_consensus::logstore::{RaftLog, StateMachine};
use eddy_consensus::{GroupId, LogEntry, Replicated, Runner, Snapshot, SnapshotMeta, StoreError};
use eddy_event_store::replicated::EventApplied;
use eddy_log::{Cache, CommitPool, LogConfig, StorageBackend};
use eddy_replicated::groups::{partition_dir, partition_group_id, METADATA_GROUP, PARTITIONS_DIR};
use eddy_stream_store::metadata::Effect;
use eddy_stream_store::replicated::{ApplyOutcome, PartitionEntry};
use eddy_stream_store::replicated_metadata::{MetadataApplied, MetadataView};
use eddy_stream_store::PartitionAddr;

use eddy_replicated::metadata::EffectSink;
use eddy_replicated::partition::{PartitionGroup, PartitionMachine};

/// What a proposal to any of a node's groups yields.
#[derive(Debug)]
pub enum ClusterOutcome {
    /// A metadata entry's outcome.
    Metadata(MetadataApplied),
    /// A partition entry's outcome.
    Partition(ApplyOutcome),
    /// An event shard entry's outcome.
    Event(EventApplied),
}

/// A state machine whose outcome is wrapped into [`ClusterOutcome`], so groups of every kind
/// run on one node.
#[derive(Debug)]
pub struct AsCluster<M>(pub M);

impl<M> StateMachine for AsCluster<M>
where
    M: StateMachine,
    M::Outcome: Into<ClusterOutcome>,
{
    type Outcome = ClusterOutcome;

    fn applied(&self) -> SnapshotMeta {
        self.0.applied()
    }
    fn apply(&mut self, entry: &LogEntry) -> ClusterOutcome {
        self.0.apply(entry).into()
    }
    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        self.0.snapshot()
    }
    fn snapshot_after(&self, log_start: SnapshotMeta) -> Result<Snapshot, StoreError> {
        self.0.snapshot_after(log_start)
    }
    fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        self.0.install_snapshot(snapshot)
    }
    fn entry_timestamp(&self, entry: &LogEntry) -> Option<u64> {
        self.0.entry_timestamp(entry)
    }
    fn compactable_through(&mut self, now_us: u64) -> Option<u64> {
        self.0.compactable_through(now_us)
    }
    fn health(&self) -> Result<(), StoreError> {
        self.0.health()
    }
}

impl From<MetadataApplied> for ClusterOutcome {
    fn from(o: MetadataApplied) -> Self {
        ClusterOutcome::Metadata(o)
    }
}

impl From<ApplyOutcome> for ClusterOutcome {
    fn from(o: ApplyOutcome) -> Self {
        ClusterOutcome::Partition(o)
    }
}

/// Storage every partition group of a node shares.
#[derive(Clone)]
pub struct GroupStorage {
    /// The data directory's backend.
    pub backend: Arc<dyn StorageBackend>,
    /// The commit pool.
    pub pool: CommitPool,
    /// The read cache.
    pub cache: Arc<Cache>,
    /// Each partition log's configuration.
    pub log: LogConfig,
    /// At-rest encryption of partition logs (`--encryption-key`), as on a single node.
    pub cipher: Option<eddy_log::Cipher>,
}

impl std::fmt::Debug for GroupStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupStorage")
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

struct Open {
    uid: u64,
    group: PartitionGroup,
}

struct Inner {
    storage: GroupStorage,
    groups: BTreeMap<PartitionAddr, Open>,
}

/// The partition groups of one node (cheap to clone), and the metadata machine's sink.
#[derive(Clone)]
pub struct PartitionGroups {
    inner: Arc<Mutex<Inner>>,
    runner: Arc<OnceLock<Runner<ClusterOutcome>>>,
    view: Arc<OnceLock<MetadataView>>,
    /// Streams' own keys: a partition of a stream with one is sealed with it.
    stream_ciphers: Option<eddy_stream_store::StreamCiphers>,
}

impl std::fmt::Debug for PartitionGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionGroups")
            .field("groups", &self.lock().groups.len())
            .finish_non_exhaustive()
    }
}

/// A partition's retention policy from its topic's options, read at each maintenance: the
/// topic's `message_expiry`, and its `max_topic_size` shared evenly by its partitions (each
/// partition group deletes on its own).
fn retention_source(
    view: MetadataView,
    addr: PartitionAddr,
) -> eddy_replicated::partition::PolicySource {
    Box::new(move || {
        view.read(|s| {
            let topic = s.topic(addr.stream_id, addr.topic_id)?;
            let partitions = u64::try_from(topic.partitions.len()).unwrap_or(1).max(1);
            Some(eddy_stream_store::RetentionPolicy {
                message_expiry: topic.config.message_expiry,
                max_bytes: topic.config.max_topic_size.map(|max| max / partitions),
                keep_above: None,
            })
        })
    })
}

impl PartitionGroups {
    /// No groups yet; [`start`](Self::start) hands it the node once it runs.
    pub fn new(storage: GroupStorage) -> Self {
        PartitionGroups {
            inner: Arc::new(Mutex::new(Inner {
                storage,
                groups: BTreeMap::new(),
            })),
            runner: Arc::new(OnceLock::new()),
            view: Arc::new(OnceLock::new()),
            stream_ciphers: None,
        }
    }

    /// Seals each partition of a stream with its own key, when it has one.
    #[must_use]
    pub fn with_stream_ciphers(
        mut self,
        ciphers: Option<eddy_stream_store::StreamCiphers>,
    ) -> Self {
        self.stream_ciphers = ciphers;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands it the node's runner and creates the groups of every partition `view` knows
    /// (those the metadata snapshot holds; later entries' effects follow as they apply).
    /// Nothing is deleted here: `view` is the state of the last metadata snapshot, and the
    /// entries after it (replayed next) may create partitions this node already holds data
    /// for, or delete others (their effects remove those directories).
    pub fn start(&self, runner: Runner<ClusterOutcome>, view: &MetadataView) {
        let _ = self.runner.set(runner);
        let _ = self.view.set(view.clone());
        let wanted: Vec<(PartitionAddr, u64)> =
            view.read(|s| s.partitions().map(|(addr, p, _)| (addr, p.uid)).collect());
        for (addr, uid) in wanted {
            self.create(addr, uid);
        }
    }

    /// A partition's group on this node, if it has one.
    pub fn get(&self, addr: PartitionAddr) -> Option<(u64, PartitionGroup)> {
        self.lock()
            .groups
            .get(&addr)
            .map(|o| (o.uid, o.group.clone()))
    }

    /// Every partition group on this node: address and uid.
    pub fn all(&self) -> Vec<(PartitionAddr, u64)> {
        self.lock()
            .groups
            .iter()
            .map(|(a, o)| (*a, o.uid))
            .collect()
    }

    /// Makes the groups match `view`: creates the missing ones, removes the others (their
    /// directories too, and those of partitions no group was open for).
    pub fn reconcile(&self, view: &MetadataView) {
        let wanted: BTreeMap<PartitionAddr, u64> =
            view.read(|s| s.partitions().map(|(addr, p, _)| (addr, p.uid)).collect());
        let stale: Vec<(PartitionAddr, u64)> = self
            .all()
            .into_iter()
            .filter(|(addr, uid)| wanted.get(addr) != Some(uid))
            .collect();
        for (addr, uid) in stale {
            self.delete(addr, uid);
        }
        for (addr, uid) in &wanted {
            self.create(*addr, *uid);
        }
        // Directories of partitions deleted while this node was down or before a snapshot.
        let backend = Arc::clone(&self.lock().storage.backend);
        let keep: std::collections::BTreeSet<String> =
            wanted.values().map(|uid| format!("{uid:020}")).collect();
        if let Ok(entries) = backend.list(Path::new(PARTITIONS_DIR)) {
            for e in entries {
                if e.is_dir && !keep.contains(&e.name) {
                    let dir = Path::new(PARTITIONS_DIR).join(&e.name);
                    if let Err(err) = backend.remove_dir_all(&dir) {
                        tracing::warn!(dir = %dir.display(), error = %err, "cannot remove a deleted partition's group directory");
                    }
                }
            }
        }
    }

    fn create(&self, addr: PartitionAddr, uid: u64) {
        let Some(runner) = self.runner.get() else {
            return;
        };
        let mut inner = self.lock();
        if inner.groups.contains_key(&addr) {
            return;
        }
        let storage = inner.storage.clone();
        // The topic's segment size, as on a single node (retention and DELETE_SEGMENTS work
        // in whole segments).
        let segment_size = self
            .view
            .get()
            .and_then(|view| {
                view.read(|s| {
                    s.topic(addr.stream_id, addr.topic_id)
                        .map(|t| t.config.segment_size)
                })
            })
            .unwrap_or(storage.log.segment_size);
        let log = LogConfig {
            segment_size,
            ..storage.log
        };
        // A stream key that does not open (another server key) leaves the group shut, never
        // sealed with a different key.
        let cipher = match &self.stream_ciphers {
            Some(choose) => {
                let stream_options = self
                    .view
                    .get()
                    .and_then(|view| {
                        view.read(|s| s.stream(addr.stream_id).map(|s| s.options.clone()))
                    })
                    .unwrap_or_default();
                match (choose.0)(addr.stream_id, &stream_options) {
                    Ok(own) => own.or_else(|| storage.cipher.clone()),
                    Err(reason) => {
                        tracing::error!(?addr, uid, %reason, "cannot open a partition group: its stream key does not open");
                        return;
                    }
                }
            }
            None => storage.cipher.clone(),
        };
        let opened = (|| {
            let raft_log = RaftLog::open_sealed(
                Arc::clone(&storage.backend),
                partition_dir(uid),
                log,
                &storage.pool,
                Arc::clone(&storage.cache),
                cipher,
            )?;
            let (machine, group) = PartitionMachine::open(
                addr,
                raft_log.log().clone(),
                Arc::clone(&storage.backend),
                raft_log.dir(),
            )?;
            let machine = match self.view.get() {
                Some(view) => machine.with_retention(retention_source(view.clone(), addr)),
                None => machine,
            };
            Ok::<_, StoreError>((Replicated::open(raft_log, AsCluster(machine))?, group))
        })();
        match opened {
            Ok((store, group)) => {
                inner.groups.insert(addr, Open { uid, group });
                let gid = partition_group_id(uid);
                let done: Box<dyn FnOnce(Result<(), eddy_consensus::NodeError>) + Send> =
                    Box::new(move |r| {
                        if let Err(e) = r {
                            tracing::error!(?addr, uid, error = %e, "cannot add a partition group");
                        }
                    });
                // Founded on the members its creation placed it on (the same on every
                // member); one created before placement, on the cluster's founding members.
                let placed = self
                    .view
                    .get()
                    .and_then(|view| view.read(|s| s.replicas(uid).map(<[u64]>::to_vec)))
                    .filter(|replicas| !replicas.is_empty());
                match placed {
                    Some(voters) => {
                        runner.add_group_with_voters(gid, Box::new(store), voters, done);
                    }
                    None => runner.add_group(gid, Box::new(store), done),
                }
                // The metadata leader stands for a new partition's leadership at once (the
                // others wait for an election timeout first): producers can send without
                // waiting for one, and the SDK finds every leader on one node.
                let leads_metadata = runner
                    .view()
                    .get(METADATA_GROUP)
                    .is_some_and(|v| v.role == eddy_consensus::Role::Leader);
                if leads_metadata {
                    runner.with(move |node| node.campaign(gid));
                }
            }
            Err(e) => {
                tracing::error!(?addr, uid, error = %e, "cannot open a partition group; it is retried at the next restart");
            }
        }
    }

    /// Removes the partition's group (when open) and its directory (when present: a deletion
    /// replayed after a restart finds no group, only the files).
    fn delete(&self, addr: PartitionAddr, uid: u64) {
        {
            let mut inner = self.lock();
            match inner.groups.get(&addr) {
                // Another partition now holds this address: leave it.
                Some(open) if open.uid != uid => return,
                Some(_) => {
                    inner.groups.remove(&addr);
                }
                None => {}
            }
        }
        let backend = Arc::clone(&self.lock().storage.backend);
        let remove_dir = move || {
            let dir = partition_dir(uid);
            if let Err(e) = backend.remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a deleted partition's group directory");
            }
        };
        match self.runner.get() {
            // On the node thread, after the group is gone: its files are closed first.
            Some(runner) => runner.with(move |node| {
                node.remove_group(partition_group_id(uid));
                remove_dir();
            }),
            None => remove_dir(),
        }
    }

    /// Moves the partition leaderships this node holds towards their preferred members (see
    /// [`balance_leaders`]). Run periodically; a transfer that does not happen (the target is
    /// behind or down) is tried again at the next run.
    pub fn balance_leaders(&self) {
        let Some(runner) = self.runner.get() else {
            return;
        };
        let gids: Vec<GroupId> = self
            .all()
            .into_iter()
            .map(|(_, uid)| partition_group_id(uid))
            .collect();
        balance_leaders(runner, gids);
    }

    /// Proposes again the purges the metadata holds and a partition this node leads has not
    /// applied: a purge proposed by a leader that lost its leadership before it landed is
    /// carried out by the next one. Run periodically; a purge generation applies once, so
    /// proposing one twice changes nothing.
    pub fn repurge(&self, view: &MetadataView) {
        let Some(runner) = self.runner.get() else {
            return;
        };
        let wanted: BTreeMap<PartitionAddr, u64> = view.read(|s| {
            s.partitions()
                .map(|(addr, p, _)| (addr, p.purge_generation))
                .collect()
        });
        let behind: Vec<(PartitionAddr, u64, u64)> = {
            let inner = self.lock();
            inner
                .groups
                .iter()
                .filter_map(|(addr, open)| {
                    let want = *wanted.get(addr)?;
                    (open.group.partition().generation() < want).then_some((*addr, open.uid, want))
                })
                .collect()
        };
        for (addr, uid, generation) in behind {
            let leads = runner
                .view()
                .get(partition_group_id(uid))
                .is_some_and(|v| v.role == eddy_consensus::Role::Leader);
            if leads {
                tracing::info!(
                    ?addr,
                    generation,
                    "proposing a purge its partition has not applied"
                );
                self.purge(addr, uid, generation);
            }
        }
    }

    /// Proposes a purge to the partition's group. Every member proposes it; only the group's
    /// leader can, and the partition applies a purge generation once, so the copies change
    /// nothing.
    fn purge(&self, addr: PartitionAddr, uid: u64, generation: u64) {
        let (Some(runner), true) = (self.runner.get(), self.lock().groups.contains_key(&addr))
        else {
            return;
        };
        let Ok(entry) = (PartitionEntry::Purge { generation }).encode() else {
            return;
        };
        runner.propose(partition_group_id(uid), entry, Box::new(move |_| {}));
    }
}

/// The member that should lead data group `gid` whose voters are `voters`: the voters in id
/// order, taken round-robin over the groups (partition uid, event shard number), so every
/// member leads its share and the leaderships, and the work of proposing and replicating,
/// are spread. `None` without voters.
pub fn preferred_leader(
    gid: GroupId,
    voters: &[eddy_consensus::NodeId],
) -> Option<eddy_consensus::NodeId> {
    let mut sorted = voters.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let n = u64::try_from(sorted.len()).ok().filter(|&n| n > 0)?;
    // Partition groups are uid + 1 and event shards 2^62 + shard: the low bits number them.
    let nth = (gid.0 & ((1 << 62) - 1)) % n;
    sorted.get(usize::try_from(nth).ok()?).copied()
}

/// Leadership moves one member starts per balancing pass, at most: a transfer holds a
/// group's proposals for a round trip, so a member that returns takes its share back over a
/// few passes rather than all at once.
pub const MOVES_PER_PASS: usize = 8;

/// Moves the leaderships of `gids` this node holds to each group's preferred member
/// ([`preferred_leader`]) when that member is a caught-up, live voter
/// (`Node::transfer_leader_if_ready`), at most [`MOVES_PER_PASS`] at a time; and has this
/// node campaign at once for a group it is preferred for that has no leader. A preferred
/// member that is down or behind leaves its groups where they are until it is back.
pub fn balance_leaders(runner: &Runner<ClusterOutcome>, gids: Vec<GroupId>) {
    runner.with(move |node| {
        let me = node.id();
        let mut moves = 0;
        for gid in gids {
            let Some(preferred) = node
                .membership(gid)
                .and_then(|m| preferred_leader(gid, &m.voters))
            else {
                continue;
            };
            match node.role(gid) {
                Some(eddy_consensus::Role::Leader)
                    if preferred != me
                        && moves < MOVES_PER_PASS
                        && node.transfer_leader_if_ready(gid, preferred) =>
                {
                    moves += 1;
                }
                // A group without a leader (its members were created after this node's first
                // campaign reached them) gets one here at once, not after an election timeout.
                Some(eddy_consensus::Role::Follower)
                    if preferred == me && node.leader(gid).is_none() =>
                {
                    node.campaign(gid);
                }
                _ => {}
            }
        }
    });
}

/// Moves the leaderships of `gids` this node holds to the metadata group's leader when it is
/// caught up and live (`Node::transfer_leader_if_ready`), and has that leader campaign at
/// once for those without a leader: a member being removed hands its groups over this way.
pub fn align_to_metadata_leader(runner: &Runner<ClusterOutcome>, gids: Vec<GroupId>) {
    runner.with(move |node| {
        let Some(target) = node.leader(METADATA_GROUP) else {
            return;
        };
        if target == node.id() {
            // A group without a leader (its members were created after this node's first
            // campaign for it reached them) gets one here at once instead of after an
            // election timeout.
            for gid in gids {
                if node.leader(gid).is_none()
                    && node.role(gid) == Some(eddy_consensus::Role::Follower)
                {
                    node.campaign(gid);
                }
            }
            return;
        }
        for gid in gids {
            if node.role(gid) == Some(eddy_consensus::Role::Leader) {
                // Only to a caught-up, live metadata leader, and not again at once after a
                // transfer that did not complete: a pending transfer drops the group's writes.
                node.transfer_leader_if_ready(gid, target);
            }
        }
    });
}

impl EffectSink for PartitionGroups {
    fn applied(&mut self, _index: u64, effects: &[Effect]) {
        for effect in effects {
            match *effect {
                Effect::CreatePartition { addr, uid, .. } => self.create(addr, uid),
                Effect::DeletePartition { addr, uid } => self.delete(addr, uid),
                Effect::PurgePartition {
                    addr,
                    uid,
                    generation,
                } => self.purge(addr, uid, generation),
            }
        }
    }

    fn installed(&mut self, _index: u64, view: &MetadataView) {
        self.reconcile(view);
    }
}

#[cfg(test)]
mod tests;
