//! Replays the committed corpora of the event framing fuzz targets (`fuzz/corpus/event_frame`,
//! `fuzz/corpus/event_decompress`) through the functions the targets call, without
//! libfuzzer. The seeds are real encodings written by eddy-codec's `event_fuzz_corpus` test.

use std::path::PathBuf;

use eddy_wire::event::fuzzing::{fuzz_decompress, fuzz_frame};

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        check(&data);
        count += 1;
    }
    count
}

#[test]
fn frame_corpus_replays() {
    assert!(replay("event_frame", fuzz_frame) >= 20);
}

#[test]
fn decompress_corpus_replays() {
    assert!(replay("event_decompress", fuzz_decompress) >= 5);
}

#[test]
fn fuzz_functions_hold_on_edge_inputs() {
    for data in [&[][..], &[0], &[2, 0, 0, 0], &[0xff; 64]] {
        fuzz_frame(data);
        fuzz_decompress(data);
    }
}
