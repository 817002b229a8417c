//! A stream partition as a replicated group: the group's Raft log (`eddy_consensus::RaftLog`
//! on an `eddy-log` [`Log`]) *is* the partition's message log, and a
//! [`ReplicatedPartition`] over the same log is the state machine. A message body is written
//! once per node: the follower's append of the Raft entry is the partition write.
//!
//! A leader stamps a batch from [`PartitionGroup::predict`] (the next offset after everything
//! applied and everything it proposed and has not seen applied yet), proposes the encoded
//! [`PartitionEntry`], and answers the producer with the [`ApplyOutcome`] its proposal's
//! callback receives, which arrives once the entry is committed (fdatasynced on a majority)
//! and applied here. Every member applies the same entries in the same order, so a refused
//! stale prediction is refused everywhere and offsets agree on every node.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use bytes::Bytes;
use eddy_consensus::logstore::StateMachine;
use eddy_consensus::{LogEntry, Snapshot, SnapshotMeta, StoreError};
use eddy_log::{write_atomic, Log, OpenMode, StorageBackend};
use eddy_stream_store::replicated::{
    ApplyOutcome, EntryError, PartitionEntry, Prediction, ReplicatedError, ReplicatedPartition,
    ReplicatedSnapshot,
};
use eddy_stream_store::{PartitionAddr, RetentionPolicy, Stamp, StampableBatch};

/// The partition state a snapshot installation left the group at, in the group's directory:
/// the entry's term (u64 LE) then the encoded [`ReplicatedSnapshot`]; replaced atomically.
/// A restart resumes from it (the Raft log starts after it).
pub const BOUNDARY_FILE: &str = "partition.boundary";

fn storage(e: ReplicatedError) -> StoreError {
    StoreError::Storage(Box::new(e))
}

fn io_error(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Storage(Box::new(e))
}

/// Reads [`BOUNDARY_FILE`] (`None` when there is none).
fn read_boundary(
    backend: &dyn StorageBackend,
    dir: &Path,
) -> Result<Option<(ReplicatedSnapshot, u64)>, StoreError> {
    let path = dir.join(BOUNDARY_FILE);
    let file = match backend.open(&path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(e)),
    };
    let len = usize::try_from(file.len().map_err(io_error)?).unwrap_or(usize::MAX);
    let invalid = StoreError::InvalidSnapshot {
        index: 0,
        reason: "partition.boundary does not decode",
    };
    if !(8..=8 + 1024).contains(&len) {
        return Err(invalid);
    }
    let mut buf = vec![0u8; len];
    file.read_at(0, &mut buf).map_err(io_error)?;
    let term = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
    let state = ReplicatedSnapshot::decode(&buf[8..]).map_err(|_| invalid)?;
    Ok(Some((state, term)))
}

/// The readable side of a partition group, shared by the state machine (which replaces the
/// partition when a snapshot is installed) and request handlers (which poll it).
#[derive(Clone)]
pub struct PartitionGroup {
    current: Arc<RwLock<Arc<ReplicatedPartition>>>,
}

impl std::fmt::Debug for PartitionGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionGroup")
            .field("addr", &self.partition().addr())
            .finish_non_exhaustive()
    }
}

impl PartitionGroup {
    /// The partition as of now (cheap; a snapshot install swaps it).
    pub fn partition(&self) -> Arc<ReplicatedPartition> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// What the next batch must be stamped with, given the payloads proposed and not yet
    /// applied (oldest first).
    pub fn predict<'a>(&self, pending: impl IntoIterator<Item = &'a Bytes>) -> Prediction {
        self.partition().predict(pending)
    }

    /// A leader's append entry for `batch`: stamped with the offset predicted after what is
    /// applied and `pending` (the entries this leader proposed and has not seen answered,
    /// oldest first) and with `now_us`, or the partition's newest time when that is later.
    ///
    /// # Errors
    /// The entry cannot be encoded.
    pub fn stamp<'a, B: StampableBatch>(
        &self,
        batch: B,
        pending: impl IntoIterator<Item = &'a Bytes>,
        now_us: u64,
    ) -> Result<StampedEntry, EntryError> {
        let partition = self.partition();
        let predicted = partition.predict(pending);
        let timestamp = now_us.max(predicted.min_timestamp);
        let message_count = batch.message_count();
        let bytes = batch.stamp(&Stamp {
            partition_id: partition.addr().partition_id,
            base_offset: predicted.next_offset,
            base_timestamp: timestamp,
        });
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        let entry = PartitionEntry::Append {
            base_offset: predicted.next_offset,
            message_count,
            timestamp,
            batch: bytes,
        }
        .encode()?;
        Ok(StampedEntry {
            entry,
            base_offset: predicted.next_offset,
            len,
        })
    }
}

/// An append entry a leader stamped ([`PartitionGroup::stamp`]).
#[derive(Debug, Clone)]
pub struct StampedEntry {
    /// The encoded [`PartitionEntry::Append`] to propose.
    pub entry: Bytes,
    /// The offset it was stamped for: applied anywhere else, it is refused as stale.
    pub base_offset: u64,
    /// The stamped batch's length.
    pub len: u32,
}

/// The appends a leader proposed and has not seen answered, per partition (`K`), oldest
/// first, each under its proposal's id (`I`): a new append is stamped after them
/// ([`PartitionGroup::stamp`]), so predictions reach the Raft log in order. The server keeps
/// one per member under a lock (the server's `ClusterStreams`); the
/// simulator one per simulated member.
#[derive(Debug)]
pub struct Proposals<K, I> {
    queues: BTreeMap<K, VecDeque<(I, Bytes)>>,
}

impl<K, I> Default for Proposals<K, I> {
    fn default() -> Self {
        Proposals {
            queues: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Copy, I: PartialEq> Proposals<K, I> {
    /// Stamps `batch` for `group` (partition `key`) after the proposals of `key` not yet
    /// answered, and records it as proposal `id`.
    ///
    /// # Errors
    /// The entry cannot be encoded.
    pub fn stamp<B: StampableBatch>(
        &mut self,
        key: K,
        id: I,
        group: &PartitionGroup,
        batch: B,
        now_us: u64,
    ) -> Result<StampedEntry, EntryError> {
        let queue = self.queues.entry(key).or_default();
        let stamped = group.stamp(batch, queue.iter().map(|(_, entry)| entry), now_us)?;
        queue.push_back((id, stamped.entry.clone()));
        Ok(stamped)
    }

    /// Proposal `id` of `key` was answered (applied, refused or lost).
    pub fn answered(&mut self, key: K, id: &I) {
        if let Some(queue) = self.queues.get_mut(&key) {
            queue.retain(|(i, _)| i != id);
            if queue.is_empty() {
                self.queues.remove(&key);
            }
        }
    }

    /// Proposals of `key` not yet answered.
    pub fn waiting(&self, key: K) -> usize {
        self.queues.get(&key).map_or(0, VecDeque::len)
    }

    /// Forgets every proposal (the member stopped).
    pub fn clear(&mut self) {
        self.queues.clear();
    }
}

/// Where a partition group's retention policy comes from (its topic's options, read when
/// maintenance asks).
pub type PolicySource = Box<dyn Fn() -> Option<RetentionPolicy> + Send>;

/// The state machine of a partition group.
pub struct PartitionMachine {
    addr: PartitionAddr,
    /// The topic's retention policy (`None`: keep everything).
    policy: Option<PolicySource>,
    log: Log,
    backend: Arc<dyn StorageBackend>,
    dir: PathBuf,
    group: PartitionGroup,
    /// Index and term of the last entry applied (or of the snapshot installed).
    applied: SnapshotMeta,
}

impl std::fmt::Debug for PartitionMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionMachine")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl PartitionMachine {
    /// The machine over the group's Raft log `log` (a clone of `RaftLog::log`) in `dir`
    /// (`RaftLog::dir`), starting from the snapshot it last installed there, if any
    /// ([`BOUNDARY_FILE`]), else from the log's start. It keeps nothing else durable: after a
    /// restart the committed entries are applied again from the log, which holds them.
    pub fn open(
        addr: PartitionAddr,
        log: Log,
        backend: Arc<dyn StorageBackend>,
        dir: &Path,
    ) -> Result<(Self, PartitionGroup), StoreError> {
        let boundary = read_boundary(&*backend, dir)?;
        if let Some((state, _)) = &boundary {
            if log.bounds().next <= state.index {
                // A crash came between the boundary file and the log's reset: finish the reset
                // (`Replicated::open` would, after this).
                log.purge(state.index + 1).wait().map_err(io_error)?;
            }
        }
        let applied = boundary.map_or(SnapshotMeta::default(), |(state, term)| SnapshotMeta {
            index: state.index,
            term,
        });
        let partition = ReplicatedPartition::new(addr, log.clone(), boundary.map(|(s, _)| s))
            .map_err(storage)?;
        let group = PartitionGroup {
            current: Arc::new(RwLock::new(Arc::new(partition))),
        };
        Ok((
            PartitionMachine {
                addr,
                policy: None,
                log,
                backend,
                dir: dir.to_path_buf(),
                group: group.clone(),
                applied,
            },
            group,
        ))
    }
}

impl PartitionMachine {
    /// Applies retention under the policy `source` gives (message expiry, size) when the
    /// group's maintenance runs.
    #[must_use]
    pub fn with_retention(mut self, source: PolicySource) -> Self {
        self.policy = Some(source);
        self
    }
}

impl PartitionMachine {
    /// Records `boundary` durably in [`BOUNDARY_FILE`] (a restart resumes from it), then
    /// stops serving what lies at or below it. False, with nothing forgotten, when it cannot
    /// be recorded.
    fn record_and_forget(
        &self,
        partition: &ReplicatedPartition,
        boundary: &ReplicatedSnapshot,
    ) -> bool {
        let term = match self.log.read_record(boundary.index) {
            Ok(Some(record)) => u64::from(record.meta.tag),
            _ => return false,
        };
        let mut file = term.to_le_bytes().to_vec();
        file.extend_from_slice(&boundary.encode());
        if let Err(e) = write_atomic(&*self.backend, &self.dir, BOUNDARY_FILE, &file) {
            tracing::warn!(addr = ?self.addr, error = %e, "cannot record a partition boundary; nothing is forgotten");
            return false;
        }
        partition.forget_through(boundary);
        true
    }
}

impl StateMachine for PartitionMachine {
    type Outcome = ApplyOutcome;

    fn applied(&self) -> SnapshotMeta {
        self.applied
    }

    fn apply(&mut self, entry: &LogEntry) -> ApplyOutcome {
        let partition = self.group.partition();
        // A change of the group's members is the engine's: the partition sees the no-op (as
        // its reads do, from the record's tag).
        let outcome = if entry.kind == eddy_consensus::EntryKind::Normal {
            partition.apply(entry.index, &entry.data)
        } else {
            partition.apply(entry.index, &Bytes::new())
        };
        if !matches!(outcome, ApplyOutcome::OutOfOrder { .. }) {
            self.applied = SnapshotMeta {
                index: entry.index,
                term: entry.term,
            };
        }
        if let ApplyOutcome::Forget { through_index } = outcome {
            // An operator's DELETE_SEGMENTS: every member stops serving the same records
            // now; retention deletes the segments below at its next run. Applied again after
            // a restart, it finds the boundary recorded and changes nothing.
            match partition.forget_boundary(through_index) {
                Ok(Some(boundary)) => {
                    self.record_and_forget(&partition, &boundary);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(addr = ?self.addr, through_index, error = %e, "cannot forget the deleted segments' records");
                }
            }
        }
        outcome
    }

    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        let state = self.group.partition().snapshot();
        if state.index != self.applied.index {
            return Err(StoreError::SnapshotTemporarilyUnavailable);
        }
        Ok(Snapshot {
            meta: self.applied,
            data: Bytes::copy_from_slice(&state.encode()),
        })
    }

    /// The state at the visible floor (where retention, a purge, a forget or the last
    /// installed snapshot left the partition: at or after where the log starts), so a member
    /// rebuilt from it is then sent every record this member still serves. A snapshot at the
    /// applied index would leave it without the records between the floor and that index: it
    /// would serve less than its peers, and lose them for good if it later led.
    fn snapshot_after(&self, log_start: SnapshotMeta) -> Result<Snapshot, StoreError> {
        let partition = self.group.partition();
        let floor = partition.visible_floor();
        if floor == 0 || floor < log_start.index {
            // Nothing cut yet (the log holds everything), or never: the log is compacted only
            // through a recorded boundary.
            return self.snapshot();
        }
        let state = partition.snapshot_at(floor).map_err(storage)?;
        let term = if floor == log_start.index {
            log_start.term
        } else if floor == self.applied.index {
            self.applied.term
        } else {
            match self.log.read_record(floor) {
                Ok(Some(record)) if record.meta.seq == floor => u64::from(record.meta.tag),
                _ => return Err(StoreError::SnapshotTemporarilyUnavailable),
            }
        };
        Ok(Snapshot {
            meta: SnapshotMeta { index: floor, term },
            data: Bytes::copy_from_slice(&state.encode()),
        })
    }

    fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        let state = ReplicatedSnapshot::decode(&snapshot.data).map_err(|_| {
            StoreError::InvalidSnapshot {
                index: snapshot.meta.index,
                reason: "not a replicated partition's snapshot",
            }
        })?;
        if state.index != snapshot.meta.index {
            return Err(StoreError::InvalidSnapshot {
                index: snapshot.meta.index,
                reason: "the partition state is not at the snapshot's index",
            });
        }
        let mut file = snapshot.meta.term.to_le_bytes().to_vec();
        file.extend_from_slice(&state.encode());
        write_atomic(&*self.backend, &self.dir, BOUNDARY_FILE, &file).map_err(io_error)?;
        // The log is the partition's: it starts after the snapshot before the partition reads
        // it (`Replicated` resets it right after, to the same place).
        self.log.purge(state.index + 1).wait().map_err(io_error)?;
        let partition =
            ReplicatedPartition::new(self.addr, self.log.clone(), Some(state)).map_err(storage)?;
        *self
            .group
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(partition);
        self.applied = snapshot.meta;
        Ok(())
    }

    /// Retention: how far whole sealed segments may go under the topic's policy (or because a
    /// purge made them invisible). The boundary state is recorded durably in [`BOUNDARY_FILE`]
    /// (a restart resumes from it) and the partition stops serving below it before the Raft
    /// layer deletes the segments.
    fn compactable_through(&mut self, now_us: u64) -> Option<u64> {
        let policy = self.policy.as_ref().and_then(|source| source())?;
        let partition = self.group.partition();
        let cut = match partition.retention(&policy, now_us) {
            Ok(Some(cut)) => cut,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(addr = ?self.addr, error = %e, "retention could not be computed");
                return None;
            }
        };
        self.record_and_forget(&partition, &cut.boundary)
            .then_some(cut.through_index)
    }

    fn entry_timestamp(&self, entry: &LogEntry) -> Option<u64> {
        match PartitionEntry::decode(&entry.data) {
            Ok(PartitionEntry::Append { timestamp, .. }) => Some(timestamp),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
