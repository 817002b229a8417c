//! Starting a cluster member: the Raft node on its thread, the metadata group and the
//! partition groups under `<data_dir>/raft/`, the peer transport, and the periodic work
//! (leadership balancing, the root user's creation by the first leader).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use eddy_consensus::logstore::RaftLog;
use eddy_consensus::wire::Hello;
use eddy_consensus::{Event, GroupId, Node, NodeConfig, NodeId, Replicated, Runner};
use eddy_log::{Cache, CommitPool, FsBackend, LogConfig, StorageBackend};
use eddy_replicated::groups::{event_group_id, EVENT_GROUP_BASE, METADATA_GROUP};
use eddy_replicated::metadata::MetadataMachine;
use eddy_replicated::shard::{
    answer_records_request, copy_shard, decode_records_answer, encode_records_request, CopyError,
    EventCompaction, EventShardMachine, ShardSnapshot,
};
use eddy_stream_store::replicated_metadata::MetadataView;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::events::{forward_refusal, open_shard_group, ClusterEvents, FORWARD_KIND};
use super::peer_tls::PeerTls;
use super::raft_groups::{
    balance_leaders, AsCluster, ClusterOutcome, GroupStorage, PartitionGroups,
};
use super::streams::{ClusterStreams, STREAM_FORWARD_KIND};
use super::transport::{fingerprint, props, AsyncAnswer, Fetcher, Hold, Inbox, Transport};
use crate::config::{ConfigError, ServerConfig};

/// Metadata entries between two snapshots of the metadata state.
pub const METADATA_SNAPSHOT_EVERY: u64 = 1_000;

/// File in the member's `raft/` directory while it rebuilds state it lost from its peers:
/// written durably as soon as a peer's greeting reveals the loss, removed once every group
/// has caught up. A member that restarts meanwhile (or learns of the loss before its node
/// runs) finds it and stays out of votes until it has caught up: its groups' logs are still
/// incomplete, and its vote could elect a member missing acknowledged entries.
pub const REBUILDING_FILE: &str = "rebuilding";

/// Hands what the transport receives to the node's thread (set once it runs).
struct RunnerInbox {
    runner: OnceLock<Runner<ClusterOutcome>>,
    /// The member's `raft/` directory (where [`REBUILDING_FILE`] goes).
    raft_dir: std::path::PathBuf,
    /// The event store (its shards' records are copied for snapshots, and served to peers).
    events: Arc<eddy_event_store::EventStore>,
    /// Requests to peers (an event shard's records).
    fetcher: Fetcher,
    /// Event groups whose snapshot is being copied (a resent snapshot waits for that copy).
    copying: Arc<std::sync::Mutex<std::collections::HashSet<GroupId>>>,
    /// Snapshot copies done and failed, records and bytes copied (for `/metrics`).
    copies: Arc<SnapshotCopies>,
    /// Each event shard's stop flag: a copy its store could not take stops the shard here.
    stopped_shards: Vec<Arc<std::sync::atomic::AtomicBool>>,
    /// Answers changes peers forward to this member as their shard's leader (set once the
    /// event service runs).
    forwarded: OnceLock<ForwardHandler>,
    /// Answers stream writes peers forward to this member as their group's leader (set once
    /// the stream service runs).
    stream_forwarded: OnceLock<ForwardHandler>,
}

/// Takes a forwarded change's request and answers it (see `ClusterEvents::forward`).
pub type ForwardHandler = Arc<dyn Fn(Bytes) -> AsyncAnswer + Send + Sync>;

/// Counters of event shard snapshot copies on this member.
#[derive(Debug, Default)]
struct SnapshotCopies {
    done: AtomicU64,
    failed: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
}

impl RunnerInbox {
    fn rebuilding_marked(&self) -> bool {
        self.raft_dir.join(REBUILDING_FILE).exists()
    }
}

impl RunnerInbox {
    /// Copies the records an event shard's snapshot needs from its sender, on a thread of
    /// its own, then hands the snapshot to the node (which only checks that the shard reached
    /// the snapshot's point). A failed copy drops the snapshot: the leader sends another.
    fn copy_then_deliver(&self, from: NodeId, group: GroupId, message: Bytes, data: &Bytes) {
        let Some(runner) = self.runner.get().cloned() else {
            return;
        };
        let Some(snapshot) = ShardSnapshot::decode(data) else {
            tracing::warn!(%group, "an event shard snapshot that does not decode; dropped");
            return;
        };
        if !eddy_log::lock(&self.copying).insert(group) {
            return;
        }
        let (events, fetcher, copying, counters) = (
            Arc::clone(&self.events),
            self.fetcher.clone(),
            Arc::clone(&self.copying),
            Arc::clone(&self.copies),
        );
        let stopped = self
            .stopped_shards
            .get(snapshot.shard as usize)
            .map(Arc::clone);
        let spawned = std::thread::Builder::new()
            .name("eddy-snapshot-copy".into())
            .spawn(move || {
                let shard = snapshot.shard;
                tracing::info!(shard, peer = from, through = snapshot.position.next_seq, "copying an event shard's records from a peer for its snapshot");
                let copied = fetcher
                    .connect(from)
                    .map_err(|e| CopyError::Fetch(e.to_string()))
                    .and_then(|mut conn| {
                        copy_shard(&events, &snapshot, |lo, hi| {
                            let answer = conn
                                .request(&encode_records_request(shard, lo, hi))
                                .map_err(|e| e.to_string())?;
                            decode_records_answer(answer)
                        })
                    });
                eddy_log::lock(&copying)
                    .remove(&group);
                match copied {
                    Ok(stats) => {
                        counters.done.fetch_add(1, Ordering::Relaxed);
                        counters.records.fetch_add(stats.records, Ordering::Relaxed);
                        counters.bytes.fetch_add(stats.bytes, Ordering::Relaxed);
                        tracing::info!(shard, peer = from, records = stats.records, bytes = stats.bytes, "event shard records copied; installing the snapshot");
                        runner.receive(from, vec![(group, message)]);
                    }
                    Err(CopyError::Local(e)) => {
                        counters.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(shard, peer = from, error = %e, "this member's event shard could not take records copied for a snapshot; it stops applying the shard until it restarts");
                        if let Some(flag) = &stopped {
                            flag.store(true, Ordering::Release);
                        }
                    }
                    Err(e) => {
                        counters.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(shard, peer = from, error = %e, "copying an event shard's records failed; the leader will send its snapshot again");
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start a snapshot copy");
            eddy_log::lock(&self.copying).remove(&group);
        }
    }
}

impl Inbox for RunnerInbox {
    fn receive(&self, from: NodeId, mut messages: Vec<(GroupId, Bytes)>, hold: Hold) {
        messages.retain(|(group, message)| {
            if group.0 < EVENT_GROUP_BASE {
                return true;
            }
            match eddy_consensus::wire::snapshot_in(message) {
                Some(snapshot) => {
                    self.copy_then_deliver(from, *group, message.clone(), &snapshot.data);
                    false
                }
                None => true,
            }
        });
        if let Some(r) = self.runner.get() {
            r.receive_holding(from, messages, hold);
        }
    }
    fn answer(&self, _from: NodeId, request: &Bytes) -> Bytes {
        answer_records_request(&self.events, request)
    }
    fn answer_async(&self, _from: NodeId, request: &Bytes) -> Option<AsyncAnswer> {
        let request = request.clone();
        match request.first() {
            Some(&FORWARD_KIND) => Some(match self.forwarded.get() {
                Some(handler) => handler(request),
                None => {
                    Box::pin(async { forward_refusal("this member does not serve events yet") })
                }
            }),
            Some(&STREAM_FORWARD_KIND) => Some(match self.stream_forwarded.get() {
                Some(handler) => handler(request),
                // Nothing proposed: the sender asks again (or another member).
                None => Box::pin(async { super::streams::not_there() }),
            }),
            _ => None,
        }
    }
    fn unreachable(&self, peer: NodeId) {
        if let Some(r) = self.runner.get() {
            r.unreachable(peer);
        }
    }
    fn peer_lost_state(&self, peer: NodeId) {
        if let Some(r) = self.runner.get() {
            r.with(move |node| node.peer_lost_state(peer));
        }
    }
    fn lost_own_state(&self) {
        // Durable first: the node may not run yet (start reads the file once it does), and a
        // restart must not forget it.
        if let Err(e) =
            super::incarnation::write_durably(&self.raft_dir, REBUILDING_FILE, "rebuilding\n")
        {
            tracing::error!(error = %e, "cannot record that this node is rebuilding; a restart before it caught up would let it vote");
        }
        if let Some(r) = self.runner.get() {
            r.with(Node::set_rebuilding);
        }
    }
}

/// A running member: what the request path uses, and what serves the replication port.
pub struct Member {
    /// The replicated stream store.
    pub streams: ClusterStreams,
    /// The replicated event store.
    pub events: ClusterEvents,
    transport: Transport,
    incarnations: Arc<super::incarnation::Incarnations>,
    inbox: Arc<RunnerInbox>,
    stop: CancellationToken,
    elections: Arc<std::sync::atomic::AtomicU64>,
    /// The sending half of the transport (for its count of frames dropped towards peers).
    outbox: super::transport::Outbox,
    /// Groups whose storage failed on this member (they stop here until it restarts).
    failed_groups: Arc<std::sync::atomic::AtomicU64>,
    /// Each event shard's stop flag (set at a failed write, before its group fails).
    stopped_shards: Vec<Arc<std::sync::atomic::AtomicBool>>,
    /// The recorded members the transport's peers were last made equal to.
    followed: std::sync::Mutex<BTreeMap<u64, String>>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("streams", &self.streams)
            .finish_non_exhaustive()
    }
}

/// The addresses this member advertises to clients (through its peers' directories).
#[derive(Debug, Clone, Copy)]
pub struct Advertised {
    /// Stream protocol.
    pub stream: SocketAddr,
    /// Event protocol.
    pub client: SocketAddr,
    /// HTTP.
    pub http: SocketAddr,
    /// The replication port (recorded in the metadata when members change).
    pub replication: SocketAddr,
}

fn storage_error(e: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        key: "data_dir",
        reason: format!("cannot open the cluster's groups: {e}"),
    }
}

/// What every member's event store must share, as its greeting states it: a member whose
/// layout differs is refused (its shards would route and store events differently).
fn events_layout(config: &eddy_event_store::EventStoreConfig) -> String {
    let dictionary = config
        .dictionary
        .as_ref()
        .map_or(0, |d| xxhash_rust::xxh3::xxh3_128(d));
    format!(
        "shards={},routing={:?},reserve={},dictionary={dictionary:032x}",
        config.num_shards, config.routing_rule, config.reserve_coordinator_shard
    )
}

/// Adds a group to the node and waits until it runs there.
async fn add_group(
    runner: &Runner<ClusterOutcome>,
    group: GroupId,
    store: Box<dyn eddy_consensus::GroupStore<Outcome = ClusterOutcome>>,
) -> Result<(), ConfigError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    runner.add_group(
        group,
        store,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx.await
        .map_err(|_| storage_error("the Raft thread stopped"))?
        .map_err(storage_error)
}

/// The member's replication-port TLS, or `None` (with a warning) where the configuration
/// said plaintext in so many words.
fn load_peer_tls(config: &ServerConfig) -> Result<Option<PeerTls>, ConfigError> {
    if let (Some(cert), Some(key), Some(ca)) = (
        &config.peer_tls_cert,
        &config.peer_tls_key,
        &config.peer_tls_ca,
    ) {
        let tls = PeerTls::load(cert, key, ca).map_err(|e| {
            let cause =
                std::error::Error::source(&e).map_or_else(String::new, |c| format!(": {c}"));
            ConfigError::Invalid {
                key: "peer_tls_cert",
                reason: format!("{e}{cause}"),
            }
        })?;
        return Ok(Some(tls));
    }
    tracing::warn!("the replication port runs in plaintext (--insecure-peer-plaintext): any process that reaches it can act as a member; give the members certificates (eddy cluster certs) unless this network is trusted and isolated");
    Ok(None)
}

/// Resolves the peers' replication addresses.
/// In `raft/`: the members (ids and replication addresses) this member last followed from
/// the metadata's record, one `ID=ADDRESS` per line. At a restart they are the transport's
/// peers (instead of the `--peer` flags, which a membership change leaves behind) until the
/// metadata group catches up: its applied state restarts from its last snapshot, and the
/// entries after it come from the group's leader, which may be a member added since the
/// flags were written and refused if this member did not know it.
const MEMBERS_FILE: &str = "members";

fn write_followed_members(
    raft_dir: &Path,
    peers: &BTreeMap<NodeId, SocketAddr>,
) -> std::io::Result<()> {
    let mut text = String::new();
    for (id, addr) in peers {
        let _ = writeln!(text, "{id}={addr}");
    }
    if std::fs::read_to_string(raft_dir.join(MEMBERS_FILE)).is_ok_and(|t| t == text) {
        return Ok(());
    }
    super::incarnation::write_durably(raft_dir, MEMBERS_FILE, &text)
}

/// The members [`MEMBERS_FILE`] lists (`None`: no such file, or it does not parse: the flags'
/// peers are used).
fn read_followed_members(raft_dir: &Path, me: NodeId) -> Option<BTreeMap<NodeId, SocketAddr>> {
    let text = std::fs::read_to_string(raft_dir.join(MEMBERS_FILE)).ok()?;
    let mut peers = BTreeMap::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (id, addr) = line.split_once('=')?;
        let id: NodeId = id.trim().parse().ok()?;
        let addr: SocketAddr = addr.trim().parse().ok()?;
        if id != me {
            peers.insert(id, addr);
        }
    }
    Some(peers)
}

async fn peer_addrs(config: &ServerConfig) -> Result<BTreeMap<NodeId, SocketAddr>, ConfigError> {
    let mut out = BTreeMap::new();
    for peer in config.cluster_peers()? {
        let addr = tokio::net::lookup_host((peer.host.as_str(), peer.port))
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| ConfigError::Invalid {
                key: "peers",
                reason: format!("cannot resolve {}:{}", peer.host, peer.port),
            })?;
        out.insert(peer.id, addr);
    }
    Ok(out)
}

/// The members this member's cluster was founded with (`raft/founders`): learned from the
/// `peers` at a joining member's first start, written from the configuration at a founding
/// member's, read afterwards. Every group without a placement of its own is founded on them,
/// on every member.
async fn founding_members(
    config: &ServerConfig,
    peers: &BTreeMap<NodeId, SocketAddr>,
    raft_dir: &Path,
    tls: Option<&PeerTls>,
) -> Result<Vec<NodeId>, ConfigError> {
    let mut configured: Vec<NodeId> = peers.keys().copied().collect();
    configured.push(config.node_id);
    configured.sort_unstable();
    if config.join && !raft_dir.join(super::incarnation::FOUNDERS_FILE).exists() {
        join_cluster(raft_dir, peers, config.node_id, tls).await?;
    }
    let members = super::incarnation::founders(raft_dir, &configured).map_err(storage_error)?;
    if members != configured {
        tracing::warn!(founders = ?members, configured = ?configured, "this member's --node-id and --peer list differ from the members its cluster was founded with; groups keep their founders");
    }
    Ok(members)
}

/// `addr` as clients and peers are told it (with `--advertise-host`'s host when set).
fn advertise(config: &ServerConfig, addr: SocketAddr) -> String {
    match &config.advertise_host {
        Some(host) => format!("{host}:{}", addr.port()),
        None => addr.to_string(),
    }
}

/// Whether the members' record names every member the metadata group (`metadata`, as this
/// member runs it; `None`: not known here) counts. A record a leader began and did not finish
/// (it died between two of the members it records, one entry each) lacks some: followed, it
/// would cut those members off from this one and from each other, and with them maybe the
/// majority that could finish the record.
fn record_is_complete(
    recorded: &BTreeMap<u64, String>,
    metadata: Option<&eddy_consensus::Membership>,
) -> bool {
    metadata.is_none_or(|m| {
        m.voters
            .iter()
            .chain(&m.learners)
            .chain(&m.voters_outgoing)
            .all(|id| recorded.contains_key(id))
    })
}

/// Where the other members reach this member's replication port (bound at `bound`), as the
/// metadata records it when members change: the address `--replication-host` binds when it
/// names one (a private network; `--advertise-host` is the clients' host), otherwise the
/// advertised host.
fn replication_address(config: &ServerConfig, bound: SocketAddr) -> String {
    match config.replication_host {
        Some(ip) if !ip.is_unspecified() => SocketAddr::new(ip, bound.port()).to_string(),
        _ => advertise(config, bound),
    }
}

/// This member's greeting on the replication port: who it is, where clients reach it, what
/// its peers must share with it, and a nonce of this start.
fn greeting(
    config: &ServerConfig,
    advertised: &Advertised,
    events: &eddy_event_store::EventStore,
    cluster: u64,
    members: &[NodeId],
) -> Hello {
    let boot = super::incarnation::random_u64();
    let founders: Vec<String> = members.iter().map(ToString::to_string).collect();
    Hello {
        node_id: config.node_id,
        cluster,
        props: vec![
            (props::STREAM.into(), advertise(config, advertised.stream)),
            (props::CLIENT.into(), advertise(config, advertised.client)),
            (props::HTTP.into(), advertise(config, advertised.http)),
            (props::VERSION.into(), env!("CARGO_PKG_VERSION").into()),
            (props::EVENTS.into(), events_layout(events.config())),
            (
                props::MEMBERS.into(),
                format!("{:016x}", fingerprint(members)),
            ),
            (props::BOOT.into(), format!("{boot:016x}")),
            (props::FOUNDERS.into(), founders.join(",")),
        ],
    }
}

/// A new member's first start (`--join`): asks the `peers` for the cluster's id and founders
/// and keeps them in `raft_dir`, so this member founds every group as the others did.
async fn join_cluster(
    raft_dir: &Path,
    peers: &BTreeMap<NodeId, SocketAddr>,
    me: NodeId,
    tls: Option<&PeerTls>,
) -> Result<(), ConfigError> {
    tracing::info!(node_id = me, "joining the cluster of the --peer members");
    let joined =
        super::transport::join(peers, me, tls)
            .await
            .map_err(|e| ConfigError::Invalid {
                key: "join",
                reason: format!("no member let this one join: {e}"),
            })?;
    super::incarnation::cluster_id(raft_dir, joined.cluster).map_err(storage_error)?;
    super::incarnation::founders(raft_dir, &joined.founders).map_err(storage_error)?;
    tracing::info!(cluster = format!("{:016x}", joined.cluster), founders = ?joined.founders, by = joined.by, "joined: this member now catches up as a learner");
    Ok(())
}

/// What [`start`] opens from `data_dir` before anything runs: the groups' storage.
struct OpenedGroups {
    /// The stream partitions' groups (added as streams appear).
    groups: PartitionGroups,
    /// One group per shard of the event store, with its id.
    event_groups: Vec<(GroupId, Replicated<AsCluster<EventShardMachine>>)>,
    /// Each event shard's stop flag.
    stopped_shards: Vec<Arc<std::sync::atomic::AtomicBool>>,
    /// The metadata group's state, as readers see it.
    view: MetadataView,
    /// The metadata group.
    store: Replicated<AsCluster<MetadataMachine>>,
}

/// Opens the metadata group's log and state, the partition groups' storage and a group per
/// shard of `events`, all under `data_dir/raft/`.
fn open_groups(
    config: &ServerConfig,
    data_dir: &Path,
    pool: &CommitPool,
    cache: &Arc<Cache>,
    events: &Arc<eddy_event_store::EventStore>,
) -> Result<OpenedGroups, ConfigError> {
    let backend: Arc<dyn StorageBackend> =
        Arc::new(FsBackend::new(data_dir).map_err(storage_error)?);
    let log = LogConfig {
        segment_size: 64 * 1024 * 1024,
        ..LogConfig::default()
    };
    let raft_log = RaftLog::open(
        Arc::clone(&backend),
        "raft/metadata",
        log,
        pool,
        Arc::clone(cache),
    )
    .map_err(storage_error)?;
    let group_storage = GroupStorage {
        backend: Arc::clone(&backend),
        pool: pool.clone(),
        cache: Arc::clone(cache),
        log,
        // Messages and events are encrypted like a single node's; the metadata log, like a
        // single node's, holds names and hashes only.
        cipher: config.cipher(),
    };
    let groups =
        PartitionGroups::new(group_storage.clone()).with_stream_ciphers(config.stream_ciphers());
    let mut event_groups = Vec::new();
    for shard in 0..events.num_shards() {
        event_groups.push((
            event_group_id(shard),
            open_shard_group(
                &group_storage,
                events,
                shard,
                EventCompaction::every(config.raft_event_compact_entries),
            )
            .map_err(storage_error)?,
        ));
    }
    let stopped_shards: Vec<_> = event_groups
        .iter()
        .map(|(_, store)| store.machine().0.stopped_flag())
        .collect();
    let (machine, view) = MetadataMachine::open_with(
        backend,
        raft_log.dir().to_path_buf(),
        METADATA_SNAPSHOT_EVERY,
        Box::new(groups.clone()),
        eddy_stream_store::replicated_metadata::SnapshotWrites::Background,
    )
    .map_err(storage_error)?;
    let store = Replicated::open(raft_log, AsCluster(machine)).map_err(storage_error)?;
    Ok(OpenedGroups {
        groups,
        event_groups,
        stopped_shards,
        view,
        store,
    })
}

/// The cluster's id, kept in `raft_dir` (chosen on the first start from the founding
/// `members` and, with peer TLS, the CA's fingerprint).
fn cluster_id(
    raft_dir: &Path,
    peer_tls: Option<&PeerTls>,
    members: &[NodeId],
) -> Result<u64, ConfigError> {
    let members_fingerprint = fingerprint(members);
    super::incarnation::cluster_id(
        raft_dir,
        peer_tls.map_or(members_fingerprint, |tls| {
            tls.ca_fingerprint() ^ members_fingerprint.rotate_left(17)
        }),
    )
    .map_err(storage_error)
}

/// The members this node followed before a restart (kept in `raft_dir`), or else `peers`
/// (the `--peer` flags).
fn followed_or(
    raft_dir: &Path,
    me: NodeId,
    peers: BTreeMap<NodeId, SocketAddr>,
) -> BTreeMap<NodeId, SocketAddr> {
    match read_followed_members(raft_dir, me) {
        Some(followed) => {
            if followed != peers {
                tracing::info!(followed = ?followed.keys().collect::<Vec<_>>(), "peers: the members followed before the restart, not the --peer flags");
            }
            followed
        }
        None => peers,
    }
}

/// The node's events as [`start`]'s runner reports them: counts a failed group in `failures`
/// and the metadata group's elections of this node in `elected`, and logs role changes.
fn count_node_event(event: &Event, elected: &AtomicU64, failures: &AtomicU64) {
    if let Event::GroupFailed { group } = event {
        failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::error!(%group, "a replicated group failed on this member: it takes no part in it until restarted; /health answers 503");
    }
    if let Event::RoleChanged {
        group,
        role,
        term,
        leader,
    } = event
    {
        if *group == METADATA_GROUP {
            if *role == eddy_consensus::Role::Leader {
                elected.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            tracing::info!(?role, term, ?leader, "metadata group role changed");
        } else {
            tracing::debug!(?group, ?role, term, ?leader, "partition group role changed");
        }
    }
}

/// Starts this node's member of the cluster `config` describes, its groups under
/// `data_dir/raft/`: the metadata group, a group per stream partition and one per shard of
/// `events`.
///
/// # Errors
/// Peers that do not resolve, or group storage that does not open.
pub async fn start(
    config: &ServerConfig,
    data_dir: &Path,
    pool: &CommitPool,
    cache: &Arc<Cache>,
    advertised: Advertised,
    events: &Arc<eddy_event_store::EventStore>,
) -> Result<Member, ConfigError> {
    let peer_tls = load_peer_tls(config)?;
    let peers = peer_addrs(config).await?;
    let me = config.node_id;
    let raft_dir = data_dir.join("raft");
    std::fs::create_dir_all(&raft_dir).map_err(storage_error)?;
    let members = founding_members(config, &peers, &raft_dir, peer_tls.as_ref()).await?;
    let OpenedGroups {
        groups,
        event_groups,
        stopped_shards,
        view,
        store,
    } = open_groups(config, data_dir, pool, cache, events)?;

    let cluster = cluster_id(&raft_dir, peer_tls.as_ref(), &members)?;
    // The metadata change feed's history is the cluster's: every member records the same
    // entries at the same Raft indexes, so a client's cursor holds on any member.
    view.adopt_history(u128::from(cluster));
    let hello = greeting(config, &advertised, events, cluster, &members);
    let (incarnations, fresh) =
        super::incarnation::Incarnations::open(&raft_dir, me).map_err(storage_error)?;
    if fresh {
        tracing::info!("new member directory: a peer that knew this node will have it rebuilt");
    }
    let incarnations = Arc::new(incarnations);
    let peers = followed_or(&raft_dir, me, peers);
    let transport = Transport::new(hello, peers, peer_tls, config.max_peer_connections)
        .with_incarnations(Arc::clone(&incarnations));
    let inbox = Arc::new(RunnerInbox {
        runner: OnceLock::new(),
        raft_dir: raft_dir.clone(),
        events: Arc::clone(events),
        fetcher: transport.fetcher(),
        copying: Arc::default(),
        copies: Arc::default(),
        stopped_shards: stopped_shards.clone(),
        forwarded: OnceLock::new(),
        stream_forwarded: OnceLock::new(),
    });
    let stop = CancellationToken::new();
    let outbox = transport.start_outbound(&inbox, &stop);
    let sender = outbox.clone();
    let tick = Duration::from_millis(config.raft_tick_ms);
    let voters = members.clone();
    let elections = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let elected = Arc::clone(&elections);
    let failed_groups = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let failures = Arc::clone(&failed_groups);
    let runner = Runner::spawn(
        "eddy-raft",
        move |wake| Node::new(NodeConfig::new(me, voters), wake),
        tick,
        Box::new(move |to, batch| sender.send(to, &batch)),
        Box::new(move |event| count_node_event(event, &elected, &failures)),
    )
    .map_err(storage_error)?;
    let _ = inbox.runner.set(runner.clone());
    // Read after the runner is set: a loss learned before is in the file, one learned from
    // now on reaches the node directly. Queued before any group is added, so every group
    // starts rebuilding.
    if inbox.rebuilding_marked() {
        tracing::warn!("this node was rebuilding lost state from its peers: it does not vote until it has caught up");
        runner.with(Node::set_rebuilding);
    }
    groups.start(runner.clone(), &view);
    add_group(&runner, METADATA_GROUP, Box::new(store)).await?;
    for (gid, store) in event_groups {
        add_group(&runner, gid, Box::new(store)).await?;
    }
    let events = ClusterEvents::new(
        runner.clone(),
        Arc::clone(events),
        transport.directory().clone(),
        me,
    )
    .with_forwarder(transport.forwarder());
    let streams = ClusterStreams::new(runner, groups, view)
        .with_forwarder(transport.forwarder())
        .with_directory(transport.directory().clone())
        .with_identity(me, transport.authenticates())
        .with_membership(
            transport.peers().clone(),
            replication_address(config, advertised.replication),
        );
    tracing::info!(node_id = me, members = ?members, "cluster member started");
    Ok(Member {
        streams,
        events,
        transport,
        incarnations,
        inbox,
        stop,
        elections,
        outbox,
        failed_groups,
        stopped_shards,
        followed: std::sync::Mutex::default(),
    })
}

/// `/health`'s role for a member whose metadata group is at `view` and on which `failed`
/// groups failed.
fn health_of(view: Option<eddy_consensus::GroupView>, failed: u64) -> Option<&'static str> {
    let view = view?;
    view.leader?;
    if failed > 0 {
        return None;
    }
    match view.role {
        eddy_consensus::Role::Leader => Some("leader"),
        eddy_consensus::Role::Follower => Some("follower"),
        eddy_consensus::Role::Candidate => None,
    }
}

impl Member {
    /// Answers the changes peers forward to this member with `handler` (once).
    pub fn set_forward_handler(&self, handler: ForwardHandler) {
        let _ = self.inbox.forwarded.set(handler);
    }

    /// Answers the stream writes peers forward to this member with `handler` (once).
    pub fn set_stream_forward_handler(&self, handler: ForwardHandler) {
        let _ = self.inbox.stream_forwarded.set(handler);
    }

    /// Serves the replication port until `stop` fires.
    pub async fn serve_replication(
        self: Arc<Self>,
        listener: TcpListener,
        stop: CancellationToken,
    ) {
        self.transport
            .serve(listener, Arc::clone(&self.inbox), stop)
            .await;
    }

    /// Periodic work until `stop` fires: partition and event shard leaderships move to their
    /// preferred members, and `on_leader` runs while this member leads the metadata group (the root user's
    /// creation).
    pub async fn maintain<F, Fut>(self: Arc<Self>, stop: CancellationToken, on_leader: F)
    where
        F: Fn(ClusterStreams) -> Fut + Send,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let mut every = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = every.tick() => {}
            }
            self.streams.maintain_partitions();
            self.follow_recorded_members().await;
            if !self.streams.changing_membership() {
                balance_leaders(self.streams.runner(), self.events.group_ids());
            }
            if self.inbox.rebuilding_marked() && self.caught_up().await {
                match std::fs::remove_file(self.inbox.raft_dir.join(REBUILDING_FILE))
                    .and_then(|()| std::fs::File::open(&self.inbox.raft_dir)?.sync_all())
                {
                    Ok(()) => {
                        self.incarnations.mark_rebuilt();
                        tracing::info!("rebuilt from the peers: every group has caught up");
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot remove the rebuilding marker"),
                }
            }
            if self.streams.is_metadata_leader() {
                on_leader(self.streams.clone()).await;
            }
        }
    }

    /// Makes the transport's peers the members the metadata records, once it records any
    /// (before that, the `--peer` flags' members stay): a member added is dialled and
    /// accepted, one removed no longer. An address that does not resolve keeps the member's
    /// last known one.
    async fn follow_recorded_members(&self) {
        let recorded = self.streams.read(|s| s.members.clone());
        if recorded.is_empty() || *eddy_log::lock(&self.followed) == recorded {
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.streams.runner().with(move |node| {
            let _ = tx.send(node.membership(METADATA_GROUP));
        });
        let metadata = rx.await.ok().flatten();
        if !record_is_complete(&recorded, metadata.as_ref()) {
            tracing::debug!(
                recorded = ?recorded.keys().collect::<Vec<_>>(),
                "the members' record lacks some of the metadata group's members: not followed until a membership change completes it"
            );
            return;
        }
        let mut resolved_all = true;
        let known = self.transport.peers().all();
        let mut peers = BTreeMap::new();
        for (&id, address) in &recorded {
            let resolved = tokio::net::lookup_host(address.as_str())
                .await
                .ok()
                .and_then(|mut a| a.next());
            if let Some(addr) = resolved.or_else(|| known.get(&id).copied()) {
                peers.insert(id, addr);
            } else {
                tracing::warn!(
                    member = id,
                    address,
                    "a recorded member's address does not resolve"
                );
                resolved_all = false;
            }
        }
        // Kept on disk first: a restart accepts these members at once, before its metadata
        // group catches up (a member added at run time may be the one it must catch up from).
        if let Err(e) = write_followed_members(&self.inbox.raft_dir, &peers) {
            tracing::warn!(error = %e, "cannot keep the members followed in {MEMBERS_FILE}");
        }
        self.transport.set_peers(peers);
        if resolved_all {
            *eddy_log::lock(&self.followed) = recorded;
        }
    }

    /// Whether every group of this member has caught up after a loss of state: each
    /// partition of the applied metadata has its group here, and no group is rebuilding.
    async fn caught_up(&self) -> bool {
        let wanted = self.streams.read(|s| s.partitions().count());
        if self.streams.groups().all().len() < wanted {
            return false;
        }
        // Asked after the groups were counted: their additions were queued before this.
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.streams.runner().with(move |node| {
            let _ = tx.send(node.rebuilding());
        });
        matches!(rx.await, Ok(false))
    }

    /// `/health`'s answer: this member's role in the metadata group while a leader is known
    /// (`None` otherwise, or while it is rebuilding from its peers, or once a group failed
    /// here or an event shard stopped applying: the member no longer holds what it should
    /// until it is restarted).
    pub fn health_role(&self) -> Option<&'static str> {
        let stopped = self
            .stopped_shards
            .iter()
            .filter(|s| s.load(std::sync::atomic::Ordering::Acquire))
            .count() as u64;
        let failed = self
            .failed_groups
            .load(std::sync::atomic::Ordering::Relaxed)
            + stopped;
        // Not ready before the first metadata leader created the root user (its one
        // bootstrap entry): a client's login then would be refused as a bad password.
        if !self.streams.read(|meta| {
            meta.users
                .contains_key(&eddy_auth::permissions::ROOT_USER_ID)
        }) {
            return None;
        }
        health_of(self.streams.runner().view().get(METADATA_GROUP), failed)
    }

    /// Writes the member's gauges: its role, term, commit and applied indexes per group kind,
    /// the replication progress of each peer on the metadata group (leader only), partition
    /// groups and how many it leads, frames dropped towards peers.
    pub fn sample(&self, out: &mut String) {
        use std::fmt::Write as _;
        self.sample_groups(out);
        let elections = self.elections.load(std::sync::atomic::Ordering::Relaxed);
        let failed = self
            .failed_groups
            .load(std::sync::atomic::Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP eddy_cluster_failed_groups Replicated groups whose storage failed on this member (each stopped here until a restart).\n# TYPE eddy_cluster_failed_groups gauge\neddy_cluster_failed_groups {failed}"
        );
        let _ = writeln!(
            out,
            "# HELP eddy_cluster_elections_total Times this member became leader of the metadata group.\n# TYPE eddy_cluster_elections_total counter\neddy_cluster_elections_total {elections}"
        );
        let stalls = self.streams.runner().stalls();
        #[allow(clippy::cast_precision_loss)] // µs far below 2^52
        let longest = stalls.longest_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(
            out,
            "# HELP eddy_cluster_raft_longest_turn_seconds The longest turn of the Raft thread since start (it sends every group's heartbeats: a long turn can cause elections).\n# TYPE eddy_cluster_raft_longest_turn_seconds gauge\neddy_cluster_raft_longest_turn_seconds {longest}\n# HELP eddy_cluster_raft_stalls_total Turns of the Raft thread longer than 50 ms.\n# TYPE eddy_cluster_raft_stalls_total counter\neddy_cluster_raft_stalls_total {}",
            stalls.over.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP eddy_cluster_peer_frames_dropped_total Replication frames this member dropped because a peer's send queue was full or closed (Raft sends what matters again).\n# TYPE eddy_cluster_peer_frames_dropped_total counter\neddy_cluster_peer_frames_dropped_total {}",
            self.outbox.dropped()
        );
        self.sample_peer_port(out);
        let copies = &self.inbox.copies;
        for (name, help, value) in [
            ("eddy_cluster_event_snapshot_copies_total", "Event shard snapshots this member installed after copying the shard's records from a peer.", &copies.done),
            ("eddy_cluster_event_snapshot_copy_failures_total", "Event shard snapshot copies that failed here (the leader sends another snapshot).", &copies.failed),
            ("eddy_cluster_event_snapshot_records_copied_total", "Event shard records copied from peers for snapshots.", &copies.records),
            ("eddy_cluster_event_snapshot_bytes_copied_total", "Payload bytes of the event shard records copied from peers for snapshots.", &copies.bytes),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
    }

    /// The `/metrics` lines of the Raft groups on this member: the metadata group's role,
    /// term, indexes and (on its leader) each peer's lag, and the partition groups.
    fn sample_groups(&self, out: &mut String) {
        use std::fmt::Write as _;
        let statuses = self.streams.runner().statuses();
        let role_code = |r: eddy_consensus::Role| match r {
            eddy_consensus::Role::Leader => 2,
            eddy_consensus::Role::Candidate => 1,
            eddy_consensus::Role::Follower => 0,
        };
        let _ = writeln!(
            out,
            "# HELP eddy_cluster_role This member's role in the metadata group (0 follower, 1 candidate, 2 leader).\n# TYPE eddy_cluster_role gauge"
        );
        if let Some(meta) = statuses.get(&METADATA_GROUP) {
            let _ = writeln!(out, "eddy_cluster_role {}", role_code(meta.role));
            let _ = writeln!(
                out,
                "# HELP eddy_cluster_term The metadata group's current term.\n# TYPE eddy_cluster_term gauge\neddy_cluster_term {}",
                meta.term
            );
            let _ = writeln!(
                out,
                "# HELP eddy_cluster_commit_index The metadata group's commit index here.\n# TYPE eddy_cluster_commit_index gauge\neddy_cluster_commit_index {}",
                meta.commit
            );
            let _ = writeln!(
                out,
                "# HELP eddy_cluster_applied_index The metadata group's applied index here.\n# TYPE eddy_cluster_applied_index gauge\neddy_cluster_applied_index {}",
                meta.applied
            );
            let _ = writeln!(
                out,
                "# HELP eddy_cluster_peer_lag Entries a peer's log is behind the leader's on the metadata group (leader only).\n# TYPE eddy_cluster_peer_lag gauge"
            );
            for (peer, matched) in &meta.matched {
                let _ = writeln!(
                    out,
                    "eddy_cluster_peer_lag{{peer=\"{peer}\"}} {}",
                    meta.last_index.saturating_sub(*matched)
                );
            }
        }
        let partitions = statuses.len().saturating_sub(1);
        let led = statuses
            .iter()
            .filter(|(g, s)| **g != METADATA_GROUP && s.role == eddy_consensus::Role::Leader)
            .count();
        let _ = writeln!(
            out,
            "# HELP eddy_cluster_partition_groups Partition groups on this member.\n# TYPE eddy_cluster_partition_groups gauge\neddy_cluster_partition_groups {partitions}\n# HELP eddy_cluster_partition_groups_led Partition groups this member leads.\n# TYPE eddy_cluster_partition_groups_led gauge\neddy_cluster_partition_groups_led {led}"
        );
    }

    /// The `/metrics` lines of the replication port: whether it authenticates members, the
    /// connections it refused and those it authenticated.
    fn sample_peer_port(&self, out: &mut String) {
        use std::fmt::Write as _;
        let port = self.transport.counters();
        let _ = writeln!(
            out,
            "# HELP eddy_cluster_peer_tls Whether the replication port authenticates members with mutual TLS (0: --insecure-peer-plaintext).\n# TYPE eddy_cluster_peer_tls gauge\neddy_cluster_peer_tls {}",
            u8::from(self.transport.authenticates())
        );
        let _ = writeln!(
            out,
            "# HELP eddy_cluster_peer_connections_refused_total Replication-port connections refused, by reason (limit: the port's or an address's cap; handshake: no TLS handshake or greeting in time, or not a greeting first; identity: a member its certificate does not name, or no member of this cluster; duplicate: another process of the same member is live).\n# TYPE eddy_cluster_peer_connections_refused_total counter"
        );
        for (reason, value) in [
            ("limit", &port.refused_limit),
            ("handshake", &port.refused_handshake),
            ("identity", &port.refused_identity),
            ("duplicate", &port.refused_duplicate),
        ] {
            let _ = writeln!(
                out,
                "eddy_cluster_peer_connections_refused_total{{reason=\"{reason}\"}} {}",
                value.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP eddy_cluster_peer_connections_authenticated_total Replication-port connections that proved which member they are.\n# TYPE eddy_cluster_peer_connections_authenticated_total counter\neddy_cluster_peer_connections_authenticated_total {}",
            port.authenticated.load(Ordering::Relaxed)
        );
    }

    /// Stops the transport and the Raft thread.
    pub fn stop(&self) {
        self.stop.cancel();
        self.streams.runner().stop();
    }
}

#[cfg(test)]
mod record_tests {
    use super::record_is_complete;
    use std::collections::BTreeMap;

    #[test]
    fn a_record_is_followed_only_once_it_names_every_member_of_the_metadata_group() {
        let record = |ids: &[u64]| -> BTreeMap<u64, String> {
            ids.iter()
                .map(|&i| (i, format!("10.0.0.{i}:10001")))
                .collect()
        };
        let metadata =
            |voters: &[u64], learners: &[u64], outgoing: &[u64]| eddy_consensus::Membership {
                voters: voters.to_vec(),
                learners: learners.to_vec(),
                voters_outgoing: outgoing.to_vec(),
                ..eddy_consensus::Membership::default()
            };
        // The first change's leader died after recording itself only: following that would
        // leave members 2 and 3 neither dialling nor accepting each other.
        assert!(!record_is_complete(
            &record(&[1]),
            Some(&metadata(&[1, 2, 3], &[], &[]))
        ));
        assert!(record_is_complete(
            &record(&[1, 2, 3]),
            Some(&metadata(&[1, 2, 3], &[], &[]))
        ));
        // A member being added is recorded before it joins any group.
        assert!(record_is_complete(
            &record(&[1, 2, 3, 4]),
            Some(&metadata(&[1, 2, 3], &[], &[]))
        ));
        assert!(record_is_complete(
            &record(&[1, 2, 3, 4]),
            Some(&metadata(&[1, 2, 3], &[4], &[]))
        ));
        assert!(!record_is_complete(
            &record(&[1, 2, 3]),
            Some(&metadata(&[1, 2, 3], &[4], &[]))
        ));
        // In a joint configuration the outgoing voters count too.
        assert!(!record_is_complete(
            &record(&[2, 3, 4]),
            Some(&metadata(&[2, 3, 4], &[], &[1, 2, 3]))
        ));
        // Not known here (no metadata group yet): the record is followed.
        assert!(record_is_complete(&record(&[1]), None));
    }
}

#[cfg(test)]
mod replication_address_tests {
    use super::{replication_address, ServerConfig};

    #[test]
    fn a_member_is_recorded_at_its_replication_host_when_it_names_one() {
        let bound = "10.0.0.1:10001".parse().unwrap();
        let config = |replication_host: Option<&str>, advertise_host: Option<&str>| ServerConfig {
            replication_host: replication_host.map(|h| h.parse().unwrap()),
            advertise_host: advertise_host.map(str::to_owned),
            ..ServerConfig::default()
        };
        // A private replication network: the clients' advertised host is not where the
        // members reach it.
        assert_eq!(
            replication_address(&config(Some("10.0.0.1"), Some("eddy.example")), bound),
            "10.0.0.1:10001"
        );
        // Bound everywhere, or on the clients' host: the advertised host.
        let everywhere = "0.0.0.0:10001".parse().unwrap();
        assert_eq!(
            replication_address(&config(Some("0.0.0.0"), Some("eddy.example")), everywhere),
            "eddy.example:10001"
        );
        assert_eq!(
            replication_address(&config(None, Some("eddy.example")), bound),
            "eddy.example:10001"
        );
        assert_eq!(
            replication_address(&config(None, None), bound),
            "10.0.0.1:10001"
        );
    }
}

#[cfg(test)]
mod health_tests {
    use super::health_of;
    use eddy_consensus::{GroupView, Role};

    #[test]
    fn health_names_the_role_while_in_sync_and_is_unhealthy_once_a_group_failed() {
        let view = |role, leader| GroupView {
            role,
            leader,
            term: 3,
        };
        assert_eq!(
            health_of(Some(view(Role::Leader, Some(1))), 0),
            Some("leader")
        );
        assert_eq!(
            health_of(Some(view(Role::Follower, Some(1))), 0),
            Some("follower")
        );
        assert_eq!(health_of(Some(view(Role::Follower, None)), 0), None);
        assert_eq!(health_of(Some(view(Role::Candidate, Some(1))), 0), None);
        assert_eq!(health_of(None, 0), None);
        assert_eq!(health_of(Some(view(Role::Leader, Some(1))), 1), None);
    }
}
