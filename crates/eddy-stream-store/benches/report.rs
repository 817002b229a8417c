//! The storage bench report: every figure as a ratio to a baseline measured in the same run.
//!
//! `cargo bench -p eddy-stream-store --bench report` prints:
//!
//! 1. durable append: 1,000 × 1 KiB batches from 8 concurrent writers, each waiting for its
//!    durable acknowledgement, versus the same bytes written sequentially with one `fdatasync`
//!    per batch (goal: ratio ≥ 0.7), with records per fdatasync and CPU µs per append;
//! 2. poll: 1,000 messages of 1 KiB from the page cache, versus a `memcpy` of the same bytes
//!    (goal: ratio ≥ 0.3), with and without checksum verification on read;
//! 3. recovery time per GiB (hot page cache), full and tail verification;
//! 4. resident memory of 100 partitions after reopening and polling them all.
//!
//! Knobs: `EDDY_BENCH_RECOVERY_MB` (default 1024), `EDDY_BENCH_RSS_MB` (total data for the RSS
//! figure, default 1024), `EDDY_BENCH_DIR` (where to write, default a temp dir under
//! `target/`).

use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use eddy_log::FsBackend;
use eddy_log::VerifyOnOpen;
use eddy_stream_store::{
    MetadataOp, Operation, PartitionAddr, PollStrategy, Stamp, StampWith, StreamStore,
    StreamStoreConfig, TopicConfig,
};

const BATCHES: usize = 1_000;
const BATCH_BYTES: usize = 1024;
const WRITERS: usize = 8;
const ROUNDS: usize = 3;
/// Messages per batch in the poll bench.
const PER_BATCH: u32 = 10;
/// Partitions of the RSS bench.
const PARTITIONS: u32 = 100;

/// Byte counts as floating point, for ratios printed to humans.
#[allow(clippy::cast_precision_loss)] // exact up to 2^53 bytes, far beyond any bench
fn as_f64(x: u64) -> f64 {
    x as f64
}

fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn bench_root() -> PathBuf {
    std::env::var_os("EDDY_BENCH_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/eddy-stream-store-bench"),
        PathBuf::from,
    )
}

fn fresh_dir(name: &str) -> PathBuf {
    let dir = bench_root().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");
    dir
}

fn addr(p: u32) -> PartitionAddr {
    PartitionAddr {
        stream_id: 0,
        topic_id: 0,
        partition_id: p,
    }
}

fn open_store(dir: &Path, config: StreamStoreConfig) -> StreamStore {
    StreamStore::open(Arc::new(FsBackend::new(dir).expect("backend")), config)
        .expect("store")
        .0
}

fn create_topic(store: &StreamStore, partitions: u32, topic: TopicConfig) {
    store
        .commit(Operation::Metadata(MetadataOp::CreateStream {
            id: 0,
            name: "bench".into(),
            created_at: 0,
            options: vec![],
        }))
        .wait()
        .expect("stream");
    store
        .commit(Operation::Metadata(MetadataOp::CreateTopic {
            stream_id: 0,
            id: 0,
            name: "bench".into(),
            created_at: 0,
            partitions,
            config: topic,
            explicit_options: vec![],
            derived_options: vec![],
        }))
        .wait()
        .expect("topic");
}

fn batch(count: u32, bytes: &Bytes) -> StampWith<impl FnOnce(&Stamp) -> Bytes + use<>> {
    let bytes = bytes.clone();
    StampWith {
        count,
        stamp: move |_: &Stamp| bytes,
    }
}

fn cpu_time() -> Duration {
    // utime + stime of this process, from /proc (Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Fields after the command: state is index 0, utime index 11, stime index 12.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

// ------------------------------------------------------------------------------------------------

fn raw_write_fdatasync(dir: &Path) -> Duration {
    let path = dir.join("raw.bin");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .expect("raw file");
    let data = vec![7u8; BATCH_BYTES];
    let start = Instant::now();
    for _ in 0..BATCHES {
        file.write_all(&data).expect("write");
        file.sync_data().expect("fdatasync");
    }
    let elapsed = start.elapsed();
    let _ = std::fs::remove_file(path);
    elapsed
}

fn durable_appends(dir: &Path) -> (Duration, f64, Duration) {
    let store = open_store(dir, StreamStoreConfig::default());
    create_topic(&store, 1, TopicConfig::default());
    let store = Arc::new(store);
    let payload = Bytes::from(vec![7u8; BATCH_BYTES]);
    let before = store.commit_stats();
    let cpu_before = cpu_time();
    let start = Instant::now();
    let threads: Vec<_> = (0..WRITERS)
        .map(|_| {
            let store = Arc::clone(&store);
            let payload = payload.clone();
            std::thread::spawn(move || {
                for _ in 0..BATCHES / WRITERS {
                    store
                        .append(addr(0), batch(1, &payload), 0)
                        .expect("append")
                        .wait()
                        .expect("durable");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("writer");
    }
    let elapsed = start.elapsed();
    let cpu = cpu_time().saturating_sub(cpu_before);
    let stats = store.commit_stats().since(&before);
    (
        elapsed,
        stats.records_per_fsync(),
        cpu / u32::try_from(BATCHES).unwrap_or(1),
    )
}

fn append_report() {
    out("== durable append: 1,000 x 1 KiB batches, 8 concurrent writers ==");
    let mut ratios = Vec::new();
    for round in 0..ROUNDS {
        let dir = fresh_dir("append");
        let raw = raw_write_fdatasync(&dir);
        let (eddy, per_fsync, cpu) = durable_appends(&dir);
        let ratio = raw.as_secs_f64() / eddy.as_secs_f64();
        ratios.push(ratio);
        out(&format!(
            "round {round}: raw write+fdatasync per batch {:.0} ms, eddy {:.0} ms -> ratio {ratio:.2} \
             (goal >= 0.7), {per_fsync:.1} records per fdatasync, ~{} us CPU per append",
            raw.as_secs_f64() * 1e3,
            eddy.as_secs_f64() * 1e3,
            cpu.as_micros()
        ));
    }
    ratios.sort_by(f64::total_cmp);
    out(&format!(
        "append ratio: worst {:.2}, median {:.2}",
        ratios[0],
        ratios[ROUNDS / 2]
    ));
}

// ------------------------------------------------------------------------------------------------

fn poll_report() {
    out("== poll: 1,000 messages of 1 KiB from the page cache ==");
    for verify in [true, false] {
        let dir = fresh_dir("poll");
        let config = StreamStoreConfig {
            verify_on_read: verify,
            ..StreamStoreConfig::default()
        };
        let store = open_store(&dir, config);
        create_topic(&store, 1, TopicConfig::default());
        let payload = Bytes::from(vec![3u8; BATCH_BYTES * PER_BATCH as usize]);
        for _ in 0..(1_000 / PER_BATCH) {
            store
                .append(addr(0), batch(PER_BATCH, &payload), 0)
                .expect("append")
                .wait()
                .expect("durable");
        }
        let iterations = 2_000u32;
        let mut polled_bytes = 0usize;
        // Warm up (page cache, read buffers).
        for _ in 0..50 {
            black_box(
                store
                    .poll(addr(0), None, PollStrategy::Offset(0), 1_000, u64::MAX)
                    .expect("poll"),
            );
        }
        let start = Instant::now();
        for _ in 0..iterations {
            let polled = store
                .poll(addr(0), None, PollStrategy::Offset(0), 1_000, u64::MAX)
                .expect("poll");
            assert_eq!(polled.message_count(), 1_000);
            polled_bytes = polled.batches.iter().map(|b| b.bytes.len()).sum();
            black_box(&polled);
        }
        let poll_time = start.elapsed();
        let source = vec![5u8; polled_bytes];
        let mut target = vec![0u8; polled_bytes];
        let start = Instant::now();
        for _ in 0..iterations {
            target.copy_from_slice(black_box(&source));
            black_box(&mut target);
        }
        let copy_time = start.elapsed();
        let mb = |t: Duration| {
            as_f64(polled_bytes as u64) * f64::from(iterations) / t.as_secs_f64() / 1e6
        };
        out(&format!(
            "verify_on_read={verify}: poll {:.0} MB/s, memcpy {:.0} MB/s -> ratio {:.2} (goal >= 0.3), \
             {:.1} us per poll of {polled_bytes} bytes",
            mb(poll_time),
            mb(copy_time),
            copy_time.as_secs_f64() / poll_time.as_secs_f64(),
            poll_time.as_secs_f64() * 1e6 / f64::from(iterations)
        ));
    }
}

// ------------------------------------------------------------------------------------------------

fn fill(store: &StreamStore, partitions: u32, total_bytes: u64, batch_bytes: usize) {
    let payload = Bytes::from(vec![9u8; batch_bytes]);
    let per_partition = total_bytes / u64::from(partitions) / batch_bytes as u64;
    let store_ref = &store;
    std::thread::scope(|scope| {
        for chunk in 0..4u32 {
            let payload = payload.clone();
            scope.spawn(move || {
                for p in (0..partitions).filter(|p| p % 4 == chunk) {
                    let mut pending = Vec::new();
                    for _ in 0..per_partition {
                        pending.push(
                            store_ref
                                .append(addr(p), batch(16, &payload), 0)
                                .expect("append"),
                        );
                        if pending.len() >= 64 {
                            for t in pending.drain(..) {
                                t.wait().expect("durable");
                            }
                        }
                    }
                    for t in pending {
                        t.wait().expect("durable");
                    }
                }
            });
        }
    });
    store.flush_unsynced().expect("flush");
}

fn recovery_report() {
    let mb = env_u64("EDDY_BENCH_RECOVERY_MB", 1024);
    out(&format!("== recovery of {mb} MiB (hot page cache) =="));
    let dir = fresh_dir("recovery");
    {
        let store = open_store(&dir, StreamStoreConfig::default());
        create_topic(
            &store,
            4,
            TopicConfig {
                segment_size: 256 * 1024 * 1024,
                enforce_fsync: false,
                messages_required_to_save: 1 << 20,
                size_of_messages_required_to_save: 64 << 20,
                ..TopicConfig::default()
            },
        );
        fill(&store, 4, mb << 20, 64 * 1024);
        store.close().expect("close");
    }
    for verify in [VerifyOnOpen::Full, VerifyOnOpen::Tail] {
        let start = Instant::now();
        let store = open_store(
            &dir,
            StreamStoreConfig {
                verify_on_open: verify,
                ..StreamStoreConfig::default()
            },
        );
        let elapsed = start.elapsed();
        let bytes: u64 = (0..4)
            .map(|p| store.partition(addr(p)).expect("p").stats().size_bytes)
            .sum();
        let per_gib = elapsed.as_secs_f64() / (as_f64(bytes) / f64::from(1u32 << 30));
        out(&format!(
            "{verify:?}: opened {:.0} MiB in {:.0} ms -> {per_gib:.2} s per GiB",
            as_f64(bytes) / f64::from(1u32 << 20),
            elapsed.as_secs_f64() * 1e3
        ));
        store.close().expect("close");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------------------------------------

fn rss_report() {
    let mb = env_u64("EDDY_BENCH_RSS_MB", 1024);
    out(&format!(
        "== resident memory: {PARTITIONS} partitions, {mb} MiB in total =="
    ));
    let dir = fresh_dir("rss");
    {
        let store = open_store(&dir, StreamStoreConfig::default());
        create_topic(
            &store,
            PARTITIONS,
            TopicConfig {
                // About eight segments per partition, so most of the data sits in sealed ones.
                segment_size: ((mb << 20) / u64::from(PARTITIONS) / 8).max(1 << 20),
                enforce_fsync: false,
                messages_required_to_save: 1 << 20,
                size_of_messages_required_to_save: 64 << 20,
                ..TopicConfig::default()
            },
        );
        fill(&store, PARTITIONS, mb << 20, 16 * 1024);
        store.close().expect("close");
    }
    // Measure in a fresh process so the writer's freed heap does not count.
    let status = std::process::Command::new(std::env::current_exe().expect("own path"))
        .env("EDDY_BENCH_RSS_CHILD", &dir)
        .env("EDDY_BENCH_ONLY", "none")
        .status()
        .expect("spawn rss child");
    assert!(status.success(), "rss child failed");
    let _ = std::fs::remove_dir_all(&dir);
}

fn rss_child(dir: &Path) {
    let before = rss_kib();
    let start = Instant::now();
    let store = open_store(dir, StreamStoreConfig::default());
    let recovered_in = start.elapsed();
    let after_open = rss_kib();
    let mut segments = 0;
    for p in 0..PARTITIONS {
        let partition = store.partition(addr(p)).expect("partition");
        let stats = partition.stats();
        segments += stats.segments;
        // Stride through the partition: every sealed segment's index is loaded once.
        let mut offset = stats.first_offset;
        while offset < stats.next_offset {
            let polled = store
                .poll(addr(p), None, PollStrategy::Offset(offset), 16, u64::MAX)
                .expect("poll");
            black_box(&polled);
            offset += 16 * 64;
        }
    }
    let after_polls = rss_kib();
    out(&format!(
        "RSS: {} MiB at start, {} MiB after recovering {PARTITIONS} partitions ({segments} segments, \
         full verification in {:.1} s), {} MiB after polling through all of them \
         (goal < 256 MiB at 10 GB)",
        before / 1024,
        after_open / 1024,
        recovered_in.as_secs_f64(),
        after_polls / 1024
    ));
    store.close().expect("close");
}

fn main() {
    if let Some(dir) = std::env::var_os("EDDY_BENCH_RSS_CHILD") {
        rss_child(Path::new(&dir));
        return;
    }
    // `cargo bench` passes `--bench`; nothing else to parse.
    let only = std::env::var("EDDY_BENCH_ONLY").unwrap_or_default();
    let run = |name: &str| only.is_empty() || only.split(',').any(|o| o == name);
    if run("append") {
        append_report();
    }
    if run("poll") {
        poll_report();
    }
    if run("recovery") {
        recovery_report();
    }
    if run("rss") {
        rss_report();
    }
}
