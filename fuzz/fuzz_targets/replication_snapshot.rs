#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    eddy_event_store::fuzzing::fuzz_snapshot_transfer(data);
});
