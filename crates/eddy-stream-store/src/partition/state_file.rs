//! The partition `state` file: uid, purge generation and offset frontier, replaced atomically,
//! and the commit hook that keeps the frontier ahead of acknowledged offsets.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use eddy_log::format::FORMAT_VERSION;
use eddy_log::{lock, write_atomic, CommitHook, Corruption, LogError, StorageBackend};

/// Name of the partition state file.
pub const STATE_FILE: &str = "state";
const STATE_MAGIC: [u8; 8] = *b"EDDYPST\0";
pub(super) const STATE_LEN: usize = 48;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StateRecord {
    pub(super) uid: u64,
    pub(super) generation: u64,
    pub(super) frontier: u64,
}

pub(super) fn encode_state(s: &StateRecord) -> [u8; STATE_LEN] {
    let mut out = [0u8; STATE_LEN];
    out[0..8].copy_from_slice(&STATE_MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[16..24].copy_from_slice(&s.uid.to_le_bytes());
    out[24..32].copy_from_slice(&s.generation.to_le_bytes());
    out[32..40].copy_from_slice(&s.frontier.to_le_bytes());
    let crc = crc32c::crc32c(&out[0..40]);
    out[40..44].copy_from_slice(&crc.to_le_bytes());
    out
}

pub(super) fn decode_state(bytes: &[u8]) -> std::result::Result<StateRecord, Corruption> {
    if bytes.len() != STATE_LEN {
        return Err(Corruption::Truncated);
    }
    let u64_at = |at: usize| {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(raw)
    };
    let u32_at = |at: usize| {
        let mut raw = [0u8; 4];
        raw.copy_from_slice(&bytes[at..at + 4]);
        u32::from_le_bytes(raw)
    };
    if bytes[0..8] != STATE_MAGIC || crc32c::crc32c(&bytes[0..40]) != u32_at(40) {
        return Err(Corruption::FileChecksum);
    }
    if u32_at(8) != FORMAT_VERSION {
        return Err(Corruption::UnknownVersion(u32_at(8)));
    }
    Ok(StateRecord {
        uid: u64_at(16),
        generation: u64_at(24),
        frontier: u64_at(32),
    })
}

/// The partition's state file and the frontier gate the log calls before acknowledging.
#[derive(Debug)]
pub(super) struct StateFile {
    pub(super) backend: Arc<dyn StorageBackend>,
    pub(super) dir: PathBuf,
    pub(super) uid: u64,
    pub(super) record: Mutex<StateRecord>,
    /// Frontier value on disk (mirrors `record.frontier`, readable without the lock).
    pub(super) persisted: AtomicU64,
    pub(super) reserve: u64,
}

impl StateFile {
    pub(super) fn lock(&self) -> MutexGuard<'_, StateRecord> {
        lock(&self.record)
    }

    /// Replaces the file with `record` (see [`write_atomic`]).
    pub(super) fn write(&self, record: StateRecord) -> Result<(), LogError> {
        let mut current = self.lock();
        write_atomic(
            &*self.backend,
            &self.dir,
            STATE_FILE,
            &encode_state(&record),
        )?;
        *current = record;
        self.persisted.store(record.frontier, Ordering::Release);
        Ok(())
    }
}

impl CommitHook for StateFile {
    fn before_ack(&self, end_seq: u64) -> io::Result<()> {
        if end_seq <= self.persisted.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut record = *self.lock();
        record.frontier = end_seq.saturating_add(self.reserve);
        self.write(record).map_err(io::Error::other)
    }
}
