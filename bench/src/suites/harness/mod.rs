//! `harness`: three openraft nodes in one process, the network a function call, the
//! same client workload on openraft's own in-memory store (openraft-memstore, the baseline)
//! and on Vellum's store: file volumes, `memory:` volumes, and file volumes with the
//! proposal batcher in front of `client_write` (one and two entries in flight). Two more
//! file-volume rows at 1 and 64 clients compare who performs the log's writes
//! (`LogConfig::io`): the default IO thread, `spawn_blocking`, or the caller inline (which
//! blocks a tokio worker for each write).
//!
//! What it shows: with the network out of the way, how Vellum's durable log compares with a
//! store that does no IO at all, at 1 to 256 concurrent clients, and how many durable writes
//! the leader's volume makes per client write (openraft 0.9 appends one entry per
//! `client_write`, so without a batcher that is about one).
//!
//! The same workload runs on openraft 0.10 (`=0.10.0-alpha.37`, Vellum's `v010` adapter,
//! `net010.rs`): file and `memory:` volumes, plain `client_write` (0.10's core batches queued
//! writes into one submission, and the log combines the appends in flight), and file volumes
//! with `broadcast_submitted_on_append` (followers get entries the leader is still writing),
//! alone and with the proposal batcher (two entries in flight), each row compared with its
//! 0.9 counterpart. The node runs the last configuration.
//!
//! openraft-memstore 0.9.25 implements the v1 `RaftStorage`, which openraft hides when
//! `storage-v2` is on, and Vellum's store needs `storage-v2`: the two cannot link into one
//! binary. The baseline is `bench/harness-memstore`, a crate outside the workspace that
//! compiles the same workload and network sources (`workload.rs`, `net09.rs`), built and run
//! as a child process by this suite.

pub mod net010;
pub mod net09;
pub mod workload;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use vellum_engine::carrier::{CarrierOptions, MemoryCarrier};
use vellum_engine::{FormatOptions, Volume, VolumeOptions};
use vellum_raft_store::log::LogIo;
use vellum_raft_store::types::KvNode;
use vellum_raft_store::v09::{KvBatcher, TypeConfig, open_store};
use vellum_raft_store::v010;
use vellum_raft_store::{BatchLimits, KvBatching, KvOp, KvRequest, LogConfig};
use workload::{Load, Outcome, drive};

use super::{e, fresh_volume};
use crate::stats::{Measurement, Unit};
use crate::{Options, SuiteResult};

/// Client counts, one case each.
pub const CLIENTS: [usize; 4] = [1, 16, 64, 256];
/// Bytes per written value.
pub const VALUE_BYTES: usize = 256;

pub const MEMSTORE: &str = "openraft-memstore (no IO)";
pub const FILE: &str = "vellum, file volumes";
pub const MEMORY: &str = "vellum, memory: volumes";
pub const BATCHED: &str = "vellum, file volumes + batcher";
pub const PIPELINED: &str = "vellum, file volumes + batcher, 2 entries in flight";
pub const SPAWN_BLOCKING: &str = "vellum, file volumes, log IO by spawn_blocking";
pub const INLINE: &str = "vellum, file volumes, log IO inline (blocks a worker)";
pub const FILE_010: &str = "vellum on openraft 0.10, file volumes";
pub const MEMORY_010: &str = "vellum on openraft 0.10, memory: volumes";
pub const BROADCAST_010: &str =
    "vellum on openraft 0.10, file volumes, replicate submitted entries";
pub const BATCHED_010: &str = "vellum on openraft 0.10, file volumes, replicate submitted entries + batcher, 2 entries in flight";

/// Per-node volume sizes and the log segment size at full scale: room for every run's log
/// (no snapshots, no purges), where one entry per durable write takes a 4 KiB block of log,
/// 256 B value or not. Memory volumes are zeroed lazily; file volumes are zero-filled, so
/// they stay smaller, and shrink with the runs' time at small scale (a quarter at least):
/// the smoke test's runs write a fifth of a full run's log, and zero-filling full-size
/// volumes for them wrote 12 GiB.
const FILE_VOLUME_BYTES: u64 = 256 << 20;
const MEMORY_VOLUME_BYTES: u64 = 1 << 30;
const SEGMENT_BYTES: u64 = 64 << 20;

/// A file volume's bytes and its log's segment bytes at `opts`' scale.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    volume: u64,
    segment: u64,
}

impl Sizes {
    fn at(opts: &Options) -> Sizes {
        Sizes {
            volume: opts.bytes(FILE_VOLUME_BYTES, FILE_VOLUME_BYTES / 4),
            segment: opts.bytes(SEGMENT_BYTES, SEGMENT_BYTES / 4),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    File,
    Memory,
    FileBatched,
    FilePipelined,
    FileSpawnBlocking,
    FileInline,
    /// The openraft 0.10 adapter (`vellum_raft_store::v010`).
    File010,
    Memory010,
    /// The same with `Config::broadcast_submitted_on_append`: followers get entries the
    /// leader has submitted but not yet written.
    File010Broadcast,
    /// The same with the proposal batcher in front (two entries in flight).
    File010Batched,
}

impl Store {
    const ALL: [Store; 10] = [
        Store::File,
        Store::Memory,
        Store::FileBatched,
        Store::FilePipelined,
        Store::FileSpawnBlocking,
        Store::FileInline,
        Store::File010,
        Store::Memory010,
        Store::File010Broadcast,
        Store::File010Batched,
    ];

    fn name(self) -> &'static str {
        match self {
            Store::File => FILE,
            Store::Memory => MEMORY,
            Store::FileBatched => BATCHED,
            Store::FilePipelined => PIPELINED,
            Store::FileSpawnBlocking => SPAWN_BLOCKING,
            Store::FileInline => INLINE,
            Store::File010 => FILE_010,
            Store::Memory010 => MEMORY_010,
            Store::File010Broadcast => BROADCAST_010,
            Store::File010Batched => BATCHED_010,
        }
    }

    fn io(self) -> LogIo {
        match self {
            Store::FileSpawnBlocking => LogIo::SpawnBlocking,
            Store::FileInline => LogIo::Inline,
            _ => LogIo::Thread,
        }
    }

    fn v010(self) -> bool {
        matches!(
            self,
            Store::File010 | Store::Memory010 | Store::File010Broadcast | Store::File010Batched
        )
    }

    fn memory(self) -> bool {
        matches!(self, Store::Memory | Store::Memory010)
    }

    /// What its rows are compared with: the 0.10 rows with their 0.9 counterpart, the
    /// others with openraft-memstore.
    fn baseline(self) -> &'static str {
        match self {
            Store::File010 | Store::File010Broadcast => FILE,
            Store::File010Batched => BATCHED,
            Store::Memory010 => MEMORY,
            _ => MEMSTORE,
        }
    }

    /// Entries in flight through the batcher; `None`: plain `client_write`.
    fn batcher(self) -> Option<usize> {
        match self {
            Store::FileBatched => Some(1),
            Store::FilePipelined | Store::File010Batched => Some(2),
            _ => None,
        }
    }

    /// The client counts it runs (the IO-mode rows only the two that decide).
    fn clients(self) -> &'static [usize] {
        match self {
            Store::FileSpawnBlocking | Store::FileInline => &[1, 64],
            _ => &CLIENTS,
        }
    }
}

/// One client count's run on one store.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub clients: usize,
    pub outcome: Outcome,
    /// Log entries the leader appended per client write.
    pub entries_per_write: f64,
    /// Write-through writes + barriers on the leader's volume per client write (Vellum only).
    pub durable_per_write: Option<f64>,
    /// The same on a follower's volume.
    pub follower_durable_per_write: Option<f64>,
}

fn case(clients: usize) -> String {
    format!("{clients} clients, {VALUE_BYTES} B writes")
}

const LATENCY_CASE: &str = "1 client, commit latency";

/// Timings of one run: measured and warm-up seconds per client count.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub secs: f64,
    pub warm_secs: f64,
}

fn load(clients: usize, secs: f64) -> Load {
    Load { clients, duration: Duration::from_secs_f64(secs), value_bytes: VALUE_BYTES }
}

/// Three volumes of the store's kind; files under `dir`.
fn volumes(store: Store, dir: &Path, file_bytes: u64) -> Result<Vec<Volume>, String> {
    (1..=3)
        .map(|id| {
            if store.memory() {
                Volume::format(
                    Box::new(MemoryCarrier::new(MEMORY_VOLUME_BYTES)),
                    &FormatOptions::default(),
                    VolumeOptions::default(),
                )
                .map_err(e("memory volume"))
            } else {
                fresh_volume(
                    &dir.join(format!("node-{id}.vlm")),
                    file_bytes,
                    CarrierOptions::PRODUCTION,
                )
            }
        })
        .collect()
}

/// The volumes a run counts the durable writes of.
struct Counted {
    leader: Volume,
    follower: Volume,
}

/// Runs every client count of `store` against a started cluster: `write` is one client
/// write, `last_index` the leader's last log index.
async fn measure<W, F>(
    store: Store,
    timing: Timing,
    counted: &Counted,
    last_index: impl Fn() -> u64,
    write: W,
) -> Result<Vec<Run>, String>
where
    W: Fn(usize, u64, Vec<u8>) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let write = std::sync::Arc::new(write);
    let mut runs = Vec::new();
    for &clients in store.clients() {
        let w = std::sync::Arc::clone(&write);
        drive(load(clients, timing.warm_secs), move |c, s, v| w(c, s, v)).await?;
        let (stats, first) = (counted.leader.carrier_stats(), last_index());
        let follower_stats = counted.follower.carrier_stats();
        let w = std::sync::Arc::clone(&write);
        let outcome = drive(load(clients, timing.secs), move |c, s, v| w(c, s, v)).await?;
        let ops = counted.leader.carrier_stats() - stats;
        let follower_ops = counted.follower.carrier_stats() - follower_stats;
        let entries = last_index() - first;
        let writes = outcome.writes.max(1) as f64;
        runs.push(Run {
            clients,
            entries_per_write: entries as f64 / writes,
            durable_per_write: Some((ops.durable_writes + ops.barriers) as f64 / writes),
            follower_durable_per_write: Some(
                (follower_ops.durable_writes + follower_ops.barriers) as f64 / writes,
            ),
            outcome,
        });
    }
    Ok(runs)
}

/// A client's put: a bounded key space per client, so the state machine stays small.
fn put(client: usize, seq: u64, value: Vec<u8>) -> KvOp {
    KvOp::Put { key: format!("c{client}-{}", seq % 256), value }
}

fn harness_node(id: u64) -> KvNode {
    KvNode { raft_addr: format!("node-{id}"), api_addr: String::new() }
}

/// The store's runs on openraft 0.9.
async fn run_09(
    store: Store,
    stores: Vec<(
        vellum_raft_store::v09::LogStore<TypeConfig>,
        vellum_raft_store::v09::KvStateMachine,
    )>,
    counted: &Counted,
    timing: Timing,
) -> Result<Vec<Run>, String> {
    let cluster = net09::Cluster::<TypeConfig>::start(stores, harness_node).await?;
    let batcher = store.batcher().map(|max_in_flight| {
        let limits = BatchLimits { max_in_flight, ..BatchLimits::default() };
        KvBatcher::start(cluster.leader().clone(), KvBatching, limits)
    });
    let raft = cluster.leader().clone();
    let write = move |client: usize, seq: u64, value: Vec<u8>| {
        let (raft, batcher) = (raft.clone(), batcher.clone());
        let op = put(client, seq, value);
        async move {
            match batcher {
                Some(b) => b.propose(op).await.map(drop).map_err(|e| e.to_string()),
                None => raft
                    .client_write(KvRequest { ops: vec![op] })
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
            }
        }
    };
    let runs = measure(store, timing, counted, || cluster.last_log_index(), write).await;
    cluster.shutdown().await;
    runs
}

/// The store's runs on openraft 0.10 (plain `client_write`: the 0.10 core batches the
/// writes that queue up into one submission by itself).
async fn run_010(
    store: Store,
    stores: Vec<(v010::LogStore<v010::TypeConfig>, v010::KvStateMachine)>,
    counted: &Counted,
    timing: Timing,
) -> Result<Vec<Run>, String> {
    let mut config = (*net010::config()?).clone();
    if matches!(store, Store::File010Broadcast | Store::File010Batched) {
        config.broadcast_submitted_on_append = Some(true);
    }
    let config = std::sync::Arc::new(config);
    let cluster = net010::Cluster::start(stores, config, harness_node).await?;
    let batcher = store.batcher().map(|max_in_flight| {
        let limits = BatchLimits { max_in_flight, ..BatchLimits::default() };
        v010::KvBatcher::start(cluster.leader().clone(), KvBatching, limits)
    });
    let raft = cluster.leader().clone();
    let write = move |client: usize, seq: u64, value: Vec<u8>| {
        let (raft, batcher) = (raft.clone(), batcher.clone());
        let op = put(client, seq, value);
        async move {
            match batcher {
                Some(b) => b.propose(op).await.map(drop).map_err(|e| e.to_string()),
                None => raft
                    .client_write(KvRequest { ops: vec![op] })
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
            }
        }
    };
    let runs = measure(store, timing, counted, || cluster.last_log_index(), write).await;
    cluster.shutdown().await;
    runs
}

/// Runs every client count on a fresh three-node cluster of `store`.
fn run_vellum(
    rt: &tokio::runtime::Runtime,
    store: Store,
    dir: &Path,
    timing: Timing,
    sizes: Sizes,
) -> Result<Vec<Run>, String> {
    let vols = volumes(store, dir, sizes.volume)?;
    let config = LogConfig { segment_bytes: sizes.segment, io: store.io(), ..LogConfig::default() };
    let counted = Counted { leader: vols[0].clone(), follower: vols[1].clone() };
    let runs = if store.v010() {
        let stores = vols
            .iter()
            .map(|v| v010::open_store(v, config.clone()).map_err(e("open store")))
            .collect::<Result<Vec<_>, _>>()?;
        rt.block_on(run_010(store, stores, &counted, timing))?
    } else {
        let stores = vols
            .iter()
            .map(|v| open_store(v, config.clone()).map_err(e("open store")))
            .collect::<Result<Vec<_>, _>>()?;
        rt.block_on(run_09(store, stores, &counted, timing))?
    };
    drop(counted);
    drop(vols);
    for id in 1..=3 {
        let _ = std::fs::remove_file(dir.join(format!("node-{id}.vlm")));
        let _ = std::fs::remove_file(dir.join(format!("node-{id}.vlm.lock")));
    }
    Ok(runs)
}

/// The baseline crate, outside the workspace.
fn memstore_manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("harness-memstore/Cargo.toml")
}

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target")
}

/// Builds the baseline binary (untimed; quick once built) and returns its path.
fn build_memstore() -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(memstore_manifest())
        .arg("--target-dir")
        .arg(target_dir())
        .status()
        .map_err(e("running cargo"))?;
    if !status.success() {
        return Err(format!("cargo build of {} failed", memstore_manifest().display()));
    }
    Ok(target_dir().join("release/vellum-harness-memstore"))
}

/// Runs every client count on openraft-memstore, in the child process.
fn run_memstore(bin: &Path, timing: Timing) -> Result<Vec<Run>, String> {
    let clients: Vec<String> = CLIENTS.iter().map(ToString::to_string).collect();
    let out = Command::new(bin)
        .arg(clients.join(","))
        .arg(timing.secs.to_string())
        .arg(timing.warm_secs.to_string())
        .arg(VALUE_BYTES.to_string())
        .output()
        .map_err(e("running harness-memstore"))?;
    if !out.status.success() {
        return Err(format!("harness-memstore: {}", String::from_utf8_lossy(&out.stderr)));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(e("harness-memstore output"))?;
            let num = |k: &str| v[k].as_f64().ok_or_else(|| format!("harness-memstore: no {k}"));
            let latencies_us = v["latencies_us"]
                .as_array()
                .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
                .unwrap_or_default();
            Ok(Run {
                clients: num("clients")? as usize,
                outcome: Outcome {
                    writes: num("writes")? as u64,
                    secs: num("secs")?,
                    latencies_us,
                },
                entries_per_write: num("entries_per_write")?,
                durable_per_write: None,
                follower_durable_per_write: None,
            })
        })
        .collect()
}

/// Adds one variant's runs of one repetition to the measurements.
fn record(ms: &mut [Measurement], variant: &str, runs: &[Run]) {
    for run in runs {
        let Some(m) = ms.iter_mut().find(|m| m.variant == variant && m.case == case(run.clients))
        else {
            continue;
        };
        m.add_rep(vec![run.outcome.writes_per_sec()]);
        // Extras are averaged over the repetitions.
        let reps = m.rep_medians.len() as f64;
        let mut mean = |key: &str, x: f64| {
            let old = m.extra(key).unwrap_or(0.0);
            m.set_extra(key, old + (x - old) / reps);
        };
        mean("entries per write", run.entries_per_write);
        if let Some(d) = run.durable_per_write {
            mean("leader durable writes per write", d);
        }
        if let Some(d) = run.follower_durable_per_write {
            mean("follower durable writes per write", d);
        }
        if run.clients == 1
            && let Some(l) = ms.iter_mut().find(|m| m.variant == variant && m.case == LATENCY_CASE)
        {
            l.add_rep(run.outcome.latencies_us.clone());
        }
    }
}

pub fn run(opts: &Options) -> Result<SuiteResult, String> {
    let mut r = SuiteResult::new("harness");
    let dir = opts.dir.join("harness");
    std::fs::create_dir_all(&dir).map_err(e("harness dir"))?;
    // One measured second per client count at full scale (0.2 s at least); a fifth of it
    // warms up first. Three repetitions at most: the whole suite stays near two minutes.
    let secs = opts.scale.max(0.2);
    let timing = Timing { secs, warm_secs: secs / 5.0 };
    let reps = opts.reps.min(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(e("tokio runtime"))?;
    let memstore = match build_memstore() {
        Ok(bin) => Some(bin),
        Err(why) => {
            r.skipped.push(format!("openraft-memstore baseline: {why}"));
            None
        }
    };
    let variants: Vec<&str> =
        std::iter::once(MEMSTORE).chain(Store::ALL.iter().map(|s| s.name())).collect();
    let mut ms = Vec::new();
    for c in CLIENTS {
        for (i, v) in variants.iter().enumerate() {
            if i > 0 && !Store::ALL[i - 1].clients().contains(&c) {
                continue;
            }
            let base = (i > 0).then(|| Store::ALL[i - 1].baseline());
            ms.push(Measurement::new("harness", &case(c), v, base, Unit::OpsPerSec));
        }
    }
    for (i, v) in variants.iter().enumerate() {
        let base = (i > 0).then(|| Store::ALL[i - 1].baseline());
        ms.push(Measurement::new("harness", LATENCY_CASE, v, base, Unit::Micros));
    }
    let stores = Store::ALL;
    let bar = opts.bar("harness", (reps * variants.len()) as u64);
    for rep in 0..reps {
        // The starting variant rotates, so slow drifts of the machine fall on all alike.
        for k in 0..variants.len() {
            let v = (rep + k) % variants.len();
            if v == 0 {
                if let Some(bin) = &memstore {
                    let runs = run_memstore(bin, timing)?;
                    record(&mut ms, MEMSTORE, &runs);
                }
            } else {
                let store = stores[v - 1];
                let runs = run_vellum(&rt, store, &dir, timing, Sizes::at(opts))?;
                record(&mut ms, store.name(), &runs);
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    ms.retain(|m| !m.samples.is_empty());
    r.measurements = ms;
    let batched = r.ratio(&case(64), BATCHED).filter(|_| memstore.is_some());
    r.target(
        "64 clients: vellum file volumes + batcher >= 0.5x openraft-memstore's writes/s",
        batched,
        |x| x >= 0.5,
        "",
    );
    // The 0.10 targets hold the adapter as the node runs it (replicating submitted
    // entries); the row without it is reported beside them.
    let durable_010 =
        r.find(&case(64), BROADCAST_010).and_then(|m| m.extra("leader durable writes per write"));
    r.target(
        "64 clients: openraft 0.10 adapter, leader durable writes per client write <= 0.2",
        durable_010,
        |x| x <= 0.2,
        "broadcast_submitted_on_append, as the node runs it",
    );
    r.target(
        "64 clients: openraft 0.10 adapter >= 5x the 0.9 adapter's writes/s (file volumes)",
        r.ratio(&case(64), BROADCAST_010),
        |x| x >= 5.0,
        "broadcast_submitted_on_append, as the node runs it",
    );
    r.target(
        "1 client: openraft 0.10 adapter commit latency <= 0.7x the 0.9 adapter's (file volumes)",
        r.ratio(LATENCY_CASE, BROADCAST_010),
        |x| x <= 0.7,
        "broadcast_submitted_on_append, as the node runs it",
    );
    r.notes.push(format!(
        "Three openraft nodes (0.9.25, or 0.10.0-alpha.37 where the row says so) in one process (tokio, 2 worker threads), RPCs as direct calls into the target's Raft; snapshots off; node 1 leads. Each case: C client tasks, each awaiting one {VALUE_BYTES} B put at a time for {secs:.1} s after {:.1} s of warm-up, on a fresh cluster per repetition; one sample per repetition (writes/s). openraft-memstore runs the same workload and network code in a child process (bench/harness-memstore: its v1 storage cannot link with storage-v2). Extras: log entries the leader appended per client write, and for Vellum the leader volume's write-through writes + barriers per client write. The batcher rows propose through vellum_raft_store::batcher (one or two entries in flight, at most 1024 ops / 1 MiB per entry). The log's writes are done by its IO thread except in the spawn_blocking and inline rows. The openraft 0.10 rows (=0.10.0-alpha.37, vellum_raft_store::v010, plain client_write: 0.10's core batches queued writes itself) are compared with the 0.9 rows of the same volumes; one of them sets Config::broadcast_submitted_on_append.",
        timing.warm_secs
    ));
    Ok(r)
}
