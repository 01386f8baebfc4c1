//! The etcd peer of the `cluster` suite: a 3-member etcd 3.4 cluster on loopback (Debian's
//! `etcd-server`), written through its v3 JSON gateway (`POST /v3/kv/put`, key and value in
//! base64), the leader found through `POST /v3/maintenance/status`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Cluster, Kind, client, port};
use crate::suites::e;

/// `etcd` on the PATH (or Debian's path), if installed.
pub fn binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("etcd"))
        .find(|p| p.is_file())
}

/// Starts three members with their data directories at `data` (one per member; wiped first)
/// and their logs in `logs`, and waits until every member is healthy and a leader is known.
pub fn start(bin: &Path, logs: &Path, data: &[PathBuf]) -> Result<Cluster, String> {
    std::fs::create_dir_all(logs).map_err(e("etcd log dir"))?;
    let ports: Vec<(u16, u16)> = data.iter().map(|_| (port(), port())).collect();
    let initial: Vec<String> =
        ports.iter().enumerate().map(|(i, (_, p))| format!("e{i}=http://127.0.0.1:{p}")).collect();
    let mut cluster =
        Cluster { children: Vec::new(), apis: Vec::new(), kind: Kind::Etcd, api_tls: None };
    for (i, ((api, peer), dir)) in ports.iter().zip(data).enumerate() {
        let _ = std::fs::remove_dir_all(dir);
        let log = std::fs::File::create(logs.join(format!("etcd{i}.log"))).map_err(e("log"))?;
        let (api, peer) = (format!("http://127.0.0.1:{api}"), format!("http://127.0.0.1:{peer}"));
        let child = Command::new(bin)
            .args(["--name", &format!("e{i}"), "--data-dir", &dir.display().to_string()])
            .args(["--listen-client-urls", &api, "--advertise-client-urls", &api])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial.join(","), "--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "vellum-bench", "--logger", "zap"])
            .args(["--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(e("log"))?)
            .stderr(log)
            .spawn()
            .map_err(e("spawn etcd"))?;
        cluster.children.push(child);
        cluster.apis.push(api);
    }
    let http = client();
    let healthy = |a: &String| {
        http.get(format!("{a}/health"))
            .send()
            .and_then(reqwest::blocking::Response::json::<serde_json::Value>)
            .is_ok_and(|v| v["health"] == "true")
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cluster.apis.iter().all(healthy) {
        if Instant::now() > deadline {
            return Err(format!("etcd cluster (logs in {}) not healthy in 60 s", logs.display()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(cluster)
}

/// The index of the leader among `c.apis`: the member whose own id is the leader id its
/// peers report (ids are uint64 rendered as JSON strings by the gateway).
pub fn leader(c: &Cluster) -> Option<usize> {
    let http = client();
    let status: Vec<serde_json::Value> = c
        .apis
        .iter()
        .map(|a| {
            http.post(format!("{a}/v3/maintenance/status"))
                .body("{}")
                .send()
                .and_then(reqwest::blocking::Response::json::<serde_json::Value>)
                .unwrap_or_default()
        })
        .collect();
    let leader = status.iter().find_map(|s| s["leader"].as_str().filter(|l| *l != "0"))?;
    status.iter().position(|s| s["header"]["member_id"].as_str() == Some(leader))
}

/// The body of one `/v3/kv/put`: the gateway takes bytes fields as base64.
pub fn put_body(key: &str, value_base64: &str) -> String {
    format!("{{\"key\":\"{}\",\"value\":\"{value_base64}\"}}", base64(key.as_bytes()))
}

/// Standard base64 with padding (RFC 4648 section 4).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let at = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = (at(0) << 16) | (at(1) << 8) | at(2);
        // A chunk of k bytes gives k + 1 digits; the rest of the quantum is padding.
        for digit in 0..4 {
            if digit <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * digit)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        let vectors =
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg==")];
        for (plain, coded) in vectors {
            assert_eq!(base64(plain.as_bytes()), coded);
        }
        assert_eq!(base64(&[0xff, 0xfe, 0xfd]), "//79");
        assert_eq!(put_body("k", "dg=="), r#"{"key":"aw==","value":"dg=="}"#);
    }
}
