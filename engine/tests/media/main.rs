//! The media conformance suite on every medium (issue 24): `conformance::run_suite` on
//! `local://` (buffered, and direct IO with write-through), `memory:`, `virtual://` and
//! `s3://` (on moto, the test server: `object_storage`).
//!
//! Run: `cargo test --release -p vellum-engine --test media`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod conformance;

use conformance::run_suite;
use vellum_engine::Error;
use vellum_engine::error::Knob;
use vellum_engine::media::{
    Bare, CarrierOptions, Location, MediaOptions, Medium, open_or_create_volume, open_str,
};
use vellum_engine::{FormatOptions, VolumeOptions};

/// A fresh, empty directory of the host file system, kept for the test's lifetime.
fn host_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn local_buffered() {
    let dir = host_dir();
    let url = format!("local://{}", dir.path().display());
    run_suite(&open_str(&url, Bare::Local, MediaOptions::default()).unwrap());
}

#[test]
fn local_direct_io_and_write_through() {
    let dir = host_dir();
    let url = format!("local://{}", dir.path().display());
    let options =
        MediaOptions { direct_io: Some(true), write_through: Some(true), read_only: false };
    match open_str(&url, Bare::Local, options) {
        Ok(target) => run_suite(&target),
        Err(e) => panic!("local:// with direct IO and write-through: {e}"),
    }
}

#[test]
fn memory() {
    // One namespace per process: each test takes a directory of its own.
    let target = open_str("memory:/conformance", Bare::Local, MediaOptions::default()).unwrap();
    target.media.mkdir(&target.path).unwrap();
    run_suite(&target);
}

/// A fresh journaled volume in `dir`, closed, and its `virtual://` URL.
fn fresh_volume(dir: &std::path::Path) -> String {
    let path = dir.join("media.vlm");
    let format = FormatOptions::journaled(96 << 20);
    let (volume, created) = open_or_create_volume(
        &Location::Path(path.clone()),
        &format,
        CarrierOptions::PRODUCTION,
        VolumeOptions::default(),
    )
    .or_else(|_| {
        // A host file system that refuses O_DIRECT.
        open_or_create_volume(
            &Location::Path(path.clone()),
            &format,
            CarrierOptions::BUFFERED,
            VolumeOptions::default(),
        )
    })
    .unwrap();
    assert!(created);
    volume.close().unwrap();
    format!("virtual://{}", path.display())
}

#[test]
fn virtual_volume() {
    let dir = host_dir();
    let url = fresh_volume(dir.path());
    let target = open_str(&url, Bare::Volume, MediaOptions::default()).unwrap();
    assert_eq!(target.media.medium(), Medium::Virtual);
    assert_eq!(target.path, "/");
    run_suite(&target);
    drop(target);
    // The last handle closed the volume cleanly: it opens again, with what the suite wrote.
    let volume = vellum_engine::media::open_volume(&dir.path().join("media.vlm"), true).unwrap();
    assert!(volume.stat("/large_file/large").unwrap().size > 5 << 20);
}

#[test]
fn virtual_volume_inner_path() {
    let dir = host_dir();
    let url = fresh_volume(dir.path());
    let target = open_str(&url, Bare::Volume, MediaOptions::default()).unwrap();
    target.media.mkdir("/inner").unwrap();
    drop(target);
    let target = open_str(&format!("{url}:/inner"), Bare::Volume, MediaOptions::default()).unwrap();
    assert_eq!(target.path, "/inner");
    run_suite(&target);
}

/// `s3://` on a local S3-compatible server (moto; skipped with the reason when it is not
/// installed, a failure under `VELLUM_REQUIRE_S3=1`).
#[test]
fn object_storage() {
    use vellum_engine::media::testing::{ENV, MotoServer, set_s3_env};
    let Some(server) = MotoServer::start() else { return };
    let status = server.create_bucket("conformance").unwrap();
    assert!(status.contains("200"), "create bucket: {status}");
    set_s3_env(&ENV);
    let url = server.url("conformance", "suite");
    let target = open_str(&url, Bare::Local, MediaOptions::default()).unwrap();
    assert_eq!(target.media.medium(), Medium::Object);
    assert_eq!(target.path, "/suite");
    run_suite(&target);
    // Inherent write-through asked for is fine; meaningless direct IO is refused.
    let wt = MediaOptions { write_through: Some(true), ..MediaOptions::default() };
    open_str(&url, Bare::Local, wt).unwrap();
    let direct = MediaOptions { direct_io: Some(true), ..MediaOptions::default() };
    let e = open_str(&url, Bare::Local, direct).unwrap_err();
    assert!(matches!(e, Error::KnobMeaningless { knob: Knob::DirectIo, .. }), "{e}");
}

/// Meaningless knobs are errors when a medium is opened with them; implemented ones work.
#[test]
fn knobs_when_opening() {
    let wt = MediaOptions { write_through: Some(true), ..MediaOptions::default() };
    let direct = MediaOptions { direct_io: Some(true), ..MediaOptions::default() };
    for (options, knob) in [(wt, Knob::WriteThrough), (direct, Knob::DirectIo)] {
        let e = open_str("memory:", Bare::Local, options).unwrap_err();
        assert!(matches!(e, Error::KnobMeaningless { knob: k, .. } if k == knob), "{e}");
        assert!(e.to_string().contains("physically meaningless"), "{e}");
    }
    let dir = host_dir();
    let url = format!("local://{}", dir.path().display());
    let target = open_str(&url, Bare::Local, wt).unwrap();
    let file = target.media.create(&format!("{}/durable", target.path)).unwrap();
    file.write_at(b"on disk when it returns", 0).unwrap();
    file.close().unwrap();
    let vol = fresh_volume(dir.path());
    let target = open_str(&vol, Bare::Volume, wt).unwrap();
    target.media.put("/f", b"x", vellum_engine::media::PutMode::Create).unwrap();
}

/// Read-only media refuse writes and still read.
#[test]
fn read_only() {
    let dir = host_dir();
    let url = format!("local://{}", dir.path().display());
    let rw = open_str(&url, Bare::Local, MediaOptions::default()).unwrap();
    let path = format!("{}/f", rw.path);
    rw.media.put(&path, b"x", vellum_engine::media::PutMode::Create).unwrap();
    let ro = MediaOptions { read_only: true, ..MediaOptions::default() };
    let target = open_str(&url, Bare::Local, ro).unwrap();
    assert!(matches!(target.media.create(&path), Err(Error::ReadOnly)));
    assert!(target.media.open(&path).unwrap().write_at(b"y", 0).is_err());
    assert_eq!(target.media.get(&path).unwrap().0, b"x");
    let memory = open_str("memory:", Bare::Local, ro).unwrap();
    assert!(matches!(memory.media.mkdir("/ro"), Err(Error::ReadOnly)));
}

/// docs/MEDIA.md's knob table says what `Medium::knob_support` says, cell for cell.
#[test]
fn the_knob_table_matches_the_code() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/MEDIA.md")).unwrap();
    let table = doc
        .split("<!-- knob-table: begin")
        .nth(1)
        .and_then(|rest| rest.split("<!-- knob-table: end -->").next())
        .expect("docs/MEDIA.md has the knob table between its markers");
    let rows: Vec<Vec<String>> = table
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|--"))
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .collect();
    let media = [Medium::Local, Medium::Memory, Medium::Virtual, Medium::Object];
    let header: Vec<String> = media.iter().map(|m| format!("`{}`", m.scheme())).collect();
    assert_eq!(rows[0][1..], header[..], "the table's columns");
    let knobs = [Knob::DirectIo, Knob::WriteThrough];
    assert_eq!(rows.len(), 1 + knobs.len(), "one row per knob of MediaOptions");
    for (row, knob) in rows[1..].iter().zip(knobs) {
        assert_eq!(row[0], knob.to_string());
        for (cell, medium) in row[1..].iter().zip(media) {
            assert_eq!(*cell, medium.knob_support(knob).to_string(), "{knob} on {medium}");
        }
    }
}
