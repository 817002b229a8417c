//! Clusters of real `eddy serve` processes on loopback, one host address per node
//! (127.0.0.1, 127.0.0.2, ...), for the cluster tests.
#![allow(dead_code)] // Each test binary uses part of it.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use eddy_tests::{server_bin, stable_port, ClusterCerts, Eddy, Options};

/// One member: its process and its stream address.
pub struct Node {
    pub eddy: Eddy,
    pub stream: SocketAddr,
    /// The cluster's certificates (each member authenticates its peers with them).
    pub certs: ClusterCerts,
}

/// Starts `size` members that know each other.
pub fn start_cluster(size: u8) -> Vec<Node> {
    start_cluster_with(size, &[])
}

/// Starts `size` members that know each other, each with `extra` flags too.
pub fn start_cluster_with(size: u8, extra: &[&str]) -> Vec<Node> {
    // Distinct hosts, so each node's ports can be the same numbers; the ports are still
    // chosen free on every host to avoid clashes with other tests, and outside the ephemeral
    // range, so a killed node's ports cannot be taken by a connection before it restarts.
    let ports: Vec<(u16, u16, u16, u16)> = (0..size)
        .map(|_| (stable_port(), stable_port(), stable_port(), stable_port()))
        .collect();
    let host = |i: u8| format!("127.0.0.{}", i + 1);
    let certs = ClusterCerts::issue(server_bin!(), u64::from(size));
    (0..size)
        .map(|i| {
            let (stream, client, http, replication) = ports[usize::from(i)];
            let mut args = vec![
                "--host".to_owned(),
                host(i),
                "--stream-port".to_owned(),
                stream.to_string(),
                "--client-port".to_owned(),
                client.to_string(),
                "--http-port".to_owned(),
                http.to_string(),
                "--replication-port".to_owned(),
                replication.to_string(),
                "--node-id".to_owned(),
                (i + 1).to_string(),
            ];
            args.extend(certs.flags(u64::from(i) + 1));
            args.extend(extra.iter().map(|a| (*a).to_owned()));
            for j in (0..size).filter(|&j| j != i) {
                args.push("--peer".to_owned());
                args.push(format!("{}={}:{}", j + 1, host(j), ports[usize::from(j)].3));
            }
            let eddy = Eddy::start_with(
                server_bin!(),
                Options {
                    args,
                    keep_ports: true,
                    ..Options::default()
                },
            );
            let stream = eddy.addrs().stream;
            Node {
                eddy,
                stream,
                certs: certs.clone(),
            }
        })
        .collect()
}

/// Runs a test's scenario, failing it if it takes longer than `limit`: every wait in a
/// scenario is bounded, and this bounds them together, so a stuck cluster fails its test
/// (the scenario is dropped, and with it its processes) instead of hanging CI.
pub async fn within(limit: Duration, scenario: impl Future<Output = ()>) {
    tokio::time::timeout(limit, scenario)
        .await
        .unwrap_or_else(|_| panic!("the scenario did not finish within {limit:?}"));
}
