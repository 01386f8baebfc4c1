//! The raft log's crash campaign on the engine's fault-injecting carrier: random append /
//! truncate / purge / vote / committed workloads, power cut at seeded points, then recovery.
//!
//! Counted and required to be zero: acknowledged entries lost, the last returned vote lost,
//! garbage read as entries, and opens refused on a log that only lost power. The committed
//! id is saved lazily (it rides on the next write): recovery must report one that was saved,
//! at least the one the log had reported durable, and never one past the entries it holds.
//! After every recovery the log must also take new appends and reopen cleanly (the torn-tail
//! fence works).
//!
//! Two call patterns: openraft 0.9's (one operation at a time, the log written inline, so a
//! seed's crash point is reproducible to the carrier operation), and openraft 0.10's (bursts
//! of appends submitted without waiting, acknowledged by callbacks from the log's IO thread
//! as their writes return; an entry whose callback said durable must survive).
//!
//! Purges free segments, and later rolls reuse them (a recycled file under a fresh salt):
//! the runs count how many, and a mutant that keeps the old salt must fail.
//!
//! Crash loops (`power_cuts_in_a_row_at_segment_rolls`): five power cuts in a row, each
//! during the recovery from the one before (its fence, the roll a fence needs) or during the
//! first appends after it, arranged to land at segment rolls; checked against the model after
//! every cut. A fence that rolls without marking its segment fails 22 of the 300 loops.
//! Rerun one seed with `VELLUM_CRASH_SEED=<seed>`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;

use vellum_engine::carrier::{CrashPlan, FaultRng, FaultyCarrier, MemoryCarrier};
use vellum_engine::{FormatOptions, Volume, VolumeOptions};
use vellum_raft_store::log::{self, LogConfig, LogCore, LogEntry, LogIo};

const VOLUME: u64 = 8 << 20;

/// Power cuts that fell inside a burst after some of its appends were acknowledged and
/// before all were: the state the 0.10 pattern exists to reach.
static CUT_MID_BURST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Spares made from a purged segment (a recycled file under a fresh salt) in the runs.
static RECYCLED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

thread_local! {
    /// The protocol mutant this thread's logs run with (the mutant tests set it).
    static MUTATION: std::cell::Cell<Option<log::LogMutation>> = const { std::cell::Cell::new(None) };
}

/// How the workload calls the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pattern {
    /// openraft 0.9: every operation waited for before the next, written inline.
    OneAtATime,
    /// openraft 0.10: bursts of appends in flight at once, written by the IO thread.
    InFlight,
}

fn config(background: bool, pattern: Pattern) -> LogConfig {
    LogConfig {
        segment_bytes: 64 << 10,
        hot_window_bytes: 8 << 10,
        background_spares: background,
        io: match pattern {
            Pattern::OneAtATime => LogIo::Inline,
            Pattern::InFlight => LogIo::Thread,
        },
        mutation: MUTATION.get(),
        ..LogConfig::default()
    }
}

fn payload(index: u64, term: u64, len: usize) -> Arc<[u8]> {
    let mut rng = FaultRng::new(index.wrapping_mul(0x9E37_79B9) ^ term);
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    Arc::from(v)
}

/// What recovery produced: entries, vote, committed.
type Recovered = (BTreeMap<u64, (u64, Arc<[u8]>)>, Option<Vec<u8>>, Option<Vec<u8>>);

/// The durable state the model expects, and the one operation that may be in flight.
#[derive(Debug, Clone, Default)]
struct Model {
    log: BTreeMap<u64, (u64, Arc<[u8]>)>,
    vote: Option<Vec<u8>>,
    /// Every committed index saved, in order (only grows).
    committed: Vec<u64>,
    /// The committed index the log reported durable after the last operation that returned.
    committed_durable: Option<u64>,
    in_flight: Option<Op>,
    /// Entries of the in-flight burst whose callbacks reported them durable.
    acked: usize,
}

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<LogEntry>),
    /// Consecutive appends submitted one after another without waiting (openraft 0.10).
    Burst(Vec<Vec<LogEntry>>),
    Truncate(u64),
    Purge(u64),
    Vote(Vec<u8>),
    Committed(u64),
}

impl Model {
    fn apply(&mut self, op: &Op) {
        match op {
            Op::Append(es) => {
                for e in es {
                    self.log.insert(e.index, (e.term, Arc::clone(&e.payload)));
                }
            }
            Op::Burst(appends) => {
                for es in appends {
                    self.apply(&Op::Append(es.clone()));
                }
            }
            Op::Truncate(since) => {
                self.log.split_off(since);
            }
            Op::Purge(upto) => {
                self.log = self.log.split_off(&(upto + 1));
            }
            Op::Vote(v) => self.vote = Some(v.clone()),
            Op::Committed(c) => self.committed.push(*c),
        }
    }

    /// Every state recovery may legitimately produce: the durable one, or the in-flight
    /// operation applied (an append possibly only in part, as a prefix; a burst as any
    /// prefix that holds every entry acknowledged durable).
    fn candidates(&self) -> Vec<Model> {
        if let Some(Op::Burst(appends)) = &self.in_flight {
            let all: Vec<LogEntry> = appends.iter().flatten().cloned().collect();
            return (self.acked..=all.len())
                .map(|n| {
                    let mut m = self.clone();
                    m.apply(&Op::Append(all[..n].to_vec()));
                    m
                })
                .collect();
        }
        let mut out = vec![self.clone()];
        match &self.in_flight {
            Some(Op::Append(es)) => {
                for n in 1..=es.len() {
                    let mut m = self.clone();
                    m.apply(&Op::Append(es[..n].to_vec()));
                    out.push(m);
                }
            }
            Some(op) => {
                let mut m = self.clone();
                m.apply(op);
                out.push(m);
            }
            None => {}
        }
        out
    }
}

struct Run {
    carrier: Arc<FaultyCarrier>,
    model: Model,
    term: u64,
    pattern: Pattern,
}

fn next_op(rng: &mut FaultRng, core: &LogCore, run: &mut Run) -> Op {
    let (first, last) = core.bounds();
    // As in raft: committed entries are never truncated, purges stay at or below the
    // committed index, and the committed index only grows, within the log.
    let committed = run.model.committed.last().copied();
    let truncatable = last.filter(|&l| committed.is_none_or(|c| l > c));
    let purgeable = committed.filter(|&c| c >= first);
    match rng.below(100) {
        0..=59 if run.pattern == Pattern::InFlight && rng.chance(60) => {
            let mut next = last.map_or(first, |l| l + 1);
            let appends = (0..2 + rng.below(7))
                .map(|_| {
                    let n = 1 + rng.below(4);
                    let entries: Vec<LogEntry> = (next..next + n)
                        .map(|index| {
                            let len = 1 + rng.below(3000) as usize;
                            LogEntry {
                                index,
                                term: run.term,
                                payload: payload(index, run.term, len),
                            }
                        })
                        .collect();
                    next += n;
                    entries
                })
                .collect();
            Op::Burst(appends)
        }
        0..=59 => {
            let start = last.map_or(first, |l| l + 1);
            let n = 1 + rng.below(4);
            let entries = (start..start + n)
                .map(|index| {
                    let len = 1 + rng.below(3000) as usize;
                    LogEntry { index, term: run.term, payload: payload(index, run.term, len) }
                })
                .collect();
            Op::Append(entries)
        }
        60..=69 if truncatable.is_some() => {
            let last = truncatable.unwrap();
            let low = committed.map_or(first, |c| c + 1).max(first);
            run.term += 1; // entries after a truncation come from a new leader
            Op::Truncate(low + rng.below(last - low + 1))
        }
        70..=77 if purgeable.is_some() => {
            let upto = purgeable.unwrap();
            Op::Purge(first + rng.below(upto - first + 1))
        }
        78..=89 => {
            run.term += 1;
            Op::Vote(format!("vote term {}", run.term).into_bytes())
        }
        _ => {
            let (_, top) = core.bounds();
            match (committed, top) {
                (Some(c), Some(t)) if t > c => Op::Committed(c + 1 + rng.below(t - c)),
                (None, Some(t)) => Op::Committed(first + rng.below(t - first + 1)),
                _ => Op::Vote(format!("vote term {}", run.term).into_bytes()),
            }
        }
    }
}

/// The term of entry `index` of the log (the committed id names it with that term).
fn term_at(core: &LogCore, index: u64) -> u64 {
    core.read(index, index + 1).ok().and_then(|e| e.first().map(|e| e.term)).unwrap_or(0)
}

fn committed_bytes(index: u64) -> Vec<u8> {
    format!("committed {index}").into_bytes()
}

/// Submits every append of a burst without waiting, then waits for all their callbacks.
/// Returns how many entries were acknowledged durable, and the first error.
///
/// In a burst of an even number of appends the first is acknowledged before the others are
/// submitted: whether the IO thread splits a burst into several writes otherwise depends on
/// thread timing (and a faster roll made that rare), and a power cut between two
/// acknowledgements of a burst is the state this pattern exists to reach.
fn burst(
    core: &LogCore,
    appends: &[Vec<LogEntry>],
) -> (usize, Result<(), vellum_raft_store::Error>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let first_alone = appends.len().is_multiple_of(2);
    let mut submitted = 0;
    let mut received = Vec::new();
    let mut result = Ok(());
    for es in appends {
        let (tx, n) = (tx.clone(), es.len());
        match core.append(es.clone(), Box::new(move |r| drop(tx.send(r.map(|()| n))))) {
            Ok(()) => submitted += 1,
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        if first_alone && submitted == 1 {
            match rx.recv() {
                Ok(r) => received.push(r),
                Err(_) => break,
            }
        }
    }
    drop(tx);
    let mut acked = 0;
    let mut failed = false;
    let rest = rx.iter().take(submitted - received.len());
    for r in received.into_iter().chain(rest) {
        match r {
            // Callbacks run in log order: an acknowledgement after a failure would be a bug.
            Ok(n) => {
                assert!(!failed, "an append was acknowledged after an earlier one failed");
                acked += n;
            }
            Err(e) => {
                failed = true;
                if result.is_ok() {
                    result = Err(vellum_raft_store::Error::shared(&e));
                }
            }
        }
    }
    (acked, result)
}

fn execute(core: &LogCore, op: &Op) -> (usize, Result<(), vellum_raft_store::Error>) {
    if let Op::Burst(appends) = op {
        return burst(core, appends);
    }
    let r = match op {
        Op::Burst(_) => unreachable!("handled above"),
        Op::Append(es) => log::wait(|done| core.append(es.clone(), done)),
        Op::Truncate(since) => log::wait(|done| core.truncate(*since, done)),
        Op::Purge(upto) => core.purge(*upto, upto.to_le_bytes().to_vec()),
        Op::Vote(v) => log::wait(|done| core.save_vote(v.clone(), done)),
        Op::Committed(c) => core.save_committed(*c, term_at(core, *c), committed_bytes(*c)),
    };
    (0, r)
}

/// Runs the workload of `seed`, cutting power at mutating carrier operation `crash_at`.
fn run(
    seed: u64,
    crash_at: Option<u64>,
    background: bool,
    pattern: Pattern,
    ops: usize,
) -> (Run, u64) {
    let carrier = Arc::new(FaultyCarrier::new(VOLUME, true));
    // Odd seeds run on a journaled volume (a ring of 16 blocks: segment rolls and purges
    // commit as journal batches, and the ring fills and checkpoints).
    let journal = seed % 2 == 1;
    let format = FormatOptions {
        journal,
        journal_bytes: if journal { 16 << 12 } else { 0 },
        ..FormatOptions::default()
    };
    let volume =
        Volume::format(Box::new(Arc::clone(&carrier)), &format, VolumeOptions::default()).unwrap();
    let core = LogCore::open(volume, config(background, pattern)).unwrap();
    let start = carrier.ops();
    if let Some(at) = crash_at {
        carrier.set_crash_plan(CrashPlan::AtOp(start + at));
    }
    let mut run = Run { carrier, model: Model::default(), term: 1, pattern };
    let mut rng = FaultRng::new(seed);
    for _ in 0..ops {
        let op = next_op(&mut rng, &core, &mut run);
        run.model.in_flight = Some(op.clone());
        let (acked, result) = execute(&core, &op);
        run.model.acked = acked;
        if result.is_err() {
            assert!(run.carrier.crashed(), "seed {seed}: {op:?} failed without a power cut");
            if let Op::Burst(appends) = &op
                && acked > 0
                && acked < appends.iter().map(Vec::len).sum()
            {
                CUT_MID_BURST.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            break;
        }
        run.model.in_flight = None;
        run.model.apply(&op);
        let durable = core.durable_committed_index();
        assert!(durable >= run.model.committed_durable, "the durable committed id went back");
        run.model.committed_durable = durable;
    }
    if crash_at.is_none() && MUTATION.get().is_none() {
        RECYCLED.fetch_add(core.spare_status().recycled, std::sync::atomic::Ordering::Relaxed);
    }
    run.carrier.cut_power();
    let total = run.carrier.ops() - start;
    drop(core);
    (run, total)
}

fn recovered_state(core: &LogCore) -> Recovered {
    let (first, last) = core.bounds();
    let entries = match last {
        Some(l) => core.read(first, l + 1).unwrap(),
        None => Vec::new(),
    };
    let log = entries.into_iter().map(|e| (e.index, (e.term, e.payload))).collect();
    let meta = core.meta();
    (log, meta.vote, meta.committed)
}

fn matches(model: &Model, got: &Recovered) -> bool {
    model.candidates().iter().any(|c| c.log == got.0 && c.vote == got.1)
}

/// The recovered committed id was saved, is at least what the log reported durable, and
/// names an entry the log holds (or purged).
fn committed_ok(model: &Model, got: &Recovered, purged: Option<u64>) -> Result<(), String> {
    let recovered = match &got.2 {
        None => None,
        Some(bytes) => {
            let text = String::from_utf8_lossy(bytes);
            let index = text
                .strip_prefix("committed ")
                .and_then(|i| i.parse::<u64>().ok())
                .ok_or_else(|| format!("recovered committed id {text:?} was never saved"))?;
            if !model.committed.contains(&index) {
                return Err(format!("recovered committed index {index} was never saved"));
            }
            Some(index)
        }
    };
    if recovered < model.committed_durable {
        return Err(format!(
            "recovered committed index {recovered:?} is below the durable {:?}",
            model.committed_durable
        ));
    }
    if let Some(c) = recovered {
        let last = got.0.keys().next_back().copied();
        if last.is_none_or(|l| c > l) && purged.is_none_or(|p| c > p) {
            return Err(format!(
                "recovered committed index {c} is past the log ({last:?}, purged {purged:?})"
            ));
        }
    }
    Ok(())
}

/// Opens a crash image (sometimes cutting power again during recovery, at any of its
/// operations), checks it against the model, appends, reopens.
/// What a recovery served that `model` does not allow: entries (index, term) and vote
/// against the model's, and the operation that was in flight.
fn mismatch(model: &Model, got: &Recovered) -> String {
    let want: Vec<_> = model.log.keys().collect();
    let have: Vec<_> = got.0.iter().map(|(k, v)| (*k, v.0)).collect();
    let in_flight = model.in_flight.as_ref().map(|o| match o {
        Op::Append(es) => {
            format!("append {:?}", es.iter().map(|e| (e.index, e.term)).collect::<Vec<_>>())
        }
        o => format!("{o:?}").chars().take(60).collect::<String>(),
    });
    format!(
        "recovered {have:?} (vote {:?}), the model holds {want:?} (vote {:?}), in flight {in_flight:?}",
        got.1.as_deref().map(String::from_utf8_lossy),
        model.vote.as_deref().map(String::from_utf8_lossy),
    )
}

fn verify(image: Vec<u8>, model: &Model, rng: &mut FaultRng) -> Result<(), String> {
    let image = if rng.chance(20) {
        // Count the carrier operations of this recovery (volume open, log open, fence), then
        // cut power at any one of them.
        let dry = Arc::new(FaultyCarrier::from_bytes(image.clone(), true));
        if let Ok(v) = Volume::open(Box::new(Arc::clone(&dry)), VolumeOptions::default()) {
            drop(LogCore::open(v, config(false, Pattern::OneAtATime)));
        }
        let second = Arc::new(FaultyCarrier::from_bytes(image, true));
        second.set_crash_plan(CrashPlan::AtOp(rng.below(dry.ops().max(1))));
        if let Ok(v) = Volume::open(Box::new(Arc::clone(&second)), VolumeOptions::default()) {
            drop(LogCore::open(v, config(false, Pattern::OneAtATime)));
        }
        second.cut_power();
        second.crash_image(rng)
    } else {
        image
    };
    let mem = Arc::new(MemoryCarrier::from_bytes(&image));
    let volume = Volume::open(Box::new(Arc::clone(&mem)), VolumeOptions::default())
        .map_err(|e| format!("volume open refused: {e}"))?;
    let core = LogCore::open(volume.clone(), config(false, Pattern::OneAtATime))
        .map_err(|e| format!("log open refused: {e}"))?;
    let got = recovered_state(&core);
    if !matches(model, &got) {
        return Err(mismatch(model, &got));
    }
    committed_ok(model, &got, core.meta().purged_index)?;
    // The recovered log takes appends, and reopens with them.
    let next = core.bounds().1.map_or(core.bounds().0, |l| l + 1);
    let more: Vec<LogEntry> = (next..next + 3)
        .map(|i| LogEntry { index: i, term: 999, payload: payload(i, 999, 700) })
        .collect();
    log::wait(|done| core.append(more.clone(), done))
        .map_err(|e| format!("append after recovery: {e}"))?;
    drop(core);
    volume.close().map_err(|e| format!("close: {e}"))?;
    let volume = Volume::open(
        Box::new(MemoryCarrier::from_bytes(&mem.to_bytes())),
        VolumeOptions::default(),
    )
    .unwrap();
    let core = LogCore::open(volume, config(false, Pattern::OneAtATime))
        .map_err(|e| format!("reopen after recovery refused: {e}"))?;
    let again = recovered_state(&core);
    for e in &more {
        if again.0.get(&e.index) != Some(&(e.term, Arc::clone(&e.payload))) {
            return Err(format!(
                "entry {} appended after recovery is lost after a clean reopen",
                e.index
            ));
        }
    }
    Ok(())
}

fn crash_point(seed: u64, background: bool, pattern: Pattern) -> Result<(), String> {
    let ops = 40;
    let (_, total) = run(seed, None, false, pattern, ops);
    let mut rng = FaultRng::new(seed ^ 0x00C0_FFEE);
    let at = rng.below(total.max(1));
    let (r, _) = run(seed, Some(at), background, pattern, ops);
    let image = r.carrier.crash_image(&mut rng);
    verify(image, &r.model, &mut rng).map_err(|e| format!("seed {seed}, crash at op {at}: {e}"))
}

/// Runs `seed` for `ops` operations (one at a time, no planned cut), cuts power at the end,
/// and checks the recovery against the model.
fn cut_at_end(seed: u64, ops: usize) -> Result<(), String> {
    let (r, _) = run(seed, None, false, Pattern::OneAtATime, ops);
    let mut rng = FaultRng::new(seed);
    let image = r.carrier.crash_image(&mut rng);
    verify(image, &r.model, &mut rng)
}

fn seeds(default: std::ops::Range<u64>) -> std::ops::Range<u64> {
    match std::env::var("VELLUM_CRASH_SEED").ok().and_then(|s| s.parse::<u64>().ok()) {
        Some(s) => s..s + 1,
        None => default,
    }
}

#[test]
fn power_cuts_lose_no_acknowledged_entry_or_vote() {
    let range = seeds(0..2000);
    let n = range.end - range.start;
    let failures: Vec<String> =
        range.filter_map(|s| crash_point(s, false, Pattern::OneAtATime).err()).collect();
    let recycled = RECYCLED.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "{n} crash points ({recycled} segments recycled in the runs): acknowledged entries lost, votes lost, garbage read, opens refused: {} failures",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {n} crash points failed; first: {}",
        failures.len(),
        failures[0]
    );
    if n > 1 {
        assert!(recycled > 0, "the runs never reused a purged segment");
    }
}

/// The mutant of the recycling rule: a purged segment reused under its previous salt. Its
/// earlier frames verify again past the new ones, and the campaign must catch it (today: as
/// opens refused, "batch ids go backwards", on every run that recycled a segment).
#[test]
fn a_segment_recycled_under_its_old_salt_is_caught() {
    MUTATION.set(Some(log::LogMutation::ReuseSalt));
    let range = seeds(0..300);
    let n = range.end - range.start;
    let failed = range.clone().filter(|&s| crash_point(s, false, Pattern::OneAtATime).is_err());
    let failed = failed.count();
    // The same runs cut only at their end: every run that wrote into a recycled segment.
    let at_end = range.filter(|&seed| cut_at_end(seed, 40).is_err()).count();
    MUTATION.set(None);
    eprintln!(
        "the salt-reusing mutant fails {failed} of {n} crash points, and {at_end} of the {n} runs cut at their end"
    );
    if n > 1 {
        assert!(failed > 0 && at_end > 0, "no cut caught a recycled segment under its old salt");
    }
}

/// The mutant of the zeroing rule: a purged segment's `.free` file named a spare without its
/// zeroing write. Its old header then stands under a segment name until a roll overwrites it,
/// and a cut in that window leaves a segment file that is not the log's: the campaign must
/// catch it. The runs make their spares inline (the maker thread's zeroing is the same
/// `zero`, and the background campaign covers its timing without the mutant).
#[test]
fn a_spare_promoted_without_its_zeroing_is_caught() {
    MUTATION.set(Some(log::LogMutation::SkipZeroing));
    let range = seeds(0..300);
    let n = range.end - range.start;
    let failed = range.clone().filter(|&s| crash_point(s, false, Pattern::OneAtATime).is_err());
    let failed = failed.count();
    // The same seeds run five times longer and cut only at their end: every run that ends
    // with such a spare ready.
    let at_end: Vec<String> = range.filter_map(|seed| cut_at_end(seed, 200).err()).collect();
    MUTATION.set(None);
    eprintln!(
        "the zeroing-skipping mutant fails {failed} of {n} crash points, and {} of {n} longer runs cut at their end (first: {:?})",
        at_end.len(),
        at_end.first()
    );
    if n > 1 {
        assert!(
            failed > 0 && !at_end.is_empty(),
            "no cut caught a spare that kept a purged segment's header"
        );
    }
}

#[test]
fn power_cuts_with_background_segment_creation() {
    // The spare maker's commits interleave with the writer's appends, so the crash points are
    // not reproducible to the operation; the invariants hold all the same.
    let range = seeds(50_000..50_200);
    let failures: Vec<String> =
        range.filter_map(|s| crash_point(s, true, Pattern::OneAtATime).err()).collect();
    assert!(failures.is_empty(), "{} failures; first: {}", failures.len(), failures[0]);
}

#[test]
fn power_cuts_with_many_appends_in_flight() {
    // openraft 0.10's pattern: the IO thread writes while more appends arrive, so the crash
    // points are not reproducible to the operation; the invariants hold all the same.
    let range = seeds(60_000..60_600);
    let n = range.end - range.start;
    let failures: Vec<String> =
        range.filter_map(|s| crash_point(s, false, Pattern::InFlight).err()).collect();
    let mid = CUT_MID_BURST.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "{n} crash points with appends in flight ({mid} cut a burst between acknowledgements): acknowledged entries lost, votes lost, garbage read, opens refused: {} failures",
        failures.len()
    );
    assert!(mid > 0, "no power cut fell between the acknowledgements of a burst");
    assert!(
        failures.is_empty(),
        "{} of {n} crash points failed; first: {}",
        failures.len(),
        failures[0]
    );
}

// Crash loops at segment rolls: power cuts in a row, each during the recovery from the one
// before (its fence write, the roll a fence needs) or during the first appends after it, with
// segments small enough and appends large enough that a roll comes within the first few
// appends. After every cut, an uncut open of the image must match the model: acknowledged
// entries and the last returned vote survive, nothing else is read as an entry, and open
// never refuses. What a recovery that completed served (an in-flight append's surviving
// prefix included) must survive every later cut too: the node acted on it.

/// Cuts per loop.
const LOOP_CUTS: u64 = 5;

/// What the crash loops saw, for the report and for the checks that the loops reach rolls.
#[derive(Debug, Default)]
struct LoopStats {
    cuts: u64,
    /// Cuts that fell inside `LogCore::open` (a fence, or the roll a fence needs).
    in_recovery: u64,
    /// Cuts at a segment header write: an append's roll, or a fence's.
    at_roll: u64,
    /// Of those, a fence's roll (inside `LogCore::open`).
    at_fence_roll: u64,
    /// Images whose recovery found a torn tail, and a torn end fenced across segments.
    torn: u64,
    cross_segment: u64,
}

/// Payload bytes that make an entry's frame exactly one 4096-byte block.
const ONE_BLOCK: usize = 4096 - 48;

/// A vote for the new term (a restarted member votes or is voted for), then appends of one
/// to three entries, a third of them of 3 to 15 KB and two thirds exactly one block each (so that a
/// segment's 15 blocks of frames often fill to their very end, where a torn last batch needs
/// its fence in a new segment): a roll every three appends or so in 64 KiB segments. The
/// committed id follows the acknowledged entries.
fn loop_ops(rng: &mut FaultRng, core: &LogCore, term: u64) -> Vec<Op> {
    let (first, last) = core.bounds();
    let mut next = last.map_or(first, |l| l + 1);
    let mut ops = vec![Op::Vote(format!("vote term {term}").into_bytes())];
    for _ in 0..4 {
        let n = 1 + rng.below(3);
        let blocks = rng.chance(67);
        let entries = (next..next + n)
            .map(|index| {
                let len = if blocks { ONE_BLOCK } else { 3000 + rng.below(12_000) as usize };
                LogEntry { index, term, payload: payload(index, term, len) }
            })
            .collect();
        next += n;
        ops.push(Op::Append(entries));
        if rng.chance(50) {
            ops.push(Op::Committed(next - 1));
        }
    }
    ops
}

/// One step of a loop: `image` opened (power cut at mutating operation `cut`, counted from
/// the start of `LogCore::open`), then the operations after a recovery.
struct LoopStep {
    carrier: Arc<FaultyCarrier>,
    /// What the log's open recovered (entries, vote, committed) and the committed index it
    /// called durable, when the open completed.
    recovered: Option<(Recovered, Option<u64>)>,
    ops: Vec<Op>,
    /// Operations that returned; the next one was in flight at the cut.
    done: usize,
    /// The durable committed index after the last operation that returned.
    durable: Option<u64>,
    /// Mutating operations of `LogCore::open`, and of the whole step.
    recovery_ops: u64,
    total_ops: u64,
    /// Operation index of every 4096-byte write at the start of a segment (a roll).
    header_writes: Vec<u64>,
    /// Operation index of every write that ends exactly at the end of a segment.
    end_writes: Vec<u64>,
    /// Operation index at which each of `ops` started.
    op_starts: Vec<u64>,
}

impl LoopStep {
    /// The last mutating operation before the operation holding `op` started: for a roll,
    /// the write of the batch that ended the segment before it (or a vote).
    fn write_before(&self, op: u64) -> Option<u64> {
        let j = self.op_starts.iter().rposition(|&s| s <= op)?;
        self.op_starts[j].checked_sub(1)
    }
}

fn loop_step(image: &[u8], seed: u64, step: u64, cut: Option<u64>) -> Result<LoopStep, String> {
    let carrier = Arc::new(FaultyCarrier::from_bytes(image.to_vec(), true));
    let volume = Volume::open(Box::new(Arc::clone(&carrier)), VolumeOptions::default())
        .map_err(|e| format!("volume open refused: {e}"))?;
    let start = carrier.ops();
    let writes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (seen, weak) = (Arc::clone(&writes), Arc::downgrade(&carrier));
    carrier.set_write_hook(Some(Arc::new(move |offset, len, _| {
        if let Some(c) = weak.upgrade() {
            seen.lock().unwrap().push((c.ops() - start, offset, len));
        }
    })));
    if let Some(at) = cut {
        carrier.set_crash_plan(CrashPlan::AtOp(start + at));
    }
    let mut out = LoopStep {
        carrier: Arc::clone(&carrier),
        recovered: None,
        ops: Vec::new(),
        done: 0,
        durable: None,
        recovery_ops: 0,
        total_ops: 0,
        header_writes: Vec::new(),
        end_writes: Vec::new(),
        op_starts: Vec::new(),
    };
    let core = match LogCore::open(volume.clone(), config(false, Pattern::OneAtATime)) {
        Ok(core) => core,
        Err(_) if carrier.crashed() => {
            carrier.set_write_hook(None);
            return Ok(out);
        }
        Err(e) => return Err(format!("log open refused: {e}")),
    };
    out.recovery_ops = carrier.ops() - start;
    out.recovered = Some((recovered_state(&core), core.durable_committed_index()));
    out.durable = core.durable_committed_index();
    let mut rng = FaultRng::new(seed.wrapping_mul(0x0100_0193) ^ step);
    out.ops = loop_ops(&mut rng, &core, step + 1);
    for op in &out.ops {
        out.op_starts.push(carrier.ops() - start);
        let (_, r) = execute(&core, op);
        if r.is_err() {
            if !carrier.crashed() {
                return Err(format!("{op:?} failed without a power cut"));
            }
            break;
        }
        out.done += 1;
        out.durable = core.durable_committed_index();
    }
    if !carrier.crashed() {
        // The segments' first blocks on the carrier: a 4096-byte write there is a roll.
        let starts: Vec<u64> = volume
            .list("/raft/log")
            .unwrap()
            .into_iter()
            .map(|e| {
                let path = [b"/raft/log/".as_slice(), &e.name].concat();
                volume.open_file(&path).unwrap().extents().unwrap()[0].physical_block * 4096
            })
            .collect();
        let writes = writes.lock().unwrap();
        out.header_writes = writes
            .iter()
            .filter(|(_, offset, len)| *len == 4096 && starts.contains(offset))
            .map(|(op, ..)| *op)
            .collect();
        let ends: Vec<u64> = starts.iter().map(|s| s + (64 << 10)).collect();
        out.end_writes = writes
            .iter()
            .filter(|(_, offset, len)| ends.contains(&(offset + *len as u64)))
            .map(|(op, ..)| *op)
            .collect();
    }
    carrier.set_write_hook(None);
    carrier.cut_power();
    out.total_ops = carrier.ops() - start;
    drop(core);
    Ok(out)
}

/// An uncut open of `image` must match `model`; returns what its recovery found torn.
fn check_loop_image(image: &[u8], model: &Model) -> Result<Option<log::Torn>, String> {
    let volume = Volume::open(Box::new(MemoryCarrier::from_bytes(image)), VolumeOptions::default())
        .map_err(|e| format!("volume open refused: {e}"))?;
    let core = LogCore::open(volume, config(false, Pattern::OneAtATime))
        .map_err(|e| format!("log open refused: {e}"))?;
    let got = recovered_state(&core);
    if !matches(model, &got) {
        return Err(mismatch(model, &got));
    }
    committed_ok(model, &got, core.meta().purged_index)?;
    Ok(core.recovery_report().torn)
}

/// One loop: a log of a few segments, then `LOOP_CUTS` power cuts in a row.
fn crash_loop(seed: u64, stats: &mut LoopStats) -> Result<(), String> {
    let carrier = Arc::new(FaultyCarrier::new(VOLUME, true));
    let journal = seed % 2 == 1;
    let format = FormatOptions {
        journal,
        journal_bytes: if journal { 16 << 12 } else { 0 },
        ..FormatOptions::default()
    };
    let volume =
        Volume::format(Box::new(Arc::clone(&carrier)), &format, VolumeOptions::default()).unwrap();
    let core = LogCore::open(volume, config(false, Pattern::OneAtATime)).unwrap();
    let mut rng = FaultRng::new(seed);
    let mut model = Model::default();
    for _ in 0..=rng.below(4) {
        for op in loop_ops(&mut rng, &core, 1) {
            assert!(execute(&core, &op).1.is_ok());
            model.apply(&op);
        }
    }
    model.committed_durable = core.durable_committed_index();
    let mut image = carrier.current_bytes();
    drop(core);
    for step in 1..=LOOP_CUTS {
        let at = |e: String| format!("seed {seed}, cut {step}: {e}");
        let dry = loop_step(&image, seed, step, None).map_err(at)?;
        let (rec, total) = (dry.recovery_ops, dry.total_ops);
        let rolls: Vec<u64> = dry.header_writes.iter().copied().filter(|&w| w >= rec).collect();
        let fence_roll = dry.header_writes.iter().copied().find(|&w| w < rec);
        let ends: Vec<u64> = dry.end_writes.iter().copied().filter(|&w| w >= rec).collect();
        let pick = |rng: &mut FaultRng, from: &[u64]| from[rng.below(from.len() as u64) as usize];
        let cut = match rng.below(100) {
            // Inside the recovery: the roll and the fence of a torn end of a segment.
            _ if fence_roll.is_some() && rng.chance(70) => {
                fence_roll.map_or(0, |w| w + rng.below(2)).min(rec - 1)
            }
            // Inside the recovery: any of its operations (the fence, the spare a roll needs).
            0..45 if rec > 0 => rng.below(rec),
            // At an append's roll: the spare's preparation, its header write, the first batch.
            0..60 if !rolls.is_empty() => {
                let w = pick(&mut rng, &rolls);
                (w + rng.below(4)).saturating_sub(2).clamp(rec, total - 1)
            }
            // The batch that fills a segment to its end: torn, the next recovery fences it in
            // a new segment.
            0..85 if !ends.is_empty() => pick(&mut rng, &ends),
            // The last batch before a roll.
            0..85 if !rolls.is_empty() => {
                let w = pick(&mut rng, &rolls);
                dry.write_before(w).unwrap_or(w).clamp(rec, total - 1)
            }
            _ => rec + rng.below(total - rec),
        };
        stats.cuts += 1;
        stats.in_recovery += u64::from(cut < rec);
        if dry.header_writes.contains(&cut) {
            stats.at_roll += 1;
            stats.at_fence_roll += u64::from(cut < rec);
        }
        let run = loop_step(&image, seed, step, Some(cut)).map_err(at)?;
        if let Some((got, durable)) = &run.recovered {
            // What this recovery served is what the node acts on from here: it must be a
            // state the model allows, and it is the model from now on.
            if !matches(&model, got) {
                return Err(at(
                    "a completed recovery served a state the model does not allow".into()
                ));
            }
            committed_ok(&model, got, None).map_err(at)?;
            model.log.clone_from(&got.0);
            model.vote.clone_from(&got.1);
            model.committed_durable = *durable;
            model.in_flight = None;
            for op in &run.ops[..run.done] {
                model.apply(op);
            }
            model.committed_durable = run.durable;
            model.in_flight = run.ops.get(run.done).cloned();
        }
        image = run.carrier.crash_image(&mut rng);
        let torn = check_loop_image(&image, &model).map_err(at)?;
        stats.torn += u64::from(torn.is_some());
        stats.cross_segment +=
            u64::from(torn.is_some_and(|t| t.in_previous_segment || t.to % (64 << 10) == 0));
    }
    Ok(())
}

#[test]
fn power_cuts_in_a_row_at_segment_rolls() {
    let started = std::time::Instant::now();
    let range = seeds(70_000..70_300);
    let n = range.end - range.start;
    let mut stats = LoopStats::default();
    let failures: Vec<String> = range.filter_map(|s| crash_loop(s, &mut stats).err()).collect();
    eprintln!(
        "{n} crash loops, {} power cuts in a row ({LOOP_CUTS} a loop) in {:.1?}: {} during recovery, {} at a segment header write ({} of them a fence's roll), {} images with a torn tail ({} at a segment's end): {} failures",
        stats.cuts,
        started.elapsed(),
        stats.in_recovery,
        stats.at_roll,
        stats.at_fence_roll,
        stats.torn,
        stats.cross_segment,
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {n} crash loops failed; first: {}",
        failures.len(),
        failures[0]
    );
    if n > 1 {
        assert!(stats.in_recovery > 0 && stats.at_roll > 0 && stats.cross_segment > 0, "{stats:?}");
    }
}
