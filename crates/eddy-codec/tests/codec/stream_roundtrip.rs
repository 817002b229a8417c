//! Property tests over every request and reply payload of the stream protocol: encode then
//! decode is the identity, the predicted length equals the actual one, every prefix decodes
//! cleanly (an error or a shorter value, never a panic), and `Request::decode` by code agrees
//! with the per-type decoders.

use bytes::Bytes;
use eddy_codec::stream::codec::{Counted, LongString, ShortString, ToEnd, F32};
use eddy_codec::stream::commands::*;
use eddy_codec::stream::entities::*;
use eddy_codec::stream::permissions::FlaggedPermissions;
use eddy_codec::stream::*;
use eddy_options::{OptionsBlock, Scope, ValueKind};
use proptest::prelude::*;

fn check<T>(value: &T) -> Result<(), TestCaseError>
where
    T: WireEncode + WireDecode + PartialEq + std::fmt::Debug,
{
    let bytes = value.to_vec();
    prop_assert_eq!(bytes.len(), value.encoded_len());
    prop_assert_eq!(&T::decode(&bytes).unwrap(), value);
    prop_assert_eq!(
        &T::decode_bytes(&Bytes::from(bytes.clone())).unwrap(),
        value
    );
    for cut in 0..bytes.len() {
        let _ = T::decode(&bytes[..cut]);
    }
    Ok(())
}

fn check_request<T>(value: &T) -> Result<(), TestCaseError>
where
    T: Command + PartialEq + std::fmt::Debug,
{
    check(value)?;
    let body = Bytes::from(value.to_vec());
    let request = Request::decode(T::CODE, &body).unwrap();
    prop_assert_eq!(request.code(), T::CODE);
    prop_assert_eq!(request.to_vec(), body.to_vec());
    Ok(())
}

fn name() -> impl Strategy<Value = WireName> {
    "[a-zA-Z0-9._ -]{1,30}".prop_map(|s| WireName::new(s).unwrap())
}

fn text() -> impl Strategy<Value = String> {
    "[ -~]{0,40}"
}

fn short() -> impl Strategy<Value = ShortString> {
    text().prop_map(|s| ShortString::new(s).unwrap())
}

fn long() -> impl Strategy<Value = LongString> {
    text().prop_map(LongString)
}

fn ident() -> impl Strategy<Value = Identifier> {
    prop_oneof![
        any::<u32>().prop_map(Identifier::Numeric),
        name().prop_map(Identifier::Named)
    ]
}

fn consumer() -> impl Strategy<Value = Consumer> {
    (any::<bool>(), ident()).prop_map(|(group, id)| {
        if group {
            Consumer::group(id)
        } else {
            Consumer::new(id)
        }
    })
}

fn partitioning() -> impl Strategy<Value = Partitioning> {
    prop_oneof![
        Just(Partitioning::Balanced),
        any::<u32>().prop_map(Partitioning::PartitionId),
        proptest::collection::vec(any::<u8>(), 1..=255).prop_map(Partitioning::MessagesKey),
    ]
}

fn opt_partition() -> impl Strategy<Value = OptionalPartition> {
    any::<Option<u32>>().prop_map(OptionalPartition)
}

fn strategy() -> impl Strategy<Value = PollingStrategy> {
    prop_oneof![
        any::<u64>().prop_map(PollingStrategy::Offset),
        any::<u64>().prop_map(PollingStrategy::Timestamp),
        Just(PollingStrategy::First),
        Just(PollingStrategy::Last),
        Just(PollingStrategy::Next),
    ]
}

fn ack() -> impl Strategy<Value = AckLevel> {
    prop_oneof![Just(AckLevel::NoAck), Just(AckLevel::Quorum)]
}

fn options() -> impl Strategy<Value = OptionsBlock> {
    proptest::collection::btree_map(
        "[a-z_]{1,20}",
        proptest::collection::vec(any::<u8>(), 1..16),
        0..4,
    )
    .prop_map(|map| {
        OptionsBlock::from_entries(
            map.iter()
                .map(|(k, v)| (k.as_str(), ValueKind::Raw, v.as_slice())),
        )
        .unwrap()
    })
}

fn trailing() -> impl Strategy<Value = TrailingOptions> {
    options().prop_map(TrailingOptions)
}

fn permissions() -> impl Strategy<Value = Permissions> {
    let topic = any::<[bool; 4]>().prop_map(|f| TopicPermissions {
        manage_topic: f[0],
        read_topic: f[1],
        poll_messages: f[2],
        send_messages: f[3],
    });
    let stream = (
        any::<[bool; 6]>(),
        proptest::collection::btree_map(any::<u32>(), topic, 0..3),
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
        proptest::collection::btree_map(any::<u32>(), stream, 0..3),
    )
        .prop_map(|(g, streams)| Permissions {
            global: GlobalPermissions {
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
            },
            streams,
        })
}

fn stream_response() -> impl Strategy<Value = StreamResponse> {
    (any::<[u32; 2]>(), any::<[u64; 3]>(), name(), options()).prop_map(|(a, b, name, options)| {
        StreamResponse {
            id: a[0],
            created_at: b[0],
            topics_count: a[1],
            size_bytes: b[1],
            messages_count: b[2],
            name,
            options,
        }
    })
}

fn topic_header(partitions_count: u32) -> impl Strategy<Value = TopicHeader> {
    (
        any::<u32>(),
        any::<[u64; 5]>(),
        1u8..=2,
        name(),
        options(),
        options(),
    )
        .prop_map(
            move |(id, v, compression, name, options, derived)| TopicHeader {
                id,
                created_at: v[0],
                partitions_count,
                message_expiry: v[1],
                compression_algorithm: compression,
                max_topic_size: v[2],
                size_bytes: v[3],
                messages_count: v[4],
                name,
                options,
                derived_options: derived,
            },
        )
}

fn partition() -> impl Strategy<Value = PartitionResponse> {
    (any::<[u32; 2]>(), any::<[u64; 4]>()).prop_map(|(a, b)| PartitionResponse {
        id: a[0],
        created_at: b[0],
        segments_count: a[1],
        current_offset: b[1],
        size_bytes: b[2],
        messages_count: b[3],
    })
}

fn topic_details() -> impl Strategy<Value = TopicDetails> {
    proptest::collection::vec(partition(), 0..4).prop_flat_map(|partitions| {
        topic_header(partitions.len() as u32).prop_map(move |topic| TopicDetails {
            topic,
            partitions: partitions.clone(),
        })
    })
}

fn stream_details() -> impl Strategy<Value = StreamDetails> {
    (
        stream_response(),
        proptest::collection::vec(topic_header(3), 0..3),
    )
        .prop_map(|(mut stream, topics)| {
            stream.topics_count = topics.len() as u32;
            StreamDetails { stream, topics }
        })
}

fn user() -> impl Strategy<Value = UserResponse> {
    (any::<u32>(), any::<u64>(), 1u8..=2, name(), options()).prop_map(
        |(id, created_at, status, username, options)| UserResponse {
            id,
            created_at,
            status,
            username,
            options,
        },
    )
}

fn user_details() -> impl Strategy<Value = UserDetails> {
    (user(), proptest::option::of(permissions()))
        .prop_map(|(user, permissions)| UserDetails { user, permissions })
}

fn client() -> impl Strategy<Value = ClientResponse> {
    (any::<[u32; 2]>(), 1u8..=4, long(), any::<u32>()).prop_map(
        |(a, transport, address, groups)| ClientResponse {
            client_id: a[0],
            user_id: a[1],
            transport,
            address,
            consumer_groups_count: groups,
        },
    )
}

fn client_details() -> impl Strategy<Value = ClientDetails> {
    (client(), proptest::collection::vec(any::<[u32; 3]>(), 0..4)).prop_map(|(mut client, g)| {
        client.consumer_groups_count = g.len() as u32;
        ClientDetails {
            client,
            groups: g
                .into_iter()
                .map(|g| ClientGroup {
                    stream_id: g[0],
                    topic_id: g[1],
                    group_id: g[2],
                })
                .collect(),
        }
    })
}

fn group_details() -> impl Strategy<Value = ConsumerGroupDetails> {
    (
        any::<[u32; 2]>(),
        name(),
        proptest::collection::vec(
            (any::<u32>(), proptest::collection::vec(any::<u32>(), 0..4)),
            0..4,
        ),
    )
        .prop_map(|(a, name, members)| ConsumerGroupDetails {
            group: ConsumerGroupResponse {
                id: a[0],
                partitions_count: a[1],
                members_count: members.len() as u32,
                name,
            },
            members: members
                .into_iter()
                .map(|(id, partitions)| ConsumerGroupMember { id, partitions })
                .collect(),
        })
}

fn client_version() -> impl Strategy<Value = login_register::ClientVersionInfo> {
    (any::<u32>(), name(), name()).prop_map(|(v, n, s)| login_register::ClientVersionInfo {
        protocol_version: v,
        sdk_name: n,
        sdk_version: s,
    })
}

fn messages() -> impl Strategy<Value = Vec<Message>> {
    proptest::collection::vec(
        (
            any::<u128>(),
            0u64..10_000,
            proptest::collection::vec(any::<u8>(), 1..64),
        ),
        1..5,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(id, ts, payload)| Message::new(id, 1_000_000 + ts, payload))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn system(client_id in any::<u32>(), scope in 1u8..=3, compression in 1u8..=6,
              types in proptest::collection::vec(prop::sample::select(vec![1u8, 2, 3, 4, 5, 6, 100]), 0..5),
              details in client_details(), clients in proptest::collection::vec(client(), 0..3),
              strings in proptest::collection::vec(long(), 6), n in any::<[u64; 6]>()) {
        check_request(&ping::Ping)?;
        check(&Empty)?;
        check_request(&get_stats::GetStats)?;
        check_request(&get_snapshot::GetSnapshot { compression, types })?;
        check_request(&get_cluster_metadata::GetClusterMetadata)?;
        check_request(&describe_options::DescribeOptions { scope: Scope::from_code(scope).unwrap() })?;
        check_request(&get_me::GetMe)?;
        check_request(&get_client::GetClient { client_id })?;
        check_request(&get_clients::GetClients)?;
        check(&details)?;
        check(&Maybe(Some(details)))?;
        check(&ToEnd(clients))?;
        let stats = get_stats::Stats {
            process_id: n[0] as u32, cpu_usage: F32(f32::from(n[1] as u16)), total_cpu_usage: F32(1.0),
            memory_usage: n[0], total_memory: n[1], available_memory: n[2], run_time: n[3],
            start_time: n[4], read_bytes: n[5], written_bytes: 1, messages_size_bytes: 2,
            streams_count: 3, topics_count: 4, partitions_count: 5, segments_count: 6,
            messages_count: 7, clients_count: 8, consumer_groups_count: 9,
            hostname: strings[0].clone(), os_name: strings[1].clone(), os_version: strings[2].clone(),
            kernel_version: strings[3].clone(), iggy_server_version: strings[4].clone(),
            iggy_server_semver: n[0] as u32,
            cache_metrics: Counted(vec![get_stats::CacheMetric { stream_id: 1, topic_id: 2, partition_id: 3, hits: n[1], misses: n[2], hit_ratio: F32(0.25) }]),
            threads_count: 10, free_disk_space: n[3], total_disk_space: n[4],
        };
        check(&stats)?;
        let node = get_cluster_metadata::ClusterNode {
            name: strings[5].clone(), ip: strings[0].clone(), tcp_port: n[0] as u16, quic_port: 1,
            http_port: 2, websocket_port: 3, role: 0, status: 0,
        };
        check(&get_cluster_metadata::ClusterMetadata { name: strings[1].clone(), nodes: Counted(vec![node]) })?;
        check(&get_snapshot::Snapshot(Bytes::from(n[0].to_le_bytes().to_vec())))?;
    }

    #[test]
    fn users(id in ident(), username in name(), password in short(), other in short(),
             status in any::<u8>(), perms in proptest::option::of(permissions()), opts in trailing(),
             details in user_details(), users in proptest::collection::vec(user(), 0..3),
             new_name in proptest::option::of(name()), new_status in proptest::option::of(any::<u8>()),
             version in client_version(), context in long(), session in any::<u64>()) {
        check_request(&get_user::GetUser { user_id: id.clone() })?;
        check_request(&get_users::GetUsers)?;
        check_request(&create_user::CreateUser { username: username.clone(), password: password.clone(), status, permissions: FlaggedPermissions(perms.clone()), options: opts.clone() })?;
        check_request(&delete_user::DeleteUser { user_id: id.clone() })?;
        check_request(&update_user::UpdateUser { user_id: id.clone(), username: new_name, status: new_status, options: opts })?;
        check_request(&update_permissions::UpdatePermissions { user_id: id.clone(), permissions: FlaggedPermissions(perms) })?;
        check_request(&change_password::ChangePassword { user_id: id, current_password: password.clone(), new_password: other.clone() })?;
        check_request(&login_user::LoginUser { username: username.clone(), password: password.clone(), version: context.clone(), context: context.clone() })?;
        check_request(&logout_user::LogoutUser)?;
        check_request(&login_register::LoginRegister { client: version.clone(), username: username.clone(), password, context: context.clone() })?;
        check_request(&login_register_with_pat::LoginRegisterWithPat { client: version, token: other, context })?;
        check(&details)?;
        check(&Maybe(Some(details)))?;
        check(&ToEnd(users))?;
        check(&login_register::LoginRegisterReply { user_id: 1, session, server_protocol_version: 0x2C00, server_version: username })?;
        check(&login_user::LegacyLoginReply { user_id: session as u32 })?;
    }

    #[test]
    fn tokens(token_name in name(), expiry in any::<u64>(), infos in proptest::collection::vec((name(), any::<u64>()), 0..3)) {
        check_request(&get_personal_access_tokens::GetPersonalAccessTokens)?;
        check_request(&create_personal_access_token::CreatePersonalAccessToken { name: token_name.clone(), expiry })?;
        check_request(&delete_personal_access_token::DeletePersonalAccessToken { name: token_name.clone() })?;
        check_request(&login_with_personal_access_token::LoginWithPersonalAccessToken { token: token_name.clone() })?;
        check(&create_personal_access_token::RawPersonalAccessToken { token: token_name })?;
        check(&ToEnd(infos.into_iter().map(|(name, expiry_at)| get_personal_access_tokens::PersonalAccessTokenInfo { name, expiry_at }).collect()))?;
    }

    #[test]
    fn messages_and_offsets(c in consumer(), s in ident(), t in ident(), p in opt_partition(),
                            strat in strategy(), count in any::<u32>(), auto in any::<bool>(),
                            part in partitioning(), msgs in messages(), offset in any::<u64>(),
                            a in ack(), fsync in any::<bool>(), n in any::<[u32; 3]>()) {
        check_request(&poll_messages::PollMessages { consumer: c.clone(), stream_id: s.clone(), topic_id: t.clone(), partition: p, strategy: strat, count, auto_commit: auto })?;
        let send = send_messages::SendMessages::new(s.clone(), t.clone(), part, &msgs).unwrap();
        check_request(&send)?;
        prop_assert!(send.admit().is_ok());
        check_request(&flush_unsaved_buffer::FlushUnsavedBuffer { stream_id: s.clone(), topic_id: t.clone(), partition_id: n[0], fsync })?;
        check_request(&get_consumer_offset::GetConsumerOffset { consumer: c.clone(), stream_id: s.clone(), topic_id: t.clone(), partition: p })?;
        check_request(&store_consumer_offset::StoreConsumerOffset { consumer: c.clone(), stream_id: s.clone(), topic_id: t.clone(), partition: p, offset, ack: a })?;
        check_request(&delete_consumer_offset::DeleteConsumerOffset { consumer: c, stream_id: s, topic_id: t, partition: p, ack: a })?;
        check(&Maybe(Some(get_consumer_offset::ConsumerOffsetInfo { partition_id: n[1], current_offset: offset, stored_offset: offset / 2 })))?;
        check(&send_messages::SendMessagesReply { confirmations: vec![send_messages::SendConfirmation { stream_id: n[0], topic_id: n[1], partition_id: n[2], base_offset: offset }] })?;
        let stored = StoredBatch::parse(Bytes::from(send.admit().unwrap().stamp(u64::from(n[2]), offset / 2, 5).to_vec())).unwrap();
        check(&poll_messages::PollMessagesReply::new(n[2], offset, vec![stored.record(), stored.slice(stored.first_offset(), 1).unwrap()]))?;
    }

    #[test]
    fn streams_topics_partitions(s in ident(), t in ident(), stream_name in name(), opts in trailing(),
                                 n in any::<[u32; 3]>(), sd in stream_details(), td in topic_details(),
                                 streams in proptest::collection::vec(stream_response(), 0..3),
                                 topics in proptest::collection::vec(topic_header(2), 0..3)) {
        check_request(&get_stream::GetStream { stream_id: s.clone() })?;
        check_request(&get_streams::GetStreams)?;
        check_request(&create_stream::CreateStream { name: stream_name.clone(), options: opts.clone() })?;
        check_request(&delete_stream::DeleteStream { stream_id: s.clone() })?;
        check_request(&update_stream::UpdateStream { stream_id: s.clone(), name: stream_name.clone(), options: opts.clone() })?;
        check_request(&purge_stream::PurgeStream { stream_id: s.clone() })?;
        check_request(&get_topic::GetTopic { stream_id: s.clone(), topic_id: t.clone() })?;
        check_request(&get_topics::GetTopics { stream_id: s.clone() })?;
        check_request(&create_topic::CreateTopic { stream_id: s.clone(), partitions_count: n[0], name: stream_name.clone(), options: opts.clone() })?;
        check_request(&delete_topic::DeleteTopic { stream_id: s.clone(), topic_id: t.clone() })?;
        check_request(&update_topic::UpdateTopic { stream_id: s.clone(), topic_id: t.clone(), name: stream_name, options: opts })?;
        check_request(&purge_topic::PurgeTopic { stream_id: s.clone(), topic_id: t.clone() })?;
        check_request(&create_partitions::CreatePartitions { stream_id: s.clone(), topic_id: t.clone(), partitions_count: n[1] })?;
        check_request(&delete_partitions::DeletePartitions { stream_id: s.clone(), topic_id: t.clone(), partitions_count: n[1] })?;
        check_request(&delete_segments::DeleteSegments { stream_id: s, topic_id: t, partition_id: n[2], segments_count: n[0] })?;
        check(&sd)?;
        check(&Maybe(Some(sd)))?;
        check(&td)?;
        check(&Maybe(Some(td)))?;
        check(&ToEnd(streams))?;
        check(&get_topics::TopicList(topics))?;
    }

    #[test]
    fn consumer_groups(s in ident(), t in ident(), g in ident(), group_name in name(),
                       details in group_details(), generation in any::<u64>(),
                       partitions in proptest::collection::vec(any::<u32>(), 0..5)) {
        check_request(&get_consumer_group::GetConsumerGroup { stream_id: s.clone(), topic_id: t.clone(), group_id: g.clone() })?;
        check_request(&get_consumer_groups::GetConsumerGroups { stream_id: s.clone(), topic_id: t.clone() })?;
        check_request(&create_consumer_group::CreateConsumerGroup { stream_id: s.clone(), topic_id: t.clone(), name: group_name })?;
        check_request(&delete_consumer_group::DeleteConsumerGroup { stream_id: s.clone(), topic_id: t.clone(), group_id: g.clone() })?;
        check_request(&join_consumer_group::JoinConsumerGroup { stream_id: s.clone(), topic_id: t.clone(), group_id: g.clone() })?;
        check_request(&leave_consumer_group::LeaveConsumerGroup { stream_id: s.clone(), topic_id: t.clone(), group_id: g.clone() })?;
        check_request(&sync_consumer_group::SyncConsumerGroup { stream_id: s, topic_id: t, group_id: g })?;
        check(&details.group.clone())?;
        check(&ToEnd(vec![details.group.clone()]))?;
        check(&details)?;
        check(&Maybe(Some(sync_consumer_group::GroupAssignment { generation, partitions: Counted(partitions) })))?;
    }

    #[test]
    fn arbitrary_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let body = Bytes::from(body);
        for spec in &COMMANDS {
            let _ = Request::decode(spec.code, &body);
        }
    }
}
