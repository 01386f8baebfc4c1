//! `vellum demo`: a 3-node cluster on loopback, the README's main command.
//!
//! Starts three `vellum serve` processes on free ports with fresh volumes under `DIR/`, waits
//! for a leader, runs a short workload (sequential writes for latency, concurrent writes for
//! group commit, reads back through a follower), prints the endpoints, the commit latency and the
//! `/metrics` URLs, and keeps serving until Ctrl-C, then stops the nodes cleanly.
//!
//! One demo per directory: `DIR/demo.lock` is locked (`flock`) for as long as the demo runs
//! (the kernel releases it when the process ends, however it ends); a second demo on the same
//! directory is refused in one line before it touches a file. The "try:" lines name this
//! very binary (`std::env::current_exe`), so that they work as pasted; `--no-wait` stops the
//! cluster and prints none.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::CliError;
use super::client::encode_segment;

const NODES: u64 = 3;

/// The node processes; stopped (SIGTERM, then kill) when dropped.
struct Nodes {
    children: Vec<(u64, Child)>,
}

impl Nodes {
    fn stop(&mut self) {
        for (_, c) in &self.children {
            if let Ok(pid) = i32::try_from(c.id()) {
                // `kill -TERM` rather than kill(2): no unsafe outside the engine's OS boundary.
                let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        for (_, c) in &mut self.children {
            while Instant::now() < deadline {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.children.clear();
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port for a node to listen on, below Linux's ephemeral range (32768 on): a port from
/// `bind(0)` is released before the node binds it and may meanwhile become the source port
/// of an outgoing connection (the nodes' own RPCs), and the node would then fail to start.
/// Ports are taken in turn from a window chosen by the process id, each checked free, so two
/// calls never return the same port.
fn free_port() -> Result<u16, CliError> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 10_000;
    const SPAN: u32 = 22_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = std::process::id().wrapping_mul(7919) % SPAN;
    for _ in 0..SPAN {
        let port = (LOW + (base + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| CliError::Io(e, "finding a free port".into()))?;
    l.local_addr().map(|a| a.port()).map_err(|e| CliError::Io(e, "finding a free port".into()))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> CliError {
    move |e| CliError::Io(e, what.to_string())
}

fn start(dir: &Path, ports: &[(u16, u16)]) -> Result<Nodes, CliError> {
    let exe = std::env::current_exe().map_err(io("finding the vellum binary"))?;
    let initial: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (raft, api))| format!("{}=127.0.0.1:{raft}/127.0.0.1:{api}", i + 1))
        .collect();
    let mut nodes = Nodes { children: Vec::new() };
    for (i, (raft, api)) in ports.iter().enumerate() {
        let id = i as u64 + 1;
        let log = std::fs::File::create(dir.join(format!("node{id}.log")))
            .map_err(io("creating a node log"))?;
        let err = log.try_clone().map_err(io("creating a node log"))?;
        let child = Command::new(&exe)
            .arg("serve")
            .args(["--id", &id.to_string()])
            .args(["--api-addr", &format!("127.0.0.1:{api}")])
            .args(["--raft-addr", &format!("127.0.0.1:{raft}")])
            .arg("--volume")
            .arg(dir.join(format!("node{id}.vlm")))
            .args(["--volume-size", "256MiB"])
            .args(["--initial-cluster", &initial.join(",")])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(io("starting a node"))?;
        nodes.children.push((id, child));
    }
    Ok(nodes)
}

async fn wait_ready(http: &reqwest::Client, apis: &[String], dir: &Path) -> Result<(), CliError> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut ready = 0;
        for a in apis {
            if http.get(format!("{a}/readyz")).send().await.is_ok_and(|r| r.status().is_success()) {
                ready += 1;
            }
        }
        if ready == apis.len() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(CliError::Usage(format!(
                "the nodes did not become ready in 90 s (see {}/node*.log)",
                dir.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn leader(http: &reqwest::Client, apis: &[String]) -> Option<u64> {
    for a in apis {
        if let Ok(r) = http.get(format!("{a}/v1/cluster/status")).send().await
            && let Ok(v) = r.json::<serde_json::Value>().await
            && let Some(l) = v["leader"].as_u64()
        {
            return Some(l);
        }
    }
    None
}

async fn put(http: &reqwest::Client, api: &str, key: &str, value: Vec<u8>) -> Result<(), CliError> {
    let r = http
        .put(format!("{api}/v1/kv/{}", encode_segment(key)))
        .body(value)
        .send()
        .await
        .map_err(|e| CliError::Usage(format!("write failed: {e}")))?;
    if r.status().is_success() {
        Ok(())
    } else {
        Err(CliError::Usage(format!("write answered HTTP {}", r.status())))
    }
}

/// Locks `DIR/demo.lock` for this process's lifetime (the returned file holds the lock), or
/// refuses: another demo serves from `dir`.
fn lock_dir(dir: &Path) -> Result<std::fs::File, CliError> {
    let path = dir.join("demo.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| CliError::Io(e, format!("creating {}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(CliError::Usage(format!(
            "another vellum demo is serving from {}: stop it (Ctrl-C) or give --dir another \
             directory",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(CliError::Io(e, format!("locking {}", path.display())))
        }
    }
}

/// `path` as a shell word: as is when it holds only safe characters, else single-quoted.
fn shell_word(path: &Path) -> String {
    let s = path.to_string_lossy();
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:@%".contains(c)) {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

pub async fn run(dir: &Path, writes: usize, no_wait: bool) -> Result<(), CliError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::Io(e, format!("creating the demo directory {}", dir.display())))?;
    let _lock = lock_dir(dir)?;
    let exe = std::env::current_exe().map_err(io("finding the vellum binary"))?;
    let vellum = shell_word(&exe);
    for id in 1..=NODES {
        for ext in ["vlm", "vlm.lock", "log"] {
            let _ = std::fs::remove_file(dir.join(format!("node{id}.{ext}")));
        }
    }
    let mut ports = Vec::new();
    for _ in 0..NODES {
        ports.push((free_port()?, free_port()?));
    }
    println!("starting {NODES} nodes with fresh 256 MiB volumes in {} ...", dir.display());
    let mut nodes = start(dir, &ports)?;
    let apis: Vec<String> = ports.iter().map(|(_, a)| format!("http://127.0.0.1:{a}")).collect();
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let started = Instant::now();
    wait_ready(&http, &apis, dir).await?;
    let leader_id = leader(&http, &apis).await.unwrap_or(1);
    let leader_api = apis[(leader_id - 1) as usize].clone();
    println!("cluster ready in {:.1} s; node {leader_id} leads", started.elapsed().as_secs_f64());

    // Sequential writes: each is one proposal, one durable append on every node, one round trip.
    let mut lat = Vec::with_capacity(writes);
    for i in 0..writes {
        let t = Instant::now();
        put(&http, &leader_api, &format!("demo/{i:05}"), format!("value {i}").into_bytes()).await?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    lat.sort_by(f64::total_cmp);
    // Concurrent writes: the leader puts those that queue up into one log append, and the
    // log makes the appends in flight durable in one write.
    let concurrent = 64;
    let per_client = 20;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..concurrent {
        let (http, api) = (http.clone(), leader_api.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..per_client {
                put(&http, &api, &format!("batch/{c:02}/{i:03}"), vec![b'x'; 4096]).await?;
            }
            Ok::<(), CliError>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| CliError::Usage(e.to_string()))??;
    }
    let rate = f64::from(concurrent * per_client) / t.elapsed().as_secs_f64();
    // Read back through a follower: it forwards linearizable reads to the leader.
    let follower = apis
        .iter()
        .enumerate()
        .find(|(i, _)| *i as u64 + 1 != leader_id)
        .map_or(&apis[0], |(_, a)| a);
    let key = format!("demo/{:05}", writes.saturating_sub(1));
    let got = http
        .get(format!("{follower}/v1/kv/{}", encode_segment(&key)))
        .send()
        .await
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let got = got.text().await.unwrap_or_default();

    println!();
    println!(
        "commit latency, {writes} sequential 1-client writes: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99)
    );
    println!(
        "{concurrent} concurrent clients, 4 KiB values: {rate:.0} writes/s (the leader appends queued writes together)"
    );
    println!("read back through a follower (linearizable): {key} = {got:?}");
    println!();
    for (i, api) in apis.iter().enumerate() {
        println!("node {}: api {api}  metrics {api}/metrics  raft 127.0.0.1:{}", i + 1, ports[i].0);
    }
    println!();
    if no_wait {
        nodes.stop();
        println!("stopped the nodes (--no-wait); the volumes stay in {}", dir.display());
        return Ok(());
    }
    let endpoints = apis.iter().map(|a| a.trim_start_matches("http://")).collect::<Vec<_>>();
    let endpoints = endpoints.join(",");
    println!("try:  {vellum} kv put --endpoints {endpoints} greeting hello");
    println!("      {vellum} kv get --endpoints {endpoints} greeting");
    println!("      {vellum} kv get --endpoints {endpoints} --prefix demo/ --limit 5");
    println!("      {vellum} cluster status --endpoints {endpoints}");
    println!("      curl -s {leader_api}/metrics | grep vellum_carrier_durable_write");
    println!();
    println!("serving until Ctrl-C ...");
    let _ = tokio::signal::ctrl_c().await;
    println!("stopping the nodes ...");
    nodes.stop();
    println!("stopped; the volumes stay in {}", dir.display());
    Ok(())
}
