//! Metadata snapshots: the whole state, written every `snapshot_every_ops` operations by the
//! applier (atomically, see [`write_atomic`]), read at open before the log is replayed.

use std::io;
use std::path::Path;

use eddy_log::{read_lock, write_atomic, Corruption, IoOp, LogError, OpenMode, StorageBackend};

use crate::error::{Result, StreamStoreError};
use crate::metadata::{decode_state, encode_state, MetadataState, MAX_SNAPSHOT_BYTES};

use super::metadata_log::MetaShared;

/// Directory of the metadata log.
pub const METADATA_DIR: &str = "metadata";
/// Snapshot file name (inside [`METADATA_DIR`]).
pub const SNAPSHOT_FILE: &str = "snapshot";
const SNAPSHOT_MAGIC: [u8; 8] = *b"EDDYSNAP";
const SNAPSHOT_HEADER_LEN: usize = 40;

/// A snapshot file's bytes: the header (see the module docs of `store`) and the state.
pub(crate) fn encode_snapshot(next_seq: u64, state: &MetadataState) -> Result<Vec<u8>> {
    let payload = encode_state(state).map_err(|source| StreamStoreError::Encoding {
        action: "encode",
        path: Path::new(METADATA_DIR).join(SNAPSHOT_FILE),
        source,
    })?;
    let mut out = Vec::with_capacity(SNAPSHOT_HEADER_LEN + payload.len());
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.extend_from_slice(&eddy_log::format::FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&next_seq.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    let header_crc = crc32c::crc32c(&out[0..36]);
    out.extend_from_slice(&header_crc.to_le_bytes());
    debug_assert_eq!(out.len(), SNAPSHOT_HEADER_LEN);
    out.extend_from_slice(&payload);
    Ok(out)
}

pub(super) fn read_snapshot(backend: &dyn StorageBackend) -> Result<Option<(u64, MetadataState)>> {
    let path = Path::new(METADATA_DIR).join(SNAPSHOT_FILE);
    Ok(read_snapshot_with_trailer(backend, &path, 0)?.map(|(next, state, _)| (next, state)))
}

/// Reads a snapshot file at `path` (`None` when there is none): the header and state of
/// [`encode_snapshot`], followed by `trailer` more bytes the caller checks itself (the
/// replicated metadata's term and checksum). Returns the snapshot's next sequence number, its
/// state and the whole file's bytes.
pub(crate) fn read_snapshot_with_trailer(
    backend: &dyn StorageBackend,
    path: &Path,
    trailer: usize,
) -> Result<Option<(u64, MetadataState, Vec<u8>)>> {
    let file = match backend.open(path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StreamStoreError::io(IoOp::Open, path, e)),
    };
    let len = file
        .len()
        .map_err(|e| StreamStoreError::io(IoOp::Len, path, e))?;
    let limit = (MAX_SNAPSHOT_BYTES + SNAPSHOT_HEADER_LEN + trailer) as u64;
    if len > limit {
        return Err(LogError::TooLarge {
            what: "metadata snapshot",
            size: len,
            limit,
            path: path.to_path_buf(),
        }
        .into());
    }
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
    file.read_at(0, &mut bytes)
        .map_err(|e| StreamStoreError::io(IoOp::Read, path, e))?;
    let (next_seq, state) = decode_snapshot(path, &bytes, trailer)?;
    Ok(Some((next_seq, state, bytes)))
}

/// Decodes a whole snapshot (`bytes`, from a file at `path` or a peer) whose last `trailer`
/// bytes are the caller's: its next sequence number and state.
pub(crate) fn decode_snapshot(
    path: &Path,
    bytes: &[u8],
    trailer: usize,
) -> Result<(u64, MetadataState)> {
    // An unreadable snapshot is not a fresh store: refuse rather than start empty.
    if bytes.len() < SNAPSHOT_HEADER_LEN + trailer {
        return Err(StreamStoreError::corrupt(path, 0, Corruption::Truncated));
    }
    let header = &bytes[..SNAPSHOT_HEADER_LEN];
    let u32_at = |at: usize| {
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let u64_at = |at: usize| {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&header[at..at + 8]);
        u64::from_le_bytes(raw)
    };
    if header[0..8] != SNAPSHOT_MAGIC || crc32c::crc32c(&header[0..36]) != u32_at(36) {
        return Err(StreamStoreError::corrupt(path, 0, Corruption::FileChecksum));
    }
    if u32_at(8) != eddy_log::format::FORMAT_VERSION {
        return Err(StreamStoreError::corrupt(
            path,
            8,
            Corruption::UnknownVersion(u32_at(8)),
        ));
    }
    let next_seq = u64_at(16);
    let payload_len = u64_at(24);
    if payload_len != (bytes.len() - SNAPSHOT_HEADER_LEN - trailer) as u64 {
        return Err(StreamStoreError::corrupt(path, 0, Corruption::Truncated));
    }
    let payload = &bytes[SNAPSHOT_HEADER_LEN..bytes.len() - trailer];
    if crc32c::crc32c(payload) != u32_at(32) {
        return Err(StreamStoreError::corrupt(
            path,
            SNAPSHOT_HEADER_LEN as u64,
            Corruption::FileChecksum,
        ));
    }
    let state = decode_state(payload).map_err(|source| StreamStoreError::Encoding {
        action: "decode",
        path: path.to_path_buf(),
        source,
    })?;
    Ok((next_seq, state))
}

pub(super) fn write_snapshot(
    meta: &MetaShared,
    backend: &dyn StorageBackend,
    next_seq: u64,
) -> Result<()> {
    let bytes = {
        let durable = read_lock(&meta.durable);
        encode_snapshot(next_seq, &durable)?
    };
    write_atomic(backend, Path::new(METADATA_DIR), SNAPSHOT_FILE, &bytes)?;
    if let Some(log) = meta.log.get() {
        log.delete_sealed_while(|seg| seg.end <= next_seq)?;
    }
    Ok(())
}
