//! Background compaction of the event store (event protocol §4, storage-and-replication §3.8).
//!
//! Trims and deletes hide events logically at once; the bytes go when a pass rewrites the sealed
//! segments that hold them. Every `compaction_check_interval_secs` one pass runs on the blocking
//! pool (never on the reactor) with `compaction_min_reclaimable_ratio`; the first pass waits one
//! whole interval so a restart loop never turns into a compaction loop. Shutdown cancels the
//! loop and stops a running pass at its next segment boundary, then waits for it before the
//! store is closed (at most one segment's scan or rewrite). A pass is crash-safe at every step
//! (a segment is swapped by an atomic rename), so a pass cut short by `SIGKILL` loses nothing
//! either.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eddy_event_store::{CompactionPolicy, CompactionReport, EventStore};
use tokio_util::sync::CancellationToken;

/// Totals over the server's life, read by `/metrics`.
#[derive(Debug, Default)]
pub struct CompactionCounters {
    passes: AtomicU64,
    failures: AtomicU64,
    segments_rewritten: AtomicU64,
    bytes_reclaimed: AtomicU64,
    batches_elided: AtomicU64,
}

impl CompactionCounters {
    fn record(&self, report: &CompactionReport) {
        self.passes.fetch_add(1, Ordering::Relaxed);
        self.segments_rewritten
            .fetch_add(report.segments_rewritten, Ordering::Relaxed);
        self.bytes_reclaimed
            .fetch_add(report.bytes_reclaimed(), Ordering::Relaxed);
        self.batches_elided
            .fetch_add(report.batches_elided, Ordering::Relaxed);
    }

    /// Writes the counters in Prometheus text format.
    pub fn sample(&self, out: &mut String) {
        let series = [
            (
                "eddy_events_compaction_passes_total",
                "Event store compaction passes completed.",
                &self.passes,
            ),
            (
                "eddy_events_compaction_failures_total",
                "Event store compaction passes that failed (the store keeps serving).",
                &self.failures,
            ),
            (
                "eddy_events_compaction_segments_rewritten_total",
                "Sealed event segments rewritten by compaction.",
                &self.segments_rewritten,
            ),
            (
                "eddy_events_compaction_bytes_reclaimed_total",
                "Disk bytes freed by event store compaction.",
                &self.bytes_reclaimed,
            ),
            (
                "eddy_events_compaction_batches_elided_total",
                "Trimmed or deleted event batches whose bytes compaction removed.",
                &self.batches_elided,
            ),
        ];
        for (name, help, value) in series {
            crate::metrics::write_counter(out, name, help, value.load(Ordering::Relaxed));
        }
    }
}

/// Runs a compaction pass every `interval` until `stop` is cancelled; the first pass comes one
/// interval after the start. A failed pass is logged and counted, and the next one is tried at
/// the next tick.
pub async fn run(
    store: Arc<EventStore>,
    policy: CompactionPolicy,
    interval: Duration,
    counters: Arc<CompactionCounters>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let pass_store = Arc::clone(&store);
        let interrupt = Arc::new(AtomicBool::new(false));
        let pass_interrupt = Arc::clone(&interrupt);
        let started = std::time::Instant::now();
        let mut pass =
            tokio::task::spawn_blocking(move || pass_store.compact_until(policy, &pass_interrupt));
        let done = tokio::select! {
            done = &mut pass => done,
            () = stop.cancelled() => {
                // Shutdown: the pass stops at the next segment boundary; wait for that.
                interrupt.store(true, Ordering::Relaxed);
                pass.await
            }
        };
        match done {
            Ok(Ok(report)) => {
                counters.record(&report);
                if report.segments_rewritten > 0 {
                    tracing::info!(
                        segments_scanned = report.segments_scanned,
                        segments_rewritten = report.segments_rewritten,
                        bytes_reclaimed = report.bytes_reclaimed(),
                        batches_elided = report.batches_elided,
                        interrupted = report.interrupted,
                        elapsed_ms = started.elapsed().as_millis(),
                        "event store compacted"
                    );
                } else {
                    tracing::debug!(
                        segments_scanned = report.segments_scanned,
                        shards_skipped = report.shards_skipped,
                        "event store compaction: nothing to reclaim"
                    );
                }
            }
            Ok(Err(e)) => {
                counters.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "event store compaction failed");
            }
            Err(e) => {
                counters.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "event store compaction panicked");
            }
        }
    }
}
