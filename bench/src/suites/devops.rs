//! `devops`: writes, flushes and bytes that reach the block device per durable append and per
//! metadata commit, from `/sys/block/<dev>/stat` of private loop devices attached for the run
//! (root only). The kernel's flush counter is calibrated in the same run with bare
//! `fdatasync`s on the device, so the counts compare directly.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use vellum_engine::carrier::{AlignedBuf, CarrierOptions};
use vellum_engine::{FormatOptions, Volume, VolumeOptions};
use vellum_raft_store::log::{self, LogConfig, LogCore, LogEntry};

use super::e;
use crate::stats::{Measurement, Unit};
use crate::sys::{Counts, Loop, Trace, counted, has_fua, open_direct, zero_file};
use crate::{Options, SuiteResult};

fn record(r: &mut SuiteResult, case: &str, variant: &str, c: Counts) {
    let (w, f, b) = c.ops;
    let mut m = Measurement::new("devops", case, variant, None, Unit::PerOp);
    m.add_rep(vec![w]);
    m.set_extra("data writes/op", w);
    m.set_extra("flushes/op", f);
    m.set_extra("FUA writes/op", c.fua);
    m.set_extra("bytes/op", b);
    m.set_extra("stat writes/op", c.stat.0);
    m.set_extra("stat flushes/op", c.stat.1);
    r.measurements.push(m);
}

pub fn run(opts: &Options) -> Result<SuiteResult, String> {
    let mut r = SuiteResult::new("devops");
    let dir = opts.dir.join("devops");
    std::fs::create_dir_all(&dir).map_err(e("dir"))?;
    let img = dir.join("dev.img");
    zero_file(&img, 256 << 20).map_err(e("image"))?;
    let lo = match Loop::attach(&img) {
        Ok(l) => l,
        Err(why) => {
            r.skipped.push(format!("all: {why}"));
            return Ok(r);
        }
    };
    let ops = opts.n(400, 40) as u64;
    let bar = opts.bar("devops", 7 * ops);
    let trace = Trace::new().map_err(|why| r.notes.push(format!("No tracepoint ({why}): the figures are the kernel's counters, which count an emulated FUA write as two writes and two flushes."))).ok();
    let trace = trace.as_ref();
    // Calibration: what one fdatasync of the device shows in the counters.
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&lo.dev)
        .map_err(e("open device"))?;
    let cal = counted(&lo, trace, ops, || {
        for _ in 0..ops {
            dev.sync_data().unwrap_or_else(|e| panic!("fdatasync: {e}"));
            bar.inc(1);
        }
    });
    record(&mut r, "calibration", "fdatasync of the device", cal);
    drop(dev);
    // The floor: O_DIRECT|O_DSYNC 4 KiB writes straight onto the device.
    let raw = open_direct(&lo.dev, true).map_err(e("open device"))?;
    let buf = AlignedBuf::zeroed(4096, 4096);
    let floor = counted(&lo, trace, ops, || {
        for i in 0..ops {
            raw.write_all_at(buf.as_slice(), (128 << 20) + i * 4096)
                .unwrap_or_else(|e| panic!("raw write: {e}"));
            bar.inc(1);
        }
    });
    record(&mut r, "durable 4 KiB append", "raw O_DIRECT|O_DSYNC pwrite", floor);
    drop(raw);
    // The physical floor: the write, then one cache flush (fdatasync of a device is that).
    let raw = open_direct(&lo.dev, false).map_err(e("open device"))?;
    let physical = counted(&lo, trace, ops, || {
        for i in 0..ops {
            raw.write_all_at(buf.as_slice(), (160 << 20) + i * 4096)
                .and_then(|()| raw.sync_data())
                .unwrap_or_else(|e| panic!("raw write: {e}"));
            bar.inc(1);
        }
    });
    record(&mut r, "durable 4 KiB append", "raw O_DIRECT pwrite + fdatasync", physical);
    drop(raw);
    // Vellum on the device: log appends, then metadata commits.
    let fmt = FormatOptions { force: true, ..FormatOptions::default() };
    let volume =
        Volume::create_path(&lo.dev, &fmt, CarrierOptions::PRODUCTION, VolumeOptions::default())
            .map_err(e("format device"))?;
    let core = LogCore::open(
        volume.clone(),
        LogConfig { segment_bytes: 32 << 20, background_spares: false, ..LogConfig::default() },
    )
    .map_err(e("log"))?;
    let append = |i: u64| {
        let entry = LogEntry { index: i, term: 1, payload: Arc::from(crate::payload(4000, i)) };
        log::wait(|done| core.append(vec![entry], done)).unwrap_or_else(|e| panic!("append: {e}"));
    };
    append(1); // activates the first segment
    let vellum = counted(&lo, trace, ops, || {
        for i in 0..ops {
            append(i + 2);
            bar.inc(1);
        }
    });
    record(&mut r, "durable 4 KiB append", "vellum log (device carrier)", vellum);
    let commits = counted(&lo, trace, ops, || {
        for i in 0..ops {
            volume.create_file(format!("/m{i}")).map_or_else(|e| panic!("create: {e}"), drop);
            volume.commit().unwrap_or_else(|e| panic!("commit: {e}"));
            bar.inc(1);
        }
    });
    record(&mut r, "metadata commit", "vellum volume commit", commits);
    core.close();
    drop(core);
    let _ = volume.close();
    // Host file system engines on a private ext4.
    let img2 = dir.join("fs.img");
    zero_file(&img2, 512 << 20).map_err(e("image"))?;
    match Loop::attach(&img2) {
        Ok(mut fs) => match fs.mount_ext4(&dir.join("mnt")) {
            Ok(()) => host_fs(&mut r, &fs, trace, &dir.join("mnt"), ops, &bar),
            Err(why) => r.skipped.push(format!("host file system engines: {why}")),
        },
        Err(why) => r.skipped.push(format!("host file system engines: {why}")),
    }
    bar.finish_and_clear();
    let fua = has_fua(&lo.name()).unwrap_or(false);
    r.notes.push(format!(
        "{ops} operations per figure on private loop devices (direct IO, write-back cache, FUA: {}). Requests are counted as issued, at the kernel's block_rq_issue tracepoint: a data write is a request with bytes, a flush is a cache-flush request. 'stat' columns are /sys/block/<dev>/stat for comparison: it counts every flush also as a write, and an O_DSYNC write that the block layer emulates as write + flush as two of each. On a raw block device the kernel's O_DSYNC write is a FUA write followed by a flush anyway, and without FUA the block layer adds a second flush to emulate it (the 'raw O_DSYNC' row), so the device carrier writes and then flushes once. There is no FUA device on this machine.",
        if fua { "yes" } else { "no" },
    ));
    // Without a trace the counters are all there is: compare with what one fdatasync shows.
    let unit = if trace.is_some() { 1.0 } else { cal.ops.1.max(1e-9) };
    let same =
        |a: Counts, b: Counts| (a.ops.0 - b.ops.0).abs() < 0.05 && (a.ops.1 - b.ops.1).abs() < 0.05;
    r.target(
        "vellum durable append on a device = 1 data write + 1 flush (the floor: raw write + fdatasync)",
        Some(f64::from(u8::from(
            (vellum.ops.0 - 1.0).abs() < 0.05
                && (trace.is_none() || (vellum.ops.1 - 1.0).abs() < 0.05)
                && same(vellum, physical),
        ))),
        |x| x > 0.5,
        &format!(
            "1 = yes: {:.2} data writes + {:.2} flushes per append; raw write + fdatasync {:.2} + {:.2}; raw O_DSYNC write {:.2} + {:.2}",
            vellum.ops.0, vellum.ops.1, physical.ops.0, physical.ops.1, floor.ops.0, floor.ops.1
        ),
    );
    r.target(
        "vellum metadata commit = 2 barriers",
        Some(commits.ops.1 / unit),
        |x| (x - 2.0).abs() < 0.1,
        "flush requests per commit",
    );
    Ok(r)
}

fn host_fs(
    r: &mut SuiteResult,
    fs: &Loop,
    trace: Option<&Trace>,
    mnt: &Path,
    ops: u64,
    bar: &indicatif::ProgressBar,
) {
    use std::io::Write;
    // 4 KiB entries, and 256 B ones: an engine that appends into the page cache shares one
    // 4 KiB block among sixteen small appends, and only the first of them changes metadata.
    for (len, case) in [(4096, "durable 4 KiB append"), (256, "durable 256 B append")] {
        let name = format!("naive-{len}.log");
        let mut f = match std::fs::OpenOptions::new().create(true).append(true).open(mnt.join(name))
        {
            Ok(f) => f,
            Err(e) => return r.skipped.push(format!("append + fdatasync: {e}")),
        };
        let entry = crate::payload(len, 7);
        let naive = counted(fs, trace, ops, || {
            for _ in 0..ops {
                f.write_all(&entry)
                    .and_then(|()| f.sync_data())
                    .unwrap_or_else(|e| panic!("append: {e}"));
                bar.inc(1);
            }
        });
        record(r, case, "append + fdatasync (ext4)", naive);
        #[cfg(feature = "peers")]
        {
            let sub = mnt.join(format!("peers-{len}"));
            let _ = std::fs::create_dir_all(&sub);
            match super::peers::appenders(&sub) {
                Ok(mut engines) => {
                    for a in &mut engines {
                        a.append(1, len);
                        let c = counted(fs, trace, ops, || {
                            for _ in 0..ops {
                                a.append(1, len);
                            }
                        });
                        record(r, case, &format!("{} (ext4)", a.name()), c);
                    }
                }
                Err(e) => r.skipped.push(format!("peers: {e}")),
            }
        }
    }
    #[cfg(not(feature = "peers"))]
    r.skipped.push("raft-engine and redb: not built (--features peers)".into());
}
