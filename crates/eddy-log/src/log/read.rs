//! Reads: the readable bounds and segments, range reads (read-ahead in large chunks, for scans
//! and polls), point reads of one record, and the timestamp search. Sealed segments are loaded
//! through the shared [`Cache`](crate::Cache); a segment rewritten or deleted under a read
//! makes it take fresh targets and try again, and so does a truncation under it.

use std::sync::Arc;

use bytes::Bytes;

use crate::cache::SealedSegment;
use crate::error::{Corruption, IoOp, LogError, Result};
use crate::file::{OpenMode, StorageFile};
use crate::format::{
    index_file_name, segment_file_name, RecordHeader, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::sync::{lock, read_lock};

use super::segment_files::{index_lower_bound, index_lower_bound_ts, load_index, read_exact};
use crate::cipher::reveal;

use super::state::{Log, SegmentState};
use super::types::{LogBounds, RecordMeta, SegmentSummary, StoredRecord};

/// Smallest read issued by the read path.
const MIN_READ_CHUNK: u64 = 64 * 1024;
/// Read size of [`Log::read_record`]'s walk from an index entry.
const POINT_READ_CHUNK: u64 = 8 * 1024;
/// Largest read the read path issues at once (a larger record is read alone).
const MAX_READ_CHUNK: u64 = 16 * 1024 * 1024;

/// A segment as seen by one read.
pub(super) struct ReadTarget {
    pub(super) base: u64,
    pub(super) end: u64,
    pub(super) len: u64,
    pub(super) sealed: bool,
    /// Owner half of the cache key of the file version `len` describes.
    pub(super) owner: u64,
    /// Active segment: its file and the index position to start from.
    pub(super) active: Option<(Arc<dyn StorageFile>, u64)>,
}

/// The records one [`Log::read`] attempt gathers, and its limits.
struct ReadBatch {
    /// Records wholly before this sequence number are skipped.
    from_seq: u64,
    /// Full once the records cover this many sequence numbers at or after `from_seq`...
    max_seqs: u64,
    /// ...or hold at least this many payload bytes.
    max_bytes: u64,
    /// Sequence numbers at or after `from_seq` covered so far.
    covered: u64,
    /// Payload bytes so far.
    bytes: u64,
    out: Vec<StoredRecord>,
}

impl ReadBatch {
    /// Adds a record that ends past `from_seq` (its payload already opened).
    fn push(&mut self, header: &RecordHeader, payload: Bytes) {
        let start = header.seq.max(self.from_seq);
        self.covered += header.end_seq() - start;
        self.bytes += u64::from(header.payload_len);
        self.out.push(StoredRecord {
            meta: RecordMeta {
                seq: header.seq,
                count: header.count,
                timestamp: header.timestamp,
                tag: header.tag,
                len: header.payload_len,
            },
            payload,
        });
    }

    fn is_full(&self) -> bool {
        self.covered >= self.max_seqs || self.bytes >= self.max_bytes
    }
}

/// How far [`Log::read_chunk`] got through one chunk.
struct ChunkRead {
    /// Bytes of whole records taken (or skipped) from the chunk's start.
    consumed: usize,
    /// At least one whole record was in the chunk.
    progressed: bool,
    /// The batch filled up: the read is done.
    full: bool,
}

/// How many bytes the first read of a segment takes: up to the index entry past the wanted
/// range (`end_hint`) when known, and at least an estimate from the segment's average bytes
/// per sequence number for the batch's limits; within [`MIN_READ_CHUNK`]..[`MAX_READ_CHUNK`].
fn first_read_len(target: &ReadTarget, pos: u64, end_hint: Option<u64>, batch: &ReadBatch) -> u64 {
    let per_seq = (target.len - SEGMENT_HEADER_LEN as u64) / (target.end - target.base).max(1);
    let estimate = per_seq
        .saturating_mul(batch.max_seqs.saturating_add(1))
        .min(batch.max_bytes.saturating_add(per_seq));
    end_hint
        .map_or(estimate, |hint| hint.saturating_sub(pos).max(estimate))
        .clamp(MIN_READ_CHUNK, MAX_READ_CHUNK)
}

impl Log {
    /// The readable range.
    pub fn bounds(&self) -> LogBounds {
        let view = lock(&self.inner.view);
        LogBounds {
            first: view.segments.front().map_or(0, |s| s.base),
            next: view.segments.back().map_or(0, |s| s.end),
            bytes: view.segments.iter().map(|s| s.len).sum(),
            segments: view.segments.len(),
        }
    }

    /// Summaries of every segment, oldest first.
    pub fn segments(&self) -> Vec<SegmentSummary> {
        lock(&self.inner.view)
            .segments
            .iter()
            .map(SegmentState::summary)
            .collect()
    }

    fn targets_from(&self, from_seq: u64) -> Vec<ReadTarget> {
        let view = lock(&self.inner.view);
        let count = view.segments.len();
        let first = view.segments.partition_point(|s| s.end <= from_seq);
        view.segments
            .iter()
            .enumerate()
            .skip(first)
            .filter(|(_, s)| s.end > s.base)
            .map(|(i, s)| {
                let active = (i + 1 == count).then(|| {
                    let pos = index_lower_bound(&view.active_index, from_seq);
                    (Arc::clone(&view.active_file), pos)
                });
                ReadTarget {
                    base: s.base,
                    end: s.end,
                    len: s.len,
                    sealed: s.sealed,
                    owner: s.owner,
                    active,
                }
            })
            .collect()
    }

    /// Loads (or finds in the cache) the version of a sealed segment's file and index that
    /// `target` describes. `None` when that version is gone (the segment was rewritten or
    /// deleted since the target was taken): the caller takes fresh targets and tries again.
    pub(super) fn sealed(&self, target: &ReadTarget) -> Result<Option<Arc<SealedSegment>>> {
        let inner = &self.inner;
        let (owner, base) = (target.owner, target.base);
        if let Some(hit) = inner.cache.get((owner, base)) {
            return Ok(Some(hit));
        }
        // Under the swap lock the files behind the segment's names are the ones the view
        // describes: no rewrite can rename a new version in while we open them.
        let _swap = read_lock(&inner.swap);
        let current = || {
            lock(&inner.view)
                .segments
                .iter()
                .any(|s| s.base == base && s.owner == owner)
        };
        if !current() {
            return Ok(None);
        }
        let path = inner.dir.join(segment_file_name(base));
        let file = match inner.backend.open(&path, OpenMode::Existing) {
            Ok(file) => file,
            // Retention deletes a segment (view first, then files) without the swap lock: one
            // that left the view between the check and the open is gone, not damaged.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !current() => return Ok(None),
            Err(e) => return Err(LogError::io(IoOp::Open, &path, e)),
        };
        let len = file.len().map_err(|e| LogError::io(IoOp::Len, &path, e))?;
        let index = load_index(
            &*inner.backend,
            &inner.dir.join(index_file_name(base)),
            base,
            len,
        )?
        .map(|i| i.entries)
        .unwrap_or_default();
        let loaded = Arc::new(SealedSegment { file, index });
        inner.cache.insert((owner, base), Arc::clone(&loaded));
        Ok(Some(loaded))
    }

    /// Reads records covering sequence numbers from `from_seq` on: the first returned record is
    /// the one containing `from_seq` (or the first retained one after it, when `from_seq` was
    /// deleted or falls in a gap). Stops once the records cover `max_seqs` sequence numbers at or
    /// after `from_seq`, or hold at least `max_bytes` payload bytes (at least one record is
    /// returned when any exists). Only acknowledged records are visible.
    ///
    /// A segment rewritten ([`Log::rewrite_sealed`]) or deleted while the read runs is read
    /// either in the version the read found first or, after a retry, in its new version.
    pub fn read(&self, from_seq: u64, max_seqs: u64, max_bytes: u64) -> Result<Vec<StoredRecord>> {
        self.stable(|| loop {
            if let Some(records) = self.read_once(from_seq, max_seqs, max_bytes)? {
                return Ok(records);
            }
        })
    }

    /// One attempt of [`Log::read`]; `None` when a segment changed under it.
    fn read_once(
        &self,
        from_seq: u64,
        max_seqs: u64,
        max_bytes: u64,
    ) -> Result<Option<Vec<StoredRecord>>> {
        let mut batch = ReadBatch {
            from_seq,
            max_seqs,
            max_bytes,
            covered: 0,
            bytes: 0,
            out: Vec::new(),
        };
        if max_seqs == 0 {
            return Ok(Some(batch.out));
        }
        for target in self.targets_from(from_seq) {
            let (file, start_pos, index_hint) = if let Some((file, pos)) = &target.active {
                (Arc::clone(file), *pos, None)
            } else {
                let Some(sealed) = self.sealed(&target)? else {
                    return Ok(None);
                };
                let pos = index_lower_bound(&sealed.index, from_seq);
                let past = from_seq.saturating_add(max_seqs);
                let i = sealed.index.partition_point(|e| e.seq <= past);
                let next = sealed.index.get(i).map(|e| e.position);
                (Arc::clone(&sealed.file), pos, next)
            };
            let done = self.read_segment(&target, &*file, start_pos, index_hint, &mut batch)?;
            if done {
                break;
            }
        }
        Ok(Some(batch.out))
    }

    /// Reads the records of one segment version (`target`, whose file is `file`) from the
    /// record at `start_pos` into `batch`, skipping those wholly before its `from_seq`, and
    /// checking that sequence numbers run on. `end_hint` is the position of the index entry
    /// past the wanted range, when known, to size the first read. Returns whether the batch
    /// is full (`true`) or the segment's visible end was reached (`false`).
    fn read_segment(
        &self,
        target: &ReadTarget,
        file: &dyn StorageFile,
        start_pos: u64,
        end_hint: Option<u64>,
        batch: &mut ReadBatch,
    ) -> Result<bool> {
        let path = || self.inner.dir.join(segment_file_name(target.base));
        let mut pos = start_pos;
        // First read: up to the index entry past the wanted range, or a size estimate.
        let mut want = first_read_len(target, pos, end_hint, batch);
        let mut expected_seq: Option<u64> = None;
        while pos < target.len {
            if target.len - pos < RECORD_HEADER_LEN as u64 {
                // The visible length always ends at a record boundary.
                return Err(LogError::corrupt(path(), pos, Corruption::Truncated));
            }
            let len = want.min(target.len - pos);
            let chunk =
                read_exact(file, pos, len).map_err(|e| LogError::io(IoOp::Read, path(), e))?;
            let read = self.read_chunk(target, &chunk, pos, &mut expected_seq, batch)?;
            if read.full {
                return Ok(true);
            }
            pos += read.consumed as u64;
            if read.progressed {
                want = (want * 2).min(MAX_READ_CHUNK);
            } else {
                // The next record is larger than the chunk: read exactly it.
                let raw = read_exact(file, pos, RECORD_HEADER_LEN as u64)
                    .map_err(|e| LogError::io(IoOp::Read, path(), e))?;
                let header = RecordHeader::decode(&raw, pos)
                    .map_err(|kind| LogError::corrupt(path(), pos, kind))?;
                want = header.record_len();
            }
        }
        Ok(false)
    }

    /// Takes the whole records of `chunk` (read at `pos` of `target`'s file) into `batch`,
    /// stopping early once the batch is full; a record cut off by the chunk's end is left for
    /// the next read (unless it runs past the visible end: corruption). Each record's sequence
    /// number must follow `expected_seq` (when set), which moves past it; its payload is
    /// verified when configured, and opened with the log's cipher.
    fn read_chunk(
        &self,
        target: &ReadTarget,
        chunk: &Bytes,
        pos: u64,
        expected_seq: &mut Option<u64>,
        batch: &mut ReadBatch,
    ) -> Result<ChunkRead> {
        let path = || self.inner.dir.join(segment_file_name(target.base));
        let mut off = 0usize;
        let mut progressed = false;
        while off + RECORD_HEADER_LEN <= chunk.len() {
            let at = pos + off as u64;
            let header = RecordHeader::decode(&chunk[off..off + RECORD_HEADER_LEN], at)
                .map_err(|kind| LogError::corrupt(path(), at, kind))?;
            if let Some(expected) = *expected_seq {
                if header.seq != expected {
                    return Err(LogError::corrupt(
                        path(),
                        at,
                        Corruption::NonContiguous {
                            expected,
                            found: header.seq,
                        },
                    ));
                }
            }
            let record_len = usize::try_from(header.record_len()).unwrap_or(usize::MAX);
            if off + record_len > chunk.len() {
                if at + header.record_len() > target.len {
                    return Err(LogError::corrupt(path(), at, Corruption::Truncated));
                }
                break;
            }
            progressed = true;
            *expected_seq = Some(header.end_seq());
            let payload_range = off + RECORD_HEADER_LEN..off + record_len;
            off += record_len;
            if header.end_seq() <= batch.from_seq {
                continue;
            }
            let payload = chunk.slice(payload_range);
            if self.inner.config.verify_on_read {
                header
                    .verify_payload(&payload)
                    .map_err(|kind| LogError::corrupt(path(), at, kind))?;
            }
            let payload = reveal(
                self.inner.cipher.as_ref(),
                (header.seq, header.count, header.tag),
                payload,
            )
            .map_err(|kind| LogError::corrupt(path(), at, kind))?;
            batch.push(&header, payload);
            if batch.is_full() {
                return Ok(ChunkRead {
                    consumed: off,
                    progressed,
                    full: true,
                });
            }
        }
        Ok(ChunkRead {
            consumed: off,
            progressed,
            full: false,
        })
    }

    /// Reads the one visible record containing sequence number `seq` with small reads (8 KiB
    /// at a time from the nearest index entry), for point lookups such as the event
    /// store's: [`Log::read`] reads ahead in large chunks, which suits scans. `None` when no
    /// visible record contains `seq`.
    pub fn read_record(&self, seq: u64) -> Result<Option<StoredRecord>> {
        self.stable(|| self.read_record_once(seq))
    }

    fn read_record_once(&self, seq: u64) -> Result<Option<StoredRecord>> {
        let (target, file, mut pos) = loop {
            let Some(target) = self.targets_from(seq).into_iter().next() else {
                return Ok(None);
            };
            if seq < target.base {
                return Ok(None);
            }
            let (file, pos) = if let Some((file, pos)) = &target.active {
                (Arc::clone(file), *pos)
            } else {
                let Some(sealed) = self.sealed(&target)? else {
                    continue; // rewritten or deleted meanwhile: look again
                };
                let pos = index_lower_bound(&sealed.index, seq);
                (Arc::clone(&sealed.file), pos)
            };
            break (target, file, pos);
        };
        let path = || self.inner.dir.join(segment_file_name(target.base));
        // One small read usually covers the walk from the index entry to the record.
        let mut chunk = Bytes::new();
        let mut chunk_pos = pos;
        while pos + RECORD_HEADER_LEN as u64 <= target.len {
            let in_chunk = |at: u64, len: u64, chunk: &Bytes, chunk_pos: u64| {
                at >= chunk_pos && at + len <= chunk_pos + chunk.len() as u64
            };
            if !in_chunk(pos, RECORD_HEADER_LEN as u64, &chunk, chunk_pos) {
                let len = (target.len - pos).min(POINT_READ_CHUNK);
                chunk = read_exact(&*file, pos, len)
                    .map_err(|e| LogError::io(IoOp::Read, path(), e))?;
                chunk_pos = pos;
            }
            let off = usize::try_from(pos - chunk_pos).unwrap_or(usize::MAX);
            let header = RecordHeader::decode(&chunk[off..off + RECORD_HEADER_LEN], pos)
                .map_err(|kind| LogError::corrupt(path(), pos, kind))?;
            if header.seq > seq {
                return Ok(None);
            }
            if seq < header.end_seq() {
                if pos + header.record_len() > target.len {
                    return Err(LogError::corrupt(path(), pos, Corruption::Truncated));
                }
                let start = pos + RECORD_HEADER_LEN as u64;
                let payload = if in_chunk(start, u64::from(header.payload_len), &chunk, chunk_pos) {
                    let from = off + RECORD_HEADER_LEN;
                    chunk.slice(from..from + header.payload_len as usize)
                } else {
                    read_exact(&*file, start, u64::from(header.payload_len))
                        .map_err(|e| LogError::io(IoOp::Read, path(), e))?
                };
                if self.inner.config.verify_on_read {
                    header
                        .verify_payload(&payload)
                        .map_err(|kind| LogError::corrupt(path(), pos, kind))?;
                }
                let payload = reveal(
                    self.inner.cipher.as_ref(),
                    (header.seq, header.count, header.tag),
                    payload,
                )
                .map_err(|kind| LogError::corrupt(path(), pos, kind))?;
                return Ok(Some(StoredRecord {
                    meta: RecordMeta {
                        seq: header.seq,
                        count: header.count,
                        timestamp: header.timestamp,
                        tag: header.tag,
                        len: header.payload_len,
                    },
                    payload,
                }));
            }
            pos += header.record_len();
        }
        Ok(None)
    }

    /// The first sequence number whose record's timestamp is at or after `timestamp`, or `None`
    /// when every retained record is older.
    pub fn seq_at_timestamp(&self, timestamp: u64) -> Result<Option<u64>> {
        self.stable(|| self.seq_at_timestamp_once(timestamp))
    }

    fn seq_at_timestamp_once(&self, timestamp: u64) -> Result<Option<u64>> {
        let (target, file, mut pos) = loop {
            let target = {
                let view = lock(&self.inner.view);
                let count = view.segments.len();
                let Some((i, seg)) = view
                    .segments
                    .iter()
                    .enumerate()
                    .find(|(_, s)| s.max_ts.is_some_and(|m| m >= timestamp))
                else {
                    return Ok(None);
                };
                let active = (i + 1 == count).then(|| {
                    let pos = index_lower_bound_ts(&view.active_index, timestamp);
                    (Arc::clone(&view.active_file), pos)
                });
                ReadTarget {
                    base: seg.base,
                    end: seg.end,
                    len: seg.len,
                    sealed: seg.sealed,
                    owner: seg.owner,
                    active,
                }
            };
            let (file, pos) = if let Some((file, pos)) = &target.active {
                (Arc::clone(file), *pos)
            } else {
                let Some(sealed) = self.sealed(&target)? else {
                    continue; // rewritten or deleted meanwhile: look again
                };
                let pos = index_lower_bound_ts(&sealed.index, timestamp);
                (Arc::clone(&sealed.file), pos)
            };
            break (target, file, pos);
        };
        debug_assert!(target.sealed || target.active.is_some());
        let path = || self.inner.dir.join(segment_file_name(target.base));
        while pos < target.len {
            let raw = read_exact(&*file, pos, RECORD_HEADER_LEN as u64)
                .map_err(|e| LogError::io(IoOp::Read, path(), e))?;
            let header = RecordHeader::decode(&raw, pos)
                .map_err(|kind| LogError::corrupt(path(), pos, kind))?;
            if header.timestamp >= timestamp {
                return Ok(Some(header.seq));
            }
            pos += header.record_len();
        }
        // The segment's max timestamp said a record qualifies.
        Err(LogError::corrupt(path(), pos, Corruption::Truncated))
    }
}
