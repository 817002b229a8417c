//! The guarantees a run is checked against, as it goes and at its end.
//!
//! Continuously, at every step:
//! * **agreement**: whatever any member applies at an index (in any of its lives) is the same
//!   entry, same term and same bytes, as every other member applied there;
//! * **commitment**: an entry is applied (and so acknowledged) only while it is durable on a
//!   majority of the members' disks, as the stores reported it; this is also how the checker
//!   sees that a leader which lost its majority acknowledges nothing;
//! * **acknowledgements**: a success names the entry just applied, which carries the
//!   proposal's own id; no two operations are acknowledged at one index;
//! * **monotonicity**: within a node's life, its applied index advances one entry at a time
//!   (or jumps forward to a snapshot) and its commit index never goes back;
//! * **one leader per term** and group;
//! * **membership** (when members change): every member that applies the change at an index
//!   applies the same membership there; a member the run marks as never to vote (a learner
//!   that never caught up) is never made a voter; the entries committed are durable on a
//!   majority of the voters (both halves of a joint configuration) of a configuration in
//!   force before them, so a node that was never a voter, or was removed before, is not
//!   counted by any later configuration; the simulator adds that a leader is a voter of its
//!   own configuration.
//!
//! At the end, once every member of every group has caught up:
//! * every member holds the same state;
//! * every acknowledged operation is in it at its acknowledged index; an operation appears at
//!   most as many times as it was proposed without a certain refusal (so exactly once when it
//!   was never retried after an unknown outcome), and never unless it was proposed;
//! * real-time order: an operation first proposed after another was acknowledged comes after
//!   it in the log.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use bytes::Bytes;
use eddy_consensus::{GroupId, Membership, NodeId, SnapshotMeta};

use crate::config::Millis;
use crate::workload::OpId;

/// One acknowledgement given to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ack {
    index: u64,
    at: Millis,
}

/// What the checker knows of an operation.
#[derive(Debug, Clone)]
struct OpRecord {
    group: GroupId,
    /// When a node first received it.
    first_proposed: Millis,
    /// Attempts that reached a node without a certain refusal.
    possible: u64,
    acks: Vec<Ack>,
}

/// Counts the end-of-run check reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FinalCounts {
    /// Entries in the final states (all groups, one member's copy).
    pub entries: u64,
    /// Operations applied more than once (each a retry after an unknown outcome).
    pub duplicates: u64,
    /// Operations applied although no client was told.
    pub unacknowledged_applied: u64,
}

/// The run's history and the invariants over it.
#[derive(Debug)]
pub struct Checker {
    /// The founding voters of every group.
    founders: Vec<NodeId>,
    /// Per group, each configuration applied, by the index of its change: (voters, outgoing
    /// voters). Index 0 is the founders'.
    configs: BTreeMap<GroupId, BTreeMap<u64, Config>>,
    /// Nodes that must never be made voters.
    never_voters: BTreeSet<NodeId>,
    /// Per group, the entry applied at each index: (term, digest).
    committed: BTreeMap<GroupId, Vec<Option<(u64, u64)>>>,
    /// Per (node, group), the applied index in the node's current life.
    applied: BTreeMap<(NodeId, GroupId), u64>,
    /// Per (node, group), the highest commit index seen in the node's current life.
    commit: BTreeMap<(NodeId, GroupId), u64>,
    /// The leader of each (group, term).
    leaders: BTreeMap<(GroupId, u64), NodeId>,
    ops: BTreeMap<OpId, OpRecord>,
    /// Per group, the operation acknowledged at each index.
    acked_at: BTreeMap<GroupId, BTreeMap<u64, OpId>>,
}

type Check = Result<(), String>;

/// A configuration's voters and, while joint, its outgoing voters.
type Config = (Vec<NodeId>, Vec<NodeId>);

/// Whether `durable` holds a majority of `voters` (an empty list is no constraint).
fn majority_of(voters: &[NodeId], durable: &[NodeId]) -> bool {
    voters.is_empty() || voters.iter().filter(|v| durable.contains(v)).count() > voters.len() / 2
}

impl Checker {
    /// A checker for a cluster whose groups start with these voters.
    pub fn new(founders: Vec<NodeId>) -> Self {
        Checker {
            founders,
            configs: BTreeMap::new(),
            never_voters: BTreeSet::new(),
            committed: BTreeMap::new(),
            applied: BTreeMap::new(),
            commit: BTreeMap::new(),
            leaders: BTreeMap::new(),
            ops: BTreeMap::new(),
            acked_at: BTreeMap::new(),
        }
    }

    /// Whether an entry at `index` of `group` held by `durable` is durable on a majority of
    /// the voters of a configuration in force before it (a leader commits with the
    /// configuration it applied last, which came before the entry; any of them is accepted).
    fn quorum(&self, group: GroupId, index: u64, durable: &[NodeId]) -> bool {
        let founders = (self.founders.clone(), Vec::new());
        let mut configs: Vec<&Config> = vec![&founders];
        if let Some(history) = self.configs.get(&group) {
            configs.extend(history.range(..index).map(|(_, c)| c));
        }
        configs.iter().any(|(voters, outgoing)| {
            majority_of(voters, durable) && majority_of(outgoing, durable)
        })
    }

    /// Describes the configurations before `index` of `group`, for failure reports.
    fn configs_before(&self, group: GroupId, index: u64) -> String {
        let mut out = format!("founders {:?}", self.founders);
        for (at, (voters, outgoing)) in self
            .configs
            .get(&group)
            .into_iter()
            .flat_map(|h| h.range(..index))
        {
            let _ = write!(out, "; at {at}: voters {voters:?} outgoing {outgoing:?}");
        }
        out
    }

    /// The last membership applied in `group` (voters, outgoing voters), if it ever changed.
    pub fn latest_config(&self, group: GroupId) -> Option<(Vec<NodeId>, Vec<NodeId>)> {
        let (_, config) = self.configs.get(&group)?.last_key_value()?;
        Some(config.clone())
    }

    /// `node` must never be made a voter (a learner that cannot catch up).
    pub fn never_voter(&mut self, node: NodeId) {
        self.never_voters.insert(node);
    }

    /// A node applied (or took from a snapshot) a group's membership.
    pub fn membership(&mut self, node: NodeId, group: GroupId, m: &Membership) -> Check {
        if let Some(n) = m
            .voters
            .iter()
            .chain(&m.voters_outgoing)
            .find(|n| self.never_voters.contains(n))
        {
            return Err(format!(
                "{group} on node {node}: node {n}, a learner that never caught up, was made a \
                 voter at index {}: {m:?}",
                m.index
            ));
        }
        if m.index == 0 {
            return Ok(());
        }
        let mut voters = m.voters.clone();
        voters.sort_unstable();
        let mut outgoing = m.voters_outgoing.clone();
        outgoing.sort_unstable();
        let config = (voters, outgoing);
        let history = self.configs.entry(group).or_default();
        match history.get(&m.index) {
            Some(known) if *known != config => Err(format!(
                "{group}: node {node} applied members {config:?} at index {} where another \
                 member applied {known:?}",
                m.index
            )),
            Some(_) => Ok(()),
            None => {
                history.insert(m.index, config);
                Ok(())
            }
        }
    }

    /// The entry applied at `index` of `group` so far (term, digest).
    pub fn committed(&self, group: GroupId, index: u64) -> Option<(u64, u64)> {
        let at = usize::try_from(index.checked_sub(1)?).ok()?;
        self.committed.get(&group)?.get(at).copied().flatten()
    }

    /// A node (re)opened a group whose state machine starts at `applied`.
    pub fn opened(&mut self, node: NodeId, group: GroupId, applied: u64) {
        self.applied.insert((node, group), applied);
        self.commit.insert((node, group), 0);
    }

    /// A node applied an entry that the members `durable_on` hold durably.
    pub fn applied(
        &mut self,
        node: NodeId,
        group: GroupId,
        (index, term, digest): (u64, u64, u64),
        durable_on: &[NodeId],
    ) -> Check {
        let cursor = self.applied.entry((node, group)).or_insert(0);
        if index != *cursor + 1 {
            return Err(format!(
                "{group} on node {node}: applied index {index} after {cursor} (not the next one)"
            ));
        }
        *cursor = index;
        if !self.quorum(group, index, durable_on) {
            return Err(format!(
                "{group} on node {node}: applied index {index} (term {term}) while only \
                 {durable_on:?} hold it durably, no majority of any configuration before it \
                 ({})",
                self.configs_before(group, index)
            ));
        }
        let log = self.committed.entry(group).or_default();
        let at = usize::try_from(index - 1).expect("small logs");
        if log.len() <= at {
            log.resize(at + 1, None);
        }
        match log[at] {
            None => log[at] = Some((term, digest)),
            Some(known) if known == (term, digest) => {}
            Some((t, _)) => {
                return Err(format!(
                    "{group}: node {node} applied (term {term}, digest {digest:#x}) at index \
                     {index} where another member applied an entry of term {t}: committed \
                     logs diverge"
                ))
            }
        }
        Ok(())
    }

    /// A node installed a snapshot.
    pub fn snapshot(&mut self, node: NodeId, group: GroupId, meta: SnapshotMeta) -> Check {
        let cursor = self.applied.entry((node, group)).or_insert(0);
        if meta.index < *cursor {
            return Err(format!(
                "{group} on node {node}: installed a snapshot at {} behind its applied index {cursor}",
                meta.index
            ));
        }
        *cursor = meta.index;
        match self.committed(group, meta.index) {
            Some((term, _)) if term != meta.term => Err(format!(
                "{group} on node {node}: snapshot at index {} has term {}, the committed entry \
                 there has term {term}",
                meta.index, meta.term
            )),
            _ => Ok(()),
        }
    }

    /// A node's commit index for a group, as it reports it now.
    pub fn commit_index(&mut self, node: NodeId, group: GroupId, commit: u64) -> Check {
        let seen = self.commit.entry((node, group)).or_insert(0);
        if commit < *seen {
            return Err(format!(
                "{group} on node {node}: commit index went back from {seen} to {commit}"
            ));
        }
        *seen = commit;
        Ok(())
    }

    /// A node became leader of a group in a term.
    pub fn leader(&mut self, group: GroupId, term: u64, node: NodeId) -> Check {
        match self.leaders.insert((group, term), node) {
            Some(other) if other != node => Err(format!(
                "{group}: nodes {other} and {node} both led term {term}"
            )),
            _ => Ok(()),
        }
    }

    /// A node received an attempt of an operation (before any answer).
    pub fn proposed(&mut self, op: OpId, group: GroupId, at: Millis) {
        let record = self.ops.entry(op).or_insert(OpRecord {
            group,
            first_proposed: at,
            possible: 0,
            acks: Vec::new(),
        });
        record.possible += 1;
    }

    /// The attempt certainly did not enter the log (refused on the spot, or superseded).
    pub fn refused(&mut self, op: OpId) {
        if let Some(record) = self.ops.get_mut(&op) {
            record.possible = record.possible.saturating_sub(1);
        }
    }

    /// A node acknowledged `op` with the entry it just applied: `(index, term)` carrying the
    /// operation `carried` (as decoded from its payload), held durably by the members
    /// `durable_on` at that moment (no majority: a leader acknowledged without one).
    pub fn acked(
        &mut self,
        op: OpId,
        node: NodeId,
        (index, term): (u64, u64),
        carried: Option<OpId>,
        durable_on: &[NodeId],
        at: Millis,
    ) -> Check {
        let Some(group) = self.ops.get(&op).map(|r| r.group) else {
            return Err(format!("node {node} acknowledged op {op}, never proposed"));
        };
        if !self.quorum(group, index, durable_on) {
            return Err(format!(
                "{group} on node {node}: op {op} acknowledged at index {index} while only \
                 {durable_on:?} hold it durably, no majority of any configuration before it \
                 ({})",
                self.configs_before(group, index)
            ));
        }
        let record = self.ops.get_mut(&op).expect("found above");
        if carried != Some(op) {
            return Err(format!(
                "{group} on node {node}: op {op} acknowledged with the entry at index {index}, \
                 which carries {carried:?}"
            ));
        }
        record.acks.push(Ack { index, at });
        match self.committed(group, index) {
            Some((t, _)) if t == term => {}
            other => {
                return Err(format!(
                    "{group} on node {node}: op {op} acknowledged at index {index} term {term}, \
                     but the committed entry there is {other:?}"
                ))
            }
        }
        let slot = self.acked_at.entry(group).or_default();
        match slot.insert(index, op) {
            Some(other) if other != op => Err(format!(
                "{group}: ops {other} and {op} both acknowledged at index {index}"
            )),
            _ => Ok(()),
        }
    }

    /// Operations acknowledged so far.
    pub fn acknowledged(&self) -> usize {
        self.ops.values().filter(|r| !r.acks.is_empty()).count()
    }

    /// The end-of-run check of one group: `states` holds each member's final state machine
    /// (payloads with their indexes); `op_id` finds an operation in a payload; `digest` is the
    /// entry digest of a payload.
    pub fn check_final(
        &self,
        group: GroupId,
        states: &[(NodeId, Vec<(u64, Bytes)>)],
        op_id: impl Fn(&[u8]) -> Option<OpId>,
        digest: impl Fn(&[u8]) -> u64,
    ) -> Result<FinalCounts, String> {
        let Some((first_node, reference)) = states.first() else {
            return Ok(FinalCounts::default());
        };
        same_final_states(group, *first_node, reference, &states[1..])?;
        let mut counts = FinalCounts::default();
        let mut seen: BTreeMap<OpId, Vec<u64>> = BTreeMap::new();
        for (index, payload) in reference {
            counts.entries += 1;
            match self.committed(group, *index) {
                Some((_, d)) if d == digest(payload) => {}
                other => {
                    return Err(format!(
                        "{group}: the final state holds a payload at index {index} that is not \
                         the entry committed there ({other:?})"
                    ))
                }
            }
            if let Some(op) = op_id(payload) {
                seen.entry(op).or_default().push(*index);
            }
        }
        for (op, indexes) in &seen {
            let Some(record) = self.ops.get(op) else {
                return Err(format!(
                    "{group}: op {op} is applied at {indexes:?} but was never proposed"
                ));
            };
            if record.group != group {
                return Err(format!(
                    "op {op} of {} is applied in {group} at {indexes:?}",
                    record.group
                ));
            }
            if indexes.len() as u64 > record.possible {
                return Err(format!(
                    "{group}: op {op} is applied {} times (at {indexes:?}) but only {} of its \
                     attempts could have entered the log",
                    indexes.len(),
                    record.possible
                ));
            }
            counts.duplicates += indexes.len() as u64 - 1;
            if record.acks.is_empty() {
                counts.unacknowledged_applied += 1;
            }
        }
        let mut acks: Vec<(Millis, u64)> = Vec::new();
        for (op, record) in self.ops.iter().filter(|(_, r)| r.group == group) {
            for ack in &record.acks {
                let held = seen.get(op).is_some_and(|at| at.contains(&ack.index));
                if !held {
                    return Err(format!(
                        "{group}: op {op} was acknowledged at index {} (time {} ms) but the \
                         final state holds it at {:?}",
                        ack.index,
                        ack.at,
                        seen.get(op)
                    ));
                }
                acks.push((ack.at, ack.index));
            }
        }
        // Real time: prefix maxima of acknowledged indexes, by acknowledgement time.
        acks.sort_unstable();
        let mut highest = Vec::with_capacity(acks.len());
        let mut max = 0;
        for &(_, index) in &acks {
            max = max.max(index);
            highest.push(max);
        }
        for (op, indexes) in &seen {
            let first = self.ops[op].first_proposed;
            let before = acks.partition_point(|&(at, _)| at < first);
            if before == 0 {
                continue;
            }
            let bound = highest[before - 1];
            let lowest = indexes.iter().copied().min().expect("seen at least once");
            if lowest <= bound {
                return Err(format!(
                    "{group}: op {op}, first proposed at {first} ms, is applied at index \
                     {lowest}, not after index {bound} acknowledged before it was proposed"
                ));
            }
        }
        Ok(counts)
    }
}

/// Whether every member's final state (`others`) equals `first_node`'s `reference`; if not,
/// where the first that differs does.
fn same_final_states(
    group: GroupId,
    first_node: NodeId,
    reference: &[(u64, Bytes)],
    others: &[(NodeId, Vec<(u64, Bytes)>)],
) -> Result<(), String> {
    for (node, state) in others {
        if state != reference {
            let at = state
                .iter()
                .zip(reference)
                .position(|(a, b)| a != b)
                .unwrap_or(state.len().min(reference.len()));
            let index_at = |s: &[(u64, Bytes)]| s.get(at).map(|(i, _)| *i);
            return Err(format!(
                "{group}: final states of nodes {first_node} and {node} differ at position \
                 {at} (lengths {} and {}; indexes there {:?} and {:?})",
                reference.len(),
                state.len(),
                index_at(reference),
                index_at(state)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: GroupId = GroupId(1);

    fn payload(op: OpId) -> Bytes {
        Bytes::from(op.to_le_bytes().to_vec())
    }

    fn op_id(p: &[u8]) -> Option<OpId> {
        Some(u64::from_le_bytes(p.try_into().ok()?))
    }

    fn digest(p: &[u8]) -> u64 {
        crate::probe::digest(eddy_consensus::EntryKind::Normal, p)
    }

    /// Applies ops (index i+1 = ops[i]) on every member of 3, term 1, durable everywhere.
    fn applied_everywhere(c: &mut Checker, ops: &[OpId]) {
        for node in 1..=3 {
            c.opened(node, G, 0);
            for (i, op) in ops.iter().enumerate() {
                let entry = (i as u64 + 1, 1, digest(&payload(*op)));
                c.applied(node, G, entry, &[1, 2, 3]).unwrap();
            }
        }
    }

    fn state(ops: &[OpId]) -> Vec<(u64, Bytes)> {
        ops.iter()
            .enumerate()
            .map(|(i, op)| (i as u64 + 1, payload(*op)))
            .collect()
    }

    fn everywhere(ops: &[OpId]) -> Vec<(NodeId, Vec<(u64, Bytes)>)> {
        (1..=3).map(|n| (n, state(ops))).collect()
    }

    #[test]
    fn a_clean_history_passes_and_counts_what_it_saw() {
        let mut c = Checker::new(vec![1, 2, 3]);
        for op in [10, 11, 12] {
            c.proposed(op, G, op);
        }
        applied_everywhere(&mut c, &[10, 11, 12]);
        c.acked(10, 1, (1, 1), Some(10), &[1, 2, 3], 20).unwrap();
        c.acked(12, 1, (3, 1), Some(12), &[1, 2, 3], 30).unwrap();
        let counts = c
            .check_final(G, &everywhere(&[10, 11, 12]), op_id, digest)
            .unwrap();
        assert_eq!(
            counts,
            FinalCounts {
                entries: 3,
                duplicates: 0,
                unacknowledged_applied: 1
            }
        );
        assert_eq!(c.acknowledged(), 2);
    }

    #[test]
    fn divergence_and_applies_without_a_majority_are_caught_at_once() {
        let mut c = Checker::new(vec![1, 2, 3]);
        c.opened(1, G, 0);
        c.opened(2, G, 0);
        c.applied(1, G, (1, 1, 0xAA), &[1, 2]).unwrap();
        let e = c.applied(2, G, (1, 2, 0xBB), &[1, 2]).unwrap_err();
        assert!(e.contains("diverge"), "{e}");
        let e = c.applied(1, G, (2, 1, 0xCC), &[1]).unwrap_err();
        assert!(e.contains("only [1] hold it"), "{e}");
        let e = c.applied(1, G, (5, 1, 0xDD), &[1, 2, 3]).unwrap_err();
        assert!(e.contains("not the next one"), "{e}");
        let e = c
            .snapshot(2, G, SnapshotMeta { index: 1, term: 9 })
            .unwrap_err();
        assert!(e.contains("term 9"), "{e}");
        c.commit_index(1, G, 5).unwrap();
        assert!(c.commit_index(1, G, 4).is_err());
        c.opened(1, G, 0);
        c.commit_index(1, G, 4).unwrap();
        c.leader(G, 3, 1).unwrap();
        c.leader(G, 3, 1).unwrap();
        assert!(c.leader(G, 3, 2).unwrap_err().contains("both led"));
    }

    #[test]
    fn membership_changes_move_the_majority_and_are_checked() {
        let m = |index, voters: Vec<NodeId>, outgoing: Vec<NodeId>| Membership {
            voters,
            voters_outgoing: outgoing,
            index,
            ..Membership::default()
        };
        let mut c = Checker::new(vec![1, 2, 3]);
        c.never_voter(5);
        for node in 1..=4 {
            c.opened(node, G, 0);
        }
        // Node 4 never voted yet: it does not make a majority of the founders.
        let e = c.applied(1, G, (1, 1, 0xA), &[1, 4]).unwrap_err();
        assert!(e.contains("no majority"), "{e}");
        c.applied(2, G, (1, 1, 0xA), &[1, 2, 4]).unwrap();
        // Joint {1,2,3,4} / {1,2,3} at 2, then {1,2,3,4} at 3: agreed by every member.
        c.membership(1, G, &m(2, vec![1, 2, 3, 4], vec![1, 2, 3]))
            .unwrap();
        c.membership(2, G, &m(2, vec![1, 2, 3, 4], vec![1, 2, 3]))
            .unwrap();
        let e = c
            .membership(3, G, &m(2, vec![1, 2, 3], vec![]))
            .unwrap_err();
        assert!(e.contains("another member applied"), "{e}");
        c.membership(1, G, &m(3, vec![1, 2, 3, 4], vec![])).unwrap();
        c.membership(1, G, &m(5, vec![2, 3, 4], vec![])).unwrap();
        // After the removal of 1, {3, 4} is a majority of {2, 3, 4}.
        for i in 2..=6 {
            c.applied(2, G, (i, 1, 0xA), &[1, 2, 3, 4]).unwrap();
        }
        c.applied(3, G, (1, 1, 0xA), &[1, 2, 3]).unwrap();
        c.applied(2, G, (7, 1, 0xA), &[3, 4]).unwrap();
        // The learner that never caught up never becomes a voter.
        let e = c
            .membership(2, G, &m(8, vec![2, 3, 5], vec![]))
            .unwrap_err();
        assert!(e.contains("never caught up"), "{e}");
    }

    #[test]
    fn bad_acknowledgements_are_caught_at_once() {
        let mut c = Checker::new(vec![1, 2, 3]);
        c.proposed(1, G, 0);
        c.proposed(2, G, 0);
        applied_everywhere(&mut c, &[1, 2]);
        assert!(
            c.acked(7, 1, (1, 1), Some(7), &[1, 2, 3], 5).is_err(),
            "never proposed"
        );
        assert!(
            c.acked(1, 1, (2, 1), Some(2), &[1, 2, 3], 5).is_err(),
            "wrong entry"
        );
        assert!(
            c.acked(1, 1, (1, 2), Some(1), &[1, 2, 3], 5).is_err(),
            "wrong term"
        );
        assert!(
            c.acked(2, 1, (2, 1), Some(2), &[1], 5)
                .unwrap_err()
                .contains("only [1] hold it"),
            "acknowledged without a majority"
        );
        c.acked(2, 1, (2, 1), Some(2), &[1, 2, 3], 5).unwrap();
        // Another op at an acknowledged index: its payload would have to be op 2's.
        let e = c.acked(1, 2, (2, 1), Some(1), &[1, 2, 3], 6).unwrap_err();
        assert!(
            e.contains("both acknowledged") || e.contains("carries"),
            "{e}"
        );
    }

    #[test]
    fn lost_duplicated_and_reordered_acknowledgements_fail_the_final_check() {
        // Lost: op 2 acknowledged at index 2, but the final state ends at index 1.
        let mut c = Checker::new(vec![1, 2, 3]);
        c.proposed(1, G, 0);
        c.proposed(2, G, 0);
        applied_everywhere(&mut c, &[1, 2]);
        c.acked(2, 1, (2, 1), Some(2), &[1, 2, 3], 5).unwrap();
        let e = c
            .check_final(G, &everywhere(&[1]), op_id, digest)
            .unwrap_err();
        assert!(e.contains("acknowledged at index 2"), "{e}");

        // Members disagree.
        let mut states = everywhere(&[1, 2]);
        states[2].1.pop();
        let e = c.check_final(G, &states, op_id, digest).unwrap_err();
        assert!(e.contains("differ"), "{e}");

        // Applied twice although proposed once; allowed once a second attempt could have
        // entered the log.
        let mut c = Checker::new(vec![1, 2, 3]);
        c.proposed(1, G, 0);
        applied_everywhere(&mut c, &[1, 1]);
        let e = c
            .check_final(G, &everywhere(&[1, 1]), op_id, digest)
            .unwrap_err();
        assert!(e.contains("applied 2 times"), "{e}");
        c.proposed(1, G, 9);
        let counts = c
            .check_final(G, &everywhere(&[1, 1]), op_id, digest)
            .unwrap();
        assert_eq!(counts.duplicates, 1);
        c.refused(1);
        assert!(c
            .check_final(G, &everywhere(&[1, 1]), op_id, digest)
            .is_err());

        // Real time: op 2 is proposed after op 1 was acknowledged but sits before it.
        let mut c = Checker::new(vec![1, 2, 3]);
        c.proposed(1, G, 0);
        c.proposed(2, G, 50);
        applied_everywhere(&mut c, &[2, 1]);
        c.acked(1, 1, (2, 1), Some(1), &[1, 2, 3], 40).unwrap();
        let e = c
            .check_final(G, &everywhere(&[2, 1]), op_id, digest)
            .unwrap_err();
        assert!(e.contains("not after index 2"), "{e}");

        // A payload that is not the committed entry at its index.
        let mut c = Checker::new(vec![1, 2, 3]);
        c.proposed(1, G, 0);
        applied_everywhere(&mut c, &[1]);
        let e = c
            .check_final(G, &everywhere(&[3]), op_id, digest)
            .unwrap_err();
        assert!(e.contains("not the entry committed"), "{e}");
    }
}
