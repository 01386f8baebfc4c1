//! An in-process openraft network: RPCs are direct calls into the target's `Raft`, found in
//! a shared map by node id (a node not in the map is unreachable).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use openraft::Raft;
use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use vellum_raft_store::KvNode;
use vellum_raft_store::v09::TypeConfig;

type Rpc<T, E = openraft::error::Infallible> = Result<T, RPCError<u64, KvNode, RaftError<u64, E>>>;

/// The nodes of the in-process cluster, by id.
#[derive(Clone, Default)]
pub struct Router(Arc<Mutex<HashMap<u64, Raft<TypeConfig>>>>);

pub struct Conn {
    router: Router,
    target: u64,
}

impl Conn {
    // openraft's `RPCError` is the trait's error type, not ours to box.
    #[allow(clippy::result_large_err)]
    fn raft<E: std::error::Error>(&self) -> Result<Raft<TypeConfig>, RPCError<u64, KvNode, E>> {
        let nodes = self.router.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        nodes.get(&self.target).cloned().ok_or_else(|| {
            RPCError::Unreachable(Unreachable::new(&std::io::Error::other("no such node")))
        })
    }
}

impl RaftNetworkFactory<TypeConfig> for Router {
    type Network = Conn;
    async fn new_client(&mut self, target: u64, _node: &KvNode) -> Conn {
        Conn { router: self.clone(), target }
    }
}

impl RaftNetwork<TypeConfig> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<u64>> {
        let raft = self.raft()?;
        raft.append_entries(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<u64>, InstallSnapshotError> {
        let raft = self.raft()?;
        raft.install_snapshot(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(&mut self, rpc: VoteRequest<u64>, _option: RPCOption) -> Rpc<VoteResponse<u64>> {
        let raft = self.raft()?;
        raft.vote(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl Router {
    /// Makes `raft` reachable as node `id`.
    pub fn add(&self, id: u64, raft: Raft<TypeConfig>) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, raft);
    }
}
