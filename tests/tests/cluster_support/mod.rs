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
    let plan = Plan::new(size, size);
    (0..size)
        .map(|i| plan.start(i, 0..size, extra, false))
        .collect()
}

/// Ports, host addresses and certificates for up to `capacity` members, of which the first
/// `founders` found the cluster; the others join it later (`eddy cluster add`).
pub struct Plan {
    ports: Vec<(u16, u16, u16, u16)>,
    certs: ClusterCerts,
}

impl Plan {
    /// Chooses the ports of `capacity` members and issues their certificates.
    pub fn new(founders: u8, capacity: u8) -> Self {
        assert!(founders <= capacity);
        // Distinct hosts, so each node's ports can be the same numbers; the ports are still
        // chosen free on every host to avoid clashes with other tests, and outside the
        // ephemeral range, so a killed node's ports cannot be taken by a connection before it
        // restarts.
        let ports = (0..capacity)
            .map(|_| (stable_port(), stable_port(), stable_port(), stable_port()))
            .collect();
        let certs = ClusterCerts::issue(server_bin!(), u64::from(capacity));
        Plan { ports, certs }
    }

    /// Member `i`'s host (127.0.0.`i + 1`); its node id is `i + 1`.
    pub fn host(i: u8) -> String {
        format!("127.0.0.{}", i + 1)
    }

    /// Member `i`'s replication address (`host:port`).
    pub fn replication(&self, i: u8) -> String {
        format!("{}:{}", Self::host(i), self.ports[usize::from(i)].3)
    }

    /// Starts member `i` with the members `peers` (itself left out) as its `--peer`s,
    /// `extra` flags, and `--join` when it joins a running cluster.
    pub fn start(
        &self,
        i: u8,
        peers: impl IntoIterator<Item = u8>,
        extra: &[&str],
        join: bool,
    ) -> Node {
        let (stream, client, http, replication) = self.ports[usize::from(i)];
        let mut args = vec![
            "--host".to_owned(),
            Self::host(i),
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
        args.extend(self.certs.flags(u64::from(i) + 1));
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        for j in peers.into_iter().filter(|&j| j != i) {
            args.push("--peer".to_owned());
            args.push(format!("{}={}", j + 1, self.replication(j)));
        }
        if join {
            args.push("--join".to_owned());
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
            certs: self.certs.clone(),
        }
    }
}

/// Runs a test's scenario, failing it if it takes longer than `limit`: every wait in a
/// scenario is bounded, and this bounds them together, so a stuck cluster fails its test
/// (the scenario is dropped, and with it its processes) instead of hanging CI.
pub async fn within(limit: Duration, scenario: impl Future<Output = ()>) {
    tokio::time::timeout(limit, scenario)
        .await
        .unwrap_or_else(|_| panic!("the scenario did not finish within {limit:?}"));
}
