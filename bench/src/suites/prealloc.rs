//! `prealloc`: the first durable write into a zero-filled (non-sparse) file, an
//! `fallocate`-only file and a sparse one. As root the files live on a private ext4 on a loop
//! device, so the device operations each first write causes are counted too.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use vellum_engine::carrier::AlignedBuf;

use super::e;
use crate::stats::{Measurement, Unit};
use crate::sys::{Loop, open_direct, time_us, zero_file};
use crate::{Options, SuiteResult};

fn make(kind: usize, path: &Path, len: u64) -> Result<(), String> {
    let _ = std::fs::remove_file(path);
    match kind {
        0 => zero_file(path, len).map_err(e("zero-filled file")),
        1 => {
            let ok = Command::new("fallocate")
                .arg("-l")
                .arg(len.to_string())
                .arg(path)
                .status()
                .is_ok_and(|s| s.success());
            if ok { Ok(()) } else { Err("fallocate(1) failed".into()) }
        }
        _ => std::fs::File::create(path).and_then(|f| f.set_len(len)).map_err(e("sparse file")),
    }?;
    // The file's own metadata is durable before the first write is timed.
    std::fs::File::open(path).and_then(|f| f.sync_all()).map_err(e("sync"))
}

pub fn run(opts: &Options) -> Result<SuiteResult, String> {
    let mut r = SuiteResult::new("prealloc");
    let base_dir = opts.dir.join("prealloc");
    std::fs::create_dir_all(&base_dir).map_err(e("dir"))?;
    let file_len = opts.bytes(64 << 20, 8 << 20);
    // A private ext4 on a loop device gives clean device counts (root only).
    let mut lo = None;
    let dir = match Loop::attach(&{
        let img = base_dir.join("ext4.img");
        zero_file(&img, 4 * file_len + (64 << 20)).map_err(e("image"))?;
        img
    }) {
        Ok(mut l) => match l.mount_ext4(&base_dir.join("mnt")) {
            Ok(()) => {
                let d = base_dir.join("mnt");
                lo = Some(l);
                d
            }
            Err(why) => {
                r.skipped.push(format!("device counts: {why}"));
                base_dir.clone()
            }
        },
        Err(why) => {
            r.skipped
                .push(format!("device counts: {why}; timings only, on {}", base_dir.display()));
            base_dir.clone()
        }
    };
    let names = ["zero-filled (non-sparse)", "fallocate only", "sparse (thin)"];
    let case = "first 4 KiB durable write";
    let mut ms: Vec<Measurement> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            Measurement::new("prealloc", case, n, (i > 0).then_some(names[0]), Unit::Micros)
        })
        .collect();
    let writes = opts.n(500, 20);
    let stride = (file_len / writes as u64) / 4096 * 4096;
    let mut buf = AlignedBuf::zeroed(4096, 4096);
    buf.as_mut_slice().copy_from_slice(&crate::payload(4096, 11));
    let bar = opts.bar("prealloc", ((opts.reps + 1) * 3 * writes) as u64);
    // Timings: each repetition makes the three files afresh, then they take turns in chunks
    // of eight first writes.
    let paths: Vec<_> = (0..3).map(|k| dir.join(format!("f{k}.bin"))).collect();
    let mut files: Vec<std::fs::File> = Vec::new();
    let mut failed = None;
    crate::stats::interleaved(
        &mut ms,
        (opts.reps, writes, 8),
        &mut files,
        |files| {
            files.clear();
            for (k, path) in paths.iter().enumerate() {
                match make(k, path, file_len)
                    .and_then(|()| open_direct(path, true).map_err(e("open")))
                {
                    Ok(f) => files.push(f),
                    Err(why) => failed = Some(why),
                }
            }
        },
        |files, v, i| {
            bar.inc(1);
            let at = (i % writes) as u64 * stride;
            match files.get(v) {
                Some(f) => time_us(|| {
                    f.write_all_at(buf.as_slice(), at).unwrap_or_else(|e| panic!("write: {e}"));
                }),
                None => f64::NAN,
            }
        },
    );
    if let Some(why) = failed {
        return Err(why);
    }
    drop(files);
    // Device requests: one untimed pass per kind, alone on the device.
    if let Some(l) = &lo {
        let trace = crate::sys::Trace::new().ok();
        for (k, m) in ms.iter_mut().enumerate() {
            make(k, &paths[k], file_len)?;
            let f = open_direct(&paths[k], true).map_err(e("open"))?;
            let c = crate::sys::counted(l, trace.as_ref(), writes as u64, || {
                for i in 0..writes {
                    f.write_all_at(buf.as_slice(), i as u64 * stride)
                        .unwrap_or_else(|e| panic!("write: {e}"));
                    bar.inc(1);
                }
            });
            m.set_extra("device writes/op", c.ops.0);
            m.set_extra("device flushes/op", c.ops.1);
            m.set_extra("device bytes/op", c.ops.2);
        }
    }
    bar.finish_and_clear();
    for path in &paths {
        let _ = std::fs::remove_file(path);
    }
    r.measurements.extend(ms);
    r.notes.push(format!(
        "{writes} first writes per file and repetition, {} KiB apart, O_DIRECT|O_DSYNC, on a private ext4 on a loop device (root; else on the work directory, timings only); the files are recreated (and synced) before each repetition. Device requests (data writes with their bytes, cache flushes) are counted in a separate untimed pass at the block_rq_issue tracepoint.",
        stride / 1024
    ));
    drop(lo);
    Ok(r)
}
