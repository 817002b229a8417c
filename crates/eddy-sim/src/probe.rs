//! A see-through wrapper around every store the simulator opens: it forwards each call and
//! records what the checker needs to know without trusting the node's word for it.
//!
//! * Which entries are durable on this member (updated when the store reports an append
//!   durable, reset by a snapshot, reread from the store when it is reopened), so the checker
//!   can ask whether an entry was on a majority's disks when it was applied or acknowledged.
//! * Every entry applied and every snapshot installed, in order, for the continuous checks.
//! * The last entry applied, which a proposal's success callback reads: the engine calls it
//!   right after applying the proposal's entry.
//! * The last hard state saved (terms matter when deciding whether a data loss is survivable).
//!
//! It works over any [`GroupStore`], so real stores get the same checks.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use eddy_consensus::{
    Durable, EntryKind, GroupStore, HardState, LogEntry, NodeId, Snapshot, SnapshotMeta,
    StoreError, WrapStore,
};

/// The entries a member has on stable storage, as far as its store reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DurableLog {
    /// Entries up to here are covered by a snapshot (committed by definition).
    base: SnapshotMeta,
    /// Terms of the durable entries after `base.index`.
    terms: Vec<u64>,
}

impl DurableLog {
    /// What a (re)opened store holds durably.
    fn read<O: Send + 'static>(store: &dyn GroupStore<Outcome = O>) -> Self {
        let base = store.snapshot_meta();
        let terms = (store.first_index()..=store.last_index())
            .map(|i| store.term(i).unwrap_or(0))
            .collect();
        DurableLog { base, terms }
    }

    /// Entries from `first` on became durable (replacing any at or after `first`).
    fn append(&mut self, first: u64, terms: &[u64]) {
        if first <= self.base.index {
            // Only possible for entries a snapshot already covers: nothing to learn.
            return;
        }
        let keep = usize::try_from(first - self.base.index - 1).expect("small logs");
        if keep > self.terms.len() {
            // A gap would break the store's contract; the entries are not counted.
            return;
        }
        self.terms.truncate(keep);
        self.terms.extend_from_slice(terms);
    }

    /// Whether the entry (`index`, `term`) is durable here (a snapshot covers it, or the log
    /// holds it with that term).
    pub fn has(&self, index: u64, term: u64) -> bool {
        if index <= self.base.index {
            return true;
        }
        let at = usize::try_from(index - self.base.index - 1).expect("small logs");
        self.terms.get(at) == Some(&term)
    }

    /// The durable entry at `index`, if the log (not a snapshot) holds it: its term.
    pub fn term(&self, index: u64) -> Option<u64> {
        let at = index.checked_sub(self.base.index + 1)?;
        self.terms.get(usize::try_from(at).ok()?).copied()
    }

    /// The snapshot the log starts after.
    pub fn base(&self) -> SnapshotMeta {
        self.base
    }

    /// The last durable index.
    pub fn last(&self) -> u64 {
        self.base.index + self.terms.len() as u64
    }
}

/// Why losing the data of member `id` now is not survivable, given every member's durable
/// log and durable term (`members`: id, log, term), if it is not.
///
/// Raft with a fixed membership survives the loss of a member's disk only when the other
/// members alone hold every entry a majority holds (else a committed entry could be lost), and
/// when no other member is at a lower term than the lost one's (else an election in a term the
/// lost member voted in could win its vote a second time).
pub fn data_loss_hazard(members: &[(NodeId, DurableLog, u64)], id: NodeId) -> Option<String> {
    let majority = members.len() / 2 + 1;
    let term = members.iter().find(|(n, _, _)| *n == id)?.2;
    if let Some((other, _, t)) = members.iter().find(|(n, _, t)| *n != id && *t < term) {
        return Some(format!(
            "node {other} is at term {t}, behind node {id}'s {term}"
        ));
    }
    let from = members
        .iter()
        .map(|(_, l, _)| l.base().index)
        .min()
        .unwrap_or(0)
        + 1;
    let to = members.iter().map(|(_, l, _)| l.last()).max().unwrap_or(0);
    for index in from..=to {
        let terms: BTreeSet<u64> = members
            .iter()
            .filter_map(|(_, l, _)| l.term(index))
            .collect();
        for t in terms {
            let holders: Vec<NodeId> = members
                .iter()
                .filter(|(_, l, _)| l.has(index, t))
                .map(|(n, _, _)| *n)
                .collect();
            let others = holders.iter().filter(|n| **n != id).count();
            if holders.len() >= majority && others < majority {
                return Some(format!(
                    "entry {index} (term {t}) is durable only on {holders:?}"
                ));
            }
        }
    }
    None
}

/// Something the store did that the checker must see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// An entry was applied to the state machine.
    Applied {
        /// Its index.
        index: u64,
        /// Its term.
        term: u64,
        /// [`digest`] of its kind and payload.
        digest: u64,
    },
    /// A snapshot replaced the log and the state machine.
    Snapshot(SnapshotMeta),
}

/// What the probe of one (node, group) knows; shared between the probe and the simulator.
#[derive(Debug, Default)]
pub struct ProbeState {
    /// Durable entries on this member's disk.
    pub durable: DurableLog,
    /// Last hard state saved.
    pub hard: HardState,
    /// Applies and snapshots since the simulator last looked.
    pub observed: Vec<Observation>,
    /// The last entry applied (index, term, payload): a success callback reads it.
    pub last_applied: Option<(u64, u64, Bytes)>,
    /// Durability reports of appends made before this number are stale (a snapshot or a
    /// restart came between).
    generation: u64,
}

/// The simulator's side of a probe.
#[derive(Debug, Clone, Default)]
pub struct ProbeHandle(Arc<Mutex<ProbeState>>);

impl ProbeHandle {
    /// Locks the shared state.
    pub fn lock(&self) -> MutexGuard<'_, ProbeState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The member lost its data directory: nothing is durable any more.
    pub fn wipe(&self) {
        let mut s = self.lock();
        s.generation += 1;
        s.durable = DurableLog::default();
        s.hard = HardState::default();
        s.last_applied = None;
    }

    /// Wraps a freshly opened store, rereading what it holds.
    pub fn wrap<O: Send + 'static>(&self, store: Box<dyn GroupStore<Outcome = O>>) -> Probe<O> {
        {
            let mut s = self.lock();
            s.generation += 1;
            s.durable = DurableLog::read(&*store);
            s.hard = store.hard_state();
            s.last_applied = None;
        }
        Probe {
            inner: store,
            shared: self.clone(),
        }
    }
}

/// The digest of an entry's kind and payload (FNV-1a, 64 bits).
pub fn digest(kind: EntryKind, data: &[u8]) -> u64 {
    let mut h = crate::hash::Fnv::new();
    h.write(&[kind.code()]);
    h.write(data);
    h.finish()
}

/// A store wrapped by the simulator.
pub struct Probe<O> {
    inner: Box<dyn GroupStore<Outcome = O>>,
    shared: ProbeHandle,
}

impl<O> std::fmt::Debug for Probe<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe").finish_non_exhaustive()
    }
}

impl<O: Send + 'static> WrapStore for Probe<O> {
    type Inner = dyn GroupStore<Outcome = O>;

    fn inner(&self) -> &Self::Inner {
        &*self.inner
    }

    fn inner_mut(&mut self) -> &mut Self::Inner {
        &mut *self.inner
    }

    fn wrap_append(&mut self, entries: Vec<LogEntry>, durable: Durable) {
        let first = entries.first().map_or(0, |e| e.index);
        let terms: Vec<u64> = entries.iter().map(|e| e.term).collect();
        let shared = self.shared.clone();
        let generation = shared.lock().generation;
        self.inner.append(
            entries,
            Box::new(move |result| {
                if result.is_ok() && first > 0 {
                    let mut s = shared.lock();
                    if s.generation == generation {
                        s.durable.append(first, &terms);
                    }
                }
                durable(result);
            }),
        );
    }

    fn wrap_save_hard_state(&mut self, state: HardState, sync: bool) -> Result<(), StoreError> {
        self.inner.save_hard_state(state, sync)?;
        self.shared.lock().hard = state;
        Ok(())
    }

    fn wrap_apply(&mut self, entry: &LogEntry) -> O {
        let outcome = self.inner.apply(entry);
        let mut s = self.shared.lock();
        s.observed.push(Observation::Applied {
            index: entry.index,
            term: entry.term,
            digest: digest(entry.kind, &entry.data),
        });
        s.last_applied = Some((entry.index, entry.term, entry.data.clone()));
        outcome
    }

    fn wrap_install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        self.inner.install_snapshot(snapshot)?;
        let mut s = self.shared.lock();
        s.generation += 1;
        s.durable = DurableLog {
            base: snapshot.meta,
            terms: Vec::new(),
        };
        s.observed.push(Observation::Snapshot(snapshot.meta));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_consensus::testing::{MemDisk, MemStore};

    fn entry(index: u64, term: u64) -> LogEntry {
        LogEntry {
            index,
            term,
            kind: EntryKind::Normal,
            data: Bytes::from(vec![u8::try_from(index).unwrap()]),
        }
    }

    #[test]
    fn durability_is_learned_from_reports_and_forgotten_by_a_snapshot() {
        let disk = MemDisk::new();
        let mut store = MemStore::open(disk.clone());
        store.hold_syncs();
        let handle = ProbeHandle::default();
        let mut probe = handle.wrap::<u64>(Box::new(store));
        probe.append(vec![entry(1, 1), entry(2, 1)], Box::new(|r| r.unwrap()));
        assert!(
            !handle.lock().durable.has(1, 1),
            "not durable before the sync"
        );
        disk.flush();
        assert!(handle.lock().durable.has(2, 1));
        probe.append(vec![entry(2, 2), entry(3, 2)], Box::new(|r| r.unwrap()));
        disk.flush();
        let log = handle.lock().durable.clone();
        assert!(log.has(2, 2) && !log.has(2, 1) && log.has(3, 2));
        assert_eq!(log.last(), 3);

        // A report for an append the snapshot superseded teaches nothing.
        probe.append(vec![entry(4, 2)], Box::new(|r| r.unwrap()));
        let snap = Snapshot {
            meta: SnapshotMeta { index: 10, term: 3 },
            data: Bytes::new(),
        };
        probe.install_snapshot(&snap).unwrap();
        let s = handle.lock();
        assert_eq!(s.durable.base(), snap.meta);
        assert_eq!(s.durable.last(), 10);
        assert!(
            s.durable.has(7, 99),
            "a snapshot covers everything before it"
        );
        assert_eq!(s.observed, [Observation::Snapshot(snap.meta)]);
    }

    fn log(base: u64, terms: &[u64]) -> DurableLog {
        DurableLog {
            base: SnapshotMeta {
                index: base,
                term: 1,
            },
            terms: terms.to_vec(),
        }
    }

    #[test]
    fn a_data_loss_is_survivable_only_when_the_others_hold_every_majority_entry() {
        // Entry 3 (term 2) is on nodes 1 and 2 only: a majority of three, so losing either
        // loses a committed entry; losing node 3 loses nothing.
        let members = [
            (1, log(0, &[1, 1, 2]), 2),
            (2, log(0, &[1, 1, 2]), 2),
            (3, log(0, &[1, 1]), 2),
        ];
        let why = data_loss_hazard(&members, 1).unwrap();
        assert!(why.contains("entry 3 (term 2)"), "{why}");
        assert!(data_loss_hazard(&members, 2).is_some());
        assert_eq!(data_loss_hazard(&members, 3), None);
        // A snapshot covers everything before it, whatever the term.
        let members = [
            (1, log(3, &[]), 2),
            (2, log(0, &[1, 1, 2]), 2),
            (3, log(3, &[]), 2),
        ];
        assert_eq!(data_loss_hazard(&members, 2), None);
        // A member behind the lost one's term could still run an election it voted in.
        let members = [
            (1, log(0, &[1]), 3),
            (2, log(0, &[1]), 2),
            (3, log(0, &[1]), 3),
        ];
        let why = data_loss_hazard(&members, 1).unwrap();
        assert!(why.contains("node 2 is at term 2"), "{why}");
        assert_eq!(data_loss_hazard(&members, 2), None);
    }

    #[test]
    fn reopening_rereads_the_disk_and_applies_are_recorded_in_order() {
        let disk = MemDisk::new();
        let handle = ProbeHandle::default();
        let mut probe = handle.wrap::<u64>(Box::new(MemStore::open(disk.clone())));
        probe.append(vec![entry(1, 1), entry(2, 1)], Box::new(|r| r.unwrap()));
        assert_eq!(probe.apply(&entry(1, 1)), 1);
        assert_eq!(probe.apply(&entry(2, 1)), 2);
        probe
            .save_hard_state(
                HardState {
                    term: 1,
                    vote: 2,
                    commit: 2,
                },
                true,
            )
            .unwrap();
        {
            let s = handle.lock();
            assert_eq!(s.observed.len(), 2);
            assert_eq!(s.last_applied.as_ref().map(|a| (a.0, a.1)), Some((2, 1)));
            assert_eq!(s.hard.vote, 2);
        }
        drop(probe);
        handle.wipe();
        assert_eq!(handle.lock().durable.last(), 0);
        let _probe = handle.wrap::<u64>(Box::new(MemStore::open(disk)));
        let s = handle.lock();
        assert_eq!(s.durable.last(), 2);
        assert_eq!(s.durable.term(2), Some(1));
        assert_eq!(s.hard.term, 1);
    }
}
