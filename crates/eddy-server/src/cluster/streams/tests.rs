//! The request path's core on three in-process members over real files: metadata commits on
//! the leader only, concurrent producers through the partition's leader get contiguous offsets
//! exactly once, followers serve what they applied, consumer offsets are replicated, and after
//! the leader is lost the next one continues the same offsets.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use eddy_consensus::{NodeId, Role};
use eddy_log::CommitPool;
use eddy_stream_store::{
    ConsumerKey, MetadataOp, PartitionAddr, PollStrategy, StampWith, TopicConfig,
};

use super::ClusterStreams;
use crate::cluster::raft_groups::ClusterOutcome;
use crate::cluster::testkit;
use eddy_replicated::groups::{partition_group_id, METADATA_GROUP};
use eddy_replicated::stream::error::ClusterError;

type Peers = testkit::Peers<ClusterOutcome>;

const P0: PartitionAddr = PartitionAddr {
    stream_id: 1,
    topic_id: 1,
    partition_id: 0,
};

fn member(id: NodeId, root: &std::path::Path, peers: &Peers, pool: &CommitPool) -> ClusterStreams {
    let (runner, groups, view) = testkit::open_node(id, root, peers, pool);
    ClusterStreams::new(runner, groups, view)
}

fn at(members: &[Option<ClusterStreams>], id: NodeId) -> &ClusterStreams {
    members[usize::try_from(id - 1).unwrap()].as_ref().unwrap()
}

/// A batch whose stored bytes name the message and carry the stamp.
fn batch(n: u32) -> StampWith<impl FnOnce(&eddy_stream_store::Stamp) -> Bytes> {
    StampWith {
        count: 2,
        stamp: move |s: &eddy_stream_store::Stamp| {
            Bytes::from(format!(
                "batch {n} at {} t {}",
                s.base_offset, s.base_timestamp
            ))
        },
    }
}

/// Appends through whichever member leads the partition, retrying transient refusals as the
/// SDK does, for up to 10 s.
async fn append(members: &[Option<ClusterStreams>], n: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for m in members.iter().flatten() {
            match m.append(P0, batch(n), 1_000).await {
                Ok(appended) => return appended.base_offset,
                // A member that has not applied the topic yet has no group for it.
                Err(e) if e.is_transient() || matches!(e, ClusterError::NoPartition(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert!(Instant::now() < deadline, "batch {n} never appended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn served(m: &ClusterStreams) -> Vec<(u64, Bytes)> {
    m.poll(P0, None, PollStrategy::Offset(0), 10_000, u64::MAX)
        .map(|p| {
            p.batches
                .into_iter()
                .map(|b| (b.base_offset, b.bytes))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_consumers_and_a_lost_leader_on_the_replicated_request_path() {
    let tmp = tempfile::tempdir().unwrap();
    let pool = CommitPool::new(2).unwrap();
    let peers: Peers = Arc::default();
    peers.lock().unwrap().extend([None, None, None]);
    let mut members: Vec<Option<ClusterStreams>> = (1..=3)
        .map(|id| Some(member(id, tmp.path(), &peers, &pool)))
        .collect();

    let leader = testkit::leader(&peers, METADATA_GROUP);
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    let create = MetadataOp::CreateStream {
        id: 1,
        name: "orders".into(),
        created_at: 1,
        options: vec![],
    };
    // Only the leader commits; a follower's refusal is transient (the SDK asks the leader).
    let refused = at(&members, follower).commit(&create).await.unwrap_err();
    assert!(matches!(refused, ClusterError::NotLeader(_)), "{refused}");
    assert!(refused.is_transient());
    at(&members, leader).commit(&create).await.unwrap();
    let dup = at(&members, leader).commit(&create).await.unwrap_err();
    assert!(matches!(dup, ClusterError::Metadata(_)), "{dup}");
    let effects = at(&members, leader)
        .commit_here(&MetadataOp::CreateTopic {
            stream_id: 1,
            id: 1,
            name: "placed".into(),
            created_at: 2,
            partitions: 1,
            config: crate::cluster::testkit::small_topic(),
            explicit_options: vec![],
            derived_options: vec![],
        })
        .await
        .unwrap();
    assert_eq!(effects.len(), 1);
    // Every member balances leaderships periodically, as a server's maintenance does (a
    // partition group another member won hands its leadership to its preferred member).
    let aligner = spawn_aligner(&members);
    let uid = at(&members, leader).groups().get(P0).unwrap().0;
    let gid = partition_group_id(uid);
    let preferred = crate::cluster::raft_groups::preferred_leader(gid, &[3, 1, 2]).unwrap();
    testkit::eventually(
        || {
            peers.lock().unwrap()[usize::try_from(preferred - 1).unwrap()]
                .as_ref()
                .and_then(|r| r.view().get(gid))
                .is_some_and(|v| v.role == Role::Leader)
        },
        || format!("member {preferred} never led the partition it is preferred for"),
    );
    // The partition's leader is `leader` from here on; the metadata's stays `meta`.
    let (meta, leader) = (leader, preferred);
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    let first = at(&members, leader)
        .append(P0, batch(1000), 1_000)
        .await
        .unwrap();
    assert_eq!(first.base_offset, 0);
    let mut pre = vec![(0u64, Bytes::from("batch 1000 at 0 t 1000"))];

    // Concurrent producers on the leader: every batch acknowledged once, offsets contiguous.
    let producer = at(&members, leader).clone();
    let tasks: Vec<_> = (0..40u32)
        .map(|n| {
            let p = producer.clone();
            tokio::spawn(async move { (n, p.append(P0, batch(n), 1_000).await) })
        })
        .collect();
    let mut acked = Vec::new();
    for t in tasks {
        let (n, r) = t.await.unwrap();
        acked.push((r.unwrap().base_offset, n));
    }
    acked.sort_unstable();
    let offsets: Vec<u64> = acked.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, (1..=40).map(|i| i * 2).collect::<Vec<u64>>());
    // A follower does not take appends.
    let refused = at(&members, follower)
        .append(P0, batch(99), 1_000)
        .await
        .unwrap_err();
    assert!(refused.is_transient(), "{refused}");
    // Every member serves exactly the acknowledged batches, stamped as acknowledged.
    pre.extend(
        acked
            .iter()
            .map(|(o, n)| (*o, Bytes::from(format!("batch {n} at {o} t 1000")))),
    );
    let want = pre;
    for m in members.iter().flatten() {
        testkit::eventually(
            || served(m) == want,
            || format!("serves {:?}", served(m).len()),
        );
    }

    // A consumer's offset is replicated with the metadata: a follower resumes after it.
    let consumer = ConsumerKey::Consumer(7);
    at(&members, meta)
        .commit(&MetadataOp::StoreConsumerOffset {
            addr: P0,
            consumer,
            offset: 9,
            forward_only: false,
        })
        .await
        .unwrap();
    let f = at(&members, follower);
    testkit::eventually(
        || f.consumer_offset(P0, consumer) == Some(9),
        || "the follower's consumer offset".into(),
    );
    let next = f
        .poll(P0, Some(consumer), PollStrategy::Next, 1, u64::MAX)
        .unwrap();
    assert_eq!(next.batches[0].base_offset, 10);

    // The partition leader's process dies: the others elect a leader and the offsets go on.
    let lost = members[usize::try_from(leader - 1).unwrap()]
        .take()
        .unwrap();
    lost.runner().stop();
    peers.lock().unwrap()[usize::try_from(leader - 1).unwrap()] = None;
    drop(lost);
    let mut more = Vec::new();
    for n in 100..105 {
        more.push((append(&members, n).await, n));
    }
    assert_eq!(
        more.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        vec![82, 84, 86, 88, 90]
    );
    let mut want = want;
    want.extend(
        more.iter()
            .map(|(o, n)| (*o, Bytes::from(format!("batch {n} at {o} t 1000")))),
    );
    for m in members.iter().flatten() {
        testkit::eventually(
            || served(m) == want,
            || format!("serves {:?}", served(m).len()),
        );
        assert_eq!(m.partition_stats(P0).unwrap().next_offset, 92);
    }
    aligner.abort();
    for m in members.iter().flatten() {
        m.runner().stop();
    }
}

/// Everything older than 1 µs has expired: every sealed segment may go.
fn expiring() -> TopicConfig {
    TopicConfig {
        message_expiry: Some(1),
        ..crate::cluster::testkit::small_topic()
    }
}

/// Creates stream 1 and its topic 1 (one partition, `config`) through the metadata leader.
async fn create_topic(leader: &ClusterStreams, config: TopicConfig) {
    leader
        .commit(&MetadataOp::CreateStream {
            id: 1,
            name: "s".into(),
            created_at: 1,
            options: vec![],
        })
        .await
        .unwrap();
    leader
        .commit(&MetadataOp::CreateTopic {
            stream_id: 1,
            id: 1,
            name: "t".into(),
            created_at: 2,
            partitions: 1,
            config,
            explicit_options: vec![],
            derived_options: vec![],
        })
        .await
        .unwrap();
}

/// Balances every member's leaderships every 100 ms, as each server's maintenance does.
fn spawn_aligner(members: &[Option<ClusterStreams>]) -> tokio::task::JoinHandle<()> {
    let aligning: Vec<ClusterStreams> = members.iter().flatten().cloned().collect();
    tokio::spawn(async move {
        loop {
            for m in &aligning {
                m.groups().balance_leaders();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Every file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_encryption_key_no_message_is_readable_in_any_members_files() {
    const SECRET: &str = "the-plaintext-that-must-not-reach-disk";
    let tmp = tempfile::tempdir().unwrap();
    let pool = CommitPool::new(2).unwrap();
    let peers: Peers = Arc::default();
    peers.lock().unwrap().extend([None, None, None]);
    let cipher = eddy_log::Cipher::new(&[7u8; 32]);
    let members: Vec<Option<ClusterStreams>> = (1..=3)
        .map(|id| {
            let (runner, groups, view) =
                testkit::open_node_with(id, tmp.path(), &peers, &pool, Some(cipher.clone()));
            Some(ClusterStreams::new(runner, groups, view))
        })
        .collect();
    let aligner = spawn_aligner(&members);
    let leader = testkit::leader(&peers, METADATA_GROUP);
    let l = at(&members, leader);
    create_topic(l, crate::cluster::testkit::small_topic()).await;
    for n in 0..5u32 {
        let body = StampWith {
            count: 1,
            stamp: move |_: &eddy_stream_store::Stamp| Bytes::from(format!("{SECRET}-{n}")),
        };
        append_to(&members, body).await;
    }
    // Every member serves the messages in the clear...
    for m in members.iter().flatten() {
        testkit::eventually(
            || {
                served(m).len() == 5
                    && served(m)
                        .iter()
                        .all(|(_, b)| b.starts_with(SECRET.as_bytes()))
            },
            || format!("serves {:?}", served(m)),
        );
    }
    aligner.abort();
    for m in members.iter().flatten() {
        m.runner().stop();
    }
    // ...and none of their files holds them.
    let files = files_under(tmp.path());
    assert!(files
        .iter()
        .any(|f| f.to_string_lossy().contains("partitions")));
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
            "{} holds a message in the clear",
            file.display()
        );
    }
}

/// Appends `batch` through whichever member leads the partition (retrying transient
/// refusals for up to 10 s).
async fn append_to<F>(members: &[Option<ClusterStreams>], batch: StampWith<F>)
where
    F: FnOnce(&eddy_stream_store::Stamp) -> Bytes + Clone,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for m in members.iter().flatten() {
            match m.append(P0, batch.clone(), 1_000).await {
                Ok(_) => return,
                // A member that has not applied the topic yet has no group for it.
                Err(e) if e.is_transient() || matches!(e, ClusterError::NoPartition(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert!(Instant::now() < deadline, "never appended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_expired_segments_on_every_member_and_survives_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let pool = CommitPool::new(2).unwrap();
    let peers: Peers = Arc::default();
    peers.lock().unwrap().extend([None, None, None]);
    let mut members: Vec<Option<ClusterStreams>> = (1..=3)
        .map(|id| Some(member(id, tmp.path(), &peers, &pool)))
        .collect();
    let aligner = spawn_aligner(&members);
    let leader = testkit::leader(&peers, METADATA_GROUP);
    let l = at(&members, leader);
    create_topic(l, expiring()).await;
    // Enough batches to seal several 16 KiB segments of the partition's Raft log.
    let big = |n: u32| StampWith {
        count: 1,
        stamp: move |_: &eddy_stream_store::Stamp| Bytes::from(vec![b'x'; 4_000 + n as usize]),
    };
    for n in 0..30u32 {
        append_to(&members, big(n)).await;
    }
    // Maintenance deletes the expired sealed segments on every member: the first offset
    // moves past 0 and the oldest files go; what is left stays contiguous.
    for m in members.iter().flatten() {
        testkit::eventually(
            || {
                m.partition_stats(P0)
                    .is_some_and(|s| s.first_offset > 0 && s.next_offset == 30)
            },
            || format!("figures {:?}", m.partition_stats(P0)),
        );
        // Retention may still be deleting: the boundary read before the poll is one the poll
        // cannot be behind (read after it, it may already have moved past what was polled).
        let first = m.partition_stats(P0).unwrap().first_offset;
        let polled = m
            .poll(P0, None, PollStrategy::First, 100, u64::MAX)
            .unwrap();
        assert!(polled.batches[0].base_offset >= first);
    }
    // A member restarts: it resumes from its recorded boundary.
    let id = (1..=3).find(|&i| i != leader).unwrap();
    let idx = usize::try_from(id - 1).unwrap();
    let before = at(&members, id).partition_stats(P0).unwrap().first_offset;
    members[idx].take().unwrap().runner().stop();
    peers.lock().unwrap()[idx] = None;
    members[idx] = Some(member(id, tmp.path(), &peers, &pool));
    let back = at(&members, id);
    testkit::eventually(
        || {
            back.partition_stats(P0)
                .is_some_and(|s| s.next_offset == 30 && s.first_offset >= before)
        },
        || format!("after restart {:?}", back.partition_stats(P0)),
    );
    aligner.abort();
    for m in members.iter().flatten() {
        m.runner().stop();
    }
}

/// Deletes `count` of P0's oldest segments through whichever member leads its group,
/// asked again while the answer is transient (the aligner may move the leadership between
/// finding the leader and proposing: raft-rs drops a proposal while a transfer is pending);
/// returns the member that did it.
async fn delete_on_leader(members: &[Option<ClusterStreams>], count: u32) -> &ClusterStreams {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let leading = members
            .iter()
            .flatten()
            .find(|m| m.leads(partition_group_id(m.groups().get(P0).unwrap().0)));
        if let Some(leading) = leading {
            match leading.delete_segments(P0, count).await {
                Ok(()) => return leading,
                Err(e) => assert!(
                    e.is_transient() && std::time::Instant::now() < deadline,
                    "delete_segments: {e}"
                ),
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_segments_cuts_every_member_at_the_leaders_segment_boundary() {
    let tmp = tempfile::tempdir().unwrap();
    let pool = CommitPool::new(2).unwrap();
    let peers: Peers = Arc::default();
    peers.lock().unwrap().extend([None, None, None]);
    let members: Vec<Option<ClusterStreams>> = (1..=3)
        .map(|id| Some(member(id, tmp.path(), &peers, &pool)))
        .collect();
    let aligner = spawn_aligner(&members);
    let leader = testkit::leader(&peers, METADATA_GROUP);
    let l = at(&members, leader);
    create_topic(l, crate::cluster::testkit::small_topic()).await;
    // 2 KiB batches into 16 KiB segments: several sealed segments.
    for n in 0..40u32 {
        let body = StampWith {
            count: 1,
            stamp: move |_: &eddy_stream_store::Stamp| {
                Bytes::from(vec![b'a' + u8::try_from(n % 26).unwrap(); 2048])
            },
        };
        append_to(&members, body).await;
    }
    let leading = members
        .iter()
        .flatten()
        .find(|m| m.leads(partition_group_id(m.groups().get(P0).unwrap().0)))
        .expect("a partition leader");
    let segments = leading.partition_stats(P0).unwrap().segments;
    assert!(segments >= 4, "{segments} segments");
    let partition = leading.groups().get(P0).unwrap().1.partition();
    let through = partition
        .oldest_segments_end(2)
        .expect("two sealed segments");

    let leading = delete_on_leader(&members, 2).await;
    let first = leading.partition_stats(P0).unwrap().first_offset;
    assert!(first > 0, "the leader serves from the cut at once");
    // Every member applied the same cut (whatever its own segment boundaries), and each
    // deletes its files below it at its next maintenance.
    for m in members.iter().flatten() {
        testkit::eventually(
            || served(m).first().map(|(o, _)| *o) == Some(first),
            || format!("serves from {:?}", served(m).first().map(|(o, _)| *o)),
        );
        assert_eq!(m.partition_stats(P0).unwrap().next_offset, 40);
        assert!(m.groups().get(P0).unwrap().1.partition().visible_floor() >= through);
    }
    // More than are sealed: every sealed segment goes, never the active one; then there is
    // nothing left to delete, and deleting is a no-op success.
    let leading = delete_on_leader(&members, 1000).await;
    let stats = leading.partition_stats(P0).unwrap();
    assert!(
        stats.first_offset > first && stats.next_offset == 40,
        "{stats:?}"
    );
    let leading = delete_on_leader(&members, 1000).await;
    assert_eq!(
        leading
            .groups()
            .get(P0)
            .unwrap()
            .1
            .partition()
            .oldest_segments_end(1),
        None
    );
    // A follower refuses: the SDK asks the leader.
    let follower = members
        .iter()
        .flatten()
        .find(|m| !m.leads(partition_group_id(m.groups().get(P0).unwrap().0)))
        .unwrap();
    assert!(follower
        .delete_segments(P0, 1)
        .await
        .unwrap_err()
        .is_transient());
    aligner.abort();
    for m in members.iter().flatten() {
        m.runner().stop();
    }
}
