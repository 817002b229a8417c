//! Messages and consumer offsets (stream protocol §4.5, §4.6, §5.5, §5.6, §7.4, §7.5).
//!
//! `SEND_MESSAGES`: the partition is resolved (explicit id, `Balanced` round-robin per topic, or
//! `XXH32(key) % count`), the batch is admitted (every frame checksum and the batch checksum as
//! received), then storage assigns the base offset and append time and the batch stamps itself
//! ([`Stampable`]); the reply is sent once the append is acknowledged (after fdatasync when the
//! topic has `enforce_fsync`, eddy's default).
//!
//! `POLL_MESSAGES`: storage selects the stored batches covering the range (on the blocking pool:
//! reads may reach the disk); whole batches go out
//! as stored (zero copy), a batch cut by the range goes out as a server-sliced view (new header,
//! frames shared). Auto-commit stores the last served offset, never moving it backwards.
//! A deferred poll or a fetch also bounds the records by its `max_bytes` ([`ByteBudget`]):
//! a batch is cut at the last message that fits, and the reply's first message goes out
//! alone when it alone is larger.
//!
//! Consumer kind 1 keys offsets by its numeric id (or `XXH32(name)`); kind 2 keys them by the
//! consumer group, and a group member may only poll or commit partitions it owns: a poll of a
//! partition it does not own, or owns but is pending revocation (it may still commit it), is
//! answered with the re-sync sentinel (`partition_id = u32::MAX`, no messages), which makes the
//! SDK sync and retry. Group polls and commits are reported to the coordinator, which hands a
//! pending partition over once its owner has committed what it polled.

use std::sync::Arc;

use bytes::Bytes;
use eddy_codec::stream::commands::delete_consumer_offset::DeleteConsumerOffset;
use eddy_codec::stream::commands::fetch_messages::{
    FetchMessages, FetchMessagesReply, FetchSection, FetchTarget,
};
use eddy_codec::stream::commands::get_consumer_offset::{ConsumerOffsetInfo, GetConsumerOffset};
use eddy_codec::stream::commands::poll_messages::{
    PollMessages, PollMessagesReply, RESYNC_PARTITION,
};
use eddy_codec::stream::commands::poll_messages_deferred::{
    PollMessagesDeferred, MAX_WAIT_US, REPLY_PREFIX_LEN,
};
use eddy_codec::stream::commands::send_messages::SendMessages;
use eddy_codec::stream::commands::store_consumer_offset::StoreConsumerOffset;
use eddy_codec::stream::commands::Maybe;
use eddy_codec::stream::v0_12::PartitionContext;
use eddy_codec::stream::{admit, Consumer, ConsumerKind, Partitioning, PollingStrategy};
use eddy_codec::stream::{PollRecord, WireDecode};
use eddy_replicated::stream::{send_reply, Stampable};
use eddy_stream_store::{ConsumerKey, MetadataOp, PartitionAddr, PollStrategy, Polled};

use super::group_coordinator::GroupKey;
use super::handler::{Ctx, Outcome};
use super::{views, MAX_POLL_BYTES};
use eddy_replicated::stream::error::{Missing, StreamError};

/// `SEND_MESSAGES`.
pub(crate) async fn send(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    request: SendMessages,
) -> Result<Outcome, StreamError> {
    let state = ctx.state;
    let partition_id = state.read(|meta| {
        let topic = meta
            .topic(stream_id, topic_id)
            .ok_or(StreamError::NotFound(Missing::Topic))?;
        let count = u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX);
        let nth = |i: u32| {
            topic
                .partitions
                .keys()
                .nth(i as usize)
                .copied()
                .ok_or(StreamError::NotFound(Missing::Partition))
        };
        match &request.partitioning {
            Partitioning::PartitionId(id) => topic
                .partitions
                .contains_key(id)
                .then_some(*id)
                .ok_or(StreamError::NotFound(Missing::Partition)),
            Partitioning::Balanced if count > 0 => {
                nth(state.next_balanced(stream_id, topic_id, count))
            }
            Partitioning::MessagesKey(key) if count > 0 => {
                nth(Partitioning::partition_for_key(key, count).unwrap_or(0))
            }
            _ => Err(StreamError::NotFound(Missing::Partition)),
        }
    })?;
    // Only the batch is kept from here on, so stamping can usually rewrite it in place.
    let SendMessages {
        batch,
        messages_count,
        ..
    } = request;
    let admitted = admit(batch, messages_count)?;
    let addr = PartitionAddr {
        stream_id,
        topic_id,
        partition_id,
    };
    // Submitted inline unless this server has so many bytes in flight that the partition's
    // log may push back (then from the blocking pool); the acknowledgement is awaited.
    if let Some(cluster) = &state.cluster {
        // Appended by the partition's leader: here, or the member it is forwarded to (or
        // here after all, when the leadership arrived meanwhile).
        let base_offset = loop {
            if cluster.appends_here(addr) {
                break cluster
                    .append(addr, Stampable(admitted), crate::clock::now_micros())
                    .await?
                    .base_offset;
            }
            match cluster
                .forward_append(addr, admitted.message_count(), admitted.as_bytes())
                .await
            {
                Err(eddy_replicated::stream::error::ClusterError::NotLeader(_))
                    if cluster.appends_here(addr) => {}
                forwarded => break forwarded?,
            }
        };
        return Ok(Outcome::payload(&send_reply(addr, base_offset)));
    }
    let (_in_flight, offload) = state.appends.enter(admitted.len() as u64);
    let ticket = if offload {
        let store = Arc::clone(&state.store);
        crate::offload::blocking(move || {
            store.append(addr, Stampable(admitted), crate::clock::now_micros())
        })
        .await?
    } else {
        state
            .store
            .append(addr, Stampable(admitted), crate::clock::now_micros())?
    };
    let appended = ticket.await?;
    Ok(Outcome::payload(&send_reply(addr, appended.base_offset)))
}

fn strategy(strategy: PollingStrategy) -> PollStrategy {
    match strategy {
        PollingStrategy::Offset(o) => PollStrategy::Offset(o),
        PollingStrategy::Timestamp(t) => PollStrategy::Timestamp(t),
        PollingStrategy::First => PollStrategy::First,
        PollingStrategy::Last => PollStrategy::Last,
        PollingStrategy::Next => PollStrategy::Next,
    }
}

/// A group's id and key, or `NotFound(Group)`.
fn group(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    consumer: &Consumer,
) -> Result<GroupKey, StreamError> {
    let group_id = ctx
        .state
        .read(|meta| views::group_id(meta, stream_id, topic_id, &consumer.id))
        .ok_or(StreamError::NotFound(Missing::Group))?;
    Ok(GroupKey {
        stream_id,
        topic_id,
        group_id,
    })
}

fn poll_reply(
    partition_id: u32,
    current_offset: u64,
    count: u32,
    mut records: Vec<Bytes>,
) -> Outcome {
    let prefix = PollMessagesReply::encode_prefix(partition_id, current_offset, count);
    records.insert(0, Bytes::copy_from_slice(&prefix));
    Outcome::Reply(records)
}

/// A group member's poll of one partition, from the ownership check to its end: while it
/// runs the partition counts as in flight for cooperative rebalancing, and dropping it records
/// the last offset served and left uncommitted (also when the poll fails or is cancelled).
struct GroupPoll<'a> {
    state: &'a super::StreamState,
    key: GroupKey,
    client_id: u32,
    partition_id: u32,
    uncommitted: Option<u64>,
}

impl Drop for GroupPoll<'_> {
    fn drop(&mut self) {
        self.state.groups().end_poll(
            self.key,
            self.client_id,
            self.partition_id,
            self.uncommitted,
        );
    }
}

/// How often a deferred poll looks again while it waits.
const DEFERRED_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(20);

/// The message count in a poll reply's prefix (`[partition u32][offset u64][count u32]`).
fn polled_count(outcome: &Outcome) -> u32 {
    match outcome {
        Outcome::Reply(chunks) => chunks
            .first()
            .and_then(|prefix| prefix.get(12..16))
            .and_then(|count| count.try_into().ok())
            .map_or(0, u32::from_le_bytes),
        Outcome::Evict(_) | Outcome::NoReply => 0,
    }
}

/// `POLL_MESSAGES_DEFERRED` (0.12.2 wire): looks without committing until `min_count`
/// messages are there or the wait is over, then polls once as `POLL_MESSAGES` would (an
/// auto-commit commits only what that poll serves).
pub(crate) async fn poll_deferred(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    request: PollMessagesDeferred,
) -> Result<Outcome, StreamError> {
    if !request.is_valid() {
        return Err(StreamError::Decode(
            eddy_codec::stream::CodecError::InvalidValue {
                field: "deferred poll",
                offset: 0,
                reason: "wait, counts, byte limit or request timeout out of bounds",
            },
        ));
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_micros(request.wait_us);
    if request.wait_us > 0 {
        let look = PollMessages {
            auto_commit: false,
            ..request.poll.clone()
        };
        loop {
            let seen = polled_count(&poll(ctx, stream_id, topic_id, look.clone()).await?);
            if seen >= request.min_count || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(DEFERRED_POLL_INTERVAL.min(deadline - tokio::time::Instant::now()))
                .await;
        }
    }
    // `max_bytes` counts the reply's 40-byte prefix too.
    let budget = ByteBudget {
        records: u64::from(request.max_bytes - REPLY_PREFIX_LEN),
        first_may_exceed: true,
    };
    Ok(poll_within(ctx, stream_id, topic_id, request.poll, budget)
        .await?
        .0)
}

/// `FETCH_MESSAGES` (0.12.2 wire): waits like a deferred poll until the targets hold
/// `min_count` messages together, then polls each target in turn (each with what is left of
/// `count`) and answers one section per target read: its poll reply's figures and records, or
/// the error code of its partition.
pub(crate) async fn fetch(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    request: FetchMessages,
) -> Result<Outcome, StreamError> {
    let targets = &request.targets.0;
    if !fetch_is_valid(&request) {
        return Err(StreamError::Decode(
            eddy_codec::stream::CodecError::InvalidValue {
                field: "fetch",
                offset: 0,
                reason: "targets (unique, at least one), counts or byte limits out of bounds",
            },
        ));
    }
    let read = |target: &FetchTarget, count: u32, auto_commit: bool| PollMessages {
        consumer: request.consumer.clone(),
        stream_id: eddy_codec::stream::Identifier::numeric(stream_id),
        topic_id: eddy_codec::stream::Identifier::numeric(topic_id),
        partition: eddy_codec::stream::OptionalPartition(Some(target.partition_id)),
        strategy: target.strategy,
        count,
        auto_commit,
    };
    let wait = std::time::Duration::from_micros(request.wait_us.min(MAX_WAIT_US));
    let deadline = tokio::time::Instant::now() + wait;
    if request.wait_us > 0 {
        loop {
            let mut seen = 0u32;
            for target in targets {
                if let Ok(outcome) =
                    poll(ctx, stream_id, topic_id, read(target, request.count, false)).await
                {
                    seen = seen.saturating_add(polled_count(&outcome));
                }
            }
            if seen >= request.min_count || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(DEFERRED_POLL_INTERVAL.min(deadline - tokio::time::Instant::now()))
                .await;
        }
    }
    let mut reply = FetchMessagesReply::default();
    let mut left = request.count;
    let mut bytes_left = u64::from(request.max_bytes);
    for target in targets {
        if left == 0 {
            break;
        }
        // A section's records stay within its target's limit and what the reply has left;
        // only the reply's first message may go over, alone.
        let budget = ByteBudget {
            records: bytes_left.min(u64::from(target.max_bytes)),
            first_may_exceed: reply.sections.iter().all(|s| s.messages_count == 0),
        };
        let section = match poll_within(
            ctx,
            stream_id,
            topic_id,
            read(target, left, request.auto_commit),
            budget,
        )
        .await
        {
            // Nothing fitted what is left: no section, the target keeps its position.
            Ok((outcome, true)) if polled_count(&outcome) == 0 => continue,
            Ok((Outcome::Reply(chunks), _)) => {
                let (section, records) = fetched_section(target, &chunks)?;
                left = left.saturating_sub(section.messages_count);
                bytes_left = bytes_left.saturating_sub(records.len() as u64);
                reply.records.push(records);
                section
            }
            Ok((other @ (Outcome::Evict(_) | Outcome::NoReply), _)) => return Ok(other),
            Err(error) => FetchSection {
                partition_id: target.partition_id,
                status: error.code().code(),
                current_offset: 0,
                messages_count: 0,
                context: PartitionContext::EDDY,
                next_offset: 0,
                records_len: 0,
            },
        };
        if section.records_len == 0 && section.status != 0 {
            reply.records.push(Bytes::new());
        }
        reply.sections.push(section);
    }
    Ok(Outcome::Reply(reply.chunks()))
}

/// Whether a fetch names at least one target and no partition twice, and its counts and byte
/// limits are within bounds.
fn fetch_is_valid(request: &FetchMessages) -> bool {
    let targets = &request.targets.0;
    let unique = targets.iter().enumerate().all(|(i, t)| {
        targets[..i]
            .iter()
            .all(|o| o.partition_id != t.partition_id)
    });
    !targets.is_empty()
        && unique
        && request.count != 0
        && request.min_count != 0
        && request.min_count <= request.count
        && request.byte_limits_valid()
}

/// A fetch section from the poll reply (`chunks`) of `target`, with its records: the poll's
/// figures, and the offset the target's next read starts from.
fn fetched_section(
    target: &FetchTarget,
    chunks: &[Bytes],
) -> Result<(FetchSection, Bytes), StreamError> {
    let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let polled = PollMessagesReply::decode(&joined)?;
    let last = polled
        .records
        .iter()
        .flat_map(PollRecord::messages)
        .map(|m| m.offset)
        .last();
    let next_offset = match (last, target.strategy) {
        (Some(last), _) => last + 1,
        (None, PollingStrategy::Offset(offset)) => offset,
        (None, _) if polled.messages_count == 0 && polled.current_offset == 0 => 0,
        (None, _) => polled.current_offset + 1,
    };
    let records_len = joined.len() - 16;
    let section = FetchSection {
        partition_id: target.partition_id,
        status: 0,
        current_offset: polled.current_offset,
        messages_count: polled.messages_count,
        context: PartitionContext::EDDY,
        next_offset,
        records_len: u32::try_from(records_len).unwrap_or(u32::MAX),
    };
    Ok((section, Bytes::copy_from_slice(&joined[16..])))
}

/// The record bytes a poll may answer with (`max_bytes` of a deferred poll or a fetch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByteBudget {
    /// Bytes of batch headers and frames.
    pub records: u64,
    /// Whether a first message larger than `records` goes out alone (a read always makes
    /// progress); otherwise it is withheld.
    pub first_may_exceed: bool,
}

impl ByteBudget {
    /// No limit but [`MAX_POLL_BYTES`] (`POLL_MESSAGES`, every revision).
    pub const UNLIMITED: Self = Self {
        records: u64::MAX,
        first_may_exceed: true,
    };
}

/// `POLL_MESSAGES`.
pub(crate) async fn poll(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    request: PollMessages,
) -> Result<Outcome, StreamError> {
    Ok(
        poll_within(ctx, stream_id, topic_id, request, ByteBudget::UNLIMITED)
            .await?
            .0,
    )
}

/// A poll whose records stay within `budget`; also says whether messages in range were
/// withheld for the budget (their offsets are not served, nor committed).
pub(crate) async fn poll_within(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    request: PollMessages,
    budget: ByteBudget,
) -> Result<(Outcome, bool), StreamError> {
    let mut group_poll = None;
    let (consumer, partition_id) = match request.consumer.kind {
        ConsumerKind::Consumer => (
            ConsumerKey::Consumer(request.consumer.numeric_key()),
            request.partition.0.unwrap_or(0),
        ),
        ConsumerKind::ConsumerGroup => {
            let key = group(ctx, stream_id, topic_id, &request.consumer)?;
            let mut groups = ctx.state.groups();
            let partition = match request.partition.0 {
                Some(p) => p,
                None => match groups.next_partition(key, ctx.client_id) {
                    Ok(Some(p)) => p,
                    Ok(None) => return Ok((poll_reply(0, 0, 0, Vec::new()), false)),
                    Err(_) => return Err(StreamError::NotAMember),
                },
            };
            // Not owned, or pending revocation: the SDK re-syncs.
            if !groups.begin_poll(key, ctx.client_id, partition) {
                return Ok((poll_reply(RESYNC_PARTITION, 0, 0, Vec::new()), false));
            }
            drop(groups);
            group_poll = Some(GroupPoll {
                state: ctx.state,
                key,
                client_id: ctx.client_id,
                partition_id: partition,
                uncommitted: None,
            });
            (ConsumerKey::Group(key.group_id), partition)
        }
        // It only holds offsets.
        ConsumerKind::ExternalGroup => return Err(StreamError::ExternalGroupPoll),
    };
    let addr = PartitionAddr {
        stream_id,
        topic_id,
        partition_id,
    };
    if ctx.state.read(|meta| meta.partition(addr).is_none()) {
        return Err(StreamError::NotFound(Missing::Partition));
    }
    // Reads may reach the disk: off the reactor.
    let (strategy, count) = (strategy(request.strategy), request.count);
    // The store stops reading once it holds this much (a batch crossing it included).
    let read_bytes = MAX_POLL_BYTES.min(budget.records);
    let polled = if let Some(cluster) = ctx.state.cluster.clone() {
        // Every batch acknowledged before the poll arrived is served (see
        // `ClusterStreams::linearize_partition`).
        cluster.linearize_partition(addr).await?;
        tokio::task::spawn_blocking(move || {
            cluster.poll(addr, Some(consumer), strategy, count, read_bytes)
        })
        .await
        .unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()))?
    } else {
        let store = std::sync::Arc::clone(&ctx.state.store);
        tokio::task::spawn_blocking(move || {
            store.poll(addr, Some(consumer), strategy, count, read_bytes)
        })
        .await
        .unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()))?
    };
    let Served {
        records,
        count: served,
        last,
        withheld,
    } = serve_within(&polled, budget)?;
    if let Some(group_poll) = &mut group_poll {
        group_poll.uncommitted = last;
    }
    if let (true, Some(last)) = (request.auto_commit, last) {
        ctx.state
            .commit(MetadataOp::StoreConsumerOffset {
                addr,
                consumer,
                offset: last,
                forward_only: true,
            })
            .await?;
        // The stored offset is now at least `last`.
        if let Some(group_poll) = &mut group_poll {
            group_poll.uncommitted = None;
        }
    }
    drop(group_poll);
    Ok((
        poll_reply(polled.partition_id, polled.current_offset, served, records),
        withheld,
    ))
}

/// What a poll serves of a [`Polled`] range within its [`ByteBudget`].
struct Served {
    /// Whole stored batches, or a sliced batch's header and frames.
    records: Vec<Bytes>,
    /// Messages served.
    count: u32,
    /// The last offset served.
    last: Option<u64>,
    /// Whether messages in range were withheld for the budget.
    withheld: bool,
}

/// The records of `polled`'s range within `budget`: a stored batch as it is when it lies
/// wholly in range and fits, else the slice of it that does (the first message alone if the
/// budget lets it exceed).
fn serve_within(polled: &Polled, budget: ByteBudget) -> Result<Served, StreamError> {
    let mut records = Vec::with_capacity(polled.batches.len() * 2);
    let mut served = 0u32;
    let mut used = 0u64;
    let mut last = None;
    let mut withheld = false;
    for batch in &polled.batches {
        let start = polled.start_offset.max(batch.base_offset);
        let end = polled.end_offset.min(batch.end_offset());
        if start >= end {
            continue;
        }
        let room = budget.records.saturating_sub(used);
        if start == batch.base_offset
            && end == batch.end_offset()
            && batch.bytes.len() as u64 <= room
        {
            records.push(batch.bytes.clone());
            served += batch.message_count;
            used += batch.bytes.len() as u64;
            last = Some(end - 1);
            continue;
        }
        let stored = eddy_codec::stream::StoredBatch::parse(batch.bytes.clone())?;
        let take = u32::try_from(end - start).unwrap_or(u32::MAX);
        let fitting = if room == u64::MAX {
            take
        } else {
            stored.fitting(start, take, room)?
        };
        let fit = match fitting {
            0 if served == 0 && budget.first_may_exceed => 1,
            fit => fit,
        };
        if fit == 0 {
            withheld = true;
            break;
        }
        let record = stored.slice(start, fit)?;
        served += record.message_count();
        used += record.len() as u64;
        last = Some(start + u64::from(record.message_count()) - 1);
        records.push(record.header_bytes().clone());
        records.push(record.frames().clone());
        if fit < take {
            withheld = true;
            break;
        }
    }
    Ok(Served {
        records,
        count: served,
        last,
        withheld,
    })
}

/// The consumer key of an offset request (and its group), checking group ownership when
/// `owned` is asked for.
fn offset_owner(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    consumer: &Consumer,
    partition_id: u32,
    owned: bool,
) -> Result<(ConsumerKey, Option<GroupKey>), StreamError> {
    match consumer.kind {
        ConsumerKind::Consumer => Ok((ConsumerKey::Consumer(consumer.numeric_key()), None)),
        ConsumerKind::ConsumerGroup => {
            let key = group(ctx, stream_id, topic_id, consumer)?;
            if owned && !ctx.state.groups().owns(key, ctx.client_id, partition_id) {
                return Err(StreamError::PartitionNotOwned { partition_id });
            }
            Ok((ConsumerKey::Group(key.group_id), Some(key)))
        }
        // The group's offsets, kept for members managed elsewhere: no membership check.
        ConsumerKind::ExternalGroup => {
            let key = group(ctx, stream_id, topic_id, consumer)?;
            Ok((ConsumerKey::Group(key.group_id), None))
        }
    }
}

/// `GET_CONSUMER_OFFSET`: empty body when nothing is stored (or the group is unknown).
pub(crate) async fn get_offset(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    request: &GetConsumerOffset,
) -> Result<Outcome, StreamError> {
    let partition_id = request.partition.0.unwrap_or(0);
    let addr = PartitionAddr {
        stream_id,
        topic_id,
        partition_id,
    };
    if ctx.state.read(|meta| meta.partition(addr).is_none()) {
        return Err(StreamError::NotFound(Missing::Partition));
    }
    let Ok((consumer, _)) = offset_owner(
        ctx,
        stream_id,
        topic_id,
        &request.consumer,
        partition_id,
        false,
    ) else {
        return Ok(Outcome::empty());
    };
    ctx.state.settle_figures([addr]).await;
    let info = ctx
        .state
        .consumer_offset(addr, consumer)
        .map(|stored| ConsumerOffsetInfo {
            partition_id,
            current_offset: ctx.state.partition_stats(addr).current_offset,
            stored_offset: stored,
        });
    Ok(Outcome::payload(&Maybe(info)))
}

/// The partition an offset write addresses (it must be given and exist).
fn offset_partition(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    partition: Option<u32>,
) -> Result<PartitionAddr, StreamError> {
    let partition_id = partition.ok_or(StreamError::PartitionRequired)?;
    let addr = PartitionAddr {
        stream_id,
        topic_id,
        partition_id,
    };
    if ctx.state.read(|meta| meta.partition(addr).is_none()) {
        return Err(StreamError::NotFound(Missing::Partition));
    }
    Ok(addr)
}

/// `STORE_CONSUMER_OFFSET`: may rewind; may not pass the partition's newest offset.
pub(crate) async fn store_offset(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    request: StoreConsumerOffset,
) -> Result<Outcome, StreamError> {
    let addr = offset_partition(ctx, stream_id, topic_id, request.partition.0)?;
    let (consumer, group) = offset_owner(
        ctx,
        stream_id,
        topic_id,
        &request.consumer,
        addr.partition_id,
        true,
    )?;
    let stats = ctx.state.partition_stats(addr);
    // An external group's offsets are its own system's positions: no range check.
    let external = request.consumer.kind == ConsumerKind::ExternalGroup;
    if !external && (stats.messages == 0 || request.offset > stats.current_offset) {
        return Err(StreamError::InvalidOffset {
            offset: request.offset,
        });
    }
    ctx.state
        .commit(MetadataOp::StoreConsumerOffset {
            addr,
            consumer,
            offset: request.offset,
            forward_only: false,
        })
        .await?;
    if let Some(key) = group {
        ctx.state
            .groups()
            .committed(key, ctx.client_id, addr.partition_id, request.offset);
    }
    Ok(Outcome::empty())
}

/// `DELETE_CONSUMER_OFFSET`.
pub(crate) async fn delete_offset(
    ctx: Ctx<'_>,
    stream_id: u32,
    topic_id: u32,
    request: DeleteConsumerOffset,
) -> Result<Outcome, StreamError> {
    let addr = offset_partition(ctx, stream_id, topic_id, request.partition.0)?;
    let (consumer, _) = offset_owner(
        ctx,
        stream_id,
        topic_id,
        &request.consumer,
        addr.partition_id,
        true,
    )?;
    ctx.state
        .commit(MetadataOp::DeleteConsumerOffset { addr, consumer })
        .await?;
    Ok(Outcome::empty())
}
