//! Clusters of real `eddy serve` processes on loopback, one test binary: `streams` drives them
//! with the published Iggy SDK (failover, membership, trust), `events` with the published
//! Celeriant client. The helpers are `cluster_support`, `stream_support` and `event_support`.
#![allow(clippy::too_many_lines)] // tests are exempt from the 100-line rule

#[path = "../cluster_support/mod.rs"]
mod cluster_support;
#[path = "../event_support/mod.rs"]
mod event_support;
#[path = "../stream_support/mod.rs"]
mod stream_support;

mod events;
mod streams;
