//! openraft 0.9 nodes in one process: an in-memory network whose RPCs are direct calls into
//! the target's `Raft` handle, and a cluster started on whatever stores the caller gives.
//! Generic over the type configuration, so openraft-memstore's and Vellum's run the same
//! code (this file is also compiled into `bench/harness-memstore`).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{Config, Raft, RaftTypeConfig, ServerState, SnapshotPolicy};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite};

/// Every node of the process, by id.
pub struct Router<C: RaftTypeConfig> {
    rafts: Arc<RwLock<BTreeMap<u64, Raft<C>>>>,
}

impl<C: RaftTypeConfig> Clone for Router<C> {
    fn clone(&self) -> Self {
        Router { rafts: Arc::clone(&self.rafts) }
    }
}

#[derive(Debug)]
struct Gone(u64);

impl std::fmt::Display for Gone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "node {} is not in this process", self.0)
    }
}

impl std::error::Error for Gone {}

impl<C: RaftTypeConfig<NodeId = u64>> Router<C> {
    fn new() -> Self {
        Router { rafts: Arc::default() }
    }

    /// The target's handle; the lock is never held across an await.
    fn get(&self, id: u64) -> Result<Raft<C>, Unreachable> {
        let rafts = self.rafts.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        rafts.get(&id).cloned().ok_or_else(|| Unreachable::new(&Gone(id)))
    }
}

/// One node's connection to `target`.
pub struct Conn<C: RaftTypeConfig> {
    target: u64,
    router: Router<C>,
}

impl<C> RaftNetworkFactory<C> for Router<C>
where
    C: RaftTypeConfig<NodeId = u64>,
    C::SnapshotData: AsyncRead + AsyncWrite + AsyncSeek + Unpin,
{
    type Network = Conn<C>;

    async fn new_client(&mut self, target: u64, _node: &C::Node) -> Conn<C> {
        Conn { target, router: self.clone() }
    }
}

impl<C> RaftNetwork<C> for Conn<C>
where
    C: RaftTypeConfig<NodeId = u64>,
    C::SnapshotData: AsyncRead + AsyncWrite + AsyncSeek + Unpin,
{
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<C>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, C::Node, RaftError<u64>>> {
        let raft = self.router.get(self.target)?;
        let target = self.target;
        raft.append_entries(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<C>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, C::Node, RaftError<u64, InstallSnapshotError>>,
    > {
        let raft = self.router.get(self.target)?;
        let target = self.target;
        raft.install_snapshot(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, C::Node, RaftError<u64>>> {
        let raft = self.router.get(self.target)?;
        let target = self.target;
        raft.vote(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }
}

/// The same Raft configuration for every store: quick elections (the network is a function
/// call) and no snapshots, so that the log path alone is measured.
pub fn config() -> Result<Arc<Config>, String> {
    let config = Config {
        cluster_name: "harness".into(),
        heartbeat_interval: 50,
        election_timeout_min: 300,
        election_timeout_max: 600,
        snapshot_policy: SnapshotPolicy::Never,
        ..Config::default()
    };
    config.validate().map(Arc::new).map_err(|e| format!("raft config: {e}"))
}

/// Nodes 1..=n on `stores`, node 1 initialized as the leader of all of them.
pub struct Cluster<C: RaftTypeConfig> {
    pub rafts: Vec<Raft<C>>,
    _router: Router<C>,
}

impl<C> Cluster<C>
where
    C: RaftTypeConfig<NodeId = u64>,
    C::SnapshotData: AsyncRead + AsyncWrite + AsyncSeek + Unpin,
{
    /// Starts one node per `(log, state machine)`, ids from 1, and waits for node 1 to lead.
    pub async fn start<LS, SM>(
        stores: Vec<(LS, SM)>,
        node: impl Fn(u64) -> C::Node,
    ) -> Result<Self, String>
    where
        LS: RaftLogStorage<C>,
        SM: RaftStateMachine<C>,
    {
        let router = Router::new();
        let config = config()?;
        let mut rafts = Vec::new();
        for (id, (log, sm)) in (1u64..).zip(stores) {
            let raft = Raft::new(id, Arc::clone(&config), router.clone(), log, sm)
                .await
                .map_err(|e| format!("starting node {id}: {e}"))?;
            router
                .rafts
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(id, raft.clone());
            rafts.push(raft);
        }
        let members: BTreeMap<u64, C::Node> =
            (1..=rafts.len() as u64).map(|id| (id, node(id))).collect();
        rafts[0].initialize(members).await.map_err(|e| format!("initialize: {e}"))?;
        rafts[0]
            .wait(Some(Duration::from_secs(10)))
            .state(ServerState::Leader, "node 1 leads")
            .await
            .map_err(|e| format!("waiting for a leader: {e}"))?;
        Ok(Cluster { rafts, _router: router })
    }

    /// The leader's handle (node 1).
    pub fn leader(&self) -> &Raft<C> {
        &self.rafts[0]
    }

    /// The leader's last log index: entries appended so far.
    pub fn last_log_index(&self) -> u64 {
        self.leader().metrics().borrow().last_log_index.unwrap_or(0)
    }

    pub async fn shutdown(self) {
        for raft in self.rafts {
            let _ = raft.shutdown().await;
        }
    }
}
