//! In-process clusters of `Node`s over in-memory stores and a network the test controls:
//! elections, replication, a partitioned leader that must not acknowledge anything, divergent
//! tails, crash and restart, wiped members rebuilt from a snapshot, and a seeded random fault
//! schedule checked against the guarantees.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use eddy_consensus::testing::{Applied, MemDisk, MemStore};
use eddy_consensus::{
    GroupId, MemberChange, Membership, Node, NodeConfig, NodeId, ProposeError, Role,
};

const G: GroupId = GroupId(1);

type Outcome = Result<u64, ProposeError>;
/// A batch on the wire: from, to, messages.
type Flight = (NodeId, NodeId, Vec<(GroupId, Bytes)>);

/// A small deterministic generator (xorshift64*), so every run of a seed is the same run.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

struct Member {
    node: Option<Node<u64>>,
    disk: MemDisk,
    applied: Applied,
}

struct Cluster {
    members: BTreeMap<NodeId, Member>,
    /// Directed links that drop everything.
    cut: BTreeSet<(NodeId, NodeId)>,
    in_flight: VecDeque<Flight>,
    rng: Rng,
    drop_percent: u64,
    reorder: bool,
    ticks_per_node: BTreeMap<NodeId, u64>,
}

fn config(id: NodeId, n: u64) -> NodeConfig {
    let mut c = NodeConfig::new(id, (1..=n).collect());
    // Fixed, distinct election timeouts: the schedule, not the engine's own randomness,
    // decides who campaigns first, so a seed replays exactly.
    c.election_ticks = 10 + usize::try_from(id).unwrap() * 3;
    c.max_election_ticks = c.election_ticks + 1;
    c
}

impl Cluster {
    fn new(n: u64, seed: u64) -> Self {
        Cluster::on_disks((1..=n).map(|_| MemDisk::new()).collect(), seed)
    }

    /// A cluster whose members start on these disks (member `i + 1` on `disks[i]`).
    fn on_disks(disks: Vec<MemDisk>, seed: u64) -> Self {
        let n = disks.len() as u64;
        let mut members = BTreeMap::new();
        for (id, disk) in (1..=n).zip(disks) {
            let (node, applied) = start(id, n, &disk);
            members.insert(
                id,
                Member {
                    node: Some(node),
                    disk,
                    applied,
                },
            );
        }
        Cluster {
            members,
            cut: BTreeSet::new(),
            in_flight: VecDeque::new(),
            rng: Rng(seed | 1),
            drop_percent: 0,
            reorder: false,
            ticks_per_node: BTreeMap::new(),
        }
    }

    fn n(&self) -> u64 {
        self.members.len() as u64
    }

    fn node(&mut self, id: NodeId) -> &mut Node<u64> {
        self.members
            .get_mut(&id)
            .unwrap()
            .node
            .as_mut()
            .expect("member is up")
    }

    /// Every live member processes; produced messages go on the wire.
    fn pump(&mut self) {
        for (&id, m) in &mut self.members {
            let Some(node) = m.node.as_mut() else {
                continue;
            };
            node.process();
            for (to, batch) in node.take_outbound() {
                self.in_flight.push_back((id, to, batch));
            }
        }
    }

    /// Delivers what is on the wire (subject to cuts, drops and reordering), then pumps, until
    /// nothing moves or `limit` deliveries happened.
    fn settle(&mut self, limit: usize) {
        self.pump();
        let mut delivered = 0;
        while delivered < limit {
            if self.in_flight.is_empty() {
                break;
            }
            if self.reorder && self.in_flight.len() > 1 && self.rng.chance(30) {
                let i = usize::try_from(self.rng.below(self.in_flight.len() as u64)).unwrap();
                self.in_flight.swap(0, i);
            }
            let (from, to, batch) = self.in_flight.pop_front().unwrap();
            delivered += 1;
            if self.cut.contains(&(from, to)) || self.rng.chance(self.drop_percent) {
                continue;
            }
            if let Some(node) = self.members.get_mut(&to).and_then(|m| m.node.as_mut()) {
                node.receive(from, batch);
            }
            self.pump();
        }
    }

    fn tick(&mut self) {
        for (&id, m) in &mut self.members {
            if let Some(node) = m.node.as_mut() {
                node.tick();
                *self.ticks_per_node.entry(id).or_default() += 1;
            }
        }
        self.settle(10_000);
    }

    fn run(&mut self, ticks: usize) {
        for _ in 0..ticks {
            self.tick();
        }
    }

    fn leaders(&self) -> Vec<NodeId> {
        self.members
            .iter()
            .filter(|(_, m)| {
                m.node
                    .as_ref()
                    .is_some_and(|n| n.role(G) == Some(Role::Leader))
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// Runs until exactly one live member leads, among `among` when given.
    fn await_leader(&mut self, among: &[NodeId]) -> NodeId {
        for _ in 0..200 {
            self.tick();
            let leaders: Vec<NodeId> = self
                .leaders()
                .into_iter()
                .filter(|l| among.is_empty() || among.contains(l))
                .collect();
            if leaders.len() == 1 {
                return leaders[0];
            }
        }
        panic!("no leader elected among {among:?}");
    }

    fn propose(&mut self, on: NodeId, data: &str) -> Slot {
        let slot = Arc::new(Mutex::new(None));
        let s = slot.clone();
        self.node(on).propose(
            G,
            Bytes::copy_from_slice(data.as_bytes()),
            Box::new(move |r| *s.lock().unwrap() = Some(r)),
        );
        slot
    }

    fn isolate(&mut self, id: NodeId) {
        for other in 1..=self.n() {
            if other != id {
                self.cut.insert((id, other));
                self.cut.insert((other, id));
            }
        }
    }

    fn heal(&mut self) {
        self.cut.clear();
    }

    fn crash(&mut self, id: NodeId) {
        self.members.get_mut(&id).unwrap().node = None;
        self.in_flight.retain(|(f, t, _)| *f != id && *t != id);
    }

    fn restart(&mut self, id: NodeId) {
        let n = self.n();
        let m = self.members.get_mut(&id).unwrap();
        let (node, applied) = start(id, n, &m.disk);
        m.node = Some(node);
        m.applied = applied;
    }

    fn wipe(&mut self, id: NodeId) {
        self.crash(id);
        self.members.get_mut(&id).unwrap().disk = MemDisk::new();
        self.restart(id);
    }

    fn applied(&self, id: NodeId) -> Vec<(u64, Bytes)> {
        self.members[&id].applied.get()
    }

    fn payloads(&self, id: NodeId) -> Vec<String> {
        self.applied(id)
            .into_iter()
            .map(|(_, b)| String::from_utf8(b.to_vec()).unwrap())
            .collect()
    }

    /// Committed state agrees: every live member's applied sequence is a prefix of the longest.
    fn assert_prefix_agreement(&self) {
        let all: Vec<Vec<(u64, Bytes)>> = self
            .members
            .iter()
            .filter(|(_, m)| m.node.is_some())
            .map(|(id, _)| self.applied(*id))
            .collect();
        let longest = all.iter().max_by_key(|a| a.len()).unwrap();
        for a in &all {
            assert_eq!(&longest[..a.len()], &a[..], "applied sequences diverge");
        }
    }
}

fn start(id: NodeId, n: u64, disk: &MemDisk) -> (Node<u64>, Applied) {
    let store = MemStore::open(disk.clone());
    let applied = store.applied();
    let mut node = Node::new(config(id, n), || {});
    node.add_group(G, Box::new(store)).unwrap();
    (node, applied)
}

fn outcome(slot: &Arc<Mutex<Option<Outcome>>>) -> Option<Outcome> {
    slot.lock().unwrap().clone()
}

#[test]
fn one_leader_replicates_to_everyone() {
    for n in [3, 5] {
        let mut c = Cluster::new(n, 7);
        let leader = c.await_leader(&[]);
        let slots: Vec<_> = (0..50)
            .map(|i| c.propose(leader, &format!("m{i}")))
            .collect();
        c.run(5);
        for s in &slots {
            assert!(matches!(outcome(s), Some(Ok(_))), "{:?}", outcome(s));
        }
        let expected: Vec<String> = (0..50).map(|i| format!("m{i}")).collect();
        for id in 1..=n {
            assert_eq!(c.payloads(id), expected, "member {id} of {n}");
        }
        // Proposals on a follower are refused with the leader's id.
        let follower = (1..=n).find(|&i| i != leader).unwrap();
        let s = c.propose(follower, "x");
        assert_eq!(
            outcome(&s),
            Some(Err(ProposeError::NotLeader {
                group: G,
                leader: Some(leader)
            }))
        );
    }
}

/// Where a proposal's outcome lands.
type Slot = Arc<Mutex<Option<Outcome>>>;

/// Where a read's answer lands: how many entries the member had applied when it was released.
type ReadSlot = Arc<Mutex<Option<Result<usize, ProposeError>>>>;

impl Cluster {
    /// Asks member `on` for a linearizable read of the group.
    fn read(&mut self, on: NodeId) -> ReadSlot {
        let slot: ReadSlot = Arc::new(Mutex::new(None));
        let (s, applied) = (slot.clone(), self.members[&on].applied.clone());
        self.node(on).read_index(
            G,
            Box::new(move |r| *s.lock().unwrap() = Some(r.map(|()| applied.get().len()))),
        );
        slot
    }
}

#[test]
fn reads_see_every_acknowledged_write_and_an_isolated_leader_serves_none() {
    let mut c = Cluster::new(3, 11);
    let leader = c.await_leader(&[]);
    let follower = (1..=3).find(|&i| i != leader).unwrap();
    let writes: Vec<_> = (0..5)
        .map(|i| c.propose(leader, &format!("w{i}")))
        .collect();
    // A follower's read asked now is released only once it applied what the leader had
    // committed when the read reached it; the leader's once a quorum confirmed it still leads.
    c.run(3);
    for w in &writes {
        assert!(matches!(outcome(w), Some(Ok(_))));
    }
    let acknowledged = c.applied(leader).len();
    let on_follower = c.read(follower);
    let on_leader = c.read(leader);
    c.run(3);
    assert!(matches!(*on_follower.lock().unwrap(), Some(Ok(n)) if n >= acknowledged));
    assert!(matches!(*on_leader.lock().unwrap(), Some(Ok(n)) if n >= acknowledged));
    // Many reads asked together share one request and all come back.
    let many: Vec<_> = (0..20).map(|_| c.read(follower)).collect();
    c.run(2);
    assert!(many
        .iter()
        .all(|r| matches!(*r.lock().unwrap(), Some(Ok(_)))));

    // The leader is cut off: it cannot confirm its leadership, so its reads fail (within an
    // election timeout) instead of serving what the others may already have overwritten.
    c.isolate(leader);
    let stale = c.read(leader);
    c.run(1);
    assert!(
        stale.lock().unwrap().is_none(),
        "served before any quorum answered"
    );
    c.run(30);
    assert!(
        matches!(
            *stale.lock().unwrap(),
            Some(Err(ProposeError::NotLeader { .. }))
        ),
        "{:?}",
        stale.lock().unwrap()
    );
    // The others elect a leader and take a write the old one never sees; a read on the old
    // leader still fails, a read on the majority's side sees the write.
    let others: Vec<NodeId> = (1..=3).filter(|&i| i != leader).collect();
    let new_leader = c.await_leader(&others);
    let w = c.propose(new_leader, "after");
    c.run(3);
    assert!(matches!(outcome(&w), Some(Ok(_))));
    let isolated = c.read(leader);
    let majority = c.read(new_leader);
    c.run(30);
    assert!(matches!(*isolated.lock().unwrap(), Some(Err(_))));
    assert!(matches!(*majority.lock().unwrap(), Some(Ok(n)) if n == acknowledged + 1));
}

/// The leader commits "before", is cut off, and proposes "lost0".."lost4" there: returns it,
/// the stranded proposals' slots, and the other members.
fn strand_the_leader(c: &mut Cluster) -> (NodeId, Vec<Slot>, Vec<NodeId>) {
    let old = c.await_leader(&[]);
    let before = c.propose(old, "before");
    c.run(3);
    assert!(matches!(outcome(&before), Some(Ok(_))));
    c.isolate(old);
    let stranded = (0..5)
        .map(|i| c.propose(old, &format!("lost{i}")))
        .collect();
    let others = (1..=3).filter(|&i| i != old).collect();
    (old, stranded, others)
}

#[test]
fn a_partitioned_leader_acknowledges_nothing_and_its_tail_is_discarded() {
    let mut c = Cluster::new(3, 11);
    let (old, stranded, others) = strand_the_leader(&mut c);
    let new = c.await_leader(&others);
    let won: Vec<_> = (0..5)
        .map(|i| c.propose(new, &format!("kept{i}")))
        .collect();
    c.run(30);
    for s in &stranded {
        assert!(
            !matches!(outcome(s), Some(Ok(_))),
            "a leader without a majority acknowledged a write"
        );
    }
    // Check-quorum: the stranded leader stepped down by now.
    assert_ne!(c.node(old).role(G), Some(Role::Leader));
    for s in &won {
        assert!(matches!(outcome(s), Some(Ok(_))));
    }

    c.heal();
    c.run(20);
    for s in &stranded {
        assert_eq!(outcome(s), Some(Err(ProposeError::Superseded)));
    }
    let expected = ["before", "kept0", "kept1", "kept2", "kept3", "kept4"];
    for id in 1..=3 {
        assert_eq!(c.payloads(id), expected, "member {id}");
        let disk = c.members[&id].disk.entries();
        assert!(
            disk.iter().all(|e| !e.data.starts_with(b"lost")),
            "member {id} kept a discarded entry on disk"
        );
    }
}

#[test]
fn a_deposed_leaders_tail_is_answered_even_when_the_new_leader_writes_nothing() {
    // The new leader's log ends at its election entry, below the stranded proposals' indexes,
    // and nothing else is ever proposed: the stranded callers still hear that their
    // proposals are gone once the old leader applies the new term's entry.
    let mut c = Cluster::new(3, 23);
    let (_, stranded, others) = strand_the_leader(&mut c);
    c.await_leader(&others);
    c.run(30);
    assert!(
        stranded.iter().all(|s| outcome(s).is_none()),
        "cut off, nothing known yet"
    );

    c.heal();
    c.run(20);
    for s in &stranded {
        assert_eq!(outcome(s), Some(Err(ProposeError::Superseded)));
    }
    for id in 1..=3 {
        assert_eq!(c.payloads(id), ["before"], "member {id}");
    }
}

#[test]
fn nothing_is_acknowledged_until_a_majority_has_it_durable() {
    let mut c = Cluster::new(3, 5);
    let leader = c.await_leader(&[]);
    let followers: Vec<NodeId> = (1..=3).filter(|&i| i != leader).collect();
    // Followers receive everything but cannot make it durable yet.
    let mut held = Vec::new();
    for &f in &followers {
        let m = c.members.get_mut(&f).unwrap();
        m.node = None;
        let mut store = MemStore::open(m.disk.clone());
        store.hold_syncs();
        held.push(f);
        let mut node = Node::new(config(f, 3), || {});
        m.applied = store.applied();
        node.add_group(G, Box::new(store)).unwrap();
        m.node = Some(node);
    }
    c.run(3);
    let leader = c.await_leader(&[]);
    let s = c.propose(leader, "w");
    c.run(10);
    assert_eq!(outcome(&s), None, "acknowledged before any follower synced");
    // The leader's own durable copy is not a majority.
    let synced_any = followers.iter().any(|f| {
        c.members[f]
            .disk
            .entries()
            .iter()
            .any(|e| &e.data[..] == b"w")
    });
    assert!(!synced_any);
    // One follower crashes before syncing: its held writes vanish; it restarts without holds.
    let f = followers[0];
    c.crash(f);
    c.restart(f);
    c.run(10);
    assert!(matches!(outcome(&s), Some(Ok(_))));
    assert!(c.members[&f]
        .disk
        .entries()
        .iter()
        .any(|e| &e.data[..] == b"w"));
}

#[test]
fn a_restarted_member_catches_up_and_a_wiped_one_rebuilds_from_a_snapshot() {
    let mut c = Cluster::new(3, 3);
    let leader = c.await_leader(&[]);
    for i in 0..20 {
        c.propose(leader, &format!("a{i}"));
    }
    c.run(3);
    let follower = (1..=3).find(|&i| i != leader).unwrap();
    c.crash(follower);
    let slots: Vec<_> = (0..20)
        .map(|i| c.propose(leader, &format!("b{i}")))
        .collect();
    c.run(3);
    assert!(slots.iter().all(|s| matches!(outcome(s), Some(Ok(_)))));
    c.restart(follower);
    c.run(10);
    assert_eq!(c.payloads(follower), c.payloads(leader));
    assert_eq!(c.payloads(follower).len(), 40);

    // Every member compacts its log (retention), then one member loses its disk.
    let last = c.applied(leader).last().unwrap().0;
    for id in 1..=3 {
        c.members[&id].disk.compact(last - 2);
    }
    let wiped = (1..=3).find(|&i| i != c.leaders()[0]).unwrap();
    c.wipe(wiped);
    let more = c.propose(c.leaders()[0], "after-wipe");
    c.run(20);
    assert!(matches!(outcome(&more), Some(Ok(_))));
    let leader = c.leaders()[0];
    assert_eq!(c.payloads(wiped), c.payloads(leader));
    assert_eq!(c.payloads(wiped).len(), 41);
    assert!(
        c.members[&wiped].disk.entries().len() < 10,
        "the wiped member was rebuilt from a snapshot, not a full log"
    );
}

/// A seeded schedule of drops, reordering, partitions, crashes and restarts: acknowledged
/// proposals are applied exactly once everywhere at the end, committed sequences never
/// diverge, and the healed cluster makes progress.
fn chaos(seed: u64, n: u64) {
    let mut c = Cluster::new(n, seed);
    c.reorder = true;
    let mut slots: Vec<(String, Arc<Mutex<Option<Outcome>>>)> = Vec::new();
    let mut rng = Rng(seed.wrapping_mul(31) | 1);
    for round in 0..150u64 {
        c.drop_percent = if rng.chance(20) { rng.below(30) } else { 0 };
        match rng.below(20) {
            0 => {
                let id = 1 + rng.below(n);
                c.isolate(id);
            }
            1 => {
                let a = 1 + rng.below(n);
                let b = 1 + rng.below(n);
                if a != b {
                    c.cut.insert((a, b)); // one-way
                }
            }
            2 | 3 => c.heal(),
            4 => {
                let down = c.members.values().filter(|m| m.node.is_none()).count() as u64;
                let id = 1 + rng.below(n);
                if c.members[&id].node.is_some() && down + 1 < n.div_ceil(2) {
                    c.crash(id);
                }
            }
            5 | 6 => {
                let id = 1 + rng.below(n);
                if c.members[&id].node.is_none() {
                    c.restart(id);
                }
            }
            _ => {}
        }
        let live: Vec<NodeId> = c
            .members
            .iter()
            .filter(|(_, m)| m.node.is_some())
            .map(|(id, _)| *id)
            .collect();
        let on = live[usize::try_from(rng.below(live.len() as u64)).unwrap()];
        let data = format!("s{seed}-{round}");
        let slot = c.propose(on, &data);
        slots.push((data, slot));
        c.tick();
        c.assert_prefix_agreement();
    }
    // Faults stop: everyone up, network healed; progress within a bound.
    c.drop_percent = 0;
    c.heal();
    for id in 1..=n {
        if c.members[&id].node.is_none() {
            c.restart(id);
        }
    }
    let leader = c.await_leader(&[]);
    let last = c.propose(leader, "final");
    c.run(40);
    assert!(
        matches!(outcome(&last), Some(Ok(_))),
        "seed {seed}: no progress after healing"
    );
    let reference = c.payloads(leader);
    for id in 1..=n {
        assert_eq!(
            c.payloads(id),
            reference,
            "seed {seed}: member {id} differs"
        );
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &reference {
        *counts.entry(p.as_str()).or_default() += 1;
    }
    let acked = slots
        .iter()
        .filter(|(_, s)| matches!(outcome(s), Some(Ok(_))))
        .count();
    eprintln!(
        "seed {seed}: {} proposals, {acked} acknowledged, {} applied",
        slots.len(),
        reference.len()
    );
    assert!(
        acked > 0,
        "seed {seed}: the schedule never let a proposal through"
    );
    for (data, slot) in &slots {
        let seen = counts.get(data.as_str()).copied().unwrap_or(0);
        assert!(seen <= 1, "seed {seed}: {data} applied {seen} times");
        if matches!(outcome(slot), Some(Ok(_))) {
            assert_eq!(seen, 1, "seed {seed}: acknowledged {data} is missing");
        }
    }
}

#[test]
fn seeded_fault_schedules_keep_every_acknowledged_proposal() {
    for seed in 1..=12 {
        chaos(seed, 3);
    }
    for seed in 100..=104 {
        chaos(seed, 5);
    }
}

/// Found by the simulator (`cargo xtask sim --seed 1 --nodes 3 --faults light`): with the
/// engine's `batch_append`, a rejection that moves a follower's next index back made the
/// leader merge the resent entries into an empty append already queued for that follower
/// (a commit broadcast), keeping the queued append's previous index. The follower received
/// "after index K+1 come entries from K+1", found no conflict and acknowledged K+2, an entry
/// it did not have; the leader counted that acknowledgement and committed (and acknowledged
/// to a client) an entry only it held. Every append a leader sends must start right after
/// its previous index.
#[test]
fn seed_1_light_a_rejection_never_merges_entries_into_a_queued_empty_append() {
    use protobuf::Message as _;
    use raft::eraftpb::{Message, MessageType};

    let decode = |bytes: &Bytes| Message::parse_from_bytes(bytes).unwrap();
    let mut c = Cluster::new(3, 1);
    c.node(1).campaign(G);
    c.run(3);
    assert_eq!(c.leaders(), [1]);
    for i in 0..3 {
        c.propose(1, &format!("warm{i}"));
    }
    c.run(3);
    let k = c.node(1).status(G).unwrap().last_index;
    let term = c.node(1).status(G).unwrap().term;
    assert_eq!(c.node(2).status(G).unwrap().applied, k, "node 2 is in sync");

    // Entry K+1 reaches node 3 only; node 3 acknowledges it.
    c.propose(1, "x");
    c.node(1).process();
    let appends: Vec<(NodeId, Vec<(GroupId, Bytes)>)> = c.node(1).take_outbound();
    let to_3 = appends.into_iter().find(|(to, _)| *to == 3).unwrap().1;
    c.node(3).receive(1, to_3);
    c.node(3).process();
    let ack = c.node(3).take_outbound().into_iter().next().unwrap().1;

    // A stale rejection from node 2 arrives together with node 3's acknowledgement: the
    // acknowledgement commits K+1 (queueing an empty commit append for node 2), the rejection
    // moves node 2 back to K+1 (resending entry K+1).
    let mut reject = Message::default();
    reject.set_msg_type(MessageType::MsgAppendResponse);
    reject.from = 2;
    reject.to = 1;
    reject.term = term;
    reject.index = k + 1;
    reject.reject = true;
    reject.reject_hint = k;
    reject.log_term = term;
    reject.commit = k;
    c.node(1).receive(3, ack);
    c.node(1)
        .receive(2, vec![(G, Bytes::from(reject.write_to_bytes().unwrap()))]);
    c.node(1).process();
    let mut checked = 0;
    for (to, batch) in c.node(1).take_outbound() {
        for (_, bytes) in batch {
            let m = decode(&bytes);
            if m.get_msg_type() == MessageType::MsgAppend {
                if let Some(first) = m.entries.first() {
                    assert_eq!(
                        first.index,
                        m.index + 1,
                        "append to node {to} anchored at {} carries entries from {}",
                        m.index,
                        first.index
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(
        checked > 0,
        "the rejection made the leader resend entry K+1"
    );
}

/// Found by the simulator (`cargo xtask sim --seed 427 --nodes 3 --faults heavy`): a follower
/// replaced a conflicting tail with a new leader's entries and saved the new commit index, then
/// lost the new entries (their write failed, or a crash came before the sync) while the commit
/// index stayed on disk. On restart it trusted that commit index and applied the old tail it
/// still held: entries never committed, diverging from every other member. The commit index
/// recovered at open must never cover more than what was applied.
#[test]
fn seed_427_heavy_a_commit_index_saved_before_its_entries_never_applies_a_stale_tail() {
    use eddy_consensus::{EntryKind, GroupStore, HardState, LogEntry};

    let disk = |tail: &[(u64, u64, &str)]| {
        let disk = MemDisk::new();
        let mut store = MemStore::open(disk.clone());
        let entries: Vec<LogEntry> = (1..=4)
            .map(|i| (i, 1, format!("a{i}")))
            .chain(tail.iter().map(|(i, t, d)| (*i, *t, (*d).to_owned())))
            .map(|(index, term, data)| LogEntry {
                index,
                term,
                kind: EntryKind::Normal,
                data: Bytes::from(data),
            })
            .collect();
        store.append(entries, Box::new(|r| r.unwrap()));
        let hard = HardState {
            term: 2,
            vote: 1,
            commit: 6,
        };
        store.save_hard_state(hard, true).unwrap();
        disk
    };
    let committed = [(5, 2, "b5"), (6, 2, "b6")];
    // Node 3 kept the old leader's tail under the commit index it saved for the new one.
    let stale = [(5, 1, "stale5"), (6, 1, "stale6")];
    let mut c = Cluster::on_disks(vec![disk(&committed), disk(&committed), disk(&stale)], 427);
    c.run(2);
    assert!(
        c.payloads(3).iter().all(|p| !p.starts_with("stale")),
        "node 3 applied its uncommitted tail: {:?}",
        c.payloads(3)
    );
    let leader = c.await_leader(&[1, 2]);
    let after = c.propose(leader, "after");
    c.run(10);
    assert!(matches!(outcome(&after), Some(Ok(_))));
    let expected = ["a1", "a2", "a3", "a4", "b5", "b6", "after"];
    for id in 1..=3 {
        assert_eq!(c.payloads(id), expected, "member {id}");
    }
}

/// Found by the simulator (`cargo xtask sim --seed 1742 --nodes 5 --faults heavy`): a follower
/// whose earlier append was still waiting for its sync received a snapshot from the leader.
/// The snapshot is durable once installed, but the group told the engine it had applied up to
/// the snapshot before telling it the snapshot was persisted (the earlier append still held the
/// queue), and raft-rs stopped the node with "applied(..) is out of range". A snapshot
/// supersedes every append before it: those wait no longer.
#[test]
fn seed_1742_heavy_a_snapshot_behind_an_unsynced_append_applies_without_stopping_the_node() {
    let mut c = Cluster::new(3, 1742);
    c.node(1).campaign(G);
    c.run(3);
    assert_eq!(c.leaders(), [1]);
    // Node 3 restarts on a disk that holds its appends until told to sync.
    c.crash(3);
    let mut store = MemStore::open(c.members[&3].disk.clone());
    store.hold_syncs();
    let mut node = Node::new(config(3, 3), || {});
    c.members.get_mut(&3).unwrap().applied = store.applied();
    node.add_group(G, Box::new(store)).unwrap();
    c.members.get_mut(&3).unwrap().node = Some(node);
    c.propose(1, "held");
    c.run(2);
    assert!(
        c.members[&3].disk.unsynced_appends() > 0,
        "node 3 has an append waiting for its sync"
    );
    // Cut off, node 3 falls behind a log the leader then compacts: when it is back, the
    // leader probes it from its last acknowledged entry, which needs a snapshot, and the
    // snapshot reaches node 3 behind its held append.
    c.isolate(3);
    for i in 0..10 {
        c.propose(1, &format!("m{i}"));
    }
    c.run(3);
    let last = c.applied(1).last().unwrap().0;
    c.members[&1].disk.compact(last);
    c.heal();
    c.node(1).report_unreachable(3);
    let after = c.propose(1, "after");
    c.run(3);
    assert!(
        c.payloads(3).len() >= 11,
        "node 3 applied the snapshot: {:?}",
        c.payloads(3)
    );
    // Its disk syncs again: it keeps up with what follows.
    for _ in 0..2 {
        c.members[&3].disk.flush();
        c.run(3);
    }
    assert!(matches!(outcome(&after), Some(Ok(_))));
    assert_eq!(c.payloads(3), c.payloads(1));
    assert_eq!(c.payloads(3).len(), 12);
}

#[test]
fn a_member_that_lost_its_disk_rejoins_without_voting_until_it_caught_up() {
    let mut c = Cluster::new(3, 21);
    let leader = c.await_leader(&[]);
    for i in 0..30 {
        c.propose(leader, &format!("w{i}"));
    }
    c.run(5);
    let lost = (1..=3).find(|&i| i != leader).unwrap();
    let other = (1..=3).find(|&i| i != leader && i != lost).unwrap();
    // The member loses its disk and comes back empty, rebuilding; the others learn it lost
    // its state (the server learns it from the greeting's incarnation).
    c.crash(lost);
    c.members.get_mut(&lost).unwrap().disk = MemDisk::new();
    c.restart(lost);
    c.node(lost).set_rebuilding();
    assert!(c.node(lost).rebuilding());
    c.node(leader).peer_lost_state(lost);
    c.node(other).peer_lost_state(lost);
    // While it rebuilds, a candidate cannot count on its vote: isolate the leader (so it
    // cannot catch up) and the remaining member, whose log may lack what the leader
    // committed, cannot win.
    c.isolate(leader);
    c.run(60);
    assert!(
        c.leaders().iter().all(|&l| l == leader),
        "a member without state voted: {:?}",
        c.leaders()
    );
    // Healed, it catches up from the leader and votes again; nothing applied is lost.
    c.heal();
    let now = c.await_leader(&[]);
    let s = c.propose(now, "after");
    c.run(20);
    assert!(matches!(outcome(&s), Some(Ok(_))));
    assert!(!c.node(lost).rebuilding());
    let leader = c.leaders()[0];
    assert_eq!(c.payloads(lost), c.payloads(leader));
    assert_eq!(c.payloads(lost).len(), 31);
}

/// A leader must not commit an entry on the acknowledgement of a member that has since
/// crashed and lost its disk: once that member's connection broke, what it acknowledged
/// beyond the commit index no longer counts until it acknowledges it again (found by the
/// simulator with 5 members and data losses: entries committed while 2 of 5 held them).
#[test]
fn an_unreachable_members_earlier_ack_does_not_count_towards_a_commit() {
    let mut c = Cluster::new(5, 11);
    let leader = c.await_leader(&[]);
    let others: Vec<NodeId> = (1..=5).filter(|&i| i != leader).collect();
    let (acker, slow) = (others[0], others[1..].to_vec());
    // Three followers receive everything but cannot make it durable yet.
    for &f in &slow {
        let m = c.members.get_mut(&f).unwrap();
        m.node = None;
        let mut store = MemStore::open(m.disk.clone());
        store.hold_syncs();
        let mut node = Node::new(config(f, 5), || {});
        m.applied = store.applied();
        node.add_group(G, Box::new(store)).unwrap();
        m.node = Some(node);
    }
    c.run(3);
    assert_eq!(c.await_leader(&[leader]), leader);
    let s = c.propose(leader, "x");
    c.run(10);
    assert_eq!(
        outcome(&s),
        None,
        "durable on the leader and one follower only"
    );
    // That follower crashes and loses its disk; the leader sees its connection break.
    c.crash(acker);
    c.members.get_mut(&acker).unwrap().disk = MemDisk::new();
    c.node(leader).report_unreachable(acker);
    // One slow follower makes it durable: with the lost copy it would be three of five.
    c.members[&slow[0]].disk.flush();
    c.run(10);
    assert_eq!(
        outcome(&s),
        None,
        "committed on a copy the crashed member no longer has"
    );
    // A second one does: now a majority truly holds it.
    c.members[&slow[1]].disk.flush();
    c.run(10);
    assert!(matches!(outcome(&s), Some(Ok(_))), "{:?}", outcome(&s));
}

#[test]
fn leadership_moves_only_to_a_caught_up_member_and_never_stalls_writes() {
    let mut c = Cluster::new(3, 5);
    let leader = c.await_leader(&[]);
    let lagging = (1..=3).find(|&i| i != leader).unwrap();
    // The target misses entries: no transfer starts, and writes go on.
    c.cut.insert((leader, lagging));
    let before: Vec<_> = (0..5)
        .map(|i| c.propose(leader, &format!("a{i}")))
        .collect();
    c.run(3);
    assert!(!c.node(leader).transfer_leader_if_ready(G, lagging));
    let during = c.propose(leader, "during");
    c.run(3);
    for w in before.iter().chain(std::iter::once(&during)) {
        assert!(matches!(outcome(w), Some(Ok(_))), "{:?}", outcome(w));
    }
    assert_eq!(c.leaders(), [leader]);
    // Caught up again: the move starts and completes at once; a second one waits.
    c.heal();
    c.run(5);
    assert!(c.node(leader).transfer_leader_if_ready(G, lagging));
    c.run(3);
    assert_eq!(c.leaders(), [lagging]);
    let after = c.propose(lagging, "after");
    c.run(3);
    assert!(matches!(outcome(&after), Some(Ok(_))));
    // Neither to itself, nor from a follower.
    assert!(!c.node(lagging).transfer_leader_if_ready(G, lagging));
    assert!(!c.node(leader).transfer_leader_if_ready(G, lagging));
    // Back again; the member that started the first move may not start another at once.
    assert!(c.node(lagging).transfer_leader_if_ready(G, leader));
    c.run(3);
    assert_eq!(c.leaders(), [leader]);
    assert!(!c.node(leader).transfer_leader_if_ready(G, lagging));
    c.run(40);
    assert!(c.node(leader).transfer_leader_if_ready(G, lagging));
}

/// Where a membership change's answer lands.
type ChangeSlot = Arc<Mutex<Option<Result<Membership, ProposeError>>>>;

impl Cluster {
    /// Starts member `id` on an empty disk with the group's founding voters (those it had
    /// before any change: the changes in its log then apply on the newcomer as everywhere
    /// else): it is not one of them, so it waits to be added.
    fn join(&mut self, id: NodeId, founding: &[NodeId]) {
        let disk = MemDisk::new();
        let store = MemStore::open(disk.clone());
        let applied = store.applied();
        let mut node = Node::new(config(id, 1), || {});
        node.add_group_with_voters(G, Box::new(store), founding.to_vec())
            .unwrap();
        self.members.insert(
            id,
            Member {
                node: Some(node),
                disk,
                applied,
            },
        );
    }

    fn change(&mut self, on: NodeId, changes: &[MemberChange]) -> ChangeSlot {
        let slot: ChangeSlot = Arc::new(Mutex::new(None));
        let s = slot.clone();
        self.node(on).propose_membership(
            G,
            changes,
            Box::new(move |r| *s.lock().unwrap() = Some(r)),
        );
        slot
    }

    /// Proposes a change on `on` and runs until it applied there.
    fn change_now(&mut self, on: NodeId, changes: &[MemberChange]) -> Membership {
        let slot = self.change(on, changes);
        for _ in 0..30 {
            self.tick();
            if let Some(r) = slot.lock().unwrap().clone() {
                return r.expect("the change applies");
            }
        }
        panic!("the change {changes:?} did not apply");
    }

    fn voters(&mut self, id: NodeId) -> Vec<NodeId> {
        let mut v = self.node(id).membership(G).unwrap().voters;
        v.sort_unstable();
        v
    }
}

#[test]
fn a_single_member_grows_to_three_and_a_member_is_replaced_without_losing_a_write() {
    let mut c = Cluster::new(1, 3);
    assert_eq!(c.await_leader(&[]), 1);
    let mut acked = Vec::new();
    let mut write = |c: &mut Cluster, on: NodeId, tag: String| {
        let slot = c.propose(on, &tag);
        for _ in 0..20 {
            if outcome(&slot).is_some() {
                break;
            }
            c.tick();
        }
        assert!(
            matches!(outcome(&slot), Some(Ok(_))),
            "{tag}: {:?}",
            outcome(&slot)
        );
        acked.push(tag);
    };
    for i in 0..5 {
        write(&mut c, 1, format!("alone{i}"));
    }
    // Two members join: each catches up as a learner, then votes.
    for id in [2, 3] {
        c.join(id, &[1]);
        let m = c.change_now(1, &[MemberChange::AddLearner(id)]);
        assert!(m.learners.contains(&id) && !m.voters.contains(&id), "{m:?}");
        c.run(5);
        assert_eq!(c.payloads(id), c.payloads(1), "learner {id} caught up");
        let m = c.change_now(1, &[MemberChange::AddVoter(id)]);
        assert!(m.voters.contains(&id) && !m.learners.contains(&id), "{m:?}");
        write(&mut c, 1, format!("with{id}"));
    }
    c.run(3);
    for id in 1..=3 {
        assert_eq!(c.voters(id), [1, 2, 3], "member {id}'s view");
    }
    // Now a majority of three decides: member 1 alone commits nothing.
    c.isolate(1);
    let lonely = c.propose(1, "lonely");
    c.run(5);
    assert!(outcome(&lonely).is_none(), "committed by one of three");
    c.heal();
    let leader = c.await_leader(&[]);
    write(&mut c, leader, "healed".into());

    // Member 1 is replaced by member 4: 4 joins and votes, the leadership leaves 1, 1 goes.
    c.join(4, &[1]);
    c.change_now(leader, &[MemberChange::AddLearner(4)]);
    c.run(5);
    c.change_now(leader, &[MemberChange::AddVoter(4)]);
    c.run(3);
    let mut leader = c.await_leader(&[]);
    if leader == 1 {
        c.run(3);
        assert!(c.node(1).transfer_leader_if_ready(G, 2));
        c.run(5);
        leader = c.await_leader(&[]);
    }
    assert_ne!(leader, 1);
    let m = c.change_now(leader, &[MemberChange::Remove(1)]);
    assert_eq!(m.voters.len(), 3);
    assert!(!m.contains(1));
    c.crash(1);
    for i in 0..5 {
        write(&mut c, leader, format!("without1-{i}"));
    }
    c.run(3);
    for id in 2..=4 {
        assert_eq!(c.voters(id), [2, 3, 4], "member {id}'s view");
    }
    // A restarted member keeps its membership and applies each change once.
    c.crash(3);
    c.restart(3);
    c.run(10);
    let leader = c.await_leader(&[2, 3, 4]);
    write(&mut c, leader, "after restart".into());
    c.run(5);
    assert_eq!(c.voters(3), [2, 3, 4]);
    for id in 2..=4 {
        let got: Vec<String> = c.payloads(id);
        for tag in &acked {
            assert_eq!(got.iter().filter(|p| *p == tag).count(), 1, "{tag} on {id}");
        }
    }
    assert!(c.payloads(2).iter().all(|p| p != "lonely") || outcome(&lonely).is_some());
}

#[test]
fn a_member_added_after_compaction_takes_the_members_with_the_snapshot() {
    let mut c = Cluster::new(3, 9);
    let leader = c.await_leader(&[]);
    let slots: Vec<_> = (0..10)
        .map(|i| c.propose(leader, &format!("w{i}")))
        .collect();
    c.run(3);
    assert!(slots.iter().all(|s| matches!(outcome(s), Some(Ok(_)))));
    let last = c.applied(leader).last().unwrap().0;
    c.members[&leader].disk.compact(last);
    c.join(4, &[1, 2, 3]);
    let m = c.change_now(leader, &[MemberChange::AddLearner(4)]);
    assert!(m.learners.contains(&4));
    c.run(10);
    assert_eq!(c.payloads(4), c.payloads(leader));
    assert!(c.node(4).membership(G).unwrap().learners.contains(&4));
    c.change_now(leader, &[MemberChange::AddVoter(4)]);
    c.run(3);
    assert_eq!(c.voters(4), [1, 2, 3, 4]);
    let w = c.propose(leader, "four voters");
    c.run(3);
    assert!(matches!(outcome(&w), Some(Ok(_))));
    assert_eq!(c.payloads(4), c.payloads(leader));
}

#[test]
fn one_membership_change_at_a_time() {
    let mut c = Cluster::new(3, 13);
    let leader = c.await_leader(&[]);
    c.join(4, &[1, 2, 3]);
    c.join(5, &[1, 2, 3]);
    let first = c.change(leader, &[MemberChange::AddLearner(4)]);
    let second = c.change(leader, &[MemberChange::AddLearner(5)]);
    c.run(5);
    assert!(matches!(*first.lock().unwrap(), Some(Ok(_))));
    assert!(
        matches!(*second.lock().unwrap(), Some(Err(ProposeError::Dropped))),
        "{:?}",
        second.lock().unwrap()
    );
    // On a follower: refused with the leader's id.
    let follower = (1..=3).find(|&i| i != leader).unwrap();
    let refused = c.change(follower, &[MemberChange::AddLearner(5)]);
    assert!(matches!(
        *refused.lock().unwrap(),
        Some(Err(ProposeError::NotLeader { .. }))
    ));
}
