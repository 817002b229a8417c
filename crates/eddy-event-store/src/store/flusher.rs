//! The background index threads: the flusher writes frozen memtables out as runs, the merger
//! merges runs. A flush never waits for a merge.
//!
//! A failed flush (a full disk, an I/O error) is retried with backoff, from
//! [`FIRST_FLUSH_RETRY`] doubling up to [`MAX_FLUSH_RETRY`], until it succeeds: the frozen
//! memtable stays in memory meanwhile (the log still holds its records, so nothing is lost),
//! the shard's appliers stop waiting for the flusher, and once the memtable budget is used up
//! the shard refuses mutations with [`EventStoreError::IndexBacklog`] instead of queueing
//! them (see [`Index::flush_backlog`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use eddy_log::{lock, sync};

use crate::error::EventStoreError;
use crate::index::Index;
use crate::shard::FlushSignal;

/// Delay before the first retry of a failed flush.
pub(super) const FIRST_FLUSH_RETRY: Duration = Duration::from_millis(10);
/// Longest delay between two retries of a failing flush.
pub(super) const MAX_FLUSH_RETRY: Duration = Duration::from_secs(1);

#[derive(Default)]
struct FlushQueue {
    shards: VecDeque<u32>,
    /// Shards whose work failed, with when to try again.
    retries: Vec<(Instant, u32)>,
    stop: bool,
}

#[derive(Default)]
pub(super) struct Flusher {
    queue: Mutex<FlushQueue>,
    wake: Condvar,
}

impl FlushSignal for Flusher {
    fn flush_needed(&self, shard: u32) {
        let mut q = lock(&self.queue);
        // A shard waiting out its retry delay is not hurried by new work: the retry comes.
        if !q.shards.contains(&shard) && !q.retries.iter().any(|(_, s)| *s == shard) {
            q.shards.push_back(shard);
        }
        drop(q);
        self.wake.notify_one();
    }
}

impl Flusher {
    /// The next shard to work on (queued ones first, then retries that are due); `None` once
    /// stopped and nothing is queued (retries still waiting are dropped: closing flushes in
    /// the foreground and reports the error).
    fn next(&self) -> Option<u32> {
        let mut q = lock(&self.queue);
        loop {
            if let Some(s) = q.shards.pop_front() {
                return Some(s);
            }
            if q.stop {
                return None;
            }
            let now = Instant::now();
            let due = q
                .retries
                .iter()
                .enumerate()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(i, (at, _))| (i, *at));
            match due {
                Some((i, at)) if at <= now => return Some(q.retries.swap_remove(i).1),
                Some((_, at)) => q = sync::wait_timeout(&self.wake, q, at - now),
                None => q = sync::wait(&self.wake, q),
            }
        }
    }

    /// The next queued shard, without waiting (a store without index threads).
    pub(super) fn take_queued(&self) -> Option<u32> {
        lock(&self.queue).shards.pop_front()
    }

    /// Works on `shard` again after `delay`.
    fn retry_after(&self, shard: u32, delay: Duration) {
        let mut q = lock(&self.queue);
        if !q.retries.iter().any(|(_, s)| *s == shard) {
            q.retries.push((Instant::now() + delay, shard));
        }
        drop(q);
        self.wake.notify_one();
    }

    pub(super) fn stop(&self) {
        lock(&self.queue).stop = true;
        self.wake.notify_all();
    }
}

/// Writes frozen memtables as runs, then hands the shard to the merger. Flushes never wait
/// for merges, so writers (which wait only when two memtables are already frozen) do not
/// stall behind a large merge. A failed flush is retried with backoff (see the module docs).
pub(super) fn run_flusher(flusher: &Flusher, merger: &Flusher, indexes: &[Arc<Index>]) {
    // Per failing shard: the delay before its next retry.
    let mut backoff: HashMap<u32, Duration> = HashMap::new();
    while let Some(shard) = flusher.next() {
        let Some(index) = indexes.get(shard as usize) else {
            continue;
        };
        match index.flush_pending() {
            Ok(()) => {
                if backoff.remove(&shard).is_some() {
                    index.set_flush_failure(None);
                    tracing::info!(
                        shard,
                        "the event index flushes again; the shard takes writes"
                    );
                }
                merger.flush_needed(shard);
            }
            Err(e) => {
                let delay = match backoff.get(&shard) {
                    None => {
                        tracing::error!(shard, error = %error_chain(&e), "flushing the event index failed; retrying with backoff (the shard refuses writes once its memtables are full)");
                        FIRST_FLUSH_RETRY
                    }
                    Some(previous) => {
                        tracing::debug!(shard, error = %error_chain(&e), "flushing the event index failed again");
                        (*previous * 2).min(MAX_FLUSH_RETRY)
                    }
                };
                backoff.insert(shard, delay);
                index.set_flush_failure(Some(Arc::new(e)));
                flusher.retry_after(shard, delay);
            }
        }
    }
}

/// An error and its causes, `: `-separated (the log line names the file and the OS error).
fn error_chain(e: &EventStoreError) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Merges runs of the shards the flusher hands over.
pub(super) fn run_merger(merger: &Flusher, indexes: &[Arc<Index>]) {
    while let Some(shard) = merger.next() {
        if let Some(index) = indexes.get(shard as usize) {
            if let Err(e) = index.merge_runs() {
                tracing::error!(shard, error = %e, "merging event index runs failed");
            }
        }
    }
}
