//! The client ports against an attacker's connections and request bodies (issue 36): one
//! address cannot take every connection of a port (`--max-connections-per-ip`), and request
//! bodies in memory stay within `--max-inflight-request-bytes` whatever clients declare or
//! leave half sent, while well-behaved clients are served. Real processes, real sockets.
// Metric samples compared here are small counts, exact in an f64.
#![allow(clippy::float_cmp)]

mod event_support;
mod stream_support;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use celeriant_client_tokio::json_event;
use celeriant_wal::aggregate_key::AggregateKey;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

const MIB: usize = 1024 * 1024;
/// A MiB as a metric sample compares it.
const MIB_F64: f64 = 1_048_576.0;

/// The resident set of a process, in MiB (`VmRSS` of `/proc/PID/status`).
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib / 1024.0
}

/// A `/metrics` sample (labels included in `series`), or -1 when absent.
async fn metric(http: SocketAddr, series: &str) -> f64 {
    let series = series.to_owned();
    tokio::task::spawn_blocking(move || {
        let (status, body) = eddy_tests::http_get(http, "/metrics").expect("scrape");
        assert_eq!(status, 200);
        eddy_tests::metric_value(&body, &series).unwrap_or(-1.0)
    })
    .await
    .unwrap()
}

/// A connection to `to` from the local address `from` (another loopback address is another
/// client address to the server).
async fn connect_from(from: IpAddr, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    socket.connect(to).await.expect("connect")
}

/// True when the server closes `conn` within `limit` (EOF or reset) without sending anything.
async fn closed_within(conn: &mut TcpStream, limit: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(limit, conn.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// An event-protocol V2 Write header declaring a `body`-byte uncompressed body.
fn event_write_header(body: usize) -> Vec<u8> {
    let len = u32::try_from(body).unwrap().to_le_bytes();
    let mut header = Vec::with_capacity(17);
    header.extend_from_slice(&2u32.to_le_bytes());
    header.extend_from_slice(&3u32.to_le_bytes()); // Write
    header.extend_from_slice(&len);
    header.extend_from_slice(&len);
    header.push(0);
    header
}

/// One event write of a small event through the published client, answered in time.
async fn small_event_write(eddy: &eddy_tests::Eddy, seq: u64) -> Duration {
    let started = Instant::now();
    let mut client = event_support::client(eddy).await;
    let mut event = json_event(1, &serde_json::json!({"seq": seq})).unwrap();
    event.client_seq = seq;
    client
        .write_events(AggregateKey::new(9, 9, u128::from(seq)), vec![event], 5)
        .await
        .expect("a small write is served");
    started.elapsed()
}

/// `--max-connections 64` with silent sockets from one address: the address gets a quarter of
/// the port's slots (the default per-address cap), the rest are closed at accept and counted,
/// and a client from another address is served on every port. Loopback is exempt by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_every_connection_of_a_port() {
    use iggy::prelude::*;
    let eddy = stream_support::server_with(&[
        "--max-connections",
        "64",
        "--http-max-connections",
        "64",
        "--max-connections-per-ip-exempt",
        "",
    ]);
    let addrs = eddy.addrs();
    let attacker: IpAddr = [127, 0, 0, 2].into();
    for (label, port) in [
        ("stream", addrs.stream),
        ("event", addrs.client),
        ("http", addrs.http),
    ] {
        let mut silent = Vec::new();
        for _ in 0..64 {
            silent.push(connect_from(attacker, port).await);
        }
        let mut closed = 0;
        for conn in &mut silent {
            if closed_within(conn, Duration::from_millis(300)).await {
                closed += 1;
            }
        }
        assert_eq!(closed, 48, "{label}: 16 of 64 silent sockets may stay");
        let refused = metric(
            addrs.http,
            &format!("eddy_connections_refused_total{{protocol=\"{label}\",reason=\"per_ip\"}}"),
        )
        .await;
        assert_eq!(refused, 48.0, "{label}");
        // They stay open while a client from another address is served.
        let started = Instant::now();
        match label {
            "stream" => {
                let client = stream_support::root(addrs.stream).await;
                client.ping().await.expect("ping");
            }
            "event" => {
                small_event_write(&eddy, 1).await;
            }
            _ => {
                let (status, _) = tokio::task::spawn_blocking(move || {
                    eddy_tests::http_get(addrs.http, "/health")
                })
                .await
                .unwrap()
                .expect("health");
                assert_eq!(status, 200);
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{label}: the other client waited {:?}",
            started.elapsed()
        );
        drop(silent);
    }

    // Loopback is exempt by default: only --max-connections applies to it.
    let eddy = stream_support::server_with(&["--max-connections-per-ip", "2"]);
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(TcpStream::connect(eddy.addrs().client).await.unwrap());
    }
    for conn in &mut held {
        assert!(
            !closed_within(conn, Duration::from_millis(100)).await,
            "a loopback connection was closed"
        );
    }
    small_event_write(&eddy, 2).await;
}

/// The two probes of issue 36 against a 64 MiB budget: 60 event connections that send only a
/// Write header declaring a 16 MiB body, and 50 that send 8 MiB of a slightly larger body and
/// stall. Before the budget they added about 100 MiB and 450 MiB of RSS (release build,
/// default limits); now the bodies in memory stay within the budget, small requests on both ports are
/// served meanwhile, the stalled frames are closed at their deadline, and a large write from a
/// well-behaved client gets in once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_in_memory_stay_within_the_budget() {
    let budget_mib: u32 = 64;
    let deadline = Duration::from_secs(8);
    let eddy = event_support::start(&[
        "--max-inflight-request-bytes",
        &(u64::from(budget_mib) << 20).to_string(),
        "--client-connection-timeout-ms",
        &deadline.as_millis().to_string(),
    ]);
    let addrs = eddy.addrs();
    small_event_write(&eddy, 1).await;
    let base = rss_mib(eddy.pid());
    let probes_started = Instant::now();

    // Stalled bodies first, so they take the budget.
    let body = 8 * MIB + 4096;
    let mut stalled = Vec::new();
    for _ in 0..50 {
        let mut conn = TcpStream::connect(addrs.client).await.unwrap();
        stalled.push(tokio::spawn(async move {
            let mut frame = event_write_header(body);
            frame.resize(17 + 8 * MIB, 0x5a);
            // Blocks once the server stops reading (no room): the kernel's buffers are not
            // the server's memory.
            let _ = tokio::time::timeout(Duration::from_secs(2), conn.write_all(&frame)).await;
            conn
        }));
    }
    let mut header_only = Vec::new();
    for _ in 0..60 {
        let mut conn = TcpStream::connect(addrs.client).await.unwrap();
        conn.write_all(&event_write_header(16 * MIB)).await.unwrap();
        header_only.push(conn);
    }
    let mut stalled_conns = Vec::new();
    for task in stalled {
        stalled_conns.push(task.await.unwrap());
    }
    let in_flight = metric(addrs.http, "eddy_request_bytes_in_flight").await;
    let peak = rss_mib(eddy.pid());
    let added = peak - base;
    assert!(
        in_flight > 0.0 && in_flight <= f64::from(budget_mib) * MIB_F64,
        "reserved {in_flight} of {budget_mib} MiB"
    );
    assert!(
        metric(addrs.http, "eddy_request_budget_waits_total").await >= 1.0,
        "frames waited for room"
    );
    assert!(
        added < f64::from(budget_mib + 64),
        "110 hostile connections added {added:.1} MiB of RSS ({base:.1} -> {peak:.1}) with a \
         {budget_mib} MiB budget"
    );
    eprintln!("probes added {added:.1} MiB of RSS ({base:.1} -> {peak:.1} MiB)");

    // Small requests on both ports are served meanwhile.
    assert!(small_event_write(&eddy, 2).await < Duration::from_secs(3));
    let mut pinger = stream_support::raw::Raw::logged_in(addrs.stream, "iggy", "iggy").await;
    let ping = eddy_codec::stream::Request::Ping(eddy_codec::stream::commands::ping::Ping);
    assert_eq!(pinger.call(&ping).await.code(), 0);
    assert!(
        probes_started.elapsed() < deadline,
        "the probes took too long to check anything before their deadline"
    );

    // A large write (a 1 MiB event) waits for room: every hostile frame is closed at its
    // deadline (the waiting ones without room counted as refusals), then it is stored.
    let large = tokio::spawn({
        let addr = event_support::addr(&eddy);
        async move {
            let mut client = celeriant_client_tokio::CeleriantClient::connect(&addr)
                .await
                .unwrap()
                .with_timeout(Duration::from_secs(30));
            let mut event = json_event(1, &serde_json::json!({"pad": "y".repeat(MIB)})).unwrap();
            event.client_seq = 1;
            let started = Instant::now();
            client
                .write_events(AggregateKey::new(9, 9, 100), vec![event], 5)
                .await
                .map(|_| started.elapsed())
        }
    });
    for conn in stalled_conns.iter_mut().chain(header_only.iter_mut()) {
        assert!(
            closed_within(conn, deadline + Duration::from_secs(5)).await,
            "a hostile frame outlived its deadline"
        );
    }
    let took = large.await.unwrap().expect("the large write is stored");
    assert!(
        took < Duration::from_secs(15),
        "the large write took {took:?}"
    );
    assert!(metric(addrs.http, "eddy_request_budget_refusals_total").await >= 1.0);
    assert_eq!(
        metric(addrs.http, "eddy_request_bytes_in_flight").await,
        0.0,
        "everything given back"
    );
}

/// A stream frame that finds no room within 5 s is answered `TransientNotAccepted` (58) and
/// its body skipped; the published SDK replays it on the same connection, and once the frame
/// holding the budget is gone (its session idle-closed) the send is stored exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_frames_without_room_are_refused_and_replayed_by_the_sdk() {
    let eddy = stream_support::server_with(&[
        "--max-inflight-request-bytes",
        &(16 * MIB).to_string(),
        "--stream-idle-timeout-ms",
        "8000",
    ]);
    let addrs = eddy.addrs();
    // A session declares a 16 MiB frame (the whole budget), sends half of it and stalls.
    let mut hog = stalled_stream_frame(addrs.stream, 16 * MIB, 8 * MIB).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        metric(addrs.http, "eddy_request_bytes_in_flight").await,
        16.0 * MIB_F64
    );

    // A 1 MiB send waits, is refused with 58 after 5 s, replayed by the SDK, and lands once
    // the hog's session is closed at its idle timeout.
    let producer = stream_support::root(addrs.stream).await;
    let took = send_sixteen(&producer).await;
    assert!(took >= Duration::from_secs(5), "it did not wait: {took:?}");
    assert!(
        metric(addrs.http, "eddy_request_budget_refusals_total").await >= 1.0,
        "answered TransientNotAccepted at least once"
    );
    assert!(
        metric(
            addrs.http,
            "eddy_request_errors_total{protocol=\"stream\",command=\"SEND_MESSAGES\"}"
        )
        .await
            >= 1.0
    );
    assert!(hog.closed_within(Duration::from_secs(5)).await.is_some());
    assert_eq!(stored(&producer).await, 16, "stored exactly once");
}

/// A logged-in session that declares a large stream frame, sends part of it and stalls holds
/// its room in the request budget only for `--stream-frame-timeout-ms` (here 1 s, with a
/// session idle timeout of a minute): then its connection is closed, the room is given back
/// and the port serves a large send from the published SDK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_frame_keeps_its_room_only_until_the_frame_deadline() {
    let eddy = stream_support::server_with(&[
        "--max-inflight-request-bytes",
        &(8 * MIB).to_string(),
        "--stream-idle-timeout-ms",
        "60000",
        "--stream-frame-timeout-ms",
        "1000",
    ]);
    let addrs = eddy.addrs();
    // The whole budget declared, a quarter of it sent, then nothing (the socket stays open).
    let mut hog = stalled_stream_frame(addrs.stream, 8 * MIB, 2 * MIB).await;
    let held_from = Instant::now();
    let mut in_flight = 0.0;
    while in_flight == 0.0 && held_from.elapsed() < Duration::from_millis(900) {
        in_flight = metric(addrs.http, "eddy_request_bytes_in_flight").await;
    }
    assert_eq!(
        in_flight,
        8.0 * MIB_F64,
        "the stalled frame holds the whole budget"
    );

    let closed = hog.closed_within(Duration::from_secs(5)).await;
    assert!(closed.is_some(), "the stalled frame outlived its deadline");
    let held = held_from.elapsed();
    assert!(
        held < Duration::from_secs(4),
        "held for {held:?} with a 1 s frame deadline"
    );
    assert_eq!(
        metric(addrs.http, "eddy_request_bytes_in_flight").await,
        0.0,
        "the room is given back"
    );

    // A large send gets in at once, stored exactly once.
    let producer = stream_support::root(addrs.stream).await;
    let took = send_sixteen(&producer).await;
    assert!(took < Duration::from_secs(4), "the send waited {took:?}");
    assert_eq!(stored(&producer).await, 16);
}

/// Creates stream "s" / topic "t" (one partition) on the server at `stream`, then logs a raw
/// session in that declares a `frame`-byte stream frame (header included), sends `sent` bytes
/// of its body and stalls with the socket open.
async fn stalled_stream_frame(
    stream: SocketAddr,
    frame: usize,
    sent: usize,
) -> stream_support::raw::Raw {
    use eddy_wire::stream::Operation;
    let admin = stream_support::root(stream).await;
    stream_support::stream_and_topic(&admin, "s", "t", 1).await;
    let mut hog = stream_support::raw::Raw::logged_in(stream, "iggy", "iggy").await;
    let header = hog.header(Operation::NonReplicated, 101, &vec![0u8; frame - 256]);
    hog.write(&header.encode()).await;
    hog.write(&vec![0u8; sent]).await;
    hog
}

/// Sends 16 messages of 64 KiB (one 1 MiB frame) to "s" / "t" partition 0 through the SDK
/// (its replays included); returns how long until it was stored.
async fn send_sixteen(producer: &iggy::prelude::IggyClient) -> Duration {
    use iggy::prelude::*;
    let started = Instant::now();
    producer
        .send_messages(
            &stream_support::named("s"),
            &stream_support::named("t"),
            &Partitioning::partition_id(0),
            &mut stream_support::sized_messages("big", 16, 64 * 1024),
        )
        .await
        .expect("the send is stored");
    started.elapsed()
}

/// Messages stored in "s" / "t" partition 0 (up to 100).
async fn stored(producer: &iggy::prelude::IggyClient) -> usize {
    use iggy::prelude::*;
    producer
        .poll_messages(
            &stream_support::named("s"),
            &stream_support::named("t"),
            Some(0),
            &Consumer::new(stream_support::id(1)),
            &PollingStrategy::offset(0),
            100,
            false,
        )
        .await
        .unwrap()
        .messages
        .len()
}
