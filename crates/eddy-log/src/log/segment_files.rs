//! The files of one segment: reading exact ranges, loading and validating a sparse index
//! file, writing one atomically, creating a fresh segment, removing one, and finding the index
//! entry to start a read from. Derived data rules: an index that fails any check is rebuilt
//! from its segment, never trusted.

use std::io;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::atomic::write_atomic;
use crate::error::{IoOp, LogError, Result};
use crate::file::{OpenMode, StorageBackend, StorageFile};
use crate::format::{
    decode_index_header, encode_index_header, encode_segment_header, index_file_name,
    segment_file_name, IndexEntry, IndexKind, INDEX_ENTRY_LEN, INDEX_HEADER_LEN, RECORD_HEADER_LEN,
    SEGMENT_HEADER_LEN,
};

/// Read size used by recovery scans, torn-tail searches and rewrites.
pub(super) const SCAN_CHUNK: u64 = 1024 * 1024;

/// Reads `[pos, pos + len)` of a file into a buffer of its own (a reused one for large reads:
/// [`read_buffers`](super::read_buffers)).
pub(super) fn read_exact(file: &dyn StorageFile, pos: u64, len: u64) -> io::Result<Bytes> {
    let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    super::read_buffers::read_into(len, |buf| file.read_at(pos, buf))
}

/// A loaded index: its valid entries (record kind) and its seal entry, if any.
pub(super) struct LoadedIndex {
    pub(super) entries: Vec<IndexEntry>,
    pub(super) seal: Option<IndexEntry>,
}

/// Loads and validates an index file. `None` when it is missing or any entry is damaged or
/// inconsistent (entries must increase strictly in sequence and position, stay inside the log
/// file and start at or after the segment header). A trailing partial entry is ignored.
pub(super) fn load_index(
    backend: &dyn StorageBackend,
    path: &Path,
    base: u64,
    log_len: u64,
) -> Result<Option<LoadedIndex>> {
    let file = match backend.open(path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LogError::io(IoOp::Open, path, e)),
    };
    let len = file.len().map_err(|e| LogError::io(IoOp::Len, path, e))?;
    // An index has one entry per `index_interval` bytes at most one per record; a record is at
    // least RECORD_HEADER_LEN bytes, so this bounds the allocation by the log's size.
    let max_len =
        INDEX_HEADER_LEN as u64 + (log_len / RECORD_HEADER_LEN as u64 + 2) * INDEX_ENTRY_LEN as u64;
    if len < INDEX_HEADER_LEN as u64 || len > max_len {
        return Ok(None);
    }
    let bytes = read_exact(&*file, 0, len).map_err(|e| LogError::io(IoOp::Read, path, e))?;
    if decode_index_header(&bytes) != Ok(base) {
        return Ok(None);
    }
    let mut entries: Vec<IndexEntry> = Vec::new();
    let mut seal = None;
    for raw in bytes[INDEX_HEADER_LEN..].chunks_exact(INDEX_ENTRY_LEN) {
        let Ok(entry) = IndexEntry::decode(raw) else {
            return Ok(None);
        };
        if seal.is_some() {
            return Ok(None); // nothing may follow a seal
        }
        match entry.kind {
            IndexKind::Seal => seal = Some(entry),
            IndexKind::Record => {
                if entry.position < SEGMENT_HEADER_LEN as u64 || entry.seq < base {
                    return Ok(None);
                }
                if let Some(prev) = entries.last() {
                    if entry.position <= prev.position
                        || entry.seq <= prev.seq
                        || entry.timestamp < prev.timestamp
                    {
                        return Ok(None);
                    }
                }
                entries.push(entry);
            }
        }
    }
    Ok(Some(LoadedIndex { entries, seal }))
}

/// Writes a complete index file atomically (see [`write_atomic`]).
pub(super) fn write_index(
    backend: &dyn StorageBackend,
    dir: &Path,
    base: u64,
    entries: &[IndexEntry],
    seal: Option<IndexEntry>,
) -> Result<()> {
    let name = index_file_name(base);
    let mut bytes = Vec::with_capacity(INDEX_HEADER_LEN + (entries.len() + 1) * INDEX_ENTRY_LEN);
    bytes.extend_from_slice(&encode_index_header(base));
    for entry in entries.iter().chain(seal.iter()) {
        bytes.extend_from_slice(&entry.encode());
    }
    write_atomic(backend, dir, &name, &bytes)
}

/// Creates a fresh segment (and its index) at `base`, synced, with the directory synced.
pub(super) fn create_segment(
    backend: &dyn StorageBackend,
    dir: &Path,
    base: u64,
) -> io::Result<(Arc<dyn StorageFile>, Arc<dyn StorageFile>)> {
    let log_path = dir.join(segment_file_name(base));
    let index_path = dir.join(index_file_name(base));
    let result = (|| {
        let file = backend.open(&log_path, OpenMode::CreateNew)?;
        file.append(&[&encode_segment_header(base)])?;
        file.sync()?;
        let _ = backend.remove_file(&index_path);
        let index = backend.open(&index_path, OpenMode::CreateNew)?;
        index.append(&[&encode_index_header(base)])?;
        index.sync()?;
        backend.sync_dir(dir)?;
        Ok((file, index))
    })();
    if result.is_err() {
        // Leave no half-made segment behind (best effort; recovery copes with leftovers too).
        let _ = backend.remove_file(&index_path);
        let _ = backend.remove_file(&log_path);
    }
    result
}

pub(super) fn remove_segment_files(
    backend: &dyn StorageBackend,
    dir: &Path,
    base: u64,
) -> Result<()> {
    let log_path = dir.join(segment_file_name(base));
    let index_path = dir.join(index_file_name(base));
    match backend.remove_file(&log_path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(LogError::io(IoOp::Remove, &log_path, e)),
    }
    match backend.remove_file(&index_path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(LogError::io(IoOp::Remove, &index_path, e)),
    }
    backend
        .sync_dir(dir)
        .map_err(|e| LogError::io(IoOp::SyncDir, dir, e))
}

/// Position of the last index entry with `seq <= target` (or the first record).
pub(super) fn index_lower_bound(index: &[IndexEntry], target: u64) -> u64 {
    let i = index.partition_point(|e| e.seq <= target);
    if i == 0 {
        SEGMENT_HEADER_LEN as u64
    } else {
        index[i - 1].position
    }
}

/// Position of the last index entry with `timestamp < target` (or the first record).
pub(super) fn index_lower_bound_ts(index: &[IndexEntry], target: u64) -> u64 {
    let i = index.partition_point(|e| e.timestamp < target);
    if i == 0 {
        SEGMENT_HEADER_LEN as u64
    } else {
        index[i - 1].position
    }
}
