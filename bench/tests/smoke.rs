//! A `--scale 0.05` run of every suite, so the benchmarks never rot. Timings are not checked;
//! device-operation counts are (they are stable), where the run has root for loop devices.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use vellum_bench::{Options, SUITES, run};

#[test]
fn every_suite_runs_at_small_scale() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-smoke");
    let _ = std::fs::remove_dir_all(&dir);
    let opts = Options {
        dir: dir.clone(),
        reps: 2,
        scale: 0.05,
        progress: false,
        slow_disk_ms: 8.0,
        archive_bytes: Some(8 << 20),
    };
    let names: Vec<String> = SUITES.iter().map(|s| (*s).to_string()).collect();
    let results = run(&names, &opts).unwrap();
    assert_eq!(results.len(), SUITES.len());
    for r in &results {
        eprintln!("{}: {} measurements, skipped: {:?}", r.name, r.measurements.len(), r.skipped);
        for m in &r.measurements {
            assert!(m.summary().n > 0, "{} / {} / {} has no samples", r.name, m.case, m.variant);
        }
    }
    let devops = results.iter().find(|r| r.name == "devops").unwrap();
    if let Some(v) = devops.find("durable 4 KiB append", "vellum log (device carrier)") {
        assert!(
            (v.extra("data writes/op").unwrap() - 1.0).abs() < 0.05,
            "one data write per durable append"
        );
        let floor = devops.find("durable 4 KiB append", "raw O_DIRECT pwrite + fdatasync").unwrap();
        assert!(
            (v.extra("flushes/op").unwrap() - floor.extra("flushes/op").unwrap()).abs() < 0.05,
            "the flushes of one write + fdatasync, no more"
        );
        let dsync = devops.find("durable 4 KiB append", "raw O_DIRECT|O_DSYNC pwrite").unwrap();
        assert!(
            v.extra("flushes/op").unwrap() <= dsync.extra("flushes/op").unwrap() + 0.05,
            "never more flushes than the kernel's own O_DSYNC write"
        );
        let cal = devops
            .find("calibration", "fdatasync of the device")
            .unwrap()
            .extra("flushes/op")
            .unwrap();
        let commit = devops
            .find("metadata commit", "vellum volume commit")
            .unwrap()
            .extra("flushes/op")
            .unwrap();
        assert!(
            (commit / cal - 2.0).abs() < 0.1,
            "two barriers per metadata commit ({commit} / {cal})"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
