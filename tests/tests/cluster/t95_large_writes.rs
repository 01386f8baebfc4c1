//! A burst of large client writes must not kill the log: 64 concurrent 1 MiB PUTs (64 MiB,
//! four of the 16 MiB log segments a 256 MiB volume gets) all commit, values larger than a
//! segment (80 MiB) get 413 before they reach Raft, and every node keeps serving afterwards.
//! The volume holds the 64 MiB map twice (a snapshot is written beside the current one): on
//! a volume that cannot, later puts get 507 instead (`t180_full_volume.rs`).

use std::time::Duration;

use crate::harness::{Cluster, phase};

/// Sends a PUT that declares a `len`-byte body and reads the answer before sending any of
/// it: the node answers from the declared length (a client that streams the whole body may
/// see the connection closed under it instead of the 413).
fn declared_put(port: u16, path: &str, len: usize) -> u16 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&head);
    line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

#[test]
fn a_burst_of_large_writes_commits_and_oversized_values_get_413() {
    let mut c = Cluster::new(3);
    for n in &mut c.nodes {
        n.extra.extend(["--volume-size".to_string(), "256MiB".to_string()]);
    }
    c.start_all();
    c.wait_ready();
    let leader = c.leader();
    let via = c.nodes.iter().position(|n| n.id == leader).unwrap();
    phase("64 concurrent PUTs of 1,000,000 bytes, and three of 80 MiB");
    let client = crate::harness::client_builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let codes: Vec<(usize, u16)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..67)
            .map(|i| {
                let (client, url) = (&client, c.nodes[via].url(&format!("/v1/kv/big{i}")));
                let api = c.nodes[via].api;
                s.spawn(move || {
                    if i >= 64 {
                        return (i, declared_put(api, &format!("/v1/kv/big{i}"), 80 << 20));
                    }
                    let body = vec![(i % 251) as u8; 1_000_000];
                    let status =
                        client.put(url).body(body).send().map_or(0, |r| r.status().as_u16());
                    (i, status)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, code) in &codes {
        let want = if *i < 64 { 200 } else { 413 };
        assert_eq!(*code, want, "PUT big{i}: {}", c.logs());
    }
    phase("every node keeps serving, and reads the values back");
    for n in &c.nodes {
        // A burst this size may cost an election (heartbeats wait behind 64 MiB of
        // replication on a small machine): a client retries a 503, and so does this.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut answer = None;
        while std::time::Instant::now() < deadline {
            let r = c.http.put(n.url("/v1/kv/after")).body(format!("from {}", n.id)).send();
            let got = r.map(|r| (r.status(), r.text().unwrap_or_default()));
            let done = got.as_ref().is_ok_and(|(s, _)| s.is_success());
            answer = Some(got);
            if done {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(
            answer.as_ref().is_some_and(|a| a.as_ref().is_ok_and(|(s, _)| s.is_success())),
            "node {} stopped serving writes: {answer:?} {}",
            n.id,
            c.logs()
        );
    }
    for i in [0, 31, 63] {
        let got =
            client.get(c.nodes[(i % 3) as usize].url(&format!("/v1/kv/big{i}"))).send().unwrap();
        assert!(got.status().is_success());
        let body = got.bytes().unwrap();
        assert!(body.len() == 1_000_000 && body.iter().all(|&b| b == (i % 251) as u8));
    }
    // Every PUT is its own proposal (openraft 0.10 shares log appends, not entries), counted
    // by the node that led when it was proposed.
    let committed: f64 = c
        .nodes
        .iter()
        .map(|n| {
            let metrics = c.get(&n.url("/metrics")).unwrap().text().unwrap();
            metrics
                .lines()
                .find(|l| l.starts_with("vellum_raft_proposals_total{result=\"committed\"}"))
                .and_then(|l| l.split_whitespace().last()?.parse::<f64>().ok())
                .unwrap_or_default()
        })
        .sum();
    assert!(committed >= 64.0, "the committed proposals are counted: {committed}");
    for n in &mut c.nodes {
        n.stop(); // a clean exit: nothing poisoned
    }
}
