//! A member that lost its volume (a failed mount, a replaced disk, a deleted carrier) must
//! never come back as the member it was: it refuses to start when its peers know it, it is
//! refused (and stops) when it started while they were away, the cluster never counts it,
//! and it can rejoin as a new member once removed.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, free_port, phase};

/// True once some node answers a write through `node` within `wait`.
fn write_succeeds(c: &Cluster, node: usize, key: &str, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if c.put(&c.nodes[node], key, "v") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Waits until node 1 reports exactly `voters`.
fn wait_voters(c: &Cluster, voters: &[u64]) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let status: Option<serde_json::Value> =
            c.get(&c.nodes[0].url("/v1/cluster/status")).and_then(|r| r.json().ok());
        let now = status.as_ref().and_then(|s| s["voters"].as_array().cloned());
        if now.is_some_and(|v| {
            v.iter().filter_map(serde_json::Value::as_u64).eq(voters.iter().copied())
        }) {
            return;
        }
        assert!(Instant::now() < deadline, "voters never became {voters:?}: {}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_member_restarted_on_a_fresh_volume_refuses_and_can_rejoin_as_a_new_member() {
    let mut c = Cluster::new(3);
    phase("a 3-node cluster takes writes");
    c.start_all();
    c.wait_ready();
    for i in 0..20 {
        assert!(c.put(&c.nodes[i % 3], &format!("k{i}"), &format!("v{i}")));
    }
    phase("node 3 loses its volume and is restarted with the same flags");
    c.by_id(3).kill();
    c.by_id(3).lose_volume();
    c.by_id(3).start();
    let status = c.by_id(3).wait_exit(Duration::from_secs(30));
    let log = c.by_id(3).log_text();
    let status = status.unwrap_or_else(|| panic!("node 3 kept running on a fresh volume: {log}"));
    assert_eq!(status.code(), Some(3), "node 3 must exit with code 3 (not restarted)");
    let last = log.lines().last().unwrap_or_default();
    assert!(last.contains("lost its raft state") && last.contains("--join"), "{last}");
    phase("the cluster goes on with nodes 1 and 2");
    assert!(write_succeeds(&c, 0, "after-loss", Duration::from_secs(20)), "{}", c.logs());
    phase("remove node 3, then join the machine as node 4 on its fresh volume");
    let api1 = format!("127.0.0.1:{}", c.nodes[0].api);
    let out = std::process::Command::new(crate::harness::vellum_bin())
        .args(["cluster", "remove", "3", "--endpoint", &api1])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_voters(&c, &[1, 2]);
    let mut node4 =
        Cluster::node(c.dir.path(), 4, free_port(), free_port(), vec!["--join".into(), api1]);
    node4.volume = c.by_id(3).volume.clone();
    c.nodes.push(node4);
    c.by_id(4).start();
    wait_voters(&c, &[1, 2, 4]);
    c.wait_ready();
    // A linearizable read needs the leader to hear from a quorum that now includes node 4;
    // until it has (a loaded machine), the answer is a retryable 503, as for any client.
    let deadline = Instant::now() + Duration::from_secs(20);
    let got = loop {
        let got = c.http.get(c.nodes.last().unwrap().url("/v1/kv/k7")).send();
        let got = got.map(|r| (r.status().as_u16(), r.text().unwrap_or_default()));
        let retry = got.as_ref().is_ok_and(|(status, _)| *status == 503);
        if !retry || Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        got.as_ref().is_ok_and(|(status, body)| *status == 200 && body == "v7"),
        "reading k7 through node 4: {got:?} {}",
        c.logs()
    );
}

/// Node 3 acknowledged a write that node 2 never saw; then node 3 loses its volume and comes
/// back while 1 and 2 are down. Counted as the old member, it would elect 2 (or be elected)
/// without the write: an acknowledged write lost. It must wait for every member to confirm
/// it never ran before, never count meanwhile, and refuse once node 1 (which knows it) is
/// back.
#[test]
fn an_amnesiac_that_started_while_its_peers_were_away_is_never_counted() {
    let mut c = Cluster::new(3);
    phase("a 3-node cluster; node 2 stops; a write is acknowledged by 1 and 3");
    c.start_all();
    c.wait_ready();
    assert!(c.put(&c.nodes[0], "before", "all"));
    c.by_id(2).stop();
    let leader = c.leader();
    let via = c.nodes.iter().position(|n| n.id == leader).unwrap();
    assert!(write_succeeds(&c, via, "only-1-and-3", Duration::from_secs(20)), "{}", c.logs());
    phase("nodes 1 and 3 stop; node 3 loses its volume and starts alone: it waits");
    c.by_id(1).kill();
    c.by_id(3).kill();
    c.by_id(3).lose_volume();
    c.by_id(3).start();
    // It formats its new volume first and says so only after waiting a while: poll for the
    // line (a loaded machine may take seconds), the node alive all along.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c.by_ref(3).log_text().contains("waiting for every member") {
        assert!(c.by_ref(3).is_running(), "node 3 waits, it does not exit: {}", c.logs());
        assert!(Instant::now() < deadline, "node 3 never said it waits: {}", c.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(c.by_id(3).wait_exit(Duration::from_secs(1)).is_none(), "node 3 waits");
    phase("node 2 starts: 2 and 3 elect nobody (node 3 refuses if 2 knows it)");
    c.by_id(2).start();
    assert!(
        !write_succeeds(&c, 1, "must-not-commit", Duration::from_secs(5)),
        "nodes 2 and 3 committed a write: node 3 was counted as the member it was"
    );
    phase("node 1 comes back: node 3 refuses; the write 1 and 3 acknowledged is there");
    c.by_id(1).start();
    let status = c.by_id(3).wait_exit(Duration::from_secs(30));
    let log3 = c.by_id(3).log_text();
    let status = status.unwrap_or_else(|| panic!("node 3 never refused: {log3}"));
    assert_eq!(status.code(), Some(3));
    assert!(log3.lines().last().unwrap_or_default().contains("lost its raft state"), "{log3}");
    assert!(write_succeeds(&c, 1, "after", Duration::from_secs(30)), "{}", c.logs());
    assert_eq!(c.read(&c.nodes[1], "only-1-and-3", false).as_deref(), Some("v"));
}
