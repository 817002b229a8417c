//! The metadata records (what the state holds, all `BTreeMap`s for determinism) and the
//! effects an operation has on partition data, plus the lookups the operations share.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::MetadataError;
use crate::partition::PartitionAddr;

/// The storage-relevant options of a topic, resolved (defaults filled in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    /// Delete sealed segments older than this (µs). `None`: never.
    pub message_expiry: Option<u64>,
    /// Cap on the topic's bytes, shared equally by its partitions. `None`: unlimited.
    pub max_topic_size: Option<u64>,
    /// Segment size in bytes.
    pub segment_size: u64,
    /// Acknowledge appends only after fdatasync (eddy's default: true).
    pub enforce_fsync: bool,
    /// Background flush bound in messages when `enforce_fsync` is false.
    pub messages_required_to_save: u32,
    /// Background flush bound in bytes when `enforce_fsync` is false.
    pub size_of_messages_required_to_save: u64,
    /// Preallocate segment files (recorded; eddy does not preallocate).
    pub preallocate_segments: bool,
    /// Compression algorithm code (1 none, 2 gzip).
    pub compression_algorithm: u8,
    /// Replication factor.
    pub replication_factor: u8,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            message_expiry: None,
            max_topic_size: None,
            segment_size: eddy_log::DEFAULT_SEGMENT_SIZE,
            enforce_fsync: true,
            messages_required_to_save: 1024,
            size_of_messages_required_to_save: 1024 * 1024,
            preallocate_segments: false,
            compression_algorithm: 1,
            replication_factor: 1,
        }
    }
}

/// Who a consumer offset belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConsumerKey {
    /// A standalone consumer, by its numeric id.
    Consumer(u32),
    /// A consumer group, by its id.
    Group(u32),
}

/// A stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRecord {
    /// Id.
    pub id: u32,
    /// Name.
    pub name: String,
    /// Creation time (µs).
    pub created_at: u64,
    /// Opaque options block.
    pub options: Vec<u8>,
    /// Topics by id.
    pub topics: BTreeMap<u32, TopicRecord>,
}

/// A topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    /// Id within its stream.
    pub id: u32,
    /// Name.
    pub name: String,
    /// Creation time (µs).
    pub created_at: u64,
    /// Resolved storage options.
    pub config: TopicConfig,
    /// Opaque options block as the client sent it.
    pub explicit_options: Vec<u8>,
    /// Opaque options block of defaults filled in at creation.
    pub derived_options: Vec<u8>,
    /// Partitions by id.
    pub partitions: BTreeMap<u32, PartitionRecord>,
    /// Consumer groups by id.
    pub groups: BTreeMap<u32, ConsumerGroupRecord>,
    /// The next consumer group id (group ids are never reused within a topic).
    pub next_group_id: u32,
}

/// A partition's metadata (its data lives in its log).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    /// Id within its topic.
    pub id: u32,
    /// Unique id, never reused: names the partition's directory.
    pub uid: u64,
    /// Creation time (µs).
    pub created_at: u64,
    /// Bumped by every purge.
    pub purge_generation: u64,
    /// Stored consumer offsets.
    pub offsets: BTreeMap<ConsumerKey, u64>,
}

/// A consumer group (its members are sessions, which are not durable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroupRecord {
    /// Id within its topic.
    pub id: u32,
    /// Name.
    pub name: String,
    /// Creation time (µs).
    pub created_at: u64,
}

/// A user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    /// Id.
    pub id: u32,
    /// Username.
    pub username: String,
    /// Password hash (opaque to storage).
    pub password_hash: String,
    /// Status code (1 active, 2 inactive).
    pub status: u8,
    /// Opaque permissions (`None`: none).
    pub permissions: Option<Vec<u8>>,
    /// Opaque options block.
    pub options: Vec<u8>,
    /// Creation time (µs).
    pub created_at: u64,
    /// Personal access tokens by name.
    pub tokens: BTreeMap<String, TokenRecord>,
}

/// A personal access token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Name (unique per user).
    pub name: String,
    /// Hash of the raw token (opaque to storage).
    pub token_hash: String,
    /// Absolute expiry (µs); `None`: never.
    pub expiry_at: Option<u64>,
}

/// What applying an operation asks the storage layer to do to partition data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Create (open) a partition's log.
    CreatePartition {
        /// Where.
        addr: PartitionAddr,
        /// Its uid.
        uid: u64,
        /// Its topic's options.
        config: TopicConfig,
    },
    /// Delete a partition's data.
    DeletePartition {
        /// Where it was.
        addr: PartitionAddr,
        /// Its uid.
        uid: u64,
    },
    /// Empty a partition.
    PurgePartition {
        /// Where.
        addr: PartitionAddr,
        /// Its uid.
        uid: u64,
        /// The new purge generation.
        generation: u64,
    },
}

/// A stream by id, or [`MetadataError::StreamNotFound`].
pub(super) fn stream_mut(
    streams: &mut BTreeMap<u32, StreamRecord>,
    id: u32,
) -> Result<&mut StreamRecord, MetadataError> {
    streams
        .get_mut(&id)
        .ok_or(MetadataError::StreamNotFound(id))
}

/// A topic by ids, or the refusal naming the missing stream or topic.
pub(super) fn topic_mut(
    streams: &mut BTreeMap<u32, StreamRecord>,
    stream_id: u32,
    topic_id: u32,
) -> Result<&mut TopicRecord, MetadataError> {
    stream_mut(streams, stream_id)?
        .topics
        .get_mut(&topic_id)
        .ok_or(MetadataError::TopicNotFound {
            stream_id,
            topic_id,
        })
}

/// A partition by address, or the refusal naming what is missing.
pub(super) fn partition_mut(
    streams: &mut BTreeMap<u32, StreamRecord>,
    addr: PartitionAddr,
) -> Result<&mut PartitionRecord, MetadataError> {
    topic_mut(streams, addr.stream_id, addr.topic_id)?
        .partitions
        .get_mut(&addr.partition_id)
        .ok_or(MetadataError::PartitionNotFound {
            stream_id: addr.stream_id,
            topic_id: addr.topic_id,
            partition_id: addr.partition_id,
        })
}

/// A user by id, or [`MetadataError::UserNotFound`].
pub(super) fn user_mut(
    users: &mut BTreeMap<u32, UserRecord>,
    id: u32,
) -> Result<&mut UserRecord, MetadataError> {
    users.get_mut(&id).ok_or(MetadataError::UserNotFound(id))
}
