//! The Raft RPC endpoint: `POST /raft/{append,vote,snapshot,transfer}` with bincode bodies;
//! the reply body is the bincode of openraft's `Result`. An RPC names its Raft group and the
//! sender's group count in `x-vellum-group: g/G` (`groups.rs`; absent: group 0 of a node of
//! one group); another G than this node's is refused (400 `groups_mismatch`), and so is a
//! group it does not run (400 `unknown_group`). A snapshot comes whole, with the leader's vote
//! and the snapshot's meta, in one POST, and goes to openraft 0.10's `install_full_snapshot`.
//! Every request must name its sender and target members and every answer names this one
//! (`member.rs`); `GET /raft/member/{id}` tells what this member knows of node `id` and
//! `GET /raft/members` its current members (the start-up check of a node on a fresh volume).
//!
//! Who may speak Raft: the certificate authenticates the sender ([`authenticate`], with
//! mutual TLS); membership authorizes it ([`authorize`], always, before the body is read and
//! before the sender enters the peer book): see `member.rs`. The start-up questions stay open
//! to any node certificate of the CA, as a joiner needs them.
//!
//! Invariants: a decoded RPC reaches openraft only once its sender is admitted and
//! `rpc_check.rs` found it to be one a protocol-following member sends (else 400: openraft
//! 0.10 stops its core, or panics, on some that are not). Bodies are bounded before they are
//! read: an append or vote by the largest append a leader sends ([`rpc_body_limit`]), a
//! snapshot by what this node's volume can hold (at most [`MAX_SNAPSHOT_BYTES`]); a larger
//! declared body gets 413 before a byte of it is read. One snapshot is received and installed
//! at a time (a second one meanwhile gets 503): a snapshot is held in memory whole while it
//! is checked and installed (it is not streamed to the volume). A snapshot the volume has no
//! room for now gets 507 `no_space` (before its body is read, when it declares its length):
//! installing it would find the volume full, which stops the Raft core (`space.rs`); so
//! does an append with entries the volume has no room for.
//! Every answer names this member (`x-vellum-member`) and says which client writes its volume
//! takes (`x-vellum-space`, `space.rs`).

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
use vellum_raft_store::v010::openraft::raft::{
    AppendEntriesRequest, TransferLeaderRequest, VoteRequest,
};
use vellum_raft_store::v010::openraft::type_config::alias::{SnapshotMetaOf, VoteOf};

use super::KvRaft;
use super::codec::{APPEND_BYTES, MAX_SNAPSHOT_BYTES, decode, encode};
use super::member::{self, Guard, Knowledge, Refused};
use super::rpc_check;
use super::space::{AppendRefused, SPACE_HEADER, Space};
use super::transport::{PeerAddr, PeerCert};
use crate::security::tls;
use vellum_raft_store::member::PeerBook;

/// What an append or vote body may take besides its entries (vote, log ids, lengths, tags).
const RPC_OVERHEAD_BYTES: usize = 64 << 10;

/// Largest append or vote RPC body, for a node whose largest single write makes entries of
/// up to `largest_entry` bytes: a leader's append carries entries up to
/// [`APPEND_BYTES`] in all, or one entry alone (the
/// largest write, which every member accepts alike), plus the request's own fields.
pub fn rpc_body_limit(largest_entry: usize) -> usize {
    APPEND_BYTES.max(largest_entry).saturating_add(RPC_OVERHEAD_BYTES)
}

/// Largest snapshot body a node on a volume of `capacity` bytes takes: the snapshot is
/// written into the volume whole, so a larger one cannot be installed there.
pub fn snapshot_body_limit(capacity: u64) -> usize {
    usize::try_from(capacity).unwrap_or(usize::MAX).min(MAX_SNAPSHOT_BYTES)
}

/// A whole snapshot on the wire: the leader's vote, the snapshot's meta, its bytes.
type SnapshotRpc = (VoteOf<TypeConfig>, SnapshotMetaOf<TypeConfig>, Vec<u8>);

/// The Raft side of a started node.
pub struct RpcState {
    /// The node's Raft groups, by id (`0..G`).
    groups: Arc<super::groups::Table>,
    guard: Arc<Guard>,
    limits: RpcLimits,
    /// What this node's volume takes, and the room of a snapshot being installed.
    space: Arc<Space>,
    volume: vellum_engine::Volume,
}

/// What this node's store can take from an RPC.
#[derive(Debug, Clone, Copy)]
pub struct RpcLimits {
    /// The largest entry this node's log holds (an append's larger entry gets 400).
    pub max_entry_bytes: usize,
    /// The largest snapshot body ([`snapshot_body_limit`]).
    pub snapshot_bytes: usize,
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
    /// One snapshot at a time is received and installed.
    installing: tokio::sync::Semaphore,
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
        Slot {
            mtls,
            known: std::sync::RwLock::default(),
            ready: std::sync::OnceLock::new(),
            installing: tokio::sync::Semaphore::new(1),
        }
    }

    /// Answers start-up questions from `known` from now on.
    pub fn know(&self, known: Known) {
        *self.known.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(known);
    }

    /// Serves Raft RPCs from now on, for the groups of a node on `volume`.
    pub fn ready(
        &self,
        groups: Arc<super::groups::Table>,
        guard: Arc<Guard>,
        limits: RpcLimits,
        space: Arc<Space>,
        volume: vellum_engine::Volume,
    ) {
        let _ = self.ready.set(RpcState { groups, guard, limits, space, volume });
    }
}

/// The Raft port's routes; append and vote bodies up to `rpc_bytes` ([`rpc_body_limit`]).
pub fn router(slot: Arc<Slot>, rpc_bytes: usize) -> Router {
    let snapshots = Router::new()
        .route("/raft/snapshot", post(snapshot))
        // The snapshot handler bounds its body itself (by the volume, known once Raft runs).
        .layer(DefaultBodyLimit::disable());
    Router::new()
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route("/raft/transfer", post(transfer))
        .route("/raft/member/{id}", get(knowledge))
        .route("/raft/members", get(members))
        .route("/raft/groups", get(groups))
        .layer(DefaultBodyLimit::max(rpc_bytes))
        .layer(axum::middleware::from_fn_with_state(rpc_bytes, declared_too_large))
        .merge(snapshots)
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&slot), authorize))
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

/// After [`authenticate`], before a body is read: a Raft RPC's sender must have authority
/// from this node's membership, and not be denied, removed or refused (`member.rs`); 403
/// with a JSON error naming why. Start-up questions pass; so does a request before Raft
/// runs (it gets 503) or one that names no sender (400).
async fn authorize(
    State(slot): State<Arc<Slot>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let kind = match req.uri().path() {
        // A leader transfer comes from a group's leader, as its appends do.
        "/raft/append" | "/raft/transfer" => member::RpcKind::Append,
        "/raft/vote" => member::RpcKind::Vote,
        "/raft/snapshot" => member::RpcKind::Snapshot,
        _ => return next.run(req).await,
    };
    let (Some(s), Some((from, _))) =
        (slot.ready.get(), member::member_header(req.headers(), member::FROM))
    else {
        return next.run(req).await;
    };
    // The group it names (`x-vellum-group`); one that does not parse is refused by the
    // handler (400 `bad_group`) and judged as group 0's here.
    let group = req
        .headers()
        .get(super::groups::GROUP_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(super::groups::parse_header)
        .map_or(0, |(g, _)| g);
    match s.guard.authorize(kind, from, group) {
        Ok(()) => next.run(req).await,
        Err(why) => {
            tracing::debug!(from, path = %req.uri().path(), error = why.code(), "refused a Raft RPC");
            let mut resp = refuse(
                StatusCode::FORBIDDEN,
                &json!({ "error": why.code(), "from": from, "reason": why.reason() }),
            );
            if let Ok(v) = HeaderValue::from_str(&s.guard.me_header()) {
                resp.headers_mut().insert(member::MEMBER, v);
            }
            resp
        }
    }
}

fn not_ready() -> Response {
    refuse(StatusCode::SERVICE_UNAVAILABLE, &json!({ "error": "not_ready" }))
}

/// 413 at once for an append or vote whose declared body is over `limit`, before a byte of
/// it is read (axum's own limit would read up to it first).
async fn declared_too_large(
    State(limit): State<usize>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match declared_len(req.headers()) {
        Some(len) if len > limit as u64 => too_large(len, limit),
        _ => next.run(req).await,
    }
}

fn declared_len(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

fn too_large(len: u64, limit: usize) -> Response {
    let mut resp = refuse(
        StatusCode::PAYLOAD_TOO_LARGE,
        &json!({ "error": "body_too_large", "len": len, "max": limit }),
    );
    // The unread rest of the body: the connection is not reused.
    resp.headers_mut().insert(axum::http::header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// 400 for an RPC `rpc_check.rs` refused.
fn bad_rpc(error: &str, reason: &str) -> Response {
    tracing::warn!(error, reason, "refused a Raft RPC");
    refuse(StatusCode::BAD_REQUEST, &json!({ "error": error, "reason": reason }))
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

/// The sender a Raft request names in its body (the candidate or leader of its vote), and
/// the check of its fields (`rpc_check.rs`) once the sender is admitted.
trait Sender {
    fn sender(&self) -> Option<u64>;
    fn well_formed(&self, _limits: &RpcLimits) -> Result<(), rpc_check::Refusal> {
        Ok(())
    }
}

impl Sender for AppendEntriesRequest<TypeConfig> {
    fn sender(&self) -> Option<u64> {
        Some(self.vote.leader_id().node_id)
    }
    fn well_formed(&self, limits: &RpcLimits) -> Result<(), rpc_check::Refusal> {
        rpc_check::append(self, limits.max_entry_bytes)
    }
}

impl Sender for TransferLeaderRequest<TypeConfig> {
    fn sender(&self) -> Option<u64> {
        Some(self.from_leader().leader_id().node_id)
    }
}

impl Sender for VoteRequest<TypeConfig> {
    fn sender(&self) -> Option<u64> {
        Some(self.vote.leader_id().node_id)
    }
    fn well_formed(&self, _limits: &RpcLimits) -> Result<(), rpc_check::Refusal> {
        rpc_check::vote(self)
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
        // The sender knows another incarnation of this node: this one lost its state, if
        // one peer alone cannot forge the claim; otherwise the sender is refused from now on.
        guard.stale_claim(from, known);
        return Err(stale_member(me.node_id, known, me.incarnation));
    }
    Ok(())
}

/// The Raft group an RPC names (`x-vellum-group`), or the 400 that refuses it.
fn group_raft(s: &RpcState, headers: &HeaderMap) -> Result<KvRaft, Box<Response>> {
    let groups = s.groups.len() as u64;
    let named = match headers.get(super::groups::GROUP_HEADER) {
        None => None,
        Some(v) => match v.to_str().ok().and_then(super::groups::parse_header) {
            Some(named) => Some(named),
            None => {
                return Err(Box::new(refuse(
                    StatusCode::BAD_REQUEST,
                    &json!({ "error": "bad_group", "reason": "x-vellum-group is not GROUP/GROUPS" }),
                )));
            }
        },
    };
    let (group, theirs) = named.unwrap_or((0, 1));
    if theirs != groups {
        tracing::error!(
            theirs,
            ours = groups,
            "a member runs another number of Raft groups: every member needs the same --groups"
        );
        return Err(Box::new(refuse(
            StatusCode::BAD_REQUEST,
            &json!({ "error": "groups_mismatch", "theirs": theirs, "ours": groups }),
        )));
    }
    usize::try_from(group).ok().and_then(|g| s.groups.get(g)).map(|g| g.raft).ok_or_else(|| {
        Box::new(refuse(
            StatusCode::BAD_REQUEST,
            &json!({ "error": "unknown_group", "group": group }),
        ))
    })
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
    Fut: Future<Output = Result<Resp, Response>>,
{
    let Some(s) = slot.ready.get() else { return not_ready() };
    let raft = match group_raft(s, headers) {
        Ok(raft) => raft,
        Err(r) => return *r,
    };
    let mut resp = match decode::<Req>(body) {
        Err(e) => refuse(
            StatusCode::BAD_REQUEST,
            &json!({ "error": "bad_rpc", "reason": format!("undecodable RPC body: {e}") }),
        ),
        Ok(req) => match check(s, headers, req.sender()).await {
            Err(r) => r,
            Ok(()) => match req.well_formed(&s.limits) {
                Err(why) => bad_rpc("bad_rpc", &why),
                Ok(()) => match call(raft, req).await {
                    Ok(answer) => reply(&answer),
                    Err(refused) => refused,
                },
            },
        },
    };
    sign(s, &mut resp);
    resp
}

/// Names this member in an answer, and says what its volume takes.
fn sign(s: &RpcState, resp: &mut Response) {
    if let Ok(v) = HeaderValue::from_str(&s.guard.me_header()) {
        resp.headers_mut().insert(member::MEMBER, v);
    }
    if let Ok(v) = HeaderValue::from_str(&s.space.word()) {
        resp.headers_mut().insert(SPACE_HEADER, v);
    }
}

/// An append with entries is taken only while the volume has room for it
/// ([`Space::hold_append`]; else 507 `no_space`): one that finds the volume full stops the
/// Raft core. It runs in a task of its own that keeps the room held until openraft answers
/// (once the entries are flushed), even when the leader stops waiting for the answer.
async fn append(State(slot): State<Arc<Slot>>, headers: HeaderMap, body: Bytes) -> Response {
    let space = slot.ready.get().map(|s| Arc::clone(&s.space));
    let bytes = body.len() as u64;
    handle(&slot, &headers, &body, |raft, req: AppendEntriesRequest<TypeConfig>| async move {
        let room = match (space, req.entries.last()) {
            (Some(space), Some(last)) => {
                // Entries the leader has committed already: this node is catching up.
                let catch_up =
                    req.leader_commit.as_ref().is_some_and(|c| c.index >= last.log_id.index);
                match space.hold_append(bytes, catch_up) {
                    Ok(held) => Some(held),
                    Err(AppendRefused::NotLooked) => return Err(not_looked()),
                    Err(AppendRefused::NoRoom { room, need }) => {
                        return Err(no_room("append", bytes, (room, need)));
                    }
                }
            }
            _ => None,
        };
        let appended = tokio::spawn(async move {
            // The follower's part of a commit: its log append, timed when entries came along.
            let started = room.is_some().then(std::time::Instant::now);
            let resp = raft.append_entries(req).await;
            if let Some(t) = started {
                metrics::histogram!(STAGE_DURATION, "stage" => "follower_append_rpc")
                    .record(t.elapsed().as_secs_f64());
            }
            drop(room);
            resp
        });
        appended
            .await
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response())
    })
    .await
}

/// 507 for an append before the space guard's first look (the node has just started): the
/// leader backs off and sends it again.
fn not_looked() -> Response {
    tracing::debug!("an append before the space guard's first look: refused for now");
    let mut r = refuse(
        StatusCode::INSUFFICIENT_STORAGE,
        &json!({ "error": "no_space", "reason": "the node is starting: its volume's room is not known yet" }),
    );
    r.headers_mut().insert(axum::http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

async fn transfer(State(slot): State<Arc<Slot>>, headers: HeaderMap, body: Bytes) -> Response {
    handle(&slot, &headers, &body, |raft, req: TransferLeaderRequest<TypeConfig>| async move {
        Ok(raft.handle_transfer_leader(req).await)
    })
    .await
}

async fn vote(State(slot): State<Arc<Slot>>, headers: HeaderMap, body: Bytes) -> Response {
    handle(&slot, &headers, &body, |raft, req: VoteRequest<TypeConfig>| async move {
        Ok(raft.vote(req).await)
    })
    .await
}

/// A whole snapshot: one at a time (503 meanwhile), its body bounded by the volume (413 at
/// once for a larger declared one, or as soon as a body without a declared length passes
/// it). The member checks run first, then `rpc_check::snapshot`: `install_full_snapshot`
/// panics on a snapshot that no protocol-following leader of this cluster could send (e.g.
/// one of a former incarnation), and a snapshot whose data does not decode would be a
/// storage error that stops the Raft core. Decoding and checking run off the async workers.
async fn snapshot(
    State(slot): State<Arc<Slot>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let Some(s) = slot.ready.get() else { return not_ready() };
    let mut resp = snapshot_inner(&slot, s, &headers, body).await;
    sign(s, &mut resp);
    resp
}

/// 507 for a leader's `what` (an append, a snapshot) of `bytes` that the volume has no room
/// for now: `free` bytes of room (for an append: the free space less the room held back
/// for snapshots and appends being written), `need` bytes needed.
fn no_room(what: &str, bytes: u64, (free, need): (u64, u64)) -> Response {
    tracing::warn!(
        bytes,
        free,
        need,
        "refused a leader's {what}: the volume has no room for it now (writing it would stop \
         the Raft core); this node lags behind until its own snapshot frees its log, or the \
         volume has more space"
    );
    let mut r = refuse(
        StatusCode::INSUFFICIENT_STORAGE,
        &json!({ "error": "no_space", "bytes": bytes, "free": free, "need": need }),
    );
    r.headers_mut().insert(axum::http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

async fn snapshot_inner(
    slot: &Slot,
    s: &RpcState,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Response {
    let raft = match group_raft(s, headers) {
        Ok(raft) => raft,
        Err(r) => return *r,
    };
    let limit = s.limits.snapshot_bytes;
    if let Some(len) = declared_len(headers).filter(|&n| n > limit as u64) {
        return too_large(len, limit);
    }
    let Ok(_installing) = slot.installing.try_acquire() else {
        let mut r = refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({ "error": "snapshot_busy", "reason": "a snapshot is being installed" }),
        );
        r.headers_mut().insert(axum::http::header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    // A declared length that does not fit is refused before the body is read; the room is
    // held for the decoded snapshot's own length (a declared one may lie), below.
    if let Some(len) = declared_len(headers)
        && let Err(why) = s.space.hold_install(&s.volume, len).await
    {
        return no_room("snapshot", len, why);
    }
    let body = {
        use http_body_util::BodyExt;
        match http_body_util::Limited::new(body, limit).collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return too_large(limit as u64 + 1, limit);
            }
            Err(e) => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    &json!({ "error": "bad_rpc", "reason": format!("reading the body: {e}") }),
                );
            }
        }
    };
    let decoded = tokio::task::spawn_blocking(move || decode::<SnapshotRpc>(&body)).await;
    let (vote, meta, data) = match decoded {
        Ok(Ok(rpc)) => rpc,
        Ok(Err(e)) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                &json!({ "error": "bad_rpc", "reason": format!("undecodable RPC body: {e}") }),
            );
        }
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    if let Err(r) = check(s, headers, Some(vote.leader_id().node_id)).await {
        return r;
    }
    let committed = raft.metrics().borrow_watched().local_committed;
    let checked = tokio::task::spawn_blocking(move || {
        let r = rpc_check::snapshot(&vote, &meta, &data, committed.as_ref());
        (r, vote, meta, data)
    })
    .await;
    let (vote, meta, data) = match checked {
        Ok((Ok(()), vote, meta, data)) => (vote, meta, data),
        Ok((Err(why), ..)) => return bad_rpc("bad_snapshot", &why),
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    // Held until the snapshot is installed: a build the guard asks for meanwhile does not
    // count on the same bytes.
    let len = data.len() as u64;
    let _room = match s.space.hold_install(&s.volume, len).await {
        Ok(held) => held,
        Err(why) => return no_room("snapshot", len, why),
    };
    reply(&raft.install_full_snapshot(vote, Snapshot { meta, snapshot: Cursor::new(data) }).await)
}

/// The current members of this node's configuration (503 until Raft runs).
async fn members(State(slot): State<Arc<Slot>>) -> Response {
    let Some(s) = slot.ready.get() else { return not_ready() };
    let metrics = s.groups.at(0).raft.metrics().borrow_watched().clone();
    let members = metrics
        .membership_config
        .membership()
        .nodes()
        .map(|(id, n)| (*id, n.raft_addr.clone()))
        .collect();
    Json(member::Members { members }).into_response()
}

/// The Raft groups this member votes in, as it sees them (`GET /raft/groups`): what a member
/// that holds no replica of some group learns their leaders from (`directory.rs`).
async fn groups(State(slot): State<Arc<Slot>>) -> Response {
    let Some(s) = slot.ready.get() else { return not_ready() };
    let me = s.guard.me.node_id;
    let groups = s
        .groups
        .all()
        .iter()
        .filter_map(|g| super::directory::view(g.id, me, &g.raft.metrics().borrow_watched()))
        .collect();
    Json(super::directory::Views { groups }).into_response()
}

async fn knowledge(State(slot): State<Arc<Slot>>, Path(id): Path<u64>) -> Response {
    let knows = match &*slot.known.read().unwrap_or_else(std::sync::PoisonError::into_inner) {
        None => return not_ready(),
        Some(Known::Nobody) => None,
        Some(Known::Book(book)) => book.get(id),
    };
    Json(Knowledge { knows: knows.map(|i| i.to_string()) }).into_response()
}
