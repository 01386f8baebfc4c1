//! The commit path, counted: three openraft nodes in one process (function-call network) on
//! counting carriers, one client writing one entry at a time. Each committed entry must cost
//! one durable write on the leader and one on each follower: the committed id rides on the
//! next log write instead of a write of its own (`LogCore::save_committed`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{Config, Raft};
use vellum_engine::carrier::{Carrier, FaultyCarrier};
use vellum_engine::{FormatOptions, Volume, VolumeOptions};
use vellum_raft_store::{KvNode, KvOp, KvRequest, LogConfig, LogCore, TypeConfig, open_store};

type Rpc<T, E = openraft::error::Infallible> = Result<T, RPCError<u64, KvNode, RaftError<u64, E>>>;

/// The nodes of the in-process cluster, by id.
#[derive(Clone, Default)]
struct Router(Arc<Mutex<HashMap<u64, Raft<TypeConfig>>>>);

struct Conn {
    router: Router,
    target: u64,
}

impl Conn {
    // openraft's `RPCError` is the trait's error type, not ours to box.
    #[allow(clippy::result_large_err)]
    fn raft<E: std::error::Error>(&self) -> Result<Raft<TypeConfig>, RPCError<u64, KvNode, E>> {
        let nodes = self.router.0.lock().unwrap();
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

struct Node {
    raft: Raft<TypeConfig>,
    carrier: Arc<FaultyCarrier>,
    core: LogCore,
}

impl Node {
    fn durable_writes(&self) -> u64 {
        let s = self.carrier.stats().snapshot();
        s.durable_writes + s.barriers
    }
}

async fn cluster() -> Vec<Node> {
    let router = Router::default();
    let config = Arc::new(
        Config {
            heartbeat_interval: 50,
            election_timeout_min: 300,
            election_timeout_max: 600,
            ..Config::default()
        }
        .validate()
        .unwrap(),
    );
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let carrier = Arc::new(FaultyCarrier::new(64 << 20, true));
        let volume = Volume::format(
            Box::new(Arc::clone(&carrier)),
            &FormatOptions::default(),
            VolumeOptions::default(),
        )
        .unwrap();
        // A long commit lag: no idle meta save falls into the counted window, whatever the
        // timing (a count, not a timing, decides this test).
        let log = LogConfig {
            segment_bytes: 4 << 20,
            commit_lag: Duration::from_secs(3600),
            ..LogConfig::default()
        };
        let (store, sm) = open_store(&volume, log).unwrap();
        let core = store.core().clone();
        let raft = Raft::new(id, Arc::clone(&config), router.clone(), store, sm).await.unwrap();
        router.0.lock().unwrap().insert(id, raft.clone());
        nodes.push(Node { raft, carrier, core });
    }
    let members: BTreeMap<u64, KvNode> = (1..=3).map(|id| (id, KvNode::default())).collect();
    nodes[0].raft.initialize(members).await.unwrap();
    nodes
}

fn put(i: usize) -> KvRequest {
    KvRequest { ops: vec![KvOp::Put { key: format!("k{i}"), value: vec![7; 256] }] }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_costs_one_durable_write_per_entry_on_leader_and_followers() {
    let nodes = cluster().await;
    let leader = nodes[0]
        .raft
        .wait(Some(Duration::from_secs(20)))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .unwrap()
        .current_leader
        .unwrap();
    let lead = &nodes[leader as usize - 1];
    for i in 0..5 {
        lead.raft.client_write(put(i)).await.unwrap();
    }
    // Let the followers catch up with the warm-up before counting.
    let warm = lead.raft.metrics().borrow().last_log_index.unwrap();
    for n in &nodes {
        n.raft.wait(Some(Duration::from_secs(10))).applied_index(Some(warm), "warm").await.unwrap();
    }
    let before: Vec<u64> = nodes.iter().map(Node::durable_writes).collect();
    let writes = 200;
    for i in 0..writes {
        lead.raft.client_write(put(i)).await.unwrap();
    }
    let last = lead.raft.metrics().borrow().last_log_index.unwrap();
    for n in &nodes {
        n.raft
            .wait(Some(Duration::from_secs(10)))
            .applied_index(Some(last), "replicated")
            .await
            .unwrap();
    }
    for (n, b) in nodes.iter().zip(&before) {
        let per_entry = (n.durable_writes() - b) as f64 / writes as f64;
        let role = if n.raft.metrics().borrow().id == leader { "leader" } else { "follower" };
        eprintln!("{role}: {per_entry:.3} durable writes per committed entry");
        // At most one write per entry: the leader appends each entry alone (openraft 0.9,
        // one client); a follower that fell behind gets several entries in one append.
        let low = if role == "leader" { 0.95 } else { 0.01 };
        assert!(
            (low..=1.05).contains(&per_entry),
            "{role}: {per_entry:.3} durable writes per committed entry (want at most 1)"
        );
    }
    // The committed ids rode along: durable up to the last few entries, without a write of
    // their own.
    for n in &nodes {
        let durable = n.core.durable_committed_index().unwrap_or(0);
        assert!(durable + 3 >= last, "durable committed {durable}, last entry {last}");
    }
    for n in &nodes {
        n.raft.shutdown().await.unwrap();
        n.core.close();
        assert!(n.core.durable_committed_index() >= Some(last - 1), "close saves the id");
    }
}
