//! What the black-box CLI tests share: running the built `vellum`, expecting success, or a
//! refusal that is one clear line (never a panic), and test bytes.

#![allow(dead_code)] // each test binary uses a part
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::Path;
use std::process::{Command, Output};

/// Runs the built `vellum` with `args` and the environment `env` added.
pub fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vellum"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run vellum")
}

/// Runs `vellum` and expects success; returns its stdout.
pub fn ok(args: &[&str], env: &[(&str, &str)]) -> Vec<u8> {
    let out = run(args, env);
    assert!(
        out.status.success(),
        "vellum {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The stderr of a failed run, checked: one line, no panic. Returns the line.
pub fn one_line(args: &[&str], out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "vellum {args:?} should fail");
    assert!(
        !err.contains("panicked") && !err.contains("internal error") && !err.contains("backtrace"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line, got: {err}");
    err
}

/// A path as the `&str` a command line takes.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `len` bytes that differ from block to block (a misplaced block shows).
pub fn pattern(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
