//! `PUT|GET|DELETE /v1/kv/{*key}` and the prefix read `GET /v1/kv?prefix=P&limit=N`.
//!
//! The key is the rest of the path, percent-decoded: it may contain `/` (`/v1/kv/a/b` and
//! `/v1/kv/a%2Fb` both name the key `a/b`). An empty key (`/v1/kv/`) is a 400. A request
//! forwarded to the leader (or redirected there) keeps its path and query as received,
//! percent-encoding included.
//!
//! A DELETE answers `{"index": N, "found": bool}`: `found` is whether the key was there in
//! the leader's applied state when it proposed the delete (a write of the same key racing
//! the delete may be ordered either way; the delete is applied in any case).
//! The prefix read answers `{"kvs": [{"key", "value"|"value_base64"}], "more": bool}`, keys
//! in byte order, at most `limit` (default 1000, at most 10000) pairs; `more` says the limit
//! cut the result. A value that is not UTF-8 is given as `value_base64` (standard alphabet,
//! padded). It is read like a single key: linearizable, or `consistency=local`.
//!
//! On a node of several Raft groups (`--groups`), a key is read and written through its
//! group's leader (`AppState::group_for`), forwarded there as above. A prefix read asks every
//! group (its leader, with the internal `group=N` parameter that limits a read to one group)
//! and merges their answers in key order.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use vellum_raft_store::ProposeError;
use vellum_raft_store::v010::KvOp;
use vellum_raft_store::v010::openraft::ReadPolicy;
use vellum_raft_store::v010::openraft::errors::{
    ClientWriteError, LinearizableReadError, RaftError,
};

use super::{ApiError, AppState, FORWARDED, Leader, relay};
use crate::server::groups::Group;
use vellum_raft_store::v010::openraft::async_runtime::WatchReceiver;

#[derive(Debug, Default, Clone, Deserialize)]
pub struct Params {
    consistency: Option<String>,
    redirect: Option<String>,
    /// The prefix read's prefix (absent: every key).
    prefix: Option<String>,
    /// The prefix read's most pairs.
    limit: Option<String>,
    /// A prefix read of this group alone (what a node asks each group's leader).
    group: Option<u64>,
}

/// Pairs a prefix read returns when no `limit` is given.
pub const DEFAULT_LIST_LIMIT: usize = 1000;
/// The largest `limit` of a prefix read.
pub const MAX_LIST_LIMIT: usize = 10_000;

pub async fn empty_key() -> Response {
    ApiError::EmptyKey.into_response()
}

fn check_key(s: &AppState, key: &str) -> Result<(), ApiError> {
    if key.is_empty() {
        return Err(ApiError::EmptyKey);
    }
    if key.len() > s.limits.max_key_bytes {
        return Err(ApiError::KeyTooLarge { len: key.len(), max: s.limits.max_key_bytes });
    }
    Ok(())
}

/// Forwards the request to `leader`, or redirects there with `?redirect`.
///
/// The caller's `Authorization` header goes along unchanged (this node checked it already):
/// the leader checks the caller's own authority again, so a follower never lends its own.
/// That needs the same token file on every node; a token the leader does not know gets the
/// leader's 401, relayed. The redirect body names the leader only, never the token.
async fn to_leader(
    s: &AppState,
    leader: Leader,
    method: Method,
    uri: &OriginalUri,
    params: &Params,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let (id, node) = match leader {
        Leader::Other(id, node) => (id, node),
        Leader::Me => return ApiError::Internal("forwarding to ourselves".into()).into_response(),
        Leader::Unknown(leader) => return ApiError::NoLeader { leader }.into_response(),
    };
    let path = uri.0.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{path}", s.http.base(&node.api_addr));
    if params.redirect.is_some() {
        let mut r = (
            StatusCode::TEMPORARY_REDIRECT,
            axum::Json(serde_json::json!({ "leader": id, "location": url })),
        )
            .into_response();
        if let Ok(v) = HeaderValue::from_str(&url) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        return r;
    }
    if headers.contains_key(FORWARDED) {
        // One hop only: the node we were sent to is not the leader either.
        return ApiError::NoLeader { leader: Some(id) }.into_response();
    }
    let method =
        reqwest::Method::from_bytes(method.as_str().as_bytes()).unwrap_or(reqwest::Method::GET);
    let mut forward = s.http.client.request(method, &url).header(FORWARDED, s.id.to_string());
    if let Some(authorization) = headers.get(header::AUTHORIZATION) {
        let mut authorization = authorization.clone();
        authorization.set_sensitive(true);
        forward = forward.header(header::AUTHORIZATION, authorization);
    }
    match forward.body(body).send().await {
        Ok(resp) => {
            let (status, hdrs) = (resp.status(), resp.headers().clone());
            match resp.bytes().await {
                Ok(b) => relay(status, &hdrs, b),
                Err(e) => ApiError::BadGateway(e.to_string()).into_response(),
            }
        }
        Err(e) => ApiError::BadGateway(e.to_string()).into_response(),
    }
}

/// Proposes `op` on this node, the leader as far as it knows, through the proposal batcher:
/// concurrent writes share one log entry (openraft 0.10 would make them one durable write
/// anyway, but every entry costs its own encoding, replication and apply). `Err` is where
/// openraft says the write must go instead (it was not appended here). The batcher counts
/// the proposals and times the `queued` and `raft_write` stages.
async fn propose(s: &AppState, group: &Group, op: KvOp) -> Result<Response, Leader> {
    // A delete says whether the key was there (as the leader's applied state has it now).
    let found = match &op {
        KvOp::Delete { key } => Some(group.kv.get(key).is_some()),
        KvOp::Put { .. } => None,
    };
    match group.proposer.propose(op).await {
        Ok(p) => Ok(axum::Json(match found {
            Some(found) => serde_json::json!({ "index": p.log_index, "found": found }),
            None => serde_json::json!({ "index": p.log_index }),
        })
        .into_response()),
        Err(ProposeError::NotLeader { leader_id, leader_node }) => {
            Err(s.forward_to(leader_id, leader_node.as_ref()))
        }
        Err(ProposeError::Raft(RaftError::APIError(ClientWriteError::LogEntryDiscarded(f)))) => {
            // Appended here, then truncated by another leader's log: it may have committed
            // through that leader, or not. Not forwarded: a retry could apply it twice.
            let leader = f.leader_id;
            Ok(ApiError::OutcomeUnknown { leader }.into_response())
        }
        Err(e) => Ok(ApiError::Internal(e.to_string()).into_response()),
    }
}

async fn write(
    s: AppState,
    method: Method,
    uri: OriginalUri,
    params: Params,
    headers: HeaderMap,
    body: Bytes,
    op: KvOp,
) -> Response {
    // Commit latency is measured where the client's write was accepted, forwarded or not,
    // until it is committed and applied (the leader's answer).
    let accepted = std::time::Instant::now();
    let counted = !headers.contains_key(FORWARDED) && params.redirect.is_none();
    let resp = write_inner(s, method, uri, params, headers, body, op).await;
    if counted && resp.status().is_success() {
        metrics::histogram!(crate::server::metrics::COMMIT_DURATION)
            .record(accepted.elapsed().as_secs_f64());
    }
    resp
}

async fn write_inner(
    s: AppState,
    method: Method,
    uri: OriginalUri,
    params: Params,
    headers: HeaderMap,
    body: Bytes,
    op: KvOp,
) -> Response {
    if !s.health.core_running() {
        return ApiError::RaftStopped.into_response();
    }
    // Refused on every node it passes, and on every node that heard a peer's volume refuse
    // it (`space.rs`); deletes pass until less than a log segment is left.
    if let Some(no_room) = s.space.refusal(matches!(op, KvOp::Put { .. })) {
        return ApiError::NoSpace(no_room).into_response();
    }
    let key = match &op {
        KvOp::Put { key, .. } | KvOp::Delete { key } => key.clone(),
    };
    let group = s.group_for(&key).clone();
    let leader = match s.leader_of(&group) {
        Leader::Me => {
            if matches!(op, KvOp::Delete { .. })
                && s.space.puts_refused()
                && let Some(r) = delete_of_missing_key(&group, &key).await
            {
                return r;
            }
            match propose(&s, &group, op).await {
                Ok(r) => return r,
                // Not the leader (any more), or not a writable one yet: where openraft says.
                Err(leader) => leader,
            }
        }
        other => other,
    };
    to_leader(&s, leader, method, &uri, &params, &headers, body).await
}

/// On a volume that refuses puts, a delete of a key that is not there writes nothing: every
/// log entry takes whole blocks, and deletes of missing keys (a client's retries, a cleanup
/// job going over its list again) would use up the room that the deletes that free space
/// need. A linearizable read (ReadIndex, as `GET` does) finds the key missing, and the
/// delete is answered as what it is at that point, a no-op: `found: false` and the index
/// read at. `None` for a key that is there (deleted through the log, as always), and where
/// the read fails (this node is not the leader any more: the proposal finds out where to
/// go).
async fn delete_of_missing_key(group: &Group, key: &str) -> Option<Response> {
    let read = group.raft.ensure_linearizable(ReadPolicy::ReadIndex).await.ok()?;
    if group.kv.get(key).is_some() {
        return None;
    }
    metrics::counter!(crate::server::metrics::DELETES_OF_MISSING_KEYS).increment(1);
    let index = read.index();
    Some(axum::Json(serde_json::json!({ "index": index, "found": false })).into_response())
}

pub async fn put(
    State(s): State<AppState>,
    method: Method,
    uri: OriginalUri,
    Path(key): Path<String>,
    Query(params): Query<Params>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if let Err(e) = check_key(&s, &key) {
        return e.into_response();
    }
    let body = match body {
        Ok(b) if b.len() <= s.limits.max_value_bytes => b,
        Ok(_) => return ApiError::ValueTooLarge { max: s.limits.max_value_bytes }.into_response(),
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return ApiError::ValueTooLarge { max: s.limits.max_value_bytes }.into_response();
        }
        Err(e) => return ApiError::BadRequest(e.body_text()).into_response(),
    };
    let op = KvOp::Put { key, value: body.to_vec() };
    write(s, method, uri, params, headers, body, op).await
}

pub async fn delete(
    State(s): State<AppState>,
    method: Method,
    uri: OriginalUri,
    Path(key): Path<String>,
    Query(params): Query<Params>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = check_key(&s, &key) {
        return e.into_response();
    }
    let op = KvOp::Delete { key };
    write(s, method, uri, params, headers, Bytes::new(), op).await
}

/// A read, answered by `answer` once its consistency holds, or by the leader. With
/// `consistency=local` this node's applied state answers at once; by default the read is
/// linearizable: on the leader a quorum confirms the leadership after the read arrived
/// (ReadIndex, 0.9's `ensure_linearizable()`) and the state machine applies up to the read's
/// index first; a follower forwards the request (or redirects it) to the leader.
async fn read(
    s: &AppState,
    group: &Group,
    method: Method,
    uri: &OriginalUri,
    params: &Params,
    headers: &HeaderMap,
    answer: impl FnOnce(&AppState) -> Response,
) -> Response {
    if !s.health.core_running() {
        // The local state machine no longer follows the log: nothing is served from it.
        return ApiError::RaftStopped.into_response();
    }
    let raft = &group.raft;
    match params.consistency.as_deref() {
        // A node that holds no replica of the group (moved to other members) has no state
        // of it to answer from: the leader answers.
        Some("local") if holds_replica(s, group) => return answer(s),
        Some("local") => {}
        None | Some("linearizable") => {}
        Some(other) => {
            return ApiError::BadRequest(format!(
                "consistency must be linearizable or local, not {other}"
            ))
            .into_response();
        }
    }
    let leader = match s.leader_of(group) {
        Leader::Me => match raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
            Ok(_) => return answer(s),
            Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f))) => {
                s.forward_target(&f)
            }
            Err(_) => return ApiError::NoLeader { leader: None }.into_response(),
        },
        other => other,
    };
    to_leader(s, leader, method, uri, params, headers, Bytes::new()).await
}

/// Whether this node holds a voting replica of `group`, as it sees it (a learner's state may
/// be one the group left behind: it may not have heard that it was dropped).
fn holds_replica(s: &AppState, group: &Group) -> bool {
    crate::server::directory::votes_in(&group.raft.metrics().borrow_watched(), s.id)
}

fn value_response(value: Option<Vec<u8>>) -> Response {
    match value {
        Some(v) => ([(header::CONTENT_TYPE, "application/octet-stream")], v).into_response(),
        None => ApiError::NotFound.into_response(),
    }
}

pub async fn get(
    State(s): State<AppState>,
    method: Method,
    uri: OriginalUri,
    Path(key): Path<String>,
    Query(params): Query<Params>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = check_key(&s, &key) {
        return e.into_response();
    }
    let group = s.group_for(&key).clone();
    read(&s, &group, method, &uri, &params, &headers, |_| value_response(group.kv.get(&key))).await
}

/// The body of a prefix read: `limit` pairs at most from `group` under `prefix`.
fn list_response(group: &Group, prefix: &str, limit: usize) -> Response {
    let (pairs, more) = group.kv.range(prefix, limit);
    let kvs: Vec<serde_json::Value> = pairs
        .into_iter()
        .map(|(key, value)| match String::from_utf8(value) {
            Ok(text) => serde_json::json!({ "key": key, "value": text }),
            Err(e) => {
                serde_json::json!({ "key": key, "value_base64": STANDARD.encode(e.as_bytes()) })
            }
        })
        .collect();
    axum::Json(serde_json::json!({ "kvs": kvs, "more": more })).into_response()
}

/// `GET /v1/kv?prefix=P&limit=N`: the keys under a prefix, read like a single key.
pub async fn list(
    State(s): State<AppState>,
    method: Method,
    uri: OriginalUri,
    Query(params): Query<Params>,
    headers: HeaderMap,
) -> Response {
    let limit = match params.limit.as_deref().map(str::parse::<usize>) {
        None => DEFAULT_LIST_LIMIT,
        Some(Ok(n)) if (1..=MAX_LIST_LIMIT).contains(&n) => n,
        Some(_) => {
            return ApiError::BadRequest(format!(
                "limit must be a number from 1 to {MAX_LIST_LIMIT}"
            ))
            .into_response();
        }
    };
    let prefix = params.prefix.clone().unwrap_or_default();
    if prefix.len() > s.limits.max_key_bytes {
        return ApiError::KeyTooLarge { len: prefix.len(), max: s.limits.max_key_bytes }
            .into_response();
    }
    let one = match params.group {
        Some(g) => match usize::try_from(g).ok().and_then(|g| s.groups.get(g)) {
            Some(group) => Some(group),
            None => return ApiError::BadRequest(format!("no group {g}")).into_response(),
        },
        None if s.groups.len() == 1 => Some(s.groups.at(0)),
        None => None,
    };
    if let Some(group) = one {
        return read(&s, &group, method, &uri, &params, &headers, |_| {
            list_response(&group, &prefix, limit)
        })
        .await;
    }
    list_groups(&s, &method, &uri, &params, &headers, limit).await
}

/// A prefix read over every group: each group's answer (`group=N`, from its leader as
/// [`read`] finds it), merged in key order and cut at `limit`. The first group that cannot
/// answer answers for all (a 503 without a leader, say).
async fn list_groups(
    s: &AppState,
    method: &Method,
    uri: &OriginalUri,
    params: &Params,
    headers: &HeaderMap,
    limit: usize,
) -> Response {
    let query = uri.0.query().unwrap_or("");
    let sep = if query.is_empty() { "" } else { "&" };
    let mut reads = tokio::task::JoinSet::new();
    for group in s.groups.all() {
        let one = format!("{}?{query}{sep}group={}", uri.0.path(), group.id);
        let (s, method, headers) = (s.clone(), method.clone(), headers.clone());
        // One group's read is never a redirect: the client asked this node for all of them.
        let params = Params { group: Some(group.id), redirect: None, ..params.clone() };
        reads.spawn(async move {
            let Ok(one) = one.parse::<axum::http::Uri>() else {
                return ApiError::Internal("a group's prefix read URI".into()).into_response();
            };
            let prefix = params.prefix.clone().unwrap_or_default();
            read(&s, &group, method, &OriginalUri(one), &params, &headers, |_| {
                list_response(&group, &prefix, limit)
            })
            .await
        });
    }
    let answers = reads.join_all().await;
    let mut kvs: Vec<serde_json::Value> = Vec::new();
    let mut more = false;
    for answer in answers {
        if !answer.status().is_success() {
            return answer;
        }
        let body = match axum::body::to_bytes(answer.into_body(), usize::MAX).await {
            Ok(b) => b,
            Err(e) => return ApiError::BadGateway(e.to_string()).into_response(),
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else {
            return ApiError::BadGateway("a group's prefix read answered no JSON".into())
                .into_response();
        };
        more |= v["more"].as_bool().unwrap_or(false);
        if let Some(a) = v["kvs"].as_array() {
            kvs.extend(a.iter().cloned());
        }
    }
    kvs.sort_by(|a, b| a["key"].as_str().cmp(&b["key"].as_str()));
    if kvs.len() > limit {
        kvs.truncate(limit);
        more = true;
    }
    axum::Json(serde_json::json!({ "kvs": kvs, "more": more })).into_response()
}
