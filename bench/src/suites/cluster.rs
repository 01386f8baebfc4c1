//! `cluster`: 3-node clusters on loopback, real processes, 1, 16 and 64 concurrent clients
//! each waiting for its write before the next: commit latency (p50/p99/p999) and writes/s.
//!
//! - Vellum (`vellum serve` x 3) on file volumes and on `memory:` volumes, against etcd 3.4
//!   (3 members, data dirs in the same work dir, so on the same disk), writing 256 B and
//!   4 KiB values to each system's leader. Ratios are to etcd measured in the same run; the
//!   repetitions of the systems alternate (starting system rotating) so noise hits all.
//! - The same on an emulated slow disk: the `slow-disk` suite (`slow.rs`).
//! - One raw durable 4 KiB write as the floor.
//!
//! To run it: `cargo build --release -p vellum-node -p vellum-bench`, then
//! `target/release/vellum-bench cluster --dir DIR`, with, for the peer and the slow disk,
//! `apt-get install etcd-server fuse libfuse2` (stop the `etcd` service the package starts)
//! and `pip install fusepy`; as root, or with /dev/fuse usable by the user. What is missing
//! is listed in the suite's `skipped` notes and those rows are left out.

pub(super) mod etcd;
mod slow;
pub(super) mod slowdisk;

pub use slow::run as run_slow_disk;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::e;
use crate::stats::{Measurement, Unit};
use crate::sys::{open_direct, time_us, zero_file};
use crate::{Options, SuiteResult};

const VELLUM_FILE: &str = "vellum on file volumes";
const VELLUM_MEMORY: &str = "vellum on memory: volumes";
const ETCD: &str = "etcd 3.4.23 (same disk)";

/// The `vellum` binary beside this one (`cargo build --release -p vellum-node`).
pub(super) fn vellum_bin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let mut dir = exe.parent()?.to_path_buf();
    for _ in 0..2 {
        let bin = dir.join("vellum");
        if bin.exists() {
            return Some(bin);
        }
        dir = dir.parent()?.to_path_buf();
    }
    None
}

/// Which system a cluster runs, hence how it is written to and asked for its leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Vellum,
    Etcd,
}

/// Three member processes (ours: stopped with SIGTERM, then killed, on drop).
pub(super) struct Cluster {
    children: Vec<Child>,
    /// Each member's API base URL (member `i` is node `i + 1`).
    pub(super) apis: Vec<String>,
    kind: Kind,
    /// The client API's TLS as its clients speak it (HTTPS with a client certificate), or
    /// `None`: plain HTTP.
    api_tls: Option<rustls::ClientConfig>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &self.children {
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
        }
        for c in &mut self.children {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && !matches!(c.try_wait(), Ok(Some(_))) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Cluster {
    /// A client of this cluster's API: plain HTTP, or HTTPS with its `api_tls`.
    pub(super) fn client(&self) -> reqwest::blocking::Client {
        let builder = client_builder();
        match &self.api_tls {
            Some(tls) => builder.use_preconfigured_tls(tls.clone()),
            None => builder,
        }
        .build()
        .unwrap_or_else(|_| reqwest::blocking::Client::new())
    }

    /// An asynchronous client of this cluster's API (as [`Cluster::client`]), keeping up to
    /// `connections` idle connections per member.
    fn async_client(&self, connections: usize) -> Result<reqwest::Client, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let builder = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(connections);
        match &self.api_tls {
            Some(tls) => builder.use_preconfigured_tls(tls.clone()),
            None => builder,
        }
        .build()
        .map_err(|err| format!("an HTTP client: {err}"))
    }

    /// Starts one more `vellum serve` as node `id` with `--standby` and `extra`, on `volume`
    /// (wiped first), logging into `dir/n{id}.log`: it joins nobody until `vellum cluster
    /// add-node` adds it. Waits (up to 60 s) until its API answers `/livez`; returns its API
    /// and Raft addresses (`host:port`). It is stopped with the others; its API is `apis`'
    /// last.
    pub(super) fn start_standby(
        &mut self,
        bin: &Path,
        dir: &Path,
        id: u64,
        (volume, size): (&Path, &str),
        extra: &[String],
    ) -> Result<(String, String), String> {
        let (api, raft) = (format!("127.0.0.1:{}", port()), format!("127.0.0.1:{}", port()));
        let _ = std::fs::remove_file(volume);
        let log_path = dir.join(format!("n{id}.log"));
        let log = std::fs::File::create(&log_path).map_err(e("log"))?;
        let child = spawn_serve(
            Command::new(bin)
                .arg("serve")
                .args(["--id", &id.to_string(), "--api-addr", &api, "--raft-addr", &raft])
                .arg("--volume")
                .arg(volume)
                .args(["--volume-size", size, "--standby"])
                .args(extra),
            log,
        )?;
        self.children.push(child);
        let scheme = if self.api_tls.is_some() { "https" } else { "http" };
        self.apis.push(format!("{scheme}://{api}"));
        let http = self.client();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !http
            .get(format!("{scheme}://{api}/livez"))
            .send()
            .is_ok_and(|r| r.status().is_success())
        {
            let exited =
                self.children.last_mut().is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited || Instant::now() > deadline {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let last = log.lines().last().unwrap_or("no output");
                return Err(format!("standby node {id} did not come up: {last}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok((api, raft))
    }

    /// The index of the leader among `apis`, waiting up to 10 s for one to be elected.
    fn leader(&self) -> Result<usize, String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = match self.kind {
                Kind::Vellum => vellum_leader(self),
                Kind::Etcd => etcd::leader(self),
            };
            match found {
                Some(i) => return Ok(i),
                None if Instant::now() > deadline => {
                    return Err(format!("no {:?} leader among {:?} in 10 s", self.kind, self.apis));
                }
                None => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

/// A port for a node to listen on, below Linux's ephemeral range (32768 on). A port the
/// kernel hands out for `bind(0)` is released before the node binds it, and may meanwhile
/// become the source port of an outgoing connection (the nodes' own RPCs, this process's
/// clients): the node then exits with "Address already in use" (seen in CI). Ports are
/// taken in turn from a window chosen by the process id, each checked free, so two calls
/// never return the same port. The cluster tests' harness does the same.
pub(super) fn port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 10_000;
    const SPAN: u32 = 22_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = std::process::id().wrapping_mul(7919) % SPAN;
    for _ in 0..SPAN {
        let port = (LOW + (base + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_or(0, |a| a.port())
}

/// Starts three `vellum serve` with logs in `dir`, on `memory:` volumes (`volumes` is
/// `None`) or on the given volume files (wiped first). Node `i` (0-based) gets `extra[i]`
/// as further arguments, if any; with `api_tls` the API is HTTPS and spoken with it.
pub(super) fn start_vellum(
    bin: &Path,
    dir: &Path,
    volumes: Option<&[PathBuf]>,
    size: &str,
    extra: &[Vec<String>],
    api_tls: Option<&rustls::ClientConfig>,
) -> Result<Cluster, String> {
    std::fs::create_dir_all(dir).map_err(e("dir"))?;
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (port(), port())).collect();
    let initial: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (a, r))| format!("{}=127.0.0.1:{r}/127.0.0.1:{a}", i + 1))
        .collect();
    let mut cluster = Cluster {
        children: Vec::new(),
        apis: Vec::new(),
        kind: Kind::Vellum,
        api_tls: api_tls.cloned(),
    };
    let scheme = if api_tls.is_some() { "https" } else { "http" };
    for (i, (api, raft)) in ports.iter().enumerate() {
        let volume = match volumes {
            Some(v) => {
                let _ = std::fs::remove_file(&v[i]);
                v[i].display().to_string()
            }
            None => "memory:".to_string(),
        };
        let log = std::fs::File::create(dir.join(format!("n{i}.log"))).map_err(e("log"))?;
        let child = spawn_serve(
            Command::new(bin)
                .arg("serve")
                .args(["--id", &(i + 1).to_string()])
                .args(["--api-addr", &format!("127.0.0.1:{api}")])
                .args(["--raft-addr", &format!("127.0.0.1:{raft}")])
                .args(["--volume", &volume, "--volume-size", size])
                .args(["--initial-cluster", &initial.join(",")])
                .args(extra.get(i).into_iter().flatten()),
            log,
        )?;
        cluster.children.push(child);
        cluster.apis.push(format!("{scheme}://127.0.0.1:{api}"));
    }
    let http = cluster.client();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cluster
        .apis
        .iter()
        .all(|a| http.get(format!("{a}/readyz")).send().is_ok_and(|r| r.status().is_success()))
    {
        if let Some(i) =
            cluster.children.iter_mut().position(|c| matches!(c.try_wait(), Ok(Some(_))))
        {
            let log = std::fs::read_to_string(dir.join(format!("n{i}.log"))).unwrap_or_default();
            let last = log.lines().last().unwrap_or("no output");
            return Err(format!(
                "node {} in {} exited before the cluster was ready: {last}",
                i + 1,
                dir.display()
            ));
        }
        if Instant::now() > deadline {
            return Err(format!("cluster in {} not ready in 60 s", dir.display()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(cluster)
}

/// Spawns `vellum serve` as `cmd` says, its output into `log`.
fn spawn_serve(cmd: &mut Command, log: std::fs::File) -> Result<Child, String> {
    cmd
        // Every client of the bench lives on this one host and opens its connection at once
        // (256 at the top load): a quarter of the default handshake budget (the share one
        // source may hold) refuses some of them while the CPU is busy. A real client fleet
        // comes from many hosts. For the same reason one source may hold more than the
        // default 256 connections: at 256 clients the pool can hold a few more connections
        // than clients for a moment (a connect started while another came back idle), and
        // the bench's own requests (leader lookups) come from here too.
        .env("VELLUM_CONN_HANDSHAKES", "2048")
        .env("VELLUM_CONN_PER_SOURCE", "2048")
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(e("log"))?)
        .stderr(log)
        .spawn()
        .map_err(e("spawn vellum serve"))
}

fn client_builder() -> reqwest::blocking::ClientBuilder {
    // reqwest is built with rustls and no provider (as the node's): install ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::blocking::Client::builder().no_proxy().timeout(Duration::from_secs(30))
}

fn client() -> reqwest::blocking::Client {
    client_builder().build().unwrap_or_else(|_| reqwest::blocking::Client::new())
}

fn vellum_leader(c: &Cluster) -> Option<usize> {
    let http = c.client();
    c.apis.iter().find_map(|a| {
        let v = http.get(format!("{a}/v1/cluster/status")).send().ok()?.json::<serde_json::Value>();
        let id = v.ok()?["leader"].as_u64()?;
        (1..=c.apis.len() as u64).contains(&id).then(|| (id - 1) as usize)
    })
}

/// A Vellum node's Prometheus text (`api`: its plain HTTP API or `--metrics-addr`).
pub(super) fn scrape(api: &str) -> String {
    client()
        .get(format!("{api}/metrics"))
        .send()
        .and_then(reqwest::blocking::Response::text)
        .unwrap_or_default()
}

/// Sum and count of histogram `name` in `text`, over its series that contain `label`.
fn sum_count(text: &str, name: &str, label: &str) -> (f64, f64) {
    let total = |suffix: &str| {
        let series = format!("{name}{suffix}");
        text.lines()
            .filter(|l| l.split(['{', ' ']).next() == Some(series.as_str()) && l.contains(label))
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    (total("_sum"), total("_count"))
}

/// Sum and count of a Vellum leader's proposal batch histogram.
pub(super) fn batches(api: &str) -> (f64, f64) {
    sum_count(&scrape(api), "vellum_raft_proposal_batch_entries", "")
}

const LOG_APPEND: &str = "vellum_log_append_duration_seconds";
const STAGE: &str = "vellum_commit_stage_duration_seconds";

/// The stages of a write's commit path the nodes time (docs/METRICS.md): on the leader
/// (`true`) or a follower, a histogram and a label its series must carry.
pub(super) const STAGES: &[(&str, bool, &str, &str)] = &[
    ("stage: accepted to applied (leader) ms", true, "vellum_raft_commit_duration_seconds", ""),
    ("stage: queued in the batcher ms", true, STAGE, "\"queued\""),
    ("stage: client_write ms", true, STAGE, "\"raft_write\""),
    ("stage: leader log append ms", true, LOG_APPEND, ""),
    ("stage: replication round trip ms", true, STAGE, "\"replication_round_trip\""),
    ("stage: follower append RPC ms", false, STAGE, "\"follower_append_rpc\""),
    (FOLLOWER_APPEND, false, LOG_APPEND, ""),
    ("stage: apply (leader) ms", true, "vellum_raft_apply_duration_seconds", ""),
];

/// Mean milliseconds of each stage between two scrapes of the leader and a follower.
pub(super) fn stage_means(before: &[String; 2], after: &[String; 2]) -> Vec<(&'static str, f64)> {
    STAGES
        .iter()
        .filter_map(|&(what, leader, name, label)| {
            let k = usize::from(!leader);
            let (s0, c0) = sum_count(&before[k], name, label);
            let (s1, c1) = sum_count(&after[k], name, label);
            (c1 > c0).then(|| (what, (s1 - s0) / (c1 - c0) * 1e3))
        })
        .collect()
}

/// Puts the breakdown of a 1-client write on `m`: the mean of each stage over the
/// repetitions' `stages` (from [`stage_means`]).
pub(super) fn set_stage_means(m: &mut Measurement, stages: &[(&'static str, f64)]) {
    for &(what, _, _, _) in STAGES {
        let v: Vec<f64> = stages.iter().filter(|(w, _)| *w == what).map(|(_, ms)| *ms).collect();
        if !v.is_empty() {
            m.set_extra(what, v.iter().sum::<f64>() / v.len() as f64);
        }
    }
}

/// One workload: `clients` writers of `per_client` puts of `value_len` bytes each.
#[derive(Debug, Clone, Copy)]
pub(super) struct Load {
    pub(super) clients: usize,
    pub(super) per_client: usize,
    pub(super) value_len: usize,
}

/// How often a client retries a write answered 503 (20 ms apart: 10 s in all, the span of an
/// election under load) before the run fails.
const RETRIES_503: usize = 500;

/// Runs `load` against member `leader` of `c`; returns latencies (ms) and writes/s. Every
/// system gets the same client code and the same incompressible values; only the request
/// differs (Vellum: `PUT /v1/kv/KEY` with the raw value; etcd: `POST /v3/kv/put` with JSON).
pub(super) fn workload(
    c: &Cluster,
    leader: usize,
    load: Load,
    tag: &str,
) -> Result<(Vec<f64>, f64), String> {
    workload_routed(c, &|_| leader, load, tag)
}

/// [`workload`], each key written through member `route(key)` (the leader of its group, for
/// a node of several groups).
///
/// The clients are tasks of one runtime with as many workers as the machine has cores,
/// sharing one HTTP client (a connection of its own for each client in flight): the load
/// generator shares the cores with the members, and a thread per client with a blocking
/// client (a runtime thread of its own, two thread handoffs per request) cost this machine
/// more CPU per write than the three members together.
///
/// The clock measures the closed loop only: every client writes one untimed key first (its
/// connection is set up), and the timed writes start together once all are ready. Before,
/// the clock also ran over 64 or 256 thread and client spawns and their first connections,
/// and the rate of a short run was mostly the start-up.
pub(super) fn workload_routed(
    c: &Cluster,
    route: &(dyn Fn(&str) -> usize + Sync),
    load: Load,
    tag: &str,
) -> Result<(Vec<f64>, f64), String> {
    let value = bytes::Bytes::from(crate::payload(load.value_len, load.value_len as u64));
    let value64 = etcd::base64(&value);
    let http = c.async_client(load.clients)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(2, std::num::NonZero::get))
        .enable_all()
        .build()
        .map_err(|err| format!("the clients' runtime: {err}"))?;
    // Each client's requests, made before the clock: the URL and the body of each key.
    let request = |key: String| {
        let api = c.apis[route(&key)].as_str();
        match c.kind {
            Kind::Vellum => (format!("{api}/v1/kv/{key}"), value.clone(), key),
            Kind::Etcd => {
                let body = bytes::Bytes::from(etcd::put_body(&key, &value64));
                (format!("{api}/v3/kv/put"), body, key)
            }
        }
    };
    let kind = c.kind;
    // The clients and the clock: it starts when every client is ready.
    let ready = std::sync::Arc::new(tokio::sync::Barrier::new(load.clients + 1));
    let (per_client, elapsed) = runtime.block_on(async {
        let clients: Vec<_> = (0..load.clients)
            .map(|client_no| {
                let warm = request(format!("{tag}-{client_no}-warm"));
                let timed: Vec<_> = (0..load.per_client)
                    .map(|i| request(format!("{tag}-{client_no}-{i}")))
                    .collect();
                let (http, ready) = (http.clone(), ready.clone());
                tokio::spawn(async move {
                    let warm = put(&http, kind, warm).await;
                    // Wait even after a failed warm-up, or the others never start.
                    ready.wait().await;
                    warm?;
                    let mut lat = Vec::with_capacity(timed.len());
                    for req in timed {
                        let t = Instant::now();
                        let r = put(&http, kind, req).await;
                        lat.push(t.elapsed().as_secs_f64() * 1e3);
                        r?;
                    }
                    Ok::<_, String>(lat)
                })
            })
            .collect();
        ready.wait().await;
        let started = Instant::now();
        let mut per_client = Vec::with_capacity(clients.len());
        for client in clients {
            per_client.push(client.await.unwrap_or_else(|_| Err("a client task panicked".into())));
        }
        (per_client, started.elapsed())
    });
    let rate = (load.clients * load.per_client) as f64 / elapsed.as_secs_f64();
    let mut lat = Vec::new();
    for l in per_client {
        lat.extend(l?);
    }
    Ok((lat, rate))
}

/// Writes one key (`url`, `body`, `key`), retrying while the member answers 503: "no leader
/// here now" (a leader transfer or election in flight), where nothing was proposed, as
/// etcdctl and `vellum put` do. The caller's latency includes the wait.
async fn put(
    http: &reqwest::Client,
    kind: Kind,
    (url, body, key): (String, bytes::Bytes, String),
) -> Result<(), String> {
    let send = || match kind {
        Kind::Vellum => http.put(&url).body(body.clone()).send(),
        Kind::Etcd => http.post(&url).body(body.clone()).send(),
    };
    let mut r = send().await;
    for _ in 0..RETRIES_503 {
        match &r {
            Ok(resp) if resp.status() == 503 => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                r = send().await;
            }
            _ => break,
        }
    }
    match r {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!("{kind:?} put {key}: {}", r.status())),
        Err(err) => {
            // reqwest's message hides the cause ("error sending request"): name the chain.
            let mut msg = format!("{kind:?} put {key}: {err}");
            let mut cause = std::error::Error::source(&err);
            while let Some(c) = cause {
                let _ = write!(msg, ": {c}");
                cause = c.source();
            }
            Err(msg)
        }
    }
}

/// A started system of a case: its variant name, cluster and leader.
pub(super) struct System {
    pub(super) variant: &'static str,
    pub(super) cluster: Cluster,
    pub(super) leader: usize,
}

impl System {
    pub(super) fn new(variant: &'static str, cluster: Cluster) -> Result<System, String> {
        let leader = cluster.leader()?;
        // Warm-up: connections, first segment, first bbolt pages.
        let warm = Load { clients: 4, per_client: 10, value_len: 4096 };
        workload(&cluster, leader, warm, "warm")?;
        Ok(System { variant, cluster, leader })
    }
}

pub(super) fn case_name(clients: usize, value_len: usize) -> String {
    let size = if value_len >= 1024 {
        format!("{} KiB", value_len / 1024)
    } else {
        format!("{value_len} B")
    };
    format!("{clients} client{}, {size} values", if clients == 1 { "" } else { "s" })
}

/// Latency and rate measurements of every system of one case.
fn measurements(
    suite: &str,
    case: &str,
    systems: &[System],
    base: impl Fn(&str) -> Option<&'static str>,
) -> (Vec<Measurement>, Vec<Measurement>) {
    let rate_case = format!("{case}: writes/s");
    let lat = systems
        .iter()
        .map(|s| Measurement::new(suite, case, s.variant, base(s.variant), Unit::Millis))
        .collect();
    let rate = systems
        .iter()
        .map(|s| Measurement::new(suite, &rate_case, s.variant, base(s.variant), Unit::OpsPerSec))
        .collect();
    (lat, rate)
}

/// The floor's variant.
const FLOOR: &str = "one raw O_DSYNC 4 KiB write";

/// The stage that holds a write's durable log append on a follower (in [`STAGES`]).
const FOLLOWER_APPEND: &str = "stage: follower log append ms";

/// The floor: one raw durable 4 KiB write, measured now.
fn floor(opts: &Options, dir: &Path) -> Result<Measurement, String> {
    zero_file(&dir.join("floor.bin"), 16 << 20).map_err(e("floor"))?;
    let floor_file = open_direct(&dir.join("floor.bin"), true).map_err(e("floor"))?;
    let buf = vellum_engine::carrier::AlignedBuf::zeroed(4096, 4096);
    let mut floor = Measurement::new("cluster", "floor", FLOOR, None, Unit::Millis);
    floor.add_rep(
        (0..opts.n(500, 50) as u64)
            .map(|i| {
                time_us(|| {
                    std::os::unix::fs::FileExt::write_all_at(
                        &floor_file,
                        buf.as_slice(),
                        (i % 4096) * 4096,
                    )
                    .unwrap_or_else(|e| panic!("floor: {e}"));
                }) / 1e3
            })
            .collect(),
    );
    Ok(floor)
}

pub fn run(opts: &Options) -> Result<SuiteResult, String> {
    let mut r = SuiteResult::new("cluster");
    let Some(bin) = vellum_bin() else {
        r.skipped.push("the vellum binary is not built next to vellum-bench (cargo build --release -p vellum-node)".into());
        return Ok(r);
    };
    let dir = opts.dir.join("cluster");
    std::fs::create_dir_all(&dir).map_err(e("dir"))?;
    r.measurements.push(floor(opts, &dir)?);
    let etcd_bin = etcd::binary();
    if etcd_bin.is_none() {
        r.skipped.push("etcd is not installed (apt-get install etcd-server): no etcd rows; Vellum on file volumes is compared with memory: volumes instead".into());
    }
    normal_disk(&mut r, opts, &bin, etcd_bin.as_deref(), &dir)?;
    targets(&mut r);
    r.notes.push("Three processes per cluster on loopback, clients writing to the leader over HTTP/1.1 keep-alive, each client waiting for its write before the next; latency is client-side (accepted to committed and applied, plus HTTP). Vellum: volume files preallocated, direct IO, write-through, or memory: volumes. etcd 3.4.23 (Debian etcd-server) with default settings through its v3 JSON gateway (base64 key and value), data dirs in the same work dir.".into());
    Ok(r)
}

/// The commit-path targets (docs/BENCHMARKS.md states each met or missed), each with the
/// bound this run measured: what the same nodes do without a disk (`memory:` volumes), what
/// a write's durable log append costs on its path (stage means), and the disk's own floor.
fn targets(r: &mut SuiteResult) {
    let one = case_name(1, 256);
    let many = format!("{}: writes/s", case_name(64, 256));
    let median = |r: &SuiteResult, case: &str, variant: &str| {
        r.find(case, variant).map(|m| m.summary().median)
    };
    let follower_append =
        |r: &SuiteResult, variant: &str| r.find(&one, variant)?.extra(FOLLOWER_APPEND);
    let floor = median(r, "floor", FLOOR);
    let (file_one, memory_one, etcd_one) =
        (median(r, &one, VELLUM_FILE), median(r, &one, VELLUM_MEMORY), median(r, &one, ETCD));
    let (file_append, memory_append) =
        (follower_append(r, VELLUM_FILE), follower_append(r, VELLUM_MEMORY));

    let bound = match (memory_one, etcd_one, floor, file_append) {
        (Some(m), Some(e), Some(floor), Some(f)) => format!(
            "bound: without a disk (memory: volumes) vellum's p50 is {:.3}x etcd's; 0.8x leaves \
             {:.3} ms over that for the durable log append on the commit path; one raw O_DSYNC \
             4 KiB write takes {floor:.3} ms here, but the three members' appends of a round go \
             to this one disk ({:.3} ms in turn), and a follower's append takes {f:.2} ms on \
             file volumes",
            m / e,
            0.8 * e - m,
            3.0 * floor
        ),
        _ => String::new(),
    };
    let vs_etcd = r.ratio(&one, VELLUM_FILE).filter(|_| etcd_one.is_some());
    r.target("1 client, 256 B: vellum p50 <= 0.8x etcd's", vs_etcd, |x| x <= 0.8, &bound);

    let bound = match (median(r, &many, VELLUM_MEMORY), median(r, &many, ETCD)) {
        (Some(m), Some(e)) => format!(
            "bound: without a disk (memory: volumes) vellum makes {:.3}x etcd's writes/s: the \
             2 cores that the three members and the 64 clients share bound it",
            m / e
        ),
        _ => String::new(),
    };
    let vs_etcd = r.ratio(&many, VELLUM_FILE).filter(|_| r.find(&many, ETCD).is_some());
    r.target("64 clients, 256 B: vellum writes/s >= 3x etcd's", vs_etcd, |x| x >= 3.0, &bound);

    let bound = match (memory_one, file_append, memory_append) {
        (Some(m), Some(f), Some(a)) => format!(
            "bound: a write waits for a follower's durable log append, {f:.2} ms on file \
             volumes against {a:.2} ms on memory ones (stage means; the three members' appends \
             of a round go to this one disk); added to the memory volumes' p50 that alone makes \
             {:.3}x",
            (m + f - a) / m
        ),
        _ => String::new(),
    };
    let p50 = file_one.zip(memory_one).map(|(f, m)| f / m);
    r.target("1 client: file-volume p50 <= 1.3x memory-volume p50", p50, |x| x <= 1.3, &bound);

    let (file_many, memory_many) = (median(r, &many, VELLUM_FILE), median(r, &many, VELLUM_MEMORY));
    let spread = |variant: &str| r.find(&many, variant).map(|m| m.summary().spread);
    let bound =
        match (memory_many, file_append, memory_append, spread(VELLUM_FILE), spread(VELLUM_MEMORY))
        {
            (Some(m), Some(f), Some(a), Some(fs), Some(ms)) => {
                // Each client waits for its write: a round of the pipeline takes clients / rate.
                let round = 64.0 / m * 1e3;
                format!(
                    "bound: a round of the pipeline takes {round:.2} ms on memory volumes (64 \
                 clients / their writes/s), and a follower's durable log append adds {:.2} ms \
                 to it (1-client stage means): the disk alone makes {:.3}x; the repetitions \
                 spread over {:.0}..{:.0} writes/s on file volumes and {:.0}..{:.0} on memory ones",
                    f - a,
                    round / (round + f - a),
                    fs.0,
                    fs.1,
                    ms.0,
                    ms.1
                )
            }
            _ => String::new(),
        };
    r.target(
        "64 clients: file-volume writes/s >= 0.9x memory-volume writes/s",
        file_many.zip(memory_many).map(|(f, m)| f / m),
        |x| x >= 0.9,
        &bound,
    );
}

/// Vellum (file and `memory:` volumes) and etcd on the work dir's disk, 256 B and 4 KiB.
fn normal_disk(
    r: &mut SuiteResult,
    opts: &Options,
    bin: &Path,
    etcd_bin: Option<&Path>,
    dir: &Path,
) -> Result<(), String> {
    let volumes: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("file/n{i}.vlm"))).collect();
    let mut systems = vec![
        System::new(
            VELLUM_FILE,
            start_vellum(bin, &dir.join("file"), Some(&volumes), "256MiB", &[], None)?,
        )?,
        System::new(
            VELLUM_MEMORY,
            start_vellum(bin, &dir.join("memory"), None, "256MiB", &[], None)?,
        )?,
    ];
    if let Some(etcd_bin) = etcd_bin {
        let data: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("etcd/data{i}"))).collect();
        systems.push(System::new(ETCD, etcd::start(etcd_bin, &dir.join("etcd"), &data)?)?);
    }
    let has_etcd = etcd_bin.is_some();
    let base = |v: &str| match (has_etcd, v) {
        (true, ETCD) | (false, VELLUM_MEMORY) => None,
        (true, _) => Some(ETCD),
        (false, _) => Some(VELLUM_MEMORY),
    };
    let bar = opts.bar("cluster", (opts.reps * 6 * systems.len()) as u64);
    for value_len in [256, 4096] {
        for clients in [1usize, 16, 64] {
            let per_client = if clients == 1 { opts.n(500, 20) } else { opts.n(4000 / clients, 5) };
            let load = Load { clients, per_client, value_len };
            let case = case_name(clients, value_len);
            let (mut lat, mut rate) = measurements("cluster", &case, &systems, base);
            let mut batch = vec![(0.0, 0.0); systems.len()];
            let mut stages: Vec<Vec<(&str, f64)>> = vec![Vec::new(); systems.len()];
            for rep in 0..opts.reps {
                // The starting system rotates with the repetition.
                for j in 0..systems.len() {
                    let k = (rep + j) % systems.len();
                    let s = &systems[k];
                    let api = &s.cluster.apis[s.leader];
                    let before = batches(api);
                    let nodes = [api.as_str(), s.cluster.apis[(s.leader + 1) % 3].as_str()];
                    let breakdown = clients == 1 && s.cluster.kind == Kind::Vellum;
                    let scraped = |on: bool| -> [String; 2] {
                        if on { nodes.map(scrape) } else { [String::new(), String::new()] }
                    };
                    let stage_before = scraped(breakdown);
                    // Repetitions overwrite the same keys: the state stays bounded (a few
                    // tens of MB) on every system, whatever `--reps`.
                    let tag = format!("c{clients}v{value_len}");
                    let (l, w) = workload(&s.cluster, s.leader, load, &tag)?;
                    let after = batches(api);
                    if breakdown {
                        stages[k].extend(stage_means(&stage_before, &scraped(true)));
                    }
                    batch[k].0 += after.0 - before.0;
                    batch[k].1 += after.1 - before.1;
                    lat[k].add_rep(l);
                    rate[k].add_rep(vec![w]);
                    bar.inc(1);
                }
            }
            for (k, m) in lat.iter_mut().enumerate() {
                let p999 = m.summary().p999;
                m.set_extra("p999 ms", p999);
                if systems[k].cluster.kind == Kind::Vellum && batch[k].1 > 0.0 {
                    m.set_extra("mean proposal batch", batch[k].0 / batch[k].1);
                }
                set_stage_means(m, &stages[k]);
            }
            r.measurements.extend(lat);
            r.measurements.extend(rate);
        }
    }
    bar.finish_and_clear();
    Ok(())
}
