//! The client API's token check: the middleware that asks `security::tokens` for the role a
//! request needs and maps a refusal to 401 or 403 (`errors.rs`). It runs before any body is
//! read; `/livez` and `/readyz` pass without a token.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::security::tokens::{Auth, required_role};

/// With tokens configured, a request that needs a role gets 401 or 403 unless its token has
/// that role.
pub(crate) async fn require_token(
    State(auth): State<Option<Auth>>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(auth) = &auth
        && let Some(needs) = required_role(req.method(), req.uri().path())
        && let Err(refused) = auth.authorize(req.headers(), needs)
    {
        return ApiError::from(refused).into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests;
