//! Crash loops: a node that keeps losing power while it recovers. After a first random cut,
//! up to five more, each during the recovery of the previous one (any of its operations) or
//! during the first commits after it; after every round that recovered, the volume is
//! compared with the model and the model continues from what the volume holds.
//!
//! Two kinds:
//! - random loops over the campaign's configurations, a cut aimed at a journal write half of
//!   the time (the batch in flight is what a loop tears again and again), with the ring
//!   destroyed now and then (the loss must be reported through every later recovery);
//! - scripted loops at the same ring position: a batch of two blocks torn in each of its
//!   four ways, recovered, and the next batch of two blocks (which goes to the same ring
//!   position) torn in each of its four ways, then every image opened: the case where a
//!   reused sequence number stitched the second batch's first block to the first batch's
//!   stale second block.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::model::{BS, Model, State};
use super::{
    Config, GOOD_BUFFERED, JOURNAL_BUFFERED, JOURNAL_CACHED, JOURNAL_WT, check_before_open,
    check_recovered, destroy_ring, reopen_options, run, seeds_from_env, step, verify,
};
use vellum_engine::carrier::{CrashPlan, FaultRng, FaultyCarrier, OpKind};
use vellum_engine::{CommitMutation, FormatOptions, Volume, VolumeOptions};

/// Operations a round runs after its recovery before the power goes again (the first
/// commits after a recovery).
const OPS_AFTER_RECOVERY: usize = 10;

static LOOPS: AtomicU64 = AtomicU64::new(0);
static CUTS: AtomicU64 = AtomicU64::new(0);
static CUTS_IN_RECOVERY: AtomicU64 = AtomicU64::new(0);

/// The crash image a round left, the model, and the barriers its writes count against.
struct Round {
    image: Vec<u8>,
    model: Model,
    barriers: u64,
    /// What this round's recovery found uncut (its dry run): the state and the commit id
    /// open reported. Without a journal, a recovery cut before it opened leaves that state,
    /// under that id or the next (its own commit, a new image generation, may have landed:
    /// it moves the id, never the state), so the model goes on from it; two such cuts in a
    /// row would otherwise move the id past the model's ceiling. (With a journal the id is
    /// the batch sequence, which a recovery does not move.)
    found: Option<(State, u64)>,
}

/// Runs one round on `image`: recovery, then [`OPS_AFTER_RECOVERY`] operations, power cut as
/// `plan` says. Returns the round's end and, without a plan, the round's operation log (for
/// aiming the real run's cut) and the journal region's byte range.
fn round(
    mut r: Round,
    cfg: Config,
    (seed, names): (u64, usize),
    (plan, unit_tears): (CrashPlan, bool),
    rng: &mut FaultRng,
) -> Result<(Round, Vec<vellum_engine::carrier::OpRecord>, std::ops::Range<u64>), String> {
    let carrier = Arc::new(FaultyCarrier::from_bytes(r.image.clone(), cfg.write_through));
    carrier.record_ops();
    carrier.set_crash_plan(plan);
    let opened = Volume::open(Box::new(Arc::clone(&carrier)), reopen_options(cfg));
    let mut journal = 0..0;
    match opened {
        Err(_) if carrier.crashed() => {
            CUTS_IN_RECOVERY.fetch_add(1, Ordering::Relaxed);
            if let Some((state, id)) = r.found.take().filter(|_| !cfg.journal) {
                r.model.rebase(state.clone(), id, r.barriers, cfg.write_through);
                // The cut recovery's own commit may have landed: the same state, one id on.
                r.model.in_flight = Some((id + 1, state));
            }
        }
        Err(e) => return Err(format!("open refused a crashed volume: {e}")),
        Ok(v) => {
            let state: State = check_recovered(&v, &r.model, cfg, r.barriers)?;
            v.check_invariants();
            r.found = Some((state.clone(), v.open_report().commit_id));
            let l = v.info().layout;
            journal = l.journal.start * BS..l.journal.end() * BS;
            r.model.rebase(state, v.commit_id(), r.barriers, cfg.write_through);
            let mut ops = FaultRng::new(seed.wrapping_mul(31) ^ rng.next_u64());
            for n in 0..OPS_AFTER_RECOVERY {
                if let Err(e) = step(&v, &carrier, &mut r.model, &mut ops, names + n) {
                    if !carrier.crashed() {
                        return Err(format!("an operation failed without a power cut: {e}"));
                    }
                    break;
                }
            }
            r.barriers = carrier.barriers_done();
        }
    }
    let log = carrier.op_log();
    carrier.cut_power();
    r.image = if unit_tears {
        // Each 4 KiB unit of the writes in flight lands whole or not at all: a batch of
        // several blocks torn between its blocks, the case that stitched stale blocks.
        let seed = rng.next_u64();
        carrier.crash_image_units(move |i, unit| FaultRng::new(seed ^ (i as u64) ^ unit).chance(50))
    } else {
        carrier.crash_image(rng)
    };
    Ok((r, log, journal))
}

/// One seed's crash loop; returns the cuts it made.
#[allow(clippy::similar_names)]
fn crash_loop(seed: u64, cfg: Config) -> Result<u64, String> {
    let mut rng = FaultRng::new(seed ^ 0x100B);
    let (dry, _, format_ops) = run(seed, cfg, None);
    let at = format_ops + rng.below((dry.ops() - format_ops).max(1));
    let (carrier, model, _) = run(seed, cfg, Some(CrashPlan::AtOp(at)));
    let mut r = Round {
        image: carrier.crash_image(&mut rng),
        model,
        barriers: carrier.barriers_done(),
        found: None,
    };
    let rounds = 1 + rng.below(5);
    for k in 0..rounds {
        let fail = |e: String| format!("seed {seed}, round {k}: {e}");
        if cfg.journal && !r.model.ring_destroyed && rng.chance(5) {
            destroy_ring(&mut r.image, cfg, &mut rng).map_err(fail)?;
            r.model.ring_destroyed = true;
        }
        check_before_open(&r.image, &r.model).map_err(fail)?;
        // A dry run of the round (same image, same seeds) tells where its operations go.
        let seed_k = seed ^ (k << 40);
        let snapshot = Round {
            image: r.image.clone(),
            model: r.model.clone(),
            barriers: r.barriers,
            found: None,
        };
        let names = 10_000 * (k as usize + 1);
        let (dry, log, journal) = round(
            snapshot,
            cfg,
            (seed_k, names),
            (CrashPlan::Never, false),
            &mut FaultRng::new(seed_k),
        )
        .map_err(fail)?;
        r.found = dry.found;
        let journal_writes: Vec<u64> = log
            .iter()
            .filter(|o| o.kind != OpKind::Barrier && journal.contains(&o.offset))
            .map(|o| o.op)
            .collect();
        let aimed = !journal_writes.is_empty() && rng.chance(50);
        let op = if aimed {
            // Half of the aimed cuts tear the first batch after the recovery: at the ring
            // position where the previous round's batch was torn, if it was.
            let i = if rng.chance(50) { 0 } else { rng.below(journal_writes.len() as u64) };
            journal_writes[i as usize]
        } else {
            rng.below((log.len() as u64).max(1))
        };
        let plan = (CrashPlan::AtOp(op), aimed);
        let (next, _, _) =
            round(r, cfg, (seed_k, names), plan, &mut FaultRng::new(seed_k)).map_err(fail)?;
        r = next;
        CUTS.fetch_add(1, Ordering::Relaxed);
    }
    LOOPS.fetch_add(1, Ordering::Relaxed);
    verify(r.image, &r.model, cfg, r.barriers, &mut rng)
        .map_err(|e| format!("seed {seed}, after {rounds} cuts in a row: {e}"))?;
    Ok(rounds + 1)
}

fn loop_campaign(seeds: std::ops::Range<u64>, cfg: Config) -> Vec<String> {
    let n = seeds.end - seeds.start;
    let failures: Vec<String> = seeds.filter_map(|s| crash_loop(s, cfg).err()).collect();
    eprintln!("{n} crash loops ({cfg:?}): {} failures", failures.len());
    failures
}

#[test]
fn crash_loops_of_up_to_five_cuts() {
    let started = std::time::Instant::now();
    let mut failures = loop_campaign(seeds_from_env(100_000..100_150), JOURNAL_WT);
    failures.extend(loop_campaign(seeds_from_env(110_000..110_150), JOURNAL_BUFFERED));
    failures.extend(loop_campaign(seeds_from_env(120_000..120_060), JOURNAL_CACHED));
    failures.extend(loop_campaign(seeds_from_env(130_000..130_060), GOOD_BUFFERED));
    eprintln!(
        "{} crash loops, {} cuts after the first ({} during a recovery) in {:.1} s",
        LOOPS.load(Ordering::Relaxed),
        CUTS.load(Ordering::Relaxed),
        CUTS_IN_RECOVERY.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{} failures, first: {}", failures.len(), failures[0]);
    assert!(CUTS_IN_RECOVERY.load(Ordering::Relaxed) > 50, "too few cuts landed in a recovery");
}

/// The ring position of the next batch, as a byte range of `blocks` blocks.
fn head(v: &Volume) -> u64 {
    let j = v.info().journal.expect("journaled");
    let l = v.info().layout;
    (l.journal.start + (j.tail + j.used_blocks) % j.blocks) * BS
}

/// Commits one batch of two blocks (a file and an attribute larger than a block's payload)
/// with power cut during its journal write; returns the carrier.
fn torn_two_block_batch(v: &Volume, carrier: &FaultyCarrier, name: &str) {
    let at = head(v);
    let journal_write_op = carrier.ops();
    carrier.set_crash_plan(CrashPlan::AtOp(journal_write_op));
    // Creating the file and its attribute writes nothing yet; the commit's first operation
    // is the batch's one write-through write.
    let f = v.create_file(name).expect("power is still on");
    f.set_attr(b"k", &[0x5A; 5000]).expect("power is still on");
    assert!(v.commit().is_err(), "the commit was cut");
    let pending = carrier.pending();
    assert_eq!(pending, vec![at..at + 2 * BS], "the batch of two blocks was the write in flight");
}

/// Scripted loops at the same ring position (see the module docs). Returns the images
/// checked.
fn same_position_loops(mutation: Option<CommitMutation>) -> Result<u64, String> {
    let format = FormatOptions {
        capacity_bytes: Some(4 << 20),
        journal: true,
        journal_bytes: 16 * BS,
        ..FormatOptions::default()
    };
    let options = VolumeOptions {
        mutation,
        checkpoint_interval: Some(std::time::Duration::ZERO),
        ..VolumeOptions::default()
    };
    let mut checked = 0;
    for first in 0..4u64 {
        for second in 0..4u64 {
            let lands = |pattern: u64, base: u64| {
                move |_: usize, unit: u64| (pattern >> ((unit - base) / BS)) & 1 == 1
            };
            // Round 1: a committed file, then a batch of two blocks torn as `first` says.
            let carrier = Arc::new(FaultyCarrier::new(4 << 20, true));
            let v = Volume::format(Box::new(Arc::clone(&carrier)), &format, options)
                .map_err(|e| e.to_string())?;
            v.create_file("/kept").and_then(|_| v.commit()).map_err(|e| e.to_string())?;
            let at = head(&v);
            torn_two_block_batch(&v, &carrier, "/one");
            drop(v);
            let image = carrier.crash_image_units(lands(first, at));
            // Round 2: recovery, then the next batch of two blocks, torn as `second` says.
            let carrier = Arc::new(FaultyCarrier::from_bytes(image, true));
            let v = Volume::open(Box::new(Arc::clone(&carrier)), options)
                .map_err(|e| format!("first {first:02b}: open refused: {e}"))?;
            let one = v.exists("/one").map_err(|e| e.to_string())?;
            if one != (first == 0b11) {
                return Err(format!("first {first:02b}: /one exists: {one}"));
            }
            if one {
                continue; // the batch landed whole: nothing torn to stitch to
            }
            if head(&v) != at {
                return Err(format!("first {first:02b}: the next batch goes elsewhere"));
            }
            torn_two_block_batch(&v, &carrier, "/two");
            drop(v);
            let image = carrier.crash_image_units(lands(second, at));
            // Round 3: whatever the two tears, the volume opens and holds /kept, and /two
            // only when its batch landed whole.
            let v = Volume::open(
                Box::new(vellum_engine::carrier::MemoryCarrier::from_bytes(&image)),
                options,
            )
            .map_err(|e| format!("tears {first:02b} then {second:02b}: open refused: {e}"))?;
            let names: Vec<Vec<u8>> =
                v.list("/").map_err(|e| e.to_string())?.into_iter().map(|e| e.name).collect();
            let mut want = vec![b"kept".to_vec()];
            if second == 0b11 {
                want.push(b"two".to_vec());
            }
            if names != want {
                return Err(format!(
                    "tears {first:02b} then {second:02b}: the volume holds {:?}",
                    names
                        .iter()
                        .map(|n| String::from_utf8_lossy(n).into_owned())
                        .collect::<Vec<_>>()
                ));
            }
            if second == 0b11 {
                let attr =
                    v.open_file("/two").and_then(|f| f.attr(b"k")).map_err(|e| e.to_string())?;
                if attr.as_deref() != Some(&[0x5A; 5000][..]) {
                    return Err(format!(
                        "tears {first:02b} then {second:02b}: /two's attribute differs"
                    ));
                }
            }
            v.check_invariants();
            checked += 1;
        }
    }
    Ok(checked)
}

#[test]
fn crash_loops_at_the_same_ring_position() {
    let checked = same_position_loops(None).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{checked} images after two torn batches at the same ring position");
    assert!(checked >= 12);
    let e = same_position_loops(Some(CommitMutation::JournalSequenceReuse))
        .expect_err("JournalSequenceReuse: the loops at the same ring position saw nothing");
    eprintln!("JournalSequenceReuse caught: {e}");
}
