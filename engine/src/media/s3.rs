//! `s3://bucket/prefix?endpoint=...&region=...`: object storage through the `object_store`
//! crate's S3 client (issue 24; docs/MEDIA.md, "Object storage").
//!
//! The medium is one bucket: a media path `/a/b` is the object key `a/b`; a directory is a key
//! prefix ending in `/` and exists while an object is under it (object storage has no
//! directories of its own).
//!
//! Semantics (what differs from a file system, on purpose):
//! - **Writes are uploads.** [`Media::create`] returns a writer that takes only sequential
//!   writes (`write_at` at the current end, `append`); nothing is visible on the server until
//!   `sync` or `close` completes the upload, which is the durability point (write-through is
//!   inherent). Below [`PART`] bytes the writer buffers and sends one PUT; from [`PART`] bytes
//!   on (it never buffers more) it streams a multipart upload (parts of [`PART`] bytes, at most [`PARTS_IN_FLIGHT`]
//!   in flight while the caller writes on) and completes it on `sync`/`close`. After that the
//!   object is whole and the writer takes no more bytes. A writer dropped without
//!   `sync`/`close` publishes nothing (its multipart upload is aborted): a half-written object
//!   never appears complete. A write before the end, `set_len` to another length, or a write
//!   after the upload completed is [`Error::NotSupported`], saying what to do instead.
//! - **Reads are ranged GETs.** [`Media::open`] returns a read-only handle on the object's
//!   version at open time (length and ETag from one HEAD); every GET carries `If-Match` on that
//!   ETag, so a replaced object is [`Error::PreconditionFailed`] on the next read, never a mix
//!   of two versions. A read smaller than [`READAHEAD`] fetches [`READAHEAD`] bytes and keeps
//!   them for the next sequential read. A read that continues where the previous one ended
//!   (or a read of at least [`READAHEAD`] bytes from the start) opens one streaming GET from
//!   there to the end, with the same `If-Match`, and the following sequential reads are served
//!   from it: one request for a whole-object read, not one per read. A task on the runtime
//!   pulls the stream and hands its chunks on as they came (no copy: the read copies each
//!   byte once, into the caller's buffer) in runs of at least [`BLOCK`] bytes, at most
//!   [`BLOCKS_AHEAD`] runs waiting (a few MiB ahead at most); a read elsewhere drops the
//!   stream (and falls back to a ranged GET), as does dropping the reader.
//! - **rename is copy + delete** and is not atomic ([`Media::rename_is_atomic`] is false): a
//!   crash between the two leaves both keys. A single copy is limited to 5 GiB by S3.
//! - **list** is one level of the prefix with delimiter `/`: objects are files, common
//!   prefixes are directories, sorted by path. A prefix with nothing under it lists as empty
//!   (a directory exists while an object is under it); an object's own key is
//!   [`Error::NotADirectory`]. A key that is both an object and a prefix (`a` and `a/b`) is
//!   listed twice, once as each.
//! - **mkdir** has nothing to do (prefixes need no creation): a directory appears with its
//!   first object and disappears with its last.
//! - **remove** deletes one object; a missing one is [`Error::NotFound`] (S3 itself would
//!   answer success), a prefix with objects under it is [`Error::DirectoryNotEmpty`].
//! - **stat** is a HEAD (version = the ETag, modification time = Last-Modified); without an
//!   object, a prefix with objects under it is a directory.
//! - **attributes** are the object's user metadata (`x-amz-meta-*`, one HEAD).
//! - **put** is one PUT: [`PutMode::Create`] sends `If-None-Match: *` (an existing object is
//!   [`Error::PreconditionFailed`]); [`PutMode::Update`] sends `If-Match: ETAG` (a stale ETag,
//!   or an object removed since, is [`Error::PreconditionFailed`]); **get** is one GET with its
//!   ETag.
//! - Knobs: write-through is inherent (asking for it is fine), direct IO and the rest are
//!   physically meaningless ([`Error::KnobMeaningless`] when asked for).
//!
//! Client: credentials come from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
//! `AWS_SESSION_TOKEN` only (missing keys are one clear error when the medium is opened; the
//! medium never falls back to the EC2 metadata endpoint); the region from the URL, else
//! `AWS_REGION`, else `AWS_DEFAULT_REGION`, else `us-east-1`; a custom `endpoint=` gets
//! path-style requests, and plain HTTP when it is `http://`. Opening makes no request: a wrong
//! endpoint, bucket or key shows on the first operation. Timeouts are short so a dead endpoint
//! is an error in seconds ([`Error::Remote`] with [`RemoteFailure::Unreachable`]): 3 s to
//! connect, 30 s per request, 2 retries within 10 s.
//!
//! Errors: no answer is `Unreachable`; refused credentials (403, `InvalidAccessKeyId`,
//! `SignatureDoesNotMatch`) `Unauthorized`; `NoSuchBucket` `NoSuchBucket`; a missing object
//! [`Error::NotFound`]; a lost condition [`Error::PreconditionFailed`]. URLs in errors name the
//! bucket, key and endpoint, never credentials.
//!
//! Threads: the facade is synchronous and `object_store` is async. Every call runs its future
//! on one process-wide tokio runtime of two worker threads (`vellum-s3`, started by the first
//! `s3://` open and never dropped) and waits for the answer on a std channel, so a caller on a
//! tokio runtime's thread (`spawn_blocking`, a CLI's runtime) neither panics nor needs one.
//! TLS: reqwest on rustls with the ring provider; when no process-wide provider is installed
//! yet, the medium installs ring's.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use object_store::client::{HttpError, HttpErrorKind};
use object_store::path::Path as Key;
use object_store::{
    Attribute, BackoffConfig, ClientOptions, GetOptions, GetRange, MultipartUpload, ObjectStore,
    ObjectStoreExt, PutOptions, PutPayload, RetryConfig, UpdateVersion,
};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

use super::{
    Entry, EntryKind, Media, MediaFile, MediaOptions, Medium, PutMode, S3Url, Stat, Version,
};
use crate::error::{Error, Invalid, RemoteFailure, Result};

/// The medium's scheme, in errors.
const SCHEME: &str = "s3://";
/// Bytes a writer buffers before it switches to a multipart upload; also the part size.
pub(crate) const PART: usize = 8 << 20;
/// Parts of one writer uploading while the caller writes on.
pub(crate) const PARTS_IN_FLIGHT: usize = 2;
/// The smallest ranged GET of a reader (smaller reads are served from what it fetched).
pub(crate) const READAHEAD: usize = 1 << 20;
/// The least bytes of a run of chunks a reader's streaming GET hands on at once.
pub(crate) const BLOCK: usize = 1 << 20;
/// Runs of a streaming GET waiting for the reader (its read-ahead, in runs).
pub(crate) const BLOCKS_AHEAD: usize = 4;

/// GET requests per object (`s3://bucket/key`), for tests that count them.
#[cfg(feature = "test-util")]
pub(crate) static GETS: Mutex<Vec<(String, u64)>> = Mutex::new(Vec::new());

/// Counts one GET of `path` (tests only).
#[allow(unused_variables)]
fn count_get(inner: &Inner, path: &str) {
    #[cfg(feature = "test-util")]
    {
        let name = format!("{}{path}", inner.bucket_url);
        let mut gets = GETS.lock().unwrap_or_else(PoisonError::into_inner);
        match gets.iter_mut().find(|(k, _)| *k == name) {
            Some((_, n)) => *n += 1,
            None => gets.push((name, 1)),
        }
    }
}

/// How the medium looks up an environment variable (the process environment, or a test's
/// stand-in).
pub(crate) type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Opens the bucket `url` names, with credentials from the process environment.
pub(crate) fn open(url: &S3Url, options: MediaOptions) -> Result<Arc<dyn Media>> {
    open_with(url, options, &process_env)
}

/// Variables a test set for the S3 medium in place of the process environment
/// ([`super::testing::set_s3_env`]): edition 2024 makes `std::env::set_var` unsafe and the
/// workspace denies unsafe code.
#[cfg(feature = "test-util")]
pub(crate) static ENV_OVERRIDE: std::sync::RwLock<Option<Vec<(String, String)>>> =
    std::sync::RwLock::new(None);

fn process_env(name: &str) -> Option<String> {
    #[cfg(feature = "test-util")]
    if let Some(vars) = ENV_OVERRIDE.read().unwrap_or_else(PoisonError::into_inner).as_ref() {
        return vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    }
    std::env::var(name).ok()
}

/// Opens the bucket `url` names, looking variables up with `env`.
pub(crate) fn open_with(url: &S3Url, options: MediaOptions, env: Lookup) -> Result<Arc<dyn Media>> {
    Medium::Object.check_knobs(&options)?;
    let env = |name: &str| env(name).filter(|v| !v.is_empty());
    let endpoint = url.endpoint.as_deref().map(redact_userinfo);
    let base = match &endpoint {
        Some(e) => (format!("{SCHEME}{}", url.bucket), format!("?endpoint={e}")),
        None => (format!("{SCHEME}{}", url.bucket), String::new()),
    };
    let (Some(key_id), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"))
    else {
        return Err(Error::Remote {
            url: format!("{}{}", base.0, base.1),
            kind: RemoteFailure::Unauthorized,
            message: "none in the environment: set AWS_ACCESS_KEY_ID and \
                      AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials)"
                .into(),
        });
    };
    let region = url
        .region
        .clone()
        .or_else(|| env("AWS_REGION"))
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|| "us-east-1".into());
    // reqwest is built without a crypto provider of its own (`rustls-no-provider`): install
    // ring's unless the process (the node, for one) already installed a provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(&url.bucket)
        .with_region(region)
        .with_access_key_id(key_id)
        .with_secret_access_key(secret)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .with_client_options(
            ClientOptions::new()
                .with_connect_timeout(Duration::from_secs(3))
                .with_timeout(Duration::from_secs(30)),
        )
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: 2,
            retry_timeout: Duration::from_secs(10),
        });
    if let Some(token) = env("AWS_SESSION_TOKEN") {
        builder = builder.with_token(token);
    }
    if let Some(e) = &url.endpoint {
        let plain = e.starts_with("http://");
        let bad = |reason: &str| Error::BadUrl {
            url: format!("{}{}", base.0, base.1),
            reason: reason.into(),
        };
        if !plain && !e.starts_with("https://") {
            return Err(bad(
                "endpoint= takes an http:// or https:// URL (endpoint=http://host:port)",
            ));
        }
        if redact_userinfo(e) != *e {
            return Err(bad("credentials do not go in the endpoint: set AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY in the environment"));
        }
        builder = builder
            .with_endpoint(e.trim_end_matches('/'))
            .with_allow_http(plain)
            .with_virtual_hosted_style_request(false);
    }
    let store = builder.build().map_err(|e| Error::BadUrl {
        url: format!("{}{}", base.0, base.1),
        reason: format!("cannot configure the S3 client: {e}"),
    })?;
    let inner = Arc::new(Inner {
        store: Arc::new(store),
        bucket_url: base.0,
        query: base.1,
        read_only: options.read_only,
    });
    runtime(&inner, "/")?;
    Ok(Arc::new(S3(inner)))
}

/// `http://user:pass@host` -> `http://host`: no credentials in messages.
fn redact_userinfo(endpoint: &str) -> String {
    let (scheme, rest) = endpoint.split_once("://").unwrap_or(("", endpoint));
    let host_end = rest.find('/').unwrap_or(rest.len());
    match rest[..host_end].rfind('@') {
        Some(at) if scheme.is_empty() => rest[at + 1..].to_string(),
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => endpoint.to_string(),
    }
}

/// The process-wide runtime every `s3://` request runs on.
fn runtime(inner: &Inner, path: &str) -> Result<&'static Runtime> {
    static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("vellum-s3")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| inner.remote(path, RemoteFailure::Other, format!("no runtime for S3: {e}")))
}

/// What one bucket's handles share.
#[derive(Debug)]
struct Inner {
    store: Arc<AmazonS3>,
    /// `s3://bucket`, for messages.
    bucket_url: String,
    /// `?endpoint=...` (without credentials) or empty, for messages.
    query: String,
    read_only: bool,
}

/// Why a request failed, as far as the facade cares.
enum Failure {
    /// 404 on an object.
    NotFound,
    /// 412 on a conditional request (or 409: a concurrent conditional write).
    Precondition,
    /// `If-None-Match: *` on an existing object.
    Exists,
    /// Anything else.
    Remote(RemoteFailure, String),
}

/// The S3 error code in an error's text (`<Code>NoSuchBucket</Code>`), and its message.
fn s3_code(text: &str) -> Option<(&str, &str)> {
    let between = |open: &str, close: &str| {
        let start = text.find(open)? + open.len();
        let len = text[start..].find(close)?;
        Some(&text[start..start + len])
    };
    Some((between("<Code>", "</Code>")?, between("<Message>", "</Message>").unwrap_or("")))
}

fn classify(e: &object_store::Error) -> Failure {
    let text = e.to_string();
    if let Some((code, message)) = s3_code(&text) {
        let kind = match code {
            "NoSuchBucket" => Some(RemoteFailure::NoSuchBucket),
            "InvalidAccessKeyId"
            | "SignatureDoesNotMatch"
            | "AccessDenied"
            | "ExpiredToken"
            | "InvalidToken"
            | "TokenRefreshRequired" => Some(RemoteFailure::Unauthorized),
            _ => None,
        };
        if let Some(kind) = kind {
            let message =
                if message.is_empty() { code.to_string() } else { format!("{code}: {message}") };
            return Failure::Remote(kind, message);
        }
    }
    match e {
        object_store::Error::NotFound { .. } => return Failure::NotFound,
        object_store::Error::Precondition { .. } => return Failure::Precondition,
        object_store::Error::AlreadyExists { .. } => return Failure::Exists,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => {
            return Failure::Remote(RemoteFailure::Unauthorized, root_cause(e));
        }
        _ => {}
    }
    // No answer at all: the transport failed (connect, timeout, a connection cut).
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(http) = s.downcast_ref::<HttpError>() {
            return match http.kind() {
                HttpErrorKind::Connect
                | HttpErrorKind::Timeout
                | HttpErrorKind::Request
                | HttpErrorKind::Interrupted => Failure::Remote(
                    RemoteFailure::Unreachable,
                    format!("no answer from the endpoint: {}", deepest(e)),
                ),
                _ => Failure::Remote(RemoteFailure::Other, root_cause(e)),
            };
        }
        source = s.source();
    }
    let message = match s3_code(&text) {
        Some((code, message)) => format!("{code}: {message}"),
        None => root_cause(e),
    };
    Failure::Remote(RemoteFailure::Other, message)
}

/// The deepest cause of an error (what the network said).
fn deepest(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(s) = last.source() {
        last = s;
    }
    last.to_string()
}

/// The error's own line and its deepest cause (what the network or the server said),
/// without the intermediate wrappers.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let top = e.to_string();
    let mut deepest = None;
    let mut source = e.source();
    while let Some(s) = source {
        deepest = Some(s.to_string());
        source = s.source();
    }
    match deepest {
        Some(d) if !top.contains(&d) => format!("{top}: {d}"),
        _ => top,
    }
}

impl Inner {
    /// `s3://bucket/key?endpoint=...` for `path`.
    fn url(&self, path: &str) -> String {
        format!("{}{}{}", self.bucket_url, if path == "/" { "" } else { path }, self.query)
    }

    fn remote(&self, path: &str, kind: RemoteFailure, message: String) -> Error {
        Error::Remote { url: self.url(path), kind, message }
    }

    /// The facade's error for a failed request on `path`.
    fn error(&self, path: &str, e: &object_store::Error) -> Error {
        match classify(e) {
            Failure::NotFound => Error::NotFound { path: path.as_bytes().to_vec() },
            Failure::Precondition => Error::PreconditionFailed {
                path: path.into(),
                why: "the object changed since its version was read (a stale writer or reader)"
                    .into(),
            },
            Failure::Exists => Error::PreconditionFailed {
                path: path.into(),
                why: "the object exists (create-only write)".into(),
            },
            Failure::Remote(kind, message) => self.remote(path, kind, message),
        }
    }

    /// Runs `fut` on the medium's runtime and waits for it on this thread (which may belong
    /// to another runtime: the wait is on a std channel, not a `block_on`).
    fn run<T: Send + 'static>(
        &self,
        path: &str,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime(self, path)?.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().map_err(|_| {
            self.remote(
                path,
                RemoteFailure::Other,
                "the request's task ended without an answer".into(),
            )
        })
    }

    /// Runs one `object_store` request on `path` and maps its error.
    fn request<T: Send + 'static>(
        &self,
        path: &str,
        fut: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> Result<T> {
        self.run(path, fut)?.map_err(|e| self.error(path, &e))
    }

    fn writable(&self) -> Result<()> {
        if self.read_only { Err(Error::ReadOnly) } else { Ok(()) }
    }

    /// Whether objects exist under `key/` (the whole bucket for the root). Errors as the
    /// listing failed (a missing bucket shows here).
    fn has_children(&self, path: &str, key: Option<&Key>) -> Result<bool> {
        let store = Arc::clone(&self.store);
        let key = key.cloned();
        let first = self.run(path, async move { store.list(key.as_ref()).next().await })?;
        match first {
            None => Ok(false),
            Some(Ok(_)) => Ok(true),
            Some(Err(e)) => Err(self.error(path, &e)),
        }
    }

    /// The error for "no object at `path`": a directory when objects are under it, else
    /// not found (or the bucket's own error).
    fn missing(&self, path: &str, key: &Key) -> Error {
        match self.has_children(path, Some(key)) {
            Ok(true) => Error::IsADirectory { path: path.as_bytes().to_vec() },
            Ok(false) => Error::NotFound { path: path.as_bytes().to_vec() },
            Err(e) => e,
        }
    }

    /// One ranged GET of `range` at version `etag`.
    fn get_range(
        &self,
        path: &str,
        key: &Key,
        range: std::ops::Range<u64>,
        etag: Option<&str>,
    ) -> Result<Bytes> {
        count_get(self, path);
        let store = Arc::clone(&self.store);
        let key = key.clone();
        let options = GetOptions {
            range: Some(GetRange::Bounded(range)),
            if_match: etag.map(str::to_string),
            ..GetOptions::default()
        };
        let result = self.request(path, async move {
            let got = store.get_opts(&key, options).await?;
            got.bytes().await
        });
        removed(path, result)
    }

    /// Opens a streaming GET of `key` from `offset` to the end at version `etag`: a task on
    /// the runtime hands its chunks on in runs of at least [`BLOCK`] bytes, at most
    /// [`BLOCKS_AHEAD`] runs waiting.
    fn stream_from(
        &self,
        path: &str,
        key: &Key,
        offset: u64,
        etag: Option<&str>,
    ) -> Result<Stream> {
        count_get(self, path);
        let store = Arc::clone(&self.store);
        let key = key.clone();
        let options = GetOptions {
            range: Some(GetRange::Offset(offset)),
            if_match: etag.map(str::to_string),
            ..GetOptions::default()
        };
        let (tx, rx) = tokio::sync::mpsc::channel(BLOCKS_AHEAD);
        let task = runtime(self, path)?.spawn(async move {
            let mut chunks = match store.get_opts(&key, options).await {
                Ok(got) => got.into_stream(),
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            // The chunks as the client hands them over (reference-counted: never copied
            // here), sent once they hold a block's bytes.
            let mut run: Vec<Bytes> = Vec::new();
            let mut len = 0;
            while let Some(chunk) = chunks.next().await {
                let chunk = match chunk {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                len += chunk.len();
                run.push(chunk);
                if len < BLOCK {
                    continue;
                }
                len = 0;
                // The reader went away (dropped, or read elsewhere): stop, close the GET.
                if tx.send(Ok(std::mem::take(&mut run))).await.is_err() {
                    return;
                }
            }
            if !run.is_empty() {
                let _ = tx.send(Ok(run)).await;
            }
        });
        Ok(Stream { at: offset, chunks: VecDeque::new(), rx: Some(rx), task })
    }
}

/// A reader's open streaming GET: the bytes from `at` on are `chunks`, then what `rx` brings.
#[derive(Debug)]
struct Stream {
    /// The object offset of the first byte of `chunks` (the next byte the reader gets).
    at: u64,
    /// What is left of the chunks received (a read may have taken the front one in part).
    chunks: VecDeque<Bytes>,
    /// The runs of chunks the task pulls (taken while a receive is on the runtime).
    rx: Option<tokio::sync::mpsc::Receiver<object_store::Result<Vec<Bytes>>>>,
    /// The task pulling the GET.
    task: JoinHandle<()>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stream {
    /// Fills `buf` from the stream (the object has at least `buf.len()` bytes from `at`).
    fn read(&mut self, inner: &Inner, path: &str, buf: &mut [u8]) -> Result<()> {
        let mut n = 0;
        while n < buf.len() {
            let Some(chunk) = self.chunks.front_mut() else {
                // One trip to the runtime brings every run this read still needs.
                let need = buf.len() - n;
                let Some(mut rx) = self.rx.take() else {
                    return Err(ended(inner, path));
                };
                let (rx, got) = inner.run(path, async move {
                    let mut got = Vec::new();
                    let mut have = 0;
                    while have < need {
                        match rx.recv().await {
                            Some(Ok(run)) => {
                                have += run.iter().map(Bytes::len).sum::<usize>();
                                got.push(Ok(run));
                            }
                            Some(Err(e)) => {
                                got.push(Err(e));
                                break;
                            }
                            None => break,
                        }
                    }
                    (rx, got)
                })?;
                self.rx = Some(rx);
                if got.is_empty() {
                    return Err(ended(inner, path));
                }
                for run in got {
                    self.chunks.extend(removed(path, run.map_err(|e| inner.error(path, &e)))?);
                }
                continue;
            };
            let k = chunk.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&chunk[..k]);
            if k == chunk.len() {
                self.chunks.pop_front();
            } else {
                *chunk = chunk.slice(k..);
            }
            n += k;
            self.at += k as u64;
        }
        Ok(())
    }
}

/// A GET's 404 on an object opened before: it was removed since (a lost precondition).
fn removed<T>(path: &str, result: Result<T>) -> Result<T> {
    match result {
        Err(Error::NotFound { .. }) => Err(Error::PreconditionFailed {
            path: path.into(),
            why: "the object was removed since it was opened".into(),
        }),
        other => other,
    }
}

/// A streaming GET that ended before the object's length.
fn ended(inner: &Inner, path: &str) -> Error {
    inner.remote(path, RemoteFailure::Other, "the object's GET ended before its length".into())
}

/// Checks and normalises an absolute path into `(path, key)`: no empty, `.` or `..`
/// component; a trailing `/` is dropped; the root has no key.
fn key_of(path: &str) -> Result<(String, Option<Key>)> {
    if !path.starts_with('/') {
        return Err(Error::Invalid(Invalid::Path));
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok(("/".into(), None));
    }
    if trimmed[1..].split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(Error::Invalid(Invalid::Path));
    }
    let key = Key::parse(&trimmed[1..]).map_err(|_| Error::Invalid(Invalid::Path))?;
    Ok((trimmed.to_string(), Some(key)))
}

/// A path that must name an object (not the root).
fn object_key(path: &str) -> Result<(String, Key)> {
    match key_of(path)? {
        (path, Some(key)) => Ok((path, key)),
        (path, None) => Err(Error::IsADirectory { path: path.into_bytes() }),
    }
}

fn modified_ns(meta: &object_store::ObjectMeta) -> Option<u64> {
    meta.last_modified.timestamp_nanos_opt().and_then(|n| u64::try_from(n).ok())
}

/// The `s3://` medium: one bucket.
#[derive(Debug)]
struct S3(Arc<Inner>);

impl Media for S3 {
    fn medium(&self) -> Medium {
        Medium::Object
    }

    fn open(&self, path: &str) -> Result<Box<dyn MediaFile>> {
        let (path, key) = object_key(path)?;
        let store = Arc::clone(&self.0.store);
        let k = key.clone();
        let head = self.0.run(&path, async move { store.head(&k).await })?;
        let meta = match head {
            Ok(meta) => meta,
            Err(e) => {
                return Err(match classify(&e) {
                    Failure::NotFound => self.0.missing(&path, &key),
                    _ => self.0.error(&path, &e),
                });
            }
        };
        Ok(Box::new(Reader {
            inner: Arc::clone(&self.0),
            path,
            key,
            len: meta.size,
            etag: meta.e_tag,
            cache: Mutex::new(None),
            seq: Mutex::new(Sequential { end: 0, stream: None }),
        }))
    }

    fn create(&self, path: &str) -> Result<Box<dyn MediaFile>> {
        self.0.writable()?;
        let (path, key) = object_key(path)?;
        Ok(Box::new(Writer {
            inner: Arc::clone(&self.0),
            path,
            key,
            state: Mutex::new(WriterState { len: 0, buf: Vec::new(), phase: Phase::Buffering }),
        }))
    }

    fn mkdir(&self, path: &str) -> Result<()> {
        self.0.writable()?;
        key_of(path)?;
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.0.writable()?;
        let (from, from_key) = object_key(from)?;
        let (to, to_key) = object_key(to)?;
        if from == to {
            return self.stat(&from).map(|_| ());
        }
        let store = Arc::clone(&self.0.store);
        let (f, t) = (from_key.clone(), to_key);
        let copied = self.0.run(&from, async move { store.copy(&f, &t).await })?;
        if let Err(e) = copied {
            return Err(match classify(&e) {
                Failure::NotFound => match self.0.missing(&from, &from_key) {
                    Error::IsADirectory { .. } => Error::NotSupported {
                        medium: SCHEME,
                        op: "rename a directory",
                        why: "a directory is a key prefix; copy its objects one by one",
                    },
                    other => other,
                },
                _ => self.0.error(&from, &e),
            });
        }
        let store = Arc::clone(&self.0.store);
        self.0.request(&from, async move { store.delete(&from_key).await })
    }

    fn remove(&self, path: &str) -> Result<()> {
        self.0.writable()?;
        let (path, key) = object_key(path)?;
        let store = Arc::clone(&self.0.store);
        let k = key.clone();
        // S3 answers a DELETE of a missing key with success: look first, so a missing file
        // is NotFound as on every other medium (not atomic; nothing relies on it).
        let head = self.0.run(&path, async move { store.head(&k).await })?;
        if let Err(e) = head {
            return Err(match classify(&e) {
                Failure::NotFound => match self.0.missing(&path, &key) {
                    Error::IsADirectory { path } => Error::DirectoryNotEmpty { path },
                    other => other,
                },
                _ => self.0.error(&path, &e),
            });
        }
        let store = Arc::clone(&self.0.store);
        self.0.request(&path, async move { store.delete(&key).await })
    }

    fn list(&self, dir: &str) -> Result<Vec<Entry>> {
        let (dir, key) = key_of(dir)?;
        let store = Arc::clone(&self.0.store);
        let k = key.clone();
        let listed =
            self.0.request(&dir, async move { store.list_with_delimiter(k.as_ref()).await })?;
        let mut entries: Vec<Entry> = listed
            .objects
            .into_iter()
            .map(|o| Entry { path: format!("/{}", o.location), kind: EntryKind::File, len: o.size })
            .chain(listed.common_prefixes.into_iter().map(|p| Entry {
                path: format!("/{p}"),
                kind: EntryKind::Directory,
                len: 0,
            }))
            .collect();
        // A prefix with nothing under it lists as empty (directories are prefixes); an
        // object's own key is not a directory.
        if entries.is_empty()
            && let Some(key) = key
        {
            let store = Arc::clone(&self.0.store);
            let head = self.0.run(&dir, async move { store.head(&key).await })?;
            match head {
                Ok(_) => return Err(Error::NotADirectory { path: dir.into_bytes() }),
                Err(e) if !matches!(classify(&e), Failure::NotFound) => {
                    return Err(self.0.error(&dir, &e));
                }
                Err(_) => {}
            }
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path).then((a.kind as u8).cmp(&(b.kind as u8))));
        Ok(entries)
    }

    fn stat(&self, path: &str) -> Result<Stat> {
        let directory =
            Stat { kind: EntryKind::Directory, len: 0, version: None, modified_unix_ns: None };
        let (path, Some(key)) = key_of(path)? else {
            // The root is the bucket: list it once so a missing bucket shows here.
            self.0.has_children("/", None)?;
            return Ok(directory);
        };
        let store = Arc::clone(&self.0.store);
        let k = key.clone();
        match self.0.run(&path, async move { store.head(&k).await })? {
            Ok(meta) => Ok(Stat {
                kind: EntryKind::File,
                len: meta.size,
                modified_unix_ns: modified_ns(&meta),
                version: meta.e_tag.map(Version),
            }),
            Err(e) => match classify(&e) {
                Failure::NotFound => match self.0.missing(&path, &key) {
                    Error::IsADirectory { .. } => Ok(directory),
                    other => Err(other),
                },
                _ => Err(self.0.error(&path, &e)),
            },
        }
    }

    fn attributes(&self, path: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let (path, key) = object_key(path)?;
        let store = Arc::clone(&self.0.store);
        let k = key.clone();
        let options = GetOptions { head: true, ..GetOptions::default() };
        let got = self.0.run(&path, async move { store.get_opts(&k, options).await })?;
        let got = match got {
            Ok(got) => got,
            Err(e) => {
                return Err(match classify(&e) {
                    Failure::NotFound => match self.0.missing(&path, &key) {
                        // A directory has no metadata of its own.
                        Error::IsADirectory { .. } => return Ok(Vec::new()),
                        other => other,
                    },
                    _ => self.0.error(&path, &e),
                });
            }
        };
        let mut attributes: Vec<(String, Vec<u8>)> = got
            .attributes
            .iter()
            .filter_map(|(k, v)| match k {
                Attribute::Metadata(name) => {
                    Some((name.to_string(), v.as_ref().as_bytes().to_vec()))
                }
                _ => None,
            })
            .collect();
        attributes.sort();
        Ok(attributes)
    }

    fn put(&self, path: &str, bytes: &[u8], mode: PutMode) -> Result<Version> {
        self.0.writable()?;
        let (path, key) = object_key(path)?;
        let update = matches!(mode, PutMode::Update(_));
        let mode = match mode {
            PutMode::Overwrite => object_store::PutMode::Overwrite,
            PutMode::Create => object_store::PutMode::Create,
            PutMode::Update(v) => {
                object_store::PutMode::Update(UpdateVersion { e_tag: Some(v.0), version: None })
            }
        };
        let store = Arc::clone(&self.0.store);
        let payload = PutPayload::from(bytes.to_vec());
        let put = self.0.run(&path, async move {
            store.put_opts(&key, payload, PutOptions::from(mode)).await
        })?;
        match put {
            Ok(done) => etag(&self.0, &path, done.e_tag),
            Err(e) => Err(match classify(&e) {
                // If-Match on a missing object: the writer's version is gone.
                Failure::NotFound if update => Error::PreconditionFailed {
                    path,
                    why: "the object is gone (it was removed since its version was read)".into(),
                },
                _ => self.0.error(&path, &e),
            }),
        }
    }

    fn get(&self, path: &str) -> Result<(Vec<u8>, Version)> {
        let (path, key) = object_key(path)?;
        let store = Arc::clone(&self.0.store);
        let k = key.clone();
        let got = self.0.run(&path, async move {
            let got = store.get_opts(&k, GetOptions::default()).await?;
            let tag = got.meta.e_tag.clone();
            Ok::<_, object_store::Error>((got.bytes().await?, tag))
        })?;
        match got {
            Ok((bytes, tag)) => Ok((bytes.to_vec(), etag(&self.0, &path, tag)?)),
            Err(e) => Err(match classify(&e) {
                Failure::NotFound => self.0.missing(&path, &key),
                _ => self.0.error(&path, &e),
            }),
        }
    }
}

/// A server's ETag as a version (a server without ETags cannot take conditional writes).
fn etag(inner: &Inner, path: &str, tag: Option<String>) -> Result<Version> {
    tag.map(Version).ok_or_else(|| {
        inner.remote(
            path,
            RemoteFailure::Other,
            "the server answered without an ETag (conditional writes need one)".into(),
        )
    })
}

/// A read-only handle on one version of an object.
#[derive(Debug)]
struct Reader {
    inner: Arc<Inner>,
    path: String,
    key: Key,
    len: u64,
    etag: Option<String>,
    /// The last readahead: its offset and bytes.
    cache: Mutex<Option<(u64, Bytes)>>,
    /// Where the last read ended, and the streaming GET sequential reads are served from.
    seq: Mutex<Sequential>,
}

#[derive(Debug)]
struct Sequential {
    /// The end of the last read.
    end: u64,
    /// The open streaming GET (its next byte is at `stream.at`).
    stream: Option<Stream>,
}

impl Reader {
    fn cache(&self) -> MutexGuard<'_, Option<(u64, Bytes)>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn read_only() -> Error {
        Error::NotSupported {
            medium: SCHEME,
            op: "write to an opened object",
            why: "objects opened for reading are read-only; write a new one with create() \
                  (sequential writes, uploaded on sync/close) or put()",
        }
    }
}

impl MediaFile for Reader {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        if offset >= self.len || buf.is_empty() {
            return Ok(0);
        }
        let want = buf.len().min((self.len - offset) as usize);
        let mut seq = self.seq.lock().unwrap_or_else(PoisonError::into_inner);
        let end = std::mem::replace(&mut seq.end, offset + want as u64);
        if let Some(stream) = &mut seq.stream {
            if stream.at == offset {
                if let Err(e) = stream.read(&self.inner, &self.path, &mut buf[..want]) {
                    seq.stream = None;
                    seq.end = 0;
                    return Err(e);
                }
                return Ok(want);
            }
            // A read elsewhere: the stream's bytes are not the ones wanted.
            seq.stream = None;
        }
        if let Some((at, bytes)) = self.cache().as_ref()
            && offset >= *at
            && offset + want as u64 <= *at + bytes.len() as u64
        {
            let from = (offset - at) as usize;
            buf[..want].copy_from_slice(&bytes[from..from + want]);
            return Ok(want);
        }
        // A read that continues the last one (or a large one from the start): stream the
        // rest of the object.
        if offset == end && (offset > 0 || want >= READAHEAD) {
            let mut stream =
                self.inner.stream_from(&self.path, &self.key, offset, self.etag.as_deref())?;
            stream.read(&self.inner, &self.path, &mut buf[..want])?;
            seq.stream = Some(stream);
            return Ok(want);
        }
        drop(seq);
        let fetch = want.max(READAHEAD).min((self.len - offset) as usize);
        let bytes = self.inner.get_range(
            &self.path,
            &self.key,
            offset..offset + fetch as u64,
            self.etag.as_deref(),
        )?;
        let n = want.min(bytes.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        if bytes.len() > n {
            *self.cache() = Some((offset, bytes));
        }
        Ok(n)
    }

    fn write_at(&self, _buf: &[u8], _offset: u64) -> Result<()> {
        Err(Self::read_only())
    }

    fn append(&self, _buf: &[u8]) -> Result<u64> {
        Err(Self::read_only())
    }

    fn set_len(&self, _len: u64) -> Result<()> {
        Err(Self::read_only())
    }

    fn len(&self) -> Result<u64> {
        Ok(self.len)
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// Where a writer's upload is.
#[derive(Debug)]
enum Phase {
    /// Everything written is in the buffer (below [`PART`] so far).
    Buffering,
    /// A multipart upload is open: parts sent or sending, the tail in the buffer.
    Uploading {
        upload: Box<dyn MultipartUpload>,
        parts: VecDeque<JoinHandle<object_store::Result<()>>>,
    },
    /// The object is on the server at this version; the writer takes no more bytes.
    Done { etag: Option<String> },
    /// The upload failed (and was aborted); the message says how.
    Failed(String),
}

#[derive(Debug)]
struct WriterState {
    /// Bytes written so far.
    len: u64,
    /// Bytes not yet sent.
    buf: Vec<u8>,
    phase: Phase,
}

/// A sequential writer that uploads on `sync`/`close`.
#[derive(Debug)]
struct Writer {
    inner: Arc<Inner>,
    path: String,
    key: Key,
    state: Mutex<WriterState>,
}

impl Writer {
    fn state(&self) -> MutexGuard<'_, WriterState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failed(&self, message: &str) -> Error {
        self.inner.remote(
            &self.path,
            RemoteFailure::Other,
            format!("this upload failed earlier ({message}); create the object again"),
        )
    }

    /// Marks the upload failed (aborting its multipart upload) and returns `e`.
    fn fail(&self, st: &mut WriterState, e: Error) -> Error {
        if let Phase::Uploading { upload, parts } =
            std::mem::replace(&mut st.phase, Phase::Failed(e.to_string()))
        {
            self.abort(upload, &parts);
        }
        st.buf = Vec::new();
        e
    }

    /// Aborts a multipart upload in the background (its parts stop, the server drops them).
    fn abort(
        &self,
        mut upload: Box<dyn MultipartUpload>,
        parts: &VecDeque<JoinHandle<object_store::Result<()>>>,
    ) {
        for part in parts {
            part.abort();
        }
        if let Ok(rt) = runtime(&self.inner, &self.path) {
            rt.spawn(async move {
                let _ = upload.abort().await;
            });
        }
    }

    /// Waits for one sent part.
    fn wait_part(&self, part: JoinHandle<object_store::Result<()>>) -> Result<()> {
        match self.inner.run(&self.path, part)? {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.inner.error(&self.path, &e)),
            Err(e) => Err(self.inner.remote(
                &self.path,
                RemoteFailure::Other,
                format!("a part upload stopped: {e}"),
            )),
        }
    }

    /// Sends the buffer (a full [`PART`]) as a part, opening the multipart upload
    /// first if needed, and keeps at most [`PARTS_IN_FLIGHT`] parts in flight.
    fn send_part(&self, st: &mut WriterState) -> Result<()> {
        if matches!(st.phase, Phase::Buffering) {
            let store = Arc::clone(&self.inner.store);
            let key = self.key.clone();
            let upload =
                self.inner.request(&self.path, async move { store.put_multipart(&key).await })?;
            st.phase = Phase::Uploading { upload, parts: VecDeque::new() };
        }
        // The next part's buffer is allocated whole once: no regrowth while it fills.
        let part = std::mem::replace(&mut st.buf, Vec::with_capacity(PART));
        let rt = runtime(&self.inner, &self.path)?;
        let Phase::Uploading { upload, parts } = &mut st.phase else {
            return Ok(());
        };
        parts.push_back(rt.spawn(upload.put_part(PutPayload::from(part))));
        while parts.len() > PARTS_IN_FLIGHT {
            let Some(oldest) = parts.pop_front() else { break };
            self.wait_part(oldest)?;
        }
        Ok(())
    }

    fn check_writable(&self, st: &WriterState, offset: u64) -> Result<()> {
        match &st.phase {
            Phase::Done { .. } => Err(Error::NotSupported {
                medium: SCHEME,
                op: "write after the upload completed",
                why: "sync/close uploaded the object whole; create it again to write a new one",
            }),
            Phase::Failed(message) => Err(self.failed(message)),
            _ if offset != st.len => Err(Error::NotSupported {
                medium: SCHEME,
                op: "write before the end of an object",
                why: "objects are uploaded whole and written sequentially: write at the \
                      current end (append), or create the object again",
            }),
            _ => Ok(()),
        }
    }
}

impl MediaFile for Writer {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let st = self.state();
        match &st.phase {
            Phase::Buffering => {
                let Ok(from) = usize::try_from(offset) else { return Ok(0) };
                if from >= st.buf.len() {
                    return Ok(0);
                }
                let n = buf.len().min(st.buf.len() - from);
                buf[..n].copy_from_slice(&st.buf[from..from + n]);
                Ok(n)
            }
            Phase::Uploading { .. } => Err(Error::NotSupported {
                medium: SCHEME,
                op: "read an object while its parts upload",
                why: "sync or close the writer first, then read (the object is whole then)",
            }),
            Phase::Done { etag } => {
                if offset >= st.len || buf.is_empty() {
                    return Ok(0);
                }
                let n = buf.len().min((st.len - offset) as usize);
                let etag = etag.clone();
                drop(st);
                let bytes = self.inner.get_range(
                    &self.path,
                    &self.key,
                    offset..offset + n as u64,
                    etag.as_deref(),
                )?;
                let n = n.min(bytes.len());
                buf[..n].copy_from_slice(&bytes[..n]);
                Ok(n)
            }
            Phase::Failed(message) => Err(self.failed(message)),
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let mut st = self.state();
        self.check_writable(&st, offset)?;
        // The buffer never holds more than a part: fill it, send it when full, go on.
        let mut rest = buf;
        while !rest.is_empty() {
            let n = rest.len().min(PART - st.buf.len());
            st.buf.extend_from_slice(&rest[..n]);
            st.len += n as u64;
            rest = &rest[n..];
            if st.buf.len() == PART
                && let Err(e) = self.send_part(&mut st)
            {
                return Err(self.fail(&mut st, e));
            }
        }
        Ok(())
    }

    fn append(&self, buf: &[u8]) -> Result<u64> {
        let offset = self.state().len;
        self.write_at(buf, offset)?;
        Ok(offset)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let st = self.state();
        if len == st.len {
            return Ok(());
        }
        Err(Error::NotSupported {
            medium: SCHEME,
            op: "change the length of an object",
            why: "objects are uploaded whole: write the bytes it should hold, in order",
        })
    }

    fn len(&self) -> Result<u64> {
        Ok(self.state().len)
    }

    fn sync(&self) -> Result<()> {
        let mut st = self.state();
        let tail = std::mem::take(&mut st.buf);
        let store = Arc::clone(&self.inner.store);
        let key = self.key.clone();
        let done = match std::mem::replace(&mut st.phase, Phase::Buffering) {
            Phase::Done { etag } => {
                st.phase = Phase::Done { etag };
                return Ok(());
            }
            Phase::Failed(message) => {
                st.phase = Phase::Failed(message.clone());
                return Err(self.failed(&message));
            }
            Phase::Buffering => self
                .inner
                .request(&self.path, async move { store.put(&key, PutPayload::from(tail)).await }),
            Phase::Uploading { mut upload, parts } => self.inner.request(&self.path, async move {
                let mut sent = Ok(());
                if !tail.is_empty() {
                    sent = upload.put_part(PutPayload::from(tail)).await;
                }
                for part in parts {
                    let done = part.await.unwrap_or_else(|e| {
                        Err(object_store::Error::Generic { store: "S3", source: Box::new(e) })
                    });
                    if sent.is_ok() {
                        sent = done;
                    }
                }
                match sent {
                    Ok(()) => match upload.complete().await {
                        Ok(done) => Ok(done),
                        Err(e) => {
                            let _ = upload.abort().await;
                            Err(e)
                        }
                    },
                    Err(e) => {
                        let _ = upload.abort().await;
                        Err(e)
                    }
                }
            }),
        };
        match done {
            Ok(done) => {
                st.phase = Phase::Done { etag: done.e_tag };
                Ok(())
            }
            Err(e) => {
                st.phase = Phase::Failed(e.to_string());
                Err(e)
            }
        }
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.sync()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        let len = st.len;
        let phase = std::mem::replace(&mut st.phase, Phase::Failed(String::new()));
        let what = match phase {
            Phase::Buffering => "nothing was uploaded",
            Phase::Uploading { upload, parts } => {
                self.abort(upload, &parts);
                "its multipart upload is aborted"
            }
            Phase::Done { .. } | Phase::Failed(_) => return,
        };
        tracing::warn!(
            url = %self.inner.url(&self.path),
            bytes = len,
            "an s3:// writer was dropped without sync or close: {what}"
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn paths_become_keys() {
        assert_eq!(key_of("/").unwrap(), ("/".to_string(), None));
        assert_eq!(key_of("//").unwrap().1, None);
        let (path, key) = key_of("/a/b/").unwrap();
        assert_eq!((path.as_str(), key.unwrap().as_ref()), ("/a/b", "a/b"));
        for bad in ["a", "/a//b", "/a/./b", "/a/../b", ""] {
            assert!(matches!(key_of(bad), Err(Error::Invalid(Invalid::Path))), "{bad}");
        }
        assert!(matches!(object_key("/"), Err(Error::IsADirectory { .. })));
    }

    #[test]
    fn no_credentials_in_endpoints_shown() {
        assert_eq!(redact_userinfo("http://u:p@h:9/x"), "http://h:9/x");
        assert_eq!(redact_userinfo("https://h:9"), "https://h:9");
        assert_eq!(redact_userinfo("http://h/a@b"), "http://h/a@b");
    }

    #[test]
    fn s3_error_codes_are_read() {
        let body = "<Error><Code>NoSuchBucket</Code><Message>gone</Message></Error>";
        assert_eq!(s3_code(body), Some(("NoSuchBucket", "gone")));
        assert_eq!(s3_code("<Code>X</Code>"), Some(("X", "")));
        assert_eq!(s3_code("plain text"), None);
    }
}
