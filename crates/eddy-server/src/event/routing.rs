//! Shard placement and request routing (event protocol §4.1).
//!
//! A key's routing id is one of its three ids, picked by the routing rule; its shard is
//! `routing_id mod N`, or `routing_id mod (N − 1) + 1` when shard 0 is reserved as the
//! coordinator. The arithmetic is on the full u128, as clients that choose ids with equal
//! residues (to keep multi-aggregate writes on one shard) expect.
//!
//! Routing runs before every other check of a request, so its errors win: an empty write or
//! delete map is 9002 (not 2000/4001), keys spanning shards are 9001, a list `shard_id ≥ N` is
//! 9002 (the clients' shard discovery stops on it), and a watch must name the id set the
//! routing rule shards by unless it pins a shard. Every routing error carries `"num_shards":N`
//! and leaves the connection open.

use eddy_codec::event::{AggregateKey, EventRequest, RoutingField, ServerError, WatchRequest};

use crate::config::RoutingRule;

/// Where a request runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// One shard.
    Shard(u32),
    /// Not shard-bound (Identify, handled before routing).
    Connection,
}

/// The shard layout the server was started with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    num_shards: u32,
    rule: RoutingRule,
    reserve_coordinator: bool,
}

impl Placement {
    /// A layout of `num_shards` shards (at least 1; at least 2 with a reserved coordinator).
    pub fn new(num_shards: u32, rule: RoutingRule, reserve_coordinator: bool) -> Self {
        assert!(num_shards >= 1, "at least one shard");
        assert!(
            !reserve_coordinator || num_shards >= 2,
            "a reserved coordinator needs two shards"
        );
        Self {
            num_shards,
            rule,
            reserve_coordinator,
        }
    }

    /// Number of shards `N`.
    pub fn num_shards(&self) -> u32 {
        self.num_shards
    }

    /// The routing rule.
    pub fn rule(&self) -> RoutingRule {
        self.rule
    }

    /// The shard of a routing id.
    pub fn shard_of_id(&self, routing_id: u128) -> u32 {
        let (modulus, base) = if self.reserve_coordinator {
            (self.num_shards - 1, 1)
        } else {
            (self.num_shards, 0)
        };
        // The remainder is below `modulus`, a u32.
        (routing_id % u128::from(modulus)) as u32 + base
    }

    /// The shard of a key.
    pub fn shard_of(&self, key: &AggregateKey) -> u32 {
        self.shard_of_id(self.routing_id(key))
    }

    fn routing_id(self, key: &AggregateKey) -> u128 {
        match self.rule {
            RoutingRule::AggregateId => key.aggregate_id,
            RoutingRule::OrgId => key.org_id,
            RoutingRule::AggregateTypeId => key.aggregate_type_id,
        }
    }

    fn n(self) -> u64 {
        u64::from(self.num_shards)
    }

    /// The one shard of a set of keys: 9002 (`empty`) when there are none, 9001 when they span
    /// shards.
    fn one_shard<'a>(
        self,
        mut keys: impl Iterator<Item = &'a AggregateKey>,
        empty: ServerError,
    ) -> Result<u32, ServerError> {
        let Some(first) = keys.next() else {
            return Err(empty);
        };
        let shard = self.shard_of(first);
        if keys.any(|k| self.shard_of(k) != shard) {
            return Err(ServerError::ShardRoutingMultipleShards {
                num_shards: self.n(),
            });
        }
        Ok(shard)
    }

    fn listed_shard(self, shard_id: u64) -> Result<u32, ServerError> {
        match u32::try_from(shard_id) {
            Ok(s) if s < self.num_shards => Ok(s),
            _ => Err(ServerError::invalid_shard_id(shard_id, self.n())),
        }
    }

    /// The shard a watch subscribes to.
    pub fn watch_shard(&self, w: &WatchRequest) -> Result<u32, ServerError> {
        if let Some(shard_id) = w.shard_id {
            return self.listed_shard(shard_id);
        }
        let (set, field) = match self.rule {
            RoutingRule::AggregateId => (&w.aggregates, RoutingField::Aggregate),
            RoutingRule::OrgId => (&w.orgs, RoutingField::Org),
            RoutingRule::AggregateTypeId => (&w.aggregate_types, RoutingField::AggregateType),
        };
        let mut ids = set.iter().flatten();
        let Some(first) = ids.next() else {
            return Err(ServerError::watch_filter_required(field, self.n()));
        };
        let shard = self.shard_of_id(*first);
        if ids.any(|id| self.shard_of_id(*id) != shard) {
            return Err(ServerError::ShardRoutingMultipleShards {
                num_shards: self.n(),
            });
        }
        Ok(shard)
    }

    /// Routes a request (§4.1).
    pub fn route(&self, request: &EventRequest) -> Result<Route, ServerError> {
        let shard = match request {
            EventRequest::AggregateDetails(r) => self.shard_of(&r.aggregate_key),
            EventRequest::Read(r) => self.shard_of(&r.aggregate_key),
            EventRequest::TrimStart(r) => self.shard_of(&r.aggregate_key),
            EventRequest::Write(r) => {
                self.one_shard(r.writes.keys(), ServerError::empty_write(self.n()))?
            }
            EventRequest::Delete(r) => {
                self.one_shard(r.deletes.keys(), ServerError::empty_delete(self.n()))?
            }
            // Shard 0 coordinates a registration; schemas apply store-wide.
            EventRequest::RegisterSchema(_) => 0,
            EventRequest::ListOrgs(r) => self.listed_shard(r.shard_id)?,
            EventRequest::ListAggregateTypes(r) => self.listed_shard(r.shard_id)?,
            EventRequest::ListAggregates(r) => self.listed_shard(r.shard_id)?,
            EventRequest::Watch(w) => self.watch_shard(w)?,
            EventRequest::Identify(_) => return Ok(Route::Connection),
        };
        debug_assert!(shard < self.num_shards);
        Ok(Route::Shard(shard))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use eddy_codec::event::{
        DeleteRequest, ErrorCode, ListOrgsRequest, SingleAggregateDelete, SingleAggregateWrite,
        WriteRequest,
    };

    use super::*;

    fn key(id: u128) -> AggregateKey {
        AggregateKey::new(1, 2, id)
    }

    fn write(ids: &[u128]) -> EventRequest {
        EventRequest::Write(WriteRequest {
            writes: ids
                .iter()
                .map(|id| (key(*id), SingleAggregateWrite::default()))
                .collect(),
            ..WriteRequest::default()
        })
    }

    #[test]
    fn placement_uses_the_full_u128() {
        let p = Placement::new(3, RoutingRule::AggregateId, false);
        assert_eq!(p.shard_of_id(7), 1);
        assert_eq!(p.shard_of_id(u128::MAX), (u128::MAX % 3) as u32);
        let r = Placement::new(3, RoutingRule::AggregateId, true);
        for id in 0..20u128 {
            let s = r.shard_of_id(id);
            assert!((1..3).contains(&s), "coordinator shard 0 holds no data");
            assert_eq!(s, (id % 2) as u32 + 1);
        }
        let by_org = Placement::new(4, RoutingRule::OrgId, false);
        assert_eq!(by_org.shard_of(&AggregateKey::new(6, 9, 9)), 2);
    }

    #[test]
    fn write_and_delete_routing_errors_carry_num_shards() {
        let p = Placement::new(2, RoutingRule::AggregateId, false);
        assert_eq!(p.route(&write(&[2, 4])), Ok(Route::Shard(0)));
        let e = p.route(&write(&[1, 2])).unwrap_err();
        assert_eq!(e.code(), ErrorCode::ShardRoutingMultipleShards);
        assert!(e.message().contains("\"num_shards\":2"), "{}", e.message());
        let e = p.route(&write(&[])).unwrap_err();
        assert_eq!(e.code(), ErrorCode::ShardRoutingIncompatibleFilters);
        assert!(
            e.message().contains("at least one write"),
            "{}",
            e.message()
        );
        let delete = EventRequest::Delete(DeleteRequest {
            deletes: [(key(1), SingleAggregateDelete::default())].into(),
            ..DeleteRequest::default()
        });
        assert_eq!(p.route(&delete), Ok(Route::Shard(1)));
        let e = p
            .route(&EventRequest::Delete(DeleteRequest::default()))
            .unwrap_err();
        assert!(
            e.message().contains("at least one delete"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn list_shard_ids_at_or_above_n_end_discovery() {
        let p = Placement::new(2, RoutingRule::AggregateId, false);
        let list = |shard_id| {
            EventRequest::ListOrgs(ListOrgsRequest {
                shard_id,
                ..ListOrgsRequest::default()
            })
        };
        assert_eq!(p.route(&list(1)), Ok(Route::Shard(1)));
        for bad in [2, u64::from(u32::MAX) + 5, u64::MAX] {
            let e = p.route(&list(bad)).unwrap_err();
            assert_eq!(e.code(), ErrorCode::ShardRoutingIncompatibleFilters);
            assert!(e.message().contains("\"num_shards\":2"));
        }
    }

    #[test]
    fn watch_needs_the_routing_set_or_a_shard() {
        let p = Placement::new(2, RoutingRule::AggregateId, false);
        let mut w = WatchRequest::default();
        let e = p.watch_shard(&w).unwrap_err();
        assert!(e.message().contains("at least one aggregate"));
        w.aggregates = Some(BTreeSet::new());
        assert!(p.watch_shard(&w).is_err(), "an empty set names no shard");
        w.aggregates = Some([1, 3].into());
        assert_eq!(p.watch_shard(&w), Ok(1));
        w.aggregates = Some([1, 2].into());
        assert_eq!(
            p.watch_shard(&w).unwrap_err().code(),
            ErrorCode::ShardRoutingMultipleShards
        );
        w.shard_id = Some(0);
        assert_eq!(p.watch_shard(&w), Ok(0), "a pinned shard wins");
        w.shard_id = Some(2);
        assert!(p.watch_shard(&w).is_err());
        // Enforced with one shard too.
        let one = Placement::new(1, RoutingRule::OrgId, false);
        let e = one.watch_shard(&WatchRequest::default()).unwrap_err();
        assert!(e.message().contains("organisation"), "{}", e.message());
    }
}
