//! Polling with the SDK: every strategy, server-sliced batches, auto-commit, consumer offsets,
//! named consumers, 1,000 x 1 KB batches, and data surviving a server restart.

use crate::stream_support::*;
use iggy::prelude::*;

async fn poll(
    client: &IggyClient,
    consumer: &Consumer,
    strategy: PollingStrategy,
    count: u32,
    auto_commit: bool,
) -> PolledMessages {
    client
        .poll_messages(
            &id(0),
            &id(0),
            Some(0),
            consumer,
            &strategy,
            count,
            auto_commit,
        )
        .await
        .unwrap_or_else(|e| panic!("poll {strategy:?}: {e}"))
}

#[tokio::test]
async fn every_strategy_and_sliced_batches() {
    let eddy = server();
    let client = root(eddy.addrs().stream).await;
    stream_and_topic(&client, "s", "t", 1).await;
    let consumer = Consumer::new(id(1));

    // An empty partition answers the 16-byte prefix with no messages.
    let empty = poll(&client, &consumer, PollingStrategy::first(), 10, false).await;
    assert!(empty.messages.is_empty());
    assert_eq!(empty.current_offset, 0);

    // Three batches: offsets 0..=2, 3..=5, 6..=9.
    let mut stamps = Vec::new();
    for batch in [
        &["a0", "a1", "a2"][..],
        &["b3", "b4", "b5"],
        &["c6", "c7", "c8", "c9"],
    ] {
        let mut msgs = messages(batch);
        client
            .send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut msgs)
            .await
            .unwrap();
        // Distinct append times for the timestamp strategy.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let last = poll(&client, &consumer, PollingStrategy::last(), 1, false).await;
        stamps.push(last.messages[0].header.timestamp);
    }

    let all = poll(&client, &consumer, PollingStrategy::offset(0), 100, false).await;
    assert_eq!(offsets(&all), (0..10).collect::<Vec<_>>());
    assert_eq!(all.current_offset, 9);
    assert_eq!(all.partition_id, 0);

    // A slice starting and ending inside stored batches.
    let middle = poll(&client, &consumer, PollingStrategy::offset(1), 6, false).await;
    assert_eq!(payloads(&middle), ["a1", "a2", "b3", "b4", "b5", "c6"]);
    assert_eq!(offsets(&middle), [1, 2, 3, 4, 5, 6]);

    let first = poll(&client, &consumer, PollingStrategy::first(), 2, false).await;
    assert_eq!(payloads(&first), ["a0", "a1"]);

    let last = poll(&client, &consumer, PollingStrategy::last(), 3, false).await;
    assert_eq!(payloads(&last), ["c7", "c8", "c9"]);
    let more_than_all = poll(&client, &consumer, PollingStrategy::last(), 50, false).await;
    assert_eq!(more_than_all.messages.len(), 10);

    // Timestamp: from the second batch's append time.
    let since = poll(
        &client,
        &consumer,
        PollingStrategy::timestamp(stamps[1].into()),
        100,
        false,
    )
    .await;
    assert_eq!(offsets(&since), [3, 4, 5, 6, 7, 8, 9]);
    let future = poll(
        &client,
        &consumer,
        PollingStrategy::timestamp((stamps[2] + 10_000_000).into()),
        100,
        false,
    )
    .await;
    assert!(future.messages.is_empty());

    // Beyond the end: nothing.
    let beyond = poll(&client, &consumer, PollingStrategy::offset(10), 5, false).await;
    assert!(beyond.messages.is_empty());
    assert_eq!(beyond.current_offset, 9);

    // Next with auto-commit walks the partition in steps and never goes backwards.
    let walker = Consumer::new(id(2));
    let mut seen = Vec::new();
    loop {
        let page = poll(&client, &walker, PollingStrategy::next(), 4, true).await;
        if page.messages.is_empty() {
            break;
        }
        seen.extend(offsets(&page));
    }
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
    // An auto-committing poll from an older offset does not move the stored offset back.
    poll(&client, &walker, PollingStrategy::offset(0), 2, true).await;
    let stored = client
        .get_consumer_offset(&walker, &id(0), &id(0), Some(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.stored_offset, 9);
}

#[tokio::test]
async fn consumer_offsets_both_ways() {
    let eddy = server();
    let client = root(eddy.addrs().stream).await;
    stream_and_topic(&client, "s", "t", 2).await;
    let consumer = Consumer::new(id(5));
    // Nothing stored yet.
    assert!(client
        .get_consumer_offset(&consumer, &id(0), &id(0), Some(0))
        .await
        .unwrap()
        .is_none());
    // Storing on an empty partition is an invalid offset.
    let err = client
        .store_consumer_offset(&consumer, &id(0), &id(0), Some(0), 0)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 4100, "{err}");
    let mut msgs = messages(&["x", "y", "z"]);
    client
        .send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut msgs)
        .await
        .unwrap();
    client
        .store_consumer_offset(&consumer, &id(0), &id(0), Some(0), 2)
        .await
        .unwrap();
    let err = client
        .store_consumer_offset(&consumer, &id(0), &id(0), Some(0), 3)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 4100, "beyond the newest offset: {err}");
    // An explicit store may rewind.
    client
        .store_consumer_offset(&consumer, &id(0), &id(0), Some(0), 0)
        .await
        .unwrap();
    let next = poll(&client, &consumer, PollingStrategy::next(), 10, false).await;
    assert_eq!(payloads(&next), ["y", "z"]);
    // Unknown partition.
    let err = client
        .store_consumer_offset(&consumer, &id(0), &id(0), Some(7), 0)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 3007, "{err}");
    // A named consumer and the numeric consumer XXH32(name) share offsets.
    let named_consumer = Consumer::new(named("reader"));
    client
        .store_consumer_offset(&named_consumer, &id(0), &id(0), Some(0), 1)
        .await
        .unwrap();
    let hashed = Consumer::new(id(iggy_common::calculate_32(b"reader")));
    let info = client
        .get_consumer_offset(&hashed, &id(0), &id(0), Some(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.stored_offset, 1);
    // Delete, then deleting again is ConsumerOffsetNotFound.
    client
        .delete_consumer_offset(&consumer, &id(0), &id(0), Some(0))
        .await
        .unwrap();
    assert!(client
        .get_consumer_offset(&consumer, &id(0), &id(0), Some(0))
        .await
        .unwrap()
        .is_none());
    let err = client
        .delete_consumer_offset(&consumer, &id(0), &id(0), Some(0))
        .await
        .unwrap_err();
    assert_eq!(code(&err), 3021, "{err}");
    // Offsets of an unknown stream read as none.
    assert!(client
        .get_consumer_offset(&consumer, &id(9), &id(0), Some(0))
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn balanced_and_keyed_sends_use_every_partition() {
    let eddy = server();
    let client = root(eddy.addrs().stream).await;
    stream_and_topic(&client, "s", "t", 3).await;
    for i in 0..6 {
        let mut msgs = messages(&[&format!("m{i}")]);
        client
            .send_messages(&id(0), &id(0), &Partitioning::balanced(), &mut msgs)
            .await
            .unwrap();
    }
    for p in 0..3 {
        let polled = client
            .poll_messages(
                &id(0),
                &id(0),
                Some(p),
                &Consumer::new(id(1)),
                &PollingStrategy::first(),
                10,
                false,
            )
            .await
            .unwrap();
        assert_eq!(polled.messages.len(), 2, "partition {p}");
    }
    let key = Partitioning::messages_key_str("order-17").unwrap();
    let mut msgs = messages(&["keyed"]);
    client
        .send_messages(&id(0), &id(0), &key, &mut msgs)
        .await
        .unwrap();
    let expected = iggy_common::calculate_32(b"order-17") % 3;
    let polled = client
        .poll_messages(
            &id(0),
            &id(0),
            Some(expected),
            &Consumer::new(id(1)),
            &PollingStrategy::last(),
            1,
            false,
        )
        .await
        .unwrap();
    assert_eq!(payloads(&polled), ["keyed"]);
    // Sends to a missing partition or topic fail.
    let err = client
        .send_messages(
            &id(0),
            &id(0),
            &Partitioning::partition_id(3),
            &mut messages(&["x"]),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&err), 3007, "{err}");
    let err = client
        .send_messages(
            &id(0),
            &id(4),
            &Partitioning::partition_id(0),
            &mut messages(&["x"]),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&err), 2010, "{err}");
}

#[tokio::test]
async fn a_thousand_one_kilobyte_batches_survive_restarts() {
    let mut eddy = server();
    let addr = eddy.addrs().stream;
    let client = root(addr).await;
    stream_and_topic(&client, "bulk", "t", 1).await;
    for batch in 0..1000 {
        let mut msgs = sized_messages(&format!("b{batch}"), 1, 1024);
        client
            .send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut msgs)
            .await
            .unwrap();
    }
    // User headers travel with the message.
    let mut headers = std::collections::BTreeMap::new();
    headers.insert(
        HeaderKey::try_from("trace").unwrap(),
        HeaderValue::try_from("abc").unwrap(),
    );
    let mut with_headers = vec![IggyMessage::builder()
        .payload(bytes::Bytes::from_static(b"headed"))
        .user_headers(headers.clone())
        .build()
        .unwrap()];
    client
        .send_messages(
            &id(0),
            &id(0),
            &Partitioning::partition_id(0),
            &mut with_headers,
        )
        .await
        .unwrap();
    drop(client);

    // Orderly restart, then a crash (SIGKILL): every acknowledged message is still there.
    for crash in [false, true] {
        if crash {
            eddy.crash_restart();
        } else {
            eddy.restart();
        }
        let client = root(eddy.addrs().stream).await;
        let mut seen = 0u64;
        let consumer = Consumer::new(id(if crash { 2 } else { 1 }));
        loop {
            let page = client
                .poll_messages(
                    &named("bulk"),
                    &named("t"),
                    Some(0),
                    &consumer,
                    &PollingStrategy::next(),
                    333,
                    true,
                )
                .await
                .unwrap();
            if page.messages.is_empty() {
                break;
            }
            for m in &page.messages {
                assert_eq!(m.header.offset, seen);
                if seen < 1000 {
                    assert_eq!(m.payload.len(), 1024);
                    assert!(m.payload.starts_with(format!("b{seen}-0-").as_bytes()));
                } else {
                    assert_eq!(&m.payload[..], b"headed");
                    assert_eq!(m.user_headers_map().unwrap().unwrap(), headers);
                }
                seen += 1;
            }
        }
        assert_eq!(seen, 1001, "crash = {crash}");
    }
}
