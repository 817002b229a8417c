//! Proptest strategies for every event protocol message (shared by the event test files).
#![allow(dead_code)] // Each test file uses a different subset.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use eddy_codec::event::*;
use proptest::collection::{btree_map, btree_set, vec};
use proptest::option::of;
use proptest::prelude::*;

pub fn id() -> impl Strategy<Value = u128> {
    prop_oneof![any::<u128>(), (0u128..300), Just(0u128), Just(u128::MAX)]
}

pub fn num() -> impl Strategy<Value = u64> {
    prop_oneof![any::<u64>(), (0u64..300), Just(u64::MAX)]
}

pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![".{0,24}", "[a-z]{30,40}"]
}

pub fn payload() -> impl Strategy<Value = Bytes> {
    prop_oneof![vec(any::<u8>(), 0..48), vec(any::<u8>(), 250..300)].prop_map(Bytes::from)
}

pub fn key() -> impl Strategy<Value = AggregateKey> {
    (id(), id(), id()).prop_map(|(o, t, a)| AggregateKey::new(o, t, a))
}

pub fn schema_key() -> impl Strategy<Value = SchemaKey> {
    (id(), id(), num(), num()).prop_map(
        |(org_id, aggregate_type_id, event_type_major, event_type_minor)| SchemaKey {
            org_id,
            aggregate_type_id,
            event_type_major,
            event_type_minor,
        },
    )
}

pub fn event() -> impl Strategy<Value = Event> {
    (
        num(),
        num(),
        of(id()),
        num(),
        num(),
        num(),
        payload(),
        of(any::<[u8; 12]>()),
    )
        .prop_map(
            |(
                client_seq,
                event_seq,
                event_id,
                event_timestamp,
                event_type_major,
                event_type_minor,
                event_value,
                iv,
            )| Event {
                client_seq,
                event_seq,
                event_id,
                event_timestamp,
                event_type_major,
                event_type_minor,
                event_value,
                iv,
            },
        )
}

pub fn batch() -> impl Strategy<Value = AggregateEventBatch> {
    (num(), id(), of(id()), num(), vec(event(), 0..4)).prop_map(
        |(aggregate_version, client_id, user_id, server_timestamp, events)| AggregateEventBatch {
            aggregate_version,
            client_id,
            user_id,
            server_timestamp,
            events,
        },
    )
}

pub fn filters() -> impl Strategy<Value = ReadFilters> {
    (
        (
            num(),
            of(num()),
            of(vec(num(), 0..6)),
            of(id()),
            of(id()),
            of(id()),
            of(id()),
        ),
        (
            of(num()),
            of(num()),
            of(num()),
            of(num()),
            of(num()),
            of(num()),
            of(num()),
            of(num()),
        ),
    )
        .prop_map(
            |((a, b, c, d, e, f, g), (h, i, j, k, l, m, n, o))| ReadFilters {
                from_aggregate_version: a,
                to_aggregate_version: b,
                include_event_types: c,
                exclude_client_id: d,
                include_client_id: e,
                exclude_user_id: f,
                include_user_id: g,
                min_server_timestamp: h,
                max_server_timestamp: i,
                min_client_seq: j,
                max_client_seq: k,
                min_event_timestamp: l,
                max_event_timestamp: m,
                min_event_seq: n,
                max_event_seq: o,
            },
        )
}

pub fn single_write() -> impl Strategy<Value = SingleAggregateWrite> {
    (vec(event(), 0..4), any::<bool>(), of(num()), any::<bool>()).prop_map(
        |(events, allow_create, expected_version, enforce_client_idempotency)| {
            SingleAggregateWrite {
                events,
                allow_create,
                expected_version,
                enforce_client_idempotency,
            }
        },
    )
}

pub fn single_delete() -> impl Strategy<Value = SingleAggregateDelete> {
    (any::<bool>(), any::<bool>(), of(num())).prop_map(
        |(allow_recreate, allow_sequence_continuation, expected_version)| SingleAggregateDelete {
            allow_recreate,
            allow_sequence_continuation,
            expected_version,
        },
    )
}

fn set128() -> impl Strategy<Value = Option<BTreeSet<u128>>> {
    of(btree_set(id(), 0..5))
}

pub fn aggregate_details_request() -> impl Strategy<Value = AggregateDetailsRequest> {
    (of(id()), key()).prop_map(|(correlation_id, aggregate_key)| AggregateDetailsRequest {
        correlation_id,
        aggregate_key,
    })
}

pub fn read_request() -> impl Strategy<Value = ReadRequest> {
    (of(id()), key(), filters()).prop_map(|(correlation_id, aggregate_key, filters)| ReadRequest {
        correlation_id,
        aggregate_key,
        filters,
    })
}

pub fn write_request() -> impl Strategy<Value = WriteRequest> {
    (
        of(id()),
        id(),
        of(id()),
        btree_map(key(), single_write(), 0..4),
    )
        .prop_map(
            |(correlation_id, client_id, user_id, writes): (_, _, _, BTreeMap<_, _>)| {
                WriteRequest {
                    correlation_id,
                    client_id,
                    user_id,
                    writes,
                }
            },
        )
}

pub fn trim_start_request() -> impl Strategy<Value = TrimStartRequest> {
    (of(id()), key(), num(), id(), of(id())).prop_map(
        |(correlation_id, aggregate_key, keep_from_aggregate_version, client_id, user_id)| {
            TrimStartRequest {
                correlation_id,
                aggregate_key,
                keep_from_aggregate_version,
                client_id,
                user_id,
            }
        },
    )
}

pub fn delete_request() -> impl Strategy<Value = DeleteRequest> {
    (
        of(id()),
        id(),
        of(id()),
        btree_map(key(), single_delete(), 0..4),
    )
        .prop_map(
            |(correlation_id, client_id, user_id, deletes)| DeleteRequest {
                correlation_id,
                client_id,
                user_id,
                deletes,
            },
        )
}

pub fn watch_request() -> impl Strategy<Value = WatchRequest> {
    (
        of(id()),
        of(num()),
        of(num()),
        set128(),
        set128(),
        set128(),
        of(btree_set(any::<u8>(), 0..6)),
    )
        .prop_map(
            |(
                correlation_id,
                requested_latency_ms,
                shard_id,
                orgs,
                aggregate_types,
                aggregates,
                operation_types,
            )| {
                WatchRequest {
                    correlation_id,
                    requested_latency_ms,
                    shard_id,
                    orgs,
                    aggregate_types,
                    aggregates,
                    operation_types,
                }
            },
        )
}

pub fn list_orgs_request() -> impl Strategy<Value = ListOrgsRequest> {
    (of(id()), num(), of(num())).prop_map(|(correlation_id, shard_id, cursor)| ListOrgsRequest {
        correlation_id,
        shard_id,
        cursor,
    })
}

pub fn list_aggregate_types_request() -> impl Strategy<Value = ListAggregateTypesRequest> {
    (of(id()), num(), of(id()), of(num())).prop_map(|(correlation_id, shard_id, org_id, cursor)| {
        ListAggregateTypesRequest {
            correlation_id,
            shard_id,
            org_id,
            cursor,
        }
    })
}

pub fn list_aggregates_request() -> impl Strategy<Value = ListAggregatesRequest> {
    (of(id()), num(), of(id()), of(id()), of(num())).prop_map(
        |(correlation_id, shard_id, org_id, aggregate_type_id, cursor)| ListAggregatesRequest {
            correlation_id,
            shard_id,
            org_id,
            aggregate_type_id,
            cursor,
        },
    )
}

pub fn register_schema_request() -> impl Strategy<Value = RegisterSchemaRequest> {
    (of(id()), id(), of(id()), schema_key(), any::<u8>(), text()).prop_map(
        |(correlation_id, client_id, user_id, schema_key, schema_type, schema)| {
            RegisterSchemaRequest {
                correlation_id,
                client_id,
                user_id,
                schema_key,
                schema_type,
                schema,
            }
        },
    )
}

pub fn identify_request() -> impl Strategy<Value = IdentifyRequest> {
    (
        of(id()),
        of(text()),
        of(text()),
        of(text()),
        of(text()),
        of(text()),
    )
        .prop_map(
            |(correlation_id, public_key, nonce, signature, api_key, known_dict_sha256)| {
                IdentifyRequest {
                    correlation_id,
                    public_key,
                    nonce,
                    signature,
                    api_key,
                    known_dict_sha256,
                }
            },
        )
}

pub fn any_request() -> impl Strategy<Value = EventRequest> {
    prop_oneof![
        aggregate_details_request().prop_map(EventRequest::AggregateDetails),
        read_request().prop_map(EventRequest::Read),
        write_request().prop_map(EventRequest::Write),
        trim_start_request().prop_map(EventRequest::TrimStart),
        delete_request().prop_map(EventRequest::Delete),
        watch_request().prop_map(EventRequest::Watch),
        list_orgs_request().prop_map(EventRequest::ListOrgs),
        list_aggregate_types_request().prop_map(EventRequest::ListAggregateTypes),
        list_aggregates_request().prop_map(EventRequest::ListAggregates),
        register_schema_request().prop_map(EventRequest::RegisterSchema),
        identify_request().prop_map(EventRequest::Identify),
    ]
}

pub fn aggregate_details_response() -> impl Strategy<Value = AggregateDetailsResponse> {
    (
        of(id()),
        num(),
        num(),
        num(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        num(),
        id(),
        of(id()),
    )
        .prop_map(|(a, b, c, d, e, f, g, h, i, j)| AggregateDetailsResponse {
            correlation_id: a,
            min_aggregate_version: b,
            max_aggregate_version: c,
            max_event_seq: d,
            is_deleted: e,
            allow_recreate: f,
            allow_sequence_continuation: g,
            last_server_timestamp: h,
            last_client_id: i,
            last_user_id: j,
        })
}

pub fn read_response() -> impl Strategy<Value = ReadResponse> {
    (of(id()), vec(batch(), 0..4), of(num())).prop_map(
        |(correlation_id, event_batches, next_aggregate_version)| ReadResponse {
            correlation_id,
            event_batches,
            next_aggregate_version,
        },
    )
}

pub fn watch_event() -> impl Strategy<Value = WatchResponseEvent> {
    (
        id(),
        id(),
        id(),
        any::<u8>(),
        of(num()),
        of(num()),
        of(num()),
    )
        .prop_map(|(a, b, c, d, e, f, g)| WatchResponseEvent {
            org_id: a,
            aggregate_type_id: b,
            aggregate_id: c,
            operation: d,
            from_aggregate_version: e,
            to_aggregate_version: f,
            keep_from_aggregate_version: g,
        })
}

pub fn aggregate_list_item() -> impl Strategy<Value = AggregateListItem> {
    (
        (any::<bool>(), id(), id(), id(), num(), num(), num(), num()),
        (num(), num(), num(), num(), num(), num(), num()),
    )
        .prop_map(
            |((a, b, c, d, e, f, g, h), (i, j, k, l, m, n, o))| AggregateListItem {
                is_deleted: a,
                org_id: b,
                aggregate_type_id: c,
                aggregate_id: d,
                event_batch_count: e,
                min_event_timestamp: f,
                max_event_timestamp: g,
                min_aggregate_version: h,
                max_aggregate_version: i,
                min_event_seq: j,
                max_event_seq: k,
                min_server_timestamp: l,
                max_server_timestamp: m,
                compressed_size: n,
                uncompressed_size: o,
            },
        )
}

pub fn error_response() -> impl Strategy<Value = ErrorResponse> {
    (of(id()), any::<u32>(), text()).prop_map(|(correlation_id, error_code, error_message)| {
        ErrorResponse {
            correlation_id,
            error_code,
            error_message,
        }
    })
}

pub fn access_level() -> impl Strategy<Value = AccessLevel> {
    prop_oneof![Just(AccessLevel::ReadWrite), Just(AccessLevel::ReadOnly)]
}

pub fn identify_response() -> impl Strategy<Value = IdentifyResponse> {
    (
        of(id()),
        of(id()),
        of(access_level()),
        of(text()),
        of(payload()),
    )
        .prop_map(
            |(
                correlation_id,
                client_id,
                access_level,
                compression_dict_sha256,
                compression_dict_bytes,
            )| IdentifyResponse {
                correlation_id,
                client_id,
                access_level,
                compression_dict_sha256,
                compression_dict_bytes,
            },
        )
}

pub fn any_response() -> impl Strategy<Value = EventResponse> {
    prop_oneof![
        aggregate_details_response().prop_map(EventResponse::AggregateDetails),
        read_response().prop_map(EventResponse::Read),
        (of(id()), of(num())).prop_map(|(correlation_id, max_aggregate_version)| {
            EventResponse::Write(WriteResponse {
                correlation_id,
                max_aggregate_version,
            })
        }),
        of(id()).prop_map(
            |correlation_id| EventResponse::TrimStart(TrimStartResponse { correlation_id })
        ),
        of(id())
            .prop_map(|correlation_id| EventResponse::Delete(DeleteResponse { correlation_id })),
        Just(EventResponse::ProtocolError(ProtocolErrorResponse {})),
        error_response().prop_map(EventResponse::Error),
        vec(watch_event(), 0..5).prop_map(|events| EventResponse::Watch(WatchResponse { events })),
        (of(id()), vec(id(), 0..5), of(num())).prop_map(|(correlation_id, orgs, next_cursor)| {
            EventResponse::ListOrgs(ListOrgsResponse {
                correlation_id,
                orgs: orgs
                    .into_iter()
                    .map(|org_id| OrgListItem { org_id })
                    .collect(),
                next_cursor,
            })
        }),
        (of(id()), vec((id(), id()), 0..5), of(num())).prop_map(
            |(correlation_id, items, next_cursor)| {
                EventResponse::ListAggregateTypes(ListAggregateTypesResponse {
                    correlation_id,
                    aggregate_types: items
                        .into_iter()
                        .map(|(org_id, aggregate_type_id)| AggregateTypeListItem {
                            org_id,
                            aggregate_type_id,
                        })
                        .collect(),
                    next_cursor,
                })
            }
        ),
        (of(id()), vec(aggregate_list_item(), 0..4), of(num())).prop_map(
            |(correlation_id, aggregates, next_cursor)| {
                EventResponse::ListAggregates(ListAggregatesResponse {
                    correlation_id,
                    aggregates,
                    next_cursor,
                })
            }
        ),
        of(id()).prop_map(
            |correlation_id| EventResponse::RegisterSchema(RegisterSchemaResponse {
                correlation_id
            })
        ),
        identify_response().prop_map(EventResponse::Identify),
    ]
}
