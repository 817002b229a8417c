//! Cluster membership changes at run time (`EDDY_CLUSTER_ADD_MEMBER`,
//! `EDDY_CLUSTER_REMOVE_MEMBER`), run by the metadata group's leader.
//!
//! Adding member `n` at `address`:
//! 1. the metadata records every current member with its replication address (the first
//!    time members change, and what a leader that died half-way through that left out: a
//!    member follows the record only once it names every member of the metadata group) and
//!    then `n` (`MetadataOp::SetMember`): every member's
//!    transport then dials and accepts `n`, and `n` (started with `--join`) learns the
//!    cluster's id and founders from any of them;
//! 2. on every group (the metadata group, each event shard, each partition) `n` becomes a
//!    learner, catches up (a snapshot plus the log, at the pace of the engine's bounded
//!    appends), and is made a voter once it is at most [`PROMOTE_WITHIN`] entries behind.
//!    Groups are changed in passes: each pass moves every group this member leads one step,
//!    so groups catch up side by side; a group led elsewhere waits for the alignment of
//!    leaderships. A partition created meanwhile is placed on the metadata group's voters,
//!    so a later pass adds `n` to it too.
//!
//! Removing member `n` takes it out of every group (one change per group), then the
//! metadata forgets it: its connections are no longer accepted. The leader does not remove
//! itself: asked to, it hands its leaderships to another voter and answers not-leader, and
//! the client asks the new leader.

use std::collections::BTreeSet;
use std::time::Duration;

use eddy_consensus::{GroupId, MemberChange, Membership, NodeId, ProposeError};
use eddy_stream_store::MetadataOp;

use super::ClusterStreams;
use eddy_replicated::groups::METADATA_GROUP;
use eddy_replicated::stream::error::ClusterError;

/// A learner at most this many entries behind its group's leader is made a voter.
pub const PROMOTE_WITHIN: u64 = 64;

/// Longest a membership change may take, catch-up included.
pub const CHANGE_PATIENCE: Duration = Duration::from_secs(600);

/// Pause between two passes over the groups.
const PASS_EVERY: Duration = Duration::from_millis(200);

/// Where one group stands with respect to the member being changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The group is as wanted.
    Done,
    /// A change was proposed or the group waits (for its leader, its catch-up).
    Waiting,
}

impl ClusterStreams {
    /// Makes this member record its replication address and the transport's peers, for
    /// membership changes (see the module docs).
    #[must_use]
    pub fn with_membership(
        mut self,
        peers: crate::cluster::transport::PeerBook,
        replication: String,
    ) -> Self {
        self.peers = peers;
        self.replication = replication;
        self
    }

    /// Adds member `id`, reachable at `address` on its replication port, to every group;
    /// returns how many groups it went through.
    ///
    /// # Errors
    /// Not the metadata leader, `id` is a member already, the metadata refused the record,
    /// or the change did not complete within `CHANGE_PATIENCE` (10 minutes).
    pub async fn add_member(&self, id: NodeId, address: String) -> Result<u32, ClusterError> {
        if !self.is_metadata_leader() {
            return Err(ClusterError::NotLeader("metadata group"));
        }
        if id == 0 {
            return Err(ClusterError::Membership(
                "member id 0 is not a member id".into(),
            ));
        }
        let metadata = self.group_membership(METADATA_GROUP).await?;
        // A member that votes somewhere but not everywhere is an add that stopped half-way
        // (its leader changed): this one continues it.
        if metadata.voters.contains(&id) && self.votes_everywhere(id).await {
            return Err(ClusterError::Membership(format!(
                "member {id} is a member already"
            )));
        }
        tokio::net::lookup_host(address.as_str())
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                ClusterError::Membership(format!("{address:?} does not resolve to an address"))
            })?;
        self.record_current_members(&metadata).await?;
        if self.read(|s| s.members.get(&id) != Some(&address)) {
            self.commit(&MetadataOp::SetMember { id, address }).await?;
        }
        tracing::info!(
            member = id,
            "adding a member: a learner on every group, then a voter"
        );
        self.change_every_group(id, true).await
    }

    /// Removes member `id` from every group, then from the metadata's members; returns how
    /// many groups it went through.
    ///
    /// # Errors
    /// Not the metadata leader (also when asked to remove itself: it hands its leaderships
    /// over first), `id` is no member, its removal would leave a group without voters, or the
    /// change did not complete within `CHANGE_PATIENCE` (10 minutes).
    pub async fn remove_member(&self, id: NodeId) -> Result<u32, ClusterError> {
        if !self.is_metadata_leader() {
            return Err(ClusterError::NotLeader("metadata group"));
        }
        let metadata = self.group_membership(METADATA_GROUP).await?;
        // A member the metadata group no longer counts but some group (or the metadata's
        // record of members) still does is a removal that stopped half-way (its leader
        // changed): this one finishes it.
        if !metadata.voters.contains(&id)
            && !metadata.learners.contains(&id)
            && !self.read(|s| s.members.contains_key(&id))
            && !self.in_some_group(id).await
        {
            return Err(ClusterError::Membership(format!(
                "member {id} is no member"
            )));
        }
        if metadata.voters == [id] {
            return Err(ClusterError::Membership(
                "the last voter cannot be removed".into(),
            ));
        }
        if id == self.me {
            self.hand_over_leaderships();
            return Err(ClusterError::NotLeader(
                "metadata group (this member is being removed: it handed its leaderships over)",
            ));
        }
        self.record_current_members(&metadata).await?;
        tracing::info!(member = id, "removing a member from every group");
        let groups = self.change_every_group(id, false).await?;
        if self.read(|s| s.members.contains_key(&id)) {
            self.commit(&MetadataOp::RemoveMember { id }).await?;
        }
        Ok(groups)
    }

    /// Records every current voter of the metadata group the metadata does not record yet,
    /// with its replication address (this member's own, the others' from the transport): all
    /// of them the first time members change, and those a leader that died in the middle of
    /// that left out (one entry each).
    async fn record_current_members(&self, metadata: &Membership) -> Result<(), ClusterError> {
        let missing = self.read(|s| unrecorded(&metadata.voters, &s.members));
        if missing.is_empty() {
            return Ok(());
        }
        let peers = self.peers.all();
        for member in missing {
            let address = if member == self.me {
                self.replication.clone()
            } else {
                match peers.get(&member) {
                    Some(addr) => addr.to_string(),
                    None => {
                        return Err(ClusterError::Membership(format!(
                            "member {member}'s replication address is unknown here"
                        )))
                    }
                }
            };
            self.commit(&MetadataOp::SetMember {
                id: member,
                address,
            })
            .await?;
        }
        Ok(())
    }

    /// Passes over every group until each has `id` as a voter (`add`) or not at all. A
    /// removal leaves the metadata group for last: until it is out of that group, the member
    /// counts as one, so a removal whose leader died half-way is found and finished by the
    /// next run.
    async fn change_every_group(&self, id: NodeId, add: bool) -> Result<u32, ClusterError> {
        let _changing = Changing::start(&self.changing);
        let deadline = tokio::time::Instant::now() + CHANGE_PATIENCE;
        loop {
            if !self.is_metadata_leader() {
                return Err(ClusterError::NotLeader("metadata group"));
            }
            let groups = self.group_ids().await;
            let mut waiting = 0usize;
            for &group in &groups {
                if !add && group == METADATA_GROUP {
                    continue;
                }
                let step = if add {
                    self.add_step(group, id).await
                } else {
                    self.remove_step(group, id).await
                };
                if step == Step::Waiting {
                    waiting += 1;
                }
            }
            if !add
                && waiting == 0
                && groups.contains(&METADATA_GROUP)
                && self.remove_step(METADATA_GROUP, id).await == Step::Waiting
            {
                waiting += 1;
            }
            if waiting == 0 {
                tracing::info!(
                    member = id,
                    add,
                    groups = groups.len(),
                    "membership change complete on every group"
                );
                return Ok(u32::try_from(groups.len()).unwrap_or(u32::MAX));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ClusterError::Membership(format!(
                    "{waiting} of {} groups had not completed the change after {}s (a new \
                     member still catching up, or groups without a leader); running it again \
                     continues where it stopped",
                    groups.len(),
                    CHANGE_PATIENCE.as_secs()
                )));
            }
            tokio::time::sleep(PASS_EVERY).await;
        }
    }

    /// One step of adding `id` to `group`: a learner first, a voter once caught up.
    async fn add_step(&self, group: GroupId, id: NodeId) -> Step {
        let Ok(members) = self.group_membership(group).await else {
            return Step::Done; // the group is gone (a deleted partition)
        };
        if members.voters.contains(&id) && members.voters_outgoing.is_empty() {
            return Step::Done;
        }
        if !self.leads(group) {
            self.ask_leadership(group).await;
            return Step::Waiting;
        }
        if !members.voters_outgoing.is_empty() {
            return Step::Waiting; // a joint configuration leaves by itself
        }
        if !members.learners.contains(&id) {
            self.propose_change(group, MemberChange::AddLearner(id));
            return Step::Waiting;
        }
        if self.caught_up(group, id).await {
            self.propose_change(group, MemberChange::AddVoter(id));
        }
        Step::Waiting
    }

    /// One step of removing `id` from `group`.
    async fn remove_step(&self, group: GroupId, id: NodeId) -> Step {
        let Ok(members) = self.group_membership(group).await else {
            return Step::Done;
        };
        let present = members.voters.contains(&id)
            || members.learners.contains(&id)
            || members.voters_outgoing.contains(&id);
        if !present {
            return Step::Done;
        }
        if !self.leads(group) {
            self.ask_leadership(group).await;
            return Step::Waiting;
        }
        if members.voters_outgoing.is_empty() && members.voters != [id] {
            self.propose_change(group, MemberChange::Remove(id));
        }
        Step::Waiting
    }

    /// Whether `id` is at most [`PROMOTE_WITHIN`] entries behind this member (the leader of
    /// `group`).
    async fn caught_up(&self, group: GroupId, id: NodeId) -> bool {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.runner.with(move |node| {
            let status = node.status(group);
            let _ = tx.send(status.map(|s| {
                let matched = s.matched.iter().find(|(m, _)| *m == id).map(|(_, i)| *i);
                (s.last_index, matched)
            }));
        });
        match rx.await {
            // A learner that acknowledged nothing yet (never reached) is not caught up, however
            // short the group's log: it would count toward quorums without voting.
            Ok(Some((last, Some(matched)))) if matched > 0 => {
                last.saturating_sub(matched) <= PROMOTE_WITHIN
            }
            _ => false,
        }
    }

    /// Whether `id` is a voter of every group this member runs.
    async fn votes_everywhere(&self, id: NodeId) -> bool {
        for group in self.group_ids().await {
            match self.group_membership(group).await {
                Ok(m) if !m.voters.contains(&id) => return false,
                // A voter here, or the group is gone meanwhile.
                Ok(_) | Err(_) => {}
            }
        }
        true
    }

    /// Whether `id` is a voter, learner or outgoing voter of any group this member runs.
    async fn in_some_group(&self, id: NodeId) -> bool {
        for group in self.group_ids().await {
            if let Ok(m) = self.group_membership(group).await {
                if m.voters.contains(&id)
                    || m.learners.contains(&id)
                    || m.voters_outgoing.contains(&id)
                {
                    return true;
                }
            }
        }
        false
    }

    /// Every group this member runs.
    async fn group_ids(&self) -> BTreeSet<GroupId> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.runner.with(move |node| {
            let _ = tx.send(node.group_ids().collect::<BTreeSet<_>>());
        });
        rx.await.unwrap_or_default()
    }

    /// `group`'s members as this member runs it.
    async fn group_membership(&self, group: GroupId) -> Result<Membership, ClusterError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.runner.with(move |node| {
            let _ = tx.send(node.membership(group));
        });
        rx.await
            .ok()
            .flatten()
            .ok_or(ClusterError::NotCommitted(ProposeError::UnknownGroup(
                group,
            )))
    }

    /// Proposes one change; the next pass sees whether it took (a change proposed while
    /// another is in flight is dropped by the engine, and proposed again then).
    fn propose_change(&self, group: GroupId, change: MemberChange) {
        tracing::info!(?group, ?change, "proposing a membership change");
        self.runner.propose_membership(
            group,
            vec![change],
            Box::new(move |result| {
                if let Err(e) = result {
                    tracing::debug!(?group, error = %e, "a membership change did not take; proposed again");
                }
            }),
        );
    }

    /// Asks for `group`'s leadership to come to this member (the metadata leader, which
    /// changes the group's members): its leader is asked over the peer link; a group without
    /// a leader gets this member's campaign. While the change runs, this member's balancer
    /// leaves the leaderships it gathers where they are (`changing`).
    async fn ask_leadership(&self, group: GroupId) {
        crate::cluster::raft_groups::align_to_metadata_leader(&self.runner, vec![group]);
        self.ask_to_transfer(group).await;
    }

    /// Hands every leadership this member holds to another voter of that group that is caught
    /// up and heard from (it is being removed).
    fn hand_over_leaderships(&self) {
        let me = self.me;
        self.runner.with(move |node| {
            let groups: Vec<GroupId> = node.group_ids().collect();
            for group in groups {
                if node.role(group) != Some(eddy_consensus::Role::Leader) {
                    continue;
                }
                // To the first of the group's other voters that is caught up and heard from
                // (a voter that is down, the first listed one included, never takes it).
                let voters = node.membership(group).map(|m| m.voters).unwrap_or_default();
                for target in voters.into_iter().filter(|&v| v != me) {
                    if node.transfer_leader_if_ready(group, target) {
                        break;
                    }
                }
            }
        });
    }
}

/// The `voters` the members' record lacks.
fn unrecorded(
    voters: &[NodeId],
    recorded: &std::collections::BTreeMap<u64, String>,
) -> Vec<NodeId> {
    voters
        .iter()
        .copied()
        .filter(|v| !recorded.contains_key(v))
        .collect()
}

/// Marks a membership change running on this member for as long as it lives.
struct Changing(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Changing {
    fn start(running: &std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Self {
        running.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Changing(std::sync::Arc::clone(running))
    }
}

impl Drop for Changing {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::unrecorded;

    #[test]
    fn a_record_a_dead_leader_began_is_completed_by_the_next_change() {
        let record = |ids: &[u64]| ids.iter().map(|&i| (i, format!("h{i}:1"))).collect();
        assert_eq!(unrecorded(&[1, 2, 3], &record(&[])), [1, 2, 3]);
        assert_eq!(unrecorded(&[1, 2, 3], &record(&[1])), [2, 3]);
        assert!(unrecorded(&[1, 2, 3], &record(&[1, 2, 3, 4])).is_empty());
    }
}
