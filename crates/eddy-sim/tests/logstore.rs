//! The simulator on the on-disk store (`--store log`): the nodes' groups are `Replicated`
//! stores over eddy-log directories on the crash-simulating backend. A short smoke over both
//! cluster sizes and the fault profiles, and exact replay of a seed.

use eddy_sim::campaign::{self, Spec};
use eddy_sim::{FaultConfig, FaultKind, SimConfig, StoreKind};

#[test]
fn a_seed_on_the_log_store_replays_byte_for_byte() {
    let mut cfg = SimConfig::new(42, 3, FaultConfig::heavy(3));
    cfg.fault_ms = 15_000;
    cfg.calm_ms = 5_000;
    let a = eddy_sim::run_on(&cfg, StoreKind::Log, false).unwrap();
    let b = eddy_sim::run_on(&cfg, StoreKind::Log, false).unwrap();
    assert_eq!(a, b, "two runs of one seed");
    assert!(a.acked > 0, "{a:?}");
}

#[test]
fn smoke_campaign_on_the_log_store_keeps_every_guarantee() {
    let mut seen = eddy_sim::FaultCounts::default();
    for (nodes, profile, seeds) in [
        (3, "light", 1..=4),
        (3, "heavy", 1..=6),
        (5, "heavy", 1..=3),
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
            store: StoreKind::Log,
            membership: false,
        };
        let summary = campaign::run(
            &spec,
            |cfg| eddy_sim::run_on(cfg, StoreKind::Log, false),
            |_| {},
        )
        .unwrap();
        assert!(
            summary.failures.is_empty(),
            "{nodes} nodes, {profile}:
{}",
            summary.failure_report(&spec)
        );
        assert!(summary.acked > 0);
        seen.merge(&summary.faults);
    }
    // The faults that reach the disk happened on it.
    for kind in [
        FaultKind::CrashUnsynced,
        FaultKind::TornWrite,
        FaultKind::Compaction,
        FaultKind::DiskFull,
        FaultKind::IoError,
    ] {
        assert!(
            seen.get(kind) > 0,
            "no {} in the smoke: {seen}",
            kind.name()
        );
    }
}
