//! Consumer groups with the SDK: several members joining and leaving, round-robin assignment,
//! rebalancing on leave, disconnect and partition changes, group polling with commits, and the
//! eviction of stale members.

mod stream_support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use eddy_codec::stream::commands::{join_consumer_group, sync_consumer_group};
use eddy_codec::stream::{Identifier, Request};
use eddy_wire::stream::EvictionReason;
use iggy::prelude::*;
use stream_support::raw::Raw;
use stream_support::*;

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
    for p in 0..4u32 {
        let payloads: Vec<String> = (0..10).map(|i| format!("p{p}-{i}")).collect();
        let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
        let mut msgs = messages(&refs);
        admin
            .send_messages(&id(0), &id(0), &Partitioning::partition_id(p), &mut msgs)
            .await
            .unwrap();
    }

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
    assert_eq!(members(&admin, "g").await, [vec![0, 3], vec![1], vec![2]]);
    let me = a.get_me().await.unwrap();
    assert_eq!(me.consumer_groups_count, 1);
    assert_eq!(me.consumer_groups[0].group_id, 0);

    // Every member polls its own partitions; together they read every message once.
    let consumer = Consumer::group(named("g"));
    let mut seen = BTreeSet::new();
    for member in [&a, &b, &c] {
        for _ in 0..6 {
            let polled = member
                .poll_messages(
                    &id(0),
                    &id(0),
                    None,
                    &consumer,
                    &PollingStrategy::next(),
                    10,
                    true,
                )
                .await
                .unwrap();
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
