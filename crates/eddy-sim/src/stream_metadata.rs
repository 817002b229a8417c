//! The metadata half of `--store streams`: the operations clients send to the metadata group
//! and the model the final check replays the agreed log through.
//!
//! Two kinds of operations:
//!
//! * **Contended** ones, on a few fixed ids, so clients race for them: streams `1..=3`
//!   created, topic 1 and consumer groups 1 and 2 created on them, consumer offsets stored
//!   (standalone and group, plain and forward-only). Taken ids and missing parents are refused
//!   alike on every member.
//! * **Lifecycles** on fresh ids: streams and topics created, offsets stored on them, then
//!   deleted (a stream with its topics, groups and offsets); users created with personal
//!   access tokens, then tokens and users deleted. Each deletion names a target no other
//!   operation deletes, so the entry is recognized as its operation.
//!
//! Every operation carries its id: as a creation time, in the low 32 bits of a stored offset,
//! in a token's name, or (a deletion) through the target it alone deletes.

use std::collections::{BTreeMap, BTreeSet};

use eddy_stream_store::{ConsumerKey, MetadataOp, MetadataState, PartitionAddr, TopicConfig};

use crate::rng::SimRng;
use crate::workload::OpId;

/// Streams the contended operations touch (ids `1..=CONTENDED_STREAMS`).
const CONTENDED_STREAMS: u64 = 3;
/// First id of the lifecycle streams, topics and users (far from the contended ids and from
/// the root user).
const LIFECYCLE_BASE: u32 = 100;

/// What a deletion deletes: each is deleted by one operation at most.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Stream(u32),
    Topic(u32, u32),
    User(u32),
    Token(u32, String),
}

/// Chooses metadata operations and recognizes them in the log.
#[derive(Debug, Default)]
pub struct MetadataOps {
    next_id: u32,
    /// Lifecycle streams, topics, users and tokens created and not yet chosen for deletion
    /// (as the clients know them: some creations may not have taken).
    streams: Vec<u32>,
    topics: Vec<(u32, u32)>,
    users: Vec<u32>,
    tokens: Vec<(u32, String)>,
    /// The operation deleting each target.
    deletions: BTreeMap<Target, OpId>,
}

impl MetadataOps {
    /// The operation `id` sends.
    pub fn next(&mut self, id: OpId, rng: &mut SimRng) -> MetadataOp {
        if rng.below(5) < 3 {
            return contended(id, rng);
        }
        match rng.below(10) {
            0 => self.create_stream(id),
            1..=2 => self.create_topic(id),
            3 => self.store_offset(id, rng),
            4 => self.delete_topic(id, rng),
            5 => self.delete_stream(id, rng),
            6 => self.create_user(id),
            7 => self.create_token(id, rng),
            8 => self.delete_token(id, rng),
            _ => self.delete_user(id, rng),
        }
    }

    /// The operation an applied entry belongs to (`None`: not one of the workload's).
    pub fn op_id(&self, op: &MetadataOp) -> Option<OpId> {
        let deleted = |target: Target| self.deletions.get(&target).copied();
        match op {
            MetadataOp::CreateStream { created_at, .. }
            | MetadataOp::CreateTopic { created_at, .. }
            | MetadataOp::CreateConsumerGroup { created_at, .. }
            | MetadataOp::CreateUser { created_at, .. } => Some(*created_at),
            MetadataOp::StoreConsumerOffset { offset, .. } => Some(offset & 0xFFFF_FFFF),
            MetadataOp::CreateToken { name, .. } => name.strip_prefix('k')?.parse().ok(),
            MetadataOp::DeleteStream { id } => deleted(Target::Stream(*id)),
            MetadataOp::DeleteTopic {
                stream_id,
                topic_id,
            } => deleted(Target::Topic(*stream_id, *topic_id)),
            MetadataOp::DeleteUser { id } => deleted(Target::User(*id)),
            MetadataOp::DeleteToken { user_id, name } => {
                deleted(Target::Token(*user_id, name.clone()))
            }
            _ => None,
        }
    }

    fn fresh(&mut self) -> u32 {
        self.next_id += 1;
        LIFECYCLE_BASE + self.next_id
    }

    fn create_stream(&mut self, id: OpId) -> MetadataOp {
        let stream = self.fresh();
        self.streams.push(stream);
        MetadataOp::CreateStream {
            id: stream,
            name: format!("d{stream}"),
            created_at: id,
            options: Vec::new(),
        }
    }

    fn create_topic(&mut self, id: OpId) -> MetadataOp {
        let Some(&stream) = self.streams.last() else {
            return self.create_stream(id);
        };
        let topic = self.fresh();
        self.topics.push((stream, topic));
        topic_op(stream, topic, id)
    }

    fn store_offset(&mut self, id: OpId, rng: &mut SimRng) -> MetadataOp {
        let Some(&(stream_id, topic_id)) = pick(&self.topics, rng) else {
            return self.create_topic(id);
        };
        MetadataOp::StoreConsumerOffset {
            addr: PartitionAddr {
                stream_id,
                topic_id,
                partition_id: 0,
            },
            consumer: ConsumerKey::Consumer(1),
            offset: (rng.below(1000) << 32) | (id & 0xFFFF_FFFF),
            forward_only: false,
        }
    }

    fn delete_topic(&mut self, id: OpId, rng: &mut SimRng) -> MetadataOp {
        let Some((stream_id, topic_id)) = take(&mut self.topics, rng) else {
            return self.create_topic(id);
        };
        self.deletions
            .insert(Target::Topic(stream_id, topic_id), id);
        MetadataOp::DeleteTopic {
            stream_id,
            topic_id,
        }
    }

    fn delete_stream(&mut self, id: OpId, rng: &mut SimRng) -> MetadataOp {
        let Some(stream) = take(&mut self.streams, rng) else {
            return self.create_stream(id);
        };
        // Its topics go with it; a later deletion of one of them would be refused anyway.
        self.topics.retain(|&(s, _)| s != stream);
        self.deletions.insert(Target::Stream(stream), id);
        MetadataOp::DeleteStream { id: stream }
    }

    fn create_user(&mut self, id: OpId) -> MetadataOp {
        let user = self.fresh();
        self.users.push(user);
        MetadataOp::CreateUser {
            id: user,
            username: format!("u{user}"),
            password_hash: format!("h{id}"),
            status: 1,
            permissions: None,
            options: Vec::new(),
            created_at: id,
        }
    }

    fn create_token(&mut self, id: OpId, rng: &mut SimRng) -> MetadataOp {
        let Some(&user_id) = pick(&self.users, rng) else {
            return self.create_user(id);
        };
        let name = format!("k{id}");
        self.tokens.push((user_id, name.clone()));
        MetadataOp::CreateToken {
            user_id,
            name,
            token_hash: format!("t{id}"),
            expiry_at: None,
        }
    }

    fn delete_token(&mut self, id: OpId, rng: &mut SimRng) -> MetadataOp {
        let Some((user_id, name)) = take(&mut self.tokens, rng) else {
            return self.create_token(id, rng);
        };
        self.deletions
            .insert(Target::Token(user_id, name.clone()), id);
        MetadataOp::DeleteToken { user_id, name }
    }

    fn delete_user(&mut self, id: OpId, rng: &mut SimRng) -> MetadataOp {
        let Some(user) = take(&mut self.users, rng) else {
            return self.create_user(id);
        };
        self.tokens.retain(|(u, _)| *u != user);
        self.deletions.insert(Target::User(user), id);
        MetadataOp::DeleteUser { id: user }
    }
}

fn pick<'a, T>(items: &'a [T], rng: &mut SimRng) -> Option<&'a T> {
    if items.is_empty() {
        return None;
    }
    items.get(usize::try_from(rng.below(items.len() as u64)).ok()?)
}

fn take<T>(items: &mut Vec<T>, rng: &mut SimRng) -> Option<T> {
    if items.is_empty() {
        return None;
    }
    let at = usize::try_from(rng.below(items.len() as u64)).ok()?;
    Some(items.swap_remove(at))
}

fn topic_op(stream_id: u32, id: u32, op: OpId) -> MetadataOp {
    MetadataOp::CreateTopic {
        stream_id,
        id,
        name: format!("t{op}"),
        created_at: op,
        partitions: 1,
        config: TopicConfig::default(),
        explicit_options: Vec::new(),
        derived_options: Vec::new(),
    }
}

/// A contended operation carrying `id`: a stream or a topic created on one of a few ids
/// (taken ids are refused), a consumer group created on one of two ids, or a consumer offset
/// stored, plainly or forward-only (refused while its topic does not exist).
pub fn contended(id: OpId, rng: &mut SimRng) -> MetadataOp {
    let stream_id = u32::try_from(rng.range(1, CONTENDED_STREAMS)).expect("a few");
    let member = u32::try_from(rng.range(1, 2)).expect("1 or 2");
    match rng.below(12) {
        0..=2 => MetadataOp::CreateStream {
            id: stream_id,
            name: format!("s{stream_id}-{id}"),
            created_at: id,
            options: Vec::new(),
        },
        3..=4 => topic_op(stream_id, 1, id),
        5 => MetadataOp::CreateConsumerGroup {
            stream_id,
            topic_id: 1,
            id: member,
            name: format!("g{id}"),
            created_at: id,
        },
        _ => MetadataOp::StoreConsumerOffset {
            addr: PartitionAddr {
                stream_id,
                topic_id: 1,
                partition_id: 0,
            },
            // A standalone consumer, or a consumer group (refused while it does not exist).
            consumer: if rng.chance(0.7) {
                ConsumerKey::Consumer(member)
            } else {
                ConsumerKey::Group(member)
            },
            // Random high bits, so forward-only stores are refused now and then.
            offset: (rng.below(1000) << 32) | (id & 0xFFFF_FFFF),
            forward_only: rng.chance(0.5),
        },
    }
}

/// What the applied metadata operations of the workload make.
#[derive(Debug, Default)]
pub struct Model {
    streams: BTreeMap<u32, String>,
    topics: BTreeMap<(u32, u32), String>,
    groups: BTreeMap<(u32, u32, u32), String>,
    offsets: BTreeMap<(PartitionAddr, ConsumerKey), u64>,
    users: BTreeMap<u32, String>,
    tokens: BTreeSet<(u32, String)>,
}

impl Model {
    /// Applies an operation every member applied (a refused one changes nothing).
    pub fn apply(&mut self, op: &MetadataOp) {
        match op {
            MetadataOp::CreateStream { id, name, .. } => {
                self.streams.insert(*id, name.clone());
            }
            MetadataOp::CreateTopic {
                stream_id,
                id,
                name,
                ..
            } => {
                self.topics.insert((*stream_id, *id), name.clone());
            }
            MetadataOp::CreateConsumerGroup {
                stream_id,
                topic_id,
                id,
                name,
                ..
            } => {
                self.groups
                    .insert((*stream_id, *topic_id, *id), name.clone());
            }
            MetadataOp::StoreConsumerOffset {
                addr,
                consumer,
                offset,
                forward_only,
            } => {
                let slot = self.offsets.entry((*addr, *consumer)).or_insert(*offset);
                if !*forward_only || *offset > *slot {
                    *slot = *offset;
                }
            }
            MetadataOp::DeleteStream { id } => {
                self.streams.remove(id);
                self.topics.retain(|(s, _), _| s != id);
                self.groups.retain(|(s, _, _), _| s != id);
                self.offsets.retain(|(a, _), _| a.stream_id != *id);
            }
            MetadataOp::DeleteTopic {
                stream_id,
                topic_id,
            } => {
                let gone = |s: u32, t: u32| s == *stream_id && t == *topic_id;
                self.topics.remove(&(*stream_id, *topic_id));
                self.groups.retain(|(s, t, _), _| !gone(*s, *t));
                self.offsets
                    .retain(|(a, _), _| !gone(a.stream_id, a.topic_id));
            }
            MetadataOp::CreateUser { id, username, .. } => {
                self.users.insert(*id, username.clone());
            }
            MetadataOp::DeleteUser { id } => {
                self.users.remove(id);
                self.tokens.retain(|(u, _)| u != id);
            }
            MetadataOp::CreateToken { user_id, name, .. } => {
                self.tokens.insert((*user_id, name.clone()));
            }
            MetadataOp::DeleteToken { user_id, name } => {
                self.tokens.remove(&(*user_id, name.clone()));
            }
            _ => {}
        }
    }

    /// Consumer groups and offsets the model holds, for the report.
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.groups.len(), self.offsets.len(), self.users.len())
    }

    /// Whether `state` is what the model says (users: the workload's own, not the root).
    pub fn matches(&self, state: &MetadataState) -> Result<(), String> {
        fn same<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
            what: &str,
            held: &BTreeMap<K, V>,
            made: &BTreeMap<K, V>,
        ) -> Result<(), String> {
            if held == made {
                Ok(())
            } else {
                Err(format!("{what} {held:?}, the log makes {made:?}"))
            }
        }
        let streams = state
            .streams
            .iter()
            .map(|(id, s)| (*id, s.name.clone()))
            .collect();
        same("streams", &streams, &self.streams)?;
        let topics = state
            .streams
            .iter()
            .flat_map(|(sid, s)| {
                s.topics
                    .iter()
                    .map(|(tid, t)| ((*sid, *tid), t.name.clone()))
            })
            .collect();
        same("topics", &topics, &self.topics)?;
        let groups = state
            .streams
            .iter()
            .flat_map(|(sid, s)| {
                s.topics.iter().flat_map(move |(tid, t)| {
                    t.groups
                        .iter()
                        .map(move |(gid, g)| ((*sid, *tid, *gid), g.name.clone()))
                })
            })
            .collect();
        same("consumer groups", &groups, &self.groups)?;
        let offsets = state
            .partitions()
            .flat_map(|(addr, p, _)| p.offsets.iter().map(move |(c, o)| ((addr, *c), *o)))
            .collect();
        same("consumer offsets", &offsets, &self.offsets)?;
        let users = state
            .users
            .iter()
            .filter(|(id, _)| **id >= LIFECYCLE_BASE)
            .map(|(id, u)| (*id, u.username.clone()))
            .collect();
        same("users", &users, &self.users)?;
        let tokens: BTreeSet<(u32, String)> = state
            .users
            .iter()
            .filter(|(id, _)| **id >= LIFECYCLE_BASE)
            .flat_map(|(id, u)| u.tokens.keys().map(move |name| (*id, name.clone())))
            .collect();
        if tokens != self.tokens {
            return Err(format!(
                "tokens {tokens:?}, the log makes {:?}",
                self.tokens
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(ops: &[MetadataOp]) -> (MetadataState, Model) {
        let mut state = MetadataState::default();
        let mut model = Model::default();
        for op in ops {
            if state.apply(op).is_ok() {
                model.apply(op);
            }
        }
        (state, model)
    }

    #[test]
    fn the_model_follows_forward_only_stores_and_tells_a_differing_state() {
        let addr = PartitionAddr {
            stream_id: 1,
            topic_id: 1,
            partition_id: 0,
        };
        let store = |offset, forward_only| MetadataOp::StoreConsumerOffset {
            addr,
            consumer: ConsumerKey::Consumer(1),
            offset,
            forward_only,
        };
        let (state, mut model) = applied(&[
            contended(1, &mut SimRng::new(1)),
            MetadataOp::CreateStream {
                id: 1,
                name: "s".into(),
                created_at: 2,
                options: Vec::new(),
            },
            topic_op(1, 1, 3),
            store(10, false),
            store(5, true),
            store(7, false),
        ]);
        assert_eq!(model.offsets[&(addr, ConsumerKey::Consumer(1))], 7);
        model.matches(&state).unwrap();
        model.offsets.insert((addr, ConsumerKey::Consumer(1)), 10);
        assert!(model
            .matches(&state)
            .unwrap_err()
            .contains("consumer offsets"));
    }

    #[test]
    fn lifecycles_create_and_delete_and_every_operation_is_recognized() {
        let mut ops = MetadataOps::default();
        let mut rng = SimRng::new(7);
        let sent: Vec<(OpId, MetadataOp)> =
            (1..=2000).map(|id| (id, ops.next(id, &mut rng))).collect();
        let mut kinds = BTreeSet::new();
        for (id, op) in &sent {
            assert_eq!(ops.op_id(op), Some(*id), "{op:?}");
            kinds.insert(format!("{:?}", std::mem::discriminant(op)));
        }
        // Creations and deletions of streams, topics, users and tokens, groups and offsets.
        assert_eq!(kinds.len(), 10, "{kinds:?}");
        let mut state = MetadataState::default();
        let mut model = Model::default();
        let mut deleted = BTreeMap::new();
        for (_, op) in &sent {
            if state.apply(op).is_ok() {
                model.apply(op);
                if let MetadataOp::DeleteStream { .. }
                | MetadataOp::DeleteTopic { .. }
                | MetadataOp::DeleteUser { .. }
                | MetadataOp::DeleteToken { .. } = op
                {
                    *deleted
                        .entry(format!("{:?}", std::mem::discriminant(op)))
                        .or_insert(0) += 1;
                }
            }
        }
        model.matches(&state).unwrap();
        // Most deletions find their target (some lose a race with their parent's deletion).
        assert_eq!(deleted.len(), 4, "{deleted:?}");
        assert!(deleted.values().all(|n| *n > 10), "{deleted:?}");
    }

    #[test]
    fn deleting_a_stream_takes_its_topics_groups_and_offsets_and_a_user_its_tokens() {
        let addr = PartitionAddr {
            stream_id: 101,
            topic_id: 102,
            partition_id: 0,
        };
        let (state, model) = applied(&[
            MetadataOp::CreateStream {
                id: 101,
                name: "d".into(),
                created_at: 1,
                options: Vec::new(),
            },
            topic_op(101, 102, 2),
            MetadataOp::CreateConsumerGroup {
                stream_id: 101,
                topic_id: 102,
                id: 1,
                name: "g".into(),
                created_at: 3,
            },
            MetadataOp::StoreConsumerOffset {
                addr,
                consumer: ConsumerKey::Group(1),
                offset: 4,
                forward_only: false,
            },
            MetadataOp::CreateUser {
                id: 103,
                username: "u".into(),
                password_hash: "h".into(),
                status: 1,
                permissions: None,
                options: Vec::new(),
                created_at: 5,
            },
            MetadataOp::CreateToken {
                user_id: 103,
                name: "k6".into(),
                token_hash: "t".into(),
                expiry_at: None,
            },
        ]);
        model.matches(&state).unwrap();
        assert_eq!(model.counts(), (1, 1, 1));
        let (state, model) = {
            let mut state = state;
            let mut model = model;
            for op in [
                MetadataOp::DeleteStream { id: 101 },
                MetadataOp::DeleteUser { id: 103 },
            ] {
                state.apply(&op).unwrap();
                model.apply(&op);
            }
            (state, model)
        };
        model.matches(&state).unwrap();
        assert_eq!(model.counts(), (0, 0, 0));
        assert!(model.tokens.is_empty() && model.streams.is_empty() && model.topics.is_empty());
    }
}
