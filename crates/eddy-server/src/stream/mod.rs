//! The stream (Iggy) protocol port: every command of the catalog over TCP (or TLS), as the
//! published Rust SDK `iggy 0.11.0-edge.4` expects it.
//!
//! ```text
//! socket --> connection (frames, lockstep, size cap, evictions, stale timer, drain)
//!              |  header + body
//!              v
//!           dispatch (route, checksum, login gate, decode, resolve ids, authorize)
//!              |  decoded request + resolved resource
//!              v
//!           handlers: system, users (+tokens), login, catalog (streams, topics, partitions, segments),
//!                     messages (+offsets), consumer_groups
//!              |  Outcome (reply payload or eviction) / StreamError
//!              v
//!           connection writes the reply (error codes chosen in error.rs)
//! ```
//!
//! * [`StreamState`]: what every connection shares: the store, the clients table, the
//!   consumer-group coordinator, the lock that serialises id assignment.
//! * Only `connection` does socket I/O; handlers take a decoded request and state and return a
//!   value.
//!
//! Invariants: exactly one reply (or eviction) per request, in request order; an eviction is
//! only ever written as the answer to a request, or immediately before closing; a frame larger
//! than `stream_max_frame_size` closes its connection before its body is read; a metadata
//! write's reply is sent only after the operation is durable and applied, and an acknowledged
//! `SEND_MESSAGES` is durable when its topic has `enforce_fsync` (the default).

mod catalog;
mod changes;
mod connection;
mod consumer_groups;
mod dispatch;
pub(crate) mod group_coordinator;
mod handler;
mod login;
mod messages;
mod snapshot;
pub(crate) mod stats;
pub(crate) mod stream_keys;
mod system;
pub(crate) mod throttle;
mod update_resource;
mod users;
pub(crate) mod views;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use eddy_auth::credentials::STATUS_ACTIVE;
use eddy_auth::permissions::ROOT_USER_ID;
use eddy_auth::sessions::ClientsTable;
use eddy_codec::stream::{CommandCode, GlobalPermissions, Permissions, COMMANDS};
use eddy_log::lock;
use eddy_stream_store::{MetadataOp, MetadataState, Operation, StreamStore};

pub use connection::serve_connection;
use eddy_replicated::stream::error::StreamError;
use group_coordinator::Coordinator;

/// Per-command metric names: every command of the table, in table order, then
/// [`INVALID_REQUEST`] for frames that route to no command.
pub const METRIC_NAMES: &[&str] = &metric_names();

/// Metric name of requests that name no known command (unknown code, internal operation).
pub const INVALID_REQUEST: &str = "INVALID_REQUEST";

const fn metric_names() -> [&'static str; COMMANDS.len() + 1] {
    let mut names = [INVALID_REQUEST; COMMANDS.len() + 1];
    let mut i = 0;
    while i < COMMANDS.len() {
        names[i] = COMMANDS[i].name;
        i += 1;
    }
    names
}

/// The metrics index of a command (its row in [`COMMANDS`]).
pub(crate) const fn metric_index(code: CommandCode) -> usize {
    let mut i = 0;
    while i < COMMANDS.len() {
        if COMMANDS[i].code as u32 == code as u32 {
            return i;
        }
        i += 1;
    }
    COMMANDS.len()
}

/// The metrics index of requests that route to no command.
pub(crate) const INVALID_METRIC: usize = COMMANDS.len();

/// Stream ids are below this (reference: 2^20).
pub const MAX_STREAMS: u32 = 1 << 20;
/// Topic ids within a stream are below this.
pub const MAX_TOPICS_PER_STREAM: u32 = 4096;
/// Largest poll reply payload assembled for one request, bytes (at least one batch is always
/// served when any message qualifies).
pub const MAX_POLL_BYTES: u64 = 64 * 1024 * 1024;

/// This node as `GET_CLUSTER_METADATA` describes it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The address clients reach the stream port on.
    pub stream_addr: SocketAddr,
    /// This node's id (`--node-id`; a single node's is 1 unless set).
    pub id: u64,
}

/// What keeps a slow or silent stream-protocol peer from holding a connection (and its
/// buffer) for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// A connection without a session is closed this long after its accept or its logout.
    pub login_timeout: Duration,
    /// A session that completes no request for this long is closed (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Largest frame read before login, header included.
    pub max_prelogin_frame_size: u32,
    /// Longest an answer may take to write.
    pub write_timeout: Duration,
    /// Longest a frame holding room in the request budget may take to arrive, from when it
    /// got that room.
    pub frame_timeout: Duration,
}

impl ConnectionLimits {
    /// The limits `config` sets.
    pub fn from_config(config: &crate::config::ServerConfig) -> Self {
        Self {
            login_timeout: Duration::from_millis(config.stream_login_timeout_ms),
            idle_timeout: (config.stream_idle_timeout_ms > 0)
                .then(|| Duration::from_millis(config.stream_idle_timeout_ms)),
            max_prelogin_frame_size: config.stream_max_prelogin_frame_size,
            write_timeout: Duration::from_millis(config.stream_write_timeout_ms),
            frame_timeout: Duration::from_millis(config.stream_frame_timeout_ms),
        }
    }
}

/// State shared by every stream-protocol connection.
#[derive(Debug)]
pub struct StreamState {
    /// The store (metadata and partitions) of a single node.
    pub store: Arc<StreamStore>,
    /// In a cluster: the replicated metadata and partitions, which every stream request uses
    /// instead of `store` (left empty).
    pub cluster: Option<crate::cluster::streams::ClusterStreams>,
    /// Connected clients and their sessions.
    pub clients: ClientsTable,
    /// Consumer-group members and assignments.
    groups: Mutex<Coordinator>,
    /// Serialises operations that pick a new id (create stream/topic/user/group) from the
    /// metadata with their commit, so two of them never pick the same id.
    creation: tokio::sync::Mutex<()>,
    /// Round-robin cursors of `Balanced` sends, per (stream, topic).
    balanced: Mutex<HashMap<(u32, u32), u32>>,
    /// This node.
    pub node: NodeInfo,
    /// Largest accepted frame, header included.
    pub max_frame_size: u32,
    /// Deadlines and the pre-login frame cap of every connection.
    pub limits: ConnectionLimits,
    /// Login throttling: the Argon2id bound, failure backoff, closing after failures.
    pub login: throttle::LoginThrottle,
    /// Metadata operations with file effects in flight (readers may wait behind them).
    slow_commits: crate::offload::SlowCommits,
    /// Message bytes submitted to partitions and not yet acknowledged.
    pub(crate) appends: crate::offload::InFlight,
    /// Heartbeat interval (`None`: stale clients are never evicted).
    pub heartbeat: Option<Duration>,
    /// The server key as the wrapper of streams' own keys (`None` without `--encryption-key`).
    pub stream_keys: Option<stream_keys::ServerKey>,
    /// Topics created with `durability = replicated` acknowledge from memory
    /// (`--replicated-durability memory`), not after fsync.
    pub replicated_in_memory: bool,
    /// Start time, µs since the epoch.
    pub started_at_us: u64,
    started: std::time::Instant,
    /// The data directory (disk figures of `GET_STATS`).
    pub data_dir: PathBuf,
    /// The running configuration as TOML with secrets redacted (snapshots).
    config_toml: String,
    host: stats::HostSampler,
}

impl StreamState {
    /// State for a server whose stream listener is bound at `stream_addr`.
    pub fn new(
        store: Arc<StreamStore>,
        config: &crate::config::ServerConfig,
        stream_addr: SocketAddr,
    ) -> Self {
        Self {
            store,
            cluster: None,
            clients: ClientsTable::new(),
            groups: Mutex::new(Coordinator::new(Duration::from_millis(
                config.stream_group_rebalancing_timeout_ms,
            ))),
            creation: tokio::sync::Mutex::new(()),
            balanced: Mutex::new(HashMap::new()),
            node: NodeInfo {
                stream_addr,
                id: config.node_id,
            },
            max_frame_size: config.stream_max_frame_size,
            limits: ConnectionLimits::from_config(config),
            login: throttle::LoginThrottle::new(config),
            slow_commits: crate::offload::SlowCommits::default(),
            appends: crate::offload::InFlight::default(),
            stream_keys: config.stream_key_wrapper(),
            heartbeat: (config.stream_heartbeat_interval_ms > 0)
                .then(|| Duration::from_millis(config.stream_heartbeat_interval_ms)),
            replicated_in_memory: config.replicated_durability
                == crate::config::ReplicatedDurability::Memory,
            started_at_us: crate::clock::now_micros(),
            started: std::time::Instant::now(),
            data_dir: config.data_dir.clone(),
            config_toml: config.redacted_toml(),
            host: stats::HostSampler::new(),
        }
    }

    /// Runs this node's stream protocol on a cluster's replicated groups.
    #[must_use]
    pub fn with_cluster(mut self, cluster: crate::cluster::streams::ClusterStreams) -> Self {
        self.cluster = Some(cluster);
        self
    }

    /// On a cluster member, waits until the figures of `addrs` here include every batch
    /// acknowledged before now (a send acknowledged through any member shows in a
    /// `GET_TOPIC` that follows it). Figures are informational: a partition whose group
    /// cannot confirm within the read wait is shown with this member's own figures rather
    /// than failing the whole listing (the metadata read was confirmed already).
    pub(crate) async fn settle_figures(
        &self,
        addrs: impl IntoIterator<Item = eddy_stream_store::PartitionAddr>,
    ) {
        if let Some(cluster) = &self.cluster {
            if let Err(e) = cluster.linearize_partitions(addrs).await {
                tracing::debug!(error = %e, "figures shown as this member last applied them");
            }
        }
    }

    /// The partitions of every stream, of stream `stream_id` alone when given, of its topic
    /// `topic_id` alone when that is given too.
    pub(crate) fn partitions_of(
        &self,
        stream_id: Option<u32>,
        topic_id: Option<u32>,
    ) -> Vec<eddy_stream_store::PartitionAddr> {
        self.read(|meta| {
            let mut addrs = Vec::new();
            for stream in meta.streams.values() {
                if stream_id.is_some_and(|id| id != stream.id) {
                    continue;
                }
                for topic in stream.topics.values() {
                    if topic_id.is_some_and(|id| id != topic.id) {
                        continue;
                    }
                    addrs.extend(topic.partitions.keys().map(|&partition_id| {
                        eddy_stream_store::PartitionAddr {
                            stream_id: stream.id,
                            topic_id: topic.id,
                            partition_id,
                        }
                    }));
                }
            }
            addrs
        })
    }

    /// A partition's figures (zeros when it has no data here).
    pub(crate) fn partition_stats(
        &self,
        addr: eddy_stream_store::PartitionAddr,
    ) -> eddy_stream_store::PartitionStats {
        match &self.cluster {
            Some(cluster) => cluster.partition_stats(addr).unwrap_or(views::NO_STATS),
            None => views::partition_stats(&self.store, addr),
        }
    }

    /// A consumer's stored offset on a partition.
    pub(crate) fn consumer_offset(
        &self,
        addr: eddy_stream_store::PartitionAddr,
        consumer: eddy_stream_store::ConsumerKey,
    ) -> Option<u64> {
        match &self.cluster {
            Some(cluster) => cluster.consumer_offset(addr, consumer),
            None => self.store.consumer_offset(addr, consumer),
        }
    }

    /// The consumer-group coordinator (held briefly, never across an await), with the pending
    /// revocations whose rebalancing timeout has passed completed.
    pub(crate) fn groups(&self) -> MutexGuard<'_, Coordinator> {
        let mut groups = lock(&self.groups);
        groups.settle(std::time::Instant::now());
        groups
    }

    /// Reads the durable, applied metadata. While an operation that creates, deletes or purges
    /// partition files is being applied (the applier holds the metadata lock meanwhile), the
    /// read leaves its runtime worker first, so the worker's other tasks go on.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&MetadataState) -> R) -> R {
        if let Some(cluster) = &self.cluster {
            return cluster.read(f);
        }
        if self.slow_commits.any() {
            crate::offload::may_block(|| self.store.read_metadata(f))
        } else {
            self.store.read_metadata(f)
        }
    }

    /// Commits a metadata operation and waits until it is durable and applied. The submission
    /// (which may wait on back-pressure or on the applier) runs on the blocking pool; the
    /// completion is awaited.
    pub(crate) async fn commit(&self, op: MetadataOp) -> Result<(), StreamError> {
        if let Some(cluster) = &self.cluster {
            cluster.commit(&op).await?;
            return Ok(());
        }
        let _slow = crate::offload::touches_files(&op).then(|| self.slow_commits.enter());
        let store = Arc::clone(&self.store);
        let commit = crate::offload::blocking(move || store.commit(Operation::Metadata(op))).await;
        commit.await?;
        Ok(())
    }

    /// The next partition of a `Balanced` send on a topic with `count` partitions.
    pub(crate) fn next_balanced(&self, stream_id: u32, topic_id: u32, count: u32) -> u32 {
        let mut cursors = lock(&self.balanced);
        let cursor = cursors.entry((stream_id, topic_id)).or_insert(0);
        let at = *cursor % count.max(1);
        *cursor = at.wrapping_add(1);
        at
    }

    /// Removes a client from every group it belongs to, rebalancing them.
    pub(crate) fn leave_all_groups(&self, client_id: u32) {
        let keys = self.groups().groups_of(client_id);
        if keys.is_empty() {
            return;
        }
        let partitions: Vec<Vec<u32>> = self.read(|meta| {
            keys.iter()
                .map(|k| views::partition_ids(meta, k.stream_id, k.topic_id))
                .collect()
        });
        let mut groups = self.groups();
        for (key, partitions) in keys.iter().zip(partitions) {
            let _ = groups.leave(*key, client_id, &partitions);
        }
    }

    /// Forgets memberships of groups, and `Balanced` cursors of topics, that the metadata no
    /// longer has (after deletes).
    pub(crate) fn prune_groups(&self) {
        let mut groups = self.groups();
        let mut cursors = lock(&self.balanced);
        self.read(|meta| {
            groups.retain(|k| {
                meta.topic(k.stream_id, k.topic_id)
                    .is_some_and(|t| t.groups.contains_key(&k.group_id))
            });
            cursors.retain(|(stream, topic), _| meta.topic(*stream, *topic).is_some());
        });
    }

    /// The address a connection's client connected from.
    pub(crate) fn peer_ip(&self, client_id: u32) -> Option<std::net::IpAddr> {
        self.clients
            .get(client_id)
            .and_then(|c| c.address.parse().ok())
            .map(|a: SocketAddr| a.ip())
    }

    /// Ends every session of a user (deleted or deactivated) and its group memberships.
    pub(crate) fn end_sessions_of(&self, user_id: u32) {
        for client in self.clients.end_sessions_of(user_id) {
            self.leave_all_groups(client);
        }
    }
}

/// Purges expired personal access tokens every `every` until `stop` fires (they stop working
/// at their expiry whatever the interval; the purge frees their names and their share of the
/// per-user limit).
pub async fn purge_expired_tokens(
    state: &StreamState,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        match users::purge_expired_tokens(state, None, crate::clock::now_micros()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(tokens = n, "purged expired personal access tokens"),
            Err(e) => tracing::warn!(error = %e, "purging expired personal access tokens failed"),
        }
    }
}

/// Creates the root user (id 0, every permission) on first start, from `root_username` and
/// `root_password`. Returns true if it was created. Later starts leave it as it is.
pub async fn bootstrap_root(
    store: &Arc<StreamStore>,
    config: &crate::config::ServerConfig,
) -> Result<bool, StreamError> {
    if store.read_metadata(|meta| meta.users.contains_key(&ROOT_USER_ID)) {
        return Ok(false);
    }
    let password = config.root_password.clone();
    let hash = tokio::task::spawn_blocking(move || eddy_auth::password::hash_password(&password))
        .await
        .unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()))
        .map_err(StreamError::Auth)?;
    let permissions = Permissions {
        global: GlobalPermissions::ALL,
        ..Permissions::default()
    };
    store
        .commit(Operation::Metadata(MetadataOp::CreateUser {
            id: ROOT_USER_ID,
            username: config.root_username.clone(),
            password_hash: hash,
            status: STATUS_ACTIVE,
            permissions: Some(views::encode_permissions(&permissions)),
            options: Vec::new(),
            created_at: crate::clock::now_micros(),
        }))
        .await?;
    tracing::info!(username = %config.root_username, "root user created");
    Ok(true)
}

/// Creates a cluster's root user (id 0, every permission) when the metadata has none; run by
/// the metadata leader. A concurrent creation by another leader is refused by the metadata
/// (the first one stands).
pub async fn bootstrap_cluster_root(
    cluster: &crate::cluster::streams::ClusterStreams,
    username: &str,
    password: &str,
) {
    if cluster.read(|meta| meta.users.contains_key(&ROOT_USER_ID)) {
        return;
    }
    let password = password.to_owned();
    let Ok(Ok(hash)) =
        tokio::task::spawn_blocking(move || eddy_auth::password::hash_password(&password)).await
    else {
        return;
    };
    let permissions = Permissions {
        global: GlobalPermissions::ALL,
        ..Permissions::default()
    };
    let op = MetadataOp::CreateUser {
        id: ROOT_USER_ID,
        username: username.to_owned(),
        password_hash: hash,
        status: STATUS_ACTIVE,
        permissions: Some(views::encode_permissions(&permissions)),
        options: Vec::new(),
        created_at: crate::clock::now_micros(),
    };
    match cluster.commit(&op).await {
        Ok(()) => tracing::info!(username, "root user created in the cluster"),
        Err(e) => tracing::debug!(error = %e, "root user not created (yet)"),
    }
}

/// What the stored root credential says about the configured one (see
/// [`check_root_credentials`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RootCredentialCheck {
    /// The stored root password is the published default (`iggy`).
    pub default_password: bool,
    /// The configured `root_password` does not log root in: the stored one is in effect.
    pub configured_password_differs: bool,
    /// The stored root user name is not the configured `root_username`.
    pub configured_username_differs: bool,
}

/// The stored root user's name and password hash, if the metadata has a root user.
pub fn stored_root(meta: &MetadataState) -> Option<(String, String)> {
    meta.users
        .get(&ROOT_USER_ID)
        .map(|u| (u.username.clone(), u.password_hash.clone()))
}

/// Whether a stored password hash is the published default password's (one Argon2id
/// verification, on the blocking pool).
pub async fn is_default_password(hash: String) -> bool {
    crate::offload::blocking(move || {
        eddy_auth::password::verify_password(crate::config::DEFAULT_ROOT_PASSWORD, &hash)
    })
    .await
}

/// Checks the stored root credential against the published default and against the
/// configuration, and logs a warning for each finding. The configuration only seeds the root
/// user when the data directory is created, so a warning read from the configuration alone
/// would be silenced by setting `EDDY_ROOT_PASSWORD` while root still logs in with the default.
/// Runs two Argon2id verifications on the blocking pool.
pub async fn check_root_credentials(
    store: &StreamStore,
    config: &crate::config::ServerConfig,
) -> RootCredentialCheck {
    match store.read_metadata(stored_root) {
        Some(root) => check_stored_root(root, config).await,
        None => RootCredentialCheck::default(),
    }
}

/// A cluster member's [`check_root_credentials`]: waits (polling every second, until `stop`)
/// until the replicated metadata this member applied holds the root user, which the first
/// metadata leader creates, then checks it the same way.
pub async fn check_cluster_root_credentials(
    state: &StreamState,
    config: &crate::config::ServerConfig,
    stop: tokio_util::sync::CancellationToken,
) -> Option<RootCredentialCheck> {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            () = stop.cancelled() => return None,
            _ = tick.tick() => {}
        }
        if let Some(root) = state.read(stored_root) {
            return Some(check_stored_root(root, config).await);
        }
    }
}

/// [`check_root_credentials`] of a stored `(user name, password hash)`.
pub async fn check_stored_root(
    (username, hash): (String, String),
    config: &crate::config::ServerConfig,
) -> RootCredentialCheck {
    let configured = (!config.uses_default_root_password()).then(|| config.root_password.clone());
    let (default_password, configured_matches) = crate::offload::blocking(move || {
        let default =
            eddy_auth::password::verify_password(crate::config::DEFAULT_ROOT_PASSWORD, &hash);
        let configured = configured.map_or(default, |configured| {
            eddy_auth::password::verify_password(&configured, &hash)
        });
        (default, configured)
    })
    .await;
    let check = RootCredentialCheck {
        default_password,
        configured_password_differs: !configured_matches,
        configured_username_differs: username != config.root_username,
    };
    if check.default_password {
        tracing::warn!(
            username = %username,
            "the root user logs in with the published default password; change it with \
             CHANGE_PASSWORD before exposing this server (EDDY_ROOT_PASSWORD only sets it when \
             the data directory is created)"
        );
    }
    if check.configured_password_differs {
        tracing::warn!(
            username = %username,
            "the configured root password (root_password, EDDY_ROOT_PASSWORD) is not the stored \
             one: it only seeds a new data directory, and the stored password stays in effect \
             (change it with CHANGE_PASSWORD)"
        );
    }
    if check.configured_username_differs {
        tracing::warn!(
            stored = %username,
            configured = %config.root_username,
            "the configured root user name (root_username) is not the stored one: it only \
             seeds a new data directory, and the stored name stays in effect"
        );
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_follow_the_command_table() {
        assert_eq!(METRIC_NAMES.len(), COMMANDS.len() + 1);
        for spec in &COMMANDS {
            assert_eq!(METRIC_NAMES[metric_index(spec.code)], spec.name);
        }
        assert_eq!(METRIC_NAMES[INVALID_METRIC], INVALID_REQUEST);
    }
}
