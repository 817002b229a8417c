//! What the server's own state machines applied and answered on a simulated node, for the
//! stores that run them ([`crate::events`], [`crate::streams`]).
//!
//! A [`Recording`] wraps a machine: each applied entry's payload is kept by index (the
//! consensus checker's view of the group's state), and the machine's outcome is judged into an
//! answer `A` (what the server would tell its client), kept by index too. When the simulator
//! tells the factory that a client was acknowledged at an index, the factory looks up the
//! answer there. The records live in the node's directory and outlive its crashes; a restart
//! that applies an entry again must apply the same bytes.
//!
//! Every entry any member applies also goes to the run's [`AppliedLog`], shared by all
//! members: a member that installs a leader's snapshot takes the entries the snapshot covers
//! from there into its own record (the consensus checker has verified that every member
//! applies the same entry at each index), so its record still shows the group's whole state.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use eddy_consensus::logstore::StateMachine;
use eddy_consensus::{GroupId, LogEntry, NodeId, Snapshot, SnapshotMeta, StoreError};

type Shared<T> = Arc<Mutex<T>>;

/// Every entry any member applied, per group and index: what a snapshot stands for.
pub(crate) type AppliedLog = Shared<BTreeMap<GroupId, BTreeMap<u64, Bytes>>>;

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A node's records, per group.
#[derive(Debug)]
pub(crate) struct Records<A> {
    applied: BTreeMap<GroupId, Shared<BTreeMap<u64, Bytes>>>,
    answers: BTreeMap<GroupId, Shared<BTreeMap<u64, A>>>,
    stalled: Arc<AtomicBool>,
    log: AppliedLog,
}

impl<A> Default for Records<A> {
    fn default() -> Self {
        Records::sharing(AppliedLog::default())
    }
}

impl<A> Records<A> {
    /// A node's records, its applies also going to the run's `log`.
    pub(crate) fn sharing(log: AppliedLog) -> Self {
        Records {
            applied: BTreeMap::new(),
            answers: BTreeMap::new(),
            stalled: Arc::default(),
            log,
        }
    }
}

impl<A: Clone> Records<A> {
    /// The recorder a group's machine writes to (opened again after each restart).
    pub(crate) fn recorder(&mut self, group: GroupId) -> Recorder<A> {
        Recorder {
            group,
            applied: Arc::clone(self.applied.entry(group).or_default()),
            answers: Arc::clone(self.answers.entry(group).or_default()),
            stalled: Arc::clone(&self.stalled),
            log: Arc::clone(&self.log),
        }
    }

    /// The payloads the group applied, by index.
    pub(crate) fn state(&self, group: GroupId) -> Vec<(u64, Bytes)> {
        self.applied.get(&group).map_or_else(Vec::new, |a| {
            guard(a).iter().map(|(i, p)| (*i, p.clone())).collect()
        })
    }

    /// What the node answered for the entry it applied at `index` of `group`.
    pub(crate) fn answer(&self, group: GroupId, index: u64) -> Option<A> {
        self.answers
            .get(&group)
            .and_then(|a| guard(a).get(&index).cloned())
    }

    /// A machine stopped applying after a failed write (until the node restarts).
    pub(crate) fn stalled(&self) -> bool {
        self.stalled.load(Ordering::Acquire)
    }

    /// A machine of this node stopped (its store could not take what it was given).
    pub(crate) fn stall(&self) {
        self.stalled.store(true, Ordering::Release);
    }

    /// The node restarted: its machines apply again.
    pub(crate) fn restarted(&self) {
        self.stalled.store(false, Ordering::Release);
    }
}

/// Where one group's machine records.
#[derive(Debug)]
pub(crate) struct Recorder<A> {
    group: GroupId,
    applied: Shared<BTreeMap<u64, Bytes>>,
    answers: Shared<BTreeMap<u64, A>>,
    stalled: Arc<AtomicBool>,
    log: AppliedLog,
}

impl<A> Recorder<A> {
    /// The machine stopped applying after a failed write.
    pub(crate) fn stall(&self) {
        self.stalled.store(true, Ordering::Release);
    }
}

/// A machine's outcome as the answer its client gets (`None`: no client's entry).
pub(crate) type Judge<O, A> = Box<dyn Fn(&LogEntry, O, &Recorder<A>) -> Option<A> + Send>;

/// A server state machine whose applies are recorded.
pub(crate) struct Recording<M: StateMachine, A> {
    inner: M,
    recorder: Recorder<A>,
    judge: Judge<M::Outcome, A>,
}

impl<M: StateMachine, A> Recording<M, A> {
    pub(crate) fn new(inner: M, recorder: Recorder<A>, judge: Judge<M::Outcome, A>) -> Self {
        Recording {
            inner,
            recorder,
            judge,
        }
    }
}

impl<M: StateMachine, A> fmt::Debug for Recording<M, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recording").finish_non_exhaustive()
    }
}

impl<M: StateMachine, A: Send + 'static> StateMachine for Recording<M, A> {
    type Outcome = u64;

    fn applied(&self) -> SnapshotMeta {
        self.inner.applied()
    }

    fn apply(&mut self, entry: &LogEntry) -> u64 {
        let outcome = self.inner.apply(entry);
        if !entry.data.is_empty() {
            let mut applied = guard(&self.recorder.applied);
            if let Some(before) = applied.insert(entry.index, entry.data.clone()) {
                // Applied again after a restart: the same bytes.
                assert_eq!(before, entry.data, "entry {} changed", entry.index);
            }
            guard(&self.recorder.log)
                .entry(self.recorder.group)
                .or_default()
                .entry(entry.index)
                .or_insert_with(|| entry.data.clone());
        }
        if let Some(answer) = (self.judge)(entry, outcome, &self.recorder) {
            guard(&self.recorder.answers).insert(entry.index, answer);
        }
        entry.index
    }

    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        self.inner.snapshot()
    }

    fn snapshot_after(&self, log_start: SnapshotMeta) -> Result<Snapshot, StoreError> {
        self.inner.snapshot_after(log_start)
    }

    fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        self.inner.install_snapshot(snapshot)?;
        // The snapshot stands for every entry through its index: the record shows them.
        let log = guard(&self.recorder.log);
        if let Some(entries) = log.get(&self.recorder.group) {
            let mut applied = guard(&self.recorder.applied);
            for (index, data) in entries.range(..=snapshot.meta.index) {
                applied.entry(*index).or_insert_with(|| data.clone());
            }
        }
        Ok(())
    }

    fn entry_timestamp(&self, entry: &LogEntry) -> Option<u64> {
        self.inner.entry_timestamp(entry)
    }

    fn compactable_through(&mut self, now_us: u64) -> Option<u64> {
        self.inner.compactable_through(now_us)
    }

    fn health(&self) -> Result<(), StoreError> {
        self.inner.health()
    }
}

/// Every member answered alike wherever more than one applied the same entry: applying is
/// deterministic, so a client's answer never depends on the member it asked. Answers
/// `comparable` rejects (a write this member's disk failed) are skipped. Returns how many
/// answers were compared.
pub(crate) fn answers_agree<A: PartialEq + Clone + fmt::Debug>(
    members: &[(NodeId, &Records<A>)],
    comparable: impl Fn(&A) -> bool,
) -> Result<u64, String> {
    let mut first: BTreeMap<(GroupId, u64), (NodeId, A)> = BTreeMap::new();
    let mut compared = 0;
    for (node, records) in members {
        for (group, answers) in &records.answers {
            for (index, answer) in guard(answers).iter().filter(|(_, a)| comparable(a)) {
                match first.get(&(*group, *index)) {
                    None => {
                        first.insert((*group, *index), (*node, answer.clone()));
                    }
                    Some((_, seen)) if seen == answer => compared += 1,
                    Some((other, seen)) => {
                        return Err(format!(
                            "{group} index {index}: node {node} answered {answer:?}, node {other} \
                             {seen:?}"
                        ))
                    }
                }
            }
        }
    }
    Ok(compared)
}

/// The one view every member must hold, from each member's `views`: the first node's view,
/// or where a member differs.
pub(crate) fn agree<K: Ord + fmt::Debug, V: PartialEq + fmt::Debug>(
    views: Vec<(NodeId, BTreeMap<K, V>)>,
) -> Result<BTreeMap<K, V>, String> {
    let mut views = views.into_iter();
    let (first_node, first) = views.next().ok_or("no member")?;
    for (node, view) in views {
        let keys = first.keys().chain(view.keys());
        if let Some(key) = keys.into_iter().find(|k| first.get(*k) != view.get(*k)) {
            return Err(format!(
                "{key:?}: node {node} holds {:?}, node {first_node} {:?}",
                view.get(key),
                first.get(key)
            ));
        }
    }
    Ok(first)
}
