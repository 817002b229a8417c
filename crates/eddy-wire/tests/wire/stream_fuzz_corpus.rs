//! Replays the committed `fuzz/corpus/stream_frame` seeds through the fuzz entry point, plus
//! every prefix of each seed (framing must answer "need more" or a clean error).

use std::path::PathBuf;

use eddy_wire::stream::{decode, Decoded};

#[test]
fn replay_stream_frame() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/stream_frame");
    let mut complete = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus present") {
        let seed = std::fs::read(entry.expect("entry").path()).expect("readable seed");
        eddy_wire::stream::fuzzing::fuzz_frame(&seed);
        for cut in 0..seed.len() {
            assert!(matches!(
                decode(&seed[..cut]),
                Ok(Decoded::Incomplete { .. }) | Err(_)
            ));
        }
        complete += usize::from(matches!(decode(&seed), Ok(Decoded::Complete(_))));
    }
    assert!(complete >= 4, "the frame seeds are whole frames");
}
