//! The raft log's crash campaign with many groups in one log: appends, truncations, purges,
//! votes and committed ids of several groups interleaved, groups created and dropped at run
//! time, and (openraft 0.10's pattern) appends of several groups in flight at once, combined
//! into shared durable writes. Power is cut at a seeded carrier operation, sometimes again
//! during the recovery; then every group is checked against its own model.
//!
//! Purges also jump past a group's last entry, as a snapshot install does, and the group's
//! next entries start after the jump.
//!
//! Groups are also rewritten forward (`LogCore::rewrite`, their live entries copied to the
//! log's end so that older segments can go), asked for and by the space bound: the log runs
//! with a tight one, so that purges rewrite laggard groups and free what that released.
//!
//! Counted and required to be zero: an acknowledged entry or a returned vote of any group
//! lost, a group reading another's entry (each group's payloads are seeded by its id), a
//! group appearing or vanishing other than by the create or drop in flight, and opens
//! refused on a log that only lost power. Purges free segments only when no group needs
//! them: a mutant that frees by the purging group's own purge point must be caught, and so must
//! one whose rewrites leave out a group's newest entry, and one that frees the segment holding
//! a group's newest vote (a `Vote` frame, segment format 8) without saving its meta file, one
//! that does the same to a group's newest purge point (a `Purge` frame, segment format 9) or to
//! the `Commit` frame of its newest durable committed id, and one that counts a committed id
//! durable by a `Commit` frame whose entry is purged.
//! Rerun one seed with `VELLUM_CRASH_SEED=<seed>`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use vellum_engine::carrier::{CrashPlan, FaultRng, FaultyCarrier, MemoryCarrier};
use vellum_engine::{FormatOptions, Volume, VolumeOptions};
use vellum_raft_store::log::{self, LogConfig, LogCore, LogEntry, LogIo};

const VOLUME: u64 = 8 << 20;

/// What the runs did (uncut runs only): groups created and dropped, and bursts whose appends
/// of two groups or more were all acknowledged.
static CREATED: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);
static SHARED_BURSTS: AtomicU64 = AtomicU64::new(0);
/// Purges that jumped past a group's last entry (a snapshot install) while it held entries.
static JUMPED: AtomicU64 = AtomicU64::new(0);
/// Entries copied by rewrites that returned (asked for, or made by the space bound).
static REWRITTEN: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The protocol mutant this thread's logs run with (the mutant test sets it).
    static MUTATION: std::cell::Cell<Option<log::LogMutation>> = const { std::cell::Cell::new(None) };
}

fn config(io: LogIo) -> LogConfig {
    LogConfig {
        segment_bytes: 64 << 10,
        hot_window_bytes: 8 << 10,
        background_spares: false,
        io,
        // A tight space bound: purges rewrite the groups that pin the oldest segments.
        space_factor: 1,
        rewrite_max_bytes: 24 << 10,
        mutation: MUTATION.get(),
        ..LogConfig::default()
    }
}

/// Entry bytes, seeded by the group as well: an entry read through another group's handle
/// never matches.
fn payload(group: u64, index: u64, term: u64, len: usize) -> Arc<[u8]> {
    let mut rng = FaultRng::new(index.wrapping_mul(0x9E37_79B9) ^ term ^ group.rotate_left(40));
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    Arc::from(v)
}

/// One group's durable state as the model sees it.
#[derive(Debug, Clone, Default, PartialEq)]
struct Group {
    log: BTreeMap<u64, (u64, Arc<[u8]>)>,
    vote: Option<Vec<u8>>,
    /// Every committed index saved, in order (only grows).
    committed: Vec<u64>,
    /// The committed index the log reported durable after the last operation that returned.
    committed_durable: Option<u64>,
    /// The purge point (only grows).
    purged: Option<u64>,
    term: u64,
}

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<LogEntry>),
    Truncate(u64),
    Purge(u64),
    Vote(Vec<u8>),
    Committed(u64),
    /// Changes nothing a reader sees.
    Rewrite,
}

impl Group {
    fn apply(&mut self, op: &Op) {
        match op {
            Op::Append(es) => {
                for e in es {
                    self.log.insert(e.index, (e.term, Arc::clone(&e.payload)));
                }
            }
            Op::Truncate(since) => drop(self.log.split_off(since)),
            Op::Purge(upto) => {
                self.log = self.log.split_off(&(upto + 1));
                self.purged = self.purged.max(Some(*upto));
            }
            Op::Vote(v) => self.vote = Some(v.clone()),
            Op::Committed(c) => self.committed.push(*c),
            Op::Rewrite => {}
        }
    }

    /// The states recovery may produce with `op` in flight: before it, after it, and for an
    /// append any prefix holding the first `acked` entries.
    fn candidates(&self, op: &Op, acked: usize) -> Vec<Group> {
        let mut out = Vec::new();
        match op {
            Op::Append(es) => {
                for n in acked..=es.len() {
                    let mut g = self.clone();
                    g.apply(&Op::Append(es[..n].to_vec()));
                    out.push(g);
                }
            }
            op => {
                out.push(self.clone());
                let mut g = self.clone();
                g.apply(op);
                out.push(g);
            }
        }
        out
    }
}

/// What was in flight at the power cut.
#[derive(Debug, Clone)]
enum Flight {
    One(u64, Op),
    Create(u64),
    Drop(u64),
    /// Appends of several groups submitted without waiting, with how many entries of each
    /// were acknowledged durable.
    Burst(Vec<(u64, Vec<LogEntry>, usize)>),
}

#[derive(Debug, Default)]
struct Model {
    groups: BTreeMap<u64, Group>,
    flight: Option<Flight>,
    next_id: u64,
}

/// A recovered group: entries, vote, committed id bytes, purge point.
type Recovered = (BTreeMap<u64, (u64, Arc<[u8]>)>, Option<Vec<u8>>, Option<Vec<u8>>, Option<u64>);

fn recovered(core: &LogCore) -> Recovered {
    let (first, last) = core.bounds();
    let entries = last.map_or_else(Vec::new, |l| core.read(first, l + 1).unwrap());
    let meta = core.meta();
    (
        entries.into_iter().map(|e| (e.index, (e.term, e.payload))).collect(),
        meta.vote,
        meta.committed,
        meta.purged_index,
    )
}

fn same(g: &Group, got: &Recovered) -> bool {
    g.log == got.0 && g.vote == got.1 && g.purged == got.3
}

fn committed_bytes(index: u64) -> Vec<u8> {
    format!("committed {index}").into_bytes()
}

/// The recovered committed id was saved, is at least what was reported durable, and names an
/// entry the group holds or purged.
fn committed_ok(g: &Group, got: &Recovered, purged: Option<u64>) -> Result<(), String> {
    let index = match &got.2 {
        None => None,
        Some(b) => {
            let text = String::from_utf8_lossy(b);
            let i = text.strip_prefix("committed ").and_then(|i| i.parse::<u64>().ok());
            match i {
                Some(i) if g.committed.contains(&i) => Some(i),
                _ => return Err(format!("committed id {text:?} was never saved")),
            }
        }
    };
    if index < g.committed_durable {
        return Err(format!("committed {index:?} below the durable {:?}", g.committed_durable));
    }
    if let Some(c) = index {
        let last = got.0.keys().next_back().copied();
        if last.is_none_or(|l| c > l) && purged.is_none_or(|p| c > p) {
            return Err(format!("committed {c} past the log ({last:?}, purged {purged:?})"));
        }
    }
    Ok(())
}

fn group_op(rng: &mut FaultRng, id: u64, core: &LogCore, g: &mut Group) -> Op {
    let (first, last) = core.bounds();
    let committed = g.committed.last().copied();
    let truncatable = last.filter(|&l| committed.is_none_or(|c| l > c));
    let purgeable = committed.filter(|&c| c >= first);
    let append = |g: &Group, rng: &mut FaultRng| {
        let start = last.map_or(first, |l| l + 1);
        let n = 1 + rng.below(4);
        let entries = (start..start + n)
            .map(|index| {
                let len = 1 + rng.below(3000) as usize;
                LogEntry { index, term: g.term, payload: payload(id, index, g.term, len) }
            })
            .collect();
        Op::Append(entries)
    };
    match rng.below(100) {
        0..=54 => append(g, rng),
        55..=64 if truncatable.is_some() => {
            let last = truncatable.unwrap();
            let low = committed.map_or(first, |c| c + 1).max(first);
            g.term += 1;
            Op::Truncate(low + rng.below(last - low + 1))
        }
        65..=67 => {
            // A snapshot install: the purge point jumps past the group's last entry, and its
            // next entries start after it (recovery must take the jump, also when the group
            // is dropped later).
            Op::Purge(last.unwrap_or(first) + 1 + rng.below(4))
        }
        68..=76 if purgeable.is_some() => {
            Op::Purge(first + rng.below(purgeable.unwrap() - first + 1))
        }
        77..=84 => {
            g.term += 1;
            Op::Vote(format!("vote {id} term {}", g.term).into_bytes())
        }
        85..=89 => Op::Rewrite,
        _ => match (committed, last) {
            (Some(c), Some(t)) if t > c => Op::Committed(c + 1 + rng.below(t - c)),
            (None, Some(t)) => Op::Committed(first + rng.below(t - first + 1)),
            _ => append(g, rng),
        },
    }
}

fn term_at(core: &LogCore, index: u64) -> u64 {
    core.read(index, index + 1).ok().and_then(|e| e.first().map(|e| e.term)).unwrap_or(0)
}

fn execute(core: &LogCore, op: &Op) -> Result<(), vellum_raft_store::Error> {
    match op {
        Op::Append(es) => log::wait(|done| core.append(es.clone(), done)),
        Op::Truncate(since) => log::wait(|done| core.truncate(*since, done)),
        Op::Purge(upto) => core.purge(*upto, upto.to_le_bytes().to_vec()),
        Op::Vote(v) => log::wait(|done| core.save_vote(v.clone(), done)),
        Op::Committed(c) => core.save_committed(*c, term_at(core, *c), committed_bytes(*c)),
        Op::Rewrite => core.rewrite().map(|n| {
            REWRITTEN.fetch_add(n as u64, Ordering::Relaxed);
        }),
    }
}

/// Submits one append per group without waiting, then waits for every callback; returns the
/// entries acknowledged per group and whether all succeeded.
fn burst(core: &LogCore, appends: &mut [(u64, Vec<LogEntry>, usize)]) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut submitted = 0;
    for (slot, (id, es, _)) in appends.iter().enumerate() {
        let handle = core.group(*id).unwrap();
        let (tx, n) = (tx.clone(), es.len());
        if handle
            .append(es.clone(), Box::new(move |r| drop(tx.send(r.map(|()| (slot, n))))))
            .is_err()
        {
            break;
        }
        submitted += 1;
    }
    drop(tx);
    let mut ok = submitted == appends.len();
    for r in rx.iter().take(submitted) {
        match r {
            Ok((slot, n)) => appends[slot].2 = n,
            Err(_) => ok = false,
        }
    }
    ok
}

fn count(crash_at: Option<u64>, what: &AtomicU64) {
    if crash_at.is_none() {
        what.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs the workload of `seed`, cutting power at mutating carrier operation `crash_at`.
fn run(
    seed: u64,
    crash_at: Option<u64>,
    io: LogIo,
    ops: usize,
) -> (Arc<FaultyCarrier>, Model, u64) {
    let carrier = Arc::new(FaultyCarrier::new(VOLUME, true));
    let journal = seed % 2 == 1;
    let format = FormatOptions {
        journal,
        journal_bytes: if journal { 16 << 12 } else { 0 },
        ..FormatOptions::default()
    };
    let volume =
        Volume::format(Box::new(Arc::clone(&carrier)), &format, VolumeOptions::default()).unwrap();
    let core = LogCore::open(volume, config(io)).unwrap();
    let mut model = Model { next_id: 1, ..Model::default() };
    model.groups.insert(0, Group { term: 1, ..Group::default() });
    let start = carrier.ops();
    if let Some(at) = crash_at {
        carrier.set_crash_plan(CrashPlan::AtOp(start + at));
    }
    let mut rng = FaultRng::new(seed);
    for _ in 0..ops {
        let ids: Vec<u64> = model.groups.keys().copied().collect();
        let roll = rng.below(100);
        let failed = if roll < 6 && ids.len() < 6 {
            let id = model.next_id;
            model.next_id += 1;
            model.flight = Some(Flight::Create(id));
            let r = core.create_group(id);
            if r.is_ok() {
                model.groups.insert(id, Group { term: 1, ..Group::default() });
                count(crash_at, &CREATED);
            }
            r.is_err()
        } else if roll < 9 && ids.len() > 2 {
            let id = ids[1 + rng.below(ids.len() as u64 - 1) as usize];
            model.flight = Some(Flight::Drop(id));
            let r = core.drop_group(id);
            if r.is_ok() {
                model.groups.remove(&id);
                count(crash_at, &DROPPED);
            }
            r.is_err()
        } else if roll < 30 && io == LogIo::Thread && ids.len() > 1 {
            let mut appends = Vec::new();
            for &id in &ids {
                if !rng.chance(70) {
                    continue;
                }
                let (first, last) = core.group(id).unwrap().bounds();
                let start = last.map_or(first, |l| l + 1);
                let term = model.groups[&id].term;
                let entries: Vec<LogEntry> = (start..start + 1 + rng.below(3))
                    .map(|i| LogEntry {
                        index: i,
                        term,
                        payload: payload(id, i, term, 1 + rng.below(2500) as usize),
                    })
                    .collect();
                appends.push((id, entries, 0));
            }
            model.flight = Some(Flight::Burst(appends.clone()));
            let ok = burst(&core, &mut appends);
            model.flight = Some(Flight::Burst(appends.clone()));
            if ok {
                if appends.len() > 1 {
                    count(crash_at, &SHARED_BURSTS);
                }
                for (id, es, _) in &appends {
                    model.groups.get_mut(id).unwrap().apply(&Op::Append(es.clone()));
                }
            }
            !ok
        } else {
            let id = ids[rng.below(ids.len() as u64) as usize];
            let handle = core.group(id).unwrap();
            let op = group_op(&mut rng, id, &handle, model.groups.get_mut(&id).unwrap());
            model.flight = Some(Flight::One(id, op.clone()));
            let r = execute(&handle, &op);
            if r.is_ok() {
                if matches!(op, Op::Purge(_)) {
                    // The space bound holds after every purge, or the log names the groups
                    // that keep it from holding.
                    let (used, bound) = core.space();
                    assert!(
                        used <= bound.unwrap() || !core.compact_wanted().is_empty(),
                        "seed {seed}: {used} bytes of segments over the bound {bound:?}"
                    );
                }
                let g = model.groups.get_mut(&id).unwrap();
                if let Op::Purge(upto) = op
                    && g.log.keys().next_back().is_some_and(|&l| upto > l)
                {
                    count(crash_at, &JUMPED);
                }
                g.apply(&op);
                let durable = handle.durable_committed_index();
                assert!(durable >= g.committed_durable, "the durable committed id went back");
                g.committed_durable = durable;
            }
            r.is_err()
        };
        if failed {
            assert!(
                carrier.crashed(),
                "seed {seed}: {:?} failed without a power cut",
                model.flight
            );
            break;
        }
        model.flight = None;
    }
    carrier.cut_power();
    let total = carrier.ops() - start;
    drop(core);
    (carrier, model, total)
}

/// Checks the recovered log against the model; returns a description of the first mismatch.
fn check(core: &LogCore, model: &Model) -> Result<(), String> {
    let have: BTreeSet<u64> = core.groups().into_iter().collect();
    let mut want: BTreeSet<u64> = model.groups.keys().copied().collect();
    match &model.flight {
        Some(Flight::Create(id)) if have.contains(id) => {
            want.insert(*id);
        }
        Some(Flight::Drop(id)) if !have.contains(id) => {
            want.remove(id);
        }
        _ => {}
    }
    if have != want {
        return Err(format!(
            "recovered groups {have:?}, the model holds {want:?} ({:?})",
            model.flight
        ));
    }
    for &id in &have {
        let got = recovered(&core.group(id).unwrap());
        let purged = core.group(id).unwrap().meta().purged_index;
        let fresh = Group::default();
        let g = model.groups.get(&id).unwrap_or(&fresh);
        let (ok, check_committed) = match &model.flight {
            Some(Flight::Create(c)) if *c == id => (got.0.is_empty() && got.1.is_none(), false),
            // The tombstone made durable, the meta file not yet removed: the entries are gone.
            Some(Flight::Drop(d)) if *d == id => {
                (same(g, &got) || (got.0.is_empty() && got.1 == g.vote), false)
            }
            Some(Flight::One(o, op)) if *o == id => {
                (g.candidates(op, 0).iter().any(|c| same(c, &got)), true)
            }
            Some(Flight::Burst(appends)) => match appends.iter().find(|a| a.0 == id) {
                Some((_, es, acked)) => (
                    g.candidates(&Op::Append(es.clone()), *acked).iter().any(|c| same(c, &got)),
                    true,
                ),
                None => (same(g, &got), true),
            },
            _ => (same(g, &got), true),
        };
        if !ok {
            let want: Vec<_> = g.log.iter().map(|(k, v)| (*k, v.0)).collect();
            let have: Vec<_> = got.0.iter().map(|(k, v)| (*k, v.0)).collect();
            return Err(format!(
                "group {id}: recovered {have:?} vote {:?} purged {:?}; the model holds {want:?} vote {:?} purged {:?}; in flight {:?}",
                got.1.as_deref().map(String::from_utf8_lossy),
                got.3,
                g.vote.as_deref().map(String::from_utf8_lossy),
                g.purged,
                model
                    .flight
                    .as_ref()
                    .map(|f| format!("{f:?}").chars().take(80).collect::<String>())
            ));
        }
        if check_committed {
            committed_ok(g, &got, purged).map_err(|e| format!("group {id}: {e}"))?;
        }
    }
    Ok(())
}

fn verify(image: Vec<u8>, model: &Model, rng: &mut FaultRng) -> Result<(), String> {
    let image = if rng.chance(20) {
        // A second power cut at any operation of the recovery.
        let dry = Arc::new(FaultyCarrier::from_bytes(image.clone(), true));
        if let Ok(v) = Volume::open(Box::new(Arc::clone(&dry)), VolumeOptions::default()) {
            drop(LogCore::open(v, config(LogIo::Inline)));
        }
        let second = Arc::new(FaultyCarrier::from_bytes(image, true));
        second.set_crash_plan(CrashPlan::AtOp(rng.below(dry.ops().max(1))));
        if let Ok(v) = Volume::open(Box::new(Arc::clone(&second)), VolumeOptions::default()) {
            drop(LogCore::open(v, config(LogIo::Inline)));
        }
        second.cut_power();
        second.crash_image(rng)
    } else {
        image
    };
    let mem = Arc::new(MemoryCarrier::from_bytes(&image));
    let volume = Volume::open(Box::new(Arc::clone(&mem)), VolumeOptions::default())
        .map_err(|e| format!("volume open refused: {e}"))?;
    let core = LogCore::open(volume.clone(), config(LogIo::Inline))
        .map_err(|e| format!("log open refused: {e}"))?;
    check(&core, model)?;
    // Every group takes appends after the recovery, and keeps them across a clean reopen.
    let mut more = BTreeMap::new();
    for id in core.groups() {
        let handle = core.group(id).unwrap();
        let (first, last) = handle.bounds();
        let next = last.map_or(first, |l| l + 1);
        let es: Vec<LogEntry> = (next..next + 2)
            .map(|i| LogEntry { index: i, term: 999, payload: payload(id, i, 999, 500) })
            .collect();
        log::wait(|done| handle.append(es.clone(), done))
            .map_err(|e| format!("group {id}: append after recovery: {e}"))?;
        more.insert(id, es);
    }
    drop(core);
    volume.close().map_err(|e| format!("close: {e}"))?;
    let volume = Volume::open(
        Box::new(MemoryCarrier::from_bytes(&mem.to_bytes())),
        VolumeOptions::default(),
    )
    .unwrap();
    let core = LogCore::open(volume, config(LogIo::Inline))
        .map_err(|e| format!("reopen after recovery refused: {e}"))?;
    for (id, es) in more {
        let got = recovered(&core.group(id).map_err(|e| format!("group {id} after reopen: {e}"))?);
        for e in es {
            if got.0.get(&e.index) != Some(&(e.term, Arc::clone(&e.payload))) {
                return Err(format!(
                    "group {id}: entry {} appended after recovery is lost",
                    e.index
                ));
            }
        }
    }
    Ok(())
}

fn crash_point(seed: u64, io: LogIo) -> Result<(), String> {
    let ops = 60;
    let (whole, model, total) = run(seed, None, io, ops);
    let mut rng = FaultRng::new(seed ^ 0x00C0_FFEE);
    // The cut after the last operation is a crash point too: every purge of the run is done.
    let image = whole.crash_image(&mut rng);
    verify(image, &model, &mut rng).map_err(|e| format!("seed {seed}, cut after the run: {e}"))?;
    let at = rng.below(total.max(1));
    let (carrier, model, _) = run(seed, Some(at), io, ops);
    let image = carrier.crash_image(&mut rng);
    verify(image, &model, &mut rng).map_err(|e| format!("seed {seed}, crash at op {at}: {e}"))
}

fn seeds(default: std::ops::Range<u64>) -> std::ops::Range<u64> {
    match std::env::var("VELLUM_CRASH_SEED").ok().and_then(|s| s.parse::<u64>().ok()) {
        Some(s) => s..s + 1,
        None => default,
    }
}

fn campaign(range: std::ops::Range<u64>, io: LogIo) -> Vec<String> {
    range.filter_map(|s| crash_point(s, io).err()).collect()
}

#[test]
fn power_cuts_lose_no_entry_or_vote_of_any_group() {
    let range = seeds(0..600);
    let n = range.end - range.start;
    let failures = campaign(range, LogIo::Inline);
    let (created, dropped) = (CREATED.load(Ordering::Relaxed), DROPPED.load(Ordering::Relaxed));
    eprintln!(
        "{n} crash points with interleaved groups ({created} groups created and {dropped} dropped, {} purges past a group's end in the runs): {} failures",
        JUMPED.load(Ordering::Relaxed),
        failures.len()
    );
    assert!(failures.is_empty(), "{} of {n} failed; first: {}", failures.len(), failures[0]);
    if n > 1 {
        assert!(created > 0 && dropped > 0, "the runs never created or dropped a group");
        assert!(REWRITTEN.load(Ordering::Relaxed) > 0, "no rewrite copied an entry");
        assert!(JUMPED.load(Ordering::Relaxed) > 0, "no purge jumped past a group's entries");
    }
}

#[test]
fn power_cuts_with_appends_of_many_groups_in_flight() {
    let range = seeds(10_000..10_300);
    let n = range.end - range.start;
    let failures = campaign(range, LogIo::Thread);
    let shared = SHARED_BURSTS.load(Ordering::Relaxed);
    eprintln!(
        "{n} crash points with several groups' appends in flight ({shared} bursts of several groups acknowledged in the runs): {} failures",
        failures.len()
    );
    assert!(failures.is_empty(), "{} of {n} failed; first: {}", failures.len(), failures[0]);
    if n > 1 {
        assert!(shared > 0, "no burst carried the appends of several groups");
    }
}

/// Runs the campaign's 200 inline crash points with `mutation` and requires that some fail;
/// `what` names the broken rule in the report.
fn mutant_is_caught(mutation: log::LogMutation, what: &str) {
    MUTATION.set(Some(mutation));
    let range = seeds(0..200);
    let n = range.end - range.start;
    let failed = campaign(range, LogIo::Inline).len();
    MUTATION.set(None);
    eprintln!("the mutant that {what} fails {failed} of {n} crash points");
    if n > 1 {
        assert!(failed > 0, "no crash point caught the mutant that {what}");
    }
}

/// The mutant of the rewrite rule: a rewrite leaves out the group's newest entry and still
/// releases the older segments. Once one of them is freed, that entry is lost.
#[test]
fn a_rewrite_that_leaves_an_entry_behind_is_caught() {
    mutant_is_caught(log::LogMutation::RewriteShort, "leaves an entry behind in a rewrite");
}

/// The mutant of the purge rule: a purge frees segments by its own group's purge point
/// alone. Another group's entries in them are then lost, and the campaign must catch it.
#[test]
fn freeing_a_segment_another_group_needs_is_caught() {
    mutant_is_caught(log::LogMutation::FreeNeeded, "frees segments other groups need");
}

/// The mutant of the vote rule: a purge frees the segment holding a group's newest vote (a
/// `Vote` frame) without saving that group's meta file first. Recovery then finds an older
/// vote, and the campaign must catch it.
#[test]
fn freeing_the_segment_of_a_groups_newest_vote_is_caught() {
    mutant_is_caught(log::LogMutation::FreeVote, "frees a group's newest vote");
}

/// The mutant of the purge-point rule: a purge frees the segment holding a group's newest
/// purge point (a `Purge` frame) without saving that group's meta file first. Recovery then
/// finds an older purge point, or none, and the campaign must catch it.
#[test]
fn freeing_the_segment_of_a_groups_newest_purge_point_is_caught() {
    mutant_is_caught(log::LogMutation::FreePurge, "frees a group's newest purge point");
}

/// The mutant of the committed-id rule for purges: a purge frees the segment holding the
/// `Commit` frame of a group's newest durable committed id without saving that id to the
/// group's meta file first (a purge is a frame, so no meta save of it holds the id). The
/// recovered committed id is then below the one reported durable.
#[test]
fn freeing_the_segment_of_a_groups_durable_commit_frame_is_caught() {
    mutant_is_caught(log::LogMutation::FreeCommit, "frees a group's durable commit frame");
}

/// The mutant of the committed-id rule: a `Commit` frame naming a purged entry (a snapshot
/// install purged past it) counts the id durable, though recovery adopts no such frame. The
/// recovered committed id is then below the one reported durable.
#[test]
fn a_commit_frame_of_a_purged_entry_counted_durable_is_caught() {
    mutant_is_caught(log::LogMutation::CommitPurged, "counts a purged entry's commit frame");
}

/// The mutant of the recovery rule for purge frames: a `Commit` frame whose entry a later
/// `Purge` frame took is ignored, as if the entry had been truncated (no entry is left to
/// check its term against). The meta file's older id then stands, below the one reported
/// durable.
#[test]
fn a_commit_frame_forgotten_after_its_purge_is_caught() {
    mutant_is_caught(log::LogMutation::CommitForgetsPurge, "forgets a purged commit frame");
}
