//! `GET /v1/cluster/status`, `POST /v1/cluster/learners`, `PUT /v1/cluster/members`,
//! `DELETE /v1/cluster/members/{id}`, `POST /v1/cluster/rebalance`.
//!
//! The status is group 0's (the membership's) at its top level, and lists every Raft group
//! (`groups`: leader, term, applied index) on a node of several (`--groups`). On such a
//! node a membership change runs on every group, each through its leader (`every_group`), so
//! the groups keep the same members; backups are built for one group and answer 501
//! (`not_with_groups`) rather than save group 0 alone.

use std::collections::{BTreeMap, BTreeSet};

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use vellum_raft_store::v010::openraft::async_runtime::WatchReceiver;
use vellum_raft_store::v010::openraft::errors::{ClientWriteError, RaftError};
use vellum_raft_store::v010::openraft::raft::ClientWriteResponse;
use vellum_raft_store::v010::openraft::{ChangeMembers as Change, ServerState};
use vellum_raft_store::v010::{KvNode, TypeConfig};

use super::{ApiError, AppState, Leader};
use crate::server::KvRaft;

#[derive(Debug, Serialize, Deserialize)]
pub struct Status {
    pub id: u64,
    pub role: String,
    pub leader: Option<u64>,
    pub term: u64,
    pub last_log_index: Option<u64>,
    pub applied_index: Option<u64>,
    pub snapshot_index: Option<u64>,
    pub purged_index: Option<u64>,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    pub nodes: BTreeMap<u64, KvNode>,
    /// On the leader: each peer's matched index.
    pub replication: BTreeMap<u64, Option<u64>>,
    /// Every Raft group of the node (one unless `--groups`), as this node sees it.
    #[serde(default)]
    pub groups: Vec<GroupStatus>,
}

/// One Raft group in the status.
#[derive(Debug, Serialize, Deserialize)]
pub struct GroupStatus {
    pub group: u64,
    pub leader: Option<u64>,
    pub term: u64,
    pub role: String,
    pub last_log_index: Option<u64>,
    pub applied_index: Option<u64>,
}

fn role_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

pub async fn status(State(s): State<AppState>) -> Response {
    let m = s.raft.metrics().borrow_watched().clone();
    let membership = m.membership_config.membership();
    let voters: BTreeSet<u64> = membership.voter_ids().collect();
    let learners: Vec<u64> = membership.learner_ids().collect();
    let role = role_name(m.state);
    let groups = s
        .groups
        .iter()
        .map(|g| {
            let m = g.raft.metrics().borrow_watched().clone();
            GroupStatus {
                group: g.id,
                leader: m.current_leader,
                term: m.current_term,
                role: role_name(m.state).into(),
                last_log_index: m.last_log_index,
                applied_index: m.last_applied.map(|l| l.index),
            }
        })
        .collect();
    let status = Status {
        id: s.id,
        role: role.into(),
        leader: m.current_leader,
        term: m.current_term,
        last_log_index: m.last_log_index,
        applied_index: m.last_applied.map(|l| l.index),
        snapshot_index: m.snapshot.map(|l| l.index),
        purged_index: m.purged.map(|l| l.index),
        voters: voters.into_iter().collect(),
        learners,
        nodes: s.nodes(),
        replication: m
            .replication
            .as_ref()
            .map(|r| r.iter().map(|(id, l)| (*id, l.map(|l| l.index))).collect())
            .unwrap_or_default(),
        groups,
    };
    Json(status).into_response()
}

#[derive(Debug, Default, Deserialize)]
pub struct RebalanceParams {
    /// Set on the copies a node sends its peers: act here only.
    local: Option<String>,
}

/// `POST /v1/cluster/rebalance` (`vellum cluster rebalance`): every member looks at the groups
/// it leads now and hands those another voter should lead to it (`groups.rs`), instead of at
/// its next periodic look. Answers which members were asked.
pub async fn rebalance(
    State(s): State<AppState>,
    axum::extract::Query(params): axum::extract::Query<RebalanceParams>,
    headers: axum::http::HeaderMap,
) -> Response {
    s.rebalance.notify_one();
    let mut asked = vec![s.id];
    if params.local.is_none() {
        for (id, node) in s.nodes() {
            if id == s.id {
                continue;
            }
            let url = format!("{}/v1/cluster/rebalance?local=1", s.http.base(&node.api_addr));
            let mut req = s.http.client.post(url);
            if let Some(a) = headers.get(axum::http::header::AUTHORIZATION) {
                req = req.header(axum::http::header::AUTHORIZATION, a.clone());
            }
            if req.send().await.is_ok_and(|r| r.status().is_success()) {
                asked.push(id);
            }
        }
    }
    Json(serde_json::json!({ "groups": s.groups.len(), "asked": asked })).into_response()
}

/// 501 on a node of several groups, for a route built for one (backups).
fn one_group_only(s: &AppState, what: &'static str) -> Option<Response> {
    (s.groups.len() > 1).then(|| ApiError::NotWithGroups(what).into_response())
}

#[derive(Debug, Serialize, Deserialize)]
pub struct AddLearner {
    pub id: u64,
    pub raft_addr: String,
    pub api_addr: String,
}

/// A learner's addresses before they enter the membership (every member dials them, and a
/// member's Raft address names the TLS peer it must be): `raft_addr` is `IP:PORT`, `api_addr`
/// is `HOST:PORT` (an IP address, or a DNS name of letters, digits, `-` and `.`).
pub fn check_addresses(req: &AddLearner) -> Result<(), String> {
    if req.raft_addr.parse::<std::net::SocketAddr>().is_err() {
        return Err(format!("raft_addr {:?} is not IP:PORT", req.raft_addr));
    }
    if !is_host_port(&req.api_addr) {
        return Err(format!("api_addr {:?} is not HOST:PORT", req.api_addr));
    }
    Ok(())
}

fn is_host_port(addr: &str) -> bool {
    if addr.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    let Some((host, port)) = addr.rsplit_once(':') else { return false };
    let port_ok = port.parse::<u16>().is_ok_and(|p| p > 0);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    port_ok && !host.is_empty() && host.len() <= 253 && host.split('.').all(label_ok)
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ChangeMembers {
    /// The new voter set.
    pub members: Vec<u64>,
}

fn not_leader(s: &AppState) -> Option<Response> {
    match s.leader() {
        Leader::Me => None,
        Leader::Other(id, node) => Some(
            (
                axum::http::StatusCode::TEMPORARY_REDIRECT,
                [(axum::http::header::LOCATION, s.http.base(&node.api_addr))],
                Json(serde_json::json!({ "error": "not_leader", "leader": id, "leader_api_addr": node.api_addr })),
            )
                .into_response(),
        ),
        Leader::Unknown(leader) => Some(ApiError::NoLeader { leader }.into_response()),
    }
}

/// The answer to a membership change: its log index, or why it failed. A leader that is not
/// writable (no leader any more, or a lease that does not hold) is a retryable 503.
fn changed(
    result: Result<
        ClientWriteResponse<TypeConfig>,
        RaftError<TypeConfig, ClientWriteError<TypeConfig>>,
    >,
    failed: fn(String) -> ApiError,
) -> Response {
    match result {
        Ok(r) => Json(serde_json::json!({ "index": r.log_id.index })).into_response(),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
            ApiError::NoLeader { leader: f.leader_id }.into_response()
        }
        Err(e) => failed(e.to_string()).into_response(),
    }
}

/// `?group=N` on a membership change: act on that group alone (what a node asks each group's
/// leader for, on a node of several groups).
#[derive(Debug, Default, Deserialize)]
pub struct GroupParam {
    group: Option<u64>,
}

/// Where a membership change runs.
enum Target {
    /// On this group's Raft, led here.
    One(KvRaft),
    /// On every group, through each one's leader ([`every_group`]).
    Every,
    /// Not here: the answer.
    Refused(Response),
}

fn target(s: &AppState, group: Option<u64>) -> Target {
    match group {
        Some(g) => {
            let Some(group) = usize::try_from(g).ok().and_then(|g| s.groups.get(g)) else {
                return Target::Refused(
                    ApiError::BadRequest(format!("no group {g}")).into_response(),
                );
            };
            match s.leader_of(&group.raft) {
                Leader::Me => Target::One(group.raft.clone()),
                // Forwarded here as the group's leader, which this node is not (any more).
                Leader::Other(id, _) => {
                    Target::Refused(ApiError::NoLeader { leader: Some(id) }.into_response())
                }
                Leader::Unknown(leader) => {
                    Target::Refused(ApiError::NoLeader { leader }.into_response())
                }
            }
        }
        None if s.groups.len() > 1 => Target::Every,
        None => match not_leader(s) {
            Some(r) => Target::Refused(r),
            None => Target::One(s.raft.clone()),
        },
    }
}

/// A membership change of every group of a node of several: on each group's leader (here,
/// or forwarded there with `?group=N` and the caller's `Authorization`), one group after
/// another in `order`. Answers group 0's index and every group's, or the first failure: the
/// groups before it changed, and a retry is safe (each group's change is idempotent, and a
/// group that already dropped the node answers 404, counted as done when `absent_done`).
async fn every_group<Fut>(
    s: &AppState,
    headers: &HeaderMap,
    order: Vec<usize>,
    (method, path, body): (reqwest::Method, String, Option<serde_json::Value>),
    absent_done: bool,
    local: impl Fn(KvRaft) -> Fut,
) -> Response
where
    Fut: Future<Output = Response> + Send,
{
    let mut indexes = Vec::new();
    let mut absent = 0;
    for g in order {
        let group = &s.groups[g];
        let resp = match s.leader_of(&group.raft) {
            Leader::Me => local(group.raft.clone()).await,
            Leader::Other(_, node) => {
                let sep = if path.contains('?') { '&' } else { '?' };
                let url = format!("{}{path}{sep}group={g}", s.http.base(&node.api_addr));
                let mut req = s.http.client.request(method.clone(), url);
                if let Some(a) = headers.get(axum::http::header::AUTHORIZATION) {
                    req = req.header(axum::http::header::AUTHORIZATION, a.clone());
                }
                if let Some(b) = &body {
                    req = req.json(b);
                }
                match req.send().await {
                    Ok(r) => {
                        let (status, hdrs) = (r.status(), r.headers().clone());
                        match r.bytes().await {
                            Ok(b) => super::relay(status, &hdrs, b),
                            Err(e) => ApiError::BadGateway(e.to_string()).into_response(),
                        }
                    }
                    Err(e) => ApiError::BadGateway(e.to_string()).into_response(),
                }
            }
            Leader::Unknown(leader) => ApiError::NoLeader { leader }.into_response(),
        };
        if absent_done && resp.status() == axum::http::StatusCode::NOT_FOUND {
            absent += 1;
            continue;
        }
        if !resp.status().is_success() {
            tracing::warn!(group = g, status = %resp.status(), "a membership change failed in this group");
            return resp;
        }
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap_or_default();
        let index = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["index"].as_u64());
        indexes.push(serde_json::json!({ "group": g, "index": index }));
    }
    if absent == s.groups.len() {
        return ApiError::NotFound.into_response();
    }
    let first = indexes.first().map(|v| v["index"].clone()).unwrap_or_default();
    Json(serde_json::json!({ "index": first, "groups": indexes })).into_response()
}

pub async fn add_learner(
    State(s): State<AppState>,
    Query(p): Query<GroupParam>,
    headers: HeaderMap,
    body: Result<Json<AddLearner>, JsonRejection>,
) -> Response {
    let Json(req) = match body {
        Ok(b) => b,
        Err(e) => return ApiError::BadRequest(e.body_text()).into_response(),
    };
    if req.id == 0 {
        return ApiError::BadRequest("node ids start at 1".into()).into_response();
    }
    if let Err(why) = check_addresses(&req) {
        return ApiError::BadRequest(why).into_response();
    }
    let target = target(&s, p.group);
    if let Target::Refused(r) = target {
        return r;
    }
    if s.book.is_removed(req.id) {
        // etcd's rule: a removed id never comes back (its certificate is refused for good).
        return (
            axum::http::StatusCode::CONFLICT,
            Json(serde_json::json!({
                "error": "removed_member",
                "id": req.id,
                "reason": "this id was removed from the cluster and never comes back: add the machine with a new id",
            })),
        )
            .into_response();
    }
    let node = KvNode { raft_addr: req.raft_addr.clone(), api_addr: req.api_addr.clone() };
    let id = req.id;
    let add = move |raft: KvRaft| {
        let node = node.clone();
        async move { changed(raft.add_learner(id, node, true).await, ApiError::Internal) }
    };
    if let Target::One(raft) = target {
        return add(raft).await;
    }
    let body = serde_json::to_value(&req).ok();
    let call = (reqwest::Method::POST, "/v1/cluster/learners".to_string(), body);
    every_group(&s, &headers, (0..s.groups.len()).collect(), call, false, add).await
}

pub async fn change_members(
    State(s): State<AppState>,
    Query(p): Query<GroupParam>,
    headers: HeaderMap,
    body: Result<Json<ChangeMembers>, JsonRejection>,
) -> Response {
    let Json(req) = match body {
        Ok(b) => b,
        Err(e) => return ApiError::BadRequest(e.body_text()).into_response(),
    };
    if req.members.is_empty() {
        return ApiError::BadRequest("a cluster needs at least one voter".into()).into_response();
    }
    let members: BTreeSet<u64> = req.members.iter().copied().collect();
    let change = move |raft: KvRaft| {
        let members = members.clone();
        async move { changed(raft.change_membership(members, false).await, ApiError::BadRequest) }
    };
    match target(&s, p.group) {
        Target::Refused(r) => r,
        Target::One(raft) => change(raft).await,
        Target::Every => {
            let body = serde_json::to_value(&req).ok();
            let call = (reqwest::Method::PUT, "/v1/cluster/members".to_string(), body);
            every_group(&s, &headers, (0..s.groups.len()).collect(), call, false, change).await
        }
    }
}

/// Removes node `id` from the cluster, voter or learner (through the leader; on a node of
/// several groups, from every group, group 0 last: its removal is what puts the id in the
/// peer books, which then refuse its RPCs in every group).
pub async fn remove_member(
    State(s): State<AppState>,
    Query(p): Query<GroupParam>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<u64>,
) -> Response {
    let remove = move |raft: KvRaft| async move {
        let m = raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        let change = if membership.voter_ids().any(|v| v == id) {
            if membership.voter_ids().count() == 1 {
                return ApiError::BadRequest(format!("node {id} is the last voter"))
                    .into_response();
            }
            Change::RemoveVoters(BTreeSet::from([id]))
        } else if membership.learner_ids().any(|l| l == id) {
            Change::RemoveNodes(BTreeSet::from([id]))
        } else {
            return ApiError::NotFound.into_response();
        };
        changed(raft.change_membership(change, false).await, ApiError::BadRequest)
    };
    match target(&s, p.group) {
        Target::Refused(r) => r,
        Target::One(raft) => remove(raft).await,
        Target::Every => {
            let call = (reqwest::Method::DELETE, format!("/v1/cluster/members/{id}"), None);
            let order = (0..s.groups.len()).rev().collect();
            every_group(&s, &headers, order, call, true, remove).await
        }
    }
}

/// The header of `GET /v1/cluster/snapshot` that carries the snapshot's encoded openraft
/// meta (standard base64); the body is the snapshot's bytes as the store keeps them.
pub const SNAPSHOT_META_HEADER: &str = "x-vellum-snapshot-meta";

/// `GET /v1/cluster/snapshot` (`vellum backup`): on the leader, after a ReadIndex barrier, a
/// snapshot covering at least the read index (one is built when the current one is older),
/// as stored: body = data, [`SNAPSHOT_META_HEADER`] = meta. Followers redirect to the
/// leader.
pub async fn snapshot(State(s): State<AppState>) -> Response {
    use base64::Engine as _;
    use vellum_raft_store::v010::openraft::ReadPolicy;
    if let Some(r) = one_group_only(&s, "a backup") {
        return r;
    }
    if let Some(r) = not_leader(&s) {
        return r;
    }
    let read = match s.raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
        Ok(read) => read.index(),
        Err(_) => return ApiError::NoLeader { leader: None }.into_response(),
    };
    let covered =
        |s: &AppState| s.raft.metrics().borrow_watched().snapshot.is_some_and(|l| l.index >= read);
    if !covered(&s) {
        let _ = s.raft.trigger().snapshot().await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !covered(&s) {
            if std::time::Instant::now() > deadline {
                return ApiError::Internal("no snapshot covering the read index in 60 s".into())
                    .into_response();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    let volume = s.volume.clone();
    let exported = tokio::task::spawn_blocking(move || {
        vellum_raft_store::v010::export_snapshot(&volume, &vellum_raft_store::LogConfig::default())
    })
    .await;
    match exported {
        Ok(Ok(Some(snap))) => (
            [
                (axum::http::header::CONTENT_TYPE.as_str(), "application/octet-stream".to_string()),
                (
                    SNAPSHOT_META_HEADER,
                    base64::engine::general_purpose::STANDARD.encode(&snap.meta_bytes),
                ),
            ],
            snap.data,
        )
            .into_response(),
        Ok(Ok(None)) => ApiError::Internal("no snapshot".into()).into_response(),
        Ok(Err(e)) => ApiError::Internal(e.to_string()).into_response(),
        Err(e) => ApiError::Internal(e.to_string()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn learner(raft: &str, api: &str) -> AddLearner {
        AddLearner { id: 4, raft_addr: raft.into(), api_addr: api.into() }
    }

    #[test]
    fn learner_addresses_are_checked() {
        for (raft, api) in [
            ("127.0.0.1:7004", "127.0.0.1:8004"),
            ("[::1]:7004", "db4.example.com:8004"),
            ("10.0.0.4:7004", "node-4:8004"),
        ] {
            assert!(check_addresses(&learner(raft, api)).is_ok(), "{raft} {api}");
        }
        for (raft, api) in [
            ("db4.example.com:7004", "127.0.0.1:8004"),
            ("127.0.0.1", "127.0.0.1:8004"),
            ("127.0.0.1:7004", "127.0.0.1"),
            ("127.0.0.1:7004", "http://x:80"),
            ("127.0.0.1:7004", "a b:80"),
            ("127.0.0.1:7004", "host:0"),
            ("127.0.0.1:7004", ":80"),
            ("127.0.0.1:7004", "x/../y:80"),
            ("", ""),
        ] {
            assert!(check_addresses(&learner(raft, api)).is_err(), "{raft:?} {api:?}");
        }
    }
}
