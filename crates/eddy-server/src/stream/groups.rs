//! Consumer-group membership and partition assignment (stream protocol §7.6).
//!
//! Groups are durable metadata; their **members are not**: a member is a logged-in connection
//! (a [`ClientId`]) that joined, and it leaves on `LEAVE_CONSUMER_GROUP`, logout, disconnect or
//! stale eviction. This module is the in-memory coordinator: pure logic, no I/O, no locking (the
//! server keeps it behind one mutex).
//!
//! Assignment is eager round-robin: on every membership or partition change the topic's
//! partition ids (ascending) are dealt over the members in member-id order, partition `i` to
//! member `i % members`, and the group's generation (0 for a new group) goes up by one. So
//! while a group has members every partition has exactly one owner, and a member's
//! `SYNC_CONSUMER_GROUP` answer is always truthful. Member ids are the lowest unused id in the
//! group.
//!
//! Invariants (asserted in debug builds after every rebalance): each partition of the topic
//! is assigned to exactly one member when there are members; a client is at most one member of
//! a group.

use std::collections::BTreeMap;

use eddy_auth::sessions::ClientId;

/// A consumer group's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    /// The member's partitions, ascending.
    pub partitions: Vec<u32>,
}

/// A member as `GET_CONSUMER_GROUP` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    /// Member id within the group.
    pub id: u32,
    /// Its partitions, ascending.
    pub partitions: Vec<u32>,
}

#[derive(Debug, Clone)]
struct Member {
    client_id: ClientId,
    partitions: Vec<u32>,
    /// Round-robin cursor for polls that name no partition.
    cursor: usize,
}

#[derive(Debug, Clone, Default)]
struct Group {
    generation: u64,
    members: BTreeMap<u32, Member>,
}

impl Group {
    fn member_of(&self, client_id: ClientId) -> Option<(u32, &Member)> {
        self.members
            .iter()
            .find(|(_, m)| m.client_id == client_id)
            .map(|(id, m)| (*id, m))
    }

    fn rebalance(&mut self, partitions: &[u32]) {
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
        self.generation += 1;
        debug_assert!(
            count == 0
                || self
                    .members
                    .values()
                    .map(|m| m.partitions.len())
                    .sum::<usize>()
                    == partitions.len(),
            "every partition has exactly one owner"
        );
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
#[derive(Debug, Default)]
pub struct Coordinator {
    groups: BTreeMap<GroupKey, Group>,
}

impl Coordinator {
    /// Adds `client_id` to the group (a no-op if it is already a member) and rebalances over
    /// `partitions`, the topic's partition ids. Returns true if membership changed.
    pub fn join(&mut self, key: GroupKey, client_id: ClientId, partitions: &[u32]) -> bool {
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
        group.rebalance(partitions);
        true
    }

    /// Removes `client_id` from the group and rebalances the rest over `partitions`.
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

    /// The member's assignment, or `None` when it is not a member.
    pub fn assignment(&self, key: GroupKey, client_id: ClientId) -> Option<Assignment> {
        let group = self.groups.get(&key)?;
        let (_, member) = group.member_of(client_id)?;
        Some(Assignment {
            generation: group.generation,
            partitions: member.partitions.clone(),
        })
    }

    /// True when the member currently owns `partition_id`.
    pub fn owns(&self, key: GroupKey, client_id: ClientId, partition_id: u32) -> bool {
        self.groups
            .get(&key)
            .and_then(|g| g.member_of(client_id))
            .is_some_and(|(_, m)| m.partitions.contains(&partition_id))
    }

    /// The next of the member's partitions, round-robin (for polls that name none). `None` when
    /// it is not a member (`Err`) or owns nothing (`Ok(None)`).
    pub fn next_partition(
        &mut self,
        key: GroupKey,
        client_id: ClientId,
    ) -> Result<Option<u32>, MembershipError> {
        let member = self
            .groups
            .get_mut(&key)
            .and_then(|g| g.members.values_mut().find(|m| m.client_id == client_id))
            .ok_or(MembershipError::NotAMember { client_id })?;
        if member.partitions.is_empty() {
            return Ok(None);
        }
        let at = member.cursor % member.partitions.len();
        member.cursor = at + 1;
        Ok(Some(member.partitions[at]))
    }

    /// The members with their partitions, by member id.
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

    #[test]
    fn round_robin_with_joins_and_leaves() {
        let parts = [0, 1, 2, 3, 4];
        let mut c = Coordinator::default();
        assert!(c.join(KEY, 10, &parts));
        assert_eq!(c.assignment(KEY, 10).unwrap().generation, 1);
        assert_eq!(owners(&c, &[10]), [vec![0, 1, 2, 3, 4]]);
        assert!(!c.join(KEY, 10, &parts), "joining twice is a no-op");
        assert_eq!(c.assignment(KEY, 10).unwrap().generation, 1);
        c.join(KEY, 11, &parts);
        c.join(KEY, 12, &parts);
        assert_eq!(owners(&c, &[10, 11, 12]), [vec![0, 3], vec![1, 4], vec![2]]);
        assert_eq!(c.assignment(KEY, 12).unwrap().generation, 3);
        assert!(c.owns(KEY, 11, 4));
        assert!(!c.owns(KEY, 10, 4));
        c.leave(KEY, 11, &parts).unwrap();
        assert_eq!(owners(&c, &[10, 12]), [vec![0, 2, 4], vec![1, 3]]);
        assert_eq!(
            c.leave(KEY, 11, &parts),
            Err(MembershipError::NotAMember { client_id: 11 })
        );
        // Member ids: the lowest free one is reused.
        c.join(KEY, 13, &parts);
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
        let mut c = Coordinator::default();
        for client in 1..=3 {
            c.join(KEY, client, &[0, 1]);
        }
        assert_eq!(owners(&c, &[1, 2, 3]), [vec![0], vec![1], vec![]]);
        let generation = c.assignment(KEY, 3).unwrap().generation;
        c.repartition(0, 1, &[0, 1, 2, 3]);
        assert_eq!(owners(&c, &[1, 2, 3]), [vec![0, 3], vec![1], vec![2]]);
        assert_eq!(c.assignment(KEY, 3).unwrap().generation, generation + 1);
        c.repartition(0, 9, &[0]);
        assert_eq!(c.assignment(KEY, 3).unwrap().generation, generation + 1);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Step {
            Join(ClientId),
            Leave(ClientId),
            Partitions(u32),
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                (1u32..6).prop_map(Step::Join),
                (1u32..6).prop_map(Step::Leave),
                (0u32..9).prop_map(Step::Partitions),
            ]
        }

        proptest! {
            /// Whatever the sequence of joins, leaves and partition changes: every partition has
            /// exactly one owner while there are members, shares differ by at most one, and the
            /// generation only goes up.
            #[test]
            fn assignment_invariants(steps in proptest::collection::vec(step(), 1..40)) {
                let mut c = Coordinator::default();
                let mut partitions: Vec<u32> = (0..4).collect();
                let mut generation = 0;
                for step in steps {
                    match step {
                        Step::Join(client) => {
                            c.join(KEY, client, &partitions);
                        }
                        Step::Leave(client) => {
                            let _ = c.leave(KEY, client, &partitions);
                        }
                        Step::Partitions(n) => {
                            partitions = (0..n).collect();
                            c.repartition(KEY.stream_id, KEY.topic_id, &partitions);
                        }
                    }
                    let members = c.members(KEY);
                    if members.is_empty() {
                        continue;
                    }
                    let mut owned: Vec<u32> =
                        members.iter().flat_map(|m| m.partitions.clone()).collect();
                    owned.sort_unstable();
                    prop_assert_eq!(&owned, &partitions);
                    let sizes: Vec<usize> = members.iter().map(|m| m.partitions.len()).collect();
                    let (min, max) = (sizes.iter().min().copied(), sizes.iter().max().copied());
                    prop_assert!(max.unwrap_or(0) - min.unwrap_or(0) <= 1);
                    let now = members
                        .first()
                        .and_then(|_| c.groups.get(&KEY))
                        .map_or(0, |g| g.generation);
                    prop_assert!(now >= generation);
                    generation = now;
                }
            }
        }
    }

    #[test]
    fn next_partition_cycles_and_fences_non_members() {
        let mut c = Coordinator::default();
        c.join(KEY, 1, &[4, 5, 6]);
        let picks: Vec<_> = (0..4)
            .map(|_| c.next_partition(KEY, 1).unwrap().unwrap())
            .collect();
        assert_eq!(picks, [4, 5, 6, 4]);
        assert_eq!(
            c.next_partition(KEY, 2),
            Err(MembershipError::NotAMember { client_id: 2 })
        );
        c.join(KEY, 2, &[4, 5, 6]);
        c.join(KEY, 3, &[4, 5, 6]);
        c.join(KEY, 4, &[4, 5, 6]);
        assert_eq!(c.next_partition(KEY, 4), Ok(None));
        c.remove_group(KEY);
        assert!(c.assignment(KEY, 1).is_none());
        c.join(KEY, 1, &[4]);
        c.retain(|k| k.group_id != 2);
        assert!(c.groups_of(1).is_empty());
    }
}
