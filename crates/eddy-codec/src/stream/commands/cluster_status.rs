//! `EDDY_CLUSTER_STATUS` (code 9000, eddy's own: Iggy's registry has no code at or above
//! 9000): what one member knows of the cluster, for `eddy cluster status`. Empty request;
//! the reply lists the members as this member sees them and every replicated group it holds
//! with its role, leader, indexes and, where it leads, how far each member is behind.
//!
//! ```text
//! reply  [node_id: u64][peer_tls: u8]
//!        [members: u32 count]{ [id: u64][stream_address: u32 len + UTF-8][connected: u8] }
//!        [groups: u32 count]{ [kind: u8][id: u64][stream_id: u32][topic_id: u32]
//!                             [partition_id: u32][role: u8][leader: u64][term: u64]
//!                             [commit: u64][applied: u64][last_index: u64][failed: u8]
//!                             [lag: u32 count]{ [member: u64][behind: u64] } }
//! ```
//!
//! A single node answers one member (itself, connected) and no groups.

use crate::stream::codec::{wire_struct, Counted, LongString};

crate::stream::commands::empty_body! {
    /// Request body of `EDDY_CLUSTER_STATUS` (empty).
    GetClusterStatus
}

/// [`GroupState::kind`]: the metadata group.
pub const GROUP_METADATA: u8 = 0;
/// [`GroupState::kind`]: a partition's group.
pub const GROUP_PARTITION: u8 = 1;
/// [`GroupState::kind`]: an event-store shard's group.
pub const GROUP_EVENT_SHARD: u8 = 2;

/// [`GroupState::role`]: follower (or learner).
pub const ROLE_FOLLOWER: u8 = 0;
/// [`GroupState::role`]: candidate.
pub const ROLE_CANDIDATE: u8 = 1;
/// [`GroupState::role`]: leader.
pub const ROLE_LEADER: u8 = 2;

wire_struct! {
    /// One member as the answering member sees it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct MemberState {
        /// Member id.
        pub id: u64,
        /// The stream address it advertised (empty until it greeted this member).
        pub stream_address: LongString,
        /// Whether this member has a live authenticated link to it (itself: true).
        pub connected: bool,
    }
}

wire_struct! {
    /// How far one member's log is behind the leader's.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct MemberLag {
        /// Member id.
        pub member: u64,
        /// Entries the leader holds that the member has not acknowledged.
        pub behind: u64,
    }
}

wire_struct! {
    /// One replicated group on the answering member.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GroupState {
        /// [`GROUP_METADATA`], [`GROUP_PARTITION`] or [`GROUP_EVENT_SHARD`].
        pub kind: u8,
        /// The partition's unique id or the shard's index (0 for the metadata group).
        pub id: u64,
        /// A partition's stream (0 otherwise).
        pub stream_id: u32,
        /// A partition's topic (0 otherwise).
        pub topic_id: u32,
        /// A partition's id in its topic (0 otherwise).
        pub partition_id: u32,
        /// This member's role: [`ROLE_FOLLOWER`], [`ROLE_CANDIDATE`] or [`ROLE_LEADER`].
        pub role: u8,
        /// The leader this member knows (0: none).
        pub leader: u64,
        /// Current term.
        pub term: u64,
        /// Highest index known committed.
        pub commit: u64,
        /// Highest index applied here.
        pub applied: u64,
        /// Last index in this member's log.
        pub last_index: u64,
        /// Whether the group's storage failed here (stopped until a restart).
        pub failed: bool,
        /// On the leader: every other member's lag; empty elsewhere.
        pub lag: Counted<MemberLag, 16>,
        /// The group's voters as this member's configuration has them, ascending.
        pub voters: Counted<u64, 8>,
        /// Its learners: members that receive the log and do not vote yet (being added).
        pub learners: Counted<u64, 8>,
    }
}

wire_struct! {
    /// Reply payload of `EDDY_CLUSTER_STATUS`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ClusterStatus {
        /// The answering member.
        pub node_id: u64,
        /// Whether its replication port authenticates members with mutual TLS.
        pub peer_tls: bool,
        /// The members it knows, itself included.
        pub members: Counted<MemberState, 13>,
        /// The groups it holds.
        pub groups: Counted<GroupState, 75>,
    }
}

crate::stream::commands::command!(GetClusterStatus, GetClusterStatus, ClusterStatus);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn round_trip_and_layout() {
        let status = ClusterStatus {
            node_id: 2,
            peer_tls: true,
            members: Counted(vec![MemberState {
                id: 1,
                stream_address: LongString::new("127.0.0.1:8090"),
                connected: true,
            }]),
            groups: Counted(vec![GroupState {
                kind: GROUP_PARTITION,
                id: 7,
                stream_id: 1,
                topic_id: 2,
                partition_id: 3,
                role: ROLE_LEADER,
                leader: 2,
                term: 4,
                commit: 10,
                applied: 10,
                last_index: 11,
                failed: false,
                lag: Counted(vec![MemberLag {
                    member: 1,
                    behind: 1,
                }]),
                voters: Counted(vec![1, 2]),
                learners: Counted(vec![4]),
            }]),
        };
        let bytes = round_trip_strict(&status);
        // node_id, peer_tls, one member (8 + 4 + 14 + 1), one group (75 with no lag, voters or
        // learners; then one lag, two voters, one learner).
        assert_eq!(bytes.len(), 8 + 1 + 4 + 27 + 4 + 75 + 16 + 16 + 8);
        assert_eq!(&bytes[..8], &2u64.to_le_bytes());
        assert_eq!(bytes[8], 1);
    }
}
