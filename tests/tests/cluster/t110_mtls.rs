//! Mutual TLS between members and TLS on the client API, with certificates `vellum cert`
//! makes in the test: a 3-node cluster forms, takes writes (through a follower too: the
//! forwarding is TLS with the follower's certificate), survives a leader kill, and the killed
//! node rejoins. Strangers get nothing: a certificate of another CA, or none, fails the
//! handshake on the Raft port; a certificate of the cluster's CA that does not name the
//! member a request claims to come from is refused. The term does not move.
//! And the secure default: plain HTTP off loopback is refused without `--insecure`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::harness::{Cluster, Node, free_port, phase, vellum_bin};

fn vellum(args: &[&str]) -> std::process::Output {
    Command::new(vellum_bin()).args(args).output().unwrap()
}

/// `vellum cert init DIR`, then node certificates for `ids` on 127.0.0.1.
pub fn pki(dir: &Path, ids: &[u64]) -> PathBuf {
    let d = dir.to_str().unwrap();
    let out = vellum(&["cert", "init", d]);
    assert!(out.status.success(), "cert init: {}", String::from_utf8_lossy(&out.stderr));
    for id in ids {
        let out = vellum(&["cert", "node", d, "--id", &id.to_string(), "--addr", "127.0.0.1"]);
        assert!(out.status.success(), "cert node: {}", String::from_utf8_lossy(&out.stderr));
    }
    dir.to_path_buf()
}

/// A blocking client trusting `ca`, presenting `cert`/`key` when given.
pub fn tls_client(ca: &Path, identity: Option<(&Path, &Path)>) -> reqwest::blocking::Client {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => {
            let certs: Vec<_> =
                CertificateDer::pem_file_iter(cert).unwrap().map(Result::unwrap).collect();
            builder
                .with_client_auth_cert(certs, PrivateKeyDer::from_pem_file(key).unwrap())
                .unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    crate::harness::client_builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .use_preconfigured_tls(config)
        .build()
        .unwrap()
}

pub fn term(c: &Cluster, n: &crate::harness::Node) -> u64 {
    let v: serde_json::Value =
        c.http.get(n.url("/v1/cluster/status")).send().unwrap().json().unwrap();
    v["term"].as_u64().unwrap()
}

/// A vote RPC to `raft` on 127.0.0.1 claiming to come from node `from`, through `client`.
pub(crate) fn forged_vote(
    client: &reqwest::blocking::Client,
    raft: u16,
    from: u64,
    to: u64,
) -> reqwest::Result<reqwest::blocking::Response> {
    client
        .post(format!("https://127.0.0.1:{raft}/raft/vote"))
        .header("x-vellum-from", format!("{from}:-"))
        .header("x-vellum-to", format!("{to}:-"))
        .body(vec![0u8; 64])
        .send()
}

#[test]
fn an_mtls_cluster_serves_and_refuses_strangers() {
    let mut c = Cluster::new(3);
    let pki = pki(&c.dir.path().join("pki"), &[1, 2, 3]);
    let foreign = pki_foreign(c.dir.path());
    let ca = pki.join("ca.pem");
    for n in &mut c.nodes {
        let (cert, key) =
            (pki.join(format!("node-{}.pem", n.id)), pki.join(format!("node-{}-key.pem", n.id)));
        use_mtls(n, &cert, &key, &ca);
    }
    c.http = tls_client(&ca, Some((&pki.join("client.pem"), &pki.join("client-key.pem"))));
    phase("start with mutual TLS on both ports");
    c.start_all();
    c.wait_ready();
    let leader = c.leader();
    let follower = c.nodes.iter().find(|n| n.id != leader).unwrap();
    assert!(c.put(c.by_ref(leader), "through-the-leader", "1"), "{}", c.logs());
    assert!(c.put(follower, "through-a-follower", "2"), "forwarded over TLS: {}", c.logs());
    assert_eq!(c.read(follower, "through-the-leader", false).as_deref(), Some("1"));

    phase("the CLI over TLS with a client certificate");
    let endpoint = format!("https://127.0.0.1:{}", follower.api);
    let (ca_s, cert_s, key_s) = (
        ca.to_str().unwrap().to_string(),
        pki.join("client.pem").to_str().unwrap().to_string(),
        pki.join("client-key.pem").to_str().unwrap().to_string(),
    );
    let tls_args = ["--cacert", &ca_s, "--cert", &cert_s, "--key", &key_s];
    let out = vellum(
        &[&["kv", "put", "cli-key", "cli-value", "--endpoint", &endpoint], &tls_args[..]].concat(),
    );
    assert!(
        out.status.success(),
        "vellum kv put over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = vellum(&[&["kv", "get", "cli-key", "--endpoint", &endpoint], &tls_args[..]].concat());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "cli-value");
    let out = vellum(&["kv", "get", "cli-key", "--endpoint", &endpoint, "--cacert", &ca_s]);
    assert!(!out.status.success(), "no client certificate, no answer");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");

    phase("strangers on the Raft port");
    let target = c.by_ref(leader);
    let before = term(&c, target);
    let anonymous = tls_client(&ca, None);
    let err = forged_vote(&anonymous, target.raft, 2, leader).unwrap_err();
    eprintln!("no certificate: {err}");
    let other_ca = tls_client(
        &foreign.join("ca.pem"),
        Some((&foreign.join("node-2.pem"), &foreign.join("node-2-key.pem"))),
    );
    // The stranger trusts its own CA: the node's certificate fails its check too; one that
    // trusts the cluster's CA and presents the foreign certificate must fail on the node's side.
    let foreign_cert =
        tls_client(&ca, Some((&foreign.join("node-2.pem"), &foreign.join("node-2-key.pem"))));
    assert!(forged_vote(&other_ca, target.raft, 2, leader).is_err());
    let err = forged_vote(&foreign_cert, target.raft, 2, leader).unwrap_err();
    eprintln!("certificate of another CA: {err}");
    for path in ["append", "snapshot"] {
        let sent = foreign_cert
            .post(format!("https://127.0.0.1:{}/raft/{path}", target.raft))
            .header("x-vellum-from", "2:-")
            .body(vec![0u8; 64])
            .send();
        assert!(sent.is_err(), "/raft/{path} with a foreign certificate: {sent:?}");
    }
    // The cluster's own CA, but a certificate that names another member (or none).
    let impostor = other_member(&c, leader);
    let as_other = tls_client(
        &ca,
        Some((
            &pki.join(format!("node-{impostor}.pem")),
            &pki.join(format!("node-{impostor}-key.pem")),
        )),
    );
    let client_cert = tls_client(&ca, Some((&pki.join("client.pem"), &pki.join("client-key.pem"))));
    let speaker = c.nodes.iter().map(|n| n.id).find(|id| *id != leader && *id != impostor).unwrap();
    for (who, client) in [("another member's", &as_other), ("a client", &client_cert)] {
        let r = forged_vote(client, target.raft, speaker, leader).unwrap();
        assert_eq!(r.status().as_u16(), 403, "{who} certificate speaking for node {speaker}");
        let v: serde_json::Value = r.json().unwrap();
        assert_eq!(v["error"], "identity_mismatch");
    }
    let members = |client: &reqwest::blocking::Client| {
        client
            .get(format!("https://127.0.0.1:{}/raft/members", target.raft))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(members(&client_cert), 403, "a client certificate names no member");
    assert_eq!(members(&as_other), 200, "a member may ask who the members are");
    assert_eq!(term(&c, target), before, "the term moved: {}", c.logs());
    assert!(
        c.by_ref(leader).log_text().contains("refused a TLS connection"),
        "the log says who tried"
    );
    phase("the client API wants a client certificate too");
    assert!(anonymous.get(target.url("/v1/cluster/status")).send().is_err());

    phase("kill -9 the leader; a new one; the old one rejoins");
    c.by_id(leader).kill();
    let new = c.leader();
    assert_ne!(new, leader);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.put(c.by_ref(new), "after-the-kill", "3") {
        assert!(Instant::now() < deadline, "no write after the kill: {}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    c.by_id(leader).start();
    c.wait_ready();
    let back = c.by_ref(leader);
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.read(back, "after-the-kill", true).as_deref() != Some("3") {
        assert!(Instant::now() < deadline, "node {leader} did not catch up: {}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(c.put(back, "through-the-restarted-node", "4"), "{}", c.logs());
}

/// Another CA and a certificate of it for node 2, as a stranger would make them.
fn pki_foreign(dir: &Path) -> PathBuf {
    pki(&dir.join("foreign-pki"), &[2])
}

/// A member other than `than`.
fn other_member(c: &Cluster, than: u64) -> u64 {
    c.nodes.iter().map(|n| n.id).find(|id| *id != than).unwrap()
}

#[test]
fn plain_http_off_loopback_is_refused_unless_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let (api, raft) = (free_port(), free_port());
    let volume = dir.path().join("x.vlm");
    let args = |extra: &[&str]| {
        let mut a = vec![
            "serve".to_string(),
            "--id".into(),
            "1".into(),
            "--api-addr".into(),
            format!("0.0.0.0:{api}"),
            "--raft-addr".into(),
            format!("127.0.0.1:{raft}"),
            "--volume".into(),
            volume.to_str().unwrap().into(),
            "--volume-size".into(),
            "64MiB".into(),
            "--initial-cluster".into(),
            format!("1=127.0.0.1:{raft}/127.0.0.1:{api}"),
        ];
        a.extend(extra.iter().map(|s| (*s).to_string()));
        a
    };
    let out = Command::new(vellum_bin()).args(args(&[])).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("--insecure") && stderr.contains("0.0.0.0"), "{stderr}");
    assert!(!volume.exists(), "refused before touching the volume");
    phase("--insecure serves");
    let mut child = Command::new(vellum_bin())
        .args(args(&["--insecure"]))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let http = crate::harness::client_builder().no_proxy().build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        if http
            .get(format!("http://127.0.0.1:{api}/readyz"))
            .send()
            .is_ok_and(|r| r.status().is_success())
        {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(ready, "--insecure on 0.0.0.0 serves");
}

#[test]
fn the_raft_port_answers_forged_bodies_with_json_errors() {
    // Length prefixes claiming 2^62 bytes: refused (400, JSON), nothing allocated, the node
    // serves on (the decode limit itself is unit-tested in node/src/server/codec.rs).
    let mut c = Cluster::new(1);
    c.start_all();
    c.wait_ready();
    let n = &c.nodes[0];
    let mut forged = vec![253u8];
    forged.extend_from_slice(&(1u64 << 62).to_le_bytes());
    for path in ["append", "vote", "snapshot"] {
        let r = c
            .http
            .post(format!("http://127.0.0.1:{}/raft/{path}", n.raft))
            .header("x-vellum-from", "1:-")
            .header("x-vellum-to", "1:-")
            .body([forged.clone(), forged.clone()].concat())
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "/raft/{path}");
        let v: serde_json::Value = r.json().unwrap();
        assert_eq!(v["error"], "bad_rpc");
    }
    assert!(c.put(n, "still", "serving"));
}

/// Serves both of `n`'s ports with mutual TLS: `cert` and `key` as its identity, `ca` as the
/// CA of its peers and of its API's clients.
pub fn use_mtls(n: &mut Node, cert: &Path, key: &Path, ca: &Path) {
    use_tls(n, cert, key, ca);
    n.extra.push("--api-ca".into());
    n.extra.push(ca.to_str().unwrap().into());
}

/// Serves `n`'s Raft port with mutual TLS (`ca` as its peers' CA) and its API with TLS that
/// asks no client certificate: `cert` and `key` as its identity on both.
pub fn use_tls(n: &mut Node, cert: &Path, key: &Path, ca: &Path) {
    for (flag, path) in [
        ("--peer-cert", cert),
        ("--peer-key", key),
        ("--peer-ca", ca),
        ("--api-cert", cert),
        ("--api-key", key),
    ] {
        n.extra.push(flag.into());
        n.extra.push(path.to_str().unwrap().into());
    }
    n.https = true;
}
