//! A leader that lost its quorum: writes are refused at once (503, nothing written) once its
//! lease lapses; a write it had appended and that a new leader's log replaced gets 503
//! `outcome_unknown`. Followers are frozen with SIGSTOP (cut off from everyone, timers
//! included) and resumed with SIGCONT.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, Node, phase};

/// `PUT key` through `node`: the status and the body.
fn put(c: &Cluster, node: &Node, key: &str, value: &str) -> (u16, serde_json::Value) {
    match c.http.put(node.url(&format!("/v1/kv/{key}"))).body(value.to_string()).send() {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.json().unwrap_or_default())
        }
        Err(e) => (0, serde_json::json!({ "transport": e.to_string() })),
    }
}

/// The leader among `nodes` (by their own status), waiting up to 30 s.
fn leader_among(c: &Cluster, nodes: &[&Node]) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for n in nodes {
            if let Some(r) = c.get(&n.url("/v1/cluster/status"))
                && let Ok(v) = r.json::<serde_json::Value>()
                && v["role"] == "leader"
            {
                return n.id;
            }
        }
        assert!(Instant::now() < deadline, "no leader among the resumed nodes: {}", c.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes through `node` until one is acknowledged (a client retries 503s).
fn put_eventually(c: &Cluster, node: &Node, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = put(c, node, key, "v");
        if status == 200 {
            return;
        }
        assert!(Instant::now() < deadline, "no write through node {}: {status} {body}", node.id);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The status of a linearizable `GET key` through `node`, retrying 5xx for up to 30 s.
fn read_status(c: &Cluster, node: &Node, key: &str) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = c
            .http
            .get(node.url(&format!("/v1/kv/{key}")))
            .send()
            .map_or(0, |r| r.status().as_u16());
        if (200..500).contains(&status) || Instant::now() > deadline {
            return status;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_leader_without_its_quorum_refuses_writes_at_once() {
    let mut c = Cluster::new(3);
    c.start_all();
    c.wait_ready();
    let leader = c.leader();
    let l = c.nodes.iter().find(|n| n.id == leader).unwrap();
    assert_eq!(put(&c, l, "before", "v").0, 200);
    phase("freeze both followers; the leader's lease lapses after an election timeout");
    for n in c.nodes.iter().filter(|n| n.id != leader) {
        n.signal("STOP");
    }
    std::thread::sleep(Duration::from_secs(1));
    let t = Instant::now();
    let (status, body) = put(&c, l, "during", "v");
    assert_eq!((status, body["error"].as_str()), (503, Some("no_leader")), "{body}");
    assert!(t.elapsed() < Duration::from_secs(3), "answered in {:?}", t.elapsed());
    let r = c.http.get(l.url("/v1/kv/before")).send().unwrap();
    assert_eq!(r.status().as_u16(), 503, "a linearizable read needs the quorum too");
    phase("resume them: writes go through again");
    for n in c.nodes.iter().filter(|n| n.id != leader) {
        n.signal("CONT");
    }
    put_eventually(&c, l, "after");
    assert_eq!(read_status(&c, l, "during"), 404, "the refused write was not applied");
}

#[test]
fn a_write_whose_entry_a_new_leader_replaced_gets_503_outcome_unknown() {
    let mut c = Cluster::new(3);
    c.start_all();
    c.wait_ready();
    let leader = c.leader();
    let followers: Vec<u64> = c.nodes.iter().map(|n| n.id).filter(|&id| id != leader).collect();
    assert_eq!(put(&c, c.by_ref(leader), "before", "v").0, 200);
    // Killed, not frozen: a frozen follower would still find the entry in its socket buffer
    // when it resumes, and could commit it.
    phase("kill both followers, and write to the leader at once (inside its lease)");
    let last_index = |c: &Cluster| -> u64 {
        c.get(&c.by_ref(leader).url("/v1/cluster/status"))
            .and_then(|r| r.json::<serde_json::Value>().ok())
            .and_then(|v| v["last_log_index"].as_u64())
            .unwrap_or(0)
    };
    let before = last_index(&c);
    for &f in &followers {
        c.by_id(f).kill();
    }
    let (http, url) = (c.http.clone(), c.by_ref(leader).url("/v1/kv/orphan"));
    let orphan = std::thread::spawn(move || match http.put(url).body("v").send() {
        Ok(r) => (r.status().as_u16(), r.json::<serde_json::Value>().unwrap_or_default()),
        Err(e) => (0, serde_json::json!({ "transport": e.to_string() })),
    });
    // Frozen only once the write is in its log: frozen before, it would forward the write
    // to the new leader when it resumes, and the case would not be reached. A write that
    // missed the lease never gets there, and is answered `no_leader` below.
    let deadline = Instant::now() + Duration::from_secs(10);
    while last_index(&c) <= before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    phase("freeze the leader, restart the followers: they elect a leader and write");
    c.by_ref(leader).signal("STOP");
    for &f in &followers {
        c.by_id(f).start();
    }
    let resumed: Vec<&Node> = c.nodes.iter().filter(|n| n.id != leader).collect();
    let new = leader_among(&c, &resumed);
    put_eventually(&c, c.by_ref(new), "next");
    phase("resume the old leader: the new leader's log replaces its entry");
    c.by_ref(leader).signal("CONT");
    let (status, body) = orphan.join().unwrap();
    if status == 503 && body["error"] == "no_leader" {
        // The write came after the lease had lapsed (a slow machine): refused, not appended.
        eprintln!("the write missed the leader's lease; the case was not reached");
        return;
    }
    assert_eq!((status, body["error"].as_str()), (503, Some("outcome_unknown")), "{body}");
    let any = c.by_ref(new);
    assert_eq!(read_status(&c, any, "orphan"), 404, "here, the discarded write was not applied");
    assert_eq!(read_status(&c, any, "next"), 200);
}
