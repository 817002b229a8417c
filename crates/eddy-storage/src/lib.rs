//! Segmented checksummed logs, partitions, the event store, metadata and recovery.
