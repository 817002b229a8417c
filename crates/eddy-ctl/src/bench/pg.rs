//! `eddy bench events --pg`: the same OCC append on PostgreSQL, for comparison.
//!
//! PostgreSQL (installed with apt-get when missing) runs in a temp dir as the `postgres` user
//! with `fsync = on` and `synchronous_commit = on`; a table `events (aggregate, version,
//! payload)` with a unique (aggregate, version) key; pgbench with N clients each appending to
//! its own aggregate at `max(version) + 1`, one transaction per write. Latencies come from
//! pgbench's per-transaction log, cut to the same warm-up and window as eddy's points.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::events::{point_name, EventShape};
use super::result::{f, histogram, Run, Sample, SAMPLE_INTERVAL};
use crate::error::CtlError;

fn sh(cmd: &mut Command) -> Result<String, CtlError> {
    let out = cmd
        .output()
        .map_err(|e| CtlError::Failed(format!("{cmd:?}: {e}")))?;
    if !out.status.success() {
        return Err(CtlError::Failed(format!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The directory holding initdb, pg_ctl and pgbench, installing PostgreSQL when missing.
fn pg_bin() -> Result<PathBuf, CtlError> {
    let find = || -> Option<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|d| d.join("initdb").exists() && d.join("pgbench").exists())
            .collect();
        dirs.sort();
        dirs.pop()
    };
    if let Some(d) = find() {
        return Ok(d);
    }
    eprintln!("eddy bench: installing PostgreSQL with apt-get");
    sh(Command::new("apt-get").arg("update"))?;
    sh(Command::new("apt-get")
        .args(["install", "-y", "postgresql", "postgresql-contrib"])
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    find().ok_or_else(|| CtlError::Failed("PostgreSQL binaries not found after install".into()))
}

/// Seconds pgbench may spend opening its connections before the measured window.
fn connect_allowance(connections: usize) -> u64 {
    5 + connections as u64 / 100
}

/// A PostgreSQL tool run as the `postgres` user. `setpriv` (not `runuser` or `su`, which go
/// through PAM and reset the open-file limit to 1024) keeps this process's limits, which
/// pgbench needs for thousands of clients.
fn as_postgres(bin: &Path, tool: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        "--",
    ])
    .arg(bin.join(tool));
    c.env("HOME", "/tmp");
    c
}

/// A running PostgreSQL; stopped and removed when dropped.
#[derive(Debug)]
pub struct Pg {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
}

impl Pg {
    /// Installs if needed, initialises and starts PostgreSQL.
    pub fn start() -> Result<Self, CtlError> {
        let bin = pg_bin()?;
        let dir = std::env::temp_dir().join(format!("eddy-pg-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|source| CtlError::Io {
            what: "create",
            path: dir.clone(),
            source,
        })?;
        sh(Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir))?;
        let data = dir.join("data");
        sh(as_postgres(&bin, "initdb")
            .args(["-U", "postgres", "--auth=trust", "-D"])
            .arg(&data))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| CtlError::Failed(format!("no free port: {e}")))?;
        let opts = format!(
            "-p {port} -k {} -c listen_addresses='' -c max_connections=4200 -c fsync=on \
             -c synchronous_commit=on -c full_page_writes=on -c shared_buffers=512MB",
            dir.display()
        );
        sh(as_postgres(&bin, "pg_ctl")
            .args(["-w", "-D"])
            .arg(&data)
            .args(["-l"])
            .arg(dir.join("log"))
            .args(["-o", &opts, "start"]))?;
        let pg = Self { bin, dir, port };
        pg.psql(
            "CREATE TABLE events (aggregate bigint NOT NULL, version bigint NOT NULL, \
             payload text NOT NULL, PRIMARY KEY (aggregate, version))",
        )?;
        Ok(pg)
    }

    fn psql(&self, sql: &str) -> Result<String, CtlError> {
        sh(as_postgres(&self.bin, "psql")
            .args(["-h"])
            .arg(&self.dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ]))
    }

    /// One point: `connections` pgbench clients for the shape's warm-up and window.
    pub fn run(&self, shape: &EventShape, connections: usize) -> Result<Run, CtlError> {
        self.psql("TRUNCATE events")?;
        let script = self.dir.join("occ_append.sql");
        // One transaction per write: read the aggregate's version and insert the next one;
        // the primary key (aggregate, version) refuses a concurrent duplicate (OCC).
        std::fs::write(
            &script,
            "INSERT INTO events (aggregate, version, payload) \
             SELECT :client_id, coalesce(max(version), 0) + 1, '[t-' || :client_id || '] hello' \
             FROM events WHERE aggregate = :client_id;\n",
        )
        .map_err(|source| CtlError::Io {
            what: "write",
            path: script.clone(),
            source,
        })?;
        let logs = self.dir.join(format!("log-{connections}"));
        std::fs::create_dir_all(&logs).map_err(|source| CtlError::Io {
            what: "create",
            path: logs.clone(),
            source,
        })?;
        sh(Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&self.dir))?;
        let warmup_secs = shape.warmup_ms.div_ceil(1000);
        let out = sh(as_postgres(&self.bin, "pgbench")
            .current_dir(&logs)
            .args(["-h"])
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-U", "postgres", "-n", "-c"])
            .arg(connections.to_string())
            .args(["-j", "2", "-T"])
            // pgbench's clock includes connecting, one backend process per client: allow for
            // it, and measure a window of `seconds` after the warm-up (below).
            .arg((shape.seconds + warmup_secs + connect_allowance(connections)).to_string())
            .args(["-l", "--log-prefix", "tx", "-f"])
            .arg(&script)
            .arg("postgres"))?;
        // Per-transaction log lines: client_id tx_no latency_us script_no epoch_s epoch_us.
        let mut rows = Vec::new();
        let entries = std::fs::read_dir(&logs).map_err(|source| CtlError::Io {
            what: "read",
            path: logs.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            for line in text.lines() {
                let fields: Vec<u64> = line
                    .split_whitespace()
                    .filter_map(|v| v.parse().ok())
                    .collect();
                if let [_, _, latency, _, secs, micros] = fields[..] {
                    rows.push((secs * 1_000_000 + micros, latency));
                }
            }
        }
        let failed = out
            .lines()
            .find(|l| l.starts_with("number of failed transactions"))
            .and_then(|l| l.split_whitespace().nth(4))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Ok(window(rows, shape, connections, failed))
    }
}

/// The run of the transactions (`(end time µs, latency µs)`) inside the measured window: the
/// warm-up after the first one dropped, then `seconds`.
fn window(rows: Vec<(u64, u64)>, shape: &EventShape, connections: usize, errors: u64) -> Run {
    let first = rows.iter().map(|r| r.0).min().unwrap_or(0);
    let from = first.saturating_add(shape.warmup_ms * 1000);
    let until = from.saturating_add(shape.seconds * 1_000_000);
    let step = u64::try_from(SAMPLE_INTERVAL.as_micros()).unwrap_or(250_000);
    let mut latencies = histogram();
    let mut buckets = vec![0u64; usize::try_from((until - from).div_ceil(step)).unwrap_or(0)];
    for (at, latency) in rows {
        if (from..until).contains(&at) {
            latencies.saturating_record(latency);
            if let Some(b) =
                buckets.get_mut(usize::try_from((at - from) / step).unwrap_or(usize::MAX))
            {
                *b += 1;
            }
        }
    }
    let writes = latencies.len();
    Run {
        name: point_name(true, connections),
        system: "postgres".into(),
        operations: writes,
        messages: writes,
        bytes: writes * 20,
        errors,
        seconds: f(shape.seconds),
        timeline: buckets
            .into_iter()
            .enumerate()
            .map(|(i, ops)| Sample {
                t: f((i as u64 + 1) * step) / 1e6,
                ops,
                errors: 0,
                rss_mib: None,
            })
            .collect(),
        ..Run::default()
    }
    .finish(&latencies)
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = sh(as_postgres(&self.bin, "pg_ctl")
            .args(["-w", "-m", "fast", "-D"])
            .arg(self.dir.join("data"))
            .arg("stop"));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_drops_the_warmup_and_the_tail() {
        let shape = EventShape {
            connections: vec![2],
            seconds: 1,
            warmup_ms: 500,
            plain: false,
            occ: true,
            floor: false,
            pg: true,
            pg_only: true,
        };
        let t0 = 1_000_000_000u64;
        // One transaction every 10 ms for 2 s: 50 in the warm-up, 100 in the window, 50 after.
        let rows: Vec<(u64, u64)> = (0..200).map(|i| (t0 + i * 10_000, 700)).collect();
        let run = window(rows, &shape, 2, 0);
        assert_eq!(run.operations, 100);
        assert_eq!(run.timeline.iter().map(|s| s.ops).sum::<u64>(), 100);
        assert_eq!(run.timeline.len(), 4);
        assert_eq!(run.latency_us.p50, 700);
        assert!((run.ops_per_sec - 100.0).abs() < 1e-9);
        assert_eq!(run.name, "occ, 2 connections");
    }
}
