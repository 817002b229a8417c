//! Golden bytes: every byte example of the event protocol spec (§2.3, §2.4 A–E), both
//! encodings, encoded by us and decoded by us.

use std::collections::BTreeMap;

use bytes::Bytes;
use eddy_codec::event::{
    decode_request, decode_response, encode_request, encode_response, AccessLevel,
    AggregateDetailsRequest, AggregateEventBatch, AggregateKey, ErrorResponse, Event, EventBody,
    EventRequest, EventResponse, IdentifyResponse, ReadResponse, ServerError, SingleAggregateWrite,
    WatchResponse, WriteRequest,
};
use eddy_wire::event::{
    decode_request_frame, decode_response_frame, Decoded, FrameLimits, ProtocolVersion,
    DEFAULT_MAX_RESPONSE_LEN,
};

/// Parses the spec's hex notation: space-separated bytes, `00x15` meaning fifteen `00`s.
fn hex(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for token in text.split_whitespace() {
        let (byte, count) = match token.split_once('x') {
            Some((b, n)) => (b, n.parse::<usize>().unwrap()),
            None => (token, 1),
        };
        let byte = u8::from_str_radix(byte, 16).unwrap_or_else(|_| panic!("bad token {token}"));
        out.extend(std::iter::repeat_n(byte, count));
    }
    out
}

fn json_value() -> Bytes {
    Bytes::from_static(br#"{"a":1}"#)
}

fn example_event(event_seq: u64) -> Event {
    Event {
        client_seq: 1,
        event_seq,
        event_id: None,
        event_timestamp: 1_700_000_000_000,
        event_type_major: 7,
        event_type_minor: 0,
        event_value: json_value(),
        iv: None,
    }
}

fn request_frame(request: &EventRequest, version: ProtocolVersion) -> Vec<u8> {
    let mut out = Vec::new();
    encode_request(request, version, &mut out, None, 1 << 20).unwrap();
    out
}

fn response_frame(response: &EventResponse, version: ProtocolVersion) -> Vec<u8> {
    let mut out = Vec::new();
    encode_response(response, version, &mut out, None, DEFAULT_MAX_RESPONSE_LEN).unwrap();
    out
}

fn decode_request_bytes(bytes: &[u8]) -> EventRequest {
    let limits = FrameLimits::default_requests();
    let Decoded::Frame(frame) = decode_request_frame(bytes, limits).unwrap() else {
        panic!("incomplete frame");
    };
    assert_eq!(frame.len(), bytes.len());
    decode_request(&frame, None, limits).unwrap()
}

fn decode_response_bytes(bytes: &[u8]) -> EventResponse {
    let limits = FrameLimits::default_responses();
    let Decoded::Frame(frame) = decode_response_frame(bytes, limits).unwrap() else {
        panic!("incomplete frame");
    };
    assert_eq!(frame.len(), bytes.len());
    decode_response(&frame, None, limits).unwrap()
}

#[test]
fn aggregate_details_request_both_encodings() {
    // §2.3.
    let request = EventRequest::AggregateDetails(AggregateDetailsRequest {
        correlation_id: Some(1),
        aggregate_key: AggregateKey::new(1, 2, 3),
    });
    let v2 = hex("02 00 00 00  01 00 00 00  41 00 00 00  41 00 00 00  00
         01  01 00x15  01 00x15  02 00x15  03 00x15");
    assert_eq!(v2.len(), 82);
    assert_eq!(request_frame(&request, ProtocolVersion::V2), v2);
    assert_eq!(decode_request_bytes(&v2), request);

    let v3 = hex("03 00 00 00  01 00 00 00  4a 00 00 00  4a 00 00 00  00
         92  c4 10 00x15 01  93  c4 10 00x15 01  c4 10 00x15 02  c4 10 00x15 03");
    assert_eq!(v3.len(), 91);
    assert_eq!(request_frame(&request, ProtocolVersion::V3), v3);
    assert_eq!(decode_request_bytes(&v3), request);
}

fn example_a() -> EventRequest {
    let mut writes = BTreeMap::new();
    writes.insert(
        AggregateKey::new(1, 2, 3),
        SingleAggregateWrite {
            events: vec![example_event(0)],
            allow_create: true,
            expected_version: Some(0),
            enforce_client_idempotency: true,
        },
    );
    EventRequest::Write(WriteRequest {
        correlation_id: Some(2),
        client_id: 0x42,
        user_id: None,
        writes,
    })
}

#[test]
fn example_a_write_request_v2() {
    let mut frame = hex("02 00 00 00 03 00 00 00 a6 00 00 00 a6 00 00 00 00");
    let body = hex("01 02 00x15
         42 00x15
         00
         01 00 00 00 00 00 00 00
         01 00x15  02 00x15  03 00x15
         01 00 00 00 00 00 00 00
         01 00 00 00 00 00 00 00
         00 00 00 00 00 00 00 00
         00
         00 68 e5 cf 8b 01 00 00
         07 00 00 00 00 00 00 00
         00 00 00 00 00 00 00 00
         07 00 00 00 00 00 00 00 7b 22 61 22 3a 31 7d
         00
         01
         01 00 00 00 00 00 00 00 00
         01");
    assert_eq!(body.len(), 166);
    frame.extend_from_slice(&body);
    assert_eq!(request_frame(&example_a(), ProtocolVersion::V2), frame);
    assert_eq!(decode_request_bytes(&frame), example_a());
}

#[test]
fn example_a_write_request_v3() {
    let mut frame = hex("03 00 00 00 03 00 00 00 7c 00 00 00 7c 00 00 00 00");
    let body = hex("94
         c4 10 00x15 02
         c4 10 00x15 42
         c0
         81
         93 c4 10 00x15 01  c4 10 00x15 02  c4 10 00x15 03
         94
         91
         98
         01 00 c0
         cf 00 00 01 8b cf e5 68 00
         07 00
         c4 07 7b 22 61 22 3a 31 7d
         c0
         c3
         00
         c3");
    assert_eq!(body.len(), 124);
    frame.extend_from_slice(&body);
    assert_eq!(request_frame(&example_a(), ProtocolVersion::V3), frame);
    assert_eq!(decode_request_bytes(&frame), example_a());
}

#[test]
fn example_b_error_response_2003() {
    let error = ServerError::WriteOptimisticConcurrencyViolation {
        expected_version: 0,
        current_aggregate_version: 1,
        conflicts: Vec::new(),
    }
    .to_response(Some(2));
    let message = br#"{"expected_version":0,"current_aggregate_version":1}"#;
    assert_eq!(message.len(), 52);
    assert_eq!(error.error_message.as_bytes(), message);

    let mut v2 = hex("01 02 00x15  d3 07 00 00  34 00 00 00 00 00 00 00");
    v2.extend_from_slice(message);
    assert_eq!(v2.len(), 81);
    assert_eq!(error.to_body(ProtocolVersion::V2), v2);
    assert_eq!(
        ErrorResponse::decode_body(ProtocolVersion::V2, &v2).unwrap(),
        error
    );

    let mut v3 = hex("93  c4 10 00x15 02  cd 07 d3  d9 34");
    v3.extend_from_slice(message);
    assert_eq!(v3.len(), 76);
    assert_eq!(error.to_body(ProtocolVersion::V3), v3);
    assert_eq!(
        ErrorResponse::decode_body(ProtocolVersion::V3, &v3).unwrap(),
        error
    );

    // As a whole frame: response type 7, fixed, uncompressed.
    let frame = response_frame(&EventResponse::Error(error.clone()), ProtocolVersion::V3);
    assert_eq!(
        frame[..17],
        hex("03 00 00 00 07 00 00 00 4c 00 00 00 4c 00 00 00 00")[..]
    );
    assert_eq!(decode_response_bytes(&frame), EventResponse::Error(error));
}

fn example_c(access_level: AccessLevel) -> IdentifyResponse {
    IdentifyResponse {
        correlation_id: None,
        client_id: Some(0x1234),
        access_level: Some(access_level),
        compression_dict_sha256: Some("ab".to_owned()),
        compression_dict_bytes: Some(Bytes::from_static(&[0x01, 0xC8])),
    }
}

#[test]
fn example_c_identify_response_access_level() {
    let v2_rw = hex("00  01 34 12 00x14  01 00 00 00 00  01 02 00x7 61 62  01 02 00x7 01 c8");
    let v2_ro = hex("00  01 34 12 00x14  01 01 00 00 00  01 02 00x7 61 62  01 02 00x7 01 c8");
    assert_eq!(
        example_c(AccessLevel::ReadWrite).to_body(ProtocolVersion::V2),
        v2_rw
    );
    assert_eq!(
        example_c(AccessLevel::ReadOnly).to_body(ProtocolVersion::V2),
        v2_ro
    );
    assert_eq!(
        IdentifyResponse::decode_body(ProtocolVersion::V2, &v2_rw).unwrap(),
        example_c(AccessLevel::ReadWrite)
    );
    assert_eq!(
        IdentifyResponse::decode_body(ProtocolVersion::V2, &v2_ro).unwrap(),
        example_c(AccessLevel::ReadOnly)
    );

    // Upstream V3 (dictionary bytes as an integer array): accepted.
    let upstream_rw = hex("95 c0 c4 10 00x14 12 34 01 a2 61 62 92 01 cc c8");
    let upstream_ro = hex("95 c0 c4 10 00x14 12 34 02 a2 61 62 92 01 cc c8");
    assert_eq!(
        IdentifyResponse::decode_body(ProtocolVersion::V3, &upstream_rw).unwrap(),
        example_c(AccessLevel::ReadWrite)
    );
    assert_eq!(
        IdentifyResponse::decode_body(ProtocolVersion::V3, &upstream_ro).unwrap(),
        example_c(AccessLevel::ReadOnly)
    );
    // Ours (the spec's recommendation): the last field as bin.
    let ours = hex("95 c0 c4 10 00x14 12 34 01 a2 61 62 c4 02 01 c8");
    assert_eq!(
        example_c(AccessLevel::ReadWrite).to_body(ProtocolVersion::V3),
        ours
    );
    assert_eq!(
        IdentifyResponse::decode_body(ProtocolVersion::V3, &ours).unwrap(),
        example_c(AccessLevel::ReadWrite)
    );
}

#[test]
fn example_d_empty_watch_response_frames() {
    let ack = EventResponse::Watch(WatchResponse::default());
    let v2 = hex("02 00 00 00 08 00 00 00 08 00 00 00 08 00 00 00 00  00 00 00 00 00 00 00 00");
    let v3 = hex("03 00 00 00 08 00 00 00 02 00 00 00 02 00 00 00 00  91 90");
    assert_eq!(response_frame(&ack, ProtocolVersion::V2), v2);
    assert_eq!(response_frame(&ack, ProtocolVersion::V3), v3);
    assert_eq!(decode_response_bytes(&v2), ack);
    assert_eq!(decode_response_bytes(&v3), ack);
}

#[test]
fn example_e_read_response_v3() {
    let response = ReadResponse {
        correlation_id: Some(3),
        event_batches: vec![AggregateEventBatch {
            aggregate_version: 1,
            client_id: 0x42,
            user_id: None,
            server_timestamp: 1_700_000_000_123,
            events: vec![example_event(1)],
        }],
        next_aggregate_version: None,
    };
    let body = hex(
        "93 | c4 10 00x15 03 | 91 | 95 01 c4 10 00x15 42 c0 cf 00 00 01 8b cf e5 68 7b
         | 91 98 01 01 c0 cf 00 00 01 8b cf e5 68 00 07 00 c4 07 7b 22 61 22 3a 31 7d c0 | c0"
            .replace('|', " ")
            .as_str(),
    );
    assert_eq!(response.to_body(ProtocolVersion::V3), body);
    assert_eq!(
        ReadResponse::decode_body(ProtocolVersion::V3, &body).unwrap(),
        response
    );
}
