//! Metric names of the two servers eddy replaces, exposed beside eddy's own so dashboards and
//! alerts written for them keep working after a switch (docs/OPERATIONS.md has the mapping).
//!
//! Every alias is computed at scrape time from the same state as eddy's series, so the two
//! never disagree. Series the other servers have and eddy has no equivalent for (replication,
//! S3, cache hit rates, fsync durations) are not invented: they are absent.

use std::fmt::Write as _;

use eddy_wire::event::RequestType;

use super::{write_counter, Protocol};
use crate::stream::stats::EntityCounts;
use crate::Shared;

/// Celeriant's counters of successful and failed requests, by request type.
const CELERIANT_TOTALS: [(&str, &str, RequestType); 4] = [
    (
        "celeriant_writes_total",
        "Successful write operations.",
        RequestType::Write,
    ),
    (
        "celeriant_reads_total",
        "Successful read operations.",
        RequestType::Read,
    ),
    (
        "celeriant_deletes_total",
        "Successful delete operations.",
        RequestType::Delete,
    ),
    (
        "celeriant_trims_total",
        "Successful trim operations.",
        RequestType::TrimStart,
    ),
];

/// Celeriant's error counters.
const CELERIANT_ERRORS: [(&str, &str, RequestType); 2] = [
    (
        "celeriant_write_errors_total",
        "Failed writes.",
        RequestType::Write,
    ),
    (
        "celeriant_read_errors_total",
        "Failed reads.",
        RequestType::Read,
    ),
];

/// Celeriant's latency histograms.
const CELERIANT_LATENCY: [(&str, &str, RequestType); 2] = [
    (
        "celeriant_write_duration_seconds",
        "End-to-end write latency.",
        RequestType::Write,
    ),
    (
        "celeriant_read_duration_seconds",
        "End-to-end read latency.",
        RequestType::Read,
    ),
];

fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
    );
}

/// Appends Celeriant's series.
fn celeriant(shared: &Shared, out: &mut String) {
    let metrics = &shared.metrics;
    let counts = |kind| metrics.command_counts(Protocol::Event, crate::event::metric_index(kind));
    for (name, help, kind) in CELERIANT_TOTALS {
        let (requests, errors) = counts(kind);
        write_counter(out, name, help, requests.saturating_sub(errors));
    }
    for (name, help, kind) in CELERIANT_ERRORS {
        write_counter(out, name, help, counts(kind).1);
    }
    for (name, help, kind) in CELERIANT_LATENCY {
        let index = crate::event::metric_index(kind);
        metrics.render_command_histogram(out, name, help, Protocol::Event, index);
    }
    gauge(
        out,
        "celeriant_client_connections_active",
        "Open client TCP connections.",
        metrics.open_connections(Protocol::Event),
    );
    let subscribers: usize = shared.events.store().stats().subscribers.iter().sum();
    gauge(
        out,
        "celeriant_watch_subscribers_active",
        "Active watch subscriptions.",
        subscribers,
    );
    // A single node accepts every write: it is the leader.
    gauge(out, "celeriant_node_role", "1 = leader, 0 = follower.", 1);
}

/// Appends Iggy's series (its legacy, unprefixed names).
fn iggy(shared: &Shared, http_requests: u64, out: &mut String) {
    let counts = EntityCounts::of(&shared.stream);
    let clients = shared.stream.clients.len();
    write_counter(
        out,
        "http_requests_total",
        "total count of http_requests",
        http_requests,
    );
    let gauges: [(&str, &str, u64); 7] = [
        (
            "streams",
            "total count of streams",
            u64::from(counts.streams),
        ),
        ("topics", "total count of topics", u64::from(counts.topics)),
        (
            "partitions",
            "total count of partitions",
            u64::from(counts.partitions),
        ),
        (
            "segments",
            "total count of segments",
            u64::from(counts.segments),
        ),
        ("messages", "total count of messages", counts.messages),
        ("users", "total count of users", u64::from(counts.users)),
        ("clients", "total count of clients", clients as u64),
    ];
    for (name, help, value) in gauges {
        gauge(out, name, help, value);
    }
}

/// Appends every alias (Celeriant's, then Iggy's) to a `/metrics` scrape.
pub fn sample(shared: &Shared, http_requests: u64, out: &mut String) {
    celeriant(shared, out);
    iggy(shared, http_requests, out);
}

/// The alias names exposed, for documentation checks.
#[cfg(test)]
const NAMES: &[&str] = &[
    "celeriant_writes_total",
    "celeriant_reads_total",
    "celeriant_deletes_total",
    "celeriant_trims_total",
    "celeriant_write_errors_total",
    "celeriant_read_errors_total",
    "celeriant_write_duration_seconds",
    "celeriant_read_duration_seconds",
    "celeriant_client_connections_active",
    "celeriant_watch_subscribers_active",
    "celeriant_node_role",
    "http_requests_total",
    "streams",
    "topics",
    "partitions",
    "segments",
    "messages",
    "users",
    "clients",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alias_is_in_the_operations_mapping_table() {
        let doc = include_str!("../../../../docs/OPERATIONS.md");
        for name in NAMES {
            assert!(
                doc.contains(&format!("`{name}`")),
                "{name} is not documented in docs/OPERATIONS.md"
            );
        }
    }
}
