//! The bincode encodings of operations (metadata log records) and of the state (snapshots):
//! fixed-width little-endian integers, sizes capped before allocation.

use crate::error::EncodingError;

use super::op::MetadataOp;
use super::state::MetadataState;

/// Largest encoded operation accepted when decoding (checked before allocating).
pub const MAX_OP_BYTES: usize = 4 * 1024 * 1024;
/// Largest snapshot accepted when decoding.
pub const MAX_SNAPSHOT_BYTES: usize = 1024 * 1024 * 1024;

fn op_config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<MAX_OP_BYTES>()
}

fn snapshot_config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<MAX_SNAPSHOT_BYTES>()
}

/// Encodes an operation.
pub fn encode_op(op: &MetadataOp) -> Result<Vec<u8>, EncodingError> {
    bincode::serde::encode_to_vec(op, op_config()).map_err(EncodingError::Encode)
}

/// Decodes an operation (all bytes must be consumed).
pub fn decode_op(bytes: &[u8]) -> Result<MetadataOp, EncodingError> {
    let (op, used) =
        bincode::serde::decode_from_slice(bytes, op_config()).map_err(EncodingError::Decode)?;
    if used != bytes.len() {
        return Err(EncodingError::Trailing(bytes.len() - used));
    }
    Ok(op)
}

/// Encodes a state for a snapshot.
pub fn encode_state(state: &MetadataState) -> Result<Vec<u8>, EncodingError> {
    bincode::serde::encode_to_vec(state, snapshot_config()).map_err(EncodingError::Encode)
}

/// Decodes a snapshot state (all bytes must be consumed).
pub fn decode_state(bytes: &[u8]) -> Result<MetadataState, EncodingError> {
    let (state, used) = bincode::serde::decode_from_slice(bytes, snapshot_config())
        .map_err(EncodingError::Decode)?;
    if used != bytes.len() {
        return Err(EncodingError::Trailing(bytes.len() - used));
    }
    Ok(state)
}
