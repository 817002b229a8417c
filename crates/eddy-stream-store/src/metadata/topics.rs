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
    let mut topics = TopicOps {
        streams,
        next_partition_uid,
        effects,
    };
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
            let topic = TopicRecord {
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
            topics.create_topic(*stream_id, topic, *partitions)
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
            let stream = stream_mut(topics.streams, *stream_id)?;
            check_topic_name_free(stream, name, Some(*topic_id))?;
            let topic = topic_mut(topics.streams, *stream_id, *topic_id)?;
            topic.name.clone_from(name);
            topic.config.message_expiry = *message_expiry;
            topic.config.max_topic_size = *max_topic_size;
            topic.config.compression_algorithm = *compression_algorithm;
            topic.config.replication_factor = *replication_factor;
            topic.explicit_options.clone_from(explicit_options);
            Ok(())
        }
        MetadataOp::DeleteTopic {
            stream_id,
            topic_id,
        } => topics.delete_topic(*stream_id, *topic_id),
        MetadataOp::PurgeTopic {
            stream_id,
            topic_id,
        } => {
            let topic = topic_mut(topics.streams, *stream_id, *topic_id)?;
            purge_topic(topics.effects, *stream_id, topic);
            Ok(())
        }
        MetadataOp::CreatePartitions {
            stream_id,
            topic_id,
            count,
            created_at,
        } => topics.create_partitions(*stream_id, *topic_id, *count, *created_at),
        MetadataOp::DeletePartitions {
            stream_id,
            topic_id,
            count,
        } => topics.delete_partitions(*stream_id, *topic_id, *count),
        other => unreachable!("not a topic operation: {other:?}"),
    }
}

/// What a topic operation changes: the streams, the partition uid counter, and the effects
/// list the caller carries out once the operation is applied. Every method checks before it
/// changes anything, so on error all three are as they were.
struct TopicOps<'a> {
    streams: &'a mut BTreeMap<u32, StreamRecord>,
    next_partition_uid: &'a mut u64,
    effects: &'a mut Vec<Effect>,
}

impl TopicOps<'_> {
    /// Adds `topic` (as built from its `CreateTopic` op, with no partitions yet) to stream
    /// `stream_id` with partitions `0..partitions`, each with a fresh uid. Checks, in order:
    /// the name, both options blocks, the partition count, that the stream exists, that the
    /// topic's id and then its name are free in it.
    fn create_topic(
        &mut self,
        stream_id: u32,
        mut topic: TopicRecord,
        partitions: u32,
    ) -> Result<(), MetadataError> {
        check_name(&topic.name)?;
        check_blob("topic options", &topic.explicit_options)?;
        check_blob("topic options", &topic.derived_options)?;
        check_partitions_per_op(partitions)?;
        let stream = stream_mut(self.streams, stream_id)?;
        if stream.topics.contains_key(&topic.id) {
            return Err(MetadataError::IdTaken {
                entity: Entity::Topic,
                id: topic.id,
            });
        }
        check_topic_name_free(stream, &topic.name, None)?;
        let first_uid = allocate_partition_uids(self.next_partition_uid, partitions)?;
        let run = NewPartitions {
            stream_id,
            topic_id: topic.id,
            first_id: 0,
            first_uid,
            count: partitions,
            created_at: topic.created_at,
        };
        add_partitions(&mut topic, &run, self.effects);
        stream_mut(self.streams, stream_id)?
            .topics
            .insert(topic.id, topic);
        Ok(())
    }

    /// Removes the topic and pushes a `DeletePartition` effect for each of its partitions.
    fn delete_topic(&mut self, stream_id: u32, topic_id: u32) -> Result<(), MetadataError> {
        let topic = stream_mut(self.streams, stream_id)?
            .topics
            .remove(&topic_id)
            .ok_or(MetadataError::TopicNotFound {
                stream_id,
                topic_id,
            })?;
        push_deletes(self.effects, stream_id, &topic, topic.partitions.values());
        Ok(())
    }

    /// Adds `count` partitions to the topic, numbered on from its highest partition id, each
    /// with a fresh uid and the topic's config. Checks the per-operation limit, that the topic
    /// exists, then the per-topic limit.
    fn create_partitions(
        &mut self,
        stream_id: u32,
        topic_id: u32,
        count: u32,
        created_at: u64,
    ) -> Result<(), MetadataError> {
        check_partitions_per_op(count)?;
        let topic = topic_mut(self.streams, stream_id, topic_id)?;
        let existing = topic.partitions.len() as u64;
        if existing + u64::from(count) > u64::from(MAX_PARTITIONS_PER_TOPIC) {
            return Err(MetadataError::Limit {
                what: "partitions per topic".into(),
                value: existing + u64::from(count),
                limit: u64::from(MAX_PARTITIONS_PER_TOPIC),
            });
        }
        let first_id = topic.partitions.keys().next_back().map_or(0, |id| id + 1);
        let first_uid = allocate_partition_uids(self.next_partition_uid, count)?;
        let run = NewPartitions {
            stream_id,
            topic_id,
            first_id,
            first_uid,
            count,
            created_at,
        };
        add_partitions(topic, &run, self.effects);
        Ok(())
    }

    /// Removes the topic's last `count` partitions (highest ids first) and pushes a
    /// `DeletePartition` effect for each, in that order. Checks the per-operation limit, that
    /// the topic exists, and that it has that many partitions.
    fn delete_partitions(
        &mut self,
        stream_id: u32,
        topic_id: u32,
        count: u32,
    ) -> Result<(), MetadataError> {
        check_partitions_per_op(count)?;
        let topic = topic_mut(self.streams, stream_id, topic_id)?;
        if count as usize > topic.partitions.len() {
            return Err(MetadataError::Limit {
                what: "partitions to delete".into(),
                value: u64::from(count),
                limit: topic.partitions.len() as u64,
            });
        }
        let mut removed = Vec::new();
        for _ in 0..count {
            if let Some((_, p)) = topic.partitions.pop_last() {
                removed.push(p);
            }
        }
        push_deletes(self.effects, stream_id, topic, removed.iter());
        Ok(())
    }
}

/// One operation may create or delete at most [`MAX_PARTITIONS_PER_OP`] partitions.
fn check_partitions_per_op(count: u32) -> Result<(), MetadataError> {
    if count > MAX_PARTITIONS_PER_OP {
        return Err(MetadataError::Limit {
            what: "partitions per operation".into(),
            value: u64::from(count),
            limit: u64::from(MAX_PARTITIONS_PER_OP),
        });
    }
    Ok(())
}

/// A topic name must be unused in its stream; `except` is the topic being renamed, whose
/// own name does not count.
fn check_topic_name_free(
    stream: &StreamRecord,
    name: &str,
    except: Option<u32>,
) -> Result<(), MetadataError> {
    if stream
        .topics
        .values()
        .any(|t| t.name == name && Some(t.id) != except)
    {
        return Err(MetadataError::NameTaken {
            entity: Entity::Topic,
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Reserves `count` partition uids and returns the first; the counter moves past them.
/// Uids are never reused, so running out is an error rather than a wrap.
fn allocate_partition_uids(next_partition_uid: &mut u64, count: u32) -> Result<u64, MetadataError> {
    let first_uid = *next_partition_uid;
    *next_partition_uid = first_uid
        .checked_add(u64::from(count))
        .ok_or(MetadataError::IdsExhausted(Entity::Partition))?;
    Ok(first_uid)
}

/// A run of partitions to create in one topic: ids `first_id..first_id + count`, uids
/// `first_uid..first_uid + count` (reserved by [`allocate_partition_uids`]).
struct NewPartitions {
    stream_id: u32,
    topic_id: u32,
    first_id: u32,
    first_uid: u64,
    count: u32,
    created_at: u64,
}

/// Inserts the run's partitions into `topic` and pushes a `CreatePartition` effect for each,
/// in id order, carrying the topic's config.
fn add_partitions(topic: &mut TopicRecord, run: &NewPartitions, effects: &mut Vec<Effect>) {
    for i in 0..run.count {
        let pid = run.first_id + i;
        let uid = run.first_uid + u64::from(i);
        topic
            .partitions
            .insert(pid, new_partition(pid, uid, run.created_at));
        effects.push(Effect::CreatePartition {
            addr: PartitionAddr {
                stream_id: run.stream_id,
                topic_id: run.topic_id,
                partition_id: pid,
            },
            uid,
            config: topic.config,
        });
    }
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
