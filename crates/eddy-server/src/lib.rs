//! eddy's server: listeners, TLS, sessions, dispatch, HTTP health and metrics.
//!
//! The only crate that knows tokio and every other layer. Start-up order (see
//! [`Server::bind`]): validate the config, lock the data directory, serve `/health` (503 while
//! starting), recover storage, bind the protocol listeners. [`Server::run`] then accepts until its
//! shutdown future fires, drains in-flight requests (bounded by `drain_timeout_ms`), flushes
//! storage and releases the lock.
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

pub(crate) mod address_cap;
pub(crate) mod budget;
pub(crate) mod clock;
pub(crate) mod cluster;
pub(crate) mod compaction;
pub mod config;
pub(crate) mod cpu;
pub mod data_dir;
pub(crate) mod event;
pub(crate) mod fds;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub(crate) mod http;
pub(crate) mod listener;
pub(crate) mod metrics;
pub(crate) mod offload;
pub(crate) mod stream;
pub(crate) mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use eddy_auth::api_keys::{ApiKeys, ApiKeysFileError};
use eddy_event_store::{EventStore, EventStoreError};
use eddy_log::{Cache, CommitPool, FsBackend};
use eddy_stream_store::{StreamStore, StreamStoreConfig, StreamStoreError};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use config::TlsMode;
pub use config::{ConfigError, ServerConfig};
use data_dir::{DataDir, DataDirError};
use http::{Health, HealthState};
use listener::ListenerSpec;
use metrics::{Metrics, Protocol};
pub use tls::TlsError;

/// State every connection can reach: configuration, metrics, auth material and (as the protocol
/// layers land) storage handles. Owned in one place, shared by `Arc`.
#[derive(Debug)]
pub struct Shared {
    /// The validated configuration.
    pub config: ServerConfig,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// Event-protocol API keys, when `api_keys.toml` exists in the data directory.
    pub api_keys: Option<ApiKeys>,
    /// The stream protocol's store: metadata (streams, topics, users, tokens, groups, offsets)
    /// and partitions, under `<data_dir>/streams`.
    pub store: Arc<StreamStore>,
    /// The event protocol: its store, dictionary, shard layout, limits.
    pub events: Arc<event::EventService>,
    /// Stream-protocol state: clients and sessions, consumer-group membership.
    pub stream: stream::StreamState,
    /// Totals of the background event store compaction.
    pub compaction: Arc<compaction::CompactionCounters>,
    /// The budget of request bytes in flight on the stream and event ports.
    pub budget: budget::RequestBudget,
}

/// How often retention and the background flush of `enforce_fsync = false` topics run.
pub const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(1);

/// Why the server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The configuration is invalid.
    #[error("bad configuration")]
    Config(#[from] ConfigError),
    /// The data directory is unusable or locked.
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    /// TLS is configured but cannot be built.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// `api_keys.toml` cannot be read or parsed.
    #[error("cannot load API keys from {path}")]
    ApiKeys {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: ApiKeysFileError,
    },
    /// `api_keys.toml` cannot be read.
    #[error("cannot read {path}")]
    ApiKeysRead {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// API keys are configured but TLS is off and plaintext auth was not allowed.
    #[error(
        "{path} enables API keys but tls_mode is disabled: keys would cross the network in the clear \
         (enable TLS or pass --insecure-allow-plaintext-auth)"
    )]
    ApiKeysWithoutTls {
        /// The API keys file.
        path: std::path::PathBuf,
    },
    /// API keys are configured but clients that never identify would be served read-write.
    #[error(
        "{path} enables API keys but --require-client-identity is off: event-port clients that \
         never identify would get read-write access (pass --require-client-identity, or \
         --allow-anonymous-clients to serve them anyway)"
    )]
    ApiKeysWithAnonymousClients {
        /// The API keys file.
        path: std::path::PathBuf,
    },
    /// The event protocol could not be set up (its dictionary).
    #[error(transparent)]
    Events(#[from] event::EventSetupError),
    /// The storage engine's writer threads could not be started.
    #[error("cannot start the storage writer threads")]
    CommitPool(#[source] std::io::Error),
    /// The stream store could not be opened or recovered (corruption is named with file and
    /// offset).
    #[error("cannot open the store in {path}")]
    StreamStore {
        /// The store's directory.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: StreamStoreError,
    },
    /// The event store could not be opened or recovered (corruption is named with file and
    /// offset; a changed immutable setting is refused).
    #[error("cannot open the store in {path}")]
    EventStore {
        /// The store's directory.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: EventStoreError,
    },
    /// A host other than loopback with the published default root password, without
    /// `--allow-default-root-password`.
    #[error(
        "refusing to serve on {host}: {}; or pass --allow-default-root-password",
        if *.stored {
            "the root user still logs in with the published default password (change it with \
             CHANGE_PASSWORD while the server listens on --host 127.0.0.1)"
        } else {
            "the root user would be created with the published default password (set \
             root_password / EDDY_ROOT_PASSWORD before the first start)"
        }
    )]
    DefaultRootPassword {
        /// The address the listeners would bind.
        host: std::net::IpAddr,
        /// The password is the stored one (otherwise the configured one, for a root user not
        /// created yet).
        stored: bool,
    },
    /// The root user could not be created on first start.
    #[error("cannot create the root user")]
    RootBootstrap {
        /// The cause.
        #[source]
        source: eddy_replicated::stream::error::StreamError,
    },
    /// A listener could not bind its address.
    #[error("cannot listen on {addr} ({listener} port)")]
    Bind {
        /// Which listener.
        listener: &'static str,
        /// The address it tried.
        addr: SocketAddr,
        /// The cause (address in use, permission denied...).
        #[source]
        source: std::io::Error,
    },
}

impl ServeError {
    /// True for errors a user fixes by changing configuration (exit code 78, `EX_CONFIG`).
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            ServeError::Config(_)
                | ServeError::Tls(_)
                | ServeError::ApiKeys { .. }
                | ServeError::ApiKeysWithoutTls { .. }
                | ServeError::ApiKeysWithAnonymousClients { .. }
                | ServeError::DefaultRootPassword { .. }
                | ServeError::Events(event::EventSetupError::DictionaryInvalid { .. })
        )
    }
}

/// True for an address only this host can reach (an IPv4-mapped loopback address included).
fn is_loopback(host: std::net::IpAddr) -> bool {
    match host {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(v6.is_loopback(), |v4| v4.is_loopback()),
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
    }
}

/// Refuses a server reachable from other hosts whose root user logs in (or, when `stored` is
/// false, would be created) with the published default password, unless
/// `allow_default_root_password` says so; then it warns.
fn check_exposed_root(
    config: &ServerConfig,
    default_password: bool,
    stored: bool,
) -> Result<(), ServeError> {
    if !default_password || is_loopback(config.host) {
        return Ok(());
    }
    if !config.allow_default_root_password {
        return Err(ServeError::DefaultRootPassword {
            host: config.host,
            stored,
        });
    }
    tracing::warn!(
        host = %config.host,
        "serving on a host other than loopback with the published default root password \
         (--allow-default-root-password): anyone who can reach the stream port can log in as root"
    );
    Ok(())
}

pub use eddy_replicated::error_chain;
pub use event::EventSetupError;

/// The addresses the server's listeners are bound to (ports resolved when 0 was asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundAddrs {
    /// Stream (Iggy) protocol.
    pub stream: SocketAddr,
    /// Event (Celeriant) protocol.
    pub client: SocketAddr,
    /// Replication.
    pub replication: SocketAddr,
    /// HTTP admin.
    pub http: SocketAddr,
}

/// A server whose data directory is locked and whose listeners are bound, ready to [`run`].
///
/// [`run`]: Server::run
#[derive(Debug)]
pub struct Server {
    shared: Arc<Shared>,
    data_dir: DataDir,
    tls: Option<tls::Tls>,
    stream: TcpListener,
    client: TcpListener,
    replication: TcpListener,
    addrs: BoundAddrs,
    health: HealthState,
    http_stop: CancellationToken,
    tracker: TaskTracker,
    /// This node's cluster member (`None`: a single node).
    cluster: Option<Arc<cluster::member::Member>>,
    /// Per-address connection caps: stream, event, replication.
    per_ip: [Arc<address_cap::AddressCap>; 3],
}

/// Loads `api_keys.toml` when present, enforcing the rules that keys need TLS and required
/// identity (each unless its explicit opt-in is given).
fn load_api_keys(config: &ServerConfig, data_dir: &DataDir) -> Result<Option<ApiKeys>, ServeError> {
    let path = data_dir.api_keys_file();
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ServeError::ApiKeysRead { path, source }),
    };
    let keys = ApiKeys::parse(&text).map_err(|source| ServeError::ApiKeys {
        path: path.clone(),
        source,
    })?;
    if config.tls_mode == TlsMode::Disabled {
        if !config.insecure_allow_plaintext_auth {
            return Err(ServeError::ApiKeysWithoutTls { path });
        }
        tracing::warn!(path = %path.display(), "API keys are enabled without TLS (--insecure-allow-plaintext-auth)");
    }
    if !config.require_client_identity {
        if !config.allow_anonymous_clients {
            return Err(ServeError::ApiKeysWithAnonymousClients { path });
        }
        tracing::warn!(
            path = %path.display(),
            "API keys are enabled but clients that never identify are served read-write (--allow-anonymous-clients)"
        );
    }
    Ok(Some(keys))
}

/// The storage engine both stores run on: one commit pool (the stream store's writer threads
/// plus the event store's) and one block cache (both budgets).
fn storage_engine(config: &ServerConfig) -> Result<(CommitPool, Arc<Cache>), ServeError> {
    let stream = StreamStoreConfig::default();
    let asked = config.num_shards.unwrap_or_else(event::default_num_shards);
    let events = event::store_config(config, asked, &[]);
    let pool = CommitPool::new(stream.pool_threads + events.commit_threads())
        .map_err(ServeError::CommitPool)?;
    let cache = Arc::new(Cache::new(stream.cache_bytes + events.cache_bytes));
    Ok((pool, cache))
}

/// Opens and recovers the stream store off the reactor (recovery reads and verifies files).
async fn open_store(
    config: &ServerConfig,
    data_dir: &DataDir,
    pool: &CommitPool,
    cache: &Arc<Cache>,
) -> Result<Arc<StreamStore>, ServeError> {
    let path = data_dir.streams_dir();
    let backend = FsBackend::new(&path).map_err(|source| {
        ServeError::DataDir(DataDirError::Unusable {
            path: path.clone(),
            source,
        })
    })?;
    let (pool, cache) = (pool.clone(), Arc::clone(cache));
    let store_config = StreamStoreConfig {
        cipher: config.cipher(),
        stream_ciphers: config.stream_ciphers(),
        ..StreamStoreConfig::default()
    };
    let opened = tokio::task::spawn_blocking(move || {
        StreamStore::open_shared(Arc::new(backend), store_config, &pool, cache)
    })
    .await;
    let opened = match opened {
        Ok(opened) => opened,
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    };
    let (store, recovery) = opened.map_err(|source| ServeError::StreamStore {
        path: path.clone(),
        source,
    })?;
    let torn: Vec<_> = recovery
        .partitions
        .iter()
        .filter_map(|(addr, r)| r.torn_tail.as_ref().map(|t| (addr, t)))
        .collect();
    tracing::info!(
        partitions = recovery.partitions.len(),
        metadata_ops_replayed = recovery.replayed_ops,
        torn_tails = torn.len() + usize::from(recovery.metadata.torn_tail.is_some()),
        "stream store recovered"
    );
    for (addr, (file, at, cut)) in torn {
        tracing::warn!(?addr, file = %file.display(), offset = at, bytes = cut, "truncated a torn tail");
    }
    Ok(Arc::new(store))
}

/// Opens and recovers the event store off the reactor.
async fn open_event_store(
    config: &ServerConfig,
    data_dir: &DataDir,
    dictionary: &eddy_wire::event::Dictionary,
    pool: &CommitPool,
    cache: &Arc<Cache>,
) -> Result<Arc<EventStore>, ServeError> {
    let root = data_dir.root().to_path_buf();
    let (config, dict) = (config.clone(), dictionary.bytes().to_vec());
    let (pool, cache) = (pool.clone(), Arc::clone(cache));
    let opened = tokio::task::spawn_blocking(move || {
        event::open_store(&config, &root, &dict, &pool, &cache)
    })
    .await;
    let opened = match opened {
        Ok(opened) => opened,
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    };
    let (store, recovery) = opened.map_err(|source| ServeError::EventStore {
        path: data_dir.events_dir(),
        source,
    })?;
    tracing::info!(
        shards = store.num_shards(),
        created = recovery.created,
        records_replayed = recovery.replayed.iter().sum::<u64>(),
        indexes_rebuilt = recovery.rebuilt.len(),
        "event store recovered"
    );
    Ok(Arc::new(store))
}

/// Event store figures sampled at scrape time (group commit factor, subscribers).
fn event_metrics(store: &EventStore, out: &mut String) {
    use std::fmt::Write as _;
    let stats = store.stats();
    let series = [
        (
            "eddy_events_fdatasyncs_total",
            "fdatasync calls of the event store's commit pool.",
            stats.commit.fsyncs,
        ),
        (
            "eddy_events_records_committed_total",
            "Event store records (writes, trims, deletes, schemas) made durable.",
            stats.commit.records,
        ),
    ];
    for (name, help, value) in series {
        metrics::write_counter(out, name, help, value);
    }
    let _ = writeln!(
        out,
        "# HELP eddy_events_watch_subscribers Watch subscribers, per shard."
    );
    let _ = writeln!(out, "# TYPE eddy_events_watch_subscribers gauge");
    for (shard, n) in stats.subscribers.iter().enumerate() {
        let _ = writeln!(
            out,
            "eddy_events_watch_subscribers{{shard=\"{shard}\"}} {n}"
        );
    }
}

/// Storage figures sampled at scrape time.
fn storage_metrics(store: &StreamStore, out: &mut String) {
    let stats = store.commit_stats();
    metrics::write_counter(
        out,
        "eddy_storage_fdatasyncs_total",
        "fdatasync calls by the commit pool.",
        stats.fsyncs,
    );
    metrics::write_counter(
        out,
        "eddy_storage_records_committed_total",
        "Records made durable by group commits.",
        stats.records,
    );
}

/// Periodic retention and background flush, off the reactor.
async fn maintenance(store: Arc<StreamStore>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(MAINTENANCE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let store = Arc::clone(&store);
        let done = tokio::task::spawn_blocking(move || {
            let now_us = clock::now_micros();
            if let Err(e) = store.run_retention(now_us) {
                tracing::warn!(error = %e, "retention run failed");
            }
            if let Err(e) = store.flush_unsynced() {
                tracing::error!(error = %e, "background flush failed");
            }
        })
        .await;
        if let Err(e) = done {
            tracing::error!(error = %e, "maintenance task panicked");
        }
    }
}

async fn bind(listener: &'static str, addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind {
            listener,
            addr,
            source,
        })
}

fn local_addr(
    listener: &'static str,
    l: &TcpListener,
    asked: SocketAddr,
) -> Result<SocketAddr, ServeError> {
    l.local_addr().map_err(|source| ServeError::Bind {
        listener,
        addr: asked,
        source,
    })
}

/// Binds the HTTP listener (`/health`, `/metrics`) and starts serving it on `tracker`: its
/// address, its request counters and the per-address caps of the stream, event and
/// replication ports (sampled, with HTTP's, into `metrics`).
async fn start_http(
    config: &ServerConfig,
    metrics: &Arc<Metrics>,
    health: &HealthState,
    http_stop: &CancellationToken,
    tracker: &TaskTracker,
) -> Result<
    (
        SocketAddr,
        Arc<http::HttpStats>,
        [Arc<address_cap::AddressCap>; 3],
    ),
    ServeError,
> {
    let http_addr = SocketAddr::new(config.host, config.http_port);
    let http = bind("http", http_addr).await?;
    let http_local = local_addr("http", &http, http_addr)?;
    let http_stats = Arc::new(http::HttpStats::default());
    let cap = |label, port_cap| address_cap::AddressCap::new(label, config, port_cap);
    let per_ip = [
        cap(Protocol::Stream.label(), config.max_connections),
        cap(Protocol::Event.label(), config.max_connections),
        cap(Protocol::Replication.label(), config.max_connections),
    ];
    let http_limits = http::HttpLimits::from_config(config);
    let sampled: Vec<_> = per_ip
        .iter()
        .chain([&http_limits.per_ip])
        .map(Arc::clone)
        .collect();
    metrics.add_sampler(Box::new(move |out| address_cap::sample(&sampled, out)));
    tracker.spawn(http::serve(
        http,
        health.clone(),
        Arc::clone(metrics),
        Arc::clone(&http_stats),
        http_limits,
        http_stop.clone(),
        tracker.clone(),
    ));
    let sampled = Arc::clone(&http_stats);
    metrics.add_sampler(Box::new(move |out| sampled.sample(out)));
    Ok((http_local, http_stats, per_ip))
}

/// A single node's root user: created with the configured password unless stored, which is
/// refused if it is the published default and the host is not loopback.
async fn bootstrap_root(config: &ServerConfig, store: &Arc<StreamStore>) -> Result<(), ServeError> {
    if store.read_metadata(stream::stored_root).is_none() {
        // It is about to be created with the configured password.
        check_exposed_root(config, config.uses_default_root_password(), false)?;
    }
    stream::bootstrap_root(store, config)
        .await
        .map_err(|source| ServeError::RootBootstrap { source })?;
    let check = stream::check_root_credentials(store, config).await;
    check_exposed_root(config, check.default_password, true)
}

/// The stream, event and replication listeners, bound.
struct Listeners {
    stream: TcpListener,
    client: TcpListener,
    replication: TcpListener,
    /// Their addresses, and the HTTP listener's.
    addrs: BoundAddrs,
}

/// Binds the stream, client (event) and replication ports.
async fn bind_listeners(
    config: &ServerConfig,
    http_local: SocketAddr,
) -> Result<Listeners, ServeError> {
    let at = |port| SocketAddr::new(config.host, port);
    let stream_addr = at(config.stream_port);
    let stream = bind("stream", stream_addr).await?;
    let client_addr = at(config.client_port);
    let client = bind("client", client_addr).await?;
    let replication_addr = SocketAddr::new(
        config.replication_host.unwrap_or(config.host),
        config.replication_port,
    );
    let replication = bind("replication", replication_addr).await?;
    let addrs = BoundAddrs {
        stream: local_addr("stream", &stream, stream_addr)?,
        client: local_addr("client", &client, client_addr)?,
        replication: local_addr("replication", &replication, replication_addr)?,
        http: http_local,
    };
    Ok(Listeners {
        stream,
        client,
        replication,
        addrs,
    })
}

/// Connects a started cluster `member` to the server: checks the root credential it will
/// use, hands it the event service, answers what peers forward, and reports its role to
/// `/health` and its figures to `/metrics`.
async fn attach_member(
    member: cluster::member::Member,
    config: &ServerConfig,
    stream_state: &stream::StreamState,
    events: &Arc<event::EventService>,
    health: &HealthState,
    metrics: &Arc<Metrics>,
) -> Result<Arc<cluster::member::Member>, ServeError> {
    // The stored root password when this member already applied the root user;
    // otherwise the configured one, which it gets if this member creates it. (The
    // warnings come once the root user is known, see `run`.)
    match stream_state.read(stream::stored_root) {
        Some((_, hash)) => {
            let default = stream::is_default_password(hash).await;
            check_exposed_root(config, default, true)?;
        }
        None => check_exposed_root(config, config.uses_default_root_password(), false)?,
    }
    events.set_cluster(member.events.clone());
    let service = Arc::clone(events);
    member.set_forward_handler(Arc::new(move |request| {
        Box::pin(event::answer_forwarded(Arc::clone(&service), request))
    }));
    let streams = member.streams.clone();
    member.set_stream_forward_handler(Arc::new(move |request| {
        let streams = streams.clone();
        Box::pin(async move {
            streams
                .answer_forwarded(request, |batch, count| {
                    eddy_codec::stream::batch::admit(batch, count)
                        .ok()
                        .map(eddy_replicated::stream::Stampable)
                })
                .await
        })
    }));
    let member = Arc::new(member);
    let probed = Arc::clone(&member);
    health.set_role_probe(Arc::new(move || probed.health_role()));
    let sampled = Arc::clone(&member);
    metrics.add_sampler(Box::new(move |out| sampled.sample(out)));
    Ok(member)
}

/// Samples into `/metrics` what lives in `shared`: the login throttle, the request budget
/// and the compatibility figures.
fn sample_shared(shared: &Arc<Shared>, http_stats: Arc<http::HttpStats>) {
    // Weak: the registry lives inside `shared`.
    let sampled = Arc::downgrade(shared);
    shared.metrics.add_sampler(Box::new(move |out| {
        if let Some(shared) = sampled.upgrade() {
            shared.stream.login.sample(out);
            shared.budget.sample(out);
            metrics::compat::sample(&shared, http_stats.requests(), out);
        }
    }));
}

/// A cluster member's tasks on `loops`: serving the replication port (peers only; it never
/// takes client TLS settings), the member's periodic work (the root user's creation by the
/// first leader included), and the root credential's warning once the root user is applied.
fn spawn_member_tasks(
    loops: &TaskTracker,
    member: &Arc<cluster::member::Member>,
    shared: &Arc<Shared>,
    replication: TcpListener,
    stop: &CancellationToken,
) {
    let config = &shared.config;
    loops.spawn(Arc::clone(member).serve_replication(replication, stop.clone()));
    let root = (config.root_username.clone(), config.root_password.clone());
    loops.spawn(Arc::clone(member).maintain(stop.clone(), move |streams| {
        let root = root.clone();
        async move { stream::bootstrap_cluster_root(&streams, &root.0, &root.1).await }
    }));
    // A member warns about the stored root credential as a single node does, once it
    // has applied the root user.
    let checked = Arc::clone(shared);
    let until = stop.clone();
    loops.spawn(async move {
        let config = &checked.config;
        let check = stream::check_cluster_root_credentials(&checked.stream, config, until).await;
        if check.is_some_and(|c| c.default_password) && !is_loopback(config.host) {
            tracing::warn!(
                host = %config.host,
                "this member serves on a host other than loopback and the cluster's root \
                 user logs in with the published default password: change it with \
                 CHANGE_PASSWORD"
            );
        }
    });
}

/// A running server's periodic work, stopped together at shutdown.
struct Background {
    stop: CancellationToken,
    /// Retention and background flushes.
    maintenance: tokio::task::JoinHandle<()>,
    /// The purge of expired personal access tokens.
    token_purge: tokio::task::JoinHandle<()>,
    /// The CPU saturation sampler (when fsyncs are delayed only while the server is busy).
    saturation: Option<tokio::task::JoinHandle<()>>,
    /// Event store compaction.
    compaction: tokio::task::JoinHandle<()>,
}

impl Background {
    /// Starts every task, stopped by [`Self::stop`].
    fn start(shared: &Arc<Shared>) -> Self {
        let config = &shared.config;
        let stop = CancellationToken::new();
        let maintenance = tokio::spawn(maintenance(Arc::clone(&shared.store), stop.clone()));
        let token_purge = {
            let shared = Arc::clone(shared);
            let stop = stop.clone();
            let every = Duration::from_secs(config.token_purge_interval_secs);
            tokio::spawn(async move {
                stream::purge_expired_tokens(&shared.stream, every, stop).await;
            })
        };
        let saturation = (config.fsync_delay_us > 0
            && config.fsync_delay_when == config::FsyncDelayWhen::Busy)
            .then(|| tokio::spawn(cpu::sample(cpu::saturation_gate(), stop.clone())));
        let compaction = tokio::spawn(compaction::run(
            Arc::clone(shared.events.store()),
            eddy_event_store::CompactionPolicy {
                min_reclaimable_ratio: config.compaction_min_reclaimable_ratio,
                ..eddy_event_store::CompactionPolicy::default()
            },
            Duration::from_secs(config.compaction_check_interval_secs),
            Arc::clone(&shared.compaction),
            stop.clone(),
        ));
        Self {
            stop,
            maintenance,
            token_purge,
            saturation,
            compaction,
        }
    }

    /// Stops every task and waits for each in turn.
    async fn stop(self) {
        self.stop.cancel();
        let _ = self.maintenance.await;
        let _ = self.token_purge.await;
        if let Some(task) = self.saturation {
            let _ = task.await;
        }
        let _ = self.compaction.await;
    }
}

/// Closes the event store, then flushes, syncs and stops the stream store (off the async
/// threads), once `shared` is dropped.
async fn close_stores(shared: Arc<Shared>) {
    let store = Arc::clone(&shared.store);
    let event_store = Arc::clone(shared.events.store());
    drop(shared);
    let closed = tokio::task::spawn_blocking(move || event_store.close()).await;
    match closed {
        Ok(Ok(())) => tracing::info!("event store closed"),
        Ok(Err(e)) => tracing::error!(error = %e, "closing the event store failed"),
        Err(e) => tracing::error!(error = %e, "closing the event store panicked"),
    }
    let closed = tokio::task::spawn_blocking(move || store.shutdown()).await;
    match closed {
        Ok(Ok(())) => tracing::info!("storage flushed and synced"),
        Ok(Err(e)) => tracing::error!(error = %e, "storage flush at shutdown failed"),
        Err(e) => tracing::error!(error = %e, "storage flush at shutdown panicked"),
    }
}

impl Server {
    /// Validates `config`, locks the data directory, starts `/health` (503 until [`Server::run`]),
    /// and binds every protocol listener.
    pub async fn bind(config: ServerConfig) -> Result<Self, ServeError> {
        config.validate()?;
        if config.is_clustered() {
            // Checked before anything binds or opens.
            config.cluster_peers()?;
        }
        fds::raise_nofile_limit();
        data_dir::restrict_umask();
        let data_dir = DataDir::open(&config.data_dir)?;
        let api_keys = load_api_keys(&config, &data_dir)?;
        let tls = tls::acceptor(&config)?;
        if config.require_client_identity && config.tls_mode == TlsMode::Disabled {
            tracing::warn!(
                "client identity is required without TLS (--insecure-allow-plaintext-auth)"
            );
        }
        let metrics = Metrics::new(stream::METRIC_NAMES, event::METRIC_NAMES);
        let health = HealthState::default();
        let tracker = TaskTracker::new();
        let http_stop = CancellationToken::new();

        let (http_local, http_stats, per_ip) =
            start_http(&config, &metrics, &health, &http_stop, &tracker).await?;

        let (pool, cache) = storage_engine(&config)?;
        let store = open_store(&config, &data_dir, &pool, &cache).await?;
        if config.encryption_key.is_some() {
            tracing::info!("at-rest encryption is on (AES-256-GCM): new messages and events are stored encrypted");
        }
        let dictionary =
            event::load_dictionary(&data_dir.dictionary_file(), config.wal_compression_level)?;
        let event_store = open_event_store(&config, &data_dir, &dictionary, &pool, &cache).await?;
        let events = Arc::new(event::EventService::new(&config, dictionary, event_store));
        if !config.is_clustered() {
            // A cluster's root user is created by its first metadata leader (see `run`).
            bootstrap_root(&config, &store).await?;
        }

        let Listeners {
            stream,
            client,
            replication,
            addrs,
        } = bind_listeners(&config, http_local).await?;
        let sampled = Arc::clone(&store);
        metrics.add_sampler(Box::new(move |out| storage_metrics(&sampled, out)));
        let sampled = Arc::clone(events.store());
        metrics.add_sampler(Box::new(move |out| event_metrics(&sampled, out)));
        let compaction = Arc::new(compaction::CompactionCounters::default());
        let sampled = Arc::clone(&compaction);
        metrics.add_sampler(Box::new(move |out| sampled.sample(out)));
        metrics.add_sampler(Box::new(fds::sample));
        let mut stream_state = stream::StreamState::new(Arc::clone(&store), &config, addrs.stream);
        let cluster = if config.is_clustered() {
            let member = cluster::member::start(
                &config,
                data_dir.root(),
                &pool,
                &cache,
                cluster::member::Advertised {
                    stream: addrs.stream,
                    client: addrs.client,
                    http: addrs.http,
                    replication: addrs.replication,
                },
                events.store(),
            )
            .await?;
            stream_state = stream_state.with_cluster(member.streams.clone());
            Some(attach_member(member, &config, &stream_state, &events, &health, &metrics).await?)
        } else {
            None
        };
        let budget = budget::RequestBudget::new(config.max_inflight_request_bytes);
        let shared = Arc::new(Shared {
            config,
            metrics,
            api_keys,
            store,
            events,
            stream: stream_state,
            compaction,
            budget,
        });
        sample_shared(&shared, http_stats);
        Ok(Self {
            shared,
            data_dir,
            tls,
            stream,
            client,
            replication,
            addrs,
            health,
            http_stop,
            tracker,
            cluster,
            per_ip,
        })
    }

    /// The bound addresses.
    pub fn addrs(&self) -> BoundAddrs {
        self.addrs
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// Serves until `shutdown` completes, then drains and stops.
    ///
    /// Drain: stop accepting, let every connection finish its in-flight request (bounded by
    /// `drain_timeout_ms`), flush and sync storage, release the data directory lock.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        let Server {
            shared,
            data_dir,
            tls,
            stream,
            client,
            replication,
            addrs,
            health,
            http_stop,
            tracker,
            cluster,
            per_ip,
        } = self;
        let config = &shared.config;
        let stop = CancellationToken::new();
        let conns = TaskTracker::new();
        let loops = TaskTracker::new();
        let spec = |protocol: Protocol, tls: &Option<tls::Tls>| ListenerSpec {
            protocol,
            max_connections: config.max_connections,
            per_ip: Arc::clone(&per_ip[protocol.index()]),
            tls: tls.clone(),
        };
        loops.spawn(listener::accept_loop(
            stream,
            spec(Protocol::Stream, &tls),
            Arc::clone(&shared),
            stop.clone(),
            conns.clone(),
            stream::serve_connection,
        ));
        loops.spawn(listener::accept_loop(
            client,
            spec(Protocol::Event, &tls),
            Arc::clone(&shared),
            stop.clone(),
            conns.clone(),
            event::serve_connection,
        ));
        if let Some(member) = &cluster {
            spawn_member_tasks(&loops, member, &shared, replication, &stop);
        } else {
            // A single node does not replicate; the port refuses whatever is sent to it.
            loops.spawn(listener::accept_loop(
                replication,
                spec(Protocol::Replication, &None),
                Arc::clone(&shared),
                stop.clone(),
                conns.clone(),
                listener::close_on_first_bytes,
            ));
        }
        let background = Background::start(&shared);
        health.set(Health::Ready);
        tracing::info!(
            stream = %addrs.stream,
            client = %addrs.client,
            replication = %addrs.replication,
            http = %addrs.http,
            data_dir = %data_dir.root().display(),
            "listening"
        );

        shutdown.await;
        tracing::info!("shutting down: draining connections");
        health.set(Health::Draining);
        stop.cancel();
        loops.close();
        loops.wait().await;
        conns.close();
        let drain = Duration::from_millis(config.drain_timeout_ms);
        if tokio::time::timeout(drain, conns.wait()).await.is_err() {
            tracing::warn!(
                open = conns.len(),
                timeout_ms = config.drain_timeout_ms,
                "drain timeout reached; closing the remaining connections"
            );
        }
        http_stop.cancel();
        tracker.close();
        // A compaction pass in progress stops at its next segment boundary; the store is closed
        // after it.
        background.stop().await;
        // Flush, sync and stop both stores before the lock goes: connections that outlived the
        // drain (and the metrics samplers) may still hold them, and nothing may reach the disk
        // once another server can own the directory. Their late writes are refused.
        if let Some(member) = &cluster {
            // The Raft thread stops after what it has queued; its groups' logs close with it.
            let member = Arc::clone(member);
            let _ = tokio::task::spawn_blocking(move || member.stop()).await;
            tracing::info!("cluster member stopped");
        }
        close_stores(shared).await;
        // Both stores are stopped: only now may another server take the directory.
        drop(data_dir);
        tracing::info!("stopped");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_stream_store::{MetadataOp, Operation};

    /// A connection task that outlived the drain timeout still holds the server's shared state,
    /// and with it both stores. The data directory's lock may only be released once neither
    /// store can write any more: a second server may take the directory the moment it is free.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_data_dir_stays_locked_until_both_stores_have_stopped() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let config = ServerConfig {
            data_dir: data.clone(),
            stream_port: 0,
            client_port: 0,
            replication_port: 0,
            http_port: 0,
            num_shards: Some(1),
            drain_timeout_ms: 50,
            ..ServerConfig::default()
        };
        let server = Server::bind(config).await.unwrap();
        let lingering = Arc::clone(&server.shared);
        server.run(async {}).await.unwrap();
        // The lock is free: another server could own the directory now...
        let next_owner = DataDir::open(&data).expect("the lock is released after run");
        // ...so nothing the old stores accept may reach the disk any more.
        let store = Arc::clone(&lingering.store);
        let late = tokio::task::spawn_blocking(move || {
            store
                .commit(Operation::Metadata(MetadataOp::CreateStream {
                    id: 77,
                    name: "after-the-lock".into(),
                    created_at: 1,
                    options: vec![],
                }))
                .wait()
        })
        .await
        .unwrap();
        assert!(
            late.is_err(),
            "the stream store still commits after the lock was released: {late:?}"
        );
        let events = Arc::clone(lingering.events.store());
        let late = tokio::task::spawn_blocking(move || {
            events
                .write(eddy_event_store::WriteRequest {
                    client_id: 1,
                    user_id: None,
                    writes: vec![eddy_event_store::AggregateWrite {
                        key: eddy_event_store::AggregateKey::new(1, 1, 1),
                        events: vec![eddy_event_store::NewEvent {
                            client_seq: 1,
                            event_id: None,
                            event_timestamp: 1,
                            event_type_major: 1,
                            event_type_minor: 0,
                            value: bytes::Bytes::from_static(b"late"),
                            iv: None,
                        }],
                        allow_create: true,
                        expected_version: None,
                        enforce_client_idempotency: false,
                    }],
                    now: 1,
                })
                .wait()
        })
        .await
        .unwrap();
        assert!(
            late.is_err(),
            "the event store still writes after the lock was released: {late:?}"
        );
        drop((lingering, next_owner));
    }
}
