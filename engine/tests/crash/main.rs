//! Crash consistency, proven: seeded random workloads on the fault-injecting carrier, power
//! cut at a random operation, then reopen and compare with the model.
//!
//! After every cut the recovered volume must equal the last durable commit (or the commit in
//! flight, if its first barrier made it durable) byte for byte, except sectors that a write
//! in flight may have torn; `check` must find no damage before open and nothing at all after
//! a clean close (bitmap = reachable set, no leaks, no double use); open must never fail.
//! A second power cut during recovery, at any of its operations, must not change what is
//! recovered; neither must up to five cuts in a row (`loops`: each during the previous
//! recovery or the first commits after it, also at the same journal ring position).
//!
//! On journaled volumes the campaign also destroys the whole ring now and then (the volume
//! must open at its last checkpoint and report the loss at every later open, through cuts
//! of its recovery) and damages parts of it (open must refuse, or lose at most the last
//! batch: a checksum cannot tell rot at the tail from a torn write).
//!
//! The campaign prints the failing seed; rerun one with `VELLUM_CRASH_SEED=<seed>`. The
//! mutant tests break the protocol on purpose and require the checker to notice. Counts of
//! cuts, loops and damage are printed (`--nocapture`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod concurrent;
mod loops;
mod members;
mod model;

use std::sync::Arc;

use model::{BS, Model, Node, SECTOR, State};
use vellum_engine::carrier::{CrashPlan, FaultRng, FaultyCarrier, MemoryCarrier};
use vellum_engine::{
    CommitMutation, FileKind, FormatOptions, OpenReport, Volume, VolumeOptions, check,
};

thread_local! {
    /// Power cuts landed during a recovery's own writes (per test thread: a campaign counts
    /// its own).
    static RECOVERY_CUTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Runs whose journal ring was destroyed after the cut.
    static RINGS_DESTROYED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn bump(counter: &'static std::thread::LocalKey<std::cell::Cell<u64>>) {
    counter.with(|c| c.set(c.get() + 1));
}

fn count(counter: &'static std::thread::LocalKey<std::cell::Cell<u64>>) -> u64 {
    counter.with(std::cell::Cell::get)
}

const VOLUME_BYTES: u64 = 4 << 20;
const OPS_PER_RUN: usize = 48;
/// Blocks a growing volume starts with (512 KiB), most of them taken by a ballast file: the
/// workload outgrows the bound in most runs.
const GROW_FROM_BLOCKS: u64 = 128;
/// Journal ring of the journaled configurations: small, so that batches wrap around and the
/// fill threshold checkpoints every few commits.
const JOURNAL_BLOCKS: u64 = 8;

#[derive(Debug, Clone, Copy)]
struct Config {
    write_through: bool,
    /// Run with a page cache of 16 pages (evicting and writing back all the time): buffered
    /// writes become durable at the next completed commit, not at the next barrier.
    cache: bool,
    /// Format with a journal: commits are journal batches, checkpoints come with the ring.
    journal: bool,
    /// Auto-grow: start at `GROW_FROM_BLOCKS` and grow (doubling) up to the carrier's
    /// 4 MiB, so the workload's writes and commits cross growth steps.
    grow: bool,
    mutation: Option<CommitMutation>,
}

fn options(cfg: Config) -> VolumeOptions {
    let cache_bytes = Some(if cfg.cache { 16 * BS as usize } else { 0 });
    VolumeOptions { mutation: cfg.mutation, cache_bytes, ..VolumeOptions::default() }
}

/// Formats a volume on a fresh faulty carrier (no faults armed yet).
fn start(cfg: Config) -> (Volume, Arc<FaultyCarrier>, Model) {
    let carrier = Arc::new(FaultyCarrier::new(VOLUME_BYTES, cfg.write_through));
    let format = FormatOptions {
        journal: cfg.journal,
        journal_bytes: if cfg.journal { JOURNAL_BLOCKS * BS } else { 0 },
        capacity_bytes: cfg.grow.then_some(GROW_FROM_BLOCKS * BS),
        grow_max_bytes: cfg.grow.then_some(VOLUME_BYTES),
        image_blocks: cfg.grow.then_some(4),
        ..FormatOptions::default()
    };
    let v = Volume::format(Box::new(Arc::clone(&carrier)), &format, options(cfg)).unwrap();
    let mut model = Model::new(v.commit_id());
    model.durable_by_commits = cfg.cache;
    if cfg.grow {
        // Ballast, committed: most of the initial bound, so the workload crosses growth steps.
        let path = b"/ballast".to_vec();
        let len = (GROW_FROM_BLOCKS - 40) * BS;
        v.create_file(&path).unwrap();
        model.create_file(&path);
        let recs = model.preallocate(&path, 0, len);
        v.open_file(&path).unwrap().preallocate(0, len).unwrap();
        model.returned(&recs, carrier.barriers_done());
        model.begin_commit(v.commit_id() + 1);
        v.commit().unwrap();
        model.commit_done(v.commit_id());
    }
    (v, carrier, model)
}

fn pick<'a, T>(rng: &mut FaultRng, items: &'a [T]) -> Option<&'a T> {
    (!items.is_empty()).then(|| &items[rng.below(items.len() as u64) as usize])
}

fn join(dir: &[u8], name: &str) -> Vec<u8> {
    let mut p = if dir == b"/" { Vec::new() } else { dir.to_vec() };
    p.push(b'/');
    p.extend_from_slice(name.as_bytes());
    p
}

fn data(rng: &mut FaultRng, len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    rng.fill(&mut d);
    d
}

/// Runs one random operation on both the volume and the model. `Err` means the carrier lost
/// power (the run ends there).
fn step(
    v: &Volume,
    carrier: &FaultyCarrier,
    m: &mut Model,
    rng: &mut FaultRng,
    n: usize,
) -> Result<(), String> {
    let files = m.files();
    let dirs = m.dirs();
    let ok = |r: vellum_engine::Result<()>| r.map_err(|e| e.to_string());
    match rng.below(100) {
        0..=11 => {
            let dir = pick(rng, &dirs).expect("root exists").clone();
            let path = join(&dir, &format!("f{n}"));
            ok(v.create_file(&path).map(drop))?;
            m.create_file(&path);
        }
        12..=15 if dirs.len() < 4 => {
            let path = join(b"/", &format!("d{n}"));
            ok(v.create_dir(&path))?;
            m.mkdir(&path);
        }
        16..=37 if !files.is_empty() => {
            let path = pick(rng, &files).expect("a file").clone();
            let size = m.file(&path).size;
            let offset = rng.below(size + 9000);
            let len = 1 + rng.below(12_000) as usize;
            let d = data(rng, len);
            let recs = m.write(&path, offset, &d);
            ok(v.open_file(&path).and_then(|f| f.write_at(&d, offset)))?;
            m.returned(&recs, carrier.barriers_done());
        }
        38..=47 if !files.is_empty() => {
            let path = pick(rng, &files).expect("a file").clone();
            let size = m.file(&path).size;
            let len = 1 + rng.below(6000) as usize;
            let d = data(rng, len);
            let recs = m.write(&path, size, &d);
            let at =
                ok(v.open_file(&path).and_then(|f| f.append(&d)).map(|at| assert_eq!(at, size)));
            at?;
            m.returned(&recs, carrier.barriers_done());
        }
        48..=53 if !files.is_empty() => {
            let path = pick(rng, &files).expect("a file").clone();
            let size = m.file(&path).size;
            let len = rng.below(size + 8000);
            let recs = m.set_len(&path, len);
            ok(v.open_file(&path).and_then(|f| f.set_len(len)))?;
            m.returned(&recs, carrier.barriers_done());
        }
        54..=57 if !files.is_empty() => {
            let path = pick(rng, &files).expect("a file").clone();
            let (offset, len) = (rng.below(20_000), 1 + rng.below(30_000));
            let recs = m.preallocate(&path, offset, len);
            ok(v.open_file(&path).and_then(|f| f.preallocate(offset, len)))?;
            m.returned(&recs, carrier.barriers_done());
        }
        58..=63 if !files.is_empty() => {
            let from = pick(rng, &files).expect("a file").clone();
            let to = if rng.chance(50) && files.len() > 1 {
                pick(rng, &files).expect("a file").clone()
            } else {
                join(pick(rng, &dirs).expect("root"), &format!("r{n}"))
            };
            ok(v.rename(&from, &to))?;
            if from != to {
                m.rename(&from, &to);
            }
        }
        64..=69 if !files.is_empty() => {
            let path = pick(rng, &files).expect("a file").clone();
            ok(v.remove(&path))?;
            m.remove(&path);
        }
        70..=72 if dirs.len() > 1 => {
            let dir = pick(rng, &dirs[1..]).expect("a dir").clone();
            if m.is_empty_dir(&dir) {
                ok(v.remove(&dir))?;
                m.remove(&dir);
            }
        }
        73..=81 if !files.is_empty() => {
            let path = pick(rng, &files).expect("a file").clone();
            let key = format!("k{}", rng.below(4)).into_bytes();
            let f = v.open_file(&path).map_err(|e| e.to_string())?;
            let ino = m.ino(&path);
            let attrs = &mut m.current.files.get_mut(&ino).expect("file").attrs;
            if rng.chance(25) {
                ok(f.remove_attr(&key).map(drop))?;
                attrs.remove(&key);
            } else {
                // Now and then a value larger than a journal block: batches of two blocks
                // or more, and batches larger than a small ring's free space.
                let len =
                    if rng.chance(15) { 4000 + rng.below(5000) } else { rng.below(300) } as usize;
                let value = data(rng, len);
                ok(f.set_attr(&key, &value))?;
                attrs.insert(key, value);
            }
        }
        _ => {
            m.begin_commit(v.commit_id() + 1);
            ok(v.commit())?;
            m.commit_done(v.commit_id());
        }
    }
    Ok(())
}

/// Runs the workload of `seed` until it finishes or power is cut; returns the model.
fn run(seed: u64, cfg: Config, plan: Option<CrashPlan>) -> (Arc<FaultyCarrier>, Model, u64) {
    let (v, carrier, mut m) = start(cfg);
    let format_ops = carrier.ops();
    if let Some(plan) = plan {
        carrier.set_crash_plan(plan);
    }
    let mut rng = FaultRng::new(seed);
    for n in 0..OPS_PER_RUN {
        if let Err(e) = step(&v, &carrier, &mut m, &mut rng, n) {
            assert!(carrier.crashed(), "seed {seed}: an operation failed without a power cut: {e}");
            break;
        }
        v.check_invariants();
    }
    if cfg.grow && v.info().layout.total_blocks > GROW_FROM_BLOCKS {
        GROWN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    carrier.cut_power();
    drop(v);
    (carrier, m, format_ops)
}

/// Runs of the growing configurations whose volume grew before the power cut.
static GROWN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Everything the recovered volume holds, for comparison with a model state.
fn compare(
    v: &Volume,
    want: &State,
    m: &Model,
    uncertain: &std::collections::HashMap<u64, Vec<std::ops::Range<u64>>>,
) -> Result<(), String> {
    let mut seen = Vec::new();
    let mut stack = vec![b"/".to_vec()];
    while let Some(dir) = stack.pop() {
        for e in v.list(&dir).map_err(|e| format!("list {dir:?}: {e}"))? {
            let path = join(&dir, std::str::from_utf8(&e.name).expect("test names are ASCII"));
            if e.kind == FileKind::Directory {
                stack.push(path.clone());
            }
            seen.push((path, e.kind));
        }
    }
    let expected: Vec<_> = want.paths.keys().filter(|p| p.as_slice() != b"/").cloned().collect();
    let mut got: Vec<_> = seen.iter().map(|(p, _)| p.clone()).collect();
    got.sort();
    if got != expected {
        return Err(format!(
            "paths differ:\n got  {:?}\n want {:?}",
            lossy(&got),
            lossy(&expected)
        ));
    }
    for (path, kind) in seen {
        let Node::File(ino) = want.paths[&path] else {
            if kind != FileKind::Directory {
                return Err(format!("{} should be a directory", lossy(&[path])[0]));
            }
            continue;
        };
        let mf = &want.files[&ino];
        let f = v.open_file(&path).map_err(|e| format!("open: {e}"))?;
        let content = f.read_to_end().map_err(|e| format!("read: {e}"))?;
        if content.len() as u64 != mf.size {
            return Err(format!("{}: size {} != {}", lossy(&[path])[0], content.len(), mf.size));
        }
        let attrs: std::collections::BTreeMap<_, _> =
            f.attrs().map_err(|e| e.to_string())?.into_iter().collect();
        if attrs != mf.attrs {
            return Err(format!("{}: attributes differ", lossy(&[path])[0]));
        }
        // After a destroyed ring the volume is back at a checkpoint: its metadata exactly, but
        // blocks that batches after it freed may have been reused and written since (the
        // loss open reports), so file bytes are not compared any more.
        let blocks = if m.ring_destroyed { 0 } else { mf.size.div_ceil(BS) };
        for lb in 0..blocks {
            let (lo, hi) = (lb * BS, ((lb + 1) * BS).min(mf.size));
            let expect = mf.blocks.get(&lb).map(|id| &m.phys[id]);
            let holes = uncertain.get(&mf.blocks.get(&lb).copied().unwrap_or(u64::MAX));
            for s in (lo..hi).step_by(SECTOR as usize) {
                let within = s - lo;
                if holes.is_some_and(|r| r.iter().any(|r| r.contains(&within))) {
                    continue;
                }
                let end = (s + SECTOR).min(hi);
                let got = &content[s as usize..end as usize];
                let ok = match expect {
                    Some(b) => got == &b[within as usize..(within + end - s) as usize],
                    None => got.iter().all(|&x| x == 0),
                };
                if !ok {
                    let name = &lossy(&[path])[0];
                    return Err(format!("{name}: bytes {s}..{end} (block {lb}) differ"));
                }
            }
        }
    }
    Ok(())
}

fn lossy(paths: &[Vec<u8>]) -> Vec<String> {
    paths.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect()
}

/// The states a recovered volume may hold, by what its open reports, newest first: the
/// commit in flight (if the recovered commit id reaches it) and the last returned commit;
/// after a destroyed ring, the newest state committed at or before the recovered
/// checkpoint. A recovery may move the commit id one past a torn batch without changing
/// the state (sequences only grow).
fn candidates<'a>(m: &'a Model, report: &OpenReport) -> Result<Vec<&'a State>, String> {
    let r = report.commit_id;
    if report.journal_lost() != m.ring_destroyed {
        return Err(format!(
            "open reports a journal loss: {}, but the ring was destroyed: {}",
            report.journal_lost(),
            m.ring_destroyed
        ));
    }
    let in_flight = m.in_flight.as_ref();
    let mut c = Vec::new();
    if m.ring_destroyed {
        if let Some((g, s)) = in_flight
            && *g == r
        {
            c.push(s);
        }
        if let Some((_, s)) = m.committed.range(..=r).next_back() {
            c.push(s);
        }
        if c.is_empty() {
            return Err(format!("recovered checkpoint {r} is older than every commit known"));
        }
        return Ok(c);
    }
    let last = *m.committed.keys().next_back().expect("format committed");
    if r < last {
        return Err(format!("recovered commit {r}, but commit {last} returned"));
    }
    let ceiling = in_flight.map_or(last, |(g, _)| (*g).max(last)) + 1;
    if r > ceiling {
        return Err(format!("recovered commit {r}, past anything committed ({ceiling})"));
    }
    if let Some((g, s)) = in_flight
        && r >= *g
    {
        c.push(s);
    }
    c.push(&m.committed[&last]);
    Ok(c)
}

/// Checks an open volume against the model; returns the state it holds.
fn check_recovered(
    v: &Volume,
    m: &Model,
    cfg: Config,
    barriers_done: u64,
) -> Result<State, String> {
    let want = candidates(m, v.open_report())?;
    let uncertain = m.uncertain(barriers_done, cfg.write_through);
    let mut first = None;
    for s in want {
        match compare(v, s, m, &uncertain) {
            Ok(()) => return Ok(s.clone()),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    Err(first.unwrap_or_default())
}

fn reopen_options(cfg: Config) -> VolumeOptions {
    VolumeOptions { mutation: cfg.mutation, ..VolumeOptions::default() }
}

/// Opens `image` for writing on a fault-injecting carrier and cuts power at one of the
/// recovery's operations, any of them (a dry run counts them). Returns what the medium holds
/// after the cut, or `None` when the open refuses before writing anything.
fn cut_during_recovery(
    image: &[u8],
    cfg: Config,
    rng: &mut FaultRng,
) -> Result<Option<Vec<u8>>, String> {
    let dry = Arc::new(FaultyCarrier::from_bytes(image.to_vec(), cfg.write_through));
    let Ok(v) = Volume::open(Box::new(Arc::clone(&dry)), reopen_options(cfg)) else {
        return Ok(None);
    };
    let ops = dry.ops();
    drop(v);
    let second = Arc::new(FaultyCarrier::from_bytes(image.to_vec(), cfg.write_through));
    second.set_crash_plan(CrashPlan::AtOp(rng.below(ops.max(1))));
    match Volume::open(Box::new(Arc::clone(&second)), reopen_options(cfg)) {
        Ok(v) => drop(v),
        Err(_) if second.crashed() => {}
        Err(e) => return Err(format!("recovery open failed: {e}")),
    }
    bump(&RECOVERY_CUTS);
    second.cut_power();
    Ok(Some(second.crash_image(rng)))
}

/// Checks `check`'s verdict on a crash image: damage never, except the loss of a destroyed
/// ring (reported as damage until acknowledged).
fn check_before_open(image: &[u8], m: &Model) -> Result<(), String> {
    let report = check(&MemoryCarrier::from_bytes(image));
    let damaged = matches!(report.exit_code(), 1 | 2);
    if damaged != m.ring_destroyed {
        return Err(format!("check before open: {:?}", report.findings));
    }
    Ok(())
}

/// Opens a recovered volume, checks it against the model, closes it cleanly and checks the
/// closed volume: `check` finds nothing (a destroyed ring's loss until it is acknowledged).
fn verify_open(image: &[u8], m: &Model, cfg: Config, barriers_done: u64) -> Result<(), String> {
    let carrier = Arc::new(MemoryCarrier::from_bytes(image));
    let v = Volume::open(Box::new(Arc::clone(&carrier)), reopen_options(cfg))
        .map_err(|e| format!("open refused a crashed volume: {e}"))?;
    check_recovered(&v, m, cfg, barriers_done)?;
    v.check_invariants();
    v.close().map_err(|e| format!("close: {e}"))?;
    if m.ring_destroyed {
        let v = Volume::open(Box::new(Arc::clone(&carrier)), reopen_options(cfg))
            .map_err(|e| format!("reopen: {e}"))?;
        if !v.open_report().journal_lost() {
            return Err("the loss was forgotten at a clean close".into());
        }
        v.acknowledge_journal_loss().map_err(|e| format!("ack: {e}"))?;
        v.close().map_err(|e| format!("close: {e}"))?;
    }
    let report = check(carrier.as_ref());
    if report.exit_code() != 0 {
        return Err(format!("check after clean close: {:?}", report.findings));
    }
    Ok(())
}

/// Reopens a crash image and checks it against the model, now and then after one more cut
/// during its recovery.
fn verify(
    image: Vec<u8>,
    m: &Model,
    cfg: Config,
    barriers_done: u64,
    rng: &mut FaultRng,
) -> Result<(), String> {
    check_before_open(&image, m)?;
    let image = if rng.chance(30) {
        cut_during_recovery(&image, cfg, rng)?.ok_or("open refused a crashed volume")?
    } else {
        image
    };
    verify_open(&image, m, cfg, barriers_done)
}

/// Destroys every block of the journal ring of `image` (the region's bytes overwritten).
fn destroy_ring(image: &mut [u8], cfg: Config, rng: &mut FaultRng) -> Result<(), String> {
    let opts = VolumeOptions { read_only: true, ..reopen_options(cfg) };
    let probe = Volume::open(Box::new(MemoryCarrier::from_bytes(image)), opts)
        .map_err(|e| format!("open of an undamaged crashed volume failed: {e}"))?;
    let l = probe.info().layout;
    drop(probe);
    let (start, end) = ((l.journal.start * BS) as usize, (l.journal.end() * BS) as usize);
    if rng.chance(50) {
        image[start..end].fill(0);
    } else {
        rng.fill(&mut image[start..end]);
    }
    bump(&RINGS_DESTROYED);
    Ok(())
}

/// One crash point of one seed: dry run to count operations, then cut at a random one.
fn crash_point(seed: u64, cfg: Config) -> Result<(), String> {
    let (dry, _, format_ops) = run(seed, cfg, None);
    let total = dry.ops();
    let mut rng = FaultRng::new(seed ^ 0x00C0_FFEE);
    let at = format_ops + rng.below((total - format_ops).max(1));
    let (carrier, mut m, _) = run(seed, cfg, Some(CrashPlan::AtOp(at)));
    let mut image = carrier.crash_image(&mut rng);
    let fail = |e: String| format!("seed {seed}, crash at op {at}: {e}");
    if cfg.journal && rng.chance(10) {
        destroy_ring(&mut image, cfg, &mut rng).map_err(fail)?;
        m.ring_destroyed = true;
    }
    verify(image, &m, cfg, carrier.barriers_done(), &mut rng).map_err(fail)
}

fn campaign(seeds: std::ops::Range<u64>, cfg: Config) -> Vec<String> {
    let n = seeds.end - seeds.start;
    let (cuts, rings) = (count(&RECOVERY_CUTS), count(&RINGS_DESTROYED));
    let failures: Vec<String> = seeds.filter_map(|s| crash_point(s, cfg).err()).collect();
    eprintln!(
        "{n} random crash points ({cfg:?}): {} cut again during recovery, {} rings destroyed; \
         {} failures",
        count(&RECOVERY_CUTS) - cuts,
        count(&RINGS_DESTROYED) - rings,
        failures.len()
    );
    failures
}

/// The seeds of a campaign: `default`, one seed with `VELLUM_CRASH_SEED=<seed>`, or `k` times
/// as many with `VELLUM_CRASH_SOAK=<k>` (a soak outside CI; the README's "Crash
/// consistency" says how long it takes).
fn seeds_from_env(default: std::ops::Range<u64>) -> std::ops::Range<u64> {
    let var = |name| std::env::var(name).ok().and_then(|s: String| s.parse::<u64>().ok());
    match (var("VELLUM_CRASH_SEED"), var("VELLUM_CRASH_SOAK")) {
        (Some(s), _) => s..s + 1,
        (None, Some(k)) if k > 1 => {
            default.start..default.start + (default.end - default.start) * k
        }
        _ => default,
    }
}

const GOOD_WT: Config =
    Config { write_through: true, cache: false, journal: false, grow: false, mutation: None };
const GOOD_BUFFERED: Config =
    Config { write_through: false, cache: false, journal: false, grow: false, mutation: None };
const CACHED_BUFFERED: Config =
    Config { write_through: false, cache: true, journal: false, grow: false, mutation: None };
const CACHED_WT: Config =
    Config { write_through: true, cache: true, journal: false, grow: false, mutation: None };
const JOURNAL_WT: Config = Config { journal: true, ..GOOD_WT };
const JOURNAL_BUFFERED: Config = Config { journal: true, ..GOOD_BUFFERED };
const JOURNAL_CACHED: Config = Config { journal: true, ..CACHED_BUFFERED };
const GROW_BUFFERED: Config = Config { grow: true, ..GOOD_BUFFERED };
const GROW_JOURNAL_WT: Config = Config { grow: true, ..JOURNAL_WT };

#[test]
fn random_crash_points_write_through() {
    let failures = campaign(seeds_from_env(0..1100), GOOD_WT);
    assert!(failures.is_empty(), "{} failures, first: {}", failures.len(), failures[0]);
}

#[test]
fn random_crash_points_buffered() {
    let failures = campaign(seeds_from_env(10_000..11_100), GOOD_BUFFERED);
    assert!(failures.is_empty(), "{} failures, first: {}", failures.len(), failures[0]);
}

/// With the page cache on: power cuts land anywhere, during writeback (by the thread, by a
/// writer over the hard line, by a commit's drain) too.
#[test]
fn random_crash_points_with_the_cache() {
    let mut failures = campaign(seeds_from_env(20_000..20_700), CACHED_BUFFERED);
    failures.extend(campaign(seeds_from_env(30_000..30_300), CACHED_WT));
    assert!(failures.is_empty(), "{} failures, first: {}", failures.len(), failures[0]);
}

/// Journaled volumes: cuts land during batches, threshold checkpoints (the ring of 8 blocks
/// fills every few commits), and the recovery's own replay and checkpoint.
#[test]
fn random_crash_points_journaled() {
    let mut failures = campaign(seeds_from_env(40_000..40_800), JOURNAL_WT);
    failures.extend(campaign(seeds_from_env(50_000..50_800), JOURNAL_BUFFERED));
    failures.extend(campaign(seeds_from_env(60_000..60_400), JOURNAL_CACHED));
    assert!(failures.is_empty(), "{} failures, first: {}", failures.len(), failures[0]);
}

/// Auto-grow: volumes that start at 512 KiB and double under the workload, so cuts land in
/// growth steps (the carrier's extension, both flips) too.
#[test]
fn random_crash_points_growing() {
    let mut failures = campaign(seeds_from_env(80_000..80_300), GROW_BUFFERED);
    failures.extend(campaign(seeds_from_env(90_000..90_300), GROW_JOURNAL_WT));
    assert!(failures.is_empty(), "{} failures, first: {}", failures.len(), failures[0]);
    let grown = GROWN.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("{grown} runs grew before their power cut");
    assert!(grown > 100, "only {grown} runs grew: the workload does not reach the bound");
}

/// Every barrier (and every operation) of a few scripted scenarios.
#[test]
fn every_barrier_and_operation_of_scripted_scenarios() {
    let mut points = 0;
    for (seed, cfg) in [
        (7, GOOD_WT),
        (8, GOOD_BUFFERED),
        (9, GOOD_WT),
        (10, CACHED_BUFFERED),
        (11, JOURNAL_WT),
        (12, JOURNAL_BUFFERED),
        (13, GROW_JOURNAL_WT),
    ] {
        let (dry, _, format_ops) = run(seed, cfg, None);
        let (barriers, ops) = (dry.barriers_done(), dry.ops());
        let plans =
            (0..barriers).map(CrashPlan::AtBarrier).chain((format_ops..ops).map(CrashPlan::AtOp));
        for plan in plans {
            let (carrier, m, _) = run(seed, cfg, Some(plan));
            for tear in 0..2 {
                let mut rng = FaultRng::new(seed * 1000 + tear);
                let image = carrier.crash_image(&mut rng);
                if let Err(e) = verify(image, &m, cfg, carrier.barriers_done(), &mut rng) {
                    panic!("scenario {seed}, {plan:?}, tear {tear}: {e}");
                }
                points += 1;
            }
        }
    }
    eprintln!("{points} scripted crash points (every barrier and every operation)");
    assert!(points > 200, "only {points} crash points");
}

/// Every operation of a recovery cut in turn: crash images of each configuration (a third
/// of the journaled ones with their ring destroyed, so the loss checkpoint and the refill
/// are cut too), each recovery cut at each of its operations, each result checked.
#[test]
fn every_operation_of_recovery() {
    let mut points = 0;
    for cfg in [JOURNAL_WT, JOURNAL_BUFFERED, JOURNAL_CACHED, GOOD_BUFFERED, GROW_JOURNAL_WT] {
        for seed in seeds_from_env(140_000..140_006) {
            let (dry, _, format_ops) = run(seed, cfg, None);
            let mut rng = FaultRng::new(seed ^ 0x0E7E);
            let at = format_ops + rng.below((dry.ops() - format_ops).max(1));
            let (carrier, mut m, _) = run(seed, cfg, Some(CrashPlan::AtOp(at)));
            let mut image = carrier.crash_image(&mut rng);
            let fail = |e: String| format!("seed {seed} ({cfg:?}), crash at op {at}: {e}");
            if cfg.journal && seed % 3 == 0 {
                destroy_ring(&mut image, cfg, &mut rng).unwrap_or_else(|e| panic!("{}", fail(e)));
                m.ring_destroyed = true;
            }
            let counter = Arc::new(FaultyCarrier::from_bytes(image.clone(), cfg.write_through));
            let v = Volume::open(Box::new(Arc::clone(&counter)), reopen_options(cfg))
                .unwrap_or_else(|e| panic!("{}", fail(format!("open refused: {e}"))));
            let ops = counter.ops();
            drop(v);
            for op in 0..ops {
                let c = Arc::new(FaultyCarrier::from_bytes(image.clone(), cfg.write_through));
                c.set_crash_plan(CrashPlan::AtOp(op));
                if let Ok(v) = Volume::open(Box::new(Arc::clone(&c)), reopen_options(cfg)) {
                    drop(v);
                }
                c.cut_power();
                for tear in 0..2 {
                    let cut = c.crash_image(&mut FaultRng::new(seed * 100 + op * 2 + tear));
                    check_before_open(&cut, &m)
                        .and_then(|()| verify_open(&cut, &m, cfg, carrier.barriers_done()))
                        .unwrap_or_else(|e| {
                            panic!("{}", fail(format!("recovery cut at op {op}: {e}")))
                        });
                    points += 1;
                }
            }
        }
    }
    eprintln!("{points} recovery cuts (every operation of 30 recoveries)");
    assert!(points > 300, "only {points} recovery cuts");
}

/// The checker must catch a protocol that is broken on purpose: a skipped barrier, blocks
/// reused before the commit that freed them is durable, and a page cache that writes back
/// whole pages (rewriting sectors nobody changed, which a power cut may then tear).
#[test]
fn broken_protocols_are_caught() {
    for (mutation, cache, journal) in [
        (CommitMutation::SkipFirstBarrier, false, false),
        (CommitMutation::ReuseFreedBlocksEarly, false, false),
        (CommitMutation::WholePageWriteback, true, false),
        (CommitMutation::CheckpointFreesJournalEarly, false, true),
        (CommitMutation::ReplayDiffers, false, true),
        (CommitMutation::FillBeforeLossFlag, false, true),
    ] {
        let cfg =
            Config { write_through: !cache, cache, journal, grow: false, mutation: Some(mutation) };
        let caught = (0..400).find_map(|s| crash_point(s, cfg).err().map(|e| (s, e)));
        let (seed, e) = caught.unwrap_or_else(|| {
            panic!("{mutation:?}: 400 crash points and the checker saw nothing")
        });
        eprintln!("{mutation:?} caught at seed {seed}: {e}");
    }
}

/// What damage placed in the ring led to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    /// The run left no batch after the checkpoint to damage.
    NotPlaced,
    /// Damage outside the valid prefix: nothing committed was lost.
    Harmless,
    /// Open refused with a named journal corruption.
    Refused,
    /// Damage on every batch from some point on read as a torn tail: those batches were
    /// lost (the documented limit of a checksum).
    TailLost,
}

/// The sequence of the batch each block of the valid prefix belongs to: block `k` (counted
/// from the tail) belongs to the first batch not whole within the blocks before it, which a
/// read-only open of the image with every other ring block zeroed tells.
fn prefix_batches(
    image: &[u8],
    cfg: Config,
    start: u64,
    ring: u64,
    prefix: &[u64],
) -> Result<Vec<u64>, String> {
    let opts = VolumeOptions { read_only: true, ..reopen_options(cfg) };
    let mut out = Vec::with_capacity(prefix.len());
    for k in 0..prefix.len() {
        let mut cut = image.to_vec();
        for b in (0..ring).filter(|b| !prefix[..k].contains(b)) {
            let at = ((start + b) * BS) as usize;
            cut[at..at + BS as usize].fill(0);
        }
        let probe = Volume::open(Box::new(MemoryCarrier::from_bytes(&cut)), opts)
            .map_err(|e| format!("a truncated ring refused: {e}"))?;
        out.push(probe.open_report().commit_id + 1);
    }
    Ok(out)
}

/// Damage that is not a torn tail: after a run, one sector of the first batch after the
/// checkpoint, or of a few random ring blocks, is destroyed. Open must refuse (a named
/// journal corruption), or recover every acknowledged commit, except when the damage covers
/// every batch from some point on (nothing intact after it: indistinguishable from a torn
/// tail, the documented limit of a checksum); then it must recover every commit before the
/// first damaged batch. A replay that silently drops a commit before an intact later batch
/// is the failure. Now and then the recovery is cut too.
fn damage_point(seed: u64, cfg: Config) -> Result<Damage, String> {
    let (carrier, m, _) = run(seed, cfg, None);
    let mut rng = FaultRng::new(seed ^ 0xDA3A);
    let mut image = carrier.crash_image(&mut rng);
    let opts = VolumeOptions { read_only: true, ..reopen_options(cfg) };
    let probe = Volume::open(Box::new(MemoryCarrier::from_bytes(&image)), opts)
        .map_err(|e| format!("seed {seed}: open of an undamaged volume failed: {e}"))?;
    let (Some(j), Some(replayed)) = (probe.info().journal, probe.open_report().journal) else {
        return Ok(Damage::NotPlaced);
    };
    if replayed.batches < 2 {
        return Ok(Damage::NotPlaced);
    }
    let start = probe.info().layout.journal.start;
    let last_id = probe.open_report().commit_id;
    drop(probe);
    let ring = j.blocks;
    let prefix: Vec<u64> = (0..replayed.blocks).map(|k| (j.tail + k) % ring).collect();
    let batch_of = prefix_batches(&image, cfg, start, ring, &prefix)?;
    let damaged: Vec<u64> = if rng.chance(50) {
        vec![j.tail]
    } else {
        (0..=rng.below(3)).map(|_| rng.below(ring)).collect()
    };
    for &b in &damaged {
        let sector = (start + b) * BS + SECTOR * rng.below(BS / SECTOR);
        image[sector as usize..(sector + SECTOR) as usize].fill(0xEE);
    }
    let hit: std::collections::BTreeSet<u64> = prefix
        .iter()
        .zip(&batch_of)
        .filter(|(b, _)| damaged.contains(b))
        .map(|(_, s)| *s)
        .collect();
    if rng.chance(30)
        && let Some(cut) = cut_during_recovery(&image, cfg, &mut rng)?
    {
        image = cut;
    }
    let fail = |e: String| format!("seed {seed}, damaged ring blocks {damaged:?}: {e}");
    let v = match Volume::open(Box::new(MemoryCarrier::from_bytes(&image)), reopen_options(cfg)) {
        Err(vellum_engine::Error::Corrupt {
            region: vellum_engine::error::Region::Journal,
            ..
        }) if !hit.is_empty() => {
            return Ok(Damage::Refused);
        }
        Err(e) => return Err(fail(format!("refused: {e}"))),
        Ok(v) => v,
    };
    let uncertain = m.uncertain(carrier.barriers_done(), cfg.write_through);
    let Some(&first) = hit.first() else {
        let want = &m.committed[&last_id];
        compare(&v, want, &m, &uncertain).map_err(fail)?;
        return Ok(Damage::Harmless);
    };
    // Opened although the prefix is damaged: only when every batch from the first damaged
    // one on is damaged (else an intact later batch proves the damaged one was acknowledged).
    if let Some(intact) = (first..=last_id).find(|s| !hit.contains(s)) {
        return Err(fail(format!(
            "batch {first} is damaged and batch {intact} intact, but open went on"
        )));
    }
    let want = m.committed.range(..first).next_back().map(|(_, s)| s).expect("format committed");
    compare(&v, want, &m, &uncertain)
        .map_err(|e| fail(format!("open did not stop right before batch {first}: {e}")))?;
    Ok(Damage::TailLost)
}

#[test]
fn damage_inside_the_journal_is_refused_not_replayed_around() {
    let mut seen = std::collections::BTreeMap::new();
    for seed in seeds_from_env(70_000..70_300) {
        let outcome = damage_point(seed, JOURNAL_BUFFERED).unwrap_or_else(|e| panic!("{e}"));
        *seen.entry(format!("{outcome:?}")).or_insert(0u32) += 1;
    }
    eprintln!("damage placed in journal rings: {seen:?}");
    let refused = seen.get("Refused").copied().unwrap_or(0);
    assert!(refused > 20, "only {refused} damaged journals were refused: {seen:?}");
    let mutant = Config { mutation: Some(CommitMutation::ReplayAcceptsDamage), ..JOURNAL_BUFFERED };
    let caught = (70_000..70_300).find_map(|s| damage_point(s, mutant).err());
    let e = caught.expect("ReplayAcceptsDamage: the checker saw nothing");
    eprintln!("ReplayAcceptsDamage caught: {e}");
}
