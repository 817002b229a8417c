//! Replication for eddy: every replicated group (the metadata group, each stream partition,
//! each event-store shard) is a Raft group run by TiKV's `raft` crate (raft-rs), the engine
//! that has replicated TiKV's data for years.
//!
//! This crate adapts the engine to eddy and stays runtime-agnostic:
//! * [`GroupStore`] is what a group needs from the application: its durable log, hard state
//!   and state machine in one object, because eddy's data groups keep one copy of each byte
//!   (a partition's replicated log is its message log);
//! * [`Replicated`] is the [`GroupStore`] on disk: a group's Raft log on an `eddy-log`
//!   [`Log`](eddy_log::Log) ([`RaftLog`], entries as records, hard state in `raft.state`)
//!   joined with the application's [`StateMachine`] (see [`logstore`]);
//! * [`Node`] runs every group of one process as a state machine: the caller feeds it ticks,
//!   peer messages and proposals, and takes frames for peers and role changes. It owns no
//!   thread, socket or clock, so the server drives it from a thread and the simulator from a
//!   seeded scheduler;
//! * [`Runner`] puts a node on a thread of its own (what the server runs), publishing every
//!   group's role and leader in a [`View`] request handlers read;
//! * [`wire`] is the replication port's framing (greeting, batches of engine messages).
//!
//! # Guarantees
//! * A proposal's callback reports success only once its entry is committed (durable on a
//!   majority, this node included) and applied here.
//! * Messages that depend on durable state (votes, append acknowledgements) leave only after
//!   that state is durable; a changed term or vote is synced before they leave.
//! * A leader that loses its majority steps down after an election timeout (check-quorum), and
//!   refuses proposals beyond `max_uncommitted_bytes` instead of queueing without bound.
//!
//! # A three-member group in memory
//!
//! ```
//! use bytes::Bytes;
//! use eddy_consensus::testing::{MemDisk, MemStore};
//! use eddy_consensus::{GroupId, Node, NodeConfig};
//!
//! let mut nodes: Vec<Node<u64>> = (1..=3)
//!     .map(|id| {
//!         let mut node = Node::new(NodeConfig::new(id, vec![1, 2, 3]), || {});
//!         node.add_group(GroupId(7), Box::new(MemStore::open(MemDisk::new()))).unwrap();
//!         node
//!     })
//!     .collect();
//! nodes[0].campaign(GroupId(7));
//! let acked = std::sync::Arc::new(std::sync::Mutex::new(None));
//! for round in 0..20 {
//!     if round == 5 {
//!         let acked = acked.clone();
//!         nodes[0].propose(GroupId(7), Bytes::from_static(b"hello"),
//!             Box::new(move |r| *acked.lock().unwrap() = Some(r)));
//!     }
//!     // Deliver every message (a perfect network).
//!     for i in 0..3 {
//!         nodes[i].process();
//!         for (to, batch) in nodes[i].take_outbound() {
//!             let from = nodes[i].id();
//!             nodes[(to - 1) as usize].receive(from, batch);
//!         }
//!     }
//! }
//! assert!(matches!(*acked.lock().unwrap(), Some(Ok(_))));
//! ```
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

mod adapter;
mod convert;
mod group;
mod logger;
pub mod logstore;
mod node;
pub mod runner;
mod store;
pub mod testing;
mod types;
pub mod wire;

pub use group::{Callback, MembershipDone, ReadDone};
pub use logstore::{RaftLog, Replicated, StateMachine};
pub use node::{
    Event, GroupStatus, Node, NodeConfig, NodeError, ProposeError, MAX_MAINTAINED_PER_TICK,
};
pub use runner::{GroupView, Runner, View};
pub use store::{Durable, GroupStore, StoreError, WrapStore};
pub use types::{
    EntryKind, GroupId, HardState, LogEntry, MemberChange, Membership, NodeId, Role, Snapshot,
    SnapshotMeta, ENTRY_OVERHEAD,
};
