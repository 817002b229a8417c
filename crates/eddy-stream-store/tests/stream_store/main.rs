//! eddy-stream-store's integration tests, one binary: fault injection against a model, the
//! replicated state machines, and the real-process SIGKILL test of `crash_writer`.

mod crash;
mod faults;
mod replicated;
