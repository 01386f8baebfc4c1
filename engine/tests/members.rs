//! Volumes of several members (FORMAT.md, "Members"): format, add online, open by member 0's
//! path, replace by copy, and the refusals.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::pattern;
use vellum_engine::carrier::{Carrier, CarrierOptions, MemoryCarrier};
use vellum_engine::error::MemberProblem;
use vellum_engine::{Error, FormatOptions, MemberCarrier, Volume, VolumeOptions, check_members};

const MIB: u64 = 1 << 20;

fn knobs() -> CarrierOptions {
    CarrierOptions { direct_io: false, write_through: true, read_only: false }
}

fn open(path: &Path) -> Volume {
    Volume::open_path(path, knobs(), VolumeOptions::default()).unwrap()
}

#[test]
fn a_file_spread_over_an_added_member_reopens_and_checks_clean() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (dir.path().join("a.vlm"), dir.path().join("b.vlm"), dir.path().join("c.vlm"));
    let fmt = FormatOptions::journaled(32 * MIB);
    let fmt = FormatOptions { capacity_bytes: Some(32 * MIB), ..fmt };
    let v = Volume::create_path(&a, &fmt, knobs(), VolumeOptions::default()).unwrap();
    v.add_member_path(&b, Some(32 * MIB), knobs(), None).unwrap();
    assert_eq!(v.members().len(), 2);
    let data = pattern(45_000_000, 7);
    let f = v.create_file("/f").unwrap();
    f.write_at(&data, 0).unwrap();
    v.commit().unwrap();
    v.close().unwrap();

    let v = open(&a);
    assert_eq!(v.members().len(), 2);
    assert_eq!(v.open_file("/f").unwrap().read_to_end().unwrap(), data);
    v.close().unwrap();

    let v = open(&a);
    let k = v.member_index(&b).unwrap();
    assert_eq!(k, 1);
    // Member 0, or a member that does not exist, is refused before anything is created.
    let x = dir.path().join("x.vlm");
    assert!(v.replace_member_path(0, &x, knobs(), None).is_err());
    assert!(v.replace_member_path(5, &x, knobs(), None).is_err());
    assert!(!x.exists());
    v.replace_member_path(k, &c, knobs(), None).unwrap();
    assert_eq!(v.open_file("/f").unwrap().read_to_end().unwrap(), data);
    v.close().unwrap();
    std::fs::remove_file(&b).unwrap();

    let v = open(&a);
    assert_eq!(v.open_file("/f").unwrap().read_to_end().unwrap(), data);
    v.close().unwrap();

    let ro = CarrierOptions { direct_io: false, write_through: false, read_only: true };
    let first = vellum_engine::carrier::FileCarrier::open(&a, ro).unwrap();
    let opener = |p: &Path| -> vellum_engine::Result<Box<dyn vellum_engine::carrier::Carrier>> {
        Ok(Box::new(vellum_engine::carrier::FileCarrier::open(p, ro)?))
    };
    let carriers = vellum_engine::gather_members(
        vec![vellum_engine::MemberCarrier { carrier: Box::new(first), path: Some(a.clone()) }],
        Some(&opener),
    )
    .unwrap();
    let refs: Vec<&dyn vellum_engine::carrier::Carrier> =
        carriers.iter().map(AsRef::as_ref).collect();
    let report = vellum_engine::check_members(&refs);
    assert_eq!(report.exit_code(), 0, "{:?}", report.findings);
    assert_eq!(report.members.len(), 1);
}

fn memory(bytes: u64) -> Arc<MemoryCarrier> {
    Arc::new(MemoryCarrier::new(bytes))
}

fn given(carriers: &[&Arc<MemoryCarrier>]) -> Vec<MemberCarrier> {
    carriers.iter().map(|c| MemberCarrier::new(Box::new(Arc::clone(c)))).collect()
}

fn problem(e: Error) -> MemberProblem {
    match e {
        Error::Member { problem, .. } => problem,
        other => panic!("expected a member error, got {other:?}"),
    }
}

fn format_two(journal: bool) -> (Arc<MemoryCarrier>, Arc<MemoryCarrier>, Volume) {
    let (a, b) = (memory(16 * MIB), memory(16 * MIB));
    let fmt = if journal { FormatOptions::journaled(16 * MIB) } else { FormatOptions::default() };
    let mut g = given(&[&a, &b]);
    let second = g.pop().unwrap();
    let v = Volume::format_members(g.pop().unwrap(), vec![second], &fmt, VolumeOptions::default())
        .unwrap();
    (a, b, v)
}

#[test]
fn members_given_in_any_order_open_and_a_journal_replays_across_them() {
    let (a, b, v) = format_two(true);
    let data = pattern(24 * MIB as usize, 3);
    v.create_file("/big").unwrap().write_at(&data, 0).unwrap();
    v.commit().unwrap();
    let extents = v.open_file("/big").unwrap();
    drop(extents);
    // Dropped without close: like a power cut after the commit (the batch is in the ring).
    drop(v);
    let v = Volume::open_members(given(&[&b, &a]), VolumeOptions::default()).unwrap();
    assert!(v.open_report().journal.is_some_and(|j| j.batches > 0), "replayed across members");
    assert_eq!(v.open_file("/big").unwrap().read_to_end().unwrap(), data);
    let info = v.info();
    assert_eq!(info.members.len(), 2);
    assert_eq!(info.members[1].first_block, info.members[0].max_blocks);
    v.close().unwrap();
    let refs: Vec<&dyn Carrier> = vec![&*a, &*b];
    assert_eq!(check_members(&refs).exit_code(), 0);
}

#[test]
fn open_names_a_missing_foreign_duplicate_or_later_member() {
    let (a, b, v) = format_two(false);
    v.close().unwrap();
    let e = Volume::open_members(given(&[&a]), VolumeOptions::default()).unwrap_err();
    assert!(matches!(problem(e), MemberProblem::Missing { index: 1, .. }));
    let e = Volume::open_members(given(&[&b]), VolumeOptions::default()).unwrap_err();
    assert!(matches!(problem(e), MemberProblem::NotFirst { index: 1, .. }));
    let e = Volume::open(Box::new(Arc::clone(&b)), VolumeOptions::default()).unwrap_err();
    assert!(matches!(problem(e), MemberProblem::NotFirst { index: 1, .. }));
    // The checker of a later member alone says so, and of member 0 alone that one is missing.
    assert_ne!(vellum_engine::check(&*b).exit_code(), 0);
    assert_ne!(vellum_engine::check(&*a).exit_code(), 0);
    let e = Volume::open_members(given(&[&a, &b, &b]), VolumeOptions::default()).unwrap_err();
    assert!(matches!(problem(e), MemberProblem::AlreadyMember { index: 1 }));
    let (_, other, w) = format_two(false);
    w.close().unwrap();
    let e = Volume::open_members(given(&[&a, &other]), VolumeOptions::default()).unwrap_err();
    assert!(matches!(problem(e), MemberProblem::OtherVolume { .. }));
    let blank = memory(16 * MIB);
    let e = Volume::open_members(given(&[&a, &blank]), VolumeOptions::default()).unwrap_err();
    assert!(matches!(problem(e), MemberProblem::NotAMember));
    // And the volume still opens whole.
    Volume::open_members(given(&[&a, &b]), VolumeOptions::default()).unwrap().close().unwrap();
}

#[test]
fn bad_additions_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.vlm"), dir.path().join("b.vlm"));
    let fmt = FormatOptions { capacity_bytes: Some(32 * MIB), ..FormatOptions::default() };
    let v = Volume::create_path(&a, &fmt, knobs(), VolumeOptions::default()).unwrap();
    let other = dir.path().join("other.vlm");
    Volume::create_path(&other, &fmt, knobs(), VolumeOptions::default()).unwrap().close().unwrap();
    let generation = v.generation();
    let refuse = |path: &Path, size: u64| {
        let e = v.add_member_path(path, Some(size), knobs(), None).unwrap_err();
        assert_eq!(v.members().len(), 1, "{e}");
        assert_eq!(v.generation(), generation, "{e}");
        e
    };
    // Smaller than 64 blocks.
    assert!(matches!(problem(refuse(&b, 100 << 10)), MemberProblem::TooSmall { .. }));
    assert!(!b.exists(), "a refused member leaves no file behind");
    // A member of another volume.
    assert!(matches!(problem(refuse(&other, 32 * MIB)), MemberProblem::OtherVolume { .. }));
    // The volume itself.
    assert!(matches!(problem(refuse(&a, 32 * MIB)), MemberProblem::AlreadyMember { index: 0 }));
    // The same path twice.
    v.add_member_path(&b, Some(32 * MIB), knobs(), None).unwrap();
    let generation = v.generation();
    let e = v.add_member_path(&b, Some(32 * MIB), knobs(), None).unwrap_err();
    assert!(matches!(problem(e), MemberProblem::AlreadyMember { index: 1 }));
    assert_eq!((v.members().len(), v.generation()), (2, generation));
    v.close().unwrap();
    // The other volume was not touched.
    Volume::open_path(&other, knobs(), VolumeOptions::default()).unwrap().close().unwrap();
}

#[test]
fn a_replaced_members_old_carrier_is_stale() {
    let (a, b, v) = format_two(false);
    let data = pattern(20 * MIB as usize, 9);
    v.create_file("/f").unwrap().write_at(&data, 0).unwrap();
    v.commit().unwrap();
    let c = memory(16 * MIB);
    v.replace_member(1, MemberCarrier::new(Box::new(Arc::clone(&c))), None).unwrap();
    assert_eq!(v.open_file("/f").unwrap().read_to_end().unwrap(), data);
    // Writes after the switch land on the copy.
    v.open_file("/f").unwrap().write_at(b"after", 19 * MIB).unwrap();
    v.close().unwrap();
    let e = Volume::open_members(given(&[&a, &b]), VolumeOptions::default()).unwrap_err();
    assert!(matches!(problem(e), MemberProblem::Stale { index: 1 }));
    let v = Volume::open_members(given(&[&a, &c]), VolumeOptions::default()).unwrap();
    let back = v.open_file("/f").unwrap().read_to_end().unwrap();
    assert_eq!(&back[19 * MIB as usize..19 * MIB as usize + 5], b"after");
    // Member 0 is not replaced online.
    let d = memory(16 * MIB);
    let e = v.replace_member(0, MemberCarrier::new(Box::new(d)), None).unwrap_err();
    assert!(matches!(problem(e), MemberProblem::Missing { index: 0, .. }));
    v.close().unwrap();
}

#[test]
fn a_growing_volume_grows_member_zero_to_its_cap_before_a_member_joins() {
    let a = memory(64 * MIB);
    let fmt = FormatOptions {
        capacity_bytes: Some(8 * MIB),
        grow_max_bytes: Some(32 * MIB),
        ..FormatOptions::default()
    };
    let v = Volume::format(Box::new(Arc::clone(&a)), &fmt, VolumeOptions::default()).unwrap();
    assert_eq!(v.members()[0].blocks, 2048);
    let b = memory(16 * MIB);
    v.add_member(MemberCarrier::new(Box::new(Arc::clone(&b))), None).unwrap();
    let m = v.members();
    assert_eq!((m[0].blocks, m[0].max_blocks, m[1].first_block), (8192, 8192, 8192));
    let data = pattern(40 * MIB as usize, 5);
    v.create_file("/f").unwrap().write_at(&data, 0).unwrap();
    v.close().unwrap();
    let v = Volume::open_members(given(&[&a, &b]), VolumeOptions::default()).unwrap();
    assert_eq!(v.open_file("/f").unwrap().read_to_end().unwrap(), data);
    v.close().unwrap();
}

#[test]
fn a_member_joins_while_a_writer_keeps_writing() {
    let (_, _, v) = format_two(false);
    v.create_file("/w").unwrap().preallocate(0, 4 * MIB).unwrap();
    v.commit().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (f, stop) = (v.open_file("/w").unwrap(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                f.write_at(&n.to_le_bytes(), (n % 1024) * 4096).unwrap();
                n += 1;
            }
            n
        })
    };
    let c = memory(16 * MIB);
    v.add_member(MemberCarrier::new(Box::new(c)), None).unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(writer.join().unwrap() > 0);
    assert_eq!(v.members().len(), 3);
    let big = pattern(30 * MIB as usize, 11);
    v.create_file("/big").unwrap().write_at(&big, 0).unwrap();
    v.commit().unwrap();
    assert_eq!(v.open_file("/big").unwrap().read_to_end().unwrap(), big);
    v.check_invariants();
    v.close().unwrap();
}

/// Found by review: a refused add removed the file at the new member's path when that file
/// existed (empty) before the call: only a file the call created may go again. A thin volume
/// refuses members before anything is created.
#[test]
fn a_refused_add_keeps_an_existing_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.vlm"), dir.path().join("b.vlm"));
    let fmt = FormatOptions {
        capacity_bytes: Some(16 * MIB),
        preallocate: false,
        ..FormatOptions::default()
    };
    let v = Volume::create_path(&a, &fmt, knobs(), VolumeOptions::default()).unwrap();
    std::fs::write(&b, b"").unwrap();
    let err = v.add_member_path(&b, Some(16 * MIB), knobs(), None).unwrap_err();
    assert!(matches!(err, Error::Member { problem: MemberProblem::NotPreallocated, .. }), "{err}");
    assert!(b.exists(), "the caller's file is still there");
    assert_eq!(std::fs::metadata(&b).unwrap().len(), 0, "and untouched");
    let c = dir.path().join("c.vlm");
    assert!(v.add_member_path(&c, Some(16 * MIB), knobs(), None).is_err());
    assert!(!c.exists(), "nothing created for a refused add");
    v.close().unwrap();
}
