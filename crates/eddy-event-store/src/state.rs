//! Per-aggregate state and how a record changes it.
//!
//! [`derive_update`] is the single function that turns a decoded record plus the prior state
//! of the aggregates it names into their new state. The write path runs it on the record it
//! is about to append (against the write-ahead state), and recovery runs it on every replayed
//! record (against the committed state), so both always agree. The index keys it writes are
//! laid out in [`crate::keys`].

use eddy_log::Corruption;

use crate::index::EntryBatch;
use crate::keys::{
    agg_key_bytes, key_org, key_schema, key_type, mark_key_bytes, version_key_bytes,
};
use crate::record::{DeletePart, EventRecord, RecordBody, Recreate, WritePart};
use crate::types::{
    AggregateDetails, AggregateKey, AggregateListItem, SchemaKey, StoredSchema, WatchEvent,
    WatchOperation,
};

/// Bytes of an encoded [`AggState`].
pub(crate) const AGG_STATE_LEN: usize = 129;

/// Everything the store keeps about one aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct AggState {
    /// Current version (at deletion, for a deleted aggregate).
    pub version: u64,
    /// Readable floor.
    pub floor: u64,
    /// First event sequence of the current incarnation.
    pub first_event_seq: u64,
    /// Last assigned event sequence.
    pub max_event_seq: u64,
    pub deleted: bool,
    pub allow_recreate: bool,
    pub allow_continuation: bool,
    /// Log sequence number of the newest record naming it.
    pub last_seq: u64,
    pub last_server_ts: u64,
    pub last_client_id: u128,
    pub last_user_id: Option<u128>,
    pub batch_count: u64,
    pub first_server_ts: u64,
    pub min_event_ts: u64,
    pub max_event_ts: u64,
    pub compressed: u64,
    pub uncompressed: u64,
}

impl AggState {
    pub(crate) fn encode(&self) -> [u8; AGG_STATE_LEN] {
        let mut v = [0u8; AGG_STATE_LEN];
        let flags = u8::from(self.deleted)
            | (u8::from(self.allow_recreate) << 1)
            | (u8::from(self.allow_continuation) << 2)
            | (u8::from(self.last_user_id.is_some()) << 3);
        v[0] = flags;
        let mut at = 1;
        let mut put = |b: &[u8]| {
            v[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        };
        for x in [
            self.version,
            self.floor,
            self.first_event_seq,
            self.max_event_seq,
            self.last_seq,
            self.last_server_ts,
            self.batch_count,
            self.first_server_ts,
            self.min_event_ts,
            self.max_event_ts,
            self.compressed,
            self.uncompressed,
        ] {
            put(&x.to_le_bytes());
        }
        put(&self.last_client_id.to_le_bytes());
        put(&self.last_user_id.unwrap_or(0).to_le_bytes());
        debug_assert_eq!(at, AGG_STATE_LEN);
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Self, Corruption> {
        if b.len() != AGG_STATE_LEN || b[0] > 15 {
            return Err(Corruption::BadHeaderField("aggregate state"));
        }
        let u = |i: usize| {
            let at = 1 + i * 8;
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(a)
        };
        let w = |at: usize| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[at..at + 16]);
            u128::from_le_bytes(a)
        };
        let flags = b[0];
        Ok(AggState {
            deleted: flags & 1 != 0,
            allow_recreate: flags & 2 != 0,
            allow_continuation: flags & 4 != 0,
            version: u(0),
            floor: u(1),
            first_event_seq: u(2),
            max_event_seq: u(3),
            last_seq: u(4),
            last_server_ts: u(5),
            batch_count: u(6),
            first_server_ts: u(7),
            min_event_ts: u(8),
            max_event_ts: u(9),
            compressed: u(10),
            uncompressed: u(11),
            last_client_id: w(97),
            last_user_id: (flags & 8 != 0).then(|| w(113)),
        })
    }

    pub(crate) fn details(&self) -> AggregateDetails {
        AggregateDetails {
            min_aggregate_version: self.floor,
            max_aggregate_version: self.version,
            max_event_seq: self.max_event_seq,
            is_deleted: self.deleted,
            allow_recreate: self.deleted && self.allow_recreate,
            allow_sequence_continuation: self.deleted && self.allow_continuation,
            last_server_timestamp: self.last_server_ts,
            last_client_id: self.last_client_id,
            last_user_id: self.last_user_id,
        }
    }

    pub(crate) fn list_item(&self, key: AggregateKey) -> AggregateListItem {
        AggregateListItem {
            key,
            is_deleted: self.deleted,
            event_batch_count: self.batch_count,
            min_event_timestamp: self.min_event_ts,
            max_event_timestamp: self.max_event_ts,
            min_aggregate_version: if self.version == 0 { 0 } else { self.floor },
            max_aggregate_version: self.version,
            min_event_seq: self.first_event_seq,
            max_event_seq: self.max_event_seq,
            min_server_timestamp: self.first_server_ts,
            max_server_timestamp: self.last_server_ts,
            compressed_size: self.compressed,
            uncompressed_size: self.uncompressed,
        }
    }
}

/// A client's idempotency high-water mark on one aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Mark {
    /// Highest client_seq committed by this client on this aggregate.
    pub client_seq: u64,
    /// Version of the batch that set it.
    pub version: u64,
}

impl Mark {
    pub(crate) fn encode(&self) -> [u8; 16] {
        let mut v = [0u8; 16];
        v[..8].copy_from_slice(&self.client_seq.to_le_bytes());
        v[8..].copy_from_slice(&self.version.to_le_bytes());
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Self, Corruption> {
        if b.len() != 16 {
            return Err(Corruption::BadHeaderField("client mark"));
        }
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        let client_seq = u64::from_le_bytes(a);
        a.copy_from_slice(&b[8..]);
        Ok(Mark {
            client_seq,
            version: u64::from_le_bytes(a),
        })
    }
}

pub(crate) fn encode_schema(s: &StoredSchema) -> Vec<u8> {
    let mut v = Vec::with_capacity(9 + s.schema.len());
    v.push(s.schema_type);
    v.extend_from_slice(&s.registered_at.to_le_bytes());
    v.extend_from_slice(s.schema.as_bytes());
    v
}

pub(crate) fn decode_schema(b: &[u8]) -> Result<StoredSchema, Corruption> {
    if b.len() < 9 {
        return Err(Corruption::BadHeaderField("schema entry"));
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[1..9]);
    let schema = std::str::from_utf8(&b[9..])
        .map_err(|_| Corruption::BadHeaderField("schema entry"))?
        .to_owned();
    Ok(StoredSchema {
        schema_type: b[0],
        registered_at: u64::from_le_bytes(a),
        schema,
    })
}

/// What one record changes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Update {
    /// What the record does to each aggregate it names, in record order.
    pub changes: Vec<AggChange>,
    /// A registered schema.
    pub schema: Option<(SchemaKey, StoredSchema)>,
    /// Changes that may have made stored batches unreadable (a trim, a delete, a fresh
    /// recreate): compaction rescans a shard only after some.
    pub deaths: u64,
}

/// What one record does to one aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AggChange {
    pub key: AggregateKey,
    /// Its new state.
    pub state: AggState,
    /// The client mark the record raised on it (client, mark).
    pub mark: Option<(u128, Mark)>,
    /// The new batch's version (its entry points at the record).
    pub version: Option<u64>,
    /// It did not exist before (its org and type entries are written).
    pub created: bool,
    /// What watchers are told.
    pub kind: ChangeKind,
}

impl AggChange {
    /// A change of state alone (no batch, no mark).
    fn of(key: AggregateKey, state: AggState, kind: ChangeKind) -> Self {
        AggChange {
            key,
            state,
            mark: None,
            version: None,
            created: false,
            kind,
        }
    }
}

/// The kind of an [`AggChange`], for its watch notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    /// A batch at the change's `version` (version 1 also announces a creation).
    Write,
    /// A trim to this floor.
    Trim(u64),
    Delete,
}

impl Update {
    /// Adds the index entries of this update, for a record at log sequence `seq`, to `out`.
    pub(crate) fn entries_into(&self, seq: u64, out: &mut EntryBatch) {
        for c in &self.changes {
            let k = &c.key;
            if c.created {
                out.push(&key_org(k.org_id), &[]);
                out.push(&key_type(k.org_id, k.aggregate_type_id), &[]);
            }
            out.push(&agg_key_bytes(k), &c.state.encode());
            if let Some((client, m)) = &c.mark {
                out.push(&mark_key_bytes(k, *client), &m.encode());
            }
            if let Some(v) = c.version {
                out.push(&version_key_bytes(k, v), &seq.to_le_bytes());
            }
        }
        if let Some((k, s)) = &self.schema {
            out.push(&key_schema(k), &encode_schema(s));
        }
    }

    /// Adds the watch notifications of this update to `out`, in record order.
    pub(crate) fn watch_into(&self, out: &mut Vec<WatchEvent>) {
        for c in &self.changes {
            let event = |operation| WatchEvent {
                key: c.key,
                operation,
                from_version: None,
                to_version: None,
                keep_from_version: None,
            };
            match c.kind {
                ChangeKind::Write => {
                    if c.version == Some(1) {
                        out.push(event(WatchOperation::Create));
                    }
                    out.push(WatchEvent {
                        from_version: c.version,
                        to_version: c.version,
                        ..event(WatchOperation::Write)
                    });
                }
                ChangeKind::Trim(floor) => out.push(WatchEvent {
                    keep_from_version: Some(floor),
                    ..event(WatchOperation::TrimStart)
                }),
                ChangeKind::Delete => out.push(event(WatchOperation::Delete)),
            }
        }
    }
}

/// Computes what `record` (at log sequence `seq`, server timestamp `ts`) changes, given the
/// prior state of each aggregate it names (`prior`) and each (aggregate, client) mark
/// (`mark`). The record was validated when it was written; a record that contradicts the
/// prior state (a version that does not follow) is corruption.
pub(crate) fn derive_update<E>(
    seq: u64,
    ts: u64,
    record: &EventRecord,
    mut prior: impl FnMut(&AggregateKey) -> Result<Option<AggState>, E>,
    mut mark: impl FnMut(&AggregateKey, u128) -> Result<Option<Mark>, E>,
    corrupt: impl Fn(Corruption) -> E,
) -> Result<Update, E> {
    let mut up = Update {
        changes: Vec::with_capacity(match &record.body {
            RecordBody::Write(parts) => parts.len(),
            RecordBody::Delete(parts) => parts.len(),
            RecordBody::Trim { .. } => 1,
            RecordBody::Schema { .. } => 0,
        }),
        ..Update::default()
    };
    let stamp = Stamp { seq, ts, record };
    match &record.body {
        RecordBody::Write(parts) => {
            for p in parts {
                let before = prior(&p.key)?;
                let (state, recreated_fresh) =
                    written_state(before, p, &stamp).map_err(&corrupt)?;
                if recreated_fresh {
                    up.deaths += 1;
                }
                // An aggregate that never existed has no marks: no lookup needed.
                let old = if before.is_some() {
                    mark(&p.key, record.client_id)?
                } else {
                    None
                };
                up.changes.push(AggChange {
                    key: p.key,
                    state,
                    mark: raised_mark(old, record.client_id, p),
                    version: Some(p.version),
                    created: before.is_none(),
                    kind: ChangeKind::Write,
                });
            }
        }
        RecordBody::Trim { key, keep_from } => {
            up.deaths += 1;
            let s = trimmed_state(prior(key)?, *keep_from, &stamp).map_err(&corrupt)?;
            up.changes
                .push(AggChange::of(*key, s, ChangeKind::Trim(*keep_from)));
        }
        RecordBody::Delete(parts) => {
            up.deaths += parts.len() as u64;
            for p in parts {
                let s = deleted_state(prior(&p.key)?, p, &stamp).map_err(&corrupt)?;
                up.changes.push(AggChange::of(p.key, s, ChangeKind::Delete));
            }
        }
        RecordBody::Schema {
            key,
            schema_type,
            schema,
        } => {
            let text = std::str::from_utf8(schema)
                .map_err(|_| corrupt(Corruption::BadHeaderField("schema text")))?
                .to_owned();
            up.schema = Some((
                *key,
                StoredSchema {
                    schema_type: *schema_type,
                    schema: text,
                    registered_at: ts,
                },
            ));
        }
    }
    Ok(up)
}

/// The record being derived (at log sequence `seq`, server timestamp `ts`): what it stamps
/// on every aggregate it changes.
struct Stamp<'a> {
    seq: u64,
    ts: u64,
    record: &'a EventRecord,
}

impl Stamp<'_> {
    /// Records the record as the aggregate's last change: its sequence number, server
    /// timestamp, client and user.
    fn touch(&self, s: &mut AggState) {
        s.last_seq = self.seq;
        s.last_server_ts = self.ts;
        s.last_client_id = self.record.client_id;
        s.last_user_id = self.record.user_id;
    }
}

/// The version and first event sequence number a write must carry to an aggregate in state
/// `before` (`None`: it never existed), or `None` when the write cannot apply to it at all.
/// A new aggregate and a fresh recreate start at 1; a live aggregate and a continued recreate
/// follow on; a recreate needs a deleted aggregate that allows it.
fn expected_start(before: Option<AggState>, recreate: Recreate) -> Option<(u64, u64)> {
    match (before, recreate) {
        (None, Recreate::No) => Some((1, 1)),
        (Some(b), Recreate::No) if !b.deleted => Some((
            b.version.saturating_add(1),
            b.max_event_seq.saturating_add(1),
        )),
        (Some(b), Recreate::Fresh) if b.deleted && b.allow_recreate => Some((1, 1)),
        (Some(b), Recreate::Continue) if b.deleted && b.allow_recreate => Some((
            b.version.saturating_add(1),
            b.max_event_seq.saturating_add(1),
        )),
        _ => None,
    }
}

/// The state after write part `p` of an aggregate in state `before` (`None`: it never
/// existed), and whether the write recreated it afresh (a death: the old incarnation's
/// batches become unreadable). The part's version and first event sequence number must
/// follow on from `before` ([`expected_start`]).
fn written_state(
    before: Option<AggState>,
    p: &WritePart,
    stamp: &Stamp<'_>,
) -> Result<(AggState, bool), Corruption> {
    let mut s = before.unwrap_or_default();
    let Some((expected_version, expected_seq)) = expected_start(before, p.recreate) else {
        return Err(Corruption::BadHeaderField(
            "write disagrees with aggregate state",
        ));
    };
    if p.version != expected_version || p.first_event_seq != expected_seq {
        return Err(Corruption::NonContiguous {
            expected: expected_version,
            found: p.version,
        });
    }
    // A new aggregate and a fresh incarnation start every figure afresh (the old
    // incarnation's batches are unreadable); a continued incarnation makes them
    // readable again and keeps counting them.
    let recreated_fresh = before.is_some() && p.recreate == Recreate::Fresh;
    if before.is_none() || recreated_fresh {
        s.floor = 1;
        s.first_event_seq = 1;
        s.batch_count = 0;
        s.first_server_ts = stamp.ts;
        s.min_event_ts = p.events.min_event_timestamp;
        s.max_event_ts = p.events.max_event_timestamp;
        s.compressed = 0;
        s.uncompressed = 0;
    }
    s.deleted = false;
    s.allow_recreate = false;
    s.allow_continuation = false;
    s.version = p.version;
    s.max_event_seq = p
        .first_event_seq
        .checked_add(u64::from(p.events.count) - 1)
        .ok_or(Corruption::BadHeaderField("event_seq"))?;
    s.batch_count = s.batch_count.saturating_add(1);
    s.min_event_ts = s.min_event_ts.min(p.events.min_event_timestamp);
    s.max_event_ts = s.max_event_ts.max(p.events.max_event_timestamp);
    s.compressed = s.compressed.saturating_add(p.stored_len());
    s.uncompressed = s.uncompressed.saturating_add(u64::from(p.events.raw_len));
    stamp.touch(&mut s);
    Ok((s, recreated_fresh))
}

/// The client mark write part `p` sets for `client_id`, given the client's mark `old` on the
/// aggregate: raised to the part's highest client sequence number when that is above `old`
/// (or there is none), else `None` (the mark stays).
fn raised_mark(old: Option<Mark>, client_id: u128, p: &WritePart) -> Option<(u128, Mark)> {
    old.is_none_or(|m| p.events.max_client_seq > m.client_seq)
        .then_some((
            client_id,
            Mark {
                client_seq: p.events.max_client_seq,
                version: p.version,
            },
        ))
}

/// The state after trimming an aggregate in state `prior` to floor `keep_from`: the aggregate
/// must exist, not be deleted, and the floor must rise without passing its version.
fn trimmed_state(
    prior: Option<AggState>,
    keep_from: u64,
    stamp: &Stamp<'_>,
) -> Result<AggState, Corruption> {
    let Some(mut s) = prior.filter(|s| !s.deleted) else {
        return Err(Corruption::BadHeaderField("trim of a missing aggregate"));
    };
    if keep_from <= s.floor || keep_from > s.version {
        return Err(Corruption::BadHeaderField("trim out of range"));
    }
    s.floor = keep_from;
    stamp.touch(&mut s);
    Ok(s)
}

/// The state after delete part `p` of an aggregate in state `prior`: it must exist, not be
/// deleted already, and be at the part's version.
fn deleted_state(
    prior: Option<AggState>,
    p: &DeletePart,
    stamp: &Stamp<'_>,
) -> Result<AggState, Corruption> {
    let Some(mut s) = prior.filter(|s| !s.deleted) else {
        return Err(Corruption::BadHeaderField("delete of a missing aggregate"));
    };
    if s.version != p.version {
        return Err(Corruption::BadHeaderField("delete version"));
    }
    s.deleted = true;
    s.allow_recreate = p.allow_recreate;
    s.allow_continuation = p.allow_sequence_continuation;
    stamp.touch(&mut s);
    Ok(s)
}
