//! A follower that falls behind the purged log catches up by snapshot (sent in chunks).

use std::time::{Duration, Instant};

use crate::harness::{Cluster, phase};

#[test]
fn a_lagging_follower_catches_up_by_snapshot() {
    let mut c = Cluster::new(3);
    for n in &mut c.nodes {
        n.extra.extend(["--snapshot-entries", "50", "--snapshot-keep", "0"].map(String::from));
    }
    c.start_all();
    c.wait_ready();
    let leader = c.leader();
    let lagging = c.nodes.iter().find(|n| n.id != leader).unwrap().id;
    phase(&format!("stop node {lagging}, write 400 keys (snapshots every 50, no log kept behind)"));
    c.by_id(lagging).stop();
    let writer = c.nodes.iter().find(|n| n.id != lagging).unwrap();
    for k in 0..400 {
        assert!(c.put(writer, &format!("s{k}"), &"v".repeat(k % 300)));
    }
    // The node's space guard snapshots and purges on its own clock (every 100 ms): wait
    // until the leader's log no longer holds what the stopped follower lacks.
    let leader_node = c.by_ref(leader);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status: serde_json::Value =
            c.get(&leader_node.url("/v1/cluster/status")).unwrap().json().unwrap();
        if status["purged_index"].as_u64().is_some_and(|i| i > 300) {
            break;
        }
        assert!(Instant::now() < deadline, "the leader did not purge its log: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
    phase(&format!("restart node {lagging}: it must install the snapshot"));
    c.by_id(lagging).start();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let node = c.nodes.iter().find(|n| n.id == lagging).unwrap();
        if c.read(node, "s399", true).is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "node {lagging} did not catch up: {}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    // The state machine takes the snapshot before openraft's core hears that it did, so the
    // status (openraft's metrics) can trail a local read that already sees the data: wait
    // for it to show the snapshot and the applied index past the leader's purge point.
    let node = c.nodes.iter().find(|n| n.id == lagging).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status: serde_json::Value =
            c.get(&node.url("/v1/cluster/status")).unwrap().json().unwrap();
        let snapshot = status["snapshot_index"].as_u64().unwrap_or(0);
        let applied = status["applied_index"].as_u64().unwrap_or(0);
        if snapshot > 300 && applied >= snapshot {
            break;
        }
        assert!(Instant::now() < deadline, "the follower holds a snapshot past 300: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
    for k in (0..400).step_by(37) {
        assert_eq!(
            c.read(node, &format!("s{k}"), true),
            Some("v".repeat(k % 300)),
            "key s{k} on node {lagging}"
        );
    }
}
