//! The event (Celeriant) protocol end to end, one test binary: real `eddy serve` processes, the
//! published Celeriant clients (0.2.0 and 0.3.0) and raw V2/V3 frames. One module per area; the
//! helpers are `event_support`.
#![allow(clippy::too_many_lines)] // tests are exempt from the 100-line rule

#[path = "../cluster_support/mod.rs"]
mod cluster_support;
#[path = "../event_support/mod.rs"]
mod event_support;

mod celeriant_compat03;
mod compaction;
mod connection;
mod identify;
mod store;
