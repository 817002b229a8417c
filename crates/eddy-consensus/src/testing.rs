//! An in-memory [`GroupStore`] for tests of the consensus layer and of code above it.
//!
//! The store's durable part ([`MemDisk`]) outlives the store, so a test can crash a member
//! (drop its store: what was not synced is gone), reopen it on the same disk, or wipe it. The
//! state machine is the list of applied payloads; an entry's outcome is its index.
//! Durability is immediate by default; with [`MemStore::hold_syncs`] appends wait for
//! [`MemStore::sync`] (or [`MemDisk::flush`]), which lets a test keep a member from
//! acknowledging. A simulator also needs the faults of a real disk: [`MemDisk::crash`] cuts the
//! power with part of the unsynced tail reaching the disk anyway (a torn write), and
//! [`MemDisk::fail_writes`] makes writes fail (a full disk, an I/O error on `fdatasync`).
//!
//! [`ListMachine`] is the same state machine (applied payloads) for the on-disk
//! [`Replicated`](crate::Replicated) store, its durable snapshot in a [`MachineDisk`].

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::store::{Durable, GroupStore, StoreError};
use crate::types::{HardState, LogEntry, Membership, Snapshot, SnapshotMeta};

mod machine;

pub use machine::{ListMachine, MachineDisk};

/// What survives a crash (and, in `held`, what the crash loses).
#[derive(Debug, Default)]
struct DiskState {
    hard: HardState,
    snap: SnapshotMeta,
    snap_data: Bytes,
    /// Durable entries, from `snap.index + 1`.
    entries: Vec<LogEntry>,
    fsyncs: u64,
    /// Appends written but not synced yet (`None`: appends are durable at once).
    held: Option<Held>,
    /// Writes fail while set.
    fault: Option<DiskFault>,
    /// The group's membership (`None`: never changed).
    membership: Option<Membership>,
}

/// How a [`MemDisk`] refuses writes while [`MemDisk::fail_writes`] is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskFault {
    /// `ENOSPC`: appends fail when written, hard-state saves and snapshots too.
    Full,
    /// `EIO` on `fdatasync`: appends fail when synced (their bytes are not trusted after a
    /// failed sync), hard-state saves and snapshots fail at once.
    Io,
}

impl DiskFault {
    fn error(self) -> StoreError {
        let error = match self {
            DiskFault::Full => std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "simulated ENOSPC on a MemDisk",
            ),
            DiskFault::Io => std::io::Error::other("simulated EIO on a MemDisk"),
        };
        StoreError::Storage(Box::new(error))
    }
}

/// One append waiting for its sync; `failed` when it was refused at write time.
struct HeldAppend {
    entries: Vec<LogEntry>,
    done: Durable,
    failed: Option<DiskFault>,
}

/// Appends waiting for a sync, in append order.
#[derive(Default)]
struct Held(Vec<HeldAppend>);

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} held appends", self.0.len())
    }
}

impl DiskState {
    /// Writes entries: everything at or after the first one is replaced.
    fn write(&mut self, entries: &[LogEntry]) {
        let Some(first) = entries.first().map(|e| e.index) else {
            return;
        };
        self.entries.retain(|e| e.index < first);
        self.entries.extend_from_slice(entries);
    }
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
                .filter(|e| {
                    e.index <= index
                        && !e.data.is_empty()
                        && e.kind == crate::types::EntryKind::Normal
                })
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

    /// Appends written but not yet synced (held by [`MemStore::hold_syncs`]).
    pub fn unsynced_appends(&self) -> usize {
        self.lock().held.as_ref().map_or(0, |h| h.0.len())
    }

    /// Completes one sync: every held append becomes durable (or fails, under a fault) and is
    /// reported, in append order. Once one fails, every later one fails too: a log has no
    /// holes. Appends stay held afterwards (unlike [`MemStore::sync`]).
    pub fn flush(&self) {
        let done = {
            let mut d = self.lock();
            let Some(held) = d.held.as_mut() else {
                return;
            };
            let appends = std::mem::take(&mut held.0);
            let mut fault = d.fault;
            let mut done = Vec::with_capacity(appends.len());
            if !appends.is_empty() {
                d.fsyncs += 1;
            }
            for a in appends {
                // A failed fdatasync leaves the written bytes untrusted: they are dropped, and
                // so is everything written after a refused write.
                let failed = fault.or(a.failed);
                fault = failed;
                if failed.is_none() {
                    d.write(&a.entries);
                }
                done.push((a.done, failed));
            }
            done
        };
        // Reported outside the lock: a completion may call back into the store.
        for (callback, failed) in done {
            callback(failed.map_or(Ok(()), |f| Err(f.error())));
        }
    }

    /// Cuts the power: every held append is lost unreported, except that the first `survive`
    /// held entries (in append order) reach the disk anyway, as a write that landed without
    /// its sync completing does. Returns how many entries survived. Appends are immediate
    /// again until a store on this disk holds them, and any write fault is cleared.
    pub fn crash(&self, survive: usize) -> usize {
        let (lost, survived) = {
            let mut d = self.lock();
            d.fault = None;
            let Some(held) = d.held.take() else {
                return 0;
            };
            let mut survived = 0;
            for a in &held.0 {
                if survived == survive || a.failed.is_some() {
                    break;
                }
                let take = a.entries.len().min(survive - survived);
                d.write(&a.entries[..take]);
                survived += take;
            }
            (held.0, survived)
        };
        // The lost completions are dropped outside the lock, never called.
        drop(lost);
        survived
    }

    /// Makes writes fail until called with `None` (see [`DiskFault`]).
    pub fn fail_writes(&self, fault: Option<DiskFault>) {
        self.lock().fault = fault;
    }
}

/// An in-memory group store over a [`MemDisk`].
///
/// Dropping the store is a crash of its process: appends it held unsynced are lost.
pub struct MemStore {
    disk: MemDisk,
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
            .field("held", &self.disk.unsynced_appends())
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
            applied_index,
            applied: Applied(Arc::new(Mutex::new(applied))),
        }
    }

    /// From now on appends become durable only at [`MemStore::sync`] or [`MemDisk::flush`].
    pub fn hold_syncs(&mut self) {
        self.disk.lock().held.get_or_insert_with(Held::default);
    }

    /// Makes every held append durable and reports it; appends are immediate again.
    pub fn sync(&mut self) {
        self.disk.flush();
        self.disk.lock().held = None;
    }

    /// The state machine (applied payloads with their indexes), observable while the node
    /// owns the store.
    pub fn applied(&self) -> Applied {
        self.applied.clone()
    }
}

impl Drop for MemStore {
    fn drop(&mut self) {
        // The process is gone: its unsynced appends with it (a no-op after MemDisk::crash).
        self.disk.crash(0);
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
        let result = {
            let mut d = self.disk.lock();
            let fault = d.fault;
            if let Some(held) = &mut d.held {
                // A full disk refuses the write itself; an I/O error shows at the sync.
                let failed = fault.filter(|f| *f == DiskFault::Full);
                held.0.push(HeldAppend {
                    entries,
                    done: durable,
                    failed,
                });
                return;
            }
            if let Some(fault) = fault {
                Err(fault.error())
            } else {
                d.write(&entries);
                d.fsyncs += 1;
                Ok(())
            }
        };
        durable(result);
    }

    fn save_hard_state(&mut self, state: HardState, sync: bool) -> Result<(), StoreError> {
        let mut d = self.disk.lock();
        if let Some(fault) = d.fault {
            return Err(fault.error());
        }
        d.hard = state;
        if sync {
            d.fsyncs += 1;
        }
        Ok(())
    }

    fn membership(&self) -> Option<Membership> {
        self.disk.lock().membership.clone()
    }

    fn save_membership(&mut self, membership: &Membership) -> Result<(), StoreError> {
        let mut d = self.disk.lock();
        if let Some(fault) = d.fault {
            return Err(fault.error());
        }
        d.membership = Some(membership.clone());
        d.fsyncs += 1;
        Ok(())
    }

    fn applied_index(&self) -> u64 {
        self.applied_index
    }

    fn apply(&mut self, entry: &LogEntry) -> u64 {
        self.applied_index = entry.index;
        // A membership change is the engine's, not the state machine's.
        if !entry.data.is_empty() && entry.kind == crate::types::EntryKind::Normal {
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
        if let Some(fault) = d.fault {
            return Err(fault.error());
        }
        d.snap = snapshot.meta;
        d.snap_data = snapshot.data.clone();
        d.entries.clear();
        d.hard.commit = d.hard.commit.max(snapshot.meta.index);
        d.fsyncs += 1;
        // Appends issued before the snapshot are superseded by it.
        let superseded = d.held.as_mut().map(|h| std::mem::take(&mut h.0));
        drop(d);
        *self.applied.lock() = decode_state(&snapshot.data);
        self.applied_index = snapshot.meta.index;
        for a in superseded.into_iter().flatten() {
            (a.done)(Ok(()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::EntryKind;

    fn entries(first: u64, last: u64, term: u64) -> Vec<LogEntry> {
        (first..=last)
            .map(|index| LogEntry {
                index,
                term,
                kind: EntryKind::Normal,
                data: Bytes::from(format!("e{index}t{term}")),
            })
            .collect()
    }

    /// Reports of durability callbacks: (tag, Ok or the error's kind).
    type Reports = Arc<Mutex<Vec<(u32, Result<(), std::io::ErrorKind>)>>>;

    fn report(reports: &Reports, tag: u32) -> Durable {
        let reports = reports.clone();
        Box::new(move |result: Result<(), StoreError>| {
            let result = result.map_err(|e| match e {
                StoreError::Storage(source) => source
                    .downcast_ref::<std::io::Error>()
                    .expect("an io error")
                    .kind(),
                other => panic!("unexpected {other:?}"),
            });
            reports.lock().unwrap().push((tag, result));
        })
    }

    fn indexes(disk: &MemDisk) -> Vec<(u64, u64)> {
        disk.entries().iter().map(|e| (e.index, e.term)).collect()
    }

    #[test]
    fn held_appends_are_durable_only_at_a_flush_and_stay_held_after_it() {
        let disk = MemDisk::new();
        let mut store = MemStore::open(disk.clone());
        store.hold_syncs();
        let reports = Reports::default();
        store.append(entries(1, 3, 1), report(&reports, 1));
        store.append(entries(3, 4, 2), report(&reports, 2));
        assert_eq!(disk.unsynced_appends(), 2);
        assert!(disk.entries().is_empty());
        assert_eq!(store.last_index(), 0);
        assert!(reports.lock().unwrap().is_empty());

        disk.flush();
        assert_eq!(*reports.lock().unwrap(), [(1, Ok(())), (2, Ok(()))]);
        assert_eq!(indexes(&disk), [(1, 1), (2, 1), (3, 2), (4, 2)]);
        assert_eq!(disk.fsyncs(), 1);

        store.append(entries(5, 5, 2), report(&reports, 3));
        assert_eq!(disk.unsynced_appends(), 1, "still held after a flush");
        store.sync();
        store.append(entries(6, 6, 2), report(&reports, 4));
        assert_eq!(disk.unsynced_appends(), 0, "immediate after MemStore::sync");
        assert_eq!(store.last_index(), 6);
    }

    #[test]
    fn a_crash_loses_unsynced_appends_unreported_except_a_torn_prefix() {
        let disk = MemDisk::new();
        let mut store = MemStore::open(disk.clone());
        store.append(entries(1, 2, 1), Box::new(|r| r.unwrap()));
        store.hold_syncs();
        let reports = Reports::default();
        // The second append replaces entry 4 of the first: the torn prefix follows append order.
        store.append(entries(3, 5, 2), report(&reports, 1));
        store.append(entries(4, 6, 3), report(&reports, 2));
        assert_eq!(disk.crash(4), 4);
        drop(store);
        assert!(
            reports.lock().unwrap().is_empty(),
            "lost appends are never reported"
        );
        assert_eq!(indexes(&disk), [(1, 1), (2, 1), (3, 2), (4, 3)]);
        assert_eq!(disk.unsynced_appends(), 0);

        // The reopened store does not hold unless asked, and a crash without a tear keeps
        // exactly the synced entries.
        let mut store = MemStore::open(disk.clone());
        store.hold_syncs();
        store.append(entries(5, 7, 3), report(&reports, 3));
        assert_eq!(disk.crash(0), 0);
        assert_eq!(store.last_index(), 4);
        assert!(reports.lock().unwrap().is_empty());
    }

    #[test]
    fn dropping_a_holding_store_is_a_crash_of_its_process() {
        let disk = MemDisk::new();
        let mut store = MemStore::open(disk.clone());
        store.hold_syncs();
        let reports = Reports::default();
        store.append(entries(1, 2, 1), report(&reports, 1));
        drop(store);
        assert_eq!(disk.unsynced_appends(), 0);
        assert!(disk.entries().is_empty());
        assert!(reports.lock().unwrap().is_empty());
    }

    #[test]
    fn a_full_disk_refuses_writes_in_order_and_recovers_when_cleared() {
        let disk = MemDisk::new();
        let mut store = MemStore::open(disk.clone());
        let reports = Reports::default();
        disk.fail_writes(Some(DiskFault::Full));
        store.append(entries(1, 1, 1), report(&reports, 1));
        assert_eq!(
            *reports.lock().unwrap(),
            [(1, Err(std::io::ErrorKind::StorageFull))]
        );
        assert!(store
            .save_hard_state(
                HardState {
                    term: 1,
                    vote: 1,
                    commit: 0
                },
                true
            )
            .is_err());
        assert_eq!(disk.hard_state(), HardState::default());

        // Held: an append written before the fault succeeds at the sync, the refused one
        // fails, and so does one written after it once the disk has room again (it would
        // leave a hole in the log); each is reported in append order.
        disk.fail_writes(None);
        store.hold_syncs();
        store.append(entries(1, 1, 1), report(&reports, 2));
        disk.fail_writes(Some(DiskFault::Full));
        store.append(entries(2, 2, 1), report(&reports, 3));
        disk.fail_writes(None);
        store.append(entries(3, 3, 1), report(&reports, 4));
        disk.flush();
        assert_eq!(
            reports.lock().unwrap()[1..],
            [
                (2, Ok(())),
                (3, Err(std::io::ErrorKind::StorageFull)),
                (4, Err(std::io::ErrorKind::StorageFull))
            ]
        );
        assert_eq!(indexes(&disk), [(1, 1)]);
        assert_eq!(MemStore::open(disk.clone()).last_index(), 1);
    }

    #[test]
    fn an_io_error_fails_the_sync_and_drops_what_it_covered() {
        let disk = MemDisk::new();
        let mut store = MemStore::open(disk.clone());
        store.hold_syncs();
        let reports = Reports::default();
        store.append(entries(1, 2, 1), report(&reports, 1));
        disk.fail_writes(Some(DiskFault::Io));
        disk.flush();
        assert_eq!(
            *reports.lock().unwrap(),
            [(1, Err(std::io::ErrorKind::Other))]
        );
        assert!(
            disk.entries().is_empty(),
            "a failed sync's bytes are not kept"
        );
        let snapshot = Snapshot {
            meta: SnapshotMeta { index: 5, term: 1 },
            data: Bytes::new(),
        };
        assert!(store.install_snapshot(&snapshot).is_err());
        assert_eq!(store.snapshot_meta(), SnapshotMeta::default());
        // A crash clears the fault (the disk is replaced or repaired with the machine).
        disk.crash(0);
        assert!(store.install_snapshot(&snapshot).is_ok());
        assert_eq!(store.first_index(), 6);
    }
}
