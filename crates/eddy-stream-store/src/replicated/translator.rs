//! The sampled offset → raft index translator.
//!
//! A *sample* is the [`Cursor`](super::entry::Cursor) state in front of one raft index: the
//! next offset and newest timestamp just before that entry is applied. A read looks up the last
//! sample at or below what it wants (by offset, timestamp or index) and replays the entries
//! forward from there with the same state machine `apply` runs, so a sample only saves work and
//! can never change an answer.
//!
//! Samples are taken by `apply`, one after every `sample_bytes` of log record bytes or
//! `sample_records` records (whichever comes first), so a forward scan reads about one interval
//! of log. The first sample (the *base*) is the state right after the visible floor; it is
//! always present. When the samples exceed `max_samples`, every other one is dropped (the base
//! stays) and both intervals double: memory is bounded by `max_samples` samples of 24 bytes
//! whatever the partition's size, and scans grow with the log instead (a partition of `S` bytes
//! scans at most `max(sample_bytes, 2 * S / max_samples)` bytes per lookup, roughly). A purge
//! resets the intervals; forgetting (retention) drops samples from the front, and halves the
//! intervals (not below the configured ones) while fewer than a quarter of `max_samples` remain,
//! so a partition that shrinks samples densely again as it grows back.

use std::collections::VecDeque;

use super::entry::Cursor;

/// The cursor state in front of raft index `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    /// The raft index this state precedes.
    pub(crate) index: u64,
    /// The next offset before `index` is applied.
    pub(crate) next_offset: u64,
    /// The newest batch timestamp before `index` is applied.
    pub(crate) last_timestamp: u64,
}

impl Sample {
    /// The state in front of `index`, from the cursor after `index - 1`.
    pub(crate) fn at(index: u64, cursor: &Cursor) -> Sample {
        Sample {
            index,
            next_offset: cursor.next_offset,
            last_timestamp: cursor.last_timestamp,
        }
    }

    /// The cursor this sample describes, in purge generation `generation`.
    pub(crate) fn cursor(&self, generation: u64) -> Cursor {
        Cursor {
            next_offset: self.next_offset,
            last_timestamp: self.last_timestamp,
            generation,
        }
    }
}

/// Bytes of one sample (what the memory bound counts).
pub(crate) const SAMPLE_SIZE: usize = std::mem::size_of::<Sample>();

/// The samples of one partition.
#[derive(Debug)]
pub(crate) struct Translator {
    /// Sorted by index; `samples[0]` is the base.
    samples: VecDeque<Sample>,
    base_bytes: u64,
    base_records: u64,
    max_samples: usize,
    /// Current intervals (the base ones, doubled by every thinning).
    interval_bytes: u64,
    interval_records: u64,
    bytes_since: u64,
    records_since: u64,
}

impl Translator {
    /// A translator whose base is `base`. `max_samples` is at least 2.
    pub(crate) fn new(
        base: Sample,
        sample_bytes: u64,
        sample_records: u64,
        max_samples: usize,
    ) -> Self {
        debug_assert!(max_samples >= 2 && sample_bytes >= 1 && sample_records >= 1);
        let mut samples = VecDeque::new();
        samples.push_back(base);
        Translator {
            samples,
            base_bytes: sample_bytes,
            base_records: sample_records,
            max_samples,
            interval_bytes: sample_bytes,
            interval_records: sample_records,
            bytes_since: 0,
            records_since: 0,
        }
    }

    /// Starts over from `base` with the base intervals (after a purge).
    pub(crate) fn reset(&mut self, base: Sample) {
        self.samples.clear();
        self.samples.push_back(base);
        self.interval_bytes = self.base_bytes;
        self.interval_records = self.base_records;
        self.bytes_since = 0;
        self.records_since = 0;
    }

    /// Entry `index` (of `record_bytes` log bytes) was applied, leaving `cursor`.
    pub(crate) fn note(&mut self, index: u64, record_bytes: u64, cursor: &Cursor) {
        self.bytes_since = self.bytes_since.saturating_add(record_bytes);
        self.records_since += 1;
        if self.bytes_since < self.interval_bytes && self.records_since < self.interval_records {
            return;
        }
        self.bytes_since = 0;
        self.records_since = 0;
        self.samples
            .push_back(Sample::at(index.saturating_add(1), cursor));
        if self.samples.len() > self.max_samples {
            self.thin();
        }
    }

    /// Keeps every other sample (the base included) and doubles the intervals.
    fn thin(&mut self) {
        let mut position = 0usize;
        self.samples.retain(|_| {
            position += 1;
            position % 2 == 1
        });
        self.interval_bytes = self.interval_bytes.saturating_mul(2);
        self.interval_records = self.interval_records.saturating_mul(2);
    }

    /// Drops every sample at or below `base.index` and makes `base` the new base.
    pub(crate) fn forget_through(&mut self, base: Sample) {
        while self.samples.front().is_some_and(|s| s.index <= base.index) {
            self.samples.pop_front();
        }
        self.samples.push_front(base);
        while self.samples.len() * 4 < self.max_samples && self.interval_records > self.base_records
        {
            self.interval_bytes = (self.interval_bytes / 2).max(self.base_bytes);
            self.interval_records = (self.interval_records / 2).max(self.base_records);
        }
    }

    /// The base sample.
    #[cfg(test)]
    pub(crate) fn base(&self) -> Sample {
        self.samples[0]
    }

    fn last_where(&self, below: impl Fn(&Sample) -> bool) -> (Sample, Option<Sample>) {
        // `below` holds for a prefix of the samples (they are ordered by every key).
        let i = self.samples.partition_point(below).max(1);
        (self.samples[i - 1], self.samples.get(i).copied())
    }

    /// The last sample whose next offset is at most `offset` (the base when none), and the
    /// sample after it. The batch holding `offset` is applied at or after the first.
    pub(crate) fn for_offset(&self, offset: u64) -> (Sample, Option<Sample>) {
        self.last_where(|s| s.next_offset <= offset)
    }

    /// The last sample whose newest timestamp is below `timestamp` (the base when none), and
    /// the sample after it. The first batch at or after `timestamp` is applied at or after the
    /// first.
    pub(crate) fn for_timestamp(&self, timestamp: u64) -> (Sample, Option<Sample>) {
        self.last_where(|s| s.last_timestamp < timestamp)
    }

    /// The last sample at or below raft index `index` (the base when none), and the sample
    /// after it.
    pub(crate) fn for_index(&self, index: u64) -> (Sample, Option<Sample>) {
        self.last_where(|s| s.index <= index)
    }

    /// Samples held.
    pub(crate) fn len(&self) -> usize {
        self.samples.len()
    }

    /// The current intervals (bytes, records).
    #[cfg(test)]
    pub(crate) fn intervals(&self) -> (u64, u64) {
        (self.interval_bytes, self.interval_records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor(next_offset: u64, last_timestamp: u64) -> Cursor {
        Cursor {
            next_offset,
            last_timestamp,
            generation: 0,
        }
    }

    #[test]
    fn samples_follow_the_intervals_and_thinning_bounds_them() {
        let base = Sample::at(1, &cursor(0, 0));
        let mut t = Translator::new(base, 1000, 3, 8);
        // One record of 10 bytes per index: a sample every 3 records.
        for index in 1..=200u64 {
            t.note(index, 10, &cursor(index * 2, index));
            assert!(t.len() <= 8, "bounded at index {index}");
            assert_eq!(t.base(), base, "the base survives thinning");
        }
        let (bytes, records) = t.intervals();
        assert!(records > 3, "thinning doubled the interval");
        assert_eq!(bytes, 1000 * records / 3);
        // Samples stay ordered and exact: the one at index i holds the state after i - 1.
        let all: Vec<Sample> = t.samples.iter().copied().collect();
        for w in all.windows(2) {
            assert!(w[0].index < w[1].index);
        }
        for s in &all[1..] {
            assert_eq!(s.next_offset, (s.index - 1) * 2);
            assert_eq!(s.last_timestamp, s.index - 1);
        }
        // A large record takes a sample at once.
        let before = t.len();
        t.note(201, 1 << 40, &cursor(402, 201));
        assert_eq!(t.len(), before + 1);
        // Forgetting nearly everything brings the intervals back down.
        t.forget_through(Sample::at(202, &cursor(402, 201)));
        assert_eq!(t.len(), 1);
        assert_eq!(t.intervals(), (1000, 3));
        t.reset(Sample::at(300, &cursor(0, 201)));
        assert_eq!((t.len(), t.intervals()), (1, (1000, 3)));
    }

    #[test]
    fn lookups_pick_the_last_sample_at_or_below() {
        let mut t = Translator::new(Sample::at(1, &cursor(0, 5)), 1, 1, 100);
        // Index 1: batch 0..3 at ts 5; index 2: no-op; index 3: batch 3..4 at ts 9.
        t.note(1, 1, &cursor(3, 5));
        t.note(2, 1, &cursor(3, 5));
        t.note(3, 1, &cursor(4, 9));
        assert_eq!(t.for_offset(0).0.index, 1);
        assert_eq!(t.for_offset(2).0.index, 1);
        assert_eq!(
            t.for_offset(3).0.index,
            3,
            "the last sample with next offset 3"
        );
        assert_eq!(t.for_offset(3).1.map(|s| s.index), Some(4));
        assert_eq!(t.for_offset(100).0.index, 4);
        assert_eq!(t.for_timestamp(5).0.index, 1, "none below: the base");
        assert_eq!(t.for_timestamp(6).0.index, 3);
        assert_eq!(t.for_timestamp(10).0.index, 4);
        assert_eq!(t.for_index(0).0.index, 1);
        assert_eq!(t.for_index(2).0.index, 2);
        t.forget_through(Sample::at(3, &cursor(3, 5)));
        assert_eq!(t.base().index, 3);
        assert_eq!(t.len(), 2);
        assert_eq!(t.for_offset(0).0.index, 3);
    }
}
