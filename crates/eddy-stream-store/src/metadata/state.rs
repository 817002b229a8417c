//! The metadata state machine: the state, its queries, and [`MetadataState::apply`], which
//! validates one operation and hands it to the module of its entity (streams, topics and
//! partitions, users and tokens, consumer groups, consumer offsets).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::MetadataError;
use crate::partition::PartitionAddr;

use super::checks::check_name;
use super::config::MAX_REPLICAS;
use super::op::MetadataOp;
use super::records::{Effect, PartitionRecord, StreamRecord, TopicConfig, TopicRecord, UserRecord};
use super::{consumer_groups, offsets, streams, topics, users};

/// The whole metadata state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataState {
    /// Streams by id.
    pub streams: BTreeMap<u32, StreamRecord>,
    /// Users by id.
    pub users: BTreeMap<u32, UserRecord>,
    /// The next partition uid.
    pub next_partition_uid: u64,
    /// The members each placed partition (by uid) was founded on; a partition missing here
    /// lives on the cluster's founding members. Not part of the serde form: a snapshot
    /// carries it in a section after the state (see `encoding`), so snapshots written before
    /// it still decode.
    #[serde(skip)]
    pub placement: BTreeMap<u64, Vec<u64>>,
    /// The cluster's members recorded by [`MetadataOp::SetMember`]: id to replication
    /// address. Empty in a cluster whose metadata never recorded one (its members are the
    /// ones its `--peer` flags name) and on a single node. Carried like `placement`.
    #[serde(skip)]
    pub members: BTreeMap<u64, String>,
}

impl MetadataState {
    /// A stream by id.
    pub fn stream(&self, id: u32) -> Option<&StreamRecord> {
        self.streams.get(&id)
    }

    /// A topic by ids.
    pub fn topic(&self, stream_id: u32, topic_id: u32) -> Option<&TopicRecord> {
        self.streams.get(&stream_id)?.topics.get(&topic_id)
    }

    /// A partition by address.
    pub fn partition(&self, addr: PartitionAddr) -> Option<&PartitionRecord> {
        self.topic(addr.stream_id, addr.topic_id)?
            .partitions
            .get(&addr.partition_id)
    }

    /// A stream by name.
    pub fn stream_by_name(&self, name: &str) -> Option<&StreamRecord> {
        self.streams.values().find(|s| s.name == name)
    }

    /// A user by username.
    pub fn user_by_name(&self, username: &str) -> Option<&UserRecord> {
        self.users.values().find(|u| u.username == username)
    }

    /// The lowest stream id not in use (stream ids are reused, stream protocol 7.1).
    pub fn lowest_free_stream_id(&self) -> u32 {
        lowest_free(self.streams.keys().copied())
    }

    /// The lowest topic id not in use in a stream.
    pub fn lowest_free_topic_id(&self, stream_id: u32) -> Option<u32> {
        self.streams
            .get(&stream_id)
            .map(|s| lowest_free(s.topics.keys().copied()))
    }

    /// The lowest user id not in use.
    pub fn lowest_free_user_id(&self) -> u32 {
        lowest_free(self.users.keys().copied())
    }

    /// Every partition with its address and topic config, in address order.
    pub fn partitions(
        &self,
    ) -> impl Iterator<Item = (PartitionAddr, &PartitionRecord, &TopicConfig)> + '_ {
        self.streams.values().flat_map(|s| {
            s.topics.values().flat_map(move |t| {
                t.partitions.values().map(move |p| {
                    (
                        PartitionAddr {
                            stream_id: s.id,
                            topic_id: t.id,
                            partition_id: p.id,
                        },
                        p,
                        &t.config,
                    )
                })
            })
        })
    }

    /// The members the partition with `uid` was founded on (`None`: the cluster's founding
    /// members).
    pub fn replicas(&self, uid: u64) -> Option<&[u64]> {
        self.placement.get(&uid).map(Vec::as_slice)
    }

    /// Validates and applies one operation. On error the state is unchanged.
    pub fn apply(&mut self, op: &MetadataOp) -> Result<Vec<Effect>, MetadataError> {
        if let MetadataOp::Placed { replicas, op } = op {
            return self.apply_placed(replicas, op);
        }
        let effects = self.apply_unplaced(op)?;
        for effect in &effects {
            if let Effect::DeletePartition { uid, .. } = effect {
                self.placement.remove(uid);
            }
        }
        Ok(effects)
    }

    /// Applies a creating operation whose new partitions live on `replicas`.
    fn apply_placed(
        &mut self,
        replicas: &[u64],
        op: &MetadataOp,
    ) -> Result<Vec<Effect>, MetadataError> {
        if !matches!(
            op,
            MetadataOp::CreateTopic { .. } | MetadataOp::CreatePartitions { .. }
        ) {
            return Err(MetadataError::Placement(
                "only a topic or partition creation is placed".into(),
            ));
        }
        if replicas.is_empty() || replicas.len() > MAX_REPLICAS {
            return Err(MetadataError::Placement(
                "a partition lives on 1 to 64 members".into(),
            ));
        }
        let mut sorted = replicas.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != replicas.len() {
            return Err(MetadataError::Placement("a member is named twice".into()));
        }
        let effects = self.apply_unplaced(op)?;
        for effect in &effects {
            if let Effect::CreatePartition { uid, .. } = effect {
                self.placement.insert(*uid, replicas.to_vec());
            }
        }
        Ok(effects)
    }

    fn apply_unplaced(&mut self, op: &MetadataOp) -> Result<Vec<Effect>, MetadataError> {
        let mut effects = Vec::new();
        match op {
            MetadataOp::CreateStream { .. }
            | MetadataOp::UpdateStream { .. }
            | MetadataOp::DeleteStream { .. }
            | MetadataOp::PurgeStream { .. } => {
                streams::apply(&mut self.streams, op, &mut effects)?;
            }
            MetadataOp::CreateTopic { .. }
            | MetadataOp::UpdateTopic { .. }
            | MetadataOp::DeleteTopic { .. }
            | MetadataOp::PurgeTopic { .. }
            | MetadataOp::CreatePartitions { .. }
            | MetadataOp::DeletePartitions { .. } => {
                let uids = &mut self.next_partition_uid;
                topics::apply(&mut self.streams, uids, op, &mut effects)?;
            }
            MetadataOp::CreateUser { .. }
            | MetadataOp::UpdateUser { .. }
            | MetadataOp::ChangePassword { .. }
            | MetadataOp::UpdatePermissions { .. }
            | MetadataOp::DeleteUser { .. }
            | MetadataOp::CreateToken { .. }
            | MetadataOp::DeleteToken { .. } => users::apply(&mut self.users, op)?,
            MetadataOp::CreateConsumerGroup { .. } | MetadataOp::DeleteConsumerGroup { .. } => {
                consumer_groups::apply(&mut self.streams, op)?;
            }
            MetadataOp::StoreConsumerOffset { .. } | MetadataOp::DeleteConsumerOffset { .. } => {
                offsets::apply(&mut self.streams, op)?;
            }
            MetadataOp::Placed { .. } => {
                return Err(MetadataError::Placement(
                    "a placed operation inside another".into(),
                ));
            }
            MetadataOp::SetMember { id, address } => {
                check_name(address)?;
                if *id == 0 {
                    return Err(MetadataError::Placement("member id 0".into()));
                }
                self.members.insert(*id, address.clone());
            }
            MetadataOp::RemoveMember { id } => {
                if self.members.remove(id).is_none() {
                    return Err(MetadataError::MemberNotFound(*id));
                }
            }
        }
        Ok(effects)
    }
}

fn lowest_free(used: impl Iterator<Item = u32>) -> u32 {
    let mut candidate = 0u32;
    for id in used {
        if id != candidate {
            break;
        }
        candidate += 1;
    }
    candidate
}
