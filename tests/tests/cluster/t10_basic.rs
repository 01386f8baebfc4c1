//! Three nodes bootstrap together; writes through any node are readable everywhere.

use crate::harness::{Cluster, phase};

#[test]
fn writes_through_any_node_read_back_linearizably_everywhere() {
    let mut c = Cluster::new(3);
    phase("start 3 nodes");
    c.start_all();
    c.wait_ready();
    phase("300 writes round-robin over the nodes");
    for k in 0..300 {
        let node = &c.nodes[k % 3];
        assert!(
            c.put(node, &format!("k{k}"), &format!("v{k}")),
            "write {k} through node {}",
            node.id
        );
    }
    phase("every node reads every write linearizably");
    for n in &c.nodes {
        for k in (0..300).step_by(7) {
            assert_eq!(
                c.read(n, &format!("k{k}"), false).as_deref(),
                Some(format!("v{k}").as_str()),
                "node {} key {k}",
                n.id
            );
        }
    }
    phase("status names the leader and three voters");
    let status: serde_json::Value =
        c.get(&c.nodes[0].url("/v1/cluster/status")).unwrap().json().unwrap();
    assert_eq!(status["voters"].as_array().unwrap().len(), 3);
    assert!(status["leader"].as_u64().is_some());
    let leader = c.leader();
    let url = c.by_id(leader).url("/v1/cluster/status");
    let lstatus: serde_json::Value = c.get(&url).unwrap().json().unwrap();
    assert_eq!(lstatus["role"], "leader");
    assert_eq!(
        lstatus["replication"].as_object().unwrap().len(),
        3,
        "the leader reports each member's matched index"
    );
    phase("a follower redirects with ?redirect");
    let follower = c.nodes.iter().find(|n| n.id != leader).unwrap();
    let no_follow = crate::harness::client_builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = no_follow.put(follower.url("/v1/kv/redirected?redirect")).body("x").send().unwrap();
    assert_eq!(r.status().as_u16(), 307);
    assert!(r.headers().get("location").unwrap().to_str().unwrap().contains("/v1/kv/redirected"));
    phase("delete");
    assert!(c.http.delete(c.nodes[1].url("/v1/kv/k1")).send().unwrap().status().is_success());
    assert_eq!(c.read(&c.nodes[2], "k1", false), None);
}
