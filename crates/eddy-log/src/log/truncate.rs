//! Truncation: dropping every record from a sequence number on ([`Log::truncate_from`]), the
//! way a replicated log replaces a conflicting suffix. It runs on the writer, in order with
//! appends, and is durable before it completes.
//!
//! * **Cut in the active segment** (the common case): the segment file is cut at the record
//!   boundary and fdatasynced. One `ftruncate` is atomic, so a crash leaves the old or the
//!   truncated file; the index is derived data and follows (recovery rebuilds a stale one).
//! * **Cut in a sealed segment**: several files change, so the cut is first recorded in
//!   `truncate.intent` (written atomically); then the later segments are removed newest
//!   first, the segment holding the cut is cut at the record boundary and synced (its index
//!   rewritten with a new seal), a new active segment is created at the cut, and the intent
//!   is removed. A crash before the intent is durable leaves the old log; after it, open
//!   finishes the truncation from whatever is left (every segment at or after the cut goes,
//!   the last one left is cut), so the truncated log comes back. Records below the cut are
//!   never touched.
//!
//! Readers never block on a truncation: they note the log's truncation counter before a
//! read and run the read again when it changed, or when it was odd (a truncation in
//! progress) and the read failed on a file being cut.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::atomic::write_atomic;
use crate::cache::{next_owner_id, SealedSegment};
use crate::completion::{completion, Completion};
use crate::error::{Corruption, IoOp, LogError, Result};
use crate::file::{OpenMode, StorageBackend, StorageFile};
use crate::format::{
    index_file_name, segment_file_name, IndexEntry, IndexKind, RecordHeader, INDEX_ENTRY_LEN,
    INDEX_HEADER_LEN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::sync::{lock, read_lock};

use super::recovery::{count_records, Recovered};
use super::segment_files::{
    create_segment, index_lower_bound, load_index, read_exact, write_index,
};
use super::state::{is_no_space, ActiveSegment, Item, Log, LogInner, SegmentState, Writer};

/// Name of the file that records a truncation crossing segments until it is complete.
pub(super) const INTENT_FILE: &str = "truncate.intent";
const INTENT_MAGIC: [u8; 8] = *b"EDDYCUT\0";
/// Magic, cut sequence number, CRC-32C of the 16 bytes before it.
const INTENT_LEN: usize = 20;
/// Read size of the walk from an index entry to the cut.
const CUT_CHUNK: u64 = 8 * 1024;

impl Log {
    /// Drops every record whose sequence number is `seq` or above, as a replicated log does
    /// when a new leader replaces an uncommitted suffix. Ordered with appends: records queued
    /// before it are written (and dropped if at or above `seq`), appends after it continue at
    /// `seq`. The completion resolves once the truncated log is durable: a crash at any point
    /// recovers either the old log or the truncated one, never anything between, and never
    /// loses a record below `seq`.
    ///
    /// `seq` must start a record (or be at or past the end of the log, which changes
    /// nothing) and must not be below the first retained sequence number; otherwise nothing
    /// changes and the truncation and every append queued behind it are refused with
    /// [`LogError::BadTruncation`]. A cut between two segments (in a gap of sequence
    /// numbers) starts a new segment at `seq`.
    ///
    /// Timestamps stay non-decreasing: the next append's timestamp is still at least the
    /// newest one the log handed out. The [`CommitHook`](crate::CommitHook) is not called.
    pub fn truncate_from(&self, seq: u64) -> Completion<()> {
        let (done, completion) = completion();
        self.enqueue_control(|adm| {
            adm.next_seq = adm.next_seq.min(seq);
            Item::Truncate { seq, done }
        });
        completion
    }

    /// The lowest timestamp the next append may carry (the newest one handed out so far).
    pub fn last_timestamp(&self) -> u64 {
        lock(&self.inner.admission).last_ts
    }

    /// Runs `read` until no truncation changed the log's files under it.
    pub(super) fn stable<T>(&self, mut read: impl FnMut() -> Result<T>) -> Result<T> {
        loop {
            let before = self.inner.truncations.load(Ordering::SeqCst);
            let result = read();
            let after = self.inner.truncations.load(Ordering::SeqCst);
            // What a read returns while a truncation runs is the old log, read before its
            // records were cut; only a failure may come from a file being cut.
            if before == after && (before.is_multiple_of(2) || result.is_ok()) {
                return result;
            }
            std::thread::yield_now();
        }
    }
}

/// Why a truncation did not happen, or did not finish.
pub(super) enum TruncateFailure {
    /// Not a cut point: nothing changed.
    Rejected(&'static str),
    /// The disk is full: nothing changed.
    NoSpace(io::Error),
    /// Anything else: the log must fail-stop (a crossing truncation is finished at the next
    /// open from its intent).
    Fatal(io::Error),
}

fn fatal(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> TruncateFailure {
    TruncateFailure::Fatal(io::Error::other(e))
}

/// Where a cut falls in a segment file.
pub(super) enum CutAt {
    /// The cut record starts at `pos`; `last_ts` is the timestamp of the record before it in
    /// the segment (`None` when it is the segment's first).
    Boundary { pos: u64, last_ts: Option<u64> },
    /// Inside a record covering several sequence numbers.
    Inside,
    /// The walk met a damaged or impossible record header.
    Damaged { at: u64, kind: Corruption },
}

/// Finds where sequence number `seq` starts in a segment holding `base..` in `len` bytes,
/// walking record headers from the last index entry before it.
pub(super) fn find_cut(
    file: &dyn StorageFile,
    index: &[IndexEntry],
    base: u64,
    len: u64,
    seq: u64,
) -> io::Result<CutAt> {
    let header_len = RECORD_HEADER_LEN as u64;
    if seq <= base {
        return Ok(CutAt::Boundary {
            pos: SEGMENT_HEADER_LEN as u64,
            last_ts: None,
        });
    }
    let mut pos = index_lower_bound(index, seq - 1);
    let mut last_ts = None;
    let mut chunk = Bytes::new();
    let mut chunk_pos = pos;
    while pos + header_len <= len {
        if pos < chunk_pos || pos + header_len > chunk_pos + chunk.len() as u64 {
            chunk = read_exact(file, pos, (len - pos).min(CUT_CHUNK))?;
            chunk_pos = pos;
        }
        let off = usize::try_from(pos - chunk_pos).unwrap_or(usize::MAX);
        let header = match RecordHeader::decode(&chunk[off..off + RECORD_HEADER_LEN], pos) {
            Ok(h) => h,
            Err(kind) => return Ok(CutAt::Damaged { at: pos, kind }),
        };
        if header.seq == seq {
            return Ok(CutAt::Boundary { pos, last_ts });
        }
        if header.seq > seq {
            let kind = Corruption::NonContiguous {
                expected: seq,
                found: header.seq,
            };
            return Ok(CutAt::Damaged { at: pos, kind });
        }
        if header.end_seq() > seq {
            return Ok(CutAt::Inside);
        }
        last_ts = Some(header.timestamp);
        pos += header.record_len();
    }
    Ok(CutAt::Damaged {
        at: pos,
        kind: Corruption::Truncated,
    })
}

fn encode_intent(seq: u64) -> [u8; INTENT_LEN] {
    let mut out = [0u8; INTENT_LEN];
    out[..8].copy_from_slice(&INTENT_MAGIC);
    out[8..16].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c::crc32c(&out[..16]);
    out[16..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The cut an interrupted truncation recorded in `dir`, if any.
pub(super) fn read_intent(backend: &dyn StorageBackend, dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(INTENT_FILE);
    let file = match backend.open(&path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LogError::io(IoOp::Open, &path, e)),
    };
    let mut bytes = [0u8; INTENT_LEN];
    let len = file.len().map_err(|e| LogError::io(IoOp::Len, &path, e))?;
    if len != INTENT_LEN as u64 {
        return Err(LogError::corrupt(&path, 0, Corruption::Truncated));
    }
    file.read_at(0, &mut bytes)
        .map_err(|e| LogError::io(IoOp::Read, &path, e))?;
    if bytes[..8] != INTENT_MAGIC || crc32c::crc32c(&bytes[..16]).to_le_bytes() != bytes[16..] {
        // Written atomically: a damaged intent is damage, not a torn write.
        return Err(LogError::corrupt(&path, 0, Corruption::FileChecksum));
    }
    Ok(Some(u64::from_le_bytes(
        bytes[8..16].try_into().expect("8 bytes"),
    )))
}

/// Removes a finished truncation's intent, durably.
pub(super) fn remove_intent(backend: &dyn StorageBackend, dir: &Path) -> Result<()> {
    let path = dir.join(INTENT_FILE);
    match backend.remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(LogError::io(IoOp::Remove, &path, e)),
    }
    backend
        .sync_dir(dir)
        .map_err(|e| LogError::io(IoOp::SyncDir, dir, e))
}

/// Finishes an interrupted truncation on the last segment open recovered: cuts it at `seq`
/// (it holds records at and above `seq`; the truncation checked the cut before recording it).
pub(super) fn cut_recovered(
    backend: &dyn StorageBackend,
    dir: &Path,
    last: &mut Recovered,
    seq: u64,
) -> Result<()> {
    let base = last.state.base;
    let path = dir.join(segment_file_name(base));
    let cut = find_cut(&*last.file, &last.index, base, last.state.len, seq)
        .map_err(|e| LogError::io(IoOp::Read, &path, e))?;
    let (pos, last_ts) = match cut {
        CutAt::Boundary { pos, last_ts } => (pos, last_ts),
        CutAt::Inside => {
            let kind = Corruption::BadHeaderField("truncation intent inside a record");
            return Err(LogError::corrupt(&path, 0, kind));
        }
        CutAt::Damaged { at, kind } => return Err(LogError::corrupt(&path, at, kind)),
    };
    let records = records_below(&*last.file, pos, last.state.len, last.state.records)
        .map_err(|e| LogError::io(IoOp::Read, &path, e))?;
    last.file
        .truncate(pos)
        .and_then(|()| last.file.sync())
        .map_err(|e| LogError::io(IoOp::Truncate, &path, e))?;
    last.index.retain(|e| e.position < pos);
    write_index(backend, dir, base, &last.index, None)?;
    last.state.end = seq;
    last.state.len = pos;
    last.state.records = records;
    last.state.max_ts = last_ts;
    if pos == SEGMENT_HEADER_LEN as u64 {
        last.state.first_ts = None;
    }
    Ok(())
}

/// How many of a segment's `total` records lie below a cut at `pos` (its length is `len`):
/// the cut-off tail's headers are walked (truncations are rare, and cut uncommitted tails).
fn records_below(file: &dyn StorageFile, pos: u64, len: u64, total: u64) -> io::Result<u64> {
    match count_records(file, pos, len)? {
        Some(cut) => Ok(total.saturating_sub(cut)),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "record headers do not end at the segment's length",
        )),
    }
}

/// Keeps the truncation counter odd while it lives.
struct InProgress<'a>(&'a AtomicU64);

impl<'a> InProgress<'a> {
    fn start(counter: &'a AtomicU64) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        InProgress(counter)
    }
}

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// What a crossing truncation keeps of the segment holding the cut.
enum Keep {
    /// All of it (the cut is in the gap after it).
    All,
    /// Nothing (the cut is its first record).
    Nothing,
    /// Its records below the cut, which starts at `pos`.
    Prefix {
        pos: u64,
        last_ts: Option<u64>,
        records: u64,
        loaded: Arc<SealedSegment>,
    },
}

impl LogInner {
    /// Runs a truncation on the writer (see [`Log::truncate_from`]).
    pub(super) fn truncate_now(
        &self,
        writer: &mut Writer,
        seq: u64,
    ) -> std::result::Result<(), TruncateFailure> {
        if seq >= writer.next_seq {
            return Ok(());
        }
        // Retention must not remove segments between this look at the view and its update.
        let _layout = lock(&self.layout);
        let (segments, active_index): (Vec<SegmentState>, Vec<IndexEntry>) = {
            let view = lock(&self.view);
            (
                view.segments.iter().cloned().collect(),
                view.active_index.clone(),
            )
        };
        if segments.first().is_none_or(|s| seq < s.base) {
            return Err(TruncateFailure::Rejected(
                "below the first retained sequence number",
            ));
        }
        let j = segments.partition_point(|s| s.base <= seq) - 1;
        if j + 1 == segments.len() {
            self.cut_active(writer, seq, &active_index)
        } else {
            self.cut_sealed(writer, seq, &segments, j)
        }
    }

    fn cut_point(
        &self,
        file: &dyn StorageFile,
        index: &[IndexEntry],
        seg: (u64, u64),
        seq: u64,
    ) -> std::result::Result<(u64, Option<u64>), TruncateFailure> {
        let (base, len) = seg;
        match find_cut(file, index, base, len, seq).map_err(TruncateFailure::Fatal)? {
            CutAt::Boundary { pos, last_ts } => Ok((pos, last_ts)),
            CutAt::Inside => Err(TruncateFailure::Rejected("inside a record")),
            CutAt::Damaged { at, kind } => Err(fatal(LogError::corrupt(
                self.dir.join(segment_file_name(base)),
                at,
                kind,
            ))),
        }
    }

    /// The cut is in the active segment: one truncation of its file, then its index.
    fn cut_active(
        &self,
        writer: &mut Writer,
        seq: u64,
        active_index: &[IndexEntry],
    ) -> std::result::Result<(), TruncateFailure> {
        let file = Arc::clone(&writer.active.file);
        let (pos, last_ts) = self.cut_point(
            &*file,
            active_index,
            (writer.active.base, writer.active.len),
            seq,
        )?;
        let total = lock(&self.view).segments.back().map_or(0, |s| s.records);
        let records =
            records_below(&*file, pos, writer.active.len, total).map_err(TruncateFailure::Fatal)?;
        let _in_progress = InProgress::start(&self.truncations);
        // The atomic step: the file is the old one or the cut one.
        file.truncate(pos).map_err(TruncateFailure::Fatal)?;
        // From here the file is the cut one, whatever the sync below says: the view follows
        // at once, so reads below the cut keep working on a log a failed sync fail-stops
        // (found by the simulator, seed 871 events heavy: a read sized by the old length
        // failed past the cut file's end, and the Raft engine panics on a failed read).
        let active = &mut writer.active;
        active.len = pos;
        active.has_records = pos > SEGMENT_HEADER_LEN as u64;
        let kept = active_index.partition_point(|e| e.position < pos);
        active.last_index_pos = kept.checked_sub(1).map(|i| active_index[i].position);
        let written = active.index_written.min(kept);
        if let Some(index_file) = &active.index_file {
            let keep = (INDEX_HEADER_LEN + written * INDEX_ENTRY_LEN) as u64;
            if let Err(e) = index_file.truncate(keep) {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cutting the index failed; it will be rebuilt at next open");
                active.index_file = None;
            }
        }
        active.index_written = written;
        writer.next_seq = seq;
        writer.unsynced_records = 0;
        writer.unsynced_bytes = 0;
        let mut view = lock(&self.view);
        view.active_index.truncate(kept);
        let seg = view
            .segments
            .back_mut()
            .expect("a log always has a segment");
        seg.end = seq;
        seg.len = pos;
        seg.records = records;
        seg.max_ts = last_ts;
        if pos == SEGMENT_HEADER_LEN as u64 {
            seg.first_ts = None;
        }
        drop(view);
        // The sync makes every byte below the cut durable too (background durability may
        // have left some behind).
        file.sync().map_err(TruncateFailure::Fatal)?;
        self.count_fsync();
        writer.active.synced_len = pos;
        Ok(())
    }

    /// The cut is in sealed segment `j` (or in the gap after it): recorded intent, later
    /// segments removed newest first, segment `j` cut, a new active segment at the cut.
    fn cut_sealed(
        &self,
        writer: &mut Writer,
        seq: u64,
        segments: &[SegmentState],
        j: usize,
    ) -> std::result::Result<(), TruncateFailure> {
        let held = &segments[j];
        // No rewrite may rename a new version of a segment in between the load of the one
        // holding the cut and its removal or cut, nor while later ones go (see `swap`).
        let swap = read_lock(&self.swap);
        // Everything that can refuse the cut is checked before anything changes.
        let keep = self.plan_cut(held, seq)?;
        self.record_intent(seq)?;
        tracing::info!(dir = %self.dir.display(), from = seq, segments = segments.len() - j - 1, "truncating across segments");
        let _in_progress = InProgress::start(&self.truncations);
        let held_goes = matches!(keep, Keep::Nothing).then_some(held);
        self.remove_doomed(&segments[j + 1..], held_goes)?;
        let owner = next_owner_id();
        self.cut_held(held, j, seq, &keep, owner)?;
        self.start_after_cut(writer, seq, j, &keep, owner)?;
        drop(swap);
        Ok(())
    }

    /// What truncating from `seq` keeps of `held`, the sealed segment holding the cut (or
    /// followed by the gap it falls in). For a prefix, loads the segment to find where the cut
    /// starts, the prefix's last timestamp and its record count. Changes nothing.
    fn plan_cut(
        &self,
        held: &SegmentState,
        seq: u64,
    ) -> std::result::Result<Keep, TruncateFailure> {
        if seq >= held.end {
            return Ok(Keep::All);
        }
        if seq == held.base {
            return Ok(Keep::Nothing);
        }
        let loaded = self.load_sealed(held).map_err(fatal)?;
        let (pos, last_ts) =
            self.cut_point(&*loaded.file, &loaded.index, (held.base, held.len), seq)?;
        let records = records_below(&*loaded.file, pos, held.len, held.records)
            .map_err(TruncateFailure::Fatal)?;
        Ok(Keep::Prefix {
            pos,
            last_ts,
            records,
            loaded,
        })
    }

    /// Durably records the intent to truncate from `seq` ([`INTENT_FILE`]): until it is
    /// removed, the next open cuts there again. Running out of space here changed nothing (a
    /// refusal); any other failure is fatal.
    fn record_intent(&self, seq: u64) -> std::result::Result<(), TruncateFailure> {
        write_atomic(&*self.backend, &self.dir, INTENT_FILE, &encode_intent(seq)).map_err(|e| {
            match e {
                // Only the temporary file's write can run out of space: nothing changed.
                LogError::Io { source, .. } if is_no_space(&source) => {
                    TruncateFailure::NoSpace(source)
                }
                other => fatal(other),
            }
        })
    }

    /// Drops the segments a crossing truncation removes whole, newest first: those after the
    /// one holding the cut (`later`), then that one too when nothing of it is kept (`held`).
    /// Each leaves the cache, then its files go; the directory is synced once, when the new
    /// segment is created (the intent covers a crash before that).
    fn remove_doomed(
        &self,
        later: &[SegmentState],
        held: Option<&SegmentState>,
    ) -> std::result::Result<(), TruncateFailure> {
        for seg in later.iter().rev().chain(held) {
            self.cache.remove((seg.owner, seg.base));
            self.remove_files(seg.base)
                .map_err(TruncateFailure::Fatal)?;
        }
        Ok(())
    }

    /// When a prefix of segment `j` (`held`) is kept: cuts its file at the prefix's end and
    /// shrinks its view entry to match, syncs the file, writes its new sealed index, and puts
    /// the cut version in the cache under `owner` in place of the old one. Nothing otherwise.
    fn cut_held(
        &self,
        held: &SegmentState,
        j: usize,
        seq: u64,
        keep: &Keep,
        owner: u64,
    ) -> std::result::Result<(), TruncateFailure> {
        let Keep::Prefix {
            pos,
            last_ts,
            records,
            loaded,
        } = keep
        else {
            return Ok(());
        };
        loaded.file.truncate(*pos).map_err(TruncateFailure::Fatal)?;
        {
            // The file is cut: reads below the cut must not go past its new end, also
            // when what follows fails and fail-stops the log.
            let mut view = lock(&self.view);
            if let Some(seg) = view.segments.get_mut(j) {
                seg.end = seq;
                seg.len = *pos;
                seg.records = *records;
                seg.max_ts = *last_ts;
            }
        }
        loaded.file.sync().map_err(TruncateFailure::Fatal)?;
        self.count_fsync();
        let index: Vec<IndexEntry> = loaded
            .index
            .iter()
            .copied()
            .filter(|e| e.position < *pos)
            .collect();
        let seal = IndexEntry {
            seq,
            timestamp: last_ts.unwrap_or(0),
            position: *pos,
            kind: IndexKind::Seal,
        };
        write_index(&*self.backend, &self.dir, held.base, &index, Some(seal)).map_err(fatal)?;
        // A rewrite or reader holding the old version must not take it for this one.
        self.cache.remove((held.owner, held.base));
        let file = Arc::clone(&loaded.file);
        self.cache
            .insert((owner, held.base), Arc::new(SealedSegment { file, index }));
        Ok(())
    }

    /// Ends a crossing truncation at `seq`: creates the new active segment there, removes the
    /// intent (failing to is fatal), and moves the writer to the new segment and the view to
    /// what is left: the segments before `j`, segment `j` unless nothing of it is kept (a cut
    /// one with its new end and cache owner `owner`), then the new active segment.
    fn start_after_cut(
        &self,
        writer: &mut Writer,
        seq: u64,
        j: usize,
        keep: &Keep,
        owner: u64,
    ) -> std::result::Result<(), TruncateFailure> {
        let backend = &*self.backend;
        let (file, index_file) =
            create_segment(backend, &self.dir, seq).map_err(TruncateFailure::Fatal)?;
        // Until the intent is gone the next open would cut again, dropping what is appended
        // from now on: failing to remove it fail-stops the log.
        remove_intent(backend, &self.dir).map_err(fatal)?;
        writer.active = ActiveSegment::fresh(seq, Arc::clone(&file), index_file);
        writer.next_seq = seq;
        writer.unsynced_records = 0;
        writer.unsynced_bytes = 0;
        let mut view = lock(&self.view);
        view.segments.truncate(j + 1);
        match keep {
            Keep::All => {}
            Keep::Nothing => {
                view.segments.pop_back();
            }
            Keep::Prefix {
                pos,
                last_ts,
                records,
                ..
            } => {
                let seg = view.segments.back_mut().expect("segment j is kept");
                seg.end = seq;
                seg.len = *pos;
                seg.records = *records;
                seg.max_ts = *last_ts;
                seg.owner = owner;
            }
        }
        view.segments
            .push_back(SegmentState::empty(seq, next_owner_id()));
        view.active_file = file;
        view.active_index = Vec::new();
        Ok(())
    }

    fn count_fsync(&self) {
        self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.pool.stats.add_fsync();
        if let Some(stats) = &self.store_stats {
            stats.add_fsync();
        }
    }

    /// Removes a segment's files without syncing the directory.
    fn remove_files(&self, base: u64) -> io::Result<()> {
        for name in [segment_file_name(base), index_file_name(base)] {
            match self.backend.remove_file(&self.dir.join(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A sealed segment's file and index, from the cache or the directory.
    fn load_sealed(&self, seg: &SegmentState) -> Result<Arc<SealedSegment>> {
        if let Some(hit) = self.cache.get((seg.owner, seg.base)) {
            return Ok(hit);
        }
        let path = self.dir.join(segment_file_name(seg.base));
        let file = self
            .backend
            .open(&path, OpenMode::Existing)
            .map_err(|e| LogError::io(IoOp::Open, &path, e))?;
        let index_path = self.dir.join(index_file_name(seg.base));
        let index = load_index(&*self.backend, &index_path, seg.base, seg.len)?
            .map(|i| i.entries)
            .unwrap_or_default();
        Ok(Arc::new(SealedSegment { file, index }))
    }
}
