//! `carriers`: volumes over several members (issue 25). Sequential 1 MiB writes of two writers
//! on a volume over two loop devices against a volume of one member on one loop device of the
//! same total size, in the serial and the parallel write-concurrency modes; and the time to
//! add a 1 GiB member (a new file, created zero-filled) against the raw zero-fill of 1 GiB
//! (the same 4 MiB buffered writes and one fdatasync). Without root or `losetup` the volumes
//! lie on plain files, and the report says so.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use vellum_engine::carrier::{AlignedBuf, CarrierOptions};
use vellum_engine::{FormatOptions, MemberCarrier, Volume, VolumeOptions, WriteConcurrency};

use super::{e, fresh_volume};
use crate::stats::{Measurement, Unit};
use crate::sys::{Loop, settle, zero_file};
use crate::{Options, SuiteResult};

const SUITE: &str = "carriers";
/// 1 MiB writes per writer in one sample (a sample times both writers together).
const BURST: u64 = 8;
/// Room on member 0 for the superblocks, bitmap, image and journal besides the files.
const SLACK: u64 = 16 << 20;
/// The engine's zero-fill chunk for a new member file (`FILL_CHUNK` of the file carrier).
const FILL_CHUNK: usize = 4 << 20;

/// A carrier for a member: a loop device over a zero-filled file, or the file itself.
struct Disk {
    path: PathBuf,
    _lo: Option<Loop>,
}

/// Zero-filled backing files of `sizes` bytes under `dir`, each attached as a loop device;
/// plain files (the reason in `why`) when a loop device cannot be attached.
fn disks(
    dir: &Path,
    tag: &str,
    sizes: &[u64],
    why: &mut Option<String>,
) -> Result<Vec<Disk>, String> {
    let mut out = Vec::new();
    for (k, &len) in sizes.iter().enumerate() {
        let backing = dir.join(format!("{tag}-{k}.img"));
        zero_file(&backing, len).map_err(e("backing file"))?;
        let lo = if why.is_none() {
            Loop::attach(&backing).map_err(|w| *why = Some(w)).ok()
        } else {
            None
        };
        let path = lo.as_ref().map_or_else(|| backing.clone(), |l| l.dev.clone());
        out.push(Disk { path, _lo: lo });
    }
    Ok(out)
}

fn knobs() -> CarrierOptions {
    // Direct, not write-through: bandwidth, as the `carrier` suite's sequential case.
    CarrierOptions { write_through: false, ..CarrierOptions::PRODUCTION }
}

fn members(disks: &[Disk]) -> Result<Vec<MemberCarrier>, String> {
    disks
        .iter()
        .map(|d| {
            let carrier = vellum_engine::media::open_carrier(&d.path, knobs())
                .map_err(|err| format!("opening {}: {err}", d.path.display()))?;
            Ok(MemberCarrier { carrier, path: Some(d.path.clone()) })
        })
        .collect()
}

/// Formats a volume over `disks` (member 0 first) with two files of `file_bytes` each,
/// preallocated (the first on member 0; on two members the second lies mostly on member 1).
/// Returns how much of one file's size the files have on members after the first.
fn format(disks: &[Disk], member0_bytes: u64, file_bytes: u64) -> Result<f64, String> {
    let mut given = members(disks)?;
    let first = given.remove(0);
    let fmt = FormatOptions {
        capacity_bytes: Some(member0_bytes),
        force: true,
        ..FormatOptions::default()
    };
    let v = Volume::format_members(first, given, &fmt, VolumeOptions::default())
        .map_err(e("format"))?;
    let mut on_later_members = 0;
    for name in ["/a", "/b"] {
        let f = v.create_file(name).map_err(e("create"))?;
        f.preallocate(0, file_bytes).map_err(e("preallocate"))?;
        v.commit().map_err(e("commit"))?;
        if let Some(m1) = v.members().get(1) {
            let extents = f.extents().map_err(e("extents"))?;
            on_later_members += extents
                .iter()
                .map(|x| {
                    (x.physical_block + x.blocks)
                        .saturating_sub(x.physical_block.max(m1.first_block))
                })
                .sum::<u64>();
        }
    }
    let bs = u64::from(v.info().layout.block_size);
    v.close().map_err(e("close"))?;
    Ok(on_later_members as f64 * bs as f64 / file_bytes as f64)
}

/// The volume over `disks` opened in `mode`, with its two files.
fn open(
    disks: &[Disk],
    mode: WriteConcurrency,
) -> Result<(Volume, [Arc<vellum_engine::File>; 2]), String> {
    let options = VolumeOptions { concurrency: mode, ..VolumeOptions::default() };
    let v = Volume::open_members(members(disks)?, options).map_err(e("open"))?;
    let a = Arc::new(v.open_file("/a").map_err(e("open /a"))?);
    let b = Arc::new(v.open_file("/b").map_err(e("open /b"))?);
    Ok((v, [a, b]))
}

/// MB/s of both files written at once, `BURST` 1 MiB writes each from chunk `at` on.
fn burst(files: &[Arc<vellum_engine::File>; 2], bufs: &[AlignedBuf; 2], at: u64) -> f64 {
    let started = Instant::now();
    std::thread::scope(|s| {
        for (f, buf) in files.iter().zip(bufs) {
            s.spawn(move || {
                for k in 0..BURST {
                    f.write_at(buf.as_slice(), (at + k) << 20)
                        .unwrap_or_else(|err| panic!("vellum write: {err}"));
                }
            });
        }
    });
    (2 * BURST) as f64 * 1.048_576 / started.elapsed().as_secs_f64()
}

/// Writes `len` zeros to a new file at `path` in `FILL_CHUNK` buffered writes, then fdatasync.
fn raw_zero_fill(path: &Path, len: u64) -> std::io::Result<()> {
    let f = std::fs::File::create(path)?;
    let zeros = vec![0u8; FILL_CHUNK];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(FILL_CHUNK as u64) as usize;
        f.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    f.sync_data()
}

pub fn run(opts: &Options) -> Result<SuiteResult, String> {
    let dir = opts.dir.join(SUITE);
    std::fs::create_dir_all(&dir).map_err(e("carriers dir"))?;
    let mut r = SuiteResult::new(SUITE);

    // Sequential 1 MiB writes: 2 members against 1 of the same total size.
    let file_bytes = opts.bytes(128 << 20, 16 << 20);
    let member = file_bytes + SLACK;
    let mut no_loop = None;
    let two = disks(&dir, "two", &[member, member], &mut no_loop)?;
    let one = disks(&dir, "one", &[2 * member], &mut no_loop)?;
    let on = if let Some(why) = &no_loop {
        r.skipped.push(format!(
            "loop devices: {why}; the members are plain files on {} instead",
            dir.display()
        ));
        "files"
    } else {
        "loop devices"
    };
    let share = format(&two, member, file_bytes)?;
    format(&one, 2 * member, file_bytes)?;
    let chunks = file_bytes >> 20;
    let ops = opts.n(20, 4);
    let bar = opts.bar(SUITE, (opts.reps * 2 * 2 * ops) as u64);
    let mut bufs = [AlignedBuf::zeroed(1 << 20, 4096), AlignedBuf::zeroed(1 << 20, 4096)];
    for (k, b) in bufs.iter_mut().enumerate() {
        b.as_mut_slice().copy_from_slice(&crate::payload(1 << 20, 21 + k as u64));
    }
    let single = &on[..on.len() - 1];
    let base = format!("1 member (1 {single})");
    let variant = format!("2 members (2 {on})");
    for (mode, name) in
        [(WriteConcurrency::Serial, "serial"), (WriteConcurrency::ParallelSegments, "parallel")]
    {
        let case = format!("sequential 1 MiB writes, 2 writers, {name} mode");
        let mut ms = vec![
            Measurement::new(SUITE, &case, &variant, Some(&base), Unit::MegabytesPerSec),
            Measurement::new(SUITE, &case, &base, None, Unit::MegabytesPerSec),
        ];
        let (v2, f2) = open(&two, mode)?;
        let (v1, f1) = open(&one, mode)?;
        let files = [&f2, &f1];
        crate::stats::interleaved(
            &mut ms,
            (opts.reps, ops, 2),
            &mut (),
            |()| settle(),
            |(), v, i| {
                bar.inc(1);
                burst(files[v], &bufs, (i as u64 * BURST) % (chunks - BURST + 1))
            },
        );
        drop((f1, f2));
        v2.close().map_err(e("close"))?;
        v1.close().map_err(e("close"))?;
        r.measurements.extend(ms);
    }
    bar.finish_and_clear();
    drop((two, one));
    for entry in std::fs::read_dir(&dir).map_err(e("carriers dir"))?.flatten() {
        let _ = std::fs::remove_file(entry.path());
    }
    r.notes.push(format!(
        "Two writers, each writing its own preallocated file of {} MiB sequentially in 1 MiB \
         direct writes ({BURST} MiB per writer per sample, both timed together), on a volume \
         over two {on} of {} MiB against a volume of one member on one {single} of {} MiB; \
         the first file lies on member 0, {:.0}% of the second on member 1. {backing}, so \
         both volumes end on the same host disk: a second member adds capacity, not \
         bandwidth (members are concatenated, not striped), and the ratio is bounded by that \
         disk (about 1x expected).",
        file_bytes >> 20,
        member >> 20,
        (2 * member) >> 20,
        share * 100.0,
        backing = if no_loop.is_some() {
            "Every member is a zero-filled file in the work directory"
        } else {
            "Every loop device is backed by a zero-filled file in the work directory (attached \
             with direct IO)"
        }
    ));

    // Adding a member against the raw zero-fill of the same size.
    let add_bytes = opts.bytes(1 << 30, 64 << 20);
    let gib =
        if add_bytes == 1 << 30 { "1 GiB".to_string() } else { format!("{} MiB", add_bytes >> 20) };
    let case = format!("add a {gib} member");
    let raw = format!("raw zero-fill of {gib} (4 MiB writes + fdatasync)");
    let mut ms = vec![
        Measurement::new(SUITE, &case, "add_member_path (new file)", Some(&raw), Unit::Millis),
        Measurement::new(SUITE, &case, &raw, None, Unit::Millis),
    ];
    // Twice the repetitions: one sample per repetition, and a gigabyte is at the mercy of
    // writeback and of whatever else writes to the disk.
    let add_reps = 2 * opts.reps;
    let volume_path = dir.join("base.vlm");
    let member_path = dir.join("member1.vlm");
    let raw_path = dir.join("raw.bin");
    let bar = opts.bar(SUITE, (add_reps * 2) as u64);
    // Untimed warm-up: the first gigabyte written after the loop devices went away pays for
    // their freed backing files (measured: 3-4x the later ones), whichever variant runs first.
    raw_zero_fill(&raw_path, add_bytes).map_err(e("warm-up zero-fill"))?;
    let mut failed = None;
    crate::stats::interleaved(
        &mut ms,
        (add_reps, 1, 1),
        &mut (),
        |()| settle(),
        |(), v, _| {
            bar.inc(1);
            // Untimed: what the last sample removed is written back, so that neither variant
            // pays for the other's freed extents.
            for p in [&volume_path, &member_path, &raw_path] {
                let _ = std::fs::remove_file(p);
            }
            settle();
            if v == 0 {
                let volume = match fresh_volume(&volume_path, 16 << 20, CarrierOptions::PRODUCTION)
                {
                    Ok(v) => v,
                    Err(why) => {
                        failed = Some(why);
                        return f64::NAN;
                    }
                };
                settle();
                let started = Instant::now();
                let added = volume.add_member_path(
                    &member_path,
                    Some(add_bytes),
                    CarrierOptions::PRODUCTION,
                    None,
                );
                let ms = started.elapsed().as_secs_f64() * 1e3;
                if let Err(err) = added.and_then(|()| volume.close()) {
                    failed = Some(format!("adding a member: {err}"));
                    return f64::NAN;
                }
                ms
            } else {
                let started = Instant::now();
                if let Err(err) = raw_zero_fill(&raw_path, add_bytes) {
                    failed = Some(format!("raw zero-fill: {err}"));
                    return f64::NAN;
                }
                started.elapsed().as_secs_f64() * 1e3
            }
        },
    );
    for p in [&volume_path, &member_path, &raw_path] {
        let _ = std::fs::remove_file(p);
    }
    bar.finish_and_clear();
    if let Some(why) = failed {
        return Err(why);
    }
    // The fixed part of an add (no zeros to speak of): a 1 MiB member, the median of three.
    let mut fixed = Vec::new();
    for _ in 0..3 {
        for p in [&volume_path, &member_path] {
            let _ = std::fs::remove_file(p);
        }
        let volume = fresh_volume(&volume_path, 16 << 20, CarrierOptions::PRODUCTION)?;
        settle();
        let started = Instant::now();
        volume
            .add_member_path(&member_path, Some(1 << 20), CarrierOptions::PRODUCTION, None)
            .map_err(e("adding a 1 MiB member"))?;
        fixed.push(started.elapsed().as_secs_f64() * 1e3);
        volume.close().map_err(e("close"))?;
    }
    for p in [&volume_path, &member_path] {
        let _ = std::fs::remove_file(p);
    }
    fixed.sort_by(f64::total_cmp);
    ms[0].set_extra("add of a 1 MiB member (ms)", fixed[1]);
    r.measurements.extend(ms);
    let ratio = r.ratio(&case, "add_member_path (new file)");
    r.notes.push(format!(
        "Adding a member: `Volume::add_member_path` of a new {gib} file on an open volume \
         (member 0 a 16 MiB file), timed from the call to its return: the file created \
         zero-filled (4 MiB buffered writes, fdatasync, fsync of the file and its directory), \
         the member's superblock pair and a barrier on it, then member 0's superblock flip \
         (two barriers). The baseline writes the same zeros in the same 4 MiB buffered writes \
         to a new file and fdatasyncs it. {add_reps} repetitions, interleaved; the files \
         of a sample are removed and written back untimed before the next. The ratio \
         ({}) is bounded by the disk's write bandwidth for the zeros; what the add costs \
         beyond them is a few fsyncs and barriers, fixed whatever the size: \
         `add of a 1 MiB member` (other column) times that fixed part alone.",
        ratio.map_or_else(|| "-".into(), |x| format!("{x:.3}x"))
    ));
    r.notes.push(format!(
        "Rerun: `cargo run --release -p vellum-bench -- carriers --dir DIR [--report]` as root \
         (about 20 s here; `--scale 0.05` for a quick look, smaller files and a 64 MiB \
         member). Measured on: {}.",
        crate::report::machine()
    ));
    Ok(r)
}
