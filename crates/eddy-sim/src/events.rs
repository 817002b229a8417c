//! The event store under the simulator (`--store events`): every node runs the server's own
//! event-store shard groups, [`EventShardMachine`] over a real [`EventStore`], with the
//! group logs and the store's shard logs on the node's crash-simulating [`MemBackend`].
//!
//! * **Requests** are Celeriant request frames, as the published clients send them (V2 or V3
//!   bodies, half each): a write of one event (`allow_create`, idempotency enforced, half of
//!   them with an OCC `expected_version`), a trim, a delete or a schema registration. The
//!   member a client reaches takes the frame as the server's handler does: the server's frame
//!   and body decoders, its routing, its conversion ([`Change`], stamped with that member's
//!   own clock, which the nemesis skews and stalls) and its preparation on that member's store
//!   into the shard's [`Command`], which is proposed. Each operation is its own writer
//!   (client id = operation id + 1, `client_seq` 1), so a retry of an operation whose first
//!   attempt committed must be refused as a duplicate (or as a version conflict, which the
//!   spec checks first), never written twice. OCC guesses come from what clients were told.
//! * **Disks**: the group logs' durability reports wait for the simulator's sync, as on the
//!   log store ([`crate::LogFactory`]); the event store's own shard logs complete writes
//!   before their fdatasync and sync every few records, as a cluster member's do (its Raft
//!   log holds what it applied). A crash, a torn tail, a full disk or failing fdatasyncs hit
//!   both, on one backend per node.
//! * **Answers**: each apply's outcome on a node is recorded by index, with the outcome the
//!   server answers it with ([`store_error`]); when a client is told its operation applied
//!   there, the member's answer goes through the server's [`respond`], its response encoder and
//!   the client's decoder, and must say what the apply did (the version of a one-aggregate
//!   write, the kind's success, an error for a refusal or a failure); the apply's answer
//!   (written at version v, duplicate of version v, conflict, stopped) goes to the [`Ledger`].
//!   A proposal the group refuses is answered as `ClusterEvents::submit` answers it
//!   ([`cluster_error`]: the not-leader code with the leader's client address, or the
//!   backpressure code), and the client follows the address it decodes, or treats the outcome
//!   as unknown.
//! * **Final check** ([`StoreFactory::check_final`]), on every member after the drain: every
//!   aggregate reads the same on every member, versions run 1..=n without a gap, no operation
//!   is stored twice or was never proposed, every write a client was told succeeded (or was a
//!   duplicate of version v) is stored at exactly that version, and every stored write with an
//!   expected version `e` sits at version `e + 1` (OCC decided in log order). A write to two
//!   aggregates is stored in both or in neither. Schemas (registered on shard 0 by clients
//!   racing for a few keys) are the same on every member, each the text of an operation that
//!   proposed it, and every registration a client was told was stored is the one stored.
//!
//! * **Reads**: while the faults go on, clients read random aggregates on random members; the
//!   operation served at a version must be the one every other read got there, and the one
//!   every member finally holds there unless a trim or a delete removed it since.
//!
//! Event groups compact their own logs, as in the server, every [`COMPACT_EVERY`] entries
//! (after syncing the shard log), so [`StoreFactory::compact`] does nothing here; a member that
//! needs entries compacted away gets a snapshot, and before its node sees it the records it
//! lacks are copied from the sender's store ([`StoreFactory::copy_snapshot`], the server's
//! [`copy_shard`]), under the same crashes and disk faults. The store runs without its index threads: its memtables are small, and the frozen ones are
//! written as index runs (and the runs merged) at each of the node's syncs, on the
//! simulator's thread, so the index's flushes, checkpoints and merges meet crashes, torn
//! writes and disk faults too, and a seed replays.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use eddy_codec::event as codec;
use eddy_codec::event::{
    decode_request, decode_response, encode_request, encode_response, ErrorCode, EventRequest,
    EventResponse, ServerError,
};
use eddy_consensus::logstore::RaftLog;
use eddy_consensus::{GroupId, GroupStore, LogEntry, NodeId, ProposeError, Replicated, StoreError};
use eddy_event_store::replicated::{Applied, Command, EventApplied};
use eddy_event_store::{
    AggregateKey, EventStore, EventStoreConfig, EventStoreError, Placement, ReadQuery, Refusal,
    SchemaKey,
};
use eddy_log::{Cache, CommitPool, Durability, LogConfig, MemBackend};
use eddy_replicated::event::change::{cluster_error, respond, store_error, Change, ChangeKind};
use eddy_replicated::event::routing;
use eddy_replicated::groups::{event_group_id, EVENTS_DIR};
use eddy_replicated::shard::{
    copy_shard, refused, stopped, CopyError, EventCompaction, EventShardMachine, ShardSnapshot,
    COPY_CHUNK_BYTES,
};
use eddy_wire::event::{
    decode_response_frame, Decoded, FrameLimits, ProtocolVersion, RequestFrameDecoder,
};

use crate::client::leader_hint;
use crate::config::Millis;
use crate::logdir::Disk;
use crate::recorded::{agree, answers_agree, AppliedLog, Recorder, Recording, Records};
use crate::rng::SimRng;
use crate::store::{DiskFault, StoreFactory};
use crate::workload::{OpId, Workload};

/// Applied entries between two compactions of an event group's log: small, so members that
/// fall behind or lose their directory need snapshots.
pub const COMPACT_EVERY: u64 = 16;

/// Aggregates per shard: few, so concurrent writers meet and OCC conflicts happen.
const KEYS_PER_SHARD: usize = 4;
/// First byte of every event value the workload writes; the operation id follows (u64 LE).
const TAG: u8 = 0xEE;

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What one member serves of an aggregate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Served {
    /// Its lowest readable version (1, or the trim floor).
    floor: u64,
    /// Soft-deleted (nothing readable).
    deleted: bool,
    /// The (version, operation) of each readable event, in version order.
    events: Vec<(u64, OpId)>,
}

/// Per aggregate, what a member serves.
type History = BTreeMap<AggregateKey, Served>;

/// An operation the workload proposed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Proposed {
    /// A write of one event to each of its aggregates (one, or two written atomically), each
    /// with its OCC guard.
    Write(Vec<(AggregateKey, Option<u64>)>),
    /// A trim to a new floor.
    Trim(AggregateKey),
    /// A delete that allows a recreate continuing the versions.
    Delete(AggregateKey),
    /// A schema registration (shard 0) with this text.
    Schema(SchemaKey, String),
}

impl Proposed {
    /// The aggregates it changes, in request order.
    fn keys(&self) -> Vec<AggregateKey> {
        match self {
            Proposed::Write(parts) => parts.iter().map(|(k, _)| *k).collect(),
            Proposed::Trim(k) | Proposed::Delete(k) => vec![*k],
            Proposed::Schema(..) => Vec::new(),
        }
    }
}

/// What a node answered for the entry it applied at an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Written: each aggregate's version after it, in request order.
    Written(Vec<u64>),
    /// Refused as a retry of a write already committed: one of its aggregates, at this
    /// version.
    Duplicate(AggregateKey, u64),
    /// Refused: the aggregate was not at the expected version.
    Conflict,
    /// A trim applied.
    Trimmed,
    /// A delete applied.
    Deleted,
    /// A schema registration stored.
    SchemaStored,
    /// Any other refusal (final: every member refuses alike).
    Refused(String),
    /// This member failed to store it or stopped applying the shard: an error the client
    /// retries (idempotently).
    Failed(String),
}

/// What a member recorded for an entry it applied: the checker's [`Answer`], and the outcome
/// the server answers its client with (the kind's response, or its error code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Told {
    answer: Answer,
    kind: ChangeKind,
    outcome: Result<Applied, ServerError>,
}

/// A request a member took and proposed: what answering it needs.
#[derive(Debug, Clone, Copy)]
struct Pending {
    version: ProtocolVersion,
    kind: ChangeKind,
    correlation_id: Option<u128>,
}

/// The members' clocks read this many ms since the epoch at the run's start.
const EPOCH_MS: u64 = 1_767_225_600_000;

/// Largest frame a simulated client sends or reads.
const MAX_FRAME: u64 = 1 << 20;

/// The client address a member advertises (what a not-leader answer names).
fn client_address(node: NodeId) -> String {
    format!("127.0.0.{node}:8090")
}

/// The member a client address names.
fn node_of_address(address: &str) -> Option<NodeId> {
    let host = address.rsplit_once(':')?.0;
    host.strip_prefix("127.0.0.")?.parse().ok()
}

/// A not-leader answer's leader address, found in the error text as the published client
/// finds it (`"leader_address":"`).
fn leader_address(message: &str) -> Option<&str> {
    const FIELD: &str = "\"leader_address\":\"";
    let start = message.find(FIELD)? + FIELD.len();
    let len = message[start..].find('"')?;
    Some(&message[start..start + len])
}

/// What the server sends for `reply` in `version`, decoded as the published client decodes it.
fn round_trip(
    reply: &Result<EventResponse, ServerError>,
    version: ProtocolVersion,
    correlation_id: Option<u128>,
) -> Result<EventResponse, String> {
    let response = match reply {
        Ok(r) => r.clone(),
        Err(e) => EventResponse::Error(e.to_response(correlation_id)),
    };
    let mut out = Vec::new();
    encode_response(&response, version, &mut out, None, MAX_FRAME)
        .map_err(|e| format!("the answer {response:?} does not encode: {e}"))?;
    let limits = FrameLimits::new(MAX_FRAME);
    let frame = match decode_response_frame(&out, limits) {
        Ok(Decoded::Frame(frame)) if frame.len() == out.len() => frame,
        other => {
            return Err(format!(
                "the answer's frame does not decode whole: {other:?}"
            ))
        }
    };
    let decoded = decode_response(&frame, None, limits)
        .map_err(|e| format!("the answer {response:?} does not decode: {e}"))?;
    if decoded.correlation_id() != correlation_id {
        return Err(format!(
            "the answer carries correlation id {:?}, the request {correlation_id:?}",
            decoded.correlation_id()
        ));
    }
    Ok(decoded)
}

/// What the clients were told, shared by the workload (OCC guesses) and the factory (answers,
/// the final check).
#[derive(Debug, Default)]
pub struct Ledger {
    /// Every operation proposed.
    proposed: BTreeMap<OpId, Proposed>,
    /// The answers clients got, per operation.
    told: BTreeMap<OpId, Vec<Answer>>,
    /// The highest version any client was told per aggregate.
    known: BTreeMap<AggregateKey, u64>,
    /// Every aggregate the workload writes.
    keys: BTreeSet<AggregateKey>,
}

/// The event store of the whole simulated cluster: the factory of every node's directory.
#[derive(Debug)]
pub struct EventFactory {
    pool: CommitPool,
    cache: Arc<Cache>,
    group_log: LogConfig,
    shards: u32,
    ledger: Arc<Mutex<Ledger>>,
    /// Shard indexes written out at the nodes' syncs, for the final report.
    index_flushes: u64,
    /// Every entry any member applied: what a snapshot stands for in a member's record.
    applied: AppliedLog,
    /// What clients' reads were served during the run: (aggregate, version) -> operation.
    observed: BTreeMap<(AggregateKey, u64), OpId>,
}

/// One node's data directory: its disk, its event store while it runs, and what its machines
/// applied and answered.
#[derive(Debug, Default)]
pub struct EventDir {
    disk: Disk,
    store: Option<Arc<EventStore>>,
    records: Records<Told>,
    /// Requests this member took and proposed, by attempt, until answered.
    pending: BTreeMap<(OpId, u64), Pending>,
    /// The attempt being answered (set when it settles).
    answering: Option<Pending>,
    /// Each open shard machine's stop flag (a copy its store could not take stops it).
    stops: BTreeMap<GroupId, Arc<std::sync::atomic::AtomicBool>>,
}

impl EventFactory {
    /// `shards` event-store shards, each a group; `ledger` is shared with the workload.
    pub fn new(shards: u32, ledger: Arc<Mutex<Ledger>>) -> Self {
        EventFactory {
            pool: CommitPool::inline(),
            cache: Arc::new(Cache::new(4 << 20)),
            group_log: LogConfig {
                segment_size: 4096,
                index_interval: 512,
                durability: Durability::Background {
                    max_unsynced_records: u64::MAX,
                    max_unsynced_bytes: u64::MAX,
                },
                ..LogConfig::default()
            },
            shards,
            ledger,
            index_flushes: 0,
            applied: AppliedLog::default(),
            observed: BTreeMap::new(),
        }
    }

    fn store_config(shards: u32) -> EventStoreConfig {
        EventStoreConfig {
            num_shards: shards,
            // Small segments: shard logs roll within a run.
            segment_size: 16 << 10,
            index_interval: 1024,
            // Flushed often, by the simulator (no index threads: determinism).
            memtable_bytes: 2048,
            index_threads: false,
            cache_bytes: 1 << 20,
            // As a cluster member's: writes complete before the shard log's fdatasync (every
            // few records here, so crashes lose and tear unsynced records, which a restarted
            // member applies again from its group's Raft log).
            durability: Durability::Background {
                max_unsynced_records: 8,
                max_unsynced_bytes: 16 << 10,
            },
            ..EventStoreConfig::default()
        }
    }

    fn shard_of(group: GroupId) -> u32 {
        u32::try_from(group.0 - event_group_id(0).0).expect("an event group")
    }
}

/// Opens the event store of `shards` shards on `backend` (on `pool` and `cache`).
fn open_store(
    backend: &MemBackend,
    shards: u32,
    pool: &CommitPool,
    cache: &Arc<Cache>,
) -> Result<EventStore, EventStoreError> {
    let (store, _) = EventStore::open_shared(
        Arc::new(backend.clone()),
        EventFactory::store_config(shards),
        pool,
        Arc::clone(cache),
    )?;
    Ok(store)
}

/// An event shard's apply outcome as its client's answer (the machine's [`Judge`]).
///
/// [`Judge`]: crate::recorded::Judge
fn judge(
    placement: Placement,
    shard: u32,
    entry: &LogEntry,
    outcome: EventApplied,
    recorder: &Recorder<Told>,
) -> Option<Told> {
    let kind = || {
        let command = Command::decode(&entry.data).expect("an event group applies commands");
        ChangeKind::of(&command)
    };
    let completion = match outcome {
        EventApplied::Nothing => return None,
        EventApplied::Stopped => {
            recorder.stall();
            // As `ClusterEvents::submit` answers a stopped shard.
            let kind = kind();
            return Some(Told {
                answer: Answer::Failed("stopped".into()),
                kind,
                outcome: Err(cluster_error(kind, stopped(shard), placement)),
            });
        }
        EventApplied::Applied(c) => c,
    };
    let kind = kind();
    // The inline pool writes and syncs inside the apply: the outcome is already there.
    let result = completion
        .wait_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("an event apply did not complete inline"));
    let answer = match &result {
        Ok(Applied::Write(w)) => Answer::Written(w.versions.clone()),
        Ok(Applied::Trim(_)) => Answer::Trimmed,
        Ok(Applied::Delete(_)) => Answer::Deleted,
        Ok(Applied::Schema) => Answer::SchemaStored,
        Err(EventStoreError::Refused(Refusal::Duplicate {
            key,
            committed_version,
            ..
        })) => Answer::Duplicate(*key, *committed_version),
        Err(EventStoreError::Refused(
            Refusal::VersionConflict { .. } | Refusal::VersionConflicts { .. },
        )) => Answer::Conflict,
        // Already in the shard (copied with a snapshot): this member answers nothing for it.
        Err(EventStoreError::Refused(Refusal::AlreadyApplied { .. })) => return None,
        Err(EventStoreError::Refused(r)) => Answer::Refused(r.to_string()),
        Err(e) => {
            recorder.stall();
            Answer::Failed(e.to_string())
        }
    };
    let outcome = result.map_err(|e| store_error(kind, &e, placement));
    Some(Told {
        answer,
        kind,
        outcome,
    })
}

impl StoreFactory for EventFactory {
    type Outcome = u64;
    type Dir = EventDir;

    fn create(&mut self, _node: NodeId) -> EventDir {
        EventDir {
            records: Records::sharing(Arc::clone(&self.applied)),
            ..EventDir::default()
        }
    }

    fn open(
        &mut self,
        dir: &mut EventDir,
        group: GroupId,
    ) -> Result<Box<dyn GroupStore<Outcome = u64>>, StoreError> {
        if dir.store.is_none() {
            let store = open_store(&dir.disk.backend, self.shards, &self.pool, &self.cache)
                .map_err(|e| StoreError::Storage(e.to_string().into()))?;
            dir.store = Some(Arc::new(store));
            dir.records.restarted();
        }
        let store = dir.store.as_ref().expect("opened above");
        let shard = Self::shard_of(group);
        let log = RaftLog::open(
            Arc::new(dir.disk.backend.clone()),
            PathBuf::from(EVENTS_DIR).join(format!("shard-{shard:03}")),
            self.group_log,
            &self.pool,
            Arc::clone(&self.cache),
        )?;
        let compaction = EventCompaction {
            every: COMPACT_EVERY,
            keep: COMPACT_EVERY / 4,
        };
        let inner = EventShardMachine::open(
            Arc::clone(store),
            shard,
            &log,
            Arc::new(dir.disk.backend.clone()),
            compaction,
        )?;
        dir.stops.insert(group, inner.stopped_flag());
        let placement = *store.placement();
        let machine = Recording::new(
            inner,
            dir.records.recorder(group),
            Box::new(move |entry, outcome, recorder| {
                judge(placement, shard, entry, outcome, recorder)
            }),
        );
        let replicated = Replicated::open(log, machine)?;
        let log = replicated.raft_log().log().clone();
        Ok(Box::new(dir.disk.hold(group, log, replicated)))
    }

    /// The member takes the client's frame as the server does: decodes it, routes it,
    /// converts it (stamped with the member's own clock) and prepares its shard's command on
    /// its own store (schemas, input checks).
    fn prepare(
        &mut self,
        dir: &mut EventDir,
        group: GroupId,
        attempt: (OpId, u64),
        payload: Bytes,
        now: Millis,
    ) -> Result<Bytes, String> {
        let op = attempt.0;
        let store = dir
            .store
            .as_ref()
            .ok_or("a member took a request while down")?;
        let limits = FrameLimits::new(MAX_FRAME);
        let mut decoder = RequestFrameDecoder::new(limits);
        let frame = match decoder.decode(&payload) {
            Ok(Decoded::Frame(frame)) if frame.len() == payload.len() => frame,
            other => {
                return Err(format!(
                    "op {op}: the request frame does not decode whole: {other:?}"
                ))
            }
        };
        let version = frame.header.version;
        let request = decode_request(&frame, None, limits)
            .map_err(|e| format!("op {op}: the request does not decode: {e}"))?;
        routing::route(store.placement(), &request)
            .map_err(|e| format!("op {op}: the request does not route: {e:?}"))?;
        let change = Change::from_request(request, EPOCH_MS + now)
            .ok_or_else(|| format!("op {op}: the request is not a change"))?;
        let prepared = change
            .prepare(store)
            .map_err(|e| format!("op {op}: the member refused it before proposing: {e:?}"))?;
        if event_group_id(prepared.shard) != group {
            return Err(format!(
                "op {op}: prepared for shard {}, sent to {group}",
                prepared.shard
            ));
        }
        dir.pending.insert(
            attempt,
            Pending {
                version,
                kind: prepared.kind,
                correlation_id: prepared.correlation_id,
            },
        );
        Ok(prepared.command.encode())
    }

    fn unsynced(&self, dir: &EventDir) -> bool {
        dir.disk.unsynced()
    }

    fn sync(&mut self, dir: &mut EventDir) {
        dir.disk.sync();
        if let Some(store) = &dir.store {
            self.index_flushes += store.run_index_work() as u64;
        }
    }

    fn crash(&mut self, dir: &mut EventDir, tear: bool, rng: &mut SimRng) -> u64 {
        dir.store = None;
        dir.disk.crash(tear, rng)
    }

    fn set_fault(&mut self, dir: &mut EventDir, fault: Option<DiskFault>) {
        dir.disk.set_fault(fault);
    }

    fn compact(&mut self, _dir: &mut EventDir, _group: GroupId, _through: u64) -> bool {
        // Event groups compact themselves (see the module docs).
        false
    }

    fn copy_snapshot(
        &mut self,
        from: &EventDir,
        to: &mut EventDir,
        group: GroupId,
        data: &Bytes,
    ) -> Result<bool, String> {
        let snapshot = ShardSnapshot::decode(data).ok_or("not an event shard snapshot")?;
        let (Some(sender), Some(receiver)) = (&from.store, &to.store) else {
            return Err("a store is closed".into());
        };
        match copy_shard(receiver, &snapshot, |lo, hi| {
            sender
                .export_records(snapshot.shard, lo, hi, COPY_CHUNK_BYTES / 64)
                .map_err(|e| e.to_string())
        }) {
            Ok(_) => Ok(true),
            Err(e @ CopyError::Fetch(_)) => Err(e.to_string()),
            Err(e @ CopyError::Local(_)) => {
                // As the server: the shard stops on this member until it restarts.
                if let Some(flag) = to.stops.get(&group) {
                    flag.store(true, std::sync::atomic::Ordering::Release);
                }
                to.records.stall();
                Err(e.to_string())
            }
        }
    }

    fn state(&self, dir: &EventDir, group: GroupId) -> Vec<(u64, Bytes)> {
        dir.records.state(group)
    }

    fn settled(&mut self, dir: &mut EventDir, _group: GroupId, attempt: (OpId, u64)) {
        dir.answering = dir.pending.remove(&attempt);
    }

    fn acked(
        &mut self,
        dir: &mut EventDir,
        group: GroupId,
        index: u64,
        op: OpId,
    ) -> Result<bool, String> {
        let told = dir.records.answer(group, index).ok_or_else(|| {
            format!("op {op}: acknowledged at {group} index {index} with no answer recorded there")
        })?;
        let pending = dir
            .answering
            .take()
            .ok_or_else(|| format!("op {op}: answered at {group} without being taken"))?;
        // The member answers as the server does, and the client decodes that answer.
        let reply = respond(pending.kind, pending.correlation_id, told.outcome.clone());
        let decoded = round_trip(&reply, pending.version, pending.correlation_id)
            .map_err(|e| format!("op {op} at {group} index {index}: {e}"))?;
        let consistent = match (&told.answer, &decoded) {
            // The version is told when the write had one aggregate (§ WriteResponse).
            (Answer::Written(versions), EventResponse::Write(w)) => match versions.as_slice() {
                [one] => w.max_aggregate_version == Some(*one),
                _ => w.max_aggregate_version.is_none(),
            },
            (Answer::Trimmed, EventResponse::TrimStart(_))
            | (Answer::Deleted, EventResponse::Delete(_))
            | (Answer::SchemaStored, EventResponse::RegisterSchema(_))
            | (
                Answer::Duplicate(..) | Answer::Conflict | Answer::Refused(_) | Answer::Failed(_),
                EventResponse::Error(_),
            ) => true,
            _ => false,
        };
        if !consistent {
            return Err(format!(
                "op {op} at {group} index {index}: the member applied {:?} but its client \
                 decodes {decoded:?}",
                told.answer
            ));
        }
        let answer = told.answer;
        let mut ledger = guard(&self.ledger);
        let keys = ledger
            .proposed
            .get(&op)
            .map(Proposed::keys)
            .unwrap_or_default();
        for (key, version) in told_versions(&keys, &answer) {
            let known = ledger.known.entry(key).or_default();
            *known = (*known).max(version);
        }
        // A stopped shard or a failed write is an error the client retries (idempotently).
        let settled = !matches!(answer, Answer::Failed(_));
        ledger.told.entry(op).or_default().push(answer);
        Ok(settled)
    }

    /// A client reads one aggregate of the shard on this member, as the server's `Read`
    /// does (what the member applied: committed changes only).
    fn observe(
        &mut self,
        dir: &mut EventDir,
        group: GroupId,
        rng: &mut SimRng,
    ) -> Result<(), String> {
        let Some(store) = dir.store.as_ref() else {
            return Ok(());
        };
        let shard = Self::shard_of(group);
        let keys: Vec<AggregateKey> = guard(&self.ledger)
            .keys
            .iter()
            .filter(|k| store.placement().shard_of(k) == shard)
            .copied()
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let key = keys[rng.index(keys.len())];
        // A failing read is the client's error, not a wrong answer.
        let Ok(history) = read_all(store, &BTreeSet::from([key])) else {
            return Ok(());
        };
        for &(version, op) in &history[&key].events {
            let seen = self.observed.entry((key, version)).or_insert(op);
            if *seen != op {
                return Err(format!(
                    "aggregate {} version {version} served op {op}, another read op {seen}",
                    key.aggregate_id
                ));
            }
        }
        Ok(())
    }

    fn told_error(
        &mut self,
        dir: &mut EventDir,
        group: GroupId,
        error: ProposeError,
    ) -> Result<ProposeError, String> {
        let Some(pending) = dir.answering.take() else {
            return Ok(error);
        };
        // As `ClusterEvents::submit` turns the group's refusal into the client's answer (the
        // leader this member knows of: the engine's hint).
        let hint = leader_hint(&error);
        let refused = refused(&error, || hint.map(client_address));
        let placement = *dir
            .store
            .as_ref()
            .ok_or("a member answered while down")?
            .placement();
        let reply = Err(cluster_error(pending.kind, refused, placement));
        let decoded = round_trip(&reply, pending.version, pending.correlation_id)
            .map_err(|e| format!("{group}: {e}"))?;
        let EventResponse::Error(e) = decoded else {
            return Err(format!("{group}: {error} answered as {decoded:?}"));
        };
        // What the published client makes of it: a not-leader code is followed to the leader
        // it names; anything else may have been committed.
        let not_leader = [
            ErrorCode::WriteNotLeader,
            ErrorCode::TrimNotLeader,
            ErrorCode::DeleteNotLeader,
            ErrorCode::RegisterSchemaCannotAcceptWrites,
        ]
        .iter()
        .any(|c| c.code() == e.error_code);
        Ok(if not_leader {
            ProposeError::NotLeader {
                group,
                leader: leader_address(&e.error_message).and_then(node_of_address),
            }
        } else {
            ProposeError::Unknown
        })
    }

    fn stalled(&self, dir: &EventDir) -> bool {
        dir.records.stalled()
    }

    fn check_final(&self, dirs: &[(NodeId, &EventDir)]) -> Result<String, String> {
        let ledger = guard(&self.ledger);
        let mut views = Vec::with_capacity(dirs.len());
        for (node, dir) in dirs {
            let store = dir
                .store
                .as_ref()
                .ok_or_else(|| format!("node {node}: no event store open at the end"))?;
            let held = read_all(store, &ledger.keys).map_err(|e| format!("node {node}: {e}"))?;
            views.push((*node, held));
        }
        let held = agree(views).map_err(|e| format!("event stores differ at {e}"))?;
        let mut schema_views = Vec::with_capacity(dirs.len());
        for (node, dir) in dirs {
            let store = dir.store.as_ref().expect("checked above");
            let mut schemas = BTreeMap::new();
            for key in schema_keys() {
                let stored = store
                    .schema(&key)
                    .map_err(|e| format!("node {node}: schema {key:?}: {e}"))?;
                schemas.insert(key, stored.map(|s| s.schema));
            }
            schema_views.push((*node, schemas));
        }
        let schemas = agree(schema_views).map_err(|e| format!("schemas differ at {e}"))?;
        let records: Vec<(NodeId, &Records<Told>)> =
            dirs.iter().map(|(n, d)| (*n, &d.records)).collect();
        let compared = answers_agree(&records, |t| !matches!(t.answer, Answer::Failed(_)))?;
        // Every read during the run served what every member finally holds there (or what a
        // trim or a delete removed since).
        let mut reads_checked = 0;
        for (&(key, version), &op) in &self.observed {
            let Some(served) = held.get(&key) else {
                return Err(format!(
                    "aggregate {} was read but is not held",
                    key.aggregate_id
                ));
            };
            if served.deleted || version < served.floor {
                continue;
            }
            let finally = served.events.iter().find(|(v, _)| *v == version);
            if finally.map(|(_, o)| *o) != Some(op) {
                return Err(format!(
                    "aggregate {} version {version}: a read was served op {op}, every member \
                     finally holds {finally:?} (a read of a change that was not committed)",
                    key.aggregate_id
                ));
            }
            reads_checked += 1;
        }
        Ok(format!(
            "{}; {}; {compared} answers the same on several members; {reads_checked} events \
             served to reads during the run found again; {} index flushes",
            check_history(&ledger, &held)?,
            check_schemas(&ledger, &schemas)?,
            self.index_flushes
        ))
    }
}

/// What `store` serves of every aggregate of `keys`.
fn read_all(store: &EventStore, keys: &BTreeSet<AggregateKey>) -> Result<History, String> {
    let mut out = BTreeMap::new();
    for key in keys {
        let mut served = Served::default();
        let details = match store.details(key) {
            Ok(d) => Some(d),
            Err(EventStoreError::Refused(Refusal::NotFound { .. })) => None,
            Err(e) => return Err(format!("aggregate {}: {e}", key.aggregate_id)),
        };
        if let Some(d) = details {
            served.floor = d.min_aggregate_version;
            served.deleted = d.is_deleted;
        }
        let mut from = served.floor.max(1);
        while details.is_some() && !served.deleted {
            let page = store
                .read(key, &ReadQuery::from_version(from))
                .map_err(|e| format!("aggregate {}: {e}", key.aggregate_id))?;
            for batch in &page.batches {
                for event in &batch.events {
                    let op = op_of_value(&event.value).ok_or_else(|| {
                        format!("aggregate {}: a foreign event value", key.aggregate_id)
                    })?;
                    served.events.push((batch.version, op));
                }
            }
            match page.next_version {
                Some(next) if next > from => from = next,
                _ => break,
            }
        }
        out.insert(*key, served);
    }
    Ok(out)
}

/// The (aggregate, version) pairs an answer told a client, given the operation's aggregates.
fn told_versions(keys: &[AggregateKey], answer: &Answer) -> Vec<(AggregateKey, u64)> {
    match answer {
        Answer::Written(versions) => keys.iter().copied().zip(versions.iter().copied()).collect(),
        Answer::Duplicate(key, version) => vec![(*key, *version)],
        _ => Vec::new(),
    }
}

/// The event-store guarantees over one member's (agreed) history.
fn check_history(ledger: &Ledger, held: &History) -> Result<String, String> {
    let at = stored_versions(ledger, held)?;
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    counts.insert("stored multi-aggregate writes", check_atomic(ledger, &at)?);
    check_answers(ledger, held, &at, &mut counts)?;
    Ok(format!(
        "event stores agree: {} events readable; answers: {counts:?}",
        at.len()
    ))
}

/// Where each op's event is stored, by (op, aggregate), after checking every served history:
/// no gap, each event a proposed write to that aggregate, OCC decided in log order, no op
/// stored twice.
fn stored_versions(
    ledger: &Ledger,
    held: &History,
) -> Result<BTreeMap<(OpId, AggregateKey), u64>, String> {
    let mut at: BTreeMap<(OpId, AggregateKey), u64> = BTreeMap::new();
    for (key, served) in held {
        for (due, &(version, op)) in (served.floor.max(1)..).zip(&served.events) {
            if version != due {
                return Err(format!(
                    "aggregate {}: version {version} where {due} was due (a gap)",
                    key.aggregate_id
                ));
            }
            let expected = match ledger.proposed.get(&op) {
                Some(Proposed::Write(parts)) => match parts.iter().find(|(k, _)| k == key) {
                    Some((_, expected)) => *expected,
                    None => return Err(format!("op {op} ({parts:?}) is stored under {key:?}")),
                },
                Some(other) => return Err(format!("op {op} ({other:?}) is stored under {key:?}")),
                None => return Err(format!("op {op} is stored but was never proposed")),
            };
            if let Some(e) = expected {
                if version != e + 1 {
                    return Err(format!(
                        "op {op} expected version {e} but is stored at version {version} \
                         (OCC not decided in log order)"
                    ));
                }
            }
            if let Some(earlier) = at.insert((op, *key), version) {
                return Err(format!(
                    "op {op} is stored twice (versions {earlier} and {version}): idempotency failed"
                ));
            }
        }
    }
    Ok(at)
}

/// Atomicity: a write to several aggregates (never trimmed or deleted) is in all or none;
/// returns how many such writes are stored.
fn check_atomic(ledger: &Ledger, at: &BTreeMap<(OpId, AggregateKey), u64>) -> Result<u64, String> {
    let mut atomic = 0;
    for (op, proposed) in &ledger.proposed {
        let Proposed::Write(parts) = proposed else {
            continue;
        };
        if parts.len() < 2 {
            continue;
        }
        let stored: Vec<bool> = parts
            .iter()
            .map(|(k, _)| at.contains_key(&(*op, *k)))
            .collect();
        if stored.iter().any(|s| *s) {
            if !stored.iter().all(|s| *s) {
                return Err(format!(
                    "op {op} wrote {parts:?} atomically, but only {stored:?} of it is stored"
                ));
            }
            atomic += 1;
        }
    }
    Ok(atomic)
}

/// Every answer a client was told is what the members store (unless trimmed or deleted
/// since); counts the answers by kind into `counts`.
fn check_answers(
    ledger: &Ledger,
    held: &History,
    at: &BTreeMap<(OpId, AggregateKey), u64>,
    counts: &mut BTreeMap<&'static str, u64>,
) -> Result<(), String> {
    for (op, answers) in &ledger.told {
        let keys = ledger
            .proposed
            .get(op)
            .map(Proposed::keys)
            .unwrap_or_default();
        for answer in answers {
            let kind = match answer {
                Answer::Written(_) => "written",
                Answer::Duplicate(..) => "duplicates",
                Answer::Conflict => "conflicts",
                Answer::Trimmed => "trims",
                Answer::Deleted => "deletes",
                Answer::SchemaStored => "schemas stored",
                Answer::Refused(_) => "refused",
                Answer::Failed(_) => "failed",
            };
            *counts.entry(kind).or_default() += 1;
            for (key, version) in told_versions(&keys, answer) {
                let served = held.get(&key);
                if served.is_some_and(|s| s.deleted || version < s.floor) {
                    // Trimmed or deleted since: no longer readable.
                    *counts.entry("since trimmed or deleted").or_default() += 1;
                    continue;
                }
                match at.get(&(*op, key)) {
                    Some(&stored) if stored == version => {}
                    Some(&stored) => {
                        return Err(format!(
                            "op {op}: told version {version} of {key:?} ({answer:?}), stored at \
                             {stored}"
                        ))
                    }
                    None => {
                        return Err(format!(
                            "op {op}: told {answer:?} but no member stores it in {key:?} \
                             (acknowledged write lost)"
                        ))
                    }
                }
            }
        }
    }
    Ok(())
}

/// The schema keys the workload registers: an aggregate type no workload write has, so the
/// schemas never govern the writes (which the proposer validates, not the apply).
fn schema_keys() -> [SchemaKey; 3] {
    [1, 2, 3].map(|major| SchemaKey {
        org_id: 1,
        aggregate_type_id: 7,
        event_type_major: major,
        event_type_minor: 0,
    })
}

/// The JSON Schema text operation `op` registers (its id inside, to tell the winner).
fn schema_text(op: OpId) -> String {
    format!(r#"{{"type":"object","description":"op {op}"}}"#)
}

/// Schema registrations over the schemas every member agrees on: each key registered at
/// most once, by an operation that proposed that text for it; an operation told its
/// registration was stored is the one stored, and one told the key exists sees it stored.
fn check_schemas(
    ledger: &Ledger,
    stored: &BTreeMap<SchemaKey, Option<String>>,
) -> Result<String, String> {
    let mut registered = 0;
    for (key, text) in stored {
        let Some(text) = text else { continue };
        registered += 1;
        let op = ledger.proposed.iter().find_map(|(op, p)| match p {
            Proposed::Schema(k, t) if k == key && t == text => Some(*op),
            _ => None,
        });
        if op.is_none() {
            return Err(format!(
                "schema {key:?} holds {text:?}, never proposed for it"
            ));
        }
    }
    for (op, answers) in &ledger.told {
        let Some(Proposed::Schema(key, text)) = ledger.proposed.get(op) else {
            continue;
        };
        let held = stored.get(key).cloned().flatten();
        for answer in answers {
            match answer {
                Answer::SchemaStored if held.as_ref() != Some(text) => {
                    return Err(format!(
                        "op {op}: told its schema {key:?} was stored, but {held:?} is \
                         (acknowledged registration lost)"
                    ));
                }
                Answer::Refused(why) if held.is_none() => {
                    return Err(format!(
                        "op {op}: registration of {key:?} refused ({why}), yet none is stored"
                    ));
                }
                _ => {}
            }
        }
    }
    Ok(format!("{registered} schemas registered"))
}

fn op_of_value(value: &[u8]) -> Option<OpId> {
    if value.len() < 9 || value[0] != TAG {
        return None;
    }
    Some(u64::from_le_bytes(value[1..9].try_into().expect("8 bytes")))
}

/// Celeriant writes to the event shards, prepared as the server prepares them.
pub struct EventWorkload {
    shards: u32,
    keys: Vec<Vec<AggregateKey>>,
    /// A store of the same layout, only for [`EventStore::prepare_write`] (never written).
    template: EventStore,
    ledger: Arc<Mutex<Ledger>>,
}

impl std::fmt::Debug for EventWorkload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventWorkload")
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}

impl EventWorkload {
    /// Writes to `shards` shards, a few aggregates each; `ledger` is shared with
    /// the [`EventFactory`].
    ///
    /// # Panics
    /// The template store does not open (an in-memory backend: it does).
    pub fn new(shards: u32, ledger: Arc<Mutex<Ledger>>) -> Self {
        let template = open_store(
            &MemBackend::new(),
            shards,
            &CommitPool::inline(),
            &Arc::new(Cache::new(1 << 20)),
        )
        .expect("an in-memory event store opens");
        let mut keys = vec![Vec::new(); shards as usize];
        let mut id = 1u128;
        while keys.iter().any(|k| k.len() < KEYS_PER_SHARD) {
            let key = AggregateKey::new(1, 1, id);
            let shard = template.shard_of(&key) as usize;
            if keys[shard].len() < KEYS_PER_SHARD {
                keys[shard].push(key);
            }
            id += 1;
        }
        guard(&ledger).keys = keys.iter().flatten().copied().collect();
        EventWorkload {
            shards,
            keys,
            template,
            ledger,
        }
    }
}

impl Workload for EventWorkload {
    fn groups(&self) -> Vec<GroupId> {
        (0..self.shards).map(event_group_id).collect()
    }

    fn choose_group(&mut self, rng: &mut SimRng) -> GroupId {
        event_group_id(u32::try_from(rng.below(u64::from(self.shards))).expect("small"))
    }

    /// A write (half with an OCC guess); on half the aggregates also a trim to half the known
    /// version (5 in 100) or a delete that a later write recreates, continuing the versions
    /// (2 in 100); on shard 0, 3 in 100 register a schema under one of a few keys, racing.
    fn payload(&mut self, group: GroupId, id: OpId, rng: &mut SimRng) -> Bytes {
        let shard = EventFactory::shard_of(group) as usize;
        let key = self.keys[shard][rng.index(self.keys[shard].len())];
        let mut ledger = guard(&self.ledger);
        let known = ledger.known.get(&key).copied().unwrap_or(0);
        let client_id = u128::from(id) + 1;
        // Half the aggregates are never trimmed or deleted: every write to them stays readable.
        let kind = if key.aggregate_id.is_multiple_of(2) {
            rng.below(100)
        } else {
            99
        };
        let kind = if shard == 0 && rng.chance(0.03) {
            100
        } else {
            kind
        };
        let correlation_id = Some(u128::from(id));
        let (proposed, request) = match kind {
            100 => {
                let keys = schema_keys();
                let schema_key = keys[rng.index(keys.len())];
                let schema = schema_text(id);
                let request = EventRequest::RegisterSchema(codec::RegisterSchemaRequest {
                    correlation_id,
                    client_id,
                    user_id: None,
                    schema_key: codec::SchemaKey {
                        org_id: schema_key.org_id,
                        aggregate_type_id: schema_key.aggregate_type_id,
                        event_type_major: schema_key.event_type_major,
                        event_type_minor: schema_key.event_type_minor,
                    },
                    schema_type: 0,
                    schema: schema.clone(),
                });
                (Proposed::Schema(schema_key, schema), request)
            }
            0..=4 => {
                let request = EventRequest::TrimStart(codec::TrimStartRequest {
                    correlation_id,
                    aggregate_key: wire_key(key),
                    keep_from_aggregate_version: known.div_ceil(2).max(1),
                    client_id,
                    user_id: None,
                });
                (Proposed::Trim(key), request)
            }
            5..=6 => {
                let delete = codec::SingleAggregateDelete {
                    allow_recreate: true,
                    allow_sequence_continuation: true,
                    expected_version: None,
                };
                let request = EventRequest::Delete(codec::DeleteRequest {
                    correlation_id,
                    client_id,
                    user_id: None,
                    deletes: BTreeMap::from([(wire_key(key), delete)]),
                });
                (Proposed::Delete(key), request)
            }
            _ => {
                let mut parts = vec![(key, rng.chance(0.5).then_some(known))];
                // One write in five to a never-trimmed aggregate also writes a second one of
                // its shard, atomically.
                let others: Vec<AggregateKey> = self.keys[shard]
                    .iter()
                    .copied()
                    .filter(|k| *k != key && !k.aggregate_id.is_multiple_of(2))
                    .collect();
                if !key.aggregate_id.is_multiple_of(2) && !others.is_empty() && rng.chance(0.2) {
                    let other = others[rng.index(others.len())];
                    let known = ledger.known.get(&other).copied().unwrap_or(0);
                    parts.push((other, rng.chance(0.5).then_some(known)));
                }
                let request = write_request(&parts, id, rng);
                // The request carries its aggregates in key order, and so does every answer.
                let parts = request
                    .writes
                    .iter()
                    .map(|(k, w)| (store_key(k), w.expected_version))
                    .collect();
                (Proposed::Write(parts), EventRequest::Write(request))
            }
        };
        assert!(
            proposed
                .keys()
                .iter()
                .all(|k| self.template.shard_of(k) as usize == shard),
            "the keys were placed on their shard"
        );
        ledger.proposed.insert(id, proposed);
        // Half the clients speak V2 (bincode, the Rust client), half V3 (MessagePack).
        let version = if rng.chance(0.5) {
            ProtocolVersion::V2
        } else {
            ProtocolVersion::V3
        };
        let mut frame = Vec::new();
        encode_request(&request, version, &mut frame, None, MAX_FRAME)
            .expect("the workload's requests encode");
        Bytes::from(frame)
    }

    fn op_id(&self, _group: GroupId, payload: &[u8]) -> Option<OpId> {
        let client_id = match Command::decode(&Bytes::copy_from_slice(payload)).ok()? {
            Command::Write { client_id, .. } => client_id,
            Command::Trim(t) => t.client_id,
            Command::Delete(d) => d.client_id,
            Command::RegisterSchema(s) => s.client_id,
        };
        u64::try_from(client_id - 1).ok()
    }
}

/// The wire form of a store key.
fn wire_key(key: AggregateKey) -> codec::AggregateKey {
    codec::AggregateKey::new(key.org_id, key.aggregate_type_id, key.aggregate_id)
}

/// The store form of a wire key.
fn store_key(key: &codec::AggregateKey) -> AggregateKey {
    AggregateKey::new(key.org_id, key.aggregate_type_id, key.aggregate_id)
}

/// Operation `id`'s write of one event to each aggregate of `parts` (with its OCC guard), as
/// a client sends it: its own writer (client id `id + 1`, `client_seq` 1, idempotency
/// enforced), allowed to create the aggregate.
fn write_request(
    parts: &[(AggregateKey, Option<u64>)],
    id: OpId,
    rng: &mut SimRng,
) -> codec::WriteRequest {
    let writes = parts
        .iter()
        .map(|&(key, expected)| {
            let pad = rng.below(64);
            let mut value = BytesMut::with_capacity(9 + usize::try_from(pad).expect("small"));
            value.put_u8(TAG);
            value.put_u64_le(id);
            for _ in 0..pad {
                value.put_u8(rng.below(256) as u8);
            }
            let event = codec::Event {
                client_seq: 1,
                event_type_major: 1,
                event_value: value.freeze(),
                ..codec::Event::default()
            };
            let write = codec::SingleAggregateWrite {
                events: vec![event],
                allow_create: true,
                expected_version: expected,
                enforce_client_idempotency: true,
            };
            (wire_key(key), write)
        })
        .collect();
    codec::WriteRequest {
        correlation_id: Some(u128::from(id)),
        client_id: u128::from(id) + 1,
        user_id: None,
        writes,
    }
}

/// The factory and workload of one `--store events` run, sharing one ledger.
pub fn pair(shards: u32) -> (EventFactory, EventWorkload) {
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    (
        EventFactory::new(shards, Arc::clone(&ledger)),
        EventWorkload::new(shards, ledger),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_client_frames_a_member_prepares_into_its_shard_s_commands() {
        let (mut factory, mut w) = pair(2);
        let mut dir = factory.create(1);
        let _groups: Vec<_> = w
            .groups()
            .into_iter()
            .map(|g| factory.open(&mut dir, g).unwrap())
            .collect();
        let mut rng = SimRng::new(3);
        let mut kinds = BTreeSet::new();
        for id in 0..1000 {
            let group = w.choose_group(&mut rng);
            let frame = w.payload(group, id, &mut rng);
            let p = factory
                .prepare(&mut dir, group, (id, 1), frame, 1_000)
                .unwrap();
            assert_eq!(w.op_id(group, &p), Some(id));
            let (kind, key) = match Command::decode(&p).unwrap() {
                Command::Write { parts, .. } => ("write", parts[0].0.key),
                Command::Trim(t) => ("trim", t.key),
                Command::Delete(d) => ("delete", d.deletes[0].key),
                Command::RegisterSchema(_) => {
                    assert_eq!(group, event_group_id(0), "schemas live on shard 0");
                    kinds.insert("schema");
                    continue;
                }
            };
            kinds.insert(kind);
            assert_eq!(event_group_id(w.template.shard_of(&key)), group);
        }
        assert_eq!(kinds.len(), 4, "{kinds:?}");
        assert_eq!(
            dir.pending.len(),
            1000,
            "each prepared request waits for its answer"
        );
        assert_eq!(w.op_id(event_group_id(0), b""), None);
        // A frame that is not a whole request fails the run.
        let frame = w.payload(event_group_id(1), 5_000, &mut rng);
        let cut = frame.slice(..frame.len() - 1);
        assert!(factory
            .prepare(&mut dir, event_group_id(1), (5_000, 1), cut, 1_000)
            .is_err());
    }

    #[test]
    fn a_refused_proposal_reaches_the_client_as_the_server_s_code_and_address() {
        let (mut factory, mut w) = pair(2);
        let mut dir = factory.create(1);
        let group = event_group_id(1);
        let _g = factory.open(&mut dir, group).unwrap();
        let mut rng = SimRng::new(9);
        let mut told = |error: ProposeError, id: OpId| {
            let frame = w.payload(group, id, &mut rng);
            factory
                .prepare(&mut dir, group, (id, 1), frame, 1_000)
                .unwrap();
            factory.settled(&mut dir, group, (id, 1));
            factory.told_error(&mut dir, group, error).unwrap()
        };
        let redirect = ProposeError::NotLeader {
            group,
            leader: Some(3),
        };
        assert_eq!(told(redirect.clone(), 1), redirect);
        let unknown_leader = ProposeError::NotLeader {
            group,
            leader: None,
        };
        assert_eq!(told(unknown_leader.clone(), 2), unknown_leader);
        assert_eq!(told(ProposeError::Superseded, 3), unknown_leader);
        // Backpressure: the client cannot tell a dropped proposal from one that may commit.
        assert_eq!(told(ProposeError::Dropped, 4), ProposeError::Unknown);
        assert_eq!(told(ProposeError::Failed(group), 5), ProposeError::Unknown);
        assert_eq!(
            leader_address(r#"{"leader_address":"127.0.0.2:8090"}"#),
            Some("127.0.0.2:8090")
        );
        assert_eq!(node_of_address("127.0.0.2:8090"), Some(2));
        assert_eq!(node_of_address("10.0.0.2:8090"), None);
    }

    fn served(floor: u64, events: &[(u64, OpId)]) -> Served {
        Served {
            floor,
            deleted: false,
            events: events.to_vec(),
        }
    }

    #[test]
    fn the_history_check_catches_a_lost_write_a_duplicate_a_gap_and_a_broken_occ() {
        let key = AggregateKey::new(1, 1, 1);
        let mut ledger = Ledger::default();
        ledger.keys.insert(key);
        for op in 1..=3 {
            ledger
                .proposed
                .insert(op, Proposed::Write(vec![(key, None)]));
        }
        ledger
            .proposed
            .insert(4, Proposed::Write(vec![(key, Some(0))]));
        ledger.proposed.insert(5, Proposed::Trim(key));
        ledger.told.insert(1, vec![Answer::Written(vec![1])]);
        ledger
            .told
            .insert(2, vec![Answer::Written(vec![2]), Answer::Duplicate(key, 2)]);
        let check = |view: Served| check_history(&ledger, &BTreeMap::from([(key, view)]));
        assert!(check(served(1, &[(1, 1), (2, 2)])).is_ok());
        // Trimmed: the told version below the floor is no longer readable.
        assert!(check(served(2, &[(2, 2)])).is_ok());
        let deleted = Served {
            deleted: true,
            ..served(1, &[])
        };
        assert!(check(deleted).is_ok());

        assert!(check(served(1, &[(1, 1)])).unwrap_err().contains("lost"));
        let twice = check(served(1, &[(1, 1), (2, 2), (3, 2)]));
        assert!(twice.unwrap_err().contains("twice"));
        assert!(check(served(1, &[(1, 1), (3, 2)]))
            .unwrap_err()
            .contains("gap"));
        let occ = check(served(1, &[(1, 1), (2, 2), (3, 4)]));
        assert!(occ.unwrap_err().contains("OCC"));
        let foreign = check(served(1, &[(1, 1), (2, 2), (3, 9)]));
        assert!(foreign.unwrap_err().contains("never proposed"));
        let not_a_write = check(served(1, &[(1, 1), (2, 2), (3, 5)]));
        assert!(not_a_write.unwrap_err().contains("Trim"));
    }

    #[test]
    fn the_schema_check_catches_a_lost_registration_and_a_foreign_text() {
        let [key, other, _] = schema_keys();
        let mut ledger = Ledger::default();
        ledger
            .proposed
            .insert(1, Proposed::Schema(key, schema_text(1)));
        ledger
            .proposed
            .insert(2, Proposed::Schema(key, schema_text(2)));
        ledger.told.insert(1, vec![Answer::SchemaStored]);
        ledger
            .told
            .insert(2, vec![Answer::Refused("already registered".into())]);
        let stored = |text: Option<String>| BTreeMap::from([(key, text), (other, None)]);
        assert!(check_schemas(&ledger, &stored(Some(schema_text(1)))).is_ok());
        let lost = check_schemas(&ledger, &stored(Some(schema_text(2))));
        assert!(lost.unwrap_err().contains("lost"));
        let none = check_schemas(&ledger, &stored(None));
        assert!(none.is_err());
        let foreign = check_schemas(&ledger, &stored(Some(schema_text(3))));
        assert!(foreign.unwrap_err().contains("never proposed"));
    }

    #[test]
    fn the_history_check_catches_half_a_multi_aggregate_write() {
        let (a, b) = (AggregateKey::new(1, 1, 1), AggregateKey::new(1, 1, 3));
        let mut ledger = Ledger::default();
        ledger.keys.extend([a, b]);
        ledger
            .proposed
            .insert(1, Proposed::Write(vec![(a, None), (b, Some(0))]));
        ledger.proposed.insert(2, Proposed::Write(vec![(b, None)]));
        let check =
            |sa: Served, sb: Served| check_history(&ledger, &BTreeMap::from([(a, sa), (b, sb)]));
        assert!(check(served(1, &[(1, 1)]), served(1, &[(1, 1), (2, 2)])).is_ok());
        assert!(check(served(1, &[]), served(1, &[(1, 2)])).is_ok());
        let half = check(served(1, &[(1, 1)]), served(1, &[(1, 2)]));
        assert!(half.unwrap_err().contains("atomically"));
        // The second part's OCC guard (version 0) holds only at version 1.
        let occ = check(served(1, &[(1, 1)]), served(1, &[(1, 2), (2, 1)]));
        assert!(occ.unwrap_err().contains("OCC"));
        ledger.told.insert(1, vec![Answer::Written(vec![1, 1])]);
        let lost = check_history(
            &ledger,
            &BTreeMap::from([(a, served(1, &[])), (b, served(1, &[(1, 2)]))]),
        );
        assert!(lost.unwrap_err().contains("lost"));
    }
}
