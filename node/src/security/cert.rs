//! The TLS certificates of a small cluster, made in one directory (`vellum cert`, whose
//! command line is `cli/cert.rs`).
//!
//! - `vellum cert init DIR` makes the cluster CA (`ca.pem`, `ca-key.pem`) and one client
//!   certificate (`client.pem`, `client-key.pem`, clientAuth only) for curl and other clients
//!   of an API that requires client certificates.
//! - `vellum cert node DIR --id N --addr HOST...` makes `node-N.pem` and `node-N-key.pem`,
//!   signed by DIR's CA. It follows the identity convention of `tls.rs`: the certificate is
//!   valid for [`tls::node_name`]`(N)`, plus each HOST it is reached at, and for both
//!   serverAuth and clientAuth, because one certificate serves the Raft port and the client
//!   API and is presented as the client certificate of Raft RPCs and forwarded requests.
//!
//! The CA key is the cluster's root of trust: whoever holds it can make a certificate for any
//! node name and so join the cluster as that member. It belongs on the machine where
//! certificates are made, not on the nodes.
//!
//! Files: keys are written with mode 0600, certificates 0644, and a DIR this command creates
//! gets 0700. Each file is written beside its final name and renamed over it, so a crash
//! leaves the old file or the new one, never half of one. Nothing is replaced without
//! `--force`, and every check (existing files, the CA, each HOST) runs before the first write.
//!
//! Keys are ECDSA P-256. Serial numbers are rcgen's default, a digest of the fresh public key
//! (unique per certificate since every certificate gets a new key). Validity starts an hour
//! ago, for clocks that lag, and lasts `--days`.

use std::fs;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, DnsName, UnixTime};
use time::{Duration, OffsetDateTime};

use super::tls;
use crate::error::CliError;

/// The CA certificate, given to every node (`--peer-ca`) and client.
pub const CA_CERT: &str = "ca.pem";
/// The CA key: the cluster's root of trust.
pub const CA_KEY: &str = "ca-key.pem";
/// The client certificate `init` makes, for curl and other API clients.
pub const CLIENT_CERT: &str = "client.pem";
pub const CLIENT_KEY: &str = "client-key.pem";

const KEY_MODE: u32 = 0o600;
const CERT_MODE: u32 = 0o644;
const DIR_MODE: u32 = 0o700;

/// The subject common names (informational: identity is the node name SAN, see `tls.rs`).
const CA_CN: &str = "Vellum cluster CA";
const CLIENT_CN: &str = "vellum client";

/// `DIR/node-N.pem`.
pub fn node_cert_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("node-{id}.pem"))
}

/// `DIR/node-N-key.pem`.
pub fn node_key_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("node-{id}-key.pem"))
}

/// Makes the CA and the client certificate in `dir`.
pub fn init(dir: &Path, days: u32, force: bool) -> Result<(), CliError> {
    let ca_cert = dir.join(CA_CERT);
    let ca_key = dir.join(CA_KEY);
    let client_cert = dir.join(CLIENT_CERT);
    let client_key = dir.join(CLIENT_KEY);
    let replaced = ca_cert.exists() || ca_key.exists();
    if !force {
        refuse_existing(&[&ca_cert, &ca_key, &client_cert, &client_key])?;
    }
    let (not_before, not_after) = validity(days)?;

    let mut params = base_params(CA_CN, not_before, not_after);
    // Path length 0: the CA signs leaves only, never another CA.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(params, new_key()?)
        .map_err(|e| CliError::Usage(format!("making the CA certificate: {e}")))?;

    let mut params = base_params(CLIENT_CN, not_before, not_after);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = new_key()?;
    let client = params
        .signed_by(&key, &ca)
        .map_err(|e| CliError::Usage(format!("signing the client certificate: {e}")))?;
    check_chain(ca.der(), client.der(), webpki::KeyUsage::client_auth())
        .map_err(|e| CliError::Usage(format!("the new client certificate does not verify: {e}")))?;

    create_dir(dir)?;
    // Keys before certificates: a certificate on disk always has its key beside it.
    write_atomic(&ca_key, &ca.key().serialize_pem(), KEY_MODE)?;
    write_atomic(&ca_cert, &ca.pem(), CERT_MODE)?;
    write_atomic(&client_key, &key.serialize_pem(), KEY_MODE)?;
    write_atomic(&client_cert, &client.pem(), CERT_MODE)?;
    sync_dir(dir)?;

    let d = dir.display();
    println!("wrote {} (the cluster CA, valid until {})", ca_cert.display(), day(not_after));
    println!(
        "wrote {} (mode 0600): the CA key is the cluster's root of trust; keep it secret, and \
         off the nodes' machines except where certificates are made",
        ca_key.display()
    );
    println!(
        "wrote {} and {} (a client certificate, for curl and other API clients)",
        client_cert.display(),
        client_key.display()
    );
    if replaced {
        println!(
            "replaced the CA: nodes given the new ca.pem no longer trust certificates the old one \
             signed; make each node's again with vellum cert node {d} --id N --addr HOST --force"
        );
    }
    println!("next, for each node: vellum cert node {d} --id N --addr HOST [--addr HOST ...]");
    println!(
        "curl: curl --cacert {} --cert {} --key {} https://HOST:PORT/...",
        ca_cert.display(),
        client_cert.display(),
        client_key.display()
    );
    Ok(())
}

/// Makes the certificate of node `id`, valid for its node name and each of `addrs`.
pub fn node(dir: &Path, id: u64, addrs: &[String], days: u32, force: bool) -> Result<(), CliError> {
    if id == 0 {
        return Err(CliError::Usage("--id must be 1 or more".into()));
    }
    if addrs.is_empty() {
        return Err(CliError::Usage("give at least one --addr HOST the node is reached at".into()));
    }
    // The node name first: it is the identity (tls.rs); the hosts are where it is reached.
    let mut sans = vec![dns_san(&tls::node_name(id))?];
    let mut names = vec![tls::node_name(id)];
    for addr in addrs {
        if let Some((san, name)) = host_san(addr, id)?
            && !sans.contains(&san)
        {
            sans.push(san);
            names.push(name);
        }
    }
    let cert_path = node_cert_path(dir, id);
    let key_path = node_key_path(dir, id);
    if !force {
        refuse_existing(&[&cert_path, &key_path])?;
    }
    let (ca_der, ca) = load_ca(dir)?;
    let (not_before, not_after) = validity(days)?;

    let mut params = base_params(&format!("vellum node {id}"), not_before, not_after);
    params.subject_alt_names = sans;
    params.extended_key_usages =
        vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    let key = new_key()?;
    let cert = params
        .signed_by(&key, &ca)
        .map_err(|e| CliError::Usage(format!("signing the certificate of node {id}: {e}")))?;
    // Catches a ca-key.pem that is not the key of ca.pem before anything is written.
    check_chain(&ca_der, cert.der(), webpki::KeyUsage::server_auth()).map_err(|e| {
        CliError::Usage(format!(
            "the new certificate does not verify against {} ({e}): is {} the key of that CA?",
            dir.join(CA_CERT).display(),
            dir.join(CA_KEY).display()
        ))
    })?;

    write_atomic(&key_path, &key.serialize_pem(), KEY_MODE)?;
    write_atomic(&cert_path, &cert.pem(), CERT_MODE)?;
    sync_dir(dir)?;

    let (c, k) = (cert_path.display(), key_path.display());
    println!(
        "wrote {c} (node {id}, valid for {}, until {}) and {k} (mode 0600)",
        names.join(", "),
        day(not_after)
    );
    println!("serve flags for node {id}:");
    println!(
        "  --peer-cert {c} --peer-key {k} --peer-ca {} --api-cert {c} --api-key {k}",
        dir.join(CA_CERT).display()
    );
    Ok(())
}

/// Parameters every certificate shares: a subject with `cn`, the validity, and an authority
/// key identifier (so that a verifier finds the CA by key, not by name alone).
fn base_params(
    cn: &str,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut subject = DistinguishedName::new();
    subject.push(DnType::CommonName, cn);
    params.distinguished_name = subject;
    params.not_before = not_before;
    params.not_after = not_after;
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params
}

fn new_key() -> Result<KeyPair, CliError> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
        .map_err(|e| CliError::Usage(format!("generating a P-256 key: {e}")))
}

/// From an hour ago (a node whose clock lags still accepts the certificate) to `days` from now.
fn validity(days: u32) -> Result<(OffsetDateTime, OffsetDateTime), CliError> {
    let now = OffsetDateTime::now_utc();
    let not_before = now.checked_sub(Duration::hours(1));
    let not_after = now.checked_add(Duration::days(i64::from(days)));
    match (not_before, not_after) {
        (Some(b), Some(a)) => Ok((b, a)),
        _ => Err(CliError::Usage(format!("--days {days} ends past the year 9999"))),
    }
}

/// `YYYY-MM-DD` (UTC).
fn day(t: OffsetDateTime) -> String {
    format!("{:04}-{:02}-{:02}", t.year(), u8::from(t.month()), t.day())
}

/// The SAN for one `--addr`, with the name it makes the certificate valid for: an IP address
/// SAN, or a DNS SAN for a host name. `None` when it is this node's own name (already there).
/// Refuses another node's name: a certificate carrying it would pass as that member.
fn host_san(addr: &str, id: u64) -> Result<Option<(SanType, String)>, CliError> {
    let host = addr.trim();
    let bracketed = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    if let Ok(ip) = bracketed.unwrap_or(host).parse::<IpAddr>() {
        return Ok(Some((SanType::IpAddress(ip), ip.to_string())));
    }
    // A fully qualified name's trailing dot is not part of the name a verifier compares.
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if DnsName::try_from(name.as_str()).is_err() {
        return Err(CliError::Usage(format!(
            "--addr {addr}: neither an IP address nor a DNS name (give the host alone, with no \
             port, scheme or wildcard)"
        )));
    }
    match node_of_name(&name) {
        Some(n) if n == id => Ok(None),
        Some(n) => Err(CliError::Usage(format!(
            "--addr {addr} is the identity name of node {n}: node {id}'s certificate must not \
             carry it"
        ))),
        None => Ok(Some((dns_san(&name)?, name))),
    }
}

/// The node whose identity name (`tls::node_name`) `name` is, if any. The id is the name's
/// digits; the name must then be exactly that node's name.
fn node_of_name(name: &str) -> Option<u64> {
    let digits: String = name.chars().filter(char::is_ascii_digit).collect();
    let id = digits.parse::<u64>().ok()?;
    (tls::node_name(id) == name).then_some(id)
}

fn dns_san(name: &str) -> Result<SanType, CliError> {
    Ia5String::try_from(name)
        .map(SanType::DnsName)
        .map_err(|e| CliError::Usage(format!("{name}: not a usable DNS name: {e}")))
}

/// `DIR`'s CA: its certificate (DER) and an issuer signing with its key.
fn load_ca(dir: &Path) -> Result<(CertificateDer<'static>, Issuer<'static, KeyPair>), CliError> {
    let cert_path = dir.join(CA_CERT);
    let key_path = dir.join(CA_KEY);
    for path in [&cert_path, &key_path] {
        if !path.exists() {
            return Err(CliError::Usage(format!(
                "{} does not exist: run vellum cert init {} first",
                path.display(),
                dir.display()
            )));
        }
    }
    let cert_pem = fs::read_to_string(&cert_path)
        .map_err(|e| CliError::Io(e, format!("reading {}", cert_path.display())))?;
    let key_pem = fs::read_to_string(&key_path)
        .map_err(|e| CliError::Io(e, format!("reading {}", key_path.display())))?;
    let key = KeyPair::from_pem(&key_pem).map_err(|e| {
        CliError::Usage(format!("{}: not a usable private key: {e}", key_path.display()))
    })?;
    let not_ca = |e: &dyn std::fmt::Display| {
        CliError::Usage(format!("{}: not a usable CA certificate: {e}", cert_path.display()))
    };
    let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| not_ca(&e))?;
    let issuer = Issuer::from_ca_cert_pem(&cert_pem, key).map_err(|e| not_ca(&e))?;
    Ok((der, issuer))
}

/// Whether `leaf` chains to `ca` for `usage` now (webpki, as the handshake checks it).
pub fn check_chain(
    ca: &CertificateDer<'_>,
    leaf: &CertificateDer<'_>,
    usage: webpki::KeyUsage,
) -> Result<(), webpki::Error> {
    let anchor = webpki::anchor_from_trusted_cert(ca)?;
    webpki::EndEntityCert::try_from(leaf)?.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        &[anchor],
        &[],
        UnixTime::now(),
        usage,
        None,
        None,
    )?;
    Ok(())
}

/// Refuses when any of `paths` exists (checked before anything is written).
fn refuse_existing(paths: &[&Path]) -> Result<(), CliError> {
    match paths.iter().find(|p| p.exists()) {
        Some(p) => Err(CliError::Usage(format!(
            "{} already exists: pass --force to replace it, or pick another DIR",
            p.display()
        ))),
        None => Ok(()),
    }
}

/// Creates `dir` (and missing parents) with mode 0700; an existing directory is left as is.
fn create_dir(dir: &Path) -> Result<(), CliError> {
    if dir.exists() && !dir.is_dir() {
        return Err(CliError::Usage(format!("{}: not a directory", dir.display())));
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|e| CliError::Io(e, format!("creating {}", dir.display())))
}

/// Writes `contents` to `path` with `mode`: into a fresh temporary file beside it, synced,
/// then renamed over `path`.
fn write_atomic(path: &Path, contents: &str, mode: u32) -> Result<(), CliError> {
    let io = |e, what: &str| CliError::Io(e, format!("{what} {}", path.display()));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    // A leftover from a crash may have other permissions: `mode` only applies to a new file.
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e, "writing")),
        _ => {}
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| io(e, "writing"))?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| io(e, "writing"))?;
    fs::rename(&tmp, path).map_err(|e| io(e, "writing"))
}

/// Makes the renames in `dir` durable.
fn sync_dir(dir: &Path) -> Result<(), CliError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| CliError::Io(e, format!("syncing {}", dir.display())))
}

#[cfg(test)]
mod tests;
