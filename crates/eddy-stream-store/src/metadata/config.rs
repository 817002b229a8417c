//! Limits every metadata operation is checked against.

/// Longest name (stream, topic, user, token, group) accepted, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Largest opaque blob (options block, permissions, hash) accepted, in bytes.
pub const MAX_BLOB_LEN: usize = 100_000;
/// Most partitions a topic may have.
pub const MAX_PARTITIONS_PER_TOPIC: u32 = 1_000_000;
/// Most partitions one operation may create or delete.
pub const MAX_PARTITIONS_PER_OP: u32 = 1_000;
/// Most personal access tokens per user.
pub const MAX_TOKENS_PER_USER: usize = 100;
/// Most members a partition may be placed on.
pub const MAX_REPLICAS: usize = 64;
