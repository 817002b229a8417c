//! The checker: what every node holds against what the clients were told.
//!
//! - every acknowledged batch is in its partition exactly once, whole and contiguous;
//! - a batch whose send had an unknown outcome is there at most once (whole or not at all);
//! - nothing is there that no client sent;
//! - acknowledgement order: a batch acknowledged before another's send began sits at lower
//!   offsets (per partition);
//! - offsets are contiguous from 0;
//! - every node holds the same messages at the same offsets (followers serve reads);
//! - consumer offsets: every node reports the last acknowledged value of each consumer, or a
//!   value whose store had an unknown outcome (it may land late), never an older acknowledged
//!   one and never nothing.
//!
//! - events (`events::check`): on every node each event writer's aggregate holds versions
//!   1..=n with client_seq = version, every acknowledged event, n between the last event
//!   known written and one more (the attempt possibly in flight), and all nodes agree.
//!
//! Nodes are read with eddy's own client (`eddy-client`), which stays on the node it dialled:
//! the SDK would move to the leader.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use eddy_client::stream::StreamClient as NodeClient;
use eddy_client::transport::ConnectOptions;
use eddy_codec::stream::{Consumer, Identifier, PollingStrategy};

use super::workload::{parse, History, STREAM, TOPIC};

/// One partition as a node holds it: (offset, payload).
pub type Log = Vec<(u64, Vec<u8>)>;

/// What one node holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub partitions: Vec<Log>,
    /// Stored offset of consumer `p + 1` on partition `p`.
    pub offsets: Vec<Option<u64>>,
}

fn ids() -> (Identifier, Identifier) {
    (
        Identifier::named(STREAM).expect("a name"),
        Identifier::named(TOPIC).expect("a name"),
    )
}

/// Reads everything node `addr` holds.
pub async fn read_node(addr: SocketAddr, partitions: u32) -> Result<NodeView, String> {
    let options = ConnectOptions {
        connect_timeout: Duration::from_secs(3),
        request_timeout: Duration::from_secs(10),
        ..ConnectOptions::default()
    };
    let mut client = NodeClient::connect(&addr.to_string(), &options)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    client
        .login_user("iggy", "iggy")
        .await
        .map_err(|e| format!("{addr}: login: {e}"))?;
    let (stream, topic) = ids();
    let reader = Consumer::new(Identifier::numeric(999));
    let mut view = NodeView {
        partitions: Vec::new(),
        offsets: Vec::new(),
    };
    for p in 0..partitions {
        let mut log = Log::new();
        loop {
            let reply = client
                .poll_messages(
                    &stream,
                    &topic,
                    Some(p),
                    &reader,
                    PollingStrategy::Offset(log.len() as u64),
                    1_000,
                    false,
                )
                .await
                .map_err(|e| format!("{addr}: poll partition {p}: {e}"))?;
            let before = log.len();
            log.extend(reply.messages().map(|m| (m.offset, m.payload.to_vec())));
            if log.len() == before {
                break;
            }
        }
        view.partitions.push(log);
        let consumer = Consumer::new(Identifier::numeric(p + 1));
        let stored = client
            .offset(&consumer, &stream, &topic, Some(p))
            .await
            .map_err(|e| format!("{addr}: consumer offset {p}: {e}"))?;
        view.offsets.push(stored.map(|o| o.stored_offset));
    }
    Ok(view)
}

/// Reads every node until they all agree (followers may apply a moment late), up to
/// `within`; returns the views (the last ones read when they never agreed).
pub async fn read_all(
    addrs: &[SocketAddr],
    partitions: u32,
    within: Duration,
) -> Result<Vec<NodeView>, String> {
    let deadline = Instant::now() + within;
    loop {
        let mut views = Vec::new();
        let mut failure = None;
        for addr in addrs {
            match read_node(*addr, partitions).await {
                Ok(v) => views.push(v),
                Err(e) => failure = Some(e),
            }
        }
        let agree = failure.is_none() && views.windows(2).all(|w| w[0] == w[1]);
        if agree {
            return Ok(views);
        }
        if Instant::now() >= deadline {
            return match failure {
                Some(e) => Err(e),
                None => Ok(views),
            };
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Where one message of a batch sits: (partition, position, index in its batch, batch size).
type Place = (u32, usize, u32, u32);

/// Figures of a passed check.
#[derive(Debug, Default)]
pub struct Verdict {
    pub messages: usize,
    pub acked_batches: usize,
    pub unknown_batches: usize,
    pub unknown_present: usize,
    /// Event writes acknowledged, attempts with an unknown outcome, events stored.
    pub events_acked: usize,
    pub events_unknown: u64,
    pub events_stored: usize,
    pub failures: Vec<String>,
}

/// Checks `views` (one per node) against `history`.
pub fn check(history: &History, views: &[NodeView]) -> Verdict {
    let mut v = Verdict::default();
    let fail = |v: &mut Verdict, msg: String| {
        if v.failures.len() < 50 {
            v.failures.push(msg);
        }
    };
    // Node agreement, partition by partition.
    let reference = &views[0];
    for (n, view) in views.iter().enumerate().skip(1) {
        for (p, (a, b)) in reference
            .partitions
            .iter()
            .zip(&view.partitions)
            .enumerate()
        {
            if a != b {
                let first = a
                    .iter()
                    .zip(b)
                    .position(|(x, y)| x != y)
                    .unwrap_or(a.len().min(b.len()));
                fail(
                    &mut v,
                    format!(
                        "node {} and node {} disagree on partition {p}: {} vs {} messages, first difference at position {first}",
                        1, n + 1, a.len(), b.len()
                    ),
                );
            }
        }
    }
    let attempts: BTreeMap<(u32, u64), &super::workload::Attempt> = history
        .sends
        .iter()
        .map(|a| ((a.producer, a.seq), a))
        .collect();
    v.acked_batches = history.sends.iter().filter(|a| a.acked).count();
    v.unknown_batches = history.sends.len() - v.acked_batches;
    // Where each batch sits: (producer, seq) -> (partition, first position, messages seen).
    let mut found: BTreeMap<(u32, u64), Vec<Place>> = BTreeMap::new();
    for (p, log) in reference.partitions.iter().enumerate() {
        let p = u32::try_from(p).expect("few partitions");
        v.messages += log.len();
        for (pos, (offset, payload)) in log.iter().enumerate() {
            if *offset != pos as u64 {
                fail(
                    &mut v,
                    format!("partition {p}: offset {offset} at position {pos} (not contiguous)"),
                );
            }
            let Some((producer, seq, index, count)) = parse(payload) else {
                fail(
                    &mut v,
                    format!(
                        "partition {p} offset {offset}: foreign payload {:?}",
                        String::from_utf8_lossy(payload)
                    ),
                );
                continue;
            };
            found
                .entry((producer, seq))
                .or_default()
                .push((p, pos, index, count));
        }
    }
    for (&(producer, seq), places) in &found {
        let name = format!("batch {producer}/{seq}");
        let Some(attempt) = attempts.get(&(producer, seq)) else {
            fail(&mut v, format!("{name} is stored but was never sent"));
            continue;
        };
        if !attempt.acked {
            v.unknown_present += 1;
        }
        let count = attempt.count as usize;
        if places.len() != count {
            let when = history.origin.map_or_else(String::new, |origin| {
                format!(
                    " (sent {:.1}s into the run, answered {:.1}s later)",
                    attempt
                        .start
                        .saturating_duration_since(origin)
                        .as_secs_f64(),
                    attempt
                        .end
                        .saturating_duration_since(attempt.start)
                        .as_secs_f64()
                )
            });
            fail(
                &mut v,
                format!(
                    "{name} ({} outcome, {count} messages) is stored as {} messages{when}: {:?}",
                    if attempt.acked {
                        "acknowledged"
                    } else {
                        "unknown"
                    },
                    places.len(),
                    places
                ),
            );
            continue;
        }
        let whole = places.iter().enumerate().all(|(i, &(p, pos, index, _))| {
            p == attempt.partition && pos == places[0].1 + i && index as usize == i
        });
        if !whole {
            fail(
                &mut v,
                format!("{name} is not stored whole and in place: {places:?}"),
            );
        }
    }
    for a in history.sends.iter().filter(|a| a.acked) {
        if !found.contains_key(&(a.producer, a.seq)) {
            fail(
                &mut v,
                format!(
                    "acknowledged batch {}/{} ({} messages, partition {}) is lost",
                    a.producer, a.seq, a.count, a.partition
                ),
            );
        }
    }
    // Acknowledgement order: walking a partition in offset order, no acknowledged batch may
    // have been acknowledged before a batch at a lower offset (whatever its outcome) was even
    // sent.
    for (p, log) in reference.partitions.iter().enumerate() {
        let mut latest_start: Option<(Instant, (u32, u64))> = None;
        let mut seen = std::collections::BTreeSet::new();
        for (_, payload) in log {
            let Some((producer, seq, _, _)) = parse(payload) else {
                continue;
            };
            if !seen.insert((producer, seq)) {
                continue;
            }
            let Some(a) = attempts.get(&(producer, seq)) else {
                continue;
            };
            if let Some((start, earlier)) = latest_start {
                if a.acked && a.end < start {
                    fail(
                        &mut v,
                        format!(
                            "partition {p}: batch {producer}/{seq} was acknowledged before batch {}/{} was sent, yet sits after it",
                            earlier.0, earlier.1
                        ),
                    );
                }
            }
            if latest_start.is_none_or(|(s, _)| a.start > s) {
                latest_start = Some((a.start, (producer, seq)));
            }
        }
    }
    // Consumer offsets.
    for (p, _) in reference.partitions.iter().enumerate() {
        let p32 = u32::try_from(p).expect("few partitions");
        let stores: Vec<_> = history
            .offsets
            .iter()
            .filter(|o| o.partition == p32)
            .collect();
        let Some(last_acked) = stores.iter().rev().find(|o| o.acked).map(|o| o.value) else {
            continue;
        };
        for (n, view) in views.iter().enumerate() {
            let got = view.offsets.get(p).copied().flatten();
            let fine = got == Some(last_acked)
                || got.is_some_and(|g| stores.iter().any(|o| !o.acked && o.value == g));
            if !fine {
                fail(
                    &mut v,
                    format!(
                        "node {}: consumer {} on partition {p} holds offset {got:?}, last acknowledged {last_acked}",
                        n + 1,
                        p + 1
                    ),
                );
            }
        }
    }
    v
}

/// The check of the Celeriant event load (`workload::events`).
pub mod events {
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    use celeriant_client_tokio::{CeleriantClient, ClientError, ReadError, ServerError};
    use celeriant_msg::request::read_filters::ReadFilters;
    use celeriant_msg::request::requests::ReadRequest;

    use super::super::workload::events::{key, Told};

    /// One aggregate as a node holds it: (version, client_seq) per event.
    pub type Aggregate = Vec<(u64, u64)>;

    /// Reads writer `writer`'s aggregate from the node at `addr` (followers serve reads).
    pub async fn read_aggregate(addr: SocketAddr, writer: u32) -> Result<Aggregate, String> {
        let read = async {
            let mut client = CeleriantClient::connect(&addr.to_string())
                .await
                .map_err(|e| format!("{addr}: connect: {e}"))?;
            let mut found = Aggregate::new();
            let mut from = 1;
            loop {
                let page = match client
                    .read(ReadRequest {
                        correlation_id: None,
                        aggregate_key: key(writer),
                        filters: ReadFilters::new(from),
                    })
                    .await
                {
                    Ok(page) => page,
                    Err(ClientError::Server(ServerError::Read {
                        kind: ReadError::AggregateNotExists,
                        ..
                    })) if from == 1 => return Ok(found),
                    Err(e) => return Err(format!("{addr}: read writer {writer}: {e}")),
                };
                for b in &page.event_batches {
                    for e in &b.events {
                        found.push((b.aggregate_version, e.client_seq));
                    }
                }
                match page.next_aggregate_version {
                    Some(next) if next > from && !page.event_batches.is_empty() => from = next,
                    _ => return Ok(found),
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(15), read)
            .await
            .unwrap_or_else(|_| Err(format!("{addr}: read writer {writer}: timed out")))
    }

    /// Every writer's aggregate on every node (`[node][writer]`, writers in `told` order),
    /// read until the nodes agree, up to `within`.
    pub async fn read_all(
        addrs: &[SocketAddr],
        told: &[Told],
        within: Duration,
    ) -> Result<Vec<Vec<Aggregate>>, String> {
        let deadline = Instant::now() + within;
        loop {
            let mut views = Vec::new();
            let mut failure = None;
            for addr in addrs {
                let mut view = Vec::new();
                for t in told {
                    match read_aggregate(*addr, t.writer).await {
                        Ok(a) => view.push(a),
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
                views.push(view);
            }
            if failure.is_none() && views.windows(2).all(|w| w[0] == w[1]) {
                return Ok(views);
            }
            if Instant::now() >= deadline {
                return match failure {
                    Some(e) => Err(e),
                    None => Ok(views),
                };
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Figures of the event check.
    #[derive(Debug, Default)]
    pub struct EventVerdict {
        pub acked: usize,
        pub unknown: u64,
        /// Events stored (on the first node).
        pub stored: usize,
        pub failures: Vec<String>,
    }

    /// Checks `views` (`[node][writer]`) against what each writer was told.
    pub fn check(told: &[Told], views: &[Vec<Aggregate>]) -> EventVerdict {
        let mut v = EventVerdict::default();
        let fail = |v: &mut EventVerdict, msg: String| {
            if v.failures.len() < 50 {
                v.failures.push(msg);
            }
        };
        for (w, t) in told.iter().enumerate() {
            v.acked += t.acked.len();
            v.unknown += t.unknown;
            let name = format!("event writer {}", t.writer);
            for wrong in &t.wrong_acks {
                fail(&mut v, format!("{name}: {wrong}"));
            }
            for (n, view) in views.iter().enumerate() {
                let node = n + 1;
                let Some(agg) = view.get(w) else {
                    fail(&mut v, format!("node {node}: {name}'s aggregate not read"));
                    continue;
                };
                if n == 0 {
                    v.stored += agg.len();
                }
                let len = agg.len() as u64;
                let expected: Aggregate = (1..=len).map(|s| (s, s)).collect();
                if *agg != expected {
                    let first = agg
                        .iter()
                        .zip(&expected)
                        .position(|(a, b)| a != b)
                        .unwrap_or(0);
                    fail(
                        &mut v,
                        format!(
                            "node {node}: {name}'s aggregate is not versions 1..={len} with client_seq = version: (version, client_seq) {:?} at position {first}",
                            agg.get(first)
                        ),
                    );
                }
                if let Some(lost) = t.acked.iter().find(|&&s| !agg.iter().any(|e| e.1 == s)) {
                    fail(
                        &mut v,
                        format!("node {node}: {name}'s acknowledged event {lost} is lost (holds {len} events)"),
                    );
                }
                if len < t.last_written || len > t.last_written + 1 {
                    fail(
                        &mut v,
                        format!(
                            "node {node}: {name} holds {len} events, last known written {} (at most one more may have landed)",
                            t.last_written
                        ),
                    );
                }
                if n > 0 && view.get(w) != views[0].get(w) {
                    fail(
                        &mut v,
                        format!(
                            "node 1 and node {node} disagree on {name}'s aggregate: {} vs {len} events",
                            views[0].get(w).map_or(0, Vec::len)
                        ),
                    );
                }
            }
        }
        v
    }
}
