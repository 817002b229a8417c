//! Runtime-agnostic one-shot completions.
//!
//! The storage writer threads complete acknowledgements through a [`Completer`]; the caller
//! holds the matching [`Completion`], which it can block on ([`Completion::wait`],
//! [`Completion::wait_timeout`]), poll without blocking ([`Completion::try_take`]) or `.await`
//! from any async runtime (it implements [`Future`] with nothing but `std::task::Waker`). There
//! is no dependency on tokio or any other runtime.
//!
//! If the completer is dropped without completing (its thread died), the completion resolves
//! to [`StorageError::Shutdown`].

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::{Result, StorageError};

#[derive(Debug)]
struct Slot<T> {
    state: Mutex<SlotState<T>>,
    ready: Condvar,
}

#[derive(Debug)]
struct SlotState<T> {
    value: Option<Result<T>>,
    waker: Option<Waker>,
    /// The completer is gone (completed or dropped).
    closed: bool,
    /// A thread blocks on the condvar ([`Completion::wait`]): only then does delivery notify
    /// it. (A condvar notify is a futex syscall even with nobody waiting, and most completions
    /// are awaited, not waited on.)
    blocked: bool,
}

fn lock<T>(slot: &Slot<T>) -> MutexGuard<'_, SlotState<T>> {
    slot.state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The receiving half: the result of an operation that completes on another thread.
#[derive(Debug)]
#[must_use = "a completion carries the durable acknowledgement; dropping it discards the result"]
pub struct Completion<T> {
    slot: Arc<Slot<T>>,
    taken: bool,
}

/// The sending half, held by the writer.
#[derive(Debug)]
pub struct Completer<T> {
    slot: Option<Arc<Slot<T>>>,
}

/// Creates a connected completer/completion pair.
pub fn completion<T>() -> (Completer<T>, Completion<T>) {
    let slot = Arc::new(Slot {
        state: Mutex::new(SlotState {
            value: None,
            waker: None,
            closed: false,
            blocked: false,
        }),
        ready: Condvar::new(),
    });
    (
        Completer {
            slot: Some(Arc::clone(&slot)),
        },
        Completion { slot, taken: false },
    )
}

impl<T> Completer<T> {
    /// Delivers the result and wakes the waiter.
    pub fn complete(mut self, value: Result<T>) {
        if let Some(slot) = self.slot.take() {
            Self::deliver(&slot, Some(value));
        }
    }

    fn deliver(slot: &Slot<T>, value: Option<Result<T>>) {
        let (waker, blocked) = {
            let mut state = lock(slot);
            state.value = value.or(Some(Err(StorageError::Shutdown)));
            state.closed = true;
            (state.waker.take(), state.blocked)
        };
        if blocked {
            slot.ready.notify_all();
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> Drop for Completer<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            Self::deliver(&slot, None);
        }
    }
}

impl<T> Completion<T> {
    /// A completion that is already resolved.
    pub fn ready(value: Result<T>) -> Self {
        let (completer, completion) = completion();
        completer.complete(value);
        completion
    }

    /// Blocks the calling thread until the result arrives.
    pub fn wait(mut self) -> Result<T> {
        let mut state = lock(&self.slot);
        while !state.closed {
            state.blocked = true;
            state = self
                .slot
                .ready
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        self.taken = true;
        state.value.take().unwrap_or(Err(StorageError::Shutdown))
    }

    /// Blocks up to `timeout`; gives the completion back if it is still pending.
    pub fn wait_timeout(mut self, timeout: Duration) -> std::result::Result<Result<T>, Self> {
        let deadline = Instant::now() + timeout;
        {
            let mut state = lock(&self.slot);
            while !state.closed {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                state.blocked = true;
                state = self
                    .slot
                    .ready
                    .wait_timeout(state, deadline - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            if state.closed {
                self.taken = true;
                return Ok(state.value.take().unwrap_or(Err(StorageError::Shutdown)));
            }
        }
        Err(self)
    }

    /// The result if it has arrived, without blocking.
    pub fn try_take(&mut self) -> Option<Result<T>> {
        if self.taken {
            return None;
        }
        let mut state = lock(&self.slot);
        if state.closed {
            self.taken = true;
            Some(state.value.take().unwrap_or(Err(StorageError::Shutdown)))
        } else {
            None
        }
    }

    /// True once the result has arrived (and not yet been taken).
    pub fn is_ready(&self) -> bool {
        !self.taken && lock(&self.slot).closed
    }
}

impl<T> Future for Completion<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        assert!(!this.taken, "completion polled after it resolved");
        let mut state = lock(&this.slot);
        if state.closed {
            this.taken = true;
            return Poll::Ready(state.value.take().unwrap_or(Err(StorageError::Shutdown)));
        }
        match &state.waker {
            Some(existing) if existing.will_wake(cx.waker()) => {}
            _ => state.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    #[test]
    fn wait_receives_value_from_another_thread() {
        let (tx, rx) = completion::<u32>();
        let t = std::thread::spawn(move || tx.complete(Ok(7)));
        assert_eq!(rx.wait().unwrap(), 7);
        t.join().unwrap();
    }

    #[test]
    fn dropped_completer_means_shutdown() {
        let (tx, rx) = completion::<u32>();
        drop(tx);
        assert!(matches!(rx.wait(), Err(StorageError::Shutdown)));
    }

    #[test]
    fn wait_timeout_gives_back_pending() {
        let (tx, rx) = completion::<u32>();
        let rx = rx.wait_timeout(Duration::from_millis(1)).unwrap_err();
        tx.complete(Ok(1));
        assert_eq!(
            rx.wait_timeout(Duration::from_secs(5))
                .ok()
                .unwrap()
                .unwrap(),
            1
        );
    }

    struct CountingWaker(AtomicUsize);
    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn future_registers_waker_and_resolves() {
        let (tx, mut rx) = completion::<&'static str>();
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&counter));
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut rx).poll(&mut cx).is_pending());
        assert!(!rx.is_ready());
        tx.complete(Ok("done"));
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        match Pin::new(&mut rx).poll(&mut cx) {
            Poll::Ready(Ok(v)) => assert_eq!(v, "done"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn ready_and_try_take() {
        let mut c = Completion::ready(Ok(3u8));
        assert!(c.is_ready());
        assert_eq!(c.try_take().unwrap().unwrap(), 3);
        assert!(c.try_take().is_none());
    }
}
