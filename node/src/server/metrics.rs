//! The node's metrics: the Prometheus exporter (with explicit buckets, so histograms stay
//! histograms), its upkeep, the Raft gauges fed from openraft's metrics, HTTP timings. The
//! store crate names, describes and buckets the metrics it shares with the node
//! (`vellum_raft_proposals_total`, `vellum_commit_stage_duration_seconds`).
//!
//! The Raft core watch ([`spawn_raft_watch`], [`Health`]): openraft's core task can stop on
//! its own (a storage error, or a panic: openraft 0.10 is an alpha and asserts on some
//! inputs), while the process and its HTTP servers stay up. Invariant: from the moment the
//! watch sees the core stopped (its metrics say `running_state: Err`, or their channel
//! closes because the core task ended), [`Health::core_running`] is false for good: `/livez`
//! and `/readyz` answer 503, local reads are refused, the gauges say so
//! (`vellum_raft_core_running` 0, `vellum_raft_has_leader` 0), and `serve` shuts down and
//! exits with code 4 (`CliError::RaftStopped`) so that the supervisor restarts the node. A
//! stop during the node's own shutdown is expected and is not a failure.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use vellum_raft_store::metrics::{HISTOGRAMS, LATENCY_BUCKETS};
use vellum_raft_store::v010::TypeConfig;
use vellum_raft_store::v010::openraft::async_runtime::WatchReceiver;
use vellum_raft_store::v010::openraft::{RaftMetrics, ServerState};

use super::KvRaft;

pub const COMMIT_DURATION: &str = "vellum_raft_commit_duration_seconds";
pub const TERM: &str = "vellum_raft_term";
pub const IS_LEADER: &str = "vellum_raft_is_leader";
pub const HAS_LEADER: &str = "vellum_raft_has_leader";
pub const LAST_LOG_INDEX: &str = "vellum_raft_last_log_index";
pub const APPLIED_INDEX: &str = "vellum_raft_applied_index";
pub const REPLICATION_LAG: &str = "vellum_raft_replication_lag_entries";
pub const LEADER_CHANGES: &str = "vellum_raft_leader_changes_total";
pub const HTTP_DURATION: &str = "vellum_http_request_duration_seconds";
pub const BUILD_INFO: &str = "vellum_build_info";
pub const VOLUME_JOURNAL_LOSS: &str = "vellum_volume_journal_loss";
pub const CORE_RUNNING: &str = "vellum_raft_core_running";
pub const CORE_STOPPED: &str = "vellum_raft_core_stopped_total";
pub const CONN_OPEN: &str = "vellum_connections_open";
pub const CONN_HANDSHAKES: &str = "vellum_connection_handshakes_in_flight";
pub const CONN_ACCEPTED: &str = "vellum_connections_accepted_total";
pub const CONN_REJECTED: &str = "vellum_connections_rejected_total";
pub const CONN_CLOSED: &str = "vellum_connections_closed_total";
pub const ARCHIVE_UPLOADS: &str = "vellum_archive_uploads_total";
pub const ARCHIVE_BYTES: &str = "vellum_archive_bytes_total";
pub const ARCHIVE_FAILURES: &str = "vellum_archive_failures_total";
pub const ARCHIVE_AGE: &str = "vellum_archive_seconds_since_last";
pub const ARCHIVE_INDEX: &str = "vellum_archive_last_index";
pub const VOLUME_FREE_BYTES: &str = "vellum_volume_free_bytes";
pub const VOLUME_RESERVE_BYTES: &str = "vellum_volume_reserve_bytes";
pub const WRITES_REFUSED_NO_SPACE: &str = "vellum_writes_refused_no_space_total";
pub const DELETES_OF_MISSING_KEYS: &str = "vellum_deletes_not_written_total";

/// The Prometheus text content type Prometheus 2 and 3 both accept.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Installs the global recorder. Call once per process.
pub fn install() -> Result<PrometheusHandle, metrics_exporter_prometheus::BuildError> {
    let mut builder = PrometheusBuilder::new();
    let node_histograms: [(&str, &[f64]); 2] =
        [(COMMIT_DURATION, LATENCY_BUCKETS), (HTTP_DURATION, LATENCY_BUCKETS)];
    for (name, buckets) in HISTOGRAMS.iter().copied().chain(node_histograms) {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.to_string()), buckets)?;
    }
    let handle = builder.install_recorder()?;
    vellum_raft_store::metrics::describe();
    describe();
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    Ok(handle)
}

fn describe() {
    describe_histogram!(
        COMMIT_DURATION,
        Unit::Seconds,
        "A client write, from acceptance until it is committed and applied."
    );
    describe_gauge!(TERM, "The current Raft term.");
    describe_gauge!(IS_LEADER, "1 while this node is the leader, else 0.");
    describe_gauge!(
        HAS_LEADER,
        "1 while this node knows a leader, else 0 (etcd_server_has_leader)."
    );
    describe_gauge!(LAST_LOG_INDEX, "Index of the last entry in this node's log.");
    describe_gauge!(APPLIED_INDEX, "Index of the last entry applied to the state machine.");
    describe_gauge!(
        REPLICATION_LAG,
        "On the leader: entries a follower is behind the leader's log."
    );
    describe_counter!(LEADER_CHANGES, "Times this node saw the leader change (in any group).");
    describe_gauge!(
        super::groups::GROUPS_LED,
        "Raft groups this node leads (--groups; 0 or 1 with one group's node)."
    );
    describe_gauge!(
        super::groups::GROUP_APPLY_LAG,
        "Per Raft group (--groups > 1): entries of this node's log not applied yet."
    );
    describe_gauge!(
        super::groups::GROUP_LOG_BYTES,
        Unit::Bytes,
        "Per Raft group: bytes its live entries take in this node's log."
    );
    describe_gauge!(
        super::groups::GROUPS_VOTING,
        "Raft groups this node holds a voting replica of (--groups; see vellum cluster spread)."
    );
    describe_counter!(
        super::groups::REPLICA_MOVES,
        "Replica moves, additions and drops this node completed as the group's leader."
    );
    describe_histogram!(
        HTTP_DURATION,
        Unit::Seconds,
        "Client API requests, by route, method and status code."
    );
    describe_gauge!(BUILD_INFO, "Always 1; the version label names the build.");
    describe_counter!(
        ARCHIVE_UPLOADS,
        "Snapshot archives this node uploaded (--snapshot-archive)."
    );
    describe_counter!(ARCHIVE_BYTES, Unit::Bytes, "Snapshot bytes this node archived.");
    describe_counter!(
        ARCHIVE_FAILURES,
        "Archive attempts that failed (the store unreachable or refusing; retried next period)."
    );
    describe_gauge!(
        ARCHIVE_AGE,
        Unit::Seconds,
        "Seconds since the last archive this node wrote or found (since start when none)."
    );
    describe_gauge!(ARCHIVE_INDEX, "Log index of the newest archived snapshot this node knows.");
    describe_gauge!(
        VOLUME_FREE_BYTES,
        Unit::Bytes,
        "Bytes the volume's allocator can still hand out (the space guard's last look)."
    );
    describe_gauge!(
        VOLUME_RESERVE_BYTES,
        Unit::Bytes,
        "Free bytes the node keeps for its next snapshots (applied state plus three log \
         segments); below it, client puts are refused with 507."
    );
    describe_counter!(
        WRITES_REFUSED_NO_SPACE,
        "Client writes refused (507) because the free space of the volume (or of a peer's, as \
         its Raft answers said) was below the reserve."
    );
    describe_counter!(
        DELETES_OF_MISSING_KEYS,
        "Client deletes of a key that was not there, answered after a linearizable read \
         without a log write, because the volume (or a peer's) refused puts."
    );
    describe_gauge!(
        CORE_RUNNING,
        "1 while openraft's core task runs, 0 once it stopped (a storage error or a panic; \
         the node then answers 503 on /livez and /readyz and exits with code 4)."
    );
    describe_counter!(
        CORE_STOPPED,
        "Times the Raft core stopped while the node was not shutting down (at most 1: the \
         node exits)."
    );
    describe_gauge!(
        VOLUME_JOURNAL_LOSS,
        "1 while the volume's journal loss flag is set (the engine found its metadata journal \
         destroyed and opened it at the last checkpoint; vellum journal ack clears it), else \
         0. The raft store refuses such a volume: the member must be replaced."
    );
    describe_gauge!(
        CONN_OPEN,
        "Established connections, by port (api, raft, metrics): past their handshake and \
         first request."
    );
    describe_gauge!(
        CONN_HANDSHAKES,
        "Connections in their handshake phase (TLS handshake, then the first request's \
         headers), by port."
    );
    describe_counter!(CONN_ACCEPTED, "Connections that became established, by port.");
    describe_counter!(
        CONN_REJECTED,
        "Connections refused or dropped before they were established, by port and reason: \
         total_cap, source_cap, handshake_budget, handshake_timeout, handshake_failed."
    );
    describe_counter!(
        CONN_CLOSED,
        "Established connections the node closed, by port and reason: idle_timeout, \
         header_timeout."
    );
}

/// Runs the exporter's upkeep (without it, histograms grow without bound).
pub fn spawn_upkeep(handle: PrometheusHandle) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            handle.run_upkeep();
        }
    });
}

/// Sets the gauges of the volume's own state the node reports (the engine's metrics are
/// its cache counters, `Volume::publish_metrics`): the journal's loss flag.
pub fn publish_volume_state(volume: &vellum_engine::Volume) {
    let lost = volume.info().journal.is_some_and(|j| j.lost_from.is_some());
    metrics::gauge!(VOLUME_JOURNAL_LOSS).set(if lost { 1.0 } else { 0.0 });
}

/// Publishes the volume's cache counters and state every second (the engine counts; this
/// copies).
pub fn spawn_volume_metrics(volume: vellum_engine::Volume) {
    publish_volume_state(&volume);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            volume.publish_metrics();
            publish_volume_state(&volume);
        }
    });
}

/// Whether the Raft core runs (see the module's header): shared by the watch, the HTTP
/// handlers and `serve`.
#[derive(Debug)]
pub struct Health {
    /// Why the core stopped, once it did (`None` while it runs, and before it starts).
    stopped: tokio::sync::watch::Sender<Option<String>>,
    /// The node is shutting down: a core stop is its own doing.
    shutting_down: AtomicBool,
}

impl Health {
    pub fn new() -> Arc<Health> {
        Arc::new(Health {
            stopped: tokio::sync::watch::channel(None).0,
            shutting_down: AtomicBool::new(false),
        })
    }

    /// False for good once the Raft core stopped.
    pub fn core_running(&self) -> bool {
        self.stopped.borrow().is_none()
    }

    /// Tells of the core's stop: `Some(why)` once it stopped.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.stopped.subscribe()
    }

    /// The node shuts down: the core's stop that follows is not a failure.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    /// Records the core's stop, once: the gauges, the counter, the log line.
    pub fn core_stopped(&self, why: &str, ready: &AtomicBool) {
        ready.store(false, Ordering::Release);
        metrics::gauge!(CORE_RUNNING).set(0.0);
        metrics::gauge!(HAS_LEADER).set(0.0);
        metrics::gauge!(IS_LEADER).set(0.0);
        if self.stopped.borrow().is_some() {
            return;
        }
        // Said before it is logged: whoever reads the log line finds the node not live.
        self.stopped.send_replace(Some(why.to_string()));
        if self.shutting_down.load(Ordering::Acquire) {
            tracing::info!(why, "the Raft core stopped (shutting down)");
        } else {
            metrics::counter!(CORE_STOPPED).increment(1);
            tracing::error!(
                why,
                "the Raft core stopped: this node no longer serves; it shuts down and exits \
                 with code 4 (its supervisor restarts it)"
            );
        }
    }
}

/// Feeds the Raft gauges from openraft's metrics, and raises `ready` once there is a leader
/// and the state machine has applied the commit index known at start-up. On the leader, also
/// once a quorum acknowledged it: openraft 0.10 refuses writes until its leader lease holds.
/// Watches the core: once it stopped, `health` says so (and `ready` drops for good). A group
/// this node does not vote in is ready at once, unless the node is to `bootstrap` it (it
/// initializes the group, which had no raft state, in this start): until its membership
/// shows, such a group waits for a leader like a voter's, so that the node is never ready
/// between two groups' bootstraps.
pub fn spawn_raft_watch(
    raft: KvRaft,
    group: u64,
    startup_commit: u64,
    bootstrap: bool,
    ready: Arc<AtomicBool>,
    health: Arc<Health>,
    retired: Arc<AtomicBool>,
) {
    metrics::gauge!(CORE_RUNNING).set(1.0);
    metrics::counter!(CORE_STOPPED).increment(0);
    tokio::spawn(async move {
        let mut rx = raft.metrics();
        drop(raft); // the watch must not keep the Raft handle alive
        let mut leader = None;
        loop {
            let m = rx.borrow_and_update().clone();
            if let Err(fatal) = &m.running_state {
                // A released replica's instance is stopped on purpose (`release.rs`).
                if !retired.load(Ordering::Acquire) {
                    health.core_stopped(&fatal.to_string(), &ready);
                }
                return;
            }
            let last = m.last_log_index.unwrap_or(0);
            let applied = m.last_applied.map_or(0, |l| l.index);
            // The node's gauges are group 0's (the membership's); the others' are the
            // bounded per-group gauges of `groups.rs`.
            if group == 0 {
                metrics::gauge!(TERM).set(m.current_term as f64);
                let leading = if m.state == ServerState::Leader { 1.0 } else { 0.0 };
                metrics::gauge!(IS_LEADER).set(leading);
                let has = if m.current_leader.is_some() { 1.0 } else { 0.0 };
                metrics::gauge!(HAS_LEADER).set(has);
                metrics::gauge!(LAST_LOG_INDEX).set(last as f64);
                metrics::gauge!(APPLIED_INDEX).set(applied as f64);
                if let Some(repl) = &m.replication {
                    for (peer, matched) in repl {
                        let lag = last.saturating_sub(matched.map_or(0, |l| l.index));
                        metrics::gauge!(REPLICATION_LAG, "peer" => peer.to_string())
                            .set(lag as f64);
                    }
                }
            }
            if m.current_leader != leader {
                if m.current_leader.is_some() {
                    metrics::counter!(LEADER_CHANGES).increment(1);
                }
                leader = m.current_leader;
            }
            ready.store(group_ready(&m, group, startup_commit, bootstrap), Ordering::Release);
            if rx.changed().await.is_err() {
                // The core task ended without saying why (a panic drops its sender).
                if !retired.load(Ordering::Acquire) {
                    health.core_stopped("the Raft core task ended (panicked)", &ready);
                }
                return;
            }
        }
    });
}

/// Whether group `group`, as `m` shows it, lets the node say it is ready
/// ([`spawn_raft_watch`]): it has a leader, has applied `startup_commit`, and (led here) a
/// quorum acknowledged its leader; or this node does not vote in it (its replica moved
/// away, or is not here yet: the node routes its keys elsewhere), unless it is group 0 or
/// a group this node is to `bootstrap` whose membership does not show yet.
fn group_ready(
    m: &RaftMetrics<TypeConfig>,
    group: u64,
    startup_commit: u64,
    bootstrap: bool,
) -> bool {
    let uninitialized = m.membership_config.membership().voter_ids().next().is_none();
    let voter =
        group == 0 || crate::server::directory::votes_in(m, m.id) || (bootstrap && uninitialized);
    let applied = m.last_applied.map_or(0, |l| l.index);
    let leading = m.state == ServerState::Leader;
    !voter
        || (m.current_leader.is_some()
            && applied >= startup_commit
            && (!leading || m.last_quorum_acked.is_some()))
}

/// Records every API request's duration by route, method and status.
pub async fn track(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    // A fixed set: any token is a valid HTTP method, and a label per distinct one would
    // let anyone grow the metrics without bound (before authentication).
    let method: &'static str = match req.method().as_str() {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "PUT" => "PUT",
        "POST" => "POST",
        "DELETE" => "DELETE",
        _ => "OTHER",
    };
    let started = Instant::now();
    let resp = next.run(req).await;
    let code = resp.status().as_u16().to_string();
    metrics::histogram!(HTTP_DURATION, "route" => route, "method" => method, "code" => code)
        .record(started.elapsed().as_secs_f64());
    resp
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use std::collections::{BTreeMap, BTreeSet};

    use vellum_raft_store::v010::openraft::impls::leader_id_adv::LeaderId;
    use vellum_raft_store::v010::openraft::{Membership, StoredMembership};
    use vellum_raft_store::v010::{KvNode, LogId};

    use super::*;

    /// Node 1's metrics of a group whose voters are `voters` (none: no membership yet),
    /// without a leader, having applied up to 5.
    fn metrics(voters: &[u64]) -> RaftMetrics<TypeConfig> {
        let mut m = RaftMetrics::<TypeConfig>::new_initial(1);
        if !voters.is_empty() {
            let set: BTreeSet<u64> = voters.iter().copied().collect();
            let nodes: BTreeMap<u64, KvNode> =
                voters.iter().map(|id| (*id, KvNode::default())).collect();
            let membership = Membership::new(vec![set], nodes).unwrap();
            m.membership_config = Arc::new(StoredMembership::new(None, membership));
        }
        m.last_applied = Some(LogId::new(LeaderId { term: 1, node_id: 2 }, 5));
        m
    }

    #[test]
    fn a_group_waits_for_its_leader_where_this_node_votes_or_bootstraps_it() {
        // Not voting here (its replica is elsewhere): ready without a leader.
        assert!(group_ready(&metrics(&[2, 3, 4]), 1, 5, false));
        assert!(group_ready(&metrics(&[2, 3, 4]), 1, 5, true), "a membership shows: not ours");
        // No membership yet: ready unless this start bootstraps the group.
        assert!(group_ready(&metrics(&[]), 1, 5, false), "a joining node's group");
        assert!(!group_ready(&metrics(&[]), 1, 5, true), "bootstrapped, no leader yet");
        // Group 0 and a group this node votes in wait for a leader, then for the start's
        // commit to be applied.
        assert!(!group_ready(&metrics(&[2, 3, 4]), 0, 5, false));
        let mut m = metrics(&[1, 2, 3]);
        assert!(!group_ready(&m, 1, 5, false), "no leader");
        m.current_leader = Some(2);
        assert!(group_ready(&m, 1, 5, false));
        assert!(!group_ready(&m, 1, 6, false), "the start's commit is not applied yet");
        // Led here: once a quorum acknowledged the leader.
        m.current_leader = Some(1);
        m.state = ServerState::Leader;
        assert!(!group_ready(&m, 1, 5, false), "no quorum acknowledged the leader yet");
    }
}
