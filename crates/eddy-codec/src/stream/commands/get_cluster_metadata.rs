//! `GET_CLUSTER_METADATA` (code 12): empty request; the reply names the cluster and its nodes.
//! A single-node server answers exactly one Leader/Healthy node (spec §1.12, §5.1.4).

use crate::stream::codec::{wire_struct, Counted, LongString};

crate::stream::commands::empty_body! {
    /// Request body of `GET_CLUSTER_METADATA` (empty).
    GetClusterMetadata
}

/// Node role: leader.
pub const ROLE_LEADER: u8 = 0;
/// Node role: follower.
pub const ROLE_FOLLOWER: u8 = 1;
/// Node status: healthy (1 starting, 2 stopping, 3 unreachable, 4 maintenance).
pub const STATUS_HEALTHY: u8 = 0;

wire_struct! {
    /// One node.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ClusterNode {
        /// Node name.
        pub name: LongString,
        /// Host to connect to.
        pub ip: LongString,
        /// TCP port (0 = disabled).
        pub tcp_port: u16,
        /// QUIC port.
        pub quic_port: u16,
        /// HTTP port.
        pub http_port: u16,
        /// WebSocket port.
        pub websocket_port: u16,
        /// 0 leader, 1 follower.
        pub role: u8,
        /// 0 healthy .. 4 maintenance.
        pub status: u8,
    }
}

wire_struct! {
    /// Reply payload of `GET_CLUSTER_METADATA`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ClusterMetadata {
        /// Cluster name.
        pub name: LongString,
        /// Nodes, count-prefixed.
        pub nodes: Counted<ClusterNode, 18>,
    }
}

crate::stream::commands::command!(GetClusterMetadata, GetClusterMetadata, ClusterMetadata);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn single_node_round_trip() {
        let metadata = ClusterMetadata {
            name: LongString::new("single-node"),
            nodes: Counted(vec![ClusterNode {
                name: LongString::new("iggy-node"),
                ip: LongString::new("127.0.0.1"),
                tcp_port: 8090,
                quic_port: 0,
                http_port: 0,
                websocket_port: 0,
                role: ROLE_LEADER,
                status: STATUS_HEALTHY,
            }]),
        };
        let bytes = round_trip_strict(&metadata);
        assert_eq!(&bytes[..4], &11u32.to_le_bytes());
        assert_eq!(
            &bytes[bytes.len() - 10..bytes.len() - 8],
            &8090u16.to_le_bytes()
        );
    }
}
