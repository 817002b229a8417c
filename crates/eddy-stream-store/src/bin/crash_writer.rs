//! A writer for the real-process crash test (`tests/stream_store/crash.rs`, `cargo xtask soak`).
//!
//! `crash_writer DIR` opens a store in `DIR` (creating stream 0 / topic 0 with
//! [`PARTITIONS`] partitions and small segments the first time), then writes until it is
//! killed. It reports every acknowledgement on stdout, one line each, flushed before the next
//! write it depends on:
//!
//! ```text
//! READY
//! ACK <partition> <base_offset> <message_count> <payload_len>   a durable batch
//! OFFSET <consumer> <offset>                                   a durable consumer offset
//! STREAM <id> <1 created | 0 deleted>                          a durable metadata change
//! ```
//!
//! Batch payloads are a function of their stamped base offset (see [`payload`]) so a verifier
//! can check content without a log of what was sent. Old segments are deleted now and then,
//! to exercise deletion under crashes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use eddy_log::FsBackend;
use eddy_stream_store::{
    ConsumerKey, MetadataOp, Operation, PartitionAddr, Stamp, StampWith, StreamStore,
    StreamStoreConfig, TopicConfig,
};

/// Partitions of the test topic.
const PARTITIONS: u32 = 4;
/// Appending threads.
const WRITERS: u64 = 6;

/// The payload of a batch: `[base_offset u64][partition u32][count u32][pattern...]`, where
/// the pattern byte at index `i` is `(base_offset * 31 + i) mod 256`.
fn payload(stamp: &Stamp, count: u32, len: usize) -> Bytes {
    let mut v = Vec::with_capacity(len.max(16));
    v.extend_from_slice(&stamp.base_offset.to_le_bytes());
    v.extend_from_slice(&stamp.partition_id.to_le_bytes());
    v.extend_from_slice(&count.to_le_bytes());
    let seed = stamp.base_offset.wrapping_mul(31);
    for i in 16..len.max(16) {
        v.push((seed.wrapping_add(i as u64) & 0xff) as u8);
    }
    Bytes::from(v)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn say(out: &Mutex<std::io::Stdout>, line: &str) {
    let out = eddy_log::lock(out);
    let mut lock = out.lock();
    // A closed stdout means the test harness is gone: nothing left to report to.
    let _ = writeln!(lock, "{line}");
    let _ = lock.flush();
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir: PathBuf = std::env::args_os()
        .nth(1)
        .ok_or("usage: crash_writer DIR")?
        .into();
    let store = open_store(&dir)?;
    let out = Arc::new(Mutex::new(std::io::stdout()));
    say(&out, "READY");
    let seed = now_us() ^ u64::from(std::process::id()).rotate_left(32);
    let counter = Arc::new(AtomicU64::new(0));

    let mut handles = Vec::new();
    for w in 0..WRITERS {
        let store = Arc::clone(&store);
        let out = Arc::clone(&out);
        let counter = Arc::clone(&counter);
        let rng = Rng(seed ^ (w + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        handles.push(std::thread::spawn(move || {
            append_until_refused(&store, &out, &counter, rng);
        }));
    }
    {
        // Metadata traffic: consumer offsets and short-lived streams.
        let store = Arc::clone(&store);
        let out = Arc::clone(&out);
        let rng = Rng(seed.rotate_left(7) | 1);
        handles.push(std::thread::spawn(move || {
            metadata_until_refused(&store, &out, rng);
        }));
    }
    for handle in handles {
        let _ = handle.join();
    }
    Ok(())
}

/// Opens the store in `dir` with small metadata segments and frequent snapshots, creating
/// stream 0 and its topic 0 ([`PARTITIONS`] partitions, small segments) when they are missing.
fn open_store(dir: &Path) -> Result<Arc<StreamStore>, Box<dyn std::error::Error>> {
    let backend = Arc::new(FsBackend::new(dir)?);
    let config = StreamStoreConfig {
        pool_threads: 4,
        metadata_segment_size: 16 * 1024,
        snapshot_every_ops: 64,
        index_interval: 4096,
        ..StreamStoreConfig::default()
    };
    let (store, _) = StreamStore::open(backend, config)?;
    let store = Arc::new(store);
    if store.read_metadata(|s| s.stream(0).is_none()) {
        store
            .commit(Operation::Metadata(MetadataOp::CreateStream {
                id: 0,
                name: "crash".into(),
                created_at: now_us(),
                options: vec![],
            }))
            .wait()?;
    }
    if store.read_metadata(|s| s.topic(0, 0).is_none()) {
        store
            .commit(Operation::Metadata(MetadataOp::CreateTopic {
                stream_id: 0,
                id: 0,
                name: "crash".into(),
                created_at: now_us(),
                partitions: PARTITIONS,
                config: TopicConfig {
                    segment_size: 64 * 1024,
                    ..TopicConfig::default()
                },
                explicit_options: vec![],
                derived_options: vec![],
            }))
            .wait()?;
    }
    Ok(store)
}

/// One writer: appends random batches to random partitions of topic 0, reporting each
/// acknowledgement (`ACK`), and every 200th append of all writers deletes a partition's
/// oldest segment. Returns when the store refuses.
fn append_until_refused(
    store: &StreamStore,
    out: &Mutex<std::io::Stdout>,
    counter: &AtomicU64,
    mut rng: Rng,
) {
    loop {
        let partition = u32::try_from(rng.below(u64::from(PARTITIONS))).unwrap_or(0);
        let count = u32::try_from(1 + rng.below(8)).unwrap_or(1);
        let len = usize::try_from(16 + rng.below(1500)).unwrap_or(16);
        let addr = PartitionAddr {
            stream_id: 0,
            topic_id: 0,
            partition_id: partition,
        };
        let batch = StampWith {
            count,
            stamp: move |s: &Stamp| payload(s, count, len),
        };
        let Ok(ticket) = store.append(addr, batch, now_us()) else {
            return;
        };
        let Ok(ack) = ticket.wait() else { return };
        say(
            out,
            &format!(
                "ACK {partition} {} {} {}",
                ack.base_offset, ack.message_count, ack.len
            ),
        );
        if counter.fetch_add(1, Ordering::Relaxed) % 200 == 199 {
            // Now and then drop the oldest segment of a partition.
            let _ = store
                .commit(Operation::DeleteSegments { addr, count: 1 })
                .wait();
        }
    }
}

/// The metadata writer: moves consumer 1's offset on partition 0 forward (`OFFSET`), then
/// creates or deletes one of streams 1 to 3 (`STREAM`), reporting each once durable. Returns
/// when the store refuses.
fn metadata_until_refused(store: &StreamStore, out: &Mutex<std::io::Stdout>, mut rng: Rng) {
    let mut offset = store
        .consumer_offset(
            PartitionAddr {
                stream_id: 0,
                topic_id: 0,
                partition_id: 0,
            },
            ConsumerKey::Consumer(1),
        )
        .unwrap_or(0);
    loop {
        offset += 1 + rng.below(5);
        let stored = store
            .commit(Operation::Metadata(MetadataOp::StoreConsumerOffset {
                addr: PartitionAddr {
                    stream_id: 0,
                    topic_id: 0,
                    partition_id: 0,
                },
                consumer: ConsumerKey::Consumer(1),
                offset,
                forward_only: true,
            }))
            .wait();
        if stored.is_err() {
            return;
        }
        say(out, &format!("OFFSET 1 {offset}"));
        let id = u32::try_from(1 + rng.below(3)).unwrap_or(1);
        let exists = store.read_metadata(|s| s.stream(id).is_some());
        let op = if exists {
            MetadataOp::DeleteStream { id }
        } else {
            MetadataOp::CreateStream {
                id,
                name: format!("tmp-{id}"),
                created_at: now_us(),
                options: vec![],
            }
        };
        if store.commit(Operation::Metadata(op)).wait().is_err() {
            return;
        }
        say(out, &format!("STREAM {id} {}", u8::from(!exists)));
    }
}
