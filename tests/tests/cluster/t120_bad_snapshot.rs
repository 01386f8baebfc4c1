//! Issue 23: a bad snapshot is refused, and a dead Raft core is never ready.
//!
//! - Crafted snapshots, sent to a follower of a 3-node cluster from the leader's identity
//!   (the plain Raft port believes the `x-vellum-from` header): data that does not decode, a
//!   last log id beyond the sender's vote, a membership after the last log id, a vote that
//!   is not a leader's. Each gets 400 `bad_snapshot`; the follower stays ready and keeps
//!   replicating. (Before the fix, the first stopped the follower's Raft core and the second
//!   panicked it, while `/readyz` kept answering 200.) So does an append whose entries skip
//!   an index (before: the log store refused it, a storage error that stopped the core).
//! - Bodies over the bound get 413 at once, before they are sent: the node does not wait
//!   for (or buffer) a declared 64 MiB append or a snapshot larger than its volume. One
//!   snapshot is received at a time: a second one meanwhile gets 503.
//! - A node whose storage fails under it (its volume on a loop device that shrinks to 1 MiB)
//!   stops its Raft core: it exits with code 4 (restarted by the systemd unit), not 3, and
//!   until it exits `/livez` and `/readyz` never answer 200 with a stopped core.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use vellum_raft_store::codec::encode;
use vellum_raft_store::v010::openraft::entry::RaftEntry;
use vellum_raft_store::v010::openraft::impls::leader_id_adv::LeaderId;
use vellum_raft_store::v010::openraft::raft::AppendEntriesRequest;
use vellum_raft_store::v010::openraft::type_config::alias::{
    SnapshotMetaOf, StoredMembershipOf, VoteOf,
};
use vellum_raft_store::v010::openraft::{Membership, StoredMembership, Vote};
use vellum_raft_store::v010::{Entry, KvNode, KvOp, KvRequest, LogId, TypeConfig};

use crate::harness::{Cluster, Node, phase, vellum_bin};

fn log_id(term: u64, node: u64, index: u64) -> LogId {
    LogId::new(LeaderId { term, node_id: node }, index)
}

fn membership(c: &Cluster, at: Option<LogId>) -> StoredMembershipOf<TypeConfig> {
    let nodes: BTreeMap<u64, KvNode> = c
        .nodes
        .iter()
        .map(|n| {
            let node = KvNode {
                raft_addr: format!("127.0.0.1:{}", n.raft),
                api_addr: format!("127.0.0.1:{}", n.api),
            };
            (n.id, node)
        })
        .collect();
    let voters: BTreeSet<u64> = nodes.keys().copied().collect();
    StoredMembership::new(at, Membership::new(vec![voters], nodes).unwrap())
}

/// The state machine's snapshot bytes (its fields in order, as bincode encodes a struct).
fn snapshot_data(c: &Cluster, last: Option<LogId>, at: Option<LogId>) -> Vec<u8> {
    let map = BTreeMap::from([("crafted".to_string(), b"state".to_vec())]);
    encode(&(last, membership(c, at), map)).unwrap()
}

/// `x-vellum-member` of `node`'s answer to an RPC it cannot decode: `ID:INCARNATION`.
fn incarnation(c: &Cluster, node: &Node) -> String {
    let r = c
        .http
        .post(format!("http://127.0.0.1:{}/raft/vote", node.raft))
        .body(vec![0xffu8; 8])
        .send()
        .unwrap();
    r.headers()["x-vellum-member"].to_str().unwrap().to_string()
}

fn term(c: &Cluster, n: &Node) -> u64 {
    let v: serde_json::Value =
        c.http.get(n.url("/v1/cluster/status")).send().unwrap().json().unwrap();
    v["term"].as_u64().unwrap()
}

/// POSTs a snapshot to `to` as `from` (its `ID:INCARNATION`); the status and JSON answer.
fn send_snapshot(
    c: &Cluster,
    from: &str,
    to: &Node,
    vote: VoteOf<TypeConfig>,
    meta: SnapshotMetaOf<TypeConfig>,
    data: Vec<u8>,
) -> (u16, serde_json::Value) {
    let body = encode(&(vote, meta, data)).unwrap();
    let r = c
        .http
        .post(format!("http://127.0.0.1:{}/raft/snapshot", to.raft))
        .header("x-vellum-from", from)
        .header("x-vellum-to", format!("{}:-", to.id))
        .body(body)
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(serde_json::Value::Null))
}

/// A write through the leader is readable on `follower` (polled; replication is
/// asynchronous).
fn replicates(c: &Cluster, leader: &Node, follower: &Node, key: &str) -> bool {
    if !c.put(leader, key, "v") {
        return false;
    }
    (0..200).any(|_| {
        let seen = c.read(follower, key, true).as_deref() == Some("v");
        if !seen {
            std::thread::sleep(Duration::from_millis(50));
        }
        seen
    })
}

/// A raw HTTP/1.1 POST to `port` that declares `declared` body bytes and sends none of them
/// (yet).
fn open_post(port: u16, path: &str, declared: u64) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {declared}\r\n\
         x-vellum-from: 1:-\r\nx-vellum-to: 1:-\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    s
}

/// The status line `s` got within `wait`, if any.
fn status_line(s: &mut std::net::TcpStream, wait: Duration) -> Option<String> {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).ok().filter(|&n| n > 0)?;
    String::from_utf8_lossy(&buf[..n]).lines().next().map(str::to_string)
}

/// The status line of a POST that declares `declared` body bytes and sends none of them (a
/// node that waits for the body times out the read: no status).
fn declared_post(port: u16, path: &str, declared: u64) -> Option<String> {
    status_line(&mut open_post(port, path, declared), Duration::from_secs(20))
}

/// What a crafted snapshot is: its flaw, vote, last log id, membership log id and data.
type Case = (&'static str, VoteOf<TypeConfig>, Option<LogId>, Option<LogId>, Vec<u8>);

#[test]
fn bad_snapshots_are_refused_and_the_follower_keeps_replicating() {
    let mut c = Cluster::new(3);
    c.start_all();
    c.wait_ready();
    let leader_id = c.leader();
    let leader = c.by_ref(leader_id);
    let follower = c.nodes.iter().find(|n| n.id != leader_id).unwrap();
    assert!(replicates(&c, leader, follower, "before"), "{}", c.logs());
    let from = incarnation(&c, leader);
    let t = term(&c, leader);
    let vote = Vote::new_committed(t, leader_id);
    let first = Some(log_id(1, leader_id, 1));
    // Far ahead of the follower's log: openraft installs it rather than ignoring it.
    let ahead = Some(log_id(t, leader_id, 1_000_000));

    let cases: Vec<Case> = vec![
        ("data that does not decode", vote, ahead, first, b"not a snapshot".to_vec()),
        (
            "a last log id beyond the vote",
            vote,
            Some(log_id(t + 5, leader_id, 1_000_000)),
            first,
            snapshot_data(&c, Some(log_id(t + 5, leader_id, 1_000_000)), first),
        ),
        (
            "a membership after the last log id",
            vote,
            ahead,
            Some(log_id(t, leader_id, 1_000_001)),
            snapshot_data(&c, ahead, Some(log_id(t, leader_id, 1_000_001))),
        ),
        (
            "a vote that is not a leader's",
            Vote::new(t, leader_id),
            ahead,
            first,
            snapshot_data(&c, ahead, first),
        ),
    ];
    for (i, (what, vote, last, at, data)) in cases.into_iter().enumerate() {
        phase(&format!("a snapshot with {what}"));
        let meta =
            SnapshotMetaOf::<TypeConfig> { last_log_id: last, last_membership: membership(&c, at) };
        let (status, body) = send_snapshot(&c, &from, follower, vote, meta, data);
        assert_eq!(status, 400, "{what}: {body}; {}", c.logs());
        assert_eq!(body["error"], "bad_snapshot", "{what}: {body}");
        let ready = c.get(&follower.url("/readyz")).unwrap().status().as_u16();
        assert_eq!(ready, 200, "{what}: the follower stays ready; {}", c.logs());
        assert!(
            replicates(&c, leader, follower, &format!("after-{i}")),
            "{what}: the follower keeps replicating; {}",
            c.logs()
        );
    }

    phase("an append whose entries skip an index");
    let v: serde_json::Value =
        c.http.get(follower.url("/v1/cluster/status")).send().unwrap().json().unwrap();
    let last = v["last_log_index"].as_u64().unwrap();
    let put = |index| {
        let op = KvOp::Put { key: format!("gap-{index}"), value: b"x".to_vec() };
        Entry::new_normal(log_id(t, leader_id, index), KvRequest { ops: vec![op] })
    };
    let gap = AppendEntriesRequest::<TypeConfig> {
        vote,
        // The follower's last entry, the leader's of this term once writes are done.
        prev_log_id: Some(log_id(t, leader_id, last)),
        entries: vec![put(last + 1), put(last + 3)],
        leader_commit: None,
    };
    let r = c
        .http
        .post(format!("http://127.0.0.1:{}/raft/append", follower.raft))
        .header("x-vellum-from", from.as_str())
        .header("x-vellum-to", format!("{}:-", follower.id))
        .body(encode(&gap).unwrap())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400, "{:?}; {}", r.text(), c.logs());
    let ready = c.get(&follower.url("/readyz")).unwrap().status().as_u16();
    assert_eq!(ready, 200, "the follower stays ready; {}", c.logs());
    assert!(replicates(&c, leader, follower, "after-gap"), "{}", c.logs());

    phase("bodies over the bound get 413 before they are sent");
    // An append or vote is bounded by the largest append a leader sends (a few MiB with the
    // default write limits), far below the 64 MiB declared here.
    let status = declared_post(follower.raft, "/raft/append", 64 << 20);
    assert!(status.as_deref().is_some_and(|s| s.contains(" 413")), "append: {status:?}");
    // A snapshot by the volume (128 MiB here).
    let status = declared_post(follower.raft, "/raft/snapshot", 512 << 20);
    assert!(status.as_deref().is_some_and(|s| s.contains(" 413")), "snapshot: {status:?}");

    phase("one snapshot at a time");
    // Two snapshots whose bodies do not come: whichever holds the install slot, the other
    // gets 503 at once.
    let mut pending = [
        open_post(follower.raft, "/raft/snapshot", 1 << 20),
        open_post(follower.raft, "/raft/snapshot", 1 << 20),
    ];
    let busy = (0..200)
        .find_map(|_| pending.iter_mut().find_map(|s| status_line(s, Duration::from_millis(50))));
    assert!(busy.as_deref().is_some_and(|s| s.contains(" 503")), "second snapshot: {busy:?}");
    drop(pending);
    assert!(replicates(&c, leader, follower, "after-413"), "{}", c.logs());
}

/// A loop device over a file, detached on drop.
struct Loop {
    dev: PathBuf,
    file: PathBuf,
}

impl Loop {
    /// `None` (the test is skipped, saying so) where loop devices cannot be attached.
    fn attach(file: &Path, bytes: u64) -> Option<Loop> {
        // Only root attaches loop devices.
        let uid = Command::new("id").arg("-u").output().ok()?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            eprintln!("skipped: attaching a loop device needs root (CI runs as root)");
            return None;
        }
        std::fs::File::create(file).ok()?.set_len(bytes).ok()?;
        let out = Command::new("losetup")
            .args(["--show", "-f", "--direct-io=on"])
            .arg(file)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!("skipped: losetup failed: {}", String::from_utf8_lossy(&out.stderr));
            return None;
        }
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        Some(Loop { dev, file: file.to_path_buf() })
    }

    /// The device shrinks to `bytes`: every IO past them fails.
    fn shrink(&self, bytes: u64) {
        std::fs::OpenOptions::new().write(true).open(&self.file).unwrap().set_len(bytes).unwrap();
        let ok = Command::new("losetup").arg("-c").arg(&self.dev).status().unwrap();
        assert!(ok.success(), "losetup -c");
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

#[test]
fn a_node_whose_raft_core_stops_exits_with_code_4() {
    let dir = tempfile::tempdir().unwrap();
    let Some(dev) = Loop::attach(&dir.path().join("n3.img"), 128 << 20) else { return };
    let out = Command::new(vellum_bin()).arg("format").arg(&dev.dev).output().unwrap();
    assert!(out.status.success(), "format: {}", String::from_utf8_lossy(&out.stderr));
    // Declared after the device: the nodes are killed before it is detached.
    let mut c = Cluster::new(3);
    c.by_id(3).volume.clone_from(&dev.dev);
    c.start_all();
    c.wait_ready();
    assert!(c.put(c.by_ref(c.leader()), "before", "1"), "{}", c.logs());

    phase("node 3's storage fails");
    dev.shrink(1 << 20);
    let mut status = None;
    for i in 0..600 {
        // Writes make node 3 append to its log, which now fails (whoever leads).
        let writer = c.nodes.iter().find(|n| n.id != 3).unwrap();
        let _ = c
            .authed(c.http.put(writer.url(&format!("/v1/kv/k{i}"))))
            .timeout(Duration::from_secs(2))
            .body("x")
            .send();
        let n3 = c.by_ref(3);
        // Once it says its core stopped, and until it exits, it is neither live nor ready.
        if n3.log_text().contains("the Raft core stopped") {
            for path in ["/livez", "/readyz"] {
                if let Some(r) = c.get(&n3.url(path)) {
                    assert_eq!(r.status().as_u16(), 503, "{path} with a stopped core");
                }
            }
        }
        status = c.by_id(3).wait_exit(Duration::from_millis(100));
        if status.is_some() {
            break;
        }
    }
    let log = c.by_ref(3).log_text();
    let status = status.unwrap_or_else(|| panic!("node 3 did not exit; its log:\n{log}"));
    assert_eq!(status.code(), Some(4), "exit code 4 (not 3), log:\n{log}");
    assert!(log.contains("the Raft core stopped"), "{log}");
    for line in log.lines().filter(|l| l.contains("the Raft core stopped")) {
        eprintln!("node 3: {line}");
    }
}
