//! Starting, stopping and talking to node processes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::blocking::Client;

/// The `vellum` binary next to this test's target directory (`VELLUM_TEST_BIN` names
/// another, e.g. an older build to compare a benchmark with).
pub fn vellum_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("VELLUM_TEST_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = dir.join("vellum");
    assert!(
        bin.exists(),
        "{} is missing: cargo build -p vellum-node (cargo test --workspace builds it)",
        bin.display()
    );
    bin
}

/// A port to listen on, below Linux's ephemeral range (32768 on): a port the kernel hands
/// out for `bind(0)` may meanwhile become the source port of some outgoing connection (the
/// nodes' own RPCs), and the node then fails to bind it. Ports are taken in turn from a
/// window chosen by the process id, so parallel tests and test binaries rarely meet; each is
/// checked free before it is handed out.
pub fn free_port() -> u16 {
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
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A blocking HTTP client builder. reqwest is built with rustls and no crypto provider of its
/// own (the node's stack: rustls on ring), so ring is installed first.
pub fn client_builder() -> reqwest::blocking::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::builder().no_proxy()
}

pub fn phase(what: &str) {
    eprintln!("--- {what}");
}

/// One node's addresses and process.
pub struct Node {
    pub id: u64,
    pub api: u16,
    pub raft: u16,
    pub volume: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
    pub extra: Vec<String>,
    /// Environment variables of the process (`VELLUM_*` settings an older binary ignores).
    pub env: Vec<(String, String)>,
    /// The API is served over TLS (`--api-cert`).
    pub https: bool,
}

impl Node {
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{path}", self.api)
    }

    /// Started by the test and not killed or stopped by it since (it may have exited by
    /// itself: [`Node::is_running`] tells).
    pub fn is_started(&self) -> bool {
        self.child.is_some()
    }

    /// Started, and its process has not exited (an exited one not yet reaped, a zombie,
    /// counts as exited; one stopped by `SIGSTOP` is running).
    pub fn is_running(&self) -> bool {
        self.child.as_ref().is_some_and(|c| {
            std::fs::read_to_string(format!("/proc/{}/stat", c.id())).is_ok_and(|stat| {
                // `pid (comm) state ...`: the state follows the last parenthesis.
                stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
            })
        })
    }

    /// Starts the process with `args` after the common ones.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "node {} already runs", self.id);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(vellum_bin())
            .arg("serve")
            .args(["--id", &self.id.to_string()])
            .args(["--api-addr", &format!("127.0.0.1:{}", self.api)])
            .args(["--raft-addr", &format!("127.0.0.1:{}", self.raft)])
            .arg("--volume")
            .arg(&self.volume)
            .args(if self.extra.iter().any(|a| a == "--volume-size") {
                vec!["--heartbeat-ms", "50"]
            } else {
                vec!["--volume-size", "128MiB", "--heartbeat-ms", "50"]
            })
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// Waits up to `timeout` for the process to exit by itself; its exit status if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let c = self.child.as_mut()?;
            if let Ok(Some(status)) = c.try_wait() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// The node's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Deletes the node's carrier file (a lost volume).
    pub fn lose_volume(&self) {
        std::fs::remove_file(&self.volume).unwrap();
        let _ = std::fs::remove_file(self.volume.with_extension("vlm.lock"));
    }

    /// Sends `signal` (`STOP`, `CONT`) to the process: a stopped node is cut off from every
    /// peer, its own timers included, until it continues.
    pub fn signal(&self, signal: &str) {
        if let Some(c) = &self.child {
            let _ =
                Command::new("kill").args([&format!("-{signal}"), &c.id().to_string()]).status();
        }
    }

    /// kill -9.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, and wait for a clean exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(status)) = c.try_wait() {
                    assert!(status.success(), "node {} exited with {status}", self.id);
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
            panic!("node {} did not stop on SIGTERM", self.id);
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A set of nodes in one temporary directory.
pub struct Cluster {
    pub nodes: Vec<Node>,
    pub http: Client,
    pub dir: tempfile::TempDir,
    /// A bearer token `get`, `put`, `read` and `leader` present (nodes started with
    /// `--auth-tokens`).
    pub token: Option<String>,
}

impl Cluster {
    /// `n` nodes that bootstrap together with `--initial-cluster`.
    pub fn new(n: u64) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let initial: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (api, raft))| format!("{}=127.0.0.1:{raft}/127.0.0.1:{api}", i + 1))
            .collect();
        let nodes = ports
            .iter()
            .enumerate()
            .map(|(i, &(api, raft))| {
                Cluster::node(
                    dir.path(),
                    i as u64 + 1,
                    api,
                    raft,
                    vec!["--initial-cluster".into(), initial.join(",")],
                )
            })
            .collect();
        let http = client_builder().timeout(Duration::from_secs(20)).build().unwrap();
        Cluster { nodes, http, dir, token: None }
    }

    pub fn node(dir: &Path, id: u64, api: u16, raft: u16, extra: Vec<String>) -> Node {
        Node {
            id,
            api,
            raft,
            volume: dir.join(format!("n{id}.vlm")),
            log: dir.join(format!("n{id}.log")),
            child: None,
            extra,
            env: Vec::new(),
            https: false,
        }
    }

    pub fn start_all(&mut self) {
        for n in &mut self.nodes {
            n.start();
        }
    }

    /// `req` with the cluster's token, if it has one.
    pub fn authed(
        &self,
        req: reqwest::blocking::RequestBuilder,
    ) -> reqwest::blocking::RequestBuilder {
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    pub fn get(&self, url: &str) -> Option<reqwest::blocking::Response> {
        self.authed(self.http.get(url)).send().ok()
    }

    /// Waits until every started node answers `/readyz` with 200 (one that exited by itself
    /// fails the test at once).
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(n) = self.nodes.iter().find(|n| n.is_started() && !n.is_running()) {
                panic!("node {} exited while it was awaited; logs: {}", n.id, self.logs());
            }
            let ready = self
                .nodes
                .iter()
                .filter(|n| n.is_started())
                .all(|n| self.get(&n.url("/readyz")).is_some_and(|r| r.status().is_success()));
            if ready {
                return;
            }
            assert!(Instant::now() < deadline, "nodes not ready in 60 s; logs: {}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The leader as the started nodes report it (waiting for one).
    pub fn leader(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for n in self.nodes.iter().filter(|n| n.is_started()) {
                if let Some(r) = self.get(&n.url("/v1/cluster/status"))
                    && let Ok(v) = r.json::<serde_json::Value>()
                    && let Some(l) = v["leader"].as_u64()
                    && self.nodes.iter().any(|m| m.id == l && m.is_started())
                {
                    return l;
                }
            }
            assert!(Instant::now() < deadline, "no leader among the running nodes in 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn by_ref(&self, id: u64) -> &Node {
        self.nodes.iter().find(|n| n.id == id).unwrap()
    }

    pub fn by_id(&mut self, id: u64) -> &mut Node {
        self.nodes.iter_mut().find(|n| n.id == id).unwrap()
    }

    /// Writes `key` through `node`; true when acknowledged.
    ///
    /// A 503 that says the write was not proposed (`no_leader`: an election is settling, as
    /// one may at any time under a loaded CI machine's 300 ms elections; `not_ready`) is
    /// retried for up to 10 s, as a client following `Retry-After` would: such an answer
    /// wrote nothing. Every other answer (an `outcome_unknown`, a refusal, a transport
    /// error) is the write's outcome.
    pub fn put(&self, node: &Node, key: &str, value: &str) -> bool {
        self.put_url(&node.url(&format!("/v1/kv/{key}")), value)
    }

    /// [`Cluster::put`] to a key's full URL (a node the cluster does not start itself).
    pub fn put_url(&self, url: &str, value: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let Ok(r) = self.authed(self.http.put(url)).body(value.to_string()).send() else {
                return false;
            };
            if r.status().is_success() {
                return true;
            }
            let unproposed = r.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE
                && r.json::<serde_json::Value>()
                    .is_ok_and(|v| matches!(v["error"].as_str(), Some("no_leader" | "not_ready")));
            if !unproposed || Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Reads `key` through `node` (linearizable unless `local`).
    pub fn read(&self, node: &Node, key: &str, local: bool) -> Option<String> {
        let q = if local { "?consistency=local" } else { "" };
        let r = self.get(&node.url(&format!("/v1/kv/{key}{q}")))?;
        r.status().is_success().then(|| r.text().unwrap_or_default())
    }

    /// Reads `key` linearizably through `node`, retrying for up to 20 s what is not an
    /// answer about the key (a transport error, a 5xx while an election settles, a 4xx
    /// while a group moves): `None` for a 404, or when no answer came.
    pub fn read_settled(&self, node: &Node, key: &str) -> Option<String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(r) = self.get(&node.url(&format!("/v1/kv/{key}"))) {
                let status = r.status();
                if status.is_success() {
                    return Some(r.text().unwrap_or_default());
                }
                if status.as_u16() == 404 {
                    return None;
                }
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The value of metric `name` (its first series) on node `id`'s /metrics; 0 when absent.
    pub fn metric(&self, id: u64, name: &str) -> f64 {
        let text = self.get(&self.by_ref(id).url("/metrics")).unwrap().text().unwrap();
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                let text = std::fs::read_to_string(&n.log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                format!(
                    "\n== node {} ==\n{}",
                    n.id,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect()
    }
}
