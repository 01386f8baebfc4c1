//! Many raft groups in one log: what a group handle promises besides the crash campaign's
//! invariants (`crash_groups.rs`). Concurrent appends of different groups become one durable
//! write; a segment stays while any group needs an entry in it; the space bound rewrites
//! laggard groups forward (1 hot group and 999 idle ones stay within it) or names the ones
//! too big to rewrite; a dropped group is gone and its id can be used again; the refusals
//! name what is wrong.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{faulty_volume, memory_volume};
use vellum_engine::carrier::FaultyCarrier;
use vellum_raft_store::Error;
use vellum_raft_store::log::{self, LogConfig, LogCore, LogEntry, LogIo};

fn entries(group: u64, from: u64, n: u64, len: usize) -> Vec<LogEntry> {
    (from..from + n)
        .map(|index| LogEntry {
            index,
            term: 1,
            payload: Arc::from(vec![(index as u8) ^ (group as u8); len]),
        })
        .collect()
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 64 << 10,
        background_spares: false,
        recycled_segments: 0,
        ..LogConfig::default()
    }
}

/// A log on a counting carrier with sixteen groups besides group 0, its first roll done.
fn counted_log() -> (Arc<FaultyCarrier>, LogCore, Vec<LogCore>) {
    let (carrier, volume) = faulty_volume(16 << 20);
    let core = LogCore::open(volume, LogConfig { io: LogIo::Thread, ..config() }).unwrap();
    let groups: Vec<LogCore> = (1..=16).map(|g| core.create_group(g).unwrap()).collect();
    // Warm up: the first roll, so that the counted writes are batches only.
    log::wait(|done| core.append(entries(0, 1, 1, 100), done)).unwrap();
    (carrier, core, groups)
}

/// Holds the log's IO thread inside a write of group 0 while `queue` queues its items (each
/// sending its outcome on the channel), then lets it go and waits for `items` outcomes.
/// Returns the carrier's writes from group 0's on.
fn writes_while_held(
    carrier: &FaultyCarrier,
    core: &LogCore,
    items: usize,
    queue: impl FnOnce(&std::sync::mpsc::Sender<bool>),
) -> usize {
    let writes = Arc::new(AtomicUsize::new(0));
    let hold = Arc::new(AtomicBool::new(true));
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
    let entered_tx = Mutex::new(Some(entered_tx));
    {
        let (writes, hold) = (Arc::clone(&writes), Arc::clone(&hold));
        carrier.set_write_hook(Some(Arc::new(move |_, _, _| {
            writes.fetch_add(1, Ordering::SeqCst);
            if let Some(tx) = entered_tx.lock().unwrap().take() {
                let _ = tx.send(());
                while hold.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
            }
        })));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let tx0 = tx.clone();
    let next = core.bounds().1.map_or(0, |l| l + 1);
    core.append(entries(0, next, 1, 100), Box::new(move |r| tx0.send(r.is_ok()).unwrap())).unwrap();
    entered_rx.recv().unwrap(); // the IO thread is inside group 0's write
    queue(&tx);
    hold.store(false, Ordering::SeqCst);
    for _ in 0..=items {
        assert!(rx.recv().unwrap());
    }
    carrier.set_write_hook(None);
    writes.load(Ordering::SeqCst)
}

/// The IO thread is held inside its first write while sixteen groups queue one append each:
/// they all go out in the next write, one durable write for sixteen groups.
#[test]
fn appends_of_sixteen_groups_become_one_durable_write() {
    let (carrier, core, groups) = counted_log();
    let writes = writes_while_held(&carrier, &core, 16, |tx| {
        for g in &groups {
            let tx = tx.clone();
            let id = g.group_id();
            g.append(entries(id, 1, 2, 300), Box::new(move |r| tx.send(r.is_ok()).unwrap()))
                .unwrap();
        }
    });
    assert_eq!(writes, 2, "group 0's write, then one write for the appends of all sixteen groups");
    for g in &groups {
        assert_eq!(g.read(0, 10).unwrap(), entries(g.group_id(), 1, 2, 300));
        assert!(g.is_durable(2));
    }
}

/// Sixteen groups vote at once (a mass election after a member died) while eight of them
/// also append: the votes are `Vote` frames in the same write as the appends, not a meta
/// file write each (before segment format 8 this made 24 writes: 16 meta file writes, and
/// the appends flushed between them in 8 more; measured on 50da957).
#[test]
fn votes_of_sixteen_groups_share_one_durable_write() {
    let (carrier, core, groups) = counted_log();
    let writes = writes_while_held(&carrier, &core, 24, |tx| {
        for g in &groups {
            let (voted, id) = (tx.clone(), g.group_id());
            let vote = format!("vote {id} term 7").into_bytes();
            g.save_vote(vote, Box::new(move |r| voted.send(r.is_ok()).unwrap())).unwrap();
            if id % 2 == 0 {
                let tx = tx.clone();
                g.append(entries(id, 1, 1, 300), Box::new(move |r| tx.send(r.is_ok()).unwrap()))
                    .unwrap();
            }
        }
    });
    assert_eq!(writes, 2, "group 0's write, then one write for sixteen votes and eight appends");
    let volume = core.volume().clone();
    drop((core, groups));
    let core = LogCore::open(volume, config()).unwrap();
    for id in 1..=16 {
        let g = core.group(id).unwrap();
        assert_eq!(g.meta().vote, Some(format!("vote {id} term 7").into_bytes()));
    }
}

/// A vote that lives only as a `Vote` frame survives the purge that frees its segment: the
/// purge saves the group's meta file first (and only for the groups whose newest vote is
/// there). The `FreeVote` mutant of the crash campaign skips that save.
#[test]
fn a_vote_outlives_the_segment_that_held_it() {
    let volume = memory_volume(16 << 20).1;
    let core = LogCore::open(volume.clone(), config()).unwrap();
    let quiet = core.create_group(7).unwrap();
    log::wait(|done| quiet.save_vote(b"voted once".to_vec(), done)).unwrap();
    // Group 0 fills and purges many 64 KiB segments behind the vote's.
    let mut next = 0;
    for _ in 0..40 {
        log::wait(|done| core.append(entries(0, next, 8, 4000), done)).unwrap();
        next += 8;
        core.purge(next - 1, b"purged".to_vec()).unwrap();
    }
    let (used, _) = core.space();
    assert!(used <= 4 * (64 << 10), "the old segments went: {used} bytes left");
    drop((core, quiet));
    let core = LogCore::open(volume, config()).unwrap();
    assert_eq!(core.group(7).unwrap().meta().vote, Some(b"voted once".to_vec()));
}

/// Sixteen groups purge at once (each after its own snapshot) while the IO thread is held
/// in a write: their purge points are `Purge` frames in one write (before segment format 9
/// each was a write of its group's meta file: 16 writes), and a reopen finds every one.
#[test]
fn purges_of_sixteen_groups_share_one_durable_write() {
    let (carrier, core, groups) = counted_log();
    for g in &groups {
        log::wait(|done| g.append(entries(g.group_id(), 1, 4, 300), done)).unwrap();
    }
    let groups = Arc::new(groups);
    let mut threads = Vec::new();
    let writes = writes_while_held(&carrier, &core, 16, |tx| {
        for i in 0..groups.len() {
            let (tx, groups) = (tx.clone(), Arc::clone(&groups));
            threads.push(std::thread::spawn(move || {
                let g = &groups[i];
                let purged = format!("purged {} at 3", g.group_id()).into_bytes();
                tx.send(g.purge(3, purged).is_ok()).unwrap();
            }));
        }
        // A purge records its point under the group's meta lock as it queues its frame: once
        // every group shows it, all sixteen frames are queued.
        while groups.iter().any(|g| g.meta().purged_index != Some(3)) {
            std::thread::yield_now();
        }
    });
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(writes, 2, "group 0's write, then one write for the purges of sixteen groups");
    let volume = core.volume().clone();
    drop((core, groups));
    let core = LogCore::open(volume, config()).unwrap();
    for id in 1..=16 {
        let g = core.group(id).unwrap();
        assert_eq!(g.meta().purged, Some(format!("purged {id} at 3").into_bytes()));
        assert_eq!(g.bounds(), (4, Some(4)));
    }
}

/// A purge point that lives only as a `Purge` frame survives the purges that free its
/// segment: they save the group's meta file first. Run again with the `FreePurge` mutant
/// (which skips that save), the purge point is lost: the test can fail.
#[test]
fn a_purge_point_outlives_the_segment_that_held_it() {
    for mutation in [None, Some(log::LogMutation::FreePurge)] {
        let volume = memory_volume(16 << 20).1;
        let config = LogConfig { mutation, ..config() };
        let core = LogCore::open(volume.clone(), config.clone()).unwrap();
        let quiet = core.create_group(7).unwrap();
        log::wait(|done| quiet.append(entries(7, 1, 3, 500), done)).unwrap();
        quiet.purge(3, b"purged once".to_vec()).unwrap();
        // Group 0 fills and purges many 64 KiB segments behind the purge frame's.
        let mut next = 0;
        for _ in 0..40 {
            log::wait(|done| core.append(entries(0, next, 8, 4000), done)).unwrap();
            next += 8;
            core.purge(next - 1, b"purged".to_vec()).unwrap();
        }
        drop((core, quiet));
        let core = LogCore::open(volume, config).unwrap();
        let quiet = core.group(7).unwrap();
        let kept = (quiet.meta().purged, quiet.bounds());
        let want = (Some(b"purged once".to_vec()), (4, None));
        match mutation {
            None => assert_eq!(kept, want),
            Some(_) => assert_ne!(kept, want, "the mutant keeps the purge point"),
        }
    }
}

/// Without a space bound, an idle group's entries keep their segment however far the busy
/// group purges; once the idle group purges too, the old segments go.
#[test]
fn a_laggard_group_keeps_its_segment_until_it_purges() {
    let volume = memory_volume(32 << 20).1;
    // Without a space bound (no rewrites): the laggard's own purge is what frees.
    let unbounded = LogConfig { io: LogIo::Inline, space_factor: 0, ..config() };
    let core = LogCore::open(volume.clone(), unbounded).unwrap();
    let laggard = core.create_group(7).unwrap();
    log::wait(|done| laggard.append(entries(7, 1, 3, 500), done)).unwrap();
    // The busy group writes about ten segments and purges behind itself.
    let mut next = 1;
    for _ in 0..40 {
        log::wait(|done| core.append(entries(0, next, 4, 3000), done)).unwrap();
        next += 4;
        core.purge(next - 2, vec![]).unwrap();
    }
    let with_laggard = core.segment_count();
    assert!(with_laggard >= 8, "the laggard's segment and every one after it stay: {with_laggard}");
    assert_eq!(laggard.read(0, 10).unwrap(), entries(7, 1, 3, 500));
    // The laggard purges its entries: the old segments go at that purge.
    laggard.purge(3, vec![]).unwrap();
    assert!(core.segment_count() <= 2, "{} segments left", core.segment_count());
    // And a reopened log has both groups as they were.
    drop((core, laggard));
    let core = LogCore::open(volume, config()).unwrap();
    assert_eq!(core.bounds().1, Some(next - 1));
    let laggard = core.group(7).unwrap();
    assert_eq!(laggard.bounds(), (4, None));
}

#[test]
fn a_dropped_group_is_gone_and_its_id_can_be_used_again() {
    let volume = memory_volume(16 << 20).1;
    let core = LogCore::open(volume.clone(), config()).unwrap();
    let g = core.create_group(5).unwrap();
    assert!(matches!(core.create_group(5), Err(Error::GroupExists(5))));
    log::wait(|done| g.append(entries(5, 0, 6, 100), done)).unwrap();
    log::wait(|done| g.save_vote(b"old vote".to_vec(), done)).unwrap();
    g.save_committed(3, 1, b"old committed".to_vec()).unwrap();
    log::wait(|done| core.append(entries(0, 0, 2, 100), done)).unwrap();
    core.drop_group(5).unwrap();
    assert!(matches!(core.group(5), Err(Error::UnknownGroup(5))));
    assert!(matches!(g.read(0, 10), Err(Error::UnknownGroup(5))));
    assert!(matches!(
        log::wait(|done| g.append(entries(5, 6, 1, 100), done)),
        Err(Error::UnknownGroup(5))
    ));
    assert!(matches!(core.drop_group(5), Err(Error::UnknownGroup(5))));
    assert!(matches!(core.drop_group(0), Err(Error::Config(_))));
    assert_eq!(core.groups(), vec![0]);
    // The same id again: a new, empty group, whose own entries are all a reopen finds.
    let g = core.create_group(5).unwrap();
    assert_eq!((g.bounds(), g.meta().vote), ((0, None), None));
    log::wait(|done| g.append(entries(5, 0, 2, 900), done)).unwrap();
    drop((core, g));
    let core = LogCore::open(volume, config()).unwrap();
    assert_eq!(core.groups(), vec![0, 5]);
    let g = core.group(5).unwrap();
    assert_eq!(g.read(0, 100).unwrap(), entries(5, 0, 2, 900));
    assert_eq!(g.meta().vote, None);
    assert_eq!(g.meta().committed, None, "the old group's committed id is gone with it");
    assert_eq!(core.read(0, 10).unwrap(), entries(0, 0, 2, 100));
}

/// A dropped group's old frames may jump (a purge past its last entry, as an installed
/// snapshot makes, then entries after it): the drop's tombstone voids them, so a reopen
/// neither refuses them as a hole nor keeps them, with the id used again or not.
#[test]
fn a_dropped_group_whose_entries_jumped_past_a_purge_reopens() {
    for again in [false, true] {
        let volume = memory_volume(16 << 20).1;
        let core = LogCore::open(volume.clone(), config()).unwrap();
        let g = core.create_group(5).unwrap();
        log::wait(|done| g.append(entries(5, 1, 3, 100), done)).unwrap();
        g.purge(10, b"purged".to_vec()).unwrap();
        log::wait(|done| g.append(entries(5, 11, 2, 100), done)).unwrap();
        log::wait(|done| g.save_vote(b"vote".to_vec(), done)).unwrap();
        log::wait(|done| core.append(entries(0, 1, 1, 100), done)).unwrap();
        core.drop_group(5).unwrap();
        if again {
            let g = core.create_group(5).unwrap();
            log::wait(|done| g.save_vote(b"kept vote".to_vec(), done)).unwrap();
            log::wait(|done| g.append(entries(5, 1, 2, 900), done)).unwrap();
        }
        drop(g);
        core.close();
        drop(core);
        let core = LogCore::open(volume, config()).unwrap();
        assert_eq!(core.read(1, 2).unwrap(), entries(0, 1, 1, 100));
        if again {
            let g = core.group(5).unwrap();
            assert_eq!(g.read(1, 100).unwrap(), entries(5, 1, 2, 900));
            assert_eq!(g.meta().vote.as_deref(), Some(&b"kept vote"[..]));
            assert_eq!(g.meta().purged_index, None);
        } else {
            assert_eq!(core.groups(), vec![0]);
        }
    }
}

/// Each group's vote and committed id are its own, across a reopen.
#[test]
fn votes_and_committed_ids_are_per_group() {
    let volume = memory_volume(16 << 20).1;
    let core = LogCore::open(volume.clone(), config()).unwrap();
    let groups: Vec<LogCore> = (1..=4).map(|g| core.create_group(g * 10).unwrap()).collect();
    for g in &groups {
        let id = g.group_id();
        log::wait(|done| g.append(entries(id, 1, 5, 64), done)).unwrap();
        log::wait(|done| g.save_vote(format!("vote of {id}").into_bytes(), done)).unwrap();
        g.save_committed(id / 10, 1, format!("committed {id}").into_bytes()).unwrap();
    }
    // The committed ids ride on the next write of the log, whichever group makes it.
    log::wait(|done| core.append(entries(0, 1, 1, 64), done)).unwrap();
    for g in &groups {
        assert_eq!(g.durable_committed_index(), Some(g.group_id() / 10));
    }
    drop((core, groups));
    let core = LogCore::open(volume, config()).unwrap();
    for id in [10, 20, 30, 40] {
        let g = core.group(id).unwrap();
        assert_eq!(g.meta().vote, Some(format!("vote of {id}").into_bytes()));
        assert_eq!(g.meta().committed, Some(format!("committed {id}").into_bytes()));
        assert_eq!(g.read(0, 100).unwrap(), entries(id, 1, 5, 64));
    }
    assert_eq!(core.meta().vote, None);
}

/// What only damage or another program leaves refuses by name: a group's entries whose meta
/// file is gone, and a file among the groups' meta files that names no group.
#[test]
fn a_group_without_its_meta_file_refuses_to_open() {
    let volume = memory_volume(16 << 20).1;
    let core = LogCore::open(volume.clone(), config()).unwrap();
    let g = core.create_group(12).unwrap();
    log::wait(|done| g.append(entries(12, 1, 3, 100), done)).unwrap();
    drop((core, g));
    volume.create_file("/raft/groups/x1").unwrap();
    volume.commit().unwrap();
    let e = LogCore::open(volume.clone(), config()).unwrap_err();
    assert!(matches!(e, Error::Corrupt { reason, .. } if reason.contains("names no group")), "{e}");
    volume.remove("/raft/groups/x1").unwrap();
    volume.remove("/raft/groups/12").unwrap();
    volume.commit().unwrap();
    let e = LogCore::open(volume, config()).unwrap_err();
    assert!(
        matches!(e, Error::Corrupt { reason, .. } if reason.contains("group that has no meta file")),
        "{e}"
    );
}

/// One hot group writes and purges behind itself while 999 idle groups each keep two
/// entries from the start. Without rewrites the idle groups would pin the first segments
/// forever; with the space bound (factor 4) the log's segments stay within 4x the live
/// bytes plus four segments after every purge, and every idle entry reads back, also after
/// a reopen.
#[test]
fn one_hot_group_and_999_idle_ones_stay_within_the_space_bound() {
    let volume = memory_volume(64 << 20).1;
    let config = LogConfig { io: LogIo::Inline, space_factor: 4, ..config() };
    let core = LogCore::open(volume.clone(), config.clone()).unwrap();
    let idle: Vec<LogCore> = (1..=999).map(|g| core.create_group(g).unwrap()).collect();
    for (g, handle) in (1..).zip(&idle) {
        log::wait(|done| handle.append(entries(g, 1, 2, 150), done)).unwrap();
    }
    let (mut next, mut worst, mut written) = (1, 0.0f64, 0u64);
    for round in 0..4000 {
        log::wait(|done| core.append(entries(0, next, 4, 2000), done)).unwrap();
        next += 4;
        written += 4 * 2000;
        if round % 4 == 3 {
            // Keep the newest 16 entries, as openraft keeps a few behind its snapshot.
            core.purge(next - 17, vec![]).unwrap();
            let (used, bound) = core.space();
            let bound = bound.unwrap();
            assert!(used <= bound, "round {round}: {used} bytes of segments, bound {bound}");
            assert!(core.compact_wanted().is_empty(), "idle groups are small enough to rewrite");
            worst = worst.max(used as f64 / bound as f64);
        }
    }
    let (used, bound) = core.space();
    eprintln!(
        "1 hot group, 999 idle: {written} bytes written, {used} bytes of segments at the end, \
         bound {bound:?}, worst {worst:.2} of the bound"
    );
    assert!(written > 10 * used, "the log was written many times over its size");
    for (g, handle) in (1..).zip(&idle) {
        assert_eq!(handle.read(0, 10).unwrap(), entries(g, 1, 2, 150), "idle group {g}");
    }
    drop((core, idle));
    let core = LogCore::open(volume, config).unwrap();
    assert_eq!(core.bounds(), (next - 16, Some(next - 1)));
    for g in 1..=999u64 {
        let handle = core.group(g).unwrap();
        assert_eq!(handle.read(0, 10).unwrap(), entries(g, 1, 2, 150), "idle group {g} reopened");
    }
}

/// A laggard with more live bytes than the log rewrites is named by `compact_wanted`
/// instead (raft-engine's force-compact list), and leaves the list once it purged.
#[test]
fn a_laggard_too_big_to_rewrite_is_named_for_compaction() {
    let volume = memory_volume(32 << 20).1;
    let config =
        LogConfig { io: LogIo::Inline, space_factor: 2, rewrite_max_bytes: 8 << 10, ..config() };
    let core = LogCore::open(volume, config).unwrap();
    let small = core.create_group(5).unwrap();
    let big = core.create_group(6).unwrap();
    log::wait(|done| small.append(entries(5, 1, 2, 500), done)).unwrap();
    log::wait(|done| big.append(entries(6, 1, 8, 3000), done)).unwrap();
    let mut next = 1;
    for _ in 0..60 {
        log::wait(|done| core.append(entries(0, next, 4, 3000), done)).unwrap();
        next += 4;
        core.purge(next - 2, vec![]).unwrap();
    }
    assert_eq!(core.compact_wanted(), vec![6], "the big laggard is named, the small one not");
    assert_eq!(small.read(0, 10).unwrap(), entries(5, 1, 2, 500));
    assert_eq!(big.read(0, 10).unwrap(), entries(6, 1, 8, 3000));
    big.purge(8, vec![]).unwrap();
    assert!(core.compact_wanted().is_empty());
    let (used, bound) = core.space();
    assert!(used <= bound.unwrap(), "{used} over {bound:?} once the big laggard purged");
}

/// A rewrite races appends of its own group and of others from other threads: every entry
/// reads back the same, before and after a reopen.
#[test]
fn a_rewrite_racing_appends_keeps_every_entry() {
    let volume = memory_volume(32 << 20).1;
    let config = LogConfig { io: LogIo::Thread, ..config() };
    let core = LogCore::open(volume.clone(), config.clone()).unwrap();
    let groups: Vec<LogCore> = (1..=4).map(|g| core.create_group(g).unwrap()).collect();
    std::thread::scope(|s| {
        for (g, handle) in (1..).zip(&groups) {
            s.spawn(move || {
                for i in 0..200 {
                    log::wait(|done| handle.append(entries(g, 1 + i, 1, 700), done)).unwrap();
                }
            });
        }
        s.spawn(|| {
            for round in 0..200 {
                groups[round % 4].rewrite().unwrap();
            }
        });
    });
    for (g, handle) in (1..).zip(&groups) {
        assert_eq!(handle.read(0, 1000).unwrap(), entries(g, 1, 200, 700), "group {g}");
    }
    core.close();
    drop((core, groups));
    let core = LogCore::open(volume, config).unwrap();
    for g in 1..=4u64 {
        let handle = core.group(g).unwrap();
        assert_eq!(handle.read(0, 1000).unwrap(), entries(g, 1, 200, 700), "group {g} reopened");
    }
}
