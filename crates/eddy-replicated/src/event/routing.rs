//! Routing of event-protocol requests (§4.1) on the store's [`Placement`], the one place that
//! computes shards.
//!
//! The store routes every request it is handed (a write or delete to the one shard of its
//! keys, a read to its key's shard, a list to its shard number) and refuses what does not
//! route; the server only routes where the protocol puts routing before other checks:
//!
//! * a watch's shard, before the latency cap and the subscriber cap (and before the
//!   connection turns into a push stream);
//! * a mutation whose client-id or access-level check fails (10003, 10007): a routing
//!   refusal wins over it (§1.9 step 3: a read-only key sending a cross-shard write gets 9001,
//!   not 10007), so [`precedes_identity`] looks for one before the identity error is sent.
//!
//! Every routing error carries `"num_shards":N` and leaves the connection open.

use eddy_codec::event::{EventRequest, ServerError, WatchRequest};
use eddy_event_store::{Placement, Refusal, WatchFilter};
use eddy_wire::event::RequestType;

use super::change::key;
use super::errors::routing_refusal;

/// Where a request runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// On the store, which routes it.
    Store,
    /// A watch on this shard.
    Watch(u32),
    /// Not shard-bound (Identify, handled before routing).
    Connection,
}

/// Routes a request: watches to their shard now, everything else to the store.
pub fn route(placement: &Placement, request: &EventRequest) -> Result<Route, ServerError> {
    match request {
        EventRequest::Watch(w) => placement
            .watch_shard(w.shard_id, &filter(w))
            .map(Route::Watch)
            .map_err(|r| routing_refusal(&r, RequestType::Watch, *placement)),
        EventRequest::Identify(_) => Ok(Route::Connection),
        _ => Ok(Route::Store),
    }
}

/// The routing error of a write or delete, if it has one (an empty map: 9002; keys on several
/// shards: 9001): it is reported instead of a failed connection-level check.
pub fn precedes_identity(placement: &Placement, request: &EventRequest) -> Option<ServerError> {
    let (kind, keys) = match request {
        EventRequest::Write(r) => (RequestType::Write, r.writes.keys().map(key).collect()),
        EventRequest::Delete(r) => (RequestType::Delete, r.deletes.keys().map(key).collect()),
        _ => return None,
    };
    let keys: Vec<_> = keys;
    match placement.shard_of_keys(keys.iter()) {
        Err(r @ (Refusal::EmptyRequest | Refusal::CrossShard { .. })) => {
            Some(routing_refusal(&r, kind, *placement))
        }
        _ => None,
    }
}

/// The store filter of a watch request.
pub fn filter(w: &WatchRequest) -> WatchFilter {
    WatchFilter {
        orgs: w.orgs.as_ref().map(|s| s.iter().copied().collect()),
        aggregate_types: w
            .aggregate_types
            .as_ref()
            .map(|s| s.iter().copied().collect()),
        aggregates: w.aggregates.as_ref().map(|s| s.iter().copied().collect()),
        operations: w
            .operation_types
            .as_ref()
            .map(|s| s.iter().copied().collect()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use eddy_codec::event::{
        AggregateKey, DeleteRequest, ErrorCode, ListOrgsRequest, SingleAggregateDelete,
        SingleAggregateWrite, WatchRequest, WriteRequest,
    };
    use eddy_event_store::RoutingRule;

    use super::*;

    fn write(ids: &[u128]) -> EventRequest {
        EventRequest::Write(WriteRequest {
            writes: ids
                .iter()
                .map(|id| {
                    (
                        AggregateKey::new(1, 2, *id),
                        SingleAggregateWrite::default(),
                    )
                })
                .collect(),
            ..WriteRequest::default()
        })
    }

    #[test]
    fn write_and_delete_routing_errors_carry_num_shards() {
        let p = Placement::new(2, RoutingRule::AggregateId, false);
        assert_eq!(precedes_identity(&p, &write(&[2, 4])), None);
        let e = precedes_identity(&p, &write(&[1, 2])).unwrap();
        assert_eq!(e.code(), ErrorCode::ShardRoutingMultipleShards);
        assert!(e.message().contains("\"num_shards\":2"), "{}", e.message());
        let e = precedes_identity(&p, &write(&[])).unwrap();
        assert_eq!(e.code(), ErrorCode::ShardRoutingIncompatibleFilters);
        assert!(
            e.message().contains("at least one write"),
            "{}",
            e.message()
        );
        let delete = EventRequest::Delete(DeleteRequest {
            deletes: [(AggregateKey::new(1, 2, 1), SingleAggregateDelete::default())].into(),
            ..DeleteRequest::default()
        });
        assert_eq!(precedes_identity(&p, &delete), None);
        let e = precedes_identity(&p, &EventRequest::Delete(DeleteRequest::default())).unwrap();
        assert!(
            e.message().contains("at least one delete"),
            "{}",
            e.message()
        );
        let list = EventRequest::ListOrgs(ListOrgsRequest::default());
        assert_eq!(route(&p, &list), Ok(Route::Store));
        assert_eq!(precedes_identity(&p, &list), None);
    }

    #[test]
    fn watch_routing_errors_name_the_routing_set() {
        let p = Placement::new(2, RoutingRule::AggregateId, false);
        let mut w = WatchRequest::default();
        let e = route(&p, &EventRequest::Watch(w.clone())).unwrap_err();
        assert!(e.message().contains("at least one aggregate"));
        w.aggregates = Some(BTreeSet::new());
        assert!(route(&p, &EventRequest::Watch(w.clone())).is_err());
        w.aggregates = Some([1, 3].into());
        assert_eq!(
            route(&p, &EventRequest::Watch(w.clone())),
            Ok(Route::Watch(1))
        );
        w.aggregates = Some([1, 2].into());
        assert_eq!(
            route(&p, &EventRequest::Watch(w.clone()))
                .unwrap_err()
                .code(),
            ErrorCode::ShardRoutingMultipleShards
        );
        w.shard_id = Some(2);
        let e = route(&p, &EventRequest::Watch(w)).unwrap_err();
        assert_eq!(e.code(), ErrorCode::ShardRoutingIncompatibleFilters);
        assert!(e.message().contains("\"num_shards\":2"));
        let one = Placement::new(1, RoutingRule::OrgId, false);
        let e = route(&one, &EventRequest::Watch(WatchRequest::default())).unwrap_err();
        assert!(e.message().contains("organisation"), "{}", e.message());
    }
}
