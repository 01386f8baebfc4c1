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

use axum::http::{HeaderMap, HeaderValue, Method, header};

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

/// Why a request's token does not let it through. The HTTP layer maps it to 401 or 403
/// (`server/http/errors.rs`); it never quotes the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No usable bearer token: missing, malformed or unknown, as the reason says.
    Unauthorized(&'static str),
    /// The token's role is below the one the route needs.
    Forbidden { role: Role, needs: Role },
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
    pub(crate) fn authorize(&self, headers: &HeaderMap, needs: Role) -> Result<Role, Refused> {
        let token = bearer(headers)?;
        let role = self.role_of(token).ok_or(Refused::Unauthorized("unknown token"))?;
        if role >= needs { Ok(role) } else { Err(Refused::Forbidden { role, needs }) }
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
fn bearer(headers: &HeaderMap) -> Result<&[u8], Refused> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next().ok_or(Refused::Unauthorized("no bearer token"))?;
    if values.next().is_some() {
        return Err(Refused::Unauthorized("more than one Authorization header"));
    }
    let malformed = Refused::Unauthorized("the Authorization header is not Bearer TOKEN");
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
mod tests;
