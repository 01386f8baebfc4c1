//! `GET /v1/cluster/status`, `POST /v1/cluster/learners`, `PUT /v1/cluster/members`,
//! `DELETE /v1/cluster/members/{id}`, `POST /v1/cluster/rebalance`, `POST /v1/cluster/move`.
//!
//! The status is group 0's (the cluster's membership) at its top level, and lists every Raft
//! group (`groups`: leader, term, applied index, voters, learners) on a node of several
//! (`--groups`); a group this node does not vote in is shown as the directory heard it from
//! its voters (`directory.rs`). On such a node a membership change without `?group=N` runs
//! on every group, each through its leader (`every_group`); a move ([`move_replica`]) changes
//! one group's replicas, on its leader: learner, catch up, swap the voters, drop the old
//! replica. Backups are built for one group and answer 501 (`not_with_groups`) rather than
//! save group 0 alone.

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
use vellum_raft_store::v010::openraft::{ChangeMembers as Change, RaftMetrics, ServerState};
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
    /// The group's voters and learners (its replicas).
    #[serde(default)]
    pub voters: Vec<u64>,
    #[serde(default)]
    pub learners: Vec<u64>,
    /// Whether this node's Raft of the group may campaign: a voter of the effective or of
    /// the committed membership as it knows them (a replica moved away stops once it knows
    /// the change committed).
    #[serde(default)]
    pub electable: bool,
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

/// `?fresh`: on a node of several groups, ask the other members for the groups this node
/// holds no replica of before answering (`directory.rs`), rather than answer what the last
/// poll heard (at most a second old).
#[derive(Debug, Default, Deserialize)]
pub struct StatusParams {
    fresh: Option<String>,
}

pub async fn status(State(s): State<AppState>, Query(p): Query<StatusParams>) -> Response {
    if p.fresh.is_some() && s.groups.len() > 1 {
        s.directory.refresh().await;
    }
    let m = s.raft.metrics().borrow_watched().clone();
    let membership = m.membership_config.membership();
    let voters: BTreeSet<u64> = membership.voter_ids().collect();
    let learners: Vec<u64> = membership.learner_ids().collect();
    let role = role_name(m.state);
    let groups = s
        .groups
        .all()
        .into_iter()
        .map(|g| {
            let m = g.raft.metrics().borrow_watched().clone();
            let view = s.directory.resolve(g.id, s.id, &m);
            let electable = m.membership_config.membership().voter_ids().any(|v| v == s.id)
                || m.committed_membership_config.membership().voter_ids().any(|v| v == s.id);
            let here = view.voters.contains(&s.id) || view.learners.contains(&s.id);
            GroupStatus {
                group: g.id,
                leader: view.leader,
                term: view.term,
                role: if here { role_name(m.state) } else { "none" }.into(),
                last_log_index: m.last_log_index,
                applied_index: m.last_applied.map(|l| l.index),
                voters: view.voters,
                learners: view.learners,
                electable,
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
            match s.leader_of(&group) {
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

/// How long a membership change of every group waits for a group that has no reachable
/// leader.
const GROUP_LEADER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

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
        let group = &s.groups.at(g);
        // A group whose leader just died (the member being removed, say) answers 502 or 503
        // until it elects another: asked again for a while.
        let deadline = tokio::time::Instant::now() + GROUP_LEADER_WAIT;
        let resp = loop {
            let resp = match s.leader_of(group) {
                Leader::Me => local(group.raft.clone()).await,
                Leader::Other(_, node) => {
                    let sep = if path.contains('?') { '&' } else { '?' };
                    let url = format!("{}{path}{sep}group={g}", s.http.base(&node.api_addr));
                    forward(s, headers, method.clone(), url, body.as_ref()).await
                }
                Leader::Unknown(leader) => ApiError::NoLeader { leader }.into_response(),
            };
            let retry = matches!(resp.status().as_u16(), 502 | 503);
            if !retry || tokio::time::Instant::now() >= deadline {
                break resp;
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
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

/// Sends a cluster request on to another member with the caller's `Authorization`, and
/// relays its answer.
async fn forward(
    s: &AppState,
    headers: &HeaderMap,
    method: reqwest::Method,
    url: String,
    body: Option<&serde_json::Value>,
) -> Response {
    let mut req = s.http.client.request(method, url).header(super::FORWARDED, s.id.to_string());
    if let Some(a) = headers.get(axum::http::header::AUTHORIZATION) {
        req = req.header(axum::http::header::AUTHORIZATION, a.clone());
    }
    if let Some(b) = body {
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
    // With several groups the learner may be a member that released one of them: it starts
    // from a snapshot ([`compact_first`]).
    let sharded = s.groups.len() > 1;
    let group = p.group;
    let add = move |raft: KvRaft| {
        let node = node.clone();
        async move {
            if sharded && let Err(r) = compact_first(&raft, group).await {
                return *r;
            }
            changed(raft.add_learner(id, node, true).await, ApiError::Internal)
        }
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

/// `POST /v1/cluster/move`: move group `group`'s replica on node `from` to node `to`; without
/// `from`, add a replica on `to`; without `to`, drop the one on `from`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Move {
    pub group: u64,
    #[serde(default)]
    pub from: Option<u64>,
    #[serde(default)]
    pub to: Option<u64>,
}

/// How recently the group's leader must have heard from the replica that moves away: a move
/// needs it running, so that it learns it is no longer a voter (a replica that never hears
/// of the move would go on asking for votes).
const MOVE_HEARD_WITHIN: std::time::Duration = std::time::Duration::from_secs(3);
/// How long a leader whose own replica moves waits for the leadership it hands over.
const HANDOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// `POST /v1/cluster/move` (`vellum cluster move`, `vellum cluster spread`): on group
/// `group`'s leader (forwarded there once), moves its replica from node `from` to node `to`
/// (a member of the cluster that holds no replica of the group): `to` joins as a learner and
/// catches up (openraft's blocking `add_learner`), the voters become the old ones with `to`
/// in place of `from`, `from` kept as a learner until it knows the change committed
/// ([`settle`]: else it would never hear it, and campaign for ever), then dropped. Without
/// `from` the new replica is added; without `to` the old one is dropped (never the last).
/// When the leader is `from` itself, it hands its leadership to another voter first and
/// answers 503 (`no_leader`, naming the new leader): the caller asks again. Safe to repeat:
/// a move already done answers what it did, one half done is finished. Group 0 holds every
/// member and never moves.
pub async fn move_replica(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<Move>, JsonRejection>,
) -> Response {
    let Json(req) = match body {
        Ok(b) => b,
        Err(e) => return ApiError::BadRequest(e.body_text()).into_response(),
    };
    let Move { group: g, from, to } = req;
    let Some(group) = usize::try_from(g).ok().and_then(|i| s.groups.get(i)) else {
        return ApiError::BadRequest(format!("no group {g} (groups 0..{})", s.groups.len()))
            .into_response();
    };
    if g == 0 {
        return ApiError::BadRequest(
            "group 0 holds every member of the cluster and does not move: add and remove \
             members with vellum cluster add-node / remove"
                .into(),
        )
        .into_response();
    }
    if from.is_none() && to.is_none() || from == to {
        return ApiError::BadRequest("a move names a node to move from, to, or both".into())
            .into_response();
    }
    let raft = match s.leader_of(&group) {
        Leader::Me => group.raft.clone(),
        Leader::Other(_, node) if !headers.contains_key(super::FORWARDED) => {
            let url = format!("{}/v1/cluster/move", s.http.base(&node.api_addr));
            let body = serde_json::to_value(&req).ok();
            return forward(&s, &headers, reqwest::Method::POST, url, body.as_ref()).await;
        }
        Leader::Other(id, _) => return ApiError::NoLeader { leader: Some(id) }.into_response(),
        Leader::Unknown(leader) => return ApiError::NoLeader { leader }.into_response(),
    };
    let Some(_moving) = s.moving.start(g) else {
        return ApiError::Unavailable(format!("a move of group {g} runs already")).into_response();
    };
    let mut m = raft.metrics().borrow_watched().clone();
    if let Some(last) = m.membership_config.membership().get_joint_config().get(1).cloned() {
        // A change left joint (its leader lost the leadership in the middle): finish it at
        // the configuration it was going to, before anything else.
        tracing::info!(group = g, voters = ?last, "finishing a membership change left joint");
        if let Err(r) = changed_ok(raft.change_membership(last, true).await) {
            return *r;
        }
        m = raft.metrics().borrow_watched().clone();
    }
    let membership = m.membership_config.membership().clone();
    let voters: BTreeSet<u64> = membership.voter_ids().collect();
    let learners: BTreeSet<u64> = membership.learner_ids().collect();
    let done = |index: Option<u64>| {
        Json(serde_json::json!({ "group": g, "from": from, "to": to, "index": index }))
            .into_response()
    };
    let from_gone = from.is_none_or(|f| !voters.contains(&f));
    if from_gone && to.is_none_or(|t| voters.contains(&t)) {
        // Done already; only the old replica's learner seat may be left.
        let Some(f) = from.filter(|f| learners.contains(f)) else { return done(None) };
        let r = raft.change_membership(Change::RemoveNodes(BTreeSet::from([f])), false).await;
        return changed_then(r, done);
    }
    if let Some(f) = from.filter(|f| !voters.contains(f)) {
        return ApiError::BadRequest(format!("node {f} holds no replica of group {g}"))
            .into_response();
    }
    if let Some(t) = to.filter(|t| voters.contains(t)) {
        return ApiError::BadRequest(format!("node {t} holds a replica of group {g} already"))
            .into_response();
    }
    let mut next = voters.clone();
    next.extend(to);
    if let Some(f) = from {
        next.remove(&f);
    }
    if next.is_empty() {
        return ApiError::BadRequest(format!("group {g}'s last replica is not dropped"))
            .into_response();
    }
    let node = match to {
        None => None,
        Some(t) => match s.nodes().remove(&t) {
            Some(node) => Some((t, node)),
            None => {
                return ApiError::BadRequest(format!(
                    "node {t} is not a member of the cluster: add it first (vellum cluster \
                     add-node)"
                ))
                .into_response();
            }
        },
    };
    if let Some(f) = from {
        if f == s.id {
            return hand_over(&raft, &voters, f).await;
        }
        if !crate::server::groups::heard_from(&m, s.id, MOVE_HEARD_WITHIN).contains(&f) {
            return ApiError::Unavailable(format!(
                "the leader of group {g} has not heard from node {f} within \
                 {MOVE_HEARD_WITHIN:?}: a replica moves away only from a running node (a \
                 node that is gone for good is removed with vellum cluster remove)"
            ))
            .into_response();
        }
    }
    if let Some((t, node)) = node {
        if let Err(r) = compact_first(&raft, Some(g)).await {
            return *r;
        }
        tracing::info!(group = g, ?from, to = t, "replica move: the new one joins as a learner");
        if let Err(r) = changed_ok(raft.add_learner(t, node, true).await) {
            return *r;
        }
    }
    tracing::info!(group = g, ?from, ?to, "replica move: changing the voters");
    let r = raft.change_membership(next, true).await;
    let Some(f) = from else {
        metrics::counter!(crate::server::groups::REPLICA_MOVES).increment(u64::from(r.is_ok()));
        return changed_then(r, done);
    };
    if let Err(r) = changed_ok(r) {
        return *r;
    }
    settle(&s, &headers, g, f).await;
    let r = raft.change_membership(Change::RemoveNodes(BTreeSet::from([f])), false).await;
    tracing::info!(group = g, from = f, ?to, ok = r.is_ok(), "replica move done");
    metrics::counter!(crate::server::groups::REPLICA_MOVES).increment(u64::from(r.is_ok()));
    changed_then(r, done)
}

/// How long a move waits for the group's snapshot, and then for its purge, before it adds a
/// replica.
const COMPACT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Snapshots group `g` and purges its log up to the snapshot (each waited for, at most
/// [`COMPACT_WAIT`]), before a replica is added: the new replica starts from the snapshot,
/// whose membership is the group's current one. From the log's first entry it would replay
/// the group's old memberships, and a member that held the group before and released it
/// since (`release.rs`) would be a voter in one of them again, with a short log: it would
/// refuse the appends of a leader that membership does not name (`member::authority`), and
/// it could grant its vote to a stale voter of that membership, which a voter that lost its
/// log must never do. So a replica is not added (503, retryable) until the log is purged.
async fn compact_first(raft: &KvRaft, g: Option<u64>) -> Result<(), Box<Response>> {
    let m = raft.metrics().borrow_watched().clone();
    let applied = m.last_applied.map_or(0, |l| l.index);
    if applied == 0 || m.purged.is_some_and(|p| p.index >= applied) {
        return Ok(());
    }
    let unavailable = |what: String| Box::new(ApiError::Unavailable(what).into_response());
    let name = g.map_or_else(|| "the group".to_string(), |g| format!("group {g}"));
    let deadline = tokio::time::Instant::now() + COMPACT_WAIT;
    if m.snapshot.is_none_or(|s| s.index < applied) {
        tracing::info!(group = ?g, applied, "adding a replica: a snapshot of the group first");
        raft.trigger()
            .snapshot()
            .await
            .map_err(|e| unavailable(format!("{name}'s snapshot for the new replica: {e}")))?;
        let built = |m: &RaftMetrics<TypeConfig>| m.snapshot.is_some_and(|s| s.index >= applied);
        if !wait_metrics(raft, deadline, built).await {
            return Err(unavailable(format!(
                "{name}'s snapshot for the new replica is not built in {COMPACT_WAIT:?}"
            )));
        }
    }
    let upto = raft.metrics().borrow_watched().snapshot.map_or(0, |s| s.index);
    raft.trigger()
        .purge_log(upto)
        .await
        .map_err(|e| unavailable(format!("{name}'s purge for the new replica: {e}")))?;
    let purged = |m: &RaftMetrics<TypeConfig>| m.purged.is_some_and(|p| p.index >= upto);
    if !wait_metrics(raft, deadline, purged).await {
        return Err(unavailable(format!(
            "{name}'s log is not purged up to its snapshot in {COMPACT_WAIT:?} (a follower \
             still reading it): the new replica would replay old memberships"
        )));
    }
    Ok(())
}

/// Waits until `done` holds of `raft`'s metrics, or `deadline` (false).
async fn wait_metrics(
    raft: &KvRaft,
    deadline: tokio::time::Instant,
    done: impl Fn(&RaftMetrics<TypeConfig>) -> bool,
) -> bool {
    let mut rx = raft.metrics();
    loop {
        if done(&rx.borrow_watched()) {
            return true;
        }
        if tokio::time::timeout_at(deadline, rx.changed()).await.is_err() {
            return false;
        }
    }
}

/// How long a move waits for the old replica to know that it no longer votes.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits (at most [`SETTLE_WAIT`]) until node `from`'s status says its replica of group `g`
/// is not `electable`: it holds the committed membership in which it is a learner. Dropped
/// before that, it would never hear that the change committed (a group replicates to its
/// members only), and would campaign in the group for ever.
async fn settle(s: &AppState, headers: &HeaderMap, g: u64, from: u64) {
    let Some(node) = s.nodes().remove(&from) else { return };
    let url = format!("{}/v1/cluster/status", s.http.base(&node.api_addr));
    let deadline = tokio::time::Instant::now() + SETTLE_WAIT;
    while tokio::time::Instant::now() < deadline {
        let mut req = s.http.client.get(&url);
        if let Some(a) = headers.get(axum::http::header::AUTHORIZATION) {
            req = req.header(axum::http::header::AUTHORIZATION, a.clone());
        }
        if let Ok(r) = req.send().await
            && let Ok(status) = r.json::<Status>().await
            && status.groups.iter().any(|x| x.group == g && !x.electable)
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tracing::warn!(
        group = g,
        from,
        "the replica that moved away did not confirm that it no longer votes: dropping it anyway"
    );
}

/// The leader's own replica moves: hands the group's leadership to another voter heard from
/// lately, waits (at most [`HANDOVER_WAIT`]) until another leads, and answers 503 naming it.
async fn hand_over(raft: &KvRaft, voters: &BTreeSet<u64>, me: u64) -> Response {
    let m = raft.metrics().borrow_watched().clone();
    let heard = crate::server::groups::heard_from(&m, me, MOVE_HEARD_WITHIN);
    let Some(&to) = voters.iter().find(|v| **v != me && heard.contains(v)) else {
        return ApiError::Unavailable(
            "no other voter of the group is heard from: its leader cannot hand over".into(),
        )
        .into_response();
    };
    tracing::info!(to, "moving this leader's replica: handing the group's leadership over first");
    if let Err(e) = raft.trigger().transfer_leader(to).await {
        return ApiError::Internal(format!("leader transfer: {e}")).into_response();
    }
    let deadline = tokio::time::Instant::now() + HANDOVER_WAIT;
    let mut rx = raft.metrics();
    loop {
        let leader = rx.borrow_watched().current_leader;
        if leader.is_some_and(|l| l != me) {
            return ApiError::NoLeader { leader }.into_response();
        }
        if tokio::time::timeout_at(deadline, rx.changed()).await.is_err() {
            return ApiError::NoLeader { leader: None }.into_response();
        }
    }
}

/// A membership change's failure as the answer to send, or `Ok` to go on.
fn changed_ok(
    result: Result<
        ClientWriteResponse<TypeConfig>,
        RaftError<TypeConfig, ClientWriteError<TypeConfig>>,
    >,
) -> Result<(), Box<Response>> {
    match result {
        Ok(_) => Ok(()),
        Err(e) => Err(Box::new(changed(Err(e), ApiError::BadRequest))),
    }
}

/// A membership change's answer: `done` with its index, or its failure.
fn changed_then(
    result: Result<
        ClientWriteResponse<TypeConfig>,
        RaftError<TypeConfig, ClientWriteError<TypeConfig>>,
    >,
    done: impl FnOnce(Option<u64>) -> Response,
) -> Response {
    match result {
        Ok(r) => done(Some(r.log_id.index)),
        Err(e) => changed(Err(e), ApiError::BadRequest),
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
