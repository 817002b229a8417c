//! Real-process chaos of a cluster (issue 17): `eddy serve` processes in network namespaces,
//! published-SDK clients writing through them, a seeded schedule of kills, partitions and a
//! degraded network, then a heal, a bounded wait for progress and the checker.
//!
//! `net.rs` (namespaces, veths, bridge, nft), `proxy.rs` (frame-level faults of the
//! replication links), `cluster.rs` (the processes), `schedule.rs` (the seeded faults and
//! membership changes), `membership.rs` (making the changes with `eddy cluster`, checking the
//! members at the end), `workload.rs` (the clients), `checker.rs` (the verdict). `cargo xtask chaos` runs the
//! campaign test of `tests/tests/chaos.rs`; `cargo test` runs its smoke.

pub mod checker;
pub mod cluster;
pub mod membership;
pub mod net;
pub mod proxy;
pub mod rng;
pub mod schedule;
pub mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{Cluster, REPLICATION_PORT};
use membership::Driver;
use net::Net;
use proxy::{LinkFault, Proxy};
use schedule::{Fault, Menu, Target};
use workload::events::EventLoad;
use workload::Load;

/// What to run.
#[derive(Debug, Clone)]
#[allow(clippy::struct_excessive_bools)] // Independent switches of the run, as the command line gives them.
pub struct Options {
    /// Length of the fault phase.
    pub seconds: u64,
    pub seed: u64,
    pub nodes: u8,
    /// The server binary.
    pub bin: PathBuf,
    /// Use nft partitions (isolation and one-way drops).
    pub nft: bool,
    /// Allow killing a majority at once.
    pub majority_loss: bool,
    /// Allow wiping one node's data directory at a time.
    pub data_loss: bool,
    /// Allow a degraded network during other faults.
    pub concurrent: bool,
    pub partitions: u32,
    pub producers: u32,
    /// Celeriant OCC event writers (one aggregate each).
    pub event_writers: u32,
    /// Replace members and add-then-remove members while the faults go on
    /// (`schedule::changes`).
    pub membership: bool,
    /// How a failed run is replayed (printed with the seed).
    pub replay: String,
}

/// What a run did.
#[derive(Debug)]
pub struct Report {
    pub duration: Duration,
    pub faults: BTreeMap<&'static str, u32>,
    pub verdict: checker::Verdict,
    pub progress_after_heal: Option<Duration>,
    /// Event shard snapshots the nodes copied from a peer (their logs say so).
    pub snapshot_copies: usize,
    /// The membership changes (`None` without `membership`), and the members at the end.
    pub membership: Option<membership::Tally>,
    pub members: Vec<u8>,
    pub run_dir: PathBuf,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.verdict.failures.is_empty()
    }
}

/// How an episode's fault is undone.
#[derive(Debug)]
enum Heal {
    Start(Vec<u8>),
    LinkUp(u8),
    Nft(u8),
    Proxy,
}

/// Delays, loses, duplicates and reorders frames on every replication link as `fault` (a
/// [`Fault::Degrade`]) says (`nodes`: every node number of the run).
fn degrade_links(proxy: &Proxy, nodes: u8, fault: &Fault) {
    let Fault::Degrade {
        delay_ms,
        loss,
        duplicate,
        reorder,
    } = fault
    else {
        return;
    };
    let link = LinkFault {
        blackhole: false,
        loss: *loss,
        duplicate: *duplicate,
        delay_ms: *delay_ms,
        reorder: *reorder,
    };
    for a in 1..=nodes {
        for b in (1..=nodes).filter(|&b| b != a) {
            proxy.set(a, b, link);
        }
    }
}

/// Prints a line of the run's narrative.
macro_rules! say {
    ($start:expr, $($arg:tt)*) => {
        eprintln!("chaos [{:>7.1}s] {}", $start.elapsed().as_secs_f64(), format_args!($($arg)*))
    };
}

/// Runs one chaos run; `Err` when the harness itself could not run (set-up failed).
pub async fn run(options: &Options) -> Result<Report, String> {
    let start = Instant::now();
    net::sweep_leftovers();
    let pid = std::process::id();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("chaos: interrupted; removing namespaces and processes");
            net::teardown(pid);
            std::process::exit(130);
        }
    });
    let run_dir = std::env::temp_dir().join(format!("eddy-chaos-{pid}-{}", options.seed));
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::create_dir_all(&run_dir).map_err(|e| e.to_string())?;
    say!(
        start,
        "seed {} ({} s of faults, {} nodes, nft {}); node logs in {}",
        options.seed,
        options.seconds,
        options.nodes,
        if options.nft { "on" } else { "off" },
        run_dir.display()
    );
    let changes = if options.membership {
        schedule::changes(
            options.seed,
            Duration::from_secs(options.seconds),
            options.nodes,
        )
    } else {
        Vec::new()
    };
    // Every member a change adds gets a node number (a stand-in, a certificate) of its own.
    let slots = options.nodes + u8::try_from(changes.len()).expect("few changes");
    let net = Net::create(options.nodes, slots)?;
    let certs = eddy_tests::ClusterCerts::issue(&options.bin, u64::from(slots));
    let proxy = Proxy::start(&net, slots, REPLICATION_PORT, options.seed, &certs).await?;
    let mut cluster = Cluster::new(&options.bin, &run_dir, &net, options.nodes, certs);
    for i in 1..=options.nodes {
        cluster.start(i)?;
    }
    for i in 1..=options.nodes {
        if !cluster.wait_up(i, Duration::from_secs(30)).await {
            return Err(format!(
                "node {i} did not start; see {}",
                cluster.log_path(i).display()
            ));
        }
    }
    let addrs: Vec<_> = (1..=options.nodes)
        .map(|i| cluster.stream_addr(i))
        .collect();
    let load = Load::new(addrs.clone(), options.partitions);
    load.history.lock().unwrap().origin = Some(start);
    load.setup(options.partitions, Duration::from_secs(60))
        .await?;
    say!(start, "cluster up, stream and topic created; load starts");
    let mut tasks = Vec::new();
    for k in 0..options.producers {
        tasks.push(tokio::spawn(Arc::clone(&load).producer(
            k,
            k % options.partitions,
            1_000_000,
        )));
    }
    for p in 0..options.partitions {
        tasks.push(tokio::spawn(Arc::clone(&load).offsets(p)));
    }
    let event_addrs: Vec<_> = (1..=options.nodes)
        .map(|i| cluster.client_addr(i))
        .collect();
    let events = EventLoad::new(&event_addrs);
    for w in 0..options.event_writers {
        tasks.push(tokio::spawn(Arc::clone(&events).writer(w)));
    }

    let menu = Menu {
        nft: options.nft,
        majority_loss: options.majority_loss && options.nodes >= 3,
        data_loss: options.data_loss && options.nodes >= 3,
        concurrent: options.concurrent,
    };
    let episodes = schedule::schedule(
        options.seed,
        Duration::from_secs(options.seconds),
        options.nodes,
        menu,
    );
    let mut driver = options.membership.then(|| {
        Driver::new(
            changes.clone(),
            options.nodes,
            Arc::clone(&load),
            Arc::clone(&events),
            start,
        )
    });
    say!(start, "schedule: {} episodes", episodes.len());
    for c in &changes {
        eprintln!("chaos   at {:>6.1}s: membership: {c}", c.at.as_secs_f64());
    }
    for e in &episodes {
        eprintln!(
            "chaos   at {:>6.1}s for {:>4.1}s: {}{}",
            e.at.as_secs_f64(),
            e.hold.as_secs_f64(),
            e.fault,
            e.also
                .as_ref()
                .map_or_else(String::new, |also| format!(", with {also}"))
        );
    }
    let mut faults: BTreeMap<&'static str, u32> = BTreeMap::new();
    let mut crashes = Vec::new();
    let phase = Instant::now();
    let mut fallback = rng::Rng::new(options.seed ^ 0xFA11);
    for episode in &episodes {
        idle_until(
            phase + episode.at,
            &mut driver,
            &mut cluster,
            &net,
            phase,
            true,
        )
        .await?;
        // The schedule names node numbers of the founders; after membership changes, the
        // n-th node the harness runs (members, and one being added or removed).
        let live: Vec<u8> = driver
            .as_ref()
            .map_or_else(|| (1..=options.nodes).collect(), |d| d.live().to_vec());
        let node = |n: u8| live[usize::from(n - 1) % live.len()];
        let resolve = |t: Target, leader: Option<u8>, fallback: &mut rng::Rng| match t {
            Target::Node(n) => node(n),
            Target::Leader => leader.unwrap_or_else(|| {
                node(u8::try_from(fallback.between(1, u64::from(options.nodes))).expect("few"))
            }),
        };
        let leader = cluster.leader().await;
        *faults.entry(episode.fault.kind()).or_default() += 1;
        let heal = match &episode.fault {
            Fault::Kill(t) => {
                let n = resolve(*t, leader, &mut fallback);
                say!(start, "{} (node {n}) for {:?}", episode.fault, episode.hold);
                cluster.kill(n);
                Heal::Start(vec![n])
            }
            Fault::Wipe(n) => {
                let n = &node(*n);
                let rebuilding = cluster.rebuilding();
                cluster.kill(*n);
                if rebuilding.iter().any(|r| r != n) {
                    say!(
                        start,
                        "{} for {:?}: only killed, node(s) {rebuilding:?} still rebuilding",
                        episode.fault,
                        episode.hold
                    );
                } else {
                    say!(start, "{} for {:?}", episode.fault, episode.hold);
                    cluster.wipe(*n)?;
                }
                Heal::Start(vec![*n])
            }
            Fault::KillTwo(a, b) => {
                let (a, b) = (node(*a), node(*b));
                say!(
                    start,
                    "{} (nodes {a} and {b}) for {:?}",
                    episode.fault,
                    episode.hold
                );
                cluster.kill(a);
                cluster.kill(b);
                Heal::Start(vec![a, b])
            }
            Fault::LinkDown(t) => {
                let n = resolve(*t, leader, &mut fallback);
                say!(start, "{} (node {n}) for {:?}", episode.fault, episode.hold);
                net.set_link(n, false)?;
                Heal::LinkUp(n)
            }
            Fault::Isolate(t) => {
                let n = resolve(*t, leader, &mut fallback);
                say!(start, "{} (node {n}) for {:?}", episode.fault, episode.hold);
                let others: Vec<u8> = (1..=slots).filter(|&j| j != n).collect();
                net.nft_block(n, &others, true, true)?;
                Heal::Nft(n)
            }
            Fault::OneWayNft { from, to } => {
                let (from, to) = (node(*from), node(*to));
                say!(
                    start,
                    "{} (nodes {from} -> {to}) for {:?}",
                    episode.fault,
                    episode.hold
                );
                net.nft_block(to, &[from], true, false)?;
                Heal::Nft(to)
            }
            Fault::OneWayProxy { from, to } => {
                let (from, to) = (node(*from), node(*to));
                say!(
                    start,
                    "{} (nodes {from} -> {to}) for {:?}",
                    episode.fault,
                    episode.hold
                );
                let fault = LinkFault {
                    blackhole: true,
                    ..LinkFault::default()
                };
                proxy.set(from, to, fault);
                Heal::Proxy
            }
            Fault::Degrade { .. } => {
                say!(start, "{} for {:?}", episode.fault, episode.hold);
                degrade_links(&proxy, slots, &episode.fault);
                Heal::Proxy
            }
        };
        if let Some(also) = &episode.also {
            say!(start, "  and at the same time: {also}");
            *faults.entry("concurrent-degrade").or_default() += 1;
            degrade_links(&proxy, slots, also);
        }
        idle_until(
            Instant::now() + episode.hold,
            &mut driver,
            &mut cluster,
            &net,
            phase,
            true,
        )
        .await?;
        if episode.also.is_some() {
            proxy.heal();
        }
        match heal {
            Heal::Start(nodes) => {
                for n in nodes {
                    cluster.start(n)?;
                }
            }
            // A member removed meanwhile has no link any more.
            Heal::LinkUp(n) if cluster.retired(n) => {}
            Heal::LinkUp(n) => net.set_link(n, true)?,
            Heal::Nft(n) => net.nft_heal(n),
            Heal::Proxy => proxy.heal(),
        }
        for (n, status) in cluster.exited() {
            say!(start, "node {n} exited on its own: {status}");
            crashes.push(format!("node {n} exited on its own ({status})"));
            cluster.start(n)?;
        }
    }
    idle_until(
        phase + Duration::from_secs(options.seconds),
        &mut driver,
        &mut cluster,
        &net,
        phase,
        true,
    )
    .await?;

    // Heal everything, let a running membership change finish, let the load stop, then
    // demand progress.
    say!(start, "faults over: healing everything");
    proxy.heal();
    let live: Vec<u8> = driver
        .as_ref()
        .map_or_else(|| (1..=options.nodes).collect(), |d| d.live().to_vec());
    for &i in &live {
        net.set_link(i, true)?;
        if options.nft {
            net.nft_heal(i);
        }
        cluster.start(i)?;
    }
    if let Some(d) = driver.as_mut() {
        if d.pending() > 0 {
            say!(
                start,
                "membership: {} planned change(s) never began (the one before ran to the end of the faults)",
                d.pending()
            );
        }
        while d.busy() {
            d.poll(&mut cluster, &net, phase.elapsed(), false).await?;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let members: Vec<u8> = driver
        .as_ref()
        .map_or_else(|| (1..=options.nodes).collect(), |d| d.members().to_vec());
    let addrs: Vec<_> = members.iter().map(|&i| cluster.stream_addr(i)).collect();
    let event_addrs: Vec<_> = members.iter().map(|&i| cluster.client_addr(i)).collect();
    if driver.is_some() {
        say!(
            start,
            "membership: members {members:?} (the checker's nodes 1..={} in this order)",
            members.len()
        );
    }
    load.stop();
    events.stop();
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(60), task).await;
    }
    say!(start, "load stopped; every partition must now take a write");
    let healed = Instant::now();
    let progress = load
        .progress(options.partitions, Duration::from_secs(60))
        .await;
    let mut progress_after_heal = None;
    let mut failures = crashes;
    match progress {
        Ok(longest) => {
            progress_after_heal = Some(healed.elapsed());
            say!(
                start,
                "progress: every partition took a write (slowest {longest:?})"
            );
        }
        Err(e) => failures.push(e),
    }
    let views = checker::read_all(&addrs, options.partitions, Duration::from_secs(60)).await;
    say!(start, "nodes read; checking");
    let history = std::mem::take(&mut *load.history.lock().unwrap());
    let mut verdict = match views {
        Ok(views) => checker::check(&history, &views),
        Err(e) => checker::Verdict {
            failures: vec![format!("could not read every node: {e}")],
            ..checker::Verdict::default()
        },
    };
    failures.append(&mut verdict.failures);
    let mut told = std::mem::take(&mut *events.told.lock().unwrap());
    told.sort_by_key(|t| t.writer);
    if told.len() != options.event_writers as usize {
        failures.push(format!(
            "{} of {} event writers did not stop within 60 s of the heal",
            options.event_writers as usize - told.len(),
            options.event_writers
        ));
    }
    let event_views = checker::events::read_all(&event_addrs, &told, Duration::from_secs(60)).await;
    match event_views {
        Ok(views) => {
            let mut ev = checker::events::check(&told, &views);
            verdict.events_acked = ev.acked;
            verdict.events_unknown = ev.unknown;
            verdict.events_stored = ev.stored;
            failures.append(&mut ev.failures);
        }
        Err(e) => failures.push(format!("could not read every node's events: {e}")),
    }
    let tally = match driver {
        Some(d) => {
            // A change that did not complete within its patience is in `d.failures`.
            let wrong =
                membership::verify(&cluster, &members, d.removed(), Duration::from_secs(90)).await;
            if wrong.is_empty() {
                say!(
                    start,
                    "membership: every group's voters are {members:?} with no learner, none holds a removed member ({:?}), and `eddy cluster status` and the Iggy cluster metadata list exactly them",
                    d.removed()
                );
            }
            failures.extend(wrong);
            failures.extend(d.failures);
            Some(d.tally)
        }
        None => None,
    };
    verdict.failures = failures;
    for (n, status) in cluster.exited() {
        verdict
            .failures
            .push(format!("node {n} exited on its own ({status})"));
    }
    drop(cluster);
    drop(proxy);
    drop(net);
    let snapshot_copies = count_in_logs(&run_dir, "event shard records copied");
    let report = Report {
        duration: start.elapsed(),
        faults,
        verdict,
        progress_after_heal,
        snapshot_copies,
        membership: tally,
        members,
        run_dir,
    };
    print_report(options, &report);
    if report.passed() {
        let _ = std::fs::remove_dir_all(&report.run_dir);
    }
    Ok(report)
}

/// Sleeps until `until`, moving the membership changes on (every 250 ms) meanwhile.
async fn idle_until(
    until: Instant,
    driver: &mut Option<Driver>,
    cluster: &mut Cluster,
    net: &Net,
    phase: Instant,
    begin: bool,
) -> Result<(), String> {
    loop {
        if let Some(d) = driver.as_mut() {
            d.poll(cluster, net, phase.elapsed(), begin).await?;
        }
        let now = Instant::now();
        if now >= until {
            return Ok(());
        }
        tokio::time::sleep((until - now).min(Duration::from_millis(250))).await;
    }
}

/// Lines containing `needle` in the nodes' logs of a run.
fn count_in_logs(run_dir: &std::path::Path, needle: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|text| text.lines().filter(|l| l.contains(needle)).count())
        .sum()
}

fn print_report(options: &Options, report: &Report) {
    let v = &report.verdict;
    eprintln!("chaos: ---- report ----");
    eprintln!("chaos: duration {:.1} s", report.duration.as_secs_f64());
    eprintln!("chaos: seed {}", options.seed);
    let faults: Vec<String> = report
        .faults
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    eprintln!(
        "chaos: faults {} ({})",
        report.faults.values().sum::<u32>(),
        faults.join(", ")
    );
    eprintln!(
        "chaos: batches acknowledged {}, unknown outcome {} ({} of them stored), messages stored {}",
        v.acked_batches, v.unknown_batches, v.unknown_present, v.messages
    );
    eprintln!(
        "chaos: events acknowledged {}, unknown outcome {}, events stored {}",
        v.events_acked, v.events_unknown, v.events_stored
    );
    eprintln!(
        "chaos: event shard snapshots copied from a peer {}",
        report.snapshot_copies
    );
    if let Some(m) = &report.membership {
        eprintln!(
            "chaos: membership changes planned {}, begun {}, completed {} ({} eddy cluster commands, {} failed and run again; metadata leader killed mid-change {} times); members at the end {:?}",
            m.planned, m.started, m.completed, m.commands, m.failed_commands, m.leader_kills, report.members
        );
        for line in &m.lines {
            eprintln!("chaos:   {line}");
        }
    }
    if let Some(p) = report.progress_after_heal {
        eprintln!(
            "chaos: progress after the heal within {:.1} s",
            p.as_secs_f64()
        );
    }
    if report.passed() {
        eprintln!("chaos: check PASSED");
    } else {
        eprintln!("chaos: check FAILED:");
        for f in &v.failures {
            eprintln!("chaos:   {f}");
        }
        eprintln!("chaos: node logs kept in {}", report.run_dir.display());
        eprintln!("chaos: replay with: {}", options.replay);
    }
}
