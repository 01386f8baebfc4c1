//! TLS for the node's two ports and for its clients: rustls with the `ring` provider.
//!
//! Identity convention: the certificate of node `N` is valid for the DNS name
//! [`node_name`]`(N)` (`node-N.vellum`), besides the host names and IP addresses it is
//! served under. That name is what binds a certificate to a member:
//! - a node calling peer `N` verifies that the peer's certificate is valid for
//!   `node-N.vellum` (the connection goes to `N`'s Raft address, the name checked is `N`'s);
//! - a node receiving a Raft RPC that says it comes from member `N` checks that the client
//!   certificate of the connection is valid for `node-N.vellum` (`raft_api.rs`).
//!
//! Both directions verify against the peer CA (`--peer-ca`) only: a certificate from any
//! other CA, or none, fails the handshake. `vellum cert` (cli/cert.rs) makes certificates
//! that follow the convention.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// The DNS name the certificate of node `id` is valid for.
pub fn node_name(id: u64) -> String {
    format!("node-{id}.vellum")
}

/// Installs `ring` as the process's crypto provider (once; later calls do nothing). reqwest,
/// built without a provider of its own, uses it too.
pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Why TLS material could not be used, as one line naming the file.
pub type TlsError = String;

/// The certificates (leaf first) of a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("reading certificates from {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("reading certificates from {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("reading a private key from {}: {e}", path.display()))
}

/// The trust anchors of a PEM file of CA certificates.
pub fn load_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots
            .add(cert)
            .map_err(|e| format!("{}: not a usable CA certificate: {e}", path.display()))?;
    }
    Ok(roots)
}

/// The node ids `cert` (DER) names: those whose [`node_name`] is exactly one of its DNS
/// subject alternative names. A wildcard (`*.vellum`) names no member: a certificate that
/// could stand for every node must not speak for any. The chain is checked by the handshake
/// that presented the certificate.
pub fn named_nodes(cert: &CertificateDer<'_>) -> Vec<u64> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        return Vec::new();
    };
    let Ok(Some(san)) = parsed.subject_alternative_name() else { return Vec::new() };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(d) => node_of_name(d),
            _ => None,
        })
        .collect()
}

/// The id whose [`node_name`] `name` is, exactly (ASCII case aside).
fn node_of_name(name: &str) -> Option<u64> {
    let lower = name.to_ascii_lowercase();
    let id: u64 = lower.strip_prefix("node-")?.strip_suffix(".vellum")?.parse().ok()?;
    (node_name(id) == lower).then_some(id)
}

/// Whether `cert` names node `id` (see [`named_nodes`]).
#[cfg(test)]
pub fn names_node(cert: &CertificateDer<'_>, id: u64) -> bool {
    named_nodes(cert).contains(&id)
}

/// A certificate with its key, as a node presents it.
pub struct Identity {
    pub certs: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Identity {
    pub fn load(cert: &Path, key: &Path) -> Result<Identity, TlsError> {
        Ok(Identity { certs: load_certs(cert)?, key: load_key(key)? })
    }
}

impl Clone for Identity {
    fn clone(&self) -> Identity {
        Identity { certs: self.certs.clone(), key: self.key.clone_key() }
    }
}

/// ALPN protocols both ports speak (h2 and HTTP/1.1 over TLS).
fn alpn() -> Vec<Vec<u8>> {
    vec![b"h2".to_vec(), b"http/1.1".to_vec()]
}

/// A server config presenting `me`; with `client_ca`, every client must present a certificate
/// that chains to it (the handshake fails otherwise).
pub fn server_config(
    me: &Identity,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>, TlsError> {
    install_provider();
    let builder = ServerConfig::builder();
    let builder = match client_ca {
        Some(ca) => {
            let verifier = WebPkiClientVerifier::builder(Arc::new(load_roots(ca)?))
                .build()
                .map_err(|e| format!("{}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(me.certs.clone(), me.key.clone_key())
        .map_err(|e| format!("the certificate and key do not make a server identity: {e}"))?;
    config.alpn_protocols = alpn();
    Ok(Arc::new(config))
}

/// A client config trusting the CAs of `roots`, presenting `me` when given.
pub fn client_config(
    roots: RootCertStore,
    me: Option<&Identity>,
) -> Result<ClientConfig, TlsError> {
    install_provider();
    let builder = ClientConfig::builder().with_root_certificates(roots);
    let mut config = match me {
        Some(me) => builder
            .with_client_auth_cert(me.certs.clone(), me.key.clone_key())
            .map_err(|e| format!("the certificate and key do not make a client identity: {e}"))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(names: &[&str]) -> CertificateDer<'static> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_string()).collect();
        rcgen::generate_simple_self_signed(names)
            .map_or_else(|_| CertificateDer::from(Vec::new()), |c| c.cert.der().clone())
    }

    #[test]
    fn only_the_exact_node_name_names_a_member() {
        let node = self_signed(&["node-1.vellum", "10.0.0.1"]);
        assert!(names_node(&node, 1));
        assert!(!names_node(&node, 2));
        assert!(!names_node(&node, 11), "node-11 is not node-1");
        assert_eq!(named_nodes(&node), vec![1]);
        assert!(named_nodes(&self_signed(&["node-01.vellum", "node-+1.vellum"])).is_empty());
        assert!(named_nodes(&self_signed(&["client.example.com"])).is_empty());
        let wildcard = self_signed(&["*.vellum"]);
        assert!(!names_node(&wildcard, 1), "a wildcard stands for no member");
        let other = self_signed(&["node-1.vellum.example.com", "xnode-1.vellum"]);
        assert!(!names_node(&other, 1));
        assert!(!names_node(&CertificateDer::from(vec![0u8; 16]), 1), "garbage names nobody");
    }
}
