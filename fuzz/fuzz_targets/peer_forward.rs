#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    eddy_server::fuzzing::fuzz_peer_forward(data);
});
