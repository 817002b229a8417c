//! One shard: a [`Log`] of committed requests, its [`Index`], the write-ahead (pending) state
//! of requests queued but not yet durable, and its watch subscribers.
//!
//! # Write path
//!
//! Under the shard's admission lock a request is validated against the write-ahead state
//! (pending first, then committed), turned into one record, and appended with
//! [`Log::append_with`]; inside the append (under the log's own admission lock, so in log
//! order) the record gets its chain link and its [`Update`] joins the pending queue. The log's
//! writer makes the group durable, publishes it to readers and then calls
//! [`CommitHook::after_publish`]: the shard applies the updates to the index (now readers
//! see them), notifies watchers, and completes the requests' completions. A refused group
//! ([`CommitHook::on_refused`]) drops its pending updates and fails their completions; the
//! refusal generation makes a validation that raced with it start over.
//!
//! Lock order: shard admission → log admission → pending; writer → pending, then index.

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use crate::completion::{completion, Completer, Completion};
use crate::error::{Corruption, Result, StorageError};
use crate::format::MAX_RECORD_PAYLOAD;
use crate::log::{CommitHook, Log};

use super::error::EventError;
use super::index::Index;
use super::record::{
    chain_tip, decode_record, encode_record, DeletePart, EncodedEvents, EventCodec, EventRecord,
    RecordBody, Recreate, WritePart, RECORD_HEADER_LEN, WRITE_PART_HEADER_LEN,
};
use super::state::{
    decode_schema, derive_update, key_agg, key_mark, key_schema, key_version, parse_version_key,
    AggState, Mark, Update, KIND_VERSION,
};
use super::types::{
    AggregateDelete, AggregateKey, DeleteOutcome, EventBatch, ReadPage, ReadQuery, SchemaKey,
    SchemaRegistration, StoredSchema, TrimOutcome, TrimRequest, WriteOutcome,
};
use super::watch::Watchers;
use super::FastMap as HashMap;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a pending record's requester is answered once it commits.
enum Done {
    Write(Completer<WriteOutcome>, WriteOutcome),
    Trim(Completer<TrimOutcome>, TrimOutcome),
    Delete(Completer<DeleteOutcome>, DeleteOutcome),
    Schema(Completer<()>),
}

impl Done {
    fn complete(self) {
        match self {
            Done::Write(c, v) => c.complete(Ok(v)),
            Done::Trim(c, v) => c.complete(Ok(v)),
            Done::Delete(c, v) => c.complete(Ok(v)),
            Done::Schema(c) => c.complete(Ok(())),
        }
    }

    fn fail(self, e: StorageError) {
        match self {
            Done::Write(c, _) => c.complete(Err(e)),
            Done::Trim(c, _) => c.complete(Err(e)),
            Done::Delete(c, _) => c.complete(Err(e)),
            Done::Schema(c) => c.complete(Err(e)),
        }
    }
}

struct PendingRecord {
    seq: u64,
    update: Update,
    tip_after: [u8; 32],
    done: Done,
}

/// Write-ahead state: requests appended to the log but not yet committed.
#[derive(Default)]
pub(crate) struct Pending {
    records: VecDeque<PendingRecord>,
    aggs: HashMap<AggregateKey, (AggState, u32)>,
    marks: HashMap<(AggregateKey, u128), (Mark, u32)>,
    schemas: HashMap<SchemaKey, u32>,
    /// Chain tip after the last queued record.
    tip: [u8; 32],
    /// Chain tip after the last committed record.
    committed_tip: [u8; 32],
    /// Bumped whenever queued records are refused.
    generation: u64,
    /// Committed changes that may have made batches unreadable (see [`Update::deaths`]),
    /// counted after the index shows them.
    deaths: u64,
}

impl Pending {
    fn add(&mut self, update: &Update) {
        for (k, s) in &update.aggs {
            let e = self.aggs.entry(*k).or_insert((*s, 0));
            e.0 = *s;
            e.1 += 1;
        }
        for (k, c, m) in &update.marks {
            let e = self.marks.entry((*k, *c)).or_insert((*m, 0));
            e.0 = *m;
            e.1 += 1;
        }
        if let Some((k, _)) = &update.schema {
            *self.schemas.entry(*k).or_insert(0) += 1;
        }
    }

    fn release(&mut self, update: &Update) {
        for (k, _) in &update.aggs {
            if let Some(e) = self.aggs.get_mut(k) {
                e.1 -= 1;
                if e.1 == 0 {
                    self.aggs.remove(k);
                }
            }
        }
        for (k, c, _) in &update.marks {
            if let Some(e) = self.marks.get_mut(&(*k, *c)) {
                e.1 -= 1;
                if e.1 == 0 {
                    self.marks.remove(&(*k, *c));
                }
            }
        }
        if let Some((k, _)) = &update.schema {
            if let Some(n) = self.schemas.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    self.schemas.remove(k);
                }
            }
        }
    }
}

/// Signals the background index flusher.
pub(crate) trait FlushSignal: Send + Sync {
    fn flush_needed(&self, shard: u32);
}

/// The shard's [`CommitHook`].
pub(crate) struct ShardHook {
    shard: u32,
    pending: Arc<Mutex<Pending>>,
    index: Arc<Index>,
    watchers: Arc<Watchers>,
    flush: Arc<dyn FlushSignal>,
}

impl fmt::Debug for ShardHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardHook")
            .field("shard", &self.shard)
            .finish_non_exhaustive()
    }
}

impl CommitHook for ShardHook {
    fn before_ack(&self, _end_seq: u64) -> io::Result<()> {
        Ok(())
    }

    fn on_refused(&self, next_seq: u64, error: &dyn Fn() -> StorageError) {
        let mut p = lock(&self.pending);
        let mut refused = Vec::new();
        while p.records.back().is_some_and(|r| r.seq >= next_seq) {
            refused.extend(p.records.pop_back());
        }
        for r in &refused {
            p.release(&r.update);
        }
        p.tip = p.records.back().map_or(p.committed_tip, |r| r.tip_after);
        p.generation += 1;
        drop(p);
        for r in refused {
            r.done.fail(error());
        }
    }

    fn after_publish(&self, end_seq: u64) {
        let committed: Vec<PendingRecord> = {
            let mut p = lock(&self.pending);
            let mut out = Vec::new();
            while p.records.front().is_some_and(|r| r.seq < end_seq) {
                out.extend(p.records.pop_front());
            }
            out
        };
        if committed.is_empty() {
            return;
        }
        let mut entries = Vec::new();
        for r in &committed {
            entries.extend(r.update.entries(r.seq));
        }
        // Readers see the new state from here on: after the log published the records.
        if self.index.apply(entries, end_seq, true) {
            self.flush.flush_needed(self.shard);
        }
        let mut watch = Vec::new();
        {
            let mut p = lock(&self.pending);
            for r in &committed {
                p.release(&r.update);
                watch.extend_from_slice(&r.update.watch);
            }
            if let Some(last) = committed.last() {
                p.committed_tip = last.tip_after;
            }
            p.deaths += committed.iter().map(|r| r.update.deaths).sum::<u64>();
        }
        self.watchers.publish(watch);
        for r in committed {
            r.done.complete();
        }
    }
}

/// One shard.
pub(crate) struct Shard {
    pub(crate) id: u32,
    pub(crate) log: Log,
    pub(crate) index: Arc<Index>,
    pub(crate) codec: Arc<EventCodec>,
    pub(crate) watchers: Arc<Watchers>,
    admission: Mutex<()>,
    pending: Arc<Mutex<Pending>>,
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("id", &self.id)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

/// A part of a write after validation.
struct Planned {
    version: u64,
    first_event_seq: u64,
    recreate: Recreate,
}

fn corrupt_in(log: &Log, seq: u64) -> impl Fn(Corruption) -> StorageError + '_ {
    move |kind| StorageError::corrupt(log.dir().to_path_buf(), seq, kind)
}

impl Shard {
    pub(crate) fn hook(
        shard: u32,
        index: &Arc<Index>,
        watchers: &Arc<Watchers>,
        flush: Arc<dyn FlushSignal>,
    ) -> (Arc<ShardHook>, Arc<Mutex<Pending>>) {
        let pending = Arc::new(Mutex::new(Pending::default()));
        let hook = Arc::new(ShardHook {
            shard,
            pending: Arc::clone(&pending),
            index: Arc::clone(index),
            watchers: Arc::clone(watchers),
            flush,
        });
        (hook, pending)
    }

    pub(crate) fn new(
        id: u32,
        log: Log,
        index: Arc<Index>,
        codec: Arc<EventCodec>,
        watchers: Arc<Watchers>,
        pending: Arc<Mutex<Pending>>,
        tip: [u8; 32],
    ) -> Self {
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
        }
    }

    /// Sets the chain tip after recovery replayed the log.
    pub(crate) fn set_tip(&self, tip: [u8; 32]) {
        let mut p = lock(&self.pending);
        debug_assert!(p.records.is_empty());
        p.tip = tip;
        p.committed_tip = tip;
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
        match self.index.get(&key_agg(key))? {
            Some(v) => AggState::decode(&v)
                .map(Some)
                .map_err(|k| StorageError::corrupt(self.log.dir().join("index"), 0, k)),
            None => Ok(None),
        }
    }

    fn committed_mark(&self, key: &AggregateKey, client: u128) -> Result<Option<Mark>> {
        match self.index.get(&key_mark(key, client))? {
            Some(v) => Mark::decode(&v)
                .map(Some)
                .map_err(|k| StorageError::corrupt(self.log.dir().join("index"), 0, k)),
            None => Ok(None),
        }
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
                .map_err(|k| StorageError::corrupt(self.log.dir().join("index"), 0, k)),
            None => Ok(None),
        }
    }

    // --------------------------------------------------------------------------------------------
    // Appending.

    /// Appends `body` (validated against the write-ahead state `priors` / `marks`, taken at
    /// refusal generation `generation`). Returns `None` when a refusal raced with the
    /// validation (start over).
    #[allow(clippy::too_many_arguments)]
    fn append(
        &self,
        client_id: u128,
        user_id: Option<u128>,
        now: u64,
        body: RecordBody,
        priors: &HashMap<AggregateKey, Option<AggState>>,
        marks: &HashMap<AggregateKey, Option<Mark>>,
        generation: u64,
        done: impl FnOnce(u64, u64) -> Done,
    ) -> Option<Result<()>> {
        let tag = body.tag();
        let mut record = EventRecord {
            prev_tip: [0; 32],
            client_id,
            user_id,
            body,
            compacted_tip: None,
        };
        let mut stale = false;
        let mut pushed = false;
        let pending = &self.pending;
        let log = &self.log;
        let appended = self.log.append_with(1, tag, now, |assigned| {
            let mut p = lock(pending);
            if p.generation != generation {
                stale = true;
                return Err(StorageError::Shutdown);
            }
            record.prev_tip = p.tip;
            let payload = encode_record(&record);
            let tip_after = chain_tip(assigned.seq, &payload);
            let update = derive_update(
                assigned.seq,
                assigned.timestamp,
                &record,
                |k| Ok(priors.get(k).copied().flatten()),
                |k, _| Ok(marks.get(k).copied().flatten()),
                corrupt_in(log, assigned.seq),
            )?;
            p.add(&update);
            p.tip = tip_after;
            p.records.push_back(PendingRecord {
                seq: assigned.seq,
                update,
                tip_after,
                done: done(assigned.seq, assigned.timestamp),
            });
            pushed = true;
            Ok(payload)
        });
        match appended {
            // The log's own acknowledgement is redundant: the hook completes ours first.
            Ok(ack) => {
                drop(ack);
                Some(Ok(()))
            }
            Err(_) if stale => None,
            Err(e) => {
                if pushed {
                    // The log refused after building (it queued nothing): take it back.
                    let mut p = lock(pending);
                    if let Some(r) = p.records.pop_back() {
                        p.release(&r.update);
                        p.tip = p.records.back().map_or(p.committed_tip, |r| r.tip_after);
                        drop(p);
                        r.done.fail(StorageError::Shutdown);
                    }
                }
                Some(Err(e))
            }
        }
    }

    /// Validates and appends a write whose events were encoded already.
    pub(crate) fn write(
        &self,
        client_id: u128,
        user_id: Option<u128>,
        now: u64,
        parts: &[(super::types::AggregateWrite, EncodedEvents)],
    ) -> Completion<WriteOutcome> {
        let size = RECORD_HEADER_LEN
            + 4
            + parts
                .iter()
                .map(|(_, e)| WRITE_PART_HEADER_LEN + e.stored.len())
                .sum::<usize>();
        if size > MAX_RECORD_PAYLOAD as usize {
            return Completion::ready(Err(EventError::Limit {
                what: "write record bytes",
                value: size as u64,
                limit: u64::from(MAX_RECORD_PAYLOAD),
            }
            .into()));
        }
        let _admission = lock(&self.admission);
        loop {
            let generation = lock(&self.pending).generation;
            let mut priors = HashMap::with_capacity_and_hasher(
                parts.len(),
                foldhash::fast::RandomState::default(),
            );
            let mut marks = HashMap::with_capacity_and_hasher(
                parts.len(),
                foldhash::fast::RandomState::default(),
            );
            let mut planned = Vec::with_capacity(parts.len());
            for (part, (w, events)) in parts.iter().enumerate() {
                let (state, _) = match self.ahead_agg(&w.key) {
                    Ok(s) => s,
                    Err(e) => return Completion::ready(Err(e)),
                };
                let plan =
                    match validate_write(part, w, events, state, |k| self.ahead_mark(k, client_id))
                    {
                        Ok(p) => p,
                        Err(e) => return Completion::ready(Err(e)),
                    };
                let mark = if state.is_some() {
                    match self.ahead_mark(&w.key, client_id) {
                        Ok((m, _)) => m,
                        Err(e) => return Completion::ready(Err(e)),
                    }
                } else {
                    None
                };
                priors.insert(w.key, state);
                marks.insert(w.key, mark);
                planned.push(plan);
            }
            let versions: Vec<u64> = planned.iter().map(|p| p.version).collect();
            let body = RecordBody::Write(
                parts
                    .iter()
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
            let (tx, rx) = completion();
            let shard = self.id;
            let done = move |seq, ts| {
                Done::Write(
                    tx,
                    WriteOutcome {
                        shard,
                        log_seq: seq,
                        server_timestamp: ts,
                        versions,
                    },
                )
            };
            match self.append(
                client_id, user_id, now, body, &priors, &marks, generation, done,
            ) {
                None => {}
                Some(Ok(())) => return rx,
                Some(Err(e)) => return Completion::ready(Err(e)),
            }
        }
    }

    pub(crate) fn trim(&self, req: &TrimRequest) -> Completion<TrimOutcome> {
        let _admission = lock(&self.admission);
        loop {
            let generation = lock(&self.pending).generation;
            let state = match self.ahead_agg(&req.key) {
                Ok((s, _)) => s,
                Err(e) => return Completion::ready(Err(e)),
            };
            let Some(s) = state.filter(|s| !s.deleted) else {
                return Completion::ready(Err(if state.is_some() {
                    EventError::Deleted {
                        part: 0,
                        key: req.key,
                    }
                } else {
                    EventError::NotFound {
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
                return Completion::ready(Err(EventError::TrimOutOfRange {
                    requested: req.keep_from_version,
                    max_aggregate_version: s.version,
                }
                .into()));
            }
            let priors = HashMap::from_iter([(req.key, Some(s))]);
            let (tx, rx) = completion();
            let floor = req.keep_from_version;
            let body = RecordBody::Trim {
                key: req.key,
                keep_from: floor,
            };
            let done = move |_, _| {
                Done::Trim(
                    tx,
                    TrimOutcome {
                        written: true,
                        floor,
                    },
                )
            };
            match self.append(
                req.client_id,
                req.user_id,
                req.now,
                body,
                &priors,
                &HashMap::default(),
                generation,
                done,
            ) {
                None => {}
                Some(Ok(())) => return rx,
                Some(Err(e)) => return Completion::ready(Err(e)),
            }
        }
    }

    pub(crate) fn delete(
        &self,
        client_id: u128,
        user_id: Option<u128>,
        now: u64,
        deletes: &[AggregateDelete],
    ) -> Completion<DeleteOutcome> {
        let _admission = lock(&self.admission);
        loop {
            let generation = lock(&self.pending).generation;
            let mut priors = HashMap::default();
            let mut parts = Vec::with_capacity(deletes.len());
            for (part, d) in deletes.iter().enumerate() {
                let state = match self.ahead_agg(&d.key) {
                    Ok((s, _)) => s,
                    Err(e) => return Completion::ready(Err(e)),
                };
                let Some(s) = state.filter(|s| !s.deleted) else {
                    return Completion::ready(Err(if state.is_some() {
                        EventError::Deleted { part, key: d.key }
                    } else {
                        EventError::NotFound { part, key: d.key }
                    }
                    .into()));
                };
                if let Some(e) = d.expected_version {
                    if e != s.version {
                        return Completion::ready(Err(EventError::VersionConflict {
                            part,
                            key: d.key,
                            expected: e,
                            current: s.version,
                        }
                        .into()));
                    }
                }
                priors.insert(d.key, Some(s));
                parts.push(DeletePart {
                    key: d.key,
                    allow_recreate: d.allow_recreate,
                    allow_sequence_continuation: d.allow_sequence_continuation,
                    version: s.version,
                });
            }
            let (tx, rx) = completion();
            let shard = self.id;
            let done = move |seq, _| {
                Done::Delete(
                    tx,
                    DeleteOutcome {
                        shard,
                        log_seq: seq,
                    },
                )
            };
            match self.append(
                client_id,
                user_id,
                now,
                RecordBody::Delete(parts),
                &priors,
                &HashMap::default(),
                generation,
                done,
            ) {
                None => {}
                Some(Ok(())) => return rx,
                Some(Err(e)) => return Completion::ready(Err(e)),
            }
        }
    }

    pub(crate) fn register_schema(&self, reg: SchemaRegistration) -> Completion<()> {
        let _admission = lock(&self.admission);
        let exists = EventError::SchemaExists {
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
            let (tx, rx) = completion();
            let body = RecordBody::Schema {
                key: reg.key,
                schema_type: reg.schema_type,
                schema: schema.clone(),
            };
            match self.append(
                reg.client_id,
                reg.user_id,
                reg.now,
                body,
                &HashMap::default(),
                &HashMap::default(),
                generation,
                |_, _| Done::Schema(tx),
            ) {
                None => {}
                Some(Ok(())) => return rx,
                Some(Err(e)) => return Completion::ready(Err(e)),
            }
        }
    }

    // --------------------------------------------------------------------------------------------
    // Reading.

    /// Reads the record at `seq` and decodes it; also returns its timestamp.
    pub(crate) fn record_at(&self, seq: u64) -> Result<(EventRecord, u64)> {
        let Some(r) = self.log.read_record(seq)?.filter(|r| r.meta.seq == seq) else {
            return Err(StorageError::corrupt(
                self.log.dir().to_path_buf(),
                seq,
                Corruption::BadHeaderField("indexed record missing from the log"),
            ));
        };
        let record = decode_record(r.meta.tag, &r.payload).map_err(corrupt_in(&self.log, seq))?;
        Ok((record, r.meta.timestamp))
    }

    /// Reads one page. A batch elided by compaction while the read ran (the aggregate was
    /// trimmed or deleted meanwhile) makes the read start over from the aggregate's new state.
    pub(crate) fn read(&self, key: &AggregateKey, q: &ReadQuery) -> Result<ReadPage> {
        for _ in 0..MAX_READ_ATTEMPTS {
            if let Some(page) = self.read_once(key, q)? {
                return Ok(page);
            }
        }
        // Compaction elides only batches that the committed state no longer lists.
        Err(StorageError::corrupt(
            self.log.dir().join("index"),
            0,
            Corruption::BadHeaderField("a listed batch was elided by compaction"),
        ))
    }

    /// One attempt of [`Shard::read`]; `None` when a batch it wanted was elided under it.
    fn read_once(&self, key: &AggregateKey, q: &ReadQuery) -> Result<Option<ReadPage>> {
        let Some(s) = self.committed_agg(key)? else {
            return Err(EventError::NotFound { part: 0, key: *key }.into());
        };
        if s.deleted {
            return Err(EventError::Deleted { part: 0, key: *key }.into());
        }
        if q.from_version < s.floor {
            return Err(EventError::Trimmed {
                requested: q.from_version,
                minimum_available: s.floor,
            }
            .into());
        }
        let to = q.to_version.unwrap_or(u64::MAX).min(s.version);
        let empty = ReadPage {
            batches: Vec::new(),
            next_version: None,
        };
        if q.from_version > to {
            return Ok(Some(empty));
        }
        let max_batches = q.max_batches.max(1);
        let mut batches = Vec::new();
        let mut bytes = 0u64;
        let mut next = q.from_version;
        let end_key = to.checked_add(1).map_or_else(
            || {
                let mut k = key_version(key, u64::MAX);
                k.push(0);
                k
            },
            |e| key_version(key, e),
        );
        loop {
            let chunk = self.index.scan(
                &key_version(key, next),
                &end_key,
                max_batches.clamp(16, 1024),
            )?;
            if chunk.is_empty() {
                return Ok(Some(ReadPage {
                    batches,
                    next_version: None,
                }));
            }
            for (k, v) in &chunk {
                let (Some(version), true) =
                    (parse_version_key(k), k.first() == Some(&KIND_VERSION))
                else {
                    continue;
                };
                if version > to {
                    return Ok(Some(ReadPage {
                        batches,
                        next_version: None,
                    }));
                }
                if !batches.is_empty() && (batches.len() >= max_batches || bytes >= q.max_bytes) {
                    return Ok(Some(ReadPage {
                        batches,
                        next_version: Some(version),
                    }));
                }
                let seq = if v.len() == 8 {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(v);
                    u64::from_le_bytes(a)
                } else {
                    return Err(StorageError::corrupt(
                        self.log.dir().join("index"),
                        0,
                        Corruption::BadHeaderField("version entry"),
                    ));
                };
                match self.batch_at(seq, key, version, q)? {
                    BatchAt::Found(batch, raw) => {
                        bytes += raw;
                        batches.push(batch);
                    }
                    BatchAt::Filtered => {}
                    BatchAt::Elided => return Ok(None),
                }
                next = version + 1;
            }
            if next > to {
                return Ok(Some(ReadPage {
                    batches,
                    next_version: None,
                }));
            }
        }
    }

    /// The batch of `key` at `version` in the record at `seq`, filtered.
    fn batch_at(
        &self,
        seq: u64,
        key: &AggregateKey,
        version: u64,
        q: &ReadQuery,
    ) -> Result<BatchAt> {
        let (record, ts) = self.record_at(seq)?;
        let RecordBody::Write(parts) = &record.body else {
            return Err(corrupt_in(&self.log, seq)(Corruption::BadHeaderField(
                "version entry points at a non-write record",
            )));
        };
        let Some(part) = parts.iter().find(|p| p.key == *key && p.version == version) else {
            return Err(corrupt_in(&self.log, seq)(Corruption::BadHeaderField(
                "version entry points at a record without the batch",
            )));
        };
        if part.elided.is_some() {
            return Ok(BatchAt::Elided);
        }
        if !batch_matches(q, &record, ts, part) {
            return Ok(BatchAt::Filtered);
        }
        let events = self
            .codec
            .decode_events(part)
            .map_err(corrupt_in(&self.log, seq))?;
        let types: Option<HashSet<u64>> = q
            .include_event_types
            .as_ref()
            .filter(|t| !t.is_empty())
            .map(|t| t.iter().copied().collect());
        let within = |v: u64, lo: Option<u64>, hi: Option<u64>| {
            lo.is_none_or(|lo| v >= lo) && hi.is_none_or(|hi| v <= hi)
        };
        let events: Vec<_> = events
            .into_iter()
            .filter(|e| {
                types
                    .as_ref()
                    .is_none_or(|t| t.contains(&e.event_type_major))
                    && within(e.event_seq, q.min_event_seq, q.max_event_seq)
                    && within(
                        e.event_timestamp,
                        q.min_event_timestamp,
                        q.max_event_timestamp,
                    )
                    && within(e.client_seq, q.min_client_seq, q.max_client_seq)
            })
            .collect();
        if events.is_empty() {
            return Ok(BatchAt::Filtered);
        }
        Ok(BatchAt::Found(
            EventBatch {
                version,
                client_id: record.client_id,
                user_id: record.user_id,
                server_timestamp: ts,
                events,
            },
            u64::from(part.events.raw_len),
        ))
    }
}

/// What [`Shard::batch_at`] found.
enum BatchAt {
    /// The batch (filtered) and its uncompressed size.
    Found(EventBatch, u64),
    /// The filters dropped it.
    Filtered,
    /// Compaction elided its events: the state the read started from is out of date.
    Elided,
}

/// Attempts of one read page before an elided batch the state still lists is corruption
/// (one retry always suffices: compaction elides only what committed state no longer lists).
const MAX_READ_ATTEMPTS: usize = 4;

/// Batch-level filters (spec §4.4 step 4).
fn batch_matches(q: &ReadQuery, record: &EventRecord, ts: u64, part: &WritePart) -> bool {
    let overlaps = |lo: u64, hi: u64, min: Option<u64>, max: Option<u64>| {
        min.is_none_or(|m| hi >= m) && max.is_none_or(|m| lo <= m)
    };
    let e = &part.events;
    let last_seq = part
        .first_event_seq
        .saturating_add(u64::from(e.count).saturating_sub(1));
    q.exclude_client_id != Some(record.client_id)
        && q.include_client_id.is_none_or(|c| c == record.client_id)
        && (q.exclude_user_id.is_none() || record.user_id != q.exclude_user_id)
        && q.include_user_id.is_none_or(|u| record.user_id == Some(u))
        && q.min_server_timestamp.is_none_or(|m| ts >= m)
        && q.max_server_timestamp.is_none_or(|m| ts <= m)
        && overlaps(
            e.min_client_seq,
            e.max_client_seq,
            q.min_client_seq,
            q.max_client_seq,
        )
        && overlaps(
            e.min_event_timestamp,
            e.max_event_timestamp,
            q.min_event_timestamp,
            q.max_event_timestamp,
        )
        && overlaps(
            part.first_event_seq,
            last_seq,
            q.min_event_seq,
            q.max_event_seq,
        )
}

/// Checks one write part against the write-ahead state (spec §4.3 step 5, in that order:
/// existence, OCC, idempotency) and plans its version.
fn validate_write(
    part: usize,
    w: &super::types::AggregateWrite,
    events: &EncodedEvents,
    state: Option<AggState>,
    mark: impl FnOnce(&AggregateKey) -> Result<(Option<Mark>, bool)>,
) -> Result<Planned> {
    let key = w.key;
    let current = state.map_or(0, |s| s.version);
    let plan = match state {
        None if !w.allow_create => return Err(EventError::NotFound { part, key }.into()),
        None => Planned {
            version: 1,
            first_event_seq: 1,
            recreate: Recreate::No,
        },
        Some(s) if s.deleted && !s.allow_recreate => {
            return Err(EventError::RecreateNotAllowed { part, key }.into())
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
            return Err(EventError::VersionConflict {
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
                    EventError::InFlightDuplicate {
                        part,
                        key,
                        last_client_seq: m.client_seq,
                        attempted_client_seq: attempted,
                    }
                } else {
                    EventError::Duplicate {
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
        return Err(EventError::Limit {
            what: "event sequence",
            value: plan.first_event_seq,
            limit: u64::MAX - u64::from(events.count),
        }
        .into());
    }
    Ok(plan)
}
