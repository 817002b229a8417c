//! What a benchmark measures and keeps: [`Recorder`] (per-worker latency histograms, a shared
//! operation counter sampled into a throughput timeline, a live progress bar), and the
//! serialisable [`BenchResult`] / [`Run`] that the JSON result file, the HTML report and
//! `eddy bench compare` read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

/// Largest latency a histogram records exactly, in microseconds (longer ones saturate).
pub const MAX_LATENCY_US: u64 = 600_000_000;
/// Seconds between two points of a throughput timeline.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(250);
/// The percentiles of a run's latency spectrum (the report's percentile chart).
pub const SPECTRUM: [f64; 14] = [
    0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.999, 100.0,
];

/// A latency histogram in microseconds.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("static histogram bounds are valid")
}

/// Latency figures of a run, microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Smallest.
    pub min: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest.
    pub max: u64,
}

impl Latency {
    /// The figures of a histogram.
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            count: h.len(),
            min: h.min(),
            mean: h.mean(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// One point of a throughput timeline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the run started (end of the interval).
    pub t: f64,
    /// Operations completed in the interval.
    pub ops: u64,
    /// Errors in the interval.
    pub errors: u64,
    /// The server's resident memory at the end of the interval, MiB (`VmRSS`), when its pid
    /// is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_mib: Option<f64>,
}

/// One measured run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// What ran (`durable producers`, `occ, 100 connections`).
    pub name: String,
    /// Which system served it (`eddy`, `baseline`, `floor`, `postgres`, `disk`).
    pub system: String,
    /// Requests completed (batches sent, polls, writes).
    pub operations: u64,
    /// Messages or events they carried.
    pub messages: u64,
    /// Payload bytes they carried.
    pub bytes: u64,
    /// Failed requests.
    pub errors: u64,
    /// Measured seconds.
    pub seconds: f64,
    /// `operations / seconds`.
    pub ops_per_sec: f64,
    /// `messages / seconds`.
    pub messages_per_sec: f64,
    /// `bytes / seconds / 1e6`.
    pub mb_per_sec: f64,
    /// Per-request latency.
    pub latency_us: Latency,
    /// `(percentile, microseconds)` for the percentile chart.
    pub spectrum: Vec<(f64, u64)>,
    /// Throughput over time.
    pub timeline: Vec<Sample>,
    /// Server CPU (user + system) per operation, when the server's pid is known.
    pub server_cpu_us_per_op: Option<f64>,
    /// The same split by thread group (a thread's name without its trailing `-N`: the async
    /// workers, the commit pool, the index flusher...). Threads that ended during the run
    /// (idle blocking-pool threads) are missing from it. A component's share moves less with
    /// the machine's drift than the total does.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub server_threads_cpu_us_per_op: std::collections::BTreeMap<String, f64>,
    /// This process's CPU per operation.
    pub client_cpu_us_per_op: Option<f64>,
    /// Event store commits per fdatasync, from the server's `/metrics`.
    pub writes_per_fsync: Option<f64>,
    /// The server's peak resident memory at the end of the point, MiB (`VmHWM`: since the
    /// server started, so with `--running` it may predate the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_peak_rss_mib: Option<f64>,
}

/// A count as a float (counts stay far below 2^52, where the conversion is exact).
#[allow(clippy::cast_precision_loss)]
pub fn f(v: u64) -> f64 {
    v as f64
}

impl Run {
    /// Fills the rates and latency figures from the counts, `seconds` and `latencies`.
    #[must_use]
    pub fn finish(mut self, latencies: &Histogram<u64>) -> Self {
        let secs = self.seconds.max(1e-9);
        self.ops_per_sec = f(self.operations) / secs;
        self.messages_per_sec = f(self.messages) / secs;
        self.mb_per_sec = f(self.bytes) / secs / 1e6;
        self.latency_us = Latency::of(latencies);
        self.spectrum = if latencies.is_empty() {
            Vec::new()
        } else {
            SPECTRUM
                .iter()
                .map(|&p| (p, latencies.value_at_percentile(p)))
                .collect()
        };
        self
    }
}

/// A whole benchmark: what was asked, what ran, what it means.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    /// `streams` or `events`.
    pub kind: String,
    /// Version of the eddy that ran the benchmark.
    pub eddy_version: String,
    /// Unix seconds at the start.
    pub started_at: u64,
    /// CPUs of the machine.
    pub cpus: usize,
    /// `/proc/loadavg` before the run.
    pub load_average: String,
    /// The arguments, as given.
    pub config: serde_json::Value,
    /// The runs, in order.
    pub runs: Vec<Run>,
    /// Derived findings (ratios to the disk, to PostgreSQL, between builds).
    pub notes: Vec<String>,
}

/// Counts shared by the workers of a run and its sampler.
#[derive(Debug, Default)]
pub struct Counters {
    /// Completed operations.
    pub ops: AtomicU64,
    /// Failed operations.
    pub errors: AtomicU64,
}

impl Counters {
    /// One more completed operation.
    pub fn done(&self) {
        self.ops.fetch_add(1, Ordering::Relaxed);
    }

    /// One more failure.
    pub fn failed(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Samples a run's counters into a timeline and drives its progress bar.
#[derive(Debug)]
pub struct Recorder {
    counters: Arc<Counters>,
    bar: ProgressBar,
    started: Instant,
    last: (u64, u64),
    timeline: Vec<Sample>,
    /// The server whose resident memory each sample records.
    server_pid: Option<u32>,
}

impl Recorder {
    /// A recorder for a run of `total` operations (`None`: unknown, a spinner), labelled
    /// `label` on the progress bar.
    pub fn new(label: &str, total: Option<u64>) -> Self {
        let bar = match total {
            Some(n) => ProgressBar::new(n),
            None => ProgressBar::new_spinner(),
        };
        let template = if total.is_some() {
            "{prefix:>24} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}"
        } else {
            "{prefix:>24} [{elapsed_precise}] {spinner} {pos} {msg}"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar.set_prefix(label.to_owned());
        Self {
            counters: Arc::new(Counters::default()),
            bar,
            started: Instant::now(),
            last: (0, 0),
            timeline: Vec::new(),
            server_pid: None,
        }
    }

    /// Records server `pid`'s resident memory with every sample (none when `None`).
    #[must_use]
    pub fn with_server(mut self, pid: Option<u32>) -> Self {
        self.server_pid = pid;
        self
    }

    /// The counters the workers update.
    pub fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }

    /// Starts the clock (the timeline is relative to this instant).
    pub fn start(&mut self) {
        self.started = Instant::now();
        self.last = (0, 0);
        self.timeline.clear();
    }

    /// Takes a timeline point and refreshes the bar (rate of the last interval, elapsed,
    /// errors).
    pub fn sample(&mut self) {
        let ops = self.counters.ops.load(Ordering::Relaxed);
        let errors = self.counters.errors.load(Ordering::Relaxed);
        let t = self.started.elapsed().as_secs_f64();
        let previous_t = self.timeline.last().map_or(0.0, |s| s.t);
        let point = Sample {
            t,
            ops: ops - self.last.0,
            errors: errors - self.last.1,
            rss_mib: self.server_pid.and_then(rss_mib),
        };
        let rate = f(point.ops) / (t - previous_t).max(1e-9);
        self.timeline.push(point);
        self.last = (ops, errors);
        self.bar.set_position(ops);
        self.bar
            .set_message(format!("{rate:.0} ops/s, {errors} errors"));
    }

    /// Samples every [`SAMPLE_INTERVAL`] until `done` resolves, then once more.
    pub async fn sample_until<F: std::future::Future>(&mut self, done: F) -> F::Output {
        let mut done = std::pin::pin!(done);
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + SAMPLE_INTERVAL,
            SAMPLE_INTERVAL,
        );
        loop {
            tokio::select! {
                output = &mut done => {
                    self.sample();
                    return output;
                }
                _ = tick.tick() => self.sample(),
            }
        }
    }

    /// Seconds since [`Recorder::start`].
    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Clears the bar and returns the timeline.
    pub fn finish(self) -> Vec<Sample> {
        self.bar.finish_and_clear();
        self.timeline
    }
}

/// Peak resident memory of process `pid` in MiB, from `VmHWM` in `/proc/<pid>/status`; `None`
/// when it cannot be read (another OS, a process that is gone).
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "VmHWM:")
}

/// Resident memory of process `pid` now, in MiB (`VmRSS`); `None` when it cannot be read.
pub fn rss_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "VmRSS:")
}

/// A `kB` field of `/proc/<pid>/status` in MiB.
fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(f(kib) / 1024.0)
}

/// CPU seconds (user + system) of process `pid`, from `/proc/<pid>/stat`; `None` when it
/// cannot be read (another OS, a process that is gone).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    stat_seconds(&format!("/proc/{pid}/stat"))
}

/// The group a thread name belongs to: the name without a trailing `-<digits>`
/// (`eddy-storage-3` and `eddy-storage-12` are both `eddy-storage`).
pub fn thread_group(name: &str) -> &str {
    match name.rsplit_once('-') {
        Some((group, n))
            if !group.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) =>
        {
            group
        }
        _ => name,
    }
}

/// CPU seconds of process `pid`'s live threads, summed per [`thread_group`]; `None` when
/// `/proc/<pid>/task` cannot be read.
pub fn thread_cpu_seconds(pid: u32) -> Option<std::collections::BTreeMap<String, f64>> {
    let mut groups = std::collections::BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let Ok(task) = task else { continue };
        let dir = task.path();
        // A thread may end between the listing and the reads: skip it.
        let Ok(name) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        let Some(secs) = stat_seconds(&dir.join("stat").to_string_lossy()) else {
            continue;
        };
        *groups
            .entry(thread_group(name.trim_end()).to_owned())
            .or_insert(0.0) += secs;
    }
    Some(groups)
}

/// Per thread group, the CPU between two [`thread_cpu_seconds`] readings in µs per operation
/// (groups with none left out).
pub fn thread_cpu_per_op(
    before: Option<&std::collections::BTreeMap<String, f64>>,
    after: Option<&std::collections::BTreeMap<String, f64>>,
    operations: u64,
) -> std::collections::BTreeMap<String, f64> {
    let (Some(before), Some(after)) = (before, after) else {
        return std::collections::BTreeMap::new();
    };
    if operations == 0 {
        return std::collections::BTreeMap::new();
    }
    after
        .iter()
        .filter_map(|(group, b)| {
            let used = b - before.get(group).copied().unwrap_or(0.0);
            (used > 0.0).then(|| (group.clone(), used * 1e6 / f(operations)))
        })
        .collect()
}

/// User + system seconds from a `stat` file of `/proc` (a process's or a thread's).
fn stat_seconds(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may hold spaces) start at the state, field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // /proc reports clock ticks of USER_HZ, which Linux fixes at 100 for user space.
    Some(f(utime + stime) / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_is_read_from_proc_status() {
        let mib = peak_rss_mib(std::process::id()).expect("this process's VmHWM");
        // A test binary holds at least a MiB, and far less than a TiB.
        assert!((1.0..1_048_576.0).contains(&mib), "{mib} MiB");
        assert_eq!(peak_rss_mib(u32::MAX), None, "no such process");
        let now = rss_mib(std::process::id()).expect("this process's VmRSS");
        assert!(
            now > 0.0 && now <= mib + 1.0,
            "{now} MiB now, {mib} MiB at peak"
        );
    }

    #[test]
    fn thread_names_group_without_their_number() {
        assert_eq!(thread_group("eddy-storage-3"), "eddy-storage");
        assert_eq!(thread_group("eddy-storage-12"), "eddy-storage");
        assert_eq!(thread_group("eddy"), "eddy");
        assert_eq!(thread_group("tokio-rt-worker"), "tokio-rt-worker");
        assert_eq!(thread_group("eddy-events-flu"), "eddy-events-flu");
        assert_eq!(thread_group("-3"), "-3");
        assert_eq!(thread_group("x-"), "x-");
    }

    #[test]
    fn this_process_threads_are_read_and_split_per_operation() {
        // Spins until this thread has used `ticks` clock ticks of CPU (its own /proc entry):
        // CPU time, not wall time, so a loaded machine cannot shorten it.
        let spin = |ticks: u64| {
            let used = || {
                let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
                let rest = stat.rsplit_once(')').unwrap().1;
                let f: Vec<&str> = rest.split_whitespace().collect();
                f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
            };
            let start = used();
            let mut x = 0u64;
            while used() - start < ticks {
                for _ in 0..10_000 {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
        };
        let pid = std::process::id();
        let before = thread_cpu_seconds(pid).expect("/proc is readable");
        // Two threads of one group, alive while the second reading is taken.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        let (spun_tx, spun_rx) = std::sync::mpsc::channel::<()>();
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let (rx, spun_tx) = (std::sync::Arc::clone(&rx), spun_tx.clone());
                std::thread::Builder::new()
                    .name(format!("benchspin-{i}"))
                    .spawn(move || {
                        spin(15);
                        let _ = spun_tx.send(());
                        let _ = rx.lock().unwrap().recv();
                    })
                    .unwrap()
            })
            .collect();
        for _ in 0..2 {
            spun_rx.recv().unwrap();
        }
        let after = thread_cpu_seconds(pid).expect("/proc is readable");
        drop(tx);
        for t in threads {
            t.join().unwrap();
        }
        let per_op = thread_cpu_per_op(Some(&before), Some(&after), 1000);
        let spun = per_op.get("benchspin").copied().unwrap_or(0.0);
        // 2 x 150 ms (15 ticks) over 1,000 operations is 300 µs per operation, and a tick
        // more per thread at most.
        assert!((290.0..=400.0).contains(&spun), "{per_op:?}");
        assert!(thread_cpu_per_op(None, Some(&after), 1000).is_empty());
        assert!(thread_cpu_per_op(Some(&before), Some(&after), 0).is_empty());
    }

    #[test]
    fn latency_figures_are_ordered() {
        let mut h = histogram();
        for v in 1..=10_000u64 {
            h.saturating_record(v);
        }
        h.saturating_record(u64::MAX);
        let l = Latency::of(&h);
        assert_eq!(l.count, 10_001);
        assert!(l.min <= l.p50 && l.p50 <= l.p90 && l.p90 <= l.p99);
        assert!(l.p99 <= l.p999 && l.p999 <= l.max);
        assert!((4_990..=5_010).contains(&l.p50), "{l:?}");
        assert!(l.max >= MAX_LATENCY_US, "saturated at the top");
        assert_eq!(Latency::of(&histogram()), Latency::default());
    }

    #[test]
    fn runs_compute_rates_and_spectra() {
        let mut h = histogram();
        for v in [100, 200, 300, 400] {
            h.saturating_record(v);
        }
        let run = Run {
            operations: 4,
            messages: 40,
            bytes: 4_000_000,
            seconds: 2.0,
            ..Run::default()
        }
        .finish(&h);
        assert!((run.ops_per_sec - 2.0).abs() < 1e-9);
        assert!((run.messages_per_sec - 20.0).abs() < 1e-9);
        assert!((run.mb_per_sec - 2.0).abs() < 1e-9);
        assert_eq!(run.spectrum.len(), SPECTRUM.len());
        assert!(run.spectrum.windows(2).all(|w| w[0].1 <= w[1].1));
        let json = serde_json::to_string(&run).unwrap();
        assert_eq!(serde_json::from_str::<Run>(&json).unwrap(), run);
    }

    #[test]
    fn the_timeline_adds_up_to_the_counters() {
        let mut rec = Recorder::new("test", Some(10));
        rec.start();
        let c = rec.counters();
        for _ in 0..3 {
            c.done();
        }
        rec.sample();
        for _ in 0..4 {
            c.done();
        }
        c.failed();
        rec.sample();
        let timeline = rec.finish();
        assert_eq!(timeline.iter().map(|s| s.ops).sum::<u64>(), 7);
        assert_eq!(timeline.iter().map(|s| s.errors).sum::<u64>(), 1);
        assert!(timeline[0].t <= timeline[1].t);
    }

    #[test]
    fn own_cpu_time_is_readable() {
        let cpu = cpu_seconds(std::process::id()).expect("/proc/self/stat");
        assert!(cpu >= 0.0);
        assert_eq!(cpu_seconds(u32::MAX), None);
    }
}
