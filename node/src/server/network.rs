//! Raft RPC between nodes: HTTP POSTs with bincode bodies to the peer's raft address, one
//! pooled keep-alive client per peer, each call bounded by openraft's deadline.
//!
//! Snapshots travel in chunks: openraft's default `full_snapshot` splits them into
//! `install_snapshot` calls of `snapshot_max_chunk_size` bytes.
//!
//! Every call names this member and the target (`member.rs`); an answer from another
//! incarnation of the target than the peer book holds is dropped (never counted), and an
//! answer that names this node as the stale member stops it.

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
use vellum_raft_store::metrics::STAGE_DURATION;
use vellum_raft_store::{KvNode, TypeConfig};

use super::codec::{decode, encode};
use super::member::{self, Guard};

/// Bytes of entries one AppendEntries RPC carries (at least one entry). openraft 0.9 bounds
/// a payload by its number of entries only, and gives an AppendEntries one heartbeat interval
/// before it counts it as timed out and sends it again: a payload of many large entries would
/// time out every time (and starve the heartbeats into elections). A larger payload is sent
/// as a prefix instead.
const APPEND_BYTES: usize = 2 << 20;

/// An upper bound of the bytes `e` adds to an RPC body.
fn entry_bytes(e: &openraft::Entry<TypeConfig>) -> usize {
    const FIXED: usize = 64;
    match &e.payload {
        openraft::EntryPayload::Blank => FIXED,
        openraft::EntryPayload::Normal(req) => {
            FIXED
                + req
                    .ops
                    .iter()
                    .map(|op| match op {
                        vellum_raft_store::KvOp::Put { key, value } => 16 + key.len() + value.len(),
                        vellum_raft_store::KvOp::Delete { key } => 16 + key.len(),
                    })
                    .sum::<usize>()
        }
        openraft::EntryPayload::Membership(m) => {
            FIXED + m.nodes().map(|(_, n)| 32 + n.raft_addr.len() + n.api_addr.len()).sum::<usize>()
        }
    }
}

/// How many of `entries` fit `budget` bytes (at least one).
fn prefix_within(entries: &[openraft::Entry<TypeConfig>], budget: usize) -> usize {
    let mut total = 0;
    for (i, e) in entries.iter().enumerate() {
        total += entry_bytes(e);
        if total > budget && i > 0 {
            return i;
        }
    }
    entries.len()
}

/// Makes the per-peer clients.
#[derive(Clone)]
pub struct Network {
    clients: Arc<Mutex<HashMap<u64, reqwest::Client>>>,
    guard: Arc<Guard>,
}

impl Network {
    pub fn new(guard: Arc<Guard>) -> Network {
        Network { clients: Arc::default(), guard }
    }

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
        Peer {
            target,
            node: node.clone(),
            client: self.client(target),
            guard: Arc::clone(&self.guard),
        }
    }
}

/// The connection to one peer.
pub struct Peer {
    target: u64,
    node: KvNode,
    client: reqwest::Client,
    guard: Arc<Guard>,
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
        let sent = self
            .client
            .post(url)
            .timeout(option.hard_ttl())
            .header(member::FROM, self.guard.me_header())
            .header(member::TO, self.guard.to_header(self.target))
            .body(body)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        if resp.status() == reqwest::StatusCode::CONFLICT {
            return Err(self.refused(resp).await);
        }
        if !resp.status().is_success() {
            let e = std::io::Error::other(format!("peer answered HTTP {}", resp.status()));
            return Err(RPCError::Network(NetworkError::new(&e)));
        }
        // The answer counts only from the incarnation of the target this member knows (or,
        // at first contact, from the one recorded now, durably, before it is used).
        let answered = resp
            .headers()
            .get(member::MEMBER)
            .and_then(|v| v.to_str().ok())
            .and_then(member::parse_member);
        let Some((id, Some(inc))) = answered.filter(|(id, _)| *id == self.target) else {
            let e = std::io::Error::other(format!(
                "the answer of node {} does not name it as its member",
                self.target
            ));
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        };
        if let Err(refused) = self.guard.admit(id, inc).await {
            let e = std::io::Error::other(format!("dropped the answer of node {id}: {refused:?}"));
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        }
        let bytes = resp.bytes().await.map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let result: Result<Resp, RaftError<u64, E>> =
            decode(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(self.target, self.node.clone(), e))
        })
    }
}

impl Peer {
    /// A 409 answer: one of the two members lost its state. If it names this node, stop.
    async fn refused<E: std::error::Error>(
        &self,
        resp: reqwest::Response,
    ) -> RPCError<u64, KvNode, RaftError<u64, E>> {
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        let stale = body["member"].as_u64();
        let known = body["known"].as_str().and_then(|k| k.parse().ok());
        if stale == Some(self.guard.me.node_id)
            && let Some(known) = known
        {
            self.guard.stale_self(self.target, known);
        }
        let e = std::io::Error::other(format!(
            "node {} refused the RPC: member {} lost its state",
            self.target,
            stale.map_or_else(|| "?".into(), |s| s.to_string())
        ));
        RPCError::Unreachable(Unreachable::new(&e))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<u64>, openraft::error::Infallible> {
        let keep = prefix_within(&rpc.entries, APPEND_BYTES);
        if keep == rpc.entries.len() {
            // The replication round trip of a commit, timed when entries go (not heartbeats).
            let started = (!rpc.entries.is_empty()).then(std::time::Instant::now);
            let resp = self.call("append", &rpc, &option).await;
            if let Some(t) = started {
                metrics::histogram!(STAGE_DURATION, "stage" => "replication_round_trip")
                    .record(t.elapsed().as_secs_f64());
            }
            return resp;
        }
        // Send a prefix; a success of it is a partial success of the whole, and openraft
        // sends the rest right away (its documented contract for `PartialSuccess`).
        rpc.entries.truncate(keep);
        let sent = rpc.entries.last().map(|e| e.log_id);
        let resp = self.call("append", &rpc, &option).await?;
        Ok(match resp {
            AppendEntriesResponse::Success => AppendEntriesResponse::PartialSuccess(sent),
            other => other,
        })
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

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};
    use vellum_raft_store::{KvOp, KvRequest};

    use super::*;

    fn put(index: u64, len: usize) -> Entry<TypeConfig> {
        let op = KvOp::Put { key: "k".into(), value: vec![0; len] };
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(KvRequest { ops: vec![op] }),
        }
    }

    #[test]
    fn an_append_payload_is_cut_by_bytes_but_never_empty() {
        let big: Vec<_> = (1..=10).map(|i| put(i, 1_000_000)).collect();
        assert_eq!(prefix_within(&big, APPEND_BYTES), 2);
        let huge = vec![put(1, 5 << 20), put(2, 10)];
        assert_eq!(prefix_within(&huge, APPEND_BYTES), 1, "one entry goes whatever its size");
        let small: Vec<_> = (1..=300).map(|i| put(i, 256)).collect();
        assert_eq!(prefix_within(&small, APPEND_BYTES), 300);
    }
}
