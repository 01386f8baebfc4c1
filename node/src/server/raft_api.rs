//! The Raft RPC endpoint: `POST /raft/{append,vote,snapshot}` with bincode bodies; the reply
//! body is the bincode of openraft's `Result`. Every request must name its sender and target
//! members and every answer names this one (`member.rs`); `GET /raft/member/{id}` tells what
//! this member knows of node `id` (the start-up check of a node on a fresh volume).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use openraft::Raft;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use vellum_raft_store::TypeConfig;

use super::codec::{decode, encode};
use super::member::{self, Guard, Knowledge, Refused};

/// Largest RPC body (a batch of entries or a snapshot chunk).
pub const MAX_RPC_BYTES: usize = 256 << 20;

#[derive(Clone)]
struct RpcState {
    raft: Raft<TypeConfig>,
    guard: Arc<Guard>,
}

pub fn router(raft: Raft<TypeConfig>, guard: Arc<Guard>) -> Router {
    Router::new()
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route("/raft/snapshot", post(snapshot))
        .route("/raft/member/{id}", get(knowledge))
        .layer(DefaultBodyLimit::max(MAX_RPC_BYTES))
        .with_state(RpcState { raft, guard })
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

/// The identity checks of one request (see `member.rs`); `Err` is the refusal to send.
async fn check(guard: &Guard, headers: &HeaderMap) -> Result<(), Response> {
    let (Some((from, Some(from_inc))), Some((to, to_inc))) =
        (member::member_header(headers, member::FROM), member::member_header(headers, member::TO))
    else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            &json!({ "error": "missing_member", "reason": "a Raft RPC must name its sender and target members" }),
        ));
    };
    let me = guard.me;
    if to != me.node_id {
        return Err(refuse(
            StatusCode::MISDIRECTED_REQUEST,
            &json!({ "error": "misdirected", "this_node": me.node_id, "to": to }),
        ));
    }
    if let Some(known) = to_inc
        && known != me.incarnation
    {
        // The sender knows another incarnation of this node: this one lost its state.
        guard.stale_self(from, known);
        return Err(stale_member(me.node_id, known, me.incarnation));
    }
    match guard.admit(from, from_inc).await {
        Ok(()) => Ok(()),
        Err(Refused::StalePeer { peer, known, presented }) => {
            tracing::warn!(peer, %known, %presented, "refused a Raft RPC from a member that lost its state");
            Err(stale_member(peer, known, presented))
        }
        Err(Refused::Store(why)) => Err(refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({ "error": "peer_book", "reason": why }),
        )),
    }
}

/// Decodes the body, runs `call`, answers; every answer names this member.
async fn handle<Req, Resp, F, Fut>(
    s: &RpcState,
    headers: &HeaderMap,
    body: &[u8],
    call: F,
) -> Response
where
    Req: DeserializeOwned,
    Resp: Serialize,
    F: FnOnce(Raft<TypeConfig>, Req) -> Fut,
    Fut: Future<Output = Resp>,
{
    let mut resp = match check(&s.guard, headers).await {
        Err(r) => r,
        Ok(()) => match decode::<Req>(body) {
            Ok(req) => reply(&call(s.raft.clone(), req).await),
            Err(e) => {
                (StatusCode::BAD_REQUEST, format!("undecodable RPC body: {e}")).into_response()
            }
        },
    };
    if let Ok(v) = HeaderValue::from_str(&s.guard.me_header()) {
        resp.headers_mut().insert(member::MEMBER, v);
    }
    resp
}

async fn append(State(s): State<RpcState>, headers: HeaderMap, body: Bytes) -> Response {
    handle(&s, &headers, &body, |raft, req| async move { raft.append_entries(req).await }).await
}

async fn vote(State(s): State<RpcState>, headers: HeaderMap, body: Bytes) -> Response {
    handle(&s, &headers, &body, |raft, req| async move { raft.vote(req).await }).await
}

async fn snapshot(State(s): State<RpcState>, headers: HeaderMap, body: Bytes) -> Response {
    handle(&s, &headers, &body, |raft, req| async move { raft.install_snapshot(req).await }).await
}

async fn knowledge(State(s): State<RpcState>, Path(id): Path<u64>) -> Response {
    let knows =
        if id == s.guard.me.node_id { Some(s.guard.me.incarnation) } else { s.guard.book.get(id) };
    Json(Knowledge { member: s.guard.me_header(), knows: knows.map(|i| i.to_string()) })
        .into_response()
}
