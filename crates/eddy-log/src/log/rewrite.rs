//! Rewriting a sealed segment in place of itself: every record keeps its sequence number,
//! count, timestamp and tag; only payloads change (the event store's compaction). The new
//! version is written and synced under a temporary name and renamed over the old one.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::cache::{next_owner_id, SealedSegment};
use crate::cipher::reveal;
use crate::error::{Corruption, IoOp, LogError, Result};
use crate::file::{OpenMode, StorageFile};
use crate::format::{
    encode_index_header, encode_segment_header, index_file_name, segment_file_name, IndexEntry,
    IndexKind, RecordHeader, INDEX_ENTRY_LEN, INDEX_HEADER_LEN, MAX_RECORD_PAYLOAD,
    RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::sync::{lock, write_lock};

use super::read::ReadTarget;
use super::segment_files::{read_exact, SCAN_CHUNK};
use super::state::Log;
use super::types::RecordMeta;

/// What [`Log::rewrite_sealed`] did to one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SegmentRewrite {
    /// The segment's base sequence number.
    pub base: u64,
    /// Records read.
    pub records: u64,
    /// Records whose payload was replaced.
    pub rewritten: u64,
    /// File bytes before.
    pub old_bytes: u64,
    /// File bytes after (`old_bytes` when no payload changed: then nothing was written).
    pub new_bytes: u64,
}

/// Bytes a rewrite buffers before appending them to the new file.
const REWRITE_CHUNK: usize = 1024 * 1024;

/// Calls `visit(position, header, payload)` for every record of a sealed segment file, from
/// its first record to `len`, verifying both checksums and that sequence numbers run
/// contiguously from `base` to `end`. Any damage is corruption: sealed segments are never torn.
fn visit_records(
    file: &dyn StorageFile,
    path: &Path,
    (base, end, len): (u64, u64, u64),
    mut visit: impl FnMut(u64, &RecordHeader, Bytes) -> Result<()>,
) -> Result<()> {
    let corrupt = |at: u64, kind| LogError::corrupt(path, at, kind);
    let read =
        |at: u64, n: u64| read_exact(file, at, n).map_err(|e| LogError::io(IoOp::Read, path, e));
    let mut pos = SEGMENT_HEADER_LEN as u64;
    let mut seq = base;
    let mut chunk = Bytes::new();
    let mut chunk_pos = pos;
    let in_chunk = |at: u64, n: u64, chunk: &Bytes, chunk_pos: u64| {
        at >= chunk_pos && at + n <= chunk_pos + chunk.len() as u64
    };
    while pos < len {
        let remaining = len - pos;
        if remaining < RECORD_HEADER_LEN as u64 {
            return Err(corrupt(pos, Corruption::SealedSegmentTail));
        }
        if !in_chunk(pos, RECORD_HEADER_LEN as u64, &chunk, chunk_pos) {
            chunk = read(pos, remaining.min(SCAN_CHUNK))?;
            chunk_pos = pos;
        }
        let off = usize::try_from(pos - chunk_pos).unwrap_or(usize::MAX);
        let header = RecordHeader::decode(&chunk[off..off + RECORD_HEADER_LEN], pos)
            .map_err(|kind| corrupt(pos, kind))?;
        if header.seq != seq {
            return Err(corrupt(
                pos,
                Corruption::NonContiguous {
                    expected: seq,
                    found: header.seq,
                },
            ));
        }
        let record_len = header.record_len();
        if record_len > remaining {
            return Err(corrupt(pos, Corruption::SealedSegmentTail));
        }
        if !in_chunk(pos, record_len, &chunk, chunk_pos) {
            chunk = read(pos, remaining.min(SCAN_CHUNK.max(record_len)))?;
            chunk_pos = pos;
        }
        let off = usize::try_from(pos - chunk_pos).unwrap_or(usize::MAX);
        let payload = chunk
            .slice(off + RECORD_HEADER_LEN..off + RECORD_HEADER_LEN + header.payload_len as usize);
        header
            .verify_payload(&payload)
            .map_err(|kind| corrupt(pos, kind))?;
        visit(pos, &header, payload)?;
        pos += record_len;
        seq = header.end_seq();
    }
    if seq != end {
        return Err(corrupt(
            pos,
            Corruption::NonContiguous {
                expected: end,
                found: seq,
            },
        ));
    }
    Ok(())
}

/// The new version of a segment being written by [`Log::rewrite_sealed`].
struct NewSegment {
    file: Arc<dyn StorageFile>,
    path: PathBuf,
    buf: BytesMut,
    /// Bytes already appended to `file`.
    written: u64,
    index: Vec<IndexEntry>,
    last_index_pos: Option<u64>,
    interval: u64,
}

impl NewSegment {
    fn io(&self, op: IoOp) -> impl Fn(io::Error) -> LogError + '_ {
        move |e| LogError::io(op, &self.path, e)
    }

    fn len(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.file
                .append(&[&self.buf])
                .map_err(self.io(IoOp::Append))?;
            self.written += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    fn push(&mut self, header: &RecordHeader, payload: &[u8]) -> Result<()> {
        let position = self.len();
        if self
            .last_index_pos
            .is_none_or(|last| position - last >= self.interval)
        {
            self.index.push(IndexEntry {
                seq: header.seq,
                timestamp: header.timestamp,
                position,
                kind: IndexKind::Record,
            });
            self.last_index_pos = Some(position);
        }
        let encoded = header.encode();
        if payload.len() >= REWRITE_CHUNK {
            // A large record goes out as is, without a copy into the buffer.
            self.flush()?;
            self.file
                .append(&[&encoded, payload])
                .map_err(self.io(IoOp::Append))?;
            self.written += header.record_len();
            return Ok(());
        }
        self.buf.extend_from_slice(&encoded);
        self.buf.extend_from_slice(payload);
        if self.buf.len() >= REWRITE_CHUNK {
            self.flush()?;
        }
        Ok(())
    }
}

impl Log {
    /// Rewrites sealed segment `base` with new payloads: `rewrite` is called with every record
    /// of the segment, in order, and returns a replacement payload or `None` to keep the
    /// record as it is. Sequence numbers, counts, timestamps and tags never change (only bytes
    /// move), so anything that refers to a record by sequence number stays valid. This is the
    /// event store's compaction primitive; an upper layer that replaces a payload must be able
    /// to read both the old and the new payload (a crash may leave either).
    ///
    /// Returns `None` when `base` is not (or no longer) a sealed segment of this log. When no
    /// payload changes, nothing is written. Rewrites of one log run one at a time; appends are
    /// never blocked (the active segment is not involved).
    ///
    /// # Protocol
    ///
    /// 1. Every record is read and verified from the segment's current file, and the new
    ///    version is written to `<base>.log.rewrite.tmp` (record headers re-encoded with the
    ///    new payload's length and CRC, `synced_len` 0) together with its sparse index in
    ///    `<base>.index.rewrite.tmp` (sealed); both are fdatasynced, then the directory.
    /// 2. Under the swap lock (which keeps segment loads, retention and purges out): the old
    ///    index is removed, the new file is renamed over `<base>.log` (the atomic switch), the
    ///    read view and the cache move to the new version, the new index is renamed into
    ///    place; then the directory is synced.
    ///
    /// A crash at any point leaves `<base>.log` as either the old or the new version, each a
    /// complete, valid segment with the same records; recovery removes the leftover `*.tmp`
    /// files and rebuilds a missing index (or one that disagrees with its segment). Readers
    /// that hold the old version (a cached file handle) keep reading it; readers that come
    /// later, or that find their version gone, take the new one.
    ///
    /// An error from `rewrite` abandons the rewrite (nothing is installed) and is returned as
    /// it is; `E` is the caller's error type, so a store's own refusals pass through.
    pub fn rewrite_sealed<E: From<LogError>>(
        &self,
        base: u64,
        mut rewrite: impl FnMut(&RecordMeta, &Bytes) -> std::result::Result<Option<Bytes>, E>,
    ) -> std::result::Result<Option<SegmentRewrite>, E> {
        let mut failed: Option<E> = None;
        let done = self.rewrite_sealed_with(base, |meta, payload| {
            rewrite(meta, payload).map_err(|e| {
                failed = Some(e);
                // Abandons the rewrite; the caller's error is returned instead.
                LogError::Shutdown
            })
        });
        match failed {
            Some(e) => Err(e),
            None => done.map_err(E::from),
        }
    }

    fn rewrite_sealed_with(
        &self,
        base: u64,
        mut rewrite: impl FnMut(&RecordMeta, &Bytes) -> Result<Option<Bytes>>,
    ) -> Result<Option<SegmentRewrite>> {
        let inner = &self.inner;
        let _one = lock(&inner.rewriting);
        let (target, max_ts, old) = loop {
            let (target, max_ts) = {
                let view = lock(&inner.view);
                let Some(seg) = view.segments.iter().find(|s| s.base == base && s.sealed) else {
                    return Ok(None);
                };
                let target = ReadTarget {
                    base,
                    end: seg.end,
                    len: seg.len,
                    sealed: true,
                    owner: seg.owner,
                    active: None,
                };
                (target, seg.max_ts)
            };
            if let Some(old) = self.sealed(&target)? {
                break (target, max_ts, old);
            }
        };
        let log_path = inner.dir.join(segment_file_name(base));
        let index_path = inner.dir.join(index_file_name(base));
        let log_tmp = inner
            .dir
            .join(format!("{}.rewrite.tmp", segment_file_name(base)));
        let index_tmp = inner
            .dir
            .join(format!("{}.rewrite.tmp", index_file_name(base)));
        let discard = || {
            let _ = inner.backend.remove_file(&log_tmp);
            let _ = inner.backend.remove_file(&index_tmp);
        };
        discard();
        let mut report = SegmentRewrite {
            base,
            old_bytes: target.len,
            new_bytes: target.len,
            ..SegmentRewrite::default()
        };
        let written = (|| -> Result<Option<NewSegment>> {
            let file = inner
                .backend
                .open(&log_tmp, OpenMode::CreateNew)
                .map_err(|e| LogError::io(IoOp::Open, &log_tmp, e))?;
            let mut new = NewSegment {
                file,
                path: log_tmp.clone(),
                buf: BytesMut::with_capacity(REWRITE_CHUNK + RECORD_HEADER_LEN),
                written: 0,
                index: Vec::new(),
                last_index_pos: None,
                interval: inner.config.index_interval,
            };
            new.buf.extend_from_slice(&encode_segment_header(base));
            visit_records(
                &*old.file,
                &log_path,
                (base, target.end, target.len),
                |at, header, payload| {
                    report.records += 1;
                    let meta = RecordMeta {
                        seq: header.seq,
                        count: header.count,
                        timestamp: header.timestamp,
                        tag: header.tag,
                        len: header.payload_len,
                    };
                    // The caller sees (and replaces) plaintext; a replacement is sealed again.
                    let record = (header.seq, header.count, header.tag);
                    let plain = reveal(inner.cipher.as_ref(), record, payload.clone())
                        .map_err(|kind| LogError::corrupt(&log_path, at, kind))?;
                    let (payload, payload_crc) = match rewrite(&meta, &plain)? {
                        None => (payload, header.payload_crc),
                        Some(replaced) => {
                            report.rewritten += 1;
                            let replaced = match &inner.cipher {
                                Some(c) => c.seal(header.seq, header.count, header.tag, &replaced),
                                None => replaced,
                            };
                            let crc = crc32c::crc32c(&replaced);
                            (replaced, crc)
                        }
                    };
                    let payload_len = u32::try_from(payload.len())
                        .ok()
                        .filter(|len| *len <= MAX_RECORD_PAYLOAD)
                        .ok_or(LogError::LimitExceeded {
                            what: "rewritten record payload bytes",
                            size: payload.len() as u64,
                            limit: u64::from(MAX_RECORD_PAYLOAD),
                        })?;
                    let header = RecordHeader {
                        payload_len,
                        payload_crc,
                        synced_len: 0,
                        ..*header
                    };
                    new.push(&header, &payload)
                },
            )?;
            if report.rewritten == 0 {
                return Ok(None);
            }
            new.flush()?;
            new.file.sync().map_err(new.io(IoOp::Sync))?;
            let seal = IndexEntry {
                seq: target.end,
                timestamp: max_ts.unwrap_or(0),
                position: new.len(),
                kind: IndexKind::Seal,
            };
            let index_file = inner
                .backend
                .open(&index_tmp, OpenMode::CreateNew)
                .map_err(|e| LogError::io(IoOp::Open, &index_tmp, e))?;
            let mut bytes =
                Vec::with_capacity(INDEX_HEADER_LEN + (new.index.len() + 1) * INDEX_ENTRY_LEN);
            bytes.extend_from_slice(&encode_index_header(base));
            for entry in new.index.iter().chain(std::iter::once(&seal)) {
                bytes.extend_from_slice(&entry.encode());
            }
            index_file
                .append(&[&bytes])
                .and_then(|()| index_file.sync())
                .map_err(|e| LogError::io(IoOp::Append, &index_tmp, e))?;
            inner
                .backend
                .sync_dir(&inner.dir)
                .map_err(|e| LogError::io(IoOp::SyncDir, &inner.dir, e))?;
            Ok(Some(new))
        })();
        let new = match written {
            Ok(Some(new)) => new,
            Ok(None) => {
                discard();
                return Ok(Some(report));
            }
            Err(e) => {
                discard();
                return Err(e);
            }
        };
        report.new_bytes = new.len();
        let owner = next_owner_id();
        {
            let _swap = write_lock(&inner.swap);
            let present = lock(&inner.view)
                .segments
                .iter()
                .any(|s| s.base == base && s.owner == target.owner);
            if !present {
                // Deleted by retention or a purge meanwhile: nothing to replace.
                discard();
                return Ok(None);
            }
            // From here until the rename a crash leaves the old version without an index.
            match inner.backend.remove_file(&index_path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    discard();
                    return Err(LogError::io(IoOp::Remove, &index_path, e));
                }
            }
            if let Err(e) = inner.backend.rename(&log_tmp, &log_path) {
                discard();
                return Err(LogError::io(IoOp::Rename, &log_path, e));
            }
            // The file behind the name is the new version: the view and the cache follow.
            {
                let mut view = lock(&inner.view);
                let seg = view
                    .segments
                    .iter_mut()
                    .find(|s| s.base == base)
                    .expect("segments leave the view only under the swap lock");
                seg.len = report.new_bytes;
                seg.owner = owner;
            }
            inner.cache.remove((target.owner, base));
            inner.cache.insert(
                (owner, base),
                Arc::new(SealedSegment {
                    file: new.file,
                    index: new.index,
                }),
            );
            if let Err(e) = inner.backend.rename(&index_tmp, &index_path) {
                // Derived data: rebuilt at the next open; until then a load of this segment
                // walks from its first record.
                tracing::warn!(path = %index_path.display(), error = %e, "installing a rewritten segment's index failed");
                let _ = inner.backend.remove_file(&index_tmp);
            }
        }
        if let Err(e) = inner.backend.sync_dir(&inner.dir) {
            // Either version of the segment is a correct segment: a lost rename only loses the
            // space it reclaimed.
            tracing::warn!(dir = %inner.dir.display(), error = %e, "syncing a rewritten segment's directory failed");
        }
        Ok(Some(report))
    }
}
