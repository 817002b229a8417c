//! A writer for the event store's real-process crash test (`tests/event_store/sigkill_events.rs`,
//! `cargo xtask soak`).
//!
//! `events_crash_writer DIR` opens an event store in `DIR` (two shards, tiny segments and
//! memtables so that rolls, index flushes and merges happen all the time) and writes until it
//! is killed. [`THREADS`] writers each own four aggregates (two per shard) and a client id
//! fresh for this run; each write carries the next client sequence, enforces idempotency and
//! expects the version it last saw (it owns the aggregate, so any conflict is a bug). A fifth
//! of the writes are atomic two-aggregate writes. Every acknowledgement is printed before the
//! next write:
//!
//! ```text
//! READY
//! ACK <client> <seq> <aggregate id> <version> [<aggregate id> <version>]
//! ```
//!
//! Event values are `client:seq:aggregate`, so a verifier can check content from the log alone.

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use eddy_event_store::{
    AggregateKey, AggregateWrite, EventStore, EventStoreConfig, NewEvent, WriteRequest,
};
use eddy_log::FsBackend;

/// Writer threads.
const THREADS: u128 = 4;

/// The store's configuration (the verifier opens it with the same).
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

/// The aggregates of writer `t`: ids `8t, 8t+2` (shard 0) and `8t+1, 8t+3` (shard 1).
fn aggregates(t: u128) -> [u128; 4] {
    [8 * t, 8 * t + 2, 8 * t + 1, 8 * t + 3]
}

fn key(id: u128) -> AggregateKey {
    AggregateKey::new(7, 3, id)
}

fn value(client: u128, seq: u64, agg: u128) -> Bytes {
    Bytes::from(format!("{client}:{seq}:{agg}"))
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn say(out: &Mutex<std::io::Stdout>, line: &str) {
    let out = eddy_log::lock(out);
    let mut lock = out.lock();
    // A closed stdout means the harness is gone: nothing left to report to.
    let _ = writeln!(lock, "{line}");
    let _ = lock.flush();
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir: PathBuf = std::env::args_os()
        .nth(1)
        .ok_or("usage: events_crash_writer DIR")?
        .into();
    let (store, _) = EventStore::open(Arc::new(FsBackend::new(&dir)?), config())?;
    let store = Arc::new(store);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let run = u128::from(now ^ u64::from(std::process::id()).rotate_left(40)) << 8;
    let out = Arc::new(Mutex::new(std::io::stdout()));
    say(&out, "READY");
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = Arc::clone(&store);
            let out = Arc::clone(&out);
            std::thread::spawn(move || {
                let client = run | t;
                let ids = aggregates(t);
                let mut versions = [0u64; 4];
                for (v, id) in versions.iter_mut().zip(ids) {
                    *v = store
                        .details(&key(id))
                        .map_or(0, |d| d.max_aggregate_version);
                }
                let mut rng =
                    Rng((now ^ (u64::from(t as u8) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
                for seq in 1u64.. {
                    let r = rng.next();
                    let picked: Vec<usize> = if r.is_multiple_of(5) {
                        let pair = (r / 5 % 2) as usize * 2;
                        vec![pair, pair + 1]
                    } else {
                        vec![(r / 5 % 4) as usize]
                    };
                    let writes = picked
                        .iter()
                        .map(|i| AggregateWrite {
                            key: key(ids[*i]),
                            events: vec![NewEvent {
                                client_seq: seq,
                                event_type_major: 1 + seq % 3,
                                event_timestamp: seq,
                                value: value(client, seq, ids[*i]),
                                ..NewEvent::default()
                            }],
                            allow_create: true,
                            expected_version: Some(versions[*i]),
                            enforce_client_idempotency: true,
                        })
                        .collect();
                    let result = store
                        .write(WriteRequest {
                            client_id: client,
                            user_id: None,
                            writes,
                            now: seq,
                        })
                        .wait();
                    let Ok(done) = result else {
                        // Shutting down (or a bug the verifier will see as a missing ACK).
                        return;
                    };
                    let mut line = format!("ACK {client} {seq}");
                    for (i, v) in picked.iter().zip(&done.versions) {
                        versions[*i] = *v;
                        let _ = write!(line, " {} {v}", ids[*i]);
                    }
                    say(&out, &line);
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}
