//! `cargo xtask`: eddy's developer tasks (the alias lives in `.cargo/config.toml`).
//!
//! - `cargo xtask ci`: exactly what CI checks (`.ci/run` calls the same steps).
//! - `cargo xtask fuzz TARGET SECONDS`: one cargo-fuzz target for a fixed time.
//! - `cargo xtask fuzz-all SECONDS`: every fuzz target, SECONDS each.
//! - `cargo xtask bench [ARGS...]`: the criterion benches of every crate (release profile).
//! - `cargo xtask soak SECONDS`: the long crash-and-recover soaks (SIGKILL loops) and the
//!   hostile-client soak.
//! - `cargo xtask stream-bench [ARGS...]`: `eddy bench streams` on a release build (Iggy's
//!   benchmark shapes, durable and not, with the raw disk baseline).
//! - `cargo xtask cluster-bench [--producers N] [--batches N] [--messages N] [--size B]`:
//!   durable producers against one node and a local three-node cluster in one command, the
//!   cluster's throughput as a ratio of the single node's, server CPU per message per node;
//!   `--events [--connections N] [--seconds S]` does the same for durable event writes, and
//!   `--events --via-follower` compares writes through the leader and through a follower
//!   (which forwards each change to its shard's leader).
//! - `cargo xtask catch-up [--mib N]`: a follower stopped while N MiB are written, then resumed:
//!   its catch-up rate and the Raft threads' longest turns and stalls, before and after.
//! - `cargo xtask train-dict`: train the event protocol's default zstd dictionary.
//! - `cargo xtask sim [ARGS...]`: a campaign of the deterministic cluster simulator
//!   (`--seeds N [--start S] [--nodes 3|5] [--faults none|light|heavy]`, or `--seed S` to replay
//!   one run; `crates/eddy-sim/src/main.rs` lists every option).
//! - `cargo xtask chaos [--seconds N] [--seed S] [--nodes N] [--no-nft] [--no-wipe]
//!   [--membership]`: real-process chaos of a local cluster in network namespaces (kills,
//!   partitions, a faulty network; with `--membership` also member replacements and
//!   add-then-removes) under a seeded schedule, published-SDK clients, then the checker
//!   (`chaos.rs`).
//! - `cargo xtask event-load [ARGS...]`: `eddy bench events` on a release build, with the
//!   PostgreSQL OCC-append comparison and the network floor.
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

mod catch_up;
mod chaos;
mod cluster_bench;
mod train_dict;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((task, rest)) = args.split_first() else {
        print_help();
        return Ok(());
    };
    match task.as_str() {
        "ci" => ci(),
        "fuzz" => match rest {
            [target, seconds] => fuzz(target, seconds.parse().context("SECONDS")?),
            _ => bail!("usage: cargo xtask fuzz TARGET SECONDS"),
        },
        "fuzz-all" => match rest {
            [seconds] => {
                let seconds = seconds.parse().context("SECONDS")?;
                for target in fuzz_targets()? {
                    fuzz(&target, seconds)?;
                }
                Ok(())
            }
            _ => bail!("usage: cargo xtask fuzz-all SECONDS"),
        },
        "bench" => bench(rest),
        "soak" => match rest {
            [seconds] => soak(seconds.parse().context("SECONDS")?),
            _ => bail!("usage: cargo xtask soak SECONDS"),
        },
        "train-dict" => train_dict::run(rest),
        "event-load" => event_load(rest),
        "stream-bench" => stream_bench(rest),
        "cluster-bench" => {
            let target = build_release_eddy()?;
            // `--eddy PATH`: measure that binary instead (an A/B against another build).
            let (eddy, rest) = match rest.iter().position(|a| a == "--eddy") {
                Some(i) => {
                    let path = rest.get(i + 1).context("a path after --eddy")?;
                    let mut others = rest.to_vec();
                    others.drain(i..=i + 1);
                    (PathBuf::from(path), others)
                }
                None => (target.join("release").join("eddy"), rest.to_vec()),
            };
            cluster_bench::run(&eddy, &cluster_bench::scratch(&target), &rest)
        }
        "catch-up" => {
            let target = build_release_eddy()?;
            catch_up::run(
                &target.join("release").join("eddy"),
                &target.join("catch-up"),
                rest,
            )
        }
        "sim" => sim(rest),
        "chaos" => chaos::run(rest),
        "help" | "--help" | "-h" => {
            print_help();
            Ok(())
        }
        other => bail!("unknown task {other:?}; try `cargo xtask help`"),
    }
}

fn print_help() {
    eprintln!(
        "cargo xtask TASK\n\n\
         ci                      fmt, clippy (pedantic, warnings denied), tests, docs: what CI runs\n\
         fuzz TARGET SECONDS     run one fuzz target (cargo-fuzz) for SECONDS\n\
         fuzz-all SECONDS        run every fuzz target for SECONDS each\n\
         bench [ARGS...]         criterion benches of every crate; ARGS go to criterion\n\
         soak SECONDS            crash-and-recover soaks (SIGKILL loops) and the hostile-client\n\
                                 soak for SECONDS\n\
         stream-bench [ARGS...]  release build, then `eddy bench streams` (8 producers x 8\n\
                                 streams, 1000 x 1000 x 1000 B, durable and not); ARGS go to it\n\
         cluster-bench [ARGS...] durable producers: one node, then a local 3-node cluster's\n\
                                 leader; ratios and CPU per message per node (--producers N\n\
                                 --batches N --messages N --size B; --events [--connections N\n\
                                 --seconds S]: durable event writes instead; either with\n\
                                 --via-follower through the leader against a follower;\n\
                                 --eddy PATH:\n\
                                 measure that binary, for an A/B against another build)\n\
         catch-up [--mib N]      a follower stopped while N MiB (512) are written, then\n\
                                 resumed: catch-up rate, Raft-thread longest turns and\n\
                                 stalls per member (--producers P --size B)\n\
         train-dict [--check]    train the default zstd dictionary of the event protocol\n\
                                 (--check: retrain and compare with the committed one)\n\
         sim [ARGS...]           deterministic simulation campaign (release build of eddy-sim):\n\
                                 --seeds N [--start S] [--nodes 3|5] [--faults none|light|heavy]\n\
                                 [--jobs J] [--store mem|log|events|streams|server]\n\
                                 [--membership: every run also changes members under the\n\
                                 faults, add / remove / replace / remove-partitioned /\n\
                                 stuck-learner in turn by seed];\n\
                                 --seed S [--trace] replays one seed\n\
         chaos [ARGS...]         real-process chaos of a local cluster (root; network\n\
                                 namespaces): --seconds N (300) --seed S --nodes N (3) --no-nft\n\
                                 --no-wipe [--membership: members also change under the\n\
                                 faults, a fresh member replacing one (eddy cluster replace)\n\
                                 or added then removed, the metadata leader killed mid-change\n\
                                 and the command run again; checked: exactly the current\n\
                                 members in every group and in the cluster metadata]\n\
         event-load [ARGS...]    event-protocol load sweep (100, 1000, 4000 pinned connections,\n\
                                 plain and OCC) on a release build, and the same OCC append on\n\
                                 PostgreSQL and the network floor; ARGS go to `eddy bench\n\
                                 events` (default: --pg --floor)"
    );
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root());
    // `cargo run` gave this process xtask's own package variables; build scripts that watch
    // them (ring's `rerun-if-env-changed=CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`...) would see
    // them "changed" and rebuild ring and everything above it on every switch between
    // `cargo xtask ...` and plain `cargo`.
    for (k, _) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        if k.starts_with("CARGO_PKG_")
            || k.starts_with("CARGO_MANIFEST_")
            || matches!(
                k,
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
            )
        {
            cmd.env_remove(k);
        }
    }
    cmd
}

fn run(mut cmd: Command) -> Result<()> {
    eprintln!("xtask: running {cmd:?}");
    let status = cmd.status().with_context(|| format!("spawning {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

/// Exactly what CI checks: `.ci/run` is the single definition, so the two cannot drift.
fn ci() -> Result<()> {
    let mut cmd = Command::new(root().join(".ci").join("run"));
    cmd.current_dir(root());
    run(cmd)
}

fn fuzz_targets() -> Result<Vec<String>> {
    let dir = root().join("fuzz").join("fuzz_targets");
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                targets.push(stem.to_owned());
            }
        }
    }
    targets.sort();
    Ok(targets)
}

/// Runs one cargo-fuzz target for `seconds`. cargo-fuzz needs unstable compiler flags; on a
/// stable toolchain we opt in with RUSTC_BOOTSTRAP for this build only, and use no sanitizer
/// (coverage-guided fuzzing still works; the decoders are safe Rust).
fn fuzz(target: &str, seconds: u64) -> Result<()> {
    if Command::new("cargo-fuzz")
        .arg("--version")
        .output()
        .is_err()
    {
        bail!("cargo-fuzz is not installed: cargo install cargo-fuzz");
    }
    let corpus = root().join("fuzz").join("corpus").join(target);
    std::fs::create_dir_all(&corpus)?;
    let mut cmd = cargo();
    cmd.current_dir(root().join("fuzz"))
        .env("RUSTC_BOOTSTRAP", "1")
        .args(["fuzz", "run", "--sanitizer", "none", target])
        .arg(&corpus)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"));
    run(cmd)
}

fn bench(args: &[String]) -> Result<()> {
    let mut cmd = cargo();
    cmd.args(["bench", "--workspace"]);
    if !args.is_empty() {
        cmd.arg("--").args(args);
    }
    run(cmd)
}

/// Builds `eddy` in release and runs `eddy bench KIND` with its servers' data, the raw disk
/// baseline and PostgreSQL (through TMPDIR) under `target/SCRATCH`, a real disk, not a tmpfs;
/// the result file and the report go to `target/SCRATCH/results`.
/// Builds the release `eddy` binary; returns the target directory.
fn build_release_eddy() -> Result<PathBuf> {
    let mut build = cargo();
    build.args(["build", "--release", "-p", "eddy", "--bin", "eddy"]);
    run(build)?;
    Ok(std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from))
}

fn bench_release(kind: &str, scratch: &str, args: &[String]) -> Result<()> {
    let target = build_release_eddy()?;
    let scratch = target.join(scratch);
    std::fs::create_dir_all(&scratch)?;
    let mut cmd = Command::new(target.join("release").join("eddy"));
    cmd.args(["bench", kind, "--dir"])
        .arg(&scratch)
        .arg("--out")
        .arg(scratch.join("results"))
        .args(args)
        .env("TMPDIR", &scratch);
    run(cmd)
}

/// The event-protocol load sweep (`eddy bench events`, by default with `--pg --floor`).
fn event_load(args: &[String]) -> Result<()> {
    let defaults = ["--pg".to_owned(), "--floor".to_owned()];
    bench_release(
        "events",
        "event-load",
        if args.is_empty() { &defaults } else { args },
    )
}

/// Iggy's benchmark shapes (`eddy bench streams`).
fn stream_bench(args: &[String]) -> Result<()> {
    bench_release("streams", "stream-bench", args)
}

/// Builds the simulator optimised with debug assertions on (the `sim` profile: the stores'
/// and the engine's invariant checks run in every campaign) and runs it with `args` (its exit
/// status is the task's).
fn sim(args: &[String]) -> Result<()> {
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--profile",
        "sim",
        "--quiet",
        "-p",
        "eddy-sim",
        "--bin",
        "eddy-sim",
        "--",
    ])
    .args(args);
    run(cmd)
}

/// The long versions of the soaks: the SIGKILL crash tests (named `sigkill_*`) and the
/// hostile-client soak (`soak_hostile_clients`: half-open connections, login floods, clients
/// that stop reading on every port). Each reads `EDDY_SOAK_SECONDS`; `cargo test` runs each
/// for a few seconds.
fn soak(seconds: u64) -> Result<()> {
    let mut cmd = cargo();
    cmd.args([
        "test",
        "--release",
        "--workspace",
        "--",
        "sigkill",
        "soak_hostile_clients",
    ])
    .env("EDDY_SOAK_SECONDS", seconds.to_string());
    run(cmd)
}
