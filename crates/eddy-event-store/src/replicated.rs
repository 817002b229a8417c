//! The event store in a cluster: every change (write, trim, delete, schema registration) is a
//! [`Command`] that a shard's replicated group orders, and every member applies the same
//! commands in the same order ([`EventStore::apply`]), so each decision (existence, OCC,
//! idempotency, atomicity of a multi-aggregate write) is taken once per member, in log order,
//! with the same answer everywhere.
//!
//! What a member could decide differently is settled before the command is proposed
//! ([`EventStore::prepare_write`] and friends, on the member that takes the request): schema
//! validation (which waits on the schema threads for a bounded time), the node's limits, the
//! server clock (the command carries `now`) and event encoding (the command carries the
//! encoded, maybe compressed, bytes, so every member stores the same record and hash chain).
//!
//! Each record applied from a command carries the entry's index (the record header's
//! `FLAG_REPLICATED`): after a restart a shard resumes after the last index
//! its log holds ([`EventStore::replicated_through`]), so an entry is applied exactly once even
//! though the shard log and the group's log are synced separately. Entries after that index
//! that were refused wrote nothing, and are refused again in the same state.
//!
//! # Command layout (little endian)
//! `version u8 (1) · kind u8 (1 write, 2 trim, 3 delete, 4 schema) · client_id u128 ·
//! user_id (flag u8, u128) · now u64`, then per kind:
//! * write: `parts u32`, each `key (3 × u128) · flags u8 (1 allow_create, 2 expected_version
//!   present, 4 enforce_client_idempotency) · expected_version u64 · count u32 ·
//!   min/max client_seq u64 · min/max event_timestamp u64 · compression u8 · raw_len u32 ·
//!   stored_len u32 · stored bytes`;
//! * trim: `key · keep_from_version u64`;
//! * delete: `parts u32`, each `key · flags u8 (1 allow_recreate, 2 allow_sequence_continuation,
//!   4 expected_version present) · expected_version u64`;
//! * schema: `org_id u128 · aggregate_type_id u128 · event_type_major u64 ·
//!   event_type_minor u64 · schema_type u8 · length u32 · UTF-8 text`.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use eddy_log::{Completion, Corruption, IoOp};

use crate::error::{EventStoreError, Refusal, Result};
use crate::record::{self, put_key, put_opt_u128, EncodedEvents, Reader};
use crate::store::EventStore;
use crate::types::{
    AggregateDelete, AggregateWrite, DeleteOutcome, DeleteRequest, SchemaKey, SchemaRegistration,
    TrimOutcome, TrimRequest, WriteOutcome, WriteRequest,
};

/// Layout version of an encoded [`Command`].
pub const COMMAND_VERSION: u8 = 1;
/// Bytes of a command's common header.
const COMMAND_HEADER_LEN: usize = 1 + 1 + 16 + 17 + 8;
/// Bytes of a write part before its stored events.
const WRITE_PART_LEN: usize = 48 + 1 + 8 + EncodedEvents::SUMMARY_LEN;
/// Bytes of a delete part.
const DELETE_PART_LEN: usize = 48 + 1 + 8;

/// One change of the event store, as its shard's replicated group orders it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A write: every part on one shard, each with its events encoded (the parts'
    /// `events` vectors are empty; the encoded batch is beside each).
    Write {
        /// Writer identity; scopes idempotency.
        client_id: u128,
        /// Actor id.
        user_id: Option<u128>,
        /// The server clock of the member that took the request.
        now: u64,
        /// The parts, in request order.
        parts: Vec<(AggregateWrite, EncodedEvents)>,
    },
    /// A trim.
    Trim(TrimRequest),
    /// A delete of one or more aggregates on one shard.
    Delete(DeleteRequest),
    /// A schema registration (shard 0), its text already compiled once.
    RegisterSchema(SchemaRegistration),
}

/// What applying a [`Command`] produced, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// A write's outcome.
    Write(WriteOutcome),
    /// A trim's outcome.
    Trim(TrimOutcome),
    /// A delete's outcome.
    Delete(DeleteOutcome),
    /// A registration stored.
    Schema,
}

/// What applying an event shard's entry yields for its proposer.
pub enum EventApplied {
    /// The apply's outcome: resolves when the record is durable and visible here, or at once
    /// with a refusal.
    Applied(Completion<Applied, EventStoreError>),
    /// A leader's no-op entry.
    Nothing,
    /// This member stopped applying the group after a storage failure (the server's shard
    /// machine stops rather than leave a hole in the shard's log); a restart resumes it.
    Stopped,
}

impl std::fmt::Debug for EventApplied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EventApplied::Applied(_) => "Applied",
            EventApplied::Nothing => "Nothing",
            EventApplied::Stopped => "Stopped",
        })
    }
}

fn opt_u64(flags: u8, bit: u8, value: u64) -> Result<Option<u64>, Corruption> {
    if flags & bit != 0 {
        Ok(Some(value))
    } else if value == 0 {
        Ok(None)
    } else {
        Err(Corruption::BadHeaderField("absent value not zero"))
    }
}

impl Command {
    fn heading(&self) -> (u8, u128, Option<u128>, u64) {
        match self {
            Command::Write {
                client_id,
                user_id,
                now,
                ..
            } => (1, *client_id, *user_id, *now),
            Command::Trim(t) => (2, t.client_id, t.user_id, t.now),
            Command::Delete(d) => (3, d.client_id, d.user_id, d.now),
            Command::RegisterSchema(s) => (4, s.client_id, s.user_id, s.now),
        }
    }

    /// The command's bytes (see the [module docs](self)).
    pub fn encode(&self) -> Bytes {
        let (kind, client_id, user_id, now) = self.heading();
        let body = match self {
            Command::Write { parts, .. } => {
                4 + parts
                    .iter()
                    .map(|(_, e)| WRITE_PART_LEN + e.stored.len())
                    .sum::<usize>()
            }
            Command::Trim(_) => 48 + 8,
            Command::Delete(d) => 4 + d.deletes.len() * DELETE_PART_LEN,
            Command::RegisterSchema(s) => 48 + 1 + 4 + s.schema.len(),
        };
        let mut out = BytesMut::with_capacity(COMMAND_HEADER_LEN + body);
        out.put_u8(COMMAND_VERSION);
        out.put_u8(kind);
        out.put_u128_le(client_id);
        put_opt_u128(&mut out, user_id);
        out.put_u64_le(now);
        match self {
            Command::Write { parts, .. } => {
                out.put_u32_le(u32::try_from(parts.len()).unwrap_or(u32::MAX));
                for (w, e) in parts {
                    put_key(&mut out, &w.key);
                    out.put_u8(
                        u8::from(w.allow_create)
                            | u8::from(w.expected_version.is_some()) << 1
                            | u8::from(w.enforce_client_idempotency) << 2,
                    );
                    out.put_u64_le(w.expected_version.unwrap_or(0));
                    e.put(&mut out, None);
                }
            }
            Command::Trim(t) => {
                put_key(&mut out, &t.key);
                out.put_u64_le(t.keep_from_version);
            }
            Command::Delete(d) => {
                out.put_u32_le(u32::try_from(d.deletes.len()).unwrap_or(u32::MAX));
                for p in &d.deletes {
                    put_key(&mut out, &p.key);
                    out.put_u8(
                        u8::from(p.allow_recreate)
                            | u8::from(p.allow_sequence_continuation) << 1
                            | u8::from(p.expected_version.is_some()) << 2,
                    );
                    out.put_u64_le(p.expected_version.unwrap_or(0));
                }
            }
            Command::RegisterSchema(s) => {
                out.put_u128_le(s.key.org_id);
                out.put_u128_le(s.key.aggregate_type_id);
                out.put_u64_le(s.key.event_type_major);
                out.put_u64_le(s.key.event_type_minor);
                out.put_u8(s.schema_type);
                out.put_u32_le(u32::try_from(s.schema.len()).unwrap_or(u32::MAX));
                out.put_slice(s.schema.as_bytes());
            }
        }
        out.freeze()
    }

    /// Decodes a command; anything that is not exactly one well-formed command is
    /// [`Corruption`] (each length is checked against the bytes present before use).
    ///
    /// # Errors
    /// The first malformed field.
    pub fn decode(bytes: &Bytes) -> Result<Command, Corruption> {
        let mut r = Reader::new(bytes);
        if r.u8()? != COMMAND_VERSION {
            return Err(Corruption::BadHeaderField("command version"));
        }
        let kind = r.u8()?;
        let client_id = r.u128()?;
        let user_id = r.opt_u128()?;
        let now = r.u64()?;
        let command = match kind {
            1 => Command::Write {
                client_id,
                user_id,
                now,
                parts: read_write_parts(&mut r)?,
            },
            2 => Command::Trim(TrimRequest {
                key: r.key()?,
                keep_from_version: r.u64()?,
                client_id,
                user_id,
                now,
            }),
            3 => Command::Delete(DeleteRequest {
                client_id,
                user_id,
                deletes: read_deletes(&mut r)?,
                now,
            }),
            4 => {
                let (key, schema_type, schema) = read_schema(&mut r)?;
                Command::RegisterSchema(SchemaRegistration {
                    key,
                    schema_type,
                    schema,
                    client_id,
                    user_id,
                    now,
                })
            }
            _ => return Err(Corruption::BadHeaderField("command kind")),
        };
        if !r.done() {
            return Err(Corruption::BadHeaderField("trailing command bytes"));
        }
        Ok(command)
    }
}

/// Reads a write command's parts: each aggregate write (flags: bit 0 allow create, bit 1 an
/// expected version follows, bit 2 enforce client idempotency; no others) with its events,
/// still encoded. The events stay out of the [`AggregateWrite`] (its list is empty).
fn read_write_parts(
    r: &mut Reader<'_>,
) -> Result<Vec<(AggregateWrite, EncodedEvents)>, Corruption> {
    let n = r.count(WRITE_PART_LEN)?;
    let mut parts = Vec::with_capacity(n);
    for _ in 0..n {
        let key = r.key()?;
        let flags = r.u8()?;
        if flags & !0b111 != 0 {
            return Err(Corruption::BadHeaderField("write part flags"));
        }
        let expected_version = opt_u64(flags, 2, r.u64()?)?;
        // A command's events are never elided (only compaction elides).
        let (events, _) = EncodedEvents::read(r, false)?;
        parts.push((
            AggregateWrite {
                key,
                events: Vec::new(),
                allow_create: flags & 1 != 0,
                expected_version,
                enforce_client_idempotency: flags & 4 != 0,
            },
            events,
        ));
    }
    Ok(parts)
}

/// Reads a delete command's deletes (flags: bit 0 allow recreate, bit 1 allow sequence
/// continuation, bit 2 an expected version follows; no others).
fn read_deletes(r: &mut Reader<'_>) -> Result<Vec<AggregateDelete>, Corruption> {
    let n = r.count(DELETE_PART_LEN)?;
    let mut deletes = Vec::with_capacity(n);
    for _ in 0..n {
        let key = r.key()?;
        let flags = r.u8()?;
        if flags & !0b111 != 0 {
            return Err(Corruption::BadHeaderField("delete part flags"));
        }
        deletes.push(AggregateDelete {
            key,
            allow_recreate: flags & 1 != 0,
            allow_sequence_continuation: flags & 2 != 0,
            expected_version: opt_u64(flags, 4, r.u64()?)?,
        });
    }
    Ok(deletes)
}

/// Reads a schema registration's key, format code and text (UTF-8, at most
/// [`record::MAX_SCHEMA_BYTES`]).
fn read_schema(r: &mut Reader<'_>) -> Result<(SchemaKey, u8, String), Corruption> {
    let key = SchemaKey {
        org_id: r.u128()?,
        aggregate_type_id: r.u128()?,
        event_type_major: r.u64()?,
        event_type_minor: r.u64()?,
    };
    let schema_type = r.u8()?;
    let len = r.u32()? as usize;
    if len > record::MAX_SCHEMA_BYTES {
        return Err(Corruption::BadHeaderField("schema length"));
    }
    let text = r.take(len)?;
    let schema =
        String::from_utf8(text.to_vec()).map_err(|_| Corruption::BadHeaderField("schema text"))?;
    Ok((key, schema_type, schema))
}

impl EventStore {
    /// The checks [`EventStore::write`] makes before validation against the store's state
    /// (routing to one shard, input, schemas, limits), and the events' encoding: the shard and
    /// the [`Command`] to propose to its group.
    ///
    /// Schema validation waits on the store's schema threads, as [`EventStore::write`] does.
    ///
    /// # Errors
    /// The refusal (or encoding failure) [`EventStore::write`] would answer.
    pub fn prepare_write(&self, mut request: WriteRequest) -> Result<(u32, Command)> {
        let (shard, parts) = self.checked_parts(&mut request)?;
        Ok((
            shard,
            Command::Write {
                client_id: request.client_id,
                user_id: request.user_id,
                now: request.now,
                parts,
            },
        ))
    }

    /// The shard of a trim and its [`Command`].
    pub fn prepare_trim(&self, request: TrimRequest) -> (u32, Command) {
        (self.shard_of(&request.key), Command::Trim(request))
    }

    /// The shard of a delete (one for all its aggregates) and its [`Command`].
    ///
    /// # Errors
    /// A delete spanning shards.
    pub fn prepare_delete(&self, request: DeleteRequest) -> Result<(u32, Command)> {
        let shard = self
            .placement()
            .shard_of_keys(request.deletes.iter().map(|d| &d.key))?;
        Ok((shard, Command::Delete(request)))
    }

    /// The checks of [`EventStore::register_schema`] before uniqueness (a known type, the
    /// size cap, text that compiles): the shard (0) and the [`Command`].
    ///
    /// # Errors
    /// The refusal [`EventStore::register_schema`] would answer.
    pub fn prepare_schema(&self, registration: SchemaRegistration) -> Result<(u32, Command)> {
        let (registration, _) = self.schemas().compile_registration(registration)?;
        if registration.schema.len() > record::MAX_SCHEMA_BYTES {
            return Err(Refusal::Limit {
                what: "schema bytes",
                value: registration.schema.len() as u64,
                limit: record::MAX_SCHEMA_BYTES as u64,
            }
            .into());
        }
        Ok((0, Command::RegisterSchema(registration)))
    }

    /// Applies a committed command of `shard`'s group, the entry at `index`: validated against
    /// the shard's state (pending records first, as any write) and appended as one record
    /// carrying `index`. Resolves when the record is durable and visible, or at once with a
    /// refusal (nothing written). Never waits on schema threads, and never refuses for the
    /// index's backlog: every member takes the same decision.
    pub fn apply(
        &self,
        shard: u32,
        index: u64,
        command: Command,
    ) -> Completion<Applied, EventStoreError> {
        let s = match self.shard(u64::from(shard)) {
            Ok(s) => s,
            Err(e) => return Completion::ready(Err(e)),
        };
        let misrouted = |found: u32| {
            Completion::ready(Err(EventStoreError::io(
                IoOp::Append,
                s.log.dir(),
                std::io::Error::other(format!(
                    "a command of shard {shard}'s group belongs to shard {found}"
                )),
            )))
        };
        match command {
            Command::Write {
                client_id,
                user_id,
                now,
                parts,
            } => {
                match self
                    .placement()
                    .shard_of_keys(parts.iter().map(|(w, _)| &w.key))
                {
                    Ok(found) if found == shard => {}
                    Ok(found) => return misrouted(found),
                    Err(e) => return Completion::ready(Err(e.into())),
                }
                s.write(client_id, user_id, now, &parts, Some(index))
                    .map(|r| r.map(Applied::Write))
            }
            Command::Trim(request) => {
                let found = self.shard_of(&request.key);
                if found != shard {
                    return misrouted(found);
                }
                s.trim(&request, Some(index)).map(|r| r.map(Applied::Trim))
            }
            Command::Delete(request) => {
                match self
                    .placement()
                    .shard_of_keys(request.deletes.iter().map(|d| &d.key))
                {
                    Ok(found) if found == shard => {}
                    Ok(found) => return misrouted(found),
                    Err(e) => return Completion::ready(Err(e.into())),
                }
                s.delete(
                    request.client_id,
                    request.user_id,
                    request.now,
                    &request.deletes,
                    Some(index),
                )
                .map(|r| r.map(Applied::Delete))
            }
            Command::RegisterSchema(registration) => {
                if shard != 0 {
                    return misrouted(0);
                }
                let key = registration.key;
                let schemas = self.schemas_handle();
                s.register_schema(registration, Some(index)).map(move |r| {
                    if r.is_ok() {
                        // Compiled again from the stored text at its next use.
                        schemas.forget(&key);
                    }
                    r.map(|()| Applied::Schema)
                })
            }
        }
    }

    /// The index of the last replicated entry `shard`'s log holds a record of (0: none): a
    /// restarted member applies its group's entries after it.
    ///
    /// # Errors
    /// No such shard.
    pub fn replicated_through(&self, shard: u32) -> Result<u64> {
        Ok(self.shard(u64::from(shard))?.raft_through())
    }

    /// Where `shard`'s log stands now: every record queued so far is below
    /// [`ShardPosition::next_seq`]. Taken by a group's leader for a snapshot: on its
    /// consensus thread, after applying entry `i`, the records below it are the shard's state
    /// at `i`.
    ///
    /// # Errors
    /// No such shard.
    pub fn shard_position(&self, shard: u32) -> Result<ShardPosition> {
        let (next_seq, tip) = self.shard(u64::from(shard))?.position();
        Ok(ShardPosition { next_seq, tip })
    }

    /// Whether `shard`'s log dropped records it queued since it opened (one atomic load): a
    /// cluster member then misses an entry it applied (nobody waits on a follower's apply to
    /// learn it), so its shard machine stops applying until a restart. False for a shard
    /// that does not exist.
    pub fn shard_dropped_writes(&self, shard: u32) -> bool {
        self.shard(u64::from(shard))
            .is_ok_and(crate::shard::Shard::dropped_writes)
    }

    /// Whether `shard`'s log fail-stopped (it takes no more writes until a restart).
    pub fn shard_log_failed(&self, shard: u32) -> bool {
        self.shard(u64::from(shard))
            .is_ok_and(|s| s.log.failure().is_some())
    }

    /// Resolves once every record `shard` has queued so far is visible to readers. A member
    /// that applied a group's entries up to some index (a read's ReadIndex) waits on it before
    /// reading: an applied entry's record is queued at once but visible only once this
    /// member's log committed it.
    pub fn visible_barrier(&self, shard: u32) -> Completion<(), EventStoreError> {
        match self.shard(u64::from(shard)) {
            Ok(s) => s.visible_barrier(),
            Err(e) => Completion::ready(Err(e)),
        }
    }

    /// The hash chain's tip just before sequence number `next_seq` of `shard` (the tip a
    /// [`ShardPosition`] at `next_seq` carries), when the shard has reached that point: a
    /// member whose shard is ahead of a snapshot's position checks with it that it holds the
    /// same records up to there. `None` when the shard has not reached `next_seq`, or no
    /// longer holds the record before it.
    ///
    /// # Errors
    /// No such shard, or the record cannot be read.
    pub fn chain_tip_before(&self, shard: u32, next_seq: u64) -> Result<Option<[u8; 32]>> {
        let s = self.shard(u64::from(shard))?;
        let (now, tip) = s.position();
        if next_seq == now {
            return Ok(Some(tip));
        }
        let first = s.log.bounds().first;
        if next_seq > now || next_seq < first {
            return Ok(None);
        }
        if next_seq == first {
            return Ok(Some(record::GENESIS_TIP));
        }
        let seq = next_seq - 1;
        let records = s.log.read(seq, 1, u64::MAX)?;
        let Some(r) = records.into_iter().find(|r| r.meta.seq == seq) else {
            return Ok(None);
        };
        let rec = record::decode_record(r.meta.tag, &r.payload)
            .map_err(|k| EventStoreError::corrupt(s.log.dir().to_path_buf(), seq, k))?;
        Ok(Some(rec.tip_after(seq, &r.payload)))
    }

    /// `shard`'s records from sequence number `from` (the first one the log holds when it
    /// starts later), below `until`, at most about `max_bytes` of payload (always at least
    /// one record when there is one): what a member copying a snapshot of the shard fetches,
    /// chunk by chunk. Only published records are returned.
    ///
    /// # Errors
    /// No such shard, or the log cannot be read.
    pub fn export_records(
        &self,
        shard: u32,
        from: u64,
        until: u64,
        max_bytes: u64,
    ) -> Result<Vec<ShardRecord>> {
        let s = self.shard(u64::from(shard))?;
        let from = from.max(s.log.bounds().first);
        if from >= until {
            return Ok(Vec::new());
        }
        let records = s.log.read(from, until - from, max_bytes)?;
        Ok(records
            .into_iter()
            .filter(|r| r.meta.seq >= from && r.meta.seq < until)
            .map(|r| ShardRecord {
                seq: r.meta.seq,
                timestamp: r.meta.timestamp,
                tag: r.meta.tag,
                payload: r.payload,
            })
            .collect())
    }

    /// Appends records another member of `shard`'s group exported (in sequence order),
    /// skipping those this shard already holds; each must be the log's next record and
    /// continue the shard's hash chain (so this shard held the same records as that member
    /// before them). Resolves once every one is written and visible; durable after
    /// [`sync_shard`](Self::sync_shard). Entries at or below the last copied record's index are
    /// not applied again ([`Refusal::AlreadyApplied`]).
    ///
    /// # Errors
    /// No such shard, a record out of order, off the chain or damaged, or the log failed.
    pub fn import_records(
        &self,
        shard: u32,
        records: Vec<ShardRecord>,
    ) -> Result<Completion<(), EventStoreError>> {
        let s = self.shard(u64::from(shard))?;
        let mut last = None;
        for r in records {
            if r.seq < s.log.next_seq_to_assign() {
                continue;
            }
            last = Some(s.import(r.seq, r.timestamp, r.tag, r.payload)?);
        }
        Ok(match last {
            Some(ack) => ack.map(|r| r.map(|_| ()).map_err(Into::into)),
            None => Completion::ready(Ok(())),
        })
    }

    /// Makes every record of `shard` queued so far durable (an fdatasync of its log, whatever
    /// its durability setting).
    pub fn sync_shard(&self, shard: u32) -> Completion<(), EventStoreError> {
        match self.shard(u64::from(shard)) {
            Ok(s) => s.log.flush().map(|r| r.map_err(Into::into)),
            Err(e) => Completion::ready(Err(e)),
        }
    }
}

/// Where a shard's log stands (see [`EventStore::shard_position`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardPosition {
    /// The sequence number the next record gets.
    pub next_seq: u64,
    /// The hash chain's tip after the record before it.
    pub tip: [u8; 32],
}

/// One record of a shard's log, as a member copying a snapshot receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRecord {
    /// Its sequence number.
    pub seq: u64,
    /// The timestamp its log assigned.
    pub timestamp: u64,
    /// The record's kind (the log record's tag).
    pub tag: u32,
    /// The record's bytes, exactly as the shard's log holds them (unencrypted).
    pub payload: Bytes,
}

/// What an event shard's snapshot carries: not the shard's data (that can be any size), but
/// where its log stood when the snapshot's entry was applied. The member installing it first
/// copies the records it lacks from the sender (the server's `copy_shard`).
///
/// Layout: `magic "eSNP" · version u8 (1) · shard u32 · next_seq u64 · tip [32]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardSnapshot {
    /// The shard.
    pub shard: u32,
    /// Its log's position after the snapshot's entry.
    pub position: ShardPosition,
}

const SNAPSHOT_MAGIC: [u8; 4] = *b"eSNP";
const SNAPSHOT_LEN: usize = 4 + 1 + 4 + 8 + 32;

impl ShardSnapshot {
    /// The snapshot's bytes.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(SNAPSHOT_LEN);
        b.put_slice(&SNAPSHOT_MAGIC);
        b.put_u8(1);
        b.put_u32_le(self.shard);
        b.put_u64_le(self.position.next_seq);
        b.put_slice(&self.position.tip);
        b.freeze()
    }

    /// Decodes [`encode`](Self::encode)'s bytes.
    pub fn decode(mut bytes: &[u8]) -> Option<ShardSnapshot> {
        if bytes.len() != SNAPSHOT_LEN || bytes[..4] != SNAPSHOT_MAGIC || bytes[4] != 1 {
            return None;
        }
        bytes.advance(5);
        let shard = bytes.get_u32_le();
        let next_seq = bytes.get_u64_le();
        let tip = bytes[..32].try_into().ok()?;
        Some(ShardSnapshot {
            shard,
            position: ShardPosition { next_seq, tip },
        })
    }
}

/// The out-of-band request for a shard's records (`kind u8 (1) · shard u32 · from u64 ·
/// until u64`), sent by a member copying a snapshot to the snapshot's sender.
pub fn encode_records_request(shard: u32, from: u64, until: u64) -> Bytes {
    let mut b = BytesMut::with_capacity(21);
    b.put_u8(1);
    b.put_u32_le(shard);
    b.put_u64_le(from);
    b.put_u64_le(until);
    b.freeze()
}

/// Answers a peer's request for a shard's records from `store` (at most about `max_bytes`
/// of them): `status u8 (0)` then per record `seq u64 · timestamp u64 ·
/// tag u32 · len u32 · payload`, or `status u8 (1)` and a UTF-8 reason.
pub fn answer_records_request(store: &EventStore, mut request: &[u8], max_bytes: u64) -> Bytes {
    let refuse = |reason: &str| {
        let mut b = BytesMut::with_capacity(1 + reason.len());
        b.put_u8(1);
        b.put_slice(reason.as_bytes());
        b.freeze()
    };
    if request.len() != 21 || request[0] != 1 {
        return refuse("not a request for a shard's records");
    }
    request.advance(1);
    let shard = request.get_u32_le();
    let from = request.get_u64_le();
    let until = request.get_u64_le();
    match store.export_records(shard, from, until, max_bytes) {
        Ok(records) => {
            let len = records.iter().map(|r| 24 + r.payload.len()).sum::<usize>();
            let mut b = BytesMut::with_capacity(1 + len);
            b.put_u8(0);
            for r in records {
                b.put_u64_le(r.seq);
                b.put_u64_le(r.timestamp);
                b.put_u32_le(r.tag);
                b.put_u32_le(u32::try_from(r.payload.len()).expect("a record is under 4 GiB"));
                b.put_slice(&r.payload);
            }
            b.freeze()
        }
        Err(e) => refuse(&e.to_string()),
    }
}

/// Decodes [`answer_records_request`]'s answer.
///
/// # Errors
/// The peer refused (its reason), or the bytes are malformed.
pub fn decode_records_answer(mut answer: Bytes) -> Result<Vec<ShardRecord>, String> {
    match answer.first() {
        Some(0) => {}
        Some(1) => {
            return Err(format!(
                "the peer refused: {}",
                String::from_utf8_lossy(&answer[1..])
            ))
        }
        _ => return Err("malformed answer".into()),
    }
    answer.advance(1);
    let mut records = Vec::new();
    while !answer.is_empty() {
        if answer.len() < 24 {
            return Err("truncated record in an answer".into());
        }
        let seq = answer.get_u64_le();
        let timestamp = answer.get_u64_le();
        let tag = answer.get_u32_le();
        let len = answer.get_u32_le() as usize;
        if answer.len() < len {
            return Err("truncated record in an answer".into());
        }
        records.push(ShardRecord {
            seq,
            timestamp,
            tag,
            payload: answer.split_to(len),
        });
    }
    Ok(records)
}

/// Bytes of [`encode_installed`].
pub const INSTALLED_LEN: usize = 4 + 1 + 8 + 8 + 4;

/// The snapshot (entry index and term) a member installed for a shard, as its group's
/// `shard.installed` file records it: `magic "eSHI" · version u8 (1) · index u64 · term u64 ·
/// CRC-32C u32` of the bytes before it.
pub fn encode_installed(index: u64, term: u64) -> [u8; INSTALLED_LEN] {
    let mut b = [0u8; INSTALLED_LEN];
    b[..4].copy_from_slice(b"eSHI");
    b[4] = 1;
    b[5..13].copy_from_slice(&index.to_le_bytes());
    b[13..21].copy_from_slice(&term.to_le_bytes());
    let crc = crc32c::crc32c(&b[..21]);
    b[21..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes [`encode_installed`]'s bytes: `None` when they are not exactly such a record.
pub fn decode_installed(b: &[u8]) -> Option<(u64, u64)> {
    if b.len() != INSTALLED_LEN || &b[..4] != b"eSHI" || b[4] != 1 {
        return None;
    }
    let crc = u32::from_le_bytes(b[21..].try_into().ok()?);
    if crc32c::crc32c(&b[..21]) != crc {
        return None;
    }
    Some((
        u64::from_le_bytes(b[5..13].try_into().ok()?),
        u64::from_le_bytes(b[13..21].try_into().ok()?),
    ))
}

/// The replicated index of the last record of `shard`'s log (0: none), read from the log.
pub(crate) fn last_raft_index(shard: &crate::shard::Shard) -> Result<u64> {
    let bounds = shard.log.bounds();
    if bounds.next <= bounds.first {
        return Ok(0);
    }
    let last = bounds.next - 1;
    let records = shard.log.read(last, 1, u64::MAX)?;
    let Some(r) = records.into_iter().find(|r| r.meta.seq == last) else {
        return Ok(0);
    };
    let rec = record::decode_record(r.meta.tag, &r.payload)
        .map_err(|k| EventStoreError::corrupt(shard.log.dir().to_path_buf(), last, k))?;
    Ok(rec.raft_index.unwrap_or(0))
}

#[cfg(test)]
mod tests;
