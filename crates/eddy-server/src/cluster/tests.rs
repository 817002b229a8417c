use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use eddy_consensus::wire::{self, Frame, Hello};
use eddy_consensus::{GroupId, NodeId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::peer_tls::{PeerStream, PeerTls};
use super::transport::{fingerprint, props, Hold, Inbox, Transport};

type Received = Vec<(NodeId, Vec<(GroupId, Bytes)>)>;

#[derive(Default)]
struct Recorder {
    received: Mutex<Received>,
    unreachable: Mutex<Vec<NodeId>>,
    answered: Mutex<Vec<NodeId>>,
}

impl Inbox for Recorder {
    fn receive(&self, from: NodeId, messages: Vec<(GroupId, Bytes)>, _hold: Hold) {
        self.received.lock().unwrap().push((from, messages));
    }
    fn unreachable(&self, peer: NodeId) {
        self.unreachable.lock().unwrap().push(peer);
    }
    fn answer(&self, from: NodeId, _request: &Bytes) -> Bytes {
        self.answered.lock().unwrap().push(from);
        Bytes::from_static(b"secret records")
    }
}

impl Recorder {
    fn got(&self, payload: &'static [u8]) -> bool {
        self.received
            .lock()
            .unwrap()
            .iter()
            .any(|(_, m)| m.iter().any(|(_, b)| b == payload))
    }
}

fn hello(id: NodeId, members: &[NodeId]) -> Hello {
    Hello {
        node_id: id,
        cluster: 77,
        props: vec![
            (props::STREAM.into(), format!("127.0.0.{id}:8090")),
            (
                props::MEMBERS.into(),
                format!("{:016x}", fingerprint(members)),
            ),
            (props::BOOT.into(), format!("{id:x}0b007")),
        ],
    }
}

async fn wait_for(mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not met in 5 s");
}

/// Serves `t`'s replication port on `listener` until `stop`.
fn serve(listener: TcpListener, t: &Transport, r: &Arc<Recorder>, stop: &CancellationToken) {
    let (t, r, stop) = (t.clone(), Arc::clone(r), stop.clone());
    tokio::spawn(async move { t.serve(listener, r, stop).await });
}

#[tokio::test]
async fn peers_greet_exchange_batches_and_refuse_strangers() {
    let l1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let l2 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (a1, a2) = (l1.local_addr().unwrap(), l2.local_addr().unwrap());
    let t1 = Transport::new(hello(1, &[1, 2]), BTreeMap::from([(2, a2)]), None, 16);
    let t2 = Transport::new(hello(2, &[1, 2]), BTreeMap::from([(1, a1)]), None, 16);
    let (r1, r2) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    let stop = CancellationToken::new();
    serve(l1, &t1, &r1, &stop);
    serve(l2, &t2, &r2, &stop);
    let o1 = t1.start_outbound(&r1, &stop);
    let o2 = t2.start_outbound(&r2, &stop);
    wait_for(|| t1.directory().get(2).is_some_and(|p| p.connected)).await;
    wait_for(|| t2.directory().get(1).is_some_and(|p| p.connected)).await;
    o1.send(2, &[(GroupId(5), Bytes::from_static(b"to two"))]);
    o2.send(1, &[(GroupId(6), Bytes::from_static(b"to one"))]);
    wait_for(|| !r2.received.lock().unwrap().is_empty()).await;
    wait_for(|| !r1.received.lock().unwrap().is_empty()).await;
    assert_eq!(
        r2.received.lock().unwrap()[0],
        (1, vec![(GroupId(5), Bytes::from_static(b"to two"))])
    );
    assert_eq!(
        t1.directory().get(2).unwrap().hello.prop(props::STREAM),
        Some("127.0.0.2:8090")
    );

    // A node configured with other members is refused at the greeting.
    let stranger = Transport::new(hello(2, &[2, 9]), BTreeMap::from([(1, a1)]), None, 16);
    let rs = Arc::new(Recorder::default());
    let os = stranger.start_outbound(&rs, &stop);
    wait_for(|| !rs.unreachable.lock().unwrap().is_empty()).await;
    assert!(!stranger.directory().get(1).is_some_and(|p| p.connected));
    os.send(1, &[(GroupId(5), Bytes::from_static(b"intruder"))]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!r1.got(b"intruder"));
    stop.cancel();
}

/// A three-member PKI from the operator's own command, and a second CA's member 2.
fn pki(dir: &Path) {
    let certs = |out: &Path, nodes: Vec<u64>| eddy_ctl::cluster::CertsArgs {
        out: out.to_path_buf(),
        nodes,
        hosts: vec![],
        ca_cert: None,
        ca_key: None,
        days: 30,
        ca_days: 30,
        force: false,
    };
    eddy_ctl::cluster::write_certs(&certs(dir, vec![1, 2, 3])).unwrap();
    eddy_ctl::cluster::write_certs(&certs(&dir.join("rogue"), vec![2])).unwrap();
}

fn member_tls(dir: &Path, id: NodeId) -> PeerTls {
    PeerTls::load(
        &dir.join(format!("node-{id}.pem")),
        &dir.join(format!("node-{id}.key")),
        &dir.join("ca.pem"),
    )
    .unwrap()
}

/// Connects to `addr` presenting member `cert_of`'s certificate, expecting member `expect`.
async fn dial_as(dir: &Path, cert_of: NodeId, addr: SocketAddr, expect: NodeId) -> PeerStream {
    let socket = TcpStream::connect(addr).await.unwrap();
    member_tls(dir, cert_of)
        .connect(socket, expect)
        .await
        .unwrap()
}

/// Reads until the peer closes or a frame arrives (at most 6 s).
async fn next_frame(socket: &mut PeerStream) -> Option<Frame> {
    let mut buf = BytesMut::new();
    let read = async {
        loop {
            if let Ok(Some(frame)) = wire::decode(&mut buf) {
                return Some(frame);
            }
            let mut chunk = [0u8; 4096];
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(6), read)
        .await
        .expect("the member neither answered nor closed")
}

#[allow(clippy::too_many_lines)] // one cluster, every attack on it in turn
#[tokio::test]
async fn with_peer_tls_only_members_speak_and_each_only_for_itself() {
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path());
    let l1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let l2 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (a1, a2) = (l1.local_addr().unwrap(), l2.local_addr().unwrap());
    // Member 3 is configured but never runs: only its certificate is used, by the attacks.
    let a3: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let t1 = Transport::new(
        hello(1, &[1, 2, 3]),
        BTreeMap::from([(2, a2), (3, a3)]),
        Some(member_tls(dir.path(), 1)),
        16,
    );
    let t2 = Transport::new(
        hello(2, &[1, 2, 3]),
        BTreeMap::from([(1, a1), (3, a3)]),
        Some(member_tls(dir.path(), 2)),
        16,
    );
    let (r1, r2) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    let stop = CancellationToken::new();
    serve(l1, &t1, &r1, &stop);
    serve(l2, &t2, &r2, &stop);
    let o2 = t2.start_outbound(&r2, &stop);
    let _o1 = t1.start_outbound(&r1, &stop);
    wait_for(|| t2.directory().get(1).is_some_and(|p| p.connected)).await;
    o2.send(1, &[(GroupId(5), Bytes::from_static(b"member two"))]);
    wait_for(|| r1.got(b"member two")).await;
    assert!(r1
        .received
        .lock()
        .unwrap()
        .iter()
        .all(|(from, _)| *from == 2));

    // No certificate: a plaintext greeting claiming member 2 is never read.
    let mut plain = TcpStream::connect(a1).await.unwrap();
    let forged = wire::encode_hello(&hello(2, &[1, 2, 3]));
    let _ = plain.write_all(&forged).await;
    let _ = plain
        .write_all(&wire::encode_raft(&[(
            GroupId(0),
            Bytes::from_static(b"forged append"),
        )]))
        .await;
    // At most a TLS alert comes back, never a frame, and the connection closes.
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(6), plain.read_to_end(&mut answer)).await;
    assert!(closed.is_ok(), "a plaintext peer was kept");
    assert!(
        !answer.windows(4).any(|w| w == wire::MAGIC),
        "a plaintext peer was answered with a frame"
    );

    // Member 3's valid certificate, claiming to be member 2: refused, nothing delivered.
    let mut impostor = dial_as(dir.path(), 3, a1, 1).await;
    impostor.write_all(&forged).await.unwrap();
    impostor.flush().await.unwrap();
    let answer = next_frame(&mut impostor).await;
    assert!(answer.is_none(), "the impostor was answered: {answer:?}");
    assert!(t1.counters().refused_identity.load(Ordering::Relaxed) >= 1);

    // The same certificate fetching as member 2: no record leaves.
    let mut fetcher = dial_as(dir.path(), 3, a1, 1).await;
    fetcher
        .write_all(&wire::encode_fetch(2, 77, b"records please"))
        .await
        .unwrap();
    fetcher.flush().await.unwrap();
    assert!(next_frame(&mut fetcher).await.is_none());
    assert!(r1.answered.lock().unwrap().is_empty());

    // A certificate naming member 2 from another CA: the handshake fails.
    let rogue = PeerTls::load(
        &dir.path().join("rogue/node-2.pem"),
        &dir.path().join("rogue/node-2.key"),
        &dir.path().join("ca.pem"),
    )
    .unwrap();
    let socket = TcpStream::connect(a1).await.unwrap();
    if let Ok(mut stream) = rogue.connect(socket, 1).await {
        // TLS 1.3 reports a refused client certificate on the first read.
        let _ = stream.write_all(&forged).await;
        let _ = stream.flush().await;
        assert!(next_frame(&mut stream).await.is_none());
    }

    // A dialler that expects member 1 but reaches member 2 refuses the handshake.
    let socket = TcpStream::connect(a2).await.unwrap();
    assert!(member_tls(dir.path(), 3).connect(socket, 1).await.is_err());

    // Member 3 as itself may fetch (its certificate names it).
    let mut own = dial_as(dir.path(), 3, a1, 1).await;
    own.write_all(&wire::encode_fetch(3, 77, b"records please"))
        .await
        .unwrap();
    own.flush().await.unwrap();
    assert_eq!(
        next_frame(&mut own).await,
        Some(Frame::Answer(Bytes::from_static(b"secret records")))
    );

    // Member 3 greeting as itself, then a second greeting naming member 2 (to rewrite its
    // advertised addresses): the connection closes and member 2's entry is unchanged.
    let mut greeted = dial_as(dir.path(), 3, a1, 1).await;
    greeted
        .write_all(&wire::encode_hello(&hello(3, &[1, 2, 3])))
        .await
        .unwrap();
    greeted.flush().await.unwrap();
    assert!(
        matches!(next_frame(&mut greeted).await, Some(Frame::Hello(h)) if h.node_id == 1 && h.prop(props::REFUSED).is_none())
    );
    let mut poison = hello(2, &[1, 2, 3]);
    poison.props[0].1 = "203.0.113.9:8090".into();
    greeted
        .write_all(&wire::encode_hello(&poison))
        .await
        .unwrap();
    greeted.flush().await.unwrap();
    assert!(next_frame(&mut greeted).await.is_none());
    assert_eq!(
        t1.directory().get(2).unwrap().hello.prop(props::STREAM),
        Some("127.0.0.2:8090")
    );

    // Another process of member 2 (its certificate copied, a new boot nonce) while member 2
    // is live: refused, and told why.
    o2.send(1, &[(GroupId(5), Bytes::from_static(b"still here"))]);
    wait_for(|| r1.got(b"still here")).await;
    let mut twin = dial_as(dir.path(), 2, a1, 1).await;
    let mut copied = hello(2, &[1, 2, 3]);
    copied.props[2].1 = "c0b1ed".into();
    twin.write_all(&wire::encode_hello(&copied)).await.unwrap();
    twin.flush().await.unwrap();
    match next_frame(&mut twin).await {
        Some(Frame::Hello(h)) => assert!(
            h.prop(props::REFUSED)
                .is_some_and(|r| r.contains("another process")),
            "{h:?}"
        ),
        other => panic!("the duplicate was not told: {other:?}"),
    }
    assert_eq!(t1.counters().refused_duplicate.load(Ordering::Relaxed), 1);
    // The live member is still served.
    o2.send(1, &[(GroupId(5), Bytes::from_static(b"after the twin"))]);
    wait_for(|| r1.got(b"after the twin")).await;

    // A first frame that claims 80 MiB before any greeting: closed at once, unread.
    let mut big = dial_as(dir.path(), 3, a1, 1).await;
    let mut header = wire::encode_hello(&hello(3, &[1, 2, 3]))[..wire::HEADER_LEN].to_vec();
    header[8..12].copy_from_slice(&(80u32 << 20).to_le_bytes());
    big.write_all(&header).await.unwrap();
    big.flush().await.unwrap();
    assert!(next_frame(&mut big).await.is_none());
    assert!(!r1.got(b"forged append"));
    stop.cancel();
}

#[tokio::test]
async fn the_port_caps_connections_and_closes_silent_ones() {
    let l1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a1 = l1.local_addr().unwrap();
    let t1 = Transport::new(
        hello(1, &[1, 2]),
        BTreeMap::from([(2, "127.0.0.1:9".parse().unwrap())]),
        None,
        4,
    );
    let r1 = Arc::new(Recorder::default());
    let stop = CancellationToken::new();
    serve(l1, &t1, &r1, &stop);
    // Four silent sockets take the port's four places; a fifth is closed at once.
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(a1).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut fifth = TcpStream::connect(a1).await.unwrap();
    let mut sink = [0u8; 8];
    let read = tokio::time::timeout(Duration::from_secs(2), fifth.read(&mut sink)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "over the cap: {read:?}");
    assert!(t1.counters().refused_limit.load(Ordering::Relaxed) >= 1);
    // The silent ones are closed after the greeting deadline.
    for socket in &mut silent {
        let read = tokio::time::timeout(
            super::transport::HELLO_TIMEOUT + Duration::from_secs(2),
            socket.read(&mut sink),
        )
        .await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "silent socket: {read:?}"
        );
    }
    stop.cancel();
}

#[tokio::test]
async fn a_member_added_at_run_time_is_dialled_and_accepted_and_one_removed_is_not() {
    let l1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let l3 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (a1, a3) = (l1.local_addr().unwrap(), l3.local_addr().unwrap());
    // Node 1 starts with no peer; node 3 knows node 1.
    let t1 = Transport::new(hello(1, &[1]), BTreeMap::new(), None, 16);
    let t3 = Transport::new(hello(3, &[1]), BTreeMap::from([(1, a1)]), None, 16);
    let (r1, r3) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    let stop = CancellationToken::new();
    serve(l1, &t1, &r1, &stop);
    serve(l3, &t3, &r3, &stop);
    let o1 = t1.start_outbound(&r1, &stop);
    let o3 = t3.start_outbound(&r3, &stop);
    // Not yet a peer of node 1: refused at the greeting.
    wait_for(|| !r3.unreachable.lock().unwrap().is_empty()).await;
    o3.send(1, &[(GroupId(5), Bytes::from_static(b"too early"))]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!r1.got(b"too early"));

    // Added (and its own address listed too, which is left out): dialled and accepted.
    assert!(t1.set_peers(BTreeMap::from([(1, a1), (3, a3)])));
    assert!(!t1.set_peers(BTreeMap::from([(3, a3)])), "nothing changed");
    assert_eq!(t1.peers().all(), BTreeMap::from([(3, a3)]));
    wait_for(|| t1.directory().get(3).is_some_and(|p| p.connected)).await;
    wait_for(|| t3.directory().get(1).is_some_and(|p| p.connected)).await;
    o1.send(3, &[(GroupId(5), Bytes::from_static(b"welcome"))]);
    wait_for(|| r3.got(b"welcome")).await;
    o3.send(1, &[(GroupId(5), Bytes::from_static(b"thanks"))]);
    wait_for(|| r1.got(b"thanks")).await;

    // Removed: nothing more is sent to it, and it is refused when it greets again.
    assert!(t1.set_peers(BTreeMap::new()));
    assert!(t1.directory().get(3).is_none(), "no longer listed");
    o1.send(3, &[(GroupId(5), Bytes::from_static(b"after removal"))]);
    let forwarder = t1.forwarder();
    assert!(forwarder.request(3, b"x").await.is_err());
    let t3b = Transport::new(hello(3, &[1]), BTreeMap::from([(1, a1)]), None, 16);
    let r3b = Arc::new(Recorder::default());
    let _o3b = t3b.start_outbound(&r3b, &stop);
    wait_for(|| !r3b.unreachable.lock().unwrap().is_empty()).await;
    assert!(!t3b.directory().get(1).is_some_and(|p| p.connected));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!r3.got(b"after removal"));
    assert!(
        t1.directory().get(3).is_none(),
        "its greeting is not learned again"
    );
    stop.cancel();
}

#[tokio::test]
async fn only_a_recorded_member_learns_the_cluster_id_and_founders_by_joining() {
    let l1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a1 = l1.local_addr().unwrap();
    let mut me = hello(1, &[1, 2]);
    me.props.push((props::FOUNDERS.into(), "1,2".into()));
    // Member 1 records member 4 (as the metadata would), not member 5.
    let t1 = Transport::new(me, BTreeMap::new(), None, 16);
    t1.set_peers(BTreeMap::from([(4, "127.0.0.1:9".parse().unwrap())]));
    let r1 = Arc::new(Recorder::default());
    let stop = CancellationToken::new();
    serve(l1, &t1, &r1, &stop);
    let peers = BTreeMap::from([(1, a1)]);

    let joined = super::transport::join(&peers, 4, None).await.unwrap();
    assert_eq!(joined.cluster, 77);
    assert_eq!(joined.founders, vec![1, 2]);
    assert_eq!(joined.by, 1);

    // A stranger gets nothing: the connection closes without a greeting, and no Raft
    // message of it reaches member 1.
    let mut socket = TcpStream::connect(a1).await.unwrap();
    let stranger = Hello {
        node_id: 5,
        cluster: super::transport::JOINING,
        props: vec![(props::JOIN.into(), "1".into())],
    };
    socket
        .write_all(&wire::encode_hello(&stranger))
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0))), "{read:?} {buf:?}");
    // A recorded member's join greeting is answered and the connection closed: it cannot
    // carry Raft messages.
    let mut socket = TcpStream::connect(a1).await.unwrap();
    let joiner = Hello {
        node_id: 4,
        ..stranger
    };
    socket
        .write_all(&wire::encode_hello(&joiner))
        .await
        .unwrap();
    socket
        .write_all(&wire::encode_raft(&[(
            GroupId(0),
            Bytes::from_static(b"smuggled"),
        )]))
        .await
        .ok();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut answer)).await;
    assert!(!answer.is_empty(), "a recorded joiner is answered");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!r1.got(b"smuggled"));
    stop.cancel();
}
