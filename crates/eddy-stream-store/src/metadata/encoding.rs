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

/// Marks the placement section after a state (see [`encode_state`]).
const PLACEMENT_SECTION: u8 = 1;

/// Encodes a state for a snapshot: the state's serde form, then, when any partition is
/// placed, [`PLACEMENT_SECTION`] and the placement map (a snapshot written before placement
/// existed ends after the state, and decodes with none).
pub fn encode_state(state: &MetadataState) -> Result<Vec<u8>, EncodingError> {
    let mut out =
        bincode::serde::encode_to_vec(state, snapshot_config()).map_err(EncodingError::Encode)?;
    if !state.placement.is_empty() {
        out.push(PLACEMENT_SECTION);
        let placement = bincode::serde::encode_to_vec(&state.placement, snapshot_config())
            .map_err(EncodingError::Encode)?;
        out.extend_from_slice(&placement);
    }
    Ok(out)
}

/// Decodes a snapshot state (all bytes must be consumed).
pub fn decode_state(bytes: &[u8]) -> Result<MetadataState, EncodingError> {
    let (mut state, used): (MetadataState, usize) =
        bincode::serde::decode_from_slice(bytes, snapshot_config())
            .map_err(EncodingError::Decode)?;
    let rest = &bytes[used..];
    if let Some((&PLACEMENT_SECTION, section)) = rest.split_first() {
        let (placement, used): (std::collections::BTreeMap<u64, Vec<u64>>, usize) =
            bincode::serde::decode_from_slice(section, snapshot_config())
                .map_err(EncodingError::Decode)?;
        if used != section.len() {
            return Err(EncodingError::Trailing(section.len() - used));
        }
        state.placement = placement;
    } else if !rest.is_empty() {
        return Err(EncodingError::Trailing(rest.len()));
    }
    Ok(state)
}
