//! Scale-out of a sharded cluster (`serve --groups 16`) by moving group replicas: a 4th node
//! added with `vellum cluster add-node` while clients write takes its share of the groups'
//! replicas (learner, catch up, swap the voters, drop the old replica), so that every member
//! holds as many as any other, within one, with three replicas per group; members that hold
//! no replica of a key's group still serve it (forwarded through the directory of group
//! leaders); a 5th node spreads the replicas again; `kill -9` of a node leaves every group a
//! quorum and writes go on; after `vellum cluster remove` of a dead node, `vellum cluster
//! spread` gives its groups a third replica back; a member that gave a replica away
//! releases it (its entries, snapshot and map go) and takes it back afresh; every
//! acknowledged write reads back through every node.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::harness::{Cluster, Node, phase, vellum_bin};
use crate::t170_groups::{lost, write_all};

const GROUPS: usize = 16;

/// Each group's voters as `node` reports them.
fn voters(c: &Cluster, node: &Node) -> Option<Vec<Vec<u64>>> {
    let v: serde_json::Value = c.get(&node.url("/v1/cluster/status"))?.json().ok()?;
    let groups = v["groups"].as_array()?;
    let ids = |v: &serde_json::Value| -> Vec<u64> {
        v.as_array().map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect()).unwrap()
    };
    Some(groups.iter().map(|g| ids(&g["voters"])).collect())
}

/// Replicas of groups 1.. held by each of `members`.
fn held(sets: &[Vec<u64>], members: &[u64]) -> BTreeMap<u64, usize> {
    members.iter().map(|m| (*m, sets[1..].iter().filter(|s| s.contains(m)).count())).collect()
}

/// Runs `vellum cluster ARGS --endpoints NODE-1`; its standard output, once it succeeded.
fn cluster_cli(c: &Cluster, args: &[String]) -> String {
    let out = std::process::Command::new(vellum_bin())
        .arg("cluster")
        .args(args)
        .args(["--endpoints", &format!("127.0.0.1:{}", c.by_ref(1).api)])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "cluster {args:?}: {stdout} {}; {}",
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    eprintln!("cluster {args:?}:\n{stdout}");
    stdout
}

/// Adds node `id` (already started with `--standby`) through `vellum cluster add-node`.
fn add_node(c: &Cluster, id: u64) {
    let node = c.by_ref(id);
    let args = [
        "add-node".to_string(),
        id.to_string(),
        format!("127.0.0.1:{}", node.api),
        format!("127.0.0.1:{}", node.raft),
    ];
    let stdout = cluster_cli(c, &args);
    assert!(stdout.contains("replica moved"), "add-node {id} moved replicas: {stdout}");
}

/// Waits until every running node reports the same voters of every group, spread over
/// `members` within one, three per group, group 0 holding every member; returns them.
fn wait_placed(c: &Cluster, members: &[u64]) -> Vec<Vec<u64>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let views: Vec<Option<Vec<Vec<u64>>>> =
            c.nodes.iter().filter(|n| n.is_started()).map(|n| voters(c, n)).collect();
        if let Some(Some(first)) = views.first()
            && views.iter().all(|v| v.as_ref() == Some(first))
        {
            let counts = held(first, members);
            let (lo, hi) = (counts.values().min().unwrap(), counts.values().max().unwrap());
            if hi - lo <= 1 && first[0] == members && first[1..].iter().all(|s| s.len() == 3) {
                return first.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "replicas not placed over {members:?} in 30 s: {views:?}; {}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until every running node has released the replicas it no longer holds (`sets`:
/// each group's voters): its status shows no log and no applied state for those groups
/// (the status of those that still show some, on a timeout).
fn wait_released(c: &Cluster, sets: &[Vec<u64>]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut held_on = Vec::new();
        for n in c.nodes.iter().filter(|n| n.is_started()) {
            let Some(v) = c.get(&n.url("/v1/cluster/status")).and_then(|r| r.json().ok()) else {
                held_on.push((n.id, None));
                continue;
            };
            let v: serde_json::Value = v;
            for (g, set) in sets.iter().enumerate().skip(1) {
                let s = &v["groups"][g];
                let learner = s["learners"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|x| x.as_u64() == Some(n.id)));
                if !set.contains(&n.id)
                    && !learner
                    && (!s["applied_index"].is_null() || !s["last_log_index"].is_null())
                {
                    held_on.push((n.id, Some(s.to_string())));
                }
            }
        }
        if held_on.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replicas not released in 30 s (node, group): {held_on:?}; {}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_fourth_and_fifth_node_take_their_share_of_the_replicas() {
    let mut c = Cluster::new(3);
    for n in &mut c.nodes {
        n.extra.extend(["--groups".into(), GROUPS.to_string()]);
    }
    phase("start 3 nodes of 16 groups; 200 writes");
    c.start_all();
    c.wait_ready();
    let mut acked = write_all(&c, 0..200);
    assert_eq!(acked.len(), 200, "every write acknowledged; {}", c.logs());

    for id in [4u64, 5] {
        phase(&format!("node {id} joins and takes its share of the replicas"));
        let (api, raft) = (crate::harness::free_port(), crate::harness::free_port());
        let extra = vec!["--groups".into(), GROUPS.to_string(), "--standby".into()];
        let mut node = Cluster::node(c.dir.path(), id, api, raft, extra);
        node.start();
        c.nodes.push(node);
        // Clients write meanwhile (through the new node too: 503 until it has joined).
        let from = acked.len();
        let during = std::thread::scope(|s| {
            let writer = s.spawn(|| write_all(&c, from..from + 200));
            add_node(&c, id);
            writer.join().unwrap()
        });
        assert_eq!(during.len(), 200, "writes go on during the moves; {}", c.logs());
        acked.extend(during);
        c.wait_ready();
        let members: Vec<u64> = (1..=id).collect();
        let sets = wait_placed(&c, &members);
        eprintln!("voters per group with {id} members: {sets:?}");
        assert!(held(&sets, &members)[&id] >= (GROUPS - 1) * 3 / members.len());
        // The members that gave replicas away drop their state of those groups.
        wait_released(&c, &sets);

        phase("writes through every node, replica of the key's group or not");
        let from = acked.len();
        acked.extend(write_all(&c, from..from + 200));
        assert_eq!(acked.len(), from + 200, "writes go on; {}", c.logs());
        for n in c.nodes.iter().filter(|n| n.is_started()) {
            let gone = lost(&c, n, &acked);
            assert!(gone.is_empty(), "{} writes lost, read through node {}", gone.len(), n.id);
        }
        // A node with no replica of a key's group answers a local read through the leader.
        let k = acked[0];
        let r = c.get(&c.by_ref(id).url(&format!("/v1/kv/g-{k}?consistency=local"))).unwrap();
        assert_eq!(r.text().unwrap(), format!("v-{k}"));
    }

    phase("kill -9 node 4: every group keeps a quorum, writes go on");
    c.by_id(4).kill();
    let from = acked.len();
    acked.extend(write_all(&c, from..from + 200));
    assert_eq!(acked.len(), from + 200, "writes go on with node 4 down; {}", c.logs());
    assert!(lost(&c, c.by_ref(5), &acked).is_empty());

    phase("node 4 restarts and reads every acknowledged write back");
    c.by_id(4).start();
    c.wait_ready();
    let gone = lost(&c, c.by_ref(4), &acked);
    assert!(gone.is_empty(), "{} acknowledged writes lost after the restart", gone.len());
    wait_placed(&c, &[1, 2, 3, 4, 5]);

    // Node 1 started with --initial-cluster and released replicas: those groups keep only
    // a vote here, are not bootstrapped again, and must not hold back its readiness.
    phase("node 1, which released replicas, restarts and is ready");
    c.by_id(1).stop();
    c.by_id(1).start();
    c.wait_ready();
    assert!(lost(&c, c.by_ref(1), &acked).is_empty(), "{}", c.logs());

    phase("node 4 dies for good and is removed; spread gives its groups a replica back");
    c.by_id(4).kill();
    cluster_cli(&c, &["remove".into(), "4".into()]);
    c.nodes.retain(|n| n.id != 4);
    let stdout = cluster_cli(&c, &["spread".into()]);
    assert!(stdout.contains("replica added"), "{stdout}");
    let sets = wait_placed(&c, &[1, 2, 3, 5]);
    eprintln!("voters per group after the removal: {sets:?}");
    // Some replicas came back to members that had released them: they caught up afresh.
    wait_released(&c, &sets);
    let from = acked.len();
    acked.extend(write_all(&c, from..from + 200));
    assert_eq!(acked.len(), from + 200, "writes go on without node 4; {}", c.logs());
    for n in &c.nodes {
        let gone = lost(&c, n, &acked);
        assert!(gone.is_empty(), "{} writes lost, read through node {}", gone.len(), n.id);
    }
}
