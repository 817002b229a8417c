#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    eddy_log::fuzzing::fuzz_decoders(data);
    eddy_stream_store::fuzzing::fuzz_decoders(data);
});
