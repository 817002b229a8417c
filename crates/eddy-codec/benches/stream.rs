//! Stream protocol codec benches.
//!
//! * `batch/admit_and_stamp_1mib`: admission (every checksum verified, reserved bytes,
//!   counts, lengths) plus stamping of a 1 MiB batch of 1,000 x 1 KB messages, against
//!   `batch/memcpy_1mib`, a copy of the same bytes measured in the same run. After the
//!   criterion groups, the bench prints the ratio (goal: at most 4x).
//! * `batch/slice_half`: a sliced poll view of 500 messages out of a stored batch.
//! * `request/*`: decoding a poll request and a 1 MiB send request (zero-copy).

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use eddy_codec::stream::commands::poll_messages::PollMessages;
use eddy_codec::stream::commands::send_messages::SendMessages;
use eddy_codec::stream::{
    admit, build_batch, Consumer, Identifier, Message, OptionalPartition, Partitioning,
    PollingStrategy, StoredBatch, WireDecode, WireEncode,
};

const MESSAGES: usize = 1_000;
const PAYLOAD: usize = 1_024;

fn batch() -> Bytes {
    let messages: Vec<Message> = (0..MESSAGES)
        .map(|i| {
            let payload: Vec<u8> = (0..PAYLOAD).map(|j| (i * 31 + j) as u8).collect();
            Message::new(i as u128 + 1, 1_700_000_000_000_000 + i as u64, payload)
        })
        .collect();
    let batch = build_batch(&messages).expect("valid messages");
    assert!((1 << 20..1 << 21).contains(&batch.len()), "about 1 MiB");
    batch
}

fn admit_and_stamp(batch: &Bytes) -> u64 {
    let admitted = admit(batch.clone(), MESSAGES as u32).expect("valid batch");
    admitted
        .stamp(1, 1_000, 1_700_000_000_500_000)
        .header()
        .batch_checksum
}

fn memcpy(src: &[u8], dst: &mut [u8]) {
    dst.copy_from_slice(src);
}

fn batches(c: &mut Criterion) {
    let batch = batch();
    let mut group = c.benchmark_group("batch");
    group.throughput(Throughput::Bytes(batch.len() as u64));
    let mut target = vec![0u8; batch.len()];
    group.bench_function("memcpy_1mib", |b| {
        b.iter(|| memcpy(black_box(&batch), black_box(&mut target)));
    });
    group.bench_function("admit_and_stamp_1mib", |b| {
        b.iter(|| black_box(admit_and_stamp(black_box(&batch))));
    });
    let stored = StoredBatch::parse(Bytes::from(
        admit(batch.clone(), MESSAGES as u32)
            .expect("valid batch")
            .stamp(0, 0, 1)
            .to_vec(),
    ))
    .expect("stamped batch parses");
    group.bench_function("slice_half", |b| {
        b.iter(|| black_box(stored.slice(black_box(250), 500)));
    });
    group.finish();
}

fn requests(c: &mut Criterion) {
    let mut group = c.benchmark_group("request");
    let poll = PollMessages {
        consumer: Consumer::new(Identifier::numeric(1)),
        stream_id: Identifier::numeric(0),
        topic_id: Identifier::named("orders").expect("name"),
        partition: OptionalPartition(Some(0)),
        strategy: PollingStrategy::Offset(0),
        count: 100,
        auto_commit: false,
    }
    .to_vec();
    group.bench_function("poll_decode", |b| {
        b.iter(|| black_box(PollMessages::decode(black_box(&poll))));
    });
    let send = Bytes::from(
        SendMessages {
            stream_id: Identifier::numeric(0),
            topic_id: Identifier::numeric(0),
            partitioning: Partitioning::PartitionId(0),
            messages_count: MESSAGES as u32,
            batch: batch(),
        }
        .to_vec(),
    );
    group.bench_function("send_1mib_decode", |b| {
        b.iter(|| black_box(SendMessages::decode_bytes(black_box(&send))));
    });
    group.finish();
}

/// Prints admit+stamp time as a ratio to memcpy of the same bytes, both timed here.
fn ratio(_: &mut Criterion) {
    let batch = batch();
    let mut target = vec![0u8; batch.len()];
    let rounds = 200;
    let best = |f: &mut dyn FnMut()| {
        (0..5)
            .map(|_| {
                let start = Instant::now();
                for _ in 0..rounds {
                    f();
                }
                start.elapsed().as_secs_f64() / f64::from(rounds)
            })
            .fold(f64::INFINITY, f64::min)
    };
    let copy = best(&mut || memcpy(black_box(&batch), black_box(&mut target)));
    let stamp = best(&mut || {
        black_box(admit_and_stamp(black_box(&batch)));
    });
    eprintln!(
        "batch ratio: admit+stamp {:.1} us, memcpy {:.1} us, ratio {:.2}x (goal <= 4x)",
        stamp * 1e6,
        copy * 1e6,
        stamp / copy
    );
}

criterion_group!(benches, batches, requests, ratio);
criterion_main!(benches);
