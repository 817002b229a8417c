//! The metadata commit pipeline: an operation is validated against the pending state, queued on
//! the metadata log, handed to the applier once durable (the log's commit hook, in log order),
//! applied to the durable state with its partition effects, and only then acknowledged.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};

use bytes::Bytes;
use eddy_log::{
    completion, lock, read_lock, sync, write_lock, CommitHook, Completer, Completion, Log,
    LogError, StorageBackend,
};

use crate::error::{Result, StreamStoreError};
use crate::metadata::{encode_op, MetadataOp, MetadataState};

use super::config::StreamStoreConfig;
use super::operation::Applied;
use super::registry::Registry;
use super::snapshot::{write_snapshot, METADATA_DIR};

/// Tag of metadata operation records.
pub const METADATA_TAG: u32 = 1;

struct InFlight {
    op: MetadataOp,
    done: Completer<Applied, StreamStoreError>,
}

pub(super) struct Pending {
    pub(super) state: MetadataState,
    /// The log refusal epoch `state` was built for; `None` when it must be rebuilt.
    pub(super) epoch: Option<u64>,
}

/// The metadata pipeline's shared state (the store, the hook and the applier hold it).
pub(super) struct MetaShared {
    pub(super) log: OnceLock<Log>,
    pub(super) pending: Mutex<Pending>,
    inflight: Mutex<BTreeMap<u64, InFlight>>,
    pub(super) durable: RwLock<MetadataState>,
    /// Every operation below this sequence number is applied to `durable`.
    pub(super) applied: Mutex<u64>,
    pub(super) applied_cv: Condvar,
    pub(super) jobs: Mutex<Option<mpsc::Sender<Job>>>,
    /// What the applied operations changed (taken with `durable` held, after it).
    pub(super) journal: Mutex<crate::changes::ChangeJournal>,
}

impl MetaShared {
    /// A pipeline with nothing applied yet (open fills it in).
    pub(super) fn new() -> Self {
        MetaShared {
            log: OnceLock::new(),
            pending: Mutex::new(Pending {
                state: MetadataState::default(),
                epoch: None,
            }),
            inflight: Mutex::new(BTreeMap::new()),
            durable: RwLock::new(MetadataState::default()),
            applied: Mutex::new(0),
            applied_cv: Condvar::new(),
            jobs: Mutex::new(None),
            journal: Mutex::new(crate::changes::ChangeJournal::new(0, 0)),
        }
    }
}

/// A durable operation on its way to the applier.
pub(super) struct Job {
    seq: u64,
    op: MetadataOp,
    done: Completer<Applied, StreamStoreError>,
}

impl fmt::Debug for MetaShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetaShared")
            .field("applied", &*lock(&self.applied))
            .finish_non_exhaustive()
    }
}

/// The metadata log's hook: durable operations go to the applier in log order once readers of
/// the log can see them; refused ones are answered with the refusal.
#[derive(Debug)]
pub(super) struct MetaHook {
    pub(super) shared: Arc<MetaShared>,
}

impl CommitHook for MetaHook {
    fn before_ack(&self, _end_seq: u64) -> io::Result<()> {
        Ok(())
    }

    /// Hands the operations below `end_seq` to the applier. Not in `before_ack`: the applier
    /// acknowledges an operation as soon as it is applied, and an acknowledged operation must
    /// already be in the log's read view (its bounds, `Log::read`), which the writer publishes
    /// between the two calls.
    fn after_publish(&self, end_seq: u64) {
        let durable: Vec<(u64, InFlight)> = {
            let mut inflight = lock(&self.shared.inflight);
            let rest = inflight.split_off(&end_seq);
            std::mem::replace(&mut *inflight, rest)
                .into_iter()
                .collect()
        };
        let jobs = lock(&self.shared.jobs);
        for (seq, InFlight { op, done }) in durable {
            match jobs.as_ref() {
                Some(tx) => {
                    if let Err(mpsc::SendError(job)) = tx.send(Job { seq, op, done }) {
                        job.done.complete(Err(LogError::Shutdown.into()));
                    }
                }
                None => done.complete(Err(LogError::Shutdown.into())),
            }
        }
    }

    fn on_refused(&self, next_seq: u64, error: &dyn Fn() -> LogError) {
        let refused = lock(&self.shared.inflight).split_off(&next_seq);
        for (_, InFlight { done, .. }) in refused {
            done.complete(Err(error().into()));
        }
    }
}

/// The applier thread: applies durable operations in log order, performs their partition
/// effects, writes snapshots, and acknowledges.
pub(super) fn applier(
    rx: &mpsc::Receiver<Job>,
    meta: &MetaShared,
    registry: &Registry,
    backend: &dyn StorageBackend,
    config: &StreamStoreConfig,
    mut snapshot_next: u64,
) {
    while let Ok(Job { seq, op, done }) = rx.recv() {
        let outcome = {
            let mut durable = write_lock(&meta.durable);
            match crate::changes::apply_recording(&mut durable, &op) {
                // Effects run before readers see the new state, so a topic is never visible
                // without its partitions. Every effect is attempted even after one failed: a
                // partition whose purge was never attempted would keep accepting writes that
                // the restart's purge deletes.
                Ok((effects, changes)) => {
                    let payload = encode_op(&op).unwrap_or_default();
                    lock(&meta.journal).record(seq + 1, &payload, now_micros(), changes);
                    effects
                        .iter()
                        .map(|e| registry.perform(e, &durable))
                        .fold(Ok(()), Result::and)
                }
                Err(e) => {
                    // The pending state accepted it: the two disagree, which is a bug.
                    tracing::error!(seq, error = %e, "durable apply refused an accepted operation");
                    Err(StreamStoreError::Metadata(e))
                }
            }
        };
        if let Err(e) = &outcome {
            tracing::error!(seq, error = %e, "metadata effect failed; it is retried at the next open");
        }
        {
            let mut applied = lock(&meta.applied);
            *applied = seq + 1;
        }
        meta.applied_cv.notify_all();
        if (seq + 1).saturating_sub(snapshot_next) >= config.snapshot_every_ops {
            match write_snapshot(meta, backend, seq + 1) {
                Ok(()) => snapshot_next = seq + 1,
                Err(e) => {
                    tracing::warn!(error = %e, "metadata snapshot failed; the log keeps everything");
                }
            }
        }
        done.complete(outcome.map(|()| Applied::Metadata { seq }));
    }
}

/// The wall clock in µs (the time an operation's change records carry).
fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

impl MetaShared {
    /// The metadata log (set once, during open).
    pub(super) fn log(&self) -> &Log {
        self.log.get().expect("set during open")
    }

    /// Validates `op` against the pending state and queues it on the metadata log. A
    /// validation failure returns at once and writes nothing. The completion resolves once the
    /// operation is durable and applied.
    pub(super) fn commit(&self, op: &MetadataOp) -> Result<Completion<Applied, StreamStoreError>> {
        let log = self.log();
        let payload = Bytes::from(encode_op(op).map_err(|source| StreamStoreError::Encoding {
            action: "encode",
            path: PathBuf::from(METADATA_DIR),
            source,
        })?);
        loop {
            let mut pending = lock(&self.pending);
            let current_epoch = log.current_epoch();
            if pending.epoch != Some(current_epoch) {
                // Queued operations were refused (or a previous attempt failed): rebuild the
                // pending state from the durable one once everything acknowledged is applied.
                let target = log.next_seq_to_assign();
                let mut applied = lock(&self.applied);
                while *applied < target {
                    applied = sync::wait(&self.applied_cv, applied);
                }
                drop(applied);
                pending.state = read_lock(&self.durable).clone();
                pending.epoch = Some(current_epoch);
            }
            // Apply leaves the state untouched on error.
            pending.state.apply(op)?;
            let reservation = match log.reserve(1, METADATA_TAG, 0) {
                Ok(r) => r,
                Err(e) => {
                    pending.epoch = None;
                    return Err(e.into());
                }
            };
            let assigned = reservation.assigned();
            if assigned.epoch != current_epoch {
                // A refusal raced with the validation: validate again.
                drop(reservation);
                pending.epoch = None;
                continue;
            }
            // Registered before the record can become durable (the hook runs on the writer,
            // which cannot take the record before the reservation is appended).
            let (done, completion) = completion();
            lock(&self.inflight).insert(
                assigned.seq,
                InFlight {
                    op: op.clone(),
                    done,
                },
            );
            match reservation.append(payload.clone()) {
                // The log's acknowledgement is not the answer: the applier's is, once applied.
                Ok(_log_ack) => return Ok(completion),
                Err(e) => {
                    lock(&self.inflight).remove(&assigned.seq);
                    pending.epoch = None;
                    return Err(e.into());
                }
            }
        }
    }
}
