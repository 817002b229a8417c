//! Permissions (spec §3.9): the data `eddy-auth` evaluates. Global flags, plus per-stream and
//! per-topic grants keyed by the resources' 0-based numeric ids.
//!
//! ```text
//! [10 global bools: manage_servers read_servers manage_users read_users manage_streams
//!                   read_streams manage_topics read_topics poll_messages send_messages]
//! [has_streams: u8]
//! repeat while the previous has-next byte was 1:
//!   [stream_id: u32][6 bools: manage_stream read_stream manage_topics read_topics
//!                             poll_messages send_messages]
//!   [has_topics: u8]
//!   repeat while the previous has-next byte was 1:
//!     [topic_id: u32][4 bools: manage_topic read_topic poll_messages send_messages]
//!     [has_next_topic: u8]
//!   [has_next_stream: u8]
//! ```
//! Writers emit entries sorted by id; readers reject a repeated id.

use std::collections::BTreeMap;

use super::codec::{Field, Reader};
use super::error::CodecError;

/// Server-wide grants.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GlobalPermissions {
    /// Manage the server (stats, clients, snapshots).
    pub manage_servers: bool,
    /// Read server information.
    pub read_servers: bool,
    /// Create, update, delete users and their permissions.
    pub manage_users: bool,
    /// Read users.
    pub read_users: bool,
    /// Create, update, delete, purge any stream.
    pub manage_streams: bool,
    /// Read any stream.
    pub read_streams: bool,
    /// Create, update, delete, purge any topic.
    pub manage_topics: bool,
    /// Read any topic.
    pub read_topics: bool,
    /// Poll from any topic.
    pub poll_messages: bool,
    /// Send to any topic.
    pub send_messages: bool,
}

impl GlobalPermissions {
    /// Every global permission.
    pub const ALL: Self = Self {
        manage_servers: true,
        read_servers: true,
        manage_users: true,
        read_users: true,
        manage_streams: true,
        read_streams: true,
        manage_topics: true,
        read_topics: true,
        poll_messages: true,
        send_messages: true,
    };

    fn flags(&self) -> [bool; 10] {
        [
            self.manage_servers,
            self.read_servers,
            self.manage_users,
            self.read_users,
            self.manage_streams,
            self.read_streams,
            self.manage_topics,
            self.read_topics,
            self.poll_messages,
            self.send_messages,
        ]
    }

    fn from_flags(f: [bool; 10]) -> Self {
        Self {
            manage_servers: f[0],
            read_servers: f[1],
            manage_users: f[2],
            read_users: f[3],
            manage_streams: f[4],
            read_streams: f[5],
            manage_topics: f[6],
            read_topics: f[7],
            poll_messages: f[8],
            send_messages: f[9],
        }
    }
}

/// Grants on one stream.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct StreamPermissions {
    /// Update, delete, purge this stream.
    pub manage_stream: bool,
    /// Read this stream.
    pub read_stream: bool,
    /// Manage this stream's topics.
    pub manage_topics: bool,
    /// Read this stream's topics.
    pub read_topics: bool,
    /// Poll from this stream's topics.
    pub poll_messages: bool,
    /// Send to this stream's topics.
    pub send_messages: bool,
    /// Per-topic grants, by topic id.
    pub topics: BTreeMap<u32, TopicPermissions>,
}

/// Grants on one topic.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TopicPermissions {
    /// Update, delete, purge this topic; manage its partitions and segments.
    pub manage_topic: bool,
    /// Read this topic and its consumer groups.
    pub read_topic: bool,
    /// Poll from this topic.
    pub poll_messages: bool,
    /// Send to this topic.
    pub send_messages: bool,
}

/// A user's permissions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Permissions {
    /// Server-wide grants.
    pub global: GlobalPermissions,
    /// Per-stream grants, by stream id.
    pub streams: BTreeMap<u32, StreamPermissions>,
}

/// Bound on decoded stream or topic entries, whatever the body size.
pub const MAX_PERMISSION_ENTRIES: usize = 1 << 20;

fn take_flags<const N: usize>(
    reader: &mut Reader<'_>,
    name: &'static str,
) -> Result<[bool; N], CodecError> {
    Ok(reader.array::<N>(name)?.map(|b| b != 0))
}

fn duplicate(name: &'static str, offset: usize) -> CodecError {
    CodecError::InvalidValue {
        field: name,
        offset,
        reason: "repeated stream or topic id",
    }
}

impl Field for Permissions {
    fn field_len(&self) -> usize {
        11 + self
            .streams
            .values()
            .map(|s| 4 + 6 + 1 + 1 + 9 * s.topics.len())
            .sum::<usize>()
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.extend(self.global.flags().map(u8::from));
        out.push(u8::from(!self.streams.is_empty()));
        let streams = self.streams.len();
        for (i, (id, stream)) in self.streams.iter().enumerate() {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend(
                [
                    stream.manage_stream,
                    stream.read_stream,
                    stream.manage_topics,
                    stream.read_topics,
                    stream.poll_messages,
                    stream.send_messages,
                ]
                .map(u8::from),
            );
            out.push(u8::from(!stream.topics.is_empty()));
            let topics = stream.topics.len();
            for (j, (topic_id, topic)) in stream.topics.iter().enumerate() {
                out.extend_from_slice(&topic_id.to_le_bytes());
                out.extend(
                    [
                        topic.manage_topic,
                        topic.read_topic,
                        topic.poll_messages,
                        topic.send_messages,
                    ]
                    .map(u8::from),
                );
                out.push(u8::from(j + 1 < topics));
            }
            out.push(u8::from(i + 1 < streams));
        }
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let global = GlobalPermissions::from_flags(take_flags(reader, name)?);
        let mut streams = BTreeMap::new();
        let mut more_streams = reader.u8(name)? != 0;
        while more_streams {
            let offset = reader.position();
            let stream_id = reader.u32(name)?;
            let f = take_flags::<6>(reader, name)?;
            let mut topics = BTreeMap::new();
            let mut more_topics = reader.u8(name)? != 0;
            while more_topics {
                let topic_at = reader.position();
                let topic_id = reader.u32(name)?;
                let t = take_flags::<4>(reader, name)?;
                let topic = TopicPermissions {
                    manage_topic: t[0],
                    read_topic: t[1],
                    poll_messages: t[2],
                    send_messages: t[3],
                };
                if topics.insert(topic_id, topic).is_some() {
                    return Err(duplicate(name, topic_at));
                }
                if topics.len() > MAX_PERMISSION_ENTRIES {
                    return Err(CodecError::LimitExceeded {
                        field: name,
                        value: topics.len() as u64,
                        limit: MAX_PERMISSION_ENTRIES as u64,
                    });
                }
                more_topics = reader.u8(name)? != 0;
            }
            let stream = StreamPermissions {
                manage_stream: f[0],
                read_stream: f[1],
                manage_topics: f[2],
                read_topics: f[3],
                poll_messages: f[4],
                send_messages: f[5],
                topics,
            };
            if streams.insert(stream_id, stream).is_some() {
                return Err(duplicate(name, offset));
            }
            if streams.len() > MAX_PERMISSION_ENTRIES {
                return Err(CodecError::LimitExceeded {
                    field: name,
                    value: streams.len() as u64,
                    limit: MAX_PERMISSION_ENTRIES as u64,
                });
            }
            more_streams = reader.u8(name)? != 0;
        }
        Ok(Self { global, streams })
    }
}

/// `Option<Permissions>` as CreateUser/UpdatePermissions carry it:
/// `[has: u8]` then, only when `has == 1`, `[len: u32][permissions: len bytes]` (the
/// permissions must decode to exactly `len` bytes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct FlaggedPermissions(pub Option<Permissions>);

impl Field for FlaggedPermissions {
    fn field_len(&self) -> usize {
        1 + self.0.as_ref().map_or(0, |p| 4 + p.field_len())
    }

    fn put(&self, out: &mut Vec<u8>) {
        match &self.0 {
            Some(permissions) => {
                out.push(1);
                out.extend_from_slice(&(permissions.field_len() as u32).to_le_bytes());
                permissions.put(out);
            }
            None => out.push(0),
        }
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        if reader.u8(name)? != 1 {
            return Ok(Self(None));
        }
        Ok(Self(Some(take_sized_permissions(reader, name)?)))
    }
}

/// Reads `[len: u32][permissions]` requiring the permissions to fill `len` exactly.
pub(crate) fn take_sized_permissions(
    reader: &mut Reader<'_>,
    name: &'static str,
) -> Result<Permissions, CodecError> {
    let len = reader.u32(name)? as usize;
    let bytes = reader.bytes(len, name)?;
    let mut inner = Reader::new(bytes);
    let permissions = Permissions::take(&mut inner, name)?;
    inner.finish(name)?;
    Ok(permissions)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn golden_no_permissions() {
        let mut out = Vec::new();
        Permissions::default().put(&mut out);
        assert_eq!(out, [0u8; 11]);
    }

    #[test]
    fn golden_nested() {
        let mut permissions = Permissions {
            global: GlobalPermissions {
                read_servers: true,
                ..GlobalPermissions::default()
            },
            ..Permissions::default()
        };
        let mut stream = StreamPermissions {
            read_stream: true,
            ..StreamPermissions::default()
        };
        stream.topics.insert(
            3,
            TopicPermissions {
                send_messages: true,
                ..TopicPermissions::default()
            },
        );
        permissions.streams.insert(1, stream);
        let mut out = Vec::new();
        permissions.put(&mut out);
        assert_eq!(
            out,
            [
                0, 1, 0, 0, 0, 0, 0, 0, 0, 0, // global
                1, // has streams
                1, 0, 0, 0, 0, 1, 0, 0, 0, 0, // stream 1
                1, // has topics
                3, 0, 0, 0, 0, 0, 0, 1, 0, // topic 3, no next topic
                0, // no next stream
            ]
        );
        assert_eq!(out.len(), permissions.field_len());
        assert_eq!(
            Permissions::take(&mut Reader::new(&out), "p").unwrap(),
            permissions
        );
        let mut dup = out.clone();
        dup.truncate(out.len() - 1);
        dup.push(1);
        dup.extend_from_slice(&out[11..out.len() - 1]);
        dup.push(0);
        assert!(Permissions::take(&mut Reader::new(&dup), "p").is_err());
    }

    pub(crate) fn permissions() -> impl Strategy<Value = Permissions> {
        let topic = (any::<[bool; 4]>()).prop_map(|f| TopicPermissions {
            manage_topic: f[0],
            read_topic: f[1],
            poll_messages: f[2],
            send_messages: f[3],
        });
        let stream = (
            any::<[bool; 6]>(),
            proptest::collection::btree_map(any::<u32>(), topic, 0..4),
        )
            .prop_map(|(f, topics)| StreamPermissions {
                manage_stream: f[0],
                read_stream: f[1],
                manage_topics: f[2],
                read_topics: f[3],
                poll_messages: f[4],
                send_messages: f[5],
                topics,
            });
        (
            any::<[bool; 10]>(),
            proptest::collection::btree_map(any::<u32>(), stream, 0..4),
        )
            .prop_map(|(g, streams)| Permissions {
                global: GlobalPermissions::from_flags(g),
                streams,
            })
    }

    proptest! {
        #[test]
        fn round_trip(p in permissions()) {
            let mut out = Vec::new();
            FlaggedPermissions(Some(p.clone())).put(&mut out);
            prop_assert_eq!(out.len(), FlaggedPermissions(Some(p.clone())).field_len());
            let decoded = FlaggedPermissions::take(&mut Reader::new(&out), "p").unwrap();
            prop_assert_eq!(decoded.0, Some(p));
            for cut in 0..out.len() {
                prop_assert!(FlaggedPermissions::take(&mut Reader::new(&out[..cut]), "p").is_err() || cut == 0);
            }
        }
    }
}
