//! Three nodes on their own threads (the server's shape), wired by in-memory channels:
//! election, replication and failover in real time with the default timing.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use eddy_consensus::testing::{Applied, MemDisk, MemStore};
use eddy_consensus::{GroupId, Node, NodeConfig, NodeId, Role, Runner};

const G: GroupId = GroupId(3);
const TICK: Duration = Duration::from_millis(20);

type Peers = Arc<Mutex<Vec<Option<Runner<u64>>>>>;

fn spawn(id: NodeId, peers: &Peers) -> (Runner<u64>, Applied) {
    let store = MemStore::open(MemDisk::new());
    let applied = store.applied();
    let out = Arc::clone(peers);
    let runner = Runner::spawn(
        &format!("raft-{id}"),
        |wake| Node::new(NodeConfig::new(id, vec![1, 2, 3]), wake),
        TICK,
        Box::new(move |to, batch| {
            let target = out.lock().unwrap()[usize::try_from(to - 1).unwrap()].clone();
            if let Some(r) = target {
                r.receive(id, batch);
            }
        }),
        Box::new(|_| {}),
    )
    .unwrap();
    let (tx, rx) = mpsc::channel();
    runner.add_group(
        G,
        Box::new(store),
        Box::new(move |r| tx.send(r.is_ok()).unwrap()),
    );
    assert!(rx.recv().unwrap());
    (runner, applied)
}

fn leader(peers: &Peers, deadline: Duration) -> NodeId {
    let start = Instant::now();
    while start.elapsed() < deadline {
        let runners = peers.lock().unwrap().clone();
        let leaders: Vec<NodeId> = runners
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let v = r.as_ref()?.view().get(G)?;
                (v.role == Role::Leader).then_some(i as u64 + 1)
            })
            .collect();
        if leaders.len() == 1 {
            return leaders[0];
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no single leader within {deadline:?}");
}

fn propose(r: &Runner<u64>, data: &'static str) -> mpsc::Receiver<bool> {
    let (tx, rx) = mpsc::channel();
    r.propose(
        G,
        Bytes::from_static(data.as_bytes()),
        Box::new(move |res| {
            let _ = tx.send(res.is_ok());
        }),
    );
    rx
}

#[test]
fn threads_elect_replicate_and_fail_over() {
    let peers: Peers = Arc::new(Mutex::new(vec![None, None, None]));
    let mut applied = Vec::new();
    for id in 1..=3 {
        let (r, a) = spawn(id, &peers);
        peers.lock().unwrap()[usize::try_from(id - 1).unwrap()] = Some(r);
        applied.push(a);
    }
    let first = leader(&peers, Duration::from_secs(5));
    let runner = peers.lock().unwrap()[usize::try_from(first - 1).unwrap()]
        .clone()
        .unwrap();
    assert!(propose(&runner, "one")
        .recv_timeout(Duration::from_secs(5))
        .unwrap());
    assert_eq!(runner.statuses()[&G].role, Role::Leader);
    // The acknowledgement needed a majority; the third member catches up soon after.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !runner.statuses()[&G].matched.iter().all(|(_, m)| *m >= 2) {
        assert!(Instant::now() < deadline, "a follower never replicated");
        std::thread::sleep(Duration::from_millis(5));
    }

    // The leader's thread stops (a crash, as far as the others can tell).
    runner.stop();
    peers.lock().unwrap()[usize::try_from(first - 1).unwrap()] = None;
    let started = Instant::now();
    let second = leader(&peers, Duration::from_secs(5));
    assert_ne!(second, first);
    eprintln!("failover took {:?}", started.elapsed());
    let runner = peers.lock().unwrap()[usize::try_from(second - 1).unwrap()]
        .clone()
        .unwrap();
    assert!(propose(&runner, "two")
        .recv_timeout(Duration::from_secs(5))
        .unwrap());
    let deadline = Instant::now() + Duration::from_secs(5);
    for (i, a) in applied.iter().enumerate() {
        if i as u64 + 1 == first {
            continue;
        }
        while a.get().len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let got: Vec<Bytes> = a.get().into_iter().map(|(_, b)| b).collect();
        assert_eq!(
            got,
            [Bytes::from_static(b"one"), Bytes::from_static(b"two")]
        );
    }
    for r in peers.lock().unwrap().iter().flatten() {
        r.stop();
    }
}
