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
    kv: vellum_raft_store::v010::KvReader,
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
        nodes.push(Node { carrier, core: store.core().clone(), kv: sm.reader() });
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
    // The committed ids rode on the log's writes (the commit lag is an hour, so no meta save
    // of their own): durable well into the counted entries on every node. How close to the
    // last entry depends on how the appends were grouped, so the bound is loose.
    let warm = last - writes as u64;
    for n in &nodes {
        let durable = n.core.durable_committed_index().unwrap_or(0);
        assert!(durable > warm + writes as u64 / 2, "durable committed {durable}, last {last}");
    }
    cluster.shutdown().await;
    for n in &nodes {
        n.core.close();
        assert!(n.core.durable_committed_index() >= Some(last - 1), "close saves the id");
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

/// The proposal batcher on openraft 0.10: 64 callers share entries (two in flight), every
/// write is applied on every node, and the leader's durable writes stay shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batcher_on_010_shares_entries_and_every_write_is_applied() {
    use vellum_raft_store::v010::KvBatcher;
    use vellum_raft_store::{BatchLimits, KvBatching};

    let (cluster, nodes) = cluster(Some(Duration::from_millis(2))).await;
    let lead = cluster.leader().clone();
    lead.client_write(put(0)).await.unwrap();
    applied_everywhere(&cluster, last_index(&lead)).await;
    let (first, before) = (last_index(&lead), nodes[0].durable_writes());
    let limits = BatchLimits { max_in_flight: 2, ..BatchLimits::default() };
    let batcher = KvBatcher::start(lead.clone(), KvBatching, limits);
    let (clients, each) = (64usize, 4usize);
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let batcher = batcher.clone();
            tokio::spawn(async move {
                for i in 0..each {
                    let op = KvOp::Put { key: format!("b{c}-{i}"), value: vec![c as u8; 64] };
                    batcher.propose(op).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let writes = clients * each;
    let entries = last_index(&lead) - first;
    let per_write = (nodes[0].durable_writes() - before) as f64 / writes as f64;
    eprintln!("{writes} writes in {entries} entries, {per_write:.3} leader durable writes each");
    assert!(entries < writes as u64 / 4, "{writes} writes took {entries} entries");
    assert!(per_write <= 0.2, "leader: {per_write:.3} durable writes per client write");
    applied_everywhere(&cluster, last_index(&lead)).await;
    for (k, n) in nodes.iter().enumerate() {
        for c in 0..clients {
            for i in 0..each {
                let got = n.kv.get(&format!("b{c}-{i}"));
                assert_eq!(got, Some(vec![c as u8; 64]), "node {} lacks b{c}-{i}", k + 1);
            }
        }
    }
    cluster.shutdown().await;
    for n in &nodes {
        n.core.close();
    }
}
