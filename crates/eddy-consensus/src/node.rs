//! A node: every replicated group this process is a member of, driven by one caller.
//!
//! The node is a state machine. It owns no thread, socket or clock: the caller feeds it ticks,
//! peer messages and proposals, calls [`Node::process`], and takes what it produced (frames for
//! peers, role changes). Storage completions arrive from the stores' own threads through a
//! mailbox, and the node calls the `wake` function it was built with so the caller knows to
//! call `process` again. The server drives it from one thread; the simulator drives it from its
//! seeded scheduler, which is what makes a simulated run replayable.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use raft::{RawNode, StateRole};

use crate::adapter::Adapter;
use crate::group::{Callback, Group, Output};
use crate::store::{GroupStore, StoreError};
use crate::types::{GroupId, NodeId, Role};

/// Timing and limits of a node's groups, in ticks of the caller's clock.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's id (at least 1).
    pub id: NodeId,
    /// The voting members a new group starts with, this node included (a group's members
    /// change later through [`Node::propose_membership`], each group on its own).
    pub voters: Vec<NodeId>,
    /// A follower that hears nothing from a leader for this many ticks (at least; the engine
    /// randomizes up to `max_election_ticks`) starts an election.
    pub election_ticks: usize,
    /// Upper bound (exclusive) of the randomized election timeout; `election_ticks + 1` makes it
    /// fixed (the simulator does that and randomizes through its own seeded schedule).
    pub max_election_ticks: usize,
    /// A leader sends heartbeats every this many ticks.
    pub heartbeat_ticks: usize,
    /// Bytes of entries one append message carries at most (at least one entry).
    pub max_message_bytes: u64,
    /// Append messages in flight per follower and group. An append carries at least one
    /// entry, and a partition's entries are whole message batches (up to the frame cap), so
    /// this bounds what one turn of the Raft thread may read, encode and queue for a lagging
    /// follower: at 256 a 1 GiB catch-up held the leader's Raft thread for 23 s (elections
    /// everywhere, 289 s to catch up); at 8, 0.65 s and 8.3 s (`cargo xtask catch-up`).
    pub max_inflight_messages: usize,
    /// Proposed-but-uncommitted bytes a leader accepts per group before it refuses proposals
    /// (back-pressure instead of an unbounded queue while a majority is unreachable).
    pub max_uncommitted_bytes: u64,
    /// Newest entries kept in memory per group for replication.
    pub entry_cache_bytes: u64,
    /// Each group's store runs its upkeep ([`GroupStore::maintain`]: compaction, retention)
    /// about once per this many ticks; the node spreads the groups over the ticks and
    /// maintains at most [`MAX_MAINTAINED_PER_TICK`] per tick. 0: never.
    pub maintain_ticks: usize,
}

/// Most groups one tick maintains (see [`NodeConfig::maintain_ticks`]).
pub const MAX_MAINTAINED_PER_TICK: usize = 32;

impl NodeConfig {
    /// Defaults for a 100 ms tick: heartbeats every 200 ms, elections after 1-2 s of silence.
    pub fn new(id: NodeId, voters: Vec<NodeId>) -> Self {
        NodeConfig {
            id,
            voters,
            election_ticks: 10,
            max_election_ticks: 20,
            heartbeat_ticks: 2,
            max_message_bytes: 1024 * 1024,
            max_inflight_messages: 8,
            max_uncommitted_bytes: 256 * 1024 * 1024,
            entry_cache_bytes: 8 * 1024 * 1024,
            maintain_ticks: 10,
        }
    }

    fn raft_config(&self, applied: u64) -> raft::Config {
        raft::Config {
            id: self.id,
            election_tick: self.election_ticks,
            heartbeat_tick: self.heartbeat_ticks,
            min_election_tick: self.election_ticks,
            max_election_tick: self.max_election_ticks,
            applied,
            max_size_per_msg: self.max_message_bytes,
            max_inflight_msgs: self.max_inflight_messages,
            // A leader that cannot hear from a majority for an election timeout steps down, so a
            // partitioned leader stops taking proposals instead of queueing them.
            check_quorum: true,
            // A node returning from a partition does not depose a working leader.
            pre_vote: true,
            max_uncommitted_size: self.max_uncommitted_bytes,
            // Never: raft-rs 0.7 batches by appending new entries to any append already queued
            // for the peer whose entries are empty, keeping that append's previous index. When
            // a rejection moves the peer's next index back below it, the merged append claims
            // "after K+1 come entries from K+1", the follower acknowledges an index it does
            // not hold, and the leader commits on that false acknowledgement (found by the
            // simulator, seed 1 light; test `seed_1_light_...` in tests/consensus/cluster.rs). The node
            // already sends one batch per peer per step, so nothing is lost.
            batch_append: false,
            ..raft::Config::default()
        }
    }
}

/// Why a proposal did not (or may not have) become a committed entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// This node does not lead the group; `leader` is the last one it knows of.
    #[error("not the leader of {group}")]
    NotLeader {
        /// The group.
        group: GroupId,
        /// Its leader, if known.
        leader: Option<NodeId>,
    },
    /// The group does not exist on this node.
    #[error("group {0} is not on this node")]
    UnknownGroup(GroupId),
    /// Refused before it entered the log (leadership moving, or too much uncommitted data):
    /// certainly not committed.
    #[error("proposal dropped before it was ordered")]
    Dropped,
    /// Another leader's entry took its index: certainly not committed.
    #[error("proposal superseded by another leader's entry")]
    Superseded,
    /// It may or may not have committed (its group went away or a snapshot skipped it).
    #[error("proposal outcome unknown")]
    Unknown,
    /// The group's storage failed on this node.
    #[error("group {0} failed on this node")]
    Failed(GroupId),
}

/// Something the caller may want to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A group's role or known leader changed on this node.
    RoleChanged {
        /// The group.
        group: GroupId,
        /// This node's new role in it.
        role: Role,
        /// The term.
        term: u64,
        /// The leader this node follows (itself when leader), if known.
        leader: Option<NodeId>,
    },
    /// A group's members changed (a change applied here, or a snapshot brought other ones).
    MembershipChanged {
        /// The group.
        group: GroupId,
        /// Its members now.
        membership: crate::types::Membership,
    },
    /// A group's storage failed; the group stopped on this node.
    GroupFailed {
        /// The group.
        group: GroupId,
    },
}

/// A group's replication progress as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStatus {
    /// This node's role.
    pub role: Role,
    /// Current term.
    pub term: u64,
    /// Known leader.
    pub leader: Option<NodeId>,
    /// Highest index known committed.
    pub commit: u64,
    /// Highest index applied here.
    pub applied: u64,
    /// First index held by the log.
    pub first_index: u64,
    /// Last index appended here (durable or not).
    pub last_index: u64,
    /// On a leader: each member's highest replicated index.
    pub matched: Vec<(NodeId, u64)>,
    /// Storage failed on this node.
    pub failed: bool,
    /// The group's voters, as this node's configuration has them (ascending).
    pub voters: Vec<NodeId>,
    /// The group's learners (members catching up before they vote), ascending.
    pub learners: Vec<NodeId>,
}

type Persisted = (GroupId, u64, Result<(), StoreError>);

/// `ids` in ascending order.
fn sorted(ids: &[NodeId]) -> Vec<NodeId> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids
}

/// Storage completions on their way back to the node.
#[derive(Clone)]
pub(crate) struct Mailbox {
    queue: Arc<Mutex<Vec<Persisted>>>,
    wake: Arc<dyn Fn() + Send + Sync>,
}

impl Mailbox {
    pub(crate) fn persisted(&self, group: GroupId, ticket: u64, result: Result<(), StoreError>) {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((group, ticket, result));
        (self.wake)();
    }

    fn take(&self) -> Vec<Persisted> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Every group this node is a member of.
pub struct Node<O: Send + 'static> {
    config: NodeConfig,
    logger: slog::Logger,
    groups: BTreeMap<GroupId, Group<O>>,
    mailbox: Mailbox,
    dirty: BTreeSet<GroupId>,
    messages: Vec<(GroupId, Message)>,
    outbound: BTreeMap<NodeId, Vec<(GroupId, Bytes)>>,
    events: Vec<Event>,
    dropped_messages: u64,
    /// Groups added from now on start rebuilding (see [`Node::set_rebuilding`]).
    rebuilding: bool,
    /// The caller's clock at the last [`Node::tick_at`] (µs), handed to maintenance.
    now_us: u64,
    /// The last group maintained (the next round starts after it).
    maintained: Option<GroupId>,
    /// Turns of upkeep earned by the ticks and not taken yet, times `maintain_ticks`.
    maintain_credit: usize,
}

impl<O: Send + 'static> std::fmt::Debug for Node<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.config.id)
            .field("groups", &self.groups.len())
            .finish_non_exhaustive()
    }
}

/// Why a group could not be added.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A group with this id already runs here.
    #[error("group {0} already exists on this node")]
    Exists(GroupId),
    /// The engine refused the group's configuration or recovered state.
    #[error("group {group} cannot start")]
    Engine {
        /// The group.
        group: GroupId,
        /// The engine's reason.
        #[source]
        source: raft::Error,
    },
}

impl<O: Send + 'static> Node<O> {
    /// A node with no groups yet; `wake` is called (from any thread) when storage completions
    /// wait for [`Node::process`].
    pub fn new(config: NodeConfig, wake: impl Fn() + Send + Sync + 'static) -> Self {
        let logger = crate::logger::logger(config.id);
        Node {
            config,
            logger,
            groups: BTreeMap::new(),
            mailbox: Mailbox {
                queue: Arc::new(Mutex::new(Vec::new())),
                wake: Arc::new(wake),
            },
            dirty: BTreeSet::new(),
            messages: Vec::new(),
            outbound: BTreeMap::new(),
            events: Vec::new(),
            dropped_messages: 0,
            rebuilding: false,
            now_us: 0,
            maintained: None,
            maintain_credit: 0,
        }
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.config.id
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// Starts a group over its store (recovered state included). Every member must add the
    /// same group id for the same data.
    pub fn add_group(
        &mut self,
        id: GroupId,
        store: Box<dyn GroupStore<Outcome = O>>,
    ) -> Result<(), NodeError> {
        let voters = self.config.voters.clone();
        self.add_group_with_voters(id, store, voters)
    }

    /// Adds a group whose founding voters (its members before any change, used while its
    /// store recorded no membership) are `voters` instead of the node's. Every member of a
    /// group must start it with the same founding voters, the ones it was created with: a
    /// member joining later passes them too (it is not among them, so it never campaigns),
    /// and applies the membership changes of the log as every other member did, or takes the
    /// members a snapshot carries.
    pub fn add_group_with_voters(
        &mut self,
        id: GroupId,
        store: Box<dyn GroupStore<Outcome = O>>,
        voters: Vec<NodeId>,
    ) -> Result<(), NodeError> {
        if self.groups.contains_key(&id) {
            return Err(NodeError::Exists(id));
        }
        let applied = store.applied_index();
        let adapter = Adapter::new(store, voters, self.config.entry_cache_bytes);
        let logger = self.logger.new(slog::o!("group" => id.0));
        let raw = RawNode::new(&self.config.raft_config(applied), adapter, &logger)
            .map_err(|source| NodeError::Engine { group: id, source })?;
        let mut group = Group::new(id, raw, applied);
        group.set_rebuilding(self.rebuilding);
        self.groups.insert(id, group);
        self.dirty.insert(id);
        Ok(())
    }

    /// Stops a group on this node (its data was deleted); its waiting proposals are answered
    /// [`ProposeError::Unknown`]. Returns its store.
    pub fn remove_group(&mut self, id: GroupId) -> Option<Box<dyn GroupStore<Outcome = O>>> {
        let mut group = self.groups.remove(&id)?;
        self.dirty.remove(&id);
        group.abandon();
        let Group { raw, .. } = group;
        Some(raw.raft.r.raft_log.store.store)
    }

    /// Whether the group runs here.
    pub fn has_group(&self, id: GroupId) -> bool {
        self.groups.contains_key(&id)
    }

    /// The groups running here, in id order.
    pub fn group_ids(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.groups.keys().copied()
    }

    /// A group's store (reads of applied state).
    pub fn store(&self, id: GroupId) -> Option<&dyn GroupStore<Outcome = O>> {
        self.groups.get(&id).map(Group::store)
    }

    /// A group's store, mutably (compaction, retention).
    pub fn store_mut(&mut self, id: GroupId) -> Option<&mut dyn GroupStore<Outcome = O>> {
        self.groups.get_mut(&id).map(Group::store_mut)
    }

    /// Proposes `data` to a group; `done` is called once, when the entry applied here (with its
    /// outcome) or when it cannot.
    pub fn propose(&mut self, id: GroupId, data: Bytes, done: Callback<O>) {
        let node = self.config.id;
        match self.groups.get_mut(&id) {
            Some(group) => {
                group.propose(node, data, done);
                self.dirty.insert(id);
            }
            None => done(Err(ProposeError::UnknownGroup(id))),
        }
    }

    /// Proposes a change of a group's members (on its leader): one step is applied at once,
    /// several go through joint consensus, which the engine leaves by itself once it applied
    /// (`done` runs when the change's own entry applied here, with the membership it made).
    /// Add a member as a learner first and make it a voter once it caught up, so the group's
    /// majority never waits for a member still copying the log. One change at a time: while
    /// one is in flight (or the group is joint) another gets `Dropped`.
    pub fn propose_membership(
        &mut self,
        id: GroupId,
        changes: &[crate::types::MemberChange],
        done: crate::group::MembershipDone,
    ) {
        match self.groups.get_mut(&id) {
            Some(group) => {
                group.propose_membership(changes, done);
                self.dirty.insert(id);
            }
            None => done(Err(ProposeError::UnknownGroup(id))),
        }
    }

    /// A group's current members on this node.
    pub fn membership(&self, id: GroupId) -> Option<crate::types::Membership> {
        self.groups.get(&id).map(|g| g.membership().clone())
    }

    /// Asks for a linearizable read of a group: `done` runs (on this thread) once this node
    /// has applied every entry the group had committed when it was asked, as confirmed with
    /// the leader and a quorum (ReadIndex; on a follower the leader is asked), so what it then
    /// reads from the group's state includes every write acknowledged before. Reads asked
    /// before the group is next processed share one request. `done` gets `NotLeader` when
    /// no leader is known or the confirmation does not come within an election timeout (an
    /// isolated former leader never serves a read), `UnknownGroup` or `Failed`.
    pub fn read_index(&mut self, id: GroupId, done: crate::group::ReadDone) {
        match self.groups.get_mut(&id) {
            Some(group) => {
                group.read(done);
                self.dirty.insert(id);
            }
            None => done(Err(ProposeError::UnknownGroup(id))),
        }
    }

    /// Starts an election in a group now (tests, and leadership hand-over at shutdown).
    pub fn campaign(&mut self, id: GroupId) {
        if let Some(group) = self.groups.get_mut(&id) {
            let _ = group.raw.campaign();
            self.dirty.insert(id);
        }
    }

    /// Hands a group's leadership to another member, unconditionally (graceful shutdown).
    /// While a transfer is pending the engine drops proposals, so moves made for balance go
    /// through [`Node::transfer_leader_if_ready`].
    pub fn transfer_leader(&mut self, id: GroupId, to: NodeId) {
        if let Some(group) = self.groups.get_mut(&id) {
            group.raw.transfer_leader(to);
            self.dirty.insert(id);
        }
    }

    /// Hands a group's leadership to `to` only when that completes at once: this node leads
    /// the group with no transfer pending, `to` is a voter that holds every entry of this
    /// leader's log and was heard from within the last election timeout, and no transfer of
    /// this group was started within the last two election timeouts (one that did not
    /// complete is abandoned by the engine after an election timeout, and not retried at
    /// once). A transfer to a member that lags would leave the group dropping proposals until
    /// the engine gives up. Returns whether it started one.
    pub fn transfer_leader_if_ready(&mut self, id: GroupId, to: NodeId) -> bool {
        let cooldown = 2 * self.config.election_ticks as u64;
        let Some(group) = self.groups.get_mut(&id) else {
            return false;
        };
        if group.failed() || !group.transfer_cooled_down(cooldown) {
            return false;
        }
        let raft = &group.raw.raft;
        if raft.state != StateRole::Leader || raft.lead_transferee.is_some() || to == raft.id {
            return false;
        }
        let last = raft.raft_log.last_index();
        let ready = raft.prs().conf().voters().contains(to)
            && raft
                .prs()
                .get(to)
                .is_some_and(|pr| pr.matched == last && pr.recent_active);
        if !ready {
            return false;
        }
        group.note_transfer();
        group.raw.transfer_leader(to);
        self.dirty.insert(id);
        true
    }

    /// Steps messages a peer sent. Messages for unknown groups, not addressed to this node,
    /// not from `from`, or undecodable are dropped and counted.
    pub fn receive(&mut self, from: NodeId, messages: Vec<(GroupId, Bytes)>) {
        for (id, bytes) in messages {
            let Some(group) = self.groups.get_mut(&id) else {
                self.dropped_messages += 1;
                continue;
            };
            let Ok(message) = decode_message(&bytes) else {
                self.dropped_messages += 1;
                continue;
            };
            if message.to != self.config.id || message.from != from || group.failed() {
                self.dropped_messages += 1;
                continue;
            }
            let mut message = message;
            if group.rebuilding()
                && matches!(
                    message.get_msg_type(),
                    MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
                )
            {
                // A member rebuilding lost state must not vote: its empty log would let a
                // candidate that lacks committed entries win.
                self.dropped_messages += 1;
                continue;
            }
            if message.get_msg_type() == MessageType::MsgHeartbeat {
                // A leader that still believes this member holds what it lost (its data
                // directory was wiped) sends a commit index beyond the log; the engine treats
                // that as fatal. Commit knowledge only ever arrives early: clamp it.
                message.commit = message.commit.min(group.raw.raft.raft_log.last_index());
            }
            if group.raw.step(message).is_err() {
                self.dropped_messages += 1;
            }
            self.dirty.insert(id);
        }
    }

    /// Advances every group's clock by one tick (a group rebuilding lost state does not
    /// count election time: it never campaigns), and runs the upkeep of the groups whose
    /// turn it is (see [`NodeConfig::maintain_ticks`]) with the time of the last
    /// [`Node::tick_at`].
    pub fn tick(&mut self) {
        for (id, group) in &mut self.groups {
            if !group.failed() && !group.rebuilding() && group.raw.tick() {
                self.dirty.insert(*id);
            }
            group.tick_reads();
            // Ticks may produce heartbeats or elections without saying so: check them all.
            self.dirty.insert(*id);
        }
        self.maintain_some();
    }

    /// [`Node::tick`] at the caller's time `now_us` (µs; the server passes the wall clock,
    /// the simulator its virtual one), which the stores' upkeep sees.
    pub fn tick_at(&mut self, now_us: u64) {
        self.now_us = now_us;
        self.tick();
    }

    /// Maintains the next groups in id order, round-robin: enough that each group's turn
    /// comes about once per `maintain_ticks` ticks, at most [`MAX_MAINTAINED_PER_TICK`].
    fn maintain_some(&mut self) {
        let every = self.config.maintain_ticks;
        if every == 0 || self.groups.is_empty() {
            return;
        }
        // Every tick earns each group 1/every of a turn: over `every` ticks, each group's turn
        // comes once.
        self.maintain_credit += self.groups.len();
        let due = (self.maintain_credit / every).min(MAX_MAINTAINED_PER_TICK);
        self.maintain_credit %= every;
        if due == 0 {
            return;
        }
        let (later, wrapped) = match self.maintained {
            Some(a) => (
                self.groups.range((Bound::Excluded(a), Bound::Unbounded)),
                self.groups.range(..=a),
            ),
            None => (self.groups.range(..), self.groups.range(..GroupId(0))),
        };
        let ids: Vec<GroupId> = later.chain(wrapped).map(|(id, _)| *id).take(due).collect();
        let mut out = Output {
            messages: &mut self.messages,
            events: &mut self.events,
            mailbox: &self.mailbox,
        };
        for id in ids {
            if let Some(group) = self.groups.get_mut(&id) {
                group.maintain(self.now_us, &mut out);
                self.dirty.insert(id);
            }
            self.maintained = Some(id);
        }
    }

    /// A peer came back without its state (its data directory was lost and it started empty):
    /// every group this node leads forgets how far that peer had replicated, so it is rebuilt
    /// from the start of the log (or a snapshot) and never again counted for entries it no
    /// longer holds.
    pub fn peer_lost_state(&mut self, peer: NodeId) {
        for (id, group) in &mut self.groups {
            if group.raw.raft.state != StateRole::Leader {
                continue;
            }
            if let Some(pr) = group.raw.raft.mut_prs().get_mut(peer) {
                pr.matched = 0;
                pr.become_probe();
                pr.next_idx = 1;
                self.dirty.insert(*id);
            }
        }
    }

    /// This node starts without the state it had (its data directory was lost) in a cluster
    /// that has data: until each group has caught up with a leader's commit index, the group
    /// neither votes nor campaigns. (A fresh node of a new cluster must not call this: nobody
    /// could be elected.)
    pub fn set_rebuilding(&mut self) {
        for group in self.groups.values_mut() {
            group.set_rebuilding(true);
        }
        self.rebuilding = true;
    }

    /// Whether any group is still rebuilding lost state.
    pub fn rebuilding(&self) -> bool {
        self.groups.values().any(Group::rebuilding)
    }

    /// Tells the groups a peer is unreachable (its connection failed), so leaders probe it
    /// instead of streaming to it.
    ///
    /// A leader also stops counting what the peer acknowledged beyond the commit index until
    /// it acknowledges it again: a peer whose connection broke may have crashed and lost its
    /// data directory, and an entry must not commit on the strength of a copy that no longer
    /// exists (the simulator found such commits with 5 members). A peer that kept its data
    /// acknowledges the same entries again as soon as it is probed; nothing committed moves.
    pub fn report_unreachable(&mut self, peer: NodeId) {
        for (id, group) in &mut self.groups {
            if group.raw.raft.state == StateRole::Leader {
                let committed = group.raw.raft.raft_log.committed;
                if let Some(pr) = group.raw.raft.mut_prs().get_mut(peer) {
                    pr.matched = pr.matched.min(committed);
                }
                group.raw.report_unreachable(peer);
                self.dirty.insert(*id);
            }
        }
    }

    /// Takes storage completions and handles every group's pending work until none is left.
    pub fn process(&mut self) {
        loop {
            let mut out = Output {
                messages: &mut self.messages,
                events: &mut self.events,
                mailbox: &self.mailbox,
            };
            for (id, ticket, result) in self.mailbox.take() {
                if let Some(group) = self.groups.get_mut(&id) {
                    group.persisted(ticket, result, &mut out);
                    self.dirty.insert(id);
                }
            }
            if self.dirty.is_empty() {
                break;
            }
            for id in std::mem::take(&mut self.dirty) {
                if let Some(group) = self.groups.get_mut(&id) {
                    group.drive(&mut out);
                }
            }
        }
        for (group, message) in self.messages.drain(..) {
            let bytes = Bytes::from(message.write_to_bytes().expect("engine messages encode"));
            self.outbound
                .entry(message.to)
                .or_default()
                .push((group, bytes));
        }
    }

    /// Takes the messages produced since the last call, per destination node, each tagged with
    /// its group (encode them with [`crate::wire::encode_raft`]).
    pub fn take_outbound(&mut self) -> Vec<(NodeId, Vec<(GroupId, Bytes)>)> {
        std::mem::take(&mut self.outbound).into_iter().collect()
    }

    /// Takes the events produced since the last call.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Messages dropped since start (unknown group, wrong address, undecodable).
    pub fn dropped_messages(&self) -> u64 {
        self.dropped_messages
    }

    /// A group's replication progress.
    pub fn status(&self, id: GroupId) -> Option<GroupStatus> {
        let group = self.groups.get(&id)?;
        let raft = &group.raw.raft;
        let membership = group.membership();
        let matched = if raft.state == StateRole::Leader {
            let mut m: Vec<(NodeId, u64)> = raft
                .prs()
                .iter()
                .map(|(id, pr)| (*id, pr.matched))
                .collect();
            m.sort_unstable();
            m
        } else {
            Vec::new()
        };
        Some(GroupStatus {
            role: group.role(),
            term: raft.term,
            leader: group.leader(),
            commit: raft.raft_log.committed,
            applied: group.applied(),
            first_index: group.store().first_index(),
            last_index: group.raw.store().last(),
            matched,
            failed: group.failed(),
            voters: sorted(&membership.voters),
            learners: sorted(&membership.learners),
        })
    }

    /// This node's role in a group.
    pub fn role(&self, id: GroupId) -> Option<Role> {
        self.groups.get(&id).map(Group::role)
    }

    /// The leader this node knows for a group.
    pub fn leader(&self, id: GroupId) -> Option<NodeId> {
        self.groups.get(&id).and_then(Group::leader)
    }
}

/// Decodes one engine message.
pub(crate) fn decode_message(bytes: &Bytes) -> Result<Message, protobuf::ProtobufError> {
    Message::parse_from_carllerche_bytes(bytes)
}
