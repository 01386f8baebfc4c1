//! Random operation sequences with a power cut, with and without the journal: the image
//! after the cut must open.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use vellum_engine::carrier::{CrashPlan, FaultRng, FaultyCarrier, MemoryCarrier};
use vellum_engine::{FormatOptions, Volume, VolumeOptions};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let carrier = Arc::new(FaultyCarrier::new(2 << 20, data[0] & 1 == 1));
    // Bit 1 of the first byte: a journaled volume with a ring of 8 blocks (wraps, checkpoints).
    let journal = data[0] & 2 == 2;
    let fmt = FormatOptions { journal, journal_bytes: if journal { 8 << 12 } else { 0 }, ..FormatOptions::default() };
    let Ok(v) = Volume::format(Box::new(Arc::clone(&carrier)), &fmt, VolumeOptions::default()) else { return };
    carrier.set_crash_plan(CrashPlan::AtOp(u64::from(data[1]) + carrier.ops()));
    for (i, op) in data[2..].chunks(3).enumerate() {
        let name = format!("/f{}", op.first().copied().unwrap_or(0) % 8);
        let r = match op.get(1).copied().unwrap_or(0) % 6 {
            0 => v.create_file(&name).map(drop),
            1 => v.open_file(&name).and_then(|f| f.write_at(&[i as u8; 3000], u64::from(op.get(2).copied().unwrap_or(0)) * 97)),
            2 => v.remove(&name),
            3 => v.rename(&name, "/renamed"),
            4 => v.open_file(&name).and_then(|f| f.set_len(u64::from(op.get(2).copied().unwrap_or(0)) * 50)),
            _ => v.commit(),
        };
        if r.is_err() && carrier.crashed() {
            break;
        }
    }
    carrier.cut_power();
    drop(v);
    let image = carrier.crash_image(&mut FaultRng::new(u64::from(data[0])));
    let v = Volume::open(Box::new(MemoryCarrier::from_bytes(&image)), VolumeOptions::default())
        .expect("a volume that only lost power must open");
    v.check_invariants();
});
