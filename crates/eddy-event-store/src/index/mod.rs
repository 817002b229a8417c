//! The on-disk per-aggregate index of one shard: a small log-structured merge tree whose
//! entries are derived from the shard's log (so it can always be rebuilt from it).
//!
//! * The **memtable** holds entries of committed records since the last flush (a hash map
//!   with order kept only where scans need it, byte-budgeted: see `events/memtable.rs`).
//!   When it exceeds its budget it is frozen and a background thread writes it as an
//!   immutable sorted **run** file, then records the run and the *checkpoint* (the log
//!   sequence number up to which runs hold everything) in the `MANIFEST`.
//! * Runs are merged newest-wins by a binary-counter policy (a run is merged into its older
//!   neighbour once it is at least half its size), so a shard has `O(log n)` runs. Merges run
//!   on their own thread: a flush never waits for a merge, and appliers (the commit path)
//!   wait only when two memtables are already frozen (back-pressure, bounded memory). A
//!   failed flush is retried with backoff; while it fails appliers do not wait, and the shard
//!   refuses mutations once two memtables are frozen (`Index::flush_backlog`).
//! * Each run keeps in memory only its sparse block index (first key of every 8 KiB block)
//!   and a split-block bloom filter (~10 bits per key) over its point keys (aggregates, client
//!   marks, schemas) and the aggregate prefix of its version keys: a lookup of an aggregate
//!   or a client that never wrote touches no disk, and a version scan reads only runs that
//!   hold that aggregate. Data blocks are read on demand, verified (CRC-32C), and kept in the
//!   shared byte-budgeted [`Cache`].
//!
//! Files in an index directory:
//!
//! ```text
//! MANIFEST   magic "EDDYEMF\0" | version u32 | count u32 | checkpoint u64 | next run id u64
//!            | run ids u64 × count | CRC-32C u32 of everything before it
//! run-<id:020>.eix
//!   header   magic "EDDYEIX\0" | version u32 | reserved u32 | run id u64 | CRC u32 | 0 u32
//!   blocks   len u32 | CRC-32C u32 | entries: shared u8 | suffix len u8 | value len u32
//!            | key suffix | value          (keys sorted; `shared` bytes from the previous key)
//!   index    per block: key len u8 | first key | offset u64 | len u32
//!   bloom    32-byte blocks of eight u32 words
//!   footer   magic "EIXFOOT\0" | index off u64 | index len u64 | bloom off u64
//!            | bloom len u64 | entries u64 | index CRC u32 | bloom CRC u32 | CRC u32 | 0 u32
//! ```
//!
//! Every file is written to a temporary name, synced and renamed; the manifest is replaced
//! last. A missing or damaged manifest or run means the index is rebuilt from the log.

mod format;
mod manifest;
mod run;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

use bytes::Bytes;

use eddy_log::{
    create_dir_durable, lock, read_lock, sync, write_atomic, write_lock, Cache, IoOp, OpenMode,
    StorageBackend,
};

use crate::error::{EventStoreError, Result};
use crate::keys::bloom_key;
use crate::memtable::Memtable;
use format::{parse_run_name, BLOOM_BITS_PER_KEY, ENTRY_OVERHEAD, MAX_FROZEN, MAX_RUNS};
use manifest::{decode_manifest, encode_manifest, Manifest};
use run::{Entries, Run, RunIter, RunWriter};

pub use format::{BLOCK_TARGET, MANIFEST};

// ------------------------------------------------------------------------------------------------
// The index.

/// Entries (key, value) to apply to an index, laid out back to back in one buffer: a batch
/// costs two allocations however many entries it holds, not two per entry.
#[derive(Debug, Default)]
pub(crate) struct EntryBatch {
    bytes: Vec<u8>,
    /// Per entry, where its key and its value end in `bytes` (each starts where the one
    /// before it ends).
    ends: Vec<(usize, usize)>,
}

impl EntryBatch {
    /// An empty batch with room for about `entries` entries of `bytes` bytes in all.
    pub(crate) fn with_capacity(entries: usize, bytes: usize) -> Self {
        EntryBatch {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(entries),
        }
    }

    pub(crate) fn push(&mut self, key: &[u8], value: &[u8]) {
        self.bytes.extend_from_slice(key);
        let key_end = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.ends.push((key_end, self.bytes.len()));
    }

    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// The entries, in the order they were pushed.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut start = 0;
        self.ends.iter().map(move |&(key_end, end)| {
            let entry = (&self.bytes[start..key_end], &self.bytes[key_end..end]);
            start = end;
            entry
        })
    }
}

impl<K: AsRef<[u8]>, V: AsRef<[u8]>> FromIterator<(K, V)> for EntryBatch {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut batch = EntryBatch::default();
        for (k, v) in iter {
            batch.push(k.as_ref(), v.as_ref());
        }
        batch
    }
}

/// A memtable frozen for flushing, with the log position it reflects.
#[derive(Debug)]
struct Frozen {
    map: Memtable,
    end_seq: u64,
}

#[derive(Debug, Default)]
struct View {
    active: Memtable,
    frozen: Vec<Arc<Frozen>>,
    runs: Vec<Arc<Run>>,
    /// The log position the active memtable reflects (everything below is in the index).
    applied: u64,
    checkpoint: u64,
}

/// Counters of one shard index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Bytes charged to the active and frozen memtables.
    pub memtable_bytes: u64,
    /// Runs on disk.
    pub runs: usize,
    /// Bytes of the run files.
    pub run_bytes: u64,
    /// Entries in the runs (duplicates across runs counted each time).
    pub run_entries: u64,
    /// In-memory bytes of run block indexes and blooms.
    pub resident_bytes: u64,
    /// The log position below which the runs hold everything.
    pub checkpoint: u64,
}

/// One shard's index.
pub(crate) struct Index {
    dir: PathBuf,
    backend: Arc<dyn StorageBackend>,
    cache: Arc<Cache>,
    budget: u64,
    view: RwLock<View>,
    /// Serializes flushes.
    flushing: Mutex<()>,
    /// Serializes merges.
    merging: Mutex<()>,
    /// Held while the manifest is rewritten and the view's run list changes with it (flushes
    /// and merges run concurrently; only this step is exclusive).
    manifest_lock: Mutex<()>,
    next_id: AtomicU64,
    /// A background flusher serves this index: appliers may wait for it (back-pressure).
    /// Cleared at shutdown, so a commit finishing after the flusher stopped never waits.
    served: AtomicBool,
    /// Set while the last flush failed (until one succeeds): appliers then never wait for the
    /// flusher (it retries with backoff and may not succeed for a long time; an applier waits
    /// on a commit thread the other logs share), and the shard refuses new mutations while
    /// [`MAX_FROZEN`] memtables wait (see [`Index::flush_backlog`]), which bounds the memory.
    flush_failing: AtomicBool,
    flush_failure: Mutex<Option<Arc<EventStoreError>>>,
    drained: Condvar,
    drained_lock: Mutex<()>,
    /// The shard log the index covers: synced through a checkpoint before the manifest
    /// records it, so a power cut never leaves a checkpoint beyond the log's durable end (a
    /// cluster member's shard logs complete writes before their fdatasync).
    /// (Weak: the log's hook holds this index.)
    log: std::sync::OnceLock<eddy_log::WeakLog>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("dir", &self.dir)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// What [`Index::open`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexOpen {
    /// Replay the log from here.
    pub checkpoint: u64,
    /// The index was unusable and starts empty (rebuilt from the log).
    pub rebuilt: bool,
}

/// Reads the index's manifest in `dir`: `None` when there is none, or when it is too long or
/// does not decode (the index is then unusable).
fn read_manifest(backend: &dyn StorageBackend, dir: &Path) -> Result<Option<Manifest>> {
    let path = dir.join(MANIFEST);
    let f = match backend.open(&path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(EventStoreError::io(IoOp::Open, path, e)),
    };
    let len = f
        .len()
        .map_err(|e| EventStoreError::io(IoOp::Len, &path, e))?;
    if len > (36 + MAX_RUNS * 8) as u64 {
        return Ok(None);
    }
    let mut b = vec![0u8; len as usize];
    f.read_at(0, &mut b)
        .map_err(|e| EventStoreError::io(IoOp::Read, &path, e))?;
    Ok(decode_manifest(&b))
}

/// The runs an index opens with ([`load_runs`]).
struct LoadedRuns {
    runs: Vec<Arc<Run>>,
    /// The ids of `runs` (none when the index starts empty).
    keep: Vec<u64>,
    /// The next run id (past every id the manifest has handed out).
    next_id: u64,
    /// Replay the log from here.
    checkpoint: u64,
    /// The index is unusable and starts empty.
    rebuilt: bool,
}

/// Opens the runs `manifest` lists. When one fails to open, the index is unusable: it starts
/// empty (`rebuilt`), keeping only the manifest's next run id. Without a manifest it starts
/// empty too, and counts as rebuilt when `dir` holds a manifest or run file (one that did not
/// decode, or left behind).
fn load_runs(
    backend: &dyn StorageBackend,
    dir: &Path,
    manifest: Option<&Manifest>,
) -> Result<LoadedRuns> {
    let Some(m) = manifest else {
        let rebuilt = backend
            .list(dir)
            .map_err(|e| EventStoreError::io(IoOp::List, dir, e))?
            .iter()
            .any(|e| e.name == MANIFEST || parse_run_name(&e.name).is_some());
        return Ok(LoadedRuns {
            runs: Vec::new(),
            keep: Vec::new(),
            next_id: 1,
            checkpoint: 0,
            rebuilt,
        });
    };
    let loaded: Result<Vec<Run>> = m
        .runs
        .iter()
        .map(|id| Run::open(backend, dir, *id))
        .collect();
    match loaded {
        Ok(l) => Ok(LoadedRuns {
            runs: l.into_iter().map(Arc::new).collect(),
            keep: m.runs.clone(),
            next_id: m.next_id,
            checkpoint: m.checkpoint,
            rebuilt: false,
        }),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "event index unusable; rebuilding it from the log");
            Ok(LoadedRuns {
                runs: Vec::new(),
                keep: Vec::new(),
                next_id: m.next_id,
                checkpoint: 0,
                rebuilt: true,
            })
        }
    }
}

/// Removes every file in `dir` but the runs in `listed` and, with `keep_manifest`, the
/// manifest; directories stay. A removed run file's id still counts: `next_id` moves past it,
/// so no id is ever handed out twice.
fn remove_unlisted(
    backend: &dyn StorageBackend,
    dir: &Path,
    listed: &[u64],
    keep_manifest: bool,
    next_id: &mut u64,
) -> Result<()> {
    for entry in backend
        .list(dir)
        .map_err(|e| EventStoreError::io(IoOp::List, dir, e))?
    {
        let is_listed = parse_run_name(&entry.name).is_some_and(|id| listed.contains(&id));
        let is_manifest = entry.name == MANIFEST && keep_manifest;
        if !is_listed && !is_manifest && !entry.is_dir {
            if let Some(id) = parse_run_name(&entry.name) {
                *next_id = (*next_id).max(id + 1);
            }
            let path = dir.join(&entry.name);
            backend
                .remove_file(&path)
                .map_err(|e| EventStoreError::io(IoOp::Remove, &path, e))?;
        }
    }
    Ok(())
}

impl Index {
    fn read_guard(&self) -> std::sync::RwLockReadGuard<'_, View> {
        read_lock(&self.view)
    }

    fn write_guard(&self) -> std::sync::RwLockWriteGuard<'_, View> {
        write_lock(&self.view)
    }

    /// Opens the index in `dir`; an unusable one is wiped (the log rebuilds it).
    pub(crate) fn open(
        backend: Arc<dyn StorageBackend>,
        dir: PathBuf,
        cache: Arc<Cache>,
        budget: u64,
    ) -> Result<(Index, IndexOpen)> {
        create_dir_durable(&*backend, &dir)?;
        let manifest = read_manifest(&*backend, &dir)?;
        let LoadedRuns {
            runs,
            keep,
            mut next_id,
            checkpoint,
            rebuilt,
        } = load_runs(&*backend, &dir, manifest.as_ref())?;
        // Remove whatever the manifest does not list (orphans, temporaries, a wiped index).
        let keep_manifest = manifest.is_some() && !rebuilt;
        remove_unlisted(&*backend, &dir, &keep, keep_manifest, &mut next_id)?;
        let index = Index {
            dir,
            backend,
            cache,
            budget: budget.max(1),
            view: RwLock::new(View {
                runs,
                applied: checkpoint,
                checkpoint,
                ..View::default()
            }),
            flushing: Mutex::new(()),
            merging: Mutex::new(()),
            manifest_lock: Mutex::new(()),
            next_id: AtomicU64::new(next_id),
            served: AtomicBool::new(false),
            flush_failing: AtomicBool::new(false),
            flush_failure: Mutex::new(None),
            drained: Condvar::new(),
            drained_lock: Mutex::new(()),
            log: std::sync::OnceLock::new(),
        };
        if rebuilt {
            index.write_manifest(&[], 0)?;
        }
        Ok((
            index,
            IndexOpen {
                checkpoint,
                rebuilt,
            },
        ))
    }

    /// Drops every entry and run (used when the log turns out shorter than the checkpoint).
    pub(crate) fn reset(&self) -> Result<()> {
        let _f = lock(&self.flushing);
        let _g = lock(&self.merging);
        let _m = lock(&self.manifest_lock);
        self.write_manifest(&[], 0)?;
        let old = {
            let mut view = self.write_guard();
            let old = std::mem::take(&mut view.runs);
            *view = View::default();
            old
        };
        for run in old {
            let _ = self.backend.remove_file(&run.path);
        }
        Ok(())
    }

    fn write_manifest(&self, runs: &[u64], checkpoint: u64) -> Result<()> {
        let m = Manifest {
            checkpoint,
            next_id: self.next_id.load(Ordering::Relaxed),
            runs: runs.to_vec(),
        };
        Ok(write_atomic(
            &*self.backend,
            &self.dir,
            MANIFEST,
            &encode_manifest(&m),
        )?)
    }

    /// Whether a background flusher serves this index (see [`Index::apply`]).
    pub(crate) fn set_served(&self, served: bool) {
        self.served.store(served, Ordering::SeqCst);
        self.drained.notify_all();
    }

    /// Records the outcome of a background flush: the error of a failed one, `None` after a
    /// successful one.
    pub(crate) fn set_flush_failure(&self, failure: Option<Arc<EventStoreError>>) {
        let failing = failure.is_some();
        *lock(&self.flush_failure) = failure;
        self.flush_failing.store(failing, Ordering::SeqCst);
        self.drained.notify_all();
    }

    /// The flush failure that makes the shard refuse mutations: the last flush failed and
    /// [`MAX_FROZEN`] memtables wait for the next one.
    pub(crate) fn flush_backlog(&self) -> Option<Arc<EventStoreError>> {
        if !self.flush_failing.load(Ordering::SeqCst) || self.read_guard().frozen.len() < MAX_FROZEN
        {
            return None;
        }
        lock(&self.flush_failure).clone()
    }

    /// Applies the entries of committed records up to (not including) `end_seq`. Returns true
    /// when a frozen memtable waits for its flush. With `wait`, and while a flusher serves the
    /// index and its flushes succeed, waits as long as too many memtables are frozen
    /// (back-pressure).
    pub(crate) fn apply(&self, entries: &EntryBatch, end_seq: u64, wait: bool) -> bool {
        let mut view = self.write_guard();
        if wait {
            while view.frozen.len() >= MAX_FROZEN
                && self.served.load(Ordering::SeqCst)
                && !self.flush_failing.load(Ordering::SeqCst)
            {
                drop(view);
                let g = lock(&self.drained_lock);
                drop(sync::wait_timeout(
                    &self.drained,
                    g,
                    std::time::Duration::from_millis(10),
                ));
                view = self.write_guard();
            }
        }
        for (k, v) in entries.iter() {
            view.active.insert(k, v, ENTRY_OVERHEAD);
        }
        debug_assert!(end_seq >= view.applied);
        view.applied = end_seq;
        if view.active.bytes() >= self.budget {
            let map = std::mem::take(&mut view.active);
            view.frozen.push(Arc::new(Frozen { map, end_seq }));
        }
        !view.frozen.is_empty()
    }

    /// Looks a key up (memtables newest first, then runs newest first).
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        let runs: Vec<Arc<Run>> = {
            let view = self.read_guard();
            if let Some(v) = view.active.get(key) {
                return Ok(Some(Bytes::copy_from_slice(v)));
            }
            for f in view.frozen.iter().rev() {
                if let Some(v) = f.map.get(key) {
                    return Ok(Some(Bytes::copy_from_slice(v)));
                }
            }
            view.runs.clone()
        };
        for run in runs.iter().rev() {
            if let Some(v) = run.get(&self.cache, key)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// Looks a key up like [`Index::get`] and hands its value to `f` (a memtable's value is
    /// not copied: `f` runs under the view's read lock, so it should be short, a decode).
    pub(crate) fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let runs: Vec<Arc<Run>> = {
            let view = self.read_guard();
            if let Some(v) = view.active.get(key) {
                return Ok(Some(f(v)));
            }
            for m in view.frozen.iter().rev() {
                if let Some(v) = m.map.get(key) {
                    return Ok(Some(f(v)));
                }
            }
            view.runs.clone()
        };
        for run in runs.iter().rev() {
            if let Some(v) = run.get(&self.cache, key)? {
                return Ok(Some(f(&v)));
            }
        }
        Ok(None)
    }

    /// The first `limit` distinct keys in `[start, end)` with their newest values.
    pub(crate) fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Bytes)>> {
        if limit == 0 || start >= end {
            return Ok(Vec::new());
        }
        // Oldest source first, so newer values overwrite older ones.
        let (mut layers, runs): (Vec<Entries>, Vec<Arc<Run>>) = {
            let view = self.read_guard();
            let mut layers = Vec::new();
            for f in &view.frozen {
                layers.push(f.map.range(start, end, limit));
            }
            layers.push(view.active.range(start, end, limit));
            (layers, view.runs.clone())
        };
        let mut merged: BTreeMap<Vec<u8>, Bytes> = BTreeMap::new();
        for run in &runs {
            let mut out = Vec::new();
            run.scan(&self.cache, start, end, limit, &mut out)?;
            merged.extend(out);
        }
        for layer in layers.drain(..) {
            merged.extend(layer);
        }
        Ok(merged.into_iter().take(limit).collect())
    }

    /// Sets the shard log this index covers (see [`Index::flush_one`]).
    pub(crate) fn set_log(&self, log: &eddy_log::Log) {
        let _ = self.log.set(log.downgrade());
    }

    /// Writes the oldest frozen memtable as a run. Returns false when nothing was waiting.
    /// The shard log is made durable through the run's records before the manifest records
    /// the new checkpoint.
    pub(crate) fn flush_one(&self) -> Result<bool> {
        let _f = lock(&self.flushing);
        let Some(frozen) = self.read_guard().frozen.first().cloned() else {
            return Ok(false);
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let points = frozen.map.keys().filter(|k| bloom_key(k).is_some()).count() as u64;
        let mut w = RunWriter::create(&*self.backend, &self.dir, id, points)?;
        for (k, v) in frozen.map.sorted() {
            w.add(k, v)?;
        }
        w.finish(&*self.backend, &self.dir)?;
        let run = Arc::new(Run::open(&*self.backend, &self.dir, id)?);
        if let Some(log) = self.log.get().and_then(eddy_log::WeakLog::upgrade) {
            log.sync_written()?;
        }
        {
            let _m = lock(&self.manifest_lock);
            let mut ids: Vec<u64> = self.read_guard().runs.iter().map(|r| r.id).collect();
            ids.push(id);
            self.write_manifest(&ids, frozen.end_seq)?;
            let mut view = self.write_guard();
            assert!(
                Arc::ptr_eq(&view.frozen[0], &frozen),
                "only the flusher removes frozen memtables"
            );
            view.frozen.remove(0);
            view.runs.push(run);
            view.checkpoint = frozen.end_seq;
        }
        self.drained.notify_all();
        Ok(true)
    }

    /// Freezes the active memtable (if it holds anything), so the next flush writes it.
    pub(crate) fn freeze(&self) {
        let mut view = self.write_guard();
        if !view.active.is_empty() {
            let map = std::mem::take(&mut view.active);
            let end_seq = view.applied;
            view.frozen.push(Arc::new(Frozen { map, end_seq }));
        }
    }

    /// Flushes everything frozen (the background flusher; merges are the merger's job).
    pub(crate) fn flush_pending(&self) -> Result<()> {
        while self.flush_one()? {}
        Ok(())
    }

    /// Flushes everything frozen and merges (used at open and close, in the foreground).
    pub(crate) fn flush_all(&self) -> Result<()> {
        self.flush_pending()?;
        self.merge_runs()
    }

    /// Merges the newest run into its older neighbour while it is at least half its size.
    pub(crate) fn merge_runs(&self) -> Result<()> {
        let _g = lock(&self.merging);
        loop {
            let (older, newer) = {
                let view = self.read_guard();
                let n = view.runs.len();
                if n < 2 || view.runs[n - 1].bytes * 2 < view.runs[n - 2].bytes {
                    return Ok(());
                }
                (Arc::clone(&view.runs[n - 2]), Arc::clone(&view.runs[n - 1]))
            };
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let points = older.bloom.words.len() as u64 * 32 / BLOOM_BITS_PER_KEY
                + newer.bloom.words.len() as u64 * 32 / BLOOM_BITS_PER_KEY;
            let mut writer = RunWriter::create(&*self.backend, &self.dir, id, points)?;
            let mut old_iter = RunIter {
                run: &older,
                cache: &self.cache,
                block: 0,
                entries: Vec::new().into_iter(),
            };
            let mut new_iter = RunIter {
                run: &newer,
                cache: &self.cache,
                block: 0,
                entries: Vec::new().into_iter(),
            };
            let (mut old_next, mut new_next) = (old_iter.next_entry()?, new_iter.next_entry()?);
            loop {
                match (&old_next, &new_next) {
                    (None, None) => break,
                    (Some((ka, va)), None) => {
                        writer.add(ka, va)?;
                        old_next = old_iter.next_entry()?;
                    }
                    (None, Some((kb, vb))) => {
                        writer.add(kb, vb)?;
                        new_next = new_iter.next_entry()?;
                    }
                    (Some((ka, va)), Some((kb, vb))) => match ka.cmp(kb) {
                        std::cmp::Ordering::Less => {
                            writer.add(ka, va)?;
                            old_next = old_iter.next_entry()?;
                        }
                        std::cmp::Ordering::Greater => {
                            writer.add(kb, vb)?;
                            new_next = new_iter.next_entry()?;
                        }
                        std::cmp::Ordering::Equal => {
                            writer.add(kb, vb)?;
                            old_next = old_iter.next_entry()?;
                            new_next = new_iter.next_entry()?;
                        }
                    },
                }
            }
            writer.finish(&*self.backend, &self.dir)?;
            let merged = Arc::new(Run::open(&*self.backend, &self.dir, id)?);
            {
                // Flushes may have appended runs meanwhile; the inputs are still adjacent
                // (only merges remove runs, and they are serialized).
                let _m = lock(&self.manifest_lock);
                let mut runs = self.read_guard().runs.clone();
                let at = runs
                    .iter()
                    .position(|r| Arc::ptr_eq(r, &older))
                    .expect("merge inputs stay in the run list");
                assert!(
                    Arc::ptr_eq(&runs[at + 1], &newer),
                    "merge inputs are adjacent"
                );
                runs.splice(at..at + 2, [Arc::clone(&merged)]);
                let ids: Vec<u64> = runs.iter().map(|r| r.id).collect();
                let checkpoint = self.read_guard().checkpoint;
                self.write_manifest(&ids, checkpoint)?;
                self.write_guard().runs = runs;
            }
            for old in [older, newer] {
                self.cache.remove_owner(old.cache_id);
                if let Err(e) = self.backend.remove_file(&old.path) {
                    tracing::warn!(path = %old.path.display(), error = %e, "removing a merged index run failed");
                }
            }
        }
    }

    /// Counters.
    pub(crate) fn stats(&self) -> IndexStats {
        let view = self.read_guard();
        IndexStats {
            memtable_bytes: view.active.bytes()
                + view.frozen.iter().map(|f| f.map.bytes()).sum::<u64>(),
            runs: view.runs.len(),
            run_bytes: view.runs.iter().map(|r| r.bytes).sum(),
            run_entries: view.runs.iter().map(|r| r.entries).sum(),
            resident_bytes: view
                .runs
                .iter()
                .map(|r| {
                    (r.bloom.words.len() * 4
                        + r.blocks
                            .iter()
                            .map(|b| b.first_key.len() + 32)
                            .sum::<usize>()) as u64
                })
                .sum(),
            checkpoint: view.checkpoint,
        }
    }
}
