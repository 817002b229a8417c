//! The membership driver: what an operator's `eddy cluster add/remove/replace` does to the
//! simulated cluster, step by step, as the server's metadata leader runs it
//! (`crates/eddy-server/src/cluster/streams/membership.rs`): passes over the groups every
//! [`PASS_MS`], each moving every group one step on its current leader (a learner first, a
//! voter once at most [`PROMOTE_WITHIN`] entries behind; a removal once, the leader handing
//! its leadership over first when it is the member removed); a change the engine dropped
//! because another was in flight is simply proposed again at the next pass.
//!
//! Only the engine's own `propose_membership` changes members: the driver chooses when and
//! what, never how.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use eddy_consensus::{GroupId, MemberChange, NodeId, Role};

use super::{Phase, Service, Sim, Step};
use crate::config::{Scenario, SimConfig};
use crate::report::MembershipCounts;
use crate::rng::SimRng;
use crate::store::StoreFactory;
use crate::workload::Workload;

/// Pause between two passes over the groups (the server's `PASS_EVERY`).
const PASS_MS: u64 = 200;

/// A learner at most this many entries behind its group's leader is made a voter (the
/// server's `PROMOTE_WITHIN`).
const PROMOTE_WITHIN: u64 = 64;

/// One step of a scenario, done in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Goal {
    /// Cut a node from every other for good.
    Isolate(NodeId),
    /// Start a new member (once every group has some history, so catching up is work).
    Join(NodeId),
    /// Make a member a voter of every group (learner, catch-up, voter).
    Add(NodeId),
    /// Take a member out of every group, then stop it for good.
    Remove(NodeId),
}

/// Where a group stands on the current goal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    Done,
    Waiting,
}

/// A run's membership change in progress.
#[derive(Debug)]
pub(crate) struct Driver {
    scenario: Scenario,
    goals: VecDeque<Goal>,
    start_at: u64,
    /// The member removed from every group, once it is.
    removed: Option<NodeId>,
    /// Counts, shared with the proposals' callbacks.
    counts: Arc<Mutex<MembershipCounts>>,
}

impl Driver {
    /// The scenario's steps: the founder removed is drawn from `rng`, the new member is node
    /// `total`; the first pass comes at a seeded time in the first third of the faults.
    pub(crate) fn new(
        scenario: Scenario,
        founders: &[NodeId],
        total: u64,
        rng: &mut SimRng,
        cfg: &SimConfig,
    ) -> Self {
        let old = founders[rng.index(founders.len())];
        let new = total;
        let goals = match scenario {
            Scenario::Add => vec![Goal::Join(new), Goal::Add(new)],
            Scenario::Remove => vec![Goal::Remove(old)],
            Scenario::Replace => vec![Goal::Join(new), Goal::Add(new), Goal::Remove(old)],
            Scenario::RemovePartitioned => vec![Goal::Isolate(old), Goal::Remove(old)],
            Scenario::StuckLearner => vec![Goal::Isolate(new), Goal::Join(new), Goal::Add(new)],
        };
        let start_at = rng.range(cfg.fault_ms / 10, cfg.fault_ms / 3).max(1);
        Driver {
            scenario,
            goals: goals.into(),
            start_at,
            removed: None,
            counts: Arc::new(Mutex::new(MembershipCounts {
                runs: 1,
                ..MembershipCounts::default()
            })),
        }
    }

    /// The scenario it runs.
    pub(crate) fn scenario(&self) -> Scenario {
        self.scenario
    }

    /// When the first pass comes.
    pub(crate) fn start_at(&self) -> u64 {
        self.start_at
    }

    /// What the run's changes did so far.
    pub(crate) fn counts(&self) -> std::sync::MutexGuard<'_, MembershipCounts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<F: StoreFactory, W: Workload> Sim<F, W> {
    /// One pass of the driver (faults and calm only: once the workload stops, members stay
    /// as they are).
    pub(super) fn membership_pass(&mut self) -> Step {
        if !matches!(self.phase, Phase::Faulty | Phase::Calm) {
            return Ok(());
        }
        self.schedule(PASS_MS, super::Event::Membership);
        let Some(goal) = self.driver.as_ref().and_then(|d| d.goals.front().copied()) else {
            return Ok(());
        };
        let done = match goal {
            Goal::Isolate(n) => {
                self.net.isolate_for_good(n);
                self.note(|| format!("membership: node {n} is cut from every other for good"));
                true
            }
            Goal::Join(n) => {
                // A learner the leader never reached has matched 0, so with the server's
                // rule it counts as caught up while its group's log is at most
                // PROMOTE_WITHIN entries long: the learner that must never vote joins once
                // every group is past that.
                let stuck = self.driver.as_ref().expect("set").scenario == Scenario::StuckLearner;
                let ready = !stuck
                    || self.groups.clone().into_iter().all(|g| {
                        self.group_leader(g).is_some_and(|l| {
                            let node = self.nodes[Self::slot(l)].node.as_ref();
                            node.and_then(|node| node.status(g))
                                .is_some_and(|s| s.last_index > PROMOTE_WITHIN)
                        })
                    });
                if ready {
                    if stuck {
                        self.checker.never_voter(n);
                        self.driver.as_ref().expect("set").counts().stuck_learners += 1;
                    }
                    self.note(|| format!("membership: node {n} starts, to join every group"));
                    self.start(n)?;
                }
                ready
            }
            Goal::Add(_) | Goal::Remove(_) => {
                let mut waiting = 0;
                for g in self.groups.clone() {
                    if self.change_step(g, goal)? == Progress::Waiting {
                        waiting += 1;
                    }
                }
                waiting == 0
            }
        };
        if !done {
            return Ok(());
        }
        let driver = self.driver.as_mut().expect("set");
        driver.goals.pop_front();
        match goal {
            Goal::Add(n) => {
                driver.counts().added += 1;
                self.note(|| format!("membership: node {n} votes in every group"));
            }
            Goal::Remove(n) => {
                driver.counts().removed += 1;
                driver.removed = Some(n);
                self.note(|| format!("membership: node {n} left every group; it stops"));
                if self.up(n) {
                    self.crash(n, false);
                }
                self.nodes[Self::slot(n)].service = Service::Retired;
                self.net.isolate_for_good(n);
            }
            Goal::Isolate(_) | Goal::Join(_) => {}
        }
        Ok(())
    }

    /// The node that leads `group` in the highest term among running nodes (`None`: none).
    pub(super) fn group_leader(&self, group: GroupId) -> Option<NodeId> {
        self.nodes
            .iter()
            .filter_map(|n| {
                let s = n.node.as_ref()?.status(group)?;
                (s.role == Role::Leader && !s.failed).then_some((s.term, n.id))
            })
            .max()
            .map(|(_, id)| id)
    }

    /// One step of `goal` on `group`, on its leader.
    fn change_step(&mut self, group: GroupId, goal: Goal) -> Result<Progress, String> {
        let Some(leader) = self.group_leader(group) else {
            return Ok(Progress::Waiting);
        };
        let node = self.nodes[Self::slot(leader)].node.as_mut().expect("up");
        let Some(m) = node.membership(group) else {
            return Ok(Progress::Waiting);
        };
        let change = match goal {
            Goal::Add(n) => {
                if m.voters.contains(&n) && m.voters_outgoing.is_empty() {
                    return Ok(Progress::Done);
                }
                if m.is_joint() {
                    return Ok(Progress::Waiting); // the engine leaves it by itself
                }
                if !m.learners.contains(&n) {
                    MemberChange::AddLearner(n)
                } else if node.status(group).is_some_and(|s| {
                    let matched = s.matched.iter().find(|(id, _)| *id == n).map(|(_, i)| *i);
                    matched.is_some_and(|i| s.last_index.saturating_sub(i) <= PROMOTE_WITHIN)
                }) {
                    MemberChange::AddVoter(n)
                } else {
                    return Ok(Progress::Waiting);
                }
            }
            Goal::Remove(n) => {
                if !m.contains(n) {
                    return Ok(Progress::Done);
                }
                if leader == n {
                    // The server's leader hands its leaderships over rather than remove
                    // itself.
                    let to =
                        m.voters.iter().copied().find(|&v| {
                            v != n && self.up(v) && !self.net.isolated().any(|i| i == v)
                        });
                    if let Some(to) = to {
                        self.driver.as_ref().expect("set").counts().transfers += 1;
                        self.note(|| format!("membership: {group} leader {n} hands over to {to}"));
                        let node = self.nodes[Self::slot(leader)].node.as_mut().expect("up");
                        node.transfer_leader(group, to);
                        self.step(leader)?;
                    }
                    return Ok(Progress::Waiting);
                }
                if m.is_joint() || m.voters == [n] {
                    return Ok(Progress::Waiting);
                }
                MemberChange::Remove(n)
            }
            Goal::Isolate(_) | Goal::Join(_) => return Ok(Progress::Done),
        };
        let counts = Arc::clone(&self.driver.as_ref().expect("set").counts);
        counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .proposed += 1;
        self.note(|| format!("membership: {group} on leader {leader}: proposes {change:?}"));
        let node = self.nodes[Self::slot(leader)].node.as_mut().expect("up");
        node.propose_membership(
            group,
            &[change],
            Box::new(move |result| {
                let mut c = counts.lock().unwrap_or_else(PoisonError::into_inner);
                if result.is_ok() {
                    c.completed += 1;
                } else {
                    c.refused += 1;
                }
            }),
        );
        self.step(leader)?;
        Ok(Progress::Waiting)
    }

    /// At the start of the calm phase, after a completed removal: keeps down as many voters
    /// of the new configuration as leave a bare majority of it, which is no majority of the
    /// old one (the removed member added back), so the liveness check shows that every group
    /// commits without counting the removed member. Only when every group has the same
    /// voters, not joint, an odd number of them (an even one has the same majority as with
    /// the removed member).
    pub(super) fn hold_for_removal_proof(&mut self) {
        let Some(removed) = self.driver.as_ref().and_then(|d| d.removed) else {
            return;
        };
        let configs: BTreeSet<_> = self
            .groups
            .iter()
            .map(|g| self.checker.latest_config(*g))
            .collect();
        let configs: Vec<_> = configs.into_iter().collect();
        let [Some((voters, outgoing))] = configs.as_slice() else {
            return;
        };
        let voters = voters.clone();
        if !outgoing.is_empty()
            || voters.contains(&removed)
            || voters.len() < 3
            || voters.len() % 2 == 0
            || voters
                .iter()
                .any(|v| self.nodes[Self::slot(*v)].service != Service::Serving)
        {
            return;
        }
        let mut candidates = voters.clone();
        let mut held = Vec::new();
        for _ in 0..(voters.len() - 1) / 2 {
            held.push(candidates.remove(self.rng.index(candidates.len())));
        }
        for &id in &held {
            if self.up(id) {
                self.crash(id, false);
            }
            self.nodes[Self::slot(id)].service = Service::Held;
        }
        self.driver.as_ref().expect("set").counts().removal_proofs += 1;
        self.note(|| {
            format!(
                "membership: voters {voters:?} without removed node {removed}: {held:?} stay \
                 down through the calm phase"
            )
        });
    }

    /// When the workload stops: nodes kept down start again, nodes cut for good (a learner
    /// that never caught up, a member whose removal did not complete) are let back in, and
    /// the run's counts go to the report.
    pub(super) fn release_members(&mut self) -> Step {
        if self.driver.is_none() {
            return Ok(());
        }
        let isolated: Vec<NodeId> = self.net.isolated().collect();
        for id in isolated {
            if self.nodes[Self::slot(id)].service != Service::Retired {
                self.net.let_in(id);
                self.note(|| format!("membership: node {id} is let back in"));
            }
        }
        for id in 1..=self.nodes.len() as u64 {
            let n = &mut self.nodes[Self::slot(id)];
            if n.service == Service::Held {
                n.service = Service::Serving;
                self.start(id)?;
            }
        }
        Ok(())
    }

    /// At the end: every member of `group` (as its leader counts them) runs the group with
    /// the same membership, and the learner that never caught up is no voter.
    pub(super) fn check_final_membership(&self, group: GroupId, members: &[NodeId]) -> Step {
        let mut reference = None;
        for &id in members {
            let m = self.nodes[Self::slot(id)]
                .node
                .as_ref()
                .and_then(|node| node.membership(group))
                .ok_or_else(|| format!("{group}: member {id} does not run it at the end"))?;
            match &reference {
                None => reference = Some((id, m)),
                Some((first, r)) if *r != m => {
                    return Err(format!(
                        "{group}: members {first} and {id} end with different memberships: \
                         {r:?} and {m:?}"
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}
