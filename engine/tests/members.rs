//! Volumes of several members (FORMAT.md, "Members"): format, add online, open by member 0's
//! path, replace by copy, and the refusals.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use vellum_engine::carrier::CarrierOptions;
use vellum_engine::{FormatOptions, Volume, VolumeOptions};

const MIB: u64 = 1 << 20;

fn knobs() -> CarrierOptions {
    CarrierOptions { direct_io: false, write_through: true, read_only: false }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
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
        carriers.iter().map(|c| c.as_ref()).collect();
    let report = vellum_engine::check_members(&refs);
    assert_eq!(report.exit_code(), 0, "{:?}", report.findings);
    assert_eq!(report.members.len(), 1);
}
