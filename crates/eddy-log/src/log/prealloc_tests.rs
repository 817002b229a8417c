//! Preallocated active segments: zeros ahead of the records, cut at a seal, a close and a
//! reopen, never mistaken for a torn write or for data.

use std::path::Path;
use std::sync::Arc;

use super::tests::{payload, read_all, small, Harness};
use super::*;
use crate::cache::Cache;
use crate::error::LogError;
use crate::file::{FsBackend, MemBackend, StorageBackend};
use crate::format::{segment_file_name, SEGMENT_HEADER_LEN};
use crate::pool::CommitPool;

fn append(log: &Log, n: u64, len: usize) -> Vec<RecordMeta> {
    (0..n)
        .map(|_| {
            log.append_with(1, 0, 1000, |a| Ok(payload(a.seq, len)))
                .unwrap()
                .wait()
                .unwrap()
        })
        .collect()
}

fn check(log: &Log, n: usize, len: usize) {
    let records = read_all(log);
    assert_eq!(records.len(), n);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.meta.seq, i as u64);
        assert_eq!(r.payload, payload(i as u64, len));
    }
}

fn file_len(mem: &MemBackend, base: u64) -> usize {
    mem.read_file(&Path::new("log").join(segment_file_name(base)))
        .expect("segment file")
        .len()
}

#[test]
fn a_crash_leaves_zeros_after_the_records_which_reopen_cuts_without_reporting_a_tear() {
    let h = Harness::new(LogConfig {
        segment_size: 1 << 20,
        preallocate: 64 * 1024,
        ..small()
    });
    let (log, _) = h.open().unwrap();
    let metas = append(&log, 20, 50);
    let end = log.segments()[0].bytes;
    drop(log);
    h.mem.crash();
    // The synced preallocation survives the crash as zeros past the last record.
    assert_eq!(file_len(&h.mem, 0), 64 * 1024 + SEGMENT_HEADER_LEN);
    let (log, report) = h.open().unwrap();
    assert!(report.torn_tail.is_none(), "{report:?}");
    assert_eq!(
        report.zero_tail_bytes,
        (64 * 1024 + SEGMENT_HEADER_LEN) as u64 - end
    );
    check(&log, 20, 50);
    assert_eq!(metas.last().unwrap().seq, 19);
    // Appends continue at the records' end, not after the zeros.
    append(&log, 5, 50);
    drop(log);
    h.mem.crash();
    let (log, report) = h.open().unwrap();
    assert!(report.torn_tail.is_none(), "{report:?}");
    check(&log, 25, 50);
}

#[test]
fn tail_verification_cuts_the_zeros_too() {
    let h = Harness::new(LogConfig {
        segment_size: 1 << 20,
        preallocate: 64 * 1024,
        index_interval: 100,
        verify_on_open: VerifyOnOpen::Tail,
        ..small()
    });
    let (log, _) = h.open().unwrap();
    append(&log, 30, 40);
    drop(log);
    h.mem.crash();
    let (log, report) = h.open().unwrap();
    assert!(report.torn_tail.is_none(), "{report:?}");
    assert!(report.zero_tail_bytes > 0, "{report:?}");
    check(&log, 30, 40);
}

#[test]
fn a_write_torn_inside_the_preallocated_space_is_still_a_torn_tail() {
    let h = Harness::new(LogConfig {
        segment_size: 1 << 20,
        preallocate: 64 * 1024,
        durability: Durability::Background {
            max_unsynced_records: 1000,
            max_unsynced_bytes: 1 << 30,
        },
        ..small()
    });
    let (log, _) = h.open().unwrap();
    append(&log, 3, 50);
    log.flush().wait().unwrap();
    append(&log, 1, 50); // written, not synced
    drop(log);
    // Half of the last record reached the disk; the zeros follow it.
    h.mem
        .crash_with(|_, unsynced| unsynced[..unsynced.len() / 2].to_vec());
    let (log, report) = h.open().unwrap();
    assert!(report.torn_tail.is_some(), "{report:?}");
    check(&log, 3, 50);
}

#[test]
fn sealed_segments_and_a_closed_log_end_at_their_last_record() {
    let h = Harness::new(LogConfig {
        segment_size: 4096,
        preallocate: 64 * 1024,
        ..small()
    });
    let (log, _) = h.open().unwrap();
    append(&log, 100, 100);
    let segments = log.segments();
    assert!(segments.len() > 2);
    for seg in &segments[..segments.len() - 1] {
        assert_eq!(file_len(&h.mem, seg.base) as u64, seg.bytes, "{seg:?}");
    }
    // The active one holds zeros past its records, up to the segment size...
    let active = segments.last().unwrap();
    let before = h.mem.used_bytes();
    // ...until the log is closed.
    log.close().unwrap();
    assert_eq!(before - h.mem.used_bytes(), 4096 - active.bytes);
    drop(log);
    h.mem.crash();
    let (log, report) = h.open().unwrap();
    assert_eq!(report.zero_tail_bytes, 0);
    check(&log, 100, 100);
}

#[test]
fn a_full_disk_takes_what_fits_in_the_preallocated_space_then_refuses() {
    let h = Harness::new(LogConfig {
        segment_size: 1 << 20,
        preallocate: 16 * 1024,
        ..small()
    });
    let (log, _) = h.open().unwrap();
    append(&log, 1, 100);
    h.mem.set_capacity(Some(h.mem.used_bytes()));
    // The space is already the log's: records keep landing in it...
    let mut acked = 1;
    let refused = loop {
        match log
            .append_with(1, 0, 1000, |a| Ok(payload(a.seq, 100)))
            .unwrap()
            .wait()
        {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 1000, "the disk never filled");
    };
    // ...until it is used up: then the write is refused, and nothing acknowledged is lost.
    assert!(matches!(refused, LogError::NoSpace { .. }), "{refused:?}");
    assert!(acked > 50, "{acked}");
    assert!(log.failure().is_none());
    drop(log);
    h.mem.crash();
    let (log, _) = h.open().unwrap();
    check(&log, acked, 100);
}

#[test]
fn real_files_are_preallocated_and_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn StorageBackend> = Arc::new(FsBackend::new(dir.path()).unwrap());
    let pool = CommitPool::new(1).unwrap();
    let config = LogConfig {
        preallocate: 256 * 1024,
        ..LogConfig::default()
    };
    let open = || {
        Log::open(
            Arc::clone(&backend),
            "log",
            config,
            &pool,
            Arc::new(Cache::new(1 << 20)),
            OpenOptions::default(),
        )
        .unwrap()
    };
    let path = dir.path().join("log").join(segment_file_name(0));
    let (log, _) = open();
    append(&log, 10, 200);
    let bytes = log.segments()[0].bytes;
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        SEGMENT_HEADER_LEN as u64 + 256 * 1024
    );
    // Killed without a close: the zeros stay, and the next open cuts them.
    drop(log);
    let (log, report) = open();
    assert!(report.torn_tail.is_none(), "{report:?}");
    assert_eq!(
        report.zero_tail_bytes,
        SEGMENT_HEADER_LEN as u64 + 256 * 1024 - bytes
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes);
    check(&log, 10, 200);
    append(&log, 1, 200);
    log.close().unwrap();
    drop(log);
    let (log, report) = open();
    assert_eq!(report.zero_tail_bytes, 0);
    check(&log, 11, 200);
    let stored = log.read(10, 1, u64::MAX).unwrap();
    assert_eq!(stored[0].payload, payload(10, 200));
}
