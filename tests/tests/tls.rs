//! TLS on the client ports and the start-up rules tying authentication to TLS, against the real
//! server process with certificates generated per test.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use eddy_tests::pki::{self, Pki};
use eddy_tests::{server_bin, spawn, Eddy, Options};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

fn s(v: &str) -> String {
    v.to_owned()
}

fn strict_server(pki: &Pki, client_auth: &str) -> Eddy {
    Eddy::start_with(
        server_bin!(),
        Options {
            args: vec![
                s("--tls-mode"),
                s("strict"),
                s("--tls-client-auth"),
                s(client_auth),
                s("--tls-cert"),
                pki.server_cert.display().to_string(),
                s("--tls-key"),
                pki.server_key.display().to_string(),
                s("--tls-ca-cert"),
                pki.ca_cert.display().to_string(),
            ],
            ..Options::default()
        },
    )
}

fn connector(pki: &Pki, client: Option<(&Path, &Path)>) -> TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&pki.ca_cert).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            builder
                .with_client_auth_cert(certs, PrivateKeyDer::from_pem_file(key).unwrap())
                .unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    TlsConnector::from(Arc::new(config))
}

/// Connects over TLS, sends a garbage frame and reads. Ok(()) when the server accepted the session
/// (it then closes the connection: no protocol accepts a header of 0xFF bytes, whose size fields
/// exceed every limit), Err(message) when the handshake or the server's certificate check failed.
async fn tls_exchange(addr: std::net::SocketAddr, connector: &TlsConnector) -> Result<(), String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tls.write_all(&[0xFF; 256])
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut buf = [0u8; 16];
    match tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf)).await {
        Err(_) => Err("timed out".into()),
        Ok(Ok(0)) => Ok(()),
        Ok(Ok(n)) => Err(format!("unexpected {n} bytes")),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(()),
        Ok(Err(e)) => Err(format!("read: {e}")),
    }
}

#[tokio::test]
async fn strict_mode_with_mtls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki::generate(dir.path());
    let eddy = strict_server(&pki, "require");
    let good = connector(&pki, Some((&pki.client_cert, &pki.client_key)));
    for addr in [eddy.addrs().stream, eddy.addrs().client] {
        tls_exchange(addr, &good).await.unwrap();

        // No client certificate while one is required.
        let err = tls_exchange(addr, &connector(&pki, None))
            .await
            .unwrap_err();
        assert!(err.contains("CertificateRequired"), "{err}");

        // A certificate from a CA the server does not trust.
        let rogue = connector(&pki, Some((&pki.rogue_client_cert, &pki.rogue_client_key)));
        let err = tls_exchange(addr, &rogue).await.unwrap_err();
        assert!(err.contains("alert"), "{err}");

        // Plaintext is refused: the server never answers a non-TLS byte stream.
        let mut plain = TcpStream::connect(addr).await.unwrap();
        plain.write_all(&[0u8; 256]).await.unwrap();
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), plain.read(&mut buf))
            .await
            .expect("plaintext connection left hanging");
        match read {
            Ok(0) | Err(_) => {}
            Ok(n) => {
                // rustls may answer with a TLS alert record (content type 0x15) before closing.
                assert_eq!(
                    buf[0],
                    0x15,
                    "plaintext got {n} non-alert bytes: {:?}",
                    &buf[..n]
                );
            }
        }
    }
}

#[tokio::test]
async fn optional_and_none_client_auth() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki::generate(dir.path());
    let optional = strict_server(&pki, "optional");
    tls_exchange(optional.addrs().client, &connector(&pki, None))
        .await
        .unwrap();
    let with_cert = connector(&pki, Some((&pki.client_cert, &pki.client_key)));
    tls_exchange(optional.addrs().client, &with_cert)
        .await
        .unwrap();
    drop(optional);
    let none = strict_server(&pki, "none");
    tls_exchange(none.addrs().stream, &connector(&pki, None))
        .await
        .unwrap();
}

#[test]
fn authentication_without_tls_refuses_to_start_unless_allowed() {
    // api_keys.toml in the data dir enables API keys.
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    eddy_tests::write_api_keys(&data);
    let mut args = vec![s("--data-dir"), data.display().to_string()];
    args.extend(eddy_tests::EPHEMERAL_PORTS.map(s));
    let (mut child, log) = spawn(Path::new(server_bin!()), &args, &[]);
    assert_eq!(child.wait().unwrap().code(), Some(78));
    let err = log
        .wait_for(Duration::from_secs(5), |l| l.starts_with("eddy: error:"))
        .unwrap();
    assert!(
        err.contains("api_keys.toml") && err.contains("insecure-allow-plaintext-auth"),
        "{err}"
    );

    // --require-client-identity without TLS: the same rule.
    let (mut child, log) = spawn(
        Path::new(server_bin!()),
        &[
            s("--data-dir"),
            tmp.path().join("other").display().to_string(),
            s("--require-client-identity"),
        ],
        &[],
    );
    assert_eq!(child.wait().unwrap().code(), Some(78));
    let err = log
        .wait_for(Duration::from_secs(5), |l| l.starts_with("eddy: error:"))
        .unwrap();
    assert!(err.contains("require_client_identity"), "{err}");

    // A malformed api_keys.toml is a start-up error too.
    std::fs::write(data.join("api_keys.toml"), "[keys]\nprimary_rw = 1\n").unwrap();
    let mut bad_args = args.clone();
    bad_args.push(s("--insecure-allow-plaintext-auth"));
    let (mut child, log) = spawn(Path::new(server_bin!()), &bad_args, &[]);
    assert_eq!(child.wait().unwrap().code(), Some(78));
    assert!(log
        .wait_for(Duration::from_secs(5), |l| l
            .contains("cannot load API keys"))
        .is_some());
}

#[test]
fn authentication_without_tls_starts_with_the_explicit_opt_in() {
    let eddy = Eddy::start_with(
        server_bin!(),
        Options {
            args: vec![
                s("--require-client-identity"),
                s("--insecure-allow-plaintext-auth"),
            ],
            ..Options::default()
        },
    );
    assert!(eddy
        .log()
        .wait_for(Duration::from_secs(5), |l| l.contains("without TLS"))
        .is_some());
}
