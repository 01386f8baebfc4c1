//! `vellum tour`: a short tour of one volume.
//!
//! Formats `DIR/demo.vlm` with production knobs (or reuses it), preallocates a log segment in
//! one commit, then makes 500 durable 4 KiB appends and reports their latency next to raw
//! O_DIRECT|O_DSYNC writes into a zero-filled file in the same directory, measured in the
//! same run, with the carrier's operation counts per append.

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

use vellum_engine::media::CarrierOptions;
use vellum_engine::{AlignedBuf, FormatOptions, Volume, VolumeOptions};

use super::CliError;
use super::size::human;

const APPENDS: usize = 500;
const ENTRY: usize = 4096;
const SEGMENT: u64 = 4 << 20;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> CliError + '_ {
    move |e| CliError::Io(e, what.to_string())
}

pub fn run(dir: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(dir).map_err(io("creating the demo directory"))?;
    let path = dir.join("demo.vlm");
    let v = if path.exists() {
        println!("reusing {}", path.display());
        super::volume::open(&path, false)?
    } else {
        println!("formatting {} (64 MiB, preallocated, non-sparse, zero-filled)", path.display());
        let fmt = FormatOptions { capacity_bytes: Some(64 << 20), ..FormatOptions::default() };
        Volume::create_path(&path, &fmt, CarrierOptions::PRODUCTION, VolumeOptions::default())?
    };
    let knobs = v.info().carrier;
    println!("open with direct IO {}, write-through {}", knobs.direct_io, knobs.write_through);

    let name = format!("/log/segment-{:06}", v.generation());
    v.create_dir_all("/log")?;
    let seg = v.create_file(&name)?;
    seg.preallocate(0, SEGMENT)?;
    let before = v.carrier_stats();
    v.commit()?;
    let c = v.carrier_stats() - before;
    println!(
        "created {name}: {} preallocated in one commit ({} writes, {} barriers)",
        human(SEGMENT),
        c.writes,
        c.barriers
    );

    let mut entry = AlignedBuf::zeroed(ENTRY, 4096);
    let mut lat = Vec::with_capacity(APPENDS);
    let before = v.carrier_stats();
    for i in 0..APPENDS {
        entry.as_mut_slice()[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let t = Instant::now();
        seg.write_at(entry.as_slice(), (i * ENTRY) as u64)?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let c = v.carrier_stats() - before;
    lat.sort_by(f64::total_cmp);

    // The floor, measured now: the same writes with O_DIRECT|O_DSYNC into a zero-filled file.
    let raw_path = dir.join("demo-floor.bin");
    {
        // Zero-filled and synced, so the floor also overwrites written blocks.
        let f = std::fs::File::create(&raw_path).map_err(io("creating the baseline file"))?;
        f.write_all_at(&vec![0u8; APPENDS * ENTRY], 0).map_err(io("writing the baseline file"))?;
        f.sync_all().map_err(io("syncing the baseline file"))?;
    }
    let raw = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
        .open(&raw_path)
        .map_err(io("opening the baseline file with O_DIRECT|O_DSYNC"))?;
    let mut floor = Vec::with_capacity(APPENDS);
    for i in 0..APPENDS {
        let t = Instant::now();
        raw.write_all_at(entry.as_slice(), (i * ENTRY) as u64).map_err(io("baseline write"))?;
        floor.push(t.elapsed().as_secs_f64() * 1e6);
    }
    drop(raw);
    let _ = std::fs::remove_file(&raw_path);
    floor.sort_by(f64::total_cmp);

    let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
    let (f50, f99) = (percentile(&floor, 0.5), percentile(&floor, 0.99));
    println!("{APPENDS} durable 4 KiB appends: p50 {p50:.0} us, p99 {p99:.0} us");
    println!(
        "raw O_DIRECT|O_DSYNC floor:   p50 {f50:.0} us, p99 {f99:.0} us  (ratio p50 {:.2}x)",
        p50 / f50
    );
    println!(
        "per append: {:.2} carrier writes, {:.2} durable, {:.2} flushes, {:.0} bytes",
        c.writes as f64 / APPENDS as f64,
        c.durable_writes as f64 / APPENDS as f64,
        c.barriers as f64 / APPENDS as f64,
        c.written_bytes as f64 / APPENDS as f64
    );
    drop(seg);
    let files = v.list("/log")?.len();
    v.close()?;
    println!(
        "closed cleanly; {files} segment(s) in /log. Try: vellum info {0}; vellum ls {0} /log",
        path.display()
    );
    Ok(())
}
