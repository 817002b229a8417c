//! The catalog: streams, topics, partitions and segments (stream protocol §5.7-§5.10, §7.1, §7.7).
//!
//! Ids are 0-based: a new stream or topic takes the lowest free id (deleted ids are reused),
//! partitions are `0..n` at creation and continue after the highest id. Picking an id and
//! committing the operation that uses it happen under one lock, so concurrent creates never
//! collide. Topic options are validated with `eddy-options` (unknown key 4041, bad value 4042,
//! `max_topic_size` below the segment size 1019) before anything is written.

use std::sync::Arc;

use eddy_codec::stream::codec::ToEnd;
use eddy_codec::stream::commands::create_stream::CreateStream;
use eddy_codec::stream::commands::create_topic::{CreateTopic, MAX_PARTITIONS_PER_REQUEST};
use eddy_codec::stream::commands::delete_segments::DeleteSegments;
use eddy_codec::stream::commands::get_partition_route::PartitionRoute;
use eddy_codec::stream::commands::get_topics::TopicList;
use eddy_codec::stream::commands::update_stream::UpdateStream;
use eddy_codec::stream::commands::update_topic::UpdateTopic;
use eddy_codec::stream::commands::Maybe;
use eddy_options::{validate_block, Mode, Scope, TopicOptions, TopicSettings};
use eddy_stream_store::metadata::MAX_PARTITIONS_PER_TOPIC;
use eddy_stream_store::Entity;
use eddy_stream_store::{MetadataOp, Operation, PartitionAddr};

use super::handler::{Ctx, Outcome};
use super::{views, MAX_STREAMS, MAX_TOPICS_PER_STREAM};
use eddy_replicated::stream::error::{Missing, StreamError};

/// `GET_STREAM`: the stream and its topic headers (empty body if it is gone).
pub(crate) async fn get_stream(ctx: Ctx<'_>, stream_id: u32) -> Outcome {
    let store = ctx.state;
    store
        .settle_figures(store.partitions_of(Some(stream_id), None))
        .await;
    let details = ctx.state.read(|meta| {
        meta.stream(stream_id)
            .map(|s| views::stream_details(store, s))
    });
    Outcome::payload(&Maybe(details))
}

/// `GET_STREAMS`.
pub(crate) async fn get_streams(ctx: Ctx<'_>) -> Outcome {
    let store = ctx.state;
    store.settle_figures(store.partitions_of(None, None)).await;
    let streams = ctx.state.read(|meta| {
        meta.streams
            .values()
            .map(|s| views::stream_response(store, s))
            .collect()
    });
    Outcome::payload(&ToEnd(streams))
}

/// `CREATE_STREAM`: replies with the new stream; a stream's own `encryption_key` is sealed
/// into its options ([`super::stream_keys`]).
pub(crate) async fn create_stream(
    ctx: Ctx<'_>,
    request: CreateStream,
) -> Result<Outcome, StreamError> {
    // Checked (key length, a server key to seal it) before an id is picked; sealed with the id.
    super::stream_keys::create_options(&request.options.0, 0, ctx.state.stream_keys.as_ref())?;
    let name = request.name.into_string();
    let id = {
        let _creating = ctx.state.creation.lock().await;
        let (id, taken) = ctx.state.read(|meta| {
            (
                meta.lowest_free_stream_id(),
                meta.stream_by_name(&name).is_some(),
            )
        });
        if taken {
            return Err(StreamError::NameTaken {
                entity: Entity::Stream,
                name,
            });
        }
        if id >= MAX_STREAMS {
            return Err(StreamError::TooManyStreams { limit: MAX_STREAMS });
        }
        ctx.state
            .commit(MetadataOp::CreateStream {
                id,
                name,
                created_at: crate::clock::now_micros(),
                options: super::stream_keys::create_options(
                    &request.options.0,
                    id,
                    ctx.state.stream_keys.as_ref(),
                )?,
            })
            .await?;
        id
    };
    let store = ctx.state;
    let details = ctx
        .state
        .read(|meta| meta.stream(id).map(|s| views::stream_details(store, s)))
        .ok_or(StreamError::NotFound(Missing::Stream))?;
    Ok(Outcome::payload(&details))
}

/// `UPDATE_STREAM`: a new name (options: the stream catalog is empty).
pub(crate) async fn update_stream(
    ctx: Ctx<'_>,
    stream_id: u32,
    request: UpdateStream,
) -> Result<Outcome, StreamError> {
    validate_block(Scope::Stream, &request.options.0, Mode::Update)?;
    let options = ctx
        .state
        .read(|meta| meta.stream(stream_id).map(|s| s.options.clone()))
        .ok_or(StreamError::NotFound(Missing::Stream))?;
    ctx.state
        .commit(MetadataOp::UpdateStream {
            id: stream_id,
            name: request.name.into_string(),
            options,
        })
        .await?;
    Ok(Outcome::empty())
}

/// `DELETE_STREAM`: the stream, its topics, partitions, groups and data.
pub(crate) async fn delete_stream(ctx: Ctx<'_>, stream_id: u32) -> Result<Outcome, StreamError> {
    ctx.state
        .commit(MetadataOp::DeleteStream { id: stream_id })
        .await?;
    ctx.state.prune_groups();
    Ok(Outcome::empty())
}

/// `PURGE_STREAM`: every partition of every topic emptied, offsets restart at 0.
pub(crate) async fn purge_stream(ctx: Ctx<'_>, stream_id: u32) -> Result<Outcome, StreamError> {
    ctx.state
        .commit(MetadataOp::PurgeStream { id: stream_id })
        .await?;
    Ok(Outcome::empty())
}

/// `GET_TOPIC`: the topic and its partitions (empty body if it is gone).
pub(crate) async fn get_topic(ctx: Ctx<'_>, stream_id: u32, topic_id: u32) -> Outcome {
    let store = ctx.state;
    store
        .settle_figures(store.partitions_of(Some(stream_id), Some(topic_id)))
        .await;
    let details = ctx.state.read(|meta| {
        meta.topic(stream_id, topic_id)
            .map(|t| views::topic_details(store, stream_id, t))
    });
    Outcome::payload(&Maybe(details))
}

/// `GET_TOPICS`: count-prefixed topic headers.
pub(crate) async fn get_topics(ctx: Ctx<'_>, stream_id: u32) -> Outcome {
    let store = ctx.state;
    store
        .settle_figures(store.partitions_of(Some(stream_id), None))
        .await;
    let topics = ctx.state.read(|meta| {
        meta.stream(stream_id).map_or_else(Vec::new, |s| {
            s.topics
                .values()
                .map(|t| views::topic_header(store, stream_id, t))
                .collect()
        })
    });
    Outcome::payload(&TopicList(topics))
}

/// `CREATE_TOPIC`: options validated and resolved against eddy's defaults; replies with the new
/// topic.
pub(crate) async fn create_topic(
    ctx: Ctx<'_>,
    stream_id: u32,
    request: CreateTopic,
) -> Result<Outcome, StreamError> {
    let options = TopicOptions::parse(&request.options.0, Mode::Create)?;
    if request.partitions_count > MAX_PARTITIONS_PER_REQUEST {
        return Err(StreamError::PartitionsPerRequest {
            count: request.partitions_count,
        });
    }
    let mut settings =
        options.validate_create(request.partitions_count, &TopicSettings::EDDY_DEFAULTS)?;
    // `replicated` acks after fsync unless the operator chose Iggy's meaning; an explicit
    // `enforce_fsync` decides either way.
    if ctx.state.replicated_in_memory
        && options.durability == Some(false)
        && options.enforce_fsync.is_none()
    {
        settings.enforce_fsync = false;
    }
    let name = request.name.into_string();
    let id = {
        let _creating = ctx.state.creation.lock().await;
        let found = ctx.state.read(|meta| {
            let stream = meta.stream(stream_id)?;
            let taken = stream.topics.values().any(|t| t.name == name);
            Some((meta.lowest_free_topic_id(stream_id).unwrap_or(0), taken))
        });
        let (id, taken) = found.ok_or(StreamError::NotFound(Missing::Stream))?;
        if taken {
            return Err(StreamError::NameTaken {
                entity: Entity::Topic,
                name,
            });
        }
        if id >= MAX_TOPICS_PER_STREAM {
            return Err(StreamError::TooManyTopics {
                limit: MAX_TOPICS_PER_STREAM,
            });
        }
        ctx.state
            .commit(MetadataOp::CreateTopic {
                stream_id,
                id,
                name,
                created_at: crate::clock::now_micros(),
                partitions: request.partitions_count,
                config: views::config_of(&settings),
                explicit_options: options.to_block().as_bytes().to_vec(),
                derived_options: options.derived_block(&settings).as_bytes().to_vec(),
            })
            .await?;
        id
    };
    let store = ctx.state;
    let details = ctx
        .state
        .read(|meta| {
            meta.topic(stream_id, id)
                .map(|t| views::topic_details(store, stream_id, t))
        })
        .ok_or(StreamError::NotFound(Missing::Topic))?;
    Ok(Outcome::payload(&details))
}

/// `UPDATE_TOPIC`: name, and patches of the three updatable options.
pub(crate) async fn update_topic(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    request: UpdateTopic,
) -> Result<Outcome, StreamError> {
    let update = TopicOptions::parse(&request.options.0, Mode::Update)?;
    let (current, previous, replication_factor) = ctx
        .state
        .read(|meta| {
            meta.topic(stream_id, topic_id).map(|t| {
                (
                    views::settings_of(&t.config),
                    views::explicit_options(t),
                    t.config.replication_factor,
                )
            })
        })
        .ok_or(StreamError::NotFound(Missing::Topic))?;
    let settings = update.apply_update(&current)?;
    let explicit = TopicOptions {
        compression_algorithm: update
            .compression_algorithm
            .or(previous.compression_algorithm),
        message_expiry: update.message_expiry.or(previous.message_expiry),
        max_topic_size: update.max_topic_size.or(previous.max_topic_size),
        ..previous
    };
    let config = views::config_of(&settings);
    ctx.state
        .commit(MetadataOp::UpdateTopic {
            stream_id,
            topic_id,
            name: request.name.into_string(),
            message_expiry: config.message_expiry,
            max_topic_size: config.max_topic_size,
            compression_algorithm: config.compression_algorithm,
            replication_factor,
            explicit_options: explicit.to_block().as_bytes().to_vec(),
        })
        .await?;
    Ok(Outcome::empty())
}

/// `DELETE_TOPIC`.
pub(crate) async fn delete_topic(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
) -> Result<Outcome, StreamError> {
    ctx.state
        .commit(MetadataOp::DeleteTopic {
            stream_id,
            topic_id,
        })
        .await?;
    ctx.state.prune_groups();
    Ok(Outcome::empty())
}

/// `PURGE_TOPIC`.
pub(crate) async fn purge_topic(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
) -> Result<Outcome, StreamError> {
    ctx.state
        .commit(MetadataOp::PurgeTopic {
            stream_id,
            topic_id,
        })
        .await?;
    Ok(Outcome::empty())
}

fn check_partitions_count(count: u32) -> Result<(), StreamError> {
    if count == 0 || count > MAX_PARTITIONS_PER_REQUEST {
        return Err(StreamError::PartitionsPerRequest { count });
    }
    Ok(())
}

/// After a partition change, the topic's groups deal its partitions again.
fn repartition(ctx: Ctx<'_>, stream_id: u32, topic_id: u32) {
    let ids = ctx
        .state
        .read(|meta| views::partition_ids(meta, stream_id, topic_id));
    ctx.state.groups().repartition(stream_id, topic_id, &ids);
}

/// `CREATE_PARTITIONS`: `count` partitions after the highest id.
pub(crate) async fn create_partitions(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    count: u32,
) -> Result<Outcome, StreamError> {
    check_partitions_count(count)?;
    let (next, fixed) = ctx
        .state
        .read(|meta| {
            meta.topic(stream_id, topic_id).map(|t| {
                let next = t
                    .partitions
                    .keys()
                    .next_back()
                    .map_or(0, |id| u64::from(*id) + 1);
                (next, views::topic_settings(t).fixed_partitions)
            })
        })
        .ok_or(StreamError::NotFound(Missing::Topic))?;
    if fixed {
        return Err(StreamError::FixedPartitions);
    }
    if next + u64::from(count) > u64::from(MAX_PARTITIONS_PER_TOPIC) {
        return Err(StreamError::PartitionIdsExhausted {
            limit: MAX_PARTITIONS_PER_TOPIC,
        });
    }
    ctx.state
        .commit(MetadataOp::CreatePartitions {
            stream_id,
            topic_id,
            count,
            created_at: crate::clock::now_micros(),
        })
        .await?;
    repartition(ctx, stream_id, topic_id);
    Ok(Outcome::empty())
}

/// `DELETE_PARTITIONS`: the `count` highest-numbered partitions and their data.
pub(crate) async fn delete_partitions(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    count: u32,
) -> Result<Outcome, StreamError> {
    check_partitions_count(count)?;
    let (existing, fixed) = ctx
        .state
        .read(|meta| {
            meta.topic(stream_id, topic_id).map(|t| {
                (
                    t.partitions.len(),
                    views::topic_settings(t).fixed_partitions,
                )
            })
        })
        .ok_or(StreamError::NotFound(Missing::Topic))?;
    if fixed {
        return Err(StreamError::FixedPartitions);
    }
    let existing = u32::try_from(existing).unwrap_or(u32::MAX);
    if count > existing {
        return Err(StreamError::NotEnoughPartitions {
            requested: count,
            existing,
        });
    }
    ctx.state
        .commit(MetadataOp::DeletePartitions {
            stream_id,
            topic_id,
            count,
        })
        .await?;
    repartition(ctx, stream_id, topic_id);
    Ok(Outcome::empty())
}

/// `DELETE_SEGMENTS`: the oldest `segments_count` sealed segments (never the active one).
pub(crate) async fn delete_segments(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    request: &DeleteSegments,
) -> Result<Outcome, StreamError> {
    let addr = PartitionAddr {
        stream_id,
        topic_id,
        partition_id: request.partition_id,
    };
    if ctx.state.read(|meta| meta.partition(addr).is_none()) {
        return Err(StreamError::NotFound(Missing::Partition));
    }
    if let Some(cluster) = &ctx.state.cluster {
        cluster
            .delete_segments(addr, request.segments_count)
            .await?;
        return Ok(Outcome::empty());
    }
    let store = Arc::clone(&ctx.state.store);
    let count = request.segments_count;
    // Deleting files is blocking work.
    tokio::task::spawn_blocking(move || {
        store
            .commit(Operation::DeleteSegments { addr, count })
            .wait()
    })
    .await
    .unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()))?;
    Ok(Outcome::empty())
}

/// `GET_PARTITION_ROUTE` (0.12.2 wire): a partition of an existing topic is served here, by
/// this node, in incarnation 1.
pub(crate) fn partition_route(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    partition_id: u32,
) -> Result<Outcome, StreamError> {
    let (count, exists) = ctx
        .state
        .read(|meta| {
            meta.topic(stream_id, topic_id).map(|t| {
                (
                    u32::try_from(t.partitions.len()).unwrap_or(u32::MAX),
                    t.partitions.contains_key(&partition_id),
                )
            })
        })
        .ok_or(StreamError::NotFound(Missing::Topic))?;
    if !exists {
        return Err(StreamError::NotFound(Missing::Partition));
    }
    Ok(Outcome::payload(&PartitionRoute {
        incarnation: 1,
        metadata_op: 0,
        view: 0,
        partitions_count: count,
        primary_replica: 0,
    }))
}
