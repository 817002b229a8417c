//! The index's in-memory table: entries of committed records since the last flush.
//!
//! Every commit inserts about three entries per written aggregate (its state, the writer's
//! mark and the new batch version), so inserts and point lookups are the hot path and go
//! through one hash map. Order is kept only where scans need it, in structures that are cheap
//! to maintain:
//!
//! * **listing keys** (orgs, aggregate types, aggregates) in a `BTreeSet`, touched only when a
//!   key is new to this memtable (an aggregate's state is overwritten on every write; its
//!   key is inserted once);
//! * **version keys** per aggregate as a sorted `Vec<u64>` (versions arrive in increasing
//!   order, so an insert is a push), which serves the per-aggregate version scans of reads;
//! * everything else (client marks, schemas) only in the hash map: nothing scans them in
//!   production, and a scan that covers them (a general scan, used by tests and fuzzing)
//!   filters the map.
//!
//! A flush sorts all entries once, on the flusher thread.
//!
//! Keys and values live in an arena of large chunks, and the hash table holds only their
//! spans: an insert copies bytes instead of making two heap allocations, and dropping a
//! flushed memtable (on the flusher thread, which did not allocate it) frees a few chunks
//! instead of two allocations per entry. Both showed in the write path's profile.

use std::collections::BTreeSet;
use std::hash::BuildHasher as _;
use std::ops::Bound;

use bytes::Bytes;
use hashbrown::HashTable;

use crate::keys::{KIND_AGG, KIND_ORG, KIND_TYPE, KIND_VERSION, VERSION_PREFIX_LEN};

use crate::FastMap as HashMap;

/// Length of a version key: kind, aggregate key, big-endian version.
const VERSION_KEY_LEN: usize = VERSION_PREFIX_LEN + 8;

/// The aggregate part of a version key (after the kind byte).
type AggPrefix = [u8; VERSION_PREFIX_LEN - 1];

fn is_listing_kind(kind: u8) -> bool {
    matches!(kind, KIND_ORG | KIND_TYPE | KIND_AGG)
}

/// A version key split into its aggregate prefix and version, when it has the exact shape.
fn split_version_key(key: &[u8]) -> Option<(AggPrefix, u64)> {
    if key.len() != VERSION_KEY_LEN || key[0] != KIND_VERSION {
        return None;
    }
    let mut prefix = [0u8; VERSION_PREFIX_LEN - 1];
    prefix.copy_from_slice(&key[1..VERSION_PREFIX_LEN]);
    let mut v = [0u8; 8];
    v.copy_from_slice(&key[VERSION_PREFIX_LEN..]);
    Some((prefix, u64::from_be_bytes(v)))
}

fn version_key(prefix: &AggPrefix, version: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(VERSION_KEY_LEN);
    k.push(KIND_VERSION);
    k.extend_from_slice(prefix);
    k.extend_from_slice(&version.to_be_bytes());
    k
}

/// True when `[start, end)` holds some key whose first byte is `kind`.
fn range_touches_kind(start: &[u8], end: &[u8], kind: u8) -> bool {
    // Keys of `kind` are `[kind] <= k < [kind + 1]` (or unbounded above for 0xff).
    let below_end = end > [kind].as_slice();
    let above_start = kind == u8::MAX || start < [kind + 1].as_slice();
    below_end && above_start
}

/// Bytes charged for a listing key's copy in the ordered set (on top of its length).
const LISTING_OVERHEAD: u64 = 48;
/// Bytes charged for an aggregate's first version in this memtable (its version list).
const VERSION_LIST_OVERHEAD: u64 = (VERSION_PREFIX_LEN as u64 - 1) + 48;
/// Bytes charged per version in an aggregate's list.
const VERSION_ENTRY_OVERHEAD: u64 = 8;

/// Bytes of one arena chunk (a larger key or value gets a chunk of its own size).
const CHUNK_BYTES: usize = 256 * 1024;

/// Where a key or value lives in the [`Arena`].
#[derive(Debug, Clone, Copy)]
struct Span {
    chunk: u32,
    offset: u32,
    len: u32,
}

/// Chunks kept for reuse by the next memtables (at most this many: 32 MiB).
const SPARE_CHUNKS: usize = 128;

/// Chunks of flushed memtables, reused by new ones: memory the process already touched, where
/// a fresh allocation is often memory the allocator gave back to the kernel, which must zero
/// it again on first touch (whole huge pages at a time; it showed in the writers' profile).
static SPARE: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

fn spare_chunk() -> Vec<u8> {
    let reused = SPARE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .pop();
    reused.unwrap_or_else(|| Vec::with_capacity(CHUNK_BYTES))
}

/// Append-only byte storage in chunks that never move (so spans stay valid and growth never
/// copies what is stored).
#[derive(Debug, Default)]
struct Arena {
    chunks: Vec<Vec<u8>>,
}

impl Drop for Arena {
    fn drop(&mut self) {
        let mut reusable: Vec<Vec<u8>> = std::mem::take(&mut self.chunks)
            .into_iter()
            .filter(|c| c.capacity() == CHUNK_BYTES)
            .collect();
        {
            let mut spare = SPARE
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let room = SPARE_CHUNKS.saturating_sub(spare.len());
            for mut chunk in reusable.drain(..room.min(reusable.len())) {
                chunk.clear();
                spare.push(chunk);
            }
        }
        // What the pool has no room for is freed here, outside its lock.
        drop(reusable);
    }
}

impl Arena {
    fn alloc(&mut self, bytes: &[u8]) -> Span {
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| c.capacity() - c.len() >= bytes.len());
        if !fits {
            self.chunks.push(if bytes.len() <= CHUNK_BYTES {
                spare_chunk()
            } else {
                Vec::with_capacity(bytes.len())
            });
        }
        let chunk = self.chunks.len() - 1;
        let buf = &mut self.chunks[chunk];
        let offset = buf.len();
        buf.extend_from_slice(bytes);
        Span {
            chunk: u32::try_from(chunk).expect("chunk count fits u32"),
            offset: u32::try_from(offset).expect("chunk offset fits u32"),
            len: u32::try_from(bytes.len()).expect("memtable item fits u32"),
        }
    }

    fn get(&self, span: Span) -> &[u8] {
        let start = span.offset as usize;
        &self.chunks[span.chunk as usize][start..start + span.len as usize]
    }

    /// Overwrites the bytes at `span`, which has room for `bytes` (`room` bytes from its
    /// start); returns the span of the new bytes.
    fn overwrite(&mut self, span: Span, room: u32, bytes: &[u8]) -> Option<Span> {
        let len = u32::try_from(bytes.len()).ok()?;
        if len > room {
            return None;
        }
        let start = span.offset as usize;
        self.chunks[span.chunk as usize][start..start + bytes.len()].copy_from_slice(bytes);
        Some(Span { len, ..span })
    }
}

/// One entry of the hash table: its key and value in the arena.
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: Span,
    value: Span,
    /// Bytes reserved for the value at `value` (a replaced value reuses them when it fits).
    room: u32,
}

/// One memtable (active or frozen).
#[derive(Debug, Default)]
pub(crate) struct Memtable {
    entries: HashTable<Entry>,
    arena: Arena,
    hasher: foldhash::fast::RandomState,
    listing: BTreeSet<Vec<u8>>,
    versions: HashMap<AggPrefix, Vec<u64>>,
    /// Kinds (first key bytes) of entries kept only in the hash map, as a bit set; an empty
    /// key counts as kind 0.
    other_kinds: [u64; 4],
    /// Bytes charged: key + value + `overhead` per entry, plus what the ordered structures
    /// hold for it (so the budget bounds the memory the memtable really takes).
    bytes: u64,
    /// Arena bytes of values replaced by larger ones (dead until the memtable is dropped),
    /// charged too.
    garbage: u64,
}

impl Memtable {
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn find(&self, key: &[u8]) -> Option<&Entry> {
        let arena = &self.arena;
        self.entries
            .find(self.hash(key), |e| arena.get(e.key) == key)
    }

    /// Bytes charged to this memtable.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes + self.garbage
    }

    /// Inserts or replaces (a replaced value's buffer is reused); `overhead` is charged per
    /// new entry on top of its bytes.
    pub(crate) fn insert(&mut self, key: &[u8], value: &[u8], overhead: u64) {
        let vlen = value.len() as u64;
        let hash = self.hash(key);
        let arena = &mut self.arena;
        if let Some(old) = self.entries.find_mut(hash, |e| arena.get(e.key) == key) {
            self.bytes = self.bytes - u64::from(old.value.len) + vlen;
            if let Some(span) = arena.overwrite(old.value, old.room, value) {
                old.value = span;
            } else {
                // Larger than its old room: the new value goes to the arena's end (the old
                // bytes stay there until the memtable is dropped).
                self.garbage += u64::from(old.room);
                old.value = arena.alloc(value);
                old.room = old.value.len;
            }
            return;
        }
        self.bytes += key.len() as u64 + vlen + overhead;
        match key.first().copied() {
            Some(kind) if is_listing_kind(kind) => {
                self.bytes += key.len() as u64 + LISTING_OVERHEAD;
                self.listing.insert(key.to_vec());
            }
            Some(KIND_VERSION) if key.len() == VERSION_KEY_LEN => {
                if let Some((prefix, version)) = split_version_key(key) {
                    self.bytes += VERSION_ENTRY_OVERHEAD;
                    let list = self.versions.entry(prefix).or_insert_with(|| {
                        self.bytes += VERSION_LIST_OVERHEAD;
                        Vec::new()
                    });
                    match list.last() {
                        Some(&last) if last >= version => {
                            // Out of order (an aggregate recreated with lower versions):
                            // keep the list sorted. The key is new, so it is not in it.
                            let at = list.partition_point(|&v| v < version);
                            list.insert(at, version);
                        }
                        _ => list.push(version),
                    }
                }
            }
            Some(kind) => self.mark_other(kind),
            None => self.mark_other(0),
        }
        let entry = Entry {
            key: self.arena.alloc(key),
            value: self.arena.alloc(value),
            room: u32::try_from(value.len()).expect("memtable item fits u32"),
        };
        let (arena, hasher) = (&self.arena, &self.hasher);
        self.entries
            .insert_unique(hash, entry, |e| hasher.hash_one(arena.get(e.key)));
    }

    fn mark_other(&mut self, kind: u8) {
        self.other_kinds[usize::from(kind >> 6)] |= 1 << (kind & 63);
    }

    fn has_other(&self, kind: u8) -> bool {
        self.other_kinds[usize::from(kind >> 6)] & (1 << (kind & 63)) != 0
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.find(key).map(|e| self.arena.get(e.value))
    }

    /// The first `limit` entries with keys in `[start, end)`, in key order.
    pub(crate) fn range(&self, start: &[u8], end: &[u8], limit: usize) -> Vec<(Vec<u8>, Bytes)> {
        if limit == 0 || start >= end {
            return Vec::new();
        }
        let mut keys: Vec<Vec<u8>> = self
            .listing
            .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
            .take(limit)
            .cloned()
            .collect();
        if range_touches_kind(start, end, KIND_VERSION) {
            self.version_keys(start, end, limit, &mut keys);
        }
        if self.other_kinds != [0; 4] {
            // Keys of other shapes (version-kind keys of another length, empty keys) live
            // here too; kind 0 also stands for the empty key, which only a scan from the
            // empty key covers.
            let touched = (0..=u8::MAX)
                .any(|k| self.has_other(k) && range_touches_kind(start, end, k))
                || (self.has_other(0) && start.is_empty());
            if touched {
                keys.extend(
                    self.keys()
                        .filter(|k| {
                            let kind = k.first().copied();
                            let ordered = kind.is_some_and(is_listing_kind)
                                || (kind == Some(KIND_VERSION) && k.len() == VERSION_KEY_LEN);
                            !ordered && *k >= start && *k < end
                        })
                        .map(<[u8]>::to_vec),
                );
            }
        }
        keys.sort_unstable();
        keys.truncate(limit);
        keys.into_iter()
            .map(|k| {
                let v = Bytes::copy_from_slice(self.get(&k).expect("a listed key has an entry"));
                (k, v)
            })
            .collect()
    }

    /// Adds the version keys in `[start, end)` (at least the first `limit` of them) to `out`.
    fn version_keys(&self, start: &[u8], end: &[u8], limit: usize, out: &mut Vec<Vec<u8>>) {
        let same_prefix = start.len() >= VERSION_PREFIX_LEN
            && end.len() >= VERSION_PREFIX_LEN
            && start[0] == KIND_VERSION
            && start[..VERSION_PREFIX_LEN] == end[..VERSION_PREFIX_LEN];
        if same_prefix {
            // One aggregate's versions (the read path): walk its sorted list.
            let mut prefix = [0u8; VERSION_PREFIX_LEN - 1];
            prefix.copy_from_slice(&start[1..VERSION_PREFIX_LEN]);
            let Some(list) = self.versions.get(&prefix) else {
                return;
            };
            let from = match split_version_key(start) {
                Some((_, v)) => list.partition_point(|&x| x < v),
                // A shorter or longer start key: find the first version key at or after it.
                None => list.partition_point(|&x| version_key(&prefix, x).as_slice() < start),
            };
            // Ascending, so the first `limit` in range are all the result can use.
            for &v in list[from..].iter().take(limit) {
                let k = version_key(&prefix, v);
                if k.as_slice() >= end {
                    break;
                }
                out.push(k);
            }
            return;
        }
        // A scan across aggregates (tests, fuzzing): every version key, filtered.
        for (prefix, list) in &self.versions {
            for &v in list {
                let k = version_key(prefix, v);
                if k.as_slice() >= start && k.as_slice() < end {
                    out.push(k);
                }
            }
        }
    }

    /// Every entry in key order (for writing the memtable as a run).
    pub(crate) fn sorted(&self) -> Vec<(&[u8], &[u8])> {
        let mut all: Vec<(&[u8], &[u8])> = self
            .entries
            .iter()
            .map(|e| (self.arena.get(e.key), self.arena.get(e.value)))
            .collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all
    }

    /// Every key (unordered).
    pub(crate) fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.entries.iter().map(|e| self.arena.get(e.key))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            // Version keys of a few aggregates (shape-exact).
            (0u8..3, 0u64..40).prop_map(|(a, v)| {
                let mut k = vec![KIND_VERSION];
                k.extend_from_slice(&[a; VERSION_PREFIX_LEN - 1]);
                k.extend_from_slice(&v.to_be_bytes());
                k
            }),
            // Listing keys.
            (
                prop::sample::select(vec![KIND_ORG, KIND_TYPE, KIND_AGG]),
                any::<[u8; 3]>()
            )
                .prop_map(|(kind, rest)| {
                    let mut k = vec![kind];
                    k.extend_from_slice(&rest);
                    k
                }),
            // Anything else: marks, schemas, odd shapes, short keys.
            prop::collection::vec(any::<u8>(), 0..6),
            (0u8..3).prop_map(|a| {
                let mut k = vec![KIND_VERSION];
                k.extend_from_slice(&[a; 10]);
                k
            }),
        ]
    }

    proptest! {
        /// The memtable behaves as a sorted map: lookups, bounded range scans (in every
        /// shape the index issues, and arbitrary ones) and the sorted flush order.
        #[test]
        fn matches_a_sorted_map(
            inserts in prop::collection::vec((key_strategy(), prop::collection::vec(any::<u8>(), 0..4)), 0..200),
            scans in prop::collection::vec((key_strategy(), key_strategy(), 0usize..50), 0..20),
        ) {
            let mut m = Memtable::default();
            let mut model = BTreeMap::new();
            for (k, v) in inserts {
                m.insert(&k, &v, 64);
                model.insert(k, v);
            }
            prop_assert_eq!(m.is_empty(), model.is_empty());
            let mut prefixes = std::collections::HashSet::new();
            let bytes: u64 = model
                .iter()
                .map(|(k, v)| {
                    let mut b = (k.len() + v.len()) as u64 + 64;
                    if k.first().copied().is_some_and(is_listing_kind) {
                        b += k.len() as u64 + LISTING_OVERHEAD;
                    }
                    if let Some((prefix, _)) = split_version_key(k) {
                        b += VERSION_ENTRY_OVERHEAD;
                        if prefixes.insert(prefix) {
                            b += VERSION_LIST_OVERHEAD;
                        }
                    }
                    b
                })
                .sum();
            prop_assert_eq!(m.bytes() - m.garbage, bytes);
            for (k, v) in &model {
                prop_assert_eq!(m.get(k), Some(v.as_slice()));
            }
            let sorted: Vec<(&[u8], &[u8])> =
                model.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
            prop_assert_eq!(m.sorted(), sorted);
            for (a, b, limit) in scans {
                let want: Vec<(Vec<u8>, Bytes)> = if a >= b {
                    Vec::new()
                } else {
                    model
                        .range::<[u8], _>((Bound::Included(a.as_slice()), Bound::Excluded(b.as_slice())))
                        .take(limit)
                        .map(|(k, v)| (k.clone(), Bytes::copy_from_slice(v)))
                        .collect()
                };
                prop_assert_eq!(m.range(&a, &b, limit), want);
            }
        }
    }

    #[test]
    fn values_larger_than_a_chunk_and_growing_replacements_read_back() {
        let mut m = Memtable::default();
        let big = vec![7u8; CHUNK_BYTES + 10];
        let mut model = BTreeMap::new();
        for i in 0u32..3_000 {
            let key = i.to_be_bytes();
            // Small values, then every third key replaced by a larger one (no longer fits its
            // room), every fifth by a smaller one, and one value bigger than a chunk.
            m.insert(&key, &[1; 100], 0);
            model.insert(key.to_vec(), vec![1u8; 100]);
        }
        for i in (0u32..3_000).step_by(3) {
            let value = vec![u8::try_from(i % 251).unwrap(); 300];
            m.insert(&i.to_be_bytes(), &value, 0);
            model.insert(i.to_be_bytes().to_vec(), value);
        }
        for i in (0u32..3_000).step_by(5) {
            m.insert(&i.to_be_bytes(), &[2; 3], 0);
            model.insert(i.to_be_bytes().to_vec(), vec![2; 3]);
        }
        m.insert(b"big", &big, 0);
        model.insert(b"big".to_vec(), big);
        assert!(m.arena.chunks.len() > 2, "the entries span several chunks");
        for (k, v) in &model {
            assert_eq!(m.get(k), Some(v.as_slice()));
        }
        let sorted: Vec<(&[u8], &[u8])> = model
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        assert_eq!(m.sorted(), sorted);
        let bytes: u64 = model.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
        assert_eq!(m.bytes() - m.garbage, bytes);
        assert_eq!(
            m.garbage,
            1_000 * 100,
            "the values that outgrew their room are charged"
        );
        // A dropped memtable's chunks serve the next one, cleared.
        drop(m);
        let mut next = Memtable::default();
        next.insert(b"k", b"v", 0);
        assert_eq!(next.get(b"k"), Some(b"v".as_slice()));
        assert_eq!(next.arena.chunks[0].len(), 2);
    }

    #[test]
    fn versions_out_of_order_stay_sorted() {
        let mut m = Memtable::default();
        let key = |v: u64| {
            let mut k = vec![KIND_VERSION];
            k.extend_from_slice(&[7; VERSION_PREFIX_LEN - 1]);
            k.extend_from_slice(&v.to_be_bytes());
            k
        };
        for v in [5, 6, 7, 1, 2, 9] {
            m.insert(&key(v), &[], 0);
        }
        let mut end = key(u64::MAX);
        end.push(0);
        let got: Vec<Vec<u8>> = m
            .range(&key(0), &end, 100)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(got, [1, 2, 5, 6, 7, 9].map(key).to_vec());
        let got: Vec<Vec<u8>> = m
            .range(&key(2), &key(7), 2)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(got, [2, 5].map(key).to_vec());
    }
}
