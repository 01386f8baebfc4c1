//! Raft RPC between nodes: HTTP POSTs with bincode bodies to the peer's raft address, one
//! pooled keep-alive client per peer, each call bounded by openraft's deadline. With mutual
//! TLS (`transport.rs`), a call presents this node's certificate and accepts only a peer
//! certificate that names the target member.
//!
//! openraft 0.10's `RaftNetworkV2`: `append_entries` (heartbeats too: 0.10 sends them from
//! its own heartbeat worker, through `new_heartbeat_client`), `vote`, and `full_snapshot`,
//! which sends the whole snapshot with the leader's vote and the snapshot's meta in one POST
//! (the receiver calls `install_full_snapshot`). A snapshot is bounded by
//! [`MAX_SNAPSHOT_BYTES`] and gets `install_snapshot_timeout` plus one second per MiB.
//!
//! A node of several Raft groups (`groups.rs`) has one `Network` per group, all on the same
//! pooled client per peer: every call names its group (`x-vellum-group`), and `transfer_leader`
//! carries a group's leader transfer (the balancer's, `groups.rs`).
//!
//! Every call names this member and the target (`member.rs`); an answer from another
//! incarnation of the target than the peer book holds is dropped (never counted), and an
//! answer that names this node as the stale member is a claim that this node lost its state,
//! which stops it only when one peer cannot forge it (`member.rs`).
//! Nothing is sent to a denied (`--deny-peer`) or removed id, so no answer of it counts.
//!
//! Every admitted answer says which client writes the target's volume takes
//! (`space::SPACE_HEADER`): this node refuses what the target refuses (`space.rs`). A 507
//! answer (a snapshot or an append the target has no room for) is `Unreachable`, so that
//! openraft backs off before it sends it again.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use vellum_raft_store::metrics::STAGE_DURATION;
use vellum_raft_store::v010::openraft::errors::{
    Fatal, NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable,
};
use vellum_raft_store::v010::openraft::network::{RPCOption, RaftNetworkFactory};
use vellum_raft_store::v010::openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use vellum_raft_store::v010::openraft::type_config::alias::{SnapshotOf, VoteOf};
use vellum_raft_store::v010::openraft::{EntryPayload, OptionalSend, RaftNetworkV2};
use vellum_raft_store::v010::{Entry, KvNode, KvOp, SnapshotData, TypeConfig};

use super::codec::{APPEND_BYTES, MAX_SNAPSHOT_BYTES};
use super::codec::{decode, encode};
use super::member::{self, Guard};
use super::space::{SPACE_HEADER, Space};
use super::transport::PeerClients;

/// An upper bound of the bytes `e` adds to an RPC body.
fn entry_bytes(e: &Entry) -> usize {
    const FIXED: usize = 64;
    match &e.payload {
        EntryPayload::Blank => FIXED,
        EntryPayload::Normal(req) => {
            FIXED
                + req
                    .ops
                    .iter()
                    .map(|op| match op {
                        KvOp::Put { key, value } => 16 + key.len() + value.len(),
                        KvOp::Delete { key } => 16 + key.len(),
                    })
                    .sum::<usize>()
        }
        EntryPayload::Membership(m) => {
            FIXED + m.nodes().map(|(_, n)| 32 + n.raft_addr.len() + n.api_addr.len()).sum::<usize>()
        }
    }
}

/// How many of `entries` fit `budget` bytes (at least one).
fn prefix_within(entries: &[Entry], budget: usize) -> usize {
    let mut total = 0;
    for (i, e) in entries.iter().enumerate() {
        total += entry_bytes(e);
        if total > budget && i > 0 {
            return i;
        }
    }
    entries.len()
}

/// The deadline of sending a snapshot of `bytes`: openraft's `install_snapshot_timeout` (the
/// RPC's `hard_ttl`), plus one second per MiB, so that a large snapshot on a slow link is not
/// resent forever (openraft 0.9 gave each 1 MiB chunk the whole timeout).
fn snapshot_deadline(hard_ttl: Duration, bytes: usize) -> Duration {
    hard_ttl + Duration::from_secs((bytes as u64).div_ceil(1 << 20))
}

/// Makes the per-peer clients.
#[derive(Clone)]
pub struct Network {
    peers: PeerClients,
    guard: Arc<Guard>,
    space: Arc<Space>,
    /// `x-vellum-group`: this network's group and the node's group count.
    group: Arc<str>,
}

impl Network {
    /// The network of Raft group `group` of a node of `groups` groups; what peers say of
    /// their volumes goes to `space`.
    pub fn new(
        guard: Arc<Guard>,
        peers: PeerClients,
        space: Arc<Space>,
        group: u64,
        groups: u64,
    ) -> Network {
        let group = super::groups::header_value(group, groups).into();
        Network { peers, guard, space, group }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: u64, node: &KvNode) -> Peer {
        Peer {
            target,
            client: self.peers.client(target, &node.raft_addr),
            guard: Arc::clone(&self.guard),
            space: Arc::clone(&self.space),
            group: Arc::clone(&self.group),
        }
    }
}

/// The connection to one peer: a pooled client and the base URL of its Raft port, or why
/// there is none (an address that cannot be called with TLS).
pub struct Peer {
    target: u64,
    client: Result<(reqwest::Client, String), String>,
    guard: Arc<Guard>,
    space: Arc<Space>,
    group: Arc<str>,
}

type Rpc<T> = Result<T, RPCError<TypeConfig>>;

fn network_error(e: &(impl std::error::Error + 'static)) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::new(e))
}

fn unreachable(why: String) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::from_string(why))
}

impl Peer {
    /// POSTs `req` to the target's `/raft/{path}` and decodes its answer, a bincode
    /// `Result<Resp, E>`. The remote error `E` (openraft's `RaftError` or `Fatal`: the target's
    /// Raft stopped) cannot travel as an `RPCError::RemoteError` in 0.10's network API: it
    /// becomes `Unreachable`, so that openraft backs off that target.
    async fn call<Req, Resp, E>(&self, path: &str, req: &Req, timeout: Duration) -> Rpc<Resp>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body = encode(req).map_err(|e| network_error(&e))?;
        self.post::<Resp, E>(path, body, timeout).await
    }

    async fn post<Resp, E>(&self, path: &str, body: Vec<u8>, timeout: Duration) -> Rpc<Resp>
    where
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let (client, base) = self.client.as_ref().map_err(|why| unreachable(why.clone()))?;
        if self.guard.shuns(self.target) {
            return Err(unreachable(format!(
                "node {} is denied (--deny-peer) or removed: nothing is sent to it, and no \
                 answer of it counts",
                self.target
            )));
        }
        let sent = client
            .post(format!("{base}/raft/{path}"))
            .timeout(timeout)
            .header(member::FROM, self.guard.me_header())
            .header(member::TO, self.guard.to_header(self.target))
            .header(super::groups::GROUP_HEADER, &*self.group)
            .body(body)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(e) => return Err(network_error(&e)),
        };
        if resp.status() == reqwest::StatusCode::CONFLICT {
            return Err(self.refused(resp).await);
        }
        if resp.status() == reqwest::StatusCode::INSUFFICIENT_STORAGE {
            let body = resp.text().await.unwrap_or_default();
            return Err(unreachable(format!(
                "node {} has no room for it on its volume: {body}",
                self.target
            )));
        }
        if !resp.status().is_success() {
            let e = std::io::Error::other(format!("peer answered HTTP {}", resp.status()));
            return Err(network_error(&e));
        }
        // The answer counts only from the incarnation of the target this member knows (or,
        // at first contact, from the one recorded now, durably, before it is used).
        let answered = resp
            .headers()
            .get(member::MEMBER)
            .and_then(|v| v.to_str().ok())
            .and_then(member::parse_member);
        let Some((id, Some(inc))) = answered.filter(|(id, _)| *id == self.target) else {
            return Err(unreachable(format!(
                "the answer of node {} does not name it as its member",
                self.target
            )));
        };
        if let Err(refused) = self.guard.admit(id, inc).await {
            return Err(unreachable(format!("dropped the answer of node {id}: {refused:?}")));
        }
        if let Some(word) = resp.headers().get(SPACE_HEADER).and_then(|v| v.to_str().ok()) {
            self.space.heard(id, word);
        }
        let bytes = resp.bytes().await.map_err(|e| network_error(&e))?;
        let result: Result<Resp, E> = decode(&bytes).map_err(|e| network_error(&e))?;
        result.map_err(|e| unreachable(format!("node {} answered with an error: {e}", self.target)))
    }

    /// A 409 answer: one of the two members lost its state. If it names this node, and it
    /// comes from the incarnation of the target this node knows, it is the target's claim
    /// that this node lost its state: believed only as `Guard::stale_claim` says (a
    /// majority of voters, or a store with no raft state), never on one peer's word.
    async fn refused(&self, resp: reqwest::Response) -> RPCError<TypeConfig> {
        let answered = resp
            .headers()
            .get(member::MEMBER)
            .and_then(|v| v.to_str().ok())
            .and_then(member::parse_member);
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        let stale = body["member"].as_u64();
        let known = body["known"].as_str().and_then(|k| k.parse().ok());
        if stale == Some(self.guard.me.node_id)
            && let Some(known) = known
            && let Some((id, Some(inc))) = answered.filter(|(id, _)| *id == self.target)
            && self.guard.admit(id, inc).await.is_ok()
        {
            self.guard.stale_claim(self.target, known);
        }
        unreachable(format!(
            "node {} refused the RPC: member {} lost its state",
            self.target,
            stale.map_or_else(|| "?".into(), |s| s.to_string())
        ))
    }
}

impl RaftNetworkV2<TypeConfig> for Peer {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<TypeConfig>> {
        type E = RaftError<TypeConfig>;
        let keep = prefix_within(&rpc.entries, APPEND_BYTES);
        if keep == rpc.entries.len() {
            // The replication round trip of a commit, timed when entries go (not heartbeats).
            let started = (!rpc.entries.is_empty()).then(std::time::Instant::now);
            let resp = self.call::<_, _, E>("append", &rpc, option.hard_ttl()).await;
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
        let resp = self.call::<_, _, E>("append", &rpc, option.hard_ttl()).await?;
        Ok(match resp {
            AppendEntriesResponse::Success => AppendEntriesResponse::PartialSuccess(sent),
            other => other,
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<VoteResponse<TypeConfig>> {
        self.call::<_, _, RaftError<TypeConfig>>("vote", &rpc, option.hard_ttl()).await
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<TransferLeaderResponse<TypeConfig>> {
        self.call::<_, _, Fatal<TypeConfig>>("transfer", &req, option.hard_ttl()).await
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, SnapshotData>,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let data = snapshot.snapshot.into_inner();
        let len = data.len();
        let body = (vote, snapshot.meta, data);
        let body = encode(&body).map_err(|e| StreamingError::from(network_error(&e)))?;
        if body.len() > MAX_SNAPSHOT_BYTES {
            // The target would refuse it (413) every time: say why, and back off.
            let why = format!(
                "the snapshot for node {} is {} bytes, more than the {MAX_SNAPSHOT_BYTES} one \
                 snapshot RPC may carry: node {} cannot catch up by snapshot",
                self.target,
                body.len(),
                self.target
            );
            tracing::error!("{why}");
            return Err(unreachable(why).into());
        }
        let deadline = snapshot_deadline(option.hard_ttl(), len);
        let started = std::time::Instant::now();
        let sent = tokio::select! {
            closed = cancel => return Err(StreamingError::Closed(closed)),
            r = self.post::<SnapshotResponse<TypeConfig>, Fatal<TypeConfig>>("snapshot", body, deadline) => r,
        };
        tracing::info!(
            target = self.target,
            bytes = len,
            ms = started.elapsed().as_millis() as u64,
            ok = sent.is_ok(),
            "sent a snapshot"
        );
        Ok(sent?)
    }
}

#[cfg(test)]
mod tests {
    use vellum_raft_store::v010::openraft::impls::leader_id_adv::LeaderId;
    use vellum_raft_store::v010::{KvRequest, LogId};

    use super::*;

    fn put(index: u64, len: usize) -> Entry {
        let op = KvOp::Put { key: "k".into(), value: vec![0; len] };
        Entry {
            log_id: LogId::new(LeaderId { term: 1, node_id: 1 }, index),
            payload: EntryPayload::Normal(KvRequest { ops: vec![op] }),
        }
    }

    #[test]
    fn a_forged_length_in_an_append_is_refused_without_allocating_it() {
        use vellum_raft_store::v010::Vote;
        let key = "KEY-OF-A-FORGED-APPEND";
        let mut entry = put(1, 8);
        if let EntryPayload::Normal(req) = &mut entry.payload {
            req.ops = vec![KvOp::Put { key: key.into(), value: vec![1; 8] }];
        }
        let rpc = AppendEntriesRequest::<TypeConfig> {
            vote: Vote::new_committed(1, 1),
            prev_log_id: None,
            leader_commit: None,
            entries: vec![entry],
        };
        let bytes = encode(&rpc).unwrap_or_default();
        let back: Result<AppendEntriesRequest<TypeConfig>, _> = decode(&bytes);
        assert!(back.is_ok_and(|b| b.entries.len() == 1), "the honest body decodes");
        // The key's length byte (22) becomes a varint claiming 2^62 bytes.
        let at = bytes.windows(key.len()).position(|w| w == key.as_bytes()).unwrap_or(0);
        assert_eq!(bytes[at - 1] as usize, key.len());
        let mut forged = bytes[..at - 1].to_vec();
        forged.push(253);
        forged.extend_from_slice(&(1u64 << 62).to_le_bytes());
        forged.extend_from_slice(&bytes[at..]);
        let refused = decode::<AppendEntriesRequest<TypeConfig>>(&forged);
        assert!(matches!(refused, Err(bincode::error::DecodeError::LimitExceeded)), "{refused:?}");
    }

    #[test]
    fn every_honest_append_decodes_whatever_its_size() {
        // Batches of 256 B writes cross the decode limit's power-of-two classes: each must
        // decode (a limit of the body's own size refused some near 4, 8, 16 KiB).
        use vellum_raft_store::v010::Vote;
        for ops in 1..=300 {
            let mut entry = put(1, 8);
            if let EntryPayload::Normal(req) = &mut entry.payload {
                req.ops = (0..ops)
                    .map(|i| KvOp::Put { key: format!("c64-{i}-{ops}"), value: vec![9; 256] })
                    .collect();
            }
            let rpc = AppendEntriesRequest::<TypeConfig> {
                vote: Vote::new_committed(3, 2),
                prev_log_id: Some(entry.log_id),
                leader_commit: Some(entry.log_id),
                entries: vec![entry.clone(), entry],
            };
            let bytes = encode(&rpc).unwrap_or_default();
            let back = decode::<AppendEntriesRequest<TypeConfig>>(&bytes);
            assert!(back.is_ok(), "{ops} ops, {} bytes: {back:?}", bytes.len());
        }
    }

    #[test]
    fn a_snapshot_gets_a_second_per_mib_over_the_timeout() {
        let ttl = Duration::from_secs(10);
        assert_eq!(snapshot_deadline(ttl, 0), ttl);
        assert_eq!(snapshot_deadline(ttl, 1), ttl + Duration::from_secs(1));
        assert_eq!(snapshot_deadline(ttl, 64 << 20), ttl + Duration::from_secs(64));
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
