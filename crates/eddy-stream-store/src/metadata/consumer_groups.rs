//! Consumer group operations (a group's stored offsets go with it).

use std::collections::BTreeMap;

use crate::error::{Entity, MetadataError};

use super::checks::check_name;
use super::op::MetadataOp;
use super::records::{topic_mut, ConsumerGroupRecord, ConsumerKey, StreamRecord};

/// Applies a consumer group operation.
pub(super) fn apply(
    streams: &mut BTreeMap<u32, StreamRecord>,
    op: &MetadataOp,
) -> Result<(), MetadataError> {
    match op {
        MetadataOp::CreateConsumerGroup {
            stream_id,
            topic_id,
            id,
            name,
            created_at,
        } => {
            check_name(name)?;
            let topic = topic_mut(streams, *stream_id, *topic_id)?;
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
            let topic = topic_mut(streams, *stream_id, *topic_id)?;
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
        other => unreachable!("not a consumer group operation: {other:?}"),
    }
    Ok(())
}
