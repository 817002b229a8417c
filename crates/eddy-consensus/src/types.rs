//! The plain types a replicated group is made of: ids, log entries, hard state, snapshots.
//!
//! They mirror the engine's protobuf types field for field but belong to eddy, so the stores
//! that implement [`GroupStore`](crate::GroupStore) never see the engine's types and the engine
//! can change without touching them.

use bytes::Bytes;

/// A node of the cluster (`--node-id`, at least 1).
pub type NodeId = u64;

/// One replicated group: the metadata group or a data group (a partition, an event shard).
///
/// The application chooses the numbering; every node must map the same group to the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub u64);

impl GroupId {
    /// The metadata group (users, tokens, streams, topics, partitions, groups, offsets).
    pub const METADATA: GroupId = GroupId(0);
}

impl std::fmt::Display for GroupId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "g{}", self.0)
    }
}

/// What a log entry carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// Application data (empty for the entry a new leader appends at the start of its term).
    Normal,
    /// A membership change (engine-encoded). eddy's membership is static; these only appear
    /// if a future version proposes them, and are replicated like any entry.
    ConfChange,
    /// A joint-consensus membership change (engine-encoded).
    ConfChangeV2,
}

impl EntryKind {
    /// The one-byte code stores persist.
    pub fn code(self) -> u8 {
        match self {
            EntryKind::Normal => 0,
            EntryKind::ConfChange => 1,
            EntryKind::ConfChangeV2 => 2,
        }
    }

    /// The kind of a persisted code, if it is one.
    pub fn from_code(code: u8) -> Option<EntryKind> {
        match code {
            0 => Some(EntryKind::Normal),
            1 => Some(EntryKind::ConfChange),
            2 => Some(EntryKind::ConfChangeV2),
            _ => None,
        }
    }
}

/// One entry of a group's replicated log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Position in the log, contiguous from 1.
    pub index: u64,
    /// The leader term that appended it.
    pub term: u64,
    /// Data or membership change.
    pub kind: EntryKind,
    /// The payload, exactly as proposed (never re-encoded).
    pub data: Bytes,
}

impl LogEntry {
    /// Payload bytes plus a fixed per-entry overhead, the unit of every byte limit.
    pub fn size(&self) -> u64 {
        self.data.len() as u64 + ENTRY_OVERHEAD
    }
}

/// Bytes counted for an entry besides its payload (index, term, kind).
pub const ENTRY_OVERHEAD: u64 = 24;

/// The state a member must keep durable besides its log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HardState {
    /// Latest term seen.
    pub term: u64,
    /// Candidate voted for in `term` (0: none).
    pub vote: NodeId,
    /// Highest index known committed (may lag after a restart: it is recomputed).
    pub commit: u64,
}

/// Where a snapshot (or the compacted prefix of a log) ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotMeta {
    /// Index of the last entry the snapshot covers (0: none).
    pub index: u64,
    /// Term of that entry.
    pub term: u64,
}

/// A state-machine snapshot: what a member needs instead of the log up to `meta.index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Its end.
    pub meta: SnapshotMeta,
    /// Application bytes (the store defines them).
    pub data: Bytes,
}

/// A member's role in one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Replicates the leader's log.
    Follower,
    /// Asking for votes (pre-vote included).
    Candidate,
    /// Orders and commits proposals.
    Leader,
}

impl Role {
    /// Lower-case name for logs, metrics and `/health`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Leader => "leader",
        }
    }
}
