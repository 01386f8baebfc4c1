//! Volumes of several members on real block devices (issue 25): loop devices over temporary
//! files, attached for the test and detached afterwards by a guard (root only; without root
//! or `losetup` each test says why it skips). A volume over a file and a loop device; the
//! file member replaced by a second loop device; a device member copied byte for byte onto a
//! file opens as that member.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::path::Path;
use std::process::Command;

use common::{LOOP_TESTS, Loop, pattern};
use vellum_engine::carrier::{
    Carrier, CarrierOptions, CreateOptions, DeviceCarrier, FileCarrier, MemoryCarrier,
};
use vellum_engine::{FormatOptions, MemberCarrier, Volume, VolumeOptions};

const MIB: u64 = 1 << 20;

/// A file of `len` zeros written for real (no holes under the loop device).
fn zero_file(path: &Path, len: u64) {
    let f = std::fs::File::create(path).unwrap();
    let status = Command::new("dd")
        .args(["if=/dev/zero", "bs=1M", "conv=notrunc,fsync", "status=none"])
        .arg(format!("of={}", path.display()))
        .arg(format!("count={}", len >> 20))
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(f.metadata().unwrap().len(), len);
}

fn dd(from: &Path, to: &Path) {
    let status = Command::new("dd")
        .args(["bs=1M", "conv=notrunc,fsync", "status=none"])
        .arg(format!("if={}", from.display()))
        .arg(format!("of={}", to.display()))
        .status()
        .unwrap();
    assert!(status.success(), "dd {} -> {}", from.display(), to.display());
}

/// A zero-filled backing file attached as a loop device (`None`: skipped, reason printed).
fn loop_of(dir: &Path, name: &str, len: u64) -> Option<Loop> {
    let backing = dir.join(name);
    zero_file(&backing, len);
    Loop::attach(&backing)
}

fn knobs() -> CarrierOptions {
    CarrierOptions { direct_io: false, write_through: true, read_only: false }
}

/// What every test writes: a file larger than member 0 (so it spans both members), a
/// directory with small files and attributes. Returns the expected contents.
fn fill(v: &Volume, big: usize) -> Vec<(String, Vec<u8>)> {
    let mut expected = Vec::new();
    let data = pattern(big, 7);
    let f = v.create_file("/big").unwrap();
    f.write_at(&data, 0).unwrap();
    f.set_attr(b"kind", b"spans both members").unwrap();
    expected.push(("/big".to_owned(), data));
    v.create_dir_all("/dir/sub").unwrap();
    for i in 0..8u64 {
        let path = format!("/dir/sub/f{i}");
        let data = pattern(10_000 + i as usize * 3_000, 100 + i);
        v.create_file(&path).unwrap().write_at(&data, 0).unwrap();
        expected.push((path, data));
    }
    v.commit().unwrap();
    expected
}

fn verify(v: &Volume, expected: &[(String, Vec<u8>)]) {
    for (path, data) in expected {
        let f = v.open_file(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(f.read_to_end().unwrap() == *data, "{path} reads back what was written");
    }
    let big = v.open_file("/big").unwrap();
    assert_eq!(big.attr(b"kind").unwrap().as_deref(), Some(&b"spans both members"[..]));
    assert_eq!(v.list("/dir/sub").unwrap().len(), 8);
}

/// The last block the file at `path` occupies lies on a member after the first, its first
/// block on member 0: the file really spans members.
fn assert_spans(v: &Volume, path: &str) {
    let members = v.members();
    let extents = v.open_file(path).unwrap().extents().unwrap();
    let member_of = |block: u64| {
        members.iter().position(|m| block >= m.first_block && block < m.first_block + m.blocks)
    };
    let on: std::collections::BTreeSet<_> = extents
        .iter()
        .flat_map(|e| [member_of(e.physical_block), member_of(e.physical_block + e.blocks - 1)])
        .collect();
    assert!(on.len() >= 2, "{path} lies on members {on:?} only: {extents:?}");
}

/// `check_members` over the members opened read-only by the paths member 0's table records.
fn check_clean(first: &Path, members: usize) {
    let ro = CarrierOptions { direct_io: false, write_through: false, read_only: true };
    let opener = |p: &Path| vellum_engine::media::open_carrier(p, ro);
    let carriers = vellum_engine::gather_members(
        vec![MemberCarrier { carrier: opener(first).unwrap(), path: Some(first.to_owned()) }],
        Some(&opener),
    )
    .unwrap();
    assert_eq!(carriers.len(), members);
    check_carriers(&carriers, members);
}

fn check_carriers(carriers: &[Box<dyn Carrier>], members: usize) {
    let refs: Vec<&dyn Carrier> = carriers.iter().map(AsRef::as_ref).collect();
    let report = vellum_engine::check_members(&refs);
    assert_eq!(report.exit_code(), 0, "{:?}", report.findings);
    assert_eq!(report.members.len(), members - 1, "every later member's slots checked");
}

#[test]
fn a_volume_over_a_file_and_a_loop_device() {
    let _serial = LOOP_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let Some(lo) = loop_of(dir.path(), "disk.img", 32 * MIB) else { return };
    let first = dir.path().join("m0.vlm");
    let create = CreateOptions {
        capacity_bytes: 32 * MIB,
        preallocate: true,
        sparse: false,
        force: false,
        progress: None,
    };
    let m0 = FileCarrier::create(&first, &create, knobs()).unwrap();
    let m1 = DeviceCarrier::open(&lo.dev, CarrierOptions::PRODUCTION).unwrap();
    let fmt =
        FormatOptions { capacity_bytes: Some(32 * MIB), ..FormatOptions::journaled(32 * MIB) };
    let v = Volume::format_members(
        MemberCarrier { carrier: Box::new(m0), path: Some(first.clone()) },
        vec![MemberCarrier { carrier: Box::new(m1), path: Some(lo.dev.clone()) }],
        &fmt,
        VolumeOptions::default(),
    )
    .unwrap();
    let members = v.members();
    assert_eq!(members.len(), 2);
    assert_eq!(members[1].medium, vellum_engine::carrier::CarrierKind::Device);
    assert_eq!(members[1].path.as_deref(), Some(lo.dev.as_path()));
    let expected = fill(&v, 45_000_000);
    assert_spans(&v, "/big");
    v.close().unwrap();

    // Reopened by member 0's path alone: the device is found by the path the table records,
    // with the production knobs (direct IO on both).
    let v = vellum_engine::media::open_volume(&first, false).unwrap();
    assert_eq!(v.members().len(), 2);
    verify(&v, &expected);
    v.create_file("/after-reopen").unwrap().write_at(b"still writable", 0).unwrap();
    v.close().unwrap();

    let v = Volume::open_path(&first, knobs(), VolumeOptions::default()).unwrap();
    verify(&v, &expected);
    assert_eq!(v.open_file("/after-reopen").unwrap().read_to_end().unwrap(), b"still writable");
    v.close().unwrap();
    check_clean(&first, 2);
}

#[test]
fn a_file_member_replaced_by_a_second_loop_device() {
    let _serial = LOOP_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let Some(lo0) = loop_of(dir.path(), "disk0.img", 32 * MIB) else { return };
    let Some(lo1) = loop_of(dir.path(), "disk1.img", 40 * MIB) else { return };
    // Member 0 on a loop device, member 1 a file added online.
    let fmt = FormatOptions { force: true, ..FormatOptions::journaled(32 * MIB) };
    let v =
        Volume::create_path(&lo0.dev, &fmt, CarrierOptions::PRODUCTION, VolumeOptions::default())
            .unwrap();
    let file = dir.path().join("m1.vlm");
    v.add_member_path(&file, Some(32 * MIB), knobs(), None).unwrap();
    assert_eq!(v.member_index(&file), Some(1));
    let expected = fill(&v, 45_000_000);
    assert_spans(&v, "/big");
    v.close().unwrap();

    let v =
        Volume::open_path(&lo0.dev, CarrierOptions::PRODUCTION, VolumeOptions::default()).unwrap();
    verify(&v, &expected);
    let k = v.member_index(&file).unwrap();
    assert_eq!(k, 1);
    let uuid_before = v.members()[1].uuid;
    let seen = std::sync::atomic::AtomicU64::new(0);
    let progress = |done: u64, _total: u64| {
        seen.store(done, std::sync::atomic::Ordering::Relaxed);
    };
    // The second device is larger than the member: the member keeps its capacity.
    v.replace_member_path(k, &lo1.dev, CarrierOptions::PRODUCTION, Some(&progress)).unwrap();
    assert!(seen.load(std::sync::atomic::Ordering::Relaxed) > 0, "progress was reported");
    let after = v.members();
    assert_eq!(after[1].path.as_deref(), Some(lo1.dev.as_path()));
    assert_eq!(after[1].medium, vellum_engine::carrier::CarrierKind::Device);
    assert_ne!(after[1].uuid, uuid_before, "the copy is a new member UUID");
    assert_eq!(after[1].blocks * 4096, 32 * MIB);
    verify(&v, &expected);
    v.create_file("/after-replace").unwrap().write_at(b"on the device", 0).unwrap();
    v.close().unwrap();
    std::fs::remove_file(&file).unwrap();

    let v = vellum_engine::media::open_volume(&lo0.dev, false).unwrap();
    assert_eq!(v.member_index(&lo1.dev), Some(1));
    verify(&v, &expected);
    assert_eq!(v.open_file("/after-replace").unwrap().read_to_end().unwrap(), b"on the device");
    v.close().unwrap();
    check_clean(&lo0.dev, 2);
}

#[test]
fn a_device_member_copied_onto_a_file_opens_as_that_member() {
    let _serial = LOOP_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("m0.vlm");
    let copy = dir.path().join("m1-copy.vlm");
    let expected = {
        let Some(lo) = loop_of(dir.path(), "disk.img", 32 * MIB) else { return };
        let fmt = FormatOptions::journaled(32 * MIB);
        let fmt = FormatOptions { capacity_bytes: Some(32 * MIB), ..fmt };
        let v = Volume::create_path(&first, &fmt, knobs(), VolumeOptions::default()).unwrap();
        v.add_member_path(&lo.dev, None, CarrierOptions::PRODUCTION, None).unwrap();
        assert_eq!(v.members()[1].blocks * 4096, 32 * MIB, "the whole device");
        let expected = fill(&v, 45_000_000);
        assert_spans(&v, "/big");
        v.close().unwrap();
        // Byte for byte onto a file, then the original goes away.
        zero_file(&copy, 32 * MIB);
        dd(&lo.dev, &copy);
        expected
    };

    // Every member given (in any order): the copy is member 1.
    let open = |path: &Path, read_only: bool| -> Box<dyn Carrier> {
        let knobs = CarrierOptions { read_only, ..knobs() };
        Box::new(FileCarrier::open(path, knobs).unwrap())
    };
    let given = vec![
        MemberCarrier { carrier: open(&copy, false), path: Some(copy.clone()) },
        MemberCarrier { carrier: open(&first, false), path: Some(first.clone()) },
    ];
    let v = Volume::open_members(given, VolumeOptions::default()).unwrap();
    assert_eq!(v.members().len(), 2);
    verify(&v, &expected);
    v.create_file("/after-copy").unwrap().write_at(b"on the copy", 0).unwrap();
    v.close().unwrap();

    let given = vec![
        MemberCarrier { carrier: open(&first, true), path: Some(first.clone()) },
        MemberCarrier { carrier: open(&copy, true), path: Some(copy.clone()) },
    ];
    let ro = VolumeOptions { read_only: true, ..VolumeOptions::default() };
    let v = Volume::open_members(given, ro).unwrap();
    verify(&v, &expected);
    assert_eq!(v.open_file("/after-copy").unwrap().read_to_end().unwrap(), b"on the copy");
    drop(v);
    check_carriers(&[open(&first, true), open(&copy, true)], 2);

    // The same bytes in memory are the same member too.
    let bytes = |p: &Path| MemoryCarrier::from_bytes(&std::fs::read(p).unwrap());
    let given = vec![
        MemberCarrier::new(Box::new(bytes(&first))),
        MemberCarrier::new(Box::new(bytes(&copy))),
    ];
    let v = Volume::open_members(given, ro).unwrap();
    verify(&v, &expected);
}
