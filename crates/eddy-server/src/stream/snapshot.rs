//! `GET_SNAPSHOT_FILE` (stream spec §5.1.3): a ZIP archive of diagnostics the operator asked
//! for, built on the blocking pool and answered as the raw reply body.
//!
//! One file per snapshot type: `filesystem_overview.txt` (the data directory tree with sizes),
//! `process_list.txt` (every process of the host from `/proc`), `resource_usage.txt` (this
//! process and the host: CPU, memory, disk, load), `test.txt`, `server_logs.txt` (where the logs
//! are: eddy writes them to stderr and keeps none on disk), `server_config.toml` (the running
//! configuration, secrets redacted); `All` (100) is every one of them.
//!
//! Compression: `Stored` stores; `Deflated` (the SDK's default) deflates; `Zstd` writes ZIP
//! method 93. Bzip2, LZMA and XZ have no codec in eddy: their entries are stored (method 0), which
//! every unzip reads. An archive that would not fit in one reply frame is refused with
//! `SnapshotFileCompletionFailed` (9000).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use super::stats::HostFigures;

/// ZIP compression methods written.
const METHOD_STORED: u16 = 0;
const METHOD_DEFLATED: u16 = 8;
const METHOD_ZSTD: u16 = 93;

/// Most entries the filesystem overview lists (a huge data directory is cut, and says so).
const MAX_FS_ENTRIES: usize = 20_000;

/// The snapshot type codes (`SystemSnapshotType::as_code`).
pub(crate) mod kind {
    pub const FILESYSTEM_OVERVIEW: u8 = 1;
    pub const PROCESS_LIST: u8 = 2;
    pub const RESOURCE_USAGE: u8 = 3;
    pub const TEST: u8 = 4;
    pub const SERVER_LOGS: u8 = 5;
    pub const SERVER_CONFIG: u8 = 6;
    pub const ALL: u8 = 100;
}

/// What the archive is built from, gathered on the async side.
#[derive(Debug, Clone)]
pub(crate) struct Inputs {
    /// The data directory.
    pub data_dir: std::path::PathBuf,
    /// The running configuration as TOML, secrets redacted.
    pub config_toml: String,
    /// Process and host figures.
    pub host: HostFigures,
}

/// Builds the archive for `compression` (1..=6) and `types` (codes of [`kind`]).
pub(crate) fn build(compression: u8, types: &[u8], inputs: &Inputs) -> std::io::Result<Vec<u8>> {
    let mut wanted: Vec<u8> = if types.contains(&kind::ALL) || types.is_empty() {
        vec![
            kind::FILESYSTEM_OVERVIEW,
            kind::PROCESS_LIST,
            kind::RESOURCE_USAGE,
            kind::TEST,
            kind::SERVER_LOGS,
            kind::SERVER_CONFIG,
        ]
    } else {
        types.to_vec()
    };
    wanted.sort_unstable();
    wanted.dedup();
    let method = match compression {
        2 => METHOD_DEFLATED,
        4 => METHOD_ZSTD,
        _ => METHOD_STORED,
    };
    let mut zip = ZipWriter::default();
    for t in wanted {
        let (name, text) = match t {
            kind::FILESYSTEM_OVERVIEW => (
                "filesystem_overview.txt",
                filesystem_overview(&inputs.data_dir),
            ),
            kind::PROCESS_LIST => ("process_list.txt", process_list()),
            kind::RESOURCE_USAGE => ("resource_usage.txt", resource_usage(&inputs.host)),
            kind::TEST => ("test.txt", "test\n".to_owned()),
            kind::SERVER_LOGS => ("server_logs.txt", SERVER_LOGS_NOTE.to_owned()),
            kind::SERVER_CONFIG => ("server_config.toml", inputs.config_toml.clone()),
            _ => continue, // the codec admits only known codes
        };
        zip.add(name, text.as_bytes(), method)?;
    }
    Ok(zip.finish())
}

const SERVER_LOGS_NOTE: &str = "eddy writes its logs to standard error (text or JSON, \
--log-format) and keeps none in the data directory; collect them from the service manager \
(journalctl -u eddy) or wherever stderr is redirected.\n";

/// `path<TAB>bytes` for every file and directory under `root`, depth first, sorted by name.
fn filesystem_overview(root: &Path) -> String {
    let mut out = format!("data directory: {}\n", root.display());
    let mut stack = vec![root.to_path_buf()];
    let mut listed = 0usize;
    let mut total = 0u64;
    while let Some(dir) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else {
            let _ = writeln!(out, "{}\tunreadable", dir.display());
            continue;
        };
        let mut entries: Vec<_> = read.flatten().collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries.into_iter().rev() {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap_or(&path);
            let Ok(meta) = entry.metadata() else { continue };
            if listed < MAX_FS_ENTRIES {
                if meta.is_dir() {
                    let _ = writeln!(out, "{}/\t-", rel.display());
                } else {
                    let _ = writeln!(out, "{}\t{}", rel.display(), meta.len());
                }
            }
            listed += 1;
            if meta.is_dir() {
                stack.push(path);
            } else {
                total += meta.len();
            }
        }
    }
    if listed > MAX_FS_ENTRIES {
        let _ = writeln!(
            out,
            "... {} more entries not listed",
            listed - MAX_FS_ENTRIES
        );
    }
    let _ = writeln!(out, "total file bytes: {total}");
    out
}

/// `pid  state  rss_kib  name` of every process `/proc` shows.
fn process_list() -> String {
    let mut rows = Vec::new();
    if let Ok(read) = std::fs::read_dir("/proc") {
        for entry in read.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
                continue;
            };
            let field = |key: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .map_or("", str::trim)
                    .to_owned()
            };
            rows.push((
                pid,
                field("State:"),
                field("VmRSS:"),
                field("Threads:"),
                field("Name:"),
            ));
        }
    }
    rows.sort_by_key(|r| r.0);
    let mut out = String::from("pid\tstate\trss\tthreads\tname\n");
    for (pid, state, rss, threads, name) in rows {
        let _ = writeln!(out, "{pid}\t{state}\t{rss}\t{threads}\t{name}");
    }
    out
}

/// This process and the host, from the `GET_STATS` sampler and `/proc`.
fn resource_usage(h: &HostFigures) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "process cpu usage %: {:.2}", h.cpu_usage);
    let _ = writeln!(out, "host cpu usage %: {:.2}", h.total_cpu_usage);
    let _ = writeln!(out, "process resident memory bytes: {}", h.memory_usage);
    let _ = writeln!(out, "host memory bytes: {}", h.total_memory);
    let _ = writeln!(out, "host available memory bytes: {}", h.available_memory);
    let _ = writeln!(out, "process read bytes: {}", h.read_bytes);
    let _ = writeln!(out, "process written bytes: {}", h.written_bytes);
    let _ = writeln!(out, "process threads: {}", h.threads);
    let _ = writeln!(out, "data filesystem free bytes: {}", h.free_disk);
    let _ = writeln!(out, "data filesystem total bytes: {}", h.total_disk);
    let _ = writeln!(out, "hostname: {}", h.hostname);
    let _ = writeln!(out, "os: {} {}", h.os_name, h.os_version);
    let _ = writeln!(out, "kernel: {}", h.kernel_version);
    for file in ["/proc/loadavg", "/proc/self/status", "/proc/self/io"] {
        if let Ok(text) = std::fs::read_to_string(file) {
            let _ = writeln!(out, "\n== {file}\n{}", text.trim_end());
        }
    }
    out
}

/// A minimal ZIP writer (PKWARE APPNOTE 6.3: local headers, central directory, end record; no
/// ZIP64, so entries and the archive stay below 4 GiB, far above any reply frame).
#[derive(Debug, Default)]
struct ZipWriter {
    out: Vec<u8>,
    central: Vec<u8>,
    entries: u16,
}

impl ZipWriter {
    fn add(&mut self, name: &str, data: &[u8], method: u16) -> std::io::Result<()> {
        let mut crc = flate2::Crc::new();
        crc.update(data);
        let crc = crc.sum();
        let packed = match method {
            METHOD_DEFLATED => {
                let mut enc = flate2::write::DeflateEncoder::new(
                    Vec::with_capacity(data.len() / 2),
                    flate2::Compression::default(),
                );
                enc.write_all(data)?;
                enc.finish()?
            }
            METHOD_ZSTD => zstd::bulk::compress(data, 3)?,
            _ => data.to_vec(),
        };
        let too_big = || std::io::Error::other("snapshot entry exceeds 4 GiB");
        let packed_len = u32::try_from(packed.len()).map_err(|_| too_big())?;
        let plain_len = u32::try_from(data.len()).map_err(|_| too_big())?;
        let offset = u32::try_from(self.out.len()).map_err(|_| too_big())?;
        let name_len = u16::try_from(name.len()).map_err(|_| too_big())?;
        // Version needed: 2.0 for stored/deflate, 6.3 for zstd (method 93).
        let needed: u16 = if method == METHOD_ZSTD { 63 } else { 20 };
        // DOS time/date of 1980-01-01 00:00: snapshots carry their time in their content.
        let (time, date): (u16, u16) = (0, (1 << 5) | 1);

        let local = &mut self.out;
        local.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        local.extend_from_slice(&needed.to_le_bytes());
        local.extend_from_slice(&0u16.to_le_bytes()); // flags
        local.extend_from_slice(&method.to_le_bytes());
        local.extend_from_slice(&time.to_le_bytes());
        local.extend_from_slice(&date.to_le_bytes());
        local.extend_from_slice(&crc.to_le_bytes());
        local.extend_from_slice(&packed_len.to_le_bytes());
        local.extend_from_slice(&plain_len.to_le_bytes());
        local.extend_from_slice(&name_len.to_le_bytes());
        local.extend_from_slice(&0u16.to_le_bytes()); // extra length
        local.extend_from_slice(name.as_bytes());
        local.extend_from_slice(&packed);

        let c = &mut self.central;
        c.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        c.extend_from_slice(&(0x0300 | 63u16).to_le_bytes()); // made by: Unix, 6.3
        c.extend_from_slice(&needed.to_le_bytes());
        c.extend_from_slice(&0u16.to_le_bytes()); // flags
        c.extend_from_slice(&method.to_le_bytes());
        c.extend_from_slice(&time.to_le_bytes());
        c.extend_from_slice(&date.to_le_bytes());
        c.extend_from_slice(&crc.to_le_bytes());
        c.extend_from_slice(&packed_len.to_le_bytes());
        c.extend_from_slice(&plain_len.to_le_bytes());
        c.extend_from_slice(&name_len.to_le_bytes());
        c.extend_from_slice(&0u16.to_le_bytes()); // extra length
        c.extend_from_slice(&0u16.to_le_bytes()); // comment length
        c.extend_from_slice(&0u16.to_le_bytes()); // disk number
        c.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
        c.extend_from_slice(&(0o100_644u32 << 16).to_le_bytes()); // external: -rw-r--r--
        c.extend_from_slice(&offset.to_le_bytes());
        c.extend_from_slice(name.as_bytes());
        self.entries += 1;
        Ok(())
    }

    fn finish(mut self) -> Vec<u8> {
        let central_offset = u32::try_from(self.out.len()).unwrap_or(u32::MAX);
        let central_len = u32::try_from(self.central.len()).unwrap_or(u32::MAX);
        self.out.extend_from_slice(&self.central);
        let end = &mut self.out;
        end.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes()); // this disk
        end.extend_from_slice(&0u16.to_le_bytes()); // disk with the central directory
        end.extend_from_slice(&self.entries.to_le_bytes());
        end.extend_from_slice(&self.entries.to_le_bytes());
        end.extend_from_slice(&central_len.to_le_bytes());
        end.extend_from_slice(&central_offset.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes()); // comment length
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names and (method, stored bytes) of an archive, read back from its central directory.
    fn entries(zip: &[u8]) -> Vec<(String, u16, Vec<u8>)> {
        let end = zip.len() - 22;
        assert_eq!(&zip[end..end + 4], &0x0605_4b50u32.to_le_bytes());
        let u16_at = |i: usize| u16::from_le_bytes([zip[i], zip[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(zip[i..i + 4].try_into().unwrap()) as usize;
        let count = u16_at(end + 10);
        let mut at = u32_at(end + 16);
        let mut out = Vec::new();
        for _ in 0..count {
            assert_eq!(&zip[at..at + 4], &0x0201_4b50u32.to_le_bytes());
            let method = u16_at(at + 10);
            let packed = u32_at(at + 20);
            let name_len = u16_at(at + 28) as usize;
            let local = u32_at(at + 42);
            let name = String::from_utf8(zip[at + 46..at + 46 + name_len].to_vec()).unwrap();
            let local_name_len = u16_at(local + 26) as usize;
            let data_at = local + 30 + local_name_len;
            out.push((name, method, zip[data_at..data_at + packed].to_vec()));
            at += 46 + name_len;
        }
        out
    }

    fn inputs(dir: &Path) -> Inputs {
        Inputs {
            data_dir: dir.to_path_buf(),
            config_toml: "stream_port = 8090\nroot_password = \"<redacted>\"\n".into(),
            host: HostFigures::default(),
        }
    }

    #[test]
    fn every_type_and_compression_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("streams/metadata")).unwrap();
        std::fs::write(dir.path().join("streams/metadata/x.log"), [7u8; 1234]).unwrap();
        for compression in 1..=6u8 {
            let zip = build(compression, &[kind::ALL], &inputs(dir.path())).unwrap();
            let got = entries(&zip);
            let names: Vec<&str> = got.iter().map(|e| e.0.as_str()).collect();
            assert_eq!(
                names,
                [
                    "filesystem_overview.txt",
                    "process_list.txt",
                    "resource_usage.txt",
                    "test.txt",
                    "server_logs.txt",
                    "server_config.toml"
                ]
            );
            for (name, method, packed) in got {
                let plain = match method {
                    METHOD_STORED => packed,
                    METHOD_DEFLATED => {
                        let mut d = flate2::read::DeflateDecoder::new(&packed[..]);
                        let mut v = Vec::new();
                        std::io::Read::read_to_end(&mut d, &mut v).unwrap();
                        v
                    }
                    METHOD_ZSTD => zstd::decode_all(&packed[..]).unwrap(),
                    other => panic!("method {other}"),
                };
                let text = String::from_utf8(plain).unwrap();
                match name.as_str() {
                    "test.txt" => assert_eq!(text, "test\n"),
                    "filesystem_overview.txt" => {
                        assert!(text.contains("streams/metadata/x.log\t1234"), "{text}");
                    }
                    "server_config.toml" => assert!(text.contains("<redacted>")),
                    "process_list.txt" => {
                        assert!(
                            text.contains(&format!("{}\t", std::process::id())),
                            "{text}"
                        );
                    }
                    _ => assert!(!text.is_empty()),
                }
            }
            let expected = match compression {
                2 => METHOD_DEFLATED,
                4 => METHOD_ZSTD,
                _ => METHOD_STORED,
            };
            assert!(entries(&zip).iter().all(|e| e.1 == expected));
        }
    }

    #[test]
    fn only_the_asked_types_in_code_order() {
        let dir = tempfile::tempdir().unwrap();
        let zip = build(1, &[6, 4, 4], &inputs(dir.path())).unwrap();
        let names: Vec<String> = entries(&zip).into_iter().map(|e| e.0).collect();
        assert_eq!(names, ["test.txt", "server_config.toml"]);
    }
}
