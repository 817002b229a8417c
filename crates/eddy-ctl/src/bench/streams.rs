//! `eddy bench streams`: Iggy's benchmark shapes (storage-and-replication spec §4.6) with
//! eddy's own client.
//!
//! N producers on N streams x 1 partition, each sending B batches of M messages of S bytes
//! (Iggy's defaults: 8 x 1000 x 1000 x 1000 B), then N consumers polling the same partitions
//! in steps of M; once with durable acks (`enforce_fsync = true`: every acknowledged batch is
//! on disk) and once without. Every connection logs in before the clock starts. Durable
//! production is also reported as a ratio of the raw `write + fdatasync` bandwidth of the same
//! filesystem, measured in the same run before and after the durable producers (N threads, one
//! file each, one batch-sized write then one fdatasync per step, the same volume). The baseline's
//! writer threads also report their own CPU per step, so the server's CPU per durable batch
//! has a same-command comparator: what the kernel alone charges for the same bytes.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use eddy_client::{ConnectOptions, StreamClient};
use eddy_codec::stream::commands::send_messages::SendMessages;
use eddy_codec::stream::{Consumer, Identifier, Message, Partitioning, PollingStrategy};
use hdrhistogram::Histogram;

use super::result::{
    cpu_seconds, f, histogram, peak_rss_mib, thread_cpu_per_op, thread_cpu_seconds, Run,
};
use super::{Suite, Target};
use crate::conn::{login, Credentials};
use crate::error::CtlError;

/// Which acknowledgement modes to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// `enforce_fsync = true`: acknowledged means on disk.
    Durable,
    /// `enforce_fsync = false`: acknowledged before the fdatasync.
    Fast,
    /// Durable, then fast.
    Both,
}

/// The shape of `eddy bench streams`.
#[derive(Debug, Clone, Args)]
pub struct StreamShape {
    /// Producers, each on its own stream with one partition (and as many consumers).
    #[arg(long, default_value_t = 8)]
    pub producers: usize,
    /// Batches each producer sends.
    #[arg(long, default_value_t = 1000)]
    pub batches: usize,
    /// Messages per batch (and per poll).
    #[arg(long, default_value_t = 1000)]
    pub messages: usize,
    /// Payload bytes per message.
    #[arg(long, default_value_t = 1000)]
    pub size: usize,
    /// Acknowledgement modes to run.
    #[arg(long, value_enum, default_value_t = Mode::Both)]
    pub mode: Mode,
    /// Skip the consumers.
    #[arg(long)]
    pub no_consumers: bool,
    /// Skip the raw write+fdatasync baseline of the disk.
    #[arg(long)]
    pub no_raw_baseline: bool,
    /// Keep the streams written instead of deleting them at the end (to measure what a
    /// server does with the data afterwards: a follower's catch-up, retention).
    #[arg(long)]
    pub keep: bool,
}

impl StreamShape {
    /// Refuses zero counts.
    pub fn check(&self) -> Result<(), CtlError> {
        if self.producers == 0 || self.batches == 0 || self.messages == 0 || self.size == 0 {
            return Err(CtlError::Usage(
                "--producers, --batches, --messages and --size must be at least 1".into(),
            ));
        }
        Ok(())
    }

    fn modes(&self) -> Vec<bool> {
        match self.mode {
            Mode::Durable => vec![true],
            Mode::Fast => vec![false],
            Mode::Both => vec![true, false],
        }
    }

    /// Bytes of one batch on the wire and on disk (batch header, frame headers, payloads).
    pub fn batch_bytes(&self) -> usize {
        256 + self.messages * (48 + self.size)
    }
}

/// One raw writer's latencies and CPU seconds.
type WriterResult = (Histogram<u64>, Option<f64>);

/// The raw baseline: `threads` writers, one file each under `dir`, `steps` x (one `chunk`-byte
/// write + one fdatasync), each step timed. Returns the run.
pub fn raw_write_fdatasync(
    dir: &Path,
    threads: usize,
    steps: usize,
    chunk: usize,
    name: &str,
) -> Result<Run, CtlError> {
    let started = Instant::now();
    let results: Vec<std::io::Result<WriterResult>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let path = dir.join(format!("raw-{t}.bin"));
                scope.spawn(move || {
                    let mut h = histogram();
                    let mut file = OpenOptions::new()
                        .create(true)
                        .truncate(true)
                        .write(true)
                        .open(&path)?;
                    let block = vec![0x5Au8; chunk];
                    let cpu_before = own_thread_cpu_seconds();
                    for _ in 0..steps {
                        let at = Instant::now();
                        file.write_all(&block)?;
                        file.sync_data()?;
                        h.saturating_record(micros(at));
                    }
                    let cpu = own_thread_cpu_seconds()
                        .zip(cpu_before)
                        .map(|(after, before)| after - before);
                    drop(file);
                    std::fs::remove_file(&path)?;
                    Ok((h, cpu))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("writer panicked")))
            })
            .collect()
    });
    let mut all = histogram();
    let mut cpu = Some(0.0);
    for result in results {
        let (h, seconds) = result.map_err(|source| CtlError::Io {
            what: "write the raw baseline in",
            path: dir.to_path_buf(),
            source,
        })?;
        all.add(&h)
            .map_err(|e| CtlError::Failed(format!("merging histograms: {e:?}")))?;
        cpu = cpu.zip(seconds).map(|(sum, s)| sum + s);
    }
    let steps_total = (threads * steps) as u64;
    Ok(Run {
        name: name.to_owned(),
        system: "disk".into(),
        operations: steps_total,
        messages: steps_total,
        bytes: steps_total * chunk as u64,
        seconds: started.elapsed().as_secs_f64(),
        // The same durable work without a server: the writer threads' own CPU (user + system)
        // per step, beside eddy's server CPU per batch in the same column.
        server_cpu_us_per_op: cpu
            .filter(|_| steps_total > 0)
            .map(|s| s * 1e6 / f(steps_total)),
        ..Run::default()
    }
    .finish(&all))
}

/// CPU seconds (user + system) the calling thread has used, from
/// `/proc/thread-self/schedstat` (nanoseconds on the CPU); `None` where it cannot be read.
fn own_thread_cpu_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_ascii_whitespace().next()?.parse().ok()?;
    Some(f(ns) / 1e9)
}

/// Elapsed microseconds since `at`.
pub fn micros(at: Instant) -> u64 {
    u64::try_from(at.elapsed().as_micros()).unwrap_or(u64::MAX)
}

fn stream_name(prefix: &str, p: usize) -> String {
    format!("bench-{prefix}-{p}")
}

/// A logged-in client.
async fn client(
    addr: &str,
    connect: &ConnectOptions,
    credentials: &Credentials,
) -> Result<StreamClient, CtlError> {
    let mut c = StreamClient::connect(addr, connect).await?;
    login(&mut c, credentials).await?;
    Ok(c)
}

async fn setup(
    shape: &StreamShape,
    target: &Target,
    prefix: &str,
    durable: bool,
) -> Result<(), CtlError> {
    let mut admin = client(&target.stream_addr, &target.connect, &target.credentials).await?;
    let options = crate::streams::topic_options(!durable, None, None, &[])?;
    for p in 0..shape.producers {
        let name = stream_name(prefix, p);
        // A stream left by an interrupted run of the same shape.
        let _ = admin
            .delete_stream(
                &Identifier::named(&name).map_err(eddy_client::ClientError::InvalidRequest)?,
            )
            .await;
        admin.create_stream(&name).await?;
        admin
            .create_topic(
                &Identifier::named(&name).map_err(eddy_client::ClientError::InvalidRequest)?,
                "t",
                1,
                options.clone(),
            )
            .await?;
    }
    Ok(())
}

async fn teardown(shape: &StreamShape, target: &Target, prefix: &str) -> Result<(), CtlError> {
    let mut admin = client(&target.stream_addr, &target.connect, &target.credentials).await?;
    for p in 0..shape.producers {
        let id = Identifier::named(&stream_name(prefix, p))
            .map_err(eddy_client::ClientError::InvalidRequest)?;
        admin.delete_stream(&id).await?;
    }
    Ok(())
}

/// The batch one producer sends over and over: payloads tagged with the producer and index.
fn batch(shape: &StreamShape, producer: usize) -> Vec<Message> {
    (0..shape.messages)
        .map(|i| {
            let mut payload = vec![b'x'; shape.size];
            let tag = format!("{producer}-{i}");
            let n = tag.len().min(shape.size);
            payload[..n].copy_from_slice(&tag.as_bytes()[..n]);
            Message::new(
                rand::random::<u128>(),
                eddy_client::stream::now_micros(),
                payload,
            )
        })
        .collect()
}

/// What one worker did.
struct Worker {
    latencies: Histogram<u64>,
    messages: u64,
    bytes: u64,
    error: Option<String>,
}

impl Default for Worker {
    fn default() -> Self {
        Self {
            latencies: histogram(),
            messages: 0,
            bytes: 0,
            error: None,
        }
    }
}

/// `TransientNotAccepted`: the server did not take the request; resending it is safe.
const TRANSIENT: u32 = eddy_codec::stream::ErrorCode::TransientNotAccepted as u32;

/// How long a producer resends a batch answered [`TRANSIENT`].
const TRANSIENT_PATIENCE: Duration = Duration::from_secs(10);

async fn produce(
    mut client: StreamClient,
    request: SendMessages,
    batches: usize,
    payload: u64,
    counters: Arc<super::result::Counters>,
) -> Worker {
    let mut w = Worker::default();
    for _ in 0..batches {
        let at = Instant::now();
        // `TransientNotAccepted` (58) is resent as the Iggy SDK resends it (a cluster's
        // leadership moving, a full request budget): the batch's latency includes the wait.
        let mut sent = client.call(&request).await;
        while matches!(&sent, Err(e) if e.code() == Some(TRANSIENT))
            && at.elapsed() < TRANSIENT_PATIENCE
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
            sent = client.call(&request).await;
        }
        match sent {
            Ok(_) => {
                w.latencies.saturating_record(micros(at));
                w.messages += u64::from(request.messages_count);
                w.bytes += payload;
                counters.done();
            }
            Err(e) => {
                counters.failed();
                w.error = Some(e.one_line());
                break;
            }
        }
    }
    w
}

async fn consume(
    mut client: StreamClient,
    stream: String,
    total: u64,
    step: u32,
    counters: Arc<super::result::Counters>,
) -> Worker {
    let mut w = Worker::default();
    let (Ok(stream_id), topic_id) = (Identifier::named(&stream), Identifier::numeric(0)) else {
        w.error = Some(format!("bad stream name {stream}"));
        return w;
    };
    let consumer = Consumer::new(Identifier::numeric(1));
    let mut next = 0u64;
    while next < total {
        let at = Instant::now();
        let polled = client
            .poll_messages(
                &stream_id,
                &topic_id,
                Some(0),
                &consumer,
                PollingStrategy::Offset(next),
                step,
                false,
            )
            .await;
        match polled {
            Ok(reply) => {
                w.latencies.saturating_record(micros(at));
                counters.done();
                let mut last = None;
                for m in reply.messages() {
                    w.messages += 1;
                    w.bytes += m.payload.len() as u64;
                    last = Some(m.offset);
                }
                let Some(last) = last else {
                    w.error = Some(format!("{stream}: no messages at offset {next}"));
                    counters.failed();
                    break;
                };
                next = last + 1;
            }
            Err(e) => {
                counters.failed();
                w.error = Some(e.one_line());
                break;
            }
        }
    }
    w
}

/// One phase: every worker connects and logs in first, then all run at once under the clock.
async fn phase(
    shape: &StreamShape,
    target: &Target,
    prefix: &str,
    produce_phase: bool,
) -> Result<Run, CtlError> {
    let kind = if produce_phase {
        "producers"
    } else {
        "consumers"
    };
    let name = format!("{prefix} {kind}");
    let total_ops = (shape.producers * shape.batches) as u64;
    let mut recorder = super::result::Recorder::new(&name, Some(total_ops)).with_server(target.pid);
    let mut clients = Vec::with_capacity(shape.producers);
    for _ in 0..shape.producers {
        clients.push(client(&target.stream_addr, &target.connect, &target.credentials).await?);
    }
    let server_cpu = target.pid.and_then(cpu_seconds);
    let server_threads = target.pid.and_then(thread_cpu_seconds);
    let own_cpu = cpu_seconds(std::process::id());
    recorder.start();
    let mut tasks = Vec::with_capacity(shape.producers);
    for (p, c) in clients.into_iter().enumerate() {
        let counters = recorder.counters();
        let stream = stream_name(prefix, p);
        if produce_phase {
            let request = SendMessages::new(
                Identifier::named(&stream).map_err(eddy_client::ClientError::InvalidRequest)?,
                Identifier::numeric(0),
                Partitioning::PartitionId(0),
                &batch(shape, p),
            )
            .map_err(eddy_client::ClientError::InvalidRequest)?;
            let payload = (shape.messages * shape.size) as u64;
            tasks.push(tokio::spawn(produce(
                c,
                request,
                shape.batches,
                payload,
                counters,
            )));
        } else {
            let total = (shape.batches * shape.messages) as u64;
            let step = u32::try_from(shape.messages).unwrap_or(u32::MAX);
            tasks.push(tokio::spawn(consume(c, stream, total, step, counters)));
        }
    }
    let workers = recorder
        .sample_until(async {
            let mut out = Vec::with_capacity(tasks.len());
            for t in tasks {
                out.push(t.await);
            }
            out
        })
        .await;
    let seconds = recorder.elapsed();
    let timeline = recorder.finish();
    let mut latencies = histogram();
    let mut run = Run {
        name,
        system: target.system.clone(),
        seconds,
        timeline,
        ..Run::default()
    };
    let mut first_error = None;
    for w in workers {
        let w = w.map_err(|e| CtlError::Failed(format!("a benchmark worker failed: {e}")))?;
        latencies
            .add(&w.latencies)
            .map_err(|e| CtlError::Failed(format!("merging histograms: {e:?}")))?;
        run.messages += w.messages;
        run.bytes += w.bytes;
        if w.error.is_some() {
            run.errors += 1;
            first_error = first_error.or(w.error);
        }
    }
    if let Some(e) = first_error {
        eprintln!("eddy bench: {}: {e}", run.name);
    }
    run.operations = latencies.len();
    let ops = f(run.operations.max(1));
    run.server_cpu_us_per_op = server_cpu
        .zip(target.pid.and_then(cpu_seconds))
        .map(|(a, b)| (b - a) * 1e6 / ops);
    run.server_threads_cpu_us_per_op = thread_cpu_per_op(
        server_threads.as_ref(),
        target.pid.and_then(thread_cpu_seconds).as_ref(),
        run.operations,
    );
    run.client_cpu_us_per_op = own_cpu
        .zip(cpu_seconds(std::process::id()))
        .map(|(a, b)| (b - a) * 1e6 / ops);
    run.server_peak_rss_mib = target.pid.and_then(peak_rss_mib);
    Ok(run.finish(&latencies))
}

/// Runs every mode against `target`.
pub async fn suite(shape: &StreamShape, target: &Target) -> Result<Suite, CtlError> {
    let mut suite = Suite::default();
    let batch_bytes = shape.batch_bytes();
    let raw_dir: Option<PathBuf> = (!shape.no_raw_baseline).then(|| target.dir.clone());
    for durable in shape.modes() {
        let prefix = if durable { "durable" } else { "fast" };
        setup(shape, target, prefix, durable).await?;
        let raw_before = match (&raw_dir, durable) {
            (Some(dir), true) => Some(raw_write_fdatasync(
                dir,
                shape.producers,
                shape.batches,
                batch_bytes,
                "raw write+fdatasync (before)",
            )?),
            _ => None,
        };
        let produced = phase(shape, target, prefix, true).await?;
        if let (Some(dir), Some(before)) = (&raw_dir, raw_before) {
            // A shared host's disk drifts: measure again right after and compare with the mean.
            let after = raw_write_fdatasync(
                dir,
                shape.producers,
                shape.batches,
                batch_bytes,
                "raw write+fdatasync (after)",
            )?;
            let mean = f64::midpoint(before.mb_per_sec, after.mb_per_sec);
            if mean > 0.0 {
                let on_disk = produced.messages_per_sec * f(batch_bytes as u64)
                    / f(shape.messages as u64)
                    / 1e6;
                suite.notes.push(format!(
                    "{}: durable producer throughput / raw write+fdatasync (mean of before and after) = {:.2} \
                     (counting the bytes written, frame headers included: {:.2})",
                    target.system,
                    produced.mb_per_sec / mean,
                    on_disk / mean
                ));
            }
            if let (Some(eddy), Some(b), Some(a)) = (
                produced.server_cpu_us_per_op,
                before.server_cpu_us_per_op,
                after.server_cpu_us_per_op,
            ) {
                let raw = f64::midpoint(b, a);
                if raw > 0.0 {
                    suite.notes.push(format!(
                        "{}: durable producer server CPU per batch / raw write+fdatasync CPU per \
                         step (mean of before and after) = {:.2} ({:.3} / {:.3} us per message)",
                        target.system,
                        eddy / raw,
                        eddy / f(shape.messages as u64),
                        raw / f(shape.messages as u64)
                    ));
                }
            }
            suite.runs.push(before);
            suite.runs.push(produced);
            suite.runs.push(after);
        } else {
            suite.runs.push(produced);
        }
        if !shape.no_consumers {
            suite.runs.push(phase(shape, target, prefix, false).await?);
        }
        if !shape.keep {
            teardown(shape, target, prefix).await?;
        }
    }
    Ok(suite)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_baseline_counts_every_step() {
        let dir = tempfile::tempdir().unwrap();
        let run = raw_write_fdatasync(dir.path(), 2, 3, 4096, "raw").unwrap();
        assert_eq!(run.operations, 6);
        assert_eq!(run.bytes, 6 * 4096);
        assert_eq!(run.latency_us.count, 6);
        assert!(run.mb_per_sec > 0.0);
        // Linux: the writers' own CPU is measured.
        assert!(run.server_cpu_us_per_op.is_some_and(|us| us > 0.0));
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "files removed"
        );
    }

    #[test]
    fn shapes() {
        let shape = StreamShape {
            producers: 2,
            batches: 3,
            messages: 10,
            size: 100,
            mode: Mode::Both,
            no_consumers: false,
            no_raw_baseline: false,
            keep: false,
        };
        shape.check().unwrap();
        assert_eq!(shape.modes(), [true, false]);
        assert_eq!(shape.batch_bytes(), 256 + 10 * 148);
        let b = batch(&shape, 1);
        assert_eq!(b.len(), 10);
        assert!(b[3].payload.starts_with(b"1-3"));
        assert!(StreamShape { size: 0, ..shape }.check().is_err());
    }
}
