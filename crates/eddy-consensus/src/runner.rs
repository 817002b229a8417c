//! A [`Node`] on a thread of its own: what the server runs.
//!
//! One thread owns the node. Everything reaches it as a command on one channel (proposals,
//! peer messages, storage completions' wake-ups, ticks are its receive timeout), and after
//! each batch of commands it processes every group, hands the produced frames to the
//! transport callback and publishes each group's role and leader in a shared [`View`] that
//! request handlers read without a round trip. Nothing here knows sockets or an async runtime.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::group::Callback;
use crate::node::{Event, GroupStatus, Node, NodeError, ProposeError};
use crate::store::GroupStore;
use crate::types::{GroupId, NodeId, Role};

/// Sends a peer a batch of engine messages (the transport queues it; it never blocks).
pub type Transport = Box<dyn FnMut(NodeId, Vec<(GroupId, Bytes)>) + Send>;
/// Called on the node thread for every event (role changes, failures).
pub type EventSink = Box<dyn FnMut(&Event) + Send>;

/// Role and leader of one group on this node, as last published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupView {
    /// This node's role.
    pub role: Role,
    /// The leader it knows of.
    pub leader: Option<NodeId>,
    /// The term.
    pub term: u64,
}

/// Every group's role and leader, readable from any thread.
#[derive(Debug, Clone, Default)]
pub struct View(Arc<RwLock<BTreeMap<GroupId, GroupView>>>);

impl View {
    /// A group's view (`None`: not on this node).
    pub fn get(&self, group: GroupId) -> Option<GroupView> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&group)
            .copied()
    }

    /// Every group's view.
    pub fn all(&self) -> BTreeMap<GroupId, GroupView> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, group: GroupId, view: Option<GroupView>) {
        let mut map = self.0.write().unwrap_or_else(PoisonError::into_inner);
        match view {
            Some(v) => {
                map.insert(group, v);
            }
            None => {
                map.remove(&group);
            }
        }
    }
}

type Query<O> = Box<dyn FnOnce(&mut Node<O>) + Send>;

enum Command<O: Send + 'static> {
    Propose(GroupId, Bytes, Callback<O>),
    Receive(NodeId, Vec<(GroupId, Bytes)>, Option<Box<dyn Send>>),
    AddGroup(
        GroupId,
        Box<dyn GroupStore<Outcome = O>>,
        Option<Vec<NodeId>>,
        Box<dyn FnOnce(Result<(), NodeError>) + Send>,
    ),
    RemoveGroup(GroupId),
    Unreachable(NodeId),
    With(Query<O>),
    Wake,
    Stop,
}

/// The handle of a node's thread (cheap to clone). The thread runs until [`Runner::stop`]:
/// the node's own wake-up function keeps its channel open.
pub struct Runner<O: Send + 'static> {
    tx: Sender<Command<O>>,
    view: View,
    thread: Arc<std::sync::Mutex<Option<JoinHandle<()>>>>,
    stalls: Arc<Stalls>,
}

/// How long the node's thread took to handle a batch of commands and its groups' work: a
/// long turn delays every group's heartbeats (and may cause elections).
#[derive(Debug, Default)]
pub struct Stalls {
    /// The longest turn since the thread started, in µs.
    pub longest_us: std::sync::atomic::AtomicU64,
    /// Turns longer than [`STALL`].
    pub over: std::sync::atomic::AtomicU64,
}

/// A turn of the node's thread longer than this counts as a stall (half a default tick).
pub const STALL: Duration = Duration::from_millis(50);

impl Stalls {
    fn record(&self, took: Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.longest_us.fetch_max(us, Relaxed);
        if took > STALL {
            self.over.fetch_add(1, Relaxed);
        }
    }
}

impl<O: Send + 'static> Clone for Runner<O> {
    fn clone(&self) -> Self {
        Runner {
            tx: self.tx.clone(),
            view: self.view.clone(),
            thread: Arc::clone(&self.thread),
            stalls: Arc::clone(&self.stalls),
        }
    }
}

impl<O: Send + 'static> std::fmt::Debug for Runner<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("view", &self.view)
            .finish_non_exhaustive()
    }
}

impl<O: Send + 'static> Runner<O> {
    /// Starts the node's thread. `build` makes the node from the wake-up function it must be
    /// given (storage completions call it); `tick` is the engine's clock period.
    pub fn spawn(
        name: &str,
        build: impl FnOnce(Box<dyn Fn() + Send + Sync>) -> Node<O>,
        tick: Duration,
        transport: Transport,
        events: EventSink,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let waker = tx.clone();
        let wake: Box<dyn Fn() + Send + Sync> = Box::new(move || {
            let _ = waker.send(Command::Wake);
        });
        let node = build(wake);
        let view = View::default();
        let thread_view = view.clone();
        let stalls = Arc::new(Stalls::default());
        let thread_stalls = Arc::clone(&stalls);
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                guarded(
                    || {
                        run(
                            node,
                            &rx,
                            tick,
                            transport,
                            events,
                            &thread_view,
                            &thread_stalls,
                        );
                    },
                    fail_stop,
                );
            })?;
        Ok(Runner {
            tx,
            view,
            thread: Arc::new(std::sync::Mutex::new(Some(thread))),
            stalls,
        })
    }

    /// Roles and leaders of the groups.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// How long the thread's turns took.
    pub fn stalls(&self) -> &Stalls {
        &self.stalls
    }

    /// Proposes `data`; `done` runs on the node thread with the outcome.
    pub fn propose(&self, group: GroupId, data: Bytes, done: Callback<O>) {
        if let Err(mpsc::SendError(Command::Propose(_, _, done))) =
            self.tx.send(Command::Propose(group, data, done))
        {
            done(Err(ProposeError::Unknown));
        }
    }

    /// Hands the node messages from a peer.
    pub fn receive(&self, from: NodeId, messages: Vec<(GroupId, Bytes)>) {
        let _ = self.tx.send(Command::Receive(from, messages, None));
    }

    /// Hands the node messages from a peer; `hold` is dropped on the node thread once they
    /// are handled (a transport releases its receive budget with it, so what waits for this
    /// thread stays bounded).
    pub fn receive_holding(
        &self,
        from: NodeId,
        messages: Vec<(GroupId, Bytes)>,
        hold: Box<dyn Send>,
    ) {
        let _ = self.tx.send(Command::Receive(from, messages, Some(hold)));
    }

    /// Asks for a linearizable read of a group (see [`Node::read_index`]); `done` runs on
    /// the node thread.
    pub fn read_index(&self, group: GroupId, done: crate::group::ReadDone) {
        // Once the thread stopped, `done` is dropped unanswered with the command.
        self.with(move |node| node.read_index(group, done));
    }

    /// Proposes a change of a group's members (see [`Node::propose_membership`]); `done` runs
    /// on the node thread.
    pub fn propose_membership(
        &self,
        group: GroupId,
        changes: Vec<crate::types::MemberChange>,
        done: crate::group::MembershipDone,
    ) {
        self.with(move |node| node.propose_membership(group, &changes, done));
    }

    /// Adds a group; `done` runs on the node thread.
    pub fn add_group(
        &self,
        group: GroupId,
        store: Box<dyn GroupStore<Outcome = O>>,
        done: Box<dyn FnOnce(Result<(), NodeError>) + Send>,
    ) {
        let _ = self.tx.send(Command::AddGroup(group, store, None, done));
    }

    /// Adds a group founded on `voters` rather than the node's configured voters (see
    /// [`Node::add_group_with_voters`]); `done` runs on the node thread.
    pub fn add_group_with_voters(
        &self,
        group: GroupId,
        store: Box<dyn GroupStore<Outcome = O>>,
        voters: Vec<NodeId>,
        done: Box<dyn FnOnce(Result<(), NodeError>) + Send>,
    ) {
        let _ = self
            .tx
            .send(Command::AddGroup(group, store, Some(voters), done));
    }

    /// Removes a group (its data was deleted).
    pub fn remove_group(&self, group: GroupId) {
        let _ = self.tx.send(Command::RemoveGroup(group));
    }

    /// A peer's connection failed.
    pub fn unreachable(&self, peer: NodeId) {
        let _ = self.tx.send(Command::Unreachable(peer));
    }

    /// Runs `f` on the node thread (status queries, tests).
    pub fn with(&self, f: impl FnOnce(&mut Node<O>) + Send + 'static) {
        let _ = self.tx.send(Command::With(Box::new(f)));
    }

    /// Every group's status, collected on the node thread (blocks the caller briefly).
    pub fn statuses(&self) -> BTreeMap<GroupId, GroupStatus> {
        let (tx, rx) = mpsc::channel();
        self.with(move |node| {
            let all = node
                .group_ids()
                .collect::<Vec<_>>()
                .into_iter()
                .filter_map(|g| node.status(g).map(|s| (g, s)))
                .collect();
            let _ = tx.send(all);
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default()
    }

    /// Stops the thread after it handled what is queued; waiting proposals are answered
    /// [`ProposeError::Unknown`].
    pub fn stop(&self) {
        let _ = self.tx.send(Command::Stop);
        let handle = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

/// Runs the node thread's body; a panic in it (the engine's `fatal!`: its invariants broken,
/// or a storage read failing where it cannot go on) goes to `on_panic` with its message.
fn guarded(body: impl FnOnce(), on_panic: impl FnOnce(&str)) {
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        on_panic(&message);
    }
}

/// What a panicked node thread does. The member could no longer take part in any group, yet
/// its published view would stay frozen and its handlers keep answering as if it could, so
/// the process stops at once and its supervisor restarts it from its durable state, as after
/// a crash (every ack it gave is durable on a majority; its own store recovers on open).
fn fail_stop(message: &str) {
    tracing::error!(
        panic = message,
        "the consensus thread panicked: stopping the process so it restarts from its durable state"
    );
    std::process::abort();
}

fn run<O: Send + 'static>(
    mut node: Node<O>,
    rx: &Receiver<Command<O>>,
    tick: Duration,
    mut transport: Transport,
    mut events: EventSink,
    view: &View,
    stalls: &Stalls,
) {
    let mut next_tick = Instant::now() + tick;
    loop {
        let timeout = next_tick.saturating_duration_since(Instant::now());
        let first = match rx.recv_timeout(timeout) {
            Ok(cmd) => Some(cmd),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let turn = Instant::now();
        let mut stop = false;
        for cmd in first
            .into_iter()
            .chain(std::iter::from_fn(|| rx.try_recv().ok()))
        {
            match cmd {
                Command::Propose(group, data, done) => node.propose(group, data, done),
                Command::Receive(from, messages, hold) => {
                    node.receive(from, messages);
                    drop(hold);
                }
                Command::AddGroup(group, store, voters, done) => {
                    let result = match voters {
                        Some(voters) => node.add_group_with_voters(group, store, voters),
                        None => node.add_group(group, store),
                    };
                    if result.is_ok() {
                        view.set(
                            group,
                            Some(GroupView {
                                role: Role::Follower,
                                leader: None,
                                term: 0,
                            }),
                        );
                    }
                    done(result);
                }
                Command::RemoveGroup(group) => {
                    node.remove_group(group);
                    view.set(group, None);
                }
                Command::Unreachable(peer) => node.report_unreachable(peer),
                Command::With(f) => f(&mut node),
                Command::Wake => {}
                Command::Stop => stop = true,
            }
            if stop {
                break;
            }
        }
        if Instant::now() >= next_tick {
            // The stores' upkeep (retention by age) reads the wall clock the node is given.
            let now_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
            node.tick_at(now_us);
            next_tick += tick;
            if next_tick < Instant::now() {
                // The thread was held up for more than a tick: do not burst ticks to catch up.
                next_tick = Instant::now() + tick;
            }
        }
        node.process();
        for (to, batch) in node.take_outbound() {
            transport(to, batch);
        }
        for event in node.take_events() {
            if let Event::RoleChanged {
                group,
                role,
                term,
                leader,
            } = &event
            {
                view.set(
                    *group,
                    Some(GroupView {
                        role: *role,
                        leader: *leader,
                        term: *term,
                    }),
                );
            }
            events(&event);
        }
        stalls.record(turn.elapsed());
        if stop {
            break;
        }
    }
    let ids: Vec<GroupId> = node.group_ids().collect();
    for id in ids {
        node.remove_group(id);
    }
}

#[cfg(test)]
mod tests {
    use super::guarded;

    #[test]
    fn a_panic_on_the_node_thread_reaches_the_fail_stop_with_its_message() {
        let mut seen = None;
        guarded(
            || panic!("last committed entry at 48 is missing"),
            |m| seen = Some(m.to_owned()),
        );
        assert_eq!(
            seen.as_deref(),
            Some("last committed entry at 48 is missing")
        );
        let index = 48;
        let mut seen = None;
        guarded(
            || panic!("entry {index} is missing"),
            |m| seen = Some(m.to_owned()),
        );
        assert_eq!(seen.as_deref(), Some("entry 48 is missing"));
        let mut called = false;
        guarded(|| {}, |_| called = true);
        assert!(!called, "a body that returns is not a failure");
    }
}
