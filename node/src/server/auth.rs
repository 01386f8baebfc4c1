//! Bearer tokens with roles on the client API (`vellum serve --auth-tokens FILE`).
//!
//! The token file holds one `TOKEN ROLE` per line (`#` starts a comment line, or a comment
//! after the two fields; blank lines are ignored). It is read at start-up (a bad file, or
//! one with no tokens, stops the node with one line) and again on SIGHUP (a bad file is
//! reported and the previous tokens stay in force).
//!
//! Roles, each including the ones below it:
//! - `read`: `GET`/`HEAD` on every route but the admin ones (keys, `/v1/cluster/status`,
//!   `/metrics`);
//! - `write`: any other method on those routes (`PUT`/`DELETE` of keys);
//! - `admin`: everything under `/v1/cluster/` but `/v1/cluster/status` (learners, voters,
//!   removal; the snapshot and archive routes to come belong there too).
//!
//! `/livez` and `/readyz` are open (probes carry no secrets). Every other route, unknown
//! ones included, needs a token: without one the answer is 401, never a 404 that would say
//! which routes exist.
//!
//! Invariants:
//! - A token never appears in a log line, an error message or a `Debug` output: file errors
//!   name the file and the line, never its text (a line with the fields swapped would put
//!   the token where the role goes, so the role text is not echoed either).
//! - A presented token is compared with every stored token, in time that depends only on
//!   the presented token's length and the longest stored token's length: stored tokens are
//!   zero-padded to one width, compared byte by byte with XOR folded into an accumulator,
//!   with no branch on a secret byte and no early exit on a match.
//! - The node checks the caller's own token; a follower that forwards a request to the
//!   leader forwards the caller's `Authorization` header, and the leader checks it again.
//!   So every node needs the same token file.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::http::ApiError;

/// Longest token accepted, in the file or in a request (bounds the comparison work a
/// request can cause).
pub(crate) const MAX_TOKEN_BYTES: usize = 1024;
// `BearerToken::header` says so in words.
const _: () = assert!(MAX_TOKEN_BYTES == 1024);

/// What a token may do; each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Role {
    Read,
    Write,
    Admin,
}

impl Role {
    pub(crate) fn parse(s: &str) -> Option<Role> {
        match s {
            "read" => Some(Role::Read),
            "write" => Some(Role::Write),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }

    /// One bit per role: matches are OR-ed together without branching.
    fn bit(self) -> u8 {
        match self {
            Role::Read => 1,
            Role::Write => 2,
            Role::Admin => 4,
        }
    }

    fn from_bits(bits: u8) -> Option<Role> {
        match bits {
            1 => Some(Role::Read),
            2 => Some(Role::Write),
            4 => Some(Role::Admin),
            _ => None,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Routes anyone may call.
const OPEN: [&str; 2] = ["/livez", "/readyz"];
/// Admin routes live under this prefix (but for [`STATUS`]).
const CLUSTER: &str = "/v1/cluster/";
const STATUS: &str = "/v1/cluster/status";

/// The role a request needs, from its method and its path (as received, before routing):
/// `None` for the open routes.
pub(crate) fn required_role(method: &Method, path: &str) -> Option<Role> {
    if OPEN.contains(&path) {
        None
    } else if path.starts_with(CLUSTER) && path != STATUS {
        Some(Role::Admin)
    } else if method == Method::GET || method == Method::HEAD {
        Some(Role::Read)
    } else {
        Some(Role::Write)
    }
}

/// What is wrong with one line of a token file (never quoting it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineProblem {
    MissingRole,
    UnknownRole,
    ExtraFields,
    NotPrintable,
    TooLong,
    /// The same token as on line `first`.
    Repeated {
        first: usize,
    },
}

impl fmt::Display for LineProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineProblem::MissingRole => f.write_str(
                "a token without a role (each line is TOKEN ROLE, ROLE one of read, write, admin)",
            ),
            LineProblem::UnknownRole => f.write_str("an unknown role (read, write or admin)"),
            LineProblem::ExtraFields => {
                f.write_str("more than TOKEN ROLE on the line (a comment after them starts with #)")
            }
            LineProblem::NotPrintable => f.write_str("a token that is not printable ASCII"),
            LineProblem::TooLong => write!(f, "a token longer than {MAX_TOKEN_BYTES} bytes"),
            LineProblem::Repeated { first } => write!(f, "the same token as line {first}"),
        }
    }
}

/// Why a token file cannot be used. Names the file and the line, never a token.
#[derive(Debug)]
pub(crate) enum TokenFileError {
    Read { path: PathBuf, source: std::io::Error },
    Line { path: PathBuf, line: usize, problem: LineProblem },
    Empty { path: PathBuf },
}

impl fmt::Display for TokenFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenFileError::Read { path, source } => {
                write!(f, "reading the token file {}: {source}", path.display())
            }
            TokenFileError::Line { path, line, problem } => {
                write!(f, "token file {}, line {line}: {problem}", path.display())
            }
            TokenFileError::Empty { path } => write!(
                f,
                "the token file {} holds no tokens: it would lock every client out; give at \
                 least one TOKEN ROLE line",
                path.display()
            ),
        }
    }
}

impl std::error::Error for TokenFileError {}

/// A stored token, zero-padded to the set's width (tokens hold no zero byte).
struct Entry {
    padded: Box<[u8]>,
    len: usize,
    role: Role,
}

/// The tokens of one reading of the file. Its `Debug` shows the count only.
pub(crate) struct TokenSet {
    /// Length of the longest token: every `padded` is this long.
    width: usize,
    entries: Vec<Entry>,
}

impl fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenSet({} tokens)", self.entries.len())
    }
}

impl TokenSet {
    /// Parses a token file's text; `path` only names it in errors.
    pub(crate) fn parse(path: &Path, text: &str) -> Result<TokenSet, TokenFileError> {
        let bad = |line, problem| TokenFileError::Line { path: path.to_owned(), line, problem };
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let mut tokens = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let number = i + 1;
            let mut fields = line.split_whitespace();
            let Some(token) = fields.next().filter(|t| !t.starts_with('#')) else { continue };
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(bad(number, LineProblem::NotPrintable));
            }
            if token.len() > MAX_TOKEN_BYTES {
                return Err(bad(number, LineProblem::TooLong));
            }
            let role = fields.next().ok_or(bad(number, LineProblem::MissingRole))?;
            let role = Role::parse(role).ok_or(bad(number, LineProblem::UnknownRole))?;
            if fields.next().is_some_and(|f| !f.starts_with('#')) {
                return Err(bad(number, LineProblem::ExtraFields));
            }
            if let Some(&first) = seen.get(token) {
                return Err(bad(number, LineProblem::Repeated { first }));
            }
            seen.insert(token, number);
            tokens.push((token.as_bytes(), role));
        }
        if tokens.is_empty() {
            return Err(TokenFileError::Empty { path: path.to_owned() });
        }
        let width = tokens.iter().map(|(t, _)| t.len()).max().unwrap_or(0);
        let entries = tokens
            .into_iter()
            .map(|(t, role)| {
                let mut padded = vec![0u8; width];
                padded[..t.len()].copy_from_slice(t);
                Entry { padded: padded.into_boxed_slice(), len: t.len(), role }
            })
            .collect();
        Ok(TokenSet { width, entries })
    }

    /// Reads and parses the token file at `path`.
    pub(crate) fn read(path: &Path) -> Result<TokenSet, TokenFileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| TokenFileError::Read { path: path.to_owned(), source })?;
        TokenSet::parse(path, &text)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The role of `presented`, compared with every stored token (see the module's
    /// invariants). Only the presented length, known to the caller, is branched on.
    pub(crate) fn role_of(&self, presented: &[u8]) -> Option<Role> {
        if presented.is_empty() || presented.len() > MAX_TOKEN_BYTES {
            return None;
        }
        let n = self.width.max(presented.len());
        let mut found = 0u8;
        for e in &self.entries {
            let same = padded_eq(&e.padded, e.len, presented, n);
            found |= same.wrapping_neg() & e.role.bit();
        }
        Role::from_bits(std::hint::black_box(found))
    }
}

/// 1 if `a` (of logical length `a_len`, zero-padded) equals `b`, else 0; compares `n` bytes
/// whatever they hold. Branches only on `a.len()` and `b.len()`.
fn padded_eq(a: &[u8], a_len: usize, b: &[u8], n: usize) -> u8 {
    let mut diff = (a_len ^ b.len()) as u64;
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= u64::from(x ^ y);
    }
    let diff = std::hint::black_box(diff);
    // The top bit of `diff | -diff` is set exactly when `diff` is not zero.
    (((diff | diff.wrapping_neg()) >> 63) ^ 1) as u8
}

/// The token file and its current tokens; cheap to clone.
#[derive(Clone)]
pub(crate) struct Auth(Arc<Shared>);

struct Shared {
    path: PathBuf,
    tokens: RwLock<Arc<TokenSet>>,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Auth({}, {} tokens)", self.0.path.display(), self.count())
    }
}

impl Auth {
    pub(crate) fn load(path: &Path) -> Result<Auth, TokenFileError> {
        let set = TokenSet::read(path)?;
        warn_if_world_readable(path);
        Ok(Auth(Arc::new(Shared { path: path.to_owned(), tokens: RwLock::new(Arc::new(set)) })))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0.path
    }

    fn current(&self) -> Arc<TokenSet> {
        Arc::clone(&self.0.tokens.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Tokens in force.
    pub(crate) fn count(&self) -> usize {
        self.current().len()
    }

    /// Reads the file again: its tokens replace the current ones, or, if it cannot be used,
    /// the current ones stay and the error says why. The number of tokens now in force.
    pub(crate) fn reload(&self) -> Result<usize, TokenFileError> {
        let set = TokenSet::read(&self.0.path)?;
        warn_if_world_readable(&self.0.path);
        let n = set.len();
        *self.0.tokens.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(set);
        Ok(n)
    }

    pub(crate) fn role_of(&self, presented: &[u8]) -> Option<Role> {
        self.current().role_of(presented)
    }

    /// Reloads the file on every SIGHUP, for as long as the process runs. The handler is in
    /// place when this returns (SIGHUP would otherwise end the process).
    #[cfg(unix)]
    pub(crate) fn spawn_reload_on_sighup(self) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = signal(SignalKind::hangup())?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                // Reading the file is blocking IO: off the runtime's workers.
                let auth = self.clone();
                match tokio::task::spawn_blocking(move || auth.reload()).await {
                    Ok(Ok(n)) => {
                        tracing::info!("reloaded {n} tokens from {}", self.path().display());
                    }
                    Ok(Err(e)) => tracing::error!("{e}; keeping the previous tokens"),
                    Err(e) => tracing::error!("reloading the tokens failed: {e}"),
                }
            }
        });
        Ok(())
    }

    #[cfg(not(unix))]
    pub(crate) fn spawn_reload_on_sighup(self) -> std::io::Result<()> {
        Ok(())
    }

    /// The caller's role if it is at least `needs`: the `Authorization: Bearer` token of
    /// `headers`, looked up.
    pub(crate) fn authorize(&self, headers: &HeaderMap, needs: Role) -> Result<Role, ApiError> {
        let token = bearer(headers)?;
        let role = self.role_of(token).ok_or(ApiError::Unauthorized("unknown token"))?;
        if role >= needs { Ok(role) } else { Err(ApiError::Forbidden { role, needs }) }
    }
}

/// A token file others can read is a leaked token file: say so (the node still starts).
fn warn_if_world_readable(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o007 != 0
        {
            tracing::warn!(
                "the token file {} is readable by every user of this machine (chmod o-rwx)",
                path.display()
            );
        }
    }
}

/// The token of the request's one `Authorization: Bearer TOKEN` header (scheme in any case).
fn bearer(headers: &HeaderMap) -> Result<&[u8], ApiError> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next().ok_or(ApiError::Unauthorized("no bearer token"))?;
    if values.next().is_some() {
        return Err(ApiError::Unauthorized("more than one Authorization header"));
    }
    let malformed = ApiError::Unauthorized("the Authorization header is not Bearer TOKEN");
    let bytes = value.as_bytes();
    let Some(space) = bytes.iter().position(|&b| b == b' ') else { return Err(malformed) };
    let (scheme, token) = (&bytes[..space], bytes[space..].trim_ascii());
    if !scheme.eq_ignore_ascii_case(b"bearer")
        || token.is_empty()
        || !token.iter().all(u8::is_ascii_graphic)
    {
        return Err(malformed);
    }
    Ok(token)
}

/// The middleware: with tokens configured, a request that needs a role gets 401 or 403
/// unless its token has that role. Runs before any body is read.
pub(crate) async fn require_token(
    State(auth): State<Option<Auth>>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(auth) = &auth
        && let Some(needs) = required_role(req.method(), req.uri().path())
        && let Err(refused) = auth.authorize(req.headers(), needs)
    {
        return refused.into_response();
    }
    next.run(req).await
}

/// A token this process presents (`--token`, `--join-token`). Its `Debug` hides it.
#[derive(Clone)]
pub(crate) struct BearerToken(String);

impl From<String> for BearerToken {
    fn from(s: String) -> BearerToken {
        BearerToken(s)
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

impl BearerToken {
    /// The `Authorization` header value (marked sensitive), or why the token cannot be one
    /// (without quoting it).
    pub(crate) fn header(&self) -> Result<HeaderValue, &'static str> {
        let t = self.0.as_bytes();
        if t.is_empty() || t.len() > MAX_TOKEN_BYTES || !t.iter().all(u8::is_ascii_graphic) {
            return Err("a token is 1 to 1024 printable ASCII characters, without spaces");
        }
        let mut v = HeaderValue::from_str(&format!("Bearer {}", self.0))
            .map_err(|_| "the token cannot be sent in a header")?;
        v.set_sensitive(true);
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
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
            assert!(
                shown.contains("/etc/vellum/tokens") && shown.contains(&format!("line {line}"))
            );
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
            Err(ApiError::Forbidden { role: Role::Read, needs: Role::Write })
        ));
        for bad in ["Basic cnRvaw==", "Bearer", "Bearer ", "rtok", "Bearer nope", "Bearer rt ok"] {
            assert!(
                matches!(auth.authorize(&with(bad), Role::Read), Err(ApiError::Unauthorized(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            auth.authorize(&HeaderMap::new(), Role::Read),
            Err(ApiError::Unauthorized("no bearer token"))
        ));
        let mut two = with("Bearer rtok");
        two.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer wtok"));
        assert!(matches!(auth.authorize(&two, Role::Read), Err(ApiError::Unauthorized(_))));
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
}
