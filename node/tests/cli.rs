//! The volume commands of the built `vellum` binary, black-box: every path works, and bad
//! input gets one clear line and a non-zero exit, never a panic.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn vellum(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vellum")).args(args).output().expect("run vellum")
}

fn ok(args: &[&str]) -> String {
    let out = vellum(args);
    assert!(
        out.status.success(),
        "vellum {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command that must fail: exit non-zero, one stderr line, no panic.
fn refused(args: &[&str]) -> String {
    let out = vellum(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "vellum {args:?} should fail");
    assert!(
        !err.contains("panicked") && !err.contains("internal error") && !err.contains("backtrace"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line, got: {err}");
    err
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_volume_commands_work_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("v.vlm");
    let v = s(&vol);
    ok(&["format", v, "--size", "32MiB", "--journal", "1MiB"]);
    ok(&["mkdir", v, "/a/b", "-p"]);
    let host = dir.path().join("host.txt");
    std::fs::write(&host, b"hello from the host").unwrap();
    ok(&["cp", s(&host), &format!("{v}:/a/b/file")]);
    assert_eq!(ok(&["cat", v, "/a/b/file"]), "hello from the host");
    assert!(ok(&["ls", v, "/a/b"]).contains("file"));
    assert!(ok(&["stat", v, "/a/b/file"]).contains("19 bytes"));
    ok(&["mv", v, "/a/b/file", "/a/renamed"]);
    let back = dir.path().join("back.txt");
    ok(&["cp", &format!("{v}:/a/renamed"), s(&back)]);
    assert_eq!(std::fs::read(&back).unwrap(), b"hello from the host");
    ok(&["cp", &format!("{v}:/a/renamed"), &format!("{v}:/copy")]);
    assert_eq!(ok(&["cat", v, "/copy"]), "hello from the host");
    ok(&["rm", v, "/a/renamed"]);
    refused(&["cat", v, "/a/renamed"]);
    let json = ok(&["info", v, "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["state"], "clean");
    assert_eq!(doc["geometry"]["journal"]["blocks"], 256);
    assert_eq!(doc["journal"]["state"], "enabled");
    assert_eq!(doc["slots"][0]["checksum_ok"], true);
    assert!(ok(&["info", v]).contains("adopted"));
    assert!(ok(&["check", v]).contains("no errors"));
}

#[test]
fn the_journal_switches_on_offline_once() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("v.vlm");
    let v = s(&vol);
    ok(&["format", v, "--size", "16MiB", "--journal-reserved", "256KiB"]);
    assert!(ok(&["info", v]).contains("reserved, off"));
    ok(&["mkdir", v, "/kept"]);
    assert!(ok(&["journal", "enable", v]).contains("ring of 64 blocks"));
    let doc: serde_json::Value = serde_json::from_str(&ok(&["info", v, "--json"])).unwrap();
    assert_eq!(doc["journal"]["enabled"], true);
    assert!(ok(&["ls", v, "/"]).contains("kept"));
    assert!(refused(&["journal", "enable", v]).contains("already enabled"));
    assert!(ok(&["journal", "ack", v]).contains("nothing to acknowledge"));
    let plain = dir.path().join("plain.vlm");
    ok(&["format", s(&plain), "--size", "16MiB", "--no-journal"]);
    assert!(refused(&["journal", "enable", s(&plain)]).contains("reserved region"));
    refused(&["format", s(&dir.path().join("x.vlm")), "--size", "16MiB", "--journal", "4KiB"]);
}

#[test]
fn a_growing_volume_grows_to_its_cap_and_no_further() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("g.vlm");
    let v = s(&vol);
    assert!(
        ok(&["format", v, "--size", "16MiB", "--grow", "--max-size", "64MiB"])
            .contains("grows to 64 MiB")
    );
    let before = std::fs::metadata(&vol).unwrap().len();
    let big = dir.path().join("big");
    std::fs::write(&big, vec![5u8; 20 << 20]).unwrap();
    ok(&["cp", s(&big), &format!("{v}:/big")]);
    assert!(std::fs::metadata(&vol).unwrap().len() > before, "the carrier grew");
    let huge = dir.path().join("huge");
    std::fs::write(&huge, vec![6u8; 60 << 20]).unwrap();
    assert!(refused(&["cp", s(&huge), &format!("{v}:/huge")]).contains("full"));
    assert_eq!(std::fs::metadata(&vol).unwrap().len(), 64 << 20, "grown to the cap, not past");
    assert!(ok(&["check", v]).contains("no errors"));
    assert!(!ok(&["ls", v, "/"]).contains("huge"), "no partial copy is left");
    assert_eq!(std::fs::read(&big).unwrap(), {
        let out = vellum(&["cat", v, "/big"]);
        out.stdout
    });
}

#[test]
fn check_exit_codes_follow_qemu_img() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("v.vlm");
    ok(&["format", s(&vol), "--size", "16MiB"]);
    assert_eq!(vellum(&["check", s(&vol)]).status.code(), Some(0));
    // Damage the image: flip a byte in every block of the image region.
    let mut bytes = std::fs::read(&vol).unwrap();
    for b in 3..67usize {
        bytes[b * 4096 + 100] ^= 0xFF;
    }
    std::fs::write(&vol, &bytes).unwrap();
    assert_eq!(vellum(&["check", s(&vol)]).status.code(), Some(2));
    assert_eq!(vellum(&["check", s(&dir.path().join("missing"))]).status.code(), Some(1));
}

#[test]
fn bad_input_gets_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("v.vlm");
    let v = s(&vol);
    assert!(refused(&["info", s(&dir.path().join("nope"))]).contains("no such file"));
    refused(&["format", v, "--size", "12 parsecs"]);
    refused(&["format", v, "--size", "64Q"]);
    assert!(refused(&["format", v]).contains("--size"));
    refused(&["format", v, "--size", "256KiB"]); // too small for a volume
    refused(&["format", v, "--size", "64MiB", "--block-size", "3000"]);
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![0x42u8; 1 << 20]).unwrap();
    assert!(refused(&["info", s(&junk)]).contains("not a Vellum volume"));
    assert!(refused(&["ls", s(&junk)]).contains("not a Vellum volume"));
    assert!(refused(&["format", s(&junk), "--size", "16MiB"]).contains("force"));
    ok(&["format", v, "--size", "16MiB"]);
    refused(&["mkdir", v, "relative"]);
    refused(&["mkdir", v, "/x/y"]);
    refused(&["cp", "/etc/hostname", "/tmp/nowhere"]);
    refused(&["stat", v, "/missing"]);
    // A volume held by another opener.
    let held = vellum_engine::Volume::open_path(
        &vol,
        vellum_engine::carrier::CarrierOptions::BUFFERED,
        vellum_engine::VolumeOptions::default(),
    )
    .unwrap();
    assert!(refused(&["ls", v]).contains("locked"));
    assert!(refused(&["mkdir", v, "/z"]).contains("locked"));
    held.close().unwrap();
    ok(&["mkdir", v, "/z"]);
}

#[test]
fn one_damaged_superblock_still_opens_two_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("v.vlm");
    let v = s(&vol);
    ok(&["format", v, "--size", "16MiB"]);
    ok(&["cp", "/etc/hostname", &format!("{v}:/h")]);
    let mut bytes = std::fs::read(&vol).unwrap();
    bytes[64..72].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef]);
    std::fs::write(&vol, &bytes).unwrap();
    assert_eq!(ok(&["cat", v, "/h"]).as_bytes(), std::fs::read("/etc/hostname").unwrap());
    let info = ok(&["info", v]);
    assert!(info.contains("superblock A: superblock A is corrupt"), "{info}");
    bytes[4096 + 64..4096 + 72].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef]);
    std::fs::write(&vol, &bytes).unwrap();
    refused(&["cat", v, "/h"]);
}

/// Runs `vellum args` and returns its output, or fails the test once it ran `limit` (killed
/// first: a node that does not refuse would serve forever).
fn within(limit: Duration, args: &[&str]) -> Output {
    within_env(limit, args, &[])
}

/// [`within`], with `env` set.
fn within_env(limit: Duration, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vellum"))
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vellum");
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "vellum {args:?} still ran after {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// A port free on loopback (released for the node to bind a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A journaled volume whose journal ring was destroyed: `vellum info` shows from which
/// journal sequence records are lost, and `vellum serve` refuses the volume (its raft log
/// may be rolled back) with exit code 3 and one line that says to replace the member; it
/// keeps refusing on the next start, while the loss is unacknowledged.
#[test]
fn serve_refuses_a_volume_whose_journal_was_destroyed() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("v.vlm");
    let v = s(&vol);
    ok(&["format", v, "--size", "32MiB", "--journal", "1MiB"]);
    // A raft log's directory, checkpointed (each command closes the volume cleanly), so it
    // survives the ring's destruction.
    ok(&["mkdir", v, "/raft"]);
    ok(&["mkdir", v, "/raft/log"]);
    let doc: serde_json::Value = serde_json::from_str(&ok(&["info", v, "--json"])).unwrap();
    assert_eq!(doc["journal"]["lost_from"], serde_json::Value::Null);
    let block = doc["geometry"]["block_size"].as_u64().unwrap() as usize;
    let start = doc["geometry"]["journal"]["start_block"].as_u64().unwrap() as usize * block;
    let len = doc["geometry"]["journal"]["blocks"].as_u64().unwrap() as usize * block;
    let mut bytes = std::fs::read(&vol).unwrap();
    bytes[start..start + len].fill(0xA5);
    std::fs::write(&vol, &bytes).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&ok(&["info", v, "--json"])).unwrap();
    assert_eq!(doc["journal"]["destroyed"], true);
    let lost = doc["journal"]["lost_from"].as_u64().expect("lost_from is reported");
    assert!(ok(&["info", v]).contains(&format!("records from sequence {lost} on")));
    for start in ["first", "second"] {
        let (api, raft) = (free_port(), free_port());
        let out = within(
            Duration::from_secs(60),
            &[
                "serve",
                "--id",
                "1",
                "--volume",
                v,
                "--api-addr",
                &format!("127.0.0.1:{api}"),
                "--raft-addr",
                &format!("127.0.0.1:{raft}"),
                "--initial-cluster",
                &format!("1=127.0.0.1:{raft}/127.0.0.1:{api}"),
            ],
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(3), "{start} start: {err}");
        let last = err.trim_end().lines().last().unwrap_or_default();
        assert!(last.starts_with("vellum: the volume's metadata journal was destroyed"), "{last}");
        assert!(last.contains(&format!("sequence {lost} on")), "{last}");
        assert!(last.contains("new member") && last.contains("fresh volume"), "{last}");
    }
    let doc: serde_json::Value = serde_json::from_str(&ok(&["info", v, "--json"])).unwrap();
    assert_eq!(doc["journal"]["lost_from"].as_u64(), Some(lost), "still flagged");
    // Acknowledging the loss of a volume that holds a raft log takes --force.
    let out = vellum(&["journal", "ack", v]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("holds a raft log") && err.contains("--force"), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&ok(&["info", v, "--json"])).unwrap();
    assert_eq!(doc["journal"]["lost_from"].as_u64(), Some(lost), "the refusal changed nothing");
    assert!(ok(&["journal", "ack", v, "--force"]).contains("journal loss acknowledged"));
}

fn vellum_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vellum"));
    cmd.args(args).env_remove("VELLUM_TOKEN").env_remove("VELLUM_INSECURE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run vellum")
}

/// A bearer token is not sent in the clear to a host off loopback: refused before connecting
/// unless --insecure, which warns; the token itself is never printed.
#[test]
fn a_token_is_not_sent_over_plain_http_off_loopback() {
    let secret = [("VELLUM_TOKEN", "s3cret-token")];
    let out = vellum_env(&["kv", "put", "k", "v", "--endpoint", "10.0.0.1:8080"], &secret);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("refusing to send the token over plain HTTP to 10.0.0.1:8080"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    // https://, loopback, or no token at all: no refusal (these fail only to connect).
    for (endpoint, env) in [
        ("https://127.0.0.1:1", &secret[..]),
        ("127.0.0.1:1", &secret[..]),
        ("http://[::ffff:127.0.0.1]:1", &secret[..]),
        ("10.0.0.1:8080", &[][..]),
    ] {
        let args = ["cluster", "status", "--endpoint", endpoint];
        let out = if endpoint.starts_with("10.") {
            // Without a token there is nothing to refuse; do not wait for 10.0.0.1.
            vellum_env(&["kv", "get", "k", "--endpoint", "http://no-such-host.invalid:1"], env)
        } else {
            vellum_env(&args, env)
        };
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("refusing to send the token"), "{endpoint}: {err}");
    }
    // --insecure (or VELLUM_INSECURE=1) sends it, with a warning.
    for (flag, env) in [(Some("--insecure"), vec![]), (None, vec![("VELLUM_INSECURE", "1")])] {
        let mut args = vec!["kv", "get", "k", "--endpoint", "http://no-such-host.invalid:1"];
        args.extend(flag);
        let env: Vec<_> = secret.iter().copied().chain(env).collect();
        let err = String::from_utf8_lossy(&vellum_env(&args, &env).stderr).into_owned();
        assert!(err.contains("warning: sending the token over plain HTTP"), "{err}");
        assert!(!err.contains("refusing") && !err.contains("s3cret"), "{err}");
    }
}

/// `--token` and `--join-token` on a command line (visible to every user) warn, naming the
/// environment variable to use; the environment variable does not.
#[test]
fn tokens_on_the_command_line_warn() {
    let out = vellum_env(&["kv", "get", "k", "--endpoint", "127.0.0.1:1", "--token", "abc"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--token on the command line") && err.contains("VELLUM_TOKEN"), "{err}");
    assert!(!err.contains("abc"), "{err}");
    let out =
        vellum_env(&["kv", "get", "k", "--endpoint", "127.0.0.1:1"], &[("VELLUM_TOKEN", "abc")]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("command line"));
    let err = serve_past_the_flags("127.0.0.1", &["--join-token=abc"], &[]);
    assert!(
        err.contains("--join-token on the command line") && err.contains("VELLUM_JOIN_TOKEN"),
        "{err}"
    );
    assert!(!err.contains("abc"), "{err}");
}

/// Boolean environment variables take 1/0 and true/false (`VELLUM_INSECURE=1` was refused as
/// "invalid value '1'").
#[test]
fn boolean_environment_variables_take_one_and_zero() {
    let serve =
        |insecure: &str| serve_past_the_flags("0.0.0.0", &[], &[("VELLUM_INSECURE", insecure)]);
    for off in ["0", "false"] {
        let err = serve(off);
        assert!(err.contains("refusing to serve plain HTTP off loopback"), "{off}: {err}");
    }
    for on in ["1", "true", "yes"] {
        let err = serve(on);
        assert!(
            !err.contains("invalid value") && !err.contains("refusing to serve"),
            "{on}: {err}"
        );
        assert!(err.contains("--initial-cluster"), "{on}: got past the flags: {err}");
    }
}

/// Runs `vellum serve` with `extra` flags and `env`, on a missing volume with a bad
/// `--initial-cluster`: a node that gets past its flags stops there, with one line about
/// `--initial-cluster`. Returns its stderr.
fn serve_past_the_flags(api_host: &str, extra: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let volume = dir.path().join("missing-dir").join("x.vlm");
    let api = format!("{api_host}:{}", free_port());
    let raft = format!("127.0.0.1:{}", free_port());
    let mut args = vec!["serve", "--id", "1", "--api-addr", &api, "--raft-addr", &raft];
    args.extend_from_slice(&["--volume", s(&volume), "--initial-cluster", "not-a-cluster"]);
    args.extend_from_slice(extra);
    let out = within_env(Duration::from_secs(30), &args, env);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `vellum args` with `stdin` as its standard input.
fn vellum_stdin(args: &[&str], stdin: &[u8]) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_vellum"))
        .args(args)
        .env_remove("VELLUM_ENDPOINTS")
        .env_remove("VELLUM_ENDPOINT")
        .env_remove("VELLUM_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vellum");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// `vellum format` journals new volumes by default, as `vellum serve` does; `--no-journal`
/// does not.
#[test]
fn format_journals_by_default_like_serve() {
    let dir = tempfile::tempdir().unwrap();
    let (j, n) = (dir.path().join("j.vlm"), dir.path().join("n.vlm"));
    assert!(ok(&["format", s(&j), "--size", "16MiB"]).contains("journal of 64 blocks"));
    let doc: serde_json::Value = serde_json::from_str(&ok(&["info", s(&j), "--json"])).unwrap();
    assert_eq!(doc["journal"]["enabled"], true);
    assert!(ok(&["format", s(&n), "--size", "16MiB", "--no-journal"]).contains("no journal"));
    refused(&["format", s(&n), "--size", "16MiB", "--no-journal", "--journal", "1MiB", "--force"]);
}

/// What a user can act on, never an internal temporary name: a missing parent, --force, a
/// missing directory or file in a volume, a missing volume.
#[test]
fn errors_name_what_the_user_can_fix() {
    let dir = tempfile::tempdir().unwrap();
    let err = refused(&["format", "/nonexistent/dir/x.vlm", "--size", "64MiB"]);
    assert!(err.contains("/nonexistent/dir does not exist"), "{err}");
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![7u8; 100_000]).unwrap();
    assert!(refused(&["format", s(&junk), "--size", "16MiB"]).contains("pass --force"));
    let vol = dir.path().join("v.vlm");
    let v = s(&vol);
    ok(&["format", v, "--size", "16MiB"]);
    let host = dir.path().join("h.txt");
    std::fs::write(&host, b"x").unwrap();
    let err = refused(&["cp", s(&host), &format!("{v}:/nodir/f")]);
    assert!(err.contains("/nodir does not exist") && !err.contains("tmp"), "{err}");
    let err = refused(&["cp", s(&host), &format!("{}/nodir/v.vlm:/f", dir.path().display())]);
    assert!(err.contains("nodir does not exist"), "{err}");
    let err = refused(&["cp", s(&host), &format!("{}/w.vlm:/f", dir.path().display())]);
    assert!(err.contains("no such volume"), "{err}");
    assert!(refused(&["ls", v, "/missing"]).contains("/missing does not exist in"));
    assert!(refused(&["cat", v, "/missing"]).contains("/missing does not exist in"));
    let err = refused(&["cp", &format!("{v}:/missing"), s(&dir.path().join("out"))]);
    assert!(err.contains("/missing does not exist in"), "{err}");
}

/// `vellum cp VOL:/f -` writes the file to standard output (and `-` as a source reads
/// standard input).
#[test]
fn cp_to_stdout_and_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("v.vlm");
    let v = s(&vol);
    ok(&["format", v, "--size", "16MiB"]);
    let out = vellum_stdin(&["cp", "-", &format!("{v}:/f")], b"bytes \x00\xff from stdin");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = vellum(&["cp", &format!("{v}:/f"), "-"]);
    assert!(out.status.success());
    assert_eq!(out.stdout, b"bytes \x00\xff from stdin");
    assert!(!std::path::Path::new("-").exists(), "no file named - was written");
}

/// Exit codes: 6 when no endpoint answers, each failed endpoint named on its own line; a
/// value comes from standard input when VALUE is absent or -.
#[test]
fn client_exit_codes_and_stdin_values() {
    let dead = "127.0.0.1:1,127.0.0.1:2";
    for args in [
        &["kv", "put", "k", "--endpoints", dead][..],
        &["kv", "put", "k", "-", "--endpoints", dead][..],
        &["kv", "get", "k", "--endpoints", dead][..],
        &["kv", "get", "--prefix", "a/", "--endpoints", dead][..],
        &["kv", "del", "k", "--endpoint", dead][..],
        &["cluster", "status", "--endpoints", dead][..],
        &["cluster", "promote", "4", "--endpoints", dead][..],
    ] {
        let out = vellum_stdin(args, b"from stdin");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(6), "{args:?}: {err}");
        let lines: Vec<&str> = err.trim_end().lines().collect();
        assert_eq!(lines.len(), 2, "{err}");
        assert!(lines[0].contains("127.0.0.1:1") && lines[1].contains("127.0.0.1:2"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = vellum(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("5 not found") && help.contains("6 unreachable"), "{help}");
}

/// A second demo on a directory another demo serves from is refused in one line, before it
/// touches a file.
#[test]
fn a_second_demo_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let lock = std::fs::File::create(dir.path().join("demo.lock")).unwrap();
    lock.try_lock().unwrap();
    std::fs::write(dir.path().join("node1.log"), b"kept").unwrap();
    let err = refused(&["demo", "--dir", s(dir.path()), "--no-wait"]);
    assert!(err.contains("another vellum demo is serving from"), "{err}");
    assert_eq!(std::fs::read(dir.path().join("node1.log")).unwrap(), b"kept");
}
