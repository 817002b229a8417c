//! Replies in the layout of the 0.12.2 wire (the `iggy` 0.11.1-edge.9 SDK,
//! `docs/iggy-sdk-revisions.md`). Handlers build every reply in the 0.11 layout; for a session
//! of the 0.12.2 revision the server passes the payload through [`reply`], which re-encodes the
//! replies whose layout differs and leaves the others alone:
//!
//! | Reply | 0.12.2 layout |
//! |---|---|
//! | stream (`GET_STREAM(S)`, `CREATE_STREAM`) | a derived options block after the options |
//! | topic header | 33 fixed bytes: no `message_expiry`, `compression_algorithm`, `max_topic_size` (they are in the option blocks) |
//! | partition (`GET_TOPIC`, `CREATE_TOPIC`) | a [`PartitionContext`] and the member lists after the 40 bytes |
//! | user (`GET_USER(S)`, `CREATE_USER`) | a derived options block after the options |
//! | `DESCRIBE_OPTIONS` entry | a flags byte after the kind |
//! | `GET_CLUSTER_METADATA` node | the replica id first |
//! | `POLL_MESSAGES(_DEFERRED)` | a [`PartitionContext`] after the 16-byte prefix |

use bytes::Bytes;
use eddy_options::catalog::{self, Scope};
use eddy_options::{DescribeOptionsReply, OptionsBlock};

use super::codec::{Field, Reader, ToEnd};
use super::command_table::CommandCode;
use super::commands::get_cluster_metadata::ClusterMetadata;
use super::commands::get_topics::TopicList;
use super::commands::Maybe;
use super::entities::{
    PartitionResponse, StreamDetails, StreamResponse, TopicDetails, TopicHeader, UserDetails,
    UserResponse,
};
use super::error::CodecError;
use super::WireDecode;

/// What a partition reply names besides its counters: `[incarnation: u64]
/// [owner_generation: u64][metadata_op: u64]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PartitionContext {
    /// The partition's creation revision; eddy never reuses a live partition's id, so 1.
    pub incarnation: u64,
    /// The consumer-group owner generation (0: none).
    pub owner_generation: u64,
    /// The metadata position the reply was read at.
    pub metadata_op: u64,
}

impl PartitionContext {
    /// Encoded size.
    pub const LEN: usize = 24;

    /// The context eddy serves: incarnation 1, no owner, metadata position 0.
    pub const EDDY: Self = Self {
        incarnation: 1,
        owner_generation: 0,
        metadata_op: 0,
    };

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.incarnation.to_le_bytes());
        out.extend_from_slice(&self.owner_generation.to_le_bytes());
        out.extend_from_slice(&self.metadata_op.to_le_bytes());
    }
}

/// Where the reply is served: the node ids partition replies list as members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Serving {
    /// The replica id of this node (0 on a single node).
    pub replica_id: u8,
}

/// Writes a whole 0.11 reply body in the 0.12.2 layout.
type Encoder<'a> = &'a dyn Fn(&[u8], &mut Vec<u8>) -> Result<(), CodecError>;

/// Re-encodes `payload`, a reply of `code` in the 0.11 layout, in the 0.12.2 layout. Replies
/// whose layout did not change come back as they are.
pub fn reply(
    code: CommandCode,
    payload: Vec<Bytes>,
    serving: Serving,
) -> Result<Vec<Bytes>, CodecError> {
    let single = |encode: Encoder<'_>| {
        let joined: Vec<u8> = payload.iter().flat_map(|b| b.iter().copied()).collect();
        if joined.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity(joined.len() + 64);
        encode(&joined, &mut out)?;
        Ok(vec![Bytes::from(out)])
    };
    match code {
        CommandCode::GetStream | CommandCode::CreateStream => single(&|body, out| {
            if let Some(details) = Maybe::<StreamDetails>::decode(body)?.0 {
                put_stream(&details.stream, out);
                for topic in &details.topics {
                    put_topic_header(topic, out);
                }
            }
            Ok(())
        }),
        CommandCode::GetStreams => single(&|body, out| {
            for stream in ToEnd::<StreamResponse>::decode(body)?.0 {
                put_stream(&stream, out);
            }
            Ok(())
        }),
        CommandCode::GetTopic | CommandCode::CreateTopic => single(&|body, out| {
            if let Some(details) = Maybe::<TopicDetails>::decode(body)?.0 {
                put_topic_header(&details.topic, out);
                for partition in &details.partitions {
                    put_partition(partition, serving, out);
                }
            }
            Ok(())
        }),
        CommandCode::GetTopics => single(&|body, out| {
            let topics = TopicList::decode(body)?.0;
            out.extend_from_slice(&(topics.len() as u32).to_le_bytes());
            for topic in &topics {
                put_topic_header(topic, out);
            }
            Ok(())
        }),
        CommandCode::GetUser | CommandCode::CreateUser => single(&|body, out| {
            if let Some(details) = Maybe::<UserDetails>::decode(body)?.0 {
                let at = out.len();
                details.put(out);
                // The user response is the prefix of the details; its derived block goes
                // right after its options, before the permissions.
                let user_len = details.user.field_len();
                out.splice(at + user_len..at + user_len, [0u8; 4]);
            }
            Ok(())
        }),
        CommandCode::GetUsers => single(&|body, out| {
            for user in ToEnd::<UserResponse>::decode(body)?.0 {
                user.put(out);
                out.extend_from_slice(&0u32.to_le_bytes());
            }
            Ok(())
        }),
        CommandCode::DescribeOptions => single(&|body, out| {
            put_described(&DescribeOptionsReply::decode(body)?, out);
            Ok(())
        }),
        CommandCode::GetClusterMetadata => single(&|body, out| {
            put_cluster(&ClusterMetadata::decode(body)?, out);
            Ok(())
        }),
        CommandCode::PollMessages | CommandCode::PollMessagesDeferred => {
            poll_reply(payload, PartitionContext::EDDY)
        }
        _ => Ok(payload),
    }
}

/// A poll reply with the context after its 16-byte prefix (the first chunk holds the prefix).
fn poll_reply(mut chunks: Vec<Bytes>, context: PartitionContext) -> Result<Vec<Bytes>, CodecError> {
    let Some(first) = chunks.first_mut() else {
        return Ok(chunks);
    };
    if first.len() < 16 {
        return Err(CodecError::Truncated {
            field: "poll reply prefix",
            offset: 0,
            need: 16,
            have: first.len(),
        });
    }
    let mut head = Vec::with_capacity(first.len() + PartitionContext::LEN);
    head.extend_from_slice(&first[..16]);
    context.put(&mut head);
    head.extend_from_slice(&first[16..]);
    *first = Bytes::from(head);
    Ok(chunks)
}

/// The read-only projections of a stream's own encryption key, which the 0.12.2 SDK reads
/// from a stream's derived options (the 0.11 layout shows them with its options).
pub const STREAM_DERIVED_KEYS: [&str; 3] = [
    "encryption_key_source",
    "encryption_key_fingerprint",
    "encryption_kek_fingerprint",
];

fn put_stream(stream: &StreamResponse, out: &mut Vec<u8>) {
    let derived = |entry: &eddy_options::OptionEntry<'_>| STREAM_DERIVED_KEYS.contains(&entry.key);
    if !stream.options.entries().any(|e| derived(&e)) {
        stream.put(out);
        OptionsBlock::default().put(out);
        return;
    }
    let split = |keep: bool| {
        OptionsBlock::from_entries(stream.options.entries().filter(|e| derived(e) == keep).map(
            |e| {
                (
                    e.key,
                    eddy_options::ValueKind::from_code(e.kind)
                        .unwrap_or(eddy_options::ValueKind::Raw),
                    e.value,
                )
            },
        ))
        // Entries of a valid block make a valid block.
        .unwrap_or_default()
    };
    let explicit = StreamResponse {
        options: split(false),
        ..stream.clone()
    };
    explicit.put(out);
    split(true).put(out);
}

fn put_topic_header(topic: &TopicHeader, out: &mut Vec<u8>) {
    out.extend_from_slice(&topic.id.to_le_bytes());
    out.extend_from_slice(&topic.created_at.to_le_bytes());
    out.extend_from_slice(&topic.partitions_count.to_le_bytes());
    out.extend_from_slice(&topic.size_bytes.to_le_bytes());
    out.extend_from_slice(&topic.messages_count.to_le_bytes());
    topic.name.put(out);
    topic.options.put(out);
    topic.derived_options.put(out);
}

fn put_partition(partition: &PartitionResponse, serving: Serving, out: &mut Vec<u8>) {
    partition.put(out);
    PartitionContext::EDDY.put(out);
    // members, then the in-sync members: this node.
    out.extend_from_slice(&[1, serving.replica_id, 1, serving.replica_id]);
}

/// The flags byte of a described option: bit 0 updatable, bit 1 resettable (every updatable
/// key has a default), bit 2 secret, bit 3 read-only, bit 4 critical.
fn option_flags(key: &str) -> u8 {
    let updatable = [Scope::Topic, Scope::Stream, Scope::User]
        .into_iter()
        .filter_map(|scope| catalog::spec(scope, key))
        .any(|spec| spec.updatable);
    if updatable {
        0b11
    } else {
        0
    }
}

fn put_described(reply: &DescribeOptionsReply, out: &mut Vec<u8>) {
    out.extend_from_slice(&(reply.entries.len() as u32).to_le_bytes());
    for entry in &reply.entries {
        out.push(entry.key.len() as u8);
        out.extend_from_slice(entry.key.as_bytes());
        out.push(entry.kind.code());
        out.push(option_flags(&entry.key));
        out.extend_from_slice(&(entry.default.len() as u32).to_le_bytes());
        out.extend_from_slice(&entry.default);
        out.extend_from_slice(&(entry.description.len() as u32).to_le_bytes());
        out.extend_from_slice(entry.description.as_bytes());
    }
}

/// Nodes are numbered by their position in the list; the partition routes of a single node
/// name replica 0.
fn put_cluster(metadata: &ClusterMetadata, out: &mut Vec<u8>) {
    metadata.name.put(out);
    out.extend_from_slice(&(metadata.nodes.0.len() as u32).to_le_bytes());
    for (index, node) in metadata.nodes.0.iter().enumerate() {
        out.push(u8::try_from(index).unwrap_or(u8::MAX));
        node.put(out);
    }
}

/// Reads a 0.12.2 topic header back (for tests and tools).
pub fn take_topic_header(reader: &mut Reader<'_>) -> Result<(u32, String), CodecError> {
    let id = reader.u32("id")?;
    reader.bytes(8 + 4 + 8 + 8, "topic counters")?;
    let name = super::name::WireName::take(reader, "name")?;
    OptionsBlock::take(reader, "options")?;
    OptionsBlock::take(reader, "derived_options")?;
    Ok((id, name.into_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;
    use crate::stream::name::WireName;
    use crate::stream::WireEncode;

    fn topic(partitions: u32) -> TopicHeader {
        TopicHeader {
            id: 3,
            created_at: 10,
            partitions_count: partitions,
            message_expiry: u64::MAX,
            compression_algorithm: 1,
            max_topic_size: u64::MAX,
            size_bytes: 20,
            messages_count: 2,
            name: WireName::new("t").unwrap(),
            options: OptionsBlock::default(),
            derived_options: OptionsBlock::default(),
        }
    }

    #[test]
    fn topic_details_in_the_new_layout() {
        let details = TopicDetails {
            topic: topic(1),
            partitions: vec![PartitionResponse {
                id: 0,
                created_at: 10,
                segments_count: 1,
                current_offset: 1,
                size_bytes: 20,
                messages_count: 2,
            }],
        };
        let out = reply(
            CommandCode::GetTopic,
            vec![Bytes::from(details.to_vec())],
            Serving { replica_id: 0 },
        )
        .unwrap();
        let body = &out[0];
        // 33 fixed bytes + name 1 + two empty blocks (4 + 4), then 40 + 24 + 4 per partition.
        assert_eq!(body.len(), 34 + 8 + 40 + 24 + 4);
        let (id, name) = take_topic_header(&mut Reader::new(body)).unwrap();
        assert_eq!((id, name.as_str()), (3, "t"));
        assert_eq!(
            &body[42 + 40..42 + 48],
            &1u64.to_le_bytes(),
            "incarnation 1"
        );
        assert_eq!(&body[body.len() - 4..], &[1, 0, 1, 0]);
        // A missing topic stays an empty reply.
        let none = reply(CommandCode::GetTopic, Vec::new(), Serving::default()).unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn a_streams_key_projections_move_to_its_derived_block() {
        use eddy_options::ValueKind;
        let stream = |options: OptionsBlock| StreamResponse {
            id: 1,
            created_at: 10,
            topics_count: 0,
            size_bytes: 0,
            messages_count: 0,
            name: WireName::new("s").unwrap(),
            options,
        };
        let projected = OptionsBlock::from_entries([
            ("encryption_key_source", ValueKind::String, &b"stream"[..]),
            (
                "encryption_key_fingerprint",
                ValueKind::String,
                b"0011223344556677",
            ),
            (
                "encryption_kek_fingerprint",
                ValueKind::String,
                b"8899aabbccddeeff",
            ),
        ])
        .unwrap();
        let mut out = Vec::new();
        put_stream(&stream(projected.clone()), &mut out);
        let mut want = Vec::new();
        stream(OptionsBlock::default()).put(&mut want);
        projected.put(&mut want);
        assert_eq!(out, want, "explicit block empty, projections derived");
        // A stream without them: its options as they are and an empty derived block.
        let mut out = Vec::new();
        put_stream(&stream(OptionsBlock::default()), &mut out);
        let mut want = Vec::new();
        stream(OptionsBlock::default()).put(&mut want);
        OptionsBlock::default().put(&mut want);
        assert_eq!(out, want);
    }

    #[test]
    fn topic_lists_keep_their_count() {
        let list = TopicList(vec![topic(2), topic(0)]);
        let out = reply(
            CommandCode::GetTopics,
            vec![Bytes::from(list.to_vec())],
            Serving::default(),
        )
        .unwrap();
        let mut reader = Reader::new(&out[0]);
        assert_eq!(reader.u32("count").unwrap(), 2);
        take_topic_header(&mut reader).unwrap();
        take_topic_header(&mut reader).unwrap();
        assert!(reader.is_empty());
    }

    #[test]
    fn poll_prefix_gains_a_context() {
        let chunks = vec![Bytes::from(vec![7u8; 16]), Bytes::from_static(b"records")];
        let out = reply(CommandCode::PollMessages, chunks, Serving::default()).unwrap();
        assert_eq!(out[0].len(), 40);
        assert_eq!(&out[0][..16], &[7u8; 16]);
        assert_eq!(&out[0][16..24], &1u64.to_le_bytes());
        assert_eq!(&out[1][..], b"records");
    }

    #[test]
    fn describe_options_gain_flags() {
        let described =
            DescribeOptionsReply::for_scope(Scope::Topic, &eddy_options::TopicSettings::default());
        let out = reply(
            CommandCode::DescribeOptions,
            vec![Bytes::from(
                crate::stream::commands::describe_options::OptionsCatalog(described.clone())
                    .to_vec(),
            )],
            Serving::default(),
        )
        .unwrap();
        let body = &out[0];
        assert_eq!(
            body.len(),
            described.encoded_len() + described.entries.len()
        );
        // compression_algorithm is updatable: flags 0b11 follow its kind byte.
        let key_len = usize::from(body[4]);
        assert_eq!(body[5 + key_len + 1], 0b11);
    }

    #[test]
    fn unchanged_replies_pass_through() {
        let payload = vec![Bytes::from(hex("01 02"))];
        assert_eq!(
            reply(CommandCode::GetMe, payload.clone(), Serving::default()).unwrap(),
            payload
        );
    }
}
