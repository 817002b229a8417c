//! Entity encodings reused by several replies (spec §5.0.4).

use eddy_options::OptionsBlock;

use super::codec::{wire_struct, Field, LongString, Reader};
use super::error::CodecError;
use super::name::WireName;
use super::permissions::{take_sized_permissions, Permissions};

wire_struct! {
    /// `StreamResponse`: one stream in a list or a detail reply.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct StreamResponse {
        /// 0-based id.
        pub id: u32,
        /// Creation time, µs.
        pub created_at: u64,
        /// Number of topics (and of topic headers in `GetStreamResponse`).
        pub topics_count: u32,
        /// Sum of stored message bytes.
        pub size_bytes: u64,
        /// Messages stored.
        pub messages_count: u64,
        /// Name.
        pub name: WireName,
        /// Stream options: empty, or the projections of a stream's own key (the 0.12.2 layout
        /// moves them to its derived block).
        pub options: OptionsBlock,
    }
}

wire_struct! {
    /// `TopicHeader`: one topic in stream details, topic details and topic lists.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct TopicHeader {
        /// 0-based id within the stream.
        pub id: u32,
        /// Creation time, µs.
        pub created_at: u64,
        /// Partition count (and number of partition entries in `TopicDetails`).
        pub partitions_count: u32,
        /// Resolved retention, µs (0 / `u64::MAX` sentinels).
        pub message_expiry: u64,
        /// 1 none, 2 gzip (the SDK rejects other values).
        pub compression_algorithm: u8,
        /// Resolved size cap (0 / `u64::MAX` sentinels).
        pub max_topic_size: u64,
        /// Stored bytes.
        pub size_bytes: u64,
        /// Stored messages.
        pub messages_count: u64,
        /// Name.
        pub name: WireName,
        /// Options the client set.
        pub options: OptionsBlock,
        /// Defaults filled in at create.
        pub derived_options: OptionsBlock,
    }
}

wire_struct! {
    /// `PartitionResponse` (40 bytes).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct PartitionResponse {
        /// 0-based id.
        pub id: u32,
        /// Creation time, µs.
        pub created_at: u64,
        /// Segments (at least 1).
        pub segments_count: u32,
        /// Offset of the newest message (0 when empty).
        pub current_offset: u64,
        /// Stored bytes.
        pub size_bytes: u64,
        /// Stored messages.
        pub messages_count: u64,
    }
}

/// Stream details: a stream and exactly `topics_count` topic headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamDetails {
    /// The stream; its `topics_count` must equal `topics.len()`.
    pub stream: StreamResponse,
    /// The topics.
    pub topics: Vec<TopicHeader>,
}

impl Field for StreamDetails {
    fn field_len(&self) -> usize {
        self.stream.field_len() + self.topics.iter().map(Field::field_len).sum::<usize>()
    }

    fn put(&self, out: &mut Vec<u8>) {
        debug_assert_eq!(self.stream.topics_count as usize, self.topics.len());
        self.stream.put(out);
        for topic in &self.topics {
            topic.put(out);
        }
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let stream = StreamResponse::take(reader, name)?;
        let count = bounded(stream.topics_count, reader, 50, name)?;
        let mut topics = Vec::with_capacity(count);
        for _ in 0..count {
            topics.push(TopicHeader::take(reader, name)?);
        }
        Ok(Self { stream, topics })
    }
}

/// Topic details: a topic header and exactly `partitions_count` partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDetails {
    /// The topic; its `partitions_count` must equal `partitions.len()`.
    pub topic: TopicHeader,
    /// The partitions.
    pub partitions: Vec<PartitionResponse>,
}

impl Field for TopicDetails {
    fn field_len(&self) -> usize {
        self.topic.field_len() + 40 * self.partitions.len()
    }

    fn put(&self, out: &mut Vec<u8>) {
        debug_assert_eq!(self.topic.partitions_count as usize, self.partitions.len());
        self.topic.put(out);
        for partition in &self.partitions {
            partition.put(out);
        }
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let topic = TopicHeader::take(reader, name)?;
        let count = bounded(topic.partitions_count, reader, 40, name)?;
        let mut partitions = Vec::with_capacity(count);
        for _ in 0..count {
            partitions.push(PartitionResponse::take(reader, name)?);
        }
        Ok(Self { topic, partitions })
    }
}

/// Checks a count taken from an already-decoded field against the remaining bytes.
fn bounded(
    count: u32,
    reader: &Reader<'_>,
    min_item: usize,
    name: &'static str,
) -> Result<usize, CodecError> {
    let count = count as usize;
    if count > reader.remaining() / min_item {
        return Err(CodecError::Truncated {
            field: name,
            offset: reader.position(),
            need: count.saturating_mul(min_item),
            have: reader.remaining(),
        });
    }
    Ok(count)
}

wire_struct! {
    /// `UserResponse`: one user in a list.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct UserResponse {
        /// 0-based id (root is 0).
        pub id: u32,
        /// Creation time, µs.
        pub created_at: u64,
        /// 1 active, 2 inactive.
        pub status: u8,
        /// Username.
        pub username: WireName,
        /// User options (always empty today).
        pub options: OptionsBlock,
    }
}

/// `UserDetailsResponse`: a user and its permissions, encoded asymmetrically: no permissions
/// is `00 00 00 00`; with permissions `[01][len: u32][permissions]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDetails {
    /// The user.
    pub user: UserResponse,
    /// Its permissions.
    pub permissions: Option<Permissions>,
}

impl Field for UserDetails {
    fn field_len(&self) -> usize {
        self.user.field_len() + self.permissions.as_ref().map_or(4, |p| 5 + p.field_len())
    }

    fn put(&self, out: &mut Vec<u8>) {
        self.user.put(out);
        match &self.permissions {
            Some(permissions) => {
                out.push(1);
                out.extend_from_slice(&(permissions.field_len() as u32).to_le_bytes());
                permissions.put(out);
            }
            None => out.extend_from_slice(&[0; 4]),
        }
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let user = UserResponse::take(reader, name)?;
        let permissions = if reader.u8(name)? == 0 {
            reader.bytes(3, name)?;
            None
        } else {
            Some(take_sized_permissions(reader, name)?)
        };
        Ok(Self { user, permissions })
    }
}

wire_struct! {
    /// `ClientResponse`: one connection.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ClientResponse {
        /// Server-chosen per-connection id.
        pub client_id: u32,
        /// Logged-in user, `u32::MAX` when not logged in.
        pub user_id: u32,
        /// 1 TCP, 2 QUIC, 3 HTTP, 4 WebSocket.
        pub transport: u8,
        /// Peer `ip:port`.
        pub address: LongString,
        /// Consumer groups the session is a member of.
        pub consumer_groups_count: u32,
    }
}

wire_struct! {
    /// One membership in `ClientDetails`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct ClientGroup {
        /// Stream id.
        pub stream_id: u32,
        /// Topic id.
        pub topic_id: u32,
        /// Group id.
        pub group_id: u32,
    }
}

/// `ClientDetailsResponse`: a client and exactly `consumer_groups_count` memberships.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientDetails {
    /// The client; `consumer_groups_count` must equal `groups.len()`.
    pub client: ClientResponse,
    /// Its group memberships.
    pub groups: Vec<ClientGroup>,
}

impl Field for ClientDetails {
    fn field_len(&self) -> usize {
        self.client.field_len() + 12 * self.groups.len()
    }

    fn put(&self, out: &mut Vec<u8>) {
        debug_assert_eq!(
            self.client.consumer_groups_count as usize,
            self.groups.len()
        );
        self.client.put(out);
        for group in &self.groups {
            group.put(out);
        }
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let client = ClientResponse::take(reader, name)?;
        let count = bounded(client.consumer_groups_count, reader, 12, name)?;
        let mut groups = Vec::with_capacity(count);
        for _ in 0..count {
            groups.push(ClientGroup::take(reader, name)?);
        }
        Ok(Self { client, groups })
    }
}

wire_struct! {
    /// `ConsumerGroupResponse`: one group in a list.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ConsumerGroupResponse {
        /// 0-based id within the topic.
        pub id: u32,
        /// The topic's partition count.
        pub partitions_count: u32,
        /// Members.
        pub members_count: u32,
        /// Name.
        pub name: WireName,
    }
}

/// One member of a group and its assigned partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupMember {
    /// Member id.
    pub id: u32,
    /// Assigned partition ids (the count is written before them).
    pub partitions: Vec<u32>,
}

impl Field for ConsumerGroupMember {
    fn field_len(&self) -> usize {
        8 + 4 * self.partitions.len()
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&(self.partitions.len() as u32).to_le_bytes());
        for id in &self.partitions {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let id = reader.u32(name)?;
        let count = reader.count(name, 4)?;
        let mut partitions = Vec::with_capacity(count);
        for _ in 0..count {
            partitions.push(reader.u32(name)?);
        }
        Ok(Self { id, partitions })
    }
}

/// `ConsumerGroupDetailsResponse`: a group and exactly `members_count` members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupDetails {
    /// The group; `members_count` must equal `members.len()`.
    pub group: ConsumerGroupResponse,
    /// The members.
    pub members: Vec<ConsumerGroupMember>,
}

impl Field for ConsumerGroupDetails {
    fn field_len(&self) -> usize {
        self.group.field_len() + self.members.iter().map(Field::field_len).sum::<usize>()
    }

    fn put(&self, out: &mut Vec<u8>) {
        debug_assert_eq!(self.group.members_count as usize, self.members.len());
        self.group.put(out);
        for member in &self.members {
            member.put(out);
        }
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let group = ConsumerGroupResponse::take(reader, name)?;
        let count = bounded(group.members_count, reader, 8, name)?;
        let mut members = Vec::with_capacity(count);
        for _ in 0..count {
            members.push(ConsumerGroupMember::take(reader, name)?);
        }
        Ok(Self { group, members })
    }
}

super::codec::body_via_field!(
    StreamDetails,
    TopicDetails,
    UserDetails,
    ClientDetails,
    ConsumerGroupMember,
    ConsumerGroupDetails
);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::stream::codec::{WireDecode, WireEncode};

    pub(crate) fn stream(id: u32, name: &str, topics_count: u32) -> StreamResponse {
        StreamResponse {
            id,
            created_at: 1_700_000_000_000_000,
            topics_count,
            size_bytes: 0,
            messages_count: 0,
            name: WireName::new(name).unwrap(),
            options: OptionsBlock::empty(),
        }
    }

    /// Spec §1.13.3: the `StreamResponse` of a new stream (after the 4-byte result section).
    #[test]
    fn golden_stream_response() {
        let bytes = stream(0, "test-stream", 0).to_vec();
        let mut expected = vec![0, 0, 0, 0, 0x00, 0x40, 0x1e, 0x18, 0x24, 0x0a, 0x06, 0x00];
        expected.extend_from_slice(&[0; 4 + 16]);
        expected.push(0x0b);
        expected.extend_from_slice(b"test-stream");
        expected.extend_from_slice(&[0; 4]);
        assert_eq!(bytes, expected);
        assert_eq!(bytes.len(), 48);
        let details = StreamDetails::decode(&bytes).unwrap();
        assert!(details.topics.is_empty());
    }

    #[test]
    fn user_details_permission_flag_is_asymmetric() {
        let user = UserResponse {
            id: 1,
            created_at: 2,
            status: 1,
            username: WireName::new("admin").unwrap(),
            options: OptionsBlock::empty(),
        };
        let none = UserDetails {
            user: user.clone(),
            permissions: None,
        };
        let bytes = none.to_vec();
        assert_eq!(&bytes[bytes.len() - 4..], &[0, 0, 0, 0]);
        assert_eq!(UserDetails::decode(&bytes).unwrap(), none);
        let some = UserDetails {
            user,
            permissions: Some(Permissions::default()),
        };
        let bytes = some.to_vec();
        assert_eq!(
            &bytes[bytes.len() - 16..bytes.len() - 11],
            &[1, 11, 0, 0, 0]
        );
        assert_eq!(UserDetails::decode(&bytes).unwrap(), some);
        for cut in 0..bytes.len() {
            assert!(UserDetails::decode(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn counts_beyond_the_body_are_rejected_before_allocation() {
        let mut bytes = stream(0, "s", 0).to_vec();
        bytes[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            StreamDetails::decode(&bytes),
            Err(CodecError::Truncated { .. })
        ));
    }
}
