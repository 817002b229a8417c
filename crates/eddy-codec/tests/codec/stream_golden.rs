//! Whole-frame golden vectors of spec §1.13: the bytes the 0.11.0-edge.4 SDK writes, routed
//! and decoded by our stack, and rebuilt byte for byte.

use bytes::Bytes;
use eddy_codec::stream::codec::{LongString, ShortString};
use eddy_codec::stream::commands::*;
use eddy_codec::stream::*;
use eddy_wire::stream::{self as wire, Decoded, Header};

const CLIENT: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;

fn hex(text: &str) -> Vec<u8> {
    text.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

/// Builds a request frame the way the SDK stamps it (spec §1.5).
fn sdk_frame(operation: wire::Operation, request: u64, code: u32, body: &[u8]) -> Vec<u8> {
    let mut header = wire::RequestHeader::new(operation, body.len()).unwrap();
    header.client = CLIENT;
    header.request = request;
    header.session = if operation == wire::Operation::Register {
        0
    } else {
        7
    };
    if operation == wire::Operation::NonReplicated {
        header.command_code = code;
    }
    if operation.carries_request_checksum() {
        header.request_checksum = wire::request_checksum(body);
    }
    wire::frame::encode_frame(&header.encode(), body).unwrap()
}

fn decode(frame: &[u8]) -> (wire::RequestHeader, Request) {
    let Ok(Decoded::Complete(frame)) = wire::decode(frame) else {
        panic!("a whole frame");
    };
    let Header::Request(header) = frame.header else {
        panic!("a request");
    };
    header.validate().unwrap();
    let request = Request::decode_frame(&header, &Bytes::copy_from_slice(frame.body)).unwrap();
    (header, request)
}

#[test]
fn login_register_frame() {
    let body = login_register::LoginRegister {
        client: login_register::ClientVersionInfo {
            protocol_version: 0x2C00,
            sdk_name: WireName::new("rust-sdk").unwrap(),
            sdk_version: WireName::new("0.11.0-edge.4").unwrap(),
        },
        username: WireName::new("iggy").unwrap(),
        password: ShortString::new("iggy").unwrap(),
        context: LongString::new(""),
    };
    let frame = sdk_frame(wire::Operation::Register, 0, 0, &body.to_vec());
    assert_eq!(frame.len(), 297);
    assert_eq!(
        &frame[0x30..0x40],
        &hex("29 01 00 00 00 00 00 00 00 00 00 00 05 00 00 00")[..]
    );
    assert_eq!(
        &frame[0x90..0xa0],
        &hex("1d 7e 58 c1 b2 d6 a9 87 00 00 00 00 00 00 00 00")[..]
    );
    assert_eq!(
        &frame[0x100..0x110],
        &hex("00 2c 00 00 08 72 75 73 74 2d 73 64 6b 0d 30 2e")[..]
    );
    let (_, request) = decode(&frame);
    let Request::Register(attempts) = request else {
        panic!("operation 1 routes to register");
    };
    assert_eq!(attempts.password, Some(body));
}

#[test]
fn create_stream_frame() {
    let body = hex("0b 74 65 73 74 2d 73 74 72 65 61 6d");
    let frame = sdk_frame(wire::Operation::CreateStream, 1, 0, &body);
    assert_eq!(&frame[0x30..0x34], &hex("0c 01 00 00")[..]);
    assert_eq!(&frame[0x90..0x98], &hex("79 7e 53 58 10 db bc ac")[..]);
    assert_eq!(
        &frame[0xa0..0xb0],
        &hex("00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00")[..]
    );
    assert_eq!(
        &frame[0xb0..0xc0],
        &hex("80 00 00 00 00 00 00 00 07 00 00 00 00 00 00 00")[..]
    );
    let (header, request) = decode(&frame);
    assert_eq!(
        request,
        Request::CreateStream(create_stream::CreateStream {
            name: WireName::new("test-stream").unwrap(),
            options: TrailingOptions::default(),
        })
    );
    let reply = reply::ReplyFrame::success(
        &header,
        &entities::StreamDetails {
            stream: entities::StreamResponse {
                id: 0,
                created_at: 1_700_000_000_000_000,
                topics_count: 0,
                size_bytes: 0,
                messages_count: 0,
                name: WireName::new("test-stream").unwrap(),
                options: eddy_options::OptionsBlock::empty(),
            },
            topics: vec![],
        },
    )
    .unwrap();
    assert_eq!(reply.body_len(), 52);
    assert_eq!(reply.header.operation, wire::Operation::CreateStream);
    let bytes = reply.to_vec();
    let parsed = wire::ReplyHeader::decode(bytes[..256].try_into().unwrap()).unwrap();
    let payload = reply::reply_payload(&parsed, &bytes[256..]).unwrap();
    assert_eq!(payload.len(), 48);
}

#[test]
fn create_topic_frame() {
    let body = hex("01 04 00 00 00 00 01 00 00 00 0a 74 65 73 74 2d 74 6f 70 69 63");
    let frame = sdk_frame(wire::Operation::CreateTopic, 2, 0, &body);
    assert_eq!(&frame[0x30..0x34], &hex("15 01 00 00")[..]);
    assert_eq!(&frame[0x90..0x98], &hex("54 6b 2c c9 f6 ec c9 8a")[..]);
    assert_eq!(frame[0xb0], 0x84);
    let (_, request) = decode(&frame);
    let Request::CreateTopic(create) = request else {
        panic!("operation 132 routes to create topic");
    };
    assert_eq!(create.partitions_count, 1);
    assert!(create.options.0.is_empty());
}

#[test]
fn send_and_poll_frames() {
    let send = send_messages::SendMessages::new(
        Identifier::numeric(0),
        Identifier::numeric(0),
        Partitioning::PartitionId(0),
        &[
            Message::new(1, 1_700_000_000_000_000, &b"hello"[..]),
            Message::new(2, 1_700_000_000_000_010, &b"world!"[..]),
        ],
    )
    .unwrap();
    let frame = sdk_frame(wire::Operation::SendMessages, 3, 0, &send.to_vec());
    assert_eq!(frame.len(), 256 + 389);
    assert_eq!(
        &frame[0x90..0xa0],
        &[0u8; 16][..],
        "partition plane carries no checksum"
    );
    let (_, request) = decode(&frame);
    let Request::SendMessages(decoded) = request else {
        panic!("operation 160 routes to send messages");
    };
    let stamped = decoded.admit().unwrap().stamp(0, 0, 1_700_000_000_500_000);
    assert_eq!(stamped.header().batch_checksum, 0xb954_492b_efd6_5122);

    let poll = hex(
        "01 01 04 01 00 00 00 01 04 00 00 00 00 01 04 00 00 00 00 01 00 00 00 00 \
         01 00 00 00 00 00 00 00 00 0a 00 00 00 00",
    );
    let frame = sdk_frame(wire::Operation::NonReplicated, 3, 100, &poll);
    assert_eq!(&frame[0xc0..0xc8], &hex("00 00 00 00 64 00 00 00")[..]);
    let (header, request) = decode(&frame);
    assert_eq!(request.code(), CommandCode::PollMessages);
    let stored = StoredBatch::parse(Bytes::from(stamped.to_vec())).unwrap();
    let reply = reply::ReplyFrame::success_chunks(
        &header,
        poll_messages::PollMessagesReply::new(0, 1, vec![stored.record()]).chunks(),
    )
    .unwrap();
    assert_eq!(reply.body_len(), 16 + 363);
    assert_eq!(reply.header.operation, wire::Operation::NonReplicated);
    assert_eq!(
        reply.body()[2].as_ptr(),
        stored.bytes()[256..].as_ptr(),
        "the reply carries the stored frames, not a copy"
    );
}

#[test]
fn unknown_code_and_internal_operation_are_rejected() {
    let frame = sdk_frame(wire::Operation::NonReplicated, 1, 9_999, &[]);
    let Ok(Decoded::Complete(decoded)) = wire::decode(&frame) else {
        panic!("frames");
    };
    let Header::Request(header) = decoded.header else {
        panic!("request");
    };
    assert_eq!(
        Request::decode_frame(&header, &Bytes::new()),
        Err(CodecError::UnknownCommand { code: 9_999 })
    );
    let status = reply::ReplyFrame::status(&header, ErrorCode::InvalidCommand).unwrap();
    assert_eq!(status.header.status, 3);
    assert_eq!(status.body_len(), 0);
    let mut internal = header;
    internal.operation = wire::Operation::TruncatePartition.as_u8();
    assert!(matches!(
        Request::decode_frame(&internal, &Bytes::new()),
        Err(CodecError::UnroutableOperation { operation: 68 })
    ));
}
