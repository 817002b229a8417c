//! Raw sockets on the stream port: the spec's exact frames, and what the SDK never sends
//! (garbage, wrong sizes, a header claiming 2 GB, a truncated body, non-request frames, bad
//! checksums, legacy and unknown codes). A broken connection is closed alone; every other client
//! keeps being served.

use std::time::Duration;

use crate::stream_support::raw::{Answer, Raw};
use crate::stream_support::*;
use eddy_codec::stream::codec::{LongString, ShortString};
use eddy_codec::stream::commands::{
    create_stream, delete_consumer_offset, get_consumer_offset, get_streams, login_user,
    send_messages, store_consumer_offset,
};
use eddy_codec::stream::{
    AckLevel, Consumer as WireConsumer, Identifier, Message, OptionalPartition,
    Partitioning as WirePartitioning, Request, WireName,
};
use eddy_tests::http_get;
use eddy_wire::stream::{EvictionReason, Operation, RequestHeader};
use iggy::prelude::*;

fn hex(text: &str) -> Vec<u8> {
    text.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

/// The LOGIN_REGISTER request of stream protocol §1.13.1, byte for byte.
fn spec_login_frame() -> Vec<u8> {
    let mut frame = vec![0u8; 256];
    frame[48..52].copy_from_slice(&297u32.to_le_bytes());
    frame[60] = 5;
    frame[128..144].copy_from_slice(&hex("10 32 54 76 98 ba dc fe ef cd ab 89 67 45 23 01"));
    frame[144..152].copy_from_slice(&hex("1d 7e 58 c1 b2 d6 a9 87"));
    frame[176] = 1;
    frame.extend(hex("00 2c 00 00 08 72 75 73 74 2d 73 64 6b 0d 30 2e
         31 31 2e 30 2d 65 64 67 65 2e 34 04 69 67 67 79
         04 69 67 67 79 00 00 00 00"));
    assert_eq!(frame.len(), 297);
    frame
}

#[tokio::test]
async fn the_spec_frames_byte_for_byte() {
    let eddy = server();
    let mut raw = Raw::connect(eddy.addrs().stream).await;
    raw.write(&spec_login_frame()).await;
    let Answer::Reply { header, body } = raw.read().await.unwrap() else {
        panic!("login must be answered with a reply");
    };
    assert_eq!(header.operation, Operation::Register);
    assert_eq!(header.status, 0);
    assert_eq!(header.client, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
    assert_eq!(header.request_checksum, 0x87a9_d6b2_c158_7e1d);
    assert_eq!(&body[..4], &[0, 0, 0, 0], "result count 0");
    assert_eq!(&body[4..8], &[0, 0, 0, 0], "user 0");
    let session = u64::from_le_bytes(body[8..16].try_into().unwrap());
    assert!(session >= 1);
    assert_eq!(&body[16..20], &[0, 0x2c, 0, 0], "protocol 0x2C00");
    assert_eq!(body[20] as usize, body.len() - 21, "server version name");

    // PING of §1.13.2 with the session: a 256-byte reply, operation 2, status 0.
    let mut ping = vec![0u8; 256];
    ping[48..52].copy_from_slice(&256u32.to_le_bytes());
    ping[60] = 5;
    ping[128..144].copy_from_slice(&hex("10 32 54 76 98 ba dc fe ef cd ab 89 67 45 23 01"));
    ping[168] = 1;
    ping[176] = 2;
    ping[184..192].copy_from_slice(&session.to_le_bytes());
    ping[196] = 1;
    raw.write(&ping).await;
    let Answer::Reply { header, body } = raw.read().await.unwrap() else {
        panic!("ping must be answered with a reply");
    };
    assert_eq!(header.frame.size, 256);
    assert_eq!(header.operation, Operation::NonReplicated);
    assert_eq!(header.status, 0);
    assert_eq!(header.request, 1);
    assert!(body.is_empty());

    // CREATE_STREAM of §1.13.3: result-framed StreamResponse with id 0.
    let body = hex("0b 74 65 73 74 2d 73 74 72 65 61 6d");
    let mut header = RequestHeader::new(Operation::CreateStream, body.len()).unwrap();
    header.client = 7;
    header.request = 1;
    header.session = session;
    header.request_checksum = 0xacbc_db10_5853_7e79;
    let answer = raw.send(&header, &body).await;
    let payload = answer.payload();
    assert_eq!(&payload[..4], &[0, 0, 0, 0], "stream id 0");
    assert_eq!(
        &payload[12..32],
        &[0u8; 20],
        "no topics, no bytes, no messages"
    );
    assert_eq!(&payload[32..44], &body[..], "name");
    assert_eq!(&payload[44..48], &[0, 0, 0, 0], "empty options");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_connections_close_alone() {
    let eddy = server_with(&["--stream-max-frame-size", "1048576"]);
    let addr = eddy.addrs().stream;
    // A well-behaved SDK client stays connected through everything below.
    let good = root(addr).await;
    good.create_stream("survivor").await.unwrap();

    // Garbage.
    let mut raw = Raw::connect(addr).await;
    raw.write(&[0xAB; 300]).await;
    assert!(raw.closed().await, "garbage closes the connection");

    // A header claiming 2 GB: closed without waiting for a body.
    let mut raw = Raw::connect(addr).await;
    let mut header = RequestHeader::new(Operation::NonReplicated, 0)
        .unwrap()
        .encode();
    header[48..52].copy_from_slice(&(2u32 << 30).to_le_bytes());
    raw.write(&header).await;
    assert!(
        raw.closed().await,
        "an oversized frame closes the connection"
    );

    // Over the configured cap by one byte, with the body actually sent.
    let mut raw = Raw::connect(addr).await;
    let mut frame = RequestHeader::new(Operation::NonReplicated, 1_048_576 - 255)
        .unwrap()
        .encode()
        .to_vec();
    frame.resize(1_048_576 + 1, 0);
    let _ = raw.socket.try_write(&frame[..4096]);
    assert!(raw.closed().await);

    // A size below the header size.
    let mut raw = Raw::connect(addr).await;
    let mut header = RequestHeader::new(Operation::NonReplicated, 0)
        .unwrap()
        .encode();
    header[48..52].copy_from_slice(&100u32.to_le_bytes());
    raw.write(&header).await;
    assert!(raw.closed().await);

    // A reply frame from a client.
    let mut raw = Raw::connect(addr).await;
    let reply = eddy_wire::stream::ReplyHeader::new(Operation::NonReplicated, 0, 0)
        .unwrap()
        .encode();
    raw.write(&reply).await;
    assert!(raw.closed().await);

    // A truncated body, then close.
    let mut raw = Raw::connect(addr).await;
    let mut header = RequestHeader::new(Operation::NonReplicated, 1000).unwrap();
    header.client = 3;
    header.command_code = 201;
    raw.write(&header.encode()).await;
    raw.write(&[0u8; 10]).await;
    drop(raw);

    // Half a header, then silence: the server keeps serving others meanwhile.
    let mut stalled = Raw::connect(addr).await;
    stalled.write(&[5u8; 100]).await;

    for _ in 0..3 {
        good.ping().await.unwrap();
        let streams = good.get_streams().await.unwrap();
        assert_eq!(streams.len(), 1);
    }
    let other = root(addr).await;
    assert_eq!(other.get_streams().await.unwrap().len(), 1);
    drop(stalled);
}

#[tokio::test]
async fn refusals_keep_the_connection() {
    let eddy = server();
    let addr = eddy.addrs().stream;
    let mut raw = Raw::logged_in(addr, "iggy", "iggy").await;

    // Unknown non-replicated code: InvalidCommand.
    let header = raw.header(Operation::NonReplicated, 9999, &[]);
    assert_eq!(raw.send(&header, &[]).await.code(), 3);
    // An internal operation: InvalidCommand.
    let mut header = raw.header(Operation::NonReplicated, 1, &[]);
    header.operation = 64;
    assert_eq!(raw.send(&header, &[]).await.code(), 3);
    // Client id 0: InvalidCommand.
    let mut header = raw.header(Operation::NonReplicated, 1, &[]);
    header.client = 0;
    assert_eq!(raw.send(&header, &[]).await.code(), 3);
    // Undecodable body: InvalidCommand.
    let header = raw.header(Operation::NonReplicated, 200, &[9, 9]);
    assert_eq!(raw.send(&header, &[9, 9]).await.code(), 3);
    // A request checksum that does not match the body: InvalidFormat.
    let create = Request::CreateStream(create_stream::CreateStream {
        name: WireName::new("checked").unwrap(),
        options: eddy_codec::stream::commands::TrailingOptions::default(),
    })
    .to_vec();
    let mut header = raw.header(Operation::CreateStream, 0, &create);
    header.request_checksum ^= 1;
    assert_eq!(raw.send(&header, &create).await.code(), 4);
    // An unsupported stream option key: UnsupportedOptionKey.
    let mut with_option = vec![4];
    with_option.extend_from_slice(b"opts");
    with_option.extend(hex("02 03 00 00 00 6b 65 79 02 03 00 00 00 76 61 6c"));
    let header = raw.header(Operation::CreateStream, 0, &with_option);
    assert_eq!(raw.send(&header, &with_option).await.code(), 4041);
    // The legacy login codes: MalformedLogin eviction, and the connection is still usable.
    let legacy = Request::LoginUser(login_user::LoginUser {
        username: WireName::new("iggy").unwrap(),
        password: ShortString::new("iggy").unwrap(),
        version: LongString::default(),
        context: LongString::default(),
    });
    let a = raw.call(&legacy).await;
    assert_eq!(a.eviction(), Some(EvictionReason::MalformedLogin as u8));
    assert_eq!(
        raw.call(&Request::GetStreams(get_streams::GetStreams))
            .await
            .code(),
        0
    );

    // Batches with a bad frame or batch checksum are refused with their codes.
    assert_eq!(raw.call(&create_request("s")).await.code(), 0);
    let topic = eddy_codec::stream::commands::create_topic::CreateTopic {
        stream_id: Identifier::numeric(0),
        partitions_count: 1,
        name: WireName::new("t").unwrap(),
        options: eddy_codec::stream::commands::TrailingOptions::default(),
    };
    assert_eq!(raw.call(&Request::CreateTopic(topic)).await.code(), 0);
    let send = send_messages::SendMessages::new(
        Identifier::numeric(0),
        Identifier::numeric(0),
        WirePartitioning::PartitionId(0),
        &[
            Message::new(1, 1_700_000_000_000_000, &b"hello"[..]),
            Message::new(2, 1_700_000_000_000_010, &b"world!"[..]),
        ],
    )
    .unwrap();
    let good = send.clone();
    let mut bad_frame = send.clone();
    let mut bytes = bad_frame.batch.to_vec();
    *bytes.last_mut().unwrap() ^= 0xff;
    bad_frame.batch = bytes.into();
    assert_eq!(
        raw.call(&Request::SendMessages(bad_frame)).await.code(),
        4027
    );
    let mut bad_batch = send;
    let mut bytes = bad_batch.batch.to_vec();
    bytes[40] ^= 0xff;
    bad_batch.batch = bytes.into();
    assert_eq!(
        raw.call(&Request::SendMessages(bad_batch)).await.code(),
        4039
    );
    let a = raw.call(&Request::SendMessages(good)).await;
    assert_eq!(a.code(), 0);
    // One confirmation: stream 0, topic 0, partition 0, base offset 0.
    assert_eq!(
        a.payload(),
        [&[1u8, 0, 0, 0][..], &[0; 20]].concat(),
        "send confirmation"
    );

    // Both ack levels of consumer-offset writes are served (a single node treats them alike).
    for (ack, offset) in [(AckLevel::NoAck, 0u64), (AckLevel::Quorum, 1)] {
        let store = Request::StoreConsumerOffset(store_consumer_offset::StoreConsumerOffset {
            consumer: WireConsumer::new(Identifier::numeric(3)),
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::numeric(0),
            partition: OptionalPartition(Some(0)),
            offset,
            ack,
        });
        assert_eq!(raw.call(&store).await.code(), 0, "{ack:?}");
        let get = Request::GetConsumerOffset(get_consumer_offset::GetConsumerOffset {
            consumer: WireConsumer::new(Identifier::numeric(3)),
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::numeric(0),
            partition: OptionalPartition(Some(0)),
        });
        let payload = raw.call(&get).await.payload();
        assert_eq!(
            u64::from_le_bytes(payload[12..20].try_into().unwrap()),
            offset
        );
    }
    let delete = Request::DeleteConsumerOffset(delete_consumer_offset::DeleteConsumerOffset {
        consumer: WireConsumer::new(Identifier::numeric(3)),
        stream_id: Identifier::numeric(0),
        topic_id: Identifier::numeric(0),
        partition: OptionalPartition(Some(0)),
        ack: AckLevel::NoAck,
    });
    assert_eq!(raw.call(&delete).await.code(), 0);

    // Per-command metrics on /metrics.
    let (status, metrics) = http_get(eddy.addrs().http, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert!(
        metrics.contains("eddy_requests_total{protocol=\"stream\",command=\"SEND_MESSAGES\"} 3")
    );
    assert!(metrics
        .contains("eddy_request_errors_total{protocol=\"stream\",command=\"SEND_MESSAGES\"} 2"));
    assert!(metrics.contains(
        "eddy_request_duration_seconds_count{protocol=\"stream\",command=\"LOGIN_REGISTER\"} 1"
    ));
    assert!(metrics.contains("command=\"INVALID_REQUEST\"} 3"));
}

fn create_request(name: &str) -> Request {
    Request::CreateStream(create_stream::CreateStream {
        name: WireName::new(name).unwrap(),
        options: eddy_codec::stream::commands::TrailingOptions::default(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_five_concurrent_clients() {
    let eddy = server();
    let addr = eddy.addrs().stream;
    let admin = root(addr).await;
    stream_and_topic(&admin, "shared", "t", 5).await;
    let mut tasks = Vec::new();
    for client_no in 0..25u32 {
        tasks.push(tokio::spawn(async move {
            let client = root(addr).await;
            let partition = client_no % 5;
            for batch in 0..20 {
                let mut msgs = sized_messages(&format!("c{client_no}-b{batch}"), 5, 100);
                client
                    .send_messages(
                        &id(0),
                        &id(0),
                        &Partitioning::partition_id(partition),
                        &mut msgs,
                    )
                    .await
                    .unwrap();
            }
            let me = client.get_me().await.unwrap();
            me.client_id
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(
            tokio::time::timeout(Duration::from_secs(120), task)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 25, "every connection has its own client id");
    let mut total = 0;
    for p in 0..5 {
        let polled = admin
            .poll_messages(
                &id(0),
                &id(0),
                Some(p),
                &Consumer::new(id(1)),
                &PollingStrategy::first(),
                10_000,
                false,
            )
            .await
            .unwrap();
        let offsets = offsets(&polled);
        assert_eq!(
            offsets,
            (0..offsets.len() as u64).collect::<Vec<_>>(),
            "contiguous"
        );
        total += polled.messages.len();
    }
    assert_eq!(total, 25 * 20 * 5);
    let stats = admin.get_stats().await.unwrap();
    assert_eq!(stats.messages_count, 2500);
    assert_eq!(stats.partitions_count, 5);
}

/// `max_bytes` of a deferred poll (106) and a fetch (109): a reply holds what fits (the poll's
/// 40-byte prefix counted), a first message larger than the limit comes alone, a fetch's later
/// section that nothing fits is left out, and limits below the least one message needs, or a
/// target's above its request's, are refused as the SDK would never send them.
#[tokio::test]
async fn poll_byte_limits_hold_and_forged_ones_are_refused() {
    use eddy_codec::stream::commands::fetch_messages::{
        FetchMessages, FetchMessagesReply, FetchTarget, MIN_MAX_BYTES,
    };
    use eddy_codec::stream::commands::poll_messages::{PollMessages, PollMessagesReply};
    use eddy_codec::stream::commands::poll_messages_deferred::PollMessagesDeferred;
    use eddy_codec::stream::{PollingStrategy as WireStrategy, WireDecode as _};

    let eddy = server();
    let addr = eddy.addrs().stream;
    let client = root(addr).await;
    let (s, t) = stream_and_topic(&client, "bytes", "t", 2).await;
    for partition in 0..2 {
        client
            .send_messages(
                &id(s),
                &id(t),
                &Partitioning::partition_id(partition),
                &mut sized_messages("big", 3, 1000),
            )
            .await
            .expect("send");
    }
    // One frame: 48-byte header + 1000-byte payload; a batch: 256-byte header + frames.
    let frame = 48 + 1000;
    let mut raw = Raw::logged_in(addr, "iggy", "iggy").await;
    let poll = |max_bytes: u32| {
        Request::PollMessagesDeferred(PollMessagesDeferred {
            poll: PollMessages {
                consumer: WireConsumer::new(Identifier::numeric(1)),
                stream_id: Identifier::numeric(s),
                topic_id: Identifier::numeric(t),
                partition: OptionalPartition(Some(0)),
                strategy: WireStrategy::Offset(0),
                count: 10,
                auto_commit: false,
            },
            wait_us: 0,
            min_count: 1,
            max_bytes,
            request_timeout_us: 30_000_000,
        })
    };
    let offsets = |payload: &[u8]| -> Vec<u64> {
        PollMessagesReply::decode(payload)
            .expect("a poll reply")
            .records
            .iter()
            .flat_map(|r| r.messages().map(|m| m.offset).collect::<Vec<_>>())
            .collect()
    };
    // The least limit: the first message (larger) comes alone.
    let a = raw.call(&poll(MIN_MAX_BYTES)).await;
    assert_eq!(offsets(&a.payload()), [0]);
    // Two messages fit, the third does not: a sliced batch of two.
    let two = 40 + 256 + 2 * frame;
    assert_eq!(offsets(&raw.call(&poll(two)).await.payload()), [0, 1]);
    assert_eq!(offsets(&raw.call(&poll(two - 1)).await.payload()), [0]);
    // The whole batch, exactly.
    let three = 40 + 256 + 3 * frame;
    assert_eq!(offsets(&raw.call(&poll(three)).await.payload()), [0, 1, 2]);
    assert_eq!(
        offsets(&raw.call(&poll(u32::MAX)).await.payload()),
        [0, 1, 2]
    );
    // Forged limits: InvalidCommand, and the connection goes on.
    for forged in [0, 1, MIN_MAX_BYTES - 1] {
        assert_eq!(
            raw.call(&poll(forged)).await.code(),
            3,
            "max_bytes {forged}"
        );
    }

    let fetch = |max_bytes: u32, target_bytes: [u32; 2]| {
        Request::FetchMessages(FetchMessages {
            consumer: WireConsumer::new(Identifier::numeric(1)),
            stream_id: Identifier::numeric(s),
            topic_id: Identifier::numeric(t),
            wait_us: 0,
            request_timeout_us: 30_000_000,
            min_count: 1,
            count: 10,
            max_bytes,
            auto_commit: false,
            targets: eddy_codec::stream::codec::Counted(
                (0..2)
                    .map(|p| FetchTarget {
                        partition_id: p,
                        strategy: WireStrategy::Offset(0),
                        max_bytes: target_bytes[p as usize],
                        incarnation: 1,
                        owner_generation: 0,
                    })
                    .collect(),
            ),
        })
    };
    let sections = |payload: &[u8]| -> Vec<(u32, u32, u64, usize)> {
        let reply = FetchMessagesReply::decode(payload).expect("a fetch reply");
        reply
            .sections
            .iter()
            .map(|s| {
                (
                    s.partition_id,
                    s.messages_count,
                    s.next_offset,
                    s.records_len as usize,
                )
            })
            .collect()
    };
    let records = |n: u32| 256 + n as usize * frame as usize;
    // Plenty: both partitions whole.
    let a = raw.call(&fetch(1 << 20, [1 << 20, 1 << 20])).await;
    assert_eq!(
        sections(&a.payload()),
        [(0, 3, 3, records(3)), (1, 3, 3, records(3))]
    );
    // Two messages' records for the whole reply: partition 0 takes them, partition 1 gets
    // no section (it keeps its position).
    let two = u32::try_from(records(2)).unwrap();
    let a = raw.call(&fetch(two, [two, two])).await;
    assert_eq!(sections(&a.payload()), [(0, 2, 2, records(2))]);
    // A target's own limit: one message from partition 0, two from partition 1.
    let one = u32::try_from(records(1)).unwrap();
    let a = raw.call(&fetch(1 << 20, [one, two])).await;
    assert_eq!(
        sections(&a.payload()),
        [(0, 1, 1, records(1)), (1, 2, 2, records(2))]
    );
    // The least limit: the reply's first message alone.
    let a = raw
        .call(&fetch(MIN_MAX_BYTES, [MIN_MAX_BYTES, MIN_MAX_BYTES]))
        .await;
    assert_eq!(sections(&a.payload()), [(0, 1, 1, records(1))]);
    // Forged: below the least, a target above its request, a zero target.
    for (max_bytes, targets) in [
        (MIN_MAX_BYTES - 1, [MIN_MAX_BYTES - 1; 2]),
        (one, [one, one + 1]),
        (1 << 20, [0, 1 << 20]),
    ] {
        assert_eq!(
            raw.call(&fetch(max_bytes, targets)).await.code(),
            3,
            "{max_bytes} {targets:?}"
        );
    }
    assert_eq!(raw.call(&poll(three)).await.code(), 0, "still usable");
}

/// A stream's own `encryption_key` (the 0.12.2 SDK's `StreamCreateOptions`), as an attacker
/// would try it: a key of any other length is `InvalidEncryptionKey` (70), a forged sealed
/// entry or projection is `UnsupportedOptionKey`, a key on a server without one is
/// `StreamEncryptionUnavailable` (4106); no reply ever holds the key, no file holds the
/// messages in the clear, and a restart reads them back (the key reopened from the metadata).
#[tokio::test]
async fn stream_keys_are_checked_never_shown_and_survive_a_restart() {
    use eddy_codec::stream::commands::TrailingOptions;
    use eddy_options::{OptionsBlock, ValueKind};

    const SECRET: [u8; 32] = *b"stream-key-0123456789abcdefghijk";
    let create = |name: &str, entries: &[(&str, ValueKind, &[u8])]| {
        Request::CreateStream(create_stream::CreateStream {
            name: WireName::new(name).unwrap(),
            options: TrailingOptions(OptionsBlock::from_entries(entries.iter().copied()).unwrap()),
        })
    };
    let keyed = |name: &str| create(name, &[("encryption_key", ValueKind::Raw, &SECRET)]);

    // Without a server key: refused, and nothing is created.
    let plain = server();
    let mut raw = Raw::logged_in(plain.addrs().stream, "iggy", "iggy").await;
    assert_eq!(raw.call(&keyed("k")).await.code(), 4106);
    assert_eq!(
        raw.call(&Request::GetStreams(get_streams::GetStreams))
            .await
            .payload(),
        Vec::<u8>::new()
    );
    drop(plain);

    let mut eddy = server_with(&[
        "--encryption-key",
        "3q2+7wABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhs=",
    ]);
    let addr = eddy.addrs().stream;
    let mut raw = Raw::logged_in(addr, "iggy", "iggy").await;
    for len in [0usize, 1, 16, 31, 33, 255] {
        let key = vec![7u8; len.max(1)];
        let key = &key[..len.max(1)];
        let code = raw
            .call(&create("short", &[("encryption_key", ValueKind::Raw, key)]))
            .await
            .code();
        assert_eq!(code, 70, "{} bytes", key.len());
    }
    for forged in [
        "encryption_key_wrapped",
        "encryption_key_source",
        "encryption_key_fingerprint",
        "encryption_kek_fingerprint",
    ] {
        let code = raw
            .call(&create(
                "forged",
                &[
                    ("encryption_key", ValueKind::Raw, &SECRET),
                    (forged, ValueKind::Raw, &[1; 86]),
                ],
            ))
            .await
            .code();
        assert_eq!(code, 4041, "{forged}");
    }
    let created = raw.call(&keyed("keyed")).await.payload();
    let shows = |body: &[u8]| {
        assert!(!body.windows(32).any(|w| w == SECRET), "the key in a reply");
        assert!(
            !body
                .windows(b"encryption_key_wrapped".len())
                .any(|w| w == b"encryption_key_wrapped"),
            "the sealed key in a reply"
        );
        let text = String::from_utf8_lossy(body);
        assert!(text.contains("encryption_key_source"), "{text}");
    };
    shows(&created);
    shows(
        &raw.call(&Request::GetStreams(get_streams::GetStreams))
            .await
            .payload(),
    );

    // Messages of the keyed stream: sent, then read back after a restart.
    let client = root(addr).await;
    let stream = named("keyed");
    client
        .create_topic(&stream, "t", &TopicCreateOptions::default())
        .await
        .expect("create topic");
    let marker = "plaintext-marker-of-a-keyed-stream";
    client
        .send_messages(
            &stream,
            &named("t"),
            &Partitioning::partition_id(0),
            &mut messages(&[marker, marker]),
        )
        .await
        .expect("send");
    drop(client);
    eddy.stop(Duration::from_secs(20));
    let mut files = vec![eddy.data_dir().to_path_buf()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            let bytes = std::fs::read(&path).unwrap();
            for needle in [marker.as_bytes(), &SECRET[..]] {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle),
                    "{} holds a secret in the clear",
                    path.display()
                );
            }
        }
    }
    eddy.restart();
    let client = root(eddy.addrs().stream).await;
    let polled = client
        .poll_messages(
            &stream,
            &named("t"),
            Some(0),
            &Consumer::new(named("after")),
            &PollingStrategy::offset(0),
            10,
            false,
        )
        .await
        .expect("poll after restart");
    assert_eq!(payloads(&polled), [marker, marker]);
}
