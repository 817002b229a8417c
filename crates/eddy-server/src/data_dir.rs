//! The data directory: creation, the exclusive lock, and every path under it.
//!
//! Layout (all paths derived here, as `PathBuf`):
//!
//! ```text
//! <data_dir>/
//!   eddy.lock        exclusive advisory lock held for the server's lifetime; holds the owner's pid
//!   streams/         the stream store (eddy-stream-store `StreamStore`): metadata/ (log and snapshots of
//!                    streams, topics, users, tokens, groups, offsets) and partitions/
//!   events/          event store shards (eddy-event-store)
//!   dictionary.zstd_dict   optional custom zstd dictionary for the event protocol
//!   api_keys.toml    optional API keys for the event protocol
//! ```
//!
//! Everything the server writes is readable by its own user only: [`restrict_umask`] sets the
//! process umask to `077` before anything is created, so every directory it makes is `0700`
//! and every file `0600` (the metadata log holds password hashes; the logs and segments hold
//! the data), whichever code path creates them (the stores, atomic writes, the lock file, the
//! dictionary, the cluster's Raft directories, the log files under `--log-dir`). A data
//! directory that already exists is left as it is, with a warning when its group or others
//! may enter it.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// The process umask while the server runs: nothing for the group, nothing for others.
pub const UMASK: u32 = 0o077;

/// Sets the process umask to [`UMASK`]: every file and directory created afterwards, by any
/// thread, is accessible to this user only. Process-wide; the server calls it before it
/// creates anything (the command line before the log files, [`crate::Server::bind`] before
/// the data directory).
pub fn restrict_umask() {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(UMASK));
}

/// Name of the lock file inside the data directory.
pub const LOCK_FILE: &str = "eddy.lock";

/// Why the data directory cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataDirError {
    /// The directory could not be created or is not writable.
    #[error("data dir {path} is not usable")]
    Unusable {
        /// The data directory.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: io::Error,
    },
    /// Another process holds the lock.
    #[error("data dir {path} is locked by another eddy process{}", owner.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Locked {
        /// The data directory.
        path: PathBuf,
        /// The pid recorded by the lock holder, when readable.
        owner: Option<u32>,
    },
}

/// A data directory held exclusively by this process. The lock is released on drop.
#[derive(Debug)]
pub struct DataDir {
    root: PathBuf,
    // Held open for the lock's lifetime; the OS releases the lock when it is closed.
    _lock: File,
}

impl DataDir {
    /// Creates `root` if missing and takes its exclusive lock, failing at once if another process
    /// holds it.
    pub fn open(root: &Path) -> Result<Self, DataDirError> {
        let unusable = |source| DataDirError::Unusable {
            path: root.to_path_buf(),
            source,
        };
        let existed = root.is_dir();
        // Created durably: the parent of every directory made is fsynced.
        eddy_log::FsBackend::new(root).map_err(unusable)?;
        if existed {
            warn_if_open_to_others(root);
        }
        let lock_path = root.join(LOCK_FILE);
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(unusable)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let owner = std::fs::read_to_string(&lock_path)
                    .ok()
                    .and_then(|s| s.trim().parse().ok());
                return Err(DataDirError::Locked {
                    path: root.to_path_buf(),
                    owner,
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(unusable(e)),
        }
        // Record our pid for the error message a second server prints. Best effort is not
        // enough here: a failing write means the directory is not writable, which we report.
        lock.set_len(0).map_err(unusable)?;
        writeln!(lock, "{}", std::process::id()).map_err(unusable)?;
        lock.sync_data().map_err(unusable)?;
        // Probe writability of the directory itself (the lock file may pre-exist read-write
        // in a directory that no longer accepts new files).
        let probe = root.join(".write-probe");
        File::create(&probe)
            .and_then(|f| f.sync_all())
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(unusable)?;
        Ok(Self {
            root: root.to_path_buf(),
            _lock: lock,
        })
    }

    /// The data directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The stream store: its metadata log and the partition logs.
    pub fn streams_dir(&self) -> PathBuf {
        self.root.join("streams")
    }

    /// Event store shards.
    pub fn events_dir(&self) -> PathBuf {
        self.root.join("events")
    }

    /// Optional custom zstd dictionary of the event protocol.
    pub fn dictionary_file(&self) -> PathBuf {
        self.root.join("dictionary.zstd_dict")
    }

    /// Optional API keys of the event protocol.
    pub fn api_keys_file(&self) -> PathBuf {
        self.root.join("api_keys.toml")
    }
}

/// Logs a warning when the group or others may read, write or enter `dir`.
fn warn_if_open_to_others(dir: &Path) {
    let Ok(meta) = std::fs::metadata(dir) else {
        return;
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        tracing::warn!(
            data_dir = %dir.display(),
            mode = format!("{mode:o}"),
            "the data directory is accessible to its group or to others (it holds password \
             hashes and every message): run chmod 700 {}",
            dir.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_open_is_refused_and_names_the_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let first = DataDir::open(&dir).unwrap();
        let err = DataDir::open(&dir).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(&dir.display().to_string()), "{msg}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        drop(first);
        DataDir::open(&dir).unwrap();
    }

    #[test]
    fn unusable_path_is_an_error_not_a_panic() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("plain-file");
        std::fs::write(&file, b"x").unwrap();
        let err = DataDir::open(&file.join("sub")).unwrap_err();
        assert!(matches!(err, DataDirError::Unusable { .. }), "{err}");
    }
}
