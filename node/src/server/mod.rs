//! `vellum serve`: one node of the KV cluster.
//!
//! Start-up: open (or format) the volume with production knobs, open the log and the state
//! machine on it, start Raft, serve the Raft RPC and the client API, then bootstrap (every
//! node of `--initial-cluster` calls `initialize` with the same members: safe, the first wins
//! and the others are told it is done) or join (`--join`: learner first, then voter).
//! SIGINT / SIGTERM stop it cleanly: Raft shuts down, then the volume is closed clean.

mod batcher;
mod codec;
pub mod config;
pub mod http;
pub(crate) mod metrics;
mod network;
mod raft_api;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use openraft::error::{InitializeError, RaftError};
use openraft::{Config, Raft, SnapshotPolicy};
use tokio::net::TcpListener;
use vellum_raft_store::{LogConfig, open_store, open_volume};

use crate::cli::CliError;
pub use config::ServeArgs;

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

fn raft_config(args: &ServeArgs) -> Result<Arc<Config>, CliError> {
    let hb = args.heartbeat_ms.max(10);
    let config = Config {
        cluster_name: "vellum".into(),
        heartbeat_interval: hb,
        election_timeout_min: hb * 4,
        election_timeout_max: hb * 8,
        install_snapshot_timeout: 10_000,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(args.snapshot_entries.max(10)),
        max_in_snapshot_log_to_keep: args.snapshot_keep,
        snapshot_max_chunk_size: 1 << 20,
        ..Config::default()
    };
    Ok(Arc::new(config.validate().map_err(|e| fail("raft configuration")(e.to_string()))?))
}

/// Runs the node until SIGINT / SIGTERM.
pub async fn serve(args: ServeArgs) -> Result<(), CliError> {
    let prometheus = metrics::install().map_err(|e| fail("metrics")(e.to_string()))?;
    metrics::spawn_upkeep(prometheus.clone());
    let (path, size) = (args.volume.clone(), args.volume_size);
    let volume = tokio::task::spawn_blocking(move || {
        if path.as_os_str() == "memory:" {
            // A volume in process memory: durability is meaningless there (it is gone at
            // exit); for tests and as the benchmarks' upper bound.
            tracing::warn!(
                bytes = size,
                "volume memory: nothing this node stores survives its exit"
            );
            let carrier = vellum_engine::carrier::MemoryCarrier::new(size);
            return vellum_engine::Volume::format(
                Box::new(carrier),
                &vellum_engine::FormatOptions::default(),
                vellum_engine::VolumeOptions::default(),
            )
            .map_err(vellum_raft_store::Error::from);
        }
        open_volume(&path, size)
    })
    .await
    .map_err(|e| fail("opening the volume")(e.to_string()))?
    .map_err(|e| fail(&format!("opening the volume {}", args.volume.display()))(e.to_string()))?;
    let log_config = LogConfig { segment_bytes: args.segment_bytes(), ..LogConfig::default() };
    let (log, sm) = open_store(&volume, log_config)
        .map_err(|e| fail("opening the raft store")(e.to_string()))?;
    let startup_commit = log.committed_index().unwrap_or(0);
    let kv = sm.reader();
    let raft = Raft::new(args.id, raft_config(&args)?, network::Network::default(), log, sm)
        .await
        .map_err(|e| fail("starting raft")(e.to_string()))?;
    let ready = Arc::new(AtomicBool::new(false));
    metrics::spawn_raft_watch(raft.clone(), startup_commit, Arc::clone(&ready));

    let raft_listener = TcpListener::bind(args.raft_addr)
        .await
        .map_err(|e| fail(&format!("binding {}", args.raft_addr))(e.to_string()))?;
    let api_listener = TcpListener::bind(args.api_addr)
        .await
        .map_err(|e| fail(&format!("binding {}", args.api_addr))(e.to_string()))?;
    let state = http::AppState {
        id: args.id,
        raft: raft.clone(),
        kv,
        proposer: batcher::Proposer::start(raft.clone(), args.max_batch),
        limits: http::Limits {
            max_key_bytes: args.max_key_bytes as usize,
            max_value_bytes: args.max_value_bytes as usize,
        },
        ready,
        prometheus,
        http: reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| fail("http client")(e.to_string()))?,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let servers = {
        let mut a = stop_rx.clone();
        let mut b = stop_rx.clone();
        let raft_srv = axum::serve(raft_listener, raft_api::router(raft.clone()))
            .with_graceful_shutdown(async move {
                let _ = a.wait_for(|s| *s).await;
            });
        let api_srv = axum::serve(api_listener, http::router(state.clone()))
            .with_graceful_shutdown(async move {
                let _ = b.wait_for(|s| *s).await;
            });
        tokio::spawn(async move {
            let _ = tokio::join!(raft_srv, api_srv);
        })
    };
    tracing::info!(id = args.id, api = %args.api_addr, raft = %args.raft_addr, "node serving");

    if let Some(spec) = &args.initial_cluster {
        let members = config::parse_initial_cluster(spec).map_err(fail("--initial-cluster"))?;
        if !members.contains_key(&args.id) {
            return Err(CliError::Usage(format!(
                "--initial-cluster does not contain this node's id {}",
                args.id
            )));
        }
        match raft.initialize(members).await {
            Ok(()) => tracing::info!("cluster initialized"),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
                tracing::info!("cluster already initialized");
            }
            Err(e) => return Err(fail("initializing the cluster")(e.to_string())),
        }
    }
    if let Some(join) = args.join.clone() {
        let me = args.me();
        let id = args.id;
        tokio::spawn(async move { join_cluster(&join, id, &me).await });
    }

    shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = raft.shutdown().await;
    let _ = stop_tx.send(true);
    let _ = servers.await;
    drop(state);
    drop(raft);
    // Raft's tasks own the log and state machine and are gone now; closing commits the
    // clean state and releases the carrier's lock.
    tokio::task::spawn_blocking(move || volume.close())
        .await
        .map_err(|e| fail("closing the volume")(e.to_string()))?
        .map_err(|e| fail("closing the volume")(e.to_string()))?;
    Ok(())
}

/// Adds this node as a learner through `api`, then as a voter; retries until both worked.
async fn join_cluster(api: &str, id: u64, me: &vellum_raft_store::KvNode) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap_or_default();
    let base = if api.starts_with("http") { api.to_string() } else { format!("http://{api}") };
    let learner =
        serde_json::json!({ "id": id, "raft_addr": me.raft_addr, "api_addr": me.api_addr });
    let mut target = base.clone();
    for attempt in 0..120 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let Ok(resp) =
            client.post(format!("{target}/v1/cluster/learners")).json(&learner).send().await
        else {
            continue;
        };
        if resp.status() == reqwest::StatusCode::TEMPORARY_REDIRECT {
            if let Some(loc) = resp.headers().get("location").and_then(|v| v.to_str().ok()) {
                target = loc.trim_end_matches('/').to_string();
            }
            continue;
        }
        if !resp.status().is_success() {
            continue;
        }
        let Ok(status) = client.get(format!("{target}/v1/cluster/status")).send().await else {
            continue;
        };
        let Ok(status) = status.json::<http::ClusterStatus>().await else { continue };
        let mut members = status.voters.clone();
        if !members.contains(&id) {
            members.push(id);
        }
        let body = serde_json::json!({ "members": members });
        if let Ok(r) = client.put(format!("{target}/v1/cluster/members")).json(&body).send().await
            && r.status().is_success()
        {
            tracing::info!(id, "joined the cluster as a voter");
            return;
        }
    }
    tracing::error!(id, api, "could not join the cluster");
}
