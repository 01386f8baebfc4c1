//! Raft RPC between nodes: HTTP POSTs with bincode bodies to the peer's raft address, one
//! pooled keep-alive client per peer, each call bounded by openraft's deadline.
//!
//! Snapshots travel in chunks: openraft's default `full_snapshot` splits them into
//! `install_snapshot` calls of `snapshot_max_chunk_size` bytes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use vellum_raft_store::{KvNode, TypeConfig};

use super::codec::{decode, encode};

/// Makes the per-peer clients.
#[derive(Clone, Default)]
pub struct Network {
    clients: Arc<Mutex<HashMap<u64, reqwest::Client>>>,
}

impl Network {
    fn client(&self, target: u64) -> reqwest::Client {
        let mut clients = self.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        clients
            .entry(target)
            .or_insert_with(|| {
                reqwest::Client::builder()
                    .no_proxy()
                    .pool_max_idle_per_host(4)
                    .tcp_nodelay(true)
                    .build()
                    .unwrap_or_else(|_| reqwest::Client::new())
            })
            .clone()
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: u64, node: &KvNode) -> Peer {
        Peer { target, node: node.clone(), client: self.client(target) }
    }
}

/// The connection to one peer.
pub struct Peer {
    target: u64,
    node: KvNode,
    client: reqwest::Client,
}

type RpcResult<T, E> = Result<T, RPCError<u64, KvNode, RaftError<u64, E>>>;

impl Peer {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body = encode(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let url = format!("http://{}/raft/{path}", self.node.raft_addr);
        let sent = self.client.post(url).timeout(option.hard_ttl()).body(body).send().await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        if !resp.status().is_success() {
            let e = std::io::Error::other(format!("peer answered HTTP {}", resp.status()));
            return Err(RPCError::Network(NetworkError::new(&e)));
        }
        let bytes = resp.bytes().await.map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let result: Result<Resp, RaftError<u64, E>> =
            decode(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(self.target, self.node.clone(), e))
        })
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<u64>, openraft::error::Infallible> {
        self.call("append", &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<u64>, InstallSnapshotError> {
        self.call("snapshot", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<u64>, openraft::error::Infallible> {
        self.call("vote", &rpc, &option).await
    }
}
