//! The deploy files: the local cluster script starts, serves and stops only its own nodes;
//! `promtool check config` and `promtool test rules` pass; `systemd-analyze verify` accepts the
//! unit (pointed at the built binary). Tools that are not installed are reported and skipped.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::harness::{free_port, phase, vellum_bin};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

#[test]
fn local_cluster_script_starts_and_stops_its_own_nodes() {
    let dir = tempfile::tempdir().unwrap();
    // The script takes BASE+1..3, BASE+11..13 and BASE+21..23 (metrics): take twenty-four
    // consecutive ports from the harness (below the ephemeral range, and handed to no other
    // test of this process).
    let base = loop {
        let ports: Vec<u16> = (0..24).map(|_| free_port()).collect();
        if ports[23].checked_sub(ports[0]) == Some(23) {
            break ports[0];
        }
    };
    let out = Command::new("bash")
        .arg(repo().join("deploy/local-cluster.sh"))
        .arg(dir.path().join("c"))
        .env("VELLUM_BIN", vellum_bin())
        .env("BASE_PORT", base.to_string())
        .env("LOCAL_CLUSTER_NO_WAIT", "1")
        .env("VOLUME_SIZE", "64MiB")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let logs: String = (1..=3)
        .map(|i| {
            let log = std::fs::read_to_string(dir.path().join(format!("c/node{i}.log")));
            format!("\n== node {i} ==\n{}", log.unwrap_or_default())
        })
        .collect();
    assert!(
        out.status.success(),
        "local-cluster.sh failed: {stdout}{}{logs}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("node 3: api"), "{stdout}");
    assert!(stdout.contains("stopped"));
    for i in 1..=3 {
        assert!(!dir.path().join(format!("c/node{i}.pid")).exists(), "pid files are cleaned up");
        let check = Command::new(vellum_bin())
            .arg("check")
            .arg(dir.path().join(format!("c/node{i}.vlm")))
            .output()
            .unwrap();
        assert!(check.status.success(), "node {i} volume was not closed cleanly");
    }
}

#[test]
fn prometheus_config_and_alert_rules_pass_promtool() {
    if !have("promtool") {
        eprintln!("skipped: promtool is not installed (Debian package prometheus)");
        return;
    }
    phase("promtool check config / test rules");
    for args in [
        vec!["check", "config", "deploy/prometheus/prometheus.yml"],
        vec!["test", "rules", "deploy/prometheus/alerts_test.yml"],
    ] {
        let out = Command::new("promtool").args(&args).current_dir(repo()).output().unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_systemd_unit_verifies() {
    if !have("systemd-analyze") {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(repo().join("deploy/systemd/vellum@.service")).unwrap();
    let unit = unit.replace("/usr/local/bin/vellum", &vellum_bin().display().to_string());
    std::fs::write(dir.path().join("vellum@.service"), unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "./vellum@1.service"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("vellum@"), "systemd-analyze verify: {text}");
}
