//! eddy-codec's integration tests, one binary: golden bytes and round trips of both protocols,
//! cross-checks against the reference crates (Iggy's, Celeriant's 0.2.0 and 0.3.0), and the
//! fuzz corpus replays. A module per file; `event_strategies` holds the shared generators.
#![allow(clippy::too_many_lines)] // tests are exempt from the 100-line rule

mod event_strategies;

mod event_compat;
mod event_compat03;
mod event_fuzz_corpus;
mod event_golden;
mod event_roundtrip;
mod stream_batch;
mod stream_compat;
mod stream_fuzz_corpus;
mod stream_golden;
mod stream_roundtrip;
