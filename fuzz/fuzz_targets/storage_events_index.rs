#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| eddy_storage::events::fuzzing::fuzz_event_index(data));
