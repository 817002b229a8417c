//! Rewriting a sealed segment in place of itself: every record keeps its sequence number,
//! count, timestamp and tag; only payloads change (the event store's compaction). The new
//! version is written and synced under a temporary name and renamed over the old one.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::cache::{next_owner_id, SealedSegment};
use crate::cipher::{reveal, Cipher};
use crate::error::{Corruption, IoOp, LogError, Result};
use crate::file::{OpenMode, StorageBackend, StorageFile};
use crate::format::{
    encode_index_header, encode_segment_header, index_file_name, segment_file_name, IndexEntry,
    IndexKind, RecordHeader, INDEX_ENTRY_LEN, INDEX_HEADER_LEN, MAX_RECORD_PAYLOAD,
    RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::sync::{lock, write_lock};

use super::read::ReadTarget;
use super::segment_files::{read_exact, SCAN_CHUNK};
use super::state::{Log, LogInner};
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
    /// Creates the new version's file at `path` (which must not exist) with the segment
    /// header of `base` buffered, not yet written.
    fn create(inner: &LogInner, path: &Path, base: u64) -> Result<NewSegment> {
        let file = inner
            .backend
            .open(path, OpenMode::CreateNew)
            .map_err(|e| LogError::io(IoOp::Open, path, e))?;
        let mut new = NewSegment {
            file,
            path: path.to_path_buf(),
            buf: BytesMut::with_capacity(REWRITE_CHUNK + RECORD_HEADER_LEN),
            written: 0,
            index: Vec::new(),
            last_index_pos: None,
            interval: inner.config.index_interval,
        };
        new.buf.extend_from_slice(&encode_segment_header(base));
        Ok(new)
    }

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

    /// [`Log::rewrite_sealed`] with `rewrite`'s errors already [`LogError`]s: the protocol
    /// documented there, one step per helper.
    fn rewrite_sealed_with(
        &self,
        base: u64,
        mut rewrite: impl FnMut(&RecordMeta, &Bytes) -> Result<Option<Bytes>>,
    ) -> Result<Option<SegmentRewrite>> {
        let inner = &self.inner;
        let _one = lock(&inner.rewriting);
        let Some(source) = self.rewrite_source(base)? else {
            return Ok(None);
        };
        let paths = RewritePaths::new(&inner.dir, base);
        paths.discard(&*inner.backend);
        let mut report = SegmentRewrite {
            base,
            old_bytes: source.target.len,
            new_bytes: source.target.len,
            ..SegmentRewrite::default()
        };
        let new = match self.write_new_version(&source, &paths, &mut report, &mut rewrite) {
            Ok(Some(new)) => new,
            Ok(None) => {
                paths.discard(&*inner.backend);
                return Ok(Some(report));
            }
            Err(e) => {
                paths.discard(&*inner.backend);
                return Err(e);
            }
        };
        report.new_bytes = new.len();
        if !self.install_new_version(&source.target, &paths, new)? {
            return Ok(None);
        }
        if let Err(e) = inner.backend.sync_dir(&inner.dir) {
            // Either version of the segment is a correct segment: a lost rename only loses the
            // space it reclaimed.
            tracing::warn!(dir = %inner.dir.display(), error = %e, "syncing a rewritten segment's directory failed");
        }
        Ok(Some(report))
    }

    /// The version of sealed segment `base` the rewrite starts from; `None` when `base` is not
    /// a sealed segment of this log. A version that changes between reading the view and
    /// loading its file is not the current one: the view is read again.
    fn rewrite_source(&self, base: u64) -> Result<Option<RewriteSource>> {
        loop {
            let (target, max_ts) = {
                let view = lock(&self.inner.view);
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
                return Ok(Some(RewriteSource {
                    target,
                    max_ts,
                    old,
                }));
            }
        }
    }

    /// Protocol step 1: passes every record of `source` through `rewrite` (counting into
    /// `report`) and writes the new version to `paths.log_tmp`; then, unless no payload
    /// changed (`None`: nothing synced), syncs it, writes and syncs its sealed index at
    /// `paths.index_tmp`, and syncs the directory. The temporary files are the caller's to
    /// remove on `None` and on error.
    fn write_new_version(
        &self,
        source: &RewriteSource,
        paths: &RewritePaths,
        report: &mut SegmentRewrite,
        rewrite: &mut impl FnMut(&RecordMeta, &Bytes) -> Result<Option<Bytes>>,
    ) -> Result<Option<NewSegment>> {
        let inner = &self.inner;
        let target = &source.target;
        let mut new = NewSegment::create(inner, &paths.log_tmp, target.base)?;
        visit_records(
            &*source.old.file,
            &paths.log,
            (target.base, target.end, target.len),
            |at, header, payload| {
                report.records += 1;
                let cipher = inner.cipher.as_ref();
                let (header, payload, replaced) =
                    rewrite_record(cipher, (&paths.log, at), header, payload, rewrite)?;
                if replaced {
                    report.rewritten += 1;
                }
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
            timestamp: source.max_ts.unwrap_or(0),
            position: new.len(),
            kind: IndexKind::Seal,
        };
        write_sealed_index(
            &*inner.backend,
            &paths.index_tmp,
            target.base,
            &new.index,
            &seal,
        )?;
        inner
            .backend
            .sync_dir(&inner.dir)
            .map_err(|e| LogError::io(IoOp::SyncDir, &inner.dir, e))?;
        Ok(Some(new))
    }

    /// Protocol step 2, under the swap lock: unless the segment left the view meanwhile
    /// (retention or a purge: `false`), removes the old index, renames the new version over
    /// `<base>.log` (the atomic switch), moves the view and the cache to it and renames the
    /// new index into place. Syncing the directory is the caller's. On `false` and on error
    /// the temporary files are removed.
    fn install_new_version(
        &self,
        target: &ReadTarget,
        paths: &RewritePaths,
        new: NewSegment,
    ) -> Result<bool> {
        let inner = &self.inner;
        let base = target.base;
        let owner = next_owner_id();
        let _swap = write_lock(&inner.swap);
        let present = lock(&inner.view)
            .segments
            .iter()
            .any(|s| s.base == base && s.owner == target.owner);
        if !present {
            // Deleted by retention or a purge meanwhile: nothing to replace.
            paths.discard(&*inner.backend);
            return Ok(false);
        }
        // From here until the rename a crash leaves the old version without an index.
        match inner.backend.remove_file(&paths.index) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                paths.discard(&*inner.backend);
                return Err(LogError::io(IoOp::Remove, &paths.index, e));
            }
        }
        if let Err(e) = inner.backend.rename(&paths.log_tmp, &paths.log) {
            paths.discard(&*inner.backend);
            return Err(LogError::io(IoOp::Rename, &paths.log, e));
        }
        self.adopt_new_version(target, owner, new);
        if let Err(e) = inner.backend.rename(&paths.index_tmp, &paths.index) {
            // Derived data: rebuilt at the next open; until then a load of this segment
            // walks from its first record.
            tracing::warn!(path = %paths.index.display(), error = %e, "installing a rewritten segment's index failed");
            let _ = inner.backend.remove_file(&paths.index_tmp);
        }
        Ok(true)
    }

    /// Once the new version is the file behind the segment's name: points the view's entry
    /// at it (its length, and `owner` as its new cache owner) and replaces the old version in
    /// the cache with it. Runs under the swap lock, which keeps the segment in the view.
    fn adopt_new_version(&self, target: &ReadTarget, owner: u64, new: NewSegment) {
        let inner = &self.inner;
        let base = target.base;
        {
            let mut view = lock(&inner.view);
            let seg = view
                .segments
                .iter_mut()
                .find(|s| s.base == base)
                .expect("segments leave the view only under the swap lock");
            seg.len = new.len();
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
    }
}

/// The segment version a rewrite reads: where it is in the log, its newest timestamp (for
/// the seal entry of the new index) and its loaded file.
struct RewriteSource {
    target: ReadTarget,
    max_ts: Option<u64>,
    old: Arc<SealedSegment>,
}

/// The files of one segment's rewrite: the segment and its index, and the temporary names
/// their new versions are written under.
struct RewritePaths {
    log: PathBuf,
    index: PathBuf,
    log_tmp: PathBuf,
    index_tmp: PathBuf,
}

impl RewritePaths {
    fn new(dir: &Path, base: u64) -> RewritePaths {
        RewritePaths {
            log: dir.join(segment_file_name(base)),
            index: dir.join(index_file_name(base)),
            log_tmp: dir.join(format!("{}.rewrite.tmp", segment_file_name(base))),
            index_tmp: dir.join(format!("{}.rewrite.tmp", index_file_name(base))),
        }
    }

    /// Removes both temporary files, ignoring errors (either may not exist; recovery removes
    /// any left over).
    fn discard(&self, backend: &dyn StorageBackend) {
        let _ = backend.remove_file(&self.log_tmp);
        let _ = backend.remove_file(&self.index_tmp);
    }
}

/// One record of a rewrite: `rewrite` sees its metadata and plaintext and may return a new
/// payload. Returns the header and stored payload to write, and whether the payload was
/// replaced. A replacement is sealed again under the log's cipher and gets its own length and
/// CRC in the header (at most [`MAX_RECORD_PAYLOAD`] bytes); `synced_len` is 0 either way.
/// `at` is the record's position in the file at `path`, for a corruption error.
fn rewrite_record(
    cipher: Option<&Cipher>,
    (path, at): (&Path, u64),
    header: &RecordHeader,
    payload: Bytes,
    rewrite: &mut impl FnMut(&RecordMeta, &Bytes) -> Result<Option<Bytes>>,
) -> Result<(RecordHeader, Bytes, bool)> {
    let meta = RecordMeta {
        seq: header.seq,
        count: header.count,
        timestamp: header.timestamp,
        tag: header.tag,
        len: header.payload_len,
    };
    // The caller sees (and replaces) plaintext; a replacement is sealed again.
    let record = (header.seq, header.count, header.tag);
    let plain = reveal(cipher, record, payload.clone())
        .map_err(|kind| LogError::corrupt(path, at, kind))?;
    let (payload, payload_crc, replaced) = match rewrite(&meta, &plain)? {
        None => (payload, header.payload_crc, false),
        Some(replaced) => {
            let replaced = match cipher {
                Some(c) => c.seal(header.seq, header.count, header.tag, &replaced),
                None => replaced,
            };
            let crc = crc32c::crc32c(&replaced);
            (replaced, crc, true)
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
    Ok((header, payload, replaced))
}

/// Writes a new sealed index for segment `base` at `path`: its header, `entries`, then
/// `seal`, in one append, then syncs the file. `path` must not exist.
fn write_sealed_index(
    backend: &dyn StorageBackend,
    path: &Path,
    base: u64,
    entries: &[IndexEntry],
    seal: &IndexEntry,
) -> Result<()> {
    let index_file = backend
        .open(path, OpenMode::CreateNew)
        .map_err(|e| LogError::io(IoOp::Open, path, e))?;
    let mut bytes = Vec::with_capacity(INDEX_HEADER_LEN + (entries.len() + 1) * INDEX_ENTRY_LEN);
    bytes.extend_from_slice(&encode_index_header(base));
    for entry in entries.iter().chain(std::iter::once(seal)) {
        bytes.extend_from_slice(&entry.encode());
    }
    index_file
        .append(&[&bytes])
        .and_then(|()| index_file.sync())
        .map_err(|e| LogError::io(IoOp::Append, path, e))
}
