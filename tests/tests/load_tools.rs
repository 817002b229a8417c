//! Smoke runs of the load tools (`cargo xtask event-load` / `stream-bench` run the full sweeps):
//! each tool drives a real server with the published client for a moment and reports figures.

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .output()
        .expect("the load tool runs");
    assert!(
        out.status.success(),
        "{bin} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 report")
}

/// The table row of `system` / `variant` as its columns.
fn row<'a>(report: &'a str, system: &str, variant: &str) -> Vec<&'a str> {
    report
        .lines()
        .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
        .find(|c| c.len() > 9 && c[1] == system && c[2] == variant)
        .unwrap_or_else(|| panic!("no {system} {variant} row in:\n{report}"))
}

#[test]
fn event_load_tool_reports_eddy_and_the_network_floor() {
    let report = run(
        env!("CARGO_BIN_EXE_eddy_event_load"),
        &[
            "--server",
            env!("CARGO_BIN_EXE_eddy-test-server"),
            "--connections",
            "8",
            "--seconds",
            "1",
            "--occ",
            "--floor",
        ],
    );
    for system in ["floor", "eddy"] {
        let cols = row(&report, system, "occ");
        let writes_per_s: f64 = cols[4].parse().expect("writes/s");
        assert!(writes_per_s > 0.0, "{system} wrote nothing:\n{report}");
        assert_eq!(cols[9], "0", "{system} had errors:\n{report}");
        let cpu: f64 = cols[8].parse().expect("CPU us/write");
        assert!(cpu >= 0.0);
    }
    // Only eddy syncs: its row has writes per fdatasync, the floor's has none.
    assert_ne!(row(&report, "eddy", "occ")[7], "-");
    assert_eq!(row(&report, "floor", "occ")[7], "-");
}

#[test]
fn stream_load_tool_reports_durable_producers_and_consumers() {
    let report = run(
        env!("CARGO_BIN_EXE_eddy-stream-load"),
        &[
            "--server",
            env!("CARGO_BIN_EXE_eddy-test-server"),
            "--producers",
            "2",
            "--batches",
            "5",
            "--messages",
            "10",
            "--size",
            "100",
            "--mode",
            "durable",
        ],
    );
    for line in ["durable producers", "durable consumers"] {
        let l = report
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no `{line}` line in:\n{report}"));
        let msgs: f64 = l[line.len()..]
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no msgs/s in `{l}`"));
        assert!(msgs > 0.0, "{line}: {l}");
    }
    assert!(
        report.contains("durable producer throughput / raw write+fdatasync"),
        "{report}"
    );
}
