//! One shard: a [`Log`] of committed requests, its [`Index`], the write-ahead (pending) state
//! of requests queued but not yet durable, and its watch subscribers.
//!
//! # Write path
//!
//! Under the shard's admission lock a request is validated against the write-ahead state
//! (pending first, then committed) and turned into one record; the shard reserves the log's
//! next record ([`Log::reserve`]: its sequence number and timestamp, under the log's own
//! admission lock, so in log order), links the record into the hash chain, queues its
//! [`Update`](crate::state::Update) as pending and appends it. The request is answered by the
//! log's own acknowledgement of that record, mapped to the request's outcome
//! ([`Completion::map`]): down once, up once. The log's writer makes the group durable,
//! publishes it to readers and calls the hook
//! ([`CommitHook::after_publish`](eddy_log::CommitHook::after_publish)), which applies the
//! updates to the index (now readers see them) and notifies watchers, before the
//! acknowledgements go out. A refused group
//! ([`CommitHook::on_refused`](eddy_log::CommitHook::on_refused)) drops its pending updates
//! (the log refuses the acknowledgements itself); the refusal generation makes a validation
//! that raced with it start over.
//!
//! Lock order: shard admission → log admission → pending; writer → pending, then index.

mod pending;
mod read;
mod validate;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use eddy_log::format::MAX_RECORD_PAYLOAD;
use eddy_log::{lock, Completion, Corruption, Log, RecordMeta};

use crate::error::{EventStoreError, Refusal, Result, VersionMismatch};
use crate::index::Index;
use crate::keys::{agg_key_bytes, key_schema, mark_key_bytes};
use crate::record::{
    chain_tip, decode_record, encode_record, DeletePart, EncodedEvents, EventCodec, EventRecord,
    RecordBody, WritePart, RECORD_HEADER_LEN, REPLICATED_INDEX_LEN, WRITE_PART_HEADER_LEN,
};
use crate::state::{decode_schema, derive_update, AggState, Mark};
use crate::types::{
    AggregateDelete, AggregateKey, AggregateWrite, DeleteOutcome, SchemaKey, SchemaRegistration,
    StoredSchema, TrimOutcome, TrimRequest, WriteOutcome,
};
use crate::watch::Watchers;
use pending::{Pending, PendingRecord, ShardHook};
use validate::{validate_guard, validate_write};

pub(crate) use pending::FlushSignal;

/// One shard.
pub(crate) struct Shard {
    pub(crate) id: u32,
    pub(crate) log: Log,
    pub(crate) index: Arc<Index>,
    pub(crate) codec: Arc<EventCodec>,
    pub(crate) watchers: Arc<Watchers>,
    admission: Mutex<()>,
    pending: Arc<Mutex<Pending>>,
    /// Refusals by the log that dropped queued records (counted by the hook).
    dropped: Arc<AtomicU64>,
    /// The replicated entry index of the last record queued (0: none): an entry at or below
    /// it is already in the log (applied here, or copied from a peer's snapshot) and is
    /// never written again.
    raft_through: AtomicU64,
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("id", &self.id)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

/// What a shard shares with its [`ShardHook`]: the write-ahead state and the count of the
/// log's refusals that dropped queued records.
pub(crate) struct ShardShared {
    pending: Arc<Mutex<Pending>>,
    dropped: Arc<AtomicU64>,
}

/// Who appends a record and when (the record header fields besides the chain link).
#[derive(Clone, Copy)]
struct RecordHeading {
    client_id: u128,
    user_id: Option<u128>,
    now: u64,
    /// The replicated log entry the record is applied from (a cluster member).
    raft_index: Option<u64>,
}

/// The write-ahead state of an aggregate a record names, as its validation saw it.
#[derive(Clone, Copy)]
struct Prior {
    key: AggregateKey,
    state: Option<AggState>,
    /// The writing client's mark on it (looked up for writes to an existing aggregate).
    mark: Option<Mark>,
}

/// Damage found in the record at `seq` of `log`.
fn corrupt_in(log: &Log, seq: u64) -> impl Fn(Corruption) -> EventStoreError + '_ {
    move |kind| EventStoreError::corrupt(log.dir().to_path_buf(), seq, kind)
}

/// What appending one record did.
enum Append {
    /// The record is queued: the log's acknowledgement of it.
    Queued(Completion<RecordMeta>),
    /// A refusal raced with the validation: nothing was appended; validate again.
    Raced,
    /// Refused: the index backlog, the log, or the record's update.
    Failed(EventStoreError),
}

impl Shard {
    pub(crate) fn hook(
        shard: u32,
        index: &Arc<Index>,
        watchers: &Arc<Watchers>,
        flush: Arc<dyn FlushSignal>,
    ) -> (Arc<ShardHook>, ShardShared) {
        let pending = Arc::new(Mutex::new(Pending::default()));
        let dropped = Arc::new(AtomicU64::new(0));
        let hook = Arc::new(ShardHook {
            shard,
            dropped: Arc::clone(&dropped),
            pending: Arc::clone(&pending),
            index: Arc::clone(index),
            watchers: Arc::clone(watchers),
            flush,
        });
        (hook, ShardShared { pending, dropped })
    }

    pub(crate) fn new(
        id: u32,
        log: Log,
        index: Arc<Index>,
        codec: Arc<EventCodec>,
        watchers: Arc<Watchers>,
        shared: ShardShared,
        tip: [u8; 32],
    ) -> Self {
        let ShardShared { pending, dropped } = shared;
        {
            let mut p = lock(&pending);
            p.tip = tip;
            p.committed_tip = tip;
        }
        Shard {
            id,
            log,
            index,
            codec,
            watchers,
            admission: Mutex::new(()),
            pending,
            dropped,
            raft_through: AtomicU64::new(0),
        }
    }

    /// Whether the log dropped records this shard queued (it refused them: a full disk, a
    /// failed write) since the shard opened: one atomic load, cheap enough for every apply.
    /// A cluster member's shard then misses an entry it applied: its state machine stops
    /// applying until a restart, which resumes after the last record the log holds. (A log
    /// that fail-stopped with nothing queued writes nothing more, so it leaves no hole; see
    /// [`Log::failure`].)
    pub(crate) fn dropped_writes(&self) -> bool {
        self.dropped.load(Ordering::Acquire) > 0
    }

    /// Sets the replicated index of the last record (after recovery read it).
    pub(crate) fn set_raft_through(&self, index: u64) {
        self.raft_through.store(index, Ordering::Release);
    }

    /// An entry at or below the last record's index is already in this shard (applied here,
    /// or copied with a peer's snapshot): checked first, under the admission lock, so it
    /// writes nothing and is not validated against a state that already includes it.
    fn already_applied(&self, raft_index: Option<u64>) -> Option<EventStoreError> {
        let index = raft_index?;
        (index <= self.raft_through()).then(|| Refusal::AlreadyApplied { index }.into())
    }

    /// The replicated index of the last record queued (0: none).
    pub(crate) fn raft_through(&self) -> u64 {
        self.raft_through.load(Ordering::Acquire)
    }

    /// The log's next sequence number and the chain tip before it, taken together under the
    /// shard's admission lock: every record queued so far is below it.
    pub(crate) fn position(&self) -> (u64, [u8; 32]) {
        let _admission = lock(&self.admission);
        let next = self.log.next_seq_to_assign();
        (next, lock(&self.pending).tip)
    }

    /// Sets the chain tip after recovery replayed the log: every record the log holds is
    /// visible from here on.
    pub(crate) fn set_tip(&self, tip: [u8; 32]) {
        let end = self.log.bounds().next;
        let mut p = lock(&self.pending);
        debug_assert!(p.records.is_empty());
        p.visible_end = p.visible_end.max(end);
        p.tip = tip;
        p.committed_tip = tip;
    }

    /// Resolves once every record queued so far is visible to readers (committed and applied
    /// to the index), at once when it already is; with the log's error when some of them
    /// were refused. A cluster member's read barrier: records of entries it applied are queued
    /// at once but become visible only when the log commits them.
    pub(crate) fn visible_barrier(&self) -> Completion<(), EventStoreError> {
        let _admission = lock(&self.admission);
        let next = self.log.next_seq_to_assign();
        let mut p = lock(&self.pending);
        if next <= p.visible_end {
            return Completion::ready(Ok(()));
        }
        let (done, barrier) = eddy_log::completion();
        p.barriers.push((next, done));
        barrier
    }

    /// The chain tip of the last committed record.
    pub(crate) fn committed_tip(&self) -> [u8; 32] {
        lock(&self.pending).committed_tip
    }

    /// How many committed changes so far may have made batches unreadable (all of them
    /// visible in the index); counts from zero at every open.
    pub(crate) fn deaths(&self) -> u64 {
        lock(&self.pending).deaths
    }

    // --------------------------------------------------------------------------------------------
    // State lookups.

    pub(crate) fn committed_agg(&self, key: &AggregateKey) -> Result<Option<AggState>> {
        self.index
            .get_with(&agg_key_bytes(key), AggState::decode)?
            .transpose()
            .map_err(|k| EventStoreError::corrupt(self.log.dir().join("index"), 0, k))
    }

    pub(crate) fn committed_mark(&self, key: &AggregateKey, client: u128) -> Result<Option<Mark>> {
        self.index
            .get_with(&mark_key_bytes(key, client), Mark::decode)?
            .transpose()
            .map_err(|k| EventStoreError::corrupt(self.log.dir().join("index"), 0, k))
    }

    /// Write-ahead state: (state, whether it comes from a not-yet-committed record).
    fn ahead_agg(&self, key: &AggregateKey) -> Result<(Option<AggState>, bool)> {
        if let Some((s, _)) = lock(&self.pending).aggs.get(key) {
            return Ok((Some(*s), true));
        }
        Ok((self.committed_agg(key)?, false))
    }

    fn ahead_mark(&self, key: &AggregateKey, client: u128) -> Result<(Option<Mark>, bool)> {
        if let Some((m, _)) = lock(&self.pending).marks.get(&(*key, client)) {
            return Ok((Some(*m), true));
        }
        Ok((self.committed_mark(key, client)?, false))
    }

    pub(crate) fn schema(&self, key: &SchemaKey) -> Result<Option<StoredSchema>> {
        match self.index.get(&key_schema(key))? {
            Some(v) => decode_schema(&v)
                .map(Some)
                .map_err(|k| EventStoreError::corrupt(self.log.dir().join("index"), 0, k)),
            None => Ok(None),
        }
    }

    // --------------------------------------------------------------------------------------------
    // Appending.

    /// Appends `body` (validated against the write-ahead state `priors`: per aggregate it
    /// names, in record order, its state and the writing client's mark, taken at refusal
    /// generation `generation`) and returns the log's acknowledgement of its record, or
    /// [`Append::Raced`] when a refusal raced with the validation (start over).
    fn append(
        &self,
        header: RecordHeading,
        body: RecordBody,
        priors: &[Prior],
        generation: u64,
    ) -> Append {
        // A replicated entry is applied whatever the index's backlog: every member must
        // take the same entries (the group's own flow control bounds what is in flight).
        if header.raft_index.is_none() {
            if let Some(source) = self.index.flush_backlog() {
                return Append::Failed(EventStoreError::IndexBacklog {
                    shard: self.id,
                    source,
                });
            }
        }
        let tag = body.tag();
        let reservation = match self.log.reserve(1, tag, header.now) {
            Ok(r) => r,
            Err(e) => return Append::Failed(e.into()),
        };
        let assigned = reservation.assigned();
        let mut p = lock(&self.pending);
        if p.generation != generation {
            return Append::Raced;
        }
        let record = EventRecord {
            prev_tip: p.tip,
            client_id: header.client_id,
            user_id: header.user_id,
            body,
            compacted_tip: None,
            raft_index: header.raft_index,
        };
        let payload = encode_record(&record);
        let tip_after = chain_tip(assigned.seq, &payload);
        // `derive_update` asks for the aggregates in record order: each lookup starts where
        // the last one matched.
        let at = std::cell::Cell::new(0);
        let find = |k: &AggregateKey| {
            let from = at.get().min(priors.len());
            let (tail, head) = priors.split_at(from);
            let i = head
                .iter()
                .position(|p| p.key == *k)
                .map(|i| from + i)
                .or_else(|| tail.iter().position(|p| p.key == *k))?;
            at.set(i);
            Some(&priors[i])
        };
        let update = match derive_update(
            assigned.seq,
            assigned.timestamp,
            &record,
            |k| Ok(find(k).and_then(|p| p.state)),
            |k, _| Ok(find(k).and_then(|p| p.mark)),
            corrupt_in(&self.log, assigned.seq),
        ) {
            Ok(u) => u,
            Err(e) => return Append::Failed(e),
        };
        // Pending before the record is queued: the writer may publish it as soon as it is.
        p.add(&update);
        p.tip = tip_after;
        p.records.push_back(PendingRecord {
            seq: assigned.seq,
            update,
            tip_after,
        });
        drop(p);
        match reservation.append(payload) {
            Ok(ack) => {
                if let Some(index) = header.raft_index {
                    self.raft_through.store(index, Ordering::Release);
                }
                Append::Queued(ack)
            }
            Err(e) => {
                // The log refused the record (it queued nothing): take it back.
                let mut p = lock(&self.pending);
                if let Some(r) = p.records.pop_back() {
                    p.release(&r.update);
                    p.tip = p.records.back().map_or(p.committed_tip, |r| r.tip_after);
                }
                Append::Failed(e.into())
            }
        }
    }

    /// `e`, or when it is the version conflict of part `at`, that conflict and those of the
    /// request's later parts (`pins`: every part's key and expected version, in order),
    /// checked for their versions only against the write-ahead state (0 for an aggregate
    /// that never existed): a client learns every stale guard at once.
    fn every_conflict(
        &self,
        e: EventStoreError,
        at: usize,
        pins: impl Iterator<Item = (AggregateKey, Option<u64>)>,
    ) -> EventStoreError {
        let mut conflicts = match &e {
            EventStoreError::Refused(r @ Refusal::VersionConflict { .. }) => r.version_conflicts(),
            _ => return e,
        };
        for (part, (key, expected)) in pins.enumerate().skip(at + 1) {
            let Some(expected) = expected else { continue };
            let Ok((state, _)) = self.ahead_agg(&key) else {
                return e;
            };
            let current = state.map_or(0, |s| s.version);
            if expected != current {
                conflicts.push(VersionMismatch {
                    part,
                    key,
                    expected,
                    current,
                });
            }
        }
        Refusal::of_conflicts(conflicts).into()
    }

    /// Validates and appends a write whose events were encoded already.
    pub(crate) fn write(
        &self,
        client_id: u128,
        user_id: Option<u128>,
        now: u64,
        parts: &[(AggregateWrite, EncodedEvents)],
        raft_index: Option<u64>,
    ) -> Completion<WriteOutcome, EventStoreError> {
        let size = RECORD_HEADER_LEN
            + raft_index.map_or(0, |_| REPLICATED_INDEX_LEN)
            + 4
            + parts
                .iter()
                .map(|(_, e)| WRITE_PART_HEADER_LEN + e.stored.len())
                .sum::<usize>();
        if size > MAX_RECORD_PAYLOAD as usize {
            return Completion::ready(Err(Refusal::Limit {
                what: "write record bytes",
                value: size as u64,
                limit: u64::from(MAX_RECORD_PAYLOAD),
            }
            .into()));
        }
        let _admission = lock(&self.admission);
        if let Some(refused) = self.already_applied(raft_index) {
            return Completion::ready(Err(refused));
        }
        loop {
            let generation = lock(&self.pending).generation;
            let mut priors = Vec::with_capacity(parts.len());
            let mut planned = Vec::with_capacity(parts.len());
            for (part, (w, events)) in parts.iter().enumerate() {
                let (state, _) = match self.ahead_agg(&w.key) {
                    Ok(s) => s,
                    Err(e) => return Completion::ready(Err(e)),
                };
                let pins = parts.iter().map(|(w, _)| (w.key, w.expected_version));
                if events.count == 0 {
                    // A guard (the only part without events the input checks let through):
                    // its version is decided with the others, and it writes nothing.
                    if let Err(e) = validate_guard(part, w, state) {
                        return Completion::ready(Err(self.every_conflict(e, part, pins)));
                    }
                    continue;
                }
                // The mark the idempotency check looked up, if it did (looked up once).
                let mut seen_mark = None;
                let plan = match validate_write(part, w, events, state, |k| {
                    let found = self.ahead_mark(k, client_id)?;
                    seen_mark = Some(found.0);
                    Ok(found)
                }) {
                    Ok(p) => p,
                    Err(e) => return Completion::ready(Err(self.every_conflict(e, part, pins))),
                };
                let mark = match seen_mark {
                    Some(m) => m,
                    None if state.is_some() => match self.ahead_mark(&w.key, client_id) {
                        Ok((m, _)) => m,
                        Err(e) => return Completion::ready(Err(e)),
                    },
                    None => None,
                };
                priors.push(Prior {
                    key: w.key,
                    state,
                    mark,
                });
                planned.push(plan);
            }
            let versions: Vec<u64> = planned.iter().map(|p| p.version).collect();
            let body = RecordBody::Write(
                parts
                    .iter()
                    .filter(|(_, events)| events.count > 0)
                    .zip(&planned)
                    .map(|((w, events), p)| WritePart {
                        key: w.key,
                        version: p.version,
                        first_event_seq: p.first_event_seq,
                        recreate: p.recreate,
                        events: events.clone(),
                        elided: None,
                    })
                    .collect(),
            );
            let heading = RecordHeading {
                client_id,
                user_id,
                now,
                raft_index,
            };
            match self.append(heading, body, &priors, generation) {
                Append::Raced => {}
                Append::Queued(ack) => {
                    let shard = self.id;
                    return ack.map(move |meta| {
                        let meta = meta?;
                        Ok(WriteOutcome {
                            shard,
                            log_seq: meta.seq,
                            server_timestamp: meta.timestamp,
                            versions,
                        })
                    });
                }
                Append::Failed(e) => return Completion::ready(Err(e)),
            }
        }
    }

    pub(crate) fn trim(
        &self,
        req: &TrimRequest,
        raft_index: Option<u64>,
    ) -> Completion<TrimOutcome, EventStoreError> {
        let _admission = lock(&self.admission);
        if let Some(refused) = self.already_applied(raft_index) {
            return Completion::ready(Err(refused));
        }
        loop {
            let generation = lock(&self.pending).generation;
            let state = match self.ahead_agg(&req.key) {
                Ok((s, _)) => s,
                Err(e) => return Completion::ready(Err(e)),
            };
            let Some(s) = state.filter(|s| !s.deleted) else {
                return Completion::ready(Err(if state.is_some() {
                    Refusal::Deleted {
                        part: 0,
                        key: req.key,
                    }
                } else {
                    Refusal::NotFound {
                        part: 0,
                        key: req.key,
                    }
                }
                .into()));
            };
            if req.keep_from_version <= s.floor {
                return Completion::ready(Ok(TrimOutcome {
                    written: false,
                    floor: s.floor,
                }));
            }
            if req.keep_from_version > s.version {
                return Completion::ready(Err(Refusal::TrimOutOfRange {
                    requested: req.keep_from_version,
                    max_aggregate_version: s.version,
                }
                .into()));
            }
            let prior = Prior {
                key: req.key,
                state: Some(s),
                mark: None,
            };
            let floor = req.keep_from_version;
            let body = RecordBody::Trim {
                key: req.key,
                keep_from: floor,
            };
            let heading = RecordHeading {
                client_id: req.client_id,
                user_id: req.user_id,
                now: req.now,
                raft_index,
            };
            match self.append(heading, body, &[prior], generation) {
                Append::Raced => {}
                Append::Queued(ack) => {
                    return ack.map(move |meta| {
                        meta?;
                        Ok(TrimOutcome {
                            written: true,
                            floor,
                        })
                    });
                }
                Append::Failed(e) => return Completion::ready(Err(e)),
            }
        }
    }

    pub(crate) fn delete(
        &self,
        client_id: u128,
        user_id: Option<u128>,
        now: u64,
        deletes: &[AggregateDelete],
        raft_index: Option<u64>,
    ) -> Completion<DeleteOutcome, EventStoreError> {
        let _admission = lock(&self.admission);
        if let Some(refused) = self.already_applied(raft_index) {
            return Completion::ready(Err(refused));
        }
        loop {
            let generation = lock(&self.pending).generation;
            let mut priors = Vec::with_capacity(deletes.len());
            let mut parts = Vec::with_capacity(deletes.len());
            for (part, d) in deletes.iter().enumerate() {
                let state = match self.ahead_agg(&d.key) {
                    Ok((s, _)) => s,
                    Err(e) => return Completion::ready(Err(e)),
                };
                let Some(s) = state.filter(|s| !s.deleted) else {
                    return Completion::ready(Err(if state.is_some() {
                        Refusal::Deleted { part, key: d.key }
                    } else {
                        Refusal::NotFound { part, key: d.key }
                    }
                    .into()));
                };
                if let Some(e) = d.expected_version {
                    if e != s.version {
                        let conflict = Refusal::VersionConflict {
                            part,
                            key: d.key,
                            expected: e,
                            current: s.version,
                        };
                        let pins = deletes.iter().map(|d| (d.key, d.expected_version));
                        return Completion::ready(Err(self.every_conflict(
                            conflict.into(),
                            part,
                            pins,
                        )));
                    }
                }
                priors.push(Prior {
                    key: d.key,
                    state: Some(s),
                    mark: None,
                });
                parts.push(DeletePart {
                    key: d.key,
                    allow_recreate: d.allow_recreate,
                    allow_sequence_continuation: d.allow_sequence_continuation,
                    version: s.version,
                });
            }
            let heading = RecordHeading {
                client_id,
                user_id,
                now,
                raft_index,
            };
            let body = RecordBody::Delete(parts);
            match self.append(heading, body, &priors, generation) {
                Append::Raced => {}
                Append::Queued(ack) => {
                    let shard = self.id;
                    return ack.map(move |meta| {
                        let meta = meta?;
                        Ok(DeleteOutcome {
                            shard,
                            log_seq: meta.seq,
                        })
                    });
                }
                Append::Failed(e) => return Completion::ready(Err(e)),
            }
        }
    }

    pub(crate) fn register_schema(
        &self,
        reg: SchemaRegistration,
        raft_index: Option<u64>,
    ) -> Completion<(), EventStoreError> {
        let _admission = lock(&self.admission);
        if let Some(refused) = self.already_applied(raft_index) {
            return Completion::ready(Err(refused));
        }
        let exists = Refusal::SchemaExists {
            event_type_major: reg.key.event_type_major,
            event_type_minor: reg.key.event_type_minor,
        };
        let schema = Bytes::from(reg.schema.into_bytes());
        loop {
            let generation = lock(&self.pending).generation;
            if lock(&self.pending).schemas.contains_key(&reg.key) {
                return Completion::ready(Err(exists.into()));
            }
            match self.schema(&reg.key) {
                Ok(Some(_)) => return Completion::ready(Err(exists.clone().into())),
                Ok(None) => {}
                Err(e) => return Completion::ready(Err(e)),
            }
            let body = RecordBody::Schema {
                key: reg.key,
                schema_type: reg.schema_type,
                schema: schema.clone(),
            };
            let heading = RecordHeading {
                client_id: reg.client_id,
                user_id: reg.user_id,
                now: reg.now,
                raft_index,
            };
            match self.append(heading, body, &[], generation) {
                Append::Raced => {}
                Append::Queued(ack) => return ack.map(|meta| meta.map(|_| ()).map_err(Into::into)),
                Append::Failed(e) => return Completion::ready(Err(e)),
            }
        }
    }

    /// Appends a record another member of the shard's group wrote at `seq` (a snapshot's
    /// transfer), byte for byte: it must be the log's next record and continue this shard's
    /// hash chain, which proves the shard holds the same records as that member before it.
    /// Its state changes are derived exactly as for a record written here.
    pub(crate) fn import(
        &self,
        seq: u64,
        timestamp: u64,
        tag: u32,
        payload: Bytes,
    ) -> Result<Completion<RecordMeta>> {
        let _admission = lock(&self.admission);
        let record = decode_record(tag, &payload).map_err(corrupt_in(&self.log, seq))?;
        if record.prev_tip != lock(&self.pending).tip {
            return Err(corrupt_in(&self.log, seq)(Corruption::BadHeaderField(
                "hash chain link of a copied record",
            )));
        }
        let update = derive_update(
            seq,
            timestamp,
            &record,
            |k| Ok(self.ahead_agg(k)?.0),
            |k, c| Ok(self.ahead_mark(k, c)?.0),
            corrupt_in(&self.log, seq),
        )?;
        let tip_after = record.tip_after(seq, &payload);
        {
            let mut p = lock(&self.pending);
            p.add(&update);
            p.tip = tip_after;
            p.records.push_back(PendingRecord {
                seq,
                update,
                tip_after,
            });
        }
        match self.log.append_assigned(seq, timestamp, 1, tag, payload) {
            Ok(ack) => {
                if let Some(index) = record.raft_index {
                    self.raft_through.store(index, Ordering::Release);
                }
                Ok(ack)
            }
            Err(e) => {
                let mut p = lock(&self.pending);
                if let Some(r) = p.records.pop_back() {
                    p.release(&r.update);
                    p.tip = p.records.back().map_or(p.committed_tip, |r| r.tip_after);
                }
                Err(e.into())
            }
        }
    }

    // --------------------------------------------------------------------------------------------
    // Reading.
}
