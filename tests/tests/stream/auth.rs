//! Authentication and authorization on the stream port.
//!
//! * The permission matrix, generated from the codec's command table: every command x {root,
//!   a user with exactly the permission the command needs, a user without it, an
//!   unauthenticated connection}, each answered as stream protocol §1.7 and §7.8 say.
//! * Password and token logins with the SDK: wrong password, inactive user, expired token,
//!   the sessions of a deleted or deactivated user, re-login.

use std::time::Duration;

use crate::stream_support::raw::{Answer, Raw};
use crate::stream_support::*;
use eddy_auth::permissions::{minimal_grant, Resource};
use eddy_codec::stream::codec::{LongString, ShortString};
use eddy_codec::stream::commands::*;
use eddy_codec::stream::permissions::FlaggedPermissions;
use eddy_codec::stream::{
    AckLevel, CommandCode, Consumer, Identifier, Message, OptionalPartition, Partitioning,
    PollingStrategy, Request, RequiredPermission, WireName, COMMANDS,
};
use eddy_wire::stream::EvictionReason;
use iggy::prelude::{
    PersonalAccessTokenClient, PersonalAccessTokenExpiry, StreamClient, SystemClient, UserClient,
    UserStatus, UserUpdateOptions,
};

const STREAM: &str = "s0";
const TOPIC: &str = "t0";
const GROUP: &str = "g0";
const TARGET: &str = "target";

fn n(name: &str) -> Identifier {
    Identifier::named(name).unwrap()
}

fn wire(name: &str) -> WireName {
    WireName::new(name).unwrap()
}

/// A request of each command, addressing the fixtures by name.
fn sample(code: CommandCode) -> Request {
    use CommandCode as C;
    let s = || n(STREAM);
    let t = || n(TOPIC);
    let g = || n(GROUP);
    let consumer = Consumer::new(Identifier::numeric(1));
    match code {
        C::Ping => Request::Ping(ping::Ping),
        C::GetStats => Request::GetStats(get_stats::GetStats),
        C::GetSnapshot => Request::GetSnapshot(get_snapshot::GetSnapshot {
            compression: 1,
            types: vec![100],
        }),
        C::GetClusterMetadata => {
            Request::GetClusterMetadata(get_cluster_metadata::GetClusterMetadata)
        }
        C::GetClusterStatus => Request::GetClusterStatus(cluster_status::GetClusterStatus),
        // On this single node both answer that there is no cluster to change.
        C::AddClusterMember => Request::AddClusterMember(cluster_change::AddClusterMember {
            id: 9,
            replication_address: LongString::new("127.0.0.1:1"),
        }),
        C::RemoveClusterMember => {
            Request::RemoveClusterMember(cluster_change::RemoveClusterMember { id: 9 })
        }
        C::DescribeOptions => Request::DescribeOptions(describe_options::DescribeOptions {
            scope: eddy_options::Scope::Topic,
        }),
        C::GetMe => Request::GetMe(get_me::GetMe),
        C::GetClient => Request::GetClient(get_client::GetClient { client_id: 1 }),
        C::GetClients => Request::GetClients(get_clients::GetClients),
        C::GetUser => Request::GetUser(get_user::GetUser { user_id: n(TARGET) }),
        C::GetUsers => Request::GetUsers(get_users::GetUsers),
        C::CreateUser => Request::CreateUser(create_user::CreateUser {
            username: wire("created"),
            password: ShortString::new("secret").unwrap(),
            status: 1,
            permissions: FlaggedPermissions(None),
            options: TrailingOptions::default(),
        }),
        C::DeleteUser => Request::DeleteUser(delete_user::DeleteUser { user_id: n(TARGET) }),
        C::UpdateUser => Request::UpdateUser(update_user::UpdateUser {
            user_id: n(TARGET),
            username: None,
            status: Some(1),
            options: TrailingOptions::default(),
        }),
        C::UpdatePermissions => Request::UpdatePermissions(update_permissions::UpdatePermissions {
            user_id: n(TARGET),
            permissions: FlaggedPermissions(None),
        }),
        C::ChangePassword => Request::ChangePassword(change_password::ChangePassword {
            user_id: n(TARGET),
            current_password: ShortString::new("pass1").unwrap(),
            new_password: ShortString::new("pass1").unwrap(),
        }),
        C::LoginUser => Request::LoginUser(login_user::LoginUser {
            username: wire("iggy"),
            password: ShortString::new("iggy").unwrap(),
            version: LongString::default(),
            context: LongString::default(),
        }),
        C::LogoutUser => Request::LogoutUser(logout_user::LogoutUser),
        C::LoginRegister => Request::LoginRegister(login_register::LoginRegister {
            client: raw::sdk_version(),
            username: wire("iggy"),
            password: ShortString::new("iggy").unwrap(),
            context: LongString::default(),
        }),
        C::GetPersonalAccessTokens => {
            Request::GetPersonalAccessTokens(get_personal_access_tokens::GetPersonalAccessTokens)
        }
        C::CreatePersonalAccessToken => Request::CreatePersonalAccessToken(
            create_personal_access_token::CreatePersonalAccessToken {
                name: wire("tok"),
                expiry: 0,
            },
        ),
        C::DeletePersonalAccessToken => Request::DeletePersonalAccessToken(
            delete_personal_access_token::DeletePersonalAccessToken { name: wire("tok") },
        ),
        C::LoginWithPersonalAccessToken => Request::LoginWithPersonalAccessToken(
            login_with_personal_access_token::LoginWithPersonalAccessToken { token: wire("x") },
        ),
        C::LoginRegisterWithPat => {
            Request::LoginRegisterWithPat(login_register_with_pat::LoginRegisterWithPat {
                client: raw::sdk_version(),
                token: ShortString::new("not-a-token").unwrap(),
                context: LongString::default(),
            })
        }
        C::PollMessages => Request::PollMessages(poll_messages::PollMessages {
            consumer,
            stream_id: s(),
            topic_id: t(),
            partition: OptionalPartition(Some(0)),
            strategy: PollingStrategy::Offset(0),
            count: 10,
            auto_commit: false,
        }),
        C::PollMessagesDeferred => {
            let Request::PollMessages(poll) = sample(C::PollMessages) else {
                unreachable!("a poll sample")
            };
            Request::PollMessagesDeferred(poll_messages_deferred::PollMessagesDeferred {
                poll,
                wait_us: 0,
                min_count: 1,
                max_bytes: 1 << 20,
                request_timeout_us: 30_000_000,
            })
        }
        C::FetchMessages => Request::FetchMessages(fetch_messages::FetchMessages {
            consumer,
            stream_id: s(),
            topic_id: t(),
            wait_us: 0,
            request_timeout_us: 30_000_000,
            min_count: 1,
            count: 10,
            max_bytes: 1 << 20,
            auto_commit: false,
            targets: eddy_codec::stream::codec::Counted(vec![fetch_messages::FetchTarget {
                partition_id: 0,
                strategy: PollingStrategy::Offset(0),
                max_bytes: 1 << 20,
                incarnation: 1,
                owner_generation: 0,
            }]),
        }),
        C::GetMetadataChanges => Request::GetMetadataChanges(
            eddy_codec::stream::commands::get_metadata_changes::GetMetadataChanges {
                start: eddy_codec::stream::commands::get_metadata_changes::Start::Latest,
                since: None,
                until: None,
                limit: 10,
                groups: vec![],
            },
        ),
        C::CancelDeferredRequest => Request::CancelDeferredRequest(
            eddy_codec::stream::commands::cancel_deferred_request::CancelDeferredRequest,
        ),
        C::GetPartitionRoute => {
            Request::GetPartitionRoute(get_partition_route::GetPartitionRoute {
                stream_id: s(),
                topic_id: t(),
                partition_id: 0,
            })
        }
        // A topic patch (a stream or user patch is checked as UPDATE_STREAM or UPDATE_USER).
        C::UpdateResource => Request::UpdateResource(update_resource::UpdateResource {
            target: update_resource::ResourceTarget::Topic {
                stream_id: s(),
                topic_id: t(),
            },
            reset: update_resource::ResetKeys::default(),
            options: TrailingOptions(
                eddy_options::OptionsBlock::from_entries([(
                    "message_expiry",
                    eddy_options::ValueKind::Uint64,
                    &u64::MAX.to_le_bytes()[..],
                )])
                .unwrap(),
            ),
        }),
        C::SendMessages => Request::SendMessages(
            send_messages::SendMessages::new(
                s(),
                t(),
                Partitioning::PartitionId(0),
                &[Message::new(1, 1_700_000_000_000_000, &b"hello"[..])],
            )
            .unwrap(),
        ),
        C::FlushUnsavedBuffer => {
            Request::FlushUnsavedBuffer(flush_unsaved_buffer::FlushUnsavedBuffer {
                stream_id: s(),
                topic_id: t(),
                partition_id: 0,
                fsync: true,
            })
        }
        C::GetConsumerOffset => {
            Request::GetConsumerOffset(get_consumer_offset::GetConsumerOffset {
                consumer,
                stream_id: s(),
                topic_id: t(),
                partition: OptionalPartition(Some(0)),
            })
        }
        C::StoreConsumerOffset => {
            Request::StoreConsumerOffset(store_consumer_offset::StoreConsumerOffset {
                consumer,
                stream_id: s(),
                topic_id: t(),
                partition: OptionalPartition(Some(0)),
                offset: 0,
                ack: AckLevel::Quorum,
            })
        }
        C::DeleteConsumerOffset => {
            Request::DeleteConsumerOffset(delete_consumer_offset::DeleteConsumerOffset {
                consumer,
                stream_id: s(),
                topic_id: t(),
                partition: OptionalPartition(Some(0)),
                ack: AckLevel::Quorum,
            })
        }
        C::GetStream => Request::GetStream(get_stream::GetStream { stream_id: s() }),
        C::GetStreams => Request::GetStreams(get_streams::GetStreams),
        C::CreateStream => Request::CreateStream(create_stream::CreateStream {
            name: wire("created"),
            options: TrailingOptions::default(),
        }),
        C::DeleteStream => Request::DeleteStream(delete_stream::DeleteStream { stream_id: s() }),
        C::UpdateStream => Request::UpdateStream(update_stream::UpdateStream {
            stream_id: s(),
            name: wire(STREAM),
            options: TrailingOptions::default(),
        }),
        C::PurgeStream => Request::PurgeStream(purge_stream::PurgeStream { stream_id: s() }),
        C::GetTopic => Request::GetTopic(get_topic::GetTopic {
            stream_id: s(),
            topic_id: t(),
        }),
        C::GetTopics => Request::GetTopics(get_topics::GetTopics { stream_id: s() }),
        C::CreateTopic => Request::CreateTopic(create_topic::CreateTopic {
            stream_id: s(),
            partitions_count: 1,
            name: wire("created"),
            options: TrailingOptions::default(),
        }),
        C::DeleteTopic => Request::DeleteTopic(delete_topic::DeleteTopic {
            stream_id: s(),
            topic_id: t(),
        }),
        C::UpdateTopic => Request::UpdateTopic(update_topic::UpdateTopic {
            stream_id: s(),
            topic_id: t(),
            name: wire(TOPIC),
            options: TrailingOptions::default(),
        }),
        C::PurgeTopic => Request::PurgeTopic(purge_topic::PurgeTopic {
            stream_id: s(),
            topic_id: t(),
        }),
        C::CreatePartitions => Request::CreatePartitions(create_partitions::CreatePartitions {
            stream_id: s(),
            topic_id: t(),
            partitions_count: 1,
        }),
        C::DeletePartitions => Request::DeletePartitions(delete_partitions::DeletePartitions {
            stream_id: s(),
            topic_id: t(),
            partitions_count: 1,
        }),
        C::DeleteSegments => Request::DeleteSegments(delete_segments::DeleteSegments {
            stream_id: s(),
            topic_id: t(),
            partition_id: 0,
            segments_count: 1,
        }),
        C::GetConsumerGroup => Request::GetConsumerGroup(get_consumer_group::GetConsumerGroup {
            stream_id: s(),
            topic_id: t(),
            group_id: g(),
        }),
        C::GetConsumerGroups => {
            Request::GetConsumerGroups(get_consumer_groups::GetConsumerGroups {
                stream_id: s(),
                topic_id: t(),
            })
        }
        C::CreateConsumerGroup => {
            Request::CreateConsumerGroup(create_consumer_group::CreateConsumerGroup {
                stream_id: s(),
                topic_id: t(),
                name: wire("created"),
            })
        }
        C::DeleteConsumerGroup => {
            Request::DeleteConsumerGroup(delete_consumer_group::DeleteConsumerGroup {
                stream_id: s(),
                topic_id: t(),
                group_id: g(),
            })
        }
        C::JoinConsumerGroup => {
            Request::JoinConsumerGroup(join_consumer_group::JoinConsumerGroup {
                stream_id: s(),
                topic_id: t(),
                group_id: g(),
            })
        }
        C::LeaveConsumerGroup => {
            Request::LeaveConsumerGroup(leave_consumer_group::LeaveConsumerGroup {
                stream_id: s(),
                topic_id: t(),
                group_id: g(),
            })
        }
        C::SyncConsumerGroup => {
            Request::SyncConsumerGroup(sync_consumer_group::SyncConsumerGroup {
                stream_id: s(),
                topic_id: t(),
                group_id: g(),
            })
        }
    }
}

/// Recreates whatever a previous command deleted: stream, topic, group, target user; and
/// removes what it created.
async fn ensure_fixtures(root: &mut Raw) {
    let exists = |a: &Answer| a.code() == 0 && !a.payload().is_empty();
    if !exists(&root.call(&sample(CommandCode::GetStream)).await) {
        let a = root
            .call(&Request::CreateStream(create_stream::CreateStream {
                name: wire(STREAM),
                options: TrailingOptions::default(),
            }))
            .await;
        assert_eq!(a.code(), 0, "{a:?}");
    }
    if !exists(&root.call(&sample(CommandCode::GetTopic)).await) {
        let a = root
            .call(&Request::CreateTopic(create_topic::CreateTopic {
                stream_id: n(STREAM),
                partitions_count: 1,
                name: wire(TOPIC),
                options: TrailingOptions::default(),
            }))
            .await;
        assert_eq!(a.code(), 0, "{a:?}");
    }
    let partitions = root.call(&sample(CommandCode::GetTopic)).await.payload();
    // partitions_count is at offset 12 of the topic header.
    let count = u32::from_le_bytes(partitions[12..16].try_into().unwrap());
    if count == 0 {
        let a = root.call(&sample(CommandCode::CreatePartitions)).await;
        assert_eq!(a.code(), 0, "{a:?}");
    }
    if !exists(&root.call(&sample(CommandCode::GetConsumerGroup)).await) {
        let a = root
            .call(&Request::CreateConsumerGroup(
                create_consumer_group::CreateConsumerGroup {
                    stream_id: n(STREAM),
                    topic_id: n(TOPIC),
                    name: wire(GROUP),
                },
            ))
            .await;
        assert_eq!(a.code(), 0, "{a:?}");
    }
    if !exists(&root.call(&sample(CommandCode::GetUser)).await) {
        create_user(root, TARGET, "pass1", None).await;
    }
    for created in ["created"] {
        root.call(&Request::DeleteStream(delete_stream::DeleteStream {
            stream_id: n(created),
        }))
        .await;
        root.call(&Request::DeleteUser(delete_user::DeleteUser {
            user_id: n(created),
        }))
        .await;
    }
}

async fn create_user(
    root: &mut Raw,
    username: &str,
    password: &str,
    permissions: Option<eddy_codec::stream::Permissions>,
) {
    let a = root
        .call(&Request::CreateUser(create_user::CreateUser {
            username: wire(username),
            password: ShortString::new(password).unwrap(),
            status: 1,
            permissions: FlaggedPermissions(permissions),
            options: TrailingOptions::default(),
        }))
        .await;
    assert_eq!(a.code(), 0, "create user {username}: {a:?}");
}

fn denied(a: &Answer) -> bool {
    matches!(a.code(), 40 | 41)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_matrix_from_the_command_table() {
    let eddy = server();
    let addr = eddy.addrs().stream;
    let mut root = Raw::logged_in(addr, "iggy", "iggy").await;
    ensure_fixtures(&mut root).await;
    create_user(&mut root, "without", "secret", None).await;
    let mut without = Raw::logged_in(addr, "without", "secret").await;
    let mut anonymous = Raw::connect(addr).await;
    // The fixtures' numeric ids, for narrow grants.
    let on = Resource {
        stream_id: Some(0),
        topic_id: Some(0),
        user_id: None,
    };
    for spec in &COMMANDS {
        let code = spec.code;
        if code == CommandCode::CancelDeferredRequest {
            // Before login it is refused like every read; once logged in a cancel is never
            // answered (the cancelled request is; the edge.9 scenarios cover that): one that
            // finds nothing waiting, replayed or forged, changes nothing and the connection
            // answers its next request.
            let cancel = sample(code);
            let a = anonymous.call(&cancel).await;
            assert!(
                matches!(&a, Answer::Reply { header, .. } if header.status == 40),
                "a cancel before login must be status 40: {a:?}"
            );
            for raw in [&mut without, &mut root] {
                let body = cancel.to_vec();
                let header = raw.header(
                    eddy_wire::stream::Operation::NonReplicated,
                    code.code(),
                    &body,
                );
                let mut frame = header.encode().to_vec();
                frame.extend_from_slice(&body);
                raw.write(&frame).await;
                raw.write(&frame).await;
                let ping = raw.header(
                    eddy_wire::stream::Operation::NonReplicated,
                    CommandCode::Ping.code(),
                    &[],
                );
                let a = raw.send(&ping, &[]).await;
                assert!(
                    matches!(&a, Answer::Reply { header, .. }
                        if header.status == 0 && header.request == ping.request),
                    "the first answer after two cancels is the ping's: {a:?}"
                );
            }
            continue;
        }
        let request = sample(code);
        ensure_fixtures(&mut root).await;
        match spec.permission {
            RequiredPermission::Rejected => {
                for raw in [&mut anonymous, &mut without, &mut root] {
                    let a = raw.call(&request).await;
                    assert_eq!(
                        a.eviction(),
                        Some(EvictionReason::MalformedLogin as u8),
                        "{}: {a:?}",
                        spec.name
                    );
                }
                continue;
            }
            RequiredPermission::Credentials => {
                // Logins run on fresh connections (they rebind the connection).
                let mut fresh = Raw::connect(addr).await;
                let a = fresh.call(&request).await;
                match code {
                    CommandCode::LoginRegister => assert_eq!(a.code(), 0, "{a:?}"),
                    _ => assert_eq!(
                        a.eviction(),
                        Some(EvictionReason::InvalidToken as u8),
                        "{a:?}"
                    ),
                }
                continue;
            }
            _ => {}
        }
        // Unauthenticated: only the pre-auth commands are served.
        let a = anonymous.call(&request).await;
        if spec.pre_auth {
            assert_eq!(a.code(), 0, "{} before login: {a:?}", spec.name);
        } else if spec.operation == Some(eddy_wire::stream::Operation::NonReplicated) {
            assert!(
                matches!(&a, Answer::Reply { header, .. } if header.status == 40),
                "{} before login must be status 40: {a:?}",
                spec.name
            );
        } else {
            assert_eq!(
                a.eviction(),
                Some(EvictionReason::NoSession as u8),
                "{} before login must evict NoSession: {a:?}",
                spec.name
            );
        }
        ensure_fixtures(&mut root).await;
        // A user without any permission.
        let a = without.call(&request).await;
        match spec.permission {
            RequiredPermission::None
            | RequiredPermission::Authenticated
            | RequiredPermission::Unavailable => {
                assert!(!denied(&a), "{} is open to every user: {a:?}", spec.name);
            }
            _ => assert_eq!(a.code(), 41, "{} without permission: {a:?}", spec.name),
        }
        if code == CommandCode::LogoutUser {
            without.login("without", "secret").await;
        }
        ensure_fixtures(&mut root).await;
        // A user with exactly the permission the command needs.
        if let Some(grant) = minimal_grant(spec.permission, &on) {
            let username = format!("with-{}", code.code());
            create_user(&mut root, &username, "secret", Some(grant)).await;
            let mut with = Raw::logged_in(addr, &username, "secret").await;
            let a = with.call(&request).await;
            assert!(!denied(&a), "{} with its permission: {a:?}", spec.name);
            // The same grant does not reach another stream.
            if !matches!(
                spec.permission,
                RequiredPermission::ReadServers
                    | RequiredPermission::ManageServers
                    | RequiredPermission::ReadUsers
                    | RequiredPermission::SelfOrReadUsers
                    | RequiredPermission::ManageUsers
                    | RequiredPermission::SelfOrManageUsers
                    | RequiredPermission::ReadStreams
                    | RequiredPermission::ManageStreams
            ) {
                ensure_fixtures(&mut root).await;
                let other = root
                    .call(&Request::CreateStream(create_stream::CreateStream {
                        name: wire("other"),
                        options: TrailingOptions::default(),
                    }))
                    .await;
                if other.code() == 0 {
                    root.call(&Request::CreateTopic(create_topic::CreateTopic {
                        stream_id: n("other"),
                        partitions_count: 1,
                        name: wire(TOPIC),
                        options: TrailingOptions::default(),
                    }))
                    .await;
                }
                let elsewhere = retarget(sample(code), "other");
                let a = with.call(&elsewhere).await;
                assert_eq!(a.code(), 41, "{} on another stream: {a:?}", spec.name);
            }
        }
        ensure_fixtures(&mut root).await;
        // Root passes every check.
        let a = root.call(&request).await;
        assert!(!denied(&a), "{} as root: {a:?}", spec.name);
        if code == CommandCode::LogoutUser {
            root.login("iggy", "iggy").await;
        }
    }
}

/// The same request addressed to another stream.
fn retarget(request: Request, stream: &str) -> Request {
    let s = n(stream);
    match request {
        Request::PollMessages(mut r) => {
            r.stream_id = s;
            Request::PollMessages(r)
        }
        Request::PollMessagesDeferred(mut r) => {
            r.poll.stream_id = s;
            Request::PollMessagesDeferred(r)
        }
        Request::FetchMessages(mut r) => {
            r.stream_id = s;
            Request::FetchMessages(r)
        }
        Request::GetPartitionRoute(mut r) => {
            r.stream_id = s;
            Request::GetPartitionRoute(r)
        }
        Request::UpdateResource(mut r) => {
            if let update_resource::ResourceTarget::Topic { stream_id, .. } = &mut r.target {
                *stream_id = s;
            }
            Request::UpdateResource(r)
        }
        Request::SendMessages(mut r) => {
            r.stream_id = s;
            Request::SendMessages(r)
        }
        Request::GetConsumerOffset(mut r) => {
            r.stream_id = s;
            Request::GetConsumerOffset(r)
        }
        Request::StoreConsumerOffset(mut r) => {
            r.stream_id = s;
            Request::StoreConsumerOffset(r)
        }
        Request::DeleteConsumerOffset(mut r) => {
            r.stream_id = s;
            Request::DeleteConsumerOffset(r)
        }
        Request::GetStream(mut r) => {
            r.stream_id = s;
            Request::GetStream(r)
        }
        Request::DeleteStream(mut r) => {
            r.stream_id = s;
            Request::DeleteStream(r)
        }
        Request::UpdateStream(mut r) => {
            r.stream_id = s;
            r.name = wire(stream);
            Request::UpdateStream(r)
        }
        Request::PurgeStream(mut r) => {
            r.stream_id = s;
            Request::PurgeStream(r)
        }
        Request::GetTopic(mut r) => {
            r.stream_id = s;
            Request::GetTopic(r)
        }
        Request::GetTopics(mut r) => {
            r.stream_id = s;
            Request::GetTopics(r)
        }
        Request::CreateTopic(mut r) => {
            r.stream_id = s;
            Request::CreateTopic(r)
        }
        Request::DeleteTopic(mut r) => {
            r.stream_id = s;
            Request::DeleteTopic(r)
        }
        Request::UpdateTopic(mut r) => {
            r.stream_id = s;
            Request::UpdateTopic(r)
        }
        Request::PurgeTopic(mut r) => {
            r.stream_id = s;
            Request::PurgeTopic(r)
        }
        Request::CreatePartitions(mut r) => {
            r.stream_id = s;
            Request::CreatePartitions(r)
        }
        Request::DeletePartitions(mut r) => {
            r.stream_id = s;
            Request::DeletePartitions(r)
        }
        Request::DeleteSegments(mut r) => {
            r.stream_id = s;
            Request::DeleteSegments(r)
        }
        Request::GetConsumerGroups(mut r) => {
            r.stream_id = s;
            Request::GetConsumerGroups(r)
        }
        Request::CreateConsumerGroup(mut r) => {
            r.stream_id = s;
            Request::CreateConsumerGroup(r)
        }
        // Group-addressed commands: the group name does not exist in the other topic, so the
        // permission is checked on the stream and topic, which resolve.
        Request::GetConsumerGroup(mut r) => {
            r.stream_id = s;
            Request::GetConsumerGroup(r)
        }
        Request::DeleteConsumerGroup(mut r) => {
            r.stream_id = s;
            Request::DeleteConsumerGroup(r)
        }
        Request::JoinConsumerGroup(mut r) => {
            r.stream_id = s;
            Request::JoinConsumerGroup(r)
        }
        Request::LeaveConsumerGroup(mut r) => {
            r.stream_id = s;
            Request::LeaveConsumerGroup(r)
        }
        other => panic!("no stream to retarget in {other:?}"),
    }
}

#[tokio::test]
async fn password_and_token_logins() {
    let eddy = server();
    let addr = eddy.addrs().stream;
    let root = root(addr).await;
    root.create_user("alice", "alice-pw", UserStatus::Active, None)
        .await
        .unwrap();

    // Password login, then a token created by that user logs in as that user.
    let alice = login(addr, "alice", "alice-pw").await;
    let token = alice
        .create_personal_access_token("laptop", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .unwrap()
        .token;
    assert_eq!(token.len(), 68);
    let tokens = alice.get_personal_access_tokens().await.unwrap();
    assert_eq!(tokens.len(), 1);
    assert_eq!(tokens[0].name, "laptop");
    let dup = alice
        .create_personal_access_token("laptop", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .unwrap_err();
    assert_eq!(code(&dup), 51, "{dup}");
    let by_token = connect(addr).await;
    let identity = by_token
        .login_with_personal_access_token(&token)
        .await
        .unwrap();
    assert_eq!(identity.user_id, 1);
    assert_eq!(by_token.get_me().await.unwrap().user_id, Some(1));

    // Wrong password and unknown user: InvalidCredentials.
    let err = connect(addr)
        .await
        .login_user("alice", "wrong-pw")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 42, "{err}");
    let err = connect(addr)
        .await
        .login_user("nobody", "alice-pw")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 42, "{err}");
    // Unknown token: InvalidPersonalAccessToken.
    let err = connect(addr)
        .await
        .login_with_personal_access_token("bm90LWEtdG9rZW4=")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 53, "{err}");

    // An expiring token works until it expires.
    let short = alice
        .create_personal_access_token(
            "short",
            PersonalAccessTokenExpiry::ExpireDuration(Duration::from_millis(1500).into()),
        )
        .await
        .unwrap()
        .token;
    connect(addr)
        .await
        .login_with_personal_access_token(&short)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let err = connect(addr)
        .await
        .login_with_personal_access_token(&short)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 53, "expired: {err}");
    alice.delete_personal_access_token("short").await.unwrap();
    let err = alice
        .delete_personal_access_token("short")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 20, "{err}");

    // Deactivation: the live sessions end, password logins are refused as invalid credentials,
    // token logins as inactive.
    root.update_user(
        &named("alice"),
        None,
        Some(UserStatus::Inactive),
        &UserUpdateOptions::default(),
    )
    .await
    .unwrap();
    let err = alice.get_streams().await.unwrap_err();
    assert_eq!(code(&err), 40, "deactivated session: {err}");
    let err = by_token.get_me().await.unwrap_err();
    assert_eq!(code(&err), 40, "deactivated token session: {err}");
    let err = connect(addr)
        .await
        .login_user("alice", "alice-pw")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 42, "{err}");
    let mut raw = Raw::connect(addr).await;
    let a = raw.register(&raw::token_body(&token)).await;
    assert_eq!(
        a.eviction(),
        Some(EvictionReason::UserInactive as u8),
        "{a:?}"
    );
    root.update_user(
        &named("alice"),
        None,
        Some(UserStatus::Active),
        &UserUpdateOptions::default(),
    )
    .await
    .unwrap();
    let alice = login(addr, "alice", "alice-pw").await;

    // Password change, then the old password fails.
    alice
        .change_password(&named("alice"), "alice-pw", "alice-pw2")
        .await
        .unwrap();
    let err = alice
        .change_password(&named("alice"), "alice-pw", "alice-pw3")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 42, "{err}");
    let err = connect(addr)
        .await
        .login_user("alice", "alice-pw")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 42, "{err}");
    let alice = login(addr, "alice", "alice-pw2").await;

    // Deletion ends every session of the user and its tokens.
    let by_token = connect(addr).await;
    by_token
        .login_with_personal_access_token(&token)
        .await
        .unwrap();
    root.delete_user(&named("alice")).await.unwrap();
    for session in [&alice, &by_token] {
        let err = session.get_me().await.unwrap_err();
        assert_eq!(code(&err), 40, "deleted user's session: {err}");
    }
    let mut raw = Raw::connect(addr).await;
    let a = raw.register(&raw::token_body(&token)).await;
    assert_eq!(
        a.eviction(),
        Some(EvictionReason::InvalidToken as u8),
        "{a:?}"
    );
    let err = connect(addr)
        .await
        .login_user("alice", "alice-pw2")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 42, "{err}");

    // Re-login on a live connection works (the SDK logs out first).
    root.login_user("iggy", "iggy").await.unwrap();
    assert_eq!(root.get_me().await.unwrap().user_id, Some(0));
}

#[tokio::test]
async fn login_evictions_and_the_version_gate() {
    let eddy = server();
    let addr = eddy.addrs().stream;
    let mut raw = Raw::connect(addr).await;
    // Wrong password: InvalidCredentials, and the connection stays usable.
    let a = raw.register(&raw::login_body("iggy", "wrong")).await;
    assert_eq!(a.eviction(), Some(EvictionReason::InvalidCredentials as u8));
    // Undecodable version prefix: MalformedLogin.
    let a = raw.register(&[0, 0x2c, 0, 0]).await;
    assert_eq!(a.eviction(), Some(EvictionReason::MalformedLogin as u8));
    // A 0.10 client: IncompatibleProtocol with the window.
    let mut old = raw::login_body("iggy", "iggy");
    old[..4].copy_from_slice(&(10u32 << 10).to_le_bytes());
    let a = raw.register(&old).await;
    let Answer::Evicted(e) = a else {
        panic!("expected an eviction, got {a:?}");
    };
    assert_eq!(e.reason, EvictionReason::IncompatibleProtocol as u8);
    // The window spans the revisions eddy serves: 0.11.x and 0.12.2 (the edge.9 SDK).
    assert_eq!(
        (e.server_protocol_version, e.server_protocol_version_min),
        (0x3002, 0x2C00)
    );
    assert_eq!(e.client, raw.client);
    // 0.12.1 shares no layout with either revision: refused too.
    let mut between = raw::login_body("iggy", "iggy");
    between[..4].copy_from_slice(&((12u32 << 10) | 1).to_le_bytes());
    let a = raw.register(&between).await;
    assert_eq!(
        a.eviction(),
        Some(EvictionReason::IncompatibleProtocol as u8)
    );
    // Then a good login on the same connection.
    raw.login("iggy", "iggy").await;
    let a = raw.call(&sample(CommandCode::GetMe)).await;
    assert_eq!(a.code(), 0);
    // Logout, then a write is NoSession and a read is 40.
    let a = raw
        .call(&Request::LogoutUser(logout_user::LogoutUser))
        .await;
    assert_eq!(a.code(), 0);
    let a = raw.call(&sample(CommandCode::GetStreams)).await;
    assert_eq!(a.code(), 40);
    let a = raw.call(&sample(CommandCode::CreateStream)).await;
    assert_eq!(a.eviction(), Some(EvictionReason::NoSession as u8));
    // Logout while logged out is a no-op success.
    let a = raw
        .call(&Request::LogoutUser(logout_user::LogoutUser))
        .await;
    assert_eq!(a.code(), 0);
}
