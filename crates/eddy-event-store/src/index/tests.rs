//! Index tests: lookups, scans, flushes, merges, crashes and rebuilds.

use super::*;
use eddy_log::MemBackend;

use super::format::le_u32;
use super::run::Bloom;

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
        index.apply(&entries.into_iter().collect(), seq, false);
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
    index.apply(&[(key(1), vec![1])].into_iter().collect(), 1, false);
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
