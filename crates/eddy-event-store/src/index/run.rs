//! Runs: the immutable sorted files of an index (blocks of prefix-compressed entries, a
//! sparse block index and a split-block bloom filter), their writer and their iterator.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use eddy_log::{next_owner_id, Cache, Corruption, IoOp, OpenMode, StorageBackend, StorageFile};
use xxhash_rust::xxh3::xxh3_64;

use crate::error::{EventStoreError, Result};
use crate::keys::{bloom_key, is_point_key, KIND_VERSION, MAX_KEY_LEN, VERSION_PREFIX_LEN};

use super::format::{
    le_u32, le_u64, run_file_name, BLOCK_TARGET, BLOOM_BITS_PER_KEY, FOOTER_LEN, FOOTER_MAGIC,
    INDEX_VERSION, MAX_BLOCK_LEN, MAX_VALUE_LEN, RUN_HEADER_LEN, RUN_MAGIC,
};

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
    pub(super) words: Vec<u32>,
}

impl Bloom {
    pub(super) fn with_capacity(keys: u64) -> Self {
        let blocks = if keys == 0 {
            0
        } else {
            (keys * BLOOM_BITS_PER_KEY).div_ceil(256).max(1)
        };
        Bloom {
            words: vec![0; usize::try_from(blocks * 8).unwrap_or(usize::MAX)],
        }
    }

    pub(super) fn block_and_lo(&self, key: &[u8]) -> Option<(usize, u32)> {
        let blocks = (self.words.len() / 8) as u64;
        if blocks == 0 {
            return None;
        }
        let h = xxh3_64(key);
        let block = (((h >> 32) * blocks) >> 32) as usize;
        Some((block, h as u32))
    }

    pub(super) fn insert(&mut self, key: &[u8]) {
        if let Some((block, lo)) = self.block_and_lo(key) {
            for (i, salt) in SALT.iter().enumerate() {
                self.words[block * 8 + i] |= 1 << (lo.wrapping_mul(*salt) >> 27);
            }
        }
    }

    pub(super) fn may_contain(&self, key: &[u8]) -> bool {
        let Some((block, lo)) = self.block_and_lo(key) else {
            return false;
        };
        SALT.iter()
            .enumerate()
            .all(|(i, salt)| self.words[block * 8 + i] & (1 << (lo.wrapping_mul(*salt) >> 27)) != 0)
    }

    pub(super) fn bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    pub(super) fn from_bytes(b: &[u8]) -> Option<Self> {
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
pub(super) struct BlockMeta {
    pub(super) first_key: Box<[u8]>,
    pub(super) offset: u64,
    pub(super) len: u32,
}

/// An immutable sorted run.
#[derive(Debug)]
pub(crate) struct Run {
    pub(super) id: u64,
    pub(super) cache_id: u64,
    pub(super) path: PathBuf,
    pub(super) file: Arc<dyn StorageFile>,
    pub(super) blocks: Vec<BlockMeta>,
    pub(super) bloom: Bloom,
    pub(super) entries: u64,
    pub(super) bytes: u64,
}

/// Decoded index entries.
pub(super) type Entries = Vec<(Vec<u8>, Bytes)>;

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
    pub(super) fn corrupt(&self, offset: u64, kind: Corruption) -> EventStoreError {
        EventStoreError::corrupt(self.path.clone(), offset, kind)
    }

    /// Reads and verifies block `i`'s bytes (through the cache when `cached`).
    pub(super) fn raw_block(&self, cache: &Cache, i: usize, cached: bool) -> Result<Bytes> {
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
            .map_err(|e| EventStoreError::io(IoOp::Read, &self.path, e))?;
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
    pub(super) fn block(&self, cache: &Cache, i: usize, cached: bool) -> Result<Entries> {
        let raw = self.raw_block(cache, i, cached)?;
        parse_block(&raw).map_err(|k| self.corrupt(self.blocks[i].offset, k))
    }

    /// The block that may hold `key` (the last whose first key is at or below it).
    pub(super) fn block_for(&self, key: &[u8]) -> Option<usize> {
        let i = self.blocks.partition_point(|b| &*b.first_key <= key);
        i.checked_sub(1)
    }

    pub(super) fn get(&self, cache: &Cache, key: &[u8]) -> Result<Option<Bytes>> {
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
    pub(super) fn scan(
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

    pub(super) fn open(backend: &dyn StorageBackend, dir: &Path, id: u64) -> Result<Run> {
        let path = dir.join(run_file_name(id));
        let file = backend
            .open(&path, OpenMode::Existing)
            .map_err(|e| EventStoreError::io(IoOp::Open, &path, e))?;
        let len = file
            .len()
            .map_err(|e| EventStoreError::io(IoOp::Len, &path, e))?;
        let bad = |at: u64, kind| EventStoreError::corrupt(path.clone(), at, kind);
        if len < (RUN_HEADER_LEN + FOOTER_LEN) as u64 {
            return Err(bad(0, Corruption::Truncated));
        }
        let read = |at: u64, n: u64| -> Result<Vec<u8>> {
            let mut buf = vec![0u8; usize::try_from(n).unwrap_or(usize::MAX)];
            file.read_at(at, &mut buf)
                .map_err(|e| EventStoreError::io(IoOp::Read, &path, e))?;
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
pub(super) struct RunWriter {
    pub(super) path: PathBuf,
    pub(super) tmp: PathBuf,
    pub(super) file: Arc<dyn StorageFile>,
    pub(super) buf: Vec<u8>,
    pub(super) pos: u64,
    pub(super) block: Vec<u8>,
    pub(super) block_first: Option<Vec<u8>>,
    pub(super) prev: Vec<u8>,
    pub(super) index: Vec<u8>,
    pub(super) bloom: Bloom,
    pub(super) entries: u64,
}

impl RunWriter {
    pub(super) fn create(
        backend: &dyn StorageBackend,
        dir: &Path,
        id: u64,
        point_keys: u64,
    ) -> Result<Self> {
        let path = dir.join(run_file_name(id));
        let tmp = dir.join(format!("{}.tmp", run_file_name(id)));
        let _ = backend.remove_file(&tmp);
        let file = backend
            .open(&tmp, OpenMode::CreateNew)
            .map_err(|e| EventStoreError::io(IoOp::Open, &tmp, e))?;
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

    pub(super) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(bytes);
        self.pos += bytes.len() as u64;
        if self.buf.len() >= 1 << 20 {
            self.file
                .append(&[&self.buf])
                .map_err(|e| EventStoreError::io(IoOp::Append, &self.tmp, e))?;
            self.buf.clear();
        }
        Ok(())
    }

    pub(super) fn add(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
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

    pub(super) fn finish_block(&mut self) -> Result<()> {
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

    pub(super) fn finish(mut self, backend: &dyn StorageBackend, dir: &Path) -> Result<()> {
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
                .map_err(|e| EventStoreError::io(IoOp::Append, &self.tmp, e))?;
        }
        self.file
            .sync()
            .map_err(|e| EventStoreError::io(IoOp::Sync, &self.tmp, e))?;
        backend
            .rename(&self.tmp, &self.path)
            .map_err(|e| EventStoreError::io(IoOp::Rename, &self.path, e))?;
        backend
            .sync_dir(dir)
            .map_err(|e| EventStoreError::io(IoOp::SyncDir, dir, e))
    }
}

/// Streams a run's entries in order (blocks read directly, bypassing the cache).
pub(super) struct RunIter<'a> {
    pub(super) run: &'a Run,
    pub(super) cache: &'a Cache,
    pub(super) block: usize,
    pub(super) entries: std::vec::IntoIter<(Vec<u8>, Bytes)>,
}

impl RunIter<'_> {
    pub(super) fn next_entry(&mut self) -> Result<Option<(Vec<u8>, Bytes)>> {
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
