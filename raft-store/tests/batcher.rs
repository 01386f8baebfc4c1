//! The proposal batcher on a real openraft 0.9 node (one member, memory volume): concurrent
//! callers share entries, everything they wrote is applied, and a node that does not lead
//! answers every caller with `NotLeader`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{Config, Raft};
use vellum_raft_store::types::KvNode;
use vellum_raft_store::{
    BatchLimits, KvBatcher, KvBatching, KvOp, KvReader, LogConfig, ProposeError, TypeConfig,
    open_store,
};

/// One member: there is nobody to call.
#[derive(Clone)]
struct NoPeers;

#[derive(Debug)]
struct NoPeer;

impl std::fmt::Display for NoPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a one-member cluster has no peers")
    }
}

impl std::error::Error for NoPeer {}

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeers;
    async fn new_client(&mut self, _target: u64, _node: &KvNode) -> NoPeers {
        NoPeers
    }
}

impl RaftNetwork<TypeConfig> for NoPeers {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, KvNode, RaftError<u64>>> {
        Err(RPCError::Unreachable(Unreachable::new(&NoPeer)))
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, KvNode, RaftError<u64, InstallSnapshotError>>,
    > {
        Err(RPCError::Unreachable(Unreachable::new(&NoPeer)))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, KvNode, RaftError<u64>>> {
        Err(RPCError::Unreachable(Unreachable::new(&NoPeer)))
    }
}

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
    let raft = Raft::new(1, config, NoPeers, log, sm).await.unwrap();
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
