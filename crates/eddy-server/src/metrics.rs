//! Prometheus metrics: counters and histograms kept in atomics, rendered at scrape time.
//!
//! The text exposition (format 0.0.4) is written here rather than through `prometheus-client`:
//! per-command series are indexes into fixed arrays on the hot path (a label-keyed family
//! would be a map lookup per request), and the scrape-time samplers of storage, throttling and
//! the metric aliases ([`compat`]) append their own lines.
//!
//! Gauges (uptime, open connections) are sampled from live state when `/metrics` is scraped, so
//! they cannot drift from the state they describe. Per-command series are registered once at
//! start-up from the protocol command tables, so every command has a series from the first
//! scrape (zeros included) and the hot path is an index into a fixed array, never a map lookup.

pub mod compat;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The protocols eddy serves, used as the `protocol` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The Iggy stream protocol.
    Stream,
    /// The Celeriant event protocol.
    Event,
    /// Node-to-node replication.
    Replication,
}

impl Protocol {
    /// Every protocol, in label order.
    pub const ALL: [Protocol; 3] = [Protocol::Stream, Protocol::Event, Protocol::Replication];

    /// The `protocol` label value.
    pub const fn label(self) -> &'static str {
        match self {
            Protocol::Stream => "stream",
            Protocol::Event => "event",
            Protocol::Replication => "replication",
        }
    }

    /// The protocol's position in [`Protocol::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// Upper bounds (seconds) of the request latency histogram buckets.
pub const LATENCY_BUCKETS_SECONDS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 10.0,
];

/// A fixed-bucket latency histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS_SECONDS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        if let Some(i) = LATENCY_BUCKETS_SECONDS.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Writes the bucket, sum and count lines; `labels` (`a="b",c="d"`) may be empty.
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let (le_prefix, own) = if labels.is_empty() {
            (String::new(), String::new())
        } else {
            (format!("{labels},"), format!("{{{labels}}}"))
        };
        let mut cumulative = 0;
        for (i, bound) in LATENCY_BUCKETS_SECONDS.iter().enumerate() {
            cumulative += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{le_prefix}le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{le_prefix}le=\"+Inf\"}} {count}");
        #[allow(clippy::cast_precision_loss)]
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{own} {sum}");
        let _ = writeln!(out, "{name}_count{own} {count}");
    }
}

/// Counters of one command.
#[derive(Debug)]
pub struct CommandStats {
    name: &'static str,
    requests: AtomicU64,
    errors: AtomicU64,
    latency: Histogram,
}

/// A scrape-time sampler: appends its own series (with HELP and TYPE lines) to the output.
pub type Sampler = Box<dyn Fn(&mut String) + Send + Sync>;

/// All of the server's metrics.
pub struct Metrics {
    started: Instant,
    open_connections: [AtomicI64; 3],
    accepted_connections: [AtomicU64; 3],
    commands: [Vec<CommandStats>; 3],
    samplers: Mutex<Vec<Sampler>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

/// Writes one unlabelled counter with its `HELP` and `TYPE` lines (for scrape-time samplers).
pub fn write_counter(out: &mut String, name: &str, help: &str, value: u64) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
    );
}

impl Metrics {
    /// Creates the registry with one series per command name of each protocol. A command is later
    /// addressed by its index in the slice given here.
    pub fn new(stream_commands: &[&'static str], event_commands: &[&'static str]) -> Arc<Self> {
        let stats = |names: &[&'static str]| {
            names
                .iter()
                .map(|name| CommandStats {
                    name,
                    requests: AtomicU64::new(0),
                    errors: AtomicU64::new(0),
                    latency: Histogram::default(),
                })
                .collect()
        };
        Arc::new(Self {
            started: Instant::now(),
            open_connections: Default::default(),
            accepted_connections: Default::default(),
            commands: [stats(stream_commands), stats(event_commands), Vec::new()],
            samplers: Mutex::new(Vec::new()),
        })
    }

    /// Counts a new connection; the returned guard counts it closed when dropped.
    pub fn connection_opened(self: &Arc<Self>, protocol: Protocol) -> ConnectionGuard {
        self.open_connections[protocol.index()].fetch_add(1, Ordering::Relaxed);
        self.accepted_connections[protocol.index()].fetch_add(1, Ordering::Relaxed);
        ConnectionGuard {
            metrics: Arc::clone(self),
            protocol,
        }
    }

    /// Currently open connections of a protocol.
    pub fn open_connections(&self, protocol: Protocol) -> i64 {
        self.open_connections[protocol.index()].load(Ordering::Relaxed)
    }

    /// Records one handled request: its command index (as registered), outcome and latency.
    /// An out-of-range index is a programming error, caught in debug builds and ignored otherwise.
    pub fn record_request(&self, protocol: Protocol, command: usize, ok: bool, elapsed: Duration) {
        let Some(stats) = self.commands[protocol.index()].get(command) else {
            debug_assert!(
                false,
                "unregistered command index {command} for {protocol:?}"
            );
            return;
        };
        stats.requests.fetch_add(1, Ordering::Relaxed);
        if !ok {
            stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        stats.latency.observe(elapsed);
    }

    /// Requests recorded for a command and how many of them failed (zeros for an unknown
    /// index).
    pub fn command_counts(&self, protocol: Protocol, command: usize) -> (u64, u64) {
        self.commands[protocol.index()]
            .get(command)
            .map_or((0, 0), |s| {
                (
                    s.requests.load(Ordering::Relaxed),
                    s.errors.load(Ordering::Relaxed),
                )
            })
    }

    /// Writes one command's latency histogram under another name, without labels (the metric
    /// aliases of other servers).
    pub fn render_command_histogram(
        &self,
        out: &mut String,
        name: &str,
        help: &str,
        protocol: Protocol,
        command: usize,
    ) {
        if let Some(stats) = self.commands[protocol.index()].get(command) {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            stats.latency.render(out, name, "");
        }
    }

    /// Adds a scrape-time sampler (storage figures, session counts...).
    pub fn add_sampler(&self, sampler: Sampler) {
        eddy_log::lock(&self.samplers).push(sampler);
    }

    /// Renders every series in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        out.push_str("# HELP eddy_build_info Build information; the value is always 1.\n");
        out.push_str("# TYPE eddy_build_info gauge\n");
        let _ = writeln!(
            out,
            "eddy_build_info{{version=\"{}\",profile=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
        );
        out.push_str("# HELP eddy_uptime_seconds Seconds since the server started.\n");
        out.push_str("# TYPE eddy_uptime_seconds gauge\n");
        let _ = writeln!(
            out,
            "eddy_uptime_seconds {:.3}",
            self.started.elapsed().as_secs_f64()
        );
        out.push_str("# HELP eddy_open_connections Connections currently open, per protocol.\n");
        out.push_str("# TYPE eddy_open_connections gauge\n");
        for p in Protocol::ALL {
            let _ = writeln!(
                out,
                "eddy_open_connections{{protocol=\"{}\"}} {}",
                p.label(),
                self.open_connections(p)
            );
        }
        out.push_str("# HELP eddy_connections_total Connections accepted, per protocol.\n");
        out.push_str("# TYPE eddy_connections_total counter\n");
        for p in Protocol::ALL {
            let _ = writeln!(
                out,
                "eddy_connections_total{{protocol=\"{}\"}} {}",
                p.label(),
                self.accepted_connections[p.index()].load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP eddy_requests_total Requests handled, per protocol and command.\n");
        out.push_str("# TYPE eddy_requests_total counter\n");
        self.for_each_command(|p, s| {
            let _ = writeln!(
                out,
                "eddy_requests_total{{protocol=\"{}\",command=\"{}\"}} {}",
                p.label(),
                s.name,
                s.requests.load(Ordering::Relaxed)
            );
        });
        out.push_str(
            "# HELP eddy_request_errors_total Requests answered with an error, per protocol and command.\n",
        );
        out.push_str("# TYPE eddy_request_errors_total counter\n");
        self.for_each_command(|p, s| {
            let _ = writeln!(
                out,
                "eddy_request_errors_total{{protocol=\"{}\",command=\"{}\"}} {}",
                p.label(),
                s.name,
                s.errors.load(Ordering::Relaxed)
            );
        });
        out.push_str(
            "# HELP eddy_request_duration_seconds Request handling time, per protocol and command.\n",
        );
        out.push_str("# TYPE eddy_request_duration_seconds histogram\n");
        let mut hist = String::new();
        self.for_each_command(|p, s| {
            let labels = format!("protocol=\"{}\",command=\"{}\"", p.label(), s.name);
            s.latency
                .render(&mut hist, "eddy_request_duration_seconds", &labels);
        });
        out.push_str(&hist);
        for sampler in eddy_log::lock(&self.samplers).iter() {
            sampler(&mut out);
        }
        out
    }

    fn for_each_command(&self, mut f: impl FnMut(Protocol, &CommandStats)) {
        for p in Protocol::ALL {
            for s in &self.commands[p.index()] {
                f(p, s);
            }
        }
    }
}

/// Decrements the open-connection gauge when the connection ends.
#[derive(Debug)]
pub struct ConnectionGuard {
    metrics: Arc<Metrics>,
    protocol: Protocol,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.metrics.open_connections[self.protocol.index()].fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_connections_and_commands() {
        let m = Metrics::new(&["ping", "send_messages"], &["write"]);
        let g = m.connection_opened(Protocol::Stream);
        m.record_request(Protocol::Stream, 1, true, Duration::from_micros(80));
        m.record_request(Protocol::Stream, 1, false, Duration::from_millis(3));
        let text = m.render();
        assert!(text.contains("eddy_open_connections{protocol=\"stream\"} 1"));
        assert!(
            text.contains("eddy_requests_total{protocol=\"stream\",command=\"send_messages\"} 2")
        );
        assert!(text.contains(
            "eddy_request_errors_total{protocol=\"stream\",command=\"send_messages\"} 1"
        ));
        assert!(text.contains("eddy_requests_total{protocol=\"event\",command=\"write\"} 0"));
        assert!(text.contains(
            "eddy_request_duration_seconds_bucket{protocol=\"stream\",command=\"send_messages\",le=\"0.0001\"} 1"
        ));
        assert!(text.contains(
            "eddy_request_duration_seconds_count{protocol=\"stream\",command=\"send_messages\"} 2"
        ));
        drop(g);
        assert_eq!(m.open_connections(Protocol::Stream), 0);
    }

    #[test]
    fn every_series_line_is_well_formed() {
        let m = Metrics::new(&["ping"], &[]);
        m.add_sampler(Box::new(|out| {
            out.push_str("# TYPE eddy_test gauge\neddy_test 7\n");
        }));
        for line in m.render().lines() {
            if line.starts_with('#') {
                assert!(
                    line.starts_with("# HELP ") || line.starts_with("# TYPE "),
                    "{line}"
                );
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("series and value");
            assert!(series.starts_with("eddy_"), "{line}");
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
