#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::*;
use crate::security::tls::Identity;

fn addrs(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| (*a).to_string()).collect()
}

fn usage(result: Result<(), CliError>) -> String {
    match result {
        Err(CliError::Usage(msg)) => msg,
        other => panic!("expected a usage error, got {other:?}"),
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn ca_der(dir: &Path) -> CertificateDer<'static> {
    tls::load_certs(&dir.join(CA_CERT)).unwrap().remove(0)
}

/// A CA in `root/name` and the certificate of node 1 (127.0.0.1, db1.example.com).
fn cluster(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    init(&dir, 30, false).unwrap();
    node(&dir, 1, &addrs(&["127.0.0.1", "db1.example.com"]), 30, false).unwrap();
    dir
}

fn identity(dir: &Path, cert: &str, key: &str) -> Identity {
    Identity::load(&dir.join(cert), &dir.join(key)).unwrap()
}

#[test]
fn node_certificate_chains_to_the_ca_and_names_its_node() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = cluster(tmp.path(), "certs");
    assert_eq!(mode(&dir), 0o700);
    for key in [CA_KEY, CLIENT_KEY, "node-1-key.pem"] {
        assert_eq!(mode(&dir.join(key)), 0o600, "{key}");
    }
    let mut files: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let expected = [CA_KEY, CA_CERT, CLIENT_KEY, CLIENT_CERT, "node-1-key.pem", "node-1.pem"];
    assert_eq!(files, expected, "no temporary file is left");

    let certs = tls::load_certs(&node_cert_path(&dir, 1)).unwrap();
    assert_eq!(certs.len(), 1);
    let leaf = &certs[0];
    let ca = ca_der(&dir);
    check_chain(&ca, leaf, webpki::KeyUsage::server_auth()).unwrap();
    check_chain(&ca, leaf, webpki::KeyUsage::client_auth()).unwrap();
    assert!(tls::names_node(leaf, 1));
    assert!(!tls::names_node(leaf, 2));

    let ee = webpki::EndEntityCert::try_from(leaf).unwrap();
    let ip = ServerName::IpAddress("127.0.0.1".parse::<IpAddr>().unwrap().into());
    ee.verify_is_valid_for_subject_name(&ip).unwrap();
    let dns = ServerName::try_from("db1.example.com").unwrap();
    ee.verify_is_valid_for_subject_name(&dns).unwrap();
    let other_ip = ServerName::IpAddress("127.0.0.2".parse::<IpAddr>().unwrap().into());
    assert!(ee.verify_is_valid_for_subject_name(&other_ip).is_err());

    let me = identity(&dir, "node-1.pem", "node-1-key.pem");
    let ca_path = dir.join(CA_CERT);
    tls::server_config(&me, Some(&ca_path)).unwrap();
    tls::client_config(tls::load_roots(&ca_path).unwrap(), Some(&me)).unwrap();
}

/// Connects a client expecting node `expect` to a server; whether each side completed
/// the handshake and (the client) read the server's greeting.
async fn handshake(server: Arc<ServerConfig>, client: ClientConfig, expect: u64) -> (bool, bool) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = TlsAcceptor::from(server);
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        match acceptor.accept(tcp).await {
            Ok(mut tls) => {
                tls.write_all(b"ok").await.unwrap();
                tls.shutdown().await.unwrap();
                true
            }
            Err(_) => false,
        }
    });
    let name = ServerName::try_from(tls::node_name(expect)).unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    // In TLS 1.3 the client finishes before the server has checked its certificate: a
    // refused client sees the alert on its first read.
    let client = match TlsConnector::from(Arc::new(client)).connect(name, tcp).await {
        Ok(mut tls) => {
            let mut got = Vec::new();
            tls.read_to_end(&mut got).await.is_ok() && got == b"ok"
        }
        Err(_) => false,
    };
    (server.await.unwrap(), client)
}

#[tokio::test]
async fn a_member_call_accepts_only_a_certificate_naming_the_callee_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = cluster(tmp.path(), "one");
    node(&dir, 2, &addrs(&["127.0.0.2"]), 30, false).unwrap();
    // A wildcard certificate of the same CA (vellum cert never makes one; another tool
    // under the same CA could): webpki refuses `*.vellum` (a wildcard over one label)
    // for node-1.vellum, so it cannot answer as a member.
    let (_, ca) = load_ca(&dir).unwrap();
    let (not_before, not_after) = validity(30).unwrap();
    let mut params = base_params("wildcard", not_before, not_after);
    params.subject_alt_names = vec![dns_san("*.vellum").unwrap()];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = new_key().unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    let wildcard = Identity {
        certs: vec![cert.der().clone()],
        key: rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
    };
    let ca_path = dir.join(CA_CERT);

    let me = identity(&dir, "node-2.pem", "node-2-key.pem");
    let call = |server_identity: &Identity, target: u64| {
        let server = tls::server_config(server_identity, Some(&ca_path)).unwrap();
        let client = tls::client_config(tls::load_roots(&ca_path).unwrap(), Some(&me)).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(20), handshake(server, client, target))
    };
    let node1 = identity(&dir, "node-1.pem", "node-1-key.pem");
    assert_eq!(call(&node1, 1).await.unwrap(), (true, true), "node 1 answers as node 1");
    assert!(!call(&node1, 3).await.unwrap().1, "node 1 is not node 3");
    assert!(!call(&wildcard, 1).await.unwrap().1, "a wildcard is no member");
}

#[tokio::test]
async fn handshake_needs_a_client_certificate_from_the_cluster_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = cluster(tmp.path(), "one");
    node(&dir, 2, &addrs(&["127.0.0.2"]), 30, false).unwrap();
    let other = cluster(tmp.path(), "two");
    let ca = dir.join(CA_CERT);
    let server =
        tls::server_config(&identity(&dir, "node-1.pem", "node-1-key.pem"), Some(&ca)).unwrap();
    let client =
        |id: Option<&Identity>| tls::client_config(tls::load_roots(&ca).unwrap(), id).unwrap();
    let run = |client, expect| {
        let server = Arc::clone(&server);
        tokio::time::timeout(std::time::Duration::from_secs(20), handshake(server, client, expect))
    };

    // Peers and clients of the cluster get through.
    let node2 = identity(&dir, "node-2.pem", "node-2-key.pem");
    assert_eq!(run(client(Some(&node2)), 1).await.unwrap(), (true, true));
    let curl = identity(&dir, CLIENT_CERT, CLIENT_KEY);
    assert_eq!(run(client(Some(&curl)), 1).await.unwrap(), (true, true));

    // Node 1 of another cluster's CA, or no certificate at all: the server refuses.
    let stranger = identity(&other, "node-1.pem", "node-1-key.pem");
    assert_eq!(run(client(Some(&stranger)), 1).await.unwrap(), (false, false));
    assert_eq!(run(client(None), 1).await.unwrap(), (false, false));

    // The client refuses a server that is not the node it called.
    let (_, client_ok) = run(client(Some(&node2)), 2).await.unwrap();
    assert!(!client_ok);
    // And one whose certificate comes from another CA, whatever its name.
    let impostor = tls::server_config(&stranger, Some(&ca)).unwrap();
    let (_, client_ok) = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        handshake(impostor, client(Some(&node2)), 1),
    )
    .await
    .unwrap();
    assert!(!client_ok);
}

#[test]
fn init_refuses_to_overwrite_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    init(dir, 30, false).unwrap();
    let before = fs::read(dir.join(CA_CERT)).unwrap();
    let msg = usage(init(dir, 30, false));
    assert!(msg.contains("--force") && msg.contains("another DIR"), "{msg}");
    assert_eq!(fs::read(dir.join(CA_CERT)).unwrap(), before);
    init(dir, 30, true).unwrap();
    assert_ne!(fs::read(dir.join(CA_CERT)).unwrap(), before);
    assert_eq!(mode(&dir.join(CA_KEY)), 0o600);
}

#[test]
fn node_refuses_without_a_ca_or_over_existing_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let msg = usage(node(dir, 1, &addrs(&["127.0.0.1"]), 30, false));
    assert!(msg.contains("run vellum cert init"), "{msg}");
    assert!(!node_cert_path(dir, 1).exists());

    init(dir, 30, false).unwrap();
    node(dir, 1, &addrs(&["127.0.0.1"]), 30, false).unwrap();
    let before = fs::read(node_cert_path(dir, 1)).unwrap();
    let msg = usage(node(dir, 1, &addrs(&["127.0.0.1"]), 30, false));
    assert!(msg.contains("--force"), "{msg}");
    assert_eq!(fs::read(node_cert_path(dir, 1)).unwrap(), before);
    node(dir, 1, &addrs(&["127.0.0.1"]), 30, true).unwrap();
    assert_ne!(fs::read(node_cert_path(dir, 1)).unwrap(), before);
    usage(node(dir, 0, &addrs(&["127.0.0.1"]), 30, false));
    usage(node(dir, 3, &[], 30, false));
}

#[test]
fn node_refuses_a_ca_key_that_is_not_the_cas() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    init(&a, 30, false).unwrap();
    init(&b, 30, false).unwrap();
    fs::copy(b.join(CA_KEY), a.join(CA_KEY)).unwrap();
    let msg = usage(node(&a, 1, &addrs(&["127.0.0.1"]), 30, false));
    assert!(msg.contains("the key of that CA"), "{msg}");
    assert!(!node_cert_path(&a, 1).exists());
}

#[test]
fn bad_addrs_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    init(dir, 30, false).unwrap();
    for bad in ["127.0.0.1:8080", "https://db1", "*.vellum", "a b", "", "1.2.3", "node-2.vellum"] {
        let msg = usage(node(dir, 1, &addrs(&[bad]), 30, false));
        assert!(msg.contains("--addr"), "{bad}: {msg}");
        assert!(!node_cert_path(dir, 1).exists(), "{bad}");
    }
    // Its own name (any case), a bracketed IPv6 address, a fully qualified name.
    node(dir, 1, &addrs(&["Node-1.Vellum", "[::1]", "DB1.example.com."]), 30, false).unwrap();
    let leaf = tls::load_certs(&node_cert_path(dir, 1)).unwrap().remove(0);
    let ee = webpki::EndEntityCert::try_from(&leaf).unwrap();
    let v6 = ServerName::IpAddress("::1".parse::<IpAddr>().unwrap().into());
    ee.verify_is_valid_for_subject_name(&v6).unwrap();
    let dns = ServerName::try_from("db1.example.com").unwrap();
    ee.verify_is_valid_for_subject_name(&dns).unwrap();
    assert!(tls::names_node(&leaf, 1));
}

#[test]
fn client_certificate_is_for_clients_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    init(dir, 30, false).unwrap();
    let ca = ca_der(dir);
    let client = tls::load_certs(&dir.join(CLIENT_CERT)).unwrap().remove(0);
    check_chain(&ca, &client, webpki::KeyUsage::client_auth()).unwrap();
    assert!(check_chain(&ca, &client, webpki::KeyUsage::server_auth()).is_err());
    for id in 0..=5 {
        assert!(!tls::names_node(&client, id), "node {id}");
    }
}
