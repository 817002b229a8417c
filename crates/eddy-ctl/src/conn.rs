//! Connection settings of every client subcommand: addresses, credentials, TLS, timeouts and
//! the output format, layered flags > environment > config file > defaults.
//!
//! The config file is TOML with the flag names as keys (`stream_addr`, `username`,
//! `tls_ca_file`, ...); it is `--config FILE` (`EDDY_CLI_CONFIG`), else
//! `$XDG_CONFIG_HOME/eddy/cli.toml` or `~/.config/eddy/cli.toml` when that exists. Unknown
//! keys are refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use eddy_client::{ConnectOptions, EventClient, StreamClient, TlsOptions};
use serde::Deserialize;

use crate::error::CtlError;
use crate::output::Format;

/// Default stream (Iggy) protocol port.
pub const DEFAULT_STREAM_PORT: u16 = 8090;
/// Default event (Celeriant) protocol port.
pub const DEFAULT_EVENT_PORT: u16 = 10000;
/// Default HTTP port (`/health`, `/metrics`).
pub const DEFAULT_HTTP_PORT: u16 = 10002;
/// Default host.
pub const DEFAULT_HOST: &str = "127.0.0.1";

/// Where the server is, who you are, how to reach it, how to print.
#[derive(Debug, Clone, Default, Args)]
pub struct ConnArgs {
    /// Host (or host:port of the stream port) of the server; each protocol's default port is
    /// used unless its own address is given.
    #[arg(long, env = "EDDY_ADDR", global = true, value_name = "HOST")]
    pub addr: Option<String>,

    /// Stream (Iggy) protocol address [default: 127.0.0.1:8090].
    #[arg(
        long,
        env = "EDDY_STREAM_ADDR",
        global = true,
        value_name = "HOST:PORT"
    )]
    pub stream_addr: Option<String>,

    /// Event (Celeriant) protocol address [default: 127.0.0.1:10000].
    #[arg(long, env = "EDDY_EVENT_ADDR", global = true, value_name = "HOST:PORT")]
    pub event_addr: Option<String>,

    /// HTTP address of /health and /metrics [default: 127.0.0.1:10002].
    #[arg(long, env = "EDDY_HTTP_ADDR", global = true, value_name = "HOST:PORT")]
    pub http_addr: Option<String>,

    /// User to log in as (stream protocol).
    #[arg(long, short = 'u', env = "EDDY_USERNAME", global = true)]
    pub username: Option<String>,

    /// Password of --username. Prefer the environment variable to the flag.
    #[arg(
        long,
        short = 'p',
        env = "EDDY_PASSWORD",
        global = true,
        hide_env_values = true
    )]
    pub password: Option<String>,

    /// Personal access token to log in with instead of a password.
    #[arg(long, env = "EDDY_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,

    /// TOML file with any of these settings (keys as the flags, '_' for '-').
    #[arg(long, env = "EDDY_CLI_CONFIG", global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Connect with TLS (implied by any other --tls-* option).
    #[arg(long, env = "EDDY_TLS", global = true)]
    pub tls: bool,

    /// PEM CA bundle the server certificate must chain to.
    #[arg(long, env = "EDDY_TLS_CA_FILE", global = true, value_name = "FILE")]
    pub tls_ca_file: Option<PathBuf>,

    /// Name the server certificate must carry [default: the host of the address].
    #[arg(long, env = "EDDY_TLS_SERVER_NAME", global = true)]
    pub tls_server_name: Option<String>,

    /// PEM client certificate, for a server that requires mTLS.
    #[arg(long, env = "EDDY_TLS_CLIENT_CERT", global = true, value_name = "FILE")]
    pub tls_client_cert: Option<PathBuf>,

    /// PEM private key of --tls-client-cert.
    #[arg(long, env = "EDDY_TLS_CLIENT_KEY", global = true, value_name = "FILE")]
    pub tls_client_key: Option<PathBuf>,

    /// Accept any server certificate (tests with throwaway certificates only).
    #[arg(long, env = "EDDY_TLS_INSECURE", global = true)]
    pub tls_insecure: bool,

    /// Seconds to wait for a connection or an answer [default: 10].
    #[arg(long, env = "EDDY_TIMEOUT", global = true, value_name = "SECONDS")]
    pub timeout: Option<u64>,

    /// Output: a table for people, json (one document) or jsonl (one object per line).
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

/// The config file: every setting optional, unknown keys refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// See [`ConnArgs::addr`].
    pub addr: Option<String>,
    /// See [`ConnArgs::stream_addr`].
    pub stream_addr: Option<String>,
    /// See [`ConnArgs::event_addr`].
    pub event_addr: Option<String>,
    /// See [`ConnArgs::http_addr`].
    pub http_addr: Option<String>,
    /// See [`ConnArgs::username`].
    pub username: Option<String>,
    /// See [`ConnArgs::password`].
    pub password: Option<String>,
    /// See [`ConnArgs::token`].
    pub token: Option<String>,
    /// See [`ConnArgs::tls`].
    pub tls: Option<bool>,
    /// See [`ConnArgs::tls_ca_file`].
    pub tls_ca_file: Option<PathBuf>,
    /// See [`ConnArgs::tls_server_name`].
    pub tls_server_name: Option<String>,
    /// See [`ConnArgs::tls_client_cert`].
    pub tls_client_cert: Option<PathBuf>,
    /// See [`ConnArgs::tls_client_key`].
    pub tls_client_key: Option<PathBuf>,
    /// See [`ConnArgs::tls_insecure`].
    pub tls_insecure: Option<bool>,
    /// See [`ConnArgs::timeout`].
    pub timeout: Option<u64>,
}

/// How to log in on the stream protocol.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// Username and password.
    Password {
        /// Username.
        username: String,
        /// Password.
        password: String,
    },
    /// A personal access token.
    Token(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Password { username, .. } => write!(f, "Password({username}, <redacted>)"),
            Self::Token(_) => f.write_str("Token(<redacted>)"),
        }
    }
}

/// The merged settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Stream protocol `host:port`.
    pub stream_addr: String,
    /// Event protocol `host:port`.
    pub event_addr: String,
    /// HTTP `host:port`.
    pub http_addr: String,
    /// How to log in, if anything was given.
    pub credentials: Option<Credentials>,
    /// Socket options.
    pub connect: ConnectOptions,
    /// Output format.
    pub format: Format,
}

fn default_config_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    let path = base.join("eddy").join("cli.toml");
    path.is_file().then_some(path)
}

/// Reads a config file.
pub fn read_config(path: &Path) -> Result<ConfigFile, CtlError> {
    let text = std::fs::read_to_string(path).map_err(|source| CtlError::Io {
        what: "read the config file",
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| {
        CtlError::Usage(format!(
            "config file {}: {}",
            path.display(),
            e.message().trim()
        ))
    })
}

/// `host` with `port` unless it already names one.
fn with_port(host: &str, port: u16) -> String {
    let bare_ipv6 = host.matches(':').count() > 1 && !host.starts_with('[');
    if bare_ipv6 {
        return format!("[{host}]:{port}");
    }
    if host
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        host.to_owned()
    } else {
        format!("{host}:{port}")
    }
}

fn host_only(addr: &str) -> String {
    match addr.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() && !host.is_empty() => host.to_owned(),
        _ => addr.to_owned(),
    }
}

impl ConnArgs {
    /// Merges flags and environment (already in `self`) over the config file and defaults.
    pub fn resolve(&self) -> Result<Settings, CtlError> {
        let file = match self.config.clone().or_else(default_config_path) {
            Some(path) => read_config(&path)?,
            None => ConfigFile::default(),
        };
        self.resolve_with(&file)
    }

    /// [`ConnArgs::resolve`] with the config file already read.
    pub fn resolve_with(&self, file: &ConfigFile) -> Result<Settings, CtlError> {
        let pick =
            |flag: &Option<String>, key: &Option<String>| flag.clone().or_else(|| key.clone());
        let host =
            pick(&self.addr, &file.addr).map_or_else(|| DEFAULT_HOST.to_owned(), |a| host_only(&a));
        let stream_addr = pick(&self.stream_addr, &file.stream_addr)
            .or_else(|| pick(&self.addr, &file.addr))
            .map_or_else(
                || with_port(&host, DEFAULT_STREAM_PORT),
                |a| with_port(&a, DEFAULT_STREAM_PORT),
            );
        let event_addr = pick(&self.event_addr, &file.event_addr).map_or_else(
            || with_port(&host, DEFAULT_EVENT_PORT),
            |a| with_port(&a, DEFAULT_EVENT_PORT),
        );
        let http_addr = pick(&self.http_addr, &file.http_addr).map_or_else(
            || with_port(&host, DEFAULT_HTTP_PORT),
            |a| with_port(&a, DEFAULT_HTTP_PORT),
        );

        let username = pick(&self.username, &file.username);
        let password = pick(&self.password, &file.password);
        let token = pick(&self.token, &file.token);
        let credentials = match (username, password, token) {
            (Some(username), Some(password), _) => Some(Credentials::Password { username, password }),
            (None | Some(_), None, Some(token)) => Some(Credentials::Token(token)),
            (Some(username), None, None) => {
                return Err(CtlError::Usage(format!(
                    "--username {username} needs a password: --password, EDDY_PASSWORD or the config file"
                )))
            }
            (None, Some(_), _) => {
                return Err(CtlError::Usage(
                    "a password needs a --username (or EDDY_USERNAME)".into(),
                ))
            }
            (None, None, None) => None,
        };

        let ca_file = self
            .tls_ca_file
            .clone()
            .or_else(|| file.tls_ca_file.clone());
        let server_name = pick(&self.tls_server_name, &file.tls_server_name);
        let client_cert = self
            .tls_client_cert
            .clone()
            .or_else(|| file.tls_client_cert.clone());
        let client_key = self
            .tls_client_key
            .clone()
            .or_else(|| file.tls_client_key.clone());
        let insecure = self.tls_insecure || file.tls_insecure.unwrap_or(false);
        let tls_wanted = self.tls
            || file.tls.unwrap_or(false)
            || insecure
            || ca_file.is_some()
            || server_name.is_some()
            || client_cert.is_some()
            || client_key.is_some();
        let tls = tls_wanted.then_some(TlsOptions {
            ca_file,
            server_name,
            client_cert,
            client_key,
            insecure_skip_verify: insecure,
        });
        if let Some(t) = &tls {
            if t.ca_file.is_none() && !t.insecure_skip_verify {
                return Err(CtlError::Usage(
                    "TLS needs --tls-ca-file to verify the server (or --tls-insecure, for tests)"
                        .into(),
                ));
            }
        }
        let timeout = Duration::from_secs(self.timeout.or(file.timeout).unwrap_or(10).max(1));
        Ok(Settings {
            stream_addr,
            event_addr,
            http_addr,
            credentials,
            connect: ConnectOptions {
                tls,
                connect_timeout: timeout,
                request_timeout: timeout,
            },
            format: self.output,
        })
    }
}

impl Settings {
    /// A stream client, logged in with the credentials (a usage error without any).
    pub async fn stream_client(&self) -> Result<StreamClient, CtlError> {
        let Some(credentials) = &self.credentials else {
            return Err(CtlError::Usage(
                "no credentials: give --username and --password (or EDDY_USERNAME and \
                 EDDY_PASSWORD), --token (EDDY_TOKEN), or put them in the config file"
                    .into(),
            ));
        };
        let mut client = StreamClient::connect(&self.stream_addr, &self.connect).await?;
        login(&mut client, credentials).await?;
        Ok(client)
    }

    /// An event client.
    pub async fn event_client(&self) -> Result<EventClient, CtlError> {
        Ok(EventClient::connect(&self.event_addr, &self.connect).await?)
    }
}

/// Logs `client` in with `credentials`, naming who was refused.
pub async fn login(client: &mut StreamClient, credentials: &Credentials) -> Result<(), CtlError> {
    let result = match credentials {
        Credentials::Password { username, password } => client.login_user(username, password).await,
        Credentials::Token(token) => client.login_with_token(token).await,
    };
    result.map(|_| ()).map_err(|e| match e.kind() {
        eddy_client::ErrorKind::Authentication => CtlError::Login {
            who: match credentials {
                Credentials::Password { username, .. } => format!("user {username:?}"),
                Credentials::Token(_) => "the access token".into(),
            },
            source: e,
        },
        _ => CtlError::Client(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ConnArgs {
        ConnArgs::default()
    }

    #[test]
    fn defaults_are_the_servers_defaults() {
        let s = args().resolve_with(&ConfigFile::default()).unwrap();
        assert_eq!(s.stream_addr, "127.0.0.1:8090");
        assert_eq!(s.event_addr, "127.0.0.1:10000");
        assert_eq!(s.http_addr, "127.0.0.1:10002");
        assert_eq!(s.credentials, None);
        assert_eq!(s.connect.tls, None);
        assert_eq!(s.connect.request_timeout, Duration::from_secs(10));
    }

    #[test]
    fn addr_sets_the_host_of_every_protocol() {
        let a = ConnArgs {
            addr: Some("10.1.2.3".into()),
            event_addr: Some("10.9.9.9:1".into()),
            ..args()
        };
        let s = a.resolve_with(&ConfigFile::default()).unwrap();
        assert_eq!(s.stream_addr, "10.1.2.3:8090");
        assert_eq!(s.event_addr, "10.9.9.9:1");
        assert_eq!(s.http_addr, "10.1.2.3:10002");
        let with_port = ConnArgs {
            addr: Some("db:9000".into()),
            ..args()
        };
        let s = with_port.resolve_with(&ConfigFile::default()).unwrap();
        assert_eq!(s.stream_addr, "db:9000");
        assert_eq!(s.event_addr, "db:10000");
        assert_eq!(super::with_port("::1", 1), "[::1]:1");
    }

    #[test]
    fn flags_beat_the_file() {
        let file: ConfigFile = toml::from_str(
            "stream_addr = \"h:1\"\nusername = \"file\"\npassword = \"filepw\"\ntimeout = 3\n",
        )
        .unwrap();
        let s = args().resolve_with(&file).unwrap();
        assert_eq!(s.stream_addr, "h:1");
        assert_eq!(
            s.credentials,
            Some(Credentials::Password {
                username: "file".into(),
                password: "filepw".into()
            })
        );
        assert_eq!(s.connect.connect_timeout, Duration::from_secs(3));
        let flags = ConnArgs {
            username: Some("flag".into()),
            password: Some("pw".into()),
            stream_addr: Some("f:2".into()),
            ..args()
        };
        let s = flags.resolve_with(&file).unwrap();
        assert_eq!(s.stream_addr, "f:2");
        assert!(
            matches!(s.credentials, Some(Credentials::Password { ref username, .. }) if username == "flag")
        );
        assert!(
            !format!("{:?}", s.credentials).contains("pw"),
            "secrets are redacted"
        );
    }

    #[test]
    fn credentials_and_tls_are_checked() {
        let half = ConnArgs {
            username: Some("a".into()),
            ..args()
        };
        assert!(matches!(
            half.resolve_with(&ConfigFile::default()),
            Err(CtlError::Usage(_))
        ));
        let token = ConnArgs {
            token: Some("t".into()),
            ..args()
        };
        assert_eq!(
            token
                .resolve_with(&ConfigFile::default())
                .unwrap()
                .credentials,
            Some(Credentials::Token("t".into()))
        );
        let tls_without_ca = ConnArgs {
            tls: true,
            ..args()
        };
        assert!(matches!(
            tls_without_ca.resolve_with(&ConfigFile::default()),
            Err(CtlError::Usage(_))
        ));
        let tls = ConnArgs {
            tls_ca_file: Some("ca.pem".into()),
            ..args()
        };
        let s = tls.resolve_with(&ConfigFile::default()).unwrap();
        assert!(s.connect.tls.is_some(), "a CA file implies TLS");
    }

    #[test]
    fn unknown_config_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cli.toml");
        std::fs::write(&path, "usernme = \"typo\"\n").unwrap();
        let e = read_config(&path).unwrap_err();
        assert!(
            matches!(e, CtlError::Usage(ref m) if m.contains("usernme")),
            "{e}"
        );
    }
}
