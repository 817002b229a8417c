//! Storage faults, model-checked: random appends, consumer offsets and purges run while the
//! crash-simulating backend fails chosen storage calls (`ENOSPC`, `EIO`, `EMFILE` at opens,
//! creations, appends, syncs, directory syncs, renames, removals, truncations, reads,
//! listings) of the metadata log, one partition or anything, for a few calls or until the
//! fault clears; then clean restarts and power cuts. Whatever the store acknowledged must be
//! there after every reopen, exactly once, at its offset; what it refused may or may not be
//! (a write whose fdatasync failed can still be in the file), but nothing else may appear.
//! A purge that failed may have taken effect or not, but it must never delete anything
//! acknowledged after it failed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use eddy_log::{Errno, FsCall, MemBackend};
use eddy_stream_store::{
    Applied, ConsumerKey, MetadataOp, Operation, PartitionAddr, Stamp, StampWith, StreamStore,
    StreamStoreConfig, StreamStoreError, TopicConfig,
};
use proptest::prelude::*;

const PARTITIONS: u32 = 2;
const CONSUMER: ConsumerKey = ConsumerKey::Consumer(7);

fn config() -> StreamStoreConfig {
    StreamStoreConfig {
        pool_threads: 2,
        cache_bytes: 1 << 20,
        metadata_segment_size: 512,
        snapshot_every_ops: 6,
        ..StreamStoreConfig::default()
    }
}

fn addr(p: u32) -> PartitionAddr {
    PartitionAddr {
        stream_id: 0,
        topic_id: 0,
        partition_id: p,
    }
}

/// Stored bytes: the base offset, then the body.
fn batch(count: u32, body: Vec<u8>) -> StampWith<impl FnOnce(&Stamp) -> Bytes> {
    StampWith {
        count,
        stamp: move |s: &Stamp| {
            let mut v = s.base_offset.to_le_bytes().to_vec();
            v.extend_from_slice(&body);
            Bytes::from(v)
        },
    }
}

/// Which files a fault hits.
#[derive(Debug, Clone, Copy)]
enum Target {
    Anything,
    Metadata,
    Partition(u32),
}

const CALLS: [FsCall; 11] = [
    FsCall::Open,
    FsCall::Create,
    FsCall::Read,
    FsCall::Append,
    FsCall::Truncate,
    FsCall::Sync,
    FsCall::List,
    FsCall::CreateDir,
    FsCall::Remove,
    FsCall::Rename,
    FsCall::SyncDir,
];

#[derive(Debug, Clone)]
enum Op {
    Append {
        p: u32,
        count: u32,
        len: usize,
    },
    StoreOffset {
        p: u32,
        offset: u64,
    },
    Purge,
    /// Deletes the `n` oldest sealed segments of a partition.
    DeleteSegments {
        p: u32,
        n: u32,
    },
    /// From now on `call`s on `target` fail with `errno`: the next `budget` of them, or all of
    /// them until `Clear`.
    Fault {
        target: Target,
        call: FsCall,
        errno: Errno,
        budget: Option<u32>,
    },
    Clear,
    /// Clear the faults, close the store, open it again.
    Reopen,
    /// Power cut (clears the faults): each unsynced tail keeps up to `keep` bytes.
    Crash {
        keep: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let target = prop_oneof![
        Just(Target::Anything),
        Just(Target::Metadata),
        (0..PARTITIONS).prop_map(Target::Partition),
    ];
    let errno = prop_oneof![
        Just(Errno::NoSpace),
        Just(Errno::Io),
        Just(Errno::TooManyFiles)
    ];
    prop_oneof![
        10 => (0..PARTITIONS, 1u32..4, 0usize..90).prop_map(|(p, count, len)| Op::Append { p, count, len }),
        2 => (0..PARTITIONS, 0u64..40).prop_map(|(p, offset)| Op::StoreOffset { p, offset }),
        1 => Just(Op::Purge),
        1 => (0..PARTITIONS, 1u32..3).prop_map(|(p, n)| Op::DeleteSegments { p, n }),
        4 => (target, 0..CALLS.len(), errno, proptest::option::of(1u32..4)).prop_map(
            |(target, call, errno, budget)| Op::Fault { target, call: CALLS[call], errno, budget }
        ),
        2 => Just(Op::Clear),
        1 => Just(Op::Reopen),
        1 => (0usize..120).prop_map(|keep| Op::Crash { keep }),
    ]
}

/// A batch as the model knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Batch {
    count: u32,
    body: Vec<u8>,
}

#[derive(Debug, Default)]
struct PartModel {
    /// Acknowledged batches by base offset.
    acked: BTreeMap<u64, Batch>,
    /// Refused after they were queued: each may or may not be there after a reopen.
    maybe: BTreeMap<u64, Batch>,
    /// Acknowledged after a purge that failed (a purge that took effect deletes none).
    acked_since_failed_purge: bool,
    /// A segment deletion failed: the oldest batches below this offset may be gone.
    gone_below: u64,
}

#[derive(Debug, Default)]
struct Model {
    parts: [PartModel; PARTITIONS as usize],
    /// The consumer offset each partition may hold.
    offsets: [BTreeSet<Option<u64>>; PARTITIONS as usize],
    /// A purge failed since the last reopen: it may have taken effect.
    purge_maybe: bool,
}

struct Harness {
    mem: MemBackend,
    store: Option<StreamStore>,
    model: Model,
    seed: u64,
}

impl Harness {
    fn new() -> Self {
        let mem = MemBackend::new();
        let (store, _) = StreamStore::open(Arc::new(mem.clone()), config()).unwrap();
        let commit = |op| store.commit(Operation::Metadata(op)).wait().unwrap();
        commit(MetadataOp::CreateStream {
            id: 0,
            name: "s".into(),
            created_at: 1,
            options: vec![],
        });
        commit(MetadataOp::CreateTopic {
            stream_id: 0,
            id: 0,
            name: "t".into(),
            created_at: 2,
            partitions: PARTITIONS,
            config: TopicConfig {
                segment_size: 256,
                ..TopicConfig::default()
            },
            explicit_options: vec![],
            derived_options: vec![],
        });
        let mut model = Model::default();
        for offsets in &mut model.offsets {
            offsets.insert(None);
        }
        Harness {
            mem,
            store: Some(store),
            model,
            seed: 0,
        }
    }

    fn store(&self) -> &StreamStore {
        self.store.as_ref().expect("open")
    }

    fn dir_of(&self, target: Target) -> Option<PathBuf> {
        match target {
            Target::Anything => None,
            Target::Metadata => Some(PathBuf::from("metadata")),
            Target::Partition(p) => {
                let uid = self
                    .store()
                    .read_metadata(|s| s.partition(addr(p)).map(|p| p.uid))
                    .expect("the topic's partitions exist");
                Some(Path::new("partitions").join(format!("{uid:020}")))
            }
        }
    }

    fn run(&mut self, op: &Op) {
        self.seed += 1;
        match *op {
            Op::Append { p, count, len } => self.append(p, count, len),
            Op::StoreOffset { p, offset } => {
                let answer = self
                    .store()
                    .commit(Operation::Metadata(MetadataOp::StoreConsumerOffset {
                        addr: addr(p),
                        consumer: CONSUMER,
                        offset,
                        forward_only: false,
                    }))
                    .wait();
                let offsets = &mut self.model.offsets[p as usize];
                match answer {
                    Ok(Applied::Metadata { .. }) => {
                        offsets.clear();
                        offsets.insert(Some(offset));
                    }
                    Ok(other) => panic!("unexpected {other:?}"),
                    Err(_) => {
                        offsets.insert(Some(offset));
                    }
                }
            }
            Op::Purge => {
                let answer = self
                    .store()
                    .commit(Operation::Metadata(MetadataOp::PurgeTopic {
                        stream_id: 0,
                        topic_id: 0,
                    }))
                    .wait();
                let purged = answer.is_ok();
                // A failed purge may still take effect (at the latest at the next open).
                self.model.purge_maybe = !purged;
                for (part, offsets) in self.model.parts.iter_mut().zip(&mut self.model.offsets) {
                    if purged {
                        *part = PartModel::default();
                        offsets.clear();
                    } else {
                        part.acked_since_failed_purge = false;
                    }
                    offsets.insert(None);
                }
            }
            Op::DeleteSegments { p, n } => {
                // What the deletion may remove: the `n` oldest sealed segments.
                let limit = self
                    .store()
                    .partition(addr(p))
                    .unwrap()
                    .log()
                    .segments()
                    .iter()
                    .filter(|s| s.sealed)
                    .take(n as usize)
                    .map(|s| s.end)
                    .max()
                    .unwrap_or(0);
                let answer = self
                    .store()
                    .commit(Operation::DeleteSegments {
                        addr: addr(p),
                        count: n,
                    })
                    .wait();
                let part = &mut self.model.parts[p as usize];
                match answer {
                    Ok(Applied::SegmentsDeleted(segments)) => {
                        for s in segments {
                            part.acked.retain(|b, _| *b < s.base || *b >= s.end);
                            part.maybe.retain(|b, _| *b < s.base || *b >= s.end);
                        }
                    }
                    Ok(other) => panic!("unexpected {other:?}"),
                    Err(_) => part.gone_below = part.gone_below.max(limit),
                }
            }
            Op::Fault {
                target,
                call,
                errno,
                budget,
            } => {
                let dir = self.dir_of(target);
                let left = budget.map(AtomicU32::new);
                self.mem.inject_faults(move |c, path| {
                    if c != call || dir.as_ref().is_some_and(|d| !path.starts_with(d)) {
                        return None;
                    }
                    if let Some(left) = &left {
                        left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .ok()?;
                    }
                    Some(errno.error())
                });
            }
            Op::Clear => self.mem.clear_faults(),
            Op::Reopen => {
                self.mem.clear_faults();
                self.store = None;
                self.reopen();
            }
            Op::Crash { keep } => {
                self.mem
                    .crash_with(|_, tail| tail[..keep.min(tail.len())].to_vec());
                self.store = None;
                self.reopen();
            }
        }
    }

    fn append(&mut self, p: u32, count: u32, len: usize) {
        let body: Vec<u8> = (0..len)
            .map(|i| (self.seed as usize * 13 + i) as u8)
            .collect();
        let Ok(ticket) = self
            .store()
            .append(addr(p), batch(count, body.clone()), self.seed)
        else {
            return; // refused before anything was queued
        };
        let base = ticket.base_offset;
        let part = &mut self.model.parts[p as usize];
        let made = Batch { count, body };
        match ticket.wait() {
            Ok(ack) => {
                assert_eq!(ack.base_offset, base);
                let end_acked = part
                    .acked
                    .iter()
                    .next_back()
                    .map_or(0, |(b, m)| b + u64::from(m.count));
                if base < end_acked {
                    // Offsets restart only when a purge took effect: the failed one did, here.
                    assert!(
                        self.model.purge_maybe,
                        "partition {p}: offset {base} handed out again (acknowledged up to {end_acked})"
                    );
                    part.acked.clear();
                    part.maybe.clear();
                }
                // A refused batch at or above this offset can no longer be in the log.
                part.maybe.retain(|b, _| *b < base);
                part.acked.insert(base, made);
                part.acked_since_failed_purge = true;
            }
            Err(StreamStoreError::Log(_) | StreamStoreError::PurgeUnfinished { .. }) => {
                part.maybe.insert(base, made);
            }
            Err(e) => panic!("partition {p}: unexpected {e:?}"),
        }
    }

    /// Opens the store again (the faults are cleared) and checks it against the model.
    fn reopen(&mut self) {
        let (store, _) = StreamStore::open(Arc::new(self.mem.clone()), config())
            .expect("the store opens after the faults are gone");
        self.store = Some(store);
        let purge_maybe = std::mem::take(&mut self.model.purge_maybe);
        for p in 0..PARTITIONS {
            self.check_partition(p, purge_maybe);
            let offset = self.store().consumer_offset(addr(p), CONSUMER);
            let offsets = &mut self.model.offsets[p as usize];
            assert!(
                offsets.contains(&offset),
                "partition {p}: consumer offset {offset:?} is none of {offsets:?}"
            );
            offsets.clear();
            offsets.insert(offset);
        }
    }

    fn check_partition(&mut self, p: u32, purge_maybe: bool) {
        let partition = self.store().partition(addr(p)).unwrap();
        let found: BTreeMap<u64, Batch> = partition
            .read(0, u64::MAX, u64::MAX)
            .unwrap()
            .into_iter()
            .map(|b| {
                let stamped = u64::from_le_bytes(b.bytes[..8].try_into().unwrap());
                assert_eq!(
                    stamped, b.base_offset,
                    "partition {p}: stamp and offset agree"
                );
                (
                    b.base_offset,
                    Batch {
                        count: b.message_count,
                        body: b.bytes[8..].to_vec(),
                    },
                )
            })
            .collect();
        let part = &mut self.model.parts[p as usize];
        // A failed segment deletion may have removed the oldest batches (oldest first, so
        // a prefix of them), nothing else.
        let first = found.keys().next().copied().unwrap_or(u64::MAX);
        let cut = first.min(part.gone_below);
        part.acked.retain(|b, _| *b >= cut);
        part.maybe.retain(|b, _| *b >= cut);
        let everything_acked = part.acked.iter().all(|(b, m)| found.get(b) == Some(m));
        if everything_acked {
            for (base, batch) in &found {
                assert!(
                    part.acked.get(base) == Some(batch) || part.maybe.get(base) == Some(batch),
                    "partition {p}: batch at {base} was never written"
                );
            }
        } else {
            // Only a purge that failed and took effect after all may remove acknowledged
            // batches, and only those acknowledged before it.
            assert!(
                purge_maybe && !part.acked_since_failed_purge,
                "partition {p}: acknowledged batches lost: acked {:?}, found {:?}",
                part.acked.keys().collect::<Vec<_>>(),
                found.keys().collect::<Vec<_>>()
            );
            assert!(
                found.iter().all(|(b, m)| part.maybe.get(b) == Some(m)),
                "partition {p}: after a purge, found {:?} that was never written",
                found.keys().collect::<Vec<_>>()
            );
        }
        // Offsets are contiguous inside what is there.
        let mut next = None;
        for (base, batch) in &found {
            if let Some(n) = next {
                assert_eq!(*base, n, "partition {p}: offsets are contiguous");
            }
            next = Some(base + u64::from(batch.count));
        }
        part.acked = found;
        part.maybe.clear();
        part.acked_since_failed_purge = false;
        part.gone_below = 0;
    }
}

fn run_ops(ops: &[Op]) {
    let mut h = Harness::new();
    for op in ops {
        h.run(op);
    }
    h.run(&Op::Reopen);
    // Without faults everything works again.
    for p in 0..PARTITIONS {
        h.run(&Op::Append {
            p,
            count: 1,
            len: 3,
        });
        let acked = h.model.parts[p as usize].acked.len();
        assert!(
            acked > 0,
            "partition {p} takes writes once the faults are gone"
        );
    }
    h.run(&Op::Crash { keep: 0 });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn acknowledged_writes_survive_storage_faults(ops in proptest::collection::vec(op(), 1..60)) {
        run_ops(&ops);
    }
}
