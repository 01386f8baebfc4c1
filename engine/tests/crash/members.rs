//! Crash consistency of volumes of several members (issue 25): the campaign of `main.rs` on
//! volumes of 2 and 3 members, and power cuts during adding and replacing a member.
//!
//! One power switch ([`PowerGroup`]) feeds every member's fault-injecting carrier: a cut at
//! operation N of the group stops them all at the same instant, and each member's pending
//! writes become its crash image. The volumes are small (1 MiB members) and a ballast file
//! plus large writes put files across member boundaries, so commits touch several members.
//! Every member carrier starts with random bytes (a used disk): nothing may rely on zeros
//! the engine did not write and make durable.
//!
//! What is checked, byte for byte against the model of `model.rs` (every acknowledged
//! commit's state present, nothing else; only sectors a cut may have torn are skipped):
//! - random cuts during the workload, now and then a second cut during the recovery, and
//!   crash loops of up to four more cuts (each during the previous recovery or the first
//!   operations after it); `check_members` finds no damage before open and nothing after a
//!   clean close; the members are given to open in a random order;
//! - a cut at every operation of `add_member` (from 1 member, 1 growing member, and 2
//!   members): the reopened volume is the old one (the new carrier holds no identity member
//!   0 names, and open with it given refuses it by name) or the grown one, never a member
//!   half in use; an add that returned is the grown one; the grown one takes a file that
//!   needs its new member's blocks, and reopens with it;
//! - a cut at every operation of `replace_member`: exactly one of "old carrier" and "new
//!   carrier" opens (read-only probes of both), with all the content.
//!
//! Two rules of the model differ from the single-carrier campaign's: a data write is
//! durable once a commit that started after it returned has completed (per-carrier barrier
//! counts say nothing across members: a barrier on member 0 does not make member 1's writes
//! durable, and a commit must barrier every member its data went to); and an add or a
//! replace moves generations without changing the state (a growth step and the table's flip
//! each take one, so later commit ids skip ahead), modelled as a commit in flight of the same
//! state a few ids ahead.
//!
//! The `MemberBeforeZeros` mutant (no barrier on the new carrier before member 0's table
//! names it) must be caught by the add campaign: a cut after the flip leaves member 0 naming
//! a member whose zero-fill and identity were still pending, and the crash image drops or
//! tears them; its torn or lost identity is what the checker sees (`check` reports the
//! damaged member superblock, or open refuses a member it cannot identify). Lost zeros
//! alone are not visible: a crashed volume's open rebuilds the bitmap from the image, and
//! a data block is written whole before anything references it; the used-disk bytes of a
//! new member are what makes a dropped zero-fill differ from the zeros at all.
//!
//! Counts are printed (`--nocapture`); the seeds follow `VELLUM_CRASH_SEED` /
//! `VELLUM_CRASH_SOAK` as in `main.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::model::{BS, Model, State};
use super::{Config, check_recovered, options, reopen_options, seeds_from_env, step};
use vellum_engine::carrier::{
    Carrier, CrashPlan, FaultRng, FaultyCarrier, MemoryCarrier, PowerGroup,
};
use vellum_engine::{
    CommitMutation, Error, FormatOptions, MemberCarrier, Volume, VolumeOptions, check_members,
};

/// Bytes of every member carrier.
const MEMBER_BYTES: u64 = 1 << 20;
/// Operations of one random run.
const OPS_PER_RUN: usize = 40;
/// Operations before an add or a replace.
const OPS_BEFORE: usize = 16;
/// Operations a crash loop round runs after its recovery.
const OPS_AFTER_RECOVERY: usize = 8;
/// Journal ring of the journaled configurations.
const JOURNAL_BLOCKS: u64 = 8;
/// A growing member 0 starts at this many blocks (and grows to its 1 MiB carrier before a
/// member is added).
const GROW_FROM_BLOCKS: u64 = 128;

static RUNS: AtomicU64 = AtomicU64::new(0);
/// Runs in which every member was written after the format.
static ALL_MEMBERS_WRITTEN: AtomicU64 = AtomicU64::new(0);
static RECOVERY_CUTS: AtomicU64 = AtomicU64::new(0);

/// A configuration: the single-carrier campaign's knobs, and the number of members.
#[derive(Debug, Clone, Copy)]
struct MConfig {
    members: usize,
    base: Config,
}

const fn cfg(members: usize, write_through: bool, journal: bool, cache: bool) -> MConfig {
    MConfig { members, base: Config { write_through, cache, journal, grow: false, mutation: None } }
}

/// A member carrier of `len` bytes holding random bytes, on `group`'s power.
fn used_disk(len: u64, write_through: bool, seed: u64, group: &Arc<PowerGroup>) -> FaultyCarrier {
    let mut bytes = vec![0u8; len as usize];
    FaultRng::new(seed).fill(&mut bytes);
    FaultyCarrier::from_bytes(bytes, write_through).join(group)
}

fn given(carriers: &[Arc<FaultyCarrier>]) -> Vec<MemberCarrier> {
    carriers.iter().map(|c| MemberCarrier::new(Box::new(Arc::clone(c)))).collect()
}

fn memory(images: &[Vec<u8>]) -> Vec<Arc<MemoryCarrier>> {
    images.iter().map(|i| Arc::new(MemoryCarrier::from_bytes(i))).collect()
}

/// The members as open takes them, in the order `rotate` says (open takes any order).
fn given_memory(carriers: &[Arc<MemoryCarrier>], rotate: usize) -> Vec<MemberCarrier> {
    let mut g: Vec<MemberCarrier> =
        carriers.iter().map(|c| MemberCarrier::new(Box::new(Arc::clone(c)))).collect();
    let n = g.len();
    g.rotate_left(rotate % n);
    g
}

/// `check_members` over `images` (member order).
fn check_images(images: &[Vec<u8>]) -> vellum_engine::CheckReport {
    let carriers = memory(images);
    let refs: Vec<&dyn Carrier> = carriers.iter().map(|c| c.as_ref() as &dyn Carrier).collect();
    check_members(&refs)
}

/// A formatted volume of `cfg.members` members with a committed ballast file that fills
/// part of the block space (so that the workload's files land on later members too).
struct Started {
    v: Volume,
    carriers: Vec<Arc<FaultyCarrier>>,
    group: Arc<PowerGroup>,
    model: Model,
}

fn start(seed: u64, cfg: MConfig) -> Started {
    let group = PowerGroup::new();
    let wt = cfg.base.write_through;
    let carriers: Vec<Arc<FaultyCarrier>> = (0..cfg.members as u64)
        .map(|k| Arc::new(used_disk(MEMBER_BYTES, wt, seed ^ (k << 48) ^ 0xD15C, &group)))
        .collect();
    let grow = cfg.base.grow;
    let format = FormatOptions {
        journal: cfg.base.journal,
        journal_bytes: if cfg.base.journal { JOURNAL_BLOCKS * BS } else { 0 },
        capacity_bytes: grow.then_some(GROW_FROM_BLOCKS * BS),
        grow_max_bytes: grow.then_some(MEMBER_BYTES),
        image_blocks: grow.then_some(4),
        ..FormatOptions::default()
    };
    let mut g = given(&carriers);
    let first = g.remove(0);
    let v = Volume::format_members(first, g, &format, options(cfg.base)).unwrap();
    assert_eq!(v.members().len(), cfg.members);
    let mut model = Model::new(v.commit_id());
    // A write is durable once a commit that started after it returned completed: a commit
    // barriers every member its data went to (a barrier on member 0 alone proves nothing
    // about member 1's writes, so the per-carrier barrier count is not the measure).
    model.durable_by_commits = true;
    let mut rng = FaultRng::new(seed ^ 0xBA11);
    let free = v.info().free_blocks;
    // A growing member 0 keeps room for the workload before an add: the add grows it to its
    // cap (a growth flip inside the add).
    let blocks = if grow { 8 } else { free * (25 + rng.below(30)) / 100 };
    let path = b"/ballast".to_vec();
    v.create_file(&path).unwrap();
    model.create_file(&path);
    let recs = model.preallocate(&path, 0, blocks * BS);
    v.open_file(&path).unwrap().preallocate(0, blocks * BS).unwrap();
    model.returned(&recs, 0);
    model.begin_commit(v.commit_id() + 1);
    v.commit().unwrap();
    model.commit_done(v.commit_id());
    Started { v, carriers, group, model }
}

/// One random operation: now and then a large write (16 to 56 blocks, across a member
/// boundary when the file sits there), else one of the single-carrier campaign's.
fn mstep(
    v: &Volume,
    carrier: &FaultyCarrier,
    m: &mut Model,
    rng: &mut FaultRng,
    n: usize,
) -> Result<(), String> {
    let files = m.files();
    if !files.is_empty() && rng.chance(5) {
        let path = files[rng.below(files.len() as u64) as usize].clone();
        let size = m.file(&path).size;
        let offset = rng.below(size + 1);
        let len = ((16 + rng.below(40)) * BS - rng.below(BS)) as usize;
        let mut d = vec![0u8; len];
        rng.fill(&mut d);
        let recs = m.write(&path, offset, &d);
        v.open_file(&path).and_then(|f| f.write_at(&d, offset)).map_err(|e| e.to_string())?;
        m.returned(&recs, 0);
        return Ok(());
    }
    step(v, carrier, m, rng, n)
}

/// A run that ended in a power cut: each member's crash image and the model.
struct Cut {
    images: Vec<Vec<u8>>,
    model: Model,
}

/// Runs the workload of `seed` with the group's crash plan `plan`; returns the carriers,
/// the model and the group's operations at the end of the format.
fn run(
    seed: u64,
    cfg: MConfig,
    plan: Option<CrashPlan>,
) -> (Vec<Arc<FaultyCarrier>>, Arc<PowerGroup>, Model, u64) {
    let Started { v, carriers, group, mut model } = start(seed, cfg);
    let format_ops = group.ops();
    let before: Vec<u64> = carriers.iter().map(|c| c.ops()).collect();
    if let Some(plan) = plan {
        group.set_crash_plan(plan);
    }
    let mut rng = FaultRng::new(seed);
    for n in 0..OPS_PER_RUN {
        if let Err(e) = mstep(&v, &carriers[0], &mut model, &mut rng, n) {
            assert!(group.crashed(), "seed {seed}: an operation failed without a power cut: {e}");
            break;
        }
        v.check_invariants();
    }
    if plan.is_none() {
        RUNS.fetch_add(1, Ordering::Relaxed);
        if carriers.iter().zip(&before).all(|(c, b)| c.ops() > *b) {
            ALL_MEMBERS_WRITTEN.fetch_add(1, Ordering::Relaxed);
        }
    }
    group.cut_power();
    drop(v);
    (carriers, group, model, format_ops)
}

fn crash_images(carriers: &[Arc<FaultyCarrier>], rng: &mut FaultRng) -> Vec<Vec<u8>> {
    carriers.iter().map(|c| c.crash_image(rng)).collect()
}

/// `check_members` on a crash image before open: no damage.
fn check_before_open(images: &[Vec<u8>]) -> Result<(), String> {
    let report = check_images(images);
    if matches!(report.exit_code(), 1 | 2) {
        return Err(format!("check before open: {:?}", report.findings));
    }
    Ok(())
}

/// Opens the members `images` on fault-injecting carriers of one group and cuts power at
/// one of the recovery's operations (a dry run counts them). `None` when open refuses
/// before writing.
fn cut_during_recovery(
    images: &[Vec<u8>],
    cfg: MConfig,
    rng: &mut FaultRng,
) -> Result<Option<Vec<Vec<u8>>>, String> {
    let on = |group: &Arc<PowerGroup>| -> Vec<Arc<FaultyCarrier>> {
        images
            .iter()
            .map(|i| {
                Arc::new(FaultyCarrier::from_bytes(i.clone(), cfg.base.write_through).join(group))
            })
            .collect()
    };
    let dry_group = PowerGroup::new();
    let dry = on(&dry_group);
    let Ok(v) = Volume::open_members(given(&dry), reopen_options(cfg.base)) else {
        return Ok(None);
    };
    let ops = dry_group.ops();
    drop(v);
    let group = PowerGroup::new();
    let second = on(&group);
    group.set_crash_plan(CrashPlan::AtOp(rng.below(ops.max(1))));
    match Volume::open_members(given(&second), reopen_options(cfg.base)) {
        Ok(v) => drop(v),
        Err(_) if group.crashed() => {}
        Err(e) => return Err(format!("recovery open failed: {e}")),
    }
    RECOVERY_CUTS.fetch_add(1, Ordering::Relaxed);
    group.cut_power();
    Ok(Some(crash_images(&second, rng)))
}

/// Opens the recovered members (in a random order), checks them against the model, closes
/// cleanly and checks the closed volume: nothing found. Returns the closed carriers.
fn verify_open(
    images: &[Vec<u8>],
    m: &Model,
    cfg: MConfig,
    rng: &mut FaultRng,
) -> Result<Vec<Arc<MemoryCarrier>>, String> {
    let carriers = memory(images);
    let rotate = rng.below(images.len() as u64) as usize;
    let v = Volume::open_members(given_memory(&carriers, rotate), reopen_options(cfg.base))
        .map_err(|e| format!("open refused a crashed volume: {e}"))?;
    if v.members().len() != images.len() {
        return Err(format!("{} members open, {} given", v.members().len(), images.len()));
    }
    check_recovered(&v, m, cfg.base, 0)?;
    v.check_invariants();
    v.close().map_err(|e| format!("close: {e}"))?;
    let refs: Vec<&dyn Carrier> = carriers.iter().map(|c| c.as_ref() as &dyn Carrier).collect();
    let report = check_members(&refs);
    if report.exit_code() != 0 {
        return Err(format!("check after clean close: {:?}", report.findings));
    }
    Ok(carriers)
}

/// Checks a crash image of members: `check` before open, now and then one more cut during
/// the recovery, then open, compare, close, `check`.
fn verify(images: Vec<Vec<u8>>, m: &Model, cfg: MConfig, rng: &mut FaultRng) -> Result<(), String> {
    check_before_open(&images)?;
    let images = if rng.chance(30) {
        cut_during_recovery(&images, cfg, rng)?.ok_or("open refused a crashed volume")?
    } else {
        images
    };
    verify_open(&images, m, cfg, rng).map(drop)
}

/// One random crash point of one seed.
fn crash_point(seed: u64, cfg: MConfig) -> Result<(), String> {
    let (_, dry, _, format_ops) = run(seed, cfg, None);
    let total = dry.ops();
    let mut rng = FaultRng::new(seed ^ 0x00C0_FFEE);
    let at = format_ops + rng.below((total - format_ops).max(1));
    let (carriers, _, m, _) = run(seed, cfg, Some(CrashPlan::AtOp(at)));
    let images = crash_images(&carriers, &mut rng);
    verify(images, &m, cfg, &mut rng).map_err(|e| format!("seed {seed}, crash at op {at}: {e}"))
}

/// What a round's recovery found: the state and the commit id open reported.
type Recovered = Option<(State, u64)>;

/// One round of a crash loop: recovery of `cut`, then [`OPS_AFTER_RECOVERY`] operations,
/// power cut at `plan`. Returns the round's end, the operations the round issued, and what
/// its recovery found. A recovery cut before it opened leaves the state `dry` (the same
/// round's uncut recovery) found, under its commit id or the next (the recovery's own
/// commit may have landed: it moves the id, never the state).
fn round(
    mut cut: Cut,
    cfg: MConfig,
    (seed, names): (u64, usize),
    plan: CrashPlan,
    dry: &Recovered,
) -> Result<(Cut, u64, Recovered), String> {
    let group = PowerGroup::new();
    let carriers: Vec<Arc<FaultyCarrier>> = cut
        .images
        .iter()
        .map(|i| {
            Arc::new(FaultyCarrier::from_bytes(i.clone(), cfg.base.write_through).join(&group))
        })
        .collect();
    group.set_crash_plan(plan);
    let mut recovered = None;
    match Volume::open_members(given(&carriers), reopen_options(cfg.base)) {
        Err(_) if group.crashed() => {
            RECOVERY_CUTS.fetch_add(1, Ordering::Relaxed);
            let (state, id) = dry.clone().ok_or("the uncut recovery found nothing")?;
            cut.model.rebase(state.clone(), id, 0, cfg.base.write_through);
            // The cut recovery's own commit may have landed: the same state, one id on.
            cut.model.in_flight = Some((id + 1, state));
        }
        Err(e) => return Err(format!("open refused a crashed volume: {e}")),
        Ok(v) => {
            let state: State = check_recovered(&v, &cut.model, cfg.base, 0)?;
            v.check_invariants();
            recovered = Some((state.clone(), v.open_report().commit_id));
            cut.model.rebase(state, v.commit_id(), 0, cfg.base.write_through);
            let mut ops = FaultRng::new(seed.wrapping_mul(31));
            for n in 0..OPS_AFTER_RECOVERY {
                if let Err(e) = mstep(&v, &carriers[0], &mut cut.model, &mut ops, names + n) {
                    if !group.crashed() {
                        return Err(format!("an operation failed without a power cut: {e}"));
                    }
                    break;
                }
            }
        }
    }
    let issued = group.ops();
    group.cut_power();
    cut.images = crash_images(&carriers, &mut FaultRng::new(seed ^ 0x7EA2));
    Ok((cut, issued, recovered))
}

/// One seed's crash loop: a first random cut, then up to four more, each during the
/// previous recovery or the operations after it.
fn crash_loop(seed: u64, cfg: MConfig) -> Result<(), String> {
    let mut rng = FaultRng::new(seed ^ 0x100B);
    let (_, dry, _, format_ops) = run(seed, cfg, None);
    let at = format_ops + rng.below((dry.ops() - format_ops).max(1));
    let (carriers, _, model, _) = run(seed, cfg, Some(CrashPlan::AtOp(at)));
    let mut cut = Cut { images: crash_images(&carriers, &mut rng), model };
    let rounds = 1 + rng.below(4);
    for k in 0..rounds {
        let fail = |e: String| format!("seed {seed}, round {k}: {e}");
        check_before_open(&cut.images).map_err(fail)?;
        let seed_k = seed ^ (k << 40);
        let snapshot = Cut { images: cut.images.clone(), model: cut.model.clone() };
        // Names no earlier round used (a file a cut round created may have survived).
        let names = 1000 * (k as usize + 1);
        let (_, ops, found) =
            round(snapshot, cfg, (seed_k, names), CrashPlan::Never, &None).map_err(fail)?;
        let plan = CrashPlan::AtOp(rng.below(ops.max(1)));
        cut = round(cut, cfg, (seed_k, names), plan, &found).map_err(fail)?.0;
    }
    verify(cut.images, &cut.model, cfg, &mut rng)
        .map_err(|e| format!("seed {seed}, after {rounds} more cuts: {e}"))
}

fn campaign(seeds: std::ops::Range<u64>, cfg: MConfig) -> Vec<String> {
    let n = seeds.end - seeds.start;
    let failures: Vec<String> = seeds.filter_map(|s| crash_point(s, cfg).err()).collect();
    for f in &failures {
        eprintln!("  {f}");
    }
    eprintln!("{n} random crash points ({cfg:?}): {} failures", failures.len());
    failures
}

#[test]
fn random_crash_points_on_two_and_three_members() {
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    for (k, c) in [
        cfg(2, true, false, false),
        cfg(2, false, false, false),
        cfg(3, false, true, false),
        cfg(3, true, true, false),
        cfg(2, false, true, true),
        cfg(3, false, false, true),
    ]
    .into_iter()
    .enumerate()
    {
        let base = 200_000 + 1000 * k as u64;
        failures.extend(campaign(seeds_from_env(base..base + 100), c));
    }
    let (runs, spread) =
        (RUNS.load(Ordering::Relaxed), ALL_MEMBERS_WRITTEN.load(Ordering::Relaxed));
    eprintln!(
        "{runs} runs, {spread} wrote every member; {} cuts during a recovery; {:.1} s",
        RECOVERY_CUTS.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{} failures, first: {}", failures.len(), failures[0]);
    assert!(spread * 10 > runs * 8, "only {spread} of {runs} runs wrote every member");
}

#[test]
fn crash_loops_on_two_and_three_members() {
    let mut failures = Vec::new();
    for (k, c) in
        [cfg(2, false, false, false), cfg(3, true, true, false), cfg(3, false, true, true)]
            .into_iter()
            .enumerate()
    {
        let base = 210_000 + 1000 * k as u64;
        let n = seeds_from_env(base..base + 40);
        let count = n.end - n.start;
        let f: Vec<String> = n.filter_map(|s| crash_loop(s, c).err()).collect();
        eprintln!("{count} crash loops ({c:?}): {} failures", f.len());
        failures.extend(f);
    }
    assert!(failures.is_empty(), "{} failures, first: {}", failures.len(), failures[0]);
}

// ---- Cuts during add and replace ----

/// What a run that added (or replaced) a member left: crash images of the old members and
/// of the new carrier (last), the model, whether the call returned, and the group's
/// operations before and after the call.
struct Changed {
    old: Vec<Vec<u8>>,
    new: Vec<u8>,
    model: Model,
    returned: bool,
    ops: std::ops::Range<u64>,
}

/// What the call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Add,
    /// Replace member `k`.
    Replace(usize),
}

/// Formats, runs [`OPS_BEFORE`] operations, then adds a member (or replaces one) on a used
/// disk with power cut at operation `cut` of the call (counted from its start; `None`: not
/// cut, the power goes right after it returned).
fn change_run(
    seed: u64,
    cfg: MConfig,
    change: Change,
    cut: Option<u64>,
    tear: u64,
) -> Result<Changed, String> {
    let Started { v, carriers, group, mut model } = start(seed, cfg);
    let mut rng = FaultRng::new(seed);
    for n in 0..OPS_BEFORE {
        mstep(&v, &carriers[0], &mut model, &mut rng, n)
            .map_err(|e| format!("seed {seed}: an operation failed without a power cut: {e}"))?;
    }
    if let Change::Replace(_) = change {
        // Everything committed first (the replace would commit it anyway).
        model.begin_commit(v.commit_id() + 1);
        v.commit().map_err(|e| format!("seed {seed}: commit: {e}"))?;
        model.commit_done(v.commit_id());
    }
    // The call changes no state, but moves generations: a growth step and the member table's
    // flip each take one, so later commit ids skip ahead (ids only grow). Modelled as a
    // commit in flight of the same state, a few ids ahead.
    let last = *model.committed.keys().next_back().expect("format committed");
    let same = model.committed[&last].clone();
    model.in_flight = Some((last + 4, same));
    let start = group.ops();
    if let Some(i) = cut {
        group.set_crash_plan(CrashPlan::AtOp(start + i));
    }
    let new = Arc::new(used_disk(MEMBER_BYTES, cfg.base.write_through, seed ^ 0xADD, &group));
    let carrier = MemberCarrier::new(Box::new(Arc::clone(&new)));
    let result = match change {
        Change::Add => v.add_member(carrier, None),
        Change::Replace(k) => v.replace_member(k, carrier, None),
    };
    let returned = match result {
        Ok(()) => true,
        Err(_) if group.crashed() => false,
        Err(e) => return Err(format!("seed {seed}: {change:?} failed without a power cut: {e}")),
    };
    if returned {
        let want = cfg.members + usize::from(change == Change::Add);
        if v.members().len() != want {
            return Err(format!("{change:?} returned with {} members", v.members().len()));
        }
    }
    let end = group.ops();
    group.cut_power();
    drop(v);
    let mut rng = FaultRng::new(seed ^ tear.wrapping_mul(0x9E37));
    Ok(Changed {
        old: crash_images(&carriers, &mut rng),
        new: new.crash_image(&mut rng),
        model,
        returned,
        ops: start..end,
    })
}

/// Which volume a read-only open of `images` finds, by member 0's adopted superblock:
/// `Ok(members)` or the refusal.
fn probe(images: &[Vec<u8>], cfg: MConfig) -> Result<usize, Error> {
    let opts = VolumeOptions { read_only: true, ..reopen_options(cfg.base) };
    let carriers = memory(images);
    Volume::open_members(given_memory(&carriers, 0), opts).map(|v| v.members().len())
}

/// What a reopen after a cut during an add found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AddOutcome {
    Old,
    Grown,
}

/// Checks one cut during an add: the old volume (the new carrier refused by name when it
/// is given) or the grown one, the content intact either way; the grown one takes a file
/// that needs the new member's blocks and reopens with it.
fn add_point(
    seed: u64,
    cfg: MConfig,
    cut: Option<u64>,
    tear: u64,
) -> Result<(AddOutcome, Changed), String> {
    let ch = change_run(seed, cfg, Change::Add, cut, tear)?;
    let fail = |e: String| format!("seed {seed} ({cfg:?}), add cut at {cut:?}, tear {tear}: {e}");
    let old_n = ch.old.len();
    let mut all = ch.old.clone();
    all.push(ch.new.clone());
    let (outcome, images) = match probe(&all, cfg) {
        Ok(n) if n == old_n + 1 => (AddOutcome::Grown, all),
        Ok(n) => return Err(fail(format!("open with the new carrier gave {n} members"))),
        Err(Error::Member { .. }) => {
            let n = probe(&ch.old, cfg).map_err(|e| {
                fail(format!("neither the grown volume nor the old one opens: {e}"))
            })?;
            if n != old_n {
                return Err(fail(format!("the old members open as {n} members")));
            }
            (AddOutcome::Old, ch.old.clone())
        }
        Err(e) => return Err(fail(format!("open refused: {e}"))),
    };
    if ch.returned && outcome == AddOutcome::Old {
        return Err(fail("add_member returned, but the old volume came back".into()));
    }
    let mut rng = FaultRng::new(seed ^ tear ^ 0xAD);
    verify_after_change(
        images,
        &ch.model,
        cfg,
        &mut rng,
        if outcome == AddOutcome::Grown { Spill::Added } else { Spill::No },
    )
    .map_err(fail)?;
    Ok((outcome, ch))
}

/// What [`verify_after_change`] writes after the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spill {
    /// Nothing.
    No,
    /// A large file, part of it necessarily on the member just added (empty until then).
    Added,
    /// A large file, on a volume whose member was just replaced by a copy.
    Copy,
}

/// `check` before open, now and then a cut during the recovery, open, compare, close,
/// `check`; then, as `spill` says, a file of three quarters of the free space, committed
/// and read back after a reopen.
fn verify_after_change(
    images: Vec<Vec<u8>>,
    m: &Model,
    cfg: MConfig,
    rng: &mut FaultRng,
    spill: Spill,
) -> Result<(), String> {
    check_before_open(&images)?;
    let images = if rng.chance(25) {
        cut_during_recovery(&images, cfg, rng)?.ok_or("open refused a changed volume")?
    } else {
        images
    };
    let carriers = verify_open(&images, m, cfg, rng)?;
    if spill == Spill::No {
        return Ok(());
    }
    let opts = reopen_options(cfg.base);
    let v = Volume::open_members(given_memory(&carriers, 1), opts)
        .map_err(|e| format!("reopen of the grown volume: {e}"))?;
    let last = v.members().last().cloned().expect("members");
    let free = v.info().free_blocks;
    // Three quarters of the free space, most of it on the new member (whose blocks are
    // most of what is free): at least what the old members cannot hold lands there.
    let len_blocks = free * 3 / 4;
    // An added member is empty: the old members' free space is what is not on it.
    let must = if spill == Spill::Added {
        len_blocks.saturating_sub(free.saturating_sub(last.blocks - 16)).max(1)
    } else {
        0
    };
    let len = (len_blocks * BS) as usize;
    let mut data = vec![0u8; len];
    rng.fill(&mut data);
    let f = v.create_file("/spill").map_err(|e| e.to_string())?;
    f.write_at(&data, 0).and_then(|()| v.commit()).map_err(|e| format!("spill: {e}"))?;
    v.close().map_err(|e| format!("close: {e}"))?;
    let v = Volume::open_members(given_memory(&carriers, 2), opts)
        .map_err(|e| format!("reopen after the spill: {e}"))?;
    let back = v.open_file("/spill").and_then(|f| f.read_to_end()).map_err(|e| e.to_string())?;
    if back != data {
        return Err("the spill file reads back different".into());
    }
    v.close().map_err(|e| format!("close: {e}"))?;
    // Blocks of it are on the new member (the old members had less room than the file).
    let blocks: std::collections::HashSet<&[u8]> = data.chunks_exact(BS as usize).collect();
    let on_last = carriers.last().expect("members");
    let mut block = vec![0u8; BS as usize];
    let mut found = 0;
    for at in (0..MEMBER_BYTES).step_by(BS as usize) {
        on_last.read_exact_at(&mut block, at).map_err(|e| e.to_string())?;
        found += u64::from(blocks.contains(block.as_slice()));
    }
    if found < must {
        return Err(format!("only {found} blocks of the spill file are on the new member"));
    }
    let refs: Vec<&dyn Carrier> = carriers.iter().map(|c| c.as_ref() as &dyn Carrier).collect();
    let report = check_members(&refs);
    if report.exit_code() != 0 {
        return Err(format!("check after the spill: {:?}", report.findings));
    }
    Ok(())
}

/// The add campaign: for each seed, a dry run counts the add's operations, then power is
/// cut at each of them (and right after the add returned), each cut read with two tears.
fn add_campaign(seeds: std::ops::Range<u64>, cfg: MConfig) -> Result<[u64; 2], String> {
    let mut seen = [0u64; 2];
    for seed in seeds {
        let dry = change_run(seed, cfg, Change::Add, None, 0)?;
        let n = dry.ops.end - dry.ops.start;
        for cut in (0..n).map(Some).chain([None]) {
            for tear in 0..2 {
                let (outcome, _) = add_point(seed, cfg, cut, tear)?;
                seen[usize::from(outcome == AddOutcome::Grown)] += 1;
            }
        }
    }
    Ok(seen)
}

/// The add configurations: from one member (fixed, and growing: member 0 grows to its cap
/// first, a flip of its own inside the add), and from two.
fn add_configs(mutation: Option<CommitMutation>) -> Vec<MConfig> {
    let grow = |mut c: MConfig| {
        c.base.grow = true;
        c
    };
    let mut out = vec![
        cfg(1, false, false, false),
        cfg(1, true, true, false),
        grow(cfg(1, false, false, false)),
        grow(cfg(1, true, true, false)),
        cfg(2, false, true, false),
        cfg(2, true, false, false),
        cfg(2, false, false, true),
    ];
    for c in &mut out {
        c.base.mutation = mutation;
    }
    out
}

#[test]
fn cuts_at_every_operation_of_an_add() {
    let started = std::time::Instant::now();
    let mut seen = [0u64; 2];
    for (k, c) in add_configs(None).into_iter().enumerate() {
        let base = 220_000 + 1000 * k as u64;
        let s = add_campaign(seeds_from_env(base..base + 4), c).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("add cuts ({c:?}): {} old volume, {} grown", s[0], s[1]);
        seen[0] += s[0];
        seen[1] += s[1];
    }
    eprintln!("add cuts: {seen:?} (old, grown) in {:.1} s", started.elapsed().as_secs_f64());
    assert!(seen[0] > 20 && seen[1] > 20, "both outcomes must occur: {seen:?}");
}

/// The kept mutant: the member table names the new member before its zeros and identity
/// are durable. A cut after the add leaves member 0 naming a member whose carrier lost its
/// identity (open refuses) or whose bitmap is the used disk's old bytes (`check` finds it).
#[test]
fn add_campaign_catches_member_before_zeros() {
    let mut caught = None;
    'outer: for (k, c) in
        add_configs(Some(CommitMutation::MemberBeforeZeros)).into_iter().enumerate()
    {
        let base = 220_000 + 1000 * k as u64;
        for seed in base..base + 4 {
            if let Err(e) = add_campaign(seed..seed + 1, c) {
                caught = Some(e);
                break 'outer;
            }
        }
    }
    let e = caught.expect("MemberBeforeZeros: the add campaign saw nothing");
    assert!(!e.contains("without a power cut"), "caught for another reason: {e}");
    eprintln!("MemberBeforeZeros caught: {e}");
}

/// Checks one cut during a replace of member `k`: exactly one of the old and the new
/// carrier opens as member `k`, with all the content; a volume on the copy then takes a
/// file that fills most of its free space, and reopens with it.
fn replace_point(
    seed: u64,
    cfg: MConfig,
    k: usize,
    cut: Option<u64>,
    tear: u64,
) -> Result<bool, String> {
    let ch = change_run(seed, cfg, Change::Replace(k), cut, tear)?;
    let fail = |e: String| {
        format!("seed {seed} ({cfg:?}), replace of {k} cut at {cut:?}, tear {tear}: {e}")
    };
    let mut with_new = ch.old.clone();
    with_new[k].clone_from(&ch.new);
    let old = probe(&ch.old, cfg);
    let new = probe(&with_new, cfg);
    let (images, switched) = match (old, new) {
        (Ok(_), Err(_)) => (ch.old.clone(), false),
        (Err(_), Ok(_)) => (with_new, true),
        (Ok(_), Ok(_)) => return Err(fail("both the old and the new carrier open".into())),
        (Err(a), Err(b)) => {
            return Err(fail(format!("neither carrier opens: old: {a}; new: {b}")));
        }
    };
    if ch.returned && !switched {
        return Err(fail("replace_member returned, but the old carrier is in use".into()));
    }
    let mut rng = FaultRng::new(seed ^ tear ^ 0x8E);
    verify_after_change(
        images,
        &ch.model,
        cfg,
        &mut rng,
        if switched { Spill::Copy } else { Spill::No },
    )
    .map_err(fail)?;
    Ok(switched)
}

#[test]
fn cuts_at_every_operation_of_a_replace() {
    let started = std::time::Instant::now();
    let mut seen = [0u64; 2];
    for (i, (c, k)) in [
        (cfg(2, false, false, false), 1),
        (cfg(2, true, true, false), 1),
        (cfg(3, false, true, false), 2),
        (cfg(3, true, false, true), 1),
    ]
    .into_iter()
    .enumerate()
    {
        let base = 230_000 + 1000 * i as u64;
        for seed in seeds_from_env(base..base + 4) {
            let dry =
                change_run(seed, c, Change::Replace(k), None, 0).unwrap_or_else(|e| panic!("{e}"));
            let n = dry.ops.end - dry.ops.start;
            for cut in (0..n).map(Some).chain([None]) {
                for tear in 0..2 {
                    let switched =
                        replace_point(seed, c, k, cut, tear).unwrap_or_else(|e| panic!("{e}"));
                    seen[usize::from(switched)] += 1;
                }
            }
        }
    }
    eprintln!(
        "replace cuts: {} old carrier in use, {} the copy; {:.1} s",
        seen[0],
        seen[1],
        started.elapsed().as_secs_f64()
    );
    assert!(seen[0] > 20 && seen[1] > 20, "both outcomes must occur: {seen:?}");
}
