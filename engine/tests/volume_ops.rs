//! The volume API on memory and faulty carriers: namespace, data path, attributes, counts.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use vellum_engine::carrier::{CarrierOptions, FaultyCarrier, InjectedError, MemoryCarrier};
use vellum_engine::error::{Invalid, Knob};
use vellum_engine::{Error, FileKind, FormatOptions, Volume, VolumeOptions};

fn fresh(bytes: u64) -> Volume {
    let carrier = Arc::new(MemoryCarrier::new(bytes));
    let v = Volume::format(
        Box::new(Arc::clone(&carrier)),
        &FormatOptions::default(),
        VolumeOptions::default(),
    )
    .unwrap();
    CARRIERS.with(|c| c.borrow_mut().push((v.info().uuid, carrier)));
    v
}

thread_local! {
    /// The memory carriers of the volumes this test thread made, so `reopen` can read them
    /// after `close` released the volume.
    static CARRIERS: std::cell::RefCell<Vec<(vellum_engine::format::consts::Uuid, Arc<MemoryCarrier>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The bytes of `v`'s carrier after closing it.
fn closed_bytes(v: Volume) -> Vec<u8> {
    let uuid = v.info().uuid;
    v.close().unwrap();
    CARRIERS
        .with(|c| c.borrow().iter().rev().find(|(u, _)| *u == uuid).map(|(_, m)| m.to_bytes()))
        .unwrap()
}

/// Closes `v` and reopens its bytes on a new memory carrier.
fn reopen(v: Volume) -> Volume {
    let carrier = Arc::new(MemoryCarrier::from_bytes(&closed_bytes(v)));
    let v = Volume::open(Box::new(Arc::clone(&carrier)), VolumeOptions::default()).unwrap();
    CARRIERS.with(|c| c.borrow_mut().push((v.info().uuid, carrier)));
    v
}

#[test]
fn files_and_directories_round_trip_through_reopen() {
    let v = fresh(32 << 20);
    v.create_dir("/a").unwrap();
    v.create_dir_all("/a/b/c").unwrap();
    let f = v.create_file("/a/b/c/data").unwrap();
    f.write_at(b"hello world", 0).unwrap();
    f.append(b"!").unwrap();
    f.set_attr(b"kind", b"greeting").unwrap();
    f.set_attr(b"big", &vec![7u8; 1000]).unwrap();
    drop(f);
    let name = b"/a/\xff\xfe odd \x01 name".to_vec();
    v.create_file(&name).unwrap().write_at(&[1, 2, 3], 5000).unwrap();
    let v = reopen(v);
    let f = v.open_file("/a/b/c/data").unwrap();
    assert_eq!(f.read_to_end().unwrap(), b"hello world!");
    assert_eq!(f.attr(b"kind").unwrap().unwrap(), b"greeting");
    assert_eq!(f.attr(b"big").unwrap().unwrap(), vec![7u8; 1000]);
    let odd = v.open_file(&name).unwrap();
    let content = odd.read_to_end().unwrap();
    assert_eq!(content.len(), 5003);
    assert!(content[..5000].iter().all(|&b| b == 0), "the hole reads as zeros");
    assert_eq!(&content[5000..], &[1, 2, 3]);
    let names: Vec<Vec<u8>> = v.list("/a").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, vec![b"b".to_vec(), b"\xff\xfe odd \x01 name".to_vec()], "byte order");
    assert_eq!(v.stat("/a/b").unwrap().kind, FileKind::Directory);
    v.check_invariants();
}

/// An image whose record blocks are many and scattered (files created over many commits,
/// with data between them) loads whole: its record blocks are read from a few threads at
/// once once there are many reads (`image/reader.rs`), and every file comes back with its
/// bytes.
#[test]
fn a_namespace_of_many_scattered_record_blocks_round_trips() {
    let v = fresh(64 << 20);
    v.create_dir("/many").unwrap();
    for i in 0..1500u32 {
        let f = v.create_file(format!("/many/{i}")).unwrap();
        f.write_at(&i.to_le_bytes(), 0).unwrap();
        if i % 10 == 0 {
            v.commit().unwrap();
        }
    }
    let bytes = closed_bytes(v);
    let carrier = Arc::new(MemoryCarrier::from_bytes(&bytes));
    let v = Volume::open(Box::new(Arc::clone(&carrier)), VolumeOptions::default()).unwrap();
    let opened = v.carrier_stats().reads;
    assert!(opened > 32, "only {opened} reads: the image's record blocks are not scattered");
    assert_eq!(v.list("/many").unwrap().len(), 1500);
    for i in (0..1500u32).step_by(7) {
        let f = v.open_file(format!("/many/{i}")).unwrap();
        assert_eq!(f.read_to_end().unwrap(), i.to_le_bytes());
    }
    v.check_invariants();
}

#[test]
fn names_are_byte_exact_and_validated() {
    let v = fresh(16 << 20);
    v.create_file("/Case").unwrap();
    v.create_file("/case").unwrap();
    assert_eq!(v.list("/").unwrap().len(), 2);
    for bad in ["relative", "/a//b", "/.", "/a/..", "/nul\0"] {
        assert!(matches!(v.create_file(bad), Err(Error::Invalid(_))), "{bad:?}");
    }
    let long = format!("/{}", "x".repeat(256));
    assert!(matches!(
        v.create_file(&long),
        Err(Error::Invalid(Invalid::Path | Invalid::NameTooLong { .. }))
    ));
    assert!(matches!(v.create_file("/Case"), Err(Error::AlreadyExists { .. })));
    assert!(matches!(v.create_file("/missing/x"), Err(Error::NotFound { .. })));
    assert!(matches!(v.create_file("/Case/x"), Err(Error::NotADirectory { .. })));
}

#[test]
fn rename_replaces_atomically_and_refuses_cycles() {
    let v = fresh(16 << 20);
    v.create_file("/a").unwrap().write_at(b"A", 0).unwrap();
    v.create_file("/b").unwrap().write_at(b"B", 0).unwrap();
    v.rename("/a", "/b").unwrap();
    assert!(!v.exists("/a").unwrap());
    assert_eq!(v.open_file("/b").unwrap().read_to_end().unwrap(), b"A");
    v.create_dir_all("/d/e").unwrap();
    assert!(matches!(v.rename("/d", "/d/e/f"), Err(Error::Invalid(Invalid::Rename))));
    v.create_file("/d/e/g").unwrap();
    v.create_dir("/x").unwrap();
    assert!(matches!(v.rename("/x", "/d"), Err(Error::DirectoryNotEmpty { .. })));
    v.rename("/d/e/g", "/g").unwrap();
    v.rename("/x", "/d/e").unwrap(); // onto an empty directory
    let v = reopen(v);
    assert!(v.exists("/g").unwrap());
    assert!(v.exists("/d/e").unwrap());
    assert!(!v.exists("/x").unwrap());
    v.check_invariants();
}

#[test]
fn removed_open_files_keep_working_until_closed() {
    let v = fresh(16 << 20);
    let f = v.create_file("/f").unwrap();
    f.write_at(&vec![9u8; 100_000], 0).unwrap();
    v.commit().unwrap();
    let free_before = v.info().free_blocks;
    v.remove("/f").unwrap();
    assert!(!v.exists("/f").unwrap());
    f.append(b"more").unwrap();
    assert_eq!(f.read_to_end().unwrap().len(), 100_004);
    v.commit().unwrap();
    v.commit().unwrap();
    // The file holds 25 blocks; removing it may shrink the metadata by a few.
    assert!(v.info().free_blocks < free_before + 20, "blocks of an open removed file are not free");
    drop(f);
    v.commit().unwrap();
    v.commit().unwrap();
    assert!(v.info().free_blocks > free_before + 20, "closing the last handle frees the blocks");
    v.check_invariants();
}

#[test]
fn renamed_open_file_keeps_its_handle() {
    let v = fresh(16 << 20);
    let f = v.create_file("/old").unwrap();
    v.rename("/old", "/new").unwrap();
    f.write_at(b"x", 0).unwrap();
    assert_eq!(v.open_file("/new").unwrap().read_to_end().unwrap(), b"x");
}

#[test]
fn set_len_truncates_and_extends_with_zeros() {
    let v = fresh(16 << 20);
    let f = v.create_file("/f").unwrap();
    f.write_at(&[0xAA; 10_000], 0).unwrap();
    f.set_len(5).unwrap();
    f.set_len(9000).unwrap();
    let c = f.read_to_end().unwrap();
    assert_eq!(&c[..5], &[0xAA; 5]);
    assert!(
        c[5..].iter().all(|&b| b == 0),
        "bytes past a truncation read as zeros after extension"
    );
    f.set_len(4097).unwrap();
    f.write_at(b"z", 6000).unwrap();
    let c = f.read_to_end().unwrap();
    assert_eq!(c.len(), 6001);
    assert!(c[5..6000].iter().all(|&b| b == 0));
    assert_eq!(f.metadata().unwrap().allocated_blocks, 2);
    v.check_invariants();
}

#[test]
fn preallocated_ranges_are_written_and_overwrites_need_no_commit() {
    let (v, _) = faulty_volume(true);
    let f = v.create_file("/seg").unwrap();
    f.preallocate(0, 1 << 20).unwrap();
    assert_eq!(f.metadata().unwrap().size, 1 << 20);
    assert_eq!(f.metadata().unwrap().allocated_blocks, 256);
    assert_eq!(f.extents().unwrap().len(), 1, "one contiguous extent");
    v.commit().unwrap();
    let before = v.carrier_stats();
    f.write_at(&[5u8; 4096], 8192).unwrap();
    let d = v.carrier_stats() - before;
    assert_eq!(
        (d.writes, d.durable_writes, d.barriers),
        (1, 1, 0),
        "one write-through write, no flush"
    );
    let before = v.carrier_stats();
    v.sync().unwrap();
    assert_eq!(
        v.carrier_stats() - before,
        vellum_engine::carrier::StatsSnapshot::default(),
        "nothing left to make durable"
    );
}

#[test]
fn a_write_over_contiguous_blocks_is_one_carrier_write_of_the_callers_bytes() {
    let v = fresh(64 << 20);
    let f = v.create_file("/big").unwrap();
    f.preallocate(0, 8 << 20).unwrap();
    v.commit().unwrap();
    let data: Vec<u8> = (0..(3 << 20) + 100).map(|i: u32| (i % 253) as u8).collect();
    let before = v.carrier_stats();
    f.write_at(&data, 4096 * 7 + 13).unwrap();
    let d = v.carrier_stats() - before;
    assert_eq!(d.writes, 1, "3 MiB over 769 contiguous blocks: one carrier write");
    assert_eq!(d.written_bytes, data.len() as u64, "exactly the caller's bytes");
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 4096 * 7 + 13).unwrap();
    assert!(back == data);
}

#[test]
fn preallocation_over_reused_blocks_reads_as_zeros() {
    // Blocks that held data are freed and preallocated again, in runs far longer than one
    // zero-fill chunk: every byte must come back zero. The volume is small enough that the
    // new blocks are mostly the old ones.
    let v = fresh(26 << 20);
    let f = v.create_file("/old").unwrap();
    f.write_at(&vec![0xEE; 20 << 20], 0).unwrap();
    drop(f);
    v.remove("/old").unwrap();
    v.commit().unwrap();
    let g = v.create_file("/new").unwrap();
    g.preallocate(0, 20 << 20).unwrap();
    let got = g.read_to_end().unwrap();
    assert_eq!(got.len(), 20 << 20);
    assert!(got.iter().all(|&b| b == 0), "stale bytes under a preallocation");
    drop(g);
    let v = reopen(v);
    let got = v.open_file("/new").unwrap().read_to_end().unwrap();
    assert!(got.iter().all(|&b| b == 0), "stale bytes after reopen");
}

#[test]
fn every_commit_takes_exactly_two_barriers() {
    // Write-through: data is durable when written, and a commit is its two barriers.
    let (v, _) = faulty_volume(true);
    for i in 0..20 {
        let f = v.create_file(format!("/f{i}")).unwrap();
        f.write_at(&vec![i as u8; 3000 * i], 0).unwrap();
        f.set_attr(b"i", &[i as u8]).unwrap();
        let before = v.carrier_stats();
        v.commit().unwrap();
        assert_eq!((v.carrier_stats() - before).barriers, 2, "commit {i}");
    }
    let before = v.carrier_stats();
    v.commit().unwrap();
    assert_eq!((v.carrier_stats() - before).barriers, 2, "an empty commit too");
}

#[test]
fn buffered_data_gets_its_own_barrier_before_the_commit() {
    let (v, _) = faulty_volume(false);
    let f = v.create_file("/f").unwrap();
    v.commit().unwrap();
    f.write_at(&[1u8; 10_000], 0).unwrap();
    let before = v.carrier_stats();
    v.commit().unwrap();
    assert_eq!((v.carrier_stats() - before).barriers, 3, "data barrier, then the commit's two");
    let before = v.carrier_stats();
    v.commit().unwrap();
    assert_eq!((v.carrier_stats() - before).barriers, 2, "nothing outstanding: two");
}

#[test]
fn a_full_volume_says_so_and_recovers_after_removal() {
    let v = fresh(4 << 20);
    let f = v.create_file("/big").unwrap();
    let chunk = vec![1u8; 64 << 10];
    let mut written = 0u64;
    let err = loop {
        match f.append(&chunk) {
            Ok(_) => written += chunk.len() as u64,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::NoSpace), "{err:?}");
    assert!(written > 3 << 20);
    assert!(!v.is_poisoned(), "running out of space is not a carrier failure");
    v.commit().unwrap();
    drop(f);
    v.remove("/big").unwrap();
    v.commit().unwrap();
    v.commit().unwrap();
    let f = v.create_file("/again").unwrap();
    f.append(&chunk).unwrap();
    v.commit().unwrap();
}

#[test]
fn many_files_grow_the_tables_without_a_limit() {
    let v = fresh(64 << 20);
    for i in 0..3000 {
        v.create_file(format!("/f{i:05}")).unwrap();
    }
    v.commit().unwrap();
    let v = reopen(v);
    assert_eq!(v.list("/").unwrap().len(), 3000);
    for i in (0..3000).step_by(2) {
        v.remove(format!("/f{i:05}")).unwrap();
    }
    let v = reopen(v);
    assert_eq!(v.list("/").unwrap().len(), 1500);
    v.check_invariants();
}

fn faulty_volume(write_through: bool) -> (Volume, Arc<FaultyCarrier>) {
    let carrier = Arc::new(FaultyCarrier::new(16 << 20, write_through));
    let v = Volume::format(
        Box::new(Arc::clone(&carrier)),
        &FormatOptions::default(),
        VolumeOptions::default(),
    )
    .unwrap();
    (v, carrier)
}

#[test]
fn a_failed_write_poisons_the_volume() {
    for errno in [libc::EIO, libc::ENOSPC] {
        let (v, faulty) = faulty_volume(true);
        let f = v.create_file("/f").unwrap();
        f.preallocate(0, 65536).unwrap();
        v.commit().unwrap();
        faulty.inject_error(InjectedError { at_op: faulty.ops(), errno });
        let e = f.write_at(b"x", 0).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        assert!(v.is_poisoned());
        assert!(matches!(f.write_at(b"x", 0), Err(Error::Poisoned)));
        assert!(matches!(v.commit(), Err(Error::Poisoned)));
        assert!(matches!(v.list("/"), Err(Error::Poisoned)));
    }
}

#[test]
fn a_failed_barrier_poisons_and_is_never_retried_as_success() {
    let (v, faulty) = faulty_volume(false);
    v.create_file("/f").unwrap();
    let before = faulty.barriers_done();
    // The commit writes root/record/spine/bitmap blocks and a superblock before its first
    // barrier; fail whichever operation is the first barrier by failing every op in turn
    // until a barrier count stops advancing.
    let start = faulty.ops();
    faulty.inject_error(InjectedError { at_op: start + 200, errno: libc::EIO });
    let mut probe_ops = 0;
    {
        // Count the ops of one commit on a copy, to find where the first barrier falls.
        let copy = Arc::new(FaultyCarrier::from_bytes(faulty.current_bytes(), false));
        let cv = Volume::open(Box::new(Arc::clone(&copy)), VolumeOptions::default()).unwrap();
        cv.create_file("/f2").unwrap();
        let (ops0, b0) = (copy.ops(), copy.barriers_done());
        cv.commit().unwrap();
        assert_eq!(copy.barriers_done() - b0, 2);
        probe_ops += copy.ops() - ops0;
    }
    assert!(probe_ops >= 4);
    // The second-to-last op of a commit is its second superblock write; the one before that
    // is the first barrier.
    faulty.inject_error(InjectedError { at_op: start + probe_ops - 3, errno: libc::EIO });
    assert!(matches!(v.commit(), Err(Error::Io { .. })));
    assert_eq!(faulty.barriers_done(), before, "the failed barrier is not counted");
    assert!(matches!(v.commit(), Err(Error::Poisoned)));
    assert!(matches!(v.sync(), Err(Error::Poisoned)));
}

#[test]
fn knobs_without_meaning_on_memory_are_refused() {
    let e = MemoryCarrier::with_options(1 << 20, CarrierOptions::PRODUCTION).unwrap_err();
    assert!(matches!(e, Error::KnobMeaningless { knob: Knob::DirectIo, medium: "memory" }));
    let wt = CarrierOptions { write_through: true, ..CarrierOptions::BUFFERED };
    let e = MemoryCarrier::with_options(1 << 20, wt).unwrap_err();
    assert!(matches!(e, Error::KnobMeaningless { knob: Knob::WriteThrough, .. }));
    assert!(MemoryCarrier::with_options(1 << 20, CarrierOptions::BUFFERED).is_ok());
}

#[test]
fn read_only_open_writes_nothing() {
    let v = fresh(16 << 20);
    v.create_file("/f").unwrap().write_at(b"data", 0).unwrap();
    let bytes = closed_bytes(v);
    let ro = VolumeOptions { read_only: true, ..VolumeOptions::default() };
    let v = Volume::open(Box::new(MemoryCarrier::from_bytes(&bytes)), ro).unwrap();
    assert_eq!(v.carrier_stats().writes, 0);
    assert!(matches!(v.create_file("/g"), Err(Error::ReadOnly)));
    assert_eq!(v.open_file("/f").unwrap().read_to_end().unwrap(), b"data");
    assert!(matches!(v.open_file("/f").unwrap().write_at(b"x", 0), Err(Error::ReadOnly)));
}

#[test]
fn handles_fail_after_close() {
    let v = fresh(16 << 20);
    let f = v.create_file("/f").unwrap();
    v.clone().close().unwrap();
    assert!(matches!(f.write_at(b"x", 0), Err(Error::Closed)));
    assert!(matches!(v.list("/"), Err(Error::Closed)));
}

#[test]
fn concurrent_writers_readers_and_commits_in_both_concurrency_modes() {
    use vellum_engine::WriteConcurrency;
    for concurrency in [WriteConcurrency::Serial, WriteConcurrency::ParallelSegments] {
        let carrier = Arc::new(MemoryCarrier::new(64 << 20));
        let opts = VolumeOptions { concurrency, ..VolumeOptions::default() };
        let v = Volume::format(Box::new(Arc::clone(&carrier)), &FormatOptions::default(), opts)
            .unwrap();
        let files: Vec<_> = (0..4).map(|i| v.create_file(format!("/w{i}")).unwrap()).collect();
        for f in &files {
            f.preallocate(0, 1 << 20).unwrap();
        }
        v.commit().unwrap();
        std::thread::scope(|s| {
            for (i, f) in files.iter().enumerate() {
                s.spawn(move || {
                    for k in 0..256u64 {
                        // Pre-allocated half, then appends past it that allocate.
                        let chunk = vec![(i as u8) ^ (k as u8); 4096 + (k as usize % 3) * 100];
                        f.write_at(&chunk, k * 8192).unwrap();
                        let mut back = vec![0u8; chunk.len()];
                        f.read_exact_at(&mut back, k * 8192).unwrap();
                        assert_eq!(back, chunk);
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..20 {
                    v.commit().unwrap();
                }
            });
        });
        v.check_invariants();
        drop(files);
        let v = reopen_shared(v, &carrier);
        for i in 0..4u8 {
            let f = v.open_file(format!("/w{i}")).unwrap();
            for k in 0..256u64 {
                let len = 4096 + (k as usize % 3) * 100;
                let mut back = vec![0u8; len];
                f.read_exact_at(&mut back, k * 8192).unwrap();
                assert!(
                    back.iter().all(|&b| b == i ^ (k as u8)),
                    "{concurrency:?} file {i} chunk {k}"
                );
            }
        }
    }
}

fn reopen_shared(v: Volume, carrier: &Arc<MemoryCarrier>) -> Volume {
    v.close().unwrap();
    Volume::open(Box::new(MemoryCarrier::from_bytes(&carrier.to_bytes())), VolumeOptions::default())
        .unwrap()
}
