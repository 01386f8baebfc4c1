//! `slow-disk`: the `cluster` workload on an emulated spinning disk, where every durable
//! request costs `--slow-disk-ms` (default 8, an HDD cache flush) and one mount's requests are
//! serialised like one spindle's: one FUSE mount per node (`bench/slowdisk.py`; an O_DSYNC
//! write arrives as a write then an fsync). Vellum and etcd run on the same mounts, 256 B
//! values, 1, 16, 64 and 256 clients each waiting for its write before the next.
//! The rows also give the machine's CPU (clients, members and mounts share it) per write
//! and how busy it was, which bounds a closed loop's turnaround on a small machine.
//!
//! Every row counts what the mounts saw per client write (durable requests on all nodes and
//! on the leader, FUSE writes, milliseconds each durable request held the spindle), and the
//! Vellum rows carry the nodes' own stage means (docs/METRICS.md) and the mean proposal batch,
//! so that each millisecond of a commit is accounted for.
//!
//! To run it: `cargo build --release -p vellum-node -p vellum-bench`, then
//! `target/release/vellum-bench slow-disk --dir DIR`; needs `apt-get install fuse libfuse2`
//! and `pip install fusepy`, root or a usable /dev/fuse, and, for the peer, `etcd-server`.

use std::path::{Path, PathBuf};

use super::{
    Load, STAGES, System, batches, case_name, etcd, measurements, scrape, set_stage_means,
    slowdisk, stage_means, start_vellum, vellum_bin, workload,
};
use crate::{Options, SuiteResult};

const VELLUM: &str = "vellum";
/// Vellum on mounts of the same emulation without the delay: a durable request costs the
/// real sync of the backing file. What a round costs apart from the disk's 8 ms.
const NO_DELAY: &str = "vellum, mounts without the delay";
const ETCD: &str = "etcd 3.4.23";
const SUITE: &str = "slow-disk";

/// Client counts of the slow-disk rows.
const CLIENTS: [usize; 4] = [1, 16, 64, 256];

pub fn run(opts: &Options) -> Result<SuiteResult, String> {
    let mut r = SuiteResult::new(SUITE);
    let Some(bin) = vellum_bin() else {
        r.skipped.push("the vellum binary is not built next to vellum-bench (cargo build --release -p vellum-node)".into());
        return Ok(r);
    };
    if opts.slow_disk_ms <= 0.0 {
        r.skipped.push("the emulated slow disk (--slow-disk-ms 0)".into());
        return Ok(r);
    }
    if let Some(why) = slowdisk::unavailable() {
        r.skipped.push(format!("the emulated slow disk: {why}"));
        return Ok(r);
    }
    let etcd_bin = etcd::binary();
    if etcd_bin.is_none() {
        r.skipped.push("etcd is not installed (apt-get install etcd-server): no etcd rows".into());
    }
    let dir = opts.dir.join("slow-disk");
    std::fs::create_dir_all(&dir).map_err(super::e("dir"))?;
    slow_disk(&mut r, opts, &bin, etcd_bin.as_deref(), &dir)?;
    targets(&mut r, opts);
    Ok(r)
}

/// Vellum and etcd side by side on the emulated slow disk, 256 B values.
fn slow_disk(
    r: &mut SuiteResult,
    opts: &Options,
    bin: &Path,
    etcd_bin: Option<&Path>,
    dir: &Path,
) -> Result<(), String> {
    let ms = opts.slow_disk_ms;
    let mounts = slowdisk::Mounts::start(dir, 3, ms)?;
    let bare = slowdisk::Mounts::start(&dir.join("no-delay"), 3, 0.0)?;
    let vellum_on = |mounts: &slowdisk::Mounts, logs: &str| {
        let volumes: Vec<PathBuf> = mounts.points.iter().map(|p| p.join("vellum.vlm")).collect();
        start_vellum(bin, &dir.join(logs), Some(&volumes), "64MiB", &[], None)
    };
    // Each system, and the mounts under it.
    let mut systems = vec![System::new(VELLUM, vellum_on(&mounts, "vellum-logs")?)?];
    let mut under = vec![&mounts];
    if let Some(etcd_bin) = etcd_bin {
        let data: Vec<PathBuf> = mounts.points.iter().map(|p| p.join("etcd")).collect();
        let cluster = etcd::start(etcd_bin, &dir.join("etcd-logs"), &data)?;
        systems.push(System::new(ETCD, cluster)?);
        under.push(&mounts);
    }
    systems.push(System::new(NO_DELAY, vellum_on(&bare, "no-delay-logs")?)?);
    under.push(&bare);
    let base = |v: &str| match v {
        NO_DELAY => Some(VELLUM),
        VELLUM => etcd_bin.is_some().then_some(ETCD),
        _ => None,
    };
    let bar = opts.bar("slow disk", (opts.reps * CLIENTS.len() * systems.len()) as u64);
    for clients in CLIENTS {
        // At least 40 rounds of every client: the closed loop's steady state, not its start.
        let per_client =
            if clients == 1 { opts.n(60, 8) } else { opts.n((2560 / clients).max(40), 4) };
        let load = Load { clients, per_client, value_len: 256 };
        let case = format!("slow disk ({ms} ms per durable request), {}", case_name(clients, 256));
        let (mut lat, mut rate) = measurements(SUITE, &case, &systems, base);
        // Per system: durable requests on all mounts, on the leader's, FUSE writes, lock ms.
        let mut seen = vec![[0.0; 4]; systems.len()];
        // Per system: the machine's busy and total CPU ticks over the workloads.
        let mut cpu = vec![(0u64, 0u64); systems.len()];
        let mut batch = vec![(0.0, 0.0); systems.len()];
        let mut stages: Vec<Vec<(&str, f64)>> = vec![Vec::new(); systems.len()];
        for rep in 0..opts.reps {
            for j in 0..systems.len() {
                let k = (rep + j) % systems.len();
                let s = &systems[k];
                let vellum = s.variant != ETCD;
                let api = &s.cluster.apis[s.leader];
                let nodes = [api.as_str(), s.cluster.apis[(s.leader + 1) % 3].as_str()];
                let scraped = || -> [String; 2] {
                    if vellum { nodes.map(scrape) } else { Default::default() }
                };
                let (stage_before, batch_before) = (scraped(), vellum.then(|| batches(api)));
                let before = under[k].counts();
                let cpu_before = crate::sys::cpu_ticks();
                // The same keys every repetition (overwrites, as the cluster suite's): the
                // map stays within what its 64 MiB volumes hold twice (the space guard
                // refuses puts beyond, docs/OPERATIONS.md).
                let tag = format!("s-c{clients}");
                let (l, w) = workload(&s.cluster, s.leader, load, &tag)?;
                let after = under[k].counts();
                if let (Some(b), Some(a)) = (cpu_before, crate::sys::cpu_ticks()) {
                    cpu[k].0 += a.0 - b.0;
                    cpu[k].1 += a.1 - b.1;
                }
                if let Some(b) = batch_before {
                    let a = batches(api);
                    batch[k].0 += a.0 - b.0;
                    batch[k].1 += a.1 - b.1;
                    stages[k].extend(stage_means(&stage_before, &scraped()));
                }
                let d: Vec<slowdisk::Counts> =
                    after.iter().zip(&before).map(|(a, b)| *a - *b).collect();
                seen[k][0] += d.iter().map(|c| c.durable).sum::<f64>();
                seen[k][1] += d[s.leader].durable;
                seen[k][2] += d.iter().map(|c| c.writes).sum::<f64>();
                seen[k][3] += d.iter().map(|c| c.held_ms).sum::<f64>();
                lat[k].add_rep(l);
                rate[k].add_rep(vec![w]);
                bar.inc(1);
            }
        }
        let writes = (opts.reps * clients * per_client) as f64;
        for (k, (m, [durable, leader, fuse_writes, held])) in lat.iter_mut().zip(seen).enumerate() {
            let p999 = m.summary().p999;
            m.set_extra("p999 ms", p999);
            m.set_extra("durable requests/write (3 nodes)", durable / writes);
            m.set_extra("leader durable requests/write", leader / writes);
            m.set_extra("FUSE writes/write (3 nodes)", fuse_writes / writes);
            m.set_extra("ms per durable request", held / durable.max(1.0));
            if batch[k].1 > 0.0 {
                m.set_extra("mean proposal batch", batch[k].0 / batch[k].1);
            }
            if cpu[k].1 > 0 {
                // Clients, members and mounts together: what one write costs this machine.
                let busy = cpu[k].0 as f64 / cpu[k].1 as f64;
                m.set_extra("machine CPU busy %", busy * 100.0);
                let ticks_ms = 1e3 / 100.0; // USER_HZ is 100 on Linux
                m.set_extra("machine CPU ms per write", cpu[k].0 as f64 * ticks_ms / writes);
            }
            set_stage_means(m, &stages[k]);
        }
        r.measurements.extend(lat);
        r.measurements.extend(rate);
    }
    bar.finish_and_clear();
    // The clusters hold files on the mounts: stop them before unmounting.
    drop(systems);
    drop(under);
    drop(mounts);
    drop(bare);
    r.notes.push(format!("Slow disk: one bench/slowdisk.py FUSE passthrough mount per node, backed by the work dir; each fsync/fdatasync/fsyncdir request holds the mount's one lock for max({ms} ms, the real sync), writes pass through buffered. No direct_io on the mount (etcd's bbolt needs mmap), so an O_DSYNC write (Vellum's carrier opens O_DIRECT|O_DSYNC) arrives as a FUSE write then a FUSE fsync. Durable requests and FUSE writes are counted by the mounts over each workload and divided by the client writes; 'ms per durable request' is the lock time each held. Stages (Vellum): means per entry over the workload, on the leader and one follower ({} stages, docs/METRICS.md).", STAGES.len()));
    Ok(())
}

/// The slow-disk targets (docs/BENCHMARKS.md states each met or missed).
fn targets(r: &mut SuiteResult, opts: &Options) {
    let ms = opts.slow_disk_ms;
    let case = |clients: usize| {
        format!("slow disk ({ms} ms per durable request), {}", case_name(clients, 256))
    };
    let p50 = |r: &SuiteResult, clients: usize| {
        r.find(&case(clients), VELLUM).map(|m| m.summary().median)
    };
    let rate = |r: &SuiteResult, clients: usize| {
        r.find(&format!("{}: writes/s", case(clients)), VELLUM).map(|m| m.summary().median)
    };
    // What the disk's delay leaves to everything else, measured on the mounts without it:
    // the same node and clients, where a durable request costs the backing file's real sync
    // (`s0` ms). A round with the delay costs at least the delay's request plus the rest of
    // a round without it, so the rate of `n` clients is at most `n / (d + r0 - s0)`, where
    // `d` is the delayed request and `r0` the round without it (`n / rate`, or the p50 for
    // one client). An estimate from above: without the delay the node pipelines two entries.
    let held = |r: &SuiteResult, variant: &str, clients: usize| {
        r.find(&case(clients), variant).and_then(|m| m.extra("ms per durable request"))
    };
    let bound = |r: &SuiteResult, clients: usize| -> String {
        let (Some(d), Some(s0)) = (held(r, VELLUM, clients), held(r, NO_DELAY, clients)) else {
            return String::new();
        };
        let round0 = if clients == 1 {
            r.find(&case(1), NO_DELAY).map(|m| m.summary().median)
        } else {
            r.find(&format!("{}: writes/s", case(clients)), NO_DELAY)
                .map(|m| clients as f64 * 1e3 / m.summary().median)
        };
        let Some(round0) = round0 else { return String::new() };
        let rest = round0 - s0;
        let floor = d + rest;
        format!(
            "bound on this machine: a round without the delay takes {round0:.2} ms, {s0:.2} of \
             them its durable request, so {rest:.2} ms of commit path, fan-out and fan-in \
             (HTTP, Raft RPC, the FUSE round trips, 2 cores for clients, members and mounts); \
             with the delayed request ({d:.2} ms) a round takes at least {floor:.2} ms: {}",
            if clients == 1 {
                format!("a p50 of at least {floor:.2} ms")
            } else {
                format!("at most {:.0} writes/s", clients as f64 * 1e3 / floor)
            }
        )
    };
    let (bound1, bound16, bound64) = (bound(r, 1), bound(r, 16), bound(r, 64));
    let leader = r.find(&case(1), VELLUM).and_then(|m| m.extra("leader durable requests/write"));
    r.target(
        "slow disk, 1 client: the leader makes 1 durable request per write (2 with a durable save_committed)",
        leader,
        |x| x <= 1.05,
        "",
    );
    // The floor of one client is one durable request (the leader's and its followers' in
    // parallel) plus the network and apply: at most 9 ms on an 8 ms disk.
    let one = p50(r, 1).map(|x| x / ms);
    r.target(
        "slow disk, 1 client: vellum p50 <= 1.125 durable requests (9.0 ms at 8 ms)",
        one,
        |x| x <= 1.125,
        &bound1,
    );
    // The disk's limit for 64 closed-loop clients: 64 writes per durable request.
    let limit = |clients: usize| clients as f64 * 1e3 / ms;
    let r16 = rate(r, 16).map(|x| x / limit(16));
    r.target(
        "slow disk, 16 clients: vellum writes/s >= 0.75x 16 per durable request (1,500 at 8 ms)",
        r16,
        |x| x >= 0.75,
        &bound16,
    );
    let r64 = rate(r, 64).map(|x| x / limit(64));
    r.target("slow disk, 64 clients: vellum writes/s >= 0.75x the disk's limit, 64 per durable request (6,000 at 8 ms)", r64, |x| x >= 0.75, &bound64);
    let p64 = p50(r, 64).map(|x| x / ms);
    r.target(
        "slow disk, 64 clients: vellum p50 <= 1.5 durable requests (12 ms at 8 ms)",
        p64,
        |x| x <= 1.5,
        &bound64,
    );
    let r256 = rate(r, 256).map(|x| x * ms / 1e3);
    r.target(
        "slow disk, 256 clients: vellum writes per durable-request time >= 56 (7,000/s at 8 ms)",
        r256,
        |x| x >= 56.0,
        "",
    );
    let many = format!("{}: writes/s", case(64));
    let many_vs_etcd = r.ratio(&many, VELLUM).filter(|_| r.find(&many, ETCD).is_some());
    r.target(
        "slow disk, 64 clients: vellum writes/s >= 1.5x etcd's",
        many_vs_etcd,
        |x| x >= 1.5,
        "",
    );
}
