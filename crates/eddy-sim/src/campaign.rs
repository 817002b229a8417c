//! Many seeds in a row: what `cargo xtask sim` runs and prints.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::config::Scenario;
use crate::config::{FaultConfig, Millis, SimConfig};
use crate::report::{FaultCounts, MembershipCounts, Report};
use crate::sim::Failure;
use crate::store::StoreKind;

/// Which seeds to run, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// First seed.
    pub start: u64,
    /// How many seeds.
    pub seeds: u64,
    /// Cluster members (3 or 5).
    pub nodes: u64,
    /// Fault profile: `none`, `light` or `heavy`.
    pub faults: String,
    /// Length of the faulty phase, when not the default.
    pub fault_secs: Option<u64>,
    /// Length of the calm phase, when not the default.
    pub calm_secs: Option<u64>,
    /// Inject data-directory losses (see [`FaultConfig::with_data_loss`]).
    pub data_loss: bool,
    /// Threads running seeds at once.
    pub jobs: usize,
    /// The store the nodes run on.
    pub store: StoreKind,
    /// Make a membership change in every run (the scenario cycles with the seed, see
    /// [`Scenario::for_seed`]).
    pub membership: bool,
}

impl Spec {
    /// The configuration of one seed, or why the spec is wrong.
    pub fn config(&self, seed: u64) -> Result<SimConfig, String> {
        if !(3..=7).contains(&self.nodes) || self.nodes.is_multiple_of(2) {
            return Err(format!("--nodes {}: 3, 5 or 7", self.nodes));
        }
        let mut faults = FaultConfig::profile(&self.faults, self.nodes)
            .ok_or_else(|| format!("--faults {}: none, light or heavy", self.faults))?;
        if self.data_loss {
            if self.membership {
                return Err(
                    "--data-loss and --membership: one or the other (a lost disk's \
                            survivability is judged against the founding members)"
                        .into(),
                );
            }
            faults = faults.with_data_loss();
        }
        let mut cfg = SimConfig::new(seed, self.nodes, faults);
        if self.membership {
            cfg.membership = Some(Scenario::for_seed(seed));
        }
        if let Some(s) = self.fault_secs {
            cfg.fault_ms = s * 1000;
        }
        if let Some(s) = self.calm_secs {
            cfg.calm_ms = s * 1000;
        }
        Ok(cfg)
    }

    /// The command that replays one seed of this campaign.
    pub fn replay_command(&self, seed: u64) -> String {
        let mut cmd = format!(
            "cargo xtask sim --seed {seed} --nodes {} --faults {}",
            self.nodes, self.faults
        );
        if let Some(s) = self.fault_secs {
            let _ = write!(cmd, " --fault-secs {s}");
        }
        if let Some(s) = self.calm_secs {
            let _ = write!(cmd, " --calm-secs {s}");
        }
        if self.data_loss {
            cmd.push_str(" --data-loss");
        }
        if self.store != StoreKind::Mem {
            let _ = write!(cmd, " --store {}", self.store.name());
        }
        if self.membership {
            cmd.push_str(" --membership");
        }
        cmd
    }
}

/// What a campaign did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Seeds run.
    pub seeds: u64,
    /// Virtual time simulated, all seeds.
    pub simulated_ms: Millis,
    /// Events processed.
    pub events: u64,
    /// Operations started, acknowledged, retried, applied twice.
    pub ops: u64,
    /// Operations acknowledged.
    pub acked: u64,
    /// Attempts after the first.
    pub retries: u64,
    /// Operations applied twice after a retry of an unknown outcome.
    pub duplicates: u64,
    /// Elections won.
    pub elections: u64,
    /// Snapshots installed.
    pub snapshots: u64,
    /// Slowest recovery after the faults stopped.
    pub liveness_ms: Millis,
    /// Faults injected.
    pub faults: FaultCounts,
    /// Membership changes made.
    pub membership: MembershipCounts,
    /// Failed seeds, in seed order.
    pub failures: Vec<Failure>,
    /// Wall-clock time.
    pub wall: Duration,
}

impl Summary {
    fn add(&mut self, result: &Result<Report, Failure>) {
        self.seeds += 1;
        match result {
            Ok(r) => {
                self.simulated_ms += r.simulated_ms;
                self.events += r.events;
                self.ops += r.ops;
                self.acked += r.acked;
                self.retries += r.retries;
                self.duplicates += r.duplicates;
                self.elections += r.elections;
                self.snapshots += r.snapshots;
                self.liveness_ms = self.liveness_ms.max(r.liveness_ms);
                self.faults.merge(&r.faults);
                self.membership.merge(&r.membership);
            }
            Err(f) => {
                self.simulated_ms += f.at;
                self.failures.push(f.clone());
            }
        }
    }

    /// Every failing seed with its recent events and the command that replays it (empty when
    /// none failed): what a test shows when a campaign fails.
    pub fn failure_report(&self, spec: &Spec) -> String {
        let mut out = String::new();
        for f in &self.failures {
            let _ = writeln!(out, "{f}");
            for line in &f.recent {
                let _ = writeln!(out, "    {line}");
            }
            let _ = writeln!(out, "  replay: {}", spec.replay_command(f.seed));
        }
        out
    }

    /// Simulated hours (for display: the rounding of a huge count does not matter).
    #[allow(clippy::cast_precision_loss)]
    pub fn simulated_hours(&self) -> f64 {
        self.simulated_ms as f64 / 3_600_000.0
    }
}

/// Runs every seed of the spec (`jobs` at a time), calling `each` with every result in seed
/// order as soon as it and all earlier ones are known.
pub fn run(
    spec: &Spec,
    run_one: impl Fn(&SimConfig) -> Result<Report, Failure> + Sync,
    mut each: impl FnMut(&Result<Report, Failure>),
) -> Result<Summary, String> {
    let configs: Vec<SimConfig> = (spec.start..spec.start + spec.seeds)
        .map(|seed| spec.config(seed))
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    let mut summary = Summary::default();
    let next = AtomicU64::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..spec.jobs.max(1) {
            let tx = tx.clone();
            let (next, configs, run_one) = (&next, &configs, &run_one);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(cfg) = configs.get(usize::try_from(i).expect("small")) else {
                    break;
                };
                if tx.send((i, run_one(cfg))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let mut pending = std::collections::BTreeMap::new();
        let mut shown = 0;
        for (i, result) in rx {
            pending.insert(i, result);
            while let Some(result) = pending.remove(&shown) {
                summary.add(&result);
                each(&result);
                shown += 1;
            }
        }
    });
    summary.wall = started.elapsed();
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        Spec {
            start: 10,
            seeds: 4,
            nodes: 3,
            faults: "heavy".into(),
            fault_secs: None,
            calm_secs: Some(5),
            data_loss: true,
            jobs: 2,
            store: StoreKind::Log,
            membership: false,
        }
    }

    #[test]
    fn specs_are_checked_and_replay_commands_repeat_every_option() {
        let s = spec();
        assert_eq!(
            s.replay_command(12),
            "cargo xtask sim --seed 12 --nodes 3 --faults heavy --calm-secs 5 --data-loss \
             --store log"
        );
        assert_eq!(s.config(12).unwrap().calm_ms, 5_000);
        assert!(s.config(12).unwrap().faults.wipe > 0.0);
        assert!(Spec { nodes: 4, ..spec() }.config(1).is_err());
        assert!(Spec {
            membership: true,
            ..spec()
        }
        .config(1)
        .is_err());
        let members = Spec {
            membership: true,
            data_loss: false,
            ..spec()
        };
        assert_eq!(
            members.config(13).unwrap().membership,
            Some(Scenario::RemovePartitioned)
        );
        assert!(members.replay_command(13).ends_with(" --membership"));
        assert!(Spec {
            faults: "medium".into(),
            ..spec()
        }
        .config(1)
        .is_err());
    }

    #[test]
    fn results_come_back_in_seed_order_and_add_up() {
        let mut seen = Vec::new();
        let summary = run(
            &spec(),
            |cfg| {
                if cfg.seed == 11 {
                    Err(Failure {
                        seed: 11,
                        at: 5,
                        message: "boom".into(),
                        recent: Vec::new(),
                    })
                } else {
                    Ok(Report {
                        seed: cfg.seed,
                        simulated_ms: 1000,
                        acked: 2,
                        ..Report::default()
                    })
                }
            },
            |r| seen.push(r.as_ref().map_or_else(|f| f.seed, |r| r.seed)),
        )
        .unwrap();
        assert_eq!(seen, [10, 11, 12, 13]);
        assert_eq!(summary.seeds, 4);
        assert_eq!(summary.acked, 6);
        assert_eq!(summary.simulated_ms, 3005);
        assert_eq!(summary.failures.len(), 1);
    }
}
