//! Event framing benches: zstd with the cluster dictionary versus plain zstd on typical small
//! JSON events (compression ratio and MB/s, each event compressed on its own as a small
//! frame body would be), against a memcpy of the same bytes as the baseline; and header
//! parsing / frame splitting.
//!
//! Run: `cargo bench -p eddy-wire --bench event`. The ratio lines are printed once, before
//! the timings.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use eddy_wire::event::sample::SampleEvents;
use eddy_wire::event::{
    decode_request_frame, DictCodec, Dictionary, FrameBuilder, FrameLimits, FrameSpec,
    ProtocolVersion, RequestType, DEFAULT_COMPRESSION_LEVEL,
};

/// Not the training seed: the dictionary is measured on events it was not trained on.
const BENCH_SEED: u64 = 0xBE0C_0000_0000_0042;
const EVENTS: usize = 256;

/// `a / b` for byte counts far below 2^52 (exact in f64).
fn ratio(a: usize, b: usize) -> f64 {
    let to_f64 = |n: usize| f64::from(u32::try_from(n).expect("bench sizes fit u32"));
    to_f64(a) / to_f64(b)
}

fn events() -> Vec<Vec<u8>> {
    SampleEvents::new(BENCH_SEED).take(EVENTS).collect()
}

fn zstd_compression(c: &mut Criterion) {
    let events = events();
    let total: usize = events.iter().map(Vec::len).sum();
    let dict = Arc::new(Dictionary::builtin(DEFAULT_COMPRESSION_LEVEL).unwrap());
    let mut with_dict = DictCodec::new(dict);
    let mut plain = zstd::bulk::Compressor::new(DEFAULT_COMPRESSION_LEVEL).unwrap();
    let mut plain_decompressor = zstd::bulk::Decompressor::new().unwrap();

    let dict_frames: Vec<Vec<u8>> = events
        .iter()
        .map(|e| with_dict.compress(e).unwrap().to_vec())
        .collect();
    let plain_frames: Vec<Vec<u8>> = events.iter().map(|e| plain.compress(e).unwrap()).collect();
    let dict_total: usize = dict_frames.iter().map(Vec::len).sum();
    let plain_total: usize = plain_frames.iter().map(Vec::len).sum();
    eprintln!(
        "zstd level {DEFAULT_COMPRESSION_LEVEL} on {EVENTS} JSON events ({} bytes avg): \
         ratio with dictionary {:.2}x, without {:.2}x",
        total / EVENTS,
        ratio(total, dict_total),
        ratio(total, plain_total),
    );

    let mut group = c.benchmark_group("event_zstd_small_json");
    group.throughput(Throughput::Bytes(total as u64));
    group.bench_function("baseline_memcpy", |b| {
        let mut out = Vec::with_capacity(1024);
        b.iter(|| {
            for e in &events {
                out.clear();
                out.extend_from_slice(black_box(e));
                black_box(&out);
            }
        });
    });
    group.bench_function("compress_with_dict", |b| {
        b.iter(|| {
            for e in &events {
                black_box(with_dict.compress(black_box(e)).unwrap());
            }
        });
    });
    group.bench_function("compress_without_dict", |b| {
        b.iter(|| {
            for e in &events {
                black_box(plain.compress(black_box(e)).unwrap());
            }
        });
    });
    group.bench_function("decompress_with_dict", |b| {
        b.iter(|| {
            for (frame, e) in dict_frames.iter().zip(&events) {
                black_box(
                    with_dict
                        .decompress(black_box(frame), e.len() as u32, 1 << 20)
                        .unwrap(),
                );
            }
        });
    });
    group.bench_function("decompress_without_dict", |b| {
        b.iter(|| {
            for (frame, e) in plain_frames.iter().zip(&events) {
                black_box(
                    plain_decompressor
                        .decompress(black_box(frame), e.len())
                        .unwrap(),
                );
            }
        });
    });
    group.finish();
}

fn framing(c: &mut Criterion) {
    let mut group = c.benchmark_group("event_frame");
    for body_len in [20usize, 4096] {
        let mut buf = Vec::new();
        let builder = FrameBuilder::begin(&mut buf);
        buf.resize(buf.len() + body_len, 0x5a);
        builder
            .finish(
                &mut buf,
                FrameSpec::request(ProtocolVersion::V2, RequestType::Write),
                1 << 20,
                None,
            )
            .unwrap();
        group.throughput(Throughput::Bytes(buf.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("decode_request_frame", body_len),
            &buf,
            |b, buf| {
                b.iter(|| {
                    black_box(
                        decode_request_frame(black_box(buf), FrameLimits::default_requests())
                            .unwrap(),
                    )
                });
            },
        );
        group.bench_with_input(
            BenchmarkId::new("baseline_memcpy", body_len),
            &buf,
            |b, buf| {
                let mut out = Vec::with_capacity(buf.len());
                b.iter(|| {
                    out.clear();
                    out.extend_from_slice(black_box(buf));
                    black_box(&out);
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, zstd_compression, framing);
criterion_main!(benches);
