//! Issue 39: the published Iggy SDKs work unchanged against one real `eddy serve`.
//!
//! The same scenarios run through each client, written from each one's public API:
//!
//! * `edge4`: the Rust `iggy` 0.11.0-edge.4 crate, in this process;
//! * `edge9`: the Rust `iggy` 0.11.1-edge.9 crate, a binary of its own workspace
//!   (`tests/compat-edge9`: Cargo cannot hold both 0.11.x crates in one build), built here
//!   with the test's cargo and run against the server;
//! * `python`: `apache-iggy` 0.9.0 from PyPI in a virtual environment under the target
//!   directory, when `python3 -m pip` can install it; skipped with the reason printed
//!   otherwise.
//!
//! Each prints one line per scenario and a closing `N passed, N failed` line (on stdout:
//! `cargo test -- --nocapture` shows them). `edge4_scenarios_through_a_cluster_follower` runs
//! the edge.4 ones against a follower of a three-member cluster (the SDK moves to the leader
//! that `GET_CLUSTER_METADATA` names).
#![allow(clippy::too_many_lines)] // tests are exempt from the 100-line rule
#![allow(clippy::print_stdout)]

mod cluster_support;
mod stream_support;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Command;
use std::str::FromStr as _;

use eddy_tests::{server_bin, Eddy};
use iggy::prelude::*;
use stream_support::{id, named};

type Outcome = Result<(), String>;
type Scenario = fn(SocketAddr) -> Pin<Box<dyn Future<Output = Outcome>>>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

/// `?` for SDK calls: the error names the call.
trait Context<T> {
    fn at(self, what: &str) -> Result<T, String>;
}

impl<T, E: std::fmt::Display> Context<T> for Result<T, E> {
    fn at(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

async fn connected(addr: SocketAddr) -> Result<IggyClient, String> {
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(addr.to_string())
        .with_reconnection_max_retries(Some(0))
        .build()
        .at("build")?;
    client.connect().await.at("connect")?;
    Ok(client)
}

async fn root(addr: SocketAddr) -> Result<IggyClient, String> {
    let client = connected(addr).await?;
    client.login_user("iggy", "iggy").await.at("login")?;
    Ok(client)
}

fn messages(tag: &str, n: usize) -> Vec<IggyMessage> {
    (0..n)
        .map(|i| IggyMessage::from_str(&format!("{tag}-{i}")).expect("message"))
        .collect()
}

fn payloads(polled: &PolledMessages) -> Vec<String> {
    polled
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect()
}

/// The value of a topic option as text (`String` values) or its raw bytes otherwise.
fn option_text(options: &ResourceOptions, key: &str) -> Option<String> {
    options
        .iter()
        .find(|(k, _)| k.as_bytes() == key.as_bytes())
        .map(|(_, v)| {
            v.value
                .as_str()
                .map_or_else(|_| format!("{:?}", v.value.as_bytes()), str::to_owned)
        })
}

async fn topic(client: &IggyClient, name: &str, partitions: u32) -> Outcome {
    client.create_stream(name).await.at("create_stream")?;
    let options = TopicCreateOptions {
        partitions_count: Some(partitions),
        ..TopicCreateOptions::default()
    };
    client
        .create_topic(&named(name), "t", &options)
        .await
        .at("create_topic")?;
    Ok(())
}

async fn connect_login_ping(addr: SocketAddr) -> Outcome {
    let client = connected(addr).await?;
    client.ping().await.at("ping before login")?;
    let identity = client.login_user("iggy", "iggy").await.at("login")?;
    ensure!(
        identity.user_id == 0,
        "root is user 0, got {}",
        identity.user_id
    );
    client.ping().await.at("ping")?;
    let me = client.get_me().await.at("get_me")?;
    ensure!(me.user_id == Some(0), "get_me names root: {:?}", me.user_id);
    client.logout_user().await.at("logout")?;
    client.login_user("iggy", "iggy").await.at("login again")?;
    let wrong = client.login_user("iggy", "wrong-password").await;
    ensure!(
        matches!(wrong, Err(IggyError::InvalidCredentials)),
        "a wrong password is InvalidCredentials: {wrong:?}"
    );
    Ok(())
}

async fn streams(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    let created = client
        .create_stream("c4-streams")
        .await
        .at("create_stream")?;
    ensure!(
        created.name == "c4-streams",
        "created name {}",
        created.name
    );
    let got = client
        .get_stream(&named("c4-streams"))
        .await
        .at("get_stream")?
        .ok_or("the stream is missing")?;
    ensure!(got.id == created.id && got.topics_count == 0, "{got:?}");
    let all = client.get_streams().await.at("get_streams")?;
    ensure!(all.iter().any(|s| s.id == created.id), "listed: {all:?}");
    client
        .update_stream(
            &id(created.id),
            "c4-streams-renamed",
            &StreamUpdateOptions::default(),
        )
        .await
        .at("update_stream")?;
    let renamed = client
        .get_stream(&id(created.id))
        .await
        .at("get_stream after rename")?
        .ok_or("renamed stream missing")?;
    ensure!(renamed.name == "c4-streams-renamed", "{}", renamed.name);
    let duplicate = client.create_stream("c4-streams-renamed").await;
    ensure!(duplicate.is_err(), "a duplicate name is refused");
    client
        .purge_stream(&id(created.id))
        .await
        .at("purge_stream")?;
    client
        .delete_stream(&id(created.id))
        .await
        .at("delete_stream")?;
    let gone = client.get_stream(&id(created.id)).await.at("get_stream")?;
    ensure!(gone.is_none(), "deleted stream still there");
    Ok(())
}

async fn topics_with_every_option(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    client
        .create_stream("c4-topics")
        .await
        .at("create_stream")?;
    let stream = named("c4-topics");
    let plain = client
        .create_topic(&stream, "plain", &TopicCreateOptions::default())
        .await
        .at("create_topic with defaults")?;
    ensure!(plain.partitions_count == 1, "{}", plain.partitions_count);
    ensure!(
        option_text(&plain.options, "durability").as_deref() == Some("persisted"),
        "eddy's default is persisted: {:?}",
        option_text(&plain.options, "durability")
    );
    let every = TopicCreateOptions {
        partitions_count: Some(3),
        compression_algorithm: Some(CompressionAlgorithm::Gzip),
        message_expiry: Some(IggyExpiry::ExpireDuration(
            IggyDuration::from_str("1h").unwrap(),
        )),
        max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(64 * 1024 * 1024))),
        segment_size: Some(IggyByteSize::from(4 * 1024 * 1024)),
        enforce_fsync: Some(false),
        messages_required_to_save: Some(100),
        size_of_messages_required_to_save: Some(IggyByteSize::from(1024 * 1024)),
        preallocate_segments: Some(false),
        ..TopicCreateOptions::default()
    };
    let created = client
        .create_topic(&stream, "every", &every)
        .await
        .at("create_topic with every option")?;
    let got = client
        .get_topic(&stream, &named("every"))
        .await
        .at("get_topic")?
        .ok_or("topic missing")?;
    ensure!(got.id == created.id && got.partitions.len() == 3, "{got:?}");
    ensure!(
        got.compression_algorithm == CompressionAlgorithm::Gzip,
        "{:?}",
        got.compression_algorithm
    );
    ensure!(
        got.message_expiry == IggyExpiry::ExpireDuration(IggyDuration::from_str("1h").unwrap()),
        "{:?}",
        got.message_expiry
    );
    ensure!(
        got.max_topic_size == MaxTopicSize::Custom(IggyByteSize::from(64 * 1024 * 1024)),
        "{:?}",
        got.max_topic_size
    );
    ensure!(
        option_text(&got.options, "durability").as_deref() == Some("replicated"),
        "enforce_fsync = false reads as replicated: {:?}",
        option_text(&got.options, "durability")
    );
    client
        .update_topic(
            &stream,
            &named("every"),
            "every-renamed",
            &TopicUpdateOptions {
                message_expiry: Some(IggyExpiry::NeverExpire),
                ..TopicUpdateOptions::default()
            },
        )
        .await
        .at("update_topic")?;
    let updated = client
        .get_topic(&stream, &named("every-renamed"))
        .await
        .at("get_topic after update")?
        .ok_or("renamed topic missing")?;
    ensure!(
        updated.message_expiry == IggyExpiry::NeverExpire,
        "{:?}",
        updated.message_expiry
    );
    let topics = client.get_topics(&stream).await.at("get_topics")?;
    ensure!(topics.len() == 2, "{topics:?}");
    client
        .purge_topic(&stream, &named("plain"))
        .await
        .at("purge_topic")?;
    client
        .delete_topic(&stream, &named("plain"))
        .await
        .at("delete_topic")?;
    let options = client
        .describe_options(OptionsScope::Topic)
        .await
        .at("describe_options")?;
    for key in ["enforce_fsync", "durability", "consumer_offset_durability"] {
        ensure!(
            options.iter().any(|o| o.key == key),
            "describe_options lacks {key}"
        );
    }
    Ok(())
}

async fn partitions(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    topic(&client, "c4-partitions", 2).await?;
    let (s, t) = (named("c4-partitions"), named("t"));
    client
        .create_partitions(&s, &t, 3)
        .await
        .at("create_partitions")?;
    let got = client
        .get_topic(&s, &t)
        .await
        .at("get_topic")?
        .ok_or("topic")?;
    ensure!(got.partitions_count == 5, "{}", got.partitions_count);
    client
        .delete_partitions(&s, &t, 2)
        .await
        .at("delete_partitions")?;
    let got = client
        .get_topic(&s, &t)
        .await
        .at("get_topic")?
        .ok_or("topic")?;
    ensure!(got.partitions_count == 3, "{}", got.partitions_count);
    Ok(())
}

async fn send_with_every_partitioning(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    topic(&client, "c4-send", 3).await?;
    let (s, t) = (named("c4-send"), named("t"));
    let sent = client
        .send_messages(
            &s,
            &t,
            &Partitioning::partition_id(1),
            &mut messages("p1", 4),
        )
        .await
        .at("send to partition 1")?;
    ensure!(
        sent.confirmations
            .iter()
            .all(|c| c.partition_id == 1 && c.base_offset == 0),
        "{sent:?}"
    );
    client
        .send_messages(&s, &t, &Partitioning::balanced(), &mut messages("b", 3))
        .await
        .at("send balanced")?;
    client
        .send_messages(
            &s,
            &t,
            &Partitioning::messages_key_str("user-42").unwrap(),
            &mut messages("k", 2),
        )
        .await
        .at("send by key")?;
    let got = client
        .get_topic(&s, &t)
        .await
        .at("get_topic")?
        .ok_or("topic")?;
    ensure!(
        got.messages_count == 9,
        "9 messages, got {}",
        got.messages_count
    );
    Ok(())
}

async fn poll_with_every_strategy(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    topic(&client, "c4-poll", 1).await?;
    let (s, t) = (named("c4-poll"), named("t"));
    client
        .send_messages(
            &s,
            &t,
            &Partitioning::partition_id(0),
            &mut messages("m", 5),
        )
        .await
        .at("send")?;
    // A second batch, stamped later: timestamps are per batch.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    client
        .send_messages(
            &s,
            &t,
            &Partitioning::partition_id(0),
            &mut (5..10)
                .map(|i| IggyMessage::from_str(&format!("m-{i}")).expect("message"))
                .collect::<Vec<_>>(),
        )
        .await
        .at("send later")?;
    let consumer = Consumer::new(named("reader"));
    let poll = |strategy: PollingStrategy, count: u32, auto_commit: bool| {
        let (s, t, consumer, client) = (&s, &t, &consumer, &client);
        async move {
            client
                .poll_messages(s, t, Some(0), consumer, &strategy, count, auto_commit)
                .await
        }
    };
    let first = poll(PollingStrategy::first(), 3, false).await.at("first")?;
    ensure!(
        payloads(&first) == ["m-0", "m-1", "m-2"],
        "{:?}",
        payloads(&first)
    );
    ensure!(
        first.current_offset == 9,
        "current offset {}",
        first.current_offset
    );
    let offset = poll(PollingStrategy::offset(5), 2, false)
        .await
        .at("offset")?;
    ensure!(
        payloads(&offset) == ["m-5", "m-6"],
        "{:?}",
        payloads(&offset)
    );
    let last = poll(PollingStrategy::last(), 2, false).await.at("last")?;
    ensure!(payloads(&last) == ["m-8", "m-9"], "{:?}", payloads(&last));
    let stamp = offset.messages[0].header.timestamp;
    let by_time = poll(
        PollingStrategy::timestamp(IggyTimestamp::from(stamp)),
        1,
        false,
    )
    .await
    .at("timestamp")?;
    ensure!(payloads(&by_time) == ["m-5"], "{:?}", payloads(&by_time));
    let next = poll(PollingStrategy::next(), 4, true).await.at("next")?;
    ensure!(
        payloads(&next) == ["m-0", "m-1", "m-2", "m-3"],
        "{:?}",
        payloads(&next)
    );
    let next = poll(PollingStrategy::next(), 4, true)
        .await
        .at("next again")?;
    ensure!(
        payloads(&next) == ["m-4", "m-5", "m-6", "m-7"],
        "{:?}",
        payloads(&next)
    );
    Ok(())
}

async fn consumer_offsets(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    topic(&client, "c4-offsets", 1).await?;
    let (s, t) = (named("c4-offsets"), named("t"));
    client
        .send_messages(
            &s,
            &t,
            &Partitioning::partition_id(0),
            &mut messages("o", 5),
        )
        .await
        .at("send")?;
    let consumer = Consumer::new(named("offsets"));
    let none = client
        .get_consumer_offset(&consumer, &s, &t, Some(0))
        .await
        .at("get before store")?;
    ensure!(none.is_none(), "{none:?}");
    client
        .store_consumer_offset(&consumer, &s, &t, Some(0), 3)
        .await
        .at("store")?;
    let stored = client
        .get_consumer_offset(&consumer, &s, &t, Some(0))
        .await
        .at("get")?
        .ok_or("no offset")?;
    ensure!(
        stored.stored_offset == 3 && stored.current_offset == 4,
        "{stored:?}"
    );
    client
        .delete_consumer_offset(&consumer, &s, &t, Some(0))
        .await
        .at("delete")?;
    let gone = client
        .get_consumer_offset(&consumer, &s, &t, Some(0))
        .await
        .at("get after delete")?;
    ensure!(gone.is_none(), "{gone:?}");
    Ok(())
}

async fn consumer_groups(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    topic(&client, "c4-groups", 2).await?;
    let (s, t) = (named("c4-groups"), named("t"));
    client
        .send_messages(
            &s,
            &t,
            &Partitioning::partition_id(0),
            &mut messages("g", 3),
        )
        .await
        .at("send")?;
    let group = client
        .create_consumer_group(&s, &t, "workers")
        .await
        .at("create_consumer_group")?;
    ensure!(
        group.name == "workers" && group.partitions_count == 2,
        "{group:?}"
    );
    client
        .join_consumer_group(&s, &t, &named("workers"))
        .await
        .at("join")?;
    let details = client
        .get_consumer_group(&s, &t, &named("workers"))
        .await
        .at("get_consumer_group")?
        .ok_or("group missing")?;
    ensure!(details.members_count == 1, "{details:?}");
    let groups = client.get_consumer_groups(&s, &t).await.at("list")?;
    ensure!(groups.len() == 1, "{groups:?}");
    let polled = client
        .poll_messages(
            &s,
            &t,
            Some(0),
            &Consumer::group(named("workers")),
            &PollingStrategy::next(),
            10,
            true,
        )
        .await
        .at("group poll")?;
    ensure!(polled.messages.len() == 3, "{:?}", payloads(&polled));
    client
        .leave_consumer_group(&s, &t, &named("workers"))
        .await
        .at("leave")?;
    client
        .delete_consumer_group(&s, &t, &named("workers"))
        .await
        .at("delete")?;
    Ok(())
}

async fn users(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    let created = client
        .create_user("c4-user", "secret-1", UserStatus::Active, None)
        .await
        .at("create_user")?;
    let got = client
        .get_user(&named("c4-user"))
        .await
        .at("get_user")?
        .ok_or("user missing")?;
    ensure!(
        got.id == created.id && got.status == UserStatus::Active,
        "{got:?}"
    );
    let all = client.get_users().await.at("get_users")?;
    ensure!(all.iter().any(|u| u.username == "c4-user"), "{all:?}");
    client
        .update_user(
            &id(created.id),
            Some("c4-user-2"),
            None,
            &UserUpdateOptions::default(),
        )
        .await
        .at("update_user")?;
    let permissions = Permissions {
        global: GlobalPermissions {
            read_streams: true,
            ..GlobalPermissions::default()
        },
        streams: None,
    };
    client
        .update_permissions(&id(created.id), Some(permissions))
        .await
        .at("update_permissions")?;
    client
        .change_password(&id(created.id), "secret-1", "secret-2")
        .await
        .at("change_password")?;
    let other = connected(addr).await?;
    other
        .login_user("c4-user-2", "secret-2")
        .await
        .at("login as the new user")?;
    other.get_streams().await.at("read_streams allowed")?;
    let refused = other.create_stream("c4-not-allowed").await;
    ensure!(
        matches!(refused, Err(IggyError::Unauthorized)),
        "manage_streams refused: {refused:?}"
    );
    client
        .delete_user(&id(created.id))
        .await
        .at("delete_user")?;
    Ok(())
}

async fn personal_access_tokens(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    let token = client
        .create_personal_access_token("c4-token", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .at("create token")?;
    let tokens = client
        .get_personal_access_tokens()
        .await
        .at("list tokens")?;
    ensure!(tokens.iter().any(|t| t.name == "c4-token"), "{tokens:?}");
    let other = connected(addr).await?;
    let identity = other
        .login_with_personal_access_token(&token.token)
        .await
        .at("login with token")?;
    ensure!(identity.user_id == 0, "{identity:?}");
    other.ping().await.at("ping as token")?;
    client
        .delete_personal_access_token("c4-token")
        .await
        .at("delete token")?;
    Ok(())
}

async fn stats_and_clients(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    let stats = client.get_stats().await.at("get_stats")?;
    ensure!(stats.process_id > 0, "{stats:?}");
    let clients = client.get_clients().await.at("get_clients")?;
    ensure!(!clients.is_empty(), "no clients");
    let me = client.get_me().await.at("get_me")?;
    let one = client
        .get_client(me.client_id)
        .await
        .at("get_client")?
        .ok_or("client missing")?;
    ensure!(one.client_id == me.client_id, "{one:?}");
    Ok(())
}

async fn cluster_metadata(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    let metadata = client
        .get_cluster_metadata()
        .await
        .at("get_cluster_metadata")?;
    // A single node lists itself; a cluster every member. Either way exactly one leads.
    ensure!(!metadata.nodes.is_empty(), "{metadata:?}");
    ensure!(
        metadata
            .nodes
            .iter()
            .filter(|n| n.role == ClusterNodeRole::Leader)
            .count()
            == 1,
        "{metadata:?}"
    );
    Ok(())
}

async fn segments(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    topic(&client, "c4-segments", 1).await?;
    let (s, t) = (named("c4-segments"), named("t"));
    client
        .send_messages(
            &s,
            &t,
            &Partitioning::partition_id(0),
            &mut messages("s", 3),
        )
        .await
        .at("send")?;
    client
        .delete_segments(&s, &t, 0, 1)
        .await
        .at("delete_segments")?;
    Ok(())
}

/// Reads `n` messages from a high-level consumer.
async fn drain(consumer: &mut IggyConsumer, n: usize, what: &str) -> Result<Vec<String>, String> {
    use futures_util::StreamExt as _;
    let mut seen = Vec::new();
    while seen.len() < n {
        let next = tokio::time::timeout(std::time::Duration::from_secs(10), consumer.next())
            .await
            .map_err(|_| format!("only {} of {n} messages ({what})", seen.len()))?
            .ok_or("the consumer ended")?
            .map_err(|e| format!("consumer: {e}"))?;
        seen.push(String::from_utf8_lossy(&next.message.payload).into_owned());
    }
    Ok(seen)
}

/// The SDK's high-level consumer, alone (one per partition in this SDK) and in a consumer
/// group, over messages sent to two partitions.
async fn high_level_consumer(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    topic(&client, "c4-consumer", 2).await?;
    for partition in 0..2 {
        client
            .send_messages(
                &named("c4-consumer"),
                &named("t"),
                &Partitioning::partition_id(partition),
                &mut messages(&format!("p{partition}"), 5),
            )
            .await
            .at("send")?;
    }
    let mut alone = Vec::new();
    for partition in 0..2 {
        let mut consumer = client
            .consumer("c4-reader", "c4-consumer", "t", partition)
            .at("consumer builder")?
            .polling_strategy(PollingStrategy::next())
            .build();
        consumer.init().await.at("consumer init")?;
        alone.extend(drain(&mut consumer, 5, "alone").await?);
    }
    let mut consumer = client
        .consumer_group("c4-readers", "c4-consumer", "t")
        .at("consumer builder")?
        .polling_strategy(PollingStrategy::next())
        .build();
    consumer.init().await.at("consumer init")?;
    let grouped = drain(&mut consumer, 10, "group").await?;
    for seen in [alone, grouped] {
        ensure!(
            seen.iter().filter(|p| p.starts_with("p0-")).count() == 5
                && seen.iter().filter(|p| p.starts_with("p1-")).count() == 5,
            "{seen:?}"
        );
    }
    Ok(())
}

/// The scenarios, by the names the edge.9 binary uses too.
const SCENARIOS: &[(&str, Scenario)] = &[
    ("connect_login_ping", |a| Box::pin(connect_login_ping(a))),
    ("streams", |a| Box::pin(streams(a))),
    ("topics_with_every_option", |a| {
        Box::pin(topics_with_every_option(a))
    }),
    ("partitions", |a| Box::pin(partitions(a))),
    ("send_with_every_partitioning", |a| {
        Box::pin(send_with_every_partitioning(a))
    }),
    ("poll_with_every_strategy", |a| {
        Box::pin(poll_with_every_strategy(a))
    }),
    ("consumer_offsets", |a| Box::pin(consumer_offsets(a))),
    ("consumer_groups", |a| Box::pin(consumer_groups(a))),
    ("users", |a| Box::pin(users(a))),
    ("personal_access_tokens", |a| {
        Box::pin(personal_access_tokens(a))
    }),
    ("stats_and_clients", |a| Box::pin(stats_and_clients(a))),
    ("cluster_metadata", |a| Box::pin(cluster_metadata(a))),
    ("segments", |a| Box::pin(segments(a))),
    ("high_level_consumer", |a| Box::pin(high_level_consumer(a))),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge4_scenarios() {
    let eddy = Eddy::start(server_bin!());
    run_edge4(eddy.addrs().stream).await;
}

/// Runs every edge.4 scenario against `addr`, failing on any that fails.
async fn run_edge4(addr: SocketAddr) {
    let mut failed = Vec::new();
    for (name, scenario) in SCENARIOS {
        match scenario(addr).await {
            Ok(()) => println!("ok {name}"),
            Err(why) => {
                println!("FAIL {name}: {why}");
                failed.push(*name);
            }
        }
    }
    println!(
        "edge4: {} passed, {} failed",
        SCENARIOS.len() - failed.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "edge.4 scenarios failed: {failed:?}");
}

/// The target directory the test binaries live in (`<target>/debug/deps/..`).
fn target_dir() -> PathBuf {
    let server = Path::new(server_bin!());
    server
        .parent()
        .and_then(Path::parent)
        .expect("the test server lives in <target>/<profile>/")
        .to_path_buf()
}

#[test]
fn edge9_scenarios() {
    let eddy = Eddy::start(server_bin!());
    run_edge9(eddy.addrs().stream, None);
}

/// Builds the edge.9 scenarios' binary (`tests/compat-edge9`) and runs it against `addr`;
/// `other`, another member of `addr`'s cluster, is where a scenario checks that what it got
/// on `addr` holds there too (a metadata-changes cursor).
fn run_edge9(addr: SocketAddr, other: Option<SocketAddr>) {
    run_edge9_with(addr, other, &[], &[]);
}

/// [`run_edge9`] of the scenarios named in `only` (all when empty), with `env` set.
fn run_edge9_with(
    addr: SocketAddr,
    other: Option<SocketAddr>,
    env: &[(&str, &str)],
    only: &[&str],
) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("compat-edge9/Cargo.toml");
    let target = target_dir().join("compat-edge9");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let built = Command::new(&cargo)
        .args(["build", "--quiet", "--locked", "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTFLAGS")
        .status()
        .expect("run cargo");
    assert!(built.success(), "building {} failed", manifest.display());
    let mut scenarios = Command::new(target.join("debug/eddy-compat-edge9"));
    if let Some(other) = other {
        scenarios.env("EDDY_COMPAT_OTHER_MEMBER", other.to_string());
    }
    let output = scenarios
        .envs(env.iter().copied())
        .arg(addr.to_string())
        .args(only)
        .output()
        .expect("run the edge.9 scenarios");
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "edge.9 scenarios failed");
}

/// The edge.9 stream key scenario on a server with `--encryption-key` (the whole run above
/// has none, where a stream key is refused).
#[test]
fn edge9_stream_keys_with_a_server_key() {
    let eddy = Eddy::start_with(
        server_bin!(),
        eddy_tests::Options {
            args: vec![
                "--encryption-key".to_owned(),
                "3q2+7wABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhs=".to_owned(),
            ],
            ..eddy_tests::Options::default()
        },
    );
    run_edge9_with(
        eddy.addrs().stream,
        None,
        &[("EDDY_COMPAT_SERVER_KEY", "1")],
        &["stream_encryption_keys"],
    );
}

/// The same through a follower of a three-member cluster whose members share the server key:
/// the keyed stream's partition groups are sealed with its key on every member.
#[test]
fn edge9_stream_keys_through_a_cluster_follower() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let nodes = cluster_support::start_cluster_with(
        3,
        &[
            "--encryption-key",
            "3q2+7wABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhs=",
        ],
    );
    let follower = rt.block_on(async {
        let follower = follower_of(&nodes).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while root(follower).await.is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "root cannot log in through {follower}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        follower
    });
    run_edge9_with(
        follower,
        None,
        &[("EDDY_COMPAT_SERVER_KEY", "1")],
        &["stream_encryption_keys"],
    );
}

#[test]
fn python_smoke() {
    let eddy = Eddy::start(server_bin!());
    run_python(eddy.addrs().stream);
}

/// A three-member cluster (peer mTLS) on 127.0.0.1-3: the edge.4 scenarios through a member
/// that does not lead the metadata group (the SDK moves to the leader).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge4_scenarios_through_a_cluster_follower() {
    let nodes = cluster_support::start_cluster(3);
    let follower = follower_of(&nodes).await;
    println!("through member {follower}");
    // Root exists once the metadata group committed its creation and the member applied it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while root(follower).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "root cannot log in through {follower}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    run_edge4(follower).await;
}

/// The edge.9 scenarios, then the Python smoke, through a member that leads nothing: those
/// SDKs send every request to the member they reached (to a 0.12.2 client a member lists
/// itself alone), which serves reads and forwards writes to their groups' leaders.
#[test]
fn newest_sdks_through_a_cluster_follower() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let nodes = cluster_support::start_cluster(3);
    let follower = rt.block_on(async {
        let follower = follower_of(&nodes).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while root(follower).await.is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "root cannot log in through {follower}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        follower
    });
    println!("through member {follower}");
    let other = nodes
        .iter()
        .map(|n| n.stream)
        .find(|&a| a != follower)
        .expect("another member");
    run_edge9(follower, Some(other));
    run_python(follower);
}

/// The stream address of a member whose `/health` says `follower` (once a leader is elected).
async fn follower_of(nodes: &[cluster_support::Node]) -> SocketAddr {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        for node in nodes {
            if let Ok((200, body)) = eddy_tests::http_get(node.eddy.addrs().http, "/health") {
                if body.contains("follower") {
                    return node.stream;
                }
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no follower with a leader"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Installs `apache-iggy` 0.9.0 in a virtual environment and runs the Python smoke against
/// `addr`; skipped (with the reason printed) where Python or pip cannot.
fn run_python(addr: SocketAddr) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("compat-python/smoke.py");
    let venv = target_dir().join("python-apache-iggy-0.9.0");
    let python = venv.join("bin/python");
    if !python.exists() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .output();
        if !made.as_ref().is_ok_and(|o| o.status.success()) {
            println!("python: skipped: `python3 -m venv` is not available here ({made:?})");
            return;
        }
    }
    let installed = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "apache-iggy==0.9.0"])
        .output()
        .expect("run pip");
    if !installed.status.success() {
        println!(
            "python: skipped: pip could not install apache-iggy==0.9.0: {}",
            String::from_utf8_lossy(&installed.stderr).trim()
        );
        return;
    }
    let output = Command::new(&python)
        .arg(&script)
        .arg(addr.to_string())
        .output()
        .expect("run the Python smoke");
    print!("{}", String::from_utf8_lossy(&output.stdout));
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "the Python smoke failed ({})",
        output.status
    );
}
