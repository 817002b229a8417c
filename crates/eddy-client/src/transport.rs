//! Connecting: TCP with a deadline, then TLS (tokio-rustls over rustls with the ring provider)
//! when asked. Both protocol clients read and write through the [`Transport`] this returns.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::error::{ClientError, TlsSetupError};

/// How long a TCP connect (and then a TLS handshake) may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may wait for its answer by default.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// TLS settings of a client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM bundle of the CAs the server certificate must chain to; `None` trusts no one but
    /// is only valid with `insecure_skip_verify`.
    pub ca_file: Option<PathBuf>,
    /// Name to check the server certificate against (default: the host of the address).
    pub server_name: Option<String>,
    /// PEM client certificate chain, for servers that require mTLS.
    pub client_cert: Option<PathBuf>,
    /// PEM private key of `client_cert`.
    pub client_key: Option<PathBuf>,
    /// Accept any server certificate. For tests against throwaway certificates only: it
    /// removes the protection TLS exists for.
    pub insecure_skip_verify: bool,
}

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// TLS, or plain TCP when `None`.
    pub tls: Option<TlsOptions>,
    /// Deadline for TCP connect plus TLS handshake.
    pub connect_timeout: Duration,
    /// Deadline for each answer.
    pub request_timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            tls: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// A connected byte stream, plain or TLS.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The socket a client talks through.
pub type Transport = Box<dyn Io>;

/// Connects to `addr` (`host:port`), then runs the TLS handshake if `options.tls` is set.
pub async fn connect(addr: &str, options: &ConnectOptions) -> Result<Transport, ClientError> {
    let deadline = options.connect_timeout;
    let attempt =
        async {
            let socket = TcpStream::connect(addr)
                .await
                .map_err(|source| ClientError::Connect {
                    addr: addr.to_owned(),
                    source,
                })?;
            // Lockstep request/answer traffic: never wait for Nagle.
            let _ = socket.set_nodelay(true);
            let Some(tls) = &options.tls else {
                return Ok(Box::new(socket) as Transport);
            };
            let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(tls)?));
            let name = server_name(addr, tls)?;
            let stream = connector.connect(name, socket).await.map_err(|source| {
                ClientError::TlsHandshake {
                    addr: addr.to_owned(),
                    source,
                }
            })?;
            Ok(Box::new(stream) as Transport)
        };
    tokio::time::timeout(deadline, attempt)
        .await
        .map_err(|_| ClientError::ConnectTimeout {
            addr: addr.to_owned(),
            timeout: deadline,
        })?
}

fn server_name(addr: &str, tls: &TlsOptions) -> Result<ServerName<'static>, ClientError> {
    let host = tls.server_name.clone().unwrap_or_else(|| host_of(addr));
    ServerName::try_from(host.clone())
        .map_err(|_| ClientError::TlsSetup(TlsSetupError::ServerName { name: host }))
}

/// The host part of `host:port` (brackets of an IPv6 literal removed).
pub fn host_of(addr: &str) -> String {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn load_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let pem = |source| TlsSetupError::Pem {
        what,
        path: path.to_path_buf(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsSetupError::Empty {
            what,
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The rustls client configuration of `tls`.
pub fn client_config(tls: &TlsOptions) -> Result<rustls::ClientConfig, ClientError> {
    build_config(tls).map_err(ClientError::TlsSetup)
}

fn build_config(tls: &TlsOptions) -> Result<rustls::ClientConfig, TlsSetupError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsSetupError::Rustls)?;
    let builder = if tls.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider())))
    } else {
        let ca_file = tls.ca_file.as_deref().ok_or(TlsSetupError::NoCa)?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in load_certs("CA certificates", ca_file)? {
            roots.add(cert).map_err(TlsSetupError::Rustls)?;
        }
        builder.with_root_certificates(roots)
    };
    match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => {
            let chain = load_certs("client certificate", cert)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsSetupError::Pem {
                what: "client key",
                path: key.clone(),
                source,
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(TlsSetupError::Rustls)
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err(TlsSetupError::HalfClientIdentity),
    }
}

/// `insecure_skip_verify`: accepts every certificate, still checking handshake signatures so
/// the session keys are bound to the presented key.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_of_strips_port_and_brackets() {
        assert_eq!(host_of("127.0.0.1:8090"), "127.0.0.1");
        assert_eq!(host_of("localhost:1"), "localhost");
        assert_eq!(host_of("[::1]:10000"), "::1");
        assert_eq!(host_of("example"), "example");
    }

    #[test]
    fn tls_settings_are_checked_before_connecting() {
        let no_ca = TlsOptions::default();
        assert!(matches!(build_config(&no_ca), Err(TlsSetupError::NoCa)));
        let missing = TlsOptions {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..TlsOptions::default()
        };
        assert!(matches!(
            build_config(&missing),
            Err(TlsSetupError::Pem { .. })
        ));
        let half = TlsOptions {
            insecure_skip_verify: true,
            client_cert: Some("c.pem".into()),
            ..TlsOptions::default()
        };
        assert!(matches!(
            build_config(&half),
            Err(TlsSetupError::HalfClientIdentity)
        ));
        let insecure = TlsOptions {
            insecure_skip_verify: true,
            ..TlsOptions::default()
        };
        assert!(build_config(&insecure).is_ok());
    }
}
