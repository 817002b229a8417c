//! Process and host figures for `GET_STATS`, read from `/proc` and `statvfs`.
//!
//! CPU usage is measured between two calls (the first call measures since process start for the
//! process, and reports 0 for the host). Anything unreadable (another OS, a restricted `/proc`)
//! reads as 0 or an empty string: stats are informational and never fail the request.

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

/// How many of each stream-protocol entity exist (`GET_STATS` and the Iggy metric names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EntityCounts {
    /// Streams.
    pub streams: u32,
    /// Topics.
    pub topics: u32,
    /// Partitions.
    pub partitions: u32,
    /// Consumer groups.
    pub groups: u32,
    /// Segments of every partition.
    pub segments: u32,
    /// Messages stored.
    pub messages: u64,
    /// Bytes of stored messages.
    pub bytes: u64,
    /// Users.
    pub users: u32,
}

impl EntityCounts {
    /// Counts the entities of the durable metadata and the partitions' stored figures.
    pub fn of(state: &super::StreamState) -> Self {
        let mut counts = EntityCounts::default();
        state.read(|meta| {
            counts.users = u32::try_from(meta.users.len()).unwrap_or(u32::MAX);
            for stream in meta.streams.values() {
                counts.streams += 1;
                for topic in stream.topics.values() {
                    counts.topics += 1;
                    counts.groups += u32::try_from(topic.groups.len()).unwrap_or(u32::MAX);
                }
            }
            for (addr, _, _) in meta.partitions() {
                counts.partitions += 1;
                let stats = state.partition_stats(addr);
                counts.segments = counts.segments.saturating_add(stats.segments);
                counts.messages += stats.messages;
                counts.bytes += stats.size_bytes;
            }
        });
        counts
    }
}

/// `/proc` reports CPU times in clock ticks of `USER_HZ`, which Linux fixes at 100 for
/// user-space interfaces.
const USER_HZ: f64 = 100.0;

/// Host and process figures at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostFigures {
    /// This process's CPU usage since the previous sample, percent of one core.
    pub cpu_usage: f32,
    /// The host's CPU usage since the previous sample, percent of all cores.
    pub total_cpu_usage: f32,
    /// Resident memory of this process, bytes.
    pub memory_usage: u64,
    /// Host memory, bytes.
    pub total_memory: u64,
    /// Host memory available, bytes.
    pub available_memory: u64,
    /// Bytes this process read from storage.
    pub read_bytes: u64,
    /// Bytes this process wrote to storage.
    pub written_bytes: u64,
    /// Threads of this process.
    pub threads: u32,
    /// Host name.
    pub hostname: String,
    /// OS name (`Linux`).
    pub os_name: String,
    /// OS release name (from `/etc/os-release`).
    pub os_version: String,
    /// Kernel release.
    pub kernel_version: String,
    /// Free space of the data directory's filesystem, bytes.
    pub free_disk: u64,
    /// Size of the data directory's filesystem, bytes.
    pub total_disk: u64,
}

#[derive(Debug, Clone, Copy)]
struct CpuSample {
    at: Instant,
    process_ticks: u64,
    host_busy: u64,
    host_total: u64,
}

/// Keeps the previous CPU sample between `GET_STATS` calls.
#[derive(Debug)]
pub struct HostSampler {
    started: Instant,
    previous: Mutex<Option<CpuSample>>,
}

impl Default for HostSampler {
    fn default() -> Self {
        Self::new()
    }
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The value of `key:` in a `/proc` "key: value unit" file, as a number.
fn field(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn process_ticks() -> u64 {
    let stat = read("/proc/self/stat");
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let at = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    at(11) + at(12)
}

fn host_ticks() -> (u64, u64) {
    let stat = read("/proc/stat");
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return (0, 0);
    };
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = values.iter().sum();
    // idle and iowait are the 4th and 5th values.
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

fn os_version() -> String {
    let release = read("/etc/os-release");
    release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap_or_default()
}

#[allow(clippy::cast_precision_loss)]
fn percent(part: u64, whole: f64) -> f32 {
    if whole <= 0.0 {
        return 0.0;
    }
    (part as f64 / whole * 100.0) as f32
}

impl HostSampler {
    /// A sampler whose first process CPU figure covers the time since now.
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            previous: Mutex::new(None),
        }
    }

    /// Samples every figure; `data_dir` selects the filesystem for the disk figures.
    pub fn sample(&self, data_dir: &Path) -> HostFigures {
        let now = Instant::now();
        let ticks = process_ticks();
        let (busy, total) = host_ticks();
        let current = CpuSample {
            at: now,
            process_ticks: ticks,
            host_busy: busy,
            host_total: total,
        };
        let previous = eddy_log::lock(&self.previous).replace(current);
        let (cpu_usage, total_cpu_usage) = match previous {
            Some(p) => {
                let secs = now.duration_since(p.at).as_secs_f64();
                (
                    percent(ticks.saturating_sub(p.process_ticks), secs * USER_HZ),
                    #[allow(clippy::cast_precision_loss)]
                    percent(
                        busy.saturating_sub(p.host_busy),
                        total.saturating_sub(p.host_total) as f64,
                    ),
                )
            }
            None => (
                percent(
                    ticks,
                    now.duration_since(self.started).as_secs_f64() * USER_HZ,
                ),
                0.0,
            ),
        };
        let status = read("/proc/self/status");
        let meminfo = read("/proc/meminfo");
        let io = read("/proc/self/io");
        let (free_disk, total_disk) = rustix::fs::statvfs(data_dir).map_or((0, 0), |s| {
            (
                s.f_bavail.saturating_mul(s.f_frsize),
                s.f_blocks.saturating_mul(s.f_frsize),
            )
        });
        HostFigures {
            cpu_usage,
            total_cpu_usage,
            memory_usage: field(&status, "VmRSS") * 1024,
            total_memory: field(&meminfo, "MemTotal") * 1024,
            available_memory: field(&meminfo, "MemAvailable") * 1024,
            read_bytes: field(&io, "read_bytes"),
            written_bytes: field(&io, "write_bytes"),
            threads: u32::try_from(field(&status, "Threads")).unwrap_or(u32::MAX),
            hostname: read("/proc/sys/kernel/hostname").trim().to_owned(),
            os_name: read("/proc/sys/kernel/ostype").trim().to_owned(),
            os_version: os_version(),
            kernel_version: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            free_disk,
            total_disk,
        }
    }
}

/// The semver of a version string as `GET_STATS` packs it: `major * 1_000_000 + minor * 1_000 +
/// patch` (0 when it does not parse or a component is out of range).
pub fn packed_semver(version: &str) -> u32 {
    let core = version.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<u32> = core.split('.').filter_map(|p| p.parse().ok()).collect();
    match parts.as_slice() {
        [major, minor, patch] if *minor < 1000 && *patch < 1000 && *major < 4000 => {
            major * 1_000_000 + minor * 1_000 + patch
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_plausible_on_linux() {
        let sampler = HostSampler::new();
        let dir = tempfile::tempdir().unwrap();
        let first = sampler.sample(dir.path());
        let second = sampler.sample(dir.path());
        if cfg!(target_os = "linux") {
            assert!(first.memory_usage > 0);
            assert!(first.total_memory >= first.available_memory);
            assert!(first.threads >= 1);
            assert_eq!(first.os_name, "Linux");
            assert!(!first.kernel_version.is_empty());
            assert!(second.total_disk >= second.free_disk && second.total_disk > 0);
        }
        assert!(second.cpu_usage >= 0.0);
    }

    #[test]
    fn semver_packing() {
        assert_eq!(packed_semver("0.9.0-edge.5"), 9_000);
        assert_eq!(packed_semver("1.2.3"), 1_002_003);
        assert_eq!(packed_semver("nope"), 0);
    }

    #[test]
    fn proc_fields() {
        assert_eq!(field("VmRSS:\t  1234 kB\nThreads: 7\n", "VmRSS"), 1234);
        assert_eq!(field("VmRSS:\t  1234 kB\nThreads: 7\n", "Threads"), 7);
        assert_eq!(field("x", "Threads"), 0);
    }
}
