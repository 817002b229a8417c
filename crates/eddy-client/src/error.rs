//! [`ClientError`]: every way a request can fail, with the server's code where there is one.

use std::path::PathBuf;
use std::time::Duration;

use eddy_wire::stream::EvictionReason;

/// Why a TLS client configuration cannot be built (nothing was sent yet).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsSetupError {
    /// A PEM file cannot be read or parsed.
    #[error("cannot load {what} from {}", path.display())]
    Pem {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// A PEM file holds no certificate.
    #[error("no {what} in {}", path.display())]
    Empty {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// Certificate verification needs a CA bundle.
    #[error("TLS needs a CA file to verify the server (or insecure mode, for tests only)")]
    NoCa,
    /// A client certificate without its key, or the other way round.
    #[error("a client certificate and its key go together: give both or neither")]
    HalfClientIdentity,
    /// Not a valid DNS name or IP address for certificate checks.
    #[error("{name:?} is not a valid TLS server name")]
    ServerName {
        /// The name.
        name: String,
    },
    /// rustls refused a certificate, key or setting.
    #[error("invalid TLS configuration")]
    Rustls(#[source] rustls::Error),
}

/// A failed request.
///
/// [`ClientError::kind`] sorts every variant into the three things a caller acts on: the
/// server could not be reached, the server refused (with its code), or the client itself was
/// misused or misconfigured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// TCP connect failed (nothing listens, host unreachable).
    #[error("cannot connect to {addr}")]
    Connect {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Connect plus handshake took longer than allowed.
    #[error("no connection to {addr} within {timeout:?}")]
    ConnectTimeout {
        /// The address.
        addr: String,
        /// The deadline.
        timeout: Duration,
    },
    /// The TLS configuration is unusable.
    #[error("TLS setup")]
    TlsSetup(#[source] TlsSetupError),
    /// The TLS handshake failed (certificate refused, plaintext server, ...).
    #[error("TLS handshake with {addr} failed")]
    TlsHandshake {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing the connection failed.
    #[error("connection to {addr} failed")]
    Io {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The server closed the connection before answering.
    #[error("{addr} closed the connection")]
    Closed {
        /// The address.
        addr: String,
    },
    /// No answer in time.
    #[error("no answer from {addr} within {timeout:?}")]
    Timeout {
        /// The address.
        addr: String,
        /// The deadline.
        timeout: Duration,
    },
    /// A stream-protocol request was refused with an error code.
    #[error("server refused: {name} (code {code})")]
    Refused {
        /// The Iggy error code.
        code: u32,
        /// Its name in the code table (`Error` for unknown codes).
        name: &'static str,
    },
    /// The stream-protocol server ended the session (a failed login is answered this way).
    #[error("server ended the session: {reason:?} (code {code})")]
    Evicted {
        /// The reason byte, decoded.
        reason: EvictionReason,
        /// The code the Iggy SDK reports for it.
        code: u32,
    },
    /// An event-protocol request was answered with an `ErrorResponse`.
    #[error("server refused: {name} (code {code}) {message}")]
    EventRefused {
        /// The Celeriant error code.
        code: u32,
        /// Its name (`UNKNOWN` for codes outside the table).
        name: &'static str,
        /// The JSON context the server sent.
        message: String,
    },
    /// The stream protocol answered with bytes that do not decode.
    #[error("malformed answer")]
    StreamCodec(#[source] eddy_codec::stream::CodecError),
    /// A stream-protocol frame is malformed.
    #[error("malformed frame")]
    StreamFrame(#[source] eddy_wire::stream::WireError),
    /// An event-protocol frame or body is malformed.
    #[error("malformed event-protocol answer")]
    EventCodec(#[source] eddy_codec::event::EventCodecError),
    /// An event-protocol frame header is malformed.
    #[error("malformed event-protocol frame")]
    EventFrame(#[source] eddy_wire::event::FrameError),
    /// The answer is well-formed but not the one the request calls for.
    #[error("unexpected answer: {0}")]
    Unexpected(&'static str),
    /// A value the client was asked to send cannot be encoded (empty name, oversized batch...).
    #[error("invalid request")]
    InvalidRequest(#[source] eddy_codec::stream::CodecError),
}

/// The three things a caller does about a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The server was not reached, or the connection broke.
    Connection,
    /// A login was refused.
    Authentication,
    /// The server refused the request (unknown name, conflict, permission...).
    Refused,
    /// The client was misconfigured or misused (nothing reached the server, or the answer
    /// made no sense).
    Client,
}

impl ClientError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Connect { .. }
            | Self::ConnectTimeout { .. }
            | Self::TlsHandshake { .. }
            | Self::Io { .. }
            | Self::Closed { .. }
            | Self::Timeout { .. } => ErrorKind::Connection,
            Self::Evicted {
                reason:
                    EvictionReason::InvalidCredentials
                    | EvictionReason::InvalidToken
                    | EvictionReason::UserInactive,
                ..
            } => ErrorKind::Authentication,
            Self::Refused { .. } | Self::Evicted { .. } | Self::EventRefused { .. } => {
                ErrorKind::Refused
            }
            Self::TlsSetup(_)
            | Self::StreamCodec(_)
            | Self::StreamFrame(_)
            | Self::EventCodec(_)
            | Self::EventFrame(_)
            | Self::Unexpected(_)
            | Self::InvalidRequest(_) => ErrorKind::Client,
        }
    }

    /// The server's error code, when the server refused.
    pub fn code(&self) -> Option<u32> {
        match self {
            Self::Refused { code, .. }
            | Self::Evicted { code, .. }
            | Self::EventRefused { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// A stream-protocol refusal with `code`, named from the code table.
    pub fn refused(code: u32) -> Self {
        Self::Refused {
            code,
            name: eddy_codec::stream::ErrorCode::from_code(code)
                .map_or("Error", eddy_codec::stream::ErrorCode::name),
        }
    }

    /// An event-protocol refusal, named from the code table.
    pub fn event_refused(code: u32, message: String) -> Self {
        Self::EventRefused {
            code,
            name: eddy_codec::event::ErrorCode::from_code(code)
                .map_or("UNKNOWN", eddy_codec::event::ErrorCode::name),
            message,
        }
    }

    /// The error and its causes on one line (`a: b: c`), for a terminal.
    pub fn one_line(&self) -> String {
        let mut line = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            let text = c.to_string();
            if !line.ends_with(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            cause = c.source();
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_named_from_the_code_tables() {
        let e = ClientError::refused(1009);
        assert_eq!(e.code(), Some(1009));
        assert_eq!(e.kind(), ErrorKind::Refused);
        assert!(e.to_string().contains("1009"), "{e}");
        let unknown = ClientError::refused(999_999);
        assert!(unknown.to_string().contains("Error"), "{unknown}");
        let occ = ClientError::event_refused(2003, "{\"expected_version\":1}".into());
        assert!(occ.to_string().contains("2003"), "{occ}");
        assert_ne!(
            occ.to_string(),
            ClientError::event_refused(1, String::new()).to_string()
        );
    }

    #[test]
    fn kinds() {
        let io = || std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let down = ClientError::Connect {
            addr: "127.0.0.1:1".into(),
            source: io(),
        };
        assert_eq!(down.kind(), ErrorKind::Connection);
        assert!(down
            .one_line()
            .starts_with("cannot connect to 127.0.0.1:1: "));
        let login = ClientError::Evicted {
            reason: EvictionReason::InvalidCredentials,
            code: 42,
        };
        assert_eq!(login.kind(), ErrorKind::Authentication);
        assert_eq!(ClientError::Unexpected("x").kind(), ErrorKind::Client);
    }
}
