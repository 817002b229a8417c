//! Stream protocol (Iggy) part of this crate.
