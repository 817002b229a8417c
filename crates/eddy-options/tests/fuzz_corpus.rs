//! Replays the committed `fuzz/corpus/stream_options` seeds through the fuzz entry point.

use std::path::PathBuf;

#[test]
fn replay_stream_options() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/stream_options");
    let mut parsed = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus present") {
        let seed = std::fs::read(entry.expect("entry").path()).expect("readable seed");
        eddy_options::fuzzing::fuzz_options_block(&seed);
        parsed += usize::from(eddy_options::OptionsBlock::from_slice(&seed).is_ok());
    }
    assert!(parsed >= 4, "the option seeds are valid blocks");
}
