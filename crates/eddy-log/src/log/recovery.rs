//! Recovery of one segment: scan its records (all of them, or from the last index entry),
//! tell a torn tail from interior corruption, settle the damage, and make its index agree with
//! it. [`open`](super::open) runs it over every segment of a log.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::error::{Corruption, IoOp, LogError, Result};
use crate::file::{OpenMode, StorageBackend, StorageFile};
use crate::format::{
    decode_segment_header, encode_segment_header, index_file_name, segment_file_name, IndexEntry,
    IndexKind, RecordHeader, RECORD_HEADER_LEN, RECORD_MAGIC, SEGMENT_HEADER_LEN,
};

use super::config::{LogConfig, VerifyOnOpen};
use super::segment_files::{load_index, read_exact, write_index, LoadedIndex, SCAN_CHUNK};
use super::state::SegmentState;
use super::types::{RecoveryReport, Repair};

/// One log's recovery in progress: where it runs, how, and what it found so far.
pub(super) struct Recovering<'a> {
    pub(super) backend: &'a dyn StorageBackend,
    pub(super) dir: &'a Path,
    pub(super) config: &'a LogConfig,
    pub(super) report: &'a mut RecoveryReport,
}

/// Outcome of scanning a run of records.
struct Scan {
    /// Next expected sequence number after the last good record.
    pub(super) end_seq: u64,
    /// File position after the last good record.
    pub(super) end_pos: u64,
    pub(super) first_ts: Option<u64>,
    pub(super) max_ts: Option<u64>,
    /// Good records scanned.
    pub(super) records: u64,
    /// Index entries generated at `index_interval` (for rebuilding).
    pub(super) entries: Vec<IndexEntry>,
    /// Positions and seqs of every record start seen (only when cross-checking an index).
    pub(super) damage: Option<(u64, Corruption)>,
}

impl Recovering<'_> {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn io(&self, op: IoOp, name: &str) -> impl Fn(io::Error) -> LogError + '_ {
        let path = self.path(name);
        move |e| LogError::io(op, path.clone(), e)
    }
}

/// Scans records from `pos` (expecting `seq`) to `file_len`, verifying both checksums and
/// contiguity. Stops at the first damage.
fn scan_records(
    file: &dyn StorageFile,
    mut pos: u64,
    mut seq: u64,
    file_len: u64,
    interval: u64,
    mut last_index_pos: Option<u64>,
    mut on_record: impl FnMut(u64, &RecordHeader),
) -> io::Result<Scan> {
    let mut scan = Scan {
        end_seq: seq,
        end_pos: pos,
        first_ts: None,
        max_ts: None,
        records: 0,
        entries: Vec::new(),
        damage: None,
    };
    let mut chunk = Bytes::new();
    let mut chunk_pos = pos;
    let in_chunk = |at: u64, len: u64, chunk: &Bytes, chunk_pos: u64| {
        at >= chunk_pos && at + len <= chunk_pos + chunk.len() as u64
    };
    while pos < file_len {
        let remaining = file_len - pos;
        if remaining < RECORD_HEADER_LEN as u64 {
            scan.damage = Some((pos, Corruption::Truncated));
            break;
        }
        // Make sure the header is in the chunk.
        if !in_chunk(pos, RECORD_HEADER_LEN as u64, &chunk, chunk_pos) {
            chunk = read_exact(file, pos, remaining.min(SCAN_CHUNK))?;
            chunk_pos = pos;
        }
        let off = usize::try_from(pos - chunk_pos).unwrap_or(usize::MAX);
        let header = match RecordHeader::decode(&chunk[off..off + RECORD_HEADER_LEN], pos) {
            Ok(h) => h,
            Err(kind) => {
                scan.damage = Some((pos, kind));
                break;
            }
        };
        if header.seq != seq {
            scan.damage = Some((
                pos,
                Corruption::NonContiguous {
                    expected: seq,
                    found: header.seq,
                },
            ));
            break;
        }
        let record_len = header.record_len();
        if record_len > remaining {
            scan.damage = Some((pos, Corruption::Truncated));
            break;
        }
        if !in_chunk(pos, record_len, &chunk, chunk_pos) {
            chunk = read_exact(file, pos, remaining.min(SCAN_CHUNK.max(record_len)))?;
            chunk_pos = pos;
        }
        let off = usize::try_from(pos - chunk_pos).unwrap_or(usize::MAX);
        let payload_start = off + RECORD_HEADER_LEN;
        let payload_end = payload_start + header.payload_len as usize;
        if let Err(kind) = header.verify_payload(&chunk[payload_start..payload_end]) {
            scan.damage = Some((pos, kind));
            break;
        }
        on_record(pos, &header);
        if last_index_pos.is_none_or(|last| pos - last >= interval) {
            scan.entries.push(IndexEntry {
                seq: header.seq,
                timestamp: header.timestamp,
                position: pos,
                kind: IndexKind::Record,
            });
            last_index_pos = Some(pos);
        }
        scan.first_ts.get_or_insert(header.timestamp);
        scan.max_ts = Some(
            scan.max_ts
                .map_or(header.timestamp, |m| m.max(header.timestamp)),
        );
        pos += record_len;
        seq = header.end_seq();
        scan.records += 1;
        scan.end_pos = pos;
        scan.end_seq = seq;
    }
    Ok(scan)
}

/// Counts the records between `from` and `to` by walking their headers alone (a segment's
/// record count is not in its index; tail verification needs it for the segment's payload
/// bytes). Reads one header per record and verifies header checksums only; `None` when the
/// walk does not land exactly on `to` (the caller then verifies the whole segment).
pub(super) fn count_records(file: &dyn StorageFile, from: u64, to: u64) -> io::Result<Option<u64>> {
    let mut pos = from;
    let mut records = 0u64;
    while pos < to {
        if to - pos < RECORD_HEADER_LEN as u64 {
            return Ok(None);
        }
        let raw = read_exact(file, pos, RECORD_HEADER_LEN as u64)?;
        let Ok(header) = RecordHeader::decode(&raw, pos) else {
            return Ok(None);
        };
        pos += header.record_len();
        records += 1;
    }
    Ok((pos == to).then_some(records))
}

/// Looks in `(damage_at, file_len)` for a genuine record header (magic and header checksum)
/// whose `synced_len` is above `damage_at`: proof that the damaged bytes had been synced.
fn find_durable_proof(
    file: &dyn StorageFile,
    damage_at: u64,
    file_len: u64,
) -> io::Result<Option<u64>> {
    let magic = RECORD_MAGIC.to_le_bytes();
    let mut pos = damage_at + 1;
    while pos + RECORD_HEADER_LEN as u64 <= file_len {
        let len = (file_len - pos).min(SCAN_CHUNK);
        let chunk = read_exact(file, pos, len)?;
        let mut i = 0usize;
        while i + RECORD_HEADER_LEN <= chunk.len() {
            if chunk[i..i + 4] == magic {
                let at = pos + i as u64;
                if let Ok(header) = RecordHeader::decode(&chunk[i..i + RECORD_HEADER_LEN], at) {
                    if header.synced_len > damage_at {
                        return Ok(Some(at));
                    }
                }
            }
            i += 1;
        }
        // The next chunk starts at the first position not yet tried, so a header straddling
        // two chunks is still seen.
        pos += (chunk.len() + 1 - RECORD_HEADER_LEN) as u64;
    }
    Ok(None)
}

/// The recovered state of one segment.
pub(super) struct Recovered {
    pub(super) state: SegmentState,
    pub(super) file: Arc<dyn StorageFile>,
    pub(super) index: Vec<IndexEntry>,
}

pub(super) fn recover_segment(
    ctx: &mut Recovering<'_>,
    base: u64,
    is_last: bool,
) -> Result<Recovered> {
    let name = segment_file_name(base);
    let path = ctx.path(&name);
    let file = ctx
        .backend
        .open(&path, OpenMode::Existing)
        .map_err(ctx.io(IoOp::Open, &name))?;
    let len = file.len().map_err(ctx.io(IoOp::Len, &name))?;
    let len = check_segment_header(ctx, &*file, base, len, is_last)?;

    let loaded = load_index(ctx.backend, &ctx.path(&index_file_name(base)), base, len)?;
    let seal_wanted = !is_last;

    if ctx.config.verify_on_open == VerifyOnOpen::Tail {
        if let Some(found) = recover_tail(ctx, &file, base, len, is_last, loaded.as_ref())? {
            return Ok(found);
        }
    }

    // Full verification: scan every record, cross-checking the loaded index entries.
    let checked: Vec<IndexEntry> = loaded
        .as_ref()
        .map(|l| l.entries.clone())
        .unwrap_or_default();
    let known = loaded.is_some().then_some(checked.as_slice());
    let (scan, index_matches) = scan_segment(ctx, &*file, base, len, known)?;
    ctx.report.bytes_verified += scan.end_pos - SEGMENT_HEADER_LEN as u64;
    let end_pos = settle_damage(ctx, &file, &path, len, is_last, scan.damage.clone())?;
    debug_assert_eq!(end_pos, scan.end_pos);

    let index = if index_matches
        && checked
            .first()
            .is_some_and(|e| e.position == SEGMENT_HEADER_LEN as u64)
    {
        checked
    } else {
        scan.entries
    };
    let state = SegmentState {
        base,
        end: scan.end_seq,
        len: end_pos,
        records: scan.records,
        first_ts: scan.first_ts,
        max_ts: scan.max_ts,
        sealed: seal_wanted,
        owner: 0, // set by `open_shared` once the log has its id
    };
    finish_segment(ctx, file, state, index, loaded.as_ref())
}

/// Checks the segment header of `file` (segment `base`, `len` bytes) and returns the
/// segment's length. A header naming another base is corruption, and so is a missing or
/// undecodable one, except in the newest segment (`is_last`) when it is no longer than a
/// header: a crash while creating it leaves it short or zero-filled, with nothing in it ever
/// acknowledged, so the header is written again and synced (a torn tail in the report).
fn check_segment_header(
    ctx: &mut Recovering<'_>,
    file: &dyn StorageFile,
    base: u64,
    len: u64,
    is_last: bool,
) -> Result<u64> {
    let name = segment_file_name(base);
    let path = ctx.path(&name);
    let header_bytes = if len >= SEGMENT_HEADER_LEN as u64 {
        Some(read_exact(file, 0, SEGMENT_HEADER_LEN as u64).map_err(ctx.io(IoOp::Read, &name))?)
    } else {
        None
    };
    match header_bytes.as_deref().map(decode_segment_header) {
        Some(Ok(found)) if found == base => Ok(len),
        Some(Ok(_)) => Err(LogError::corrupt(path, 0, Corruption::NameMismatch)),
        // A crash while creating the newest segment leaves it short or zero-filled: nothing in
        // it was ever acknowledged. Rewrite it.
        _ if is_last && len <= SEGMENT_HEADER_LEN as u64 => {
            file.truncate(0).map_err(ctx.io(IoOp::Truncate, &name))?;
            file.append(&[&encode_segment_header(base)])
                .map_err(ctx.io(IoOp::Append, &name))?;
            file.sync().map_err(ctx.io(IoOp::Sync, &name))?;
            ctx.report.torn_tail = Some((path.clone(), 0, len));
            Ok(SEGMENT_HEADER_LEN as u64)
        }
        Some(Err(kind)) => Err(LogError::corrupt(path, 0, kind)),
        None => Err(LogError::corrupt(path, 0, Corruption::BadSegmentHeader)),
    }
}

/// Scans every record of segment `base` (`len` bytes of `file`) and tells whether `known`,
/// the entries of its loaded index (`None`: it has none), match what the scan found: each at
/// a record's start with that record's sequence number and timestamp, none past the last
/// good record. An I/O error is returned; damage is left in the scan for the caller.
fn scan_segment(
    ctx: &Recovering<'_>,
    file: &dyn StorageFile,
    base: u64,
    len: u64,
    known: Option<&[IndexEntry]>,
) -> Result<(Scan, bool)> {
    let mut pending = known.unwrap_or_default().iter().peekable();
    let mut index_matches = known.is_some();
    let scan = scan_records(
        file,
        SEGMENT_HEADER_LEN as u64,
        base,
        len,
        ctx.config.index_interval,
        None,
        |pos, header| {
            while let Some(entry) = pending.peek() {
                match entry.position.cmp(&pos) {
                    std::cmp::Ordering::Less => index_matches = false, // inside a record
                    std::cmp::Ordering::Equal => {
                        if entry.seq != header.seq || entry.timestamp != header.timestamp {
                            index_matches = false;
                        }
                    }
                    std::cmp::Ordering::Greater => break,
                }
                pending.next();
            }
        },
    )
    .map_err(ctx.io(IoOp::Read, &segment_file_name(base)))?;
    if pending.next().is_some() {
        index_matches = false; // entries past the last verified record
    }
    Ok((scan, index_matches))
}

/// Decides what a damaged record means and acts on it: a torn tail (or, with repair, interior
/// corruption) is truncated away; interior corruption otherwise refuses to open. Returns the
/// verified end position.
fn settle_damage(
    ctx: &mut Recovering<'_>,
    file: &Arc<dyn StorageFile>,
    path: &Path,
    len: u64,
    is_last: bool,
    damage: Option<(u64, Corruption)>,
) -> Result<u64> {
    let Some((at, kind)) = damage else {
        return Ok(len);
    };
    let io = |op| {
        let path = path.to_path_buf();
        move |e| LogError::io(op, path.clone(), e)
    };
    if is_last && zeros_from(&**file, at, len).map_err(io(IoOp::Read))? {
        cut_zero_tail(ctx, file, path, at, len)?;
        return Ok(at);
    }
    // Sealed segments were synced before their successor existed: they cannot be torn.
    let torn = is_last
        && find_durable_proof(&**file, at, len)
            .map_err(io(IoOp::Read))?
            .is_none();
    let kind = if is_last {
        kind
    } else if matches!(kind, Corruption::Truncated) {
        Corruption::SealedSegmentTail
    } else {
        kind
    };
    if torn {
        tracing::warn!(path = %path.display(), offset = at, cut = len - at, "truncating torn tail");
        ctx.report.torn_tail = Some((path.to_path_buf(), at, len - at));
    } else if ctx.config.repair {
        tracing::error!(path = %path.display(), offset = at, %kind, "repair: cutting a corrupt segment");
        ctx.report.repairs.push(Repair {
            path: path.to_path_buf(),
            offset: at,
            kind,
            dropped_bytes: len - at,
        });
    } else {
        return Err(LogError::corrupt(path, at, kind));
    }
    file.truncate(at).map_err(io(IoOp::Truncate))?;
    file.sync().map_err(io(IoOp::Sync))?;
    Ok(at)
}

/// True when every byte of `file` from `at` to `len` is zero: the active segment's
/// preallocated space (see [`LogConfig::preallocate`](crate::LogConfig::preallocate)), or
/// pages a crash lost before any byte of them reached the disk. No record starts there.
fn zeros_from(file: &dyn StorageFile, at: u64, len: u64) -> io::Result<bool> {
    const PIECE: u64 = 64 * 1024;
    let mut pos = at;
    let mut buf = vec![0u8; usize::try_from(PIECE.min(len.saturating_sub(at))).unwrap_or(0)];
    while pos < len {
        let n = usize::try_from((len - pos).min(PIECE)).unwrap_or(buf.len());
        file.read_at(pos, &mut buf[..n])?;
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        pos += n as u64;
    }
    Ok(true)
}

/// Cuts the active segment's zero tail at `at`, the end of its last record. Not a torn write:
/// it is only counted in [`RecoveryReport::zero_tail_bytes`](crate::RecoveryReport::zero_tail_bytes).
fn cut_zero_tail(
    ctx: &mut Recovering<'_>,
    file: &Arc<dyn StorageFile>,
    path: &Path,
    at: u64,
    len: u64,
) -> Result<()> {
    tracing::debug!(path = %path.display(), offset = at, cut = len - at, "cutting preallocated zeros");
    file.truncate(at)
        .map_err(|e| LogError::io(IoOp::Truncate, path, e))?;
    file.sync().map_err(|e| LogError::io(IoOp::Sync, path, e))?;
    ctx.report.zero_tail_bytes += len - at;
    Ok(())
}

/// Tail verification. Returns `None` when it cannot decide cheaply (no usable index, or damage
/// found): the caller then verifies the whole segment.
fn recover_tail(
    ctx: &mut Recovering<'_>,
    file: &Arc<dyn StorageFile>,
    base: u64,
    len: u64,
    is_last: bool,
    loaded: Option<&LoadedIndex>,
) -> Result<Option<Recovered>> {
    let Some(loaded) = loaded else {
        return Ok(None);
    };
    if loaded
        .entries
        .first()
        .is_none_or(|e| e.position != SEGMENT_HEADER_LEN as u64 || e.seq != base)
    {
        return Ok(None);
    }
    // A sealed segment whose seal matches its file is trusted as is.
    if !is_last {
        if let Some(seal) = loaded.seal {
            if seal.position == len {
                let Some(records) = count_records(&**file, SEGMENT_HEADER_LEN as u64, len)
                    .map_err(ctx.io(IoOp::Read, &segment_file_name(base)))?
                else {
                    return Ok(None);
                };
                let state = SegmentState {
                    base,
                    end: seal.seq,
                    len,
                    records,
                    first_ts: loaded.entries.first().map(|e| e.timestamp),
                    max_ts: Some(seal.timestamp),
                    sealed: true,
                    owner: 0,
                };
                return Ok(Some(Recovered {
                    state,
                    file: Arc::clone(file),
                    index: loaded.entries.clone(),
                }));
            }
        }
    }
    scan_from_last_entry(ctx, file, base, len, is_last, loaded)
}

/// The second half of tail verification: scans from the last index entry that points at the
/// record it claims to the end of the file, and counts the records before it. `None` (the
/// caller verifies the whole segment) when no entry does, when the scan finds damage other
/// than a zero tail of the newest segment (which is cut off here), when the scan finds no
/// record past that entry, or when the records before it cannot be counted.
fn scan_from_last_entry(
    ctx: &mut Recovering<'_>,
    file: &Arc<dyn StorageFile>,
    base: u64,
    len: u64,
    is_last: bool,
    loaded: &LoadedIndex,
) -> Result<Option<Recovered>> {
    let name = segment_file_name(base);
    let Some((usable, last)) = last_matching_entry(ctx, &**file, base, len, loaded)? else {
        return Ok(None);
    };
    let scan = scan_records(
        &**file,
        last.position,
        last.seq,
        len,
        ctx.config.index_interval,
        Some(last.position),
        |_, _| {},
    )
    .map_err(ctx.io(IoOp::Read, &name))?;
    let mut len = len;
    if let Some((at, _)) = scan.damage {
        // Only a zero tail (preallocated space) is settled here; other damage goes through
        // the full scan, which tells a torn tail from corruption.
        if !(is_last && zeros_from(&**file, at, len).map_err(ctx.io(IoOp::Read, &name))?) {
            return Ok(None);
        }
        cut_zero_tail(ctx, file, &ctx.path(&name), at, len)?;
        len = at;
    }
    if scan.end_pos == last.position {
        return Ok(None);
    }
    let Some(before) = count_records(&**file, SEGMENT_HEADER_LEN as u64, last.position)
        .map_err(ctx.io(IoOp::Read, &name))?
    else {
        return Ok(None);
    };
    ctx.report.bytes_verified += scan.end_pos - last.position;
    let mut index = usable;
    index.extend(scan.entries);
    let state = SegmentState {
        base,
        end: scan.end_seq,
        len,
        records: before + scan.records,
        first_ts: index.first().map(|e| e.timestamp),
        max_ts: scan.max_ts,
        sealed: !is_last,
        owner: 0,
    };
    finish_segment(ctx, Arc::clone(file), state, index, Some(loaded)).map(Some)
}

/// The loaded index entries that lie within the file's `len` bytes, and the last of them,
/// provided it points at the start of the record it names (same sequence number and
/// timestamp); `None` otherwise.
fn last_matching_entry(
    ctx: &Recovering<'_>,
    file: &dyn StorageFile,
    base: u64,
    len: u64,
    loaded: &LoadedIndex,
) -> Result<Option<(Vec<IndexEntry>, IndexEntry)>> {
    let usable: Vec<IndexEntry> = loaded
        .entries
        .iter()
        .copied()
        .filter(|e| e.position + RECORD_HEADER_LEN as u64 <= len)
        .collect();
    let Some(last) = usable.last().copied() else {
        return Ok(None);
    };
    let raw = read_exact(file, last.position, RECORD_HEADER_LEN as u64)
        .map_err(ctx.io(IoOp::Read, &segment_file_name(base)))?;
    match RecordHeader::decode(&raw, last.position) {
        Ok(h) if h.seq == last.seq && h.timestamp == last.timestamp => Ok(Some((usable, last))),
        _ => Ok(None),
    }
}

/// Rewrites the index file when it differs from what recovery established.
fn finish_segment(
    ctx: &mut Recovering<'_>,
    file: Arc<dyn StorageFile>,
    state: SegmentState,
    index: Vec<IndexEntry>,
    loaded: Option<&LoadedIndex>,
) -> Result<Recovered> {
    let seal = state.sealed.then(|| IndexEntry {
        seq: state.end,
        timestamp: state.max_ts.unwrap_or(0),
        position: state.len,
        kind: IndexKind::Seal,
    });
    let on_disk_ok = loaded.is_some_and(|l| l.entries == index && l.seal == seal);
    if !on_disk_ok {
        write_index(ctx.backend, ctx.dir, state.base, &index, seal)?;
        ctx.report.indexes_rebuilt.push(state.base);
    }
    Ok(Recovered { state, file, index })
}
