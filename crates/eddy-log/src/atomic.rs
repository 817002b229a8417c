//! The one atomic small-file writer: every file that is replaced whole (a partition's `state`,
//! the metadata snapshot, the event store's `META` and index `MANIFEST`, a log's rebuilt
//! index) goes through [`write_atomic`].
//!
//! Protocol: write `<name>.tmp` (removing a leftover first), fdatasync it, rename it over
//! `<name>`, fsync the directory. A crash at any point leaves either the old file or the new
//! one under `<name>`, never a mix; a leftover `*.tmp` is harmless (the next write removes it,
//! and log recovery removes the ones in log directories).

use std::io;
use std::path::Path;

use crate::error::{IoOp, LogError, Result};
use crate::file::{OpenMode, StorageBackend};

/// Replaces `dir/name` with `bytes` atomically and durably (temp file, fdatasync, rename,
/// directory fsync). The error names the failing step and its file; the file is then either
/// the old or the new version.
pub fn write_atomic(
    backend: &dyn StorageBackend,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    match backend.remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(LogError::io(IoOp::Remove, tmp, e)),
    }
    let file = backend
        .open(&tmp, OpenMode::CreateNew)
        .map_err(|e| LogError::io(IoOp::Open, &tmp, e))?;
    file.append(&[bytes])
        .map_err(|e| LogError::io(IoOp::Append, &tmp, e))?;
    file.sync().map_err(|e| LogError::io(IoOp::Sync, &tmp, e))?;
    backend
        .rename(&tmp, &path)
        .map_err(|e| LogError::io(IoOp::Rename, &path, e))?;
    backend
        .sync_dir(dir)
        .map_err(|e| LogError::io(IoOp::SyncDir, dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::MemBackend;

    #[test]
    fn replaces_the_file_and_survives_a_crash_after_it() {
        let disk = MemBackend::new();
        let dir = Path::new("d");
        disk.create_dir_all(dir).unwrap();
        write_atomic(&disk, dir, "f", b"one").unwrap();
        write_atomic(&disk, dir, "f", b"two").unwrap();
        disk.crash();
        assert_eq!(disk.read_file(&dir.join("f")).unwrap(), b"two");
        assert!(disk.read_file(&dir.join("f.tmp")).is_none());
    }
}
