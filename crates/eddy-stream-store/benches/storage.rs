//! Criterion benches of the storage hot paths, each beside the baseline it is judged against
//! (the `report` bench prints the ratios).

use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use eddy_log::FsBackend;
use eddy_stream_store::{
    MetadataOp, Operation, PartitionAddr, PollStrategy, Stamp, StampWith, StreamStore,
    StreamStoreConfig, TopicConfig,
};

const ADDR: PartitionAddr = PartitionAddr {
    stream_id: 0,
    topic_id: 0,
    partition_id: 0,
};
/// Batches per measured append iteration (1 KiB each).
const APPENDS: usize = 96;
const WRITERS: usize = 8;

fn dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/eddy-stream-store-criterion")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");
    dir
}

fn store(name: &str) -> Arc<StreamStore> {
    let (store, _) = StreamStore::open(
        Arc::new(FsBackend::new(dir(name)).expect("backend")),
        StreamStoreConfig::default(),
    )
    .expect("store");
    store
        .commit(Operation::Metadata(MetadataOp::CreateStream {
            id: 0,
            name: "b".into(),
            created_at: 0,
            options: vec![],
        }))
        .wait()
        .expect("stream");
    store
        .commit(Operation::Metadata(MetadataOp::CreateTopic {
            stream_id: 0,
            id: 0,
            name: "b".into(),
            created_at: 0,
            partitions: 1,
            config: TopicConfig::default(),
            explicit_options: vec![],
            derived_options: vec![],
        }))
        .wait()
        .expect("topic");
    Arc::new(store)
}

fn batch(count: u32, bytes: &Bytes) -> StampWith<impl FnOnce(&Stamp) -> Bytes + use<>> {
    let bytes = bytes.clone();
    StampWith {
        count,
        stamp: move |_: &Stamp| bytes,
    }
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append_1KiB");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    let raw_dir = dir("raw");
    group.bench_function("raw_write_fdatasync_each", |b| {
        b.iter_custom(|iters| {
            let mut file = std::fs::File::create(raw_dir.join("raw.bin")).expect("raw");
            let data = [7u8; 1024];
            let start = Instant::now();
            for _ in 0..iters * APPENDS as u64 {
                file.write_all(&data).expect("write");
                file.sync_data().expect("fdatasync");
            }
            start.elapsed()
        });
    });
    let store = store("append");
    let payload = Bytes::from(vec![7u8; 1024]);
    group.bench_function("eddy_8_writers_durable", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let threads: Vec<_> = (0..WRITERS)
                    .map(|_| {
                        let store = Arc::clone(&store);
                        let payload = payload.clone();
                        std::thread::spawn(move || {
                            for _ in 0..APPENDS / WRITERS {
                                store
                                    .append(ADDR, batch(1, &payload), 0)
                                    .expect("append")
                                    .wait()
                                    .expect("ack");
                            }
                        })
                    })
                    .collect();
                for t in threads {
                    t.join().expect("writer");
                }
            }
            start.elapsed()
        });
    });
    group.finish();
}

fn poll(c: &mut Criterion) {
    let store = store("poll");
    let payload = Bytes::from(vec![3u8; 10 * 1024]);
    for _ in 0..100 {
        store
            .append(ADDR, batch(10, &payload), 0)
            .expect("append")
            .wait()
            .expect("ack");
    }
    let bytes: usize = store
        .poll(ADDR, None, PollStrategy::First, 1_000, u64::MAX)
        .expect("poll")
        .batches
        .iter()
        .map(|b| b.bytes.len())
        .sum();
    let mut group = c.benchmark_group("poll_1000x1KiB");
    group.throughput(criterion::Throughput::Bytes(bytes as u64));
    group.bench_function("eddy_poll_page_cache", |b| {
        b.iter(|| {
            black_box(
                store
                    .poll(ADDR, None, PollStrategy::Offset(0), 1_000, u64::MAX)
                    .expect("poll"),
            )
        });
    });
    let source = vec![5u8; bytes];
    let mut target = vec![0u8; bytes];
    group.bench_function("memcpy_same_bytes", |b| {
        b.iter(|| {
            target.copy_from_slice(black_box(&source));
            black_box(&mut target);
        });
    });
    group.finish();
}

criterion_group!(benches, append, poll);
criterion_main!(benches);
