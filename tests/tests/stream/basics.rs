//! The stream protocol with the published SDK: login, streams, topics, messages, offsets.

use crate::stream_support::*;
use iggy::prelude::*;

#[tokio::test]
async fn login_ping_streams_topics_send_poll() {
    let eddy = server();
    let addr = eddy.addrs().stream;
    let client = connect(addr).await;
    client.ping().await.expect("ping before login");
    let identity = client.login_user("iggy", "iggy").await.expect("login");
    assert_eq!(identity.user_id, 0);
    client.ping().await.expect("ping");

    let stream = client.create_stream("test-stream").await.unwrap();
    assert_eq!(stream.id, 0);
    assert_eq!(stream.name, "test-stream");
    let again = client.create_stream("test-stream").await.unwrap_err();
    assert_eq!(code(&again), 1012, "{again}");
    let fetched = client
        .get_stream(&named("test-stream"))
        .await
        .unwrap()
        .expect("stream exists");
    assert_eq!(fetched.id, 0);
    assert!(client.get_stream(&id(9)).await.unwrap().is_none());

    let topic = client
        .create_topic(
            &id(0),
            "test-topic",
            &TopicCreateOptions {
                partitions_count: Some(2),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(topic.id, 0);
    assert_eq!(topic.partitions_count, 2);
    let ids: Vec<u32> = topic.partitions.iter().map(|p| p.id).collect();
    assert_eq!(ids, [0, 1]);

    let mut batch = messages(&["one", "two", "three"]);
    client
        .send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch)
        .await
        .unwrap();
    let polled = client
        .poll_messages(
            &id(0),
            &id(0),
            Some(0),
            &Consumer::new(id(1)),
            &PollingStrategy::offset(0),
            10,
            false,
        )
        .await
        .unwrap();
    assert_eq!(payloads(&polled), ["one", "two", "three"]);
    assert_eq!(offsets(&polled), [0, 1, 2]);
    assert_eq!(polled.current_offset, 2);

    // Next + auto commit twice: the second poll is empty, the offset is stored.
    let consumer = Consumer::new(id(7));
    let first = client
        .poll_messages(
            &id(0),
            &id(0),
            Some(0),
            &consumer,
            &PollingStrategy::next(),
            10,
            true,
        )
        .await
        .unwrap();
    assert_eq!(first.messages.len(), 3);
    let second = client
        .poll_messages(
            &id(0),
            &id(0),
            Some(0),
            &consumer,
            &PollingStrategy::next(),
            10,
            true,
        )
        .await
        .unwrap();
    assert!(second.messages.is_empty());
    let offset = client
        .get_consumer_offset(&consumer, &id(0), &id(0), Some(0))
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(offset.stored_offset, 2);
    assert_eq!(offset.current_offset, 2);

    client.logout_user().await.unwrap();
    let err = client.get_streams().await.unwrap_err();
    assert_eq!(code(&err), 40);
    client.login_user("iggy", "iggy").await.unwrap();
    assert_eq!(client.get_streams().await.unwrap().len(), 1);
    let wrong = connect(addr)
        .await
        .login_user("iggy", "nope!")
        .await
        .unwrap_err();
    assert_eq!(code(&wrong), 42, "{wrong}");
}

/// SIGTERM while producers are sending: requests in flight finish and are answered, idle
/// connections close at once, the process exits 0, and every acknowledged batch is there after
/// the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_on_shutdown_keeps_every_acknowledged_batch() {
    let mut eddy = server();
    let addr = eddy.addrs().stream;
    let admin = root(addr).await;
    stream_and_topic(&admin, "s", "t", 4).await;
    let idle = root(addr).await;
    let mut producers = Vec::new();
    for p in 0..4u32 {
        let client = root(addr).await;
        producers.push(tokio::spawn(async move {
            let mut acked = 0u64;
            loop {
                let mut msgs = sized_messages(&format!("p{p}"), 50, 2000);
                match client
                    .send_messages(&id(0), &id(0), &Partitioning::partition_id(p), &mut msgs)
                    .await
                {
                    Ok(_) => acked += 50,
                    Err(_) => return acked,
                }
            }
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let status = tokio::task::spawn_blocking(move || {
        let status = eddy.stop(std::time::Duration::from_secs(20));
        (eddy, status)
    })
    .await
    .unwrap();
    let (mut eddy, status) = status;
    assert!(status.success(), "exit status {status}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "idle connections must not hold the drain"
    );
    let mut acked = Vec::new();
    for producer in producers {
        acked.push(producer.await.unwrap());
    }
    drop(idle);
    drop(admin);
    eddy.restart();
    let client = root(eddy.addrs().stream).await;
    for (p, acked) in acked.into_iter().enumerate() {
        assert!(acked > 0, "producer {p} got acknowledgements");
        let topic = client.get_topic(&id(0), &id(0)).await.unwrap().unwrap();
        let stored = topic.partitions[p].messages_count;
        assert!(
            stored >= acked,
            "partition {p}: {acked} messages acknowledged, {stored} stored"
        );
    }
}
