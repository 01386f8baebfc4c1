//! The Raft RPC endpoint: `POST /raft/{append,vote,snapshot}` with bincode bodies; the reply
//! body is the bincode of openraft's `Result`. A snapshot comes whole, with the leader's vote
//! and the snapshot's meta, in one POST, and goes to openraft 0.10's `install_full_snapshot`
//! (bodies up to [`MAX_SNAPSHOT_BYTES`]). Every request must name its sender and target
//! members and every answer names this one (`member.rs`); `GET /raft/member/{id}` tells what
//! this member knows of node `id` and `GET /raft/members` its current members (the start-up
//! check of a node on a fresh volume).

use std::io::Cursor;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use vellum_raft_store::metrics::STAGE_DURATION;
use vellum_raft_store::v010::TypeConfig;
use vellum_raft_store::v010::openraft::Snapshot;
use vellum_raft_store::v010::openraft::async_runtime::WatchReceiver;
use vellum_raft_store::v010::openraft::raft::{AppendEntriesRequest, VoteRequest};
use vellum_raft_store::v010::openraft::type_config::alias::{SnapshotMetaOf, VoteOf};

use super::KvRaft;
use super::codec::{decode, encode};
use super::member::{self, Guard, Knowledge, Refused};
use super::transport::{PeerAddr, PeerCert};
use crate::tls;
use vellum_raft_store::member::PeerBook;

/// Largest append or vote RPC body.
pub const MAX_RPC_BYTES: usize = 256 << 20;
/// Largest snapshot RPC body: the whole snapshot travels in one POST (openraft 0.10 leaves
/// chunking to the application), and both ends hold it in memory, as they hold the state
/// machine. A follower behind a larger snapshot cannot catch up (the leader says so in its
/// log).
pub const MAX_SNAPSHOT_BYTES: usize = 1 << 30;

/// A whole snapshot on the wire: the leader's vote, the snapshot's meta, its bytes.
type SnapshotRpc = (VoteOf<TypeConfig>, SnapshotMetaOf<TypeConfig>, Vec<u8>);

/// The Raft side of a started node.
pub struct RpcState {
    raft: KvRaft,
    guard: Arc<Guard>,
}

/// What the Raft port can answer with, filled in as the node starts: the listener is bound
/// first, so that members starting together can answer each other's start-up questions
/// (`GET /raft/member/{id}`) while they wait for one another. Raft RPCs get 503 until Raft
/// runs.
pub struct Slot {
    /// The port is mutual TLS: every RPC's claimed sender must be the member its connection's
    /// certificate names.
    mtls: bool,
    known: std::sync::RwLock<Option<Known>>,
    ready: std::sync::OnceLock<RpcState>,
}

/// Where this node's knowledge of its peers comes from before Raft runs.
pub enum Known {
    /// No store yet (a carrier that does not exist): this node has known nobody.
    Nobody,
    /// The store's peer book.
    Book(Arc<PeerBook>),
}

impl Slot {
    pub fn new(mtls: bool) -> Slot {
        Slot { mtls, known: std::sync::RwLock::default(), ready: std::sync::OnceLock::new() }
    }

    /// Answers start-up questions from `known` from now on.
    pub fn know(&self, known: Known) {
        *self.known.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(known);
    }

    /// Serves Raft RPCs from now on.
    pub fn ready(&self, raft: KvRaft, guard: Arc<Guard>) {
        let _ = self.ready.set(RpcState { raft, guard });
    }
}

pub fn router(slot: Arc<Slot>) -> Router {
    let snapshots = Router::new()
        .route("/raft/snapshot", post(snapshot))
        .layer(DefaultBodyLimit::max(MAX_SNAPSHOT_BYTES));
    Router::new()
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route("/raft/member/{id}", get(knowledge))
        .route("/raft/members", get(members))
        .layer(DefaultBodyLimit::max(MAX_RPC_BYTES))
        .merge(snapshots)
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&slot), authenticate))
        .with_state(slot)
}

/// With mutual TLS, before anything else (before a body is read): the connection's
/// certificate must name a member (`node-N.vellum`: the CA's client certificates, which name
/// none, get nothing here), and an RPC's must name the member it says it comes from
/// (`x-vellum-from`), or a member could speak for another.
async fn authenticate(
    State(slot): State<Arc<Slot>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !slot.mtls {
        return next.run(req).await;
    }
    let named = req
        .extensions()
        .get::<PeerCert>()
        .and_then(|c| c.0.as_ref())
        .map(tls::named_nodes)
        .unwrap_or_default();
    let from = member::member_header(req.headers(), member::FROM).map(|(id, _)| id);
    let allowed = match (req.method() == axum::http::Method::POST, from) {
        // An RPC: the certificate names its sender.
        (true, Some(from)) => named.contains(&from),
        (true, None) => false,
        // A start-up question: any member may ask.
        (false, _) => !named.is_empty(),
    };
    if allowed {
        return next.run(req).await;
    }
    let peer =
        req.extensions().get::<PeerAddr>().map_or_else(|| "unknown".into(), |a| a.0.to_string());
    tracing::warn!(
        peer = %peer,
        claimed = ?from,
        path = %req.uri().path(),
        "refused a Raft request: its certificate does not name the member it says it comes from"
    );
    refuse(
        StatusCode::FORBIDDEN,
        &json!({
            "error": "identity_mismatch",
            "from": from,
            "reason": "the client certificate does not name the member the request says it comes from",
        }),
    )
}

fn not_ready() -> Response {
    refuse(StatusCode::SERVICE_UNAVAILABLE, &json!({ "error": "not_ready" }))
}

fn reply<T: Serialize>(value: &T) -> Response {
    match encode(value) {
        Ok(bytes) => (StatusCode::OK, bytes).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn refuse(status: StatusCode, body: &serde_json::Value) -> Response {
    (status, Json(body)).into_response()
}

/// A refusal naming `stale` as the member that lost its state.
pub fn stale_member(
    stale: u64,
    known: member::Incarnation,
    presented: member::Incarnation,
) -> Response {
    refuse(
        StatusCode::CONFLICT,
        &json!({
            "error": "stale_member",
            "member": stale,
            "known": known.to_string(),
            "presented": presented.to_string(),
        }),
    )
}

/// The sender a Raft request names in its body (the candidate or leader of its vote).
trait Sender {
    fn sender(&self) -> Option<u64>;
}

impl Sender for AppendEntriesRequest<TypeConfig> {
    fn sender(&self) -> Option<u64> {
        Some(self.vote.leader_id().node_id)
    }
}

impl Sender for VoteRequest<TypeConfig> {
    fn sender(&self) -> Option<u64> {
        Some(self.vote.leader_id().node_id)
    }
}

impl Sender for SnapshotRpc {
    fn sender(&self) -> Option<u64> {
        Some(self.0.leader_id().node_id)
    }
}

/// The identity checks of one request whose body names `sender` (see `member.rs`); `Err`
/// is the refusal to send. The sender is admitted (checked, or recorded durably at first
/// contact) before anything it says is used.
async fn check(s: &RpcState, headers: &HeaderMap, sender: Option<u64>) -> Result<(), Response> {
    let guard = &s.guard;
    let (Some((from, Some(from_inc))), Some((to, to_inc))) =
        (member::member_header(headers, member::FROM), member::member_header(headers, member::TO))
    else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            &json!({ "error": "missing_member", "reason": "a Raft RPC must name its sender and target members" }),
        ));
    };
    if sender != Some(from) {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            &json!({ "error": "sender_mismatch", "from": from, "body_sender": sender }),
        ));
    }
    let me = guard.me;
    if to != me.node_id {
        return Err(refuse(
            StatusCode::MISDIRECTED_REQUEST,
            &json!({ "error": "misdirected", "this_node": me.node_id, "to": to }),
        ));
    }
    match guard.admit(from, from_inc).await {
        Ok(()) => {}
        Err(Refused::StalePeer { peer, known, presented }) => {
            tracing::warn!(peer, %known, %presented, "refused a Raft RPC from a member that lost its state");
            return Err(stale_member(peer, known, presented));
        }
        Err(Refused::Store(why)) => {
            return Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({ "error": "peer_book", "reason": why }),
            ));
        }
    }
    if let Some(known) = to_inc
        && known != me.incarnation
    {
        // The sender knows another incarnation of this node: this one lost its state. Only
        // a member of this node's configuration is believed enough to stop it.
        let is_member = s
            .raft
            .metrics()
            .borrow_watched()
            .membership_config
            .membership()
            .get_node(&from)
            .is_some();
        if is_member {
            guard.stale_self(from, known);
        }
        return Err(stale_member(me.node_id, known, me.incarnation));
    }
    Ok(())
}

/// Decodes the body, checks the members, runs `call`, answers; every answer names this
/// member (the sender was authenticated by [`authenticate`] before the body was read).
async fn handle<Req, Resp, F, Fut>(
    slot: &Slot,
    headers: &HeaderMap,
    body: &[u8],
    call: F,
) -> Response
where
    Req: DeserializeOwned + Sender,
    Resp: Serialize,
    F: FnOnce(KvRaft, Req) -> Fut,
    Fut: Future<Output = Resp>,
{
    let Some(s) = slot.ready.get() else { return not_ready() };
    let mut resp = match decode::<Req>(body) {
        Err(e) => refuse(
            StatusCode::BAD_REQUEST,
            &json!({ "error": "bad_rpc", "reason": format!("undecodable RPC body: {e}") }),
        ),
        Ok(req) => match check(s, headers, req.sender()).await {
            Err(r) => r,
            Ok(()) => reply(&call(s.raft.clone(), req).await),
        },
    };
    if let Ok(v) = HeaderValue::from_str(&s.guard.me_header()) {
        resp.headers_mut().insert(member::MEMBER, v);
    }
    resp
}

async fn append(State(slot): State<Arc<Slot>>, headers: HeaderMap, body: Bytes) -> Response {
    handle(&slot, &headers, &body, |raft, req: AppendEntriesRequest<TypeConfig>| async move {
        // The follower's part of a commit: its log append, timed when entries came along.
        let started = (!req.entries.is_empty()).then(std::time::Instant::now);
        let resp = raft.append_entries(req).await;
        if let Some(t) = started {
            metrics::histogram!(STAGE_DURATION, "stage" => "follower_append_rpc")
                .record(t.elapsed().as_secs_f64());
        }
        resp
    })
    .await
}

async fn vote(State(slot): State<Arc<Slot>>, headers: HeaderMap, body: Bytes) -> Response {
    handle(&slot, &headers, &body, |raft, req: VoteRequest<TypeConfig>| async move {
        raft.vote(req).await
    })
    .await
}

async fn snapshot(State(slot): State<Arc<Slot>>, headers: HeaderMap, body: Bytes) -> Response {
    // The member checks run first: `install_full_snapshot` panics on a snapshot that no
    // protocol-following leader of this cluster could send (e.g. one of a former incarnation).
    handle(&slot, &headers, &body, |raft, (vote, meta, data): SnapshotRpc| async move {
        raft.install_full_snapshot(vote, Snapshot { meta, snapshot: Cursor::new(data) }).await
    })
    .await
}

/// The current members of this node's configuration (503 until Raft runs).
async fn members(State(slot): State<Arc<Slot>>) -> Response {
    let Some(s) = slot.ready.get() else { return not_ready() };
    let metrics = s.raft.metrics().borrow_watched().clone();
    let members = metrics
        .membership_config
        .membership()
        .nodes()
        .map(|(id, n)| (*id, n.raft_addr.clone()))
        .collect();
    Json(member::Members { members }).into_response()
}

async fn knowledge(State(slot): State<Arc<Slot>>, Path(id): Path<u64>) -> Response {
    let knows = match &*slot.known.read().unwrap_or_else(std::sync::PoisonError::into_inner) {
        None => return not_ready(),
        Some(Known::Nobody) => None,
        Some(Known::Book(book)) => book.get(id),
    };
    Json(Knowledge { knows: knows.map(|i| i.to_string()) }).into_response()
}
