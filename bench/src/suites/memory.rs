//! `memory`: single-writer 1 MiB writes to a `memory:` volume against `memcpy`, and 4 writers
//! of small writes in the serial and parallel write-concurrency modes.

use std::sync::Arc;
use std::time::Instant;

use vellum_engine::carrier::MemoryCarrier;
use vellum_engine::{FormatOptions, Volume, VolumeOptions, WriteConcurrency};

use super::e;
use crate::stats::{Measurement, Unit};
use crate::sys::time_us;
use crate::{Options, SuiteResult};

fn memory_volume(bytes: u64, concurrency: WriteConcurrency) -> Result<Volume, String> {
    let opts = VolumeOptions { concurrency, ..VolumeOptions::default() };
    Volume::format(Box::new(MemoryCarrier::new(bytes)), &FormatOptions::default(), opts)
        .map_err(e("memory volume"))
}

static NEXT_FILE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Ops/s of `writers` threads each writing `ops` blocks of `size` bytes into its own file.
fn writers(v: &Volume, writers: usize, ops: usize, size: usize) -> f64 {
    let files: Vec<Arc<vellum_engine::File>> = (0..writers)
        .map(|w| {
            let id = NEXT_FILE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let f = v.create_file(format!("/w{w}-{id}")).unwrap_or_else(|e| panic!("create: {e}"));
            f.preallocate(0, (ops * size) as u64).unwrap_or_else(|e| panic!("preallocate: {e}"));
            Arc::new(f)
        })
        .collect();
    let started = Instant::now();
    std::thread::scope(|s| {
        for f in &files {
            s.spawn(move || {
                let buf = vec![0x5Au8; size];
                for i in 0..ops {
                    f.write_at(&buf, (i * size) as u64).unwrap_or_else(|e| panic!("write: {e}"));
                }
            });
        }
    });
    (writers * ops) as f64 / started.elapsed().as_secs_f64()
}

pub fn run(opts: &Options) -> Result<SuiteResult, String> {
    let mut r = SuiteResult::new("memory");
    let total = opts.bytes(512 << 20, 16 << 20);
    let chunks = (total >> 20) as usize;
    let case = "1 MiB writes, one writer";
    let base = "memcpy";
    let vm = Measurement::new(
        "memory",
        case,
        "vellum memory: volume",
        Some(base),
        Unit::MegabytesPerSec,
    );
    let mm = Measurement::new("memory", case, base, None, Unit::MegabytesPerSec);
    let v = memory_volume(total + (64 << 20), WriteConcurrency::Serial)?;
    let f = v.create_file("/big").map_err(e("create"))?;
    f.preallocate(0, total).map_err(e("preallocate"))?;
    let src = crate::payload(1 << 20, 9);
    // Both sides warm: every page of the carrier and of the memcpy target is touched first, so
    // neither pays first-touch page faults inside the timings.
    let mut dst = vec![0u8; total as usize];
    dst.fill(1);
    for i in 0..chunks {
        f.write_at(&src, (i as u64) << 20).map_err(e("warm-up"))?;
    }
    let bar = opts.bar("memory", (opts.reps * (2 * chunks + 3)) as u64);
    let mut ms = [vm, mm];
    crate::stats::interleaved(
        &mut ms,
        (opts.reps, chunks, 8),
        &mut dst,
        |_| {},
        |dst, v, i| {
            bar.inc(1);
            let us = if v == 0 {
                time_us(|| {
                    f.write_at(&src, (i % chunks) as u64 * (1 << 20))
                        .unwrap_or_else(|e| panic!("write: {e}"));
                })
            } else {
                let at = (i % chunks) << 20;
                time_us(|| dst[at..at + (1 << 20)].copy_from_slice(&src))
            };
            1.048_576 / (us / 1e6)
        },
    );
    let [vm, mm] = ms;
    std::hint::black_box(&dst);
    r.measurements.push(vm);
    r.measurements.push(mm);
    r.target(
        "1 MiB writes to memory: >= 0.9x memcpy",
        r.ratio(case, "vellum memory: volume"),
        |x| x >= 0.9,
        "",
    );
    let ops = opts.n(20_000, 500);
    let case = "4 KiB writes";
    let one = "1 writer";
    let mut ms = [
        Measurement::new("memory", case, one, None, Unit::OpsPerSec),
        Measurement::new("memory", case, "4 writers, serial", Some(one), Unit::OpsPerSec),
        Measurement::new(
            "memory",
            case,
            "4 writers, parallel segments",
            Some(one),
            Unit::OpsPerSec,
        ),
    ];
    let serial = memory_volume(32 * ops as u64 * 4096 + (64 << 20), WriteConcurrency::Serial)?;
    let parallel =
        memory_volume(32 * ops as u64 * 4096 + (64 << 20), WriteConcurrency::ParallelSegments)?;
    for _ in 0..opts.reps {
        ms[0].add_rep(vec![writers(&serial, 1, ops, 4096)]);
        ms[1].add_rep(vec![writers(&serial, 4, ops / 4, 4096)]);
        ms[2].add_rep(vec![writers(&parallel, 4, ops / 4, 4096)]);
        bar.inc(3);
    }
    bar.finish_and_clear();
    r.measurements.extend(ms);
    r.notes.push("Scaling ratio = 4-writer throughput over 1-writer throughput (same total bytes). The design article measured 0.92x (serial) and 0.66x (parallel) on its machine.".into());
    Ok(r)
}
