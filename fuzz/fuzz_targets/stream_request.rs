#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| eddy_codec::stream::fuzzing::fuzz_request(data));
