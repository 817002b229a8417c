//! The event protocol on a three-node cluster of real `eddy serve` processes, driven by the
//! published Celeriant client: a pool seeded with a follower is redirected to the leader
//! (`WRITE_NOT_LEADER` with its address; a raw V3 client gets the same for writes, trims,
//! deletes and schema registrations, each with its code), followers serve committed reads, the leader gets
//! SIGKILL while 100 OCC writers with idempotency keys write, a new leader takes the writes,
//! and afterwards every acknowledged event is present exactly once on every member, versions
//! contiguous; the killed member restarts and catches up, and a member whose data directory
//! was lost is rebuilt from its peers. The shard groups' logs are compacted every 64 entries,
//! so the rebuilt member gets snapshots and copies the shards' records from the leader.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster_support::{start_cluster_with, within, Node};
use crate::event_support::{error_of, Raw};
use celeriant_client_tokio::{
    CeleriantClient, CeleriantPool, ClientError, PoolOptions, ServerError, WatchConnection,
    WatchOptions, WriteEventsOptions,
};
use celeriant_msg::process_client_requests::ClientRequest;
use celeriant_msg::process_client_responses::ClientResponse;
use celeriant_msg::request::read_filters::ReadFilters;
use celeriant_msg::request::requests::{
    AggregateDetailsRequest, DeleteRequest, ReadRequest, RegisterSchemaRequest,
    SingleAggregateDelete, SingleAggregateWrite, TrimStartRequest, WatchRequest, WriteRequest,
};
use celeriant_wal::aggregate_key::AggregateKey;
use celeriant_wal::schema_key::SchemaKey;
use eddy_tests::http_get;

const WRITERS: u64 = 100;
const WRITES_EACH: u64 = 30;

/// The member answering `/health` as the leader, once one is elected.
fn leader(nodes: &[Option<Node>]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for (i, n) in nodes.iter().enumerate() {
            let Some(n) = n else { continue };
            if let Ok((200, body)) = http_get(n.eddy.addrs().http, "/health") {
                if body.contains("leader") {
                    return i;
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader elected");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn client_addr(n: &Node) -> String {
    n.eddy.addrs().client.to_string()
}

fn key(writer: u64) -> AggregateKey {
    AggregateKey::new(7, 8, u128::from(writer) + 1)
}

fn event(
    writer: u64,
    seq: u64,
) -> celeriant_wal::datablocks::datablock_aggregate_event::DatablockAggregateEvent {
    let mut e = celeriant_client_tokio::json_event(1, &serde_json::json!({"w": writer, "s": seq}))
        .expect("event encodes");
    e.client_seq = seq;
    e
}

/// Every event of `key` on the member at `addr`: (version, client_seq) per batch, read until
/// it holds at least `want` batches (a follower applies what is committed a moment later).
async fn events_on(addr: &str, key: &AggregateKey, want: usize) -> Vec<(u64, u64)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut found = Vec::new();
        if let Ok(c) = CeleriantClient::connect(addr).await {
            let mut c = c.with_timeout(REQUEST_LIMIT);
            let mut from = 1;
            loop {
                let Ok(page) = c
                    .read(ReadRequest {
                        correlation_id: None,
                        aggregate_key: key.clone(),
                        filters: ReadFilters::new(from),
                    })
                    .await
                else {
                    break;
                };
                for b in &page.event_batches {
                    for e in &b.events {
                        found.push((b.aggregate_version, e.client_seq));
                    }
                }
                match page.next_aggregate_version {
                    Some(next) if next > from && !page.event_batches.is_empty() => from = next,
                    _ => break,
                }
            }
        }
        if found.len() >= want || Instant::now() >= deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An aggregate's (lowest version kept, deleted) on the member at `addr`, once it shows what
/// `done` accepts (a follower applies a moment after the leader), within 30 s.
async fn details_on(
    addr: &str,
    key: &AggregateKey,
    done: impl Fn(u64, bool) -> bool,
) -> (u64, bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = None;
    loop {
        if let Ok(c) = CeleriantClient::connect(addr).await {
            let mut c = c.with_timeout(REQUEST_LIMIT);
            if let Ok(d) = c
                .aggregate_details(AggregateDetailsRequest {
                    correlation_id: None,
                    aggregate_key: key.clone(),
                })
                .await
            {
                let seen = (d.min_aggregate_version, d.is_deleted);
                if done(seen.0, seen.1) {
                    return seen;
                }
                last = Some(seen);
            }
        }
        assert!(
            Instant::now() < deadline,
            "{addr}: details of {key:?} stayed {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Read-your-writes through every member: on one bare connection per member, each write
/// (forwarded when that member does not lead the key's shard) is followed at once by a read
/// and a details request on the same connection, which must show it. Keys spread over the
/// shards, so each member reads some as a follower of the shard's group, right after the
/// leader acknowledged (the follower's record may still sit in its log's queue then).
async fn read_your_writes_on_every_member(addrs: &[String]) {
    const KEYS: u64 = 6;
    const VERSIONS: u64 = 4;
    for (m, addr) in addrs.iter().enumerate() {
        let mut c = CeleriantClient::connect(addr)
            .await
            .unwrap()
            .with_timeout(REQUEST_LIMIT);
        for version in 1..=VERSIONS {
            for k in 0..KEYS {
                let key = key(3000 + 100 * m as u64 + k);
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    let written = c
                        .write_events_with(
                            key.clone(),
                            vec![event(k, version)],
                            1,
                            WriteEventsOptions {
                                allow_create: version == 1,
                                expected_version: Some(version - 1),
                                enforce_client_idempotency: true,
                            },
                        )
                        .await;
                    match written {
                        Ok(r) => {
                            assert_eq!(r.max_aggregate_version, Some(version));
                            break;
                        }
                        // Landed while its answer was lost: the retry finds it.
                        Err(ClientError::Server(ServerError::Write { error_message, .. }))
                            if error_message
                                .contains(&format!("\"current_aggregate_version\":{version}")) =>
                        {
                            break
                        }
                        Err(e) => {
                            assert!(Instant::now() < deadline, "member {m}: write {e:?}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
                let page = c
                    .read(ReadRequest {
                        correlation_id: None,
                        aggregate_key: key.clone(),
                        filters: ReadFilters::new(1),
                    })
                    .await
                    .unwrap_or_else(|e| panic!("member {m}: read after write {version}: {e:?}"));
                let last = page.event_batches.iter().map(|b| b.aggregate_version).max();
                assert_eq!(last, Some(version), "member {m} read its own write late");
                let details = c
                    .aggregate_details(AggregateDetailsRequest {
                        correlation_id: None,
                        aggregate_key: key.clone(),
                    })
                    .await
                    .unwrap_or_else(|e| panic!("member {m}: details after {version}: {e:?}"));
                assert_eq!(details.max_aggregate_version, version, "member {m}");
            }
        }
    }
}

/// What one writer was told: the client_seqs acknowledged, and the last one written (acked,
/// or found written after an answer that did not come).
#[derive(Default, Debug)]
struct Told {
    acked: Vec<u64>,
    last: u64,
    /// Acknowledged after the leader was killed.
    acked_after_kill: usize,
}

/// Acknowledgements so far (all writers), and whether the leader was killed.
#[derive(Default)]
struct Progress {
    acked: AtomicU64,
    killed: AtomicBool,
}

/// Writes `WRITES_EACH` events to its own aggregate, one per request, each with OCC on the
/// version it expects and the client's idempotency key; an error is an unknown outcome,
/// retried with the same event: a retry of a write that landed is refused as a duplicate or
/// a version conflict, and the writer moves on.
async fn writer(
    pool: Arc<CeleriantPool>,
    w: u64,
    stop_by: Instant,
    progress: Arc<Progress>,
) -> Told {
    let mut told = Told::default();
    let mut seq = 1;
    while seq <= WRITES_EACH && Instant::now() < stop_by {
        let r = pool
            .write_events_with(
                key(w),
                vec![event(w, seq)],
                u128::from(w) + 100,
                WriteEventsOptions {
                    allow_create: true,
                    expected_version: Some(seq - 1),
                    enforce_client_idempotency: true,
                },
            )
            .await;
        match r {
            Ok(resp) => {
                assert_eq!(resp.max_aggregate_version, Some(seq), "writer {w}");
                told.acked.push(seq);
                told.last = seq;
                progress.acked.fetch_add(1, Ordering::SeqCst);
                if progress.killed.load(Ordering::SeqCst) {
                    told.acked_after_kill += 1;
                }
                seq += 1;
            }
            Err(e) => {
                // The event landed before its answer was lost: OCC finds version `seq`, or the
                // idempotency key finds client_seq `seq`.
                let landed = match &e {
                    ClientError::Server(ServerError::Write { error_message, .. }) => {
                        error_message.contains(&format!("\"current_aggregate_version\":{seq}"))
                            || error_message.contains(&format!("\"last_client_seq\":{seq}"))
                    }
                    _ => false,
                };
                if landed {
                    told.last = seq;
                    seq += 1;
                } else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    told
}

/// How long one request may wait for its answer.
const REQUEST_LIMIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn event_writes_survive_the_leaders_sigkill_on_three_nodes() {
    within(Duration::from_secs(300), Box::pin(scenario())).await;
}

async fn scenario() {
    let mut nodes: Vec<Option<Node>> =
        start_cluster_with(3, &["--raft-event-compact-entries", "64"])
            .into_iter()
            .map(Some)
            .collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| client_addr(n.as_ref().unwrap()))
        .collect();

    // A bare client connection (which follows no redirect) to a follower is served: the
    // follower forwards each change to its shard's leader and relays the answer. Right after
    // start a shard's group may have no leader yet: retried until one takes it.
    let lead = leader(&nodes);
    let follower = (0..3).find(|&i| i != lead).unwrap();
    let probe = 2000;
    let mut direct = CeleriantClient::connect(&addrs[follower])
        .await
        .unwrap()
        .with_timeout(REQUEST_LIMIT);
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        match direct
            .write_events_with(
                key(probe),
                vec![event(probe, 1)],
                1,
                WriteEventsOptions {
                    allow_create: true,
                    expected_version: Some(0),
                    enforce_client_idempotency: true,
                },
            )
            .await
        {
            Ok(r) => break r,
            // A write that landed while its answer was lost: its retry finds version 1.
            Err(ClientError::Server(ServerError::Write { error_message, .. }))
                if error_message.contains("\"current_aggregate_version\":1") =>
            {
                break celeriant_msg::response::responses::WriteResponse {
                    correlation_id: None,
                    max_aggregate_version: Some(1),
                };
            }
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "a follower does not take a write: {e:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(first.max_aggregate_version, Some(1));
    // Its refusals come back as the leader decided them: an OCC conflict, not a redirect.
    // ServerBusy (the shard's leadership still moving right after start) is retried.
    let deadline = Instant::now() + Duration::from_secs(30);
    let conflict = loop {
        let answer = direct
            .write_events_with(
                key(probe),
                vec![event(probe, 9)],
                1,
                WriteEventsOptions {
                    allow_create: true,
                    expected_version: Some(0),
                    enforce_client_idempotency: false,
                },
            )
            .await;
        match answer {
            Err(ClientError::ServerBusy) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => break other,
        }
    };
    assert!(
        matches!(&conflict, Err(ClientError::Server(ServerError::Write { error_message, .. }))
            if error_message.contains("\"current_aggregate_version\":1")),
        "{conflict:?}"
    );
    read_your_writes_on_every_member(&addrs).await;
    // A change larger than a replication connection's first frame may be is forwarded too.
    let big =
        celeriant_client_tokio::json_event(1, &serde_json::json!({"blob": "x".repeat(300_000)}))
            .expect("event encodes");
    // Retried while the shard's group cannot commit (ServerBusy: its leadership moving right
    // after start), as a client would; a retry of a write that landed finds version 1.
    let deadline = Instant::now() + Duration::from_secs(30);
    let taken = loop {
        match direct
            .write_events_with(
                key(probe + 2),
                vec![big.clone()],
                1,
                WriteEventsOptions {
                    allow_create: true,
                    expected_version: Some(0),
                    enforce_client_idempotency: true,
                },
            )
            .await
        {
            Ok(r) => break r.max_aggregate_version,
            Err(ClientError::Server(ServerError::Write { error_message, .. }))
                if error_message.contains("\"current_aggregate_version\":1") =>
            {
                break Some(1)
            }
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "a 300 kB write through a follower: {e:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(taken, Some(1));
    // Many writers on the follower at once are all forwarded: the follower bounds its
    // connections to the leader (and its dials, under the leader's cap on handshakes from one
    // address) and queues the rest, instead of failing them over to NOT_LEADER.
    // (60 at once: well past the leader's 8 handshakes per address, and within what the
    // follower's 32 connections carry in the forward timeout on a loaded CI machine.)
    let burst: Vec<_> = (0..60u64)
        .map(|w| {
            let addr = addrs[follower].clone();
            tokio::spawn(async move {
                let mut c = CeleriantClient::connect(&addr)
                    .await
                    .map_err(|e| format!("{e:?}"))?
                    .with_timeout(REQUEST_LIMIT);
                // A redirect is the failure this checks; backpressure (ServerBusy) is retried
                // as a client would, idempotently.
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    let written = c
                        .write_events_with(
                            key(5000 + w),
                            vec![event(5000 + w, 1)],
                            1,
                            WriteEventsOptions {
                                allow_create: true,
                                expected_version: Some(0),
                                enforce_client_idempotency: true,
                            },
                        )
                        .await;
                    match written {
                        Ok(_) => return Ok(()),
                        Err(ClientError::Server(ServerError::Write { error_message, .. }))
                            if error_message.contains("\"current_aggregate_version\":1") =>
                        {
                            return Ok(())
                        }
                        Err(e @ ClientError::NotLeader { .. }) => return Err(format!("{e:?}")),
                        Err(e) if Instant::now() > deadline => return Err(format!("{e:?}")),
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            })
        })
        .collect();
    let mut refused = Vec::new();
    for writer in burst {
        if let Err(e) = writer.await.unwrap() {
            refused.push(e);
        }
    }
    assert!(
        refused.is_empty(),
        "{} of 60 refused: {:?}",
        refused.len(),
        &refused[..refused.len().min(3)]
    );
    // A pool that knows only a follower is served there too.
    let pool = Arc::new(CeleriantPool::new(
        PoolOptions::new(addrs[follower].clone())
            .with_seed_addresses(addrs.clone())
            .with_max_leader_retries(6)
            .with_request_timeout(REQUEST_LIMIT),
    ));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match pool
            .write_events(key(probe + 1), vec![event(probe + 1, 1)], 1)
            .await
        {
            Ok(r) => {
                assert_eq!(r.max_aggregate_version, Some(1));
                break;
            }
            Err(e) => {
                assert!(Instant::now() < deadline, "no write taken: {e:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    // A V3 client on the follower gets its answers in V3: a write, then a trim, a delete
    // and a schema registration, each forwarded.
    let mut raw = Raw::connect(&nodes[follower].as_ref().unwrap().eddy).await;
    let write = ClientRequest::Write(WriteRequest {
        correlation_id: Some(3),
        client_id: 1,
        user_id: None,
        writes: HashMap::from([(
            key(probe),
            SingleAggregateWrite {
                events: vec![event(probe, 2)],
                allow_create: true,
                expected_version: Some(1),
                enforce_client_idempotency: false,
            },
        )]),
    });
    raw.send_request(&write, 3).await;
    let (frame, resp) = tokio::time::timeout(REQUEST_LIMIT, raw.recv_response(None))
        .await
        .expect("the follower answers the V3 write");
    assert_eq!(frame.version, 3);
    assert!(
        matches!(&resp, ClientResponse::Write(w) if w.max_aggregate_version == Some(2) && w.correlation_id == Some(3)),
        "{resp:?}"
    );
    let others = [
        ClientRequest::TrimStart(TrimStartRequest {
            correlation_id: Some(4),
            aggregate_key: key(probe + 1),
            keep_from_aggregate_version: 1,
            client_id: 1,
            user_id: None,
        }),
        ClientRequest::Delete(DeleteRequest {
            correlation_id: Some(5),
            client_id: 1,
            user_id: None,
            deletes: HashMap::from([(
                key(probe + 1),
                SingleAggregateDelete {
                    allow_recreate: true,
                    allow_sequence_continuation: true,
                    expected_version: None,
                },
            )]),
        }),
        ClientRequest::RegisterSchema(RegisterSchemaRequest {
            correlation_id: Some(6),
            client_id: 1,
            user_id: None,
            schema_key: SchemaKey::new(1, 2, 7, 0),
            schema_type: 0,
            schema: r#"{"type":"object"}"#.to_owned(),
        }),
    ];
    for request in others {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            raw.send_request(&request, 3).await;
            let (_, resp) = tokio::time::timeout(REQUEST_LIMIT, raw.recv_response(None))
                .await
                .expect("the follower answers");
            if !matches!(resp, ClientResponse::GenericError(_)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{request:?}: the follower answers {:?}",
                error_of(&resp)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Every member serves what is committed, the follower's forwarded writes included.
    for addr in &addrs {
        assert_eq!(events_on(addr, &key(probe), 2).await, vec![(1, 1), (2, 2)]);
    }

    // A watch on a follower sees writer 0's changes once each, as they commit.
    let mut watch = WatchConnection::connect(
        &addrs[follower],
        WatchRequest {
            correlation_id: None,
            requested_latency_ms: None,
            shard_id: None,
            orgs: None,
            aggregate_types: None,
            aggregates: Some(HashSet::from([key(0).aggregate_id])),
            operation_types: None,
        },
        WatchOptions {
            timeout: Some(Duration::from_secs(10)),
            ..WatchOptions::default()
        },
    )
    .await
    .expect("a follower serves watch");

    // 100 OCC writers; the leader dies while they write.
    let stop_by = Instant::now() + Duration::from_secs(90);
    let progress = Arc::new(Progress::default());
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        tasks.push(tokio::spawn(writer(
            Arc::clone(&pool),
            w,
            stop_by,
            Arc::clone(&progress),
        )));
    }
    // Killed once a fifth of the writes are acknowledged: mid-run.
    while progress.acked.load(Ordering::SeqCst) < WRITERS * WRITES_EACH / 5 {
        assert!(
            Instant::now() < stop_by && !tasks.iter().all(tokio::task::JoinHandle::is_finished),
            "only {} writes acknowledged before the writers stopped",
            progress.acked.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    nodes[lead].as_mut().unwrap().eddy.kill();
    progress.killed.store(true, Ordering::SeqCst);
    let killed_at = Instant::now();
    let mut told = BTreeMap::new();
    for (w, t) in tasks.into_iter().enumerate() {
        told.insert(w as u64, t.await.unwrap());
    }
    let acked: usize = told.values().map(|t| t.acked.len()).sum();
    let after: usize = told.values().map(|t| t.acked_after_kill).sum();
    assert!(after > 0, "writes were acknowledged after the kill");
    eprintln!(
        "{acked} of {} writes acknowledged, {after} after the kill; the writers finished {:?} after it",
        WRITERS * WRITES_EACH,
        killed_at.elapsed()
    );
    assert!(
        told.values().all(|t| t.last == WRITES_EACH),
        "every writer finished after the failover: {told:?}"
    );

    let mut watched = Vec::new();
    while watched.len() < usize::try_from(WRITES_EACH).unwrap() {
        let push = watch
            .next_timeout(Duration::from_secs(20))
            .await
            .expect("the watch stays up")
            .expect("a push for every committed write");
        for e in push.events {
            assert_eq!(e.aggregate_id, key(0).aggregate_id, "filtered");
            if e.operation == 1 {
                watched.push(e.to_aggregate_version.expect("a write's version"));
            }
        }
    }
    assert_eq!(
        watched,
        (1..=WRITES_EACH).collect::<Vec<_>>(),
        "each committed write pushed once, in order"
    );

    // Every member (the killed one after it restarts and catches up) holds every writer's
    // events exactly once, versions 1..=n with client_seq = version.
    nodes[lead].as_mut().unwrap().eddy.crash_restart();
    let expected: Vec<(u64, u64)> = (1..=WRITES_EACH).map(|v| (v, v)).collect();
    for (i, addr) in addrs.iter().enumerate() {
        for (w, t) in &told {
            let got = events_on(addr, &key(*w), expected.len()).await;
            assert_eq!(got, expected, "member {i}, writer {w} (told {t:?})");
        }
    }

    // A trim and a delete go through the leader's log like writes: every member applies
    // them alike.
    pool.trim_start(TrimStartRequest {
        correlation_id: None,
        aggregate_key: key(1),
        keep_from_aggregate_version: 11,
        client_id: 101,
        user_id: None,
    })
    .await
    .expect("trim through the leader");
    pool.delete(DeleteRequest {
        correlation_id: None,
        client_id: 102,
        user_id: None,
        deletes: HashMap::from([(
            key(2),
            SingleAggregateDelete {
                allow_recreate: false,
                allow_sequence_continuation: false,
                expected_version: Some(WRITES_EACH),
            },
        )]),
    })
    .await
    .expect("delete through the leader");
    for addr in &addrs {
        details_on(addr, &key(1), |min, _| min == 11).await;
        details_on(addr, &key(2), |_, deleted| deleted).await;
    }

    // A member whose data directory is lost is rebuilt from its peers: the shard groups' logs
    // were compacted long ago, so it gets snapshots and copies the shards' records (the trim
    // and the delete included) from the leader before installing them.
    let now_leading = leader(&nodes);
    let wiped = (0..3).find(|&i| i != now_leading).unwrap();
    {
        let node = nodes[wiped].as_mut().unwrap();
        node.eddy.kill();
        std::fs::remove_dir_all(node.eddy.data_dir()).unwrap();
        node.eddy.restart();
    }
    for (w, t) in told.iter().filter(|(w, _)| !matches!(**w, 1 | 2)) {
        let got = events_on(&addrs[wiped], &key(*w), expected.len()).await;
        assert_eq!(
            got, expected,
            "wiped member {wiped}, writer {w} (told {t:?})"
        );
    }
    details_on(&addrs[wiped], &key(1), |min, _| min == 11).await;
    details_on(&addrs[wiped], &key(2), |_, deleted| deleted).await;
    let copied = nodes[wiped]
        .as_ref()
        .unwrap()
        .eddy
        .log()
        .wait_for(Duration::from_secs(10), |l| {
            l.contains("event shard records copied; installing the snapshot")
        });
    assert!(
        copied.is_some(),
        "the wiped member was rebuilt without a snapshot copy: were the logs compacted?"
    );
    let (_, metrics) = http_get(nodes[wiped].as_ref().unwrap().eddy.addrs().http, "/metrics")
        .expect("metrics of the rebuilt member");
    let counter = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from /metrics"))
    };
    assert!(counter("eddy_cluster_event_snapshot_copies_total ") >= 1);
    assert!(counter("eddy_cluster_event_snapshot_records_copied_total ") > 0);
}
