//! `cargo xtask train-dict`: trains the built-in zstd dictionary of the event protocol.
//!
//! The corpus is `eddy_wire::event::sample::SampleEvents::new(TRAINING_SEED)`, a
//! deterministic stream of synthetic JSON events, so running the task again with the same
//! options reproduces the committed `crates/eddy-wire/dict/default.dict` byte for byte.
//!
//! Options: `--out PATH` (default `crates/eddy-wire/dict/default.dict`), `--samples N`
//! (default 20000), `--max-size BYTES` (default 16384), `--seed N` (default the training
//! seed), `--check` (train and compare with the file instead of writing it).

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context as _};
use eddy_wire::event::sample::{SampleEvents, TRAINING_SEED};
use eddy_wire::event::{sha256_hex, Dictionary, DEFAULT_COMPRESSION_LEVEL, MAX_DICTIONARY_LEN};

/// Default number of training samples.
const DEFAULT_SAMPLES: usize = 20_000;
/// Upper bound of the sample count option (keeps the corpus in memory comfortably).
const MAX_SAMPLES: usize = 1_000_000;
/// Default dictionary size (zstd's trainer may produce slightly less).
const DEFAULT_MAX_SIZE: usize = 16 * 1024;
/// Smallest useful dictionary size.
const MIN_MAX_SIZE: usize = 1024;

struct Options {
    out: PathBuf,
    samples: usize,
    max_size: usize,
    seed: u64,
    check: bool,
}

fn default_out() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/eddy-wire/dict/default.dict")
}

fn parse(args: &[String]) -> anyhow::Result<Options> {
    let mut options = Options {
        out: default_out(),
        samples: DEFAULT_SAMPLES,
        max_size: DEFAULT_MAX_SIZE,
        seed: TRAINING_SEED,
        check: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--out" => options.out = PathBuf::from(value("--out")?),
            "--samples" => options.samples = value("--samples")?.parse().context("--samples")?,
            "--max-size" => {
                options.max_size = value("--max-size")?.parse().context("--max-size")?;
            }
            "--seed" => options.seed = value("--seed")?.parse().context("--seed")?,
            "--check" => options.check = true,
            other => bail!(
                "unknown option {other:?} (expected --out, --samples, --max-size, --seed, --check)"
            ),
        }
    }
    if !(1..=MAX_SAMPLES).contains(&options.samples) {
        bail!("--samples must be within 1..={MAX_SAMPLES}");
    }
    if !(MIN_MAX_SIZE..=MAX_DICTIONARY_LEN).contains(&options.max_size) {
        bail!("--max-size must be within {MIN_MAX_SIZE}..={MAX_DICTIONARY_LEN}");
    }
    Ok(options)
}

/// Entry point of `cargo xtask train-dict ARGS`.
pub fn run(args: &[String]) -> anyhow::Result<()> {
    let options = parse(args)?;
    let samples: Vec<Vec<u8>> = SampleEvents::new(options.seed)
        .take(options.samples)
        .collect();
    let corpus_len: usize = samples.iter().map(Vec::len).sum();
    let dict = zstd::dict::from_samples(&samples, options.max_size)
        .context("zstd dictionary training failed")?;
    // Refuse to write anything the server would refuse to load.
    let loaded = Dictionary::from_bytes(dict.clone(), DEFAULT_COMPRESSION_LEVEL)
        .context("trained dictionary does not load")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "trained {} bytes from {} samples ({corpus_len} bytes), sha256 {}",
        dict.len(),
        samples.len(),
        loaded.sha256_hex()
    )?;
    if options.check {
        let existing = std::fs::read(&options.out)
            .with_context(|| format!("reading {}", options.out.display()))?;
        if existing != dict {
            bail!(
                "{} (sha256 {}) differs from a fresh training run",
                options.out.display(),
                sha256_hex(&existing)
            );
        }
        writeln!(stdout, "{} is up to date", options.out.display())?;
        return Ok(());
    }
    if let Some(parent) = options.out.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(&options.out, &dict)
        .with_context(|| format!("writing {}", options.out.display()))?;
    writeln!(stdout, "wrote {}", options.out.display())?;
    Ok(())
}
