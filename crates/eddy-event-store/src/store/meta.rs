//! The immutable settings file `events/META`: shard count, routing rule, reserved coordinator
//! and the dictionary's BLAKE3, fixed when the store is created and checked at every open.
//!
//! ```text
//! 0  8  magic "EDDYEVM\0"     16  8  routing rule code u64     28 32  dictionary BLAKE3
//! 8  4  version u32 (1)        24  1  reserved coordinator      60  4  CRC-32C of 0..60
//! 12 4  shard count u32
//! ```

use std::path::Path;

use eddy_log::{write_atomic, Corruption, IoOp, LogError, OpenMode, StorageBackend};

use crate::error::{EventStoreError, Refusal, Result};

use super::config::EventStoreConfig;

/// Name of the immutable settings file.
pub const META_FILE: &str = "META";
const META_MAGIC: [u8; 8] = *b"EDDYEVM\0";
pub(super) const META_LEN: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Meta {
    pub(super) num_shards: u32,
    pub(super) routing: u64,
    pub(super) reserve: bool,
    pub(super) dictionary: [u8; 32],
}

pub(super) fn encode_meta(m: &Meta) -> [u8; META_LEN] {
    let mut b = [0u8; META_LEN];
    b[0..8].copy_from_slice(&META_MAGIC);
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&m.num_shards.to_le_bytes());
    b[16..24].copy_from_slice(&m.routing.to_le_bytes());
    b[24] = u8::from(m.reserve);
    b[28..60].copy_from_slice(&m.dictionary);
    let crc = crc32c::crc32c(&b[0..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    b
}

pub(super) fn decode_meta(b: &[u8]) -> Option<Meta> {
    if b.len() != META_LEN || b[0..8] != META_MAGIC {
        return None;
    }
    let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    if u32_at(8) != 1 || crc32c::crc32c(&b[0..60]) != u32_at(60) {
        return None;
    }
    let mut routing = [0u8; 8];
    routing.copy_from_slice(&b[16..24]);
    let mut dictionary = [0u8; 32];
    dictionary.copy_from_slice(&b[28..60]);
    Some(Meta {
        num_shards: u32_at(12),
        routing: u64::from_le_bytes(routing),
        reserve: b[24] != 0,
        dictionary,
    })
}

pub(super) fn read_small(
    backend: &dyn StorageBackend,
    path: &Path,
    max: u64,
) -> Result<Option<Vec<u8>>> {
    match backend.open(path, OpenMode::Existing) {
        Ok(f) => {
            let len = f
                .len()
                .map_err(|e| EventStoreError::io(IoOp::Len, path, e))?;
            if len > max {
                return Err(LogError::TooLarge {
                    what: "event store settings",
                    size: len,
                    limit: max,
                    path: path.to_path_buf(),
                }
                .into());
            }
            let mut b = vec![0u8; len as usize];
            f.read_at(0, &mut b)
                .map_err(|e| EventStoreError::io(IoOp::Read, path, e))?;
            Ok(Some(b))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(EventStoreError::io(IoOp::Open, path, e)),
    }
}

impl Meta {
    /// The settings `config` asks for (the dictionary by its BLAKE3; all zeros for none).
    pub(super) fn wanted(config: &EventStoreConfig) -> Meta {
        let dictionary = config
            .dictionary
            .as_ref()
            .map_or([0u8; 32], |d| *blake3::hash(d).as_bytes());
        Meta {
            num_shards: config.num_shards,
            routing: config.routing_rule.code(),
            reserve: config.reserve_coordinator_shard,
            dictionary,
        }
    }
}

/// Creates `<root>/META` with `wanted` when there is none (`true`), else checks that the
/// stored settings are `wanted` (`false`): they are fixed when the store is created, and the
/// first that differs (in file order) is refused.
pub(super) fn create_or_check_meta(
    backend: &dyn StorageBackend,
    root: &Path,
    wanted: &Meta,
) -> Result<bool> {
    let meta_path = root.join(META_FILE);
    let Some(bytes) = read_small(backend, &meta_path, 4096)? else {
        write_atomic(backend, root, META_FILE, &encode_meta(wanted))?;
        return Ok(true);
    };
    let stored = decode_meta(&bytes)
        .ok_or_else(|| EventStoreError::corrupt(&meta_path, 0, Corruption::FileChecksum))?;
    let mismatch = |field, stored: u64, requested: u64| {
        Err(Refusal::ImmutableConfig {
            field,
            stored,
            requested,
        }
        .into())
    };
    if stored.num_shards != wanted.num_shards {
        return mismatch(
            "num_shards",
            u64::from(stored.num_shards),
            u64::from(wanted.num_shards),
        );
    }
    if stored.routing != wanted.routing {
        return mismatch("routing_rule", stored.routing, wanted.routing);
    }
    if stored.reserve != wanted.reserve {
        return mismatch(
            "reserve_coordinator_shard",
            u64::from(stored.reserve),
            u64::from(wanted.reserve),
        );
    }
    if stored.dictionary != wanted.dictionary {
        return Err(Refusal::DictionaryMismatch.into());
    }
    Ok(false)
}
