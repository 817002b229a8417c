//! The event store's index keys: their layout, builders and parsers. Below the index, the
//! memtable and the aggregate state, which all read them (and nothing of each other's).
//!
//! Index keys (big-endian, so byte order is tuple order; `h` is the XXH3-64 of the ids that
//! follow, which spreads listings uniformly and gives them a stable `u64` cursor):
//!
//! | kind | key | value |
//! |---|---|---|
//! | 1 org | `01 h org` | empty |
//! | 2 aggregate type | `02 h org type` | empty |
//! | 3 aggregate | `03 h org type id` | [`AggState`](crate::state::AggState) (129 bytes) |
//! | 4 version | `04 org type id version` | log sequence number of the batch's record |
//! | 5 client mark | `05 org type id client` | highest client_seq, version that set it |
//! | 6 schema | `06 org type major minor` | type, registered_at, text |

use xxhash_rust::xxh3::xxh3_64;

use crate::types::{AggregateKey, SchemaKey};

pub(crate) const KIND_ORG: u8 = 1;
pub(crate) const KIND_TYPE: u8 = 2;
pub(crate) const KIND_AGG: u8 = 3;
pub(crate) const KIND_VERSION: u8 = 4;
pub(crate) const KIND_MARK: u8 = 5;
pub(crate) const KIND_SCHEMA: u8 = 6;
/// Longest index key.
pub(crate) const MAX_KEY_LEN: usize = 65;

pub(crate) fn org_hash(org: u128) -> u64 {
    xxh3_64(&org.to_be_bytes())
}

pub(crate) fn type_hash(org: u128, ty: u128) -> u64 {
    let mut b = [0u8; 32];
    b[..16].copy_from_slice(&org.to_be_bytes());
    b[16..].copy_from_slice(&ty.to_be_bytes());
    xxh3_64(&b)
}

pub(crate) fn agg_hash(key: &AggregateKey) -> u64 {
    xxh3_64(&key.to_be_bytes())
}

pub(crate) fn key_org(org: u128) -> Vec<u8> {
    let mut k = Vec::with_capacity(25);
    k.push(KIND_ORG);
    k.extend_from_slice(&org_hash(org).to_be_bytes());
    k.extend_from_slice(&org.to_be_bytes());
    k
}

pub(crate) fn key_type(org: u128, ty: u128) -> Vec<u8> {
    let mut k = Vec::with_capacity(41);
    k.push(KIND_TYPE);
    k.extend_from_slice(&type_hash(org, ty).to_be_bytes());
    k.extend_from_slice(&org.to_be_bytes());
    k.extend_from_slice(&ty.to_be_bytes());
    k
}

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn key_agg(key: &AggregateKey) -> Vec<u8> {
    agg_key_bytes(key).to_vec()
}

/// `key_agg` on the stack (the write path's lookups allocate nothing).
pub(crate) fn agg_key_bytes(key: &AggregateKey) -> [u8; 57] {
    let mut k = [0u8; 57];
    k[0] = KIND_AGG;
    k[1..9].copy_from_slice(&agg_hash(key).to_be_bytes());
    k[9..].copy_from_slice(&key.to_be_bytes());
    k
}

pub(crate) fn key_version(key: &AggregateKey, version: u64) -> Vec<u8> {
    version_key_bytes(key, version).to_vec()
}

/// [`key_version`] on the stack.
pub(crate) fn version_key_bytes(key: &AggregateKey, version: u64) -> [u8; 57] {
    let mut k = [0u8; 57];
    k[0] = KIND_VERSION;
    k[1..49].copy_from_slice(&key.to_be_bytes());
    k[49..].copy_from_slice(&version.to_be_bytes());
    k
}

/// A client mark's key (kind 5).
pub(crate) fn mark_key_bytes(key: &AggregateKey, client: u128) -> [u8; 65] {
    let mut k = [0u8; 65];
    k[0] = KIND_MARK;
    k[1..49].copy_from_slice(&key.to_be_bytes());
    k[49..].copy_from_slice(&client.to_be_bytes());
    k
}

pub(crate) fn key_schema(key: &SchemaKey) -> Vec<u8> {
    let mut k = Vec::with_capacity(49);
    k.push(KIND_SCHEMA);
    k.extend_from_slice(&key.org_id.to_be_bytes());
    k.extend_from_slice(&key.aggregate_type_id.to_be_bytes());
    k.extend_from_slice(&key.event_type_major.to_be_bytes());
    k.extend_from_slice(&key.event_type_minor.to_be_bytes());
    k
}

/// True for keys looked up by exact match (they go into the run blooms).
pub(crate) fn is_point_key(key: &[u8]) -> bool {
    matches!(key.first(), Some(&(KIND_AGG | KIND_MARK | KIND_SCHEMA)))
}

/// Bytes of a version key naming its aggregate (kind + 48 id bytes).
pub(crate) const VERSION_PREFIX_LEN: usize = 49;

/// What a key contributes to a run's bloom filter: point keys themselves, version keys their
/// aggregate prefix (so a version scan skips runs without that aggregate), others nothing.
pub(crate) fn bloom_key(key: &[u8]) -> Option<&[u8]> {
    if is_point_key(key) {
        Some(key)
    } else if key.first() == Some(&KIND_VERSION) && key.len() >= VERSION_PREFIX_LEN {
        Some(&key[..VERSION_PREFIX_LEN])
    } else {
        None
    }
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

fn be_u128(b: &[u8]) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    u128::from_be_bytes(a)
}

/// The listing hash of an org, type or aggregate key (bytes 1..9).
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    be_u64(&key[1..9])
}

pub(crate) fn parse_org_key(key: &[u8]) -> Option<u128> {
    (key.len() == 25 && key[0] == KIND_ORG).then(|| be_u128(&key[9..25]))
}

pub(crate) fn parse_type_key(key: &[u8]) -> Option<(u128, u128)> {
    (key.len() == 41 && key[0] == KIND_TYPE).then(|| (be_u128(&key[9..25]), be_u128(&key[25..41])))
}

pub(crate) fn parse_agg_key(key: &[u8]) -> Option<AggregateKey> {
    (key.len() == 57 && key[0] == KIND_AGG).then(|| AggregateKey {
        org_id: be_u128(&key[9..25]),
        aggregate_type_id: be_u128(&key[25..41]),
        aggregate_id: be_u128(&key[41..57]),
    })
}

pub(crate) fn parse_version_key(key: &[u8]) -> Option<u64> {
    (key.len() == 57 && key[0] == KIND_VERSION).then(|| be_u64(&key[49..57]))
}
