//! TLS on the two client ports (tokio-rustls over rustls with the ring provider).
//!
//! `--tls-mode strict` serves TLS 1.3 only, with no session tickets and no session cache (every
//! connection runs a full handshake, so a captured ticket can never resume a session);
//! plaintext connections fail the handshake and are dropped. `--tls-client-auth` decides client
//! certificates: `require` (mTLS against `--tls-ca-cert`), `optional` (verified when presented)
//! or `none`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::{ServerConfig, TlsClientAuth, TlsMode};

/// Time a client has to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the TLS configuration cannot be built (a start-up error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM file cannot be read or holds nothing usable.
    #[error("cannot load {what} from {path}")]
    Pem {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// The CA bundle has no usable certificate.
    #[error("no usable CA certificate in {path}")]
    NoCa {
        /// The file.
        path: PathBuf,
    },
    /// A certificate file holds no certificate.
    #[error("no certificate in {path}")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// rustls refused the certificate, key or verifier.
    #[error("invalid TLS configuration")]
    Rustls(#[from] rustls::Error),
    /// The client-certificate verifier could not be built.
    #[error("invalid client certificate verifier")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

fn load_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        what,
        path: path.to_path_buf(),
        source,
    };
    CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)
}

/// The TLS acceptor of the client ports.
#[derive(Clone)]
pub struct Tls(pub TlsAcceptor);

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls(TLS 1.3 acceptor)")
    }
}

/// Builds the acceptor for `config`, or `None` when TLS is disabled.
/// [`ServerConfig::validate`] has already checked that the needed paths are set.
pub fn acceptor(config: &ServerConfig) -> Result<Option<Tls>, TlsError> {
    if config.tls_mode == TlsMode::Disabled {
        return Ok(None);
    }
    let (Some(cert_path), Some(key_path)) = (&config.tls_cert, &config.tls_key) else {
        return Ok(None);
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = load_certs("certificate chain", cert_path)?;
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|source| TlsError::Pem {
        what: "private key",
        path: key_path.clone(),
        source,
    })?;
    let verifier = match (config.tls_client_auth, &config.tls_ca_cert) {
        (TlsClientAuth::None, _) | (_, None) => WebPkiClientVerifier::no_client_auth(),
        (mode, Some(ca_path)) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in load_certs("CA certificates", ca_path)? {
                roots.add(cert)?;
            }
            if roots.is_empty() {
                return Err(TlsError::NoCa {
                    path: ca_path.clone(),
                });
            }
            let builder =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider));
            if mode == TlsClientAuth::Optional {
                builder.allow_unauthenticated().build()?
            } else {
                builder.build()?
            }
        }
    };
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    server.send_tls13_tickets = 0;
    server.session_storage = Arc::new(NoServerSessionStorage {});
    Ok(Some(Tls(TlsAcceptor::from(Arc::new(server)))))
}
