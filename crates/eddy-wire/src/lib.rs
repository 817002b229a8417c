//! Sans-IO framing of eddy's two wire protocols.
//!
//! - [`stream`]: the Apache Iggy binary protocol (256-byte headers, XXH3 checksums).
//! - [`event`]: the Celeriant protocol (17-byte header, zstd with the cluster dictionary).
//! - [`peer`]: how cluster members name each other in their certificates.
//!
//! Architecture invariant: no I/O, no async runtime; every length is checked against a named
//! limit before anything is allocated, and no input makes a decoder panic.
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

pub mod event;
pub mod peer;
pub mod stream;
