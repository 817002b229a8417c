//! The metadata change journal: what each applied [`MetadataOp`] changed, as entity-level
//! [`Change`]s, for `GET_METADATA_CHANGES` (the 0.12.2 wire's change feed).
//!
//! Positions are the metadata log's: operation `n` is the log record of sequence `n - 1` on a
//! single node (op 0 is the start of the history), so a position means the same operation
//! after a restart. Each operation's checksum is the XXH3-128 of its position and its encoded
//! bytes, recomputed identically when the log is replayed, so a cursor is checked against the
//! operation it names. The history itself is named by a random `log_id` kept in
//! `metadata/changes.id` (a wiped data directory starts another history).
//!
//! The journal lives in memory: it holds the operations applied since the store opened
//! (those replayed from the log after the snapshot, then the new ones), at most
//! [`JOURNAL_CAPACITY`] of those that changed something. Operations that change nothing the
//! feed shows (consumer offsets, purges, cluster members) move the head only. An older
//! position is answered `expired` and the client rebuilds from the current state.

use std::collections::VecDeque;
use std::path::Path;

use eddy_log::{write_atomic, IoOp, OpenMode, StorageBackend};

use crate::error::{Result, StreamStoreError};
use crate::metadata::{MetadataOp, MetadataState};

/// Operations with changes the journal keeps (older ones are dropped first).
pub const JOURNAL_CAPACITY: usize = 16 * 1024;

/// The file naming the history, in the metadata directory.
pub const LOG_ID_FILE: &str = "changes.id";

/// A topic's identity: its stream's and its own id and creation time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TopicRef {
    /// Stream id.
    pub stream_id: u32,
    /// The stream's creation time, µs.
    pub stream_created_at: u64,
    /// Topic id.
    pub topic_id: u32,
    /// The topic's creation time, µs.
    pub topic_created_at: u64,
}

/// One entity-level change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Change {
    /// A stream created (`created`) or renamed / given new options.
    Stream {
        created: bool,
        id: u32,
        created_at: u64,
        name: String,
        options: Vec<u8>,
    },
    /// A stream deleted, with everything in it.
    StreamDeleted {
        id: u32,
        created_at: u64,
        name: String,
    },
    /// A topic created (`created`) or updated.
    Topic {
        created: bool,
        topic: TopicRef,
        name: String,
        partitions: u32,
        config: crate::metadata::TopicConfig,
        explicit_options: Vec<u8>,
    },
    /// A topic deleted.
    TopicDeleted { topic: TopicRef, name: String },
    /// A topic's partition count changed (`removed`: the ids that went).
    Partitions {
        topic: TopicRef,
        count: u32,
        removed: Vec<u32>,
    },
    /// A consumer group created.
    GroupCreated {
        topic: TopicRef,
        id: u32,
        name: String,
        count: u32,
    },
    /// A consumer group deleted.
    GroupDeleted {
        topic: TopicRef,
        id: u32,
        name: String,
        count: u32,
    },
    /// A user created (`created`) or given a new username, status or options.
    User {
        created: bool,
        id: u32,
        created_at: u64,
        username: String,
        status: u8,
        permissions: Option<Vec<u8>>,
        options: Vec<u8>,
    },
    /// A user deleted (and its tokens).
    UserDeleted {
        id: u32,
        created_at: u64,
        username: String,
    },
    /// A user's password replaced.
    PasswordChanged {
        id: u32,
        created_at: u64,
        username: String,
    },
    /// A user's permissions replaced.
    PermissionsChanged {
        id: u32,
        created_at: u64,
        username: String,
        permissions: Option<Vec<u8>>,
    },
    /// A personal access token created.
    TokenCreated {
        user_id: u32,
        user_created_at: u64,
        name: String,
        expiry_at: Option<u64>,
    },
    /// A personal access token deleted.
    TokenDeleted {
        user_id: u32,
        user_created_at: u64,
        name: String,
    },
}

/// What one operation changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// Its position (1-based).
    pub op: u64,
    /// XXH3-128 of its position and encoded bytes.
    pub checksum: u128,
    /// When it was committed, µs.
    pub timestamp: u64,
    /// Its changes, in order (never empty).
    pub changes: Vec<Change>,
}

/// The journal of one history.
#[derive(Debug, Clone)]
pub struct ChangeJournal {
    log_id: u128,
    /// Every operation after `base` that changed something is in `entries`.
    base: u64,
    /// The checksum of the operation at `base` (0 at op 0, or a synthetic one when the
    /// journal started there without its bytes).
    base_checksum: u128,
    /// The highest ordinal of the operation at `base` (a cursor before it is expired).
    base_last_ordinal: u32,
    /// The newest timestamp dropped (0: nothing dropped).
    retained_since: u64,
    head: u64,
    entries: VecDeque<JournalEntry>,
    capacity: usize,
}

/// The checksum of the operation at `op` whose encoded bytes are `payload`.
#[must_use]
pub fn op_checksum(op: u64, payload: &[u8]) -> u128 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(&op.to_le_bytes());
    hasher.update(payload);
    hasher.digest128()
}

impl Default for ChangeJournal {
    /// An empty journal of history 0 that holds every operation from the first.
    fn default() -> Self {
        Self::new(0, 0)
    }
}

impl ChangeJournal {
    /// An empty journal of the history `log_id` whose operations up to `base` are not held.
    #[must_use]
    pub fn new(log_id: u128, base: u64) -> Self {
        Self::with_capacity(log_id, base, JOURNAL_CAPACITY)
    }

    /// [`new`](Self::new) keeping at most `capacity` operations (at least 1).
    #[must_use]
    pub fn with_capacity(log_id: u128, base: u64, capacity: usize) -> Self {
        let base_checksum = if base == 0 {
            0
        } else {
            op_checksum(base, &log_id.to_le_bytes())
        };
        Self {
            log_id,
            base,
            base_checksum,
            base_last_ordinal: 0,
            retained_since: 0,
            head: base,
            entries: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// The history's id.
    #[must_use]
    pub fn log_id(&self) -> u128 {
        self.log_id
    }

    /// Names the history `log_id` (a cluster's id, the same on every member: positions and
    /// checksums are the replicated log's, so a cursor taken on one member holds on another).
    /// The entries keep their checksums (they cover position and bytes alone); a synthetic
    /// checksum of the base is made again under the new id.
    pub fn set_log_id(&mut self, log_id: u128) {
        if self.base != 0
            && self.base_checksum == op_checksum(self.base, &self.log_id.to_le_bytes())
        {
            self.base_checksum = op_checksum(self.base, &log_id.to_le_bytes());
        }
        self.log_id = log_id;
    }

    /// The newest operation applied.
    #[must_use]
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Every operation after this one is held.
    #[must_use]
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The checksum and highest ordinal of the operation at [`base`](Self::base).
    #[must_use]
    pub fn base_mark(&self) -> (u128, u32) {
        (self.base_checksum, self.base_last_ordinal)
    }

    /// The newest timestamp no longer held (0: nothing dropped).
    #[must_use]
    pub fn retained_since(&self) -> u64 {
        self.retained_since
    }

    /// The operations held, oldest first.
    #[must_use]
    pub fn entries(&self) -> &VecDeque<JournalEntry> {
        &self.entries
    }

    /// Records the operation at `op` (encoded as `payload`, committed at `timestamp`) that
    /// changed `changes`. Positions at or below the head are ignored.
    pub fn record(&mut self, op: u64, payload: &[u8], timestamp: u64, changes: Vec<Change>) {
        if op <= self.head {
            return;
        }
        self.head = op;
        if changes.is_empty() {
            return;
        }
        self.entries.push_back(JournalEntry {
            op,
            checksum: op_checksum(op, payload),
            timestamp,
            changes,
        });
        while self.entries.len() > self.capacity {
            if let Some(dropped) = self.entries.pop_front() {
                self.base = dropped.op;
                self.base_checksum = dropped.checksum;
                self.base_last_ordinal = u32::try_from(dropped.changes.len() - 1).unwrap_or(0);
                self.retained_since = self.retained_since.max(dropped.timestamp);
            }
        }
    }
}

/// What `op` is about to change, read from the state before it is applied: the records of
/// deletions (which need what is deleted) and the partitions a deletion removes.
#[must_use]
pub fn before(state: &MetadataState, op: &MetadataOp) -> Vec<Change> {
    let mut out = Vec::new();
    match op {
        MetadataOp::DeleteStream { id } => {
            if let Some(s) = state.stream(*id) {
                out.push(Change::StreamDeleted {
                    id: s.id,
                    created_at: s.created_at,
                    name: s.name.clone(),
                });
            }
        }
        MetadataOp::DeleteTopic {
            stream_id,
            topic_id,
        } => {
            if let (Some(topic), Some(name)) = (
                topic_ref(state, *stream_id, *topic_id),
                state.topic(*stream_id, *topic_id).map(|t| t.name.clone()),
            ) {
                out.push(Change::TopicDeleted { topic, name });
            }
        }
        MetadataOp::DeletePartitions {
            stream_id,
            topic_id,
            count,
        } => {
            if let (Some(topic), Some(record)) = (
                topic_ref(state, *stream_id, *topic_id),
                state.topic(*stream_id, *topic_id),
            ) {
                let ids: Vec<u32> = record.partitions.keys().copied().collect();
                let keep = ids.len().saturating_sub(*count as usize);
                out.push(Change::Partitions {
                    topic,
                    count: u32::try_from(keep).unwrap_or(u32::MAX),
                    removed: ids[keep..].to_vec(),
                });
            }
        }
        MetadataOp::DeleteConsumerGroup {
            stream_id,
            topic_id,
            group_id,
        } => {
            if let (Some(topic), Some(record)) = (
                topic_ref(state, *stream_id, *topic_id),
                state.topic(*stream_id, *topic_id),
            ) {
                if let Some(group) = record.groups.get(group_id) {
                    out.push(Change::GroupDeleted {
                        topic,
                        id: group.id,
                        name: group.name.clone(),
                        count: u32::try_from(record.groups.len() - 1).unwrap_or(u32::MAX),
                    });
                }
            }
        }
        MetadataOp::DeleteUser { id } => {
            if let Some(u) = state.users.get(id) {
                out.push(Change::UserDeleted {
                    id: u.id,
                    created_at: u.created_at,
                    username: u.username.clone(),
                });
            }
        }
        MetadataOp::DeleteToken { user_id, name } => {
            if let Some(u) = state.users.get(user_id) {
                out.push(Change::TokenDeleted {
                    user_id: u.id,
                    user_created_at: u.created_at,
                    name: name.clone(),
                });
            }
        }
        _ => {}
    }
    out
}

/// What `op` changed, read from the state after it was applied (creations and updates);
/// appended to what [`before`] returned.
pub fn after(state: &MetadataState, op: &MetadataOp, out: &mut Vec<Change>) {
    match op {
        MetadataOp::Placed { op, .. } => after(state, op, out),
        MetadataOp::CreateStream { id, .. } | MetadataOp::UpdateStream { id, .. } => {
            if let Some(s) = state.stream(*id) {
                out.push(Change::Stream {
                    created: matches!(op, MetadataOp::CreateStream { .. }),
                    id: s.id,
                    created_at: s.created_at,
                    name: s.name.clone(),
                    options: s.options.clone(),
                });
            }
        }
        MetadataOp::CreateTopic { stream_id, id, .. } => {
            push_topic(state, *stream_id, *id, true, out);
        }
        MetadataOp::UpdateTopic {
            stream_id,
            topic_id,
            ..
        } => push_topic(state, *stream_id, *topic_id, false, out),
        MetadataOp::CreatePartitions {
            stream_id,
            topic_id,
            ..
        } => {
            if let (Some(topic), Some(record)) = (
                topic_ref(state, *stream_id, *topic_id),
                state.topic(*stream_id, *topic_id),
            ) {
                out.push(Change::Partitions {
                    topic,
                    count: u32::try_from(record.partitions.len()).unwrap_or(u32::MAX),
                    removed: Vec::new(),
                });
            }
        }
        MetadataOp::CreateConsumerGroup {
            stream_id,
            topic_id,
            id,
            ..
        } => {
            if let (Some(topic), Some(record)) = (
                topic_ref(state, *stream_id, *topic_id),
                state.topic(*stream_id, *topic_id),
            ) {
                if let Some(group) = record.groups.get(id) {
                    out.push(Change::GroupCreated {
                        topic,
                        id: group.id,
                        name: group.name.clone(),
                        count: u32::try_from(record.groups.len()).unwrap_or(u32::MAX),
                    });
                }
            }
        }
        MetadataOp::CreateUser { .. }
        | MetadataOp::UpdateUser { .. }
        | MetadataOp::ChangePassword { .. }
        | MetadataOp::UpdatePermissions { .. }
        | MetadataOp::CreateToken { .. } => after_user(state, op, out),
        _ => {}
    }
}

/// [`after`] for the operations on users and their tokens.
fn after_user(state: &MetadataState, op: &MetadataOp, out: &mut Vec<Change>) {
    match op {
        MetadataOp::CreateUser { id, .. } | MetadataOp::UpdateUser { id, .. } => {
            if let Some(u) = state.users.get(id) {
                out.push(Change::User {
                    created: matches!(op, MetadataOp::CreateUser { .. }),
                    id: u.id,
                    created_at: u.created_at,
                    username: u.username.clone(),
                    status: u.status,
                    permissions: u.permissions.clone(),
                    options: u.options.clone(),
                });
            }
        }
        MetadataOp::ChangePassword { id, .. } => {
            if let Some(u) = state.users.get(id) {
                out.push(Change::PasswordChanged {
                    id: u.id,
                    created_at: u.created_at,
                    username: u.username.clone(),
                });
            }
        }
        MetadataOp::UpdatePermissions { id, .. } => {
            if let Some(u) = state.users.get(id) {
                out.push(Change::PermissionsChanged {
                    id: u.id,
                    created_at: u.created_at,
                    username: u.username.clone(),
                    permissions: u.permissions.clone(),
                });
            }
        }
        MetadataOp::CreateToken { user_id, name, .. } => {
            if let Some(u) = state.users.get(user_id) {
                if let Some(token) = u.tokens.get(name) {
                    out.push(Change::TokenCreated {
                        user_id: u.id,
                        user_created_at: u.created_at,
                        name: token.name.clone(),
                        expiry_at: token.expiry_at,
                    });
                }
            }
        }
        _ => {}
    }
}

fn push_topic(
    state: &MetadataState,
    stream_id: u32,
    topic_id: u32,
    created: bool,
    out: &mut Vec<Change>,
) {
    if let (Some(topic), Some(record)) = (
        topic_ref(state, stream_id, topic_id),
        state.topic(stream_id, topic_id),
    ) {
        out.push(Change::Topic {
            created,
            topic,
            name: record.name.clone(),
            partitions: u32::try_from(record.partitions.len()).unwrap_or(u32::MAX),
            config: record.config,
            explicit_options: record.explicit_options.clone(),
        });
    }
}

/// The identity of a topic of `state`.
#[must_use]
pub fn topic_ref(state: &MetadataState, stream_id: u32, topic_id: u32) -> Option<TopicRef> {
    let stream = state.stream(stream_id)?;
    let topic = stream.topics.get(&topic_id)?;
    Some(TopicRef {
        stream_id,
        stream_created_at: stream.created_at,
        topic_id,
        topic_created_at: topic.created_at,
    })
}

/// Applies `op` to `state` and returns what it changed (nothing when it was refused).
///
/// # Errors
/// The operation's refusal; the state is then unchanged.
pub fn apply_recording(
    state: &mut MetadataState,
    op: &MetadataOp,
) -> std::result::Result<(Vec<crate::metadata::Effect>, Vec<Change>), crate::error::MetadataError> {
    let mut changes = before(state, op);
    let effects = state.apply(op)?;
    after(state, op, &mut changes);
    Ok((effects, changes))
}

/// Reads the history id of `dir`, creating it (random, durably) on first use.
///
/// # Errors
/// The file cannot be read or written, or holds something else than 32 hex digits.
pub fn load_or_create_log_id(backend: &dyn StorageBackend, dir: &Path) -> Result<u128> {
    let path = dir.join(LOG_ID_FILE);
    match backend.open(&path, OpenMode::Existing) {
        Ok(file) => {
            let mut bytes = [0u8; 32];
            file.read_at(0, &mut bytes)
                .map_err(|e| StreamStoreError::io(IoOp::Read, &path, e))?;
            let text = std::str::from_utf8(&bytes).ok();
            text.and_then(|t| u128::from_str_radix(t, 16).ok())
                .ok_or_else(|| {
                    StreamStoreError::io(
                        IoOp::Read,
                        &path,
                        std::io::Error::new(std::io::ErrorKind::InvalidData, "not 32 hex digits"),
                    )
                })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = random_u128();
            write_atomic(backend, dir, LOG_ID_FILE, format!("{id:032x}").as_bytes())?;
            Ok(id)
        }
        Err(e) => Err(StreamStoreError::io(IoOp::Open, &path, e)),
    }
}

/// 128 bits from the process's random hash keys and the clock (a history name, not a secret).
fn random_u128() -> u128 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut halves = [0u64; 2];
    for (i, half) in halves.iter_mut().enumerate() {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(now);
        hasher.write_usize(i);
        hasher.write_u32(std::process::id());
        *half = hasher.finish();
    }
    (u128::from(halves[0]) << 64) | u128::from(halves[1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::TopicConfig;

    fn create_stream(id: u32) -> MetadataOp {
        MetadataOp::CreateStream {
            id,
            name: format!("s{id}"),
            created_at: 100 + u64::from(id),
            options: vec![],
        }
    }

    #[test]
    fn operations_become_changes_and_deletions_read_the_state_before() {
        let mut state = MetadataState::default();
        let (_, changes) = apply_recording(&mut state, &create_stream(1)).unwrap();
        assert!(matches!(
            &changes[..],
            [Change::Stream {
                created: true,
                id: 1,
                ..
            }]
        ));
        let topic = MetadataOp::CreateTopic {
            stream_id: 1,
            id: 0,
            name: "t".into(),
            created_at: 7,
            partitions: 3,
            config: TopicConfig::default(),
            explicit_options: vec![],
            derived_options: vec![],
        };
        let (_, changes) = apply_recording(&mut state, &topic).unwrap();
        assert!(matches!(
            &changes[..],
            [Change::Topic {
                created: true,
                partitions: 3,
                ..
            }]
        ));
        let shrink = MetadataOp::DeletePartitions {
            stream_id: 1,
            topic_id: 0,
            count: 2,
        };
        let (_, changes) = apply_recording(&mut state, &shrink).unwrap();
        match &changes[..] {
            [Change::Partitions { count, removed, .. }] => {
                assert_eq!((*count, removed.as_slice()), (1, &[1u32, 2][..]));
            }
            other => panic!("{other:?}"),
        }
        let (_, changes) =
            apply_recording(&mut state, &MetadataOp::DeleteStream { id: 1 }).unwrap();
        assert_eq!(
            changes,
            vec![Change::StreamDeleted {
                id: 1,
                created_at: 101,
                name: "s1".into()
            }]
        );
        assert!(apply_recording(&mut state, &MetadataOp::DeleteStream { id: 1 }).is_err());
    }

    #[test]
    fn the_journal_keeps_its_capacity_and_moves_its_base() {
        let mut journal = ChangeJournal::with_capacity(9, 0, 2);
        let change = || {
            vec![Change::StreamDeleted {
                id: 1,
                created_at: 1,
                name: "s".into(),
            }]
        };
        journal.record(1, b"a", 10, change());
        journal.record(2, b"b", 20, vec![]);
        journal.record(3, b"c", 30, change());
        journal.record(3, b"c", 30, change());
        assert_eq!(
            (journal.head(), journal.entries().len(), journal.base()),
            (3, 2, 0)
        );
        journal.record(4, b"d", 40, change());
        assert_eq!((journal.base(), journal.retained_since()), (1, 10));
        assert_eq!(journal.base_mark().0, op_checksum(1, b"a"));
        assert_eq!(journal.entries()[0].op, 3);
    }
}
