//! `tls`: what mutual TLS between members and TLS on the client API cost on the commit path.
//!
//! Three 3-node Vellum clusters on file volumes, real processes on loopback, side by side:
//! - `plain` (the baseline): plain HTTP on the Raft port and the client API;
//! - `peer mTLS`: `--peer-cert/--peer-key/--peer-ca`, mutual TLS on the Raft port (every
//!   AppendEntries and vote), the client API plain;
//! - `peer mTLS + API TLS`: also `--api-cert/--api-key/--api-ca`: the clients speak HTTPS and
//!   present `client.pem`.
//!
//! 1 and 64 clients write 256 B values to the leader, each waiting for its write before the
//! next, as in `cluster` (same workload code); repetitions of the three alternate, the starting
//! cluster rotating. Latency p50/p99 and writes/s are ratios to `plain`. Also, informative: how
//! long a fresh 3-node cluster of each kind takes from spawn to every node ready, one number
//! per start.
//!
//! Certificates are made at start by the `vellum` binary (`vellum cert init`, `vellum cert node
//! --id 1..3 --addr 127.0.0.1`) in the suite's directory. To run it: `cargo build --release -p
//! vellum-node -p vellum-bench`, then `target/release/vellum-bench tls --dir DIR`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::cluster::{
    Cluster, Load, System, batches, case_name, port, scrape, set_stage_means, stage_means,
    start_vellum, vellum_bin, workload,
};
use super::e;
use crate::stats::{Measurement, Unit};
use crate::{Options, SuiteResult};

const SUITE: &str = "tls";
const PLAIN: &str = "plain";
const PEER: &str = "peer mTLS";
const BOTH: &str = "peer mTLS + API TLS";
const READY: &str = "3-node cluster: spawn to all nodes ready";

/// How the nodes of one of the three clusters are started.
struct Variant {
    name: &'static str,
    /// Its directory under the suite's.
    slug: &'static str,
    /// Mutual TLS on the Raft port.
    peer: bool,
    /// TLS on the client API, with client certificates.
    api: bool,
}

const VARIANTS: [Variant; 3] = [
    Variant { name: PLAIN, slug: "plain", peer: false, api: false },
    Variant { name: PEER, slug: "peer", peer: true, api: false },
    Variant { name: BOTH, slug: "peer-api", peer: true, api: true },
];

fn baseline(variant: &str) -> Option<&'static str> {
    (variant != PLAIN).then_some(PLAIN)
}

/// The certificates `vellum cert` made in `dir`.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// A new CA, client certificate and node certificates for ids 1..=3 on 127.0.0.1, in `dir`
    /// (emptied first: `vellum cert` refuses to overwrite).
    fn make(bin: &Path, dir: &Path) -> Result<Pki, String> {
        let _ = std::fs::remove_dir_all(dir);
        let d = dir.display().to_string();
        let mut runs = vec![vec!["cert".to_string(), "init".into(), d.clone()]];
        for id in 1..=3 {
            runs.push(
                ["cert", "node", &d, "--id", &id.to_string(), "--addr", "127.0.0.1"]
                    .map(String::from)
                    .to_vec(),
            );
        }
        for args in runs {
            let out = Command::new(bin).args(&args).output().map_err(e("vellum cert"))?;
            if !out.status.success() {
                return Err(format!(
                    "vellum {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        Ok(Pki { dir: dir.to_path_buf() })
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// The TLS flags of node `id` in variant `v`.
    fn flags(&self, v: &Variant, id: usize) -> Vec<String> {
        let cert = self.path(&format!("node-{id}.pem"));
        let key = self.path(&format!("node-{id}-key.pem"));
        let ca = self.path("ca.pem");
        let mut flags = Vec::new();
        if v.peer {
            flags.extend(
                ["--peer-cert", &cert, "--peer-key", &key, "--peer-ca", &ca].map(String::from),
            );
        }
        if v.api {
            flags.extend(
                ["--api-cert", &cert, "--api-key", &key, "--api-ca", &ca].map(String::from),
            );
        }
        flags
    }

    /// What the workload's clients speak to a TLS API: trusting `ca.pem`, presenting
    /// `client.pem`, HTTP/1.1 only (keep-alive: one handshake per client connection).
    fn client_config(&self) -> Result<rustls::ClientConfig, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(self.dir.join("ca.pem")).map_err(e("ca.pem"))? {
            roots.add(cert.map_err(e("ca.pem"))?).map_err(e("ca.pem"))?;
        }
        let certs = CertificateDer::pem_file_iter(self.dir.join("client.pem"))
            .map_err(e("client.pem"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(e("client.pem"))?;
        let key = PrivateKeyDer::from_pem_file(self.dir.join("client-key.pem"))
            .map_err(e("client key"))?;
        let mut config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .map_err(e("client certificate"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// A started cluster of one variant, its nodes' plain `--metrics-addr` URLs (node order), and
/// the milliseconds from the first spawn to every node's `/readyz` answering 200.
struct Started {
    cluster: Cluster,
    metrics: Vec<String>,
    ready_ms: f64,
}

/// Starts variant `v` on fresh 256 MiB volume files in `dir` (logs there too).
fn start(
    bin: &Path,
    dir: &Path,
    pki: &Pki,
    v: &Variant,
    api_tls: &rustls::ClientConfig,
) -> Result<Started, String> {
    let volumes: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("n{i}.vlm"))).collect();
    let metrics: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", port())).collect();
    let extra: Vec<Vec<String>> = metrics
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut args = vec!["--metrics-addr".to_string(), m.clone()];
            args.extend(pki.flags(v, i + 1));
            args
        })
        .collect();
    let t = Instant::now();
    let cluster =
        start_vellum(bin, dir, Some(&volumes), "256MiB", &extra, v.api.then_some(api_tls))?;
    let ready_ms = t.elapsed().as_secs_f64() * 1e3;
    let metrics = metrics.iter().map(|m| format!("http://{m}")).collect();
    Ok(Started { cluster, metrics, ready_ms })
}

pub fn run(opts: &Options) -> Result<SuiteResult, String> {
    let mut r = SuiteResult::new(SUITE);
    let Some(bin) = vellum_bin() else {
        r.skipped.push("the vellum binary is not built next to vellum-bench (cargo build --release -p vellum-node)".into());
        return Ok(r);
    };
    let dir = opts.dir.join(SUITE);
    std::fs::create_dir_all(&dir).map_err(e("dir"))?;
    let pki = Pki::make(&bin, &dir.join("pki"))?;
    let api_tls = pki.client_config()?;
    start_times(&mut r, opts, &bin, &dir, &pki, &api_tls)?;
    commit_path(&mut r, opts, &bin, &dir, &pki, &api_tls)?;
    targets(&mut r);
    r.notes.push(format!("Three 3-node clusters of `vellum serve` on loopback, on preallocated 256 MiB volume files in the work dir (direct IO, write-through), certificates from `vellum cert` (ECDSA P-256; rustls with ring on both sides: TLS 1.3, AES-256-GCM). Clients write to the leader over HTTP/1.1 keep-alive, each waiting for its write before the next; latency is client-side. The handshake is paid once per client connection, not per write: each client of a repetition opens one connection, so a 1-client repetition holds 1 handshake in {} writes and a 64-client one 64 handshakes (one per client's first write) in {} writes; the nodes' Raft connections (pooled, 4 idle per peer) are made at start and during warm-up. What remains per write is the record layer (AES-256-GCM on every request and answer: client to leader with API TLS, leader to each follower's AppendEntries with peer mTLS). 'spawn to all nodes ready' is one number per start, polled every 100 ms, on fresh volumes with nothing else running; it is dominated by the randomized election timeout (400-800 ms) and informative only. Stages are the nodes' own histograms (docs/METRICS.md), scraped from their plain --metrics-addr.", opts.n(500, 20), 64 * opts.n(4000 / 64, 5)));
    Ok(r)
}

/// Each variant started `opts.reps` times (scaled: once in a quick run) from nothing (fresh
/// volumes, no other cluster running), the order rotating: spawn to all nodes ready.
fn start_times(
    r: &mut SuiteResult,
    opts: &Options,
    bin: &Path,
    dir: &Path,
    pki: &Pki,
    api_tls: &rustls::ClientConfig,
) -> Result<(), String> {
    let mut ready: Vec<Measurement> = VARIANTS
        .iter()
        .map(|v| Measurement::new(SUITE, READY, v.name, baseline(v.name), Unit::Millis))
        .collect();
    let starts = opts.n(opts.reps, 1);
    let bar = opts.bar("tls start", (starts * VARIANTS.len()) as u64);
    for rep in 0..starts {
        for j in 0..VARIANTS.len() {
            let k = (rep + j) % VARIANTS.len();
            let at = dir.join(VARIANTS[k].slug).join("start");
            let started = start(bin, &at, pki, &VARIANTS[k], api_tls)?;
            drop(started.cluster);
            for i in 0..3 {
                let _ = std::fs::remove_file(at.join(format!("n{i}.vlm")));
            }
            ready[k].add_rep(vec![started.ready_ms]);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    r.measurements.extend(ready);
    Ok(())
}

/// The three clusters running side by side: 1 and 64 clients, 256 B values.
fn commit_path(
    r: &mut SuiteResult,
    opts: &Options,
    bin: &Path,
    dir: &Path,
    pki: &Pki,
    api_tls: &rustls::ClientConfig,
) -> Result<(), String> {
    let mut systems = Vec::new();
    let mut metrics = Vec::new();
    for v in &VARIANTS {
        let started = start(bin, &dir.join(v.slug), pki, v, api_tls)?;
        systems.push(System::new(v.name, started.cluster)?);
        metrics.push(started.metrics);
    }
    let bar = opts.bar(SUITE, (opts.reps * 2 * systems.len()) as u64);
    for clients in [1usize, 64] {
        let per_client = if clients == 1 { opts.n(500, 20) } else { opts.n(4000 / clients, 5) };
        let load = Load { clients, per_client, value_len: 256 };
        let case = case_name(clients, 256);
        let rate_case = format!("{case}: writes/s");
        let new = |case: &str, unit| -> Vec<Measurement> {
            systems
                .iter()
                .map(|s| Measurement::new(SUITE, case, s.variant, baseline(s.variant), unit))
                .collect()
        };
        let (mut lat, mut rate) = (new(&case, Unit::Millis), new(&rate_case, Unit::OpsPerSec));
        // The breakdown of a 1-client write: per system, every repetition's stage means.
        let mut stages: Vec<Vec<(&str, f64)>> = vec![Vec::new(); systems.len()];
        // Per system: the leader's proposal batch histogram, sum and count.
        let mut batch = vec![(0.0, 0.0); systems.len()];
        for rep in 0..opts.reps {
            // The starting system rotates with the repetition.
            for j in 0..systems.len() {
                let k = (rep + j) % systems.len();
                let s = &systems[k];
                let nodes =
                    [metrics[k][s.leader].as_str(), metrics[k][(s.leader + 1) % 3].as_str()];
                let breakdown = clients == 1;
                let scraped = || -> [String; 2] {
                    if breakdown { nodes.map(scrape) } else { [String::new(), String::new()] }
                };
                let before = scraped();
                let batch_before = batches(nodes[0]);
                // Repetitions overwrite the same keys: the state stays bounded.
                let (l, w) = workload(&s.cluster, s.leader, load, &format!("c{clients}"))?;
                let batch_after = batches(nodes[0]);
                batch[k].0 += batch_after.0 - batch_before.0;
                batch[k].1 += batch_after.1 - batch_before.1;
                if breakdown {
                    stages[k].extend(stage_means(&before, &scraped()));
                }
                lat[k].add_rep(l);
                rate[k].add_rep(vec![w]);
                bar.inc(1);
            }
        }
        let plain_p99 = lat[0].summary().p99;
        for (k, m) in lat.iter_mut().enumerate() {
            let s = m.summary();
            m.set_extra("p999 ms", s.p999);
            if k > 0 {
                m.set_extra("p99 ratio to plain", s.p99 / plain_p99);
            }
            // Writes/s of a closed loop follow the mean, not the median.
            m.set_extra("mean ms", m.samples.iter().sum::<f64>() / m.samples.len().max(1) as f64);
            if batch[k].1 > 0.0 {
                m.set_extra("mean proposal batch", batch[k].0 / batch[k].1);
            }
            set_stage_means(m, &stages[k]);
        }
        r.measurements.extend(lat);
        r.measurements.extend(rate);
    }
    bar.finish_and_clear();
    Ok(())
}

/// What mutual TLS between members may cost (docs/BENCHMARKS.md states each met or missed).
fn targets(r: &mut SuiteResult) {
    let one = case_name(1, 256);
    let p50 = r.ratio(&one, PEER);
    r.target("peer mTLS, 1 client: p50 <= 1.15x plain", p50, |x| x <= 1.15, "");
    let many = format!("{}: writes/s", case_name(64, 256));
    let rate = r.ratio(&many, PEER);
    r.target("peer mTLS, 64 clients: writes/s >= 0.85x plain", rate, |x| x >= 0.85, "");
}
