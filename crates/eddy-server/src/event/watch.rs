//! Watch: the bridge from the store's runtime-agnostic notifications to a tokio connection,
//! and per-subscriber coalescing (§4.8).
//!
//! The store calls [`ChannelSink::deliver`] on its writer thread once per group commit, after
//! the records are durable and visible, in log order. The sink never blocks: it counts the
//! notifications queued for its connection and refuses (which unsubscribes it) once more than
//! [`MAX_PENDING_NOTIFICATIONS`] are waiting; the connection then closes without an error
//! frame, as upstream does for a subscriber that fell behind.
//!
//! Coalescing merges pending notifications by (aggregate, operation): Write ranges widen,
//! TrimStart keeps the newest floor, the others de-duplicate. A range is never lost.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eddy_codec::event::WatchResponseEvent;
use eddy_event_store::{EventStore, SubscriptionId, WatchEvent, WatchOperation, WatchSink};
use tokio::sync::mpsc;

/// Notifications a subscriber may have queued before it is dropped.
pub const MAX_PENDING_NOTIFICATIONS: usize = 10_000;
/// An empty `WatchResponse` is sent after this long without any other frame.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// The sink registered with the store for one watch connection.
#[derive(Debug)]
pub struct ChannelSink {
    tx: mpsc::UnboundedSender<Vec<WatchEvent>>,
    queued: Arc<AtomicUsize>,
}

impl WatchSink for ChannelSink {
    fn deliver(&self, events: &[WatchEvent]) -> bool {
        let before = self.queued.fetch_add(events.len(), Ordering::AcqRel);
        if before + events.len() > MAX_PENDING_NOTIFICATIONS {
            return false;
        }
        self.tx.send(events.to_vec()).is_ok()
    }
}

/// The receiving half: commits' notifications, in order.
#[derive(Debug)]
pub struct Receiver {
    rx: mpsc::UnboundedReceiver<Vec<WatchEvent>>,
    queued: Arc<AtomicUsize>,
}

impl Receiver {
    /// The next commit's notifications; `None` once the store dropped the sink.
    pub async fn recv(&mut self) -> Option<Vec<WatchEvent>> {
        let events = self.rx.recv().await?;
        self.queued.fetch_sub(events.len(), Ordering::AcqRel);
        Some(events)
    }
}

/// A sink and its receiver.
pub fn channel() -> (Arc<ChannelSink>, Receiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    (
        Arc::new(ChannelSink {
            tx,
            queued: Arc::clone(&queued),
        }),
        Receiver { rx, queued },
    )
}

/// Unsubscribes when the watch ends, however it ends.
#[derive(Debug)]
pub struct Subscription {
    pub(super) store: Arc<EventStore>,
    pub(super) id: SubscriptionId,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.store.unsubscribe(self.id);
    }
}

type CoalesceKey = (u128, u128, u128, u8);

/// Notifications waiting for the next push, coalesced.
#[derive(Debug, Default)]
pub struct Pending {
    events: BTreeMap<CoalesceKey, WatchResponseEvent>,
}

impl Pending {
    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Adds one commit's notifications.
    pub fn add(&mut self, events: &[WatchEvent]) {
        for e in events {
            let op = e.operation.code();
            let k = (
                e.key.org_id,
                e.key.aggregate_type_id,
                e.key.aggregate_id,
                op,
            );
            let next = WatchResponseEvent {
                org_id: e.key.org_id,
                aggregate_type_id: e.key.aggregate_type_id,
                aggregate_id: e.key.aggregate_id,
                operation: op,
                from_aggregate_version: e.from_version,
                to_aggregate_version: e.to_version,
                keep_from_aggregate_version: e.keep_from_version,
            };
            match self.events.get_mut(&k) {
                None => {
                    self.events.insert(k, next);
                }
                Some(prev) => match e.operation {
                    WatchOperation::Write => {
                        prev.from_aggregate_version =
                            min_some(prev.from_aggregate_version, next.from_aggregate_version);
                        prev.to_aggregate_version =
                            prev.to_aggregate_version.max(next.to_aggregate_version);
                    }
                    WatchOperation::TrimStart => {
                        prev.keep_from_aggregate_version = next.keep_from_aggregate_version;
                    }
                    WatchOperation::Delete | WatchOperation::Create => {}
                },
            }
        }
    }

    /// Everything pending, emptying the set.
    pub fn take(&mut self) -> Vec<WatchResponseEvent> {
        std::mem::take(&mut self.events).into_values().collect()
    }
}

fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use eddy_event_store::AggregateKey;

    use super::*;

    fn ev(id: u128, operation: WatchOperation, range: Option<(u64, u64)>) -> WatchEvent {
        WatchEvent {
            key: AggregateKey::new(1, 2, id),
            operation,
            from_version: range.map(|r| r.0),
            to_version: range.map(|r| r.1),
            keep_from_version: (operation == WatchOperation::TrimStart).then_some(id as u64),
        }
    }

    #[test]
    fn coalescing_widens_write_ranges_and_dedupes() {
        let mut p = Pending::default();
        p.add(&[
            ev(1, WatchOperation::Create, None),
            ev(1, WatchOperation::Write, Some((1, 1))),
        ]);
        p.add(&[ev(1, WatchOperation::Write, Some((2, 2)))]);
        p.add(&[ev(1, WatchOperation::Write, Some((3, 4)))]);
        p.add(&[ev(2, WatchOperation::Write, Some((7, 7)))]);
        p.add(&[ev(1, WatchOperation::Create, None)]);
        let out = p.take();
        assert!(p.is_empty());
        assert_eq!(out.len(), 3);
        let w1 = out
            .iter()
            .find(|e| e.aggregate_id == 1 && e.operation == 1)
            .unwrap();
        assert_eq!(
            (w1.from_aggregate_version, w1.to_aggregate_version),
            (Some(1), Some(4))
        );
        assert!(out.iter().any(|e| e.aggregate_id == 1 && e.operation == 5));
    }

    #[test]
    fn the_sink_refuses_once_too_far_behind() {
        let (sink, mut rx) = channel();
        let batch: Vec<WatchEvent> = (0..1000)
            .map(|i| ev(i, WatchOperation::Write, Some((1, 1))))
            .collect();
        for _ in 0..10 {
            assert!(sink.deliver(&batch));
        }
        assert!(
            !sink.deliver(&batch[..1]),
            "10 000 queued: the next one is refused"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let first = rt.block_on(rx.recv()).unwrap();
        assert_eq!(first.len(), 1000);
    }
}
