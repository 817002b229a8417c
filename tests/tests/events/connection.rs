//! Event-port connection handling against the real server: unparsable frames close only their
//! connection without a byte in answer, the version pin, correlation ids echoed exactly,
//! routing errors with `num_shards` that keep the connection open, idle deadlines, many
//! concurrent connections, and per-type metrics.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::event_support::{client, error_of, start, Raw};
use celeriant_client_tokio::{ClientError, ServerError};
use celeriant_msg::process_client_requests::ClientRequest;
use celeriant_msg::request::requests::{
    DeleteRequest, IdentifyRequest, ListAggregatesRequest, ListOrgsRequest, SingleAggregateWrite,
    WriteRequest,
};
use celeriant_wal::aggregate_key::AggregateKey;

fn list_orgs(correlation_id: Option<u128>, shard_id: u64) -> ClientRequest {
    ClientRequest::ListOrgs(ListOrgsRequest {
        correlation_id,
        shard_id,
        cursor: None,
    })
}

fn write_to(ids: &[u128]) -> WriteRequest {
    let event = celeriant_client_tokio::json_event(3, &serde_json::json!({"x": true})).unwrap();
    WriteRequest {
        correlation_id: None,
        client_id: 1,
        user_id: None,
        writes: ids
            .iter()
            .map(|id| {
                (
                    AggregateKey::new(1, 1, *id),
                    SingleAggregateWrite {
                        events: vec![event.clone()],
                        allow_create: true,
                        expected_version: None,
                        enforce_client_idempotency: false,
                    },
                )
            })
            .collect::<HashMap<_, _>>(),
    }
}

#[tokio::test]
async fn unparsable_frames_close_only_their_connection_without_an_answer() {
    type Case = (&'static str, u32, u32, u8, u32, Vec<u8>);
    let eddy = start(&["--max-request-size", "4096", "--num-shards", "2"]);
    let list = list_orgs(Some(1), 7).serialize_body(2).unwrap();
    let cases: Vec<Case> = vec![
        ("version 9", 9, 7, 0, 0, list.clone()),
        // 4 and 5 are the 0.3.0 clients' (celeriant_compat03.rs); 6 is no one's.
        ("version 6", 6, 7, 0, 0, list.clone()),
        ("unknown request type 11", 2, 11, 0, 0, list.clone()),
        ("a response type id (16)", 2, 16, 0, 0, list.clone()),
        ("cluster type id 100", 2, 100, 0, 0, list.clone()),
        ("compressed fixed frame", 2, 7, 1, 200, list.clone()),
        ("unknown compression byte", 2, 3, 2, 0, list.clone()),
        ("fixed body over 1007 bytes", 2, 7, 0, 0, vec![0u8; 1008]),
        (
            "truncated body",
            2,
            7,
            0,
            0,
            list[..list.len() - 3].to_vec(),
        ),
        ("bad option tag", 2, 7, 0, 0, {
            let mut b = list.clone();
            b[0] = 7;
            b
        }),
        (
            "compressed garbage",
            2,
            3,
            1,
            900,
            vec![0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3],
        ),
        ("bad MessagePack", 3, 7, 0, 0, vec![0xc1, 0xc1, 0xc1]),
    ];
    for (name, version, ty, compression, uncompressed, body) in cases {
        let mut raw = Raw::connect(&eddy).await;
        let declared = if compression == 0 {
            u32::try_from(body.len()).unwrap()
        } else {
            uncompressed
        };
        raw.send_frame(version, ty, compression, declared, &body)
            .await;
        eprintln!("case: {name}");
        raw.expect_closed().await;
    }
    // Headers refused before any body is sent: over the cap, a tiny frame claiming a huge
    // decompressed size, and differing lengths without compression.
    for (c, u, compression) in [(5000u32, 5000u32, 0u8), (10, 1 << 30, 1), (10, 11, 0)] {
        let mut raw = Raw::connect(&eddy).await;
        let mut h = Vec::new();
        for w in [2u32, 3, c, u] {
            h.extend_from_slice(&w.to_le_bytes());
        }
        h.push(compression);
        tokio::io::AsyncWriteExt::write_all(&mut raw.s, &h)
            .await
            .unwrap();
        raw.expect_closed().await;
    }
    // The server still serves, and answers in the pinned version.
    let mut raw = Raw::connect(&eddy).await;
    raw.send_request(&list_orgs(Some(3), 2), 3).await;
    let (frame, resp) = raw.recv_response(None).await;
    assert_eq!((frame.version, frame.message_type), (3, 7));
    assert_eq!(error_of(&resp).0, 9002);
    // A later frame in the other version drops the connection.
    raw.send_request(&list_orgs(Some(4), 2), 2).await;
    raw.expect_closed().await;
}

#[tokio::test]
async fn correlation_ids_are_echoed_exactly_and_routing_errors_keep_the_connection() {
    let eddy = start(&["--num-shards", "3"]);
    let mut raw = Raw::connect(&eddy).await;
    for (i, id) in [Some(u128::MAX - 5), None, Some(0), Some(1 << 100)]
        .into_iter()
        .enumerate()
    {
        let shard = 3 + i as u64;
        raw.send_request(&list_orgs(id, shard), 2).await;
        let (frame, resp) = raw.recv_response(None).await;
        assert_eq!(frame.message_type, 7);
        assert!(frame.body.len() <= 1007);
        assert_eq!(resp.correlation_id(), id);
        let (code, message) = error_of(&resp);
        assert_eq!(code, 9002);
        assert!(message.contains("\"num_shards\":3"), "{message}");
        let v: serde_json::Value = serde_json::from_str(&message).unwrap();
        assert_eq!(v["num_shards"], 3);
        assert!(v["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("Invalid shard_id {shard}")));
    }
    raw.send_request(
        &ClientRequest::ListAggregates(ListAggregatesRequest {
            correlation_id: Some(8),
            shard_id: u64::MAX,
            org_id: None,
            aggregate_type_id: None,
            cursor: None,
        }),
        2,
    )
    .await;
    assert_eq!(error_of(&raw.recv_response(None).await.1).0, 9002);

    // Writes and deletes: empty maps are 9002, keys on several shards 9001 (published client).
    let mut c = client(&eddy).await;
    for (ids, code) in [(&[][..], 9002), (&[1u128, 2][..], 9001)] {
        let e = c.write(write_to(ids)).await.unwrap_err();
        match &e {
            ClientError::Server(ServerError::ShardRouting {
                error_code,
                error_message,
            }) => {
                assert_eq!(*error_code, code);
                assert!(
                    error_message.contains("\"num_shards\":3"),
                    "{error_message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    let e = c
        .delete(DeleteRequest {
            correlation_id: None,
            client_id: 1,
            user_id: None,
            deletes: HashMap::new(),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::Server(ServerError::ShardRouting { error_code: 9002, error_message })
            if error_message.contains("at least one delete")),
        "{e:?}"
    );
}

#[tokio::test]
async fn idle_and_stalled_connections_hit_the_deadline() {
    let eddy = start(&["--client-connection-timeout-ms", "400"]);
    // Idle: nothing sent.
    let mut idle = Raw::connect(&eddy).await;
    let t = Instant::now();
    idle.expect_closed().await;
    assert!(
        t.elapsed() >= Duration::from_millis(350),
        "{:?}",
        t.elapsed()
    );
    // Stalled mid-frame: a header promising a body that never comes.
    let mut stalled = Raw::connect(&eddy).await;
    let mut h = Vec::new();
    for w in [2u32, 7, 40, 40] {
        h.extend_from_slice(&w.to_le_bytes());
    }
    h.push(0);
    tokio::io::AsyncWriteExt::write_all(&mut stalled.s, &h)
        .await
        .unwrap();
    stalled.expect_closed().await;
    // Busy: requests within the deadline keep the connection.
    let mut busy = Raw::connect(&eddy).await;
    for i in 0..5 {
        busy.send_request(&list_orgs(Some(i), 50), 2).await;
        assert_eq!(error_of(&busy.recv_response(None).await.1).0, 9002);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_connections_and_metrics_per_type() {
    let eddy = start(&["--num-shards", "1"]);
    let mut tasks = Vec::new();
    for i in 0..120u64 {
        let addr = eddy.addrs();
        tasks.push(tokio::spawn(async move {
            let s = tokio::net::TcpStream::connect(addr.client).await.unwrap();
            let mut raw = Raw {
                s: {
                    s.set_nodelay(true).unwrap();
                    s
                },
            };
            raw.send_identify(
                &IdentifyRequest {
                    correlation_id: Some(u128::from(i)),
                    public_key: None,
                    nonce: None,
                    signature: None,
                    api_key: None,
                    known_dict_sha256: None,
                },
                2,
            )
            .await;
            let (_, id) = raw.recv_identify().await;
            assert_eq!(id.correlation_id, Some(u128::from(i)));
            for j in 0..3u32 {
                raw.send_request(&list_orgs(Some(u128::from(j)), 1 + i), 2)
                    .await;
                let (_, resp) = raw.recv_response(None).await;
                assert_eq!(resp.correlation_id(), Some(u128::from(j)));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // A request is counted once its answer is written, so the last answers' counts may land
    // a moment after the client read them: wait for the totals (bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (status, body) = loop {
        let (status, body) = eddy_tests::http_get(eddy.addrs().http, "/metrics").unwrap();
        let settled = body.contains(
            "eddy_request_duration_seconds_count{protocol=\"event\",command=\"list_orgs\"} 360",
        ) && body.contains(
            "eddy_request_duration_seconds_count{protocol=\"event\",command=\"identify\"} 120",
        );
        if settled || std::time::Instant::now() > deadline {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status, 200);
    assert!(
        body.contains("eddy_requests_total{protocol=\"event\",command=\"identify\"} 120"),
        "{body}"
    );
    assert!(body.contains("eddy_requests_total{protocol=\"event\",command=\"list_orgs\"} 360"));
    assert!(
        body.contains("eddy_request_errors_total{protocol=\"event\",command=\"list_orgs\"} 360")
    );
    assert!(body.contains(
        "eddy_request_duration_seconds_count{protocol=\"event\",command=\"identify\"} 120"
    ));
    assert!(body.contains("eddy_requests_total{protocol=\"event\",command=\"write\"} 0"));
}
