//! Commands: their codec (round trip, every malformed input refused) and their application on
//! two members (same commands, same order: the same records, chain and answers).

use std::sync::Arc;

use bytes::Bytes;
use eddy_log::MemBackend;
use proptest::prelude::*;

use super::*;
use crate::store::EventStoreConfig;
use crate::types::{AggregateKey, NewEvent, ReadQuery};

fn cfg() -> EventStoreConfig {
    EventStoreConfig {
        num_shards: 2,
        pool_threads: 1,
        segment_size: 4096,
        index_interval: 256,
        memtable_bytes: 4096,
        ..EventStoreConfig::default()
    }
}

const K: AggregateKey = AggregateKey::new(1, 2, 4); // shard 0 of 2
const K_ODD: AggregateKey = AggregateKey::new(1, 2, 5); // shard 1 of 2

fn ev(client_seq: u64, value: &str) -> NewEvent {
    NewEvent {
        client_seq,
        event_id: None,
        event_timestamp: 7,
        event_type_major: 1,
        event_type_minor: 0,
        value: Bytes::copy_from_slice(value.as_bytes()),
        iv: None,
    }
}

fn write_req(key: AggregateKey, seq: u64, expected: Option<u64>, now: u64) -> WriteRequest {
    WriteRequest {
        client_id: 3,
        user_id: Some(4),
        writes: vec![AggregateWrite {
            key,
            events: vec![ev(
                seq,
                "payload of an event that compresses well well well well",
            )],
            allow_create: true,
            expected_version: expected,
            enforce_client_idempotency: true,
        }],
        now,
    }
}

fn any_key() -> impl Strategy<Value = AggregateKey> {
    (any::<u128>(), any::<u128>(), any::<u128>()).prop_map(|(a, b, c)| AggregateKey::new(a, b, c))
}

fn any_command() -> impl Strategy<Value = Command> {
    let heading = || (any::<u128>(), any::<Option<u128>>(), any::<u64>());
    let write_part = (
        any_key(),
        any::<bool>(),
        any::<Option<u64>>(),
        any::<bool>(),
        1u32..100,
        any::<(u64, u64, u64, u64)>(),
        0u8..3,
        0u32..200,
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(
            |(key, allow_create, expected_version, idem, count, seqs, comp, extra, stored)| {
                // Any summary the store writes: ranges in order, a raw length that holds the
                // events' headers, stored bytes equal to it when uncompressed.
                let raw_len = count * record::EVENT_HEADER_LEN as u32 + extra;
                let compression = record::Compression::from_code(comp).unwrap();
                let stored = if compression == record::Compression::None {
                    vec![0xab; raw_len as usize]
                } else {
                    stored
                };
                (
                    AggregateWrite {
                        key,
                        events: Vec::new(),
                        allow_create,
                        expected_version,
                        enforce_client_idempotency: idem,
                    },
                    EncodedEvents {
                        count,
                        min_client_seq: seqs.0.min(seqs.1),
                        max_client_seq: seqs.0.max(seqs.1),
                        min_event_timestamp: seqs.2.min(seqs.3),
                        max_event_timestamp: seqs.2.max(seqs.3),
                        compression,
                        raw_len,
                        stored: Bytes::from(stored),
                    },
                )
            },
        );
    let delete_part = (
        any_key(),
        any::<bool>(),
        any::<bool>(),
        any::<Option<u64>>(),
    )
        .prop_map(
            |(key, allow_recreate, allow_sequence_continuation, expected_version)| {
                AggregateDelete {
                    key,
                    allow_recreate,
                    allow_sequence_continuation,
                    expected_version,
                }
            },
        );
    prop_oneof![
        (heading(), proptest::collection::vec(write_part, 1..4)).prop_map(
            |((client_id, user_id, now), parts)| Command::Write {
                client_id,
                user_id,
                now,
                parts,
            }
        ),
        (heading(), any_key(), any::<u64>()).prop_map(|((client_id, user_id, now), key, v)| {
            Command::Trim(TrimRequest {
                key,
                keep_from_version: v,
                client_id,
                user_id,
                now,
            })
        }),
        (heading(), proptest::collection::vec(delete_part, 1..4)).prop_map(
            |((client_id, user_id, now), deletes)| Command::Delete(DeleteRequest {
                client_id,
                user_id,
                deletes,
                now,
            })
        ),
        (
            heading(),
            any::<(u128, u128, u64, u64)>(),
            0u8..3,
            ".{0,40}"
        )
            .prop_map(|((client_id, user_id, now), k, schema_type, schema)| {
                Command::RegisterSchema(SchemaRegistration {
                    key: SchemaKey {
                        org_id: k.0,
                        aggregate_type_id: k.1,
                        event_type_major: k.2,
                        event_type_minor: k.3,
                    },
                    schema_type,
                    schema,
                    client_id,
                    user_id,
                    now,
                })
            }),
    ]
}

proptest! {
    #[test]
    fn commands_round_trip(command in any_command()) {
        let bytes = command.encode();
        prop_assert_eq!(Command::decode(&bytes).unwrap(), command);
    }

    /// Every strict prefix and every single-byte change of a valid command either decodes
    /// to something else or is refused; none panics.
    #[test]
    fn damaged_commands_never_panic(command in any_command(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let bytes = command.encode();
        let cut = at.index(bytes.len());
        prop_assert!(Command::decode(&bytes.slice(..cut)).is_err());
        let mut changed = bytes.to_vec();
        changed[cut] = byte;
        let _ = Command::decode(&Bytes::from(changed));
    }
}

/// Two members applying the same entries end with the same logs, chains and answers, and
/// each shard knows the last entry it holds.
/// A command's events summary gets the checks a record's gets (one decoder for both): one
/// whose ranges are out of order, or whose uncompressed bytes are not its raw length, is
/// refused before any member could store it.
#[test]
fn a_command_with_an_inconsistent_summary_is_refused() {
    let part = |events: EncodedEvents| Command::Write {
        client_id: 1,
        user_id: None,
        now: 5,
        parts: vec![(
            AggregateWrite {
                key: AggregateKey::new(1, 2, 3),
                events: Vec::new(),
                allow_create: true,
                expected_version: None,
                enforce_client_idempotency: false,
            },
            events,
        )],
    };
    let raw = record::EVENT_HEADER_LEN as u32;
    let good = EncodedEvents {
        count: 1,
        min_client_seq: 1,
        max_client_seq: 1,
        min_event_timestamp: 10,
        max_event_timestamp: 10,
        compression: record::Compression::None,
        raw_len: raw,
        stored: Bytes::from(vec![0; raw as usize]),
    };
    assert!(Command::decode(&part(good.clone()).encode()).is_ok());
    for bad in [
        EncodedEvents {
            min_client_seq: 2,
            ..good.clone()
        },
        EncodedEvents {
            min_event_timestamp: 11,
            ..good.clone()
        },
        EncodedEvents {
            raw_len: raw - 1,
            stored: Bytes::from(vec![0; raw as usize - 1]),
            ..good.clone()
        },
        EncodedEvents {
            stored: Bytes::from(vec![0; raw as usize + 1]),
            ..good.clone()
        },
        EncodedEvents {
            count: 0,
            ..good.clone()
        },
    ] {
        assert!(
            Command::decode(&part(bad.clone()).encode()).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn members_applying_the_same_commands_agree() {
    let disks = [MemBackend::new(), MemBackend::new()];
    let stores: Vec<EventStore> = disks
        .iter()
        .map(|d| EventStore::open(Arc::new(d.clone()), cfg()).unwrap().0)
        .collect();
    let leader = &stores[0];
    // What the leader proposes: creates, an OCC conflict, an idempotent retry, a trim, a
    // delete, a write on the other shard.
    let mut entries: Vec<(u32, Command)> = vec![
        leader.prepare_write(write_req(K, 1, Some(0), 100)).unwrap(),
        leader.prepare_write(write_req(K, 2, Some(0), 101)).unwrap(), // conflict
        leader.prepare_write(write_req(K, 2, Some(1), 99)).unwrap(),
        leader.prepare_write(write_req(K, 2, None, 102)).unwrap(), // duplicate client_seq
        leader
            .prepare_write(write_req(K_ODD, 1, None, 103))
            .unwrap(),
    ];
    entries.push(leader.prepare_trim(TrimRequest {
        key: K,
        keep_from_version: 2,
        client_id: 3,
        user_id: None,
        now: 104,
    }));
    entries.push(
        leader
            .prepare_delete(DeleteRequest {
                client_id: 3,
                user_id: None,
                deletes: vec![AggregateDelete {
                    key: K_ODD,
                    allow_recreate: true,
                    allow_sequence_continuation: false,
                    expected_version: Some(1),
                }],
                now: 105,
            })
            .unwrap(),
    );
    let mut answers: Vec<Vec<String>> = vec![Vec::new(), Vec::new()];
    for (member, store) in stores.iter().enumerate() {
        for (i, (shard, command)) in entries.iter().enumerate() {
            // Through the bytes, as a follower gets them.
            let command = Command::decode(&command.encode()).unwrap();
            let index = 10 + i as u64;
            let answer = store.apply(*shard, index, command).wait();
            answers[member].push(match answer {
                Ok(a) => format!("{a:?}"),
                Err(EventStoreError::Refused(r)) => format!("refused {r:?}"),
                Err(e) => panic!("member {member}: {e}"),
            });
        }
    }
    assert_eq!(answers[0], answers[1]);
    assert!(
        answers[0][1].starts_with("refused VersionConflict"),
        "{:?}",
        answers[0]
    );
    assert!(
        answers[0][3].starts_with("refused Duplicate"),
        "{:?}",
        answers[0]
    );
    for shard in 0..2 {
        assert_eq!(
            stores[0].chain_tip(shard).unwrap(),
            stores[1].chain_tip(shard).unwrap()
        );
    }
    // Shard 0's last record is the trim (entry 15); shard 1's the delete (16).
    assert_eq!(stores[0].replicated_through(0).unwrap(), 15);
    assert_eq!(stores[1].replicated_through(1).unwrap(), 16);
    let from_floor = ReadQuery {
        from_version: 2,
        ..ReadQuery::default()
    };
    let page = stores[1].read(&K, &from_floor).unwrap();
    assert_eq!(page.batches.len(), 1, "trimmed to version 2");
    assert_eq!(page.batches[0].version, 2);
    // The server timestamps are the proposer's clock, kept monotonic: the same everywhere.
    assert_eq!(page.batches[0].server_timestamp, 100);

    // After a restart each shard still knows where it stands.
    drop(stores);
    let reopened = EventStore::open(Arc::new(disks[1].clone()), cfg())
        .unwrap()
        .0;
    assert_eq!(reopened.replicated_through(0).unwrap(), 15);
    assert_eq!(reopened.replicated_through(1).unwrap(), 16);
    reopened.verify_chain(0).unwrap();
}

/// A follower's apply queues the record and its log commits it a moment later: a read in
/// between does not see it. The visibility barrier a cluster member's read waits on resolves
/// only once everything queued is visible (at once when nothing is in flight), and fails when
/// the log refuses the records it waited for.
#[test]
fn the_visibility_barrier_waits_for_applied_records_to_be_readable() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    let disk = MemBackend::new();
    let store = EventStore::open(Arc::new(disk.clone()), cfg()).unwrap().0;
    store
        .visible_barrier(0)
        .wait_timeout(Duration::ZERO)
        .expect("nothing queued: visible at once")
        .unwrap();
    assert!(!store.shard_dropped_writes(0));

    // Hold shard 0's log writer at its next append.
    let held = Arc::new(AtomicBool::new(true));
    let gate = Arc::clone(&held);
    disk.inject_faults(move |call, path| {
        if call == eddy_log::FsCall::Append && path.to_string_lossy().contains("shard-000") {
            while gate.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        None
    });
    let (shard, command) = store.prepare_write(write_req(K, 1, None, 100)).unwrap();
    assert_eq!(shard, 0);
    let applied = store.apply(0, 7, command);
    let barrier = store.visible_barrier(0);
    let barrier = barrier
        .wait_timeout(Duration::from_millis(100))
        .expect_err("the record is queued, not committed: the barrier waits");
    assert!(
        store.read(&K, &ReadQuery::default()).is_err(),
        "queued, not visible: the aggregate does not exist yet"
    );
    // Shard 1 has nothing in flight.
    store
        .visible_barrier(1)
        .wait_timeout(Duration::ZERO)
        .expect("shard 1 has nothing queued")
        .unwrap();

    held.store(false, Ordering::Release);
    barrier.wait().unwrap();
    let page = store.read(&K, &ReadQuery::default()).unwrap();
    assert_eq!(page.batches.len(), 1, "visible once the barrier resolved");
    applied.wait().unwrap();
    disk.clear_faults();

    // Records the log refuses never become visible: their barrier fails rather than hang.
    // (Held first, so the barrier is taken while the record is queued.)
    held.store(true, Ordering::Release);
    let gate = Arc::clone(&held);
    disk.inject_faults(move |call, path| {
        if call != eddy_log::FsCall::Append || !path.to_string_lossy().contains("shard-000") {
            return None;
        }
        while gate.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Some(eddy_log::Errno::NoSpace.error())
    });
    let (_, command) = store.prepare_write(write_req(K, 2, Some(1), 101)).unwrap();
    let refused = store.apply(0, 8, command);
    let barrier = store.visible_barrier(0);
    held.store(false, Ordering::Release);
    assert!(refused.wait().is_err());
    assert!(
        barrier.wait().is_err(),
        "the refused record is never visible"
    );
    assert!(
        store.shard_dropped_writes(0),
        "the log dropped a record shard 0 queued"
    );
    assert!(!store.shard_dropped_writes(1));
}

/// A command routed to the wrong shard's group is not applied there.
#[test]
fn a_misrouted_command_is_refused() {
    let disk = MemBackend::new();
    let store = EventStore::open(Arc::new(disk), cfg()).unwrap().0;
    let (shard, command) = store.prepare_write(write_req(K, 1, None, 1)).unwrap();
    assert_eq!(shard, 0);
    assert!(store.apply(1, 1, command).wait().is_err());
    assert_eq!(store.replicated_through(1).unwrap(), 0);
}

/// A member that missed entries copies the shard's records from a peer (a snapshot): it then
/// holds the same records, state and chain, skips the entries they cover, and applies the next
/// one exactly as the peer does. A record that does not continue its chain is refused.
#[test]
fn a_member_copies_a_shards_records_from_a_peer() {
    let disks = [MemBackend::new(), MemBackend::new()];
    let open = |d: &MemBackend| EventStore::open(Arc::new(d.clone()), cfg()).unwrap().0;
    let (leader, behind) = (open(&disks[0]), open(&disks[1]));
    // Both apply entries 1 and 2; only the leader the next 40 (writes, a refusal, a trim).
    let entries: Vec<(u32, Command)> = (0..42u64)
        .map(|i| match i {
            0 => leader.prepare_write(write_req(K, 1, Some(0), 1)).unwrap(),
            20 => leader
                .prepare_write(write_req(K, 100, Some(0), 20))
                .unwrap(), // conflict
            30 => leader.prepare_trim(TrimRequest {
                key: K,
                keep_from_version: 5,
                client_id: 3,
                user_id: None,
                now: 30,
            }),
            _ => leader
                .prepare_write(write_req(K, i + 1, None, i + 1))
                .unwrap(),
        })
        .collect();
    for (i, (shard, command)) in entries.iter().enumerate() {
        let index = i as u64 + 1;
        let _ = leader.apply(*shard, index, command.clone()).wait();
        if index <= 2 {
            behind.apply(*shard, index, command.clone()).wait().unwrap();
        }
    }
    // The snapshot: the leader's position after entry 42.
    let position = leader.shard_position(0).unwrap();
    let mut from = behind.shard_position(0).unwrap().next_seq;
    while from < position.next_seq {
        let chunk = leader
            .export_records(0, from, position.next_seq, 512)
            .unwrap();
        assert!(!chunk.is_empty());
        from = chunk.last().unwrap().seq + 1;
        behind.import_records(0, chunk).unwrap().wait().unwrap();
    }
    behind.sync_shard(0).wait().unwrap();
    assert_eq!(behind.shard_position(0).unwrap(), position);
    assert_eq!(behind.replicated_through(0).unwrap(), 42);
    // Where the chain stood before any record: the same on both, and nothing past the end.
    assert_eq!(
        behind.chain_tip_before(0, position.next_seq).unwrap(),
        Some(position.tip)
    );
    for seq in [1, 2, 10, position.next_seq - 1] {
        let tip = behind.chain_tip_before(0, seq).unwrap();
        assert!(tip.is_some());
        assert_eq!(tip, leader.chain_tip_before(0, seq).unwrap(), "seq {seq}");
    }
    assert_eq!(
        behind.chain_tip_before(0, position.next_seq + 1).unwrap(),
        None
    );
    let all = ReadQuery {
        from_version: 5,
        ..ReadQuery::default()
    };
    assert_eq!(
        format!("{:?}", behind.read(&K, &all).unwrap()),
        format!("{:?}", leader.read(&K, &all).unwrap())
    );
    // Entries the copy covers write nothing again, whatever they are.
    for (i, (shard, command)) in entries.iter().enumerate().skip(2) {
        match behind.apply(*shard, i as u64 + 1, command.clone()).wait() {
            Err(EventStoreError::Refused(Refusal::AlreadyApplied { .. })) => {}
            other => panic!("entry {} applied twice: {other:?}", i + 1),
        }
    }
    assert_eq!(behind.shard_position(0).unwrap(), position);
    // The next entry gets the same answer on both.
    let (shard, next) = leader
        .prepare_write(write_req(K, 43, Some(40), 43))
        .unwrap();
    let a = leader.apply(shard, 43, next.clone()).wait().unwrap();
    let b = behind.apply(shard, 43, next).wait().unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    // A restart keeps it all.
    drop(behind);
    let reopened = open(&disks[1]);
    assert_eq!(reopened.replicated_through(0).unwrap(), 43);
    assert_eq!(
        reopened.verify_chain(0).unwrap(),
        leader.verify_chain(0).unwrap()
    );

    // A shard whose records differ from the peer's cannot take the peer's next records.
    let other = MemBackend::new();
    let diverged = open(&other);
    let (shard, mine) = diverged.prepare_write(write_req(K, 9, None, 9)).unwrap();
    diverged.apply(shard, 1, mine).wait().unwrap();
    let theirs = leader.export_records(0, 2, 3, u64::MAX).unwrap();
    assert_eq!(theirs.len(), 1);
    assert!(diverged.import_records(0, theirs).is_err());
}
