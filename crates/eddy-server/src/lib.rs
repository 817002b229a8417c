//! eddy's server: listeners, TLS, sessions, dispatch, HTTP health and metrics.
//!
//! The only crate that knows tokio and every other layer. Start-up order (see
//! [`Server::bind`]): validate the config, lock the data directory, serve `/health` (503 while
//! starting), recover storage, bind the protocol listeners. [`Server::run`] then accepts until its
//! shutdown future fires, drains in-flight requests (bounded by `drain_timeout_ms`), flushes
//! storage and releases the lock.

pub mod config;
pub mod data_dir;
pub mod event;
pub mod http;
pub mod listener;
pub mod metrics;
pub mod stream;
pub mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use eddy_auth::api_keys::{ApiKeys, ApiKeysFileError};
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
}

/// Why the server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
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

impl ServerError {
    /// True for errors a user fixes by changing configuration (exit code 78, `EX_CONFIG`).
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            ServerError::Config(_)
                | ServerError::Tls(_)
                | ServerError::ApiKeys { .. }
                | ServerError::ApiKeysWithoutTls { .. }
        )
    }
}

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
}

/// Loads `api_keys.toml` when present, enforcing the rule that keys need TLS (or the explicit
/// insecure opt-in).
fn load_api_keys(
    config: &ServerConfig,
    data_dir: &DataDir,
) -> Result<Option<ApiKeys>, ServerError> {
    let path = data_dir.api_keys_file();
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ServerError::ApiKeysRead { path, source }),
    };
    let keys = ApiKeys::parse(&text).map_err(|source| ServerError::ApiKeys {
        path: path.clone(),
        source,
    })?;
    if config.tls_mode == TlsMode::Disabled {
        if !config.insecure_allow_plaintext_auth {
            return Err(ServerError::ApiKeysWithoutTls { path });
        }
        tracing::warn!(path = %path.display(), "API keys are enabled without TLS (--insecure-allow-plaintext-auth)");
    }
    Ok(Some(keys))
}

async fn bind(listener: &'static str, addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind {
            listener,
            addr,
            source,
        })
}

fn local_addr(
    listener: &'static str,
    l: &TcpListener,
    asked: SocketAddr,
) -> Result<SocketAddr, ServerError> {
    l.local_addr().map_err(|source| ServerError::Bind {
        listener,
        addr: asked,
        source,
    })
}

impl Server {
    /// Validates `config`, locks the data directory, starts `/health` (503 until [`Server::run`]),
    /// and binds every protocol listener.
    pub async fn bind(config: ServerConfig) -> Result<Self, ServerError> {
        config.validate()?;
        let data_dir = DataDir::open(&config.data_dir)?;
        let api_keys = load_api_keys(&config, &data_dir)?;
        let tls = tls::acceptor(&config)?;
        if config.require_client_identity && config.tls_mode == TlsMode::Disabled {
            tracing::warn!(
                "client identity is required without TLS (--insecure-allow-plaintext-auth)"
            );
        }
        if config.uses_default_root_password() {
            tracing::warn!(
                "the root password is the published default; set EDDY_ROOT_PASSWORD before exposing this server"
            );
        }
        let metrics = Metrics::new(stream::METRIC_NAMES, event::METRIC_NAMES);
        let health = HealthState::default();
        let tracker = TaskTracker::new();
        let http_stop = CancellationToken::new();

        let at = |port| SocketAddr::new(config.host, port);
        let http_addr = at(config.http_port);
        let http = bind("http", http_addr).await?;
        let http_local = local_addr("http", &http, http_addr)?;
        tracker.spawn(http::serve(
            http,
            health.clone(),
            Arc::clone(&metrics),
            http_stop.clone(),
            tracker.clone(),
        ));

        let stream_addr = at(config.stream_port);
        let stream = bind("stream", stream_addr).await?;
        let client_addr = at(config.client_port);
        let client = bind("client", client_addr).await?;
        let replication_addr = at(config.replication_port);
        let replication = bind("replication", replication_addr).await?;
        let addrs = BoundAddrs {
            stream: local_addr("stream", &stream, stream_addr)?,
            client: local_addr("client", &client, client_addr)?,
            replication: local_addr("replication", &replication, replication_addr)?,
            http: http_local,
        };
        let shared = Arc::new(Shared {
            config,
            metrics,
            api_keys,
        });
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
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
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
        } = self;
        let config = &shared.config;
        let stop = CancellationToken::new();
        let conns = TaskTracker::new();
        let loops = TaskTracker::new();
        let spec = |protocol, tls: &Option<tls::Tls>| ListenerSpec {
            protocol,
            max_connections: config.max_connections,
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
        // Replication is not served yet; it never takes client TLS settings.
        loops.spawn(listener::accept_loop(
            replication,
            spec(Protocol::Replication, &None),
            Arc::clone(&shared),
            stop.clone(),
            conns.clone(),
            listener::close_on_first_bytes,
        ));
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
        // Storage flush and sync goes here once storage is wired in; nothing is buffered yet.
        drop(data_dir);
        tracing::info!("stopped");
        Ok(())
    }
}
