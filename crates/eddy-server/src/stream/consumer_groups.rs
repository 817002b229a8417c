//! Consumer-group commands (stream protocol §5.11, §7.6): groups are durable metadata (ids
//! never reused within a topic); membership and assignment live in the
//! [`Coordinator`](super::group_coordinator::Coordinator).

use eddy_codec::stream::codec::{Counted, ToEnd};
use eddy_codec::stream::commands::create_consumer_group::CreateConsumerGroup;
use eddy_codec::stream::commands::sync_consumer_group::GroupAssignment;
use eddy_codec::stream::commands::Maybe;
use eddy_codec::stream::entities::ConsumerGroupResponse;
use eddy_codec::stream::Identifier;
use eddy_stream_store::Entity;
use eddy_stream_store::MetadataOp;

use super::group_coordinator::GroupKey;
use super::handler::{Ctx, Outcome};
use super::views;
use eddy_replicated::stream::error::{Missing, StreamError};

fn key(ctx: Ctx<'_>, stream_id: u32, topic_id: u32, group: &Identifier) -> Option<GroupKey> {
    ctx.state
        .read(|meta| views::group_id(meta, stream_id, topic_id, group))
        .map(|group_id| GroupKey {
            stream_id,
            topic_id,
            group_id,
        })
}

/// `GET_CONSUMER_GROUP`: the group with its members (empty body if it does not exist).
pub(crate) fn get(ctx: Ctx<'_>, stream_id: u32, topic_id: u32, group: &Identifier) -> Outcome {
    let Some(key) = key(ctx, stream_id, topic_id, group) else {
        return Outcome::empty();
    };
    let members = ctx.state.groups().members(key);
    let details = ctx.state.read(|meta| {
        let topic = meta.topic(stream_id, topic_id)?;
        let record = topic.groups.get(&key.group_id)?;
        Some(views::group_details(
            topic,
            key.group_id,
            &record.name,
            &members,
        ))
    });
    Outcome::payload(&Maybe(details))
}

/// `GET_CONSUMER_GROUPS`.
pub(crate) fn list(ctx: Ctx<'_>, stream_id: u32, topic_id: u32) -> Outcome {
    let records: Vec<(u32, String, u32)> = ctx.state.read(|meta| {
        meta.topic(stream_id, topic_id).map_or_else(Vec::new, |t| {
            let partitions = u32::try_from(t.partitions.len()).unwrap_or(u32::MAX);
            t.groups
                .values()
                .map(|g| (g.id, g.name.clone(), partitions))
                .collect()
        })
    });
    let groups = ctx.state.groups();
    let list: Vec<ConsumerGroupResponse> = records
        .into_iter()
        .map(|(id, name, partitions_count)| {
            let members = groups.members(GroupKey {
                stream_id,
                topic_id,
                group_id: id,
            });
            ConsumerGroupResponse {
                id,
                partitions_count,
                members_count: u32::try_from(members.len()).unwrap_or(u32::MAX),
                name: views::wire_name(&name),
            }
        })
        .collect();
    drop(groups);
    Outcome::payload(&ToEnd(list))
}

/// `CREATE_CONSUMER_GROUP`: replies with the new group (no members).
pub(crate) async fn create(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    request: CreateConsumerGroup,
) -> Result<Outcome, StreamError> {
    let name = request.name.into_string();
    let id = {
        let _creating = ctx.state.creation.lock().await;
        let found = ctx.state.read(|meta| {
            let topic = meta.topic(stream_id, topic_id)?;
            Some((
                topic.next_group_id,
                topic.groups.values().any(|g| g.name == name),
            ))
        });
        let (id, taken) = found.ok_or(StreamError::NotFound(Missing::Topic))?;
        if taken {
            return Err(StreamError::NameTaken {
                entity: Entity::ConsumerGroup,
                name,
            });
        }
        ctx.state
            .commit(MetadataOp::CreateConsumerGroup {
                stream_id,
                topic_id,
                id,
                name: name.clone(),
                created_at: crate::clock::now_micros(),
            })
            .await?;
        id
    };
    let details = ctx
        .state
        .read(|meta| {
            let topic = meta.topic(stream_id, topic_id)?;
            Some(views::group_details(topic, id, &name, &[]))
        })
        .ok_or(StreamError::NotFound(Missing::Topic))?;
    Ok(Outcome::payload(&details))
}

/// `DELETE_CONSUMER_GROUP`: the group, its offsets and its memberships.
pub(crate) async fn delete(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    group: &Identifier,
) -> Result<Outcome, StreamError> {
    let key = key(ctx, stream_id, topic_id, group).ok_or(StreamError::NotFound(Missing::Group))?;
    ctx.state
        .commit(MetadataOp::DeleteConsumerGroup {
            stream_id,
            topic_id,
            group_id: key.group_id,
        })
        .await?;
    ctx.state.groups().remove_group(key);
    Ok(Outcome::empty())
}

/// `JOIN_CONSUMER_GROUP`: the caller's connection becomes a member (a no-op if it is one);
/// the group rebalances cooperatively (partitions with uncommitted polls move later).
pub(crate) fn join(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    group: &Identifier,
) -> Result<Outcome, StreamError> {
    let key = key(ctx, stream_id, topic_id, group).ok_or(StreamError::NotFound(Missing::Group))?;
    let partitions = ctx
        .state
        .read(|meta| views::partition_ids(meta, stream_id, topic_id));
    ctx.state
        .groups()
        .join(key, ctx.client_id, &partitions, std::time::Instant::now());
    Ok(Outcome::empty())
}

/// `LEAVE_CONSUMER_GROUP`.
pub(crate) fn leave(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    group: &Identifier,
) -> Result<Outcome, StreamError> {
    let key = key(ctx, stream_id, topic_id, group).ok_or(StreamError::NotFound(Missing::Group))?;
    let partitions = ctx
        .state
        .read(|meta| views::partition_ids(meta, stream_id, topic_id));
    ctx.state
        .groups()
        .leave(key, ctx.client_id, &partitions)
        .map_err(|_| StreamError::NotAMember)?;
    Ok(Outcome::empty())
}

/// `SYNC_CONSUMER_GROUP`: the partitions the caller may poll (not those pending revocation)
/// and the generation (empty body if it is not a member).
pub(crate) fn sync(ctx: Ctx<'_>, stream_id: u32, topic_id: u32, group: &Identifier) -> Outcome {
    let assignment = key(ctx, stream_id, topic_id, group)
        .and_then(|key| ctx.state.groups().assignment(key, ctx.client_id))
        .map(|a| GroupAssignment {
            generation: a.generation,
            partitions: Counted(a.partitions),
        });
    Outcome::payload(&Maybe(assignment))
}
