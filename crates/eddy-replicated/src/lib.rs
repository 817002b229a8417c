//! The replicated state machines, with no async runtime: what every member of a cluster
//! applies, in log order, with the same answer everywhere. The server runs them on its Raft
//! thread ([`eddy_consensus::Runner`]); the simulator (`eddy-sim`) runs the same code on its
//! simulated members, so a bug the simulator finds is a bug of the server.
//!
//! * [`groups`]: which group is which (metadata, partitions, event shards) and where each keeps
//!   its Raft log.
//! * [`metadata`]: the metadata group's machine (users, streams, topics, consumer groups and
//!   offsets in one order) and the effects it hands the partition groups.
//! * [`partition`]: a partition's group (leader-side stamping, [`partition::Proposals`]) and
//!   its machine.
//! * [`shard`]: an event shard's machine, its compaction and the out-of-band shard copy.
//! * [`stream`] and [`event`]: what each protocol answers for an outcome (the stream error
//!   codes, the send reply; an event change, its routing and its error mapping).

#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

pub mod event;
pub mod groups;
pub mod metadata;
pub mod partition;
pub mod shard;
pub mod stream;

#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

/// An error and every cause below it on one line (`outer: cause: root cause`): what the
/// command line prints and what error details sent to clients carry.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        line.push_str(": ");
        line.push_str(&c.to_string());
        cause = c.source();
    }
    line
}
