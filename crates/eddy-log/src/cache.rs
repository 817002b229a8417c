//! A byte-budgeted LRU cache shared by every log of the storage engine (both stores).
//!
//! It holds what is expensive to rebuild and cheap to drop: the open file handle and the loaded
//! sparse index of a sealed segment, and the verified data blocks of the event store's
//! on-disk per-aggregate index. Memory is bounded by bytes (each entry is charged its index
//! size plus a fixed overhead) and the number of entries is bounded too (each holds a file
//! descriptor). Resident memory therefore does not grow with retained data: a sealed segment
//! costs a few dozen bytes of metadata until a read loads it into the cache.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use crate::file::StorageFile;
use crate::format::IndexEntry;
use crate::sync::lock;

/// Default cache budget: 64 MiB.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;
/// At most this many sealed segments are cached at once (each holds a file descriptor).
pub const MAX_CACHED_SEGMENTS: usize = 1024;
/// Bytes charged per entry on top of its index.
const ENTRY_OVERHEAD: u64 = 256;

/// Key: (owner id, position): (log id, segment base) or (index run id, block offset).
pub type CacheKey = (u64, u64);

static NEXT_OWNER_ID: AtomicU64 = AtomicU64::new(1);

/// A process-unique owner id for cache keys (logs and index runs share the key space).
pub fn next_owner_id() -> u64 {
    NEXT_OWNER_ID.fetch_add(1, Ordering::Relaxed)
}

/// What an entry holds.
enum Cached {
    Segment(Arc<SealedSegment>),
    Block(Bytes),
}

/// A loaded sealed segment: its file and sparse index.
#[derive(Debug)]
pub(crate) struct SealedSegment {
    pub(crate) file: Arc<dyn StorageFile>,
    pub(crate) index: Vec<IndexEntry>,
}

impl SealedSegment {
    fn weight(&self) -> u64 {
        ENTRY_OVERHEAD + (self.index.len() * std::mem::size_of::<IndexEntry>()) as u64
    }
}

struct Entry {
    value: Cached,
    weight: u64,
    tick: u64,
}

struct Inner {
    entries: HashMap<CacheKey, Entry>,
    by_age: BTreeMap<u64, CacheKey>,
    used: u64,
    tick: u64,
    /// Entries holding a segment (each holds a file descriptor).
    segments: usize,
}

/// The shared cache.
pub struct Cache {
    budget: u64,
    inner: Mutex<Inner>,
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("Cache")
            .field("budget", &self.budget)
            .field("used", &inner.used)
            .field("entries", &inner.entries.len())
            .finish_non_exhaustive()
    }
}

impl Cache {
    /// A cache that keeps at most `budget` bytes.
    pub fn new(budget: u64) -> Self {
        Cache {
            budget,
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                by_age: BTreeMap::new(),
                used: 0,
                tick: 0,
                segments: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// Bytes currently charged.
    pub fn used_bytes(&self) -> u64 {
        self.lock().used
    }

    pub(crate) fn get(&self, key: CacheKey) -> Option<Arc<SealedSegment>> {
        match self.touch(key)? {
            Cached::Segment(s) => Some(s),
            Cached::Block(_) => None,
        }
    }

    /// A cached block (an upper layer's verified data block, e.g. the event store's index).
    pub fn get_block(&self, key: CacheKey) -> Option<Bytes> {
        match self.touch(key)? {
            Cached::Block(b) => Some(b),
            Cached::Segment(_) => None,
        }
    }

    fn touch(&self, key: CacheKey) -> Option<Cached> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let entry = inner.entries.get_mut(&key)?;
        let old = std::mem::replace(&mut entry.tick, tick);
        let value = match &entry.value {
            Cached::Segment(s) => Cached::Segment(Arc::clone(s)),
            Cached::Block(b) => Cached::Block(b.clone()),
        };
        inner.by_age.remove(&old);
        inner.by_age.insert(tick, key);
        Some(value)
    }

    /// Inserts (or replaces) an entry, evicting the least recently used ones to stay within
    /// the budget. An entry heavier than the whole budget is not cached.
    pub(crate) fn insert(&self, key: CacheKey, value: Arc<SealedSegment>) {
        let weight = value.weight();
        self.insert_entry(key, Cached::Segment(value), weight);
    }

    /// Caches a verified block under a key of an owner id from [`next_owner_id`].
    pub fn insert_block(&self, key: CacheKey, block: Bytes) {
        let weight = ENTRY_OVERHEAD + block.len() as u64;
        self.insert_entry(key, Cached::Block(block), weight);
    }

    fn insert_entry(&self, key: CacheKey, value: Cached, weight: u64) {
        if weight > self.budget {
            return;
        }
        let is_segment = matches!(value, Cached::Segment(_));
        let mut inner = self.lock();
        Self::remove_locked(&mut inner, key);
        while inner.used + weight > self.budget
            || (is_segment && inner.segments >= MAX_CACHED_SEGMENTS)
        {
            let Some((_, oldest)) = inner.by_age.pop_first() else {
                break;
            };
            if let Some(evicted) = inner.entries.remove(&oldest) {
                inner.used -= evicted.weight;
                if matches!(evicted.value, Cached::Segment(_)) {
                    inner.segments -= 1;
                }
            }
        }
        if is_segment {
            inner.segments += 1;
        }
        inner.tick += 1;
        let tick = inner.tick;
        inner.by_age.insert(tick, key);
        inner.used += weight;
        inner.entries.insert(
            key,
            Entry {
                value,
                weight,
                tick,
            },
        );
        debug_assert!(inner.used <= self.budget);
    }

    pub(crate) fn remove(&self, key: CacheKey) {
        Self::remove_locked(&mut self.lock(), key);
    }

    /// Drops every entry of one owner (a log, or an upper layer's owner id such as an index
    /// run that was merged away).
    pub fn remove_owner(&self, owner: u64) {
        let mut inner = self.lock();
        let keys: Vec<CacheKey> = inner
            .entries
            .keys()
            .filter(|(id, _)| *id == owner)
            .copied()
            .collect();
        for key in keys {
            Self::remove_locked(&mut inner, key);
        }
    }

    fn remove_locked(inner: &mut Inner, key: CacheKey) {
        if let Some(entry) = inner.entries.remove(&key) {
            if matches!(entry.value, Cached::Segment(_)) {
                inner.segments -= 1;
            }
            inner.by_age.remove(&entry.tick);
            inner.used -= entry.weight;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::{MemBackend, OpenMode, StorageBackend};
    use crate::format::IndexKind;
    use std::path::Path;

    fn segment(entries: usize) -> Arc<SealedSegment> {
        let backend = MemBackend::new();
        let file = backend
            .open(Path::new("x"), OpenMode::CreateOrOpen)
            .unwrap();
        Arc::new(SealedSegment {
            file,
            index: vec![
                IndexEntry {
                    seq: 0,
                    timestamp: 0,
                    position: 32,
                    kind: IndexKind::Record
                };
                entries
            ],
        })
    }

    #[test]
    fn evicts_least_recently_used_within_budget() {
        let one = segment(10).weight();
        let cache = Cache::new(one * 2);
        cache.insert((1, 0), segment(10));
        cache.insert((1, 1), segment(10));
        assert!(cache.get((1, 0)).is_some()); // (1,1) is now the oldest
        cache.insert((1, 2), segment(10));
        assert!(cache.get((1, 1)).is_none());
        assert!(cache.get((1, 0)).is_some());
        assert!(cache.get((1, 2)).is_some());
        assert!(cache.used_bytes() <= one * 2);
        cache.remove_owner(1);
        assert_eq!(cache.used_bytes(), 0);
    }

    #[test]
    fn oversized_entries_are_not_cached() {
        let cache = Cache::new(100);
        cache.insert((1, 0), segment(1000));
        assert!(cache.get((1, 0)).is_none());
        assert_eq!(cache.used_bytes(), 0);
    }
}
