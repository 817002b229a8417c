//! Reading a shard: one page of an aggregate's batches, from its version entries in the index
//! and the records they point at, with the batch- and event-level filters of a read (event
//! protocol §4.4).

use std::collections::HashSet;

use eddy_log::Corruption;

use crate::error::{EventStoreError, Refusal, Result};
use crate::keys::{key_version, parse_version_key, KIND_VERSION};
use crate::record::{decode_record, EventRecord, RecordBody, WritePart};
use crate::types::{AggregateKey, EventBatch, ReadPage, ReadQuery};

use super::{corrupt_in, Shard};

impl Shard {
    /// Reads the record at `seq` and decodes it; also returns its timestamp.
    pub(crate) fn record_at(&self, seq: u64) -> Result<(EventRecord, u64)> {
        let Some(r) = self.log.read_record(seq)?.filter(|r| r.meta.seq == seq) else {
            return Err(EventStoreError::corrupt(
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
        Err(EventStoreError::corrupt(
            self.log.dir().join("index"),
            0,
            Corruption::BadHeaderField("a listed batch was elided by compaction"),
        ))
    }

    /// One attempt of [`Shard::read`]; `None` when a batch it wanted was elided under it.
    fn read_once(&self, key: &AggregateKey, q: &ReadQuery) -> Result<Option<ReadPage>> {
        let Some(s) = self.committed_agg(key)? else {
            return Err(Refusal::NotFound { part: 0, key: *key }.into());
        };
        if s.deleted {
            return Err(Refusal::Deleted { part: 0, key: *key }.into());
        }
        if q.from_version < s.floor {
            return Err(Refusal::Trimmed {
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
                    return Err(EventStoreError::corrupt(
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
