//! The `eddy serve` processes of a chaos run, one per namespace (`ip netns exec`), each on
//! its namespace's address with fixed ports, peers named by their proxy stand-ins. Stderr
//! goes to `<run dir>/node<i>.log`, appended across restarts. A member a membership change
//! adds gets a node number past the founders' and is started with `--join`, its peers the
//! members of that moment.

use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::net::Net;

pub const STREAM_PORT: u16 = 8090;
pub const CLIENT_PORT: u16 = 8091;
pub const HTTP_PORT: u16 = 8080;
pub const REPLICATION_PORT: u16 = 10001;
/// Entries between two compactions of an event shard's Raft log in a chaos cluster: small,
/// so a wiped or long-down node copies shards from a peer for its snapshots within a run.
pub const EVENT_COMPACT_ENTRIES: u64 = 500;

/// The processes; killed on drop.
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    /// Every node number the run may use (founders first).
    slots: u8,
    children: Vec<Option<Child>>,
    namespaces: Vec<String>,
    ips: Vec<std::net::Ipv4Addr>,
    stand_ins: Vec<std::net::Ipv4Addr>,
    peers: Vec<Vec<String>>,
    /// Started with `--join` (added at run time, not a founder).
    joins: Vec<bool>,
    /// Removed from the cluster: stopped for good ([`Cluster::start`] leaves them down).
    retired: Vec<bool>,
    /// The members' replication certificates (the proxy holds them too).
    certs: eddy_tests::ClusterCerts,
}

impl Cluster {
    /// The founders `1..=nodes` (each other's peers) and room for the members added later
    /// (up to the net's slots).
    pub fn new(
        bin: &Path,
        dir: &Path,
        net: &Net,
        nodes: u8,
        certs: eddy_tests::ClusterCerts,
    ) -> Self {
        let slots = net.slots();
        let peers = (1..=slots)
            .map(|i| {
                (1..=nodes)
                    .filter(|&j| j != i && i <= nodes)
                    .map(|j| format!("{j}={}:{REPLICATION_PORT}", net.alias_ip(j)))
                    .collect()
            })
            .collect();
        Self {
            bin: bin.to_owned(),
            dir: dir.to_owned(),
            slots,
            children: (0..slots).map(|_| None).collect(),
            namespaces: (1..=slots).map(|i| net.namespace(i)).collect(),
            ips: (1..=slots).map(|i| net.node_ip(i)).collect(),
            stand_ins: (1..=slots).map(|i| net.alias_ip(i)).collect(),
            peers,
            joins: vec![false; usize::from(slots)],
            retired: vec![false; usize::from(slots)],
            certs,
        }
    }

    /// Makes node `i` a joining member (`--join`) whose peers are `members`, as an operator
    /// starts a new member for `eddy cluster add`.
    pub fn prepare_join(&mut self, i: u8, members: &[u8]) {
        let slot = usize::from(i - 1);
        self.joins[slot] = true;
        self.peers[slot] = members
            .iter()
            .filter(|&&j| j != i)
            .map(|&j| format!("{j}={}", self.replication_addr(j)))
            .collect();
    }

    /// Where the members reach node `i`'s replication port: its stand-in (the proxy).
    pub fn replication_addr(&self, i: u8) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(
            self.stand_ins[usize::from(i - 1)],
            REPLICATION_PORT,
        ))
    }

    /// Every node number the run may use.
    pub fn slots(&self) -> u8 {
        self.slots
    }

    /// The server binary (also the `eddy` command line).
    pub fn bin(&self) -> &Path {
        &self.bin
    }
    /// Node `i`'s stream (Iggy) address.
    pub fn stream_addr(&self, i: u8) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.ips[usize::from(i - 1)], STREAM_PORT))
    }

    /// Node `i`'s Celeriant event (client) address.
    pub fn client_addr(&self, i: u8) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.ips[usize::from(i - 1)], CLIENT_PORT))
    }

    fn http_addr(&self, i: u8) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.ips[usize::from(i - 1)], HTTP_PORT))
    }

    pub fn log_path(&self, i: u8) -> PathBuf {
        self.dir.join(format!("node{i}.log"))
    }

    pub fn is_running(&self, i: u8) -> bool {
        self.children[usize::from(i - 1)].is_some()
    }

    /// Starts node `i` (a no-op when it runs, or was removed from the cluster).
    pub fn start(&mut self, i: u8) -> Result<(), String> {
        let slot = usize::from(i - 1);
        if self.children[slot].is_some() || self.retired[slot] {
            return Ok(());
        }
        let data = self.data_dir(i);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))
            .map_err(|e| e.to_string())?;
        let ip = self.ips[slot].to_string();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.namespaces[slot]])
            .arg(&self.bin)
            .arg("serve")
            .arg("--data-dir")
            .arg(&data)
            .args(["--host", &ip, "--advertise-host", &ip])
            .args(["--stream-port", &STREAM_PORT.to_string()])
            .args(["--client-port", &CLIENT_PORT.to_string()])
            .args(["--http-port", &HTTP_PORT.to_string()])
            .args(["--replication-port", &REPLICATION_PORT.to_string()])
            .args(["--node-id", &i.to_string()])
            // The namespaces are private to this test and the workload logs
            // in as the published root: the non-loopback refusal is meant
            // for real deployments.
            .arg("--allow-default-root-password")
            .args([
                "--raft-event-compact-entries",
                &EVENT_COMPACT_ENTRIES.to_string(),
            ]);
        for peer in &self.peers[slot] {
            cmd.args(["--peer", peer]);
        }
        if self.joins[slot] {
            cmd.arg("--join");
        }
        cmd.args(self.certs.flags(u64::from(i)));
        for (k, _) in std::env::vars() {
            if k.starts_with("EDDY_") || k == "RUST_LOG" {
                cmd.env_remove(k);
            }
        }
        cmd.env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        let child = cmd.spawn().map_err(|e| format!("spawn node {i}: {e}"))?;
        self.children[slot] = Some(child);
        Ok(())
    }

    /// Node `i`'s data directory.
    fn data_dir(&self, i: u8) -> PathBuf {
        self.dir.join(format!("node{i}"))
    }

    /// Deletes node `i`'s data directory (the node must be down).
    pub fn wipe(&mut self, i: u8) -> Result<(), String> {
        assert!(!self.is_running(i), "wipe a running node");
        match std::fs::remove_dir_all(self.data_dir(i)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("wipe node {i}: {e}")),
        }
    }

    /// Nodes still rebuilding a lost directory from their peers (their `raft/rebuilding`).
    pub fn rebuilding(&self) -> Vec<u8> {
        (1..=self.slots)
            .filter(|&i| self.data_dir(i).join("raft/rebuilding").exists())
            .collect()
    }

    /// Stops node `i` for good (it was removed from the cluster).
    pub fn retire(&mut self, i: u8) {
        self.kill(i);
        self.retired[usize::from(i - 1)] = true;
    }

    /// Whether node `i` was removed from the cluster (stopped for good).
    pub fn retired(&self, i: u8) -> bool {
        self.retired[usize::from(i - 1)]
    }

    /// SIGKILL node `i` and reap it.
    pub fn kill(&mut self, i: u8) {
        if let Some(mut child) = self.children[usize::from(i - 1)].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Nodes whose process exited on its own (a crash): their numbers and statuses.
    pub fn exited(&mut self) -> Vec<(u8, String)> {
        let mut out = Vec::new();
        for (slot, child) in self.children.iter_mut().enumerate() {
            if let Some(c) = child {
                if let Ok(Some(status)) = c.try_wait() {
                    out.push((
                        u8::try_from(slot + 1).expect("few nodes"),
                        status.to_string(),
                    ));
                    *child = None;
                }
            }
        }
        out
    }

    /// `/health` of node `i`: its body (`leader`, `follower`...) or `None` when unreachable.
    pub async fn health(&self, i: u8) -> Option<String> {
        let addr = self.http_addr(i);
        let fetch = async {
            let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
            s.write_all(b"GET /health HTTP/1.0\r\nhost: x\r\n\r\n")
                .await
                .ok()?;
            let mut raw = String::new();
            s.read_to_string(&mut raw).await.ok()?;
            raw.split_once("\r\n\r\n").map(|(_, b)| b.trim().to_owned())
        };
        tokio::time::timeout(Duration::from_secs(1), fetch)
            .await
            .ok()
            .flatten()
    }

    /// The node whose `/health` says `leader`, if exactly one does.
    pub async fn leader(&self) -> Option<u8> {
        let mut leaders = Vec::new();
        for i in 1..=self.slots {
            if self.is_running(i) && self.health(i).await.as_deref() == Some("leader") {
                leaders.push(i);
            }
        }
        match leaders[..] {
            [one] => Some(one),
            _ => None,
        }
    }

    /// Waits until node `i` answers on its HTTP port.
    pub async fn wait_up(&self, i: u8, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if self.health(i).await.is_some() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 1..=self.slots {
            self.kill(i);
        }
    }
}
