//! Retention: deleting sealed segments oldest first. The active segment is never deleted,
//! and appends are never blocked (segments leave the read view under a short lock, their files
//! are removed afterwards).

use crate::error::Result;
use crate::sync::{lock, read_lock};

use super::segment_files::remove_segment_files;
use super::state::Log;
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
        for (owner, seg) in &removed {
            self.inner.cache.remove((*owner, seg.base));
            remove_segment_files(&*self.inner.backend, &self.inner.dir, seg.base)?;
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
