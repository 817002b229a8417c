//! eddy-wire's integration tests, one binary: the committed fuzz corpora of both protocols'
//! framing, replayed through the decoders the fuzz targets call.

mod event_fuzz_corpus;
mod stream_fuzz_corpus;
