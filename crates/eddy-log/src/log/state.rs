//! The state every part of the log shares: the admission queue, the writer's active segment,
//! the readers' view of the segments, and the [`Log`] handle itself. The other modules of the
//! log each add one concern to it (`open`, `admission`, `writer`, `read`, `rewrite`,
//! `retention`) and import this module, `config`, `types` and `segment_files` (and `rewrite`
//! the read path); none of those imports them back.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, RwLock};

use bytes::Bytes;

use crate::cache::Cache;
use crate::completion::Completer;
use crate::error::LogError;
use crate::file::{StorageBackend, StorageFile};
use crate::format::{IndexEntry, RecordHeader, SEGMENT_HEADER_LEN};
use crate::pool::{CommitStats, PoolShared};
use crate::sync::lock;

use super::config::LogConfig;
use super::types::{CommitHook, RecordMeta, SegmentSummary};

pub(super) struct PendingRecord {
    pub(super) header: RecordHeader,
    pub(super) payload: Bytes,
    pub(super) done: Completer<RecordMeta>,
}

pub(super) enum Item {
    Append(PendingRecord),
    Flush(Completer<()>),
    Purge { base: u64, done: Completer<()> },
    Truncate { seq: u64, done: Completer<()> },
}

impl Item {
    pub(super) fn fail(self, error: &dyn Fn() -> LogError) {
        match self {
            Item::Append(r) => r.done.complete(Err(error())),
            Item::Flush(done) | Item::Purge { done, .. } | Item::Truncate { done, .. } => {
                done.complete(Err(error()));
            }
        }
    }
}

pub(super) struct Admission {
    /// Incremented whenever queued appends are refused (see [`Assigned::epoch`]).
    pub(super) epoch: u64,
    pub(super) next_seq: u64,
    pub(super) last_ts: u64,
    pub(super) queue: VecDeque<Item>,
    pub(super) queued_bytes: u64,
    pub(super) scheduled: bool,
    pub(super) failed: Option<Arc<io::Error>>,
    pub(super) closed: bool,
    /// Appenders blocked on `room` (a turn notifies only when there are some: a condvar
    /// notify is a syscall even with nobody waiting).
    pub(super) room_waiters: usize,
    /// Set by a turn that ended with appends queued behind it (see
    /// [`LogConfig::group_window`]): the next group waits for it.
    pub(super) hold: Option<Hold>,
}

/// How long the next group waits to gather appends behind a busy writer: until `until`, or
/// until `target` items are queued, whichever comes first (an appender that brings the queue
/// to `target` wakes the writer; so do a control item and the log's close).
#[derive(Debug, Clone, Copy)]
pub(super) struct Hold {
    pub(super) until: std::time::Instant,
    pub(super) target: usize,
}

pub(super) struct ActiveSegment {
    pub(super) base: u64,
    pub(super) file: Arc<dyn StorageFile>,
    /// `None` when the index file could not be written: it will be rebuilt at the next open.
    pub(super) index_file: Option<Arc<dyn StorageFile>>,
    pub(super) len: u64,
    pub(super) synced_len: u64,
    pub(super) last_index_pos: Option<u64>,
    /// Entries of the in-memory index already in the index file.
    pub(super) index_written: usize,
    pub(super) has_records: bool,
}

impl ActiveSegment {
    /// A new, empty active segment at `base` on freshly created files.
    pub(super) fn fresh(
        base: u64,
        file: Arc<dyn StorageFile>,
        index_file: Arc<dyn StorageFile>,
    ) -> Self {
        ActiveSegment {
            base,
            file,
            index_file: Some(index_file),
            len: SEGMENT_HEADER_LEN as u64,
            synced_len: SEGMENT_HEADER_LEN as u64,
            last_index_pos: None,
            index_written: 0,
            has_records: false,
        }
    }
}

pub(super) struct Writer {
    pub(super) active: ActiveSegment,
    pub(super) next_seq: u64,
    pub(super) last_ts: u64,
    pub(super) unsynced_records: u64,
    pub(super) unsynced_bytes: u64,
    pub(super) failed: Option<Arc<io::Error>>,
    /// With a group-commit window: the appends queued when this turn's last group was
    /// acknowledged, plus that group's (its writers, once back): the next hold's target;
    /// 0 when the turn acknowledged nothing or no window applied.
    pub(super) hold_target: usize,
}

#[derive(Debug, Clone)]
pub(super) struct SegmentState {
    pub(super) base: u64,
    pub(super) end: u64,
    pub(super) len: u64,
    /// Records in the segment (its payload bytes are `len` less the segment header and this
    /// many record headers).
    pub(super) records: u64,
    pub(super) first_ts: Option<u64>,
    pub(super) max_ts: Option<u64>,
    pub(super) sealed: bool,
    /// Owner half of the segment's cache key and its identity: the log's id for a segment
    /// found at open, a fresh id for every segment made later (its base may be that of a
    /// segment a truncation or purge removed) and per rewrite or cut of the segment, so a
    /// cached handle always belongs to the file version the view describes and a rewrite
    /// never installs over another segment (see [`Log::rewrite_sealed`]).
    pub(super) owner: u64,
}

impl SegmentState {
    /// The view of an empty, unsealed segment at `base` owned by `owner` (a fresh identity
    /// for every segment made after open: a truncation or purge may have removed a segment
    /// with this base that a rewrite still works on, see `Log::rewrite_sealed`).
    pub(super) fn empty(base: u64, owner: u64) -> Self {
        SegmentState {
            base,
            end: base,
            len: SEGMENT_HEADER_LEN as u64,
            records: 0,
            first_ts: None,
            max_ts: None,
            sealed: false,
            owner,
        }
    }

    pub(super) fn summary(&self) -> SegmentSummary {
        SegmentSummary {
            base: self.base,
            end: self.end,
            bytes: self.len,
            records: self.records,
            first_timestamp: self.first_ts,
            max_timestamp: self.max_ts,
            sealed: self.sealed,
        }
    }
}

pub(super) struct View {
    pub(super) segments: VecDeque<SegmentState>,
    pub(super) active_file: Arc<dyn StorageFile>,
    pub(super) active_index: Vec<IndexEntry>,
}

/// Per-log counters.
#[derive(Debug, Default)]
pub(super) struct LogCounters {
    pub(super) records: AtomicU64,
    pub(super) fsyncs: AtomicU64,
    pub(super) groups: AtomicU64,
}

pub(crate) struct LogInner {
    pub(super) id: u64,
    pub(super) dir: PathBuf,
    pub(super) backend: Arc<dyn StorageBackend>,
    pub(super) config: LogConfig,
    pub(super) cache: Arc<Cache>,
    pub(super) pool: Arc<PoolShared>,
    pub(super) hook: Option<Arc<dyn CommitHook>>,
    pub(super) admission: Mutex<Admission>,
    pub(super) room: Condvar,
    /// Wakes a writer waiting out its group-commit window ([`Admission::hold`]).
    pub(super) held: Condvar,
    /// Orders segment file swaps ([`Log::rewrite_sealed`], write side) against everything
    /// that maps a segment's name to its file or removes segment files (loading a sealed
    /// segment into the cache, retention, purge: read side). Never taken by appends. Lock
    /// order: `swap` before `view`.
    pub(super) swap: RwLock<()>,
    /// One rewrite at a time per log.
    pub(super) rewriting: Mutex<()>,
    /// Orders retention against a truncation (both change which sealed segments exist and
    /// find them by position in the view); appends never take it. Lock order: `layout`
    /// before `swap` before `view`.
    pub(super) layout: Mutex<()>,
    pub(super) writer: Mutex<Writer>,
    pub(super) view: Mutex<View>,
    pub(super) counters: LogCounters,
    /// Odd while a truncation ([`Log::truncate_from`]) changes files under readers, bumped
    /// again when it is done: a read that saw it change (or start odd and fail) runs again.
    pub(super) truncations: AtomicU64,
    /// The owning store's counters ([`OpenOptions::stats`](super::types::OpenOptions::stats)).
    pub(super) store_stats: Option<Arc<CommitStats>>,
    /// Seals payloads on append and opens them on read ([`OpenOptions::cipher`](super::types::OpenOptions::cipher)).
    pub(super) cipher: Option<crate::cipher::Cipher>,
    /// [`OpenOptions::window_gate`](super::types::OpenOptions::window_gate).
    pub(super) window_gate: Option<Arc<super::types::WindowGate>>,
}

pub(super) use crate::error::is_no_space;

/// A handle on an open log. Cheap to clone; all clones share one writer.
#[derive(Clone)]
pub struct Log {
    pub(super) inner: Arc<LogInner>,
}

/// A handle that does not keep the log open ([`Log::downgrade`]): for something the log's
/// own hook keeps alive, which a strong handle would never let go.
#[derive(Clone)]
pub struct WeakLog(std::sync::Weak<LogInner>);

impl fmt::Debug for WeakLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WeakLog")
    }
}

impl Log {
    /// A handle that does not keep the log open.
    pub fn downgrade(&self) -> WeakLog {
        WeakLog(Arc::downgrade(&self.inner))
    }
}

impl WeakLog {
    /// The log, while it is still open somewhere.
    pub fn upgrade(&self) -> Option<Log> {
        self.0.upgrade().map(|inner| Log { inner })
    }
}

impl fmt::Debug for Log {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.inner.dir)
            .field("bounds", &self.bounds())
            .finish()
    }
}

impl LogInner {
    /// Drops every cache entry of this log (rewritten segments have their own owner ids).
    pub(super) fn forget_cached(&self) {
        self.cache.remove_owner(self.id);
        for seg in &lock(&self.view).segments {
            if seg.owner != self.id {
                self.cache.remove((seg.owner, seg.base));
            }
        }
    }
}

impl Drop for LogInner {
    fn drop(&mut self) {
        self.forget_cached();
    }
}
