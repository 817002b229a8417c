//! The storage thread pool that runs group commits.
//!
//! Each log is an actor: appends are queued on the log, and the first append to an idle log
//! schedules it on the pool. A pool thread then runs one *turn* of that log (drain its queue,
//! write every pending record, one `fdatasync`, complete every acknowledgement) and puts the log
//! back at the end of the ready queue if more work arrived meanwhile (or, with no other log
//! ready, runs its next turn itself: waking an idle thread for it would only add two context
//! switches, a log having one writer at a time). A log is never run by two
//! threads at once, so every log has exactly one writer; different logs commit in parallel on
//! different threads. A lone writer waits for one fdatasync, and everything that queued during
//! that fdatasync forms the next group (a log with a group-commit window may wait a little
//! longer for it, see [`LogConfig::group_window`](crate::LogConfig::group_window)).
//!
//! One pool serves the whole storage engine: the server creates it once and hands it to both
//! stores, so the stream store's partitions and metadata log and the event store's shard logs
//! share its threads. A [`CommitPool`] is a cheap handle; the threads stop when the last handle
//! is dropped. Each store counts its own logs' group commits in a [`CommitStats`] of its own
//! (see [`OpenOptions::stats`](crate::OpenOptions::stats)); [`CommitPool::stats`] counts them
//! all.
//!
//! Threads are plain `std::thread`s; nothing here knows about async runtimes.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::sync::{self, lock as lock_mutex};

/// Largest number of pool threads accepted.
pub const MAX_POOL_THREADS: usize = 256;

/// A unit of work the pool can run: one log's group-commit turn.
pub(crate) trait Job: Send + Sync {
    /// Runs one turn. Returns true when more work is already queued and the job must be
    /// scheduled again; false when the job went idle (it will reschedule itself on new work).
    fn run_turn(&self) -> bool;
}

struct PoolState {
    ready: VecDeque<Arc<dyn Job>>,
    shutdown: bool,
    /// Workers blocked on `wake`: scheduling notifies only when one is (a condvar notify is
    /// a syscall even with nobody waiting).
    idle: usize,
}

pub(crate) struct PoolShared {
    state: Mutex<PoolState>,
    wake: Condvar,
    pub(crate) stats: CommitStats,
}

impl fmt::Debug for PoolShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolShared")
            .field("stats", &self.stats.snapshot())
            .finish_non_exhaustive()
    }
}

fn lock(shared: &PoolShared) -> MutexGuard<'_, PoolState> {
    lock_mutex(&shared.state)
}

impl PoolShared {
    /// Puts a job on the ready queue. Jobs scheduled after shutdown are run by the caller's
    /// thread instead so that no acknowledgement is ever stranded.
    pub(crate) fn schedule(&self, job: Arc<dyn Job>) {
        let mut state = lock(self);
        if state.shutdown {
            drop(state);
            while job.run_turn() {}
            return;
        }
        state.ready.push_back(job);
        let idle = state.idle;
        drop(state);
        if idle > 0 {
            self.wake.notify_one();
        }
    }
}

/// Counters of the group-commit machinery (shared by every log on a pool).
#[derive(Debug, Default)]
pub struct CommitStats {
    records: AtomicU64,
    bytes: AtomicU64,
    groups: AtomicU64,
    fsyncs: AtomicU64,
}

/// A point-in-time copy of [`CommitStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStatsSnapshot {
    /// Records written.
    pub records: u64,
    /// Record bytes written (headers included).
    pub bytes: u64,
    /// Group writes issued.
    pub groups: u64,
    /// `fdatasync` calls on segment files.
    pub fsyncs: u64,
}

impl CommitStatsSnapshot {
    /// Records per fdatasync (the group-commit factor); 0 when nothing was synced.
    #[allow(clippy::cast_precision_loss)] // a ratio for humans
    pub fn records_per_fsync(&self) -> f64 {
        if self.fsyncs == 0 {
            0.0
        } else {
            self.records as f64 / self.fsyncs as f64
        }
    }

    /// The difference `self - earlier`, for measuring an interval.
    #[must_use]
    pub fn since(&self, earlier: &CommitStatsSnapshot) -> CommitStatsSnapshot {
        CommitStatsSnapshot {
            records: self.records - earlier.records,
            bytes: self.bytes - earlier.bytes,
            groups: self.groups - earlier.groups,
            fsyncs: self.fsyncs - earlier.fsyncs,
        }
    }
}

impl CommitStats {
    /// Fresh counters (a store keeps one for the logs it opens).
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn add_group(&self, records: u64, bytes: u64) {
        self.records.fetch_add(records, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.groups.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_fsync(&self) {
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
    }

    /// A consistent-enough copy of the counters.
    pub fn snapshot(&self) -> CommitStatsSnapshot {
        CommitStatsSnapshot {
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            groups: self.groups.load(Ordering::Relaxed),
            fsyncs: self.fsyncs.load(Ordering::Relaxed),
        }
    }
}

/// The pool of storage writer threads: a cheap handle (clone it to share the pool). When the
/// last handle is dropped every scheduled turn is finished, then the threads are joined.
#[derive(Clone)]
pub struct CommitPool {
    owner: Arc<PoolOwner>,
}

/// Owns the threads; dropped with the last [`CommitPool`] handle.
struct PoolOwner {
    shared: Arc<PoolShared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl fmt::Debug for CommitPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommitPool")
            .field("threads", &self.threads())
            .field("stats", &self.owner.shared.stats.snapshot())
            .finish()
    }
}

impl CommitPool {
    /// Starts `threads` writer threads (clamped to `1..=MAX_POOL_THREADS`).
    pub fn new(threads: usize) -> std::io::Result<Self> {
        let pool = Self::without_threads(false);
        pool.ensure_threads(threads.max(1))?;
        Ok(pool)
    }

    /// A pool without threads: every turn runs on the thread that schedules it, so an
    /// append, flush, purge or truncation has been written (and, with
    /// [`Durability::Fsync`](crate::Durability::Fsync), synced and acknowledged) when the call
    /// that queued it returns. For deterministic simulation and tests: nothing runs
    /// concurrently, and the order of everything is the caller's.
    /// [`CommitPool::ensure_threads`] starts no thread on it.
    pub fn inline() -> Self {
        Self::without_threads(true)
    }

    /// A pool with no thread yet; `inline`: it never gets one (see `schedule`).
    fn without_threads(inline: bool) -> Self {
        CommitPool {
            owner: Arc::new(PoolOwner {
                shared: Arc::new(PoolShared {
                    state: Mutex::new(PoolState {
                        ready: VecDeque::new(),
                        shutdown: inline,
                        idle: 0,
                    }),
                    wake: Condvar::new(),
                    stats: CommitStats::default(),
                }),
                threads: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Starts more writer threads until the pool has at least `threads` (clamped to
    /// [`MAX_POOL_THREADS`]); never stops any. A log waiting out its group-commit window holds a
    /// thread, so a store with windowed logs asks for one thread per such log.
    pub fn ensure_threads(&self, threads: usize) -> std::io::Result<()> {
        if lock(&self.owner.shared).shutdown {
            return Ok(()); // an inline pool (or one shutting down) runs turns on the caller
        }
        let wanted = threads.min(MAX_POOL_THREADS);
        let mut handles = lock_mutex(&self.owner.threads);
        while handles.len() < wanted {
            let shared = Arc::clone(&self.owner.shared);
            let handle = std::thread::Builder::new()
                .name(format!("eddy-storage-{}", handles.len()))
                .spawn(move || worker(&shared))?;
            handles.push(handle);
        }
        Ok(())
    }

    /// Writer threads running.
    pub fn threads(&self) -> usize {
        lock_mutex(&self.owner.threads).len()
    }

    pub(crate) fn shared(&self) -> Arc<PoolShared> {
        Arc::clone(&self.owner.shared)
    }

    /// Group-commit counters of every log on this pool (both stores, when shared).
    pub fn stats(&self) -> CommitStatsSnapshot {
        self.owner.shared.stats.snapshot()
    }
}

fn worker(shared: &PoolShared) {
    let mut next: Option<Arc<dyn Job>> = None;
    loop {
        let job = if let Some(job) = next.take() {
            job
        } else {
            let mut state = lock(shared);
            loop {
                if let Some(job) = state.ready.pop_front() {
                    break job;
                }
                if state.shutdown {
                    return;
                }
                state.idle += 1;
                state = sync::wait(&shared.wake, state);
                state.idle -= 1;
            }
        };
        if job.run_turn() {
            // More work arrived on this log. With nothing else ready, this thread runs its
            // next turn itself: waking an idle thread for it would cost two context switches
            // (the woken thread's and this one's wait) for no parallelism, one log having one
            // writer at a time. Behind other ready logs it queues, and an idle thread helps.
            let mut state = lock(shared);
            if state.ready.is_empty() || state.shutdown {
                drop(state);
                next = Some(job);
                continue;
            }
            state.ready.push_back(job);
            let idle = state.idle;
            drop(state);
            if idle > 0 {
                shared.wake.notify_one();
            }
        }
    }
}

impl Drop for PoolOwner {
    fn drop(&mut self) {
        lock(&self.shared).shutdown = true;
        self.shared.wake.notify_all();
        let threads: Vec<JoinHandle<()>> = lock_mutex(&self.threads).drain(..).collect();
        for handle in threads {
            // A worker that panicked already lost its turn; nothing more to do here.
            let _ = handle.join();
        }
        // Anything scheduled after the threads left runs on the scheduling thread (see
        // `schedule`); anything still queued now is run here.
        let leftover: Vec<_> = lock(&self.shared).ready.drain(..).collect();
        for job in leftover {
            while job.run_turn() {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Counter {
        turns: AtomicUsize,
        want: usize,
    }

    impl Job for Counter {
        fn run_turn(&self) -> bool {
            self.turns.fetch_add(1, Ordering::SeqCst) + 1 < self.want
        }
    }

    #[test]
    fn jobs_run_until_idle() {
        let pool = CommitPool::new(2).unwrap();
        let job = Arc::new(Counter {
            turns: AtomicUsize::new(0),
            want: 5,
        });
        pool.shared().schedule(job.clone());
        drop(pool);
        assert_eq!(job.turns.load(Ordering::SeqCst), 5);
    }

    /// A job whose every turn records its thread and asks for another, `want` turns in all.
    struct Recorder {
        threads: Mutex<Vec<std::thread::ThreadId>>,
        want: usize,
    }

    impl Job for Recorder {
        fn run_turn(&self) -> bool {
            let mut t = lock_mutex(&self.threads);
            t.push(std::thread::current().id());
            t.len() < self.want
        }
    }

    #[test]
    fn a_busy_log_with_nothing_else_ready_keeps_its_thread() {
        let pool = CommitPool::new(4).unwrap();
        let job = Arc::new(Recorder {
            threads: Mutex::new(Vec::new()),
            want: 50,
        });
        pool.shared().schedule(job.clone());
        drop(pool);
        let threads = lock_mutex(&job.threads);
        assert_eq!(threads.len(), 50);
        assert!(
            threads.iter().all(|t| *t == threads[0]),
            "a requeued turn with an empty ready queue stays on its thread"
        );
    }

    #[test]
    fn busy_logs_share_the_threads() {
        let pool = CommitPool::new(2).unwrap();
        let jobs: Vec<_> = (0..4)
            .map(|_| {
                Arc::new(Counter {
                    turns: AtomicUsize::new(0),
                    want: 200,
                })
            })
            .collect();
        for j in &jobs {
            pool.shared().schedule(j.clone());
        }
        drop(pool);
        for j in &jobs {
            assert_eq!(j.turns.load(Ordering::SeqCst), 200);
        }
    }

    #[test]
    fn schedule_after_shutdown_runs_inline() {
        let pool = CommitPool::new(1).unwrap();
        let shared = pool.shared();
        drop(pool);
        let job = Arc::new(Counter {
            turns: AtomicUsize::new(0),
            want: 3,
        });
        shared.schedule(job.clone());
        assert_eq!(job.turns.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn clones_share_the_threads_which_stop_with_the_last_handle() {
        let pool = CommitPool::new(1).unwrap();
        let other = pool.clone();
        other.ensure_threads(3).unwrap();
        assert_eq!(pool.threads(), 3);
        drop(pool);
        let job = Arc::new(Counter {
            turns: AtomicUsize::new(0),
            want: 4,
        });
        other.shared().schedule(job.clone());
        drop(other);
        assert_eq!(job.turns.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn an_inline_pool_runs_turns_on_the_scheduling_thread() {
        let pool = CommitPool::inline();
        pool.ensure_threads(4).unwrap();
        assert_eq!(pool.threads(), 0);
        let job = Arc::new(Counter {
            turns: AtomicUsize::new(0),
            want: 3,
        });
        pool.shared().schedule(job.clone());
        assert_eq!(
            job.turns.load(Ordering::SeqCst),
            3,
            "before schedule returns"
        );
    }

    #[test]
    fn stats_ratio() {
        let s = CommitStatsSnapshot {
            records: 10,
            bytes: 0,
            groups: 2,
            fsyncs: 2,
        };
        assert!((s.records_per_fsync() - 5.0).abs() < f64::EPSILON);
        assert!(CommitStatsSnapshot::default().records_per_fsync().abs() < f64::EPSILON);
    }
}
