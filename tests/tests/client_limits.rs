//! The client ports against an attacker's connections (issue 36): one address cannot take
//! every connection of a port (`--max-connections-per-ip`), while well-behaved clients are
//! served. Real processes, real sockets.
// Metric samples compared here are small counts, exact in an f64.
#![allow(clippy::float_cmp)]

mod event_support;
mod stream_support;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use celeriant_client_tokio::json_event;
use celeriant_wal::aggregate_key::AggregateKey;
use tokio::io::AsyncReadExt as _;
use tokio::net::{TcpSocket, TcpStream};

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
