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

/// Parses a duration: `500ms`, `30s`, `5m`, `1h` (a bare number is seconds).
pub fn duration_arg(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = num.parse().map_err(|_| format!("'{text}' is not a duration (30s, 5m, 1h)"))?;
    let secs = |k: u64| std::time::Duration::from_secs(n.saturating_mul(k));
    let d = match unit {
        "ms" => std::time::Duration::from_millis(n),
        "" | "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        _ => return Err(format!("'{text}' is not a duration (30s, 5m, 1h)")),
    };
    if d.is_zero() {
        return Err("a duration must be more than zero".into());
    }
    Ok(d)
}

/// The most Raft groups a node runs (`--groups`): each costs an openraft core, a state
/// machine and a heartbeat stream per peer.
pub const MAX_GROUPS: u64 = 256;

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
    /// The client API address other members and clients reach this node at, when it is not
    /// --api-addr (NAT, a container's port mapping, a bind to 0.0.0.0): it goes into the
    /// cluster's membership (etcd's --advertise-client-urls). Default: --api-addr.
    #[arg(long, env = "VELLUM_ADVERTISE_API_ADDR", value_name = "IP:PORT")]
    pub advertise_api_addr: Option<SocketAddr>,
    /// The Raft address other members reach this node at, when it is not --raft-addr: it
    /// goes into the cluster's membership (etcd's --initial-advertise-peer-urls). Default:
    /// --raft-addr.
    #[arg(long, env = "VELLUM_ADVERTISE_RAFT_ADDR", value_name = "IP:PORT")]
    pub advertise_raft_addr: Option<SocketAddr>,
    /// The carrier: a file (formatted if missing), a block device, or `memory:` (a volume in
    /// process memory, gone at exit: for tests and benchmarks only).
    #[arg(long, env = "VELLUM_VOLUME")]
    pub volume: PathBuf,
    /// Capacity when the volume file has to be created [default: 1GiB]. An existing volume
    /// keeps its own capacity (another value is only a warning).
    #[arg(long, env = "VELLUM_VOLUME_SIZE", value_parser = size_arg)]
    pub volume_size: Option<u64>,
    /// Bootstrap members: `1=RAFT_ADDR/API_ADDR,2=RAFT_ADDR/API_ADDR,...` (the same on every
    /// node; safe to pass on every start). This node's own entry must name its advertised
    /// addresses. Without it and without --join, a new volume starts a single-node cluster
    /// with this node as its only member (grow it with `vellum cluster add`), and a volume
    /// with raft state restarts as the member it is.
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
    /// Neither form nor join a cluster: wait until a member adds this node
    /// (`vellum cluster add ID API_ADDR RAFT_ADDR` against any member). Without this,
    /// --initial-cluster and --join, a new volume starts a single-node cluster.
    #[arg(
        long,
        env = "VELLUM_STANDBY",
        conflicts_with_all = ["initial_cluster", "join"],
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub standby: bool,
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
    /// Raft groups the key space is hashed over (1 to 256), each an openraft instance of its
    /// own on the node's one log, so that every member leads about G/N of them and writes
    /// scale with the members. Fixed when the cluster is created: use the same value on
    /// every member and every start (a volume holding raft state refuses another).
    #[arg(
        long,
        env = "VELLUM_GROUPS",
        default_value_t = 1,
        value_parser = clap::value_parser!(u64).range(1..=MAX_GROUPS)
    )]
    pub groups: u64,
    /// Build a snapshot (and purge the log) after this many entries, or sooner when the log's
    /// segments take more than an eighth of the volume; never without room for it.
    #[arg(long, env = "VELLUM_SNAPSHOT_ENTRIES", default_value_t = 5000)]
    pub snapshot_entries: u64,
    /// Log entries kept behind a snapshot (followers further behind get the snapshot); fewer
    /// when the log outgrows an eighth of the volume.
    #[arg(long, env = "VELLUM_SNAPSHOT_KEEP", default_value_t = 1000)]
    pub snapshot_keep: u64,
    /// Raft heartbeat interval in milliseconds (from 10).
    #[arg(long, env = "VELLUM_HEARTBEAT_MS", default_value_t = 100)]
    pub heartbeat_ms: u64,
    /// Raft election timeout in milliseconds: a follower that hears no leader for a random
    /// time between this and twice this starts an election. At least 3x --heartbeat-ms
    /// [default: 4x --heartbeat-ms]. Use the same value on every member.
    #[arg(
        long,
        visible_alias = "election-timeout",
        env = "VELLUM_ELECTION_TIMEOUT_MS",
        value_name = "MS"
    )]
    pub election_timeout_ms: Option<u64>,
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
    /// Archive each new snapshot to this prefix, on the leader, in the background (any
    /// medium: `s3://bucket/prefix?endpoint=...`, `local:///dir`; docs/OPERATIONS.md,
    /// "Disaster recovery").
    #[arg(long, env = "VELLUM_SNAPSHOT_ARCHIVE", value_name = "URL", help_heading = "Archive")]
    pub snapshot_archive: Option<String>,
    /// How often the leader checks for a snapshot newer than the last archived one (and
    /// asks for a snapshot when the applied index moved past the current one): 30s, 5m, ...
    #[arg(
        long,
        env = "VELLUM_ARCHIVE_INTERVAL",
        default_value = "60s",
        value_parser = duration_arg,
        value_name = "DURATION",
        help_heading = "Archive"
    )]
    pub archive_interval: std::time::Duration,
    /// Keep the newest N complete archives under --snapshot-archive; older ones are deleted.
    #[arg(
        long,
        env = "VELLUM_ARCHIVE_KEEP",
        default_value = "5",
        value_parser = clap::value_parser!(u64).range(1..),
        help_heading = "Archive"
    )]
    pub archive_keep: u64,
    /// With --snapshot-archive: a volume with no raft state is first restored from the
    /// newest complete archive there (never a volume with state; with no archive the node
    /// starts as usual). The membership comes from --initial-cluster.
    #[arg(
        long,
        env = "VELLUM_AUTO_RESTORE",
        requires = "snapshot_archive",
        help_heading = "Archive"
    )]
    pub auto_restore: bool,
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

/// An election timeout must be at least this many heartbeats: a follower must be able to
/// miss one or two heartbeats (a slow disk, a lost packet) without starting an election.
pub const MIN_ELECTION_HEARTBEATS: u64 = 3;

impl ServeArgs {
    /// The API address that goes into the membership: `--advertise-api-addr`, else
    /// `--api-addr`.
    pub fn public_api_addr(&self) -> SocketAddr {
        self.advertise_api_addr.unwrap_or(self.api_addr)
    }

    /// The Raft address that goes into the membership: `--advertise-raft-addr`, else
    /// `--raft-addr`.
    pub fn public_raft_addr(&self) -> SocketAddr {
        self.advertise_raft_addr.unwrap_or(self.raft_addr)
    }

    /// This node's membership entry: its advertised addresses. `Err` (one line) when an
    /// address is a wildcard bind (`0.0.0.0`, `[::]`) with nothing advertised: no peer can
    /// reach that.
    pub fn me(&self) -> Result<KvNode, String> {
        for (flag, bind, advertised) in [
            ("api", self.api_addr, self.advertise_api_addr),
            ("raft", self.raft_addr, self.advertise_raft_addr),
        ] {
            if bind.ip().is_unspecified() && advertised.is_none() {
                return Err(format!(
                    "--{flag}-addr {bind} is no address peers can reach, and it would go into \
                     the cluster's membership: pass --advertise-{flag}-addr IP:PORT (the \
                     address the others reach this node's {flag} port at)"
                ));
            }
        }
        Ok(KvNode {
            raft_addr: self.public_raft_addr().to_string(),
            api_addr: self.public_api_addr().to_string(),
        })
    }

    /// Checks the addresses this node advertises: never a wildcard, and, when
    /// `--initial-cluster` names this node, the same as its entry there (a wildcard bind
    /// with nothing advertised matches any entry with its port).
    pub fn check_addresses(&self) -> Result<(), String> {
        for (flag, advertised) in
            [("api", self.advertise_api_addr), ("raft", self.advertise_raft_addr)]
        {
            if let Some(a) = advertised.filter(|a| a.ip().is_unspecified() || a.port() == 0) {
                return Err(format!(
                    "--advertise-{flag}-addr {a} is no address peers can reach: give the \
                     IP:PORT the others reach this node's {flag} port at"
                ));
            }
        }
        let Some(spec) = &self.initial_cluster else { return Ok(()) };
        let members = parse_initial_cluster(spec).map_err(|e| format!("--initial-cluster: {e}"))?;
        let Some(entry) = members.get(&self.id) else {
            return Err(format!("--initial-cluster does not contain this node's id {}", self.id));
        };
        for (flag, listed, bind, advertised) in [
            ("raft", &entry.raft_addr, self.raft_addr, self.advertise_raft_addr),
            ("api", &entry.api_addr, self.api_addr, self.advertise_api_addr),
        ] {
            let listed: SocketAddr =
                listed.parse().map_err(|_| format!("'{listed}' is not HOST:PORT"))?;
            let matches = match advertised {
                Some(a) => a == listed,
                None if bind.ip().is_unspecified() => bind.port() == listed.port(),
                None => bind == listed,
            };
            if !matches {
                let (what, addr) = match advertised {
                    Some(a) => (format!("--advertise-{flag}-addr"), a),
                    None => (format!("--{flag}-addr"), bind),
                };
                return Err(format!(
                    "--initial-cluster names node {} at {flag} address {listed}, but {what} is \
                     {addr}: they must be the same (pass --advertise-{flag}-addr {listed} when \
                     the others reach this node at another address than it binds)",
                    self.id
                ));
            }
        }
        Ok(())
    }

    /// openraft's election timeout range `(min, max)` in milliseconds, from the heartbeat and
    /// `--election-timeout-ms` (default: 4x to 8x the heartbeat).
    pub fn election_timeouts(&self) -> Result<(u64, u64), String> {
        let hb = self.heartbeat_ms();
        let Some(min) = self.election_timeout_ms else { return Ok((hb * 4, hb * 8)) };
        let least = hb * MIN_ELECTION_HEARTBEATS;
        if min < least {
            return Err(format!(
                "--election-timeout-ms {min} must be at least {MIN_ELECTION_HEARTBEATS}x \
                 --heartbeat-ms {hb}: {least} or more"
            ));
        }
        Ok((min, min.saturating_mul(2)))
    }

    /// The heartbeat interval in milliseconds (10 at least).
    pub fn heartbeat_ms(&self) -> u64 {
        self.heartbeat_ms.max(10)
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
    use clap::Parser;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    /// `vellum serve` with `extra`, and the required flags `extra` does not give.
    fn serve(extra: &[&str]) -> ServeArgs {
        let mut args = vec!["serve"];
        for (flag, value) in [
            ("--id", "1"),
            ("--api-addr", "127.0.0.1:8001"),
            ("--raft-addr", "127.0.0.1:7001"),
            ("--volume", "memory:"),
        ] {
            if !extra.contains(&flag) {
                args.extend([flag, value]);
            }
        }
        args.extend_from_slice(extra);
        Cli::try_parse_from(args).unwrap().serve
    }

    #[test]
    fn election_timeout_defaults_to_four_to_eight_heartbeats() {
        assert_eq!(serve(&[]).election_timeouts(), Ok((400, 800)));
        assert_eq!(serve(&["--heartbeat-ms", "50"]).election_timeouts(), Ok((200, 400)));
        let set = serve(&["--heartbeat-ms", "50", "--election-timeout-ms", "1000"]);
        assert_eq!(set.election_timeouts(), Ok((1000, 2000)));
        assert_eq!(serve(&["--election-timeout", "300"]).election_timeouts(), Ok((300, 600)));
        let low = serve(&["--election-timeout-ms", "299"]).election_timeouts().unwrap_err();
        assert!(low.contains("at least 3x") && low.contains("300 or more"), "{low}");
    }

    #[test]
    fn the_membership_entry_is_the_advertised_addresses() {
        let plain = serve(&[]).me().unwrap();
        assert_eq!(
            (plain.api_addr.as_str(), plain.raft_addr.as_str()),
            ("127.0.0.1:8001", "127.0.0.1:7001")
        );
        let adv =
            serve(&["--advertise-api-addr", "10.0.0.1:80", "--advertise-raft-addr", "10.0.0.1:81"]);
        let me = adv.me().unwrap();
        assert_eq!((me.api_addr.as_str(), me.raft_addr.as_str()), ("10.0.0.1:80", "10.0.0.1:81"));
        assert!(adv.check_addresses().is_ok());
    }

    #[test]
    fn wildcards_never_reach_the_membership() {
        let wild = serve(&["--raft-addr", "0.0.0.0:7001"]);
        let why = wild.me().unwrap_err();
        assert!(why.contains("--advertise-raft-addr"), "{why}");
        let told =
            serve(&["--raft-addr", "0.0.0.0:7001", "--advertise-raft-addr", "10.0.0.1:7001"]);
        assert_eq!(told.me().unwrap().raft_addr, "10.0.0.1:7001");
        for flag in ["--advertise-api-addr", "--advertise-raft-addr"] {
            for addr in ["0.0.0.0:7001", "[::]:7001"] {
                let why = serve(&[flag, addr]).check_addresses().unwrap_err();
                assert!(why.contains(flag) && why.contains("no address"), "{why}");
            }
        }
    }

    #[test]
    fn an_initial_cluster_entry_must_name_the_advertised_addresses() {
        let c = "1=127.0.0.1:7001/127.0.0.1:8001,2=127.0.0.1:7002/127.0.0.1:8002";
        assert!(serve(&["--initial-cluster", c]).check_addresses().is_ok());
        let other = serve(&["--initial-cluster", c, "--api-addr", "127.0.0.1:9001"]);
        let why = other.check_addresses().unwrap_err();
        assert!(why.contains("api address 127.0.0.1:8001") && why.contains("--api-addr"), "{why}");
        // Advertised: the entry must name the advertised address, not the bind one.
        let adv = serve(&["--initial-cluster", c, "--advertise-raft-addr", "10.0.0.1:7001"]);
        let why = adv.check_addresses().unwrap_err();
        assert!(why.contains("--advertise-raft-addr is 10.0.0.1:7001"), "{why}");
        let adv = serve(&[
            "--initial-cluster",
            "1=10.0.0.1:7001/127.0.0.1:8001",
            "--raft-addr",
            "0.0.0.0:7001",
            "--advertise-raft-addr",
            "10.0.0.1:7001",
        ]);
        assert!(adv.check_addresses().is_ok());
        // A wildcard bind with nothing advertised: the entry's port must match.
        let wild = serve(&["--initial-cluster", c, "--api-addr", "0.0.0.0:8001"]);
        assert!(wild.check_addresses().is_ok());
        let wild = serve(&["--initial-cluster", c, "--api-addr", "0.0.0.0:9001"]);
        assert!(wild.check_addresses().is_err());
        let absent = serve(&["--initial-cluster", "2=127.0.0.1:7002/127.0.0.1:8002"]);
        assert!(absent.check_addresses().unwrap_err().contains("does not contain"));
    }

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
