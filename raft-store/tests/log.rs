//! The log core: reopen after every kind of operation, carrier operations per append,
//! corruption refused (not truncated), concurrent readers, the hot window.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::sync::Arc;

use common::{all, append, entry};
use vellum_engine::carrier::{CarrierOptions, FaultyCarrier, MemoryCarrier};
use vellum_engine::{FormatOptions, Volume, VolumeOptions};
use vellum_raft_store::Error;
use vellum_raft_store::log::{self, LogConfig, LogCore, LogEntry, LogIo};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 256 << 10,
        hot_window_bytes: 64 << 10,
        background_spares: false,
        ..LogConfig::default()
    }
}

/// A volume on a shared memory carrier, and a way to reopen its bytes.
struct Fixture {
    carrier: Arc<MemoryCarrier>,
}

impl Fixture {
    fn new() -> (Fixture, Volume) {
        let carrier = Arc::new(MemoryCarrier::new(32 << 20));
        let v = Volume::format(
            Box::new(Arc::clone(&carrier)),
            &FormatOptions::default(),
            VolumeOptions::default(),
        )
        .unwrap();
        (Fixture { carrier }, v)
    }

    /// Closes `core` and `volume`, then opens a copy of the bytes.
    fn reopen(&mut self, core: LogCore, volume: Volume) -> (LogCore, Volume) {
        core.close();
        drop(core);
        volume.close().unwrap();
        self.carrier = Arc::new(MemoryCarrier::from_bytes(&self.carrier.to_bytes()));
        let v =
            Volume::open(Box::new(Arc::clone(&self.carrier)), VolumeOptions::default()).unwrap();
        (LogCore::open(v.clone(), config()).unwrap(), v)
    }
}

#[test]
fn every_operation_survives_close_and_reopen() {
    let (mut fx, v) = Fixture::new();
    let mut core = LogCore::open(v.clone(), config()).unwrap();
    let mut v = v;
    let mut expect: Vec<LogEntry> = Vec::new();
    let check = |core: &LogCore, expect: &[LogEntry]| assert_eq!(all(core), expect);
    for round in 0..6u64 {
        let start = expect.last().map_or(0, |e| e.index + 1);
        let batch: Vec<LogEntry> = (start..start + 40)
            .map(|i| entry(i, round + 1, 500 + (i as usize % 7) * 300))
            .collect();
        append(&core, batch.clone());
        expect.extend(batch);
        (core, v) = fx.reopen(core, v);
        check(&core, &expect);

        let since = expect[expect.len() - 10].index;
        log::wait(|done| core.truncate(since, done)).unwrap();
        expect.retain(|e| e.index < since);
        (core, v) = fx.reopen(core, v);
        check(&core, &expect);

        let vote = format!("vote {round}").into_bytes();
        log::wait(|done| core.save_vote(vote.clone(), done)).unwrap();
        let committed = format!("committed {round}").into_bytes();
        core.save_committed(round, 1, committed.clone()).unwrap();
        log::wait(|done| core.flush_committed(done)).unwrap();
        (core, v) = fx.reopen(core, v);
        assert_eq!(core.meta().vote, Some(vote));
        assert_eq!(core.meta().committed, Some(committed));

        if round % 2 == 1 {
            let upto = expect[expect.len() / 2].index;
            core.purge(upto, upto.to_le_bytes().to_vec()).unwrap();
            expect.retain(|e| e.index > upto);
            (core, v) = fx.reopen(core, v);
            check(&core, &expect);
            assert_eq!(core.meta().purged_index, Some(upto));
        }
    }
    assert!(core.segment_count() >= 1);
}

#[test]
fn a_write_through_append_is_one_write_and_no_flush() {
    let carrier = Arc::new(FaultyCarrier::new(32 << 20, true));
    let v = Volume::format(
        Box::new(Arc::clone(&carrier)),
        &FormatOptions::default(),
        VolumeOptions::default(),
    )
    .unwrap();
    let core = LogCore::open(v.clone(), LogConfig { segment_bytes: 1 << 20, ..config() }).unwrap();
    append(&core, vec![entry(0, 1, 100)]); // the first append also activates a segment
    for i in 1..50u64 {
        let before = v.carrier_stats();
        append(&core, vec![entry(i, 1, 256)]);
        let d = v.carrier_stats() - before;
        assert_eq!((d.writes, d.durable_writes, d.barriers), (1, 1, 0), "append {i}");
        assert_eq!(d.written_bytes, 4096, "one fresh aligned block per flush");
    }
    // A batch of 64 entries of 4 KiB: one write (the whole batch), no flush.
    let before = v.carrier_stats();
    append(&core, (50..114).map(|i| entry(i, 1, 4096)).collect());
    let d = v.carrier_stats() - before;
    assert_eq!((d.writes, d.barriers), (1, 0), "a batch is one write");
}

#[test]
fn appends_on_a_real_file_carrier_are_one_durable_write() {
    let dir = tempfile::tempdir().unwrap();
    let fmt = FormatOptions { capacity_bytes: Some(32 << 20), ..FormatOptions::default() };
    let v = Volume::create_path(
        &dir.path().join("n.vlm"),
        &fmt,
        CarrierOptions::PRODUCTION,
        VolumeOptions::default(),
    )
    .unwrap();
    let core = LogCore::open(v.clone(), config()).unwrap();
    append(&core, vec![entry(0, 1, 100)]);
    let before = v.carrier_stats();
    for i in 1..21u64 {
        append(&core, vec![entry(i, 1, 256)]);
    }
    let d = v.carrier_stats() - before;
    assert_eq!(
        (d.writes, d.durable_writes, d.barriers),
        (20, 20, 0),
        "O_DIRECT + RWF_DSYNC, no fdatasync"
    );
}

#[test]
fn vote_and_truncate_are_one_write_each() {
    let carrier = Arc::new(FaultyCarrier::new(32 << 20, true));
    let v = Volume::format(
        Box::new(Arc::clone(&carrier)),
        &FormatOptions::default(),
        VolumeOptions::default(),
    )
    .unwrap();
    let core = LogCore::open(v.clone(), config()).unwrap();
    append(&core, (0..10).map(|i| entry(i, 1, 100)).collect());
    let before = v.carrier_stats();
    log::wait(|done| core.save_vote(b"v".to_vec(), done)).unwrap();
    log::wait(|done| core.truncate(5, done)).unwrap();
    let d = v.carrier_stats() - before;
    assert_eq!((d.writes, d.barriers), (2, 0));
}

#[test]
fn the_committed_id_rides_on_the_next_write_or_waits_the_lag_alone() {
    let (carrier, v) = common::faulty_volume(32 << 20);
    let lag = std::time::Duration::from_millis(20);
    let core = LogCore::open(v.clone(), LogConfig { commit_lag: lag, ..config() }).unwrap();
    append(&core, (0..10).map(|i| entry(i, 1, 100)).collect());
    // Saved: no write of its own; the next append carries it in its one write.
    let before = v.carrier_stats();
    core.save_committed(9, 1, b"c9".to_vec()).unwrap();
    assert_eq!(v.carrier_stats() - before, vellum_engine::carrier::StatsSnapshot::default());
    append(&core, vec![entry(10, 1, 100)]);
    let d = v.carrier_stats() - before;
    assert_eq!((d.writes, d.durable_writes), (1, 1), "the commit frame rides along");
    assert_eq!(core.durable_committed_index(), Some(9));
    // An older id changes nothing; with nothing to ride on, the IO thread saves it alone.
    core.save_committed(8, 1, b"c8".to_vec()).unwrap();
    assert_eq!(core.meta().committed_index, Some(9));
    core.save_committed(10, 1, b"c10".to_vec()).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while core.durable_committed_index() != Some(10) {
        assert!(std::time::Instant::now() < deadline, "the lazy save never came");
        std::thread::sleep(lag);
    }
    let d = v.carrier_stats() - before;
    assert_eq!(d.writes, 2, "one meta write for the idle id");
    // Close saves the last one; a reopen recovers it.
    core.save_committed(10, 1, b"c10".to_vec()).unwrap();
    append(&core, vec![entry(11, 1, 100)]);
    core.save_committed(11, 1, b"c11".to_vec()).unwrap();
    core.close();
    drop(core);
    v.close().unwrap();
    let v = Volume::open(Box::new(Arc::clone(&carrier)), VolumeOptions::default()).unwrap();
    let core = LogCore::open(v, config()).unwrap();
    assert_eq!(
        (core.meta().committed_index, core.meta().committed),
        (Some(11), Some(b"c11".to_vec()))
    );
}

/// Builds a log over several segments, closes it, and returns the bytes and the paths.
fn multi_segment_log() -> (Vec<u8>, Vec<Vec<u8>>) {
    let (fx, v) = Fixture::new();
    let core = LogCore::open(v.clone(), config()).unwrap();
    for i in 0..600u64 {
        append(&core, vec![entry(i, 1, 1000)]);
    }
    assert!(core.segment_count() >= 3);
    core.close();
    drop(core);
    let mut segs: Vec<Vec<u8>> = v
        .list("/raft/log")
        .unwrap()
        .into_iter()
        .map(|e| [b"/raft/log/".as_slice(), &e.name].concat())
        .collect();
    segs.sort();
    v.close().unwrap();
    (fx.carrier.to_bytes(), segs)
}

/// Flips a byte at `offset` of volume file `path` (through the engine, then closed).
fn damage(bytes: &[u8], path: &[u8], offset: u64) -> Vec<u8> {
    let c = Arc::new(MemoryCarrier::from_bytes(bytes));
    let v = Volume::open(Box::new(Arc::clone(&c)), VolumeOptions::default()).unwrap();
    let f = v.open_file(path).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_at(&[b[0] ^ 0x5A], offset).unwrap();
    drop(f);
    v.close().unwrap();
    c.to_bytes()
}

fn open_log(bytes: &[u8]) -> Result<LogCore, Error> {
    let v =
        Volume::open(Box::new(MemoryCarrier::from_bytes(bytes)), VolumeOptions::default()).unwrap();
    LogCore::open(v, config())
}

#[test]
fn damage_inside_a_sealed_segment_is_refused_not_truncated() {
    let (bytes, segs) = multi_segment_log();
    assert!(open_log(&bytes).is_ok());
    // Inside frames (each 1,040-byte entry starts a block); padding bytes carry no data.
    for offset in [4096 + 100, 14 * 4096 + 500, 36 * 4096 + 1000] {
        let bad = damage(&bytes, &segs[0], offset);
        let e = open_log(&bad).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "offset {offset}: {e:?}");
    }
}

#[test]
fn damage_followed_by_valid_entries_in_the_last_segment_is_refused() {
    let (bytes, segs) = multi_segment_log();
    let last = segs.last().unwrap();
    let bad = damage(&bytes, last, 4096 + 50);
    let e = open_log(&bad).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
}

#[test]
fn readers_run_concurrently_with_appends_and_the_window_is_bounded() {
    let (_fx, v) = Fixture::new();
    let core = LogCore::open(v, config()).unwrap();
    append(&core, (0..100).map(|i| entry(i, 1, 1000)).collect());
    std::thread::scope(|s| {
        let c = core.clone();
        s.spawn(move || {
            for i in 100..1100u64 {
                log::wait(|done| c.append(vec![entry(i, 1, 1000)], done)).unwrap();
            }
        });
        for _ in 0..2 {
            let c = core.clone();
            s.spawn(move || {
                for round in 0..200u64 {
                    let (first, last) = c.bounds();
                    let last = last.unwrap();
                    let lo = first + (round * 37) % (last - first + 1);
                    for e in c.read(lo, (lo + 20).min(last + 1)).unwrap() {
                        assert_eq!(e, entry(e.index, 1, 1000), "replication read of {}", e.index);
                    }
                }
            });
        }
    });
    assert!(
        core.hot_bytes() <= (64 << 10) + 1000,
        "the hot window stays near its budget: {}",
        core.hot_bytes()
    );
    let cold = core.read(0, 10).unwrap();
    assert_eq!(
        cold,
        (0..10).map(|i| entry(i, 1, 1000)).collect::<Vec<_>>(),
        "old entries read back from segments"
    );
}

#[test]
fn an_append_that_does_not_continue_the_log_truncates_it_durably() {
    let (mut fx, v) = Fixture::new();
    let core = LogCore::open(v.clone(), config()).unwrap();
    append(&core, (0..10).map(|i| entry(i, 1, 100)).collect());
    append(&core, (5..8).map(|i| entry(i, 2, 100)).collect());
    let got: Vec<(u64, u64)> = all(&core).iter().map(|e| (e.index, e.term)).collect();
    let want: Vec<(u64, u64)> = (0..5).map(|i| (i, 1)).chain((5..8).map(|i| (i, 2))).collect();
    assert_eq!(got, want);
    let (core, _v) = fx.reopen(core, v);
    assert_eq!(all(&core).iter().map(|e| (e.index, e.term)).collect::<Vec<_>>(), want);
    assert!(
        matches!(
            core.append(vec![entry(20, 2, 1), entry(22, 2, 1)], Box::new(|_| {})),
            Err(Error::OutOfRange { .. })
        ),
        "a hole inside one append is refused"
    );
}

/// A writer that panics (an assertion protecting the disk) fails its batch and every later
/// item; nothing waits forever on it.
#[test]
fn a_panicking_writer_fails_its_batch_and_everything_after_it() {
    use std::sync::Mutex;
    use vellum_raft_store::log::queue::{Combiner, Complete};

    type Seen = Arc<Mutex<Vec<(u32, Result<(), &'static str>)>>>;
    struct Item(u32, Seen);
    impl Complete for Item {
        type Error = &'static str;
        fn complete(self, result: Result<(), &'static str>) {
            self.1.lock().unwrap().push((self.0, result));
        }
        fn writer_panicked() -> &'static str {
            "panicked"
        }
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let combiner: Combiner<Item, u32> = Combiner::new(0);
    let write = |w: &mut u32, _: &mut [Item]| -> Result<(), &'static str> {
        *w += 1;
        assert!(*w > 1, "the first write trips an assertion");
        Ok(())
    };
    assert!(combiner.submit(Item(1, Arc::clone(&seen)), write).is_ok());
    assert!(combiner.submit(Item(2, Arc::clone(&seen)), write).is_ok());
    assert_eq!(*seen.lock().unwrap(), vec![(1, Err("panicked")), (2, Err("panicked"))]);
    assert_eq!(combiner.failed(), Some("panicked"));
    assert_eq!(*combiner.writer(), 1, "the state is not written with after the panic");
}

/// A memory volume and its carrier (the carrier's bytes are what a power cut leaves: memory
/// writes are all durable).
fn memory_volume() -> (Arc<MemoryCarrier>, Volume) {
    let carrier = Arc::new(MemoryCarrier::new(32 << 20));
    let v = Volume::format(
        Box::new(Arc::clone(&carrier)),
        &FormatOptions::default(),
        VolumeOptions::default(),
    )
    .unwrap();
    (carrier, v)
}

/// The committed id a write carries names an entry that is durable or in that write: an id
/// saved ahead of the log (a follower may learn the leader's commit index before its own
/// entries are written) waits for the write that holds its entry.
#[test]
fn a_commit_frame_never_names_an_entry_its_write_does_not_reach() {
    let (carrier, v) = memory_volume();
    // Inline: each append is one write by the caller, so the batches are known.
    let cfg = LogConfig { io: LogIo::Inline, ..config() };
    let core = LogCore::open(v, cfg.clone()).unwrap();
    append(&core, (1..=10).map(|i| entry(i, 1, 100)).collect());
    core.save_committed(15, 1, b"c15".to_vec()).unwrap();
    append(&core, vec![entry(11, 1, 100)]);
    assert_eq!(core.durable_committed_index(), None, "entry 15 is in no write yet");
    append(&core, (12..=16).map(|i| entry(i, 1, 100)).collect());
    assert_eq!(core.durable_committed_index(), Some(15), "carried by the write holding 15");
    let image = carrier.to_bytes();
    drop(core);
    let v = Volume::open(Box::new(MemoryCarrier::from_bytes(&image)), VolumeOptions::default())
        .unwrap();
    let core = LogCore::open(v, cfg).unwrap();
    assert_eq!(
        (core.meta().committed_index, core.meta().committed),
        (Some(15), Some(b"c15".to_vec())),
        "recovered from the commit frame alone"
    );
}

/// Recovery adopts a `Commit` frame only when the entry it keeps at the frame's index has the
/// frame's term; otherwise the meta file's id stands (a lagging id is safe).
#[test]
fn a_commit_frame_is_adopted_only_with_the_term_of_its_entry() {
    let recovered = |term: u64| {
        let (carrier, v) = memory_volume();
        let cfg = LogConfig { io: LogIo::Inline, ..config() };
        let core = LogCore::open(v, cfg.clone()).unwrap();
        append(&core, (1..=10).map(|i| entry(i, 1, 100)).collect());
        core.save_committed(5, 1, b"c5".to_vec()).unwrap();
        // A meta save holds the newest committed id: c5 is in the meta file.
        log::wait(|done| core.flush_committed(done)).unwrap();
        core.save_committed(8, term, b"c8".to_vec()).unwrap();
        append(&core, vec![entry(11, 1, 100)]); // carries (8, term)
        assert_eq!(core.durable_committed_index(), Some(8));
        let image = carrier.to_bytes();
        drop(core);
        let v = Volume::open(Box::new(MemoryCarrier::from_bytes(&image)), VolumeOptions::default())
            .unwrap();
        let core = LogCore::open(v, cfg).unwrap();
        (core.meta().committed_index, core.meta().committed)
    };
    assert_eq!(recovered(1), (Some(8), Some(b"c8".to_vec())), "entry 8 has term 1");
    assert_eq!(recovered(7), (Some(5), Some(b"c5".to_vec())), "entry 8 has no term 7");
}

/// Under a steady stream of committed ids that no write carries (here: no write at all), each
/// id is pending only briefly; the idle save must still come, timed from when an id first
/// became pending. Counted, not timed: the durable committed index must advance several
/// times while the stream runs.
#[test]
fn a_steady_stream_of_committed_ids_is_saved_all_the_same() {
    let (_carrier, v) = memory_volume();
    let lag = std::time::Duration::from_millis(50);
    let core = LogCore::open(v, LogConfig { commit_lag: lag, ..config() }).unwrap();
    append(&core, (1..=4000).map(|i| entry(i, 1, 10)).collect());
    let mut advances = 0;
    let mut last = core.durable_committed_index();
    let started = std::time::Instant::now();
    let mut index = 1;
    // At least 40 lags of a new id every millisecond (longer on a slow machine: it counts
    // ids, not time), then a generous wait for the advances to be seen.
    while index < 4000 && (index < 2000 || advances < 3) {
        core.save_committed(index, 1, format!("c{index}").into_bytes()).unwrap();
        index += 1;
        std::thread::sleep(std::time::Duration::from_millis(1));
        let now = core.durable_committed_index();
        if now != last {
            advances += 1;
            last = now;
        }
    }
    assert!(
        advances >= 3,
        "the durable committed id advanced {advances} times in {index} ids ({:?}, lag {lag:?})",
        started.elapsed()
    );
}

/// A completion callback that panics (a bug in the caller) is caught: the log's IO thread
/// goes on, and later appends complete.
#[test]
fn a_panicking_completion_callback_does_not_stop_the_log() {
    let (_carrier, v) = memory_volume();
    let core = LogCore::open(v, config()).unwrap(); // the IO thread writes and completes
    core.append(vec![entry(1, 1, 100)], Box::new(|_| panic!("a caller's callback panics")))
        .unwrap();
    for i in 2..=4 {
        let (tx, rx) = std::sync::mpsc::channel();
        core.append(vec![entry(i, 1, 100)], Box::new(move |r| drop(tx.send(r)))).unwrap();
        let r = rx.recv_timeout(std::time::Duration::from_secs(60));
        assert!(matches!(r, Ok(Ok(()))), "append {i} after the panic: {r:?}");
    }
    assert_eq!(all(&core).len(), 4);
    assert!(core.is_durable(4));
}
