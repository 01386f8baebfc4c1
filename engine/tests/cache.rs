//! The page cache and the two IO tiers, seen from the public API: counts of carrier
//! operations (never timings) prove what reached the carrier and when.
//!
//! - hits and misses, readahead along the extent as one carrier read, scan resistance;
//! - write-back: buffered writes reach the carrier only at sync (data before the barrier),
//!   at close, or by the writeback thread; write-through writes never sit in the cache;
//! - coherence: a direct write drops the pages it covers, a direct read sees dirty pages;
//! - a property test: any interleaving of buffered and direct reads, writes, truncations
//!   and syncs on a file reads back what a plain byte vector says, with a cache small enough
//!   to evict all the time.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use proptest::prelude::*;
use vellum_engine::carrier::{FaultRng, FaultyCarrier, MemoryCarrier};
use vellum_engine::error::Knob;
use vellum_engine::{Error, FormatOptions, IoPolicy, Tier, Volume, VolumeOptions};

const BS: usize = 4096;

fn volume(cache_pages: usize, write_through: bool) -> (Volume, Arc<FaultyCarrier>) {
    let carrier = Arc::new(FaultyCarrier::new(32 << 20, write_through));
    let options = VolumeOptions { cache_bytes: Some(cache_pages * BS), ..VolumeOptions::default() };
    let v =
        Volume::format(Box::new(Arc::clone(&carrier)), &FormatOptions::default(), options).unwrap();
    (v, carrier)
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i / 7) as u8)).collect()
}

#[test]
fn memory_refuses_a_cache_and_says_why() {
    let options = VolumeOptions { cache_bytes: Some(1 << 20), ..VolumeOptions::default() };
    let e =
        Volume::format(Box::new(MemoryCarrier::new(16 << 20)), &FormatOptions::default(), options)
            .unwrap_err();
    assert!(matches!(e, Error::KnobMeaningless { knob: Knob::Cache, .. }), "{e}");
    let v = Volume::format(
        Box::new(MemoryCarrier::new(16 << 20)),
        &FormatOptions::default(),
        VolumeOptions::default(),
    )
    .unwrap();
    assert_eq!(v.info().cache_bytes, 0);
    assert!(v.cache_stats().is_none());
}

fn reopen(carrier: &FaultyCarrier, bytes: Vec<u8>, cache_pages: usize) -> Volume {
    let _ = carrier;
    let options = VolumeOptions { cache_bytes: Some(cache_pages * BS), ..VolumeOptions::default() };
    Volume::open(Box::new(FaultyCarrier::from_bytes(bytes, false)), options).unwrap()
}

#[test]
fn a_sequential_read_goes_out_as_few_long_carrier_reads() {
    let (v, carrier) = volume(512, false);
    let f = v.create_file("/f").unwrap();
    f.preallocate(0, 256 * BS as u64).unwrap();
    let data = pattern(3, 256 * BS);
    f.write_at(&data, 0).unwrap();
    v.close().unwrap();
    let v = reopen(&carrier, carrier.current_bytes(), 512);
    let f = v.open_file("/f").unwrap();
    let reads_before = v.carrier_stats().reads;
    let mut got = vec![0u8; 256 * BS];
    for (i, chunk) in got.chunks_mut(BS).enumerate() {
        f.read_exact_at(chunk, (i * BS) as u64).unwrap();
    }
    assert_eq!(got, data);
    let s = v.cache_stats().unwrap();
    let reads = v.carrier_stats().reads - reads_before;
    assert_eq!(s.hits + s.misses, 256, "{s:?}");
    // The window grows 4, 8, 16, ... up to 2 MiB, and the readahead threads load whole
    // windows ahead of the reader: a handful of carrier reads, each one run, every page read
    // once.
    assert!(reads <= 16 && s.misses <= reads, "{reads} carrier reads, {s:?}");
    assert_eq!(s.readahead_pages, 256 - s.misses, "{s:?}");
    // A second pass is all hits and reads nothing.
    for (i, chunk) in got.chunks_mut(BS).enumerate() {
        f.read_exact_at(chunk, (i * BS) as u64).unwrap();
    }
    assert_eq!(v.carrier_stats().reads - reads_before, reads);
    assert_eq!(v.cache_stats().unwrap().hits, s.hits + 256);
}

/// The cache's counters once `done` holds of them, or after 5 s: the readahead threads work
/// in the background, so a test gives them time; the counts decide.
fn counters_once(
    v: &Volume,
    done: impl Fn(&vellum_engine::CacheStats) -> bool,
) -> vellum_engine::CacheStats {
    for _ in 0..500 {
        let s = v.cache_stats().unwrap();
        if done(&s) {
            return s;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    v.cache_stats().unwrap()
}

/// A file of `blocks` blocks of a pattern on a fresh volume, reopened with a cold cache.
fn cold_file(blocks: usize) -> (Volume, Arc<FaultyCarrier>, Vec<u8>) {
    let (v, carrier) = volume(2048, false);
    let f = v.create_file("/f").unwrap();
    f.preallocate(0, (blocks * BS) as u64).unwrap();
    let data = pattern(5, blocks * BS);
    f.write_at(&data, 0).unwrap();
    v.close().unwrap();
    let carrier = Arc::new(FaultyCarrier::from_bytes(carrier.current_bytes(), false));
    let options = VolumeOptions { cache_bytes: Some(2048 * BS), ..VolumeOptions::default() };
    (Volume::open(Box::new(Arc::clone(&carrier)), options).unwrap(), carrier, data)
}

#[test]
fn a_sequential_reader_finds_its_next_windows_loaded_ahead_of_it() {
    let (v, _carrier, data) = cold_file(1024);
    let f = v.open_file("/f").unwrap();
    let read_before = v.carrier_stats().read_bytes;
    let mut got = vec![0u8; 1024 * BS];
    // Eight sequential reads of 16 blocks: the window grows to 512 blocks, so the reader's
    // own readahead reaches block 128 + 512 at most; the threads load past it.
    for (i, chunk) in got.chunks_mut(16 * BS).enumerate().take(8) {
        f.read_exact_at(chunk, (i * 16 * BS) as u64).unwrap();
    }
    let s = counters_once(&v, |s| s.resident_pages > 640);
    assert!(s.resident_pages > 640, "nothing loaded past the reader's window: {s:?}");
    for (i, chunk) in got.chunks_mut(16 * BS).enumerate().skip(8) {
        f.read_exact_at(chunk, (i * 16 * BS) as u64).unwrap();
    }
    assert_eq!(got, data);
    let s = v.cache_stats().unwrap();
    assert_eq!(s.hits + s.misses, 1024, "{s:?}");
    let read = v.carrier_stats().read_bytes - read_before;
    assert_eq!(read, (1024 * BS) as u64, "a page read twice, or one past the file: {s:?}");
}

#[test]
fn a_failed_readahead_is_left_to_the_reader_that_wants_the_page() {
    let (v, carrier, data) = cold_file(1024);
    let f = v.open_file("/f").unwrap();
    let extent = f.extents().unwrap()[0];
    assert!(extent.blocks >= 1024, "{extent:?}");
    let bad = (extent.physical_block + 900) * BS as u64;
    carrier.make_unreadable(bad..bad + BS as u64);
    let mut got = vec![0u8; 16 * BS];
    // The threads' window over block 900 fails; every block before it still reads back (the
    // reader loads what the threads dropped), block 900 fails for the reader that wants it,
    // and the volume goes on.
    for i in 0..56 {
        f.read_exact_at(&mut got, (i * 16 * BS) as u64).unwrap();
        assert_eq!(
            got,
            data[i * 16 * BS..(i + 1) * 16 * BS],
            "blocks {} to {}",
            i * 16,
            i * 16 + 15
        );
    }
    let mut block = vec![0u8; BS];
    f.read_exact_at(&mut block[..], 896 * BS as u64).unwrap();
    assert!(f.read_exact_at(&mut block[..], 900 * BS as u64).is_err(), "block 900 read back");
    f.read_exact_at(&mut block[..], 901 * BS as u64).unwrap();
    assert_eq!(block, data[901 * BS..902 * BS]);
    f.write_at(&data[..BS], 0).unwrap();
    v.sync().unwrap();
}

#[test]
fn a_scan_does_not_flush_the_hot_set() {
    let (v, _carrier) = volume(64, false);
    let hot = v.create_file("/hot").unwrap();
    hot.preallocate(0, 16 * BS as u64).unwrap();
    let big = v.create_file("/big").unwrap();
    big.preallocate(0, 512 * BS as u64).unwrap();
    v.commit().unwrap();
    let mut buf = vec![0u8; BS];
    let read_hot = || {
        for i in 0..16u64 {
            hot.read_exact_at(&mut vec![0u8; BS], i * BS as u64).unwrap();
        }
    };
    for _ in 0..3 {
        read_hot();
    }
    let direct = v.open_file_with("/big", IoPolicy::DIRECT).unwrap();
    let before = v.cache_stats().unwrap();
    for i in 0..512u64 {
        direct.read_exact_at(&mut buf, i * BS as u64).unwrap();
    }
    let after_direct = v.cache_stats().unwrap();
    assert_eq!((after_direct.hits, after_direct.misses), (before.hits, before.misses));
    read_hot();
    let s = v.cache_stats().unwrap();
    assert_eq!(s.hits - after_direct.hits, 16, "a direct scan touched the hot set: {s:?}");
    // A buffered scan of eight times the budget: the hot set, credited, stays in the main
    // queue; the scan only churns the probation queue.
    for i in 0..512u64 {
        big.read_exact_at(&mut buf, i * BS as u64).unwrap();
    }
    let before = v.cache_stats().unwrap();
    read_hot();
    let s = v.cache_stats().unwrap();
    assert!(s.hits - before.hits >= 15, "the buffered scan evicted the hot set: {s:?}");
}

#[test]
fn buffered_writes_are_durable_after_sync_and_only_then_counted_so() {
    let (v, carrier) = volume(256, false);
    let f = v.create_file("/f").unwrap();
    f.preallocate(0, 64 * BS as u64).unwrap();
    v.commit().unwrap();
    let data = pattern(9, 16 * BS);
    for i in 0..16 {
        f.write_at(&data[i * BS..(i + 1) * BS], (i * 2 * BS) as u64).unwrap();
    }
    let s = v.cache_stats().unwrap();
    assert_eq!(s.dirty_pages + s.writeback_pages, 16, "{s:?}");
    let barriers = v.carrier_stats().barriers;
    v.sync().unwrap();
    assert_eq!(v.cache_stats().unwrap().dirty_pages, 0);
    // Only the data changed: one barrier, after the pages were written.
    assert_eq!(v.carrier_stats().barriers, barriers + 1);
    // Power cut right after the sync: every write is there.
    let image = carrier.crash_image(&mut FaultRng::new(7));
    let v = reopen(&carrier, image, 16);
    let f = v.open_file("/f").unwrap();
    let mut got = vec![0u8; BS];
    for i in 0..16 {
        f.read_exact_at(&mut got, (i * 2 * BS) as u64).unwrap();
        assert_eq!(got, &data[i * BS..(i + 1) * BS], "page {i}");
    }
}

#[test]
fn write_through_writes_never_sit_in_the_cache() {
    let (v, _carrier) = volume(256, true);
    let f = v.create_file("/log").unwrap();
    f.preallocate(0, 16 * BS as u64).unwrap();
    v.commit().unwrap();
    let mut buf = vec![0u8; BS];
    f.read_exact_at(&mut buf, 0).unwrap();
    let durable = v.carrier_stats().durable_writes;
    f.write_at(&pattern(1, BS), 0).unwrap();
    assert_eq!(v.carrier_stats().durable_writes, durable + 1);
    assert_eq!(v.cache_stats().unwrap().dirty_pages, 0);
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, pattern(1, BS), "the cached copy was not dropped");
}

#[test]
fn the_tiers_are_coherent() {
    let (v, _carrier) = volume(64, false);
    let buffered = v.create_file_with("/f", IoPolicy::BUFFERED).unwrap();
    buffered.preallocate(0, 8 * BS as u64).unwrap();
    v.commit().unwrap();
    let direct = v.open_file_with("/f", IoPolicy::DIRECT).unwrap();
    let mut buf = vec![0u8; 3 * BS];
    // A dirty page is seen by a direct read (written back first).
    buffered.write_at(&pattern(5, 100), 10).unwrap();
    direct.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[10..110], &pattern(5, 100)[..]);
    // A cached page is dropped by a direct write, also one covered only in part.
    buffered.read_exact_at(&mut buf, 0).unwrap();
    direct.write_at(&pattern(6, 50), BS as u64 + 7).unwrap();
    buffered.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[10..110], &pattern(5, 100)[..]);
    assert_eq!(&buf[BS + 7..BS + 57], &pattern(6, 50)[..]);
    // A partial direct write over a dirty page keeps the page's other bytes.
    buffered.write_at(&pattern(7, 30), 2 * BS as u64).unwrap();
    direct.write_at(&pattern(8, 30), 2 * BS as u64 + 100).unwrap();
    direct.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[2 * BS..2 * BS + 30], &pattern(7, 30)[..]);
    assert_eq!(&buf[2 * BS + 100..2 * BS + 130], &pattern(8, 30)[..]);
    let mut policy = direct.policy();
    policy.read = Tier::Buffered;
    assert_ne!(policy, IoPolicy::DIRECT);
}

/// `File::read_many` gives what `read_to_end` gives on each file: sizes that end inside a
/// block, a hole, a file named twice, an empty one, and a dirty cached page (written back
/// first, as for a direct read); files next to each other on the carrier come in one
/// carrier read; handles of another volume are refused.
#[test]
fn many_files_read_whole_in_few_carrier_reads() {
    let (v, _carrier) = volume(64, false);
    let mut files = Vec::new();
    for i in 0..40u8 {
        let f = v.create_file(format!("/m{i}")).unwrap();
        f.preallocate(0, 2 * BS as u64).unwrap();
        files.push(f);
    }
    let last_small = v.create_file("/small").unwrap();
    last_small.write_at(&pattern(1, 700), 0).unwrap();
    let holed = v.create_file("/holed").unwrap();
    holed.write_at(&pattern(2, 100), 3 * BS as u64).unwrap();
    let empty = v.create_file("/empty").unwrap();
    v.commit().unwrap();
    for (i, f) in files.iter().enumerate() {
        f.write_at(&pattern(i as u8, 2 * BS - 3), 0).unwrap();
    }
    v.sync().unwrap();
    // A dirty page, not written back yet.
    files[5].write_at(&pattern(99, 10), 100).unwrap();
    let mut all: Vec<&vellum_engine::File> = files.iter().collect();
    all.extend([&last_small, &holed, &empty, &files[0]]);
    let reads = v.carrier_stats().reads;
    let got = vellum_engine::File::read_many(&all).unwrap();
    let reads = v.carrier_stats().reads - reads;
    assert_eq!(got.len(), all.len());
    for (f, bytes) in all.iter().zip(&got) {
        assert_eq!(bytes, &f.read_to_end().unwrap());
    }
    assert_eq!(&got[5][100..110], &pattern(99, 10)[..], "the dirty page's bytes");
    assert_eq!(got[41].len(), 3 * BS + 100, "a hole reads as zeros up to the size");
    // The 40 preallocated files lie next to each other: a handful of reads, not 40.
    assert!(reads <= 6, "{reads} carrier reads for {} files", all.len());
    let (other, _) = volume(64, false);
    let foreign = other.create_file("/x").unwrap();
    let e = vellum_engine::File::read_many(&[&files[0], &foreign]).unwrap_err();
    assert!(matches!(e, Error::Invalid(vellum_engine::error::Invalid::ForeignFile)), "{e}");
    assert!(vellum_engine::File::read_many(&[]).unwrap().is_empty());
}

#[test]
fn close_writes_back_every_dirty_page() {
    let (v, carrier) = volume(256, false);
    let f = v.create_file("/f").unwrap();
    let data = pattern(11, 40 * BS + 123);
    f.write_at(&data, 0).unwrap();
    drop(f);
    v.close().unwrap();
    let v = reopen(&carrier, carrier.crash_image(&mut FaultRng::new(1)), 16);
    assert_eq!(v.open_file("/f").unwrap().read_to_end().unwrap(), data);
}

#[derive(Debug, Clone)]
enum Op {
    Write { direct: bool, offset: u64, len: usize, seed: u8 },
    Read { direct: bool, offset: u64, len: usize },
    SetLen(u64),
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    let span = 48 * BS as u64;
    prop_oneof![
        4 => (any::<bool>(), 0..span, 1..3 * BS, any::<u8>())
            .prop_map(|(direct, offset, len, seed)| Op::Write { direct, offset, len, seed }),
        // Long enough to go around the cache on the buffered tier.
        1 => (any::<bool>(), 0..span, 256 * 1024..300 * 1024usize, any::<u8>())
            .prop_map(|(direct, offset, len, seed)| Op::Write { direct, offset, len, seed }),
        4 => (any::<bool>(), 0..span, 1..3 * BS)
            .prop_map(|(direct, offset, len)| Op::Read { direct, offset, len }),
        1 => (0..span).prop_map(Op::SetLen),
        1 => Just(Op::Sync),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any interleaving of buffered and direct reads and writes on a file reads back what a
    /// byte vector says, with a cache of 16 pages (evicting all the time); after close and
    /// reopen the file is the model.
    #[test]
    fn buffered_and_direct_interleavings_match_a_byte_vector(ops in prop::collection::vec(op(), 1..60)) {
        let (v, carrier) = volume(16, false);
        let buffered = v.create_file_with("/f", IoPolicy::BUFFERED).unwrap();
        let direct = v.open_file_with("/f", IoPolicy::DIRECT).unwrap();
        let mut model: Vec<u8> = Vec::new();
        for op in ops {
            match op {
                Op::Write { direct: d, offset, len, seed } => {
                    let data = pattern(seed, len);
                    let f = if d { &direct } else { &buffered };
                    f.write_at(&data, offset).unwrap();
                    let end = offset as usize + len;
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[offset as usize..end].copy_from_slice(&data);
                }
                Op::Read { direct: d, offset, len } => {
                    let f = if d { &direct } else { &buffered };
                    let mut buf = vec![0xEE; len];
                    let n = f.read_at(&mut buf, offset).unwrap();
                    let want = model.get(offset as usize..).map_or(&[][..], |t| &t[..t.len().min(len)]);
                    prop_assert_eq!(&buf[..n], want);
                }
                Op::SetLen(len) => {
                    buffered.set_len(len).unwrap();
                    model.resize(len as usize, 0);
                }
                Op::Sync => v.sync().unwrap(),
            }
        }
        drop((buffered, direct));
        v.close().unwrap();
        let v = reopen(&carrier, carrier.crash_image(&mut FaultRng::new(3)), 16);
        prop_assert_eq!(v.open_file("/f").unwrap().read_to_end().unwrap(), model);
    }
}

#[test]
fn the_default_read_tier_follows_the_carrier() {
    use vellum_engine::media::{CarrierOptions, Location, open_or_create_volume};
    let dir = tempfile::tempdir().unwrap();
    let format16 = vellum_engine::FormatOptions {
        capacity_bytes: Some(16 << 20),
        ..vellum_engine::FormatOptions::default()
    };
    let open = |name: &str, carrier: CarrierOptions| {
        let at = Location::Path(dir.path().join(name));
        let (v, created) =
            open_or_create_volume(&at, &format16, carrier, VolumeOptions::default()).unwrap();
        assert!(created);
        v.info().default_policy
    };
    // Direct IO (the default): our frames are the only cache, reads go through them.
    assert_eq!(open("direct.vlm", CarrierOptions::PRODUCTION), IoPolicy::BUFFERED);
    // The host caches the carrier: a second copy in our frames only costs.
    let host = open("host.vlm", CarrierOptions::BUFFERED);
    assert_eq!(host, IoPolicy { read: Tier::Direct, write: Tier::Buffered });
    // An explicit policy wins.
    let options = VolumeOptions { policy: Some(IoPolicy::DIRECT), ..VolumeOptions::default() };
    let at = Location::Path(dir.path().join("explicit.vlm"));
    let (v, _) = open_or_create_volume(&at, &format16, CarrierOptions::BUFFERED, options).unwrap();
    assert_eq!(v.info().default_policy, IoPolicy::DIRECT);
}

/// Bug (the fsyncgate shape): a sync waits for a writeback that the writeback thread issued,
/// and that writeback fails (the page is marked clean: no dirty page is left to tell). The
/// sync must fail, and nothing may be committed after it.
#[test]
fn a_sync_fails_when_a_writeback_it_waited_for_failed() {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    use vellum_engine::carrier::InjectedError;
    let (v, carrier) = volume(16, false);
    let f = v.create_file("/f").unwrap();
    f.preallocate(0, 64 << 10).unwrap();
    v.commit().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = Mutex::new(tx);
    let fired = AtomicBool::new(false);
    let weak = Arc::downgrade(&carrier);
    // The writeback thread's first write is held inside the carrier while this thread's sync
    // starts and waits for it, then fails with EIO.
    carrier.set_write_hook(Some(Arc::new(move |_offset, _len, durable| {
        let writeback = std::thread::current().name() == Some("vellum-writeback");
        if durable || !writeback || fired.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = tx.lock().unwrap().send(());
        std::thread::sleep(Duration::from_millis(500));
        if let Some(c) = weak.upgrade() {
            c.inject_error(InjectedError { at_op: c.ops(), errno: libc::EIO });
        }
    })));
    // Two dirty pages: above the background line (one page of 16), so the thread wakes and
    // writes back the lowest one.
    f.write_at(&[7; 4096], 0).unwrap();
    f.write_at(&[8; 4096], 8192).unwrap();
    rx.recv_timeout(Duration::from_secs(60)).expect("the writeback thread wrote");
    let synced = f.sync();
    assert!(synced.is_err(), "a sync returned Ok although a writeback it waited for failed");
    assert!(v.is_poisoned());
    v.create_file("/after").unwrap_err();
    assert!(v.commit().is_err(), "nothing is committed over a failed write");
    carrier.set_write_hook(None);
}
