#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| eddy_wire::stream::fuzzing::fuzz_frame(data));
