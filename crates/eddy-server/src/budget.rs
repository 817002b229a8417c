//! The global budget of request bodies in flight (`--max-inflight-request-bytes`), shared by
//! the stream and event ports.
//!
//! Without it memory grows with what clients *declare*: every connection that sent a header
//! got a buffer for its whole frame (up to 64 MiB on the stream port, 16 MiB on the event
//! port), so a few hundred connections that send a header, or half a body, and stall could
//! take gigabytes. Now:
//!
//! * A frame of at most [`UNBUDGETED_FRAME`] bytes (every login, ping, metadata command and
//!   small write) is read without the budget: each connection holds at most one, and
//!   `--max-connections` bounds the connections. Its buffer is all a connection keeps between
//!   requests.
//! * A larger frame first reserves its bytes here (the event port: its frame, plus its
//!   decompressed body when compressed), as soon as its header has been read and before any
//!   room is made for its body; only then is its buffer allocated. The reservation is returned
//!   once the request has been answered. A frame larger than the whole budget waits until
//!   nothing else is reserved, then takes all of it.
//! * A frame that does not fit waits for room (first come, first served: a large frame is not
//!   overtaken for ever by smaller ones). The event port waits until the frame's own deadline
//!   (`--client-connection-timeout-ms`) and then closes the connection, as for any frame not
//!   complete by then (the protocol's busy answer needs the request's correlation id, which is
//!   in the body that was never read). The stream port waits at most [`STREAM_WAIT`] and then
//!   answers `TransientNotAccepted` (58) at once and skips the body as it arrives: the
//!   published SDK replays a request answered 58 on the same connection 50 ms later.
//!
//! So the request bodies in memory stay under the budget (plus one frame larger than it, if
//! any), whatever clients declare or leave half sent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Largest frame (header included) read without a reservation.
pub const UNBUDGETED_FRAME: usize = 64 * 1024;

/// Longest a stream-protocol frame waits for room before it is answered
/// `TransientNotAccepted`: well inside the published SDK's 30 s reply deadline, long enough
/// for the frames in flight on a healthy server to be stored and answered.
pub const STREAM_WAIT: Duration = Duration::from_secs(5);

/// Largest budget accepted (a semaphore counts it in bytes).
pub const MAX_BUDGET: u64 = 1 << 40;

/// The budget and its figures.
#[derive(Debug)]
pub struct RequestBudget {
    permits: Arc<Semaphore>,
    total: u64,
    waits: AtomicU64,
    refused: AtomicU64,
}

/// Bytes held in the budget until dropped.
#[derive(Debug)]
pub struct Reservation {
    _permit: OwnedSemaphorePermit,
}

impl RequestBudget {
    /// A budget of `total` bytes (clamped to `1..=MAX_BUDGET`).
    pub fn new(total: u64) -> Self {
        let total = total.clamp(1, MAX_BUDGET);
        Self {
            permits: Arc::new(Semaphore::new(usize::try_from(total).unwrap_or(usize::MAX))),
            total,
            waits: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Whether a frame of `frame_bytes` (what it will hold in memory) must be reserved.
    pub fn needs_reservation(frame_bytes: u64) -> bool {
        frame_bytes > UNBUDGETED_FRAME as u64
    }

    fn permits_for(&self, bytes: u64) -> u32 {
        u32::try_from(bytes.min(self.total)).unwrap_or(u32::MAX)
    }

    /// Reserves `bytes` at once, or `None` when the budget lacks room (or others wait).
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        Arc::clone(&self.permits)
            .try_acquire_many_owned(self.permits_for(bytes))
            .ok()
            .map(|permit| Reservation { _permit: permit })
    }

    /// Reserves `bytes`, waiting (in turn) for room; counts the wait. Cancel-safe: dropping
    /// the future gives up its place.
    pub async fn reserve(&self, bytes: u64) -> Reservation {
        if let Some(reserved) = self.try_reserve(bytes) {
            return reserved;
        }
        self.count_wait();
        self.reserve_in_turn(bytes).await
    }

    /// Counts a frame that waits for room (callers that wait with
    /// [`RequestBudget::reserve_in_turn`]).
    pub fn count_wait(&self) {
        self.waits.fetch_add(1, Ordering::Relaxed);
    }

    /// Reserves `bytes`, waiting for room in turn, without counting a wait.
    pub async fn reserve_in_turn(&self, bytes: u64) -> Reservation {
        let permit = Arc::clone(&self.permits)
            .acquire_many_owned(self.permits_for(bytes))
            .await
            .expect("the budget's semaphore is never closed");
        Reservation { _permit: permit }
    }

    /// Counts a frame that found no room in time (answered busy, or closed).
    pub fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes reserved now.
    pub fn in_flight(&self) -> u64 {
        let free = self.permits.available_permits() as u64;
        self.total.saturating_sub(free)
    }

    /// Appends the budget's series to a `/metrics` scrape.
    pub fn sample(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "# HELP eddy_request_bytes_in_flight Bytes of request frames above 64 KiB being read \
             or handled now (held in --max-inflight-request-bytes).\n\
             # TYPE eddy_request_bytes_in_flight gauge\n\
             eddy_request_bytes_in_flight {}\n\
             # HELP eddy_request_budget_bytes The budget of request bytes in flight \
             (--max-inflight-request-bytes).\n\
             # TYPE eddy_request_budget_bytes gauge\n\
             eddy_request_budget_bytes {}",
            self.in_flight(),
            self.total
        );
        crate::metrics::write_counter(
            out,
            "eddy_request_budget_waits_total",
            "Request frames that waited for room in --max-inflight-request-bytes.",
            self.waits.load(Ordering::Relaxed),
        );
        crate::metrics::write_counter(
            out,
            "eddy_request_budget_refusals_total",
            "Request frames that found no room in time (stream: answered TransientNotAccepted; \
             event: connection closed at its deadline).",
            self.refused.load(Ordering::Relaxed),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_wait_for_room_in_turn() {
        let budget = Arc::new(RequestBudget::new(100));
        assert!(!RequestBudget::needs_reservation(UNBUDGETED_FRAME as u64));
        assert!(RequestBudget::needs_reservation(
            UNBUDGETED_FRAME as u64 + 1
        ));
        let a = budget.try_reserve(60).expect("room");
        assert_eq!(budget.in_flight(), 60);
        assert!(budget.try_reserve(50).is_none());
        let waiting = {
            let budget = Arc::clone(&budget);
            tokio::spawn(async move { budget.reserve(50).await })
        };
        tokio::task::yield_now().await;
        assert!(budget.try_reserve(10).is_none(), "a waiter keeps its turn");
        drop(a);
        let b = waiting.await.unwrap();
        assert_eq!(budget.in_flight(), 50);
        // Larger than the whole budget: takes all of it once free.
        let whole = {
            let budget = Arc::clone(&budget);
            tokio::spawn(async move { budget.reserve(1_000).await })
        };
        tokio::task::yield_now().await;
        assert!(!whole.is_finished());
        drop(b);
        let whole = whole.await.unwrap();
        assert_eq!(budget.in_flight(), 100);
        drop(whole);
        budget.refused();
        let mut out = String::new();
        budget.sample(&mut out);
        assert!(out.contains("eddy_request_bytes_in_flight 0"), "{out}");
        assert!(out.contains("eddy_request_budget_bytes 100"), "{out}");
        assert!(out.contains("eddy_request_budget_waits_total 2"), "{out}");
        assert!(
            out.contains("eddy_request_budget_refusals_total 1"),
            "{out}"
        );
    }
}
