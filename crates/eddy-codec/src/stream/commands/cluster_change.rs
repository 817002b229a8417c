//! `EDDY_CLUSTER_ADD_MEMBER` (code 9001) and `EDDY_CLUSTER_REMOVE_MEMBER` (code 9002), eddy's
//! own: change the cluster's members at run time, for `eddy cluster add`, `remove` and
//! `replace`. Served by the metadata group's leader, with global `manage_servers`; the reply
//! comes once the change is complete on every replicated group.
//!
//! ```text
//! add request     [id: u64][replication_address: u32 len + UTF-8 (host:port)]
//! remove request  [id: u64]
//! reply           [complete: u8][groups: u32][message: u32 len + UTF-8]
//! ```
//!
//! A change refused or left unfinished (a member id in use, an address that does not
//! resolve, a catch-up that took too long) is answered `complete = 0` with the reason in
//! `message`, so the operator reads why; not being the metadata leader is answered
//! `TransientNotAccepted` (ask the leader).

use crate::stream::codec::{wire_struct, LongString};

wire_struct! {
    /// Request body of `EDDY_CLUSTER_ADD_MEMBER`: a member to add (a learner first, a voter
    /// once it has caught up) on every replicated group.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AddClusterMember {
        /// The new member's id (its `--node-id`; not a current member's).
        pub id: u64,
        /// Where the other members reach its replication port (`host:port`).
        pub replication_address: LongString,
    }
}

wire_struct! {
    /// Request body of `EDDY_CLUSTER_REMOVE_MEMBER`: a member to remove from every
    /// replicated group (it stops being sent to and accepted afterwards).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct RemoveClusterMember {
        /// The member's id.
        pub id: u64,
    }
}

wire_struct! {
    /// Reply payload of both membership changes.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ClusterMemberChanged {
        /// Whether the change is complete on every group.
        pub complete: bool,
        /// Replicated groups the change went through.
        pub groups: u32,
        /// Why it is not complete (empty when it is).
        pub message: LongString,
    }
}

crate::stream::commands::command!(AddClusterMember, AddClusterMember, ClusterMemberChanged);
crate::stream::commands::command!(
    RemoveClusterMember,
    RemoveClusterMember,
    ClusterMemberChanged
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn round_trips_and_layout() {
        let add = AddClusterMember {
            id: 4,
            replication_address: LongString::new("127.0.0.4:10001"),
        };
        let bytes = round_trip_strict(&add);
        assert_eq!(&bytes[..8], &4u64.to_le_bytes());
        assert_eq!(&bytes[8..12], &15u32.to_le_bytes());
        assert_eq!(&bytes[12..], b"127.0.0.4:10001");
        let remove = round_trip_strict(&RemoveClusterMember { id: 2 });
        assert_eq!(remove, 2u64.to_le_bytes());
        let reply = round_trip_strict(&ClusterMemberChanged {
            complete: false,
            groups: 12,
            message: LongString::new("why"),
        });
        assert_eq!(reply[0], 0);
        assert_eq!(&reply[1..5], &12u32.to_le_bytes());
        assert_eq!(&reply[5..9], &3u32.to_le_bytes());
        assert_eq!(&reply[9..], b"why");
    }
}
