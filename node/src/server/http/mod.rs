//! The client API (axum, JSON errors with real status codes).
//!
//! Writes and linearizable reads are served by the leader (of the key's group, on a node of
//! several: `AppState::group_for`). A follower forwards them to the leader (one hop, marked
//! with `x-vellum-forwarded`), or answers 307 with the leader's address when asked with
//! `?redirect`. Without a leader: 503 with `Retry-After`.
//!
//! With `--auth-tokens`, every route but `/livez` and `/readyz` needs a bearer token of the
//! right role (`server/auth.rs`), checked before the body is read. A forwarded request
//! carries the caller's `Authorization` header: the leader checks the caller's authority
//! again, so every node needs the same token file.
//!
//! `/livez` and `/readyz` answer 503 from the moment the Raft core stopped (`metrics.rs`,
//! [`m::Health`]): the process is about to exit and must not be taken for a live member;
//! reads of the local state machine (`?consistency=local`) are refused then too, as they
//! would be served from a state that no longer follows the log.

mod auth;
pub(crate) mod cluster;
mod errors;
mod kv;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use metrics_exporter_prometheus::PrometheusHandle;
use vellum_raft_store::v010::openraft::async_runtime::WatchReceiver;
use vellum_raft_store::v010::openraft::errors::ForwardToLeader;
use vellum_raft_store::v010::{KvNode, TypeConfig};

pub use cluster::Status as ClusterStatus;
pub use errors::ApiError;

use super::KvRaft;
use super::groups::{Group, Table, group_of};
use super::metrics as m;
use super::transport::ApiClient;
use crate::security::tokens::Auth;

/// Header marking a request one node forwarded to another (never forwarded again).
pub const FORWARDED: &str = "x-vellum-forwarded";

/// Size limits of client input.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_key_bytes: usize,
    pub max_value_bytes: usize,
}

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub id: u64,
    /// Group 0's Raft: the cluster's membership (every member belongs to group 0) and the
    /// routes that are built for one group (backup).
    pub raft: KvRaft,
    /// The node's Raft groups (`--groups`), by id: a key is read and written in
    /// [`AppState::group_for`]'s.
    pub groups: Arc<Table>,
    /// The leaders of the groups this node holds no replica of (`directory.rs`).
    pub directory: Arc<crate::server::directory::Directory>,
    /// The groups whose replicas this node moves now (the balancer leaves them alone).
    pub moving: Arc<crate::server::groups::Moving>,
    /// Wakes the balancer of group leaders (`POST /v1/cluster/rebalance`).
    pub rebalance: Arc<tokio::sync::Notify>,
    pub limits: Limits,
    pub ready: Arc<AtomicBool>,
    /// Whether the Raft core runs.
    pub health: Arc<m::Health>,
    pub prometheus: PrometheusHandle,
    /// Client for forwarding to the leader (TLS as the cluster's APIs are served).
    pub http: ApiClient,
    /// The bearer tokens the API requires (`--auth-tokens`); `None`: open to all.
    pub auth: Option<Auth>,
    /// The peer book: ids removed from the cluster are never added again.
    pub book: Arc<vellum_raft_store::member::PeerBook>,
    /// The node's volume: `GET /v1/cluster/snapshot` reads the current snapshot from it.
    pub volume: vellum_engine::Volume,
    /// Whether the volume has room for puts (the space guard's last look).
    pub space: Arc<crate::server::space::Space>,
}

/// Who leads, as this node sees it.
pub enum Leader {
    Me,
    Other(u64, KvNode),
    Unknown(Option<u64>),
}

impl AppState {
    /// The group that holds `key`.
    pub fn group_for(&self, key: &str) -> Group {
        self.groups.at(group_of(key.as_bytes(), self.groups.len()))
    }

    /// Who leads group 0 (the membership's group).
    pub fn leader(&self) -> Leader {
        self.leader_of(&self.groups.at(0))
    }

    /// Who leads `group`: as its Raft here sees it, or, when this node does not vote in it
    /// (its replicas were moved to other members), as the directory heard from its voters.
    pub fn leader_of(&self, group: &Group) -> Leader {
        let m = group.raft.metrics().borrow_watched().clone();
        if group.id != 0
            && !crate::server::directory::votes_in(&m, self.id)
            && let Some(view) = self.directory.get(group.id)
        {
            return match (view.leader, view.leader_node) {
                (Some(id), _) if id == self.id => Leader::Unknown(Some(id)),
                (Some(id), Some(node)) => Leader::Other(id, node),
                (leader, _) => Leader::Unknown(leader),
            };
        }
        match m.current_leader {
            Some(id) if id == self.id => Leader::Me,
            Some(id) => match m.membership_config.membership().get_node(&id) {
                Some(node) => Leader::Other(id, node.clone()),
                None => Leader::Unknown(Some(id)),
            },
            None => Leader::Unknown(None),
        }
    }

    /// Where openraft says to send a request it refused here. No leader (an election, or a
    /// leader whose lease does not hold yet or any more: 0.10 answers it with no leader), or
    /// this node itself: `Unknown`, a retryable 503.
    pub fn forward_target(&self, f: &ForwardToLeader<TypeConfig>) -> Leader {
        self.forward_to(f.leader_id, f.leader_node.as_ref())
    }

    /// [`Self::forward_target`] for a leader named by id and, if known, address.
    pub fn forward_to(&self, leader_id: Option<u64>, leader_node: Option<&KvNode>) -> Leader {
        match (leader_id, leader_node) {
            (Some(id), _) if id == self.id => Leader::Unknown(Some(id)),
            (Some(id), Some(node)) => Leader::Other(id, node.clone()),
            (Some(id), None) => match self.nodes().remove(&id) {
                Some(node) => Leader::Other(id, node),
                None => Leader::Unknown(Some(id)),
            },
            (None, _) => Leader::Unknown(None),
        }
    }

    /// Node addresses from the membership.
    pub fn nodes(&self) -> BTreeMap<u64, KvNode> {
        let m = self.raft.metrics().borrow_watched().clone();
        m.membership_config.membership().nodes().map(|(id, n)| (*id, n.clone())).collect()
    }
}

pub fn router(state: AppState) -> Router {
    let body_limit = state.limits.max_value_bytes + 1;
    Router::new()
        // The prefix read (`?prefix=P&limit=N`): `read` role, like a GET of one key.
        .route("/v1/kv", get(kv::list))
        .route("/v1/kv/", get(kv::empty_key).put(kv::empty_key).delete(kv::empty_key))
        // `{*key}`: a key may contain `/` (`/v1/kv/a/b/c` is the key `a/b/c`).
        .route("/v1/kv/{*key}", get(kv::get).put(kv::put).delete(kv::delete))
        .route("/v1/cluster/status", get(cluster::status))
        .route("/v1/cluster/rebalance", post(cluster::rebalance))
        .route("/v1/cluster/move", post(cluster::move_replica))
        .route("/v1/cluster/learners", post(cluster::add_learner))
        .route("/v1/cluster/members", put(cluster::change_members))
        .route("/v1/cluster/members/{id}", axum::routing::delete(cluster::remove_member))
        // `vellum backup`: admin role (under /v1/cluster/), on the leader.
        .route("/v1/cluster/snapshot", get(cluster::snapshot))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(state.clone(), declared_too_large))
        // The last layer runs first: metrics count every answer (401s too), then the token
        // is checked before `declared_too_large` reads a byte of the body.
        .layer(axum::middleware::from_fn_with_state(state.auth.clone(), auth::require_token))
        .layer(axum::middleware::from_fn(m::track))
        .with_state(state)
}

/// Bodies this much over the limit are read and dropped before the 413 is answered.
const DRAIN_BYTES: u64 = 64 << 20;
/// How long reading and dropping an oversized body may take.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// Answers 413 to a request whose declared body is larger than any the API takes, without
/// buffering a byte of it. A body up to `DRAIN_BYTES` is read and dropped first: a client
/// that sends its whole body before it reads the answer would otherwise see the connection
/// reset under it instead of the 413 (the kernel resets a socket closed with unread data).
/// A larger one is answered at once.
async fn declared_too_large(
    State(s): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let Some(len) = declared.filter(|&n| n > s.limits.max_value_bytes as u64) else {
        return next.run(req).await;
    };
    if len <= DRAIN_BYTES {
        use http_body_util::BodyExt;
        let mut body = req.into_body();
        let _ = tokio::time::timeout(DRAIN_TIME, async {
            while let Some(Ok(_)) = body.frame().await {}
        })
        .await;
    }
    ApiError::ValueTooLarge { max: s.limits.max_value_bytes }.into_response()
}

/// `/metrics` alone (and `/livez`), for `--metrics-addr`: Prometheus scrapes it without a
/// token.
pub fn metrics_router(prometheus: PrometheusHandle, health: Arc<m::Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_only))
        .route("/livez", get(metrics_livez))
        .fallback(not_found)
        .with_state((prometheus, health))
}

async fn metrics_only(State((p, _)): State<(PrometheusHandle, Arc<m::Health>)>) -> Response {
    ([(header::CONTENT_TYPE, m::CONTENT_TYPE)], p.render()).into_response()
}

async fn metrics_livez(State((_, health)): State<(PrometheusHandle, Arc<m::Health>)>) -> Response {
    live(&health)
}

async fn livez(State(s): State<AppState>) -> Response {
    live(&s.health)
}

/// 200 while the Raft core runs (or has not started yet); 503 once it stopped.
fn live(health: &m::Health) -> Response {
    if health.core_running() {
        axum::Json(serde_json::json!({ "status": "ok" })).into_response()
    } else {
        ApiError::RaftStopped.into_response()
    }
}

async fn readyz(State(s): State<AppState>) -> Response {
    if !s.health.core_running() {
        return ApiError::RaftStopped.into_response();
    }
    if s.ready.load(Ordering::Acquire) {
        axum::Json(serde_json::json!({ "status": "ready" })).into_response()
    } else {
        let mut r = ApiError::NotReady.into_response();
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        r
    }
}

async fn metrics(State(s): State<AppState>) -> Response {
    ([(header::CONTENT_TYPE, m::CONTENT_TYPE)], s.prometheus.render()).into_response()
}

async fn not_found() -> Response {
    ApiError::NoRoute.into_response()
}

async fn method_not_allowed() -> Response {
    ApiError::MethodNotAllowed.into_response()
}

/// Status of a forwarded or proxied response, kept as is.
pub fn relay(
    status: reqwest::StatusCode,
    headers: &reqwest::header::HeaderMap,
    body: bytes::Bytes,
) -> Response {
    let status = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut resp = (status, body).into_response();
    for name in
        [header::CONTENT_TYPE, header::RETRY_AFTER, header::LOCATION, header::WWW_AUTHENTICATE]
    {
        if let Some(v) =
            headers.get(name.as_str()).and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok())
        {
            resp.headers_mut().insert(name, v);
        }
    }
    resp
}
