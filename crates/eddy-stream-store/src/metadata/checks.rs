//! Shared input checks of metadata operations.

use crate::error::MetadataError;

use super::config::{MAX_BLOB_LEN, MAX_NAME_LEN};

/// A name (stream, topic, user, token, group) must be 1 to [`MAX_NAME_LEN`] bytes.
pub(super) fn check_name(name: &str) -> Result<(), MetadataError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(MetadataError::Limit {
            what: "name length".into(),
            value: name.len() as u64,
            limit: MAX_NAME_LEN as u64,
        });
    }
    Ok(())
}

/// An opaque blob (options, permissions, a hash) must fit [`MAX_BLOB_LEN`] bytes.
pub(super) fn check_blob(what: &'static str, blob: &[u8]) -> Result<(), MetadataError> {
    if blob.len() > MAX_BLOB_LEN {
        return Err(MetadataError::Limit {
            what: what.into(),
            value: blob.len() as u64,
            limit: MAX_BLOB_LEN as u64,
        });
    }
    Ok(())
}
