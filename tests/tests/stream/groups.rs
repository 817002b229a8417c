//! Consumer groups with the SDK: several members joining and leaving, sticky assignment on
//! joins, round-robin rebalancing on leave, disconnect and partition changes, group polling
//! with commits, cooperative hand-over of partitions with uncommitted polls, and the eviction
//! of stale members.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::stream_support::raw::Raw;
use crate::stream_support::*;
use eddy_codec::stream::commands::{
    join_consumer_group, poll_messages, store_consumer_offset, sync_consumer_group,
};
use eddy_codec::stream::{
    AckLevel, ConsumerKind, Identifier, OptionalPartition, PollingStrategy as WireStrategy, Request,
};
use eddy_wire::stream::EvictionReason;
use iggy::prelude::*;

async fn members(client: &IggyClient, group: &str) -> Vec<Vec<u32>> {
    let details = client
        .get_consumer_group(&id(0), &id(0), &named(group))
        .await
        .unwrap()
        .expect("group exists");
    assert_eq!(details.members_count as usize, details.members.len());
    let mut members: Vec<(u32, Vec<u32>)> = details
        .members
        .into_iter()
        .map(|m| (m.id, m.partitions))
        .collect();
    members.sort();
    members.into_iter().map(|(_, p)| p).collect()
}

async fn wait_for_members(client: &IggyClient, group: &str, count: usize) -> Vec<Vec<u32>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = members(client, group).await;
        if now.len() == count || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_poll_leave_and_rebalance() {
    let eddy = server();
    let addr = eddy.addrs().stream;
    let admin = root(addr).await;
    stream_and_topic(&admin, "s", "t", 4).await;
    let group = admin
        .create_consumer_group(&id(0), &id(0), "g")
        .await
        .unwrap();
    assert_eq!(group.id, 0);
    assert_eq!(group.members_count, 0);
    let err = admin
        .create_consumer_group(&id(0), &id(0), "g")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 5004, "{err}");
    // 40 messages, 10 per partition.
    fill(&admin, 4, 10).await;

    let a = root(addr).await;
    let b = root(addr).await;
    let c = root(addr).await;
    for member in [&a, &b, &c] {
        member
            .join_consumer_group(&id(0), &id(0), &named("g"))
            .await
            .unwrap();
    }
    // Joining twice is a no-op.
    a.join_consumer_group(&id(0), &id(0), &named("g"))
        .await
        .unwrap();
    // Joins are sticky: each moves only the excess of the members above their share.
    assert_eq!(members(&admin, "g").await, [vec![0, 1], vec![2], vec![3]]);
    let me = a.get_me().await.unwrap();
    assert_eq!(me.consumer_groups_count, 1);
    assert_eq!(me.consumer_groups[0].group_id, 0);

    // Every member polls its own partitions; together they read every message once.
    let consumer = Consumer::group(named("g"));
    let mut seen = BTreeSet::new();
    for member in [&a, &b, &c] {
        for _ in 0..6 {
            let polled = group_next(member, None, 10, true).await;
            for m in polled.messages {
                assert!(
                    seen.insert(String::from_utf8_lossy(&m.payload).into_owned()),
                    "read twice"
                );
            }
        }
    }
    assert_eq!(seen.len(), 40);

    // A member polling a partition it does not own gets the re-sync sentinel.
    let fenced = b
        .poll_messages(
            &id(0),
            &id(0),
            Some(0),
            &consumer,
            &PollingStrategy::next(),
            10,
            false,
        )
        .await
        .unwrap();
    assert!(fenced.messages.is_empty());
    assert_eq!(fenced.partition_id, u32::MAX);
    // And may not commit it.
    let err = b
        .store_consumer_offset(&consumer, &id(0), &id(0), Some(0), 1)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 5009, "{err}");

    // Leave: the rest take over round-robin; leaving again is not a member.
    b.leave_consumer_group(&id(0), &id(0), &named("g"))
        .await
        .unwrap();
    assert_eq!(members(&admin, "g").await, [vec![0, 2], vec![1, 3]]);
    let err = b
        .leave_consumer_group(&id(0), &id(0), &named("g"))
        .await
        .unwrap_err();
    assert_eq!(code(&err), 5006, "{err}");

    // New partitions are dealt out too.
    admin.create_partitions(&id(0), &id(0), 2).await.unwrap();
    assert_eq!(members(&admin, "g").await, [vec![0, 2, 4], vec![1, 3, 5]]);

    // Disconnecting is leaving.
    c.shutdown().await.unwrap();
    drop(c);
    assert_eq!(
        wait_for_members(&admin, "g", 1).await,
        [vec![0, 1, 2, 3, 4, 5]]
    );
    // Logout is leaving.
    a.logout_user().await.unwrap();
    assert!(wait_for_members(&admin, "g", 0).await.is_empty());

    // The group's committed offsets survive its members.
    let offset = admin
        .get_consumer_offset(&consumer, &id(0), &id(0), Some(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(offset.stored_offset, 9);

    let groups = admin.get_consumer_groups(&id(0), &id(0)).await.unwrap();
    assert_eq!(groups.len(), 1);
    admin
        .delete_consumer_group(&id(0), &id(0), &named("g"))
        .await
        .unwrap();
    assert!(admin
        .get_consumer_group(&id(0), &id(0), &named("g"))
        .await
        .unwrap()
        .is_none());
    let err = admin
        .delete_consumer_group(&id(0), &id(0), &id(0))
        .await
        .unwrap_err();
    assert_eq!(code(&err), 5000, "{err}");
    // Group ids are never reused within a topic.
    let next = admin
        .create_consumer_group(&id(0), &id(0), "g")
        .await
        .unwrap();
    assert_eq!(next.id, 1);
}

fn join(group: &str) -> Request {
    Request::JoinConsumerGroup(join_consumer_group::JoinConsumerGroup {
        stream_id: Identifier::numeric(0),
        topic_id: Identifier::numeric(0),
        group_id: Identifier::named(group).unwrap(),
    })
}

fn sync(group: &str) -> Request {
    Request::SyncConsumerGroup(sync_consumer_group::SyncConsumerGroup {
        stream_id: Identifier::numeric(0),
        topic_id: Identifier::numeric(0),
        group_id: Identifier::named(group).unwrap(),
    })
}

#[tokio::test]
async fn generations_and_stale_members() {
    // A short heartbeat: members silent for 1.2 x 400 ms are evicted.
    let eddy = server_with(&["--stream-heartbeat-interval-ms", "400"]);
    let addr = eddy.addrs().stream;
    let mut admin = Raw::logged_in(addr, "iggy", "iggy").await;
    let setup = root(addr).await;
    stream_and_topic(&setup, "s", "t", 2).await;
    setup
        .create_consumer_group(&id(0), &id(0), "g")
        .await
        .unwrap();
    drop(setup);

    let mut quiet = Raw::logged_in(addr, "iggy", "iggy").await;
    let mut busy = Raw::logged_in(addr, "iggy", "iggy").await;
    assert_eq!(quiet.call(&join("g")).await.code(), 0);
    // Sync answers [generation][count][partitions].
    let payload = quiet.call(&sync("g")).await.payload();
    assert_eq!(u64::from_le_bytes(payload[..8].try_into().unwrap()), 1);
    assert_eq!(&payload[8..], &[2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
    assert_eq!(busy.call(&join("g")).await.code(), 0);
    let payload = busy.call(&sync("g")).await.payload();
    assert_eq!(u64::from_le_bytes(payload[..8].try_into().unwrap()), 2);
    assert_eq!(&payload[8..], &[1, 0, 0, 0, 1, 0, 0, 0]);
    // A non-member's sync is empty.
    assert!(admin.call(&sync("g")).await.payload().is_empty());

    // `busy` keeps talking; `quiet` stays silent and is evicted, then closed.
    let started = Instant::now();
    let answer = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(busy.call(&sync("g")).await.code(), 0);
        if started.elapsed() > Duration::from_millis(700) {
            break quiet.read().await.expect("an eviction before close");
        }
    };
    assert_eq!(answer.eviction(), Some(EvictionReason::StaleClient as u8));
    assert!(
        quiet.closed().await,
        "an unsolicited eviction is followed by close"
    );
    let payload = busy.call(&sync("g")).await.payload();
    assert_eq!(u64::from_le_bytes(payload[..8].try_into().unwrap()), 3);
    assert_eq!(&payload[8..], &[2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
    // A silent connection that is in no group is not evicted.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(admin.call(&sync("g")).await.code(), 0);
}

/// As root: stream 0, topic 0 of `partitions` partitions with `n` messages in each, and
/// consumer group `g`.
async fn group_topic(addr: std::net::SocketAddr, partitions: u32, n: usize) -> IggyClient {
    let admin = root(addr).await;
    stream_and_topic(&admin, "s", "t", partitions).await;
    admin
        .create_consumer_group(&id(0), &id(0), "g")
        .await
        .unwrap();
    fill(&admin, partitions, n).await;
    admin
}

/// `n` messages (`p<partition>-<i>`) in each of the topic's first `partitions` partitions.
async fn fill(client: &IggyClient, partitions: u32, n: usize) {
    for p in 0..partitions {
        let payloads: Vec<String> = (0..n).map(|i| format!("p{p}-{i}")).collect();
        let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
        let mut msgs = messages(&refs);
        client
            .send_messages(&id(0), &id(0), &Partitioning::partition_id(p), &mut msgs)
            .await
            .unwrap();
    }
}

/// A poll of group `g` from its next offset: of `partition`, or (without one) the SDK's own
/// pick from the assignment it syncs.
async fn group_next(
    client: &IggyClient,
    partition: Option<u32>,
    count: u32,
    auto_commit: bool,
) -> PolledMessages {
    client
        .poll_messages(
            &id(0),
            &id(0),
            partition,
            &Consumer::group(named("g")),
            &PollingStrategy::next(),
            count,
            auto_commit,
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_waits_for_the_commit_of_what_the_owner_polled() {
    let eddy = server();
    let addr = eddy.addrs().stream;
    let admin = group_topic(addr, 2, 10).await;
    let consumer = Consumer::group(named("g"));
    let poll = |client, partition| group_next(client, Some(partition), 5, false);

    // `a` owns both partitions and polls five messages of each without committing.
    let a = root(addr).await;
    a.join_consumer_group(&id(0), &id(0), &named("g"))
        .await
        .unwrap();
    for p in 0..2 {
        assert_eq!(offsets(&poll(&a, p).await), [0, 1, 2, 3, 4]);
    }

    // `b` joins: partition 1 is pending revocation, not handed over yet.
    let b = root(addr).await;
    b.join_consumer_group(&id(0), &id(0), &named("g"))
        .await
        .unwrap();
    let fenced = poll(&b, 1).await;
    assert_eq!(fenced.partition_id, u32::MAX, "not b's yet");
    assert!(fenced.messages.is_empty());
    let fenced = poll(&a, 1).await;
    assert_eq!(fenced.partition_id, u32::MAX, "no longer pollable by a");
    // The SDK's own group poll of `a` syncs and only ever gets partition 0.
    assert_eq!(group_next(&a, None, 1, false).await.partition_id, 0);
    assert_eq!(members(&admin, "g").await, [vec![0, 1], vec![]]);
    // `b` may not commit it; `a` still may. A commit short of what `a` polled keeps it pending.
    let err = b
        .store_consumer_offset(&consumer, &id(0), &id(0), Some(1), 4)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 5009, "{err}");
    a.store_consumer_offset(&consumer, &id(0), &id(0), Some(1), 2)
        .await
        .unwrap();
    assert_eq!(poll(&b, 1).await.partition_id, u32::MAX);
    // The commit that covers the poll hands the partition over.
    a.store_consumer_offset(&consumer, &id(0), &id(0), Some(1), 4)
        .await
        .unwrap();
    assert_eq!(members(&admin, "g").await, [vec![0], vec![1]]);
    let taken = poll(&b, 1).await;
    assert_eq!(taken.partition_id, 1);
    assert_eq!(
        offsets(&taken),
        [5, 6, 7, 8, 9],
        "b goes on after a's commit"
    );
    let err = a
        .store_consumer_offset(&consumer, &id(0), &id(0), Some(1), 9)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 5009, "fenced again once moved: {err}");

    // With auto-commit nothing is left in flight: the next join moves a partition at once.
    let c = root(addr).await;
    admin.create_partitions(&id(0), &id(0), 1).await.unwrap();
    assert_eq!(members(&admin, "g").await, [vec![0, 2], vec![1]]);
    assert_eq!(group_next(&a, Some(2), 5, true).await.partition_id, 2);
    c.join_consumer_group(&id(0), &id(0), &named("g"))
        .await
        .unwrap();
    assert_eq!(members(&admin, "g").await, [vec![0], vec![1], vec![2]]);
}

/// Consumer group `g` as a raw request names it.
fn group_g() -> eddy_codec::stream::Consumer {
    eddy_codec::stream::Consumer {
        kind: ConsumerKind::ConsumerGroup,
        id: Identifier::named("g").unwrap(),
    }
}

fn group_poll(partition: u32, auto_commit: bool) -> Request {
    Request::PollMessages(poll_messages::PollMessages {
        consumer: group_g(),
        stream_id: Identifier::numeric(0),
        topic_id: Identifier::numeric(0),
        partition: OptionalPartition(Some(partition)),
        strategy: WireStrategy::Next,
        count: 10,
        auto_commit,
    })
}

fn group_commit(partition: u32, offset: u64) -> Request {
    Request::StoreConsumerOffset(store_consumer_offset::StoreConsumerOffset {
        consumer: group_g(),
        stream_id: Identifier::numeric(0),
        topic_id: Identifier::numeric(0),
        partition: OptionalPartition(Some(partition)),
        offset,
        ack: AckLevel::Quorum,
    })
}

/// `[generation][partitions]` of a sync answer.
fn assignment(payload: &[u8]) -> (u64, Vec<u32>) {
    let generation = u64::from_le_bytes(payload[..8].try_into().unwrap());
    let count = u32::from_le_bytes(payload[8..12].try_into().unwrap()) as usize;
    let partitions = payload[12..]
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect::<Vec<_>>();
    assert_eq!(partitions.len(), count);
    (generation, partitions)
}

/// Partition id and message count of a poll answer.
fn polled(payload: &[u8]) -> (u32, u32) {
    (
        u32::from_le_bytes(payload[..4].try_into().unwrap()),
        u32::from_le_bytes(payload[12..16].try_into().unwrap()),
    )
}

#[tokio::test]
async fn pending_revocations_leave_sync_and_move_after_the_timeout() {
    let eddy = server_with(&["--stream-group-rebalancing-timeout-ms", "600"]);
    let addr = eddy.addrs().stream;
    let _setup = group_topic(addr, 2, 3).await;

    let mut a = Raw::logged_in(addr, "iggy", "iggy").await;
    let mut b = Raw::logged_in(addr, "iggy", "iggy").await;
    assert_eq!(a.call(&join("g")).await.code(), 0);
    assert_eq!(
        assignment(&a.call(&sync("g")).await.payload()),
        (1, vec![0, 1])
    );
    for p in 0..2 {
        assert_eq!(
            polled(&a.call(&group_poll(p, false)).await.payload()),
            (p, 3)
        );
    }
    assert_eq!(b.call(&join("g")).await.code(), 0);
    let joined = Instant::now();
    // Sync tells neither member about partition 1 while it is pending.
    assert_eq!(
        assignment(&a.call(&sync("g")).await.payload()),
        (2, vec![0])
    );
    assert_eq!(assignment(&b.call(&sync("g")).await.payload()), (2, vec![]));
    assert_eq!(
        polled(&b.call(&group_poll(1, false)).await.payload()),
        (u32::MAX, 0)
    );
    // Nobody commits: at the timeout the partition moves anyway, and b gets what a polled.
    let moved = loop {
        let (generation, partitions) = assignment(&b.call(&sync("g")).await.payload());
        if !partitions.is_empty() {
            break (generation, partitions);
        }
        assert!(joined.elapsed() < Duration::from_secs(10), "never moved");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(joined.elapsed() >= Duration::from_millis(600));
    assert_eq!(moved, (3, vec![1]));
    assert_eq!(
        assignment(&a.call(&sync("g")).await.payload()),
        (3, vec![0])
    );
    assert_eq!(
        polled(&b.call(&group_poll(1, true)).await.payload()),
        (1, 3)
    );
    // a lost it for commits too; its own partition still commits.
    assert_ne!(a.call(&group_commit(1, 2)).await.code(), 0);
    assert_eq!(a.call(&group_commit(0, 2)).await.code(), 0);
}
