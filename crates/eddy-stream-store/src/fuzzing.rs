//! Fuzz entry points of the stream store (the metadata decoders of the `storage_decoders`
//! target, beside the log's own decoders), also replayed over the committed corpus by this
//! crate's tests.

use crate::metadata::{
    decode_op, decode_state, encode_op, encode_state, MetadataOp, MetadataState,
};

/// Decoders of metadata operations (the metadata log's records) and snapshots: no panic, and
/// an operation that decodes re-encodes to the same bytes.
pub fn fuzz_decoders(data: &[u8]) {
    if let Ok(op) = decode_op(data) {
        assert_eq!(encode_op(&op).expect("re-encode"), data);
    }
    let _ = decode_state(data);
}

/// Seed inputs for `fuzz/corpus/storage_decoders/` (the log's seeds are in
/// `eddy_log::fuzzing::decoder_seeds`).
pub fn decoder_seeds() -> Vec<(String, Vec<u8>)> {
    let op = MetadataOp::CreateStream {
        id: 1,
        name: "orders".into(),
        created_at: 5,
        options: vec![2, 3],
    };
    vec![
        ("metadata-op".to_owned(), encode_op(&op).expect("encodes")),
        (
            "metadata-state".to_owned(),
            encode_state(&MetadataState::default()).expect("encodes"),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn replay_decoders_corpus() {
        eddy_log::fuzzing::replay_corpus(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus"),
            "storage_decoders",
            &decoder_seeds(),
            fuzz_decoders,
        );
    }
}
