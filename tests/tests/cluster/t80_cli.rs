//! The client subcommands against a running node.

use std::process::Command;

use crate::harness::{Cluster, vellum_bin};

fn vellum(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(vellum_bin()).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn kv_and_cluster_subcommands() {
    let mut c = Cluster::new(1);
    c.start_all();
    c.wait_ready();
    let ep = format!("127.0.0.1:{}", c.nodes[0].api);
    let (ok, out, _) = vellum(&["kv", "put", "--endpoint", &ep, "a key/with spaces", "hello"]);
    assert!(ok, "{out}");
    let (ok, out, _) = vellum(&["kv", "get", "--endpoint", &ep, "a key/with spaces"]);
    assert!(ok);
    assert_eq!(out, "hello\n");
    let (ok, out, _) = vellum(&["kv", "get", "--endpoint", &ep, "--local", "a key/with spaces"]);
    assert!(ok && out == "hello\n");
    let (ok, _, _) = vellum(&["kv", "del", "--endpoint", &ep, "a key/with spaces"]);
    assert!(ok);
    let (ok, _, err) = vellum(&["kv", "get", "--endpoint", &ep, "a key/with spaces"]);
    assert!(!ok && err.contains("not found") && err.trim().lines().count() == 1, "{err}");
    let (ok, out, _) = vellum(&["cluster", "status", "--endpoint", &ep]);
    assert!(ok && out.contains("is leader"), "{out}");
    let (ok, out, _) = vellum(&["cluster", "status", "--endpoint", &ep, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(ok && v["role"] == "leader");
    let (ok, _, err) = vellum(&["kv", "get", "--endpoint", "127.0.0.1:1", "x"]);
    assert!(!ok && err.contains("cannot reach"), "{err}");
}

/// A cache on `memory:` is physically meaningless: the node refuses it in one line and
/// starts without one when none is asked for.
#[test]
fn a_cache_on_memory_is_refused_in_one_line() {
    let out = Command::new(vellum_bin())
        .args(["serve", "--id", "1", "--api-addr", "127.0.0.1:1", "--raft-addr", "127.0.0.1:2"])
        .args(["--volume", "memory:", "--cache-size", "8MiB"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with a cache on memory");
    assert!(err.contains("page cache") && err.contains("memory"), "{err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("vellum: ")).count(), 1, "{err}");
}
