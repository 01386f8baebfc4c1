//! A sharded cluster (`serve --groups 16`) on 3 nodes: leaders spread within one; writes
//! through any node land in their key's group and all read back, prefix reads merge every
//! group; `kill -9` of a node moves its groups' leadership and writes go on; a restart
//! takes its share back (`vellum cluster rebalance` waits for it); another `--groups` on a
//! volume with raft state is refused in one line; a backup (built for one group) answers
//! 501; a 4th node added with `vellum cluster add` joins every group and leads a quarter,
//! and `vellum cluster remove` takes it out of every group.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, Node, phase, vellum_bin};

const GROUPS: usize = 16;

/// Each group's leader as `node` reports it (`None`: no leader known).
fn leaders(c: &Cluster, node: &Node) -> Option<Vec<Option<u64>>> {
    let v: serde_json::Value = c.get(&node.url("/v1/cluster/status"))?.json().ok()?;
    let groups = v["groups"].as_array()?;
    Some(groups.iter().map(|g| g["leader"].as_u64()).collect())
}

/// Groups led by each of `ids`, as `node` reports it, when every group has one of them as
/// its leader.
fn spread(c: &Cluster, node: &Node, ids: &[u64]) -> Option<Vec<usize>> {
    let leaders = leaders(c, node)?;
    if leaders.len() != GROUPS || leaders.iter().any(|l| !l.is_some_and(|l| ids.contains(&l))) {
        return None;
    }
    Some(ids.iter().map(|id| leaders.iter().filter(|l| **l == Some(*id)).count()).collect())
}

/// Waits until the leaders are spread within one over `ids` (as `node` sees it).
fn wait_spread(c: &Cluster, node: &Node, ids: &[u64], within: Duration) -> Vec<usize> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(counts) = spread(c, node, ids)
            && counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1
        {
            return counts;
        }
        assert!(
            Instant::now() < deadline,
            "leaders not spread over {ids:?} in {within:?}: {:?}; {}",
            leaders(c, node),
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `node` reports `want` as group 0's voters: a member outside the quorum of a
/// change may hear of it a moment after `cluster add` or `remove` returns.
fn wait_voters(c: &Cluster, node: &Node, want: &[u64]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v: Option<serde_json::Value> =
            c.get(&node.url("/v1/cluster/status")).and_then(|r| r.json().ok());
        if v.as_ref().is_some_and(|v| v["voters"] == serde_json::json!(want)) {
            return;
        }
        assert!(Instant::now() < deadline, "node {} reports voters {v:?}, not {want:?}", node.id);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes `range` through the running nodes in turn from 8 threads; the keys acknowledged.
pub(crate) fn write_all(c: &Cluster, range: std::ops::Range<usize>) -> Vec<usize> {
    let running: Vec<&Node> = c.nodes.iter().filter(|n| n.is_started()).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let (c, running, range) = (c, &running, range.clone());
                s.spawn(move || {
                    let mut ok = Vec::new();
                    for k in range.skip(t).step_by(8) {
                        let node = running[k % running.len()];
                        // A group whose leader just died answers 503 until it elects one.
                        let deadline = Instant::now() + Duration::from_secs(20);
                        while Instant::now() < deadline {
                            if c.put(node, &format!("g-{k}"), &format!("v-{k}")) {
                                ok.push(k);
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                    ok
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    })
}

/// The acknowledged keys `node` does not read back linearizably. A read refused for another
/// reason than a 404 (a group electing or moving, a view that still names a dead leader) is
/// retried for a while (`Cluster::read_settled`): only a 404 or another value is a lost write.
pub(crate) fn lost(c: &Cluster, node: &Node, acked: &[usize]) -> Vec<usize> {
    let read_back = |k: usize| c.read_settled(node, &format!("g-{k}")) == Some(format!("v-{k}"));
    acked.iter().copied().filter(|k| !read_back(*k)).collect()
}

#[test]
fn sixteen_groups_on_three_nodes_spread_survive_a_kill_and_rebalance() {
    let mut c = Cluster::new(3);
    for n in &mut c.nodes {
        n.extra.extend(["--groups".into(), GROUPS.to_string()]);
    }
    phase("start 3 nodes of 16 groups");
    c.start_all();
    c.wait_ready();
    let counts = wait_spread(&c, &c.nodes[0], &[1, 2, 3], Duration::from_secs(60));
    eprintln!("leaders per node: {counts:?}");

    phase("600 writes through any node");
    let mut acked = write_all(&c, 0..600);
    assert_eq!(acked.len(), 600, "every write acknowledged; {}", c.logs());
    assert!(lost(&c, &c.nodes[1], &acked).is_empty());

    phase("a prefix read merges every group");
    let v: serde_json::Value =
        c.get(&c.nodes[2].url("/v1/kv?prefix=g-1&limit=10000")).unwrap().json().unwrap();
    let keys: Vec<&str> =
        v["kvs"].as_array().unwrap().iter().map(|p| p["key"].as_str().unwrap()).collect();
    let mut want: Vec<String> =
        (0..600).map(|k| format!("g-{k}")).filter(|k| k.starts_with("g-1")).collect();
    want.sort();
    assert_eq!(keys, want, "every key under the prefix, in order");
    let v: serde_json::Value =
        c.get(&c.nodes[0].url("/v1/kv?prefix=g-&limit=5")).unwrap().json().unwrap();
    assert_eq!(v["kvs"].as_array().unwrap().len(), 5);
    assert_eq!(v["more"], true);

    phase("a backup, built for one group, answers 501");
    let r = c.http.get(c.nodes[0].url("/v1/cluster/snapshot")).send().unwrap();
    assert_eq!(r.status().as_u16(), 501);
    assert_eq!(r.json::<serde_json::Value>().unwrap()["error"], "not_with_groups");

    let victim = 2;
    phase(&format!("kill -9 node {victim}: its groups elect elsewhere, writes go on"));
    c.by_id(victim).kill();
    let survivor = c.by_ref(1);
    let counts = wait_spread(&c, survivor, &[1, 3], Duration::from_secs(60));
    eprintln!("leaders per survivor: {counts:?}");
    acked.extend(write_all(&c, 600..800));
    assert_eq!(acked.len(), 800, "writes go on with a node down; {}", c.logs());
    let gone = lost(&c, c.by_ref(3), &acked);
    assert!(
        gone.is_empty(),
        "{} acknowledged writes lost: {:?}",
        gone.len(),
        &gone[..gone.len().min(10)]
    );

    phase(&format!("restart node {victim}: it takes its share back"));
    c.by_id(victim).start();
    c.wait_ready();
    let out = std::process::Command::new(vellum_bin())
        .args(["cluster", "rebalance", "--wait", "60", "--endpoints"])
        .arg(format!("127.0.0.1:{}", c.by_ref(1).api))
        .output()
        .unwrap();
    assert!(out.status.success(), "rebalance: {}", String::from_utf8_lossy(&out.stderr));
    let counts = wait_spread(&c, c.by_ref(3), &[1, 2, 3], Duration::from_secs(60));
    eprintln!("leaders per node after the restart: {counts:?}");
    let gone = lost(&c, c.by_ref(victim), &acked);
    assert!(gone.is_empty(), "{} acknowledged writes lost after the restart", gone.len());

    phase("another --groups on a volume with raft state is refused in one line");
    c.by_id(3).stop();
    let node = c.by_id(3);
    let at = node.extra.iter().position(|a| a == "--groups").unwrap();
    node.extra[at + 1] = "8".into();
    node.start();
    let status = node.wait_exit(Duration::from_secs(30)).expect("the node refuses to start");
    assert_eq!(status.code(), Some(3), "an operator must act: the unit does not restart it");
    let log = node.log_text();
    assert!(
        log.contains("holds a cluster of 16 Raft groups and --groups is 8"),
        "the refusal says why: {log}"
    );
    node.extra[at + 1] = GROUPS.to_string();
    node.start();
    c.wait_ready();
    assert!(lost(&c, c.by_ref(3), &acked).is_empty());

    phase("a 4th node joins every group and takes a quarter of the leaders");
    let (api, raft) = (crate::harness::free_port(), crate::harness::free_port());
    let extra = vec!["--groups".into(), GROUPS.to_string(), "--standby".into()];
    let mut fourth = Cluster::node(c.dir.path(), 4, api, raft, extra);
    fourth.start();
    c.nodes.push(fourth);
    let out = std::process::Command::new(vellum_bin())
        .args(["cluster", "add", "4"])
        .arg(format!("127.0.0.1:{api}"))
        .arg(format!("127.0.0.1:{raft}"))
        .args(["--endpoints", &format!("127.0.0.1:{}", c.by_ref(1).api)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cluster add: {} {}; {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    c.wait_ready();
    wait_voters(&c, c.by_ref(2), &[1, 2, 3, 4]);
    let counts = wait_spread(&c, c.by_ref(4), &[1, 2, 3, 4], Duration::from_secs(60));
    eprintln!("leaders per node with 4 members: {counts:?}");
    acked.extend(write_all(&c, 800..1000));
    assert_eq!(acked.len(), 1000, "writes go on with 4 members; {}", c.logs());
    let gone = lost(&c, c.by_ref(4), &acked);
    assert!(gone.is_empty(), "{} acknowledged writes lost, read through node 4", gone.len());

    phase("node 4 is removed from every group; the others share its leaders");
    let out = std::process::Command::new(vellum_bin())
        .args(["cluster", "remove", "4", "--endpoints", &format!("127.0.0.1:{}", c.by_ref(1).api)])
        .output()
        .unwrap();
    assert!(out.status.success(), "cluster remove: {}", String::from_utf8_lossy(&out.stderr));
    c.by_id(4).kill();
    c.nodes.retain(|n| n.id != 4);
    let counts = wait_spread(&c, c.by_ref(1), &[1, 2, 3], Duration::from_secs(60));
    eprintln!("leaders per node after the removal: {counts:?}");
    wait_voters(&c, c.by_ref(3), &[1, 2, 3]);
    acked.extend(write_all(&c, 1000..1100));
    assert_eq!(acked.len(), 1100, "writes go on without node 4; {}", c.logs());
    assert!(lost(&c, c.by_ref(2), &acked).is_empty());
}

/// A node of several groups with neither `--initial-cluster` nor `--join` is a single-node
/// cluster of every group, restarts as one, and refuses in one line what is not built for
/// several groups (snapshot archives).
#[test]
fn a_lone_node_of_four_groups_serves_restarts_and_refuses_archives() {
    use crate::harness::{client_builder, free_port};
    let dir = tempfile::tempdir().unwrap();
    let node = Cluster::node(dir.path(), 1, free_port(), free_port(), Vec::new());
    let http = client_builder().timeout(Duration::from_secs(20)).build().unwrap();
    let mut c = Cluster { nodes: vec![node], http, dir, token: None };
    phase("--snapshot-archive with --groups 4 is refused in one line");
    c.nodes[0].extra = vec![
        "--groups".into(),
        "4".into(),
        "--snapshot-archive".into(),
        "local:///nonexistent".into(),
    ];
    c.nodes[0].start();
    let status = c.nodes[0].wait_exit(Duration::from_secs(20)).expect("refused at once");
    assert!(!status.success());
    let log = c.nodes[0].log_text();
    assert!(log.contains("--snapshot-archive is not built yet"), "{log}");
    phase("a single-node cluster of 4 groups");
    c.nodes[0].extra = vec!["--groups".into(), "4".into()];
    c.nodes[0].start();
    c.wait_ready();
    // Ready means every group has its leader: no put may fail.
    for k in 0..40 {
        let r = c.http.put(c.nodes[0].url(&format!("/v1/kv/g-{k}"))).body(format!("v-{k}"));
        let got = r.send().map(|r| (r.status(), r.text().unwrap_or_default()));
        assert!(
            got.as_ref().is_ok_and(|(s, _)| s.is_success()),
            "PUT g-{k}: {got:?}; {}",
            c.logs()
        );
    }
    let v: serde_json::Value =
        c.get(&c.nodes[0].url("/v1/cluster/status")).unwrap().json().unwrap();
    let groups = v["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 4);
    assert!(groups.iter().all(|g| g["leader"] == 1), "{v}");
    let r = c.http.post(c.nodes[0].url("/v1/cluster/rebalance")).send().unwrap();
    assert!(r.status().is_success());
    assert_eq!(r.json::<serde_json::Value>().unwrap()["asked"], serde_json::json!([1]));
    phase("restart: every group comes back");
    c.nodes[0].stop();
    c.nodes[0].start();
    c.wait_ready();
    let acked: Vec<usize> = (0..40).collect();
    let gone = lost(&c, &c.nodes[0], &acked);
    assert!(gone.is_empty(), "{} writes lost across the restart", gone.len());
}
