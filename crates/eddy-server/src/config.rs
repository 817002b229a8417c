//! The server's configuration: one struct, one name per option.
//!
//! Every option has the same name in all three places it can be set: the flag `--data-dir`, the
//! environment variable `EDDY_DATA_DIR` and the TOML key `data_dir`. Precedence, highest first:
//! flags, environment, config file, built-in defaults. [`ServerConfig`] is the one option
//! table: its fields derive the flags (clap) and the TOML keys (serde). The command line
//! (`eddy::cli` in `bins/eddy`) does the layering; this module owns the names, the defaults and
//! the validation.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Default data directory, relative to the working directory.
pub const DEFAULT_DATA_DIR: &str = "./eddy-data";
/// Default bind address: loopback, so a fresh server is never exposed by accident.
pub const DEFAULT_HOST: &str = "127.0.0.1";
/// Default port of the stream (Iggy) protocol, as Iggy clients expect.
pub const DEFAULT_STREAM_PORT: u16 = 8090;
/// Default port of the event (Celeriant) protocol.
pub const DEFAULT_CLIENT_PORT: u16 = 10_000;
/// Default node-to-node replication port.
pub const DEFAULT_REPLICATION_PORT: u16 = 10_001;
/// Default port of the HTTP admin listener (`/health`, `/metrics`).
pub const DEFAULT_HTTP_PORT: u16 = 10_002;
/// Default root user name, as Iggy clients expect.
pub const DEFAULT_ROOT_USERNAME: &str = "iggy";
/// Default root password, as Iggy clients expect. A warning is logged while it is in use.
pub const DEFAULT_ROOT_PASSWORD: &str = "iggy";
/// Default cap on a client frame body on the event port (both declared lengths), 16 MiB.
pub const DEFAULT_MAX_REQUEST_SIZE: u32 = 16 * 1024 * 1024;
/// Default zstd level for stored events and compressed responses.
pub const DEFAULT_WAL_COMPRESSION_LEVEL: i32 = 3;
/// Default bound on the graceful drain at shutdown.
pub const DEFAULT_DRAIN_TIMEOUT_MS: u64 = 10_000;
/// Default cap on concurrent connections per protocol listener.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 16_384;
/// Default budget of request bytes in flight on the stream and event ports together
/// (`crate::budget`), 256 MiB: four of the stream port's largest frames, sixteen of the event
/// port's; a fixed figure rather than a share of memory, which a container's limit hides.
pub const DEFAULT_MAX_INFLIGHT_REQUEST_BYTES: u64 = 256 * 1024 * 1024;
/// Smallest accepted `max_inflight_request_bytes`.
pub const MIN_MAX_INFLIGHT_REQUEST_BYTES: u64 = 1024 * 1024;
/// Default cap on an event-protocol response body (both lengths), 64 MiB: the 0.2.0 client's
/// default response cap, so the two stay aligned.
pub const DEFAULT_MAX_RESPONSE_SIZE: u32 = 64 * 1024 * 1024;
/// Default deadline for a complete event-protocol request frame, and for each response write.
pub const DEFAULT_CLIENT_CONNECTION_TIMEOUT_MS: u64 = 30_000;
/// Default cap on a watch's `requested_latency_ms` (8001 above it).
pub const DEFAULT_MAX_REQUESTED_LATENCY_MS: u64 = 2_000;
/// Default cap on watch subscribers per event shard (8005 at the cap).
pub const DEFAULT_MAX_WATCH_SUBSCRIBERS: u32 = 16_384;
/// Default items per event list page.
pub const DEFAULT_LIST_PAGE_SIZE: u32 = 2_000;
/// Default cap on a registered schema's text (2021 above it).
pub const DEFAULT_MAX_SCHEMA_SIZE_BYTES: u32 = 16_384;
/// Default seconds between two event store compaction passes.
pub const DEFAULT_COMPACTION_CHECK_INTERVAL_SECS: u64 =
    eddy_event_store::DEFAULT_COMPACTION_CHECK_INTERVAL_SECS;
/// Default share of a sealed event segment that must be reclaimable before it is rewritten.
pub const DEFAULT_COMPACTION_MIN_RECLAIMABLE_RATIO: f64 =
    eddy_event_store::DEFAULT_COMPACTION_MIN_RECLAIMABLE_RATIO;
/// Default size at which an event shard's log rolls to a new segment.
pub const DEFAULT_SHARD_LOG_SEGMENT_BYTES: u64 = 256 * 1024 * 1024;
/// Default event-store group-commit window in microseconds (`--fsync-delay-us`), waited out
/// by default only while the machine's CPUs are saturated ([`FsyncDelayWhen::Busy`]): there
/// it saves CPU per write, elsewhere it would cost throughput; see docs/OPERATIONS.md.
pub const DEFAULT_FSYNC_DELAY_US: u64 = 1000;
/// Largest accepted `fsync_delay_us`.
pub const MAX_FSYNC_DELAY_US: u64 = 1_000_000;
/// Smallest accepted `shard_log_segment_bytes`.
pub const MIN_SHARD_LOG_SEGMENT_BYTES: u64 = 64 * 1024;
/// Largest accepted `shard_log_segment_bytes`.
pub const MAX_SHARD_LOG_SEGMENT_BYTES: u64 = 4 * 1024 * 1024 * 1024;
/// Largest accepted `num_shards`.
pub const MAX_NUM_SHARDS: u32 = 1024;
/// Largest accepted `list_page_size`.
pub const MAX_LIST_PAGE_SIZE: u32 = 100_000;
/// Default cap on a stream-protocol frame (header included), 64 MiB: the reference server's
/// `message_bus.max_message_size`.
pub const DEFAULT_STREAM_MAX_FRAME_SIZE: u32 = 64 * 1024 * 1024;
/// Default deadline for a stream-protocol connection to log in (from its accept or its
/// logout), as the event port's idle deadline.
pub const DEFAULT_STREAM_LOGIN_TIMEOUT_MS: u64 = 30_000;
/// Default idle timeout of a logged-in stream-protocol session (the SDK's heartbeat pings
/// every few seconds keep a live client well inside it).
pub const DEFAULT_STREAM_IDLE_TIMEOUT_MS: u64 = 300_000;
/// Default cap on a stream-protocol frame before login, header included: every command served
/// before login (login, ping, logout) fits in a few hundred bytes.
pub const DEFAULT_STREAM_MAX_PRELOGIN_FRAME_SIZE: u32 = 4 * 1024;
/// Default deadline for writing one stream-protocol answer (as the event port's).
pub const DEFAULT_STREAM_WRITE_TIMEOUT_MS: u64 = 30_000;
/// Default deadline for a stream-protocol frame holding room in the request budget (one above
/// 64 KiB) to finish arriving: a 64 MiB batch needs about 2.2 MB/s.
pub const DEFAULT_STREAM_FRAME_TIMEOUT_MS: u64 = 30_000;
/// Smallest accepted `stream_max_prelogin_frame_size`.
pub const MIN_STREAM_MAX_PRELOGIN_FRAME_SIZE: u32 = 1024;
/// Default cap on concurrent Argon2id computations (login, user creation, password change);
/// each takes 19 MiB and tens of milliseconds of CPU.
pub const DEFAULT_MAX_CONCURRENT_PASSWORD_HASHES: u32 = 4;
/// Default failed logins after which a stream connection is closed.
pub const DEFAULT_LOGIN_MAX_FAILURES_PER_CONNECTION: u32 = 5;
/// Default cap on the delay before a login attempt that follows failures.
pub const DEFAULT_LOGIN_BACKOFF_MAX_MS: u64 = 2_000;
/// Default cap on concurrent connections of the HTTP admin port.
pub const DEFAULT_HTTP_MAX_CONNECTIONS: u32 = 256;
/// Default deadline for an HTTP request head (and for the next one on a kept-alive connection).
pub const DEFAULT_HTTP_HEADER_READ_TIMEOUT_MS: u64 = 5_000;
/// Default longest an HTTP response write may make no progress before its connection closes.
pub const DEFAULT_HTTP_WRITE_TIMEOUT_MS: u64 = 10_000;
/// Default seconds between two purges of expired personal access tokens (the reference
/// server's cleaner interval). Expired tokens stop working at their expiry regardless.
pub const DEFAULT_TOKEN_PURGE_INTERVAL_SECS: u64 = 60;
/// Default stream-protocol heartbeat interval: a consumer-group member silent for 1.2 intervals
/// is evicted as stale (the reference server's 30 s).
pub const DEFAULT_STREAM_HEARTBEAT_INTERVAL_MS: u64 = 30_000;
/// Default longest time a consumer-group partition stays pending revocation after a join
/// before it moves to its new owner anyway (the reference server's 30 s).
pub const DEFAULT_STREAM_GROUP_REBALANCING_TIMEOUT_MS: u64 = 30_000;

/// Default Raft tick: heartbeats every 2 ticks, elections after 10-20 ticks of silence.
pub const DEFAULT_RAFT_TICK_MS: u64 = 100;
/// Largest accepted `raft_tick_ms` (elections would take longer than the 5 s failover goal).
pub const MAX_RAFT_TICK_MS: u64 = 250;
/// Most members a cluster may have.
pub const MAX_CLUSTER_MEMBERS: usize = 15;

/// Default cap on connections to a member's replication port: each peer holds one for
/// replication and one per snapshot copy in flight, so this leaves room for the largest
/// cluster copying many shards at once while bounding what strangers can hold open.
pub const DEFAULT_MAX_PEER_CONNECTIONS: u32 = 128;

/// One other member of the cluster, as `--peer ID=HOST:PORT` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSpec {
    /// The member's `--node-id`.
    pub id: u64,
    /// Host name or IP of its replication port.
    pub host: String,
    /// Its replication port.
    pub port: u16,
}

impl std::str::FromStr for PeerSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (id, addr) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?} is not ID=HOST:PORT"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: the node id {id:?} is not a number"))?;
        if id == 0 {
            return Err(format!("{s:?}: node ids start at 1"));
        }
        let (host, port) = addr
            .trim()
            .rsplit_once(':')
            .ok_or_else(|| format!("{s:?}: {addr:?} is not HOST:PORT"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("{s:?}: the host is empty"));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{s:?}: the port {port:?} is not a port number"))?;
        Ok(PeerSpec {
            id,
            host: host.to_owned(),
            port,
        })
    }
}

/// TLS on the two client ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    /// Plaintext only.
    #[default]
    Disabled,
    /// TLS 1.3 only; plaintext connections are refused.
    Strict,
}

/// When the event shard logs wait out the group-commit window (`--fsync-delay-when`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum FsyncDelayWhen {
    /// Only while the machine's CPUs are saturated (`crate::cpu`): writers paced by the CPU
    /// share fdatasyncs, writers paced by the disk never wait.
    #[default]
    Busy,
    /// Always (Celeriant's behaviour).
    Always,
}

/// What a topic created with `durability = replicated` acknowledges after
/// (`--replicated-durability`). Every newer Iggy SDK sends `replicated` unless told
/// otherwise, so this decides whether their topics keep eddy's promise that an ack is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ReplicatedDurability {
    /// After fdatasync, as `persisted` (on a majority in a cluster): stronger than
    /// `replicated` asks, and eddy's promise.
    #[default]
    Fsync,
    /// Iggy's meaning: once a majority holds it in memory; on a single node, the page cache
    /// (the topic's `enforce_fsync` is false, synced by the background flush).
    Memory,
}

/// Client certificate policy when TLS is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TlsClientAuth {
    /// mTLS: a client certificate signed by the CA is required.
    #[default]
    Require,
    /// A client certificate is verified when presented.
    Optional,
    /// No client certificates.
    None,
}

/// Which id of an aggregate key places it on an event shard (immutable once the store exists):
/// the event store's own rule, spelled `aggregate_id`, `org_id` or `aggregate_type_id`.
pub use eddy_event_store::RoutingRule;

/// clap's parser of an enumerated option: the names the configuration file takes (serde's),
/// listed for `--help` and parsed as the file parses them, so the two cannot disagree.
fn named<T>(names: &'static [&'static str]) -> impl clap::builder::TypedValueParser<Value = T>
where
    T: serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
{
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(names).try_map(|name| {
        T::deserialize(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(&name))
    })
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Default size at which the log file rotates under `log_rotation = "size"`, 64 MiB.
pub const DEFAULT_LOG_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// Smallest accepted `log_max_file_bytes`.
pub const MIN_LOG_MAX_FILE_BYTES: u64 = 4096;
/// Default number of rotated log files kept beside the current one.
pub const DEFAULT_LOG_MAX_FILES: u32 = 10;
/// Largest accepted `log_max_files`.
pub const MAX_LOG_MAX_FILES: u32 = 10_000;
/// Name of the current log file under `log_dir`; rotated files add a suffix to it.
pub const LOG_FILE_NAME: &str = "eddy.log";

/// When the log file under `log_dir` is rotated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogRotation {
    /// Once the file has grown past `log_max_file_bytes` (whole lines are kept together);
    /// rotated files are `eddy.log.1` (newest) to `eddy.log.N`.
    #[default]
    Size,
    /// At the first line of a new hour; rotated files carry their rotation time.
    Hourly,
    /// At the first line of a new day; rotated files carry their rotation time.
    Daily,
    /// Never: one file that grows.
    Never,
}

/// The whole server configuration and the one table of `eddy serve`'s options: each field is a
/// TOML key, a flag and an environment variable of the same name (`data_dir`, `--data-dir`,
/// `EDDY_DATA_DIR`), its doc comment the flag's help. The command line (`bins/eddy`) parses the
/// flags into this type through clap and layers them over the file and the defaults.
#[derive(Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
// One field per flag: the switches are independent options, not a state to model as an enum.
#[allow(clippy::struct_excessive_bools)]
pub struct ServerConfig {
    /// Data directory; created if missing and locked while the server runs.
    #[arg(long, env = "EDDY_DATA_DIR", value_name = "DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Address every listener binds.
    #[arg(long, env = "EDDY_HOST", default_value = DEFAULT_HOST)]
    pub host: IpAddr,
    /// Stream (Iggy) protocol port.
    #[arg(long, env = "EDDY_STREAM_PORT", default_value_t = DEFAULT_STREAM_PORT)]
    pub stream_port: u16,
    /// Event (Celeriant) protocol port.
    #[arg(long, env = "EDDY_CLIENT_PORT", default_value_t = DEFAULT_CLIENT_PORT)]
    pub client_port: u16,
    /// Replication port.
    #[arg(long, env = "EDDY_REPLICATION_PORT", default_value_t = DEFAULT_REPLICATION_PORT)]
    pub replication_port: u16,
    /// HTTP port for /health and /metrics.
    #[arg(long, env = "EDDY_HTTP_PORT", default_value_t = DEFAULT_HTTP_PORT)]
    pub http_port: u16,
    /// Root user name, created on first start.
    #[arg(long, env = "EDDY_ROOT_USERNAME", default_value = DEFAULT_ROOT_USERNAME)]
    pub root_username: String,
    /// Root password, set on first start. Prefer the environment variable to the flag.
    #[arg(
        long,
        env = "EDDY_ROOT_PASSWORD",
        default_value = DEFAULT_ROOT_PASSWORD,
        hide_env_values = true,
        hide_default_value = false
    )]
    pub root_password: String,
    /// Start on a host other than loopback although root still has the published default
    /// password (without it the server refuses to start there, exit code 78).
    #[arg(long, env = "EDDY_ALLOW_DEFAULT_ROOT_PASSWORD", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub allow_default_root_password: bool,
    /// Largest event-protocol request body in bytes (both declared lengths are checked).
    #[arg(long, env = "EDDY_MAX_REQUEST_SIZE", default_value_t = DEFAULT_MAX_REQUEST_SIZE)]
    pub max_request_size: u32,
    /// The first frame on the event port must be Identify.
    #[arg(long, env = "EDDY_REQUIRE_CLIENT_IDENTITY", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub require_client_identity: bool,
    /// TLS on the client ports: disabled or strict (TLS 1.3 only).
    #[arg(long, env = "EDDY_TLS_MODE", default_value = "disabled", value_parser = named::<TlsMode>(&["disabled", "strict"]))]
    pub tls_mode: TlsMode,
    /// Client certificates under TLS: require (mTLS), optional or none.
    #[arg(long, env = "EDDY_TLS_CLIENT_AUTH", default_value = "require", value_parser = named::<TlsClientAuth>(&["require", "optional", "none"]))]
    pub tls_client_auth: TlsClientAuth,
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
    #[arg(long, env = "EDDY_WAL_COMPRESSION_LEVEL", default_value_t = DEFAULT_WAL_COMPRESSION_LEVEL)]
    pub wal_compression_level: i32,
    /// Log level or filter directive (RUST_LOG applies when this is not set).
    #[arg(long, env = "EDDY_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format: text or json.
    #[arg(long, env = "EDDY_LOG_FORMAT", default_value = "text", value_parser = named::<LogFormat>(&["text", "json"]))]
    pub log_format: LogFormat,
    /// Also log to files in this directory (the current one is eddy.log) [default: stderr only].
    #[arg(long, env = "EDDY_LOG_DIR", value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// When the log file rotates: size (past --log-max-file-bytes), hourly, daily or never.
    #[arg(long, env = "EDDY_LOG_ROTATION", default_value = "size", value_parser = named::<LogRotation>(&["size", "hourly", "daily", "never"]))]
    pub log_rotation: LogRotation,
    /// Size in bytes past which the log file rotates (--log-rotation size).
    #[arg(long, env = "EDDY_LOG_MAX_FILE_BYTES", default_value_t = DEFAULT_LOG_MAX_FILE_BYTES)]
    pub log_max_file_bytes: u64,
    /// Rotated log files kept beside the current one; older ones are deleted.
    #[arg(long, env = "EDDY_LOG_MAX_FILES", default_value_t = DEFAULT_LOG_MAX_FILES)]
    pub log_max_files: u32,
    /// Longest wait for in-flight requests at shutdown, in milliseconds.
    #[arg(long, env = "EDDY_DRAIN_TIMEOUT_MS", default_value_t = DEFAULT_DRAIN_TIMEOUT_MS)]
    pub drain_timeout_ms: u64,
    /// Most concurrent connections per protocol port.
    #[arg(long, env = "EDDY_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
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
    #[arg(long, env = "EDDY_MAX_INFLIGHT_REQUEST_BYTES", default_value_t = DEFAULT_MAX_INFLIGHT_REQUEST_BYTES)]
    pub max_inflight_request_bytes: u64,
    // Event protocol.
    /// Largest event-protocol response body in bytes; also bounds one read page.
    #[arg(long, env = "EDDY_MAX_RESPONSE_SIZE", default_value_t = DEFAULT_MAX_RESPONSE_SIZE)]
    pub max_response_size: u32,
    /// Event port: deadline for a complete request frame (idle close) and for each response write, in milliseconds.
    #[arg(long, env = "EDDY_CLIENT_CONNECTION_TIMEOUT_MS", default_value_t = DEFAULT_CLIENT_CONNECTION_TIMEOUT_MS)]
    pub client_connection_timeout_ms: u64,
    /// Largest requested_latency_ms a watch may ask for (error 8001 above it).
    #[arg(long, env = "EDDY_MAX_REQUESTED_LATENCY_MS", default_value_t = DEFAULT_MAX_REQUESTED_LATENCY_MS)]
    pub max_requested_latency_ms: u64,
    /// Most watch subscribers per event shard (error 8005 at the cap).
    #[arg(long, env = "EDDY_MAX_WATCH_SUBSCRIBERS", default_value_t = DEFAULT_MAX_WATCH_SUBSCRIBERS)]
    pub max_watch_subscribers: u32,
    /// Items per page of the event list requests.
    #[arg(long, env = "EDDY_LIST_PAGE_SIZE", default_value_t = DEFAULT_LIST_PAGE_SIZE)]
    pub list_page_size: u32,
    /// Event shards, fixed when the event store is created [default: the stored value, else the number of CPUs].
    #[arg(long, env = "EDDY_NUM_SHARDS")]
    pub num_shards: Option<u32>,
    /// Which id places an aggregate on an event shard (fixed when the store is created).
    #[arg(long, env = "EDDY_ROUTING_RULE", default_value = "aggregate_id", value_parser = named::<RoutingRule>(&["aggregate_id", "org_id", "aggregate_type_id"]))]
    pub routing_rule: RoutingRule,
    /// Event shard 0 holds no data (fixed when the store is created; needs 2+ shards).
    #[arg(long, env = "EDDY_RESERVE_COORDINATOR_SHARD", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub reserve_coordinator_shard: bool,
    /// Largest schema text a RegisterSchema may carry, in bytes (error 2021 above it).
    #[arg(long, env = "EDDY_MAX_SCHEMA_SIZE_BYTES", default_value_t = DEFAULT_MAX_SCHEMA_SIZE_BYTES)]
    pub max_schema_size_bytes: u32,
    /// Seconds between two event store compaction passes, which physically remove trimmed and
    /// deleted events (the first pass comes one interval after the start).
    #[arg(long, env = "EDDY_COMPACTION_CHECK_INTERVAL_SECS", default_value_t = DEFAULT_COMPACTION_CHECK_INTERVAL_SECS)]
    pub compaction_check_interval_secs: u64,
    /// Share (0..=1) of a sealed event segment that must be reclaimable before compaction rewrites it.
    #[arg(long, env = "EDDY_COMPACTION_MIN_RECLAIMABLE_RATIO", default_value_t = DEFAULT_COMPACTION_MIN_RECLAIMABLE_RATIO)]
    pub compaction_min_reclaimable_ratio: f64,
    /// Size in bytes at which an event shard's log rolls to a new segment (Celeriant's
    /// --shard-log-preallocate-bytes; segments are not created at full size).
    #[arg(long, env = "EDDY_SHARD_LOG_SEGMENT_BYTES", default_value_t = DEFAULT_SHARD_LOG_SEGMENT_BYTES)]
    pub shard_log_segment_bytes: u64,
    /// Event-store group-commit window in microseconds (Celeriant's --fsync-delay-us): writes
    /// arriving while an event shard's fdatasync is in flight wait up to this long after it
    /// (less once the writers it acknowledged are back), so one fdatasync covers more of them;
    /// an idle shard writes at once. 0 disables the window.
    #[arg(long, env = "EDDY_FSYNC_DELAY_US", default_value_t = DEFAULT_FSYNC_DELAY_US)]
    pub fsync_delay_us: u64,
    /// When the group-commit window applies: busy (only while the machine's CPUs are
    /// saturated, where it saves CPU per write; writers paced by the disk never wait) or
    /// always.
    #[arg(long, env = "EDDY_FSYNC_DELAY_WHEN", default_value = "busy", value_parser = named::<FsyncDelayWhen>(&["busy", "always"]))]
    pub fsync_delay_when: FsyncDelayWhen,
    /// What a topic created with durability = replicated (every newer Iggy SDK's default)
    /// acknowledges after: fsync (as persisted: an acknowledged send is on disk, on a majority
    /// in a cluster) or memory (Iggy's meaning: a majority holds it in memory; on a single
    /// node, the page cache). enforce_fsync = false asks for memory acks either way.
    #[arg(long, env = "EDDY_REPLICATED_DURABILITY", default_value = "fsync", value_parser = named::<ReplicatedDurability>(&["fsync", "memory"]))]
    pub replicated_durability: ReplicatedDurability,
    /// Largest stream-protocol frame in bytes, header included; a larger one closes its
    /// connection unread.
    #[arg(long, env = "EDDY_STREAM_MAX_FRAME_SIZE", default_value_t = DEFAULT_STREAM_MAX_FRAME_SIZE)]
    pub stream_max_frame_size: u32,
    /// Stream-protocol heartbeat interval in milliseconds: consumer-group members silent for
    /// 1.2 intervals are evicted as stale (0 disables).
    #[arg(long, env = "EDDY_STREAM_HEARTBEAT_INTERVAL_MS", default_value_t = DEFAULT_STREAM_HEARTBEAT_INTERVAL_MS)]
    pub stream_heartbeat_interval_ms: u64,
    // Cluster.
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
    pub replication_host: Option<IpAddr>,
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
    #[arg(long, env = "EDDY_MAX_PEER_CONNECTIONS", default_value_t = DEFAULT_MAX_PEER_CONNECTIONS)]
    pub max_peer_connections: u32,
    /// The consensus clock in milliseconds: heartbeats every 2 ticks, elections after 10-20 silent ticks.
    #[arg(long, env = "EDDY_RAFT_TICK_MS", default_value_t = DEFAULT_RAFT_TICK_MS)]
    pub raft_tick_ms: u64,
    /// Event shard groups: compact the Raft log every this many applied entries; a member that
    /// needs what was compacted copies the shard's records from a peer.
    #[arg(long, env = "EDDY_RAFT_EVENT_COMPACT_ENTRIES", default_value_t = eddy_replicated::shard::DEFAULT_EVENT_COMPACT_ENTRIES)]
    pub raft_event_compact_entries: u64,
    /// After a member joins a consumer group, a partition whose owner has polled and not yet
    /// committed stays with it until it commits, or at most this many milliseconds (0: moves at once).
    #[arg(long, env = "EDDY_STREAM_GROUP_REBALANCING_TIMEOUT_MS", default_value_t = DEFAULT_STREAM_GROUP_REBALANCING_TIMEOUT_MS)]
    pub stream_group_rebalancing_timeout_ms: u64,
    /// Seconds between two purges of expired personal access tokens (they stop working at
    /// their expiry whatever this is; the purge frees their names and the per-user limit).
    #[arg(long, env = "EDDY_TOKEN_PURGE_INTERVAL_SECS", default_value_t = DEFAULT_TOKEN_PURGE_INTERVAL_SECS)]
    pub token_purge_interval_secs: u64,
    /// Stream port: milliseconds a connection has to log in, from its accept or its logout;
    /// then it is evicted (NoSession) and closed.
    #[arg(long, env = "EDDY_STREAM_LOGIN_TIMEOUT_MS", default_value_t = DEFAULT_STREAM_LOGIN_TIMEOUT_MS)]
    pub stream_login_timeout_ms: u64,
    /// Stream port: milliseconds a session may go without completing a request (heartbeat
    /// pings count) before it is evicted (StaleClient) and closed; 0 disables.
    #[arg(long, env = "EDDY_STREAM_IDLE_TIMEOUT_MS", default_value_t = DEFAULT_STREAM_IDLE_TIMEOUT_MS)]
    pub stream_idle_timeout_ms: u64,
    /// Stream port: largest frame in bytes (header included) read before login; a larger one
    /// closes its connection unread.
    #[arg(long, env = "EDDY_STREAM_MAX_PRELOGIN_FRAME_SIZE", default_value_t = DEFAULT_STREAM_MAX_PRELOGIN_FRAME_SIZE)]
    pub stream_max_prelogin_frame_size: u32,
    /// Stream port: milliseconds an answer may take to write; a client that stops reading is
    /// disconnected after it.
    #[arg(long, env = "EDDY_STREAM_WRITE_TIMEOUT_MS", default_value_t = DEFAULT_STREAM_WRITE_TIMEOUT_MS)]
    pub stream_write_timeout_ms: u64,
    /// Stream port: milliseconds a frame above 64 KiB may take to finish arriving once it holds
    /// its bytes in the request budget (--max-inflight-request-bytes); a slower one closes its
    /// connection and gives the room back.
    #[arg(long, env = "EDDY_STREAM_FRAME_TIMEOUT_MS", default_value_t = DEFAULT_STREAM_FRAME_TIMEOUT_MS)]
    pub stream_frame_timeout_ms: u64,
    /// Most Argon2id computations (password checks and hashes) at once; further logins wait.
    #[arg(long, env = "EDDY_MAX_CONCURRENT_PASSWORD_HASHES", default_value_t = DEFAULT_MAX_CONCURRENT_PASSWORD_HASHES)]
    pub max_concurrent_password_hashes: u32,
    /// Failed logins after which a stream connection is closed.
    #[arg(long, env = "EDDY_LOGIN_MAX_FAILURES_PER_CONNECTION", default_value_t = DEFAULT_LOGIN_MAX_FAILURES_PER_CONNECTION)]
    pub login_max_failures_per_connection: u32,
    /// Longest delay in milliseconds before a login attempt that follows failed ones (of the
    /// same connection or address; the delay starts at 100 ms after two failures and doubles).
    #[arg(long, env = "EDDY_LOGIN_BACKOFF_MAX_MS", default_value_t = DEFAULT_LOGIN_BACKOFF_MAX_MS)]
    pub login_backoff_max_ms: u64,
    /// HTTP port: most connections at once; further ones wait in the kernel backlog.
    #[arg(long, env = "EDDY_HTTP_MAX_CONNECTIONS", default_value_t = DEFAULT_HTTP_MAX_CONNECTIONS)]
    pub http_max_connections: u32,
    /// HTTP port: milliseconds a client has to send a request head (also the idle limit of a
    /// kept-alive connection).
    #[arg(long, env = "EDDY_HTTP_HEADER_READ_TIMEOUT_MS", default_value_t = DEFAULT_HTTP_HEADER_READ_TIMEOUT_MS)]
    pub http_header_read_timeout_ms: u64,
    /// HTTP port: milliseconds a response write may make no progress (the client stopped
    /// reading) before the connection is closed.
    #[arg(long, env = "EDDY_HTTP_WRITE_TIMEOUT_MS", default_value_t = DEFAULT_HTTP_WRITE_TIMEOUT_MS)]
    pub http_write_timeout_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            host: IpAddr::from([127, 0, 0, 1]),
            stream_port: DEFAULT_STREAM_PORT,
            client_port: DEFAULT_CLIENT_PORT,
            replication_port: DEFAULT_REPLICATION_PORT,
            http_port: DEFAULT_HTTP_PORT,
            root_username: DEFAULT_ROOT_USERNAME.to_owned(),
            root_password: DEFAULT_ROOT_PASSWORD.to_owned(),
            allow_default_root_password: false,
            max_request_size: DEFAULT_MAX_REQUEST_SIZE,
            require_client_identity: false,
            tls_mode: TlsMode::Disabled,
            tls_client_auth: TlsClientAuth::Require,
            insecure_allow_plaintext_auth: false,
            allow_anonymous_clients: false,
            tls_cert: None,
            tls_key: None,
            tls_ca_cert: None,
            encryption_key: None,
            wal_compression_level: DEFAULT_WAL_COMPRESSION_LEVEL,
            log_level: "info".to_owned(),
            log_format: LogFormat::Text,
            log_dir: None,
            log_rotation: LogRotation::Size,
            log_max_file_bytes: DEFAULT_LOG_MAX_FILE_BYTES,
            log_max_files: DEFAULT_LOG_MAX_FILES,
            drain_timeout_ms: DEFAULT_DRAIN_TIMEOUT_MS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: None,
            max_connections_per_ip_exempt: crate::address_cap::DEFAULT_EXEMPT
                .map(str::to_owned)
                .to_vec(),
            max_inflight_request_bytes: DEFAULT_MAX_INFLIGHT_REQUEST_BYTES,
            max_response_size: DEFAULT_MAX_RESPONSE_SIZE,
            client_connection_timeout_ms: DEFAULT_CLIENT_CONNECTION_TIMEOUT_MS,
            max_requested_latency_ms: DEFAULT_MAX_REQUESTED_LATENCY_MS,
            max_watch_subscribers: DEFAULT_MAX_WATCH_SUBSCRIBERS,
            list_page_size: DEFAULT_LIST_PAGE_SIZE,
            num_shards: None,
            routing_rule: RoutingRule::AggregateId,
            reserve_coordinator_shard: false,
            max_schema_size_bytes: DEFAULT_MAX_SCHEMA_SIZE_BYTES,
            compaction_check_interval_secs: DEFAULT_COMPACTION_CHECK_INTERVAL_SECS,
            compaction_min_reclaimable_ratio: DEFAULT_COMPACTION_MIN_RECLAIMABLE_RATIO,
            shard_log_segment_bytes: DEFAULT_SHARD_LOG_SEGMENT_BYTES,
            fsync_delay_us: DEFAULT_FSYNC_DELAY_US,
            fsync_delay_when: FsyncDelayWhen::Busy,
            replicated_durability: ReplicatedDurability::Fsync,
            stream_max_frame_size: DEFAULT_STREAM_MAX_FRAME_SIZE,
            stream_heartbeat_interval_ms: DEFAULT_STREAM_HEARTBEAT_INTERVAL_MS,
            node_id: 1,
            peers: Vec::new(),
            cluster: false,
            join: false,
            advertise_host: None,
            replication_host: None,
            peer_tls_cert: None,
            peer_tls_key: None,
            peer_tls_ca: None,
            insecure_peer_plaintext: false,
            max_peer_connections: DEFAULT_MAX_PEER_CONNECTIONS,
            raft_tick_ms: DEFAULT_RAFT_TICK_MS,
            raft_event_compact_entries: eddy_replicated::shard::DEFAULT_EVENT_COMPACT_ENTRIES,
            stream_group_rebalancing_timeout_ms: DEFAULT_STREAM_GROUP_REBALANCING_TIMEOUT_MS,
            token_purge_interval_secs: DEFAULT_TOKEN_PURGE_INTERVAL_SECS,
            stream_login_timeout_ms: DEFAULT_STREAM_LOGIN_TIMEOUT_MS,
            stream_idle_timeout_ms: DEFAULT_STREAM_IDLE_TIMEOUT_MS,
            stream_max_prelogin_frame_size: DEFAULT_STREAM_MAX_PRELOGIN_FRAME_SIZE,
            stream_write_timeout_ms: DEFAULT_STREAM_WRITE_TIMEOUT_MS,
            stream_frame_timeout_ms: DEFAULT_STREAM_FRAME_TIMEOUT_MS,
            max_concurrent_password_hashes: DEFAULT_MAX_CONCURRENT_PASSWORD_HASHES,
            login_max_failures_per_connection: DEFAULT_LOGIN_MAX_FAILURES_PER_CONNECTION,
            login_backoff_max_ms: DEFAULT_LOGIN_BACKOFF_MAX_MS,
            http_max_connections: DEFAULT_HTTP_MAX_CONNECTIONS,
            http_header_read_timeout_ms: DEFAULT_HTTP_HEADER_READ_TIMEOUT_MS,
            http_write_timeout_ms: DEFAULT_HTTP_WRITE_TIMEOUT_MS,
        }
    }
}

impl ServerConfig {
    /// This configuration as TOML, the root password and the encryption key replaced by
    /// `<redacted>` (for snapshots and
    /// diagnostics; never for loading).
    pub fn redacted_toml(&self) -> String {
        let redacted = ServerConfig {
            root_password: "<redacted>".to_owned(),
            encryption_key: self
                .encryption_key
                .as_ref()
                .map(|_| "<redacted>".to_owned()),
            ..self.clone()
        };
        toml::to_string(&redacted).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}

impl std::fmt::Debug for ServerConfig {
    // Hand-written so the root password can never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("ServerConfig");
        self.debug_server_fields(&mut d);
        self.debug_logging_fields(&mut d);
        self.debug_limit_fields(&mut d);
        self.debug_storage_fields(&mut d);
        self.debug_cluster_fields(&mut d);
        self.debug_session_fields(&mut d);
        d.finish()
    }
}

impl ServerConfig {
    /// The `Debug` fields of the data directory, the listeners, the root user, TLS and the
    /// encryption key (both secrets redacted) and the WAL compression.
    fn debug_server_fields(&self, d: &mut std::fmt::DebugStruct<'_, '_>) {
        d.field("data_dir", &self.data_dir)
            .field("host", &self.host)
            .field("stream_port", &self.stream_port)
            .field("client_port", &self.client_port)
            .field("replication_port", &self.replication_port)
            .field("http_port", &self.http_port)
            .field("root_username", &self.root_username)
            .field("root_password", &"<redacted>")
            .field(
                "allow_default_root_password",
                &self.allow_default_root_password,
            )
            .field("max_request_size", &self.max_request_size)
            .field("require_client_identity", &self.require_client_identity)
            .field("tls_mode", &self.tls_mode)
            .field("tls_client_auth", &self.tls_client_auth)
            .field(
                "insecure_allow_plaintext_auth",
                &self.insecure_allow_plaintext_auth,
            )
            .field("allow_anonymous_clients", &self.allow_anonymous_clients)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("tls_ca_cert", &self.tls_ca_cert)
            .field(
                "encryption_key",
                &self.encryption_key.as_ref().map(|_| "<redacted>"),
            )
            .field("wal_compression_level", &self.wal_compression_level);
    }

    /// The `Debug` fields of logging.
    fn debug_logging_fields(&self, d: &mut std::fmt::DebugStruct<'_, '_>) {
        d.field("log_level", &self.log_level)
            .field("log_format", &self.log_format)
            .field("log_dir", &self.log_dir)
            .field("log_rotation", &self.log_rotation)
            .field("log_max_file_bytes", &self.log_max_file_bytes)
            .field("log_max_files", &self.log_max_files);
    }

    /// The `Debug` fields of the connection, request and response limits.
    fn debug_limit_fields(&self, d: &mut std::fmt::DebugStruct<'_, '_>) {
        d.field("drain_timeout_ms", &self.drain_timeout_ms)
            .field("max_connections", &self.max_connections)
            .field("max_connections_per_ip", &self.max_connections_per_ip)
            .field(
                "max_connections_per_ip_exempt",
                &self.max_connections_per_ip_exempt,
            )
            .field(
                "max_inflight_request_bytes",
                &self.max_inflight_request_bytes,
            )
            .field("max_response_size", &self.max_response_size)
            .field(
                "client_connection_timeout_ms",
                &self.client_connection_timeout_ms,
            )
            .field("max_requested_latency_ms", &self.max_requested_latency_ms)
            .field("max_watch_subscribers", &self.max_watch_subscribers)
            .field("list_page_size", &self.list_page_size);
    }

    /// The `Debug` fields of shards, schemas, compaction, the log, durability and stream framing.
    fn debug_storage_fields(&self, d: &mut std::fmt::DebugStruct<'_, '_>) {
        d.field("num_shards", &self.num_shards)
            .field("routing_rule", &self.routing_rule)
            .field("reserve_coordinator_shard", &self.reserve_coordinator_shard)
            .field("max_schema_size_bytes", &self.max_schema_size_bytes)
            .field(
                "compaction_check_interval_secs",
                &self.compaction_check_interval_secs,
            )
            .field(
                "compaction_min_reclaimable_ratio",
                &self.compaction_min_reclaimable_ratio,
            )
            .field("shard_log_segment_bytes", &self.shard_log_segment_bytes)
            .field("fsync_delay_us", &self.fsync_delay_us)
            .field("fsync_delay_when", &self.fsync_delay_when)
            .field("replicated_durability", &self.replicated_durability)
            .field("stream_max_frame_size", &self.stream_max_frame_size)
            .field(
                "stream_heartbeat_interval_ms",
                &self.stream_heartbeat_interval_ms,
            );
    }

    /// The `Debug` fields of cluster membership, peers and Raft.
    fn debug_cluster_fields(&self, d: &mut std::fmt::DebugStruct<'_, '_>) {
        d.field("node_id", &self.node_id)
            .field("peers", &self.peers)
            .field("cluster", &self.cluster)
            .field("join", &self.join)
            .field("advertise_host", &self.advertise_host)
            .field("replication_host", &self.replication_host)
            .field("peer_tls_cert", &self.peer_tls_cert)
            .field("peer_tls_key", &self.peer_tls_key)
            .field("peer_tls_ca", &self.peer_tls_ca)
            .field("insecure_peer_plaintext", &self.insecure_peer_plaintext)
            .field("max_peer_connections", &self.max_peer_connections)
            .field("raft_tick_ms", &self.raft_tick_ms)
            .field(
                "raft_event_compact_entries",
                &self.raft_event_compact_entries,
            );
    }

    /// The `Debug` fields of consumer groups, tokens, stream sessions, logins and the HTTP
    /// listener.
    fn debug_session_fields(&self, d: &mut std::fmt::DebugStruct<'_, '_>) {
        d.field(
            "stream_group_rebalancing_timeout_ms",
            &self.stream_group_rebalancing_timeout_ms,
        )
        .field("token_purge_interval_secs", &self.token_purge_interval_secs)
        .field("stream_login_timeout_ms", &self.stream_login_timeout_ms)
        .field("stream_idle_timeout_ms", &self.stream_idle_timeout_ms)
        .field(
            "stream_max_prelogin_frame_size",
            &self.stream_max_prelogin_frame_size,
        )
        .field("stream_write_timeout_ms", &self.stream_write_timeout_ms)
        .field("stream_frame_timeout_ms", &self.stream_frame_timeout_ms)
        .field(
            "max_concurrent_password_hashes",
            &self.max_concurrent_password_hashes,
        )
        .field(
            "login_max_failures_per_connection",
            &self.login_max_failures_per_connection,
        )
        .field("login_backoff_max_ms", &self.login_backoff_max_ms)
        .field("http_max_connections", &self.http_max_connections)
        .field(
            "http_header_read_timeout_ms",
            &self.http_header_read_timeout_ms,
        )
        .field("http_write_timeout_ms", &self.http_write_timeout_ms);
    }
}

/// A configuration value that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A value is out of its allowed range.
    #[error("invalid value for {key}: {reason}")]
    Invalid {
        /// The option's TOML key.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Smallest accepted `max_request_size`: a fixed-size event frame (1024 bytes) must always fit.
pub const MIN_MAX_REQUEST_SIZE: u32 = 1024;
/// Largest accepted `max_request_size` (1 GiB): beyond that a single frame could exhaust memory.
pub const MAX_MAX_REQUEST_SIZE: u32 = 1 << 30;
/// Smallest accepted `stream_max_frame_size` (64 KiB): every non-message request fits.
pub const MIN_STREAM_MAX_FRAME_SIZE: u32 = 64 * 1024;
/// Largest accepted `max_schema_size_bytes` (1 MiB): a schema is compiled on every server
/// start that looks it up, and its size bounds the work.
pub const MAX_MAX_SCHEMA_SIZE_BYTES: u32 = 1024 * 1024;
/// Largest accepted `stream_max_frame_size` (1 GiB).
pub const MAX_STREAM_MAX_FRAME_SIZE: u32 = 1 << 30;

impl ServerConfig {
    /// Checks every cross-field and range rule. Called once at start-up, before anything is opened.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: String| Err(ConfigError::Invalid { key, reason });
        if self.data_dir.as_os_str().is_empty() {
            return invalid("data_dir", "must not be empty".into());
        }
        self.validate_frame_sizes()?;
        let at_least_one = [
            ("stream_login_timeout_ms", self.stream_login_timeout_ms),
            ("stream_write_timeout_ms", self.stream_write_timeout_ms),
            ("stream_frame_timeout_ms", self.stream_frame_timeout_ms),
            (
                "max_concurrent_password_hashes",
                u64::from(self.max_concurrent_password_hashes),
            ),
            (
                "login_max_failures_per_connection",
                u64::from(self.login_max_failures_per_connection),
            ),
            ("http_max_connections", u64::from(self.http_max_connections)),
            (
                "http_header_read_timeout_ms",
                self.http_header_read_timeout_ms,
            ),
            ("http_write_timeout_ms", self.http_write_timeout_ms),
        ];
        for (key, value) in at_least_one {
            if value == 0 {
                return invalid(key, "must be at least 1".into());
            }
        }
        if !(1..=22).contains(&self.wal_compression_level) {
            return invalid(
                "wal_compression_level",
                format!("{} is outside 1..=22", self.wal_compression_level),
            );
        }
        self.validate_credentials()?;
        self.validate_connection_limits()?;
        if self.log_max_file_bytes < MIN_LOG_MAX_FILE_BYTES {
            return invalid(
                "log_max_file_bytes",
                format!("must be at least {MIN_LOG_MAX_FILE_BYTES}"),
            );
        }
        if !(1..=MAX_LOG_MAX_FILES).contains(&self.log_max_files) {
            return invalid(
                "log_max_files",
                format!("{} is outside 1..={MAX_LOG_MAX_FILES}", self.log_max_files),
            );
        }
        if self.token_purge_interval_secs == 0 {
            return invalid("token_purge_interval_secs", "must be at least 1".into());
        }
        self.validate_event()?;
        self.cluster_peers()?;
        self.validate_peer_tls()?;
        self.validate_listeners()
    }

    /// The frame-size rules: each limit within its range, the pre-login limit no larger than
    /// the stream limit.
    fn validate_frame_sizes(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: String| Err(ConfigError::Invalid { key, reason });
        if !(MIN_MAX_REQUEST_SIZE..=MAX_MAX_REQUEST_SIZE).contains(&self.max_request_size) {
            return invalid(
                "max_request_size",
                format!(
                    "{} is outside {MIN_MAX_REQUEST_SIZE}..={MAX_MAX_REQUEST_SIZE}",
                    self.max_request_size
                ),
            );
        }
        if !(MIN_STREAM_MAX_FRAME_SIZE..=MAX_STREAM_MAX_FRAME_SIZE)
            .contains(&self.stream_max_frame_size)
        {
            return invalid(
                "stream_max_frame_size",
                format!(
                    "{} is outside {MIN_STREAM_MAX_FRAME_SIZE}..={MAX_STREAM_MAX_FRAME_SIZE}",
                    self.stream_max_frame_size
                ),
            );
        }
        if !(MIN_STREAM_MAX_PRELOGIN_FRAME_SIZE..=self.stream_max_frame_size)
            .contains(&self.stream_max_prelogin_frame_size)
        {
            return invalid(
                "stream_max_prelogin_frame_size",
                format!(
                    "{} is outside {MIN_STREAM_MAX_PRELOGIN_FRAME_SIZE}..=stream_max_frame_size ({})",
                    self.stream_max_prelogin_frame_size, self.stream_max_frame_size
                ),
            );
        }
        Ok(())
    }

    /// The root user's credentials and the encryption key (whose value is never part of a
    /// message).
    fn validate_credentials(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: String| Err(ConfigError::Invalid { key, reason });
        if self.root_username.is_empty() {
            return invalid("root_username", "must not be empty".into());
        }
        if self.root_password.is_empty() {
            return invalid("root_password", "must not be empty".into());
        }
        if self.encryption_key.is_some() && self.encryption_key_bytes().is_none() {
            // The value itself is never part of the message.
            return invalid(
                "encryption_key",
                "must be the standard base64 of exactly 32 bytes".into(),
            );
        }
        Ok(())
    }

    /// The connection caps: the total, the per-address exemptions and the in-flight bytes.
    fn validate_connection_limits(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: String| Err(ConfigError::Invalid { key, reason });
        if self.max_connections == 0 {
            return invalid("max_connections", "must be at least 1".into());
        }
        // An empty entry is how a flag or variable clears the list.
        for network in self
            .max_connections_per_ip_exempt
            .iter()
            .filter(|n| !n.trim().is_empty())
        {
            if let Err(reason) = network.parse::<crate::address_cap::IpNetwork>() {
                return invalid("max_connections_per_ip_exempt", reason);
            }
        }
        if !(MIN_MAX_INFLIGHT_REQUEST_BYTES..=crate::budget::MAX_BUDGET)
            .contains(&self.max_inflight_request_bytes)
        {
            return invalid(
                "max_inflight_request_bytes",
                format!(
                    "{} is outside {MIN_MAX_INFLIGHT_REQUEST_BYTES}..={}",
                    self.max_inflight_request_bytes,
                    crate::budget::MAX_BUDGET
                ),
            );
        }
        Ok(())
    }

    /// The client-facing listeners: no two on one port, what `tls_mode = strict` needs, and
    /// no client identity over plaintext unless explicitly allowed.
    fn validate_listeners(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: String| Err(ConfigError::Invalid { key, reason });
        let ports = [
            ("stream_port", self.stream_port),
            ("client_port", self.client_port),
            ("replication_port", self.replication_port),
            ("http_port", self.http_port),
        ];
        for (i, (a, pa)) in ports.iter().enumerate() {
            for (b, pb) in &ports[i + 1..] {
                if *pa != 0 && pa == pb {
                    return invalid(a, format!("port {pa} is also used by {b}"));
                }
            }
        }
        if self.tls_mode == TlsMode::Strict {
            if self.tls_cert.is_none() {
                return invalid("tls_cert", "tls_mode = strict needs a certificate".into());
            }
            if self.tls_key.is_none() {
                return invalid("tls_key", "tls_mode = strict needs a private key".into());
            }
            if self.tls_client_auth != TlsClientAuth::None && self.tls_ca_cert.is_none() {
                return invalid(
                    "tls_ca_cert",
                    "tls_client_auth = require or optional needs a CA bundle (or set tls_client_auth = none)"
                        .into(),
                );
            }
        }
        if self.tls_mode == TlsMode::Disabled
            && self.require_client_identity
            && !self.insecure_allow_plaintext_auth
        {
            return invalid(
                "require_client_identity",
                "needs tls_mode = strict (or insecure_allow_plaintext_auth = true): without TLS a \
                 captured signed nonce replays for up to 2 minutes"
                    .into(),
            );
        }
        Ok(())
    }

    /// The replication port's rules: a cluster member authenticates its peers with mutual
    /// TLS unless told in so many words not to, and `tls_mode = strict` allows no plaintext
    /// port at all.
    fn validate_peer_tls(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: String| Err(ConfigError::Invalid { key, reason });
        if self.max_peer_connections == 0 {
            return invalid("max_peer_connections", "must be at least 1".into());
        }
        let given = [
            ("peer_tls_cert", self.peer_tls_cert.is_some()),
            ("peer_tls_key", self.peer_tls_key.is_some()),
            ("peer_tls_ca", self.peer_tls_ca.is_some()),
        ];
        let set = given.iter().filter(|(_, on)| *on).count();
        if set > 0 && set < given.len() {
            let missing: Vec<_> = given
                .iter()
                .filter(|(_, on)| !on)
                .map(|(k, _)| format!("--{}", k.replace('_', "-")))
                .collect();
            return invalid(
                given
                    .iter()
                    .find(|(_, on)| !on)
                    .map_or("peer_tls_cert", |(k, _)| k),
                format!(
                    "peer TLS needs its certificate, key and CA together: {} missing",
                    missing.join(", ")
                ),
            );
        }
        if set > 0 && self.insecure_peer_plaintext {
            return invalid(
                "insecure_peer_plaintext",
                "conflicts with --peer-tls-cert/--peer-tls-key/--peer-tls-ca: choose one".into(),
            );
        }
        if self.insecure_peer_plaintext && self.tls_mode == TlsMode::Strict {
            return invalid(
                "insecure_peer_plaintext",
                "tls_mode = strict serves no plaintext port, the replication port included: \
                 give the members certificates (--peer-tls-cert, --peer-tls-key, --peer-tls-ca)"
                    .into(),
            );
        }
        if self.is_clustered() && set == 0 && !self.insecure_peer_plaintext {
            return invalid(
                "peer_tls_cert",
                "a cluster member authenticates its peers with mutual TLS: give it \
                 --peer-tls-cert, --peer-tls-key and --peer-tls-ca (`eddy cluster certs` writes \
                 them), or --insecure-peer-plaintext on a trusted, isolated network"
                    .into(),
            );
        }
        Ok(())
    }

    /// Whether the replication port runs mutual TLS.
    pub fn peer_tls_enabled(&self) -> bool {
        self.peer_tls_cert.is_some() && self.peer_tls_key.is_some() && self.peer_tls_ca.is_some()
    }

    /// Whether this node is a member of a cluster (it has peers, or is a cluster of one).
    pub fn is_clustered(&self) -> bool {
        self.cluster || !self.peers.is_empty()
    }

    /// The other members, parsed and checked (distinct ids, none equal to `node_id`).
    pub fn cluster_peers(&self) -> Result<Vec<PeerSpec>, ConfigError> {
        let invalid = |key, reason: String| Err(ConfigError::Invalid { key, reason });
        if self.node_id == 0 {
            return invalid("node_id", "node ids start at 1".into());
        }
        if self.join && self.peers.is_empty() {
            return invalid(
                "join",
                "a joining member asks the --peer members for the cluster it joins: name them"
                    .into(),
            );
        }
        if self.raft_event_compact_entries < 16 {
            return invalid(
                "raft_event_compact_entries",
                format!("{} is below 16", self.raft_event_compact_entries),
            );
        }
        if !(1..=MAX_RAFT_TICK_MS).contains(&self.raft_tick_ms) {
            return invalid(
                "raft_tick_ms",
                format!("{} is outside 1..={MAX_RAFT_TICK_MS}", self.raft_tick_ms),
            );
        }
        if self.advertise_host.as_deref().is_some_and(str::is_empty) {
            return invalid("advertise_host", "must not be empty".into());
        }
        let mut peers: Vec<PeerSpec> = Vec::with_capacity(self.peers.len());
        for spec in &self.peers {
            let peer: PeerSpec = match spec.parse() {
                Ok(p) => p,
                Err(reason) => return invalid("peers", reason),
            };
            if peer.id == self.node_id {
                return invalid(
                    "peers",
                    format!("{spec:?} names this node's own id {}", self.node_id),
                );
            }
            if peers.iter().any(|p| p.id == peer.id) {
                return invalid("peers", format!("node id {} is listed twice", peer.id));
            }
            peers.push(peer);
        }
        if peers.len() + 1 > MAX_CLUSTER_MEMBERS {
            return invalid(
                "peers",
                format!("a cluster has at most {MAX_CLUSTER_MEMBERS} members"),
            );
        }
        Ok(peers)
    }

    /// The host clients are told to reach this node on.
    pub fn advertised_host(&self) -> String {
        self.advertise_host
            .clone()
            .unwrap_or_else(|| self.host.to_string())
    }

    /// The event-protocol rules.
    fn validate_event(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: String| Err(ConfigError::Invalid { key, reason });
        if !(MIN_MAX_REQUEST_SIZE..=MAX_MAX_REQUEST_SIZE).contains(&self.max_response_size) {
            return invalid(
                "max_response_size",
                format!(
                    "{} is outside {MIN_MAX_REQUEST_SIZE}..={MAX_MAX_REQUEST_SIZE}",
                    self.max_response_size
                ),
            );
        }
        if self.client_connection_timeout_ms == 0 {
            return invalid("client_connection_timeout_ms", "must be at least 1".into());
        }
        if self.max_watch_subscribers == 0 {
            return invalid("max_watch_subscribers", "must be at least 1".into());
        }
        if !(1..=MAX_LIST_PAGE_SIZE).contains(&self.list_page_size) {
            return invalid(
                "list_page_size",
                format!(
                    "{} is outside 1..={MAX_LIST_PAGE_SIZE}",
                    self.list_page_size
                ),
            );
        }
        if let Some(n) = self.num_shards {
            if !(1..=MAX_NUM_SHARDS).contains(&n) {
                return invalid("num_shards", format!("{n} is outside 1..={MAX_NUM_SHARDS}"));
            }
            if self.reserve_coordinator_shard && n < 2 {
                return invalid(
                    "reserve_coordinator_shard",
                    "needs num_shards of at least 2".into(),
                );
            }
        }
        if !(1..=MAX_MAX_SCHEMA_SIZE_BYTES).contains(&self.max_schema_size_bytes) {
            return invalid(
                "max_schema_size_bytes",
                format!(
                    "{} is outside 1..={MAX_MAX_SCHEMA_SIZE_BYTES}",
                    self.max_schema_size_bytes
                ),
            );
        }
        if self.compaction_check_interval_secs == 0 {
            return invalid(
                "compaction_check_interval_secs",
                "must be at least 1".into(),
            );
        }
        if !(0.0..=1.0).contains(&self.compaction_min_reclaimable_ratio) {
            return invalid(
                "compaction_min_reclaimable_ratio",
                format!("{} is outside 0..=1", self.compaction_min_reclaimable_ratio),
            );
        }
        if !(MIN_SHARD_LOG_SEGMENT_BYTES..=MAX_SHARD_LOG_SEGMENT_BYTES)
            .contains(&self.shard_log_segment_bytes)
        {
            return invalid(
                "shard_log_segment_bytes",
                format!(
                    "{} is outside {MIN_SHARD_LOG_SEGMENT_BYTES}..={MAX_SHARD_LOG_SEGMENT_BYTES}",
                    self.shard_log_segment_bytes
                ),
            );
        }
        if self.fsync_delay_us > MAX_FSYNC_DELAY_US {
            return invalid(
                "fsync_delay_us",
                format!("{} is above {MAX_FSYNC_DELAY_US}", self.fsync_delay_us),
            );
        }
        Ok(())
    }

    fn encryption_key_bytes(&self) -> Option<[u8; eddy_log::cipher::KEY_LEN]> {
        use base64::Engine as _;
        let key = self.encryption_key.as_deref()?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(key.trim())
            .ok()?;
        bytes.try_into().ok()
    }

    /// The at-rest cipher of `encryption_key` (`None` when encryption is off). Call after
    /// [`ServerConfig::validate`].
    pub fn cipher(&self) -> Option<eddy_log::Cipher> {
        self.encryption_key_bytes()
            .map(|key| eddy_log::Cipher::new(&key))
    }

    /// The server key as the wrapper of streams' own keys (`None` when encryption is off).
    pub fn stream_key_wrapper(&self) -> Option<crate::stream::stream_keys::ServerKey> {
        self.encryption_key_bytes()
            .map(|key| crate::stream::stream_keys::ServerKey::new(&key))
    }

    /// The chooser of each stream's partition cipher: the stream's own key when it has one.
    pub fn stream_ciphers(&self) -> Option<eddy_stream_store::StreamCiphers> {
        let wrapper = self.stream_key_wrapper()?;
        Some(eddy_stream_store::StreamCiphers(std::sync::Arc::new(
            move |stream_id, stored: &[u8]| wrapper.partition_cipher(stream_id, stored),
        )))
    }

    /// True while the root password is the published default.
    pub fn uses_default_root_password(&self) -> bool {
        self.root_password == DEFAULT_ROOT_PASSWORD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_documented_values() {
        let c = ServerConfig::default();
        c.validate().unwrap();
        assert_eq!(c.stream_port, 8090);
        assert_eq!(c.client_port, 10_000);
        assert_eq!(c.replication_port, 10_001);
        assert_eq!(c.http_port, 10_002);
        assert_eq!(c.data_dir, PathBuf::from("./eddy-data"));
        assert_eq!(c.max_request_size, 16 * 1024 * 1024);
        assert_eq!(c.max_response_size, 64 * 1024 * 1024);
        assert_eq!(c.client_connection_timeout_ms, 30_000);
        assert_eq!(c.max_requested_latency_ms, 2_000);
        assert_eq!(c.max_watch_subscribers, 16_384);
        assert_eq!(c.list_page_size, 2_000);
        assert_eq!(c.max_schema_size_bytes, 16_384);
        assert_eq!(c.num_shards, None);
        assert_eq!(c.routing_rule, RoutingRule::AggregateId);
        assert!(c.uses_default_root_password());
        assert!(!c.allow_default_root_password);
        assert_eq!(c.max_connections_per_ip, None);
        assert_eq!(c.max_connections_per_ip_exempt, ["127.0.0.0/8", "::1"]);
        assert_eq!(c.max_inflight_request_bytes, 256 * 1024 * 1024);
    }

    #[test]
    fn file_with_unknown_key_is_refused() {
        let err = toml::from_str::<ServerConfig>("data_dirr = \"x\"").unwrap_err();
        assert!(err.to_string().contains("data_dirr"), "{err}");
    }

    #[test]
    fn partial_file_keeps_defaults() {
        let c: ServerConfig = toml::from_str("stream_port = 9000\ntls_mode = \"strict\"").unwrap();
        assert_eq!(c.stream_port, 9000);
        assert_eq!(c.tls_mode, TlsMode::Strict);
        assert_eq!(c.client_port, DEFAULT_CLIENT_PORT);
    }

    #[test]
    fn range_and_cross_field_rules() {
        let mut c = ServerConfig {
            wal_compression_level: 0,
            ..ServerConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Invalid {
                key: "wal_compression_level",
                ..
            })
        ));
        c.wal_compression_level = 3;
        c.client_port = c.stream_port;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Invalid {
                key: "stream_port",
                ..
            })
        ));
        c.client_port = DEFAULT_CLIENT_PORT;
        c.require_client_identity = true;
        assert!(c.validate().is_err());
        c.insecure_allow_plaintext_auth = true;
        c.validate().unwrap();
        c.tls_mode = TlsMode::Strict;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Invalid {
                key: "tls_cert",
                ..
            })
        ));
        c.tls_cert = Some("cert.pem".into());
        c.tls_key = Some("key.pem".into());
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Invalid {
                key: "tls_ca_cert",
                ..
            })
        ));
        c.tls_client_auth = TlsClientAuth::None;
        c.validate().unwrap();
    }

    #[test]
    fn event_limits_are_checked() {
        let bad = [
            ServerConfig {
                max_response_size: 10,
                ..ServerConfig::default()
            },
            ServerConfig {
                list_page_size: 0,
                ..ServerConfig::default()
            },
            ServerConfig {
                num_shards: Some(0),
                ..ServerConfig::default()
            },
            ServerConfig {
                num_shards: Some(1),
                reserve_coordinator_shard: true,
                ..ServerConfig::default()
            },
            ServerConfig {
                client_connection_timeout_ms: 0,
                ..ServerConfig::default()
            },
            ServerConfig {
                compaction_check_interval_secs: 0,
                ..ServerConfig::default()
            },
            ServerConfig {
                compaction_min_reclaimable_ratio: 1.5,
                ..ServerConfig::default()
            },
            ServerConfig {
                compaction_min_reclaimable_ratio: f64::NAN,
                ..ServerConfig::default()
            },
            ServerConfig {
                shard_log_segment_bytes: 1024,
                ..ServerConfig::default()
            },
            ServerConfig {
                fsync_delay_us: MAX_FSYNC_DELAY_US + 1,
                ..ServerConfig::default()
            },
            ServerConfig {
                max_schema_size_bytes: MAX_MAX_SCHEMA_SIZE_BYTES + 1,
                ..ServerConfig::default()
            },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
        let c: ServerConfig = toml::from_str("routing_rule = \"org_id\"\nnum_shards = 4").unwrap();
        assert_eq!(c.routing_rule, RoutingRule::OrgId);
        c.validate().unwrap();
    }

    #[test]
    fn cluster_members_are_checked() {
        let peer: PeerSpec = "2=127.0.0.2:10001".parse().unwrap();
        assert_eq!(
            peer,
            PeerSpec {
                id: 2,
                host: "127.0.0.2".into(),
                port: 10_001
            }
        );
        let v6: PeerSpec = "3=[::1]:7".parse().unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 7));
        for bad in ["2", "0=h:1", "x=h:1", "2=h", "2=:1", "2=h:99999"] {
            assert!(bad.parse::<PeerSpec>().is_err(), "{bad} accepted");
        }
        let ok = ServerConfig {
            node_id: 1,
            peers: vec!["2=a:1".into(), "3=b:1".into()],
            insecure_peer_plaintext: true,
            ..ServerConfig::default()
        };
        ok.validate().unwrap();
        assert!(ok.is_clustered());
        assert_eq!(ok.cluster_peers().unwrap().len(), 2);
        // A cluster of one: a member without peers, which authenticates the members it will
        // be given like any other.
        let alone = ServerConfig {
            cluster: true,
            insecure_peer_plaintext: true,
            ..ServerConfig::default()
        };
        alone.validate().unwrap();
        assert!(alone.is_clustered());
        assert!(alone.cluster_peers().unwrap().is_empty());
        let alone_without_tls = ServerConfig {
            cluster: true,
            ..ServerConfig::default()
        };
        assert!(alone_without_tls.validate().is_err());
        assert!(!ServerConfig::default().is_clustered());
        assert_eq!(ok.advertised_host(), "127.0.0.1");
        for (bad, key) in [
            (vec!["1=a:1".to_owned()], "peers"),
            (vec!["2=a:1".to_owned(), "2=b:1".to_owned()], "peers"),
            (vec!["2".to_owned()], "peers"),
        ] {
            let c = ServerConfig {
                peers: bad,
                ..ServerConfig::default()
            };
            assert!(
                matches!(c.validate(), Err(ConfigError::Invalid { key: k, .. }) if k == key),
                "{c:?}"
            );
        }
        let zero = ServerConfig {
            node_id: 0,
            ..ServerConfig::default()
        };
        assert!(zero.validate().is_err());
        let c: ServerConfig =
            toml::from_str("node_id = 2\npeers = [\"1=a:1\", \"3=b:1\"]\nadvertise_host = \"n2\"\ninsecure_peer_plaintext = true")
                .unwrap();
        c.validate().unwrap();
        assert_eq!(c.advertised_host(), "n2");
    }

    #[test]
    fn log_file_limits_are_checked() {
        for bad in [
            ServerConfig {
                log_max_file_bytes: MIN_LOG_MAX_FILE_BYTES - 1,
                ..ServerConfig::default()
            },
            ServerConfig {
                log_max_files: 0,
                ..ServerConfig::default()
            },
            ServerConfig {
                log_max_files: MAX_LOG_MAX_FILES + 1,
                ..ServerConfig::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        let c: ServerConfig =
            toml::from_str("log_dir = \"/var/log/eddy\"\nlog_rotation = \"daily\"").unwrap();
        assert_eq!(c.log_rotation, LogRotation::Daily);
        assert_eq!(c.log_max_files, DEFAULT_LOG_MAX_FILES);
        c.validate().unwrap();
    }

    #[test]
    fn debug_never_prints_the_password() {
        let c = ServerConfig {
            root_password: "hunter2-secret".into(),
            ..ServerConfig::default()
        };
        assert!(!format!("{c:?}").contains("hunter2"));
        let toml = c.redacted_toml();
        assert!(
            !toml.contains("hunter2") && toml.contains("<redacted>"),
            "{toml}"
        );
        assert!(toml.contains("stream_port = 8090"), "{toml}");
    }

    #[test]
    fn the_encryption_key_is_32_base64_bytes_and_never_shown() {
        // base64 of 32 bytes 0x41 ('A').
        let key = "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=";
        let c = ServerConfig {
            encryption_key: Some(key.into()),
            ..ServerConfig::default()
        };
        c.validate().unwrap();
        assert!(c.cipher().is_some());
        assert!(ServerConfig::default().cipher().is_none());
        assert!(!format!("{c:?}").contains(key), "{c:?}");
        assert!(format!("{c:?}").contains("encryption_key: Some(\"<redacted>\")"));
        let toml = c.redacted_toml();
        assert!(!toml.contains(key), "{toml}");
        for bad in [
            "",
            "not base64!",
            "QUFB",
            "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQQ==",
        ] {
            let c = ServerConfig {
                encryption_key: Some(bad.into()),
                ..ServerConfig::default()
            };
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains("encryption_key"), "{err}");
            assert!(bad.is_empty() || !err.contains(bad), "{err}");
        }
    }
}
