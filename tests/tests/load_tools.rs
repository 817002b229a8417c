//! Smoke runs of `eddy bench` (`cargo xtask event-load` / `stream-bench` run the full sweeps):
//! each benchmark starts its own server from the binary, drives it for a moment with eddy's
//! own client, and writes a result file and a report whose numbers must be consistent (counts
//! add up, percentiles ordered), never fast.

use std::path::Path;
use std::process::Command;

use eddy_tests::server_bin;
use serde_json::Value;

/// Runs `eddy bench ARGS -o json --out DIR`; returns the result printed on stdout after
/// checking it equals the result file and that the report holds both charts.
fn bench(args: &[&str], out: &Path) -> Value {
    let output = Command::new(server_bin!())
        .arg("bench")
        .args(args)
        .args(["-o", "json", "--out"])
        .arg(out)
        .env("TMPDIR", out.parent().unwrap())
        .output()
        .expect("eddy bench runs");
    assert!(
        output.status.success(),
        "eddy bench {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: Value = serde_json::from_slice(&output.stdout).expect("a JSON result on stdout");
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    assert_eq!(printed, file, "stdout and result.json agree");
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    // A server whose pid the bench knows (one it started, or `--server-pid`) has its memory
    // read: the peak beside its CPU figure, the resident set with every timeline sample, and
    // a third chart.
    let runs = printed["runs"].as_array().expect("runs");
    for run in runs {
        if run["server_cpu_us_per_op"].is_number() && run["system"] != "disk" {
            assert!(
                run["server_peak_rss_mib"].as_f64().is_some_and(|m| m > 1.0),
                "a server's run without its peak RSS: {run}"
            );
        }
    }
    let sampled = runs.iter().any(|r| {
        r["timeline"]
            .as_array()
            .is_some_and(|t| t.iter().any(|s| s["rss_mib"].is_number()))
    });
    assert_eq!(
        report.matches("<svg").count(),
        2 + usize::from(sampled),
        "throughput and latency charts, and memory when sampled"
    );
    assert!(report.contains("Throughput over time") && report.contains("Latency by percentile"));
    assert_eq!(report.contains("Server resident memory over time"), sampled);
    printed
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The invariants of every run: counts add up, percentiles are ordered, rates match.
fn check_run(run: &Value) {
    let name = format!("{} {}", run["system"], run["name"]);
    let ops = u(&run["operations"]);
    assert!(ops > 0, "{name} did nothing");
    assert_eq!(u(&run["errors"]), 0, "{name} had errors");
    let l = &run["latency_us"];
    assert_eq!(u(&l["count"]), ops, "{name}: one latency per operation");
    let order = ["min", "p50", "p90", "p99", "p999", "max"].map(|k| u(&l[k]));
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{name}: {order:?}");
    let spectrum: Vec<u64> = run["spectrum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u(&p[1]))
        .collect();
    assert!(
        spectrum.windows(2).all(|w| w[0] <= w[1]),
        "{name}: {spectrum:?}"
    );
    let secs = run["seconds"].as_f64().unwrap();
    let rate = run["ops_per_sec"].as_f64().unwrap();
    #[allow(clippy::cast_precision_loss)]
    let expected = ops as f64 / secs;
    assert!(
        (rate - expected).abs() <= expected * 1e-6,
        "{name}: {rate} vs {expected}"
    );
    if run["system"] != "disk" {
        let timeline = run["timeline"].as_array().unwrap();
        assert!(!timeline.is_empty(), "{name}: a throughput timeline");
        let sum: u64 = timeline.iter().map(|s| u(&s["ops"])).sum();
        assert_eq!(sum, ops, "{name}: the timeline adds up");
        let t: Vec<f64> = timeline.iter().map(|s| s["t"].as_f64().unwrap()).collect();
        assert!(
            t.windows(2).all(|w| w[0] <= w[1]),
            "{name}: time goes forward"
        );
    }
}

fn run<'a>(result: &'a Value, system: &str, name: &str) -> &'a Value {
    result["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["system"] == system && r["name"] == name)
        .unwrap_or_else(|| panic!("no {system} {name} run in {result}"))
}

#[test]
fn bench_events_reports_eddy_and_the_network_floor() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events");
    let result = bench(
        &[
            "events",
            "--connections",
            "8",
            "--seconds",
            "1",
            "--warmup-ms",
            "300",
            "--occ",
            "--floor",
        ],
        &out,
    );
    assert_eq!(result["kind"], "events");
    assert_eq!(result["runs"].as_array().unwrap().len(), 2);
    for system in ["floor", "eddy"] {
        let r = run(&result, system, "occ, 8 connections");
        check_run(r);
        assert_eq!(r["messages"], r["operations"], "one event per write");
        assert!(r["server_cpu_us_per_op"].as_f64().unwrap() >= 0.0);
    }
    // Only eddy syncs: its run has writes per fdatasync, the floor's has none.
    assert!(
        run(&result, "eddy", "occ, 8 connections")["writes_per_fsync"]
            .as_f64()
            .unwrap()
            >= 1.0
    );
    assert!(run(&result, "floor", "occ, 8 connections")["writes_per_fsync"].is_null());

    // A result compared with itself: every ratio is 1.
    let file = out.join("result.json");
    let compared = Command::new(server_bin!())
        .args(["bench", "compare"])
        .args([&file, &file])
        .args(["-o", "json"])
        .output()
        .unwrap();
    assert!(
        compared.status.success(),
        "{}",
        String::from_utf8_lossy(&compared.stderr)
    );
    let rows: Value = serde_json::from_slice(&compared.stdout).unwrap();
    let ops = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["figure"] == "ops/s")
        .collect::<Vec<_>>();
    assert_eq!(ops.len(), 2);
    assert!(ops.iter().all(|r| r["b/a"] == 1.0), "{rows}");
}

#[test]
fn bench_streams_reports_durable_producers_and_consumers_against_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("streams");
    let (producers, batches, messages, size) = (2u64, 5u64, 10u64, 100u64);
    let result = bench(
        &[
            "streams",
            "--producers",
            &producers.to_string(),
            "--batches",
            &batches.to_string(),
            "--messages",
            &messages.to_string(),
            "--size",
            &size.to_string(),
            "--mode",
            "durable",
        ],
        &out,
    );
    assert_eq!(result["kind"], "streams");
    let total = producers * batches * messages;
    let produced = run(&result, "eddy", "durable producers");
    check_run(produced);
    assert_eq!(
        u(&produced["operations"]),
        producers * batches,
        "one request per batch"
    );
    assert_eq!(u(&produced["messages"]), total);
    assert_eq!(u(&produced["bytes"]), total * size);
    let consumed = run(&result, "eddy", "durable consumers");
    check_run(consumed);
    assert_eq!(u(&consumed["messages"]), total, "every message read back");
    assert_eq!(u(&consumed["bytes"]), total * size);
    for when in ["before", "after"] {
        let disk = run(&result, "disk", &format!("raw write+fdatasync ({when})"));
        check_run(disk);
        assert_eq!(u(&disk["operations"]), producers * batches);
    }
    let notes = result["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("durable producer throughput / raw write+fdatasync")),
        "{notes:?}"
    );
}

/// Two OCC runs against one running server: the second run's aggregates are its own (an
/// earlier run's writes would make every OCC write of a reused aggregate a conflict).
#[test]
fn bench_events_runs_twice_against_one_running_server() {
    let eddy = eddy_tests::Eddy::start(server_bin!());
    let addrs = eddy.addrs();
    let dir = tempfile::tempdir().unwrap();
    for round in 0..2 {
        let result = bench(
            &[
                "events",
                "--running",
                "--server-pid",
                &eddy.pid().to_string(),
                "--event-addr",
                &addrs.client.to_string(),
                "--http-addr",
                &addrs.http.to_string(),
                "--connections",
                "4",
                "--seconds",
                "1",
                "--warmup-ms",
                "200",
                "--occ",
            ],
            &dir.path().join(format!("round-{round}")),
        );
        check_run(run(&result, "eddy", "occ, 4 connections"));
    }
}

/// `eddy bench streams` against a server it starts as a cluster of one (`--server-arg
/// --cluster`): such a member listens before its first election and the root user's
/// creation, so the bench loads it only once `/health` says ready (it used to log in at once
/// and be refused with InvalidCredentials). Every message is written and read back.
#[test]
fn bench_streams_waits_until_a_cluster_of_one_is_ready() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("one");
    let (producers, batches, messages) = (1u64, 3u64, 10u64);
    let result = bench(
        &[
            "streams",
            "--server-arg",
            "--cluster",
            "--server-arg",
            "--insecure-peer-plaintext",
            "--producers",
            &producers.to_string(),
            "--batches",
            &batches.to_string(),
            "--messages",
            &messages.to_string(),
            "--size",
            "100",
            "--mode",
            "durable",
            "--no-raw-baseline",
        ],
        &out,
    );
    let total = producers * batches * messages;
    let produced = run(&result, "eddy", "durable producers");
    check_run(produced);
    assert_eq!(u(&produced["messages"]), total);
    let consumed = run(&result, "eddy", "durable consumers");
    check_run(consumed);
    assert_eq!(u(&consumed["messages"]), total, "every message read back");
}
