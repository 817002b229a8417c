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
pub mod store;

pub use cache::Cache;
pub use completion::{completion, Completer, Completion};
pub use error::{Corruption, IoOp, MetadataError, Result, StorageError};
pub use file::{DirEntry, FsBackend, MemBackend, OpenMode, StorageBackend, StorageFile};
pub use log::{
    Assigned, CommitHook, Durability, Log, LogBounds, LogConfig, OpenOptions, RecordMeta,
    RecoveryReport, SegmentSummary, StoredRecord, VerifyOnOpen,
};
pub use metadata::{ConsumerKey, MetadataOp, MetadataState, TopicConfig};
pub use partition::{
    AppendTicket, Appended, Partition, PartitionAddr, PartitionConfig, PartitionOpen,
    PartitionStats, PollStrategy, Polled, RetentionPolicy, Stamp, StampWith, StampableBatch,
    StoredBatch,
};
pub use pool::{CommitPool, CommitStatsSnapshot};
pub use store::{Applied, Commit, Operation, RetentionReport, Store, StoreConfig, StoreRecovery};
