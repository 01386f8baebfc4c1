//! The commit path through the openraft 0.10 adapter, counted: three openraft 0.10 nodes in
//! one process (function-call network, the bench harness's `net010.rs`) on counting
//! carriers.
//!
//! - One client, one write at a time: at most one durable write per committed entry on
//!   every node, and every acknowledged write durable on a majority when it is acknowledged.
//!   With `broadcast_submitted_on_append` the followers get an entry while the leader is
//!   still writing it, and their two writes are a majority of three: the entry commits, and
//!   the client is answered, before the leader's own write returns (Raft asks for a
//!   majority, not for the leader), so the leader's next append meets that write in flight
//!   and the two combine. A leader makes fewer writes than entries even for one client.
//! - 64 clients at once on a slow carrier (every write-through write sleeps 2 ms, as a disk
//!   would): 0.10 submits appends without waiting for the previous one to be durable, and
//!   the log's combining queue merges those that arrive while a write is in flight, so the
//!   leader makes far fewer durable writes than it commits entries (the bound: 0.2).
//!
//! Counts decide, not timings: the sleep only makes sure that appends meet a write in flight.

#![cfg(feature = "openraft-v010")]
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

#[allow(dead_code)] // the harness's cluster helpers are more than this test needs
#[path = "../../bench/src/suites/harness/net010.rs"]
mod net010;

use std::sync::Arc;
use std::time::Duration;

use vellum_engine::carrier::{Carrier, FaultyCarrier};
use vellum_raft_store::v010::openraft::type_config::async_runtime::WatchReceiver;
use vellum_raft_store::v010::openraft::{Config, Raft};
use vellum_raft_store::v010::{KvStateMachine, TypeConfig, open_store};
use vellum_raft_store::{KvNode, KvOp, KvRequest, LogConfig, LogCore};

struct Node {
    carrier: Arc<FaultyCarrier>,
    core: LogCore,
}

impl Node {
    fn durable_writes(&self) -> u64 {
        let s = self.carrier.stats().snapshot();
        s.durable_writes + s.barriers
    }
}

async fn cluster(
    write_delay: Option<Duration>,
) -> (net010::Cluster<TypeConfig, KvStateMachine>, Vec<Node>) {
    let mut nodes = Vec::new();
    let mut stores = Vec::new();
    for _ in 1..=3u64 {
        let (carrier, volume) = common::faulty_volume(64 << 20);
        if let Some(delay) = write_delay {
            carrier.set_write_hook(Some(Arc::new(move |_, _, _| std::thread::sleep(delay))));
        }
        // A long commit lag: no idle meta save falls into the counted window.
        let log = LogConfig {
            segment_bytes: 4 << 20,
            commit_lag: Duration::from_secs(3600),
            ..LogConfig::default()
        };
        let (store, sm) = open_store(&volume, log).unwrap();
        nodes.push(Node { carrier, core: store.core().clone() });
        stores.push((store, sm));
    }
    let config = Config {
        heartbeat_interval: 50,
        election_timeout_min: 300,
        election_timeout_max: 600,
        broadcast_submitted_on_append: Some(true),
        ..Config::default()
    };
    let config = Arc::new(config.validate().unwrap());
    let cluster = net010::Cluster::start(stores, config, |_| KvNode::default()).await.unwrap();
    (cluster, nodes)
}

fn put(i: usize) -> KvRequest {
    KvRequest { ops: vec![KvOp::Put { key: format!("k{i}"), value: vec![7; 256] }] }
}

fn last_index(raft: &Raft<TypeConfig, KvStateMachine>) -> u64 {
    raft.metrics().borrow_watched().last_log_index.unwrap()
}

/// Waits until every node applied `index`.
async fn applied_everywhere(cluster: &net010::Cluster<TypeConfig, KvStateMachine>, index: u64) {
    for raft in &cluster.rafts {
        raft.wait(Some(Duration::from_secs(20)))
            .applied_index_at_least(Some(index), "replicated")
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_costs_one_durable_write_per_entry() {
    let (cluster, nodes) = cluster(None).await;
    let lead = cluster.leader();
    for i in 0..5 {
        lead.client_write(put(i)).await.unwrap();
    }
    applied_everywhere(&cluster, last_index(lead)).await;
    let before: Vec<u64> = nodes.iter().map(Node::durable_writes).collect();
    let writes = 200;
    for i in 0..writes {
        let index = lead.client_write(put(i)).await.unwrap().log_id.index;
        let durable_on = nodes.iter().filter(|n| n.core.is_durable(index)).count();
        assert!(durable_on >= 2, "entry {index} acknowledged, durable on {durable_on} of 3");
    }
    let last = last_index(lead);
    applied_everywhere(&cluster, last).await;
    for (k, (n, b)) in nodes.iter().zip(&before).enumerate() {
        let per_entry = (n.durable_writes() - b) as f64 / writes as f64;
        let role = if k == 0 { "leader" } else { "follower" };
        eprintln!("{role}: {per_entry:.3} durable writes per committed entry");
        assert!(
            (0.01..=1.05).contains(&per_entry),
            "{role}: {per_entry:.3} durable writes per committed entry (want at most 1)"
        );
    }
    for n in &nodes {
        let durable = n.core.durable_committed_index().unwrap_or(0);
        assert!(durable + 3 >= last, "durable committed {durable}, last entry {last}");
    }
    cluster.shutdown().await;
    for n in &nodes {
        n.core.close();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_share_the_leaders_durable_writes() {
    let (cluster, nodes) = cluster(Some(Duration::from_millis(2))).await;
    let lead = cluster.leader().clone();
    lead.client_write(put(0)).await.unwrap();
    applied_everywhere(&cluster, last_index(&lead)).await;
    let before = nodes[0].durable_writes();
    let (clients, each) = (64, 8);
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let raft = lead.clone();
            tokio::spawn(async move {
                for i in 0..each {
                    raft.client_write(put(c * each + i)).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let writes = (clients * each) as f64;
    let per_write = (nodes[0].durable_writes() - before) as f64 / writes;
    eprintln!("leader: {per_write:.3} durable writes per client write at {clients} clients");
    assert!(per_write <= 0.2, "leader: {per_write:.3} durable writes per client write");
    applied_everywhere(&cluster, last_index(&lead)).await;
    cluster.shutdown().await;
    for n in &nodes {
        n.core.close();
    }
}
