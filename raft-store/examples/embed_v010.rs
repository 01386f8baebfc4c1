//! Embedding the Vellum store in an openraft 0.10 application (feature `openraft-v010`;
//! openraft `=0.10.0-alpha.37`, an alpha upstream): a one-node cluster whose log and state
//! machine live in a volume file, one write through Raft, one read back, then 64 concurrent
//! writers calling `client_write` directly: 0.10 batches them into few durable writes by
//! itself.
//!
//! Run: `cargo run --release -p vellum-raft-store --example embed_v010`

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use vellum_raft_store::v010::openraft::error::{
    RPCError, ReplicationClosed, StreamingError, Unreachable,
};
use vellum_raft_store::v010::openraft::network::{RPCOption, RaftNetworkFactory};
use vellum_raft_store::v010::openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use vellum_raft_store::v010::openraft::type_config::alias::SnapshotOf;
use vellum_raft_store::v010::openraft::{Config, Raft, RaftNetworkV2};
use vellum_raft_store::v010::{SnapshotData, TypeConfig, Vote, open_store_at};
use vellum_raft_store::{KvNode, KvOp, KvRequest, StoreConfig};

/// A one-node cluster has no peers to talk to; a real application sends these RPCs over its
/// network (the KV node in `node/` does, over HTTP with bincode bodies).
#[derive(Clone)]
struct NoPeers;

fn no_peer() -> Unreachable<TypeConfig> {
    Unreachable::from_string("this example has no peers")
}

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeers;
    async fn new_client(&mut self, _target: u64, _node: &KvNode) -> NoPeers {
        NoPeers
    }
}

impl RaftNetworkV2<TypeConfig> for NoPeers {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(no_peer().into())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(no_peer().into())
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote,
        _snapshot: SnapshotOf<TypeConfig, SnapshotData>,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        Err(no_peer().into())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // One call: the volume (created with production knobs: preallocated, zero-filled, direct
    // IO, write-through), the log store and the state machine; segments sized from the volume.
    let store =
        open_store_at(dir.path().join("node.vlm"), StoreConfig::with_volume_bytes(64 << 20))?;
    let (log, state_machine, kv, volume) = (
        store.log_store.clone(),
        store.state_machine.clone(),
        store.reader.clone(),
        store.volume.clone(),
    );

    let config = Config {
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        // Followers get entries while the leader is still writing them (a commit needs a
        // durable majority, not the leader's own write first).
        broadcast_submitted_on_append: Some(true),
        // The state machine is durable only through snapshots and the committed id is saved
        // lazily: a restarted leader must win an election before it serves again.
        enable_leader_restore: Some(false),
        ..Config::default()
    };
    let raft = Raft::new(1, Arc::new(config.validate()?), NoPeers, log, state_machine).await?;
    raft.initialize(BTreeMap::from([(
        1,
        KvNode { raft_addr: "127.0.0.1:0".into(), api_addr: "127.0.0.1:0".into() },
    )]))
    .await?;
    raft.wait(Some(Duration::from_secs(10))).leader_with_quorum_acked(None, "node 1 leads").await?;

    let before = volume.carrier_stats();
    let put = KvOp::Put { key: "hello".into(), value: b"world".to_vec() };
    let written = raft.client_write(KvRequest { ops: vec![put] }).await?;
    let ops = volume.carrier_stats() - before;
    println!(
        "committed at {} with {} carrier writes and {} flushes",
        written.log_id, ops.writes, ops.barriers
    );
    println!("hello = {:?}", kv.get("hello").map(String::from_utf8));

    // openraft 0.10 takes every client_write queued meanwhile into one submission, and the
    // log combines the appends in flight: no batcher needed.
    let before = volume.carrier_stats();
    let writers: Vec<_> = (0..64)
        .map(|i| {
            let raft = raft.clone();
            let op = KvOp::Put { key: format!("key-{i}"), value: vec![b'v'; 256] };
            tokio::spawn(async move { raft.client_write(KvRequest { ops: vec![op] }).await })
        })
        .collect();
    for w in writers {
        w.await??;
    }
    let ops = volume.carrier_stats() - before;
    println!("64 concurrent writes committed with {} durable writes", ops.durable_writes);

    // Shutdown order: client traffic has stopped; Raft, then the store (raft-store/README.md).
    raft.shutdown().await?;
    drop(store);
    Ok(())
}
