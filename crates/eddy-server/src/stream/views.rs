//! Reading the metadata: identifier resolution and the entity encodings of replies (stream
//! protocol §5.0.4), built from storage records and live partition counters.
//!
//! Everything here is a pure function of the metadata state and the store's partition
//! counters; nothing writes.

use eddy_codec::stream::codec::{Field as _, LongString, Reader};
use eddy_codec::stream::entities::{
    ClientDetails, ClientGroup, ClientResponse, ConsumerGroupDetails, ConsumerGroupMember,
    ConsumerGroupResponse, PartitionResponse, StreamDetails, StreamResponse, TopicDetails,
    TopicHeader, UserDetails, UserResponse,
};
use eddy_codec::stream::{Identifier, Permissions, WireName};
use eddy_options::topic::{NEVER_EXPIRE, UNLIMITED};
use eddy_options::{Compression, Mode, OptionsBlock, TopicOptions, TopicSettings};
use eddy_stream_store::metadata::{StreamRecord, TopicRecord, UserRecord};
use eddy_stream_store::{MetadataState, PartitionAddr, PartitionStats, StreamStore, TopicConfig};

use super::group_coordinator::{GroupKey, MemberView};

/// A name read back from storage as a wire name. Storage only holds names that were wire names
/// (1..=255 bytes), so the fallback is unreachable in practice.
pub fn wire_name(name: &str) -> WireName {
    WireName::new(name).unwrap_or_else(|_| {
        debug_assert!(false, "stored names are valid wire names: {name:?}");
        WireName::new("?").expect("a one-byte name is a valid wire name")
    })
}

/// The stream an identifier names.
pub fn stream_id(state: &MetadataState, id: &Identifier) -> Option<u32> {
    match id {
        Identifier::Numeric(n) => state.streams.contains_key(n).then_some(*n),
        Identifier::Named(name) => state.stream_by_name(name.as_str()).map(|s| s.id),
    }
}

/// The topic an identifier names within a stream.
pub fn topic_id(state: &MetadataState, stream_id: u32, id: &Identifier) -> Option<u32> {
    let stream = state.stream(stream_id)?;
    match id {
        Identifier::Numeric(n) => stream.topics.contains_key(n).then_some(*n),
        Identifier::Named(name) => stream
            .topics
            .values()
            .find(|t| t.name == name.as_str())
            .map(|t| t.id),
    }
}

/// The consumer group an identifier names within a topic.
pub fn group_id(
    state: &MetadataState,
    stream_id: u32,
    topic_id: u32,
    id: &Identifier,
) -> Option<u32> {
    let topic = state.topic(stream_id, topic_id)?;
    match id {
        Identifier::Numeric(n) => topic.groups.contains_key(n).then_some(*n),
        Identifier::Named(name) => topic
            .groups
            .values()
            .find(|g| g.name == name.as_str())
            .map(|g| g.id),
    }
}

/// The user an identifier names.
pub fn user_id(state: &MetadataState, id: &Identifier) -> Option<u32> {
    match id {
        Identifier::Numeric(n) => state.users.contains_key(n).then_some(*n),
        Identifier::Named(name) => state.user_by_name(name.as_str()).map(|u| u.id),
    }
}

/// A topic's partition ids, ascending.
pub fn partition_ids(state: &MetadataState, stream_id: u32, topic_id: u32) -> Vec<u32> {
    state
        .topic(stream_id, topic_id)
        .map(|t| t.partitions.keys().copied().collect())
        .unwrap_or_default()
}

/// Decodes stored permissions (the codec's encoding, written by this server).
pub fn decode_permissions(bytes: &[u8]) -> Option<Permissions> {
    let decoded = Permissions::take(&mut Reader::new(bytes), "stored permissions");
    debug_assert!(decoded.is_ok(), "stored permissions decode");
    decoded.ok()
}

/// Encodes permissions for storage.
pub fn encode_permissions(permissions: &Permissions) -> Vec<u8> {
    let mut out = Vec::with_capacity(permissions.field_len());
    permissions.put(&mut out);
    out
}

/// The resolved settings of a stored topic.
pub fn settings_of(config: &TopicConfig) -> TopicSettings {
    TopicSettings {
        compression_algorithm: Compression::from_code(config.compression_algorithm)
            .unwrap_or(Compression::None),
        message_expiry: config.message_expiry.unwrap_or(NEVER_EXPIRE),
        max_topic_size: config.max_topic_size.unwrap_or(UNLIMITED),
        segment_size: config.segment_size,
        enforce_fsync: config.enforce_fsync,
        // What the acks imply, unless the topic's explicit options name a word.
        durability_persisted: config.enforce_fsync,
        messages_required_to_save: config.messages_required_to_save,
        size_of_messages_required_to_save: config.size_of_messages_required_to_save,
        preallocate_segments: config.preallocate_segments,
        // Kept in the topic's explicit options only: see `topic_settings`.
        consumer_offset_fsync: TopicSettings::EDDY_DEFAULTS.consumer_offset_fsync,
        fixed_partitions: TopicSettings::EDDY_DEFAULTS.fixed_partitions,
    }
}

/// Every resolved setting of a stored topic: its storage configuration, and the settings kept
/// only in its explicit options (`consumer_offset_durability`, `partition_resize_policy`,
/// whose defaults never change).
pub fn topic_settings(topic: &TopicRecord) -> TopicSettings {
    explicit_options(topic).resolve(&settings_of(&topic.config))
}

/// The storage configuration of resolved settings.
pub fn config_of(settings: &TopicSettings) -> TopicConfig {
    TopicConfig {
        message_expiry: (settings.message_expiry != NEVER_EXPIRE && settings.message_expiry != 0)
            .then_some(settings.message_expiry),
        max_topic_size: (settings.max_topic_size != UNLIMITED && settings.max_topic_size != 0)
            .then_some(settings.max_topic_size),
        segment_size: settings.segment_size,
        enforce_fsync: settings.enforce_fsync,
        messages_required_to_save: settings.messages_required_to_save,
        size_of_messages_required_to_save: settings.size_of_messages_required_to_save,
        preallocate_segments: settings.preallocate_segments,
        compression_algorithm: settings.compression_algorithm.code(),
        replication_factor: 1,
    }
}

/// The options a client explicitly set on a topic (parsed back from the stored block).
pub fn explicit_options(topic: &TopicRecord) -> TopicOptions {
    explicit_options_of(&topic.explicit_options)
}

/// The options of a stored explicit block.
pub fn explicit_options_of(stored: &[u8]) -> TopicOptions {
    OptionsBlock::from_slice(stored)
        .ok()
        .and_then(|block| TopicOptions::parse(&block, Mode::Create).ok())
        .unwrap_or_default()
}

fn block(bytes: &[u8]) -> OptionsBlock {
    OptionsBlock::from_slice(bytes).unwrap_or_default()
}

/// Counters of one partition (zeros if its log is gone).
pub fn partition_stats(store: &StreamStore, addr: PartitionAddr) -> PartitionStats {
    store.partition(addr).map_or(NO_STATS, |p| p.stats())
}

/// Where partition figures come from: a single node's store, or a cluster member's groups
/// (through the stream state).
pub trait Figures {
    /// A partition's figures ([`NO_STATS`] when it has no data here).
    fn figures(&self, addr: PartitionAddr) -> PartitionStats;
}

impl Figures for StreamStore {
    fn figures(&self, addr: PartitionAddr) -> PartitionStats {
        partition_stats(self, addr)
    }
}

impl Figures for super::StreamState {
    fn figures(&self, addr: PartitionAddr) -> PartitionStats {
        self.partition_stats(addr)
    }
}

/// The figures of a partition with no data.
pub const NO_STATS: PartitionStats = PartitionStats {
    first_offset: 0,
    next_offset: 0,
    current_offset: 0,
    messages: 0,
    size_bytes: 0,
    segments: 0,
};

fn topic_totals(
    store: &impl Figures,
    stream_id: u32,
    topic: &TopicRecord,
) -> (Vec<PartitionResponse>, u64, u64) {
    let mut size = 0u64;
    let mut messages = 0u64;
    let partitions = topic
        .partitions
        .values()
        .map(|p| {
            let stats = store.figures(PartitionAddr {
                stream_id,
                topic_id: topic.id,
                partition_id: p.id,
            });
            size += stats.size_bytes;
            messages += stats.messages;
            PartitionResponse {
                id: p.id,
                created_at: p.created_at,
                segments_count: stats.segments.max(1),
                current_offset: stats.current_offset,
                size_bytes: stats.size_bytes,
                messages_count: stats.messages,
            }
        })
        .collect();
    (partitions, size, messages)
}

/// `GetTopicResponse`: the topic header and one entry per partition.
pub fn topic_details(store: &impl Figures, stream_id: u32, topic: &TopicRecord) -> TopicDetails {
    let (partitions, size, messages) = topic_totals(store, stream_id, topic);
    TopicDetails {
        topic: header_of(topic, size, messages),
        partitions,
    }
}

/// The topic header alone.
pub fn topic_header(store: &impl Figures, stream_id: u32, topic: &TopicRecord) -> TopicHeader {
    let (_, size, messages) = topic_totals(store, stream_id, topic);
    header_of(topic, size, messages)
}

fn header_of(topic: &TopicRecord, size_bytes: u64, messages_count: u64) -> TopicHeader {
    let settings = topic_settings(topic);
    let explicit = explicit_options(topic);
    TopicHeader {
        id: topic.id,
        created_at: topic.created_at,
        partitions_count: u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX),
        message_expiry: settings.message_expiry,
        compression_algorithm: settings.compression_algorithm.code(),
        max_topic_size: settings.max_topic_size,
        size_bytes,
        messages_count,
        name: wire_name(&topic.name),
        options: block(&topic.explicit_options),
        derived_options: explicit.derived_block(&settings),
    }
}

/// `StreamResponse` of a stream.
pub fn stream_response(store: &impl Figures, stream: &StreamRecord) -> StreamResponse {
    let mut size = 0;
    let mut messages = 0;
    for topic in stream.topics.values() {
        let (_, s, m) = topic_totals(store, stream.id, topic);
        size += s;
        messages += m;
    }
    StreamResponse {
        id: stream.id,
        created_at: stream.created_at,
        topics_count: u32::try_from(stream.topics.len()).unwrap_or(u32::MAX),
        size_bytes: size,
        messages_count: messages,
        name: wire_name(&stream.name),
        options: super::stream_keys::public_options(&stream.options),
    }
}

/// `GetStreamResponse`: the stream and its topic headers.
pub fn stream_details(store: &impl Figures, stream: &StreamRecord) -> StreamDetails {
    let topics: Vec<TopicHeader> = stream
        .topics
        .values()
        .map(|t| topic_header(store, stream.id, t))
        .collect();
    let mut response = stream_response(store, stream);
    response.size_bytes = topics.iter().map(|t| t.size_bytes).sum();
    response.messages_count = topics.iter().map(|t| t.messages_count).sum();
    StreamDetails {
        stream: response,
        topics,
    }
}

/// `UserResponse` of a user.
pub fn user_response(user: &UserRecord) -> UserResponse {
    UserResponse {
        id: user.id,
        created_at: user.created_at,
        status: eddy_auth::credentials::normalize_status(user.status),
        username: wire_name(&user.username),
        options: block(&user.options),
    }
}

/// `UserDetailsResponse` of a user.
pub fn user_details(user: &UserRecord) -> UserDetails {
    UserDetails {
        user: user_response(user),
        permissions: user.permissions.as_deref().and_then(decode_permissions),
    }
}

/// `ConsumerGroupDetailsResponse` of a group with its live members.
pub fn group_details(
    topic: &TopicRecord,
    group_id: u32,
    name: &str,
    members: &[MemberView],
) -> ConsumerGroupDetails {
    ConsumerGroupDetails {
        group: ConsumerGroupResponse {
            id: group_id,
            partitions_count: u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX),
            members_count: u32::try_from(members.len()).unwrap_or(u32::MAX),
            name: wire_name(name),
        },
        members: members
            .iter()
            .map(|m| ConsumerGroupMember {
                id: m.id,
                partitions: m.partitions.clone(),
            })
            .collect(),
    }
}

/// `ClientDetailsResponse` of a connection.
pub fn client_details(
    info: &eddy_auth::sessions::ClientInfo,
    groups: &[GroupKey],
) -> ClientDetails {
    ClientDetails {
        client: client_response(info, groups.len()),
        groups: groups
            .iter()
            .map(|k| ClientGroup {
                stream_id: k.stream_id,
                topic_id: k.topic_id,
                group_id: k.group_id,
            })
            .collect(),
    }
}

/// `ClientResponse` of a connection.
pub fn client_response(info: &eddy_auth::sessions::ClientInfo, groups: usize) -> ClientResponse {
    ClientResponse {
        client_id: info.client_id,
        user_id: info.user_id(),
        transport: info.transport.code(),
        address: LongString::new(info.address.clone()),
        consumer_groups_count: u32::try_from(groups).unwrap_or(u32::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_options::topic::NEVER_EXPIRE;

    #[test]
    fn settings_round_trip_through_the_storage_config() {
        let defaults = TopicSettings::EDDY_DEFAULTS;
        assert_eq!(settings_of(&config_of(&defaults)), defaults);
        let custom = TopicSettings {
            message_expiry: 5_000_000,
            max_topic_size: 10 << 30,
            enforce_fsync: false,
            // Derived from the acks when the topic's explicit options name no word.
            durability_persisted: false,
            compression_algorithm: Compression::Gzip,
            ..defaults
        };
        let config = config_of(&custom);
        assert_eq!(config.message_expiry, Some(5_000_000));
        assert_eq!(config.max_topic_size, Some(10 << 30));
        assert!(!config.enforce_fsync);
        assert_eq!(settings_of(&config), custom);
        assert_eq!(
            settings_of(&TopicConfig::default()).message_expiry,
            NEVER_EXPIRE
        );
    }

    #[test]
    fn permissions_round_trip() {
        let mut p = Permissions::default();
        p.global.read_servers = true;
        p.streams
            .entry(3)
            .or_default()
            .topics
            .entry(1)
            .or_default()
            .send_messages = true;
        assert_eq!(decode_permissions(&encode_permissions(&p)), Some(p));
    }
}
