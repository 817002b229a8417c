//! Real-process crash test of the event store: the `events_crash_writer` binary writes with
//! OCC and idempotency and prints every acknowledgement; it is killed with SIGKILL at random
//! moments; the store is reopened in-process and checked:
//!
//! * it opens (torn tails are cut, the index catches up from its checkpoint);
//! * every acknowledged batch is present at its acknowledged version with its exact content;
//! * every (client, seq) is stored at most once, and per client the stored sequences are the
//!   contiguous prefix `1..=m` with `m` the last acknowledged one or the one after it (the
//!   write in flight when the process died);
//! * versions of every aggregate are gap-free and every batch's content matches its writer;
//! * retrying the last acknowledged sequence of a client is refused as a duplicate;
//! * each shard's hash chain verifies.
//!
//! About three seconds in `cargo test`; `EDDY_SOAK_SECONDS=N` runs N seconds (`cargo xtask soak`).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use eddy_event_store::{
    AggregateKey, AggregateWrite, EventStore, EventStoreConfig, EventStoreError, NewEvent,
    ReadQuery, Refusal, WriteRequest,
};
use eddy_log::FsBackend;

const THREADS: u128 = 4;

fn config() -> EventStoreConfig {
    EventStoreConfig {
        num_shards: 2,
        pool_threads: 2,
        segment_size: 64 * 1024,
        index_interval: 4096,
        memtable_bytes: 8 * 1024,
        ..EventStoreConfig::default()
    }
}

fn key(id: u128) -> AggregateKey {
    AggregateKey::new(7, 3, id)
}

fn soak_seconds() -> u64 {
    std::env::var("EDDY_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

#[derive(Default)]
struct Acked {
    /// (aggregate id, version) -> (client, seq)
    batches: BTreeMap<(u128, u64), (u128, u64)>,
    /// client -> last acknowledged seq
    last_seq: HashMap<u128, u64>,
}

fn run_once(dir: &Path, delay: Duration, acked: &mut Acked) -> usize {
    let mut child = Command::new(env!("CARGO_BIN_EXE_events_crash_writer"))
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn events_crash_writer");
    let stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    std::thread::sleep(delay);
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let mut count = 0;
    for line in reader.join().expect("reader") {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.first() != Some(&"ACK") || parts.len() < 5 || parts.len().is_multiple_of(2) {
            continue; // READY, or a line cut by the kill
        }
        let client: u128 = parts[1].parse().unwrap();
        let seq: u64 = parts[2].parse().unwrap();
        for pair in parts[3..].chunks(2) {
            let agg: u128 = pair[0].parse().unwrap();
            let version: u64 = pair[1].parse().unwrap();
            assert!(
                acked
                    .batches
                    .insert((agg, version), (client, seq))
                    .is_none(),
                "version {version} of aggregate {agg} acknowledged twice"
            );
        }
        let last = acked.last_seq.entry(client).or_insert(0);
        assert_eq!(seq, *last + 1, "the writer waits for each acknowledgement");
        *last = seq;
        count += 1;
    }
    count
}

fn verify(dir: &Path, acked: &Acked) {
    let (store, _) = EventStore::open(Arc::new(FsBackend::new(dir).unwrap()), config())
        .expect("event store reopens after SIGKILL");
    // Everything stored, by aggregate.
    let mut stored: BTreeMap<(u128, u64), (u128, u64)> = BTreeMap::new();
    let mut per_client: HashMap<u128, Vec<u64>> = HashMap::new();
    for id in 0..8 * THREADS {
        let k = key(id);
        let Ok(details) = store.details(&k) else {
            continue;
        };
        let mut q = ReadQuery::from_version(1);
        let mut versions = Vec::new();
        loop {
            let page = store.read(&k, &q).unwrap();
            for b in page.batches {
                let e = &b.events[0];
                assert_eq!(b.events.len(), 1);
                assert_eq!(
                    e.value,
                    Bytes::from(format!("{}:{}:{id}", b.client_id, e.client_seq))
                );
                versions.push(b.version);
                stored.insert((id, b.version), (b.client_id, e.client_seq));
                per_client
                    .entry(b.client_id)
                    .or_default()
                    .push(e.client_seq);
            }
            match page.next_version {
                Some(n) => q.from_version = n,
                None => break,
            }
        }
        assert_eq!(
            versions,
            (1..=details.max_aggregate_version).collect::<Vec<_>>(),
            "gap-free versions of {id}"
        );
    }
    for (at, who) in &acked.batches {
        assert_eq!(
            stored.get(at),
            Some(who),
            "acknowledged batch {at:?} missing or changed"
        );
    }
    for (client, seqs) in &mut per_client {
        seqs.sort_unstable();
        seqs.dedup(); // a two-aggregate write stores one seq in two batches
        let m = seqs.len() as u64;
        assert_eq!(
            *seqs,
            (1..=m).collect::<Vec<_>>(),
            "client {client} sequences are a prefix"
        );
        let last = acked.last_seq.get(client).copied().unwrap_or(0);
        assert!(
            m == last || m == last + 1,
            "client {client}: stored up to {m}, acknowledged {last}"
        );
    }
    // Retrying a client's last acknowledged write (on the aggregate it went to) is refused as
    // a duplicate: the mark survived the crash.
    if let Some((&(agg, _), &(client, seq))) = acked.batches.iter().next_back() {
        if acked.last_seq[&client] == seq {
            let retry = store
                .write(WriteRequest {
                    client_id: client,
                    user_id: None,
                    now: 0,
                    writes: vec![AggregateWrite {
                        key: key(agg),
                        events: vec![NewEvent {
                            client_seq: seq,
                            event_type_major: 1,
                            value: Bytes::from_static(b"retry"),
                            ..NewEvent::default()
                        }],
                        allow_create: true,
                        expected_version: None,
                        enforce_client_idempotency: true,
                    }],
                })
                .wait();
            assert!(
                matches!(
                    retry,
                    Err(EventStoreError::Refused(Refusal::Duplicate { .. }))
                ),
                "retry of the last acknowledged seq: {retry:?}"
            );
        }
    }
    for shard in 0..2 {
        assert_eq!(
            store.verify_chain(shard).unwrap(),
            store.chain_tip(shard).unwrap()
        );
    }
    store.close().unwrap();
}

#[test]
fn sigkill_events_lose_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let deadline = Instant::now() + Duration::from_secs(soak_seconds());
    let mut acked = Acked::default();
    let mut rng = 0x9abc_def1_2345_6789u64 ^ u64::from(std::process::id());
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
    eprintln!("event crash test: {runs} SIGKILLs, {total} acknowledged writes verified");
}
