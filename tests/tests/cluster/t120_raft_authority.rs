//! Raft authority comes from membership, not from the CA, and one member cannot evict
//! another (issue 23). Each test runs a 3-node mTLS cluster and speaks to its Raft ports with
//! crafted RPCs (`rpc.rs`) under node certificates the cluster's CA signed:
//!
//! - a certificate for node 9, never a member, is refused (403 `not_a_member`) for a vote (a
//!   leadership transfer of term 500), an append (a leader of term 500) and a snapshot; no
//!   term reaches 500, the key is unchanged, no node exits, and no node records node 9 in its
//!   peer book (`GET /raft/member/9` answers `knows: null`); a learner (node 4) may append
//!   but not vote; once removed, its certificate is refused for good (`removed_member`) and
//!   the API refuses to add the id again (409);
//! - node 3 restarted with `--deny-peer 2` refuses member 2's RPCs, and only node 3 does;
//! - a member (node 2) that addresses node 1 by a made-up incarnation does not make node 1
//!   exit: node 1 refuses node 2 from then on and keeps serving; a second voter (node 3)
//!   saying the same is a majority of the voters, and node 1 stops (exit code 3).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::{Cluster, phase};
use crate::rpc::{self, Answer, append_body, post_raw, snapshot_body, vote_body};
use crate::t110_mtls::{pki, term, tls_client, use_mtls};

fn cert(pki: &Path, id: u64) -> (PathBuf, PathBuf) {
    (pki.join(format!("node-{id}.pem")), pki.join(format!("node-{id}-key.pem")))
}

/// A started 3-node mTLS cluster (node certificates for `certs`), its PKI directory, and a
/// write of `k` = `v` done.
fn mtls_cluster(certs: &[u64]) -> (Cluster, PathBuf) {
    let mut c = Cluster::new(3);
    let pki = pki(&c.dir.path().join("pki"), certs);
    let ca = pki.join("ca.pem");
    for n in &mut c.nodes {
        let (cert, key) = cert(&pki, n.id);
        use_mtls(n, &cert, &key, &ca);
    }
    c.http = tls_client(&ca, Some((&pki.join("client.pem"), &pki.join("client-key.pem"))));
    phase("a 3-node mTLS cluster takes a write");
    c.start_all();
    c.wait_ready();
    let leader = c.leader();
    assert!(c.put(c.by_ref(leader), "k", "v"), "{}", c.logs());
    (c, pki)
}

/// A client presenting node `id`'s certificate.
fn as_node(pki: &Path, id: u64) -> reqwest::blocking::Client {
    let (cert, key) = cert(pki, id);
    rpc::client(&pki.join("ca.pem"), &cert, &key)
}

/// What the member whose Raft port is `raft` says it knows of node `id`.
fn knows(client: &reqwest::blocking::Client, raft: u16, id: u64) -> serde_json::Value {
    let url = format!("https://127.0.0.1:{raft}/raft/member/{id}");
    client.get(url).send().unwrap().json::<serde_json::Value>().unwrap()["knows"].clone()
}

/// The incarnation the member at `raft` recorded for node `id`, once it has one: a member
/// records a peer at its first contact, and two followers of a third node's leadership may
/// not have spoken yet.
fn incarnation(c: &Cluster, client: &reqwest::blocking::Client, raft: u16, id: u64) -> String {
    let mut known = None;
    eventually(&format!("the member at {raft} knows node {id}"), c, || {
        let url = format!("https://127.0.0.1:{raft}/raft/member/{id}");
        known = client
            .get(url)
            .send()
            .ok()
            .and_then(|r| r.json::<serde_json::Value>().ok())
            .and_then(|v| v["knows"].as_str().map(str::to_string));
        known.is_some()
    });
    known.unwrap()
}

/// `GET /v1/cluster/status` of `node`.
fn status(c: &Cluster, node: &crate::harness::Node) -> serde_json::Value {
    c.get(&node.url("/v1/cluster/status")).unwrap().json().unwrap()
}

/// Polls (a bounded count) until `f` holds.
fn eventually(what: &str, c: &Cluster, mut f: impl FnMut() -> bool) {
    for _ in 0..300 {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("never: {what}; logs: {}", c.logs());
}

fn assert_refused(a: &Answer, error: &str, what: &str) {
    assert_eq!((a.status, a.error().as_str()), (403, error), "{what}: {a:?} {}", a.json());
    assert!(a.member.is_some(), "{what}: a refusal names the member that refuses");
}

/// `POST /v1/cluster/learners` for node `id` at an address where nothing listens, on the
/// leader; the status, if it answered within `wait` (the leader commits the membership
/// first, then waits for the learner to catch up, which this one never does).
fn add_learner(c: &Cluster, pki: &Path, id: u64, wait: Duration) -> Option<u16> {
    let client = tls_client(
        &pki.join("ca.pem"),
        Some((&pki.join("client.pem"), &pki.join("client-key.pem"))),
    );
    client
        .post(c.by_ref(c.leader()).url("/v1/cluster/learners"))
        .timeout(wait)
        .json(
            &serde_json::json!({ "id": id, "raft_addr": "127.0.0.1:1", "api_addr": "127.0.0.1:1" }),
        )
        .send()
        .ok()
        .map(|r| r.status().as_u16())
}

#[test]
fn raft_authority_comes_from_membership_not_from_the_ca() {
    let (mut c, pki) = mtls_cluster(&[1, 2, 3, 4, 9]);
    let rafts: Vec<(u64, u16)> = c.nodes.iter().map(|n| (n.id, n.raft)).collect();

    phase("node 9 (a CA certificate, never a member) is refused vote, append and snapshot");
    let nine = as_node(&pki, 9);
    // An incarnation of its own, as a node 9 that ran would present.
    let from9 = "9:99999999999999999999999999999999";
    for &(id, raft) in &rafts {
        let to = format!("{id}:-");
        let a = post_raw(&nine, raft, "vote", from9, &to, vote_body(9, 500, true)).unwrap();
        assert_refused(&a, "not_a_member", "node 9's vote");
        let a = post_raw(&nine, raft, "append", from9, &to, append_body(9, 500)).unwrap();
        assert_refused(&a, "not_a_member", "node 9's append");
        let body = snapshot_body(9, 500, vec![]);
        let a = post_raw(&nine, raft, "snapshot", from9, &to, body).unwrap();
        assert_refused(&a, "not_a_member", "node 9's snapshot");
    }
    for n in &c.nodes {
        assert!(term(&c, n) < 500, "node {} moved to node 9's term", n.id);
        // A local read: a follower may apply the write a moment after the leader did.
        eventually(&format!("node {} holds k = v", n.id), &c, || {
            c.read(n, "k", true).as_deref() == Some("v")
        });
        assert_eq!(knows(&nine, n.raft, 9), serde_json::Value::Null, "node {} recorded 9", n.id);
    }
    for n in &mut c.nodes {
        assert!(n.wait_exit(Duration::ZERO).is_none(), "node {} exited", n.id);
    }

    phase("a learner (node 4, never running) may append but not vote");
    let _ = add_learner(&c, &pki, 4, Duration::from_secs(2));
    for n in &c.nodes {
        eventually("every node sees learner 4", &c, || {
            status(&c, n)["learners"].as_array().is_some_and(|l| l.contains(&4.into()))
        });
    }
    let four = as_node(&pki, 4);
    let from4 = "4:44444444444444444444444444444444";
    for &(id, raft) in &rafts {
        let to = format!("{id}:-");
        let vote = post_raw(&four, raft, "vote", from4, &to, vote_body(4, 1, false)).unwrap();
        assert_refused(&vote, "not_a_voter", "learner 4's vote");
        let append = post_raw(&four, raft, "append", from4, &to, append_body(4, 1)).unwrap();
        assert_eq!(append.status, 200, "learner 4's append: {append:?} {}", append.json());
    }

    phase("node 4 removed: refused for good, and the API does not add it again");
    let leader = c.leader();
    let removed = c.authed(c.http.delete(c.by_ref(leader).url("/v1/cluster/members/4"))).send();
    assert!(removed.is_ok_and(|r| r.status().is_success()), "{}", c.logs());
    for &(id, raft) in &rafts {
        let to = format!("{id}:-");
        eventually("node 4's appends are refused as removed", &c, || {
            let a = post_raw(&four, raft, "append", from4, &to, append_body(4, 1)).unwrap();
            a.status == 403 && a.error() == "removed_member"
        });
    }
    assert_eq!(add_learner(&c, &pki, 4, Duration::from_secs(10)), Some(409), "re-adding node 4");
}

#[test]
fn deny_peer_refuses_a_members_raft_rpcs() {
    let (mut c, pki) = mtls_cluster(&[1, 2, 3]);
    phase("node 3 restarts with --deny-peer 2");
    c.by_id(3).stop();
    c.by_id(3).extra.extend(["--deny-peer".to_string(), "2".to_string()]);
    c.by_id(3).start();
    let two = as_node(&pki, 2);
    let (raft1, raft3) = (c.by_ref(1).raft, c.by_ref(3).raft);
    let from2 = format!("2:{}", incarnation(&c, &two, raft1, 2));
    // Until its Raft runs, node 3 answers 503 (or nothing): then it refuses node 2.
    eventually("node 3 refuses node 2's vote", &c, || {
        let a = post_raw(&two, raft3, "vote", &from2, "3:-", vote_body(2, 1, false));
        a.is_ok_and(|a| {
            a.status != 503 && {
                assert_refused(&a, "denied_peer", "node 2's vote to node 3");
                true
            }
        })
    });
    let a = post_raw(&two, raft3, "append", &from2, "3:-", append_body(2, 1)).unwrap();
    assert_refused(&a, "denied_peer", "node 2's append to node 3");
    let a = post_raw(&two, raft1, "append", &from2, "1:-", append_body(2, 1)).unwrap();
    assert_eq!(a.status, 200, "node 1 denies nobody: {a:?} {}", a.json());
}

#[test]
fn one_member_cannot_evict_another_a_majority_of_voters_can() {
    let (mut c, pki) = mtls_cluster(&[1, 2, 3]);
    phase("node 2 addresses node 1 by a made-up incarnation: node 1 keeps serving");
    let (raft1, made_up) = (c.by_ref(1).raft, "0123456789abcdef0123456789abcdef");
    let two = as_node(&pki, 2);
    let from2 = format!("2:{}", incarnation(&c, &two, raft1, 2));
    let claim = append_body(2, 1);
    let forged = post_raw(&two, raft1, "append", &from2, &format!("1:{made_up}"), claim).unwrap();
    assert_eq!(forged.status, 409, "{forged:?}");
    assert!(c.by_id(1).wait_exit(Duration::from_secs(2)).is_none(), "node 1 exited: {}", c.logs());
    eventually("node 1 still serves k", &c, || c.read(c.by_ref(1), "k", true).is_some());
    let to1 = format!("1:{}", incarnation(&c, &two, c.by_ref(2).raft, 1));
    let after = post_raw(&two, raft1, "append", &from2, &to1, append_body(2, 1)).unwrap();
    assert_refused(&after, "claimed_stale", "node 2 after its claim");
    assert!(c.by_ref(1).log_text().contains("a peer claims this node lost its state"));

    phase("node 3 says the same: a majority of the voters, and node 1 stops (exit code 3)");
    let three = as_node(&pki, 3);
    let from3 = format!("3:{}", incarnation(&c, &three, raft1, 3));
    let claim = append_body(3, 1);
    let forged = post_raw(&three, raft1, "append", &from3, &format!("1:{made_up}"), claim);
    assert_eq!(forged.unwrap().status, 409);
    let exit = c.by_id(1).wait_exit(Duration::from_secs(30));
    assert_eq!(exit.and_then(|s| s.code()), Some(3), "{}", c.by_ref(1).log_text());
}
