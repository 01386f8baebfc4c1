//! `vellum kv put|get|del` and `vellum cluster status`: HTTP clients of a running node.
//!
//! `--token` (or `VELLUM_TOKEN`) is sent as `Authorization: Bearer` on every request, for a
//! cluster started with `--auth-tokens`; it is never printed. An `https://` endpoint is
//! verified against `--cacert`, and `--cert/--key` present a client certificate (for an API
//! started with `--api-ca`).

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use clap::Subcommand;

use super::CliError;
use crate::security::exposure::is_loopback_endpoint;
use crate::security::tls;
use crate::security::tokens::BearerToken;

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

#[derive(Subcommand, Debug)]
pub enum KvCommand {
    /// Write a value.
    Put { key: String, value: String },
    /// Read a value (linearizable unless --local).
    Get {
        key: String,
        /// Read this node's applied state without asking the leader.
        #[arg(long)]
        local: bool,
    },
    /// Delete a key.
    Del { key: String },
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Leader, term, indexes, members and replication progress.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Remove a member from the cluster (a voter or a learner), for example one that lost its
    /// volume: it can then join again as a new member, with a new id.
    Remove {
        /// The node id to remove.
        id: u64,
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

fn unreachable(endpoint: &str, e: &reqwest::Error) -> CliError {
    CliError::Usage(format!("cannot reach {endpoint}: {e}"))
}

/// The `error` field of a JSON error body, or the status; for 401 and 403, what to do.
async fn failure(resp: reqwest::Response) -> CliError {
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    let body = serde_json::from_str::<serde_json::Value>(&text).ok();
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
        _ => String::new(),
    };
    CliError::Usage(format!("HTTP {}: {why}{hint}", status.as_u16()))
}

pub async fn kv(op: KvCommand, endpoint: &str, access: &Access) -> Result<i32, CliError> {
    let b = base(endpoint);
    let c = client(access, &b)?;
    match op {
        KvCommand::Put { key, value } => {
            let resp = c
                .put(format!("{b}/v1/kv/{}", encode_segment(&key)))
                .body(value)
                .send()
                .await
                .map_err(|e| unreachable(endpoint, &e))?;
            if !resp.status().is_success() {
                return Err(failure(resp).await);
            }
            let v: serde_json::Value = resp.json().await.unwrap_or_default();
            println!("ok (log index {})", v["index"]);
        }
        KvCommand::Get { key, local } => {
            let q = if local { "?consistency=local" } else { "" };
            let resp = c
                .get(format!("{b}/v1/kv/{}{q}", encode_segment(&key)))
                .send()
                .await
                .map_err(|e| unreachable(endpoint, &e))?;
            if !resp.status().is_success() {
                return Err(failure(resp).await);
            }
            let bytes = resp.bytes().await.map_err(|e| unreachable(endpoint, &e))?;
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes)
                .and_then(|()| out.write_all(b"\n"))
                .map_err(|e| CliError::Io(e, "writing to stdout".into()))?;
        }
        KvCommand::Del { key } => {
            let resp = c
                .delete(format!("{b}/v1/kv/{}", encode_segment(&key)))
                .send()
                .await
                .map_err(|e| unreachable(endpoint, &e))?;
            if !resp.status().is_success() {
                return Err(failure(resp).await);
            }
            println!("deleted");
        }
    }
    Ok(0)
}

pub async fn cluster(op: ClusterCommand, endpoint: &str, access: &Access) -> Result<i32, CliError> {
    match op {
        ClusterCommand::Status { json } => status(endpoint, json, access).await,
        ClusterCommand::Remove { id } => remove(endpoint, id, access).await,
    }
}

async fn get_status(endpoint: &str, access: &Access) -> Result<serde_json::Value, CliError> {
    let b = base(endpoint);
    let resp = client(access, &b)?
        .get(format!("{b}/v1/cluster/status"))
        .send()
        .await
        .map_err(|e| unreachable(endpoint, &e))?;
    if !resp.status().is_success() {
        return Err(failure(resp).await);
    }
    resp.json().await.map_err(|e| unreachable(endpoint, &e))
}

/// Removes node `id` (a voter or a learner) through the leader.
async fn remove(endpoint: &str, id: u64, access: &Access) -> Result<i32, CliError> {
    let v = get_status(endpoint, access).await?;
    let leader =
        v["leader"].as_u64().ok_or_else(|| CliError::Usage("no leader now; retry".into()))?;
    let api = v["nodes"][leader.to_string()]["api_addr"].as_str().unwrap_or(endpoint).to_string();
    let leader_base = base_like(&api, endpoint);
    let resp = client(access, &leader_base)?
        .delete(format!("{leader_base}/v1/cluster/members/{id}"))
        .send()
        .await
        .map_err(|e| unreachable(&api, &e))?;
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return Err(CliError::Usage(format!("node {id} is not a member of this cluster")));
    }
    if !resp.status().is_success() {
        return Err(failure(resp).await);
    }
    println!("node {id} removed");
    Ok(0)
}

async fn status(endpoint: &str, json: bool, access: &Access) -> Result<i32, CliError> {
    let v = get_status(endpoint, access).await?;
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
    Ok(0)
}
