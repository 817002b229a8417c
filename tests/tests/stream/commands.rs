//! Every command group with the SDK, including the error paths (not found, already exists,
//! invalid options): system, streams, topics, partitions, segments, users.

use std::str::FromStr as _;

use crate::stream_support::*;
use iggy::prelude::*;

/// Lists a ZIP archive with Python's `zipfile` (CRCs checked): `name<TAB>method<TAB>text` for each
/// entry, in archive order.
fn unzip(archive: &[u8], eddy: &eddy_tests::Eddy) -> String {
    let path = eddy.data_dir().with_extension("snapshot.zip");
    std::fs::write(&path, archive).unwrap();
    let script = "import sys, zipfile\n\
z = zipfile.ZipFile(sys.argv[1])\n\
assert z.testzip() is None\n\
for i in z.infolist(): sys.stdout.write(i.filename + '\\t' + str(i.compress_type) + '\\t' + z.read(i).decode())\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .output()
        .expect("python3 reads ZIP archives for this test");
    assert!(
        out.status.success(),
        "zipfile refused the archive: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn system_commands() {
    let eddy = server();
    let addr = eddy.addrs().stream;
    let client = root(addr).await;
    let other = root(addr).await;

    let cluster = client.get_cluster_metadata().await.unwrap();
    assert_eq!(cluster.nodes.len(), 1);
    assert_eq!(cluster.nodes[0].endpoints.tcp, addr.port());

    let me = client.get_me().await.unwrap();
    assert_eq!(me.user_id, Some(0));
    assert_eq!(me.transport, "TCP");
    let clients = client.get_clients().await.unwrap();
    assert_eq!(clients.len(), 2);
    let other_me = other.get_me().await.unwrap();
    let fetched = client
        .get_client(other_me.client_id)
        .await
        .unwrap()
        .expect("the other client");
    assert_eq!(fetched.address, other_me.address);
    assert!(client.get_client(999_999).await.unwrap().is_none());

    stream_and_topic(&client, "s", "t", 2).await;
    let mut msgs = sized_messages("stat", 10, 100);
    client
        .send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut msgs)
        .await
        .unwrap();
    let stats = client.get_stats().await.unwrap();
    assert_eq!(stats.streams_count, 1);
    assert_eq!(stats.topics_count, 1);
    assert_eq!(stats.partitions_count, 2);
    assert_eq!(stats.messages_count, 10);
    assert_eq!(stats.clients_count, 2);
    assert!(stats.messages_size_bytes.as_bytes_u64() > 1000);
    assert!(stats.segments_count >= 2);
    assert_eq!(stats.process_id, eddy.pid());
    assert!(stats.memory_usage.as_bytes_u64() > 0);
    assert!(stats.total_disk_space.as_bytes_u64() > 0);
    assert!(!stats.hostname.is_empty());
    assert!(stats.threads_count > 0);

    let topic_options = client.describe_options(OptionsScope::Topic).await.unwrap();
    let keys: Vec<&str> = topic_options.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "compression_algorithm",
            "message_expiry",
            "max_topic_size",
            "segment_size",
            "enforce_fsync",
            "messages_required_to_save",
            "size_of_messages_required_to_save",
            "preallocate_segments",
            // The keys of the newer SDKs (issue 39).
            "durability",
            "consumer_offset_durability",
            "partition_resize_policy"
        ]
    );
    assert!(client
        .describe_options(OptionsScope::Stream)
        .await
        .unwrap()
        .is_empty());

    // Snapshots: real ZIP archives, checked by an independent reader (Python's zipfile).
    let all = client
        .snapshot(SnapshotCompression::Deflated, vec![SystemSnapshotType::All])
        .await
        .unwrap();
    let listing = unzip(&all.0, &eddy);
    for name in [
        "filesystem_overview.txt",
        "process_list.txt",
        "resource_usage.txt",
        "test.txt",
        "server_logs.txt",
        "server_config.toml",
    ] {
        assert!(
            listing.contains(&format!("{name}\t8\t")),
            "{name}: {listing}"
        );
    }
    assert!(listing.contains("streams/metadata"), "{listing}");
    assert!(listing.contains(&format!("{}\t", eddy.pid())), "{listing}");
    assert!(
        listing.contains("root_password = \"<redacted>\""),
        "the root password must be redacted: {listing}"
    );
    let test_only = client
        .snapshot(SnapshotCompression::Stored, vec![SystemSnapshotType::Test])
        .await
        .unwrap();
    let listing = unzip(&test_only.0, &eddy);
    assert!(listing.starts_with("test.txt\t0\ttest\n"), "{listing}");
    let err = client
        .flush_unsaved_buffer(&id(0), &id(0), 0, true)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 5, "{err}");
}

#[tokio::test]
async fn streams_and_topics() {
    let eddy = server();
    let client = root(eddy.addrs().stream).await;
    for name in ["a", "b", "c"] {
        client.create_stream(name).await.unwrap();
    }
    // Lowest free id is reused.
    client.delete_stream(&named("b")).await.unwrap();
    assert_eq!(client.create_stream("d").await.unwrap().id, 1);
    let err = client.delete_stream(&named("b")).await.unwrap_err();
    assert_eq!(code(&err), 1009, "{err}");
    client
        .update_stream(&named("d"), "e", &StreamUpdateOptions::default())
        .await
        .unwrap();
    let err = client
        .update_stream(&named("e"), "a", &StreamUpdateOptions::default())
        .await
        .unwrap_err();
    assert_eq!(code(&err), 1012, "{err}");
    let names: Vec<String> = client
        .get_streams()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["a", "e", "c"]);

    // Topic options: explicit, derived, and validated.
    let topic = client
        .create_topic(
            &named("a"),
            "t",
            &TopicCreateOptions {
                partitions_count: Some(3),
                message_expiry: Some(IggyExpiry::ExpireDuration(
                    IggyDuration::from_str("1h").unwrap(),
                )),
                max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(
                    2 * 1024 * 1024 * 1024u64,
                ))),
                compression_algorithm: Some(CompressionAlgorithm::Gzip),
                enforce_fsync: Some(false),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(topic.partitions_count, 3);
    assert_eq!(topic.compression_algorithm, CompressionAlgorithm::Gzip);
    assert_eq!(
        topic.message_expiry,
        IggyExpiry::ExpireDuration(IggyDuration::from_str("1h").unwrap())
    );
    let fsync = topic
        .options
        .get(&HeaderKey::from_str("enforce_fsync").unwrap())
        .expect("enforce_fsync reported");
    assert!(fsync.explicit);
    let segment = topic
        .options
        .get(&HeaderKey::from_str("segment_size").unwrap())
        .expect("segment_size reported");
    assert!(!segment.explicit, "defaults are derived");
    // The catalog's 11 keys, each explicit or derived.
    assert_eq!(topic.options.len(), 11);

    let err = client
        .create_topic(&named("a"), "t", &TopicCreateOptions::default())
        .await
        .unwrap_err();
    assert_eq!(code(&err), 2013, "{err}");
    let err = client
        .create_topic(&named("zz"), "t", &TopicCreateOptions::default())
        .await
        .unwrap_err();
    assert_eq!(code(&err), 1009, "{err}");
    let err = client
        .create_topic(
            &named("a"),
            "small",
            &TopicCreateOptions {
                max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(1024u64))),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(code(&err), 1019, "{err}");
    let err = client
        .create_topic(
            &named("a"),
            "odd",
            &TopicCreateOptions {
                segment_size: Some(IggyByteSize::from(1000u64)),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(code(&err), 4042, "{err}");
    let mut raw_options = TopicCreateOptions::default();
    raw_options.raw.insert("colour".into(), "blue".into());
    let err = client
        .create_topic(&named("a"), "keys", &raw_options)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 4041, "{err}");
    let err = client
        .create_topic(
            &named("a"),
            "many",
            &TopicCreateOptions {
                partitions_count: Some(1001),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(code(&err), 2015, "{err}");
    // Zero partitions is allowed.
    let empty = client
        .create_topic(
            &named("a"),
            "none",
            &TopicCreateOptions {
                partitions_count: Some(0),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(empty.partitions_count, 0);

    // Update patches the updatable options only.
    client
        .update_topic(
            &named("a"),
            &named("t"),
            "t2",
            &TopicUpdateOptions {
                compression_algorithm: Some(CompressionAlgorithm::None),
                ..TopicUpdateOptions::default()
            },
        )
        .await
        .unwrap();
    let updated = client
        .get_topic(&named("a"), &named("t2"))
        .await
        .unwrap()
        .expect("renamed topic");
    assert_eq!(updated.compression_algorithm, CompressionAlgorithm::None);
    assert_eq!(
        updated.message_expiry,
        IggyExpiry::ExpireDuration(IggyDuration::from_str("1h").unwrap()),
        "absent keys keep their value"
    );
    let err = client
        .update_topic(
            &named("a"),
            &named("t2"),
            "t2",
            &TopicUpdateOptions {
                max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(10u64))),
                ..TopicUpdateOptions::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(code(&err), 1019, "{err}");
    let topics = client.get_topics(&named("a")).await.unwrap();
    assert_eq!(topics.len(), 2);
    assert!(client
        .get_topic(&named("a"), &named("t"))
        .await
        .unwrap()
        .is_none());
    let stream = client.get_stream(&named("a")).await.unwrap().unwrap();
    assert_eq!(stream.topics_count, 2);

    // Purge empties, delete removes.
    let mut msgs = messages(&["1", "2"]);
    client
        .send_messages(
            &named("a"),
            &named("t2"),
            &Partitioning::partition_id(1),
            &mut msgs,
        )
        .await
        .unwrap();
    client.purge_topic(&named("a"), &named("t2")).await.unwrap();
    let after = client
        .get_topic(&named("a"), &named("t2"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.messages_count, 0);
    let mut msgs = messages(&["3"]);
    let sent = client
        .send_messages(
            &named("a"),
            &named("t2"),
            &Partitioning::partition_id(1),
            &mut msgs,
        )
        .await
        .unwrap();
    assert_eq!(sent.confirmations[0].base_offset, 0, "offsets restart at 0");
    client.purge_stream(&named("a")).await.unwrap();
    client
        .delete_topic(&named("a"), &named("t2"))
        .await
        .unwrap();
    let err = client
        .delete_topic(&named("a"), &named("t2"))
        .await
        .unwrap_err();
    assert_eq!(code(&err), 2010, "{err}");
}

#[tokio::test]
async fn partitions_and_segments() {
    let eddy = server();
    let client = root(eddy.addrs().stream).await;
    client.create_stream("s").await.unwrap();
    client
        .create_topic(
            &id(0),
            "t",
            &TopicCreateOptions {
                partitions_count: Some(2),
                // The smallest segment: 1 MiB.
                segment_size: Some(IggyByteSize::from(1024 * 1024u64)),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();
    client.create_partitions(&id(0), &id(0), 3).await.unwrap();
    let topic = client.get_topic(&id(0), &id(0)).await.unwrap().unwrap();
    let ids: Vec<u32> = topic.partitions.iter().map(|p| p.id).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    client.delete_partitions(&id(0), &id(0), 2).await.unwrap();
    let topic = client.get_topic(&id(0), &id(0)).await.unwrap().unwrap();
    assert_eq!(topic.partitions_count, 3);
    let err = client
        .delete_partitions(&id(0), &id(0), 4)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 2019, "{err}");
    let err = client
        .create_partitions(&id(0), &id(0), 0)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 2015, "{err}");
    let err = client
        .create_partitions(&id(0), &id(9), 1)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 2010, "{err}");

    // ~3 MiB into 1 MiB segments: sealed segments appear; deleting the oldest keeps the rest and
    // never renumbers offsets.
    for _ in 0..6 {
        let mut msgs = sized_messages("seg", 500, 1000);
        client
            .send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut msgs)
            .await
            .unwrap();
    }
    let before = client.get_topic(&id(0), &id(0)).await.unwrap().unwrap();
    let segments_before = before.partitions[0].segments_count;
    assert!(segments_before >= 3, "{segments_before} segments");
    client.delete_segments(&id(0), &id(0), 0, 1).await.unwrap();
    let after = client.get_topic(&id(0), &id(0)).await.unwrap().unwrap();
    assert_eq!(after.partitions[0].segments_count, segments_before - 1);
    assert_eq!(after.partitions[0].current_offset, 2999);
    let first = client
        .poll_messages(
            &id(0),
            &id(0),
            Some(0),
            &Consumer::new(id(1)),
            &PollingStrategy::first(),
            1,
            false,
        )
        .await
        .unwrap();
    assert!(
        first.messages[0].header.offset > 0,
        "the oldest segment is gone"
    );
    let from_zero = client
        .poll_messages(
            &id(0),
            &id(0),
            Some(0),
            &Consumer::new(id(1)),
            &PollingStrategy::offset(0),
            1,
            false,
        )
        .await
        .unwrap();
    assert_eq!(
        from_zero.messages[0].header.offset, first.messages[0].header.offset,
        "a deleted offset serves from the earliest retained"
    );
    // Nothing sealed on another partition: a no-op success.
    client.delete_segments(&id(0), &id(0), 1, 5).await.unwrap();
    let err = client
        .delete_segments(&id(0), &id(0), 7, 1)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 3007, "{err}");
}

#[tokio::test]
async fn users() {
    let eddy = server();
    let addr = eddy.addrs().stream;
    let client = root(addr).await;
    let root_user = client.get_user(&id(0)).await.unwrap().expect("root");
    assert_eq!(root_user.username, "iggy");
    assert!(root_user.permissions.is_some());

    let mut permissions = Permissions::default();
    permissions.global.read_streams = true;
    let created = client
        .create_user(
            "reader",
            "reader-pw",
            UserStatus::Active,
            Some(permissions.clone()),
        )
        .await
        .unwrap();
    assert_eq!(created.id, 1);
    assert_eq!(created.permissions, Some(permissions));
    let err = client
        .create_user("reader", "other-pw", UserStatus::Active, None)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 46, "{err}");
    let users = client.get_users().await.unwrap();
    assert_eq!(users.len(), 2);

    // A user reads itself without read_users.
    let reader = login(addr, "reader", "reader-pw").await;
    let me = reader.get_user(&named("reader")).await.unwrap().unwrap();
    assert_eq!(me.id, 1);
    let err = reader.get_user(&id(0)).await.unwrap_err();
    assert_eq!(code(&err), 41, "{err}");
    let err = reader.create_stream("nope").await.unwrap_err();
    assert_eq!(code(&err), 41, "{err}");
    reader.get_streams().await.unwrap();

    client
        .update_user(
            &named("reader"),
            Some("reader2"),
            None,
            &UserUpdateOptions::default(),
        )
        .await
        .unwrap();
    assert!(client.get_user(&named("reader")).await.unwrap().is_none());
    let err = client
        .update_user(
            &named("reader2"),
            Some("iggy"),
            None,
            &UserUpdateOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&err), 46, "{err}");
    let err = client
        .update_user(&id(7), Some("ghost"), None, &UserUpdateOptions::default())
        .await
        .unwrap_err();
    assert_eq!(code(&err), 20, "{err}");
    client
        .update_permissions(&named("reader2"), None)
        .await
        .unwrap();
    let err = reader.get_streams().await.unwrap_err();
    assert_eq!(code(&err), 41, "permissions apply at once: {err}");

    // Root is protected.
    let err = client.delete_user(&id(0)).await.unwrap_err();
    assert_eq!(code(&err), 48, "{err}");
    let err = client.update_permissions(&id(0), None).await.unwrap_err();
    assert_eq!(code(&err), 49, "{err}");
    let err = client
        .update_user(
            &id(0),
            None,
            Some(UserStatus::Inactive),
            &UserUpdateOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&err), 45, "{err}");
    // Another user's password needs manage_users.
    let err = reader
        .change_password(&id(0), "iggy", "hacked")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 41, "{err}");

    client.delete_user(&named("reader2")).await.unwrap();
    let err = client.delete_user(&named("reader2")).await.unwrap_err();
    assert_eq!(code(&err), 20, "{err}");
    // Deleted ids are reused.
    let again = client
        .create_user("writer", "writer-pw", UserStatus::Inactive, None)
        .await
        .unwrap();
    assert_eq!(again.id, 1);
    assert_eq!(again.status, UserStatus::Inactive);
}

/// The bytes a batch of `msgs` occupies once stored: the 256-byte batch header and, per message,
/// the 48-byte frame header, the payload and the user headers (stream protocol §4).
fn stored_batch_bytes(msgs: &[IggyMessage]) -> u64 {
    256 + msgs
        .iter()
        .map(|m| 48 + u64::from(m.header.payload_length) + u64::from(m.header.user_headers_length))
        .sum::<u64>()
}

/// Sends `batches` batches of `per_batch` messages of `size` bytes (user headers on every
/// message) to one partition; returns the stored bytes of one batch (all batches are alike).
async fn fill(
    client: &IggyClient,
    (stream, topic, partition): (u32, u32, u32),
    batches: usize,
    per_batch: usize,
    size: usize,
) -> u64 {
    let headers = std::collections::BTreeMap::from([(
        HeaderKey::from_str("kind").unwrap(),
        HeaderValue::from_str("stats").unwrap(),
    )]);
    let mut one = 0;
    for b in 0..batches {
        let mut msgs: Vec<IggyMessage> = (0..per_batch)
            .map(|i| {
                let mut payload = format!("{b:04}-{i:04}-").into_bytes();
                payload.resize(size, b'x');
                IggyMessage::builder()
                    .payload(bytes::Bytes::from(payload))
                    .user_headers(headers.clone())
                    .build()
                    .unwrap()
            })
            .collect();
        one = stored_batch_bytes(&msgs);
        client
            .send_messages(
                &id(stream),
                &id(topic),
                &Partitioning::partition_id(partition),
                &mut msgs,
            )
            .await
            .unwrap();
    }
    one
}

/// Every size and count figure of the stream protocol (GET_TOPIC and its partitions,
/// GET_TOPICS, GET_STREAM, GET_STREAMS, GET_STATS) for stream 0 / topic 0, which must all agree.
async fn figures(client: &IggyClient) -> (u64, u64) {
    let topic = client.get_topic(&id(0), &id(0)).await.unwrap().unwrap();
    let size = topic.size.as_bytes_u64();
    let messages = topic.messages_count;
    let partition_size: u64 = topic.partitions.iter().map(|p| p.size.as_bytes_u64()).sum();
    let partition_messages: u64 = topic.partitions.iter().map(|p| p.messages_count).sum();
    assert_eq!((partition_size, partition_messages), (size, messages));
    let topics = client.get_topics(&id(0)).await.unwrap();
    assert_eq!(
        (topics[0].size.as_bytes_u64(), topics[0].messages_count),
        (size, messages)
    );
    let stream = client.get_stream(&id(0)).await.unwrap().unwrap();
    assert_eq!(
        (stream.size.as_bytes_u64(), stream.messages_count),
        (size, messages)
    );
    assert_eq!(
        (
            stream.topics[0].size.as_bytes_u64(),
            stream.topics[0].messages_count
        ),
        (size, messages)
    );
    let streams = client.get_streams().await.unwrap();
    assert_eq!(
        (streams[0].size.as_bytes_u64(), streams[0].messages_count),
        (size, messages)
    );
    let stats = client.get_stats().await.unwrap();
    assert_eq!(
        (
            stats.messages_size_bytes.as_bytes_u64(),
            stats.messages_count
        ),
        (size, messages)
    );
    (size, messages)
}

/// Issue 21: sizes are the stored message bytes, exactly: nothing after a purge, the sum of what
/// was sent across a restart, and what is left after segments are deleted.
#[tokio::test]
async fn size_figures_are_exact_across_purge_restart_and_segment_deletion() {
    let mut eddy = server();
    let client = root(eddy.addrs().stream).await;
    client.create_stream("s").await.unwrap();
    client
        .create_topic(
            &id(0),
            "t",
            &TopicCreateOptions {
                partitions_count: Some(2),
                segment_size: Some(IggyByteSize::from(1024 * 1024u64)),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(figures(&client).await, (0, 0), "a new topic is empty");

    let batch = fill(&client, (0, 0, 0), 3, 10, 100).await;
    assert_eq!(fill(&client, (0, 0, 1), 2, 10, 100).await, batch);
    assert_eq!(figures(&client).await, (5 * batch, 50));

    client.purge_topic(&id(0), &id(0)).await.unwrap();
    assert_eq!(figures(&client).await, (0, 0), "a purged topic is empty");

    fill(&client, (0, 0, 0), 3, 10, 100).await;
    assert_eq!(figures(&client).await, (3 * batch, 30));
    eddy.restart();
    let client = root(eddy.addrs().stream).await;
    assert_eq!(
        figures(&client).await,
        (3 * batch, 30),
        "a restart changes nothing"
    );
    fill(&client, (0, 0, 0), 3, 10, 100).await;
    assert_eq!(
        figures(&client).await,
        (6 * batch, 60),
        "filled twice with a restart between: twice one fill"
    );

    // ~3 MiB into 1 MiB segments, then the oldest segment goes: what is left is whole batches.
    client.purge_stream(&id(0)).await.unwrap();
    let big = fill(&client, (0, 0, 1), 30, 100, 1000).await;
    assert_eq!(figures(&client).await, (30 * big, 3000));
    client.delete_segments(&id(0), &id(0), 1, 1).await.unwrap();
    let (size, messages) = figures(&client).await;
    assert!(messages < 3000 && messages % 100 == 0, "{messages}");
    assert_eq!(size, messages / 100 * big);
    eddy.restart();
    let client = root(eddy.addrs().stream).await;
    assert_eq!(figures(&client).await, (size, messages));
}

/// Polls one message from `partition` with the `first` strategy; its offset.
async fn first_offset(client: &IggyClient, partition: u32) -> u64 {
    let polled = client
        .poll_messages(
            &id(0),
            &id(0),
            Some(partition),
            &Consumer::new(id(1)),
            &PollingStrategy::first(),
            1,
            false,
        )
        .await
        .unwrap();
    polled.messages[0].header.offset
}

/// Issue 21: `max_topic_size` deletes the topic's oldest sealed segments once the topic holds
/// more than that, with small segments and several partitions, never an active segment; a
/// topic under its size keeps everything.
#[tokio::test]
async fn max_topic_size_deletes_the_oldest_sealed_segments() {
    const MIB: u64 = 1024 * 1024;
    let eddy = server();
    let client = root(eddy.addrs().stream).await;
    client.create_stream("s").await.unwrap();
    client
        .create_topic(
            &id(0),
            "t",
            &TopicCreateOptions {
                partitions_count: Some(3),
                segment_size: Some(IggyByteSize::from(MIB)),
                max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(4 * MIB))),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();
    // Under the size: nothing goes.
    let batch = fill(&client, (0, 0, 0), 20, 100, 1000).await;
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let topic = client.get_topic(&id(0), &id(0)).await.unwrap().unwrap();
    assert!(topic.partitions[0].segments_count >= 2);
    assert_eq!(topic.messages_count, 2000);
    assert_eq!(first_offset(&client, 0).await, 0);

    // ~3.5 MiB more on two partitions: the topic is over 4 MiB.
    fill(&client, (0, 0, 1), 20, 100, 1000).await;
    fill(&client, (0, 0, 2), 15, 100, 1000).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let topic = loop {
        let topic = client.get_topic(&id(0), &id(0)).await.unwrap().unwrap();
        if topic.size.as_bytes_u64() <= 4 * MIB || std::time::Instant::now() > deadline {
            break topic;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let size = topic.size.as_bytes_u64();
    assert!(size <= 4 * MIB, "{size} bytes stored, 4 MiB allowed");
    assert!(
        size > 2 * MIB,
        "only what was needed went: {size} bytes left"
    );
    assert_eq!(size, topic.messages_count / 100 * batch, "sizes stay exact");
    // The oldest segments went first (partition 0's), active segments never: the newest
    // message of every partition is still there.
    assert!(
        first_offset(&client, 0).await > 0,
        "partition 0 lost its oldest"
    );
    let newest = [1999, 1999, 1499];
    for (p, partition) in topic.partitions.iter().enumerate() {
        assert!(partition.segments_count >= 1);
        assert_eq!(partition.current_offset, newest[p]);
        let last = client
            .poll_messages(
                &id(0),
                &id(0),
                Some(partition.id),
                &Consumer::new(id(1)),
                &PollingStrategy::last(),
                1,
                false,
            )
            .await
            .unwrap();
        assert_eq!(offsets(&last), [newest[p]]);
    }
}

/// Sends one batch whose payloads and user headers carry `marker`; polls it back.
async fn send_and_poll_marked(client: &IggyClient, marker: &str) -> Vec<IggyMessage> {
    let headers = std::collections::BTreeMap::from([(
        HeaderKey::from_str("note").unwrap(),
        HeaderValue::from_str(&format!("{marker}-HEADER")).unwrap(),
    )]);
    let mut msgs: Vec<IggyMessage> = (0..5)
        .map(|i| {
            IggyMessage::builder()
                .payload(bytes::Bytes::from(format!("{marker}-PAYLOAD-{i}")))
                .user_headers(headers.clone())
                .build()
                .unwrap()
        })
        .collect();
    client
        .send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut msgs)
        .await
        .unwrap();
    poll_all(client).await.unwrap()
}

async fn poll_all(client: &IggyClient) -> Result<Vec<IggyMessage>, IggyError> {
    let polled = client
        .poll_messages(
            &id(0),
            &id(0),
            Some(0),
            &Consumer::new(id(1)),
            &PollingStrategy::offset(0),
            100,
            false,
        )
        .await?;
    Ok(polled.messages)
}

/// Issue 21: with an encryption key (here from the environment) message payloads and user
/// headers never reach the data directory in the clear, polls decrypt them, the key never
/// reaches the log, and without the key (or with another) stored messages cannot be read.
#[tokio::test]
async fn an_encryption_key_keeps_payloads_out_of_the_data_directory() {
    const KEY: &str = "3q2+7wABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhs=";
    const OTHER: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    // Without a key the payload is in the files: the search below finds what it looks for.
    let plain = server();
    let client = root(plain.addrs().stream).await;
    stream_and_topic(&client, "s", "t", 1).await;
    send_and_poll_marked(&client, "CLEARTEXT").await;
    assert!(!eddy_tests::files_containing(plain.data_dir(), b"CLEARTEXT-PAYLOAD").is_empty());
    drop(plain);

    let with_env = |key: &str| eddy_tests::Options {
        env: vec![("EDDY_ENCRYPTION_KEY".to_owned(), key.to_owned())],
        ..eddy_tests::Options::default()
    };
    let mut eddy = eddy_tests::Eddy::start_with(eddy_tests::server_bin!(), with_env(KEY));
    let client = root(eddy.addrs().stream).await;
    stream_and_topic(&client, "s", "t", 1).await;
    let polled = send_and_poll_marked(&client, "TOPSECRET").await;
    assert_eq!(payloads_of(&polled)[4], "TOPSECRET-PAYLOAD-4");
    let header = polled[0].user_headers_map().unwrap().unwrap();
    assert_eq!(
        header[&HeaderKey::from_str("note").unwrap()]
            .as_str()
            .unwrap(),
        "TOPSECRET-HEADER"
    );
    for marker in [&b"TOPSECRET"[..], KEY.as_bytes()] {
        let found = eddy_tests::files_containing(eddy.data_dir(), marker);
        assert!(found.is_empty(), "readable in {found:?}");
    }
    drop(client);
    eddy.restart();
    let client = root(eddy.addrs().stream).await;
    assert_eq!(
        poll_all(&client).await.unwrap().len(),
        5,
        "a restart reads them"
    );
    assert!(
        !eddy.log().lines().iter().any(|l| l.contains(KEY)),
        "the key reached the log"
    );

    // Another key, or none: the messages do not read (and nothing else breaks).
    drop(client);
    for other in [Some(OTHER), None] {
        *eddy.options_mut() = other.map_or_else(eddy_tests::Options::default, with_env);
        eddy.restart();
        let client = root(eddy.addrs().stream).await;
        assert!(poll_all(&client).await.is_err(), "read with {other:?}");
        assert_eq!(
            client
                .get_topic(&id(0), &id(0))
                .await
                .unwrap()
                .unwrap()
                .messages_count,
            5
        );
        drop(client);
    }
    *eddy.options_mut() = with_env(KEY);
    eddy.restart();
    let client = root(eddy.addrs().stream).await;
    assert_eq!(
        poll_all(&client).await.unwrap().len(),
        5,
        "the key reads them again"
    );
}

fn payloads_of(messages: &[IggyMessage]) -> Vec<String> {
    messages
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect()
}
