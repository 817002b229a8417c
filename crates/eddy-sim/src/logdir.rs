//! The on-disk store under the simulator: every group of a node is a
//! [`Replicated`]`<`[`ListMachine`]`>` over an eddy-log directory, all of a node's directories
//! on one crash-simulating [`MemBackend`] (its data directory).
//!
//! * Logs run on an inline [`CommitPool`] (no thread: a write happens inside the call that
//!   queues it, so a seed replays) with background durability: an append is written at
//!   once, and its durability report is held until the simulator's [`StoreFactory::sync`],
//!   which flushes (fdatasyncs) the group's log first. A failed flush fails every report it
//!   held.
//! * A crash is the backend's power cut: unsynced bytes are lost, and with `tear` each file's
//!   unsynced tail keeps a random prefix (recovery truncates a torn record). The held reports
//!   are dropped unsent.
//! * A full disk caps the backend at its current size (appends fail with `ENOSPC`); an I/O
//!   fault fails every fdatasync (the log fail-stops, `raft.state` cannot be written).
//! * Compaction asks the group's machine to persist its state; the node's upkeep
//!   ([`GroupStore::maintain`]) then writes the boundary and deletes sealed segments.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use eddy_consensus::testing::{Applied, ListMachine, MachineDisk};
use eddy_consensus::{
    Durable, GroupId, GroupStore, LogEntry, NodeId, RaftLog, Replicated, StoreError, WrapStore,
};
use eddy_log::{Cache, CommitPool, Durability, Log, LogConfig, MemBackend};

use crate::rng::SimRng;
use crate::store::{DiskFault, StoreFactory};

/// Durability reports waiting for the next sync, in append order.
type Held = Arc<Mutex<Vec<(Result<(), StoreError>, Durable)>>>;

fn lock(held: &Held) -> std::sync::MutexGuard<'_, Vec<(Result<(), StoreError>, Durable)>> {
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Opens groups as [`Replicated`] stores over eddy-log directories on a [`MemBackend`].
#[derive(Debug)]
pub struct LogFactory {
    pool: CommitPool,
    cache: Arc<Cache>,
    config: LogConfig,
}

impl Default for LogFactory {
    fn default() -> Self {
        LogFactory {
            pool: CommitPool::inline(),
            cache: Arc::new(Cache::new(4 << 20)),
            config: LogConfig {
                // Small segments: rolls, cuts across segments and compaction all happen.
                segment_size: 4096,
                index_interval: 512,
                durability: Durability::Background {
                    max_unsynced_records: u64::MAX,
                    max_unsynced_bytes: u64::MAX,
                },
                ..LogConfig::default()
            },
        }
    }
}

/// A group open on a node's backend: its log (to flush) and its held reports.
struct OpenGroup {
    log: Log,
    held: Held,
}

impl std::fmt::Debug for OpenGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenGroup")
            .field("log", &self.log)
            .field("held", &lock(&self.held).len())
            .finish()
    }
}

/// A node's data directory for [`LogFactory`]: one backend, each group in a directory.
#[derive(Debug, Default)]
pub struct LogDir {
    disk: Disk,
    machines: BTreeMap<GroupId, MachineDisk>,
    applied: BTreeMap<GroupId, Applied>,
}

impl LogDir {
    /// The directory's backend (what a test inspects or damages).
    pub fn backend(&self) -> &MemBackend {
        &self.disk.backend
    }
}

impl StoreFactory for LogFactory {
    type Outcome = u64;
    type Dir = LogDir;

    fn create(&mut self, _node: NodeId) -> LogDir {
        LogDir::default()
    }

    fn open(
        &mut self,
        dir: &mut LogDir,
        group: GroupId,
    ) -> Result<Box<dyn GroupStore<Outcome = u64>>, StoreError> {
        let log = RaftLog::open(
            Arc::new(dir.disk.backend.clone()),
            format!("g{}", group.0),
            self.config,
            &self.pool,
            Arc::clone(&self.cache),
        )?;
        let machine = ListMachine::open(dir.machines.entry(group).or_default().clone());
        let store = Replicated::open(log, machine)?;
        dir.applied.insert(group, store.machine().applied_list());
        let log = store.raft_log().log().clone();
        Ok(Box::new(dir.disk.hold(group, log, store)))
    }

    fn unsynced(&self, dir: &LogDir) -> bool {
        dir.disk.unsynced()
    }

    fn sync(&mut self, dir: &mut LogDir) {
        dir.disk.sync();
    }

    fn crash(&mut self, dir: &mut LogDir, tear: bool, rng: &mut SimRng) -> u64 {
        dir.disk.crash(tear, rng)
    }

    fn set_fault(&mut self, dir: &mut LogDir, fault: Option<DiskFault>) {
        dir.disk.set_fault(fault);
    }

    fn compact(&mut self, dir: &mut LogDir, group: GroupId, through: u64) -> bool {
        dir.machines
            .get(&group)
            .map(|machine| machine.request_compaction(through))
            .is_some()
    }

    fn state(&self, dir: &LogDir, group: GroupId) -> Vec<(u64, Bytes)> {
        dir.applied
            .get(&group)
            .map(Applied::get)
            .unwrap_or_default()
    }
}

/// A node's disk: one crash-simulating backend, and the groups open on it with their held
/// durability reports.
#[derive(Debug, Default)]
pub(crate) struct Disk {
    pub(crate) backend: MemBackend,
    open: BTreeMap<GroupId, OpenGroup>,
}

impl Disk {
    /// Wraps a group's store (whose Raft log is `log`) so its durability reports wait for
    /// [`Disk::sync`].
    pub(crate) fn hold<S: GroupStore>(
        &mut self,
        group: GroupId,
        log: Log,
        store: S,
    ) -> HeldStore<S> {
        let held = Held::default();
        self.open.insert(
            group,
            OpenGroup {
                log,
                held: Arc::clone(&held),
            },
        );
        HeldStore { inner: store, held }
    }

    /// Whether a durability report waits.
    pub(crate) fn unsynced(&self) -> bool {
        self.open.values().any(|g| !lock(&g.held).is_empty())
    }

    /// Completes the held durability reports of every open group: flushes (fdatasyncs) each
    /// group's log first, and fails every report a failed flush held.
    pub(crate) fn sync(&self) {
        for group in self.open.values() {
            let reports = std::mem::take(&mut *lock(&group.held));
            if reports.is_empty() {
                continue;
            }
            let flushed = group.log.flush().wait();
            for (result, durable) in reports {
                let result = match &flushed {
                    Ok(()) => result,
                    Err(e) => Err(StoreError::Storage(e.to_string().into())),
                };
                durable(result);
            }
        }
    }

    /// The backend's power cut; with `tear`, each file keeps a random prefix of its unsynced
    /// tail. The dead process's stores are dropped by the simulator: their held reports never
    /// run. Returns how many segment files kept part of their tail (recovery decides how many
    /// whole entries that is).
    pub(crate) fn crash(&mut self, tear: bool, rng: &mut SimRng) -> u64 {
        let mut torn = 0;
        self.backend.crash_with(|path, tail| {
            if !tear || tail.is_empty() {
                return Vec::new();
            }
            let keep = usize::try_from(rng.below(tail.len() as u64 + 1)).expect("small");
            // Index files are torn too (derived data, rebuilt), but only a segment's torn
            // tail is a torn write of entries.
            if keep > 0 && path.extension().is_some_and(|e| e == "log") {
                torn += 1;
            }
            tail[..keep].to_vec()
        });
        self.open.clear();
        torn
    }

    /// Makes the backend's writes fail (a full disk caps it at its current size, an I/O fault
    /// fails every fdatasync) or succeed again.
    pub(crate) fn set_fault(&self, fault: Option<DiskFault>) {
        let disk = &self.backend;
        match fault {
            Some(DiskFault::Full) => disk.set_capacity(Some(disk.used_bytes())),
            Some(DiskFault::Io) => disk.fail_syncs(u64::MAX),
            None => {
                disk.set_capacity(None);
                disk.fail_syncs(0);
            }
        }
    }
}

/// A group store whose durability reports wait for the simulator's sync.
pub(crate) struct HeldStore<S> {
    inner: S,
    held: Held,
}

impl<S: GroupStore> WrapStore for HeldStore<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    fn wrap_append(&mut self, entries: Vec<LogEntry>, durable: Durable) {
        // The inline pool writes (and reports) before `append` returns; the report waits.
        let held = Arc::clone(&self.held);
        self.inner.append(
            entries,
            Box::new(move |result| lock(&held).push((result, durable))),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_consensus::EntryKind;

    fn entries(first: u64, last: u64) -> Vec<LogEntry> {
        (first..=last)
            .map(|index| LogEntry {
                index,
                term: 1,
                kind: EntryKind::Normal,
                data: Bytes::from(vec![7; 100]),
            })
            .collect()
    }

    #[test]
    fn reports_wait_for_the_sync_and_a_crash_loses_what_it_did_not_cover() {
        let mut factory = LogFactory::default();
        let mut dir = factory.create(1);
        let g = GroupId(3);
        let mut store = factory.open(&mut dir, g).unwrap();
        let reports = Arc::new(Mutex::new(Vec::new()));
        let report = |tag: u32| -> Durable {
            let reports = Arc::clone(&reports);
            Box::new(move |r: Result<(), StoreError>| {
                reports.lock().unwrap().push((tag, r.is_ok()));
            })
        };
        store.append(entries(1, 5), report(1));
        assert!(factory.unsynced(&dir));
        assert!(reports.lock().unwrap().is_empty(), "held until the sync");
        factory.sync(&mut dir);
        assert_eq!(*reports.lock().unwrap(), [(1, true)]);
        assert!(!factory.unsynced(&dir));

        store.append(entries(6, 9), report(2));
        let mut rng = SimRng::new(1);
        assert_eq!(factory.crash(&mut dir, false, &mut rng), 0);
        drop(store);
        assert_eq!(reports.lock().unwrap().len(), 1, "lost reports never run");
        let store = factory.open(&mut dir, g).unwrap();
        assert_eq!(store.last_index(), 5, "only the synced entries survive");

        // An I/O fault fails the sync and every report it held.
        let mut store = store;
        store.append(entries(6, 6), report(3));
        factory.set_fault(&mut dir, Some(DiskFault::Io));
        factory.sync(&mut dir);
        assert_eq!(reports.lock().unwrap()[1], (3, false));
    }
}
