//! `scale-out`: what adding a node to a sharded cluster costs. Three `vellum serve --groups 16`
//! processes on file volumes hold a map of 4 KiB values; a fourth, started with `--standby`,
//! is added with `vellum cluster add-node` while 64 clients keep writing. `add-node` makes it
//! a member, then moves group replicas onto it one step at a time (the group's leader
//! snapshots it, the new replica catches up as a learner, the voters swap, the old replica
//! is dropped) and spreads the leaders (docs/OPERATIONS.md, "Groups").
//!
//! - **The move**: how long `add-node` takes, against how long the same clients took to write
//!   the bytes it moved in the first place (the replicas it moved x one group's share of the
//!   map, at the fill's rate in the same run). What a replica's move costs beyond writing its
//!   bytes once is the snapshot, the catch-up and the three membership changes per step.
//! - **Writes while it runs**: 64 clients writing 256 B values during `add-node`, against the
//!   same clients before it.
//!
//! Every repetition is a fresh cluster. The clients send each key to its group's leader as
//! it was before the move (a leader that moved forwards it; a 503 while one hands over is
//! retried, as in the other cluster suites).

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::cluster::{Cluster, Load, start_vellum, vellum_bin, workload_routed};
use super::e;
use super::multiraft::{NODE_GROUPS, group_leaders, group_of};
use crate::stats::{Measurement, Unit};
use crate::{Options, SuiteResult};

const MOVE: &str = "vellum cluster add-node (replicas moved, then leaders spread)";
const WRITE_MOVED: &str = "the clients writing the moved bytes (4 KiB puts, the fill's rate)";
const DURING: &str = "64 clients while add-node runs";
const BEFORE: &str = "64 clients before add-node";
/// Each node's volume: the map twice over and the log's segments.
const VOLUME: &str = "256MiB";
const VALUE: usize = 4096;

/// What one repetition measured.
struct Added {
    /// `add-node`'s wall time.
    move_ms: f64,
    /// The time the fill's clients took for the bytes the move copied.
    write_moved_ms: f64,
    before: f64,
    during: f64,
    /// Replicas moved (the `replica moved` steps `add-node` printed).
    steps: usize,
    moved_bytes: f64,
    /// Replicas of groups 1.. the new node votes in afterwards.
    on_new: usize,
}

pub fn run(opts: &Options) -> Result<SuiteResult, String> {
    let mut r = SuiteResult::new("scale-out");
    let Some(bin) = vellum_bin() else {
        r.skipped.push("the vellum binary is not built next to vellum-bench (cargo build --release -p vellum-node)".into());
        return Ok(r);
    };
    let dir = opts.dir.join("scale-out");
    let _ = std::fs::remove_dir_all(&dir);
    let fill = Load { clients: 64, per_client: opts.n(128, 4), value_len: VALUE };
    let rate = Load { clients: 64, per_client: opts.n(24, 4), value_len: 256 };
    let map_mib = (fill.clients * fill.per_client * VALUE) as f64 / f64::from(1 << 20);
    let case = format!(
        "add a 4th node to 3 nodes of --groups {NODE_GROUPS} holding {map_mib:.0} MiB of 4 KiB values"
    );
    let rate_case = "64 clients, 256 B values: writes/s while a 4th node is added";
    let mut m_move = Measurement::new("scale-out", &case, MOVE, Some(WRITE_MOVED), Unit::Millis);
    let mut m_write = Measurement::new("scale-out", &case, WRITE_MOVED, None, Unit::Millis);
    let mut m_during =
        Measurement::new("scale-out", rate_case, DURING, Some(BEFORE), Unit::OpsPerSec);
    let mut m_before = Measurement::new("scale-out", rate_case, BEFORE, None, Unit::OpsPerSec);
    let (mut steps, mut moved, mut on_new) = (0, 0.0, 0);
    let bar = opts.bar("scale-out", opts.reps as u64);
    for rep in 0..opts.reps {
        let rep_dir = dir.join(format!("rep{rep}"));
        std::fs::create_dir_all(&rep_dir).map_err(e("dir"))?;
        let one = one_move(&bin, &rep_dir, fill, rate)?;
        m_move.add_rep(vec![one.move_ms]);
        m_write.add_rep(vec![one.write_moved_ms]);
        m_during.add_rep(vec![one.during]);
        m_before.add_rep(vec![one.before]);
        steps += one.steps;
        moved += one.moved_bytes;
        on_new += one.on_new;
        let _ = std::fs::remove_dir_all(&rep_dir);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let reps = opts.reps as f64;
    m_move.set_extra("replicas moved", steps as f64 / reps);
    m_move.set_extra("MiB moved", moved / reps / f64::from(1 << 20));
    m_move.set_extra("replicas on the new node", on_new as f64 / reps);
    r.measurements.extend([m_move, m_write, m_during, m_before]);
    r.notes.push(format!("Scale-out: three `vellum serve --groups {NODE_GROUPS}` on file volumes of {VOLUME} (direct IO, write-through) on this machine's disk; {} clients write {} values of 4 KiB each ({map_mib:.0} MiB, spread over the groups by key), then {} clients write 256 B values for the rate before; a fourth node (`--standby`) is added with `vellum cluster add-node` while the same clients write in rounds of {} puts each until it returns (the rate during: the rounds' puts over their timed parts). Moved bytes: the replicas moved times one group's share of the map. A fresh cluster per repetition. All four processes and the clients share this machine's 2 cores.", fill.clients, fill.clients * fill.per_client, rate.clients, rate.per_client));
    Ok(r)
}

/// One repetition: a fresh 3-node cluster in `dir`, filled, then a 4th node added.
fn one_move(bin: &Path, dir: &Path, fill: Load, rate: Load) -> Result<Added, String> {
    let volumes: Vec<std::path::PathBuf> = (0..3).map(|i| dir.join(format!("n{i}.vlm"))).collect();
    let groups = vec!["--groups".to_string(), NODE_GROUPS.to_string()];
    let mut c = start_vellum(bin, dir, Some(&volumes), VOLUME, &vec![groups.clone(); 3], None)?;
    let leaders = group_leaders(&c)?;
    let route = move |key: &str| leaders[group_of(key, NODE_GROUPS)];
    let (_, fill_rate) = workload_routed(&c, &route, fill, "fill")?;
    let before = rounds(&c, &route, rate, "before", &|round| round >= 3)?;
    let (api, raft) = c.start_standby(bin, dir, 4, (&dir.join("n3.vlm"), VOLUME), &groups)?;
    let endpoint = c.apis[0].trim_start_matches("http://").to_string();
    let done = AtomicBool::new(false);
    let (out, move_ms, during) = std::thread::scope(|s| {
        let (c, route, done) = (&c, &route, &done);
        let writers = s.spawn(move || {
            // At least one round, so that a move faster than a round still has a rate.
            let until = |round| round > 0 && done.load(Ordering::Acquire);
            rounds(c, route, rate, "during", &until)
        });
        let t = Instant::now();
        let out = Command::new(bin)
            .args(["cluster", "add-node", "4", &api, &raft, "--endpoints", &endpoint])
            .output();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        done.store(true, Ordering::Release);
        let during = writers.join().unwrap_or_else(|_| Err("a writer panicked".into()));
        (out, ms, during)
    });
    let out = out.map_err(e("vellum cluster add-node"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "vellum cluster add-node failed: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let during = during?;
    let steps = stdout.lines().filter(|l| l.contains("replica moved")).count();
    let group_bytes = (fill.clients * fill.per_client * fill.value_len) as f64 / NODE_GROUPS as f64;
    let moved_bytes = steps as f64 * group_bytes;
    let on_new = replicas_of(&c, 4)?;
    drop(c);
    Ok(Added {
        move_ms,
        write_moved_ms: moved_bytes / (fill_rate * fill.value_len as f64) * 1e3,
        before,
        during,
        steps,
        moved_bytes,
        on_new,
    })
}

/// Runs `rate` in rounds until `until(rounds so far)`: the rounds' puts over their timed
/// parts.
fn rounds(
    c: &Cluster,
    route: &(dyn Fn(&str) -> usize + Sync),
    rate: Load,
    tag: &str,
    until: &dyn Fn(usize) -> bool,
) -> Result<f64, String> {
    let (mut puts, mut secs) = (0.0, 0.0);
    let mut round = 0;
    while !until(round) {
        let (_, w) = workload_routed(c, route, rate, &format!("{tag}{round}"))?;
        let n = (rate.clients * rate.per_client) as f64;
        puts += n;
        secs += n / w;
        round += 1;
    }
    Ok(puts / secs)
}

/// How many of groups 1.. node `id` votes in, as member 1 reports them.
fn replicas_of(c: &Cluster, id: u64) -> Result<usize, String> {
    let status: serde_json::Value = c
        .client()
        .get(format!("{}/v1/cluster/status", c.apis[0]))
        .send()
        .and_then(reqwest::blocking::Response::json)
        .map_err(e("cluster status"))?;
    let groups = status["groups"].as_array().ok_or("a status without groups")?;
    Ok(groups
        .iter()
        .skip(1)
        .filter(|g| {
            g["voters"].as_array().is_some_and(|v| v.iter().any(|x| x.as_u64() == Some(id)))
        })
        .count())
}
