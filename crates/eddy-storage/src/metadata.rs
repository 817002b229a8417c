//! Metadata: streams, topics, partitions, options, users, personal access tokens, consumer
//! groups and consumer offsets, as a deterministic state machine over ordered operations.
//!
//! [`MetadataOp`] is the serialisable operation (serde + bincode, fixed-width little-endian);
//! [`MetadataState::apply`] validates and applies one, returning the storage [`Effect`]s it
//! implies (partitions to create, delete or purge). Apply is deterministic: it reads nothing
//! but the state and the operation (every id and timestamp is in the operation, except the
//! internal partition uids, which come from a counter in the state), and every map is a
//! `BTreeMap`, so every replica applying the same operations in the same order reaches the same
//! state and rejects the same operations.
//!
//! Option blocks, permissions and credential hashes are stored as opaque bytes or strings: their
//! encodings belong to the codec and auth layers. The storage-relevant topic options are kept
//! resolved in [`TopicConfig`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Entity, MetadataError};
use crate::partition::PartitionAddr;

/// Longest name (stream, topic, user, token, group) accepted, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Largest opaque blob (options block, permissions, hash) accepted, in bytes.
pub const MAX_BLOB_LEN: usize = 100_000;
/// Most partitions a topic may have.
pub const MAX_PARTITIONS_PER_TOPIC: u32 = 1_000_000;
/// Most partitions one operation may create or delete.
pub const MAX_PARTITIONS_PER_OP: u32 = 1_000;
/// Most personal access tokens per user.
pub const MAX_TOKENS_PER_USER: usize = 100;

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
            segment_size: crate::log::DEFAULT_SEGMENT_SIZE,
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

/// The whole metadata state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataState {
    /// Streams by id.
    pub streams: BTreeMap<u32, StreamRecord>,
    /// Users by id.
    pub users: BTreeMap<u32, UserRecord>,
    /// The next partition uid.
    pub next_partition_uid: u64,
}

fn check_name(name: &str) -> Result<(), MetadataError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(MetadataError::Limit {
            what: "name length",
            value: name.len() as u64,
            limit: MAX_NAME_LEN as u64,
        });
    }
    Ok(())
}

fn check_blob(what: &'static str, blob: &[u8]) -> Result<(), MetadataError> {
    if blob.len() > MAX_BLOB_LEN {
        return Err(MetadataError::Limit {
            what,
            value: blob.len() as u64,
            limit: MAX_BLOB_LEN as u64,
        });
    }
    Ok(())
}

impl MetadataState {
    /// A stream by id.
    pub fn stream(&self, id: u32) -> Option<&StreamRecord> {
        self.streams.get(&id)
    }

    /// A topic by ids.
    pub fn topic(&self, stream_id: u32, topic_id: u32) -> Option<&TopicRecord> {
        self.streams.get(&stream_id)?.topics.get(&topic_id)
    }

    /// A partition by address.
    pub fn partition(&self, addr: PartitionAddr) -> Option<&PartitionRecord> {
        self.topic(addr.stream_id, addr.topic_id)?
            .partitions
            .get(&addr.partition_id)
    }

    /// A stream by name.
    pub fn stream_by_name(&self, name: &str) -> Option<&StreamRecord> {
        self.streams.values().find(|s| s.name == name)
    }

    /// A user by username.
    pub fn user_by_name(&self, username: &str) -> Option<&UserRecord> {
        self.users.values().find(|u| u.username == username)
    }

    /// The lowest stream id not in use (stream ids are reused, stream protocol 7.1).
    pub fn lowest_free_stream_id(&self) -> u32 {
        lowest_free(self.streams.keys().copied())
    }

    /// The lowest topic id not in use in a stream.
    pub fn lowest_free_topic_id(&self, stream_id: u32) -> Option<u32> {
        self.streams
            .get(&stream_id)
            .map(|s| lowest_free(s.topics.keys().copied()))
    }

    /// The lowest user id not in use.
    pub fn lowest_free_user_id(&self) -> u32 {
        lowest_free(self.users.keys().copied())
    }

    /// Every partition with its address and topic config, in address order.
    pub fn partitions(
        &self,
    ) -> impl Iterator<Item = (PartitionAddr, &PartitionRecord, &TopicConfig)> + '_ {
        self.streams.values().flat_map(|s| {
            s.topics.values().flat_map(move |t| {
                t.partitions.values().map(move |p| {
                    (
                        PartitionAddr {
                            stream_id: s.id,
                            topic_id: t.id,
                            partition_id: p.id,
                        },
                        p,
                        &t.config,
                    )
                })
            })
        })
    }

    fn stream_mut(&mut self, id: u32) -> Result<&mut StreamRecord, MetadataError> {
        self.streams
            .get_mut(&id)
            .ok_or(MetadataError::StreamNotFound(id))
    }

    fn topic_mut(
        &mut self,
        stream_id: u32,
        topic_id: u32,
    ) -> Result<&mut TopicRecord, MetadataError> {
        self.stream_mut(stream_id)?
            .topics
            .get_mut(&topic_id)
            .ok_or(MetadataError::TopicNotFound {
                stream_id,
                topic_id,
            })
    }

    fn user_mut(&mut self, id: u32) -> Result<&mut UserRecord, MetadataError> {
        self.users
            .get_mut(&id)
            .ok_or(MetadataError::UserNotFound(id))
    }

    /// Validates and applies one operation. On error the state is unchanged.
    pub fn apply(&mut self, op: &MetadataOp) -> Result<Vec<Effect>, MetadataError> {
        let mut effects = Vec::new();
        match op {
            MetadataOp::CreateStream {
                id,
                name,
                created_at,
                options,
            } => {
                check_name(name)?;
                check_blob("stream options", options)?;
                if self.streams.contains_key(id) {
                    return Err(MetadataError::IdTaken {
                        entity: Entity::Stream,
                        id: *id,
                    });
                }
                if self.stream_by_name(name).is_some() {
                    return Err(MetadataError::NameTaken {
                        entity: Entity::Stream,
                        name: name.clone(),
                    });
                }
                self.streams.insert(
                    *id,
                    StreamRecord {
                        id: *id,
                        name: name.clone(),
                        created_at: *created_at,
                        options: options.clone(),
                        topics: BTreeMap::new(),
                    },
                );
            }
            MetadataOp::UpdateStream { id, name, options } => {
                check_name(name)?;
                check_blob("stream options", options)?;
                if self
                    .streams
                    .values()
                    .any(|s| s.name == *name && s.id != *id)
                {
                    return Err(MetadataError::NameTaken {
                        entity: Entity::Stream,
                        name: name.clone(),
                    });
                }
                let stream = self.stream_mut(*id)?;
                stream.name.clone_from(name);
                stream.options.clone_from(options);
            }
            MetadataOp::DeleteStream { id } => {
                let stream = self
                    .streams
                    .remove(id)
                    .ok_or(MetadataError::StreamNotFound(*id))?;
                for topic in stream.topics.values() {
                    push_deletes(&mut effects, stream.id, topic, topic.partitions.values());
                }
            }
            MetadataOp::PurgeStream { id } => {
                let stream = self.stream_mut(*id)?;
                let stream_id = stream.id;
                for topic in stream.topics.values_mut() {
                    purge_topic(&mut effects, stream_id, topic);
                }
            }
            MetadataOp::CreateTopic {
                stream_id,
                id,
                name,
                created_at,
                partitions,
                config,
                explicit_options,
                derived_options,
            } => {
                check_name(name)?;
                check_blob("topic options", explicit_options)?;
                check_blob("topic options", derived_options)?;
                if *partitions > MAX_PARTITIONS_PER_OP {
                    return Err(MetadataError::Limit {
                        what: "partitions per operation",
                        value: u64::from(*partitions),
                        limit: u64::from(MAX_PARTITIONS_PER_OP),
                    });
                }
                let stream = self.stream_mut(*stream_id)?;
                if stream.topics.contains_key(id) {
                    return Err(MetadataError::IdTaken {
                        entity: Entity::Topic,
                        id: *id,
                    });
                }
                if stream.topics.values().any(|t| t.name == *name) {
                    return Err(MetadataError::NameTaken {
                        entity: Entity::Topic,
                        name: name.clone(),
                    });
                }
                let first_uid = self.next_partition_uid;
                self.next_partition_uid = first_uid
                    .checked_add(u64::from(*partitions))
                    .ok_or(MetadataError::IdsExhausted(Entity::Partition))?;
                let mut topic = TopicRecord {
                    id: *id,
                    name: name.clone(),
                    created_at: *created_at,
                    config: *config,
                    explicit_options: explicit_options.clone(),
                    derived_options: derived_options.clone(),
                    partitions: BTreeMap::new(),
                    groups: BTreeMap::new(),
                    next_group_id: 0,
                };
                for pid in 0..*partitions {
                    let uid = first_uid + u64::from(pid);
                    topic
                        .partitions
                        .insert(pid, new_partition(pid, uid, *created_at));
                    effects.push(Effect::CreatePartition {
                        addr: PartitionAddr {
                            stream_id: *stream_id,
                            topic_id: *id,
                            partition_id: pid,
                        },
                        uid,
                        config: *config,
                    });
                }
                self.stream_mut(*stream_id)?.topics.insert(*id, topic);
            }
            MetadataOp::UpdateTopic {
                stream_id,
                topic_id,
                name,
                message_expiry,
                max_topic_size,
                compression_algorithm,
                replication_factor,
                explicit_options,
            } => {
                check_name(name)?;
                check_blob("topic options", explicit_options)?;
                let stream = self.stream_mut(*stream_id)?;
                if stream
                    .topics
                    .values()
                    .any(|t| t.name == *name && t.id != *topic_id)
                {
                    return Err(MetadataError::NameTaken {
                        entity: Entity::Topic,
                        name: name.clone(),
                    });
                }
                let topic = self.topic_mut(*stream_id, *topic_id)?;
                topic.name.clone_from(name);
                topic.config.message_expiry = *message_expiry;
                topic.config.max_topic_size = *max_topic_size;
                topic.config.compression_algorithm = *compression_algorithm;
                topic.config.replication_factor = *replication_factor;
                topic.explicit_options.clone_from(explicit_options);
            }
            MetadataOp::DeleteTopic {
                stream_id,
                topic_id,
            } => {
                let topic = self.stream_mut(*stream_id)?.topics.remove(topic_id).ok_or(
                    MetadataError::TopicNotFound {
                        stream_id: *stream_id,
                        topic_id: *topic_id,
                    },
                )?;
                push_deletes(&mut effects, *stream_id, &topic, topic.partitions.values());
            }
            MetadataOp::PurgeTopic {
                stream_id,
                topic_id,
            } => {
                let topic = self.topic_mut(*stream_id, *topic_id)?;
                purge_topic(&mut effects, *stream_id, topic);
            }
            MetadataOp::CreatePartitions {
                stream_id,
                topic_id,
                count,
                created_at,
            } => {
                if *count > MAX_PARTITIONS_PER_OP {
                    return Err(MetadataError::Limit {
                        what: "partitions per operation",
                        value: u64::from(*count),
                        limit: u64::from(MAX_PARTITIONS_PER_OP),
                    });
                }
                let topic = self.topic_mut(*stream_id, *topic_id)?;
                let existing = topic.partitions.len() as u64;
                if existing + u64::from(*count) > u64::from(MAX_PARTITIONS_PER_TOPIC) {
                    return Err(MetadataError::Limit {
                        what: "partitions per topic",
                        value: existing + u64::from(*count),
                        limit: u64::from(MAX_PARTITIONS_PER_TOPIC),
                    });
                }
                let first_id = topic.partitions.keys().next_back().map_or(0, |id| id + 1);
                let config = topic.config;
                let first_uid = self.next_partition_uid;
                self.next_partition_uid = first_uid
                    .checked_add(u64::from(*count))
                    .ok_or(MetadataError::IdsExhausted(Entity::Partition))?;
                let topic = self.topic_mut(*stream_id, *topic_id)?;
                for i in 0..*count {
                    let pid = first_id + i;
                    let uid = first_uid + u64::from(i);
                    topic
                        .partitions
                        .insert(pid, new_partition(pid, uid, *created_at));
                    effects.push(Effect::CreatePartition {
                        addr: PartitionAddr {
                            stream_id: *stream_id,
                            topic_id: *topic_id,
                            partition_id: pid,
                        },
                        uid,
                        config,
                    });
                }
            }
            MetadataOp::DeletePartitions {
                stream_id,
                topic_id,
                count,
            } => {
                if *count > MAX_PARTITIONS_PER_OP {
                    return Err(MetadataError::Limit {
                        what: "partitions per operation",
                        value: u64::from(*count),
                        limit: u64::from(MAX_PARTITIONS_PER_OP),
                    });
                }
                let topic = self.topic_mut(*stream_id, *topic_id)?;
                if *count as usize > topic.partitions.len() {
                    return Err(MetadataError::Limit {
                        what: "partitions to delete",
                        value: u64::from(*count),
                        limit: topic.partitions.len() as u64,
                    });
                }
                let mut removed = Vec::new();
                for _ in 0..*count {
                    if let Some((_, p)) = topic.partitions.pop_last() {
                        removed.push(p);
                    }
                }
                let topic_id = topic.id;
                for p in removed {
                    effects.push(Effect::DeletePartition {
                        addr: PartitionAddr {
                            stream_id: *stream_id,
                            topic_id,
                            partition_id: p.id,
                        },
                        uid: p.uid,
                    });
                }
            }
            MetadataOp::CreateUser {
                id,
                username,
                password_hash,
                status,
                permissions,
                options,
                created_at,
            } => {
                check_name(username)?;
                check_blob("password hash", password_hash.as_bytes())?;
                check_blob("user options", options)?;
                if let Some(p) = permissions {
                    check_blob("permissions", p)?;
                }
                if self.users.contains_key(id) {
                    return Err(MetadataError::IdTaken {
                        entity: Entity::User,
                        id: *id,
                    });
                }
                if self.user_by_name(username).is_some() {
                    return Err(MetadataError::NameTaken {
                        entity: Entity::User,
                        name: username.clone(),
                    });
                }
                self.users.insert(
                    *id,
                    UserRecord {
                        id: *id,
                        username: username.clone(),
                        password_hash: password_hash.clone(),
                        status: *status,
                        permissions: permissions.clone(),
                        options: options.clone(),
                        created_at: *created_at,
                        tokens: BTreeMap::new(),
                    },
                );
            }
            MetadataOp::UpdateUser {
                id,
                username,
                status,
                options,
            } => {
                if let Some(name) = username {
                    check_name(name)?;
                    if self
                        .users
                        .values()
                        .any(|u| u.username == *name && u.id != *id)
                    {
                        return Err(MetadataError::NameTaken {
                            entity: Entity::User,
                            name: name.clone(),
                        });
                    }
                }
                if let Some(o) = options {
                    check_blob("user options", o)?;
                }
                let user = self.user_mut(*id)?;
                if let Some(name) = username {
                    user.username.clone_from(name);
                }
                if let Some(s) = status {
                    user.status = *s;
                }
                if let Some(o) = options {
                    user.options.clone_from(o);
                }
            }
            MetadataOp::ChangePassword { id, password_hash } => {
                check_blob("password hash", password_hash.as_bytes())?;
                self.user_mut(*id)?.password_hash.clone_from(password_hash);
            }
            MetadataOp::UpdatePermissions { id, permissions } => {
                if let Some(p) = permissions {
                    check_blob("permissions", p)?;
                }
                self.user_mut(*id)?.permissions.clone_from(permissions);
            }
            MetadataOp::DeleteUser { id } => {
                self.users
                    .remove(id)
                    .ok_or(MetadataError::UserNotFound(*id))?;
            }
            MetadataOp::CreateToken {
                user_id,
                name,
                token_hash,
                expiry_at,
            } => {
                check_name(name)?;
                check_blob("token hash", token_hash.as_bytes())?;
                let user = self.user_mut(*user_id)?;
                if user.tokens.contains_key(name) {
                    return Err(MetadataError::NameTaken {
                        entity: Entity::Token,
                        name: name.clone(),
                    });
                }
                if user.tokens.len() >= MAX_TOKENS_PER_USER {
                    return Err(MetadataError::Limit {
                        what: "tokens per user",
                        value: user.tokens.len() as u64 + 1,
                        limit: MAX_TOKENS_PER_USER as u64,
                    });
                }
                user.tokens.insert(
                    name.clone(),
                    TokenRecord {
                        name: name.clone(),
                        token_hash: token_hash.clone(),
                        expiry_at: *expiry_at,
                    },
                );
            }
            MetadataOp::DeleteToken { user_id, name } => {
                let user = self.user_mut(*user_id)?;
                user.tokens
                    .remove(name)
                    .ok_or_else(|| MetadataError::TokenNotFound {
                        user_id: *user_id,
                        name: name.clone(),
                    })?;
            }
            MetadataOp::CreateConsumerGroup {
                stream_id,
                topic_id,
                id,
                name,
                created_at,
            } => {
                check_name(name)?;
                let topic = self.topic_mut(*stream_id, *topic_id)?;
                if *id < topic.next_group_id || topic.groups.contains_key(id) {
                    return Err(MetadataError::IdTaken {
                        entity: Entity::ConsumerGroup,
                        id: *id,
                    });
                }
                if topic.groups.values().any(|g| g.name == *name) {
                    return Err(MetadataError::NameTaken {
                        entity: Entity::ConsumerGroup,
                        name: name.clone(),
                    });
                }
                topic.next_group_id = id
                    .checked_add(1)
                    .ok_or(MetadataError::IdsExhausted(Entity::ConsumerGroup))?;
                topic.groups.insert(
                    *id,
                    ConsumerGroupRecord {
                        id: *id,
                        name: name.clone(),
                        created_at: *created_at,
                    },
                );
            }
            MetadataOp::DeleteConsumerGroup {
                stream_id,
                topic_id,
                group_id,
            } => {
                let topic = self.topic_mut(*stream_id, *topic_id)?;
                topic
                    .groups
                    .remove(group_id)
                    .ok_or(MetadataError::GroupNotFound {
                        stream_id: *stream_id,
                        topic_id: *topic_id,
                        group_id: *group_id,
                    })?;
                for partition in topic.partitions.values_mut() {
                    partition.offsets.remove(&ConsumerKey::Group(*group_id));
                }
            }
            MetadataOp::StoreConsumerOffset {
                addr,
                consumer,
                offset,
                forward_only,
            } => {
                if let ConsumerKey::Group(group_id) = consumer {
                    let topic = self.topic_mut(addr.stream_id, addr.topic_id)?;
                    if !topic.groups.contains_key(group_id) {
                        return Err(MetadataError::GroupNotFound {
                            stream_id: addr.stream_id,
                            topic_id: addr.topic_id,
                            group_id: *group_id,
                        });
                    }
                }
                let partition = self.partition_mut(*addr)?;
                let slot = partition.offsets.entry(*consumer).or_insert(*offset);
                if !*forward_only || *offset > *slot {
                    *slot = *offset;
                }
            }
            MetadataOp::DeleteConsumerOffset { addr, consumer } => {
                let partition = self.partition_mut(*addr)?;
                partition
                    .offsets
                    .remove(consumer)
                    .ok_or(MetadataError::OffsetNotFound)?;
            }
        }
        Ok(effects)
    }

    fn partition_mut(
        &mut self,
        addr: PartitionAddr,
    ) -> Result<&mut PartitionRecord, MetadataError> {
        self.topic_mut(addr.stream_id, addr.topic_id)?
            .partitions
            .get_mut(&addr.partition_id)
            .ok_or(MetadataError::PartitionNotFound {
                stream_id: addr.stream_id,
                topic_id: addr.topic_id,
                partition_id: addr.partition_id,
            })
    }
}

fn lowest_free(used: impl Iterator<Item = u32>) -> u32 {
    let mut candidate = 0u32;
    for id in used {
        if id != candidate {
            break;
        }
        candidate += 1;
    }
    candidate
}

fn new_partition(id: u32, uid: u64, created_at: u64) -> PartitionRecord {
    PartitionRecord {
        id,
        uid,
        created_at,
        purge_generation: 0,
        offsets: BTreeMap::new(),
    }
}

fn push_deletes<'a>(
    effects: &mut Vec<Effect>,
    stream_id: u32,
    topic: &TopicRecord,
    partitions: impl Iterator<Item = &'a PartitionRecord>,
) {
    for p in partitions {
        effects.push(Effect::DeletePartition {
            addr: PartitionAddr {
                stream_id,
                topic_id: topic.id,
                partition_id: p.id,
            },
            uid: p.uid,
        });
    }
}

fn purge_topic(effects: &mut Vec<Effect>, stream_id: u32, topic: &mut TopicRecord) {
    // Purge clears the data and the consumer offsets (stream protocol 7.4).
    for p in topic.partitions.values_mut() {
        p.purge_generation += 1;
        p.offsets.clear();
        effects.push(Effect::PurgePartition {
            addr: PartitionAddr {
                stream_id,
                topic_id: topic.id,
                partition_id: p.id,
            },
            uid: p.uid,
            generation: p.purge_generation,
        });
    }
}

// ------------------------------------------------------------------------------------------------
// Encoding.

/// Largest encoded operation accepted when decoding (checked before allocating).
pub const MAX_OP_BYTES: usize = 4 * 1024 * 1024;
/// Largest snapshot accepted when decoding.
pub const MAX_SNAPSHOT_BYTES: usize = 1024 * 1024 * 1024;

fn op_config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<MAX_OP_BYTES>()
}

fn snapshot_config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<MAX_SNAPSHOT_BYTES>()
}

/// Encodes an operation.
pub fn encode_op(op: &MetadataOp) -> Result<Vec<u8>, crate::error::EncodingError> {
    bincode::serde::encode_to_vec(op, op_config()).map_err(crate::error::EncodingError::Encode)
}

/// Decodes an operation (all bytes must be consumed).
pub fn decode_op(bytes: &[u8]) -> Result<MetadataOp, crate::error::EncodingError> {
    let (op, used) = bincode::serde::decode_from_slice(bytes, op_config())
        .map_err(crate::error::EncodingError::Decode)?;
    if used != bytes.len() {
        return Err(crate::error::EncodingError::Trailing(bytes.len() - used));
    }
    Ok(op)
}

/// Encodes a state for a snapshot.
pub fn encode_state(state: &MetadataState) -> Result<Vec<u8>, crate::error::EncodingError> {
    bincode::serde::encode_to_vec(state, snapshot_config())
        .map_err(crate::error::EncodingError::Encode)
}

/// Decodes a snapshot state (all bytes must be consumed).
pub fn decode_state(bytes: &[u8]) -> Result<MetadataState, crate::error::EncodingError> {
    let (state, used) = bincode::serde::decode_from_slice(bytes, snapshot_config())
        .map_err(crate::error::EncodingError::Decode)?;
    if used != bytes.len() {
        return Err(crate::error::EncodingError::Trailing(bytes.len() - used));
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(p: u32) -> PartitionAddr {
        PartitionAddr {
            stream_id: 0,
            topic_id: 0,
            partition_id: p,
        }
    }

    fn with_topic(partitions: u32) -> MetadataState {
        let mut s = MetadataState::default();
        s.apply(&MetadataOp::CreateStream {
            id: 0,
            name: "s".into(),
            created_at: 1,
            options: vec![],
        })
        .unwrap();
        let effects = s
            .apply(&MetadataOp::CreateTopic {
                stream_id: 0,
                id: 0,
                name: "t".into(),
                created_at: 2,
                partitions,
                config: TopicConfig::default(),
                explicit_options: vec![],
                derived_options: vec![],
            })
            .unwrap();
        assert_eq!(effects.len(), partitions as usize);
        s
    }

    #[test]
    fn streams_topics_partitions_lifecycle() {
        let mut s = with_topic(3);
        assert_eq!(s.lowest_free_stream_id(), 1);
        assert_eq!(s.lowest_free_topic_id(0), Some(1));
        assert_eq!(s.topic(0, 0).unwrap().partitions.len(), 3);
        assert_eq!(s.partition(addr(2)).unwrap().uid, 2);
        // Names are unique per scope.
        assert!(matches!(
            s.apply(&MetadataOp::CreateStream {
                id: 5,
                name: "s".into(),
                created_at: 0,
                options: vec![]
            }),
            Err(MetadataError::NameTaken { .. })
        ));
        assert!(matches!(
            s.apply(&MetadataOp::CreateStream {
                id: 0,
                name: "x".into(),
                created_at: 0,
                options: vec![]
            }),
            Err(MetadataError::IdTaken { .. })
        ));
        let effects = s
            .apply(&MetadataOp::CreatePartitions {
                stream_id: 0,
                topic_id: 0,
                count: 2,
                created_at: 3,
            })
            .unwrap();
        assert_eq!(
            effects
                .iter()
                .map(|e| match e {
                    Effect::CreatePartition { addr, uid, .. } => (addr.partition_id, *uid),
                    _ => panic!(),
                })
                .collect::<Vec<_>>(),
            vec![(3, 3), (4, 4)]
        );
        let effects = s
            .apply(&MetadataOp::DeletePartitions {
                stream_id: 0,
                topic_id: 0,
                count: 2,
            })
            .unwrap();
        assert_eq!(effects.len(), 2);
        assert!(s.partition(addr(3)).is_none());
        // uids are never reused.
        s.apply(&MetadataOp::CreatePartitions {
            stream_id: 0,
            topic_id: 0,
            count: 1,
            created_at: 4,
        })
        .unwrap();
        assert_eq!(s.partition(addr(3)).unwrap().uid, 5);
        let effects = s.apply(&MetadataOp::DeleteStream { id: 0 }).unwrap();
        assert_eq!(effects.len(), 4);
        assert!(s.streams.is_empty());
    }

    #[test]
    fn purge_bumps_generation_and_clears_offsets() {
        let mut s = with_topic(2);
        s.apply(&MetadataOp::StoreConsumerOffset {
            addr: addr(0),
            consumer: ConsumerKey::Consumer(1),
            offset: 9,
            forward_only: false,
        })
        .unwrap();
        let effects = s
            .apply(&MetadataOp::PurgeTopic {
                stream_id: 0,
                topic_id: 0,
            })
            .unwrap();
        assert_eq!(effects.len(), 2);
        assert!(matches!(
            effects[0],
            Effect::PurgePartition { generation: 1, .. }
        ));
        assert!(s.partition(addr(0)).unwrap().offsets.is_empty());
        let effects = s.apply(&MetadataOp::PurgeStream { id: 0 }).unwrap();
        assert!(matches!(
            effects[1],
            Effect::PurgePartition { generation: 2, .. }
        ));
    }

    #[test]
    fn consumer_offsets_forward_only_and_groups() {
        let mut s = with_topic(1);
        let store = |s: &mut MetadataState, offset, forward_only| {
            s.apply(&MetadataOp::StoreConsumerOffset {
                addr: addr(0),
                consumer: ConsumerKey::Group(0),
                offset,
                forward_only,
            })
        };
        assert!(matches!(
            store(&mut s, 1, false),
            Err(MetadataError::GroupNotFound { .. })
        ));
        s.apply(&MetadataOp::CreateConsumerGroup {
            stream_id: 0,
            topic_id: 0,
            id: 0,
            name: "g".into(),
            created_at: 0,
        })
        .unwrap();
        store(&mut s, 10, false).unwrap();
        store(&mut s, 5, true).unwrap();
        assert_eq!(
            s.partition(addr(0)).unwrap().offsets[&ConsumerKey::Group(0)],
            10
        );
        store(&mut s, 5, false).unwrap();
        assert_eq!(
            s.partition(addr(0)).unwrap().offsets[&ConsumerKey::Group(0)],
            5
        );
        s.apply(&MetadataOp::DeleteConsumerGroup {
            stream_id: 0,
            topic_id: 0,
            group_id: 0,
        })
        .unwrap();
        assert!(s.partition(addr(0)).unwrap().offsets.is_empty());
        // Group ids are never reused.
        assert!(s
            .apply(&MetadataOp::CreateConsumerGroup {
                stream_id: 0,
                topic_id: 0,
                id: 0,
                name: "g".into(),
                created_at: 0
            })
            .is_err());
        assert!(s
            .apply(&MetadataOp::CreateConsumerGroup {
                stream_id: 0,
                topic_id: 0,
                id: 1,
                name: "g".into(),
                created_at: 0
            })
            .is_ok());
        assert_eq!(
            s.apply(&MetadataOp::DeleteConsumerOffset {
                addr: addr(0),
                consumer: ConsumerKey::Consumer(3)
            }),
            Err(MetadataError::OffsetNotFound)
        );
    }

    #[test]
    fn users_and_tokens() {
        let mut s = MetadataState::default();
        let create = |id: u32, name: &str| MetadataOp::CreateUser {
            id,
            username: name.into(),
            password_hash: "h".into(),
            status: 1,
            permissions: None,
            options: vec![],
            created_at: 0,
        };
        s.apply(&create(0, "iggy")).unwrap();
        assert!(s.apply(&create(1, "iggy")).is_err());
        assert_eq!(s.lowest_free_user_id(), 1);
        s.apply(&MetadataOp::CreateToken {
            user_id: 0,
            name: "t".into(),
            token_hash: "x".into(),
            expiry_at: None,
        })
        .unwrap();
        assert!(s
            .apply(&MetadataOp::CreateToken {
                user_id: 0,
                name: "t".into(),
                token_hash: "y".into(),
                expiry_at: None
            })
            .is_err());
        s.apply(&MetadataOp::UpdateUser {
            id: 0,
            username: None,
            status: Some(2),
            options: None,
        })
        .unwrap();
        assert_eq!(s.users[&0].status, 2);
        s.apply(&MetadataOp::ChangePassword {
            id: 0,
            password_hash: "n".into(),
        })
        .unwrap();
        s.apply(&MetadataOp::UpdatePermissions {
            id: 0,
            permissions: Some(vec![1]),
        })
        .unwrap();
        s.apply(&MetadataOp::DeleteToken {
            user_id: 0,
            name: "t".into(),
        })
        .unwrap();
        assert!(s.users[&0].tokens.is_empty());
        s.apply(&MetadataOp::DeleteUser { id: 0 }).unwrap();
        assert!(s.users.is_empty());
    }

    #[test]
    fn limits_are_checked() {
        let mut s = MetadataState::default();
        assert!(s
            .apply(&MetadataOp::CreateStream {
                id: 0,
                name: "x".repeat(MAX_NAME_LEN + 1),
                created_at: 0,
                options: vec![]
            })
            .is_err());
        assert!(s
            .apply(&MetadataOp::CreateStream {
                id: 0,
                name: String::new(),
                created_at: 0,
                options: vec![]
            })
            .is_err());
        assert!(s
            .apply(&MetadataOp::CreateStream {
                id: 0,
                name: "x".into(),
                created_at: 0,
                options: vec![0; MAX_BLOB_LEN + 1]
            })
            .is_err());
        let mut s = with_topic(0);
        assert!(s
            .apply(&MetadataOp::CreatePartitions {
                stream_id: 0,
                topic_id: 0,
                count: MAX_PARTITIONS_PER_OP + 1,
                created_at: 0
            })
            .is_err());
        assert!(s
            .apply(&MetadataOp::DeletePartitions {
                stream_id: 0,
                topic_id: 0,
                count: 1
            })
            .is_err());
    }

    #[test]
    fn ops_and_state_roundtrip_through_bincode() {
        let s = with_topic(2);
        let bytes = encode_state(&s).unwrap();
        assert_eq!(decode_state(&bytes).unwrap(), s);
        let op = MetadataOp::StoreConsumerOffset {
            addr: addr(1),
            consumer: ConsumerKey::Consumer(7),
            offset: 99,
            forward_only: true,
        };
        let bytes = encode_op(&op).unwrap();
        assert_eq!(decode_op(&bytes).unwrap(), op);
        for cut in 0..bytes.len() {
            assert!(decode_op(&bytes[..cut]).is_err());
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(matches!(
            decode_op(&trailing),
            Err(crate::error::EncodingError::Trailing(1))
        ));
    }
}
