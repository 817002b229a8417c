//! Event-protocol load: Celeriant's per-operation shape (storage-and-replication §4.4, §4.6
//! item 4) against a real eddy process, and the same OCC append on PostgreSQL.
//!
//! Each of N connections is pinned to its own aggregate and sends one ~20-byte event per
//! request with the published client, waiting for the durable acknowledgement before the
//! next. Reported per run: acknowledged writes/s, p50/p99 latency, writes per fdatasync
//! (from the server's `/metrics`), and server CPU µs per acknowledged write (from
//! `/proc/PID/stat`). `--occ` guards every write with `expected_version`.
//!
//! `--pg` runs the comparison: PostgreSQL (installed with apt-get when missing) in a temp dir
//! as the `postgres` user, `fsync = on`, `synchronous_commit = on`, a table
//! `events (aggregate, version, payload)` with a unique (aggregate, version) key, and pgbench
//! with N clients each appending to its own aggregate at `max(version) + 1`, one transaction
//! per write.
//!
//! `--compare PATH` runs every point on a second (baseline) server binary too, alternating
//! baseline and candidate `--repeat N` times, and reports the candidate/baseline ratios of
//! writes/s and CPU µs per write (medians over the repeats): an A/B of two builds in one
//! command on a noisy machine.
//!
//! `--floor` also runs every point against the network floor: a child process (this binary with
//! `--floor-server`) with the same runtime shape as eddy (a multi-threaded tokio runtime, one
//! worker per core) that reads each request frame with eddy's frame decoder and codec and
//! answers it with a success built by eddy's encoder, touching no storage. Its CPU per request
//! is what the sockets, the runtime and the codecs cost on this machine with these clients;
//! eddy's CPU per write over it is the ratio to report (the rest is dispatch and storage).
//!
//! Usage: `eddy_event_load --server PATH [--connections 100,1000,4000] [--seconds 10]
//! [--occ] [--plain] [--pg] [--pg-only] [--server-arg ARG]... [--compare PATH [--repeat N]] [--floor]`
//! (`cargo xtask event-load` builds in release and runs it).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use celeriant_client_tokio::{CeleriantClient, WriteEventsOptions};
use celeriant_wal::aggregate_key::AggregateKey;
use celeriant_wal::datablocks::datablock_aggregate_event::DatablockAggregateEvent;
use eddy_tests::{http_get, metric_value as metric, Eddy, Options};

/// Concurrent connection attempts while ramping up.
const CONNECT_PARALLELISM: usize = 200;
/// Warm-up before measuring.
const WARMUP: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
struct Args {
    server: PathBuf,
    connections: Vec<usize>,
    seconds: u64,
    variants: Vec<bool>,
    pg: bool,
    eddy: bool,
    /// Extra `eddy serve` arguments (`--server-arg --fsync-delay-us=500`).
    extra_server_flags: Vec<String>,
    /// A baseline server binary to run every point on as well.
    compare: Option<PathBuf>,
    /// Runs per point and binary when comparing.
    repeat: usize,
    /// Runs every point against the network floor too.
    floor: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        server: PathBuf::new(),
        connections: vec![100, 1000, 4000],
        seconds: 10,
        variants: Vec::new(),
        pg: false,
        eddy: true,
        extra_server_flags: Vec::new(),
        compare: None,
        repeat: 1,
        floor: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--server" => args.server = PathBuf::from(value()?),
            "--connections" => {
                args.connections = value()?
                    .split(',')
                    .map(|n| n.trim().parse().map_err(|e| format!("--connections: {e}")))
                    .collect::<Result<_, _>>()?;
            }
            "--seconds" => {
                args.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?;
            }
            "--occ" => args.variants.push(true),
            "--plain" => args.variants.push(false),
            "--pg" => args.pg = true,
            "--server-arg" => args.extra_server_flags.push(value()?),
            "--compare" => args.compare = Some(PathBuf::from(value()?)),
            "--floor" => args.floor = true,
            "--repeat" => {
                args.repeat = value()?.parse().map_err(|e| format!("--repeat: {e}"))?;
            }
            "--pg-only" => {
                args.pg = true;
                args.eddy = false;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.variants.is_empty() {
        args.variants = vec![false, true];
    }
    if args.server.as_os_str().is_empty() {
        return Err("--server PATH is required".into());
    }
    Ok(args)
}

/// One measured run.
#[derive(Debug, Clone, Default)]
struct Report {
    system: &'static str,
    occ: bool,
    connections: usize,
    writes: u64,
    errors: u64,
    seconds: f64,
    p50_us: u64,
    p99_us: u64,
    writes_per_fsync: Option<f64>,
    cpu_us_per_write: Option<f64>,
}

impl Report {
    fn per_second(&self) -> f64 {
        f(self.writes) / self.seconds
    }

    fn line(&self) -> String {
        let opt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
        format!(
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {} | {} | {} |",
            self.system,
            if self.occ { "occ" } else { "plain" },
            self.connections,
            self.per_second(),
            f(self.p50_us) / 1000.0,
            f(self.p99_us) / 1000.0,
            opt(self.writes_per_fsync),
            opt(self.cpu_us_per_write),
            self.errors,
        )
    }
}

/// A count as a float: the counts here stay far below 2^52, where the conversion is exact.
#[allow(clippy::cast_precision_loss)]
fn f(v: u64) -> f64 {
    v as f64
}

/// The `permille`th latency of a sorted sample.
fn percentile(sorted: &[u32], permille: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    u64::from(sorted[(sorted.len() - 1) * permille / 1000])
}

/// The median of some figures (NaN when there are none).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Server CPU time (user + system) in microseconds.
fn cpu_us(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start at state = field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let ticks = clock_ticks();
    Some((utime + stime) * 1_000_000 / ticks)
}

fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

fn commit_counters(eddy: &Eddy) -> (f64, f64) {
    let (_, body) = http_get(eddy.addrs().http, "/metrics").unwrap_or((0, String::new()));
    (
        metric(&body, "eddy_events_fdatasyncs_total").unwrap_or(0.0),
        metric(&body, "eddy_events_records_committed_total").unwrap_or(0.0),
    )
}

fn event(task: usize, seq: u64) -> DatablockAggregateEvent {
    let value = format!("[t-{task}-r-{seq}] hello");
    DatablockAggregateEvent {
        client_seq: seq,
        event_seq: 0,
        event_id: None,
        event_timestamp: 0,
        event_type_major: 1,
        event_type_minor: 0,
        event_value: Arc::new(value.into_bytes()),
        iv: None,
    }
}

struct TaskResult {
    latencies: Vec<u32>,
    writes: u64,
    errors: u64,
}

async fn writer(
    mut client: CeleriantClient,
    task: usize,
    occ: bool,
    measure_from: Instant,
    until: Instant,
) -> TaskResult {
    let key = AggregateKey::new(1, 1, task as u128 + 1);
    let mut version = 0u64;
    let mut seq = 0u64;
    let mut out = TaskResult {
        latencies: Vec::new(),
        writes: 0,
        errors: 0,
    };
    while Instant::now() < until {
        seq += 1;
        let options = WriteEventsOptions {
            expected_version: occ.then_some(version),
            ..WriteEventsOptions::default()
        };
        let started = Instant::now();
        let result = client
            .write_events_with(key.clone(), vec![event(task, seq)], 7, options)
            .await;
        let elapsed = started.elapsed();
        let measured = started >= measure_from;
        match result {
            Ok(r) => {
                version = r.max_aggregate_version.unwrap_or(version + 1);
                if measured {
                    out.writes += 1;
                    out.latencies
                        .push(u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX));
                }
            }
            Err(e) => {
                if measured {
                    out.errors += 1;
                }
                if out.errors < 3 {
                    eprintln!("write error on task {task}: {e}");
                }
                if matches!(
                    e,
                    celeriant_client_tokio::ClientError::ConnectionLostAfterSend(_)
                ) {
                    break;
                }
            }
        }
    }
    out
}

fn run_eddy(
    args: &Args,
    server: &Path,
    system: &'static str,
    connections: usize,
    occ: bool,
) -> Report {
    let eddy = Eddy::start_with(
        server.to_str().expect("utf-8 path"),
        Options {
            args: ["--num-shards", "2"]
                .iter()
                .map(ToString::to_string)
                .chain(args.extra_server_flags.iter().cloned())
                .collect(),
            ..Options::default()
        },
    );
    let addr = eddy.addrs().client.to_string();
    let report = run_point(args, system, connections, occ, &addr, eddy.pid(), &|| {
        commit_counters(&eddy)
    });
    drop(eddy);
    report
}

/// The same point against the network floor (see the module docs).
fn run_floor(args: &Args, connections: usize, occ: bool) -> Report {
    let exe = std::env::current_exe().expect("own path");
    let mut child = Command::new(exe)
        .arg("--floor-server")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the floor server");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
        .expect("floor server address");
    let report = run_point(
        args,
        "floor",
        connections,
        occ,
        line.trim(),
        child.id(),
        &|| (0.0, 0.0),
    );
    let _ = child.kill();
    let _ = child.wait();
    report
}

/// The floor server: answers every request frame with a success, no storage.
fn floor_server() {
    use eddy_codec::event::{
        decode_request, encode_response, EventRequest, EventResponse, WriteResponse,
    };
    use eddy_wire::event::{Decoded, FrameLimits, RequestFrameDecoder};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        // The parent reads the address from the first line of stdout.
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{}", listener.local_addr().expect("address"));
        let _ = stdout.flush();
        drop(stdout);
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                continue;
            };
            let _ = socket.set_nodelay(true);
            tokio::spawn(async move {
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
            });
        }
    });
}

/// Drives one point: `connections` pinned writers against the server at `addr` (process
/// `pid`), with `counters` giving (fdatasyncs, committed records) when the server has them.
fn run_point(
    args: &Args,
    system: &'static str,
    connections: usize,
    occ: bool,
    addr: &str,
    pid: u32,
    counters: &dyn Fn() -> (f64, f64),
) -> Report {
    let addr = addr.to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let report = rt.block_on(async {
        let gate = Arc::new(tokio::sync::Semaphore::new(CONNECT_PARALLELISM));
        let mut connecting = Vec::with_capacity(connections);
        for _ in 0..connections {
            let (addr, gate) = (addr.clone(), Arc::clone(&gate));
            connecting.push(tokio::spawn(async move {
                let _permit = gate.acquire().await.expect("open semaphore");
                CeleriantClient::connect(&addr).await.expect("connect")
            }));
        }
        let mut clients = Vec::with_capacity(connections);
        for c in connecting {
            clients.push(c.await.expect("connect task"));
        }
        let measure_from = Instant::now() + WARMUP;
        let until = measure_from + Duration::from_secs(args.seconds);
        let tasks: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(i, c)| tokio::spawn(writer(c, i, occ, measure_from, until)))
            .collect();
        tokio::time::sleep_until(measure_from.into()).await;
        let (fs0, rec0) = counters();
        let cpu0 = cpu_us(pid);
        tokio::time::sleep_until(until.into()).await;
        let (fs1, rec1) = counters();
        let cpu1 = cpu_us(pid);
        let mut latencies = Vec::new();
        let (mut writes, mut errors) = (0, 0);
        for t in tasks {
            let r = t.await.expect("writer");
            latencies.extend(r.latencies);
            writes += r.writes;
            errors += r.errors;
        }
        latencies.sort_unstable();
        let fsyncs = fs1 - fs0;
        Report {
            system,
            occ,
            connections,
            writes,
            errors,
            seconds: f(args.seconds),
            p50_us: percentile(&latencies, 500),
            p99_us: percentile(&latencies, 990),
            writes_per_fsync: (fsyncs > 0.0).then(|| (rec1 - rec0) / fsyncs),
            cpu_us_per_write: cpu0
                .zip(cpu1)
                .filter(|_| writes > 0)
                .map(|(a, b)| f(b - a) / f(writes)),
        }
    });
    drop(rt);
    report
}

// ---- PostgreSQL ------------------------------------------------------------------------------

fn sh(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The directory holding initdb/pg_ctl/pgbench, installing PostgreSQL when missing.
fn pg_bin() -> Result<PathBuf, String> {
    let find = || -> Option<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|d| d.join("initdb").exists() && d.join("pgbench").exists())
            .collect();
        dirs.sort();
        dirs.pop()
    };
    if let Some(d) = find() {
        return Ok(d);
    }
    eprintln!("installing PostgreSQL with apt-get");
    sh(Command::new("apt-get").arg("update"))?;
    sh(Command::new("apt-get")
        .args(["install", "-y", "postgresql", "postgresql-contrib"])
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    find().ok_or_else(|| "PostgreSQL binaries not found after install".into())
}

/// Runs a PostgreSQL tool as the `postgres` user. `setpriv` (not `runuser`/`su`, which go
/// through PAM and reset the open-file limit to 1024) keeps this process's limits, which
/// pgbench needs for thousands of clients.
/// Seconds pgbench may spend opening its connections before the measured window.
fn connect_allowance(connections: usize) -> u64 {
    5 + connections as u64 / 100
}

fn as_postgres(bin: &Path, tool: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        "--",
    ])
    .arg(bin.join(tool));
    c.env("HOME", "/tmp");
    c
}

struct Pg {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
}

impl Pg {
    fn start() -> Result<Self, String> {
        let bin = pg_bin()?;
        let dir = std::env::temp_dir().join(format!("eddy-pg-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        sh(Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir))?;
        let data = dir.join("data");
        sh(as_postgres(&bin, "initdb")
            .args(["-U", "postgres", "--auth=trust", "-D"])
            .arg(&data))?;
        let port = eddy_tests::free_port();
        let opts = format!(
            "-p {port} -k {} -c listen_addresses='' -c max_connections=4200 -c fsync=on \
             -c synchronous_commit=on -c full_page_writes=on -c shared_buffers=512MB",
            dir.display()
        );
        sh(as_postgres(&bin, "pg_ctl")
            .args(["-w", "-D"])
            .arg(&data)
            .args(["-l"])
            .arg(dir.join("log"))
            .args(["-o", &opts, "start"]))?;
        let pg = Pg { bin, dir, port };
        pg.psql(
            "CREATE TABLE events (aggregate bigint NOT NULL, version bigint NOT NULL, \
                 payload text NOT NULL, PRIMARY KEY (aggregate, version))",
        )?;
        Ok(pg)
    }

    fn psql(&self, sql: &str) -> Result<String, String> {
        sh(as_postgres(&self.bin, "psql")
            .args(["-h"])
            .arg(&self.dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ]))
    }

    fn run(&self, connections: usize, seconds: u64) -> Result<Report, String> {
        self.psql("TRUNCATE events")?;
        let script = self.dir.join("occ_append.sql");
        // One transaction per write: read the aggregate's version and insert the next one;
        // the primary key (aggregate, version) refuses a concurrent duplicate (OCC).
        std::fs::write(
            &script,
            "INSERT INTO events (aggregate, version, payload) \
             SELECT :client_id, coalesce(max(version), 0) + 1, '[t-' || :client_id || '] hello' \
             FROM events WHERE aggregate = :client_id;\n",
        )
        .map_err(|e| e.to_string())?;
        let logs = self.dir.join(format!("log-{connections}"));
        std::fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
        sh(Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&self.dir))?;
        let out = sh(as_postgres(&self.bin, "pgbench")
            .current_dir(&logs)
            .args(["-h"])
            .arg(&self.dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-n",
                "-c",
                &connections.to_string(),
                "-j",
                "2",
                "-T",
                // pgbench's clock includes connecting, one backend process per client: allow
                // for it, and measure a window of `seconds` after the warm-up (below).
                &(seconds + WARMUP.as_secs() + connect_allowance(connections)).to_string(),
                "-l",
                "--log-prefix",
                "tx",
                "-f",
            ])
            .arg(&script)
            .arg("postgres"))?;
        // Per-transaction log lines: client_id tx_no latency_us script_no epoch_s epoch_us.
        let mut latencies = Vec::new();
        let mut first_epoch = u64::MAX;
        let mut rows = Vec::new();
        for entry in std::fs::read_dir(&logs).map_err(|e| e.to_string())? {
            let text = std::fs::read_to_string(entry.map_err(|e| e.to_string())?.path())
                .map_err(|e| e.to_string())?;
            for line in text.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if let (Some(lat), Some(s), Some(us)) = (f.get(2), f.get(4), f.get(5)) {
                    let (Ok(lat), Ok(s), Ok(us)) =
                        (lat.parse::<u64>(), s.parse::<u64>(), us.parse::<u64>())
                    else {
                        continue;
                    };
                    let at = s * 1_000_000 + us;
                    first_epoch = first_epoch.min(at);
                    rows.push((at, lat));
                }
            }
        }
        // Drop the warm-up, as for eddy, and keep a window of `seconds`.
        let from = first_epoch.saturating_add(WARMUP.as_micros() as u64);
        let until = from.saturating_add(seconds * 1_000_000);
        for (at, lat) in rows {
            if (from..until).contains(&at) {
                latencies.push(u32::try_from(lat).unwrap_or(u32::MAX));
            }
        }
        latencies.sort_unstable();
        let failed = out
            .lines()
            .find(|l| l.starts_with("number of failed transactions"))
            .and_then(|l| l.split_whitespace().nth(4))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Ok(Report {
            system: "postgres",
            occ: true,
            connections,
            writes: latencies.len() as u64,
            errors: failed,
            seconds: f(seconds),
            p50_us: percentile(&latencies, 500),
            p99_us: percentile(&latencies, 990),
            writes_per_fsync: None,
            cpu_us_per_write: None,
        })
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = sh(as_postgres(&self.bin, "pg_ctl")
            .args(["-w", "-m", "fast", "-D"])
            .arg(self.dir.join("data"))
            .arg("stop"));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--floor-server") {
        floor_server();
        return;
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("eddy_event_load: {e}");
            std::process::exit(2);
        }
    };
    let mut reports = Vec::new();
    let mut comparisons = String::new();
    for &n in args.connections.iter().filter(|_| args.eddy) {
        for &occ in &args.variants {
            let variant = if occ { "occ" } else { "plain" };
            if args.floor {
                eprintln!("floor: {n} connections, {variant}");
                let r = run_floor(&args, n, occ);
                eprintln!("{}", r.line());
                reports.push(r);
            }
            let Some(baseline) = &args.compare else {
                eprintln!("eddy: {n} connections, {variant}");
                let r = run_eddy(&args, &args.server, "eddy", n, occ);
                eprintln!("{}", r.line());
                reports.push(r);
                continue;
            };
            let (mut base, mut cand) = (Vec::new(), Vec::new());
            for round in 0..args.repeat.max(1) {
                for (path, system) in [(baseline, "baseline"), (&args.server, "eddy")] {
                    eprintln!("{system}: {n} connections, {variant}, round {}", round + 1);
                    let r = run_eddy(&args, path, system, n, occ);
                    eprintln!("{}", r.line());
                    if system == "baseline" {
                        base.push(r.clone());
                    } else {
                        cand.push(r.clone());
                    }
                    reports.push(r);
                }
            }
            let _ = writeln!(
                comparisons,
                "eddy/baseline at {n} connections, {variant}: writes/s {:.2}x, CPU us/write {:.2}x (medians of {} runs each)",
                median(cand.iter().map(Report::per_second)) / median(base.iter().map(Report::per_second)),
                median(cand.iter().filter_map(|r| r.cpu_us_per_write))
                    / median(base.iter().filter_map(|r| r.cpu_us_per_write)),
                cand.len(),
            );
        }
    }
    if args.pg {
        match Pg::start() {
            Ok(pg) => {
                for &n in &args.connections {
                    eprintln!("postgres: {n} connections, occ");
                    match pg.run(n, args.seconds) {
                        Ok(r) => {
                            eprintln!("{}", r.line());
                            reports.push(r);
                        }
                        Err(e) => eprintln!("postgres run failed: {e}"),
                    }
                }
            }
            Err(e) => eprintln!("postgres could not start: {e}"),
        }
    }
    let mut out = String::from(
        "| system | variant | connections | writes/s | p50 ms | p99 ms | writes/fdatasync | server CPU us/write | errors |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &reports {
        out.push_str(&r.line());
        out.push('\n');
    }
    let by_n: HashMap<usize, f64> = reports
        .iter()
        .filter(|r| r.system == "postgres")
        .map(|r| (r.connections, r.per_second()))
        .collect();
    out.push_str(&comparisons);
    for r in reports.iter().filter(|r| r.system == "eddy" && r.occ) {
        if let Some(pg) = by_n.get(&r.connections).filter(|v| **v > 0.0) {
            let _ = writeln!(
                out,
                "eddy/postgres OCC append at {} connections: {:.1}x",
                r.connections,
                r.per_second() / pg
            );
        }
    }
    // The report is the program's output: stdout, so it can be redirected to a file.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
}
