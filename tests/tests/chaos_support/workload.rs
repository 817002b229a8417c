//! The load of a chaos run: published-SDK producers on a few partitions and one consumer
//! offset writer per partition, recording what each was told.
//!
//! A producer sends batches of 1-4 messages whose payloads name the batch (`chaos <producer>
//! <seq> <index> <count>`); every attempt is a new batch (never resent under the same name),
//! so the checker can tell a duplicate from a retry. A send that returns `Ok` is acknowledged;
//! one that errs or times out has an unknown outcome, and the producer then drops its client
//! and logs in again through the next node, as the SDK's own failover would (the SDK follows
//! the leader after login, and replays requests the server said it did not admit).

use std::net::SocketAddr;
use std::str::FromStr as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iggy::prelude::*;

use super::rng::Rng;

pub const STREAM: &str = "chaos";
pub const TOPIC: &str = "t";
/// Producer number of the final progress batches.
pub const FINAL_PRODUCER: u32 = 999;

/// One send attempt.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub producer: u32,
    pub seq: u64,
    pub partition: u32,
    pub count: u32,
    pub start: Instant,
    pub end: Instant,
    pub acked: bool,
}

/// One consumer-offset store attempt.
#[derive(Debug, Clone)]
pub struct OffsetAttempt {
    pub partition: u32,
    pub value: u64,
    pub acked: bool,
}

/// What the clients were told.
#[derive(Debug, Default)]
pub struct History {
    pub sends: Vec<Attempt>,
    pub offsets: Vec<OffsetAttempt>,
    /// The run's start, which the checker's findings name times from (`None`: no times).
    pub origin: Option<Instant>,
}

/// Shared state of the load tasks.
#[derive(Debug)]
pub struct Load {
    pub history: Mutex<History>,
    /// Acknowledged messages per partition (a lower bound of its length).
    acked_messages: Vec<AtomicU64>,
    stop: AtomicBool,
    /// The members' stream addresses (a membership change adds and drops some).
    addrs: std::sync::RwLock<Vec<SocketAddr>>,
}

pub fn stream_id() -> Identifier {
    Identifier::from_str(STREAM).expect("a name")
}

pub fn topic_id() -> Identifier {
    Identifier::from_str(TOPIC).expect("a name")
}

/// An SDK client logged in through one of `addrs` (trying each once from `*next`).
pub async fn connect(addrs: &[SocketAddr], next: &mut usize) -> Option<IggyClient> {
    for _ in 0..addrs.len() {
        let addr = addrs[*next % addrs.len()];
        *next += 1;
        let Ok(client) = IggyClient::builder()
            .with_tcp()
            .with_server_address(addr.to_string())
            .with_reconnection_max_retries(Some(0))
            .build()
        else {
            continue;
        };
        let login = async {
            client.connect().await?;
            client.login_user("iggy", "iggy").await?;
            Ok::<_, IggyError>(())
        };
        if matches!(
            tokio::time::timeout(Duration::from_secs(5), login).await,
            Ok(Ok(()))
        ) {
            return Some(client);
        }
    }
    None
}

/// Message payload naming its batch.
pub fn payload(producer: u32, seq: u64, index: u32, count: u32) -> String {
    format!("chaos {producer} {seq} {index} {count} {}", "x".repeat(48))
}

/// Parses [`payload`]: (producer, seq, index, count).
pub fn parse(payload: &[u8]) -> Option<(u32, u64, u32, u32)> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut it = text.split(' ');
    if it.next()? != "chaos" {
        return None;
    }
    Some((
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    ))
}

fn batch(producer: u32, seq: u64, count: u32) -> Vec<IggyMessage> {
    (0..count)
        .map(|i| {
            IggyMessage::builder()
                .payload(payload(producer, seq, i, count).into_bytes().into())
                .build()
                .expect("message")
        })
        .collect()
}

/// One send through `client`, recorded in `history`; returns whether it was acknowledged.
async fn send_once(
    client: &IggyClient,
    history: &Mutex<History>,
    producer: u32,
    seq: u64,
    partition: u32,
    count: u32,
) -> bool {
    let mut messages = batch(producer, seq, count);
    let start = Instant::now();
    let sent = tokio::time::timeout(
        Duration::from_secs(20),
        client.send_messages(
            &stream_id(),
            &topic_id(),
            &Partitioning::partition_id(partition),
            &mut messages,
        ),
    )
    .await;
    let acked = matches!(sent, Ok(Ok(_)));
    history.lock().unwrap().sends.push(Attempt {
        producer,
        seq,
        partition,
        count,
        start,
        end: Instant::now(),
        acked,
    });
    acked
}

impl Load {
    pub fn new(addrs: Vec<SocketAddr>, partitions: u32) -> Arc<Self> {
        Arc::new(Self {
            history: Mutex::default(),
            acked_messages: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
            stop: AtomicBool::new(false),
            addrs: std::sync::RwLock::new(addrs),
        })
    }

    /// The members to connect through from now on (after a membership change).
    pub fn set_addrs(&self, addrs: Vec<SocketAddr>) {
        *self.addrs.write().unwrap() = addrs;
    }

    fn addrs(&self) -> Vec<SocketAddr> {
        self.addrs.read().unwrap().clone()
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Creates the stream and its topic (retried until the cluster answers, within `within`).
    pub async fn setup(&self, partitions: u32, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let mut next = 0;
        let mut last = String::new();
        while Instant::now() < deadline {
            let Some(client) = connect(&self.addrs(), &mut next).await else {
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            };
            let made = async {
                if client.get_stream(&stream_id()).await?.is_none() {
                    client.create_stream(STREAM).await?;
                }
                if client.get_topic(&stream_id(), &topic_id()).await?.is_none() {
                    client
                        .create_topic(
                            &stream_id(),
                            TOPIC,
                            &TopicCreateOptions {
                                partitions_count: Some(partitions),
                                ..TopicCreateOptions::default()
                            },
                        )
                        .await?;
                }
                Ok::<_, IggyError>(())
            };
            match tokio::time::timeout(Duration::from_secs(10), made).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => "timed out".clone_into(&mut last),
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        Err(format!("could not create the stream and topic: {last}"))
    }

    /// A producer: batches to `partition` until stopped or `max_batches` attempts.
    pub async fn producer(self: Arc<Self>, producer: u32, partition: u32, max_batches: u64) {
        let mut rng = Rng::new(u64::from(producer) * 7919);
        let mut next = usize::try_from(producer).expect("small");
        let mut client = None;
        let mut seq = 0;
        while !self.stopped() && seq < max_batches {
            if client.is_none() {
                client = connect(&self.addrs(), &mut next).await;
                if client.is_none() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            }
            seq += 1;
            let count = u32::try_from(rng.between(1, 4)).expect("small");
            let c = client.as_ref().expect("connected");
            if send_once(c, &self.history, producer, seq, partition, count).await {
                self.acked_messages[partition as usize]
                    .fetch_add(u64::from(count), Ordering::SeqCst);
            } else {
                client = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_millis(rng.between(0, 20))).await;
        }
    }

    /// Stores consumer `partition + 1`'s offset on `partition`, growing, until stopped.
    pub async fn offsets(self: Arc<Self>, partition: u32) {
        let mut next = usize::try_from(partition).expect("small") + 1;
        let mut client = None;
        let mut last = None;
        let consumer = Consumer::new(Identifier::numeric(partition + 1).expect("an id"));
        while !self.stopped() {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let acked = self.acked_messages[partition as usize].load(Ordering::SeqCst);
            let Some(value) = acked.checked_sub(1) else {
                continue;
            };
            if last.is_some_and(|l| value <= l) {
                continue;
            }
            if client.is_none() {
                client = connect(&self.addrs(), &mut next).await;
            }
            let Some(c) = client.as_ref() else {
                continue;
            };
            let stored = tokio::time::timeout(
                Duration::from_secs(20),
                c.store_consumer_offset(
                    &consumer,
                    &stream_id(),
                    &topic_id(),
                    Some(partition),
                    value,
                ),
            )
            .await;
            let acked = matches!(stored, Ok(Ok(())));
            self.history.lock().unwrap().offsets.push(OffsetAttempt {
                partition,
                value,
                acked,
            });
            last = Some(value);
            if !acked {
                client = None;
            }
        }
    }

    /// After the faults: one acknowledged batch per partition, each within `within`; returns
    /// the longest wait, or which partition made no progress.
    pub async fn progress(&self, partitions: u32, within: Duration) -> Result<Duration, String> {
        let mut next = 0;
        let mut seq = 0;
        let mut longest = Duration::ZERO;
        for partition in 0..partitions {
            let started = Instant::now();
            loop {
                if started.elapsed() > within {
                    return Err(format!(
                        "no write to partition {partition} succeeded within {within:?} of the heal"
                    ));
                }
                let Some(client) = connect(&self.addrs(), &mut next).await else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                };
                seq += 1;
                if send_once(&client, &self.history, FINAL_PRODUCER, seq, partition, 1).await {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            longest = longest.max(started.elapsed());
        }
        Ok(longest)
    }
}

/// The Celeriant event load: OCC writers, each on an aggregate of its own, through a
/// [`CeleriantPool`] that knows every node (followers redirect writes to the leader).
///
/// Writer `w` writes event `seq` (client_seq = seq) expecting version `seq - 1`, with the
/// client's idempotency key. An error is an unknown outcome and the same event is retried; a
/// retry refused because the version or the client_seq is already `seq` means the earlier
/// attempt landed. So the aggregate must end holding versions 1..=n with client_seq = version,
/// `last_written <= n <= last_written + 1` (the one attempt possibly in flight at the end).
pub mod events {
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use celeriant_client_tokio::{
        CeleriantPool, ClientError, PoolOptions, ServerError, WriteEventsOptions,
    };
    use celeriant_wal::aggregate_key::AggregateKey;
    use celeriant_wal::datablocks::datablock_aggregate_event::DatablockAggregateEvent;

    /// What writer `writer` was told.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct Told {
        pub writer: u32,
        /// Acknowledged seqs (= versions), ascending.
        pub acked: Vec<u64>,
        /// The last seq known written: acknowledged, or found landed by a refused retry.
        pub last_written: u64,
        /// Attempts that erred or timed out (outcome unknown when they happened).
        pub unknown: u64,
        /// Acknowledgements naming another version than the one written.
        pub wrong_acks: Vec<String>,
    }

    /// A pool seeded with `addrs` (every member's Celeriant address).
    fn pool(addrs: &[SocketAddr]) -> CeleriantPool {
        let addrs: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        CeleriantPool::new(
            PoolOptions::new(addrs[0].clone())
                .with_seed_addresses(addrs)
                .with_max_leader_retries(6)
                .with_request_timeout(Duration::from_secs(3)),
        )
    }

    /// Aggregate of writer `w`.
    pub fn key(writer: u32) -> AggregateKey {
        AggregateKey::new(17, 1, u128::from(writer) + 1)
    }

    fn event(writer: u32, seq: u64) -> DatablockAggregateEvent {
        let mut e = celeriant_client_tokio::json_event(
            1,
            &serde_json::json!({"chaos": writer, "seq": seq}),
        )
        .expect("event encodes");
        e.client_seq = seq;
        e
    }

    /// Whether a refusal of writing `seq` says an earlier attempt of it landed.
    fn landed(e: &ClientError, seq: u64) -> bool {
        match e {
            ClientError::Server(ServerError::Write { error_message, .. }) => {
                error_message.contains(&format!("\"current_aggregate_version\":{seq}"))
                    || error_message.contains(&format!("\"last_client_seq\":{seq}"))
            }
            _ => false,
        }
    }

    /// The shared state of the event writers.
    pub struct EventLoad {
        /// Seeded with the members' addresses; replaced when they change.
        pool: std::sync::RwLock<Arc<CeleriantPool>>,
        stop: AtomicBool,
        pub told: Mutex<Vec<Told>>,
    }

    impl EventLoad {
        /// `addrs`: every node's Celeriant client address.
        pub fn new(addrs: &[SocketAddr]) -> Arc<Self> {
            Arc::new(Self {
                pool: std::sync::RwLock::new(Arc::new(pool(addrs))),
                stop: AtomicBool::new(false),
                told: Mutex::default(),
            })
        }

        /// The members to write through from now on (after a membership change).
        pub fn set_addrs(&self, addrs: &[SocketAddr]) {
            *self.pool.write().unwrap() = Arc::new(pool(addrs));
        }

        pub fn stop(&self) {
            self.stop.store(true, Ordering::SeqCst);
        }

        /// Writer `writer`: one event per request until stopped; records what it was told.
        pub async fn writer(self: Arc<Self>, writer: u32) {
            let mut told = Told {
                writer,
                ..Told::default()
            };
            let mut seq = 1;
            while !self.stop.load(Ordering::SeqCst) {
                let pool = Arc::clone(&self.pool.read().unwrap());
                let write = pool.write_events_with(
                    key(writer),
                    vec![event(writer, seq)],
                    u128::from(writer) + 500,
                    WriteEventsOptions {
                        allow_create: true,
                        expected_version: Some(seq - 1),
                        enforce_client_idempotency: true,
                    },
                );
                match tokio::time::timeout(Duration::from_secs(20), write).await {
                    Ok(Ok(resp)) => {
                        if resp.max_aggregate_version != Some(seq) {
                            told.wrong_acks.push(format!(
                                "seq {seq} acknowledged as version {:?}",
                                resp.max_aggregate_version
                            ));
                        }
                        told.acked.push(seq);
                        told.last_written = seq;
                        seq += 1;
                    }
                    Ok(Err(e)) if landed(&e, seq) => {
                        told.last_written = seq;
                        seq += 1;
                    }
                    Ok(Err(_)) | Err(_) => {
                        told.unknown += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            self.told.lock().unwrap().push(told);
        }
    }
}
