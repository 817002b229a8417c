//! Deterministic simulation of an eddy cluster: 3 or 5 [`Node`](eddy_consensus::Node)s in one
//! process, their network, disks and clocks simulated, their clients simulated, all driven by
//! one seed, and every guarantee the consensus layer makes checked as the run goes.
//!
//! # How a run goes
//! 1. **Faults** (`fault_ms`): clients propose to every group while the nemesis partitions the
//!    network, crashes nodes (mid-fsync included, tearing unsynced writes), stalls clocks,
//!    fills disks and fails fsyncs, and compacts logs (and, with
//!    [`FaultConfig::with_data_loss`], wipes data directories when that is survivable); the
//!    network loses, duplicates, delays and reorders batches, a snapshot whose data a
//!    node copied out of band (an event shard's records) may be lost before its engine sees
//!    it, and operators delete partitions' oldest segments (`DELETE_SEGMENTS`) and purge
//!    partitions (a new purge generation, or the one held proposed again).
//!    Clients also read while the faults go on (polls, aggregate reads on random members):
//!    what a read is served must agree with every other read and with the final state (no
//!    member serves what was not committed).
//! 2. **Calm** (`calm_ms`): faults stop, the network heals, every node runs; each group must
//!    acknowledge a new proposal within `liveness_ms`.
//! 3. **Drain**: clients finish, every member catches up, and the final states are checked.
//!
//! With [`SimConfig::membership`] (`--membership`), members also change during the faults and
//! the calm, as `eddy cluster add/remove/replace` changes them (a [`Scenario`]: add, remove,
//! replace, remove a member cut from the others, add a learner that never catches up); the
//! changes are proposed to the real engine (`Node::propose_membership`), and the checker
//! follows the configurations it applies.
//!
//! The [`checker`] module lists the guarantees. A failing seed replays exactly: one
//! [`SimRng`] makes every choice, events run in (virtual time, sequence) order, and a rolling
//! hash of every event ([`Report::hash`]) shows two runs of a seed are the same run.
//!
//! # Plugging in other stores and workloads
//! [`Sim::new`] takes a [`StoreFactory`] (opens a group's store on a node's data directory,
//! completes fsyncs, cuts the power, injects disk faults) and a [`Workload`] (chooses each
//! operation's group and payload, finds an operation's id in an applied payload).
//! [`MemFactory`] and [`MixedWorkload`] are the first stage's pair; [`LogFactory`] runs the
//! groups on the on-disk store instead ([`Replicated`](eddy_consensus::Replicated) over
//! eddy-log directories on the crash-simulating backend; `--store log`); and
//! [`events::pair`] runs the server's own event-store shard groups over a real event store
//! per node, with Celeriant writes (OCC, idempotency) sent as request frames that each member
//! takes through the server's own decoding, conversion and preparation and answers through its
//! own codes and encoder, and a check of what clients decoded against what every member stores
//! (`--store events`); [`streams::pair`] the server's own
//! partition groups, with Iggy `SEND_MESSAGES` frames decoded by each member as the server
//! decodes them, stamped as the server's leader stamps them and answered with the server's
//! reply frames, and a check of every member's messages (`--store streams`); [`server::pair`] both at once, as one eddy
//! member runs them (`--store server`).
//!
//! ```
//! use eddy_sim::{FaultConfig, SimConfig};
//!
//! let mut cfg = SimConfig::new(7, 3, FaultConfig::light(3));
//! cfg.fault_ms = 5_000;
//! cfg.calm_ms = 2_000;
//! let report = eddy_sim::run(&cfg, false).expect("seed 7 keeps every guarantee");
//! assert!(report.acked > 0);
//! assert_eq!(report.hash, eddy_sim::run(&cfg, false).unwrap().hash, "replays exactly");
//! ```
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

pub mod campaign;
pub mod checker;
pub mod client;
pub mod config;
pub mod events;
mod hash;
pub mod logdir;
pub mod net;
pub mod probe;
mod recorded;
pub mod report;
pub mod rng;
pub mod server;
mod sim;
pub mod store;
pub mod stream_metadata;
pub mod streams;
pub mod workload;

pub use config::{FaultConfig, Millis, Scenario, SimConfig};
pub use logdir::{LogDir, LogFactory};
pub use report::{FaultCounts, FaultKind, MembershipCounts, Report};
pub use rng::SimRng;
pub use sim::{Failure, Sim};
pub use store::{DiskFault, MemDir, MemFactory, StoreFactory, StoreKind};
pub use workload::{MixedWorkload, OpId, Workload};

/// Runs one seed on the in-memory stores with the mixed workload; a panic anywhere in the
/// run (engine assertions included) becomes a [`Failure`] of that seed. `trace` prints every
/// notable event to stderr.
pub fn run(cfg: &SimConfig, trace: bool) -> Result<Report, Failure> {
    run_on(cfg, StoreKind::Mem, trace)
}

/// [`run`] on the chosen store: the in-memory one, or the on-disk one over eddy-log.
pub fn run_on(cfg: &SimConfig, store: StoreKind, trace: bool) -> Result<Report, Failure> {
    let workload = MixedWorkload::new(cfg.data_groups);
    match store {
        StoreKind::Mem => {
            let sim = Sim::new(cfg.clone(), MemFactory, workload).with_trace(trace);
            run_guarded(cfg.seed, move || sim.run())
        }
        StoreKind::Log => {
            let sim = Sim::new(cfg.clone(), LogFactory::default(), workload).with_trace(trace);
            run_guarded(cfg.seed, move || sim.run())
        }
        StoreKind::Server => run_guarded(cfg.seed, || {
            let (factory, workload) = server::pair(cfg.data_groups.max(1));
            Sim::new(cfg.clone(), factory, workload)
                .with_trace(trace)
                .run()
        }),
        StoreKind::Streams => run_guarded(cfg.seed, || {
            let (factory, workload) = streams::pair(cfg.data_groups.max(1));
            Sim::new(cfg.clone(), factory, workload)
                .with_trace(trace)
                .run()
        }),
        StoreKind::Events => run_guarded(cfg.seed, || {
            let shards = u32::try_from(cfg.data_groups.max(1)).unwrap_or(1);
            let (factory, workload) = events::pair(shards);
            Sim::new(cfg.clone(), factory, workload)
                .with_trace(trace)
                .run()
        }),
    }
}

/// Runs `f`, turning a panic into a failure of `seed`.
pub fn run_guarded(
    seed: u64,
    f: impl FnOnce() -> Result<Report, Failure>,
) -> Result<Report, Failure> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(panic) => Err(Failure {
            seed,
            at: 0,
            message: format!("panicked: {}", sim::panic_message(&*panic)),
            recent: Vec::new(),
        }),
    }
}
