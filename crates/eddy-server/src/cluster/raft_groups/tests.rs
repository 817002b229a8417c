//! Three nodes, each running the metadata group and the partition groups its effects create on
//! one Raft thread over real files: a topic's partitions become groups on every member,
//! messages go through each partition's own leader, a purge and a deletion reach every member,
//! and a restarted node rebuilds its groups from the metadata.

use std::path::Path;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use bytes::Bytes;
use eddy_consensus::{GroupId, NodeId, ProposeError, Runner};
use eddy_log::CommitPool;
use eddy_stream_store::metadata::encode_op;
use eddy_stream_store::replicated::{ApplyOutcome, PartitionEntry};
use eddy_stream_store::replicated_metadata::{MetadataApplied, MetadataView};
use eddy_stream_store::{MetadataOp, PartitionAddr, PollStrategy};

use super::{ClusterOutcome, PartitionGroups};
use crate::cluster::testkit;
use eddy_replicated::groups::{partition_group_id, METADATA_GROUP};

type Peers = testkit::Peers<ClusterOutcome>;

struct Member {
    runner: Runner<ClusterOutcome>,
    groups: PartitionGroups,
    view: MetadataView,
}

fn open_member(id: NodeId, root: &Path, peers: &Peers, pool: &CommitPool) -> Member {
    let (runner, groups, view) = testkit::open_node(id, root, peers, pool);
    Member {
        runner,
        groups,
        view,
    }
}

fn propose(
    runner: &Runner<ClusterOutcome>,
    group: GroupId,
    data: Bytes,
) -> Result<ClusterOutcome, ProposeError> {
    let (tx, rx) = mpsc::channel();
    runner.propose(
        group,
        data,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

fn metadata(members: &[Option<Member>], peers: &Peers, op: &MetadataOp) -> MetadataApplied {
    let leader = testkit::leader(peers, METADATA_GROUP);
    let m = members[usize::try_from(leader - 1).unwrap()]
        .as_ref()
        .unwrap();
    match propose(&m.runner, METADATA_GROUP, encode_op(op).unwrap().into()).unwrap() {
        ClusterOutcome::Metadata(out) => out,
        other => panic!("{other:?}"),
    }
}

/// Appends `body` (`count` messages) through the partition's own leader.
fn produce(
    members: &[Option<Member>],
    peers: &Peers,
    addr: PartitionAddr,
    count: u32,
    body: &[u8],
) -> ApplyOutcome {
    let uid = members
        .iter()
        .flatten()
        .next()
        .unwrap()
        .groups
        .get(addr)
        .unwrap()
        .0;
    let leader = testkit::leader(peers, partition_group_id(uid));
    let m = members[usize::try_from(leader - 1).unwrap()]
        .as_ref()
        .unwrap();
    let (_, group) = m.groups.get(addr).unwrap();
    let stamp = group.predict([]);
    let entry = PartitionEntry::Append {
        base_offset: stamp.next_offset,
        message_count: count,
        timestamp: stamp.min_timestamp.max(1_000),
        batch: Bytes::copy_from_slice(body),
    }
    .encode()
    .unwrap();
    match propose(&m.runner, partition_group_id(uid), entry).unwrap() {
        ClusterOutcome::Partition(out) => out,
        other => panic!("{other:?}"),
    }
}

fn served(m: &Member, addr: PartitionAddr) -> Option<Vec<(u64, Bytes)>> {
    let (_, group) = m.groups.get(addr)?;
    let polled = group
        .partition()
        .poll(PollStrategy::Offset(0), 1_000, None, u64::MAX)
        .ok()?;
    Some(
        polled
            .batches
            .into_iter()
            .map(|b| (b.base_offset, b.bytes))
            .collect(),
    )
}

fn wait_served(members: &[Option<Member>], addr: PartitionAddr, want: &[(u64, Bytes)]) {
    for m in members.iter().flatten() {
        testkit::eventually(
            || served(m, addr).as_deref() == Some(want),
            || format!("a member serves {:?}", served(m, addr)),
        );
    }
}

const P0: PartitionAddr = PartitionAddr {
    stream_id: 1,
    topic_id: 1,
    partition_id: 0,
};
const P1: PartitionAddr = PartitionAddr {
    stream_id: 1,
    topic_id: 1,
    partition_id: 1,
};

#[test]
fn partition_groups_follow_the_metadata_on_every_member() {
    let tmp = tempfile::tempdir().unwrap();
    let pool = CommitPool::new(2).unwrap();
    let peers: Peers = Arc::default();
    peers.lock().unwrap().extend([None, None, None]);
    let mut members: Vec<Option<Member>> = (1..=3)
        .map(|id| Some(open_member(id, tmp.path(), &peers, &pool)))
        .collect();

    let out = metadata(
        &members,
        &peers,
        &MetadataOp::CreateStream {
            id: 1,
            name: "orders".into(),
            created_at: 1,
            options: vec![],
        },
    );
    assert_eq!(out, MetadataApplied::Applied(vec![]));
    let out = metadata(
        &members,
        &peers,
        &MetadataOp::CreateTopic {
            stream_id: 1,
            id: 1,
            name: "placed".into(),
            created_at: 2,
            partitions: 2,
            config: crate::cluster::testkit::small_topic(),
            explicit_options: vec![],
            derived_options: vec![],
        },
    );
    assert!(
        matches!(&out, MetadataApplied::Applied(e) if e.len() == 2),
        "{out:?}"
    );
    for m in members.iter().flatten() {
        testkit::eventually(
            || m.groups.all().len() == 2,
            || format!("groups {:?}", m.groups.all()),
        );
    }

    // Each partition is its own group with its own leader.
    let mut want0 = Vec::new();
    for i in 0..5u8 {
        let body = vec![i; 300];
        let out = produce(&members, &peers, P0, 2, &body);
        assert!(
            matches!(out, ApplyOutcome::Appended { base_offset, .. } if base_offset == u64::from(i) * 2),
            "{out:?}"
        );
        want0.push((u64::from(i) * 2, Bytes::from(body)));
    }
    let out = produce(&members, &peers, P1, 1, b"other");
    assert!(matches!(out, ApplyOutcome::Appended { base_offset: 0, .. }));
    wait_served(&members, P0, &want0);
    wait_served(&members, P1, &[(0, Bytes::from_static(b"other"))]);

    // A purge of the topic reaches every partition on every member.
    let out = metadata(
        &members,
        &peers,
        &MetadataOp::PurgeTopic {
            stream_id: 1,
            topic_id: 1,
        },
    );
    assert!(
        matches!(&out, MetadataApplied::Applied(e) if e.len() == 2),
        "{out:?}"
    );
    wait_served(&members, P0, &[]);
    wait_served(&members, P1, &[]);

    // A node restarts: its groups come back from the metadata, and offsets restart at 0 after
    // the purge on every member.
    let gone = members[0].take().unwrap();
    gone.runner.stop();
    peers.lock().unwrap()[0] = None;
    drop(gone);
    members[0] = Some(open_member(1, tmp.path(), &peers, &pool));
    testkit::eventually(
        || members[0].as_ref().unwrap().groups.all().len() == 2,
        || "the restarted node's groups".into(),
    );
    let out = produce(&members, &peers, P0, 1, b"after");
    assert!(
        matches!(out, ApplyOutcome::Appended { base_offset: 0, .. }),
        "{out:?}"
    );
    wait_served(&members, P0, &[(0, Bytes::from_static(b"after"))]);
    for m in members.iter().flatten() {
        testkit::eventually(
            || m.view.read(|s| s.streams.len() == 1),
            || "metadata".into(),
        );
    }

    // A purge the metadata holds but a partition missed (its leader lost leadership before
    // the proposal landed) is proposed again by the partition's next leader.
    let mut purged = members[1].as_ref().unwrap().view.read(Clone::clone);
    purged
        .apply(&MetadataOp::PurgeTopic {
            stream_id: 1,
            topic_id: 1,
        })
        .unwrap();
    let missed = MetadataView::of(purged);
    for m in members.iter().flatten() {
        m.groups.repurge(&missed);
    }
    wait_served(&members, P0, &[]);

    // Deleting the topic removes its groups and their files on every member.
    let out = metadata(
        &members,
        &peers,
        &MetadataOp::DeleteTopic {
            stream_id: 1,
            topic_id: 1,
        },
    );
    assert!(
        matches!(&out, MetadataApplied::Applied(e) if e.len() == 2),
        "{out:?}"
    );
    for (i, m) in members.iter().enumerate() {
        let m = m.as_ref().unwrap();
        let dir = tmp
            .path()
            .join(format!("node-{}", i + 1))
            .join(eddy_replicated::groups::PARTITIONS_DIR);
        testkit::eventually(
            || {
                m.groups.all().is_empty()
                    && std::fs::read_dir(&dir).map_or(true, |d| d.count() == 0)
            },
            || format!("groups {:?} left on node {}", m.groups.all(), i + 1),
        );
    }
    for m in members.iter().flatten() {
        m.runner.stop();
    }
}

/// The voters of `gid` as member `m` runs it.
fn voters(m: &Member, gid: GroupId) -> Option<Vec<NodeId>> {
    let (tx, rx) = mpsc::channel();
    m.runner.with(move |node| {
        let _ = tx.send(node.membership(gid).map(|s| s.voters));
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

#[test]
fn a_placed_partition_is_founded_on_its_replicas_on_every_member_and_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let pool = CommitPool::new(2).unwrap();
    let peers: Peers = Arc::default();
    peers.lock().unwrap().extend([None, None, None]);
    let mut members: Vec<Option<Member>> = (1..=3)
        .map(|id| Some(open_member(id, tmp.path(), &peers, &pool)))
        .collect();
    metadata(
        &members,
        &peers,
        &MetadataOp::CreateStream {
            id: 1,
            name: "orders".into(),
            created_at: 1,
            options: vec![],
        },
    );
    let out = metadata(
        &members,
        &peers,
        &MetadataOp::Placed {
            replicas: vec![1, 2],
            op: Box::new(MetadataOp::CreateTopic {
                stream_id: 1,
                id: 1,
                name: "t".into(),
                created_at: 2,
                partitions: 1,
                config: crate::cluster::testkit::small_topic(),
                explicit_options: vec![],
                derived_options: vec![],
            }),
        },
    );
    assert!(
        matches!(&out, MetadataApplied::Applied(e) if e.len() == 1),
        "{out:?}"
    );
    let gid = partition_group_id(0);
    for m in members.iter().flatten() {
        testkit::eventually(
            || voters(m, gid) == Some(vec![1, 2]),
            || format!("voters {:?}", voters(m, gid)),
        );
    }
    let out = produce(&members, &peers, P0, 1, b"placed");
    assert!(matches!(out, ApplyOutcome::Appended { base_offset: 0, .. }));
    // Member 3 holds no vote in it: it never leads it.
    assert_ne!(testkit::leader(&peers, gid), 3);

    // Enough metadata entries for a snapshot (every 8): a restarted member founds the group
    // on the same voters from the placement the snapshot carries.
    for id in 2..12 {
        metadata(
            &members,
            &peers,
            &MetadataOp::CreateStream {
                id,
                name: format!("s{id}"),
                created_at: 3,
                options: vec![],
            },
        );
    }
    for i in [0, 2] {
        let gone = members[i].take().unwrap();
        gone.runner.stop();
        peers.lock().unwrap()[i] = None;
        drop(gone);
        members[i] = Some(open_member(i as u64 + 1, tmp.path(), &peers, &pool));
        let m = members[i].as_ref().unwrap();
        testkit::eventually(
            || voters(m, gid) == Some(vec![1, 2]),
            || format!("voters after a restart {:?}", voters(m, gid)),
        );
    }
    // A leader stamps from what it applied: wait until both voters applied the first append
    // again (a restarted member may lead before it has).
    for m in members[..2].iter().flatten() {
        testkit::eventually(
            || served(m, P0).is_some_and(|batches| batches.len() == 1),
            || format!("served after a restart {:?}", served(m, P0)),
        );
    }
    let out = produce(&members, &peers, P0, 1, b"again");
    assert!(
        matches!(out, ApplyOutcome::Appended { base_offset: 1, .. }),
        "{out:?}"
    );
    for m in members.iter().flatten() {
        m.runner.stop();
    }
}
