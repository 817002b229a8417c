//! The index `MANIFEST`: the runs that make the index and the log checkpoint they cover.

use super::format::{le_u32, le_u64, INDEX_VERSION, MANIFEST_MAGIC, MAX_RUNS};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Manifest {
    pub(super) checkpoint: u64,
    pub(super) next_id: u64,
    pub(super) runs: Vec<u64>,
}

pub(super) fn encode_manifest(m: &Manifest) -> Vec<u8> {
    let mut b = Vec::with_capacity(36 + m.runs.len() * 8);
    b.extend_from_slice(&MANIFEST_MAGIC);
    b.extend_from_slice(&INDEX_VERSION.to_le_bytes());
    b.extend_from_slice(&(m.runs.len() as u32).to_le_bytes());
    b.extend_from_slice(&m.checkpoint.to_le_bytes());
    b.extend_from_slice(&m.next_id.to_le_bytes());
    for id in &m.runs {
        b.extend_from_slice(&id.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

pub(super) fn decode_manifest(b: &[u8]) -> Option<Manifest> {
    if b.len() < 36 || b[0..8] != MANIFEST_MAGIC || le_u32(&b[8..]) != INDEX_VERSION {
        return None;
    }
    let count = le_u32(&b[12..]) as usize;
    if count > MAX_RUNS || b.len() != 32 + count * 8 + 4 {
        return None;
    }
    if crc32c::crc32c(&b[..b.len() - 4]) != le_u32(&b[b.len() - 4..]) {
        return None;
    }
    let runs: Vec<u64> = (0..count).map(|i| le_u64(&b[32 + i * 8..])).collect();
    let next_id = le_u64(&b[24..]);
    if runs.iter().any(|id| *id >= next_id) {
        return None;
    }
    Some(Manifest {
        checkpoint: le_u64(&b[16..]),
        next_id,
        runs,
    })
}
