//! Topic and partition operations: create (with its partitions, each getting a fresh uid),
//! update, delete, purge, add partitions, remove the last partitions.

use std::collections::BTreeMap;

use crate::error::{Entity, MetadataError};
use crate::partition::PartitionAddr;

use super::checks::{check_blob, check_name};
use super::config::{MAX_PARTITIONS_PER_OP, MAX_PARTITIONS_PER_TOPIC};
use super::op::MetadataOp;
use super::records::{stream_mut, topic_mut, Effect, PartitionRecord, StreamRecord, TopicRecord};

/// Applies a topic or partition operation.
pub(super) fn apply(
    streams: &mut BTreeMap<u32, StreamRecord>,
    next_partition_uid: &mut u64,
    op: &MetadataOp,
    effects: &mut Vec<Effect>,
) -> Result<(), MetadataError> {
    match op {
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
            let stream = stream_mut(streams, *stream_id)?;
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
            let first_uid = *next_partition_uid;
            *next_partition_uid = first_uid
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
            stream_mut(streams, *stream_id)?.topics.insert(*id, topic);
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
            let stream = stream_mut(streams, *stream_id)?;
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
            let topic = topic_mut(streams, *stream_id, *topic_id)?;
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
            let topic = stream_mut(streams, *stream_id)?
                .topics
                .remove(topic_id)
                .ok_or(MetadataError::TopicNotFound {
                    stream_id: *stream_id,
                    topic_id: *topic_id,
                })?;
            push_deletes(effects, *stream_id, &topic, topic.partitions.values());
        }
        MetadataOp::PurgeTopic {
            stream_id,
            topic_id,
        } => {
            let topic = topic_mut(streams, *stream_id, *topic_id)?;
            purge_topic(effects, *stream_id, topic);
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
            let topic = topic_mut(streams, *stream_id, *topic_id)?;
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
            let first_uid = *next_partition_uid;
            *next_partition_uid = first_uid
                .checked_add(u64::from(*count))
                .ok_or(MetadataError::IdsExhausted(Entity::Partition))?;
            let topic = topic_mut(streams, *stream_id, *topic_id)?;
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
            let topic = topic_mut(streams, *stream_id, *topic_id)?;
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
        other => unreachable!("not a topic operation: {other:?}"),
    }
    Ok(())
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

pub(super) fn push_deletes<'a>(
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

pub(super) fn purge_topic(effects: &mut Vec<Effect>, stream_id: u32, topic: &mut TopicRecord) {
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
