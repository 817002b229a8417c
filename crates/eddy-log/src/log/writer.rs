//! The writer: one group-commit turn of a log on the [`CommitPool`](crate::CommitPool). It
//! drains the admission queue, writes every pending record in one vectored append, issues one
//! fdatasync, publishes the records to readers, calls the hook and completes every
//! acknowledgement; it rolls segments, runs purges and flushes in order with the appends, and
//! turns write failures into refusals (a full disk) or a fail-stop (anything else).

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::cache::{next_owner_id, SealedSegment};
use crate::error::{IoOp, LogError};
use crate::format::{
    parse_file_name, IndexEntry, IndexKind, INDEX_ENTRY_LEN, INDEX_HEADER_LEN, RECORD_HEADER_LEN,
};
use crate::pool::Job;
use crate::sync::{lock, read_lock};

use super::config::Durability;
use super::segment_files::{create_segment, remove_segment_files};
use super::state::{
    is_no_space, ActiveSegment, Hold, Item, LogInner, PendingRecord, SegmentState, Writer,
};
use super::truncate::TruncateFailure;
use super::types::RecordMeta;

struct Group {
    records: Vec<PendingRecord>,
    headers: Vec<[u8; RECORD_HEADER_LEN]>,
    positions: Vec<u64>,
    bytes: u64,
}

impl Group {
    fn new() -> Self {
        Group {
            records: Vec::new(),
            headers: Vec::new(),
            positions: Vec::new(),
            bytes: 0,
        }
    }
}

/// How a group, roll, purge or truncation failed.
enum WriteFailure {
    NoSpace(Arc<io::Error>),
    Fatal(Arc<io::Error>),
    /// A truncation that is not a cut point: nothing changed.
    Rejected {
        seq: u64,
        reason: &'static str,
    },
}

impl WriteFailure {
    fn from_truncate(failure: TruncateFailure, seq: u64) -> Self {
        match failure {
            TruncateFailure::Rejected(reason) => WriteFailure::Rejected { seq, reason },
            TruncateFailure::NoSpace(e) => WriteFailure::NoSpace(Arc::new(e)),
            TruncateFailure::Fatal(e) => WriteFailure::Fatal(Arc::new(e)),
        }
    }
}

impl Job for LogInner {
    fn run_turn(&self) -> bool {
        self.hold_for_group();
        let mut writer = lock(&self.writer);
        let Some((items, room_waiters)) = self.take_items() else {
            return false;
        };
        if room_waiters > 0 {
            self.room.notify_all();
        }
        writer.hold_target = 0;
        self.run_items(&mut writer, items);
        let hold_target = writer.hold_target;
        drop(writer);
        self.end_turn(hold_target)
    }
}

impl LogInner {
    /// Takes this turn's items off the admission queue: at least one, then more while the
    /// appends among them stay within `max_group_bytes`. Returns them with the number of
    /// appenders waiting for room (which the caller wakes); `None`, with the log marked
    /// unscheduled, when the queue is empty. Called under the writer lock.
    fn take_items(&self) -> Option<(Vec<Item>, usize)> {
        let mut adm = lock(&self.admission);
        let mut taken = Vec::new();
        let mut bytes = 0u64;
        while let Some(item) = adm.queue.front() {
            let size = match item {
                Item::Append(r) => r.header.record_len(),
                _ => 0,
            };
            if !taken.is_empty() && bytes + size > self.config.max_group_bytes {
                break;
            }
            bytes += size;
            let item = adm.queue.pop_front().expect("front exists");
            if let Item::Append(r) = &item {
                adm.queued_bytes -= r.header.record_len();
            }
            taken.push(item);
        }
        if taken.is_empty() {
            adm.scheduled = false;
            return None;
        }
        Some((taken, adm.room_waiters))
    }

    /// Runs a turn's items in order: appends gather into a group, which is committed before
    /// each control item (flush, purge, truncation) and at the end. Once a write fails, every
    /// later item of the turn is refused with its failure.
    fn run_items(&self, writer: &mut Writer, items: Vec<Item>) {
        let mut group = Group::new();
        // Set once a write failed in this turn: every later item of the turn is refused with it.
        let mut refused: Option<Refusal> = writer.failed.clone().map(Refusal::Failed);
        for item in items {
            if let Some(kind) = &refused {
                item.fail(&|| self.error_for(kind));
                continue;
            }
            match item {
                Item::Append(record) => {
                    self.append_item(writer, &mut group, record, &mut refused);
                }
                Item::Flush(done) => {
                    self.write_pending_index(writer);
                    let outcome = self
                        .commit_group(writer, &mut group)
                        .and_then(|()| self.sync_active(writer).map_err(|f| (f, Vec::new())));
                    self.settle_control(writer, outcome, done, &mut refused);
                }
                Item::Purge { base, done } => {
                    let outcome = self
                        .commit_group(writer, &mut group)
                        .and_then(|()| self.purge_now(writer, base).map_err(|f| (f, Vec::new())));
                    self.settle_control(writer, outcome, done, &mut refused);
                }
                Item::Truncate { seq, done } => {
                    let outcome = self.commit_group(writer, &mut group).and_then(|()| {
                        self.truncate_now(writer, seq)
                            .map_err(|f| (WriteFailure::from_truncate(f, seq), Vec::new()))
                    });
                    self.settle_control(writer, outcome, done, &mut refused);
                }
            }
        }
        if refused.is_none() {
            if let Err((failure, records)) = self.commit_group(writer, &mut group) {
                let kind = self.handle_failure(writer, failure);
                for r in records {
                    r.done.complete(Err(self.error_for(&kind)));
                }
            }
        }
    }

    /// Adds an append to the group. When the active segment is full (it or the group holds
    /// records, and with the group it reaches `segment_size`), first commits the group and
    /// rolls to a new segment; if that fails, reacts ([`LogInner::handle_failure`]), refuses
    /// the group's unacknowledged records and this one, and sets `refused` for the rest of
    /// the turn.
    fn append_item(
        &self,
        writer: &mut Writer,
        group: &mut Group,
        record: PendingRecord,
        refused: &mut Option<Refusal>,
    ) {
        let needs_roll = writer.active.has_records || !group.records.is_empty();
        let len_after_group = writer.active.len + group.bytes;
        if needs_roll && len_after_group >= self.config.segment_size {
            let outcome = self
                .commit_group(writer, group)
                .and_then(|()| self.roll(writer).map_err(|f| (f, Vec::new())));
            if let Err((failure, records)) = outcome {
                let kind = self.handle_failure(writer, failure);
                for r in records.into_iter().chain(std::iter::once(record)) {
                    r.done.complete(Err(self.error_for(&kind)));
                }
                *refused = Some(kind);
                return;
            }
        }
        Self::push_record(writer, group, record);
    }

    /// Ends a turn, after the writer lock is released: `false` (the log unscheduled) when
    /// nothing is queued, else `true` for another turn. That turn waits out a group-commit
    /// window for `hold_target` appends when the window applies and only appends are queued.
    fn end_turn(&self, hold_target: usize) -> bool {
        let mut adm = lock(&self.admission);
        if adm.queue.is_empty() {
            adm.scheduled = false;
            false
        } else {
            // Appends queued while this turn wrote and synced: the next group waits for the
            // writers this turn acknowledged to come back, or the window, whichever is first.
            // Only a log that syncs every group gains from it, and only while its gate is open.
            let windowed = hold_target > 0
                && self.window_applies()
                && adm.queue.iter().all(|i| matches!(i, Item::Append(_)));
            if windowed {
                adm.hold = Some(Hold {
                    until: std::time::Instant::now() + self.config.group_window,
                    target: hold_target,
                });
            }
            true
        }
    }
}

impl LogInner {
    /// Whether the next group may wait out a group-commit window: one is configured, this log
    /// syncs every group (otherwise there is nothing to share), and its gate is open.
    fn window_applies(&self) -> bool {
        !self.config.group_window.is_zero()
            && matches!(self.config.durability, Durability::Fsync)
            && self.window_gate.as_ref().is_none_or(|g| g.is_open())
    }

    /// Waits out the group-commit window set by the previous turn ([`Admission::hold`]):
    /// until its deadline, or until as many appends are queued as the hold's target (the
    /// appenders the previous group acknowledged are back), or a full group is queued, or a
    /// control item arrived, or the log is closing or failed.
    fn hold_for_group(&self) {
        if self.config.group_window.is_zero() {
            return;
        }
        let mut adm = lock(&self.admission);
        while let Some(hold) = adm.hold {
            let gathered = adm.queue.len() >= hold.target
                || adm.queued_bytes >= self.config.max_group_bytes
                || adm.closed
                || adm.failed.is_some();
            let now = std::time::Instant::now();
            if gathered || now >= hold.until {
                break;
            }
            adm = crate::sync::wait_timeout(&self.held, adm, hold.until - now);
        }
        adm.hold = None;
    }
}

/// The ways a write can be refused, with the shared cause.
#[derive(Clone)]
enum Refusal {
    NoSpace(Arc<io::Error>),
    Failed(Arc<io::Error>),
    BadTruncation { seq: u64, reason: &'static str },
}

impl LogInner {
    fn failed_error(&self, err: &Arc<io::Error>) -> LogError {
        LogError::LogFailed {
            path: self.dir.clone(),
            source: Arc::clone(err),
        }
    }

    fn no_space_error(&self, err: &Arc<io::Error>) -> LogError {
        LogError::NoSpace {
            path: self.dir.clone(),
            source: Arc::clone(err),
        }
    }

    fn error_for(&self, kind: &Refusal) -> LogError {
        match kind {
            Refusal::NoSpace(err) => self.no_space_error(err),
            Refusal::Failed(err) => self.failed_error(err),
            Refusal::BadTruncation { seq, reason } => LogError::BadTruncation {
                path: self.dir.clone(),
                seq: *seq,
                reason,
            },
        }
    }

    /// Completes a control item (flush, purge, truncation) after its outcome: on failure, reacts
    /// first (see [`LogInner::handle_failure`]), then refuses the records of the group it
    /// followed and the item itself, and every later item of the turn.
    fn settle_control(
        &self,
        writer: &mut Writer,
        outcome: Result<(), (WriteFailure, Vec<PendingRecord>)>,
        done: crate::completion::Completer<()>,
        refused: &mut Option<Refusal>,
    ) {
        match outcome {
            Ok(()) => done.complete(Ok(())),
            Err((failure, records)) => {
                let kind = self.handle_failure(writer, failure);
                for r in records {
                    r.done.complete(Err(self.error_for(&kind)));
                }
                done.complete(Err(self.error_for(&kind)));
                *refused = Some(kind);
            }
        }
    }

    /// Reacts to a failed write, **before** any waiter is told about it (so nobody can learn of
    /// the failure and still slip an append in with a stale sequence number): appends queued
    /// behind the failure carry sequence numbers that will never exist, so they are refused and
    /// admission rewinds to what was really written. A fatal failure also fail-stops the log.
    fn handle_failure(&self, writer: &mut Writer, failure: WriteFailure) -> Refusal {
        let kind = match failure {
            WriteFailure::NoSpace(err) => Refusal::NoSpace(err),
            WriteFailure::Rejected { seq, reason } => Refusal::BadTruncation { seq, reason },
            WriteFailure::Fatal(err) => {
                if writer.failed.is_none() {
                    tracing::error!(dir = %self.dir.display(), error = %err, "log fail-stopped");
                    writer.failed = Some(Arc::clone(&err));
                }
                Refusal::Failed(err)
            }
        };
        let drained: Vec<Item> = {
            let mut adm = lock(&self.admission);
            if let Refusal::Failed(err) = &kind {
                if adm.failed.is_none() {
                    adm.failed = Some(Arc::clone(err));
                }
            }
            adm.next_seq = writer.next_seq;
            adm.last_ts = writer.last_ts;
            adm.queued_bytes = 0;
            adm.epoch += 1;
            if let Some(hook) = &self.hook {
                hook.on_refused(writer.next_seq, &|| self.error_for(&kind));
            }
            adm.queue.drain(..).collect()
        };
        self.room.notify_all();
        for item in drained {
            item.fail(&|| self.error_for(&kind));
        }
        kind
    }

    fn push_record(writer: &Writer, group: &mut Group, mut record: PendingRecord) {
        let expected = writer.next_seq
            + group
                .records
                .iter()
                .map(|r| u64::from(r.header.count))
                .sum::<u64>();
        assert_eq!(
            record.header.seq, expected,
            "admission and writer disagree on the next sequence number"
        );
        let position = writer.active.len + group.bytes;
        record.header.synced_len = writer.active.synced_len;
        record.header.payload_crc = crc32c::crc32c(&record.payload);
        debug_assert!(record.header.synced_len <= position);
        group.headers.push(record.header.encode());
        group.positions.push(position);
        group.bytes += record.header.record_len();
        group.records.push(record);
    }

    /// Writes the group, syncs (per durability), publishes and acknowledges it.
    ///
    /// On failure the records not yet acknowledged are handed back, for the caller to refuse
    /// after [`LogInner::handle_failure`].
    fn commit_group(
        &self,
        writer: &mut Writer,
        group: &mut Group,
    ) -> Result<(), (WriteFailure, Vec<PendingRecord>)> {
        if group.records.is_empty() {
            return Ok(());
        }
        let group = std::mem::replace(group, Group::new());
        if let Err(failure) = self.write_group(writer, &group) {
            return Err((failure, group.records));
        }
        writer.active.len += group.bytes;
        let count = group.records.len() as u64;
        self.count_group(count, group.bytes);

        let sync_now = self.sync_due(writer, count, group.bytes);
        let ack_before_sync = !matches!(self.config.durability, Durability::Fsync);
        if sync_now && !ack_before_sync {
            if let Err(failure) = self.sync_active(writer) {
                return Err((failure, group.records));
            }
        }
        let end_seq = group
            .records
            .last()
            .map_or(writer.next_seq, |r| r.header.end_seq());
        if let Some(hook) = &self.hook {
            if let Err(e) = hook.before_ack(end_seq) {
                return Err((WriteFailure::Fatal(Arc::new(e)), group.records));
            }
        }

        let new_entries = self.index_entries_for(writer, &group);
        let index_grew = !new_entries.is_empty();
        // Publish, then acknowledge.
        self.publish_group(writer, &group, end_seq, new_entries);
        if index_grew || writer.active.index_written < self.view_index_len() {
            self.write_pending_index(writer);
        }
        if let Some(hook) = &self.hook {
            hook.after_publish(end_seq);
        }
        if self.window_applies() {
            // Writers queued now are not among the ones acknowledged next: once as many are
            // queued as now plus this group, this group's writers are back.
            writer.hold_target = lock(&self.admission).queue.len() + group.records.len();
        }
        acknowledge(group.records);
        if sync_now && ack_before_sync {
            self.sync_active(writer).map_err(|f| (f, Vec::new()))?;
        }
        Ok(())
    }

    /// Appends the group's records (each header, then its payload) to the active segment in
    /// one write, first preallocating room when configured and the group is small. When the
    /// append fails, truncates the segment back to where the group started, so the next group
    /// starts at a record boundary: the failure is `NoSpace` when the disk was full and the
    /// rollback worked, else `Fatal`. Leaves `writer.active.len` to the caller.
    fn write_group(&self, writer: &Writer, group: &Group) -> Result<(), WriteFailure> {
        let start = writer.active.len;
        let mut parts: Vec<&[u8]> = Vec::with_capacity(group.records.len() * 2);
        for (header, record) in group.headers.iter().zip(&group.records) {
            parts.push(header);
            parts.push(&record.payload);
        }
        let chunk = self.config.preallocate;
        if chunk > 0 && group.bytes <= chunk / 16 {
            // Never past the segment's end, where it rolls (at least the group itself).
            let room = self.config.segment_size.saturating_sub(start);
            if let Err(e) = writer.active.file.preallocate(group.bytes, chunk.min(room)) {
                // Only the saving is lost: the append below grows the file.
                tracing::debug!(dir = %self.dir.display(), error = %e, "preallocating the active segment failed");
            }
        }
        let Err(e) = writer.active.file.append(&parts) else {
            return Ok(());
        };
        let no_space = is_no_space(&e);
        let err = Arc::new(e);
        // Take the partial write back so the next group starts at a record boundary.
        let rolled_back = writer.active.file.truncate(start);
        Err(match rolled_back {
            Ok(()) if no_space => WriteFailure::NoSpace(Arc::clone(&err)),
            Ok(()) => WriteFailure::Fatal(Arc::clone(&err)),
            Err(e2) => WriteFailure::Fatal(Arc::new(e2)),
        })
    }

    /// Adds a written group of `count` records and `bytes` bytes to the log's, the pool's and
    /// the owning store's counters.
    fn count_group(&self, count: u64, bytes: u64) {
        self.counters.records.fetch_add(count, Ordering::Relaxed);
        self.counters.groups.fetch_add(1, Ordering::Relaxed);
        self.pool.stats.add_group(count, bytes);
        if let Some(stats) = &self.store_stats {
            stats.add_group(count, bytes);
        }
    }

    /// Whether the active segment is to be synced for a group of `count` records and `bytes`
    /// bytes just written: always under `Fsync`; under `Background`, once the unsynced records
    /// or bytes (which this adds the group to) reach their bound.
    fn sync_due(&self, writer: &mut Writer, count: u64, bytes: u64) -> bool {
        match self.config.durability {
            Durability::Fsync => true,
            Durability::Background {
                max_unsynced_records,
                max_unsynced_bytes,
            } => {
                writer.unsynced_records += count;
                writer.unsynced_bytes += bytes;
                writer.unsynced_records >= max_unsynced_records
                    || writer.unsynced_bytes >= max_unsynced_bytes
            }
        }
    }

    /// The sparse index entries for the group's records: one for each record at least
    /// `index_interval` bytes past the last indexed position (which this moves on).
    fn index_entries_for(&self, writer: &mut Writer, group: &Group) -> Vec<IndexEntry> {
        let mut new_entries = Vec::new();
        for (record, position) in group.records.iter().zip(&group.positions) {
            if writer
                .active
                .last_index_pos
                .is_none_or(|last| position - last >= self.config.index_interval)
            {
                new_entries.push(IndexEntry {
                    seq: record.header.seq,
                    timestamp: record.header.timestamp,
                    position: *position,
                    kind: IndexKind::Record,
                });
                writer.active.last_index_pos = Some(*position);
            }
        }
        new_entries
    }

    /// Makes a written group readable: the writer moves past it (next sequence number
    /// `end_seq`, last timestamp), and the active segment's view entry takes its end, length,
    /// record count and timestamps, and the active index its new entries.
    fn publish_group(
        &self,
        writer: &mut Writer,
        group: &Group,
        end_seq: u64,
        new_entries: Vec<IndexEntry>,
    ) {
        let first_ts = group.records.first().map(|r| r.header.timestamp);
        let last_ts = group.records.last().map(|r| r.header.timestamp);
        // The module's invariants, checked where they could first break (debug builds, the
        // simulator and every test): readers see only what is durable under `Fsync` (4); a
        // group continues the log's sequence numbers without a gap or an overlap (1) and its
        // timestamps do not go back (5).
        debug_assert!(
            !matches!(self.config.durability, Durability::Fsync)
                || writer.active.synced_len == writer.active.len,
            "published before fdatasync: synced {} of {} bytes",
            writer.active.synced_len,
            writer.active.len
        );
        debug_assert!(
            group
                .records
                .first()
                .is_none_or(|r| r.header.seq == writer.next_seq),
            "a group does not start at the log's next sequence number {}",
            writer.next_seq
        );
        debug_assert!(
            group
                .records
                .windows(2)
                .all(|w| w[0].header.end_seq() == w[1].header.seq
                    && w[0].header.timestamp <= w[1].header.timestamp),
            "a group's records are not contiguous or go back in time"
        );
        debug_assert!(
            first_ts.is_none_or(|t| t >= writer.last_ts),
            "a group's first timestamp is below the log's last"
        );
        writer.next_seq = end_seq;
        if let Some(ts) = last_ts {
            writer.last_ts = ts;
        }
        writer.active.has_records = true;
        let mut view = lock(&self.view);
        let seg = view
            .segments
            .back_mut()
            .expect("a log always has a segment");
        debug_assert_eq!(seg.base, writer.active.base);
        seg.end = end_seq;
        seg.len = writer.active.len;
        seg.records += group.records.len() as u64;
        if seg.first_ts.is_none() {
            seg.first_ts = first_ts;
        }
        seg.max_ts = last_ts.or(seg.max_ts);
        view.active_index.extend(new_entries);
    }

    fn view_index_len(&self) -> usize {
        lock(&self.view).active_index.len()
    }

    /// Appends the active segment's index entries not yet in its file. On failure (a full
    /// disk) the partial entry is cut off and the entries are retried with the next group; the
    /// index is derived data, so a file that cannot be repaired is abandoned and rebuilt at the
    /// next open.
    fn write_pending_index(&self, writer: &mut Writer) {
        let Some(index) = writer.active.index_file.clone() else {
            return;
        };
        let pending: Vec<IndexEntry> =
            lock(&self.view).active_index[writer.active.index_written..].to_vec();
        if pending.is_empty() {
            return;
        }
        let bytes: Vec<u8> = pending.iter().flat_map(IndexEntry::encode).collect();
        match index.append(&[&bytes]) {
            Ok(()) => writer.active.index_written += pending.len(),
            Err(e) => {
                let keep =
                    (INDEX_HEADER_LEN + writer.active.index_written * INDEX_ENTRY_LEN) as u64;
                if let Err(e2) = index.truncate(keep) {
                    tracing::warn!(dir = %self.dir.display(), error = %e2, "index repair failed; it will be rebuilt at next open");
                    writer.active.index_file = None;
                } else {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "index append failed; retrying with the next write");
                }
            }
        }
    }

    fn sync_active(&self, writer: &mut Writer) -> Result<(), WriteFailure> {
        if writer.active.synced_len == writer.active.len {
            return Ok(());
        }
        if let Err(e) = writer.active.file.sync() {
            // With fsync durability nothing past the last good sync was acknowledged: cut it
            // off, so that a restart does not bring back records whose writers were told they
            // failed (an unacknowledged metadata operation, a purge or a delete, must not take
            // effect later). Best effort: the log fail-stops either way.
            if matches!(self.config.durability, Durability::Fsync) {
                match writer.active.file.truncate(writer.active.synced_len) {
                    Ok(()) => writer.active.len = writer.active.synced_len,
                    Err(e2) => {
                        tracing::warn!(dir = %self.dir.display(), error = %e2, "cannot cut the unsynced tail after a failed fdatasync; a restart may find records that were refused");
                    }
                }
            }
            return Err(WriteFailure::Fatal(Arc::new(e)));
        }
        self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.pool.stats.add_fsync();
        if let Some(stats) = &self.store_stats {
            stats.add_fsync();
        }
        writer.active.synced_len = writer.active.len;
        writer.unsynced_records = 0;
        writer.unsynced_bytes = 0;
        Ok(())
    }

    /// Seals the active segment and starts a new one at the next sequence number.
    fn roll(&self, writer: &mut Writer) -> Result<(), WriteFailure> {
        // Invariant 3: the old segment is durable before its successor exists, and ends
        // where its records end (no preallocated zeros after them).
        self.sync_active(writer)?;
        if let Err(e) = writer.active.file.trim_preallocated() {
            return Err(if is_no_space(&e) {
                WriteFailure::NoSpace(Arc::new(e))
            } else {
                WriteFailure::Fatal(Arc::new(e))
            });
        }
        self.write_pending_index(writer);
        let base = writer.next_seq;
        let (file, index_file) = match create_segment(&*self.backend, &self.dir, base) {
            Ok(pair) => pair,
            Err(e) if is_no_space(&e) => return Err(WriteFailure::NoSpace(Arc::new(e))),
            Err(e) => return Err(WriteFailure::Fatal(Arc::new(e))),
        };
        let old = std::mem::replace(
            &mut writer.active,
            ActiveSegment::fresh(base, Arc::clone(&file), index_file),
        );
        let (max_ts, old_owner, old_index) = {
            let view = lock(&self.view);
            let seg = view.segments.back().expect("a log always has a segment");
            (seg.max_ts, seg.owner, view.active_index.clone())
        };
        // Seal the old index (best effort: a missing seal only costs a rescan at open).
        if let Some(old_index_file) = &old.index_file {
            let seal = IndexEntry {
                seq: base,
                timestamp: max_ts.unwrap_or(0),
                position: old.len,
                kind: IndexKind::Seal,
            };
            let sealed = old_index_file
                .append(&[&seal.encode()])
                .and_then(|()| old_index_file.sync());
            if let Err(e) = sealed {
                tracing::warn!(dir = %self.dir.display(), error = %e, "sealing index failed; it will be rebuilt at next open");
            }
        }
        {
            let mut view = lock(&self.view);
            if let Some(seg) = view.segments.back_mut() {
                seg.sealed = true;
            }
            view.segments
                .push_back(SegmentState::empty(base, next_owner_id()));
            view.active_file = file;
            view.active_index = Vec::new();
        }
        // Keep the just-sealed segment hot in the cache.
        self.cache.insert(
            (old_owner, old.base),
            Arc::new(SealedSegment {
                file: old.file,
                index: old_index,
            }),
        );
        Ok(())
    }

    fn purge_now(&self, writer: &mut Writer, base: u64) -> Result<(), WriteFailure> {
        let fatal = |e: LogError| WriteFailure::Fatal(Arc::new(io::Error::other(e)));
        // No segment file may be swapped in while they are removed (see `swap`).
        let _swap = read_lock(&self.swap);
        let old: Vec<(u64, u64)> = lock(&self.view)
            .segments
            .iter()
            .map(|s| (s.owner, s.base))
            .collect();
        for (owner, seg_base) in &old {
            self.cache.remove((*owner, *seg_base));
        }
        // Every segment in the directory, not only the view's: one a failed retention run
        // left behind must not come back after the purge.
        let listing = self
            .backend
            .list(&self.dir)
            .map_err(|e| fatal(LogError::io(IoOp::List, &self.dir, e)))?;
        let mut bases: Vec<u64> = listing
            .iter()
            .filter(|e| !e.is_dir)
            .filter_map(|e| parse_file_name(&e.name).map(|(base, _)| base))
            .chain(old.iter().map(|(_, base)| *base))
            .collect();
        bases.sort_unstable();
        bases.dedup();
        for seg_base in bases {
            remove_segment_files(&*self.backend, &self.dir, seg_base).map_err(fatal)?;
        }
        let (file, index_file) = match create_segment(&*self.backend, &self.dir, base) {
            Ok(pair) => pair,
            Err(e) if is_no_space(&e) => return Err(WriteFailure::NoSpace(Arc::new(e))),
            Err(e) => return Err(WriteFailure::Fatal(Arc::new(e))),
        };
        writer.active = ActiveSegment::fresh(base, Arc::clone(&file), index_file);
        writer.next_seq = base;
        writer.unsynced_bytes = 0;
        writer.unsynced_records = 0;
        let mut view = lock(&self.view);
        view.segments.clear();
        view.segments
            .push_back(SegmentState::empty(base, next_owner_id()));
        view.active_file = file;
        view.active_index = Vec::new();
        Ok(())
    }
}

/// Acknowledges every record of a published group with its metadata.
fn acknowledge(records: Vec<PendingRecord>) {
    for record in records {
        let meta = RecordMeta {
            seq: record.header.seq,
            count: record.header.count,
            timestamp: record.header.timestamp,
            tag: record.header.tag,
            len: record.header.payload_len,
        };
        record.done.complete(Ok(meta));
    }
}
