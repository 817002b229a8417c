//! Every event-protocol message type end to end with the published client
//! (`celeriant_client_tokio =0.2.0`) against the real server: writes with OCC, idempotency and
//! atomic multi-aggregate failure, paged reads, details, trim, delete and recreate, list
//! iterators, watch, schemas, compression both ways, V3 over a raw socket, and restarts.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::event_support::{addr, client, start, Raw, ANSWER};
use celeriant_client_tokio::list_operations::{
    ListAggregateTypesIterator, ListAggregatesIterator, ListOptions, ListOrgsIterator,
};
use celeriant_client_tokio::{
    json_event, ClientError, ClientIdentityConfig, ReadAllIterator, ReadError, SchemaError,
    ServerError, WatchConnection, WatchOptions, WriteError, WriteEventsOptions,
};
use celeriant_msg::process_client_requests::ClientRequest;
use celeriant_msg::process_client_responses::ClientResponse;
use celeriant_msg::request::read_filters::ReadFilters;
use celeriant_msg::request::requests::{
    AggregateDetailsRequest, DeleteRequest, IdentifyRequest, ReadRequest, RegisterSchemaRequest,
    SingleAggregateDelete, SingleAggregateWrite, TrimStartRequest, WatchRequest, WriteRequest,
};
use celeriant_wal::aggregate_key::AggregateKey;
use celeriant_wal::datablocks::datablock_aggregate_event::DatablockAggregateEvent;
use celeriant_wal::schema_key::SchemaKey;
use serde_json::json;

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

#[tokio::test]
async fn write_read_details_trim_delete_recreate() {
    let eddy = start(&["--num-shards", "2"]);
    let mut conn = client(&eddy).await;
    let key = AggregateKey::new(10, 20, 31);
    let payload = json!({"order": 1, "items": ["a", "b"]});
    let r = conn
        .write_events_with(key.clone(), vec![event(7, &payload, 5)], 42, occ(Some(0)))
        .await
        .unwrap();
    assert_eq!(r.max_aggregate_version, Some(1));
    // The same guard again: OCC conflict with both fields parsed by the client.
    let e = conn
        .write_events_with(key.clone(), vec![event(7, &payload, 6)], 42, occ(Some(0)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Server(ServerError::Write {
                kind: WriteError::OptimisticConcurrencyViolation {
                    expected_version: Some(0),
                    current_aggregate_version: Some(1)
                },
                ..
            })
        ),
        "{e:?}"
    );
    let page = conn.read(read(&key, 1)).await.unwrap();
    assert_eq!(page.event_batches.len(), 1);
    let b = &page.event_batches[0];
    assert_eq!((b.aggregate_version, b.client_id, b.user_id), (1, 42, None));
    assert!(b.server_timestamp > 1_600_000_000_000, "epoch milliseconds");
    let ev = &b.events[0];
    assert_eq!((ev.event_seq, ev.client_seq), (1, 5));
    assert_eq!(ev.event_timestamp, 1_700_000_000_005);
    assert_eq!(
        celeriant_client_tokio::from_json::<serde_json::Value>(ev).unwrap(),
        payload
    );
    assert_eq!(page.next_aggregate_version, None);
    let d = conn.aggregate_details(details(&key)).await.unwrap();
    assert_eq!((d.min_aggregate_version, d.max_aggregate_version), (1, 1));
    assert_eq!(
        (d.max_event_seq, d.is_deleted, d.last_client_id),
        (1, false, 42)
    );

    // Four more batches (two events each), then trim to 3.
    for i in 0..4u64 {
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
    conn.trim_start(TrimStartRequest {
        correlation_id: None,
        aggregate_key: key.clone(),
        keep_from_aggregate_version: 3,
        client_id: 42,
        user_id: Some(9),
    })
    .await
    .unwrap();
    let d = conn.aggregate_details(details(&key)).await.unwrap();
    assert_eq!((d.min_aggregate_version, d.max_aggregate_version), (3, 5));
    assert_eq!(d.max_event_seq, 9);
    let e = conn.read(read(&key, 1)).await.unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Server(ServerError::Read {
                kind: ReadError::UnavailableBatchIndex {
                    requested_version: Some(1),
                    minimum_available_version: Some(3)
                },
                ..
            })
        ),
        "{e:?}"
    );
    // Event filters: only type 8 events of versions 3..=4.
    let mut filtered = read(&key, 3);
    filtered.filters = ReadFilters::new(3)
        .to_aggregate_version(4)
        .include_event_types(vec![8]);
    let page = conn.read(filtered).await.unwrap();
    let got: Vec<(u64, u64)> = page
        .event_batches
        .iter()
        .flat_map(|b| {
            b.events
                .iter()
                .map(move |e| (b.aggregate_version, e.event_type_major))
        })
        .collect();
    assert_eq!(got, [(3, 8), (4, 8)]);
    // Trim past the tip.
    let e = conn
        .trim_start(TrimStartRequest {
            correlation_id: None,
            aggregate_key: key.clone(),
            keep_from_aggregate_version: 6,
            client_id: 42,
            user_id: None,
        })
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("IndexOutOfRange"), "{e:?}");

    // Delete allowing recreation, without continuation.
    conn.delete(DeleteRequest {
        correlation_id: None,
        client_id: 42,
        user_id: None,
        deletes: HashMap::from([(
            key.clone(),
            SingleAggregateDelete {
                allow_recreate: true,
                allow_sequence_continuation: false,
                expected_version: Some(5),
            },
        )]),
    })
    .await
    .unwrap();
    let e = conn.read(read(&key, 1)).await.unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Server(ServerError::Read {
                kind: ReadError::AggregateNotExists,
                ..
            })
        ),
        "{e:?}"
    );
    let d = conn.aggregate_details(details(&key)).await.unwrap();
    assert!(d.is_deleted && d.allow_recreate && !d.allow_sequence_continuation);
    // Recreate: allow_create is not needed, the version restarts at 1.
    let r = conn
        .write_events_with(
            key.clone(),
            vec![event(7, &json!({"again": true}), 100)],
            42,
            WriteEventsOptions {
                allow_create: false,
                ..WriteEventsOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(r.max_aggregate_version, Some(1));
    // A never-existing aggregate: details 7001, write without allow_create 2005.
    let missing = AggregateKey::new(10, 20, 99);
    let e = conn.aggregate_details(details(&missing)).await.unwrap_err();
    assert!(format!("{e:?}").contains("AggregateNotExists"), "{e:?}");
    let e = conn
        .write_events_with(
            missing.clone(),
            vec![event(7, &json!({}), 1)],
            42,
            WriteEventsOptions {
                allow_create: false,
                ..WriteEventsOptions::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Server(ServerError::Write {
                kind: WriteError::AggregateNotExists,
                ..
            })
        ),
        "{e:?}"
    );
    // Event type 0 is reserved.
    let e = conn
        .write_events(missing.clone(), vec![event(0, &json!({}), 3)], 42)
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("ZeroEventType"), "{e:?}");
}

#[tokio::test]
async fn idempotent_retry_and_atomic_multi_aggregate_failure() {
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
    // Another client id with the same sequence is a different writer.
    let r = conn
        .write_events_with(key.clone(), one(1), 8, enforce.clone())
        .await
        .unwrap();
    assert_eq!(r.max_aggregate_version, Some(2));
    // Nothing was written twice.
    let page = conn.read(read(&key, 1)).await.unwrap();
    assert_eq!(page.event_batches.len(), 2);

    // Two aggregates, one with a stale guard: neither is written.
    let a = AggregateKey::new(1, 1, 50);
    let b = AggregateKey::new(1, 1, 51);
    let part = |expected| SingleAggregateWrite {
        events: vec![event(3, &json!({}), 1)],
        allow_create: true,
        expected_version: expected,
        enforce_client_idempotency: false,
    };
    let e = conn
        .write(WriteRequest {
            correlation_id: None,
            client_id: 7,
            user_id: Some(3),
            writes: HashMap::from([(a.clone(), part(Some(0))), (b.clone(), part(Some(4)))]),
        })
        .await
        .unwrap_err();
    assert!(
        format!("{e:?}").contains("OptimisticConcurrencyViolation"),
        "{e:?}"
    );
    for k in [a.clone(), b.clone()] {
        assert!(
            conn.read(read(&k, 1)).await.is_err(),
            "nothing of the request is readable"
        );
    }
    // The same request with good guards commits both, atomically; no single version.
    let r = conn
        .write(WriteRequest {
            correlation_id: None,
            client_id: 7,
            user_id: Some(3),
            writes: HashMap::from([(a.clone(), part(Some(0))), (b.clone(), part(Some(0)))]),
        })
        .await
        .unwrap();
    assert_eq!(r.max_aggregate_version, None);
    for k in [a, b] {
        let page = conn.read(read(&k, 1)).await.unwrap();
        assert_eq!(page.event_batches[0].user_id, Some(3));
    }
}

#[tokio::test]
async fn read_all_pages_list_iterators_and_restart() {
    // A small response cap makes read pages small; three shards for the list discovery.
    let mut eddy = start(&[
        "--num-shards",
        "3",
        "--max-response-size",
        "65536",
        "--list-page-size",
        "4",
    ]);
    let mut conn = client(&eddy).await;
    let key = AggregateKey::new(5, 6, 7);
    let blob = "x".repeat(700);
    for i in 0..90u64 {
        conn.write_events(
            key.clone(),
            vec![event(1, &json!({"i": i, "pad": blob}), i)],
            1,
        )
        .await
        .unwrap();
    }
    let first = conn.read(read(&key, 1)).await.unwrap();
    let next = first.next_aggregate_version.expect("more than one page");
    assert_eq!(
        next,
        first.event_batches.last().unwrap().aggregate_version + 1
    );
    let all = ReadAllIterator::new(&mut conn, key.clone(), None)
        .collect()
        .await
        .unwrap();
    let versions: Vec<u64> = all.iter().map(|b| b.aggregate_version).collect();
    assert_eq!(versions, (1..=90).collect::<Vec<_>>());

    // Aggregates on every shard, orgs 1..=3, two types each.
    let mut expected = HashSet::new();
    for id in 0..12u128 {
        let k = AggregateKey::new(id % 3 + 1, 100 + id % 2, 1000 + id);
        conn.write_events(k.clone(), vec![event(1, &json!({}), 1)], 1)
            .await
            .unwrap();
        expected.insert((k.org_id, k.aggregate_type_id, k.aggregate_id));
    }
    expected.insert((5, 6, 7));
    let orgs: HashSet<u128> = ListOrgsIterator::new(&mut conn, ListOptions::default())
        .unwrap()
        .collect()
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.org_id)
        .collect();
    assert_eq!(orgs, HashSet::from([1, 2, 3, 5]));
    let types: HashSet<(u128, u128)> =
        ListAggregateTypesIterator::new(&mut conn, None, ListOptions::default())
            .unwrap()
            .collect()
            .await
            .unwrap()
            .into_iter()
            .map(|t| (t.org_id, t.aggregate_type_id))
            .collect();
    assert_eq!(types.len(), 7);
    let aggs = ListAggregatesIterator::new(&mut conn, None, None, ListOptions::default())
        .unwrap()
        .collect()
        .await
        .unwrap();
    let seen: HashSet<_> = aggs
        .iter()
        .map(|a| (a.org_id, a.aggregate_type_id, a.aggregate_id))
        .collect();
    assert_eq!(seen, expected);
    let big = aggs.iter().find(|a| a.aggregate_id == 7).unwrap();
    assert_eq!((big.event_batch_count, big.max_aggregate_version), (90, 90));
    let only_org_2 = ListAggregatesIterator::new(&mut conn, Some(2), None, ListOptions::default())
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(only_org_2.len(), 4);

    // A clean restart and a crash restart lose nothing acknowledged.
    drop(conn);
    eddy.restart();
    let mut conn = client(&eddy).await;
    let all = ReadAllIterator::new(&mut conn, key.clone(), None)
        .collect()
        .await
        .unwrap();
    assert_eq!(all.len(), 90);
    conn.write_events(key.clone(), vec![event(1, &json!({"last": 1}), 500)], 1)
        .await
        .unwrap();
    drop(conn);
    eddy.crash_restart();
    let mut conn = client(&eddy).await;
    let d = conn.aggregate_details(details(&key)).await.unwrap();
    assert_eq!(d.max_aggregate_version, 91);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_writes_from_another_connection() {
    let eddy = start(&["--num-shards", "2"]);
    let watched = AggregateKey::new(1, 2, 11);
    let other = AggregateKey::new(1, 2, 13);
    let mut w = WatchConnection::connect(
        &addr(&eddy),
        WatchRequest {
            correlation_id: None,
            requested_latency_ms: None,
            shard_id: None,
            orgs: None,
            aggregate_types: None,
            aggregates: Some(HashSet::from([watched.aggregate_id])),
            operation_types: None,
        },
        WatchOptions {
            timeout: Some(ANSWER),
            ..WatchOptions::default()
        },
    )
    .await
    .unwrap();
    assert!(!w.is_multi_shard());
    let mut conn = client(&eddy).await;
    conn.write_events(other.clone(), vec![event(1, &json!({}), 1)], 1)
        .await
        .unwrap();
    conn.write_events(watched.clone(), vec![event(1, &json!({}), 1)], 1)
        .await
        .unwrap();
    let mut ops = Vec::new();
    while ops.len() < 2 {
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
    assert_eq!(ops, [(1, Some(1), Some(1)), (5, None, None)]);

    // No filter and no shard: the client fans out over every shard after a 9002 probe.
    let mut all = WatchConnection::connect(
        &addr(&eddy),
        WatchRequest {
            correlation_id: None,
            requested_latency_ms: Some(50),
            shard_id: None,
            orgs: None,
            aggregate_types: None,
            aggregates: None,
            operation_types: Some(HashSet::from([1])),
        },
        WatchOptions {
            timeout: Some(ANSWER),
            ..WatchOptions::default()
        },
    )
    .await
    .unwrap();
    assert!(all.is_multi_shard());
    for k in [watched.clone(), other.clone()] {
        conn.write_events(k, vec![event(1, &json!({}), 2)], 1)
            .await
            .unwrap();
    }
    let mut seen = HashSet::new();
    while seen.len() < 2 {
        let r = all.next_timeout(ANSWER).await.unwrap().expect("a push");
        for e in r.events {
            assert_eq!(e.operation, 1);
            seen.insert(e.aggregate_id);
        }
    }
    // Latency above the cap: 8001, then the connection closes.
    let e = WatchConnection::connect(
        &addr(&eddy),
        WatchRequest {
            correlation_id: None,
            requested_latency_ms: Some(60_000),
            shard_id: Some(0),
            orgs: None,
            aggregate_types: None,
            aggregates: None,
            operation_types: None,
        },
        WatchOptions {
            timeout: Some(ANSWER),
            ..WatchOptions::default()
        },
    )
    .await
    .err()
    .expect("refused");
    assert!(format!("{e:?}").contains("LatencyTooHigh"), "{e:?}");
}

#[tokio::test]
async fn watch_subscriber_cap_is_8005() {
    let eddy = start(&["--num-shards", "1", "--max-watch-subscribers", "1"]);
    let req = WatchRequest {
        correlation_id: None,
        requested_latency_ms: None,
        shard_id: Some(0),
        orgs: None,
        aggregate_types: None,
        aggregates: None,
        operation_types: None,
    };
    let opts = || WatchOptions {
        timeout: Some(ANSWER),
        ..WatchOptions::default()
    };
    let first = WatchConnection::connect(&addr(&eddy), req.clone(), opts())
        .await
        .unwrap();
    let e = WatchConnection::connect(&addr(&eddy), req.clone(), opts())
        .await
        .err()
        .expect("over the cap");
    assert!(format!("{e:?}").contains("TooManySubscribers"), "{e:?}");
    // The slot frees when the first watcher leaves.
    drop(first);
    let mut ok = None;
    for _ in 0..50 {
        if let Ok(w) = WatchConnection::connect(&addr(&eddy), req.clone(), opts()).await {
            ok = Some(w);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok.is_some(), "the subscription was released");
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
    let register = registration;
    conn.register_schema(register(0, schema.clone(), 4))
        .await
        .unwrap();
    let e = conn
        .register_schema(register(0, schema, 4))
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
    let e = conn
        .register_schema(register(0, "{not json".into(), 5))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Server(ServerError::Schema {
                kind: SchemaError::Invalid,
                ..
            })
        ),
        "{e:?}"
    );
    let e = conn
        .register_schema(register(9, "{}".into(), 5))
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("UnsupportedType"), "{e:?}");
    let e = conn
        .register_schema(register(0, "x".repeat(20_000), 5))
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("16384"), "{e:?}");

    let key = AggregateKey::new(1, 2, 3);
    conn.write_events(key.clone(), vec![event(4, &json!({"amount": 5}), 1)], 1)
        .await
        .unwrap();
    let e = conn
        .write_events(key.clone(), vec![event(4, &json!({"amount": -1}), 2)], 1)
        .await
        .unwrap_err();
    match &e {
        ClientError::Server(ServerError::Schema {
            kind: SchemaError::ValidationFailed,
            error_message,
        }) => {
            let v: serde_json::Value = serde_json::from_str(error_message).unwrap();
            assert_eq!(v["event_type_major"], 4);
            assert_eq!(v["client_seq"], 2);
            assert!(v["validation_error"].as_str().unwrap().contains("amount"));
        }
        other => panic!("{other:?}"),
    }
    // Other event types and encrypted payloads are not validated.
    conn.write_events(key.clone(), vec![event(5, &json!({"amount": -1}), 3)], 1)
        .await
        .unwrap();
    let mut encrypted = event(4, &json!({"amount": -1}), 4);
    encrypted.iv = Some([7; 12]);
    conn.write_events(key.clone(), vec![encrypted], 1)
        .await
        .unwrap();
}

#[tokio::test]
async fn compression_both_ways_and_v3_over_a_raw_socket() {
    let eddy = start(&["--num-shards", "1"]);
    // The published client compresses a >= 1024-byte payload after Identify and reads the
    // compressed response transparently.
    let mut conn = client(&eddy).await;
    conn.identify(&ClientIdentityConfig {
        public_key: None,
        private_key: None,
        api_key: None,
    })
    .await
    .unwrap();
    let key = AggregateKey::new(3, 3, 3);
    let big = json!({"text": "lorem ipsum dolor sit amet ".repeat(200)});
    conn.write_events(key.clone(), vec![event(1, &big, 1)], 1)
        .await
        .unwrap();
    let page = conn.read(read(&key, 1)).await.unwrap();
    assert_eq!(
        celeriant_client_tokio::from_json::<serde_json::Value>(&page.event_batches[0].events[0])
            .unwrap(),
        big
    );

    // V3 raw: Identify, a compressed write built with the reference crates, a read whose
    // response comes back compressed.
    let mut raw = Raw::connect(&eddy).await;
    raw.send_identify(
        &IdentifyRequest {
            correlation_id: None,
            public_key: None,
            nonce: None,
            signature: None,
            api_key: None,
            known_dict_sha256: None,
        },
        3,
    )
    .await;
    let (_, id) = raw.recv_identify().await;
    let dict = id.compression_dict_bytes.unwrap();
    let v3_key = AggregateKey::new(3, 3, 4);
    let write = ClientRequest::Write(WriteRequest {
        correlation_id: Some(11),
        client_id: 5,
        user_id: Some(6),
        writes: HashMap::from([(
            v3_key.clone(),
            SingleAggregateWrite {
                events: vec![event(2, &big, 1), event(2, &json!({"small": 1}), 2)],
                allow_create: true,
                expected_version: Some(0),
                enforce_client_idempotency: true,
            },
        )]),
    });
    let body = write.serialize_body(3).unwrap();
    let compressed =
        celeriant_wire::codec::compression::compress_with_dict(&body, 3, &dict).unwrap();
    assert!(compressed.len() < body.len());
    raw.send_frame(3, 3, 1, u32::try_from(body.len()).unwrap(), &compressed)
        .await;
    let (frame, resp) = raw.recv_response(Some(&dict)).await;
    assert_eq!((frame.version, frame.message_type), (3, 3));
    match resp {
        ClientResponse::Write(w) => {
            assert_eq!(w.correlation_id, Some(11));
            assert_eq!(w.max_aggregate_version, Some(1));
        }
        other => panic!("{other:?}"),
    }
    raw.send_request(
        &ClientRequest::Read(ReadRequest {
            correlation_id: Some(12),
            aggregate_key: v3_key.clone(),
            filters: ReadFilters::new(1),
        }),
        3,
    )
    .await;
    let (frame, resp) = raw.recv_response(Some(&dict)).await;
    assert_eq!(frame.version, 3);
    assert_eq!(
        frame.compression, 1,
        "a >= 1024-byte read body is compressed"
    );
    match resp {
        ClientResponse::Read(r) => {
            assert_eq!(r.correlation_id, Some(12));
            let b = &r.event_batches[0];
            assert_eq!((b.client_id, b.user_id), (5, Some(6)));
            let seqs: Vec<u64> = b.events.iter().map(|e| e.event_seq).collect();
            assert_eq!(seqs, [1, 2]);
        }
        other => panic!("{other:?}"),
    }
    // Without Identify, responses are never compressed.
    let mut plain = Raw::connect(&eddy).await;
    plain
        .send_request(
            &ClientRequest::Read(ReadRequest {
                correlation_id: Some(1),
                aggregate_key: v3_key.clone(),
                filters: ReadFilters::new(1),
            }),
            2,
        )
        .await;
    let (frame, resp) = plain.recv_response(None).await;
    assert_eq!(frame.compression, 0);
    assert!(matches!(resp, ClientResponse::Read(_)));
}

#[tokio::test]
async fn a_byte_from_a_watcher_ends_its_watch() {
    let eddy = start(&["--num-shards", "1"]);
    let watch = ClientRequest::Watch(WatchRequest {
        correlation_id: Some(4),
        requested_latency_ms: None,
        shard_id: Some(0),
        orgs: None,
        aggregate_types: None,
        aggregates: None,
        operation_types: None,
    });
    for version in [2, 3] {
        let mut raw = Raw::connect(&eddy).await;
        raw.send_request(&watch, version).await;
        let (frame, resp) = raw.recv_response(None).await;
        assert_eq!((frame.version, frame.message_type), (version, 8));
        match resp {
            ClientResponse::Watch(w) => assert!(w.events.is_empty(), "the acknowledgement"),
            other => panic!("{other:?}"),
        }
        tokio::io::AsyncWriteExt::write_all(&mut raw.s, &[0])
            .await
            .unwrap();
        raw.expect_closed().await;
    }
    // Routing errors on a watch keep the connection, so the client may ask again.
    let mut raw = Raw::connect(&eddy).await;
    raw.send_request(
        &ClientRequest::Watch(WatchRequest {
            correlation_id: Some(5),
            requested_latency_ms: None,
            shard_id: None,
            orgs: None,
            aggregate_types: None,
            aggregates: None,
            operation_types: None,
        }),
        2,
    )
    .await;
    let (_, resp) = raw.recv_response(None).await;
    assert_eq!(resp.correlation_id(), Some(5));
    assert_eq!(crate::event_support::error_of(&resp).0, 9002);
    raw.send_request(&watch, 2).await;
    let (frame, _) = raw.recv_response(None).await;
    assert_eq!(frame.message_type, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_open_watches_and_idle_connections() {
    let mut eddy = start(&["--num-shards", "1"]);
    let watcher = WatchConnection::connect(
        &addr(&eddy),
        WatchRequest {
            correlation_id: None,
            requested_latency_ms: None,
            shard_id: Some(0),
            orgs: None,
            aggregate_types: None,
            aggregates: None,
            operation_types: None,
        },
        WatchOptions {
            timeout: Some(ANSWER),
            ..WatchOptions::default()
        },
    )
    .await
    .unwrap();
    let mut idle = client(&eddy).await;
    idle.write_events(AggregateKey::new(1, 1, 1), vec![event(1, &json!({}), 1)], 1)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let status = tokio::task::spawn_blocking(move || {
        let status = eddy.stop(Duration::from_secs(20));
        (status, eddy)
    })
    .await
    .unwrap();
    assert!(status.0.success(), "{:?}", status.0);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "watchers and idle connections must not hold the drain: {:?}",
        started.elapsed()
    );
    drop((watcher, idle));
}

/// With the group-commit window (`--fsync-delay-us`, here applied whether or not the CPUs
/// are saturated), writes from many connections share fdatasyncs, every acknowledged write
/// survives a SIGKILL, and versions continue after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_window_shares_fdatasyncs_and_loses_no_ack() {
    let mut eddy = start(&[
        "--num-shards",
        "2",
        "--fsync-delay-us",
        "2000",
        "--fsync-delay-when",
        "always",
    ]);
    let mut tasks = Vec::new();
    for w in 0..32u128 {
        let mut conn = client(&eddy).await;
        tasks.push(tokio::spawn(async move {
            let key = AggregateKey::new(5, 6, 1000 + w);
            for v in 0..10u64 {
                let r = conn
                    .write_events_with(
                        key.clone(),
                        vec![event(1, &json!({"w": w as u64, "v": v}), v + 1)],
                        7,
                        occ(Some(v)),
                    )
                    .await
                    .unwrap();
                assert_eq!(r.max_aggregate_version, Some(v + 1));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (_, body) = eddy_tests::http_get(eddy.addrs().http, "/metrics").unwrap();
    let counter = |name: &str| -> f64 {
        eddy_tests::metric_value(&body, name).unwrap_or_else(|| panic!("{name} missing:\n{body}"))
    };
    let records = counter("eddy_events_records_committed_total");
    let fsyncs = counter("eddy_events_fdatasyncs_total");
    assert!(records >= 320.0, "{records} records");
    assert!(
        fsyncs < records / 2.0,
        "{fsyncs} fdatasyncs for {records} records: the window should gather writes"
    );
    eddy.crash_restart();
    let mut conn = client(&eddy).await;
    for w in 0..32u128 {
        let key = AggregateKey::new(5, 6, 1000 + w);
        let d = conn.aggregate_details(details(&key)).await.unwrap();
        assert_eq!(d.max_aggregate_version, 10, "aggregate {w}");
    }
    let key = AggregateKey::new(5, 6, 1000);
    let r = conn
        .write_events_with(
            key,
            vec![event(1, &json!({"after": 1}), 11)],
            7,
            occ(Some(10)),
        )
        .await
        .unwrap();
    assert_eq!(r.max_aggregate_version, Some(11));
}

/// An event of type `ty` with raw payload bytes.
fn raw_event(ty: u64, payload: Vec<u8>, client_seq: u64) -> DatablockAggregateEvent {
    let mut e = event(ty, &json!(null), client_seq);
    e.event_value = std::sync::Arc::new(payload);
    e
}

fn registration(ty: u8, text: String, major: u64) -> RegisterSchemaRequest {
    RegisterSchemaRequest {
        correlation_id: None,
        client_id: 1,
        user_id: None,
        schema_key: SchemaKey::new(1, 2, major, 0),
        schema_type: ty,
        schema: text,
    }
}

fn schema_error(e: &ClientError) -> Option<&SchemaError> {
    match e {
        ClientError::Server(ServerError::Schema { kind, .. }) => Some(kind),
        _ => None,
    }
}

/// The `validation_error` of a 2022 answer.
fn validation_error(e: &ClientError) -> String {
    match e {
        ClientError::Server(ServerError::Schema {
            kind: SchemaError::ValidationFailed,
            error_message,
        }) => {
            let v: serde_json::Value = serde_json::from_str(error_message).unwrap();
            v["validation_error"].as_str().unwrap().to_owned()
        }
        other => panic!("not a 2022: {other:?}"),
    }
}

const AVRO_ORDER: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
    {"name":"id","type":"long"},
    {"name":"lines","type":{"type":"array","items":{"type":"record","name":"Line","fields":[
        {"name":"sku","type":"string"},{"name":"qty","type":"int"}]}}},
    {"name":"note","type":["null","string"]}
]}"#;

fn avro_order(id: i64, note: Option<&str>) -> Vec<u8> {
    use apache_avro::types::Value;
    let schema = apache_avro::Schema::parse_str(AVRO_ORDER).unwrap();
    let line = Value::Record(vec![
        ("sku".into(), Value::String("tea".into())),
        ("qty".into(), Value::Int(2)),
    ]);
    let order = Value::Record(vec![
        ("id".into(), Value::Long(id)),
        ("lines".into(), Value::Array(vec![line])),
        (
            "note".into(),
            match note {
                None => Value::Union(0, Box::new(Value::Null)),
                Some(n) => Value::Union(1, Box::new(Value::String(n.into()))),
            },
        ),
    ]);
    apache_avro::to_avro_datum(&schema, order).unwrap()
}

/// A FileDescriptorSet with `shop.Payment { string currency = 1; int64 cents = 2; }`.
fn payment_descriptor() -> Vec<u8> {
    use prost_reflect::prost::Message as _;
    use prost_reflect::prost_types::field_descriptor_proto::{Label, Type};
    use prost_reflect::prost_types::{
        DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet,
    };
    let field = |name: &str, number: i32, ty: Type| FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(Label::Optional.into()),
        r#type: Some(ty.into()),
        ..FieldDescriptorProto::default()
    };
    FileDescriptorSet {
        file: vec![FileDescriptorProto {
            name: Some("shop.proto".into()),
            package: Some("shop".into()),
            syntax: Some("proto3".into()),
            message_type: vec![DescriptorProto {
                name: Some("Payment".into()),
                field: vec![
                    field("currency", 1, Type::String),
                    field("cents", 2, Type::Int64),
                ],
                ..DescriptorProto::default()
            }],
            ..FileDescriptorProto::default()
        }],
    }
    .encode_to_vec()
}

#[tokio::test]
async fn avro_and_protobuf_schemas_validate_writes() {
    use base64::Engine as _;
    let eddy = start(&["--num-shards", "1"]);
    let mut conn = client(&eddy).await;
    let key = AggregateKey::new(1, 2, 9);

    // Avro (type 1): schema JSON; a payload is one binary datum of it.
    conn.register_schema(registration(1, AVRO_ORDER.into(), 6))
        .await
        .unwrap();
    let e = conn
        .register_schema(registration(1, AVRO_ORDER.into(), 6))
        .await
        .unwrap_err();
    assert!(
        matches!(schema_error(&e), Some(SchemaError::AlreadyExists)),
        "{e:?}"
    );
    let e = conn
        .register_schema(registration(1, r#"{"type":"record"}"#.into(), 7))
        .await
        .unwrap_err();
    assert!(
        matches!(schema_error(&e), Some(SchemaError::Invalid)),
        "{e:?}"
    );
    conn.write_events(key.clone(), vec![raw_event(6, avro_order(1, None), 1)], 1)
        .await
        .unwrap();
    conn.write_events(
        key.clone(),
        vec![raw_event(6, avro_order(2, Some("gift")), 2)],
        1,
    )
    .await
    .unwrap();
    let mut truncated = avro_order(3, Some("gift"));
    truncated.truncate(truncated.len() - 2);
    let e = conn
        .write_events(key.clone(), vec![raw_event(6, truncated, 3)], 1)
        .await
        .unwrap_err();
    assert!(validation_error(&e).contains("Avro"), "{e:?}");
    let e = conn
        .write_events(key.clone(), vec![event(6, &json!({"id": 3}), 3)], 1)
        .await
        .unwrap_err();
    assert!(!validation_error(&e).is_empty());

    // Protobuf (type 2): base64 of a FileDescriptorSet, ':', the message's full name.
    let set = base64::engine::general_purpose::STANDARD.encode(payment_descriptor());
    conn.register_schema(registration(2, format!("{set}:shop.Payment"), 8))
        .await
        .unwrap();
    for bad in [
        format!("{set}:shop.Missing"),
        set.clone(),
        "%%%:shop.Payment".to_owned(),
    ] {
        let e = conn
            .register_schema(registration(2, bad, 9))
            .await
            .unwrap_err();
        assert!(
            matches!(schema_error(&e), Some(SchemaError::Invalid)),
            "{e:?}"
        );
    }
    let pool = prost_reflect::DescriptorPool::decode(payment_descriptor().as_slice()).unwrap();
    let mut payment =
        prost_reflect::DynamicMessage::new(pool.get_message_by_name("shop.Payment").unwrap());
    payment.set_field_by_name("currency", prost_reflect::Value::String("EUR".into()));
    payment.set_field_by_name("cents", prost_reflect::Value::I64(1250));
    let bytes = prost_reflect::prost::Message::encode_to_vec(&payment);
    conn.write_events(key.clone(), vec![raw_event(8, bytes, 4)], 1)
        .await
        .unwrap();
    // Field 1 sent as a varint where the descriptor says string: refused.
    let e = conn
        .write_events(key.clone(), vec![raw_event(8, vec![0x08, 0x01], 5)], 1)
        .await
        .unwrap_err();
    assert!(validation_error(&e).contains("shop.Payment"), "{e:?}");
}

#[tokio::test]
async fn hostile_json_schemas_are_refused_or_bounded() {
    let eddy = start(&["--num-shards", "1"]);
    let mut conn = client(&eddy).await;
    let invalid = |e: &ClientError| {
        assert!(
            matches!(schema_error(e), Some(SchemaError::Invalid)),
            "{e:?}"
        );
        format!("{e:?}")
    };
    // Look-around needs a backtracking engine: refused.
    let lookahead = json!({"type": "string", "pattern": "^(?=(a+)+b)"}).to_string();
    let e = conn
        .register_schema(registration(0, lookahead, 10))
        .await
        .unwrap_err();
    invalid(&e);
    // Too deep, and too long a pattern.
    let deep = format!("{}{{}}{}", r#"{"not":"#.repeat(40), "}".repeat(40));
    let e = conn
        .register_schema(registration(0, deep, 10))
        .await
        .unwrap_err();
    assert!(invalid(&e).contains("deeper"), "{e:?}");
    let long = json!({"pattern": "x".repeat(2000)}).to_string();
    let e = conn
        .register_schema(registration(0, long, 10))
        .await
        .unwrap_err();
    assert!(invalid(&e).contains("pattern"), "{e:?}");
    // A pattern that backtracks exponentially elsewhere is linear here: a long hostile
    // payload of many items is refused at once and the connection keeps serving.
    let nested = json!({"type": "array", "items": {"type": "string", "pattern": "^(a|aa)+$"}});
    conn.register_schema(registration(0, nested.to_string(), 10))
        .await
        .unwrap();
    let hostile: Vec<String> = (0..200).map(|_| format!("{}b", "a".repeat(2000))).collect();
    let started = std::time::Instant::now();
    let e = conn
        .write_events(
            AggregateKey::new(1, 2, 11),
            vec![event(10, &json!(hostile), 1)],
            1,
        )
        .await
        .unwrap_err();
    assert!(!validation_error(&e).is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let fine: Vec<String> = (0..200).map(|_| "a".repeat(2000)).collect();
    conn.write_events(
        AggregateKey::new(1, 2, 11),
        vec![event(10, &json!(fine), 1)],
        1,
    )
    .await
    .unwrap();
}

/// Deletes `key` at `version`, allowing recreation, continuing the sequence or not.
async fn delete_for_recreate(
    conn: &mut celeriant_client_tokio::CeleriantClient,
    key: &AggregateKey,
    version: u64,
    continuation: bool,
) {
    conn.delete(DeleteRequest {
        correlation_id: None,
        client_id: 42,
        user_id: None,
        deletes: HashMap::from([(
            key.clone(),
            SingleAggregateDelete {
                allow_recreate: true,
                allow_sequence_continuation: continuation,
                expected_version: Some(version),
            },
        )]),
    })
    .await
    .unwrap();
}

/// Issue 21: a fresh incarnation (recreate without sequence continuation) starts every
/// per-aggregate figure afresh: details and every statistic of the aggregate listing count only
/// its own batches, exactly as for an aggregate that never existed before, across a restart.
/// A continued incarnation makes the old batches readable again and keeps counting them.
#[tokio::test]
async fn a_fresh_incarnation_counts_only_its_own_batches() {
    let mut eddy = start(&["--num-shards", "1"]);
    let mut conn = client(&eddy).await;
    let fresh = AggregateKey::new(5, 6, 1);
    let continued = AggregateKey::new(5, 6, 2);
    let control = AggregateKey::new(5, 6, 3);
    for seq in 1..=4u64 {
        let big = json!({"n": seq, "padding": "x".repeat(200)});
        for key in [&fresh, &continued] {
            conn.write_events(key.clone(), vec![event(7, &big, seq)], 42)
                .await
                .unwrap();
        }
    }
    delete_for_recreate(&mut conn, &fresh, 4, false).await;
    delete_for_recreate(&mut conn, &continued, 4, true).await;
    let again = json!({"again": true});
    for key in [&fresh, &continued, &control] {
        conn.write_events(key.clone(), vec![event(8, &again, 100)], 43)
            .await
            .unwrap();
    }

    for round in 0..2 {
        let d = conn.aggregate_details(details(&fresh)).await.unwrap();
        assert_eq!(
            (
                d.min_aggregate_version,
                d.max_aggregate_version,
                d.max_event_seq
            ),
            (1, 1, 1),
            "round {round}"
        );
        assert!(!d.is_deleted && !d.allow_recreate && !d.allow_sequence_continuation);
        let listed = ListAggregatesIterator::new(&mut conn, Some(5), None, ListOptions::default())
            .unwrap()
            .collect()
            .await
            .unwrap();
        let item = |id: u128| {
            let a = listed.iter().find(|a| a.aggregate_id == id).unwrap();
            (
                a.is_deleted,
                a.event_batch_count,
                a.min_event_timestamp,
                a.max_event_timestamp,
                a.min_aggregate_version,
                a.max_aggregate_version,
                a.min_event_seq,
                a.max_event_seq,
                a.compressed_size,
                a.uncompressed_size,
            )
        };
        let (f, c) = (item(1), item(3));
        assert_eq!(
            f, c,
            "round {round}: a fresh incarnation is a new aggregate"
        );
        assert_eq!((f.1, f.2, f.3), (1, 1_700_000_000_100, 1_700_000_000_100));
        let fresh_item = listed.iter().find(|a| a.aggregate_id == 1).unwrap();
        assert_eq!(
            fresh_item.min_server_timestamp, fresh_item.max_server_timestamp,
            "round {round}: its first batch is its newest record"
        );
        let k = item(2);
        assert_eq!(
            (k.1, k.2, k.4, k.5, k.6, k.7),
            (5, 1_700_000_000_001, 1, 5, 1, 5),
            "round {round}: a continued incarnation keeps its history"
        );
        drop(conn);
        eddy.restart();
        conn = client(&eddy).await;
    }
}

/// Issue 21: with an encryption key, event bodies never reach the data directory in the clear,
/// reads decrypt them across a restart, and with another key they do not read.
#[tokio::test]
async fn an_encryption_key_keeps_event_bodies_out_of_the_data_directory() {
    const KEY: &str = "3q2+7wABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhs=";
    const OTHER: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let key = AggregateKey::new(1, 2, 3);
    let body = |i: u64| json!({"secret": format!("TOPSECRET-BODY-{i}")});
    // Without a key a body is in the files (zstd keeps a literal this unlike its dictionary):
    // the search below finds what it looks for.
    let plain = start(&["--wal-compression-level", "1"]);
    let mut conn = client(&plain).await;
    conn.write_events(key.clone(), vec![event(7, &body(0), 1)], 42)
        .await
        .unwrap();
    assert!(!eddy_tests::files_containing(plain.data_dir(), b"TOPSECRET-BODY").is_empty());
    drop((conn, plain));
    let mut eddy = start(&["--encryption-key", KEY, "--wal-compression-level", "1"]);
    let mut conn = client(&eddy).await;
    for i in 1..=20u64 {
        conn.write_events(key.clone(), vec![event(7, &body(i), i)], 42)
            .await
            .unwrap();
    }
    let read_bodies =
        |page: &celeriant_msg::response::responses::ReadResponse| -> Vec<serde_json::Value> {
            page.event_batches
                .iter()
                .flat_map(|b| b.events.iter())
                .map(|e| serde_json::from_slice(&e.event_value).unwrap())
                .collect()
        };
    let page = conn.read(read(&key, 1)).await.unwrap();
    assert_eq!(read_bodies(&page)[19], body(20));
    drop(conn);
    eddy.restart();
    let mut conn = client(&eddy).await;
    let page = conn.read(read(&key, 1)).await.unwrap();
    assert_eq!(read_bodies(&page).len(), 20, "a restart reads them");
    for marker in [&b"TOPSECRET"[..], KEY.as_bytes()] {
        let found = eddy_tests::files_containing(eddy.data_dir(), marker);
        assert!(found.is_empty(), "readable in {found:?}");
    }
    assert!(!eddy.log().lines().iter().any(|l| l.contains(KEY)));
    drop(conn);
    // Another key: the shard logs' tail does not decrypt, and the server refuses to start,
    // naming the file and the reason (never the key).
    eddy.stop(Duration::from_secs(20));
    let mut args: Vec<String> = [
        "--data-dir",
        eddy.data_dir().to_str().unwrap(),
        "--encryption-key",
        OTHER,
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(eddy_tests::EPHEMERAL_PORTS.map(str::to_owned));
    let (mut child, log) =
        eddy_tests::spawn(std::path::Path::new(eddy_tests::server_bin!()), &args, &[]);
    let lines = log.wait_closed(Duration::from_secs(30));
    assert!(!child.wait().unwrap().success());
    let text = lines.join("\n");
    assert!(text.contains("does not decrypt"), "{text}");
    assert!(!text.contains(OTHER) && !text.contains(KEY), "{text}");
    // The right key again: everything reads.
    eddy.restart();
    let mut conn = client(&eddy).await;
    let page = conn.read(read(&key, 1)).await.unwrap();
    assert_eq!(read_bodies(&page).len(), 20);
}

/// The shard log files (`*.log`) under `dir`, with their lengths.
fn shard_log_files(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u64)> {
    eddy_tests::files_under(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| {
            let len = std::fs::metadata(&p).unwrap().len();
            (p, len)
        })
        .collect()
}

/// A single node writes zeros ahead of its shard log's records (so an fdatasync commits no new
/// file size); a SIGKILL leaves them behind and loses no acknowledged write, the restarted
/// server continues the versions after them, and a clean stop cuts the file to its records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_logs_are_preallocated_and_cut_to_their_records_on_stop() {
    let mut eddy = start(&["--num-shards", "1"]);
    let key = AggregateKey::new(8, 9, 10);
    let mut conn = client(&eddy).await;
    for v in 0..20u64 {
        let r = conn
            .write_events_with(
                key.clone(),
                vec![event(1, &json!({"v": v}), v + 1)],
                7,
                occ(Some(v)),
            )
            .await
            .unwrap();
        assert_eq!(r.max_aggregate_version, Some(v + 1));
    }
    let events_dir = eddy.data_dir().join("events");
    let running = shard_log_files(&events_dir);
    assert!(
        running.iter().any(|(_, len)| *len >= 1 << 20),
        "the active segment is preallocated: {running:?}"
    );
    drop(conn);
    eddy.crash_restart();
    let mut conn = client(&eddy).await;
    let d = conn.aggregate_details(details(&key)).await.unwrap();
    assert_eq!(d.max_aggregate_version, 20);
    let r = conn
        .write_events_with(
            key.clone(),
            vec![event(1, &json!({"after": 1}), 21)],
            7,
            occ(Some(20)),
        )
        .await
        .unwrap();
    assert_eq!(r.max_aggregate_version, Some(21));
    drop(conn);
    let status = eddy.stop(Duration::from_secs(30));
    assert!(status.success(), "{status}");
    let stopped = shard_log_files(&events_dir);
    assert!(
        stopped.iter().all(|(_, len)| *len < 1 << 20),
        "a clean stop cuts the zeros: {stopped:?}"
    );
    eddy.restart();
    let mut conn = client(&eddy).await;
    let d = conn.aggregate_details(details(&key)).await.unwrap();
    assert_eq!(d.max_aggregate_version, 21);
}
