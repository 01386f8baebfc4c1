//! The whole open path on arbitrary bytes laid over a valid volume (journaled, left with
//! batches to replay): open must return an error or a volume that keeps its invariants,
//! never panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vellum_engine::carrier::MemoryCarrier;
use vellum_engine::{FormatOptions, Volume, VolumeOptions};

fn base() -> &'static [u8] {
    static BASE: OnceLock<Vec<u8>> = OnceLock::new();
    BASE.get_or_init(|| {
        let c = std::sync::Arc::new(MemoryCarrier::new(1 << 20));
        let fmt = FormatOptions { journal: true, journal_bytes: 8 << 12, ..FormatOptions::default() };
        let v = Volume::format(Box::new(std::sync::Arc::clone(&c)), &fmt, VolumeOptions::default()).unwrap();
        v.create_dir("/d").unwrap();
        v.create_file("/d/f").unwrap().write_at(b"fuzz", 5000).unwrap();
        v.commit().unwrap();
        v.open_file("/d/f").unwrap().set_attr(b"k", b"v").unwrap();
        v.rename("/d/f", "/d/g").unwrap();
        v.rename("/d/g", "/d/f").unwrap();
        v.commit().unwrap();
        // Not closed: the batches since the checkpoint are left for open to replay.
        c.to_bytes()
    })
}

fuzz_target!(|data: &[u8]| {
    // The input is a list of (offset u32, byte) patches over the base volume.
    let mut bytes = base().to_vec();
    for p in data.chunks_exact(5) {
        let at = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize % bytes.len();
        bytes[at] = p[4];
    }
    let _ = vellum_engine::check(&MemoryCarrier::from_bytes(&bytes));
    if let Ok(v) = Volume::open(Box::new(MemoryCarrier::from_bytes(&bytes)), VolumeOptions::default()) {
        v.check_invariants();
        let _ = v.list("/d");
        let _ = v.open_file("/d/f").and_then(|f| f.read_to_end());
    }
});
