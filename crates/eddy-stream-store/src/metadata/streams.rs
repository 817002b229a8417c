//! Stream operations: create, update (rename, options), delete (every partition of every
//! topic goes), purge (every partition emptied, offsets cleared).

use std::collections::BTreeMap;

use crate::error::{Entity, MetadataError};

use super::checks::{check_blob, check_name};
use super::op::MetadataOp;
use super::records::{stream_mut, Effect, StreamRecord};
use super::topics::{purge_topic, push_deletes};

/// Applies a stream operation (routed here by [`MetadataState::apply`](super::MetadataState::apply)).
pub(super) fn apply(
    streams: &mut BTreeMap<u32, StreamRecord>,
    op: &MetadataOp,
    effects: &mut Vec<Effect>,
) -> Result<(), MetadataError> {
    match op {
        MetadataOp::CreateStream {
            id,
            name,
            created_at,
            options,
        } => {
            check_name(name)?;
            check_blob("stream options", options)?;
            if streams.contains_key(id) {
                return Err(MetadataError::IdTaken {
                    entity: Entity::Stream,
                    id: *id,
                });
            }
            if streams.values().any(|s| s.name == *name) {
                return Err(MetadataError::NameTaken {
                    entity: Entity::Stream,
                    name: name.clone(),
                });
            }
            streams.insert(
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
            if streams.values().any(|s| s.name == *name && s.id != *id) {
                return Err(MetadataError::NameTaken {
                    entity: Entity::Stream,
                    name: name.clone(),
                });
            }
            let stream = stream_mut(streams, *id)?;
            stream.name.clone_from(name);
            stream.options.clone_from(options);
        }
        MetadataOp::DeleteStream { id } => {
            let stream = streams
                .remove(id)
                .ok_or(MetadataError::StreamNotFound(*id))?;
            for topic in stream.topics.values() {
                push_deletes(effects, stream.id, topic, topic.partitions.values());
            }
        }
        MetadataOp::PurgeStream { id } => {
            let stream = stream_mut(streams, *id)?;
            let stream_id = stream.id;
            for topic in stream.topics.values_mut() {
                purge_topic(effects, stream_id, topic);
            }
        }
        other => unreachable!("not a stream operation: {other:?}"),
    }
    Ok(())
}
