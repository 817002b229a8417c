//! The metadata group (`GroupId(0)`): users, tokens, streams, topics, partitions, consumer
//! groups and consumer offsets in one total order. Its Raft log is the metadata log (each
//! entry one encoded `MetadataOp`), and a [`ReplicatedMetadata`] is the state machine: the
//! state is durable in snapshots that carry the Raft index, and a restart applies the
//! committed entries after the last snapshot again, each exactly once.
//!
//! A proposer encodes the operation and proposes it; the callback receives the
//! [`MetadataApplied`] every member computes alike (applied with its partition effects, or
//! refused by the state). No pending state is kept by the leader: two proposals that conflict
//! (the same stream name) are ordered by the log and the second is refused at apply.
//!
//! Every member passes the partition effects of each applied entry to an [`EffectSink`], the
//! server's hook for creating, purging and removing partition groups. After a restart the
//! entries after the snapshot are applied again and their effects passed again, so the sink
//! must be idempotent (create what is missing, remove what is there); after a snapshot is
//! installed it gets no effects and reconciles against the new state instead
//! ([`EffectSink::installed`]).

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use eddy_consensus::logstore::StateMachine;
use eddy_consensus::{EntryKind, LogEntry, Snapshot, SnapshotMeta, StoreError};
use eddy_log::StorageBackend;
use eddy_stream_store::metadata::Effect;
use eddy_stream_store::replicated_metadata::{
    MetadataApplied, MetadataView, ReplicatedMetadata, SnapshotWrites,
};

/// Where a member's partition effects go.
pub trait EffectSink: Send {
    /// The entry at `index` was applied with these effects (also again after a restart).
    fn applied(&mut self, index: u64, effects: &[Effect]);
    /// A leader's snapshot replaced the state (at `index`): reconcile against `view`.
    fn installed(&mut self, index: u64, view: &MetadataView);
}

/// A sink that drops every effect (tests of the metadata alone).
#[derive(Debug, Default)]
pub struct NoEffects;

impl EffectSink for NoEffects {
    fn applied(&mut self, _index: u64, _effects: &[Effect]) {}
    fn installed(&mut self, _index: u64, _view: &MetadataView) {}
}

/// The metadata group's state machine on one member.
pub struct MetadataMachine {
    inner: ReplicatedMetadata,
    sink: Box<dyn EffectSink>,
}

impl std::fmt::Debug for MetadataMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataMachine")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

fn storage(e: eddy_stream_store::StreamStoreError) -> StoreError {
    StoreError::Storage(Box::new(e))
}

impl MetadataMachine {
    /// The machine in `dir` (the group's `RaftLog::dir`), from its last snapshot; a snapshot
    /// is written every `snapshot_every` entries, after which the log through it may go.
    ///
    /// # Errors
    /// A snapshot that does not read back whole.
    pub fn open(
        backend: Arc<dyn StorageBackend>,
        dir: impl Into<PathBuf>,
        snapshot_every: u64,
        sink: Box<dyn EffectSink>,
    ) -> Result<(Self, MetadataView), StoreError> {
        Self::open_with(backend, dir, snapshot_every, sink, SnapshotWrites::Inline)
    }

    /// [`open`](Self::open), the periodic snapshots written `writes` (a member's on a thread
    /// of their own, so the Raft thread that sends every group's heartbeats never waits for
    /// their fsync).
    ///
    /// # Errors
    /// A snapshot that does not read back whole.
    pub fn open_with(
        backend: Arc<dyn StorageBackend>,
        dir: impl Into<PathBuf>,
        snapshot_every: u64,
        sink: Box<dyn EffectSink>,
        writes: SnapshotWrites,
    ) -> Result<(Self, MetadataView), StoreError> {
        let inner =
            ReplicatedMetadata::open_with(backend, dir, snapshot_every, writes).map_err(storage)?;
        let view = inner.view();
        Ok((MetadataMachine { inner, sink }, view))
    }
}

impl StateMachine for MetadataMachine {
    type Outcome = MetadataApplied;

    fn applied(&self) -> SnapshotMeta {
        let (index, term) = self.inner.applied();
        SnapshotMeta { index, term }
    }

    fn apply(&mut self, entry: &LogEntry) -> MetadataApplied {
        // Membership is static: a membership entry only advances the index.
        let data: &[u8] = match entry.kind {
            EntryKind::Normal => &entry.data,
            _ => &[],
        };
        let (outcome, saved) = self.inner.apply(entry.index, entry.term, data);
        if let Err(e) = saved {
            tracing::warn!(index = entry.index, error = %e, "metadata snapshot failed; the Raft log keeps every entry since the last one");
        }
        if let MetadataApplied::Applied(effects) = &outcome {
            if !effects.is_empty() {
                self.sink.applied(entry.index, effects);
            }
        }
        outcome
    }

    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        let data = self.inner.snapshot().map_err(storage)?;
        Ok(Snapshot {
            meta: self.applied(),
            data: Bytes::from(data),
        })
    }

    fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        let invalid = |reason| StoreError::InvalidSnapshot {
            index: snapshot.meta.index,
            reason,
        };
        let (index, term) = self
            .inner
            .install(&snapshot.data)
            .map_err(|_| invalid("not a metadata snapshot"))?;
        if (index, term) != (snapshot.meta.index, snapshot.meta.term) {
            return Err(invalid("the metadata state is not at the snapshot's index"));
        }
        self.sink.installed(index, &self.inner.view());
        Ok(())
    }

    fn compactable_through(&mut self, _now_us: u64) -> Option<u64> {
        Some(self.inner.durable_through()).filter(|&i| i > 0)
    }
}

#[cfg(test)]
mod tests;
