//! `eddy bench streams|events|compare`: load against a server this command starts (the eddy
//! binary itself by default, or `--server PATH`) or one already running (`--running`), with a
//! live progress bar on stderr, a summary on stdout, and a result file (`result.json`) plus an
//! HTML report (`report.html`: summary, throughput over time, latency percentiles) in `--out`.
//!
//! - [`streams`]: Iggy's producer/consumer shapes, durable and not, with the raw
//!   `write + fdatasync` baseline of the same disk.
//! - [`events`]: N pinned connections writing one event per request, plain and OCC, with the
//!   network floor (`--floor`) and PostgreSQL's OCC append ([`pg`], `--pg`).
//! - `--compare OTHER_BINARY --repeat N`: every point on a second build too, alternating, and
//!   the median ratios; `eddy bench compare A.json B.json` puts two result files side by side.

pub mod events;
pub mod pg;
pub mod report;
pub mod result;
pub mod server;
pub mod streams;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use eddy_client::ConnectOptions;
use serde_json::json;

use self::result::{BenchResult, Run};
use self::server::LocalServer;
use crate::conn::{ConnArgs, Credentials};
use crate::error::CtlError;
use crate::output::{print_table, Format, Table};

/// `eddy bench ...`
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Which benchmark.
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// Benchmarks.
#[derive(Debug, Clone, Subcommand)]
pub enum BenchCommand {
    /// Stream protocol: producers, then consumers; durable and not.
    #[command(after_help = "Examples:
  eddy bench streams
  eddy bench streams --producers 2 --batches 100 --messages 100 --size 100 --mode durable
  eddy bench streams --running -u iggy -p iggy --stream-addr 10.0.0.5:8090 --server-pid 4242
  eddy bench streams --compare ./old/eddy --repeat 3")]
    Streams(StreamsBench),
    /// Event protocol: pinned connections writing one event per request, plain and OCC.
    #[command(after_help = "Examples:
  eddy bench events --connections 100,1000 --seconds 10 --floor
  eddy bench events --connections 100 --occ --pg
  eddy bench events --compare ./old/eddy --repeat 3 --server-arg=--fsync-delay-us=500")]
    Events(EventsBench),
    /// Two result files side by side, with the ratios B/A.
    #[command(after_help = "Example:
  eddy bench compare before/result.json after/result.json")]
    Compare {
        /// The reference result file.
        a: PathBuf,
        /// The result file to compare with it.
        b: PathBuf,
        /// Output: table, json or jsonl.
        #[arg(long, short = 'o', value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// The network floor server (started by `bench events --floor`).
    #[command(hide = true)]
    FloorServer,
}

/// What every benchmark takes: where the server is, and where the results go.
#[derive(Debug, Clone, Args)]
pub struct Common {
    /// Connection (with --running), and the output format of the summary.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Server binary to start [default: this eddy].
    #[arg(long, value_name = "PATH")]
    pub server: Option<PathBuf>,
    /// Extra `eddy serve` argument for the started servers (repeatable).
    #[arg(long = "server-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
    /// Load the server already running at the connection settings instead of starting one.
    #[arg(long, conflicts_with_all = ["server", "compare"])]
    pub running: bool,
    /// With --running: that server's pid, for its CPU per operation.
    #[arg(long, requires = "running")]
    pub server_pid: Option<u32>,
    /// Directory for the started servers' data and the raw disk baseline [default: $TMPDIR].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Run everything on this other server binary too (A/B of two builds).
    #[arg(long, value_name = "PATH")]
    pub compare: Option<PathBuf>,
    /// With --compare: rounds of baseline then candidate.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Directory for result.json and report.html [default: ./eddy-bench/KIND-UNIXTIME].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// `eddy bench streams`
#[derive(Debug, Clone, Args)]
pub struct StreamsBench {
    /// Server and results.
    #[command(flatten)]
    pub common: Common,
    /// The load.
    #[command(flatten)]
    pub shape: streams::StreamShape,
}

/// `eddy bench events`
#[derive(Debug, Clone, Args)]
pub struct EventsBench {
    /// Server and results.
    #[command(flatten)]
    pub common: Common,
    /// The load.
    #[command(flatten)]
    pub shape: events::EventShape,
}

/// A server under load.
#[derive(Debug, Clone)]
pub struct Target {
    /// Stream protocol address.
    pub stream_addr: String,
    /// Event protocol address.
    pub event_addr: String,
    /// HTTP address.
    pub http_addr: String,
    /// Socket options.
    pub connect: ConnectOptions,
    /// Stream-protocol login.
    pub credentials: Credentials,
    /// The server process, for CPU.
    pub pid: Option<u32>,
    /// A directory on the server's disk (raw baseline).
    pub dir: PathBuf,
    /// Name in the results (`eddy`, `baseline`).
    pub system: String,
}

impl Target {
    /// A server this command started (root credentials of a fresh data directory).
    pub fn local(server: &LocalServer, system: &str) -> Self {
        Self {
            stream_addr: server.addrs.stream.clone(),
            event_addr: server.addrs.event.clone(),
            http_addr: server.addrs.http.clone(),
            connect: ConnectOptions::default(),
            credentials: Credentials::Password {
                username: "iggy".into(),
                password: "iggy".into(),
            },
            pid: Some(server.pid()),
            dir: server.dir(),
            system: system.to_owned(),
        }
    }
}

/// Runs and notes of one or more suites.
#[derive(Debug, Clone, Default)]
pub struct Suite {
    /// Runs in order.
    pub runs: Vec<Run>,
    /// Findings.
    pub notes: Vec<String>,
}

fn runtime(workers: Option<usize>) -> Result<tokio::runtime::Runtime, CtlError> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        builder.worker_threads(n);
    }
    builder
        .enable_all()
        .build()
        .map_err(|e| CtlError::Failed(format!("cannot start the async runtime: {e}")))
}

/// The binaries to run, in order, with their names: the candidate alone, or baseline then
/// candidate `repeat` times.
fn binaries(common: &Common) -> Result<Vec<(PathBuf, &'static str)>, CtlError> {
    let candidate = match &common.server {
        Some(p) => p.clone(),
        None => server::default_binary()?,
    };
    Ok(match &common.compare {
        None => vec![(candidate, "eddy")],
        Some(baseline) => (0..common.repeat.max(1))
            .flat_map(|_| [(baseline.clone(), "baseline"), (candidate.clone(), "eddy")])
            .collect(),
    })
}

fn running_target(common: &Common, system: &str) -> Result<Target, CtlError> {
    let settings = common.conn.resolve()?;
    Ok(Target {
        stream_addr: settings.stream_addr,
        event_addr: settings.event_addr,
        http_addr: settings.http_addr,
        connect: settings.connect,
        credentials: settings.credentials.unwrap_or(Credentials::Password {
            username: "iggy".into(),
            password: "iggy".into(),
        }),
        pid: common.server_pid,
        dir: common.dir.clone().unwrap_or_else(std::env::temp_dir),
        system: system.to_owned(),
    })
}

fn announce(run: &Run) {
    let rss = run
        .server_peak_rss_mib
        .map(|m| format!(", server peak RSS {m:.0} MiB"))
        .unwrap_or_default();
    eprintln!(
        "{}: {}: {:.0} ops/s, {:.0} msgs/s, {:.1} MB/s, p50 {} us, p99 {} us, max {} us, {} errors{rss}",
        run.system,
        run.name,
        run.ops_per_sec,
        run.messages_per_sec,
        run.mb_per_sec,
        run.latency_us.p50,
        run.latency_us.p99,
        run.latency_us.max,
        run.errors
    );
}

fn streams_bench(args: &StreamsBench) -> Result<BenchResult, CtlError> {
    args.shape.check()?;
    let rt = runtime(None)?;
    let mut all = Suite::default();
    let mut add = |suite: Suite| {
        suite.runs.iter().for_each(announce);
        all.runs.extend(suite.runs);
        all.notes.extend(suite.notes);
    };
    if args.common.running {
        let target = running_target(&args.common, "eddy")?;
        add(rt.block_on(streams::suite(&args.shape, &target))?);
    } else {
        for (bin, system) in binaries(&args.common)? {
            let server =
                LocalServer::start(&bin, &args.common.server_args, args.common.dir.as_deref())?;
            let target = Target::local(&server, system);
            add(rt.block_on(streams::suite(&args.shape, &target))?);
        }
    }
    all.notes.extend(events::comparison_notes(&all.runs));
    Ok(result(
        "streams",
        json!({ "shape": format!("{:?}", args.shape), "common": common_json(&args.common) }),
        all,
    ))
}

fn events_bench(args: &EventsBench) -> Result<BenchResult, CtlError> {
    args.shape.check()?;
    let shape = &args.shape;
    let rt = runtime(Some(2))?;
    let mut all = Suite::default();
    let mut push = |run: Run| {
        announce(&run);
        all.runs.push(run);
    };
    if !shape.pg_only {
        let own = server::default_binary()?;
        for &n in &shape.connections {
            for occ in shape.variants() {
                if shape.floor {
                    let floor = events::FloorServer::start(&own)?;
                    let target = events::PointTarget {
                        addr: &floor.addr,
                        pid: Some(floor.pid()),
                        http: None,
                        system: "floor",
                    };
                    push(rt.block_on(events::run_point(shape, &target, n, occ))?);
                }
                if args.common.running {
                    let t = running_target(&args.common, "eddy")?;
                    let target = events::PointTarget {
                        addr: &t.event_addr,
                        pid: t.pid,
                        http: Some(&t.http_addr),
                        system: "eddy",
                    };
                    push(rt.block_on(events::run_point(shape, &target, n, occ))?);
                    continue;
                }
                for (bin, system) in binaries(&args.common)? {
                    let mut extra = vec!["--num-shards".to_owned(), "2".to_owned()];
                    extra.extend(args.common.server_args.iter().cloned());
                    let server = LocalServer::start(&bin, &extra, args.common.dir.as_deref())?;
                    let target = events::PointTarget {
                        addr: &server.addrs.event,
                        pid: Some(server.pid()),
                        http: Some(&server.addrs.http),
                        system,
                    };
                    push(rt.block_on(events::run_point(shape, &target, n, occ))?);
                }
            }
        }
    }
    if shape.pg || shape.pg_only {
        match pg::Pg::start() {
            Ok(pg) => {
                for &n in &shape.connections {
                    match pg.run(shape, n) {
                        Ok(run) => push(run),
                        Err(e) => all.notes.push(format!(
                            "postgres at {n} connections failed: {}",
                            e.one_line()
                        )),
                    }
                }
            }
            Err(e) => all
                .notes
                .push(format!("postgres could not start: {}", e.one_line())),
        }
    }
    all.notes.extend(events::comparison_notes(&all.runs));
    let pg: BTreeMap<&str, f64> = all
        .runs
        .iter()
        .filter(|r| r.system == "postgres" && r.ops_per_sec > 0.0)
        .map(|r| (r.name.as_str(), r.ops_per_sec))
        .collect();
    let ratios: Vec<String> = all
        .runs
        .iter()
        .filter(|r| r.system == "eddy")
        .filter_map(|r| {
            pg.get(r.name.as_str())
                .map(|p| format!("eddy/postgres, {}: {:.1}x", r.name, r.ops_per_sec / p))
        })
        .collect();
    all.notes.extend(ratios);
    Ok(result(
        "events",
        json!({ "shape": format!("{:?}", shape), "common": common_json(&args.common) }),
        all,
    ))
}

fn common_json(common: &Common) -> serde_json::Value {
    json!({
        "server": common.server,
        "server_args": common.server_args,
        "running": common.running,
        "compare": common.compare,
        "repeat": common.repeat,
    })
}

fn result(kind: &str, config: serde_json::Value, suite: Suite) -> BenchResult {
    BenchResult {
        kind: kind.to_owned(),
        eddy_version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        cpus: std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        load_average: std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_owned(),
        config,
        runs: suite.runs,
        notes: suite.notes,
    }
}

/// Writes `result.json` and `report.html` into `dir`; returns their paths.
pub fn save(result: &BenchResult, dir: &Path) -> Result<(PathBuf, PathBuf), CtlError> {
    let io = |what, path: &Path| {
        let path = path.to_path_buf();
        move |source| CtlError::Io { what, path, source }
    };
    std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    let json_path = dir.join("result.json");
    let text = serde_json::to_string_pretty(result)
        .map_err(|e| CtlError::Failed(format!("result: {e}")))?;
    std::fs::write(&json_path, text + "\n").map_err(io("write", &json_path))?;
    let html_path = dir.join("report.html");
    std::fs::write(&html_path, report::html(result)).map_err(io("write", &html_path))?;
    Ok((json_path, html_path))
}

/// Reads a result file.
pub fn load(path: &Path) -> Result<BenchResult, CtlError> {
    let text = std::fs::read_to_string(path).map_err(|source| CtlError::Io {
        what: "read",
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| {
        CtlError::Usage(format!(
            "{} is not an eddy bench result: {e}",
            path.display()
        ))
    })
}

fn print_summary(
    out: &mut dyn Write,
    format: Format,
    result: &BenchResult,
) -> Result<(), CtlError> {
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, result)
                .map_err(|e| CtlError::Output(e.into()))?;
            writeln!(out).map_err(CtlError::Output)
        }
        Format::Jsonl => {
            for run in &result.runs {
                serde_json::to_writer(&mut *out, run).map_err(|e| CtlError::Output(e.into()))?;
                writeln!(out).map_err(CtlError::Output)?;
            }
            Ok(())
        }
        Format::Table => {
            let (header, rows) = report::summary_rows(&result.runs);
            let mut table = Table::new(header);
            for row in rows {
                table.push(
                    row.into_iter()
                        .map(|c| {
                            c.parse::<u64>()
                                .map(|v| json!(v))
                                .or_else(|_| c.parse::<f64>().map(|v| json!(v)))
                                .unwrap_or_else(|_| json!(c))
                        })
                        .collect(),
                );
            }
            print_table(out, Format::Table, &table).map_err(CtlError::Output)?;
            for run in result
                .runs
                .iter()
                .filter(|r| !r.server_threads_cpu_us_per_op.is_empty())
            {
                let split: Vec<String> = run
                    .server_threads_cpu_us_per_op
                    .iter()
                    .map(|(group, us)| format!("{group} {us:.2}"))
                    .collect();
                writeln!(
                    out,
                    "{} {}: server CPU us/op by thread: {}",
                    run.system,
                    run.name,
                    split.join(", ")
                )
                .map_err(CtlError::Output)?;
            }
            for n in &result.notes {
                writeln!(out, "{n}").map_err(CtlError::Output)?;
            }
            Ok(())
        }
    }
}

/// Side by side: per run present in both, each figure of A and B and the ratio B/A.
pub fn compare_table(a: &BenchResult, b: &BenchResult) -> Table {
    let mut table = Table::new(vec!["system", "run", "figure", "a", "b", "b/a"]);
    for rb in &b.runs {
        let Some(ra) = a
            .runs
            .iter()
            .find(|r| r.name == rb.name && r.system == rb.system)
        else {
            continue;
        };
        let figures = [
            ("ops/s", Some(ra.ops_per_sec), Some(rb.ops_per_sec)),
            (
                "msgs/s",
                Some(ra.messages_per_sec),
                Some(rb.messages_per_sec),
            ),
            (
                "p50 us",
                Some(result::f(ra.latency_us.p50)),
                Some(result::f(rb.latency_us.p50)),
            ),
            (
                "p99 us",
                Some(result::f(ra.latency_us.p99)),
                Some(result::f(rb.latency_us.p99)),
            ),
            (
                "p999 us",
                Some(result::f(ra.latency_us.p999)),
                Some(result::f(rb.latency_us.p999)),
            ),
            (
                "max us",
                Some(result::f(ra.latency_us.max)),
                Some(result::f(rb.latency_us.max)),
            ),
            (
                "server CPU us/op",
                ra.server_cpu_us_per_op,
                rb.server_cpu_us_per_op,
            ),
            (
                "errors",
                Some(result::f(ra.errors)),
                Some(result::f(rb.errors)),
            ),
        ];
        for (figure, va, vb) in figures {
            let round = |v: Option<f64>| {
                v.map_or(serde_json::Value::Null, |v| {
                    json!((v * 100.0).round() / 100.0)
                })
            };
            let ratio = va.zip(vb).filter(|(a, _)| *a > 0.0).map(|(a, b)| b / a);
            table.push(vec![
                json!(rb.system),
                json!(rb.name),
                json!(figure),
                round(va),
                round(vb),
                round(ratio),
            ]);
        }
    }
    table
}

fn default_out(kind: &str) -> PathBuf {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from("eddy-bench").join(format!("{kind}-{secs}"))
}

/// Runs `eddy bench` (its own runtimes: the benchmarks size them, and PostgreSQL and the disk
/// baseline block).
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let (result, common) = match &args.command {
        BenchCommand::FloorServer => return events::floor_server(),
        BenchCommand::Compare { a, b, output } => {
            let (a, b) = (load(a)?, load(b)?);
            let table = compare_table(&a, &b);
            if table.rows.is_empty() {
                return Err(CtlError::Usage(
                    "the two result files have no run in common".into(),
                ));
            }
            return print_table(out, *output, &table).map_err(CtlError::Output);
        }
        BenchCommand::Streams(s) => (streams_bench(s)?, &s.common),
        BenchCommand::Events(e) => (events_bench(e)?, &e.common),
    };
    let dir = common
        .out
        .clone()
        .unwrap_or_else(|| default_out(&result.kind));
    let (json_path, html_path) = save(&result, &dir)?;
    let format = common.conn.output;
    print_summary(out, format, &result)?;
    if format == Format::Table {
        writeln!(
            out,
            "result: {}\nreport: {}",
            json_path.display(),
            html_path.display()
        )
        .map_err(CtlError::Output)?;
    } else {
        eprintln!(
            "result: {}\nreport: {}",
            json_path.display(),
            html_path.display()
        );
    }
    if result.runs.iter().any(|r| r.errors > 0) {
        return Err(CtlError::Failed(
            "some requests failed; see the errors column".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(system: &str, name: &str, ops: f64) -> Run {
        Run {
            name: name.into(),
            system: system.into(),
            ops_per_sec: ops,
            ..Run::default()
        }
    }

    #[test]
    fn results_round_trip_through_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let result = BenchResult {
            kind: "events".into(),
            runs: vec![run("eddy", "occ, 8 connections", 10.0)],
            ..BenchResult::default()
        };
        let (json_path, html_path) = save(&result, &dir.path().join("x")).unwrap();
        assert_eq!(load(&json_path).unwrap(), result);
        assert!(std::fs::read_to_string(html_path).unwrap().contains("<svg"));
        assert!(matches!(
            load(&html_path_of(&dir)),
            Err(CtlError::Io { .. })
        ));
    }

    fn html_path_of(dir: &tempfile::TempDir) -> PathBuf {
        dir.path().join("missing.json")
    }

    #[test]
    fn compare_matches_runs_by_system_and_name() {
        let a = BenchResult {
            runs: vec![run("eddy", "p", 100.0), run("eddy", "only in a", 1.0)],
            ..BenchResult::default()
        };
        let b = BenchResult {
            runs: vec![run("eddy", "p", 150.0), run("floor", "p", 1.0)],
            ..BenchResult::default()
        };
        let table = compare_table(&a, &b);
        assert!(table.rows.iter().all(|r| r[1] == "p" && r[0] == "eddy"));
        let ops = table.rows.iter().find(|r| r[2] == "ops/s").unwrap();
        assert_eq!(ops[5], json!(1.5));
    }

    #[test]
    fn binaries_alternate_baseline_and_candidate() {
        let common = Common {
            conn: ConnArgs::default(),
            server: Some("new".into()),
            server_args: vec![],
            running: false,
            server_pid: None,
            dir: None,
            compare: Some("old".into()),
            repeat: 2,
            out: None,
        };
        let names: Vec<&str> = binaries(&common).unwrap().iter().map(|(_, s)| *s).collect();
        assert_eq!(names, ["baseline", "eddy", "baseline", "eddy"]);
    }
}
