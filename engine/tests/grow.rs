//! Auto-grow through the public API: the bound doubles when the allocator runs out, up to the
//! cap; a growth step is one superblock flip that changes nothing else (the commit id stays);
//! at the cap a write fails with `NoSpace` and the volume stays usable. Counts decide.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use vellum_engine::carrier::MemoryCarrier;
use vellum_engine::{Error, FormatOptions, Volume, VolumeOptions, check};

const CAP: u64 = 8 << 20;

fn growing(journal: bool) -> (Volume, Arc<MemoryCarrier>) {
    let carrier = Arc::new(MemoryCarrier::new(CAP));
    let fmt = FormatOptions {
        capacity_bytes: Some(1 << 20),
        grow_max_bytes: Some(CAP),
        journal,
        journal_bytes: if journal { 16 << 12 } else { 0 },
        ..FormatOptions::default()
    };
    let v = Volume::format(Box::new(Arc::clone(&carrier)), &fmt, VolumeOptions::default()).unwrap();
    (v, carrier)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect()
}

#[test]
fn the_bound_doubles_and_a_growth_step_commits_nothing_else() {
    for journal in [false, true] {
        let (v, carrier) = growing(journal);
        let before = v.info().layout;
        assert_eq!(before.total_blocks, 256);
        assert_eq!(before.max_blocks, 2048);
        v.create_file("/committed").unwrap().write_at(b"durable", 0).unwrap();
        v.commit().unwrap();
        let (generation, id) = (v.generation(), v.commit_id());
        let big = pattern(3 << 20, 1);
        v.create_file("/big").unwrap().write_at(&big, 0).unwrap();
        let after = v.info().layout;
        assert_eq!(after.total_blocks, 1024, "256 -> 512 -> 1024 blocks");
        assert_eq!(after.data.end(), 1024);
        assert!(v.generation() > generation, "each step is a superblock flip");
        assert_eq!(v.commit_id(), id, "growth commits nothing of the namespace");
        // A power cut now: the grown bound is durable, the uncommitted file is not.
        let bytes = carrier.to_bytes();
        drop(v);
        let v = Volume::open(Box::new(MemoryCarrier::from_bytes(&bytes)), VolumeOptions::default())
            .unwrap();
        assert_eq!(v.info().layout.total_blocks, 1024);
        assert_eq!(v.open_file("/committed").unwrap().read_to_end().unwrap(), b"durable");
        assert!(!v.exists("/big").unwrap());
        v.create_file("/big").unwrap().write_at(&big, 0).unwrap();
        v.close().unwrap();
        let image = MemoryCarrier::from_bytes(&bytes);
        drop(image);
        let report = check(&MemoryCarrier::from_bytes(&carrier_after(&bytes, &big)));
        assert_eq!(report.exit_code(), 0, "journal {journal}: {:?}", report.findings);
    }
}

/// A volume grown and closed, for `check` (the closed state of the reopened copy).
fn carrier_after(bytes: &[u8], big: &[u8]) -> Vec<u8> {
    let c = Arc::new(MemoryCarrier::from_bytes(bytes));
    let v = Volume::open(Box::new(Arc::clone(&c)), VolumeOptions::default()).unwrap();
    v.create_file("/again").unwrap().write_at(big, 0).unwrap();
    v.close().unwrap();
    c.to_bytes()
}

#[test]
fn at_the_cap_a_write_fails_and_the_volume_stays_usable() {
    let (v, carrier) = growing(true);
    let f = v.create_file("/fill").unwrap();
    let chunk = pattern(1 << 20, 3);
    let mut written = 0;
    let err = loop {
        match f.write_at(&chunk, written) {
            Ok(()) => written += chunk.len() as u64,
            Err(e) => break e,
        }
        assert!(written <= CAP, "wrote past the cap");
    };
    assert!(matches!(err, Error::NoSpace), "{err}");
    assert!(!v.is_poisoned());
    assert_eq!(v.info().layout.total_blocks, v.info().layout.max_blocks);
    v.commit().unwrap();
    v.remove("/fill").unwrap();
    v.commit().unwrap();
    v.create_file("/after").unwrap().write_at(b"still works", 0).unwrap();
    v.close().unwrap();
    let report = check(&MemoryCarrier::from_bytes(&carrier.to_bytes()));
    assert_eq!(report.exit_code(), 0, "{:?}", report.findings);
}

#[test]
fn a_cap_below_the_capacity_is_refused_and_a_fixed_carrier_caps_growth() {
    let fmt = FormatOptions {
        capacity_bytes: Some(4 << 20),
        grow_max_bytes: Some(2 << 20),
        ..FormatOptions::default()
    };
    let e = Volume::format(Box::new(MemoryCarrier::new(4 << 20)), &fmt, VolumeOptions::default());
    assert!(matches!(e, Err(Error::Invalid(_))));
    // Memory cannot grow past its size: the cap is clamped to it.
    let fmt = FormatOptions {
        capacity_bytes: Some(1 << 20),
        grow_max_bytes: Some(1 << 30),
        ..FormatOptions::default()
    };
    let v = Volume::format(Box::new(MemoryCarrier::new(2 << 20)), &fmt, VolumeOptions::default())
        .unwrap();
    assert_eq!(v.info().layout.max_blocks, 512);
}
