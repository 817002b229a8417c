//! The event store's refusals and failures as the protocol's error codes (§5.2), per request
//! type: what `exec` (reads, listings, subscriptions) and `change` (writes, trims, deletes,
//! registrations) answer.
//!
//! A storage failure (as opposed to a refusal) reaches the client as its request type's code
//! with a generic text and a log reference ([`detail`]): paths and OS error texts stay in the
//! server log.

use std::sync::atomic::{AtomicU64, Ordering};

use eddy_codec::event as codec;
use eddy_codec::event::{RoutingField, ServerError};
use eddy_event_store::{EventStoreError, Placement, Refusal, RoutingRule};
use eddy_log::LogError;
use eddy_wire::event::RequestType;

use crate::error_chain;

/// An OCC refusal's first conflict (the 0.2.0 client's JSON names one) and every conflict in
/// wire form (what a 0.3.0 client is told: docs/celeriant-client-revisions.md).
fn conflicts(r: &Refusal) -> (u64, u64, Vec<codec::AggregateConflict>) {
    let all = r.version_conflicts();
    let first = all.first().map_or((0, 0), |c| (c.expected, c.current));
    let wire = all
        .iter()
        .map(|c| codec::AggregateConflict {
            key: codec::AggregateKey {
                org_id: c.key.org_id,
                aggregate_type_id: c.key.aggregate_type_id,
                aggregate_id: c.key.aggregate_id,
            },
            expected: c.expected,
            current: c.current,
        })
        .collect();
    (first.0, first.1, wire)
}

/// Numbers the storage failures logged by [`detail`], so a client's error names its log line.
static FAILURE_REFERENCE: AtomicU64 = AtomicU64::new(1);

/// What a client is told about a storage failure. A refusal (the request's own fault, its text
/// names no file) is described in full; anything else (an I/O error, corruption, a fail-stopped
/// log, a full disk) would hand storage paths and operating-system texts to a client that may
/// not even be identified, so it is logged here with its whole cause chain and the client gets
/// a generic text carrying the reference of that log line.
pub fn detail(e: &EventStoreError) -> String {
    match e {
        EventStoreError::Refused(_) | EventStoreError::Log(LogError::LimitExceeded { .. }) => {
            error_chain(e)
        }
        EventStoreError::Log(LogError::Shutdown) => "the server is shutting down".to_owned(),
        _ => {
            let reference = FAILURE_REFERENCE.fetch_add(1, Ordering::Relaxed);
            tracing::error!(reference, error = %error_chain(e), "event store failure");
            let what = match e {
                EventStoreError::Log(LogError::NoSpace { .. }) => {
                    "no space left on the server's storage"
                }
                EventStoreError::Log(LogError::LogFailed { .. }) => {
                    "the shard's storage failed; it refuses writes until the server restarts"
                }
                EventStoreError::IndexBacklog { .. } => {
                    "the shard's index cannot be written to storage; it refuses writes until it can"
                }
                _ => "internal storage error",
            };
            format!("{what} (server log reference {reference})")
        }
    }
}

/// Whether a refusal is a routing refusal (answered with 9001 or 9002 whatever the request).
fn is_routing(r: &Refusal) -> bool {
    matches!(
        r,
        Refusal::CrossShard { .. }
            | Refusal::NoSuchShard { .. }
            | Refusal::WatchFilterRequired { .. }
    )
}

/// The 9001/9002 answer to a routing refusal of a `kind` request; every one carries
/// `"num_shards":N`.
pub fn routing_refusal(r: &Refusal, kind: RequestType, placement: Placement) -> ServerError {
    let n = u64::from(placement.num_shards());
    match r {
        Refusal::EmptyRequest if kind == RequestType::Delete => ServerError::empty_delete(n),
        Refusal::EmptyRequest => ServerError::empty_write(n),
        Refusal::NoSuchShard { shard, .. } => ServerError::invalid_shard_id(*shard, n),
        Refusal::WatchFilterRequired { rule, .. } => ServerError::watch_filter_required(
            match rule {
                RoutingRule::AggregateId => RoutingField::Aggregate,
                RoutingRule::OrgId => RoutingField::Org,
                RoutingRule::AggregateTypeId => RoutingField::AggregateType,
            },
            n,
        ),
        _ => ServerError::ShardRoutingMultipleShards { num_shards: n },
    }
}

pub fn write_error(e: &EventStoreError, placement: Placement) -> ServerError {
    let r = match e {
        EventStoreError::Refused(r) => r,
        EventStoreError::SchemaLookup { source } => {
            return ServerError::WriteCacheAggregateClientError {
                detail: Some(detail(source)),
            }
        }
        _ => return ServerError::WriteFsyncError { detail: detail(e) },
    };
    match r {
        r if is_routing(r) || *r == Refusal::EmptyRequest => {
            routing_refusal(r, RequestType::Write, placement)
        }
        Refusal::EmptyEvents { .. } => ServerError::WriteEmptyEventsList,
        // 0.2.0 has no 2014: the connection answers it as 2000 on versions 2/3.
        Refusal::MalformedGuard { .. } => ServerError::WriteMalformedGuardEntry,
        Refusal::ZeroEventType { client_seq, .. } => ServerError::WriteZeroEventType {
            client_seq: *client_seq,
        },
        Refusal::SchemaValidationFailed {
            event_type_major,
            event_type_minor,
            client_seq,
            validation_error,
        } => ServerError::WriteSchemaValidationFailed {
            event_type_major: *event_type_major,
            event_type_minor: *event_type_minor,
            client_seq: *client_seq,
            validation_error: validation_error.clone(),
        },
        Refusal::SchemaCompilationFailed {
            event_type_major,
            event_type_minor,
            client_seq,
            compilation_error,
        } => ServerError::WriteSchemaCompilationFailed {
            event_type_major: *event_type_major,
            event_type_minor: *event_type_minor,
            client_seq: *client_seq,
            compilation_error: compilation_error.clone(),
        },
        Refusal::NotFound { .. } => ServerError::WriteAggregateNotExists,
        Refusal::RecreateNotAllowed { .. } | Refusal::Deleted { .. } => {
            ServerError::WriteAggregateRecreateNotAllowed
        }
        r @ (Refusal::VersionConflict { .. } | Refusal::VersionConflicts { .. }) => {
            let (expected_version, current_aggregate_version, conflicts) = conflicts(r);
            ServerError::WriteOptimisticConcurrencyViolation {
                expected_version,
                current_aggregate_version,
                conflicts,
            }
        }
        Refusal::Duplicate {
            last_client_seq,
            attempted_client_seq,
            ..
        } => ServerError::WriteClientIdempotencyViolation {
            last_client_seq: *last_client_seq,
            attempted_client_seq: *attempted_client_seq,
        },
        Refusal::InFlightDuplicate {
            last_client_seq,
            attempted_client_seq,
            ..
        } => ServerError::WriteInflightDuplicate {
            last_client_seq: *last_client_seq,
            attempted_client_seq: *attempted_client_seq,
        },
        other => ServerError::WriteFailedToSerialiseDatablocks {
            detail: other.to_string(),
        },
    }
}

pub fn read_error(e: &EventStoreError, placement: Placement) -> ServerError {
    match e.refusal() {
        Some(Refusal::NotFound { .. } | Refusal::Deleted { .. }) => {
            ServerError::ReadAggregateNotExists
        }
        Some(Refusal::Trimmed {
            requested,
            minimum_available,
        }) => ServerError::ReadUnavailableVersion {
            requested: *requested,
            minimum_available: *minimum_available,
        },
        Some(r) if is_routing(r) => routing_refusal(r, RequestType::Read, placement),
        _ => ServerError::ReadFetchDatablocks {
            detail: Some(detail(e)),
        },
    }
}

pub fn details_error(e: &EventStoreError) -> ServerError {
    match e.refusal() {
        Some(Refusal::NotFound { .. }) => ServerError::ExistsAggregateNotExists,
        _ => ServerError::ExistsMetablockReadError { detail: detail(e) },
    }
}

pub fn trim_error(e: &EventStoreError) -> ServerError {
    match e.refusal() {
        Some(Refusal::NotFound { .. } | Refusal::Deleted { .. }) => {
            ServerError::TrimAggregateNotExists
        }
        Some(Refusal::TrimOutOfRange {
            requested,
            max_aggregate_version,
        }) => ServerError::TrimIndexOutOfRange {
            requested: *requested,
            max_aggregate_version: *max_aggregate_version,
        },
        _ => ServerError::TrimFsyncError { detail: detail(e) },
    }
}

pub fn delete_error(e: &EventStoreError, placement: Placement) -> ServerError {
    match e.refusal() {
        Some(Refusal::NotFound { .. } | Refusal::Deleted { .. }) => {
            ServerError::DeleteAggregateNotExists
        }
        Some(r @ (Refusal::VersionConflict { .. } | Refusal::VersionConflicts { .. })) => {
            let (expected_version, current_aggregate_version, conflicts) = conflicts(r);
            ServerError::DeleteOptimisticConcurrencyViolation {
                expected_version,
                current_aggregate_version,
                conflicts,
            }
        }
        Some(r) if is_routing(r) || *r == Refusal::EmptyRequest => {
            routing_refusal(r, RequestType::Delete, placement)
        }
        _ => ServerError::DeleteFsyncError { detail: detail(e) },
    }
}

pub fn list_error(kind: RequestType, e: &EventStoreError, placement: Placement) -> ServerError {
    if let Some(r) = e.refusal().filter(|r| is_routing(r)) {
        return routing_refusal(r, kind, placement);
    }
    let detail = detail(e);
    match kind {
        RequestType::ListOrgs => ServerError::ListOrgsDiskRead { detail },
        RequestType::ListAggregateTypes => ServerError::ListAggregateTypesDiskRead { detail },
        _ => ServerError::ListAggregatesDiskRead { detail },
    }
}

pub fn register_error(e: &EventStoreError, schema_type: u8) -> ServerError {
    match e.refusal() {
        Some(Refusal::SchemaTypeUnsupported { schema_type }) => {
            ServerError::RegisterSchemaUnsupportedType {
                schema_type: *schema_type,
            }
        }
        Some(Refusal::SchemaInvalid {
            schema_type,
            parse_error,
        }) => ServerError::RegisterSchemaInvalid {
            schema_type: *schema_type,
            parse_error: parse_error.clone(),
        },
        Some(Refusal::SchemaExists {
            event_type_major,
            event_type_minor,
        }) => ServerError::RegisterSchemaAlreadyExists {
            event_type_major: *event_type_major,
            event_type_minor: *event_type_minor,
        },
        Some(Refusal::Limit { .. }) => ServerError::RegisterSchemaInvalid {
            schema_type,
            parse_error: detail(e),
        },
        _ => ServerError::RegisterSchemaFsyncError { detail: detail(e) },
    }
}

/// The answer to a refused watch subscription (after routing).
pub fn subscribe_error(e: &EventStoreError) -> ServerError {
    match e.refusal() {
        Some(Refusal::TooManySubscribers { active, max }) => ServerError::WatchTooManySubscribers {
            active_subscribers: *active as u64,
            max_subscribers: *max as u64,
        },
        _ => ServerError::WatchReadOther { detail: detail(e) },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use eddy_codec::event::{ErrorCode, EventResponse};
    use eddy_event_store as st;

    use super::*;

    #[test]
    fn list_shard_ids_at_or_above_n_end_discovery() {
        let p = Placement::new(2, RoutingRule::AggregateId, false);
        for bad in [2, u64::from(u32::MAX) + 5, u64::MAX] {
            let refused = EventStoreError::Refused(p.shard(bad).unwrap_err());
            for kind in [
                RequestType::ListOrgs,
                RequestType::ListAggregateTypes,
                RequestType::ListAggregates,
            ] {
                let e = list_error(kind, &refused, p);
                assert_eq!(e.code(), ErrorCode::ShardRoutingIncompatibleFilters);
                assert!(e.message().contains("\"num_shards\":2"), "{}", e.message());
            }
        }
    }

    #[test]
    fn a_refusal_maps_to_its_code_and_a_failure_to_the_request_s_fsync_error() {
        let p = Placement::new(1, RoutingRule::AggregateId, false);
        let conflict = EventStoreError::Refused(Refusal::VersionConflict {
            part: 0,
            key: st::AggregateKey::new(1, 2, 3),
            expected: 1,
            current: 2,
        });
        assert_eq!(
            write_error(&conflict, p).code(),
            ErrorCode::WriteOptimisticConcurrencyViolation
        );
        assert_eq!(
            delete_error(&conflict, p).code(),
            ErrorCode::DeleteOptimisticConcurrencyViolation
        );
        // Several conflicts: the JSON (0.2.0) names the first, the typed list (0.3.0) all.
        let mismatch = |part, id, expected, current| st::VersionMismatch {
            part,
            key: st::AggregateKey::new(1, 2, id),
            expected,
            current,
        };
        let both = EventStoreError::Refused(Refusal::VersionConflicts {
            conflicts: vec![mismatch(0, 3, 1, 2), mismatch(2, 9, 0, 4)],
        });
        for e in [write_error(&both, p), delete_error(&both, p)] {
            assert_eq!(
                e.message(),
                r#"{"expected_version":1,"current_aggregate_version":2}"#
            );
            let Some(Ok(typed)) = e.conflict_answer(None, 1 << 20) else {
                panic!("{e:?} has no typed answer")
            };
            let (EventResponse::WriteConflict(codec::WriteConflictResponse { conflicts, .. })
            | EventResponse::DeleteConflict(codec::DeleteConflictResponse {
                conflicts, ..
            })) = typed
            else {
                panic!("{typed:?}")
            };
            let got: Vec<_> = conflicts
                .iter()
                .map(|c| (c.key.aggregate_id, c.expected, c.current))
                .collect();
            assert_eq!(got, vec![(3, 1, 2), (9, 0, 4)]);
        }
        let malformed = EventStoreError::Refused(Refusal::MalformedGuard { part: 0 });
        assert_eq!(
            write_error(&malformed, p).code(),
            ErrorCode::WriteMalformedGuardEntry
        );
        let failed = EventStoreError::Log(eddy_log::LogError::Shutdown);
        assert_eq!(write_error(&failed, p).code(), ErrorCode::WriteFsyncError);
        assert_eq!(trim_error(&failed).code(), ErrorCode::TrimFsyncError);
        let empty = EventStoreError::Refused(Refusal::EmptyRequest);
        assert!(write_error(&empty, p)
            .message()
            .contains("at least one write"));
        assert!(delete_error(&empty, p)
            .message()
            .contains("at least one delete"));
    }

    #[test]
    fn storage_failures_say_what_kind_without_paths() {
        let p = Placement::new(1, RoutingRule::AggregateId, false);
        let os = || std::io::Error::from_raw_os_error(28);
        let full = EventStoreError::Log(LogError::NoSpace {
            path: "events/shard-000".into(),
            source: Arc::new(os()),
        });
        let backlog = EventStoreError::IndexBacklog {
            shard: 0,
            source: Arc::new(EventStoreError::Log(LogError::io(
                eddy_log::IoOp::Open,
                "events/index-000/run-1.eix.tmp",
                os(),
            ))),
        };
        for (e, says) in [
            (full, "no space left"),
            (backlog, "index cannot be written"),
        ] {
            let answer = write_error(&e, p);
            assert_eq!(answer.code(), ErrorCode::WriteFsyncError);
            let text = answer.message();
            assert!(text.contains(says), "{text}");
            assert!(text.contains("server log reference"), "{text}");
            assert!(
                !text.contains("events/"),
                "no path reaches the client: {text}"
            );
        }
    }
}
