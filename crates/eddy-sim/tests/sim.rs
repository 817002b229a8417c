//! The simulator end to end: a smoke campaign over both cluster sizes and all fault profiles
//! (what `cargo test --workspace` runs), exact replay of a seed, the regression seeds, and
//! proof that the checker catches a disk that lies about durability.

use bytes::Bytes;
use eddy_consensus::{GroupId, GroupStore, NodeId, StoreError};
use eddy_sim::campaign::{self, Spec};
use eddy_sim::{
    DiskFault, FaultConfig, FaultKind, MemDir, MemFactory, MixedWorkload, Sim, SimConfig, SimRng,
    StoreFactory,
};

/// A short run: 15 s of faults, 5 s of calm.
fn short(seed: u64, nodes: u64, faults: FaultConfig) -> SimConfig {
    let mut cfg = SimConfig::new(seed, nodes, faults);
    cfg.fault_ms = 15_000;
    cfg.calm_ms = 5_000;
    cfg
}

#[test]
fn a_seed_replays_byte_for_byte_and_another_seed_does_not() {
    let cfg = short(42, 3, FaultConfig::heavy(3));
    let a = eddy_sim::run(&cfg, false).unwrap();
    let b = eddy_sim::run(&cfg, false).unwrap();
    assert_eq!(a, b, "two runs of one seed");
    assert!(a.events > 2_000 && a.acked > 0, "{a:?}");
    let c = eddy_sim::run(&short(43, 3, FaultConfig::heavy(3)), false).unwrap();
    assert_ne!(a.hash, c.hash);
}

#[test]
fn smoke_campaign_over_both_sizes_and_every_profile_keeps_every_guarantee() {
    let mut seen = eddy_sim::FaultCounts::default();
    let mut runs = 0;
    for (nodes, profile, seeds) in [
        (3, "none", 1..=2),
        (3, "light", 1..=12),
        (3, "heavy", 1..=12),
        (5, "light", 1..=4),
        (5, "heavy", 1..=6),
    ] {
        let spec = Spec {
            start: *seeds.start(),
            seeds: seeds.end() - seeds.start() + 1,
            nodes,
            faults: profile.into(),
            fault_secs: Some(15),
            calm_secs: Some(5),
            data_loss: false,
            jobs: 2,
            store: eddy_sim::StoreKind::Mem,
            membership: false,
        };
        let summary = campaign::run(&spec, |cfg| eddy_sim::run(cfg, false), |_| {}).unwrap();
        assert!(
            summary.failures.is_empty(),
            "{nodes} nodes, {profile}:
{}",
            summary.failure_report(&spec)
        );
        assert!(summary.acked > 0);
        seen.merge(&summary.faults);
        runs += summary.seeds;
    }
    assert_eq!(runs, 36);
    // The smoke is only worth its time if every fault actually happened in it.
    for kind in FaultKind::ALL {
        if matches!(kind, FaultKind::DataLoss | FaultKind::DataLossRefused) {
            continue; // off by default (FaultConfig::with_data_loss)
        }
        if matches!(
            kind,
            FaultKind::SnapshotLostAfterCopy | FaultKind::DeleteSegments | FaultKind::Purge
        ) {
            // Only stores that copy snapshot data (events) or have partitions (streams).
            continue;
        }
        assert!(
            seen.get(kind) > 0,
            "no {} in the smoke: {seen}",
            kind.name()
        );
    }
}

/// Seeds that once failed, each with what it found.
#[test]
fn smoke_membership_changes_under_faults_keep_every_guarantee() {
    // Seeds cycle through the scenarios (add, remove, replace, remove-partitioned,
    // stuck-learner), on both sizes and both fault profiles.
    let mut seen = eddy_sim::MembershipCounts::default();
    for (nodes, profile, seeds) in [
        (3, "light", 1..=10),
        (3, "heavy", 1..=10),
        (5, "light", 1..=5),
        (5, "heavy", 6..=10),
    ] {
        let spec = Spec {
            start: *seeds.start(),
            seeds: seeds.end() - seeds.start() + 1,
            nodes,
            faults: profile.into(),
            fault_secs: Some(15),
            calm_secs: Some(5),
            data_loss: false,
            jobs: 2,
            store: eddy_sim::StoreKind::Mem,
            membership: true,
        };
        let summary = campaign::run(&spec, |cfg| eddy_sim::run(cfg, false), |_| {}).unwrap();
        assert!(
            summary.failures.is_empty(),
            "{nodes} nodes, {profile}, membership:\n{}",
            summary.failure_report(&spec)
        );
        seen.merge(&summary.membership);
    }
    assert_eq!(seen.runs, 30);
    assert!(seen.completed > 50, "{seen}");
    assert!(seen.added >= 5 && seen.removed >= 5, "{seen}");
    assert!(seen.stuck_learners >= 2, "{seen}");
    assert!(seen.removal_proofs >= 1, "{seen}");
    assert!(seen.transfers >= 1, "{seen}");
}

#[test]
fn a_membership_seed_replays_byte_for_byte() {
    let mut cfg = short(12, 3, FaultConfig::heavy(3));
    cfg.membership = Some(eddy_sim::Scenario::Replace);
    let a = eddy_sim::run(&cfg, false).unwrap();
    assert_eq!(
        a,
        eddy_sim::run(&cfg, false).unwrap(),
        "two runs of one seed"
    );
    assert_eq!((a.membership.added, a.membership.removed), (1, 1), "{a:?}");
}

/// Open (#37): the only failures of the first membership campaign (1,250 seeds, 3 nodes light
/// and heavy, 5 nodes heavy): all replace runs under heavy faults whose calm phase keeps a
/// minority of the new voters down to show the removed member is not counted; one group
/// then acknowledges nothing within the 10 s liveness bound, though a leader is elected. Not
/// yet told apart: a bound too tight for a bare majority after heavy faults, or a liveness
/// problem. No safety check failed.
#[test]
#[ignore = "open: liveness with a bare majority after a replace under heavy faults (#37)"]
fn open_membership_seeds_commit_with_a_bare_majority_after_a_replace() {
    for (seed, nodes) in [(42, 3), (157, 3), (32, 5), (202, 5)] {
        let mut cfg = SimConfig::new(seed, nodes, FaultConfig::heavy(nodes));
        cfg.membership = Some(eddy_sim::Scenario::for_seed(seed));
        if let Err(f) = eddy_sim::run(&cfg, false) {
            panic!("{f}\n{}", f.recent.join("\n"));
        }
    }
}

#[test]
fn regression_seeds_keep_every_guarantee() {
    for (seed, nodes, profile, found) in [
        (
            1,
            3,
            "light",
            "raft-rs batch_append merged resent entries into a queued empty append \
             (eddy-consensus tests/consensus/cluster.rs, seed_1_light_...)",
        ),
        (
            133,
            3,
            "heavy",
            "MemDisk wrote an append held behind one a full disk refused, leaving a hole that \
             made the reopened log unreadable (eddy-consensus testing.rs)",
        ),
        (
            427,
            3,
            "heavy",
            "a restarted follower applied an uncommitted tail under a commit index saved for \
             entries it then lost (eddy-consensus tests/consensus/cluster.rs, seed_427_heavy_...); \
             seeds 523 and 2081 heavy, 154, 350 and 2798 with 5 nodes heavy found the same",
        ),
        (2798, 5, "heavy", "the same stale tail, in a 5-node cluster"),
        (
            1742,
            5,
            "heavy",
            "a snapshot behind an unsynced append stopped the node: 'applied(90) is out of \
             range' (eddy-consensus tests/consensus/cluster.rs, seed_1742_heavy_...)",
        ),
    ] {
        let cfg = SimConfig::new(seed, nodes, FaultConfig::profile(profile, nodes).unwrap());
        let report = eddy_sim::run(&cfg, false)
            .unwrap_or_else(|f| panic!("{f} (this seed once found: {found})"));
        assert!(report.acked > 100, "{report:?}");
    }
}

/// With data losses on, the nemesis tries them, injecting the survivable ones and refusing
/// the others (`probe::data_loss_hazard` is tested on its own), and every guarantee holds.
#[test]
fn data_losses_are_tried_when_asked_for_and_survived() {
    let mut tried = 0;
    for seed in 1..=12 {
        let cfg = short(seed, 5, FaultConfig::light(5).with_data_loss());
        let sim = Sim::new(cfg, MemFactory, MixedWorkload::new(3));
        let r = eddy_sim::run_guarded(seed, move || sim.run()).unwrap_or_else(|f| panic!("{f}"));
        tried += r.faults.get(FaultKind::DataLoss) + r.faults.get(FaultKind::DataLossRefused);
    }
    assert!(tried > 0, "the nemesis never tried a data loss");
}

/// Found by seed 40 (5 nodes, heavy, data loss) and 3 in 300 such seeds: a leader committed
/// an entry counting a follower's acknowledgement from before that follower crashed and lost
/// its data directory, so the entry was durable on 2 of 5 members only. A leader now stops
/// counting an unreachable peer's acknowledgements beyond the commit index
/// (`Node::report_unreachable`).
#[test]
fn regression_seed_40_no_commit_on_a_copy_a_crashed_member_lost() {
    let mut lost = 0;
    for seed in [40, 107, 124] {
        let cfg = SimConfig::new(seed, 5, FaultConfig::heavy(5).with_data_loss());
        let sim = Sim::new(cfg, MemFactory, MixedWorkload::new(3));
        let r = eddy_sim::run_guarded(seed, move || sim.run()).unwrap_or_else(|f| panic!("{f}"));
        lost += r.faults.get(FaultKind::DataLoss);
    }
    assert!(lost > 0, "no data loss in these seeds any more");
}

/// A disk whose fsyncs do nothing: a power cut loses everything, synced or not.
#[derive(Debug, Default)]
struct LyingDisk(MemFactory);

impl StoreFactory for LyingDisk {
    type Outcome = u64;
    type Dir = MemDir;
    fn create(&mut self, node: NodeId) -> MemDir {
        self.0.create(node)
    }
    fn open(
        &mut self,
        dir: &mut MemDir,
        group: GroupId,
    ) -> Result<Box<dyn GroupStore<Outcome = u64>>, StoreError> {
        self.0.open(dir, group)
    }
    fn unsynced(&self, dir: &MemDir) -> bool {
        self.0.unsynced(dir)
    }
    fn sync(&mut self, dir: &mut MemDir) {
        self.0.sync(dir);
    }
    fn crash(&mut self, dir: &mut MemDir, tear: bool, rng: &mut SimRng) -> u64 {
        self.0.crash(dir, tear, rng);
        *dir = MemDir::default();
        0
    }
    fn set_fault(&mut self, dir: &mut MemDir, fault: Option<DiskFault>) {
        self.0.set_fault(dir, fault);
    }
    fn compact(&mut self, dir: &mut MemDir, group: GroupId, through: u64) -> bool {
        self.0.compact(dir, group, through)
    }
    fn state(&self, dir: &MemDir, group: GroupId) -> Vec<(u64, Bytes)> {
        self.0.state(dir, group)
    }
}

#[test]
fn a_disk_that_loses_synced_writes_is_caught() {
    let failures: Vec<_> = (1..=20)
        .filter_map(|seed| {
            let cfg = short(seed, 3, FaultConfig::heavy(3));
            let sim = Sim::new(cfg, LyingDisk::default(), MixedWorkload::new(3));
            eddy_sim::run_guarded(seed, move || sim.run()).err()
        })
        .collect();
    for f in &failures {
        eprintln!("caught: {f}");
    }
    assert!(
        failures.iter().all(|f| !f.recent.is_empty()),
        "each failure shows what led to it"
    );
    // The engine itself may trip on the lost log (raft-rs panics on a commit index beyond
    // it); the checker must catch the loss on its own in some seed.
    assert!(
        failures.iter().any(|f| !f.message.starts_with("panicked")),
        "no checker finding among {} failures",
        failures.len()
    );
}
