//! The stream protocol's store: metadata (streams, topics, partitions, users, tokens, consumer
//! groups, consumer offsets), partitions of message batches, snapshots and retention, on
//! `eddy-log`'s one log machinery.
//!
//! ```text
//! <root>/metadata/                 the metadata log (segments + indexes) and `snapshot`
//! <root>/partitions/<uid:020>/     one directory per partition (segments, indexes, `state`)
//! ```
//!
//! * [`metadata`]: the metadata state machine ([`MetadataState`], [`MetadataOp`]), one module
//!   per entity.
//! * [`partition`]: message batches on a log ([`Partition`]): stamping, offsets, polling
//!   strategies, retention policies, purge, the `state` file.
//! * [`store`]: everything together behind one commit entry point ([`StreamStore::commit`]):
//!   the metadata pipeline (validate, append, apply, acknowledge), snapshots, recovery,
//!   retention.
//!
//! The crate is synchronous and runtime-agnostic: it runs its own applier thread and commits
//! through an [`eddy_log::CommitPool`] (its own, or the engine's shared one with
//! [`StreamStore::open_shared`]), and acknowledges through [`eddy_log::Completion`]s and
//! [`Commit`]s you
//! can block on or `.await`. It does not depend on tokio, nor on the event store.
//!
//! # Using it
//!
//! A store in a directory, one topic, one durable append, one poll:
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use eddy_log::FsBackend;
//! use eddy_stream_store::{
//!     MetadataOp, Operation, PartitionAddr, PollStrategy, Stamp, StampWith, StreamStore,
//!     StreamStoreConfig, TopicConfig,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let (store, _recovery) = StreamStore::open(Arc::new(FsBackend::new(dir.path())?), StreamStoreConfig::default())?;
//!
//! // Metadata changes are operations with every id and timestamp already chosen.
//! store.commit(Operation::Metadata(MetadataOp::CreateStream {
//!     id: 0, name: "orders".into(), created_at: 1, options: vec![],
//! })).wait()?;
//! store.commit(Operation::Metadata(MetadataOp::CreateTopic {
//!     stream_id: 0, id: 0, name: "events".into(), created_at: 2, partitions: 1,
//!     config: TopicConfig::default(), explicit_options: vec![], derived_options: vec![],
//! })).wait()?;
//!
//! // A batch is opaque bytes plus a message count; storage assigns the base offset and the
//! // timestamp and lets the batch stamp itself (the server does this with the codec's batch).
//! let addr = PartitionAddr { stream_id: 0, topic_id: 0, partition_id: 0 };
//! let batch = StampWith {
//!     count: 3,
//!     stamp: |s: &Stamp| {
//!         let mut bytes = s.base_offset.to_le_bytes().to_vec();
//!         bytes.extend_from_slice(b"three messages");
//!         Bytes::from(bytes)
//!     },
//! };
//! let ack = store.append(addr, batch, 1_700_000_000_000_000)?.wait()?; // durable now
//! assert_eq!((ack.base_offset, ack.last_offset()), (0, 2));
//!
//! // Polls return stored batches covering the offsets asked for, plus the range to serve.
//! let polled = store.poll(addr, None, PollStrategy::Offset(1), 10, 1 << 20)?;
//! assert_eq!((polled.start_offset, polled.end_offset), (1, 3));
//! assert_eq!(&polled.batches[0].bytes[8..], b"three messages");
//! store.close()?;
//! # Ok(()) }
//! ```
//!
//! Crash and reopen on the in-memory backend (an [`eddy_log::MemBackend`] clone made before the crash
//! belongs to the dead process; open again with a fresh clone):
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use eddy_log::MemBackend;
//! use eddy_stream_store::{
//!     MetadataOp, Operation, PartitionAddr, StampWith, StreamStore, StreamStoreConfig, TopicConfig,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let disk = MemBackend::new();
//! let (store, _) = StreamStore::open(Arc::new(disk.clone()), StreamStoreConfig::default())?;
//! store.commit(Operation::Metadata(MetadataOp::CreateStream {
//!     id: 0, name: "s".into(), created_at: 0, options: vec![],
//! })).wait()?;
//! store.commit(Operation::Metadata(MetadataOp::CreateTopic {
//!     stream_id: 0, id: 0, name: "t".into(), created_at: 0, partitions: 1,
//!     config: TopicConfig::default(), explicit_options: vec![], derived_options: vec![],
//! })).wait()?;
//! let addr = PartitionAddr { stream_id: 0, topic_id: 0, partition_id: 0 };
//! let batch = StampWith { count: 1, stamp: |_: &eddy_stream_store::Stamp| Bytes::from_static(b"kept") };
//! store.append(addr, batch, 0)?.wait()?;
//!
//! disk.crash(); // power cut: every unsynced byte is gone
//! drop(store);
//! let (store, _) = StreamStore::open(Arc::new(disk.clone()), StreamStoreConfig::default())?;
//! let batches = store.partition(addr)?.read(0, 10, u64::MAX)?;
//! assert_eq!(&batches[0].bytes[..], b"kept"); // acknowledged, therefore durable
//! # Ok(()) }
//! ```
//!
//! # Invariants
//!
//! 1. An acknowledged batch of a topic with `enforce_fsync` (the default) was fdatasynced
//!    before its acknowledgement; readers never see a batch before it is acknowledged.
//! 2. An offset handed out is never handed out again within one purge generation (with
//!    background durability the partition's offset frontier stays ahead of acknowledged
//!    offsets).
//! 3. Metadata apply is deterministic; readers see only durable, applied metadata, and a topic
//!    is never visible without its partitions.
//! 4. Refused metadata operations write nothing.
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

pub mod changes;
pub mod error;
pub mod metadata;
pub mod partition;
pub mod replicated;
pub mod replicated_metadata;
pub mod store;

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;

pub use error::{EncodingError, Entity, MetadataError, Result, StreamStoreError};
pub use metadata::{ConsumerKey, MetadataOp, MetadataState, TopicConfig};
pub use partition::{
    AppendTicket, Appended, Partition, PartitionAddr, PartitionConfig, PartitionOpen,
    PartitionStats, PollStrategy, Polled, RetentionPolicy, Stamp, StampWith, StampableBatch,
    StoredBatch,
};
pub use replicated::{ApplyOutcome, PartitionEntry, ReplicatedPartition, ReplicatedSnapshot};
pub use store::{
    Applied, Commit, Operation, RetentionReport, StreamCipherFn, StreamCiphers, StreamStore,
    StreamStoreConfig, StreamStoreRecovery,
};
