//! The hash chain: replaying a shard's log into its index at open (verifying the links it
//! replays) and auditing a whole shard's chain.

use eddy_log::Corruption;

use crate::error::{EventStoreError, Result};
use crate::index::EntryBatch;
use crate::record::{decode_record, GENESIS_TIP};
use crate::shard::Shard;
use crate::state;

use super::EventStore;

impl EventStore {
    /// Verifies the hash chain of every retained record of `shard`; returns the tip. A
    /// compacted record is checked by its link and continues from the tip it recorded (its
    /// elided bytes can no longer be hashed; see [`compact`](crate::compact)).
    pub fn verify_chain(&self, shard: u32) -> Result<[u8; 32]> {
        let s = self.shard(u64::from(shard))?;
        let bounds = s.log.bounds();
        let mut tip = GENESIS_TIP;
        let mut seq = bounds.first;
        let mut first = true;
        while seq < bounds.next {
            let records = s.log.read(seq, 1024, 16 << 20)?;
            if records.is_empty() {
                break;
            }
            for r in records {
                let rec = decode_record(r.meta.tag, &r.payload).map_err(|k| {
                    EventStoreError::corrupt(s.log.dir().to_path_buf(), r.meta.seq, k)
                })?;
                if !first && rec.prev_tip != tip {
                    return Err(EventStoreError::corrupt(
                        s.log.dir().to_path_buf(),
                        r.meta.seq,
                        Corruption::BadHeaderField("hash chain link"),
                    ));
                }
                first = false;
                tip = rec.tip_after(r.meta.seq, &r.payload);
                seq = r.meta.end_seq();
            }
        }
        Ok(tip)
    }

    /// The chain tip of a shard's last committed record.
    pub fn chain_tip(&self, shard: u32) -> Result<[u8; 32]> {
        Ok(self.shard(u64::from(shard))?.committed_tip())
    }
}

/// Replays the shard's log from `from` into its index (verifying chain links); returns the
/// number of records replayed and the chain tip.
pub(super) fn replay(shard: &Shard, from: u64) -> Result<(u64, [u8; 32])> {
    let log = &shard.log;
    let bounds = log.bounds();
    let corrupt = |seq: u64| move |k| EventStoreError::corrupt(log.dir().to_path_buf(), seq, k);
    // The tip before `from`: the chain of the record just below it.
    let mut tip = GENESIS_TIP;
    if from > bounds.first {
        let prev = log.read(from - 1, 1, u64::MAX)?;
        if let Some(r) = prev.into_iter().find(|r| r.meta.seq == from - 1) {
            let rec = decode_record(r.meta.tag, &r.payload)
                .map_err(|k| EventStoreError::corrupt(log.dir().to_path_buf(), r.meta.seq, k))?;
            tip = rec.tip_after(r.meta.seq, &r.payload);
        }
    }
    let mut seq = from;
    let mut replayed = 0u64;
    let mut checked_link = from > bounds.first;
    let mut entries = EntryBatch::default();
    while seq < bounds.next {
        let records = log.read(seq, 4096, 16 << 20)?;
        if records.is_empty() {
            break;
        }
        for r in records {
            let s = r.meta.seq;
            let rec = decode_record(r.meta.tag, &r.payload).map_err(corrupt(s))?;
            if checked_link && rec.prev_tip != tip {
                return Err(corrupt(s)(Corruption::BadHeaderField("hash chain link")));
            }
            checked_link = true;
            let up = state::derive_update(
                s,
                r.meta.timestamp,
                &rec,
                |k| shard.committed_agg(k),
                |k, c| {
                    shard
                        .index
                        .get_with(&crate::keys::mark_key_bytes(k, c), state::Mark::decode)?
                        .transpose()
                        .map_err(corrupt(s))
                },
                corrupt(s),
            )?;
            entries.clear();
            up.entries_into(s, &mut entries);
            if shard.index.apply(&entries, r.meta.end_seq(), false) {
                shard.index.flush_all()?;
            }
            tip = rec.tip_after(s, &r.payload);
            seq = r.meta.end_seq();
            replayed += 1;
        }
    }
    Ok((replayed, tip))
}
