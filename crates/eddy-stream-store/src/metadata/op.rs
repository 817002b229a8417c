//! The metadata operation: ordered, serialisable, with every id and timestamp chosen before
//! it is committed. Its bincode encoding is the metadata log's record format: variants and
//! fields are never reordered.

use serde::{Deserialize, Serialize};

use crate::partition::PartitionAddr;

use super::records::{ConsumerKey, TopicConfig};

/// An ordered, serialisable metadata operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum MetadataOp {
    /// Creates a stream.
    CreateStream {
        /// Id (must be free).
        id: u32,
        /// Name (must be unused).
        name: String,
        /// Creation time.
        created_at: u64,
        /// Options block.
        options: Vec<u8>,
    },
    /// Renames a stream / replaces its options.
    UpdateStream {
        /// Id.
        id: u32,
        /// New name.
        name: String,
        /// New options block.
        options: Vec<u8>,
    },
    /// Deletes a stream and everything in it.
    DeleteStream {
        /// Id.
        id: u32,
    },
    /// Empties every partition of every topic of the stream.
    PurgeStream {
        /// Id.
        id: u32,
    },
    /// Creates a topic with partitions `0..partitions`.
    CreateTopic {
        /// Stream id.
        stream_id: u32,
        /// Topic id (must be free).
        id: u32,
        /// Name (unique in the stream).
        name: String,
        /// Creation time.
        created_at: u64,
        /// Number of partitions.
        partitions: u32,
        /// Resolved storage options.
        config: TopicConfig,
        /// Options as sent.
        explicit_options: Vec<u8>,
        /// Defaults filled in.
        derived_options: Vec<u8>,
    },
    /// Updates a topic's name and its updatable options.
    UpdateTopic {
        /// Stream id.
        stream_id: u32,
        /// Topic id.
        topic_id: u32,
        /// New name.
        name: String,
        /// New expiry.
        message_expiry: Option<u64>,
        /// New size cap.
        max_topic_size: Option<u64>,
        /// New compression code.
        compression_algorithm: u8,
        /// New replication factor.
        replication_factor: u8,
        /// New explicit options block.
        explicit_options: Vec<u8>,
    },
    /// Deletes a topic.
    DeleteTopic {
        /// Stream id.
        stream_id: u32,
        /// Topic id.
        topic_id: u32,
    },
    /// Empties every partition of a topic.
    PurgeTopic {
        /// Stream id.
        stream_id: u32,
        /// Topic id.
        topic_id: u32,
    },
    /// Adds `count` partitions after the highest id.
    CreatePartitions {
        /// Stream id.
        stream_id: u32,
        /// Topic id.
        topic_id: u32,
        /// How many.
        count: u32,
        /// Creation time.
        created_at: u64,
    },
    /// Removes the `count` highest-numbered partitions.
    DeletePartitions {
        /// Stream id.
        stream_id: u32,
        /// Topic id.
        topic_id: u32,
        /// How many.
        count: u32,
    },
    /// Creates a user.
    CreateUser {
        /// Id (must be free).
        id: u32,
        /// Username (unique).
        username: String,
        /// Password hash.
        password_hash: String,
        /// Status code.
        status: u8,
        /// Permissions.
        permissions: Option<Vec<u8>>,
        /// Options block.
        options: Vec<u8>,
        /// Creation time.
        created_at: u64,
    },
    /// Updates a user's username, status or options (absent fields keep their value).
    UpdateUser {
        /// Id.
        id: u32,
        /// New username.
        username: Option<String>,
        /// New status.
        status: Option<u8>,
        /// New options block.
        options: Option<Vec<u8>>,
    },
    /// Replaces a user's password hash.
    ChangePassword {
        /// Id.
        id: u32,
        /// New hash.
        password_hash: String,
    },
    /// Replaces a user's permissions.
    UpdatePermissions {
        /// Id.
        id: u32,
        /// New permissions.
        permissions: Option<Vec<u8>>,
    },
    /// Deletes a user (and its tokens).
    DeleteUser {
        /// Id.
        id: u32,
    },
    /// Creates a personal access token.
    CreateToken {
        /// Owner.
        user_id: u32,
        /// Name (unique per user).
        name: String,
        /// Hash of the raw token.
        token_hash: String,
        /// Absolute expiry.
        expiry_at: Option<u64>,
    },
    /// Deletes a personal access token.
    DeleteToken {
        /// Owner.
        user_id: u32,
        /// Name.
        name: String,
    },
    /// Creates a consumer group.
    CreateConsumerGroup {
        /// Stream id.
        stream_id: u32,
        /// Topic id.
        topic_id: u32,
        /// Group id (must be at least the topic's `next_group_id`).
        id: u32,
        /// Name (unique in the topic).
        name: String,
        /// Creation time.
        created_at: u64,
    },
    /// Deletes a consumer group and its offsets.
    DeleteConsumerGroup {
        /// Stream id.
        stream_id: u32,
        /// Topic id.
        topic_id: u32,
        /// Group id.
        group_id: u32,
    },
    /// Stores a consumer offset.
    StoreConsumerOffset {
        /// The partition.
        addr: PartitionAddr,
        /// Whose offset.
        consumer: ConsumerKey,
        /// The offset.
        offset: u64,
        /// Never move the offset backwards (poll auto-commit); explicit stores may rewind.
        forward_only: bool,
    },
    /// Deletes a consumer offset.
    DeleteConsumerOffset {
        /// The partition.
        addr: PartitionAddr,
        /// Whose offset.
        consumer: ConsumerKey,
    },
    /// A [`MetadataOp::CreateTopic`] or [`MetadataOp::CreatePartitions`] whose new partitions
    /// live on `replicas` (cluster member ids): the founding voters of each new partition's
    /// replication group, the same on every member because the operation carries them.
    /// A partition created without this (a single node, or a cluster's log from before it)
    /// lives on the cluster's founding members.
    Placed {
        /// The members the new partitions are founded on (1 to [`super::MAX_REPLICAS`],
        /// distinct).
        replicas: Vec<u64>,
        /// The creating operation.
        op: Box<MetadataOp>,
    },
    /// Records a cluster member and the address of its replication port (a new member, or
    /// one that moved). Members are in the metadata so that every member agrees on who may
    /// speak on the replication port and where to reach it, whatever its `--peer` flags say.
    SetMember {
        /// Member id.
        id: u64,
        /// Its replication address (`host:port`, 1 to [`super::MAX_NAME_LEN`] bytes).
        address: String,
    },
    /// Forgets a cluster member (it was removed from every group).
    RemoveMember {
        /// Member id.
        id: u64,
    },
}
