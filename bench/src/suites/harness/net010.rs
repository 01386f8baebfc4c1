//! openraft 0.10 nodes in one process: the 0.10 twin of `net09.rs` (an in-memory network
//! whose RPCs are direct calls into the target's `Raft` handle, and a cluster started on the
//! stores the caller gives), on openraft `=0.10.0-alpha.37` through Vellum's `v010` adapter.
//! The network's trait is `RaftNetworkV2` (whole snapshots); appends are sent one after
//! another per follower (openraft's default `stream_append`).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use vellum_raft_store::v010::openraft::error::{
    NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable,
};
use vellum_raft_store::v010::openraft::network::{RPCOption, RaftNetworkFactory};
use vellum_raft_store::v010::openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use vellum_raft_store::v010::openraft::storage::{RaftLogStorage, RaftStateMachine};
use vellum_raft_store::v010::openraft::type_config::alias::{SnapshotOf, VoteOf};
use vellum_raft_store::v010::openraft::type_config::async_runtime::WatchReceiver;
use vellum_raft_store::v010::openraft::{
    Config, Raft, RaftNetworkV2, RaftTypeConfig, SnapshotPolicy,
};

/// Every node of the process, by id.
pub struct Router<C: RaftTypeConfig, SM: RaftStateMachine<C>> {
    rafts: Arc<RwLock<BTreeMap<u64, Raft<C, SM>>>>,
}

impl<C: RaftTypeConfig, SM: RaftStateMachine<C>> Clone for Router<C, SM> {
    fn clone(&self) -> Self {
        Router { rafts: Arc::clone(&self.rafts) }
    }
}

impl<C, SM> Router<C, SM>
where
    C: RaftTypeConfig<NodeId = u64>,
    SM: RaftStateMachine<C>,
{
    fn new() -> Self {
        Router { rafts: Arc::default() }
    }

    /// The target's handle; the lock is never held across an await.
    fn get(&self, id: u64) -> Result<Raft<C, SM>, Unreachable<C>> {
        let rafts = self.rafts.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        rafts
            .get(&id)
            .cloned()
            .ok_or_else(|| Unreachable::from_string(format!("node {id} is not in this process")))
    }
}

/// One node's connection to `target`.
pub struct Conn<C: RaftTypeConfig, SM: RaftStateMachine<C>> {
    target: u64,
    router: Router<C, SM>,
}

impl<C, SM> RaftNetworkFactory<C> for Router<C, SM>
where
    C: RaftTypeConfig<NodeId = u64>,
    SM: RaftStateMachine<C>,
{
    type Network = Conn<C, SM>;

    async fn new_client(&mut self, target: u64, _node: &C::Node) -> Conn<C, SM> {
        Conn { target, router: self.clone() }
    }
}

impl<C, SM> RaftNetworkV2<C> for Conn<C, SM>
where
    C: RaftTypeConfig<NodeId = u64>,
    SM: RaftStateMachine<C>,
{
    type SnapshotData = SM::SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<C>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<C>, RPCError<C>> {
        let raft = self.router.get(self.target)?;
        raft.append_entries(rpc).await.map_err(|e| RPCError::Network(NetworkError::new(&e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<C>,
        _option: RPCOption,
    ) -> Result<VoteResponse<C>, RPCError<C>> {
        let raft = self.router.get(self.target)?;
        raft.vote(rpc).await.map_err(|e| RPCError::Network(NetworkError::new(&e)))
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<C>,
        snapshot: SnapshotOf<C, Self::SnapshotData>,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<C>, StreamingError<C>> {
        let raft = self.router.get(self.target)?;
        raft.install_full_snapshot(vote, snapshot)
            .await
            .map_err(|e| StreamingError::Network(NetworkError::new(&e)))
    }
}

/// The same Raft configuration as the 0.9 harness: quick elections, no snapshots.
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
pub struct Cluster<C: RaftTypeConfig, SM: RaftStateMachine<C>> {
    pub rafts: Vec<Raft<C, SM>>,
    _router: Router<C, SM>,
}

impl<C, SM> Cluster<C, SM>
where
    C: RaftTypeConfig<NodeId = u64>,
    SM: RaftStateMachine<C>,
{
    /// Starts one node per `(log, state machine)`, ids from 1, and waits for node 1 to lead
    /// with a quorum's acknowledgement (0.10 refuses writes until its leader lease holds).
    pub async fn start<LS>(
        stores: Vec<(LS, SM)>,
        config: Arc<Config>,
        node: impl Fn(u64) -> C::Node,
    ) -> Result<Self, String>
    where
        LS: RaftLogStorage<C>,
    {
        let router = Router::new();
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
            .leader_with_quorum_acked(None, "node 1 leads")
            .await
            .map_err(|e| format!("waiting for a leader: {e}"))?;
        Ok(Cluster { rafts, _router: router })
    }

    /// The leader's handle (node 1).
    pub fn leader(&self) -> &Raft<C, SM> {
        &self.rafts[0]
    }

    /// The leader's last log index: entries appended so far.
    pub fn last_log_index(&self) -> u64 {
        self.leader().metrics().borrow_watched().last_log_index.unwrap_or(0)
    }

    pub async fn shutdown(self) {
        for raft in self.rafts {
            let _ = raft.shutdown().await;
        }
    }
}
