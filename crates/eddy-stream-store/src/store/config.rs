//! The stream store's configuration, and the log configurations it derives for the metadata
//! log and for each partition.

use eddy_log::{
    Cipher, Durability, LogConfig, VerifyOnOpen, DEFAULT_CACHE_BYTES, DEFAULT_INDEX_INTERVAL,
    DEFAULT_MAX_GROUP_BYTES, DEFAULT_PREALLOCATE,
};

use crate::metadata::TopicConfig;
use crate::partition::PartitionConfig;

/// Store-wide configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStoreConfig {
    /// Writer threads of the commit pool.
    pub pool_threads: usize,
    /// Byte budget of the shared cache (sealed-segment indexes and handles).
    pub cache_bytes: u64,
    /// Distance between sparse index entries.
    pub index_interval: u64,
    /// Recovery verification depth.
    pub verify_on_open: VerifyOnOpen,
    /// Verify payload checksums on every read.
    pub verify_on_read: bool,
    /// Cut interior corruption away instead of refusing to open.
    pub repair: bool,
    /// Upper bound of one group commit's bytes.
    pub max_group_bytes: u64,
    /// Segment size of the metadata log.
    pub metadata_segment_size: u64,
    /// Write a metadata snapshot every this many operations.
    pub snapshot_every_ops: u64,
    /// Retention never deletes a segment holding offsets above the lowest stored consumer
    /// offset of its partition (Iggy's behaviour; off by default because an abandoned consumer
    /// would pin the disk forever).
    pub retention_respects_consumer_offsets: bool,
    /// Encrypt the partitions' stored batches at rest with this key (the metadata log is not
    /// encrypted: it holds names, settings and password hashes, no message).
    pub cipher: Option<Cipher>,
    /// Per-stream keys: chooses the cipher of a stream's partitions instead of `cipher`.
    pub stream_ciphers: Option<StreamCiphers>,
}

/// The signature of [`StreamCiphers`]: a stream's id and stored options to `Ok(Some(key))`
/// (its partitions are sealed with that key), `Ok(None)` (the store's `cipher`) or `Err` (the
/// stream's key cannot be opened: its partitions are not opened either).
pub type StreamCipherFn = dyn Fn(u32, &[u8]) -> Result<Option<Cipher>, String> + Send + Sync;

/// Chooses a partition's cipher from its stream (per-stream encryption keys, which the store
/// keeps opaque in the stream's options). Its `Debug` shows nothing; two handles are equal
/// when they are clones of one handle.
#[derive(Clone)]
pub struct StreamCiphers(pub std::sync::Arc<StreamCipherFn>);

impl std::fmt::Debug for StreamCiphers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamCiphers(..)")
    }
}

impl PartialEq for StreamCiphers {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for StreamCiphers {}

impl StreamStoreConfig {
    /// The cipher of a partition of stream `stream_id` whose stored options are `options`.
    ///
    /// # Errors
    /// The reason the stream's own key cannot be opened.
    pub fn partition_cipher(
        &self,
        stream_id: u32,
        options: &[u8],
    ) -> Result<Option<Cipher>, String> {
        match &self.stream_ciphers {
            Some(choose) => Ok((choose.0)(stream_id, options)?.or_else(|| self.cipher.clone())),
            None => Ok(self.cipher.clone()),
        }
    }
}

impl Default for StreamStoreConfig {
    fn default() -> Self {
        StreamStoreConfig {
            pool_threads: 8,
            cache_bytes: DEFAULT_CACHE_BYTES,
            index_interval: DEFAULT_INDEX_INTERVAL,
            verify_on_open: VerifyOnOpen::Full,
            verify_on_read: true,
            repair: false,
            max_group_bytes: DEFAULT_MAX_GROUP_BYTES,
            metadata_segment_size: 4 * 1024 * 1024,
            snapshot_every_ops: 10_000,
            retention_respects_consumer_offsets: false,
            cipher: None,
            stream_ciphers: None,
        }
    }
}

impl StreamStoreConfig {
    /// The log configuration of a partition of a topic with `topic` options.
    pub fn partition_config(&self, topic: &TopicConfig) -> PartitionConfig {
        PartitionConfig {
            log: LogConfig {
                segment_size: topic.segment_size,
                index_interval: self.index_interval,
                durability: if topic.enforce_fsync {
                    Durability::Fsync
                } else {
                    Durability::Background {
                        max_unsynced_records: u64::from(topic.messages_required_to_save.max(1)),
                        max_unsynced_bytes: topic.size_of_messages_required_to_save.max(1),
                    }
                },
                verify_on_open: self.verify_on_open,
                verify_on_read: self.verify_on_read,
                repair: self.repair,
                max_group_bytes: self.max_group_bytes,
                group_window: std::time::Duration::ZERO,
                preallocate: DEFAULT_PREALLOCATE,
            },
        }
    }

    pub(super) fn metadata_log_config(&self) -> LogConfig {
        LogConfig {
            segment_size: self.metadata_segment_size,
            index_interval: self.index_interval,
            durability: Durability::Fsync,
            verify_on_open: VerifyOnOpen::Full,
            verify_on_read: true,
            repair: self.repair,
            max_group_bytes: self.max_group_bytes,
            group_window: std::time::Duration::ZERO,
            preallocate: DEFAULT_PREALLOCATE,
        }
    }
}
