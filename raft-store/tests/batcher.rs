//! The proposal batcher on a real openraft 0.9 node (one member, memory volume): concurrent
//! callers share entries, everything they wrote is applied, and a node that does not lead
//! answers every caller with `NotLeader`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use common::router::Router;
use openraft::{Config, Raft};
use vellum_raft_store::types::KvNode;
use vellum_raft_store::v09::{KvBatcher, KvReader, TypeConfig, open_store};
use vellum_raft_store::{BatchLimits, KvBatching, KvOp, LogConfig, ProposeError};

/// A node on a memory volume; initialized as a one-member cluster when `lead`.
async fn node(lead: bool) -> (Raft<TypeConfig>, KvReader) {
    let (_carrier, volume) = common::memory_volume(64 << 20);
    let (log, sm) =
        open_store(&volume, LogConfig { segment_bytes: 8 << 20, ..LogConfig::default() }).unwrap();
    let kv = sm.reader();
    let config = Arc::new(
        Config {
            heartbeat_interval: 100,
            election_timeout_min: 300,
            election_timeout_max: 600,
            ..Config::default()
        }
        .validate()
        .unwrap(),
    );
    // One member: the router knows no other node to call.
    let raft = Raft::new(1, config, Router::default(), log, sm).await.unwrap();
    if lead {
        raft.initialize(BTreeMap::from([(1, KvNode::default())])).await.unwrap();
        raft.wait(Some(Duration::from_secs(10))).current_leader(1, "node 1 leads").await.unwrap();
    }
    (raft, kv)
}

fn put(i: usize) -> KvOp {
    KvOp::Put { key: format!("k{i}"), value: vec![i as u8; 32] }
}

#[tokio::test]
async fn concurrent_callers_on_a_real_node_share_entries_and_all_are_applied() {
    let (raft, kv) = node(true).await;
    let batcher = KvBatcher::start(raft.clone(), KvBatching, BatchLimits::default());
    let first = raft.metrics().borrow().last_log_index.unwrap();
    // On this single-threaded runtime the callers all queue before the batcher task runs
    // again, so they share one entry (two at most, were the batcher to run between them).
    let callers: Vec<_> = (0..64)
        .map(|i| {
            let b = batcher.clone();
            tokio::spawn(async move { b.propose(put(i)).await })
        })
        .collect();
    let mut indexes = BTreeSet::new();
    for c in callers {
        indexes.insert(c.await.unwrap().unwrap().log_index);
    }
    assert!(indexes.len() <= 2, "64 callers took entries {indexes:?}");
    let last = raft.metrics().borrow().last_log_index.unwrap();
    assert_eq!(last - first, indexes.len() as u64, "one entry per distinct index, no more");
    for i in 0..64 {
        assert_eq!(kv.get(&format!("k{i}")), Some(vec![i as u8; 32]), "k{i} applied");
    }
    raft.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_node_that_does_not_lead_answers_not_leader_to_every_caller() {
    let (raft, _kv) = node(false).await;
    let batcher = KvBatcher::start(raft.clone(), KvBatching, BatchLimits::default());
    let callers: Vec<_> = (0..8)
        .map(|i| {
            let b = batcher.clone();
            tokio::spawn(async move { b.propose(put(i)).await })
        })
        .collect();
    for c in callers {
        let r = c.await.unwrap();
        assert!(matches!(r, Err(ProposeError::NotLeader { leader_id: None, .. })), "{r:?}");
    }
    raft.shutdown().await.unwrap();
}
