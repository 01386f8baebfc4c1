//! `multiraft`: many raft groups on one log against the same groups each on a log of its own,
//! at the log's level, through openraft 0.10 in one process, and as the sharded node.
//!
//! - **G groups, 256 writers**: writer `w` appends one 256-byte entry at a time to group
//!   `w % G` and waits until it is durable, for a fixed time. One shared log (`LogCore` groups
//!   in one volume) against G logs (one `LogCore` each, under its own directory of a volume
//!   of the same size: own segments, meta file and IO thread). Rows: appends/s, and the
//!   volume's durable writes per append (the carrier's count). With one log, the appends of
//!   every group queued during a write go out in the next; with G logs, each log makes its
//!   own.
//! - **16 regions x 64 entries x 4 KiB** (feature `peers`): raft-engine 0.4 writes one
//!   `LogBatch` holding the 16 regions' entries per round (one synced write); Vellum queues the
//!   16 groups' appends at once and waits for them (the combiner makes one durable write of
//!   them, or two past `max_batch_bytes`). Entries/s.
//! - **Space**: one hot group and 999 idle ones (two entries each), the hot group appending and
//!   purging behind itself for 10 minutes: the log's segments against its space bound (the
//!   idle groups rewritten forward), and without the bound (they pin every segment).
//! - **openraft harness**: three openraft 0.10 nodes in one process (the `harness` suite's
//!   network), G = 1, 16, 256 groups, 256 clients spread over the groups through each group's
//!   proposal batcher: one log per node for all groups against one log per group per node.
//!   Writes/s, and the leader's and a follower's durable writes per second.
//! - **The sharded node**: three `vellum serve --groups 16` processes against three of
//!   `--groups 1` and against etcd 3.4 (3 members), file volumes and data dirs on the same
//!   disk, 256 B values, 64 and 256 clients each waiting for its write before the next; then
//!   the same on the emulated slow disk (`slow-disk`'s FUSE mounts, every durable request
//!   `--slow-disk-ms`). The clients of `--groups 16` send each key to its group's leader (as a
//!   routing client does; any node would forward it); the others write to the leader.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vellum_engine::Volume;
use vellum_engine::carrier::CarrierOptions;
use vellum_raft_store::log::{self, LogConfig, LogCore, LogEntry};

use super::{e, fresh_volume};
use crate::stats::{Measurement, Unit};
use crate::{Options, SuiteResult};

const SHARED: &str = "vellum, one log for all groups";
const SEPARATE: &str = "vellum, one log per group";
const VALUE_BYTES: usize = 256;
/// Segments of every log in this suite (many separate logs each keep a current and a spare).
const SEGMENT_BYTES: u64 = 1 << 20;

fn config(dir: &str) -> LogConfig {
    LogConfig {
        dir: dir.into(),
        segment_bytes: SEGMENT_BYTES,
        hot_window_bytes: 1 << 20,
        recycled_segments: 0,
        ..LogConfig::default()
    }
}

/// One group's log handle and the next index to append, taken under its lock so that the
/// group's appends are queued in index order.
struct Target {
    log: LogCore,
    next: Mutex<u64>,
}

/// What one run did.
struct Run {
    appends: u64,
    secs: f64,
    durable_writes: u64,
}

/// `writers` threads append to `targets` (writer `w` to target `w % len`) for `duration`.
fn drive(volume: &Volume, targets: Vec<Target>, writers: usize, duration: Duration) -> Run {
    let targets = Arc::new(targets);
    let stop = Arc::new(AtomicBool::new(false));
    let before = volume.carrier_stats();
    let started = Instant::now();
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let (targets, stop) = (Arc::clone(&targets), Arc::clone(&stop));
            std::thread::spawn(move || {
                let t = &targets[w % targets.len()];
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let r = log::wait(|cb| {
                        let mut next =
                            t.next.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        let payload = crate::payload(VALUE_BYTES, *next ^ w as u64);
                        let entry = LogEntry { index: *next, term: 1, payload: Arc::from(payload) };
                        *next += 1;
                        t.log.append(vec![entry], cb)
                    });
                    r.unwrap_or_else(|e| panic!("append: {e}"));
                    done += 1;
                }
                done
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    let appends = threads.into_iter().map(|t| t.join().unwrap_or(0)).sum();
    let secs = started.elapsed().as_secs_f64();
    let ops = volume.carrier_stats() - before;
    Run { appends, secs, durable_writes: ops.durable_writes + ops.barriers }
}

/// G groups in one log of a fresh volume, or G logs in it.
fn run_groups(
    dir: &Path,
    groups: u64,
    shared: bool,
    writers: usize,
    duration: Duration,
    volume_bytes: u64,
) -> Result<Run, String> {
    let path = dir.join("multiraft.vlm");
    let volume = fresh_volume(&path, volume_bytes, CarrierOptions::PRODUCTION)?;
    let mut cores = Vec::new();
    let targets: Vec<Target> = if shared {
        let log = LogCore::open(volume.clone(), config("/raft")).map_err(e("log open"))?;
        let mut t = vec![Target { log: log.clone(), next: Mutex::new(1) }];
        for g in 1..groups {
            t.push(Target {
                log: log.create_group(g).map_err(e("create group"))?,
                next: Mutex::new(1),
            });
        }
        cores.push(log);
        t
    } else {
        (0..groups)
            .map(|g| {
                let log = LogCore::open(volume.clone(), config(&format!("/raft-{g}")))
                    .map_err(e("log open"))?;
                cores.push(log.clone());
                Ok(Target { log, next: Mutex::new(1) })
            })
            .collect::<Result<_, String>>()?
    };
    let run = drive(&volume, targets, writers, duration);
    for c in cores {
        c.close();
    }
    volume.close().map_err(e("close"))?;
    let _ = std::fs::remove_file(&path);
    Ok(run)
}

pub fn run(opts: &Options) -> Result<SuiteResult, String> {
    let mut r = SuiteResult::new("multiraft");
    std::fs::create_dir_all(&opts.dir).map_err(e("bench dir"))?;
    let writers = opts.n(256, 16);
    let duration = Duration::from_millis(opts.n(3000, 300) as u64);
    // At small scale the groups shrink with the writers (never more groups than writers).
    let mut sizes: Vec<u64> = [1u64, 16, 256].iter().map(|&g| g.min(writers as u64)).collect();
    sizes.dedup();
    let bar = opts.bar("multiraft", (sizes.len() * 2 * opts.reps) as u64);
    for &groups in &sizes {
        let case = format!("{groups} groups, {writers} writers, {VALUE_BYTES} B entries");
        let mut m = [
            Measurement::new("multiraft", &case, SHARED, Some(SEPARATE), Unit::OpsPerSec),
            Measurement::new("multiraft", &case, SEPARATE, None, Unit::OpsPerSec),
        ];
        let mut per_append = [0.0f64; 2];
        for _ in 0..opts.reps {
            for (i, shared) in [true, false].into_iter().enumerate() {
                // Room for every separate log's current and spare segment, and the appends.
                let volume_bytes =
                    opts.bytes(1 << 30, 256 << 20).max(groups * 4 * SEGMENT_BYTES + (256 << 20));
                let run = run_groups(&opts.dir, groups, shared, writers, duration, volume_bytes)?;
                m[i].add_rep(vec![run.appends as f64 / run.secs]);
                per_append[i] +=
                    run.durable_writes as f64 / run.appends.max(1) as f64 / opts.reps as f64;
                bar.inc(1);
            }
        }
        for (i, mut m) in m.into_iter().enumerate() {
            m.set_extra("durable writes per append", per_append[i]);
            r.measurements.push(m);
        }
        let ratio = r.ratio(&case, SHARED);
        let writes = per_append[0] / per_append[1];
        let bound = format!(
            "durable writes per append: one log {:.3}, one log per group {:.3} ({writes:.3}x)",
            per_append[0], per_append[1]
        );
        group_targets(&mut r, &case, groups, Some(writes), ratio, "appends", &bound);
    }
    bar.finish_and_clear();
    recovery(opts, &mut r)?;
    #[cfg(feature = "peers")]
    regions(opts, &mut r)?;
    space(opts, &mut r)?;
    harness(opts, &mut r)?;
    nodes(opts, &mut r)?;
    r.notes.push(format!("Log level, no openraft: each of {writers} writer threads appends one {VALUE_BYTES}-byte entry to group (writer mod G) and waits until it is durable, for {:.1} s a run. One log: the groups of one LogCore (segment format 6 on: a group id in every frame). One log per group: G LogCores under their own directories of a volume of the same size (own segments, meta file, IO thread), as G separate stores would be. 1 MiB segments everywhere. File volumes (O_DIRECT, write-through) on this machine's disk; 'durable writes per append' is the carrier's count of durable writes and barriers over the run.", duration.as_secs_f64()));
    Ok(r)
}

/// The targets for `groups` groups on one log against one log per group: at 16, at
/// most 1/4 of the durable writes (`durable`: the ratio per unit of work) and 2x the rate;
/// at 256, 4x the rate. `what` names the rate's unit (appends, writes).
fn group_targets(
    r: &mut SuiteResult,
    case: &str,
    groups: u64,
    durable: Option<f64>,
    rate: Option<f64>,
    what: &str,
    bound: &str,
) {
    let rate_target = |r: &mut SuiteResult, times: f64| {
        r.target(
            &format!("{case}: one log >= {times}x the {what}/s of one log per group"),
            rate,
            |x| x >= times,
            bound,
        );
    };
    match groups {
        16 => {
            r.target(
                &format!("{case}: one log makes <= 1/4 of the durable writes of one log per group"),
                durable,
                |x| x <= 0.25,
                bound,
            );
            rate_target(r, 2.0);
        }
        256 => rate_target(r, 4.0),
        _ => {}
    }
}

/// Opening a log whose bytes belong to 1,000 groups against one whose same bytes belong to one.
fn recovery(opts: &Options, r: &mut SuiteResult) -> Result<(), String> {
    let groups = opts.n(1000, 20) as u64;
    let log_bytes = opts.bytes(256 << 20, 16 << 20);
    // 4 KiB frames, 64 to a write, round robin over the groups.
    let per = 4096 - 48;
    let entries = log_bytes / 4096;
    let case = format!("open a log of {} MiB", log_bytes >> 20);
    let many = format!("{groups} groups");
    let mut m_many = Measurement::new("multiraft", &case, &many, Some("1 group"), Unit::Millis);
    let mut m_one = Measurement::new("multiraft", &case, "1 group", None, Unit::Millis);
    let config = LogConfig { segment_bytes: 64 << 20, ..LogConfig::default() };
    for (count, m) in [(1, &mut m_one), (groups, &mut m_many)] {
        let path = opts.dir.join("multiraft-recovery.vlm");
        let volume = fresh_volume(&path, log_bytes * 2 + (256 << 20), CarrierOptions::PRODUCTION)?;
        let log = LogCore::open(volume.clone(), config.clone()).map_err(e("log open"))?;
        let handles: Vec<LogCore> = std::iter::once(Ok(log.clone()))
            .chain((1..count).map(|g| log.create_group(g)))
            .collect::<Result<_, _>>()
            .map_err(e("create group"))?;
        let mut next = vec![0u64; count as usize];
        let mut written = 0;
        while written < entries {
            let (tx, rx) = std::sync::mpsc::channel();
            for k in 0..64 {
                let g = ((written + k) % count) as usize;
                let entry = LogEntry {
                    index: next[g],
                    term: 1,
                    payload: Arc::from(crate::payload(per, written + k)),
                };
                next[g] += 1;
                let tx = tx.clone();
                handles[g]
                    .append(vec![entry], Box::new(move |r| drop(tx.send(r))))
                    .map_err(e("append"))?;
            }
            drop(tx);
            for done in rx {
                done.map_err(|err| format!("append: {err}"))?;
            }
            written += 64;
        }
        log.close();
        drop((log, handles));
        volume.close().map_err(e("close"))?;
        for _ in 0..opts.reps {
            let mut opened = None;
            let ms = crate::sys::time_us(|| {
                let v = Volume::open_path(
                    &path,
                    CarrierOptions::PRODUCTION,
                    vellum_engine::VolumeOptions::default(),
                )
                .unwrap_or_else(|e| panic!("open: {e}"));
                let c = LogCore::open(v.clone(), config.clone())
                    .unwrap_or_else(|e| panic!("log open: {e}"));
                opened = Some((v, c));
            }) / 1e3;
            let (v, c) = opened.unwrap_or_else(|| panic!("open did not run"));
            assert_eq!(c.groups().len() as u64, count, "every group recovered");
            assert_eq!(c.recovery_report().entries as u64, written, "every entry recovered");
            c.close();
            drop((c, v));
            m.add_rep(vec![ms]);
        }
        let _ = std::fs::remove_file(&path);
    }
    r.measurements.push(m_many);
    r.measurements.push(m_one);
    let ratio = r.ratio(&case, &many);
    let extra = r
        .find(&case, &many)
        .zip(r.find(&case, "1 group"))
        .map(|(a, b)| a.summary().median - b.summary().median);
    let bound = format!(
        "bound: {:.1} ms more in all, {:.0} us per group: a file more in the volume's namespace (record blocks of its image to read at Volume::open), its meta file (read with its neighbours in a few requests while the segments are scanned) and its index; the one-group open varies by about 10% between runs",
        extra.unwrap_or(f64::NAN),
        extra.map_or(f64::NAN, |x| x * 1e3 / groups as f64)
    );
    r.target(
        &format!("{case}: {many} open within 1.1x of one group holding the same bytes"),
        ratio,
        |x| x <= 1.1,
        &bound,
    );
    r.notes.push(format!("Recovery: {} MiB of 4 KiB frames written 64 to a write, round robin over the groups; timed: Volume::open + LogCore::open (every group's meta file, one scan of the segments rebuilding every group's index), {} opens each.", log_bytes >> 20, opts.reps));
    Ok(())
}

/// The regions case: raft-engine's shape of many regions, each appending a run of 4 KiB
/// entries per round.
#[cfg(feature = "peers")]
const REGIONS: u64 = 16;
#[cfg(feature = "peers")]
const PER_REGION: u64 = 64;
#[cfg(feature = "peers")]
const BYTES: usize = 4096;

/// One run of the regions case on Vellum: 16 groups of one log on a fresh file volume,
/// `rounds` rounds of their appends queued at once, and every 4 rounds a purge of what the
/// groups wrote, the groups purging at once from a thread each (`purge_at_once`: their
/// `Purge` frames share a write) or one after another (a write each, as format 8's meta
/// saves were). Entries/s, and the carrier's durable requests (writes and barriers) per round.
#[cfg(feature = "peers")]
fn vellum_regions(
    opts: &Options,
    rounds: u64,
    payloads: &[Arc<[u8]>],
    purge_at_once: bool,
) -> Result<(f64, f64), String> {
    let vpath = opts.dir.join("multiraft-regions.vlm");
    let volume = fresh_volume(&vpath, opts.bytes(1 << 30, 256 << 20), CarrierOptions::PRODUCTION)?;
    // One write per round, as raft-engine's one `LogBatch` (the default 4 MiB would split a
    // round's 4.2 MB in two).
    let config = LogConfig {
        segment_bytes: 16 << 20,
        max_batch_bytes: 8 << 20,
        recycled_segments: 4,
        ..LogConfig::default()
    };
    let log = LogCore::open(volume.clone(), config).map_err(e("log open"))?;
    let groups: Vec<LogCore> = (1..=REGIONS)
        .map(|g| log.create_group(g))
        .collect::<Result<_, _>>()
        .map_err(e("create group"))?;
    // A purging thread per group, started before the clock (a node's groups have theirs).
    let (purges, purged) = std::sync::mpsc::channel();
    let measured = std::thread::scope(|s| {
        let workers: Vec<_> = groups
            .iter()
            .map(|group| {
                let (tx, rx) = std::sync::mpsc::channel::<u64>();
                let purged = purges.clone();
                s.spawn(move || {
                    for upto in rx {
                        drop(purged.send(group.purge(upto, vec![]).map_err(e("purge"))));
                    }
                });
                tx
            })
            .collect();
        let before = volume.carrier_stats();
        let started = Instant::now();
        for round in 0..rounds {
            let (tx, rx) = std::sync::mpsc::channel();
            for (g, group) in groups.iter().enumerate() {
                let entries: Vec<LogEntry> = (0..PER_REGION)
                    .map(|i| LogEntry {
                        index: 1 + round * PER_REGION + i,
                        term: 1,
                        payload: Arc::clone(&payloads[g * PER_REGION as usize + i as usize]),
                    })
                    .collect();
                let tx = tx.clone();
                group.append(entries, Box::new(move |r| drop(tx.send(r)))).map_err(e("append"))?;
            }
            drop(tx);
            for done in rx {
                done.map_err(|err| format!("append: {err}"))?;
            }
            // Keep the volume's space: purge what the rounds wrote once it is durable.
            if round % 4 != 3 {
                continue;
            }
            let upto = round * PER_REGION;
            if purge_at_once {
                for worker in &workers {
                    worker.send(upto).map_err(|_| "a purging thread ended".to_string())?;
                }
                for _ in &workers {
                    purged.recv().map_err(|_| "a purging thread ended".to_string())??;
                }
            } else {
                for group in &groups {
                    group.purge(upto, vec![]).map_err(e("purge"))?;
                }
            }
        }
        let rate = (rounds * REGIONS * PER_REGION) as f64 / started.elapsed().as_secs_f64();
        let ops = volume.carrier_stats() - before;
        let durable = (ops.durable_writes + ops.barriers) as f64 / rounds as f64;
        // Their channels closed, the purging threads end, and the scope returns.
        drop(workers);
        Ok::<_, String>((rate, durable))
    });
    let measured = measured?;
    log.close();
    drop(groups);
    volume.close().map_err(e("close"))?;
    let _ = std::fs::remove_file(&vpath);
    Ok(measured)
}

/// One hot group writing and purging behind itself while 999 idle groups keep two entries
/// each: the log's segments against its space bound, with the bound (rewrites of the idle
/// groups) and without it (the idle groups pin every segment).
fn space(opts: &Options, r: &mut SuiteResult) -> Result<(), String> {
    let idle = opts.n(999, 20) as u64;
    // Ten minutes at full scale (the run), with the square of the scale below it: a
    // run at small scale sees the same purges and rewrites in a few seconds (the smoke
    // test's 0.05 spent 30 s here, a sixth of its time, on a row it does not record).
    let secs = ((600.0 * opts.scale * opts.scale.min(1.0)) as u64).max(3);
    let case = format!("1 hot group + {idle} idle ones, 1 KiB entries");
    let bounded = "vellum, space bound 4x";
    let unbounded = "vellum, no space bound";
    let volume_bytes = opts.bytes(2 << 30, 256 << 20);
    let mut worst = 0.0f64;
    for (variant, factor, secs) in [(bounded, 4, secs), (unbounded, 0, secs.min(20))] {
        let path = opts.dir.join("multiraft-space.vlm");
        let volume = fresh_volume(&path, volume_bytes, CarrierOptions::PRODUCTION)?;
        let config = LogConfig {
            segment_bytes: SEGMENT_BYTES,
            space_factor: factor,
            ..LogConfig::default()
        };
        let log = LogCore::open(volume.clone(), config).map_err(e("log open"))?;
        let groups: Vec<LogCore> = (1..=idle)
            .map(|g| log.create_group(g))
            .collect::<Result<_, _>>()
            .map_err(e("group"))?;
        let (tx, rx) = std::sync::mpsc::channel();
        for (g, handle) in (1..).zip(&groups) {
            let entries = (1..=2)
                .map(|i| LogEntry {
                    index: i,
                    term: 1,
                    payload: Arc::from(crate::payload(VALUE_BYTES, g * 2 + i)),
                })
                .collect();
            let tx = tx.clone();
            handle.append(entries, Box::new(move |r| drop(tx.send(r)))).map_err(e("append"))?;
        }
        drop(tx);
        for done in rx {
            done.map_err(|err| format!("append: {err}"))?;
        }
        let (mut next, mut appends, mut max_used, mut rounds) = (1u64, 0u64, 0u64, 0u64);
        let payload: Arc<[u8]> = Arc::from(crate::payload(1024, 7));
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(secs) {
            let batch: Vec<LogEntry> = (next..next + 16)
                .map(|index| LogEntry { index, term: 1, payload: Arc::clone(&payload) })
                .collect();
            log::wait(|done| log.append(batch, done)).map_err(e("append"))?;
            next += 16;
            appends += 16;
            rounds += 1;
            if rounds % 16 == 0 {
                // Keep the newest 256 entries, as openraft keeps some behind its snapshot.
                log.purge(next.saturating_sub(257), Vec::new()).map_err(e("purge"))?;
                let (used, bound) = log.space();
                max_used = max_used.max(used);
                if let Some(bound) = bound {
                    worst = worst.max(used as f64 / bound as f64);
                }
                if used > volume_bytes / 2 {
                    break; // without a bound the log would fill the volume
                }
            }
        }
        let secs_run = start.elapsed().as_secs_f64();
        let (end_used, _) = log.space();
        let mut m = Measurement::new(
            "multiraft",
            &case,
            variant,
            (variant == bounded).then_some(unbounded),
            Unit::OpsPerSec,
        );
        m.add_rep(vec![appends as f64 / secs_run]);
        m.set_extra("seconds", secs_run);
        m.set_extra("MiB written", (appends * 1024) as f64 / f64::from(1 << 20));
        m.set_extra("max MiB of segments", max_used as f64 / f64::from(1 << 20));
        m.set_extra("MiB of segments at the end", end_used as f64 / f64::from(1 << 20));
        if variant == bounded {
            m.set_extra("worst segments / bound", worst);
        }
        r.measurements.push(m);
        log.close();
        drop((log, groups));
        volume.close().map_err(e("close"))?;
        let _ = std::fs::remove_file(&path);
    }
    let bound = format!(
        "the bound: 4x the live entries' bytes plus 4 segments of {} MiB; the log acts once over it, so it rides at the bound",
        SEGMENT_BYTES >> 20
    );
    r.target(
        &format!("{case}, {secs} s: the log's segments stay within the space bound after every purge (worst segments / bound <= 1)"),
        Some(worst),
        |x| x <= 1.0,
        &bound,
    );
    r.notes.push(format!("Space: {idle} idle groups append two {VALUE_BYTES}-byte entries each, then one hot group appends 16 entries of 1 KiB per durable write and purges every 256 entries, keeping the newest 256, for {secs} s (20 s at most without the bound, or until its segments take half the volume). With the bound the idle groups are rewritten forward as the purges need; without it they pin the first segment and every one after it. 1 MiB segments, a file volume on this machine's disk."));
    Ok(())
}

/// raft-engine's multi-region `LogBatch` against Vellum's combined write of 16 groups.
#[cfg(feature = "peers")]
fn regions(opts: &Options, r: &mut SuiteResult) -> Result<(), String> {
    use raft_engine::{Config, Engine, LogBatch, ReadableSize};
    use raft_proto::eraftpb::Entry;

    use super::peers::M;

    let rounds = opts.n(200, 4) as u64;
    let case = format!("{REGIONS} regions x {PER_REGION} entries x 4 KiB per round");
    let vellum = "vellum, 16 groups of one log, appends queued at once";
    let engine_name = "raft-engine 0.4, one LogBatch of 16 regions";
    let mut mv = Measurement::new("multiraft", &case, vellum, Some(engine_name), Unit::OpsPerSec);
    let mut me = Measurement::new("multiraft", &case, engine_name, None, Unit::OpsPerSec);
    let one_by_one = "vellum, as above, the groups purging one after another";
    let mut mseq =
        Measurement::new("multiraft", &case, one_by_one, Some(engine_name), Unit::OpsPerSec);
    let floor_name = "raw O_DIRECT|O_DSYNC write of the framed bytes, one per round";
    let mut mf =
        Measurement::new("multiraft", &case, floor_name, Some(engine_name), Unit::OpsPerSec);
    // What Vellum writes per round: every entry with its 48-byte frame header, padded.
    let round_bytes = ((REGIONS * PER_REGION) as usize * (BYTES + 48)).next_multiple_of(4096);
    // One round's entry bodies, made once: every round writes the same bytes under new
    // indexes, so neither engine's figure includes making them.
    let made: Vec<Vec<u8>> =
        (0..REGIONS * PER_REGION).map(|i| crate::payload(BYTES, i + 1)).collect();
    let bodies: Vec<bytes::Bytes> = made.iter().map(|b| bytes::Bytes::from(b.clone())).collect();
    let shared: Vec<Arc<[u8]>> = made.iter().map(|b| Arc::from(b.as_slice())).collect();
    let mut durable = [0.0f64; 2];
    for _ in 0..opts.reps {
        // The floor: the same bytes per round with one write-through write, over 16 rounds'
        // worth of a zero-filled file (overwritten in turn, as a log's recycled space is).
        let fpath = opts.dir.join("multiraft-floor.bin");
        std::fs::write(&fpath, vec![0u8; 16 * round_bytes]).map_err(e("floor file"))?;
        let f = crate::sys::open_direct(&fpath, true).map_err(e("floor open"))?;
        let mut buf = vellum_engine::AlignedBuf::zeroed(round_bytes, 4096);
        buf.as_mut_slice().copy_from_slice(&crate::payload(round_bytes, 7));
        let started = Instant::now();
        for round in 0..rounds {
            use std::os::unix::fs::FileExt;
            f.write_all_at(buf.as_slice(), (round % 16) * round_bytes as u64)
                .map_err(e("floor write"))?;
        }
        mf.add_rep(vec![(rounds * REGIONS * PER_REGION) as f64 / started.elapsed().as_secs_f64()]);
        drop(f);
        let _ = std::fs::remove_file(&fpath);
        // raft-engine.
        let path = opts.dir.join("raft-engine-regions");
        let _ = std::fs::remove_dir_all(&path);
        let config = Config {
            dir: path.to_string_lossy().into_owned(),
            purge_threshold: ReadableSize::gb(2),
            ..Config::default()
        };
        let engine = Engine::open(config).map_err(e("raft-engine open"))?;
        let started = Instant::now();
        for round in 0..rounds {
            let mut batch = LogBatch::default();
            for region in 1..=REGIONS {
                let entries: Vec<Entry> = (0..PER_REGION)
                    .map(|i| {
                        let index = 1 + round * PER_REGION + i;
                        Entry {
                            index,
                            term: 1,
                            data: bodies[((region - 1) * PER_REGION + i) as usize].clone(),
                            ..Entry::default()
                        }
                    })
                    .collect();
                batch.add_entries::<M>(region, &entries).map_err(e("raft-engine batch"))?;
            }
            engine.write(&mut batch, true).map_err(e("raft-engine write"))?;
        }
        me.add_rep(vec![(rounds * REGIONS * PER_REGION) as f64 / started.elapsed().as_secs_f64()]);
        drop(engine);
        let _ = std::fs::remove_dir_all(&path);
        // Vellum, its groups purging at once (as a node's do), then one after another.
        for (i, (purge_at_once, m)) in [(true, &mut mv), (false, &mut mseq)].into_iter().enumerate()
        {
            let (rate, per_round) = vellum_regions(opts, rounds, &shared, purge_at_once)?;
            m.add_rep(vec![rate]);
            durable[i] += per_round / opts.reps as f64;
        }
    }
    mv.set_extra("durable requests per round", durable[0]);
    mseq.set_extra("durable requests per round", durable[1]);
    r.measurements.push(mv);
    r.measurements.push(mseq);
    r.measurements.push(me);
    r.measurements.push(mf);
    let ratio = r.ratio(&case, vellum);
    let floor = r.ratio(&case, floor_name);
    let one_after_another = r.ratio(&case, one_by_one);
    let bound = format!(
        "bound: the disk's own write-through write of the same bytes, one per round, runs at {:.3}x raft-engine's entries/s; vellum reaches {:.3} of that floor with {:.2} durable requests per round (the round's write; the rest are rolls, purge frames, the spare's recycling and the freed segments' commits) ({:.3}x raft-engine with the groups purging one after another, a write each: {:.2} per round)",
        floor.unwrap_or(f64::NAN),
        ratio.zip(floor).map_or(f64::NAN, |(v, f)| v / f),
        durable[0],
        one_after_another.unwrap_or(f64::NAN),
        durable[1]
    );
    r.target(
        &format!("{case}: vellum entries/s >= 1.5x raft-engine's"),
        ratio,
        |x| x >= 1.5,
        &bound,
    );
    r.notes.push(format!("Regions: {rounds} rounds of 16 x 64 entries of 4 KiB (random bytes, so raft-engine's lz4 gains nothing; made once before the rounds, so neither figure includes making them). raft-engine 0.4 with its default configuration (buffered writes, one fdatasync per synced LogBatch; purge threshold raised to 2 GiB so that no purge runs), one LogBatch per round. Vellum: 16 groups of one log on a file volume, each round's 16 appends queued at once and waited for; max_batch_bytes 8 MiB so that a round is one write (the default, 4 MiB, splits it in two); every 4 rounds the 16 groups purge what they wrote, all at once as a node's groups do, each from a thread of its own started before the clock (their purge points share one write as `Purge` frames, segment format 9; then the freed segments' commit, which raft-engine's run does not pay), and the freed segments are recycled as later ones (up to 4 kept), as a node's are; without the purges and recycling every roll zero-fills a new 16 MiB segment beside the appends (0.86x raft-engine in a run of that configuration). The floor writes what Vellum writes per round ({round_bytes} bytes: entries, 48-byte frame headers, padding) with one O_DIRECT|O_DSYNC pwrite. The row of the groups purging one after another runs the same with each purge waiting for a write of its own (what format 8's meta saves cost every purge): the difference is what sharing the purge points' write buys."));
    Ok(())
}

const NODE_SHARDED: &str = "vellum, 3 nodes, --groups 16";
const NODE_ONE: &str = "vellum, 3 nodes, --groups 1";
const NODE_ETCD: &str = "etcd 3.4.23, 3 members";
/// Groups of the sharded node rows.
pub(super) const NODE_GROUPS: usize = 16;

/// The group of `key` among `groups`: the node's hash (`node/src/server/groups.rs`, FNV-1a),
/// so that the bench's clients send a key to its group's leader.
pub(super) fn group_of(key: &str, groups: usize) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % groups as u64) as usize
}

/// Each group's leader as member index (node id - 1), from member 0's status; waits (up to
/// 30 s) until every group has one and each is where the balancer puts it.
pub(super) fn group_leaders(c: &super::cluster::Cluster) -> Result<Vec<usize>, String> {
    let http = c.client();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let leaders: Option<Vec<usize>> = http
            .get(format!("{}/v1/cluster/status", c.apis[0]))
            .send()
            .ok()
            .and_then(|r| r.json::<serde_json::Value>().ok())
            .and_then(|v| {
                v["groups"]
                    .as_array()?
                    .iter()
                    .map(|g| Some(g["leader"].as_u64()? as usize - 1))
                    .collect()
            });
        // With every member live the balancer's target is exact: group g led by the g-th
        // voter in id order (`groups::assignment`). Spread within one is not enough: the
        // balancer would still be moving leaders while the run measures.
        let placed = |l: &Vec<usize>| {
            l.len() == NODE_GROUPS && l.iter().enumerate().all(|(g, leader)| *leader == g % 3)
        };
        if let Some(l) = leaders.filter(placed) {
            return Ok(l);
        }
        if Instant::now() > deadline {
            return Err("the sharded node's group leaders did not spread in 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The sharded node against one group and etcd, on this disk and on the emulated slow one.
fn nodes(opts: &Options, r: &mut SuiteResult) -> Result<(), String> {
    use super::cluster::{etcd, slowdisk, vellum_bin};
    let Some(bin) = vellum_bin() else {
        r.skipped.push("the sharded node rows: the vellum binary is not built next to vellum-bench (cargo build --release -p vellum-node)".into());
        return Ok(());
    };
    let etcd_bin = etcd::binary();
    if etcd_bin.is_none() {
        r.skipped.push("etcd is not installed (apt-get install etcd-server): no etcd rows in the sharded node's cases".into());
    }
    let dir = opts.dir.join("multiraft-nodes");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(e("dir"))?;
    node_rows(r, opts, &bin, etcd_bin.as_deref(), &dir, None, &[])?;
    let slow = if opts.slow_disk_ms <= 0.0 {
        Some("--slow-disk-ms 0".to_string())
    } else {
        slowdisk::unavailable()
    };
    if let Some(why) = slow {
        r.skipped.push(format!("the sharded node on the emulated slow disk: {why}"));
    } else {
        let mounts = slowdisk::Mounts::start(&dir.join("slow"), 3, opts.slow_disk_ms)?;
        let points = mounts.points.clone();
        node_rows(r, opts, &bin, etcd_bin.as_deref(), &dir, Some(opts.slow_disk_ms), &points)?;
        drop(mounts);
    }
    r.notes.push(format!("Sharded node: three processes per cluster on loopback, file volumes of 64 MiB (direct IO, write-through) and etcd's data dirs on the same disk (or on the same slow-disk mounts); {NODE_GROUPS} groups hashed by key (FNV-1a), the clients of the sharded node sending each key to its group's leader (read from /v1/cluster/status before each run; the leaders are spread within one by the node's balancer), the others to the leader. Every member shares this machine's 2 cores with the clients, so the sharded node cannot gain from more CPUs here, only from more leaders' batches in flight."));
    Ok(())
}

/// One disk's rows: `slow` is the slow disk's milliseconds, with its mount `points`.
fn node_rows(
    r: &mut SuiteResult,
    opts: &Options,
    bin: &Path,
    etcd_bin: Option<&Path>,
    dir: &Path,
    slow: Option<f64>,
    points: &[std::path::PathBuf],
) -> Result<(), String> {
    use super::cluster::{Load, System, etcd, start_vellum, workload_routed};
    let disk = match slow {
        Some(ms) => format!("slow disk ({ms} ms per durable request), "),
        None => String::new(),
    };
    let at = |i: usize, name: &str| match slow {
        Some(_) => points[i].join(name),
        None => dir.join(format!("n{i}-{name}")),
    };
    let volumes = |tag: &str| -> Vec<std::path::PathBuf> {
        (0..3).map(|i| at(i, &format!("{tag}.vlm"))).collect()
    };
    let groups_arg = |g: usize| vec![vec!["--groups".to_string(), g.to_string()]; 3];
    let logs = |tag: &str| dir.join(format!("{}{tag}", if slow.is_some() { "slow-" } else { "" }));
    let sharded = start_vellum(
        bin,
        &logs("g16"),
        Some(&volumes("g16")),
        "64MiB",
        &groups_arg(NODE_GROUPS),
        None,
    )?;
    // The balancer moves leaders for a moment after the start: measure once they are spread.
    group_leaders(&sharded)?;
    let mut systems = vec![
        System::new(NODE_SHARDED, sharded)?,
        System::new(
            NODE_ONE,
            start_vellum(bin, &logs("g1"), Some(&volumes("g1")), "64MiB", &groups_arg(1), None)?,
        )?,
    ];
    if let Some(etcd_bin) = etcd_bin {
        let data: Vec<std::path::PathBuf> = (0..3).map(|i| at(i, "etcd")).collect();
        systems.push(System::new(NODE_ETCD, etcd::start(etcd_bin, &logs("etcd"), &data)?)?);
    }
    let base = |v: &str| match v {
        NODE_SHARDED => Some(NODE_ONE),
        NODE_ONE if etcd_bin.is_some() => Some(NODE_ETCD),
        _ => None,
    };
    let bar = opts.bar("multiraft nodes", (opts.reps * 2 * systems.len()) as u64);
    for clients in [64usize, 256] {
        let per_client = opts.n(2560 / clients, 4);
        let load = Load { clients, per_client, value_len: 256 };
        let case = format!("{disk}3 nodes, {clients} clients, 256 B values: writes/s");
        let mut rate: Vec<Measurement> = systems
            .iter()
            .map(|s| {
                Measurement::new("multiraft", &case, s.variant, base(s.variant), Unit::OpsPerSec)
            })
            .collect();
        // Per system: the machine's busy and total CPU ticks over its workloads.
        let mut cpu = vec![(0u64, 0u64); systems.len()];
        for rep in 0..opts.reps {
            for j in 0..systems.len() {
                let k = (rep + j) % systems.len();
                let s = &systems[k];
                // The same keys every repetition (overwrites): the map stays within what
                // the 64 MiB volumes hold twice (the space guard refuses puts beyond).
                let tag = format!("m-c{clients}");
                let cpu_before = crate::sys::cpu_ticks();
                let (_, w) = if s.variant == NODE_SHARDED {
                    let leaders = group_leaders(&s.cluster)?;
                    let route = move |key: &str| leaders[group_of(key, NODE_GROUPS)];
                    workload_routed(&s.cluster, &route, load, &tag)?
                } else {
                    let leader = s.leader;
                    workload_routed(&s.cluster, &move |_| leader, load, &tag)?
                };
                if let (Some(b), Some(a)) = (cpu_before, crate::sys::cpu_ticks()) {
                    cpu[k].0 += a.0 - b.0;
                    cpu[k].1 += a.1 - b.1;
                }
                rate[k].add_rep(vec![w]);
                bar.inc(1);
            }
        }
        let writes = (opts.reps * clients * per_client) as f64;
        for (m, (busy, total)) in rate.iter_mut().zip(cpu) {
            if total > 0 {
                // Clients, members (and mounts) together: what one write costs this machine.
                m.set_extra("machine CPU busy %", busy as f64 * 100.0 / total as f64);
                m.set_extra("machine CPU ms per write", busy as f64 * 10.0 / writes);
            }
        }
        r.measurements.extend(rate);
        let versus = |a: &str, b: &str| {
            Some(r.find(&case, a)?.summary().median / r.find(&case, b)?.summary().median)
        };
        let etcd_ratio = versus(NODE_SHARDED, NODE_ETCD);
        let cpu_of = |v: &str| r.find(&case, v).and_then(|m| m.extra("machine CPU ms per write"));
        let busy = r.find(&case, NODE_SHARDED).and_then(|m| m.extra("machine CPU busy %"));
        let mut bound = match etcd_ratio {
            Some(x) => format!("--groups 16 is {x:.2}x etcd's writes/s"),
            None => "no etcd in this run".into(),
        };
        if let (Some(g16), Some(g1), Some(busy)) = (cpu_of(NODE_SHARDED), cpu_of(NODE_ONE), busy) {
            let _ = write!(
                bound,
                "; the machine's 2 cores were {busy:.0}% busy, and a write cost them {g16:.2} ms of CPU with 16 groups against {g1:.2} ms with one (smaller batches per group, a heartbeat stream per group and peer): the members share this machine's CPU, so more leaders cannot add any"
            );
        }
        let (want, what) = if slow.is_some() { (3.0, "3x") } else { (2.0, "2x") };
        r.target(
            &format!("{case}: --groups 16 >= {what} --groups 1"),
            r.ratio(&case, NODE_SHARDED),
            |x| x >= want,
            &bound,
        );
    }
    bar.finish_and_clear();
    drop(systems);
    Ok(())
}

const HARNESS_SHARED: &str = "openraft 0.10 x 3 nodes, one log per node for all groups";
const HARNESS_SEPARATE: &str = "openraft 0.10 x 3 nodes, one log per group per node";

/// What one harness run did.
struct HarnessRun {
    /// Client writes per second.
    rate: f64,
    /// Client writes in the timed run.
    writes: f64,
    /// Durable writes (and barriers) of the leader's volume per second.
    leader_durable: f64,
    /// The same of a follower's volume.
    follower_durable: f64,
    /// The machine's CPU ticks (busy, total) over the timed run.
    machine: (u64, u64),
    /// This process's CPU nanoseconds over the timed run: (Vellum's threads, all threads).
    process: (u64, u64),
}

/// The Vellum threads of a harness run: the logs' IO and spare threads, the volumes'
/// readahead. The rest of the process is openraft's tasks, the harness's network and the
/// clients on the runtime's workers; the bench's main thread only waits.
fn vellum_thread(name: &str) -> bool {
    name.starts_with("vellum-") && name != "vellum-bench"
}

/// G openraft 0.10 groups on three nodes in one process (the `harness` suite's in-memory
/// network), node 1 leading every group; `clients` tasks, client `c` writing to group
/// `c % G` through that group's proposal batcher, as the node does. `shared`: each node's
/// groups are groups of one log (`v010::open_group`); else each group has its own log on the
/// node's volume (`v010::open_store` under its own directory).
fn harness_run(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    groups: usize,
    shared: bool,
    clients: usize,
    secs: f64,
    volume_bytes: u64,
) -> Result<HarnessRun, String> {
    use super::harness::{net010, workload};
    use vellum_raft_store::v010;
    use vellum_raft_store::{BatchLimits, KvBatching, KvNode, KvOp};
    let vols: Vec<Volume> = (1..=3)
        .map(|id| {
            fresh_volume(
                &dir.join(format!("hnode-{id}.vlm")),
                volume_bytes,
                CarrierOptions::PRODUCTION,
            )
        })
        .collect::<Result<_, _>>()?;
    // Per node, per group: (log store, state machine).
    let mut per_group: Vec<Vec<(v010::LogStore<v010::TypeConfig>, v010::KvStateMachine)>> =
        (0..groups).map(|_| Vec::new()).collect();
    let mut logs = Vec::new();
    for v in &vols {
        if shared {
            let log = LogCore::open(v.clone(), config("/raft")).map_err(e("log open"))?;
            for (g, stores) in per_group.iter_mut().enumerate() {
                stores.push(v010::open_group(v, &log, "/raft", g as u64).map_err(e("group"))?);
            }
            logs.push(log);
        } else {
            for (g, stores) in per_group.iter_mut().enumerate() {
                let store =
                    v010::open_store(v, config(&format!("/raft-{g}"))).map_err(e("open store"))?;
                logs.push(store.0.core().clone());
                stores.push(store);
            }
        }
    }
    let node = |id: u64| KvNode { raft_addr: format!("node-{id}"), api_addr: String::new() };
    let outcome = rt.block_on(async {
        let mut raft_config = (*net010::config()?).clone();
        raft_config.broadcast_submitted_on_append = Some(true);
        // The node's default timing (`vellum serve`: 100 ms heartbeats, elections after 4 to
        // 8 of them). The harness's own 50 ms and 300 ms lost leadership under 256 groups'
        // load on 2 cores, which ended the suite.
        raft_config.heartbeat_interval = 100;
        raft_config.election_timeout_min = 400;
        raft_config.election_timeout_max = 800;
        let raft_config = Arc::new(raft_config);
        let mut clusters = Vec::new();
        for stores in per_group {
            clusters.push(net010::Cluster::start(stores, Arc::clone(&raft_config), node).await?);
        }
        let limits = BatchLimits { max_in_flight: 2, ..BatchLimits::default() };
        let batchers: Arc<Vec<v010::KvBatcher>> = Arc::new(
            clusters
                .iter()
                .map(|c| v010::KvBatcher::start(c.leader().clone(), KvBatching, limits))
                .collect(),
        );
        let write = move |client: usize, seq: u64, value: Vec<u8>| {
            let batcher = batchers[client % batchers.len()].clone();
            let op = KvOp::Put { key: format!("c{client}-{}", seq % 256), value };
            async move { batcher.propose(op).await.map(drop).map_err(|err| err.to_string()) }
        };
        let write = Arc::new(write);
        let load = |secs: f64| workload::Load {
            clients,
            duration: Duration::from_secs_f64(secs),
            value_bytes: VALUE_BYTES,
        };
        let w = Arc::clone(&write);
        workload::drive(load(secs / 4.0), move |c, s, v| w(c, s, v)).await?;
        let before = (vols[0].carrier_stats(), vols[1].carrier_stats());
        let ticks = (crate::sys::cpu_ticks(), crate::sys::thread_cpu_ns());
        let w = Arc::clone(&write);
        let outcome = workload::drive(load(secs), move |c, s, v| w(c, s, v)).await?;
        let leader = vols[0].carrier_stats() - before.0;
        let follower = vols[1].carrier_stats() - before.1;
        let process = crate::sys::thread_cpu_ns_since(&ticks.1, vellum_thread);
        let cpu = match (ticks.0, crate::sys::cpu_ticks()) {
            (Some(m0), Some(m1)) => ((m1.0 - m0.0, m1.1 - m0.1), process),
            _ => ((0, 0), (0, 0)),
        };
        for c in clusters {
            c.shutdown().await;
        }
        Ok::<_, String>((outcome, leader, follower, cpu))
    })?;
    let (outcome, leader, follower, (machine, process)) = outcome;
    for log in logs {
        log.close();
    }
    for (id, v) in (1..=3).zip(vols) {
        v.close().map_err(e("close"))?;
        let _ = std::fs::remove_file(dir.join(format!("hnode-{id}.vlm")));
    }
    Ok(HarnessRun {
        rate: outcome.writes_per_sec(),
        writes: outcome.writes_per_sec() * outcome.secs,
        leader_durable: (leader.durable_writes + leader.barriers) as f64 / outcome.secs,
        follower_durable: (follower.durable_writes + follower.barriers) as f64 / outcome.secs,
        machine,
        process,
    })
}

/// The openraft harness rows: G = 1, 16, 256 groups on one log per node against one log per
/// group per node.
fn harness(opts: &Options, r: &mut SuiteResult) -> Result<(), String> {
    let clients = opts.n(256, 16);
    let secs = opts.n(3000, 300) as f64 / 1e3;
    let mut sizes: Vec<usize> = [1usize, 16, 256].iter().map(|&g| g.min(clients)).collect();
    sizes.dedup();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(e("runtime"))?;
    let dir = opts.dir.join("multiraft-harness");
    std::fs::create_dir_all(&dir).map_err(e("dir"))?;
    let bar = opts.bar("multiraft harness", (sizes.len() * 2 * opts.reps) as u64);
    for &groups in &sizes {
        let case =
            format!("openraft harness: {groups} groups, {clients} clients, {VALUE_BYTES} B writes");
        let mut m = [
            Measurement::new(
                "multiraft",
                &case,
                HARNESS_SHARED,
                Some(HARNESS_SEPARATE),
                Unit::OpsPerSec,
            ),
            Measurement::new("multiraft", &case, HARNESS_SEPARATE, None, Unit::OpsPerSec),
        ];
        let mut durable = [[0.0f64; 2]; 2];
        // Per side: the leader's durable writes and the client writes over all runs.
        let mut per_write = [(0.0f64, 0.0f64); 2];
        // Per side, over all runs: the machine's CPU ticks (busy, total), this process's CPU
        // nanoseconds (Vellum's threads, all) and client writes.
        let mut cpu = [([0u64; 4], 0.0f64); 2];
        for _ in 0..opts.reps {
            for (i, shared) in [true, false].into_iter().enumerate() {
                let volume_bytes = opts
                    .bytes(512 << 20, 128 << 20)
                    .max(groups as u64 * 4 * SEGMENT_BYTES + (128 << 20));
                let run = harness_run(&rt, &dir, groups, shared, clients, secs, volume_bytes)?;
                m[i].add_rep(vec![run.rate]);
                durable[i][0] += run.leader_durable / opts.reps as f64;
                durable[i][1] += run.follower_durable / opts.reps as f64;
                per_write[i].0 += run.leader_durable;
                per_write[i].1 += run.rate;
                let t = &mut cpu[i].0;
                t[0] += run.machine.0;
                t[1] += run.machine.1;
                t[2] += run.process.0;
                t[3] += run.process.1;
                cpu[i].1 += run.writes;
                bar.inc(1);
            }
        }
        // Microseconds of CPU per client write, and the cores' busy share.
        let per = |ns: u64, writes: f64| ns as f64 / 1e3 / writes.max(1.0);
        let busy = |t: &[u64; 4]| t[0] as f64 * 100.0 / t[1].max(1) as f64;
        for (i, mut m) in m.into_iter().enumerate() {
            m.set_extra("leader durable writes/s", durable[i][0]);
            m.set_extra("follower durable writes/s", durable[i][1]);
            m.set_extra("leader durable writes per write", per_write[i].0 / per_write[i].1);
            let (t, writes) = &cpu[i];
            if t[1] > 0 {
                m.set_extra("machine CPU busy %", busy(t));
                m.set_extra("process CPU us per write", per(t[3], *writes));
                m.set_extra("Vellum threads' CPU us per write", per(t[2], *writes));
            }
            r.measurements.push(m);
        }
        let ratio = r.ratio(&case, HARNESS_SHARED);
        let (shared, separate) =
            (per_write[0].0 / per_write[0].1, per_write[1].0 / per_write[1].1.max(1e-9));
        let writes = shared / separate.max(1e-9);
        let mut bound = format!(
            "leader durable writes per client write: one log {shared:.3}, one log per group \
             {separate:.3} ({writes:.3}x); per second {:.0} and {:.0}",
            durable[0][0], durable[1][0]
        );
        let ((one, one_writes), (many, many_writes)) = (&cpu[0], &cpu[1]);
        if one[1] > 0 && many[1] > 0 {
            let (one_all, one_ours) = (per(one[3], *one_writes), per(one[2], *one_writes));
            let (many_all, many_ours) = (per(many[3], *many_writes), per(many[2], *many_writes));
            // Vellum's threads' CPU per durable write of the three nodes' volumes (the second
            // follower's counted as the first's).
            let per_durable = |ours: f64, i: usize| {
                let durable_per_sec = durable[i][0] + 2.0 * durable[i][1];
                let writes_per_sec = per_write[i].1 / opts.reps as f64;
                ours * writes_per_sec / durable_per_sec.max(1e-9)
            };
            let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
            // What the cores could do if the log cost no CPU: their capacity over the rest.
            let cap = cores as f64 * 1e6 / (one_all - one_ours).max(1.0);
            let separate_rate = r.find(&case, HARNESS_SEPARATE).map(|m| m.summary().median);
            let _ = write!(
                bound,
                "; CPU ({cores} cores, {:.0}% and {:.0}% busy): a client write cost this \
                 process {one_all:.0} us with one log and {many_all:.0} us with one log per \
                 group; Vellum's threads (the logs' IO and spares) took {one_ours:.0} and \
                 {many_ours:.0} us of those ({:.0} and {:.0} us per durable write of a node); \
                 the rest (openraft's tasks, the harness's network, the clients) {:.0} and \
                 {:.0} us",
                busy(one),
                busy(many),
                per_durable(one_ours, 0),
                per_durable(many_ours, 1),
                one_all - one_ours,
                many_all - many_ours,
            );
            if let Some(separate) = separate_rate {
                let _ = write!(
                    bound,
                    ": with a log that cost no CPU, one log could make at most {cap:.0} \
                     writes/s on these cores, {:.2}x one log per group",
                    cap / separate.max(1e-9)
                );
            }
        }
        group_targets(r, &case, groups as u64, Some(writes), ratio, "writes", &bound);
    }
    bar.finish_and_clear();
    r.notes.push(format!("openraft harness: three openraft 0.10 nodes in one process (the harness suite's network, a function call), G groups each an openraft instance on every node, node 1 leading all; {clients} client tasks, client c writing 256 B to group c mod G through the group's proposal batcher (2 entries in flight, broadcast_submitted_on_append, 100 ms heartbeats and 400 to 800 ms election timeouts: the node's configuration), {secs:.1} s a run after a quarter of that to warm up. One log per node: the G groups of one LogCore (v010::open_group). One log per group per node: G stores under their own directories of the node's volume (own segments, meta file, IO thread), as G separate stores would be. File volumes, 1 MiB segments; durable writes are the volume's count of write-through writes and barriers; CPU is the scheduler's run time of this process's threads over the timed run (/proc/self/task/*/schedstat), Vellum's threads told by name (vellum-log-io, vellum-spare, the volumes' readahead)."));
    Ok(())
}
