//! Fuzz entry points of the event framing layer (not part of the supported API).
//!
//! Each `fuzz_*` function is the whole body of one target under `fuzz/fuzz_targets/` and
//! is replayed over the committed corpus by this crate's `cargo test`
//! (`tests/wire/event_fuzz_corpus.rs`), so it must hold its own assertions.

use std::cell::RefCell;
use std::sync::Arc;

use super::{
    decode_response_frame, Decoded, DictCodec, Dictionary, FrameLimits, RequestFrameDecoder,
    DEFAULT_COMPRESSION_LEVEL, HEADER_LEN,
};

/// Limit used by the fuzz targets (small, so the length checks are exercised).
pub const FUZZ_MAX_BODY_LEN: u64 = 64 * 1024;

thread_local! {
    static CODEC: RefCell<Option<DictCodec>> = const { RefCell::new(None) };
}

fn with_codec<R>(f: impl FnOnce(&mut DictCodec) -> R) -> R {
    CODEC.with(|cell| {
        let mut slot = cell.borrow_mut();
        let codec = slot.get_or_insert_with(|| {
            let dict = Dictionary::builtin(DEFAULT_COMPRESSION_LEVEL)
                .expect("the built-in dictionary is valid");
            DictCodec::new(Arc::new(dict))
        });
        f(codec)
    })
}

/// Target `event_frame`: runs the connection decoder over `data` frame after frame, and the
/// response decoder on the same bytes; decompresses compressed bodies.
pub fn fuzz_frame(data: &[u8]) {
    let limits = FrameLimits::new(FUZZ_MAX_BODY_LEN);
    let mut decoder = RequestFrameDecoder::new(limits);
    let mut rest = data;
    loop {
        match decoder.decode(rest) {
            Ok(Decoded::NeedMore { needed }) => {
                assert!(needed > 0);
                break;
            }
            Ok(Decoded::Frame(frame)) => {
                assert!(frame.len() >= HEADER_LEN && frame.len() <= rest.len());
                assert_eq!(frame.body.len(), frame.header.compressed_length as usize);
                let body = with_codec(|codec| {
                    frame
                        .decompressed_body(Some(codec), limits)
                        .map(|b| b.len())
                });
                if let Ok(len) = body {
                    assert_eq!(len, frame.header.uncompressed_length as usize);
                }
                rest = &rest[frame.len()..];
            }
            Err(_) => break,
        }
    }
    if let Ok(Decoded::Frame(frame)) = decode_response_frame(data, limits) {
        assert!(frame.len() <= data.len());
    }
}

/// Target `event_decompress`: the first four bytes (LE) are the claimed uncompressed length,
/// the rest is the compressed body. Any success must produce exactly the claimed length.
pub fn fuzz_decompress(data: &[u8]) {
    let Some((claimed, body)) = data.split_first_chunk::<4>() else {
        return;
    };
    let claimed = u32::from_le_bytes(*claimed);
    let result = with_codec(|codec| codec.decompress(body, claimed, FUZZ_MAX_BODY_LEN));
    if let Ok(out) = result {
        assert_eq!(out.len(), claimed as usize);
        assert!(u64::from(claimed) <= FUZZ_MAX_BODY_LEN);
    }
}
