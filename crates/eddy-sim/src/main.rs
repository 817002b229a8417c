//! `eddy-sim`: runs a campaign of seeds (what `cargo xtask sim` builds and runs).
//!
//! ```text
//! eddy-sim --seeds 1000 --start 1 --nodes 5 --faults heavy --jobs 2
//! eddy-sim --seed 42 --nodes 3 --faults light --trace     # replay one seed, every event shown
//! eddy-sim --seeds 300 --store log                         # the nodes on eddy-log directories
//! eddy-sim --seeds 100 --store events                      # the server's event-store groups
//! eddy-sim --seeds 100 --store streams                     # the server's partition groups
//! eddy-sim --seeds 100 --store server                      # both, as one member runs them
//! eddy-sim --seeds 500 --membership --jobs 2               # members change under the faults
//! ```
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule
#![allow(clippy::print_stdout, clippy::cast_precision_loss)]

use std::process::ExitCode;

use clap::Parser;
use eddy_sim::campaign::{self, Spec};
use eddy_sim::StoreKind;

/// Deterministic simulation of an eddy cluster: each seed is one reproducible run.
#[derive(Debug, Parser)]
#[command(name = "eddy-sim")]
#[allow(clippy::struct_excessive_bools)] // independent command-line flags
struct Args {
    /// Run only this seed (replay).
    #[arg(long, conflicts_with_all = ["seeds", "start"])]
    seed: Option<u64>,
    /// How many seeds to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 1)]
    start: u64,
    /// Cluster members: 3 or 5.
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Fault profile: none, light or heavy.
    #[arg(long, default_value = "light")]
    faults: String,
    /// Seconds of faults per seed (default 30).
    #[arg(long)]
    fault_secs: Option<u64>,
    /// Seconds of calm workload after the faults (default 10).
    #[arg(long)]
    calm_secs: Option<u64>,
    /// Also lose data directories, one member at a time. The member rejoins rebuilding (no
    /// votes until caught up), leaders forget its progress when it greets them again, and a
    /// leader never counts an acknowledgement from before a peer's connection broke beyond
    /// the commit index.
    #[arg(long)]
    data_loss: bool,
    /// The store under the nodes: `mem` (the in-memory store), `log` (the on-disk store,
    /// eddy-log directories on the crash-simulating backend), `events` (the server's
    /// event-store shard groups over real event stores, Celeriant writes with OCC and
    /// idempotency, checked against what every member stores), `streams` (the server's
    /// metadata and partition groups, Iggy sends stamped by the leader, every member's
    /// messages, streams, topics and offsets checked) or `server` (both at once, as a member
    /// runs them).
    #[arg(long, default_value = "mem")]
    store: String,
    /// Every run also changes members while the faults go on, as `eddy cluster add/remove/
    /// replace` does (learner, catch-up, voter; removal one change per group; a dropped
    /// change proposed again), the scenario cycling with the seed: add a new member, remove a
    /// founder, replace one (add, then remove), remove a founder cut from the others for
    /// good, add a new member cut for good (a learner that must never vote while the groups
    /// go on committing). Checked besides: one leader per term, only voters lead, the same
    /// membership applied at an index everywhere, commitment on a majority of a
    /// configuration in force, every group committing through the calm phase with only a
    /// bare majority of the new voters up after a removal, and every member ending with the
    /// same membership. Not with --data-loss.
    #[arg(long)]
    membership: bool,
    /// Seeds run at once.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Print every notable event (role changes, faults) as it happens, and the engine's log
    /// records as RUST_LOG selects (e.g. RUST_LOG=eddy_consensus=debug).
    #[arg(long)]
    trace: bool,
    /// One line per seed.
    #[arg(long)]
    verbose: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let Some(store) = StoreKind::by_name(&args.store) else {
        eprintln!(
            "eddy-sim: --store {}: mem, log, events or streams",
            args.store
        );
        return ExitCode::from(2);
    };
    let spec = Spec {
        start: args.seed.unwrap_or(args.start),
        seeds: if args.seed.is_some() { 1 } else { args.seeds },
        nodes: args.nodes,
        faults: args.faults.clone(),
        fault_secs: args.fault_secs,
        calm_secs: args.calm_secs,
        data_loss: args.data_loss,
        jobs: args.jobs,
        store,
        membership: args.membership,
    };
    let trace = args.trace;
    if trace {
        // The engine's records, to stderr like the simulator's own trace lines.
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .without_time()
            .init();
    }
    let verbose = args.verbose || args.seed.is_some();
    if args.seed.is_none() {
        // A campaign reports each panic as its seed's failure; the default hook would print
        // every one of them again.
        std::panic::set_hook(Box::new(|_| {}));
    }
    let mut done = 0u64;
    let result = campaign::run(
        &spec,
        |cfg| eddy_sim::run_on(cfg, store, trace),
        |result| {
            done += 1;
            match result {
                Ok(r) if verbose => {
                    println!(
                        "seed {}: ok, {:.1} s simulated, {} ops ({} acked, {} retries), {} \
                         events, hash {:016x}; faults: {}",
                        r.seed,
                        r.simulated_ms as f64 / 1000.0,
                        r.ops,
                        r.acked,
                        r.retries,
                        r.events,
                        r.hash,
                        r.faults
                    );
                    if r.membership.runs > 0 {
                        println!("  membership: {}", r.membership);
                    }
                }
                Ok(_) => {
                    if done.is_multiple_of(100) {
                        eprintln!("{done} seeds run");
                    }
                }
                Err(f) => {
                    println!("FAIL {f}");
                    for line in &f.recent {
                        println!("    {line}");
                    }
                    println!("  replay: {}", spec.replay_command(f.seed));
                }
            }
        },
    );
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            eprintln!("eddy-sim: {e}");
            return ExitCode::from(2);
        }
    };
    print_summary(&spec, &summary);
    if summary.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The campaign's totals, and each failed seed with its replay command.
fn print_summary(spec: &Spec, summary: &campaign::Summary) {
    println!(
        "seeds run: {} (from {}), nodes {}, faults {}, store {}",
        summary.seeds,
        spec.start,
        spec.nodes,
        spec.faults,
        spec.store.name()
    );
    println!(
        "simulated: {:.2} h in {:.1} s of wall time ({} events)",
        summary.simulated_hours(),
        summary.wall.as_secs_f64(),
        summary.events
    );
    println!(
        "workload: {} ops, {} acknowledged, {} retries, {} applied twice after an unknown \
         outcome; {} elections, {} snapshots installed; slowest recovery after faults {} ms",
        summary.ops,
        summary.acked,
        summary.retries,
        summary.duplicates,
        summary.elections,
        summary.snapshots,
        summary.liveness_ms
    );
    println!("faults injected: {}", summary.faults);
    if spec.membership {
        println!("membership: {}", summary.membership);
    }
    println!("failures: {}", summary.failures.len());
    for f in &summary.failures {
        println!("  seed {}: {}", f.seed, f.message);
        println!("    replay: {}", spec.replay_command(f.seed));
    }
}
