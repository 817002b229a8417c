//! `cargo xtask cluster-bench [--events]`: durable producers (or, with `--events`, durable
//! event writers) against one node, then against a local three-node cluster's leader with
//! peer TLS, then the same cluster with plaintext peers, in one command, and the cluster's
//! figures as ratios of the single node's and TLS's as a ratio of plaintext (these machines
//! drift 10-25 % within minutes, so only same-command ratios mean anything).
//!
//! Both runs are `eddy bench streams --mode durable --no-consumers` (each producer on its own
//! stream with one partition), or `eddy bench events --plain` (pinned connections writing one
//! ~20-byte event per request, acknowledged once durable). The single node is started by the bench itself; the cluster is
//! three `eddy serve` processes on 127.0.0.1-3, and the bench runs against the leader
//! (`--running`). Server CPU per message is read from `/proc/<pid>/stat` of every node.
//!
//! `--via-follower` compares instead the TLS cluster written through its leader and through
//! a follower, which forwards every batch to its partition's leader (every event change to
//! its shard's, with `--events`) over the peer link: the forwarding hop's throughput and CPU
//! per message or write, as ratios.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Shape flags passed through to `eddy bench streams`.
const SHAPE_FLAGS: &[&str] = &["--producers", "--batches", "--messages", "--size"];
/// Shape flags passed through to `eddy bench events`.
const EVENT_SHAPE_FLAGS: &[&str] = &["--connections", "--seconds"];
const USAGE: &str = "usage: cargo xtask cluster-bench [--via-follower] [--producers N] [--batches N] [--messages N] [--size BYTES] | --events [--via-follower] [--connections N] [--seconds S]";

struct Figures {
    name: String,
    messages: u64,
    msgs_per_sec: f64,
    p50_us: u64,
    p99_us: u64,
}

/// Every run of a bench's `result.json` (for streams only the producers' runs, when named).
fn read_runs(out: &Path) -> Result<Vec<Figures>> {
    let text = std::fs::read_to_string(out.join("result.json"))
        .with_context(|| format!("reading {}", out.join("result.json").display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let runs = v["runs"].as_array().context("no runs in result.json")?;
    let producers: Vec<&serde_json::Value> = runs
        .iter()
        .filter(|r| r["name"].as_str().is_some_and(|n| n.contains("produc")))
        .collect();
    let chosen = if producers.is_empty() {
        runs.iter().collect()
    } else {
        producers
    };
    if chosen.is_empty() {
        bail!("no run in result.json");
    }
    Ok(chosen
        .into_iter()
        .map(|run| Figures {
            name: run["name"].as_str().unwrap_or("run").to_owned(),
            messages: run["messages"].as_u64().unwrap_or(0),
            msgs_per_sec: run["messages_per_sec"].as_f64().unwrap_or(0.0),
            p50_us: run["latency_us"]["p50"].as_u64().unwrap_or(0),
            p99_us: run["latency_us"]["p99"].as_u64().unwrap_or(0),
        })
        .collect())
}

/// CPU time (user + system) of a process so far, in seconds.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').context("malformed stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11).context("utime")?.parse()?;
    let stime: f64 = fields.get(12).context("stime")?.parse()?;
    // Clock ticks per second: 100 on every Linux this runs on.
    Ok((utime + stime) / 100.0)
}

pub(crate) fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let status = body.split_whitespace().nth(1)?.parse().ok()?;
    let content = body
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Some((status, content))
}

pub(crate) struct Cluster {
    pub(crate) children: Vec<Child>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Writes a CA and certificates for members 1-3 under `scratch/certs` (`eddy cluster certs`).
pub(crate) fn issue_certs(eddy: &Path, scratch: &Path) -> Result<PathBuf> {
    let certs = scratch.join("certs");
    let issued = Command::new(eddy)
        .args(["cluster", "certs", "--out"])
        .arg(&certs)
        .args(["--nodes", "1,2,3"])
        .stdout(Stdio::null())
        .status()?;
    if !issued.success() {
        bail!("eddy cluster certs failed ({issued})");
    }
    Ok(certs)
}

/// The index of the node whose `/health` names it the metadata leader, within 30 s.
pub(crate) fn wait_for_leader(addrs: &[NodeAddrs]) -> Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = addrs.iter().position(|a| {
            http_get(a.http, "/health").is_some_and(|(s, b)| s == 200 && b.trim() == "leader")
        });
        if let Some(i) = found {
            return Ok(i);
        }
        if Instant::now() > deadline {
            bail!("no leader within 30 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A node's stream, event (client) and HTTP addresses.
pub(crate) struct NodeAddrs {
    pub(crate) stream: SocketAddr,
    pub(crate) client: SocketAddr,
    pub(crate) http: SocketAddr,
}

/// Starts three nodes in `dir` (with peer TLS from `certs`, else plaintext); returns them
/// and their addresses.
pub(crate) fn start_cluster(
    eddy: &Path,
    dir: &Path,
    certs: Option<&Path>,
) -> Result<(Cluster, Vec<NodeAddrs>)> {
    let mut ports = Vec::new();
    for _ in 0..3 {
        ports.push((free_port()?, free_port()?, free_port()?, free_port()?));
    }
    let mut cluster = Cluster {
        children: Vec::new(),
    };
    let mut addrs = Vec::new();
    for i in 0..3usize {
        let host = format!("127.0.0.{}", i + 1);
        let (stream, client, http, replication) = ports[i];
        let mut cmd = Command::new(eddy);
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(dir.join(format!("node-{}", i + 1)))
            .args(["--host", &host])
            .args(["--stream-port", &stream.to_string()])
            .args(["--client-port", &client.to_string()])
            .args(["--http-port", &http.to_string()])
            .args(["--replication-port", &replication.to_string()])
            .args(["--node-id", &(i + 1).to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for j in (0..3usize).filter(|&j| j != i) {
            cmd.arg("--peer")
                .arg(format!("{}=127.0.0.{}:{}", j + 1, j + 1, ports[j].3));
        }
        match certs {
            Some(certs) => {
                cmd.arg("--peer-tls-cert")
                    .arg(certs.join(format!("node-{}.pem", i + 1)))
                    .arg("--peer-tls-key")
                    .arg(certs.join(format!("node-{}.key", i + 1)))
                    .arg("--peer-tls-ca")
                    .arg(certs.join("ca.pem"));
            }
            None => {
                cmd.arg("--insecure-peer-plaintext");
            }
        }
        cluster
            .children
            .push(cmd.spawn().context("start eddy serve")?);
        addrs.push(NodeAddrs {
            stream: format!("{host}:{stream}").parse()?,
            client: format!("{host}:{client}").parse()?,
            http: format!("{host}:{http}").parse()?,
        });
    }
    Ok((cluster, addrs))
}

pub fn run(eddy: &Path, scratch: &Path, args: &[String]) -> Result<()> {
    let events = args.iter().any(|a| a == "--events");
    let via_follower = args.iter().any(|a| a == "--via-follower");
    let (kind, flags, unit) = if events {
        ("events", EVENT_SHAPE_FLAGS, "write")
    } else {
        ("streams", SHAPE_FLAGS, "message")
    };
    let mut shape: Vec<String> = Vec::new();
    let mut it = args
        .iter()
        .filter(|a| *a != "--events" && *a != "--via-follower");
    while let Some(a) = it.next() {
        if flags.contains(&a.as_str()) {
            shape.push(a.clone());
            shape.push(it.next().context("a value after the flag")?.clone());
        } else {
            bail!("{USAGE}");
        }
    }
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch)?;
    let bench = |extra: &[String], out: &Path| -> Result<()> {
        let mode: &[&str] = if events {
            &["--plain"]
        } else {
            &["--mode", "durable", "--no-consumers", "--no-raw-baseline"]
        };
        let status = Command::new(eddy)
            .args(["bench", kind])
            .args(mode)
            .arg("--dir")
            .arg(scratch)
            .arg("--out")
            .arg(out)
            .args(&shape)
            .args(extra)
            .env("EDDY_USERNAME", "iggy")
            .env("EDDY_PASSWORD", "iggy")
            .status()?;
        if !status.success() {
            bail!("eddy bench {kind} failed ({status})");
        }
        Ok(())
    };

    let what = if events {
        "durable event writes"
    } else {
        "durable producers"
    };
    eprintln!("== single node ({what})");
    let single_out = scratch.join("single");
    bench(&[], &single_out)?;
    let single = read_runs(&single_out)?;

    let certs = issue_certs(eddy, scratch)?;
    let mut measured = Vec::new();
    // Either peer TLS against plaintext (both to the leader), or (--via-follower) the same
    // TLS cluster written through its leader and through a follower, which forwards every
    // event change to its shard's leader, or every batch to its partition's: the forwarding
    // hop's cost.
    let setups: [(&str, Option<&Path>, Target); 2] = if via_follower {
        [
            ("via the leader", Some(certs.as_path()), Target::Leader),
            ("via a follower", Some(certs.as_path()), Target::Follower),
        ]
    } else {
        [
            ("peer TLS", Some(certs.as_path()), Target::Leader),
            ("plaintext peers", None, Target::Leader),
        ]
    };
    for (label, tls, target) in setups {
        eprintln!("== three-node cluster on 127.0.0.1-3, {label} ({what})");
        measured.push((label, measure_cluster(eddy, scratch, tls, target, &bench)?));
    }
    let (rate, per) = if events {
        ("writes/s", "write")
    } else {
        ("msgs/s", "batch")
    };
    for (label, run) in &measured {
        print_cluster_run(label, run, &single, (rate, per, unit))?;
    }
    if let [(first, a), (second, b)] = measured.as_slice() {
        let sum = |r: &ClusterRun| r.runs.iter().map(|f| f.msgs_per_sec).sum::<f64>();
        let cpu = |r: &ClusterRun| r.cpu_per_item.iter().sum::<f64>();
        eprintln!(
            "\n{first} / {second} in this command: {rate} {:.2}, cluster CPU per {unit} {:.2} \
             ({:.2} / {:.2} µs)",
            sum(a) / sum(b).max(1.0),
            cpu(a) / cpu(b).max(f64::MIN_POSITIVE),
            cpu(a),
            cpu(b)
        );
    }
    eprintln!("results under {}", scratch.display());
    Ok(())
}

/// One cluster setup's figures against the single node's, as a Markdown table, with the
/// headline ratio and each node's server CPU; `units` names the rate, what a latency is per,
/// and what the CPU is per.
fn print_cluster_run(
    label: &str,
    run: &ClusterRun,
    single: &[Figures],
    units: (&str, &str, &str),
) -> Result<()> {
    let (rate, per, unit) = units;
    eprintln!("\n{label}:");
    eprintln!(
        "| run | single {rate} | cluster {rate} | cluster / single | single p50 / p99 µs/{per} \
         | cluster p50 / p99 µs/{per} |"
    );
    eprintln!("|---|---|---|---|---|---|");
    let mut headline = None;
    for c in &run.runs {
        let Some(s) = single.iter().find(|s| s.name == c.name) else {
            continue;
        };
        let ratio = c.msgs_per_sec / s.msgs_per_sec.max(1.0);
        eprintln!(
            "| {} | {:.0} | {:.0} | {ratio:.2} | {} / {} | {} / {} |",
            c.name, s.msgs_per_sec, c.msgs_per_sec, s.p50_us, s.p99_us, c.p50_us, c.p99_us
        );
        // The issue's shape: 1,000 connections for events; the producers for streams.
        if headline.is_none() || c.name.contains("1000 connections") {
            headline = Some((c.name.clone(), ratio));
        }
    }
    let (name, ratio) = headline.context("no run in both benches")?;
    eprintln!(
        "cluster / single {rate} ({name}): {ratio:.2} (goal >= 0.5 with three nodes on this \
         machine's cores)"
    );
    for (i, cpu) in run.cpu_per_item.iter().enumerate() {
        eprintln!(
            "node {} ({}): server CPU {cpu:.2} µs per {unit} (over all runs)",
            i + 1,
            match (i == run.leader, i == run.target) {
                (true, _) => "leader",
                (false, true) => "follower, written to",
                (false, false) => "follower",
            },
        );
    }
    Ok(())
}

/// What one cluster run measured.
struct ClusterRun {
    runs: Vec<Figures>,
    /// Each node's server CPU per message or write, in µs, over all runs.
    cpu_per_item: Vec<f64>,
    leader: usize,
    /// The node the bench wrote to.
    target: usize,
}

/// Which member the bench writes to.
#[derive(Clone, Copy)]
enum Target {
    /// The metadata group's leader (which leads every group).
    Leader,
    /// A follower: it forwards event changes to the shard's leader.
    Follower,
}

/// Starts a three-node cluster (peer TLS from `certs`, else plaintext), runs `bench` against
/// its leader and reads what it measured.
fn measure_cluster(
    eddy: &Path,
    scratch: &Path,
    certs: Option<&Path>,
    target: Target,
    bench: &dyn Fn(&[String], &Path) -> Result<()>,
) -> Result<ClusterRun> {
    let name = match (certs.is_some(), target) {
        (true, Target::Leader) => "tls",
        (true, Target::Follower) => "tls-follower",
        (false, _) => "plain",
    };
    let (cluster, addrs) = start_cluster(eddy, &scratch.join(format!("cluster-{name}")), certs)?;
    let leader = wait_for_leader(&addrs)?;
    // The root user is created by the leader right after its election.
    std::thread::sleep(Duration::from_secs(2));
    let pids: Vec<u32> = cluster.children.iter().map(Child::id).collect();
    let before: Vec<f64> = pids
        .iter()
        .map(|&p| cpu_seconds(p))
        .collect::<Result<_>>()?;
    let out = scratch.join(format!("cluster-{name}-results"));
    let to = match target {
        Target::Leader => leader,
        Target::Follower => (leader + 1) % addrs.len(),
    };
    bench(
        &[
            "--running".to_owned(),
            "--stream-addr".to_owned(),
            addrs[to].stream.to_string(),
            "--event-addr".to_owned(),
            addrs[to].client.to_string(),
            "--http-addr".to_owned(),
            addrs[to].http.to_string(),
            "--server-pid".to_owned(),
            pids[to].to_string(),
        ],
        &out,
    )?;
    let after: Vec<f64> = pids
        .iter()
        .map(|&p| cpu_seconds(p))
        .collect::<Result<_>>()?;
    drop(cluster);
    let runs = read_runs(&out)?;
    // The servers' CPU covers every run of the bench: divide by all their messages.
    let total: u64 = runs.iter().map(|f| f.messages).sum();
    #[allow(clippy::cast_precision_loss)] // message counts are far below 2^52
    let cpu_per_item = before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a - b) * 1e6 / total.max(1) as f64)
        .collect();
    Ok(ClusterRun {
        runs,
        cpu_per_item,
        leader,
        target: to,
    })
}

/// Where the bench's scratch directory goes.
pub fn scratch(target: &Path) -> PathBuf {
    target.join("cluster-bench")
}

#[cfg(test)]
mod tests {
    use super::read_runs;

    fn run(name: &str, messages: u64, rate: f64) -> serde_json::Value {
        serde_json::json!({
            "name": name,
            "messages": messages,
            "messages_per_sec": rate,
            "latency_us": {"p50": 10, "p99": 20},
        })
    }

    #[test]
    fn every_event_run_is_read_and_only_the_producers_of_a_stream_bench() {
        let dir = std::env::temp_dir().join(format!("eddy-xtask-runs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |runs: Vec<serde_json::Value>| {
            let body = serde_json::json!({ "runs": runs });
            std::fs::write(dir.join("result.json"), body.to_string()).unwrap();
        };
        write(vec![
            run("plain, 100 connections", 100, 10.0),
            run("plain, 1000 connections", 300, 30.0),
        ]);
        let runs = read_runs(&dir).unwrap();
        let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["plain, 100 connections", "plain, 1000 connections"]);
        assert_eq!(runs.iter().map(|r| r.messages).sum::<u64>(), 400);
        assert_eq!((runs[1].p50_us, runs[1].p99_us), (10, 20));

        write(vec![
            run("durable producers", 500, 50.0),
            run("durable consumers", 500, 60.0),
        ]);
        let runs = read_runs(&dir).unwrap();
        assert_eq!(runs.len(), 1);
        assert!((runs[0].msgs_per_sec - 50.0).abs() < f64::EPSILON);

        write(Vec::new());
        assert!(read_runs(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
