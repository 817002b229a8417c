//! Mutual TLS on the replication port: who a peer is, proved by its certificate.
//!
//! Every member holds a certificate signed by the cluster's CA (`--peer-tls-ca`) that names
//! its node id ([`eddy_wire::peer::member_name`]); it presents it both when it dials a peer
//! and when it accepts one. A dialler checks that the certificate it is shown names the
//! member it dialled (rustls checks the name as a server name); an acceptor requires a
//! client certificate from the CA, and the transport then checks that the id the peer's
//! first frame claims is one its certificate names ([`PeerTls::certifies`]), so one
//! connection speaks for one member for its whole life. TLS 1.3 only, no session tickets
//! and no resumption: every connection runs a full handshake.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use eddy_consensus::NodeId;
use rustls::client::Resumption;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{NoServerSessionStorage, ParsedCertificate, WebPkiClientVerifier};
use rustls_pki_types::pem::PemObject as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::tls::TlsError;

/// A member's TLS identity and its trust in the cluster CA, for both directions.
#[derive(Clone)]
pub struct PeerTls {
    acceptor: TlsAcceptor,
    client: Arc<rustls::ClientConfig>,
    ca_fingerprint: u64,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerTls(TLS 1.3, mutual)")
    }
}

fn pem_error(
    what: &'static str,
    path: &Path,
) -> impl FnOnce(rustls_pki_types::pem::Error) -> TlsError {
    let path = path.to_path_buf();
    move |source| TlsError::Pem { what, path, source }
}

fn load_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    CertificateDer::pem_file_iter(path)
        .map_err(pem_error(what, path))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem_error(what, path))
}

impl PeerTls {
    /// Loads this member's certificate chain and key and the cluster CA.
    ///
    /// # Errors
    /// A file that cannot be read or holds nothing usable, or a key that does not match.
    pub fn load(cert: &Path, key: &Path, ca: &Path) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = load_certs("peer certificate chain", cert)?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate {
                path: PathBuf::from(cert),
            });
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(pem_error("peer private key", key))?;
        let mut roots = rustls::RootCertStore::empty();
        let mut ca_der = Vec::new();
        for cert in load_certs("peer CA certificates", ca)? {
            ca_der.extend_from_slice(&cert);
            roots.add(cert)?;
        }
        if roots.is_empty() {
            return Err(TlsError::NoCa {
                path: ca.to_path_buf(),
            });
        }
        let roots = Arc::new(roots);
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::clone(&roots), Arc::clone(&provider))
                .build()?;
        let mut server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())?;
        server.send_tls13_tickets = 0;
        server.session_storage = Arc::new(NoServerSessionStorage {});
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?;
        client.resumption = Resumption::disabled();
        Ok(PeerTls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            client: Arc::new(client),
            ca_fingerprint: xxhash_rust::xxh3::xxh3_64(&ca_der),
        })
    }

    /// A hash of the cluster CA's certificates (part of a new member's cluster id: clusters
    /// with their own CAs never take each other's members).
    pub fn ca_fingerprint(&self) -> u64 {
        self.ca_fingerprint
    }

    /// The name a dialler expects `peer`'s certificate to carry.
    fn server_name(peer: NodeId) -> io::Result<ServerName<'static>> {
        ServerName::try_from(eddy_wire::peer::member_name(peer))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    }

    /// Runs the handshake of an accepted connection; the peer must present a certificate of
    /// the cluster CA, which is returned with the stream.
    ///
    /// # Errors
    /// The handshake failed (no certificate, another CA, not TLS 1.3, a broken connection).
    pub async fn accept(
        &self,
        socket: TcpStream,
    ) -> io::Result<(PeerStream, CertificateDer<'static>)> {
        let stream = self.acceptor.accept(socket).await?;
        let cert = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|c| c.clone().into_owned())
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::PermissionDenied, "no peer certificate")
            })?;
        Ok((PeerStream::Tls(Box::new(stream.into())), cert))
    }

    /// Runs the handshake of a connection this member dialled to `peer`, whose certificate
    /// must name it.
    ///
    /// # Errors
    /// The handshake failed, or the certificate does not name `peer`.
    pub async fn connect(&self, socket: TcpStream, peer: NodeId) -> io::Result<PeerStream> {
        let stream = TlsConnector::from(Arc::clone(&self.client))
            .connect(Self::server_name(peer)?, socket)
            .await?;
        Ok(PeerStream::Tls(Box::new(stream.into())))
    }

    /// The blocking counterpart of [`PeerTls::connect`] (out-of-band fetches run on threads
    /// of their own). The handshake completes on the first read or write.
    ///
    /// # Errors
    /// The connection cannot be set up.
    pub fn connect_blocking(
        &self,
        socket: std::net::TcpStream,
        peer: NodeId,
    ) -> io::Result<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>> {
        let conn =
            rustls::ClientConnection::new(Arc::clone(&self.client), Self::server_name(peer)?)
                .map_err(io::Error::other)?;
        Ok(rustls::StreamOwned::new(conn, socket))
    }

    /// Whether `cert` (already verified against the cluster CA by the handshake) names
    /// member `id`.
    pub fn certifies(cert: &CertificateDer<'_>, id: NodeId) -> bool {
        let (Ok(parsed), Ok(name)) = (ParsedCertificate::try_from(cert), Self::server_name(id))
        else {
            return false;
        };
        rustls::client::verify_server_name(&parsed, &name).is_ok()
    }
}

/// A replication connection: plaintext (`--insecure-peer-plaintext`) or mutual TLS.
#[derive(Debug)]
pub enum PeerStream {
    /// No encryption, no authentication.
    Plain(TcpStream),
    /// Mutual TLS.
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl AsyncRead for PeerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_flush(cx),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            PeerStream::Plain(s) => s.is_write_vectored(),
            PeerStream::Tls(s) => s.is_write_vectored(),
        }
    }
}
