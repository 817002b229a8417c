//! `eddy-stream-load`: the Iggy benchmark shapes (storage-and-replication spec §4.6) against a
//! real eddy server with the published SDK.
//!
//! Shape: N producers on N streams x 1 partition, each sending B batches of M messages of S bytes
//! (Iggy's defaults: 8 x 1000 x 1000 x 1000 B), then N consumers polling the same partitions in
//! batches of M; once with durable acks (`enforce_fsync = true`, every acknowledged batch is on
//! disk) and once without. Reported: msgs/s, MB/s, per-batch latency p50/p99/p999, server CPU
//! per message, and, for durable production, the throughput as a ratio of the raw
//! `write + fdatasync` bandwidth the same tool measures in the same run on the same filesystem
//! (N threads, one file each, one batch-sized write then one fdatasync per step, the same volume
//! as the producers write; measured before and after the durable producers, ratio to the mean).
//!
//! ```text
//! eddy-stream-load [--server PATH | --addr HOST:PORT --server-pid PID --dir DIR]
//!                  [--producers N] [--batches B] [--messages M] [--size S]
//!                  [--mode durable|fast|both] [--no-consumers]
//! ```
//!
//! Without `--addr` it starts `--server` (default: `eddy-test-server` next to this binary) in a
//! fresh data directory under `$TMPDIR`.

// A report tool: its output is the report, and its figures are floats for printing only.
#![allow(clippy::print_stdout, clippy::cast_precision_loss)]

use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_tests::{Eddy, Options};
use iggy::prelude::*;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone)]
struct Args {
    server: Option<PathBuf>,
    addr: Option<SocketAddr>,
    server_pid: Option<u32>,
    dir: Option<PathBuf>,
    producers: usize,
    batches: usize,
    messages: usize,
    size: usize,
    modes: Vec<bool>,
    consumers: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: eddy-stream-load [--server PATH | --addr HOST:PORT --server-pid PID --dir DIR] \
         [--producers N] [--batches B] [--messages M] [--size S] [--mode durable|fast|both] \
         [--no-consumers]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = Args {
        server: None,
        addr: None,
        server_pid: None,
        dir: None,
        producers: 8,
        batches: 1000,
        messages: 1000,
        size: 1000,
        modes: vec![true, false],
        consumers: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--server" => args.server = Some(value().into()),
            "--addr" => args.addr = Some(value().parse().unwrap_or_else(|_| usage())),
            "--server-pid" => args.server_pid = Some(value().parse().unwrap_or_else(|_| usage())),
            "--dir" => args.dir = Some(value().into()),
            "--producers" => args.producers = value().parse().unwrap_or_else(|_| usage()),
            "--batches" => args.batches = value().parse().unwrap_or_else(|_| usage()),
            "--messages" => args.messages = value().parse().unwrap_or_else(|_| usage()),
            "--size" => args.size = value().parse().unwrap_or_else(|_| usage()),
            "--mode" => {
                args.modes = match value().as_str() {
                    "durable" => vec![true],
                    "fast" => vec![false],
                    "both" => vec![true, false],
                    _ => usage(),
                }
            }
            "--no-consumers" => args.consumers = false,
            _ => usage(),
        }
    }
    if args.producers == 0 || args.batches == 0 || args.messages == 0 || args.size == 0 {
        usage();
    }
    args
}

/// CPU time (user + system) of a process, from `/proc/<pid>/stat`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    #[allow(clippy::cast_precision_loss)]
    let total = (ticks(11) + ticks(12)) as f64;
    // USER_HZ is 100 on Linux.
    total / 100.0
}

/// Latency percentiles of a sample set, in microseconds.
struct Percentiles {
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

fn percentiles(samples: &mut [Duration]) -> Percentiles {
    samples.sort_unstable();
    let at = |q: f64| {
        if samples.is_empty() {
            return 0.0;
        }
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[i].as_secs_f64() * 1e6
    };
    Percentiles {
        p50: at(0.50),
        p99: at(0.99),
        p999: at(0.999),
        max: at(1.0),
    }
}

/// The raw baseline: `threads` writers, one file each, `steps` x (one `chunk`-byte write + one
/// fdatasync). Returns bytes per second.
fn raw_write_fdatasync(dir: &Path, threads: usize, steps: usize, chunk: usize) -> f64 {
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let path = dir.join(format!("raw-{t}.bin"));
            scope.spawn(move || {
                let mut file = OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .write(true)
                    .open(&path)
                    .expect("open raw file");
                let block = vec![0x5Au8; chunk];
                for _ in 0..steps {
                    file.write_all(&block).expect("write");
                    file.sync_data().expect("fdatasync");
                }
                drop(file);
                let _ = std::fs::remove_file(&path);
            });
        }
    });
    #[allow(clippy::cast_precision_loss)]
    let bytes = (threads * steps * chunk) as f64;
    bytes / started.elapsed().as_secs_f64()
}

async fn client(addr: SocketAddr) -> Result<IggyClient, Error> {
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(addr.to_string())
        .with_no_delay()
        .with_reconnection_max_retries(Some(0))
        .build()?;
    client.connect().await?;
    client.login_user("iggy", "iggy").await?;
    Ok(client)
}

struct Phase {
    messages: u64,
    bytes: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
    cpu: f64,
    client_cpu: f64,
}

impl Phase {
    #[allow(clippy::cast_precision_loss)]
    fn print(&mut self, name: &str) {
        let secs = self.elapsed.as_secs_f64();
        let p = percentiles(&mut self.latencies);
        println!(
            "{name:<22} {:>12.0} msgs/s {:>9.1} MB/s   per batch p50 {:>8.0} us  p99 {:>8.0} us  \
             p999 {:>8.0} us  max {:>8.0} us   CPU us/msg: server {:>6.3} load tool {:>6.3}",
            self.messages as f64 / secs,
            self.bytes as f64 / secs / 1e6,
            p.p50,
            p.p99,
            p.p999,
            p.max,
            self.cpu * 1e6 / self.messages as f64,
            self.client_cpu * 1e6 / self.messages as f64,
        );
    }

    #[allow(clippy::cast_precision_loss)]
    fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64()
    }
}

/// Builds one producer's batch: `messages` payloads of `size` bytes tagged with their index.
fn batch(args: &Args, producer: usize) -> Result<Vec<IggyMessage>, Error> {
    (0..args.messages)
        .map(|i| {
            let mut payload = vec![b'x'; args.size];
            let tag = format!("{producer}-{i}");
            let n = tag.len().min(args.size);
            payload[..n].copy_from_slice(&tag.as_bytes()[..n]);
            IggyMessage::builder()
                .payload(bytes::Bytes::from(payload))
                .build()
                .map_err(Error::from)
        })
        .collect()
}

/// One producer: `batches` sends of the same batch, each timed.
async fn producer(
    client: IggyClient,
    args: Args,
    p: usize,
    stream: String,
) -> Result<Vec<Duration>, Error> {
    let mut batch = batch(&args, p)?;
    let stream_id = Identifier::named(&stream)?;
    let topic_id = Identifier::numeric(0)?;
    let partitioning = Partitioning::partition_id(0);
    let mut latencies = Vec::with_capacity(args.batches);
    for _ in 0..args.batches {
        let sent = Instant::now();
        client
            .send_messages(&stream_id, &topic_id, &partitioning, &mut batch)
            .await?;
        latencies.push(sent.elapsed());
    }
    Ok(latencies)
}

/// One consumer: polls its partition from offset 0 in steps of `messages` until it has read
/// everything the producer sent, each poll timed.
async fn consumer(client: IggyClient, args: Args, stream: String) -> Result<Vec<Duration>, Error> {
    let stream_id = Identifier::named(&stream)?;
    let topic_id = Identifier::numeric(0)?;
    let consumer = Consumer::new(Identifier::numeric(1)?);
    let total = (args.batches * args.messages) as u64;
    let count = u32::try_from(args.messages).unwrap_or(u32::MAX);
    let mut next = 0u64;
    let mut latencies = Vec::with_capacity(args.batches);
    while next < total {
        let polled_at = Instant::now();
        let polled = client
            .poll_messages(
                &stream_id,
                &topic_id,
                Some(0),
                &consumer,
                &PollingStrategy::offset(next),
                count,
                false,
            )
            .await?;
        latencies.push(polled_at.elapsed());
        let Some(last) = polled.messages.last() else {
            return Err(format!("{stream}: no messages at offset {next}").into());
        };
        next = last.header.offset + 1;
    }
    Ok(latencies)
}

/// Runs one phase: every actor connects and logs in (Argon2) before the clock and the CPU
/// counter start, then all run at once.
async fn phase(
    args: &Args,
    addr: SocketAddr,
    pid: Option<u32>,
    prefix: &str,
    produce: bool,
) -> Result<Phase, Error> {
    let ready = Arc::new(tokio::sync::Barrier::new(args.producers + 1));
    let mut tasks = Vec::new();
    for p in 0..args.producers {
        let args = args.clone();
        let stream = format!("{prefix}-{p}");
        let ready = Arc::clone(&ready);
        tasks.push(tokio::spawn(async move {
            let connected = client(addr).await;
            ready.wait().await;
            let client = connected?;
            if produce {
                producer(client, args, p, stream).await
            } else {
                consumer(client, args, stream).await
            }
        }));
    }
    ready.wait().await;
    let cpu_before = pid.map_or(0.0, cpu_seconds);
    let client_cpu_before = cpu_seconds(std::process::id());
    let started = Instant::now();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed();
    let messages = (args.producers * args.batches * args.messages) as u64;
    Ok(Phase {
        messages,
        bytes: messages * args.size as u64,
        elapsed,
        latencies,
        cpu: pid.map_or(0.0, cpu_seconds) - cpu_before,
        client_cpu: cpu_seconds(std::process::id()) - client_cpu_before,
    })
}

async fn setup(args: &Args, addr: SocketAddr, prefix: &str, durable: bool) -> Result<(), Error> {
    let admin = client(addr).await?;
    for p in 0..args.producers {
        let stream = format!("{prefix}-{p}");
        admin.create_stream(&stream).await?;
        admin
            .create_topic(
                &Identifier::named(&stream)?,
                "t",
                &TopicCreateOptions {
                    partitions_count: Some(1),
                    enforce_fsync: Some(durable),
                    ..TopicCreateOptions::default()
                },
            )
            .await?;
    }
    Ok(())
}

async fn teardown(args: &Args, addr: SocketAddr, prefix: &str) -> Result<(), Error> {
    let admin = client(addr).await?;
    for p in 0..args.producers {
        admin
            .delete_stream(&Identifier::named(&format!("{prefix}-{p}"))?)
            .await?;
    }
    Ok(())
}

fn default_server() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    exe.with_file_name("eddy-test-server")
}

fn main() -> Result<(), Error> {
    let args = parse_args();
    let mut spawned = None;
    let (addr, pid, dir) = if let Some(addr) = args.addr {
        (
            addr,
            args.server_pid,
            args.dir.clone().unwrap_or_else(std::env::temp_dir),
        )
    } else {
        let bin = args.server.clone().unwrap_or_else(default_server);
        let eddy = Eddy::start_with(
            bin.to_str().ok_or("server path is not utf-8")?,
            Options::default(),
        );
        let started = (
            eddy.addrs().stream,
            Some(eddy.pid()),
            eddy.data_dir().to_path_buf(),
        );
        spawned = Some(eddy);
        started
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let batch_bytes = 256 + args.messages * (48 + args.size);
    println!(
        "eddy stream load: {} producers x {} streams x 1 partition, {} batches x {} messages x {} B \
         ({:.2} MB per batch), {} CPUs",
        args.producers,
        args.producers,
        args.batches,
        args.messages,
        args.size,
        batch_bytes as f64 / 1e6,
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
    );
    // The same volume as the producers write, so page-cache and writeback effects match.
    let baseline_steps = args.batches;
    let raw = raw_write_fdatasync(&dir, args.producers, baseline_steps, batch_bytes);
    println!(
        "raw write+fdatasync     {:>9.1} MB/s   ({} threads x {} x {:.2} MB, in {})",
        raw / 1e6,
        args.producers,
        baseline_steps,
        batch_bytes as f64 / 1e6,
        dir.display()
    );
    println!(
        "host load average before the run: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let arc = Arc::new(args);
    for &durable in &arc.modes {
        let prefix = if durable { "durable" } else { "fast" };
        runtime.block_on(setup(&arc, addr, prefix, durable))?;
        let mut produced = runtime.block_on(phase(&arc, addr, pid, prefix, true))?;
        produced.print(&format!("{prefix} producers"));
        if durable {
            // The disk of a shared host drifts: measure the baseline again right after, and
            // compare with the mean of the two.
            let again = raw_write_fdatasync(&dir, arc.producers, baseline_steps, batch_bytes);
            let mean = f64::midpoint(raw, again);
            println!(
                "raw write+fdatasync     {:>9.1} MB/s   (again, after the durable producers)",
                again / 1e6
            );
            println!(
                "durable producer throughput / raw write+fdatasync (mean of both) = {:.2} \
                 (counting the bytes written, frame headers included: {:.2})",
                produced.bytes_per_sec() / mean,
                produced.bytes_per_sec() * batch_bytes as f64
                    / (arc.messages * arc.size) as f64
                    / mean
            );
        }
        if arc.consumers {
            let mut consumed = runtime.block_on(phase(&arc, addr, pid, prefix, false))?;
            consumed.print(&format!("{prefix} consumers"));
        }
        runtime.block_on(teardown(&arc, addr, prefix))?;
    }
    drop(spawned);
    Ok(())
}
