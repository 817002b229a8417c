//! The `eddy` command line: argument parsing, configuration layering, logging and start-up.
//!
//! The binary (`bins/eddy`) is a thin call of [`main`]; it lives here so the real-process tests
//! (`tests/`) start the very same entry point without depending on the binary crate.
//!
//! Configuration precedence, highest first: flags, environment (`EDDY_*`), the TOML file given
//! by `--config`, built-in defaults. Every option has one name in all three: `--data-dir`,
//! `EDDY_DATA_DIR`, `data_dir`.
//!
//! Exit codes: 0 clean stop, 1 runtime failure (port in use, data dir locked or unwritable),
//! 2 usage error (clap), 78 configuration error (`EX_CONFIG`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};
use serde::Serialize;

use crate::config::{self as cfg, LogFormat, LogRotation, ServerConfig};

/// Exit code for configuration errors (sysexits `EX_CONFIG`).
pub const EXIT_CONFIG: u8 = 78;
/// Exit code for runtime failures.
pub const EXIT_FAILURE: u8 = 1;

/// eddy: a durable log server. One binary serves Apache Iggy's stream protocol and Celeriant's
/// event protocol on one storage engine.
#[derive(Debug, Parser)]
#[command(name = "eddy", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Sub-commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server.
    #[command(long_about = SERVE_ABOUT)]
    Serve(Box<ServeArgs>),
    /// The client subcommands (`eddy_ctl`): status, streams, events, bench.
    #[command(flatten)]
    Client(Box<eddy_ctl::Command>),
}

const SERVE_ABOUT: &str = "Run the server.

Listens on 127.0.0.1 by default: the stream (Iggy) protocol on 8090, the event (Celeriant)
protocol on 10000, replication on 10001 and HTTP (/health, /metrics) on 10002.

Every option can be set three ways, highest precedence first: the flag (--data-dir), the
environment variable (EDDY_DATA_DIR), or the key in the TOML file given by --config (data_dir).

Examples:
  eddy serve
  eddy serve --data-dir /var/lib/eddy --host 0.0.0.0
  EDDY_ROOT_PASSWORD=change-me eddy serve --config /etc/eddy/eddy.toml";

/// Options of `eddy serve`. Field names are the TOML keys of [`ServerConfig`]; a test checks the
/// two stay in step.
#[derive(Debug, clap::Args, Serialize)]
// One field per flag: the switches are independent options, not a state to model as an enum.
#[allow(clippy::struct_excessive_bools)]
pub struct ServeArgs {
    /// TOML configuration file (keys as the flags, with '_' for '-').
    #[arg(long, env = "EDDY_CONFIG", value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Data directory; created if missing and locked while the server runs.
    #[arg(long, env = "EDDY_DATA_DIR", value_name = "DIR", default_value = cfg::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,

    /// Address every listener binds.
    #[arg(long, env = "EDDY_HOST", default_value = cfg::DEFAULT_HOST)]
    pub host: std::net::IpAddr,

    /// Stream (Iggy) protocol port.
    #[arg(long, env = "EDDY_STREAM_PORT", default_value_t = cfg::DEFAULT_STREAM_PORT)]
    pub stream_port: u16,

    /// Event (Celeriant) protocol port.
    #[arg(long, env = "EDDY_CLIENT_PORT", default_value_t = cfg::DEFAULT_CLIENT_PORT)]
    pub client_port: u16,

    /// Replication port.
    #[arg(long, env = "EDDY_REPLICATION_PORT", default_value_t = cfg::DEFAULT_REPLICATION_PORT)]
    pub replication_port: u16,

    /// HTTP port for /health and /metrics.
    #[arg(long, env = "EDDY_HTTP_PORT", default_value_t = cfg::DEFAULT_HTTP_PORT)]
    pub http_port: u16,

    /// Root user name, created on first start.
    #[arg(long, env = "EDDY_ROOT_USERNAME", default_value = cfg::DEFAULT_ROOT_USERNAME)]
    pub root_username: String,

    /// Root password, set on first start. Prefer the environment variable to the flag.
    #[arg(
        long,
        env = "EDDY_ROOT_PASSWORD",
        default_value = cfg::DEFAULT_ROOT_PASSWORD,
        hide_env_values = true,
        hide_default_value = false
    )]
    pub root_password: String,

    /// Start on a host other than loopback although root still has the published default
    /// password (without it the server refuses to start there, exit code 78).
    #[arg(long, env = "EDDY_ALLOW_DEFAULT_ROOT_PASSWORD", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub allow_default_root_password: bool,

    /// Largest event-protocol request body in bytes (both declared lengths are checked).
    #[arg(long, env = "EDDY_MAX_REQUEST_SIZE", default_value_t = cfg::DEFAULT_MAX_REQUEST_SIZE)]
    pub max_request_size: u32,

    /// The first frame on the event port must be Identify.
    #[arg(long, env = "EDDY_REQUIRE_CLIENT_IDENTITY", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub require_client_identity: bool,

    /// TLS on the client ports: disabled or strict (TLS 1.3 only).
    #[arg(long, env = "EDDY_TLS_MODE", default_value = "disabled", value_parser = ["disabled", "strict"])]
    pub tls_mode: String,

    /// Client certificates under TLS: require (mTLS), optional or none.
    #[arg(long, env = "EDDY_TLS_CLIENT_AUTH", default_value = "require", value_parser = ["require", "optional", "none"])]
    pub tls_client_auth: String,

    /// Allow API keys or --require-client-identity without TLS.
    #[arg(long, env = "EDDY_INSECURE_ALLOW_PLAINTEXT_AUTH", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub insecure_allow_plaintext_auth: bool,

    /// With API keys (api_keys.toml) but without --require-client-identity, serve event-port
    /// clients that never identify; they get read-write access. Without this flag the server
    /// refuses to start in that configuration.
    #[arg(long, env = "EDDY_ALLOW_ANONYMOUS_CLIENTS", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub allow_anonymous_clients: bool,

    /// PEM certificate chain the client ports present under --tls-mode strict.
    #[arg(long, env = "EDDY_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "EDDY_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// PEM CA bundle client certificates must chain to (needed unless --tls-client-auth none).
    #[arg(long, env = "EDDY_TLS_CA_CERT", value_name = "FILE")]
    pub tls_ca_cert: Option<PathBuf>,

    /// At-rest encryption key (standard base64 of 32 random bytes, e.g. `openssl rand -base64
    /// 32`): stored messages and events are encrypted with AES-256-GCM. Losing or changing it
    /// makes the data written with it unreadable. Prefer the environment variable or the config
    /// file to the flag.
    #[arg(
        long,
        env = "EDDY_ENCRYPTION_KEY",
        value_name = "BASE64",
        hide_env_values = true
    )]
    pub encryption_key: Option<String>,

    /// zstd level (1-22) for stored events and compressed responses.
    #[arg(long, env = "EDDY_WAL_COMPRESSION_LEVEL", default_value_t = cfg::DEFAULT_WAL_COMPRESSION_LEVEL)]
    pub wal_compression_level: i32,

    /// Log level or filter directive (RUST_LOG applies when this is not set).
    #[arg(long, env = "EDDY_LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    /// Log format: text or json.
    #[arg(long, env = "EDDY_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,

    /// Also log to files in this directory (the current one is eddy.log) [default: stderr only].
    #[arg(long, env = "EDDY_LOG_DIR", value_name = "DIR")]
    pub log_dir: Option<PathBuf>,

    /// When the log file rotates: size (past --log-max-file-bytes), hourly, daily or never.
    #[arg(long, env = "EDDY_LOG_ROTATION", default_value = "size", value_parser = ["size", "hourly", "daily", "never"])]
    pub log_rotation: String,

    /// Size in bytes past which the log file rotates (--log-rotation size).
    #[arg(long, env = "EDDY_LOG_MAX_FILE_BYTES", default_value_t = cfg::DEFAULT_LOG_MAX_FILE_BYTES)]
    pub log_max_file_bytes: u64,

    /// Rotated log files kept beside the current one; older ones are deleted.
    #[arg(long, env = "EDDY_LOG_MAX_FILES", default_value_t = cfg::DEFAULT_LOG_MAX_FILES)]
    pub log_max_files: u32,

    /// Longest wait for in-flight requests at shutdown, in milliseconds.
    #[arg(long, env = "EDDY_DRAIN_TIMEOUT_MS", default_value_t = cfg::DEFAULT_DRAIN_TIMEOUT_MS)]
    pub drain_timeout_ms: u64,

    /// Most concurrent connections per protocol port.
    #[arg(long, env = "EDDY_MAX_CONNECTIONS", default_value_t = cfg::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: u32,

    /// Most connections of one client address (an IPv6 /64) per client port (stream, event,
    /// HTTP); more are closed at accept. 0: no cap [default: a quarter of the port's cap, at
    /// most 1024].
    #[arg(long, env = "EDDY_MAX_CONNECTIONS_PER_IP")]
    pub max_connections_per_ip: Option<u32>,

    /// Addresses or networks (ADDRESS or ADDRESS/PREFIX, comma-separated) counted only against
    /// --max-connections, not --max-connections-per-ip; an empty value exempts none.
    #[arg(
        long,
        env = "EDDY_MAX_CONNECTIONS_PER_IP_EXEMPT",
        value_name = "NETWORKS",
        value_delimiter = ',',
        default_value = "127.0.0.0/8,::1"
    )]
    pub max_connections_per_ip_exempt: Vec<String>,

    /// Budget in bytes of request frames in flight on the stream and event ports together: a
    /// frame above 64 KiB reserves its bytes before its body is read and waits while they do
    /// not fit.
    #[arg(long, env = "EDDY_MAX_INFLIGHT_REQUEST_BYTES", default_value_t = cfg::DEFAULT_MAX_INFLIGHT_REQUEST_BYTES)]
    pub max_inflight_request_bytes: u64,

    /// Largest event-protocol response body in bytes; also bounds one read page.
    #[arg(long, env = "EDDY_MAX_RESPONSE_SIZE", default_value_t = cfg::DEFAULT_MAX_RESPONSE_SIZE)]
    pub max_response_size: u32,

    /// Event port: deadline for a complete request frame (idle close) and for each response write, in milliseconds.
    #[arg(long, env = "EDDY_CLIENT_CONNECTION_TIMEOUT_MS", default_value_t = cfg::DEFAULT_CLIENT_CONNECTION_TIMEOUT_MS)]
    pub client_connection_timeout_ms: u64,

    /// Largest requested_latency_ms a watch may ask for (error 8001 above it).
    #[arg(long, env = "EDDY_MAX_REQUESTED_LATENCY_MS", default_value_t = cfg::DEFAULT_MAX_REQUESTED_LATENCY_MS)]
    pub max_requested_latency_ms: u64,

    /// Most watch subscribers per event shard (error 8005 at the cap).
    #[arg(long, env = "EDDY_MAX_WATCH_SUBSCRIBERS", default_value_t = cfg::DEFAULT_MAX_WATCH_SUBSCRIBERS)]
    pub max_watch_subscribers: u32,

    /// Items per page of the event list requests.
    #[arg(long, env = "EDDY_LIST_PAGE_SIZE", default_value_t = cfg::DEFAULT_LIST_PAGE_SIZE)]
    pub list_page_size: u32,

    /// Event shards, fixed when the event store is created [default: the stored value, else the number of CPUs].
    #[arg(long, env = "EDDY_NUM_SHARDS")]
    pub num_shards: Option<u32>,

    /// Which id places an aggregate on an event shard (fixed when the store is created).
    #[arg(long, env = "EDDY_ROUTING_RULE", default_value = "aggregate_id", value_parser = ["aggregate_id", "org_id", "aggregate_type_id"])]
    pub routing_rule: String,

    /// Event shard 0 holds no data (fixed when the store is created; needs 2+ shards).
    #[arg(long, env = "EDDY_RESERVE_COORDINATOR_SHARD", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub reserve_coordinator_shard: bool,

    /// Largest schema text a RegisterSchema may carry, in bytes (error 2021 above it).
    #[arg(long, env = "EDDY_MAX_SCHEMA_SIZE_BYTES", default_value_t = cfg::DEFAULT_MAX_SCHEMA_SIZE_BYTES)]
    pub max_schema_size_bytes: u32,

    /// Seconds between two event store compaction passes, which physically remove trimmed and
    /// deleted events (the first pass comes one interval after the start).
    #[arg(long, env = "EDDY_COMPACTION_CHECK_INTERVAL_SECS", default_value_t = cfg::DEFAULT_COMPACTION_CHECK_INTERVAL_SECS)]
    pub compaction_check_interval_secs: u64,

    /// Share (0..=1) of a sealed event segment that must be reclaimable before compaction rewrites it.
    #[arg(long, env = "EDDY_COMPACTION_MIN_RECLAIMABLE_RATIO", default_value_t = cfg::DEFAULT_COMPACTION_MIN_RECLAIMABLE_RATIO)]
    pub compaction_min_reclaimable_ratio: f64,

    /// Size in bytes at which an event shard's log rolls to a new segment (Celeriant's
    /// --shard-log-preallocate-bytes; segments are not created at full size).
    #[arg(long, env = "EDDY_SHARD_LOG_SEGMENT_BYTES", default_value_t = cfg::DEFAULT_SHARD_LOG_SEGMENT_BYTES)]
    pub shard_log_segment_bytes: u64,
    /// Event-store group-commit window in microseconds (Celeriant's --fsync-delay-us): writes
    /// arriving while an event shard's fdatasync is in flight wait up to this long after it
    /// (less once the writers it acknowledged are back), so one fdatasync covers more of them;
    /// an idle shard writes at once. 0 disables the window.
    #[arg(long, env = "EDDY_FSYNC_DELAY_US", default_value_t = cfg::DEFAULT_FSYNC_DELAY_US)]
    pub fsync_delay_us: u64,
    /// When the group-commit window applies: busy (only while the machine's CPUs are
    /// saturated, where it saves CPU per write; writers paced by the disk never wait) or
    /// always.
    #[arg(long, env = "EDDY_FSYNC_DELAY_WHEN", default_value = "busy", value_parser = ["busy", "always"])]
    pub fsync_delay_when: String,
    /// What a topic created with durability = replicated (every newer Iggy SDK's default)
    /// acknowledges after: fsync (as persisted: an acknowledged send is on disk, on a majority
    /// in a cluster) or memory (Iggy's meaning: a majority holds it in memory; on a single
    /// node, the page cache). enforce_fsync = false asks for memory acks either way.
    #[arg(long, env = "EDDY_REPLICATED_DURABILITY", default_value = "fsync", value_parser = ["fsync", "memory"])]
    pub replicated_durability: String,
    /// Largest stream-protocol frame in bytes, header included; a larger one closes its
    /// connection unread.
    #[arg(long, env = "EDDY_STREAM_MAX_FRAME_SIZE", default_value_t = cfg::DEFAULT_STREAM_MAX_FRAME_SIZE)]
    pub stream_max_frame_size: u32,

    /// Stream-protocol heartbeat interval in milliseconds: consumer-group members silent for
    /// 1.2 intervals are evicted as stale (0 disables).
    #[arg(long, env = "EDDY_STREAM_HEARTBEAT_INTERVAL_MS", default_value_t = cfg::DEFAULT_STREAM_HEARTBEAT_INTERVAL_MS)]
    pub stream_heartbeat_interval_ms: u64,

    /// This node's id in the cluster (1, 2, 3...; each member's differs).
    #[arg(long, env = "EDDY_NODE_ID", default_value_t = 1)]
    pub node_id: u64,

    /// Another member of the cluster, ID=HOST:REPLICATION_PORT; repeat for each (env: comma-separated). None: a single node.
    #[arg(long = "peer", id = "peers", env = "EDDY_PEERS", value_name = "ID=HOST:PORT", value_delimiter = ',', action = clap::ArgAction::Append)]
    pub peers: Vec<String>,

    /// Run as a cluster member without --peer: a cluster of one that `eddy cluster add ID=HOST:PORT` grows at run time (peer TLS as for any member). A plain single node cannot be grown.
    #[arg(long, env = "EDDY_CLUSTER", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub cluster: bool,

    /// Join the cluster of the --peer members as a new member (after `eddy cluster add ID=HOST:PORT` on one of them): the cluster's id and founders come from them at the first start.
    #[arg(long, env = "EDDY_JOIN", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub join: bool,

    /// Host clients are sent to for this node (redirects, cluster metadata) [default: --host].
    #[arg(long, env = "EDDY_ADVERTISE_HOST", value_name = "HOST")]
    pub advertise_host: Option<String>,

    /// Address the replication port binds [default: --host].
    #[arg(long, env = "EDDY_REPLICATION_HOST", value_name = "ADDR")]
    pub replication_host: Option<std::net::IpAddr>,

    /// PEM certificate this member presents to its peers (mutual TLS on the replication
    /// port), signed by --peer-tls-ca and naming its node id; `eddy cluster certs` writes it.
    #[arg(long, env = "EDDY_PEER_TLS_CERT", value_name = "FILE")]
    pub peer_tls_cert: Option<PathBuf>,

    /// PEM private key of --peer-tls-cert.
    #[arg(long, env = "EDDY_PEER_TLS_KEY", value_name = "FILE")]
    pub peer_tls_key: Option<PathBuf>,

    /// PEM certificate of the cluster CA that every member's certificate must chain to.
    #[arg(long, env = "EDDY_PEER_TLS_CA", value_name = "FILE")]
    pub peer_tls_ca: Option<PathBuf>,

    /// Replicate without TLS or peer authentication: any process that reaches the
    /// replication port can act as a member. Only on a trusted, isolated network.
    #[arg(long, env = "EDDY_INSECURE_PEER_PLAINTEXT", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub insecure_peer_plaintext: bool,

    /// Most connections to the replication port at once (a cluster member's).
    #[arg(long, env = "EDDY_MAX_PEER_CONNECTIONS", default_value_t = cfg::DEFAULT_MAX_PEER_CONNECTIONS)]
    pub max_peer_connections: u32,

    /// The consensus clock in milliseconds: heartbeats every 2 ticks, elections after 10-20 silent ticks.
    #[arg(long, env = "EDDY_RAFT_TICK_MS", default_value_t = cfg::DEFAULT_RAFT_TICK_MS)]
    pub raft_tick_ms: u64,
    /// Event shard groups: compact the Raft log every this many applied entries; a member that
    /// needs what was compacted copies the shard's records from a peer.
    #[arg(long, env = "EDDY_RAFT_EVENT_COMPACT_ENTRIES", default_value_t = crate::cluster::events::DEFAULT_EVENT_COMPACT_ENTRIES)]
    pub raft_event_compact_entries: u64,
    /// After a member joins a consumer group, a partition whose owner has polled and not yet
    /// committed stays with it until it commits, or at most this many milliseconds (0: moves at once).
    #[arg(long, env = "EDDY_STREAM_GROUP_REBALANCING_TIMEOUT_MS", default_value_t = cfg::DEFAULT_STREAM_GROUP_REBALANCING_TIMEOUT_MS)]
    pub stream_group_rebalancing_timeout_ms: u64,
    /// Seconds between two purges of expired personal access tokens (they stop working at
    /// their expiry whatever this is; the purge frees their names and the per-user limit).
    #[arg(long, env = "EDDY_TOKEN_PURGE_INTERVAL_SECS", default_value_t = cfg::DEFAULT_TOKEN_PURGE_INTERVAL_SECS)]
    pub token_purge_interval_secs: u64,

    /// Stream port: milliseconds a connection has to log in, from its accept or its logout;
    /// then it is evicted (NoSession) and closed.
    #[arg(long, env = "EDDY_STREAM_LOGIN_TIMEOUT_MS", default_value_t = cfg::DEFAULT_STREAM_LOGIN_TIMEOUT_MS)]
    pub stream_login_timeout_ms: u64,

    /// Stream port: milliseconds a session may go without completing a request (heartbeat
    /// pings count) before it is evicted (StaleClient) and closed; 0 disables.
    #[arg(long, env = "EDDY_STREAM_IDLE_TIMEOUT_MS", default_value_t = cfg::DEFAULT_STREAM_IDLE_TIMEOUT_MS)]
    pub stream_idle_timeout_ms: u64,

    /// Stream port: largest frame in bytes (header included) read before login; a larger one
    /// closes its connection unread.
    #[arg(long, env = "EDDY_STREAM_MAX_PRELOGIN_FRAME_SIZE", default_value_t = cfg::DEFAULT_STREAM_MAX_PRELOGIN_FRAME_SIZE)]
    pub stream_max_prelogin_frame_size: u32,

    /// Stream port: milliseconds an answer may take to write; a client that stops reading is
    /// disconnected after it.
    #[arg(long, env = "EDDY_STREAM_WRITE_TIMEOUT_MS", default_value_t = cfg::DEFAULT_STREAM_WRITE_TIMEOUT_MS)]
    pub stream_write_timeout_ms: u64,

    /// Most Argon2id computations (password checks and hashes) at once; further logins wait.
    #[arg(long, env = "EDDY_MAX_CONCURRENT_PASSWORD_HASHES", default_value_t = cfg::DEFAULT_MAX_CONCURRENT_PASSWORD_HASHES)]
    pub max_concurrent_password_hashes: u32,

    /// Failed logins after which a stream connection is closed.
    #[arg(long, env = "EDDY_LOGIN_MAX_FAILURES_PER_CONNECTION", default_value_t = cfg::DEFAULT_LOGIN_MAX_FAILURES_PER_CONNECTION)]
    pub login_max_failures_per_connection: u32,

    /// Longest delay in milliseconds before a login attempt that follows failed ones (of the
    /// same connection or address; the delay starts at 100 ms after two failures and doubles).
    #[arg(long, env = "EDDY_LOGIN_BACKOFF_MAX_MS", default_value_t = cfg::DEFAULT_LOGIN_BACKOFF_MAX_MS)]
    pub login_backoff_max_ms: u64,

    /// HTTP port: most connections at once; further ones wait in the kernel backlog.
    #[arg(long, env = "EDDY_HTTP_MAX_CONNECTIONS", default_value_t = cfg::DEFAULT_HTTP_MAX_CONNECTIONS)]
    pub http_max_connections: u32,

    /// HTTP port: milliseconds a client has to send a request head (also the idle limit of a
    /// kept-alive connection).
    #[arg(long, env = "EDDY_HTTP_HEADER_READ_TIMEOUT_MS", default_value_t = cfg::DEFAULT_HTTP_HEADER_READ_TIMEOUT_MS)]
    pub http_header_read_timeout_ms: u64,

    /// HTTP port: milliseconds a response write may make no progress (the client stopped
    /// reading) before the connection is closed.
    #[arg(long, env = "EDDY_HTTP_WRITE_TIMEOUT_MS", default_value_t = cfg::DEFAULT_HTTP_WRITE_TIMEOUT_MS)]
    pub http_write_timeout_ms: u64,
}

/// A failure that ends the process, with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    /// One line for stderr.
    pub message: String,
    /// Process exit code.
    pub code: u8,
}

fn config_error(message: String) -> Failure {
    Failure {
        message,
        code: EXIT_CONFIG,
    }
}

/// The resolved configuration plus what logging needs to know about it.
#[derive(Debug)]
pub struct Resolved {
    /// The merged configuration.
    pub config: ServerConfig,
    /// Whether the log level was set by flag, env or file (otherwise `RUST_LOG` applies).
    pub log_level_explicit: bool,
}

/// Layers flags and env (from `matches`), the config file and defaults into one [`ServerConfig`].
pub fn resolve(args: &ServeArgs, matches: &ArgMatches) -> Result<Resolved, Failure> {
    let defaults = toml::Table::try_from(ServerConfig::default())
        .map_err(|e| config_error(format!("internal: cannot serialize defaults: {e}")))?;
    let mut merged = defaults;

    let mut file_keys = Vec::new();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path).map_err(|e| {
            config_error(format!("cannot read config file {}: {e}", path.display()))
        })?;
        // Parse as the typed config first so unknown keys and wrong types get a precise message.
        toml::from_str::<ServerConfig>(&text).map_err(|e| {
            config_error(format!(
                "config file {}: {}",
                path.display(),
                e.message().trim()
            ))
        })?;
        let table: toml::Table = toml::from_str(&text).map_err(|e| {
            config_error(format!(
                "config file {}: {}",
                path.display(),
                e.message().trim()
            ))
        })?;
        for (k, v) in table {
            file_keys.push(k.clone());
            merged.insert(k, v);
        }
    }

    let given = toml::Table::try_from(args)
        .map_err(|e| config_error(format!("internal: cannot serialize flags: {e}")))?;
    let mut log_level_explicit = file_keys.iter().any(|k| k == "log_level");
    for (key, value) in given {
        let from_user = matches!(
            matches.value_source(&key),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if from_user {
            if key == "log_level" {
                log_level_explicit = true;
            }
            merged.insert(key, value);
        }
    }
    let config: ServerConfig = merged.try_into().map_err(|e: toml::de::Error| {
        config_error(format!("configuration: {}", e.message().trim()))
    })?;
    config
        .validate()
        .map_err(|e| config_error(format!("configuration: {e}")))?;
    Ok(Resolved {
        config,
        log_level_explicit,
    })
}

fn init_logging(resolved: &Resolved) -> Result<(), Failure> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::EnvFilter;
    let config = &resolved.config;
    let filter = if !resolved.log_level_explicit && std::env::var_os("RUST_LOG").is_some() {
        EnvFilter::try_from_default_env().map_err(|e| config_error(format!("RUST_LOG: {e}")))?
    } else {
        EnvFilter::try_new(&config.log_level).map_err(|e| {
            config_error(format!(
                "invalid value for log_level {:?}: {e}",
                config.log_level
            ))
        })?
    };
    let json = config.log_format == LogFormat::Json;
    let stderr = fmt_layer(
        json,
        std::io::stderr,
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
    );
    let file = match &config.log_dir {
        Some(dir) => Some(fmt_layer(
            json,
            std::sync::Mutex::new(log_file(dir, config)?),
            false,
        )),
        None => None,
    };
    let result = tracing_subscriber::registry()
        .with(filter)
        .with(stderr)
        .with(file)
        .try_init();
    // A subscriber already installed (tests calling `run` twice) is fine.
    drop(result);
    Ok(())
}

/// One formatting layer (text or JSON) writing to `writer`.
fn fmt_layer<S, W>(
    json: bool,
    writer: W,
    ansi: bool,
) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer as _;
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(ansi);
    if json {
        layer.json().flatten_event(true).boxed()
    } else {
        layer.boxed()
    }
}

/// The rotating log file `<dir>/eddy.log`; the directory is created, and must be writable.
fn log_file(
    dir: &std::path::Path,
    config: &ServerConfig,
) -> Result<Box<dyn std::io::Write + Send>, Failure> {
    use file_rotate::compression::Compression;
    use file_rotate::suffix::{AppendCount, AppendTimestamp, FileLimit};
    use file_rotate::{ContentLimit, FileRotate, TimeFrequency};
    let path = dir.join(cfg::LOG_FILE_NAME);
    std::fs::create_dir_all(dir)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
        })
        .map_err(|e| Failure {
            message: format!("cannot write the log file {}: {e}", path.display()),
            code: EXIT_FAILURE,
        })?;
    let keep = config.log_max_files as usize;
    let by_time = |frequency| -> Box<dyn std::io::Write + Send> {
        Box::new(FileRotate::new(
            &path,
            AppendTimestamp::default(FileLimit::MaxFiles(keep)),
            ContentLimit::Time(frequency),
            Compression::None,
            None,
        ))
    };
    Ok(match config.log_rotation {
        LogRotation::Size => Box::new(FileRotate::new(
            &path,
            AppendCount::new(keep),
            ContentLimit::BytesSurpassed(
                usize::try_from(config.log_max_file_bytes).unwrap_or(usize::MAX),
            ),
            Compression::None,
            None,
        )),
        LogRotation::Hourly => by_time(TimeFrequency::Hourly),
        LogRotation::Daily => by_time(TimeFrequency::Daily),
        LogRotation::Never => Box::new(FileRotate::new(
            &path,
            AppendCount::new(keep),
            ContentLimit::None,
            Compression::None,
            None,
        )),
    })
}

/// SIGTERM and SIGINT handlers, installed before anything else so an early signal is never lost
/// to the default action.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves at the first SIGTERM or SIGINT; a second signal exits at once.
    async fn first(mut self) {
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM received"),
            _ = self.int.recv() => tracing::info!("SIGINT received"),
        }
        tokio::spawn(async move {
            tokio::select! {
                _ = self.term.recv() => {},
                _ = self.int.recv() => {},
            }
            tracing::warn!("second signal: exiting without draining");
            std::process::exit(i32::from(EXIT_FAILURE));
        });
    }
}

/// Runs `eddy serve` with already-parsed arguments; returns the process exit code.
pub fn serve(args: &ServeArgs, matches: &ArgMatches) -> Result<(), Failure> {
    let resolved = resolve(args, matches)?;
    // Before the log files and the data directory are created: readable by this user only.
    crate::data_dir::restrict_umask();
    init_logging(&resolved)?;
    tracing::info!(config = ?resolved.config, version = env!("CARGO_PKG_VERSION"), "starting eddy");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("eddy")
        .build()
        .map_err(|e| Failure {
            message: format!("cannot start the async runtime: {e}"),
            code: EXIT_FAILURE,
        })?;
    runtime.block_on(async {
        let signals = Signals::install().map_err(|e| Failure {
            message: format!("cannot install signal handlers: {e}"),
            code: EXIT_FAILURE,
        })?;
        let server = crate::Server::bind(resolved.config)
            .await
            .map_err(|e| Failure {
                code: if e.is_config() {
                    EXIT_CONFIG
                } else {
                    EXIT_FAILURE
                },
                message: crate::error_chain(&e),
            })?;
        server.run(signals.first()).await.map_err(|e| Failure {
            code: EXIT_FAILURE,
            message: crate::error_chain(&e),
        })
    })
}

/// Entry point of the `eddy` binary.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// Entry point with explicit arguments (tests).
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = Cli::command().get_matches_from(args);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match &cli.command {
        Command::Serve(args) => {
            let Some(("serve", sub)) = matches.subcommand() else {
                unreachable!("clap parsed the serve subcommand")
            };
            serve(args, sub)
        }
        Command::Client(command) => return eddy_ctl::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("eddy: error: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> (ServeArgs, ArgMatches) {
        let m = Cli::command().try_get_matches_from(args).unwrap();
        let sub = m.subcommand_matches("serve").unwrap().clone();
        let cli = Cli::from_arg_matches(&m).unwrap();
        let Command::Serve(a) = cli.command else {
            panic!("not serve")
        };
        (*a, sub)
    }

    #[test]
    fn peers_repeat_as_flags() {
        let (args, m) = parse(&[
            "eddy",
            "serve",
            "--node-id",
            "2",
            "--peer",
            "1=127.0.0.1:10001",
            "--peer",
            "3=127.0.0.3:10001",
            "--insecure-peer-plaintext",
        ]);
        let r = resolve(&args, &m).unwrap();
        assert_eq!(r.config.node_id, 2);
        assert_eq!(r.config.peers, ["1=127.0.0.1:10001", "3=127.0.0.3:10001"]);
        let (args, m) = parse(&[
            "eddy",
            "serve",
            "--peer",
            "1=x:1,3=y:1",
            "--node-id",
            "2",
            "--insecure-peer-plaintext",
        ]);
        assert_eq!(resolve(&args, &m).unwrap().config.peers, ["1=x:1", "3=y:1"]);
        let (args, m) = parse(&["eddy", "serve", "--peer", "1=x:1"]);
        assert!(
            resolve(&args, &m).is_err(),
            "a peer with this node's own id"
        );
    }

    #[test]
    fn a_member_without_peer_tls_refuses_to_start_and_names_the_flags() {
        let member = ["eddy", "serve", "--node-id", "2", "--peer", "1=x:1"];
        let (args, m) = parse(&member);
        let refused = resolve(&args, &m).unwrap_err();
        assert_eq!(refused.code, EXIT_CONFIG);
        for flag in [
            "--peer-tls-cert",
            "--peer-tls-key",
            "--peer-tls-ca",
            "--insecure-peer-plaintext",
        ] {
            assert!(refused.message.contains(flag), "{}", refused.message);
        }
        // Part of the TLS flags: the missing ones are named.
        let (args, m) = parse(&[&member[..], &["--peer-tls-cert", "c.pem"]].concat());
        let refused = resolve(&args, &m).unwrap_err();
        assert!(
            refused
                .message
                .contains("--peer-tls-key, --peer-tls-ca missing"),
            "{}",
            refused.message
        );
        // All three, or plaintext said in so many words: it starts.
        let tls = [
            "--peer-tls-cert",
            "c",
            "--peer-tls-key",
            "k",
            "--peer-tls-ca",
            "ca",
        ];
        let (args, m) = parse(&[&member[..], &tls].concat());
        assert!(resolve(&args, &m).unwrap().config.peer_tls_enabled());
        let (args, m) = parse(&[&member[..], &["--insecure-peer-plaintext"]].concat());
        assert!(resolve(&args, &m).is_ok());
        // Both at once is ambiguous; plaintext under strict TLS is a contradiction.
        let (args, m) = parse(&[&member[..], &tls, &["--insecure-peer-plaintext"]].concat());
        assert!(resolve(&args, &m).is_err());
        let strict = [
            "--tls-mode",
            "strict",
            "--tls-cert",
            "c",
            "--tls-key",
            "k",
            "--tls-client-auth",
            "none",
        ];
        let (args, m) = parse(&[&member[..], &strict, &["--insecure-peer-plaintext"]].concat());
        let refused = resolve(&args, &m).unwrap_err();
        assert!(refused.message.contains("strict"), "{}", refused.message);
        let (args, m) = parse(&[&member[..], &strict, &tls].concat());
        assert!(resolve(&args, &m).is_ok());
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_config_key_has_a_flag_and_env_of_the_same_name() {
        // Optional keys are only serialized when set, so set them all.
        let full = ServerConfig {
            tls_cert: Some("c".into()),
            tls_key: Some("k".into()),
            tls_ca_cert: Some("ca".into()),
            encryption_key: Some("k".into()),
            num_shards: Some(2),
            advertise_host: Some("h".into()),
            replication_host: Some(std::net::IpAddr::from([127, 0, 0, 1])),
            peer_tls_cert: Some("c".into()),
            peer_tls_key: Some("k".into()),
            peer_tls_ca: Some("ca".into()),
            peers: vec!["2=h:1".into()],
            log_dir: Some("logs".into()),
            max_connections_per_ip: Some(8),
            ..ServerConfig::default()
        };
        let keys: Vec<String> = toml::Table::try_from(full)
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let cmd = Cli::command();
        let serve = cmd.find_subcommand("serve").unwrap();
        for key in &keys {
            let arg = serve
                .get_arguments()
                .find(|a| a.get_id().as_str() == key)
                .unwrap_or_else(|| panic!("config key {key} has no flag"));
            // `peers` is the one list: its flag is the singular `--peer`, repeated.
            let long = if key == "peers" {
                "peer".to_owned()
            } else {
                key.replace('_', "-")
            };
            assert_eq!(arg.get_long(), Some(long.as_str()));
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some(format!("EDDY_{}", key.to_uppercase()).as_str())
            );
        }
        let flags = serve
            .get_arguments()
            .filter(|a| !["config", "help", "version"].contains(&a.get_id().as_str()))
            .count();
        assert_eq!(flags, keys.len(), "a flag without a config key");
    }

    #[test]
    fn defaults_resolve_to_the_default_config() {
        let (a, m) = parse(&["eddy", "serve"]);
        let r = resolve(&a, &m).unwrap();
        assert_eq!(r.config, ServerConfig::default());
        assert!(!r.log_level_explicit);
    }

    #[test]
    fn the_per_address_cap_and_its_exemptions_parse() {
        let (a, m) = parse(&["eddy", "serve"]);
        let r = resolve(&a, &m).unwrap();
        assert_eq!(r.config.max_connections_per_ip, None);
        assert_eq!(
            r.config.max_connections_per_ip_exempt,
            ["127.0.0.0/8", "::1"]
        );
        let (a, m) = parse(&[
            "eddy",
            "serve",
            "--max-connections-per-ip",
            "0",
            "--max-connections-per-ip-exempt",
            "10.0.0.0/8,192.0.2.1",
        ]);
        let r = resolve(&a, &m).unwrap();
        assert_eq!(r.config.max_connections_per_ip, Some(0));
        assert_eq!(
            r.config.max_connections_per_ip_exempt,
            ["10.0.0.0/8", "192.0.2.1"]
        );
        // An empty value exempts nothing.
        let (a, m) = parse(&["eddy", "serve", "--max-connections-per-ip-exempt", ""]);
        let r = resolve(&a, &m).unwrap();
        assert!(r
            .config
            .max_connections_per_ip_exempt
            .iter()
            .all(String::is_empty));
        let (a, m) = parse(&[
            "eddy",
            "serve",
            "--max-connections-per-ip-exempt",
            "10.0.0.0/40",
        ]);
        let e = resolve(&a, &m).unwrap_err();
        assert_eq!(e.code, EXIT_CONFIG);
        assert!(
            e.message.contains("max_connections_per_ip_exempt"),
            "{}",
            e.message
        );
        let (a, m) = parse(&["eddy", "serve", "--max-inflight-request-bytes", "1000"]);
        let e = resolve(&a, &m).unwrap_err();
        assert!(
            e.message.contains("max_inflight_request_bytes"),
            "{}",
            e.message
        );
    }

    #[test]
    fn flags_beat_file_and_file_beats_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("eddy.toml");
        std::fs::write(
            &file,
            "stream_port = 9100\nclient_port = 9200\nlog_level = \"debug\"\n",
        )
        .unwrap();
        let file_s = file.to_str().unwrap();
        let (a, m) = parse(&["eddy", "serve", "--config", file_s, "--stream-port", "9300"]);
        let r = resolve(&a, &m).unwrap();
        assert_eq!(r.config.stream_port, 9300);
        assert_eq!(r.config.client_port, 9200);
        assert_eq!(r.config.http_port, cfg::DEFAULT_HTTP_PORT);
        assert!(r.log_level_explicit);
    }

    #[test]
    fn bad_file_value_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "stream_port = \"eighty\"\n").unwrap();
        let (a, m) = parse(&["eddy", "serve", "--config", file.to_str().unwrap()]);
        let e = resolve(&a, &m).unwrap_err();
        assert_eq!(e.code, EXIT_CONFIG);
        assert!(e.message.contains("bad.toml"), "{}", e.message);
        std::fs::write(&file, "wal_compression_level = 40\n").unwrap();
        let e = resolve(&a, &m).unwrap_err();
        assert!(e.message.contains("wal_compression_level"), "{}", e.message);
    }
}
