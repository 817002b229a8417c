//! Real-process chaos of a three-node cluster (issue 17; `chaos_support/mod.rs` describes the
//! harness): a short smoke with a fixed seed in every `cargo test`, a membership smoke (faults
//! while a member is replaced; ignored until two server issues it runs into are fixed), and
//! the campaign that `cargo xtask chaos` runs (ignored otherwise).
//!
//! Both need root (network namespaces) and `ip`; without them they print why and pass.
#![allow(clippy::too_many_lines)] // tests are exempt from the 100-line rule

mod chaos_support;

use std::path::PathBuf;

use chaos_support::{net, run, Options};
use eddy_tests::server_bin;

/// The smoke's seed: its schedule (kills of the leader and of a node, a link down, proxy
/// one-way drops and a degraded network) is the same on every run.
const SMOKE_SEED: u64 = 25;

/// One run at a time in this process: a run's namespaces, links and teardown are named by
/// the process id.
static ONE_RUN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_smoke() {
    let _one = ONE_RUN.lock().await;
    if let Some(why) = net::unavailable() {
        eprintln!("chaos smoke skipped: {why}");
        return;
    }
    let options = Options {
        seconds: 20,
        seed: SMOKE_SEED,
        nodes: 3,
        bin: PathBuf::from(server_bin!()),
        nft: false,
        majority_loss: false,
        data_loss: false,
        concurrent: false,
        partitions: 2,
        producers: 3,
        event_writers: 3,
        membership: false,
        replay: "cargo test -p eddy-tests --test chaos chaos_smoke -- --nocapture".to_owned(),
    };
    let report = run(&options).await.expect("the chaos harness runs");
    assert!(
        report.passed(),
        "chaos smoke failed (seed {SMOKE_SEED}): {:#?}",
        report.verdict.failures
    );
}

/// The membership smoke's seed: the metadata leader replaced by a new member while the faults
/// go on, and killed while the `eddy cluster replace` runs (so it is run again, as `add` then
/// `remove`, when the first run fails). Its other faults are a kill of the leader, one-way
/// drops and a degraded network in the proxy: no kill of a member that is not the leader and
/// no link down, which today can store a batch twice (a send forwarded to a member that dies
/// is answered `TransientNotAccepted`, and the SDK sends it again; seen in campaigns with and
/// without membership changes).
const MEMBERSHIP_SMOKE_SEED: u64 = 50;

/// Ignored in `cargo test` until two server issues it runs into are fixed (about one run in
/// four fails on either): a send forwarded to a member that dies is answered
/// `TransientNotAccepted` and the SDK sends it again (an acknowledged batch stored twice), and
/// a member added at run time that knew no leader of a partition group for over a minute
/// after the heal (its reads of that partition answered `TransientNotAccepted`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "flaky on two known server issues (see its docs); run it with -- --ignored"]
async fn chaos_membership_smoke() {
    let _one = ONE_RUN.lock().await;
    if let Some(why) = net::unavailable() {
        eprintln!("chaos membership smoke skipped: {why}");
        return;
    }
    let options = Options {
        seconds: 30,
        seed: MEMBERSHIP_SMOKE_SEED,
        nodes: 3,
        bin: PathBuf::from(server_bin!()),
        nft: false,
        majority_loss: false,
        data_loss: false,
        concurrent: false,
        partitions: 2,
        producers: 3,
        event_writers: 3,
        membership: true,
        replay: "cargo test -p eddy-tests --test chaos chaos_membership_smoke -- --nocapture"
            .to_owned(),
    };
    let report = run(&options).await.expect("the chaos harness runs");
    assert!(
        report.passed(),
        "chaos membership smoke failed (seed {MEMBERSHIP_SMOKE_SEED}): {:#?}",
        report.verdict.failures
    );
    let tally = report.membership.expect("membership changes made");
    assert_eq!((tally.planned, tally.completed), (1, 1), "{tally:?}");
    assert_eq!(report.members.len(), 3, "{:?}", report.members);
    assert!(report.members.contains(&4), "{:?}", report.members);
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `cargo xtask chaos` runs this with `EDDY_CHAOS_SECONDS`, `EDDY_CHAOS_SEED`,
/// `EDDY_CHAOS_NODES`, `EDDY_CHAOS_NFT`, `EDDY_CHAOS_DATA_LOSS`, `EDDY_CHAOS_MEMBERSHIP`
/// (1/0) and `EDDY_CHAOS_BIN` (the release `eddy`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a chaos campaign: run it with `cargo xtask chaos`"]
async fn chaos_campaign() {
    if let Some(why) = net::unavailable() {
        panic!("chaos campaign cannot run: {why}");
    }
    let seconds = env_or("EDDY_CHAOS_SECONDS", 300);
    let seed = env_or("EDDY_CHAOS_SEED", 1);
    let nodes = env_or("EDDY_CHAOS_NODES", 3);
    let nft = env_or("EDDY_CHAOS_NFT", u8::from(net::nft_available())) == 1 && net::nft_available();
    let data_loss = env_or("EDDY_CHAOS_DATA_LOSS", 1) == 1;
    let membership = env_or("EDDY_CHAOS_MEMBERSHIP", 0) == 1;
    let bin = std::env::var("EDDY_CHAOS_BIN")
        .map_or_else(|_| PathBuf::from(server_bin!()), PathBuf::from);
    let options = Options {
        seconds,
        seed,
        nodes,
        bin,
        nft,
        majority_loss: true,
        data_loss,
        concurrent: true,
        partitions: 3,
        producers: 6,
        event_writers: 6,
        membership,
        replay: format!(
            "cargo xtask chaos --seconds {seconds} --seed {seed} --nodes {nodes}{}{}{}",
            if nft { "" } else { " --no-nft" },
            if data_loss { "" } else { " --no-wipe" },
            if membership { " --membership" } else { "" }
        ),
    };
    let _one = ONE_RUN.lock().await;
    let report = run(&options).await.expect("the chaos harness runs");
    assert!(
        report.passed(),
        "chaos campaign failed: seed {seed}; replay with `{}`",
        options.replay
    );
}

#[test]
fn a_seed_replays_its_fault_schedule() {
    use chaos_support::schedule::{schedule, Menu};
    use std::time::Duration;
    let menu = Menu {
        nft: true,
        majority_loss: true,
        data_loss: true,
        concurrent: true,
    };
    let length = Duration::from_secs(300);
    let a = schedule(42, length, 3, menu);
    assert_eq!(a, schedule(42, length, 3, menu));
    assert_ne!(a, schedule(43, length, 3, menu));
    assert!(a.len() > 20, "{} episodes", a.len());
    assert!(a.iter().all(|e| e.at + e.hold <= length));
    let kinds: std::collections::BTreeSet<_> = a.iter().map(|e| e.fault.kind()).collect();
    assert!(kinds.len() >= 6, "{kinds:?}");
    // Wipes come only from the menu, and only in place of single-node kills.
    let wipes = |data_loss: bool| {
        (0..50)
            .flat_map(|seed| schedule(seed, length, 3, Menu { data_loss, ..menu }))
            .filter(|e| e.fault.kind() == "wipe")
            .count()
    };
    assert_eq!(wipes(false), 0);
    assert!(wipes(true) > 10, "{} wipes in 50 seeds", wipes(true));
    // A degraded network beside other faults, never beside a proxy fault, only when asked.
    assert!(a.iter().any(|e| e.also.is_some()), "no concurrent fault");
    assert!(a
        .iter()
        .all(|e| e.also.is_none() || !matches!(e.fault.kind(), "proxy-one-way" | "proxy-degrade")));
    let calm = Menu {
        concurrent: false,
        ..menu
    };
    assert!(schedule(42, length, 3, calm)
        .iter()
        .all(|e| e.also.is_none()));
}

#[test]
fn the_checker_finds_loss_duplication_and_disorder() {
    use chaos_support::checker::{check, NodeView};
    use chaos_support::workload::{payload, Attempt, History};
    use std::time::{Duration, Instant};
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let attempt = |seq: u64, count: u32, start: u64, end: u64, acked: bool| Attempt {
        producer: 1,
        seq,
        partition: 0,
        count,
        start: at(start),
        end: at(end),
        acked,
    };
    let stored = |batches: &[(u64, u32)]| {
        let mut log = Vec::new();
        for &(seq, count) in batches {
            for i in 0..count {
                log.push((log.len() as u64, payload(1, seq, i, count).into_bytes()));
            }
        }
        NodeView {
            partitions: vec![log],
            offsets: vec![None],
        }
    };
    let history = History {
        sends: vec![
            attempt(1, 2, 0, 10, true),
            attempt(2, 1, 20, 30, false),
            attempt(3, 3, 40, 50, true),
        ],
        offsets: Vec::new(),
        origin: None,
    };
    let good = stored(&[(1, 2), (2, 1), (3, 3)]);
    let verdict = check(&history, &[good.clone(), good.clone()]);
    assert!(verdict.failures.is_empty(), "{:?}", verdict.failures);
    let without_unknown = stored(&[(1, 2), (3, 3)]);
    assert!(check(&history, std::slice::from_ref(&without_unknown))
        .failures
        .is_empty());
    let lost = stored(&[(1, 2), (2, 1)]);
    let failures = check(&history, &[lost]).failures;
    assert!(failures.iter().any(|f| f.contains("lost")), "{failures:?}");
    let duplicated = stored(&[(1, 2), (3, 3), (3, 3)]);
    assert!(!check(&history, &[duplicated]).failures.is_empty());
    let disordered = stored(&[(3, 3), (1, 2)]);
    let failures = check(&history, &[disordered]).failures;
    assert!(
        failures.iter().any(|f| f.contains("before")),
        "{failures:?}"
    );
    let diverged = check(&history, &[good, without_unknown]).failures;
    assert!(
        diverged.iter().any(|f| f.contains("disagree")),
        "{diverged:?}"
    );
}

#[test]
fn the_event_checker_finds_gaps_loss_overrun_and_divergence() {
    use chaos_support::checker::events::check;
    use chaos_support::workload::events::Told;
    let told = vec![Told {
        writer: 0,
        acked: vec![1, 2, 4],
        last_written: 4,
        unknown: 2,
        wrong_acks: Vec::new(),
    }];
    let agg = |n: u64| (1..=n).map(|s| (s, s)).collect::<Vec<_>>();
    // Version 3 landed unseen (its seq was inferred), version 5 was in flight.
    for n in [4, 5] {
        let verdict = check(&told, &[vec![agg(n)], vec![agg(n)]]);
        assert!(verdict.failures.is_empty(), "{:?}", verdict.failures);
    }
    let short = check(&told, &[vec![agg(3)]]).failures;
    assert!(short.iter().any(|f| f.contains("lost")), "{short:?}");
    let overrun = check(&told, &[vec![agg(6)]]).failures;
    assert!(overrun.iter().any(|f| f.contains("holds 6")), "{overrun:?}");
    let duplicated = vec![(1, 1), (2, 2), (3, 2), (4, 4)];
    assert!(!check(&told, &[vec![duplicated]]).failures.is_empty());
    let diverged = check(&told, &[vec![agg(4)], vec![agg(5)]]).failures;
    assert!(
        diverged.iter().any(|f| f.contains("disagree")),
        "{diverged:?}"
    );
}

#[test]
fn a_seed_replays_its_membership_changes() {
    use chaos_support::schedule::{changes, ChangeKind, MAX_CHANGES};
    use std::time::Duration;
    let length = Duration::from_secs(300);
    let a = changes(42, length, 3);
    assert_eq!(a, changes(42, length, 3));
    assert_ne!(a, changes(43, length, 3));
    for seed in 0..50 {
        let plan = changes(seed, length, 3);
        assert_eq!(plan.len(), usize::from(MAX_CHANGES));
        // At most one replace; the rest add a member and remove it again.
        let replaces = plan
            .iter()
            .filter(|c| c.kind == ChangeKind::Replace)
            .count();
        assert_eq!(replaces, 1, "seed {seed}: {plan:?}");
        assert!(plan.windows(2).all(|w| w[0].at < w[1].at));
        assert!(plan.iter().all(|c| c.at < length));
    }
    // A short run makes one change.
    assert_eq!(changes(7, Duration::from_secs(30), 3).len(), 1);
    // The membership smoke replaces a member and kills the metadata leader in the middle.
    let smoke = changes(MEMBERSHIP_SMOKE_SEED, Duration::from_secs(30), 3);
    assert_eq!(smoke[0].kind, ChangeKind::Replace, "{smoke:?}");
    assert!(smoke[0].kill_leader.is_some(), "{smoke:?}");
    eprintln!("{}", smoke[0]);
}
