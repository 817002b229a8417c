//! Partition tests, including the model-based property test: random appends, polls,
//! retention runs, segment deletions, purges, crashes (with torn and zero-filled tails) and
//! reopens on the crash-simulating backend, checked against a `BTreeMap` model.

use super::*;
use eddy_log::{Errno, FsCall, LogConfig, LogError, MemBackend, VerifyOnOpen};
use proptest::prelude::*;
use std::collections::BTreeMap;

// A tiny fake batch format (the real one lives in eddy-codec):
// [partition_id u32][base_offset u64][base_timestamp u64][count u32][body]
const FAKE_HEADER: usize = 24;

fn fake(count: u32, body: Vec<u8>) -> StampWith<impl FnOnce(&Stamp) -> Bytes> {
    StampWith {
        count,
        stamp: move |s: &Stamp| {
            let mut v = Vec::with_capacity(FAKE_HEADER + body.len());
            v.extend_from_slice(&s.partition_id.to_le_bytes());
            v.extend_from_slice(&s.base_offset.to_le_bytes());
            v.extend_from_slice(&s.base_timestamp.to_le_bytes());
            v.extend_from_slice(&count.to_le_bytes());
            v.extend_from_slice(&body);
            Bytes::from(v)
        },
    }
}

fn parse_fake(bytes: &[u8]) -> (u32, u64, u64, u32, &[u8]) {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    (
        u32_at(0),
        u64_at(4),
        u64_at(12),
        u32_at(20),
        &bytes[FAKE_HEADER..],
    )
}

struct Env {
    mem: MemBackend,
    pool: CommitPool,
    cache: Arc<Cache>,
    config: PartitionConfig,
    generation: u64,
}

const ADDR: PartitionAddr = PartitionAddr {
    stream_id: 1,
    topic_id: 2,
    partition_id: 3,
};

impl Env {
    fn new(log: LogConfig) -> Self {
        let mem = MemBackend::new();
        Env {
            mem,
            pool: CommitPool::new(2).unwrap(),
            cache: Arc::new(Cache::new(1 << 20)),
            config: PartitionConfig { log },
            generation: 0,
        }
    }

    fn open(&self) -> Result<(Partition, RecoveryReport)> {
        Partition::open(
            Arc::new(self.mem.clone()),
            &self.pool,
            Arc::clone(&self.cache),
            PartitionOpen {
                addr: ADDR,
                uid: 77,
                dir: PathBuf::from("partitions/77"),
                config: self.config,
                generation: self.generation,
                stats: None,
                cipher: None,
            },
        )
    }
}

fn small_log() -> LogConfig {
    LogConfig {
        segment_size: 300,
        index_interval: 64,
        ..LogConfig::default()
    }
}

#[test]
fn append_stamps_and_poll_strategies() {
    let env = Env::new(small_log());
    let (p, _) = env.open().unwrap();
    let mut acks = Vec::new();
    for i in 0..10u32 {
        let ticket = p
            .append(fake(3, vec![i as u8; 20]), 1_000 + u64::from(i) * 100)
            .unwrap();
        assert_eq!(ticket.base_offset, u64::from(i) * 3);
        acks.push(ticket.wait().unwrap());
    }
    assert_eq!(acks[9].base_offset, 27);
    assert_eq!(acks[9].last_offset(), 29);
    let stats = p.stats();
    assert_eq!(stats.current_offset, 29);
    assert_eq!(stats.messages, 30);
    assert!(stats.segments > 1);

    let polled = p.poll(PollStrategy::Offset(4), 5, None, u64::MAX).unwrap();
    assert_eq!((polled.start_offset, polled.end_offset), (4, 9));
    assert_eq!(polled.message_count(), 5);
    assert_eq!(polled.last_offset(), Some(8));
    assert_eq!(
        polled
            .batches
            .iter()
            .map(|b| b.base_offset)
            .collect::<Vec<_>>(),
        vec![3, 6]
    );
    for b in &polled.batches {
        let (pid, base, ts, count, body) = parse_fake(&b.bytes);
        assert_eq!(pid, 3);
        assert_eq!(base, b.base_offset);
        assert_eq!(ts, b.timestamp);
        assert_eq!(count, b.message_count);
        assert_eq!(body, &[u8::try_from(base / 3).unwrap(); 20][..]);
    }
    let last = p.poll(PollStrategy::Last, 4, None, u64::MAX).unwrap();
    assert_eq!((last.start_offset, last.end_offset), (26, 30));
    let first = p.poll(PollStrategy::First, 1, None, u64::MAX).unwrap();
    assert_eq!((first.start_offset, first.end_offset), (0, 1));
    let next = p.poll(PollStrategy::Next, 2, Some(10), u64::MAX).unwrap();
    assert_eq!(next.start_offset, 11);
    let next_none = p.poll(PollStrategy::Next, 2, None, u64::MAX).unwrap();
    assert_eq!(next_none.start_offset, 0);
    let by_ts = p
        .poll(PollStrategy::Timestamp(1_450), 100, None, u64::MAX)
        .unwrap();
    assert_eq!(by_ts.start_offset, 15);
    assert_eq!(by_ts.end_offset, 30);
    assert!(p
        .poll(PollStrategy::Timestamp(5_000), 1, None, u64::MAX)
        .unwrap()
        .batches
        .is_empty());
    let beyond = p.poll(PollStrategy::Offset(30), 1, None, u64::MAX).unwrap();
    assert!(beyond.batches.is_empty());
    assert_eq!(beyond.current_offset, 29);
    assert!(p
        .poll(PollStrategy::First, 0, None, u64::MAX)
        .unwrap()
        .batches
        .is_empty());
    // A byte limit stops early but always serves something.
    let limited = p.poll(PollStrategy::First, 30, None, 1).unwrap();
    assert_eq!(limited.batches.len(), 1);
    assert_eq!((limited.start_offset, limited.end_offset), (0, 3));
}

#[test]
fn empty_partition_polls_nothing() {
    let env = Env::new(small_log());
    let (p, _) = env.open().unwrap();
    let polled = p.poll(PollStrategy::First, 10, None, u64::MAX).unwrap();
    assert!(polled.batches.is_empty());
    assert_eq!(polled.current_offset, 0);
    assert_eq!(p.stats().messages, 0);
}

#[test]
fn retention_by_expiry_and_size() {
    let env = Env::new(small_log());
    let (p, _) = env.open().unwrap();
    for i in 0..30u64 {
        p.append(fake(1, vec![0; 40]), i * 1000)
            .unwrap()
            .wait()
            .unwrap();
    }
    let segments = p.log().segments();
    assert!(segments.len() >= 5);
    // Expiry: segments whose newest timestamp + expiry <= now.
    let cutoff = segments[1].max_timestamp.unwrap();
    let deleted = p
        .apply_retention(
            &RetentionPolicy {
                message_expiry: Some(1000),
                ..RetentionPolicy::default()
            },
            cutoff + 1000,
        )
        .unwrap();
    assert_eq!(deleted, segments[..2].to_vec());
    // Pinned by a consumer offset.
    let keep = p.log().segments()[0].end - 2;
    let none = p
        .apply_retention(
            &RetentionPolicy {
                message_expiry: Some(0),
                keep_above: Some(keep),
                ..RetentionPolicy::default()
            },
            u64::MAX,
        )
        .unwrap();
    assert!(none.is_empty());
    // Size: sealed bytes above the budget.
    let before = p.log().segments();
    let sealed_bytes: u64 = before.iter().filter(|s| s.sealed).map(|s| s.bytes).sum();
    let deleted = p
        .apply_retention(
            &RetentionPolicy {
                max_bytes: Some(sealed_bytes - before[0].bytes),
                ..RetentionPolicy::default()
            },
            0,
        )
        .unwrap();
    assert_eq!(deleted, vec![before[0]]);
    // Expire everything: the active segment stays.
    p.apply_retention(
        &RetentionPolicy {
            message_expiry: Some(0),
            ..RetentionPolicy::default()
        },
        u64::MAX,
    )
    .unwrap();
    assert_eq!(p.log().segments().len(), 1);
    let polled = p
        .poll(PollStrategy::Offset(0), 100, None, u64::MAX)
        .unwrap();
    assert_eq!(polled.start_offset, p.stats().first_offset);
}

#[test]
fn size_is_the_stored_batch_bytes_exactly() {
    let env = Env::new(small_log());
    let (p, _) = env.open().unwrap();
    assert_eq!(p.stats().size_bytes, 0, "an empty partition holds nothing");
    let batch = (FAKE_HEADER + 40) as u64;
    for i in 0..12u64 {
        p.append(fake(2, vec![1; 40]), i).unwrap().wait().unwrap();
    }
    assert!(p.stats().segments > 2);
    assert_eq!(p.stats().size_bytes, 12 * batch);
    drop(p);
    let (p, _) = env.open().unwrap();
    assert_eq!(p.stats().size_bytes, 12 * batch, "a reopen changes nothing");
    let deleted = p.delete_oldest_segments(1).unwrap();
    let left = 12 - (deleted[0].end - deleted[0].base) / 2;
    assert_eq!(p.stats().size_bytes, left * batch);
    p.purge(1).unwrap();
    assert_eq!(p.stats().size_bytes, 0, "a purged partition holds nothing");
}

#[test]
fn unknown_timestamps_never_expire() {
    let policy = RetentionPolicy {
        message_expiry: Some(10),
        ..RetentionPolicy::default()
    };
    let env = Env::new(small_log());
    let (p, _) = env.open().unwrap();
    assert!(p.apply_retention(&policy, u64::MAX).unwrap().is_empty());
}

#[test]
fn purge_restarts_offsets_and_survives_crash_midway() {
    let mut env = Env::new(small_log());
    let (p, _) = env.open().unwrap();
    for _ in 0..10 {
        p.append(fake(2, vec![1; 30]), 5).unwrap().wait().unwrap();
    }
    p.purge(1).unwrap();
    assert_eq!(p.generation(), 1);
    assert_eq!(p.stats().messages, 0);
    let a = p.append(fake(2, vec![2; 30]), 6).unwrap().wait().unwrap();
    assert_eq!(a.base_offset, 0);
    drop(p);
    env.generation = 1;
    let (p, _) = env.open().unwrap();
    assert_eq!(p.stats().messages, 2);

    // The metadata recorded generation 2 but the crash hit before the partition purged: the
    // purge is redone at open.
    env.generation = 2;
    drop(p);
    let (p, _) = env.open().unwrap();
    assert_eq!(p.generation(), 2);
    assert_eq!(p.stats().messages, 0);
    assert_eq!(
        p.append(fake(1, vec![3]), 7)
            .unwrap()
            .wait()
            .unwrap()
            .base_offset,
        0
    );
}

/// Where a purge runs out of space: creating the log's fresh segment, or replacing the state
/// file after the log was purged.
#[derive(Debug, Clone, Copy)]
enum PurgeFault {
    SegmentCreate,
    StateWrite,
}

impl PurgeFault {
    const ALL: [PurgeFault; 2] = [PurgeFault::SegmentCreate, PurgeFault::StateWrite];

    fn inject(self, mem: &MemBackend) {
        mem.inject_faults(move |call, path| {
            let hit = match self {
                PurgeFault::SegmentCreate => {
                    call == FsCall::Create && path.extension().is_some_and(|e| e == "log")
                }
                PurgeFault::StateWrite => call == FsCall::Append && path.ends_with("state.tmp"),
            };
            hit.then(|| Errno::NoSpace.error())
        });
    }
}

#[test]
fn a_failed_purge_fail_stops_the_partition_so_nothing_acknowledged_is_purged_later() {
    for fault in PurgeFault::ALL {
        let mut env = Env::new(small_log());
        let (p, _) = env.open().unwrap();
        for _ in 0..6 {
            p.append(fake(2, vec![1; 30]), 5).unwrap().wait().unwrap();
        }
        // The metadata records purge generation 1, then the partition performs it.
        env.generation = 1;
        fault.inject(&env.mem);
        assert!(p.purge(1).is_err(), "{fault:?}");
        env.mem.clear_faults();
        // Space is back, but the purge is unfinished: a write accepted now would be
        // acknowledged, then deleted by the restart that finishes the purge.
        let attempt = p
            .append(fake(1, vec![2; 10]), 6)
            .and_then(AppendTicket::wait);
        let polled = p.poll(PollStrategy::First, 10, None, u64::MAX);
        // The restart finishes the purge; whatever was acknowledged must be there.
        drop(p);
        let (p, _) = env.open().unwrap();
        assert_eq!(p.generation(), 1);
        if let Ok(acked) = &attempt {
            assert!(
                !p.read(acked.base_offset, 1, u64::MAX).unwrap().is_empty(),
                "{fault:?}: the batch acknowledged at {} was purged by the restart",
                acked.base_offset
            );
        }
        assert!(
            matches!(attempt, Err(StreamStoreError::PurgeUnfinished { .. })),
            "{fault:?}: {attempt:?}"
        );
        assert!(
            matches!(polled, Err(StreamStoreError::PurgeUnfinished { .. })),
            "{fault:?}: {polled:?}"
        );
        assert_eq!(p.stats().messages, 0);
        assert_eq!(
            p.append(fake(1, vec![3]), 7)
                .unwrap()
                .wait()
                .unwrap()
                .base_offset,
            0
        );
    }
}

#[test]
fn a_purge_retried_after_a_failure_reopens_the_partition() {
    for fault in PurgeFault::ALL {
        let mut env = Env::new(small_log());
        let (p, _) = env.open().unwrap();
        for _ in 0..6 {
            p.append(fake(2, vec![1; 30]), 5).unwrap().wait().unwrap();
        }
        env.generation = 1;
        fault.inject(&env.mem);
        let err = p.purge(1).unwrap_err();
        assert!(
            matches!(err, StreamStoreError::Log(LogError::NoSpace { .. })),
            "{fault:?}: {err:?}"
        );
        // Still full: the retry fails too and the partition stays stopped.
        env.generation = 2;
        assert!(p.purge(2).is_err());
        assert!(p.append(fake(1, vec![2]), 6).is_err());
        env.mem.clear_faults();
        env.generation = 3;
        p.purge(3).unwrap();
        assert_eq!(p.generation(), 3);
        let a = p.append(fake(2, vec![4; 10]), 8).unwrap().wait().unwrap();
        assert_eq!(a.base_offset, 0);
        env.mem.crash();
        drop(p);
        let (p, _) = env.open().unwrap();
        assert_eq!(
            p.stats().messages,
            2,
            "{fault:?}: the acknowledged batch survives"
        );
    }
}

#[test]
fn background_durability_never_reuses_offsets_after_a_crash() {
    let env = Env::new(LogConfig {
        durability: Durability::Background {
            max_unsynced_records: 1_000_000,
            max_unsynced_bytes: 1 << 40,
        },
        ..small_log()
    });
    let (p, _) = env.open().unwrap();
    let mut last = 0;
    for _ in 0..20 {
        last = p
            .append(fake(5, vec![7; 10]), 1)
            .unwrap()
            .wait()
            .unwrap()
            .last_offset();
    }
    // Acknowledged but never synced: the crash loses them...
    drop(p);
    env.mem.crash();
    let (p, _) = env.open().unwrap();
    // ...but their offsets are not handed out again.
    let next = p.append(fake(1, vec![8]), 1).unwrap().wait().unwrap();
    assert!(next.base_offset > last, "{} <= {last}", next.base_offset);
    // A clean close records the exact frontier: no gap on a clean restart.
    let end = next.last_offset() + 1;
    p.close().unwrap();
    drop(p);
    let (p, _) = env.open().unwrap();
    assert_eq!(
        p.append(fake(1, vec![9]), 1)
            .unwrap()
            .wait()
            .unwrap()
            .base_offset,
        end
    );
}

#[test]
fn append_stamped_checks_the_offset() {
    let env = Env::new(small_log());
    let (p, _) = env.open().unwrap();
    let t = p
        .append_stamped(0, 10, 2, Bytes::from_static(b"ab"))
        .unwrap();
    assert_eq!(t.wait().unwrap().base_offset, 0);
    assert!(matches!(
        p.append_stamped(5, 10, 1, Bytes::new()),
        Err(StreamStoreError::Log(LogError::OutOfOrder { .. }))
    ));
}

#[test]
fn damaged_state_file_refuses_to_open() {
    let env = Env::new(small_log());
    let (p, _) = env.open().unwrap();
    drop(p);
    let path = Path::new("partitions/77").join(STATE_FILE);
    let mut bytes = env.mem.read_file(&path).unwrap();
    bytes[30] ^= 1;
    env.mem.write_file(&path, &bytes);
    assert!(env.open().unwrap_err().is_corruption());
}

#[test]
fn state_file_roundtrip() {
    let s = StateRecord {
        uid: 1,
        generation: 2,
        frontier: 3,
    };
    let bytes = state_file::encode_state(&s);
    assert_eq!(&bytes[0..8], b"EDDYPST\0");
    assert_eq!(decode_state(&bytes), Ok(s));
    for cut in 0..STATE_LEN {
        assert!(decode_state(&bytes[..cut]).is_err());
    }
}

// ------------------------------------------------------------------------------------------------
// The model-based property test.

#[derive(Debug, Clone)]
enum Op {
    Append {
        count: u32,
        len: usize,
        advance: u64,
    },
    /// Queued, not waited for: in flight when a crash comes.
    AppendInFlight {
        count: u32,
        len: usize,
    },
    Poll {
        strategy: u8,
        arg: u64,
        count: u32,
    },
    Retention {
        expiry: Option<u64>,
        max_bytes: Option<u64>,
    },
    DeleteSegments(usize),
    Purge,
    /// Crash: each file's unsynced tail is kept up to `keep` bytes (zeroed when `zero`).
    Crash {
        keep: usize,
        zero: bool,
    },
    Reopen,
    /// The disk fills up (`room` bytes left) during one append, then space returns.
    DiskFull {
        room: u64,
        count: u32,
        len: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (1u32..5, 0usize..60, 0u64..50).prop_map(|(count, len, advance)| Op::Append { count, len, advance }),
        2 => (1u32..4, 0usize..60).prop_map(|(count, len)| Op::AppendInFlight { count, len }),
        4 => (0u8..4, 0u64..200, 0u32..40).prop_map(|(strategy, arg, count)| Op::Poll { strategy, arg, count }),
        1 => (proptest::option::of(0u64..500), proptest::option::of(0u64..2000))
            .prop_map(|(expiry, max_bytes)| Op::Retention { expiry, max_bytes }),
        1 => (0usize..3).prop_map(Op::DeleteSegments),
        1 => Just(Op::Purge),
        2 => (0usize..200, any::<bool>()).prop_map(|(keep, zero)| Op::Crash { keep, zero }),
        1 => Just(Op::Reopen),
        1 => (0u64..400, 1u32..4, 0usize..60).prop_map(|(room, count, len)| Op::DiskFull { room, count, len }),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelBatch {
    count: u32,
    timestamp: u64,
    body: Vec<u8>,
}

#[derive(Default)]
struct Model {
    batches: BTreeMap<u64, ModelBatch>,
    next: u64,
    /// Batches queued but not acknowledged: (base, batch).
    in_flight: Vec<(u64, ModelBatch)>,
    now: u64,
    /// A full disk may have left the index behind the log: the next open may rebuild it.
    index_may_lag: bool,
}

impl Model {
    fn first(&self) -> Option<u64> {
        self.batches.keys().next().copied()
    }

    fn current(&self) -> Option<u64> {
        self.batches
            .iter()
            .next_back()
            .map(|(b, m)| b + u64::from(m.count) - 1)
    }

    fn expected(&self, strategy: PollStrategy, count: u32) -> Vec<u64> {
        let (Some(first), Some(current)) = (self.first(), self.current()) else {
            return Vec::new();
        };
        if count == 0 {
            return Vec::new();
        }
        let start = match strategy {
            PollStrategy::Offset(v) => v,
            PollStrategy::First => first,
            PollStrategy::Last => current.saturating_sub(u64::from(count) - 1),
            PollStrategy::Next => unreachable!(),
            PollStrategy::Timestamp(t) => {
                match self.batches.iter().find(|(_, b)| b.timestamp >= t) {
                    Some((base, _)) => *base,
                    None => return Vec::new(),
                }
            }
        };
        if start > current {
            return Vec::new();
        }
        let start = start.max(first);
        let end = (start + u64::from(count)).min(current + 1);
        self.batches
            .iter()
            .filter(|(base, b)| **base < end && **base + u64::from(b.count) > start)
            .map(|(base, _)| *base)
            .collect()
    }
}

fn body(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seed as usize * 7 + i) as u8).collect()
}

fn check_against_model(p: &Partition, model: &Model) {
    let all = p.read(0, u64::MAX, u64::MAX).unwrap();
    let got: Vec<(u64, ModelBatch)> = all
        .iter()
        .map(|b| {
            let (pid, base, ts, count, body) = parse_fake(&b.bytes);
            assert_eq!(pid, ADDR.partition_id);
            assert_eq!(
                base, b.base_offset,
                "stamped offset matches storage metadata"
            );
            assert_eq!(ts, b.timestamp);
            assert_eq!(count, b.message_count);
            (
                b.base_offset,
                ModelBatch {
                    count,
                    timestamp: ts,
                    body: body.to_vec(),
                },
            )
        })
        .collect();
    let want: Vec<(u64, ModelBatch)> = model.batches.iter().map(|(k, v)| (*k, v.clone())).collect();
    assert_eq!(
        got, want,
        "every acknowledged batch exactly once at its offset"
    );
    let stats = p.stats();
    assert_eq!(
        stats.messages,
        model
            .batches
            .values()
            .map(|b| u64::from(b.count))
            .sum::<u64>()
    );
    assert_eq!(
        stats.size_bytes,
        model
            .batches
            .values()
            .map(|b| (FAKE_HEADER + b.body.len()) as u64)
            .sum::<u64>(),
        "the size is the stored batch bytes"
    );
    // Indexes agree with the log: point lookups of every offset find the right batch.
    for (base, batch) in &model.batches {
        for off in *base..*base + u64::from(batch.count) {
            let r = p.read(off, 1, u64::MAX).unwrap();
            assert_eq!(r[0].base_offset, *base, "lookup of offset {off}");
        }
        assert_eq!(
            p.offset_at_timestamp(batch.timestamp).unwrap(),
            model
                .batches
                .iter()
                .find(|(_, b)| b.timestamp >= batch.timestamp)
                .map(|(k, _)| *k)
        );
    }
}

fn run_model(ops: Vec<Op>, verify: VerifyOnOpen) {
    let env = Env::new(LogConfig {
        segment_size: 256,
        index_interval: 80,
        verify_on_open: verify,
        ..LogConfig::default()
    });
    let mut env = env;
    let (mut p, _) = env.open().unwrap();
    let mut model = Model::default();
    let mut pending: Vec<AppendTicket> = Vec::new();
    let mut seed = 0u64;
    for op in ops {
        seed += 1;
        match op {
            Op::Append {
                count,
                len,
                advance,
            } => {
                settle(&mut pending, &mut model);
                model.now += advance;
                let body = body(seed, len);
                let ack = p
                    .append(fake(count, body.clone()), model.now)
                    .unwrap()
                    .wait()
                    .unwrap();
                assert_eq!(
                    ack.base_offset, model.next,
                    "offsets are contiguous and never reused"
                );
                let last_ts = model
                    .batches
                    .values()
                    .next_back()
                    .map_or(0, |b| b.timestamp);
                assert_eq!(ack.timestamp, model.now.max(last_ts));
                model.batches.insert(
                    ack.base_offset,
                    ModelBatch {
                        count,
                        timestamp: ack.timestamp,
                        body,
                    },
                );
                model.next = ack.base_offset + u64::from(count);
                model.now = model.now.max(ack.timestamp);
            }
            Op::AppendInFlight { count, len } => {
                let body = body(seed, len);
                let ticket = p.append(fake(count, body.clone()), model.now).unwrap();
                let last_ts = model
                    .batches
                    .values()
                    .next_back()
                    .map_or(0, |b| b.timestamp);
                model.in_flight.push((
                    ticket.base_offset,
                    ModelBatch {
                        count,
                        timestamp: model.now.max(last_ts),
                        body,
                    },
                ));
                pending.push(ticket);
            }
            Op::Poll {
                strategy,
                arg,
                count,
            } => {
                // Settle in-flight appends first so the model knows them.
                settle(&mut pending, &mut model);
                let strategy = match strategy {
                    0 => PollStrategy::Offset(arg),
                    1 => PollStrategy::Timestamp(arg * 10),
                    2 => PollStrategy::First,
                    _ => PollStrategy::Last,
                };
                let polled = p.poll(strategy, count, None, u64::MAX).unwrap();
                let bases: Vec<u64> = polled.batches.iter().map(|b| b.base_offset).collect();
                assert_eq!(
                    bases,
                    model.expected(strategy, count),
                    "{strategy:?} count {count}"
                );
                if !bases.is_empty() {
                    assert!(polled.message_count() <= u64::from(count));
                    assert_eq!(polled.current_offset, model.current().unwrap());
                }
            }
            Op::Retention { expiry, max_bytes } => {
                settle(&mut pending, &mut model);
                let deleted = p
                    .apply_retention(
                        &RetentionPolicy {
                            message_expiry: expiry,
                            max_bytes,
                            keep_above: None,
                        },
                        model.now,
                    )
                    .unwrap();
                apply_deleted(&mut model, &deleted);
            }
            Op::DeleteSegments(n) => {
                settle(&mut pending, &mut model);
                let deleted = p.delete_oldest_segments(n).unwrap();
                assert!(deleted.len() <= n);
                apply_deleted(&mut model, &deleted);
            }
            Op::Purge => {
                settle(&mut pending, &mut model);
                env.generation += 1;
                p.purge(env.generation).unwrap();
                model.batches.clear();
                model.next = 0;
            }
            Op::Crash { keep, zero } => {
                env.mem.crash_with(|_, tail| {
                    let n = keep.min(tail.len());
                    if zero {
                        vec![0; n]
                    } else {
                        tail[..n].to_vec()
                    }
                });
                pending.clear();
                drop(p);
                let acked_next = model.next;
                let (reopened, _) = env.open().unwrap();
                p = reopened;
                model.index_may_lag = false;
                // In-flight batches may have survived (a prefix of them), acknowledged ones must.
                let all = p.read(0, u64::MAX, u64::MAX).unwrap();
                for b in &all {
                    if !model.batches.contains_key(&b.base_offset) {
                        let (_, _, ts, count, body) = parse_fake(&b.bytes);
                        let flight = model
                            .in_flight
                            .iter()
                            .find(|(base, _)| *base == b.base_offset)
                            .unwrap_or_else(|| {
                                panic!("unknown batch at {} after crash", b.base_offset)
                            });
                        assert_eq!(flight.1.body, body);
                        assert_eq!(flight.1.count, count);
                        model.batches.insert(
                            b.base_offset,
                            ModelBatch {
                                count,
                                timestamp: ts,
                                body: body.to_vec(),
                            },
                        );
                    }
                }
                model.in_flight.clear();
                let surviving_end = model
                    .batches
                    .iter()
                    .next_back()
                    .map_or(0, |(b, m)| b + u64::from(m.count));
                model.next = surviving_end.max(acked_next);
                assert_eq!(
                    p.stats().next_offset,
                    model.next,
                    "no acknowledged offset is reissued"
                );
            }
            Op::DiskFull { room, count, len } => {
                settle(&mut pending, &mut model);
                env.mem.set_capacity(Some(env.mem.used_bytes() + room));
                let body = body(seed, len);
                let result = p
                    .append(fake(count, body.clone()), model.now)
                    .unwrap()
                    .wait();
                env.mem.set_capacity(None);
                model.index_may_lag = true;
                match result {
                    Ok(ack) => {
                        assert_eq!(ack.base_offset, model.next);
                        model.batches.insert(
                            ack.base_offset,
                            ModelBatch {
                                count,
                                timestamp: ack.timestamp,
                                body,
                            },
                        );
                        model.next = ack.base_offset + u64::from(count);
                        model.now = model.now.max(ack.timestamp);
                    }
                    Err(StreamStoreError::Log(LogError::NoSpace { .. })) => {}
                    Err(other) => panic!("unexpected {other:?}"),
                }
            }
            Op::Reopen => {
                settle(&mut pending, &mut model);
                drop(p);
                let (reopened, report) = env.open().unwrap();
                p = reopened;
                assert!(report.torn_tail.is_none(), "{report:?}");
                assert!(
                    report.indexes_rebuilt.is_empty() || model.index_may_lag,
                    "valid indexes are kept: {report:?}"
                );
                model.index_may_lag = false;
            }
        }
        if pending.is_empty() {
            check_against_model(&p, &model);
        }
    }
    settle(&mut pending, &mut model);
    check_against_model(&p, &model);
}

fn settle(pending: &mut Vec<AppendTicket>, model: &mut Model) {
    for ticket in pending.drain(..) {
        let ack = ticket.wait().unwrap();
        let i = model
            .in_flight
            .iter()
            .position(|(base, _)| *base == ack.base_offset)
            .unwrap();
        let (base, batch) = model.in_flight.remove(i);
        assert_eq!(base, model.next);
        model.next = base + u64::from(batch.count);
        model.now = model.now.max(ack.timestamp);
        model.batches.insert(
            base,
            ModelBatch {
                timestamp: ack.timestamp,
                ..batch
            },
        );
    }
}

fn apply_deleted(model: &mut Model, deleted: &[SegmentSummary]) {
    for seg in deleted {
        assert!(seg.sealed, "only sealed segments are deleted");
        let first = model.first().unwrap();
        assert_eq!(seg.base, first, "oldest first");
        let keys: Vec<u64> = model
            .batches
            .range(seg.base..seg.end)
            .map(|(k, _)| *k)
            .collect();
        assert!(!keys.is_empty(), "a sealed segment holds batches");
        for k in keys {
            model.batches.remove(&k);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn partition_matches_model_full_verify(ops in proptest::collection::vec(op(), 1..40)) {
        run_model(ops, VerifyOnOpen::Full);
    }

    #[test]
    fn partition_matches_model_tail_verify(ops in proptest::collection::vec(op(), 1..40)) {
        run_model(ops, VerifyOnOpen::Tail);
    }
}
