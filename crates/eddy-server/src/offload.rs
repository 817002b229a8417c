//! Keeping storage waits off the runtime's workers.
//!
//! The storage API is synchronous: a call can block its thread on a lock or a condition
//! variable. On a tokio worker that stalls every task scheduled there (pings, `/health`, the
//! other port) for as long as the storage waits. The places it can wait, and what the server
//! does about each:
//!
//! * **Submitting a commit** (`Store::commit`, the event store's write/trim/delete): waits
//!   while a log has more than its back-pressure threshold queued, and a metadata commit may
//!   wait for the applier to catch up. Metadata commits are always submitted from the blocking
//!   pool ([`blocking`]); appends and event mutations, on the hot path, are submitted inline
//!   while the bytes this server has in flight stay under [`INLINE_SUBMIT_BYTES`] (far below
//!   the 256 MiB at which a log pushes back), and from the blocking pool beyond it
//!   ([`InFlight`]). The completions are then awaited, never waited on.
//! * **Reading the metadata** (`Store::read_metadata`): the applier holds the metadata lock
//!   while it creates, deletes or purges partition files (a 1,000-partition `CREATE_TOPIC` is
//!   thousands of fsyncs). While such an operation is in flight ([`SlowCommits`]) readers
//!   leave their worker first ([`tokio::task::block_in_place`]); otherwise they read inline.
//! * **Cold reads** (polls, event reads, lists, snapshots) already run on the blocking pool.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use eddy_stream_store::MetadataOp;

/// Bytes of appends and event mutations this server may have submitted and not yet seen
/// acknowledged before new submissions move to the blocking pool.
pub const INLINE_SUBMIT_BYTES: u64 = 64 * 1024 * 1024;

/// Runs `f` on the blocking pool and awaits it (a panic in `f` resumes here).
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    }
}

/// Runs `f`, which may block for long, so that the current worker's other tasks move to
/// another thread first (on a multi-thread runtime; elsewhere `f` simply runs).
pub fn may_block<T>(f: impl FnOnce() -> T) -> T {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// True for metadata operations whose apply creates, deletes or purges partition files while
/// the metadata lock is held.
pub fn touches_files(op: &MetadataOp) -> bool {
    matches!(
        op,
        MetadataOp::DeleteStream { .. }
            | MetadataOp::PurgeStream { .. }
            | MetadataOp::CreateTopic { .. }
            | MetadataOp::DeleteTopic { .. }
            | MetadataOp::PurgeTopic { .. }
            | MetadataOp::CreatePartitions { .. }
            | MetadataOp::DeletePartitions { .. }
    )
}

/// Metadata operations with file effects in flight: while there is one, a metadata read may
/// wait behind it.
#[derive(Debug, Default)]
pub struct SlowCommits(AtomicUsize);

impl SlowCommits {
    /// Counts one operation in flight until the guard drops.
    pub fn enter(&self) -> SlowCommitGuard<'_> {
        self.0.fetch_add(1, Ordering::AcqRel);
        SlowCommitGuard(self)
    }

    /// True while an operation with file effects is in flight.
    pub fn any(&self) -> bool {
        self.0.load(Ordering::Acquire) > 0
    }
}

/// Ends a [`SlowCommits::enter`].
#[derive(Debug)]
pub struct SlowCommitGuard<'a>(&'a SlowCommits);

impl Drop for SlowCommitGuard<'_> {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Bytes submitted to storage and not yet acknowledged.
#[derive(Debug, Default)]
pub struct InFlight(AtomicU64);

impl InFlight {
    /// Counts `bytes` until the guard drops; says whether to submit them from the blocking
    /// pool (when the bytes in flight, these included, pass [`INLINE_SUBMIT_BYTES`]).
    pub fn enter(&self, bytes: u64) -> (InFlightGuard<'_>, bool) {
        let before = self.0.fetch_add(bytes, Ordering::AcqRel);
        let offload = before.saturating_add(bytes) > INLINE_SUBMIT_BYTES;
        (InFlightGuard { of: self, bytes }, offload)
    }

    /// Bytes in flight now.
    #[cfg(test)]
    pub fn bytes(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// Ends an [`InFlight::enter`].
#[derive(Debug)]
pub struct InFlightGuard<'a> {
    of: &'a InFlight,
    bytes: u64,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.of.0.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_bytes_offload_past_the_threshold() {
        let flight = InFlight::default();
        let (a, offload) = flight.enter(INLINE_SUBMIT_BYTES);
        assert!(!offload);
        let (b, offload) = flight.enter(1);
        assert!(offload);
        drop(a);
        assert_eq!(flight.bytes(), 1);
        drop(b);
        assert_eq!(flight.bytes(), 0);
        let slow = SlowCommits::default();
        let g = slow.enter();
        assert!(slow.any());
        drop(g);
        assert!(!slow.any());
    }

    #[tokio::test]
    async fn may_block_runs_on_any_runtime() {
        assert_eq!(may_block(|| 7), 7);
        assert_eq!(blocking(|| 8).await, 8);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn may_block_leaves_the_worker_on_a_multi_thread_runtime() {
        assert_eq!(may_block(|| 9), 9);
    }
}
