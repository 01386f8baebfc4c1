//! `vellum kv put|get|del` and `vellum cluster status|add|promote|remove`: HTTP clients of a
//! running cluster.
//!
//! `--endpoints A,B,C` (or `VELLUM_ENDPOINTS`; `--endpoint` is an alias) are tried in order,
//! as etcdctl does: a connection failure, a timeout or a 503 (no leader there) moves on to
//! the next; only when every endpoint failed is each named, one line each, and the exit code
//! is 6 ("unreachable"). A key that is not there exits with 5 ("not found").
//!
//! `--token` (or `VELLUM_TOKEN`) is sent as `Authorization: Bearer` on every request, for a
//! cluster started with `--auth-tokens`; it is never printed. An `https://` endpoint is
//! verified against `--cacert`, and `--cert/--key` present a client certificate (for an API
//! started with `--api-ca`).

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use clap::Subcommand;

use super::CliError;
use crate::security::exposure::is_loopback_endpoint;
use crate::security::tls;
use crate::security::tokens::BearerToken;
use crate::server::groups::Step;

/// How the client proves who it is and checks whom it talks to.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Access {
    /// A bearer token, for a cluster whose API requires one (`read` reads, `write` writes,
    /// `admin` changes members). Prefer VELLUM_TOKEN: a command line is visible to every
    /// user of the machine.
    #[arg(long, global = true, env = "VELLUM_TOKEN", hide_env_values = true)]
    pub token: Option<BearerToken>,
    /// The CA (PEM) that signed the nodes' API certificates, for an https:// endpoint.
    #[arg(long, value_name = "FILE", global = true, env = "VELLUM_CACERT")]
    pub cacert: Option<PathBuf>,
    /// A client certificate (PEM) to present, for an API started with --api-ca.
    #[arg(
        long = "cert",
        id = "client_cert",
        global = true,
        env = "VELLUM_CERT",
        requires = "client_key"
    )]
    pub cert: Option<PathBuf>,
    /// The private key (PEM) of --cert.
    // (`key` alone would clash with the KEY argument of `vellum kv`.)
    #[arg(
        long = "key",
        id = "client_key",
        global = true,
        env = "VELLUM_KEY",
        requires = "client_cert"
    )]
    pub key: Option<PathBuf>,
    /// Send the token even over plain HTTP to an endpoint off loopback, where anyone on the
    /// path can read it (without this, such a command is refused before it connects).
    #[arg(
        long,
        global = true,
        env = "VELLUM_INSECURE",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub insecure: bool,
}

/// Refuses to send `access`'s token over plain HTTP to `url` off loopback unless
/// `--insecure` (then warns): a bearer token in the clear is a token given away.
fn check_token_transport(access: &Access, url: &str) -> Result<(), CliError> {
    if access.token.is_none() || url.starts_with("https://") || is_loopback_endpoint(url) {
        return Ok(());
    }
    let host = url.trim_start_matches("http://").split('/').next().unwrap_or(url);
    if access.insecure {
        eprintln!(
            "vellum: warning: sending the token over plain HTTP to {host} (--insecure): anyone \
             on the path can read it"
        );
        return Ok(());
    }
    Err(CliError::Usage(format!(
        "refusing to send the token over plain HTTP to {host}, off loopback: use an https:// \
         endpoint (with --cacert), or --insecure to send it in the clear"
    )))
}

/// The endpoints to try, in order.
#[derive(clap::Args, Debug, Clone)]
pub struct Endpoints {
    /// Nodes' API addresses, comma-separated, tried in order: a connection failure, a timeout
    /// or "no leader" (503) moves on to the next [default: 127.0.0.1:8080; env VELLUM_ENDPOINT,
    /// the single address of earlier versions, is read too].
    #[arg(
        long = "endpoints",
        visible_alias = "endpoint",
        global = true,
        env = "VELLUM_ENDPOINTS",
        value_delimiter = ',',
        value_name = "ADDRS"
    )]
    pub endpoints: Vec<String>,
}

impl Endpoints {
    /// The endpoints given, else `VELLUM_ENDPOINT`, else `127.0.0.1:8080`.
    pub fn list(&self) -> Vec<String> {
        let given: Vec<String> =
            self.endpoints.iter().map(|e| e.trim().to_string()).filter(|e| !e.is_empty()).collect();
        if !given.is_empty() {
            return given;
        }
        match std::env::var("VELLUM_ENDPOINT") {
            Ok(e) if !e.trim().is_empty() => {
                e.split(',').map(|e| e.trim().to_string()).filter(|e| !e.is_empty()).collect()
            }
            _ => vec!["127.0.0.1:8080".to_string()],
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum KvCommand {
    /// Write a value; without VALUE (or with -) the value is read from standard input.
    Put {
        key: String,
        /// The value; absent or -: standard input, up to its end.
        value: Option<String>,
    },
    /// Read a value (linearizable unless --local); exit code 5 if the key is not there.
    /// With --prefix: every key under a prefix, one `key<TAB>value` line each.
    Get {
        /// The key (with a bare --prefix: the prefix).
        key: Option<String>,
        /// Read this node's applied state without asking the leader.
        #[arg(long)]
        local: bool,
        /// List the keys starting with this prefix (--prefix "" lists every key; a bare
        /// --prefix takes KEY as the prefix, as etcdctl does).
        #[arg(long, num_args = 0..=1, default_missing_value = "", value_name = "PREFIX")]
        prefix: Option<String>,
        /// With --prefix: at most this many keys (1 to 10000); a note on stderr says when
        /// more matched.
        #[arg(long, default_value_t = 1000, requires = "prefix")]
        limit: usize,
        /// With --prefix: print the API's JSON answer as is.
        #[arg(long, requires = "prefix")]
        json: bool,
    },
    /// Delete a key; exit code 5 (after deleting nothing) if it was not there.
    Del { key: String },
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Leader, term, indexes, members and replication progress.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Add a node: as a learner, then (unless --learner) promote it to voter once it has
    /// caught up with the leader's log.
    Add {
        /// The new node's id (never one removed before).
        id: u64,
        /// Its API address, HOST:PORT.
        api_addr: String,
        /// Its Raft address, IP:PORT.
        raft_addr: String,
        /// Stop at learner (promote later with `vellum cluster promote ID`).
        #[arg(long)]
        learner: bool,
        /// How long to wait for the learner to catch up before promoting it.
        #[arg(long, default_value_t = 60, value_name = "SECONDS")]
        wait: u64,
    },
    /// Make a learner a voter.
    Promote {
        /// The learner's id.
        id: u64,
    },
    /// Remove a member from the cluster (a voter or a learner), for example one that lost its
    /// volume: it can then join again as a new member, with a new id.
    Remove {
        /// The node id to remove.
        id: u64,
    },
    /// Add a node to a cluster of several Raft groups (`serve --groups`) and move its share
    /// of the groups' replicas onto it: it joins group 0 (every member's group) as a
    /// learner, is promoted once caught up, then `spread` moves replicas of the other groups
    /// from the members holding most to it, one group at a time.
    AddNode {
        /// The new node's id (never one removed before).
        id: u64,
        /// Its API address, HOST:PORT.
        api_addr: String,
        /// Its Raft address, IP:PORT.
        raft_addr: String,
        /// Join group 0 only; move no replica (later: `vellum cluster spread`).
        #[arg(long)]
        no_spread: bool,
        /// How long to wait for each catch-up (the new member, each moved replica).
        #[arg(long, default_value_t = 60, value_name = "SECONDS")]
        wait: u64,
    },
    /// Move one Raft group's replica from one member to another (a member that holds none of
    /// that group): the new replica joins as a learner and catches up, then takes the old
    /// one's vote, and the old one is dropped. Group 0 holds every member and never moves.
    Move {
        /// The group.
        group: u64,
        /// The member whose replica moves away (it must be running).
        from: u64,
        /// The member that takes it.
        to: u64,
        /// How long to keep asking while the group elects or hands its leadership over.
        #[arg(long, default_value_t = 60, value_name = "SECONDS")]
        wait: u64,
    },
    /// Give every Raft group (but group 0, which holds every member) the same number of
    /// replicas and spread them over the members, until each holds as many as any other,
    /// within one: after `add-node --no-spread`, after members added with `add` (every
    /// group), after a `remove` left groups a replica short. Then spread the leaders
    /// (`rebalance`). Prints each step as it is done.
    Spread {
        /// Replicas per group (default: the most any group has now).
        #[arg(long)]
        replicas: Option<usize>,
        /// Print the steps, make none.
        #[arg(long)]
        dry_run: bool,
        /// How long to wait for each move.
        #[arg(long, default_value_t = 60, value_name = "SECONDS")]
        wait: u64,
    },
    /// Spread the leaders of the Raft groups (`serve --groups`) over the voters now: every
    /// member hands the groups another voter should lead over to it, then this waits until
    /// each live voter leads as many groups as any other, within one.
    Rebalance {
        /// How long to wait for the spread.
        #[arg(long, default_value_t = 30, value_name = "SECONDS")]
        wait: u64,
    },
}

fn base(endpoint: &str) -> String {
    let e = endpoint.trim_end_matches('/');
    if e.starts_with("http://") || e.starts_with("https://") {
        e.to_string()
    } else {
        format!("http://{e}")
    }
}

/// The base URL of another node's API `addr`, with the scheme `endpoint` was given with.
fn base_like(addr: &str, endpoint: &str) -> String {
    if endpoint.starts_with("https://") && !addr.starts_with("http") {
        format!("https://{}", addr.trim_end_matches('/'))
    } else {
        base(addr)
    }
}

/// Percent-encodes one path segment.
pub fn encode_segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// An HTTP client that presents the token and the client certificate of `access`, if given,
/// and trusts `--cacert` (or the system's roots without it).
fn client(access: &Access, endpoint: &str) -> Result<reqwest::Client, CliError> {
    check_token_transport(access, endpoint)?;
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(t) = &access.token {
        let value = t.header().map_err(|why| CliError::Usage(format!("--token: {why}")))?;
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    let mut builder = reqwest::Client::builder();
    if let Some(ca) = &access.cacert {
        let identity = match (&access.cert, &access.key) {
            (Some(cert), Some(key)) => {
                Some(tls::Identity::load(cert, key).map_err(CliError::Usage)?)
            }
            _ => None,
        };
        let roots = tls::load_roots(ca).map_err(CliError::Usage)?;
        let config = tls::client_config(roots, identity.as_ref()).map_err(CliError::Usage)?;
        builder = builder.use_preconfigured_tls(config);
    } else if access.cert.is_some() {
        return Err(CliError::Usage(
            "--cert needs --cacert (the CA of the nodes' API certificates)".into(),
        ));
    }
    builder
        .no_proxy()
        .default_headers(headers)
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(|e| CliError::Usage(format!("http client: {e}")))
}

/// The error reqwest gives, with its causes ("Connection refused"), in one line.
fn why(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}

fn unreachable(endpoint: &str, e: &reqwest::Error) -> CliError {
    CliError::Unreachable(format!("cannot reach {endpoint}: {}", why(e)))
}

/// The `error` field of a JSON error body, or the status; for 401 and 403, what to do.
async fn failure(resp: reqwest::Response) -> CliError {
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    failure_of(status, &text)
}

/// [`failure`] of an answer already read.
fn failure_of(status: reqwest::StatusCode, text: &str) -> CliError {
    let body = serde_json::from_str::<serde_json::Value>(text).ok();
    let field = |name: &str| body.as_ref().and_then(|v| v[name].as_str()).map(str::to_string);
    let why = field("error").unwrap_or_else(|| text.trim().to_string());
    let hint = match status {
        reqwest::StatusCode::UNAUTHORIZED => match field("reason") {
            Some(reason) => format!(" ({reason}; give --token or VELLUM_TOKEN)"),
            None => " (give --token or VELLUM_TOKEN)".to_string(),
        },
        reqwest::StatusCode::FORBIDDEN => match (field("role"), field("needs")) {
            (Some(role), Some(needs)) => {
                format!(" (the token's role is {role}; this needs {needs})")
            }
            _ => String::new(),
        },
        _ => match field("reason") {
            Some(reason) => format!(": {reason}"),
            None => String::new(),
        },
    };
    CliError::Usage(format!("HTTP {}: {why}{hint}", status.as_u16()))
}

/// One request, built per endpoint from its base URL.
type Build<'a> = &'a dyn Fn(&reqwest::Client, &str) -> reqwest::RequestBuilder;

/// Sends a request to the first endpoint that answers it: a connection failure, a timeout
/// or a 503 (no leader there, or the node is stopping) moves on to the next. The token's
/// transport is checked for every endpoint before any is contacted. Returns the endpoint
/// that answered and its answer; when none did, `Unreachable` naming each, one line each.
async fn send(
    endpoints: &[String],
    access: &Access,
    build: Build<'_>,
) -> Result<(String, reqwest::Response), CliError> {
    for e in endpoints {
        check_token_transport(access, &base(e))?;
    }
    let mut failed = Vec::new();
    for e in endpoints {
        let b = base(e);
        let c = client(access, &b)?;
        match build(&c, &b).send().await {
            Ok(resp) if resp.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE => {
                let status = resp.status();
                let text = resp.text().await.unwrap_or_default();
                let err = failure_of(status, &text);
                // A write whose outcome is unknown is not sent again elsewhere: it may have
                // been applied (the user decides, reading the key).
                let code = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v["error"].as_str().map(str::to_string));
                if code.as_deref() == Some("outcome_unknown") {
                    return Err(CliError::Usage(format!("{e}: {err}")));
                }
                failed.push(format!("{e} answered {err}"));
            }
            Ok(resp) => return Ok((e.clone(), resp)),
            Err(err) if err.is_connect() || err.is_timeout() || err.is_request() => {
                failed.push(format!("cannot reach {e}: {}", why(&err)));
            }
            Err(err) => return Err(unreachable(e, &err)),
        }
    }
    Err(CliError::Unreachable(failed.join("\nvellum: ")))
}

/// The value of `kv put`: VALUE, or standard input when it is absent or `-`.
pub fn put_value(value: Option<String>) -> Result<Vec<u8>, CliError> {
    match value {
        Some(v) if v != "-" => Ok(v.into_bytes()),
        _ => {
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut buf)
                .map_err(|e| CliError::Io(e, "reading the value from standard input".into()))?;
            Ok(buf)
        }
    }
}

fn write_stdout(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Io(e, "writing to stdout".into()))
}

pub async fn kv(op: KvCommand, endpoints: &Endpoints, access: &Access) -> Result<i32, CliError> {
    let eps = endpoints.list();
    match op {
        KvCommand::Put { key, value } => {
            let value = put_value(value)?;
            let path = format!("/v1/kv/{}", encode_segment(&key));
            let (_, resp) =
                send(&eps, access, &|c, b| c.put(format!("{b}{path}")).body(value.clone())).await?;
            if !resp.status().is_success() {
                return Err(failure(resp).await);
            }
            let v: serde_json::Value = resp.json().await.unwrap_or_default();
            println!("ok (log index {})", v["index"]);
        }
        KvCommand::Get { key, local, prefix: Some(prefix), limit, json } => {
            let prefix = match (prefix.is_empty(), key) {
                (true, Some(key)) => key,
                (false, Some(_)) => {
                    return Err(CliError::Usage(
                        "give the prefix once: `kv get --prefix P` or `kv get P --prefix`".into(),
                    ));
                }
                (_, None) => prefix,
            };
            let q = format!(
                "/v1/kv?prefix={}&limit={limit}{}",
                encode_segment(&prefix),
                if local { "&consistency=local" } else { "" }
            );
            let (e, resp) = send(&eps, access, &|c, b| c.get(format!("{b}{q}"))).await?;
            if !resp.status().is_success() {
                return Err(failure(resp).await);
            }
            let text = resp.text().await.map_err(|err| unreachable(&e, &err))?;
            if json {
                println!("{}", text.trim_end());
                return Ok(0);
            }
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|err| {
                CliError::Usage(format!("{e} answered a prefix read with bad JSON: {err}"))
            })?;
            let mut out = Vec::new();
            for kv in v["kvs"].as_array().map(Vec::as_slice).unwrap_or_default() {
                out.extend_from_slice(kv["key"].as_str().unwrap_or_default().as_bytes());
                out.push(b'\t');
                match (kv["value"].as_str(), kv["value_base64"].as_str()) {
                    (Some(text), _) => out.extend_from_slice(text.as_bytes()),
                    (None, Some(b64)) => out.extend(STANDARD.decode(b64).map_err(|err| {
                        CliError::Usage(format!("{e} answered a value that is not base64: {err}"))
                    })?),
                    _ => {}
                }
                out.push(b'\n');
            }
            write_stdout(&out)?;
            if v["more"].as_bool() == Some(true) {
                eprintln!(
                    "vellum: more keys match {prefix:?}: raise --limit (at most 10000) or narrow the prefix"
                );
            }
        }
        KvCommand::Get { key: None, .. } => {
            return Err(CliError::Usage("kv get needs a KEY (or --prefix P)".into()));
        }
        KvCommand::Get { key: Some(key), local, .. } => {
            let q = if local { "?consistency=local" } else { "" };
            let path = format!("/v1/kv/{}{q}", encode_segment(&key));
            let (e, resp) = send(&eps, access, &|c, b| c.get(format!("{b}{path}"))).await?;
            if resp.status() == reqwest::StatusCode::NOT_FOUND {
                return Err(CliError::NotFound(format!("key {key} not found")));
            }
            if !resp.status().is_success() {
                return Err(failure(resp).await);
            }
            let mut bytes = resp.bytes().await.map_err(|err| unreachable(&e, &err))?.to_vec();
            bytes.push(b'\n');
            write_stdout(&bytes)?;
        }
        KvCommand::Del { key } => {
            let path = format!("/v1/kv/{}", encode_segment(&key));
            let (_, resp) = send(&eps, access, &|c, b| c.delete(format!("{b}{path}"))).await?;
            if !resp.status().is_success() {
                return Err(failure(resp).await);
            }
            let v: serde_json::Value = resp.json().await.unwrap_or_default();
            if v["found"] == false {
                return Err(CliError::NotFound(format!("key {key} not found")));
            }
            println!("deleted");
        }
    }
    Ok(0)
}

pub async fn cluster(
    op: ClusterCommand,
    endpoints: &Endpoints,
    access: &Access,
) -> Result<i32, CliError> {
    let eps = endpoints.list();
    match op {
        ClusterCommand::Status { json } => status(&eps, json, access).await,
        ClusterCommand::Remove { id } => remove(&eps, id, access).await,
        ClusterCommand::Add { id, api_addr, raft_addr, learner, wait } => {
            add(&eps, id, &api_addr, &raft_addr, learner, wait, access).await
        }
        ClusterCommand::Promote { id } => promote(&eps, id, access).await.map(|()| 0),
        ClusterCommand::Rebalance { wait } => rebalance(&eps, wait, access).await,
        ClusterCommand::AddNode { id, api_addr, raft_addr, no_spread, wait } => {
            add_node(&eps, (id, &api_addr, &raft_addr), !no_spread, wait, access).await
        }
        ClusterCommand::Move { group, from, to, wait } => {
            let step = Step { group, from: Some(from), to: Some(to) };
            move_replica(&eps, step, wait, access).await.map(|_| 0)
        }
        ClusterCommand::Spread { replicas, dry_run, wait } => {
            spread(&eps, replicas, dry_run, wait, access).await
        }
    }
}

/// How many groups each voter leads, in a status answer: `(voter, groups led)`, and the
/// groups that have no leader.
fn leader_counts(v: &serde_json::Value) -> (Vec<(u64, usize)>, usize) {
    let voters = id_list(&v["voters"]);
    let mut counts: Vec<(u64, usize)> = voters.iter().map(|id| (*id, 0)).collect();
    let mut leaderless = 0;
    for g in v["groups"].as_array().map(Vec::as_slice).unwrap_or_default() {
        match g["leader"].as_u64().and_then(|l| counts.iter_mut().find(|(id, _)| *id == l)) {
            Some((_, n)) => *n += 1,
            None => leaderless += 1,
        }
    }
    (counts, leaderless)
}

/// `vellum cluster rebalance`: asks every member to spread the group leaders, then waits
/// (at most `wait_secs`) until the voters that lead any group lead as many as each other,
/// within one, and every group has a leader.
async fn rebalance(endpoints: &[String], wait_secs: u64, access: &Access) -> Result<i32, CliError> {
    let (e, resp) =
        send(endpoints, access, &|c, b| c.post(format!("{b}/v1/cluster/rebalance"))).await?;
    if !resp.status().is_success() {
        return Err(failure(resp).await);
    }
    let asked: serde_json::Value = resp.json().await.map_err(|err| unreachable(&e, &err))?;
    println!("asked nodes {} to rebalance", asked["asked"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait_secs);
    loop {
        let (_, v) = get_status(endpoints, access).await?;
        let (counts, leaderless) = leader_counts(&v);
        let leading: Vec<usize> = counts.iter().map(|(_, n)| *n).filter(|n| *n > 0).collect();
        let spread =
            leading.iter().max().zip(leading.iter().min()).is_some_and(|(hi, lo)| hi - lo <= 1);
        let shown: Vec<String> = counts.iter().map(|(id, n)| format!("node {id}: {n}")).collect();
        if spread && leaderless == 0 {
            println!("group leaders: {}", shown.join(", "));
            return Ok(0);
        }
        if std::time::Instant::now() >= deadline {
            return Err(CliError::Unreachable(format!(
                "the group leaders are not spread after {wait_secs} s ({}; {leaderless} without \
                 a leader): a voter may be down; see vellum cluster status",
                shown.join(", ")
            )));
        }
        tokio::time::sleep(STEP_POLL).await;
    }
}

/// How often `spread`, `move` and `rebalance` ask again while a step is not done yet (a
/// leader handing over, leaders still moving): a step took about 100 ms in a run by hand
/// without clients, so a longer pause would be most of it (`scale-out` in
/// docs/BENCHMARKS.md).
const STEP_POLL: std::time::Duration = std::time::Duration::from_millis(100);

async fn get_status(
    endpoints: &[String],
    access: &Access,
) -> Result<(String, serde_json::Value), CliError> {
    let (e, resp) =
        send(endpoints, access, &|c, b| c.get(format!("{b}/v1/cluster/status"))).await?;
    if !resp.status().is_success() {
        return Err(failure(resp).await);
    }
    let v = resp.json().await.map_err(|err| unreachable(&e, &err))?;
    Ok((e, v))
}

/// The leader's API base URL and an HTTP client for it, from the first endpoint that answers
/// a status request, with that status.
async fn leader(
    endpoints: &[String],
    access: &Access,
) -> Result<(String, reqwest::Client, serde_json::Value), CliError> {
    let (e, v) = get_status(endpoints, access).await?;
    let (b, c) = leader_in(&e, &v, access)?;
    Ok((b, c, v))
}

/// The leader's API base URL and an HTTP client for it, from the status `v` that endpoint
/// `e` answered; `Unreachable` when it names none.
fn leader_in(
    e: &str,
    v: &serde_json::Value,
    access: &Access,
) -> Result<(String, reqwest::Client), CliError> {
    let leader = v["leader"]
        .as_u64()
        .ok_or_else(|| CliError::Unreachable(format!("{e} knows no leader now; retry")))?;
    let api = v["nodes"][leader.to_string()]["api_addr"].as_str().unwrap_or(e).to_string();
    let leader_base = base_like(&api, e);
    let c = client(access, &leader_base)?;
    Ok((leader_base, c))
}

/// How long a membership change waits for a leader it can reach. The node being removed has
/// often just died, and it may have led the membership group then: the status of a live
/// member names it as leader until the others elect another, within a few election timeouts.
/// A node that just joined may take the lead, or an election may run, between the steps of
/// `add` (learner, catch-up, promotion).
const LEADER_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Builds a membership change's request for the leader, from its base URL, its status and
/// whether an earlier attempt's request may have made the change ([`Answer::maybe_made`]);
/// `None` when the status shows it done already.
type ToLeader<'a> = &'a dyn Fn(
    &reqwest::Client,
    &str,
    &serde_json::Value,
    bool,
) -> Result<Option<reqwest::RequestBuilder>, CliError>;

/// The leader's answer to a membership change: its status and body.
struct Answer {
    status: reqwest::StatusCode,
    text: String,
    /// An earlier attempt's request may have reached the leader (it was sent, and its answer
    /// was lost): the change may be made already.
    maybe_made: bool,
}

impl Answer {
    /// `Ok` for a success, else the failure it names.
    fn ok(&self) -> Result<(), CliError> {
        if self.status.is_success() { Ok(()) } else { Err(failure_of(self.status, &self.text)) }
    }
}

/// Sends a membership change to the leader, asking again every [`STEP_POLL`], for at most
/// [`LEADER_WAIT`], while a member answers but no leader does: the member names none, the
/// one named cannot be reached, or it answers that it leads no more (503 `no_leader` or
/// `not_ready`, 307 `not_leader`). Says once on stderr that it waits. When no endpoint
/// answers at all, fails at once as [`send`] does. Returns the leader's answer, or `None`
/// when `ask` found nothing to do.
async fn at_leader(
    endpoints: &[String],
    access: &Access,
    ask: ToLeader<'_>,
) -> Result<Option<Answer>, CliError> {
    let deadline = std::time::Instant::now() + LEADER_WAIT;
    let mut told = false;
    let mut maybe_made = false;
    loop {
        // No member answering is not waited out: the command fails at once, naming each.
        let (e, v) = get_status(endpoints, access).await?;
        let why = match leader_in(&e, &v, access) {
            Ok((b, c)) => match ask(&c, &b, &v, maybe_made)? {
                None => return Ok(None),
                Some(request) => match request.send().await {
                    Ok(resp) => {
                        let status = resp.status();
                        let text = resp.text().await.map_err(|e| unreachable(&b, &e))?;
                        match leads_no_more(status, &text) {
                            Some(why) => why,
                            None => return Ok(Some(Answer { status, text, maybe_made })),
                        }
                    }
                    Err(e) => {
                        maybe_made |= !e.is_connect();
                        unreachable(&b, &e).to_string()
                    }
                },
            },
            Err(CliError::Unreachable(why)) => why,
            Err(e) => return Err(e),
        };
        if std::time::Instant::now() >= deadline {
            return Err(CliError::Unreachable(format!(
                "no leader answered in {} s: {why}",
                LEADER_WAIT.as_secs()
            )));
        }
        if !told {
            eprintln!("waiting for a leader that answers ({why})");
            told = true;
        }
        tokio::time::sleep(STEP_POLL).await;
    }
}

/// Why an answer is not the leader's (a 503 `no_leader` or `not_ready`, a 307 `not_leader`:
/// ask again), or `None` for an answer to act on.
fn leads_no_more(status: reqwest::StatusCode, text: &str) -> Option<String> {
    if status != reqwest::StatusCode::SERVICE_UNAVAILABLE
        && status != reqwest::StatusCode::TEMPORARY_REDIRECT
    {
        return None;
    }
    let code = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string));
    matches!(code.as_deref(), Some("no_leader" | "not_ready" | "not_leader"))
        .then(|| failure_of(status, text).to_string())
}

/// Removes node `id` (a voter or a learner) through the leader.
async fn remove(endpoints: &[String], id: u64, access: &Access) -> Result<i32, CliError> {
    let ask: ToLeader<'_> =
        &|c, b, _, _| Ok(Some(c.delete(format!("{b}/v1/cluster/members/{id}"))));
    let answer = at_leader(endpoints, access, ask).await?.expect("remove always asks");
    if answer.status == reqwest::StatusCode::NOT_FOUND {
        if answer.maybe_made {
            // An earlier attempt may have removed it before its answer was lost.
            println!("node {id} is not a member (any more)");
            return Ok(0);
        }
        return Err(CliError::NotFound(format!("node {id} is not a member of this cluster")));
    }
    answer.ok()?;
    println!("node {id} removed");
    Ok(0)
}

fn id_list(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
        .unwrap_or_default()
}

/// Adds node `id` as a learner; unless `learner_only`, waits until its matched index reaches
/// the leader's last log index (at most `wait_secs`), then promotes it.
async fn add(
    endpoints: &[String],
    id: u64,
    api_addr: &str,
    raft_addr: &str,
    learner_only: bool,
    wait_secs: u64,
    access: &Access,
) -> Result<i32, CliError> {
    add_to(endpoints, (id, api_addr, raft_addr), "", learner_only, wait_secs, access).await?;
    if !learner_only {
        promote(endpoints, id, access).await?;
    }
    Ok(0)
}

/// Adds node `id` as a learner (of every group, or as `query` says), then unless
/// `learner_only` waits until its matched index reaches the leader's last log index (at most
/// `wait_secs`).
async fn add_to(
    endpoints: &[String],
    (id, api_addr, raft_addr): (u64, &str, &str),
    query: &str,
    learner_only: bool,
    wait_secs: u64,
    access: &Access,
) -> Result<(), CliError> {
    let body = serde_json::json!({ "id": id, "api_addr": api_addr, "raft_addr": raft_addr });
    let ask: ToLeader<'_> = &|c, b, v, maybe_made| {
        if id_list(&v["voters"]).contains(&id) || id_list(&v["learners"]).contains(&id) {
            if maybe_made {
                // An earlier attempt added it before its answer was lost.
                return Ok(None);
            }
            return Err(CliError::Usage(format!(
                "node {id} is a member already (vellum cluster status)"
            )));
        }
        Ok(Some(c.post(format!("{b}/v1/cluster/learners{query}")).json(&body)))
    };
    if let Some(answer) = at_leader(endpoints, access, ask).await? {
        answer.ok()?;
    }
    println!("node {id} added as a learner");
    if learner_only {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait_secs);
    loop {
        // The leader's own status: it may have changed since the learner was added. No
        // leader for a moment (an election) is waited out like a learner behind.
        let mut seen = None;
        if let Ok((now, _, _)) = leader(endpoints, access).await
            && let Ok((_, s)) = get_status(std::slice::from_ref(&now), access).await
        {
            let last = s["last_log_index"].as_u64().unwrap_or(0);
            let matched = s["replication"][id.to_string()].as_u64();
            if matched.is_some_and(|m| m >= last) {
                break;
            }
            seen = Some((matched, last));
        }
        if std::time::Instant::now() >= deadline {
            let state = match seen {
                Some((matched, last)) => format!(
                    "matched {}, leader at {last}",
                    matched.map_or("nothing".to_string(), |m| m.to_string())
                ),
                None => "no leader answered".to_string(),
            };
            return Err(CliError::Usage(format!(
                "node {id} has not caught up in {wait_secs}s ({state}): it stays a learner; \
                 check that it runs and reaches the leader, then `vellum cluster promote {id}`"
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Makes learner `id` a voter: the voter set becomes the current one plus `id`.
async fn promote(endpoints: &[String], id: u64, access: &Access) -> Result<(), CliError> {
    promote_in(endpoints, id, "", access).await
}

/// [`promote`] in every group, or as `query` says (`?group=0`).
async fn promote_in(
    endpoints: &[String],
    id: u64,
    query: &str,
    access: &Access,
) -> Result<(), CliError> {
    let ask: ToLeader<'_> = &|c, b, v, _| {
        let mut voters = id_list(&v["voters"]);
        if voters.contains(&id) {
            return Ok(None);
        }
        if !id_list(&v["learners"]).contains(&id) {
            return Err(CliError::NotFound(format!(
                "node {id} is not a learner of this cluster (add it first: vellum cluster add)"
            )));
        }
        voters.push(id);
        let members = serde_json::json!({ "members": voters });
        Ok(Some(c.put(format!("{b}/v1/cluster/members{query}")).json(&members)))
    };
    match at_leader(endpoints, access, ask).await? {
        None => {
            println!("node {id} is a voter already");
            return Ok(());
        }
        Some(answer) => answer.ok()?,
    }
    println!("node {id} promoted to voter");
    Ok(())
}

async fn status(endpoints: &[String], json: bool, access: &Access) -> Result<i32, CliError> {
    let (_, v) = get_status(endpoints, access).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(0);
    }
    let opt = |x: &serde_json::Value| if x.is_null() { "-".to_string() } else { x.to_string() };
    println!(
        "node {} is {}; leader {}, term {}",
        v["id"],
        v["role"].as_str().unwrap_or("?"),
        opt(&v["leader"]),
        v["term"]
    );
    println!(
        "log index {}, applied {}, snapshot {}, purged {}",
        opt(&v["last_log_index"]),
        opt(&v["applied_index"]),
        opt(&v["snapshot_index"]),
        opt(&v["purged_index"])
    );
    println!("{:>4}  {:<8}  {:<22}  {:<22}  {:>8}", "id", "role", "api", "raft", "matched");
    let voters: Vec<u64> = v["voters"]
        .as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
        .unwrap_or_default();
    if let Some(nodes) = v["nodes"].as_object() {
        for (id, n) in nodes {
            let role = if id.parse::<u64>().is_ok_and(|i| voters.contains(&i)) {
                "voter"
            } else {
                "learner"
            };
            let matched = opt(&v["replication"][id]);
            println!(
                "{:>4}  {:<8}  {:<22}  {:<22}  {:>8}",
                id,
                role,
                n["api_addr"].as_str().unwrap_or(""),
                n["raft_addr"].as_str().unwrap_or(""),
                matched
            );
        }
    }
    let groups = v["groups"].as_array().map_or(0, Vec::len);
    if groups > 1 {
        let sets: Vec<Vec<u64>> = v["groups"]
            .as_array()
            .map(|a| a.iter().skip(1).map(|g| id_list(&g["voters"])).collect())
            .unwrap_or_default();
        let held: Vec<String> = voters
            .iter()
            .map(|id| format!("node {id}: {}", sets.iter().filter(|s| s.contains(id)).count()))
            .collect();
        println!("replicas of groups 1..{}: {}", groups - 1, held.join(", "));
        let (counts, leaderless) = leader_counts(&v);
        let shown: Vec<String> = counts.iter().map(|(id, n)| format!("node {id}: {n}")).collect();
        println!(
            "{groups} raft groups; leaders: {}{}",
            shown.join(", "),
            if leaderless > 0 { format!(", {leaderless} without a leader") } else { String::new() }
        );
    }
    Ok(0)
}

/// `vellum cluster add-node`: `id` joins group 0 as a learner (`?group=0`), is promoted once
/// caught up, then (with `spread_after`) takes its share of the other groups' replicas.
async fn add_node(
    endpoints: &[String],
    (id, api_addr, raft_addr): (u64, &str, &str),
    spread_after: bool,
    wait_secs: u64,
    access: &Access,
) -> Result<i32, CliError> {
    let (_, v) = get_status(endpoints, access).await?;
    if v["groups"].as_array().map_or(0, Vec::len) < 2 {
        return Err(CliError::Usage(
            "this cluster runs one Raft group: add members with vellum cluster add".into(),
        ));
    }
    if id_list(&v["voters"]).contains(&id) {
        println!("node {id} is a member already");
    } else {
        if !id_list(&v["learners"]).contains(&id) {
            let new = (id, api_addr, raft_addr);
            add_to(endpoints, new, "?group=0", false, wait_secs, access).await?;
        }
        promote_in(endpoints, id, "?group=0", access).await?;
    }
    if !spread_after {
        println!("no replica moved (--no-spread): vellum cluster spread moves them");
        return Ok(0);
    }
    spread(endpoints, None, false, wait_secs, access).await
}

/// What a step does, for the user.
fn describe(step: Step) -> String {
    let g = step.group;
    match (step.from, step.to) {
        (Some(f), Some(t)) => format!("group {g}: replica moved from node {f} to node {t}"),
        (None, Some(t)) => format!("group {g}: replica added on node {t}"),
        (Some(f), None) => format!("group {g}: replica dropped from node {f}"),
        (None, None) => format!("group {g}: nothing"),
    }
}

/// Makes `step` (`POST /v1/cluster/move`), asking again while every endpoint answers 503
/// (an election, a leader handing over), at most `wait_secs`.
async fn move_replica(
    endpoints: &[String],
    step: Step,
    wait_secs: u64,
    access: &Access,
) -> Result<serde_json::Value, CliError> {
    let body = serde_json::json!({ "group": step.group, "from": step.from, "to": step.to });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait_secs);
    loop {
        let attempt =
            send(endpoints, access, &|c, b| c.post(format!("{b}/v1/cluster/move")).json(&body))
                .await;
        match attempt {
            Ok((e, resp)) if resp.status().is_success() => {
                let v = resp.json().await.map_err(|err| unreachable(&e, &err))?;
                println!("{}", describe(step));
                return Ok(v);
            }
            Ok((_, resp)) => return Err(failure(resp).await),
            Err(CliError::Unreachable(why)) => {
                if std::time::Instant::now() >= deadline {
                    return Err(CliError::Unreachable(format!(
                        "not done in {wait_secs} s ({}): {why}",
                        describe(step)
                    )));
                }
                tokio::time::sleep(STEP_POLL).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// `vellum cluster spread`: plans the steps that give every group `replicas` replicas spread
/// over the members (`groups::replica_plan`, from a fresh status), makes the first, and plans
/// again from the status after it, until nothing is left to do (at most one step per group
/// and member, twice over); then spreads the leaders.
async fn spread(
    endpoints: &[String],
    replicas: Option<usize>,
    dry_run: bool,
    wait_secs: u64,
    access: &Access,
) -> Result<i32, CliError> {
    let mut replicas = replicas;
    let mut done = 0;
    let mut refused = 0;
    loop {
        let (e, resp) =
            send(endpoints, access, &|c, b| c.get(format!("{b}/v1/cluster/status?fresh=1")))
                .await?;
        if !resp.status().is_success() {
            return Err(failure(resp).await);
        }
        let v: serde_json::Value = resp.json().await.map_err(|err| unreachable(&e, &err))?;
        let groups = v["groups"].as_array().map(Vec::as_slice).unwrap_or_default();
        if groups.len() < 2 {
            return Err(CliError::Usage(
                "this cluster runs one Raft group: nothing to spread".into(),
            ));
        }
        let sets: Vec<Vec<u64>> = groups.iter().map(|g| id_list(&g["voters"])).collect();
        if sets.iter().any(Vec::is_empty) {
            return Err(CliError::Unreachable(
                "the status does not name every group's voters yet; retry in a moment".into(),
            ));
        }
        let members = id_list(&v["voters"]);
        let want =
            *replicas.get_or_insert_with(|| sets[1..].iter().map(Vec::len).max().unwrap_or(3));
        let plan = crate::server::groups::replica_plan(&sets, &members, want);
        if plan.is_empty() || dry_run {
            if plan.is_empty() && done == 0 {
                println!(
                    "the replicas are spread already ({} groups, {want} replicas each, over \
                     nodes {members:?})",
                    sets.len()
                );
            }
            for (i, step) in plan.iter().enumerate() {
                println!("step {}/{}: {} (dry run)", i + 1, plan.len(), describe(*step));
            }
            break;
        }
        if done > 2 * sets.len() * members.len().max(1) {
            return Err(CliError::Unreachable(format!(
                "the replicas are not spread after {done} steps: the members' views keep \
                 changing; see vellum cluster status"
            )));
        }
        done += 1;
        print!("step {done} (of {} planned now): ", done - 1 + plan.len());
        let _ = std::io::stdout().flush();
        // A step the group's leader refuses was planned from a view that changed meanwhile
        // (a leader change in the middle of a step): plan again from a fresh status.
        match move_replica(endpoints, plan[0], wait_secs, access).await {
            Ok(_) => refused = 0,
            Err(e) if refused < 3 => {
                println!("not done ({e}); planning again");
                refused += 1;
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
        }
    }
    if dry_run || done == 0 {
        return Ok(0);
    }
    rebalance(endpoints, wait_secs, access).await
}

/// `vellum backup`: the leader's snapshot covering a linearizable read, checked (it decodes,
/// meta and data agree) and written as one archive under `to` (docs/OPERATIONS.md).
pub async fn backup(endpoints: &[String], to: &str, access: &Access) -> Result<(), CliError> {
    use base64::Engine as _;
    let (b, c, _) = leader(endpoints, access).await?;
    let resp =
        c.get(format!("{b}/v1/cluster/snapshot")).send().await.map_err(|e| unreachable(&b, &e))?;
    if !resp.status().is_success() {
        return Err(failure(resp).await);
    }
    let meta = resp
        .headers()
        .get(crate::server::http::cluster::SNAPSHOT_META_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
        .ok_or_else(|| CliError::Usage(format!("{b}: the snapshot came without its meta")))?;
    let data = resp.bytes().await.map_err(|e| unreachable(&b, &e))?.to_vec();
    let to = to.to_string();
    let written = tokio::task::spawn_blocking(move || {
        let snap = vellum_raft_store::v010::ExportedSnapshot::decode(meta, data)
            .map_err(|e| crate::archive::ArchiveError::Corrupt(e.to_string()))?;
        let target = crate::archive::open(&to)?;
        crate::archive::write(&target, &snap, 0)
    })
    .await
    .map_err(|e| CliError::Usage(format!("backup: {e}")))?
    .map_err(|e| CliError::Usage(format!("backup: {e}")))?;
    println!(
        "backed up log index {} (term {}, {} bytes, sha256 {}) as archive {}",
        written.index,
        written.term,
        written.size,
        written.sha256,
        written.name()
    );
    Ok(())
}
