//! One replicated group on this node: the engine's `RawNode` over the group's store, the
//! proposals waiting for their entries to apply, and the readies waiting for durability.
//!
//! Ready handling follows the engine's asynchronous-persistence protocol:
//! 1. messages the leader may send at once go out at once (replication overlaps its own write);
//! 2. an incoming snapshot is installed (synchronously, durable on return);
//! 3. new entries go to the store's group-committed append; the engine reads them back from the
//!    adapter's cache until they are durable;
//! 4. a changed term or vote is saved durably before anything that depends on it is sent;
//! 5. committed entries (always durable here) are applied in order and answer their proposals;
//! 6. messages that must follow persistence (votes, append acknowledgements) wait until every
//!    earlier ready is durable, then go out.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{self, Message, MessageType};
use raft::prelude::{
    ConfChange, ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2,
};
use raft::{RawNode, SnapshotStatus, StateRole};

use crate::adapter::{entries_from_raft, unwrap_snapshot, Adapter};
use crate::convert::{entry_from_raft, hard_state_from_raft, membership_from_raft, role_from_raft};
use crate::node::{Event, Mailbox, ProposeError};
use crate::store::{GroupStore, StoreError};
use crate::types::{GroupId, MemberChange, Membership, NodeId, Role, Snapshot, SnapshotMeta};

/// Called once with a proposal's outcome.
pub type Callback<O> = Box<dyn FnOnce(Result<O, ProposeError>) + Send>;

/// Called once with the membership a proposed membership change produced.
pub type MembershipDone = Box<dyn FnOnce(Result<Membership, ProposeError>) + Send>;

/// Called once a linearizable read may be served here (every entry committed when it was
/// asked has been applied on this node), or with why it may not.
pub type ReadDone = Box<dyn FnOnce(Result<(), ProposeError>) + Send>;

/// Linearizable reads (ReadIndex) of one group: asked, confirmed by the leader's quorum at an
/// index, then released once this node applied through that index.
#[derive(Default)]
struct Reads {
    /// Asked since the group was last driven: one ReadIndex request covers them all.
    queued: Vec<ReadDone>,
    /// Sent to the engine, by request context: the tick they were sent at, and the callers.
    asked: BTreeMap<u64, (u64, Vec<ReadDone>)>,
    /// Confirmed at a commit index this node has not applied yet.
    confirmed: BTreeMap<u64, Vec<ReadDone>>,
    next_ctx: u64,
    ticks: u64,
}

struct Pending<O> {
    term: u64,
    done: Callback<O>,
}

/// A ready whose persisted messages wait for durability.
struct Waiting {
    ticket: Option<u64>,
    number: u64,
    messages: Vec<Message>,
    done: bool,
}

/// What a ready produced for the node: messages to send and events to report.
pub(crate) struct Output<'a> {
    pub(crate) messages: &'a mut Vec<(GroupId, Message)>,
    pub(crate) events: &'a mut Vec<Event>,
    pub(crate) mailbox: &'a Mailbox,
}

pub(crate) struct Group<O: Send + 'static> {
    pub(crate) id: GroupId,
    pub(crate) raw: RawNode<Adapter<O>>,
    pending: BTreeMap<u64, Pending<O>>,
    waiting: VecDeque<Waiting>,
    applied: u64,
    /// The term of the last entry applied (or of the installed snapshot): when it rises, every
    /// waiting proposal of an older term at a later index can no longer commit.
    applied_term: u64,
    /// Appends with a ticket up to this one were superseded by an installed snapshot: their
    /// reports no longer matter.
    superseded_through: u64,
    failed: bool,
    /// Lost state, not yet caught up with a leader: no votes, no campaigns.
    rebuilding: bool,
    role: Role,
    leader: Option<NodeId>,
    reads: Reads,
    /// The reads' tick at which this node last started a leadership transfer of the group.
    transferred_at: Option<u64>,
    /// Membership changes proposed here, by index: their term and caller.
    changes: BTreeMap<u64, (u64, MembershipDone)>,
}

/// Ticks a ReadIndex request may wait for the leader's answer before its callers hear
/// `NotLeader` (the leader lost its quorum, or none is known): an election timeout's worth.
const READ_TICKS: u64 = 20;

impl<O: Send + 'static> Group<O> {
    pub(crate) fn new(id: GroupId, raw: RawNode<Adapter<O>>, applied: u64) -> Self {
        Group {
            id,
            raw,
            pending: BTreeMap::new(),
            waiting: VecDeque::new(),
            applied,
            applied_term: 0,
            superseded_through: 0,
            failed: false,
            rebuilding: false,
            role: Role::Follower,
            leader: None,
            reads: Reads::default(),
            transferred_at: None,
            changes: BTreeMap::new(),
        }
    }

    /// The group's current membership on this node.
    pub(crate) fn membership(&self) -> &Membership {
        self.raw.store().membership()
    }

    /// Proposes a membership change (on the leader): `done` gets the membership it produced
    /// once its entry applied here. Several steps at once go through joint consensus, which
    /// the engine leaves by itself (`done` runs when the joint configuration is entered);
    /// the engine takes one change at a time and turns a second one into a no-op (`done`
    /// then gets `Dropped`).
    pub(crate) fn propose_membership(&mut self, changes: &[MemberChange], done: MembershipDone) {
        if self.failed {
            done(Err(ProposeError::Failed(self.id)));
            return;
        }
        if self.raw.raft.state != StateRole::Leader {
            done(Err(ProposeError::NotLeader {
                group: self.id,
                leader: self.leader,
            }));
            return;
        }
        let mut cc = ConfChangeV2::default();
        cc.set_transition(ConfChangeTransition::Auto);
        for change in changes {
            let (kind, node) = match *change {
                MemberChange::AddVoter(n) => (ConfChangeType::AddNode, n),
                MemberChange::AddLearner(n) => (ConfChangeType::AddLearnerNode, n),
                MemberChange::Remove(n) => (ConfChangeType::RemoveNode, n),
            };
            let mut single = ConfChangeSingle::default();
            single.set_change_type(kind);
            single.node_id = node;
            cc.mut_changes().push(single);
        }
        let before = self.raw.raft.raft_log.last_index();
        match self.raw.propose_conf_change(Vec::new(), cc) {
            Ok(()) if self.raw.raft.raft_log.last_index() > before => {
                let index = self.raw.raft.raft_log.last_index();
                let term = self.raw.raft.term;
                if let Some((_, old)) = self.changes.insert(index, (term, done)) {
                    old(Err(ProposeError::Superseded));
                }
            }
            _ => done(Err(ProposeError::Dropped)),
        }
    }

    /// Applies a committed membership change: the engine's configuration, then the
    /// durable history, then its proposer. A change at or below the last one recorded was
    /// applied before a restart and is skipped.
    fn apply_membership(
        &mut self,
        e: &eraftpb::Entry,
        out: &mut Output<'_>,
    ) -> Result<Option<Membership>, StoreError> {
        if e.index <= self.membership().index {
            return Ok(None);
        }
        let bad = |what: String| StoreError::Storage(what.into());
        let undecodable = |err: protobuf::ProtobufError| {
            bad(format!("a membership change that does not decode: {err}"))
        };
        let mut cc = ConfChangeV2::default();
        if e.get_entry_type() == eraftpb::EntryType::EntryConfChange {
            let mut v1 = ConfChange::default();
            v1.merge_from_bytes(&e.data).map_err(undecodable)?;
            let mut single = ConfChangeSingle::default();
            single.set_change_type(v1.get_change_type());
            single.node_id = v1.node_id;
            cc.mut_changes().push(single);
        } else {
            cc.merge_from_bytes(&e.data).map_err(undecodable)?;
        }
        let cs = self.raw.apply_conf_change(&cc).map_err(|err| {
            bad(format!(
                "the engine refused a committed membership change: {err}"
            ))
        })?;
        let membership = membership_from_raft(&cs, e.index);
        self.raw.mut_store().record_membership(membership.clone())?;
        tracing::info!(group = %self.id, index = e.index, voters = ?membership.voters, learners = ?membership.learners, outgoing = ?membership.voters_outgoing, "membership changed");
        out.events.push(Event::MembershipChanged {
            group: self.id,
            membership: membership.clone(),
        });
        Ok(Some(membership))
    }

    /// Answers the membership proposals at or below `index`: the one at `index` gets
    /// `applied` when its entry (of its term) was the change, every other one that it was
    /// dropped or superseded.
    fn settle_changes(&mut self, index: u64, term: u64, applied: Option<&Membership>) {
        while let Some(entry) = self.changes.first_entry() {
            if *entry.key() > index {
                break;
            }
            let at = *entry.key();
            let (proposed_term, done) = entry.remove();
            let result = match applied {
                Some(m) if at == index && proposed_term == term => Ok(m.clone()),
                // The engine turned it into an empty entry (another change was pending).
                None if at == index && proposed_term == term => Err(ProposeError::Dropped),
                _ if at == index => Err(ProposeError::Superseded),
                _ => Err(ProposeError::Unknown),
            };
            done(result);
        }
    }

    /// Whether at least `ticks` ticks passed since this node last started a transfer.
    pub(crate) fn transfer_cooled_down(&self, ticks: u64) -> bool {
        self.transferred_at
            .is_none_or(|at| self.reads.ticks.saturating_sub(at) >= ticks)
    }

    /// A transfer starts now.
    pub(crate) fn note_transfer(&mut self) {
        self.transferred_at = Some(self.reads.ticks);
    }

    /// Asks for a linearizable read: `done` runs once this node has applied every entry the
    /// group had committed when the read was asked, as a quorum confirmed with its leader
    /// (ReadIndex), or with `NotLeader` if that cannot be confirmed within [`READ_TICKS`].
    pub(crate) fn read(&mut self, done: ReadDone) {
        if self.failed {
            done(Err(ProposeError::Failed(self.id)));
            return;
        }
        self.reads.queued.push(done);
    }

    /// Sends the queued reads' ReadIndex request (one for all of them).
    fn ask_reads(&mut self) {
        if self.reads.queued.is_empty() {
            return;
        }
        if self.leader.is_none() {
            // Nobody to confirm with (the engine would drop the request).
            let error = ProposeError::NotLeader {
                group: self.id,
                leader: None,
            };
            for done in std::mem::take(&mut self.reads.queued) {
                done(Err(error.clone()));
            }
            return;
        }
        let ctx = self.reads.next_ctx;
        self.reads.next_ctx += 1;
        let callers = std::mem::take(&mut self.reads.queued);
        self.reads.asked.insert(ctx, (self.reads.ticks, callers));
        // The leader tells requests apart by their context alone: this node's id makes it
        // unique across the members that forward theirs.
        let mut context = self.raw.raft.id.to_be_bytes().to_vec();
        context.extend_from_slice(&ctx.to_be_bytes());
        self.raw.read_index(context);
    }

    /// The engine confirmed reads at commit indexes: they wait for this node to apply them.
    fn confirm_reads(&mut self, states: Vec<raft::ReadState>) {
        for state in states {
            let Ok(ctx) = <[u8; 8]>::try_from(state.request_ctx.get(8..).unwrap_or_default())
            else {
                continue;
            };
            if let Some((_, callers)) = self.reads.asked.remove(&u64::from_be_bytes(ctx)) {
                self.reads
                    .confirmed
                    .entry(state.index)
                    .or_default()
                    .extend(callers);
            }
        }
        self.release_reads();
    }

    /// Releases the confirmed reads this node has applied far enough for.
    fn release_reads(&mut self) {
        while let Some(entry) = self.reads.confirmed.first_entry() {
            if *entry.key() > self.applied {
                break;
            }
            for done in entry.remove() {
                done(Ok(()));
            }
        }
    }

    /// Fails the reads still waiting for the leader's answer (it will not come: the leader
    /// changed, or too much time passed), and with `all` the confirmed ones too.
    fn fail_reads(&mut self, error: &ProposeError, all: bool) {
        let mut callers: Vec<ReadDone> = std::mem::take(&mut self.reads.queued);
        for (_, (_, waiting)) in std::mem::take(&mut self.reads.asked) {
            callers.extend(waiting);
        }
        if all {
            for (_, waiting) in std::mem::take(&mut self.reads.confirmed) {
                callers.extend(waiting);
            }
        }
        for done in callers {
            done(Err(error.clone()));
        }
    }

    /// A tick of the reads' clock: requests unanswered for [`READ_TICKS`] fail.
    pub(crate) fn tick_reads(&mut self) {
        self.reads.ticks += 1;
        let now = self.reads.ticks;
        let late: Vec<u64> = self
            .reads
            .asked
            .iter()
            .filter(|(_, (at, _))| now.saturating_sub(*at) >= READ_TICKS)
            .map(|(ctx, _)| *ctx)
            .collect();
        let error = ProposeError::NotLeader {
            group: self.id,
            leader: self.leader,
        };
        for ctx in late {
            if let Some((_, callers)) = self.reads.asked.remove(&ctx) {
                for done in callers {
                    done(Err(error.clone()));
                }
            }
        }
    }

    pub(crate) fn store(&self) -> &dyn GroupStore<Outcome = O> {
        &*self.raw.store().store
    }

    pub(crate) fn store_mut(&mut self) -> &mut dyn GroupStore<Outcome = O> {
        &mut *self.raw.mut_store().store
    }

    pub(crate) fn failed(&self) -> bool {
        self.failed
    }

    pub(crate) fn rebuilding(&self) -> bool {
        self.rebuilding
    }

    pub(crate) fn set_rebuilding(&mut self, on: bool) {
        self.rebuilding = on;
    }

    /// A rebuilding group is caught up once it applied what a known leader told it is
    /// committed.
    fn check_caught_up(&mut self) {
        if self.rebuilding
            && self.leader.is_some_and(|l| l != self.raw.raft.id)
            && self.raw.raft.raft_log.committed > 0
            && self.applied >= self.raw.raft.raft_log.committed
        {
            self.rebuilding = false;
            tracing::info!(group = %self.id, applied = self.applied, "caught up after losing state: votes again");
        }
    }

    pub(crate) fn role(&self) -> Role {
        self.role
    }

    pub(crate) fn leader(&self) -> Option<NodeId> {
        self.leader
    }

    pub(crate) fn applied(&self) -> u64 {
        self.applied
    }

    /// Proposes `data`; `done` is called when its entry applies (or cannot).
    pub(crate) fn propose(&mut self, node: NodeId, data: Bytes, done: Callback<O>) {
        if self.failed {
            done(Err(ProposeError::Failed(self.id)));
            return;
        }
        if self.raw.raft.state != StateRole::Leader {
            done(Err(ProposeError::NotLeader {
                group: self.id,
                leader: self.leader,
            }));
            return;
        }
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgPropose);
        m.from = node;
        let e = eraftpb::Entry {
            data,
            ..Default::default()
        };
        m.set_entries(vec![e].into());
        match self.raw.raft.step(m) {
            Ok(()) => {
                let index = self.raw.raft.raft_log.last_index();
                let term = self.raw.raft.term;
                if let Some(old) = self.pending.insert(index, Pending { term, done }) {
                    // This leader's log holds the new entry at that index: the older
                    // proposal there was overwritten and can never commit.
                    (old.done)(Err(ProposeError::Superseded));
                }
            }
            Err(_) => done(Err(ProposeError::Dropped)),
        }
    }

    /// Handles every ready the engine has, until it has none.
    pub(crate) fn drive(&mut self, out: &mut Output<'_>) {
        if !self.failed {
            self.ask_reads();
        }
        while !self.failed && self.raw.has_ready() {
            self.handle_ready(out);
        }
        self.check_caught_up();
    }

    fn handle_ready(&mut self, out: &mut Output<'_>) {
        let mut rd = self.raw.ready();
        if let Some(ss) = rd.ss() {
            self.note_role(role_from_raft(ss.raft_state), ss.leader_id, out);
        }
        self.send(rd.take_messages(), out);
        let number = rd.number();
        let read_states = rd.take_read_states();

        if !rd.snapshot().is_empty() {
            let meta = rd.snapshot().get_metadata();
            let (carried, data) = unwrap_snapshot(&rd.snapshot().data);
            let snapshot = Snapshot {
                meta: SnapshotMeta {
                    index: meta.index,
                    term: meta.term,
                },
                data,
            };
            if let Err(error) = self.store_mut().install_snapshot(&snapshot) {
                self.fail(&error, out);
                return;
            }
            let membership =
                carried.unwrap_or_else(|| membership_from_raft(meta.get_conf_state(), meta.index));
            if membership != *self.membership() {
                if let Err(error) = self.raw.mut_store().record_membership(membership.clone()) {
                    self.fail(&error, out);
                    return;
                }
                out.events.push(Event::MembershipChanged {
                    group: self.id,
                    membership,
                });
            }
            self.raw.mut_store().reset_to_snapshot(snapshot.meta.index);
            self.resolve_through(snapshot.meta.index, None);
            self.settle_changes(snapshot.meta.index, 0, None);
            self.applied = snapshot.meta.index;
            self.release_reads();
            self.supersede_older_terms(snapshot.meta.term);
            // The snapshot is durable and replaces everything appended before it: appends
            // still in flight no longer matter, and what waited for them goes out now (found
            // by the simulator, seed 1742 heavy: the snapshot's own ready waited behind them
            // while its applied index was already reported).
            self.superseded_through = self.raw.store().last_ticket();
            for w in &mut self.waiting {
                w.done = true;
            }
            self.flush_waiting(out);
            tracing::info!(group = %self.id, index = snapshot.meta.index, "installed a snapshot from the leader");
        }

        let entries = rd.take_entries();
        let ticket = if entries.is_empty() {
            None
        } else {
            let entries = entries_from_raft(&entries);
            let ticket = self.raw.mut_store().begin_append(&entries);
            let mailbox = out.mailbox.clone();
            let group = self.id;
            self.store_mut().append(
                entries,
                Box::new(move |result| mailbox.persisted(group, ticket, result)),
            );
            Some(ticket)
        };

        if let Some(hs) = rd.hs() {
            let state = hard_state_from_raft(hs);
            let sync = rd.must_sync();
            if let Err(error) = self.store_mut().save_hard_state(state, sync) {
                self.fail(&error, out);
                return;
            }
        }

        let persisted = rd.take_persisted_messages();
        let committed = rd.take_committed_entries();
        self.apply(&committed, out);

        if ticket.is_none() && self.waiting.is_empty() {
            self.send(persisted, out);
            let mut light = self.raw.advance_append(rd);
            self.send(light.take_messages(), out);
            let committed = light.take_committed_entries();
            self.apply(&committed, out);
        } else {
            self.waiting.push_back(Waiting {
                ticket,
                number,
                messages: persisted,
                done: ticket.is_none(),
            });
            self.raw.advance_append_async(rd);
            self.flush_waiting(out);
        }
        self.report_applied();
        // A confirmed read's index is committed, so this node applies it in a later ready if
        // not in this one.
        self.confirm_reads(read_states);
        self.release_reads();
    }

    /// Tells the engine how far the state machine got, as far as the engine allows: never
    /// past what it knows is persisted (a snapshot installed in a ready still waiting for
    /// earlier appends counts once that ready is persisted).
    fn report_applied(&mut self) {
        let log = &self.raw.raft.raft_log;
        let to = self.applied.min(log.committed).min(log.persisted);
        if to > log.applied {
            self.raw.advance_apply_to(to);
        }
    }

    /// The store reports the append with `ticket` durable (or failed).
    pub(crate) fn persisted(
        &mut self,
        ticket: u64,
        result: Result<(), StoreError>,
        out: &mut Output<'_>,
    ) {
        if self.failed {
            return;
        }
        if ticket <= self.superseded_through {
            return;
        }
        if let Err(error) = result {
            self.fail(&error, out);
            return;
        }
        self.raw.mut_store().complete_append(ticket);
        for w in &mut self.waiting {
            if w.ticket.is_some_and(|t| t <= ticket) {
                w.done = true;
            }
        }
        self.flush_waiting(out);
    }

    fn flush_waiting(&mut self, out: &mut Output<'_>) {
        let mut last = None;
        while self.waiting.front().is_some_and(|w| w.done) {
            let w = self.waiting.pop_front().expect("checked");
            self.send(w.messages, out);
            last = Some(w.number);
        }
        if let Some(number) = last {
            self.raw.on_persist_ready(number);
            self.report_applied();
        }
    }

    fn apply(&mut self, entries: &[eraftpb::Entry], out: &mut Output<'_>) {
        for e in entries {
            if self.failed {
                return;
            }
            if e.index <= self.applied {
                continue;
            }
            // A group's applied (and so committed) index only grows, one entry at a time, and
            // terms never fall along its log (checked in debug builds, the simulator and tests).
            debug_assert_eq!(
                e.index,
                self.applied + 1,
                "group {:?} applies entry {} after {}: a gap",
                self.id,
                e.index,
                self.applied
            );
            debug_assert!(
                e.term >= self.applied_term,
                "group {:?} applies entry {} of term {} after term {}",
                self.id,
                e.index,
                e.term,
                self.applied_term
            );
            let changed = if e.get_entry_type() == eraftpb::EntryType::EntryNormal {
                None
            } else {
                match self.apply_membership(e, out) {
                    Ok(changed) => changed,
                    Err(error) => {
                        self.fail(&error, out);
                        return;
                    }
                }
            };
            let entry = entry_from_raft(e);
            let outcome = self.store_mut().apply(&entry);
            self.applied = entry.index;
            self.resolve_through(entry.index, Some((entry.term, outcome)));
            self.settle_changes(entry.index, entry.term, changed.as_ref());
            self.supersede_older_terms(entry.term);
        }
    }

    /// An entry of `term` applied at `self.applied`: terms never fall along a log, so a waiting
    /// proposal of an older term at a later index was overwritten (or will be) and can never
    /// commit. Its caller hears so now, not when (if ever) the log grows past its index: a
    /// deposed leader's stranded tail beyond a new leader's quiet log would otherwise wait
    /// for the next write to its group (found by CI, a follower's first event write right
    /// after start waiting forever on a shard group whose leadership moved).
    fn supersede_older_terms(&mut self, term: u64) {
        if term <= self.applied_term {
            return;
        }
        self.applied_term = term;
        let dead: Vec<u64> = self
            .pending
            .range(self.applied + 1..)
            .filter(|(_, p)| p.term < term)
            .map(|(&index, _)| index)
            .collect();
        for index in dead {
            let p = self.pending.remove(&index).expect("listed");
            (p.done)(Err(ProposeError::Superseded));
        }
        let dead: Vec<u64> = self
            .changes
            .range(self.applied + 1..)
            .filter(|(_, (t, _))| *t < term)
            .map(|(&index, _)| index)
            .collect();
        for index in dead {
            let (_, done) = self.changes.remove(&index).expect("listed");
            done(Err(ProposeError::Superseded));
        }
    }

    /// Answers every proposal at or below `index`: the one whose entry applied at `index`
    /// with its term gets `outcome`, any other lost its slot (or was skipped by a snapshot).
    fn resolve_through(&mut self, index: u64, mut outcome: Option<(u64, O)>) {
        while let Some(entry) = self.pending.first_entry() {
            let at = *entry.key();
            if at > index {
                break;
            }
            let pending = entry.remove();
            let result = match &outcome {
                Some((term, _)) if at == index && *term == pending.term => {
                    let (_, o) = outcome.take().expect("matched");
                    Ok(o)
                }
                Some(_) if at == index => Err(ProposeError::Superseded),
                _ => Err(ProposeError::Unknown),
            };
            (pending.done)(result);
        }
    }

    fn send(&mut self, messages: Vec<Message>, out: &mut Output<'_>) {
        for m in messages {
            if m.get_msg_type() == MessageType::MsgSnapshot {
                // The transport takes it from here; a lost snapshot is retried by probing.
                self.raw.report_snapshot(m.to, SnapshotStatus::Finish);
            }
            out.messages.push((self.id, m));
        }
    }

    fn note_role(&mut self, role: Role, leader: u64, out: &mut Output<'_>) {
        let leader = (leader != 0).then_some(leader);
        if role == self.role && leader == self.leader {
            return;
        }
        // A ReadIndex request in flight is lost with the leadership it went to (the engine
        // drops what its old role had pending): its callers hear it now.
        self.fail_reads(
            &ProposeError::NotLeader {
                group: self.id,
                leader,
            },
            false,
        );
        self.role = role;
        self.leader = leader;
        let term = self.raw.raft.term;
        tracing::info!(group = %self.id, role = role.as_str(), term, leader = ?leader, "role changed");
        out.events.push(Event::RoleChanged {
            group: self.id,
            role,
            term,
            leader,
        });
    }

    fn fail(&mut self, error: &StoreError, out: &mut Output<'_>) {
        self.failed = true;
        tracing::error!(group = %self.id, error = %error, source = ?std::error::Error::source(error), "replicated group failed on this node: it stops taking part until restart");
        while let Some((_, p)) = self.pending.pop_first() {
            (p.done)(Err(ProposeError::Failed(self.id)));
        }
        self.fail_reads(&ProposeError::Failed(self.id), true);
        for (_, (_, done)) in std::mem::take(&mut self.changes) {
            done(Err(ProposeError::Failed(self.id)));
        }
        out.events.push(Event::GroupFailed { group: self.id });
    }

    /// Runs the store's upkeep (see [`GroupStore::maintain`]); a failure fails the group.
    pub(crate) fn maintain(&mut self, now_us: u64, out: &mut Output<'_>) {
        if self.failed {
            return;
        }
        if let Err(error) = self.store_mut().maintain(now_us) {
            self.fail(&error, out);
        }
    }

    /// Answers every waiting proposal: its outcome will never be known here.
    pub(crate) fn abandon(&mut self) {
        while let Some((_, p)) = self.pending.pop_first() {
            (p.done)(Err(ProposeError::Unknown));
        }
        self.fail_reads(&ProposeError::Unknown, true);
        for (_, (_, done)) in std::mem::take(&mut self.changes) {
            done(Err(ProposeError::Unknown));
        }
    }
}
