//! The stream (Iggy) protocol end to end, one test binary: real `eddy serve` processes, real
//! sockets, the published Iggy SDK and raw frames. One module per area; the helpers are
//! `stream_support`.
#![allow(clippy::too_many_lines)] // tests are exempt from the 100-line rule

#[path = "../stream_support/mod.rs"]
mod stream_support;

mod auth;
mod basics;
mod commands;
mod groups;
mod highlevel;
mod polling;
mod raw;
mod tls;
