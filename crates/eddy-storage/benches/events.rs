//! Event store report bench (`cargo bench -p eddy-storage --bench events`), real files in a
//! temporary directory.
//!
//! 1. **Durable single-event writes**: `W` (default 1000) concurrent writers, each on its own
//!    aggregate, each with exactly one write outstanding (closed loop; a driver thread submits
//!    and waits in submission order, the way a server's connection tasks would). Reports
//!    writes/s, writes per fdatasync, process CPU µs per acknowledged write, and the ratio to a
//!    baseline measured in the same run: one writer doing `write + fdatasync` of the same record
//!    size on the same disk.
//! 2. The same with **OCC** (`expected_version` = the last acknowledged version).
//! 3. **Memory**: one event to each of `A` aggregates (default 200 000; `--aggregates 10000000`
//!    for the full run), then RSS, the index's resident bytes, and random-aggregate read and
//!    details latency p50/p99.
//!
//! Flags (after `--`): `--writers N`, `--seconds S`, `--aggregates N`, `--shards N`,
//! `--skip-writes`.

#![allow(
    clippy::print_stdout,
    clippy::cast_precision_loss,
    clippy::cast_sign_loss
)] // a report for humans: float percentiles and rates

use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use eddy_storage::{
    AggregateKey, AggregateWrite, Completion, EventStore, EventStoreConfig, FsBackend, NewEvent,
    ReadQuery, WriteOutcome, WriteRequest,
};

struct Args {
    writers: usize,
    seconds: u64,
    aggregates: u64,
    shards: u32,
    skip_writes: bool,
}

fn args() -> Args {
    let mut a = Args {
        writers: 1000,
        seconds: 5,
        aggregates: 200_000,
        shards: 2,
        skip_writes: false,
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let next = || argv.get(i + 1).and_then(|v| v.parse::<u64>().ok());
        match argv[i].as_str() {
            "--writers" => a.writers = next().map_or(a.writers, |v| v as usize),
            "--seconds" => a.seconds = next().unwrap_or(a.seconds),
            "--aggregates" => a.aggregates = next().unwrap_or(a.aggregates),
            "--shards" => a.shards = next().map_or(a.shards, |v| v as u32),
            "--skip-writes" => a.skip_writes = true,
            _ => {}
        }
        i += 1;
    }
    a
}

/// Process CPU time (user + system, all threads) from `/proc/self/stat`, in µs.
fn cpu_us() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command: state is field 3; utime 14, stime 15.
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    ticks * 10_000 // USER_HZ is 100 on Linux
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn config(shards: u32) -> EventStoreConfig {
    EventStoreConfig {
        num_shards: shards,
        pool_threads: shards as usize,
        ..EventStoreConfig::default()
    }
}

fn key(i: u64) -> AggregateKey {
    AggregateKey::new(1, 1, u128::from(i))
}

fn request(i: u64, seq: u64, expected: Option<u64>) -> WriteRequest {
    WriteRequest {
        client_id: u128::from(i),
        user_id: None,
        now: seq,
        writes: vec![AggregateWrite {
            key: key(i),
            events: vec![NewEvent {
                client_seq: seq,
                event_type_major: 1,
                value: Bytes::from(format!("[t-{i}-r-{seq}] hello")),
                ..NewEvent::default()
            }],
            allow_create: true,
            expected_version: expected,
            enforce_client_idempotency: expected.is_none(),
        }],
    }
}

/// Baseline: one writer appending a record of `len` bytes and fdatasyncing each.
fn baseline_fsyncs_per_sec(dir: &std::path::Path, len: usize) -> f64 {
    let path = dir.join("baseline");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("baseline file");
    let buf = vec![7u8; len];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_secs(2) {
        f.write_all(&buf).expect("write");
        f.sync_data().expect("fdatasync");
        n += 1;
    }
    let _ = std::fs::remove_file(&path);
    n as f64 / start.elapsed().as_secs_f64()
}

struct Run {
    writes: u64,
    secs: f64,
    cpu_us: u64,
    fsyncs: u64,
    p50_us: u64,
    p99_us: u64,
}

fn closed_loop(store: &EventStore, writers: usize, seconds: u64, occ: bool) -> Run {
    let mut versions = vec![0u64; writers];
    let mut seqs = vec![0u64; writers];
    let mut outstanding: VecDeque<(usize, Instant, Completion<WriteOutcome>)> = VecDeque::new();
    let submit = |w: usize, seqs: &mut [u64], versions: &[u64]| {
        seqs[w] += 1;
        let expected = occ.then_some(versions[w]);
        store.write(request(w as u64, seqs[w], expected))
    };
    // Warm-up: create every aggregate.
    for w in 0..writers {
        let c = submit(w, &mut seqs, &versions);
        outstanding.push_back((w, Instant::now(), c));
    }
    while let Some((w, _, c)) = outstanding.pop_front() {
        versions[w] = c.wait().expect("warm-up write").versions[0];
    }
    let before = store.stats().commit;
    let cpu0 = cpu_us();
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    for w in 0..writers {
        let c = submit(w, &mut seqs, &versions);
        outstanding.push_back((w, Instant::now(), c));
    }
    let mut latencies = Vec::new();
    let mut writes = 0u64;
    while let Some((w, t, c)) = outstanding.pop_front() {
        let done = c.wait().expect("durable write");
        latencies.push(t.elapsed().as_micros() as u64);
        versions[w] = done.versions[0];
        writes += 1;
        if Instant::now() < deadline {
            let c = submit(w, &mut seqs, &versions);
            outstanding.push_back((w, Instant::now(), c));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_us() - cpu0;
    let after = store.stats().commit.since(&before);
    latencies.sort_unstable();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    Run {
        writes,
        secs,
        cpu_us: cpu,
        fsyncs: after.fsyncs,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
    }
}

fn report(name: &str, r: &Run, baseline: f64) {
    let rate = r.writes as f64 / r.secs;
    println!(
        "{name}: {:.0} writes/s ({} writes in {:.1} s), {:.1} writes per fdatasync, {:.1} CPU µs per acked write, p50 {} µs, p99 {} µs, {:.1}x the single-writer write+fdatasync baseline ({:.0}/s)",
        rate,
        r.writes,
        r.secs,
        r.writes as f64 / r.fsyncs.max(1) as f64,
        r.cpu_us as f64 / r.writes.max(1) as f64,
        r.p50_us,
        r.p99_us,
        rate / baseline,
        baseline,
    );
}

fn memory(a: &Args) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, _) = EventStore::open(
        Arc::new(FsBackend::new(dir.path()).expect("backend")),
        config(a.shards),
    )
    .expect("open");
    let rss0 = rss_mib();
    let start = Instant::now();
    // One event to each aggregate, 1000 outstanding at a time.
    let mut outstanding: VecDeque<Completion<WriteOutcome>> = VecDeque::new();
    for i in 0..a.aggregates {
        outstanding.push_back(store.write(request(i, 1, None)));
        if outstanding.len() >= 1000 {
            if let Some(c) = outstanding.pop_front() {
                c.wait().expect("write");
            }
        }
        if i > 0 && i % 1_000_000 == 0 {
            println!(
                "  {i} aggregates after {:.0} s, RSS {:.0} MiB",
                start.elapsed().as_secs_f64(),
                rss_mib()
            );
        }
    }
    for c in outstanding {
        c.wait().expect("write");
    }
    let load_secs = start.elapsed().as_secs_f64();
    let stats = store.stats();
    let resident: u64 = stats.indexes.iter().map(|i| i.resident_bytes).sum();
    let memtables: u64 = stats.indexes.iter().map(|i| i.memtable_bytes).sum();
    let runs: usize = stats.indexes.iter().map(|i| i.runs).sum();
    let run_bytes: u64 = stats.indexes.iter().map(|i| i.run_bytes).sum();
    println!(
        "memory: {} aggregates written in {:.0} s ({:.0} writes/s, {:.1} per fdatasync); RSS {:.0} MiB (at start {:.0} MiB); index: {} runs, {:.0} MiB on disk, {:.1} MiB resident (blooms + block indexes), {:.1} MiB memtables",
        a.aggregates,
        load_secs,
        a.aggregates as f64 / load_secs,
        stats.commit.records_per_fsync(),
        rss_mib(),
        rss0,
        runs,
        run_bytes as f64 / 1_048_576.0,
        resident as f64 / 1_048_576.0,
        memtables as f64 / 1_048_576.0,
    );
    // Random reads and details.
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut reads = Vec::new();
    let mut details = Vec::new();
    for _ in 0..20_000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let k = key(rng % a.aggregates);
        let t = Instant::now();
        let page = store.read(&k, &ReadQuery::from_version(1)).expect("read");
        reads.push(t.elapsed().as_nanos() as u64);
        assert_eq!(page.batches.len(), 1);
        let t = Instant::now();
        let d = store.details(&k).expect("details");
        details.push(t.elapsed().as_nanos() as u64);
        assert_eq!(d.max_aggregate_version, 1);
    }
    reads.sort_unstable();
    details.sort_unstable();
    let p = |v: &[u64], q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)] as f64 / 1000.0;
    println!(
        "random reads over {} aggregates: read p50 {:.1} µs p99 {:.1} µs; details p50 {:.1} µs p99 {:.1} µs; RSS after reads {:.0} MiB",
        a.aggregates,
        p(&reads, 0.5),
        p(&reads, 0.99),
        p(&details, 0.5),
        p(&details, 0.99),
        rss_mib(),
    );
    store.close().expect("close");
    drop(store);
    let start = Instant::now();
    let (store, recovery) = EventStore::open(
        Arc::new(FsBackend::new(dir.path()).expect("backend")),
        config(a.shards),
    )
    .expect("reopen");
    println!(
        "reopen after close: {:.2} s, {} records replayed into the indexes",
        start.elapsed().as_secs_f64(),
        recovery.replayed.iter().sum::<u64>()
    );
    drop(store);
}

fn main() {
    let a = args();
    if std::env::args().any(|x| x == "--list") {
        return; // `cargo bench -- --list`
    }
    if !a.skip_writes {
        let dir = tempfile::tempdir().expect("temp dir");
        let baseline = baseline_fsyncs_per_sec(dir.path(), 320);
        for occ in [false, true] {
            let sub = dir.path().join(if occ { "occ" } else { "plain" });
            let (store, _) = EventStore::open(
                Arc::new(FsBackend::new(&sub).expect("backend")),
                config(a.shards),
            )
            .expect("open");
            let run = closed_loop(&store, a.writers, a.seconds, occ);
            report(
                &format!(
                    "{} writers, {}",
                    a.writers,
                    if occ {
                        "OCC (expected_version)"
                    } else {
                        "idempotent single-event"
                    }
                ),
                &run,
                baseline,
            );
            store.close().expect("close");
        }
    }
    memory(&a);
}
