//! The published `celeriant_client_tokio` **0.3.0** (renamed `celeriant_client_tokio_03`,
//! built beside 0.2.0) against real `eddy serve` processes: it speaks protocol version 4
//! (bincode; 5 is `MessagePack`), identifies on every connection, expects OCC conflicts as
//! typed responses (13/14) and keeps a dictionary cache. The scenario set of store.rs,
//! through the new client, and a three-member cluster through its pool; the 0.2.0 client and
//! raw V3 frames are checked on the same server to be answered as before.
//! docs/celeriant-client-revisions.md lists every difference and where eddy handles it.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::cluster_support::{start_cluster, within, Node};
use crate::event_support::{addr, start, Raw, RawFrame, ANSWER};
use c3::list_operations::{ListAggregatesIterator, ListOptions, ListOrgsIterator};
use c3::{
    json_event, CeleriantClient, CeleriantPool, ClientError, ClientIdentityConfig, DeleteError,
    PoolOptions, ReadAllIterator, SchemaError, ServerError, WatchConnection, WatchOptions,
    WriteError, WriteEventsOptions,
};
use celeriant_client_tokio_03 as c3;
use celeriant_msg_03::process_client_requests::ClientRequest;
use celeriant_msg_03::process_client_responses::ClientResponse;
use celeriant_msg_03::request::read_filters::ReadFilters;
use celeriant_msg_03::request::requests::{
    AggregateDetailsRequest, DeleteRequest, IdentifyRequest, ReadRequest, RegisterSchemaRequest,
    SingleAggregateDelete, SingleAggregateWrite, TrimStartRequest, WatchRequest, WriteRequest,
};
use celeriant_msg_03::response::responses::IdentifyResponse;
use celeriant_wal_03::aggregate_key::AggregateKey;
use celeriant_wal_03::datablocks::datablock_aggregate_event::DatablockAggregateEvent;
use celeriant_wal_03::schema_key::SchemaKey;
use serde_json::json;

const V4: u32 = 4;
const V5: u32 = 5;

fn event(ty: u64, value: &serde_json::Value, client_seq: u64) -> DatablockAggregateEvent {
    let mut e = json_event(ty, value).unwrap();
    e.client_seq = client_seq;
    e.event_timestamp = 1_700_000_000_000 + client_seq;
    e
}

fn occ(expected: Option<u64>) -> WriteEventsOptions {
    WriteEventsOptions {
        expected_version: expected,
        ..WriteEventsOptions::default()
    }
}

fn read(key: &AggregateKey, from: u64) -> ReadRequest {
    ReadRequest {
        correlation_id: None,
        aggregate_key: key.clone(),
        filters: ReadFilters::new(from),
    }
}

fn details(key: &AggregateKey) -> AggregateDetailsRequest {
    AggregateDetailsRequest {
        correlation_id: None,
        aggregate_key: key.clone(),
    }
}

fn unsigned() -> ClientIdentityConfig {
    ClientIdentityConfig {
        public_key: None,
        private_key: None,
        api_key: None,
    }
}

async fn client(eddy: &eddy_tests::Eddy) -> CeleriantClient {
    CeleriantClient::connect(&addr(eddy))
        .await
        .expect("connect")
        .with_timeout(ANSWER)
}

/// The `(key ids, expected, current)` of a typed write conflict, or panics.
/// Conflicts as `(key ids, expected, current)`.
type Named = Vec<((u128, u128, u128), u64, u64)>;

fn write_conflicts(e: &ClientError) -> Named {
    match e {
        ClientError::Server(ServerError::Write {
            kind: WriteError::OptimisticConcurrencyViolation { conflicts, .. },
            ..
        }) => conflicts
            .iter()
            .map(|c| {
                (
                    (c.key.org_id, c.key.aggregate_type_id, c.key.aggregate_id),
                    c.expected,
                    c.current,
                )
            })
            .collect(),
        other => panic!("expected a typed write conflict, got {other:?}"),
    }
}

fn ids(k: &AggregateKey) -> (u128, u128, u128) {
    (k.org_id, k.aggregate_type_id, k.aggregate_id)
}

/// A V4/V5 Identify frame body (their encoder).
fn identify_body(known: Option<String>, version: u32) -> Vec<u8> {
    celeriant_wire_03::network::wire_header::serialise_heap_versioned(
        &IdentifyRequest {
            correlation_id: Some(77),
            public_key: None,
            nonce: None,
            signature: None,
            api_key: None,
            known_dict_sha256: known,
        },
        version,
    )
    .unwrap()
}

/// A response frame decoded by 0.3.0's decoder (decompressing with `dict`).
fn decode(f: &RawFrame, dict: Option<&[u8]>) -> ClientResponse {
    let body = if f.compression == 1 {
        celeriant_wire_03::codec::compression::decompress_with_dict(
            &f.body,
            f.uncompressed_length as usize,
            dict.expect("a dictionary"),
        )
        .expect("decompress")
    } else {
        f.body.clone()
    };
    ClientResponse::deserialize_body(f.message_type, &body, f.version).expect("0.3.0 decodes it")
}

// ---- 1. connect and identify ----------------------------------------------------------

#[tokio::test]
async fn connect_identify_and_the_dictionary_handshake() {
    let eddy = start(&["--num-shards", "2"]);
    // The client identifies by itself before its first request (0.3.0 probes the protocol).
    let mut conn = client(&eddy).await;
    let key = AggregateKey::new(1, 2, 3);
    let e = conn.aggregate_details(details(&key)).await.unwrap_err();
    assert!(format!("{e:?}").contains("AggregateNotExists"), "{e:?}");
    // An explicit unsigned Identify: no client id, no access level (no keys configured).
    let mut again = client(&eddy).await;
    assert_eq!(again.identify(&unsigned()).await.unwrap(), None);

    // On the wire: V4 in, V4 out; the 0.3.0 client advertises celeriant's built-in sha,
    // which is not eddy's dictionary, so the bytes are shipped, under 0.3.0's 1 MiB ceiling.
    for version in [V4, V5] {
        let builtin =
            celeriant_crypto::sha256_hex(celeriant_wal_03::builtin_dict::BUILTIN_DICT_BYTES);
        let mut raw = Raw::connect(&eddy).await;
        raw.send(version, 14, &identify_body(Some(builtin), version))
            .await;
        let f = raw.recv().await.expect("identify answer");
        assert_eq!((f.version, f.message_type, f.compression), (version, 16, 0));
        let r: IdentifyResponse =
            celeriant_wire_03::network::wire_header::deserialise_versioned(&f.body, version)
                .unwrap();
        assert_eq!(r.correlation_id, Some(77));
        let sha = r.compression_dict_sha256.expect("sha");
        let bytes = r.compression_dict_bytes.expect("bytes shipped");
        assert_eq!(celeriant_crypto::sha256_hex(&bytes), sha);
        assert!(
            bytes.len() <= celeriant_wal_03::builtin_dict::DICTIONARY_CEILING_BYTES,
            "{} bytes",
            bytes.len()
        );
        // A client that holds eddy's dictionary gets the sha alone.
        let mut raw = Raw::connect(&eddy).await;
        raw.send(version, 14, &identify_body(Some(sha.clone()), version))
            .await;
        let f = raw.recv().await.unwrap();
        let r: IdentifyResponse =
            celeriant_wire_03::network::wire_header::deserialise_versioned(&f.body, version)
                .unwrap();
        assert_eq!(r.compression_dict_sha256.as_deref(), Some(sha.as_str()));
        assert!(r.compression_dict_bytes.is_none());
    }
    // Versions 6 and up are still refused: the connection closes without an answer.
    let mut raw = Raw::connect(&eddy).await;
    raw.send(6, 14, &identify_body(None, V4)).await;
    raw.expect_closed().await;
}

// ---- 2. OCC: typed conflicts -----------------------------------------------------------

#[tokio::test]
async fn occ_conflicts_are_typed_and_keep_the_connection() {
    let eddy = start(&["--num-shards", "2"]);
    let mut conn = client(&eddy).await;
    let key = AggregateKey::new(10, 20, 31);
    let payload = json!({"order": 1});
    let written = conn
        .write_events_with(key.clone(), vec![event(7, &payload, 5)], 42, occ(Some(0)))
        .await
        .unwrap();
    assert_eq!(written.max_aggregate_version, Some(1));
    let err = conn
        .write_events_with(key.clone(), vec![event(7, &payload, 6)], 42, occ(Some(0)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Server(ServerError::Write {
                kind: WriteError::OptimisticConcurrencyViolation {
                    expected_version: Some(0),
                    current_aggregate_version: Some(1),
                    ..
                },
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(write_conflicts(&err), vec![(ids(&key), 0, 1)]);
    // The connection is still good (a protocol error would have retired it).
    let written = conn
        .write_events_with(key.clone(), vec![event(7, &payload, 7)], 42, occ(Some(1)))
        .await
        .unwrap();
    assert_eq!(written.max_aggregate_version, Some(2));

    // A delete with a stale guard: the typed delete conflict.
    let err = conn
        .delete(DeleteRequest {
            correlation_id: None,
            client_id: 42,
            user_id: None,
            deletes: HashMap::from([(
                key.clone(),
                SingleAggregateDelete {
                    allow_recreate: true,
                    allow_sequence_continuation: false,
                    expected_version: Some(1),
                },
            )]),
        })
        .await
        .unwrap_err();
    match &err {
        ClientError::Server(ServerError::Delete {
            kind:
                DeleteError::OptimisticConcurrencyViolation {
                    expected_version: Some(1),
                    current_aggregate_version: Some(2),
                    conflicts,
                },
            ..
        }) => {
            assert_eq!(conflicts.len(), 1);
            assert_eq!(ids(&conflicts[0].key), ids(&key));
        }
        other => panic!("expected a typed delete conflict, got {other:?}"),
    }
    let now = conn.aggregate_details(details(&key)).await.unwrap();
    assert_eq!((now.max_aggregate_version, now.is_deleted), (2, false));

    // On the wire: type 13 in V4 and V5, the ErrorResponse 2003 for V2 and V3, unchanged.
    let stale = |version: u32| {
        ClientRequest::Write(WriteRequest {
            correlation_id: Some(9),
            client_id: 42,
            user_id: None,
            writes: HashMap::from([(
                key.clone(),
                SingleAggregateWrite {
                    events: vec![event(7, &payload, 100 + u64::from(version))],
                    allow_create: true,
                    expected_version: Some(0),
                    enforce_client_idempotency: false,
                },
            )]),
        })
        // Versions 2/4 share bodies, as do 3/5 (0.3.0's encoder knows only 4 and 5).
        .serialize_body(if version.is_multiple_of(2) { V4 } else { V5 })
        .unwrap()
    };
    for (version, want) in [(2u32, 7u32), (3, 7), (V4, 13), (V5, 13)] {
        let mut raw = Raw::connect(&eddy).await;
        raw.send(version, 3, &stale(version)).await;
        let frame = raw.recv().await.expect("an answer");
        assert_eq!(
            (frame.version, frame.message_type),
            (version, want),
            "v{version}"
        );
        if want == 13 {
            match decode(&frame, None) {
                ClientResponse::WriteConflict(conflict) => {
                    assert_eq!(conflict.correlation_id, Some(9));
                    assert_eq!(conflict.conflicts.len(), 1);
                    assert_eq!(
                        (
                            conflict.conflicts[0].expected,
                            conflict.conflicts[0].current
                        ),
                        (0, 2)
                    );
                }
                other => panic!("v{version}: {other:?}"),
            }
        } else {
            let refused: celeriant_msg::response::responses::ErrorResponse =
                celeriant_wire::network::wire_header::deserialise_versioned(&frame.body, version)
                    .unwrap();
            assert_eq!(refused.error_code, 2003);
            assert_eq!(
                refused.error_message,
                r#"{"expected_version":0,"current_aggregate_version":2}"#
            );
        }
    }
}

// ---- 3. idempotent writes --------------------------------------------------------------

#[tokio::test]
async fn idempotent_writes() {
    let eddy = start(&["--num-shards", "1"]);
    let mut conn = client(&eddy).await;
    let key = AggregateKey::new(1, 1, 1);
    let enforce = WriteEventsOptions {
        enforce_client_idempotency: true,
        ..WriteEventsOptions::default()
    };
    let one = |seq| vec![event(3, &json!({"seq": seq}), seq)];
    conn.write_events_with(key.clone(), one(1), 7, enforce.clone())
        .await
        .unwrap();
    let e = conn
        .write_events_with(key.clone(), one(1), 7, enforce.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Server(ServerError::Write {
                kind: WriteError::ClientIdempotencyViolation {
                    last_client_seq: Some(1),
                    attempted_client_seq: Some(1)
                },
                ..
            })
        ),
        "{e:?}"
    );
    let r = conn
        .write_events_with(key.clone(), one(1), 8, enforce.clone())
        .await
        .unwrap();
    assert_eq!(r.max_aggregate_version, Some(2));
    let r = conn
        .write_events_with(key.clone(), one(2), 7, enforce)
        .await
        .unwrap();
    assert_eq!(r.max_aggregate_version, Some(3));
    assert_eq!(
        conn.read(read(&key, 1)).await.unwrap().event_batches.len(),
        3
    );
}

// ---- 4. multi-aggregate atomic writes ----------------------------------------------------

#[tokio::test]
async fn multi_aggregate_writes_are_atomic() {
    let eddy = start(&["--num-shards", "1"]);
    let mut conn = client(&eddy).await;
    let a = AggregateKey::new(1, 1, 50);
    let b = AggregateKey::new(1, 1, 51);
    let create = |expected| WriteEventsOptions {
        allow_create: true,
        expected_version: expected,
        enforce_client_idempotency: false,
    };
    // 0.3.0's WriteBatch: one stale guard refuses both, with the conflict named.
    let e = conn
        .write_batch(7)
        .append_with(a.clone(), vec![event(3, &json!({}), 1)], create(Some(0)))
        .append_with(b.clone(), vec![event(3, &json!({}), 1)], create(Some(4)))
        .send()
        .await
        .unwrap_err();
    assert_eq!(write_conflicts(&e), vec![(ids(&b), 4, 0)]);
    for k in [&a, &b] {
        assert!(conn.read(read(k, 1)).await.is_err(), "nothing was written");
    }
    let r = conn
        .write_batch(7)
        .append_with(a.clone(), vec![event(3, &json!({}), 1)], create(Some(0)))
        .append_with(b.clone(), vec![event(3, &json!({}), 1)], create(Some(0)))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.max_aggregate_version, None,
        "two aggregates: no single version"
    );
    for k in [&a, &b] {
        assert_eq!(conn.read(read(k, 1)).await.unwrap().event_batches.len(), 1);
    }
    // Two stale guards: the conflict response names both (in the request's part order).
    let e = conn
        .write_batch(7)
        .append_with(a.clone(), vec![event(3, &json!({}), 2)], occ(Some(5)))
        .append_with(b.clone(), vec![event(3, &json!({}), 2)], occ(Some(7)))
        .send()
        .await
        .unwrap_err();
    let mut named = write_conflicts(&e);
    named.sort_unstable();
    assert_eq!(named, vec![(ids(&a), 5, 1), (ids(&b), 7, 1)]);
    // A duplicate key is refused by the client itself, before sending.
    let e = conn
        .write_batch(7)
        .append(a.clone(), vec![event(3, &json!({}), 2)])
        .append(a.clone(), vec![event(3, &json!({}), 3)])
        .send()
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::ProtocolError), "{e:?}");
}

// ---- 5. guards ------------------------------------------------------------------------------

#[tokio::test]
async fn guards_are_decided_with_the_appends() {
    let eddy = start(&["--num-shards", "1"]);
    let mut conn = client(&eddy).await;
    let head = AggregateKey::new(2, 2, 1);
    let log = AggregateKey::new(2, 2, 2);
    let fresh = AggregateKey::new(2, 2, 3);
    conn.write_events(head.clone(), vec![event(1, &json!({}), 1)], 7)
        .await
        .unwrap();
    // Guards of head at 1 and of a never-written aggregate at 0: the append commits alone.
    let r = conn
        .write_batch(7)
        .guard(head.clone(), 1)
        .guard(fresh.clone(), 0)
        .append(log.clone(), vec![event(1, &json!({"n": 1}), 1)])
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.max_aggregate_version,
        Some(1),
        "only the append is a version"
    );
    let d = conn.aggregate_details(details(&head)).await.unwrap();
    assert_eq!(d.max_aggregate_version, 1, "a guard adds no event");
    assert!(conn.aggregate_details(details(&fresh)).await.is_err());
    // head moves on; the stale guard refuses the append and is the conflict named.
    conn.write_events(head.clone(), vec![event(1, &json!({}), 2)], 7)
        .await
        .unwrap();
    let e = conn
        .write_batch(7)
        .guard(head.clone(), 1)
        .append(log.clone(), vec![event(1, &json!({"n": 2}), 2)])
        .send()
        .await
        .unwrap_err();
    assert_eq!(write_conflicts(&e), vec![(ids(&head), 1, 2)]);
    assert_eq!(
        conn.read(read(&log, 1)).await.unwrap().event_batches.len(),
        1
    );
    // Guards alone write nothing and are refused as malformed (2014).
    let e = conn
        .write_batch(7)
        .guard(head.clone(), 2)
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Server(ServerError::Write {
                kind: WriteError::MalformedGuardEntry,
                ..
            })
        ),
        "{e:?}"
    );
    // A 0.2.0 client sending an entry without events is told 2000, as before.
    let mut old = celeriant_client_tokio::CeleriantClient::connect(&addr(&eddy))
        .await
        .unwrap()
        .with_timeout(ANSWER);
    let e = old
        .write_events_with(
            celeriant_wal::aggregate_key::AggregateKey::new(2, 2, 1),
            Vec::new(),
            7,
            celeriant_client_tokio::WriteEventsOptions {
                expected_version: Some(2),
                ..celeriant_client_tokio::WriteEventsOptions::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            celeriant_client_tokio::ClientError::Server(
                celeriant_client_tokio::ServerError::Write {
                    kind: celeriant_client_tokio::WriteError::EmptyEventsList,
                    ..
                }
            )
        ),
        "{e:?}"
    );
}

// ---- 6. reads, details, trim, delete, lists -------------------------------------------------

#[tokio::test]
async fn reads_details_trim_delete_recreate_and_lists() {
    let eddy = start(&["--num-shards", "2"]);
    let mut conn = client(&eddy).await;
    let key = AggregateKey::new(5, 6, 7);
    for i in 0..5u64 {
        conn.write_events(
            key.clone(),
            vec![
                event(7, &json!({"i": i}), 10 + i),
                event(8, &json!({}), 20 + i),
            ],
            42,
        )
        .await
        .unwrap();
    }
    let page = conn.read(read(&key, 2)).await.unwrap();
    assert_eq!(page.event_batches.len(), 4);
    assert_eq!(page.event_batches[0].aggregate_version, 2);
    assert_eq!(page.event_batches[0].events[0].event_seq, 3);
    let all = ReadAllIterator::new(&mut conn, key.clone(), None)
        .collect()
        .await
        .unwrap();
    assert_eq!(all.len(), 5);
    conn.trim_start(TrimStartRequest {
        correlation_id: None,
        aggregate_key: key.clone(),
        keep_from_aggregate_version: 3,
        client_id: 42,
        user_id: None,
    })
    .await
    .unwrap();
    let d = conn.aggregate_details(details(&key)).await.unwrap();
    assert_eq!((d.min_aggregate_version, d.max_aggregate_version), (3, 5));
    let e = conn.read(read(&key, 1)).await.unwrap_err();
    assert!(format!("{e:?}").contains("UnavailableBatchIndex"), "{e:?}");

    for org in [100u128, 101] {
        conn.write_events(
            AggregateKey::new(org, 1, 1),
            vec![event(1, &json!({}), 1)],
            1,
        )
        .await
        .unwrap();
    }
    let orgs: HashSet<u128> = ListOrgsIterator::new(&mut conn, ListOptions::default())
        .unwrap()
        .collect()
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.org_id)
        .collect();
    assert!(orgs.is_superset(&HashSet::from([5, 100, 101])), "{orgs:?}");
    let aggs = ListAggregatesIterator::new(&mut conn, Some(5), None, ListOptions::default())
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(aggs.len(), 1);

    conn.delete(DeleteRequest {
        correlation_id: None,
        client_id: 42,
        user_id: None,
        deletes: HashMap::from([(
            key.clone(),
            SingleAggregateDelete {
                allow_recreate: true,
                allow_sequence_continuation: true,
                expected_version: Some(5),
            },
        )]),
    })
    .await
    .unwrap();
    let d = conn.aggregate_details(details(&key)).await.unwrap();
    assert!(d.is_deleted);
    let r = conn
        .write_events_with(
            key.clone(),
            vec![event(7, &json!({}), 99)],
            42,
            WriteEventsOptions {
                allow_create: true,
                ..WriteEventsOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(r.max_aggregate_version, Some(6), "continued numbering");
}

// ---- 7. watch -----------------------------------------------------------------------------

fn watch_of(aggregate_id: u128) -> WatchRequest {
    WatchRequest {
        correlation_id: None,
        requested_latency_ms: None,
        shard_id: None,
        orgs: None,
        aggregate_types: None,
        aggregates: Some(HashSet::from([aggregate_id])),
        operation_types: None,
    }
}

#[tokio::test]
async fn watch_sees_writes_from_another_connection() {
    let eddy = start(&["--num-shards", "2"]);
    let watched = AggregateKey::new(1, 2, 11);
    let other = AggregateKey::new(1, 2, 13);
    let mut w = WatchConnection::connect(
        &addr(&eddy),
        watch_of(watched.aggregate_id),
        WatchOptions {
            timeout: Some(ANSWER),
            ..WatchOptions::default()
        },
    )
    .await
    .unwrap();
    let mut conn = client(&eddy).await;
    conn.write_events(other.clone(), vec![event(1, &json!({}), 1)], 1)
        .await
        .unwrap();
    for seq in 1..=2 {
        conn.write_events(watched.clone(), vec![event(1, &json!({}), seq)], 1)
            .await
            .unwrap();
    }
    // The creation (operation 5) and the two writes (operation 1), of the watched aggregate only.
    let mut ops = Vec::new();
    while ops.len() < 3 {
        let r = w.next_timeout(ANSWER).await.unwrap().expect("a push");
        for e in r.events {
            assert_eq!(e.aggregate_id, watched.aggregate_id, "filtered");
            ops.push((
                e.operation,
                e.from_aggregate_version,
                e.to_aggregate_version,
            ));
        }
    }
    ops.sort_unstable();
    assert_eq!(
        ops,
        [
            (1, Some(1), Some(1)),
            (1, Some(2), Some(2)),
            (5, None, None)
        ]
    );
}

// ---- 8. schemas ---------------------------------------------------------------------------

fn registration(schema_type: u8, schema: String, major: u64) -> RegisterSchemaRequest {
    RegisterSchemaRequest {
        correlation_id: None,
        schema_key: SchemaKey::new(1, 2, major, 0),
        schema_type,
        schema,
        client_id: 1,
        user_id: None,
    }
}

#[tokio::test]
async fn schemas_validate_writes() {
    let eddy = start(&["--num-shards", "1"]);
    let mut conn = client(&eddy).await;
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"amount": {"type": "integer", "minimum": 0}},
        "required": ["amount"]
    })
    .to_string();
    conn.register_schema(registration(0, schema.clone(), 4))
        .await
        .unwrap();
    let e = conn
        .register_schema(registration(0, schema, 4))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Server(ServerError::Schema {
                kind: SchemaError::AlreadyExists,
                ..
            })
        ),
        "{e:?}"
    );
    // Events of type (4, 0) of org 1, aggregate type 2 must match it.
    let key = AggregateKey::new(1, 2, 9);
    conn.write_events(key.clone(), vec![event(4, &json!({"amount": 5}), 1)], 1)
        .await
        .unwrap();
    let e = conn
        .write_events(key.clone(), vec![event(4, &json!({"amount": -1}), 2)], 1)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Server(ServerError::Schema {
                kind: SchemaError::ValidationFailed,
                ..
            })
        ),
        "{e:?}"
    );
    let d = conn.aggregate_details(details(&key)).await.unwrap();
    assert_eq!(
        d.max_aggregate_version, 1,
        "the refused event was not written"
    );
}

// ---- 9. compression with the dictionary -----------------------------------------------------

#[tokio::test]
async fn compression_both_ways_with_the_shipped_dictionary() {
    let eddy = start(&["--num-shards", "1"]);
    // The client learns eddy's dictionary at Identify, compresses a large write with it and
    // reads the compressed response transparently.
    let mut conn = client(&eddy).await;
    conn.identify(&unsigned()).await.unwrap();
    let key = AggregateKey::new(3, 3, 3);
    let big = json!({"text": "lorem ipsum dolor sit amet ".repeat(200)});
    conn.write_events(key.clone(), vec![event(1, &big, 1)], 1)
        .await
        .unwrap();
    let page = conn.read(read(&key, 1)).await.unwrap();
    assert_eq!(
        c3::from_json::<serde_json::Value>(&page.event_batches[0].events[0]).unwrap(),
        big
    );
    // On the wire (V4): the read response comes back compressed with that dictionary.
    let mut raw = Raw::connect(&eddy).await;
    raw.send(V4, 14, &identify_body(None, V4)).await;
    let f = raw.recv().await.unwrap();
    let r: IdentifyResponse =
        celeriant_wire_03::network::wire_header::deserialise_versioned(&f.body, V4).unwrap();
    let dict = r.compression_dict_bytes.expect("shipped");
    let body = ClientRequest::Read(read(&key, 1))
        .serialize_body(V4)
        .unwrap();
    raw.send(V4, 2, &body).await;
    let f = raw.recv().await.unwrap();
    assert_eq!((f.version, f.message_type, f.compression), (V4, 2, 1));
    assert!(f.compressed_length < f.uncompressed_length);
    match decode(&f, Some(&dict)) {
        ClientResponse::Read(r) => assert_eq!(r.event_batches.len(), 1),
        other => panic!("{other:?}"),
    }
}

// ---- 10. the pool on one node --------------------------------------------------------------

#[tokio::test]
async fn the_pool_on_a_single_node() {
    let eddy = start(&["--num-shards", "4"]);
    let pool = std::sync::Arc::new(CeleriantPool::new(
        PoolOptions::new(addr(&eddy))
            .with_max_connections(4)
            .with_request_timeout(ANSWER),
    ));
    let mut tasks = Vec::new();
    for writer in 0..8u128 {
        let pool = std::sync::Arc::clone(&pool);
        tasks.push(tokio::spawn(async move {
            let key = AggregateKey::new(9, 9, writer);
            for seq in 1..=5u64 {
                let r = pool
                    .write_events_with(
                        key.clone(),
                        vec![event(1, &json!({"w": writer as u64, "s": seq}), seq)],
                        writer,
                        WriteEventsOptions {
                            allow_create: true,
                            expected_version: Some(seq - 1),
                            enforce_client_idempotency: true,
                        },
                    )
                    .await
                    .unwrap();
                assert_eq!(r.max_aggregate_version, Some(seq));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let key = AggregateKey::new(9, 9, 3);
    assert_eq!(
        pool.read(read(&key, 1)).await.unwrap().event_batches.len(),
        5
    );
    assert_eq!(
        pool.read_all(key.clone(), None)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap()
            .len(),
        5
    );
    let d = pool.aggregate_details(details(&key)).await.unwrap();
    assert_eq!(d.max_aggregate_version, 5);
    // A conflict through the pool is typed and the pool keeps working.
    let e = pool
        .write_events_with(key.clone(), vec![event(1, &json!({}), 6)], 3, occ(Some(1)))
        .await
        .unwrap_err();
    assert_eq!(write_conflicts(&e), vec![(ids(&key), 1, 5)]);
    let r = pool
        .write_batch(3)
        .append_with(key.clone(), vec![event(1, &json!({}), 6)], occ(Some(5)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.max_aggregate_version, Some(6));
    let orgs = pool
        .list_orgs(ListOptions::default())
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(orgs.iter().map(|o| o.org_id).collect::<Vec<_>>(), vec![9]);
    // A watch through the pool.
    let mut w = pool
        .watch(
            watch_of(100),
            WatchOptions {
                timeout: Some(ANSWER),
                ..WatchOptions::default()
            },
        )
        .await
        .unwrap();
    pool.write_events(
        AggregateKey::new(9, 9, 100),
        vec![event(1, &json!({}), 1)],
        1,
    )
    .await
    .unwrap();
    let push = w.next_timeout(ANSWER).await.unwrap().expect("a push");
    assert_eq!(push.events[0].aggregate_id, 100);
}

// ---- 11. 0.2.0 beside 0.3.0 ---------------------------------------------------------------

#[tokio::test]
async fn the_0_2_0_client_is_answered_as_before_on_the_same_server() {
    let eddy = start(&["--num-shards", "1"]);
    let key = AggregateKey::new(4, 4, 4);
    let old_key = celeriant_wal::aggregate_key::AggregateKey::new(4, 4, 4);
    let mut new = client(&eddy).await;
    let mut old = celeriant_client_tokio::CeleriantClient::connect(&addr(&eddy))
        .await
        .unwrap()
        .with_timeout(ANSWER);
    new.write_events(key.clone(), vec![event(1, &json!({}), 1)], 1)
        .await
        .unwrap();
    let mut old_event = celeriant_client_tokio::json_event(1, &json!({})).unwrap();
    old_event.client_seq = 2;
    let e = old
        .write_events_with(
            old_key.clone(),
            vec![old_event.clone()],
            1,
            celeriant_client_tokio::WriteEventsOptions {
                expected_version: Some(0),
                ..celeriant_client_tokio::WriteEventsOptions::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            celeriant_client_tokio::ClientError::Server(
                celeriant_client_tokio::ServerError::Write {
                    kind: celeriant_client_tokio::WriteError::OptimisticConcurrencyViolation {
                        expected_version: Some(0),
                        current_aggregate_version: Some(1)
                    },
                    ..
                }
            )
        ),
        "{e:?}"
    );
    let e = new
        .write_events_with(key.clone(), vec![event(1, &json!({}), 3)], 1, occ(Some(0)))
        .await
        .unwrap_err();
    assert_eq!(write_conflicts(&e), vec![(ids(&key), 0, 1)]);
    // Both read what either wrote.
    old.write_events(old_key.clone(), vec![old_event], 1)
        .await
        .unwrap();
    let page = new.read(read(&key, 1)).await.unwrap();
    assert_eq!(page.event_batches.len(), 2);
    // A connection's version is pinned by its first frame: V2 after V4 closes it.
    let mut raw = Raw::connect(&eddy).await;
    raw.send(
        V4,
        1,
        &ClientRequest::AggregateDetails(details(&key))
            .serialize_body(V4)
            .unwrap(),
    )
    .await;
    let f = raw.recv().await.unwrap();
    assert_eq!((f.version, f.message_type), (V4, 1));
    raw.send(
        2,
        1,
        &ClientRequest::AggregateDetails(details(&key))
            .serialize_body(V4)
            .unwrap(),
    )
    .await;
    raw.expect_closed().await;
}

// ---- 12. a three-member cluster through 0.3.0's pool ------------------------------------------

fn leader(nodes: &[Node]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for (i, n) in nodes.iter().enumerate() {
            if let Ok((200, body)) = eddy_tests::http_get(n.eddy.addrs().http, "/health") {
                if body.contains("leader") {
                    return i;
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader elected");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test]
async fn a_three_member_cluster_through_the_pool() {
    within(Duration::from_secs(180), Box::pin(cluster_scenario())).await;
}

async fn cluster_scenario() {
    let nodes = start_cluster(3);
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| n.eddy.addrs().client.to_string())
        .collect();
    let lead = leader(&nodes);
    let follower = (0..3).find(|&i| i != lead).unwrap();
    // Seeded with a follower only: the pool finds the leader.
    let pool = CeleriantPool::new(
        PoolOptions::new(addrs[follower].clone())
            .with_seed_addresses(addrs.clone())
            .with_request_timeout(ANSWER),
    );
    let key = AggregateKey::new(8, 8, 8);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match pool
            .write_events_with(
                key.clone(),
                vec![event(1, &json!({"n": 1}), 1)],
                1,
                WriteEventsOptions {
                    allow_create: true,
                    expected_version: Some(0),
                    enforce_client_idempotency: true,
                },
            )
            .await
        {
            Ok(r) => {
                assert_eq!(r.max_aggregate_version, Some(1));
                break;
            }
            // Landed while its answer was lost: the retry finds version 1.
            Err(e @ ClientError::Server(ServerError::Write { .. })) if matches!(write_conflicts_opt(&e), Some(c) if c == vec![(ids(&key), 0, 1)]) => {
                break
            }
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "the cluster takes no write: {e:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    for seq in 2..=5u64 {
        pool.write_events_with(
            key.clone(),
            vec![event(1, &json!({"n": seq}), seq)],
            1,
            occ(Some(seq - 1)),
        )
        .await
        .unwrap();
    }
    // A stale guard through the pool: typed.
    let e = pool
        .write_events_with(key.clone(), vec![event(1, &json!({}), 9)], 1, occ(Some(2)))
        .await
        .unwrap_err();
    assert_eq!(write_conflicts(&e), vec![(ids(&key), 2, 5)]);
    // A bare 0.3.0 connection to a follower: the follower forwards the change to the leader
    // and the conflict comes back typed, with its entry.
    let mut direct = CeleriantClient::connect(&addrs[follower])
        .await
        .unwrap()
        .with_timeout(ANSWER);
    let deadline = Instant::now() + Duration::from_secs(30);
    let e = loop {
        match direct
            .write_events_with(key.clone(), vec![event(1, &json!({}), 10)], 1, occ(Some(3)))
            .await
        {
            Err(ClientError::ServerBusy) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => break e,
            Ok(r) => panic!("a stale guard was taken: {r:?}"),
        }
    };
    assert_eq!(write_conflicts(&e), vec![(ids(&key), 3, 5)]);
    // Every member serves the committed batches.
    for a in &addrs {
        let mut c = CeleriantClient::connect(a)
            .await
            .unwrap()
            .with_timeout(ANSWER);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let n = c
                .read(read(&key, 1))
                .await
                .map_or(0, |p| p.event_batches.len());
            if n == 5 {
                break;
            }
            assert!(Instant::now() < deadline, "{a} has {n} batches");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn write_conflicts_opt(e: &ClientError) -> Option<Named> {
    matches!(
        e,
        ClientError::Server(ServerError::Write {
            kind: WriteError::OptimisticConcurrencyViolation { .. },
            ..
        })
    )
    .then(|| write_conflicts(e))
}
