//! `vellum serve` options (every flag also read from a `VELLUM_*` environment variable) and
//! the `--initial-cluster` syntax.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use vellum_raft_store::KvNode;

use crate::security::exposure::Exposure;
use crate::security::tokens::BearerToken;
use crate::size::parse_size;

fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s)
}

/// Runs one node of a Vellum KV cluster.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// This node's id (a positive integer, unique in the cluster).
    #[arg(long, env = "VELLUM_ID", value_parser = clap::value_parser!(u64).range(1..))]
    pub id: u64,
    /// Address of the client API (HTTP, JSON).
    #[arg(long, env = "VELLUM_API_ADDR")]
    pub api_addr: SocketAddr,
    /// Address of the Raft RPC endpoint (HTTP, bincode bodies).
    #[arg(long, env = "VELLUM_RAFT_ADDR")]
    pub raft_addr: SocketAddr,
    /// The carrier: a file (formatted if missing), a block device, or `memory:` (a volume in
    /// process memory, gone at exit: for tests and benchmarks only).
    #[arg(long, env = "VELLUM_VOLUME")]
    pub volume: PathBuf,
    /// Capacity when the volume file has to be created [default: 1GiB]. An existing volume
    /// keeps its own capacity (another value is only a warning).
    #[arg(long, env = "VELLUM_VOLUME_SIZE", value_parser = size_arg)]
    pub volume_size: Option<u64>,
    /// Bootstrap members: `1=RAFT_ADDR/API_ADDR,2=RAFT_ADDR/API_ADDR,...` (the same on every
    /// node; safe to pass on every start).
    #[arg(long, env = "VELLUM_INITIAL_CLUSTER")]
    pub initial_cluster: Option<String>,
    /// `new`: this member may start on a volume with no raft state once its peers confirm
    /// they never knew it (a first start). `existing`: the cluster exists and this member
    /// belongs to it, so a volume with no raft state means the member lost its state, and
    /// the node refuses to start.
    #[arg(long, env = "VELLUM_INITIAL_CLUSTER_STATE", value_enum, default_value = "new")]
    pub initial_cluster_state: ClusterState,
    /// Join a running cluster through any member's API address (added as a learner, then
    /// promoted to voter).
    #[arg(long, env = "VELLUM_JOIN", conflicts_with = "initial_cluster")]
    pub join: Option<String>,
    /// An admin token the node presents when it joins through --join (needed when the
    /// cluster's API requires tokens); also presented when a first start asks members for
    /// the cluster's status. Prefer the environment variable: a command line is visible to
    /// every user of the machine.
    #[arg(long, env = "VELLUM_JOIN_TOKEN", hide_env_values = true, help_heading = "Security")]
    pub join_token: Option<BearerToken>,
    /// Require bearer tokens on the client API: a file of `TOKEN ROLE` lines, ROLE one of
    /// `read` (GET), `write` (PUT, DELETE) or `admin` (membership); `#` starts a comment.
    /// Re-read on SIGHUP (a bad file keeps the previous tokens). Give every node the same
    /// file: a follower forwards the caller's token to the leader, which checks it again.
    /// `/livez` and `/readyz` stay open.
    #[arg(long, env = "VELLUM_AUTH_TOKENS", help_heading = "Security")]
    pub auth_tokens: Option<PathBuf>,
    /// Largest key, in bytes.
    #[arg(long, env = "VELLUM_MAX_KEY_BYTES", default_value = "1KiB", value_parser = size_arg)]
    pub max_key_bytes: u64,
    /// Largest value, in bytes.
    #[arg(long, env = "VELLUM_MAX_VALUE_BYTES", default_value = "1MiB", value_parser = size_arg)]
    pub max_value_bytes: u64,
    /// The volume's own page cache, in bytes (default: 64MiB on a file or device, none on
    /// `memory:`, where a cache is meaningless and refused). `0` turns it off. It serves
    /// reads of older log entries and snapshots; log appends stay direct and write-through.
    #[arg(long, env = "VELLUM_CACHE_SIZE", value_parser = size_arg)]
    pub cache_size: Option<u64>,
    /// Format a new volume without a journal: every metadata commit (segment roll, purge,
    /// snapshot publication) is then a copy-on-write checkpoint with two barriers instead of
    /// one journal write. The region is still reserved (`vellum journal enable` switches it
    /// on later). An existing volume keeps its own form.
    #[arg(long, env = "VELLUM_NO_JOURNAL", value_parser = BoolishValueParser::new())]
    pub no_journal: bool,
    /// Size of one log segment of a new log (default: 1/16 of the volume, from 1 MiB to
    /// 64 MiB). An existing log keeps the size of its segments.
    #[arg(long, env = "VELLUM_SEGMENT_SIZE", value_parser = size_arg)]
    pub segment_size: Option<u64>,
    /// Build a snapshot (and purge the log) after this many entries.
    #[arg(long, env = "VELLUM_SNAPSHOT_ENTRIES", default_value_t = 5000)]
    pub snapshot_entries: u64,
    /// Log entries kept behind a snapshot (followers further behind get the snapshot).
    #[arg(long, env = "VELLUM_SNAPSHOT_KEEP", default_value_t = 1000)]
    pub snapshot_keep: u64,
    /// Raft heartbeat interval in milliseconds (elections time out after 4x to 8x this).
    #[arg(long, env = "VELLUM_HEARTBEAT_MS", default_value_t = 100)]
    pub heartbeat_ms: u64,
    /// This node's certificate (PEM) on the Raft port, presented to connecting peers and in
    /// its own Raft RPCs. It must be valid for the name `node-ID.vellum` (vellum cert node
    /// makes one). With --peer-key and --peer-ca: mutual TLS between members.
    #[arg(long, env = "VELLUM_PEER_CERT", value_name = "FILE", help_heading = "Security")]
    pub peer_cert: Option<PathBuf>,
    /// The private key (PEM) of --peer-cert.
    #[arg(long, env = "VELLUM_PEER_KEY", value_name = "FILE", help_heading = "Security")]
    pub peer_key: Option<PathBuf>,
    /// The CA (PEM) of the cluster's members: a peer whose certificate it did not sign gets
    /// nothing (the handshake fails), and a request is refused unless its certificate names
    /// the member it says it comes from.
    #[arg(long, env = "VELLUM_PEER_CA", value_name = "FILE", help_heading = "Security")]
    pub peer_ca: Option<PathBuf>,
    /// Serve the client API over TLS with this certificate (PEM).
    #[arg(long, env = "VELLUM_API_CERT", value_name = "FILE", help_heading = "Security")]
    pub api_cert: Option<PathBuf>,
    /// The private key (PEM) of --api-cert.
    #[arg(long, env = "VELLUM_API_KEY", value_name = "FILE", help_heading = "Security")]
    pub api_key: Option<PathBuf>,
    /// Require API clients to present a certificate this CA (PEM) signed. The node also
    /// verifies other members' API certificates against it (and --peer-ca) when it forwards.
    #[arg(long, env = "VELLUM_API_CA", value_name = "FILE", help_heading = "Security")]
    pub api_ca: Option<PathBuf>,
    /// Serve /metrics (plain HTTP, no token) on this address too, for Prometheus.
    #[arg(long, env = "VELLUM_METRICS_ADDR", help_heading = "Security")]
    pub metrics_addr: Option<SocketAddr>,
    /// Serve plain HTTP on non-loopback addresses. Without it, `vellum serve` refuses to
    /// listen off loopback unless both ports have TLS: anyone who reaches a plain port can
    /// read, write, vote and change membership.
    #[arg(
        long,
        env = "VELLUM_INSECURE",
        value_parser = BoolishValueParser::new(),
        help_heading = "Security"
    )]
    pub insecure: bool,
    /// Refuse every Raft RPC from these node ids (repeatable, or a comma list), whatever
    /// certificate they present: revokes an id without a CRL. Ids removed from the cluster
    /// are refused for good without it.
    #[arg(
        long = "deny-peer",
        env = "VELLUM_DENY_PEERS",
        value_name = "ID",
        value_delimiter = ',',
        value_parser = clap::value_parser!(u64).range(1..),
        help_heading = "Security"
    )]
    pub deny_peers: Vec<u64>,
    /// Connection caps and deadlines of the ports (`listener.rs`).
    #[command(flatten)]
    pub conn: crate::server::listener::ConnArgs,
}

/// Whether the cluster this member starts in exists already (etcd's flag of that name).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterState {
    New,
    Existing,
}

/// Capacity of a volume created without `--volume-size`.
pub const DEFAULT_VOLUME_BYTES: u64 = 1 << 30;

impl ServeArgs {
    pub fn me(&self) -> KvNode {
        KvNode { raft_addr: self.raft_addr.to_string(), api_addr: self.api_addr.to_string() }
    }

    /// The ports this node opens and how each is protected (`security/exposure.rs`).
    pub fn exposure(&self) -> Exposure {
        Exposure {
            api_addr: self.api_addr,
            raft_addr: self.raft_addr,
            metrics_addr: self.metrics_addr,
            api_tls: self.api_cert.is_some(),
            api_client_certs: self.api_ca.is_some(),
            api_tokens: self.auth_tokens.is_some(),
            raft_tls: self.peer_cert.is_some(),
            insecure: self.insecure,
        }
    }

    /// Capacity of the volume if it has to be created.
    pub fn create_bytes(&self) -> u64 {
        self.volume_size.unwrap_or(DEFAULT_VOLUME_BYTES)
    }

    /// How a missing volume is formatted: with a journal unless --no-journal.
    pub fn format(&self) -> vellum_engine::FormatOptions<'static> {
        let capacity = self.create_bytes();
        vellum_engine::FormatOptions {
            journal: !self.no_journal,
            ..vellum_engine::FormatOptions::journaled(capacity)
        }
    }

    /// Segment size for a new log on a volume of `capacity` bytes.
    pub fn segment_bytes(&self, capacity: u64) -> u64 {
        let auto = vellum_raft_store::LogConfig::segment_bytes_for(capacity);
        self.segment_size.map_or(auto, |s| s.next_multiple_of(4096))
    }
}

/// Parses `1=RAFT/API,2=RAFT/API`.
pub fn parse_initial_cluster(text: &str) -> Result<BTreeMap<u64, KvNode>, String> {
    let mut members = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addrs) =
            part.split_once('=').ok_or_else(|| format!("'{part}' is not ID=RAFT_ADDR/API_ADDR"))?;
        let id: u64 = id.trim().parse().map_err(|_| format!("'{id}' is not a node id"))?;
        let (raft, api) =
            addrs.split_once('/').ok_or_else(|| format!("'{addrs}' is not RAFT_ADDR/API_ADDR"))?;
        for a in [raft, api] {
            a.parse::<SocketAddr>().map_err(|_| format!("'{a}' is not HOST:PORT"))?;
        }
        if members.insert(id, KvNode { raft_addr: raft.into(), api_addr: api.into() }).is_some() {
            return Err(format!("node {id} appears twice"));
        }
    }
    if members.is_empty() {
        return Err("the initial cluster is empty".into());
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_cluster_syntax() {
        let m = parse_initial_cluster(
            "1=127.0.0.1:7001/127.0.0.1:8001, 2=127.0.0.1:7002/127.0.0.1:8002",
        )
        .unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[&2].api_addr, "127.0.0.1:8002");
        assert!(parse_initial_cluster("1=nope").is_err());
        assert!(parse_initial_cluster("x=1.2.3.4:1/1.2.3.4:2").is_err());
        assert!(parse_initial_cluster("1=1.2.3.4:1/1.2.3.4:2,1=1.2.3.4:3/1.2.3.4:4").is_err());
        assert!(parse_initial_cluster("").is_err());
    }
}
