//! Space reclamation: trimmed and deleted batches become unreadable at once, and compaction
//! later removes their bytes from the shard logs (the event protocol's "data is removed
//! physically only by background compaction", §4.6).
//!
//! # What is dead
//!
//! A write record's part (one batch of one aggregate, at `version`, in the record at log
//! sequence `seq`) is **dead** when the aggregate's committed state can never list it again:
//!
//! * the aggregate is deleted and its delete does not allow a recreate that continues the
//!   sequence (a fresh recreate restarts at version 1 and overwrites every version it reaches);
//! * `version` is below the readable floor (trimmed);
//! * `version` is above the current version (a fresh recreate has not reached it yet);
//! * the index's entry for `version` points at a later record (a fresh recreate reached it).
//!
//! Batches of an aggregate deleted *with* continuation stay live: a recreate makes them
//! readable again (§4.7). Trim, delete and schema records are never removed: they are small,
//! and replay needs them.
//!
//! Death is permanent (each condition only ever moves one way for a given record), so a
//! verdict taken from any committed state, however stale, stays true: compaction can look the
//! state up without stopping writers, and a batch it elides can never be asked for again by a
//! reader that looks at the current state.
//!
//! # The accounting is derived
//!
//! Nothing about reclaimable space is stored. A pass scans each sealed segment of a shard
//! (sequential reads), judges every batch against the per-aggregate index, and sums the bytes
//! a rewrite would free ([`EventStore::reclaimable`](crate::EventStore::reclaimable) reports exactly that). To avoid rereading
//! unchanged data, a shard whose committed trims, deletes and fresh recreates have not
//! changed since its last complete pass is only scanned from the first segment that pass did
//! not see; the counter lives in memory and starts over at every open (then everything is
//! scanned once).
//!
//! # Rewriting
//!
//! A sealed segment whose reclaimable bytes reach the policy's ratio of its size is rewritten
//! with [`Log::rewrite_sealed`](eddy_log::Log::rewrite_sealed): every record keeps its sequence
//! number, timestamp and tag; a write record with dead parts becomes a **compacted record**
//! (version byte 2): the same header and part summaries, the record's original chain tip, and
//! the dead parts' event bytes elided (a flag and the original stored length remain). The
//! per-aggregate index refers to records by sequence number, so it needs no update: only bytes
//! move, and the log's own sparse index is rewritten with the segment. Replaying a compacted
//! record derives exactly the state the original did (versions, event sequences, client
//! marks, list statistics), so the index stays derived data: after any crash it still equals
//! the replay of the log. The swap is atomic (temporary file, fdatasync, directory fsync,
//! rename); a crash leaves either version of the segment, and both replay identically.
//!
//! A record is compacted only when that frees more bytes than the 32-byte tip it gains.
//!
//! # The hash chain across compacted records
//!
//! The tip after a record is `BLAKE3(prev_tip ‖ seq ‖ payload)` of the payload as written; a
//! compacted record can no longer be hashed, so it carries its original tip. Verification
//! ([`EventStore::verify_chain`](crate::EventStore::verify_chain), recovery's replay) checks a compacted record's link (its
//! `prev_tip` equals the running tip) and continues from the recorded tip, which the next
//! record's link checks in turn. So a chain over compacted ranges still proves the order and
//! content of every live record and that no record was dropped; what it no longer covers is
//! the remaining summary fields of an elided batch (protected by the record CRC only).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use eddy_log::{RecordMeta, SegmentRewrite, SegmentSummary};

use crate::error::{EventStoreError, Result};
use crate::keys::key_version;
use crate::record::{
    decode_record, encode_record, EventRecord, RecordBody, WritePart, COMPACTED_TIP_LEN, TAG_WRITE,
};
use crate::shard::Shard;
use crate::state::AggState;
use crate::types::AggregateKey;

/// Default seconds between two compaction passes (`--compaction-check-interval-secs`).
pub const DEFAULT_COMPACTION_CHECK_INTERVAL_SECS: u64 = 7200;
/// Default share of a sealed segment that must be reclaimable before it is rewritten
/// (`--compaction-min-reclaimable-ratio`).
pub const DEFAULT_COMPACTION_MIN_RECLAIMABLE_RATIO: f64 = 0.20;
/// Aggregate states one pass keeps memoized per shard before it starts over (bounds memory).
const MAX_MEMOIZED_STATES: usize = 65_536;
/// Records one scan read asks the log for.
const SCAN_RECORDS: u64 = 1024;
/// Payload bytes one scan read asks the log for.
const SCAN_BYTES: u64 = 16 * 1024 * 1024;

/// When a compaction pass rewrites a segment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionPolicy {
    /// A sealed segment is rewritten once at least this share of its bytes is reclaimable
    /// (`--compaction-min-reclaimable-ratio`, default 0.20; 0 rewrites any segment with
    /// anything reclaimable). Must be within `0..=1`.
    pub min_reclaimable_ratio: f64,
    /// A pass stops starting rewrites once the segments it rewrote total this many bytes
    /// (bounds the I/O of one pass; the rest waits for the next).
    pub max_rewrite_bytes: u64,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy {
            min_reclaimable_ratio: DEFAULT_COMPACTION_MIN_RECLAIMABLE_RATIO,
            max_rewrite_bytes: u64::MAX,
        }
    }
}

/// The reclaimable space of one sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentReclaim {
    /// The shard.
    pub shard: u32,
    /// The segment's first log sequence number.
    pub base: u64,
    /// The log sequence number after its last record.
    pub end: u64,
    /// Its file size.
    pub bytes: u64,
    /// Dead batches whose events are still stored.
    pub dead_batches: u64,
    /// Bytes a rewrite would free.
    pub reclaimable: u64,
}

impl SegmentReclaim {
    /// `reclaimable / bytes`.
    #[allow(clippy::cast_precision_loss)] // a ratio of file sizes
    pub fn ratio(&self) -> f64 {
        if self.bytes == 0 {
            0.0
        } else {
            self.reclaimable as f64 / self.bytes as f64
        }
    }
}

/// What one compaction pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Sealed segments scanned.
    pub segments_scanned: u64,
    /// Bytes of the segments scanned.
    pub bytes_scanned: u64,
    /// Segments rewritten.
    pub segments_rewritten: u64,
    /// Bytes of the rewritten segments before.
    pub bytes_before: u64,
    /// Bytes of the rewritten segments after.
    pub bytes_after: u64,
    /// Batches whose events were elided.
    pub batches_elided: u64,
    /// Records rewritten as compacted records.
    pub records_rewritten: u64,
    /// Shards skipped whole: nothing died and no segment was sealed since their last pass.
    pub shards_skipped: u64,
    /// The pass was stopped early ([`EventStore::compact_until`](crate::EventStore::compact_until)); the next one goes on.
    pub interrupted: bool,
}

impl CompactionReport {
    /// Bytes freed on disk.
    pub fn bytes_reclaimed(&self) -> u64 {
        self.bytes_before.saturating_sub(self.bytes_after)
    }
}

/// Where a shard's last complete pass left off (memory only: see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PassMark {
    /// The shard's death count when that pass started (`None`: no complete pass yet).
    deaths: Option<u64>,
    /// The ratio it applied: a pass with a lower one must look at everything again.
    ratio: f64,
    /// End of the last sealed segment it scanned.
    scanned_end: u64,
}

impl PassMark {
    pub(crate) fn new() -> Self {
        PassMark {
            deaths: None,
            ratio: 0.0,
            scanned_end: 0,
        }
    }

    /// Whether segments below `scanned_end` can be skipped: nothing died since, and what did
    /// not qualify then does not qualify now.
    fn covers(&self, deaths: u64, ratio: f64) -> bool {
        self.deaths == Some(deaths) && self.ratio <= ratio
    }
}

/// Judges batches against one shard's committed state, memoizing aggregate states.
struct Liveness<'a> {
    shard: &'a Shard,
    states: HashMap<AggregateKey, Option<AggState>>,
}

impl<'a> Liveness<'a> {
    fn new(shard: &'a Shard) -> Self {
        Liveness {
            shard,
            states: HashMap::new(),
        }
    }

    fn state(&mut self, key: &AggregateKey) -> Result<Option<AggState>> {
        if let Some(s) = self.states.get(key) {
            return Ok(*s);
        }
        if self.states.len() >= MAX_MEMOIZED_STATES {
            self.states.clear();
        }
        let s = self.shard.committed_agg(key)?;
        self.states.insert(*key, s);
        Ok(s)
    }

    /// Whether the batch `part` of the record at `seq` can never be read again (see the
    /// module docs). Anything uncertain counts as live.
    fn dead(&mut self, seq: u64, part: &WritePart) -> Result<bool> {
        let Some(s) = self.state(&part.key)? else {
            return Ok(false);
        };
        if s.deleted && !(s.allow_recreate && s.allow_continuation) {
            return Ok(true);
        }
        if part.version < s.floor || part.version > s.version {
            return Ok(true);
        }
        let pointer = self
            .shard
            .index
            .get(&key_version(&part.key, part.version))?;
        Ok(match pointer.as_deref() {
            Some(v) if v.len() == 8 => {
                let mut a = [0u8; 8];
                a.copy_from_slice(v);
                u64::from_le_bytes(a) != seq
            }
            _ => false,
        })
    }

    /// The parts of a record worth eliding, with the bytes eliding them frees; `None` when
    /// the record stays as it is.
    fn plan(&mut self, seq: u64, record: &EventRecord) -> Result<Option<(Vec<usize>, u64)>> {
        let RecordBody::Write(parts) = &record.body else {
            return Ok(None);
        };
        let mut dead = Vec::new();
        let mut freed = 0u64;
        for (i, p) in parts.iter().enumerate() {
            if p.elided.is_none() && self.dead(seq, p)? {
                dead.push(i);
                freed += p.events.stored.len() as u64;
            }
        }
        let cost = if record.compacted_tip.is_some() {
            0
        } else {
            COMPACTED_TIP_LEN as u64
        };
        Ok((!dead.is_empty() && freed > cost).then(|| (dead, freed - cost)))
    }
}

/// `record` (stored at `seq` as `payload`) with the events of parts `dead` elided.
fn elide(mut record: EventRecord, seq: u64, payload: &[u8], dead: &[usize]) -> EventRecord {
    let tip = record.tip_after(seq, payload);
    record.compacted_tip = Some(tip);
    if let RecordBody::Write(parts) = &mut record.body {
        for i in dead {
            let p = &mut parts[*i];
            p.elided =
                Some(u32::try_from(p.events.stored.len()).expect("stored bytes fit a record"));
            p.events.stored = Bytes::new();
        }
    }
    record
}

/// What compaction could reclaim from every sealed segment of `shard` (computed now from the
/// log and the per-aggregate index; nothing is stored).
pub(crate) fn reclaimable(shard: &Shard) -> Result<Vec<SegmentReclaim>> {
    let mut live = Liveness::new(shard);
    shard
        .log
        .segments()
        .iter()
        .filter(|seg| seg.sealed)
        .map(|seg| scan_segment(shard, seg, &mut live))
        .collect()
}

/// One compaction pass over `shards` (with `marks`, one per shard, saying where each one's
/// last complete pass left off): scans the sealed segments and rewrites each whose
/// reclaimable share reaches `policy.min_reclaimable_ratio`, stopping between two segments
/// once `stop` is set. Writers and readers are never blocked (active segments are never
/// touched).
pub(crate) fn compact_shards(
    shards: &[Shard],
    marks: &mut [PassMark],
    policy: CompactionPolicy,
    stop: &AtomicBool,
) -> Result<CompactionReport> {
    let ratio = policy.min_reclaimable_ratio;
    if !(0.0..=1.0).contains(&ratio) {
        return Err(EventStoreError::InvalidConfig {
            field: "min_reclaimable_ratio (millionths)",
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            value: (ratio * 1e6) as u64, // saturating; NaN reads as 0
        });
    }
    let mut report = CompactionReport::default();
    let mut budget = policy.max_rewrite_bytes;
    for (shard, mark) in shards.iter().zip(marks.iter_mut()) {
        if stop.load(Ordering::Relaxed) {
            report.interrupted = true;
            break;
        }
        let deaths = shard.deaths();
        let unchanged = mark.covers(deaths, ratio);
        let from = if unchanged { mark.scanned_end } else { 0 };
        let segments: Vec<SegmentSummary> = shard
            .log
            .segments()
            .into_iter()
            .filter(|seg| seg.sealed && seg.base >= from)
            .collect();
        if segments.is_empty() {
            report.shards_skipped += u64::from(unchanged);
            continue;
        }
        let mut live = Liveness::new(shard);
        let mut complete = true;
        for seg in &segments {
            if stop.load(Ordering::Relaxed) {
                report.interrupted = true;
                complete = false;
                break;
            }
            let found = scan_segment(shard, seg, &mut live)?;
            report.segments_scanned += 1;
            report.bytes_scanned += seg.bytes;
            if found.reclaimable == 0 || found.ratio() < ratio {
                continue;
            }
            if seg.bytes > budget {
                complete = false; // left for the next pass
                continue;
            }
            budget -= seg.bytes;
            if let Some(done) = rewrite_segment(shard, seg.base, &mut live, &mut report)? {
                report.segments_rewritten += 1;
                report.bytes_before += done.old_bytes;
                report.bytes_after += done.new_bytes;
            }
        }
        if complete {
            *mark = PassMark {
                deaths: Some(deaths),
                ratio,
                scanned_end: segments.last().map_or(from, |seg| seg.end),
            };
        }
    }
    Ok(report)
}

/// Scans one sealed segment's records and sums what eliding its dead batches would free.
fn scan_segment(
    shard: &Shard,
    seg: &SegmentSummary,
    live: &mut Liveness<'_>,
) -> Result<SegmentReclaim> {
    let mut out = SegmentReclaim {
        shard: shard.id,
        base: seg.base,
        end: seg.end,
        bytes: seg.bytes,
        dead_batches: 0,
        reclaimable: 0,
    };
    let mut seq = seg.base;
    while seq < seg.end {
        let records = shard.log.read(seq, SCAN_RECORDS, SCAN_BYTES)?;
        if records.is_empty() {
            break;
        }
        for r in records {
            if r.meta.seq >= seg.end {
                return Ok(out);
            }
            seq = r.meta.end_seq();
            if r.meta.tag != TAG_WRITE {
                continue;
            }
            let record = decode(shard, &r.meta, &r.payload)?;
            if let Some((dead, freed)) = live.plan(r.meta.seq, &record)? {
                out.dead_batches += dead.len() as u64;
                out.reclaimable += freed;
            }
        }
    }
    Ok(out)
}

fn decode(shard: &Shard, meta: &RecordMeta, payload: &Bytes) -> Result<EventRecord> {
    decode_record(meta.tag, payload)
        .map_err(|kind| EventStoreError::corrupt(shard.log.dir().to_path_buf(), meta.seq, kind))
}

/// Rewrites one sealed segment with its dead batches elided (judged again now: anything that
/// died since the scan goes too).
fn rewrite_segment(
    shard: &Shard,
    base: u64,
    live: &mut Liveness<'_>,
    report: &mut CompactionReport,
) -> Result<Option<SegmentRewrite>> {
    let mut elided = 0u64;
    let done = shard
        .log
        .rewrite_sealed(base, |meta, payload| -> Result<Option<Bytes>> {
            if meta.tag != TAG_WRITE {
                return Ok(None);
            }
            let record = decode(shard, meta, payload)?;
            let Some((dead, _)) = live.plan(meta.seq, &record)? else {
                return Ok(None);
            };
            let compacted = elide(record, meta.seq, payload, &dead);
            let bytes = encode_record(&compacted);
            // The compacted record must replay exactly as the original did.
            debug_assert!(decode_record(meta.tag, &bytes).is_ok_and(|d| d == compacted));
            debug_assert_eq!(
                compacted.compacted_tip,
                Some(
                    decode_record(meta.tag, payload)
                        .map_or([0; 32], |r| r.tip_after(meta.seq, payload))
                )
            );
            elided += dead.len() as u64;
            Ok(Some(bytes))
        })?;
    if let Some(d) = &done {
        if d.rewritten > 0 {
            report.batches_elided += elided;
            report.records_rewritten += d.rewritten;
            return Ok(done);
        }
    }
    Ok(None)
}
