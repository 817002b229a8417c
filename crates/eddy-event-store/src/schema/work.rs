//! The threads schema compilation and validation run on: at most a fixed number of jobs at a
//! time, and a caller waits at most a deadline for its job, its wait for a turn included.
//!
//! Plain std threads (the store depends on no async runtime). A job still queued at its
//! deadline is dropped unrun; a job still running at its deadline finishes on its thread and
//! keeps its turn until then (its caller has gone with [`Unfinished`]), so abandoned work never
//! piles up beyond the limit. Threads start when work first needs them, up to the limit, and
//! stop when the store is dropped.

use std::collections::VecDeque;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use eddy_log::{lock, sync};

/// Work given to [`SchemaWork::run`] did not finish within its deadline (or panicked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unfinished {
    deadline: Duration,
}

impl Unfinished {
    /// The error text of a 2021 or 2022 answer.
    pub fn text(self) -> String {
        format!(
            "schema work did not finish within {} ms",
            self.deadline.as_millis()
        )
    }
}

/// A job and the latest instant it may start.
struct Job {
    deadline: Instant,
    run: Box<dyn FnOnce() + Send>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Threads started and not stopped.
    threads: usize,
    /// Threads waiting for a job.
    idle: usize,
    /// Jobs running now.
    running: usize,
    stopped: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    ready: Condvar,
}

/// Bounded schema work: at most `limit` jobs at once, each awaited at most `deadline`.
pub struct SchemaWork {
    shared: Arc<Shared>,
    limit: usize,
    deadline: Duration,
}

impl fmt::Debug for SchemaWork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaWork")
            .field("limit", &self.limit)
            .field("deadline", &self.deadline)
            .field("running", &self.running())
            .finish_non_exhaustive()
    }
}

impl SchemaWork {
    /// No threads yet; at most `limit` (at least one) jobs will run at once.
    pub fn new(limit: usize, deadline: Duration) -> Self {
        Self {
            shared: Arc::default(),
            limit: limit.max(1),
            deadline,
        }
    }

    /// Jobs running now (abandoned ones included).
    pub fn running(&self) -> usize {
        lock(&self.shared.state).running
    }

    /// Runs `work` on a schema thread and waits for its result at most the deadline (the wait
    /// for a turn included). Blocks the calling thread: an async caller calls from a thread
    /// that may block.
    pub fn run<T, F>(&self, work: F) -> Result<T, Unfinished>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let unfinished = Unfinished {
            deadline: self.deadline,
        };
        let deadline = Instant::now() + self.deadline;
        let (tx, rx) = mpsc::sync_channel(1);
        let job = Job {
            deadline,
            run: Box::new(move || {
                // The caller may have gone: nobody wants the result then.
                let _ = tx.send(work());
            }),
        };
        {
            let mut state = lock(&self.shared.state);
            if state.stopped {
                return Err(unfinished);
            }
            state.queue.push_back(job);
            if state.queue.len() > state.idle && state.threads < self.limit {
                let shared = Arc::clone(&self.shared);
                let started = std::thread::Builder::new()
                    .name("eddy-schema".into())
                    .spawn(move || serve(&shared));
                if started.is_ok() {
                    state.threads += 1;
                }
            }
            // With no thread at all (none could start) the job waits for one until its
            // deadline, and the caller gets `Unfinished`.
            self.shared.ready.notify_one();
        }
        rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .map_err(|_| unfinished)
    }
}

impl Drop for SchemaWork {
    fn drop(&mut self) {
        lock(&self.shared.state).stopped = true;
        self.shared.ready.notify_all();
    }
}

/// A schema thread: runs queued jobs until the work is dropped. A job past its deadline is
/// dropped unrun (its caller has gone); a panicking job ends only itself (its caller sees the
/// result channel close: [`Unfinished`]).
fn serve(shared: &Shared) {
    let mut state = lock(&shared.state);
    loop {
        if state.stopped {
            state.threads -= 1;
            return;
        }
        let Some(job) = state.queue.pop_front() else {
            state.idle += 1;
            state = sync::wait(&shared.ready, state);
            state.idle -= 1;
            continue;
        };
        if job.deadline <= Instant::now() {
            continue;
        }
        state.running += 1;
        drop(state);
        let _ = std::panic::catch_unwind(AssertUnwindSafe(job.run));
        state = lock(&shared.state);
        state.running -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Work that holds its turn until the gate opens (no timing assumption about how long
    /// the test's own steps take on a loaded machine).
    fn held(gate: &Arc<(Mutex<bool>, Condvar)>) -> impl FnOnce() + Send + 'static {
        let gate = Arc::clone(gate);
        move || {
            let (open, changed) = &*gate;
            let mut open = open.lock().unwrap();
            while !*open {
                open = changed.wait(open).unwrap();
            }
        }
    }

    #[test]
    fn bounded_work_has_a_deadline_and_a_limit() {
        let deadline = Duration::from_millis(300);
        let work = SchemaWork::new(2, deadline);
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        assert_eq!(work.run(|| 7), Ok(7));
        // Work longer than the deadline is abandoned, and keeps its turn while it runs.
        let started = Instant::now();
        let slow = work.run(held(&gate));
        assert_eq!(slow, Err(Unfinished { deadline }));
        assert!(started.elapsed() < deadline * 5, "{:?}", started.elapsed());
        assert_eq!(work.running(), 1);
        // A panic is the caller's Unfinished and costs no thread.
        assert_eq!(work.run(|| panic!("boom")), Err(Unfinished { deadline }));
        assert!(Unfinished { deadline }.text().contains("did not finish"));
        // The panicking job's thread is free again once its panic hook (a backtrace, slow on a
        // loaded machine: the caller may have stopped waiting long before) has run.
        let until = Instant::now() + Duration::from_secs(30);
        while work.running() > 1 {
            assert!(Instant::now() < until, "the panicking job never ended");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Both turns taken by abandoned work: a new job waits its deadline out unrun.
        let _ = work.run(held(&gate));
        assert_eq!(work.running(), 2);
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        let queued = work.run(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
        assert_eq!(queued, Err(Unfinished { deadline }));
        // The held work ends; the abandoned job still never runs.
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        let until = Instant::now() + Duration::from_secs(10);
        while work.running() > 0 {
            assert!(Instant::now() < until, "held work did not end");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(deadline);
        assert!(
            !ran.load(std::sync::atomic::Ordering::SeqCst),
            "ran past its deadline"
        );
        assert_eq!(work.run(|| 8), Ok(8));
    }
}
