#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| eddy_log::fuzzing::fuzz_log_recovery(data));
