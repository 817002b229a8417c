//! Retention: deleting sealed segments oldest first. The active segment is never deleted,
//! and appends are never blocked (segments leave the read view under a short lock, their files
//! are removed afterwards).

use crate::error::Result;
use crate::format::segment_file_name;
use crate::sync::{lock, read_lock};

use super::segment_files::remove_segment_files;
use super::state::{Log, SegmentState};
use super::types::SegmentSummary;

impl Log {
    /// Deletes sealed segments oldest first while `pred` holds, stopping at the first segment it
    /// rejects. The active segment is never deleted. Appends are not blocked: segments leave the
    /// read view under a short lock and their files are removed afterwards. Returns what was
    /// deleted.
    pub fn delete_sealed_while(
        &self,
        mut pred: impl FnMut(&SegmentSummary) -> bool,
    ) -> Result<Vec<SegmentSummary>> {
        // No truncation may remove or cut segments meanwhile.
        let _layout = lock(&self.inner.layout);
        // No rewrite may rename a new version of a segment in while it is being removed.
        let _swap = read_lock(&self.inner.swap);
        let removed: Vec<(u64, SegmentSummary)> = {
            let mut view = lock(&self.inner.view);
            let mut removed = Vec::new();
            while view.segments.len() > 1 {
                let front = view.segments.front().expect("len > 1");
                let (owner, summary) = (front.owner, front.summary());
                debug_assert!(summary.sealed);
                if !summary.sealed || !pred(&summary) {
                    break;
                }
                view.segments.pop_front();
                removed.push((owner, summary));
            }
            removed
        };
        let next_base = lock(&self.inner.view).segments.front().map(|s| s.base);
        for (i, (owner, seg)) in removed.iter().enumerate() {
            self.inner.cache.remove((*owner, seg.base));
            if let Err(e) = remove_segment_files(&*self.inner.backend, &self.inner.dir, seg.base) {
                // Segments whose log file is still there go back to the front of the view:
                // they stay readable and the next run deletes them. Left out of the view they
                // would come back at the next open behind the segments deleted after them.
                let log_path = self.inner.dir.join(segment_file_name(seg.base));
                let first_kept = if self.inner.backend.exists(&log_path) {
                    i
                } else {
                    i + 1
                };
                let mut view = lock(&self.inner.view);
                // Unless the log changed meanwhile (a purge replaced every segment).
                if view.segments.front().map(|s| s.base) == next_base {
                    for (owner, s) in removed[first_kept..].iter().rev() {
                        view.segments.push_front(SegmentState {
                            base: s.base,
                            end: s.end,
                            len: s.bytes,
                            records: s.records,
                            first_ts: s.first_timestamp,
                            max_ts: s.max_timestamp,
                            sealed: true,
                            owner: *owner,
                        });
                    }
                }
                return Err(e);
            }
        }
        Ok(removed.into_iter().map(|(_, s)| s).collect())
    }

    /// Deletes the `n` oldest sealed segments (fewer if there are fewer).
    pub fn delete_oldest_segments(&self, n: usize) -> Result<Vec<SegmentSummary>> {
        let mut left = n;
        self.delete_sealed_while(|_| {
            if left == 0 {
                false
            } else {
                left -= 1;
                true
            }
        })
    }
}
