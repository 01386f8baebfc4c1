//! Issue 24: disaster recovery from snapshot archives. A 3-node cluster archives its
//! snapshots (`--snapshot-archive`) under a write load; every node and volume is destroyed;
//! `vellum restore` builds three new volumes from the newest archive and a new cluster
//! starts on them: every key acknowledged before the archived snapshot's index reads back
//! with its value, and nothing after it is invented. Runs on `local://` (the archive code is
//! medium-independent; an `s3://` variant against moto is left to the lead's merge of the
//! s3 medium).

use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{Cluster, phase, vellum_bin};

fn applied(c: &Cluster, id: u64) -> u64 {
    let v: serde_json::Value =
        c.get(&c.by_ref(id).url("/v1/cluster/status")).unwrap().json().unwrap();
    v["applied_index"].as_u64().unwrap_or(0)
}

/// The newest complete archive's index under `dir` (manifests only).
fn newest_archive(dir: &std::path::Path) -> Option<u64> {
    let mut best = None;
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        let Ok(text) = std::fs::read_to_string(path.join("manifest.json")) else { continue };
        let m: serde_json::Value = serde_json::from_str(&text).unwrap();
        best = best.max(m["index"].as_u64());
    }
    best
}

#[test]
fn a_cluster_that_lost_every_disk_comes_back_from_its_archive() {
    let mut c = Cluster::new(3);
    let archive = c.dir.path().join("archive");
    let url = format!("local://{}", archive.display());
    for n in &mut c.nodes {
        n.extra.extend(
            ["--snapshot-entries", "50", "--archive-interval", "1s", "--archive-keep", "3"]
                .map(String::from),
        );
        n.extra.extend(["--snapshot-archive".to_string(), url.clone()]);
    }
    c.start_all();
    c.wait_ready();
    let leader = c.leader();
    phase("write 300 keys, acknowledged");
    for k in 0..300 {
        assert!(c.put(c.by_ref(leader), &format!("a{k}"), &format!("value-{k}")));
    }
    let acked = applied(&c, leader);
    phase(&format!("wait for an archive covering applied index {acked}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while newest_archive(&archive).is_none_or(|i| i < acked) {
        assert!(Instant::now() < deadline, "no archive covers {acked}: {}", c.logs());
        // Keep the load going: the archive covers a snapshot at or past `acked`.
        assert!(c.put(c.by_ref(leader), "tick", "x"));
        std::thread::sleep(Duration::from_millis(200));
    }
    phase("vellum backup through a follower: a consistent snapshot of the running cluster");
    let follower = c.nodes.iter().find(|n| n.id != leader).unwrap();
    let backup = c.dir.path().join("backup");
    let out = Command::new(vellum_bin())
        .arg("backup")
        .args(["--from", &format!("127.0.0.1:{}", follower.api)])
        .args(["--to", &format!("local://{}", backup.display())])
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "backup: {said}");
    let backed = newest_archive(&backup).unwrap();
    assert!(backed >= acked, "the backup covers every acknowledged write: {backed} < {acked}");
    assert!(said.contains(&format!("log index {backed}")), "{said}");
    phase("more writes, then every node and volume is lost");
    for k in 0..50 {
        assert!(c.put(c.by_ref(leader), &format!("b{k}"), &format!("late-{k}")));
    }
    for n in &mut c.nodes {
        n.kill();
        n.lose_volume();
    }
    let archived = newest_archive(&archive).unwrap();
    assert!(archived >= acked);
    // Never listed: an upload cut short (data, no manifest) with a higher index.
    let half = archive.join(format!("{:020}-99", archived + 1000));
    std::fs::create_dir_all(&half).unwrap();
    std::fs::write(half.join("data"), b"half").unwrap();

    phase(&format!("restore three new volumes from the archive at index {archived}"));
    let mut fresh = Cluster::new(3);
    let spec = fresh.nodes[0].extra[1].clone();
    for n in &fresh.nodes {
        let out = Command::new(vellum_bin())
            .arg("restore")
            .args(["--from", &url, "--id", &n.id.to_string(), "--initial-cluster", &spec])
            .args(["--volume-size", "128MiB"])
            .arg("--volume")
            .arg(&n.volume)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "restore node {}: {said}", n.id);
        assert!(said.contains(&format!("log index {archived}")), "{said}");
    }
    // A second restore over a restored volume is refused.
    let again = Command::new(vellum_bin())
        .arg("restore")
        .args(["--from", &url, "--id", "1", "--initial-cluster", &spec, "--volume"])
        .arg(&fresh.nodes[0].volume)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("raft state"));

    phase("start the new cluster: it elects a leader and serves the archived state");
    fresh.start_all();
    fresh.wait_ready();
    let leader = fresh.leader();
    let node = fresh.by_ref(leader);
    for k in 0..300 {
        assert_eq!(
            fresh.read(node, &format!("a{k}"), false),
            Some(format!("value-{k}")),
            "key a{k} acknowledged before the archived index {archived}"
        );
    }
    for k in 0..50 {
        // Written after the archive was taken: absent or with its value, never invented.
        if let Some(v) = fresh.read(node, &format!("b{k}"), false) {
            assert_eq!(v, format!("late-{k}"));
        }
    }
    assert_eq!(fresh.read(node, "never-written", false), None);
    assert!(fresh.put(node, "after-restore", "yes"));
    for n in &fresh.nodes {
        assert_eq!(fresh.read(n, "after-restore", false), Some("yes".into()));
    }
}

fn metric(c: &Cluster, id: u64, name: &str) -> f64 {
    let text = c.get(&c.by_ref(id).url("/metrics")).unwrap().text().unwrap();
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// An archive store that fails (here a prefix under a regular file: every write refused)
/// never stops the node: writes go on, the failure counter rises, nothing is listed. Then a
/// store that works again is used on the next period.
#[test]
fn a_failing_archive_store_never_stops_the_node() {
    let mut c = Cluster::new(1);
    let blocker = c.dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap();
    let url = format!("local://{}/archive", blocker.display());
    c.nodes[0].extra.extend(
        ["--snapshot-entries", "20", "--archive-interval", "1s", "--snapshot-archive", &url]
            .map(String::from),
    );
    c.start_all();
    c.wait_ready();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut k = 0;
    while metric(&c, 1, "vellum_archive_failures_total") < 2.0 {
        assert!(Instant::now() < deadline, "no archive failure counted: {}", c.logs());
        assert!(c.put(&c.nodes[0], &format!("k{k}"), "v"), "the node keeps serving writes");
        k += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(metric(&c, 1, "vellum_archive_uploads_total") < 0.5, "nothing uploaded");
    assert!(c.put(&c.nodes[0], "still", "serving"));
    assert_eq!(c.read(&c.nodes[0], "still", false), Some("serving".into()));
    assert!(c.nodes[0].log_text().contains("retrying next period"));
}
