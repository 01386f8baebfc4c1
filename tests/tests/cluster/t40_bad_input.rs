//! Bad input on every route gets a 4xx with a JSON error, and the node keeps serving.

use crate::harness::{Cluster, phase};

fn json_error(r: reqwest::blocking::Response) -> (u16, String) {
    let status = r.status().as_u16();
    let v: serde_json::Value =
        r.json().unwrap_or_else(|_| panic!("HTTP {status} without a JSON body"));
    (status, v["error"].as_str().unwrap_or_default().to_string())
}

#[test]
fn bad_input_is_refused_with_json_errors() {
    let mut c = Cluster::new(1);
    c.start_all();
    c.wait_ready();
    refused_with_json_errors(&c);
}

/// The same with `--auth-tokens` and an admin token on every request: authentication comes
/// first, and what passes it meets the same checks. Malformed credentials get 401 + JSON;
/// `--metrics-addr` serves /metrics without a token.
#[test]
fn bad_input_on_authenticated_routes_is_refused_with_json_errors() {
    const ADMIN: &str = "admin-3c9e0b7d51f2a8e4";
    let mut c = Cluster::new(1);
    let tokens = c.dir.path().join("tokens");
    std::fs::write(&tokens, format!("{ADMIN} admin\n")).unwrap();
    let metrics = crate::harness::free_port();
    let n = &mut c.nodes[0];
    n.extra.extend([
        "--auth-tokens".into(),
        tokens.to_str().unwrap().into(),
        "--metrics-addr".into(),
        format!("127.0.0.1:{metrics}"),
    ]);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {ADMIN}").parse().unwrap());
    c.http = crate::harness::client_builder()
        .default_headers(headers)
        .timeout(std::time::Duration::from_secs(20))
        .build()
        .unwrap();
    c.token = Some(ADMIN.into());
    c.start_all();
    c.wait_ready();
    refused_with_json_errors(&c);
    phase("malformed credentials");
    let n = &c.nodes[0];
    let plain = crate::harness::client_builder().build().unwrap();
    for value in ["Bearer", "Bearer ", "Basic YWRtaW46YWRtaW4=", "Bearer a b", &"x".repeat(8000)] {
        let r = plain.get(n.url("/v1/kv/x")).header("authorization", value).send().unwrap();
        let (status, error) = json_error(r);
        assert_eq!((status, error.as_str()), (401, "unauthorized"), "{value:.20}");
    }
    let r = plain
        .get(n.url("/v1/kv/x"))
        .header("authorization", &b"Bearer \xff\xfe"[..])
        .send()
        .unwrap();
    assert_eq!(json_error(r), (401, "unauthorized".into()));
    phase("/metrics: a token on the API address, none on --metrics-addr");
    assert_eq!(plain.get(n.url("/metrics")).send().unwrap().status().as_u16(), 401);
    let r = plain.get(format!("http://127.0.0.1:{metrics}/metrics")).send().unwrap();
    assert!(r.status().is_success());
    assert!(r.text().unwrap().contains("vellum_"), "Prometheus text on --metrics-addr");
    assert!(c.put(n, "after-the-abuse-2", "ok"));
}

fn refused_with_json_errors(c: &Cluster) {
    let n = &c.nodes[0];
    let h = &c.http;
    phase("oversized and malformed input");
    let cases: Vec<(reqwest::blocking::Response, u16, &str)> = vec![
        (h.put(n.url("/v1/kv/")).body("x").send().unwrap(), 400, "empty_key"),
        (
            h.get(n.url(&format!("/v1/kv/{}", "k".repeat(2000)))).send().unwrap(),
            413,
            "key_too_large",
        ),
        (
            h.put(n.url("/v1/kv/big")).body(vec![0u8; (1 << 20) + 1]).send().unwrap(),
            413,
            "value_too_large",
        ),
        (h.get(n.url("/v1/kv/x?consistency=sometimes")).send().unwrap(), 400, "bad_request"),
        (
            h.post(n.url("/v1/cluster/learners"))
                .body("{not json")
                .header("content-type", "application/json")
                .send()
                .unwrap(),
            400,
            "bad_request",
        ),
        (
            h.put(n.url("/v1/cluster/members"))
                .json(&serde_json::json!({ "members": [] }))
                .send()
                .unwrap(),
            400,
            "bad_request",
        ),
        (h.get(n.url("/v1/nothing/here")).send().unwrap(), 404, "no_route"),
        (h.post(n.url("/v1/kv/key")).send().unwrap(), 405, "method_not_allowed"),
        (h.delete(n.url("/v1/cluster/status")).send().unwrap(), 405, "method_not_allowed"),
        (h.get(n.url("/v1/kv/never-written")).send().unwrap(), 404, "not_found"),
    ];
    for (resp, want_status, want_error) in cases {
        let (status, error) = json_error(resp);
        assert_eq!((status, error.as_str()), (want_status, want_error));
    }
    phase("still serving");
    assert!(c.put(n, "after-the-abuse", "ok"));
    assert_eq!(c.read(n, "after-the-abuse", false).as_deref(), Some("ok"));
    assert!(c.get(&n.url("/livez")).unwrap().status().is_success());
}
