//! Real-process crash test: the `crash_writer` binary appends batches and metadata changes and
//! prints every acknowledgement; it is killed with SIGKILL at random moments; the store is
//! reopened in-process and verified:
//!
//! * it opens (a torn tail is repaired, nothing is reported as corruption);
//! * every acknowledged batch that retention did not delete is present, exactly once, at its
//!   offset, with the content its offset implies; offsets are contiguous inside the retained
//!   range and no acknowledged offset is ever handed out again by a later run;
//! * the stored consumer offset is at least the last acknowledged one, and the last
//!   acknowledged state of every short-lived stream is what the metadata shows.
//!
//! The short version runs for about three seconds in `cargo test`. `EDDY_SOAK_SECONDS=N` makes
//! it run for N seconds (what `cargo xtask soak` uses).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_log::FsBackend;
use eddy_stream_store::{ConsumerKey, PartitionAddr, StreamStore, StreamStoreConfig};

const PARTITIONS: u32 = 4;

#[derive(Default)]
struct Acked {
    /// (partition, base) -> (count, len)
    batches: BTreeMap<(u32, u64), (u32, u32)>,
    /// Highest acknowledged end offset per partition, over all runs.
    high: BTreeMap<u32, u64>,
    offset: u64,
    streams: BTreeMap<u32, bool>,
}

fn soak_seconds() -> u64 {
    std::env::var("EDDY_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

/// Runs the writer once, kills it after `delay`, and records what it acknowledged.
fn run_once(dir: &Path, delay: Duration, acked: &mut Acked) -> usize {
    let mut child = Command::new(env!("CARGO_BIN_EXE_crash_writer"))
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn crash_writer");
    let stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            match line {
                Ok(l) => lines.push(l),
                Err(_) => break,
            }
        }
        lines
    });
    std::thread::sleep(delay);
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let lines = reader.join().expect("reader");
    let mut run: Vec<(u32, u64, u32, u32)> = Vec::new();
    for line in &lines {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["ACK", p, base, count, len] => run.push((
                p.parse().unwrap(),
                base.parse().unwrap(),
                count.parse().unwrap(),
                len.parse().unwrap(),
            )),
            ["OFFSET", _, v] => acked.offset = v.parse().unwrap(),
            ["STREAM", id, created] => {
                acked.streams.insert(id.parse().unwrap(), *created == "1");
            }
            // READY, or a line cut by the kill.
            _ => {}
        }
    }
    // No acknowledged offset is ever handed out again: not within a run (no duplicates), not
    // after a crash (every base of this run is at or above what earlier runs acknowledged).
    let mut run_high: BTreeMap<u32, u64> = BTreeMap::new();
    for (p, base, count, len) in &run {
        let earlier = acked.high.get(p).copied().unwrap_or(0);
        assert!(
            *base >= earlier,
            "offset {base} of partition {p} reissued after a crash (acknowledged up to {earlier})"
        );
        assert!(
            acked.batches.insert((*p, *base), (*count, *len)).is_none(),
            "offset {base} of partition {p} acknowledged twice"
        );
        let high = run_high.entry(*p).or_insert(0);
        *high = (*high).max(base + u64::from(*count));
    }
    for (p, high) in run_high {
        let entry = acked.high.entry(p).or_insert(0);
        *entry = (*entry).max(high);
    }
    run.len()
}

fn verify(dir: &Path, acked: &Acked) {
    let backend = Arc::new(FsBackend::new(dir).unwrap());
    let (store, recovery) = StreamStore::open(backend, StreamStoreConfig::default())
        .expect("store reopens after SIGKILL");
    assert!(recovery.metadata.repairs.is_empty());
    for (_, report) in &recovery.partitions {
        assert!(report.repairs.is_empty(), "{report:?}");
    }
    for p in 0..PARTITIONS {
        let addr = PartitionAddr {
            stream_id: 0,
            topic_id: 0,
            partition_id: p,
        };
        let Ok(partition) = store.partition(addr) else {
            // The topic was never created (killed during the first start).
            assert!(acked.batches.is_empty());
            continue;
        };
        let stats = partition.stats();
        let batches = partition.read(0, u64::MAX, u64::MAX).unwrap();
        let mut expected_next = stats.first_offset;
        for b in &batches {
            assert_eq!(
                b.base_offset, expected_next,
                "contiguous offsets in partition {p}"
            );
            expected_next = b.end_offset();
            // Content is a function of the stamped offset.
            let bytes = &b.bytes;
            assert!(bytes.len() >= 16);
            assert_eq!(
                u64::from_le_bytes(bytes[0..8].try_into().unwrap()),
                b.base_offset
            );
            assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), p);
            assert_eq!(
                u32::from_le_bytes(bytes[12..16].try_into().unwrap()),
                b.message_count
            );
            let seed = b.base_offset.wrapping_mul(31);
            for (i, byte) in bytes.iter().enumerate().skip(16) {
                assert_eq!(*byte, (seed.wrapping_add(i as u64) & 0xff) as u8);
            }
        }
        assert_eq!(expected_next, stats.next_offset);
        let present: BTreeMap<u64, u32> = batches
            .iter()
            .map(|b| (b.base_offset, b.message_count))
            .collect();
        for ((ap, base), (count, len)) in &acked.batches {
            if *ap != p || *base < stats.first_offset {
                continue; // another partition, or deleted by the writer's segment deletions
            }
            assert_eq!(
                present.get(base),
                Some(count),
                "acknowledged batch {p}/{base} is missing"
            );
            let b = batches.iter().find(|b| b.base_offset == *base).unwrap();
            assert_eq!(b.bytes.len() as u32, *len);
        }
        assert!(stats.next_offset >= acked.high.get(&p).copied().unwrap_or(0));
    }
    let stored = store
        .consumer_offset(
            PartitionAddr {
                stream_id: 0,
                topic_id: 0,
                partition_id: 0,
            },
            ConsumerKey::Consumer(1),
        )
        .unwrap_or(0);
    assert!(
        stored >= acked.offset,
        "consumer offset {stored} < acknowledged {}",
        acked.offset
    );
    // The metadata thread changes one stream at a time and prints each acknowledgement before
    // the next change, so at most one stream can differ from its last acknowledged state (a
    // change that became durable but was killed before its line was printed).
    let mut differing = 0;
    for (id, created) in &acked.streams {
        let name = store.read_metadata(|s| s.stream(*id).map(|s| s.name.clone()));
        if let Some(name) = &name {
            assert_eq!(name, &format!("tmp-{id}"));
        }
        if name.is_some() != *created {
            differing += 1;
        }
    }
    assert!(
        differing <= 1,
        "{differing} streams differ from their acknowledged state"
    );
    store.close().unwrap();
}

#[test]
fn sigkill_at_random_moments_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let deadline = Instant::now() + Duration::from_secs(soak_seconds());
    let mut acked = Acked::default();
    let mut rng = 0x1234_5678_9abc_def1u64 ^ u64::from(std::process::id());
    let mut runs = 0;
    let mut total = 0;
    while runs < 2 || Instant::now() < deadline {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let delay = Duration::from_millis(150 + rng % 500);
        total += run_once(dir.path(), delay, &mut acked);
        verify(dir.path(), &acked);
        runs += 1;
    }
    assert!(total > 0, "the writer acknowledged nothing in {runs} runs");
    eprintln!("crash test: {runs} SIGKILLs, {total} acknowledged batches verified");
}
