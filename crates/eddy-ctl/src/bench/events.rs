//! `eddy bench events`: Celeriant's per-operation shape (storage-and-replication §4.4, §4.6
//! item 4) with eddy's own client, and the network floor it is judged against.
//!
//! Each of N connections is pinned to its own aggregate and sends one ~20-byte event per
//! request, waiting for the durable acknowledgement before the next. `occ` guards every write
//! with `expected_version`. Measured after a warm-up: acknowledged writes/s, latency, writes
//! per fdatasync (the server's `/metrics`) and server CPU per write (`/proc/PID/stat`), also
//! split by thread group (`/proc/PID/task`).
//!
//! The network floor (`--floor`) is a child process (`eddy bench floor-server`) with eddy's
//! runtime shape that reads each request with eddy's frame decoder and codec and answers it
//! with a success built by eddy's encoder, touching no storage: its CPU per request is what
//! sockets, runtime and codecs cost here, and eddy's CPU per write reads as a ratio to it.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use eddy_client::{ConnectOptions, EventClient, WriteOptions};
use eddy_codec::event::{AggregateKey, Event};
use hdrhistogram::Histogram;

use super::result::{
    cpu_seconds, f, histogram, peak_rss_mib, thread_cpu_per_op, thread_cpu_seconds, Counters,
    Recorder, Run,
};
use super::streams::micros;
use crate::error::CtlError;
use crate::http;

/// Concurrent connection attempts while ramping up.
pub const CONNECT_PARALLELISM: usize = 200;

/// The shape of `eddy bench events`.
// Command-line switches, each independent: not a state machine.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Args)]
pub struct EventShape {
    /// Connection counts to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,4000")]
    pub connections: Vec<usize>,
    /// Measured seconds per point.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Warm-up before each measured window, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub warmup_ms: u64,
    /// Plain writes (no expected_version). Without --plain and --occ, both run.
    #[arg(long)]
    pub plain: bool,
    /// OCC writes (expected_version on every write).
    #[arg(long)]
    pub occ: bool,
    /// Also run every point against the network floor.
    #[arg(long)]
    pub floor: bool,
    /// Also run the same OCC append on PostgreSQL (installed with apt-get when missing).
    #[arg(long)]
    pub pg: bool,
    /// Only PostgreSQL.
    #[arg(long)]
    pub pg_only: bool,
}

impl EventShape {
    /// The variants to run: `false` plain, `true` OCC.
    pub fn variants(&self) -> Vec<bool> {
        match (self.plain, self.occ) {
            (true, false) => vec![false],
            (false, true) => vec![true],
            _ => vec![false, true],
        }
    }

    /// Refuses empty or zero settings.
    pub fn check(&self) -> Result<(), CtlError> {
        if self.connections.is_empty() || self.connections.contains(&0) || self.seconds == 0 {
            return Err(CtlError::Usage(
                "--connections needs counts of at least 1 and --seconds at least 1".into(),
            ));
        }
        Ok(())
    }

    fn warmup(&self) -> Duration {
        Duration::from_millis(self.warmup_ms)
    }
}

/// The name of a point.
pub fn point_name(occ: bool, connections: usize) -> String {
    format!(
        "{}, {connections} connections",
        if occ { "occ" } else { "plain" }
    )
}

fn event(task: usize, seq: u64) -> Event {
    Event {
        client_seq: seq,
        event_type_major: 1,
        event_value: Bytes::from(format!("[t-{task}-r-{seq}] hello")),
        ..Event::default()
    }
}

/// A fresh aggregate type for each writer of each run, so a run against a server an earlier
/// run wrote to (`--running`, or the OCC run after the plain one) starts every aggregate at
/// version 0, as its OCC writes expect.
fn fresh_aggregate_type() -> u128 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static BASE: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            << 20
    });
    base + u128::from(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

struct Writer {
    latencies: Histogram<u64>,
    errors: u64,
}

async fn writer(
    mut client: EventClient,
    task: usize,
    occ: bool,
    measure_from: Instant,
    until: Instant,
    counters: Arc<Counters>,
) -> Writer {
    let key = AggregateKey::new(1, fresh_aggregate_type(), task as u128 + 1);
    let mut version = 0u64;
    let mut seq = 0u64;
    let mut out = Writer {
        latencies: histogram(),
        errors: 0,
    };
    while Instant::now() < until {
        seq += 1;
        let options = WriteOptions {
            expected_version: occ.then_some(version),
            allow_create: true,
            ..WriteOptions::default()
        };
        let started = Instant::now();
        let result = client
            .write_events(key, vec![event(task, seq)], 7, &options)
            .await;
        let elapsed = micros(started);
        let measured = started >= measure_from;
        match result {
            Ok(v) => {
                version = v.unwrap_or(version + 1);
                if measured {
                    out.latencies.saturating_record(elapsed);
                    counters.done();
                }
            }
            Err(e) => {
                if measured {
                    out.errors += 1;
                    counters.failed();
                }
                if out.errors < 3 {
                    eprintln!(
                        "eddy bench: write error on connection {task}: {}",
                        e.one_line()
                    );
                }
                if e.kind() == eddy_client::ErrorKind::Connection {
                    break;
                }
            }
        }
    }
    out
}

/// Where a point runs and how to read the server's figures.
#[derive(Debug, Clone, Copy)]
pub struct PointTarget<'a> {
    /// Event protocol address.
    pub addr: &'a str,
    /// The server process, for CPU.
    pub pid: Option<u32>,
    /// The HTTP address, for the group-commit counters (`None`: the floor has none).
    pub http: Option<&'a str>,
    /// `eddy`, `baseline`, `floor`.
    pub system: &'a str,
}

async fn commit_counters(http_addr: Option<&str>) -> Option<(f64, f64)> {
    let (_, body) = http::get(http_addr?, "/metrics", Duration::from_secs(10))
        .await
        .ok()?;
    Some((
        http::metric(&body, "eddy_events_fdatasyncs_total", "")?,
        http::metric(&body, "eddy_events_records_committed_total", "")?,
    ))
}

/// Drives one point: `connections` pinned writers, warm-up, then the measured window.
pub async fn run_point(
    shape: &EventShape,
    target: &PointTarget<'_>,
    connections: usize,
    occ: bool,
) -> Result<Run, CtlError> {
    let name = point_name(occ, connections);
    let connect = ConnectOptions {
        connect_timeout: Duration::from_secs(60),
        ..ConnectOptions::default()
    };
    let gate = Arc::new(tokio::sync::Semaphore::new(CONNECT_PARALLELISM));
    let mut connecting = Vec::with_capacity(connections);
    for _ in 0..connections {
        let (addr, gate, connect) = (target.addr.to_owned(), Arc::clone(&gate), connect.clone());
        connecting.push(tokio::spawn(async move {
            let _permit = gate.acquire().await;
            EventClient::connect(&addr, &connect).await
        }));
    }
    let mut clients = Vec::with_capacity(connections);
    for c in connecting {
        clients.push(
            c.await
                .map_err(|e| CtlError::Failed(format!("connect task: {e}")))??,
        );
    }
    let mut recorder =
        Recorder::new(&format!("{} {name}", target.system), None).with_server(target.pid);
    let measure_from = Instant::now() + shape.warmup();
    let until = measure_from + Duration::from_secs(shape.seconds);
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, c)| tokio::spawn(writer(c, i, occ, measure_from, until, recorder.counters())))
        .collect();
    tokio::time::sleep_until(measure_from.into()).await;
    let counters0 = commit_counters(target.http).await;
    let cpu0 = target.pid.and_then(cpu_seconds);
    let threads0 = target.pid.and_then(thread_cpu_seconds);
    let own0 = cpu_seconds(std::process::id());
    recorder.start();
    let (counters1, cpu1, threads1, own1) = recorder
        .sample_until(async {
            tokio::time::sleep_until(until.into()).await;
            (
                commit_counters(target.http).await,
                target.pid.and_then(cpu_seconds),
                target.pid.and_then(thread_cpu_seconds),
                cpu_seconds(std::process::id()),
            )
        })
        .await;
    let mut latencies = histogram();
    let mut errors = 0;
    for t in tasks {
        let w = t
            .await
            .map_err(|e| CtlError::Failed(format!("writer task: {e}")))?;
        latencies
            .add(&w.latencies)
            .map_err(|e| CtlError::Failed(format!("merging histograms: {e:?}")))?;
        errors += w.errors;
    }
    // Writes started in the window but acknowledged after it count; so does their sample.
    recorder.sample();
    let timeline = recorder.finish();
    let writes = latencies.len();
    let per_write = |a: Option<f64>, b: Option<f64>| {
        a.zip(b)
            .filter(|_| writes > 0)
            .map(|(a, b)| (b - a) * 1e6 / f(writes))
    };
    Ok(Run {
        name,
        system: target.system.to_owned(),
        operations: writes,
        messages: writes,
        bytes: writes * 20,
        errors,
        seconds: f(shape.seconds),
        timeline,
        server_cpu_us_per_op: per_write(cpu0, cpu1),
        server_threads_cpu_us_per_op: thread_cpu_per_op(
            threads0.as_ref(),
            threads1.as_ref(),
            writes,
        ),
        client_cpu_us_per_op: per_write(own0, own1),
        server_peak_rss_mib: target.pid.and_then(peak_rss_mib),
        writes_per_fsync: counters0
            .zip(counters1)
            .filter(|((fs0, _), (fs1, _))| fs1 > fs0)
            .map(|((fs0, r0), (fs1, r1))| (r1 - r0) / (fs1 - fs0)),
        ..Run::default()
    }
    .finish(&latencies))
}

/// The floor server as a child process; killed when dropped.
#[derive(Debug)]
pub struct FloorServer {
    child: std::process::Child,
    /// Its address.
    pub addr: String,
}

impl FloorServer {
    /// Starts `BIN bench floor-server` and reads its address.
    pub fn start(bin: &std::path::Path) -> Result<Self, CtlError> {
        let mut child = Command::new(bin)
            .args(["bench", "floor-server"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|source| CtlError::Io {
                what: "start the floor server",
                path: bin.to_path_buf(),
                source,
            })?;
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).map_err(
            |source| CtlError::Io {
                what: "read the floor server's address from",
                path: bin.to_path_buf(),
                source,
            },
        )?;
        Ok(Self {
            child,
            addr: line.trim().to_owned(),
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for FloorServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `eddy bench floor-server`: answers every write frame with a success, no storage. Prints
/// its address on the first line of stdout.
pub fn floor_server() -> Result<(), CtlError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CtlError::Failed(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| CtlError::Failed(format!("floor server bind: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| CtlError::Failed(format!("floor server address: {e}")))?;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{addr}")
            .and_then(|()| stdout.flush())
            .map_err(CtlError::Output)?;
        drop(stdout);
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let _ = socket.set_nodelay(true);
            tokio::spawn(floor_connection(socket));
        }
    })
}

async fn floor_connection(mut socket: tokio::net::TcpStream) {
    use eddy_codec::event::{
        decode_request, encode_response, EventRequest, EventResponse, WriteResponse,
    };
    use eddy_wire::event::{Decoded, FrameLimits, RequestFrameDecoder};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let limits = FrameLimits::default_requests();
    let mut decoder = RequestFrameDecoder::new(limits);
    let mut buf = bytes::BytesMut::with_capacity(4096);
    let mut out = Vec::with_capacity(4096);
    loop {
        let (version, request, len) = match decoder.decode(&buf) {
            Ok(Decoded::Frame(frame)) => {
                let Ok(request) = decode_request(&frame, None, limits) else {
                    return;
                };
                (frame.header.version, request, frame.len())
            }
            Ok(Decoded::NeedMore { needed }) => {
                buf.reserve(needed);
                match socket.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => continue,
                }
            }
            Err(_) => return,
        };
        bytes::Buf::advance(&mut buf, len);
        let EventRequest::Write(w) = request else {
            return;
        };
        let response = EventResponse::Write(WriteResponse {
            correlation_id: w.correlation_id,
            // What the store would answer: the version after the expected one.
            max_aggregate_version: Some(
                w.writes
                    .values()
                    .next()
                    .and_then(|a| a.expected_version)
                    .map_or(1, |v| v + 1),
            ),
        });
        out.clear();
        if encode_response(&response, version, &mut out, None, u64::MAX).is_err()
            || socket.write_all(&out).await.is_err()
        {
            return;
        }
    }
}

/// The medians of the candidate/baseline ratios of writes/s, CPU per write and (when known)
/// peak RSS, per point.
pub fn comparison_notes(runs: &[Run]) -> Vec<String> {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let mut by_point: BTreeMap<&str, (Vec<&Run>, Vec<&Run>)> = BTreeMap::new();
    for r in runs {
        let entry = by_point.entry(r.name.as_str()).or_default();
        match r.system.as_str() {
            "baseline" => entry.0.push(r),
            "eddy" => entry.1.push(r),
            _ => {}
        }
    }
    by_point
        .into_iter()
        .filter(|(_, (base, cand))| !base.is_empty() && !cand.is_empty())
        .map(|(name, (base, cand))| {
            let rate = median(cand.iter().map(|r| r.ops_per_sec).collect())
                / median(base.iter().map(|r| r.ops_per_sec).collect());
            let cpu = median(cand.iter().filter_map(|r| r.server_cpu_us_per_op).collect())
                / median(base.iter().filter_map(|r| r.server_cpu_us_per_op).collect());
            let rss = median(cand.iter().filter_map(|r| r.server_peak_rss_mib).collect())
                / median(base.iter().filter_map(|r| r.server_peak_rss_mib).collect());
            let rss = if rss.is_finite() {
                format!(", peak RSS {rss:.2}x")
            } else {
                String::new()
            };
            format!(
                "eddy/baseline, {name}: ops/s {rate:.2}x, server CPU us/op {cpu:.2}x{rss} (medians of {} runs each)",
                cand.len()
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_and_names() {
        let mut shape = EventShape {
            connections: vec![8],
            seconds: 1,
            warmup_ms: 0,
            plain: false,
            occ: false,
            floor: false,
            pg: false,
            pg_only: false,
        };
        assert_eq!(shape.variants(), [false, true]);
        shape.occ = true;
        assert_eq!(shape.variants(), [true]);
        shape.check().unwrap();
        shape.connections = vec![0];
        assert!(shape.check().is_err());
        assert_eq!(point_name(true, 100), "occ, 100 connections");
    }

    #[test]
    fn comparisons_take_medians_per_point() {
        let run = |system: &str, ops: f64, cpu: f64| Run {
            name: "occ, 8 connections".into(),
            system: system.into(),
            ops_per_sec: ops,
            server_cpu_us_per_op: Some(cpu),
            ..Run::default()
        };
        let runs = [
            run("baseline", 100.0, 10.0),
            run("eddy", 150.0, 5.0),
            run("baseline", 100.0, 10.0),
            run("eddy", 50.0, 5.0),
            run("eddy", 150.0, 5.0),
            run("floor", 1e6, 1.0),
        ];
        let notes = comparison_notes(&runs);
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].contains("ops/s 1.50x") && notes[0].contains("CPU us/op 0.50x"),
            "{notes:?}"
        );
        assert!(
            !notes[0].contains("RSS"),
            "no memory figures, no ratio: {notes:?}"
        );
        let with_rss = |system: &str, mib: f64| Run {
            server_peak_rss_mib: Some(mib),
            ..run(system, 100.0, 10.0)
        };
        let notes = comparison_notes(&[with_rss("baseline", 200.0), with_rss("eddy", 150.0)]);
        assert!(notes[0].contains("peak RSS 0.75x"), "{notes:?}");
    }
}
