//! Throwaway certificates for TLS tests: a CA, a server certificate for `localhost` and
//! `127.0.0.1`, and client certificates, written as PEM files into a directory.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// PEM files of a test PKI.
#[derive(Debug, Clone)]
pub struct Pki {
    /// CA certificate.
    pub ca_cert: PathBuf,
    /// Server certificate (SANs `localhost`, `127.0.0.1`).
    pub server_cert: PathBuf,
    /// Server private key.
    pub server_key: PathBuf,
    /// Client certificate signed by the CA.
    pub client_cert: PathBuf,
    /// Client private key.
    pub client_key: PathBuf,
    /// A client certificate signed by a different, untrusted CA.
    pub rogue_client_cert: PathBuf,
    /// Its private key.
    pub rogue_client_key: PathBuf,
}

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("no SANs");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::CrlSign,
    ];
    let key = KeyPair::generate().expect("CA key");
    let cert = params.self_signed(&key).expect("self-signed CA");
    (cert.pem(), Issuer::new(params, key))
}

fn leaf(
    issuer: &Issuer<'static, KeyPair>,
    sans: &[&str],
    cn: &str,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let mut params =
        CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
            .expect("valid SANs");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().expect("leaf key");
    let cert = params.signed_by(&key, issuer).expect("signed leaf");
    (cert.pem(), key.serialize_pem())
}

/// Generates a PKI into `dir`.
pub fn generate(dir: &Path) -> Pki {
    let (ca_pem, issuer) = ca("eddy test CA");
    let (server_pem, server_key) = leaf(
        &issuer,
        &["localhost", "127.0.0.1"],
        "eddy test server",
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client_pem, client_key) = leaf(
        &issuer,
        &[],
        "eddy test client",
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let (_, rogue) = ca("rogue CA");
    let (rogue_pem, rogue_key) = leaf(
        &rogue,
        &[],
        "rogue client",
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write PEM");
        p
    };
    Pki {
        ca_cert: write("ca.pem", &ca_pem),
        server_cert: write("server.pem", &server_pem),
        server_key: write("server.key", &server_key),
        client_cert: write("client.pem", &client_pem),
        client_key: write("client.key", &client_key),
        rogue_client_cert: write("rogue.pem", &rogue_pem),
        rogue_client_key: write("rogue.key", &rogue_key),
    }
}
