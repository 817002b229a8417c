//! Event store report bench (`cargo bench -p eddy-event-store --bench events`), real files in a
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
//! 4. **Compaction**: `M` MiB (default 256) of ~1 KiB single-event batches over 4000
//!    aggregates, then 40 % of the aggregates deleted and 40 % trimmed to their newest batch;
//!    reports the reclaimable bytes the accounting scan finds (and its MB/s), one compaction
//!    pass's bytes reclaimed and MB/s (segment bytes scanned and rewritten per second), and the
//!    ratio to a baseline measured in the same run: copying the same segment files with plain
//!    read + write + fdatasync.
//!
//! Flags (after `--`): `--writers N`, `--seconds S`, `--aggregates N`, `--shards N`,
//! `--compaction-mib M`, `--skip-writes`, `--skip-memory`, `--skip-compaction`,
//! `--fsync-delay-us US` (the group-commit window of the durable-write runs; default 0).
#![allow(clippy::too_many_lines)] // tests are exempt from the 100-line rule
#![allow(
    clippy::print_stdout,
    clippy::cast_precision_loss,
    clippy::cast_sign_loss
)] // a report for humans: float percentiles and rates

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use eddy_event_store::CompactionPolicy;
use eddy_event_store::{
    AggregateKey, AggregateWrite, EventStore, EventStoreConfig, EventStoreError, NewEvent,
    ReadQuery, WriteOutcome, WriteRequest,
};
use eddy_log::{Completion, FsBackend};

/// The server binary's allocator (see `bins/eddy`), so CPU per write compares with the server's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    writers: usize,
    seconds: u64,
    aggregates: u64,
    shards: u32,
    compaction_mib: u64,
    skip_writes: bool,
    skip_memory: bool,
    skip_compaction: bool,
    fsync_delay_us: u64,
}

fn args() -> Args {
    let mut a = Args {
        writers: 1000,
        seconds: 5,
        aggregates: 200_000,
        shards: 2,
        compaction_mib: 256,
        skip_writes: false,
        skip_memory: false,
        skip_compaction: false,
        fsync_delay_us: 0,
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
            "--compaction-mib" => a.compaction_mib = next().unwrap_or(a.compaction_mib),
            "--skip-writes" => a.skip_writes = true,
            "--skip-memory" => a.skip_memory = true,
            "--skip-compaction" => a.skip_compaction = true,
            "--fsync-delay-us" => a.fsync_delay_us = next().unwrap_or(0),
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
    let mut outstanding: VecDeque<(usize, Instant, Completion<WriteOutcome, EventStoreError>)> =
        VecDeque::new();
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
    let mut outstanding: VecDeque<Completion<WriteOutcome, EventStoreError>> = VecDeque::new();
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
                EventStoreConfig {
                    fsync_delay: Duration::from_micros(a.fsync_delay_us),
                    ..config(a.shards)
                },
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
    if !a.skip_memory {
        memory(&a);
    }
    if !a.skip_compaction {
        compaction(&a);
    }
}

/// Every shard log segment file under `dir`, with its size.
fn shard_files(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("list").flatten() {
            let path = entry.path();
            let meta = entry.metadata().expect("stat");
            if meta.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().contains("shard-")
                && path.extension().is_some_and(|e| e == "log")
            {
                out.push((path, meta.len()));
            }
        }
    }
    out
}

/// Baseline: copies `files` with plain read + write + fdatasync; returns bytes per second.
fn copy_baseline(files: &[(std::path::PathBuf, u64)], to: &std::path::Path) -> f64 {
    std::fs::create_dir_all(to).expect("baseline dir");
    let start = Instant::now();
    let mut bytes = 0u64;
    for (i, (path, _)) in files.iter().enumerate() {
        let data = std::fs::read(path).expect("read");
        let target = to.join(format!("copy-{i}"));
        let mut f = std::fs::File::create(&target).expect("create");
        f.write_all(&data).expect("write");
        f.sync_data().expect("fdatasync");
        bytes += data.len() as u64;
    }
    let rate = bytes as f64 / start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(to);
    rate
}

/// Aggregates of the compaction section.
const COMPACTION_AGGREGATES: u64 = 4000;

fn compaction(a: &Args) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let config = EventStoreConfig {
        segment_size: 16 * 1024 * 1024,
        ..config(a.shards)
    };
    let (store, _) = EventStore::open(
        Arc::new(FsBackend::new(&data).expect("backend")),
        config.clone(),
    )
    .expect("open");
    let value = |i: u64, seq: u64| {
        // JSON-like, compressible about 2:1 like typical event payloads.
        let mut v = format!("{{\"aggregate\":{i},\"seq\":{seq},\"items\":[");
        let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seq;
        while v.len() < 1000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let _ = write!(
                v,
                "{{\"sku\":\"{:x}\",\"qty\":{}}},",
                x % 0xffff_ffff,
                x % 7
            );
        }
        v.push_str("0]}");
        Bytes::from(v)
    };
    let batches = a.compaction_mib * 1024 * 1024 / 1000;
    let mut outstanding: VecDeque<Completion<WriteOutcome, EventStoreError>> = VecDeque::new();
    let mut versions = vec![0u64; COMPACTION_AGGREGATES as usize];
    let write = |i: u64, seq: u64| {
        store.write(WriteRequest {
            client_id: 1,
            user_id: None,
            now: seq,
            writes: vec![AggregateWrite {
                key: key(i),
                events: vec![NewEvent {
                    client_seq: seq,
                    event_type_major: 1,
                    value: value(i, seq),
                    ..NewEvent::default()
                }],
                allow_create: true,
                ..AggregateWrite::default()
            }],
        })
    };
    let load = Instant::now();
    for n in 0..batches {
        let i = n % COMPACTION_AGGREGATES;
        versions[i as usize] += 1;
        outstanding.push_back(write(i, n + 1));
        if outstanding.len() >= 1000 {
            if let Some(c) = outstanding.pop_front() {
                c.wait().expect("write");
            }
        }
    }
    for c in outstanding.drain(..) {
        c.wait().expect("write");
    }
    let load_secs = load.elapsed().as_secs_f64();
    // 40 % deleted, 40 % trimmed to their newest batch, 20 % kept.
    for i in 0..COMPACTION_AGGREGATES {
        match i % 5 {
            0 | 1 => {
                store
                    .delete(&eddy_event_store::DeleteRequest {
                        client_id: 2,
                        user_id: None,
                        now: 0,
                        deletes: vec![eddy_event_store::AggregateDelete {
                            key: key(i),
                            allow_recreate: false,
                            allow_sequence_continuation: false,
                            expected_version: None,
                        }],
                    })
                    .wait()
                    .expect("delete");
            }
            2 | 3 if versions[i as usize] > 1 => {
                store
                    .trim(eddy_event_store::TrimRequest {
                        key: key(i),
                        keep_from_version: versions[i as usize],
                        client_id: 2,
                        user_id: None,
                        now: 0,
                    })
                    .wait()
                    .expect("trim");
            }
            _ => {}
        }
    }
    // Seal the segments holding the dead data: a segment's worth more of live writes.
    let extra = config.segment_size * u64::from(a.shards) / 1000 + 1000;
    for n in 0..extra {
        let i = 5 * (n % (COMPACTION_AGGREGATES / 5)) + 4;
        versions[i as usize] += 1;
        outstanding.push_back(write(i, batches + n + 1));
        if outstanding.len() >= 1000 {
            if let Some(c) = outstanding.pop_front() {
                c.wait().expect("write");
            }
        }
    }
    for c in outstanding.drain(..) {
        c.wait().expect("write");
    }
    let files = shard_files(&data);
    let before: u64 = files.iter().map(|(_, len)| len).sum();
    let scan = Instant::now();
    let mut reclaimable = 0u64;
    let mut sealed = 0u64;
    for shard in 0..a.shards {
        for seg in store.reclaimable(shard).expect("scan") {
            reclaimable += seg.reclaimable;
            sealed += seg.bytes;
        }
    }
    let scan_secs = scan.elapsed().as_secs_f64();
    let baseline = copy_baseline(&files, &dir.path().join("baseline"));
    let start = Instant::now();
    let report = store.compact(CompactionPolicy::default()).expect("compact");
    let secs = start.elapsed().as_secs_f64();
    let after: u64 = shard_files(&data).iter().map(|(_, len)| len).sum();
    assert_eq!(before - after, report.bytes_reclaimed());
    let mb = |b: u64| b as f64 / 1_048_576.0;
    let rate = report.bytes_scanned as f64 / secs;
    println!(
        "compaction: {:.0} MiB of logs ({} batches in {:.1} s; {:.0} MiB sealed), 80 % of aggregates deleted or trimmed; accounting scan found {:.0} MiB reclaimable at {:.0} MB/s",
        mb(before),
        batches + extra,
        load_secs,
        mb(sealed),
        mb(reclaimable),
        sealed as f64 / scan_secs / 1e6,
    );
    println!(
        "compaction pass (ratio {:.2}): {} of {} segments rewritten, {:.0} MiB reclaimed ({:.0} -> {:.0} MiB of logs, {:.0} % smaller), {} batches elided in {:.2} s: {:.0} MB/s of segments scanned and rewritten, {:.2}x the plain copy baseline ({:.0} MB/s read + write + fdatasync of the same files)",
        CompactionPolicy::default().min_reclaimable_ratio,
        report.segments_rewritten,
        report.segments_scanned,
        mb(report.bytes_reclaimed()),
        mb(before),
        mb(after),
        100.0 * report.bytes_reclaimed() as f64 / before as f64,
        report.batches_elided,
        secs,
        rate / 1e6,
        rate / baseline,
        baseline / 1e6,
    );
    // The live data reads back after compaction.
    for i in (4..COMPACTION_AGGREGATES).step_by(5).take(200) {
        let page = store
            .read(&key(i), &ReadQuery::from_version(1))
            .expect("read");
        assert_eq!(page.batches.len() as u64, versions[i as usize].min(1000));
    }
    store.close().expect("close");
}
