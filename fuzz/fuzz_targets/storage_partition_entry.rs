#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    eddy_stream_store::replicated::fuzzing::fuzz_partition_entry(data);
});
