//! Segmented checksummed logs, partitions, metadata and recovery.

pub mod cache;
pub mod completion;
pub mod error;
pub mod file;
pub mod format;
pub mod log;
pub mod metadata;
pub mod partition;
pub mod pool;

pub use cache::Cache;
pub use completion::{completion, Completer, Completion};
pub use error::{Corruption, IoOp, MetadataError, Result, StorageError};
pub use file::{DirEntry, FsBackend, MemBackend, OpenMode, StorageBackend, StorageFile};
pub use log::{
    AckGate, Assigned, Durability, Log, LogBounds, LogConfig, OpenOptions, RecordMeta,
    RecoveryReport, SegmentSummary, StoredRecord, VerifyOnOpen,
};
pub use partition::{
    AppendTicket, Appended, Partition, PartitionAddr, PartitionConfig, PartitionOpen,
    PartitionStats, PollStrategy, Polled, RetentionPolicy, Stamp, StampWith, StampableBatch,
    StoredBatch,
};
pub use pool::{CommitPool, CommitStatsSnapshot};
