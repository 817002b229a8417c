//! The per-aggregate checks of a write part against the write-ahead state (event protocol
//! §4.3 step 5, in that order: existence, OCC, idempotency), which also plan its version.

use crate::error::{Refusal, Result};
use crate::record::{EncodedEvents, Recreate};
use crate::state::{AggState, Mark};
use crate::types::{AggregateKey, AggregateWrite};

/// A part of a write after validation.
pub(super) struct Planned {
    pub(super) version: u64,
    pub(super) first_event_seq: u64,
    pub(super) recreate: Recreate,
}

/// Checks one write part against the write-ahead state (spec §4.3 step 5, in that order:
/// existence, OCC, idempotency) and plans its version.
pub(super) fn validate_write(
    part: usize,
    w: &AggregateWrite,
    events: &EncodedEvents,
    state: Option<AggState>,
    mark: impl FnOnce(&AggregateKey) -> Result<(Option<Mark>, bool)>,
) -> Result<Planned> {
    let key = w.key;
    let current = state.map_or(0, |s| s.version);
    let plan = match state {
        None if !w.allow_create => return Err(Refusal::NotFound { part, key }.into()),
        None => Planned {
            version: 1,
            first_event_seq: 1,
            recreate: Recreate::No,
        },
        Some(s) if s.deleted && !s.allow_recreate => {
            return Err(Refusal::RecreateNotAllowed { part, key }.into())
        }
        Some(s) if s.deleted && s.allow_continuation => Planned {
            version: s.version + 1,
            first_event_seq: s.max_event_seq + 1,
            recreate: Recreate::Continue,
        },
        Some(s) if s.deleted => Planned {
            version: 1,
            first_event_seq: 1,
            recreate: Recreate::Fresh,
        },
        Some(s) => Planned {
            version: s.version + 1,
            first_event_seq: s.max_event_seq + 1,
            recreate: Recreate::No,
        },
    };
    if let Some(expected) = w.expected_version {
        if expected != current {
            return Err(Refusal::VersionConflict {
                part,
                key,
                expected,
                current,
            }
            .into());
        }
    }
    if w.enforce_client_idempotency && state.is_some() {
        if let (Some(m), in_flight) = mark(&key)? {
            let attempted = events.min_client_seq;
            if attempted <= m.client_seq {
                return Err(if in_flight {
                    Refusal::InFlightDuplicate {
                        part,
                        key,
                        last_client_seq: m.client_seq,
                        attempted_client_seq: attempted,
                    }
                } else {
                    Refusal::Duplicate {
                        part,
                        key,
                        last_client_seq: m.client_seq,
                        attempted_client_seq: attempted,
                        committed_version: m.version,
                    }
                }
                .into());
            }
        }
    }
    if plan
        .first_event_seq
        .checked_add(u64::from(events.count))
        .is_none()
    {
        return Err(Refusal::Limit {
            what: "event sequence",
            value: plan.first_event_seq,
            limit: u64::MAX - u64::from(events.count),
        }
        .into());
    }
    Ok(plan)
}

/// Checks a guard part (no events, an `expected_version`) against the write-ahead state: the
/// aggregate's current version (0 when it never existed) must be the expected one.
pub(super) fn validate_guard(
    part: usize,
    w: &AggregateWrite,
    state: Option<AggState>,
) -> Result<()> {
    let current = state.map_or(0, |s| s.version);
    match w.expected_version {
        Some(expected) if expected != current => Err(Refusal::VersionConflict {
            part,
            key: w.key,
            expected,
            current,
        }
        .into()),
        _ => Ok(()),
    }
}
