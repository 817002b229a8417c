//! Fuzz entry points (one line per target in `fuzz/fuzz_targets/storage_*.rs`), also replayed
//! over the committed corpus by this crate's own tests.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::cache::Cache;
use crate::file::{MemBackend, StorageBackend};
use crate::format::{
    decode_index_header, decode_segment_header, encode_index_header, encode_segment_header,
    index_file_name, segment_file_name, IndexEntry, IndexKind, RecordHeader, SEGMENT_HEADER_LEN,
};
use crate::log::{Log, LogConfig, OpenOptions, VerifyOnOpen};
use crate::pool::CommitPool;

fn pool() -> &'static CommitPool {
    static POOL: OnceLock<CommitPool> = OnceLock::new();
    POOL.get_or_init(|| CommitPool::new(1).expect("spawn one fuzzing writer thread"))
}

/// Recovery over arbitrary segment and index bytes.
///
/// Byte 0 picks the mode: bit 0 set prefixes a valid segment header to the segment bytes (so
/// the fuzzer spends its time in the record walk), bit 1 selects tail verification, bit 2
/// asks for repair. Byte 1 splits the rest into segment bytes and index bytes (index gets a
/// valid header prefix when bit 3 is set). Whatever the input: no panic; if the log opens, every
/// visible record reads back and verifies, an append works, and a second open finds nothing to
/// repair.
pub fn fuzz_log_recovery(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Some((&split, rest)) = rest.split_first() else {
        return;
    };
    let split = (usize::from(split) * rest.len() / 255).min(rest.len());
    let (segment_bytes, index_bytes) = rest.split_at(split);

    let backend = MemBackend::new();
    let dir = Path::new("log");
    if backend.create_dir_all(dir).is_err() {
        return;
    }
    let mut segment = Vec::new();
    if mode & 1 != 0 {
        segment.extend_from_slice(&encode_segment_header(0));
    }
    segment.extend_from_slice(segment_bytes);
    backend.write_file(&dir.join(segment_file_name(0)), &segment);
    if !index_bytes.is_empty() {
        let mut index = Vec::new();
        if mode & 8 != 0 {
            index.extend_from_slice(&encode_index_header(0));
        }
        index.extend_from_slice(index_bytes);
        backend.write_file(&dir.join(index_file_name(0)), &index);
    }
    let config = LogConfig {
        segment_size: 1 << 20,
        index_interval: 64,
        verify_on_open: if mode & 2 != 0 {
            VerifyOnOpen::Tail
        } else {
            VerifyOnOpen::Full
        },
        repair: mode & 4 != 0,
        ..LogConfig::default()
    };
    let cache = Arc::new(Cache::new(1 << 20));
    let open = || {
        Log::open(
            Arc::new(backend.clone()),
            dir,
            config,
            pool(),
            Arc::clone(&cache),
            OpenOptions::default(),
        )
    };
    let Ok((log, _)) = open() else {
        return;
    };
    let bounds = log.bounds();
    let records = log
        .read(bounds.first, u64::MAX, u64::MAX)
        .expect("records that survived recovery read back");
    let mut next = bounds.first;
    for r in &records {
        assert_eq!(r.meta.seq, next, "contiguous");
        next = r.meta.end_seq();
    }
    assert_eq!(next, bounds.next);
    let appended = log
        .append_with(1, 0, 0, |_| Ok(Bytes::from_static(b"after")))
        .expect("append queued")
        .wait()
        .expect("append after recovery");
    assert_eq!(appended.seq, bounds.next);
    drop(log);
    let (_, report) = open().expect("a recovered log reopens");
    assert!(
        report.torn_tail.is_none() && report.repairs.is_empty(),
        "{report:?}"
    );
}

/// Decoders of every on-disk structure of the log: no panic, and whatever decodes re-encodes
/// to the same bytes. (The `storage_decoders` target also runs the stream store's metadata
/// decoders over the same input.)
pub fn fuzz_decoders(data: &[u8]) {
    if let Ok(header) = RecordHeader::decode(data, u64::MAX) {
        assert_eq!(
            &header.encode()[..],
            &data[..crate::format::RECORD_HEADER_LEN]
        );
    }
    if let Ok(entry) = IndexEntry::decode(data) {
        assert_eq!(&entry.encode()[..], &data[..crate::format::INDEX_ENTRY_LEN]);
    }
    if let Ok(base) = decode_segment_header(data) {
        assert_eq!(
            &encode_segment_header(base)[..],
            &data[..SEGMENT_HEADER_LEN]
        );
    }
    if let Ok(base) = decode_index_header(data) {
        assert_eq!(
            &encode_index_header(base)[..],
            &data[..crate::format::INDEX_HEADER_LEN]
        );
    }
}

/// Seed inputs built from real encodings: (file name, bytes) for
/// `fuzz/corpus/storage_log_recovery/`.
pub fn log_recovery_seeds() -> Vec<(String, Vec<u8>)> {
    let mut records = Vec::new();
    let mut index = Vec::new();
    let mut pos = SEGMENT_HEADER_LEN as u64;
    let mut seq = 0u64;
    for (i, payload) in [&b"first"[..], b"second record", b"", b"fourth"]
        .iter()
        .enumerate()
    {
        let header = RecordHeader {
            payload_len: payload.len() as u32,
            count: 1 + i as u32,
            seq,
            timestamp: 1_000 + i as u64,
            synced_len: if i < 2 {
                SEGMENT_HEADER_LEN as u64
            } else {
                pos
            },
            tag: 0,
            payload_crc: crc32c::crc32c(payload),
        };
        index.extend_from_slice(
            &IndexEntry {
                seq,
                timestamp: header.timestamp,
                position: pos,
                kind: IndexKind::Record,
            }
            .encode(),
        );
        records.extend_from_slice(&header.encode());
        records.extend_from_slice(payload);
        pos += header.record_len();
        seq = header.end_seq();
    }
    let split_byte = |segment_len: usize, total: usize| -> u8 {
        u8::try_from((segment_len * 255).div_ceil(total.max(1))).unwrap_or(255)
    };
    let mut seeds = Vec::new();
    // Whole log, header prefixed, index with header.
    let mut whole = vec![1 | 8, 0];
    whole[1] = split_byte(records.len(), records.len() + index.len());
    whole.extend_from_slice(&records);
    whole.extend_from_slice(&index);
    seeds.push(("whole-with-index".to_owned(), whole));
    // Torn tail.
    let mut torn = vec![1, 255];
    torn.extend_from_slice(&records[..records.len() - 3]);
    seeds.push(("torn-tail".to_owned(), torn));
    // Interior damage, tail verification and repair.
    let mut damaged = vec![1 | 2 | 4, 255];
    damaged.extend_from_slice(&records);
    damaged[2 + 48 + 2] ^= 0xff;
    seeds.push(("interior-damage-repair".to_owned(), damaged));
    // A complete segment file, header included, no prefix.
    let mut raw = vec![0, 255];
    raw.extend_from_slice(&encode_segment_header(0));
    raw.extend_from_slice(&records);
    seeds.push(("raw-segment".to_owned(), raw));
    // Zero-filled index.
    let mut zeros = vec![1 | 8, 0];
    zeros[1] = split_byte(records.len(), records.len() + 64);
    zeros.extend_from_slice(&records);
    zeros.extend_from_slice(&[0u8; 64]);
    seeds.push(("zero-index".to_owned(), zeros));
    seeds
}

/// Seed inputs for `fuzz/corpus/storage_decoders/`.
pub fn decoder_seeds() -> Vec<(String, Vec<u8>)> {
    let header = RecordHeader {
        payload_len: 3,
        count: 2,
        seq: 7,
        timestamp: 9,
        synced_len: 32,
        tag: 1,
        payload_crc: crc32c::crc32c(b"abc"),
    };
    vec![
        ("record-header".to_owned(), header.encode().to_vec()),
        (
            "index-entry".to_owned(),
            IndexEntry {
                seq: 1,
                timestamp: 2,
                position: 32,
                kind: IndexKind::Seal,
            }
            .encode()
            .to_vec(),
        ),
        (
            "segment-header".to_owned(),
            encode_segment_header(3).to_vec(),
        ),
        ("index-header".to_owned(), encode_index_header(3).to_vec()),
    ]
}

/// Replays a committed fuzz corpus `corpus_root/target` through `check`, after the `seeds`
/// (which it first writes into the corpus when `EDDY_WRITE_FUZZ_SEEDS` is set); fails when
/// the corpus holds fewer files than there are seeds. Every crate with fuzz targets calls this
/// from its tests, so plain `cargo test` replays every corpus without libfuzzer.
pub fn replay_corpus(
    corpus_root: &Path,
    target: &str,
    seeds: &[(String, Vec<u8>)],
    check: fn(&[u8]),
) {
    let dir = corpus_root.join(target);
    if std::env::var_os("EDDY_WRITE_FUZZ_SEEDS").is_some() {
        std::fs::create_dir_all(&dir).expect("create the corpus directory");
        for (name, bytes) in seeds {
            std::fs::write(dir.join(name), bytes).expect("write a seed");
        }
    }
    for (_, bytes) in seeds {
        check(bytes);
    }
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
    {
        let path = entry.expect("a corpus entry").path();
        check(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
        replayed += 1;
    }
    assert!(
        replayed >= seeds.len(),
        "corpus of {target} is missing seeds"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn corpus() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
    }

    #[test]
    fn replay_log_recovery_corpus() {
        replay_corpus(
            &corpus(),
            "storage_log_recovery",
            &log_recovery_seeds(),
            fuzz_log_recovery,
        );
    }

    #[test]
    fn replay_decoders_corpus() {
        replay_corpus(
            &corpus(),
            "storage_decoders",
            &decoder_seeds(),
            fuzz_decoders,
        );
    }

    #[test]
    fn recovery_survives_every_prefix_of_a_seed() {
        let seeds = log_recovery_seeds();
        let whole = &seeds[3].1;
        for cut in 0..whole.len() {
            fuzz_log_recovery(&whole[..cut]);
        }
    }
}
