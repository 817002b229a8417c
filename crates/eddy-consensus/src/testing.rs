//! An in-memory [`GroupStore`] for tests of the consensus layer and of code above it.
//!
//! The store's durable part ([`MemDisk`]) outlives the store, so a test can crash a member
//! (drop its store: what was not synced is gone), reopen it on the same disk, or wipe it. The
//! state machine is the list of applied payloads; an entry's outcome is its index.
//! Durability is immediate by default; with [`MemStore::hold_syncs`] appends wait for
//! [`MemStore::sync`], which lets a test keep a member from acknowledging.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::store::{Durable, GroupStore, StoreError};
use crate::types::{HardState, LogEntry, Snapshot, SnapshotMeta};

/// What survives a crash.
#[derive(Debug, Default)]
struct DiskState {
    hard: HardState,
    snap: SnapshotMeta,
    snap_data: Bytes,
    /// Durable entries, from `snap.index + 1`.
    entries: Vec<LogEntry>,
    fsyncs: u64,
}

/// A member's durable storage, shared between the store and the test.
#[derive(Debug, Clone, Default)]
pub struct MemDisk(Arc<Mutex<DiskState>>);

impl MemDisk {
    /// An empty disk.
    pub fn new() -> Self {
        MemDisk::default()
    }

    fn lock(&self) -> MutexGuard<'_, DiskState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Durable entries (after the snapshot), for assertions.
    pub fn entries(&self) -> Vec<LogEntry> {
        self.lock().entries.clone()
    }

    /// The durable hard state.
    pub fn hard_state(&self) -> HardState {
        self.lock().hard
    }

    /// Discards durable entries up to `index`, which the caller knows are committed: a
    /// snapshot of the state at `index` (derived from the log) replaces them.
    pub fn compact(&self, index: u64) {
        let mut d = self.lock();
        if index <= d.snap.index {
            return;
        }
        let Some(term) = d.entries.iter().find(|e| e.index == index).map(|e| e.term) else {
            return;
        };
        let mut state = decode_state(&d.snap_data);
        state.extend(
            d.entries
                .iter()
                .filter(|e| e.index <= index && !e.data.is_empty())
                .map(|e| (e.index, e.data.clone())),
        );
        d.snap_data = encode_state(&state);
        d.snap = SnapshotMeta { index, term };
        d.entries.retain(|e| e.index > index);
    }

    /// How many syncs the store issued.
    pub fn fsyncs(&self) -> u64 {
        self.lock().fsyncs
    }
}

/// An in-memory group store over a [`MemDisk`].
pub struct MemStore {
    disk: MemDisk,
    held: Option<Vec<(Vec<LogEntry>, Durable)>>,
    applied_index: u64,
    applied: Applied,
}

/// A view of a store's state machine that stays valid while the node owns the store.
#[derive(Debug, Clone, Default)]
pub struct Applied(Arc<Mutex<Vec<(u64, Bytes)>>>);

impl Applied {
    /// The applied payloads with their indexes.
    pub fn get(&self) -> Vec<(u64, Bytes)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(u64, Bytes)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for MemStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemStore")
            .field("held", &self.held.as_ref().map(Vec::len))
            .field("applied_index", &self.applied_index)
            .finish_non_exhaustive()
    }
}

impl MemStore {
    /// Opens a store on `disk`: the state machine restarts from the disk's snapshot and the
    /// engine re-applies the committed entries after it.
    pub fn open(disk: MemDisk) -> Self {
        let (applied_index, applied) = {
            let d = disk.lock();
            (d.snap.index, decode_state(&d.snap_data))
        };
        MemStore {
            disk,
            held: None,
            applied_index,
            applied: Applied(Arc::new(Mutex::new(applied))),
        }
    }

    /// From now on appends become durable only at [`MemStore::sync`].
    pub fn hold_syncs(&mut self) {
        self.held.get_or_insert_with(Vec::new);
    }

    /// Makes every held append durable and reports it; appends are immediate again.
    pub fn sync(&mut self) {
        for (entries, done) in self.held.take().unwrap_or_default() {
            self.write(&entries);
            done(Ok(()));
        }
    }

    /// The state machine (applied payloads with their indexes), observable while the node
    /// owns the store.
    pub fn applied(&self) -> Applied {
        self.applied.clone()
    }

    fn write(&self, entries: &[LogEntry]) {
        let mut d = self.disk.lock();
        let first = entries[0].index;
        d.entries.retain(|e| e.index < first);
        d.entries.extend_from_slice(entries);
        d.fsyncs += 1;
    }
}

fn encode_state(applied: &[(u64, Bytes)]) -> Bytes {
    let mut out = BytesMut::new();
    for (index, data) in applied {
        out.put_u64_le(*index);
        out.put_u32_le(u32::try_from(data.len()).expect("small test payloads"));
        out.put_slice(data);
    }
    out.freeze()
}

fn decode_state(mut bytes: &[u8]) -> Vec<(u64, Bytes)> {
    let mut out = Vec::new();
    while bytes.remaining() >= 12 {
        let index = bytes.get_u64_le();
        let len = bytes.get_u32_le() as usize;
        out.push((index, Bytes::copy_from_slice(&bytes[..len])));
        bytes.advance(len);
    }
    out
}

impl GroupStore for MemStore {
    type Outcome = u64;

    fn hard_state(&self) -> HardState {
        self.disk.lock().hard
    }

    fn snapshot_meta(&self) -> SnapshotMeta {
        self.disk.lock().snap
    }

    fn first_index(&self) -> u64 {
        self.disk.lock().snap.index + 1
    }

    fn last_index(&self) -> u64 {
        let d = self.disk.lock();
        d.entries.last().map_or(d.snap.index, |e| e.index)
    }

    fn term(&self, index: u64) -> Result<u64, StoreError> {
        let d = self.disk.lock();
        if index == d.snap.index {
            return Ok(d.snap.term);
        }
        if index < d.snap.index {
            return Err(StoreError::Compacted {
                first_index: d.snap.index + 1,
            });
        }
        let at = usize::try_from(index - d.snap.index - 1).expect("small");
        d.entries
            .get(at)
            .map(|e| e.term)
            .ok_or(StoreError::Unavailable {
                index,
                last_index: d.entries.last().map_or(d.snap.index, |e| e.index),
            })
    }

    fn entries(&self, lo: u64, hi: u64, max_bytes: u64) -> Result<Vec<LogEntry>, StoreError> {
        let d = self.disk.lock();
        if lo <= d.snap.index {
            return Err(StoreError::Compacted {
                first_index: d.snap.index + 1,
            });
        }
        let mut out = Vec::new();
        let mut size = 0;
        for index in lo..hi {
            let at = usize::try_from(index - d.snap.index - 1).expect("small");
            let Some(e) = d.entries.get(at) else {
                return Err(StoreError::Unavailable {
                    index,
                    last_index: d.entries.last().map_or(d.snap.index, |e| e.index),
                });
            };
            if !out.is_empty() && size + e.size() > max_bytes {
                break;
            }
            size += e.size();
            out.push(e.clone());
        }
        Ok(out)
    }

    fn append(&mut self, entries: Vec<LogEntry>, durable: Durable) {
        if let Some(held) = &mut self.held {
            held.push((entries, durable));
        } else {
            self.write(&entries);
            durable(Ok(()));
        }
    }

    fn save_hard_state(&mut self, state: HardState, sync: bool) -> Result<(), StoreError> {
        let mut d = self.disk.lock();
        d.hard = state;
        if sync {
            d.fsyncs += 1;
        }
        Ok(())
    }

    fn applied_index(&self) -> u64 {
        self.applied_index
    }

    fn apply(&mut self, entry: &LogEntry) -> u64 {
        self.applied_index = entry.index;
        if !entry.data.is_empty() {
            self.applied.lock().push((entry.index, entry.data.clone()));
        }
        entry.index
    }

    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        let d = self.disk.lock();
        let index = self.applied_index;
        let term = if index == d.snap.index {
            d.snap.term
        } else {
            let at = usize::try_from(index - d.snap.index - 1).expect("small");
            d.entries
                .get(at)
                .map(|e| e.term)
                .ok_or(StoreError::SnapshotTemporarilyUnavailable)?
        };
        Ok(Snapshot {
            meta: SnapshotMeta { index, term },
            data: encode_state(&self.applied.lock()),
        })
    }

    fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        let mut d = self.disk.lock();
        d.snap = snapshot.meta;
        d.snap_data = snapshot.data.clone();
        d.entries.clear();
        d.hard.commit = d.hard.commit.max(snapshot.meta.index);
        d.fsyncs += 1;
        *self.applied.lock() = decode_state(&snapshot.data);
        self.applied_index = snapshot.meta.index;
        if let Some(held) = &mut self.held {
            // Appends issued before the snapshot are superseded by it.
            for (_, done) in held.drain(..) {
                done(Ok(()));
            }
        }
        Ok(())
    }
}
