//! Listings (orgs, aggregate types, aggregates of one shard): pages of a scan over the shard
//! index in listing-hash order, with cursors that stay valid across writes (event protocol
//! §4.9).

use std::path::PathBuf;

use crate::error::{EventStoreError, Result};
use crate::keys::{
    key_hash, parse_agg_key, parse_org_key, parse_type_key, KIND_AGG, KIND_ORG, KIND_TYPE,
};
use crate::state::AggState;
use crate::types::{AggregateListItem, AggregateTypeItem, ListPage};

use super::config::MAX_LIST_PAGE;
use super::EventStore;

impl EventStore {
    /// One page of a scan over index entries of `kind` whose listing hash is at least
    /// `cursor`, keeping what `keep` maps to an item.
    fn list<T>(
        &self,
        shard: u64,
        kind: u8,
        cursor: Option<u64>,
        limit: usize,
        mut keep: impl FnMut(&[u8], &[u8]) -> Result<Option<T>>,
    ) -> Result<ListPage<T>> {
        let shard = self.shard(shard)?;
        let limit = limit.clamp(1, MAX_LIST_PAGE);
        let mut start = vec![kind];
        start.extend_from_slice(&cursor.unwrap_or(0).to_be_bytes());
        let end = vec![kind + 1];
        let scan_budget = limit.saturating_mul(4);
        let entries = shard.index.scan(&start, &end, scan_budget)?;
        let mut items = Vec::new();
        let mut cut: Option<u64> = None;
        for (i, (k, v)) in entries.iter().enumerate() {
            if items.len() >= limit {
                // Finish the hash of the last item so no entry is skipped at the boundary.
                let h = key_hash(k);
                if i > 0 && key_hash(&entries[i - 1].0) == h {
                    if let Some(item) = keep(k, v)? {
                        items.push(item);
                    }
                    continue;
                }
                cut = Some(h);
                break;
            }
            if let Some(item) = keep(k, v)? {
                items.push(item);
            }
        }
        let next_cursor = match cut {
            Some(h) => Some(h),
            None if entries.len() >= scan_budget => {
                let last = key_hash(&entries[entries.len() - 1].0);
                let first = key_hash(&entries[0].0);
                // Progress even in the (astronomically unlikely) all-one-hash page.
                if first == last {
                    last.checked_add(1)
                } else {
                    Some(last)
                }
            }
            None => None,
        };
        Ok(ListPage { items, next_cursor })
    }

    /// Distinct orgs with batches on `shard`.
    pub fn list_orgs(
        &self,
        shard: u64,
        cursor: Option<u64>,
        limit: usize,
    ) -> Result<ListPage<u128>> {
        self.list(shard, KIND_ORG, cursor, limit, |k, _| Ok(parse_org_key(k)))
    }

    /// Distinct (org, type) pairs on `shard`, optionally of one org.
    pub fn list_aggregate_types(
        &self,
        shard: u64,
        org_id: Option<u128>,
        cursor: Option<u64>,
        limit: usize,
    ) -> Result<ListPage<AggregateTypeItem>> {
        self.list(shard, KIND_TYPE, cursor, limit, |k, _| {
            Ok(parse_type_key(k)
                .filter(|(o, _)| org_id.is_none_or(|x| x == *o))
                .map(|(org_id, aggregate_type_id)| AggregateTypeItem {
                    org_id,
                    aggregate_type_id,
                }))
        })
    }

    /// Aggregates on `shard` (deleted ones included, flagged), optionally filtered by org
    /// and/or type, with their statistics.
    pub fn list_aggregates(
        &self,
        shard: u64,
        org_id: Option<u128>,
        aggregate_type_id: Option<u128>,
        cursor: Option<u64>,
        limit: usize,
    ) -> Result<ListPage<AggregateListItem>> {
        let path = PathBuf::from("events").join(format!("index-{shard:03}"));
        self.list(shard, KIND_AGG, cursor, limit, |k, v| {
            let Some(key) = parse_agg_key(k) else {
                return Ok(None);
            };
            if org_id.is_some_and(|o| o != key.org_id)
                || aggregate_type_id.is_some_and(|t| t != key.aggregate_type_id)
            {
                return Ok(None);
            }
            let s = AggState::decode(v)
                .map_err(|kind| EventStoreError::corrupt(path.clone(), 0, kind))?;
            Ok(Some(s.list_item(key)))
        })
    }
}
