//! Cross-check against the published Celeriant crates (`celeriant_msg`, `celeriant_wire`,
//! `celeriant_wal` pinned `=0.2.0`): for every message type in V2 and V3, their encoder →
//! our decoder and our encoder → their decoder, on random values; then whole frames
//! (fixed, variable, compressed, Identify) through their async frame functions, and the
//! dictionary SHA-256 format.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::event_strategies::*;
use bytes::Bytes;
use eddy_codec::event as ours;
use eddy_codec::event::EventBody;
use eddy_wire::event::{
    decode_request_frame, Decoded, DictCodec, Dictionary, FrameLimits, ProtocolVersion,
    RequestType, DEFAULT_COMPRESSION_LEVEL,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

use celeriant_msg::process_client_requests::ClientRequest;
use celeriant_msg::process_client_responses::ClientResponse;
use celeriant_msg::request::read_filters::ReadFilters as TFilters;
use celeriant_msg::request::requests as treq;
use celeriant_msg::response::aggregate_event_batch::AggregateEventBatch as TBatch;
use celeriant_msg::response::responses as tresp;
use celeriant_msg::response::watch_event::WatchResponseEvent as TWatchEvent;
use celeriant_wal::aggregate_key::AggregateKey as TKey;
use celeriant_wal::datablocks::datablock_aggregate_event::DatablockAggregateEvent as TEvent;
use celeriant_wal::schema_key::SchemaKey as TSchemaKey;
use celeriant_wire::network::wire_header::{deserialise_versioned, serialise_heap_versioned};

const VERSIONS: [ProtocolVersion; 2] = [ProtocolVersion::V2, ProtocolVersion::V3];
const MAX: u64 = 16 * 1024 * 1024;

/// Runs an in-memory future (their frame functions over `Vec<u8>` / `&[u8]` never pend).
fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("in-memory I/O never pends"),
    }
}

// ---- conversions: ours -> theirs ----

fn t_key(k: &ours::AggregateKey) -> TKey {
    TKey::new(k.org_id, k.aggregate_type_id, k.aggregate_id)
}

fn t_event(e: &ours::Event) -> TEvent {
    TEvent {
        client_seq: e.client_seq,
        event_seq: e.event_seq,
        event_id: e.event_id,
        event_timestamp: e.event_timestamp,
        event_type_major: e.event_type_major,
        event_type_minor: e.event_type_minor,
        event_value: Arc::new(e.event_value.to_vec()),
        iv: e.iv,
    }
}

fn t_filters(f: &ours::ReadFilters) -> TFilters {
    TFilters {
        from_aggregate_version: f.from_aggregate_version,
        to_aggregate_version: f.to_aggregate_version,
        include_event_types: f.include_event_types.clone(),
        exclude_client_id: f.exclude_client_id,
        include_client_id: f.include_client_id,
        exclude_user_id: f.exclude_user_id,
        include_user_id: f.include_user_id,
        min_server_timestamp: f.min_server_timestamp,
        max_server_timestamp: f.max_server_timestamp,
        min_client_seq: f.min_client_seq,
        max_client_seq: f.max_client_seq,
        min_event_timestamp: f.min_event_timestamp,
        max_event_timestamp: f.max_event_timestamp,
        min_event_seq: f.min_event_seq,
        max_event_seq: f.max_event_seq,
    }
}

fn t_set<T: Copy + std::hash::Hash + Eq>(
    s: Option<&std::collections::BTreeSet<T>>,
) -> Option<HashSet<T>> {
    s.map(|s| s.iter().copied().collect())
}

fn t_request(r: &ours::EventRequest) -> Option<ClientRequest> {
    Some(match r {
        ours::EventRequest::AggregateDetails(r) => {
            ClientRequest::AggregateDetails(treq::AggregateDetailsRequest {
                correlation_id: r.correlation_id,
                aggregate_key: t_key(&r.aggregate_key),
            })
        }
        ours::EventRequest::Read(r) => ClientRequest::Read(treq::ReadRequest {
            correlation_id: r.correlation_id,
            aggregate_key: t_key(&r.aggregate_key),
            filters: t_filters(&r.filters),
        }),
        ours::EventRequest::Write(r) => ClientRequest::Write(treq::WriteRequest {
            correlation_id: r.correlation_id,
            client_id: r.client_id,
            user_id: r.user_id,
            writes: r
                .writes
                .iter()
                .map(|(k, w)| {
                    (
                        t_key(k),
                        treq::SingleAggregateWrite {
                            events: w.events.iter().map(t_event).collect(),
                            allow_create: w.allow_create,
                            expected_version: w.expected_version,
                            enforce_client_idempotency: w.enforce_client_idempotency,
                        },
                    )
                })
                .collect(),
        }),
        ours::EventRequest::TrimStart(r) => ClientRequest::TrimStart(treq::TrimStartRequest {
            correlation_id: r.correlation_id,
            aggregate_key: t_key(&r.aggregate_key),
            keep_from_aggregate_version: r.keep_from_aggregate_version,
            client_id: r.client_id,
            user_id: r.user_id,
        }),
        ours::EventRequest::Delete(r) => ClientRequest::Delete(treq::DeleteRequest {
            correlation_id: r.correlation_id,
            client_id: r.client_id,
            user_id: r.user_id,
            deletes: r
                .deletes
                .iter()
                .map(|(k, d)| {
                    (
                        t_key(k),
                        treq::SingleAggregateDelete {
                            allow_recreate: d.allow_recreate,
                            allow_sequence_continuation: d.allow_sequence_continuation,
                            expected_version: d.expected_version,
                        },
                    )
                })
                .collect(),
        }),
        ours::EventRequest::Watch(r) => ClientRequest::Watch(treq::WatchRequest {
            correlation_id: r.correlation_id,
            requested_latency_ms: r.requested_latency_ms,
            shard_id: r.shard_id,
            orgs: t_set(r.orgs.as_ref()),
            aggregate_types: t_set(r.aggregate_types.as_ref()),
            aggregates: t_set(r.aggregates.as_ref()),
            operation_types: t_set(r.operation_types.as_ref()),
        }),
        ours::EventRequest::ListOrgs(r) => ClientRequest::ListOrgs(treq::ListOrgsRequest {
            correlation_id: r.correlation_id,
            shard_id: r.shard_id,
            cursor: r.cursor,
        }),
        ours::EventRequest::ListAggregateTypes(r) => {
            ClientRequest::ListAggregateTypes(treq::ListAggregateTypesRequest {
                correlation_id: r.correlation_id,
                shard_id: r.shard_id,
                org_id: r.org_id,
                cursor: r.cursor,
            })
        }
        ours::EventRequest::ListAggregates(r) => {
            ClientRequest::ListAggregates(treq::ListAggregatesRequest {
                correlation_id: r.correlation_id,
                shard_id: r.shard_id,
                org_id: r.org_id,
                aggregate_type_id: r.aggregate_type_id,
                cursor: r.cursor,
            })
        }
        ours::EventRequest::RegisterSchema(r) => {
            ClientRequest::RegisterSchema(treq::RegisterSchemaRequest {
                correlation_id: r.correlation_id,
                client_id: r.client_id,
                user_id: r.user_id,
                schema_key: TSchemaKey::new(
                    r.schema_key.org_id,
                    r.schema_key.aggregate_type_id,
                    r.schema_key.event_type_major,
                    r.schema_key.event_type_minor,
                ),
                schema_type: r.schema_type,
                schema: r.schema.clone(),
            })
        }
        // Identify is not part of `ClientRequest` upstream: see `t_identify`.
        ours::EventRequest::Identify(_) => return None,
    })
}

fn t_identify(r: &ours::IdentifyRequest) -> treq::IdentifyRequest {
    treq::IdentifyRequest {
        correlation_id: r.correlation_id,
        public_key: r.public_key.clone(),
        nonce: r.nonce.clone(),
        signature: r.signature.clone(),
        api_key: r.api_key.clone(),
        known_dict_sha256: r.known_dict_sha256.clone(),
    }
}

fn t_access(a: ours::AccessLevel) -> tresp::AccessLevel {
    match a {
        ours::AccessLevel::ReadWrite => tresp::AccessLevel::ReadWrite,
        ours::AccessLevel::ReadOnly => tresp::AccessLevel::ReadOnly,
    }
}

fn t_identify_response(r: &ours::IdentifyResponse) -> tresp::IdentifyResponse {
    tresp::IdentifyResponse {
        correlation_id: r.correlation_id,
        client_id: r.client_id,
        access_level: r.access_level.map(t_access),
        compression_dict_sha256: r.compression_dict_sha256.clone(),
        compression_dict_bytes: r.compression_dict_bytes.as_ref().map(|b| b.to_vec()),
    }
}

fn t_response(r: &ours::EventResponse) -> Option<ClientResponse> {
    Some(match r {
        ours::EventResponse::AggregateDetails(r) => {
            ClientResponse::AggregateDetails(tresp::AggregateDetailsResponse {
                correlation_id: r.correlation_id,
                min_aggregate_version: r.min_aggregate_version,
                max_aggregate_version: r.max_aggregate_version,
                max_event_seq: r.max_event_seq,
                is_deleted: r.is_deleted,
                allow_recreate: r.allow_recreate,
                allow_sequence_continuation: r.allow_sequence_continuation,
                last_server_timestamp: r.last_server_timestamp,
                last_client_id: r.last_client_id,
                last_user_id: r.last_user_id,
            })
        }
        ours::EventResponse::Read(r) => ClientResponse::Read(tresp::ReadResponse {
            correlation_id: r.correlation_id,
            event_batches: r
                .event_batches
                .iter()
                .map(|b| TBatch {
                    aggregate_version: b.aggregate_version,
                    client_id: b.client_id,
                    user_id: b.user_id,
                    server_timestamp: b.server_timestamp,
                    events: b.events.iter().map(t_event).collect(),
                })
                .collect(),
            next_aggregate_version: r.next_aggregate_version,
        }),
        ours::EventResponse::Write(r) => ClientResponse::Write(tresp::WriteResponse {
            correlation_id: r.correlation_id,
            max_aggregate_version: r.max_aggregate_version,
        }),
        ours::EventResponse::TrimStart(r) => ClientResponse::TrimStart(tresp::TrimStartResponse {
            correlation_id: r.correlation_id,
        }),
        ours::EventResponse::Delete(r) => ClientResponse::Delete(tresp::DeleteResponse {
            correlation_id: r.correlation_id,
        }),
        ours::EventResponse::ProtocolError(_) => {
            ClientResponse::ProtocolError(tresp::ProtocolErrorResponse {})
        }
        ours::EventResponse::Error(r) => ClientResponse::GenericError(tresp::ErrorResponse {
            correlation_id: r.correlation_id,
            error_code: r.error_code,
            error_message: r.error_message.clone(),
        }),
        ours::EventResponse::Watch(r) => ClientResponse::Watch(tresp::WatchResponse {
            events: r
                .events
                .iter()
                .map(|e| TWatchEvent {
                    org_id: e.org_id,
                    aggregate_type_id: e.aggregate_type_id,
                    aggregate_id: e.aggregate_id,
                    operation: e.operation,
                    from_aggregate_version: e.from_aggregate_version,
                    to_aggregate_version: e.to_aggregate_version,
                    keep_from_aggregate_version: e.keep_from_aggregate_version,
                })
                .collect(),
        }),
        ours::EventResponse::ListOrgs(r) => ClientResponse::ListOrgs(tresp::ListOrgsResponse {
            correlation_id: r.correlation_id,
            orgs: r
                .orgs
                .iter()
                .map(|o| tresp::OrgListItem { org_id: o.org_id })
                .collect(),
            next_cursor: r.next_cursor,
        }),
        ours::EventResponse::ListAggregateTypes(r) => {
            ClientResponse::ListAggregateTypes(tresp::ListAggregateTypesResponse {
                correlation_id: r.correlation_id,
                aggregate_types: r
                    .aggregate_types
                    .iter()
                    .map(|t| tresp::AggregateTypeListItem {
                        org_id: t.org_id,
                        aggregate_type_id: t.aggregate_type_id,
                    })
                    .collect(),
                next_cursor: r.next_cursor,
            })
        }
        ours::EventResponse::ListAggregates(r) => {
            ClientResponse::ListAggregates(tresp::ListAggregatesResponse {
                correlation_id: r.correlation_id,
                aggregates: r
                    .aggregates
                    .iter()
                    .map(|a| tresp::AggregateListItem {
                        is_deleted: a.is_deleted,
                        org_id: a.org_id,
                        aggregate_type_id: a.aggregate_type_id,
                        aggregate_id: a.aggregate_id,
                        event_batch_count: a.event_batch_count,
                        min_event_timestamp: a.min_event_timestamp,
                        max_event_timestamp: a.max_event_timestamp,
                        min_aggregate_version: a.min_aggregate_version,
                        max_aggregate_version: a.max_aggregate_version,
                        min_event_seq: a.min_event_seq,
                        max_event_seq: a.max_event_seq,
                        min_server_timestamp: a.min_server_timestamp,
                        max_server_timestamp: a.max_server_timestamp,
                        compressed_size: a.compressed_size,
                        uncompressed_size: a.uncompressed_size,
                    })
                    .collect(),
                next_cursor: r.next_cursor,
            })
        }
        ours::EventResponse::RegisterSchema(r) => {
            ClientResponse::RegisterSchema(tresp::RegisterSchemaResponse {
                correlation_id: r.correlation_id,
            })
        }
        // Identify is not part of `ClientResponse` upstream: see `t_identify_response`.
        ours::EventResponse::Identify(_) => return None,
        // 0.3.0's typed conflicts (versions 4/5) have no 0.2.0 counterpart: event_compat03.rs.
        ours::EventResponse::WriteConflict(_) | ours::EventResponse::DeleteConflict(_) => {
            return None
        }
    })
}

// ---- their encoder / decoder for a whole body ----

fn their_request_body(r: &ClientRequest, version: ProtocolVersion) -> Vec<u8> {
    r.serialize_body(version.as_u32()).unwrap()
}

/// Their body of a response (upstream has no `serialize_body` on responses).
fn their_response_body(r: &ClientResponse, version: ProtocolVersion) -> Vec<u8> {
    let v = version.as_u32();
    match r {
        ClientResponse::AggregateDetails(x) => serialise_heap_versioned(x, v),
        ClientResponse::Read(x) => serialise_heap_versioned(x, v),
        ClientResponse::Write(x) => serialise_heap_versioned(x, v),
        ClientResponse::TrimStart(x) => serialise_heap_versioned(x, v),
        ClientResponse::Delete(x) => serialise_heap_versioned(x, v),
        ClientResponse::ProtocolError(x) => serialise_heap_versioned(x, v),
        ClientResponse::GenericError(x) => serialise_heap_versioned(x, v),
        ClientResponse::Watch(x) => serialise_heap_versioned(x, v),
        ClientResponse::ListOrgs(x) => serialise_heap_versioned(x, v),
        ClientResponse::ListAggregateTypes(x) => serialise_heap_versioned(x, v),
        ClientResponse::ListAggregates(x) => serialise_heap_versioned(x, v),
        ClientResponse::RegisterSchema(x) => serialise_heap_versioned(x, v),
    }
    .unwrap()
}

/// Decodes `body` with their decoder for the request type, re-encodes it with their encoder:
/// the result must be our body up to map/set order, which our decoder checks by decoding it.
fn their_request_reencode(kind: RequestType, body: &[u8], version: ProtocolVersion) -> Vec<u8> {
    let v = version.as_u32();
    let theirs: ClientRequest = match kind {
        RequestType::AggregateDetails => {
            ClientRequest::AggregateDetails(deserialise_versioned(body, v).unwrap())
        }
        RequestType::Read => ClientRequest::Read(deserialise_versioned(body, v).unwrap()),
        RequestType::Write => ClientRequest::Write(deserialise_versioned(body, v).unwrap()),
        RequestType::TrimStart => ClientRequest::TrimStart(deserialise_versioned(body, v).unwrap()),
        RequestType::Delete => ClientRequest::Delete(deserialise_versioned(body, v).unwrap()),
        RequestType::Watch => ClientRequest::Watch(deserialise_versioned(body, v).unwrap()),
        RequestType::ListOrgs => ClientRequest::ListOrgs(deserialise_versioned(body, v).unwrap()),
        RequestType::ListAggregateTypes => {
            ClientRequest::ListAggregateTypes(deserialise_versioned(body, v).unwrap())
        }
        RequestType::ListAggregates => {
            ClientRequest::ListAggregates(deserialise_versioned(body, v).unwrap())
        }
        RequestType::RegisterSchema => {
            ClientRequest::RegisterSchema(deserialise_versioned(body, v).unwrap())
        }
        RequestType::Identify => {
            let x: treq::IdentifyRequest = deserialise_versioned(body, v).unwrap();
            return serialise_heap_versioned(&x, v).unwrap();
        }
    };
    their_request_body(&theirs, version)
}

fn their_response_reencode(response_type: u32, body: &[u8], version: ProtocolVersion) -> Vec<u8> {
    let v = version.as_u32();
    if response_type == 16 {
        let x: tresp::IdentifyResponse = deserialise_versioned(body, v).unwrap();
        return serialise_heap_versioned(&x, v).unwrap();
    }
    let theirs = ClientResponse::deserialize_body(response_type, body, v).unwrap();
    their_response_body(&theirs, version)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Their encoder, our decoder; and our encoder, their decoder (checked by re-encoding
    /// their decoded value and decoding that with ours), for every request in V2 and V3.
    #[test]
    fn requests_match_the_reference_codec(request in any_request()) {
        let kind = request.request_type();
        for version in VERSIONS {
            // Theirs -> ours.
            let their_body = match (&request, t_request(&request)) {
                (_, Some(theirs)) => their_request_body(&theirs, version),
                (ours::EventRequest::Identify(r), None) => serialise_heap_versioned(&t_identify(r), version.as_u32()).unwrap(),
                _ => unreachable!(),
            };
            prop_assert_eq!(&ours::EventRequest::decode_body(version, kind, &their_body).unwrap(), &request);
            // Ours -> theirs -> ours.
            let mut our_body = Vec::new();
            request.encode_body(version, &mut our_body);
            let back = their_request_reencode(kind, &our_body, version);
            prop_assert_eq!(&ours::EventRequest::decode_body(version, kind, &back).unwrap(), &request);
            // With at most one map entry the encodings are byte-identical.
            let single = match &request {
                ours::EventRequest::Write(w) => w.writes.len() <= 1,
                ours::EventRequest::Delete(d) => d.deletes.len() <= 1,
                ours::EventRequest::Watch(w) => [w.orgs.as_ref(), w.aggregate_types.as_ref(), w.aggregates.as_ref()]
                    .iter()
                    .all(|s| s.is_none_or(|s| s.len() <= 1))
                    && w.operation_types.as_ref().is_none_or(|s| s.len() <= 1),
                _ => true,
            };
            if single {
                prop_assert_eq!(&our_body, &their_body);
            }
        }
    }

    /// The same for every response.
    #[test]
    fn responses_match_the_reference_codec(response in any_response()) {
        let kind = response.response_type();
        for version in VERSIONS {
            let their_body = match (&response, t_response(&response)) {
                (_, Some(theirs)) => their_response_body(&theirs, version),
                (ours::EventResponse::Identify(r), None) => {
                    serialise_heap_versioned(&t_identify_response(r), version.as_u32()).unwrap()
                }
                _ => unreachable!(),
            };
            prop_assert_eq!(&ours::EventResponse::decode_body(version, kind, &their_body).unwrap(), &response);
            let mut our_body = Vec::new();
            response.encode_body(version, &mut our_body);
            let back = their_response_reencode(kind.id(), &our_body, version);
            prop_assert_eq!(&ours::EventResponse::decode_body(version, kind, &back).unwrap(), &response);
            // Byte-identical, except the V3 dictionary bytes (we emit bin, upstream an
            // integer array, as the spec recommends).
            let dict_differs = version == ProtocolVersion::V3
                && matches!(&response, ours::EventResponse::Identify(r) if r.compression_dict_bytes.is_some());
            if !dict_differs {
                prop_assert_eq!(&our_body, &their_body);
            }
        }
    }
}

fn our_dictionary() -> Arc<Dictionary> {
    Arc::new(Dictionary::builtin(DEFAULT_COMPRESSION_LEVEL).unwrap())
}

#[test]
fn their_request_frames_decode_with_our_frame_decoder() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for _ in 0..100 {
        let request = any_request().new_tree(&mut runner).unwrap().current();
        let Some(theirs) = t_request(&request) else {
            continue;
        };
        for version in VERSIONS {
            let mut frame = Vec::new();
            if block_on(ClientRequest::write_request(
                &mut frame,
                &theirs,
                MAX,
                version.as_u32(),
            ))
            .is_err()
            {
                // Their writer refuses fixed bodies above 1007 bytes; so does ours.
                let mut ours_frame = Vec::new();
                assert!(
                    ours::encode_request(&request, version, &mut ours_frame, None, MAX).is_err()
                );
                continue;
            }
            let Decoded::Frame(f) = decode_request_frame(&frame, FrameLimits::new(MAX)).unwrap()
            else {
                panic!("incomplete frame");
            };
            assert_eq!(f.len(), frame.len());
            assert_eq!(
                ours::decode_request(&f, None, FrameLimits::new(MAX)).unwrap(),
                request
            );
        }
    }
}

#[test]
fn our_response_frames_read_with_their_reader() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let dict = our_dictionary();
    let mut codec = DictCodec::new(dict.clone());
    let their_codec = celeriant_wire::codec::compression::DictCodec::new(dict.bytes(), 3).unwrap();
    for round in 0..100 {
        let response = any_response().new_tree(&mut runner).unwrap().current();
        for version in VERSIONS {
            // Uncompressed: their plain reader.
            let mut frame = Vec::new();
            if ours::encode_response(&response, version, &mut frame, None, MAX).is_err() {
                continue;
            }
            if let ours::EventResponse::Identify(r) = &response {
                let mut reader = &frame[..];
                let header = block_on(
                    celeriant_wire::network::wire_header::WireHeader::from_reader(&mut reader, MAX),
                )
                .unwrap();
                let theirs = block_on(celeriant_msg::process_identify::read_identify_response(
                    header,
                    &mut reader,
                ))
                .unwrap();
                assert_eq!(theirs.client_id, r.client_id);
                assert_eq!(theirs.access_level, r.access_level.map(t_access));
                assert_eq!(theirs.compression_dict_sha256, r.compression_dict_sha256);
                assert_eq!(
                    theirs.compression_dict_bytes,
                    r.compression_dict_bytes.as_ref().map(|b| b.to_vec())
                );
                continue;
            }
            let theirs = block_on(ClientResponse::read_response(&mut &frame[..], MAX)).unwrap();
            assert_eq!(theirs.response_type() as u32, response.response_type().id());
            assert_eq!(theirs.correlation_id(), response.correlation_id());
            let reencoded = their_response_body(&theirs, version);
            assert_eq!(
                ours::EventResponse::decode_body(version, response.response_type(), &reencoded)
                    .unwrap(),
                response
            );
            // Compressed (identified connection), read with their dictionary codec.
            if round % 4 == 0 && response.response_type().compressible() {
                let mut frame = Vec::new();
                ours::encode_response(&response, version, &mut frame, Some(&mut codec), MAX)
                    .unwrap();
                let mut reader = &frame[..];
                let header = block_on(
                    celeriant_wire::network::wire_header::WireHeader::from_reader(&mut reader, MAX),
                )
                .unwrap();
                let theirs: tresp::ReadResponse = match response {
                    ours::EventResponse::Read(_) => {
                        block_on(header.read_variable_size_with_codec(&mut reader, &their_codec))
                            .unwrap()
                    }
                    _ => continue,
                };
                assert_eq!(
                    theirs.event_batches.len(),
                    match &response {
                        ours::EventResponse::Read(r) => r.event_batches.len(),
                        _ => unreachable!(),
                    }
                );
            }
        }
    }
}

#[test]
fn compressed_frames_cross_both_ways() {
    let dict = our_dictionary();
    let mut codec = DictCodec::new(dict.clone());
    let their_codec = celeriant_wire::codec::compression::DictCodec::new(dict.bytes(), 3).unwrap();
    let events: Vec<ours::Event> = eddy_wire::event::sample::SampleEvents::new(11)
        .take(30)
        .enumerate()
        .map(|(i, v)| ours::Event {
            client_seq: i as u64 + 1,
            event_type_major: 3,
            event_value: Bytes::from(v),
            ..ours::Event::default()
        })
        .collect();
    let mut write = ours::WriteRequest {
        correlation_id: Some(8),
        client_id: 77,
        ..ours::WriteRequest::default()
    };
    write.writes.insert(
        ours::AggregateKey::new(1, 2, 3),
        ours::SingleAggregateWrite {
            events: events.clone(),
            allow_create: true,
            ..ours::SingleAggregateWrite::default()
        },
    );
    let request = ours::EventRequest::Write(write);
    for version in VERSIONS {
        // Theirs compresses a write with our dictionary; we decode it.
        let theirs = t_request(&request).unwrap();
        let ClientRequest::Write(their_write) = &theirs else {
            unreachable!()
        };
        let mut frame = Vec::new();
        block_on(
            celeriant_wire::network::wire_header::wire_header_write_variable_size_with_codec(
                &mut frame,
                their_write,
                3,
                celeriant_wal::compression_type::CompressionType::ZstdDict,
                MAX,
                version.as_u32(),
                &their_codec,
            ),
        )
        .unwrap();
        assert_eq!(frame[16], 1, "compressed");
        let Decoded::Frame(f) = decode_request_frame(&frame, FrameLimits::new(MAX)).unwrap() else {
            panic!("incomplete frame");
        };
        assert_eq!(
            ours::decode_request(&f, Some(&mut codec), FrameLimits::new(MAX)).unwrap(),
            request
        );

        // We compress a read response; their codec reads it.
        let response = ours::ReadResponse {
            correlation_id: Some(8),
            event_batches: vec![ours::AggregateEventBatch {
                aggregate_version: 1,
                client_id: 77,
                events: events.clone(),
                ..ours::AggregateEventBatch::default()
            }],
            next_aggregate_version: Some(2),
        };
        let mut frame = Vec::new();
        let header = ours::encode_response(
            &ours::EventResponse::Read(response.clone()),
            version,
            &mut frame,
            Some(&mut codec),
            MAX,
        )
        .unwrap();
        assert_eq!(header.compression, eddy_wire::event::Compression::ZstdDict);
        let mut reader = &frame[..];
        let their_header = block_on(
            celeriant_wire::network::wire_header::WireHeader::from_reader(&mut reader, MAX),
        )
        .unwrap();
        let theirs: tresp::ReadResponse =
            block_on(their_header.read_variable_size_with_codec(&mut reader, &their_codec))
                .unwrap();
        let reencoded = serialise_heap_versioned(&theirs, version.as_u32()).unwrap();
        assert_eq!(
            ours::ReadResponse::decode_body(version, &reencoded).unwrap(),
            response
        );
    }
}

#[test]
fn identify_frames_cross_both_ways() {
    let request = ours::IdentifyRequest {
        correlation_id: None,
        public_key: Some("MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA".into()),
        nonce: Some("1700000000000".into()),
        signature: Some("c2ln".into()),
        api_key: Some("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into()),
        known_dict_sha256: Some("ab".repeat(32)),
    };
    let dict = our_dictionary();
    for version in VERSIONS {
        let mut frame = Vec::new();
        block_on(celeriant_msg::process_identify::write_identify_request(
            &mut frame,
            &t_identify(&request),
            version.as_u32(),
        ))
        .unwrap();
        let Decoded::Frame(f) = decode_request_frame(&frame, FrameLimits::new(MAX)).unwrap() else {
            panic!("incomplete frame");
        };
        assert_eq!(f.kind, eddy_wire::event::RequestType::Identify);
        assert_eq!(
            ours::decode_request(&f, None, FrameLimits::new(MAX)).unwrap(),
            ours::EventRequest::Identify(request.clone())
        );

        let response = ours::IdentifyResponse {
            correlation_id: None,
            client_id: Some(0x181e_2f04_789b_f283_6b65_5b17_2c19_2032),
            access_level: Some(ours::AccessLevel::ReadOnly),
            compression_dict_sha256: Some(dict.sha256_hex().to_owned()),
            compression_dict_bytes: Some(Bytes::copy_from_slice(dict.bytes())),
        };
        let mut frame = Vec::new();
        ours::encode_response(
            &ours::EventResponse::Identify(response.clone()),
            version,
            &mut frame,
            None,
            MAX,
        )
        .unwrap();
        let mut reader = &frame[..];
        let header = block_on(
            celeriant_wire::network::wire_header::WireHeader::from_reader(&mut reader, MAX),
        )
        .unwrap();
        assert_eq!(header.message_type, 16);
        let theirs = block_on(celeriant_msg::process_identify::read_identify_response(
            header,
            &mut reader,
        ))
        .unwrap();
        assert_eq!(theirs.access_level, Some(tresp::AccessLevel::ReadOnly));
        assert_eq!(theirs.compression_dict_bytes.as_deref(), Some(dict.bytes()));
        assert_eq!(
            theirs.compression_dict_sha256.as_deref(),
            Some(dict.sha256_hex())
        );
        assert_eq!(theirs.client_id, response.client_id);
    }
}

#[test]
fn error_messages_satisfy_their_parsers() {
    let error = ours::ServerError::WriteNotLeader {
        leader_address: Some("10.1.2.3:10000".into()),
    }
    .to_response(Some(5));
    let theirs = tresp::ErrorResponse {
        correlation_id: error.correlation_id,
        error_code: error.error_code,
        error_message: error.error_message.clone(),
    };
    assert!(theirs.is_not_leader());
    assert_eq!(
        theirs.parse_leader_address().as_deref(),
        Some("10.1.2.3:10000")
    );
    // Every code we can build is one of theirs (same number).
    for &code in ours::ErrorCode::ALL {
        let name = code.name();
        let n = code.code();
        let known = matches!(
            n,
            1000..=1005 | 2000..=2013 | 2020..=2029 | 3000..=3006 | 4000..=4007 | 5000..=5002 | 6000..=6002
                // Added by 0.3.0 (event_compat03.rs checks them against its constants).
                | 2014 | 2015 | 4008
                | 7000..=7002 | 8000..=8005 | 9000..=9002 | 10001..=10007 | 11000
        );
        assert!(known, "{name} = {n}");
    }
    assert_eq!(
        ours::ErrorCode::WriteNotLeader.code(),
        celeriant_msg::error_codes::WRITE_NOT_LEADER
    );
    assert_eq!(
        ours::ErrorCode::ServerBusy.code(),
        celeriant_msg::error_codes::SERVER_BUSY
    );
    assert_eq!(
        ours::ErrorCode::IdentifyRequired.code(),
        celeriant_msg::error_codes::IDENTIFY_REQUIRED
    );
    assert_eq!(
        ours::ErrorCode::WatchTooManySubscribers.code(),
        celeriant_msg::error_codes::WATCH_TOO_MANY_SUBSCRIBERS
    );
    assert_eq!(
        ours::ErrorCode::ShardRoutingIncompatibleFilters.code(),
        celeriant_msg::error_codes::SHARD_ROUTING_INCOMPATIBLE_FILTERS
    );
}

#[test]
fn dictionary_sha_has_the_spec_format_and_their_dictionary_works_with_us() {
    let builtin = celeriant_wal::builtin_dict::BUILTIN_DICT_BYTES;
    let theirs = Dictionary::from_bytes(builtin.to_vec(), 3).unwrap();
    assert_eq!(
        theirs.sha256_hex(),
        "bc33cc0cea46e28ca70d190c627f62ac8653e315f154cd7bbfd35cb3c01308e8"
    );
    assert_eq!(builtin.len(), 14_027);
    let data = br#"{"event":"page_view","url":"/home","user_id":42,"ts":1700000000}"#;
    let compressed =
        celeriant_wire::codec::compression::compress_with_dict(data, 3, builtin).unwrap();
    let mut codec = DictCodec::new(Arc::new(theirs));
    let len = u32::try_from(data.len()).unwrap();
    assert_eq!(codec.decompress(&compressed, len, MAX).unwrap(), data);
    let ours_compressed = codec.compress(data).unwrap().to_vec();
    assert_eq!(
        celeriant_wire::codec::compression::decompress_with_dict(
            &ours_compressed,
            data.len(),
            builtin
        )
        .unwrap(),
        data
    );
}

#[test]
fn hash_maps_with_many_entries_decode_in_any_order() {
    // Their HashMap iteration order is arbitrary; ours is ascending. Decode theirs.
    let mut writes = HashMap::new();
    for i in 0..20u128 {
        writes.insert(
            TKey::new(i, i * 7, u128::MAX - i),
            treq::SingleAggregateWrite {
                events: vec![],
                allow_create: i % 2 == 0,
                expected_version: Some(i as u64),
                enforce_client_idempotency: false,
            },
        );
    }
    let theirs = treq::WriteRequest {
        correlation_id: Some(1),
        client_id: 2,
        user_id: None,
        writes,
    };
    for version in VERSIONS {
        let body = serialise_heap_versioned(&theirs, version.as_u32()).unwrap();
        let decoded = ours::WriteRequest::decode_body(version, &body).unwrap();
        assert_eq!(decoded.writes.len(), 20);
        for (k, w) in &decoded.writes {
            assert_eq!(w.expected_version, Some(k.org_id as u64));
            assert_eq!(w.allow_create, k.org_id % 2 == 0);
        }
    }
}
