//! `cluster`: the 3-node node cluster on loopback (real `vellum serve` processes), 1, 16 and
//! 64 concurrent clients writing 4 KiB values: commit latency and writes/s, against the same
//! cluster on `memory:` volumes (the upper bound), with one raw durable write as the floor.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::e;
use crate::stats::{Measurement, Unit};
use crate::sys::{open_direct, time_us, zero_file};
use crate::{Options, SuiteResult};

/// The `vellum` binary beside this one (`cargo build --release -p vellum-node`).
fn vellum_bin() -> Option<PathBuf> {
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

struct Cluster {
    children: Vec<Child>,
    apis: Vec<String>,
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

fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_or(0, |a| a.port())
}

fn start(bin: &Path, dir: &Path, memory: bool) -> Result<Cluster, String> {
    std::fs::create_dir_all(dir).map_err(e("dir"))?;
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (port(), port())).collect();
    let initial: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (a, r))| format!("{}=127.0.0.1:{r}/127.0.0.1:{a}", i + 1))
        .collect();
    let mut children = Vec::new();
    for (i, (api, raft)) in ports.iter().enumerate() {
        let volume = if memory {
            "memory:".to_string()
        } else {
            dir.join(format!("n{i}.vlm")).display().to_string()
        };
        let _ = std::fs::remove_file(dir.join(format!("n{i}.vlm")));
        let log = std::fs::File::create(dir.join(format!("n{i}.log"))).map_err(e("log"))?;
        let child = Command::new(bin)
            .arg("serve")
            .args([
                "--id",
                &(i + 1).to_string(),
                "--api-addr",
                &format!("127.0.0.1:{api}"),
                "--raft-addr",
                &format!("127.0.0.1:{raft}"),
            ])
            .args([
                "--volume",
                &volume,
                "--volume-size",
                "256MiB",
                "--initial-cluster",
                &initial.join(","),
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(e("log"))?)
            .stderr(log)
            .spawn()
            .map_err(e("spawn vellum serve"))?;
        children.push(child);
    }
    let apis: Vec<String> = ports.iter().map(|(a, _)| format!("http://127.0.0.1:{a}")).collect();
    let http = client();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !apis
        .iter()
        .all(|a| http.get(format!("{a}/readyz")).send().is_ok_and(|r| r.status().is_success()))
    {
        if Instant::now() > deadline {
            return Err(format!("cluster in {} not ready in 60 s", dir.display()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(Cluster { children, apis })
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap_or_else(|_| reqwest::blocking::Client::new())
}

fn leader_api(c: &Cluster) -> String {
    let http = client();
    for a in &c.apis {
        if let Ok(r) = http.get(format!("{a}/v1/cluster/status")).send()
            && let Ok(v) = r.json::<serde_json::Value>()
            && let Some(l) = v["leader"].as_u64()
        {
            return c.apis[(l - 1) as usize].clone();
        }
    }
    c.apis[0].clone()
}

/// Sum and count of the leader's proposal batch histogram.
fn batches(api: &str) -> (f64, f64) {
    let text = client()
        .get(format!("{api}/metrics"))
        .send()
        .and_then(reqwest::blocking::Response::text)
        .unwrap_or_default();
    let val = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (val("vellum_raft_proposal_batch_entries_sum"), val("vellum_raft_proposal_batch_entries_count"))
}

/// Runs `clients` writers of `per_client` 4 KiB puts; returns latencies (ms) and writes/s.
fn workload(api: &str, clients: usize, per_client: usize, tag: &str) -> (Vec<f64>, f64) {
    let value = vec![b'x'; 4096];
    let started = Instant::now();
    let lat: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let (value, tag) = (value.clone(), tag.to_string());
                s.spawn(move || {
                    let http = client();
                    (0..per_client)
                        .map(|i| {
                            time_us(|| {
                                let r = http
                                    .put(format!("{api}/v1/kv/{tag}-{c}-{i}"))
                                    .body(value.clone())
                                    .send();
                                assert!(r.is_ok_and(|r| r.status().is_success()), "write failed");
                            }) / 1e3
                        })
                        .collect::<Vec<f64>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    });
    let rate = (clients * per_client) as f64 / started.elapsed().as_secs_f64();
    (lat, rate)
}

pub fn run(opts: &Options) -> Result<SuiteResult, String> {
    let mut r = SuiteResult::new("cluster");
    let Some(bin) = vellum_bin() else {
        r.skipped.push("the vellum binary is not built next to vellum-bench (cargo build --release -p vellum-node)".into());
        return Ok(r);
    };
    let dir = opts.dir.join("cluster");
    std::fs::create_dir_all(&dir).map_err(e("dir"))?;
    // The floor: one raw durable 4 KiB write, measured now.
    zero_file(&dir.join("floor.bin"), 16 << 20).map_err(e("floor"))?;
    let floor_file = open_direct(&dir.join("floor.bin"), true).map_err(e("floor"))?;
    let buf = vellum_engine::carrier::AlignedBuf::zeroed(4096, 4096);
    let mut floor =
        Measurement::new("cluster", "floor", "one raw O_DSYNC 4 KiB write", None, Unit::Millis);
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
    r.measurements.push(floor);
    let file = start(&bin, &dir.join("file"), false)?;
    let mem = start(&bin, &dir.join("memory"), true)?;
    let (file_api, mem_api) = (leader_api(&file), leader_api(&mem));
    let bar = opts.bar("cluster", (opts.reps * 3 * 2) as u64);
    for clients in [1usize, 16, 64] {
        let per_client = if clients == 1 { opts.n(500, 20) } else { opts.n(4000 / clients, 5) };
        let case = format!("{clients} client{}, 4 KiB values", if clients == 1 { "" } else { "s" });
        let base = "vellum on memory: volumes";
        let mut lat = [
            Measurement::new("cluster", &case, "vellum on file volumes", Some(base), Unit::Millis),
            Measurement::new("cluster", &case, base, None, Unit::Millis),
        ];
        let mut rate = [
            Measurement::new(
                "cluster",
                &format!("{case}: writes/s"),
                "vellum on file volumes",
                Some(base),
                Unit::OpsPerSec,
            ),
            Measurement::new("cluster", &format!("{case}: writes/s"), base, None, Unit::OpsPerSec),
        ];
        let mut batch = [(0.0, 0.0); 2];
        for rep in 0..opts.reps {
            for (k, api) in [&file_api, &mem_api].into_iter().enumerate() {
                let before = batches(api);
                let (l, w) = workload(api, clients, per_client, &format!("r{rep}c{clients}"));
                let after = batches(api);
                batch[k].0 += after.0 - before.0;
                batch[k].1 += after.1 - before.1;
                lat[k].add_rep(l);
                rate[k].add_rep(vec![w]);
                bar.inc(1);
            }
        }
        for (k, m) in lat.iter_mut().enumerate() {
            m.set_extra(
                "mean proposal batch",
                if batch[k].1 > 0.0 { batch[k].0 / batch[k].1 } else { 0.0 },
            );
            let p999 = m.summary().p999;
            m.set_extra("p999 ms", p999);
        }
        r.measurements.extend(lat);
        r.measurements.extend(rate);
    }
    bar.finish_and_clear();
    drop(file);
    drop(mem);
    r.notes.push("Three `vellum serve` processes per cluster on loopback (volume files preallocated, direct IO, write-through; or memory: volumes), HTTP PUTs to the leader, each client waiting for its write before the next. Latency is client-side (accepted to committed and applied, plus HTTP).".into());
    Ok(r)
}
