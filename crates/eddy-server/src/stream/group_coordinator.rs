//! Consumer-group membership and partition assignment (stream protocol §7.6).
//!
//! Groups are durable metadata; their **members are not**: a member is a logged-in connection
//! (a [`ClientId`]) that joined, and it leaves on `LEAVE_CONSUMER_GROUP`, logout, disconnect or
//! stale eviction. This module is the in-memory coordinator: pure logic, no I/O, no locking (the
//! server keeps it behind one mutex) and no clock (callers pass `now`).
//!
//! Assignment:
//!
//! * **Leave, member removal, partition change** (eager): the topic's partition ids (ascending)
//!   are dealt over the members in member-id order, partition `i` to member `i % members`.
//!   Pending revocations are dropped.
//! * **Join** (cooperative, sticky): every member gets a quota (`partitions / members`, the
//!   remainder one each to the members that already hold the most, then the lowest ids);
//!   members above their quota give up their excess (partitions with nothing in flight first,
//!   then the highest ids), and members below it take those and the unowned partitions, lowest
//!   member id and lowest partition id first. A partition whose owner has **polled but not yet
//!   committed** (or is polling it right now) is not handed over at once: it is *pending
//!   revocation*. Its owner no longer sees it in `SYNC_CONSUMER_GROUP` nor may poll it, but may
//!   still commit it; it moves to its new owner as soon as the owner has committed at least the
//!   last offset it polled, or once the rebalancing timeout has passed since it was marked.
//!
//! The generation (0 for a new group) goes up by one on every membership or partition change
//! and every completed revocation, so a member's `SYNC_CONSUMER_GROUP` answer is always
//! truthful. Member ids are the lowest unused id in the group.
//!
//! Invariants (asserted in debug builds after every change): while a group has members each
//! partition of the topic has exactly one owner (a pending partition's owner is the member it
//! is being revoked from); a pending partition is revoked towards another member; a client is
//! at most one member of a group.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use eddy_auth::sessions::ClientId;

/// A consumer group's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
// The protocol's own names for the three ids.
#[allow(clippy::struct_field_names)]
pub struct GroupKey {
    /// Stream id.
    pub stream_id: u32,
    /// Topic id.
    pub topic_id: u32,
    /// Group id.
    pub group_id: u32,
}

/// One member's view of its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The group's generation.
    pub generation: u64,
    /// The partitions the member may poll, ascending (pending revocations excluded).
    pub partitions: Vec<u32>,
}

/// A member as `GET_CONSUMER_GROUP` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    /// Member id within the group.
    pub id: u32,
    /// The partitions it owns, ascending (pending revocations included: it may still commit
    /// them).
    pub partitions: Vec<u32>,
}

#[derive(Debug, Clone)]
struct Member {
    client_id: ClientId,
    /// Owned partitions, ascending, pending revocations included.
    partitions: Vec<u32>,
    /// Round-robin cursor for polls that name no partition.
    cursor: usize,
}

/// What the owner of a partition has read and not committed yet.
#[derive(Debug, Clone, Copy, Default)]
struct InFlight {
    /// The last offset it polled, while its commits stay below it.
    polled: Option<u64>,
    /// One of its polls is running.
    polling: bool,
}

impl InFlight {
    fn is_clear(self) -> bool {
        self.polled.is_none() && !self.polling
    }
}

/// A partition on its way from its owner to member `to`.
#[derive(Debug, Clone, Copy)]
struct Revocation {
    to: u32,
    since: Instant,
}

#[derive(Debug, Clone, Default)]
struct Group {
    generation: u64,
    members: BTreeMap<u32, Member>,
    /// Per partition, what its current owner has in flight (absent: nothing).
    in_flight: BTreeMap<u32, InFlight>,
    /// Partitions pending revocation.
    revoking: BTreeMap<u32, Revocation>,
}

impl Group {
    fn member_of(&self, client_id: ClientId) -> Option<(u32, &Member)> {
        self.members
            .iter()
            .find(|(_, m)| m.client_id == client_id)
            .map(|(id, m)| (*id, m))
    }

    /// Partition -> owning member id.
    fn owners(&self) -> BTreeMap<u32, u32> {
        self.members
            .iter()
            .flat_map(|(id, m)| m.partitions.iter().map(move |p| (*p, *id)))
            .collect()
    }

    fn owns(&self, client_id: ClientId, partition: u32) -> bool {
        self.member_of(client_id)
            .is_some_and(|(_, m)| m.partitions.contains(&partition))
    }

    fn pollable(&self, member: &Member) -> Vec<u32> {
        member
            .partitions
            .iter()
            .copied()
            .filter(|p| !self.revoking.contains_key(p))
            .collect()
    }

    fn has_in_flight(&self, partition: u32) -> bool {
        self.in_flight
            .get(&partition)
            .is_some_and(|f| !f.is_clear())
    }

    /// Eager round-robin over every member; drops pending revocations, and what is in flight
    /// on the partitions that change owner.
    fn rebalance(&mut self, partitions: &[u32]) {
        let before = self.owners();
        let count = self.members.len();
        let mut dealt: Vec<Vec<u32>> = vec![Vec::new(); count];
        if count > 0 {
            for (i, partition) in partitions.iter().enumerate() {
                dealt[i % count].push(*partition);
            }
        }
        for (member, mut assigned) in self.members.values_mut().zip(dealt) {
            assigned.sort_unstable();
            member.partitions = assigned;
            member.cursor = 0;
        }
        let after = self.owners();
        self.in_flight
            .retain(|p, _| before.contains_key(p) && before.get(p) == after.get(p));
        self.revoking.clear();
        self.generation += 1;
        self.check(partitions);
    }

    /// Cooperative rebalance after a join (see the module docs).
    fn rebalance_sticky(&mut self, partitions: &[u32], now: Instant) {
        // Partitions the topic no longer has are forgotten first.
        for member in self.members.values_mut() {
            member.partitions.retain(|p| partitions.contains(p));
        }
        self.in_flight.retain(|p, _| partitions.contains(p));
        self.revoking.retain(|p, _| partitions.contains(p));

        let owners = self.owners();
        let ids: Vec<u32> = self.members.keys().copied().collect();
        let mut held: BTreeMap<u32, Vec<u32>> = ids.iter().map(|id| (*id, Vec::new())).collect();
        let mut free = Vec::new();
        for &p in partitions {
            let effective = self
                .revoking
                .get(&p)
                .map(|r| r.to)
                .or_else(|| owners.get(&p).copied());
            match effective.and_then(|m| held.get_mut(&m)) {
                Some(list) => list.push(p),
                None => free.push(p),
            }
        }
        let count = ids.len().max(1);
        let (base, extra) = (partitions.len() / count, partitions.len() % count);
        let mut by_load = ids.clone();
        by_load.sort_by_key(|id| (Reverse(held[id].len()), *id));
        let quota: BTreeMap<u32, usize> = by_load
            .iter()
            .enumerate()
            .map(|(i, id)| (*id, base + usize::from(i < extra)))
            .collect();
        for (id, list) in &mut held {
            // Keep what is in flight, then the lowest ids; give up the rest.
            list.sort_by_key(|p| (!self.has_in_flight(*p), *p));
            if list.len() > quota[id] {
                free.extend(list.drain(quota[id]..));
            }
        }
        free.sort_unstable();
        let mut free = free.into_iter();
        for (id, list) in &mut held {
            while list.len() < quota[id] {
                match free.next() {
                    Some(p) => list.push(p),
                    None => break,
                }
            }
        }
        debug_assert!(free.next().is_none(), "the quotas cover every partition");
        for (id, list) in held {
            for p in list {
                self.assign(p, id, owners.get(&p).copied(), now);
            }
        }
        self.generation += 1;
        self.check(partitions);
    }

    /// Makes member `to` the (future) owner of `partition`, now owned by `owner`.
    fn assign(&mut self, partition: u32, to: u32, owner: Option<u32>, now: Instant) {
        match owner {
            Some(owner) if owner == to => {
                self.revoking.remove(&partition);
            }
            Some(_) if self.has_in_flight(partition) => {
                let since = self.revoking.get(&partition).map_or(now, |r| r.since);
                self.revoking.insert(partition, Revocation { to, since });
            }
            _ => self.hand_over(partition, to),
        }
    }

    fn hand_over(&mut self, partition: u32, to: u32) {
        for member in self.members.values_mut() {
            member.partitions.retain(|p| *p != partition);
        }
        if let Some(member) = self.members.get_mut(&to) {
            let at = member.partitions.partition_point(|p| *p < partition);
            member.partitions.insert(at, partition);
        }
        self.in_flight.remove(&partition);
        self.revoking.remove(&partition);
    }

    /// Completes the revocation of `partition` if nothing is in flight on it any more.
    fn complete_if_clear(&mut self, partition: u32) {
        if !self.has_in_flight(partition) {
            self.in_flight.remove(&partition);
            if let Some(r) = self.revoking.get(&partition).copied() {
                self.hand_over(partition, r.to);
                self.generation += 1;
            }
        }
    }

    fn check(&self, partitions: &[u32]) {
        if cfg!(debug_assertions) && !self.members.is_empty() {
            let mut owned: Vec<u32> = self.owners().into_keys().collect();
            owned.sort_unstable();
            let mut expected = partitions.to_vec();
            expected.sort_unstable();
            assert_eq!(owned, expected, "every partition has exactly one owner");
            let total: usize = self.members.values().map(|m| m.partitions.len()).sum();
            assert_eq!(total, partitions.len(), "no partition has two owners");
            let owners = self.owners();
            for (p, r) in &self.revoking {
                assert!(self.members.contains_key(&r.to), "revoked towards a member");
                assert_ne!(owners.get(p), Some(&r.to), "revoked towards another member");
            }
        }
    }
}

/// Why a membership operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MembershipError {
    /// The client is not a member of the group.
    #[error("client {client_id} is not a member of the group")]
    NotAMember {
        /// The client.
        client_id: ClientId,
    },
}

/// The coordinator of every group's membership.
#[derive(Debug)]
pub struct Coordinator {
    groups: BTreeMap<GroupKey, Group>,
    rebalancing_timeout: Duration,
}

impl Default for Coordinator {
    fn default() -> Self {
        Self::new(Duration::from_millis(
            crate::config::DEFAULT_STREAM_GROUP_REBALANCING_TIMEOUT_MS,
        ))
    }
}

impl Coordinator {
    /// A coordinator whose pending revocations complete at the latest `rebalancing_timeout`
    /// after they were marked.
    pub fn new(rebalancing_timeout: Duration) -> Self {
        Self {
            groups: BTreeMap::new(),
            rebalancing_timeout,
        }
    }

    /// Completes every pending revocation older than the rebalancing timeout at `now`.
    pub fn settle(&mut self, now: Instant) {
        let timeout = self.rebalancing_timeout;
        for group in self.groups.values_mut() {
            if group.revoking.is_empty() {
                continue;
            }
            let due: Vec<u32> = group
                .revoking
                .iter()
                .filter(|(_, r)| now.saturating_duration_since(r.since) >= timeout)
                .map(|(p, _)| *p)
                .collect();
            for partition in due {
                group.in_flight.remove(&partition);
                group.complete_if_clear(partition);
            }
        }
    }

    /// Adds `client_id` to the group (a no-op if it is already a member) and rebalances
    /// cooperatively over `partitions`, the topic's partition ids. Returns true if membership
    /// changed.
    pub fn join(
        &mut self,
        key: GroupKey,
        client_id: ClientId,
        partitions: &[u32],
        now: Instant,
    ) -> bool {
        let group = self.groups.entry(key).or_default();
        if group.member_of(client_id).is_some() {
            return false;
        }
        let mut id = 0u32;
        while group.members.contains_key(&id) {
            id += 1;
        }
        group.members.insert(
            id,
            Member {
                client_id,
                partitions: Vec::new(),
                cursor: 0,
            },
        );
        group.rebalance_sticky(partitions, now);
        true
    }

    /// Removes `client_id` from the group and rebalances the rest eagerly over `partitions`.
    pub fn leave(
        &mut self,
        key: GroupKey,
        client_id: ClientId,
        partitions: &[u32],
    ) -> Result<(), MembershipError> {
        let group = self
            .groups
            .get_mut(&key)
            .ok_or(MembershipError::NotAMember { client_id })?;
        let (id, _) = group
            .member_of(client_id)
            .ok_or(MembershipError::NotAMember { client_id })?;
        group.members.remove(&id);
        group.rebalance(partitions);
        Ok(())
    }

    /// Every group `client_id` is a member of, by key.
    pub fn groups_of(&self, client_id: ClientId) -> Vec<GroupKey> {
        self.groups
            .iter()
            .filter(|(_, g)| g.member_of(client_id).is_some())
            .map(|(k, _)| *k)
            .collect()
    }

    /// True when `client_id` is a member of at least one group.
    pub fn is_member_anywhere(&self, client_id: ClientId) -> bool {
        self.groups
            .values()
            .any(|g| g.member_of(client_id).is_some())
    }

    /// The member's assignment (the partitions it may poll), or `None` when it is not a
    /// member.
    pub fn assignment(&self, key: GroupKey, client_id: ClientId) -> Option<Assignment> {
        let group = self.groups.get(&key)?;
        let (_, member) = group.member_of(client_id)?;
        Some(Assignment {
            generation: group.generation,
            partitions: group.pollable(member),
        })
    }

    /// True when the member owns `partition_id`, pending revocation or not: it may commit it.
    pub fn owns(&self, key: GroupKey, client_id: ClientId, partition_id: u32) -> bool {
        self.groups
            .get(&key)
            .is_some_and(|g| g.owns(client_id, partition_id))
    }

    /// Starts a poll of `partition_id` by the member: false (fenced) unless it owns the
    /// partition and it is not pending revocation. Every `true` must be followed by
    /// [`end_poll`](Self::end_poll).
    pub fn begin_poll(&mut self, key: GroupKey, client_id: ClientId, partition_id: u32) -> bool {
        let Some(group) = self.groups.get_mut(&key) else {
            return false;
        };
        if !group.owns(client_id, partition_id) || group.revoking.contains_key(&partition_id) {
            return false;
        }
        group.in_flight.entry(partition_id).or_default().polling = true;
        true
    }

    /// Ends a poll started by [`begin_poll`](Self::begin_poll); `last` is the last offset it
    /// served and left uncommitted, if any.
    pub fn end_poll(
        &mut self,
        key: GroupKey,
        client_id: ClientId,
        partition_id: u32,
        last: Option<u64>,
    ) {
        let Some(group) = self.groups.get_mut(&key) else {
            return;
        };
        if !group.owns(client_id, partition_id) {
            return;
        }
        let flight = group.in_flight.entry(partition_id).or_default();
        flight.polling = false;
        if let Some(last) = last {
            flight.polled = Some(flight.polled.map_or(last, |p| p.max(last)));
        }
        group.complete_if_clear(partition_id);
    }

    /// The member committed `offset` on `partition_id`: once that covers what it polled, a
    /// pending revocation completes.
    pub fn committed(
        &mut self,
        key: GroupKey,
        client_id: ClientId,
        partition_id: u32,
        offset: u64,
    ) {
        let Some(group) = self.groups.get_mut(&key) else {
            return;
        };
        if !group.owns(client_id, partition_id) {
            return;
        }
        if let Some(flight) = group.in_flight.get_mut(&partition_id) {
            if flight.polled.is_some_and(|p| offset >= p) {
                flight.polled = None;
            }
        }
        group.complete_if_clear(partition_id);
    }

    /// The next of the member's pollable partitions, round-robin (for polls that name none).
    /// `Err` when it is not a member, `Ok(None)` when it has nothing to poll.
    pub fn next_partition(
        &mut self,
        key: GroupKey,
        client_id: ClientId,
    ) -> Result<Option<u32>, MembershipError> {
        let not_a_member = MembershipError::NotAMember { client_id };
        let group = self.groups.get_mut(&key).ok_or(not_a_member)?;
        let (id, member) = group.member_of(client_id).ok_or(not_a_member)?;
        let pollable = group.pollable(member);
        if pollable.is_empty() {
            return Ok(None);
        }
        let member = group.members.get_mut(&id).ok_or(not_a_member)?;
        let at = member.cursor % pollable.len();
        member.cursor = at + 1;
        Ok(Some(pollable[at]))
    }

    /// The members with the partitions they own, by member id.
    pub fn members(&self, key: GroupKey) -> Vec<MemberView> {
        self.groups.get(&key).map_or_else(Vec::new, |g| {
            g.members
                .iter()
                .map(|(id, m)| MemberView {
                    id: *id,
                    partitions: m.partitions.clone(),
                })
                .collect()
        })
    }

    /// The topic's partitions changed: rebalance every group of the topic that has members.
    pub fn repartition(&mut self, stream_id: u32, topic_id: u32, partitions: &[u32]) {
        for (key, group) in &mut self.groups {
            if key.stream_id == stream_id && key.topic_id == topic_id && !group.members.is_empty() {
                group.rebalance(partitions);
            }
        }
    }

    /// Forgets groups that no longer exist: those for which `exists` is false.
    pub fn retain(&mut self, mut exists: impl FnMut(&GroupKey) -> bool) {
        self.groups.retain(|key, _| exists(key));
    }

    /// Forgets one group (deleted).
    pub fn remove_group(&mut self, key: GroupKey) {
        self.groups.remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: GroupKey = GroupKey {
        stream_id: 0,
        topic_id: 1,
        group_id: 2,
    };

    fn owners(c: &Coordinator, clients: &[ClientId]) -> Vec<Vec<u32>> {
        clients
            .iter()
            .map(|id| {
                c.assignment(KEY, *id)
                    .map(|a| a.partitions)
                    .unwrap_or_default()
            })
            .collect()
    }

    fn generation(c: &Coordinator) -> u64 {
        c.groups.get(&KEY).map_or(0, |g| g.generation)
    }

    #[test]
    fn sticky_joins_and_round_robin_leaves() {
        let parts = [0, 1, 2, 3, 4];
        let now = Instant::now();
        let mut c = Coordinator::default();
        assert!(c.join(KEY, 10, &parts, now));
        assert_eq!(c.assignment(KEY, 10).unwrap().generation, 1);
        assert_eq!(owners(&c, &[10]), [vec![0, 1, 2, 3, 4]]);
        assert!(!c.join(KEY, 10, &parts, now), "joining twice is a no-op");
        assert_eq!(c.assignment(KEY, 10).unwrap().generation, 1);
        // Joins move only the excess, highest ids first.
        c.join(KEY, 11, &parts, now);
        assert_eq!(owners(&c, &[10, 11]), [vec![0, 1, 2], vec![3, 4]]);
        c.join(KEY, 12, &parts, now);
        assert_eq!(owners(&c, &[10, 11, 12]), [vec![0, 1], vec![3, 4], vec![2]]);
        assert_eq!(c.assignment(KEY, 12).unwrap().generation, 3);
        assert!(c.owns(KEY, 11, 4));
        assert!(!c.owns(KEY, 10, 4));
        // Leaves deal round-robin.
        c.leave(KEY, 11, &parts).unwrap();
        assert_eq!(owners(&c, &[10, 12]), [vec![0, 2, 4], vec![1, 3]]);
        assert_eq!(
            c.leave(KEY, 11, &parts),
            Err(MembershipError::NotAMember { client_id: 11 })
        );
        // Member ids: the lowest free one is reused.
        c.join(KEY, 13, &parts, now);
        assert_eq!(
            c.members(KEY).iter().map(|m| m.id).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(c.groups_of(13), vec![KEY]);
        assert!(c.is_member_anywhere(13));
        assert!(!c.is_member_anywhere(99));
    }

    #[test]
    fn more_members_than_partitions_and_repartition() {
        let now = Instant::now();
        let mut c = Coordinator::default();
        for client in 1..=3 {
            c.join(KEY, client, &[0, 1], now);
        }
        assert_eq!(owners(&c, &[1, 2, 3]), [vec![0], vec![1], vec![]]);
        let generation = c.assignment(KEY, 3).unwrap().generation;
        c.repartition(0, 1, &[0, 1, 2, 3]);
        assert_eq!(owners(&c, &[1, 2, 3]), [vec![0, 3], vec![1], vec![2]]);
        assert_eq!(c.assignment(KEY, 3).unwrap().generation, generation + 1);
        c.repartition(0, 9, &[0]);
        assert_eq!(c.assignment(KEY, 3).unwrap().generation, generation + 1);
    }

    #[test]
    fn uncommitted_partitions_move_after_their_commit() {
        let now = Instant::now();
        let mut c = Coordinator::default();
        c.join(KEY, 1, &[0, 1], now);
        // Member 1 polled both partitions (up to offsets 9 and 4) and committed neither.
        for (p, last) in [(0, 9), (1, 4)] {
            assert!(c.begin_poll(KEY, 1, p));
            c.end_poll(KEY, 1, p, Some(last));
        }
        c.join(KEY, 2, &[0, 1], now);
        // Partition 1 is pending revocation: member 1 no longer polls it, member 2 not yet.
        assert_eq!(owners(&c, &[1, 2]), [vec![0], vec![]]);
        let pending = generation(&c);
        assert!(!c.begin_poll(KEY, 1, 1), "fenced for the old owner");
        assert!(!c.begin_poll(KEY, 2, 1), "not yet the new owner's");
        assert!(c.owns(KEY, 1, 1), "the old owner may still commit");
        assert!(!c.owns(KEY, 2, 1));
        assert_eq!(c.next_partition(KEY, 1), Ok(Some(0)));
        assert_eq!(c.next_partition(KEY, 1), Ok(Some(0)));
        assert_eq!(c.next_partition(KEY, 2), Ok(None));
        assert_eq!(
            c.members(KEY)
                .iter()
                .map(|m| m.partitions.clone())
                .collect::<Vec<_>>(),
            [vec![0, 1], vec![]]
        );
        // A commit below what was polled keeps it pending; one that covers it hands it over.
        c.committed(KEY, 1, 1, 3);
        assert_eq!(owners(&c, &[1, 2]), [vec![0], vec![]]);
        c.committed(KEY, 2, 1, 4);
        assert_eq!(
            owners(&c, &[1, 2]),
            [vec![0], vec![]],
            "only the owner's commit counts"
        );
        c.committed(KEY, 1, 1, 4);
        assert_eq!(owners(&c, &[1, 2]), [vec![0], vec![1]]);
        assert_eq!(generation(&c), pending + 1);
        assert!(!c.owns(KEY, 1, 1));
        assert!(c.begin_poll(KEY, 2, 1));
        c.end_poll(KEY, 2, 1, None);
    }

    #[test]
    fn pending_revocations_time_out_and_polls_in_flight_count() {
        let start = Instant::now();
        let mut c = Coordinator::new(Duration::from_secs(30));
        c.join(KEY, 1, &[0, 1], start);
        // Partition 0 has an uncommitted poll, a poll of partition 1 is still running: both
        // count as in flight.
        assert!(c.begin_poll(KEY, 1, 0));
        c.end_poll(KEY, 1, 0, Some(3));
        assert!(c.begin_poll(KEY, 1, 1));
        c.join(KEY, 2, &[0, 1], start);
        assert_eq!(owners(&c, &[1, 2]), [vec![0], vec![]]);
        // The running poll ends with nothing left uncommitted (auto-commit): 1 moves.
        c.end_poll(KEY, 1, 1, None);
        assert_eq!(owners(&c, &[1, 2]), [vec![0], vec![1]]);

        // Both partitions polled and never committed: the second moves at the timeout.
        let mut c = Coordinator::new(Duration::from_secs(30));
        c.join(KEY, 1, &[0, 1], start);
        assert!(c.begin_poll(KEY, 1, 0));
        c.end_poll(KEY, 1, 0, Some(7));
        assert!(c.begin_poll(KEY, 1, 1));
        c.end_poll(KEY, 1, 1, Some(7));
        c.join(KEY, 2, &[0, 1], start);
        assert_eq!(owners(&c, &[1, 2]), [vec![0], vec![]]);
        c.settle(start + Duration::from_secs(29));
        assert_eq!(owners(&c, &[1, 2]), [vec![0], vec![]]);
        c.settle(start + Duration::from_secs(30));
        assert_eq!(owners(&c, &[1, 2]), [vec![0], vec![1]]);
        assert!(!c.owns(KEY, 1, 1));
    }

    #[test]
    fn a_leave_deals_eagerly_and_drops_pending_revocations() {
        let now = Instant::now();
        let mut c = Coordinator::default();
        c.join(KEY, 1, &[0, 1, 2], now);
        for p in 0..3 {
            assert!(c.begin_poll(KEY, 1, p));
            c.end_poll(KEY, 1, p, Some(1));
        }
        c.join(KEY, 2, &[0, 1, 2], now);
        c.join(KEY, 3, &[0, 1, 2], now);
        assert_eq!(owners(&c, &[1, 2, 3]), [vec![0], vec![], vec![]]);
        c.leave(KEY, 3, &[0, 1, 2]).unwrap();
        assert_eq!(owners(&c, &[1, 2]), [vec![0, 2], vec![1]]);
        assert!(c.groups[&KEY].revoking.is_empty());
        // Partition 0 stayed with member 1 and keeps its uncommitted poll; 1 moved and lost it.
        c.join(KEY, 3, &[0, 1, 2], now);
        assert_eq!(owners(&c, &[1, 2, 3]), [vec![0], vec![1], vec![]]);
        c.committed(KEY, 1, 2, 1);
        assert_eq!(owners(&c, &[1, 2, 3]), [vec![0], vec![1], vec![2]]);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Step {
            Join(ClientId),
            Leave(ClientId),
            Partitions(u32),
            Poll(ClientId, u32, Option<u64>),
            Commit(ClientId, u32, u64),
            Wait(u64),
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                (1u32..6).prop_map(Step::Join),
                (1u32..6).prop_map(Step::Leave),
                (0u32..9).prop_map(Step::Partitions),
                (1u32..6, 0u32..9, proptest::option::of(0u64..20))
                    .prop_map(|(c, p, l)| Step::Poll(c, p, l)),
                (1u32..6, 0u32..9, 0u64..20).prop_map(|(c, p, o)| Step::Commit(c, p, o)),
                (0u64..40).prop_map(Step::Wait),
            ]
        }

        proptest! {
            /// Whatever the sequence of joins, leaves, partition changes, polls, commits and
            /// waits: every partition has exactly one owner while there are members, what
            /// the members will own once revocations complete differs by at most one between
            /// members, nothing is pollable by two members, and the generation only goes up.
            #[test]
            fn assignment_invariants(steps in proptest::collection::vec(step(), 1..60)) {
                let start = Instant::now();
                let mut now = start;
                let mut c = Coordinator::new(Duration::from_secs(30));
                let mut partitions: Vec<u32> = (0..4).collect();
                let mut generation = 0;
                for step in steps {
                    match step {
                        Step::Join(client) => {
                            c.join(KEY, client, &partitions, now);
                        }
                        Step::Leave(client) => {
                            let _ = c.leave(KEY, client, &partitions);
                        }
                        Step::Partitions(n) => {
                            partitions = (0..n).collect();
                            c.repartition(KEY.stream_id, KEY.topic_id, &partitions);
                        }
                        Step::Poll(client, p, last) => {
                            if c.begin_poll(KEY, client, p) {
                                c.end_poll(KEY, client, p, last);
                            }
                        }
                        Step::Commit(client, p, offset) => c.committed(KEY, client, p, offset),
                        Step::Wait(secs) => {
                            now += Duration::from_secs(secs);
                            c.settle(now);
                        }
                    }
                    let Some(group) = c.groups.get(&KEY) else { continue };
                    if group.members.is_empty() {
                        continue;
                    }
                    group.check(&partitions);
                    let mut future: BTreeMap<u32, usize> =
                        group.members.keys().map(|id| (*id, 0)).collect();
                    for (p, owner) in group.owners() {
                        let to = group.revoking.get(&p).map_or(owner, |r| r.to);
                        *future.get_mut(&to).unwrap() += 1;
                    }
                    let min = future.values().min().copied().unwrap_or(0);
                    let max = future.values().max().copied().unwrap_or(0);
                    prop_assert!(max - min <= 1, "{future:?}");
                    let mut pollable: Vec<u32> = group
                        .members
                        .values()
                        .flat_map(|m| group.pollable(m))
                        .collect();
                    let count = pollable.len();
                    pollable.sort_unstable();
                    pollable.dedup();
                    prop_assert_eq!(pollable.len(), count);
                    prop_assert!(group.generation >= generation);
                    generation = group.generation;
                }
                // Past the timeout, nothing is pending any more.
                c.settle(now + Duration::from_secs(30));
                prop_assert!(c.groups.values().all(|g| g.revoking.is_empty()));
            }
        }
    }

    #[test]
    fn next_partition_cycles_and_fences_non_members() {
        let now = Instant::now();
        let mut c = Coordinator::default();
        c.join(KEY, 1, &[4, 5, 6], now);
        let picks: Vec<_> = (0..4)
            .map(|_| c.next_partition(KEY, 1).unwrap().unwrap())
            .collect();
        assert_eq!(picks, [4, 5, 6, 4]);
        assert_eq!(
            c.next_partition(KEY, 2),
            Err(MembershipError::NotAMember { client_id: 2 })
        );
        c.join(KEY, 2, &[4, 5, 6], now);
        c.join(KEY, 3, &[4, 5, 6], now);
        c.join(KEY, 4, &[4, 5, 6], now);
        assert_eq!(c.next_partition(KEY, 4), Ok(None));
        c.remove_group(KEY);
        assert!(c.assignment(KEY, 1).is_none());
        c.join(KEY, 1, &[4], now);
        c.retain(|k| k.group_id != 2);
        assert!(c.groups_of(1).is_empty());
    }
}
