//! Model check of the page cache's concurrency with loom: over every interleaving
//! (preemption bounded) of two threads, the cache's own source (compiled here against loom's
//! `Mutex`, `Condvar` and atomics; the library builds it against std's) keeps its promises:
//!
//! 1. a reader and a writer on one page: the reader sees the old page or the new one, never
//!    a mix, and the write is visible afterwards;
//! 2. writeback racing a writer on the same page: after `flush_all` the disk holds the last
//!    write (a write during the writeback dirties the page again);
//! 3. a direct write (disk write, then `discard`) racing a reader that loads the page: no
//!    stale copy survives; and a direct write racing a writeback of an older dirty page: the
//!    stale writeback never lands after the direct write (discard waits for it);
//! 4. a reader holding a pinned page while another thread's misses force evictions in a
//!    two-frame cache: the reader gets its block's bytes, never another block's.
//!
//! The mutant `with_mutant_evicting_pinned_pages` (eviction ignores pins) must fail model 4;
//! the other rules have mutants in the crash campaign (`tests/crash`) and the property test
//! (`tests/cache.rs`) that catch them with real threads and carriers.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod sync {
    pub(crate) use loom::sync::atomic;
    pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
}

#[allow(dead_code, unreachable_pub, unused_imports)]
#[path = "../src/io/cache/mod.rs"]
mod cache;

// The cache names its metrics from here, as in the crate.
#[allow(dead_code)]
#[path = "../src/metric_names.rs"]
mod metric_names;

use std::time::Duration;

use cache::{Backing, PageCache, Select};
use loom::sync::Arc;

const PAGE: usize = 4096;

/// A disk of a few pages (std's mutex: storage, not a synchronization point under test).
struct Disk(std::sync::Mutex<Vec<u8>>);

impl Disk {
    fn new(pages: usize) -> Disk {
        let mut bytes = vec![0u8; pages * PAGE];
        for (i, page) in bytes.chunks_mut(PAGE).enumerate() {
            page.fill(i as u8 + 1);
        }
        Disk(std::sync::Mutex::new(bytes))
    }
    fn page(&self, block: usize) -> Vec<u8> {
        self.0.lock().unwrap()[block * PAGE..(block + 1) * PAGE].to_vec()
    }
}

impl Backing for Disk {
    type Error = ();
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ()> {
        let at = offset as usize;
        buf.copy_from_slice(&self.0.lock().unwrap()[at..at + buf.len()]);
        Ok(())
    }
    fn write(&self, offset: u64, buf: &[u8]) -> Result<(), ()> {
        let at = offset as usize;
        self.0.lock().unwrap()[at..at + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn read_vectored(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<(), ()> {
        let mut at = offset;
        for b in bufs.iter_mut() {
            self.read(at, b)?;
            at += b.len() as u64;
        }
        Ok(())
    }
    fn write_vectored(&self, offset: u64, bufs: &[&[u8]]) -> Result<(), ()> {
        let mut at = offset;
        for b in bufs {
            self.write(at, b)?;
            at += b.len() as u64;
        }
        Ok(())
    }
}

fn uniform(page: &[u8]) -> Option<u8> {
    page.iter().all(|&b| b == page[0]).then(|| page[0])
}

fn read(cache: &PageCache, disk: &Disk, block: u64) -> Vec<u8> {
    let mut buf = vec![0u8; PAGE];
    cache.read(disk, block * PAGE as u64, &mut buf, block + 1).unwrap();
    buf
}

fn check(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(f);
}

const EVERYTHING: Select = Select { older_than: Duration::ZERO, above: 0 };

#[test]
fn a_reader_never_sees_a_torn_page() {
    check(|| {
        let disk = Arc::new(Disk::new(1));
        let cache = Arc::new(PageCache::tiny(2, PAGE));
        let (c, d) = (Arc::clone(&cache), Arc::clone(&disk));
        let writer = loom::thread::spawn(move || c.write(&*d, 0, &[9u8; PAGE]).unwrap());
        let seen = uniform(&read(&cache, &disk, 0));
        assert!(matches!(seen, Some(1 | 9)), "torn or foreign page: {seen:?}");
        writer.join().unwrap();
        assert_eq!(uniform(&read(&cache, &disk, 0)), Some(9));
    });
}

#[test]
fn a_write_during_writeback_is_written_again() {
    check(|| {
        let disk = Arc::new(Disk::new(1));
        let cache = Arc::new(PageCache::tiny(2, PAGE));
        cache.write(&*disk, 0, &[5u8; PAGE]).unwrap();
        let (c, d) = (Arc::clone(&cache), Arc::clone(&disk));
        let drain = loom::thread::spawn(move || {
            c.drain(&*d, EVERYTHING, 8).unwrap();
        });
        cache.write(&*disk, 0, &[7u8; PAGE]).unwrap();
        drain.join().unwrap();
        cache.flush_all(&*disk).unwrap();
        assert_eq!(uniform(&disk.page(0)), Some(7));
        assert_eq!(cache.dirty_pages(), 0);
    });
}

#[test]
fn a_direct_write_leaves_no_stale_copy() {
    check(|| {
        let disk = Arc::new(Disk::new(1));
        let cache = Arc::new(PageCache::tiny(2, PAGE));
        let (c, d) = (Arc::clone(&cache), Arc::clone(&disk));
        let direct = loom::thread::spawn(move || {
            c.discard(0, 1);
            d.write(0, &[3u8; PAGE]).unwrap();
            c.discard(0, 1);
        });
        let seen = uniform(&read(&cache, &disk, 0));
        assert!(matches!(seen, Some(1 | 3)), "{seen:?}");
        direct.join().unwrap();
        assert_eq!(uniform(&read(&cache, &disk, 0)), Some(3), "a stale page survived");
    });
}

#[test]
fn a_stale_writeback_never_lands_after_a_direct_write() {
    check(|| {
        let disk = Arc::new(Disk::new(1));
        let cache = Arc::new(PageCache::tiny(2, PAGE));
        cache.write(&*disk, 0, &[4u8; PAGE]).unwrap();
        let (c, d) = (Arc::clone(&cache), Arc::clone(&disk));
        let drain = loom::thread::spawn(move || {
            c.drain(&*d, EVERYTHING, 8).unwrap();
        });
        // What the data path does for a direct write covering the page.
        cache.discard(0, 1);
        disk.write(0, &[6u8; PAGE]).unwrap();
        cache.discard(0, 1);
        drain.join().unwrap();
        cache.flush_all(&*disk).unwrap();
        assert_eq!(uniform(&disk.page(0)), Some(6), "a stale writeback landed last");
    });
}

fn pinned_pages_are_not_evicted(mutant: bool) {
    check(move || {
        let disk = Arc::new(Disk::new(3));
        let cache = PageCache::tiny(2, PAGE);
        let cache =
            Arc::new(if mutant { cache.with_mutant_evicting_pinned_pages() } else { cache });
        let (c, d) = (Arc::clone(&cache), Arc::clone(&disk));
        let other = loom::thread::spawn(move || {
            assert_eq!(uniform(&read(&c, &d, 1)), Some(2));
            assert_eq!(uniform(&read(&c, &d, 2)), Some(3));
        });
        assert_eq!(uniform(&read(&cache, &disk, 0)), Some(1), "read another block's frame");
        other.join().unwrap();
    });
}

#[test]
fn pinned_pages_are_never_evicted() {
    pinned_pages_are_not_evicted(false);
}

/// The kept mutant: eviction that ignores pins must be caught by the model above (by the
/// reader's check of its bytes, or by the cache's own assertion that an unpinned frame was
/// pinned: the evicted frame was reset under the reader).
#[test]
fn the_model_catches_eviction_of_pinned_pages() {
    let caught = std::panic::catch_unwind(|| pinned_pages_are_not_evicted(true)).is_err();
    assert!(caught, "the model let a cache that evicts pinned pages through");
}

/// A flush racing a drain that holds the page, while the page is dirtied again during that
/// writeback (the bug: the flush took the page a second time and the cache's assertion fired
/// inside a commit). The flush must wait for the writeback, write the newer bytes itself,
/// and leave every write accepted before it on the disk.
fn flush_racing_a_writeback(mutant: bool) {
    check(move || {
        let disk = Arc::new(Disk::new(1));
        let cache = PageCache::tiny(2, PAGE);
        let cache = Arc::new(if mutant { cache.with_mutant_flushing_busy_pages() } else { cache });
        cache.write(&*disk, 0, &[5u8; PAGE]).unwrap();
        let (c, d) = (Arc::clone(&cache), Arc::clone(&disk));
        let drain = loom::thread::spawn(move || {
            c.drain(&*d, EVERYTHING, 8).unwrap();
        });
        cache.write(&*disk, 0, &[6u8; PAGE]).unwrap();
        cache.flush_all(&*disk).unwrap();
        assert_eq!(uniform(&disk.page(0)), Some(6), "a write before the flush is not on disk");
        drain.join().unwrap();
        assert_eq!(cache.dirty_pages(), 0);
    });
}

#[test]
fn a_flush_never_takes_a_page_under_another_writeback() {
    flush_racing_a_writeback(false);
}

/// The kept mutant: a flush that takes dirty pages under another writeback (the old second
/// pass of `flush_blocks`) must be caught (the cache's assertion "taken for writeback twice").
#[test]
fn the_model_catches_a_flush_that_takes_busy_pages() {
    let caught = std::panic::catch_unwind(|| flush_racing_a_writeback(true)).is_err();
    assert!(caught, "the model let a flush that takes pages under writeback through");
}

/// The review's reproduction, with three threads: the flush waits for two writebacks in
/// flight; while it waits for the second, the first page is dirtied again, taken by another
/// drain, and dirtied once more during that writeback. The old second pass of
/// `flush_blocks` took that page a second time ("taken for writeback twice").
#[test]
fn a_flush_waiting_for_two_writebacks_survives_a_page_taken_again() {
    check(|| {
        let disk = Arc::new(Disk::new(2));
        let cache = Arc::new(PageCache::tiny(2, PAGE));
        cache.write(&*disk, 0, &[5u8; PAGE]).unwrap();
        cache.write(&*disk, PAGE as u64, &[5u8; PAGE]).unwrap();
        let one = Select { older_than: Duration::ZERO, above: 0 };
        let (c1, d1) = (Arc::clone(&cache), Arc::clone(&disk));
        let t1 = loom::thread::spawn(move || {
            c1.drain(&*d1, one, 1).unwrap();
            c1.write(&*d1, 0, &[6u8; PAGE]).unwrap();
            c1.drain(&*d1, one, 1).unwrap();
        });
        let (c2, d2) = (Arc::clone(&cache), Arc::clone(&disk));
        let t2 = loom::thread::spawn(move || {
            c2.drain(&*d2, one, 1).unwrap();
            c2.write(&*d2, 0, &[7u8; PAGE]).unwrap();
        });
        cache.flush_all(&*disk).unwrap();
        t1.join().unwrap();
        t2.join().unwrap();
        cache.flush_all(&*disk).unwrap();
        assert_eq!(uniform(&disk.page(0)), uniform(&read(&cache, &disk, 0)));
        assert_eq!(uniform(&disk.page(1)), Some(5));
    });
}
