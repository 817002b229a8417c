#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| eddy_codec::event::fuzzing::fuzz_body_v3(data));
