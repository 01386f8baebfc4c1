use super::*;

/// Equality of two byte strings through [`padded_eq`], as `role_of` uses it.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    padded_eq(a, a.len(), b, a.len().max(b.len())) == 1
}

fn parse(text: &str) -> Result<TokenSet, TokenFileError> {
    TokenSet::parse(Path::new("/etc/vellum/tokens"), text)
}

fn line_problem(text: &str) -> (usize, LineProblem) {
    match parse(text) {
        Err(TokenFileError::Line { line, problem, .. }) => (line, problem),
        other => panic!("expected a line error, got {other:?}"),
    }
}

#[test]
fn roles_are_ordered_and_parsed() {
    assert!(Role::Read < Role::Write && Role::Write < Role::Admin);
    for r in [Role::Read, Role::Write, Role::Admin] {
        assert_eq!(Role::parse(r.as_str()), Some(r));
        assert_eq!(Role::from_bits(r.bit()), Some(r));
    }
    assert_eq!(Role::parse("Admin"), None);
    assert_eq!(Role::parse(""), None);
    assert_eq!(Role::from_bits(0), None);
    assert_eq!(Role::from_bits(3), None);
}

#[test]
fn route_table() {
    let cases = [
        (Method::GET, "/livez", None),
        (Method::GET, "/readyz", None),
        (Method::POST, "/readyz", None),
        (Method::GET, "/v1/kv/a", Some(Role::Read)),
        (Method::HEAD, "/v1/kv/a", Some(Role::Read)),
        (Method::PUT, "/v1/kv/a", Some(Role::Write)),
        (Method::DELETE, "/v1/kv/a", Some(Role::Write)),
        (Method::POST, "/v1/kv/a", Some(Role::Write)),
        (Method::GET, "/v1/cluster/status", Some(Role::Read)),
        (Method::GET, "/metrics", Some(Role::Read)),
        (Method::POST, "/v1/cluster/learners", Some(Role::Admin)),
        (Method::PUT, "/v1/cluster/members", Some(Role::Admin)),
        (Method::GET, "/v1/cluster/members", Some(Role::Admin)),
        (Method::DELETE, "/v1/cluster/members/3", Some(Role::Admin)),
        (Method::GET, "/v1/cluster/status/", Some(Role::Admin)),
        (Method::GET, "/v1/nothing", Some(Role::Read)),
        (Method::POST, "/v1/nothing", Some(Role::Write)),
        (Method::GET, "/livez/", Some(Role::Read)),
    ];
    for (method, path, want) in cases {
        assert_eq!(required_role(&method, path), want, "{method} {path}");
    }
}

#[test]
fn parses_tokens_comments_and_blank_lines() {
    let set = parse(
        "# who may do what\n\n  rtok read  \nwtok\twrite # the CI job\n   # indented\natok admin\n",
    )
    .unwrap();
    assert_eq!(set.len(), 3);
    assert_eq!(set.role_of(b"rtok"), Some(Role::Read));
    assert_eq!(set.role_of(b"wtok"), Some(Role::Write));
    assert_eq!(set.role_of(b"atok"), Some(Role::Admin));
    assert_eq!(set.role_of(b"rto"), None);
    assert_eq!(set.role_of(b"rtokk"), None);
    assert_eq!(set.role_of(b""), None);
    assert_eq!(set.role_of(b"#"), None);
    assert_eq!(set.role_of(&[b'a'; MAX_TOKEN_BYTES + 1]), None);
    // Tokens of different lengths: each is padded to the longest.
    let set = parse("a read\nlong-token-here write\n").unwrap();
    assert_eq!(set.role_of(b"a"), Some(Role::Read));
    assert_eq!(set.role_of(b"long-token-here"), Some(Role::Write));
    assert_eq!(set.role_of(b"long"), None);
    assert_eq!(set.role_of(b"a\0"), None);
}

#[test]
fn file_errors_name_the_line_and_never_the_token() {
    let cases = [
        ("ok read\nsecret-one\n", 2, LineProblem::MissingRole),
        ("secret-one reader\n", 1, LineProblem::UnknownRole),
        ("read secret-one\n", 1, LineProblem::UnknownRole),
        ("secret-one read admin\n", 1, LineProblem::ExtraFields),
        ("secret-one read\n\nsecret-one admin\n", 3, LineProblem::Repeated { first: 1 }),
        ("secret-\u{e9}t\u{e9} read\n", 1, LineProblem::NotPrintable),
        ("secret-one\u{7} read\n", 1, LineProblem::NotPrintable),
    ];
    for (text, line, problem) in cases {
        assert_eq!(line_problem(text), (line, problem), "{text:?}");
        let shown = parse(text).unwrap_err().to_string();
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("/etc/vellum/tokens") && shown.contains(&format!("line {line}")));
    }
    let long = format!("{} read\n", "s".repeat(MAX_TOKEN_BYTES + 1));
    assert_eq!(line_problem(&long), (1, LineProblem::TooLong));
    assert!(!parse(&long).unwrap_err().to_string().contains("sss"));
    for empty in ["", "\n\n", "# nobody yet\n  \n"] {
        let e = parse(empty).unwrap_err();
        assert!(matches!(e, TokenFileError::Empty { .. }), "{e:?}");
        assert!(e.to_string().contains("lock every client out"), "{e}");
    }
}

#[test]
fn constant_time_eq_is_equality() {
    assert!(ct_eq(b"", b""));
    assert!(ct_eq(b"token", b"token"));
    assert!(!ct_eq(b"token", b"toke"));
    assert!(!ct_eq(b"toke", b"token"));
    assert!(!ct_eq(b"token", b"tokem"));
    assert!(!ct_eq(b"", b"x"));
    assert!(!ct_eq(b"x", b""));
    assert!(!ct_eq(b"ab\0", b"ab"));
    assert!(!ct_eq(b"\x80", b"\x00"));
}

#[test]
fn reload_keeps_the_old_tokens_on_a_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(&path, "rtok read\nwtok write\n").unwrap();
    let auth = Auth::load(&path).unwrap();
    assert_eq!(auth.count(), 2);
    std::fs::write(&path, "rtok read\nwtok bogus\n").unwrap();
    assert!(matches!(auth.reload(), Err(TokenFileError::Line { line: 2, .. })));
    std::fs::write(&path, "# emptied\n").unwrap();
    assert!(matches!(auth.reload(), Err(TokenFileError::Empty { .. })));
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(auth.reload(), Err(TokenFileError::Read { .. })));
    assert_eq!(auth.role_of(b"wtok"), Some(Role::Write));
    std::fs::write(&path, "rtok read\natok admin\n").unwrap();
    assert_eq!(auth.reload().unwrap(), 2);
    assert_eq!(auth.role_of(b"wtok"), None);
    assert_eq!(auth.clone().role_of(b"atok"), Some(Role::Admin));
    assert!(!format!("{auth:?}").contains("atok"));
}

#[test]
fn bearer_header_syntax() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(&path, "rtok read\nwtok write\n").unwrap();
    let auth = Auth::load(&path).unwrap();
    let with = |v: &str| {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        h
    };
    assert_eq!(auth.authorize(&with("Bearer wtok"), Role::Write).unwrap(), Role::Write);
    assert_eq!(auth.authorize(&with("bearer  rtok "), Role::Read).unwrap(), Role::Read);
    assert!(matches!(
        auth.authorize(&with("Bearer rtok"), Role::Write),
        Err(Refused::Forbidden { role: Role::Read, needs: Role::Write })
    ));
    for bad in ["Basic cnRvaw==", "Bearer", "Bearer ", "rtok", "Bearer nope", "Bearer rt ok"] {
        assert!(
            matches!(auth.authorize(&with(bad), Role::Read), Err(Refused::Unauthorized(_))),
            "{bad}"
        );
    }
    assert!(matches!(
        auth.authorize(&HeaderMap::new(), Role::Read),
        Err(Refused::Unauthorized("no bearer token"))
    ));
    let mut two = with("Bearer rtok");
    two.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer wtok"));
    assert!(matches!(auth.authorize(&two, Role::Read), Err(Refused::Unauthorized(_))));
}

#[test]
fn presented_tokens_are_checked_and_hidden() {
    let t = BearerToken::from("s3cret".to_string());
    assert!(!format!("{t:?}").contains("s3cret"));
    let v = t.header().unwrap();
    assert!(v.is_sensitive());
    assert_eq!(v.to_str().unwrap(), "Bearer s3cret");
    for bad in ["", "has space", "caf\u{e9}"] {
        let e = BearerToken::from(bad.to_string()).header().unwrap_err();
        assert!(bad.is_empty() || !e.contains(bad));
    }
}
