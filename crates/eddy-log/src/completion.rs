//! Runtime-agnostic one-shot completions.
//!
//! The storage writer threads complete acknowledgements through a [`Completer`]; the caller
//! holds the matching [`Completion`], which it can block on ([`Completion::wait`],
//! [`Completion::wait_timeout`]), poll without blocking ([`Completion::try_take`]) or `.await`
//! from any async runtime (it implements [`Future`] with nothing but `std::task::Waker`). There
//! is no dependency on tokio or any other runtime.
//!
//! A completion carries `Result<T, E>`; `E` is [`LogError`] for the log itself and the upper
//! layer's own error for a store (anything that can hold a [`LogError`]). A store turns the
//! log's acknowledgement of its record into its own answer with [`Completion::map`], so a
//! request goes down once and is answered up once.
//!
//! If the completer is dropped without completing (its thread died), the completion resolves
//! to [`LogError::Shutdown`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::LogError;
use crate::sync;

struct Slot<T, E> {
    state: Mutex<SlotState<T, E>>,
    ready: Condvar,
}

struct SlotState<T, E> {
    value: Option<Result<T, E>>,
    waker: Option<Waker>,
    /// The completer is gone (completed or dropped).
    closed: bool,
    /// A thread blocks on the condvar ([`Completion::wait`]): only then does delivery notify
    /// it. (A condvar notify is a futex syscall even with nobody waiting, and most completions
    /// are awaited, not waited on.)
    blocked: bool,
}

fn lock<T, E>(slot: &Slot<T, E>) -> MutexGuard<'_, SlotState<T, E>> {
    sync::lock(&slot.state)
}

fn shutdown<T, E: From<LogError>>() -> Result<T, E> {
    Err(E::from(LogError::Shutdown))
}

/// The receiving half: the result of an operation that completes on another thread.
#[must_use = "a completion carries the durable acknowledgement; dropping it discards the result"]
pub struct Completion<T, E = LogError> {
    inner: Inner<T, E>,
}

enum Inner<T, E> {
    /// Filled by a [`Completer`].
    Slot { slot: Arc<Slot<T, E>>, taken: bool },
    /// Another completion, transformed when it resolves ([`Completion::map`]).
    Mapped(Box<dyn Source<T, E>>),
}

/// The sending half, held by the writer.
pub struct Completer<T, E = LogError> {
    slot: Option<Arc<Slot<T, E>>>,
}

impl<T, E> fmt::Debug for Completion<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completion")
            .field("ready", &self.is_ready())
            .finish_non_exhaustive()
    }
}

impl<T, E> fmt::Debug for Completer<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completer")
            .field("pending", &self.slot.is_some())
            .finish()
    }
}

/// Creates a connected completer/completion pair.
pub fn completion<T, E>() -> (Completer<T, E>, Completion<T, E>) {
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
        Completion {
            inner: Inner::Slot { slot, taken: false },
        },
    )
}

impl<T, E> Completer<T, E> {
    /// Delivers the result and wakes the waiter.
    pub fn complete(mut self, value: Result<T, E>) {
        if let Some(slot) = self.slot.take() {
            deliver(&slot, Some(value));
        }
    }
}

/// Stores `value` (`None`: the completer was dropped, which reads as a shutdown).
fn deliver<T, E>(slot: &Slot<T, E>, value: Option<Result<T, E>>) {
    let (waker, blocked) = {
        let mut state = lock(slot);
        state.value = value;
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

impl<T, E> Drop for Completer<T, E> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            deliver(&slot, None);
        }
    }
}

/// What a mapped completion reads from (the type-erased inner completion).
trait Source<T, E>: Send {
    fn poll_source(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, E>>;
    fn wait_source(&mut self, deadline: Option<Instant>) -> Option<Result<T, E>>;
    fn try_source(&mut self) -> Option<Result<T, E>>;
    fn ready_source(&self) -> bool;
}

struct Mapped<T, E, F> {
    from: Completion<T, E>,
    map: Option<F>,
}

impl<T, E, U, E2, F> Source<U, E2> for Mapped<T, E, F>
where
    T: Send + 'static,
    E: Send + From<LogError> + 'static,
    F: FnOnce(Result<T, E>) -> Result<U, E2> + Send + 'static,
    E2: From<LogError>,
{
    fn poll_source(&mut self, cx: &mut Context<'_>) -> Poll<Result<U, E2>> {
        match self.from.poll_inner(cx) {
            Poll::Ready(r) => Poll::Ready(self.apply(r)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn wait_source(&mut self, deadline: Option<Instant>) -> Option<Result<U, E2>> {
        let r = self.from.wait_inner(deadline)?;
        Some(self.apply(r))
    }

    fn try_source(&mut self) -> Option<Result<U, E2>> {
        let r = self.from.try_take()?;
        Some(self.apply(r))
    }

    fn ready_source(&self) -> bool {
        self.from.is_ready()
    }
}

impl<T, E, F> Mapped<T, E, F> {
    fn apply<U, E2>(&mut self, r: Result<T, E>) -> Result<U, E2>
    where
        F: FnOnce(Result<T, E>) -> Result<U, E2>,
        E2: From<LogError>,
    {
        match self.map.take() {
            Some(f) => f(r),
            None => shutdown(),
        }
    }
}

impl<T, E: From<LogError>> Completion<T, E> {
    /// A completion that is already resolved.
    pub fn ready(value: Result<T, E>) -> Self {
        let (completer, completion) = completion();
        completer.complete(value);
        completion
    }

    /// Blocks the calling thread until the result arrives.
    pub fn wait(mut self) -> Result<T, E> {
        self.wait_inner(None).unwrap_or_else(shutdown)
    }

    /// Blocks up to `timeout`; gives the completion back if it is still pending.
    pub fn wait_timeout(mut self, timeout: Duration) -> Result<Result<T, E>, Self> {
        match self.wait_inner(Some(Instant::now() + timeout)) {
            Some(r) => Ok(r),
            None => Err(self),
        }
    }

    /// The result if it has arrived, without blocking.
    pub fn try_take(&mut self) -> Option<Result<T, E>> {
        match &mut self.inner {
            Inner::Slot { slot, taken } => {
                if *taken {
                    return None;
                }
                let mut state = lock(slot);
                if state.closed {
                    *taken = true;
                    Some(state.value.take().unwrap_or_else(shutdown))
                } else {
                    None
                }
            }
            Inner::Mapped(source) => source.try_source(),
        }
    }

    /// Transforms the result once it arrives: how a store answers with its own value and error
    /// from the acknowledgement of the record it appended. `f` runs on the thread that takes
    /// the result (the waiter or the polling task), never on the writer thread.
    pub fn map<U, E2, F>(self, f: F) -> Completion<U, E2>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(Result<T, E>) -> Result<U, E2> + Send + 'static,
        E2: From<LogError>,
    {
        Completion {
            inner: Inner::Mapped(Box::new(Mapped {
                from: self,
                map: Some(f),
            })),
        }
    }

    /// Waits until `deadline` (forever when `None`); `None` when it passed first.
    fn wait_inner(&mut self, deadline: Option<Instant>) -> Option<Result<T, E>> {
        match &mut self.inner {
            Inner::Slot { slot, taken } => {
                let mut state = lock(slot);
                while !state.closed {
                    state.blocked = true;
                    state = match deadline {
                        None => sync::wait(&slot.ready, state),
                        Some(deadline) => {
                            let now = Instant::now();
                            if now >= deadline {
                                return None;
                            }
                            sync::wait_timeout(&slot.ready, state, deadline - now)
                        }
                    };
                }
                *taken = true;
                Some(state.value.take().unwrap_or_else(shutdown))
            }
            Inner::Mapped(source) => source.wait_source(deadline),
        }
    }

    fn poll_inner(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, E>> {
        match &mut self.inner {
            Inner::Slot { slot, taken } => {
                assert!(!*taken, "completion polled after it resolved");
                let mut state = lock(slot);
                if state.closed {
                    *taken = true;
                    return Poll::Ready(state.value.take().unwrap_or_else(shutdown));
                }
                match &state.waker {
                    Some(existing) if existing.will_wake(cx.waker()) => {}
                    _ => state.waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            Inner::Mapped(source) => source.poll_source(cx),
        }
    }
}

impl<T, E> Completion<T, E> {
    /// True once the result has arrived (and not yet been taken).
    pub fn is_ready(&self) -> bool {
        match &self.inner {
            Inner::Slot { slot, taken } => !*taken && lock(slot).closed,
            Inner::Mapped(source) => source.ready_source(),
        }
    }
}

impl<T, E: From<LogError>> Future for Completion<T, E> {
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().poll_inner(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    #[test]
    fn wait_receives_value_from_another_thread() {
        let (tx, rx) = completion::<u32, LogError>();
        let t = std::thread::spawn(move || tx.complete(Ok(7)));
        assert_eq!(rx.wait().unwrap(), 7);
        t.join().unwrap();
    }

    #[test]
    fn dropped_completer_means_shutdown() {
        let (tx, rx) = completion::<u32, LogError>();
        drop(tx);
        assert!(matches!(rx.wait(), Err(LogError::Shutdown)));
    }

    #[test]
    fn wait_timeout_gives_back_pending() {
        let (tx, rx) = completion::<u32, LogError>();
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
        let (tx, mut rx) = completion::<&'static str, LogError>();
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
        let mut c = Completion::<u8>::ready(Ok(3u8));
        assert!(c.is_ready());
        assert_eq!(c.try_take().unwrap().unwrap(), 3);
        assert!(c.try_take().is_none());
    }

    #[derive(Debug)]
    enum Upper {
        Log(LogError),
        Refused,
    }

    impl From<LogError> for Upper {
        fn from(e: LogError) -> Self {
            Upper::Log(e)
        }
    }

    #[test]
    fn a_mapped_completion_answers_with_the_upper_layer_types() {
        let (tx, rx) = completion::<u32, LogError>();
        let mapped: Completion<String, Upper> = rx.map(|r| match r {
            Ok(7) => Err(Upper::Refused),
            Ok(v) => Ok(format!("seq {v}")),
            Err(e) => Err(Upper::Log(e)),
        });
        assert!(!mapped.is_ready());
        let mapped = mapped.wait_timeout(Duration::from_millis(1)).unwrap_err();
        tx.complete(Ok(3));
        assert!(mapped.is_ready());
        assert_eq!(mapped.wait().unwrap(), "seq 3");

        let (tx, mut rx) = completion::<u32, LogError>();
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&counter));
        let mut cx = Context::from_waker(&waker);
        let mut mapped: Completion<u32, Upper> = Completion::<u8>::ready(Ok(0)).map(|_| Ok(1));
        assert!(matches!(
            Pin::new(&mut mapped).poll(&mut cx),
            Poll::Ready(Ok(1))
        ));
        assert!(Pin::new(&mut rx).poll(&mut cx).is_pending());
        let mut refused: Completion<u32, Upper> =
            rx.map(|r| r.map_err(Upper::from).and(Err(Upper::Refused)));
        assert!(Pin::new(&mut refused).poll(&mut cx).is_pending());
        drop(tx);
        assert!(matches!(
            Pin::new(&mut refused).poll(&mut cx),
            Poll::Ready(Err(Upper::Log(LogError::Shutdown)))
        ));
    }
}
