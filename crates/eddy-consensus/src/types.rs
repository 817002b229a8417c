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
    /// A membership change in the engine's first encoding (never proposed by eddy, applied
    /// like [`EntryKind::ConfChangeV2`] should an older log hold one).
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

/// Who takes part in a group: as the group started, or as of the membership change applied at
/// `index` (joint consensus while `voters_outgoing` is not empty).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Membership {
    /// Members whose votes count (in a joint configuration: the incoming ones).
    pub voters: Vec<NodeId>,
    /// Members that receive the log without voting (a member catching up before it votes).
    pub learners: Vec<NodeId>,
    /// In a joint configuration, the outgoing voters (a majority of both must agree).
    pub voters_outgoing: Vec<NodeId>,
    /// In a joint configuration, outgoing voters that become learners once it is left.
    pub learners_next: Vec<NodeId>,
    /// The engine leaves the joint configuration by itself once it is applied.
    pub auto_leave: bool,
    /// Log index of the change that produced it (0: the group's initial members).
    pub index: u64,
}

impl Membership {
    /// A group's initial members: `voters` vote, nobody learns.
    pub fn initial(voters: Vec<NodeId>) -> Self {
        Membership {
            voters,
            ..Membership::default()
        }
    }

    /// Whether `node` takes part at all (votes or learns, now or in the outgoing half).
    pub fn contains(&self, node: NodeId) -> bool {
        self.voters.contains(&node)
            || self.learners.contains(&node)
            || self.voters_outgoing.contains(&node)
            || self.learners_next.contains(&node)
    }

    /// Every member that takes part, once each, in order.
    pub fn members(&self) -> Vec<NodeId> {
        let mut all: Vec<NodeId> = self
            .voters
            .iter()
            .chain(&self.learners)
            .chain(&self.voters_outgoing)
            .chain(&self.learners_next)
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Whether the group is between two configurations (joint consensus).
    pub fn is_joint(&self) -> bool {
        !self.voters_outgoing.is_empty()
    }

    /// The stable encoding stores persist: version u8 (1), index u64, auto_leave u8, then the
    /// four lists (voters, learners, voters_outgoing, learners_next), each a u16 count and
    /// that many u64 ids; little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let lists = [
            &self.voters,
            &self.learners,
            &self.voters_outgoing,
            &self.learners_next,
        ];
        let mut out = Vec::with_capacity(10 + lists.iter().map(|l| 2 + 8 * l.len()).sum::<usize>());
        out.push(1);
        out.extend_from_slice(&self.index.to_le_bytes());
        out.push(u8::from(self.auto_leave));
        for list in lists {
            let count = u16::try_from(list.len()).expect("a membership list fits in u16");
            out.extend_from_slice(&count.to_le_bytes());
            for id in list {
                out.extend_from_slice(&id.to_le_bytes());
            }
        }
        out
    }

    /// Decodes [`Membership::encode`]'s bytes, returning what follows them; `None` when they
    /// are not a membership.
    pub fn decode(bytes: &[u8]) -> Option<(Membership, &[u8])> {
        let (&version, rest) = bytes.split_first()?;
        if version != 1 || rest.len() < 9 {
            return None;
        }
        let index = u64::from_le_bytes(rest[..8].try_into().ok()?);
        let auto_leave = match rest[8] {
            0 => false,
            1 => true,
            _ => return None,
        };
        let mut rest = &rest[9..];
        let mut lists: [Vec<NodeId>; 4] = Default::default();
        for list in &mut lists {
            let count = usize::from(u16::from_le_bytes(rest.get(..2)?.try_into().ok()?));
            rest = &rest[2..];
            let body = rest.get(..count * 8)?;
            *list = body
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            rest = &rest[count * 8..];
        }
        let [voters, learners, voters_outgoing, learners_next] = lists;
        Some((
            Membership {
                voters,
                learners,
                voters_outgoing,
                learners_next,
                auto_leave,
                index,
            },
            rest,
        ))
    }
}

/// One step of a membership change (see `Node::propose_membership`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberChange {
    /// Make a member vote (a learner is promoted; a new member joins voting).
    AddVoter(NodeId),
    /// Add a member that receives the log without voting (how a new member catches up).
    AddLearner(NodeId),
    /// Remove a member from the group.
    Remove(NodeId),
}
