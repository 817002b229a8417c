//! Event codec benches: encode and decode of a `WriteRequest` with one 20-byte event and of a
//! `ReadResponse` with 1,000 events, in V2 and V3 (ns per message via the time per
//! iteration, MB/s via the body size), plus whole frames, against a memcpy of the same
//! body as the baseline.
//!
//! Run: `cargo bench -p eddy-codec --bench event`.

use std::hint::black_box;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use eddy_codec::event::{
    decode_request, encode_response, AggregateEventBatch, AggregateKey, Event, EventBody,
    EventRequest, EventResponse, ReadResponse, SingleAggregateWrite, WriteRequest,
};
use eddy_wire::event::sample::SampleEvents;
use eddy_wire::event::{
    decode_request_frame, Decoded, DictCodec, Dictionary, FrameLimits, ProtocolVersion,
    DEFAULT_COMPRESSION_LEVEL,
};

fn write_request() -> WriteRequest {
    let mut request = WriteRequest {
        correlation_id: Some(1),
        client_id: 0x42,
        user_id: None,
        ..WriteRequest::default()
    };
    request.writes.insert(
        AggregateKey::new(1, 2, 3),
        SingleAggregateWrite {
            events: vec![Event {
                client_seq: 1,
                event_timestamp: 1_700_000_000_000,
                event_type_major: 7,
                event_value: Bytes::from_static(br#"{"amount":12,"ok":1}"#),
                ..Event::default()
            }],
            allow_create: true,
            expected_version: None,
            enforce_client_idempotency: true,
        },
    );
    request
}

fn read_response() -> ReadResponse {
    let events: Vec<Event> = SampleEvents::new(77)
        .take(1000)
        .enumerate()
        .map(|(i, value)| Event {
            client_seq: i as u64 + 1,
            event_seq: i as u64 + 1,
            event_id: Some(i as u128 * 0x1_0000_0001),
            event_timestamp: 1_700_000_000_000 + i as u64,
            event_type_major: 1 + (i as u64 % 5),
            event_type_minor: 0,
            event_value: Bytes::from(value),
            iv: None,
        })
        .collect();
    ReadResponse {
        correlation_id: Some(9),
        event_batches: events
            .chunks(10)
            .enumerate()
            .map(|(i, chunk)| AggregateEventBatch {
                aggregate_version: i as u64 + 1,
                client_id: 0x42,
                user_id: Some(7),
                server_timestamp: 1_700_000_000_000 + i as u64,
                events: chunk.to_vec(),
            })
            .collect(),
        next_aggregate_version: None,
    }
}

const VERSIONS: [(ProtocolVersion, &str); 2] =
    [(ProtocolVersion::V2, "v2"), (ProtocolVersion::V3, "v3")];

fn bench_message<T: EventBody + PartialEq + std::fmt::Debug>(
    c: &mut Criterion,
    name: &str,
    message: &T,
) {
    let mut group = c.benchmark_group(name);
    for (version, v) in VERSIONS {
        let body = message.to_body(version);
        let shared = Bytes::from(body.clone());
        assert_eq!(&T::decode_body(version, &body).unwrap(), message);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(BenchmarkId::new("baseline_memcpy", v), |b| {
            let mut out = Vec::with_capacity(body.len());
            b.iter(|| {
                out.clear();
                out.extend_from_slice(black_box(&body));
                black_box(&out);
            });
        });
        group.bench_function(BenchmarkId::new("encode", v), |b| {
            let mut out = Vec::with_capacity(body.len());
            b.iter(|| {
                out.clear();
                black_box(message).encode_body(version, &mut out);
                black_box(&out);
            });
        });
        group.bench_function(BenchmarkId::new("decode", v), |b| {
            b.iter(|| black_box(T::decode_body(version, black_box(&body)).unwrap()));
        });
        group.bench_function(BenchmarkId::new("decode_shared", v), |b| {
            b.iter(|| black_box(T::decode_body_shared(version, black_box(&shared)).unwrap()));
        });
    }
    group.finish();
}

fn write_request_one_event(c: &mut Criterion) {
    let request = write_request();
    bench_message(c, "event_write_request_1x20B", &request);

    // The server path: frame decode + body decode of the request.
    let mut group = c.benchmark_group("event_write_request_1x20B_frame");
    for (version, v) in VERSIONS {
        let mut frame = Vec::new();
        eddy_codec::event::encode_request(
            &EventRequest::Write(request.clone()),
            version,
            &mut frame,
            None,
            1 << 20,
        )
        .unwrap();
        group.throughput(Throughput::Bytes(frame.len() as u64));
        group.bench_function(BenchmarkId::new("decode_frame_and_request", v), |b| {
            b.iter(|| {
                let Decoded::Frame(f) =
                    decode_request_frame(black_box(&frame), FrameLimits::default_requests())
                        .unwrap()
                else {
                    unreachable!("complete frame");
                };
                black_box(decode_request(&f, None, FrameLimits::default_requests()).unwrap())
            });
        });
    }
    group.finish();
}

fn read_response_1000_events(c: &mut Criterion) {
    let response = read_response();
    bench_message(c, "event_read_response_1000", &response);

    // The server path: encode the response frame, plain and compressed with the dictionary.
    let mut codec = DictCodec::new(Arc::new(
        Dictionary::builtin(DEFAULT_COMPRESSION_LEVEL).unwrap(),
    ));
    let response = EventResponse::Read(response);
    let mut group = c.benchmark_group("event_read_response_1000_frame");
    for (version, v) in VERSIONS {
        let mut frame = Vec::new();
        let plain = encode_response(&response, version, &mut frame, None, 1 << 30).unwrap();
        let mut compressed = Vec::new();
        let packed = encode_response(
            &response,
            version,
            &mut compressed,
            Some(&mut codec),
            1 << 30,
        )
        .unwrap();
        eprintln!(
            "ReadResponse 1000 events {v}: body {} bytes, compressed with dictionary {} bytes ({:.2}x)",
            plain.uncompressed_length,
            packed.compressed_length,
            f64::from(plain.uncompressed_length) / f64::from(packed.compressed_length),
        );
        group.throughput(Throughput::Bytes(u64::from(plain.uncompressed_length)));
        group.bench_function(BenchmarkId::new("encode_frame", v), |b| {
            let mut out = Vec::with_capacity(frame.len());
            b.iter(|| {
                out.clear();
                black_box(
                    encode_response(black_box(&response), version, &mut out, None, 1 << 30)
                        .unwrap(),
                );
            });
        });
        group.bench_function(BenchmarkId::new("encode_frame_compressed", v), |b| {
            let mut out = Vec::with_capacity(frame.len());
            b.iter(|| {
                out.clear();
                black_box(
                    encode_response(
                        black_box(&response),
                        version,
                        &mut out,
                        Some(&mut codec),
                        1 << 30,
                    )
                    .unwrap(),
                );
            });
        });
    }
    group.finish();
}

criterion_group!(benches, write_request_one_event, read_response_1000_events);
criterion_main!(benches);
