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
/// Marks the members section after a state (see [`encode_state`]).
const MEMBERS_SECTION: u8 = 2;

/// Encodes a state for a snapshot: the state's serde form, then the sections of what it
/// holds beyond it, each a tag and a bincode map, in tag order and only when not empty:
/// `PLACEMENT_SECTION` (placed partitions) and `MEMBERS_SECTION` (recorded members). A
/// snapshot written before sections existed ends after the state, and decodes with none.
pub fn encode_state(state: &MetadataState) -> Result<Vec<u8>, EncodingError> {
    let mut out =
        bincode::serde::encode_to_vec(state, snapshot_config()).map_err(EncodingError::Encode)?;
    if !state.placement.is_empty() {
        out.push(PLACEMENT_SECTION);
        let placement = bincode::serde::encode_to_vec(&state.placement, snapshot_config())
            .map_err(EncodingError::Encode)?;
        out.extend_from_slice(&placement);
    }
    if !state.members.is_empty() {
        out.push(MEMBERS_SECTION);
        let members = bincode::serde::encode_to_vec(&state.members, snapshot_config())
            .map_err(EncodingError::Encode)?;
        out.extend_from_slice(&members);
    }
    Ok(out)
}

/// Decodes one section's value, returning it and the bytes after it.
fn decode_section<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> Result<(T, &[u8]), EncodingError> {
    let (value, used) = bincode::serde::decode_from_slice(bytes, snapshot_config())
        .map_err(EncodingError::Decode)?;
    Ok((value, &bytes[used..]))
}

/// Decodes a snapshot state (all bytes must be consumed; sections in tag order, each once).
pub fn decode_state(bytes: &[u8]) -> Result<MetadataState, EncodingError> {
    let (mut state, mut rest): (MetadataState, &[u8]) = decode_section(bytes)?;
    let mut last_tag = 0;
    while let Some((&tag, section)) = rest.split_first() {
        if tag <= last_tag {
            return Err(EncodingError::Trailing(rest.len()));
        }
        last_tag = tag;
        rest = match tag {
            PLACEMENT_SECTION => {
                let (placement, rest) = decode_section(section)?;
                state.placement = placement;
                rest
            }
            MEMBERS_SECTION => {
                let (members, rest) = decode_section(section)?;
                state.members = members;
                rest
            }
            _ => return Err(EncodingError::Trailing(rest.len())),
        };
    }
    Ok(state)
}
