//! The write-ahead state of a shard (requests appended to the log but not yet committed) and
//! the shard's [`CommitHook`]: after the log publishes a group, the hook applies its updates to
//! the index (readers see them from then on) and notifies watchers, in log order; when the log
//! refuses queued records, it forgets their updates. Acknowledgements are the log's own: the
//! hook completes nothing.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};

use eddy_log::{lock, CommitHook, Completer, LogError};

use crate::error::EventStoreError;

use crate::index::{EntryBatch, Index};
use crate::state::{AggState, Mark, Update};
use crate::types::{AggregateKey, SchemaKey};
use crate::watch::Watchers;
use crate::FastMap as HashMap;

/// A record appended to the log and not yet committed: its update to the shard state.
pub(super) struct PendingRecord {
    pub(super) seq: u64,
    pub(super) update: Update,
    pub(super) tip_after: [u8; 32],
}

/// Write-ahead state: requests appended to the log but not yet committed.
#[derive(Default)]
pub(crate) struct Pending {
    pub(super) records: VecDeque<PendingRecord>,
    pub(super) aggs: HashMap<AggregateKey, (AggState, u32)>,
    pub(super) marks: HashMap<(AggregateKey, u128), (Mark, u32)>,
    pub(super) schemas: HashMap<SchemaKey, u32>,
    /// Chain tip after the last queued record.
    pub(super) tip: [u8; 32],
    /// Chain tip after the last committed record.
    pub(super) committed_tip: [u8; 32],
    /// Bumped whenever queued records are refused.
    pub(super) generation: u64,
    /// Committed changes that may have made batches unreadable (see [`Update::deaths`]),
    /// counted after the index shows them.
    pub(super) deaths: u64,
    /// Every record below it is visible to readers: the log's end after the last group the
    /// hook applied to the index (or after recovery replayed the log).
    pub(super) visible_end: u64,
    /// Barriers ([`Shard::visible_barrier`](super::Shard::visible_barrier)) waiting for
    /// `visible_end` to reach their sequence number.
    pub(super) barriers: Vec<(u64, Completer<(), EventStoreError>)>,
}

impl Pending {
    /// Records below `end` are visible now: takes the barriers that waited for them (to be
    /// completed outside the lock).
    pub(super) fn reach(&mut self, end: u64) -> Vec<Completer<(), EventStoreError>> {
        self.visible_end = self.visible_end.max(end);
        if self.barriers.is_empty() {
            return Vec::new();
        }
        let end = self.visible_end;
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.barriers)
            .into_iter()
            .partition(|(seq, _)| *seq <= end);
        self.barriers = waiting;
        ready.into_iter().map(|(_, done)| done).collect()
    }

    pub(super) fn add(&mut self, update: &Update) {
        for c in &update.changes {
            let e = self.aggs.entry(c.key).or_insert((c.state, 0));
            e.0 = c.state;
            e.1 += 1;
            if let Some((client, m)) = c.mark {
                let e = self.marks.entry((c.key, client)).or_insert((m, 0));
                e.0 = m;
                e.1 += 1;
            }
        }
        if let Some((k, _)) = &update.schema {
            *self.schemas.entry(*k).or_insert(0) += 1;
        }
    }

    pub(super) fn release(&mut self, update: &Update) {
        for c in &update.changes {
            if let Some(e) = self.aggs.get_mut(&c.key) {
                e.1 -= 1;
                if e.1 == 0 {
                    self.aggs.remove(&c.key);
                }
            }
            if let Some((client, _)) = c.mark {
                if let Some(e) = self.marks.get_mut(&(c.key, client)) {
                    e.1 -= 1;
                    if e.1 == 0 {
                        self.marks.remove(&(c.key, client));
                    }
                }
            }
        }
        if let Some((k, _)) = &update.schema {
            if let Some(n) = self.schemas.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    self.schemas.remove(k);
                }
            }
        }
    }
}

/// Signals the background index flusher.
pub(crate) trait FlushSignal: Send + Sync {
    fn flush_needed(&self, shard: u32);
}

/// The shard's [`CommitHook`].
pub(crate) struct ShardHook {
    pub(super) shard: u32,
    /// Refusals by the log that dropped queued records (see [`Shard::dropped_writes`](super::Shard::dropped_writes)).
    pub(super) dropped: Arc<std::sync::atomic::AtomicU64>,
    pub(super) pending: Arc<Mutex<Pending>>,
    pub(super) index: Arc<Index>,
    pub(super) watchers: Arc<Watchers>,
    pub(super) flush: Arc<dyn FlushSignal>,
}

impl fmt::Debug for ShardHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardHook")
            .field("shard", &self.shard)
            .finish_non_exhaustive()
    }
}

impl CommitHook for ShardHook {
    fn before_ack(&self, _end_seq: u64) -> io::Result<()> {
        Ok(())
    }

    fn on_refused(&self, next_seq: u64, error: &dyn Fn() -> LogError) {
        let mut p = lock(&self.pending);
        // A barrier past the refused records waited for records that will never be visible.
        let (lost, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut p.barriers)
            .into_iter()
            .partition(|(seq, _)| *seq > next_seq);
        p.barriers = waiting;
        for (_, done) in lost {
            done.complete(Err(error().into()));
        }
        let mut refused = Vec::new();
        while p.records.back().is_some_and(|r| r.seq >= next_seq) {
            refused.extend(p.records.pop_back());
        }
        if !refused.is_empty() {
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Release);
        }
        for r in &refused {
            p.release(&r.update);
        }
        p.tip = p.records.back().map_or(p.committed_tip, |r| r.tip_after);
        p.generation += 1;
    }

    fn after_publish(&self, end_seq: u64) {
        let committed: Vec<PendingRecord> = {
            let mut p = lock(&self.pending);
            let mut out = Vec::new();
            while p.records.front().is_some_and(|r| r.seq < end_seq) {
                out.extend(p.records.pop_front());
            }
            if out.is_empty() {
                let ready = p.reach(end_seq);
                drop(p);
                for done in ready {
                    done.complete(Ok(()));
                }
            }
            out
        };
        if committed.is_empty() {
            return;
        }
        // About three entries of about 80 bytes per write.
        let mut entries = EntryBatch::with_capacity(3 * committed.len(), 256 * committed.len());
        for r in &committed {
            r.update.entries_into(r.seq, &mut entries);
        }
        // Readers see the new state from here on: after the log published the records.
        if self.index.apply(&entries, end_seq, true) {
            self.flush.flush_needed(self.shard);
        }
        let ready = {
            let mut p = lock(&self.pending);
            for r in &committed {
                p.release(&r.update);
            }
            if let Some(last) = committed.last() {
                p.committed_tip = last.tip_after;
            }
            p.deaths += committed.iter().map(|r| r.update.deaths).sum::<u64>();
            p.reach(end_seq)
        };
        for done in ready {
            done.complete(Ok(()));
        }
        // The notifications are built only when someone subscribes.
        self.watchers.publish_with(|watch| {
            for r in &committed {
                r.update.watch_into(watch);
            }
        });
    }
}
