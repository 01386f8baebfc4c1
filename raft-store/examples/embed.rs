//! Embedding the Vellum store in an openraft 0.9 application: a one-node cluster whose log
//! and state machine live in a volume file, one write through Raft, one read back, then 64
//! concurrent writers through a proposal batcher.
//!
//! Run: `cargo run --release -p vellum-raft-store --features openraft-v09 --example embed`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{Config, Raft};
use vellum_raft_store::v09::{KvBatcher, KvNode, TypeConfig, open_store};
use vellum_raft_store::{BatchLimits, KvBatching, KvOp, KvRequest, LogConfig, open_volume};

/// A one-node cluster has no peers to talk to; a real application sends these RPCs over its
/// network (the KV node in `node/` does, over HTTP with bincode bodies).
#[derive(Clone)]
struct NoPeers;

#[derive(Debug)]
struct NoPeer;

impl std::fmt::Display for NoPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("this example has no peers")
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // Production knobs: preallocated, zero-filled, direct IO, write-through.
    let volume = open_volume(
        dir.path().join("node.vlm"),
        64 << 20,
        vellum_engine::VolumeOptions::default(),
    )?;
    let (log, state_machine) =
        open_store(&volume, LogConfig { segment_bytes: 8 << 20, ..LogConfig::default() })?;
    let kv = state_machine.reader();

    let config = Arc::new(
        Config {
            heartbeat_interval: 100,
            election_timeout_min: 300,
            election_timeout_max: 600,
            ..Config::default()
        }
        .validate()?,
    );
    let raft = Raft::new(1, config, NoPeers, log, state_machine).await?;
    raft.initialize(BTreeMap::from([(
        1,
        KvNode { raft_addr: "127.0.0.1:0".into(), api_addr: "127.0.0.1:0".into() },
    )]))
    .await?;
    raft.wait(Some(Duration::from_secs(10))).current_leader(1, "node 1 leads").await?;

    let before = volume.carrier_stats();
    let put = KvOp::Put { key: "hello".into(), value: b"world".to_vec() };
    let written = raft.client_write(KvRequest { ops: vec![put] }).await?;
    let ops = volume.carrier_stats() - before;
    println!(
        "committed at {} with {} carrier writes and {} flushes",
        written.log_id, ops.writes, ops.barriers
    );
    println!("hello = {:?}", kv.get("hello").map(String::from_utf8));

    // openraft 0.9 makes one entry durable at a time, one entry per `client_write`: writers
    // go through a batcher, which puts everything that arrives while one entry is in flight
    // into the next entry.
    let batcher = KvBatcher::start(raft.clone(), KvBatching, BatchLimits::default());
    let first = raft.metrics().borrow().last_log_index.unwrap_or(0);
    let writers: Vec<_> = (0..64)
        .map(|i| {
            let batcher = batcher.clone();
            let op = KvOp::Put { key: format!("key-{i}"), value: vec![b'v'; 256] };
            tokio::spawn(async move { batcher.propose(op).await })
        })
        .collect();
    let mut last = first;
    for w in writers {
        last = last.max(w.await??.log_index);
    }
    println!("64 concurrent writes committed in {} entries", last - first);

    raft.shutdown().await?;
    Ok(())
}
