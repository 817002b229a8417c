//! Watch: runtime-agnostic delivery of committed changes to subscribers.
//!
//! A subscriber is a [`WatchSink`] registered on one shard with a [`WatchFilter`]. The shard's
//! writer thread calls [`WatchSink::deliver`] once per group commit with the notifications of
//! that group that match the filter, **after** the records are durable and visible and before
//! their writers are acknowledged, in log order (within one group: creates, then writes, then
//! deletes, then trims, as upstream). A sink must not block: the server's sink pushes into its
//! own bounded queue (a tokio channel, say) and returns `false` when the subscriber is gone or
//! too far behind, which removes it. [`channel_sink`] is a ready-made sink over a bounded
//! `std::sync::mpsc` channel.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use eddy_log::lock;

use crate::error::Refusal;
use crate::types::{WatchEvent, WatchOperation};

/// Default cap on subscribers per shard (`--max-watch-subscribers`).
pub const DEFAULT_MAX_SUBSCRIBERS: usize = 16_384;

/// Receives committed changes. Called on a storage writer thread: never block in it.
pub trait WatchSink: Send + Sync + fmt::Debug {
    /// Delivers the matching notifications of one commit (never empty). Return `false` to be
    /// removed (gone, or too far behind).
    fn deliver(&self, events: &[WatchEvent]) -> bool;
}

/// Which changes a subscriber wants. The sets are ANDed; inside a set any member matches;
/// `None` does not restrict; an empty set matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchFilter {
    /// Org ids.
    pub orgs: Option<HashSet<u128>>,
    /// Aggregate type ids.
    pub aggregate_types: Option<HashSet<u128>>,
    /// Aggregate ids.
    pub aggregates: Option<HashSet<u128>>,
    /// Operation codes ([`WatchOperation::code`]).
    pub operations: Option<HashSet<u8>>,
}

impl WatchFilter {
    /// True when `event` passes the filter.
    pub fn matches(&self, event: &WatchEvent) -> bool {
        let inside =
            |set: &Option<HashSet<u128>>, v: u128| set.as_ref().is_none_or(|s| s.contains(&v));
        inside(&self.orgs, event.key.org_id)
            && inside(&self.aggregate_types, event.key.aggregate_type_id)
            && inside(&self.aggregates, event.key.aggregate_id)
            && self
                .operations
                .as_ref()
                .is_none_or(|s| s.contains(&event.operation.code()))
    }
}

/// Identifies a subscription (returned by `subscribe`, given back to `unsubscribe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriptionId {
    /// The shard it watches.
    pub shard: u32,
    /// Unique within the store.
    pub id: u64,
}

/// A sink over a bounded `std::sync::mpsc` channel: one message per commit; a full channel
/// or a dropped receiver removes the subscriber.
#[derive(Debug)]
pub struct ChannelSink {
    tx: SyncSender<Vec<WatchEvent>>,
}

impl WatchSink for ChannelSink {
    fn deliver(&self, events: &[WatchEvent]) -> bool {
        match self.tx.try_send(events.to_vec()) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }
}

/// A [`ChannelSink`] holding at most `capacity` undelivered commits, and its receiver.
pub fn channel_sink(capacity: usize) -> (Arc<ChannelSink>, Receiver<Vec<WatchEvent>>) {
    let (tx, rx) = sync_channel(capacity.max(1));
    (Arc::new(ChannelSink { tx }), rx)
}

static NEXT_SUBSCRIPTION: AtomicU64 = AtomicU64::new(1);

struct Subscriber {
    id: u64,
    filter: WatchFilter,
    sink: Arc<dyn WatchSink>,
}

/// The subscribers of one shard.
pub(crate) struct Watchers {
    max: usize,
    subs: Mutex<Vec<Subscriber>>,
}

impl fmt::Debug for Watchers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watchers")
            .field("max", &self.max)
            .field("active", &self.count())
            .finish_non_exhaustive()
    }
}

fn rank(op: WatchOperation) -> u8 {
    match op {
        WatchOperation::Create => 0,
        WatchOperation::Write => 1,
        WatchOperation::Delete => 2,
        WatchOperation::TrimStart => 3,
    }
}

impl Watchers {
    pub(crate) fn new(max: usize) -> Self {
        Watchers {
            max,
            subs: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn count(&self) -> usize {
        lock(&self.subs).len()
    }

    pub(crate) fn subscribe(
        &self,
        shard: u32,
        filter: WatchFilter,
        sink: Arc<dyn WatchSink>,
    ) -> Result<SubscriptionId, Refusal> {
        let mut subs = lock(&self.subs);
        if subs.len() >= self.max {
            return Err(Refusal::TooManySubscribers {
                active: subs.len(),
                max: self.max,
            });
        }
        let id = NEXT_SUBSCRIPTION.fetch_add(1, Ordering::Relaxed);
        subs.push(Subscriber { id, filter, sink });
        Ok(SubscriptionId { shard, id })
    }

    pub(crate) fn unsubscribe(&self, id: u64) -> bool {
        let mut subs = lock(&self.subs);
        let before = subs.len();
        subs.retain(|s| s.id != id);
        subs.len() != before
    }

    /// Delivers one commit's notifications (in record order, added to the vector by `fill`,
    /// which runs only when there are subscribers) to every matching subscriber.
    pub(crate) fn publish_with(&self, fill: impl FnOnce(&mut Vec<WatchEvent>)) {
        let mut subs = lock(&self.subs);
        if subs.is_empty() {
            return;
        }
        let mut events = Vec::new();
        fill(&mut events);
        if events.is_empty() {
            return;
        }
        events.sort_by_key(|e| rank(e.operation)); // stable: record order within a kind
        let mut matching = Vec::with_capacity(events.len());
        subs.retain(|s| {
            matching.clear();
            matching.extend(events.iter().filter(|e| s.filter.matches(e)).copied());
            matching.is_empty() || s.sink.deliver(&matching)
        });
    }
}
