//! `cargo xtask chaos [--seconds N] [--seed S] [--nodes N] [--no-nft] [--no-wipe]
//! [--membership]`: a real-process chaos campaign of a cluster (issue 17). `--no-wipe` leaves
//! data directories alone (by default some kills also delete the node's directory).
//! `--membership` also changes the members while the faults go on (issue 37): one change per
//! started 100 s (at most 3), a fresh member in its own namespace replacing one (`eddy cluster
//! replace`, at most once a run) or added and removed again, the metadata leader killed in
//! the middle of a command by seed and the command run again as an operator would.
//!
//! Builds the release `eddy`, makes sure `nft` is there (installs the `nftables` package with
//! apt-get when it is missing; without it the campaign falls back to link-down partitions and
//! says so), then runs the campaign test of `tests/tests/chaos.rs` (the harness lives beside
//! the published SDK, a dev-dependency of the tests crate) with the release binary. The test
//! prints the seed, the schedule as it runs, the report, and on failure the replay command;
//! its exit status is the task's.

use std::process::Command;

use anyhow::{bail, Context, Result};

struct Args {
    seconds: u64,
    seed: u64,
    nodes: u8,
    nft: bool,
    wipe: bool,
    membership: bool,
}

const USAGE: &str = "usage: cargo xtask chaos [--seconds N] [--seed S] [--nodes N] [--no-nft] \
                     [--no-wipe] [--membership]";

/// The command that replays a run.
fn replay(args: &Args, nft: bool) -> String {
    format!(
        "cargo xtask chaos --seconds {} --seed {} --nodes {}{}{}{}",
        args.seconds,
        args.seed,
        args.nodes,
        if nft { "" } else { " --no-nft" },
        if args.wipe { "" } else { " --no-wipe" },
        if args.membership { " --membership" } else { "" }
    )
}

fn parse(args: &[String]) -> Result<Args> {
    let mut out = Args {
        seconds: 300,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs() ^ u64::from(d.subsec_nanos())),
        nodes: 3,
        nft: true,
        wipe: true,
        membership: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--seconds" => out.seconds = value()?.parse().context("--seconds")?,
            "--seed" => out.seed = value()?.parse().context("--seed")?,
            "--nodes" => out.nodes = value()?.parse().context("--nodes")?,
            "--no-nft" => out.nft = false,
            "--no-wipe" => out.wipe = false,
            "--membership" => out.membership = true,
            other => bail!("unknown flag {other:?}; {USAGE}"),
        }
    }
    if !(3..=7).contains(&out.nodes) {
        bail!("--nodes must be 3 to 7");
    }
    Ok(out)
}

fn nft_present() -> bool {
    Command::new("nft")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `nft`, installed from the distribution's packages if missing; false when it cannot be.
fn ensure_nft() -> bool {
    if nft_present() {
        return true;
    }
    eprintln!("xtask: nft is missing; installing the nftables package");
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "nftables"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    if !install() {
        let _ = Command::new("apt-get").arg("update").status();
        install();
    }
    nft_present()
}

pub fn run(args: &[String]) -> Result<()> {
    let args = parse(args)?;
    let target = super::build_release_eddy()?;
    let nft = args.nft && ensure_nft();
    if args.nft && !nft {
        eprintln!(
            "xtask: nft could not be installed: partitions fall back to taking veth links down"
        );
    }
    eprintln!(
        "xtask: chaos seed {} ({} s, {} nodes); replay: {}",
        args.seed,
        args.seconds,
        args.nodes,
        replay(&args, nft)
    );
    let mut cmd = super::cargo();
    cmd.args([
        "test",
        "-p",
        "eddy-tests",
        "--test",
        "chaos",
        "--",
        "--ignored",
        "--exact",
        "chaos_campaign",
        "--nocapture",
    ])
    .env("EDDY_CHAOS_SECONDS", args.seconds.to_string())
    .env("EDDY_CHAOS_SEED", args.seed.to_string())
    .env("EDDY_CHAOS_NODES", args.nodes.to_string())
    .env("EDDY_CHAOS_NFT", if nft { "1" } else { "0" })
    .env("EDDY_CHAOS_DATA_LOSS", if args.wipe { "1" } else { "0" })
    .env(
        "EDDY_CHAOS_MEMBERSHIP",
        if args.membership { "1" } else { "0" },
    )
    .env("EDDY_CHAOS_BIN", target.join("release").join("eddy"));
    super::run(cmd).with_context(|| {
        format!(
            "chaos campaign failed (seed {}); replay: {}",
            args.seed,
            replay(&args, nft)
        )
    })
}
