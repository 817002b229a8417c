use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use eddy_log::{Errno, FsCall, LogError, MemBackend, StorageBackend};

use super::*;
use crate::metadata::{MetadataOp, TopicConfig};
use crate::partition::{AppendTicket, Appended, StampWith};

fn config() -> StreamStoreConfig {
    StreamStoreConfig {
        pool_threads: 2,
        cache_bytes: 1 << 20,
        metadata_segment_size: 512,
        snapshot_every_ops: 1000,
        ..StreamStoreConfig::default()
    }
}

fn topic_config(segment_size: u64) -> TopicConfig {
    TopicConfig {
        segment_size,
        ..TopicConfig::default()
    }
}

fn open(mem: &MemBackend, config: StreamStoreConfig) -> (StreamStore, StreamStoreRecovery) {
    StreamStore::open(Arc::new(mem.clone()), config).unwrap()
}

fn meta(store: &StreamStore, op: MetadataOp) -> Result<Applied> {
    store.commit(Operation::Metadata(op)).wait()
}

fn create_stream_topic(store: &StreamStore, partitions: u32, segment_size: u64) {
    meta(
        store,
        MetadataOp::CreateStream {
            id: 0,
            name: "orders".into(),
            created_at: 1,
            options: vec![],
        },
    )
    .unwrap();
    meta(
        store,
        MetadataOp::CreateTopic {
            stream_id: 0,
            id: 0,
            name: "events".into(),
            created_at: 2,
            partitions,
            config: topic_config(segment_size),
            explicit_options: vec![1, 2, 3],
            derived_options: vec![],
        },
    )
    .unwrap();
}

fn addr(p: u32) -> PartitionAddr {
    PartitionAddr {
        stream_id: 0,
        topic_id: 0,
        partition_id: p,
    }
}

fn batch(count: u32, tag: u8) -> StampWith<impl FnOnce(&crate::partition::Stamp) -> Bytes> {
    StampWith {
        count,
        stamp: move |s: &crate::partition::Stamp| {
            let mut v = s.base_offset.to_le_bytes().to_vec();
            v.extend_from_slice(&[tag; 40]);
            Bytes::from(v)
        },
    }
}

#[test]
fn metadata_and_messages_survive_reopen_and_crash() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    create_stream_topic(&store, 2, 1 << 20);
    assert_eq!(
        store.read_metadata(|s| s.topic(0, 0).unwrap().explicit_options.clone()),
        vec![1, 2, 3]
    );
    let ack = store
        .append(addr(1), batch(3, 7), 100)
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(ack.base_offset, 0);
    store
        .append(addr(1), batch(2, 8), 101)
        .unwrap()
        .wait()
        .unwrap();
    meta(
        &store,
        MetadataOp::StoreConsumerOffset {
            addr: addr(1),
            consumer: ConsumerKey::Consumer(9),
            offset: 2,
            forward_only: false,
        },
    )
    .unwrap();
    drop(store);
    mem.crash();
    let (store, recovery) = open(&mem, config());
    assert_eq!(recovery.partitions.len(), 2);
    assert!(recovery.replayed_ops >= 3);
    let polled = store
        .poll(
            addr(1),
            Some(ConsumerKey::Consumer(9)),
            PollStrategy::Next,
            10,
            u64::MAX,
        )
        .unwrap();
    assert_eq!(polled.start_offset, 3);
    assert_eq!(polled.batches.len(), 1);
    assert_eq!(polled.batches[0].base_offset, 3);
    assert_eq!(&polled.batches[0].bytes[8..], &[8u8; 40][..]);
    assert_eq!(
        store.consumer_offset(addr(1), ConsumerKey::Consumer(9)),
        Some(2)
    );
}

#[test]
fn a_created_partition_survives_a_crash_after_the_ack() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    create_stream_topic(&store, 2, 1 << 20);
    let acked = store
        .append(addr(1), batch(2, 5), 10)
        .unwrap()
        .wait()
        .unwrap();
    // Power cut with the store running: only synced bytes and synced directory entries stay.
    mem.crash();
    drop(store);
    let (store, recovery) = open(&mem, config());
    assert_eq!(recovery.partitions.len(), 2);
    assert!(store.read_metadata(|s| s.topic(0, 0).is_some()));
    let polled = store
        .poll(addr(1), None, PollStrategy::First, 10, u64::MAX)
        .unwrap();
    assert_eq!(polled.batches.len(), 1, "the acknowledged batch survives");
    assert_eq!(polled.batches[0].base_offset, acked.base_offset);
}

#[test]
fn shutdown_through_a_shared_handle_stops_every_write() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    create_stream_topic(&store, 1, 1 << 20);
    store
        .append(addr(0), batch(1, 1), 0)
        .unwrap()
        .wait()
        .unwrap();
    let store = Arc::new(store);
    let other = Arc::clone(&store);
    store.shutdown().unwrap();
    let refused = other.append(addr(0), batch(1, 2), 0);
    assert!(
        matches!(refused, Err(StreamStoreError::Log(LogError::Shutdown))),
        "{refused:?}"
    );
    let refused = meta(
        &other,
        MetadataOp::CreateStream {
            id: 1,
            name: "late".into(),
            created_at: 9,
            options: vec![],
        },
    );
    assert!(
        matches!(refused, Err(StreamStoreError::Log(LogError::Shutdown))),
        "{refused:?}"
    );
    // Reads still work; a second shutdown does nothing.
    assert_eq!(other.partition(addr(0)).unwrap().stats().messages, 1);
    other.shutdown().unwrap();
    drop((store, other));
    let (store, _) = open(&mem, config());
    assert_eq!(store.partition(addr(0)).unwrap().stats().messages, 1);
}

#[test]
fn validation_failures_write_nothing() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    create_stream_topic(&store, 1, 1 << 20);
    let before = store.meta_log().bounds();
    let err = meta(
        &store,
        MetadataOp::CreateStream {
            id: 1,
            name: "orders".into(),
            created_at: 3,
            options: vec![],
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            StreamStoreError::Metadata(crate::MetadataError::NameTaken { .. })
        ),
        "{err:?}"
    );
    assert_eq!(store.meta_log().bounds(), before);
    assert!(matches!(
        store.append(addr(5), batch(1, 0), 0),
        Err(StreamStoreError::PartitionNotFound {
            partition_id: 5,
            ..
        })
    ));
}

#[test]
fn an_acknowledged_metadata_operation_is_visible_in_the_metadata_log() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    create_stream_topic(&store, 1, 1 << 20);
    for offset in 0..2_000u64 {
        let Applied::Metadata { seq } = meta(
            &store,
            MetadataOp::StoreConsumerOffset {
                addr: addr(0),
                consumer: ConsumerKey::Consumer(1),
                offset,
                forward_only: false,
            },
        )
        .unwrap() else {
            panic!("a metadata operation answers with its sequence number");
        };
        // A reader that follows the acknowledgement sees the operation in the log.
        let bounds = store.meta_log().bounds();
        assert!(
            bounds.next > seq,
            "op {seq} acknowledged, log ends at {bounds:?}"
        );
        let records = store.meta_log().read(seq, 1, u64::MAX).unwrap();
        assert_eq!(records.first().map(|r| r.meta.seq), Some(seq));
    }
}

#[test]
fn delete_topic_removes_partition_data_and_orphans_are_cleaned() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    create_stream_topic(&store, 3, 1 << 20);
    store
        .append(addr(0), batch(1, 1), 0)
        .unwrap()
        .wait()
        .unwrap();
    let dirs = |mem: &MemBackend| {
        let mut d: Vec<String> = mem
            .file_paths()
            .iter()
            .filter_map(|p| p.strip_prefix(PARTITIONS_DIR).ok())
            .filter_map(|p| p.components().next())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        d.dedup();
        d
    };
    assert_eq!(dirs(&mem).len(), 3);
    meta(
        &store,
        MetadataOp::DeleteTopic {
            stream_id: 0,
            topic_id: 0,
        },
    )
    .unwrap();
    assert!(dirs(&mem).is_empty());
    assert!(store.partition(addr(0)).is_err());
    // A partition directory the metadata does not know (a delete cut short) is removed.
    drop(store);
    let orphan = Path::new(PARTITIONS_DIR).join(format!("{:020}", 99));
    mem.clone().create_dir_all(&orphan).unwrap();
    mem.write_file(&orphan.join("state"), b"whatever");
    let (_store, recovery) = open(&mem, config());
    assert_eq!(recovery.removed_partitions, vec![orphan]);
}

#[test]
fn purge_topic_restarts_offsets_and_clears_consumer_offsets() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    create_stream_topic(&store, 1, 1 << 20);
    for _ in 0..5 {
        store
            .append(addr(0), batch(2, 1), 0)
            .unwrap()
            .wait()
            .unwrap();
    }
    meta(
        &store,
        MetadataOp::StoreConsumerOffset {
            addr: addr(0),
            consumer: ConsumerKey::Consumer(1),
            offset: 4,
            forward_only: true,
        },
    )
    .unwrap();
    meta(
        &store,
        MetadataOp::PurgeTopic {
            stream_id: 0,
            topic_id: 0,
        },
    )
    .unwrap();
    assert_eq!(store.partition(addr(0)).unwrap().stats().messages, 0);
    assert_eq!(
        store.consumer_offset(addr(0), ConsumerKey::Consumer(1)),
        None
    );
    let ack = store
        .append(addr(0), batch(1, 2), 0)
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(ack.base_offset, 0);
    drop(store);
    let (store, _) = open(&mem, config());
    assert_eq!(store.partition(addr(0)).unwrap().stats().messages, 1);
}

#[test]
fn a_purge_that_runs_out_of_space_stops_the_partition_until_it_is_retried() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    create_stream_topic(&store, 2, 1 << 20);
    for p in 0..2 {
        store
            .append(addr(p), batch(2, 1), 0)
            .unwrap()
            .wait()
            .unwrap();
    }
    let purge = || {
        meta(
            &store,
            MetadataOp::PurgeTopic {
                stream_id: 0,
                topic_id: 0,
            },
        )
    };
    // Only partition 0's fresh segment cannot be created.
    let uid0 = store.read_metadata(|s| s.partition(addr(0)).unwrap().uid);
    let dir0 = Path::new(PARTITIONS_DIR).join(format!("{uid0:020}"));
    mem.inject_faults(move |call, path| {
        let segment = path.extension().is_some_and(|e| e == "log");
        (call == FsCall::Create && path.starts_with(&dir0) && segment)
            .then(|| Errno::NoSpace.error())
    });
    assert!(purge().is_err());
    mem.clear_faults();
    // Partition 1 was purged all the same and takes writes; partition 0 refuses them until
    // its purge is done.
    let ack = store
        .append(addr(1), batch(1, 2), 0)
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(
        ack.base_offset, 0,
        "the other partition's purge was performed"
    );
    let refused = store
        .append(addr(0), batch(1, 2), 0)
        .and_then(AppendTicket::wait);
    assert!(
        matches!(
            refused,
            Err(StreamStoreError::PurgeUnfinished {
                partition_id: 0,
                ..
            })
        ),
        "{refused:?}"
    );
    purge().unwrap();
    for p in 0..2 {
        let ack = store
            .append(addr(p), batch(1, 3), 0)
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(ack.base_offset, 0);
    }
    mem.crash();
    drop(store);
    let (store, _) = open(&mem, config());
    for p in 0..2 {
        assert_eq!(store.partition(addr(p)).unwrap().stats().messages, 1);
    }
}

#[test]
fn a_purge_whose_fdatasync_failed_never_takes_effect() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    create_stream_topic(&store, 1, 1 << 20);
    store
        .append(addr(0), batch(2, 1), 0)
        .unwrap()
        .wait()
        .unwrap();
    mem.inject_faults(|call, path| {
        (call == FsCall::Sync && path.starts_with(METADATA_DIR)).then(|| Errno::Io.error())
    });
    let purge = meta(
        &store,
        MetadataOp::PurgeTopic {
            stream_id: 0,
            topic_id: 0,
        },
    );
    assert!(purge.is_err(), "{purge:?}");
    mem.clear_faults();
    // The purge failed: the partition keeps its batches and takes more.
    store
        .append(addr(0), batch(1, 2), 0)
        .unwrap()
        .wait()
        .unwrap();
    drop(store);
    let (store, _) = open(&mem, config());
    assert_eq!(
        store.partition(addr(0)).unwrap().stats().messages,
        3,
        "a purge its client saw fail must not take effect at the restart"
    );
}

#[test]
fn a_purge_cut_short_is_finished_by_the_restart() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    create_stream_topic(&store, 1, 1 << 20);
    store
        .append(addr(0), batch(2, 1), 0)
        .unwrap()
        .wait()
        .unwrap();
    // The state file cannot be replaced: the log was purged, the partition's generation lags.
    mem.inject_faults(|call, path| {
        (call == FsCall::Append && path.ends_with("state.tmp")).then(|| Errno::Io.error())
    });
    assert!(meta(
        &store,
        MetadataOp::PurgeTopic {
            stream_id: 0,
            topic_id: 0,
        },
    )
    .is_err());
    mem.clear_faults();
    assert!(store.append(addr(0), batch(1, 2), 0).is_err());
    drop(store);
    let (store, _) = open(&mem, config());
    assert_eq!(store.partition(addr(0)).unwrap().stats().messages, 0);
    let ack = store
        .append(addr(0), batch(1, 3), 0)
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(ack.base_offset, 0);
}

#[test]
fn snapshots_compact_the_metadata_log() {
    let mem = MemBackend::new();
    let cfg = StreamStoreConfig {
        snapshot_every_ops: 5,
        ..config()
    };
    let (store, _) = open(&mem, cfg.clone());
    create_stream_topic(&store, 1, 1 << 20);
    for i in 0..40u64 {
        meta(
            &store,
            MetadataOp::StoreConsumerOffset {
                addr: addr(0),
                consumer: ConsumerKey::Consumer(u32::try_from(i % 3).unwrap()),
                offset: i,
                forward_only: false,
            },
        )
        .unwrap();
    }
    let state = store.read_metadata(Clone::clone);
    let log_bounds = store.meta_log().bounds();
    assert!(
        log_bounds.first > 0,
        "covered metadata segments were deleted: {log_bounds:?}"
    );
    assert!(mem
        .read_file(&Path::new(METADATA_DIR).join(SNAPSHOT_FILE))
        .is_some());
    drop(store);
    let (store, recovery) = open(&mem, cfg);
    assert!(
        recovery.replayed_ops < 42,
        "replayed {}",
        recovery.replayed_ops
    );
    assert_eq!(store.read_metadata(Clone::clone), state);
    // New operations continue the sequence.
    let applied = meta(
        &store,
        MetadataOp::DeleteConsumerOffset {
            addr: addr(0),
            consumer: ConsumerKey::Consumer(0),
        },
    )
    .unwrap();
    assert_eq!(applied, Applied::Metadata { seq: 42 });
}

#[test]
fn damaged_snapshot_refuses_to_open() {
    let mem = MemBackend::new();
    let cfg = StreamStoreConfig {
        snapshot_every_ops: 2,
        ..config()
    };
    let (store, _) = open(&mem, cfg.clone());
    create_stream_topic(&store, 1, 1 << 20);
    drop(store);
    let path = Path::new(METADATA_DIR).join(SNAPSHOT_FILE);
    let mut bytes = mem.read_file(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    mem.write_file(&path, &bytes);
    let err = StreamStore::open(Arc::new(mem.clone()), cfg).unwrap_err();
    assert!(err.is_corruption(), "{err:?}");
}

#[test]
fn metadata_enospc_refuses_and_recovers() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    create_stream_topic(&store, 1, 1 << 20);
    mem.set_capacity(Some(mem.used_bytes() + 10));
    let err = meta(
        &store,
        MetadataOp::CreateStream {
            id: 1,
            name: "second".into(),
            created_at: 0,
            options: vec![],
        },
    )
    .unwrap_err();
    assert!(
        matches!(err, StreamStoreError::Log(LogError::NoSpace { .. })),
        "{err:?}"
    );
    mem.set_capacity(None);
    // The refused stream was never created: its name is free again.
    meta(
        &store,
        MetadataOp::CreateStream {
            id: 1,
            name: "second".into(),
            created_at: 0,
            options: vec![],
        },
    )
    .unwrap();
    assert_eq!(store.read_metadata(|s| s.streams.len()), 2);
    drop(store);
    mem.crash();
    let (store, _) = open(&mem, config());
    assert_eq!(store.read_metadata(|s| s.streams.len()), 2);
}

#[test]
fn concurrent_metadata_commits_share_fsyncs_and_apply_in_order() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    create_stream_topic(&store, 1, 1 << 20);
    let store = Arc::new(store);
    let threads: Vec<_> = (0..8u32)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for i in 0..20u64 {
                    meta(
                        &store,
                        MetadataOp::StoreConsumerOffset {
                            addr: addr(0),
                            consumer: ConsumerKey::Consumer(t),
                            offset: i,
                            forward_only: true,
                        },
                    )
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for t in 0..8 {
        assert_eq!(
            store.consumer_offset(addr(0), ConsumerKey::Consumer(t)),
            Some(19)
        );
    }
}

#[test]
fn retention_runs_per_topic_options() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    meta(
        &store,
        MetadataOp::CreateStream {
            id: 0,
            name: "s".into(),
            created_at: 0,
            options: vec![],
        },
    )
    .unwrap();
    meta(
        &store,
        MetadataOp::CreateTopic {
            stream_id: 0,
            id: 0,
            name: "t".into(),
            created_at: 0,
            partitions: 1,
            config: TopicConfig {
                segment_size: 256,
                message_expiry: Some(1_000),
                ..TopicConfig::default()
            },
            explicit_options: vec![],
            derived_options: vec![],
        },
    )
    .unwrap();
    for i in 0..20u64 {
        store
            .append(addr(0), batch(1, 0), i * 100)
            .unwrap()
            .wait()
            .unwrap();
    }
    let segments = store.partition(addr(0)).unwrap().log().segments().len();
    assert!(segments > 3);
    let report = store.run_retention(1_000_000).unwrap();
    assert_eq!(report.segments(), segments - 1);
    // Deleting segments through the commit entry point.
    for i in 0..20u64 {
        store
            .append(addr(0), batch(1, 0), 2_000_000 + i)
            .unwrap()
            .wait()
            .unwrap();
    }
    let applied = store
        .commit(Operation::DeleteSegments {
            addr: addr(0),
            count: 2,
        })
        .wait()
        .unwrap();
    assert!(matches!(applied, Applied::SegmentsDeleted(ref s) if s.len() == 2));
}

/// Stored bytes of every partition of topic 0/0.
fn topic_bytes(store: &StreamStore, partitions: u32) -> Vec<u64> {
    (0..partitions)
        .map(|p| store.partition(addr(p)).unwrap().stats().size_bytes)
        .collect()
}

#[test]
fn max_topic_size_deletes_the_topics_oldest_sealed_segments() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    // A 256-byte segment holds two 48-byte batches (plus headers), and the cap 12 of them.
    let one = batch(1, 0).stamp(&crate::partition::Stamp {
        partition_id: 0,
        base_offset: 0,
        base_timestamp: 0,
    });
    let one = one.len() as u64;
    let cap = 12 * one;
    meta(
        &store,
        MetadataOp::CreateStream {
            id: 0,
            name: "s".into(),
            created_at: 0,
            options: vec![],
        },
    )
    .unwrap();
    meta(
        &store,
        MetadataOp::CreateTopic {
            stream_id: 0,
            id: 0,
            name: "t".into(),
            created_at: 0,
            partitions: 3,
            config: TopicConfig {
                segment_size: 256,
                max_topic_size: Some(cap),
                ..TopicConfig::default()
            },
            explicit_options: vec![],
            derived_options: vec![],
        },
    )
    .unwrap();
    // Partition 0 is written first (its segments are the oldest), then 1; 2 stays empty.
    let mut now = 0;
    for p in [0, 1] {
        for _ in 0..10 {
            now += 10;
            store
                .append(addr(p), batch(1, 0), now)
                .unwrap()
                .wait()
                .unwrap();
        }
    }
    assert_eq!(topic_bytes(&store, 3).iter().sum::<u64>(), 20 * one);
    let report = store.run_retention(now).unwrap();
    let bytes = topic_bytes(&store, 3);
    let total: u64 = bytes.iter().sum();
    assert!(total <= cap, "{bytes:?}");
    assert!(total > cap - 256, "only what was needed went: {bytes:?}");
    // Partition 0's segments went first; partition 1 kept everything.
    assert_eq!(report.deleted.len(), 1, "{report:?}");
    assert_eq!(report.deleted[0].0, addr(0));
    assert_eq!(bytes[1], 10 * one);
    assert!(store.partition(addr(0)).unwrap().stats().first_offset > 0);
    // Under the size: nothing more goes.
    assert_eq!(store.run_retention(now).unwrap().segments(), 0);
    // Active segments are never deleted, whatever the size.
    meta(
        &store,
        MetadataOp::UpdateTopic {
            stream_id: 0,
            topic_id: 0,
            name: "t".into(),
            message_expiry: None,
            max_topic_size: Some(1),
            compression_algorithm: 1,
            replication_factor: 1,
            explicit_options: vec![],
        },
    )
    .unwrap();
    store.run_retention(now).unwrap();
    for p in [0, 1] {
        let stats = store.partition(addr(p)).unwrap().stats();
        assert_eq!(stats.segments, 1);
        assert_eq!(stats.current_offset, 9);
    }
}

#[test]
fn committed_append_operations_are_checked() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    create_stream_topic(&store, 1, 1 << 20);
    let op = Operation::Append {
        addr: addr(0),
        base_offset: 0,
        timestamp: 5,
        message_count: 2,
        bytes: Bytes::from_static(b"stamped elsewhere"),
    };
    // Operations are serialisable (the replication seam).
    let config = bincode::config::standard().with_fixed_int_encoding();
    let encoded = bincode::serde::encode_to_vec(&op, config).unwrap();
    let (decoded, _): (Operation, usize) =
        bincode::serde::decode_from_slice(&encoded, config).unwrap();
    assert_eq!(decoded, op);
    let applied = store.commit(decoded).wait().unwrap();
    assert!(matches!(
        applied,
        Applied::Appended(Appended {
            base_offset: 0,
            message_count: 2,
            ..
        })
    ));
    assert!(
        store.commit(op).wait().is_err(),
        "the same offset twice is refused"
    );
}

#[test]
fn background_topics_are_flushed_on_demand() {
    let mem = MemBackend::new();
    let (store, _) = open(&mem, config());
    meta(
        &store,
        MetadataOp::CreateStream {
            id: 0,
            name: "s".into(),
            created_at: 0,
            options: vec![],
        },
    )
    .unwrap();
    meta(
        &store,
        MetadataOp::CreateTopic {
            stream_id: 0,
            id: 0,
            name: "t".into(),
            created_at: 0,
            partitions: 1,
            config: TopicConfig {
                enforce_fsync: false,
                messages_required_to_save: 1000,
                ..TopicConfig::default()
            },
            explicit_options: vec![],
            derived_options: vec![],
        },
    )
    .unwrap();
    for _ in 0..3 {
        store
            .append(addr(0), batch(1, 0), 0)
            .unwrap()
            .wait()
            .unwrap();
    }
    let fsyncs = store.partition(addr(0)).unwrap().log().stats().fsyncs;
    assert_eq!(fsyncs, 0);
    store.flush_unsynced().unwrap();
    assert_eq!(store.partition(addr(0)).unwrap().log().stats().fsyncs, 1);
    drop(store);
    mem.crash();
    let (store, _) = open(&mem, config());
    assert_eq!(store.partition(addr(0)).unwrap().stats().messages, 3);
}

/// `stream_ciphers`: a stream the chooser gives a key of its own has its partitions sealed
/// with that key, not the store's; others keep the store's; a key that does not open keeps
/// the store shut.
#[test]
fn a_streams_own_key_seals_its_partitions() {
    let server = eddy_log::Cipher::new(&[1; 32]);
    let own = eddy_log::Cipher::new(&[2; 32]);
    let keyed = {
        let own = own.clone();
        StreamCiphers(Arc::new(move |_, options: &[u8]| {
            Ok((options == b"own key").then(|| own.clone()))
        }))
    };
    let with = |stream_ciphers: Option<StreamCiphers>| StreamStoreConfig {
        cipher: Some(server.clone()),
        stream_ciphers,
        ..config()
    };
    let mem = MemBackend::new();
    let (store, _) = open(&mem, with(Some(keyed.clone())));
    for (id, options) in [(0, b"own key".to_vec()), (1, vec![])] {
        meta(
            &store,
            MetadataOp::CreateStream {
                id,
                name: format!("s{id}"),
                created_at: 1,
                options,
            },
        )
        .unwrap();
        meta(
            &store,
            MetadataOp::CreateTopic {
                stream_id: id,
                id: 0,
                name: "t".into(),
                created_at: 2,
                partitions: 1,
                config: topic_config(1 << 20),
                explicit_options: vec![],
                derived_options: vec![],
            },
        )
        .unwrap();
    }
    let at = |stream_id| PartitionAddr {
        stream_id,
        topic_id: 0,
        partition_id: 0,
    };
    for stream_id in [0, 1] {
        store
            .append(at(stream_id), batch(2, 5), 100)
            .unwrap()
            .wait()
            .unwrap();
    }
    let read = |store: &StreamStore, stream_id| {
        store.poll(at(stream_id), None, PollStrategy::First, 10, u64::MAX)
    };
    assert_eq!(
        &read(&store, 0).unwrap().batches[0].bytes[8..],
        &[5u8; 40][..]
    );
    drop(store);
    // The store's key alone opens the plain stream's records, not the keyed one's.
    let (store, _) = open(&mem, with(None));
    assert_eq!(
        &read(&store, 1).unwrap().batches[0].bytes[8..],
        &[5u8; 40][..]
    );
    let refused = read(&store, 0).unwrap_err();
    assert!(
        refused.is_corruption() || matches!(refused, StreamStoreError::Log(_)),
        "{refused}"
    );
    drop(store);
    // With its own key again, both read.
    let (store, _) = open(&mem, with(Some(keyed)));
    assert_eq!(
        &read(&store, 0).unwrap().batches[0].bytes[8..],
        &[5u8; 40][..]
    );
    assert_eq!(
        &read(&store, 1).unwrap().batches[0].bytes[8..],
        &[5u8; 40][..]
    );
    drop(store);
    // A stream key that does not open: nothing is opened with another key.
    let broken = StreamCiphers(Arc::new(|_, options: &[u8]| {
        if options.is_empty() {
            Ok(None)
        } else {
            Err("does not open".into())
        }
    }));
    assert!(StreamStore::open(Arc::new(mem.clone()), with(Some(broken))).is_err());
}
