//! A log's configuration: segment size, index density, durability, verification, the
//! group-commit bound and window, and the limits they are checked against.

use crate::error::{LogError, Result};

/// Smallest accepted segment size (tiny segments are for tests).
pub const MIN_SEGMENT_SIZE: u64 = 128;
/// Largest accepted segment size: 4 GiB.
pub const MAX_SEGMENT_SIZE: u64 = 4 * 1024 * 1024 * 1024;
/// Default segment size: 1 GiB, as Iggy.
pub const DEFAULT_SEGMENT_SIZE: u64 = 1024 * 1024 * 1024;
/// Default distance in bytes between sparse index entries.
pub const DEFAULT_INDEX_INTERVAL: u64 = 64 * 1024;
/// Default bound on the bytes one group commit writes (a larger record is written alone).
pub const DEFAULT_MAX_GROUP_BYTES: u64 = 16 * 1024 * 1024;
/// Default [`LogConfig::preallocate`]: off (see there for what it measured).
pub const DEFAULT_PREALLOCATE: u64 = 0;
/// Appends block while this many record bytes (headers included) are queued on one log
/// (back-pressure).
pub const MAX_QUEUED_BYTES: u64 = 256 * 1024 * 1024;

/// When an append is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// After fdatasync of its bytes (group-committed). eddy's default.
    Fsync,
    /// After the write reaches the page cache; the writer syncs once this many records or bytes
    /// are unsynced (Iggy's `messages_required_to_save` / `size_of_messages_required_to_save`),
    /// and on [`Log::flush`](crate::Log::flush), rolls and purges.
    Background {
        /// Sync when at least this many records are unsynced (at least 1).
        max_unsynced_records: u64,
        /// Sync when at least this many bytes are unsynced (at least 1).
        max_unsynced_bytes: u64,
    },
}

/// How much of the log is verified when it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyOnOpen {
    /// Read every record of every segment and verify both checksums; cross-check every index
    /// entry (rebuilding only indexes that disagree).
    Full,
    /// Trust a sealed segment whose index verifies and carries a seal entry matching the file
    /// length; scan the active segment from its last index entry. Record headers before that
    /// are still walked (one header read per record, no payload read) to count the records.
    Tail,
}

/// Configuration of one log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// The active segment is sealed once it holds at least this many bytes (soft limit: a
    /// segment ends after the record that crosses it).
    pub segment_size: u64,
    /// A sparse index entry is written for the first record at least this many bytes after the
    /// previous entry (and for the first record of each segment).
    pub index_interval: u64,
    /// When appends are acknowledged.
    pub durability: Durability,
    /// How much recovery verifies.
    pub verify_on_open: VerifyOnOpen,
    /// Verify the payload checksum of every record a read returns.
    pub verify_on_read: bool,
    /// Instead of refusing to open on interior corruption, cut the damaged segment at the damage
    /// (losing the rest of that segment) and report it in [`RecoveryReport::repairs`](crate::RecoveryReport::repairs).
    pub repair: bool,
    /// Upper bound of the bytes one group commit writes.
    pub max_group_bytes: u64,
    /// Group-commit window (Celeriant's `fsync_delay`): when appends arrived while the last
    /// group was being written and synced, the next group waits until this long after that
    /// sync before it is taken, so one fdatasync covers more appends. A log that was idle
    /// writes its first append at once, and a full group (`max_group_bytes`) never waits.
    /// The wait ends early once as many appends are queued as were queued behind the last
    /// group plus the ones it acknowledged (its writers are back). Zero (the default) takes
    /// every group as soon as the writer is free. Only a log that syncs every group
    /// ([`Durability::Fsync`]) waits: without a sync per group there is nothing to share; and
    /// with a [`WindowGate`](crate::WindowGate) ([`OpenOptions::window_gate`](crate::OpenOptions::window_gate)) only while it is open.
    pub group_window: std::time::Duration,
    /// The active segment is extended with this many bytes of zeros at a time, written ahead
    /// of the records, so a group commit's `fdatasync` writes data only (an append that grows
    /// the file also makes the file system commit the new size). Used for groups of at most a
    /// sixteenth of it, where the saved size commit outweighs writing the space twice (small
    /// records: events, Raft entries, small batches); bigger groups append. Zero (the default)
    /// turns it off. Recovery cuts the zeros past the last record; a sealed segment and a
    /// closed log's active segment are cut to their records.
    ///
    /// Measured on ext4 (virtio disk, 2 cores) with 1 MiB: one writer on the log or the event
    /// store alone writes 1.3-1.6x more records per second at 0.7x the CPU; the event server
    /// (which turns it on for a single node's shard logs) answered 1 and 10 connections at
    /// 1.21x and 1.39-1.42x the writes per second. A shorter fdatasync also makes the groups
    /// behind it smaller where a [`LogConfig::group_window`] ends at its deadline.
    pub preallocate: u64,
}

/// Largest accepted [`LogConfig::group_window`].
pub const MAX_GROUP_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_size: DEFAULT_SEGMENT_SIZE,
            index_interval: DEFAULT_INDEX_INTERVAL,
            durability: Durability::Fsync,
            verify_on_open: VerifyOnOpen::Full,
            verify_on_read: true,
            repair: false,
            max_group_bytes: DEFAULT_MAX_GROUP_BYTES,
            group_window: std::time::Duration::ZERO,
            preallocate: DEFAULT_PREALLOCATE,
        }
    }
}

impl LogConfig {
    /// Checks every field against its limits.
    pub fn validate(&self) -> Result<()> {
        if !(MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&self.segment_size) {
            return Err(LogError::InvalidConfig {
                field: "segment_size",
                value: self.segment_size,
            });
        }
        if self.index_interval == 0 {
            return Err(LogError::InvalidConfig {
                field: "index_interval",
                value: 0,
            });
        }
        if self.max_group_bytes == 0 {
            return Err(LogError::InvalidConfig {
                field: "max_group_bytes",
                value: 0,
            });
        }
        if self.group_window > MAX_GROUP_WINDOW {
            return Err(LogError::InvalidConfig {
                field: "group_window",
                value: u64::try_from(self.group_window.as_micros()).unwrap_or(u64::MAX),
            });
        }
        if let Durability::Background {
            max_unsynced_records,
            max_unsynced_bytes,
        } = self.durability
        {
            if max_unsynced_records == 0 {
                return Err(LogError::InvalidConfig {
                    field: "max_unsynced_records",
                    value: 0,
                });
            }
            if max_unsynced_bytes == 0 {
                return Err(LogError::InvalidConfig {
                    field: "max_unsynced_bytes",
                    value: 0,
                });
            }
        }
        Ok(())
    }
}
