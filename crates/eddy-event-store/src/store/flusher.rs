//! The background index threads: the flusher writes frozen memtables out as runs, the merger
//! merges runs. A flush never waits for a merge.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

use eddy_log::{lock, sync};

use crate::index::Index;
use crate::shard::FlushSignal;

#[derive(Default)]
struct FlushQueue {
    shards: VecDeque<u32>,
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
        if !q.shards.contains(&shard) {
            q.shards.push_back(shard);
        }
        drop(q);
        self.wake.notify_one();
    }
}

impl Flusher {
    /// The next shard to work on; `None` once stopped and drained.
    fn next(&self) -> Option<u32> {
        let mut q = lock(&self.queue);
        loop {
            if let Some(s) = q.shards.pop_front() {
                return Some(s);
            }
            if q.stop {
                return None;
            }
            q = sync::wait(&self.wake, q);
        }
    }

    pub(super) fn stop(&self) {
        lock(&self.queue).stop = true;
        self.wake.notify_all();
    }
}

/// Writes frozen memtables as runs, then hands the shard to the merger. Flushes never wait
/// for merges, so writers (which wait only when two memtables are already frozen) do not
/// stall behind a large merge.
pub(super) fn run_flusher(flusher: &Flusher, merger: &Flusher, indexes: &[Arc<Index>]) {
    while let Some(shard) = flusher.next() {
        if let Some(index) = indexes.get(shard as usize) {
            match index.flush_pending() {
                Ok(()) => merger.flush_needed(shard),
                // The frozen memtable stays in memory (and the log still holds its records);
                // the next signal retries.
                Err(e) => tracing::error!(shard, error = %e, "flushing the event index failed"),
            }
        }
    }
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
