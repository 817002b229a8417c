//! The `eddy` command line: argument parsing, configuration layering, logging and start-up.
//!
//! The binary (`bins/eddy/src/main.rs`) is a thin call of [`main`]; the real-process tests
//! (`tests/`) build the very same entry point into a binary of their own package.
//!
//! Configuration precedence, highest first: flags, environment (`EDDY_*`), the TOML file given
//! by `--config`, built-in defaults. Every option has one name in all three: `--data-dir`,
//! `EDDY_DATA_DIR`, `data_dir`.
//!
//! Exit codes: 0 clean stop, 1 runtime failure (port in use, data dir locked or unwritable),
//! 2 usage error (clap), 78 configuration error (`EX_CONFIG`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

use eddy_server::config::{self as cfg, LogFormat, LogRotation, ServerConfig};

/// Exit code for configuration errors (sysexits `EX_CONFIG`).
pub const EXIT_CONFIG: u8 = 78;
/// Exit code for runtime failures.
pub const EXIT_FAILURE: u8 = 1;

/// eddy: a durable log server. One binary serves Apache Iggy's stream protocol and Celeriant's
/// event protocol on one storage engine.
#[derive(Debug, Parser)]
#[command(name = "eddy", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Sub-commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server.
    #[command(long_about = SERVE_ABOUT)]
    Serve(Box<ServeArgs>),
    /// The client subcommands (`eddy_ctl`): status, streams, events, bench.
    #[command(flatten)]
    Client(Box<eddy_ctl::Command>),
}

const SERVE_ABOUT: &str = "Run the server.

Listens on 127.0.0.1 by default: the stream (Iggy) protocol on 8090, the event (Celeriant)
protocol on 10000, replication on 10001 and HTTP (/health, /metrics) on 10002.

Every option can be set three ways, highest precedence first: the flag (--data-dir), the
environment variable (EDDY_DATA_DIR), or the key in the TOML file given by --config (data_dir).

Examples:
  eddy serve
  eddy serve --data-dir /var/lib/eddy --host 0.0.0.0
  EDDY_ROOT_PASSWORD=change-me eddy serve --config /etc/eddy/eddy.toml";

/// Options of `eddy serve`: the configuration file and every option of [`ServerConfig`] (its
/// fields are the flags, environment variables and TOML keys).
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// TOML configuration file (keys as the flags, with '_' for '-').
    #[arg(long, env = "EDDY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Every option of the server: flag, environment variable and TOML key.
    #[command(flatten)]
    pub server: ServerConfig,
}

/// A failure that ends the process, with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    /// One line for stderr.
    pub message: String,
    /// Process exit code.
    pub code: u8,
}

fn config_error(message: String) -> Failure {
    Failure {
        message,
        code: EXIT_CONFIG,
    }
}

/// The resolved configuration plus what logging needs to know about it.
#[derive(Debug)]
pub struct Resolved {
    /// The merged configuration.
    pub config: ServerConfig,
    /// Whether the log level was set by flag, env or file (otherwise `RUST_LOG` applies).
    pub log_level_explicit: bool,
}

/// Layers flags and env (from `matches`), the config file and defaults into one [`ServerConfig`].
pub fn resolve(args: &ServeArgs, matches: &ArgMatches) -> Result<Resolved, Failure> {
    let defaults = toml::Table::try_from(ServerConfig::default())
        .map_err(|e| config_error(format!("internal: cannot serialize defaults: {e}")))?;
    let mut merged = defaults;

    let mut file_keys = Vec::new();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path).map_err(|e| {
            config_error(format!("cannot read config file {}: {e}", path.display()))
        })?;
        // Parse as the typed config first so unknown keys and wrong types get a precise message.
        toml::from_str::<ServerConfig>(&text).map_err(|e| {
            config_error(format!(
                "config file {}: {}",
                path.display(),
                e.message().trim()
            ))
        })?;
        let table: toml::Table = toml::from_str(&text).map_err(|e| {
            config_error(format!(
                "config file {}: {}",
                path.display(),
                e.message().trim()
            ))
        })?;
        for (k, v) in table {
            file_keys.push(k.clone());
            merged.insert(k, v);
        }
    }

    let given = toml::Table::try_from(&args.server)
        .map_err(|e| config_error(format!("internal: cannot serialize flags: {e}")))?;
    let mut log_level_explicit = file_keys.iter().any(|k| k == "log_level");
    for (key, value) in given {
        let from_user = matches!(
            matches.value_source(&key),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if from_user {
            if key == "log_level" {
                log_level_explicit = true;
            }
            merged.insert(key, value);
        }
    }
    let config: ServerConfig = merged.try_into().map_err(|e: toml::de::Error| {
        config_error(format!("configuration: {}", e.message().trim()))
    })?;
    config
        .validate()
        .map_err(|e| config_error(format!("configuration: {e}")))?;
    Ok(Resolved {
        config,
        log_level_explicit,
    })
}

fn init_logging(resolved: &Resolved) -> Result<(), Failure> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::EnvFilter;
    let config = &resolved.config;
    let filter = if !resolved.log_level_explicit && std::env::var_os("RUST_LOG").is_some() {
        EnvFilter::try_from_default_env().map_err(|e| config_error(format!("RUST_LOG: {e}")))?
    } else {
        EnvFilter::try_new(&config.log_level).map_err(|e| {
            config_error(format!(
                "invalid value for log_level {:?}: {e}",
                config.log_level
            ))
        })?
    };
    let json = config.log_format == LogFormat::Json;
    let stderr = fmt_layer(
        json,
        std::io::stderr,
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
    );
    let file = match &config.log_dir {
        Some(dir) => Some(fmt_layer(
            json,
            std::sync::Mutex::new(log_file(dir, config)?),
            false,
        )),
        None => None,
    };
    let result = tracing_subscriber::registry()
        .with(filter)
        .with(stderr)
        .with(file)
        .try_init();
    // A subscriber already installed (tests calling `run` twice) is fine.
    drop(result);
    Ok(())
}

/// One formatting layer (text or JSON) writing to `writer`.
fn fmt_layer<S, W>(
    json: bool,
    writer: W,
    ansi: bool,
) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer as _;
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(ansi);
    if json {
        layer.json().flatten_event(true).boxed()
    } else {
        layer.boxed()
    }
}

/// The rotating log file `<dir>/eddy.log`; the directory is created, and must be writable.
fn log_file(
    dir: &std::path::Path,
    config: &ServerConfig,
) -> Result<Box<dyn std::io::Write + Send>, Failure> {
    use file_rotate::compression::Compression;
    use file_rotate::suffix::{AppendCount, AppendTimestamp, FileLimit};
    use file_rotate::{ContentLimit, FileRotate, TimeFrequency};
    let path = dir.join(cfg::LOG_FILE_NAME);
    std::fs::create_dir_all(dir)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
        })
        .map_err(|e| Failure {
            message: format!("cannot write the log file {}: {e}", path.display()),
            code: EXIT_FAILURE,
        })?;
    let keep = config.log_max_files as usize;
    let by_time = |frequency| -> Box<dyn std::io::Write + Send> {
        Box::new(FileRotate::new(
            &path,
            AppendTimestamp::default(FileLimit::MaxFiles(keep)),
            ContentLimit::Time(frequency),
            Compression::None,
            None,
        ))
    };
    Ok(match config.log_rotation {
        LogRotation::Size => Box::new(FileRotate::new(
            &path,
            AppendCount::new(keep),
            ContentLimit::BytesSurpassed(
                usize::try_from(config.log_max_file_bytes).unwrap_or(usize::MAX),
            ),
            Compression::None,
            None,
        )),
        LogRotation::Hourly => by_time(TimeFrequency::Hourly),
        LogRotation::Daily => by_time(TimeFrequency::Daily),
        LogRotation::Never => Box::new(FileRotate::new(
            &path,
            AppendCount::new(keep),
            ContentLimit::None,
            Compression::None,
            None,
        )),
    })
}

/// SIGTERM and SIGINT handlers, installed before anything else so an early signal is never lost
/// to the default action.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves at the first SIGTERM or SIGINT; a second signal exits at once.
    async fn first(mut self) {
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM received"),
            _ = self.int.recv() => tracing::info!("SIGINT received"),
        }
        tokio::spawn(async move {
            tokio::select! {
                _ = self.term.recv() => {},
                _ = self.int.recv() => {},
            }
            tracing::warn!("second signal: exiting without draining");
            std::process::exit(i32::from(EXIT_FAILURE));
        });
    }
}

/// Runs `eddy serve` with already-parsed arguments; returns the process exit code.
pub fn serve(args: &ServeArgs, matches: &ArgMatches) -> Result<(), Failure> {
    let resolved = resolve(args, matches)?;
    // Before the log files and the data directory are created: readable by this user only.
    eddy_server::data_dir::restrict_umask();
    init_logging(&resolved)?;
    tracing::info!(config = ?resolved.config, version = env!("CARGO_PKG_VERSION"), "starting eddy");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("eddy")
        .build()
        .map_err(|e| Failure {
            message: format!("cannot start the async runtime: {e}"),
            code: EXIT_FAILURE,
        })?;
    runtime.block_on(async {
        let signals = Signals::install().map_err(|e| Failure {
            message: format!("cannot install signal handlers: {e}"),
            code: EXIT_FAILURE,
        })?;
        let server = eddy_server::Server::bind(resolved.config)
            .await
            .map_err(|e| Failure {
                code: if e.is_config() {
                    EXIT_CONFIG
                } else {
                    EXIT_FAILURE
                },
                message: eddy_server::error_chain(&e),
            })?;
        server.run(signals.first()).await.map_err(|e| Failure {
            code: EXIT_FAILURE,
            message: eddy_server::error_chain(&e),
        })
    })
}

/// Entry point of the `eddy` binary.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// Entry point with explicit arguments (tests).
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = Cli::command().get_matches_from(args);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match &cli.command {
        Command::Serve(args) => {
            let Some(("serve", sub)) = matches.subcommand() else {
                unreachable!("clap parsed the serve subcommand")
            };
            serve(args, sub)
        }
        Command::Client(command) => return eddy_ctl::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("eddy: error: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> (ServeArgs, ArgMatches) {
        let m = Cli::command().try_get_matches_from(args).unwrap();
        let sub = m.subcommand_matches("serve").unwrap().clone();
        let cli = Cli::from_arg_matches(&m).unwrap();
        let Command::Serve(a) = cli.command else {
            panic!("not serve")
        };
        (*a, sub)
    }

    #[test]
    fn peers_repeat_as_flags() {
        let (args, m) = parse(&[
            "eddy",
            "serve",
            "--node-id",
            "2",
            "--peer",
            "1=127.0.0.1:10001",
            "--peer",
            "3=127.0.0.3:10001",
            "--insecure-peer-plaintext",
        ]);
        let r = resolve(&args, &m).unwrap();
        assert_eq!(r.config.node_id, 2);
        assert_eq!(r.config.peers, ["1=127.0.0.1:10001", "3=127.0.0.3:10001"]);
        let (args, m) = parse(&[
            "eddy",
            "serve",
            "--peer",
            "1=x:1,3=y:1",
            "--node-id",
            "2",
            "--insecure-peer-plaintext",
        ]);
        assert_eq!(resolve(&args, &m).unwrap().config.peers, ["1=x:1", "3=y:1"]);
        let (args, m) = parse(&["eddy", "serve", "--peer", "1=x:1"]);
        assert!(
            resolve(&args, &m).is_err(),
            "a peer with this node's own id"
        );
    }

    #[test]
    fn a_member_without_peer_tls_refuses_to_start_and_names_the_flags() {
        let member = ["eddy", "serve", "--node-id", "2", "--peer", "1=x:1"];
        let (args, m) = parse(&member);
        let refused = resolve(&args, &m).unwrap_err();
        assert_eq!(refused.code, EXIT_CONFIG);
        for flag in [
            "--peer-tls-cert",
            "--peer-tls-key",
            "--peer-tls-ca",
            "--insecure-peer-plaintext",
        ] {
            assert!(refused.message.contains(flag), "{}", refused.message);
        }
        // Part of the TLS flags: the missing ones are named.
        let (args, m) = parse(&[&member[..], &["--peer-tls-cert", "c.pem"]].concat());
        let refused = resolve(&args, &m).unwrap_err();
        assert!(
            refused
                .message
                .contains("--peer-tls-key, --peer-tls-ca missing"),
            "{}",
            refused.message
        );
        // All three, or plaintext said in so many words: it starts.
        let tls = [
            "--peer-tls-cert",
            "c",
            "--peer-tls-key",
            "k",
            "--peer-tls-ca",
            "ca",
        ];
        let (args, m) = parse(&[&member[..], &tls].concat());
        assert!(resolve(&args, &m).unwrap().config.peer_tls_enabled());
        let (args, m) = parse(&[&member[..], &["--insecure-peer-plaintext"]].concat());
        assert!(resolve(&args, &m).is_ok());
        // Both at once is ambiguous; plaintext under strict TLS is a contradiction.
        let (args, m) = parse(&[&member[..], &tls, &["--insecure-peer-plaintext"]].concat());
        assert!(resolve(&args, &m).is_err());
        let strict = [
            "--tls-mode",
            "strict",
            "--tls-cert",
            "c",
            "--tls-key",
            "k",
            "--tls-client-auth",
            "none",
        ];
        let (args, m) = parse(&[&member[..], &strict, &["--insecure-peer-plaintext"]].concat());
        let refused = resolve(&args, &m).unwrap_err();
        assert!(refused.message.contains("strict"), "{}", refused.message);
        let (args, m) = parse(&[&member[..], &strict, &tls].concat());
        assert!(resolve(&args, &m).is_ok());
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_config_key_has_a_flag_and_env_of_the_same_name() {
        // Optional keys are only serialized when set, so set them all.
        let full = ServerConfig {
            tls_cert: Some("c".into()),
            tls_key: Some("k".into()),
            tls_ca_cert: Some("ca".into()),
            encryption_key: Some("k".into()),
            num_shards: Some(2),
            advertise_host: Some("h".into()),
            replication_host: Some(std::net::IpAddr::from([127, 0, 0, 1])),
            peer_tls_cert: Some("c".into()),
            peer_tls_key: Some("k".into()),
            peer_tls_ca: Some("ca".into()),
            peers: vec!["2=h:1".into()],
            log_dir: Some("logs".into()),
            max_connections_per_ip: Some(8),
            ..ServerConfig::default()
        };
        let keys: Vec<String> = toml::Table::try_from(full)
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let cmd = Cli::command();
        let serve = cmd.find_subcommand("serve").unwrap();
        for key in &keys {
            let arg = serve
                .get_arguments()
                .find(|a| a.get_id().as_str() == key)
                .unwrap_or_else(|| panic!("config key {key} has no flag"));
            // `peers` is the one list: its flag is the singular `--peer`, repeated.
            let long = if key == "peers" {
                "peer".to_owned()
            } else {
                key.replace('_', "-")
            };
            assert_eq!(arg.get_long(), Some(long.as_str()));
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some(format!("EDDY_{}", key.to_uppercase()).as_str())
            );
        }
        let flags = serve
            .get_arguments()
            .filter(|a| !["config", "help", "version"].contains(&a.get_id().as_str()))
            .count();
        assert_eq!(flags, keys.len(), "a flag without a config key");
    }

    #[test]
    fn every_listed_value_of_an_enumerated_option_parses() {
        let cli = Cli::command();
        let serve = cli.find_subcommand("serve").unwrap();
        let mut checked = 0;
        for arg in serve.get_arguments() {
            let long = arg.get_long().unwrap_or_default();
            for value in arg.get_possible_values() {
                if value.is_hide_set() || long.is_empty() {
                    continue;
                }
                let flag = format!("--{long}");
                Cli::command()
                    .try_get_matches_from(["eddy", "serve", &flag, value.get_name()])
                    .unwrap_or_else(|e| panic!("{flag} {}: {e}", value.get_name()));
                checked += 1;
            }
        }
        // tls_mode 2, tls_client_auth 3, log_format 2, log_rotation 4, routing_rule 3,
        // fsync_delay_when 2, replicated_durability 2 (booleans list true/false too).
        assert!(checked >= 18, "only {checked} listed values");
    }

    #[test]
    fn defaults_resolve_to_the_default_config() {
        let (a, m) = parse(&["eddy", "serve"]);
        let r = resolve(&a, &m).unwrap();
        assert_eq!(r.config, ServerConfig::default());
        assert!(!r.log_level_explicit);
    }

    #[test]
    fn the_per_address_cap_and_its_exemptions_parse() {
        let (a, m) = parse(&["eddy", "serve"]);
        let r = resolve(&a, &m).unwrap();
        assert_eq!(r.config.max_connections_per_ip, None);
        assert_eq!(
            r.config.max_connections_per_ip_exempt,
            ["127.0.0.0/8", "::1"]
        );
        let (a, m) = parse(&[
            "eddy",
            "serve",
            "--max-connections-per-ip",
            "0",
            "--max-connections-per-ip-exempt",
            "10.0.0.0/8,192.0.2.1",
        ]);
        let r = resolve(&a, &m).unwrap();
        assert_eq!(r.config.max_connections_per_ip, Some(0));
        assert_eq!(
            r.config.max_connections_per_ip_exempt,
            ["10.0.0.0/8", "192.0.2.1"]
        );
        // An empty value exempts nothing.
        let (a, m) = parse(&["eddy", "serve", "--max-connections-per-ip-exempt", ""]);
        let r = resolve(&a, &m).unwrap();
        assert!(r
            .config
            .max_connections_per_ip_exempt
            .iter()
            .all(String::is_empty));
        let (a, m) = parse(&[
            "eddy",
            "serve",
            "--max-connections-per-ip-exempt",
            "10.0.0.0/40",
        ]);
        let e = resolve(&a, &m).unwrap_err();
        assert_eq!(e.code, EXIT_CONFIG);
        assert!(
            e.message.contains("max_connections_per_ip_exempt"),
            "{}",
            e.message
        );
        let (a, m) = parse(&["eddy", "serve", "--max-inflight-request-bytes", "1000"]);
        let e = resolve(&a, &m).unwrap_err();
        assert!(
            e.message.contains("max_inflight_request_bytes"),
            "{}",
            e.message
        );
    }

    #[test]
    fn flags_beat_file_and_file_beats_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("eddy.toml");
        std::fs::write(
            &file,
            "stream_port = 9100\nclient_port = 9200\nlog_level = \"debug\"\n",
        )
        .unwrap();
        let file_s = file.to_str().unwrap();
        let (a, m) = parse(&["eddy", "serve", "--config", file_s, "--stream-port", "9300"]);
        let r = resolve(&a, &m).unwrap();
        assert_eq!(r.config.stream_port, 9300);
        assert_eq!(r.config.client_port, 9200);
        assert_eq!(r.config.http_port, cfg::DEFAULT_HTTP_PORT);
        assert!(r.log_level_explicit);
    }

    #[test]
    fn bad_file_value_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "stream_port = \"eighty\"\n").unwrap();
        let (a, m) = parse(&["eddy", "serve", "--config", file.to_str().unwrap()]);
        let e = resolve(&a, &m).unwrap_err();
        assert_eq!(e.code, EXIT_CONFIG);
        assert!(e.message.contains("bad.toml"), "{}", e.message);
        std::fs::write(&file, "wal_compression_level = 40\n").unwrap();
        let e = resolve(&a, &m).unwrap_err();
        assert!(e.message.contains("wal_compression_level"), "{}", e.message);
    }
}
