//! The engine logs through `slog`; this drain forwards its records to `tracing`.
//!
//! The engine's `info` records (every vote, every term) are routine for a cluster and go to
//! `debug`; eddy logs role changes itself at `info` (see [`crate::Event`]).

use std::fmt::{self, Write as _};

use slog::{Drain, Key, Level, Never, OwnedKVList, Record, Serializer, KV};

/// A drain that writes each record as one `tracing` event, key-value pairs appended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TracingDrain;

struct Line(String);

impl Serializer for Line {
    fn emit_arguments(&mut self, key: Key, val: &fmt::Arguments<'_>) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl Drain for TracingDrain {
    type Ok = ();
    type Err = Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), Never> {
        let enabled = match record.level() {
            Level::Critical | Level::Error => tracing::enabled!(tracing::Level::ERROR),
            Level::Warning => tracing::enabled!(tracing::Level::WARN),
            Level::Info => tracing::enabled!(tracing::Level::DEBUG),
            Level::Debug | Level::Trace => tracing::enabled!(tracing::Level::TRACE),
        };
        if !enabled {
            return Ok(());
        }
        let mut line = Line(String::new());
        let _ = record.kv().serialize(record, &mut line);
        let _ = values.serialize(record, &mut line);
        let (msg, kv) = (record.msg(), line.0);
        match record.level() {
            Level::Critical | Level::Error => {
                tracing::error!(target: "eddy_consensus::raft", "{msg}{kv}");
            }
            Level::Warning => tracing::warn!(target: "eddy_consensus::raft", "{msg}{kv}"),
            Level::Info => tracing::debug!(target: "eddy_consensus::raft", "{msg}{kv}"),
            Level::Debug | Level::Trace => {
                tracing::trace!(target: "eddy_consensus::raft", "{msg}{kv}");
            }
        }
        Ok(())
    }
}

/// The engine logger of one node.
pub(crate) fn logger(node: u64) -> slog::Logger {
    slog::Logger::root(TracingDrain.fuse(), slog::o!("node" => node))
}
