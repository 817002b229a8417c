//! Replays the committed corpora of the event body fuzz targets (`fuzz/corpus/event_body_v2`,
//! `event_body_v3`) through the same functions the targets call, without libfuzzer.
//!
//! `EDDY_WRITE_CORPUS=1 cargo test -p eddy-codec --test codec event_fuzz_corpus -- --ignored`
//! regenerates the seed files of all four event targets from real encodings.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use eddy_codec::event::fuzzing::{fuzz_body_v2, fuzz_body_v3, request_selector, response_selector};
use eddy_codec::event::*;
use eddy_wire::event::{DictCodec, Dictionary, ProtocolVersion, DEFAULT_COMPRESSION_LEVEL};

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let dir = corpus_dir(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        check(&data);
        count += 1;
    }
    count
}

#[test]
fn body_v2_corpus_replays() {
    assert!(replay("event_body_v2", fuzz_body_v2) >= 20);
}

#[test]
fn body_v3_corpus_replays() {
    assert!(replay("event_body_v3", fuzz_body_v3) >= 20);
}

fn sample_event(i: u64) -> Event {
    Event {
        client_seq: i,
        event_seq: i + 1,
        event_id: i.is_multiple_of(2).then_some(u128::from(i) << 64 | 0xabc),
        event_timestamp: 1_700_000_000_000 + i,
        event_type_major: 7,
        event_type_minor: i % 3,
        event_value: Bytes::from(format!(r#"{{"n":{i},"kind":"sample"}}"#)),
        iv: i.is_multiple_of(3).then_some([i as u8; 12]),
    }
}

fn sample_requests() -> Vec<EventRequest> {
    let key = AggregateKey::new(1, 2, 3);
    let mut writes = BTreeMap::new();
    writes.insert(
        key,
        SingleAggregateWrite {
            events: (1..4).map(sample_event).collect(),
            allow_create: true,
            expected_version: Some(0),
            enforce_client_idempotency: true,
        },
    );
    writes.insert(
        AggregateKey::new(1, 2, 4),
        SingleAggregateWrite {
            events: vec![sample_event(9)],
            ..SingleAggregateWrite::default()
        },
    );
    let mut deletes = BTreeMap::new();
    deletes.insert(
        key,
        SingleAggregateDelete {
            allow_recreate: true,
            allow_sequence_continuation: false,
            expected_version: Some(3),
        },
    );
    vec![
        EventRequest::AggregateDetails(AggregateDetailsRequest {
            correlation_id: Some(1),
            aggregate_key: key,
        }),
        EventRequest::Read(ReadRequest {
            correlation_id: Some(2),
            aggregate_key: key,
            filters: ReadFilters {
                to_aggregate_version: Some(10),
                include_event_types: Some(vec![1, 7]),
                min_server_timestamp: Some(5),
                ..ReadFilters::from_version(1)
            },
        }),
        EventRequest::Write(WriteRequest {
            correlation_id: Some(3),
            client_id: 0x42,
            user_id: Some(9),
            writes,
        }),
        EventRequest::TrimStart(TrimStartRequest {
            correlation_id: Some(4),
            aggregate_key: key,
            keep_from_aggregate_version: 3,
            client_id: 0x42,
            user_id: None,
        }),
        EventRequest::Delete(DeleteRequest {
            correlation_id: Some(5),
            client_id: 0x42,
            user_id: None,
            deletes,
        }),
        EventRequest::Watch(WatchRequest {
            correlation_id: Some(6),
            requested_latency_ms: Some(100),
            shard_id: None,
            orgs: None,
            aggregate_types: Some(BTreeSet::from([2])),
            aggregates: Some(BTreeSet::from([3, 4])),
            operation_types: Some(BTreeSet::from([1, 5])),
        }),
        EventRequest::ListOrgs(ListOrgsRequest {
            correlation_id: Some(7),
            shard_id: 0,
            cursor: None,
        }),
        EventRequest::ListAggregateTypes(ListAggregateTypesRequest {
            correlation_id: Some(8),
            shard_id: 1,
            org_id: Some(1),
            cursor: Some(1 << 32),
        }),
        EventRequest::ListAggregates(ListAggregatesRequest {
            correlation_id: Some(9),
            shard_id: 2,
            org_id: Some(1),
            aggregate_type_id: Some(2),
            cursor: Some(77),
        }),
        EventRequest::RegisterSchema(RegisterSchemaRequest {
            correlation_id: Some(10),
            client_id: 0x42,
            user_id: None,
            schema_key: SchemaKey {
                org_id: 1,
                aggregate_type_id: 2,
                event_type_major: 7,
                event_type_minor: 0,
            },
            schema_type: 0,
            schema: r#"{"type":"object","required":["n"]}"#.into(),
        }),
        EventRequest::Identify(IdentifyRequest {
            correlation_id: None,
            public_key: Some("MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA".into()),
            nonce: Some("1700000000000".into()),
            signature: Some("c2lnbmF0dXJl".into()),
            api_key: Some("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into()),
            known_dict_sha256: Some("ab".repeat(32)),
        }),
    ]
}

fn sample_responses() -> Vec<EventResponse> {
    vec![
        EventResponse::AggregateDetails(AggregateDetailsResponse {
            correlation_id: Some(1),
            min_aggregate_version: 1,
            max_aggregate_version: 5,
            max_event_seq: 12,
            is_deleted: false,
            allow_recreate: false,
            allow_sequence_continuation: false,
            last_server_timestamp: 1_700_000_000_123,
            last_client_id: 0x42,
            last_user_id: Some(9),
        }),
        EventResponse::Read(ReadResponse {
            correlation_id: Some(2),
            event_batches: vec![AggregateEventBatch {
                aggregate_version: 1,
                client_id: 0x42,
                user_id: None,
                server_timestamp: 1_700_000_000_123,
                events: (1..4).map(sample_event).collect(),
            }],
            next_aggregate_version: Some(2),
        }),
        EventResponse::Write(WriteResponse {
            correlation_id: Some(3),
            max_aggregate_version: Some(1),
        }),
        EventResponse::TrimStart(TrimStartResponse {
            correlation_id: Some(4),
        }),
        EventResponse::Delete(DeleteResponse {
            correlation_id: Some(5),
        }),
        EventResponse::ProtocolError(ProtocolErrorResponse {}),
        EventResponse::Error(
            ServerError::WriteOptimisticConcurrencyViolation {
                expected_version: 0,
                current_aggregate_version: 1,
                conflicts: Vec::new(),
            }
            .to_response(Some(6)),
        ),
        EventResponse::Watch(WatchResponse {
            events: vec![WatchResponseEvent {
                org_id: 1,
                aggregate_type_id: 2,
                aggregate_id: 3,
                operation: WatchOperation::Write.as_u8(),
                from_aggregate_version: Some(1),
                to_aggregate_version: Some(2),
                keep_from_aggregate_version: None,
            }],
        }),
        EventResponse::ListOrgs(ListOrgsResponse {
            correlation_id: Some(7),
            orgs: vec![OrgListItem { org_id: 1 }, OrgListItem { org_id: u128::MAX }],
            next_cursor: None,
        }),
        EventResponse::ListAggregateTypes(ListAggregateTypesResponse {
            correlation_id: Some(8),
            aggregate_types: vec![AggregateTypeListItem {
                org_id: 1,
                aggregate_type_id: 2,
            }],
            next_cursor: Some(3),
        }),
        EventResponse::ListAggregates(ListAggregatesResponse {
            correlation_id: Some(9),
            aggregates: vec![AggregateListItem {
                org_id: 1,
                aggregate_type_id: 2,
                aggregate_id: 3,
                event_batch_count: 4,
                max_aggregate_version: 4,
                min_aggregate_version: 1,
                ..AggregateListItem::default()
            }],
            next_cursor: None,
        }),
        EventResponse::RegisterSchema(RegisterSchemaResponse {
            correlation_id: Some(10),
        }),
        EventResponse::Identify(IdentifyResponse {
            correlation_id: None,
            client_id: Some(0x1234),
            access_level: Some(AccessLevel::ReadOnly),
            compression_dict_sha256: Some("ab".into()),
            compression_dict_bytes: Some(Bytes::from_static(&[1, 0xc8])),
        }),
    ]
}

fn write_file(target: &str, name: &str, data: &[u8]) {
    let dir = corpus_dir(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), data).unwrap();
}

#[test]
#[ignore = "writes the seed corpora; run with EDDY_WRITE_CORPUS=1"]
fn write_seed_corpora() {
    if std::env::var_os("EDDY_WRITE_CORPUS").is_none() {
        return;
    }
    let dict = Arc::new(Dictionary::builtin(DEFAULT_COMPRESSION_LEVEL).unwrap());
    let mut codec = DictCodec::new(dict);
    for (version, v, target) in [
        (ProtocolVersion::V2, "v2", "event_body_v2"),
        (ProtocolVersion::V3, "v3", "event_body_v3"),
    ] {
        for request in sample_requests() {
            let mut data = vec![request_selector(request.request_type())];
            request.encode_body(version, &mut data);
            write_file(
                target,
                &format!("req_{}", request.request_type().id()),
                &data,
            );
        }
        for response in sample_responses() {
            let mut data = vec![response_selector(response.response_type())];
            response.encode_body(version, &mut data);
            write_file(
                target,
                &format!("resp_{}", response.response_type().id()),
                &data,
            );
        }

        // Frames: one file per request, a compressed write, two frames back to back, a
        // truncated frame, a bad version, an oversized claim.
        let mut all = Vec::new();
        let mut requests = sample_requests();
        requests.rotate_right(1); // Identify first, as a connection would send it.
        for request in requests {
            let mut frame = Vec::new();
            encode_request(&request, version, &mut frame, None, 1 << 20).unwrap();
            write_file(
                "event_frame",
                &format!("{v}_req_{}", request.request_type().id()),
                &frame,
            );
            all.extend_from_slice(&frame);
        }
        write_file("event_frame", &format!("{v}_identify_then_all"), &all);
        let mut big_write = WriteRequest::default();
        big_write.writes.insert(
            AggregateKey::new(1, 2, 3),
            SingleAggregateWrite {
                events: eddy_wire::event::sample::SampleEvents::new(4)
                    .take(8)
                    .map(|v| Event {
                        event_type_major: 1,
                        event_value: Bytes::from(v),
                        ..Event::default()
                    })
                    .collect(),
                ..SingleAggregateWrite::default()
            },
        );
        let mut frame = Vec::new();
        let header = encode_request(
            &EventRequest::Write(big_write),
            version,
            &mut frame,
            Some(&mut codec),
            1 << 20,
        )
        .unwrap();
        assert_eq!(header.compression, eddy_wire::event::Compression::ZstdDict);
        write_file("event_frame", &format!("{v}_write_compressed"), &frame);
        write_file(
            "event_frame",
            &format!("{v}_truncated"),
            &frame[..frame.len() / 2],
        );
        // The compressed body alone, with its claimed length, for the decompressor target.
        let mut claim = frame[12..16].to_vec();
        claim.extend_from_slice(&frame[17..]);
        write_file("event_decompress", &format!("{v}_write_body"), &claim);
    }
    let mut bad_version = vec![9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    write_file("event_frame", "bad_version", &bad_version);
    bad_version[0] = 2;
    bad_version[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    write_file("event_frame", "oversized_claim", &bad_version);

    for (i, event) in eddy_wire::event::sample::SampleEvents::new(12)
        .take(4)
        .enumerate()
    {
        let compressed = codec.compress(&event).unwrap().to_vec();
        let mut data = u32::try_from(event.len()).unwrap().to_le_bytes().to_vec();
        data.extend_from_slice(&compressed);
        write_file("event_decompress", &format!("event_{i}"), &data);
    }
    // A bomb: 1 MiB of zeros claimed as 100 bytes.
    let bomb = codec.compress(&vec![0u8; 1 << 20]).unwrap().to_vec();
    let mut data = 100u32.to_le_bytes().to_vec();
    data.extend_from_slice(&bomb);
    write_file("event_decompress", "bomb", &data);
}
