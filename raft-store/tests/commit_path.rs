//! The commit path, counted: three openraft nodes in one process (function-call network) on
//! counting carriers, one client writing one entry at a time. Each committed entry must cost
//! one durable write on the leader and one on each follower: the committed id rides on the
//! next log write instead of a write of its own (`LogCore::save_committed`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::router::Router;
use openraft::{Config, Raft};
use vellum_engine::carrier::{Carrier, FaultyCarrier};
use vellum_raft_store::v09::{TypeConfig, open_store};
use vellum_raft_store::{KvNode, KvOp, KvRequest, LogConfig, LogCore};

struct Node {
    raft: Raft<TypeConfig>,
    carrier: Arc<FaultyCarrier>,
    core: LogCore,
}

impl Node {
    fn durable_writes(&self) -> u64 {
        let s = self.carrier.stats().snapshot();
        s.durable_writes + s.barriers
    }
}

async fn cluster() -> Vec<Node> {
    let router = Router::default();
    let config = Arc::new(
        Config {
            heartbeat_interval: 50,
            election_timeout_min: 300,
            election_timeout_max: 600,
            ..Config::default()
        }
        .validate()
        .unwrap(),
    );
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let (carrier, volume) = common::faulty_volume(64 << 20);
        // A long commit lag: no idle meta save falls into the counted window, whatever the
        // timing (a count, not a timing, decides this test).
        let log = LogConfig {
            segment_bytes: 4 << 20,
            commit_lag: Duration::from_secs(3600),
            ..LogConfig::default()
        };
        let (store, sm) = open_store(&volume, log).unwrap();
        let core = store.core().clone();
        let raft = Raft::new(id, Arc::clone(&config), router.clone(), store, sm).await.unwrap();
        router.add(id, raft.clone());
        nodes.push(Node { raft, carrier, core });
    }
    let members: BTreeMap<u64, KvNode> = (1..=3).map(|id| (id, KvNode::default())).collect();
    nodes[0].raft.initialize(members).await.unwrap();
    nodes
}

fn put(i: usize) -> KvRequest {
    KvRequest { ops: vec![KvOp::Put { key: format!("k{i}"), value: vec![7; 256] }] }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_costs_one_durable_write_per_entry_on_leader_and_followers() {
    let nodes = cluster().await;
    let leader = nodes[0]
        .raft
        .wait(Some(Duration::from_secs(20)))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .unwrap()
        .current_leader
        .unwrap();
    let lead = &nodes[leader as usize - 1];
    for i in 0..5 {
        lead.raft.client_write(put(i)).await.unwrap();
    }
    // Let the followers catch up with the warm-up before counting.
    let warm = lead.raft.metrics().borrow().last_log_index.unwrap();
    for n in &nodes {
        n.raft.wait(Some(Duration::from_secs(10))).applied_index(Some(warm), "warm").await.unwrap();
    }
    let before: Vec<u64> = nodes.iter().map(Node::durable_writes).collect();
    let writes = 200;
    for i in 0..writes {
        lead.raft.client_write(put(i)).await.unwrap();
    }
    let last = lead.raft.metrics().borrow().last_log_index.unwrap();
    for n in &nodes {
        n.raft
            .wait(Some(Duration::from_secs(10)))
            .applied_index(Some(last), "replicated")
            .await
            .unwrap();
    }
    for (n, b) in nodes.iter().zip(&before) {
        let per_entry = (n.durable_writes() - b) as f64 / writes as f64;
        let role = if n.raft.metrics().borrow().id == leader { "leader" } else { "follower" };
        eprintln!("{role}: {per_entry:.3} durable writes per committed entry");
        // At most one write per entry: the leader appends each entry alone (openraft 0.9,
        // one client); a follower that fell behind gets several entries in one append.
        let low = if role == "leader" { 0.95 } else { 0.01 };
        assert!(
            (low..=1.05).contains(&per_entry),
            "{role}: {per_entry:.3} durable writes per committed entry (want at most 1)"
        );
    }
    // The committed ids rode along: durable up to the last few entries, without a write of
    // their own.
    for n in &nodes {
        let durable = n.core.durable_committed_index().unwrap_or(0);
        assert!(durable + 3 >= last, "durable committed {durable}, last entry {last}");
    }
    for n in &nodes {
        n.raft.shutdown().await.unwrap();
        n.core.close();
        assert!(n.core.durable_committed_index() >= Some(last - 1), "close saves the id");
    }
}
