//! [`CtlError`] and the exit codes it maps to.

use std::path::PathBuf;

use eddy_client::{ClientError, ErrorKind};

/// Exit code: success.
pub const EXIT_OK: u8 = 0;
/// Exit code: a local failure (a file that cannot be read or written, a failed benchmark).
pub const EXIT_FAILURE: u8 = 1;
/// Exit code: a usage error (clap's own code, also used for bad values clap cannot check).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the server could not be reached (down, wrong address, TLS handshake failed,
/// connection lost, timed out).
pub const EXIT_CONNECTION: u8 = 3;
/// Exit code: the login was refused (wrong password, unknown or expired token).
pub const EXIT_AUTH: u8 = 4;
/// Exit code: the server refused the request (unknown name, already exists, permission,
/// OCC conflict...).
pub const EXIT_REFUSED: u8 = 5;

/// The exit-code table, as `--help` shows it.
pub const EXIT_CODES_HELP: &str = "Exit codes:
  0  success
  1  local failure (a file cannot be read or written, a benchmark failed)
  2  usage error (bad or missing arguments, no credentials)
  3  connection error (server down, wrong address, TLS handshake, timeout)
  4  login refused (wrong password, unknown or expired token)
  5  request refused by the server (unknown name, already exists, no permission, conflict)";

/// Why a subcommand failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CtlError {
    /// A client call failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The login was refused.
    #[error("login as {who} refused")]
    Login {
        /// Who tried.
        who: String,
        /// The refusal.
        #[source]
        source: ClientError,
    },
    /// What a request was about, around its failure.
    #[error("{what}")]
    Context {
        /// The request, in words (`delete stream "orders"`).
        what: String,
        /// The failure.
        #[source]
        source: Box<CtlError>,
    },
    /// The server has no such thing.
    #[error("{0} not found")]
    NotFound(String),
    /// Arguments that clap accepted but that make no sense together or do not parse.
    #[error("{0}")]
    Usage(String),
    /// A local file.
    #[error("cannot {what} {}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP port did not answer.
    #[error("cannot reach {addr}")]
    Http {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A protocol port did not answer (`eddy status`).
    #[error("the {0} port is down")]
    Down(String),
    /// Writing the output failed (a closed pipe).
    #[error("cannot write the output")]
    Output(#[source] std::io::Error),
    /// Anything else that went wrong on this side.
    #[error("{0}")]
    Failed(String),
}

impl CtlError {
    /// Wraps `self` with what was being done.
    #[must_use]
    pub fn context(self, what: impl Into<String>) -> Self {
        Self::Context {
            what: what.into(),
            source: Box::new(self),
        }
    }

    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Client(e) => match e.kind() {
                ErrorKind::Connection => EXIT_CONNECTION,
                ErrorKind::Authentication => EXIT_AUTH,
                ErrorKind::Refused => EXIT_REFUSED,
                ErrorKind::Client => EXIT_FAILURE,
            },
            Self::Login { .. } => EXIT_AUTH,
            Self::Context { source, .. } => source.exit_code(),
            Self::NotFound(_) => EXIT_REFUSED,
            Self::Usage(_) => EXIT_USAGE,
            Self::Http { .. } | Self::Down(_) => EXIT_CONNECTION,
            Self::Io { .. } | Self::Output(_) | Self::Failed(_) => EXIT_FAILURE,
        }
    }

    /// One line for stderr: the error, its causes, and a hint where one helps.
    pub fn one_line(&self) -> String {
        let mut line = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            let text = c.to_string();
            if !text.is_empty() && !line.ends_with(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            cause = c.source();
        }
        if self.exit_code() == EXIT_CONNECTION {
            line.push_str(
                " (is the server running? `eddy serve` starts one; --addr points elsewhere)",
            );
        }
        line
    }
}

/// Context for a `Result`.
pub trait Context<T> {
    /// Says what was being done when it failed.
    fn context(self, what: impl FnOnce() -> String) -> Result<T, CtlError>;
}

impl<T, E: Into<CtlError>> Context<T> for Result<T, E> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, CtlError> {
        self.map_err(|e| e.into().context(what()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_distinct_per_kind() {
        let down = CtlError::Client(ClientError::Connect {
            addr: "127.0.0.1:1".into(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        });
        assert_eq!(down.exit_code(), EXIT_CONNECTION);
        assert!(
            down.one_line().contains("is the server running"),
            "{}",
            down.one_line()
        );
        let refused = CtlError::Client(ClientError::refused(1009)).context("delete stream \"x\"");
        assert_eq!(refused.exit_code(), EXIT_REFUSED);
        assert!(
            refused
                .one_line()
                .starts_with("delete stream \"x\": server refused"),
            "{}",
            refused.one_line()
        );
        assert_eq!(CtlError::Usage("x".into()).exit_code(), EXIT_USAGE);
        assert_eq!(
            CtlError::NotFound("stream".into()).exit_code(),
            EXIT_REFUSED
        );
        let login = CtlError::Login {
            who: "user \"a\"".into(),
            source: ClientError::Evicted {
                reason: eddy_wire::stream::EvictionReason::InvalidCredentials,
                code: 42,
            },
        };
        assert_eq!(login.exit_code(), EXIT_AUTH);
        let codes = [
            EXIT_OK,
            EXIT_FAILURE,
            EXIT_USAGE,
            EXIT_CONNECTION,
            EXIT_AUTH,
            EXIT_REFUSED,
        ];
        for (i, a) in codes.iter().enumerate() {
            assert!(EXIT_CODES_HELP.contains(&format!("  {a}  ")));
            assert!(codes[i + 1..].iter().all(|b| b != a));
        }
    }
}
