//! `eddy cluster`: operator commands for a cluster. `certs` writes the certificates members
//! present to each other on the replication port (mutual TLS): a cluster CA and one
//! certificate per member naming its node id ([`eddy_wire::peer::member_name`]); `status`
//! asks the members what they know (see `cluster_status`).

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::error::CtlError;

/// `eddy cluster ...`
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ClusterCommand,
}

/// The subcommands of `eddy cluster`.
#[derive(Debug, Clone, Subcommand)]
pub enum ClusterCommand {
    /// Write a cluster CA and a certificate per member for the replication port (mTLS).
    Certs(CertsArgs),
    /// The members, their roles, the groups each leads and how far behind each one is.
    Status(crate::cluster_status::StatusArgs),
    /// Add a member (a learner on every group, a voter once caught up).
    Add(crate::cluster_change::AddArgs),
    /// Remove a member from every group.
    Remove(crate::cluster_change::RemoveArgs),
    /// Replace a member by a new one: add the new, then remove the old.
    Replace(crate::cluster_change::ReplaceArgs),
}

/// `eddy cluster certs`.
#[derive(Debug, Clone, Args)]
pub struct CertsArgs {
    /// Directory the PEM files are written to (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Node ids to issue certificates for, comma-separated (`1,2,3`).
    #[arg(long, value_delimiter = ',', required = true, value_name = "IDS")]
    pub nodes: Vec<u64>,
    /// Host names or IP addresses of the members, in the order of --nodes, added to their
    /// certificates (informative: members are verified by node id).
    #[arg(long, value_delimiter = ',', value_name = "HOSTS")]
    pub hosts: Vec<String>,
    /// Sign with an existing CA certificate (with --ca-key) instead of creating one: how a
    /// member's certificate is renewed or a new member's issued.
    #[arg(long, value_name = "FILE", requires = "ca_key")]
    pub ca_cert: Option<PathBuf>,
    /// The existing CA's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "ca_cert")]
    pub ca_key: Option<PathBuf>,
    /// Days a member certificate is valid.
    #[arg(long, default_value_t = 825, value_name = "DAYS")]
    pub days: u32,
    /// Days a new CA is valid.
    #[arg(long, default_value_t = 3650, value_name = "DAYS")]
    pub ca_days: u32,
    /// Replace files that already exist.
    #[arg(long)]
    pub force: bool,
}

/// Whether the subcommand talks to a server (and so runs on the async runtime).
pub fn needs_server(args: &ClusterArgs) -> bool {
    !matches!(args.command, ClusterCommand::Certs(_))
}

/// Runs the subcommands that talk to a server.
pub async fn run_remote(args: &ClusterArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    match &args.command {
        ClusterCommand::Status(status) => crate::cluster_status::run(status, out).await,
        ClusterCommand::Add(add) => crate::cluster_change::add(add, out).await,
        ClusterCommand::Remove(remove) => crate::cluster_change::remove(remove, out).await,
        ClusterCommand::Replace(replace) => crate::cluster_change::replace(replace, out).await,
        ClusterCommand::Certs(_) => run(args, out),
    }
}

/// Runs `eddy cluster ...` that need no server (`certs`).
pub fn run(args: &ClusterArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    match &args.command {
        ClusterCommand::Status(_)
        | ClusterCommand::Add(_)
        | ClusterCommand::Remove(_)
        | ClusterCommand::Replace(_) => Err(CtlError::Failed(
            "this cluster command runs on the async runtime".into(),
        )),
        ClusterCommand::Certs(certs) => {
            let written = write_certs(certs)?;
            for path in written {
                writeln!(out, "wrote {}", path.display())
                    .map_err(|e| CtlError::Failed(format!("cannot write output: {e}")))?;
            }
            Ok(())
        }
    }
}

fn failed(what: &str, e: impl std::fmt::Display) -> CtlError {
    CtlError::Failed(format!("{what}: {e}"))
}

/// Validity from an hour ago (clocks of members differ a little) for `days`.
fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(i64::from(days));
}

fn new_ca(days: u32) -> Result<(String, Issuer<'static, KeyPair>), CtlError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| failed("CA", e))?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params
        .distinguished_name
        .push(DnType::CommonName, "eddy cluster CA");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, days);
    let key = KeyPair::generate().map_err(|e| failed("CA key", e))?;
    let cert = params.self_signed(&key).map_err(|e| failed("CA", e))?;
    Ok((cert.pem(), Issuer::new(params, key)))
}

fn existing_ca(cert: &Path, key: &Path) -> Result<Issuer<'static, KeyPair>, CtlError> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| failed(&format!("cannot read {}", p.display()), e))
    };
    let key = KeyPair::from_pem(&read(key)?).map_err(|e| failed("the CA key", e))?;
    Issuer::from_ca_cert_pem(&read(cert)?, key).map_err(|e| failed("the CA certificate", e))
}

fn member(
    issuer: &Issuer<'_, KeyPair>,
    id: u64,
    host: Option<&str>,
    days: u32,
) -> Result<(String, String), CtlError> {
    let mut params = CertificateParams::new(vec![eddy_wire::peer::member_name(id)])
        .map_err(|e| failed("member certificate", e))?;
    if let Some(host) = host {
        params.subject_alt_names.push(match host.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                host.to_owned()
                    .try_into()
                    .map_err(|e| failed(&format!("host {host:?}"), e))?,
            ),
        });
    }
    params
        .distinguished_name
        .push(DnType::CommonName, format!("eddy node {id}"));
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    // A member both dials its peers (client) and accepts them (server).
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    validity(&mut params, days);
    let key = KeyPair::generate().map_err(|e| failed("member key", e))?;
    let cert = params
        .signed_by(&key, issuer)
        .map_err(|e| failed("member certificate", e))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Writes `text` to `path`, readable by its owner only when `secret`; refuses to replace an
/// existing file unless `force`.
fn write_file(path: &Path, text: &str, secret: bool, force: bool) -> Result<(), CtlError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).mode(if secret { 0o600 } else { 0o644 });
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let mut file = options.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            CtlError::Usage(format!(
                "{} already exists (--force replaces it)",
                path.display()
            ))
        } else {
            failed(&format!("cannot create {}", path.display()), e)
        }
    })?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| failed(&format!("cannot write {}", path.display()), e))
}

/// Issues the certificates `args` asks for; returns the files written.
pub fn write_certs(args: &CertsArgs) -> Result<Vec<PathBuf>, CtlError> {
    if args.nodes.is_empty() || args.nodes.contains(&0) {
        return Err(CtlError::Usage("--nodes: node ids start at 1".into()));
    }
    let mut seen = args.nodes.clone();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != args.nodes.len() {
        return Err(CtlError::Usage("--nodes: a node id is listed twice".into()));
    }
    if !args.hosts.is_empty() && args.hosts.len() != args.nodes.len() {
        return Err(CtlError::Usage(format!(
            "--hosts names {} hosts for {} nodes",
            args.hosts.len(),
            args.nodes.len()
        )));
    }
    if args.days == 0 || args.ca_days == 0 {
        return Err(CtlError::Usage(
            "--days and --ca-days must be at least 1".into(),
        ));
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| failed(&format!("cannot create {}", args.out.display()), e))?;
    let mut written = Vec::new();
    let issuer = if let (Some(cert), Some(key)) = (&args.ca_cert, &args.ca_key) {
        existing_ca(cert, key)?
    } else {
        let (pem, issuer) = new_ca(args.ca_days)?;
        let (cert_path, key_path) = (args.out.join("ca.pem"), args.out.join("ca.key"));
        write_file(&cert_path, &pem, false, args.force)?;
        write_file(&key_path, &issuer.key().serialize_pem(), true, args.force)?;
        written.extend([cert_path, key_path]);
        issuer
    };
    for (i, &id) in args.nodes.iter().enumerate() {
        let (pem, key) = member(
            &issuer,
            id,
            args.hosts.get(i).map(String::as_str),
            args.days,
        )?;
        let (cert_path, key_path) = (
            args.out.join(format!("node-{id}.pem")),
            args.out.join(format!("node-{id}.key")),
        );
        write_file(&cert_path, &pem, false, args.force)?;
        write_file(&key_path, &key, true, args.force)?;
        written.extend([cert_path, key_path]);
    }
    Ok(written)
}
