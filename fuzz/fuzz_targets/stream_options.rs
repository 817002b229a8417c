#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| eddy_options::fuzzing::fuzz_options_block(data));
