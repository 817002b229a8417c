//! Placement: which shard holds an aggregate, and the one shard of a request (event protocol
//! §4.1). The store and the server both route through [`Placement`]; nothing else computes a
//! shard.
//!
//! A key's routing id is one of its three ids, picked by the [`RoutingRule`]; its shard is
//! `routing_id mod N`, or `routing_id mod (N − 1) + 1` when shard 0 is reserved as the
//! coordinator. The arithmetic is on the full u128, as clients that choose ids with equal
//! residues (to keep multi-aggregate writes on one shard) expect.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::error::Refusal;
use crate::record::MAX_PARTS;
use crate::types::AggregateKey;
use crate::watch::WatchFilter;

/// Which of the three ids places an aggregate on a shard (`--routing-rule`; immutable once the
/// store is created).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoutingRule {
    /// Shard = `aggregate_id mod N` (the default).
    #[default]
    AggregateId,
    /// Shard = `org_id mod N`.
    OrgId,
    /// Shard = `aggregate_type_id mod N`.
    AggregateTypeId,
}

impl RoutingRule {
    /// The rule's code in the store's `META` file.
    pub(crate) fn code(self) -> u64 {
        match self {
            RoutingRule::AggregateId => 0,
            RoutingRule::OrgId => 1,
            RoutingRule::AggregateTypeId => 2,
        }
    }

    /// The id of `key` this rule routes by.
    pub fn routing_id(self, key: &AggregateKey) -> u128 {
        match self {
            RoutingRule::AggregateId => key.aggregate_id,
            RoutingRule::OrgId => key.org_id,
            RoutingRule::AggregateTypeId => key.aggregate_type_id,
        }
    }

    /// The set of a watch filter this rule routes by.
    fn routing_set(self, filter: &WatchFilter) -> Option<&HashSet<u128>> {
        match self {
            RoutingRule::AggregateId => filter.aggregates.as_ref(),
            RoutingRule::OrgId => filter.orgs.as_ref(),
            RoutingRule::AggregateTypeId => filter.aggregate_types.as_ref(),
        }
    }
}

/// The shard layout of a store: shard count, routing rule, reserved coordinator.
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

    /// Whether shard 0 holds no data.
    pub fn reserves_coordinator(&self) -> bool {
        self.reserve_coordinator
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

    /// The shard that holds `key`.
    pub fn shard_of(&self, key: &AggregateKey) -> u32 {
        self.shard_of_id(self.rule.routing_id(key))
    }

    /// The one shard of a multi-key request (a write's or a delete's aggregates): refused when
    /// it lists none ([`Refusal::EmptyRequest`]), too many, one twice, or keys of different
    /// shards ([`Refusal::CrossShard`]).
    pub fn shard_of_keys<'a>(
        &self,
        keys: impl Iterator<Item = &'a AggregateKey>,
    ) -> Result<u32, Refusal> {
        // Only a request of several keys needs the duplicate check (and its set).
        let mut seen = crate::FastSet::default();
        let mut first = None;
        let mut shard = None;
        for (part, key) in keys.enumerate() {
            if part >= MAX_PARTS {
                return Err(Refusal::Limit {
                    what: "aggregates in one request",
                    value: part as u64 + 1,
                    limit: MAX_PARTS as u64,
                });
            }
            if let Some(first) = first.take() {
                seen.insert(first);
            }
            if part == 0 {
                first = Some(*key);
            } else if !seen.insert(*key) {
                return Err(Refusal::DuplicateKey { part });
            }
            let s = self.shard_of(key);
            if shard.is_some_and(|x| x != s) {
                return Err(Refusal::CrossShard {
                    num_shards: self.num_shards,
                });
            }
            shard = Some(s);
        }
        shard.ok_or(Refusal::EmptyRequest)
    }

    /// A shard named by number (lists, pinned watches): refused at or above `N`.
    pub fn shard(&self, shard: u64) -> Result<u32, Refusal> {
        match u32::try_from(shard) {
            Ok(s) if s < self.num_shards => Ok(s),
            _ => Err(Refusal::NoSuchShard {
                shard,
                num_shards: self.num_shards,
            }),
        }
    }

    /// The shard a watch subscribes to: the pinned one when given, otherwise the one shard of
    /// the filter's set the routing rule shards by, which must be present and non-empty
    /// ([`Refusal::WatchFilterRequired`], enforced with one shard too) and all on one shard
    /// ([`Refusal::CrossShard`]).
    pub fn watch_shard(&self, pinned: Option<u64>, filter: &WatchFilter) -> Result<u32, Refusal> {
        if let Some(shard) = pinned {
            return self.shard(shard);
        }
        let mut ids = self.rule.routing_set(filter).into_iter().flatten();
        let Some(first) = ids.next() else {
            return Err(Refusal::WatchFilterRequired {
                rule: self.rule,
                num_shards: self.num_shards,
            });
        };
        let shard = self.shard_of_id(*first);
        if ids.any(|id| self.shard_of_id(*id) != shard) {
            return Err(Refusal::CrossShard {
                num_shards: self.num_shards,
            });
        }
        Ok(shard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u128) -> AggregateKey {
        AggregateKey::new(1, 2, id)
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
    fn a_request_routes_to_one_shard_or_is_refused() {
        let p = Placement::new(2, RoutingRule::AggregateId, false);
        assert_eq!(p.shard_of_keys([key(2), key(4)].iter()), Ok(0));
        assert_eq!(
            p.shard_of_keys([key(1), key(2)].iter()),
            Err(Refusal::CrossShard { num_shards: 2 })
        );
        assert_eq!(p.shard_of_keys([].iter()), Err(Refusal::EmptyRequest));
        assert_eq!(
            p.shard_of_keys([key(1), key(1)].iter()),
            Err(Refusal::DuplicateKey { part: 1 })
        );
        assert_eq!(p.shard(1), Ok(1));
        for bad in [2, u64::from(u32::MAX) + 5, u64::MAX] {
            assert_eq!(
                p.shard(bad),
                Err(Refusal::NoSuchShard {
                    shard: bad,
                    num_shards: 2
                })
            );
        }
    }

    #[test]
    fn watch_needs_the_routing_set_or_a_shard() {
        let p = Placement::new(2, RoutingRule::AggregateId, false);
        let mut w = WatchFilter::default();
        let required = Refusal::WatchFilterRequired {
            rule: RoutingRule::AggregateId,
            num_shards: 2,
        };
        assert_eq!(p.watch_shard(None, &w), Err(required.clone()));
        w.aggregates = Some(HashSet::new());
        assert_eq!(
            p.watch_shard(None, &w),
            Err(required),
            "an empty set names no shard"
        );
        w.aggregates = Some([1, 3].into());
        assert_eq!(p.watch_shard(None, &w), Ok(1));
        w.aggregates = Some([1, 2].into());
        assert_eq!(
            p.watch_shard(None, &w),
            Err(Refusal::CrossShard { num_shards: 2 })
        );
        assert_eq!(p.watch_shard(Some(0), &w), Ok(0), "a pinned shard wins");
        assert!(p.watch_shard(Some(2), &w).is_err());
        // Enforced with one shard too.
        let one = Placement::new(1, RoutingRule::OrgId, false);
        assert!(matches!(
            one.watch_shard(None, &WatchFilter::default()),
            Err(Refusal::WatchFilterRequired {
                rule: RoutingRule::OrgId,
                ..
            })
        ));
    }

    #[test]
    fn routing_rule_is_spelled_in_snake_case() {
        #[derive(Serialize, Deserialize)]
        struct C {
            rule: RoutingRule,
        }
        for (text, rule) in [
            ("aggregate_id", RoutingRule::AggregateId),
            ("org_id", RoutingRule::OrgId),
            ("aggregate_type_id", RoutingRule::AggregateTypeId),
        ] {
            let c: C = serde_json::from_str(&format!("{{\"rule\":\"{text}\"}}")).unwrap();
            assert_eq!(c.rule, rule);
        }
    }
}
