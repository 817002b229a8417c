//! Round trips of every event message in both encodings (body and frame level, with and
//! without compression), truncation (every prefix fails cleanly), garbage and mutations
//! (never a panic), and the V3 leniency upstream decoders have.

use std::sync::Arc;

use crate::event_strategies::*;
use bytes::Bytes;
use eddy_codec::event::*;
use eddy_wire::event::{
    decode_request_frame, decode_response_frame, Decoded, DictCodec, Dictionary, FrameEncodeError,
    FrameLimits, ProtocolVersion, RequestType, ResponseType, SizeClass, DEFAULT_COMPRESSION_LEVEL,
    HEADER_LEN, MAX_FIXED_BODY_LEN,
};
use proptest::prelude::*;

const VERSIONS: [ProtocolVersion; 2] = [ProtocolVersion::V2, ProtocolVersion::V3];
const MAX: u64 = 16 * 1024 * 1024;

fn codec() -> DictCodec {
    DictCodec::new(Arc::new(
        Dictionary::builtin(DEFAULT_COMPRESSION_LEVEL).unwrap(),
    ))
}

fn request_body(request: &EventRequest, version: ProtocolVersion) -> Vec<u8> {
    let mut out = Vec::new();
    request.encode_body(version, &mut out);
    out
}

fn response_body(response: &EventResponse, version: ProtocolVersion) -> Vec<u8> {
    let mut out = Vec::new();
    response.encode_body(version, &mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn requests_round_trip(request in any_request()) {
        let kind = request.request_type();
        for version in VERSIONS {
            let body = request_body(&request, version);
            prop_assert_eq!(&EventRequest::decode_body(version, kind, &body).unwrap(), &request);
            let shared = Bytes::from(body.clone());
            prop_assert_eq!(&EventRequest::decode_body_shared(version, kind, &shared).unwrap(), &request);

            // Frame level: fixed requests above 1007 bytes cannot be sent.
            let mut frame = Vec::new();
            match encode_request(&request, version, &mut frame, None, MAX) {
                Ok(header) => {
                    prop_assert_eq!(header.uncompressed_length as usize, body.len());
                    let Decoded::Frame(f) = decode_request_frame(&frame, FrameLimits::new(MAX)).unwrap() else {
                        panic!("incomplete frame");
                    };
                    prop_assert_eq!(&decode_request(&f, None, FrameLimits::new(MAX)).unwrap(), &request);
                }
                Err(EventCodecError::Encode(FrameEncodeError::FixedBodyTooLarge { length, .. })) => {
                    prop_assert_eq!(kind.size_class(), SizeClass::Fixed);
                    prop_assert_eq!(length, body.len());
                    prop_assert!(length > MAX_FIXED_BODY_LEN);
                    prop_assert!(frame.is_empty());
                }
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
    }

    #[test]
    fn responses_round_trip(response in any_response()) {
        let kind = response.response_type();
        for version in VERSIONS {
            let body = response_body(&response, version);
            prop_assert_eq!(&EventResponse::decode_body(version, kind, &body).unwrap(), &response);
            let shared = Bytes::from(body.clone());
            prop_assert_eq!(&EventResponse::decode_body_shared(version, kind, &shared).unwrap(), &response);

            let mut frame = Vec::new();
            match encode_response(&response, version, &mut frame, None, MAX) {
                Ok(_) => {
                    let Decoded::Frame(f) = decode_response_frame(&frame, FrameLimits::new(MAX)).unwrap() else {
                        panic!("incomplete frame");
                    };
                    prop_assert_eq!(&decode_response(&f, None, FrameLimits::new(MAX)).unwrap(), &response);
                }
                Err(EventCodecError::Encode(FrameEncodeError::FixedBodyTooLarge { length, .. })) => {
                    prop_assert_eq!(kind.size_class(), SizeClass::Fixed);
                    prop_assert_ne!(kind, ResponseType::Error);
                    prop_assert!(length > MAX_FIXED_BODY_LEN);
                }
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
    }

    #[test]
    fn every_prefix_of_a_request_fails_cleanly(request in any_request()) {
        let kind = request.request_type();
        for version in VERSIONS {
            let body = request_body(&request, version);
            for len in 0..body.len() {
                prop_assert!(EventRequest::decode_body(version, kind, &body[..len]).is_err());
            }
            let mut frame = Vec::new();
            if encode_request(&request, version, &mut frame, None, MAX).is_ok() {
                for len in 0..frame.len() {
                    let decoded = decode_request_frame(&frame[..len], FrameLimits::new(MAX)).unwrap();
                    let needed = if len < HEADER_LEN { HEADER_LEN - len } else { frame.len() - len };
                    prop_assert_eq!(decoded, Decoded::NeedMore { needed });
                }
            }
        }
    }

    #[test]
    fn every_prefix_of_a_response_fails_cleanly(response in any_response()) {
        let kind = response.response_type();
        for version in VERSIONS {
            let body = response_body(&response, version);
            for len in 0..body.len() {
                prop_assert!(EventResponse::decode_body(version, kind, &body[..len]).is_err());
            }
        }
    }

    #[test]
    fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        for version in VERSIONS {
            for kind in RequestType::ALL {
                let _ = EventRequest::decode_body(version, kind, &data);
            }
            for kind in ResponseType::ALL {
                let _ = EventResponse::decode_body(version, kind, &data);
            }
        }
        let _ = decode_request_frame(&data, FrameLimits::new(MAX));
        let _ = decode_response_frame(&data, FrameLimits::new(MAX));
    }

    #[test]
    fn mutated_encodings_never_panic(
        request in any_request(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let kind = request.request_type();
        for version in VERSIONS {
            let mut body = request_body(&request, version);
            if body.is_empty() {
                continue;
            }
            for (at, byte) in &flips {
                let i = at.index(body.len());
                body[i] = *byte;
            }
            if let Ok(decoded) = EventRequest::decode_body(version, kind, &body) {
                let again = request_body(&decoded, version);
                prop_assert_eq!(EventRequest::decode_body(version, kind, &again).unwrap(), decoded);
            }
        }
    }

    #[test]
    fn compressed_frames_round_trip(response in read_response(), request in write_request()) {
        let mut codec = codec();
        for version in VERSIONS {
            let response = EventResponse::Read(response.clone());
            let mut frame = Vec::new();
            let header = encode_response(&response, version, &mut frame, Some(&mut codec), MAX).unwrap();
            let body_len = response_body(&response, version).len();
            prop_assert_eq!(header.uncompressed_length as usize, body_len);
            let Decoded::Frame(f) = decode_response_frame(&frame, FrameLimits::new(MAX)).unwrap() else {
                panic!("incomplete frame");
            };
            prop_assert_eq!(&decode_response(&f, Some(&mut codec), FrameLimits::new(MAX)).unwrap(), &response);

            let request = EventRequest::Write(request.clone());
            let mut frame = Vec::new();
            encode_request(&request, version, &mut frame, Some(&mut codec), MAX).unwrap();
            let Decoded::Frame(f) = decode_request_frame(&frame, FrameLimits::new(MAX)).unwrap() else {
                panic!("incomplete frame");
            };
            prop_assert_eq!(&decode_request(&f, Some(&mut codec), FrameLimits::new(MAX)).unwrap(), &request);
        }
    }
}

fn big_read_response() -> EventResponse {
    let events = eddy_wire::event::sample::SampleEvents::new(3)
        .take(20)
        .enumerate()
        .map(|(i, value)| Event {
            client_seq: i as u64,
            event_seq: i as u64 + 1,
            event_timestamp: 1_700_000_000_000 + i as u64,
            event_type_major: 1,
            event_value: Bytes::from(value),
            ..Event::default()
        })
        .collect();
    EventResponse::Read(ReadResponse {
        correlation_id: Some(9),
        event_batches: vec![AggregateEventBatch {
            aggregate_version: 1,
            client_id: 5,
            events,
            ..AggregateEventBatch::default()
        }],
        next_aggregate_version: None,
    })
}

#[test]
fn compression_rules_at_the_frame_level() {
    let mut codec = codec();
    let big = big_read_response();
    // Identified connection, big Read: compressed.
    let mut frame = Vec::new();
    let header =
        encode_response(&big, ProtocolVersion::V3, &mut frame, Some(&mut codec), MAX).unwrap();
    assert_eq!(header.compression, eddy_wire::event::Compression::ZstdDict);
    assert!(header.compressed_length * 2 < header.uncompressed_length);
    // Not identified: never compressed.
    let mut frame = Vec::new();
    let header = encode_response(&big, ProtocolVersion::V3, &mut frame, None, MAX).unwrap();
    assert_eq!(header.compression, eddy_wire::event::Compression::None);
    // Identify responses are never compressed, even when large.
    let identify = EventResponse::Identify(IdentifyResponse {
        compression_dict_bytes: Some(Bytes::from_static(
            eddy_wire::event::BUILTIN_DICTIONARY_BYTES,
        )),
        compression_dict_sha256: Some("x".repeat(64)),
        ..IdentifyResponse::default()
    });
    let mut frame = Vec::new();
    let header = encode_response(
        &identify,
        ProtocolVersion::V2,
        &mut frame,
        Some(&mut codec),
        MAX,
    )
    .unwrap();
    assert_eq!(header.compression, eddy_wire::event::Compression::None);
    // Small Read (< 1024 bytes): not compressed.
    let small = EventResponse::Read(ReadResponse::default());
    let mut frame = Vec::new();
    let header = encode_response(
        &small,
        ProtocolVersion::V2,
        &mut frame,
        Some(&mut codec),
        MAX,
    )
    .unwrap();
    assert_eq!(header.compression, eddy_wire::event::Compression::None);
    // A Write whose payload is under 1024 bytes is not compressed by a client, even if its
    // body is larger than that.
    let mut write = WriteRequest::default();
    write.writes.insert(
        AggregateKey::new(1, 2, 3),
        SingleAggregateWrite {
            events: vec![Event {
                event_value: Bytes::from(vec![b'a'; 1000]),
                ..Event::default()
            }],
            ..SingleAggregateWrite::default()
        },
    );
    let request = EventRequest::Write(write);
    assert_eq!(request.compressible_payload_len(), Some(1000));
    let mut frame = Vec::new();
    let header = encode_request(
        &request,
        ProtocolVersion::V2,
        &mut frame,
        Some(&mut codec),
        MAX,
    )
    .unwrap();
    assert!(header.uncompressed_length > 1024);
    assert_eq!(header.compression, eddy_wire::event::Compression::None);
}

#[test]
fn a_decompression_bomb_in_a_write_frame_is_refused() {
    let mut codec = codec();
    // A 1 MiB body that compresses to a few hundred bytes.
    let mut write = WriteRequest::default();
    write.writes.insert(
        AggregateKey::default(),
        SingleAggregateWrite {
            events: vec![Event {
                event_value: Bytes::from(vec![0u8; 1 << 20]),
                ..Event::default()
            }],
            ..SingleAggregateWrite::default()
        },
    );
    let mut frame = Vec::new();
    encode_request(
        &EventRequest::Write(write),
        ProtocolVersion::V2,
        &mut frame,
        Some(&mut codec),
        4 << 20,
    )
    .unwrap();
    assert!(frame.len() < 1024);
    // Under a 64 KiB limit the header alone is refused, before any body is read.
    let err = decode_request_frame(&frame[..HEADER_LEN], FrameLimits::new(64 * 1024)).unwrap_err();
    assert!(
        matches!(err, eddy_wire::event::FrameError::BodyTooLarge { .. }),
        "{err:?}"
    );
    // Lying about the uncompressed length: refused by the decompressor's checks.
    let mut lying = frame.clone();
    lying[12..16].copy_from_slice(&4096u32.to_le_bytes());
    let Decoded::Frame(f) = decode_request_frame(&lying, FrameLimits::new(MAX)).unwrap() else {
        panic!("incomplete frame");
    };
    assert!(matches!(
        decode_request(&f, Some(&mut codec), FrameLimits::new(MAX)),
        Err(EventCodecError::Decompress(_))
    ));
}

#[test]
fn error_responses_always_fit_the_fixed_body() {
    for version in VERSIONS {
        let long = ErrorResponse {
            correlation_id: Some(u128::MAX),
            error_code: u32::MAX,
            error_message: "é".repeat(3000),
        };
        let mut frame = Vec::new();
        let header = encode_response(
            &EventResponse::Error(long.clone()),
            version,
            &mut frame,
            None,
            MAX,
        )
        .unwrap();
        assert!(header.compressed_length as usize <= MAX_FIXED_BODY_LEN);
        let Decoded::Frame(f) = decode_response_frame(&frame, FrameLimits::new(MAX)).unwrap()
        else {
            panic!("incomplete frame");
        };
        let EventResponse::Error(back) = decode_response(&f, None, FrameLimits::new(MAX)).unwrap()
        else {
            panic!("not an error response");
        };
        assert!(back.error_message.len() <= MAX_ERROR_MESSAGE_LEN);
        assert!(back.error_message.len() >= MAX_ERROR_MESSAGE_LEN - 1);
        assert!(long.error_message.starts_with(&back.error_message));
        // The typed constructors render valid JSON within the limit.
        let error = ServerError::RegisterSchemaInvalid {
            schema_type: 0,
            parse_error: "\u{1}\"".repeat(1000),
        }
        .to_response(Some(u128::MAX));
        let body = error.to_body(version);
        assert!(body.len() <= MAX_FIXED_BODY_LEN, "{}", body.len());
        serde_json::from_str::<serde_json::Value>(&error.error_message).unwrap();
    }
}

#[test]
fn v3_accepts_what_rmp_serde_accepts() {
    let v3 = ProtocolVersion::V3;
    // A struct as a map keyed by field names, in any order, with an unknown key skipped.
    let mut map = vec![0x83];
    map.extend_from_slice(&[0xad]);
    map.extend_from_slice(b"aggregate_key");
    map.extend_from_slice(&[0x93, 0x01, 0x02, 0x03]);
    map.extend_from_slice(&[0xa5]);
    map.extend_from_slice(b"extra");
    map.extend_from_slice(&[0x92, 0xc3, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0]);
    map.extend_from_slice(&[0xae]);
    map.extend_from_slice(b"correlation_id");
    map.extend_from_slice(&[0xd3, 0, 0, 0, 0, 0, 0, 0, 7]);
    assert_eq!(
        AggregateDetailsRequest::decode_body(v3, &map).unwrap(),
        AggregateDetailsRequest {
            correlation_id: Some(7),
            aggregate_key: AggregateKey::new(1, 2, 3)
        }
    );
    // A map missing an Option field gives None; missing a required field is an error.
    assert_eq!(
        WriteResponse::decode_body(v3, &[0x80]).unwrap(),
        WriteResponse {
            correlation_id: None,
            max_aggregate_version: None
        }
    );
    assert!(matches!(
        AggregateDetailsRequest::decode_body(v3, &[0x80]),
        Err(DecodeError::MissingField {
            field: "aggregate_key",
            ..
        })
    ));
    // Keys by position.
    assert_eq!(
        WriteResponse::decode_body(v3, &[0x81, 0x01, 0x05]).unwrap(),
        WriteResponse {
            correlation_id: None,
            max_aggregate_version: Some(5)
        }
    );
    // Duplicate field.
    assert!(matches!(
        WriteResponse::decode_body(v3, &[0x82, 0x01, 0x05, 0x01, 0x06]),
        Err(DecodeError::DuplicateField { .. })
    ));
    // IdentifyRequest without known_dict_sha256 (5 elements).
    assert_eq!(
        IdentifyRequest::decode_body(v3, &[0x95, 0xc0, 0xc0, 0xc0, 0xc0, 0xa1, b'k']).unwrap(),
        IdentifyRequest {
            api_key: Some("k".into()),
            ..IdentifyRequest::default()
        }
    );
    // An event without iv (7 elements), with event_value as an integer array.
    assert_eq!(
        Event::decode_body(v3, &[0x97, 1, 2, 0xc0, 3, 4, 5, 0x92, 0x61, 0x62]).unwrap(),
        Event {
            client_seq: 1,
            event_seq: 2,
            event_timestamp: 3,
            event_type_major: 4,
            event_type_minor: 5,
            event_value: Bytes::from_static(b"ab"),
            ..Event::default()
        }
    );
    // Too few and too many elements.
    assert!(matches!(
        Event::decode_body(v3, &[0x96, 1, 2, 0xc0, 3, 4, 5]),
        Err(DecodeError::FieldCount {
            min: 7,
            max: 8,
            actual: 6,
            ..
        })
    ));
    assert!(matches!(
        WriteResponse::decode_body(v3, &[0x93, 0xc0, 0xc0, 0xc0]),
        Err(DecodeError::FieldCount { .. })
    ));
    // IdentifyResponse without the dictionary fields (3 elements).
    assert_eq!(
        IdentifyResponse::decode_body(v3, &[0x93, 0xc0, 0x05, 0x02]).unwrap(),
        IdentifyResponse {
            client_id: Some(5),
            access_level: Some(AccessLevel::ReadOnly),
            ..IdentifyResponse::default()
        }
    );
    // AccessLevel values other than 1/2 (V3) and 0/1 (V2) are errors.
    assert!(IdentifyResponse::decode_body(v3, &[0x93, 0xc0, 0xc0, 0x00]).is_err());
    let mut v2 = vec![0x00, 0x00, 0x01];
    v2.extend_from_slice(&2u32.to_le_bytes());
    v2.extend_from_slice(&[0x00, 0x00]);
    assert!(matches!(
        IdentifyResponse::decode_body(ProtocolVersion::V2, &v2),
        Err(DecodeError::InvalidEnumValue { value: 2, .. })
    ));
    // Trailing bytes are refused.
    assert!(matches!(
        WriteResponse::decode_body(v3, &[0x92, 0xc0, 0xc0, 0x00]),
        Err(DecodeError::TrailingBytes {
            offset: 3,
            remaining: 1
        })
    ));
}

#[test]
fn huge_claimed_counts_are_refused_before_allocating() {
    // V2 ReadResponse claiming 2^60 batches in a 30-byte body.
    let mut body = vec![0x00];
    body.extend_from_slice(&(1u64 << 60).to_le_bytes());
    body.extend_from_slice(&[0; 21]);
    assert!(matches!(
        ReadResponse::decode_body(ProtocolVersion::V2, &body),
        Err(DecodeError::LengthTooLarge { .. })
    ));
    // V3 array32 of 2^32-1 batches.
    let body = [0x93, 0xc0, 0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0];
    assert!(matches!(
        ReadResponse::decode_body(ProtocolVersion::V3, &body),
        Err(DecodeError::LengthTooLarge { .. })
    ));
    // A string length prefix far beyond the body.
    let mut body = vec![0x00, 0x00, 0x00, 0x00, 0x00, 0x00];
    body.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(RegisterSchemaRequest::decode_body(ProtocolVersion::V2, &body).is_err());
}
