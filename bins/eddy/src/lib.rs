//! The `eddy` binary's library: the command line ([`cli`]).
//!
//! It owns argument parsing, configuration layering, logging set-up, start-up and exit codes,
//! and dispatches the client subcommands to `eddy_ctl`. It is a library beside the binary so
//! the real-process tests (`tests/`) start the very same entry point without running cargo's
//! binary of another package.

pub mod cli;
