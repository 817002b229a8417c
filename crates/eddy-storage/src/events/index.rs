//! The on-disk per-aggregate index of one shard: a small log-structured merge tree whose
//! entries are derived from the shard's log (so it can always be rebuilt from it).
//!
//! * The **memtable** holds entries of committed records since the last flush (a hash map
//!   with order kept only where scans need it, byte-budgeted: see `events/memtable.rs`).
//!   When it exceeds its budget it is frozen and a background thread writes it as an
//!   immutable sorted **run** file, then records the run and the *checkpoint* (the log
//!   sequence number up to which runs hold everything) in the `MANIFEST`.
//! * Runs are merged newest-wins by a binary-counter policy (a run is merged into its older
//!   neighbour once it is at least half its size), so a shard has `O(log n)` runs. Merges run
//!   on their own thread: a flush never waits for a merge, and appliers (the commit path)
//!   wait only when two memtables are already frozen (back-pressure, bounded memory).
//! * Each run keeps in memory only its sparse block index (first key of every 8 KiB block)
//!   and a split-block bloom filter (~10 bits per key) over its point keys (aggregates, client
//!   marks, schemas) and the aggregate prefix of its version keys: a lookup of an aggregate
//!   or a client that never wrote touches no disk, and a version scan reads only runs that
//!   hold that aggregate. Data blocks are read on demand, verified (CRC-32C), and kept in the
//!   shared byte-budgeted [`Cache`].
//!
//! Files in an index directory:
//!
//! ```text
//! MANIFEST   magic "EDDYEMF\0" | version u32 | count u32 | checkpoint u64 | next run id u64
//!            | run ids u64 × count | CRC-32C u32 of everything before it
//! run-<id:020>.eix
//!   header   magic "EDDYEIX\0" | version u32 | reserved u32 | run id u64 | CRC u32 | 0 u32
//!   blocks   len u32 | CRC-32C u32 | entries: shared u8 | suffix len u8 | value len u32
//!            | key suffix | value          (keys sorted; `shared` bytes from the previous key)
//!   index    per block: key len u8 | first key | offset u64 | len u32
//!   bloom    32-byte blocks of eight u32 words
//!   footer   magic "EIXFOOT\0" | index off u64 | index len u64 | bloom off u64
//!            | bloom len u64 | entries u64 | index CRC u32 | bloom CRC u32 | CRC u32 | 0 u32
//! ```
//!
//! Every file is written to a temporary name, synced and renamed; the manifest is replaced
//! last. A missing or damaged manifest or run means the index is rebuilt from the log.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};

use bytes::Bytes;
use xxhash_rust::xxh3::xxh3_64;

use crate::cache::{next_owner_id, Cache};
use crate::error::{Corruption, IoOp, Result, StorageError};
use crate::file::{OpenMode, StorageBackend, StorageFile};

use super::memtable::Memtable;
use super::state::{bloom_key, is_point_key, KIND_VERSION, MAX_KEY_LEN, VERSION_PREFIX_LEN};

/// Target size of a run's data block.
pub const BLOCK_TARGET: usize = 8 * 1024;
/// Largest data block accepted when reading (a block ends after the entry crossing the target).
const MAX_BLOCK_LEN: u64 = 4 * 1024 * 1024;
/// Largest index value accepted when reading.
const MAX_VALUE_LEN: usize = 2 * 1024 * 1024;
/// Bloom bits per point key (about 0.8 % false positives with 8 bits set per key).
const BLOOM_BITS_PER_KEY: u64 = 10;
/// At most this many frozen memtables wait for their flush; appliers wait beyond it.
const MAX_FROZEN: usize = 2;
/// Bytes charged per memtable entry on top of its key and value.
const ENTRY_OVERHEAD: u64 = 64;
const RUN_MAGIC: [u8; 8] = *b"EDDYEIX\0";
const FOOTER_MAGIC: [u8; 8] = *b"EIXFOOT\0";
const MANIFEST_MAGIC: [u8; 8] = *b"EDDYEMF\0";
const INDEX_VERSION: u32 = 1;
const RUN_HEADER_LEN: usize = 32;
const FOOTER_LEN: usize = 64;
/// Name of the manifest file.
pub const MANIFEST: &str = "MANIFEST";
/// Most runs a manifest may list.
const MAX_RUNS: usize = 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

fn run_file_name(id: u64) -> String {
    format!("run-{id:020}.eix")
}

fn parse_run_name(name: &str) -> Option<u64> {
    name.strip_prefix("run-")?
        .strip_suffix(".eix")?
        .parse()
        .ok()
}

// ------------------------------------------------------------------------------------------------
// Bloom filter (split-block: one 256-bit block per key, 8 bits set).

const SALT: [u32; 8] = [
    0x47b6_137b,
    0x4497_4d91,
    0x8824_ad5b,
    0xa2b7_289d,
    0x7054_95c7,
    0x2df1_424b,
    0x9efc_4947,
    0x5c6b_fb31,
];

/// A split-block bloom filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bloom {
    words: Vec<u32>,
}

impl Bloom {
    pub(crate) fn with_capacity(keys: u64) -> Self {
        let blocks = if keys == 0 {
            0
        } else {
            (keys * BLOOM_BITS_PER_KEY).div_ceil(256).max(1)
        };
        Bloom {
            words: vec![0; usize::try_from(blocks * 8).unwrap_or(usize::MAX)],
        }
    }

    fn block_and_lo(&self, key: &[u8]) -> Option<(usize, u32)> {
        let blocks = (self.words.len() / 8) as u64;
        if blocks == 0 {
            return None;
        }
        let h = xxh3_64(key);
        let block = (((h >> 32) * blocks) >> 32) as usize;
        Some((block, h as u32))
    }

    pub(crate) fn insert(&mut self, key: &[u8]) {
        if let Some((block, lo)) = self.block_and_lo(key) {
            for (i, salt) in SALT.iter().enumerate() {
                self.words[block * 8 + i] |= 1 << (lo.wrapping_mul(*salt) >> 27);
            }
        }
    }

    pub(crate) fn may_contain(&self, key: &[u8]) -> bool {
        let Some((block, lo)) = self.block_and_lo(key) else {
            return false;
        };
        SALT.iter()
            .enumerate()
            .all(|(i, salt)| self.words[block * 8 + i] & (1 << (lo.wrapping_mul(*salt) >> 27)) != 0)
    }

    fn bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn from_bytes(b: &[u8]) -> Option<Self> {
        if !b.len().is_multiple_of(32) {
            return None;
        }
        Some(Bloom {
            words: b.chunks_exact(4).map(le_u32).collect(),
        })
    }
}

// ------------------------------------------------------------------------------------------------
// Runs.

#[derive(Debug)]
struct BlockMeta {
    first_key: Box<[u8]>,
    offset: u64,
    len: u32,
}

/// An immutable sorted run.
#[derive(Debug)]
pub(crate) struct Run {
    id: u64,
    cache_id: u64,
    path: PathBuf,
    file: Arc<dyn StorageFile>,
    blocks: Vec<BlockMeta>,
    bloom: Bloom,
    entries: u64,
    bytes: u64,
}

/// Decoded index entries.
type Entries = Vec<(Vec<u8>, Bytes)>;

/// Walks a block's entries in order, rebuilding each key in one reused buffer, and calls
/// `visit(key, value range)` until it returns false. Verifies the entry bounds and that keys
/// strictly increase.
fn walk_block(
    block: &[u8],
    mut visit: impl FnMut(&[u8], std::ops::Range<usize>) -> bool,
) -> std::result::Result<(), Corruption> {
    let mut pos = 0usize;
    let mut key: Vec<u8> = Vec::with_capacity(MAX_KEY_LEN);
    let mut first = true;
    while pos < block.len() {
        if block.len() - pos < 6 {
            return Err(Corruption::Truncated);
        }
        let shared = block[pos] as usize;
        let suffix = block[pos + 1] as usize;
        let vlen = le_u32(&block[pos + 2..]) as usize;
        pos += 6;
        if shared > key.len() || shared + suffix > MAX_KEY_LEN || vlen > MAX_VALUE_LEN {
            return Err(Corruption::BadHeaderField("index entry"));
        }
        if block.len() - pos < suffix + vlen {
            return Err(Corruption::Truncated);
        }
        let tail = &block[pos..pos + suffix];
        // Same first `shared` bytes: the new key is larger iff its tail is.
        if !first && tail <= &key[shared..] {
            return Err(Corruption::BadHeaderField("index keys out of order"));
        }
        first = false;
        key.truncate(shared);
        key.extend_from_slice(tail);
        pos += suffix;
        let value = pos..pos + vlen;
        pos += vlen;
        if !visit(&key, value) {
            return Ok(());
        }
    }
    Ok(())
}

/// Parses a block's entries (values are slices of `block`).
fn parse_block(block: &Bytes) -> std::result::Result<Entries, Corruption> {
    let mut out = Vec::new();
    walk_block(block, |k, v| {
        out.push((k.to_vec(), block.slice(v)));
        true
    })?;
    Ok(out)
}

impl Run {
    fn corrupt(&self, offset: u64, kind: Corruption) -> StorageError {
        StorageError::corrupt(self.path.clone(), offset, kind)
    }

    /// Reads and verifies block `i`'s bytes (through the cache when `cached`).
    fn raw_block(&self, cache: &Cache, i: usize, cached: bool) -> Result<Bytes> {
        let meta = &self.blocks[i];
        let key = (self.cache_id, meta.offset);
        if cached {
            if let Some(raw) = cache.get_block(key) {
                return Ok(raw);
            }
        }
        let mut buf = vec![0u8; 8 + meta.len as usize];
        self.file
            .read_at(meta.offset, &mut buf)
            .map_err(|e| StorageError::io(IoOp::Read, &self.path, e))?;
        if le_u32(&buf) != meta.len || crc32c::crc32c(&buf[8..]) != le_u32(&buf[4..]) {
            return Err(self.corrupt(meta.offset, Corruption::PayloadChecksum));
        }
        let raw = Bytes::from(buf).slice(8..);
        if cached {
            cache.insert_block(key, raw.clone());
        }
        Ok(raw)
    }

    /// Reads, verifies and parses block `i`.
    fn block(&self, cache: &Cache, i: usize, cached: bool) -> Result<Entries> {
        let raw = self.raw_block(cache, i, cached)?;
        parse_block(&raw).map_err(|k| self.corrupt(self.blocks[i].offset, k))
    }

    /// The block that may hold `key` (the last whose first key is at or below it).
    fn block_for(&self, key: &[u8]) -> Option<usize> {
        let i = self.blocks.partition_point(|b| &*b.first_key <= key);
        i.checked_sub(1)
    }

    fn get(&self, cache: &Cache, key: &[u8]) -> Result<Option<Bytes>> {
        if is_point_key(key) && !self.bloom.may_contain(key) {
            return Ok(None);
        }
        let Some(i) = self.block_for(key) else {
            return Ok(None);
        };
        let raw = self.raw_block(cache, i, true)?;
        let mut found = None;
        walk_block(&raw, |k, v| match k.cmp(key) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Equal => {
                found = Some(raw.slice(v));
                false
            }
            std::cmp::Ordering::Greater => false,
        })
        .map_err(|kind| self.corrupt(self.blocks[i].offset, kind))?;
        Ok(found)
    }

    /// Up to `limit` entries in `[start, end)`.
    fn scan(
        &self,
        cache: &Cache,
        start: &[u8],
        end: &[u8],
        limit: usize,
        out: &mut Vec<(Vec<u8>, Bytes)>,
    ) -> Result<()> {
        // A scan within one aggregate's versions skips a run whose bloom rules it out.
        if start.first() == Some(&KIND_VERSION)
            && start.len() >= VERSION_PREFIX_LEN
            && end.len() >= VERSION_PREFIX_LEN
            && start[..VERSION_PREFIX_LEN] == end[..VERSION_PREFIX_LEN]
            && !self.bloom.may_contain(&start[..VERSION_PREFIX_LEN])
        {
            return Ok(());
        }
        let mut i = self.block_for(start).unwrap_or(0);
        let mut taken = 0;
        while i < self.blocks.len() && taken < limit {
            if &*self.blocks[i].first_key >= end {
                break;
            }
            let raw = self.raw_block(cache, i, true)?;
            let mut done = false;
            walk_block(&raw, |k, v| {
                if k < start {
                    return true;
                }
                if k >= end || taken >= limit {
                    done = true;
                    return false;
                }
                out.push((k.to_vec(), raw.slice(v)));
                taken += 1;
                true
            })
            .map_err(|kind| self.corrupt(self.blocks[i].offset, kind))?;
            if done {
                return Ok(());
            }
            i += 1;
        }
        Ok(())
    }

    fn open(backend: &dyn StorageBackend, dir: &Path, id: u64) -> Result<Run> {
        let path = dir.join(run_file_name(id));
        let file = backend
            .open(&path, OpenMode::Existing)
            .map_err(|e| StorageError::io(IoOp::Open, &path, e))?;
        let len = file
            .len()
            .map_err(|e| StorageError::io(IoOp::Len, &path, e))?;
        let bad = |at: u64, kind| StorageError::corrupt(path.clone(), at, kind);
        if len < (RUN_HEADER_LEN + FOOTER_LEN) as u64 {
            return Err(bad(0, Corruption::Truncated));
        }
        let read = |at: u64, n: u64| -> Result<Vec<u8>> {
            let mut buf = vec![0u8; usize::try_from(n).unwrap_or(usize::MAX)];
            file.read_at(at, &mut buf)
                .map_err(|e| StorageError::io(IoOp::Read, &path, e))?;
            Ok(buf)
        };
        let header = read(0, RUN_HEADER_LEN as u64)?;
        if header[0..8] != RUN_MAGIC
            || crc32c::crc32c(&header[0..24]) != le_u32(&header[24..])
            || le_u32(&header[8..]) != INDEX_VERSION
            || le_u64(&header[16..]) != id
        {
            return Err(bad(0, Corruption::BadSegmentHeader));
        }
        let footer_at = len - FOOTER_LEN as u64;
        let f = read(footer_at, FOOTER_LEN as u64)?;
        if f[0..8] != FOOTER_MAGIC || crc32c::crc32c(&f[0..56]) != le_u32(&f[56..]) {
            return Err(bad(footer_at, Corruption::FileChecksum));
        }
        let (index_off, index_len, bloom_off, bloom_len, entries) = (
            le_u64(&f[8..]),
            le_u64(&f[16..]),
            le_u64(&f[24..]),
            le_u64(&f[32..]),
            le_u64(&f[40..]),
        );
        let in_file = |off: u64, n: u64| {
            off >= RUN_HEADER_LEN as u64 && off.checked_add(n).is_some_and(|e| e <= footer_at)
        };
        if !in_file(index_off, index_len) || !in_file(bloom_off, bloom_len) {
            return Err(bad(footer_at, Corruption::BadHeaderField("run footer")));
        }
        let index = read(index_off, index_len)?;
        if crc32c::crc32c(&index) != le_u32(&f[48..]) {
            return Err(bad(index_off, Corruption::FileChecksum));
        }
        let bloom_bytes = read(bloom_off, bloom_len)?;
        if crc32c::crc32c(&bloom_bytes) != le_u32(&f[52..]) {
            return Err(bad(bloom_off, Corruption::FileChecksum));
        }
        let bloom = Bloom::from_bytes(&bloom_bytes)
            .ok_or_else(|| bad(bloom_off, Corruption::BadHeaderField("bloom length")))?;
        let mut blocks: Vec<BlockMeta> = Vec::new();
        let mut pos = 0usize;
        while pos < index.len() {
            let klen = index[pos] as usize;
            if klen == 0 || klen > MAX_KEY_LEN || index.len() - pos < 1 + klen + 12 {
                return Err(bad(index_off, Corruption::BadHeaderField("block index")));
            }
            let first_key: Box<[u8]> = index[pos + 1..pos + 1 + klen].into();
            let offset = le_u64(&index[pos + 1 + klen..]);
            let blen = le_u32(&index[pos + 9 + klen..]);
            pos += 1 + klen + 12;
            let ordered = blocks.last().is_none_or(|p| {
                p.first_key < first_key && p.offset + 8 + u64::from(p.len) <= offset
            });
            if !ordered
                || offset < RUN_HEADER_LEN as u64
                || u64::from(blen) > MAX_BLOCK_LEN
                || offset + 8 + u64::from(blen) > index_off
            {
                return Err(bad(index_off, Corruption::BadHeaderField("block index")));
            }
            blocks.push(BlockMeta {
                first_key,
                offset,
                len: blen,
            });
        }
        Ok(Run {
            id,
            cache_id: next_owner_id(),
            path,
            file,
            blocks,
            bloom,
            entries,
            bytes: len,
        })
    }
}

/// Writes a run file from sorted entries.
struct RunWriter {
    path: PathBuf,
    tmp: PathBuf,
    file: Arc<dyn StorageFile>,
    buf: Vec<u8>,
    pos: u64,
    block: Vec<u8>,
    block_first: Option<Vec<u8>>,
    prev: Vec<u8>,
    index: Vec<u8>,
    bloom: Bloom,
    entries: u64,
}

impl RunWriter {
    fn create(backend: &dyn StorageBackend, dir: &Path, id: u64, point_keys: u64) -> Result<Self> {
        let path = dir.join(run_file_name(id));
        let tmp = dir.join(format!("{}.tmp", run_file_name(id)));
        let _ = backend.remove_file(&tmp);
        let file = backend
            .open(&tmp, OpenMode::CreateNew)
            .map_err(|e| StorageError::io(IoOp::Open, &tmp, e))?;
        let mut header = [0u8; RUN_HEADER_LEN];
        header[0..8].copy_from_slice(&RUN_MAGIC);
        header[8..12].copy_from_slice(&INDEX_VERSION.to_le_bytes());
        header[16..24].copy_from_slice(&id.to_le_bytes());
        let crc = crc32c::crc32c(&header[0..24]);
        header[24..28].copy_from_slice(&crc.to_le_bytes());
        Ok(RunWriter {
            path,
            tmp,
            file,
            buf: header.to_vec(),
            pos: RUN_HEADER_LEN as u64,
            block: Vec::with_capacity(BLOCK_TARGET * 2),
            block_first: None,
            prev: Vec::new(),
            index: Vec::new(),
            bloom: Bloom::with_capacity(point_keys),
            entries: 0,
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(bytes);
        self.pos += bytes.len() as u64;
        if self.buf.len() >= 1 << 20 {
            self.file
                .append(&[&self.buf])
                .map_err(|e| StorageError::io(IoOp::Append, &self.tmp, e))?;
            self.buf.clear();
        }
        Ok(())
    }

    fn add(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        debug_assert!(key.len() <= MAX_KEY_LEN && !key.is_empty());
        debug_assert!(
            self.entries == 0 || key > self.prev.as_slice(),
            "keys must increase"
        );
        if self.block.len() >= BLOCK_TARGET {
            self.finish_block()?;
        }
        let shared = if self.block_first.is_none() {
            self.block_first = Some(key.to_vec());
            0
        } else {
            self.prev
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count()
        };
        self.block.push(shared as u8);
        self.block.push((key.len() - shared) as u8);
        self.block
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.block.extend_from_slice(&key[shared..]);
        self.block.extend_from_slice(value);
        self.prev.clear();
        self.prev.extend_from_slice(key);
        if let Some(b) = bloom_key(key) {
            self.bloom.insert(b);
        }
        self.entries += 1;
        Ok(())
    }

    fn finish_block(&mut self) -> Result<()> {
        let Some(first) = self.block_first.take() else {
            return Ok(());
        };
        let offset = self.pos;
        let len = self.block.len() as u32;
        let block = std::mem::take(&mut self.block);
        let mut head = [0u8; 8];
        head[0..4].copy_from_slice(&len.to_le_bytes());
        head[4..8].copy_from_slice(&crc32c::crc32c(&block).to_le_bytes());
        self.write(&head)?;
        self.write(&block)?;
        self.block = block;
        self.block.clear();
        self.index.push(first.len() as u8);
        self.index.extend_from_slice(&first);
        self.index.extend_from_slice(&offset.to_le_bytes());
        self.index.extend_from_slice(&len.to_le_bytes());
        Ok(())
    }

    fn finish(mut self, backend: &dyn StorageBackend, dir: &Path) -> Result<()> {
        self.finish_block()?;
        let index = std::mem::take(&mut self.index);
        let bloom = self.bloom.bytes();
        let index_off = self.pos;
        self.write(&index)?;
        let bloom_off = self.pos;
        self.write(&bloom)?;
        let mut f = [0u8; FOOTER_LEN];
        f[0..8].copy_from_slice(&FOOTER_MAGIC);
        f[8..16].copy_from_slice(&index_off.to_le_bytes());
        f[16..24].copy_from_slice(&(index.len() as u64).to_le_bytes());
        f[24..32].copy_from_slice(&bloom_off.to_le_bytes());
        f[32..40].copy_from_slice(&(bloom.len() as u64).to_le_bytes());
        f[40..48].copy_from_slice(&self.entries.to_le_bytes());
        f[48..52].copy_from_slice(&crc32c::crc32c(&index).to_le_bytes());
        f[52..56].copy_from_slice(&crc32c::crc32c(&bloom).to_le_bytes());
        let crc = crc32c::crc32c(&f[0..56]);
        f[56..60].copy_from_slice(&crc.to_le_bytes());
        self.write(&f)?;
        if !self.buf.is_empty() {
            self.file
                .append(&[&self.buf])
                .map_err(|e| StorageError::io(IoOp::Append, &self.tmp, e))?;
        }
        self.file
            .sync()
            .map_err(|e| StorageError::io(IoOp::Sync, &self.tmp, e))?;
        backend
            .rename(&self.tmp, &self.path)
            .map_err(|e| StorageError::io(IoOp::Rename, &self.path, e))?;
        backend
            .sync_dir(dir)
            .map_err(|e| StorageError::io(IoOp::SyncDir, dir, e))
    }
}

/// Streams a run's entries in order (blocks read directly, bypassing the cache).
struct RunIter<'a> {
    run: &'a Run,
    cache: &'a Cache,
    block: usize,
    entries: std::vec::IntoIter<(Vec<u8>, Bytes)>,
}

impl RunIter<'_> {
    fn next_entry(&mut self) -> Result<Option<(Vec<u8>, Bytes)>> {
        loop {
            if let Some(e) = self.entries.next() {
                return Ok(Some(e));
            }
            if self.block >= self.run.blocks.len() {
                return Ok(None);
            }
            self.entries = self.run.block(self.cache, self.block, false)?.into_iter();
            self.block += 1;
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Manifest.

#[derive(Debug, Clone, PartialEq, Eq)]
struct Manifest {
    checkpoint: u64,
    next_id: u64,
    runs: Vec<u64>,
}

fn encode_manifest(m: &Manifest) -> Vec<u8> {
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

fn decode_manifest(b: &[u8]) -> Option<Manifest> {
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

// ------------------------------------------------------------------------------------------------
// The index.

/// A memtable frozen for flushing, with the log position it reflects.
#[derive(Debug)]
struct Frozen {
    map: Memtable,
    end_seq: u64,
}

#[derive(Debug, Default)]
struct View {
    active: Memtable,
    frozen: Vec<Arc<Frozen>>,
    runs: Vec<Arc<Run>>,
    /// The log position the active memtable reflects (everything below is in the index).
    applied: u64,
    checkpoint: u64,
}

/// Counters of one shard index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Bytes charged to the active and frozen memtables.
    pub memtable_bytes: u64,
    /// Runs on disk.
    pub runs: usize,
    /// Bytes of the run files.
    pub run_bytes: u64,
    /// Entries in the runs (duplicates across runs counted each time).
    pub run_entries: u64,
    /// In-memory bytes of run block indexes and blooms.
    pub resident_bytes: u64,
    /// The log position below which the runs hold everything.
    pub checkpoint: u64,
}

/// One shard's index.
pub(crate) struct Index {
    dir: PathBuf,
    backend: Arc<dyn StorageBackend>,
    cache: Arc<Cache>,
    budget: u64,
    view: RwLock<View>,
    /// Serializes flushes.
    flushing: Mutex<()>,
    /// Serializes merges.
    merging: Mutex<()>,
    /// Held while the manifest is rewritten and the view's run list changes with it (flushes
    /// and merges run concurrently; only this step is exclusive).
    manifest_lock: Mutex<()>,
    next_id: AtomicU64,
    /// A background flusher serves this index: appliers may wait for it (back-pressure).
    /// Cleared at shutdown, so a commit finishing after the flusher stopped never waits.
    served: AtomicBool,
    drained: Condvar,
    drained_lock: Mutex<()>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("dir", &self.dir)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// What [`Index::open`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexOpen {
    /// Replay the log from here.
    pub checkpoint: u64,
    /// The index was unusable and starts empty (rebuilt from the log).
    pub rebuilt: bool,
}

impl Index {
    fn read_guard(&self) -> std::sync::RwLockReadGuard<'_, View> {
        self.view.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_guard(&self) -> std::sync::RwLockWriteGuard<'_, View> {
        self.view.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens the index in `dir`; an unusable one is wiped (the log rebuilds it).
    pub(crate) fn open(
        backend: Arc<dyn StorageBackend>,
        dir: PathBuf,
        cache: Arc<Cache>,
        budget: u64,
    ) -> Result<(Index, IndexOpen)> {
        backend
            .create_dir_all(&dir)
            .map_err(|e| StorageError::io(IoOp::CreateDir, &dir, e))?;
        let manifest = match backend.open(&dir.join(MANIFEST), OpenMode::Existing) {
            Ok(f) => {
                let len = f
                    .len()
                    .map_err(|e| StorageError::io(IoOp::Len, dir.join(MANIFEST), e))?;
                if len > (36 + MAX_RUNS * 8) as u64 {
                    None
                } else {
                    let mut b = vec![0u8; len as usize];
                    f.read_at(0, &mut b)
                        .map_err(|e| StorageError::io(IoOp::Read, dir.join(MANIFEST), e))?;
                    decode_manifest(&b)
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(StorageError::io(IoOp::Open, dir.join(MANIFEST), e)),
        };
        let mut runs = Vec::new();
        let mut rebuilt = false;
        let mut keep: Vec<u64> = Vec::new();
        let mut next_id = 1;
        let mut checkpoint = 0;
        if let Some(m) = &manifest {
            let loaded: Result<Vec<Run>> = m
                .runs
                .iter()
                .map(|id| Run::open(&*backend, &dir, *id))
                .collect();
            match loaded {
                Ok(l) => {
                    runs = l.into_iter().map(Arc::new).collect();
                    keep.clone_from(&m.runs);
                    next_id = m.next_id;
                    checkpoint = m.checkpoint;
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "event index unusable; rebuilding it from the log");
                    rebuilt = true;
                    next_id = m.next_id;
                }
            }
        } else {
            rebuilt = backend
                .list(&dir)
                .map_err(|e| StorageError::io(IoOp::List, &dir, e))?
                .iter()
                .any(|e| e.name == MANIFEST || parse_run_name(&e.name).is_some());
        }
        // Remove whatever the manifest does not list (orphans, temporaries, a wiped index).
        for entry in backend
            .list(&dir)
            .map_err(|e| StorageError::io(IoOp::List, &dir, e))?
        {
            let listed = parse_run_name(&entry.name).is_some_and(|id| keep.contains(&id));
            let is_manifest = entry.name == MANIFEST && manifest.is_some() && !rebuilt;
            if !listed && !is_manifest && !entry.is_dir {
                if let Some(id) = parse_run_name(&entry.name) {
                    next_id = next_id.max(id + 1);
                }
                let path = dir.join(&entry.name);
                backend
                    .remove_file(&path)
                    .map_err(|e| StorageError::io(IoOp::Remove, &path, e))?;
            }
        }
        let index = Index {
            dir,
            backend,
            cache,
            budget: budget.max(1),
            view: RwLock::new(View {
                runs,
                applied: checkpoint,
                checkpoint,
                ..View::default()
            }),
            flushing: Mutex::new(()),
            merging: Mutex::new(()),
            manifest_lock: Mutex::new(()),
            next_id: AtomicU64::new(next_id),
            served: AtomicBool::new(false),
            drained: Condvar::new(),
            drained_lock: Mutex::new(()),
        };
        if rebuilt {
            index.write_manifest(&[], 0)?;
        }
        Ok((
            index,
            IndexOpen {
                checkpoint,
                rebuilt,
            },
        ))
    }

    /// Drops every entry and run (used when the log turns out shorter than the checkpoint).
    pub(crate) fn reset(&self) -> Result<()> {
        let _f = lock(&self.flushing);
        let _g = lock(&self.merging);
        let _m = lock(&self.manifest_lock);
        self.write_manifest(&[], 0)?;
        let old = {
            let mut view = self.write_guard();
            let old = std::mem::take(&mut view.runs);
            *view = View::default();
            old
        };
        for run in old {
            let _ = self.backend.remove_file(&run.path);
        }
        Ok(())
    }

    fn write_manifest(&self, runs: &[u64], checkpoint: u64) -> Result<()> {
        let m = Manifest {
            checkpoint,
            next_id: self.next_id.load(Ordering::Relaxed),
            runs: runs.to_vec(),
        };
        let bytes = encode_manifest(&m);
        let path = self.dir.join(MANIFEST);
        let tmp = self.dir.join("MANIFEST.tmp");
        let _ = self.backend.remove_file(&tmp);
        let io = |op| {
            let p = path.clone();
            move |e| StorageError::io(op, p.clone(), e)
        };
        let f = self
            .backend
            .open(&tmp, OpenMode::CreateNew)
            .map_err(io(IoOp::Open))?;
        f.append(&[&bytes]).map_err(io(IoOp::Append))?;
        f.sync().map_err(io(IoOp::Sync))?;
        self.backend.rename(&tmp, &path).map_err(io(IoOp::Rename))?;
        self.backend
            .sync_dir(&self.dir)
            .map_err(|e| StorageError::io(IoOp::SyncDir, &self.dir, e))
    }

    /// Whether a background flusher serves this index (see [`Index::apply`]).
    pub(crate) fn set_served(&self, served: bool) {
        self.served.store(served, Ordering::SeqCst);
        self.drained.notify_all();
    }

    /// Applies the entries of committed records up to (not including) `end_seq`. Returns true
    /// when a frozen memtable waits for its flush. With `wait`, and while a flusher serves the
    /// index, waits as long as too many memtables are frozen (back-pressure).
    pub(crate) fn apply(&self, entries: Vec<(Vec<u8>, Vec<u8>)>, end_seq: u64, wait: bool) -> bool {
        let mut view = self.write_guard();
        if wait {
            while view.frozen.len() >= MAX_FROZEN && self.served.load(Ordering::SeqCst) {
                drop(view);
                let g = lock(&self.drained_lock);
                let _ = self
                    .drained
                    .wait_timeout(g, std::time::Duration::from_millis(10))
                    .unwrap_or_else(PoisonError::into_inner);
                view = self.write_guard();
            }
        }
        for (k, v) in entries {
            view.active.insert(k, v, ENTRY_OVERHEAD);
        }
        debug_assert!(end_seq >= view.applied);
        view.applied = end_seq;
        if view.active.bytes() >= self.budget {
            let map = std::mem::take(&mut view.active);
            view.frozen.push(Arc::new(Frozen { map, end_seq }));
        }
        !view.frozen.is_empty()
    }

    /// Looks a key up (memtables newest first, then runs newest first).
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        let runs: Vec<Arc<Run>> = {
            let view = self.read_guard();
            if let Some(v) = view.active.get(key) {
                return Ok(Some(Bytes::copy_from_slice(v)));
            }
            for f in view.frozen.iter().rev() {
                if let Some(v) = f.map.get(key) {
                    return Ok(Some(Bytes::copy_from_slice(v)));
                }
            }
            view.runs.clone()
        };
        for run in runs.iter().rev() {
            if let Some(v) = run.get(&self.cache, key)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// The first `limit` distinct keys in `[start, end)` with their newest values.
    pub(crate) fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Bytes)>> {
        if limit == 0 || start >= end {
            return Ok(Vec::new());
        }
        // Oldest source first, so newer values overwrite older ones.
        let (mut layers, runs): (Vec<Entries>, Vec<Arc<Run>>) = {
            let view = self.read_guard();
            let mut layers = Vec::new();
            for f in &view.frozen {
                layers.push(f.map.range(start, end, limit));
            }
            layers.push(view.active.range(start, end, limit));
            (layers, view.runs.clone())
        };
        let mut merged: BTreeMap<Vec<u8>, Bytes> = BTreeMap::new();
        for run in &runs {
            let mut out = Vec::new();
            run.scan(&self.cache, start, end, limit, &mut out)?;
            merged.extend(out);
        }
        for layer in layers.drain(..) {
            merged.extend(layer);
        }
        Ok(merged.into_iter().take(limit).collect())
    }

    /// Writes the oldest frozen memtable as a run. Returns false when nothing was waiting.
    pub(crate) fn flush_one(&self) -> Result<bool> {
        let _f = lock(&self.flushing);
        let Some(frozen) = self.read_guard().frozen.first().cloned() else {
            return Ok(false);
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let points = frozen.map.keys().filter(|k| bloom_key(k).is_some()).count() as u64;
        let mut w = RunWriter::create(&*self.backend, &self.dir, id, points)?;
        for (k, v) in frozen.map.sorted() {
            w.add(k, v)?;
        }
        w.finish(&*self.backend, &self.dir)?;
        let run = Arc::new(Run::open(&*self.backend, &self.dir, id)?);
        {
            let _m = lock(&self.manifest_lock);
            let mut ids: Vec<u64> = self.read_guard().runs.iter().map(|r| r.id).collect();
            ids.push(id);
            self.write_manifest(&ids, frozen.end_seq)?;
            let mut view = self.write_guard();
            assert!(
                Arc::ptr_eq(&view.frozen[0], &frozen),
                "only the flusher removes frozen memtables"
            );
            view.frozen.remove(0);
            view.runs.push(run);
            view.checkpoint = frozen.end_seq;
        }
        self.drained.notify_all();
        Ok(true)
    }

    /// Freezes the active memtable (if it holds anything), so the next flush writes it.
    pub(crate) fn freeze(&self) {
        let mut view = self.write_guard();
        if !view.active.is_empty() {
            let map = std::mem::take(&mut view.active);
            let end_seq = view.applied;
            view.frozen.push(Arc::new(Frozen { map, end_seq }));
        }
    }

    /// Flushes everything frozen (the background flusher; merges are the merger's job).
    pub(crate) fn flush_pending(&self) -> Result<()> {
        while self.flush_one()? {}
        Ok(())
    }

    /// Flushes everything frozen and merges (used at open and close, in the foreground).
    pub(crate) fn flush_all(&self) -> Result<()> {
        self.flush_pending()?;
        self.merge_runs()
    }

    /// Merges the newest run into its older neighbour while it is at least half its size.
    pub(crate) fn merge_runs(&self) -> Result<()> {
        let _g = lock(&self.merging);
        loop {
            let (older, newer) = {
                let view = self.read_guard();
                let n = view.runs.len();
                if n < 2 || view.runs[n - 1].bytes * 2 < view.runs[n - 2].bytes {
                    return Ok(());
                }
                (Arc::clone(&view.runs[n - 2]), Arc::clone(&view.runs[n - 1]))
            };
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let points = older.bloom.words.len() as u64 * 32 / BLOOM_BITS_PER_KEY
                + newer.bloom.words.len() as u64 * 32 / BLOOM_BITS_PER_KEY;
            let mut writer = RunWriter::create(&*self.backend, &self.dir, id, points)?;
            let mut old_iter = RunIter {
                run: &older,
                cache: &self.cache,
                block: 0,
                entries: Vec::new().into_iter(),
            };
            let mut new_iter = RunIter {
                run: &newer,
                cache: &self.cache,
                block: 0,
                entries: Vec::new().into_iter(),
            };
            let (mut old_next, mut new_next) = (old_iter.next_entry()?, new_iter.next_entry()?);
            loop {
                match (&old_next, &new_next) {
                    (None, None) => break,
                    (Some((ka, va)), None) => {
                        writer.add(ka, va)?;
                        old_next = old_iter.next_entry()?;
                    }
                    (None, Some((kb, vb))) => {
                        writer.add(kb, vb)?;
                        new_next = new_iter.next_entry()?;
                    }
                    (Some((ka, va)), Some((kb, vb))) => match ka.cmp(kb) {
                        std::cmp::Ordering::Less => {
                            writer.add(ka, va)?;
                            old_next = old_iter.next_entry()?;
                        }
                        std::cmp::Ordering::Greater => {
                            writer.add(kb, vb)?;
                            new_next = new_iter.next_entry()?;
                        }
                        std::cmp::Ordering::Equal => {
                            writer.add(kb, vb)?;
                            old_next = old_iter.next_entry()?;
                            new_next = new_iter.next_entry()?;
                        }
                    },
                }
            }
            writer.finish(&*self.backend, &self.dir)?;
            let merged = Arc::new(Run::open(&*self.backend, &self.dir, id)?);
            {
                // Flushes may have appended runs meanwhile; the inputs are still adjacent
                // (only merges remove runs, and they are serialized).
                let _m = lock(&self.manifest_lock);
                let mut runs = self.read_guard().runs.clone();
                let at = runs
                    .iter()
                    .position(|r| Arc::ptr_eq(r, &older))
                    .expect("merge inputs stay in the run list");
                assert!(
                    Arc::ptr_eq(&runs[at + 1], &newer),
                    "merge inputs are adjacent"
                );
                runs.splice(at..at + 2, [Arc::clone(&merged)]);
                let ids: Vec<u64> = runs.iter().map(|r| r.id).collect();
                let checkpoint = self.read_guard().checkpoint;
                self.write_manifest(&ids, checkpoint)?;
                self.write_guard().runs = runs;
            }
            for old in [older, newer] {
                self.cache.remove_log(old.cache_id);
                if let Err(e) = self.backend.remove_file(&old.path) {
                    tracing::warn!(path = %old.path.display(), error = %e, "removing a merged index run failed");
                }
            }
        }
    }

    /// Counters.
    pub(crate) fn stats(&self) -> IndexStats {
        let view = self.read_guard();
        IndexStats {
            memtable_bytes: view.active.bytes()
                + view.frozen.iter().map(|f| f.map.bytes()).sum::<u64>(),
            runs: view.runs.len(),
            run_bytes: view.runs.iter().map(|r| r.bytes).sum(),
            run_entries: view.runs.iter().map(|r| r.entries).sum(),
            resident_bytes: view
                .runs
                .iter()
                .map(|r| {
                    (r.bloom.words.len() * 4
                        + r.blocks
                            .iter()
                            .map(|b| b.first_key.len() + 32)
                            .sum::<usize>()) as u64
                })
                .sum(),
            checkpoint: view.checkpoint,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::MemBackend;

    fn open(backend: &MemBackend, budget: u64) -> (Index, IndexOpen) {
        Index::open(
            Arc::new(backend.clone()),
            PathBuf::from("idx"),
            Arc::new(Cache::new(1 << 20)),
            budget,
        )
        .unwrap()
    }

    fn key(i: u32) -> Vec<u8> {
        let mut k = vec![3u8];
        k.extend_from_slice(
            &u64::from(i)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .to_be_bytes(),
        );
        k.extend_from_slice(&[7u8; 48]);
        k
    }

    #[test]
    fn flush_merge_and_reopen_keep_newest_values() {
        let backend = MemBackend::new();
        let (index, opened) = open(&backend, 4096);
        assert!(!opened.rebuilt);
        let mut seq = 0;
        for round in 0..6u32 {
            let entries: Vec<_> = (0..300u32)
                .map(|i| (key(i), (round * 1000 + i).to_le_bytes().to_vec()))
                .collect();
            seq += 1;
            index.apply(entries, seq, false);
            index.flush_all().unwrap();
        }
        for i in 0..300 {
            let v = index.get(&key(i)).unwrap().unwrap();
            assert_eq!(le_u32(&v), 5000 + i);
        }
        assert!(index.get(&key(999)).unwrap().is_none());
        let stats = index.stats();
        assert!(stats.runs <= 3, "{stats:?}");
        let all = index.scan(&[3u8], &[4u8], 10_000).unwrap();
        assert_eq!(all.len(), 300);
        assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
        let checkpoint = stats.checkpoint;
        drop(index);
        let (index, opened) = open(&backend, 4096);
        assert_eq!(opened.checkpoint, checkpoint);
        assert_eq!(le_u32(&index.get(&key(7)).unwrap().unwrap()), 5007);
    }

    #[test]
    fn damaged_run_means_rebuild() {
        let backend = MemBackend::new();
        let (index, _) = open(&backend, 1);
        index.apply(vec![(key(1), vec![1])], 1, false);
        index.flush_all().unwrap();
        drop(index);
        let run = backend
            .file_paths()
            .into_iter()
            .find(|p| p.to_string_lossy().ends_with(".eix"))
            .unwrap();
        let mut bytes = backend.read_file(&run).unwrap();
        let at = bytes.len() - 70;
        bytes[at] ^= 0xff;
        backend.write_file(&run, &bytes);
        let (index, opened) = open(&backend, 1);
        assert!(opened.rebuilt);
        assert_eq!(opened.checkpoint, 0);
        assert!(index.get(&key(1)).unwrap().is_none());
    }

    #[test]
    fn bloom_has_no_false_negatives() {
        let mut b = Bloom::with_capacity(1000);
        for i in 0..1000u32 {
            b.insert(&key(i));
        }
        assert!((0..1000).all(|i| b.may_contain(&key(i))));
        let fp = (1000..11_000).filter(|i| b.may_contain(&key(*i))).count();
        assert!(fp < 300, "{fp} false positives in 10000");
        assert!(!Bloom::with_capacity(0).may_contain(&key(1)));
    }
}
