//! The compatibility scenarios of `iggy` 0.11.1-edge.9 against a running eddy.
//!
//! `eddy-compat-edge9 ADDR` runs every scenario against the stream port at `ADDR` (root
//! `iggy`/`iggy`), prints one `ok NAME` / `FAIL NAME: why` line each and a closing
//! `N passed, N failed` line, and exits non-zero if any failed. With `EDDY_COMPAT_TRACE=1` a
//! proxy in between prints every frame (for finding out what the SDK sends).
//!
//! The scenarios are written from the SDK's public API; `tests/tests/sdk_compat.rs` runs the
//! same ones through the 0.11.0-edge.4 SDK.

mod trace;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::str::FromStr;

use iggy::prelude::*;

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

fn id(n: u32) -> Identifier {
    Identifier::numeric(n).expect("numeric id")
}

fn named(name: &str) -> Identifier {
    Identifier::named(name).expect("named id")
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

/// A stream and a topic of `partitions` partitions, named after the scenario.
async fn topic(client: &IggyClient, name: &str, partitions: u32) -> Result<(), String> {
    client
        .create_stream(name, &StreamCreateOptions::default())
        .await
        .at("create_stream")?;
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
        .create_stream("c9-streams", &StreamCreateOptions::default())
        .await
        .at("create_stream")?;
    ensure!(
        created.name == "c9-streams",
        "created name {}",
        created.name
    );
    let got = client
        .get_stream(&named("c9-streams"))
        .await
        .at("get_stream")?
        .ok_or("the stream is missing")?;
    ensure!(got.id == created.id && got.topics_count == 0, "{got:?}");
    let all = client.get_streams().await.at("get_streams")?;
    ensure!(all.iter().any(|s| s.id == created.id), "listed: {all:?}");
    client
        .update_stream(
            &id(created.id),
            &StreamUpdateOptions {
                name: Some("c9-streams-renamed".to_owned()),
                ..StreamUpdateOptions::default()
            },
        )
        .await
        .at("update_stream")?;
    let renamed = client
        .get_stream(&id(created.id))
        .await
        .at("get_stream after rename")?
        .ok_or("renamed stream missing")?;
    ensure!(renamed.name == "c9-streams-renamed", "{}", renamed.name);
    let duplicate = client
        .create_stream("c9-streams-renamed", &StreamCreateOptions::default())
        .await;
    ensure!(duplicate.is_err(), "a duplicate name is refused");
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
        .create_stream("c9-topics", &StreamCreateOptions::default())
        .await
        .at("create_stream")?;
    let stream = named("c9-topics");
    // The SDK's defaults: it sends `durability` and `consumer_offset_durability` explicitly
    // (its own default is `replicated`), so the topic is what it asked for; eddy's default
    // (persisted) is what `describe_options` reports, for keys a client leaves out.
    let plain = client
        .create_topic(&stream, "plain", &TopicCreateOptions::default())
        .await
        .at("create_topic with defaults")?;
    let resolved = plain.resolved_options();
    ensure!(plain.partitions_count == 1, "{}", plain.partitions_count);
    ensure!(
        resolved.runtime.durability == Durability::Replicated
            && resolved.runtime.consumer_offset_durability == Durability::Replicated,
        "the SDK asked for replicated: {:?}",
        resolved.runtime
    );
    let persisted = client
        .create_topic(
            &stream,
            "persisted",
            &TopicCreateOptions {
                durability: Durability::Persisted,
                consumer_offset_durability: Durability::Persisted,
                ..TopicCreateOptions::default()
            },
        )
        .await
        .at("create_topic persisted")?;
    ensure!(
        persisted.resolved_options().runtime.durability == Durability::Persisted,
        "{:?}",
        persisted.resolved_options().runtime
    );
    let every = TopicCreateOptions {
        partitions_count: Some(3),
        compression_algorithm: Some(CompressionAlgorithm::Gzip),
        message_expiry: Some(IggyExpiry::ExpireDuration(
            IggyDuration::from_str("1h").unwrap(),
        )),
        max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(64 * 1024 * 1024))),
        segment_size: Some(IggyByteSize::from(4 * 1024 * 1024)),
        durability: Durability::Replicated,
        consumer_offset_durability: Durability::Persisted,
        partition_resize_policy: Some(PartitionResizePolicy::Fixed),
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
    let r = got.resolved_options();
    ensure!(got.id == created.id && got.partitions.len() == 3, "{got:?}");
    ensure!(
        r.compression_algorithm == CompressionAlgorithm::Gzip,
        "{:?}",
        r.compression_algorithm
    );
    ensure!(
        r.message_expiry == IggyExpiry::ExpireDuration(IggyDuration::from_str("1h").unwrap()),
        "{:?}",
        r.message_expiry
    );
    ensure!(
        r.max_topic_size == MaxTopicSize::Custom(IggyByteSize::from(64 * 1024 * 1024)),
        "{:?}",
        r.max_topic_size
    );
    ensure!(
        r.runtime.durability == Durability::Replicated
            && r.runtime.consumer_offset_durability == Durability::Persisted,
        "{:?}",
        r.runtime
    );
    ensure!(
        r.partition_resize_policy == PartitionResizePolicy::Fixed,
        "{:?}",
        r.partition_resize_policy
    );
    let resize = client.create_partitions(&stream, &named("every"), 1).await;
    ensure!(resize.is_err(), "a fixed topic refuses new partitions");
    client
        .update_topic(
            &stream,
            &named("every"),
            &TopicUpdateOptions {
                name: Some("every-renamed".to_owned()),
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
        updated.resolved_options().message_expiry == IggyExpiry::NeverExpire,
        "{:?}",
        updated.resolved_options().message_expiry
    );
    let topics = client.get_topics(&stream).await.at("get_topics")?;
    ensure!(topics.len() == 3, "{topics:?}");
    client
        .delete_topic(&stream, &named("plain"))
        .await
        .at("delete_topic")?;
    let options = client
        .describe_options(OptionsScope::Topic)
        .await
        .at("describe_options")?;
    for key in ["durability", "consumer_offset_durability"] {
        let described = options
            .iter()
            .find(|o| o.key == key)
            .ok_or(format!("describe_options lacks {key}"))?;
        ensure!(
            described.default_value == b"persisted",
            "eddy's default {key} is persisted: {described:?}"
        );
    }
    ensure!(
        options.iter().any(|o| o.key == "partition_resize_policy"),
        "describe_options lacks partition_resize_policy"
    );
    Ok(())
}

async fn partitions(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    topic(&client, "c9-partitions", 2).await?;
    let (s, t) = (named("c9-partitions"), named("t"));
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
    topic(&client, "c9-send", 3).await?;
    let (s, t) = (named("c9-send"), named("t"));
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
        sent.confirmations.is_empty()
            || sent
                .confirmations
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
    topic(&client, "c9-poll", 1).await?;
    let (s, t) = (named("c9-poll"), named("t"));
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
    let poll = |strategy: PollingStrategy, count: u32, commit: CommitPolicy| {
        let (s, t, consumer, client) = (&s, &t, &consumer, &client);
        async move {
            client
                .poll_messages(
                    s,
                    t,
                    0,
                    consumer,
                    &strategy,
                    PollOptions {
                        count,
                        commit,
                        ..PollOptions::default()
                    },
                )
                .await
        }
    };
    let first = poll(PollingStrategy::first(), 3, CommitPolicy::Manual)
        .await
        .at("first")?;
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
    let offset = poll(PollingStrategy::offset(5), 2, CommitPolicy::Manual)
        .await
        .at("offset")?;
    ensure!(
        payloads(&offset) == ["m-5", "m-6"],
        "{:?}",
        payloads(&offset)
    );
    let last = poll(PollingStrategy::last(), 2, CommitPolicy::Manual)
        .await
        .at("last")?;
    ensure!(payloads(&last) == ["m-8", "m-9"], "{:?}", payloads(&last));
    let stamp = offset.messages[0].header.timestamp;
    let by_time = poll(
        PollingStrategy::timestamp(IggyTimestamp::from(stamp)),
        1,
        CommitPolicy::Manual,
    )
    .await
    .at("timestamp")?;
    ensure!(payloads(&by_time) == ["m-5"], "{:?}", payloads(&by_time));
    let next = poll(PollingStrategy::next(), 4, CommitPolicy::OnRead)
        .await
        .at("next")?;
    ensure!(
        payloads(&next) == ["m-0", "m-1", "m-2", "m-3"],
        "{:?}",
        payloads(&next)
    );
    let next = poll(PollingStrategy::next(), 4, CommitPolicy::OnRead)
        .await
        .at("next again")?;
    ensure!(
        payloads(&next) == ["m-4", "m-5", "m-6", "m-7"],
        "{:?}",
        payloads(&next)
    );
    // Long polling: waits for a message that arrives during the wait.
    let waiting = {
        let client = &client;
        async move {
            client
                .poll_messages(
                    &named("c9-poll"),
                    &named("t"),
                    0,
                    &Consumer::new(named("waiter")),
                    &PollingStrategy::offset(10),
                    PollOptions {
                        count: 1,
                        max_wait: IggyDuration::from_str("5s").unwrap(),
                        ..PollOptions::default()
                    },
                )
                .await
        }
    };
    let late = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        root(addr)
            .await?
            .send_messages(
                &named("c9-poll"),
                &named("t"),
                &Partitioning::partition_id(0),
                &mut messages("late", 1),
            )
            .await
            .at("late send")
    };
    let (waited, sent) = tokio::join!(waiting, late);
    sent?;
    let waited = waited.at("long poll")?;
    ensure!(payloads(&waited) == ["late-0"], "{:?}", payloads(&waited));
    Ok(())
}

async fn consumer_offsets(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    topic(&client, "c9-offsets", 1).await?;
    let (s, t) = (named("c9-offsets"), named("t"));
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

/// `Consumer::external_group`: a consumer group's offsets kept for members managed outside
/// Iggy (a Kafka bridge): stored without membership or a range check, read back, deleted,
/// never polled (`FeatureUnavailable`); a group that does not exist is refused.
async fn external_groups(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    topic(&client, "c9-external", 1).await?;
    let (s, t) = (named("c9-external"), named("t"));
    client
        .send_messages(
            &s,
            &t,
            &Partitioning::partition_id(0),
            &mut messages("x", 3),
        )
        .await
        .at("send")?;
    client
        .create_consumer_group(&s, &t, "bridge")
        .await
        .at("create_consumer_group")?;
    let external = Consumer::external_group(named("bridge"));
    // Beyond the partition's end, and without joining: the bridge's own positions.
    client
        .store_consumer_offset(&external, &s, &t, Some(0), 1_000)
        .await
        .at("store beyond the end")?;
    let stored = client
        .get_consumer_offset(&external, &s, &t, Some(0))
        .await
        .at("get")?
        .ok_or("no offset")?;
    ensure!(stored.stored_offset == 1_000, "{stored:?}");
    client
        .store_consumer_offset(&external, &s, &t, Some(0), 1)
        .await
        .at("store back")?;
    let stored = client
        .get_consumer_offset(&external, &s, &t, Some(0))
        .await
        .at("get again")?
        .ok_or("no offset")?;
    ensure!(
        stored.stored_offset == 1 && stored.current_offset == 2,
        "{stored:?}"
    );
    let polled = client
        .poll_messages(
            &s,
            &t,
            0,
            &external,
            &PollingStrategy::next(),
            PollOptions {
                count: 10,
                ..PollOptions::default()
            },
        )
        .await;
    ensure!(
        matches!(polled, Err(IggyError::FeatureUnavailable)),
        "a poll as an external group: {:?}",
        polled.map(|p| p.messages.len())
    );
    client
        .delete_consumer_offset(&external, &s, &t, Some(0))
        .await
        .at("delete")?;
    let gone = client
        .get_consumer_offset(&external, &s, &t, Some(0))
        .await
        .at("get after delete")?;
    ensure!(gone.is_none(), "{gone:?}");
    let unknown = client
        .store_consumer_offset(
            &Consumer::external_group(named("no-such-group")),
            &s,
            &t,
            Some(0),
            1,
        )
        .await;
    ensure!(unknown.is_err(), "an unknown group's offset was stored");
    client
        .delete_consumer_group(&s, &t, &named("bridge"))
        .await
        .at("delete group")?;
    Ok(())
}

async fn consumer_groups(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    topic(&client, "c9-groups", 2).await?;
    let (s, t) = (named("c9-groups"), named("t"));
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
            0,
            &Consumer::group(named("workers")),
            &PollingStrategy::next(),
            PollOptions {
                count: 10,
                commit: CommitPolicy::OnRead,
                ..PollOptions::default()
            },
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
        .create_user(
            "c9-user",
            "secret-1",
            UserStatus::Active,
            None,
            &UserCreateOptions::default(),
        )
        .await
        .at("create_user")?;
    let got = client
        .get_user(&named("c9-user"))
        .await
        .at("get_user")?
        .ok_or("user missing")?;
    ensure!(
        got.id == created.id && got.status == UserStatus::Active,
        "{got:?}"
    );
    let all = client.get_users().await.at("get_users")?;
    ensure!(all.iter().any(|u| u.username == "c9-user"), "{all:?}");
    client
        .update_user(
            &id(created.id),
            &UserUpdateOptions {
                username: Some("c9-user-2".to_owned()),
                ..UserUpdateOptions::default()
            },
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
        .login_user("c9-user-2", "secret-2")
        .await
        .at("login as the new user")?;
    other.get_streams().await.at("read_streams allowed")?;
    let refused = other
        .create_stream("c9-not-allowed", &StreamCreateOptions::default())
        .await;
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
        .create_personal_access_token("c9-token", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .at("create token")?;
    let tokens = client
        .get_personal_access_tokens()
        .await
        .at("list tokens")?;
    ensure!(tokens.iter().any(|t| t.name == "c9-token"), "{tokens:?}");
    let other = connected(addr).await?;
    let identity = other
        .login_with_personal_access_token(&token.token)
        .await
        .at("login with token")?;
    ensure!(identity.user_id == 0, "{identity:?}");
    other.ping().await.at("ping as token")?;
    client
        .delete_personal_access_token("c9-token")
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
    topic(&client, "c9-segments", 1).await?;
    let (s, t) = (named("c9-segments"), named("t"));
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

/// The SDK's high-level consumer (its reader fetches with `FETCH_MESSAGES`), alone and in a
/// consumer group, over messages a producer sent.
async fn high_level_consumer(addr: SocketAddr) -> Outcome {
    use futures_util::StreamExt as _;
    let client = root(addr).await?;
    topic(&client, "c9-consumer", 2).await?;
    for partition in 0..2 {
        client
            .send_messages(
                &named("c9-consumer"),
                &named("t"),
                &Partitioning::partition_id(partition),
                &mut messages(&format!("p{partition}"), 5),
            )
            .await
            .at("send")?;
    }
    for group in [false, true] {
        let builder = if group {
            client
                .consumer_group("c9-readers", "c9-consumer", "t")
                .at("consumer builder")?
        } else {
            // A standalone consumer names its partitions.
            client
                .consumer("c9-reader", "c9-consumer", "t")
                .at("consumer builder")?
                .partitions([0, 1])
        };
        let mut consumer = builder.polling_strategy(PollingStrategy::next()).build();
        consumer.init().await.at("consumer init")?;
        let mut seen = Vec::new();
        while seen.len() < 10 {
            let next = tokio::time::timeout(std::time::Duration::from_secs(10), consumer.next())
                .await
                .map_err(|_| format!("only {} of 10 messages (group: {group})", seen.len()))?
                .ok_or("the consumer ended")?
                .map_err(|e| format!("consumer: {e:?}"))?;
            seen.push(String::from_utf8_lossy(&next.message.payload).into_owned());
        }
        seen.sort();
        ensure!(
            seen.iter().filter(|p| p.starts_with("p0-")).count() == 5
                && seen.iter().filter(|p| p.starts_with("p1-")).count() == 5,
            "{seen:?} (group: {group})"
        );
    }
    Ok(())
}

/// `get_metadata_changes`: a stream created and deleted shows up after the `latest` cursor,
/// in order, and the `next` cursor resumes after them; the current state holds the stream; a
/// cursor of another history is `reset`; a user without `manage_servers` is refused.
async fn metadata_changes(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    let latest = client
        .get_metadata_changes(&MetadataChangesQuery {
            start: MetadataChangeStart::Latest,
            ..MetadataChangesQuery::default()
        })
        .await
        .at("latest")?;
    ensure!(
        latest.status == MetadataChangeStatus::Ok && latest.records.is_empty(),
        "{latest:?}"
    );
    let cursor = latest.next.ok_or("latest has no cursor")?;
    topic(&client, "c9-changes", 2).await?;
    let page = client
        .get_metadata_changes(&MetadataChangesQuery {
            start: MetadataChangeStart::After(cursor),
            limit: 1,
            ..MetadataChangesQuery::default()
        })
        .await
        .at("changes after latest")?;
    ensure!(
        page.status == MetadataChangeStatus::Ok && page.has_more && page.records.len() == 1,
        "one record of two: {page:?}"
    );
    ensure!(
        matches!(&page.records[0].change, MetadataChange::StreamCreated(s) if s.name == "c9-changes"),
        "{:?}",
        page.records[0]
    );
    let rest = client
        .get_metadata_changes(&MetadataChangesQuery {
            start: MetadataChangeStart::After(page.next.ok_or("no next")?),
            ..MetadataChangesQuery::default()
        })
        .await
        .at("changes after next")?;
    ensure!(
        !rest.has_more
            && matches!(&rest.records[..], [r] if matches!(&r.change,
                MetadataChange::TopicCreated(t) if t.name == "t" && t.partitions_count == 2)),
        "{rest:?}"
    );
    // Through another member of the same cluster (when the harness names one), the cursor
    // taken here holds: the same two changes follow it.
    if let Some(other) = std::env::var("EDDY_COMPAT_OTHER_MEMBER")
        .ok()
        .and_then(|a| a.parse::<SocketAddr>().ok())
    {
        let elsewhere = root(other)
            .await?
            .get_metadata_changes(&MetadataChangesQuery {
                start: MetadataChangeStart::After(cursor),
                ..MetadataChangesQuery::default()
            })
            .await
            .at("the cursor on another member")?;
        ensure!(
            elsewhere.status == MetadataChangeStatus::Ok
                && matches!(&elsewhere.records[..], [a, b]
                    if matches!(&a.change, MetadataChange::StreamCreated(s) if s.name == "c9-changes")
                    && matches!(&b.change, MetadataChange::TopicCreated(t) if t.name == "t")),
            "on {other}: {elsewhere:?}"
        );
        println!("   the cursor holds on {other} too");
    }
    let streams_only = client
        .get_metadata_changes(&MetadataChangesQuery {
            start: MetadataChangeStart::After(cursor),
            groups: vec![MetadataChangeGroup::Topics],
            ..MetadataChangesQuery::default()
        })
        .await
        .at("topics only")?;
    ensure!(
        streams_only.records.len() == 1
            && matches!(
                &streams_only.records[0].change,
                MetadataChange::TopicCreated(_)
            ),
        "{streams_only:?}"
    );
    let current = client
        .get_metadata_changes(&MetadataChangesQuery {
            start: MetadataChangeStart::Current(None),
            ..MetadataChangesQuery::default()
        })
        .await
        .at("current")?;
    ensure!(
        current.phase == MetadataChangePhase::Current
            && current.items.iter().any(|i| matches!(i,
                MetadataCurrentItem::Stream(s) if s.name == "c9-changes"))
            && current.items.iter().any(|i| matches!(i,
                MetadataCurrentItem::User(u) if u.username == "iggy")),
        "{current:?}"
    );
    let mut paged = Vec::new();
    let mut token = None;
    loop {
        let page = client
            .get_metadata_changes(&MetadataChangesQuery {
                start: MetadataChangeStart::Current(token.take()),
                limit: 1,
                ..MetadataChangesQuery::default()
            })
            .await
            .at("current page")?;
        ensure!(page.items.len() <= 1, "{page:?}");
        paged.extend(page.items);
        match page.current_page_token {
            Some(next) if paged.len() < 1000 => token = Some(next),
            _ => break,
        }
    }
    ensure!(
        paged == current.items,
        "paged {paged:?} != {:?}",
        current.items
    );
    client
        .delete_stream(&named("c9-changes"))
        .await
        .at("delete_stream")?;
    let deleted = client
        .get_metadata_changes(&MetadataChangesQuery {
            start: MetadataChangeStart::After(rest.next.ok_or("no next")?),
            ..MetadataChangesQuery::default()
        })
        .await
        .at("changes after the topic")?;
    ensure!(
        matches!(&deleted.records[..], [r] if matches!(&r.change,
            MetadataChange::StreamDeleted(s) if s.name == "c9-changes")),
        "{deleted:?}"
    );
    let mut foreign = cursor;
    foreign.log_id ^= 1;
    let reset = client
        .get_metadata_changes(&MetadataChangesQuery {
            start: MetadataChangeStart::After(foreign),
            ..MetadataChangesQuery::default()
        })
        .await
        .at("foreign cursor")?;
    ensure!(reset.status == MetadataChangeStatus::Reset, "{reset:?}");
    client
        .create_user(
            "c9-no-servers",
            "secret-1",
            UserStatus::Active,
            None,
            &UserCreateOptions::default(),
        )
        .await
        .at("create_user")?;
    let other = connected(addr).await?;
    other
        .login_user("c9-no-servers", "secret-1")
        .await
        .at("login")?;
    let refused = other
        .get_metadata_changes(&MetadataChangesQuery::default())
        .await;
    ensure!(
        matches!(refused, Err(IggyError::Unauthorized)),
        "without manage_servers: {refused:?}"
    );
    client
        .delete_user(&named("c9-no-servers"))
        .await
        .at("delete_user")?;
    Ok(())
}

/// A deferred poll whose caller gives up is cancelled (108): the connection answers the next
/// request at once instead of after the poll's 20 s wait.
async fn cancel_deferred_poll(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    topic(&client, "c9-cancel", 1).await?;
    let (s, t) = (named("c9-cancel"), named("t"));
    let consumer = Consumer::new(named("waiter"));
    let strategy = PollingStrategy::next();
    let waiting = client.poll_messages(
        &s,
        &t,
        0,
        &consumer,
        &strategy,
        PollOptions {
            count: 1,
            max_wait: IggyDuration::from_str("20s").unwrap(),
            min_count: 1,
            commit: CommitPolicy::Manual,
            ..PollOptions::default()
        },
    );
    let gave_up = tokio::time::timeout(std::time::Duration::from_millis(500), waiting).await;
    ensure!(gave_up.is_err(), "the poll should still wait: {gave_up:?}");
    let started = std::time::Instant::now();
    client.ping().await.at("ping after the cancel")?;
    let streams = client
        .get_streams()
        .await
        .at("get_streams after the cancel")?;
    ensure!(streams.iter().any(|s| s.name == "c9-cancel"), "{streams:?}");
    ensure!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the next requests waited {:?}: the poll was not cancelled",
        started.elapsed()
    );
    client.delete_stream(&s).await.at("delete_stream")?;
    Ok(())
}

/// `PollOptions::max_bytes`: a poll's reply (its 40-byte header, batch headers and messages)
/// stays within it, and a first message larger than it comes alone, so a read always makes
/// progress; the high-level consumer at the least limit still reads every message.
async fn poll_byte_limits(addr: SocketAddr) -> Outcome {
    use futures_util::StreamExt as _;
    let client = root(addr).await?;
    topic(&client, "c9-bytes", 2).await?;
    let (s, t) = (named("c9-bytes"), named("t"));
    let sized = |partition: u32| -> Vec<IggyMessage> {
        (0..3)
            .map(|i| {
                let mut payload = format!("p{partition}-{i}-").into_bytes();
                payload.resize(1000, b'x');
                IggyMessage::builder()
                    .payload(payload.into())
                    .build()
                    .expect("message")
            })
            .collect()
    };
    for partition in 0..2 {
        client
            .send_messages(
                &s,
                &t,
                &Partitioning::partition_id(partition),
                &mut sized(partition),
            )
            .await
            .at("send")?;
    }
    let least = u32::try_from(MIN_DEFERRED_POLL_MAX_BYTES).expect("small");
    // A message takes a 48-byte header and its 1000 bytes; a reply, a 40-byte header and a
    // 256-byte batch header.
    let two = 40 + 256 + 2 * (48 + 1000);
    let consumer = Consumer::new(named("sizer"));
    for (max_bytes, want) in [
        (least, 1),
        (two - 1, 1),
        (two, 2),
        (two + 48 + 1000, 3),
        (u32::MAX, 3),
    ] {
        let polled = client
            .poll_messages(
                &s,
                &t,
                0,
                &consumer,
                &PollingStrategy::offset(0),
                PollOptions {
                    count: 10,
                    max_bytes,
                    ..PollOptions::default()
                },
            )
            .await
            .at(&format!("poll of {max_bytes} bytes"))?;
        let offsets: Vec<u64> = polled.messages.iter().map(|m| m.header.offset).collect();
        ensure!(
            offsets == (0..want).collect::<Vec<u64>>(),
            "max_bytes {max_bytes}: offsets {offsets:?}"
        );
    }
    let mut reader = client
        .consumer("c9-byte-reader", "c9-bytes", "t")
        .at("consumer builder")?
        .partitions([0, 1])
        .poll_options(PollOptions {
            max_bytes: least,
            ..PollOptions::wait(IggyDuration::from_str("1s").unwrap())
        })
        .polling_strategy(PollingStrategy::next())
        .build();
    reader.init().await.at("consumer init")?;
    let mut seen = Vec::new();
    while seen.len() < 6 {
        let next = tokio::time::timeout(std::time::Duration::from_secs(10), reader.next())
            .await
            .map_err(|_| format!("only {} of 6 messages", seen.len()))?
            .ok_or("the consumer ended")?
            .map_err(|e| format!("consumer: {e:?}"))?;
        seen.push(String::from_utf8_lossy(&next.message.payload)[..4].to_owned());
    }
    seen.sort();
    ensure!(
        seen == ["p0-0", "p0-1", "p0-2", "p1-0", "p1-1", "p1-2"],
        "{seen:?}"
    );
    Ok(())
}

/// `StreamCreateOptions::encryption_key`: on a server with an encryption key (the harness says
/// so with `EDDY_COMPAT_SERVER_KEY=1`) a stream created with its own key reports it as the
/// stream's, with the key's fingerprint and one server key fingerprint, on every read; its
/// messages come back as sent; a key of another length is refused (`InvalidEncryptionKey`);
/// a user without read permission cannot read the stream, one with it sees the fingerprint
/// and never the key. Without a server key, a stream key is `StreamEncryptionUnavailable`.
async fn stream_encryption_keys(addr: SocketAddr) -> Outcome {
    let client = root(addr).await?;
    let key = StreamEncryptionKey::generate().at("generate a key")?;
    let fingerprint = key.fingerprint();
    let keyed = StreamCreateOptions {
        encryption_key: Some(key),
        ..StreamCreateOptions::default()
    };
    let created = client.create_stream("c9-keyed", &keyed).await;
    if std::env::var_os("EDDY_COMPAT_SERVER_KEY").is_none() {
        ensure!(
            matches!(created, Err(IggyError::StreamEncryptionUnavailable)),
            "without a server key: {created:?}"
        );
        return Ok(());
    }
    let created = created.at("create a keyed stream")?;
    let check = |what: &str,
                 source: Option<StreamEncryptionSource>,
                 shown: Option<String>,
                 keks: Vec<String>|
     -> Outcome {
        ensure!(
            source == Some(StreamEncryptionSource::Stream),
            "{what}: source {source:?}"
        );
        ensure!(
            shown.as_deref() == Some(fingerprint.as_str()),
            "{what}: fingerprint {shown:?}, the key's {fingerprint}"
        );
        ensure!(
            keks.len() == 1 && keks[0].len() == 16,
            "{what}: server key fingerprints {keks:?}"
        );
        Ok(())
    };
    check(
        "create",
        created.encryption_key_source(),
        created.encryption_key_fingerprint(),
        created.encryption_kek_fingerprints(),
    )?;
    let got = client
        .get_stream(&named("c9-keyed"))
        .await
        .at("get_stream")?
        .ok_or("the keyed stream is missing")?;
    check(
        "get_stream",
        got.encryption_key_source(),
        got.encryption_key_fingerprint(),
        got.encryption_kek_fingerprints(),
    )?;
    let listed = client.get_streams().await.at("get_streams")?;
    let listed = listed
        .iter()
        .find(|s| s.name == "c9-keyed")
        .ok_or("not listed")?;
    check(
        "get_streams",
        listed.encryption_key_source(),
        listed.encryption_key_fingerprint(),
        listed.encryption_kek_fingerprints(),
    )?;
    // No option of the stream carries the key or its sealed form.
    let names: Vec<String> = got.options.keys().map(ToString::to_string).collect();
    ensure!(
        names
            .iter()
            .all(|n| n != "encryption_key" && n != "encryption_key_wrapped"),
        "options shown: {names:?}"
    );
    client
        .create_topic(&named("c9-keyed"), "t", &TopicCreateOptions::default())
        .await
        .at("create_topic")?;
    client
        .send_messages(
            &named("c9-keyed"),
            &named("t"),
            &Partitioning::partition_id(0),
            &mut messages("secret", 3),
        )
        .await
        .at("send")?;
    let polled = client
        .poll_messages(
            &named("c9-keyed"),
            &named("t"),
            0,
            &Consumer::new(named("keyed-reader")),
            &PollingStrategy::offset(0),
            PollOptions::default(),
        )
        .await
        .at("poll")?;
    ensure!(
        payloads(&polled) == ["secret-0", "secret-1", "secret-2"],
        "{:?}",
        payloads(&polled)
    );
    // A key of another length, sent by name: refused, and no stream is made.
    for short in ["AAAA", "AAAAAAAAAAAAAAAAAAAAAA=="] {
        let refused = client
            .create_stream(
                "c9-short-key",
                &StreamCreateOptions {
                    raw: [("encryption_key".to_owned(), short.to_owned())].into(),
                    ..StreamCreateOptions::default()
                },
            )
            .await;
        ensure!(
            matches!(refused, Err(IggyError::InvalidEncryptionKey)),
            "a short key: {refused:?}"
        );
    }
    ensure!(
        client
            .get_stream(&named("c9-short-key"))
            .await
            .at("get_stream")?
            .is_none(),
        "a refused key made a stream"
    );
    // A user without permissions cannot read the stream; a reader sees only the fingerprint.
    for (name, read) in [("c9-keyless", false), ("c9-key-reader", true)] {
        let permissions = read.then(|| Permissions {
            global: GlobalPermissions {
                read_streams: true,
                ..GlobalPermissions::default()
            },
            streams: None,
        });
        client
            .create_user(
                name,
                "secret-1",
                UserStatus::Active,
                permissions,
                &UserCreateOptions::default(),
            )
            .await
            .at("create_user")?;
        let user = connected(addr).await?;
        user.login_user(name, "secret-1").await.at("login")?;
        let seen = user.get_stream(&named("c9-keyed")).await;
        if read {
            let seen = seen.at("a reader's get_stream")?.ok_or("missing")?;
            check(
                "a reader's get_stream",
                seen.encryption_key_source(),
                seen.encryption_key_fingerprint(),
                seen.encryption_kek_fingerprints(),
            )?;
        } else {
            ensure!(
                matches!(seen, Err(IggyError::Unauthorized)),
                "without permission: {seen:?}"
            );
        }
        client.delete_user(&named(name)).await.at("delete_user")?;
    }
    client
        .delete_stream(&named("c9-keyed"))
        .await
        .at("delete_stream")?;
    Ok(())
}

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
    ("external_groups", |a| Box::pin(external_groups(a))),
    ("users", |a| Box::pin(users(a))),
    ("personal_access_tokens", |a| {
        Box::pin(personal_access_tokens(a))
    }),
    ("stats_and_clients", |a| Box::pin(stats_and_clients(a))),
    ("cluster_metadata", |a| Box::pin(cluster_metadata(a))),
    ("segments", |a| Box::pin(segments(a))),
    ("high_level_consumer", |a| Box::pin(high_level_consumer(a))),
    ("metadata_changes", |a| Box::pin(metadata_changes(a))),
    ("cancel_deferred_poll", |a| {
        Box::pin(cancel_deferred_poll(a))
    }),
    ("poll_byte_limits", |a| Box::pin(poll_byte_limits(a))),
    ("stream_encryption_keys", |a| {
        Box::pin(stream_encryption_keys(a))
    }),
];

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(addr) = args.next().and_then(|a| a.parse::<SocketAddr>().ok()) else {
        eprintln!("usage: eddy-compat-edge9 STREAM_ADDR [SCENARIO...]");
        return std::process::ExitCode::from(2);
    };
    let only: Vec<String> = args.collect();
    let addr = if std::env::var_os("EDDY_COMPAT_TRACE").is_some() {
        trace::proxy(addr).await
    } else {
        addr
    };
    let mut results = BTreeMap::new();
    for (name, scenario) in SCENARIOS {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let outcome = tokio::time::timeout(std::time::Duration::from_mins(1), scenario(addr))
            .await
            .unwrap_or_else(|_| Err("timed out after 60 s".to_owned()));
        match &outcome {
            Ok(()) => println!("ok {name}"),
            Err(why) => println!("FAIL {name}: {why}"),
        }
        results.insert(*name, outcome.is_ok());
    }
    let passed = results.values().filter(|ok| **ok).count();
    let failed = results.len() - passed;
    println!("edge9: {passed} passed, {failed} failed");
    if failed == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
