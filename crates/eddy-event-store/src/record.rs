//! The event store's log records: one record per committed request (write, trim, delete,
//! schema registration), stored as the payload of an ordinary [`Log`](eddy_log::Log) record whose
//! tag names the kind. Byte layouts are in the [module docs](super); this is the only place
//! that reads or writes them.
//!
//! Every decoder checks each length against the bytes present and a named limit before it
//! allocates; a record that does not decode is corruption (its CRC already verified, so the
//! writer was wrong or the disk lies).

use std::io;
use std::sync::Mutex;

use bytes::{BufMut, Bytes, BytesMut};

use eddy_log::{lock, Corruption};

use crate::types::{AggregateKey, NewEvent, SchemaKey, StoredEvent};

/// Log tag of a write record.
pub const TAG_WRITE: u32 = 0x10;
/// Log tag of a trim record.
pub const TAG_TRIM: u32 = 0x11;
/// Log tag of a delete record.
pub const TAG_DELETE: u32 = 0x12;
/// Log tag of a schema registration record.
pub const TAG_SCHEMA: u32 = 0x13;

/// Version of the record payload layout.
pub const RECORD_VERSION: u8 = 1;
/// Version byte of a record rewritten by compaction: the layout of [`RECORD_VERSION`] plus the
/// record's original chain tip after the header, and write parts whose events may be elided.
pub const RECORD_VERSION_COMPACTED: u8 = 2;
/// Bytes of the original chain tip a compacted record carries after its header.
pub const COMPACTED_TIP_LEN: usize = 32;
/// Bit of a write part's compression byte marking its events as elided (compacted records
/// only): the stored length keeps the original length and no stored bytes follow.
pub const ELIDED_FLAG: u8 = 0x80;
/// Bytes of the common payload header.
pub const RECORD_HEADER_LEN: usize = 72;
/// Bit of the header's flags (its two bytes after the kind) marking a record applied from a
/// replicated group's log: the entry's index follows the header (after the compacted tip,
/// when there is one) as 8 bytes. A restart resumes the group after the last one.
pub const FLAG_REPLICATED: u16 = 1;
/// Bytes of a replicated record's entry index.
pub const REPLICATED_INDEX_LEN: usize = 8;
/// Bytes of a write part's header (before its stored event bytes).
pub const WRITE_PART_HEADER_LEN: usize = 48 + 8 + 8 + 1 + EncodedEvents::SUMMARY_LEN;
/// Bytes of one encoded event before its value.
pub const EVENT_HEADER_LEN: usize = 8 + 1 + 16 + 8 + 8 + 8 + 1 + 12 + 4;
/// Bytes of one delete part.
pub const DELETE_PART_LEN: usize = 48 + 1 + 8;
/// Most aggregates one write or delete may name.
pub const MAX_PARTS: usize = 4096;
/// Most events one batch may hold.
pub const MAX_EVENTS_PER_BATCH: u32 = 1 << 20;
/// Largest schema text stored.
pub const MAX_SCHEMA_BYTES: usize = 1 << 20;
/// Largest uncompressed event data of one batch (the log's record payload cap).
pub const MAX_BATCH_BYTES: u32 = eddy_log::format::MAX_RECORD_PAYLOAD;
/// Event data smaller than this is stored uncompressed (zstd cannot win on it).
pub const MIN_COMPRESS_BYTES: usize = 128;
/// The genesis of every shard's hash chain.
pub const GENESIS_TIP: [u8; 32] = [0; 32];

const _: () = assert!(WRITE_PART_HEADER_LEN == 110);
const _: () = assert!(EVENT_HEADER_LEN == 66);

/// How a part's event bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Raw.
    None,
    /// zstd with the store's dictionary.
    ZstdDict,
    /// zstd without a dictionary.
    Zstd,
}

impl Compression {
    pub(crate) fn code(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::ZstdDict => 1,
            Compression::Zstd => 2,
        }
    }

    pub(crate) fn from_code(code: u8) -> Result<Self, Corruption> {
        match code {
            0 => Ok(Compression::None),
            1 => Ok(Compression::ZstdDict),
            2 => Ok(Compression::Zstd),
            _ => Err(Corruption::BadHeaderField("compression")),
        }
    }
}

/// How a write treats a deleted aggregate it recreates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recreate {
    /// Not a recreate.
    No,
    /// Versions and event sequences restart at 1.
    Fresh,
    /// Versions and event sequences continue.
    Continue,
}

/// A batch's events encoded (and maybe compressed) ahead of validation, outside any lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedEvents {
    /// Events in the batch.
    pub count: u32,
    /// Smallest client sequence.
    pub min_client_seq: u64,
    /// Largest client sequence.
    pub max_client_seq: u64,
    /// Smallest event timestamp.
    pub min_event_timestamp: u64,
    /// Largest event timestamp.
    pub max_event_timestamp: u64,
    /// How `stored` is encoded.
    pub compression: Compression,
    /// Length of the raw encoding.
    pub raw_len: u32,
    /// The stored bytes.
    pub stored: Bytes,
}

impl EncodedEvents {
    /// Bytes of the summary in front of the stored bytes: count, the client sequence and
    /// timestamp ranges, the compression byte, the raw and the stored length.
    pub(crate) const SUMMARY_LEN: usize = 4 + 8 * 4 + 1 + 4 + 4;

    /// Writes the summary, then the stored bytes: the one layout of a batch's events, in a
    /// record and in a replicated command. An `elided` part (a compacted record's, its bytes
    /// gone) writes its original stored length and the elided flag, and no bytes.
    pub(crate) fn put(&self, out: &mut BytesMut, elided: Option<u32>) {
        out.put_u32_le(self.count);
        out.put_u64_le(self.min_client_seq);
        out.put_u64_le(self.max_client_seq);
        out.put_u64_le(self.min_event_timestamp);
        out.put_u64_le(self.max_event_timestamp);
        let flag = if elided.is_some() { ELIDED_FLAG } else { 0 };
        out.put_u8(self.compression.code() | flag);
        out.put_u32_le(self.raw_len);
        out.put_u32_le(elided.unwrap_or(u32::try_from(self.stored.len()).unwrap_or(u32::MAX)));
        out.put_slice(&self.stored);
    }

    /// Reads what [`EncodedEvents::put`] wrote, with every check of the summary: 1 to
    /// [`MAX_EVENTS_PER_BATCH`] events, ranges in order, a raw length that holds their headers
    /// and at most [`MAX_BATCH_BYTES`], stored bytes no longer than that and equal to the raw
    /// length when uncompressed. Only where `may_elide` (a compacted record) may the part be
    /// elided; then its original stored length comes back beside empty events.
    pub(crate) fn read(
        r: &mut Reader<'_>,
        may_elide: bool,
    ) -> Result<(Self, Option<u32>), Corruption> {
        let count = r.u32()?;
        let min_client_seq = r.u64()?;
        let max_client_seq = r.u64()?;
        let min_event_timestamp = r.u64()?;
        let max_event_timestamp = r.u64()?;
        let code = r.u8()?;
        let elided = may_elide && code & ELIDED_FLAG != 0;
        let compression = Compression::from_code(if elided { code & !ELIDED_FLAG } else { code })?;
        let raw_len = r.u32()?;
        let stored_len = r.u32()?;
        if count == 0
            || count > MAX_EVENTS_PER_BATCH
            || raw_len > MAX_BATCH_BYTES
            || (raw_len as usize) < count as usize * EVENT_HEADER_LEN
            || min_client_seq > max_client_seq
            || min_event_timestamp > max_event_timestamp
        {
            return Err(Corruption::BadHeaderField("batch summary"));
        }
        if stored_len > MAX_BATCH_BYTES
            || (compression == Compression::None && stored_len != raw_len)
        {
            return Err(Corruption::BadHeaderField("stored length"));
        }
        let stored = if elided {
            Bytes::new()
        } else {
            r.take(stored_len as usize)?
        };
        let events = Self {
            count,
            min_client_seq,
            max_client_seq,
            min_event_timestamp,
            max_event_timestamp,
            compression,
            raw_len,
            stored,
        };
        Ok((events, elided.then_some(stored_len)))
    }
}

/// One decoded write part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritePart {
    /// The aggregate.
    pub key: AggregateKey,
    /// The batch's version.
    pub version: u64,
    /// `event_seq` of its first event.
    pub first_event_seq: u64,
    /// Whether it recreated a deleted aggregate.
    pub recreate: Recreate,
    /// Its events, encoded (`stored` is empty when elided).
    pub events: EncodedEvents,
    /// `Some(original stored length)` when compaction removed the events' bytes because the
    /// batch had become unreadable (trimmed, or of a deleted incarnation). Everything else
    /// about the batch is kept: replaying it rebuilds the same aggregate state.
    pub elided: Option<u32>,
}

impl WritePart {
    /// Length of the events' stored (possibly compressed) bytes as written, elided or not.
    pub fn stored_len(&self) -> u64 {
        self.elided
            .map_or(self.events.stored.len() as u64, u64::from)
    }
}

/// One decoded delete part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeletePart {
    /// The aggregate.
    pub key: AggregateKey,
    /// The delete's flag.
    pub allow_recreate: bool,
    /// The delete's flag.
    pub allow_sequence_continuation: bool,
    /// The aggregate's version when deleted.
    pub version: u64,
}

/// What a record does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordBody {
    /// Event batches, one per aggregate.
    Write(Vec<WritePart>),
    /// A trim of one aggregate.
    Trim {
        /// The aggregate.
        key: AggregateKey,
        /// The new floor.
        keep_from: u64,
    },
    /// Soft deletes.
    Delete(Vec<DeletePart>),
    /// A schema registration.
    Schema {
        /// The schema key.
        key: SchemaKey,
        /// Its format code.
        schema_type: u8,
        /// Its text.
        schema: Bytes,
    },
}

impl RecordBody {
    /// The log tag of this kind of record.
    pub fn tag(&self) -> u32 {
        match self {
            RecordBody::Write(_) => TAG_WRITE,
            RecordBody::Trim { .. } => TAG_TRIM,
            RecordBody::Delete(_) => TAG_DELETE,
            RecordBody::Schema { .. } => TAG_SCHEMA,
        }
    }
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// The shard's chain tip before this record.
    pub prev_tip: [u8; 32],
    /// Who wrote it.
    pub client_id: u128,
    /// Actor id.
    pub user_id: Option<u128>,
    /// What it does.
    pub body: RecordBody,
    /// Set on a record rewritten by compaction: the shard's chain tip after this record as it
    /// was originally written (its elided bytes can no longer be hashed).
    pub compacted_tip: Option<[u8; 32]>,
    /// In a cluster: the index of the replicated log entry this record was applied from
    /// (the same on every member, so part of the chain).
    pub raft_index: Option<u64>,
}

impl EventRecord {
    /// The shard's chain tip after this record, stored at log sequence `seq` with `payload`
    /// (its encoding): computed for an original record, the recorded one for a compacted one.
    pub fn tip_after(&self, seq: u64, payload: &[u8]) -> [u8; 32] {
        self.compacted_tip
            .unwrap_or_else(|| chain_tip(seq, payload))
    }
}

/// The chain tip after a record: `BLAKE3(prev_tip ‖ seq ‖ payload after the prev_tip)`.
/// Every input is replica-independent (the sequence number and the replicated payload).
pub fn chain_tip(seq: u64, payload: &[u8]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&payload[..32.min(payload.len())]);
    hasher.update(&seq.to_le_bytes());
    if payload.len() > 32 {
        hasher.update(&payload[32..]);
    }
    *hasher.finalize().as_bytes()
}

// ------------------------------------------------------------------------------------------------
// Encoding.

pub(crate) fn put_key(out: &mut BytesMut, key: &AggregateKey) {
    out.put_u128_le(key.org_id);
    out.put_u128_le(key.aggregate_type_id);
    out.put_u128_le(key.aggregate_id);
}

pub(crate) fn put_opt_u128(out: &mut BytesMut, v: Option<u128>) {
    out.put_u8(u8::from(v.is_some()));
    out.put_u128_le(v.unwrap_or(0));
}

/// Encodes a record payload.
///
/// # Panics
///
/// If a part is elided in a record without `compacted_tip`, or carries stored bytes while
/// elided (records built that way exist only through a bug).
pub fn encode_record(record: &EventRecord) -> Bytes {
    let mut size = RECORD_HEADER_LEN;
    if record.compacted_tip.is_some() {
        size += COMPACTED_TIP_LEN;
    }
    if record.raft_index.is_some() {
        size += REPLICATED_INDEX_LEN;
    }
    match &record.body {
        RecordBody::Write(parts) => {
            size += 4 + parts
                .iter()
                .map(|p| WRITE_PART_HEADER_LEN + p.events.stored.len())
                .sum::<usize>();
        }
        RecordBody::Trim { .. } => size += 56,
        RecordBody::Delete(parts) => size += 4 + parts.len() * DELETE_PART_LEN,
        RecordBody::Schema { schema, .. } => size += 48 + 1 + 4 + schema.len(),
    }
    let mut out = BytesMut::with_capacity(size);
    out.put_slice(&record.prev_tip);
    out.put_u8(if record.compacted_tip.is_some() {
        RECORD_VERSION_COMPACTED
    } else {
        RECORD_VERSION
    });
    out.put_u8(match &record.body {
        RecordBody::Write(_) => 1,
        RecordBody::Trim { .. } => 2,
        RecordBody::Delete(_) => 3,
        RecordBody::Schema { .. } => 4,
    });
    out.put_u16_le(if record.raft_index.is_some() {
        FLAG_REPLICATED
    } else {
        0
    });
    out.put_u128_le(record.client_id);
    put_opt_u128(&mut out, record.user_id);
    out.put_slice(&[0u8; 3]);
    debug_assert_eq!(out.len(), RECORD_HEADER_LEN);
    if let Some(tip) = &record.compacted_tip {
        out.put_slice(tip);
    }
    if let Some(index) = record.raft_index {
        out.put_u64_le(index);
    }
    match &record.body {
        RecordBody::Write(parts) => {
            out.put_u32_le(parts.len() as u32);
            for p in parts {
                assert!(
                    p.elided.is_none()
                        || (record.compacted_tip.is_some() && p.events.stored.is_empty()),
                    "an elided part belongs to a compacted record and has no stored bytes"
                );
                put_key(&mut out, &p.key);
                out.put_u64_le(p.version);
                out.put_u64_le(p.first_event_seq);
                out.put_u8(match p.recreate {
                    Recreate::No => 0,
                    Recreate::Fresh => 1,
                    Recreate::Continue => 2,
                });
                p.events.put(&mut out, p.elided);
            }
        }
        RecordBody::Trim { key, keep_from } => {
            put_key(&mut out, key);
            out.put_u64_le(*keep_from);
        }
        RecordBody::Delete(parts) => {
            out.put_u32_le(parts.len() as u32);
            for p in parts {
                put_key(&mut out, &p.key);
                out.put_u8(
                    u8::from(p.allow_recreate) | (u8::from(p.allow_sequence_continuation) << 1),
                );
                out.put_u64_le(p.version);
            }
        }
        RecordBody::Schema {
            key,
            schema_type,
            schema,
        } => {
            out.put_u128_le(key.org_id);
            out.put_u128_le(key.aggregate_type_id);
            out.put_u64_le(key.event_type_major);
            out.put_u64_le(key.event_type_minor);
            out.put_u8(*schema_type);
            out.put_u32_le(schema.len() as u32);
            out.put_slice(schema);
        }
    }
    debug_assert_eq!(out.len(), size);
    out.freeze()
}

/// Encodes a batch's events in the raw layout.
pub fn encode_events_raw(events: &[NewEvent]) -> Vec<u8> {
    let size: usize = events
        .iter()
        .map(|e| EVENT_HEADER_LEN + e.value.len())
        .sum();
    let mut out = Vec::with_capacity(size);
    for e in events {
        out.put_u64_le(e.client_seq);
        out.put_u8(u8::from(e.event_id.is_some()));
        out.put_u128_le(e.event_id.unwrap_or(0));
        out.put_u64_le(e.event_timestamp);
        out.put_u64_le(e.event_type_major);
        out.put_u64_le(e.event_type_minor);
        out.put_u8(u8::from(e.iv.is_some()));
        out.put_slice(&e.iv.unwrap_or([0; 12]));
        out.put_u32_le(e.value.len() as u32);
        out.put_slice(&e.value);
    }
    out
}

// ------------------------------------------------------------------------------------------------
// Compression.

/// zstd compressors and decompressors, built once and reused (building one with a dictionary
/// costs far more than compressing a small batch).
pub struct EventCodec {
    level: i32,
    dictionary: Option<Bytes>,
    compressors: Mutex<Vec<zstd::bulk::Compressor<'static>>>,
    decompressors: Mutex<Vec<zstd::bulk::Decompressor<'static>>>,
}

impl std::fmt::Debug for EventCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventCodec")
            .field("level", &self.level)
            .field("dictionary_len", &self.dictionary.as_ref().map(Bytes::len))
            .finish_non_exhaustive()
    }
}

/// Most idle (de)compressors kept for reuse.
const MAX_IDLE_CODERS: usize = 16;

impl EventCodec {
    /// A codec compressing at `level` (0 disables compression) with an optional dictionary.
    pub fn new(level: i32, dictionary: Option<Bytes>) -> Self {
        EventCodec {
            level,
            dictionary,
            compressors: Mutex::new(Vec::new()),
            decompressors: Mutex::new(Vec::new()),
        }
    }

    fn compress(&self, raw: &[u8]) -> io::Result<Option<(Compression, Vec<u8>)>> {
        if self.level == 0 || raw.len() < MIN_COMPRESS_BYTES {
            return Ok(None);
        }
        let taken = lock(&self.compressors).pop();
        let mut compressor = match taken {
            Some(c) => c,
            None => match &self.dictionary {
                Some(dict) => zstd::bulk::Compressor::with_dictionary(self.level, dict)?,
                None => zstd::bulk::Compressor::new(self.level)?,
            },
        };
        let out = compressor.compress(raw);
        let mut pool = lock(&self.compressors);
        if pool.len() < MAX_IDLE_CODERS {
            pool.push(compressor);
        }
        drop(pool);
        let out = out?;
        if out.len() >= raw.len() {
            return Ok(None);
        }
        let kind = if self.dictionary.is_some() {
            Compression::ZstdDict
        } else {
            Compression::Zstd
        };
        Ok(Some((kind, out)))
    }

    fn decompress(
        &self,
        kind: Compression,
        stored: &[u8],
        raw_len: u32,
    ) -> Result<Vec<u8>, Corruption> {
        let bad = |_| Corruption::BadHeaderField("compressed events");
        let mut decompressor = match kind {
            Compression::None => return Ok(stored.to_vec()),
            Compression::ZstdDict => {
                let Some(dict) = &self.dictionary else {
                    return Err(Corruption::BadHeaderField("compression dictionary missing"));
                };
                let taken = lock(&self.decompressors).pop();
                match taken {
                    Some(d) => d,
                    None => zstd::bulk::Decompressor::with_dictionary(dict).map_err(bad)?,
                }
            }
            Compression::Zstd => zstd::bulk::Decompressor::new().map_err(bad)?,
        };
        // raw_len was checked against MAX_BATCH_BYTES by the decoder: a bounded allocation.
        let out = decompressor.decompress(stored, raw_len as usize);
        if kind == Compression::ZstdDict {
            let mut pool = lock(&self.decompressors);
            if pool.len() < MAX_IDLE_CODERS {
                pool.push(decompressor);
            }
        }
        let out = out.map_err(bad)?;
        if out.len() != raw_len as usize {
            return Err(Corruption::BadHeaderField("decompressed length"));
        }
        Ok(out)
    }

    /// Encodes (and compresses when it pays and no event is encrypted) a batch's events.
    pub fn encode_events(&self, events: &[NewEvent]) -> io::Result<EncodedEvents> {
        let raw = encode_events_raw(events);
        let encrypted = events.iter().any(|e| e.iv.is_some());
        let (compression, stored) = match if encrypted {
            None
        } else {
            self.compress(&raw)?
        } {
            Some((kind, bytes)) => (kind, Bytes::from(bytes)),
            None => (Compression::None, Bytes::from(raw.clone())),
        };
        let count = events.len() as u32;
        Ok(EncodedEvents {
            count,
            min_client_seq: events.iter().map(|e| e.client_seq).min().unwrap_or(0),
            max_client_seq: events.iter().map(|e| e.client_seq).max().unwrap_or(0),
            min_event_timestamp: events.iter().map(|e| e.event_timestamp).min().unwrap_or(0),
            max_event_timestamp: events.iter().map(|e| e.event_timestamp).max().unwrap_or(0),
            compression,
            raw_len: raw.len() as u32,
            stored,
        })
    }

    /// Decodes a part's events, assigning `event_seq` from `first_event_seq`.
    pub fn decode_events(&self, part: &WritePart) -> Result<Vec<StoredEvent>, Corruption> {
        if part.elided.is_some() {
            return Err(Corruption::BadHeaderField("events elided by compaction"));
        }
        let e = &part.events;
        let raw = if e.compression == Compression::None {
            e.stored.clone()
        } else {
            Bytes::from(self.decompress(e.compression, &e.stored, e.raw_len)?)
        };
        decode_events_raw(&raw, e.count, part.first_event_seq)
    }
}

/// Decodes `count` events in the raw layout; the values are slices of `raw`.
pub fn decode_events_raw(
    raw: &Bytes,
    count: u32,
    first_event_seq: u64,
) -> Result<Vec<StoredEvent>, Corruption> {
    if count > MAX_EVENTS_PER_BATCH || raw.len() < count as usize * EVENT_HEADER_LEN {
        return Err(Corruption::BadHeaderField("event count"));
    }
    let mut r = Reader { bytes: raw, pos: 0 };
    let mut out = Vec::with_capacity(count as usize);
    for i in 0..u64::from(count) {
        let client_seq = r.u64()?;
        let event_id = r.opt_u128()?;
        let event_timestamp = r.u64()?;
        let event_type_major = r.u64()?;
        let event_type_minor = r.u64()?;
        let has_iv = r.flag()?;
        let iv_bytes = r.take(12)?;
        let mut iv = [0u8; 12];
        iv.copy_from_slice(&iv_bytes);
        let len = r.u32()? as usize;
        let value = r.take(len)?;
        out.push(StoredEvent {
            client_seq,
            event_seq: first_event_seq
                .checked_add(i)
                .ok_or(Corruption::BadHeaderField("event_seq"))?,
            event_id,
            event_timestamp,
            event_type_major,
            event_type_minor,
            value,
            iv: has_iv.then_some(iv),
        });
    }
    if r.pos != raw.len() {
        return Err(Corruption::BadHeaderField("trailing event bytes"));
    }
    Ok(out)
}

// ------------------------------------------------------------------------------------------------
// Decoding.

pub(crate) struct Reader<'a> {
    bytes: &'a Bytes,
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a Bytes) -> Self {
        Reader { bytes, pos: 0 }
    }

    /// Whether every byte was read.
    pub(crate) fn done(&self) -> bool {
        self.pos == self.bytes.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<Bytes, Corruption> {
        if self.bytes.len() - self.pos < n {
            return Err(Corruption::Truncated);
        }
        let out = self.bytes.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(out)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], Corruption> {
        if self.bytes.len() - self.pos < N {
            return Err(Corruption::Truncated);
        }
        let mut out = [0u8; N];
        out.copy_from_slice(&self.bytes[self.pos..self.pos + N]);
        self.pos += N;
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Corruption> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn flag(&mut self) -> Result<bool, Corruption> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Corruption::BadHeaderField("flag")),
        }
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Corruption> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Corruption> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn u128(&mut self) -> Result<u128, Corruption> {
        Ok(u128::from_le_bytes(self.array()?))
    }

    pub(crate) fn opt_u128(&mut self) -> Result<Option<u128>, Corruption> {
        let some = self.flag()?;
        let v = self.u128()?;
        if !some && v != 0 {
            return Err(Corruption::BadHeaderField("absent value not zero"));
        }
        Ok(some.then_some(v))
    }

    pub(crate) fn key(&mut self) -> Result<AggregateKey, Corruption> {
        Ok(AggregateKey {
            org_id: self.u128()?,
            aggregate_type_id: self.u128()?,
            aggregate_id: self.u128()?,
        })
    }

    pub(crate) fn count(&mut self, per_item: usize) -> Result<usize, Corruption> {
        let n = self.u32()? as usize;
        if n == 0 || n > MAX_PARTS || n.saturating_mul(per_item) > self.bytes.len() - self.pos {
            return Err(Corruption::BadHeaderField("part count"));
        }
        Ok(n)
    }
}

/// Decodes a record payload stored under log tag `tag`.
pub fn decode_record(tag: u32, payload: &Bytes) -> Result<EventRecord, Corruption> {
    let mut r = Reader {
        bytes: payload,
        pos: 0,
    };
    let prev_tip = r.array::<32>()?;
    let compacted = match r.u8()? {
        RECORD_VERSION => false,
        RECORD_VERSION_COMPACTED => true,
        _ => return Err(Corruption::BadHeaderField("record version")),
    };
    let kind = r.u8()?;
    check_kind(kind, tag)?;
    let flags = u16::from_le_bytes(r.array::<2>()?);
    if flags & !FLAG_REPLICATED != 0 {
        return Err(Corruption::BadHeaderField("record flags"));
    }
    let client_id = r.u128()?;
    let user_id = r.opt_u128()?;
    if r.array::<3>()? != [0, 0, 0] {
        return Err(Corruption::BadHeaderField("reserved"));
    }
    debug_assert_eq!(r.pos, RECORD_HEADER_LEN);
    let compacted_tip = if compacted {
        // Only writes are ever compacted.
        if kind != 1 {
            return Err(Corruption::BadHeaderField("compacted record kind"));
        }
        Some(r.array::<COMPACTED_TIP_LEN>()?)
    } else {
        None
    };
    let raft_index = if flags & FLAG_REPLICATED != 0 {
        Some(r.u64()?)
    } else {
        None
    };
    let body = match kind {
        1 => RecordBody::Write(read_write_parts(&mut r, compacted)?),
        2 => RecordBody::Trim {
            key: r.key()?,
            keep_from: r.u64()?,
        },
        3 => RecordBody::Delete(read_delete_parts(&mut r)?),
        _ => read_schema(&mut r)?,
    };
    if r.pos != payload.len() {
        return Err(Corruption::BadHeaderField("trailing record bytes"));
    }
    Ok(EventRecord {
        prev_tip,
        client_id,
        user_id,
        body,
        compacted_tip,
        raft_index,
    })
}

/// A record's kind byte must name a kind (1 write, 2 trim, 3 delete, 4 schema) and match
/// the log tag it is stored under.
fn check_kind(kind: u8, tag: u32) -> Result<(), Corruption> {
    let expected_tag = match kind {
        1 => TAG_WRITE,
        2 => TAG_TRIM,
        3 => TAG_DELETE,
        4 => TAG_SCHEMA,
        _ => return Err(Corruption::BadHeaderField("record kind")),
    };
    if expected_tag != tag {
        return Err(Corruption::BadHeaderField("record kind disagrees with tag"));
    }
    Ok(())
}

/// Reads a write record's parts. In a compacted record (`compacted`) a part's events may be
/// elided, and at least one part must be.
fn read_write_parts(r: &mut Reader<'_>, compacted: bool) -> Result<Vec<WritePart>, Corruption> {
    let n = r.count(WRITE_PART_HEADER_LEN)?;
    let mut parts = Vec::with_capacity(n);
    for _ in 0..n {
        let key = r.key()?;
        let version = r.u64()?;
        let first_event_seq = r.u64()?;
        let recreate = match r.u8()? {
            0 => Recreate::No,
            1 => Recreate::Fresh,
            2 => Recreate::Continue,
            _ => return Err(Corruption::BadHeaderField("recreate")),
        };
        let (events, elided) = EncodedEvents::read(r, compacted)?;
        if version == 0 || first_event_seq == 0 {
            return Err(Corruption::BadHeaderField("version"));
        }
        parts.push(WritePart {
            key,
            version,
            first_event_seq,
            recreate,
            events,
            elided,
        });
    }
    if compacted && parts.iter().all(|p| p.elided.is_none()) {
        return Err(Corruption::BadHeaderField(
            "compacted record elides nothing",
        ));
    }
    Ok(parts)
}

/// Reads a delete record's parts (flags: bit 0 allow recreate, bit 1 allow sequence
/// continuation; no others).
fn read_delete_parts(r: &mut Reader<'_>) -> Result<Vec<DeletePart>, Corruption> {
    let n = r.count(DELETE_PART_LEN)?;
    let mut parts = Vec::with_capacity(n);
    for _ in 0..n {
        let key = r.key()?;
        let flags = r.u8()?;
        if flags > 3 {
            return Err(Corruption::BadHeaderField("delete flags"));
        }
        parts.push(DeletePart {
            key,
            allow_recreate: flags & 1 != 0,
            allow_sequence_continuation: flags & 2 != 0,
            version: r.u64()?,
        });
    }
    Ok(parts)
}

/// Reads a schema record's body: its key, format code and text (UTF-8, at most
/// [`MAX_SCHEMA_BYTES`]).
fn read_schema(r: &mut Reader<'_>) -> Result<RecordBody, Corruption> {
    let key = SchemaKey {
        org_id: r.u128()?,
        aggregate_type_id: r.u128()?,
        event_type_major: r.u64()?,
        event_type_minor: r.u64()?,
    };
    let schema_type = r.u8()?;
    let len = r.u32()? as usize;
    if len > MAX_SCHEMA_BYTES {
        return Err(Corruption::BadHeaderField("schema length"));
    }
    let schema = r.take(len)?;
    if std::str::from_utf8(&schema).is_err() {
        return Err(Corruption::BadHeaderField("schema text"));
    }
    Ok(RecordBody::Schema {
        key,
        schema_type,
        schema,
    })
}
