//! The fault proxy of the replication links (these kernels have no `tc netem`).
//!
//! It listens on every node's stand-in address (see `net.rs`) at the replication port; a
//! connection from node i to the stand-in of node j is forwarded to node j from node i's
//! stand-in. It reads the replication frames (`eddy-consensus`'s wire format: a 16-byte
//! header whose bytes 4 and 8..12 are the kind and the body length), so faults apply to whole
//! engine-message batches, never to bytes inside one: a Raft frame of a faulty link may be
//! dropped (loss, or every frame of a one-way partition), sent twice, held back (delay) and
//! overtaken by a later one (reordering). Greetings always pass; replies (the greeting back)
//! are copied as they are.
//!
//! The members authenticate each other with mutual TLS, so the proxy terminates it on both
//! sides, holding every member's certificate (it is the test's own): to node i, which dialled
//! node j's stand-in, it presents node j's certificate; to node j it presents node i's.

use std::collections::{BTreeMap, BinaryHeap};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::net::Net;
use super::rng::Rng;

const HEADER_LEN: usize = 16;
const KIND_RAFT: u8 = 2;
const MAX_BODY: usize = 96 * 1024 * 1024;

/// What a directed link (from, to) does to the Raft frames it carries.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinkFault {
    /// Drop every frame (a one-way partition at the message level).
    pub blackhole: bool,
    /// Probability of dropping a frame.
    pub loss: f64,
    /// Probability of sending a frame twice.
    pub duplicate: f64,
    /// Each frame is held back uniformly in this range, ms.
    pub delay_ms: (u64, u64),
    /// Whether a later frame with a shorter delay may overtake (otherwise delays keep order).
    pub reorder: bool,
}

type Faults = Arc<Mutex<BTreeMap<(u8, u8), LinkFault>>>;

/// Each member's TLS identity: accepting as it, and dialling as it.
struct Identities {
    accept_as: BTreeMap<u8, tokio_rustls::TlsAcceptor>,
    dial_as: BTreeMap<u8, tokio_rustls::TlsConnector>,
}

impl Identities {
    fn load(certs: &eddy_tests::ClusterCerts, nodes: u8) -> Result<Self, String> {
        use rustls_pki_types::pem::PemObject as _;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let dir = certs.dir();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(dir.join("ca.pem")).map_err(|e| e.to_string())? {
            roots
                .add(cert.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        let roots = Arc::new(roots);
        let mut identities = Identities {
            accept_as: BTreeMap::new(),
            dial_as: BTreeMap::new(),
        };
        for n in 1..=nodes {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_file_iter(dir.join(format!("node-{n}.pem")))
                    .map_err(|e| e.to_string())?
                    .collect::<Result<_, _>>()
                    .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_file(dir.join(format!("node-{n}.key")))
                .map_err(|e| e.to_string())?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::clone(&roots),
                Arc::clone(&provider),
            )
            .build()
            .map_err(|e| e.to_string())?;
            let server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
                .with_protocol_versions(&[&rustls::version::TLS13])
                .map_err(|e| e.to_string())?
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain.clone(), key.clone_key())
                .map_err(|e| e.to_string())?;
            let client = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
                .with_protocol_versions(&[&rustls::version::TLS13])
                .map_err(|e| e.to_string())?
                .with_root_certificates(Arc::clone(&roots))
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())?;
            identities
                .accept_as
                .insert(n, tokio_rustls::TlsAcceptor::from(Arc::new(server)));
            identities
                .dial_as
                .insert(n, tokio_rustls::TlsConnector::from(Arc::new(client)));
        }
        Ok(identities)
    }
}

/// The running proxy; stops on drop.
#[derive(Debug)]
pub struct Proxy {
    faults: Faults,
    stop: watch::Sender<bool>,
}

impl Proxy {
    /// Listens on every node's stand-in at `port`, forwarding to the node's own address.
    pub async fn start(
        net: &Net,
        nodes: u8,
        port: u16,
        seed: u64,
        certs: &eddy_tests::ClusterCerts,
    ) -> Result<Self, String> {
        let identities = Arc::new(Identities::load(certs, nodes)?);
        let faults: Faults = Arc::default();
        let (stop, stopped) = watch::channel(false);
        for to in 1..=nodes {
            let listen = SocketAddr::V4(SocketAddrV4::new(net.alias_ip(to), port));
            let listener = TcpListener::bind(listen)
                .await
                .map_err(|e| format!("proxy bind {listen}: {e}"))?;
            let routes = Routes {
                to,
                target: SocketAddrV4::new(net.node_ip(to), port),
                stand_ins: (1..=nodes).map(|n| (n, net.alias_ip(n))).collect(),
                node_ips: (1..=nodes).map(|n| (net.node_ip(n), n)).collect(),
            };
            tokio::spawn(accept_loop(
                listener,
                routes,
                Arc::clone(&identities),
                Arc::clone(&faults),
                stopped.clone(),
                seed ^ u64::from(to),
            ));
        }
        Ok(Self { faults, stop })
    }

    /// Sets the fault of the link `from -> to`.
    pub fn set(&self, from: u8, to: u8, fault: LinkFault) {
        self.faults.lock().unwrap().insert((from, to), fault);
    }

    /// Every link back to normal.
    pub fn heal(&self) {
        self.faults.lock().unwrap().clear();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

#[derive(Clone)]
struct Routes {
    to: u8,
    target: SocketAddrV4,
    stand_ins: BTreeMap<u8, Ipv4Addr>,
    node_ips: BTreeMap<Ipv4Addr, u8>,
}

async fn accept_loop(
    listener: TcpListener,
    routes: Routes,
    identities: Arc<Identities>,
    faults: Faults,
    mut stopped: watch::Receiver<bool>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopped.changed() => return,
        };
        let Ok((inbound, peer)) = accepted else {
            continue;
        };
        let std::net::IpAddr::V4(peer_ip) = peer.ip() else {
            continue;
        };
        let Some(&from) = routes.node_ips.get(&peer_ip) else {
            continue;
        };
        let routes = routes.clone();
        let faults = Arc::clone(&faults);
        let stopped = stopped.clone();
        let conn_seed = rng.next_u64();
        let identities = Arc::clone(&identities);
        tokio::spawn(async move {
            let _ = inbound.set_nodelay(true);
            let handshakes = async {
                let inbound = identities.accept_as[&routes.to].accept(inbound).await?;
                let outbound = dial(routes.stand_ins[&from], routes.target).await?;
                let _ = outbound.set_nodelay(true);
                let name =
                    rustls_pki_types::ServerName::try_from(format!("node-{}.eddy", routes.to))
                        .map_err(std::io::Error::other)?;
                let outbound = identities.dial_as[&from].connect(name, outbound).await?;
                Ok::<_, std::io::Error>((inbound, outbound))
            };
            let Ok(Ok((inbound, outbound))) =
                tokio::time::timeout(Duration::from_secs(5), handshakes).await
            else {
                return;
            };
            let mut stopped = stopped;
            tokio::select! {
                () = relay(inbound, outbound, from, routes.to, faults, conn_seed) => {}
                _ = stopped.changed() => {}
            }
        });
    }
}

async fn dial(from: Ipv4Addr, to: SocketAddrV4) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::V4(SocketAddrV4::new(from, 0)))?;
    tokio::time::timeout(Duration::from_secs(3), socket.connect(SocketAddr::V4(to)))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
}

/// Forwards both ways until either side closes; faults apply to `from -> to` Raft frames.
async fn relay<I, O>(inbound: I, outbound: O, from: u8, to: u8, faults: Faults, seed: u64)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    O: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut in_read, mut in_write) = tokio::io::split(inbound);
    let (out_read, out_write) = tokio::io::split(outbound);
    let (tx, rx) = mpsc::unbounded_channel();
    let back = async {
        let mut out_read = out_read;
        let _ = tokio::io::copy(&mut out_read, &mut in_write).await;
    };
    let forward = async {
        let mut rng = Rng::new(seed);
        let mut last_release = Instant::now();
        let mut n = 0u64;
        while let Ok(frame) = read_frame(&mut in_read).await {
            let fault = faults
                .lock()
                .unwrap()
                .get(&(from, to))
                .copied()
                .unwrap_or_default();
            let copies = if frame[4] != KIND_RAFT {
                1
            } else if fault.blackhole || rng.chance(fault.loss) {
                0
            } else if rng.chance(fault.duplicate) {
                2
            } else {
                1
            };
            let (lo, hi) = fault.delay_ms;
            let hold = Duration::from_millis(if hi > 0 { rng.between(lo, hi) } else { 0 });
            let mut release = Instant::now() + hold;
            if !fault.reorder {
                release = release.max(last_release);
            }
            last_release = last_release.max(release);
            let frame = bytes::Bytes::from(frame);
            for _ in 0..copies {
                n += 1;
                if tx.send((release, n, frame.clone())).is_err() {
                    return;
                }
            }
        }
    };
    tokio::select! {
        () = back => {}
        () = forward => {}
        () = release_loop(rx, out_write) => {}
    }
}

/// One whole frame (header and body) from `r`.
async fn read_frame(r: &mut (impl tokio::io::AsyncRead + Unpin)) -> std::io::Result<Vec<u8>> {
    let mut frame = vec![0u8; HEADER_LEN];
    r.read_exact(&mut frame).await?;
    let len = u32::from_le_bytes(frame[8..12].try_into().expect("4 bytes")) as usize;
    if len > MAX_BODY {
        return Err(std::io::Error::other("frame too large"));
    }
    frame.resize(HEADER_LEN + len, 0);
    r.read_exact(&mut frame[HEADER_LEN..]).await?;
    Ok(frame)
}

/// Writes queued frames when their release time comes, earliest first.
async fn release_loop(
    mut rx: mpsc::UnboundedReceiver<(Instant, u64, bytes::Bytes)>,
    mut w: impl tokio::io::AsyncWrite + Unpin,
) {
    let mut heap: BinaryHeap<std::cmp::Reverse<(Instant, u64, bytes::Bytes)>> = BinaryHeap::new();
    loop {
        let next = heap.peek().map(|std::cmp::Reverse((at, _, _))| *at);
        tokio::select! {
            item = rx.recv() => match item {
                Some(item) => heap.push(std::cmp::Reverse(item)),
                None => return,
            },
            () = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                while let Some(std::cmp::Reverse((at, _, _))) = heap.peek() {
                    if *at > Instant::now() {
                        break;
                    }
                    let std::cmp::Reverse((_, _, frame)) = heap.pop().expect("peeked");
                    if w.write_all(&frame).await.is_err() {
                        return;
                    }
                }
                // Out of the TLS layer: what is released must reach the member now.
                if w.flush().await.is_err() {
                    return;
                }
            }
        }
    }
}
