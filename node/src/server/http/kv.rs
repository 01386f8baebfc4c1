//! `PUT|GET|DELETE /v1/kv/{key}`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use vellum_raft_store::{KvOp, ProposeError, TypeConfig};

use super::{ApiError, AppState, FORWARDED, Leader, relay};

#[derive(Debug, Default, Deserialize)]
pub struct Params {
    consistency: Option<String>,
    redirect: Option<String>,
}

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

/// Forwards the request to the leader, or redirects there with `?redirect`.
async fn to_leader(
    s: &AppState,
    method: Method,
    uri: &OriginalUri,
    params: &Params,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let (id, node) = match s.leader() {
        Leader::Other(id, node) => (id, node),
        Leader::Me => return ApiError::Internal("forwarding to ourselves".into()).into_response(),
        Leader::Unknown(leader) => return ApiError::NoLeader { leader }.into_response(),
    };
    let path = uri.0.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("http://{}{path}", node.api_addr);
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
    match s.http.request(method, &url).header(FORWARDED, s.id.to_string()).body(body).send().await {
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

async fn propose(s: &AppState, op: KvOp) -> Result<Response, ProposeError<TypeConfig>> {
    let proposed = s.proposer.propose(op).await?;
    Ok(axum::Json(serde_json::json!({ "index": proposed.log_index })).into_response())
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
    if matches!(s.leader(), Leader::Me) {
        match propose(&s, op).await {
            Ok(r) => return r,
            Err(ProposeError::NotLeader { .. }) => {} // lost leadership meanwhile: forward
            Err(why) => return ApiError::Internal(why.to_string()).into_response(),
        }
    }
    to_leader(&s, method, &uri, &params, &headers, body).await
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
    match params.consistency.as_deref() {
        Some("local") => return value_response(s.kv.get(&key)),
        None | Some("linearizable") => {}
        Some(other) => {
            return ApiError::BadRequest(format!(
                "consistency must be linearizable or local, not {other}"
            ))
            .into_response();
        }
    }
    if matches!(s.leader(), Leader::Me) {
        match s.raft.ensure_linearizable().await {
            Ok(_) => return value_response(s.kv.get(&key)),
            Err(e) => {
                if e.forward_to_leader().is_none() {
                    return ApiError::NoLeader { leader: None }.into_response();
                }
            }
        }
    }
    to_leader(&s, method, &uri, &params, &headers, Bytes::new()).await
}
