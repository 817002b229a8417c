//! The replication port: connections between cluster members.
//!
//! Each node dials every peer and sends its engine messages on that connection only; frames
//! from a peer arrive on the connection the peer dialled. Both sides open with a greeting
//! ([`eddy_consensus::wire::Hello`]): the node id, the cluster fingerprint (the sorted member
//! ids: a node configured for another cluster is refused) and the addresses clients reach the
//! node on, which the [`Directory`] keeps for redirects and `GET_CLUSTER_METADATA`.
//!
//! Sending never blocks the consensus thread: frames go to a bounded queue per peer and are
//! dropped when it is full or the peer is down (the engine retransmits what matters); a failed
//! connection is reported to the engine as unreachable and redialled with a capped backoff.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use eddy_consensus::wire::{self, Frame, Hello};
use eddy_consensus::{GroupId, NodeId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Frames queued per peer before new ones are dropped.
pub const PEER_QUEUE_FRAMES: usize = 4096;
/// Deadline for a connection's greeting, and for dialling a peer.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait between two dials of an unreachable peer.
pub const MAX_REDIAL: Duration = Duration::from_secs(1);

/// Property keys of the greeting.
pub mod props {
    /// Address Iggy clients reach the node on (`host:port`).
    pub const STREAM: &str = "stream";
    /// Address Celeriant clients reach the node on.
    pub const CLIENT: &str = "client";
    /// The node's HTTP address.
    pub const HTTP: &str = "http";
    /// The node's server version.
    pub const VERSION: &str = "version";
    /// The event store's layout every member must share (shard count, routing rule, reserved
    /// coordinator shard, compression dictionary hash).
    pub const EVENTS: &str = "events";
}

/// The fingerprint of a cluster: its sorted member ids, hashed.
pub fn fingerprint(members: &[NodeId]) -> u64 {
    let mut ids = members.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut bytes = Vec::with_capacity(ids.len() * 8);
    for id in ids {
        bytes.extend_from_slice(&id.to_le_bytes());
    }
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// What a member is known to be: its greeting and when it was last heard from.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    /// Its greeting.
    pub hello: Hello,
    /// Last frame received from it.
    pub last_seen: Instant,
    /// Whether this node's connection to it is up.
    pub connected: bool,
}

/// Every member's greeting, this node's included, readable from any thread.
#[derive(Debug, Clone, Default)]
pub struct Directory(Arc<RwLock<BTreeMap<NodeId, PeerInfo>>>);

impl Directory {
    /// A member's latest information.
    pub fn get(&self, node: NodeId) -> Option<PeerInfo> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&node)
            .cloned()
    }

    /// Every member's latest information.
    pub fn all(&self) -> BTreeMap<NodeId, PeerInfo> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn update(&self, node: NodeId, f: impl FnOnce(&mut PeerInfo), hello: impl FnOnce() -> Hello) {
        let mut map = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let entry = map.entry(node).or_insert_with(|| PeerInfo {
            hello: hello(),
            last_seen: Instant::now(),
            connected: false,
        });
        f(entry);
    }

    fn learn(&self, hello: &Hello) {
        let h = hello.clone();
        self.update(
            hello.node_id,
            |p| {
                p.hello = h;
                p.last_seen = Instant::now();
            },
            || hello.clone(),
        );
    }

    fn seen(&self, node: NodeId) {
        if let Some(p) = self
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&node)
        {
            p.last_seen = Instant::now();
        }
    }

    fn connected(&self, node: NodeId, up: bool) {
        if let Some(p) = self
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&node)
        {
            p.connected = up;
        }
    }
}

/// Where engine messages for the consensus thread go.
pub trait Inbox: Send + Sync + 'static {
    /// Messages from a peer.
    fn receive(&self, from: NodeId, messages: Vec<(GroupId, Bytes)>);
    /// A peer's connection failed.
    fn unreachable(&self, peer: NodeId);
    /// A peer came back without its state (see `incarnation`).
    fn peer_lost_state(&self, peer: NodeId) {
        let _ = peer;
    }
    /// A peer knew another incarnation of this node: this node lost its state.
    fn lost_own_state(&self) {}
    /// Answers a peer's out-of-band request (an event shard's records, for a snapshot copy);
    /// called on a blocking thread. By default every request gets an empty answer.
    fn answer(&self, from: NodeId, request: &Bytes) -> Bytes {
        let _ = (from, request);
        Bytes::new()
    }
}

/// Deadline for one out-of-band request's answer, and for dialling for it.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The client side of out-of-band requests to peers: blocking, one connection per use (a
/// snapshot copy runs on a thread of its own).
#[derive(Debug, Clone)]
pub struct Fetcher {
    node_id: NodeId,
    cluster: u64,
    peers: Arc<BTreeMap<NodeId, SocketAddr>>,
}

/// A connection to a peer for out-of-band requests.
#[derive(Debug)]
pub struct FetchConnection {
    socket: std::net::TcpStream,
    buf: BytesMut,
    node_id: NodeId,
    cluster: u64,
}

impl Fetcher {
    /// Connects to `peer`'s replication port.
    ///
    /// # Errors
    /// Not a peer, or it cannot be reached.
    pub fn connect(&self, peer: NodeId) -> std::io::Result<FetchConnection> {
        let addr = self
            .peers
            .get(&peer)
            .ok_or_else(|| std::io::Error::other(format!("node {peer} is not a peer")))?;
        let socket = std::net::TcpStream::connect_timeout(addr, HELLO_TIMEOUT)?;
        socket.set_nodelay(true)?;
        socket.set_read_timeout(Some(FETCH_TIMEOUT))?;
        socket.set_write_timeout(Some(FETCH_TIMEOUT))?;
        Ok(FetchConnection {
            socket,
            buf: BytesMut::with_capacity(64 * 1024),
            node_id: self.node_id,
            cluster: self.cluster,
        })
    }
}

impl FetchConnection {
    /// Sends one request and waits for its answer.
    ///
    /// # Errors
    /// The connection failed, timed out or carried something else than an answer.
    pub fn request(&mut self, request: &[u8]) -> std::io::Result<Bytes> {
        use std::io::{Read, Write};
        self.socket
            .write_all(&wire::encode_fetch(self.node_id, self.cluster, request))?;
        loop {
            match wire::decode(&mut self.buf).map_err(std::io::Error::other)? {
                Some(Frame::Answer(answer)) => return Ok(answer),
                Some(_) => return Err(std::io::Error::other("the peer did not answer")),
                None => {}
            }
            let start = self.buf.len();
            self.buf.resize(start + 64 * 1024, 0);
            let n = self.socket.read(&mut self.buf[start..])?;
            self.buf.truncate(start + n);
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
}

/// The sending half: one queue per peer, fed from the consensus thread.
#[derive(Debug, Clone)]
pub struct Outbox {
    queues: Arc<BTreeMap<NodeId, mpsc::Sender<Bytes>>>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
}

impl Outbox {
    /// Queues a batch for a peer; drops it (and counts) when the queue is full.
    pub fn send(&self, to: NodeId, batch: &[(GroupId, Bytes)]) {
        let Some(queue) = self.queues.get(&to) else {
            return;
        };
        if queue.try_send(wire::encode_raft(batch)).is_err() {
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Batches dropped because a peer's queue was full or closed.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// This node's side of the replication port.
#[derive(Debug, Clone)]
pub struct Transport {
    me: Hello,
    peers: Arc<BTreeMap<NodeId, SocketAddr>>,
    directory: Directory,
    incarnations: Option<Arc<super::incarnation::Incarnations>>,
}

impl Transport {
    /// A transport for node `me` (its greeting) with peers at their replication addresses.
    pub fn new(me: Hello, peers: BTreeMap<NodeId, SocketAddr>) -> Self {
        let directory = Directory::default();
        directory.learn(&me);
        directory.connected(me.node_id, true);
        Transport {
            me,
            peers: Arc::new(peers),
            directory,
            incarnations: None,
        }
    }

    /// Greets with this member's incarnation and those it knows, and reports what peers'
    /// greetings reveal (see `incarnation`).
    #[must_use]
    pub fn with_incarnations(
        mut self,
        incarnations: Arc<super::incarnation::Incarnations>,
    ) -> Self {
        self.incarnations = Some(incarnations);
        self
    }

    /// This node's greeting as of now.
    fn hello(&self) -> Hello {
        let mut hello = self.me.clone();
        if let Some(inc) = &self.incarnations {
            hello.props.extend(inc.props());
        }
        hello
    }

    /// Learns a peer's greeting and tells the node what it revealed.
    fn observe<I: Inbox>(&self, hello: &Hello, inbox: &I) {
        self.directory.learn(hello);
        let Some(inc) = &self.incarnations else {
            return;
        };
        let seen = inc.observe(hello);
        if seen.peer_lost_state {
            tracing::warn!(
                peer = hello.node_id,
                "a peer came back without its state; it is rebuilt from this node's groups"
            );
            inbox.peer_lost_state(hello.node_id);
        }
        if seen.lost_own_state {
            tracing::warn!(peer = hello.node_id, "this node lost its state (a peer knew another incarnation of it): it rebuilds from its peers and does not vote until it has caught up");
            inbox.lost_own_state();
        }
    }

    /// The client of out-of-band requests to this node's peers.
    pub fn fetcher(&self) -> Fetcher {
        Fetcher {
            node_id: self.me.node_id,
            cluster: self.me.cluster,
            peers: Arc::clone(&self.peers),
        }
    }

    /// Answers the out-of-band requests of one connection that opened with a fetch.
    async fn serve_fetches<I: Inbox>(
        &self,
        mut socket: TcpStream,
        mut buf: BytesMut,
        from: NodeId,
        mut request: Bytes,
        inbox: Arc<I>,
        stop: CancellationToken,
    ) {
        loop {
            let answering = Arc::clone(&inbox);
            let Ok(answer) =
                tokio::task::spawn_blocking(move || answering.answer(from, &request)).await
            else {
                return;
            };
            if socket
                .write_all(&wire::encode_answer(&answer))
                .await
                .is_err()
            {
                return;
            }
            let next = tokio::select! {
                () = stop.cancelled() => return,
                frame = tokio::time::timeout(FETCH_TIMEOUT, read_frame(&mut socket, &mut buf)) => frame,
            };
            match next {
                Ok(Ok(Some(Frame::Fetch {
                    node_id,
                    request: r,
                    ..
                }))) if node_id == from => request = r,
                _ => return,
            }
        }
    }

    /// What the members said about themselves.
    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// Starts one dialling task per peer; returns the queues the consensus thread sends on.
    pub fn start_outbound<I: Inbox>(&self, inbox: &Arc<I>, stop: &CancellationToken) -> Outbox {
        let mut queues = BTreeMap::new();
        for (&peer, &addr) in self.peers.iter() {
            let (tx, rx) = mpsc::channel(PEER_QUEUE_FRAMES);
            queues.insert(peer, tx);
            tokio::spawn(dial_loop(
                self.clone(),
                peer,
                addr,
                rx,
                Arc::clone(inbox),
                stop.clone(),
            ));
        }
        Outbox {
            queues: Arc::new(queues),
            dropped: Arc::default(),
        }
    }

    /// Serves one inbound replication connection until it fails or `stop` fires.
    pub async fn serve_inbound<I: Inbox>(
        &self,
        mut socket: TcpStream,
        inbox: Arc<I>,
        stop: CancellationToken,
    ) {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let hello =
            match tokio::time::timeout(HELLO_TIMEOUT, read_frame(&mut socket, &mut buf)).await {
                Ok(Ok(Some(Frame::Hello(h)))) => h,
                Ok(Ok(Some(Frame::Fetch {
                    node_id,
                    cluster,
                    request,
                }))) => {
                    if cluster != self.me.cluster || !self.peers.contains_key(&node_id) {
                        tracing::warn!(
                            peer = node_id,
                            "refusing a request from a node that is not a member"
                        );
                        return;
                    }
                    self.serve_fetches(socket, buf, node_id, request, inbox, stop)
                        .await;
                    return;
                }
                Ok(Ok(Some(Frame::Raft(_) | Frame::Answer(_)))) => {
                    tracing::warn!("replication peer sent messages before its greeting; closing");
                    return;
                }
                Ok(Ok(None)) => return,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "replication greeting refused");
                    return;
                }
                Err(_) => {
                    tracing::debug!("replication greeting timed out");
                    return;
                }
            };
        if let Err(reason) = self.check(&hello) {
            tracing::error!(peer = hello.node_id, reason, "refusing a replication peer");
            return;
        }
        // Greeted with what this node knew before this peer's greeting (a peer that lost its
        // state learns it from that).
        let reply = wire::encode_hello(&self.hello());
        self.observe(&hello, &*inbox);
        if socket.write_all(&reply).await.is_err() {
            return;
        }
        let from = hello.node_id;
        tracing::debug!(peer = from, "replication peer connected");
        loop {
            let frame = tokio::select! {
                () = stop.cancelled() => return,
                frame = read_frame(&mut socket, &mut buf) => frame,
            };
            match frame {
                Ok(Some(Frame::Raft(messages))) => {
                    self.directory.seen(from);
                    inbox.receive(from, messages);
                }
                Ok(Some(Frame::Hello(h))) => self.directory.learn(&h),
                Ok(Some(Frame::Fetch { .. } | Frame::Answer(_))) => {
                    tracing::warn!(
                        peer = from,
                        "a request on a replication connection; closing"
                    );
                    return;
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(peer = from, error = %e, "replication frame refused; closing");
                    return;
                }
            }
        }
    }

    fn check(&self, hello: &Hello) -> Result<(), &'static str> {
        if hello.cluster != self.me.cluster {
            return Err("it was configured for a different cluster (members differ)");
        }
        if !self.peers.contains_key(&hello.node_id) {
            return Err("its node id is not a configured peer");
        }
        let (theirs, ours) = (hello.prop(props::EVENTS), self.me.prop(props::EVENTS));
        if theirs.is_some() && ours.is_some() && theirs != ours {
            tracing::error!(
                peer = hello.node_id,
                peer_layout = theirs.unwrap_or_default(),
                layout = ours.unwrap_or_default(),
                "a peer's event store layout differs from this node's"
            );
            return Err(
                "its event store differs (shard count, routing rule or compression \
                        dictionary): start every member with the same ones",
            );
        }
        Ok(())
    }
}

/// Reads until one frame decodes: `Ok(None)` at a clean end of stream.
async fn read_frame(
    socket: &mut TcpStream,
    buf: &mut BytesMut,
) -> Result<Option<Frame>, FrameError> {
    loop {
        if let Some(frame) = wire::decode(buf)? {
            return Ok(Some(frame));
        }
        if buf.capacity() - buf.len() < 16 * 1024 {
            buf.reserve(64 * 1024);
        }
        let n = socket.read_buf(buf).await?;
        if n == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            };
        }
    }
}

/// Why a replication connection ended.
#[derive(Debug, thiserror::Error)]
enum FrameError {
    #[error("socket error")]
    Io(#[from] std::io::Error),
    #[error("bad frame")]
    Wire(#[from] wire::WireError),
    #[error("connection closed mid-frame")]
    Truncated,
}

async fn dial_loop<I: Inbox>(
    transport: Transport,
    peer: NodeId,
    addr: SocketAddr,
    mut rx: mpsc::Receiver<Bytes>,
    inbox: Arc<I>,
    stop: CancellationToken,
) {
    let mut backoff = Duration::from_millis(50);
    loop {
        if stop.is_cancelled() {
            return;
        }
        match connect(&transport, peer, addr, &*inbox).await {
            Ok(mut socket) => {
                backoff = Duration::from_millis(50);
                transport.directory.connected(peer, true);
                tracing::info!(peer, %addr, "connected to replication peer");
                // Whatever queued while the peer was down is stale: the engine resends.
                while rx.try_recv().is_ok() {}
                let ended = send_loop(&mut socket, &mut rx, &stop).await;
                transport.directory.connected(peer, false);
                match ended {
                    SendEnd::Stopped => return,
                    SendEnd::Failed(e) => {
                        tracing::warn!(peer, %addr, error = %e, "replication connection lost");
                    }
                }
            }
            Err(e) => {
                tracing::debug!(peer, %addr, error = %e, "cannot reach replication peer");
            }
        }
        inbox.unreachable(peer);
        // Drop what queued meanwhile, then wait before redialling.
        while rx.try_recv().is_ok() {}
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_REDIAL);
    }
}

enum SendEnd {
    Stopped,
    Failed(std::io::Error),
}

async fn send_loop(
    socket: &mut TcpStream,
    rx: &mut mpsc::Receiver<Bytes>,
    stop: &CancellationToken,
) -> SendEnd {
    let mut batch: Vec<Bytes> = Vec::with_capacity(64);
    loop {
        let first = tokio::select! {
            () = stop.cancelled() => return SendEnd::Stopped,
            frame = rx.recv() => match frame {
                Some(f) => f,
                None => return SendEnd::Stopped,
            },
        };
        batch.push(first);
        while batch.len() < 64 {
            match rx.try_recv() {
                Ok(f) => batch.push(f),
                Err(_) => break,
            }
        }
        for frame in batch.drain(..) {
            if let Err(e) = socket.write_all(&frame).await {
                return SendEnd::Failed(e);
            }
        }
    }
}

async fn connect<I: Inbox>(
    transport: &Transport,
    peer: NodeId,
    addr: SocketAddr,
    inbox: &I,
) -> std::io::Result<TcpStream> {
    let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "greeting timed out");
    let mut socket = tokio::time::timeout(HELLO_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| timed_out())??;
    socket.set_nodelay(true)?;
    socket
        .write_all(&wire::encode_hello(&transport.hello()))
        .await?;
    let mut buf = BytesMut::with_capacity(4096);
    let answer = tokio::time::timeout(HELLO_TIMEOUT, read_frame(&mut socket, &mut buf))
        .await
        .map_err(|_| timed_out())?;
    match answer {
        Ok(Some(Frame::Hello(hello))) if hello.node_id == peer => {
            if let Err(reason) = transport.check(&hello) {
                return Err(std::io::Error::other(reason));
            }
            transport.observe(&hello, inbox);
            Ok(socket)
        }
        Ok(Some(Frame::Hello(hello))) => Err(std::io::Error::other(format!(
            "expected node {peer} at {addr}, found node {}",
            hello.node_id
        ))),
        Ok(_) => Err(std::io::Error::other("peer did not greet")),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(node_id: NodeId, events: &str) -> Hello {
        Hello {
            node_id,
            cluster: fingerprint(&[1, 2]),
            props: vec![(props::EVENTS.into(), events.into())],
        }
    }

    #[test]
    fn a_peer_with_another_event_store_layout_is_refused() {
        let peers = BTreeMap::from([(2, "127.0.0.2:1".parse().unwrap())]);
        let transport = Transport::new(hello(1, "shards=4"), peers);
        assert!(transport.check(&hello(2, "shards=4")).is_ok());
        let refused = transport.check(&hello(2, "shards=8")).unwrap_err();
        assert!(refused.contains("event store differs"), "{refused}");
        // Members differ, or a stranger: refused too.
        let mut other = hello(2, "shards=4");
        other.cluster = fingerprint(&[1, 2, 3]);
        assert!(transport.check(&other).is_err());
        assert!(transport.check(&hello(3, "shards=4")).is_err());
    }
}
