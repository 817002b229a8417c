//! The simulation loop: nodes, clients, network, disks and the nemesis, all driven by one
//! seeded generator and one queue of events ordered by (virtual time, sequence number).
//!
//! Nothing here reads a clock, spawns a thread or iterates a hash map: the same seed replays
//! the same run, and a rolling hash of every event processed proves it.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use eddy_consensus::{
    Event as NodeEvent, GroupId, Membership, Node, NodeConfig, NodeId, ProposeError, Role,
};

use crate::checker::Checker;
use crate::client::{Answer, Leaders, Next, MAX_ATTEMPTS, REQUEST_TIMEOUT_MS};
use crate::config::{FaultConfig, Millis, SimConfig};
use crate::hash::Fnv;
use crate::net::{Fate, Network, PartitionKind};
use crate::probe::{data_loss_hazard, digest, DurableLog, Observation, ProbeHandle};
use crate::report::{FaultKind, Report};
use crate::rng::SimRng;
use crate::store::{DiskFault, StoreFactory};
use crate::workload::{OpId, Workload};

mod membership;

use membership::Driver;

/// Client reads (polls, aggregate reads) at each nemesis step.
const READS_PER_STEP: usize = 3;
/// How long after the workload stops every member must have caught up.
const DRAIN_LIMIT_MS: Millis = 120_000;
/// How often the end of a run checks whether the cluster caught up.
const DRAIN_POLL_MS: Millis = 100;
/// Events kept for a failure's report.
const RECENT: usize = 60;

/// Why a run failed: a broken guarantee (or a panic), when, and what led to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The run's seed.
    pub seed: u64,
    /// Virtual time of the failure.
    pub at: Millis,
    /// What went wrong.
    pub message: String,
    /// The last events before it, oldest first.
    pub recent: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} failed at {} ms: {}",
            self.seed, self.at, self.message
        )
    }
}

/// Something that happens at a virtual time.
#[derive(Debug)]
enum Event {
    /// A node's clock ticks (its `life` must still be current).
    Tick { node: NodeId, life: u64 },
    /// A stalled clock catches up.
    Resume { node: NodeId, life: u64 },
    /// A batch arrives.
    Deliver(Flight),
    /// A node's fsync completes.
    Sync { node: NodeId, life: u64 },
    /// A client's attempt reaches a node.
    Request {
        attempt: Attempt,
        group: GroupId,
        payload: Bytes,
    },
    /// A node's answer reaches a client.
    Answer { attempt: Attempt, answer: Answer },
    /// A client stops waiting for an attempt.
    Timeout(Attempt),
    /// A client acts: next attempt, or next operation.
    Wake { client: usize },
    /// The nemesis draws faults.
    Nemesis,
    /// A partition ends (if it is still the one in force).
    Heal { epoch: u64 },
    /// A crashed node starts again.
    Restart { node: NodeId },
    /// A node's disk works again.
    Repair { node: NodeId, life: u64 },
    /// A node whose group failed is restarted by its operator.
    Reboot { node: NodeId, life: u64 },
    /// Faults stop; the cluster must recover.
    Calm,
    /// Every group must have acknowledged a proposal made after the faults stopped.
    LivenessDeadline,
    /// Clients start no new operations.
    StopWorkload,
    /// Has every member caught up?
    Drain,
    /// The membership driver's pass over the groups.
    Membership,
}

/// A batch between two nodes, each in the life it had when the batch was sent.
#[derive(Debug)]
struct Flight {
    from: NodeId,
    to: NodeId,
    from_life: u64,
    to_life: u64,
    batch: Vec<(GroupId, Bytes)>,
}

/// One attempt of a client's operation, sent to one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Attempt {
    client: usize,
    op: OpId,
    /// Attempt number, from 1.
    number: u32,
    node: NodeId,
}

impl Attempt {
    fn hash(&self, h: &mut Fnv) {
        for v in [
            self.client as u64,
            self.op,
            u64::from(self.number),
            self.node,
        ] {
            h.write_u64(v);
        }
    }
}

impl Event {
    fn name(&self) -> &'static str {
        match self {
            Event::Tick { .. } => "tick",
            Event::Resume { .. } => "resume",
            Event::Deliver(_) => "deliver",
            Event::Sync { .. } => "sync",
            Event::Request { .. } => "request",
            Event::Answer { .. } => "answer",
            Event::Timeout(_) => "timeout",
            Event::Wake { .. } => "wake",
            Event::Nemesis => "nemesis",
            Event::Heal { .. } => "heal",
            Event::Restart { .. } => "restart",
            Event::Repair { .. } => "repair",
            Event::Reboot { .. } => "reboot",
            Event::Calm => "calm",
            Event::LivenessDeadline => "liveness-deadline",
            Event::StopWorkload => "stop-workload",
            Event::Drain => "drain",
            Event::Membership => "membership",
        }
    }

    /// Feeds the event into the run's rolling hash.
    fn hash(&self, h: &mut Fnv) {
        h.write(self.name().as_bytes());
        match self {
            Event::Tick { node, life }
            | Event::Resume { node, life }
            | Event::Sync { node, life }
            | Event::Repair { node, life }
            | Event::Reboot { node, life } => {
                h.write_u64(*node);
                h.write_u64(*life);
            }
            Event::Deliver(f) => {
                for v in [f.from, f.to, f.from_life, f.to_life] {
                    h.write_u64(v);
                }
                for (group, bytes) in &f.batch {
                    h.write_u64(group.0);
                    h.write(bytes);
                }
            }
            Event::Request {
                attempt,
                group,
                payload,
            } => {
                attempt.hash(h);
                h.write_u64(group.0);
                h.write(payload);
            }
            Event::Answer { attempt, answer } => {
                attempt.hash(h);
                h.write(format!("{answer:?}").as_bytes());
            }
            Event::Timeout(attempt) => attempt.hash(h),
            Event::Wake { client } => h.write_u64(*client as u64),
            Event::Heal { epoch } => h.write_u64(*epoch),
            Event::Restart { node } => h.write_u64(*node),
            Event::Nemesis
            | Event::Calm
            | Event::LivenessDeadline
            | Event::StopWorkload
            | Event::Drain
            | Event::Membership => {}
        }
    }
}

/// An event with its place in the queue.
#[derive(Debug)]
struct Scheduled {
    at: Millis,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    /// Reversed, so the standard max-heap pops the earliest (then the first scheduled).
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// One simulated node: the engine (when up), its data directory and the probes of its
/// groups.
struct SimNode<F: StoreFactory> {
    id: NodeId,
    config: NodeConfig,
    node: Option<Node<F::Outcome>>,
    dir: F::Dir,
    probes: BTreeMap<GroupId, ProbeHandle>,
    /// Bumped at every crash: events of an earlier life are ignored.
    life: u64,
    sync_scheduled: bool,
    /// Ticks owed while the clock is stalled.
    stalled: Option<u64>,
    /// How far the node's wall clock (what its stores stamp) is off the simulation's time, in
    /// ms: clock jumps step it either way, as an NTP step does; it survives crashes (it is
    /// the machine's clock).
    wall_skew_ms: i64,
    disk_fault: bool,
    reboot_scheduled: bool,
    /// Peers reported unreachable since the last heal.
    unreachable: BTreeSet<NodeId>,
    /// How the next start finds its data directory.
    next_start: NextStart,
    /// Whether it takes part in the cluster.
    service: Service,
    /// Each group's membership as this node's events told it, in order (set at each start
    /// from what the node recovered).
    views: BTreeMap<GroupId, Membership>,
}

/// Whether a node restarts on its own data or on a lost (new, empty) data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NextStart {
    /// Recovers what its directory holds.
    Recover,
    /// Its directory was lost: it rebuilds, as the server does when it starts on an empty
    /// directory while its peers have data.
    Rebuild,
}

/// Whether a node takes part in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Service {
    /// A new member not started yet.
    Spare,
    /// Started (a founder from the start, a new member once it joined), up or down.
    Serving,
    /// Kept down through the calm phase (to show a removed member is not counted).
    Held,
    /// Removed from every group and stopped for good.
    Retired,
}

/// A proposal outcome, as a node's callback hands it over.
struct Reply {
    attempt: Attempt,
    group: GroupId,
    /// On success: the entry the node had just applied (index, term, payload).
    result: Result<Option<(u64, u64, Bytes)>, ProposeError>,
}

type Replies = Arc<Mutex<Vec<Reply>>>;

/// A client's operation in progress.
struct ClientOp {
    id: OpId,
    group: GroupId,
    payload: Bytes,
    attempts: u32,
    /// The number of the attempt awaiting an answer.
    waiting: Option<u32>,
    /// Where the next attempt goes (`None`: any node).
    target: Option<NodeId>,
}

struct Client {
    /// A liveness client proposes one operation to this group once the faults stop, retrying
    /// until it is acknowledged.
    liveness: Option<GroupId>,
    leaders: Leaders,
    op: Option<ClientOp>,
    finished: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Faulty,
    Calm,
    Draining,
    Done,
}

/// A simulated cluster under a seeded schedule of faults and client operations.
pub struct Sim<F: StoreFactory, W: Workload> {
    cfg: SimConfig,
    faults: FaultConfig,
    rng: SimRng,
    now: Millis,
    seq: u64,
    queue: BinaryHeap<Scheduled>,
    nodes: Vec<SimNode<F>>,
    factory: F,
    workload: W,
    groups: Vec<GroupId>,
    net: Network,
    clients: Vec<Client>,
    replies: Replies,
    checker: Checker,
    report: Report,
    hash: Fnv,
    phase: Phase,
    next_op: OpId,
    calm_at: Millis,
    recent: VecDeque<(Millis, String)>,
    trace: bool,
    /// The membership change the run makes, if any.
    driver: Option<Driver>,
}

impl<F: StoreFactory, W: Workload> fmt::Debug for Sim<F, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim")
            .field("seed", &self.cfg.seed)
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

type Step = Result<(), String>;

impl<F: StoreFactory, W: Workload> Sim<F, W> {
    /// A cluster of `cfg.nodes` members running the workload's groups over the factory's
    /// stores. Each node's election timeout is fixed from the seed.
    pub fn new(cfg: SimConfig, mut factory: F, workload: W) -> Self {
        assert!(cfg.nodes >= 1, "a cluster has members");
        let mut rng = SimRng::new(cfg.seed);
        let voters: Vec<NodeId> = (1..=cfg.nodes).collect();
        let groups = workload.groups();
        // A membership change may start one new member, after the founders; it runs every
        // group with the founders as the groups' founding voters (so it never campaigns).
        let total = cfg.nodes + u64::from(cfg.membership.is_some());
        let nodes = (1..=total)
            .map(|id| {
                let mut config = NodeConfig::new(id, voters.clone());
                // The engine's own randomized timeout is not seedable: fix it per node and
                // let the seed choose it (and jitter the ticks).
                config.election_ticks = 10 + usize::try_from(rng.below(10)).expect("small");
                config.max_election_ticks = config.election_ticks + 1;
                config.heartbeat_ticks = 2;
                SimNode {
                    id,
                    config,
                    node: None,
                    dir: factory.create(id),
                    probes: groups
                        .iter()
                        .map(|g| (*g, ProbeHandle::default()))
                        .collect(),
                    life: 0,
                    next_start: NextStart::Recover,
                    sync_scheduled: false,
                    stalled: None,
                    wall_skew_ms: 0,
                    disk_fault: false,
                    reboot_scheduled: false,
                    unreachable: BTreeSet::new(),
                    service: Service::Spare,
                    views: BTreeMap::new(),
                }
            })
            .collect();
        let driver = cfg
            .membership
            .map(|scenario| Driver::new(scenario, &voters, total, &mut rng, &cfg));
        let clients = (0..cfg.clients)
            .map(|_| Client {
                liveness: None,
                leaders: Leaders::default(),
                op: None,
                finished: false,
            })
            .collect();
        Sim {
            faults: cfg.faults.clone(),
            checker: Checker::new(voters),
            report: Report {
                seed: cfg.seed,
                ..Report::default()
            },
            net: Network::new(total),
            cfg,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            nodes,
            factory,
            workload,
            groups,
            clients,
            replies: Arc::default(),
            hash: Fnv::new(),
            phase: Phase::Faulty,
            next_op: 1,
            calm_at: 0,
            recent: VecDeque::new(),
            trace: false,
            driver,
        }
    }

    /// Prints every event to stderr as it happens (for replaying a failed seed).
    #[must_use]
    pub fn with_trace(mut self, trace: bool) -> Self {
        self.trace = trace;
        self
    }

    /// Runs to the end: faults, calm, drain, final check.
    pub fn run(mut self) -> Result<Report, Failure> {
        match self.run_inner() {
            Ok(()) => {
                if let Some(driver) = &self.driver {
                    self.report.membership = *driver.counts();
                }
                self.report.simulated_ms = self.now;
                self.report.hash = self.hash.finish();
                Ok(self.report)
            }
            Err(message) => Err(self.failure(message)),
        }
    }

    /// The failure report for `message` at the current time.
    fn failure(&self, message: String) -> Failure {
        Failure {
            seed: self.cfg.seed,
            at: self.now,
            message,
            recent: self
                .recent
                .iter()
                .map(|(at, what)| format!("{at:>8} ms  {what}"))
                .collect(),
        }
    }

    fn run_inner(&mut self) -> Step {
        for id in 1..=self.cfg.nodes {
            self.start(id)?;
        }
        for client in 0..self.clients.len() {
            let at = self.rng.range(1, self.cfg.think_ms.max(1) * 4);
            self.schedule(at, Event::Wake { client });
        }
        if self.cfg.fault_ms > 0 {
            self.schedule(self.faults.step_ms.max(1), Event::Nemesis);
        }
        self.schedule(self.cfg.fault_ms, Event::Calm);
        self.schedule(self.cfg.end_ms(), Event::StopWorkload);
        if let Some((at, scenario)) = self.driver.as_ref().map(|d| (d.start_at(), d.scenario())) {
            self.note(|| format!("membership: scenario {} from {at} ms", scenario.name()));
            self.schedule(at, Event::Membership);
        }
        while let Some(Scheduled { at, seq, event }) = self.queue.pop() {
            self.now = at;
            self.report.events += 1;
            self.hash.write_u64(at);
            self.hash.write_u64(seq);
            event.hash(&mut self.hash);
            // An engine assertion fails the seed with the events that led to it.
            let handled =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.handle(event)));
            match handled {
                Ok(result) => result?,
                Err(panic) => return Err(format!("panicked: {}", panic_message(&*panic))),
            }
            if self.phase == Phase::Done {
                return Ok(());
            }
        }
        Err("the event queue ran dry".into())
    }

    fn schedule(&mut self, after: Millis, event: Event) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at: self.now + after,
            seq: self.seq,
            event,
        });
    }

    /// Records a line for the failure report (and prints it when tracing).
    fn note(&mut self, what: impl FnOnce() -> String) {
        let line = what();
        if self.trace {
            eprintln!("{:>8} ms  {line}", self.now);
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back((self.now, line));
    }

    fn fault(&mut self, kind: FaultKind) {
        self.report.faults.add(kind, 1);
    }

    fn slot(id: NodeId) -> usize {
        usize::try_from(id - 1).expect("node ids start at 1")
    }

    fn up(&self, id: NodeId) -> bool {
        self.nodes[Self::slot(id)].node.is_some()
    }

    fn handle(&mut self, event: Event) -> Step {
        match event {
            Event::Tick { node, life } => self.tick(node, life),
            Event::Resume { node, life } => self.resume(node, life),
            Event::Deliver(flight) => self.deliver(flight),
            Event::Sync { node, life } => self.sync(node, life),
            Event::Request {
                attempt,
                group,
                payload,
            } => self.request(attempt, group, payload),
            Event::Answer { attempt, answer } => {
                self.answer(attempt, &answer);
                Ok(())
            }
            Event::Timeout(attempt) => {
                self.answer(attempt, &Answer::TimedOut);
                Ok(())
            }
            Event::Wake { client } => {
                self.wake(client);
                Ok(())
            }
            Event::Nemesis => {
                self.nemesis();
                self.client_read()
            }
            Event::Heal { epoch } => {
                if self.net.epoch() == epoch && self.phase == Phase::Faulty {
                    self.heal();
                }
                Ok(())
            }
            Event::Restart { node } => {
                let n = &self.nodes[Self::slot(node)];
                if self.up(node) || n.service != Service::Serving {
                    Ok(())
                } else {
                    self.start(node)
                }
            }
            Event::Repair { node, life } => {
                let n = &mut self.nodes[Self::slot(node)];
                if n.life == life && n.disk_fault {
                    n.disk_fault = false;
                    self.factory.set_fault(&mut n.dir, None);
                    self.note(|| format!("node {node}: disk repaired"));
                }
                Ok(())
            }
            Event::Reboot { node, life } => {
                let n = &mut self.nodes[Self::slot(node)];
                n.reboot_scheduled = false;
                if n.life == life && n.node.is_some() {
                    self.fault(FaultKind::Reboot);
                    self.crash(node, false);
                    self.start(node)?;
                }
                Ok(())
            }
            Event::Calm => self.calm(),
            Event::LivenessDeadline => self.liveness_deadline(),
            Event::StopWorkload => {
                self.phase = Phase::Draining;
                self.note(|| "workload stops".into());
                self.release_members()?;
                self.schedule(0, Event::Drain);
                Ok(())
            }
            Event::Drain => self.drain(),
            Event::Membership => self.membership_pass(),
        }
    }

    // ----- nodes -----

    /// Starts (or restarts) a node on its data directory.
    fn start(&mut self, id: NodeId) -> Step {
        let slot = Self::slot(id);
        let mut node = Node::new(self.nodes[slot].config.clone(), || {});
        let next = std::mem::replace(&mut self.nodes[slot].next_start, NextStart::Recover);
        if next == NextStart::Rebuild {
            // The server learns both facts from the replication greeting: this node's data
            // directory is new while its peers have data, and the peers see a new incarnation.
            node.set_rebuilding();
            for peer in 1..=self.nodes.len() as u64 {
                if peer != id {
                    if let Some(other) = self.nodes[Self::slot(peer)].node.as_mut() {
                        other.peer_lost_state(id);
                    }
                }
            }
        }
        for &group in &self.groups.clone() {
            let n = &mut self.nodes[slot];
            let store = self.factory.open(&mut n.dir, group).map_err(|e| {
                let cause = std::error::Error::source(&e)
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default();
                format!("node {id}: {group} does not reopen: {e}{cause}")
            })?;
            let applied = store.applied_index();
            let probe = n.probes[&group].wrap(store);
            self.checker.opened(id, group, applied);
            node.add_group(group, Box::new(probe))
                .map_err(|e| format!("node {id}: {group} does not start: {e}"))?;
        }
        let n = &mut self.nodes[slot];
        n.views = self
            .groups
            .iter()
            .filter_map(|g| Some((*g, node.membership(*g)?)))
            .collect();
        n.node = Some(node);
        n.unreachable.clear();
        if n.service == Service::Spare {
            n.service = Service::Serving;
        }
        let life = n.life;
        if self.now > 0 {
            self.fault(FaultKind::Restart);
        }
        self.note(|| format!("node {id}: starts (life {life})"));
        let first = self.rng.range(1, self.cfg.tick_ms);
        self.schedule(first, Event::Tick { node: id, life });
        self.step(id)
    }

    /// Kills a node's process: unsynced writes are lost (part of them torn onto the disk
    /// with `tear`), in-flight messages to and from it are dropped.
    fn crash(&mut self, id: NodeId, tear: bool) {
        let n = &mut self.nodes[Self::slot(id)];
        let unsynced = self.factory.unsynced(&n.dir);
        let kept = self.factory.crash(&mut n.dir, tear, &mut self.rng);
        n.node = None;
        n.life += 1;
        n.sync_scheduled = false;
        n.stalled = None;
        n.disk_fault = false;
        n.unreachable.clear();
        if unsynced {
            self.fault(FaultKind::CrashUnsynced);
        }
        if kept > 0 {
            self.fault(FaultKind::TornWrite);
        }
        self.note(|| {
            format!("node {id}: crashes (unsynced writes: {unsynced}, torn entries kept: {kept})")
        });
        // Its peers' connections to it fail.
        for peer in 1..=self.nodes.len() as u64 {
            if peer != id {
                if let Some(node) = self.nodes[Self::slot(peer)].node.as_mut() {
                    node.report_unreachable(id);
                }
            }
        }
    }

    fn tick(&mut self, id: NodeId, life: u64) -> Step {
        let period = self.cfg.tick_ms;
        let n = &mut self.nodes[Self::slot(id)];
        if n.life != life || n.node.is_none() {
            return Ok(());
        }
        let jitter = period / 10;
        let next = period - jitter + self.rng.range(0, 2 * jitter);
        self.schedule(next, Event::Tick { node: id, life });
        let n = &mut self.nodes[Self::slot(id)];
        if let Some(owed) = n.stalled.as_mut() {
            *owed += 1;
            return Ok(());
        }
        let now_us = self.now * 1000;
        n.node.as_mut().expect("up").tick_at(now_us);
        self.step(id)
    }

    fn resume(&mut self, id: NodeId, life: u64) -> Step {
        let n = &mut self.nodes[Self::slot(id)];
        if n.life != life {
            return Ok(());
        }
        let Some(owed) = n.stalled.take() else {
            return Ok(());
        };
        let node = n.node.as_mut().expect("a stalled node is up");
        for _ in 0..owed {
            node.tick_at(self.now * 1000);
        }
        self.note(|| format!("node {id}: clock resumes with a burst of {owed} ticks"));
        self.step(id)
    }

    fn deliver(&mut self, f: Flight) -> Step {
        if self.nodes[Self::slot(f.from)].life != f.from_life || self.net.is_cut(f.from, f.to) {
            return Ok(());
        }
        let n = &mut self.nodes[Self::slot(f.to)];
        if n.life != f.to_life {
            return Ok(());
        }
        if n.node.is_none() {
            return Ok(());
        }
        let mut batch = f.batch;
        // What the server does before its node sees a snapshot (an event shard's records
        // are copied from the sender): a failed copy drops the message.
        let (from, to) = (Self::slot(f.from), Self::slot(f.to));
        let mut dropped = Vec::new();
        let mut lost = 0;
        let lose = self.faults.snapshot_lost;
        batch.retain(|(group, message)| {
            let Some(snapshot) = eddy_consensus::wire::snapshot_in(message) else {
                return true;
            };
            let (sender, receiver) = if from < to {
                let (l, r) = self.nodes.split_at_mut(to);
                (&l[from], &mut r[0])
            } else {
                let (l, r) = self.nodes.split_at_mut(from);
                (&r[0], &mut l[to])
            };
            match self
                .factory
                .copy_snapshot(&sender.dir, &mut receiver.dir, *group, &snapshot.data)
            {
                Ok(true) if self.rng.chance(lose) => {
                    lost += 1;
                    false
                }
                Ok(_) => true,
                Err(e) => {
                    dropped.push(format!("{group} snapshot at {}: {e}", snapshot.meta.index));
                    false
                }
            }
        });
        for d in dropped {
            self.note(|| format!("node {}: copy for {d} failed, dropped", f.to));
        }
        for _ in 0..lost {
            self.fault(FaultKind::SnapshotLostAfterCopy);
            self.note(|| format!("node {}: a snapshot copied, then lost", f.to));
        }
        let Some(node) = self.nodes[to].node.as_mut() else {
            return Ok(());
        };
        node.receive(f.from, batch);
        self.step(f.to)
    }

    fn sync(&mut self, id: NodeId, life: u64) -> Step {
        let n = &mut self.nodes[Self::slot(id)];
        if n.life != life || n.node.is_none() {
            return Ok(());
        }
        n.sync_scheduled = false;
        self.factory.sync(&mut n.dir);
        self.step(id)
    }

    /// After any input to a node: process, send what it produced, check what it did.
    fn step(&mut self, id: NodeId) -> Step {
        let slot = Self::slot(id);
        loop {
            let Some(node) = self.nodes[slot].node.as_mut() else {
                return Ok(());
            };
            node.process();
            let outbound = node.take_outbound();
            let events = node.take_events();
            let mut unreachable = Vec::new();
            for (to, batch) in outbound {
                if !self.send(id, to, batch) && self.nodes[slot].unreachable.insert(to) {
                    unreachable.push(to);
                }
            }
            for event in events {
                self.node_event(id, &event)?;
            }
            self.observe(id)?;
            self.drain_replies(false)?;
            if unreachable.is_empty() {
                break;
            }
            // The transport's connection to these peers failed: tell the engine, which may
            // have more to send.
            let node = self.nodes[slot].node.as_mut().expect("up");
            for peer in unreachable {
                node.report_unreachable(peer);
            }
        }
        let n = &self.nodes[slot];
        let node = n.node.as_ref().expect("up");
        let commits: Vec<(GroupId, u64)> = self
            .groups
            .iter()
            .filter_map(|g| node.status(*g).map(|s| (*g, s.commit)))
            .collect();
        for (group, commit) in commits {
            self.checker.commit_index(id, group, commit)?;
        }
        if !n.sync_scheduled && self.factory.unsynced(&n.dir) {
            let (lo, hi) = self.faults.fsync_ms;
            let mut after = self.rng.range(lo, hi.max(lo)).max(1);
            if self.phase == Phase::Faulty && self.rng.chance(self.faults.slow_fsync) {
                after = self.faults.slow_fsync_ms.max(1);
                self.fault(FaultKind::SlowFsync);
            }
            let n = &mut self.nodes[slot];
            n.sync_scheduled = true;
            let life = n.life;
            self.schedule(after, Event::Sync { node: id, life });
        }
        Ok(())
    }

    /// Puts a batch on the wire; false when a cut link dropped it.
    fn send(&mut self, from: NodeId, to: NodeId, batch: Vec<(GroupId, Bytes)>) -> bool {
        let calm = self.phase != Phase::Faulty;
        match self.net.fate(from, to, &self.faults, calm, &mut self.rng) {
            Fate::Cut => {
                self.fault(FaultKind::MessageCut);
                false
            }
            Fate::Lost => {
                self.fault(FaultKind::MessageLost);
                true
            }
            Fate::Delivered { delays, reordered } => {
                if reordered {
                    self.fault(FaultKind::MessageReordered);
                }
                if delays.len() > 1 {
                    self.fault(FaultKind::MessageDuplicated);
                }
                let from_life = self.nodes[Self::slot(from)].life;
                let to_life = self.nodes[Self::slot(to)].life;
                let copies = delays.len();
                let mut batch = Some(batch);
                for (i, delay) in delays.into_iter().enumerate() {
                    let batch = if i + 1 == copies {
                        batch.take().expect("the last copy")
                    } else {
                        batch.clone().expect("copies before the last")
                    };
                    self.schedule(
                        delay,
                        Event::Deliver(Flight {
                            from,
                            to,
                            from_life,
                            to_life,
                            batch,
                        }),
                    );
                }
                true
            }
        }
    }

    fn node_event(&mut self, id: NodeId, event: &NodeEvent) -> Step {
        match *event {
            NodeEvent::RoleChanged {
                group,
                role,
                term,
                leader,
            } => {
                self.note(|| {
                    format!(
                        "node {id}: {group} {} in term {term} (leader {leader:?})",
                        role.as_str()
                    )
                });
                if role != Role::Follower {
                    // Only a voter of its own configuration campaigns, and leads.
                    let view = &self.nodes[Self::slot(id)].views[&group];
                    if !view.voters.contains(&id) && !view.voters_outgoing.contains(&id) {
                        return Err(format!(
                            "{group}: node {id} became {} in term {term} but is no voter of \
                             its configuration {view:?}",
                            role.as_str()
                        ));
                    }
                }
                if role == Role::Leader {
                    self.report.elections += 1;
                    self.checker.leader(group, term, id)?;
                }
            }
            NodeEvent::MembershipChanged {
                group,
                ref membership,
            } => {
                self.note(|| format!("node {id}: {group} members {membership:?}"));
                self.checker.membership(id, group, membership)?;
                self.nodes[Self::slot(id)]
                    .views
                    .insert(group, membership.clone());
            }
            NodeEvent::GroupFailed { group } => {
                self.fault(FaultKind::GroupFailed);
                self.note(|| format!("node {id}: {group} failed"));
                let n = &mut self.nodes[Self::slot(id)];
                if !n.reboot_scheduled {
                    n.reboot_scheduled = true;
                    let life = n.life;
                    let after = 1 + self.rng.exponential(self.faults.down_mean_ms.max(500));
                    self.schedule(after, Event::Reboot { node: id, life });
                }
            }
        }
        Ok(())
    }

    /// Feeds the checker what the node's stores applied and installed.
    fn observe(&mut self, id: NodeId) -> Step {
        for g in 0..self.groups.len() {
            let group = self.groups[g];
            let observed =
                std::mem::take(&mut self.nodes[Self::slot(id)].probes[&group].lock().observed);
            for o in observed {
                match o {
                    Observation::Applied {
                        index,
                        term,
                        digest,
                    } => {
                        let durable_on = self.durable_on(group, index, term);
                        self.checker
                            .applied(id, group, (index, term, digest), &durable_on)
                            .map_err(|e| format!("{e}; {}", self.durability_of(group, index)))?;
                    }
                    Observation::Snapshot(meta) => {
                        self.report.snapshots += 1;
                        self.note(|| {
                            format!("node {id}: {group} installs a snapshot at {}", meta.index)
                        });
                        self.checker.snapshot(id, group, meta)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// What each member holds durably at `index`, for failure reports.
    fn durability_of(&self, group: GroupId, index: u64) -> String {
        let parts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| {
                let s = n.probes[&group].lock();
                format!(
                    "node {} (up: {}): snapshot {}, durable through {}, term at {index}: {:?}",
                    n.id,
                    n.node.is_some(),
                    s.durable.base().index,
                    s.durable.last(),
                    s.durable.term(index)
                )
            })
            .collect();
        parts.join("; ")
    }

    /// The nodes that hold the entry durably.
    fn durable_on(&self, group: GroupId, index: u64, term: u64) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|n| n.probes[&group].lock().durable.has(index, term))
            .map(|n| n.id)
            .collect()
    }

    /// Hands the proposal outcomes the nodes' callbacks produced to the checker and, after a
    /// network delay, to the clients. `immediate`: they were answered on the spot (certainly
    /// not in the log).
    fn drain_replies(&mut self, immediate: bool) -> Step {
        let replies =
            std::mem::take(&mut *self.replies.lock().unwrap_or_else(PoisonError::into_inner));
        for r in replies {
            let settled = (r.attempt.op, u64::from(r.attempt.number));
            let dir = &mut self.nodes[Self::slot(r.attempt.node)].dir;
            self.factory.settled(dir, r.group, settled);
            let answer = match r.result {
                Ok(Some((index, term, payload))) => {
                    let carried = self.workload.op_id(r.group, &payload);
                    let durable_on = self.durable_on(r.group, index, term);
                    let (op, node) = (r.attempt.op, r.attempt.node);
                    self.checker
                        .acked(op, node, (index, term), carried, &durable_on, self.now)
                        .map_err(|e| format!("{e}; {}", self.durability_of(r.group, index)))?;
                    let dir = &mut self.nodes[Self::slot(node)].dir;
                    if self.factory.acked(dir, r.group, index, op)? {
                        Answer::Acked { index }
                    } else {
                        Answer::Transient
                    }
                }
                Ok(None) => {
                    return Err(format!(
                        "node {}: op {} acknowledged before any entry was applied",
                        r.attempt.node, r.attempt.op
                    ))
                }
                Err(error) => {
                    if immediate || error == ProposeError::Superseded {
                        self.checker.refused(r.attempt.op);
                    }
                    let dir = &mut self.nodes[Self::slot(r.attempt.node)].dir;
                    Answer::Error(self.factory.told_error(dir, r.group, error)?)
                }
            };
            let delay = Network::client_delay(&self.faults, &mut self.rng);
            let attempt = r.attempt;
            self.schedule(delay, Event::Answer { attempt, answer });
        }
        Ok(())
    }

    // ----- clients -----

    fn wake(&mut self, client: usize) {
        let c = &self.clients[client];
        if c.finished {
            return;
        }
        if c.op.is_none() {
            let group = match c.liveness {
                Some(group) => group,
                None if self.phase == Phase::Faulty || self.phase == Phase::Calm => {
                    self.workload.choose_group(&mut self.rng)
                }
                None => return,
            };
            let id = self.next_op;
            self.next_op += 1;
            let payload = self.workload.payload(group, id, &mut self.rng);
            self.report.ops += 1;
            let target = self.clients[client].leaders.get(group);
            self.clients[client].op = Some(ClientOp {
                id,
                group,
                payload,
                attempts: 0,
                waiting: None,
                target,
            });
        }
        let op = self.clients[client].op.as_mut().expect("set above");
        if op.waiting.is_some() {
            return;
        }
        let to = if let Some(to) = op.target {
            to
        } else {
            // Clients know the cluster's members (a removed or not yet added node is not
            // one); without membership changes, every node from the start.
            let members: Vec<NodeId> = self
                .nodes
                .iter()
                .filter(|n| matches!(n.service, Service::Serving | Service::Held))
                .map(|n| n.id)
                .collect();
            members[self.rng.index(members.len())]
        };
        op.attempts += 1;
        op.waiting = Some(op.attempts);
        let attempt = Attempt {
            client,
            op: op.id,
            number: op.attempts,
            node: to,
        };
        let (group, payload) = (op.group, op.payload.clone());
        if attempt.number > 1 {
            self.report.retries += 1;
        }
        let delay = Network::client_delay(&self.faults, &mut self.rng);
        self.schedule(
            delay,
            Event::Request {
                attempt,
                group,
                payload,
            },
        );
        self.schedule(REQUEST_TIMEOUT_MS, Event::Timeout(attempt));
    }

    fn request(&mut self, attempt: Attempt, group: GroupId, payload: Bytes) -> Step {
        let id = attempt.node;
        let slot = Self::slot(id);
        if self.nodes[slot].node.is_none() {
            let delay = Network::client_delay(&self.faults, &mut self.rng);
            let answer = Answer::Refused;
            self.schedule(delay, Event::Answer { attempt, answer });
            return Ok(());
        }
        self.checker.proposed(attempt.op, group, self.now);
        let n = &mut self.nodes[slot];
        let wall = self.now.saturating_add_signed(n.wall_skew_ms);
        let payload = self.factory.prepare(
            &mut n.dir,
            group,
            (attempt.op, u64::from(attempt.number)),
            payload,
            wall,
        )?;
        let replies = Arc::clone(&self.replies);
        let probe = self.nodes[slot].probes[&group].clone();
        let node = self.nodes[slot].node.as_mut().expect("up");
        node.propose(
            group,
            payload,
            Box::new(move |result| {
                let result = result.map(|_| probe.lock().last_applied.clone());
                replies
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Reply {
                        attempt,
                        group,
                        result,
                    });
            }),
        );
        self.drain_replies(true)?;
        self.step(id)
    }

    /// A client learns what became of an attempt (or stops waiting for it).
    fn answer(&mut self, attempt: Attempt, answer: &Answer) {
        let phase = self.phase;
        let client = attempt.client;
        let c = &mut self.clients[client];
        let Some(current) = c.op.as_mut() else {
            return;
        };
        if current.id != attempt.op {
            return;
        }
        let acked = matches!(answer, Answer::Acked { .. });
        if !acked && current.waiting != Some(attempt.number) {
            return; // an answer to an attempt already given up on
        }
        if answer.uncertain() {
            self.report.uncertain += 1;
        }
        let max = if c.liveness.is_some() {
            None
        } else {
            Some(MAX_ATTEMPTS)
        };
        let group = current.group;
        let next = c.leaders.next(
            group,
            attempt.node,
            current.attempts,
            answer,
            max,
            &mut self.rng,
        );
        match next {
            Next::Done | Next::GiveUp => {
                c.op = None;
                if next == Next::Done {
                    self.report.acked += 1;
                } else {
                    self.report.abandoned += 1;
                }
                if c.liveness.is_some() {
                    c.finished = true;
                    let took = self.now - self.calm_at;
                    self.report.liveness_ms = self.report.liveness_ms.max(took);
                    self.note(|| {
                        format!("{group}: acknowledged {took} ms after the faults stopped")
                    });
                } else if phase != Phase::Draining {
                    let think = self.rng.exponential(self.cfg.think_ms);
                    self.schedule(think, Event::Wake { client });
                }
            }
            Next::Retry { after, to } => {
                current.waiting = None;
                current.target = to;
                self.schedule(after, Event::Wake { client });
            }
        }
    }

    // ----- faults -----

    /// Nodes that joined and were not removed: the ones that count as down when not up.
    fn in_service(&self) -> u64 {
        self.nodes
            .iter()
            .filter(|n| matches!(n.service, Service::Serving | Service::Held))
            .count() as u64
    }

    fn live_nodes(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|n| n.node.is_some())
            .map(|n| n.id)
            .collect()
    }

    fn nemesis(&mut self) {
        if self.phase != Phase::Faulty {
            return;
        }
        let f = self.faults.clone();
        self.maybe_partition(&f);
        self.maybe_crash(&f);
        self.maybe_wipe(&f);
        let live = self.live_nodes();
        self.maybe_clock_jump(&f, &live);
        self.maybe_disk_fault(&f, &live);
        if !live.is_empty() && self.rng.chance(f.compact) {
            let id = live[self.rng.index(live.len())];
            self.compact(id);
        }
        if !live.is_empty() && self.rng.chance(f.delete_segments) {
            let id = live[self.rng.index(live.len())];
            self.operator(id, FaultKind::DeleteSegments);
        }
        if !live.is_empty() && self.rng.chance(f.purge) {
            let id = live[self.rng.index(live.len())];
            self.operator(id, FaultKind::Purge);
        }
        if self.now + f.step_ms < self.cfg.fault_ms {
            self.schedule(f.step_ms.max(1), Event::Nemesis);
        }
    }

    /// A network partition (symmetric, one-way or isolating one node), healed after a while.
    fn maybe_partition(&mut self, f: &FaultConfig) {
        if !self.net.partitioned() && self.rng.chance(f.partition) {
            let kind = match self.rng.below(3) {
                0 => PartitionKind::Symmetric,
                1 => PartitionKind::OneWay,
                _ => PartitionKind::Isolate,
            };
            let epoch = self.net.partition(kind, &mut self.rng);
            self.fault(match kind {
                PartitionKind::Symmetric => FaultKind::PartitionSymmetric,
                PartitionKind::OneWay => FaultKind::PartitionOneWay,
                PartitionKind::Isolate => FaultKind::Isolate,
            });
            let cut: Vec<_> = self.net.cut_links().collect();
            self.note(|| format!("partition {kind:?}: cut {cut:?}"));
            let lasts = 1 + self.rng.exponential(f.partition_mean_ms);
            self.schedule(lasts, Event::Heal { epoch });
        }
    }

    /// A crash of a running node (torn writes possible), restarted after a while, while no more
    /// than `max_down` are down.
    fn maybe_crash(&mut self, f: &FaultConfig) {
        let live = self.live_nodes();
        let down = self.in_service() - live.len() as u64;
        if !live.is_empty() && down < f.max_down && self.rng.chance(f.crash) {
            // Half the time, aim at a node with writes in flight (a crash mid-fdatasync).
            let unsynced: Vec<NodeId> = live
                .iter()
                .copied()
                .filter(|id| self.factory.unsynced(&self.nodes[Self::slot(*id)].dir))
                .collect();
            let id = if !unsynced.is_empty() && self.rng.chance(0.5) {
                unsynced[self.rng.index(unsynced.len())]
            } else {
                live[self.rng.index(live.len())]
            };
            let tear = self.rng.chance(f.torn);
            self.fault(FaultKind::Crash);
            self.crash(id, tear);
            let after = 1 + self.rng.exponential(f.down_mean_ms);
            self.schedule(after, Event::Restart { node: id });
        }
    }

    /// A running node loses its data directory (unless that could lose acknowledged state), and
    /// restarts to rebuild it from its peers.
    fn maybe_wipe(&mut self, f: &FaultConfig) {
        let live = self.live_nodes();
        let down = self.in_service() - live.len() as u64;
        // A lost disk's survivability is judged against the founding members.
        let wipe = if self.driver.is_some() { 0.0 } else { f.wipe };
        if !live.is_empty() && down < f.max_down && self.rng.chance(wipe) {
            let id = live[self.rng.index(live.len())];
            if let Some(why) = self.data_loss_hazard(id) {
                self.fault(FaultKind::DataLossRefused);
                self.note(|| format!("node {id}: data loss not injected: {why}"));
            } else {
                self.fault(FaultKind::DataLoss);
                self.crash(id, false);
                let n = &mut self.nodes[Self::slot(id)];
                n.dir = self.factory.create(id);
                n.next_start = NextStart::Rebuild;
                for probe in n.probes.values() {
                    probe.wipe();
                }
                self.note(|| format!("node {id}: loses its data directory"));
                let after = 1 + self.rng.exponential(f.down_mean_ms);
                self.schedule(after, Event::Restart { node: id });
            }
        }
    }

    /// One of the `live` nodes' clocks stalls for a while, and its wall clock steps.
    fn maybe_clock_jump(&mut self, f: &FaultConfig, live: &[NodeId]) {
        if !live.is_empty() && self.rng.chance(f.clock_jump) {
            let id = live[self.rng.index(live.len())];
            let n = &mut self.nodes[Self::slot(id)];
            if n.stalled.is_none() {
                n.stalled = Some(0);
                let life = n.life;
                self.fault(FaultKind::ClockJump);
                let lasts = 1 + self.rng.exponential(f.clock_jump_mean_ms);
                // The wall clock steps too, backwards as often as forwards.
                let step = i64::try_from(self.rng.exponential(f.clock_jump_mean_ms))
                    .unwrap_or(i64::MAX / 4);
                let n = &mut self.nodes[Self::slot(id)];
                n.wall_skew_ms += if self.rng.chance(0.5) { step } else { -step };
                let skew = n.wall_skew_ms;
                self.note(|| {
                    format!(
                        "node {id}: clock stalls for {lasts} ms; its wall clock is {skew} ms off"
                    )
                });
                self.schedule(lasts, Event::Resume { node: id, life });
            }
        }
    }

    /// One of the `live` nodes' disks fails (full, or I/O errors) for a while.
    fn maybe_disk_fault(&mut self, f: &FaultConfig, live: &[NodeId]) {
        if !live.is_empty() && self.rng.chance(f.disk_fault) {
            let id = live[self.rng.index(live.len())];
            let kind = if self.rng.chance(0.5) {
                DiskFault::Full
            } else {
                DiskFault::Io
            };
            let n = &mut self.nodes[Self::slot(id)];
            if !n.disk_fault {
                n.disk_fault = true;
                self.factory.set_fault(&mut n.dir, Some(kind));
                let life = n.life;
                self.fault(match kind {
                    DiskFault::Full => FaultKind::DiskFull,
                    DiskFault::Io => FaultKind::IoError,
                });
                let lasts = 1 + self.rng.exponential(f.disk_fault_mean_ms);
                self.note(|| format!("node {id}: disk fault {kind:?} for {lasts} ms"));
                self.schedule(lasts, Event::Repair { node: id, life });
            }
        }
    }

    /// Clients read random groups on random running nodes while the faults go on
    /// ([`READS_PER_STEP`] each nemesis step): what each is served must agree with every other
    /// read and with the final state.
    fn client_read(&mut self) -> Step {
        if self.phase != Phase::Faulty {
            return Ok(());
        }
        let live = self.live_nodes();
        if live.is_empty() {
            return Ok(());
        }
        for _ in 0..READS_PER_STEP {
            let id = live[self.rng.index(live.len())];
            let group = self.groups[self.rng.index(self.groups.len())];
            let dir = &mut self.nodes[Self::slot(id)].dir;
            self.factory
                .observe(dir, group, &mut self.rng)
                .map_err(|e| format!("node {id} read {group}: {e}"))?;
        }
        Ok(())
    }

    /// An operator's command (`DELETE_SEGMENTS`, or a purge) on one of the groups `id` leads,
    /// proposed there as the server's leader proposes it (what it answers is not awaited: the
    /// final check compares what every member still serves).
    fn operator(&mut self, id: NodeId, kind: FaultKind) {
        let slot = Self::slot(id);
        let Some(node) = self.nodes[slot].node.as_ref() else {
            return;
        };
        let led: Vec<GroupId> = self
            .groups
            .iter()
            .copied()
            .filter(|g| {
                node.role(*g) == Some(eddy_consensus::Role::Leader)
                    && node.status(*g).is_some_and(|s| !s.failed)
            })
            .collect();
        if led.is_empty() {
            return;
        }
        let group = led[self.rng.index(led.len())];
        let n = &mut self.nodes[slot];
        let entry = if kind == FaultKind::Purge {
            self.factory.purge(&mut n.dir, group)
        } else {
            self.factory.delete_segments(&mut n.dir, group)
        };
        let Some(entry) = entry else {
            return;
        };
        let node = n.node.as_mut().expect("up");
        node.propose(group, entry, Box::new(|_| {}));
        self.fault(kind);
        self.note(|| format!("node {id}: {} of {group}", kind.name()));
    }

    /// Retention on one node: each group drops a random part of its applied prefix.
    fn compact(&mut self, id: NodeId) {
        let slot = Self::slot(id);
        let mut compacted = false;
        for g in 0..self.groups.len() {
            let group = self.groups[g];
            let keep = self.rng.below(20);
            let n = &mut self.nodes[slot];
            let Some(status) = n.node.as_ref().and_then(|node| node.status(group)) else {
                continue;
            };
            if status.failed {
                continue;
            }
            let through = status.applied.saturating_sub(keep);
            if through >= status.first_index && self.factory.compact(&mut n.dir, group, through) {
                compacted = true;
            }
        }
        if compacted {
            self.fault(FaultKind::Compaction);
            self.note(|| format!("node {id}: compacts its logs"));
        }
    }

    /// Why losing `id`'s data now is not survivable, if it is not (see
    /// [`crate::probe::data_loss_hazard`]).
    fn data_loss_hazard(&self, id: NodeId) -> Option<String> {
        // One member's data at a time: a member that lost its data votes only once it has
        // rebuilt from a leader, so two rebuilding at once leave a 3-member cluster without a
        // majority that can elect one (for good, when nothing was ever committed to rebuild
        // from). The chaos harness keeps the same rule.
        let rebuilding = self.nodes.iter().find(|n| {
            n.id != id
                && (n.next_start == NextStart::Rebuild
                    || n.node.as_ref().is_some_and(Node::rebuilding))
        });
        if let Some(n) = rebuilding {
            return Some(format!("node {} is still rebuilding what it lost", n.id));
        }
        self.groups.iter().find_map(|&group| {
            let members: Vec<(NodeId, DurableLog, u64)> = self
                .nodes
                .iter()
                .map(|n| {
                    let s = n.probes[&group].lock();
                    (n.id, s.durable.clone(), s.hard.term)
                })
                .collect();
            data_loss_hazard(&members, id).map(|why| format!("{group}: {why}"))
        })
    }

    fn heal(&mut self) {
        self.net.heal();
        for n in &mut self.nodes {
            n.unreachable.clear();
        }
        self.fault(FaultKind::Heal);
        self.note(|| "network heals".into());
    }

    /// Faults stop: the network heals, every node runs on a working disk with a working clock,
    /// and every group must acknowledge a new proposal within the liveness bound.
    fn calm(&mut self) -> Step {
        self.phase = Phase::Calm;
        self.calm_at = self.now;
        if self.net.partitioned() {
            self.heal();
        }
        self.note(|| "faults stop".into());
        self.hold_for_removal_proof();
        for id in 1..=self.nodes.len() as u64 {
            let slot = Self::slot(id);
            let n = &self.nodes[slot];
            if n.service != Service::Serving {
                continue;
            }
            if self.nodes[slot].node.is_none() {
                self.start(id)?;
                continue;
            }
            if self.nodes[slot].disk_fault {
                let n = &mut self.nodes[slot];
                n.disk_fault = false;
                self.factory.set_fault(&mut n.dir, None);
            }
            let failed = self.groups.iter().any(|g| {
                self.nodes[slot]
                    .node
                    .as_ref()
                    .and_then(|node| node.status(*g))
                    .is_some_and(|s| s.failed)
            });
            if failed {
                self.fault(FaultKind::Reboot);
                self.crash(id, false);
                self.start(id)?;
                continue;
            }
            let life = self.nodes[slot].life;
            self.resume(id, life)?;
        }
        for g in 0..self.groups.len() {
            let client = self.clients.len();
            self.clients.push(Client {
                liveness: Some(self.groups[g]),
                leaders: Leaders::default(),
                op: None,
                finished: false,
            });
            self.schedule(0, Event::Wake { client });
        }
        self.schedule(self.cfg.liveness_ms, Event::LivenessDeadline);
        Ok(())
    }

    fn liveness_deadline(&mut self) -> Step {
        for c in &self.clients {
            if let (Some(group), false) = (c.liveness, c.finished) {
                return Err(format!(
                    "{group}: no proposal acknowledged within {} ms after the faults stopped",
                    self.cfg.liveness_ms
                ));
            }
        }
        Ok(())
    }

    /// Once clients are idle and every member of every group has applied everything its
    /// leader has, checks the final states.
    fn drain(&mut self) -> Step {
        for id in 1..=self.nodes.len() as u64 {
            let n = &self.nodes[Self::slot(id)];
            if n.node.is_some() && self.factory.stalled(&n.dir) {
                self.note(|| format!("node {id}: stalled after a storage failure; restarted"));
                self.crash(id, false);
                self.schedule(1, Event::Restart { node: id });
            }
        }
        let waiting = self.clients.iter().any(|c| c.op.is_some());
        let lagging = self.lagging();
        if !waiting && lagging.is_none() {
            return self.final_check();
        }
        if self.now > self.cfg.end_ms() + DRAIN_LIMIT_MS {
            return Err(match lagging {
                Some(why) => format!("the cluster does not converge: {why}"),
                None => "clients still wait for answers".into(),
            });
        }
        self.schedule(DRAIN_POLL_MS, Event::Drain);
        Ok(())
    }

    /// The members of `group` (every node, unless members change: then the ones its leader
    /// counts, voters and learners; `None` while no leader is known).
    fn members(&self, group: GroupId) -> Option<Vec<NodeId>> {
        if self.driver.is_none() {
            return Some(self.nodes.iter().map(|n| n.id).collect());
        }
        let leader = self.group_leader(group)?;
        let node = self.nodes[Self::slot(leader)].node.as_ref()?;
        Some(node.membership(group)?.members())
    }

    /// Why the cluster has not caught up yet, if it has not.
    fn lagging(&self) -> Option<String> {
        for &group in &self.groups {
            let Some(members) = self.members(group) else {
                return Some(format!("{group} has no leader"));
            };
            let mut statuses = Vec::new();
            for &id in &members {
                let n = &self.nodes[Self::slot(id)];
                let Some(status) = n.node.as_ref().and_then(|node| node.status(group)) else {
                    return Some(format!("node {} is down", n.id));
                };
                statuses.push((n.id, status));
            }
            let Some((leader, lead)) = statuses.iter().find(|(_, s)| s.role == Role::Leader) else {
                return Some(format!("{group} has no leader"));
            };
            for (id, s) in &statuses {
                if s.failed || s.applied != lead.last_index || s.commit != lead.last_index {
                    return Some(format!(
                        "{group}: node {id} applied {} of leader {leader}'s {}",
                        s.applied, lead.last_index
                    ));
                }
            }
        }
        None
    }

    fn final_check(&mut self) -> Step {
        let mut everywhere: BTreeSet<NodeId> = self.nodes.iter().map(|n| n.id).collect();
        for &group in &self.groups {
            let members = self
                .members(group)
                .ok_or_else(|| format!("{group} has no leader at the end"))?;
            everywhere.retain(|id| members.contains(id));
            if self.driver.is_some() {
                self.check_final_membership(group, &members)?;
            }
            let states: Vec<(NodeId, Vec<(u64, Bytes)>)> = members
                .iter()
                .map(|&id| {
                    (
                        id,
                        self.factory.state(&self.nodes[Self::slot(id)].dir, group),
                    )
                })
                .collect();
            let counts = self.checker.check_final(
                group,
                &states,
                |p| self.workload.op_id(group, p),
                |p| digest(eddy_consensus::EntryKind::Normal, p),
            )?;
            self.report.duplicates += counts.duplicates;
            self.report.entries += counts.entries;
        }
        if self.report.acked == 0 {
            return Err("no operation was acknowledged in the whole run".into());
        }
        let dirs: Vec<(NodeId, &F::Dir)> = self
            .nodes
            .iter()
            .filter(|n| everywhere.contains(&n.id))
            .map(|n| (n.id, &n.dir))
            .collect();
        let summary = self.factory.check_final(&dirs)?;
        if !summary.is_empty() {
            self.note(|| summary);
        }
        self.phase = Phase::Done;
        self.note(|| "final states agree".into());
        Ok(())
    }
}

/// The text of a panic's payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".into())
}
