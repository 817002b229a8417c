//! The SDK's high-level producer and consumers (`IggyProducer`, `IggyConsumer`): they create
//! what is missing, resolve partitions client-side, join groups, sync assignments and commit
//! offsets on their own; all of it must work unchanged against eddy.

use std::collections::BTreeSet;
use std::str::FromStr as _;
use std::time::Duration;

use crate::stream_support::*;
use futures_util::StreamExt as _;
use iggy::prelude::*;

async fn group_consumer(addr: std::net::SocketAddr) -> (IggyClient, IggyConsumer) {
    let client = root(addr).await;
    let mut consumer = client
        .consumer_group("workers", "orders", "events")
        .unwrap()
        .auto_commit(AutoCommit::When(AutoCommitWhen::PollingMessages))
        .create_consumer_group_if_not_exists()
        .auto_join_consumer_group()
        .polling_strategy(PollingStrategy::next())
        .batch_length(25)
        .poll_interval(IggyDuration::from_str("5ms").unwrap())
        .build();
    consumer.init().await.unwrap();
    (client, consumer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_and_consumer_group() {
    let eddy = server();
    let addr = eddy.addrs().stream;
    let client = root(addr).await;
    let producer = client
        .producer("orders", "events")
        .unwrap()
        .direct(DirectConfig::builder().batch_length(50).build())
        .create_stream_if_not_exists()
        .create_topic_if_not_exists(3, IggyExpiry::NeverExpire, MaxTopicSize::ServerDefault)
        .partitioning(Partitioning::balanced())
        .build();
    producer.init().await.unwrap();
    let payloads: Vec<String> = (0..300).map(|i| format!("order-{i}")).collect();
    for chunk in payloads.chunks(50) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        producer.send(messages(&refs)).await.unwrap();
    }
    let topic = client
        .get_topic(&named("orders"), &named("events"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(topic.messages_count, 300);
    assert!(topic.partitions.iter().all(|p| p.messages_count > 0));

    let (_c1, mut first) = group_consumer(addr).await;
    let (_c2, mut second) = group_consumer(addr).await;
    let group = client
        .get_consumer_group(&named("orders"), &named("events"), &named("workers"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(group.members_count, 2);

    let mut seen = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < 300 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of 300 consumed",
            seen.len()
        );
        for consumer in [&mut first, &mut second] {
            if let Ok(Some(received)) =
                tokio::time::timeout(Duration::from_millis(50), consumer.next()).await
            {
                let received = received.unwrap();
                let payload = String::from_utf8_lossy(&received.message.payload).into_owned();
                assert!(seen.insert(payload), "a message was delivered twice");
            }
        }
    }
    assert_eq!(seen, payloads.into_iter().collect::<BTreeSet<_>>());
    // Each partition's group offset gets committed up to its newest message.
    for partition in &topic.partitions {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let stored = client
                .get_consumer_offset(
                    &Consumer::group(named("workers")),
                    &named("orders"),
                    &named("events"),
                    Some(partition.id),
                )
                .await
                .unwrap()
                .map(|o| o.stored_offset);
            if stored == Some(partition.current_offset) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "partition {}: stored {stored:?}, newest {}",
                partition.id,
                partition.current_offset
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
