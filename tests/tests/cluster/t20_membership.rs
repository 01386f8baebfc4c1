//! `--join`: a node added to a running cluster as a learner, then promoted to voter.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, free_port, phase};

#[test]
fn a_joining_node_becomes_a_voter() {
    let mut c = Cluster::new(1);
    phase("start a one-node cluster");
    c.start_all();
    c.wait_ready();
    assert!(c.put(&c.nodes[0], "before", "join"));
    phase("start node 2 with --join");
    let join = format!("127.0.0.1:{}", c.nodes[0].api);
    let node = crate::harness::Cluster::node(
        c.dir.path(),
        2,
        free_port(),
        free_port(),
        vec!["--join".into(), join],
    );
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
    phase("the new voter serves reads and forwards writes");
    c.wait_ready();
    assert_eq!(c.read(&c.nodes[1], "before", false).as_deref(), Some("join"));
    assert!(c.put(&c.nodes[1], "after", "join"));
    assert_eq!(c.read(&c.nodes[0], "after", false).as_deref(), Some("join"));
}
