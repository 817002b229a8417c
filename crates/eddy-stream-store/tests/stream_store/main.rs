//! eddy-stream-store's integration tests, one binary: fault injection against a model, the
//! replicated state machines, and the real-process SIGKILL test of `crash_writer`.
#![allow(clippy::too_many_lines)] // tests are exempt from the 100-line rule

mod crash;
mod faults;
mod replicated;
