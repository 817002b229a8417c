//! eddy-event-store's integration tests, one binary: the model-based and history checks, fault
//! injection, compaction, and the real-process SIGKILL test of `events_crash_writer`.

mod events_compaction;
mod events_faults;
mod events_history;
mod events_model;
mod sigkill_events;
