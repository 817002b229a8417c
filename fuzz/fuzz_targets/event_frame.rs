#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| eddy_wire::event::fuzzing::fuzz_frame(data));
