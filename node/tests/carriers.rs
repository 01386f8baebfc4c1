//! Volumes of several carriers through the built `vellum` binary, black-box (issue 25):
//! `format --carrier`, `carrier add`, `carrier replace`, `carrier list`, and `info` and
//! `check` of every member; each bad input is one clear line, a non-zero exit, and changes
//! nothing.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{pattern, s};

fn vellum(args: &[&str]) -> Output {
    common::run(args, &[])
}

fn ok(args: &[&str]) -> Vec<u8> {
    common::ok(args, &[])
}

fn text(args: &[&str]) -> String {
    String::from_utf8(ok(args)).unwrap()
}

/// Runs a command that must fail: exit non-zero, one stderr line that is no usage error of
/// the argument parser, no panic. Returns the line.
fn refused(args: &[&str]) -> String {
    let err = common::one_line(args, &common::run(args, &[]));
    let lower = err.to_lowercase();
    assert!(
        !lower.contains("unrecognized")
            && !lower.contains("unexpected argument")
            && !lower.contains("usage:"),
        "a refusal, not a usage error: {err}"
    );
    err
}

fn members(vol: &str) -> Vec<serde_json::Value> {
    let doc: serde_json::Value = serde_json::from_slice(&ok(&["info", vol, "--json"])).unwrap();
    doc["members"].as_array().cloned().unwrap_or_default()
}

fn check_clean(vol: &str) {
    let out = text(&["check", vol]);
    assert!(out.contains("no errors"), "{out}");
}

#[test]
fn a_volume_formatted_over_two_carriers_holds_a_file_bigger_than_one() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.vlm"), dir.path().join("b.vlm"));
    let out = text(&["format", s(&a), "--size", "16MiB", "--carrier", s(&b)]);
    assert!(out.contains("formatted 2 members"), "{out}");
    assert_eq!(std::fs::metadata(&b).unwrap().len(), 16 << 20, "member 1 is preallocated");
    let m = members(s(&a));
    assert_eq!(m.len(), 2, "{m:?}");
    assert_eq!(m[1]["index"], 1);
    assert_eq!(m[1]["first_block"], m[0]["blocks"], "concatenated: member 1 follows member 0");
    assert_eq!(m[1]["medium"], "file");
    assert!(m[1]["path"].as_str().unwrap().ends_with("b.vlm"), "{m:?}");

    // 20 MB spans both 16 MiB members.
    let host = dir.path().join("big");
    let data = pattern(20_000_000);
    std::fs::write(&host, &data).unwrap();
    ok(&["cp", s(&host), &format!("{}:/big", s(&a))]);
    assert!(ok(&["cat", s(&a), "/big"]) == data, "reads back identical");
    check_clean(s(&a));
    let check = text(&["check", s(&a)]);
    assert!(check.contains("member 1: superblock A: valid"), "{check}");
    let info = text(&["info", s(&a)]);
    assert!(info.contains("members:     2 (concatenated, not mirrored)"), "{info}");
    // A later member's carrier shows its identity and points at member 0.
    let member = text(&["info", s(&b)]);
    assert!(member.contains("member:      1 of the volume"), "{member}");
    assert!(member.contains("a.vlm"), "{member}");
    let list = text(&["carrier", "list", s(&a)]);
    assert_eq!(list.lines().count(), 2, "{list}");

    // A volume of one member keeps its output: no member lines.
    let single = dir.path().join("single.vlm");
    ok(&["format", s(&single), "--size", "16MiB"]);
    assert!(!text(&["info", s(&single)]).contains("members:"));
    assert_eq!(members(s(&single)).len(), 1);
    assert!(!text(&["check", s(&single)]).contains("member 1"));
}

#[test]
fn format_with_carriers_refuses_thin_sparse_grow_and_a_carrier_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.vlm"), dir.path().join("b.vlm"));
    for flag in ["--thin", "--sparse", "--grow"] {
        let err = refused(&["format", s(&a), "--size", "16MiB", flag, "--carrier", s(&b)]);
        assert!(err.contains(flag) && err.contains("--carrier"), "{err}");
    }
    let err = refused(&["format", s(&a), "--size", "16MiB", "--carrier", s(&a)]);
    assert!(err.contains("twice"), "{err}");
    let err = refused(&["format", s(&a), "--size", "100KiB", "--carrier", s(&b)]);
    assert!(!err.is_empty());
    assert!(!a.exists() && !b.exists(), "a refused format leaves no carrier behind");
    // A later carrier that holds data: refused before the first is created.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, pattern(1 << 20)).unwrap();
    let err =
        refused(&["format", s(&a), "--size", "16MiB", "--carrier", s(&b), "--carrier", s(&junk)]);
    assert!(err.contains("does not look empty"), "{err}");
    assert!(!a.exists() && !b.exists(), "nothing created before the refusal");
    assert!(std::fs::read(&junk).unwrap() == pattern(1 << 20), "the data is untouched");
}

#[test]
fn carrier_add_then_replace_keeps_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (dir.path().join("a.vlm"), dir.path().join("b.vlm"), dir.path().join("c.vlm"));
    let v = s(&a);
    ok(&["format", v, "--size", "16MiB"]);
    // No --size: the size of the last member.
    let out = text(&["carrier", "add", v, s(&b)]);
    assert!(out.contains("added member 1"), "{out}");
    assert_eq!(std::fs::metadata(&b).unwrap().len(), 16 << 20);
    assert_eq!(members(v).len(), 2);
    let host = dir.path().join("big");
    let data = pattern(20_000_000);
    std::fs::write(&host, &data).unwrap();
    ok(&["cp", s(&host), &format!("{v}:/big")]);
    check_clean(v);

    let before = members(v);
    let out = text(&["carrier", "replace", v, s(&b), s(&c)]);
    assert!(out.contains("replaced"), "{out}");
    let after = members(v);
    assert_eq!(after.len(), 2);
    assert!(after[1]["path"].as_str().unwrap().ends_with("c.vlm"), "{after:?}");
    assert_ne!(after[1]["uuid"], before[1]["uuid"], "the copy is a new member UUID");
    assert_eq!(after[1]["first_block"], before[1]["first_block"]);
    assert!(ok(&["cat", v, "/big"]) == data, "reads back identical after replace");
    check_clean(v);

    // The old carrier is no member any more; member 0 is copied offline instead. Neither
    // refusal writes to the volume (its superblocks keep their generation).
    let superblocks = |p: &Path| std::fs::read(p).unwrap()[..8192].to_vec();
    let head = superblocks(&a);
    let err = refused(&["carrier", "replace", v, s(&b), s(&dir.path().join("d.vlm"))]);
    assert!(err.contains("is not a member"), "{err}");
    let err = refused(&["carrier", "replace", v, v, s(&dir.path().join("d.vlm"))]);
    assert!(err.contains("member 0") && err.contains("dd"), "{err}");
    assert!(!dir.path().join("d.vlm").exists(), "a refused replace creates nothing");
    assert!(superblocks(&a) == head, "a refused replace writes nothing");
    assert_eq!(members(v), after);
    assert!(ok(&["cat", v, "/big"]) == data);
}

#[test]
fn bad_additions_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.vlm"), dir.path().join("b.vlm"));
    let v = s(&a);
    ok(&["format", v, "--size", "16MiB"]);
    ok(&["carrier", "add", v, s(&b), "--size", "8MiB"]);
    let host = dir.path().join("f");
    let data = pattern(100_000);
    std::fs::write(&host, &data).unwrap();
    ok(&["cp", s(&host), &format!("{v}:/f")]);
    let before = members(v);
    let b_bytes = std::fs::read(&b).unwrap();

    // Smaller than 64 blocks: refused before the file is created.
    let small = dir.path().join("small.vlm");
    let err = refused(&["carrier", "add", v, s(&small), "--size", "100KiB"]);
    assert!(err.contains("smaller than a member may be"), "{err}");
    assert!(!small.exists(), "nothing created");

    // A member of another volume: that volume is untouched.
    let other = dir.path().join("other.vlm");
    ok(&["format", s(&other), "--size", "16MiB"]);
    let other_bytes = std::fs::read(&other).unwrap();
    let err = refused(&["carrier", "add", v, s(&other)]);
    assert!(err.contains("belongs to another volume"), "{err}");
    assert!(std::fs::read(&other).unwrap() == other_bytes, "the other volume is unchanged");

    // The same path twice, and the volume itself.
    let err = refused(&["carrier", "add", v, s(&b)]);
    assert!(err.contains("already member 1"), "{err}");
    let err = refused(&["carrier", "add", v, v]);
    assert!(err.contains("already member 0"), "{err}");
    assert!(std::fs::read(&b).unwrap() == b_bytes, "member 1 is unchanged");

    // A file that is not empty and holds no volume.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, pattern(1 << 20)).unwrap();
    let err = refused(&["carrier", "add", v, s(&junk)]);
    assert!(err.contains("not empty"), "{err}");

    // A path whose directory does not exist; a volume that does not exist.
    refused(&["carrier", "add", v, s(&dir.path().join("no/such/dir.vlm")), "--size", "1MiB"]);
    refused(&["carrier", "add", s(&dir.path().join("none.vlm")), s(&small), "--size", "1MiB"]);
    assert!(!small.exists());

    assert_eq!(members(v), before, "the member table is unchanged");
    assert!(ok(&["cat", v, "/f"]) == data);
    check_clean(v);
}

#[test]
fn a_missing_member_is_named_by_info_and_check_and_open() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.vlm"), dir.path().join("b.vlm"));
    let v = s(&a);
    ok(&["format", v, "--size", "16MiB", "--carrier", s(&b)]);
    let moved = dir.path().join("moved.vlm");
    std::fs::rename(&b, &moved).unwrap();
    let info = text(&["info", v]);
    assert!(info.contains("member 1 of the volume is missing"), "{info}");
    let out = vellum(&["check", v]);
    assert_eq!(out.status.code(), Some(1), "the check could not complete");
    assert!(String::from_utf8_lossy(&out.stdout).contains("b.vlm"));
    let err = refused(&["ls", v]);
    assert!(err.contains("b.vlm") && err.contains("missing"), "{err}");
    std::fs::rename(&moved, &b).unwrap();
    check_clean(v);
}

/// A loop device over a new backing file of `bytes`, detached on drop.
struct Loop {
    dev: String,
}

impl Loop {
    /// `None` when not root or `losetup` is unavailable (the test is skipped).
    fn attach(backing: &Path, bytes: u64) -> Option<Loop> {
        use std::os::unix::fs::MetadataExt;
        // /proc/self belongs to the process's effective user.
        if std::fs::metadata("/proc/self").ok()?.uid() != 0 {
            return None;
        }
        let f = std::fs::File::create(backing).ok()?;
        f.set_len(bytes).ok()?;
        let out = Command::new("losetup").args(["--find", "--show"]).arg(backing).output().ok()?;
        if !out.status.success() {
            return None;
        }
        let dev = String::from_utf8(out.stdout).ok()?.trim().to_owned();
        Some(Loop { dev })
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

#[test]
fn a_volume_over_a_file_and_loop_devices_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let Some(first) = Loop::attach(&dir.path().join("loop1.img"), 16 << 20) else {
        eprintln!("skipped: needs root and losetup");
        return;
    };
    let Some(second) = Loop::attach(&dir.path().join("loop2.img"), 16 << 20) else {
        eprintln!("skipped: needs root and losetup");
        return;
    };
    let (a, b) = (dir.path().join("a.vlm"), dir.path().join("b.vlm"));
    let v = s(&a);
    // Member 0 a file, member 1 a loop device, member 2 a file.
    ok(&["format", v, "--size", "16MiB", "--carrier", &first.dev]);
    ok(&["carrier", "add", v, s(&b), "--size", "16MiB"]);
    let m = members(v);
    assert_eq!(m.len(), 3, "{m:?}");
    assert_eq!(m[1]["path"], first.dev.as_str());
    assert_ne!(m[1]["medium"], "file", "{m:?}");
    let host = dir.path().join("big");
    let data = pattern(40_000_000);
    std::fs::write(&host, &data).unwrap();
    ok(&["cp", s(&host), &format!("{v}:/big")]);

    // A device that holds something is refused unless --force.
    let out = Command::new("dd")
        .args(["if=/dev/urandom", "bs=1M", "count=1", "conv=fsync"])
        .arg(format!("of={}", second.dev))
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = refused(&["carrier", "replace", v, s(&b), &second.dev]);
    assert!(err.contains("--force"), "{err}");

    // The file member moves to the second loop device.
    ok(&["carrier", "replace", v, s(&b), &second.dev, "--force"]);
    let m = members(v);
    assert_eq!(m[2]["path"], second.dev.as_str());
    assert!(ok(&["cat", v, "/big"]) == data, "reads back identical after replace");
    check_clean(v);
}
