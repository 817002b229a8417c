//! Cross-check against the published reference crates (`iggy_binary_protocol` and
//! `iggy_common` =0.11.0-edge.4): for a representative request and reply of every command
//! group, bytes encoded by the reference decode with ours to the same values, and bytes we
//! encode decode with the reference and re-encode to the same bytes.

use std::collections::BTreeMap;
use std::str::FromStr;

use bytes::{Bytes, BytesMut};
use eddy_codec::stream::codec::{Counted, LongString, ShortString, ToEnd, F32};
use eddy_codec::stream::commands::*;
use eddy_codec::stream::entities::*;
use eddy_codec::stream::permissions::FlaggedPermissions;
use eddy_codec::stream::*;
use eddy_options::{Mode, OptionsBlock, Scope, TopicOptions, TopicSettings};
use eddy_wire::stream as wire;
use iggy_binary_protocol as ib;
use iggy_binary_protocol::consensus::ConsensusHeader as _;
use iggy_binary_protocol::{WireDecode as IDecode, WireEncode as IEncode};

/// Reference bytes -> our decoder.
fn theirs_to_ours<T: IEncode, U: WireDecode>(theirs: &T) -> (U, Vec<u8>) {
    let bytes = theirs.to_bytes().to_vec();
    let ours = U::decode(&bytes).unwrap_or_else(|e| panic!("ours rejects reference bytes: {e:?}"));
    (ours, bytes)
}

/// Our bytes -> reference decoder, which must consume them all and re-encode them identically.
fn ours_to_theirs<U: WireEncode, T: IDecode + IEncode>(ours: &U) -> T {
    let bytes = ours.to_vec();
    let (theirs, used) =
        T::decode(&bytes).unwrap_or_else(|e| panic!("reference rejects our bytes: {e:?}"));
    assert_eq!(used, bytes.len(), "reference consumed every byte");
    assert_eq!(
        theirs.to_bytes().to_vec(),
        bytes,
        "reference re-encodes our bytes"
    );
    theirs
}

/// Both directions for a pair describing the same value.
fn both_ways<T, U>(theirs: &T, ours: &U)
where
    T: IEncode + IDecode,
    U: WireEncode + WireDecode + PartialEq + std::fmt::Debug,
{
    let (decoded, their_bytes) = theirs_to_ours::<T, U>(theirs);
    assert_eq!(&decoded, ours);
    assert_eq!(ours.to_vec(), their_bytes, "byte-identical encodings");
    let _: T = ours_to_theirs(ours);
}

fn their_name(text: &str) -> ib::WireName {
    ib::WireName::new(text).unwrap()
}

fn our_name(text: &str) -> WireName {
    WireName::new(text).unwrap()
}

fn their_options(block: &OptionsBlock) -> ib::WireOptions {
    ib::WireOptions::from_slice(block.as_bytes()).unwrap()
}

fn sample_options() -> OptionsBlock {
    TopicOptions {
        message_expiry: Some(u64::MAX),
        enforce_fsync: Some(true),
        ..TopicOptions::default()
    }
    .to_block()
}

const CLIENT: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;

// ---------------------------------------------------------------- headers, tables, checksums

#[test]
fn request_reply_and_eviction_headers_are_byte_identical() {
    let mut ours = wire::RequestHeader::new(wire::Operation::CreateStream, 12).unwrap();
    ours.client = CLIENT;
    ours.request = 1;
    ours.session = 7;
    ours.request_checksum = 0xacbc_db10_5853_7e79;
    let theirs = ib::RequestHeader {
        checksum: 0,
        checksum_body: 0,
        cluster: 0,
        size: 268,
        view: 0,
        release: 0,
        command: ib::Command::Request,
        replica: 0,
        reserved_frame: [0; 66],
        client: CLIENT,
        request_checksum: 0xacbc_db10_5853_7e79,
        timestamp: 0,
        request: 1,
        operation: ib::Operation::CreateStream,
        operation_padding: [0; 7],
        session: 7,
        user_id: 0,
        reserved: [0; 60],
    };
    theirs.validate().unwrap();
    ours.validate().unwrap();
    assert_eq!(
        ib::frame_checksum_bytes(&ours.encode()),
        theirs.frame_checksum(),
        "bytes 16..256 agree"
    );

    let mut ours = wire::ReplyHeader::new(wire::Operation::StoreConsumerOffset, 4100, 0).unwrap();
    ours.client = CLIENT;
    ours.request = 3;
    ours.op = 9;
    ours.commit = 10;
    let theirs = ib::ReplyHeader {
        size: 256,
        command: ib::Command::Reply,
        client: CLIENT,
        request: 3,
        op: 9,
        commit: 10,
        operation: ib::Operation::StoreConsumerOffset,
        status: 4100,
        ..ib::ReplyHeader::default()
    };
    theirs.validate().unwrap();
    assert_eq!(
        ib::frame_checksum_bytes(&ours.encode()),
        theirs.frame_checksum()
    );

    for (ours, theirs) in [
        (
            wire::EvictionHeader::new(CLIENT, wire::EvictionReason::NoSession),
            ib::EvictionHeader::new(0, 0, 0, CLIENT, ib::EvictionReason::NoSession),
        ),
        (
            wire::EvictionHeader::incompatible_protocol(CLIENT, 0x2C00, 0x2C00),
            ib::EvictionHeader::incompatible_protocol(0, 0, 0, CLIENT, 0x2C00, 0x2C00),
        ),
    ] {
        theirs.validate().unwrap();
        ours.validate().unwrap();
        assert_eq!(
            ib::frame_checksum_bytes(&ours.encode()),
            theirs.frame_checksum()
        );
    }
}

#[test]
fn eviction_reasons_map_to_the_sdk_errors() {
    use ib::EvictionReason as R;
    let reasons = [
        (wire::EvictionReason::NoSession, R::NoSession),
        (wire::EvictionReason::SessionTooLow, R::SessionTooLow),
        (
            wire::EvictionReason::SessionReleaseMismatch,
            R::SessionReleaseMismatch,
        ),
        (
            wire::EvictionReason::InvalidCredentials,
            R::InvalidCredentials,
        ),
        (wire::EvictionReason::InvalidToken, R::InvalidToken),
        (wire::EvictionReason::UserInactive, R::UserInactive),
        (wire::EvictionReason::SessionError, R::SessionError),
        (wire::EvictionReason::StaleClient, R::StaleClient),
        (
            wire::EvictionReason::IncompatibleProtocol,
            R::IncompatibleProtocol,
        ),
        (wire::EvictionReason::MalformedLogin, R::MalformedLogin),
    ];
    for (ours, theirs) in reasons {
        assert_eq!(ours.as_u8(), theirs as u8);
        let error = iggy_common::eviction_reason_to_error(theirs, 0x2C00, 0x2C00);
        assert_eq!(ours.sdk_error_code(), error.as_code(), "{ours:?}");
    }
}

#[test]
fn command_and_operation_tables_agree() {
    for meta in ib::COMMAND_TABLE {
        let code = CommandCode::from_code(meta.code)
            .unwrap_or_else(|| panic!("missing code {}", meta.code));
        let spec = code.spec();
        match meta.operation {
            Some(op) => {
                assert!(spec.replicated, "{}", spec.name);
                assert_eq!(spec.operation.map(wire::Operation::as_u8), Some(op as u8));
            }
            // The registry lists 38, 39, 40, 44, 45 without an operation; the SDK sends
            // 39 as Logout and 40/45 as Register (spec appendix A).
            None => assert!(!spec.replicated, "{}", spec.name),
        }
    }
    // The 0.12.2 wire's codes (the edge.9 SDK), which the 0.11.0-edge.4 registry lacks.
    let newer = [
        CommandCode::UpdateResource,
        CommandCode::GetMetadataChanges,
        CommandCode::GetPartitionRoute,
        CommandCode::PollMessagesDeferred,
        CommandCode::CancelDeferredRequest,
        CommandCode::FetchMessages,
    ];
    // eddy's own, at or above 9000 where Iggy has no code.
    let own = [
        CommandCode::GetClusterStatus,
        CommandCode::AddClusterMember,
        CommandCode::RemoveClusterMember,
    ];
    assert!(own.iter().all(|c| c.code() >= 9000));
    assert_eq!(
        COMMANDS.len(),
        ib::COMMAND_TABLE.len() + newer.len() + own.len()
    );
    for spec in COMMANDS
        .iter()
        .filter(|s| !newer.contains(&s.code) && !own.contains(&s.code))
    {
        let Some(ours) = spec.operation.filter(|_| spec.replicated) else {
            continue;
        };
        let theirs = ib::Operation::from_command_code(spec.code.code())
            .unwrap_or_else(|| panic!("reference has no operation for {}", spec.name));
        assert_eq!(theirs as u8, ours.as_u8(), "{}", spec.name);
        assert_eq!(
            theirs.is_result_framed(),
            ours.is_result_framed(false),
            "{}",
            spec.name
        );
        assert_eq!(theirs.is_metadata(), ours.is_metadata(), "{}", spec.name);
        assert_eq!(theirs.is_partition(), ours.is_partition(), "{}", spec.name);
        assert_eq!(theirs.to_command_code(), Some(spec.code.code()));
    }
}

#[test]
fn error_codes_agree() {
    // Codes of the 0.12.2 wire (the edge.9 SDK), unknown to 0.11.0-edge.4.
    const NEWER: [ErrorCode; 2] = [
        ErrorCode::PartitionResizeDisabled,
        ErrorCode::StreamEncryptionUnavailable,
    ];
    for code in ErrorCode::ALL.iter().filter(|c| !NEWER.contains(c)) {
        let theirs = iggy_common::IggyError::from_code(code.code());
        assert_eq!(theirs.as_code(), code.code(), "{}", code.name());
    }
}

#[test]
fn protocol_version_agrees() {
    assert_eq!(wire::version::PROTOCOL_VERSION, ib::IGGY_PROTOCOL_VERSION);
    assert_eq!(
        wire::version::PROTOCOL_VERSION_MIN,
        ib::IGGY_PROTOCOL_VERSION_MIN
    );
    for v in [0x2BFF, 0x2C00, 0x2C05, 0x2FFF, 0x3000] {
        assert_eq!(
            wire::version::is_compatible(
                v,
                wire::version::PROTOCOL_VERSION,
                wire::version::PROTOCOL_VERSION_MIN
            ),
            ib::is_protocol_compatible(v)
        );
    }
}

// ---------------------------------------------------------------- system

#[test]
fn system_group() {
    both_ways(
        &ib::requests::system::describe_options::DescribeOptionsRequest { scope: 1 },
        &describe_options::DescribeOptions {
            scope: Scope::Topic,
        },
    );
    both_ways(
        &ib::requests::system::get_client::GetClientRequest { client_id: 42 },
        &get_client::GetClient { client_id: 42 },
    );

    let catalog = describe_options::OptionsCatalog(eddy_options::DescribeOptionsReply::for_scope(
        Scope::Topic,
        &TopicSettings::EDDY_DEFAULTS,
    ));
    let theirs: ib::responses::system::describe_options::DescribeOptionsResponse =
        ours_to_theirs(&catalog);
    // The catalog's 8 keys, then the 0.12.2 wire's three.
    assert_eq!(theirs.entries.len(), 11);
    assert_eq!(theirs.entries[8].key.as_str(), "durability");
    assert_eq!(theirs.entries[4].key.as_str(), "enforce_fsync");
    assert_eq!(&theirs.entries[4].default_value[..], &[1]);
    let (back, _) = theirs_to_ours::<_, describe_options::OptionsCatalog>(&theirs);
    assert_eq!(back, catalog);

    let stats = get_stats::Stats {
        process_id: 1,
        cpu_usage: F32(2.5),
        total_cpu_usage: F32(10.0),
        memory_usage: 3,
        total_memory: 4,
        available_memory: 5,
        run_time: 6,
        start_time: 7,
        read_bytes: 8,
        written_bytes: 9,
        messages_size_bytes: 10,
        streams_count: 11,
        topics_count: 12,
        partitions_count: 13,
        segments_count: 14,
        messages_count: 15,
        clients_count: 16,
        consumer_groups_count: 17,
        hostname: LongString::new("host"),
        os_name: LongString::new("Linux"),
        os_version: LongString::new("6.8"),
        kernel_version: LongString::new("6.8.0"),
        iggy_server_version: LongString::new("0.1.0"),
        iggy_server_semver: 1_000,
        cache_metrics: Counted(vec![get_stats::CacheMetric {
            stream_id: 1,
            topic_id: 2,
            partition_id: 3,
            hits: 4,
            misses: 5,
            hit_ratio: F32(0.5),
        }]),
        threads_count: 18,
        free_disk_space: 19,
        total_disk_space: 20,
    };
    let theirs: ib::responses::system::get_stats::StatsResponse = ours_to_theirs(&stats);
    assert_eq!(theirs.consumer_groups_count, 17);
    assert_eq!(theirs.iggy_server_semver, Some(1_000));
    let (back, _) = theirs_to_ours::<_, get_stats::Stats>(&theirs);
    assert_eq!(back, stats);

    let metadata = ib::responses::system::get_cluster_metadata::ClusterMetadataResponse {
        name: "single-node".into(),
        nodes: vec![
            ib::responses::system::get_cluster_metadata::ClusterNodeResponse {
                name: "iggy-node".into(),
                ip: "127.0.0.1".into(),
                tcp_port: 8090,
                quic_port: 8080,
                http_port: 3000,
                websocket_port: 8092,
                role: 0,
                status: 0,
            },
        ],
    };
    let (ours, _) = theirs_to_ours::<_, get_cluster_metadata::ClusterMetadata>(&metadata);
    assert_eq!(ours.nodes.0[0].tcp_port, 8090);
    let _: ib::responses::system::get_cluster_metadata::ClusterMetadataResponse =
        ours_to_theirs(&ours);

    let details = ClientDetails {
        client: ClientResponse {
            client_id: 5,
            user_id: u32::MAX,
            transport: 1,
            address: LongString::new("127.0.0.1:50000"),
            consumer_groups_count: 1,
        },
        groups: vec![ClientGroup {
            stream_id: 1,
            topic_id: 2,
            group_id: 3,
        }],
    };
    let theirs: ib::responses::clients::get_client::ClientDetailsResponse =
        ours_to_theirs(&details);
    assert_eq!(theirs.consumer_groups.len(), 1);
}

// ---------------------------------------------------------------- users and authentication

fn their_permissions() -> ib::WirePermissions {
    ib::WirePermissions {
        global: ib::WireGlobalPermissions {
            manage_servers: false,
            read_servers: true,
            manage_users: false,
            read_users: true,
            manage_streams: false,
            read_streams: true,
            manage_topics: false,
            read_topics: true,
            poll_messages: true,
            send_messages: false,
        },
        streams: vec![ib::WireStreamPermissions {
            stream_id: 1,
            manage_stream: true,
            read_stream: true,
            manage_topics: false,
            read_topics: true,
            poll_messages: false,
            send_messages: true,
            topics: vec![
                ib::WireTopicPermissions {
                    topic_id: 2,
                    manage_topic: true,
                    read_topic: false,
                    poll_messages: true,
                    send_messages: false,
                },
                ib::WireTopicPermissions {
                    topic_id: 5,
                    manage_topic: false,
                    read_topic: true,
                    poll_messages: false,
                    send_messages: true,
                },
            ],
        }],
    }
}

#[test]
fn users_group() {
    let theirs = ib::requests::users::create_user::CreateUserRequest {
        username: their_name("alice"),
        password: "secret-pass".into(),
        status: 1,
        permissions: Some(their_permissions()),
        options: ib::WireOptions::empty(),
    };
    let (ours, _) = theirs_to_ours::<_, create_user::CreateUser>(&theirs);
    assert_eq!(ours.username.as_str(), "alice");
    assert_eq!(ours.password.as_str(), "secret-pass");
    let permissions = ours.permissions.0.clone().unwrap();
    assert!(permissions.global.read_servers && !permissions.global.manage_servers);
    assert!(permissions.streams[&1].topics[&5].send_messages);
    let _: ib::requests::users::create_user::CreateUserRequest = ours_to_theirs(&ours);

    both_ways(
        &ib::requests::users::update_user::UpdateUserRequest {
            user_id: ib::WireIdentifier::numeric(3),
            username: Some(their_name("bob")),
            status: None,
            options: ib::WireOptions::empty(),
        },
        &update_user::UpdateUser {
            user_id: Identifier::numeric(3),
            username: Some(our_name("bob")),
            status: None,
            options: TrailingOptions::default(),
        },
    );
    both_ways(
        &ib::requests::users::change_password::ChangePasswordRequest {
            user_id: ib::WireIdentifier::named("bob").unwrap(),
            current_password: "old-pass".into(),
            new_password: "new-pass".into(),
        },
        &change_password::ChangePassword {
            user_id: Identifier::named("bob").unwrap(),
            current_password: ShortString::new("old-pass").unwrap(),
            new_password: ShortString::new("new-pass").unwrap(),
        },
    );
    both_ways(
        &ib::requests::users::update_permissions::UpdatePermissionsRequest {
            user_id: ib::WireIdentifier::numeric(2),
            permissions: None,
        },
        &update_permissions::UpdatePermissions {
            user_id: Identifier::numeric(2),
            permissions: FlaggedPermissions(None),
        },
    );

    for permissions in [None, Some(their_permissions())] {
        let theirs = ib::responses::users::get_user::UserDetailsResponse {
            user: ib::responses::users::user_response::UserResponse {
                id: 1,
                created_at: 1_700_000_000_000_000,
                status: 1,
                username: their_name("alice"),
                options: ib::WireOptions::empty(),
            },
            permissions,
        };
        let (ours, _) = theirs_to_ours::<_, UserDetails>(&theirs);
        let _: ib::responses::users::get_user::UserDetailsResponse = ours_to_theirs(&ours);
    }
}

#[test]
fn authentication_group() {
    let version = ib::ClientVersionInfo {
        protocol_version: ib::IGGY_PROTOCOL_VERSION,
        sdk_name: their_name("rust-sdk"),
        sdk_version: their_name("0.11.0-edge.4"),
    };
    let theirs = ib::requests::users::login_register::LoginRegisterRequest {
        version_info: version.clone(),
        username: their_name("iggy"),
        password: "iggy".to_string().into(),
        client_context: None,
    };
    let bytes = IEncode::to_bytes(&theirs);
    let attempts = login_register::RegisterAttempts::decode(&bytes).unwrap();
    let ours = attempts.password.unwrap();
    assert_eq!(ours.username.as_str(), "iggy");
    assert_eq!(ours.password.as_str(), "iggy");
    assert!(attempts.token.is_none());
    let _: ib::requests::users::login_register::LoginRegisterRequest = ours_to_theirs(&ours);

    let theirs = ib::requests::users::login_register_with_pat::LoginRegisterWithPatRequest {
        version_info: version,
        token: "a-personal-access-token".to_string().into(),
        client_context: None,
    };
    let bytes = IEncode::to_bytes(&theirs);
    let attempts = login_register::RegisterAttempts::decode(&bytes).unwrap();
    let ours = attempts.token.unwrap();
    assert_eq!(ours.token.as_str(), "a-personal-access-token");
    let _: ib::requests::users::login_register_with_pat::LoginRegisterWithPatRequest =
        ours_to_theirs(&ours);

    both_ways(
        &ib::responses::users::login_register::LoginRegisterResponse {
            user_id: 0,
            session: 7,
            server_protocol_version: 0x2C00,
            server_version: their_name("0.1.0"),
        },
        &login_register::LoginRegisterReply {
            user_id: 0,
            session: 7,
            server_protocol_version: 0x2C00,
            server_version: our_name("0.1.0"),
        },
    );
}

// ---------------------------------------------------------------- personal access tokens

#[test]
fn personal_access_token_group() {
    both_ways(
        &ib::requests::personal_access_tokens::create_personal_access_token::CreatePersonalAccessTokenRequest {
            name: their_name("ci"),
            expiry: u64::MAX,
        },
        &create_personal_access_token::CreatePersonalAccessToken {
            name: our_name("ci"),
            expiry: u64::MAX,
        },
    );
    both_ways(
        &ib::responses::personal_access_tokens::create_personal_access_token::RawPersonalAccessTokenResponse {
            token: their_name(&"t".repeat(68)),
        },
        &create_personal_access_token::RawPersonalAccessToken {
            token: our_name(&"t".repeat(68)),
        },
    );
    both_ways(
        &ib::responses::personal_access_tokens::get_personal_access_tokens::GetPersonalAccessTokensResponse {
            tokens: vec![
                ib::responses::personal_access_tokens::get_personal_access_tokens::PersonalAccessTokenResponse {
                    name: their_name("a"),
                    expiry_at: 0,
                },
                ib::responses::personal_access_tokens::get_personal_access_tokens::PersonalAccessTokenResponse {
                    name: their_name("b"),
                    expiry_at: 99,
                },
            ],
        },
        &ToEnd(vec![
            get_personal_access_tokens::PersonalAccessTokenInfo { name: our_name("a"), expiry_at: 0 },
            get_personal_access_tokens::PersonalAccessTokenInfo { name: our_name("b"), expiry_at: 99 },
        ]),
    );
}

// ---------------------------------------------------------------- messages

fn their_messages<'a>(
    payloads: &'a [Vec<u8>],
    headers: &'a [u8],
) -> Vec<ib::requests::messages::send_messages::RawMessage<'a>> {
    payloads
        .iter()
        .enumerate()
        .map(
            |(i, payload)| ib::requests::messages::send_messages::RawMessage {
                id: i as u128 + 1,
                origin_timestamp: 1_700_000_000_000_000 + 7 * i as u64,
                headers: (i % 2 == 1).then_some(headers),
                payload,
            },
        )
        .collect()
}

#[test]
fn messages_group_send() {
    let mut map = BTreeMap::new();
    map.insert(
        iggy_common::HeaderKey::from_str("content-type").unwrap(),
        iggy_common::HeaderValue::from_str("text/plain").unwrap(),
    );
    let message = iggy_common::IggyMessage::builder()
        .payload(Bytes::from_static(b"x"))
        .user_headers(map)
        .build()
        .unwrap();
    let headers = message.user_headers.clone().unwrap();
    let typed = user_headers::UserHeaders::decode(&headers).unwrap();
    assert_eq!(
        typed.encode().unwrap(),
        headers.to_vec(),
        "user headers encode like the SDK"
    );

    let payloads: Vec<Vec<u8>> = (0..5).map(|i| vec![i as u8; 10 + i * 3]).collect();
    let raw = their_messages(&payloads, &headers);
    let stream = ib::WireIdentifier::numeric(1);
    let topic = ib::WireIdentifier::named("orders").unwrap();
    let partitioning = ib::WirePartitioning::PartitionId(2);
    let mut buf = BytesMut::new();
    ib::requests::messages::send_messages::SendMessagesEncoder::encode(
        &mut buf,
        &stream,
        &topic,
        &partitioning,
        &raw,
    )
    .unwrap();
    let body = buf.freeze();

    let ours = send_messages::SendMessages::decode_bytes(&body).unwrap();
    assert_eq!(ours.stream_id, Identifier::numeric(1));
    assert_eq!(ours.topic_id, Identifier::named("orders").unwrap());
    assert_eq!(ours.partitioning, Partitioning::PartitionId(2));
    assert_eq!(ours.messages_count, 5);
    let admitted = ours.admit().expect("the SDK's batch passes our admission");

    let messages: Vec<Message> = raw
        .iter()
        .map(|m| Message {
            id: m.id,
            origin_timestamp: m.origin_timestamp,
            payload: Bytes::copy_from_slice(m.payload),
            user_headers: m.headers.map(Bytes::copy_from_slice).unwrap_or_default(),
        })
        .collect();
    let rebuilt = send_messages::SendMessages::new(
        Identifier::numeric(1),
        Identifier::named("orders").unwrap(),
        Partitioning::PartitionId(2),
        &messages,
    )
    .unwrap();
    assert_eq!(
        rebuilt.to_vec(),
        body.to_vec(),
        "our producer builds the SDK's bytes"
    );

    let stamped = admitted.stamp(2, 40, 1_700_000_000_500_000);
    let stored = stamped.to_vec();
    let batch = ib::batch::decode_batch_slice(&stored).expect("reference verifies our stamping");
    assert_eq!(batch.header.base_offset, 40);
    assert_eq!(batch.header.partition_id, 2);

    both_ways(
        &ib::responses::messages::send_messages::SendMessagesResponse {
            confirmations: vec![
                ib::responses::messages::send_messages::SendMessagesConfirmationResponse {
                    stream_id: 1,
                    topic_id: 0,
                    partition_id: 2,
                    base_offset: 40,
                },
            ],
        },
        &send_messages::SendMessagesReply {
            confirmations: vec![send_messages::SendConfirmation {
                stream_id: 1,
                topic_id: 0,
                partition_id: 2,
                base_offset: 40,
            }],
        },
    );
}

#[test]
fn messages_group_poll() {
    both_ways(
        &ib::requests::messages::poll_messages::PollMessagesRequest {
            consumer: ib::WireConsumer::consumer_group(ib::WireIdentifier::named("g").unwrap()),
            stream_id: ib::WireIdentifier::numeric(0),
            topic_id: ib::WireIdentifier::numeric(1),
            partition_id: Some(3),
            strategy: ib::WirePollingStrategy::next(),
            count: 100,
            auto_commit: true,
        },
        &poll_messages::PollMessages {
            consumer: Consumer::group(Identifier::named("g").unwrap()),
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::numeric(1),
            partition: OptionalPartition(Some(3)),
            strategy: PollingStrategy::Next,
            count: 100,
            auto_commit: true,
        },
    );

    let messages: Vec<Message> = (0..4u8)
        .map(|i| Message::new(u128::from(i) + 1, 1_000 + u64::from(i), vec![i; 20]))
        .collect();
    let batch = build_batch(&messages).unwrap();
    let stamped = admit(batch, 4).unwrap().stamp(0, 10, 555);
    let stored = StoredBatch::parse(Bytes::from(stamped.to_vec())).unwrap();
    let reply = poll_messages::PollMessagesReply::new(
        0,
        13,
        vec![stored.slice(11, 2).unwrap(), stored.slice(13, 1).unwrap()],
    );
    let body = reply.to_vec();
    let theirs =
        ib::responses::messages::poll_messages::PollMessagesResponse::decode(&body).unwrap();
    assert_eq!(theirs.header.messages_count, 3);
    assert_eq!(theirs.header.current_offset, 13);
    let polled: Vec<_> = theirs.messages.map(Result::unwrap).collect();
    let offsets: Vec<u64> = polled.iter().map(|m| m.offset).collect();
    assert_eq!(offsets, [11, 12, 13]);
    assert!(polled.iter().all(|m| m.timestamp == 555));
    assert_eq!(polled[0].payload, &[1u8; 20][..]);
    assert_eq!(polled[2].origin_timestamp, 1_003);
    for record in &reply.records {
        let mut whole = record.header_bytes().to_vec();
        whole.extend_from_slice(record.frames());
        ib::batch::decode_batch_slice(&whole).expect("sliced views carry valid checksums");
    }
}

// ---------------------------------------------------------------- consumer offsets

#[test]
fn consumer_offsets_group() {
    both_ways(
        &ib::requests::consumer_offsets::store_consumer_offset::StoreConsumerOffsetRequest {
            consumer: ib::WireConsumer::consumer(ib::WireIdentifier::numeric(1)),
            stream_id: ib::WireIdentifier::numeric(0),
            topic_id: ib::WireIdentifier::numeric(0),
            partition_id: Some(0),
            offset: 17,
            ack: ib::AckLevel::Quorum,
        },
        &store_consumer_offset::StoreConsumerOffset {
            consumer: Consumer::new(Identifier::numeric(1)),
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::numeric(0),
            partition: OptionalPartition(Some(0)),
            offset: 17,
            ack: AckLevel::Quorum,
        },
    );
    both_ways(
        &ib::requests::consumer_offsets::get_consumer_offset::GetConsumerOffsetRequest {
            consumer: ib::WireConsumer::consumer(ib::WireIdentifier::named("reader").unwrap()),
            stream_id: ib::WireIdentifier::numeric(0),
            topic_id: ib::WireIdentifier::numeric(0),
            partition_id: None,
        },
        &get_consumer_offset::GetConsumerOffset {
            consumer: Consumer::new(Identifier::named("reader").unwrap()),
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::numeric(0),
            partition: OptionalPartition(None),
        },
    );
    both_ways(
        &ib::responses::consumer_offsets::get_consumer_offset::ConsumerOffsetResponse {
            partition_id: 0,
            current_offset: 20,
            stored_offset: 17,
        },
        &get_consumer_offset::ConsumerOffsetInfo {
            partition_id: 0,
            current_offset: 20,
            stored_offset: 17,
        },
    );
}

// ---------------------------------------------------------------- streams and topics

fn their_topic(
    options: &OptionsBlock,
    partitions_count: u32,
) -> ib::responses::streams::get_stream::TopicHeader {
    ib::responses::streams::get_stream::TopicHeader {
        id: 0,
        created_at: 1_700_000_000_000_000,
        partitions_count,
        message_expiry: u64::MAX,
        compression_algorithm: 1,
        max_topic_size: u64::MAX,
        size_bytes: 0,
        messages_count: 0,
        name: their_name("test-topic"),
        options: their_options(options),
        derived_options: their_options(
            &TopicOptions::default().derived_block(&TopicSettings::EDDY_DEFAULTS),
        ),
    }
}

#[test]
fn streams_group() {
    both_ways(
        &ib::requests::streams::create_stream::CreateStreamRequest {
            name: their_name("test-stream"),
            options: ib::WireOptions::empty(),
        },
        &create_stream::CreateStream {
            name: our_name("test-stream"),
            options: TrailingOptions::default(),
        },
    );
    let theirs = ib::responses::streams::get_stream::GetStreamResponse {
        stream: ib::responses::streams::StreamResponse {
            id: 0,
            created_at: 1_700_000_000_000_000,
            topics_count: 1,
            size_bytes: 10,
            messages_count: 2,
            name: their_name("test-stream"),
            options: ib::WireOptions::empty(),
        },
        topics: vec![their_topic(&sample_options(), 1)],
    };
    let (ours, _) = theirs_to_ours::<_, StreamDetails>(&theirs);
    assert_eq!(ours.topics.len(), 1);
    assert_eq!(ours.topics[0].options, sample_options());
    let _: ib::responses::streams::get_stream::GetStreamResponse = ours_to_theirs(&ours);
}

#[test]
fn topics_group_and_options() {
    let sdk_options = iggy_common::TopicCreateOptions {
        partitions_count: Some(3),
        message_expiry: Some(iggy_common::IggyExpiry::NeverExpire),
        max_topic_size: Some(iggy_common::MaxTopicSize::from(2u64 << 30)),
        segment_size: Some(iggy_common::IggyByteSize::from(128u64 << 20)),
        enforce_fsync: Some(false),
        compression_algorithm: Some(iggy_common::CompressionAlgorithm::Gzip),
        ..iggy_common::TopicCreateOptions::default()
    };
    let wire_options = sdk_options.to_wire().unwrap();
    let theirs = ib::requests::topics::create_topic::CreateTopicRequest {
        stream_id: ib::WireIdentifier::numeric(0),
        partitions_count: 3,
        name: their_name("test-topic"),
        options: wire_options,
    };
    let (ours, _) = theirs_to_ours::<_, create_topic::CreateTopic>(&theirs);
    let parsed = TopicOptions::parse(&ours.options.0, Mode::Create).unwrap();
    assert_eq!(parsed.message_expiry, Some(u64::MAX));
    assert_eq!(parsed.max_topic_size, Some(2 << 30));
    assert_eq!(parsed.segment_size, Some(128 << 20));
    assert_eq!(parsed.enforce_fsync, Some(false));
    assert_eq!(
        parsed.compression_algorithm,
        Some(eddy_options::Compression::Gzip)
    );
    let settings = parsed
        .validate_create(3, &TopicSettings::EDDY_DEFAULTS)
        .unwrap();
    assert!(
        !settings.enforce_fsync,
        "an explicit opt-out wins over eddy's default"
    );
    let _: ib::requests::topics::create_topic::CreateTopicRequest = ours_to_theirs(&ours);

    let back = iggy_common::TopicCreateOptions::parse(&their_options(&parsed.to_block())).unwrap();
    assert_eq!(back.segment_size, sdk_options.segment_size);
    assert_eq!(back.max_topic_size, sdk_options.max_topic_size);
    assert_eq!(back.enforce_fsync, Some(false));
    let update = iggy_common::TopicUpdateOptions {
        compression_algorithm: Some(iggy_common::CompressionAlgorithm::None),
        message_expiry: Some(iggy_common::IggyExpiry::ServerDefault),
        ..iggy_common::TopicUpdateOptions::default()
    };
    let block = OptionsBlock::from_slice(update.to_wire().unwrap().as_bytes()).unwrap();
    let parsed = TopicOptions::parse(&block, Mode::Update).unwrap();
    assert_eq!(
        parsed.compression_algorithm,
        Some(eddy_options::Compression::None)
    );
    assert_eq!(parsed.message_expiry, None, "0 means server default");

    both_ways(
        &ib::requests::topics::update_topic::UpdateTopicRequest {
            stream_id: ib::WireIdentifier::numeric(0),
            topic_id: ib::WireIdentifier::named("test-topic").unwrap(),
            name: their_name("renamed"),
            options: their_options(&block),
        },
        &update_topic::UpdateTopic {
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::named("test-topic").unwrap(),
            name: our_name("renamed"),
            options: TrailingOptions(block.clone()),
        },
    );

    let theirs = ib::responses::topics::get_topic::GetTopicResponse {
        topic: their_topic(&OptionsBlock::empty(), 2),
        partitions: (0..2)
            .map(|id| ib::responses::topics::get_topic::PartitionResponse {
                id,
                created_at: 1,
                segments_count: 1,
                current_offset: 0,
                size_bytes: 0,
                messages_count: 0,
            })
            .collect(),
    };
    let (ours, _) = theirs_to_ours::<_, TopicDetails>(&theirs);
    assert_eq!(ours.partitions.len(), 2);
    let _: ib::responses::topics::get_topic::GetTopicResponse = ours_to_theirs(&ours);
    let list = get_topics::TopicList(vec![ours.topic.clone(), ours.topic]);
    let theirs: ib::responses::topics::get_topics::GetTopicsResponse = ours_to_theirs(&list);
    assert_eq!(theirs.topics.len(), 2);
}

// ---------------------------------------------------------------- partitions, segments

#[test]
fn partitions_and_segments_groups() {
    both_ways(
        &ib::requests::partitions::create_partitions::CreatePartitionsRequest {
            stream_id: ib::WireIdentifier::numeric(0),
            topic_id: ib::WireIdentifier::numeric(0),
            partitions_count: 4,
        },
        &create_partitions::CreatePartitions {
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::numeric(0),
            partitions_count: 4,
        },
    );
    both_ways(
        &ib::requests::partitions::delete_partitions::DeletePartitionsRequest {
            stream_id: ib::WireIdentifier::numeric(0),
            topic_id: ib::WireIdentifier::named("t").unwrap(),
            partitions_count: 1,
        },
        &delete_partitions::DeletePartitions {
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::named("t").unwrap(),
            partitions_count: 1,
        },
    );
    both_ways(
        &ib::requests::segments::delete_segments::DeleteSegmentsRequest {
            stream_id: ib::WireIdentifier::numeric(0),
            topic_id: ib::WireIdentifier::numeric(1),
            partition_id: 2,
            segments_count: 3,
        },
        &delete_segments::DeleteSegments {
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::numeric(1),
            partition_id: 2,
            segments_count: 3,
        },
    );
}

// ---------------------------------------------------------------- consumer groups

#[test]
fn consumer_groups_group() {
    both_ways(
        &ib::requests::consumer_groups::create_consumer_group::CreateConsumerGroupRequest {
            stream_id: ib::WireIdentifier::numeric(0),
            topic_id: ib::WireIdentifier::numeric(0),
            name: their_name("workers"),
        },
        &create_consumer_group::CreateConsumerGroup {
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::numeric(0),
            name: our_name("workers"),
        },
    );
    both_ways(
        &ib::requests::consumer_groups::join_consumer_group::JoinConsumerGroupRequest {
            stream_id: ib::WireIdentifier::numeric(0),
            topic_id: ib::WireIdentifier::numeric(0),
            group_id: ib::WireIdentifier::named("workers").unwrap(),
        },
        &join_consumer_group::JoinConsumerGroup {
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::numeric(0),
            group_id: Identifier::named("workers").unwrap(),
        },
    );
    let theirs = ib::responses::consumer_groups::get_consumer_group::ConsumerGroupDetailsResponse {
        group: ib::responses::consumer_groups::consumer_group_response::ConsumerGroupResponse {
            id: 0,
            partitions_count: 3,
            members_count: 2,
            name: their_name("workers"),
        },
        members: vec![
            ib::responses::consumer_groups::get_consumer_group::ConsumerGroupMemberResponse {
                id: 0,
                partitions_count: 2,
                partitions: vec![0, 2],
            },
            ib::responses::consumer_groups::get_consumer_group::ConsumerGroupMemberResponse {
                id: 1,
                partitions_count: 1,
                partitions: vec![1],
            },
        ],
    };
    let (ours, _) = theirs_to_ours::<_, ConsumerGroupDetails>(&theirs);
    assert_eq!(ours.members[0].partitions, [0, 2]);
    let _: ib::responses::consumer_groups::get_consumer_group::ConsumerGroupDetailsResponse =
        ours_to_theirs(&ours);
    both_ways(
        &ib::responses::consumer_groups::sync_consumer_group::SyncConsumerGroupResponse {
            generation: 4,
            partitions: vec![1, 2],
        },
        &sync_consumer_group::GroupAssignment {
            generation: 4,
            partitions: Counted(vec![1, 2]),
        },
    );
}

// ---------------------------------------------------------------- reply conventions

#[test]
fn result_sections_agree() {
    let mut request = wire::RequestHeader::new(wire::Operation::CreateStream, 0).unwrap();
    request.client = CLIENT;
    let ok = reply::ReplyFrame::success(&request, &Empty)
        .unwrap()
        .to_vec();
    assert_eq!(ib::result_code(&ok[256..]), Some(0));
    let rejected = reply::ReplyFrame::rejection(&request, ErrorCode::StreamNameAlreadyExists)
        .unwrap()
        .to_vec();
    assert_eq!(ib::result_code(&rejected[256..]), Some(1012));
    assert_eq!(ib::result_section_len(&rejected[256..]), Some(12));
}
