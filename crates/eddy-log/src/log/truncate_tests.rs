//! Tests of [`Log::truncate_from`]: cuts in the active segment, across sealed segments, at
//! segment boundaries and in gaps; refusals; ordering with appends; readers during cuts; a
//! model-based property test with reopens and crashes; and crashes at every step of a cut.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;

use super::tests::{payload, read_all, small, CrashAt, Harness};
use super::*;
use crate::cache::Cache;
use crate::completion::Completion;
use crate::error::LogError;
use crate::file::{MemBackend, StorageBackend};
use crate::pool::CommitPool;

/// The payload of the record at `seq` written in generation `gen` (so a test can tell a
/// record dropped by a cut from the one appended in its place).
fn versioned(seq: u64, generation: u8, len: usize) -> Bytes {
    let mut v = payload(seq, len).to_vec();
    if let Some(first) = v.first_mut() {
        *first = generation;
    }
    Bytes::from(v)
}

/// Appends `n` one-sequence records of generation `gen` at timestamps `ts, ts+1, ..`.
fn append(log: &Log, n: u64, generation: u8, ts: u64) -> Vec<RecordMeta> {
    (0..n)
        .map(|i| {
            log.append_with(1, u32::from(generation), ts + i, |a| {
                Ok(versioned(a.seq, generation, 40))
            })
            .unwrap()
            .wait()
            .unwrap()
        })
        .collect()
}

/// (seq, generation) of every readable record.
fn contents(log: &Log) -> Vec<(u64, u8)> {
    read_all(log)
        .iter()
        .map(|r| {
            assert_eq!(r.payload, versioned(r.meta.seq, r.payload[0], 40));
            (r.meta.seq, r.payload[0])
        })
        .collect()
}

fn expect(ranges: &[(std::ops::Range<u64>, u8)]) -> Vec<(u64, u8)> {
    ranges
        .iter()
        .flat_map(|(r, g)| r.clone().map(move |s| (s, *g)))
        .collect()
}

#[test]
fn a_cut_in_the_active_segment_drops_the_suffix_and_appends_continue_there() {
    let h = Harness::new(LogConfig::default());
    let (log, _) = h.open().unwrap();
    append(&log, 10, 1, 100);
    let fsyncs = log.stats().fsyncs;
    log.truncate_from(6).wait().unwrap();
    assert_eq!(log.stats().fsyncs, fsyncs + 1, "one fdatasync");
    assert_eq!(log.bounds().next, 6);
    assert_eq!(log.next_seq_to_assign(), 6);
    assert_eq!(contents(&log), expect(&[(0..6, 1)]));
    assert!(log.read_record(6).unwrap().is_none());
    assert_eq!(log.last_timestamp(), 109, "timestamps never go back");
    append(&log, 3, 2, 0);
    assert_eq!(contents(&log), expect(&[(0..6, 1), (6..9, 2)]));
    drop(log);
    h.mem.crash();
    let (log, report) = h.open().unwrap();
    assert_eq!(report.torn_tail, None);
    assert_eq!(contents(&log), expect(&[(0..6, 1), (6..9, 2)]));
    // Cutting everything leaves an empty log at the same place.
    log.truncate_from(0).wait().unwrap();
    assert_eq!(contents(&log), []);
    assert_eq!(log.bounds().next, 0);
    append(&log, 2, 3, 0);
    assert_eq!(contents(&log), expect(&[(0..2, 3)]));
}

#[test]
fn a_cut_across_sealed_segments_removes_later_ones_and_starts_a_segment_at_the_cut() {
    let h = Harness::new(small());
    let (mut log, _) = h.open().unwrap();
    append(&log, 60, 1, 100);
    let before = log.segments();
    assert!(before.len() >= 5, "{before:?}");
    let held = before[1];
    let cut = held.base + (held.end - held.base) / 2;
    log.truncate_from(cut).wait().unwrap();
    let after = log.segments();
    assert_eq!(after.len(), 3, "{after:?}");
    assert_eq!(after[0], before[0]);
    assert_eq!(
        (after[1].base, after[1].end, after[1].sealed),
        (held.base, cut, true)
    );
    assert_eq!(after[1].max_timestamp, Some(100 + cut - 1));
    assert_eq!(
        (after[2].base, after[2].end, after[2].sealed),
        (cut, cut, false)
    );
    assert!(!h
        .mem
        .exists(&std::path::Path::new("log").join(truncate::INTENT_FILE)));
    assert_eq!(contents(&log), expect(&[(0..cut, 1)]));
    for seq in 0..cut {
        assert_eq!(log.read_record(seq).unwrap().unwrap().meta.seq, seq);
    }
    assert_eq!(log.seq_at_timestamp(100 + cut - 1).unwrap(), Some(cut - 1));
    assert_eq!(log.seq_at_timestamp(100 + cut).unwrap(), None);
    append(&log, 30, 2, 0);
    let want = expect(&[(0..cut, 1), (cut..cut + 30, 2)]);
    assert_eq!(contents(&log), want);
    for verify in [VerifyOnOpen::Full, VerifyOnOpen::Tail] {
        drop(log);
        let config = LogConfig {
            verify_on_open: verify,
            ..small()
        };
        let (reopened, report) = Log::open(
            Arc::new(h.mem.clone()),
            "log",
            config,
            &h.pool,
            Arc::new(Cache::new(1 << 20)),
            OpenOptions::default(),
        )
        .unwrap();
        assert!(
            report.repairs.is_empty() && report.torn_tail.is_none(),
            "{report:?}"
        );
        assert_eq!(contents(&reopened), want, "{verify:?}");
        log = reopened;
    }
}

#[test]
fn cuts_at_a_segment_base_and_at_the_first_record_remove_that_segment_too() {
    let h = Harness::new(small());
    let (log, _) = h.open().unwrap();
    append(&log, 40, 1, 0);
    let segs = log.segments();
    log.truncate_from(segs[2].base).wait().unwrap();
    let after = log.segments();
    assert_eq!(after.len(), 3);
    assert_eq!(after[..2], segs[..2]);
    assert_eq!(after[2].base, segs[2].base);
    assert_eq!(contents(&log), expect(&[(0..segs[2].base, 1)]));
    log.truncate_from(0).wait().unwrap();
    assert_eq!(log.segments().len(), 1);
    assert_eq!(
        log.bounds(),
        LogBounds {
            first: 0,
            next: 0,
            bytes: 32,
            segments: 1
        }
    );
    append(&log, 3, 2, 0);
    assert_eq!(contents(&log), expect(&[(0..3, 2)]));
}

#[test]
fn a_cut_in_a_gap_between_segments_continues_at_the_cut() {
    let h = Harness::new(small());
    let (log, _) = h.open().unwrap();
    append(&log, 5, 1, 0);
    drop(log);
    let (log, _) = h
        .open_with(OpenOptions {
            min_next_seq: 100,
            ..OpenOptions::default()
        })
        .unwrap();
    append(&log, 5, 2, 10);
    log.truncate_from(50).wait().unwrap();
    assert_eq!(log.bounds().next, 50);
    assert_eq!(contents(&log), expect(&[(0..5, 1)]));
    append(&log, 2, 3, 20);
    assert_eq!(contents(&log), expect(&[(0..5, 1), (50..52, 3)]));
    drop(log);
    let (log, _) = h.open().unwrap();
    assert_eq!(contents(&log), expect(&[(0..5, 1), (50..52, 3)]));
}

#[test]
fn a_cut_past_the_end_changes_nothing() {
    let h = Harness::new(small());
    let (log, _) = h.open().unwrap();
    append(&log, 5, 1, 0);
    let segments = log.segments();
    log.truncate_from(5).wait().unwrap();
    log.truncate_from(500).wait().unwrap();
    assert_eq!(log.segments(), segments);
    assert_eq!(append(&log, 1, 2, 0)[0].seq, 5);
}

#[test]
fn a_cut_inside_a_record_or_below_the_log_is_refused_with_what_queued_behind_it() {
    let h = Harness::new(small());
    let (log, _) = h.open().unwrap();
    for _ in 0..20 {
        log.append_with(2, 0, 0, |a| Ok(payload(a.seq, 40)))
            .unwrap()
            .wait()
            .unwrap();
    }
    let epoch = log.current_epoch();
    let cut = log.truncate_from(7);
    // Queued behind the cut, the append is refused with it; if the writer refused the cut
    // first, admission has rewound and refuses the append's sequence number itself.
    let behind = log
        .append_assigned(7, 0, 1, 0, Bytes::from_static(b"x"))
        .and_then(Completion::wait);
    assert!(matches!(
        cut.wait(),
        Err(LogError::BadTruncation { seq: 7, .. })
    ));
    assert!(
        matches!(
            behind,
            Err(LogError::BadTruncation { seq: 7, .. } | LogError::OutOfOrder { expected: 40, .. })
        ),
        "{behind:?}"
    );
    assert_eq!(log.current_epoch(), epoch + 1);
    assert_eq!(log.next_seq_to_assign(), 40, "admission rewound");
    assert_eq!(read_all(&log).len(), 20);
    // Below the first retained record (after retention): refused, nothing changes.
    log.delete_oldest_segments(1).unwrap();
    let first = log.bounds().first;
    assert!(first > 0);
    assert!(matches!(
        log.truncate_from(first - 2).wait(),
        Err(LogError::BadTruncation { .. })
    ));
    log.truncate_from(first).wait().unwrap();
    assert_eq!(log.bounds().next, first);
}

#[test]
fn a_cut_is_ordered_with_the_appends_around_it() {
    let h = Harness::new(small());
    let (log, _) = h.open().unwrap();
    // Queued without waiting: ten appends, a cut at 4, five appends from 4 on.
    let mut acks = Vec::new();
    for i in 0..10u64 {
        acks.push(
            log.append_with(1, 0, i, |a| Ok(versioned(a.seq, 1, 40)))
                .unwrap(),
        );
    }
    let cut = log.truncate_from(4);
    for i in 0..5u64 {
        acks.push(
            log.append_with(1, 0, i, |a| Ok(versioned(a.seq, 2, 40)))
                .unwrap(),
        );
    }
    let seqs: Vec<u64> = acks.into_iter().map(|a| a.wait().unwrap().seq).collect();
    cut.wait().unwrap();
    assert_eq!(seqs, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 4, 5, 6, 7, 8]);
    assert_eq!(contents(&log), expect(&[(0..4, 1), (4..9, 2)]));
}

#[test]
fn background_durability_cut_makes_everything_below_it_durable() {
    let h = Harness::new(LogConfig {
        durability: Durability::Background {
            max_unsynced_records: 1000,
            max_unsynced_bytes: 1 << 30,
        },
        ..LogConfig::default()
    });
    let (log, _) = h.open().unwrap();
    append(&log, 10, 1, 0);
    log.truncate_from(7).wait().unwrap();
    append(&log, 3, 2, 0); // unsynced
    drop(log);
    h.mem.crash();
    let (log, _) = h.open().unwrap();
    assert_eq!(contents(&log), expect(&[(0..7, 1)]));
}

/// A cut whose fdatasync fails fail-stops the log, but the file is cut by then: reads below
/// the cut must keep working (found by the simulator, seed 871 events heavy: a read sized by
/// the view's old length ran past the cut file's end, and the Raft engine panics on a failed
/// read of an entry it holds).
#[test]
fn reads_below_a_cut_whose_sync_failed_still_work() {
    // In the active segment.
    let h = Harness::new(LogConfig::default());
    let (log, _) = h.open().unwrap();
    append(&log, 10, 1, 100);
    h.mem.fail_syncs(1);
    assert!(log.truncate_from(6).wait().is_err());
    assert!(log.failure().is_some(), "a failed cut fail-stops the log");
    for seq in 0..6 {
        assert_eq!(log.read_record(seq).unwrap().unwrap().meta.seq, seq);
    }
    assert!(log.read_record(6).unwrap().is_none());
    assert_eq!(contents(&log), expect(&[(0..6, 1)]));
    drop(log);
    h.mem.crash();
    let (log, _) = h.open().unwrap();
    let kept = contents(&log);
    assert!(
        kept.len() <= 10 && kept.iter().all(|(_, g)| *g == 1),
        "{kept:?}"
    );

    // In a sealed segment, the sync of the segment holding the cut failing.
    let h = Harness::new(small());
    let (log, _) = h.open().unwrap();
    append(&log, 60, 1, 100);
    let held = log.segments()[1];
    let cut = held.base + (held.end - held.base) / 2;
    let held_file = crate::format::segment_file_name(held.base);
    h.mem.inject_faults(move |call, path| {
        (call == crate::file::FsCall::Sync && path.ends_with(&held_file))
            .then(|| crate::file::Errno::Io.error())
    });
    assert!(log.truncate_from(cut).wait().is_err());
    h.mem.inject_faults(|_, _| None);
    assert!(log.failure().is_some());
    for seq in 0..cut {
        assert_eq!(log.read_record(seq).unwrap().unwrap().meta.seq, seq);
    }
    drop(log);
    // The next open finishes the cut from its intent.
    let (log, _) = h.open().unwrap();
    assert_eq!(contents(&log), expect(&[(0..cut, 1)]));
}

#[test]
fn a_crash_after_a_cut_tears_only_what_was_appended_after_it() {
    // The cut is durable; the appends after it are not (background durability), and a
    // power cut tears them at every byte: what comes back is the records below the cut and
    // a prefix of the new ones, never a record the cut dropped.
    let config = LogConfig {
        durability: Durability::Background {
            max_unsynced_records: 1000,
            max_unsynced_bytes: 1 << 30,
        },
        ..small()
    };
    for crossing in [false, true] {
        let mut keep = 0usize;
        loop {
            let h = Harness::new(config);
            let (log, _) = h.open().unwrap();
            append(&log, 30, 1, 0);
            log.flush().wait().unwrap();
            let cut = if crossing {
                log.segments()[1].base + 1
            } else {
                28
            };
            log.truncate_from(cut).wait().unwrap();
            append(&log, 4, 2, 0);
            let mut longest = 0;
            h.mem.crash_with(|_, tail| {
                longest = longest.max(tail.len());
                tail[..keep.min(tail.len())].to_vec()
            });
            drop(log);
            let (log, _) = h.open().unwrap();
            let got = contents(&log);
            let kept_new = got.len() as u64 - cut;
            assert!(kept_new <= 4, "crossing {crossing}, keep {keep}: {got:?}");
            assert_eq!(
                got,
                expect(&[(0..cut, 1), (cut..cut + kept_new, 2)]),
                "crossing {crossing}, keep {keep}"
            );
            if keep >= longest {
                assert_eq!(kept_new, 4);
                break;
            }
            keep += 7;
        }
    }
}

/// Opens `mem`'s log with the crash-at-a-step backend in front.
fn open_crashing(mem: &MemBackend, crashing: &CrashAt, pool: &CommitPool) -> Log {
    let _ = mem;
    Log::open(
        Arc::new(crashing.clone()),
        "log",
        small(),
        pool,
        Arc::new(Cache::new(1 << 20)),
        OpenOptions::default(),
    )
    .unwrap()
    .0
}

#[test]
fn a_crash_at_any_step_of_a_cut_recovers_the_old_or_the_truncated_log() {
    for crossing in [false, true] {
        let mut completed = false;
        for n in 0..64 {
            let mem = MemBackend::new();
            let crashing = CrashAt::new(&mem);
            let pool = CommitPool::new(1).unwrap();
            let log = open_crashing(&mem, &crashing, &pool);
            append(&log, 40, 1, 0);
            let segments = log.segments().len();
            let cut = if crossing {
                log.segments()[1].base + 2
            } else {
                38
            };
            crashing.arm(n);
            let outcome = log.truncate_from(cut).wait();
            let crashed = crashing.crashed();
            assert!(outcome.is_ok() || crashed, "step {n}: {outcome:?}");
            drop(log);
            if !crashed {
                mem.crash();
            }
            let (log, report) = Log::open(
                Arc::new(mem.clone()),
                "log",
                small(),
                &pool,
                Arc::new(Cache::new(1 << 20)),
                OpenOptions::default(),
            )
            .unwrap();
            assert!(report.repairs.is_empty(), "step {n}: {report:?}");
            let got = contents(&log);
            let old = expect(&[(0..40, 1)]);
            let truncated = expect(&[(0..cut, 1)]);
            assert!(
                got == old || got == truncated,
                "crossing {crossing}, step {n}: {} records",
                got.len()
            );
            assert!(
                mem.file_paths().iter().all(|p| {
                    let name = p.to_string_lossy();
                    !name.ends_with(".tmp") && !name.ends_with(truncate::INTENT_FILE)
                }),
                "step {n}: leftovers {:?}",
                mem.file_paths()
            );
            // The reopened log takes appends where it ends, durably.
            let next = got.len() as u64;
            assert_eq!(append(&log, 1, 2, 0)[0].seq, next);
            drop(log);
            let (log, _) = Log::open(
                Arc::new(mem.clone()),
                "log",
                small(),
                &pool,
                Arc::new(Cache::new(1 << 20)),
                OpenOptions::default(),
            )
            .unwrap();
            assert_eq!(log.bounds().next, next + 1);
            if !crashed {
                assert_eq!(got, truncated);
                assert!(crossing || log.segments().len() == segments);
                completed = true;
                break;
            }
        }
        assert!(
            completed,
            "crossing {crossing}: the cut completes past its last step"
        );
    }
}

#[test]
fn readers_never_fail_while_cuts_and_appends_run() {
    let h = Harness::new(small());
    let (log, _) = h.open().unwrap();
    append(&log, 40, 1, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (log, stop) = (log.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for r in log.read(0, u64::MAX, u64::MAX).unwrap() {
                        assert_eq!(r.payload, versioned(r.meta.seq, r.payload[0], 40));
                    }
                    if let Some(r) = log.read_record(5 + reads % 30).unwrap() {
                        assert_eq!(r.payload, versioned(r.meta.seq, r.payload[0], 40));
                    }
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for round in 0..60u64 {
        let generation = u8::try_from(round % 200).unwrap() + 2;
        let cut = [3, 20, 35][usize::try_from(round % 3).unwrap()];
        log.truncate_from(cut).wait().unwrap();
        append(&log, 40 - cut, generation, 0);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

#[test]
fn retention_running_beside_cuts_across_segments_keeps_the_log_whole() {
    let h = Harness::new(small());
    let (log, _) = h.open().unwrap();
    append(&log, 40, 1, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let retention = {
        let (log, stop) = (log.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut deleted = 0;
            while !stop.load(Ordering::Relaxed) {
                // Keep a few segments so cuts still cross some.
                if log.segments().len() > 4 {
                    deleted += log.delete_oldest_segments(1).unwrap().len();
                }
                std::thread::yield_now();
            }
            deleted
        })
    };
    for round in 0..200u64 {
        let segments = log.segments();
        let generation = u8::try_from(round % 200).unwrap() + 2;
        if let Some(held) = segments.iter().rev().nth(2) {
            // Inside the third-newest segment (unless retention removed it meanwhile: then
            // the cut is below the log and refused, which is fine here).
            let cut = held.base + (held.end - held.base) / 2;
            match log.truncate_from(cut).wait() {
                Ok(()) | Err(LogError::BadTruncation { .. }) => {}
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        append(&log, 20, generation, 0);
    }
    stop.store(true, Ordering::Relaxed);
    assert!(retention.join().unwrap() > 0);
    let check = |log: &Log| {
        let b = log.bounds();
        let seqs: Vec<u64> = contents(log).iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (b.first..b.next).collect::<Vec<_>>());
    };
    check(&log);
    let want = contents(&log);
    drop(log);
    let (log, _) = h.open().unwrap();
    check(&log);
    assert_eq!(contents(&log), want);
}

#[derive(Debug, Clone)]
enum Op {
    /// Append a record covering `count` sequence numbers with `len` payload bytes.
    Append { count: u32, len: usize },
    /// Cut at the start of the record at this position of the model (modulo its length), or
    /// one past it (inside a record when it covers several), or at the end.
    Cut { at: usize, inside: bool },
    /// Delete the oldest sealed segment.
    Retain,
    /// Close and reopen.
    Reopen,
    /// Power cut (everything acknowledged is durable) and reopen.
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u32..4, 0usize..120).prop_map(|(count, len)| Op::Append { count, len }),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(at, inside)| Op::Cut { at, inside }),
        1 => Just(Op::Retain),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

/// A record of the model: first sequence number, count, payload.
type ModelRecord = (u64, u32, Bytes);

fn check(log: &Log, model: &[ModelRecord], first: u64, next: u64) {
    let got: Vec<ModelRecord> = log
        .read(first, u64::MAX, u64::MAX)
        .unwrap()
        .into_iter()
        .map(|r| (r.meta.seq, r.meta.count, r.payload))
        .collect();
    assert_eq!(got, model);
    assert_eq!(log.bounds().next, next);
    assert_eq!(log.next_seq_to_assign(), next);
    for (seq, _, payload) in model {
        assert_eq!(&log.read_record(*seq).unwrap().unwrap().payload, payload);
    }
    // The segments' exact size figures follow every cut, retention and reopen.
    let segments = log.segments();
    let records: u64 = segments.iter().map(|s| s.records).sum();
    let payload: u64 = segments.iter().map(SegmentSummary::payload_bytes).sum();
    assert_eq!(records, model.len() as u64);
    assert_eq!(
        payload,
        model.iter().map(|(_, _, p)| p.len() as u64).sum::<u64>()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Interleaved appends, cuts, retention, reopens and crashes agree with a vector of records.
    #[test]
    fn truncation_agrees_with_a_vector_model(ops in proptest::collection::vec(op(), 1..60)) {
        let h = Harness::new(LogConfig { segment_size: 300, index_interval: 90, ..small() });
        let (mut log, _) = h.open().unwrap();
        let mut model: Vec<ModelRecord> = Vec::new();
        let mut next = 0u64;
        for op in ops {
            match op {
                Op::Append { count, len } => {
                    let meta = log
                        .append_with(count, 0, 0, |a| Ok(payload(a.seq, len)))
                        .unwrap()
                        .wait()
                        .unwrap();
                    prop_assert_eq!(meta.seq, next);
                    model.push((next, count, payload(next, len)));
                    next += u64::from(count);
                }
                Op::Cut { at, inside } => {
                    let (seq, valid) = match model.get(at % (model.len() + 1)) {
                        None => (next, true),
                        Some((seq, count, _)) if inside => (seq + 1, *count == 1),
                        Some((seq, _, _)) => (*seq, true),
                    };
                    let result = log.truncate_from(seq).wait();
                    if valid {
                        result.unwrap();
                        model.retain(|(s, _, _)| *s < seq);
                        next = next.min(seq);
                    } else {
                        let refused = matches!(result, Err(LogError::BadTruncation { .. }));
                        prop_assert!(refused);
                    }
                }
                Op::Retain => {
                    for seg in log.delete_oldest_segments(1).unwrap() {
                        model.retain(|(s, _, _)| *s >= seg.end);
                    }
                }
                Op::Reopen | Op::Crash => {
                    drop(log);
                    if matches!(op, Op::Crash) {
                        h.mem.crash();
                    }
                    log = h
                        .open_with(OpenOptions { initial_seq: next, ..OpenOptions::default() })
                        .unwrap()
                        .0;
                }
            }
            check(&log, &model, log.bounds().first, next);
        }
    }
}

/// Prints what a cut costs on real files next to an append (`cargo test -p eddy-log --lib
/// measure_truncate -- --ignored --nocapture`).
#[test]
#[ignore = "a measurement on the real file system, not a check"]
fn measure_truncate_cost_on_real_files() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(crate::file::FsBackend::new(dir.path()).unwrap());
    let pool = CommitPool::new(1).unwrap();
    let config = LogConfig {
        segment_size: 16 * 1024,
        ..LogConfig::default()
    };
    let (log, _) = Log::open(
        backend,
        "log",
        config,
        &pool,
        Arc::new(Cache::new(1 << 20)),
        OpenOptions::default(),
    )
    .unwrap();
    let rounds = 20u32;
    let (mut appends, mut active, mut crossing) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for _ in 0..rounds {
        let next = log.bounds().next;
        let start = Instant::now();
        append(&log, 1, 1, 0);
        appends += start.elapsed();
        append(&log, 9, 1, 0);
        let start = Instant::now();
        log.truncate_from(next + 5).wait().unwrap();
        active += start.elapsed();
        // Enough to seal a few segments, then a cut in the first of them.
        append(&log, 1000, 1, 0);
        let base = log.segments().last().unwrap().base;
        let start = Instant::now();
        log.truncate_from(base - 700).wait().unwrap();
        crossing += start.elapsed();
    }
    eprintln!(
        "per operation: append (1 record, fdatasync) {:?}, cut in the active segment {:?}, \
         cut across segments {:?}",
        appends / rounds,
        active / rounds,
        crossing / rounds
    );
}
