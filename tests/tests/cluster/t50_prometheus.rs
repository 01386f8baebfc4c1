//! `/metrics` is real Prometheus: the right content type, histograms with buckets, HELP on
//! everything; `promtool check metrics` accepts it; a real Prometheus server scrapes all
//! three nodes and answers a `histogram_quantile` query. The Prometheus parts need Debian's
//! `prometheus` package (`.ci/run` installs it); without it they say so and skip.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Cluster, free_port, phase};

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

#[test]
fn metrics_are_prometheus_histograms_and_a_server_scrapes_them() {
    let mut c = Cluster::new(3);
    c.start_all();
    c.wait_ready();
    for k in 0..60 {
        assert!(c.put(&c.nodes[k % 3], &format!("m{k}"), "v"));
    }
    phase("content type, histograms, HELP");
    for n in &c.nodes {
        let r = c.get(&n.url("/metrics")).unwrap();
        let ct = r.headers().get("content-type").unwrap().to_str().unwrap().to_string();
        assert!(ct.starts_with("text/plain; version=0.0.4"), "content type {ct}");
        let text = r.text().unwrap();
        for name in [
            "vellum_carrier_durable_write_duration_seconds_bucket",
            "vellum_raft_commit_duration_seconds_bucket",
            "vellum_log_append_duration_seconds_bucket",
            // The volume's page cache (file volumes get 64 MiB by default).
            "vellum_cache_hits_total",
            "vellum_cache_misses_total",
            "vellum_cache_capacity_bytes",
        ] {
            assert!(text.lines().any(|l| l.starts_with(name)), "node {}: no {name}", n.id);
        }
        assert!(
            !text.lines().any(|l| l.starts_with("vellum_") && l.contains("quantile=")),
            "a summary slipped in"
        );
        for family in text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap_or_default())
        {
            assert!(text.contains(&format!("# HELP {family} ")), "no HELP for {family}");
        }
        assert!(
            text.contains("vellum_carrier_flushes_total")
                || !text.contains("vellum_carrier_writes_total")
        );
        if have("promtool") {
            let mut child = Command::new("promtool")
                .args(["check", "metrics"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write;
            child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "promtool check metrics: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        } else {
            eprintln!("skipped: promtool is not installed (Debian package prometheus)");
        }
    }
    if !have("prometheus") {
        eprintln!("skipped: the prometheus server is not installed (Debian package prometheus)");
        return;
    }
    phase("a real Prometheus server scrapes the three nodes");
    let port = free_port();
    let dir = c.dir.path().join("prom");
    std::fs::create_dir_all(&dir).unwrap();
    let targets: Vec<String> = c.nodes.iter().map(|n| format!("'127.0.0.1:{}'", n.api)).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: vellum\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let mut prom = Command::new("prometheus")
        .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let api = format!("http://127.0.0.1:{port}/api/v1");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut up = 0;
    while Instant::now() < deadline {
        if let Some(r) = c.get(&format!("{api}/query?query=up"))
            && let Ok(v) = r.json::<serde_json::Value>()
        {
            up = v["data"]["result"]
                .as_array()
                .map_or(0, |a| a.iter().filter(|s| s["value"][1] == "1").count());
            if up == 3 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(up, 3, "every target is up");
    // Keep writing so the rates have something to show, then ask for quantiles.
    for k in 0..60 {
        assert!(c.put(&c.nodes[k % 3], &format!("p{k}"), "v"));
    }
    let mut answered = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    for metric in
        ["vellum_carrier_durable_write_duration_seconds", "vellum_raft_commit_duration_seconds"]
    {
        let q = format!("histogram_quantile(0.99, sum(rate({metric}_bucket[1m])) by (le))");
        loop {
            let r = c.http.get(format!("{api}/query?query={}", encode(&q))).send().unwrap();
            let v: serde_json::Value = r.json().unwrap();
            let value =
                v["data"]["result"][0]["value"][1].as_str().and_then(|s| s.parse::<f64>().ok());
            if let Some(x) = value.filter(|x| x.is_finite()) {
                answered.push((metric, x));
                break;
            }
            assert!(Instant::now() < deadline, "no number for {q}: {v}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let _ = prom.kill();
    let _ = prom.wait();
    eprintln!("histogram_quantile answers: {answered:?}");
}
