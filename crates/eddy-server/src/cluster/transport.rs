//! The replication port: connections between cluster members.
//!
//! Each node dials every peer and sends its engine messages on that connection only; frames
//! from a peer arrive on the connection the peer dialled. Both sides open with a greeting
//! ([`eddy_consensus::wire::Hello`]): the node id, the cluster id (fixed at the member's first
//! start, see [`super::incarnation::cluster_id`]), the member list's fingerprint, a nonce of
//! the sending process and the addresses clients reach the node on, which the [`Directory`]
//! keeps for redirects and `GET_CLUSTER_METADATA`.
//!
//! Who a peer is: with peer TLS ([`PeerTls`]) every connection is mutual TLS 1.3 against the
//! cluster CA, a dialler accepts only the certificate of the member it dialled, and an
//! acceptor accepts a first frame only when the member it claims to be is the one its
//! certificate names; a connection then speaks for that member until it closes (a second
//! greeting closes it). Without a valid certificate nothing is read past the handshake.
//! Before that point a connection holds little: the port takes at most
//! `max_peer_connections` at once and [`MAX_UNAUTHENTICATED_PER_ADDRESS`] unproved ones per
//! address, the handshake and first frame must complete within [`HELLO_TIMEOUT`], and a
//! first frame is at most [`wire::MAX_HELLO`] bytes. Two processes that claim the same member
//! (a copied data directory) are told apart by their nonces: while one is live here, the
//! other is refused.
//!
//! Sending never blocks the consensus thread: frames go to a bounded queue per peer and are
//! dropped when it is full or the peer is down (the engine retransmits what matters); a failed
//! connection is reported to the engine as unreachable and redialled with a capped backoff.
//! Receiving is bounded too: a connection's engine messages waiting for the consensus thread
//! hold at most [`PEER_INBOUND_BUDGET`] bytes, after which it stops reading its socket.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use eddy_consensus::wire::{self, Frame, Hello};
use eddy_consensus::{GroupId, NodeId};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::peer_tls::{PeerStream, PeerTls};

/// Frames queued per peer before new ones are dropped.
pub const PEER_QUEUE_FRAMES: usize = 4096;
/// Deadline for a connection's greeting, and for dialling a peer.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait between two dials of an unreachable peer.
pub const MAX_REDIAL: Duration = Duration::from_secs(1);
/// Connections one address may hold on the replication port before they have proved which
/// member they are.
pub const MAX_UNAUTHENTICATED_PER_ADDRESS: u32 = 8;
/// Bytes of one connection's engine messages that may wait for the consensus thread; past
/// it the connection stops reading its socket until the thread catches up. Above the
/// largest frame, so one frame always fits.
pub const PEER_INBOUND_BUDGET: usize = 96 * 1024 * 1024;
/// How long a greeting from a new process of a member waits for that member's older
/// connection to close (a restarted member's old connection ends as it redials) before the
/// newcomer is refused as a duplicate.
pub const DUPLICATE_GRACE: Duration = Duration::from_millis(500);
/// TCP keepalive of replication connections: a connection whose peer vanished (its host
/// lost power, a partition) is found dead after idle + interval × probes, ~5 s, so a member
/// that comes back is not refused for long as a duplicate of its own dead connection.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(2);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_PROBES: u32 = 3;

/// Turns on TCP keepalive on a replication connection (best effort).
fn keepalive(socket: &TcpStream) {
    use rustix::net::sockopt;
    let _ = sockopt::set_socket_keepalive(socket, true)
        .and_then(|()| sockopt::set_tcp_keepidle(socket, KEEPALIVE_IDLE))
        .and_then(|()| sockopt::set_tcp_keepintvl(socket, KEEPALIVE_INTERVAL))
        .and_then(|()| sockopt::set_tcp_keepcnt(socket, KEEPALIVE_PROBES));
}

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
    /// The fingerprint of the member list the sender was configured with (hex).
    pub const MEMBERS: &str = "members";
    /// A random nonce of the sending process, new at every start (hex).
    pub const BOOT: &str = "boot";
    /// In an answering greeting: why the dialler is refused.
    pub const REFUSED: &str = "refused";
    /// The ids the sender's cluster was founded with (`1,2,3`): what a joining member
    /// founds its groups on.
    pub const FOUNDERS: &str = "founders";
    /// In a greeting: the sender is a new member asking to join (its cluster id is
    /// [`super::JOINING`]); it is answered a greeting and the connection closes.
    pub const JOIN: &str = "join";
}

/// The cluster id a joining member greets with: it learns the real one from the answer.
pub const JOINING: u64 = 0;

/// What a joining member learns from a member of the cluster it joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// The cluster's id.
    pub cluster: u64,
    /// The ids it was founded with.
    pub founders: Vec<NodeId>,
    /// The member that answered.
    pub by: NodeId,
}

/// How long a joining member keeps asking before it gives up.
pub const JOIN_PATIENCE: Duration = Duration::from_secs(300);

/// Asks the members at `peers`, in turn, for the cluster's id and founders, as member `me`
/// (with peer TLS, proved by its certificate). A member answers only once the cluster
/// recorded `me` (`eddy cluster add`): until then every one refuses, and this keeps asking,
/// up to [`JOIN_PATIENCE`].
///
/// # Errors
/// No member answered within [`JOIN_PATIENCE`]: the last refusal or failure.
pub async fn join(
    peers: &BTreeMap<NodeId, SocketAddr>,
    me: NodeId,
    tls: Option<&PeerTls>,
) -> std::io::Result<Joined> {
    let deadline = Instant::now() + JOIN_PATIENCE;
    let mut last = std::io::Error::other("no member to ask (give their addresses with --peer)");
    let mut told = false;
    loop {
        for (&peer, &addr) in peers {
            match ask_to_join(peer, addr, me, tls).await {
                Ok(joined) => return Ok(joined),
                Err(e) => {
                    tracing::debug!(peer, %addr, error = %e, "a member did not let this one join");
                    last = e;
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(last);
        }
        if !told {
            tracing::warn!(error = %last, "waiting to be added to the cluster (eddy cluster add {me}=HOST:PORT on a member)");
            told = true;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn ask_to_join(
    peer: NodeId,
    addr: SocketAddr,
    me: NodeId,
    tls: Option<&PeerTls>,
) -> std::io::Result<Joined> {
    let asking = async {
        let socket = TcpStream::connect(addr).await?;
        socket.set_nodelay(true)?;
        let mut socket = match tls {
            Some(tls) => tls.connect(socket, peer).await?,
            None => PeerStream::Plain(socket),
        };
        let hello = Hello {
            node_id: me,
            cluster: JOINING,
            props: vec![(props::JOIN.into(), "1".into())],
        };
        write_flushed(&mut socket, &wire::encode_hello(&hello)).await?;
        let mut buf = BytesMut::with_capacity(4096);
        read_frame(&mut socket, &mut buf, wire::decode_first)
            .await
            .map_err(std::io::Error::other)
    };
    let answer = tokio::time::timeout(HELLO_TIMEOUT, asking)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time"))??;
    let Some(Frame::Hello(hello)) = answer else {
        return Err(std::io::Error::other(
            "closed without an answer: not a recorded member yet, or not proved to be it",
        ));
    };
    if hello.node_id != peer {
        return Err(std::io::Error::other(format!(
            "expected node {peer} at {addr}, found node {}",
            hello.node_id
        )));
    }
    if let Some(reason) = hello.prop(props::REFUSED) {
        return Err(std::io::Error::other(reason.to_owned()));
    }
    let founders = hello
        .prop(props::FOUNDERS)
        .map(|f| {
            f.split(',')
                .map(|id| id.trim().parse::<NodeId>())
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()
        .map_err(|_| std::io::Error::other("the answer's founders do not parse"))?
        .filter(|f| !f.is_empty())
        .ok_or_else(|| std::io::Error::other("the answer names no founders"))?;
    Ok(Joined {
        cluster: hello.cluster,
        founders,
        by: peer,
    })
}

/// The fingerprint of a member list: its sorted ids, hashed.
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

    /// Drops a member that left (its greeting is not news any more).
    fn forget(&self, node: NodeId) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&node);
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

/// Held while a peer's messages wait for the consensus thread; dropped once they are handled
/// (it releases their share of the connection's [`PEER_INBOUND_BUDGET`]).
pub type Hold = Box<dyn Send>;

/// Where engine messages for the consensus thread go.
pub trait Inbox: Send + Sync + 'static {
    /// Messages from a peer; `hold` is dropped once they are handled.
    fn receive(&self, from: NodeId, messages: Vec<(GroupId, Bytes)>, hold: Hold);
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
    /// Answers a peer's request that needs the runtime (a change forwarded to this member as
    /// its shard's leader). `None`: not such a request, [`Inbox::answer`] takes it.
    fn answer_async(&self, from: NodeId, request: &Bytes) -> Option<AsyncAnswer> {
        let _ = (from, request);
        None
    }
}

/// The answer of [`Inbox::answer_async`], computed on the runtime.
pub type AsyncAnswer = std::pin::Pin<Box<dyn std::future::Future<Output = Bytes> + Send>>;

/// Longest a forwarded request waits for its answer (a change's commit included).
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may wait idle in a [`Forwarder`]'s pool (the peer closes one that
/// sent nothing for [`FETCH_TIMEOUT`]).
const FORWARD_IDLE: Duration = Duration::from_secs(20);
/// Connections a [`Forwarder`] has open to one peer at most, each carrying one request at a
/// time; more requests wait for one (within [`FORWARD_TIMEOUT`]). Under the peer's
/// `--max-peer-connections` with room to spare, so forwarding under load never trips it.
pub const FORWARD_CONNECTIONS: usize = 32;
/// Connections a [`Forwarder`] opens to one peer at once: below the peer's
/// [`MAX_UNAUTHENTICATED_PER_ADDRESS`], which refuses more handshakes from one address.
const FORWARD_DIALS: usize = 4;

/// A pooled connection of a [`Forwarder`]: since when it waits, and its read buffer.
type IdleConnection = (Instant, PeerStream, BytesMut);

/// The members this node exchanges with and their replication addresses: the `--peer`
/// flags at start, then kept equal to the members the metadata records
/// ([`Transport::set_peers`]). Only a member in it may greet this node; a dial reads its
/// address at each attempt, so a member that moved is reached at its new address.
#[derive(Debug, Clone, Default)]
pub struct PeerBook(Arc<RwLock<BTreeMap<NodeId, SocketAddr>>>);

impl PeerBook {
    /// A book of `peers`.
    pub fn new(peers: BTreeMap<NodeId, SocketAddr>) -> Self {
        PeerBook(Arc::new(RwLock::new(peers)))
    }

    /// A member's address (`None`: not a peer).
    pub fn get(&self, peer: NodeId) -> Option<SocketAddr> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&peer)
            .copied()
    }

    /// Whether `peer` is a peer.
    pub fn contains(&self, peer: NodeId) -> bool {
        self.get(peer).is_some()
    }

    /// Every peer and its address.
    pub fn all(&self) -> BTreeMap<NodeId, SocketAddr> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn replace(&self, peers: BTreeMap<NodeId, SocketAddr>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = peers;
    }
}

/// Each dialled peer's queue of encoded Raft frames.
type Queues = Arc<RwLock<BTreeMap<NodeId, mpsc::Sender<Bytes>>>>;

/// Starts a peer's dialling task and queue.
#[derive(Clone)]
struct Dialer(Arc<dyn Fn(NodeId) + Send + Sync>);

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dialer")
    }
}

fn not_a_peer(peer: NodeId) -> std::io::Error {
    std::io::Error::other(format!("node {peer} is not a peer"))
}

/// Requests to peers from the runtime (changes forwarded to their shard's leader): over the
/// same authenticated out-of-band connections as fetches, kept open in a small pool per
/// peer, one request at a time on each.
#[derive(Debug, Clone)]
pub struct Forwarder {
    node_id: NodeId,
    cluster: u64,
    peers: PeerBook,
    tls: Option<PeerTls>,
    idle: Arc<Mutex<HashMap<NodeId, Vec<IdleConnection>>>>,
    lanes: Arc<Mutex<BTreeMap<NodeId, Arc<Lane>>>>,
}

/// What bounds the forwarding to one peer: connections in use, and dials in progress.
#[derive(Debug)]
struct Lane {
    connections: tokio::sync::Semaphore,
    dials: tokio::sync::Semaphore,
}

fn busy(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, what.to_owned())
}

impl Forwarder {
    /// Sends `request` to `peer` and waits (at most [`FORWARD_TIMEOUT`]) for its answer.
    /// Never retried here: a request that may have reached the peer is not sent twice.
    ///
    /// # Errors
    /// Not a peer, unreachable, not proved to be that member, or no answer in time.
    pub async fn request(&self, peer: NodeId, request: &[u8]) -> std::io::Result<Bytes> {
        if !self.peers.contains(peer) {
            return Err(not_a_peer(peer));
        }
        let lane = Arc::clone(eddy_log::lock(&self.lanes).entry(peer).or_insert_with(|| {
            Arc::new(Lane {
                connections: tokio::sync::Semaphore::new(FORWARD_CONNECTIONS),
                dials: tokio::sync::Semaphore::new(FORWARD_DIALS),
            })
        }));
        // At most FORWARD_CONNECTIONS requests to a peer at once; the others wait their turn.
        let _in_use = tokio::time::timeout(FORWARD_TIMEOUT, lane.connections.acquire())
            .await
            .map_err(|_| busy("every forwarding connection to the leader stayed busy"))?
            .map_err(std::io::Error::other)?;
        let pooled = {
            let mut idle = eddy_log::lock(&self.idle);
            let conns = idle.entry(peer).or_default();
            conns.retain(|(since, _, _)| since.elapsed() < FORWARD_IDLE);
            conns.pop()
        };
        let (mut conn, mut buf) = if let Some((_, conn, buf)) = pooled {
            (conn, buf)
        } else {
            let _dialing = tokio::time::timeout(HELLO_TIMEOUT, lane.dials.acquire())
                .await
                .map_err(|_| busy("no dial to the leader in time"))?
                .map_err(std::io::Error::other)?;
            (self.dial(peer).await?, BytesMut::with_capacity(4096))
        };
        let frame = wire::encode_fetch(self.node_id, self.cluster, request);
        let exchange = async {
            write_flushed(&mut conn, &frame).await?;
            match read_frame(&mut conn, &mut buf, wire::decode).await {
                Ok(Some(Frame::Answer(answer))) => Ok(answer),
                Ok(_) => Err(std::io::Error::other("the peer did not answer")),
                Err(e) => Err(std::io::Error::other(e)),
            }
        };
        let answer = tokio::time::timeout(FORWARD_TIMEOUT, exchange)
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time")
            })??;
        let mut idle = eddy_log::lock(&self.idle);
        let conns = idle.entry(peer).or_default();
        if conns.len() < FORWARD_CONNECTIONS {
            conns.push((Instant::now(), conn, buf));
        }
        Ok(answer)
    }

    async fn dial(&self, peer: NodeId) -> std::io::Result<PeerStream> {
        let addr = self.peers.get(peer).ok_or_else(|| not_a_peer(peer))?;
        let opening = async {
            let socket = TcpStream::connect(addr).await?;
            socket.set_nodelay(true)?;
            keepalive(&socket);
            let mut conn = match &self.tls {
                Some(tls) => tls.connect(socket, peer).await?,
                None => PeerStream::Plain(socket),
            };
            // A first frame may be at most 64 KiB; a forwarded change may be larger. So the
            // connection opens with an empty request (any answer will do), after which the
            // peer takes requests of any frame size.
            write_flushed(
                &mut conn,
                &wire::encode_fetch(self.node_id, self.cluster, &[]),
            )
            .await?;
            let mut buf = BytesMut::with_capacity(256);
            match read_frame(&mut conn, &mut buf, wire::decode).await {
                Ok(Some(Frame::Answer(_))) => Ok(conn),
                _ => Err(std::io::Error::other(
                    "the peer did not take the connection",
                )),
            }
        };
        tokio::time::timeout(HELLO_TIMEOUT, opening)
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "dial timed out"))?
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
    peers: PeerBook,
    tls: Option<PeerTls>,
}

trait BlockingIo: std::io::Read + std::io::Write + Send {}
impl<T: std::io::Read + std::io::Write + Send> BlockingIo for T {}

/// A connection to a peer for out-of-band requests.
pub struct FetchConnection {
    socket: Box<dyn BlockingIo>,
    buf: BytesMut,
    node_id: NodeId,
    cluster: u64,
}

impl std::fmt::Debug for FetchConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchConnection")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl Fetcher {
    /// Connects to `peer`'s replication port (with peer TLS, only to the member `peer`).
    ///
    /// # Errors
    /// Not a peer, or it cannot be reached.
    pub fn connect(&self, peer: NodeId) -> std::io::Result<FetchConnection> {
        let addr = self.peers.get(peer).ok_or_else(|| not_a_peer(peer))?;
        let socket = std::net::TcpStream::connect_timeout(&addr, HELLO_TIMEOUT)?;
        socket.set_nodelay(true)?;
        socket.set_read_timeout(Some(FETCH_TIMEOUT))?;
        socket.set_write_timeout(Some(FETCH_TIMEOUT))?;
        let socket: Box<dyn BlockingIo> = match &self.tls {
            Some(tls) => Box::new(tls.connect_blocking(socket, peer)?),
            None => Box::new(socket),
        };
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
        self.socket
            .write_all(&wire::encode_fetch(self.node_id, self.cluster, request))?;
        self.socket.flush()?;
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
    queues: Queues,
    dropped: Arc<AtomicU64>,
}

impl Outbox {
    /// Queues a batch for a peer; drops it (and counts) when the queue is full.
    pub fn send(&self, to: NodeId, batch: &[(GroupId, Bytes)]) {
        let queues = self.queues.read().unwrap_or_else(PoisonError::into_inner);
        let Some(queue) = queues.get(&to) else {
            return;
        };
        if queue.try_send(wire::encode_raft(batch)).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Batches dropped because a peer's queue was full or closed.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// What the replication port refused or accepted, for `/metrics`.
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Connections closed at accept: the port's cap, or the address's unproved ones.
    pub refused_limit: AtomicU64,
    /// Connections that did not complete the TLS handshake and a first frame in time, or
    /// sent something else than a greeting or a fetch first.
    pub refused_handshake: AtomicU64,
    /// Connections whose first frame claimed a member their certificate does not name, or
    /// that is no member of this cluster.
    pub refused_identity: AtomicU64,
    /// Greetings refused because another process of the same member is live here.
    pub refused_duplicate: AtomicU64,
    /// Connections that proved which member they are.
    pub authenticated: AtomicU64,
}

/// A member process with a replication connection open here.
#[derive(Debug)]
struct Live {
    boot: String,
    /// Ends that connection (when the same member connects again).
    cancel: CancellationToken,
    connection: u64,
}

/// What the port's connections share: its limits and who is connected.
#[derive(Debug)]
struct PortState {
    connections: Arc<Semaphore>,
    unauthenticated: Mutex<HashMap<IpAddr, u32>>,
    live: Mutex<HashMap<NodeId, Live>>,
    next_connection: AtomicU64,
    counters: Arc<PortCounters>,
}

/// A connection's place among the unproved ones of its address; given back on drop.
struct Unproved<'a> {
    port: &'a PortState,
    ip: IpAddr,
}

impl Drop for Unproved<'_> {
    fn drop(&mut self) {
        let mut map = eddy_log::lock(&self.port.unauthenticated);
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

impl PortState {
    fn new(max_connections: u32) -> Self {
        PortState {
            connections: Arc::new(Semaphore::new(max_connections as usize)),
            unauthenticated: Mutex::default(),
            live: Mutex::default(),
            next_connection: AtomicU64::new(1),
            counters: Arc::default(),
        }
    }

    fn unproved(&self, ip: IpAddr) -> Option<Unproved<'_>> {
        let mut map = eddy_log::lock(&self.unauthenticated);
        let n = map.entry(ip).or_insert(0);
        if *n >= MAX_UNAUTHENTICATED_PER_ADDRESS {
            return None;
        }
        *n += 1;
        Some(Unproved { port: self, ip })
    }
}

/// Why an accepted connection ended before it was served.
enum Refusal {
    /// Nothing worth a line in the log (a scanner, a peer that hung up).
    Quiet(&'static str),
    /// An attempt to be a member this connection could not prove.
    Identity(String),
}

/// This node's side of the replication port.
#[derive(Debug, Clone)]
pub struct Transport {
    me: Hello,
    peers: PeerBook,
    /// Starts the dialling task of a peer added at run time (set by `start_outbound`).
    dialer: Arc<OnceLock<Dialer>>,
    /// Each dialled peer's queue (the [`Outbox`]'s).
    queues: Queues,
    directory: Directory,
    incarnations: Option<Arc<super::incarnation::Incarnations>>,
    tls: Option<PeerTls>,
    port: Arc<PortState>,
}

impl Transport {
    /// A transport for node `me` (its greeting) with peers at their replication addresses,
    /// authenticating them with `tls` (`None`: plaintext, anyone is believed).
    pub fn new(
        me: Hello,
        peers: BTreeMap<NodeId, SocketAddr>,
        tls: Option<PeerTls>,
        max_connections: u32,
    ) -> Self {
        let directory = Directory::default();
        directory.learn(&me);
        directory.connected(me.node_id, true);
        Transport {
            me,
            peers: PeerBook::new(peers),
            dialer: Arc::default(),
            queues: Arc::default(),
            directory,
            incarnations: None,
            tls,
            port: Arc::new(PortState::new(max_connections)),
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

    /// What the port refused and accepted.
    pub fn counters(&self) -> &PortCounters {
        &self.port.counters
    }

    /// Whether peers are authenticated (mutual TLS).
    pub fn authenticates(&self) -> bool {
        self.tls.is_some()
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

    /// The runtime's client of out-of-band requests to this node's peers.
    pub fn forwarder(&self) -> Forwarder {
        Forwarder {
            node_id: self.me.node_id,
            cluster: self.me.cluster,
            peers: self.peers.clone(),
            tls: self.tls.clone(),
            idle: Arc::default(),
            lanes: Arc::default(),
        }
    }

    /// The client of out-of-band requests to this node's peers.
    pub fn fetcher(&self) -> Fetcher {
        Fetcher {
            node_id: self.me.node_id,
            cluster: self.me.cluster,
            peers: self.peers.clone(),
            tls: self.tls.clone(),
        }
    }

    /// Answers the out-of-band requests of one connection that opened with a fetch.
    async fn serve_fetches<I: Inbox>(
        &self,
        mut socket: PeerStream,
        mut buf: BytesMut,
        from: NodeId,
        mut request: Bytes,
        inbox: Arc<I>,
        stop: CancellationToken,
    ) {
        loop {
            let answer = if let Some(answering) = inbox.answer_async(from, &request) {
                answering.await
            } else {
                let answering = Arc::clone(&inbox);
                let Ok(answer) =
                    tokio::task::spawn_blocking(move || answering.answer(from, &request)).await
                else {
                    return;
                };
                answer
            };
            if write_flushed(&mut socket, &wire::encode_answer(&answer))
                .await
                .is_err()
            {
                return;
            }
            let next = tokio::select! {
                () = stop.cancelled() => return,
                frame = tokio::time::timeout(FETCH_TIMEOUT, read_frame(&mut socket, &mut buf, wire::decode_next_fetch)) => frame,
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
    /// A peer added later ([`Transport::set_peers`]) gets its task and queue then.
    pub fn start_outbound<I: Inbox>(&self, inbox: &Arc<I>, stop: &CancellationToken) -> Outbox {
        let outbox = Outbox {
            queues: Arc::clone(&self.queues),
            dropped: Arc::default(),
        };
        let (transport, inbox, stop) = (self.clone(), Arc::clone(inbox), stop.clone());
        let queues = Arc::clone(&outbox.queues);
        let dialer = Dialer(Arc::new(move |peer| {
            let (tx, rx) = mpsc::channel(PEER_QUEUE_FRAMES);
            queues
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(peer, tx);
            tokio::spawn(dial_loop(
                transport.clone(),
                peer,
                rx,
                Arc::clone(&inbox),
                stop.clone(),
            ));
        }));
        for peer in self.peers.all().into_keys() {
            (dialer.0)(peer);
        }
        let _ = self.dialer.set(dialer);
        outbox
    }

    /// The peers now: their ids and replication addresses.
    pub fn peers(&self) -> &PeerBook {
        &self.peers
    }

    /// Makes `peers` this node's peers (this node itself is left out): a new one is dialled,
    /// one that moved is redialled at its new address, one no longer listed is no longer
    /// dialled nor accepted (its connections end when they next fail or it greets again).
    /// Returns whether anything changed.
    pub fn set_peers(&self, mut peers: BTreeMap<NodeId, SocketAddr>) -> bool {
        peers.remove(&self.me.node_id);
        let before = self.peers.all();
        if before == peers {
            return false;
        }
        self.peers.replace(peers.clone());
        for (peer, addr) in &peers {
            match before.get(peer) {
                None => {
                    tracing::info!(peer, %addr, "a member joined this node's peers");
                    if let Some(dial) = self.dialer.get() {
                        (dial.0)(*peer);
                    }
                }
                Some(old) if old != addr => {
                    tracing::info!(peer, from = %old, to = %addr, "a peer's replication address changed");
                }
                Some(_) => {}
            }
        }
        for peer in before.keys().filter(|p| !peers.contains_key(p)) {
            tracing::info!(peer, "a member left this node's peers");
            // Its dialling task ends with its queue.
            self.queues
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(peer);
            self.directory.forget(*peer);
        }
        true
    }

    /// Accepts connections on the replication port until `stop` fires, each served by
    /// [`Transport::serve_inbound`] within the port's connection cap.
    pub async fn serve<I: Inbox>(
        &self,
        listener: TcpListener,
        inbox: Arc<I>,
        stop: CancellationToken,
    ) {
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((socket, from)) => {
                    let Ok(permit) = Arc::clone(&self.port.connections).try_acquire_owned() else {
                        self.port
                            .counters
                            .refused_limit
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%from, "replication port at its connection cap; closed");
                        continue;
                    };
                    let _ = socket.set_nodelay(true);
                    keepalive(&socket);
                    let (transport, inbox, stop) = (self.clone(), Arc::clone(&inbox), stop.clone());
                    tokio::spawn(async move {
                        transport.serve_inbound(socket, inbox, stop).await;
                        drop(permit);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "replication accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Runs the handshake (with peer TLS) and reads the first frame, within [`HELLO_TIMEOUT`];
    /// returns the frame, the member it proved to be, and what is left.
    async fn open_inbound(
        &self,
        socket: TcpStream,
    ) -> Result<(PeerStream, BytesMut, Frame, NodeId), Refusal> {
        let opening = async {
            let (mut stream, cert) = match &self.tls {
                Some(tls) => {
                    let (stream, cert) = tls
                        .accept(socket)
                        .await
                        .map_err(|_| Refusal::Quiet("TLS handshake failed"))?;
                    (stream, Some(cert))
                }
                None => (PeerStream::Plain(socket), None),
            };
            let mut buf = BytesMut::with_capacity(4096);
            let frame = match read_frame(&mut stream, &mut buf, wire::decode_first).await {
                Ok(Some(frame)) => frame,
                Ok(None) => return Err(Refusal::Quiet("closed before its first frame")),
                Err(_) => return Err(Refusal::Quiet("a first frame that is not a greeting")),
            };
            let (claimed, cluster) = match &frame {
                Frame::Hello(h) => (h.node_id, h.cluster),
                Frame::Fetch {
                    node_id, cluster, ..
                } => (*node_id, *cluster),
                Frame::Raft(_) | Frame::Answer(_) => {
                    return Err(Refusal::Quiet("a first frame that is not a greeting"))
                }
            };
            if let Some(cert) = &cert {
                if !PeerTls::certifies(cert, claimed) {
                    return Err(Refusal::Identity(format!(
                        "its certificate does not name member {claimed}, which it claimed to be"
                    )));
                }
            }
            if !self.peers.contains(claimed) {
                return Err(Refusal::Identity(format!(
                    "it claimed to be node {claimed}, which is not a member"
                )));
            }
            let joining = cluster == JOINING
                && matches!(&frame, Frame::Hello(h) if h.prop(props::JOIN).is_some());
            if cluster != self.me.cluster && !joining {
                return Err(Refusal::Identity(format!(
                    "member {claimed} belongs to another cluster (cluster id {cluster:016x}, \
                     this one is {:016x})",
                    self.me.cluster
                )));
            }
            Ok((stream, buf, frame, claimed))
        };
        tokio::time::timeout(HELLO_TIMEOUT, opening)
            .await
            .unwrap_or(Err(Refusal::Quiet("no greeting in time")))
    }

    /// Serves one inbound replication connection until it fails or `stop` fires.
    pub async fn serve_inbound<I: Inbox>(
        &self,
        socket: TcpStream,
        inbox: Arc<I>,
        stop: CancellationToken,
    ) {
        let from_addr = socket.peer_addr().ok();
        let ip = from_addr.map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip());
        let Some(unproved) = self.port.unproved(ip) else {
            self.port
                .counters
                .refused_limit
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%ip, "too many unproved replication connections from one address; closed");
            return;
        };
        let counters = &self.port.counters;
        let (mut socket, buf, first, from) = match self.open_inbound(socket).await {
            Ok(opened) => opened,
            Err(Refusal::Quiet(why)) => {
                counters.refused_handshake.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(addr = ?from_addr, why, "replication connection closed");
                return;
            }
            Err(Refusal::Identity(why)) => {
                counters.refused_identity.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(addr = ?from_addr, reason = why, "refusing a replication connection");
                return;
            }
        };
        drop(unproved);
        counters.authenticated.fetch_add(1, Ordering::Relaxed);
        let hello = match first {
            Frame::Hello(hello) => hello,
            Frame::Fetch { request, .. } => {
                self.serve_fetches(socket, buf, from, request, inbox, stop)
                    .await;
                return;
            }
            Frame::Raft(_) | Frame::Answer(_) => return,
        };
        if hello.prop(props::JOIN).is_some() {
            // A recorded (and, with peer TLS, proved) member joining: it learns the cluster's
            // id and founders from this greeting, then dials again as a member.
            tracing::info!(
                peer = from,
                "a new member asked to join; told the cluster's id and founders"
            );
            let _ = write_flushed(&mut socket, &wire::encode_hello(&self.hello())).await;
            return;
        }
        if let Err(reason) = self.check(&hello) {
            tracing::error!(peer = from, reason, "refusing a replication peer");
            counters.refused_identity.fetch_add(1, Ordering::Relaxed);
            let _ = write_flushed(&mut socket, &wire::encode_hello(&self.refusal(reason))).await;
            return;
        }
        let Some((connection, cancelled)) = self.register(&hello).await else {
            counters.refused_duplicate.fetch_add(1, Ordering::Relaxed);
            let _ = write_flushed(
                &mut socket,
                &wire::encode_hello(&self.refusal(
                    "another process of this member is connected: a copied data directory, or a \
                     second start of the same member",
                )),
            )
            .await;
            return;
        };
        // Greeted with what this node knew before this peer's greeting (a peer that lost its
        // state learns it from that).
        let reply = wire::encode_hello(&self.hello());
        self.observe(&hello, &*inbox);
        if write_flushed(&mut socket, &reply).await.is_ok() {
            tracing::debug!(peer = from, "replication peer connected");
            self.receive_loop(socket, buf, from, &*inbox, &stop, &cancelled)
                .await;
        }
        let mut live = eddy_log::lock(&self.port.live);
        if live.get(&from).is_some_and(|l| l.connection == connection) {
            live.remove(&from);
        }
    }

    /// Hands a member's engine messages to the consensus thread until the connection ends.
    async fn receive_loop<I: Inbox>(
        &self,
        mut socket: PeerStream,
        mut buf: BytesMut,
        from: NodeId,
        inbox: &I,
        stop: &CancellationToken,
        cancelled: &CancellationToken,
    ) {
        let budget = Arc::new(Semaphore::new(PEER_INBOUND_BUDGET));
        loop {
            let frame = tokio::select! {
                () = stop.cancelled() => return,
                () = cancelled.cancelled() => return,
                frame = read_frame(&mut socket, &mut buf, wire::decode) => frame,
            };
            match frame {
                Ok(Some(Frame::Raft(messages))) => {
                    self.directory.seen(from);
                    let bytes: usize = messages.iter().map(|(_, m)| m.len() + 12).sum();
                    let permits = u32::try_from(bytes.min(PEER_INBOUND_BUDGET)).unwrap_or(u32::MAX);
                    let Ok(hold): Result<OwnedSemaphorePermit, _> =
                        Arc::clone(&budget).acquire_many_owned(permits).await
                    else {
                        return;
                    };
                    inbox.receive(from, messages, Box::new(hold));
                }
                Ok(Some(Frame::Hello(_))) => {
                    tracing::warn!(
                        peer = from,
                        "a second greeting on a replication connection; closing"
                    );
                    return;
                }
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

    /// Records the process `hello` greets from as the member's live one, unless another
    /// process of that member still has a connection open here (after [`DUPLICATE_GRACE`]
    /// for it to close). A new connection of the same process replaces its older one, which
    /// is ended. Returns the connection's number and its cancellation.
    async fn register(&self, hello: &Hello) -> Option<(u64, CancellationToken)> {
        let boot = hello.prop(props::BOOT).unwrap_or_default().to_owned();
        let started = Instant::now();
        loop {
            {
                let mut live = eddy_log::lock(&self.port.live);
                let other = live
                    .get(&hello.node_id)
                    .filter(|old| old.boot != boot)
                    .map(|old| old.boot.clone());
                match other {
                    Some(old_boot) if started.elapsed() >= DUPLICATE_GRACE => {
                        tracing::error!(
                            peer = hello.node_id,
                            live_process = %old_boot,
                            refused_process = %boot,
                            "two processes claim to be member {}: the one already connected \
                             stays, the newcomer is refused (a copied data directory, or the \
                             member started twice); stop one of them",
                            hello.node_id
                        );
                        return None;
                    }
                    Some(_) => {}
                    None => {
                        if let Some(old) = live.get(&hello.node_id) {
                            old.cancel.cancel();
                        }
                        let connection = self.port.next_connection.fetch_add(1, Ordering::Relaxed);
                        let cancel = CancellationToken::new();
                        live.insert(
                            hello.node_id,
                            Live {
                                boot,
                                cancel: cancel.clone(),
                                connection,
                            },
                        );
                        return Some((connection, cancel));
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The greeting that answers a refused peer: who this node is, and why.
    fn refusal(&self, reason: &str) -> Hello {
        let mut hello = self.me.clone();
        hello.props.push((props::REFUSED.into(), reason.to_owned()));
        hello
    }

    fn check(&self, hello: &Hello) -> Result<(), &'static str> {
        if hello.cluster != self.me.cluster {
            return Err("it belongs to another cluster (its cluster id differs)");
        }
        if hello.prop(props::MEMBERS) != self.me.prop(props::MEMBERS) {
            return Err("it was configured with other members (its --peer list differs)");
        }
        if !self.peers.contains(hello.node_id) {
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

/// Writes `bytes` and flushes them out of the TLS layer.
async fn write_flushed<S: AsyncWrite + Unpin>(socket: &mut S, bytes: &[u8]) -> std::io::Result<()> {
    socket.write_all(bytes).await?;
    socket.flush().await
}

/// Reads until one frame decodes with `decode`: `Ok(None)` at a clean end of stream.
async fn read_frame<S: AsyncRead + Unpin>(
    socket: &mut S,
    buf: &mut BytesMut,
    decode: fn(&mut BytesMut) -> Result<Option<Frame>, wire::WireError>,
) -> Result<Option<Frame>, FrameError> {
    loop {
        if let Some(frame) = decode(buf)? {
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
    mut rx: mpsc::Receiver<Bytes>,
    inbox: Arc<I>,
    stop: CancellationToken,
) {
    let mut backoff = Duration::from_millis(50);
    let mut refused_before = false;
    loop {
        if stop.is_cancelled() {
            return;
        }
        // Read at each attempt: a member that moved is dialled at its new address, and one
        // that left is no longer dialled (a member added again gets a new task).
        let Some(addr) = transport.peers.get(peer) else {
            tracing::info!(peer, "no longer a peer: not dialled any more");
            return;
        };
        match connect(&transport, peer, addr, &*inbox).await {
            Ok(mut socket) => {
                backoff = Duration::from_millis(50);
                refused_before = false;
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
            Err(ConnectError::Refused(reason)) => {
                // Said once per run of refusals: the peer will keep refusing until one side
                // is reconfigured or the other process stops.
                if !refused_before {
                    tracing::error!(peer, %addr, reason, "a peer refused this member");
                }
                refused_before = true;
            }
            Err(ConnectError::Io(e)) => {
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
    socket: &mut PeerStream,
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
        // Out of the TLS layer's buffer: what was written must reach the peer now.
        if let Err(e) = socket.flush().await {
            return SendEnd::Failed(e);
        }
    }
}

/// Why a dial did not give a connection.
enum ConnectError {
    /// The peer answered with a refusal (its reason).
    Refused(String),
    /// It could not be reached, did not prove who it is, or did not greet.
    Io(std::io::Error),
}

impl From<std::io::Error> for ConnectError {
    fn from(e: std::io::Error) -> Self {
        ConnectError::Io(e)
    }
}

async fn connect<I: Inbox>(
    transport: &Transport,
    peer: NodeId,
    addr: SocketAddr,
    inbox: &I,
) -> Result<PeerStream, ConnectError> {
    let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "greeting timed out");
    let opening = async {
        let socket = TcpStream::connect(addr).await?;
        socket.set_nodelay(true)?;
        keepalive(&socket);
        let mut socket = match &transport.tls {
            Some(tls) => tls.connect(socket, peer).await?,
            None => PeerStream::Plain(socket),
        };
        write_flushed(&mut socket, &wire::encode_hello(&transport.hello())).await?;
        let mut buf = BytesMut::with_capacity(4096);
        let answer = read_frame(&mut socket, &mut buf, wire::decode_first)
            .await
            .map_err(std::io::Error::other)?;
        Ok::<_, std::io::Error>((socket, answer))
    };
    let (socket, answer) = tokio::time::timeout(HELLO_TIMEOUT, opening)
        .await
        .map_err(|_| timed_out())??;
    match answer {
        Some(Frame::Hello(hello)) if hello.node_id == peer => {
            if let Some(reason) = hello.prop(props::REFUSED) {
                return Err(ConnectError::Refused(reason.to_owned()));
            }
            if let Err(reason) = transport.check(&hello) {
                return Err(ConnectError::Refused(format!(
                    "this member refuses it: {reason}"
                )));
            }
            transport.observe(&hello, inbox);
            Ok(socket)
        }
        Some(Frame::Hello(hello)) => Err(ConnectError::Io(std::io::Error::other(format!(
            "expected node {peer} at {addr}, found node {}",
            hello.node_id
        )))),
        _ => Err(ConnectError::Io(std::io::Error::other(
            "peer did not greet",
        ))),
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
        let transport = Transport::new(hello(1, "shards=4"), peers, None, 8);
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
