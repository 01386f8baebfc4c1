//! The device carrier on a real block device: a loop device over a temporary file, attached
//! for the test and detached afterwards (root only; without root the tests say why they
//! skip). Also: the same bytes are the volume on every carrier (file -> device -> file by dd).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::path::Path;
use std::process::Command;

use common::{LOOP_TESTS, Loop};
use vellum_engine::carrier::{Carrier, CarrierOptions, DeviceCarrier};
use vellum_engine::{Error, FormatOptions, Volume, VolumeOptions};

/// Who holds `dev` (for a failure message): the kernel's lock table and the processes with
/// the device open.
fn holders(dev: &Path) -> String {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let mut open_by = Vec::new();
    for proc in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        for fd in std::fs::read_dir(proc.path().join("fd")).into_iter().flatten().flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|t| t == dev) {
                let comm = std::fs::read_to_string(proc.path().join("comm")).unwrap_or_default();
                open_by.push(format!("{} ({})", proc.file_name().to_string_lossy(), comm.trim()));
            }
        }
    }
    format!("{} open by {open_by:?}; /proc/locks:\n{locks}", dev.display())
}

fn zero_file(path: &Path, len: u64) {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(len).unwrap();
    // Write the zeros for real, so the loop device's backing file has no holes.
    let status = Command::new("dd")
        .args(["if=/dev/zero", "bs=1M", "conv=notrunc,fsync", "status=none"])
        .arg(format!("of={}", path.display()))
        .arg(format!("count={}", len >> 20))
        .status()
        .unwrap();
    assert!(status.success());
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

#[test]
fn a_volume_on_a_loop_device() {
    let _serial = LOOP_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("disk.img");
    zero_file(&backing, 48 << 20);
    let Some(lo) = Loop::attach(&backing) else { return };

    let probe = DeviceCarrier::open(&lo.dev, CarrierOptions::PRODUCTION).unwrap();
    let g = probe.geometry();
    assert_eq!(g.len_bytes, 48 << 20, "size from BLKGETSIZE64");
    assert!(g.logical_sector >= 512 && g.physical_sector >= g.logical_sector);
    assert!(probe.options().direct_io, "direct IO is forced on devices");
    assert!(probe.looks_empty().unwrap());
    drop(probe);

    let v = Volume::create_path(
        &lo.dev,
        &FormatOptions::default(),
        CarrierOptions::PRODUCTION,
        VolumeOptions::default(),
    )
    .unwrap();
    assert_eq!(v.info().layout.capacity_bytes(), 48 << 20, "the whole device by default");
    let f = v.create_file("/log").unwrap();
    f.preallocate(0, 1 << 20).unwrap();
    v.commit().unwrap();
    let before = v.carrier_stats();
    let block = vellum_engine::carrier::AlignedBuf::zeroed(4096, 4096);
    f.write_at(block.as_slice(), 0).unwrap();
    let d = v.carrier_stats() - before;
    assert_eq!(
        (d.writes, d.durable_writes, d.barriers),
        (1, 1, 0),
        "write-through append: one write, no flush"
    );
    f.write_at(b"unaligned bytes", 12_345).unwrap();

    let e = Volume::open_path(&lo.dev, CarrierOptions::PRODUCTION, VolumeOptions::default())
        .unwrap_err();
    assert!(matches!(e, Error::Locked { .. } | Error::DeviceBusy { .. }), "{e:?}");
    drop(f);
    v.close().unwrap();

    let v = Volume::open_path(&lo.dev, CarrierOptions::PRODUCTION, VolumeOptions::default())
        .unwrap_or_else(|e| panic!("{e:?}: {}", holders(&lo.dev)));
    let mut got = [0u8; 15];
    v.open_file("/log").unwrap().read_exact_at(&mut got, 12_345).unwrap();
    assert_eq!(&got, b"unaligned bytes");
    v.close().unwrap();

    // A device with a volume on it does not look empty: formatting needs force.
    let e = Volume::create_path(
        &lo.dev,
        &FormatOptions::default(),
        CarrierOptions::PRODUCTION,
        VolumeOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::NotEmpty { .. }), "{e:?}: {}", holders(&lo.dev));
    let forced = FormatOptions { force: true, ..FormatOptions::default() };
    Volume::create_path(&lo.dev, &forced, CarrierOptions::PRODUCTION, VolumeOptions::default())
        .unwrap()
        .close()
        .unwrap();
}

#[test]
fn the_same_bytes_open_on_file_and_device_carriers() {
    let _serial = LOOP_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vol.vlm");
    let fmt = FormatOptions { capacity_bytes: Some(32 << 20), ..FormatOptions::default() };
    let v = Volume::create_path(&file, &fmt, CarrierOptions::PRODUCTION, VolumeOptions::default())
        .unwrap();
    v.create_dir("/dir").unwrap();
    let content: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let f = v.create_file("/dir/data").unwrap();
    f.write_at(&content, 0).unwrap();
    f.set_attr(b"origin", b"file carrier").unwrap();
    drop(f);
    v.close().unwrap();

    let backing = dir.path().join("disk.img");
    zero_file(&backing, 32 << 20);
    let Some(lo) = Loop::attach(&backing) else { return };
    dd(&file, &lo.dev);
    let v =
        Volume::open_path(&lo.dev, CarrierOptions::PRODUCTION, VolumeOptions::default()).unwrap();
    let f = v.open_file("/dir/data").unwrap();
    assert_eq!(f.read_to_end().unwrap(), content, "the device reads what the file held");
    assert_eq!(f.attr(b"origin").unwrap().unwrap(), b"file carrier");
    v.create_file("/from-device").unwrap().write_at(b"written on the device", 0).unwrap();
    drop(f);
    v.close().unwrap();

    let back = dir.path().join("back.vlm");
    zero_file(&back, 32 << 20);
    dd(&lo.dev, &back);
    drop(lo);
    let v = Volume::open_path(&back, CarrierOptions::PRODUCTION, VolumeOptions::default()).unwrap();
    assert_eq!(v.open_file("/dir/data").unwrap().read_to_end().unwrap(), content);
    assert_eq!(
        v.open_file("/from-device").unwrap().read_to_end().unwrap(),
        b"written on the device"
    );
    v.close().unwrap();
}
