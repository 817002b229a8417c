//! The small synchronous file layer everything else is written against.
//!
//! [`StorageFile`] is one append-only file: positional reads, appends at the end, length,
//! truncation and `fdatasync`. [`StorageBackend`] is a directory tree of such files with the few
//! namespace operations the logs need (create, list, remove, atomic rename, directory sync).
//! Paths given to a backend are relative to its root.
//!
//! Two backends ship with the crate:
//!
//! * [`FsBackend`]: real files under a root directory. Appends use `writev` at the data's end
//!   (which the handle tracks, since preallocated zeros may follow it), reads use `pread`,
//!   sync uses `fdatasync` (`File::sync_data`), directory sync uses `fsync` on the directory.
//! * [`MemBackend`]: files in memory that remember which bytes were synced, so a test can
//!   simulate a power cut ([`MemBackend::crash`], [`MemBackend::crash_with`]): unsynced bytes are
//!   dropped, or torn at any byte, or replaced by whatever the test wants (zeros, garbage). It
//!   can also inject faults: a byte capacity that makes appends fail with `ENOSPC` after a
//!   partial write ([`MemBackend::set_capacity`]), failing syncs ([`MemBackend::fail_syncs`]),
//!   and any error at any storage call ([`MemBackend::inject_faults`]: `ENOSPC`, `EIO`,
//!   `EMFILE`, ... chosen per call and path).
//!
//! Crash model of [`MemBackend`] (documented because tests rely on it): appended bytes are
//! durable only once the file's `sync` returns; truncation is durable at once; directory
//! entries (a created, removed or renamed file, a created directory) are durable only once
//! their directory's `sync_dir` returns, so a crash undoes every namespace change its directory
//! was not synced after, as `fsync` of the directory is what makes them durable on a real file
//! system. The storage layer therefore syncs the parent of every directory it creates
//! ([`create_dir_durable`](crate::create_dir_durable)) and the directory of every file it
//! creates or renames. Preallocated space ([`StorageFile::preallocate`]) is not part of a
//! file's length, but once a sync made it durable a crash leaves it as zeros after what
//! survives of the data, as a real file keeps its allocated size.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs;
use std::io::{self, IoSlice, Seek, SeekFrom, Write};
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::sync::lock;

/// One append-only file.
///
/// Implementations must allow concurrent `read_at` calls from many threads while one thread
/// appends; the storage layer never appends to one file from two threads at once.
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// Fills `buf` with the bytes at `offset`. Fails with [`io::ErrorKind::UnexpectedEof`] when
    /// the file is shorter than `offset + buf.len()`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Appends `parts`, in order, at the end of the file. On error some prefix of the bytes may
    /// have been written; the caller truncates back.
    fn append(&self, parts: &[&[u8]]) -> io::Result<()>;
    /// The current length in bytes (including unsynced appends).
    fn len(&self) -> io::Result<u64>;
    /// True when the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Cuts the file to `len` bytes (never used to grow it).
    fn truncate(&self, len: u64) -> io::Result<()>;
    /// Makes every byte appended so far durable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
    /// Makes sure at least `need` bytes past the end are allocated and written as zeros,
    /// extending by `chunk` bytes past the end when it must extend. Appends that land in that
    /// space change no file size, so their `fdatasync` writes data only, without a journal
    /// commit for the size. [`len`](Self::len) stays the end of the appended bytes; past it,
    /// after a crash or a reopen, the file reads as zeros, which recovery cuts away.
    /// Best effort: on error nothing appended is affected. The default does nothing.
    fn preallocate(&self, need: u64, chunk: u64) -> io::Result<()> {
        let _ = (need, chunk);
        Ok(())
    }
    /// Gives back the preallocated space past the end, durably (the new length is synced),
    /// so the file ends exactly where its data ends. The default does nothing.
    fn trim_preallocated(&self) -> io::Result<()> {
        Ok(())
    }
}

/// How [`StorageBackend::open`] treats a missing or existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Create a new file; fail with [`io::ErrorKind::AlreadyExists`] if it exists.
    CreateNew,
    /// Open an existing file; fail with [`io::ErrorKind::NotFound`] if it does not exist.
    Existing,
    /// Open the file, creating it empty if missing.
    CreateOrOpen,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DirEntry {
    /// The entry's file name.
    pub name: String,
    /// True for a directory.
    pub is_dir: bool,
}

/// A tree of [`StorageFile`]s.
pub trait StorageBackend: Send + Sync + fmt::Debug {
    /// Opens (or creates) a file.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>>;
    /// Lists a directory (names only, unsorted). A missing directory is `NotFound`.
    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes a directory and everything under it.
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creations, removals, renames) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// True when a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> bool;
}

// ------------------------------------------------------------------------------------------------
// Real files.

/// Real files under a root directory.
#[derive(Debug, Clone)]
pub struct FsBackend {
    root: PathBuf,
}

impl FsBackend {
    /// A backend rooted at `root`. A missing root is created, durably: the parent of every
    /// directory this creates is fsynced.
    pub fn new(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        let missing: Vec<&Path> = root
            .ancestors()
            .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
            .collect();
        fs::create_dir_all(&root)?;
        for dir in missing {
            let parent = match dir.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            fs::File::open(parent)?.sync_all()?;
        }
        Ok(FsBackend { root })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn full(&self, path: &Path) -> PathBuf {
        self.root.join(path)
    }
}

/// A real file opened for reading and appending.
#[derive(Debug)]
pub struct FsFile {
    file: fs::File,
    /// Where the appended bytes end (the next append's position).
    len: AtomicU64,
    /// Where the file ends: `len` plus preallocated zeros.
    allocated: AtomicU64,
}

/// Zeros written by [`FsFile::preallocate`], a piece at a time.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// At most this many slices are handed to one `writev` call (Linux `IOV_MAX` is 1024).
const MAX_IOVECS: usize = 1024;

impl StorageFile for FsFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn append(&self, parts: &[&[u8]]) -> io::Result<()> {
        // One appender at a time (the trait's contract): the cursor is placed at the data's
        // end, which preallocated zeros may follow, and `len` moves with every byte written
        // (so a failed append leaves it at what did reach the file, for the caller to cut).
        let mut at = self.len.load(Ordering::Acquire);
        (&self.file).seek(SeekFrom::Start(at))?;
        let result = (|| {
            for chunk in parts.chunks(MAX_IOVECS) {
                let mut slices: Vec<IoSlice<'_>> = chunk.iter().map(|p| IoSlice::new(p)).collect();
                let mut slices: &mut [IoSlice<'_>] = &mut slices;
                while !slices.is_empty() {
                    let written = (&self.file).write_vectored(slices)?;
                    if written == 0 {
                        if slices.iter().all(|s| s.is_empty()) {
                            break;
                        }
                        return Err(io::Error::from(io::ErrorKind::WriteZero));
                    }
                    at += written as u64;
                    IoSlice::advance_slices(&mut slices, written);
                }
            }
            Ok(())
        })();
        self.len.store(at, Ordering::Release);
        self.allocated.fetch_max(at, Ordering::AcqRel);
        result
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.len.load(Ordering::Acquire))
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        self.len.store(len, Ordering::Release);
        self.allocated.store(len, Ordering::Release);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn preallocate(&self, need: u64, chunk: u64) -> io::Result<()> {
        let len = self.len.load(Ordering::Acquire);
        let mut at = self.allocated.load(Ordering::Acquire);
        if at >= len + need {
            return Ok(());
        }
        let end = len + need.max(chunk);
        while at < end {
            let n = usize::try_from(end - at).map_or(ZEROS.len(), |n| n.min(ZEROS.len()));
            if let Err(e) = self.file.write_all_at(&ZEROS[..n], at) {
                // Some zeros may be there: harmless, the next append writes over them.
                self.allocated.store(at, Ordering::Release);
                return Err(e);
            }
            at += n as u64;
        }
        self.allocated.store(end, Ordering::Release);
        Ok(())
    }

    fn trim_preallocated(&self) -> io::Result<()> {
        let len = self.len.load(Ordering::Acquire);
        if self.allocated.load(Ordering::Acquire) <= len {
            return Ok(());
        }
        self.file.set_len(len)?;
        // The shorter length must be durable before anything relies on the file ending here.
        self.file.sync_all()?;
        self.allocated.store(len, Ordering::Release);
        Ok(())
    }
}

impl StorageBackend for FsBackend {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>> {
        let mut options = fs::OpenOptions::new();
        options.read(true).write(true);
        match mode {
            OpenMode::CreateNew => options.create_new(true),
            OpenMode::Existing => &mut options,
            OpenMode::CreateOrOpen => options.create(true),
        };
        let file = options.open(self.full(path))?;
        let len = file.metadata()?.len();
        Ok(Arc::new(FsFile {
            file,
            len: AtomicU64::new(len),
            allocated: AtomicU64::new(len),
        }))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(self.full(dir))? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                // Names we did not write (not UTF-8) are none of our business.
                continue;
            };
            out.push(DirEntry {
                name,
                is_dir: entry.file_type()?.is_dir(),
            });
        }
        Ok(out)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(self.full(dir))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(self.full(path))
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::remove_dir_all(self.full(dir))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(self.full(from), self.full(to))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        fs::File::open(self.full(dir))?.sync_all()
    }

    fn exists(&self, path: &Path) -> bool {
        self.full(path).exists()
    }
}

// ------------------------------------------------------------------------------------------------
// In-memory files with crash simulation and fault injection.

/// A storage call of [`MemBackend`], as its fault injector sees it
/// ([`MemBackend::inject_faults`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FsCall {
    /// [`StorageBackend::open`] of an existing file ([`OpenMode::Existing`]).
    Open,
    /// [`StorageBackend::open`] that may create the file ([`OpenMode::CreateNew`],
    /// [`OpenMode::CreateOrOpen`]).
    Create,
    /// [`StorageFile::read_at`].
    Read,
    /// [`StorageFile::append`] (an injected error writes nothing).
    Append,
    /// [`StorageFile::len`].
    Len,
    /// [`StorageFile::truncate`].
    Truncate,
    /// [`StorageFile::sync`].
    Sync,
    /// [`StorageBackend::list`].
    List,
    /// [`StorageBackend::create_dir_all`].
    CreateDir,
    /// [`StorageBackend::remove_file`] and [`StorageBackend::remove_dir_all`].
    Remove,
    /// [`StorageBackend::rename`] (the path is the target).
    Rename,
    /// [`StorageBackend::sync_dir`].
    SyncDir,
}

/// The operating-system errors fault-injection tests use most, built as the kernel reports
/// them (Linux `errno` values), so they classify exactly like real ones
/// (`ENOSPC` is [`io::ErrorKind::StorageFull`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Errno {
    /// `ENOSPC`: no space left on the device.
    NoSpace,
    /// `EIO`: an I/O error of the device.
    Io,
    /// `EMFILE`: the process has too many open files.
    TooManyFiles,
}

impl Errno {
    /// The error as the operating system reports it.
    pub fn error(self) -> io::Error {
        io::Error::from_raw_os_error(match self {
            Errno::NoSpace => 28,
            Errno::Io => 5,
            Errno::TooManyFiles => 24,
        })
    }
}

/// Decides, before each storage call, whether it fails (and with what).
type Injector = Arc<dyn Fn(FsCall, &Path) -> Option<io::Error> + Send + Sync>;

/// In-memory files that can simulate a crash and inject faults. Cheap to clone (shared state).
///
/// A clone belongs to the "process" that made it: after [`MemBackend::crash`], the
/// [`StorageBackend`] methods of clones made before the crash fail (as would the system calls
/// of a killed process), so a writer thread of the dead store cannot touch the recovered
/// files. Open the store again with a fresh clone. The test helpers ([`MemBackend::crash`],
/// [`MemBackend::read_file`], ...) work on any clone.
///
/// Crash model: a file's bytes survive a crash up to its last [`StorageFile::sync`]
/// (truncation is durable at once); a directory's entries (files and directories created,
/// removed or renamed in it) survive as they were at its last [`StorageBackend::sync_dir`]. So
/// a file created and synced in a directory that was not synced afterwards is gone after the
/// crash, a rename not followed by a directory sync is undone, and a directory whose own entry
/// was never synced in its parent vanishes with everything in it.
#[derive(Debug, Default)]
pub struct MemBackend {
    shared: Arc<MemShared>,
    epoch: u64,
}

impl Clone for MemBackend {
    fn clone(&self) -> Self {
        MemBackend {
            shared: Arc::clone(&self.shared),
            epoch: self.shared.epoch.load(Ordering::Acquire),
        }
    }
}

#[derive(Debug, Default)]
struct MemShared {
    tree: Mutex<MemTree>,
    /// Incremented by every simulated crash; handles from an older epoch refuse all calls, as
    /// the file descriptors of a killed process would.
    epoch: AtomicU64,
    faults: Mutex<Faults>,
}

/// The id of the root directory in [`MemTree::durable`].
const ROOT_DIR: u64 = 0;

/// A directory entry as it was when its directory was last synced.
#[derive(Debug, Clone)]
enum DurableEntry {
    File(Arc<MemFileData>),
    Dir(u64),
}

#[derive(Debug, Default)]
struct MemTree {
    files: BTreeMap<PathBuf, Arc<MemFileData>>,
    /// Every directory but the root, with its id (a directory made again after a removal is
    /// a new directory with a new id, as it would be a new inode).
    dirs: BTreeMap<PathBuf, u64>,
    /// The last directory id handed out.
    last_dir: u64,
    /// Per directory id: its entries as of its last `sync_dir`, which is what a crash leaves.
    durable: HashMap<u64, BTreeMap<String, DurableEntry>>,
}

impl MemTree {
    fn dir_id(&self, dir: &Path) -> Option<u64> {
        if dir.as_os_str().is_empty() {
            Some(ROOT_DIR)
        } else {
            self.dirs.get(dir).copied()
        }
    }

    /// The current entries of `dir` (which exists).
    fn entries(&self, dir: &Path) -> BTreeMap<String, DurableEntry> {
        fn under<'a, V>(
            map: &'a BTreeMap<PathBuf, V>,
            dir: &'a Path,
        ) -> impl Iterator<Item = (&'a PathBuf, &'a V)> + 'a {
            // Paths order by component, so everything under `dir` follows it contiguously.
            map.range::<Path, _>((Bound::Excluded(dir), Bound::Unbounded))
                .take_while(move |(p, _)| p.starts_with(dir))
        }
        let name_in_dir = |p: &Path| -> Option<String> {
            if p.parent().unwrap_or(Path::new("")) == dir {
                p.file_name().and_then(|n| n.to_str()).map(str::to_owned)
            } else {
                None
            }
        };
        let mut out = BTreeMap::new();
        for (path, data) in under(&self.files, dir) {
            if let Some(name) = name_in_dir(path) {
                out.insert(name, DurableEntry::File(Arc::clone(data)));
            }
        }
        for (path, id) in under(&self.dirs, dir) {
            if let Some(name) = name_in_dir(path) {
                out.insert(name, DurableEntry::Dir(*id));
            }
        }
        out
    }

    /// Makes the entry at `path` (a file or directory that exists) durable in its parent.
    fn make_entry_durable(&mut self, path: &Path) {
        let parent = path.parent().unwrap_or(Path::new(""));
        let (Some(parent_id), Some(name)) = (
            self.dir_id(parent),
            path.file_name().and_then(|n| n.to_str()),
        ) else {
            return;
        };
        let entry = match (self.files.get(path), self.dirs.get(path)) {
            (Some(data), _) => DurableEntry::File(Arc::clone(data)),
            (None, Some(id)) => DurableEntry::Dir(*id),
            (None, None) => return,
        };
        self.durable
            .entry(parent_id)
            .or_default()
            .insert(name.to_owned(), entry);
    }
}

#[derive(Default)]
struct Faults {
    /// Total bytes all files may hold; appends beyond it write what fits and fail with ENOSPC.
    capacity: Option<u64>,
    /// This many upcoming syncs fail with EIO.
    failing_syncs: u64,
    /// Asked before every storage call (see [`MemBackend::inject_faults`]).
    injector: Option<Injector>,
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults")
            .field("capacity", &self.capacity)
            .field("failing_syncs", &self.failing_syncs)
            .field("injector", &self.injector.is_some())
            .finish()
    }
}

#[derive(Debug, Default)]
struct MemFileData {
    state: Mutex<MemFileState>,
}

#[derive(Debug, Default, Clone)]
struct MemFileState {
    data: Vec<u8>,
    /// `data[..synced]` is what survives a crash.
    synced: usize,
    /// The file's length with its preallocated zeros (at least `data.len()` when set).
    allocated: usize,
    /// The length a crash leaves at least, as zeros past what survives of `data`: the
    /// preallocation the last sync made durable.
    durable_allocated: usize,
}

impl MemFileState {
    /// The bytes the file takes (data plus preallocated zeros).
    fn footprint(&self) -> usize {
        self.data.len().max(self.allocated)
    }
}

/// A handle on one in-memory file.
#[derive(Debug)]
pub struct MemFile {
    data: Arc<MemFileData>,
    epoch: u64,
    backend: Arc<MemShared>,
    path: PathBuf,
}

fn crashed() -> io::Error {
    io::Error::other("simulated crash: this handle belongs to a killed process")
}

impl MemFile {
    fn check(&self, call: FsCall) -> io::Result<()> {
        if self.backend.epoch.load(Ordering::Acquire) != self.epoch {
            return Err(crashed());
        }
        self.backend.injected(call, &self.path)
    }

    /// The path of this file inside its backend.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl StorageFile for MemFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check(FsCall::Read)?;
        let state = lock(&self.data.state);
        let start =
            usize::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        let end = start
            .checked_add(buf.len())
            .filter(|end| *end <= state.data.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(&state.data[start..end]);
        Ok(())
    }

    fn append(&self, parts: &[&[u8]]) -> io::Result<()> {
        self.check(FsCall::Append)?;
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let room = self.backend.room();
        let mut state = lock(&self.data.state);
        // Preallocated space is already counted against the capacity.
        let inside = state.allocated.saturating_sub(state.data.len());
        let allowed = room.map_or(total, |room| {
            total.min(
                usize::try_from(room)
                    .unwrap_or(usize::MAX)
                    .saturating_add(inside),
            )
        });
        let mut left = allowed;
        for part in parts {
            let take = part.len().min(left);
            state.data.extend_from_slice(&part[..take]);
            left -= take;
        }
        if allowed < total {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "simulated ENOSPC: backend capacity reached",
            ));
        }
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        self.check(FsCall::Len)?;
        Ok(lock(&self.data.state).data.len() as u64)
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.check(FsCall::Truncate)?;
        let mut state = lock(&self.data.state);
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len < state.data.len() {
            state.data.truncate(len);
        }
        state.synced = state.synced.min(state.data.len());
        state.allocated = state.data.len();
        state.durable_allocated = state.durable_allocated.min(state.data.len());
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        self.check(FsCall::Sync)?;
        {
            let mut faults = lock(&self.backend.faults);
            if faults.failing_syncs > 0 {
                faults.failing_syncs -= 1;
                return Err(io::Error::other("simulated EIO on fdatasync"));
            }
        }
        let mut state = lock(&self.data.state);
        state.synced = state.data.len();
        state.durable_allocated = state.footprint();
        Ok(())
    }

    fn preallocate(&self, need: u64, chunk: u64) -> io::Result<()> {
        self.check(FsCall::Append)?;
        let room = self.backend.room();
        let mut state = lock(&self.data.state);
        let len = state.data.len();
        let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        if state.footprint() >= len.saturating_add(to_usize(need)) {
            return Ok(());
        }
        let end = len.saturating_add(to_usize(need.max(chunk)));
        let grow = end - state.footprint();
        if room.is_some_and(|room| to_usize(room) < grow) {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "simulated ENOSPC: backend capacity reached",
            ));
        }
        state.allocated = end;
        Ok(())
    }

    fn trim_preallocated(&self) -> io::Result<()> {
        self.check(FsCall::Truncate)?;
        let mut state = lock(&self.data.state);
        state.allocated = state.data.len();
        state.synced = state.data.len();
        state.durable_allocated = state.data.len();
        Ok(())
    }
}

impl MemShared {
    /// Remaining capacity, `None` when unlimited.
    fn room(&self) -> Option<u64> {
        let capacity = lock(&self.faults).capacity?;
        let used: u64 = lock(&self.tree)
            .files
            .values()
            .map(|f| lock(&f.state).footprint() as u64)
            .sum();
        Some(capacity.saturating_sub(used))
    }

    /// The injected failure of `call` on `path`, if any.
    fn injected(&self, call: FsCall, path: &Path) -> io::Result<()> {
        let injector = lock(&self.faults).injector.clone();
        match injector.and_then(|decide| decide(call, path)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl MemBackend {
    /// An empty in-memory tree.
    pub fn new() -> Self {
        MemBackend::default()
    }

    /// Limits the total bytes all files may hold. An append past the limit writes what fits,
    /// then fails with [`io::ErrorKind::StorageFull`] (like a real `ENOSPC` after a short
    /// write). `None` removes the limit.
    pub fn set_capacity(&self, capacity: Option<u64>) {
        lock(&self.shared.faults).capacity = capacity;
    }

    /// Makes the next `count` syncs (of any file) fail with an I/O error.
    pub fn fail_syncs(&self, count: u64) {
        lock(&self.shared.faults).failing_syncs = count;
    }

    /// Asks `fault` before every storage call (of every clone and every file handle) whether
    /// it fails: `Some(error)` fails the call with that error without doing anything (an
    /// append writes nothing), `None` lets it run. Replaces an earlier injector; the capacity
    /// and failing syncs still apply. [`Errno`] builds the usual errors.
    pub fn inject_faults(
        &self,
        fault: impl Fn(FsCall, &Path) -> Option<io::Error> + Send + Sync + 'static,
    ) {
        lock(&self.shared.faults).injector = Some(Arc::new(fault));
    }

    /// Removes every injected fault: the injector, the capacity and the failing syncs.
    pub fn clear_faults(&self) {
        *lock(&self.shared.faults) = Faults::default();
    }

    /// Total bytes held by all files (synced or not, preallocated zeros included).
    pub fn used_bytes(&self) -> u64 {
        lock(&self.shared.tree)
            .files
            .values()
            .map(|f| lock(&f.state).footprint() as u64)
            .sum()
    }

    /// Simulates a power cut: every byte and every directory entry not yet synced is lost.
    /// Handles opened before the crash refuse every further call.
    pub fn crash(&self) {
        self.crash_with(|_, _| Vec::new());
    }

    /// Simulates a power cut with a custom fate for each surviving file's unsynced bytes:
    /// `tail` is called with the file's path and its unsynced bytes and returns what the file
    /// holds after its synced prefix once the machine is back (a prefix of the bytes for a
    /// torn write, zeros for lost pages, anything else for garbage). Directory entries are
    /// what each directory's last sync saw (see the crash model on [`MemBackend`]). Faults
    /// are cleared.
    pub fn crash_with(&self, mut tail: impl FnMut(&Path, &[u8]) -> Vec<u8>) {
        let mut tree = lock(&self.shared.tree);
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
        let old = std::mem::take(&mut *tree);
        let mut new = MemTree {
            last_dir: old.last_dir,
            ..MemTree::default()
        };
        // One copy per file even if a crash left it under two names (an unsynced source
        // directory of a rename between directories).
        let mut copies: HashMap<*const MemFileData, Arc<MemFileData>> = HashMap::new();
        let mut walk = vec![(PathBuf::new(), ROOT_DIR)];
        while let Some((dir, id)) = walk.pop() {
            let Some(entries) = old.durable.get(&id) else {
                continue;
            };
            for (name, entry) in entries {
                let path = dir.join(name);
                match entry {
                    DurableEntry::Dir(child) => {
                        new.dirs.insert(path.clone(), *child);
                        walk.push((path, *child));
                    }
                    DurableEntry::File(file) => {
                        let copy = copies.entry(Arc::as_ptr(file)).or_insert_with(|| {
                            let state = lock(&file.state).clone();
                            let mut data = state.data[..state.synced].to_vec();
                            data.extend_from_slice(&tail(&path, &state.data[state.synced..]));
                            // Preallocated space a sync made durable reads as zeros.
                            if data.len() < state.durable_allocated {
                                data.resize(state.durable_allocated, 0);
                            }
                            let synced = data.len();
                            Arc::new(MemFileData {
                                state: Mutex::new(MemFileState {
                                    data,
                                    synced,
                                    ..MemFileState::default()
                                }),
                            })
                        });
                        new.files.insert(path, Arc::clone(copy));
                    }
                }
            }
        }
        // Whatever is there after the reboot is durable.
        let dirs: Vec<(PathBuf, u64)> = std::iter::once((PathBuf::new(), ROOT_DIR))
            .chain(new.dirs.iter().map(|(p, id)| (p.clone(), *id)))
            .collect();
        for (path, id) in dirs {
            let entries = new.entries(&path);
            new.durable.insert(id, entries);
        }
        *tree = new;
        *lock(&self.shared.faults) = Faults::default();
    }

    /// A copy of a file's current bytes (synced or not), for tests.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let tree = lock(&self.shared.tree);
        tree.files.get(path).map(|f| lock(&f.state).data.clone())
    }

    /// Overwrites a file's bytes, for tests that damage files: the bytes, the file's entry
    /// and any parent directory this creates are durable at once.
    pub fn write_file(&self, path: &Path, bytes: &[u8]) {
        let mut tree = lock(&self.shared.tree);
        let mut parent = PathBuf::new();
        for component in path.parent().into_iter().flat_map(Path::components) {
            parent.push(component);
            if !tree.dirs.contains_key(&parent) {
                tree.last_dir += 1;
                let id = tree.last_dir;
                tree.dirs.insert(parent.clone(), id);
                tree.make_entry_durable(&parent);
            }
        }
        let len = bytes.len();
        tree.files.insert(
            path.to_path_buf(),
            Arc::new(MemFileData {
                state: Mutex::new(MemFileState {
                    data: bytes.to_vec(),
                    synced: len,
                    ..MemFileState::default()
                }),
            }),
        );
        tree.make_entry_durable(path);
    }

    /// Every file path, sorted, for tests.
    pub fn file_paths(&self) -> Vec<PathBuf> {
        lock(&self.shared.tree).files.keys().cloned().collect()
    }

    fn handle(&self, path: &Path, data: Arc<MemFileData>) -> Arc<dyn StorageFile> {
        Arc::new(MemFile {
            data,
            epoch: self.shared.epoch.load(Ordering::Acquire),
            backend: Arc::clone(&self.shared),
            path: path.to_path_buf(),
        })
    }

    /// Refuses calls of a killed process's clone, then asks the fault injector.
    fn check(&self, call: FsCall, path: &Path) -> io::Result<()> {
        if self.shared.epoch.load(Ordering::Acquire) != self.epoch {
            return Err(crashed());
        }
        self.shared.injected(call, path)
    }

    fn parent_exists(tree: &MemTree, path: &Path) -> bool {
        match path.parent() {
            None => true,
            Some(p) if p.as_os_str().is_empty() => true,
            Some(p) => tree.dirs.contains_key(p),
        }
    }
}

fn not_found() -> io::Error {
    io::Error::from(io::ErrorKind::NotFound)
}

impl StorageBackend for MemBackend {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>> {
        let call = match mode {
            OpenMode::Existing => FsCall::Open,
            OpenMode::CreateNew | OpenMode::CreateOrOpen => FsCall::Create,
        };
        self.check(call, path)?;
        let mut tree = lock(&self.shared.tree);
        if !Self::parent_exists(&tree, path) {
            return Err(not_found());
        }
        let existing = tree.files.get(path).cloned();
        let data = match (mode, existing) {
            (OpenMode::CreateNew, Some(_)) => {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            (OpenMode::Existing, None) => return Err(not_found()),
            (_, Some(data)) => data,
            (_, None) => {
                if tree.dirs.contains_key(path) {
                    return Err(io::Error::from(io::ErrorKind::AlreadyExists));
                }
                let data = Arc::new(MemFileData::default());
                tree.files.insert(path.to_path_buf(), Arc::clone(&data));
                data
            }
        };
        drop(tree);
        Ok(self.handle(path, data))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        self.check(FsCall::List, dir)?;
        let tree = lock(&self.shared.tree);
        if tree.dir_id(dir).is_none() {
            return Err(not_found());
        }
        Ok(tree
            .entries(dir)
            .into_iter()
            .map(|(name, entry)| DirEntry {
                name,
                is_dir: matches!(entry, DurableEntry::Dir(_)),
            })
            .collect())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.check(FsCall::CreateDir, dir)?;
        let mut tree = lock(&self.shared.tree);
        let mut current = PathBuf::new();
        for component in dir.components() {
            current.push(component);
            if tree.files.contains_key(&current) {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            if !tree.dirs.contains_key(&current) {
                tree.last_dir += 1;
                let id = tree.last_dir;
                tree.dirs.insert(current.clone(), id);
            }
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.check(FsCall::Remove, path)?;
        let mut tree = lock(&self.shared.tree);
        tree.files.remove(path).map(|_| ()).ok_or_else(not_found)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.check(FsCall::Remove, dir)?;
        let mut tree = lock(&self.shared.tree);
        if !tree.dirs.contains_key(dir) {
            return Err(not_found());
        }
        tree.files.retain(|p, _| !p.starts_with(dir));
        tree.dirs.retain(|p, _| !p.starts_with(dir));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check(FsCall::Rename, to)?;
        let mut tree = lock(&self.shared.tree);
        if !Self::parent_exists(&tree, to) {
            return Err(not_found());
        }
        let data = tree.files.remove(from).ok_or_else(not_found)?;
        tree.files.insert(to.to_path_buf(), data);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.check(FsCall::SyncDir, dir)?;
        let mut tree = lock(&self.shared.tree);
        let id = tree.dir_id(dir).ok_or_else(not_found)?;
        let entries = tree.entries(dir);
        tree.durable.insert(id, entries);
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let tree = lock(&self.shared.tree);
        tree.files.contains_key(path) || tree.dirs.contains_key(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(backend: &dyn StorageBackend) {
        backend.create_dir_all(Path::new("a/b")).unwrap();
        let f = backend
            .open(Path::new("a/b/f.log"), OpenMode::CreateNew)
            .unwrap();
        assert!(f.is_empty().unwrap());
        f.append(&[b"hello ", b"", b"world"]).unwrap();
        assert_eq!(f.len().unwrap(), 11);
        let mut buf = [0u8; 5];
        f.read_at(6, &mut buf).unwrap();
        assert_eq!(&buf, b"world");
        let err = f.read_at(8, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        f.truncate(5).unwrap();
        f.append(&[b"!"]).unwrap();
        f.sync().unwrap();
        let mut buf = [0u8; 6];
        f.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"hello!");
        assert_eq!(
            backend
                .open(Path::new("a/b/f.log"), OpenMode::CreateNew)
                .unwrap_err()
                .kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(
            backend
                .open(Path::new("a/b/g.log"), OpenMode::Existing)
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
        backend
            .rename(Path::new("a/b/f.log"), Path::new("a/b/g.log"))
            .unwrap();
        assert!(!backend.exists(Path::new("a/b/f.log")));
        let mut names = backend.list(Path::new("a/b")).unwrap();
        names.sort();
        assert_eq!(
            names,
            vec![DirEntry {
                name: "g.log".into(),
                is_dir: false
            }]
        );
        let root = backend.list(Path::new("a")).unwrap();
        assert_eq!(
            root,
            vec![DirEntry {
                name: "b".into(),
                is_dir: true
            }]
        );
        backend.sync_dir(Path::new("a/b")).unwrap();
        backend.remove_file(Path::new("a/b/g.log")).unwrap();
        assert!(backend.list(Path::new("a/b")).unwrap().is_empty());
        backend.remove_dir_all(Path::new("a")).unwrap();
        assert!(!backend.exists(Path::new("a/b")));
    }

    #[test]
    fn fs_backend_behaves() {
        let dir = tempfile::tempdir().unwrap();
        roundtrip(&FsBackend::new(dir.path()).unwrap());
    }

    #[test]
    fn mem_backend_behaves() {
        roundtrip(&MemBackend::new());
    }

    #[test]
    fn fs_append_many_slices() {
        let dir = tempfile::tempdir().unwrap();
        let backend = FsBackend::new(dir.path()).unwrap();
        let f = backend
            .open(Path::new("f"), OpenMode::CreateOrOpen)
            .unwrap();
        let pieces: Vec<Vec<u8>> = (0..3000u32).map(|i| i.to_le_bytes().to_vec()).collect();
        let parts: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
        f.append(&parts).unwrap();
        assert_eq!(f.len().unwrap(), 12_000);
        let mut buf = [0u8; 4];
        f.read_at(4 * 2999, &mut buf).unwrap();
        assert_eq!(u32::from_le_bytes(buf), 2999);
    }

    #[test]
    fn crash_drops_unsynced_and_kills_old_handles() {
        let backend = MemBackend::new();
        let f = backend.open(Path::new("f"), OpenMode::CreateNew).unwrap();
        backend.sync_dir(Path::new("")).unwrap();
        f.append(&[b"durable"]).unwrap();
        f.sync().unwrap();
        f.append(&[b"volatile"]).unwrap();
        backend.crash();
        assert!(f.append(&[b"x"]).is_err(), "old handle must be dead");
        assert!(
            backend.list(Path::new("")).is_err(),
            "old backend clone must be dead"
        );
        let backend = backend.clone();
        let g = backend.open(Path::new("f"), OpenMode::Existing).unwrap();
        assert_eq!(g.len().unwrap(), 7);
    }

    #[test]
    fn crash_with_tears_at_any_byte() {
        for keep in 0..=8usize {
            let backend = MemBackend::new();
            let f = backend.open(Path::new("f"), OpenMode::CreateNew).unwrap();
            backend.sync_dir(Path::new("")).unwrap();
            f.append(&[b"abc"]).unwrap();
            f.sync().unwrap();
            f.append(&[b"defghijk"]).unwrap();
            backend.crash_with(|_, tail| tail[..keep].to_vec());
            let g = backend
                .clone()
                .open(Path::new("f"), OpenMode::Existing)
                .unwrap();
            assert_eq!(g.len().unwrap(), 3 + keep as u64);
        }
    }

    #[test]
    fn capacity_gives_short_write_then_enospc() {
        let backend = MemBackend::new();
        backend.set_capacity(Some(10));
        let f = backend.open(Path::new("f"), OpenMode::CreateNew).unwrap();
        f.append(&[b"0123456"]).unwrap();
        let err = f.append(&[b"789", b"abc"]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert_eq!(f.len().unwrap(), 10, "the short write happened");
        assert_eq!(backend.used_bytes(), 10);
    }

    #[test]
    fn failing_syncs_are_counted() {
        let backend = MemBackend::new();
        let f = backend.open(Path::new("f"), OpenMode::CreateNew).unwrap();
        backend.fail_syncs(1);
        assert!(f.sync().is_err());
        assert!(f.sync().is_ok());
    }

    #[test]
    fn unsynced_directory_entries_vanish_in_a_crash() {
        let backend = MemBackend::new();
        backend.create_dir_all(Path::new("a/b")).unwrap();
        let f = backend
            .open(Path::new("a/b/f"), OpenMode::CreateNew)
            .unwrap();
        f.append(&[b"synced bytes"]).unwrap();
        f.sync().unwrap();
        // The file's bytes are synced, but no directory was: the whole tree is gone.
        backend.crash();
        assert!(!backend.exists(Path::new("a")));
        assert!(backend.file_paths().is_empty());

        let backend = backend.clone();
        backend.create_dir_all(Path::new("a/b")).unwrap();
        let f = backend
            .open(Path::new("a/b/f"), OpenMode::CreateNew)
            .unwrap();
        f.append(&[b"synced bytes"]).unwrap();
        f.sync().unwrap();
        backend.sync_dir(Path::new("a/b")).unwrap();
        backend.sync_dir(Path::new("")).unwrap();
        // `b`'s entry in `a` was never synced: `a` survives empty.
        backend.crash();
        assert!(backend.exists(Path::new("a")));
        assert!(!backend.exists(Path::new("a/b")));

        let backend = backend.clone();
        backend.create_dir_all(Path::new("a/b")).unwrap();
        backend.sync_dir(Path::new("a")).unwrap();
        let f = backend
            .open(Path::new("a/b/f"), OpenMode::CreateNew)
            .unwrap();
        f.append(&[b"synced bytes"]).unwrap();
        f.sync().unwrap();
        backend.sync_dir(Path::new("a/b")).unwrap();
        backend.crash();
        assert_eq!(
            backend.read_file(Path::new("a/b/f")).unwrap(),
            b"synced bytes"
        );
    }

    #[test]
    fn a_rename_without_a_directory_sync_is_undone() {
        let backend = MemBackend::new();
        for (name, bytes) in [("x", b"old"), ("x.tmp", b"new")] {
            let f = backend.open(Path::new(name), OpenMode::CreateNew).unwrap();
            f.append(&[bytes]).unwrap();
            f.sync().unwrap();
        }
        backend.sync_dir(Path::new("")).unwrap();
        backend.rename(Path::new("x.tmp"), Path::new("x")).unwrap();
        backend.crash();
        assert_eq!(backend.read_file(Path::new("x")).unwrap(), b"old");
        assert_eq!(backend.read_file(Path::new("x.tmp")).unwrap(), b"new");

        let backend = backend.clone();
        backend.rename(Path::new("x.tmp"), Path::new("x")).unwrap();
        backend.remove_file(Path::new("x")).unwrap();
        backend.sync_dir(Path::new("")).unwrap();
        backend.crash();
        assert!(backend.file_paths().is_empty());
    }

    #[test]
    fn a_directory_made_again_does_not_bring_back_its_old_entries() {
        let backend = MemBackend::new();
        backend.create_dir_all(Path::new("d")).unwrap();
        backend
            .open(Path::new("d/old"), OpenMode::CreateNew)
            .unwrap();
        backend.sync_dir(Path::new("d")).unwrap();
        backend.sync_dir(Path::new("")).unwrap();
        backend.remove_dir_all(Path::new("d")).unwrap();
        backend.create_dir_all(Path::new("d")).unwrap();
        backend.sync_dir(Path::new("")).unwrap();
        backend.crash();
        assert!(backend.exists(Path::new("d")));
        assert!(backend.clone().list(Path::new("d")).unwrap().is_empty());
    }

    #[test]
    fn injected_faults_fail_the_chosen_calls_until_cleared() {
        let backend = MemBackend::new();
        backend.create_dir_all(Path::new("d")).unwrap();
        backend.inject_faults(|call, path| match call {
            FsCall::Create if path.starts_with("d") => Some(Errno::TooManyFiles.error()),
            FsCall::Append => Some(Errno::NoSpace.error()),
            FsCall::Sync => Some(Errno::Io.error()),
            _ => None,
        });
        let err = backend
            .open(Path::new("d/f"), OpenMode::CreateNew)
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(24));
        assert!(
            !backend.exists(Path::new("d/f")),
            "a refused open creates nothing"
        );
        let f = backend.open(Path::new("g"), OpenMode::CreateNew).unwrap();
        let err = f.append(&[b"x"]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert_eq!(f.len().unwrap(), 0, "an injected append writes nothing");
        assert_eq!(f.sync().unwrap_err().raw_os_error(), Some(5));
        backend.clear_faults();
        f.append(&[b"x"]).unwrap();
        f.sync().unwrap();
        backend.open(Path::new("d/f"), OpenMode::CreateNew).unwrap();
    }

    #[test]
    fn fs_backend_creates_its_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("x/y");
        let backend = FsBackend::new(&root).unwrap();
        assert!(root.is_dir());
        assert_eq!(backend.root(), root);
    }
}
