//! Test support: members on Raft threads in one process, wired to each other in memory, and
//! the small logs that make them roll segments and snapshot often. Built for this crate's
//! tests and, with the `testkit` feature, the server's.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eddy_consensus::{GroupId, Node, NodeConfig, NodeId, Role, Runner};
use eddy_log::LogConfig;

/// The engine's clock period in tests.
pub const TICK: Duration = Duration::from_millis(20);

/// Every member's runner by id - 1 (`None`: down).
pub type Peers<O> = Arc<Mutex<Vec<Option<Runner<O>>>>>;

/// Spawns member `id` of a `size`-member cluster whose messages go to `peers`. A member that
/// lost its disk (`wiped`) neither votes nor campaigns until it has caught up.
pub fn spawn<O: Send + 'static>(id: NodeId, size: u64, peers: &Peers<O>, wiped: bool) -> Runner<O> {
    let out = Arc::clone(peers);
    Runner::spawn(
        &format!("raft-{id}"),
        move |wake| {
            let mut config = NodeConfig::new(id, (1..=size).collect());
            config.maintain_ticks = 2;
            let mut node = Node::new(config, wake);
            if wiped {
                node.set_rebuilding();
            }
            node
        },
        TICK,
        Box::new(move |to, batch| {
            let target = out.lock().unwrap()[usize::try_from(to - 1).unwrap()].clone();
            if let Some(r) = target {
                r.receive(id, batch);
            }
        }),
        Box::new(|_| {}),
    )
    .unwrap()
}

/// The one leader of `group` among the running members (panics after 10 s without one).
pub fn leader<O: Send + 'static>(peers: &Peers<O>, group: GroupId) -> NodeId {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let runners = peers.lock().unwrap().clone();
        let leaders: Vec<NodeId> = runners
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let v = r.as_ref()?.view().get(group)?;
                (v.role == Role::Leader).then_some(i as u64 + 1)
            })
            .collect();
        if leaders.len() == 1 {
            return leaders[0];
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no single leader of {group:?}");
}

/// Waits up to 10 s for `done`, then panics with `what()`.
pub fn eventually(mut done: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{}", what());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A topic whose partitions roll segments as often as [`small_log`]'s (partition groups take
/// their topic's segment size).
pub fn small_topic() -> eddy_stream_store::TopicConfig {
    eddy_stream_store::TopicConfig {
        segment_size: small_log().segment_size,
        ..eddy_stream_store::TopicConfig::default()
    }
}

/// A log that rolls a segment every 16 KiB.
pub fn small_log() -> LogConfig {
    LogConfig {
        segment_size: 16 * 1024,
        ..LogConfig::default()
    }
}
