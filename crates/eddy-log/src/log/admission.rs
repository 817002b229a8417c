//! Admission: how records get into a log. [`Log::reserve`] assigns the next sequence number
//! and timestamp under the admission lock and hands them to the caller, who builds the payload
//! and appends it through the [`Reservation`]; the record is queued for the writer and the
//! returned [`Completion`] resolves once it is durable. Back-pressure, fail-stop and closing
//! are decided here, as are the control items (flush, purge) that run in order with appends.

use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use bytes::Bytes;

use crate::completion::{completion, Completion};
use crate::error::{LogError, Result};
use crate::format::{RecordHeader, MAX_RECORD_COUNT, MAX_RECORD_PAYLOAD};
use crate::pool::Job;
use crate::sync::{self, lock};

use super::config::{LogConfig, MAX_QUEUED_BYTES};
use super::state::{Admission, Item, Log, PendingRecord};
use super::types::{LogStats, RecordMeta};

/// The sequence number and timestamp assigned to a record being appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assigned {
    /// The record's first sequence number.
    pub seq: u64,
    /// The record's timestamp: `max(now, previous timestamp)`.
    pub timestamp: u64,
    /// The log's refusal epoch: it changes whenever queued appends were refused (a full disk),
    /// which tells a caller that validated against speculative state to start over.
    pub epoch: u64,
}

/// The next record of a log, reserved by [`Log::reserve`]: its assignment is fixed and the
/// log's admission lock is held until [`Reservation::append`] queues it (or the reservation is
/// dropped, which appends nothing).
#[must_use = "a reservation appends nothing until `append` is called"]
pub struct Reservation<'a> {
    log: &'a Log,
    adm: MutexGuard<'a, Admission>,
    count: u32,
    tag: u32,
    assigned: Assigned,
}

impl std::fmt::Debug for Reservation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("log", &self.log.dir())
            .field("assigned", &self.assigned)
            .finish_non_exhaustive()
    }
}

impl Reservation<'_> {
    /// The record's sequence number, timestamp and the log's refusal epoch.
    pub fn assigned(&self) -> Assigned {
        self.assigned
    }

    /// Queues the record with `payload` for the next group commit. The completion resolves
    /// once it is durable, with its metadata (or with the error that refused its group).
    pub fn append(self, payload: Bytes) -> Result<Completion<RecordMeta>> {
        let Reservation {
            log,
            mut adm,
            count,
            tag,
            assigned,
        } = self;
        let payload = match &log.inner.cipher {
            Some(cipher) => cipher.seal(assigned.seq, count, tag, &payload),
            None => payload,
        };
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|len| *len <= MAX_RECORD_PAYLOAD)
            .ok_or(LogError::LimitExceeded {
                what: "record payload bytes",
                size: payload.len() as u64,
                limit: u64::from(MAX_RECORD_PAYLOAD),
            })?;
        if assigned.seq.checked_add(u64::from(count)).is_none() {
            return Err(LogError::LimitExceeded {
                what: "sequence number",
                size: assigned.seq,
                limit: u64::MAX - u64::from(count),
            });
        }
        let header = RecordHeader {
            payload_len: len,
            count,
            seq: assigned.seq,
            timestamp: assigned.timestamp,
            synced_len: 0, // set by the writer
            tag,
            payload_crc: 0, // computed by the writer, outside the admission lock
        };
        let (done, completion) = completion();
        adm.next_seq = header.end_seq();
        adm.last_ts = assigned.timestamp;
        adm.queued_bytes += header.record_len();
        adm.queue.push_back(Item::Append(PendingRecord {
            header,
            payload,
            done,
        }));
        let schedule = !adm.scheduled;
        adm.scheduled = true;
        // The append that completes the group the writer waits for wakes it (once).
        let gathered = adm.hold.is_some_and(|h| adm.queue.len() == h.target);
        drop(adm);
        if schedule {
            log.schedule();
        }
        if gathered {
            log.inner.held.notify_one();
        }
        Ok(completion)
    }
}

impl Log {
    /// The log's directory (relative to the backend root).
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The log's configuration.
    pub fn config(&self) -> &LogConfig {
        &self.inner.config
    }

    /// Reserves the next record of the log: under the admission lock the log assigns the next
    /// sequence number and the timestamp `max(now, last timestamp)` to a record covering
    /// `count` sequence numbers. The caller reads them from [`Reservation::assigned`], builds
    /// the payload with them (this is where a partition stamps its batch and the event store
    /// links its hash chain) and queues the record with [`Reservation::append`]. The lock is
    /// held until then, so reservations are appended in the order they were made; dropping a
    /// reservation appends nothing and consumes nothing.
    ///
    /// Blocks while more than [`MAX_QUEUED_BYTES`] are queued on this log (back-pressure).
    pub fn reserve(&self, count: u32, tag: u32, now: u64) -> Result<Reservation<'_>> {
        let adm = self.admit(count)?;
        let assigned = Assigned {
            seq: adm.next_seq,
            timestamp: now.max(adm.last_ts),
            epoch: adm.epoch,
        };
        Ok(Reservation {
            log: self,
            adm,
            count,
            tag,
            assigned,
        })
    }

    /// [`Log::reserve`], then [`Reservation::append`] of the payload `build` makes from the
    /// assignment (`build` runs under the admission lock; an error from it appends nothing).
    /// The returned completion resolves once the record is durable (see
    /// [`Durability`](super::config::Durability)) with its metadata.
    pub fn append_with<F>(
        &self,
        count: u32,
        tag: u32,
        now: u64,
        build: F,
    ) -> Result<Completion<RecordMeta>>
    where
        F: FnOnce(Assigned) -> Result<Bytes>,
    {
        let reservation = self.reserve(count, tag, now)?;
        let payload = build(reservation.assigned())?;
        reservation.append(payload)
    }

    /// Appends a record whose sequence number and timestamp were assigned earlier (by a leader,
    /// or by [`Log::reserve`] on another replica). `seq` must be the log's next sequence
    /// number and `timestamp` must not be below the last one.
    pub fn append_assigned(
        &self,
        seq: u64,
        timestamp: u64,
        count: u32,
        tag: u32,
        payload: Bytes,
    ) -> Result<Completion<RecordMeta>> {
        let adm = self.admit(count)?;
        if seq != adm.next_seq {
            return Err(LogError::OutOfOrder {
                path: self.inner.dir.clone(),
                expected: adm.next_seq,
                found: seq,
            });
        }
        if timestamp < adm.last_ts {
            return Err(LogError::LimitExceeded {
                what: "timestamp below the log's last timestamp",
                size: timestamp,
                limit: adm.last_ts,
            });
        }
        let assigned = Assigned {
            seq,
            timestamp,
            epoch: adm.epoch,
        };
        Reservation {
            log: self,
            adm,
            count,
            tag,
            assigned,
        }
        .append(payload)
    }

    /// The refusal epoch (see [`Assigned::epoch`]).
    pub fn current_epoch(&self) -> u64 {
        lock(&self.inner.admission).epoch
    }

    /// The next sequence number an append would get right now (including queued appends).
    pub fn next_seq_to_assign(&self) -> u64 {
        lock(&self.inner.admission).next_seq
    }

    /// Takes the admission lock for a record of `count` sequence numbers once there is room,
    /// refusing when the log has failed or is closed.
    fn admit(&self, count: u32) -> Result<MutexGuard<'_, Admission>> {
        if count == 0 || count > MAX_RECORD_COUNT {
            return Err(LogError::LimitExceeded {
                what: "record count",
                size: u64::from(count),
                limit: u64::from(MAX_RECORD_COUNT),
            });
        }
        let inner = &self.inner;
        let mut adm = lock(&inner.admission);
        while adm.queued_bytes > MAX_QUEUED_BYTES && adm.failed.is_none() && !adm.closed {
            adm.room_waiters += 1;
            adm = sync::wait(&inner.room, adm);
            adm.room_waiters -= 1;
        }
        if let Some(err) = &adm.failed {
            return Err(LogError::LogFailed {
                path: inner.dir.clone(),
                source: Arc::clone(err),
            });
        }
        if adm.closed {
            return Err(LogError::Shutdown);
        }
        Ok(adm)
    }

    fn schedule(&self) {
        let job: Arc<dyn Job> = Arc::clone(&self.inner) as Arc<dyn Job>;
        self.inner.pool.schedule(job);
    }

    pub(super) fn enqueue_control(&self, item: impl FnOnce(&mut Admission) -> Item) {
        let mut adm = lock(&self.inner.admission);
        let item = item(&mut adm);
        if let Some(err) = &adm.failed {
            let err = Arc::clone(err);
            let dir = self.inner.dir.clone();
            drop(adm);
            item.fail(&|| LogError::LogFailed {
                path: dir.clone(),
                source: Arc::clone(&err),
            });
            return;
        }
        adm.queue.push_back(item);
        let schedule = !adm.scheduled;
        adm.scheduled = true;
        // A flush, purge or truncation has a caller waiting for it: no window.
        let held = adm.hold.take().is_some();
        drop(adm);
        if schedule {
            self.schedule();
        }
        if held {
            self.inner.held.notify_one();
        }
    }

    /// Makes every record already written durable, on the caller's thread and without
    /// waiting for queued appends: an fdatasync of the active segment (older segments were
    /// synced when they were sealed). For a reader that is about to record something derived
    /// from written records (an index checkpoint) and must not outlive them in a power cut,
    /// whatever the [`Durability`](crate::Durability); unlike [`Log::flush`] it never waits on a commit
    /// thread, which may itself be waiting for that reader.
    ///
    /// # Errors
    /// The fdatasync failed.
    pub fn sync_written(&self) -> crate::error::Result<()> {
        let file = Arc::clone(&crate::sync::lock(&self.inner.view).active_file);
        file.sync()
            .map_err(|e| LogError::io(crate::error::IoOp::Sync, &self.inner.dir, e))
    }

    /// Makes everything appended so far durable (a no-op with [`Durability::Fsync`](crate::Durability::Fsync) beyond
    /// waiting for queued appends).
    pub fn flush(&self) -> Completion<()> {
        let (done, completion) = completion();
        self.enqueue_control(|_| Item::Flush(done));
        completion
    }

    /// Deletes every segment and restarts the log empty at sequence number `base`. Ordered with
    /// appends: appends queued before it are written (then deleted), appends after it start at
    /// `base`. Not atomic across a crash by itself: an upper layer that needs that records its
    /// intent durably first and redoes the purge at open (the partition does).
    pub fn purge(&self, base: u64) -> Completion<()> {
        let (done, completion) = completion();
        self.enqueue_control(|adm| {
            adm.next_seq = base;
            Item::Purge { base, done }
        });
        completion
    }

    /// Group-commit counters of this log.
    pub fn stats(&self) -> LogStats {
        let c = &self.inner.counters;
        LogStats {
            records: c.records.load(Ordering::Relaxed),
            groups: c.groups.load(Ordering::Relaxed),
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
        }
    }

    /// The error that fail-stopped this log, if any.
    pub fn failure(&self) -> Option<Arc<io::Error>> {
        lock(&self.inner.admission).failed.clone()
    }

    /// Refuses further appends, waits for queued work, syncs, and drops this log's cache
    /// entries.
    pub fn close(&self) -> Result<()> {
        let flushed = self.flush().wait();
        lock(&self.inner.admission).closed = true;
        self.inner.held.notify_all();
        // A closed log's active segment ends at its last record, as a sealed one does.
        if let Err(e) = lock(&self.inner.writer).active.file.trim_preallocated() {
            tracing::warn!(dir = %self.inner.dir.display(), error = %e, "cannot cut the active segment's preallocated space; the next open cuts it");
        }
        self.inner.room.notify_all();
        self.inner.forget_cached();
        flushed
    }
}
