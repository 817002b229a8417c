//! Cross-checks against the 0.3.0 reference crates (renamed `*_03`, built beside 0.2.0):
//! versions 4/5 carry the 2/3 bodies, the typed conflict responses (13, 14) encode as
//! 0.3.0 does byte for byte, and the three codes 0.3.0 added have 0.3.0's numbers.

use celeriant_msg_03::process_client_responses::ClientResponse as Their03;
use celeriant_msg_03::response::responses as tresp03;
use celeriant_wal_03::aggregate_key::AggregateKey as TKey03;
use celeriant_wire_03::network::wire_header::{
    serialise_heap_versioned, PROTOCOL_VERSION_V4, PROTOCOL_VERSION_V5,
};
use eddy_codec::event as ours;
use eddy_codec::event::{ErrorCode, EventResponse};
use eddy_wire::event::{ProtocolVersion, ResponseType};

fn conflicts() -> Vec<ours::AggregateConflict> {
    let key = |o, t, a| ours::AggregateKey {
        org_id: o,
        aggregate_type_id: t,
        aggregate_id: a,
    };
    vec![
        ours::AggregateConflict {
            key: key(1, 2, 3),
            expected: 4,
            current: 7,
        },
        ours::AggregateConflict {
            key: key(u128::MAX, u128::MAX, u128::MAX),
            expected: u64::MAX,
            current: u64::MAX - 1,
        },
        ours::AggregateConflict {
            key: key(255, 256, 0),
            expected: 0,
            current: 128,
        },
    ]
}

fn theirs(c: &[ours::AggregateConflict]) -> Vec<tresp03::AggregateConflict> {
    c.iter()
        .map(|c| tresp03::AggregateConflict {
            key: TKey03::new(c.key.org_id, c.key.aggregate_type_id, c.key.aggregate_id),
            expected: c.expected,
            current: c.current,
        })
        .collect()
}

fn back(c: &[tresp03::AggregateConflict]) -> Vec<ours::AggregateConflict> {
    c.iter()
        .map(|c| ours::AggregateConflict {
            key: ours::AggregateKey {
                org_id: c.key.org_id,
                aggregate_type_id: c.key.aggregate_type_id,
                aggregate_id: c.key.aggregate_id,
            },
            expected: c.expected,
            current: c.current,
        })
        .collect()
}

#[test]
fn versions_4_and_5_are_the_0_3_0_constants() {
    assert_eq!(ProtocolVersion::V4.as_u32(), PROTOCOL_VERSION_V4);
    assert_eq!(ProtocolVersion::V5.as_u32(), PROTOCOL_VERSION_V5);
}

#[test]
fn conflict_responses_match_0_3_0_byte_for_byte() {
    for (version, v) in [
        (ProtocolVersion::V4, PROTOCOL_VERSION_V4),
        (ProtocolVersion::V5, PROTOCOL_VERSION_V5),
    ] {
        for correlation_id in [None, Some(0), Some(u128::MAX)] {
            for n in [0, 1, 3] {
                let ours_c: Vec<_> = conflicts().into_iter().take(n).collect();
                let write = EventResponse::WriteConflict(ours::WriteConflictResponse {
                    correlation_id,
                    conflicts: ours_c.clone(),
                });
                let delete = EventResponse::DeleteConflict(ours::DeleteConflictResponse {
                    correlation_id,
                    conflicts: ours_c.clone(),
                });
                let their_write = serialise_heap_versioned(
                    &tresp03::WriteConflictResponse {
                        correlation_id,
                        conflicts: theirs(&ours_c),
                    },
                    v,
                )
                .unwrap();
                let their_delete = serialise_heap_versioned(
                    &tresp03::DeleteConflictResponse {
                        correlation_id,
                        conflicts: theirs(&ours_c),
                    },
                    v,
                )
                .unwrap();
                for (ours_r, their_body, id) in
                    [(&write, &their_write, 13), (&delete, &their_delete, 14)]
                {
                    let mut body = Vec::new();
                    ours_r.encode_body(version, &mut body);
                    assert_eq!(&body, their_body, "v{v} type {id} n={n}");
                    assert!(
                        body.len() as u64 <= ours::conflict_response_body_bound(n as u64),
                        "v{v} n={n}: {} bytes",
                        body.len()
                    );
                    assert_eq!(ours_r.response_type().id(), id);
                    // Their decoder reads ours; ours reads theirs.
                    let decoded = Their03::deserialize_body(id, &body, v).unwrap();
                    assert_eq!(decoded.correlation_id(), correlation_id);
                    let got = match &decoded {
                        Their03::WriteConflict(r) => back(&r.conflicts),
                        Their03::DeleteConflict(r) => back(&r.conflicts),
                        other => panic!("type {id} decoded as {other:?}"),
                    };
                    assert_eq!(got, ours_c);
                    let kind = ResponseType::from_id(id).unwrap();
                    assert_eq!(
                        &EventResponse::decode_body(version, kind, their_body).unwrap(),
                        ours_r
                    );
                }
            }
        }
    }
}

#[test]
fn the_codes_0_3_0_added_have_its_numbers() {
    use celeriant_msg_03::error_codes as c;
    for (ours_c, theirs_c) in [
        (
            ErrorCode::WriteMalformedGuardEntry,
            c::WRITE_MALFORMED_GUARD_ENTRY,
        ),
        (
            ErrorCode::WriteConflictResponseTooLarge,
            c::WRITE_CONFLICT_RESPONSE_TOO_LARGE,
        ),
        (
            ErrorCode::DeleteConflictResponseTooLarge,
            c::DELETE_CONFLICT_RESPONSE_TOO_LARGE,
        ),
        (
            ErrorCode::WriteOptimisticConcurrencyViolation,
            c::WRITE_OPTIMISTIC_CONCURRENCY_VIOLATION,
        ),
        (
            ErrorCode::DeleteOptimisticConcurrencyViolation,
            c::DELETE_OPTIMISTIC_CONCURRENCY_VIOLATION,
        ),
    ] {
        assert_eq!(ours_c.code(), theirs_c, "{}", ours_c.name());
    }
}

#[test]
fn the_conflict_reservation_is_0_3_0_s() {
    for n in [0usize, 1, 2, 1000] {
        assert_eq!(
            tresp03::conflict_response_reservation(n),
            Some(ours::conflict_response_body_bound(n as u64))
        );
    }
}
