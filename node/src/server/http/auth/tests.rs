use axum::http::{Method, header};

use super::*;

/// The middleware on a small router: status, error and header of each answer.
#[tokio::test]
async fn middleware_refuses_before_the_handler() {
    use tower_service::Service;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(&path, "rtok read\nwtok write\n").unwrap();
    let app = |auth: Option<Auth>| {
        let ok = || async { "ok" };
        axum::Router::new()
            .route("/v1/kv/{k}", axum::routing::get(ok).put(ok))
            .route("/livez", axum::routing::get(ok))
            .layer(axum::middleware::from_fn_with_state(auth, require_token))
    };
    let mut on = app(Some(Auth::load(&path).unwrap()));
    let mut off = app(None);
    let cases = [
        (Method::PUT, "/v1/kv/a", None, 401, "unauthorized"),
        (Method::PUT, "/v1/kv/a", Some("Bearer nope"), 401, "unauthorized"),
        (Method::PUT, "/v1/kv/a", Some("Bearer rtok"), 403, "forbidden"),
        (Method::PUT, "/v1/kv/a", Some("Bearer wtok"), 200, ""),
        (Method::GET, "/v1/kv/a", Some("BEARER rtok"), 200, ""),
        (Method::GET, "/v1/unknown", None, 401, "unauthorized"),
        (Method::GET, "/livez", None, 200, ""),
    ];
    for (method, uri, authorization, want, error) in cases {
        let mut req = axum::http::Request::builder().method(method.clone()).uri(uri);
        if let Some(a) = authorization {
            req = req.header(header::AUTHORIZATION, a);
        }
        let resp = on.call(req.body(axum::body::Body::empty()).unwrap()).await.unwrap();
        assert_eq!(resp.status().as_u16(), want, "{method} {uri}");
        let challenge = resp.headers().get(header::WWW_AUTHENTICATE).cloned();
        assert_eq!(challenge.is_some(), want == 401);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap();
        if want == 200 {
            assert_eq!(&body[..], b"ok");
            continue;
        }
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], error);
        let text = String::from_utf8_lossy(&body);
        assert!(["rtok", "wtok", "nope"].iter().all(|t| !text.contains(t)), "{text}");
        if want == 403 {
            assert_eq!((&v["role"], &v["needs"]), (&"read".into(), &"write".into()));
        }
    }
    let req = axum::http::Request::builder().method(Method::PUT).uri("/v1/kv/a");
    let resp = off.call(req.body(axum::body::Body::empty()).unwrap()).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200, "no --auth-tokens: open as before");
}
