//! Replicated partitions (`eddy_stream_store::replicated`) on a real `Log` over `MemBackend`, driven
//! the way the raft layer drives them: apply and visibility, reads and the translator,
//! retention, restarts and snapshot installs, concurrent reads, polls against `Partition`'s,
//! and the model-based property test. (Its own test binary: the property tests keep both cores
//! busy, which the timing-sensitive group-commit tests of the library must not share.)

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use eddy_log::{Cache, CommitPool, Log, LogConfig, MemBackend, OpenOptions, SegmentSummary};
use eddy_stream_store::replicated::{
    poll_batches, ApplyOutcome, EntryError, PartitionEntry, PollSource, Prediction,
    ReplicatedConfig, ReplicatedError, ReplicatedPartition, ReplicatedSnapshot, RetentionCut,
};
use eddy_stream_store::{
    Partition, PartitionAddr, PartitionConfig, PartitionOpen, PartitionStats, PollStrategy, Polled,
    RetentionPolicy, StoredBatch,
};
use proptest::prelude::*;

const ADDR: PartitionAddr = PartitionAddr {
    stream_id: 1,
    topic_id: 2,
    partition_id: 3,
};

/// The raft term every test record carries as its tag.
const TERM: u32 = 7;

fn small_log() -> LogConfig {
    LogConfig {
        segment_size: 400,
        index_interval: 100,
        ..LogConfig::default()
    }
}

/// Sampling small enough that thinning happens in every test.
fn small_sampling() -> ReplicatedConfig {
    ReplicatedConfig {
        sample_bytes: 200,
        sample_records: 3,
        max_samples: 4,
    }
}

struct Env {
    mem: MemBackend,
    pool: CommitPool,
    cache: Arc<Cache>,
    log: LogConfig,
    sampling: ReplicatedConfig,
}

impl Env {
    fn new(sampling: ReplicatedConfig) -> Self {
        Env {
            mem: MemBackend::new(),
            pool: CommitPool::new(2).unwrap(),
            cache: Arc::new(Cache::new(1 << 20)),
            log: small_log(),
            sampling,
        }
    }

    fn open_log(&self, dir: &str, first_index: u64) -> Log {
        Log::open(
            Arc::new(self.mem.clone()),
            dir,
            self.log,
            &self.pool,
            Arc::clone(&self.cache),
            OpenOptions {
                initial_seq: first_index,
                ..OpenOptions::default()
            },
        )
        .unwrap()
        .0
    }

    /// A node over a new (or existing) log directory, starting at `snapshot`.
    fn node(&self, dir: &str, snapshot: Option<ReplicatedSnapshot>) -> Node {
        let first_index = snapshot.map_or(1, |s| s.index + 1);
        let log = self.open_log(dir, first_index);
        let bounds = log.bounds();
        let record_ts = if bounds.next > bounds.first {
            log.read_record(bounds.next - 1)
                .unwrap()
                .unwrap()
                .meta
                .timestamp
        } else {
            0
        };
        Node {
            part: ReplicatedPartition::with_config(ADDR, log, snapshot, self.sampling).unwrap(),
            dir: dir.to_owned(),
            record_ts,
        }
    }
}

/// What the raft layer does with a partition's log: appends entries as records (one per raft
/// index, the term as tag, non-decreasing record timestamps) and applies committed ones in
/// index order, reading their payloads back from the log.
struct Node {
    part: ReplicatedPartition,
    dir: String,
    record_ts: u64,
}

impl Node {
    /// Appends an entry; `entry_ts` is an append's batch timestamp (a record takes the
    /// previous record's timestamp when it has none or an older one).
    fn propose(&mut self, entry_ts: Option<u64>, payload: Bytes) -> u64 {
        let log = self.part.log();
        let index = log.next_seq_to_assign();
        if let Some(ts) = entry_ts {
            self.record_ts = self.record_ts.max(ts);
        }
        log.append_assigned(index, self.record_ts, 1, TERM, payload)
            .unwrap()
            .wait()
            .unwrap();
        index
    }

    fn payload(&self, index: u64) -> Bytes {
        let record = self.part.log().read_record(index).unwrap().unwrap();
        assert_eq!((record.meta.seq, record.meta.tag), (index, TERM));
        record.payload
    }

    fn apply_through(&self, index: u64) -> Vec<ApplyOutcome> {
        let from = self.part.applied_index() + 1;
        (from..=index)
            .map(|i| self.part.apply(i, &self.payload(i)))
            .collect()
    }

    fn read_all(&self) -> Vec<StoredBatch> {
        self.part.read(0, u64::MAX, u64::MAX).unwrap()
    }
}

fn append(base_offset: u64, message_count: u32, timestamp: u64, batch: &[u8]) -> Bytes {
    PartitionEntry::Append {
        base_offset,
        message_count,
        timestamp,
        batch: Bytes::copy_from_slice(batch),
    }
    .encode()
    .unwrap()
}

fn purge(generation: u64) -> Bytes {
    PartitionEntry::Purge { generation }.encode().unwrap()
}

fn batch(
    base_offset: u64,
    message_count: u32,
    timestamp: u64,
    bytes: &'static [u8],
) -> StoredBatch {
    StoredBatch {
        base_offset,
        message_count,
        timestamp,
        bytes: Bytes::from_static(bytes),
    }
}

fn appended(base_offset: u64, message_count: u32, timestamp: u64) -> ApplyOutcome {
    ApplyOutcome::Appended {
        base_offset,
        message_count,
        timestamp,
    }
}

/// Visible offsets run without a gap from the first visible offset to the next offset.
fn assert_contiguous(part: &ReplicatedPartition, batches: &[StoredBatch]) {
    let stats = part.stats();
    let mut expected = stats.first_offset;
    for b in batches {
        assert_eq!(b.base_offset, expected, "contiguous offsets");
        expected = b.end_offset();
    }
    assert_eq!(expected, stats.next_offset);
    assert_eq!(stats.messages, stats.next_offset - stats.first_offset);
}

// ------------------------------------------------------------------------------------------------
// Apply and visibility.

#[test]
fn only_applied_entries_are_visible() {
    let env = Env::new(small_sampling());
    let mut node = env.node("p", None);
    assert_eq!(node.propose(Some(10), append(0, 2, 10, b"first")), 1);
    assert_eq!(node.propose(Some(11), append(2, 1, 11, b"second")), 2);
    assert_eq!(node.propose(None, Bytes::new()), 3);
    assert!(node.read_all().is_empty(), "nothing is applied yet");
    assert_eq!(node.part.stats().messages, 0);
    assert_eq!(
        node.part
            .poll(PollStrategy::First, 10, None, u64::MAX)
            .unwrap(),
        Polled {
            partition_id: 3,
            current_offset: 0,
            start_offset: 0,
            end_offset: 0,
            batches: vec![]
        }
    );

    assert_eq!(node.apply_through(1), vec![appended(0, 2, 10)]);
    assert_eq!(node.read_all(), vec![batch(0, 2, 10, b"first")]);
    assert_eq!(
        node.part.offset_at_timestamp(11).unwrap(),
        None,
        "index 2 is not applied"
    );
    let polled = node
        .part
        .poll(PollStrategy::Offset(1), 10, None, u64::MAX)
        .unwrap();
    assert_eq!(
        (
            polled.start_offset,
            polled.end_offset,
            polled.current_offset
        ),
        (1, 2, 1)
    );

    assert_eq!(
        node.apply_through(3),
        vec![appended(2, 1, 11), ApplyOutcome::NoOp]
    );
    assert_eq!(
        node.read_all(),
        vec![batch(0, 2, 10, b"first"), batch(2, 1, 11, b"second")]
    );
    assert_eq!(node.part.offset_at_timestamp(11).unwrap(), Some(2));
    assert_eq!(
        node.part.read(2, 1, 0).unwrap(),
        vec![batch(2, 1, 11, b"second")]
    );
    assert_eq!(node.part.applied_index(), 3);
    let stats = node.part.stats();
    assert_eq!(
        (
            stats.first_offset,
            stats.next_offset,
            stats.current_offset,
            stats.messages
        ),
        (0, 3, 2, 3)
    );
    assert_eq!(stats.size_bytes, node.part.log().bounds().bytes);
}

#[test]
fn a_membership_change_in_the_log_is_no_entry_of_the_partition() {
    let env = Env::new(small_sampling());
    let mut node = env.node("m", None);
    assert_eq!(node.propose(Some(10), append(0, 2, 10, b"first")), 1);
    // What the raft layer writes for a change of the group's members: its own bytes, the
    // term's tag marked; the partition is applied the no-op for it.
    let log = node.part.log();
    let index = log.next_seq_to_assign();
    log.append_assigned(
        index,
        10,
        1,
        TERM | eddy_stream_store::replicated::MEMBERSHIP_TAG,
        Bytes::from_static(b"\x12\x04\x08\x02\x10\x04 not a partition entry"),
    )
    .unwrap()
    .wait()
    .unwrap();
    assert_eq!(node.propose(Some(11), append(2, 1, 11, b"second")), 3);
    assert_eq!(node.part.apply(1, &node.payload(1)), appended(0, 2, 10));
    assert_eq!(node.part.apply(2, &Bytes::new()), ApplyOutcome::NoOp);
    assert_eq!(node.part.apply(3, &node.payload(3)), appended(2, 1, 11));
    // Reads walk the records: the marked one is skipped, as apply skipped it.
    assert_eq!(
        node.read_all(),
        vec![batch(0, 2, 10, b"first"), batch(2, 1, 11, b"second")]
    );
    assert_eq!(
        node.part
            .poll(PollStrategy::Offset(1), 10, None, u64::MAX)
            .unwrap()
            .end_offset,
        3
    );
    assert_eq!(node.part.stats().messages, 3);
}

#[test]
fn refused_appends_change_nothing() {
    let env = Env::new(small_sampling());
    let mut node = env.node("p", None);
    node.propose(Some(10), append(0, 1, 10, b"a"));
    node.propose(Some(10), append(0, 1, 10, b"stale offset"));
    node.propose(Some(5), append(1, 1, 5, b"old timestamp"));
    node.propose(Some(20), append(3, 1, 20, b"gap"));
    node.propose(Some(20), append(1, 2, 20, b"b"));
    assert_eq!(node.apply_through(1), vec![appended(0, 1, 10)]);
    let before = (node.part.snapshot(), node.part.stats(), node.read_all());
    let refused = ApplyOutcome::Refused {
        expected_offset: 1,
        min_timestamp: 10,
    };
    assert_eq!(
        node.apply_through(4),
        vec![refused.clone(), refused.clone(), refused]
    );
    let after = (node.part.snapshot(), node.part.stats(), node.read_all());
    assert_eq!(after.0.index, 4, "refused entries are applied");
    assert_eq!(
        ReplicatedSnapshot {
            index: 1,
            ..after.0
        },
        before.0,
        "and change nothing else"
    );
    assert_eq!((after.1, &after.2), (before.1, &before.2));
    assert_eq!(node.apply_through(5), vec![appended(1, 2, 20)]);
    let all = node.read_all();
    assert_eq!(all, vec![batch(0, 1, 10, b"a"), batch(1, 2, 20, b"b")]);
    assert_contiguous(&node.part, &all);
    assert_eq!(node.part.offset_at_timestamp(11).unwrap(), Some(1));
}

#[test]
fn purge_restarts_offsets_and_hides_what_came_before() {
    let env = Env::new(small_sampling());
    let mut node = env.node("p", None);
    for i in 0..4u64 {
        node.propose(Some(i), append(i, 1, i, b"old"));
    }
    let p = node.propose(None, purge(1));
    node.propose(Some(9), append(0, 1, 9, b"new"));
    node.propose(None, purge(1));
    node.propose(Some(9), append(1, 1, 9, b"newer"));
    node.apply_through(p - 1);
    assert_eq!(node.part.stats().next_offset, 4);
    assert_eq!(
        node.apply_through(p),
        vec![ApplyOutcome::Purged { generation: 1 }]
    );
    assert_eq!((node.part.visible_floor(), node.part.generation()), (p, 1));
    let stats = node.part.stats();
    assert_eq!(
        (stats.first_offset, stats.next_offset, stats.messages),
        (0, 0, 0)
    );
    assert!(node.read_all().is_empty());
    assert_eq!(node.part.offset_at_timestamp(0).unwrap(), None);
    assert_eq!(
        node.apply_through(p + 3),
        vec![
            appended(0, 1, 9),
            ApplyOutcome::StalePurge {
                current_generation: 1
            },
            appended(1, 1, 9)
        ]
    );
    assert_eq!(
        node.read_all(),
        vec![batch(0, 1, 9, b"new"), batch(1, 1, 9, b"newer")],
        "offset 0 is the new batch, never the purged one"
    );
    assert_eq!(node.part.offset_at_timestamp(0).unwrap(), Some(0));
    // The purge kept the newest timestamp: an older batch is refused.
    node.propose(Some(3), append(2, 1, 3, b"older"));
    assert_eq!(
        node.apply_through(p + 4),
        vec![ApplyOutcome::Refused {
            expected_offset: 2,
            min_timestamp: 9
        }]
    );
}

#[test]
fn corrupt_entries_and_out_of_order_applies() {
    let env = Env::new(small_sampling());
    let mut node = env.node("p", None);
    node.propose(None, Bytes::from_static(&[9, 9, 9]));
    node.propose(Some(1), append(0, 1, 1, b"x"));
    assert_eq!(
        node.part.apply(2, &node.payload(2)),
        ApplyOutcome::OutOfOrder { expected_index: 1 }
    );
    assert_eq!(
        node.apply_through(1),
        vec![ApplyOutcome::Corrupt(EntryError::UnknownVersion(9))]
    );
    assert_eq!(
        node.part.apply(1, &node.payload(1)),
        ApplyOutcome::OutOfOrder { expected_index: 2 },
        "an index is applied once"
    );
    assert_eq!(node.apply_through(2), vec![appended(0, 1, 1)]);
    assert_eq!(node.read_all(), vec![batch(0, 1, 1, b"x")]);
}

#[test]
fn a_log_that_does_not_hold_what_was_applied_is_reported() {
    let env = Env::new(ReplicatedConfig {
        sample_records: 1,
        ..small_sampling()
    });
    let mut node = env.node("p", None);
    node.propose(Some(1), append(0, 1, 1, b"in the log"));
    // A raft layer bug: index 1 applied with other bytes than the log holds.
    assert_eq!(
        node.part.apply(1, &append(0, 5, 1, b"applied")),
        appended(0, 5, 1)
    );
    assert!(matches!(
        node.part.read(0, 10, u64::MAX),
        Err(ReplicatedError::Diverged { index: 2 })
    ));
    // A log starting after the entries the partition needs is refused at once.
    let log = env.open_log("late", 5);
    assert!(matches!(
        ReplicatedPartition::new(ADDR, log, None),
        Err(ReplicatedError::LogGap {
            first: 5,
            next: 5,
            needed: 1
        })
    ));
    // So is a log that ends before it (a raft log's first index is 1, not 0).
    let log = env.open_log("short", 0);
    assert!(matches!(
        ReplicatedPartition::new(ADDR, log, None),
        Err(ReplicatedError::LogGap {
            first: 0,
            next: 0,
            needed: 1
        })
    ));
    let log = env.open_log("bad-config", 1);
    let bad = ReplicatedConfig {
        max_samples: 1,
        ..ReplicatedConfig::default()
    };
    assert!(ReplicatedPartition::with_config(ADDR, log, None, bad).is_err());
}

// ------------------------------------------------------------------------------------------------
// The translator.

#[test]
fn the_translator_stays_bounded_and_every_lookup_is_exact() {
    let env = Env::new(small_sampling());
    let mut node = env.node("p", None);
    let mut offset = 0u64;
    let mut expected = Vec::new();
    // The next offset after each raft index.
    let mut next_after = vec![0u64];
    for i in 0..120u64 {
        let ts = i / 3;
        if i % 4 == 3 {
            node.propose(None, Bytes::new());
            next_after.push(offset);
            continue;
        }
        let count = 1 + (i % 3) as u32;
        let bytes = format!("batch {i}").into_bytes();
        node.propose(Some(ts), append(offset, count, ts, &bytes));
        next_after.push(offset + u64::from(count));
        if i % 7 == 5 {
            node.propose(Some(ts), append(offset, 1, ts, b"stale"));
            next_after.push(offset + u64::from(count));
        }
        expected.push(StoredBatch {
            base_offset: offset,
            message_count: count,
            timestamp: ts,
            bytes: Bytes::from(bytes),
        });
        offset += u64::from(count);
        node.apply_through(node.part.log().bounds().next - 1);
        assert!(node.part.translator_samples() <= 4);
    }
    assert_eq!(node.read_all(), expected);
    for b in &expected {
        for o in b.base_offset..b.end_offset() {
            assert_eq!(
                node.part.read(o, 1, 1).unwrap(),
                vec![b.clone()],
                "offset {o}"
            );
        }
    }
    for ts in 0..45 {
        let want = expected
            .iter()
            .find(|b| b.timestamp >= ts)
            .map(|b| b.base_offset);
        assert_eq!(
            node.part.offset_at_timestamp(ts).unwrap(),
            want,
            "timestamp {ts}"
        );
    }
    let last = node.part.applied_index();
    for index in 0..=last {
        let state = node.part.snapshot_at(index).unwrap();
        assert_eq!(
            state.next_offset, next_after[index as usize],
            "state after index {index}"
        );
    }
    assert_eq!(node.part.snapshot_at(last).unwrap(), node.part.snapshot());
    assert!(matches!(
        node.part.snapshot_at(last + 1),
        Err(ReplicatedError::NotVisible { .. })
    ));
}

// ------------------------------------------------------------------------------------------------
// Retention, restarts and snapshot installs.

/// Appends `n` one-message batches at timestamps 10, 20, ... and applies all but `unapplied`.
fn filled(env: &Env, n: u64, unapplied: u64) -> Node {
    let mut node = env.node("p", None);
    for i in 0..n {
        node.propose(
            Some((i + 1) * 10),
            append(i, 1, (i + 1) * 10, &[i as u8; 40]),
        );
    }
    node.apply_through(n - unapplied);
    node
}

/// Records the cut, forgets, deletes: what the caller of `retention` does.
fn cut(node: &Node, cut: &RetentionCut) -> Vec<SegmentSummary> {
    node.part.forget_through(&cut.boundary);
    node.part
        .log()
        .delete_sealed_while(|s| cut.covers(s))
        .unwrap()
}

#[test]
fn retention_never_passes_the_applied_index_or_the_active_segment() {
    let env = Env::new(small_sampling());
    let node = filled(&env, 30, 12);
    let applied = node.part.applied_index();
    let everything = RetentionPolicy {
        max_bytes: Some(0),
        ..RetentionPolicy::default()
    };
    let c = node.part.retention(&everything, 0).unwrap().unwrap();
    assert!(c.through_index <= applied);
    let segments = node.part.log().segments();
    let beyond = segments.iter().find(|s| s.end - 1 > applied).unwrap();
    assert!(!c.covers(beyond));
    assert!(!c.covers(segments.last().unwrap()));
    let covered: Vec<_> = segments.iter().filter(|s| c.covers(s)).collect();
    assert!(!covered.is_empty());
    assert_eq!(covered.last().unwrap().end - 1, c.through_index);
    assert_eq!(c.boundary, {
        let mut s = node.part.snapshot_at(c.through_index).unwrap();
        s.first_offset = s.next_offset;
        s
    });
    assert_eq!(
        c.boundary.next_offset, c.through_index,
        "index i holds offset i - 1"
    );

    // Nothing expires, nothing is oversized: nothing goes.
    let keep = RetentionPolicy {
        message_expiry: Some(1_000),
        max_bytes: Some(u64::MAX),
        keep_above: None,
    };
    assert_eq!(node.part.retention(&keep, 100).unwrap(), None);
    // Expiry by the segments' newest record timestamps.
    let expiry = RetentionPolicy {
        message_expiry: Some(50),
        ..RetentionPolicy::default()
    };
    let c = node.part.retention(&expiry, 100).unwrap().unwrap();
    let first = node.part.log().segments()[0];
    assert_eq!(c.through_index, first.end - 1);
    assert!(first.max_timestamp.unwrap() + 50 <= 100);
    // A consumer pin at offset 3 keeps every segment holding an offset above it.
    let pinned = RetentionPolicy {
        keep_above: Some(3),
        ..everything
    };
    match node.part.retention(&pinned, 0).unwrap() {
        None => assert!(node.part.snapshot_at(first.end - 1).unwrap().next_offset > 4),
        Some(c) => assert!(c.boundary.next_offset <= 4),
    }
}

#[test]
fn retention_cuts_survive_a_restart_from_the_boundary() {
    let env = Env::new(small_sampling());
    let node = filled(&env, 30, 3);
    let applied = node.part.applied_index();
    let before = node.read_all();
    let policy = RetentionPolicy {
        max_bytes: Some(1000),
        ..RetentionPolicy::default()
    };
    let c = node.part.retention(&policy, 0).unwrap().unwrap();
    let deleted = cut(&node, &c);
    assert!(!deleted.is_empty());
    assert_eq!(deleted.last().unwrap().end - 1, c.through_index);
    let sealed: u64 = node
        .part
        .log()
        .segments()
        .iter()
        .filter(|s| s.sealed)
        .map(|s| s.bytes)
        .sum();
    assert!(sealed <= 1000);
    assert_eq!(node.part.visible_floor(), c.through_index);
    let after = node.read_all();
    assert_eq!(after.first().unwrap().base_offset, c.boundary.next_offset);
    assert_eq!(&before[before.len() - after.len()..], &after[..]);
    assert_contiguous(&node.part, &after);
    assert_eq!(
        node.part.read(0, 1, 1).unwrap(),
        vec![after[0].clone()],
        "below the first offset"
    );
    assert_eq!(
        node.part
            .poll(PollStrategy::First, 1, None, 1)
            .unwrap()
            .start_offset,
        c.boundary.next_offset
    );
    assert_eq!(
        node.part.offset_at_timestamp(0).unwrap(),
        Some(c.boundary.next_offset)
    );

    // Restart: the node starts from the recorded boundary and re-applies what follows it.
    let durable = ReplicatedSnapshot::decode(&c.boundary.encode()).unwrap();
    node.part.log().close().unwrap();
    let dir = node.dir.clone();
    drop(node);
    let node = env.node(&dir, Some(durable));
    assert_eq!(node.part.applied_index(), durable.index);
    node.apply_through(applied);
    assert_eq!(node.read_all(), after);
    assert_contiguous(&node.part, &after);
}

#[test]
fn segments_a_purge_hid_go_whatever_the_policy() {
    let env = Env::new(small_sampling());
    let mut node = filled(&env, 20, 0);
    let p = node.propose(None, purge(1));
    node.propose(Some(500), append(0, 1, 500, b"kept"));
    node.apply_through(p + 1);
    let c = node
        .part
        .retention(&RetentionPolicy::default(), 0)
        .unwrap()
        .unwrap();
    assert!(c.through_index <= p);
    assert_eq!(c.boundary.index, p, "the boundary is the purge");
    assert_eq!((c.boundary.next_offset, c.boundary.generation), (0, 1));
    let deleted = cut(&node, &c);
    assert!(!deleted.is_empty());
    assert_eq!(node.read_all(), vec![batch(0, 1, 500, b"kept")]);
    // A pin does not keep what is invisible either.
    let pinned = RetentionPolicy {
        keep_above: Some(0),
        ..RetentionPolicy::default()
    };
    assert!(node
        .part
        .retention(&pinned, 0)
        .unwrap()
        .is_none_or(|c| c.through_index <= p));
    // The boundary restarts the node even though the log starts below it.
    node.part.log().close().unwrap();
    let dir = node.dir.clone();
    drop(node);
    let node = env.node(&dir, Some(c.boundary));
    assert!(node.part.log().bounds().first <= p);
    node.apply_through(p + 1);
    assert_eq!(node.read_all(), vec![batch(0, 1, 500, b"kept")]);
    assert_eq!(node.part.generation(), 1);
}

#[test]
fn deleting_before_forgetting_fails_reads_instead_of_skipping() {
    let env = Env::new(small_sampling());
    let node = filled(&env, 30, 0);
    let everything = RetentionPolicy {
        max_bytes: Some(0),
        ..RetentionPolicy::default()
    };
    let c = node.part.retention(&everything, 0).unwrap().unwrap();
    node.part
        .log()
        .delete_sealed_while(|s| c.covers(s))
        .unwrap();
    assert!(matches!(
        node.part.read(0, 100, u64::MAX),
        Err(ReplicatedError::Missing { .. })
    ));
    assert!(node.part.forget_through(&c.boundary));
    assert_eq!(
        node.read_all().first().unwrap().base_offset,
        c.boundary.next_offset
    );
    assert!(!node.part.forget_through(&c.boundary), "once");
}

#[test]
fn a_member_installs_a_snapshot_and_follows() {
    let env = Env::new(small_sampling());
    let mut leader = filled(&env, 12, 0);
    let snapshot = leader.part.snapshot();
    let received = ReplicatedSnapshot::decode(&snapshot.encode()).unwrap();
    let mut member = env.node("member", Some(received));
    assert_eq!(member.part.log().bounds().first, snapshot.index + 1);
    let stats = member.part.stats();
    assert_eq!((stats.first_offset, stats.next_offset), (12, 12));
    assert!(
        member.read_all().is_empty(),
        "nothing at or below the snapshot"
    );
    for node in [&mut leader, &mut member] {
        node.propose(Some(200), append(12, 2, 200, b"after"));
        node.propose(Some(200), append(12, 1, 200, b"stale"));
        node.propose(Some(201), append(14, 1, 201, b"later"));
        node.apply_through(snapshot.index + 3);
    }
    let tail = vec![batch(12, 2, 200, b"after"), batch(14, 1, 201, b"later")];
    assert_eq!(member.read_all(), tail);
    assert_eq!(leader.part.read(12, 100, u64::MAX).unwrap(), tail);
    assert_eq!(
        member.part.snapshot(),
        ReplicatedSnapshot {
            first_offset: 12,
            ..leader.part.snapshot()
        }
    );
    assert_eq!(member.part.offset_at_timestamp(0).unwrap(), Some(12));
}

#[test]
fn reads_stay_whole_while_entries_apply_retention_deletes_and_purges_run() {
    use std::sync::atomic::{AtomicBool, Ordering};

    let mut env = Env::new(small_sampling());
    env.log.segment_size = 256;
    let log = env.open_log("p", 1);
    let part = Arc::new(ReplicatedPartition::with_config(ADDR, log, None, env.sampling).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (part, stop) = (Arc::clone(&part), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let batches = if r == 0 {
                        part.read(0, u64::MAX, u64::MAX).unwrap()
                    } else {
                        part.poll(PollStrategy::Last, 5, None, u64::MAX)
                            .unwrap()
                            .batches
                    };
                    // One consistent state: contiguous offsets of one generation, and each
                    // batch's bytes are the batch stamped at that offset.
                    let mut generation = None;
                    for (i, b) in batches.iter().enumerate() {
                        if i > 0 {
                            assert_eq!(b.base_offset, batches[i - 1].end_offset());
                        }
                        let text = std::str::from_utf8(&b.bytes).unwrap();
                        let (g, base) = text.split_once(':').unwrap();
                        assert_eq!(base.parse::<u64>().unwrap(), b.base_offset);
                        assert_eq!(*generation.get_or_insert(g), g);
                    }
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let (mut next, mut generation, mut index) = (0u64, 0u64, 0u64);
    let mut cuts = 0;
    for i in 0..600u64 {
        index += 1;
        let payload = if i % 151 == 150 {
            generation += 1;
            next = 0;
            purge(generation)
        } else {
            let count = 1 + (i % 3) as u32;
            let entry = append(next, count, i, format!("{generation}:{next}").as_bytes());
            next += u64::from(count);
            entry
        };
        part.log()
            .append_assigned(index, i, 1, TERM, payload.clone())
            .unwrap()
            .wait()
            .unwrap();
        assert!(!matches!(
            part.apply(index, &payload),
            ApplyOutcome::Refused { .. }
                | ApplyOutcome::Corrupt(_)
                | ApplyOutcome::OutOfOrder { .. }
        ));
        if i % 10 == 9 {
            let policy = RetentionPolicy {
                max_bytes: Some(600),
                ..RetentionPolicy::default()
            };
            if let Some(c) = part.retention(&policy, 0).unwrap() {
                part.forget_through(&c.boundary);
                part.log().delete_sealed_while(|s| c.covers(s)).unwrap();
                cuts += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        assert!(reader.join().unwrap() > 0);
    }
    assert!(cuts > 10);
    let stats = part.stats();
    assert_eq!(stats.next_offset, next);
    assert_contiguous(&part, &part.read(0, u64::MAX, u64::MAX).unwrap());
}

// ------------------------------------------------------------------------------------------------
// Polls: the shared strategy function answers like `Partition::poll` on the same batches.

fn poll_strategy(kind: u8, arg: u64) -> PollStrategy {
    match kind % 5 {
        0 => PollStrategy::Offset(arg),
        1 => PollStrategy::Timestamp(arg),
        2 => PollStrategy::First,
        3 => PollStrategy::Last,
        _ => PollStrategy::Next,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn polls_match_partition_polls(
        batches in proptest::collection::vec((1u32..5, 0usize..40, 0u64..3), 1..25),
        polls in proptest::collection::vec((0u8..5, 0u64..80, 0u32..12, 0u64..200, 0u64..30), 1..25),
    ) {
        let env = Env::new(small_sampling());
        let (plain, _) = Partition::open(
            Arc::new(env.mem.clone()),
            &env.pool,
            Arc::clone(&env.cache),
            PartitionOpen {
                addr: ADDR,
                uid: 1,
                dir: PathBuf::from("plain"),
                config: PartitionConfig { log: small_log() },
                generation: 0,
                stats: None,
                cipher: None,
            },
        ).unwrap();
        let mut node = env.node("replicated", None);
        let (mut offset, mut ts) = (0u64, 0u64);
        for (i, (count, len, step)) in batches.into_iter().enumerate() {
            ts += step;
            let bytes = vec![i as u8; len];
            plain.append_stamped(offset, ts, count, Bytes::from(bytes.clone())).unwrap().wait().unwrap();
            if i % 3 == 1 {
                node.propose(None, Bytes::new());
            }
            node.propose(Some(ts), append(offset, count, ts, &bytes));
            offset += u64::from(count);
        }
        node.apply_through(node.part.log().bounds().next - 1);
        for (kind, arg, count, max_bytes, stored) in polls {
            let strategy = poll_strategy(kind, arg);
            let stored = (stored % 7 != 0).then_some(stored);
            prop_assert_eq!(
                plain.poll(strategy, count, stored, max_bytes).unwrap(),
                node.part.poll(strategy, count, stored, max_bytes).unwrap(),
                "{:?} count {} stored {:?} max_bytes {}", strategy, count, stored, max_bytes
            );
            prop_assert_eq!(
                plain.poll(strategy, count, stored, max_bytes).unwrap(),
                poll_batches(&plain, ADDR.partition_id, strategy, count, stored, max_bytes).unwrap()
            );
            prop_assert_eq!(plain.offset_at_timestamp(arg).unwrap(), node.part.offset_at_timestamp(arg).unwrap());
        }
        let (a, b) = (plain.stats(), node.part.stats());
        prop_assert_eq!((a.first_offset, a.next_offset, a.current_offset, a.messages),
                        (b.first_offset, b.next_offset, b.current_offset, b.messages));
    }
}

// ------------------------------------------------------------------------------------------------
// The model-based property test.

/// The offset state after an index, as the model tracks it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct MState {
    next: u64,
    last_ts: u64,
    generation: u64,
}

#[derive(Debug, Clone)]
enum MEntry {
    Append {
        base: u64,
        count: u32,
        ts: u64,
        batch: Bytes,
    },
    Purge(u64),
    NoOp,
    Garbage,
}

impl MState {
    /// What applying `entry` must do, written from the contract.
    fn apply(&mut self, entry: &MEntry) -> ApplyOutcome {
        match entry {
            MEntry::NoOp => ApplyOutcome::NoOp,
            MEntry::Garbage => ApplyOutcome::Corrupt(EntryError::UnknownVersion(0xee)),
            MEntry::Append {
                base, count, ts, ..
            } => {
                if *base == self.next && *ts >= self.last_ts {
                    self.next += u64::from(*count);
                    self.last_ts = *ts;
                    appended(*base, *count, *ts)
                } else {
                    ApplyOutcome::Refused {
                        expected_offset: self.next,
                        min_timestamp: self.last_ts,
                    }
                }
            }
            MEntry::Purge(g) => {
                if *g > self.generation {
                    self.generation = *g;
                    self.next = 0;
                    ApplyOutcome::Purged { generation: *g }
                } else {
                    ApplyOutcome::StalePurge {
                        current_generation: self.generation,
                    }
                }
            }
        }
    }
}

#[derive(Debug, Default)]
struct Model {
    /// Every proposed entry by raft index.
    entries: BTreeMap<u64, MEntry>,
    proposed: u64,
    /// The state after every proposed entry (what the leader predicts from).
    tail: MState,
    applied: u64,
    state: MState,
    /// The state after each applied index.
    after: BTreeMap<u64, MState>,
    floor: u64,
    first_offset: u64,
    /// Visible batches by base offset, with their raft index.
    visible: BTreeMap<u64, (StoredBatch, u64)>,
}

impl Model {
    fn state_after(&self, index: u64) -> MState {
        if index == 0 {
            MState::default()
        } else {
            self.after[&index]
        }
    }

    fn apply(&mut self, index: u64) -> ApplyOutcome {
        assert_eq!(index, self.applied + 1);
        let entry = self.entries[&index].clone();
        let outcome = self.state.apply(&entry);
        self.applied = index;
        self.after.insert(index, self.state);
        match (&entry, &outcome) {
            (
                MEntry::Append {
                    base,
                    count,
                    ts,
                    batch,
                },
                ApplyOutcome::Appended { .. },
            ) => {
                let stored = StoredBatch {
                    base_offset: *base,
                    message_count: *count,
                    timestamp: *ts,
                    bytes: batch.clone(),
                };
                self.visible.insert(*base, (stored, index));
            }
            (_, ApplyOutcome::Purged { .. }) => {
                self.visible.clear();
                self.floor = index;
                self.first_offset = 0;
            }
            _ => {}
        }
        outcome
    }

    /// Starts over from `snapshot` (the visible state a restarted or installed node has before
    /// it re-applies anything).
    fn start_from(&mut self, snapshot: Option<ReplicatedSnapshot>) {
        let s = snapshot.unwrap_or(ReplicatedSnapshot {
            index: 0,
            next_offset: 0,
            first_offset: 0,
            last_timestamp: 0,
            generation: 0,
        });
        self.applied = s.index;
        self.state = MState {
            next: s.next_offset,
            last_ts: s.last_timestamp,
            generation: s.generation,
        };
        assert_eq!(self.state, self.state_after(s.index));
        self.floor = s.index;
        self.first_offset = s.next_offset;
        self.visible.clear();
    }

    fn batches(&self) -> Vec<StoredBatch> {
        self.visible.values().map(|(b, _)| b.clone()).collect()
    }

    /// The cut `retention` must report, from the segments and the exact per-index states.
    fn expected_cut(
        &self,
        segments: &[SegmentSummary],
        policy: &RetentionPolicy,
        now: u64,
    ) -> Option<RetentionCut> {
        let mut sealed: u64 = segments.iter().filter(|s| s.sealed).map(|s| s.bytes).sum();
        let mut through = None;
        for seg in &segments[..segments.len().saturating_sub(1)] {
            let last = seg.end - 1;
            if last > self.applied {
                break;
            }
            if last > self.floor {
                let pinned = policy
                    .keep_above
                    .is_some_and(|pin| self.state_after(last).next > pin + 1);
                let expired = policy
                    .message_expiry
                    .is_some_and(|e| seg.max_timestamp.is_some_and(|ts| ts + e <= now));
                let oversized = policy.max_bytes.is_some_and(|max| sealed > max);
                if pinned || !(expired || oversized) {
                    break;
                }
            }
            sealed -= seg.bytes;
            through = Some(last);
        }
        let through_index = through?;
        let index = through_index.max(self.floor);
        let s = self.state_after(index);
        Some(RetentionCut {
            through_index,
            boundary: ReplicatedSnapshot {
                index,
                next_offset: s.next,
                first_offset: s.next,
                last_timestamp: s.last_ts,
                generation: s.generation,
            },
        })
    }
}

impl PollSource for Model {
    type Error = Infallible;

    fn poll_stats(&self) -> PartitionStats {
        let next = self.state.next;
        let messages = next - self.first_offset;
        PartitionStats {
            first_offset: self.first_offset,
            next_offset: next,
            current_offset: if messages == 0 { 0 } else { next - 1 },
            messages,
            size_bytes: 0,
            segments: 0,
        }
    }

    fn first_offset_at(&self, timestamp: u64) -> Result<Option<u64>, Infallible> {
        Ok(self
            .visible
            .values()
            .find(|(b, _)| b.timestamp >= timestamp)
            .map(|(b, _)| b.base_offset))
    }

    fn read_batches(
        &self,
        start: u64,
        count: u64,
        max_bytes: u64,
    ) -> Result<Vec<StoredBatch>, Infallible> {
        let from = start.max(self.first_offset);
        let mut out = Vec::new();
        if count == 0 {
            return Ok(out);
        }
        let (mut covered, mut bytes) = (0u64, 0u64);
        for (b, _) in self.visible.values().filter(|(b, _)| b.end_offset() > from) {
            covered += b.end_offset() - b.base_offset.max(from);
            bytes += b.bytes.len() as u64;
            out.push(b.clone());
            if covered >= count || bytes >= max_bytes {
                break;
            }
        }
        Ok(out)
    }
}

#[derive(Debug, Clone)]
enum Propose {
    /// A batch stamped from the leader's log tail: it will be accepted.
    Predicted {
        count: u32,
        len: usize,
        ts_step: u64,
    },
    /// A batch with a wrong base offset.
    StaleOffset {
        count: u32,
        shift: u64,
        down: bool,
    },
    /// A batch one microsecond older than the newest (refused unless that is 0).
    OlderTimestamp,
    /// A purge with the next generation, or a duplicate of the current one.
    Purge {
        bump: bool,
    },
    NoOp,
    Garbage(Vec<u8>),
}

#[derive(Debug, Clone)]
enum Op {
    Propose(Propose),
    Apply(u8),
    Read {
        start: u64,
        count: u64,
        max_bytes: u64,
    },
    Poll {
        kind: u8,
        arg: u64,
        count: u32,
        stored: Option<u64>,
        max_bytes: u64,
    },
    AtTimestamp(u64),
    Retention {
        expiry: Option<u64>,
        max_bytes: Option<u64>,
        keep_above: Option<u64>,
        now: u64,
    },
    /// A power cut, then a restart from the recorded boundary.
    Restart,
    /// A new member installs a snapshot of the current state and takes over.
    Install,
}

fn propose() -> impl Strategy<Value = Propose> {
    prop_oneof![
        8 => (1u32..4, 0usize..50, 0u64..3)
            .prop_map(|(count, len, ts_step)| Propose::Predicted { count, len, ts_step }),
        2 => (1u32..3, 1u64..4, any::<bool>())
            .prop_map(|(count, shift, down)| Propose::StaleOffset { count, shift, down }),
        1 => Just(Propose::OlderTimestamp),
        1 => any::<bool>().prop_map(|bump| Propose::Purge { bump }),
        1 => Just(Propose::NoOp),
        1 => proptest::collection::vec(any::<u8>(), 0..12).prop_map(Propose::Garbage),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => propose().prop_map(Op::Propose),
        5 => (1u8..6).prop_map(Op::Apply),
        3 => (0u64..60, 0u64..20, 0u64..300)
            .prop_map(|(start, count, max_bytes)| Op::Read { start, count, max_bytes }),
        4 => (0u8..5, 0u64..60, 0u32..15, proptest::option::of(0u64..60), 0u64..300)
            .prop_map(|(kind, arg, count, stored, max_bytes)| Op::Poll { kind, arg, count, stored, max_bytes }),
        1 => (0u64..80).prop_map(Op::AtTimestamp),
        2 => (
            proptest::option::of(0u64..40),
            proptest::option::of(0u64..1500),
            proptest::option::of(0u64..50),
            0u64..100,
        )
            .prop_map(|(expiry, max_bytes, keep_above, now)| Op::Retention { expiry, max_bytes, keep_above, now }),
        1 => Just(Op::Restart),
        1 => Just(Op::Install),
    ]
}

struct Harness {
    env: Env,
    node: Node,
    model: Model,
    /// The boundary the raft layer recorded last (a retention cut or an installed snapshot).
    durable: Option<ReplicatedSnapshot>,
    members: u32,
}

impl Harness {
    fn propose(&mut self, p: Propose) {
        let tail = self.model.tail;
        // The leader's prediction from its log tail is the model's.
        let pending: Vec<Bytes> = (self.model.applied + 1..=self.model.proposed)
            .map(|i| self.node.payload(i))
            .collect();
        assert_eq!(
            self.node.part.predict(&pending),
            Prediction {
                next_offset: tail.next,
                min_timestamp: tail.last_ts,
                generation: tail.generation
            }
        );
        let index = self.model.proposed + 1;
        let (entry, payload, ts) = match p {
            Propose::Predicted {
                count,
                len,
                ts_step,
            } => {
                let ts = tail.last_ts + ts_step;
                let mut body = format!("{index}:").into_bytes();
                body.resize(body.len() + len, b'.');
                let batch = Bytes::from(body);
                let payload = append(tail.next, count, ts, &batch);
                let entry = MEntry::Append {
                    base: tail.next,
                    count,
                    ts,
                    batch,
                };
                (entry, payload, Some(ts))
            }
            Propose::StaleOffset { count, shift, down } => {
                let base = if down && tail.next >= shift {
                    tail.next - shift
                } else {
                    tail.next + shift
                };
                let batch = Bytes::from(format!("stale {index}"));
                let payload = append(base, count, tail.last_ts, &batch);
                let entry = MEntry::Append {
                    base,
                    count,
                    ts: tail.last_ts,
                    batch,
                };
                (entry, payload, Some(tail.last_ts))
            }
            Propose::OlderTimestamp => {
                let ts = tail.last_ts.saturating_sub(1);
                let batch = Bytes::from(format!("older {index}"));
                let payload = append(tail.next, 1, ts, &batch);
                (
                    MEntry::Append {
                        base: tail.next,
                        count: 1,
                        ts,
                        batch,
                    },
                    payload,
                    Some(ts),
                )
            }
            Propose::Purge { bump } => {
                let g = tail.generation + u64::from(bump);
                (MEntry::Purge(g), purge(g), None)
            }
            Propose::NoOp => (MEntry::NoOp, Bytes::new(), None),
            Propose::Garbage(mut bytes) => {
                bytes.insert(0, 0xee);
                (MEntry::Garbage, Bytes::from(bytes), None)
            }
        };
        assert_eq!(self.node.propose(ts, payload), index);
        self.model.tail.apply(&entry);
        self.model.entries.insert(index, entry);
        self.model.proposed = index;
    }

    fn apply(&mut self, n: u64) {
        let through = (self.model.applied + n).min(self.model.proposed);
        for i in self.model.applied + 1..=through {
            let part = &self.node.part;
            let before = (part.snapshot(), part.stats());
            let outcome = part.apply(i, &self.node.payload(i));
            let expected = self.model.apply(i);
            match (&expected, &outcome) {
                (ApplyOutcome::Corrupt(_), ApplyOutcome::Corrupt(_)) => {}
                _ => assert_eq!(outcome, expected, "apply {i}"),
            }
            if !matches!(
                outcome,
                ApplyOutcome::Appended { .. } | ApplyOutcome::Purged { .. }
            ) {
                // A refused append, a duplicate purge, a no-op or a corrupt entry changes
                // nothing but the applied index.
                let after = part.snapshot();
                assert_eq!(
                    after,
                    ReplicatedSnapshot {
                        index: i,
                        ..before.0
                    }
                );
                assert_eq!(part.stats(), before.1);
            }
        }
    }

    fn retention(&mut self, policy: RetentionPolicy, now: u64) {
        let segments = self.node.part.log().segments();
        let expected = self.model.expected_cut(&segments, &policy, now);
        let cut = self.node.part.retention(&policy, now).unwrap();
        assert_eq!(cut, expected, "{policy:?} at {now}");
        let Some(cut) = cut else {
            return;
        };
        // Recorded durably first, then forgotten, then deleted.
        self.durable = Some(cut.boundary);
        let forgot = self.node.part.forget_through(&cut.boundary);
        assert_eq!(forgot, cut.boundary.index > self.model.floor);
        if forgot {
            self.model.floor = cut.boundary.index;
            self.model.first_offset = cut.boundary.next_offset;
            self.model
                .visible
                .retain(|_, (_, index)| *index > cut.boundary.index);
        }
        let deleted = self
            .node
            .part
            .log()
            .delete_sealed_while(|s| cut.covers(s))
            .unwrap();
        assert!(deleted.iter().all(|s| s.end - 1 <= cut.through_index));
        assert_eq!(deleted.last().map(|s| s.end - 1), Some(cut.through_index));
    }

    /// A power cut and a restart: every acknowledged record survives, the node starts from the
    /// boundary the raft layer recorded and re-applies what its log holds after it.
    fn restart(&mut self) {
        self.env.mem.crash();
        let dir = self.node.dir.clone();
        self.node = self.env.node(&dir, self.durable);
        let applied = self.model.applied;
        self.model.start_from(self.durable);
        self.apply(applied - self.model.applied);
    }

    fn install(&mut self) {
        let snapshot = self.node.part.snapshot();
        self.members += 1;
        let dir = format!("member{}", self.members);
        let old = &self.node.part;
        let mut member = self.env.node(&dir, Some(snapshot));
        // The raft layer sends the entries after the snapshot, records as they are.
        for index in snapshot.index + 1..=self.model.proposed {
            let record = old.log().read_record(index).unwrap().unwrap();
            member.record_ts = record.meta.timestamp;
            assert_eq!(member.propose(None, record.payload), index);
        }
        old.log().close().unwrap();
        self.node = member;
        self.durable = Some(snapshot);
        self.model.start_from(Some(snapshot));
    }

    fn check(&self) {
        let part = &self.node.part;
        let model = &self.model;
        assert_eq!(part.applied_index(), model.applied);
        assert_eq!(part.visible_floor(), model.floor);
        assert_eq!(part.generation(), model.state.generation);
        let stats = part.stats();
        let want = model.poll_stats();
        assert_eq!(
            (
                stats.first_offset,
                stats.next_offset,
                stats.current_offset,
                stats.messages
            ),
            (
                want.first_offset,
                want.next_offset,
                want.current_offset,
                want.messages
            )
        );
        // Nothing beyond the applied index is ever read, though the log holds it.
        let all = part.read(0, u64::MAX, u64::MAX).unwrap();
        assert_eq!(all, model.batches());
        assert_contiguous(part, &all);
        assert!(part.translator_samples() <= self.env.sampling.max_samples);
        let snapshot = part.snapshot();
        assert_eq!(
            (
                snapshot.index,
                snapshot.next_offset,
                snapshot.first_offset,
                snapshot.last_timestamp,
                snapshot.generation
            ),
            (
                model.applied,
                model.state.next,
                model.first_offset,
                model.state.last_ts,
                model.state.generation
            )
        );
    }
}

fn run_model(ops: Vec<Op>, sampling: ReplicatedConfig) {
    let mut env = Env::new(sampling);
    // About two records a segment: retention has plenty to cut.
    env.log.segment_size = 256;
    let node = env.node("p", None);
    let mut h = Harness {
        env,
        node,
        model: Model::default(),
        durable: None,
        members: 0,
    };
    for op in ops {
        match op {
            Op::Propose(p) => h.propose(p),
            Op::Apply(n) => h.apply(u64::from(n)),
            Op::Read {
                start,
                count,
                max_bytes,
            } => {
                let got = h.node.part.read(start, count, max_bytes).unwrap();
                let Ok(want) = h.model.read_batches(start, count, max_bytes);
                assert_eq!(got, want, "read {start} {count} {max_bytes}");
            }
            Op::Poll {
                kind,
                arg,
                count,
                stored,
                max_bytes,
            } => {
                let strategy = poll_strategy(kind, arg);
                let got = h
                    .node
                    .part
                    .poll(strategy, count, stored, max_bytes)
                    .unwrap();
                let Ok(want) = poll_batches(
                    &h.model,
                    ADDR.partition_id,
                    strategy,
                    count,
                    stored,
                    max_bytes,
                );
                assert_eq!(got, want, "{strategy:?} {count} {stored:?} {max_bytes}");
            }
            Op::AtTimestamp(ts) => {
                let Ok(want) = h.model.first_offset_at(ts);
                assert_eq!(h.node.part.offset_at_timestamp(ts).unwrap(), want);
            }
            Op::Retention {
                expiry,
                max_bytes,
                keep_above,
                now,
            } => {
                let policy = RetentionPolicy {
                    message_expiry: expiry,
                    max_bytes,
                    keep_above,
                };
                h.retention(policy, now);
            }
            Op::Restart => h.restart(),
            Op::Install => h.install(),
        }
        h.check();
    }
    // Everything proposed becomes visible or refused once applied.
    h.apply(u64::MAX / 2);
    h.check();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn replicated_partition_matches_model(ops in proptest::collection::vec(op(), 1..120)) {
        run_model(ops, small_sampling());
    }

    #[test]
    fn replicated_partition_matches_model_with_default_sampling(
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run_model(ops, ReplicatedConfig::default());
    }
}
