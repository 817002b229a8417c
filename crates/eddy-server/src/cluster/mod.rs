//! The cluster: this node's replicated groups, its peers and the replication port.
//!
//! `transport` owns the replication sockets; the consensus engine runs on its own thread
//! (`eddy_consensus::Runner`) and talks to the transport through queues only.

pub(crate) mod events;
pub(crate) mod incarnation;
pub(crate) mod member;
pub(crate) mod peer_tls;
pub(crate) mod raft_groups;
pub(crate) mod streams;
pub(crate) mod transport;

#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;

// A partition reads its group's log itself: it must know the bit the raft layer marks
// membership changes with.
const _: () = assert!(
    eddy_consensus::logstore::MEMBERSHIP_TAG == eddy_stream_store::replicated::MEMBERSHIP_TAG
);
