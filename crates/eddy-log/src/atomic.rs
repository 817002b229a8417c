//! The one atomic small-file writer: every file that is replaced whole (a partition's `state`,
//! the metadata snapshot, the event store's `META` and index `MANIFEST`, a log's rebuilt
//! index) goes through [`write_atomic`]. Beside it, [`create_dir_durable`]: every directory
//! the stores create (a log's, a partition's, the stores' roots) is made with it, so its entry
//! survives a crash.
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
/// directory fsync). The error names the failing step and its file ([`LogError::NoSpace`]
/// when the device is full); the file is then either the old or the new version.
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
        .map_err(|e| LogError::io_or_no_space(IoOp::Open, &tmp, e))?;
    file.append(&[bytes])
        .map_err(|e| LogError::io_or_no_space(IoOp::Append, &tmp, e))?;
    file.sync().map_err(|e| LogError::io(IoOp::Sync, &tmp, e))?;
    backend
        .rename(&tmp, &path)
        .map_err(|e| LogError::io(IoOp::Rename, &path, e))?;
    backend
        .sync_dir(dir)
        .map_err(|e| LogError::io(IoOp::SyncDir, dir, e))
}

/// Creates `dir` and its missing parents, durably: the parent of every directory it creates
/// is fsynced (a new directory's entry lives in its parent, and only an fsync of the parent
/// makes it survive a crash). Nothing is synced when `dir` exists already.
pub fn create_dir_durable(backend: &dyn StorageBackend, dir: &Path) -> Result<()> {
    // The missing directories, innermost first.
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && !backend.exists(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    backend
        .create_dir_all(dir)
        .map_err(|e| LogError::io(IoOp::CreateDir, dir, e))?;
    for created in missing {
        let parent = created.parent().unwrap_or(Path::new(""));
        backend
            .sync_dir(parent)
            .map_err(|e| LogError::io(IoOp::SyncDir, parent, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::MemBackend;

    #[test]
    fn replaces_the_file_and_survives_a_crash_after_it() {
        let disk = MemBackend::new();
        let dir = Path::new("d");
        create_dir_durable(&disk, dir).unwrap();
        write_atomic(&disk, dir, "f", b"one").unwrap();
        write_atomic(&disk, dir, "f", b"two").unwrap();
        disk.crash();
        assert_eq!(disk.read_file(&dir.join("f")).unwrap(), b"two");
        assert!(disk.read_file(&dir.join("f.tmp")).is_none());
    }

    #[test]
    fn created_directories_survive_a_crash() {
        let disk = MemBackend::new();
        create_dir_durable(&disk, Path::new("a/b/c")).unwrap();
        write_atomic(&disk, Path::new("a/b/c"), "f", b"kept").unwrap();
        disk.crash();
        assert_eq!(disk.read_file(Path::new("a/b/c/f")).unwrap(), b"kept");
        // Existing directories are left alone.
        create_dir_durable(&disk.clone(), Path::new("a/b")).unwrap();
    }

    #[test]
    fn a_plain_create_dir_all_does_not_survive_a_crash() {
        let disk = MemBackend::new();
        disk.create_dir_all(Path::new("a/b")).unwrap();
        write_atomic(&disk, Path::new("a/b"), "f", b"lost").unwrap();
        disk.crash();
        assert!(disk.read_file(Path::new("a/b/f")).is_none());
    }
}
