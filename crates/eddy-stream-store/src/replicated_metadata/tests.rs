//! The metadata group's state machine: deterministic apply, snapshots that carry the Raft
//! index, exactly-once application across crashes, and snapshot installation.

use super::*;
use crate::metadata::{encode_op, MetadataOp, TopicConfig};
use eddy_log::MemBackend;
use proptest::prelude::*;

const DIR: &str = "raft/metadata";

fn create_stream(id: u32, name: &str) -> MetadataOp {
    MetadataOp::CreateStream {
        id,
        name: name.into(),
        created_at: 1,
        options: vec![],
    }
}

fn create_topic(stream_id: u32, id: u32, partitions: u32) -> MetadataOp {
    MetadataOp::CreateTopic {
        stream_id,
        id,
        name: format!("t{id}"),
        created_at: 2,
        partitions,
        config: TopicConfig::default(),
        explicit_options: vec![],
        derived_options: vec![],
    }
}

fn entry(op: &MetadataOp) -> Vec<u8> {
    encode_op(op).unwrap()
}

fn open(mem: &MemBackend, every: u64) -> ReplicatedMetadata {
    ReplicatedMetadata::open(Arc::new(mem.clone()), DIR, every).unwrap()
}

#[test]
fn apply_answers_like_the_single_node_state_and_refusals_change_nothing() {
    let mem = MemBackend::new();
    let mut m = open(&mem, 100);
    let (out, saved) = m.apply(1, 1, &[]);
    assert_eq!(out, MetadataApplied::Noop);
    saved.unwrap();
    let (out, _) = m.apply(2, 1, &entry(&create_stream(1, "orders")));
    assert_eq!(out, MetadataApplied::Applied(vec![]));
    let (out, _) = m.apply(3, 1, &entry(&create_topic(1, 1, 2)));
    let MetadataApplied::Applied(effects) = out else {
        panic!("{out:?}")
    };
    assert_eq!(effects.len(), 2, "one partition effect each");
    let before = m.view().read(Clone::clone);
    // The same name again: refused, nothing changes, the index still advances.
    let (out, _) = m.apply(4, 2, &entry(&create_stream(2, "orders")));
    assert!(matches!(out, MetadataApplied::Refused(_)), "{out:?}");
    let (out, _) = m.apply(5, 2, b"\xff\xff not an op");
    assert_eq!(out, MetadataApplied::Undecodable);
    assert_eq!(m.view().read(Clone::clone), before);
    assert_eq!(m.applied(), (5, 2));
    // An entry at or below the applied index is in the state already.
    let (out, _) = m.apply(3, 1, &entry(&create_stream(9, "again")));
    assert_eq!(out, MetadataApplied::Noop);
    assert_eq!(m.view().read(Clone::clone), before);
}

#[test]
fn a_restart_resumes_from_the_last_snapshot_and_reapplies_each_later_entry_once() {
    let mem = MemBackend::new();
    let ops: Vec<MetadataOp> = (1..=10)
        .map(|i| create_stream(i, &format!("s{i}")))
        .collect();
    let mut m = open(&mem, 4);
    for (i, op) in ops.iter().enumerate() {
        m.apply(i as u64 + 1, 1, &entry(op)).1.unwrap();
    }
    assert_eq!(m.durable_through(), 8, "snapshots at 4 and 8");
    let full = m.view().read(Clone::clone);
    drop(m);
    mem.crash();
    let mut m = open(&mem, 4);
    assert_eq!(m.applied(), (8, 1));
    assert_eq!(m.view().read(|s| s.streams.len()), 8);
    // The Raft layer applies the committed entries after the snapshot again, once.
    for (i, op) in ops.iter().enumerate().skip(8) {
        let (out, _) = m.apply(i as u64 + 1, 1, &entry(op));
        assert_eq!(out, MetadataApplied::Applied(vec![]));
    }
    assert_eq!(m.view().read(Clone::clone), full);
}

#[test]
fn a_snapshot_installs_on_another_member_and_damaged_bytes_are_refused() {
    let leader_disk = MemBackend::new();
    let mut leader = open(&leader_disk, 1_000);
    leader
        .apply(1, 3, &entry(&create_stream(1, "a")))
        .1
        .unwrap();
    leader
        .apply(2, 3, &entry(&create_topic(1, 1, 3)))
        .1
        .unwrap();
    let bytes = leader.snapshot().unwrap();

    let disk = MemBackend::new();
    let mut member = open(&disk, 1_000);
    for at in [0, 10, bytes.len() - 13, bytes.len() - 1] {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x40;
        assert!(member.install(&damaged).is_err(), "flip at {at}");
    }
    assert!(member.install(&bytes[..bytes.len() - 1]).is_err());
    assert_eq!(member.applied(), (0, 0));
    assert_eq!(member.install(&bytes).unwrap(), (2, 3));
    assert_eq!(member.durable_through(), 2);
    let want = leader.view().read(Clone::clone);
    assert_eq!(member.view().read(Clone::clone), want);
    // Durable before install returns.
    drop(member);
    disk.crash();
    let member = open(&disk, 1_000);
    assert_eq!(member.applied(), (2, 3));
    assert_eq!(member.view().read(Clone::clone), want);
}

#[derive(Debug, Clone)]
enum Step {
    Create(u32),
    Delete(u32),
    Purge(u32),
    Topic(u32, u32),
    Noop,
    Crash,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u32..6).prop_map(Step::Create),
        2 => (0u32..6).prop_map(Step::Delete),
        1 => (0u32..6).prop_map(Step::Purge),
        2 => (0u32..6, 1u32..3).prop_map(|(s, p)| Step::Topic(s, p)),
        1 => Just(Step::Noop),
        2 => Just(Step::Crash),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the crashes, the state after re-applying the log from the snapshot equals a
    /// model that applied every committed entry exactly once.
    #[test]
    fn crashes_never_apply_an_entry_twice_or_lose_one(
        steps in proptest::collection::vec(step(), 1..60),
        every in 1u64..6,
    ) {
        let mem = MemBackend::new();
        // The Raft log: every committed entry, by index (1-based).
        let mut log: Vec<Vec<u8>> = Vec::new();
        let mut model = MetadataState::default();
        let mut m = open(&mem, every);
        for s in steps {
            let op = match s {
                Step::Create(id) => Some(create_stream(id, &format!("s{id}"))),
                Step::Delete(id) => Some(MetadataOp::DeleteStream { id }),
                Step::Purge(id) => Some(MetadataOp::PurgeStream { id }),
                Step::Topic(s, p) => Some(create_topic(s, 1, p)),
                Step::Noop => None,
                Step::Crash => {
                    drop(m);
                    mem.crash();
                    m = open(&mem, every);
                    let from = m.applied().0;
                    prop_assert!(from <= log.len() as u64);
                    for (i, data) in log.iter().enumerate().skip(usize::try_from(from).unwrap()) {
                        m.apply(i as u64 + 1, 1, data).1.unwrap();
                    }
                    prop_assert_eq!(m.view().read(Clone::clone), model.clone());
                    continue;
                }
            };
            let data = op.as_ref().map(entry).unwrap_or_default();
            log.push(data.clone());
            if let Some(op) = &op {
                let _ = model.apply(op);
            }
            m.apply(log.len() as u64, 1, &data).1.unwrap();
            prop_assert_eq!(m.view().read(Clone::clone), model.clone());
        }
    }
}

/// Waits (at most 5 s) until the background writer made the snapshot at `index` durable.
fn durable_at(m: &ReplicatedMetadata, index: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while m.durable_through() < index {
        assert!(
            std::time::Instant::now() < deadline,
            "snapshot {index} never written"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn background_snapshots_are_written_off_the_applying_thread_and_never_replace_a_later_install() {
    let mem = MemBackend::new();
    let ops: Vec<MetadataOp> = (1..=10)
        .map(|i| create_stream(i, &format!("s{i}")))
        .collect();
    let mut m =
        ReplicatedMetadata::open_with(Arc::new(mem.clone()), DIR, 4, SnapshotWrites::Background)
            .unwrap();
    for (i, op) in ops.iter().enumerate() {
        m.apply(i as u64 + 1, 1, &entry(op)).1.unwrap();
    }
    // The log may go only through what is on disk.
    durable_at(&m, 8);
    assert_eq!(m.durable_through(), 8);
    drop(m);
    mem.crash();
    let m = open(&mem, 4);
    assert_eq!(m.applied(), (8, 1));
    assert_eq!(m.view().read(|s| s.streams.len()), 8);
    drop(m);

    // A leader's snapshot (at 20) installed while this member's own (at 12) may still be on
    // its way to the disk: the installed one stays.
    let leader_mem = MemBackend::new();
    let mut leader = open(&leader_mem, 1000);
    for i in 1..=20u32 {
        leader
            .apply(u64::from(i), 2, &entry(&create_stream(i, &format!("l{i}"))))
            .1
            .unwrap();
    }
    let installed = leader.snapshot().unwrap();
    let mut m =
        ReplicatedMetadata::open_with(Arc::new(mem.clone()), DIR, 4, SnapshotWrites::Background)
            .unwrap();
    for (i, op) in ops.iter().enumerate().skip(8) {
        m.apply(i as u64 + 1, 1, &entry(op)).1.unwrap();
    }
    for i in 11..=12u64 {
        m.apply(i, 1, &[]).1.unwrap();
    }
    assert_eq!(m.install(&installed).unwrap(), (20, 2));
    drop(m);
    mem.crash();
    let m = open(&mem, 4);
    assert_eq!(m.applied(), (20, 2));
    assert_eq!(m.view().read(|s| s.streams.len()), 20);
}

/// The change journal (`GET_METADATA_CHANGES` on a cluster member): each applied entry that
/// changed something is recorded at its Raft index; a restart holds nothing the snapshot
/// covers and records the entries applied again after it, under the same history id; an
/// installed snapshot starts the journal after it.
#[test]
fn the_change_journal_records_raft_indexes_and_starts_after_a_snapshot() {
    let mem = MemBackend::new();
    let mut m = open(&mem, 3);
    m.apply(1, 1, &[]).1.unwrap();
    m.apply(2, 1, &entry(&create_stream(1, "orders")))
        .1
        .unwrap();
    let _ = m.apply(3, 1, &entry(&create_stream(2, "orders")));
    m.apply(4, 1, &entry(&create_topic(1, 1, 2))).1.unwrap();
    let (log_id, held) = m.view().read_changes(|journal, state| {
        assert!(state.stream(1).is_some());
        let held: Vec<u64> = journal.entries().iter().map(|e| e.op).collect();
        assert_eq!(journal.head(), 4, "the refused entry at 3 recorded nothing");
        (journal.log_id(), held)
    });
    assert_eq!(held, [2, 4]);
    assert_ne!(log_id, 0);

    // Snapshot at 3 (every 3 entries): a restart holds what follows it, applied again.
    drop(m);
    let mut m = open(&mem, 3);
    assert_eq!(m.applied().0, 3);
    m.apply(4, 1, &entry(&create_topic(1, 1, 2))).1.unwrap();
    m.view().read_changes(|journal, _| {
        assert_eq!(journal.log_id(), log_id, "the history survives a restart");
        assert_eq!(journal.base(), 3);
        let held: Vec<u64> = journal.entries().iter().map(|e| e.op).collect();
        assert_eq!(held, [4]);
    });

    // Named after the cluster, two members' journals give the same cursors: the positions
    // and checksums are the replicated log's.
    let mem2 = MemBackend::new();
    let mut twin = open(&mem2, 100);
    for (index, op) in [(2, create_stream(1, "orders")), (4, create_topic(1, 1, 2))] {
        twin.apply(index, 1, &entry(&op)).1.unwrap();
    }
    m.view().adopt_history(0xC1);
    twin.view().adopt_history(0xC1);
    let last = |view: &MetadataView| {
        view.read_changes(|journal, _| {
            let e = journal.entries().back().unwrap();
            (journal.log_id(), e.op, e.checksum)
        })
    };
    assert_eq!(last(&m.view()), last(&twin.view()));

    // A snapshot installed from a leader: nothing before it is held.
    let leader_bytes = m.snapshot().unwrap();
    let other = MemBackend::new();
    let mut follower = open(&other, 100);
    follower
        .apply(1, 1, &entry(&create_stream(7, "x")))
        .1
        .unwrap();
    follower.view().adopt_history(0xC1);
    assert_eq!(follower.install(&leader_bytes).unwrap().0, 4);
    follower.view().read_changes(|journal, state| {
        assert_eq!(
            journal.log_id(),
            0xC1,
            "an installed snapshot keeps the history"
        );
        assert_eq!(journal.base(), 4);
        assert_eq!(journal.head(), 4);
        assert!(journal.entries().is_empty());
        assert!(state.stream(7).is_none() && state.stream(1).is_some());
    });
}
