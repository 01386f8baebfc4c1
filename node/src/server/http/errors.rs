//! API errors: a JSON body `{"error": "...", ...}` and the HTTP status a client can act on.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::security::tokens::{Refused, Role};
use crate::server::space::NoRoom;

/// What went wrong with a request.
#[derive(Debug)]
pub enum ApiError {
    /// No leader is known (an election is on, or no quorum): retry.
    NoLeader {
        leader: Option<u64>,
    },
    /// The leader accepted the write into its log, then lost it to another leader's log
    /// (openraft's `LogEntryDiscarded`): it may or may not have been applied. Retry only if
    /// applying it twice is harmless (a put of the same value, a delete).
    OutcomeUnknown {
        leader: Option<u64>,
    },
    /// The node has no leader yet, or has not applied what it committed before.
    NotReady,
    /// The Raft core stopped: the node serves nothing and is about to exit (code 4).
    RaftStopped,
    NotFound,
    NoRoute,
    MethodNotAllowed,
    EmptyKey,
    KeyTooLarge {
        len: usize,
        max: usize,
    },
    ValueTooLarge {
        max: usize,
    },
    BadRequest(String),
    /// No usable bearer token (the tokens are on): missing, malformed or unknown, as the
    /// reason says. Never quotes the token.
    Unauthorized(&'static str),
    /// The token's role is below the one the route needs.
    Forbidden {
        role: Role,
        needs: Role,
    },
    /// The leader could not be reached to forward to.
    BadGateway(String),
    Internal(String),
    /// What this route does is not built for a node of several Raft groups (`--groups`).
    NotWithGroups(&'static str),
    /// What the request needs is not there now (a node down, no voter to hand over to): it
    /// may work later, as the reason says.
    Unavailable(String),
    /// The free space of this node's volume, or of a member's that said so, is below what
    /// the next snapshots need: puts are refused until keys are deleted or the volume has
    /// more space.
    NoSpace(NoRoom),
}

impl From<Refused> for ApiError {
    fn from(refused: Refused) -> ApiError {
        match refused {
            Refused::Unauthorized(why) => ApiError::Unauthorized(why),
            Refused::Forbidden { role, needs } => ApiError::Forbidden { role, needs },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            ApiError::NoLeader { leader } => {
                (StatusCode::SERVICE_UNAVAILABLE, json!({ "error": "no_leader", "leader": leader }))
            }
            ApiError::OutcomeUnknown { leader } => (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({
                    "error": "outcome_unknown",
                    "reason": "the leader lost this write's log entry to a leader change: the \
                               write may or may not have been applied; read the key to find out",
                    "leader": leader,
                }),
            ),
            ApiError::NotReady => {
                (StatusCode::SERVICE_UNAVAILABLE, json!({ "error": "not_ready" }))
            }
            ApiError::RaftStopped => (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({
                    "error": "raft_stopped",
                    "reason": "this node's Raft core stopped; the node is exiting (code 4)",
                }),
            ),
            ApiError::NotFound => (StatusCode::NOT_FOUND, json!({ "error": "not_found" })),
            ApiError::NoRoute => (StatusCode::NOT_FOUND, json!({ "error": "no_route" })),
            ApiError::MethodNotAllowed => {
                (StatusCode::METHOD_NOT_ALLOWED, json!({ "error": "method_not_allowed" }))
            }
            ApiError::EmptyKey => (StatusCode::BAD_REQUEST, json!({ "error": "empty_key" })),
            ApiError::KeyTooLarge { len, max } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                json!({ "error": "key_too_large", "len": len, "max": max }),
            ),
            ApiError::ValueTooLarge { max } => {
                (StatusCode::PAYLOAD_TOO_LARGE, json!({ "error": "value_too_large", "max": max }))
            }
            ApiError::BadRequest(why) => {
                (StatusCode::BAD_REQUEST, json!({ "error": "bad_request", "reason": why }))
            }
            ApiError::Unauthorized(why) => {
                (StatusCode::UNAUTHORIZED, json!({ "error": "unauthorized", "reason": why }))
            }
            ApiError::Forbidden { role, needs } => (
                StatusCode::FORBIDDEN,
                json!({ "error": "forbidden", "role": role.as_str(), "needs": needs.as_str() }),
            ),
            ApiError::BadGateway(why) => {
                (StatusCode::BAD_GATEWAY, json!({ "error": "leader_unreachable", "reason": why }))
            }
            ApiError::Internal(why) => {
                (StatusCode::INTERNAL_SERVER_ERROR, json!({ "error": "internal", "reason": why }))
            }
            ApiError::NotWithGroups(what) => (
                StatusCode::NOT_IMPLEMENTED,
                json!({
                    "error": "not_with_groups",
                    "reason": format!("{what} is not built yet for a cluster of several Raft groups (--groups > 1)"),
                }),
            ),
            ApiError::Unavailable(why) => {
                (StatusCode::SERVICE_UNAVAILABLE, json!({ "error": "unavailable", "reason": why }))
            }
            ApiError::NoSpace(NoRoom { member, free, reserve }) => (
                StatusCode::INSUFFICIENT_STORAGE,
                json!({
                    "error": "no_space",
                    "reason": format!(
                        "{} has {free} bytes free and the next snapshots need {reserve}: \
                         puts are refused until keys are deleted or the volume has more space",
                        member.map_or_else(
                            || "this node's volume".to_string(),
                            |m| format!("the volume of member {m}")
                        )
                    ),
                    "free": free,
                    "reserve": reserve,
                    "member": member,
                }),
            ),
        };
        let mut resp = (status, axum::Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Bearer realm="vellum""#),
            );
        }
        resp
    }
}
