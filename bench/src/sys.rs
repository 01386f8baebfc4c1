//! The machine side of the benchmarks: raw files, block-device counters, loop devices.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Microseconds `f` took.
pub fn time_us(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64() * 1e6
}

/// Writes back everything dirty on the machine (untimed, between variants), so one engine's
/// buffered writes do not land in the next one's timings.
pub fn settle() {
    let _ = std::process::Command::new("sync").status();
}

/// The file system type of the mount holding `path` (from /proc/self/mountinfo).
pub fn fs_type(path: &Path) -> Option<String> {
    let path = std::fs::canonicalize(path).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(usize, String)> = None;
    for line in info.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS... - FSTYPE SOURCE SUPER_OPTIONS
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(mount), Some(dash)) = (fields.get(4), fields.iter().position(|f| *f == "-"))
        else {
            continue;
        };
        let mount = mount.replace("\\040", " ");
        if path.starts_with(&mount) && best.as_ref().is_none_or(|(len, _)| mount.len() >= *len) {
            best = fields.get(dash + 1).map(|t| (mount.len(), (*t).to_string()));
        }
    }
    best.map(|(_, t)| t)
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A file of `len` zeros, written for real and synced (no holes, no unwritten extents).
pub fn zero_file(path: &Path, len: u64) -> std::io::Result<()> {
    let f = File::create(path)?;
    let chunk = vec![0u8; 4 << 20];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(chunk.len() as u64) as usize;
        f.write_all_at(&chunk[..n], at)?;
        at += n as u64;
    }
    f.sync_all()
}

/// Opens `path` with O_DIRECT (and O_DSYNC when `dsync`).
pub fn open_direct(path: &Path, dsync: bool) -> std::io::Result<File> {
    let mut flags = libc::O_DIRECT;
    if dsync {
        flags |= libc::O_DSYNC;
    }
    OpenOptions::new().read(true).write(true).custom_flags(flags).open(path)
}

/// Counters of a block device from `/sys/block/<dev>/stat`.
#[derive(Debug, Clone, Copy, Default)]
pub struct BlockStat {
    /// Writes completed (on current kernels a flush also counts as a zero-byte write).
    pub writes: u64,
    pub sectors_written: u64,
    /// Flush requests completed.
    pub flushes: u64,
}

impl BlockStat {
    pub fn read(dev: &str) -> Option<BlockStat> {
        let text = std::fs::read_to_string(format!("/sys/block/{dev}/stat")).ok()?;
        let f: Vec<u64> = text.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        Some(BlockStat {
            writes: *f.get(4)?,
            sectors_written: *f.get(6)?,
            flushes: f.get(15).copied().unwrap_or(0),
        })
    }

    /// Data writes, flushes and bytes since `before`, per `ops`.
    pub fn per_op(self, before: BlockStat, ops: u64) -> (f64, f64, f64) {
        let flushes = self.flushes.saturating_sub(before.flushes);
        let writes = self.writes.saturating_sub(before.writes);
        // The kernel counts each flush request as a write too; report data writes.
        let data = writes.saturating_sub(flushes.div_ceil(2).min(writes));
        let ops = ops.max(1) as f64;
        (
            data as f64 / ops,
            flushes as f64 / ops,
            (self.sectors_written - before.sectors_written) as f64 * 512.0 / ops,
        )
    }
}

/// A loop device over a file, attached for the run and detached (only it) afterwards.
pub struct Loop {
    pub dev: PathBuf,
    mount: Option<PathBuf>,
}

impl Loop {
    /// Attaches `file` with direct IO; `None` (with the reason) without root or losetup.
    pub fn attach(file: &Path) -> Result<Loop, String> {
        if !is_root() {
            return Err("needs root to attach a loop device".into());
        }
        let out = Command::new("losetup")
            .args(["--show", "-f", "--direct-io=on"])
            .arg(file)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!("losetup: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        // A visible volatile cache, so the flushes that FUA emulation needs are counted.
        let _ = std::fs::write(
            format!("/sys/block/{}/queue/write_cache", Loop::name_of(&dev)),
            "write back",
        );
        Ok(Loop { dev, mount: None })
    }

    fn name_of(dev: &Path) -> String {
        dev.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    pub fn name(&self) -> String {
        Loop::name_of(&self.dev)
    }

    pub fn stat(&self) -> BlockStat {
        BlockStat::read(&self.name()).unwrap_or_default()
    }

    /// Makes an ext4 file system on the device and mounts it at `at`.
    pub fn mount_ext4(&mut self, at: &Path) -> Result<(), String> {
        std::fs::create_dir_all(at).map_err(|e| e.to_string())?;
        let ok = |c: &mut Command| c.status().is_ok_and(|s| s.success());
        if !ok(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .arg(&self.dev))
        {
            return Err("mkfs.ext4 failed".into());
        }
        if !ok(Command::new("mount").arg(&self.dev).arg(at)) {
            return Err("mount failed".into());
        }
        self.mount = Some(at.to_path_buf());
        Ok(())
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        if let Some(m) = self.mount.take() {
            let _ = Command::new("umount").arg(&m).status();
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

/// Whether `/sys/block/<dev>/queue/fua` says the device takes FUA writes.
pub fn has_fua(dev: &str) -> Option<bool> {
    std::fs::read_to_string(format!("/sys/block/{dev}/queue/fua")).ok().map(|s| s.trim() == "1")
}

/// Requests issued to a block device, read from the kernel's `block:block_rq_issue`
/// tracepoint in a private tracefs instance (root only). Unlike `/sys/block/<dev>/stat`,
/// which counts an emulated FUA write as two writes and two flushes, this sees what was sent:
/// each data write and each flush request once.
pub struct Trace {
    instance: PathBuf,
}

/// What a [`Trace`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Issued {
    pub data_writes: u64,
    /// Data writes that carried FUA (the device took them without a flush).
    pub fua_writes: u64,
    pub flushes: u64,
    pub bytes: u64,
}

impl Issued {
    /// Per-operation data writes, flushes and bytes.
    pub fn per_op(self, ops: u64) -> (f64, f64, f64) {
        let ops = ops.max(1) as f64;
        (self.data_writes as f64 / ops, self.flushes as f64 / ops, self.bytes as f64 / ops)
    }
}

impl Trace {
    const ROOT: &'static str = "/sys/kernel/tracing";

    /// A private instance, mounting tracefs if needed; `Err` says why not.
    pub fn new() -> Result<Trace, String> {
        let root = Path::new(Trace::ROOT);
        if !root.join("instances").exists() {
            let ok = Command::new("mount")
                .args(["-t", "tracefs", "nodev", Trace::ROOT])
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return Err("tracefs is not available".into());
            }
        }
        let instance = root.join("instances").join(format!("vellum-bench-{}", std::process::id()));
        if !instance.exists() {
            std::fs::create_dir(&instance).map_err(|e| format!("tracefs instance: {e}"))?;
        }
        if !instance.join("events/block/block_rq_issue").exists() {
            let _ = std::fs::remove_dir(&instance);
            return Err("no block_rq_issue tracepoint".into());
        }
        Ok(Trace { instance })
    }

    /// Counts the requests issued to `dev` while `f` runs.
    pub fn count(&self, dev: &Path, f: impl FnOnce()) -> Result<Issued, String> {
        use std::os::unix::fs::MetadataExt;
        let rdev = std::fs::metadata(dev).map_err(|e| e.to_string())?.rdev();
        let kdev = (u64::from(libc::major(rdev)) << 20) | u64::from(libc::minor(rdev));
        let event = self.instance.join("events/block/block_rq_issue");
        let w = |p: PathBuf, v: &str| {
            std::fs::write(&p, v).map_err(|e| format!("{}: {e}", p.display()))
        };
        w(self.instance.join("buffer_size_kb"), "8192")?;
        w(event.join("filter"), &format!("dev == {kdev}"))?;
        w(self.instance.join("trace"), "")?;
        w(event.join("enable"), "1")?;
        f();
        w(event.join("enable"), "0")?;
        let text =
            std::fs::read_to_string(self.instance.join("trace")).map_err(|e| e.to_string())?;
        let mut seen = Issued::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((_, rest)) = line.split_once("block_rq_issue: ") else { continue };
            let mut it = rest.split_whitespace();
            let (_dev, rwbs, bytes) = (it.next(), it.next().unwrap_or(""), it.next());
            let bytes: u64 = bytes.and_then(|b| b.parse().ok()).unwrap_or(0);
            if rwbs.contains('W') && bytes > 0 {
                seen.data_writes += 1;
                seen.bytes += bytes;
                if rwbs.trim_start_matches('F').contains('F') {
                    seen.fua_writes += 1;
                }
            } else if rwbs.starts_with('F') {
                seen.flushes += 1;
            }
        }
        Ok(seen)
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.instance);
    }
}

/// Per-operation device requests: from the tracepoint when there is one (exact), else from
/// the kernel's counters; both are kept.
#[derive(Clone, Copy)]
pub struct Counts {
    /// Data writes, flushes, bytes per operation (traced if possible, else counters).
    pub ops: (f64, f64, f64),
    pub fua: f64,
    /// `/sys/block/<dev>/stat`: writes and flushes per operation, as the kernel counts them.
    pub stat: (f64, f64),
}

pub fn counted(lo: &Loop, trace: Option<&Trace>, ops: u64, f: impl FnOnce()) -> Counts {
    let before: BlockStat = lo.stat();
    let traced = if let Some(t) = trace {
        Some(t.count(&lo.dev, f))
    } else {
        f();
        None
    };
    let stat = lo.stat();
    let n = ops.max(1) as f64;
    let raw = (
        stat.writes.saturating_sub(before.writes) as f64 / n,
        stat.flushes.saturating_sub(before.flushes) as f64 / n,
    );
    match traced {
        Some(Ok(seen)) => {
            Counts { ops: seen.per_op(ops), fua: seen.fua_writes as f64 / n, stat: raw }
        }
        _ => Counts { ops: stat.per_op(before, ops), fua: 0.0, stat: raw },
    }
}

/// The machine's CPU time so far (`/proc/stat`, all CPUs): (busy, total), in clock ticks.
pub fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    let total: u64 = v.iter().sum();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// This process's threads' CPU time at one moment, by thread id: (name, nanoseconds on a
/// CPU), from `/proc/self/task/*/{comm,schedstat}`. The scheduler's own count, in
/// nanoseconds: `stat`'s clock ticks round each thread down to 10 ms, which loses most of the
/// time of hundreds of threads that each run a little.
pub struct ThreadCpu(std::collections::HashMap<u64, (String, u64)>);

/// Reads [`ThreadCpu`] now.
pub fn thread_cpu_ns() -> ThreadCpu {
    let mut threads = std::collections::HashMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return ThreadCpu(threads) };
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse::<u64>().ok()) else {
            continue;
        };
        // A thread may end between the listing and the reads: skip it.
        let (Ok(comm), Ok(sched)) = (
            std::fs::read_to_string(task.path().join("comm")),
            std::fs::read_to_string(task.path().join("schedstat")),
        ) else {
            continue;
        };
        // "run-ns wait-ns slices".
        let Some(ns) = sched.split_whitespace().next().and_then(|f| f.parse::<u64>().ok()) else {
            continue;
        };
        threads.insert(tid, (comm.trim_end().to_string(), ns));
    }
    ThreadCpu(threads)
}

/// The CPU nanoseconds this process's threads used since `before` (a [`thread_cpu_ns`]
/// reading): (those whose name `chosen` accepts, all). A thread that started since counts
/// whole; one that ended since is not counted (its time is lost with it), so read across a
/// window in which the threads of interest live.
pub fn thread_cpu_ns_since(before: &ThreadCpu, chosen: impl Fn(&str) -> bool) -> (u64, u64) {
    let mut named = 0;
    let mut all = 0;
    for (tid, (name, ns)) in thread_cpu_ns().0 {
        let used = ns.saturating_sub(before.0.get(&tid).map_or(0, |(_, t)| *t));
        all += used;
        if chosen(&name) {
            named += used;
        }
    }
    (named, all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_thread_that_ran_is_counted_and_one_that_did_not_is_not() {
        let before = thread_cpu_ns();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let (spun, done) = std::sync::mpsc::channel::<()>();
        let spinner = std::thread::Builder::new()
            .name("sys-test-spin".into())
            .spawn(move || {
                // Work until told to stop, so the thread lives across the second reading.
                let mut x = 0u64;
                for i in 0..5_000_000u64 {
                    x = x.wrapping_mul(31).wrapping_add(i);
                }
                std::hint::black_box(x);
                spun.send(()).unwrap();
                wait.recv().unwrap();
            })
            .unwrap();
        done.recv().unwrap();
        let (spinning, all) = thread_cpu_ns_since(&before, |name| name == "sys-test-spin");
        let (nobody, _) = thread_cpu_ns_since(&before, |name| name == "no-such-thread");
        go.send(()).unwrap();
        spinner.join().unwrap();
        assert!(spinning > 0, "the spinning thread's CPU time is counted");
        assert!(all >= spinning, "every thread includes the named one");
        assert_eq!(nobody, 0);
    }
}
