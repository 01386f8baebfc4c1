//! What several engine test binaries share: seeded test bytes and loop devices attached for a
//! test (root only) and detached by a guard.

#![allow(dead_code)] // each test binary uses a part
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;

/// Deterministic bytes: `len` of them, seeded (a misplaced block shows).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A loop device this test attached; detached on drop (and only that one).
pub struct Loop {
    pub dev: PathBuf,
}

impl Loop {
    /// Attaches `file` with direct IO; `None` (the reason printed) without root or `losetup`.
    pub fn attach(file: &Path) -> Option<Loop> {
        let uid = Command::new("id").arg("-u").output().ok()?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            eprintln!("skipped: attaching a loop device needs root (CI runs as root)");
            return None;
        }
        let out = match Command::new("losetup")
            .args(["--show", "-f", "--direct-io=on"])
            .arg(file)
            .output()
        {
            Ok(out) => out,
            Err(e) => {
                eprintln!("skipped: losetup is missing: {e}");
                return None;
            }
        };
        if !out.status.success() {
            eprintln!("skipped: losetup failed: {}", String::from_utf8_lossy(&out.stderr));
            return None;
        }
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        Some(Loop { dev })
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

/// Loop-device tests run one at a time: `losetup` locks the devices it probes.
pub static LOOP_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());
