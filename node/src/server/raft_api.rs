//! The Raft RPC endpoint: `POST /raft/{append,vote,snapshot}` with bincode bodies; the reply
//! body is the bincode of openraft's `Result`.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use openraft::Raft;
use serde::Serialize;
use vellum_raft_store::TypeConfig;

use super::codec::{decode, encode};

/// Largest RPC body (a batch of entries or a snapshot chunk).
const MAX_RPC_BYTES: usize = 256 << 20;

pub fn router(raft: Raft<TypeConfig>) -> Router {
    Router::new()
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route("/raft/snapshot", post(snapshot))
        .layer(DefaultBodyLimit::max(MAX_RPC_BYTES))
        .with_state(raft)
}

fn reply<T: Serialize>(value: &T) -> Response {
    match encode(value) {
        Ok(bytes) => (StatusCode::OK, bytes).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn bad(e: &bincode::error::DecodeError) -> Response {
    (StatusCode::BAD_REQUEST, format!("undecodable RPC body: {e}")).into_response()
}

async fn append(State(raft): State<Raft<TypeConfig>>, body: Bytes) -> Response {
    match decode(&body) {
        Ok(req) => reply(&raft.append_entries(req).await),
        Err(e) => bad(&e),
    }
}

async fn vote(State(raft): State<Raft<TypeConfig>>, body: Bytes) -> Response {
    match decode(&body) {
        Ok(req) => reply(&raft.vote(req).await),
        Err(e) => bad(&e),
    }
}

async fn snapshot(State(raft): State<Raft<TypeConfig>>, body: Bytes) -> Response {
    match decode(&body) {
        Ok(req) => reply(&raft.install_snapshot(req).await),
        Err(e) => bad(&e),
    }
}
