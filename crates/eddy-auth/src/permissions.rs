//! Stream-protocol authorization: one function, [`authorize`], decides whether a caller may run a
//! command on a resource.
//!
//! The decision is driven by the codec's command table: every [`CommandCode`] has a row whose
//! [`RequiredPermission`] names the rule, so a command added to the table is covered the moment
//! it exists (an unknown rule denies). The rules are the reference server's (stream protocol
//! §7.8):
//!
//! | Rule | Granted when |
//! |---|---|
//! | `ReadServers` | global `manage_servers` or `read_servers` |
//! | `SelfOrReadUsers` | the target is the caller, or global `manage_users`/`read_users` |
//! | `ReadUsers` | global `manage_users` or `read_users` |
//! | `ManageUsers` | global `manage_users` |
//! | `SelfOrManageUsers` | the target is the caller, or global `manage_users` |
//! | `ReadStreams` | global `manage_streams` or `read_streams` |
//! | `ReadStream` | as `ReadStreams`, or stream `manage_stream`/`read_stream` |
//! | `ManageStreams` | global `manage_streams` |
//! | `ManageStream` | global `manage_streams`, or stream `manage_stream` |
//! | `ReadTopics` | global `read_streams`/`manage_streams`/`manage_topics`/`read_topics`, or stream `manage_stream`/`read_stream`/`manage_topics`/`read_topics` |
//! | `ReadTopic` | as `ReadTopics`, or topic `manage_topic`/`read_topic` |
//! | `ManageTopics` | global `manage_streams`/`manage_topics`, or stream `manage_stream`/`manage_topics` |
//! | `ManageTopic` | as `ManageTopics`, or topic `manage_topic` |
//! | `PollMessages` | global `poll_messages`/`read_topics`/`manage_topics`/`read_streams`/`manage_streams`, or stream `manage_stream`/`read_stream`/`manage_topics`/`read_topics`/`poll_messages`, or topic `manage_topic`/`read_topic`/`poll_messages` |
//! | `SendMessages` | global `send_messages`/`manage_streams`/`manage_topics`, or stream `manage_stream`/`manage_topics`/`send_messages`, or topic `manage_topic`/`send_messages` |
//! | `None`, `Credentials`, `Authenticated`, `Unavailable` | always (authentication is the caller's business) |
//! | `Rejected` | never, not even for root |
//!
//! Invariants: the root user (id [`ROOT_USER_ID`]) passes every rule except `Rejected`; a rule
//! this crate does not know denies (fail closed); the function is pure (no I/O, no clock).

use eddy_codec::stream::{
    CommandCode, GlobalPermissions, Permissions, RequiredPermission, StreamPermissions,
    TopicPermissions,
};

/// The root user's id: bootstrapped on first start, never deletable, passes every check.
pub const ROOT_USER_ID: u32 = 0;

/// Who is asking: an authenticated user and its permissions (`None`: it has none).
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// The user id.
    pub user_id: u32,
    /// Its permissions.
    pub permissions: Option<&'a Permissions>,
}

/// What a request addresses, resolved to numeric ids (`None` where the command has no such
/// target).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Resource {
    /// The stream.
    pub stream_id: Option<u32>,
    /// The topic (within `stream_id`).
    pub topic_id: Option<u32>,
    /// The user a user command addresses (for the "self" rules).
    pub user_id: Option<u32>,
}

/// Why [`authorize`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Denied {
    /// The command is never served (the legacy login codes).
    #[error("{command} is not served")]
    Rejected {
        /// The command.
        command: CommandCode,
    },
    /// The caller lacks the permission the command requires.
    #[error("user {user_id} may not run {command}")]
    Unauthorized {
        /// The caller.
        user_id: u32,
        /// The command.
        command: CommandCode,
    },
}

/// Decides whether `caller` may run `command` on `resource`.
pub fn authorize(
    caller: &Caller<'_>,
    command: CommandCode,
    resource: &Resource,
) -> Result<(), Denied> {
    let required = command.spec().permission;
    match required {
        RequiredPermission::Rejected => return Err(Denied::Rejected { command }),
        RequiredPermission::None
        | RequiredPermission::Credentials
        | RequiredPermission::Authenticated
        | RequiredPermission::Unavailable => return Ok(()),
        _ => {}
    }
    if caller.user_id == ROOT_USER_ID || grants(caller, required, resource) {
        Ok(())
    } else {
        Err(Denied::Unauthorized {
            user_id: caller.user_id,
            command,
        })
    }
}

/// The rule table of the module docs.
fn grants(caller: &Caller<'_>, required: RequiredPermission, resource: &Resource) -> bool {
    let is_self = resource.user_id == Some(caller.user_id);
    let none = Permissions::default();
    let p = caller.permissions.unwrap_or(&none);
    let g: &GlobalPermissions = &p.global;
    let stream: Option<&StreamPermissions> = resource.stream_id.and_then(|id| p.streams.get(&id));
    let topic: Option<&TopicPermissions> =
        stream.and_then(|s| resource.topic_id.and_then(|id| s.topics.get(&id)));
    let s = |f: fn(&StreamPermissions) -> bool| stream.is_some_and(f);
    let t = |f: fn(&TopicPermissions) -> bool| topic.is_some_and(f);
    let read_topics = g.read_streams
        || g.manage_streams
        || g.manage_topics
        || g.read_topics
        || s(|s| s.manage_stream || s.read_stream || s.manage_topics || s.read_topics);
    let manage_topics =
        g.manage_streams || g.manage_topics || s(|s| s.manage_stream || s.manage_topics);
    match required {
        RequiredPermission::ReadServers => g.manage_servers || g.read_servers,
        RequiredPermission::ManageServers => g.manage_servers,
        RequiredPermission::SelfOrReadUsers => is_self || g.manage_users || g.read_users,
        RequiredPermission::ReadUsers => g.manage_users || g.read_users,
        RequiredPermission::ManageUsers => g.manage_users,
        RequiredPermission::SelfOrManageUsers => is_self || g.manage_users,
        RequiredPermission::ReadStreams => g.manage_streams || g.read_streams,
        RequiredPermission::ReadStream => {
            g.manage_streams || g.read_streams || s(|s| s.manage_stream || s.read_stream)
        }
        RequiredPermission::ManageStreams => g.manage_streams,
        RequiredPermission::ManageStream => g.manage_streams || s(|s| s.manage_stream),
        RequiredPermission::ReadTopics => read_topics,
        RequiredPermission::ReadTopic => read_topics || t(|t| t.manage_topic || t.read_topic),
        RequiredPermission::ManageTopics => manage_topics,
        RequiredPermission::ManageTopic => manage_topics || t(|t| t.manage_topic),
        RequiredPermission::PollMessages => {
            g.poll_messages
                || g.read_topics
                || g.manage_topics
                || g.read_streams
                || g.manage_streams
                || s(|s| {
                    s.manage_stream
                        || s.read_stream
                        || s.manage_topics
                        || s.read_topics
                        || s.poll_messages
                })
                || t(|t| t.manage_topic || t.read_topic || t.poll_messages)
        }
        RequiredPermission::SendMessages => {
            g.send_messages
                || g.manage_streams
                || g.manage_topics
                || s(|s| s.manage_stream || s.manage_topics || s.send_messages)
                || t(|t| t.manage_topic || t.send_messages)
        }
        // The rules answered before this function, and any rule added to the table later that
        // this crate does not know yet: deny.
        _ => false,
    }
}

/// Test support: the smallest permissions that satisfy `required` on `resource` (one flag at the
/// narrowest scope the rule accepts), or `None` for rules no permission satisfies or that need
/// none. Used by the permission matrix tests here and in the server's tests.
#[doc(hidden)]
pub fn minimal_grant(required: RequiredPermission, resource: &Resource) -> Option<Permissions> {
    let mut p = Permissions::default();
    let stream_id = resource.stream_id.unwrap_or(0);
    let topic_id = resource.topic_id.unwrap_or(0);
    match required {
        RequiredPermission::ReadServers => p.global.read_servers = true,
        RequiredPermission::ManageServers => p.global.manage_servers = true,
        RequiredPermission::SelfOrReadUsers | RequiredPermission::ReadUsers => {
            p.global.read_users = true;
        }
        RequiredPermission::ManageUsers | RequiredPermission::SelfOrManageUsers => {
            p.global.manage_users = true;
        }
        RequiredPermission::ReadStreams => p.global.read_streams = true,
        RequiredPermission::ManageStreams => p.global.manage_streams = true,
        RequiredPermission::ReadStream => {
            p.streams.entry(stream_id).or_default().read_stream = true;
        }
        RequiredPermission::ManageStream => {
            p.streams.entry(stream_id).or_default().manage_stream = true;
        }
        RequiredPermission::ReadTopics => {
            p.streams.entry(stream_id).or_default().read_topics = true;
        }
        RequiredPermission::ManageTopics => {
            p.streams.entry(stream_id).or_default().manage_topics = true;
        }
        RequiredPermission::ReadTopic => {
            let s = p.streams.entry(stream_id).or_default();
            s.topics.entry(topic_id).or_default().read_topic = true;
        }
        RequiredPermission::ManageTopic => {
            let s = p.streams.entry(stream_id).or_default();
            s.topics.entry(topic_id).or_default().manage_topic = true;
        }
        RequiredPermission::PollMessages => {
            let s = p.streams.entry(stream_id).or_default();
            s.topics.entry(topic_id).or_default().poll_messages = true;
        }
        RequiredPermission::SendMessages => {
            let s = p.streams.entry(stream_id).or_default();
            s.topics.entry(topic_id).or_default().send_messages = true;
        }
        _ => return None,
    }
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_codec::stream::COMMANDS;

    fn resource() -> Resource {
        Resource {
            stream_id: Some(3),
            topic_id: Some(5),
            user_id: Some(42),
        }
    }

    /// The permission matrix from the command table: root, a user with exactly the needed
    /// permission, a user without any permission.
    #[test]
    fn matrix_over_the_command_table() {
        let on = resource();
        for spec in &COMMANDS {
            let root = Caller {
                user_id: ROOT_USER_ID,
                permissions: None,
            };
            let bare = Caller {
                user_id: 7,
                permissions: None,
            };
            match spec.permission {
                RequiredPermission::Rejected => {
                    assert_eq!(
                        authorize(&root, spec.code, &on),
                        Err(Denied::Rejected { command: spec.code })
                    );
                    assert!(authorize(&bare, spec.code, &on).is_err());
                }
                RequiredPermission::None
                | RequiredPermission::Credentials
                | RequiredPermission::Authenticated
                | RequiredPermission::Unavailable => {
                    assert_eq!(authorize(&bare, spec.code, &on), Ok(()), "{}", spec.name);
                    assert_eq!(minimal_grant(spec.permission, &on), None);
                }
                required => {
                    assert_eq!(authorize(&root, spec.code, &on), Ok(()), "{}", spec.name);
                    assert_eq!(
                        authorize(&bare, spec.code, &on),
                        Err(Denied::Unauthorized {
                            user_id: 7,
                            command: spec.code
                        }),
                        "{}",
                        spec.name
                    );
                    let grant = minimal_grant(required, &on).expect("a grantable rule");
                    let granted = Caller {
                        user_id: 7,
                        permissions: Some(&grant),
                    };
                    assert_eq!(authorize(&granted, spec.code, &on), Ok(()), "{}", spec.name);
                    // The narrow grant does not leak to a neighbouring stream or topic.
                    if on.stream_id.is_some()
                        && (grant.streams.contains_key(&3))
                        && !matches!(
                            required,
                            RequiredPermission::SelfOrReadUsers
                                | RequiredPermission::SelfOrManageUsers
                        )
                    {
                        let elsewhere = Resource {
                            stream_id: Some(4),
                            ..on
                        };
                        assert!(
                            authorize(&granted, spec.code, &elsewhere).is_err(),
                            "{} leaks to another stream",
                            spec.name
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn self_rules() {
        let me = Caller {
            user_id: 42,
            permissions: None,
        };
        assert_eq!(authorize(&me, CommandCode::GetUser, &resource()), Ok(()));
        assert_eq!(
            authorize(&me, CommandCode::ChangePassword, &resource()),
            Ok(())
        );
        let other = Resource {
            user_id: Some(43),
            ..resource()
        };
        assert!(authorize(&me, CommandCode::GetUser, &other).is_err());
        assert!(authorize(&me, CommandCode::ChangePassword, &other).is_err());
        assert!(authorize(&me, CommandCode::DeleteUser, &resource()).is_err());
    }

    #[test]
    fn topic_grants_stay_in_their_topic() {
        let mut p = Permissions::default();
        let s = p.streams.entry(1).or_default();
        s.topics.entry(2).or_default().send_messages = true;
        let caller = Caller {
            user_id: 9,
            permissions: Some(&p),
        };
        let at = |stream, topic| Resource {
            stream_id: Some(stream),
            topic_id: Some(topic),
            user_id: None,
        };
        assert_eq!(
            authorize(&caller, CommandCode::SendMessages, &at(1, 2)),
            Ok(())
        );
        assert!(authorize(&caller, CommandCode::SendMessages, &at(1, 3)).is_err());
        assert!(authorize(&caller, CommandCode::SendMessages, &at(2, 2)).is_err());
        assert!(authorize(&caller, CommandCode::PollMessages, &at(1, 2)).is_err());
        assert!(authorize(&caller, CommandCode::GetTopic, &at(1, 2)).is_err());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn flags() -> impl Strategy<Value = [bool; 10]> {
            proptest::array::uniform10(any::<bool>())
        }

        fn permissions() -> impl Strategy<Value = Permissions> {
            (
                flags(),
                proptest::collection::vec(
                    (
                        0u32..3,
                        flags(),
                        proptest::collection::vec((0u32..3, flags()), 0..3),
                    ),
                    0..3,
                ),
            )
                .prop_map(|(g, streams)| {
                    let global = GlobalPermissions {
                        manage_servers: g[0],
                        read_servers: g[1],
                        manage_users: g[2],
                        read_users: g[3],
                        manage_streams: g[4],
                        read_streams: g[5],
                        manage_topics: g[6],
                        read_topics: g[7],
                        poll_messages: g[8],
                        send_messages: g[9],
                    };
                    let mut p = Permissions {
                        global,
                        streams: std::collections::BTreeMap::new(),
                    };
                    for (id, f, topics) in streams {
                        let s = p.streams.entry(id).or_default();
                        s.manage_stream = f[0];
                        s.read_stream = f[1];
                        s.manage_topics = f[2];
                        s.read_topics = f[3];
                        s.poll_messages = f[4];
                        s.send_messages = f[5];
                        for (tid, tf) in topics {
                            let t = s.topics.entry(tid).or_default();
                            t.manage_topic = tf[0];
                            t.read_topic = tf[1];
                            t.poll_messages = tf[2];
                            t.send_messages = tf[3];
                        }
                    }
                    p
                })
        }

        fn union(base: &Permissions, extra: &Permissions) -> Permissions {
            let mut out = base.clone();
            let (mine, theirs) = (&mut out.global, &extra.global);
            mine.manage_servers |= theirs.manage_servers;
            mine.read_servers |= theirs.read_servers;
            mine.manage_users |= theirs.manage_users;
            mine.read_users |= theirs.read_users;
            mine.manage_streams |= theirs.manage_streams;
            mine.read_streams |= theirs.read_streams;
            mine.manage_topics |= theirs.manage_topics;
            mine.read_topics |= theirs.read_topics;
            mine.poll_messages |= theirs.poll_messages;
            mine.send_messages |= theirs.send_messages;
            for (id, stream) in &extra.streams {
                let into = out.streams.entry(*id).or_default();
                into.manage_stream |= stream.manage_stream;
                into.read_stream |= stream.read_stream;
                into.manage_topics |= stream.manage_topics;
                into.read_topics |= stream.read_topics;
                into.poll_messages |= stream.poll_messages;
                into.send_messages |= stream.send_messages;
                for (tid, topic) in &stream.topics {
                    let dst = into.topics.entry(*tid).or_default();
                    dst.manage_topic |= topic.manage_topic;
                    dst.read_topic |= topic.read_topic;
                    dst.poll_messages |= topic.poll_messages;
                    dst.send_messages |= topic.send_messages;
                }
            }
            out
        }

        proptest! {
            /// More permissions never turn an allowed request into a denied one, and root is
            /// allowed whatever it holds.
            #[test]
            fn grants_are_monotonic(
                a in permissions(),
                b in permissions(),
                stream in proptest::option::of(0u32..3),
                topic in proptest::option::of(0u32..3),
                user in proptest::option::of(0u32..3),
                caller in 1u32..3,
            ) {
                let on = Resource { stream_id: stream, topic_id: topic.filter(|_| stream.is_some()), user_id: user };
                let more = union(&a, &b);
                for spec in &COMMANDS {
                    let narrow = Caller { user_id: caller, permissions: Some(&a) };
                    let wide = Caller { user_id: caller, permissions: Some(&more) };
                    if authorize(&narrow, spec.code, &on).is_ok() {
                        prop_assert!(authorize(&wide, spec.code, &on).is_ok(), "{}", spec.name);
                    }
                    let root = Caller { user_id: ROOT_USER_ID, permissions: Some(&a) };
                    prop_assert_eq!(
                        authorize(&root, spec.code, &on).is_ok(),
                        spec.permission != RequiredPermission::Rejected
                    );
                }
            }
        }
    }

    #[test]
    fn wider_grants_imply_narrower_reads() {
        let mut p = Permissions::default();
        p.global.manage_streams = true;
        let caller = Caller {
            user_id: 9,
            permissions: Some(&p),
        };
        for code in [
            CommandCode::GetStreams,
            CommandCode::GetTopic,
            CommandCode::PollMessages,
            CommandCode::SendMessages,
            CommandCode::DeleteTopic,
            CommandCode::CreateStream,
        ] {
            assert_eq!(authorize(&caller, code, &resource()), Ok(()), "{code}");
        }
        assert!(authorize(&caller, CommandCode::GetStats, &resource()).is_err());
        assert!(authorize(&caller, CommandCode::GetUsers, &resource()).is_err());
    }
}
