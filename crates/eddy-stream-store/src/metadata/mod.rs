//! Metadata: streams, topics, partitions, options, users, personal access tokens, consumer
//! groups and consumer offsets, as a deterministic state machine over ordered operations.
//!
//! [`MetadataOp`] is the serialisable operation (serde + bincode, fixed-width little-endian);
//! [`MetadataState::apply`] validates and applies one, returning the storage [`Effect`]s it
//! implies (partitions to create, delete or purge). Apply is deterministic: it reads nothing
//! but the state and the operation (every id and timestamp is in the operation, except the
//! internal partition uids, which come from a counter in the state), and every map is a
//! `BTreeMap`, so every replica applying the same operations in the same order reaches the same
//! state and rejects the same operations.
//!
//! Option blocks, permissions and credential hashes are stored as opaque bytes or strings: their
//! encodings belong to the codec and auth layers. The storage-relevant topic options are kept
//! resolved in [`TopicConfig`].
//!
//! One module per entity applies its operations ([`MetadataState::apply`] routes each one);
//! `records` holds what the state stores, `op` the operation, `encoding` their bincode forms.

mod checks;
mod config;
mod consumer_groups;
mod encoding;
mod offsets;
mod op;
mod records;
mod state;
mod streams;
mod topics;
mod users;

pub use config::{
    MAX_BLOB_LEN, MAX_NAME_LEN, MAX_PARTITIONS_PER_OP, MAX_PARTITIONS_PER_TOPIC, MAX_REPLICAS,
    MAX_TOKENS_PER_USER,
};
pub use encoding::{
    decode_op, decode_state, encode_op, encode_state, MAX_OP_BYTES, MAX_SNAPSHOT_BYTES,
};
pub use op::MetadataOp;
pub use records::{
    ConsumerGroupRecord, ConsumerKey, Effect, PartitionRecord, StreamRecord, TokenRecord,
    TopicConfig, TopicRecord, UserRecord,
};
pub use state::MetadataState;

#[cfg(test)]
mod tests;
