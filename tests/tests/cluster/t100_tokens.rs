//! `--auth-tokens`: bearer tokens with roles on the client API, reloaded on SIGHUP, never
//! logged; the probes stay open; the CLI presents `--token` / `VELLUM_TOKEN`.

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::blocking::{RequestBuilder, Response};

use crate::harness::{Cluster, free_port, phase, vellum_bin};

// Long and random-looking, so that finding one in the log cannot be an accident.
const READ: &str = "rd-5f1c0e8a9b27d4c3a6e1f08b72d95c4e";
const WRITE: &str = "wr-c2a94f7e13b86d05e9f4a27c18d3b6e0";
const ADMIN: &str = "ad-8e3d17b5c940a6f2d1e85b3c7a09f4d6";

fn with(req: RequestBuilder, token: Option<&str>) -> Response {
    match token {
        Some(t) => req.bearer_auth(t),
        None => req,
    }
    .send()
    .unwrap()
}

/// Status and JSON body of an error answer.
fn json(r: Response) -> (u16, serde_json::Value) {
    let status = r.status().as_u16();
    (status, r.json().unwrap_or_else(|_| panic!("HTTP {status} without a JSON body")))
}

fn vellum(args: &[&str], env_token: Option<&str>) -> (bool, String, String) {
    let mut cmd = Command::new(vellum_bin());
    cmd.args(args).env_remove("VELLUM_TOKEN");
    if let Some(t) = env_token {
        cmd.env("VELLUM_TOKEN", t);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The status line the node answers to a request that declares a 100 MB body and sends
/// none: the token check must answer before anything waits for the body.
fn status_line_of_declared_body(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(
        b"PUT /v1/kv/big HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\
          Content-Type: application/octet-stream\r\n\r\n",
    )
    .unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_string()
}

#[test]
fn tokens_with_roles_guard_the_api() {
    let mut c = Cluster::new(1);
    let file = c.dir.path().join("tokens");
    std::fs::write(
        &file,
        format!("# role per token\n{READ} read\n{WRITE} write  # the app\n\n{ADMIN} admin\n"),
    )
    .unwrap();
    c.nodes[0].extra.extend(["--auth-tokens".into(), file.display().to_string()]);
    c.start_all();
    c.wait_ready(); // /readyz is open
    let n = &c.nodes[0];
    let h = &c.http;

    phase("no token: 401 with a JSON error and a challenge");
    let r = with(h.put(n.url("/v1/kv/k")).body("v"), None);
    assert_eq!(
        r.headers().get("www-authenticate").map(|v| v.to_str().unwrap()),
        Some(r#"Bearer realm="vellum""#)
    );
    let (status, v) = json(r);
    assert_eq!((status, v["error"].as_str()), (401, Some("unauthorized")), "{v}");
    let (status, v) = json(with(h.put(n.url("/v1/kv/k")).body("v"), Some("not-a-token")));
    assert_eq!((status, v["error"].as_str()), (401, Some("unauthorized")), "{v}");
    for path in ["/v1/kv/k", "/v1/cluster/status", "/metrics", "/v1/no/such/route"] {
        assert_eq!(with(h.get(n.url(path)), None).status().as_u16(), 401, "{path}");
    }
    assert!(status_line_of_declared_body(n.api).contains(" 401 "), "checked before the body");

    phase("probes stay open");
    for path in ["/livez", "/readyz"] {
        assert!(with(h.get(n.url(path)), None).status().is_success(), "{path}");
    }

    phase("roles");
    let (status, v) = json(with(h.put(n.url("/v1/kv/k")).body("v"), Some(READ)));
    assert_eq!(
        (status, &v),
        (403, &serde_json::json!({"error": "forbidden", "role": "read", "needs": "write"}))
    );
    assert!(with(h.put(n.url("/v1/kv/k")).body("v"), Some(WRITE)).status().is_success());
    let r = with(h.get(n.url("/v1/kv/k")), Some(READ));
    assert!(r.status().is_success());
    assert_eq!(r.text().unwrap(), "v");
    assert!(with(h.get(n.url("/metrics")), Some(READ)).status().is_success());
    let members = serde_json::json!({ "members": [1] });
    let (status, v) = json(with(h.put(n.url("/v1/cluster/members")).json(&members), Some(WRITE)));
    assert_eq!(
        (status, v["error"].as_str(), v["needs"].as_str()),
        (403, Some("forbidden"), Some("admin"))
    );
    assert!(with(h.get(n.url("/v1/cluster/status")), Some(READ)).status().is_success());
    let r = with(h.put(n.url("/v1/cluster/members")).json(&members), Some(ADMIN));
    assert!(r.status().is_success(), "{}", r.text().unwrap_or_default());
    c.token = Some(ADMIN.into());
    assert_eq!(c.leader(), 1);
    assert!(c.put(n, "by-admin", "yes"));

    phase("the CLI presents --token / VELLUM_TOKEN");
    let ep = format!("127.0.0.1:{}", n.api);
    let (ok, _, err) = vellum(&["kv", "put", "--endpoint", &ep, "cli", "x"], None);
    assert!(!ok && err.trim().lines().count() == 1, "{err}");
    assert!(err.contains("HTTP 401: unauthorized") && err.contains("VELLUM_TOKEN"), "{err}");
    let (ok, _, err) = vellum(&["kv", "put", "--endpoint", &ep, "cli", "x"], Some(READ));
    assert!(!ok && err.contains("HTTP 403: forbidden") && err.contains("needs write"), "{err}");
    assert!(!err.contains(READ), "{err}");
    let (ok, out, err) = vellum(&["kv", "put", "--endpoint", &ep, "cli", "x"], Some(WRITE));
    assert!(ok, "{out}{err}");
    let (ok, out, _) = vellum(&["kv", "get", "--endpoint", &ep, "--token", READ, "cli"], None);
    assert!(ok && out == "x\n", "{out}");
    let (ok, out, _) = vellum(&["cluster", "status", "--endpoint", &ep, "--token", READ], None);
    assert!(ok && out.contains("is leader"), "{out}");

    phase("SIGHUP reloads the file: the write token is gone");
    std::fs::write(&file, format!("{READ} read\n{ADMIN} admin\n")).unwrap();
    n.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = with(h.put(n.url("/v1/kv/k")).body("w"), Some(WRITE)).status().as_u16();
        if status == 401 {
            break;
        }
        assert_eq!(status, 200);
        assert!(Instant::now() < deadline, "the write token still works 10 s after SIGHUP");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(with(h.put(n.url("/v1/kv/k")).body("a"), Some(ADMIN)).status().is_success());
    assert_eq!(c.read(n, "k", false).as_deref(), Some("a"));

    phase("a bad file on SIGHUP keeps the previous tokens");
    std::fs::write(&file, format!("{ADMIN} superuser\n")).unwrap();
    n.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !n.log_text().contains("keeping the previous tokens") {
        assert!(Instant::now() < deadline, "no reload error logged: {}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(with(h.get(n.url("/v1/kv/k")), Some(READ)).status().is_success());
    assert!(with(h.put(n.url("/v1/kv/k")).body("b"), Some(ADMIN)).status().is_success());

    phase("the log names the file and counts, never a token");
    let log = n.log_text();
    assert!(log.contains("client API requires bearer tokens (3 tokens from"), "{log}");
    assert!(log.contains("reloaded 2 tokens from"), "{log}");
    assert!(log.contains("line 1: an unknown role"), "{log}");
    for t in [READ, WRITE, ADMIN] {
        assert!(!log.contains(t), "a token is in the log:\n{log}");
    }
    c.nodes[0].stop();
}

#[test]
fn a_bad_token_file_stops_the_node_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("empty", "# nobody\n\n", "holds no tokens"),
        ("swapped", "read secret-7d1f4b9a\n", "line 1: an unknown role"),
        ("twice", "secret-7d1f4b9a read\nsecret-7d1f4b9a admin\n", "line 2: the same token"),
    ];
    for (name, text, says) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        let out = Command::new(vellum_bin())
            .args(["serve", "--id", "1", "--api-addr", "127.0.0.1:1", "--raft-addr"])
            .args(["127.0.0.1:2", "--volume", "memory:", "--auth-tokens"])
            .arg(&file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: started");
        assert!(err.contains(says) && err.contains(&file.display().to_string()), "{err}");
        assert!(!err.contains("secret-7d1f4b9a"), "{err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("vellum: ")).count(), 1, "{err}");
    }
}

#[test]
fn a_node_joins_with_a_token_and_forwards_the_callers_token() {
    let mut c = Cluster::new(1);
    // Each node also knows a write token the other does not: a follower that accepts its
    // own, forwards it, and the leader refuses it, proves the leader checks the caller.
    let only = ["on1-0b7e4d92c5a13f86e2d7a4c9b1f05e38", "on2-6a2f9c1d7e84b30f5c6d2a8e9b17f4c0"];
    let files: Vec<_> = (0..2)
        .map(|i| {
            let file = c.dir.path().join(format!("tokens-{}", i + 1));
            let text = format!("{READ} read\n{WRITE} write\n{ADMIN} admin\n{} write\n", only[i]);
            std::fs::write(&file, text).unwrap();
            file.display().to_string()
        })
        .collect();
    c.nodes[0].extra.extend(["--auth-tokens".into(), files[0].clone()]);
    c.token = Some(ADMIN.into());
    c.start_all();
    c.wait_ready();
    phase("node 2 joins with --join-token");
    let join = format!("127.0.0.1:{}", c.nodes[0].api);
    let extra = vec![
        "--join".into(),
        join,
        "--join-token".into(),
        ADMIN.into(),
        "--auth-tokens".into(),
        files[1].clone(),
    ];
    let node = Cluster::node(c.dir.path(), 2, free_port(), free_port(), extra);
    c.nodes.push(node);
    c.nodes[1].start();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status: Option<serde_json::Value> =
            c.get(&c.nodes[0].url("/v1/cluster/status")).and_then(|r| r.json().ok());
        if status.as_ref().is_some_and(|s| s["voters"].as_array().is_some_and(|v| v.len() == 2)) {
            break;
        }
        assert!(Instant::now() < deadline, "node 2 did not become a voter: {}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    c.wait_ready();

    phase("a follower forwards the caller's token, and the leader checks it");
    let leader = c.leader();
    let f = c.nodes.iter().find(|n| n.id != leader).unwrap();
    let h = &c.http;
    assert!(with(h.put(f.url("/v1/kv/fw")).body("1"), Some(WRITE)).status().is_success());
    assert_eq!(c.read(c.by_ref(leader), "fw", true).as_deref(), Some("1"));
    let (status, v) = json(with(h.put(f.url("/v1/kv/fw")).body("2"), Some(READ)));
    assert_eq!((status, v["error"].as_str()), (403, Some("forbidden")), "{v}");
    let own = only[(f.id - 1) as usize];
    let r = with(h.put(f.url("/v1/kv/fw")).body("3"), Some(own));
    assert!(r.headers().contains_key("www-authenticate"), "the leader's challenge, relayed");
    let (status, v) = json(r);
    assert_eq!((status, v["reason"].as_str()), (401, Some("unknown token")), "{v}");
    assert_eq!(c.read(c.by_ref(leader), "fw", false).as_deref(), Some("1"));
    // (A client that follows the redirect must present its token again: reqwest drops it
    // on a redirect to another port.)
    let no_redirect = reqwest::blocking::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = with(no_redirect.put(f.url("/v1/kv/fw?redirect")).body("4"), Some(WRITE));
    assert_eq!(r.status().as_u16(), 307);
    assert!(!r.text().unwrap().contains(WRITE));

    phase("no token in either log");
    for n in &c.nodes {
        let log = n.log_text();
        for t in [READ, WRITE, ADMIN, only[0], only[1]] {
            assert!(!log.contains(t), "a token is in node {}'s log:\n{log}", n.id);
        }
    }
}
