//! `vellum serve`: one node of the KV cluster.
//!
//! Start-up: open (or format) the volume with production knobs, open the log and the state
//! machine on it, establish this member's identity (`member.rs`: a store with no raft state
//! starts only if no peer knows this node id), start Raft, serve the Raft RPC and the client
//! API, then bootstrap (every node of `--initial-cluster` calls `initialize` with the same
//! members: safe, the first wins and the others are told it is done) or join (`--join`:
//! learner first, then voter). With neither, the node is a single-node cluster of its own
//! (`lone_cluster`: initialized once on a store with no raft state, restarted as the member
//! it is afterwards, refused when the store's membership does not hold it), unless
//! `--standby` says to wait until a member adds it (`vellum cluster add`). The membership
//! holds the advertised addresses (`--advertise-*-addr`, else the bind ones). SIGINT /
//! SIGTERM stop it cleanly: Raft shuts down, then the
//! volume is closed clean. A node that learns from a peer that it lost its state stops too,
//! and exits non-zero with one line that says so. So does a node whose volume's metadata
//! journal was destroyed (the raft store refuses a log that may be rolled back): exit code 3,
//! one line that tells the operator to replace the member. A node whose Raft core stops
//! while it runs (a storage error, or a panic inside openraft; `metrics.rs` watches it)
//! answers 503 on `/livez` and `/readyz` at once, shuts down as cleanly as it can and exits
//! with code 4, which the systemd unit restarts.
//!
//! Raft is openraft 0.10 (`=0.10.0-alpha.37`, an alpha upstream) through the store's 0.10
//! adapter (`vellum_raft_store::v010`). Client writes go through the proposal batcher:
//! concurrent ones share one log entry, two entries may be in flight, and the log makes the
//! appends in flight durable in one write.
//!
//! With `--groups G` the node runs G openraft instances on its one log, the key space hashed
//! over them (`groups.rs`): every group has the same members, is initialized, started and
//! stopped with the others, and leaders spread over the voters by leader transfer.
//!
//! With `--auth-tokens FILE` the client API requires bearer tokens with roles (`auth.rs`;
//! re-read on SIGHUP); `--join-token` is the admin token this node presents to the
//! cluster's API when it joins.

mod archiver;
mod codec;
pub mod config;
pub(crate) mod directory;
pub(crate) mod groups;
pub mod http;
pub mod listener;
mod member;
pub(crate) mod metrics;
mod network;
mod raft_api;
mod release;
mod rpc_check;
pub(crate) mod space;
mod transport;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use axum::http::HeaderValue;
use vellum_raft_store::member::{Identity, PeerBook};
use vellum_raft_store::v010::openraft::errors::{InitializeError, RaftError};
use vellum_raft_store::v010::openraft::{Config, Raft, SnapshotPolicy};
use vellum_raft_store::v010::{KvStateMachine, LogStore, TypeConfig, open_store};
use vellum_raft_store::{BatchLimits, Error as StoreError, LogConfig, open_volume_with};

use crate::error::CliError;
use crate::security::{exposure, tokens};
use config::ClusterState;
pub use config::ServeArgs;
use transport::{ApiClient, PeerClients, Security};

/// The node's Raft handle (0.10 names the state machine in it).
pub type KvRaft = Raft<TypeConfig, KvStateMachine>;

fn fail(what: &str) -> impl FnOnce(String) -> CliError + '_ {
    move |why| CliError::Usage(format!("{what}: {why}"))
}

/// Waits for SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            let _ = ctrl_c.await;
            return;
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Bytes a `KvRequest` entry adds around its keys and values (log id, enum tags, lengths):
/// a generous bound for the value limit.
const ENTRY_OVERHEAD: usize = 256;
/// Bytes one operation adds to an entry besides its key and value.
const OP_OVERHEAD: usize = 16;

fn raft_config(args: &ServeArgs) -> Result<Arc<Config>, CliError> {
    let (election_timeout_min, election_timeout_max) =
        args.election_timeouts().map_err(CliError::Usage)?;
    let config = Config {
        cluster_name: "vellum".into(),
        heartbeat_interval: args.heartbeat_ms(),
        election_timeout_min,
        election_timeout_max,
        install_snapshot_timeout: 10_000,
        // The space guard asks for snapshots, every `--snapshot-entries` and when the log
        // outgrows its share of the volume, and only when the volume has room for one: a
        // snapshot write that finds it full stops the Raft core (`space.rs`).
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: args.snapshot_keep,
        snapshot_max_chunk_size: 1 << 20,
        // Hand the leader's appended entries to replication as soon as `append` returns,
        // not at the end of the core's step: lower latency at low concurrency.
        broadcast_submitted_on_append: Some(true),
        // A restarted leader must not resume leading without an election: the state machine
        // is not durable when `apply` returns (it is made durable by snapshots) and the log
        // saves the committed id lazily, which is the case openraft's docs call unsafe for
        // leader restore.
        enable_leader_restore: Some(false),
        ..Config::default()
    };
    Ok(Arc::new(config.validate().map_err(|e| fail("raft configuration")(e.to_string()))?))
}

/// The limits client input gets, checked against what one log entry of this volume can
/// hold: a value that cannot fit is refused (413) before it reaches Raft. A node whose
/// segments cannot hold the largest write it accepts refuses to start: its followers
/// (configured alike) would refuse such an entry, and openraft stops on any storage error.
fn limits(args: &ServeArgs, max_entry_bytes: usize) -> Result<http::Limits, CliError> {
    let limits = http::Limits {
        max_key_bytes: args.max_key_bytes as usize,
        max_value_bytes: args.max_value_bytes as usize,
    };
    check_limits(&limits, max_entry_bytes)?;
    Ok(limits)
}

/// The largest entry a leader with `limits` proposes: one write alone at most, or a batch,
/// which `batch_limits` keeps below that.
fn largest_entry(limits: &http::Limits) -> usize {
    limits.max_key_bytes + limits.max_value_bytes + OP_OVERHEAD + ENTRY_OVERHEAD
}

/// Refuses limits whose largest entry this node's log cannot hold (`max_entry_bytes`).
fn check_limits(limits: &http::Limits, max_entry_bytes: usize) -> Result<(), CliError> {
    let largest = largest_entry(limits);
    if largest > max_entry_bytes {
        let (key, value) = (limits.max_key_bytes, limits.max_value_bytes);
        return Err(CliError::Usage(format!(
            "--max-key-bytes {key} and --max-value-bytes {value} make entries of up to \
             {largest} bytes, but one raft log entry of this volume holds {max_entry_bytes} \
             (set by its segment size): lower them, or create the volume with a larger \
             --segment-size (use the same settings on every node)"
        )));
    }
    Ok(())
}

/// Operations per proposed entry at most.
const BATCH_OPS: usize = 1024;
/// Bytes of keys and values per proposed entry at most (a single larger write goes alone).
const BATCH_BYTES: usize = 2 << 20;
/// Entries of client writes proposed and not yet committed, at most: openraft 0.10 appends and
/// replicates the next while earlier ones are in flight. The batcher is paced by the log's
/// disk and keeps one where the durable write bounds the commit (a spinning disk).
const PROPOSALS_IN_FLIGHT: usize = 2;

/// How client writes are batched into entries: within [`BATCH_OPS`] and [`BATCH_BYTES`], and
/// never past the largest single write the node accepts (`--max-key-bytes` plus
/// `--max-value-bytes`). The bound must not come from this node's own segment size: a
/// leader whose segments are larger than a follower's would propose entries the follower's
/// log cannot hold, and the follower's append would fail with `EntryTooLarge`, which openraft
/// treats as fatal. Every member checks at start that its own log holds the largest single
/// write (`limits`), so with the same key and value limits on every member, every entry any
/// leader proposes fits every member's log, whatever their segment sizes.
fn batch_limits(limits: &http::Limits) -> BatchLimits {
    BatchLimits {
        max_ops: BATCH_OPS,
        max_bytes: BATCH_BYTES.min(largest_entry(limits) - ENTRY_OVERHEAD),
        max_in_flight: PROPOSALS_IN_FLIGHT,
        ..BatchLimits::default()
    }
}

/// Logs the zero-fill of a new volume file: a line at each tenth done, at most one a second
/// (and one every [`FILL_QUIET`] whatever the progress), so a large first start is never
/// silent and a small one stays short.
struct FillLog {
    started: std::time::Instant,
    last: std::time::Instant,
    /// The last tenth logged.
    tenth: u64,
}

/// The longest a zero-fill goes without a line.
const FILL_QUIET: Duration = Duration::from_secs(5);

impl FillLog {
    fn new() -> FillLog {
        let now = std::time::Instant::now();
        FillLog { started: now, last: now, tenth: 0 }
    }

    /// The percentage to log now that `done` of `total` bytes are written, if any.
    fn step(&mut self, done: u64, total: u64, now: std::time::Instant) -> Option<u64> {
        if total == 0 || done >= total {
            return None; // the done line says it
        }
        let percent = done.saturating_mul(100) / total;
        let since = now.saturating_duration_since(self.last);
        let next_tenth = percent / 10 > self.tenth && since >= Duration::from_secs(1);
        if !(next_tenth || since >= FILL_QUIET) {
            return None;
        }
        self.tenth = percent / 10;
        self.last = now;
        Some(percent)
    }
}

/// Opens (or formats, when `creating`: a file that does not exist yet) the volume the node
/// runs on. Formatting a file zero-fills it, which takes seconds on a large volume: logged as
/// it goes, as `vellum format` shows a bar.
async fn volume(args: &ServeArgs, creating: bool) -> Result<vellum_engine::Volume, CliError> {
    let (location, format) = (args.volume.clone(), args.format());
    let options = vellum_engine::VolumeOptions {
        cache_bytes: args.cache_size.map(|b| usize::try_from(b).unwrap_or(usize::MAX)),
        ..vellum_engine::VolumeOptions::default()
    };
    let creating = creating
        && matches!(
            vellum_engine::media::Location::parse(&location),
            vellum_engine::media::Location::Path(_)
        );
    let size = crate::size::human(args.create_bytes());
    if creating {
        tracing::info!("formatting {size} volume at {} (zero-filling it once)", location.display());
    }
    let volume = tokio::task::spawn_blocking(move || {
        let log = std::sync::Mutex::new(FillLog::new());
        let progress = |done: u64, total: u64| {
            let mut log = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(percent) = log.step(done, total, std::time::Instant::now()) {
                tracing::info!("formatting the volume: {percent}% zero-filled");
            }
        };
        let format = vellum_engine::FormatOptions { progress: Some(&progress), ..format };
        let opened = open_volume_with(&location, &format, options);
        if creating && opened.is_ok() {
            let started = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner).started;
            tracing::info!(
                "formatted the {size} volume at {} in {:.1} s",
                location.display(),
                started.elapsed().as_secs_f64()
            );
        }
        opened
    })
    .await
    .map_err(|e| fail("opening the volume")(e.to_string()))?
    .map_err(|e| fail(&format!("opening the volume {}", args.volume.display()))(e.to_string()))?;
    let info = volume.info();
    if !info.medium.is_durable() {
        // For tests and as the benchmarks' upper bound.
        tracing::warn!(
            bytes = info.layout.capacity_bytes(),
            medium = %info.medium,
            "nothing this node stores survives its exit"
        );
    }
    tracing::info!(
        cache_bytes = info.cache_bytes,
        medium = %info.medium,
        journal_blocks = info.journal.map_or(0, |j| j.blocks),
        "volume open"
    );
    if args.no_journal && info.journal.is_some() {
        tracing::warn!("--no-journal applies to new volumes only; this volume keeps its journal");
    }
    let capacity = volume.info().layout.capacity_bytes();
    if let Some(asked) = args.volume_size
        && asked != capacity
    {
        tracing::warn!(
            volume = capacity,
            asked,
            "--volume-size applies to new volumes only; this volume keeps its capacity"
        );
    }
    Ok(volume)
}

/// What a member's API said when asked for the cluster's status.
enum Reported {
    /// The current members (id and raft address).
    Members(Vec<(u64, String)>),
    /// 401 or 403: the API requires a token this node lacks.
    Refused(reqwest::StatusCode),
    Silent,
}

/// The current members `api` reports, presenting `token` if given.
async fn current_members(
    api_client: &ApiClient,
    api: &str,
    token: Option<&HeaderValue>,
) -> Reported {
    let url = format!("{}/v1/cluster/status", api_client.base(api));
    let Ok(resp) = with_token(api_client.client.get(url), token).send().await else {
        return Reported::Silent;
    };
    let status = resp.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return Reported::Refused(status);
    }
    match resp.json::<http::ClusterStatus>().await {
        Ok(s) => Reported::Members(s.nodes.into_iter().map(|(id, n)| (id, n.raft_addr)).collect()),
        Err(_) => Reported::Silent,
    }
}

/// `req` with `Authorization: Bearer` when there is a token.
fn with_token(
    req: reqwest::RequestBuilder,
    token: Option<&HeaderValue>,
) -> reqwest::RequestBuilder {
    match token {
        Some(t) => req.header(reqwest::header::AUTHORIZATION, t.clone()),
        None => req,
    }
}

/// The `--join-token` header, checked (the error never quotes the token).
fn join_token(args: &ServeArgs) -> Result<Option<HeaderValue>, CliError> {
    args.join_token
        .as_ref()
        .map(|t| t.header().map_err(|why| CliError::Usage(format!("--join-token: {why}"))))
        .transpose()
}

/// Whether this node may start as a new member on a volume with no raft state (see
/// `member.rs`). Refused at once with `--initial-cluster-state existing`, or when a member
/// knows this node id. With `--initial-cluster`, every member of it and every current member
/// any of them reports must answer first (the node waits, saying for whom): one it cannot
/// reach may be the one that counted this node's old votes. With `--join`, the id must not
/// be a current member, and no reachable member may know it.
async fn fresh_start_allowed(args: &ServeArgs, reach: &Reach) -> Result<(), CliError> {
    let id = args.id;
    if args.initial_cluster_state == ClusterState::Existing {
        return Err(CliError::NotThisMember(format!(
            "the volume {} holds no raft state, but --initial-cluster-state existing says \
             node {id} is a member of a running cluster: node {id} lost its state; remove it \
             (vellum cluster remove {id}), then start this machine as a new member on a new \
             volume, with a new --id and --join",
            args.volume.display()
        )));
    }
    let initial = match &args.initial_cluster {
        Some(spec) => config::parse_initial_cluster(spec).map_err(fail("--initial-cluster"))?,
        None => std::collections::BTreeMap::new(),
    };
    let apis: Vec<String> = initial
        .iter()
        .filter(|(m, _)| **m != id)
        .map(|(_, n)| n.api_addr.clone())
        .chain(args.join.clone())
        .collect();
    let api_client = reach.api(Duration::from_secs(2), true)?;
    let token = join_token(args)?;
    let started = std::time::Instant::now();
    let mut told = None;
    let mut refused_told = false;
    loop {
        let mut members: std::collections::BTreeMap<u64, String> =
            initial.iter().map(|(m, n)| (*m, n.raft_addr.clone())).collect();
        let mut reported = false;
        // The members of --initial-cluster answer on their Raft port (no client token
        // needed); the API's status is the way for the others and the --join target.
        let mut answered = std::collections::BTreeSet::new();
        for (m, n) in initial.iter().filter(|(m, _)| **m != id) {
            if let Ok((client, base)) = reach.peers.client(*m, &n.raft_addr)
                && let Some(current) = member::members(&client, &base).await
            {
                reported = true;
                members.extend(current);
                answered.insert(n.api_addr.clone());
            }
        }
        for api in apis.iter().filter(|a| !answered.contains(*a)) {
            match current_members(&api_client, api, token.as_ref()).await {
                Reported::Members(current) => {
                    reported = true;
                    members.extend(current);
                }
                Reported::Refused(status) if !refused_told => {
                    refused_told = true;
                    tracing::warn!(
                        %api,
                        %status,
                        "the member's API refused to tell the cluster's members: it requires \
                         a token (give --join-token an admin token); asking the members known \
                         without it"
                    );
                }
                Reported::Refused(_) | Reported::Silent => {}
            }
        }
        if args.join.is_some() && members.contains_key(&id) {
            return Err(CliError::NotThisMember(format!(
                "node {id} is a member of the cluster already, and this volume holds no raft \
                 state: node {id} lost its state; remove it (vellum cluster remove {id}), then \
                 join this machine as a new member with a new --id"
            )));
        }
        members.remove(&id);
        let mut silent = Vec::new();
        for (member, addr) in &members {
            let answer = match reach.peers.client(*member, addr) {
                Ok((client, base)) => member::ask(&client, &base, id).await,
                Err(why) => {
                    tracing::warn!(member, why, "cannot ask this member");
                    member::Answer::Silent
                }
            };
            match answer {
                member::Answer::Knows(known) => {
                    return Err(CliError::NotThisMember(member::stale_line(
                        id, *member, known, None,
                    )));
                }
                member::Answer::NeverKnew => {}
                member::Answer::Silent => silent.push(*member),
            }
        }
        // Joining, only the members that answer count (a new id is not one a dead member
        // could have counted); bootstrapping, all of them.
        let joining = args.join.is_some() && reported;
        if silent.is_empty() || joining {
            return Ok(());
        }
        // Members starting together wait a moment for one another: say so only when the
        // wait is long enough to need an operator.
        if started.elapsed() >= Duration::from_secs(2)
            && told.is_none_or(|t: std::time::Instant| t.elapsed() >= Duration::from_secs(10))
        {
            told = Some(std::time::Instant::now());
            tracing::warn!(
                id,
                waiting_for = ?silent,
                "this volume holds no raft state: waiting for every member to confirm that \
                 node {id} never ran before (a member that lost its state must not rejoin)"
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// This member's identity: the store's own, or a new one for a store with no raft state
/// once `fresh_start_allowed` (skipped when `checked` already).
async fn identity(
    args: &ServeArgs,
    volume: &vellum_engine::Volume,
    log: &LogStore<TypeConfig>,
    sm: &KvStateMachine,
    checked: bool,
    reach: &Reach,
) -> Result<Identity, CliError> {
    let dir = LogConfig::default().dir;
    let (v, d) = (volume.clone(), dir.clone());
    let loaded = tokio::task::spawn_blocking(move || Identity::load(&v, &d))
        .await
        .map_err(|e| fail("reading the member identity")(e.to_string()))?
        .map_err(|e| fail("reading the member identity")(e.to_string()))?;
    match loaded {
        Some(id) if id.node_id == args.id => return Ok(id),
        Some(id) => {
            return Err(CliError::NotThisMember(format!(
                "the volume {} belongs to node {}, not to node {}: start it with --id {} (a \
                 new member needs a new volume)",
                args.volume.display(),
                id.node_id,
                args.id,
                id.node_id
            )));
        }
        None => {}
    }
    let meta = log.core().meta();
    let has_state = meta.vote.is_some()
        || meta.purged_index.is_some()
        || log.core().bounds().1.is_some()
        || sm.reader().last_applied().is_some();
    if has_state {
        tracing::info!("this raft store predates member identities; giving it one");
    } else if !checked {
        fresh_start_allowed(args, reach).await?;
    }
    let (v, id) = (volume.clone(), args.id);
    let made = tokio::task::spawn_blocking(move || Identity::create(&v, &dir, id))
        .await
        .map_err(|e| fail("writing the member identity")(e.to_string()))?
        .map_err(|e| fail("writing the member identity")(e.to_string()))?;
    tracing::info!(id = args.id, incarnation = %made.incarnation, "this member's identity");
    Ok(made)
}

/// How this node reaches other members: their Raft ports and their APIs (TLS as configured).
struct Reach {
    peers: PeerClients,
    security: Arc<Security>,
}

impl Reach {
    fn api(&self, timeout: Duration, follow_redirects: bool) -> Result<ApiClient, CliError> {
        self.security.api_client(timeout, follow_redirects).map_err(fail("http client"))
    }
}

/// Runs the node until SIGINT / SIGTERM (or until it learns it lost its state).
pub async fn serve(args: ServeArgs) -> Result<(), CliError> {
    let exposure = args.exposure();
    exposure::check(&exposure).map_err(CliError::Usage)?;
    args.check_addresses().map_err(CliError::Usage)?;
    let raft_config = raft_config(&args)?;
    one_group_only(&args)?;
    // Neither --initial-cluster nor --join (nor --standby, which waits to be added): a
    // single-node cluster of this node (`lone`).
    let lone = args.initial_cluster.is_none() && args.join.is_none() && !args.standby;
    if args.join.is_some() {
        args.me().map_err(CliError::Usage)?; // what --join asks the cluster to add
    }
    let security = Arc::new(Security::load(&args).map_err(fail("TLS"))?);
    for warning in exposure::warnings(&exposure) {
        tracing::warn!("{warning}");
    }
    let reach = Reach { peers: security.peers(), security: Arc::clone(&security) };
    let auth = client_auth(&args)?;
    let token = join_token(&args)?;
    let prometheus = metrics::install().map_err(|e| fail("metrics")(e.to_string()))?;
    metrics::spawn_upkeep(prometheus.clone());
    // The Raft port first: members starting together answer each other's start-up
    // questions while they wait for one another; Raft RPCs get 503 until Raft runs.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let health = metrics::Health::new();
    let slot = Arc::new(raft_api::Slot::new(security.raft_server.is_some()));
    // Append and vote bodies are bounded by the largest append a leader with this node's
    // write limits sends (the same limits on every member).
    let rpc_bytes = raft_api::rpc_body_limit(largest_entry(&http::Limits {
        max_key_bytes: args.max_key_bytes as usize,
        max_value_bytes: args.max_value_bytes as usize,
    }));
    let conn = listener::Plan::new(&args.conn);
    let raft_listener = listener::bind(args.raft_addr)
        .map_err(|e| fail(&format!("binding {}", args.raft_addr))(e.to_string()))?;
    let raft_srv = transport::spawn(
        raft_listener,
        raft_api::router(Arc::clone(&slot), rpc_bytes),
        security.raft_server.clone(),
        stop_rx.clone(),
        "raft",
        conn.raft,
    );
    let metrics_srv = match args.metrics_addr {
        Some(addr) => {
            let listener = listener::bind(addr)
                .map_err(|e| fail(&format!("binding {addr}"))(e.to_string()))?;
            let router = http::metrics_router(prometheus.clone(), Arc::clone(&health));
            Some(transport::spawn(listener, router, None, stop_rx.clone(), "metrics", conn.metrics))
        }
        None => None,
    };
    // A carrier that does not exist yet holds no raft state: check that this member may
    // start fresh before formatting (and zero-filling) one.
    let missing = !vellum_engine::media::Location::parse(&args.volume).exists();
    if missing {
        if lone {
            args.me().map_err(CliError::Usage)?; // the single-node cluster's membership
        }
        slot.know(raft_api::Known::Nobody);
        fresh_start_allowed(&args, &reach).await?;
    }
    let volume = volume(&args, missing).await?;
    if args.auto_restore {
        auto_restore(&args, &volume).await?;
    }
    metrics::spawn_volume_metrics(volume.clone());
    let capacity = volume.info().layout.capacity_bytes();
    let log_config =
        LogConfig { segment_bytes: args.segment_bytes(capacity), ..LogConfig::default() };
    let dir = log_config.dir.clone();
    let (log, sm) = open_store(&volume, log_config).map_err(|e| match e {
        // The log may be rolled back: this member must not serve it, and restarting does not
        // help (exit code 3, which the systemd unit does not restart).
        StoreError::VolumeRolledBack { .. } => CliError::NotThisMember(e.to_string()),
        e => fail("opening the raft store")(e.to_string()),
    })?;
    let book = Arc::new(
        PeerBook::open(&volume, &dir).map_err(|e| fail("opening the peer book")(e.to_string()))?,
    );
    slot.know(raft_api::Known::Book(Arc::clone(&book)));
    let me = identity(&args, &volume, &log, &sm, missing, &reach).await?;
    let deny: std::collections::BTreeSet<u64> = args.deny_peers.iter().copied().collect();
    if !deny.is_empty() {
        tracing::info!(?deny, "refusing the Raft RPCs of these ids (--deny-peer)");
    }
    let (guard, mut fatal) = member::Guard::new(me, Arc::clone(&book), deny);
    let max_entry_bytes = log.core().max_entry_bytes();
    let limits = limits(&args, max_entry_bytes)?;
    let log_core = log.core().clone();
    let stores = {
        let (v, core, d, n, at) =
            (volume.clone(), log_core.clone(), dir.clone(), args.groups, args.volume.clone());
        tokio::task::spawn_blocking(move || {
            release::finish(&core, &v, &d).map_err(CliError::Usage)?;
            groups::shape(&core, &v, &d, n, &at)?;
            groups::open_rest(&v, &core, &d, n).map_err(CliError::Usage)
        })
        .await
        .map_err(|e| fail("opening the raft groups")(e.to_string()))??
    };
    let count = stores.len() + 1;
    let ready = Arc::new(AtomicBool::new(false));
    let space = Arc::new(space::Space::new(log_core.segment_bytes()));
    let launch = release::Launch {
        id: args.id,
        config: Arc::clone(&raft_config),
        guard: Arc::clone(&guard),
        peers: reach.peers.clone(),
        space: Arc::clone(&space),
        groups: args.groups,
        batching: batch_limits(&limits),
        latency: log_core.disk_latency(),
        health: Arc::clone(&health),
        // One group: the node's flag itself; several: the node is ready when each is.
        ready: if count == 1 {
            vec![Arc::clone(&ready)]
        } else {
            (0..count).map(|_| Arc::new(AtomicBool::new(false))).collect()
        },
    };
    let mut rafts = Vec::with_capacity(count);
    let mut readers = Vec::with_capacity(count);
    let mut startup = Vec::with_capacity(count);
    for (group, (log, sm)) in std::iter::once((log, sm)).chain(stores).enumerate() {
        startup.push(log.committed_index().unwrap_or(0));
        readers.push(sm.reader());
        rafts.push(launch.raft(group as u64, log, sm).await.map_err(fail("starting raft"))?);
    }
    let raft = rafts[0].clone();
    // The groups this start bootstraps: without `--join` or `--standby`, every group with no
    // raft state yet is initialized (by `lone_cluster` just below, or for `--initial-cluster`
    // once the node serves). A group with state (a vote, or entries) is not, a released
    // replica's included: it keeps its vote. Group 0 waits for its leader whatever its state
    // (`metrics::spawn_raft_watch`), so it is not asked.
    let bootstrapping = args.join.is_none() && !args.standby;
    let mut bootstraps = Vec::with_capacity(count);
    for (group, r) in rafts.iter().enumerate() {
        let fresh = group > 0
            && bootstrapping
            && !r.is_initialized().await.map_err(|e| fail("starting raft")(e.to_string()))?;
        bootstraps.push(fresh);
    }
    let refused = if lone { lone_cluster(&args, &rafts).await.err() } else { None };
    if let Some(refused) = refused {
        // Nothing served yet: stop Raft and close the volume clean, then say why.
        for raft in &rafts {
            let _ = raft.shutdown().await;
        }
        drop(rafts);
        let _ = stop_tx.send(true);
        let _ = raft_srv.await;
        if let Some(srv) = metrics_srv {
            let _ = srv.await;
        }
        drop(raft);
        if let Err(e) = close_store(log_core, volume).await {
            tracing::warn!(error = %e, "closing the volume");
        }
        return Err(refused);
    }
    guard.attach(rafts.iter().map(Raft::metrics).collect());
    member::spawn_removal_watch(Arc::clone(&guard), raft.metrics());
    let mut core_stopped = health.watch();
    let table: Vec<groups::Group> = rafts
        .iter()
        .zip(readers)
        .enumerate()
        .map(|(id, (raft, kv))| launch.group(id as u64, raft.clone(), kv))
        .collect();
    for (((group, commit), flag), bootstrap) in
        table.iter().zip(&startup).zip(&launch.ready).zip(bootstraps)
    {
        let (raft, retired) = (group.raft.clone(), Arc::clone(&group.retired));
        let (flag, health) = (Arc::clone(flag), Arc::clone(&health));
        metrics::spawn_raft_watch(raft, group.id, *commit, bootstrap, flag, health, retired);
    }
    if rafts.len() > 1 {
        groups::spawn_ready(launch.ready.clone(), Arc::clone(&ready), stop_rx.clone());
    }
    let groups = Arc::new(groups::Table::new(table));
    groups::spawn_compactor(Arc::clone(&groups), log_core.clone(), stop_rx.clone());
    space::spawn_guard(
        args.snapshot_entries.max(10),
        Arc::clone(&space),
        Arc::clone(&groups),
        log_core.clone(),
        volume.clone(),
        stop_rx.clone(),
    );
    let directory = Arc::new(directory::Directory::default());
    directory::spawn_poll(
        Arc::clone(&directory),
        Arc::clone(&groups),
        args.id,
        reach.peers.clone(),
        stop_rx.clone(),
    );
    let rebalance = Arc::new(tokio::sync::Notify::new());
    let moving = Arc::new(groups::Moving::default());
    groups::spawn_balancer(
        Arc::clone(&groups),
        Arc::clone(&directory),
        Arc::clone(&moving),
        args.id,
        Duration::from_millis(raft_config.election_timeout_min),
        Arc::clone(&rebalance),
        stop_rx.clone(),
    );
    // Its own stop: the shutdown waits for a release in progress before it stops the groups.
    let (release_stop, release_rx) = tokio::sync::watch::channel(false);
    let releaser = release::spawn(
        launch,
        Arc::clone(&groups),
        Arc::clone(&directory),
        log_core.clone(),
        volume.clone(),
        dir.clone(),
        release_rx,
    );

    let api_listener = listener::bind(args.api_addr)
        .map_err(|e| fail(&format!("binding {}", args.api_addr))(e.to_string()))?;
    let state = http::AppState {
        id: args.id,
        raft: raft.clone(),
        groups,
        directory,
        moving,
        rebalance,
        limits,
        ready,
        health: Arc::clone(&health),
        prometheus,
        http: reach.api(Duration::from_secs(10), true)?,
        auth,
        book,
        volume: volume.clone(),
        space: Arc::clone(&space),
    };
    let rpc_limits = raft_api::RpcLimits {
        max_entry_bytes,
        snapshot_bytes: raft_api::snapshot_body_limit(capacity),
    };
    slot.ready(Arc::clone(&state.groups), guard, rpc_limits, space, volume.clone());
    let api_srv = transport::spawn(
        api_listener,
        http::router(state.clone()),
        security.api_server.clone(),
        stop_rx.clone(),
        "api",
        conn.api,
    );
    if let Some(url) = args.snapshot_archive.clone() {
        let archiver = archiver::Archiver {
            url,
            interval: args.archive_interval,
            keep: usize::try_from(args.archive_keep).unwrap_or(usize::MAX),
            id: args.id,
            raft: raft.clone(),
            volume: volume.clone(),
        };
        tokio::spawn(archiver.run(stop_rx.clone()));
    }
    let scheme = |tls: bool| if tls { "https" } else { "http" };
    // The bind address, and the advertised one when it differs.
    let shown = |tls: bool, bind: std::net::SocketAddr, public: std::net::SocketAddr| {
        let url = format!("{}://{bind}", scheme(tls));
        if public == bind { url } else { format!("{url} (advertised as {public})") }
    };
    tracing::info!(
        id = args.id,
        api = %shown(security.api_server.is_some(), args.api_addr, args.public_api_addr()),
        api_client_certs = args.api_ca.is_some(),
        raft = %shown(security.raft_server.is_some(), args.raft_addr, args.public_raft_addr()),
        metrics = ?args.metrics_addr,
        "node serving"
    );

    if let Some(spec) = &args.initial_cluster {
        let members = config::parse_initial_cluster(spec).map_err(fail("--initial-cluster"))?;
        if !members.contains_key(&args.id) {
            return Err(CliError::Usage(format!(
                "--initial-cluster does not contain this node's id {}",
                args.id
            )));
        }
        for (group, raft) in rafts.iter().enumerate() {
            match raft.initialize(members.clone()).await {
                Ok(()) => tracing::info!(group, "cluster initialized"),
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
                    tracing::info!(group, "cluster already initialized");
                }
                Err(e) => return Err(fail("initializing the cluster")(e.to_string())),
            }
        }
    }
    if let Some(join) = args.join.clone() {
        let me = args.me().map_err(CliError::Usage)?;
        let id = args.id;
        let client = reach.api(Duration::from_secs(30), false)?;
        tokio::spawn(async move { join_cluster(&client, &join, id, &me, token.as_ref()).await });
    }

    let failed = tokio::select! {
        () = shutdown_signal() => None,
        changed = fatal.wait_for(Option::is_some) => {
            changed.ok().and_then(|r| r.clone()).map(CliError::NotThisMember)
        }
        changed = core_stopped.wait_for(Option::is_some) => Some(CliError::RaftStopped(
            changed.ok().and_then(|r| r.clone()).unwrap_or_default(),
        )),
    };
    tracing::info!("shutting down");
    health.begin_shutdown();
    let _ = release_stop.send(true);
    if let Some(releaser) = releaser {
        let _ = releaser.await;
    }
    drop(rafts);
    // The table's instances: a released group's is not the one started above.
    for raft in state.groups.rafts() {
        let _ = raft.shutdown().await;
    }
    let _ = stop_tx.send(true);
    let _ = tokio::join!(raft_srv, api_srv);
    if let Some(srv) = metrics_srv {
        let _ = srv.await;
    }
    drop(state);
    drop(raft);
    let closed = close_store(log_core, volume).await;
    match (failed, closed) {
        // Why the node stopped comes first: after a storage error, closing may fail too.
        (Some(why @ CliError::RaftStopped(_)), Err(e)) => {
            tracing::error!(error = %e, "closing the volume after the Raft core stopped");
            Err(why)
        }
        (Some(why), _) => Err(why),
        (None, closed) => closed,
    }
}

/// `--auto-restore`: a volume with no raft state is restored from the newest complete
/// archive under `--snapshot-archive`, with `--initial-cluster` (or this node alone) as the
/// membership. A volume with state is left as it is; with no archive the node starts as
/// usual; a corrupt archive or an unreachable store stops the start (one line).
async fn auto_restore(args: &ServeArgs, volume: &vellum_engine::Volume) -> Result<(), CliError> {
    let Some(url) = args.snapshot_archive.clone() else { return Ok(()) };
    let members = match &args.initial_cluster {
        Some(spec) => config::parse_initial_cluster(spec).map_err(fail("--initial-cluster"))?,
        None => std::collections::BTreeMap::from([(args.id, args.me().map_err(CliError::Usage)?)]),
    };
    let v = volume.clone();
    let restored = tokio::task::spawn_blocking(move || {
        let log = LogConfig::default();
        if vellum_raft_store::v010::has_raft_state(&v, &log)? {
            return Ok(None);
        }
        let Some((manifest, snap)) = crate::archive::fetch_url(&url)? else {
            return Ok(Some(None));
        };
        crate::archive::restore_into(&v, &snap, members)?;
        Ok::<_, crate::archive::ArchiveError>(Some(Some(manifest)))
    })
    .await
    .map_err(|e| fail("--auto-restore")(e.to_string()))?
    .map_err(|e| fail("--auto-restore")(e.to_string()))?;
    match restored {
        None => tracing::info!("--auto-restore: the volume holds raft state; not restoring"),
        Some(None) => tracing::info!("--auto-restore: no archive yet; starting as usual"),
        Some(Some(m)) => tracing::info!(
            index = m.index,
            term = m.term,
            archive = %m.name(),
            "--auto-restore: restored the volume from the newest archive"
        ),
    }
    Ok(())
}

/// Closes the log and the volume once Raft is shut down: Raft's tasks owned the log and the
/// state machine and are gone; closing commits the clean state and releases the carrier's
/// lock.
async fn close_store(
    log_core: vellum_raft_store::log::LogCore,
    volume: vellum_engine::Volume,
) -> Result<(), CliError> {
    tokio::task::spawn_blocking(move || {
        log_core.close(); // the committed id saved last, and the IO thread
        drop(log_core);
        volume.close()
    })
    .await
    .map_err(|e| fail("closing the volume")(e.to_string()))
    .and_then(|r| r.map_err(|e| fail("closing the volume")(e.to_string())))
}

/// A node started with neither `--initial-cluster` nor `--join` (etcd's and rqlite's
/// default): on a store with no raft state, it initializes a single-node cluster with itself
/// as the only voter; on a store with raft state, it restarts as the member it is. It is
/// refused (exit code 3) when that state says it is not a member: the volume belongs to
/// another cluster, or to one that removed this node. (The store's node id was checked
/// against `--id` already: `identity`.)
async fn lone_cluster(args: &ServeArgs, rafts: &[KvRaft]) -> Result<(), CliError> {
    lone_group(args, &rafts[0]).await?;
    // The other groups take group 0's members (a restarted node's are set already).
    let members = rafts[0]
        .with_raft_state(|st| {
            st.membership_state
                .effective()
                .membership()
                .nodes()
                .map(|(i, n)| (*i, n.clone()))
                .collect::<std::collections::BTreeMap<_, _>>()
        })
        .await
        .map_err(|e| fail("starting raft")(e.to_string()))?;
    for raft in &rafts[1..] {
        match raft.initialize(members.clone()).await {
            Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
            Err(e) => return Err(fail("initializing a raft group")(e.to_string())),
        }
    }
    Ok(())
}

/// [`lone_cluster`] for group 0.
async fn lone_group(args: &ServeArgs, raft: &KvRaft) -> Result<(), CliError> {
    let id = args.id;
    let stopped = |e: vellum_raft_store::v010::openraft::errors::Fatal<TypeConfig>| {
        fail("starting raft")(e.to_string())
    };
    if !raft.is_initialized().await.map_err(stopped)? {
        let me = args.me().map_err(CliError::Usage)?;
        tracing::info!(
            "no --initial-cluster or --join: starting a single-node cluster with this node \
             (id {id}, api {}, raft {}) as its only member; add members with `vellum cluster \
             add`",
            me.api_addr,
            me.raft_addr
        );
        let members = std::collections::BTreeMap::from([(id, me)]);
        return match raft.initialize(members).await {
            Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(fail("initializing the single-node cluster")(e.to_string())),
        };
    }
    let members: Vec<u64> = raft
        .with_raft_state(|st| {
            let m = st.membership_state.effective().membership();
            m.voter_ids().chain(m.learner_ids()).collect()
        })
        .await
        .map_err(stopped)?;
    if !members.contains(&id) {
        return Err(CliError::NotThisMember(format!(
            "the volume {} holds the raft state of a cluster whose members {members:?} do not \
             include node {id}: it belongs to another cluster (or node {id} was removed from \
             it); start a new member on a new volume",
            args.volume.display()
        )));
    }
    tracing::info!(
        ?members,
        "no --initial-cluster or --join: restarting as node {id} of the cluster this volume \
         belongs to"
    );
    Ok(())
}

/// Refuses, in one line, what a node of several Raft groups does not do yet: the archives
/// hold one group's snapshot, so they would save or restore a part of the keys.
fn one_group_only(args: &ServeArgs) -> Result<(), CliError> {
    if args.groups == 1 {
        return Ok(());
    }
    let refused = [
        (args.snapshot_archive.is_some(), "--snapshot-archive"),
        (args.auto_restore, "--auto-restore"),
    ];
    match refused.iter().find(|(given, _)| *given) {
        Some((_, flag)) => Err(CliError::Usage(format!(
            "{flag} is not built yet for a node of several Raft groups (--groups {}): a \
             snapshot archive holds one group",
            args.groups
        ))),
        None => Ok(()),
    }
}

/// The tokens the client API requires (`--auth-tokens`), loaded and reloaded on SIGHUP.
fn client_auth(args: &ServeArgs) -> Result<Option<tokens::Auth>, CliError> {
    let Some(path) = &args.auth_tokens else {
        // SIGHUP must never end the node (its default action would): say there is nothing
        // to reload.
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut hup = signal(SignalKind::hangup())
                .map_err(|e| fail("installing the SIGHUP handler")(e.to_string()))?;
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    tracing::info!("SIGHUP: nothing to reload (no --auth-tokens)");
                }
            });
        }
        return Ok(None);
    };
    let auth = tokens::Auth::load(path).map_err(|e| CliError::Usage(e.to_string()))?;
    tracing::info!(
        "client API requires bearer tokens ({} tokens from {})",
        auth.count(),
        path.display()
    );
    auth.clone()
        .spawn_reload_on_sighup()
        .map_err(|e| fail("installing the SIGHUP handler")(e.to_string()))?;
    Ok(Some(auth))
}

/// Adds this node as a learner through `api`, then as a voter; retries until both worked.
/// Presents `token` (`--join-token`, an admin token) on every request when given.
///
/// Redirects are followed by hand, so that `target` becomes the leader: the voter set the
/// node adds itself to is the leader's (a follower's may be stale, and writing a stale set
/// back would undo a removal that committed meanwhile).
async fn join_cluster(
    api_client: &ApiClient,
    api: &str,
    id: u64,
    me: &vellum_raft_store::KvNode,
    token: Option<&HeaderValue>,
) {
    let client = &api_client.client;
    let base = api_client.base(api);
    let learner =
        serde_json::json!({ "id": id, "raft_addr": me.raft_addr, "api_addr": me.api_addr });
    let mut target = base.clone();
    let mut last = String::new();
    for attempt in 0..120 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if attempt % 20 == 19 {
            tracing::warn!(id, attempt, %target, why = %last, "still joining the cluster");
        }
        let resp = match with_token(client.post(format!("{target}/v1/cluster/learners")), token)
            .json(&learner)
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) => {
                last = e.to_string();
                target.clone_from(&base);
                continue;
            }
        };
        if resp.status() == reqwest::StatusCode::TEMPORARY_REDIRECT {
            if let Some(loc) = resp.headers().get("location").and_then(|v| v.to_str().ok()) {
                target = loc.trim_end_matches('/').to_string();
            }
            last = "redirected to the leader".into();
            continue;
        }
        if !resp.status().is_success() {
            last = format!("adding a learner: HTTP {}{}", resp.status(), token_hint(resp.status()));
            continue;
        }
        let Ok(status) =
            with_token(client.get(format!("{target}/v1/cluster/status")), token).send().await
        else {
            continue;
        };
        let Ok(status) = status.json::<http::ClusterStatus>().await else { continue };
        let mut members = status.voters.clone();
        if !members.contains(&id) {
            members.push(id);
        }
        let body = serde_json::json!({ "members": members });
        let promote = with_token(client.put(format!("{target}/v1/cluster/members")), token);
        match promote.json(&body).send().await {
            Ok(r) if r.status().is_success() => {
                tracing::info!(id, "joined the cluster as a voter");
                return;
            }
            Ok(r) => {
                last =
                    format!("changing the voters: HTTP {}{}", r.status(), token_hint(r.status()));
            }
            Err(e) => last = e.to_string(),
        }
    }
    tracing::error!(id, api, why = %last, "could not join the cluster");
}

/// What a 401 or 403 from the cluster means for a joining node.
fn token_hint(status: reqwest::StatusCode) -> &'static str {
    match status {
        reqwest::StatusCode::UNAUTHORIZED => " (the cluster requires a token: give --join-token)",
        reqwest::StatusCode::FORBIDDEN => " (--join-token must be an admin token)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    use vellum_raft_store::KvBatching;
    use vellum_raft_store::batcher::{Submit, SubmitResult, Written};
    use vellum_raft_store::log::{LogCore, LogEntry, LogIo};
    use vellum_raft_store::v010::KvBatcher;
    use vellum_raft_store::v010::openraft::entry::RaftEntry;
    use vellum_raft_store::v010::openraft::impls::leader_id_adv::LeaderId;
    use vellum_raft_store::v010::{Entry, LogId, Proposals010};
    use vellum_raft_store::{KvOp, KvRequest, KvResponse};

    use super::*;

    /// A fresh volume of `bytes` in process memory (`media::Location::Memory`).
    pub(crate) fn memory_volume(bytes: u64) -> vellum_engine::Volume {
        let format = vellum_engine::FormatOptions {
            capacity_bytes: Some(bytes),
            ..vellum_engine::FormatOptions::default()
        };
        let (volume, _) = vellum_engine::media::open_or_create_volume(
            &vellum_engine::media::Location::Memory,
            &format,
            vellum_engine::media::CarrierOptions::BUFFERED,
            vellum_engine::VolumeOptions::default(),
        )
        .unwrap();
        volume
    }

    /// A follower's log: every entry the leader's batcher proposes is appended to it, as
    /// replication would; the appends it refused are kept.
    struct Follower {
        core: LogCore,
        next: Arc<AtomicU64>,
        refused: Arc<Mutex<Vec<String>>>,
    }

    impl Submit<Proposals010<TypeConfig>> for Follower {
        async fn submit(&self, data: KvRequest) -> SubmitResult<Proposals010<TypeConfig>> {
            let index = self.next.fetch_add(1, Ordering::SeqCst);
            let applied = data.ops.len();
            let entry =
                Entry::new_normal(LogId::new(LeaderId { term: 1, node_id: 1 }, index), data);
            let payload = vellum_raft_store::codec::encode(&entry).unwrap();
            let append = LogEntry { index, term: 1, payload: payload.into() };
            if let Err(e) =
                vellum_raft_store::log::wait(|done| self.core.append(vec![append], done))
            {
                self.next.fetch_sub(1, Ordering::SeqCst);
                self.refused.lock().unwrap().push(e.to_string());
            }
            // Time for more writes to queue behind this entry, so later batches fill up.
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(Written { log_index: index, response: KvResponse { applied } })
        }
    }

    #[test]
    fn zero_fill_logs_tenths_at_most_once_a_second_and_never_goes_quiet() {
        let mut log = FillLog::new();
        let t0 = log.started;
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let total = 1000;
        // A fast fill: 10 % after 0.5 s is too soon after the start line.
        assert_eq!(log.step(100, total, at(500)), None);
        assert_eq!(log.step(200, total, at(1100)), Some(20));
        assert_eq!(log.step(250, total, at(2500)), None, "still in the same tenth");
        assert_eq!(log.step(300, total, at(2600)), Some(30));
        // A stalled fill still says where it is.
        assert_eq!(log.step(301, total, at(7700)), Some(30));
        // The end is the done line's.
        assert_eq!(log.step(total, total, at(20_000)), None);
        assert_eq!(log.step(0, 0, at(20_000)), None);
    }

    /// A leader on large segments proposes through its batcher; a follower's segments are the
    /// smallest that hold the largest single write (what `limits` lets a node start with).
    /// Every entry the batcher makes must fit the follower's log: its append refusing one
    /// (`EntryTooLarge`) would stop openraft on that follower.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_batch_outgrows_a_member_with_smaller_segments() {
        let limits = http::Limits { max_key_bytes: 1 << 10, max_value_bytes: 1 << 20 };
        let segment = (largest_entry(&limits) + 4096 + 48).next_multiple_of(4096) as u64;
        let volume = memory_volume(64 << 20);
        let core = LogCore::open(
            volume,
            LogConfig {
                segment_bytes: segment,
                background_spares: false,
                io: LogIo::Inline,
                ..LogConfig::default()
            },
        )
        .unwrap();
        assert!(check_limits(&limits, core.max_entry_bytes()).is_ok(), "the follower starts");
        let leader_segment = 64 << 20; // the leader's own log holds far larger entries
        assert!(check_limits(&limits, leader_segment - 8192).is_ok());
        let refused = Arc::new(Mutex::new(Vec::new()));
        let follower =
            Follower { core, next: Arc::new(AtomicU64::new(1)), refused: Arc::clone(&refused) };
        let batcher = KvBatcher::start_on(follower, KvBatching, batch_limits(&limits));
        let writes: Vec<_> = (0..12)
            .map(|i| {
                let b = batcher.clone();
                let op = KvOp::Put { key: format!("k{i}"), value: vec![7; 600 << 10] };
                tokio::spawn(async move { b.propose(op).await.is_ok() })
            })
            .collect();
        for w in writes {
            assert!(w.await.unwrap());
        }
        let refused = refused.lock().unwrap();
        assert!(
            refused.is_empty(),
            "the follower refused {} entries: {:?}",
            refused.len(),
            refused
        );
    }
}
