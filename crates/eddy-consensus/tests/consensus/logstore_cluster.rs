//! Three `Node`s on `Replicated<ListMachine>` stores over real eddy-log directories (one temp
//! directory per member) and a network the test controls: replication, compaction while a
//! member is down and its catch-up by snapshot, a partitioned leader's suffix replaced on
//! disk, every member restarted from its directory, and committed entries that agree
//! everywhere. The same cluster also runs on a threaded commit pool, where durability
//! arrives from the pool's threads.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use eddy_consensus::testing::{Applied, ListMachine, MachineDisk};
use eddy_consensus::{
    EntryKind, GroupId, GroupStore, MemberChange, Membership, Node, NodeConfig, NodeId,
    ProposeError, RaftLog, Replicated, Role,
};
use eddy_log::{Cache, CommitPool, FsBackend, LogConfig};

const G: GroupId = GroupId(1);

type Outcome = Result<u64, ProposeError>;
type Slot = Arc<Mutex<Option<Outcome>>>;
type Flight = (NodeId, NodeId, Vec<(GroupId, Bytes)>);

struct Member {
    node: Option<Node<u64>>,
    root: PathBuf,
    machine: MachineDisk,
    applied: Applied,
}

struct Cluster {
    members: BTreeMap<NodeId, Member>,
    cut: BTreeSet<(NodeId, NodeId)>,
    in_flight: VecDeque<Flight>,
    pool: CommitPool,
    threaded: bool,
    ticks: u64,
    tmp: tempfile::TempDir,
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_size: 2048,
        index_interval: 512,
        ..LogConfig::default()
    }
}

impl Cluster {
    fn new(pool: CommitPool, threaded: bool) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = Cluster {
            members: BTreeMap::new(),
            cut: BTreeSet::new(),
            in_flight: VecDeque::new(),
            pool,
            threaded,
            ticks: 0,
            tmp,
        };
        for id in 1..=3 {
            let root = c.tmp.path().join(format!("node-{id}"));
            c.members.insert(
                id,
                Member {
                    node: None,
                    root,
                    machine: MachineDisk::new(),
                    applied: Applied::default(),
                },
            );
            c.restart(id);
        }
        c
    }

    fn restart(&mut self, id: NodeId) {
        self.start(id, &[1, 2, 3]);
    }

    /// Starts member `id` from its directory with the group's founding voters.
    fn start(&mut self, id: NodeId, founding: &[NodeId]) {
        let m = self.members.get_mut(&id).unwrap();
        let backend = Arc::new(FsBackend::new(&m.root).unwrap());
        let log = RaftLog::open(
            backend,
            "g1",
            log_config(),
            &self.pool,
            Arc::new(Cache::new(1 << 20)),
        )
        .unwrap();
        let store = Replicated::open(log, ListMachine::open(m.machine.clone())).unwrap();
        m.applied = store.machine().applied_list();
        let mut config = NodeConfig::new(id, vec![1, 2, 3]);
        config.election_ticks = 10 + usize::try_from(id).unwrap() * 3;
        config.max_election_ticks = config.election_ticks + 1;
        config.maintain_ticks = 2;
        let mut node = Node::new(config, || {});
        node.add_group_with_voters(G, Box::new(store), founding.to_vec())
            .unwrap();
        m.node = Some(node);
    }

    /// A new member on an empty directory, not yet in the group.
    fn join(&mut self, id: NodeId) {
        let root = self.tmp.path().join(format!("node-{id}"));
        self.members.insert(
            id,
            Member {
                node: None,
                root,
                machine: MachineDisk::new(),
                applied: Applied::default(),
            },
        );
        self.start(id, &[1, 2, 3]);
    }

    fn change_now(&mut self, on: NodeId, change: MemberChange) -> Membership {
        let slot: Arc<Mutex<Option<Result<Membership, ProposeError>>>> = Arc::default();
        let s = Arc::clone(&slot);
        self.node(on).propose_membership(
            G,
            &[change],
            Box::new(move |r| *s.lock().unwrap() = Some(r)),
        );
        self.run_until("the change applies", |_| slot.lock().unwrap().is_some());
        let got = slot.lock().unwrap().clone();
        got.unwrap().expect("the change applies")
    }

    fn crash(&mut self, id: NodeId) {
        self.members.get_mut(&id).unwrap().node = None;
        self.in_flight.retain(|(f, t, _)| *f != id && *t != id);
    }

    fn node(&mut self, id: NodeId) -> &mut Node<u64> {
        self.members.get_mut(&id).unwrap().node.as_mut().unwrap()
    }

    fn pump(&mut self) {
        for (&id, m) in &mut self.members {
            if let Some(node) = m.node.as_mut() {
                node.process();
                for (to, batch) in node.take_outbound() {
                    self.in_flight.push_back((id, to, batch));
                }
            }
        }
    }

    fn tick(&mut self) {
        self.ticks += 1;
        for m in self.members.values_mut() {
            if let Some(node) = m.node.as_mut() {
                node.tick_at(self.ticks * 100_000);
            }
        }
        self.pump();
        while let Some((from, to, batch)) = self.in_flight.pop_front() {
            if self.cut.contains(&(from, to)) {
                continue;
            }
            if let Some(node) = self.members.get_mut(&to).and_then(|m| m.node.as_mut()) {
                node.receive(from, batch);
            }
            self.pump();
        }
        if self.threaded {
            // Durability reports come from the pool's threads: give them a moment.
            std::thread::sleep(Duration::from_millis(1));
            self.pump();
        }
    }

    fn run(&mut self, ticks: usize) {
        for _ in 0..ticks {
            self.tick();
        }
    }

    /// Ticks until `done` holds (or fails after a generous bound).
    fn run_until(&mut self, what: &str, mut done: impl FnMut(&mut Cluster) -> bool) {
        let start = Instant::now();
        for _ in 0..2000 {
            if done(self) {
                return;
            }
            self.tick();
        }
        panic!("{what}: not reached after {:?}", start.elapsed());
    }

    fn leader(&self) -> Option<NodeId> {
        let leaders: Vec<NodeId> = self
            .members
            .iter()
            .filter(|(_, m)| {
                m.node
                    .as_ref()
                    .is_some_and(|n| n.role(G) == Some(Role::Leader))
            })
            .map(|(id, _)| *id)
            .collect();
        (leaders.len() == 1).then(|| leaders[0])
    }

    fn await_leader(&mut self, among: &[NodeId]) -> NodeId {
        self.run_until("a leader", |c| {
            c.leader()
                .is_some_and(|l| among.is_empty() || among.contains(&l))
        });
        self.leader().unwrap()
    }

    fn propose(&mut self, on: NodeId, data: &str) -> Slot {
        let slot: Slot = Arc::default();
        let s = Arc::clone(&slot);
        self.node(on).propose(
            G,
            Bytes::copy_from_slice(data.as_bytes()),
            Box::new(move |r| *s.lock().unwrap() = Some(r)),
        );
        slot
    }

    fn payloads(&self, id: NodeId) -> Vec<String> {
        self.members[&id]
            .applied
            .get()
            .into_iter()
            .map(|(_, b)| String::from_utf8(b.to_vec()).unwrap())
            .collect()
    }

    fn store(&self, id: NodeId) -> &dyn GroupStore<Outcome = u64> {
        self.members[&id].node.as_ref().unwrap().store(G).unwrap()
    }

    /// (index, term, data) of every entry the member's store serves.
    fn disk_log(&self, id: NodeId) -> Vec<(u64, u64, Bytes)> {
        let store = self.store(id);
        let (first, last) = (store.first_index(), store.last_index());
        if last < first {
            return Vec::new();
        }
        store
            .entries(first, last + 1, u64::MAX)
            .unwrap()
            .into_iter()
            .map(|e| (e.index, e.term, e.data))
            .collect()
    }

    /// Every live member applied the same payloads, and their logs agree where they overlap.
    fn assert_agreement(&self) {
        let live: Vec<NodeId> = self
            .members
            .iter()
            .filter(|(_, m)| m.node.is_some())
            .map(|(id, _)| *id)
            .collect();
        let reference = self.payloads(live[0]);
        let logs: Vec<BTreeMap<u64, (u64, Bytes)>> = live
            .iter()
            .map(|&id| {
                assert_eq!(
                    self.payloads(id),
                    reference,
                    "member {id} applied otherwise"
                );
                self.disk_log(id)
                    .into_iter()
                    .map(|(i, t, d)| (i, (t, d)))
                    .collect()
            })
            .collect();
        let commit = live
            .iter()
            .map(|&id| {
                self.members[&id]
                    .node
                    .as_ref()
                    .unwrap()
                    .status(G)
                    .unwrap()
                    .commit
            })
            .min()
            .unwrap();
        for (i, a) in logs.iter().enumerate() {
            for b in &logs[i + 1..] {
                for (index, entry) in a.range(..=commit) {
                    if let Some(other) = b.get(index) {
                        assert_eq!(entry, other, "committed entry {index} differs");
                    }
                }
            }
        }
    }
}

fn acked(slot: &Slot) -> bool {
    matches!(*slot.lock().unwrap(), Some(Ok(_)))
}

#[test]
fn three_members_on_real_directories_compact_catch_up_replace_a_suffix_and_agree() {
    let mut c = Cluster::new(CommitPool::inline(), false);
    let leader = c.await_leader(&[]);
    let first: Vec<Slot> = (0..40)
        .map(|i| c.propose(leader, &format!("a{i}")))
        .collect();
    c.run(5);
    assert!(first.iter().all(acked));
    for id in 1..=3 {
        assert_eq!(c.payloads(id).len(), 40, "member {id}");
    }

    // A follower goes down; the others go on and compact past everything it has.
    let down = (1..=3).find(|&i| i != leader).unwrap();
    let down_last = c.store(down).last_index();
    c.crash(down);
    let more: Vec<Slot> = (0..80)
        .map(|i| c.propose(leader, &format!("b{i}")))
        .collect();
    c.run(5);
    assert!(more.iter().all(acked));
    for id in (1..=3).filter(|&i| i != down) {
        let applied = c.node(id).status(G).unwrap().applied;
        c.members[&id].machine.request_compaction(applied - 3);
    }
    c.run(5);
    for id in (1..=3).filter(|&i| i != down) {
        let first_index = c.store(id).first_index();
        assert!(
            first_index > down_last + 1,
            "member {id} compacted to {first_index}"
        );
    }
    let installs = c.members[&down].machine.snapshot_writes();
    c.restart(down);
    c.run_until("the restarted member catches up", |c| {
        c.payloads(down).len() == 120
    });
    assert!(
        c.members[&down].machine.snapshot_writes() > installs,
        "caught up from a snapshot"
    );
    c.assert_agreement();

    // A partitioned leader appends what never commits; the new leader's entries replace it.
    let old = c.leader().unwrap();
    for other in (1..=3).filter(|&i| i != old) {
        c.cut.insert((old, other));
        c.cut.insert((other, old));
    }
    let lost: Vec<Slot> = (0..5)
        .map(|i| c.propose(old, &format!("lost{i}")))
        .collect();
    c.run(3);
    let on_disk = c.disk_log(old);
    assert_eq!(
        on_disk
            .iter()
            .filter(|(_, _, d)| d.starts_with(b"lost"))
            .count(),
        5,
        "the stranded leader wrote its entries"
    );
    let others: Vec<NodeId> = (1..=3).filter(|&i| i != old).collect();
    let new = c.await_leader(&others);
    let kept: Vec<Slot> = (0..5)
        .map(|i| c.propose(new, &format!("kept{i}")))
        .collect();
    c.run(5);
    assert!(kept.iter().all(acked));
    c.cut.clear();
    c.run_until("the old leader catches up", |c| {
        c.payloads(old).len() == 125
    });
    assert!(lost.iter().all(|s| !acked(s)));
    assert!(
        c.disk_log(old)
            .iter()
            .all(|(_, _, d)| !d.starts_with(b"lost")),
        "the replaced suffix is gone from the old leader's disk"
    );
    c.assert_agreement();

    // Every member restarts from its directory; the cluster goes on.
    for id in 1..=3 {
        c.crash(id);
    }
    for id in 1..=3 {
        c.restart(id);
    }
    let leader = c.await_leader(&[]);
    let last = c.propose(leader, "final");
    c.run_until("the final entry applies everywhere", |c| {
        (1..=3).all(|id| c.payloads(id).last().is_some_and(|p| p == "final"))
    });
    assert!(acked(&last));
    c.assert_agreement();
    assert_eq!(c.payloads(1).len(), 126);
}

#[test]
fn a_threaded_commit_pool_reports_durability_from_its_threads() {
    let mut c = Cluster::new(CommitPool::new(2).unwrap(), true);
    let leader = c.await_leader(&[]);
    let slots: Vec<Slot> = (0..30)
        .map(|i| c.propose(leader, &format!("t{i}")))
        .collect();
    c.run_until("every proposal applies everywhere", |c| {
        (1..=3).all(|id| c.payloads(id).len() == 30)
    });
    assert!(slots.iter().all(acked));
    let follower = (1..=3).find(|&i| i != leader).unwrap();
    c.crash(follower);
    c.restart(follower);
    let more = c.propose(leader, "after");
    // Every member, the restarted follower included, applies it: the other follower may
    // apply it after the leader acknowledged it with the restarted one's vote.
    c.run_until("every member applies the new entry", |c| {
        (1..=3).all(|id| c.payloads(id).last().is_some_and(|p| p == "after"))
    });
    assert!(acked(&more));
    c.assert_agreement();
}

#[test]
fn a_member_joins_on_a_real_directory_and_every_member_keeps_the_new_members_across_restarts() {
    let mut c = Cluster::new(CommitPool::inline(), false);
    let leader = c.await_leader(&[]);
    let before: Vec<Slot> = (0..20)
        .map(|i| c.propose(leader, &format!("b{i}")))
        .collect();
    c.run_until("acked", |_| before.iter().all(acked));
    c.join(4);
    let m = c.change_now(leader, MemberChange::AddLearner(4));
    assert!(m.learners.contains(&4));
    c.run_until("the learner caught up", |c| {
        c.payloads(4) == c.payloads(leader)
    });
    let m = c.change_now(leader, MemberChange::AddVoter(4));
    assert_eq!(m.voters.len(), 4);
    let after: Vec<Slot> = (0..10)
        .map(|i| c.propose(leader, &format!("a{i}")))
        .collect();
    c.run_until("acked with four voters", |_| after.iter().all(acked));
    // The changes are records of the log, marked as such.
    let kinds: Vec<EntryKind> = {
        let store = c.store(leader);
        store
            .entries(store.first_index(), store.last_index() + 1, u64::MAX)
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect()
    };
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == EntryKind::ConfChangeV2)
            .count(),
        2,
        "{kinds:?}"
    );
    // Every member restarts from its directory and still has four voters.
    c.run(5);
    for id in 1..=4 {
        c.crash(id);
        c.start(id, &[1, 2, 3]);
    }
    let leader = c.await_leader(&[]);
    for id in 1..=4 {
        let mut voters = c.node(id).membership(G).unwrap().voters;
        voters.sort_unstable();
        assert_eq!(voters, [1, 2, 3, 4], "member {id} after its restart");
        assert!(c.members[&id]
            .root
            .join("g1")
            .join(eddy_consensus::logstore::MEMBERS_FILE)
            .exists());
    }
    let last = c.propose(leader, "last");
    c.run_until("acked after the restarts", |_| acked(&last));
    c.run(5);
    c.assert_agreement();
    assert_eq!(c.payloads(4).len(), 31);
}
