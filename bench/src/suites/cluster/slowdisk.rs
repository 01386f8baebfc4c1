//! The emulated slow disk of the `cluster` suite: one `bench/slowdisk.py` FUSE mount per
//! node (a passthrough to a directory in the work dir), where every durable request
//! (FUSE_FSYNC, FUSE_FSYNCDIR) holds the mount's one lock for at least the stated delay.
//! The script counts what it received, so the suite reports durable requests per write and
//! the time each held the spindle: the check that the emulation delays what it should.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::suites::e;
use crate::sys::fs_type;

/// The script, embedded so that the binary runs it wherever it is.
const SCRIPT: &str = include_str!("../../../slowdisk.py");

/// Why the emulation cannot run here, if it cannot: it needs /dev/fuse, `fusermount`
/// (Debian `fuse`), python3 with fusepy (which loads libfuse2 on import).
pub fn unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    if Command::new("fusermount").arg("-V").output().is_err() {
        return Some("fusermount is not installed (apt-get install fuse libfuse2)".into());
    }
    let import = Command::new("python3").args(["-c", "import fuse"]).output();
    match import {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "python3 cannot import fusepy (pip install fusepy; apt-get install libfuse2): {}",
            String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("")
        )),
        Err(err) => Some(format!("python3 is not installed: {err}")),
    }
}

/// What one mount received, summed since it was mounted.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    /// fsync + fdatasync + fsyncdir requests.
    pub durable: f64,
    /// FUSE_WRITE requests.
    pub writes: f64,
    /// Milliseconds durable requests held the spindle lock.
    pub held_ms: f64,
}

impl std::ops::Sub for Counts {
    type Output = Counts;
    fn sub(self, b: Counts) -> Counts {
        Counts {
            durable: self.durable - b.durable,
            writes: self.writes - b.writes,
            held_ms: self.held_ms - b.held_ms,
        }
    }
}

/// The mounts; unmounted (and their processes reaped) on drop.
pub struct Mounts {
    children: Vec<Child>,
    /// Mount points, one per node.
    pub points: Vec<PathBuf>,
    stats: Vec<PathBuf>,
}

impl Mounts {
    /// Mounts `n` slow disks under `dir` (backing directories wiped first), each delaying a
    /// durable request by `delay_ms`, and waits until all are mounted.
    pub fn start(dir: &Path, n: usize, delay_ms: f64) -> Result<Mounts, String> {
        std::fs::create_dir_all(dir).map_err(e("slow disk dir"))?;
        let script = dir.join("slowdisk.py");
        std::fs::write(&script, SCRIPT).map_err(e("slowdisk.py"))?;
        let mut m = Mounts { children: Vec::new(), points: Vec::new(), stats: Vec::new() };
        for i in 0..n {
            let (backing, point) = (dir.join(format!("backing{i}")), dir.join(format!("mnt{i}")));
            // A mount left by an interrupted run of this suite would hide the new one.
            let _ = Command::new("fusermount").arg("-uqz").arg(&point).status();
            let _ = std::fs::remove_dir_all(&backing);
            std::fs::create_dir_all(&backing).map_err(e("backing dir"))?;
            std::fs::create_dir_all(&point).map_err(e("mount point"))?;
            let stats = dir.join(format!("stats{i}.json"));
            let _ = std::fs::remove_file(&stats);
            let log =
                std::fs::File::create(dir.join(format!("slowdisk{i}.log"))).map_err(e("log"))?;
            let child = Command::new("python3")
                .arg(&script)
                .args([&backing, &point])
                .args(["--delay-ms", &delay_ms.to_string(), "--stats"])
                .arg(&stats)
                .stdin(Stdio::null())
                .stdout(log.try_clone().map_err(e("log"))?)
                .stderr(log)
                .spawn()
                .map_err(e("spawn slowdisk.py"))?;
            m.children.push(child);
            m.points.push(point);
            m.stats.push(stats);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while !m.points.iter().all(|p| fs_type(p).is_some_and(|t| t.starts_with("fuse"))) {
            if Instant::now() > deadline {
                return Err(format!("slow disks under {} not mounted in 20 s", dir.display()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(m)
    }

    /// Each mount's counts, after waiting for the script's next dump (every 100 ms).
    pub fn counts(&self) -> Vec<Counts> {
        std::thread::sleep(Duration::from_millis(250));
        self.stats
            .iter()
            .map(|p| {
                let v: serde_json::Value = std::fs::read(p)
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .unwrap_or_default();
                let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
                Counts {
                    durable: f("fsync") + f("fdatasync") + f("fsyncdir"),
                    writes: f("writes"),
                    held_ms: f("held_ms"),
                }
            })
            .collect()
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        for (p, c) in self.points.iter().zip(&mut self.children) {
            // A clean unmount ends the script's loop; a lazy one if something still holds a
            // file; the process is ours to end either way.
            let clean = Command::new("fusermount").arg("-uq").arg(p).status();
            if !clean.is_ok_and(|s| s.success()) {
                let _ = Command::new("fusermount").arg("-uqz").arg(p).status();
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && !matches!(c.try_wait(), Ok(Some(_))) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;
    use crate::sys::{open_direct, zero_file};

    /// Every O_DIRECT|O_DSYNC write (how Vellum's carrier writes) reaches the mount as one
    /// FUSE write and one durable request, the one the emulation delays. Counts, not timings.
    #[test]
    fn an_odsync_direct_write_is_one_write_and_one_durable_request() {
        if let Some(why) = unavailable() {
            eprintln!("skipped: {why}");
            return;
        }
        // The backing directory may be on tmpfs: the mount strips O_DIRECT from its opens.
        let dir = tempfile::tempdir().unwrap();
        let mounts = Mounts::start(dir.path(), 1, 1.0).unwrap();
        let path = mounts.points[0].join("carrier");
        zero_file(&path, 1 << 20).unwrap();
        let file = open_direct(&path, true).unwrap();
        let buf = vellum_engine::carrier::AlignedBuf::zeroed(4096, 4096);
        let before = mounts.counts()[0];
        let n = 20;
        for i in 0..n {
            std::os::unix::fs::FileExt::write_all_at(&file, buf.as_slice(), i * 4096).unwrap();
        }
        let d = mounts.counts()[0] - before;
        drop(file);
        drop(mounts);
        assert_eq!(d.writes as u64, n, "{d:?}");
        assert_eq!(d.durable as u64, n, "{d:?}");
    }
}
