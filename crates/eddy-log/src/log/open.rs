//! Opening a log: list its directory, drop leftovers, recover every segment in order,
//! honour a persisted sequence frontier, and build the shared state the writer and readers
//! start from.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, RwLock};

use crate::atomic::create_dir_durable;
use crate::cache::{next_owner_id, Cache};
use crate::error::{Corruption, IoOp, LogError, Result};
use crate::file::{OpenMode, StorageBackend};
use crate::format::{
    index_file_name, parse_file_name, segment_file_name, IndexEntry, IndexKind, INDEX_ENTRY_LEN,
    INDEX_HEADER_LEN,
};
use crate::pool::CommitPool;

use super::config::LogConfig;
use super::recovery::{recover_segment, Recovered, Recovering};
use super::segment_files::{create_segment, remove_segment_files, write_index};
use super::state::{
    ActiveSegment, Admission, Log, LogCounters, LogInner, SegmentState, View, Writer,
};
use super::truncate::{cut_recovered, read_intent, remove_intent};
use super::types::{OpenOptions, RecoveryReport};

impl Log {
    /// Opens (or creates) the log in `dir`, recovering it as described in the module docs.
    pub fn open(
        backend: Arc<dyn StorageBackend>,
        dir: impl Into<PathBuf>,
        config: LogConfig,
        pool: &CommitPool,
        cache: Arc<Cache>,
        options: OpenOptions,
    ) -> Result<(Log, RecoveryReport)> {
        let dir = dir.into();
        config.validate()?;
        let mut report = RecoveryReport::default();
        create_dir_durable(&*backend, &dir)?;
        let mut logs = list_segments(&*backend, &dir, &mut report)?;
        let cut = drop_past_cut(&*backend, &dir, &mut logs, &mut report)?;
        if logs.is_empty() {
            let base = cut.unwrap_or(options.initial_seq);
            create_segment(&*backend, &dir, base)
                .map_err(|e| LogError::io(IoOp::Open, dir.join(segment_file_name(base)), e))?;
            logs.push(base);
        }
        let mut recovered = recover_segments(&*backend, &dir, &config, &logs, &mut report)?;

        let mut min_next_seq = options.min_next_seq;
        if let Some(cut) = cut {
            let last = recovered.last_mut().expect("a log always has a segment");
            if last.state.end > cut {
                cut_recovered(&*backend, &dir, last, cut)?;
            }
            // A cut in a gap of sequence numbers continues at the cut, as it did before.
            min_next_seq = min_next_seq.max(cut);
        }
        sync_recovered(&*backend, &dir, &recovered)?;
        honour_frontier(&*backend, &dir, &mut recovered, min_next_seq, &mut report)?;
        if cut.is_some() {
            remove_intent(&*backend, &dir)?;
        }
        report.segments = recovered.len();

        let inner = assemble(recovered, backend, dir, config, pool, cache, options)?;
        Ok((Log { inner }, report))
    }
}

/// The bases of the log's segment files in `dir`, ascending. Leftover `*.tmp` files (an
/// atomic write cut short) and index files without their segment are removed first.
fn list_segments(
    backend: &dyn StorageBackend,
    dir: &Path,
    report: &mut RecoveryReport,
) -> Result<Vec<u64>> {
    let listing = backend
        .list(dir)
        .map_err(|e| LogError::io(IoOp::List, dir, e))?;
    let mut logs = Vec::new();
    let mut indexes = Vec::new();
    for entry in listing.iter().filter(|e| !e.is_dir) {
        if Path::new(&entry.name)
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("tmp"))
        {
            let path = dir.join(&entry.name);
            backend
                .remove_file(&path)
                .map_err(|e| LogError::io(IoOp::Remove, &path, e))?;
            report.removed.push(path);
            continue;
        }
        match parse_file_name(&entry.name) {
            Some((base, false)) => logs.push(base),
            Some((base, true)) => indexes.push(base),
            None => {}
        }
    }
    logs.sort_unstable();
    for base in indexes {
        if logs.binary_search(&base).is_err() {
            let path = dir.join(index_file_name(base));
            backend
                .remove_file(&path)
                .map_err(|e| LogError::io(IoOp::Remove, &path, e))?;
            report.removed.push(path);
        }
    }
    Ok(logs)
}

/// A truncation that crossed segments and was cut short: nothing at or after its cut
/// survives. Removes the segments that start at or after the cut (the one holding the cut is
/// cut after recovery) and returns the cut.
fn drop_past_cut(
    backend: &dyn StorageBackend,
    dir: &Path,
    logs: &mut Vec<u64>,
    report: &mut RecoveryReport,
) -> Result<Option<u64>> {
    let cut = read_intent(backend, dir)?;
    if let Some(cut) = cut {
        for base in logs.iter().copied().filter(|b| *b >= cut) {
            remove_segment_files(backend, dir, base)?;
            report.removed.push(dir.join(segment_file_name(base)));
        }
        logs.retain(|b| *b < cut);
    }
    Ok(cut)
}

/// Recovers every segment in order (the last one may have a torn tail), checks that they do
/// not overlap, and removes a sealed segment left empty (only with repair: a sealed segment
/// must hold records, since rolls only happen after a record).
fn recover_segments(
    backend: &dyn StorageBackend,
    dir: &Path,
    config: &LogConfig,
    logs: &[u64],
    report: &mut RecoveryReport,
) -> Result<Vec<Recovered>> {
    let mut recovered: Vec<Recovered> = Vec::with_capacity(logs.len());
    {
        let mut ctx = Recovering {
            backend,
            dir,
            config,
            report: &mut *report,
        };
        for (i, base) in logs.iter().copied().enumerate() {
            let is_last = i + 1 == logs.len();
            let seg = recover_segment(&mut ctx, base, is_last)?;
            if let Some(prev) = recovered.last() {
                if seg.state.base < prev.state.end {
                    return Err(LogError::corrupt(
                        dir.join(segment_file_name(base)),
                        0,
                        Corruption::SegmentOrder,
                    ));
                }
            }
            recovered.push(seg);
        }
    }
    let mut i = 0;
    while i + 1 < recovered.len() {
        if recovered[i].state.end == recovered[i].state.base {
            let base = recovered[i].state.base;
            let path = dir.join(segment_file_name(base));
            if !config.repair {
                return Err(LogError::corrupt(path, 0, Corruption::SegmentOrder));
            }
            remove_segment_files(backend, dir, base)?;
            report.removed.push(path);
            recovered.remove(i);
        } else {
            i += 1;
        }
    }
    Ok(recovered)
}

/// The newest segment may hold bytes that were written but never synced (the process died,
/// or its fdatasync failed, before the acknowledgement): recovery found them whole, so
/// readers will see them from now on, and the writer counts them as synced. Makes that true
/// before anything is served, and the same for the directory: a removal whose directory sync
/// failed (retention) must not be undone by a later power cut.
fn sync_recovered(backend: &dyn StorageBackend, dir: &Path, recovered: &[Recovered]) -> Result<()> {
    if let Some(last) = recovered.last() {
        let path = dir.join(segment_file_name(last.state.base));
        last.file
            .sync()
            .map_err(|e| LogError::io(IoOp::Sync, path, e))?;
    }
    backend
        .sync_dir(dir)
        .map_err(|e| LogError::io(IoOp::SyncDir, dir, e))
}

/// Honours a persisted frontier: never hand out a sequence number below `min_next_seq`.
/// When the log ends before it, the last segment is sealed (or removed, if empty) and a new
/// one starts at the frontier.
fn honour_frontier(
    backend: &dyn StorageBackend,
    dir: &Path,
    recovered: &mut Vec<Recovered>,
    min_next_seq: u64,
    report: &mut RecoveryReport,
) -> Result<()> {
    let last_end = recovered.last().map_or(0, |r| r.state.end);
    if min_next_seq <= last_end {
        return Ok(());
    }
    let last = recovered.pop().expect("a log always has a segment");
    if last.state.end == last.state.base {
        remove_segment_files(backend, dir, last.state.base)?;
        report
            .removed
            .push(dir.join(segment_file_name(last.state.base)));
    } else {
        let mut sealed = last;
        sealed.state.sealed = true;
        write_index(
            backend,
            dir,
            sealed.state.base,
            &sealed.index,
            Some(IndexEntry {
                seq: sealed.state.end,
                timestamp: sealed.state.max_ts.unwrap_or(0),
                position: sealed.state.len,
                kind: IndexKind::Seal,
            }),
        )?;
        recovered.push(sealed);
    }
    let base = min_next_seq;
    let (file, _) = create_segment(backend, dir, base)
        .map_err(|e| LogError::io(IoOp::Open, dir.join(segment_file_name(base)), e))?;
    recovered.push(Recovered {
        state: SegmentState::empty(base, 0),
        file,
        index: Vec::new(),
    });
    Ok(())
}

/// Opens the active segment's index file for appending, dropping a partial trailing entry.
fn open_active_index(
    backend: &dyn StorageBackend,
    dir: &Path,
    last: &Recovered,
) -> Result<Arc<dyn crate::file::StorageFile>> {
    let index_path = dir.join(index_file_name(last.state.base));
    let index_file = backend
        .open(&index_path, OpenMode::Existing)
        .map_err(|e| LogError::io(IoOp::Open, &index_path, e))?;
    let index_len = index_file
        .len()
        .map_err(|e| LogError::io(IoOp::Len, &index_path, e))?;
    let expected_index_len = (INDEX_HEADER_LEN + last.index.len() * INDEX_ENTRY_LEN) as u64;
    if index_len != expected_index_len {
        // Only a partial trailing entry can differ here; drop it.
        index_file
            .truncate(expected_index_len)
            .map_err(|e| LogError::io(IoOp::Truncate, &index_path, e))?;
    }
    Ok(index_file)
}

/// Builds the shared state the writer and readers start from: the last recovered segment
/// becomes the active one (its index file opened for appending), the others the sealed view.
fn assemble(
    mut recovered: Vec<Recovered>,
    backend: Arc<dyn StorageBackend>,
    dir: PathBuf,
    config: LogConfig,
    pool: &CommitPool,
    cache: Arc<Cache>,
    options: OpenOptions,
) -> Result<Arc<LogInner>> {
    let last = recovered.pop().expect("a log always has a segment");
    let index_file = open_active_index(&*backend, &dir, &last)?;
    let max_ts_all = recovered
        .iter()
        .filter_map(|r| r.state.max_ts)
        .chain(last.state.max_ts)
        .max()
        .unwrap_or(0);
    let active = ActiveSegment {
        base: last.state.base,
        file: Arc::clone(&last.file),
        index_file: Some(index_file),
        len: last.state.len,
        synced_len: last.state.len,
        last_index_pos: last.index.last().map(|e| e.position),
        index_written: last.index.len(),
        has_records: last.state.end > last.state.base,
    };
    let next_seq = last.state.end;
    let id = next_owner_id();
    let mut segments: VecDeque<SegmentState> = recovered.into_iter().map(|r| r.state).collect();
    let active_file = Arc::clone(&last.file);
    let active_index = last.index;
    segments.push_back(last.state);
    for seg in &mut segments {
        seg.owner = id;
    }

    Ok(Arc::new(LogInner {
        id,
        dir,
        backend,
        config,
        cache,
        pool: pool.shared(),
        hook: options.hook,
        admission: Mutex::new(Admission {
            epoch: 0,
            next_seq,
            last_ts: max_ts_all,
            queue: VecDeque::new(),
            queued_bytes: 0,
            scheduled: false,
            failed: None,
            closed: false,
            room_waiters: 0,
            hold: None,
        }),
        room: Condvar::new(),
        held: Condvar::new(),
        swap: RwLock::new(()),
        rewriting: Mutex::new(()),
        layout: Mutex::new(()),
        writer: Mutex::new(Writer {
            active,
            next_seq,
            last_ts: max_ts_all,
            unsynced_records: 0,
            unsynced_bytes: 0,
            failed: None,
            hold_target: 0,
        }),
        view: Mutex::new(View {
            segments,
            active_file,
            active_index,
        }),
        counters: LogCounters::default(),
        truncations: AtomicU64::new(0),
        store_stats: options.stats,
        cipher: options.cipher,
        window_gate: options.window_gate,
    }))
}
