//! The server's one wall clock: every timestamp the server assigns (metadata `created_at`,
//! message batches, event-store requests, Identify's nonce window) is read here.
//!
//! Storage never reads the clock: timestamps are chosen at the edge and travel inside the
//! operation, so a replayed or replicated operation applies with the time it was given.

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch (0 if the clock is before it).
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Milliseconds since the Unix epoch (0 if the clock is before it): the event protocol's unit.
pub fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_units_read_the_same_clock() {
        let (ms, us) = (now_millis(), now_micros());
        assert!(
            us / 1000 >= ms && us / 1000 - ms < 60_000,
            "{ms} ms vs {us} µs"
        );
    }
}
