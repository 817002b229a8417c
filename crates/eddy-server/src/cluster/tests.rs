use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use eddy_consensus::wire::Hello;
use eddy_consensus::{GroupId, NodeId};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::transport::{fingerprint, props, Inbox, Transport};

type Received = Vec<(NodeId, Vec<(GroupId, Bytes)>)>;

#[derive(Default)]
struct Recorder {
    received: Mutex<Received>,
    unreachable: Mutex<Vec<NodeId>>,
}

impl Inbox for Recorder {
    fn receive(&self, from: NodeId, messages: Vec<(GroupId, Bytes)>) {
        self.received.lock().unwrap().push((from, messages));
    }
    fn unreachable(&self, peer: NodeId) {
        self.unreachable.lock().unwrap().push(peer);
    }
}

fn hello(id: NodeId, members: &[NodeId]) -> Hello {
    Hello {
        node_id: id,
        cluster: fingerprint(members),
        props: vec![(props::STREAM.into(), format!("127.0.0.{id}:8090"))],
    }
}

async fn wait_for(mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not met in 2 s");
}

#[tokio::test]
async fn peers_greet_exchange_batches_and_refuse_strangers() {
    let l1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let l2 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (a1, a2) = (l1.local_addr().unwrap(), l2.local_addr().unwrap());
    let t1 = Transport::new(hello(1, &[1, 2]), BTreeMap::from([(2, a2)]));
    let t2 = Transport::new(hello(2, &[1, 2]), BTreeMap::from([(1, a1)]));
    let (r1, r2) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    let stop = CancellationToken::new();
    for (listener, t, r) in [(l1, t1.clone(), r1.clone()), (l2, t2.clone(), r2.clone())] {
        let stop = stop.clone();
        tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                let (t, r, stop) = (t.clone(), r.clone(), stop.clone());
                tokio::spawn(async move { t.serve_inbound(socket, r, stop).await });
            }
        });
    }
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

    // A node of another cluster is refused at the greeting.
    let stranger = Transport::new(hello(2, &[2, 9]), BTreeMap::from([(1, a1)]));
    let rs = Arc::new(Recorder::default());
    let os = stranger.start_outbound(&rs, &stop);
    wait_for(|| !rs.unreachable.lock().unwrap().is_empty()).await;
    assert!(!stranger.directory().get(1).is_some_and(|p| p.connected));
    os.send(1, &[(GroupId(5), Bytes::from_static(b"intruder"))]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(r1
        .received
        .lock()
        .unwrap()
        .iter()
        .all(|(_, m)| m[0].1 != Bytes::from_static(b"intruder")));
    stop.cancel();
}
