//! Every request and reply of eddy's two protocols, their shared encodings and message batches.
//!
//! - [`stream`]: the Iggy command catalog (one file per command), shared encodings, the message batch.
//! - [`event`]: the Celeriant message catalogue in both body encodings (V2 bincode, V3 MessagePack).
//!
//! Architecture invariant: no I/O, no async runtime, no panic on any input.
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

pub mod event;
pub mod stream;
