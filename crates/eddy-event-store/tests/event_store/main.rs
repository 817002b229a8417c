//! eddy-event-store's integration tests, one binary: the model-based and history checks, fault
//! injection, compaction, and the real-process SIGKILL test of `events_crash_writer`.
#![allow(clippy::too_many_lines)] // tests are exempt from the 100-line rule

mod events_compaction;
mod events_faults;
mod events_history;
mod events_model;
mod sigkill_events;
