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
}

/// Shared state of the load tasks.
#[derive(Debug)]
pub struct Load {
    pub history: Mutex<History>,
    /// Acknowledged messages per partition (a lower bound of its length).
    acked_messages: Vec<AtomicU64>,
    stop: AtomicBool,
    addrs: Vec<SocketAddr>,
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
            addrs,
        })
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
            let Some(client) = connect(&self.addrs, &mut next).await else {
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
                client = connect(&self.addrs, &mut next).await;
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
                client = connect(&self.addrs, &mut next).await;
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
                let Some(client) = connect(&self.addrs, &mut next).await else {
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
