//! The event (Celeriant) protocol port: connection lifecycle, the Identify handshake, the
//! cluster dictionary, routing, and dispatch of every client-port request.
//!
//! # One connection
//!
//! ```text
//!  accept ─► (TLS) ─► first frame ─┬─ Identify ──► verify ──ok──► IdentifyResponse (16), dict ✓
//!                                  │                  └─err─► ErrorResponse (10001/2/5/6), close
//!                                  ├─ other, --require-client-identity ─► 10004, close
//!                                  └─ other ─► request loop
//!  request loop: read one frame (deadline: client_connection_timeout_ms) ─► decode
//!      ─► route (9001/9002) ─► mutation checks (10003, 10007) ─► execute ─► one response
//!      Watch: empty WatchResponse at once, then pushes only; any inbound byte ends it.
//! ```
//!
//! Invariants:
//! - one request at a time: a response is written before the next frame is read;
//! - every response except Watch pushes echoes the request's `correlation_id` (errors too);
//! - a frame that cannot be parsed (version, type, size caps, compression, body) is never
//!   answered: the connection closes, and only that connection;
//! - the protocol version is pinned by the first frame and every response uses it;
//! - responses are compressed only after a successful Identify, only Read/Watch/List bodies
//!   of at least 1024 bytes; fixed-size responses always fit 1007 bytes (error messages are
//!   truncated by the codec).

mod codecs;
mod connection;
mod exec;
pub(crate) use exec::answer_forwarded;
pub(crate) mod identify;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use eddy_event_store::{
    EventStore, EventStoreConfig, EventStoreError, EventStoreRecovery, Placement, Refusal,
};
use eddy_log::{
    write_atomic, Cache, CommitPool, FsBackend, IoOp, LogError, OpenMode, StorageBackend,
};
use eddy_wire::event::{Dictionary, DictionaryError, FrameLimits, RequestType};

use crate::config::{FsyncDelayWhen, ServerConfig};
use crate::listener::{Conn, ConnectionContext};
pub use codecs::CodecPool;

/// Event-protocol request type names, in the order `Metrics::record_request` indexes them
/// ([`metric_index`]). Registered at start-up so every series exists from the first scrape.
pub const METRIC_NAMES: &[&str] = &[
    "aggregate_details",
    "read",
    "write",
    "trim_start",
    "delete",
    "watch",
    "list_orgs",
    "list_aggregate_types",
    "list_aggregates",
    "register_schema",
    "identify",
];

/// The index of a request type in [`METRIC_NAMES`].
pub fn metric_index(kind: RequestType) -> usize {
    match kind {
        RequestType::AggregateDetails => 0,
        RequestType::Read => 1,
        RequestType::Write => 2,
        RequestType::TrimStart => 3,
        RequestType::Delete => 4,
        RequestType::Watch => 5,
        RequestType::ListOrgs => 6,
        RequestType::ListAggregateTypes => 7,
        RequestType::ListAggregates => 8,
        RequestType::RegisterSchema => 9,
        RequestType::Identify => 10,
    }
}

/// Why the event protocol could not be set up (a start-up error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventSetupError {
    /// The dictionary file cannot be read or written.
    #[error("cannot access the zstd dictionary {path}")]
    DictionaryIo {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The built-in dictionary cannot be written on first boot.
    #[error("cannot write the zstd dictionary {path}")]
    DictionaryWrite {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: LogError,
    },
    /// The dictionary file holds no usable zstd dictionary.
    #[error("{path} is not a usable zstd dictionary")]
    DictionaryInvalid {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: DictionaryError,
    },
}

/// Loads the cluster dictionary from `path`; on first boot (no file) writes the built-in one
/// there first, atomically and durably (temp file, fdatasync, rename, fsync of the data
/// directory), so the dictionary a data directory was created with never changes under it.
pub fn load_dictionary(path: &Path, level: i32) -> Result<Dictionary, EventSetupError> {
    let io = |source| EventSetupError::DictionaryIo {
        path: path.to_path_buf(),
        source,
    };
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(io(std::io::ErrorKind::InvalidInput.into()));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let fs = FsBackend::new(dir).map_err(io)?;
    load_dictionary_from(&fs, name, path, level)
}

/// [`load_dictionary`] on any storage backend: the file `name` in the backend's root (errors
/// name it `shown`).
pub fn load_dictionary_from(
    backend: &dyn StorageBackend,
    name: &str,
    shown: &Path,
    level: i32,
) -> Result<Dictionary, EventSetupError> {
    let io = |source| EventSetupError::DictionaryIo {
        path: shown.to_path_buf(),
        source,
    };
    let bytes = match backend.open(Path::new(name), OpenMode::Existing) {
        Ok(file) => {
            let len = file.len().map_err(io)?;
            let len =
                usize::try_from(len).map_err(|_| io(std::io::ErrorKind::InvalidData.into()))?;
            let mut bytes = vec![0u8; len];
            file.read_at(0, &mut bytes).map_err(io)?;
            bytes
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let bytes = eddy_wire::event::BUILTIN_DICTIONARY_BYTES.to_vec();
            write_atomic(backend, Path::new(""), name, &bytes).map_err(|source| {
                EventSetupError::DictionaryWrite {
                    path: shown.to_path_buf(),
                    source,
                }
            })?;
            tracing::info!(path = %shown.display(), "wrote the built-in zstd dictionary");
            bytes
        }
        Err(e) => return Err(io(e)),
    };
    Dictionary::from_bytes(bytes, level).map_err(|source| EventSetupError::DictionaryInvalid {
        path: shown.to_path_buf(),
        source,
    })
}

/// Shard count when none is configured and no store exists yet: the CPU count.
pub fn default_num_shards() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(1))
}

/// Zeros a single node's event shard log writes ahead of its records, a mebibyte at a time, so
/// the fdatasync of a group writes the group's blocks and no new file size (on ext4 without a
/// journal that is one synchronous device write less per fdatasync). Measured with the load
/// generator (`eddy bench events`, A/B in one command, 2-core VM): 1.21x the writes/s at one
/// connection, 1.39-1.42x at ten; see docs/ARCHITECTURE.md.
pub const SHARD_LOG_PREALLOCATE: u64 = 1 << 20;

/// How many records, or bytes, a cluster member's event shard log may hold unsynced before it
/// syncs (it also syncs at every roll): what a restarted member applies again at most.
const CLUSTER_SHARD_UNSYNCED: (u64, u64) = (4096, 8 << 20);

/// The event store's configuration from the server's (`num_shards` to be chosen by the
/// caller).
///
/// A cluster member's shard logs complete writes before their fdatasync: an entry is applied
/// only once the shard group's Raft log holds it durably here (and on a majority), so the
/// record the apply writes is already recoverable from that log, and a restarted member
/// applies again every entry after the last record its shard log kept
/// (`EventStore::replicated_through`). One fdatasync per write instead of two.
pub fn store_config(config: &ServerConfig, num_shards: u32, dictionary: &[u8]) -> EventStoreConfig {
    let durability = if config.is_clustered() {
        eddy_log::Durability::Background {
            max_unsynced_records: CLUSTER_SHARD_UNSYNCED.0,
            max_unsynced_bytes: CLUSTER_SHARD_UNSYNCED.1,
        }
    } else {
        eddy_log::Durability::Fsync
    };
    EventStoreConfig {
        durability,
        num_shards,
        routing_rule: config.routing_rule,
        reserve_coordinator_shard: config.reserve_coordinator_shard,
        compression_level: config.wal_compression_level,
        dictionary: Some(bytes::Bytes::copy_from_slice(dictionary)),
        max_subscribers_per_shard: config.max_watch_subscribers as usize,
        segment_size: config.shard_log_segment_bytes,
        fsync_delay: Duration::from_micros(config.fsync_delay_us),
        // A single node's shard log is what makes a write durable: its fdatasyncs are the
        // acknowledgements' (a member's shard log syncs in the background).
        preallocate: if config.is_clustered() {
            0
        } else {
            SHARD_LOG_PREALLOCATE
        },
        fsync_delay_gate: match config.fsync_delay_when {
            FsyncDelayWhen::Busy => Some(crate::cpu::saturation_gate()),
            FsyncDelayWhen::Always => None,
        },
        max_schema_bytes: config.max_schema_size_bytes as usize,
        cipher: config.cipher(),
        ..EventStoreConfig::default()
    }
}

/// Opens (or creates) the event store under `<data_dir>/events`, with the cluster
/// dictionary, on the engine's commit pool and cache. With `num_shards` unset, an existing
/// store keeps its shard count and a new one gets one shard per CPU; a configured count must
/// match the stored one.
pub fn open_store(
    config: &ServerConfig,
    data_root: &Path,
    dictionary: &[u8],
    pool: &CommitPool,
    cache: &Arc<Cache>,
) -> Result<(EventStore, EventStoreRecovery), EventStoreError> {
    let backend = Arc::new(
        FsBackend::new(data_root).map_err(|source| LogError::io(IoOp::Open, data_root, source))?,
    );
    let asked = config.num_shards.unwrap_or_else(default_num_shards);
    let open = |num_shards| {
        EventStore::open_shared(
            Arc::clone(&backend) as _,
            store_config(config, num_shards, dictionary),
            pool,
            Arc::clone(cache),
        )
    };
    match open(asked) {
        Err(EventStoreError::Refused(Refusal::ImmutableConfig {
            field: "num_shards",
            stored,
            ..
        })) if config.num_shards.is_none() => open(u32::try_from(stored).unwrap_or(u32::MAX)),
        other => other,
    }
}

/// Event-protocol state shared by every connection of the client port.
#[derive(Debug)]
pub struct EventService {
    codecs: CodecPool,
    request_limits: FrameLimits,
    max_response_size: u64,
    timeout: Duration,
    store: Arc<EventStore>,
    list_page: usize,
    read_page_bytes: u64,
    max_requested_latency_ms: u64,
    /// Event bytes submitted to the store and not yet acknowledged.
    in_flight: crate::offload::InFlight,
    /// A cluster member: changes go through the shards' replicated groups (set once the
    /// member runs; until then changes are refused with the not-leader codes).
    clustered: bool,
    cluster: std::sync::OnceLock<crate::cluster::events::ClusterEvents>,
}

impl EventService {
    /// Sets the protocol up for `config` over an opened store and its dictionary.
    pub fn new(config: &ServerConfig, dictionary: Dictionary, store: Arc<EventStore>) -> Self {
        Self {
            codecs: CodecPool::new(Arc::new(dictionary)),
            request_limits: FrameLimits::new(u64::from(config.max_request_size)),
            max_response_size: u64::from(config.max_response_size),
            timeout: Duration::from_millis(config.client_connection_timeout_ms),
            store,
            clustered: config.is_clustered(),
            list_page: config.list_page_size as usize,
            // Encoded batches cost a little more than stored ones; a quarter of the response
            // cap leaves ample room, and the store's own page bound applies on top.
            read_page_bytes: (u64::from(config.max_response_size) / 4)
                .clamp(1, eddy_event_store::DEFAULT_READ_MAX_BYTES),
            max_requested_latency_ms: config.max_requested_latency_ms,
            in_flight: crate::offload::InFlight::default(),
            cluster: std::sync::OnceLock::new(),
        }
    }

    /// Hands the service its cluster member's replicated event store (once).
    pub fn set_cluster(&self, events: crate::cluster::events::ClusterEvents) {
        let _ = self.cluster.set(events);
    }

    /// The replicated request path: `Some` on a cluster member (`Err` until it runs), `None`
    /// on a single node.
    pub(crate) fn cluster(
        &self,
    ) -> Option<
        Result<&crate::cluster::events::ClusterEvents, eddy_replicated::shard::EventClusterError>,
    > {
        self.clustered.then(|| {
            self.cluster
                .get()
                .ok_or(eddy_replicated::shard::EventClusterError::NotLeader {
                    leader_address: None,
                })
        })
    }

    /// The event store.
    pub fn store(&self) -> &Arc<EventStore> {
        &self.store
    }

    /// The cluster dictionary.
    pub fn dictionary(&self) -> &Arc<Dictionary> {
        self.codecs.dictionary()
    }

    /// The shard layout (the store's).
    pub fn placement(&self) -> &Placement {
        self.store.placement()
    }
}

/// Serves one event-protocol connection until the client leaves, a frame cannot be parsed,
/// the idle deadline passes, an error that closes is sent, or the server drains.
pub async fn serve_connection(socket: Conn, ctx: ConnectionContext) {
    connection::Connection::new(socket, ctx).run().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_members_shard_logs_sync_in_the_background_and_a_single_nodes_before_acking() {
        let single = ServerConfig::default();
        assert_eq!(
            store_config(&single, 2, b"d").durability,
            eddy_log::Durability::Fsync
        );
        let member = ServerConfig {
            node_id: 1,
            peers: vec!["2=a:1".into(), "3=b:1".into()],
            ..ServerConfig::default()
        };
        assert!(matches!(
            store_config(&member, 2, b"d").durability,
            eddy_log::Durability::Background { .. }
        ));
    }

    #[test]
    fn the_dictionary_written_on_first_boot_survives_a_crash() {
        let disk = eddy_log::MemBackend::new();
        let name = "dictionary.zstd_dict";
        let shown = Path::new("data").join(name);
        let first = load_dictionary_from(&disk, name, &shown, 3).unwrap();
        // Power cut right after the first boot wrote it: the file (its bytes and its entry in
        // the data directory) is still there, so the next boot loads it rather than writing
        // whatever built-in dictionary that build has.
        disk.crash();
        assert_eq!(
            disk.read_file(Path::new(name)).as_deref(),
            Some(eddy_wire::event::BUILTIN_DICTIONARY_BYTES)
        );
        let again = load_dictionary_from(&disk.clone(), name, &shown, 3).unwrap();
        assert_eq!(again.bytes(), first.bytes());
    }

    #[test]
    fn metric_names_cover_every_request_type_once() {
        assert_eq!(METRIC_NAMES.len(), RequestType::ALL.len());
        let mut seen: Vec<usize> = RequestType::ALL.iter().map(|t| metric_index(*t)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), METRIC_NAMES.len());
    }

    #[test]
    fn first_boot_writes_the_builtin_dictionary_then_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dictionary.zstd_dict");
        let d = load_dictionary(&path, 3).unwrap();
        assert_eq!(d.bytes(), eddy_wire::event::BUILTIN_DICTIONARY_BYTES);
        assert_eq!(std::fs::read(&path).unwrap(), d.bytes());
        let again = load_dictionary(&path, 3).unwrap();
        assert_eq!(again.sha256_hex(), d.sha256_hex());
        std::fs::write(&path, b"not a dictionary").unwrap();
        assert!(matches!(
            load_dictionary(&path, 3),
            Err(EventSetupError::DictionaryInvalid { .. })
        ));
    }
}
