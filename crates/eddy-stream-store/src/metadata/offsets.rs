//! Consumer offset operations: store (optionally forward only) and delete. A group's offset
//! needs the group to exist.

use std::collections::BTreeMap;

use crate::error::MetadataError;

use super::op::MetadataOp;
use super::records::{partition_mut, topic_mut, ConsumerKey, StreamRecord};

/// Applies a consumer offset operation.
pub(super) fn apply(
    streams: &mut BTreeMap<u32, StreamRecord>,
    op: &MetadataOp,
) -> Result<(), MetadataError> {
    match op {
        MetadataOp::StoreConsumerOffset {
            addr,
            consumer,
            offset,
            forward_only,
        } => {
            if let ConsumerKey::Group(group_id) = consumer {
                let topic = topic_mut(streams, addr.stream_id, addr.topic_id)?;
                if !topic.groups.contains_key(group_id) {
                    return Err(MetadataError::GroupNotFound {
                        stream_id: addr.stream_id,
                        topic_id: addr.topic_id,
                        group_id: *group_id,
                    });
                }
            }
            let partition = partition_mut(streams, *addr)?;
            let slot = partition.offsets.entry(*consumer).or_insert(*offset);
            if !*forward_only || *offset > *slot {
                *slot = *offset;
            }
        }
        MetadataOp::DeleteConsumerOffset { addr, consumer } => {
            let partition = partition_mut(streams, *addr)?;
            partition
                .offsets
                .remove(consumer)
                .ok_or(MetadataError::OffsetNotFound)?;
        }
        other => unreachable!("not a consumer offset operation: {other:?}"),
    }
    Ok(())
}
