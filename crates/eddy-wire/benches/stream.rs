//! Stream protocol header benches: encode and decode of the 256-byte request and reply
//! headers, and framing of a whole request. Each iteration handles one header, so the
//! reported time is ns per header (goal: under 50 ns each).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use eddy_wire::stream::{
    decode, frame::encode_frame, Decoded, Operation, ReplyHeader, RequestHeader,
};

fn request() -> RequestHeader {
    let mut header = RequestHeader::new(Operation::NonReplicated, 38).expect("small body");
    header.client = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
    header.request = 3;
    header.session = 7;
    header.command_code = 100;
    header
}

fn headers(c: &mut Criterion) {
    let mut group = c.benchmark_group("stream_header");
    group.throughput(Throughput::Elements(1));

    let request = request();
    let request_bytes = request.encode();
    group.bench_function("request_encode", |b| {
        b.iter(|| black_box(black_box(&request).encode()));
    });
    group.bench_function("request_decode", |b| {
        b.iter(|| black_box(RequestHeader::decode(black_box(&request_bytes))));
    });

    let reply = ReplyHeader::for_request(&request, 0, 16).expect("small body");
    let reply_bytes = reply.encode();
    group.bench_function("reply_encode", |b| {
        b.iter(|| black_box(black_box(&reply).encode()));
    });
    group.bench_function("reply_decode", |b| {
        b.iter(|| black_box(ReplyHeader::decode(black_box(&reply_bytes))));
    });

    let frame = encode_frame(&request_bytes, &[0u8; 38]).expect("sizes match");
    group.bench_function("frame_decode", |b| {
        b.iter(|| match decode(black_box(&frame)) {
            Ok(Decoded::Complete(frame)) => black_box(frame.len()),
            _ => unreachable!("the frame is complete"),
        });
    });
    group.finish();
}

criterion_group!(benches, headers);
criterion_main!(benches);
