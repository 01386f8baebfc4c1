//! The client CLI as etcdctl users expect it (issue 28): `--endpoints` failover, values from
//! standard input, the prefix read (`kv get --prefix`, `GET /v1/kv?prefix=&limit=`), exit
//! codes 5 (not found) and 6 (unreachable), `kv del` of a missing key, and `cluster
//! add|promote|remove` on a real cluster.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Cluster, free_port, phase, vellum_bin};

/// Exit code, stdout and stderr of `vellum args` fed `stdin`.
fn vellum(args: &[&str], stdin: &[u8]) -> (Option<i32>, String, String) {
    let mut child = Command::new(vellum_bin())
        .args(args)
        .env_remove("VELLUM_ENDPOINTS")
        .env_remove("VELLUM_ENDPOINT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A node that waits to be added by `vellum cluster add` (`--standby`: without it, a node
/// started with neither --initial-cluster nor --join is a single-node cluster of its own).
fn waiting_node(c: &mut Cluster, id: u64) -> (String, String) {
    let node = Cluster::node(c.dir.path(), id, free_port(), free_port(), vec!["--standby".into()]);
    let addrs = (format!("127.0.0.1:{}", node.api), format!("127.0.0.1:{}", node.raft));
    c.nodes.push(node);
    c.by_id(id).start();
    // Its API answers (503: no leader yet) once it listens.
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.get(&c.by_ref(id).url("/livez")).is_none() {
        assert!(Instant::now() < deadline, "node {id} does not listen: {}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    addrs
}

fn status(c: &Cluster) -> serde_json::Value {
    c.get(&c.nodes[0].url("/v1/cluster/status")).unwrap().json().unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u64> {
    v.as_array().unwrap().iter().filter_map(serde_json::Value::as_u64).collect()
}

#[test]
fn the_client_cli_fails_over_lists_prefixes_and_changes_members() {
    let mut c = Cluster::new(1);
    c.start_all();
    c.wait_ready();
    let live = format!("127.0.0.1:{}", c.nodes[0].api);
    let dead = format!("127.0.0.1:{}", free_port());
    let eps = format!("{dead},{live}");

    phase("--endpoints DEAD,LIVE: the dead one is skipped quietly");
    let (code, out, err) = vellum(&["kv", "put", "--endpoints", &eps, "f/1", "one"], b"");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(err.is_empty(), "nothing said about {dead} when {live} answered: {err}");
    let (code, out, _) = vellum(&["kv", "get", "--endpoints", &eps, "f/1"], b"");
    assert_eq!((code, out.as_str()), (Some(0), "one\n"));
    let (code, _, err) = vellum(&["kv", "get", "--endpoints", &dead, "f/1"], b"");
    assert_eq!(code, Some(6), "unreachable: {err}");
    assert!(err.contains(&dead), "{err}");

    phase("kv put KEY reads the value from stdin (absent VALUE, or -)");
    let (code, _, err) = vellum(&["kv", "put", "--endpoints", &eps, "f/2"], b"two\nlines");
    assert_eq!(code, Some(0), "{err}");
    let (_, out, _) = vellum(&["kv", "get", "--endpoints", &eps, "f/2"], b"");
    assert_eq!(out, "two\nlines\n");
    let (code, _, err) = vellum(&["kv", "put", "--endpoints", &eps, "f/3", "-"], b"three");
    assert_eq!(code, Some(0), "{err}");

    phase("missing keys: get exits 5, del says so and exits 5");
    let (code, _, err) = vellum(&["kv", "get", "--endpoints", &eps, "nope"], b"");
    assert_eq!(code, Some(5), "{err}");
    assert!(err.contains("not found") && err.trim().lines().count() == 1, "{err}");
    let (code, _, err) = vellum(&["kv", "del", "--endpoints", &eps, "nope"], b"");
    assert_eq!(code, Some(5), "{err}");
    assert!(err.contains("key nope not found"), "{err}");
    let (code, out, _) = vellum(&["kv", "del", "--endpoints", &eps, "f/3"], b"");
    assert_eq!((code, out.as_str()), (Some(0), "deleted\n"));

    phase("cluster add (learner, catch up, voter), add --learner, promote");
    let (api2, raft2) = waiting_node(&mut c, 2);
    let (code, out, err) =
        vellum(&["cluster", "add", "2", &api2, &raft2, "--endpoints", &eps], b"");
    assert_eq!(code, Some(0), "{out}{err}{}", c.logs());
    assert!(out.contains("promoted to voter"), "{out}");
    assert_eq!(ids(&status(&c)["voters"]), vec![1, 2]);
    let (api3, raft3) = waiting_node(&mut c, 3);
    let (code, out, err) =
        vellum(&["cluster", "add", "3", &api3, &raft3, "--learner", "--endpoints", &eps], b"");
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(ids(&status(&c)["learners"]), vec![3]);
    let (code, out, err) = vellum(&["cluster", "promote", "3", "--endpoints", &eps], b"");
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(ids(&status(&c)["voters"]), vec![1, 2, 3]);
    c.wait_ready();

    phase("kv get --prefix, through a follower too");
    let http = &c.http;
    let put = |key: &str, value: &[u8]| {
        let url = c.nodes[0].url(&format!("/v1/kv/{}", key.replace('/', "%2F")));
        assert!(http.put(url).body(value.to_vec()).send().unwrap().status().is_success());
    };
    put("f/bin", b"\xff\x00raw");
    put("g/1", b"other");
    let follower = format!("127.0.0.1:{}", c.by_ref(2).api);
    let (code, out, err) = vellum(&["kv", "get", "--prefix", "f/", "--endpoints", &follower], b"");
    assert_eq!(code, Some(0), "{err}");
    let expected: &[u8] = b"f/1\tone\nf/2\ttwo\nlines\nf/bin\t\xff\x00raw\n";
    assert_eq!(out.as_bytes(), String::from_utf8_lossy(expected).as_bytes());
    let (_, out, err) =
        vellum(&["kv", "get", "f/", "--prefix", "--limit", "1", "--endpoints", &eps], b"");
    assert_eq!(out, "f/1\tone\n");
    assert!(err.contains("more keys match"), "{err}");

    phase("GET /v1/kv?prefix=&limit=: byte order, more, value_base64, limits, local");
    let list = |node: usize, q: &str| {
        let r = c.get(&c.nodes[node].url(&format!("/v1/kv{q}"))).unwrap();
        (r.status().as_u16(), r.json::<serde_json::Value>().unwrap())
    };
    let (status_code, v) = list(1, "?prefix=f%2F&limit=2");
    assert_eq!(status_code, 200, "{v}");
    assert_eq!(v["more"], true);
    assert_eq!(v["kvs"][0]["key"], "f/1");
    assert_eq!(v["kvs"][1], serde_json::json!({"key": "f/2", "value": "two\nlines"}));
    let (_, v) = list(0, "?prefix=f/bin");
    assert_eq!(v["kvs"][0]["value_base64"], "/wByYXc=", "{v}");
    assert_eq!(v["more"], false);
    let (_, v) = list(0, "");
    let keys: Vec<&str> =
        v["kvs"].as_array().unwrap().iter().map(|kv| kv["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["f/1", "f/2", "f/bin", "g/1"]);
    let (status_code, v) = list(0, "?limit=10001");
    assert_eq!(status_code, 400, "{v}");
    assert!(v["error"].is_string(), "{v}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // A follower's local read may lag the leader by a moment.
        let (status_code, v) = list(2, "?prefix=g&consistency=local");
        if status_code == 200 && v["kvs"].as_array().is_some_and(|a| a.len() == 1) {
            break;
        }
        assert!(Instant::now() < deadline, "{v}");
        std::thread::sleep(Duration::from_millis(100));
    }

    phase("cluster remove, and a second remove: not a member (exit 5)");
    let (code, out, err) = vellum(&["cluster", "remove", "3", "--endpoints", &eps], b"");
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(ids(&status(&c)["voters"]), vec![1, 2]);
    let (code, _, err) = vellum(&["cluster", "remove", "3", "--endpoints", &eps], b"");
    assert_eq!(code, Some(5), "{err}");
    c.by_id(3).stop();
}

/// `cluster remove` and `cluster add` right after the leader died: the live members' status
/// still names the dead node as leader until they elect another (here at least 3 s, by
/// `--election-timeout-ms`), so both commands must wait for a leader that answers rather than
/// fail on the dead one (found by CI in `t190_moves`, where `add-node` met an election).
#[test]
fn membership_changes_wait_out_a_dead_leader() {
    let mut c = Cluster::new(4);
    for n in &mut c.nodes {
        n.extra.extend(["--election-timeout-ms".to_string(), "3000".to_string()]);
    }
    phase("a 4-node cluster with a slow election; node 5 waits to be added");
    c.start_all();
    c.wait_ready();
    assert!(c.put(&c.nodes[0], "before", "kill"));
    let (api5, raft5) = waiting_node(&mut c, 5);
    let live = |c: &Cluster| -> String {
        let running = c.nodes.iter().filter(|n| n.is_started() && n.id != 5);
        running.map(|n| format!("127.0.0.1:{}", n.api)).collect::<Vec<_>>().join(",")
    };

    phase("kill the leader, remove it at once");
    let first = c.leader();
    c.by_id(first).kill();
    let first_s = first.to_string();
    let (code, out, err) = vellum(&["cluster", "remove", &first_s, "--endpoints", &live(&c)], b"");
    assert_eq!(code, Some(0), "{out}{err}{}", c.logs());
    assert!(err.contains("waiting for a leader that answers"), "{err}");
    assert!(out.contains(&format!("node {first} removed")), "{out}");

    phase("kill the next leader, add node 5 at once");
    let second = c.leader();
    assert_ne!(second, first);
    c.by_id(second).kill();
    let eps = live(&c);
    let (code, out, err) =
        vellum(&["cluster", "add", "5", &api5, &raft5, "--endpoints", &eps], b"");
    assert_eq!(code, Some(0), "{out}{err}{}", c.logs());
    assert!(err.contains("waiting for a leader that answers"), "{err}");
    assert!(out.contains("node 5 promoted to voter"), "{out}");
    let voters = ids(&status_of(
        &c,
        c.nodes.iter().position(crate::harness::Node::is_started).unwrap(),
    )["voters"]);
    let want: Vec<u64> = (1..=5).filter(|id| *id != first).collect();
    assert_eq!(voters, want);
}

fn status_of(c: &Cluster, node: usize) -> serde_json::Value {
    c.get(&c.nodes[node].url("/v1/cluster/status")).unwrap().json().unwrap()
}
