//! Which group is which, and where each keeps its Raft log under the data directory: the
//! metadata group is `GroupId(0)`, partition `uid`'s group is `uid + 1`, event shard `s`'s is
//! [`EVENT_GROUP_BASE`] `+ s` (far above any partition uid).

use std::path::{Path, PathBuf};

use eddy_consensus::GroupId;

/// The metadata group's id.
pub const METADATA_GROUP: GroupId = GroupId(0);
/// Where partition groups' logs live, under the data directory.
pub const PARTITIONS_DIR: &str = "raft/partitions";

/// The group of the partition with `uid`.
pub fn partition_group_id(uid: u64) -> GroupId {
    GroupId(uid + 1)
}

/// The directory of the partition group with `uid`, under the data directory.
pub fn partition_dir(uid: u64) -> PathBuf {
    Path::new(PARTITIONS_DIR).join(format!("{uid:020}"))
}

/// Group id of event-store shard 0 (shard `s` is this plus `s`): far above partition uids.
pub const EVENT_GROUP_BASE: u64 = 1 << 62;
/// Where event shards' group logs live, under the data directory.
pub const EVENTS_DIR: &str = "raft/events";

/// The group of event-store shard `shard`.
pub fn event_group_id(shard: u32) -> GroupId {
    GroupId(EVENT_GROUP_BASE + u64::from(shard))
}
