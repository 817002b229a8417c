//! A small [`StateMachine`] for tests of [`Replicated`](crate::Replicated) stores: the list of
//! applied payloads, like [`MemStore`](super::MemStore)'s, with its durable part in a
//! [`MachineDisk`] that outlives crashes. The applied list itself is volatile: after a crash
//! the machine resumes from its last durable snapshot and the engine applies the rest again.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use super::{decode_state, encode_state, Applied};
use crate::logstore::StateMachine;
use crate::store::StoreError;
use crate::types::{LogEntry, Snapshot, SnapshotMeta};

#[derive(Debug, Default)]
struct MachineDiskState {
    /// The durable snapshot: its end and its applied payloads.
    meta: SnapshotMeta,
    data: Bytes,
    /// A compaction asked for by the test (or the simulator): the next upkeep persists the
    /// state and lets the log go through this index.
    compact: Option<u64>,
    /// Snapshots written (compactions and installs).
    writes: u64,
}

/// What a [`ListMachine`] keeps durably (its last snapshot), shared with the test.
#[derive(Debug, Clone, Default)]
pub struct MachineDisk(Arc<Mutex<MachineDiskState>>);

impl MachineDisk {
    /// Nothing durable yet.
    pub fn new() -> Self {
        MachineDisk::default()
    }

    fn lock(&self) -> MutexGuard<'_, MachineDiskState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the machine to let its log go through `through` (an applied index) at its next
    /// upkeep, persisting its state first.
    pub fn request_compaction(&self, through: u64) {
        self.lock().compact = Some(through);
    }

    /// Where the durable snapshot ends.
    pub fn snapshot_meta(&self) -> SnapshotMeta {
        self.lock().meta
    }

    /// Snapshots written so far (compactions and installs).
    pub fn snapshot_writes(&self) -> u64 {
        self.lock().writes
    }
}

/// The list of applied payloads as a state machine; an entry's outcome is its index.
#[derive(Debug)]
pub struct ListMachine {
    disk: MachineDisk,
    applied: SnapshotMeta,
    list: Applied,
}

impl ListMachine {
    /// Resumes from the disk's durable snapshot.
    pub fn open(disk: MachineDisk) -> Self {
        let (applied, list) = {
            let d = disk.lock();
            (d.meta, decode_state(&d.data))
        };
        ListMachine {
            disk,
            applied,
            list: Applied(Arc::new(Mutex::new(list))),
        }
    }

    /// The applied payloads, observable while a node owns the store.
    pub fn applied_list(&self) -> Applied {
        self.list.clone()
    }
}

impl StateMachine for ListMachine {
    type Outcome = u64;

    fn applied(&self) -> SnapshotMeta {
        self.applied
    }

    fn apply(&mut self, entry: &LogEntry) -> u64 {
        self.applied = SnapshotMeta {
            index: entry.index,
            term: entry.term,
        };
        // A change of the group's members is the engine's, not the machine's.
        if !entry.data.is_empty() && entry.kind == crate::types::EntryKind::Normal {
            self.list.lock().push((entry.index, entry.data.clone()));
        }
        entry.index
    }

    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        Ok(Snapshot {
            meta: self.applied,
            data: encode_state(&self.list.lock()),
        })
    }

    fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        {
            let mut d = self.disk.lock();
            d.meta = snapshot.meta;
            d.data = snapshot.data.clone();
            d.writes += 1;
        }
        *self.list.lock() = decode_state(&snapshot.data);
        self.applied = snapshot.meta;
        Ok(())
    }

    fn compactable_through(&mut self, _now_us: u64) -> Option<u64> {
        let mut d = self.disk.lock();
        let through = d.compact?;
        if through > self.applied.index {
            return None; // not applied yet: asked again at the next upkeep
        }
        d.compact = None;
        if d.meta.index < self.applied.index {
            d.meta = self.applied;
            d.data = encode_state(&self.list.lock());
            d.writes += 1;
        }
        Some(through)
    }
}
