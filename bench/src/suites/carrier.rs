//! `carrier`: write-through writes into a preallocated non-sparse volume against the raw floor
//! (`pwrite` with O_DIRECT|O_DSYNC on a zero-filled file) and against `pwritev2(RWF_DSYNC)`;
//! sequential 1 MiB direct writes against raw O_DIRECT writes.

use std::os::unix::fs::FileExt;

use vellum_engine::carrier::{AlignedBuf, Carrier, CarrierOptions, FileCarrier};

use super::{e, fresh_volume};
use crate::stats::{Measurement, Unit};
use crate::sys::{open_direct, time_us, zero_file};
use crate::{Options, SuiteResult};

const REGION: u64 = 32 << 20;

pub fn run(opts: &Options) -> Result<SuiteResult, String> {
    let dir = opts.dir.join("carrier");
    std::fs::create_dir_all(&dir).map_err(e("carrier dir"))?;
    let mut r = SuiteResult::new("carrier");
    let seq_bytes = opts.bytes(256 << 20, 8 << 20);
    let volume =
        fresh_volume(&dir.join("wt.vlm"), REGION + (16 << 20), CarrierOptions::PRODUCTION)?;
    let file = volume.create_file("/bench").map_err(e("create"))?;
    file.preallocate(0, REGION).map_err(e("preallocate"))?;
    volume.commit().map_err(e("commit"))?;
    zero_file(&dir.join("raw.bin"), REGION.max(seq_bytes)).map_err(e("raw file"))?;
    zero_file(&dir.join("rwf.bin"), REGION).map_err(e("raw file"))?;
    // The floor writes the very blocks vellum's file occupies inside the carrier file (the
    // volume locks NAME.lock, not the carrier), so both sides hit the same host blocks.
    let extents = file.extents().map_err(e("extents"))?;
    let [extent] = extents.as_slice() else {
        return Err(format!("the preallocated region is {} extents, not one", extents.len()));
    };
    let region_at = extent.physical_block * u64::from(volume.info().layout.block_size);
    let raw_dsync = open_direct(&dir.join("wt.vlm"), true).map_err(e("open raw"))?;
    let raw_direct = open_direct(&dir.join("raw.bin"), false).map_err(e("open raw"))?;
    let rwf = FileCarrier::open(&dir.join("rwf.bin"), CarrierOptions::PRODUCTION)
        .map_err(e("open rwf"))?;
    let n = opts.n(2000, 40);
    let bar = opts.bar("carrier", (opts.reps * 2 * 3 * n) as u64);
    for size in [4096usize, 65536] {
        let case = format!("{} KiB durable write", size / 1024);
        let mut buf = AlignedBuf::zeroed(size, 4096);
        buf.as_mut_slice().copy_from_slice(&crate::payload(size, 3));
        let floor = "raw pwrite O_DIRECT|O_DSYNC";
        let mut ms = vec![
            Measurement::new("carrier", &case, "vellum write-through", Some(floor), Unit::Micros),
            Measurement::new("carrier", &case, floor, None, Unit::Micros),
            Measurement::new("carrier", &case, "raw pwritev2 RWF_DSYNC", Some(floor), Unit::Micros),
        ];
        let slots = REGION / size as u64;
        crate::stats::interleaved(
            &mut ms,
            (opts.reps, n, 8),
            &mut (),
            |()| crate::sys::settle(),
            |(), v, i| {
                bar.inc(1);
                let at = (i as u64 % slots) * size as u64;
                match v {
                    0 => time_us(|| {
                        file.write_at(buf.as_slice(), at)
                            .unwrap_or_else(|e| panic!("vellum write: {e}"));
                    }),
                    1 => time_us(|| {
                        raw_dsync
                            .write_all_at(buf.as_slice(), region_at + at)
                            .unwrap_or_else(|e| panic!("raw write: {e}"));
                    }),
                    _ => time_us(|| {
                        rwf.write_durable_at(buf.as_slice(), at)
                            .unwrap_or_else(|e| panic!("pwritev2: {e}"));
                    }),
                }
            },
        );
        r.measurements.extend(ms);
        let vellum = "vellum write-through";
        r.target(
            &format!("{case}: vellum median <= 1.05x the raw floor"),
            r.ratio(&case, vellum),
            |x| x <= 1.05,
            "",
        );
        r.target(
            &format!("{case}: vellum p99 <= 1.2x the raw floor"),
            r.p99_ratio(&case, vellum),
            |x| x <= 1.2,
            "",
        );
    }
    // Sequential 1 MiB direct writes, no write-through: bandwidth.
    let seq_volume = fresh_volume(
        &dir.join("seq.vlm"),
        seq_bytes + (16 << 20),
        CarrierOptions { write_through: false, ..CarrierOptions::PRODUCTION },
    )?;
    let seq_file = seq_volume.create_file("/seq").map_err(e("create"))?;
    seq_file.preallocate(0, seq_bytes).map_err(e("preallocate"))?;
    seq_volume.commit().map_err(e("commit"))?;
    let case = "sequential 1 MiB direct writes";
    let base = "raw pwrite O_DIRECT";
    let mut ms = vec![
        Measurement::new("carrier", case, "vellum direct", Some(base), Unit::MegabytesPerSec),
        Measurement::new("carrier", case, base, None, Unit::MegabytesPerSec),
    ];
    let mut chunk = AlignedBuf::zeroed(1 << 20, 4096);
    chunk.as_mut_slice().copy_from_slice(&crate::payload(1 << 20, 5));
    let chunks = (seq_bytes >> 20) as usize;
    crate::stats::interleaved(
        &mut ms,
        (opts.reps, chunks, 4),
        &mut (),
        |()| {},
        |(), v, i| {
            let at = ((i % chunks) as u64) << 20;
            let us = if v == 0 {
                time_us(|| {
                    seq_file
                        .write_at(chunk.as_slice(), at)
                        .unwrap_or_else(|e| panic!("vellum write: {e}"));
                })
            } else {
                time_us(|| {
                    raw_direct
                        .write_all_at(chunk.as_slice(), at)
                        .unwrap_or_else(|e| panic!("raw write: {e}"));
                })
            };
            1.048_576 / (us / 1e6)
        },
    );
    r.measurements.extend(ms);
    r.target(
        "sequential 1 MiB: vellum >= 0.95x raw O_DIRECT",
        r.ratio(case, "vellum direct"),
        |x| x >= 0.95,
        "",
    );
    bar.finish_and_clear();
    drop(file);
    let _ = volume.close();
    drop(seq_file);
    let _ = seq_volume.close();
    r.notes.push(format!("{n} writes per repetition and variant into a {REGION}-byte preallocated region; the raw O_DSYNC floor writes the same blocks of the carrier file (where vellum's file lies), pwritev2 a zero-filled file of its own; sequential: {} MiB per repetition.", seq_bytes >> 20));
    Ok(r)
}
