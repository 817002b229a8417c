//! Replays the committed fuzz corpus (`fuzz/corpus/stream_request`, `fuzz/corpus/stream_batch`)
//! through the same entry points the fuzz targets call, so `cargo test` catches regressions
//! without libfuzzer. `regenerate_corpus` (ignored) rewrites the seed files from real
//! encodings: `cargo test -p eddy-codec --test codec stream_fuzz_corpus -- --ignored`.

use std::path::PathBuf;

use bytes::Bytes;
use eddy_codec::stream::codec::{LongString, ShortString};
use eddy_codec::stream::commands::*;
use eddy_codec::stream::permissions::FlaggedPermissions;
use eddy_codec::stream::user_headers::{HeaderField, UserHeaders};
use eddy_codec::stream::*;
use eddy_options::{DescribeOptionsReply, Scope, TopicOptions, TopicSettings};
use eddy_wire::stream as wire;

fn corpus(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let mut files: Vec<_> = std::fs::read_dir(corpus(target))
        .unwrap_or_else(|e| panic!("corpus {target} missing: {e}"))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

#[test]
fn replay_stream_request() {
    let seeds = seeds("stream_request");
    assert!(seeds.len() >= 8, "corpus has its seeds");
    for seed in &seeds {
        eddy_codec::stream::fuzzing::fuzz_request(seed);
    }
}

#[test]
fn replay_stream_batch() {
    let seeds = seeds("stream_batch");
    assert!(seeds.len() >= 3, "corpus has its seeds");
    let mut admitted = 0;
    for seed in &seeds {
        eddy_codec::stream::fuzzing::fuzz_batch(seed);
        let count = u32::from_le_bytes(seed[48..52].try_into().unwrap());
        admitted += usize::from(admit(Bytes::copy_from_slice(seed), count).is_ok());
    }
    assert!(admitted >= 3, "the seeds are valid batches");
}

fn frame(operation: wire::Operation, code: u32, body: &[u8]) -> Vec<u8> {
    let mut header = wire::RequestHeader::new(operation, body.len()).unwrap();
    header.client = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
    header.session = u64::from(operation != wire::Operation::Register) * 7;
    header.request = u64::from(operation != wire::Operation::Register);
    if operation == wire::Operation::NonReplicated {
        header.command_code = code;
    }
    if operation.carries_request_checksum() {
        header.request_checksum = wire::request_checksum(body);
    }
    wire::frame::encode_frame(&header.encode(), body).unwrap()
}

fn spec_messages() -> Vec<Message> {
    let mut headers = UserHeaders::new();
    headers
        .insert("key", HeaderField::string("val").unwrap())
        .unwrap();
    let mut third = Message::new(3, 1_700_000_000_000_020, &b"with headers"[..]);
    third.user_headers = Bytes::from(headers.encode().unwrap());
    vec![
        Message::new(1, 1_700_000_000_000_000, &b"hello"[..]),
        Message::new(2, 1_700_000_000_000_010, &b"world!"[..]),
        third,
    ]
}

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = corpus(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

#[test]
#[ignore = "rewrites fuzz/corpus; run explicitly"]
fn regenerate_corpus() {
    use wire::Operation as Op;
    let s0 = Identifier::numeric(0);
    let named = Identifier::named("orders").unwrap();
    let version = login_register::ClientVersionInfo {
        protocol_version: 0x2C00,
        sdk_name: WireName::new("rust-sdk").unwrap(),
        sdk_version: WireName::new("0.11.0-edge.4").unwrap(),
    };
    let login = login_register::LoginRegister {
        client: version.clone(),
        username: WireName::new("iggy").unwrap(),
        password: ShortString::new("iggy").unwrap(),
        context: LongString::new(""),
    };
    let pat = login_register_with_pat::LoginRegisterWithPat {
        client: version,
        token: ShortString::new("token").unwrap(),
        context: LongString::new(""),
    };
    let topic_options = TopicOptions {
        message_expiry: Some(u64::MAX),
        segment_size: Some(1 << 20),
        ..TopicOptions::default()
    }
    .to_block();
    let send = send_messages::SendMessages::new(
        s0.clone(),
        named.clone(),
        Partitioning::PartitionId(0),
        &spec_messages()[..2],
    )
    .unwrap();
    let requests: Vec<(&str, Vec<u8>)> = vec![
        ("ping", frame(Op::NonReplicated, 1, &[])),
        ("login_register", frame(Op::Register, 0, &login.to_vec())),
        ("login_register_pat", frame(Op::Register, 0, &pat.to_vec())),
        ("logout", frame(Op::Logout, 0, &[])),
        (
            "create_stream",
            frame(
                Op::CreateStream,
                0,
                &create_stream::CreateStream {
                    name: WireName::new("test-stream").unwrap(),
                    options: TrailingOptions::default(),
                }
                .to_vec(),
            ),
        ),
        (
            "create_topic",
            frame(
                Op::CreateTopic,
                0,
                &create_topic::CreateTopic {
                    stream_id: s0.clone(),
                    partitions_count: 3,
                    name: WireName::new("test-topic").unwrap(),
                    options: TrailingOptions(topic_options),
                }
                .to_vec(),
            ),
        ),
        ("send_messages", frame(Op::SendMessages, 0, &send.to_vec())),
        (
            "poll_messages",
            frame(
                Op::NonReplicated,
                100,
                &poll_messages::PollMessages {
                    consumer: Consumer::group(Identifier::named("workers").unwrap()),
                    stream_id: s0.clone(),
                    topic_id: named.clone(),
                    partition: OptionalPartition(Some(1)),
                    strategy: PollingStrategy::Next,
                    count: 10,
                    auto_commit: true,
                }
                .to_vec(),
            ),
        ),
        (
            "store_consumer_offset",
            frame(
                Op::StoreConsumerOffset,
                0,
                &store_consumer_offset::StoreConsumerOffset {
                    consumer: Consumer::new(Identifier::numeric(1)),
                    stream_id: s0.clone(),
                    topic_id: s0.clone(),
                    partition: OptionalPartition(Some(0)),
                    offset: 5,
                    ack: AckLevel::Quorum,
                }
                .to_vec(),
            ),
        ),
        (
            "create_user",
            frame(
                Op::CreateUser,
                0,
                &create_user::CreateUser {
                    username: WireName::new("alice").unwrap(),
                    password: ShortString::new("secret").unwrap(),
                    status: 1,
                    permissions: FlaggedPermissions(Some(Permissions {
                        global: GlobalPermissions::ALL,
                        streams: [(
                            1,
                            StreamPermissions {
                                read_stream: true,
                                topics: [(2, TopicPermissions::default())].into(),
                                ..StreamPermissions::default()
                            },
                        )]
                        .into(),
                    })),
                    options: TrailingOptions::default(),
                }
                .to_vec(),
            ),
        ),
        (
            "update_user",
            frame(
                Op::UpdateUser,
                0,
                &update_user::UpdateUser {
                    user_id: Identifier::named("alice").unwrap(),
                    username: Some(WireName::new("bob").unwrap()),
                    status: Some(2),
                    options: TrailingOptions::default(),
                }
                .to_vec(),
            ),
        ),
        (
            "describe_options",
            frame(
                Op::NonReplicated,
                13,
                &describe_options::DescribeOptions {
                    scope: Scope::Topic,
                }
                .to_vec(),
            ),
        ),
        (
            "get_snapshot",
            frame(
                Op::NonReplicated,
                11,
                &get_snapshot::GetSnapshot {
                    compression: 4,
                    types: vec![1, 100],
                }
                .to_vec(),
            ),
        ),
        (
            "delete_segments",
            frame(
                Op::DeleteSegments,
                0,
                &delete_segments::DeleteSegments {
                    stream_id: s0.clone(),
                    topic_id: named,
                    partition_id: 0,
                    segments_count: 2,
                }
                .to_vec(),
            ),
        ),
    ];
    for (name, bytes) in &requests {
        write("stream_request", name, bytes);
    }

    let one = build_batch(&spec_messages()[..1]).unwrap();
    let two = build_batch(&spec_messages()[..2]).unwrap();
    let three = build_batch(&spec_messages()).unwrap();
    let stamped = admit(two.clone(), 2)
        .unwrap()
        .stamp(0, 0, 1_700_000_000_500_000);
    write("stream_batch", "one_message", &one);
    write("stream_batch", "spec_two_messages", &two);
    write("stream_batch", "three_with_headers", &three);
    write("stream_batch", "stamped", &stamped.to_vec());

    write("stream_options", "empty", &[]);
    write(
        "stream_options",
        "topic_explicit",
        TopicOptions {
            compression_algorithm: Some(eddy_options::Compression::Gzip),
            message_expiry: Some(7_000_000),
            enforce_fsync: Some(false),
            ..TopicOptions::default()
        }
        .to_block()
        .as_bytes(),
    );
    write(
        "stream_options",
        "topic_derived",
        TopicOptions::default()
            .derived_block(&TopicSettings::EDDY_DEFAULTS)
            .as_bytes(),
    );
    let text = eddy_options::OptionsBlock::from_entries([
        (
            "message_expiry",
            eddy_options::ValueKind::String,
            &b"7 days"[..],
        ),
        (
            "max_topic_size",
            eddy_options::ValueKind::String,
            &b"2 GiB"[..],
        ),
        (
            "segment_size",
            eddy_options::ValueKind::String,
            &b"128MiB"[..],
        ),
    ])
    .unwrap();
    write("stream_options", "topic_text_values", text.as_bytes());
    let mut describe = Vec::new();
    DescribeOptionsReply::for_scope(Scope::Topic, &TopicSettings::EDDY_DEFAULTS)
        .encode(&mut describe);
    write("stream_options", "describe_topic", &describe);

    write("stream_frame", "ping", &requests[0].1);
    write("stream_frame", "login_register", &requests[1].1);
    let mut reply = wire::ReplyHeader::new(wire::Operation::CreateStream, 0, 4).unwrap();
    reply.client = 1;
    write(
        "stream_frame",
        "reply",
        &wire::frame::encode_frame(&reply.encode(), &[0, 0, 0, 0]).unwrap(),
    );
    write(
        "stream_frame",
        "eviction",
        &wire::EvictionHeader::incompatible_protocol(1, 0x2C00, 0x2C00).encode(),
    );
}
