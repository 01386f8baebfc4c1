//! An operator's first hour (issue 28): a lone `vellum serve` is a single-node cluster that
//! takes writes, restarts with its data and refuses another node id; keys with `/` work over
//! HTTP (forwarded by a follower and redirected too); advertised addresses go into the
//! membership; wildcard advertise addresses and too short election timeouts are refused in
//! one line.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Cluster, client_builder, free_port, phase, vellum_bin};

/// `vellum serve ARGS` that is expected to refuse to start: its output.
fn refused(args: &[String]) -> Output {
    let out =
        Command::new(vellum_bin()).arg("serve").args(args).stdin(Stdio::null()).output().unwrap();
    assert!(!out.status.success(), "serve {args:?} started");
    out
}

/// The one error line of a refused start (the log lines before it are not errors).
fn one_error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("vellum: ")).collect();
    assert_eq!(errors.len(), 1, "one error line: {stderr}");
    errors[0].to_string()
}

/// `--id ID --api-addr 127.0.0.1:API --raft-addr 127.0.0.1:RAFT --volume VOLUME`.
fn base(id: u64, api: u16, raft: u16, volume: &Path) -> Vec<String> {
    vec![
        "--id".into(),
        id.to_string(),
        "--api-addr".into(),
        format!("127.0.0.1:{api}"),
        "--raft-addr".into(),
        format!("127.0.0.1:{raft}"),
        "--volume".into(),
        volume.to_str().unwrap().into(),
        "--volume-size".into(),
        "64MiB".into(),
    ]
}

/// A one-node "cluster" whose node is started with `extra` only: no --initial-cluster.
fn lone(extra: &[&str]) -> Cluster {
    let mut c = Cluster::new(1);
    c.nodes[0].extra = extra.iter().map(|s| (*s).to_string()).collect();
    c
}

fn status(c: &Cluster, node: usize) -> serde_json::Value {
    c.get(&c.nodes[node].url("/v1/cluster/status")).unwrap().json().unwrap()
}

#[test]
fn a_lone_serve_is_a_single_node_cluster() {
    let mut c = lone(&["--volume-size", "64MiB"]);
    phase("a lone serve on a new volume is ready and takes a write within 20 s");
    let started = Instant::now();
    c.start_all();
    loop {
        if c.get(&c.nodes[0].url("/readyz")).is_some_and(|r| r.status().is_success()) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "not ready in 20 s: {}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(c.put(&c.nodes[0], "solo", "v"), "{}", c.logs());
    let log = c.nodes[0].log_text();
    assert!(log.contains("starting a single-node cluster with this node (id 1"), "{log}");
    assert!(log.contains("formatting 64 MiB volume at") && log.contains("formatted the"), "{log}");
    let s = status(&c, 0);
    assert_eq!(s["voters"], serde_json::json!([1]));
    phase("it restarts on its volume as the member it is, with its data");
    c.nodes[0].stop();
    c.nodes[0].start();
    c.wait_ready();
    assert_eq!(c.read(&c.nodes[0], "solo", false).as_deref(), Some("v"));
    assert!(c.put(&c.nodes[0], "after", "restart"));
    let log = c.nodes[0].log_text();
    assert_eq!(log.matches("starting a single-node cluster").count(), 1, "{log}");
    assert!(log.contains("restarting as node 1"), "{log}");
    assert_eq!(log.matches("formatting 64 MiB volume").count(), 1, "formatted once: {log}");
    c.nodes[0].stop();
    phase("a lone serve with another id on that volume is refused: exit code 3, one line");
    let n = &c.nodes[0];
    let out = refused(&base(2, n.api, n.raft, &n.volume));
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let line = one_error_line(&out);
    assert!(line.contains("belongs to node 1") && line.contains("--id 1"), "{line}");
    phase("the volume still serves node 1");
    c.nodes[0].start();
    c.wait_ready();
    assert_eq!(c.read(&c.nodes[0], "after", false).as_deref(), Some("restart"));
}

#[test]
fn a_lone_serve_on_a_volume_of_another_cluster_is_refused() {
    // Node 2 of a two-node cluster (bootstrapped together), restarted alone as node 2: its
    // membership holds it, so it restarts as that member (no second cluster). A volume whose
    // membership does not hold its node: refused.
    let mut c = Cluster::new(2);
    c.start_all();
    c.wait_ready();
    assert!(c.put(&c.nodes[0], "k", "v"));
    phase("remove node 2, whose volume keeps a membership without it");
    let leader = c.leader();
    let r = c
        .http
        .put(c.by_ref(leader).url("/v1/cluster/members"))
        .json(&serde_json::json!({ "members": [1] }))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = status(&c, 0);
        if s["voters"] == serde_json::json!([1]) {
            break;
        }
        assert!(Instant::now() < deadline, "node 2 not removed: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A removed node stops by itself, or is stopped here.
    if c.nodes[1].wait_exit(Duration::from_secs(5)).is_none() {
        c.nodes[1].kill();
    }
    c.nodes[0].stop();
    let n = &c.nodes[1];
    let mut args = base(2, n.api, n.raft, &n.volume);
    args.extend(["--heartbeat-ms".to_string(), "50".to_string()]);
    let out = Command::new(vellum_bin())
        .arg("serve")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(out, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        // The volume's membership without node 2 (it learned of its removal).
        Some(3) => {
            phase("refused: the volume's membership does not hold node 2");
            let line = one_error_line(&out);
            assert!(line.contains("do not include node 2"), "{line}");
        }
        other => {
            // Node 2 never learned of its removal: its membership still holds it, and it
            // restarts as that member (as it would with --initial-cluster).
            phase("node 2 never learned of its removal: it restarts as that member");
            assert!(other.is_none(), "exit {other:?}: {stderr}");
            assert!(stderr.contains("restarting as node 2"), "{stderr}");
            assert!(!stderr.contains("starting a single-node cluster"), "{stderr}");
        }
    }
}

/// Waits up to `timeout` for `child` to exit, then kills it; its output (status `None`
/// code: it was killed).
fn wait_output(mut child: std::process::Child, timeout: Duration) -> Output {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

#[test]
fn keys_with_slashes_over_http() {
    let mut c = Cluster::new(3);
    c.start_all();
    c.wait_ready();
    let leader = c.leader();
    let follower = c.nodes.iter().position(|n| n.id != leader).unwrap();
    let lead = c.nodes.iter().position(|n| n.id == leader).unwrap();
    phase("put, get and delete a/b/c through a follower (forwarded to the leader)");
    assert!(c.put(&c.nodes[follower], "a/b/c", "abc"), "{}", c.logs());
    for n in [follower, lead] {
        assert_eq!(c.read(&c.nodes[n], "a/b/c", false).as_deref(), Some("abc"));
    }
    assert_eq!(c.read(&c.nodes[lead], "a%2Fb%2Fc", false).as_deref(), Some("abc"), "encoded /");
    assert_eq!(c.read(&c.nodes[follower], "a/b", false), None, "a/b is another key");
    phase("percent-encoding is forwarded as received");
    assert!(c.put(&c.nodes[follower], "sp%20ace/k%2Fx", "sp"));
    assert_eq!(c.read(&c.nodes[lead], "sp%20ace/k/x", false).as_deref(), Some("sp"));
    phase("?redirect names the leader's URL with the whole key");
    let no_follow = client_builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r =
        no_follow.put(c.nodes[follower].url("/v1/kv/x/y%20z?redirect")).body("r").send().unwrap();
    assert_eq!(r.status().as_u16(), 307);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let leader_url = c.nodes[lead].url("/v1/kv/x/y%20z?redirect");
    assert_eq!(location, leader_url);
    let r = no_follow.put(&location).body("r").send().unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(c.read(&c.nodes[follower], "x/y%20z", false).as_deref(), Some("r"));
    phase("delete through the follower");
    let r = c.http.delete(c.nodes[follower].url("/v1/kv/a/b/c")).send().unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(c.read(&c.nodes[lead], "a/b/c", false), None);
    phase("the empty key is a 400; a long key with slashes is refused");
    for method in [reqwest::Method::GET, reqwest::Method::PUT, reqwest::Method::DELETE] {
        let r = c.http.request(method, c.nodes[0].url("/v1/kv/")).send().unwrap();
        assert_eq!(r.status().as_u16(), 400);
    }
    let long = "d/".repeat(600); // 1200 bytes: over the 1 KiB default
    let r = c.http.put(c.nodes[follower].url(&format!("/v1/kv/{long}"))).body("x").send().unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
}

#[test]
fn advertised_addresses_go_into_the_membership() {
    phase("node 1 alone, advertising its bind addresses explicitly");
    let mut c = Cluster::new(1);
    let (api1, raft1) = (c.nodes[0].api, c.nodes[0].raft);
    c.nodes[0].extra = vec![
        "--advertise-api-addr".into(),
        format!("127.0.0.1:{api1}"),
        "--advertise-raft-addr".into(),
        format!("127.0.0.1:{raft1}"),
        "--election-timeout-ms".into(),
        "300".into(),
    ];
    c.start_all();
    c.wait_ready();
    let s = status(&c, 0);
    assert_eq!(s["nodes"]["1"]["api_addr"], format!("127.0.0.1:{api1}"));
    assert_eq!(s["nodes"]["1"]["raft_addr"], format!("127.0.0.1:{raft1}"));
    phase("node 2 binds 0.0.0.0, advertises 127.0.0.1 and joins");
    let (api2, raft2) = (free_port(), free_port());
    let log = std::fs::File::create(c.dir.path().join("n2.log")).unwrap();
    let child = Command::new(vellum_bin())
        .arg("serve")
        .args(["--id", "2", "--insecure", "--heartbeat-ms", "50"])
        .args(["--api-addr", &format!("0.0.0.0:{api2}")])
        .args(["--raft-addr", &format!("0.0.0.0:{raft2}")])
        .args(["--advertise-api-addr", &format!("127.0.0.1:{api2}")])
        .args(["--advertise-raft-addr", &format!("127.0.0.1:{raft2}")])
        .args(["--join", &format!("127.0.0.1:{api1}")])
        .arg("--volume")
        .arg(c.dir.path().join("n2.vlm"))
        .args(["--volume-size", "64MiB"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    let s = loop {
        let s = status(&c, 0);
        if s["voters"] == serde_json::json!([1, 2]) {
            break s;
        }
        let log = std::fs::read_to_string(c.dir.path().join("n2.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "node 2 did not join: {s}\n{log}");
        assert!(child.0.try_wait().unwrap().is_none(), "node 2 exited: {log}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(s["nodes"]["2"]["api_addr"], format!("127.0.0.1:{api2}"));
    assert_eq!(s["nodes"]["2"]["raft_addr"], format!("127.0.0.1:{raft2}"));
    phase("node 2 serves: it forwards writes to the leader, reads linearizably");
    let url = |path: &str| format!("http://127.0.0.1:{api2}{path}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c.http.get(url("/readyz")).send().is_ok_and(|r| r.status().is_success()) {
        assert!(Instant::now() < deadline, "node 2 not ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Two voters, one of them just joined: an election may be settling (`put_url` retries
    // the 503 that wrote nothing).
    assert!(c.put_url(&url("/v1/kv/via/two"), "2"), "{}", c.logs());
    assert_eq!(c.read_settled(&c.nodes[0], "via/two").as_deref(), Some("2"));
    let log = std::fs::read_to_string(c.dir.path().join("n2.log")).unwrap_or_default();
    assert!(log.contains(&format!("(advertised as 127.0.0.1:{api2})")), "{log}");
    drop(child);

    phase("refused in one line: a wildcard advertise address, a wildcard bind to advertise");
    let dir = tempfile::tempdir().unwrap();
    let volume = dir.path().join("x.vlm");
    let (api, raft) = (free_port(), free_port());
    let mut args = base(1, api, raft, &volume);
    args.extend(["--advertise-raft-addr".into(), format!("0.0.0.0:{raft}")]);
    let line = one_error_line(&refused(&args));
    assert!(line.contains("--advertise-raft-addr 0.0.0.0"), "{line}");
    let mut args = base(1, api, raft, &volume);
    args.extend(["--advertise-api-addr".into(), format!("[::]:{api}")]);
    let line = one_error_line(&refused(&args));
    assert!(line.contains("--advertise-api-addr [::]"), "{line}");
    let mut args = base(1, api, raft, &volume);
    args[3] = format!("0.0.0.0:{api}");
    args.push("--insecure".into());
    let line = one_error_line(&refused(&args));
    assert!(line.contains("pass --advertise-api-addr"), "{line}");
    phase("refused: an --initial-cluster entry that is not this node's advertised address");
    let mut args = base(1, api, raft, &volume);
    args.extend([
        "--advertise-api-addr".into(),
        format!("127.0.0.2:{api}"),
        "--initial-cluster".into(),
        format!("1=127.0.0.1:{raft}/127.0.0.1:{api}"),
    ]);
    let line = one_error_line(&refused(&args));
    assert!(line.contains("--initial-cluster names node 1"), "{line}");
    assert!(!volume.exists(), "refused before the volume was made");
}

#[test]
fn an_election_timeout_below_three_heartbeats_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let volume = dir.path().join("x.vlm");
    let mut args = base(1, free_port(), free_port(), &volume);
    args.extend(["--heartbeat-ms", "100", "--election-timeout", "250"].map(String::from));
    let out = refused(&args);
    assert_eq!(out.status.code(), Some(1));
    let line = one_error_line(&out);
    assert!(line.contains("at least 3x --heartbeat-ms 100"), "{line}");
    assert!(!volume.exists(), "refused before the volume was made");
}

/// Kills the child process when dropped (a failed assertion must not leave it running).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
