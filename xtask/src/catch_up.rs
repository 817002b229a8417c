//! `cargo xtask catch-up [--mib N] [--producers P] [--size B]`: how much a lagging member's
//! catch-up stalls the Raft threads. A local three-member cluster (peer TLS) on 127.0.0.1-3;
//! one follower is stopped (SIGSTOP), N MiB of durable messages are written to the leader,
//! the follower is resumed, and the command waits until every group's leader reports it no
//! entry behind (`eddy cluster status --groups`). It prints, per member, the Raft thread's
//! longest turn and its turns over 50 ms (`eddy_cluster_raft_longest_turn_seconds`,
//! `eddy_cluster_raft_stalls_total`) before the catch-up and after it, the catch-up's
//! duration and rate, and the rate of the writes before it as the baseline (same command,
//! same disk). A Raft turn that was running when the follower was stopped would count the
//! stop; the stopped member's figures say so when it happens.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::cluster_bench::{http_get, issue_certs, start_cluster, wait_for_leader, NodeAddrs};

const USAGE: &str = "usage: cargo xtask catch-up [--mib N] [--producers P] [--size BYTES]";

/// One member's Raft-thread figures.
#[derive(Debug, Clone, Copy, Default)]
struct Turns {
    longest_s: f64,
    stalls: f64,
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

fn turns(node: &NodeAddrs) -> Result<Turns> {
    let (_, text) = http_get(node.http, "/metrics").context("/metrics")?;
    Ok(Turns {
        longest_s: metric(&text, "eddy_cluster_raft_longest_turn_seconds").unwrap_or(0.0),
        stalls: metric(&text, "eddy_cluster_raft_stalls_total").unwrap_or(0.0),
    })
}

fn signal(pid: u32, sig: &str) -> Result<()> {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()?;
    if !status.success() {
        bail!("kill {sig} {pid} failed");
    }
    Ok(())
}

/// The largest lag any group's leader reports for `member` (None until every group answers).
/// `eddy cluster status --groups` asks every member and shows each group as its leader
/// reports it, wherever leadership moved.
fn lag_of(eddy: &Path, via: &NodeAddrs, member: u64) -> Option<u64> {
    let out = Command::new(eddy)
        .args(["cluster", "status", "--groups", "-o", "json"])
        .env("EDDY_STREAM_ADDR", via.stream.to_string())
        .env("EDDY_USERNAME", "iggy")
        .env("EDDY_PASSWORD", "iggy")
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let groups: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let mut worst = 0;
    for group in groups.as_array()? {
        // A group without a leader reports no lag: not caught up as far as we can tell. A
        // group the member now leads (it caught up and won an election) has it all.
        if group["leader"].as_u64()? == member {
            continue;
        }
        worst = worst.max(group["lag"][member.to_string()].as_u64()?);
    }
    Some(worst)
}

/// `--mib`, `--producers` and `--size`, with their defaults.
fn parse_args(args: &[String]) -> Result<(u64, u64, u64)> {
    let (mut mib, mut producers, mut size) = (512u64, 4u64, 1000u64);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value: u64 = it
            .next()
            .with_context(|| format!("a value after {flag}\n{USAGE}"))?
            .parse()
            .with_context(|| format!("{flag} takes a number"))?;
        match flag.as_str() {
            "--mib" => mib = value,
            "--producers" => producers = value.max(1),
            "--size" => size = value.max(1),
            _ => bail!("{USAGE}"),
        }
    }
    Ok((mib, producers, size))
}

/// Each member's longest Raft turn before and after the catch-up, and its long turns during
/// it, as a Markdown table.
fn print_turns(before: &[Turns], after: &[Turns], leader: usize, lagging: usize) {
    eprintln!(
        "| member | role | longest Raft turn before / after (ms) | turns > 50 ms during catch-up |"
    );
    eprintln!("|---|---|---|---|");
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        let role = if i == leader {
            "leader"
        } else if i == lagging {
            "lagging follower"
        } else {
            "follower"
        };
        eprintln!(
            "| {} | {role} | {:.1} / {:.1} | {:.0} |",
            i + 1,
            b.longest_s * 1e3,
            a.longest_s * 1e3,
            a.stalls - b.stalls
        );
    }
    eprintln!(
        "(the lagging member's figures are since its start: a turn running when it was \
         stopped counts the stop)"
    );
}

/// Runs the measurement with the release `eddy` at `eddy`, under `scratch`.
pub fn run(eddy: &Path, scratch: &Path, args: &[String]) -> Result<()> {
    let (mib, producers, size) = parse_args(args)?;
    let messages = 1000u64;
    let batches = (mib << 20) / (producers * messages * size).max(1);
    let batches = batches.max(1);
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch)?;
    let certs = issue_certs(eddy, scratch)?;
    let (cluster, addrs) = start_cluster(eddy, &scratch.join("cluster"), Some(&certs))?;
    let leader = wait_for_leader(&addrs)?;
    std::thread::sleep(Duration::from_secs(2));
    let lagging = (leader + 1) % addrs.len();
    let pids: Vec<u32> = cluster
        .children
        .iter()
        .map(std::process::Child::id)
        .collect();

    signal(pids[lagging], "-STOP")?;
    eprintln!(
        "== member {} stopped; writing {} MiB ({producers} producers x {batches} batches x \
         {messages} messages x {size} B) to the leader, member {}",
        lagging + 1,
        (producers * batches * messages * size) >> 20,
        leader + 1
    );
    let written_at = Instant::now();
    let status = Command::new(eddy)
        .args(["bench", "streams", "--mode", "durable", "--no-consumers"])
        .args(["--no-raw-baseline", "--running", "--keep"])
        .arg("--dir")
        .arg(scratch.join("bench"))
        .arg("--out")
        .arg(scratch.join("bench-results"))
        .args(["--producers", &producers.to_string()])
        .args(["--batches", &batches.to_string()])
        .args(["--messages", &messages.to_string()])
        .args(["--size", &size.to_string()])
        .args(["--stream-addr", &addrs[leader].stream.to_string()])
        .args(["--event-addr", &addrs[leader].client.to_string()])
        .args(["--http-addr", &addrs[leader].http.to_string()])
        .args(["--server-pid", &pids[leader].to_string()])
        .env("EDDY_USERNAME", "iggy")
        .env("EDDY_PASSWORD", "iggy")
        .stdout(Stdio::null())
        .status()?;
    let write_s = written_at.elapsed().as_secs_f64();
    if !status.success() {
        let _ = signal(pids[lagging], "-CONT");
        bail!("eddy bench streams failed ({status})");
    }
    let before: Vec<Turns> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            if i == lagging {
                Ok(Turns::default())
            } else {
                turns(a)
            }
        })
        .collect::<Result<_>>()?;

    signal(pids[lagging], "-CONT")?;
    let resumed = Instant::now();
    let member = u64::try_from(lagging + 1)?;
    loop {
        if lag_of(eddy, &addrs[leader], member) == Some(0) {
            break;
        }
        if resumed.elapsed() > Duration::from_secs(1800) {
            bail!("member {member} did not catch up within 30 minutes");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let catch_up_s = resumed.elapsed().as_secs_f64();
    let after: Vec<Turns> = addrs.iter().map(turns).collect::<Result<_>>()?;
    drop(cluster);

    #[allow(clippy::cast_precision_loss)] // sizes far below 2^52
    let mib_written = (producers * batches * messages * size) as f64 / f64::from(1 << 20);
    eprintln!(
        "\nwrites to the leader (baseline): {mib_written:.0} MiB in {write_s:.1} s = {:.1} MiB/s",
        mib_written / write_s
    );
    eprintln!(
        "catch-up of member {member}: {catch_up_s:.1} s = {:.1} MiB/s ({:.2} x the write rate)",
        mib_written / catch_up_s,
        write_s / catch_up_s
    );
    print_turns(&before, &after, leader, lagging);
    Ok(())
}
