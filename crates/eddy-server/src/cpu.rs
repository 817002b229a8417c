//! Whether this machine's CPUs are saturated, for the event store's group-commit window.
//!
//! A window (`--fsync-delay-us`) makes the writes queued behind a busy shard wait for more
//! company before their fdatasync. While the CPUs have idle time the writers are paced by the
//! disk, and every microsecond waited is a microsecond of throughput lost (measured: a 1 ms
//! window cost 10 and 30 connections 0.57-0.84x their writes/s). While the CPUs are saturated
//! the writers are paced by CPU, a sooner fdatasync only makes the next group smaller, and
//! every fdatasync saved is CPU handed back to the requests (1,000 connections: 0.8x the CPU
//! per write). So with `--fsync-delay-when busy` (the default) the shard logs wait out their
//! window only while [`saturation_gate`] is open, which [`sample`] keeps in step with the
//! machine's CPU time in `/proc/stat`: open once the CPUs were busy at least
//! [`OPEN_AT`] of an interval, closed again below [`CLOSE_BELOW`] (the gap keeps the
//! saving the window itself makes from closing it again).
//!
//! The gate is one per process: saturation is the machine's, whichever server asks.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use eddy_log::WindowGate;
use tokio_util::sync::CancellationToken;

/// Busy share of an interval at or above which the gate opens.
pub const OPEN_AT: f64 = 0.95;
/// Busy share of an interval below which an open gate closes.
pub const CLOSE_BELOW: f64 = 0.80;
/// How often `/proc/stat` is read: long enough for its 10 ms ticks to resolve a few per cent
/// on two CPUs, short enough to follow a load that starts or stops.
pub const INTERVAL: Duration = Duration::from_millis(250);

/// The process's gate, closed until [`sample`] sees saturated CPUs.
pub fn saturation_gate() -> Arc<WindowGate> {
    static GATE: OnceLock<Arc<WindowGate>> = OnceLock::new();
    Arc::clone(GATE.get_or_init(|| Arc::new(WindowGate::new(false))))
}

/// Cumulative CPU time of all CPUs, in ticks: busy and idle (idle and I/O wait).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// Ticks spent running something (user, nice, system, interrupts, stolen by the host).
    pub busy: u64,
    /// Ticks idle or waiting for I/O.
    pub idle: u64,
}

/// The aggregate `cpu` line of `/proc/stat` (`user nice system idle iowait irq softirq
/// steal ...`); `None` when it is missing or malformed.
pub fn parse_proc_stat(text: &str) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_ascii_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if fields.len() < 5 {
        return None;
    }
    let idle = fields[3] + fields[4];
    let busy = fields.iter().sum::<u64>() - idle;
    Some(CpuTimes { busy, idle })
}

/// The busy share between two readings; `None` when no tick passed (or the counters went
/// back).
#[allow(clippy::cast_precision_loss)] // tick counts of one interval
pub fn busy_share(earlier: CpuTimes, later: CpuTimes) -> Option<f64> {
    let busy = later.busy.checked_sub(earlier.busy)?;
    let idle = later.idle.checked_sub(earlier.idle)?;
    let total = busy + idle;
    (total > 0).then(|| busy as f64 / total as f64)
}

/// The gate's next state after an interval with `share` busy (hysteresis between
/// [`CLOSE_BELOW`] and [`OPEN_AT`]).
pub fn next_state(open: bool, share: f64) -> bool {
    if open {
        share >= CLOSE_BELOW
    } else {
        share >= OPEN_AT
    }
}

fn read() -> Option<CpuTimes> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Keeps `gate` in step with the machine's CPU saturation until `stop`; closes it when it
/// stops. Where `/proc/stat` cannot be read the gate stays closed (no window).
pub async fn sample(gate: Arc<WindowGate>, stop: CancellationToken) {
    let Some(mut last) = read() else {
        tracing::info!("/proc/stat unreadable: the event group-commit window stays off");
        return;
    };
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let Some(now) = read() else { continue };
        if let Some(share) = busy_share(last, now) {
            let open = gate.is_open();
            let next = next_state(open, share);
            if next != open {
                tracing::debug!(busy = share, open = next, "event group-commit window gate");
                gate.set(next);
            }
        }
        last = now;
    }
    gate.set(false);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_aggregate_line() {
        let text = "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\nintr 1\n";
        let t = parse_proc_stat(text).unwrap();
        assert_eq!(t.idle, 820);
        assert_eq!(t.busy, 100 + 5 + 50 + 3 + 2 + 10);
        assert_eq!(parse_proc_stat("cpu0 1 2 3 4 5\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 2 x 4 5\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 2 3\n"), None);
        // A kernel with fewer columns (no steal) still parses.
        assert_eq!(
            parse_proc_stat("cpu  1 0 1 6 2\n"),
            Some(CpuTimes { busy: 2, idle: 8 })
        );
    }

    #[test]
    fn busy_share_of_an_interval() {
        let a = CpuTimes { busy: 10, idle: 90 };
        let b = CpuTimes {
            busy: 105,
            idle: 95,
        };
        assert!((busy_share(a, b).unwrap() - 0.95).abs() < 1e-9);
        assert_eq!(busy_share(a, a), None);
        assert_eq!(busy_share(b, a), None);
    }

    #[test]
    fn the_gate_opens_when_saturated_and_closes_well_below() {
        assert!(!next_state(false, 0.90));
        assert!(next_state(false, 0.95));
        assert!(
            next_state(true, 0.85),
            "the window's own saving keeps it open"
        );
        assert!(!next_state(true, 0.79));
    }

    #[tokio::test]
    async fn the_sampler_closes_its_gate_when_stopped() {
        let gate = Arc::new(WindowGate::new(true));
        let stop = CancellationToken::new();
        stop.cancel();
        sample(Arc::clone(&gate), stop).await;
        assert!(!gate.is_open());
    }

    #[test]
    fn this_machine_has_a_reading() {
        // Linux CI: the server's sampler depends on it.
        let t = read().expect("/proc/stat");
        assert!(t.busy + t.idle > 0);
    }
}
