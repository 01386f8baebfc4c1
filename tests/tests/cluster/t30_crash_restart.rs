//! kill -9 the leader: a new leader, no acknowledged write lost, the killed node catches up;
//! then stop and restart all three: still nothing lost.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, phase};

#[test]
fn no_acknowledged_write_is_lost_across_kill_and_restart() {
    let mut c = Cluster::new(3);
    phase("start");
    c.start_all();
    c.wait_ready();
    phase("1,000 writes through any node, 8 clients");
    let acked: Vec<usize> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let c = &c;
                s.spawn(move || {
                    let mut ok = Vec::new();
                    for k in (t..1000).step_by(8) {
                        if c.put(&c.nodes[k % 3], &format!("key-{k}"), &format!("value-{k}")) {
                            ok.push(k);
                        }
                    }
                    ok
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(acked.len(), 1000, "every write was acknowledged");
    let old = c.leader();
    phase(&format!("kill -9 the leader (node {old})"));
    c.by_id(old).kill();
    let started = Instant::now();
    let new = c.leader();
    assert_ne!(new, old);
    eprintln!("new leader {new} after {:.2} s", started.elapsed().as_secs_f64());
    phase("every acknowledged write reads back linearizably from a survivor");
    let survivor = c.nodes.iter().find(|n| n.id != old).unwrap();
    // `leader()` returns as soon as one node leads; the survivor may still point at the dead
    // leader (or at none) until the new leader's first AppendEntries reaches it, and would
    // answer those reads with a retryable 502 / 503, which is not a lost write.
    let deadline = Instant::now() + Duration::from_secs(10);
    while c
        .get(&survivor.url("/v1/cluster/status"))
        .and_then(|r| r.json::<serde_json::Value>().ok())
        .and_then(|v| v["leader"].as_u64())
        != Some(new)
    {
        assert!(Instant::now() < deadline, "node {} does not follow node {new}", survivor.id);
        std::thread::sleep(Duration::from_millis(20));
    }
    let lost: Vec<usize> = acked
        .iter()
        .copied()
        .filter(|k| {
            c.read_settled(survivor, &format!("key-{k}")).as_deref()
                != Some(format!("value-{k}").as_str())
        })
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged writes lost after kill -9: {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    phase("more writes while the old leader is down");
    for k in 1000..1100 {
        assert!(c.put(survivor, &format!("key-{k}"), &format!("value-{k}")));
    }
    phase(&format!("restart node {old}; it catches up"));
    c.by_id(old).start();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let node = c.nodes.iter().find(|n| n.id == old).unwrap();
        if c.read(node, "key-1099", true).as_deref() == Some("value-1099") {
            break;
        }
        assert!(Instant::now() < deadline, "node {old} did not catch up; {}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    phase("stop all three (SIGTERM) and restart them");
    for n in &mut c.nodes {
        n.stop();
    }
    c.start_all();
    c.wait_ready();
    let node = &c.nodes[0];
    let lost: Vec<usize> = (0..1100)
        .filter(|k| {
            c.read_settled(node, &format!("key-{k}")).as_deref()
                != Some(format!("value-{k}").as_str())
        })
        .collect();
    assert!(lost.is_empty(), "{} writes lost across a full restart", lost.len());
    phase("the volumes are clean after SIGTERM");
    for n in &mut c.nodes {
        n.stop();
        let out = std::process::Command::new(crate::harness::vellum_bin())
            .arg("check")
            .arg(&n.volume)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "check of node {}: {}",
            n.id,
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// `--volume-size` (and the segment size derived from it) applies to new volumes: a node
/// restarted with another value reopens its volume and its log as they are.
#[test]
fn a_node_reopens_its_volume_whatever_volume_size_says() {
    let mut c = Cluster::new(1);
    c.nodes[0].extra.extend(["--volume-size".into(), "64MiB".into()]);
    c.start_all();
    c.wait_ready();
    assert!(c.put(&c.nodes[0], "k", "v"));
    c.nodes[0].stop();
    for size in [None, Some("256MiB")] {
        c.nodes[0].extra.truncate(2); // --initial-cluster SPEC; the harness adds 128MiB
        if let Some(size) = size {
            c.nodes[0].extra.extend(["--volume-size".into(), size.into()]);
        }
        c.nodes[0].start();
        c.wait_ready();
        assert_eq!(c.read(&c.nodes[0], "k", false).as_deref(), Some("v"), "{}", c.logs());
        assert!(c.put(&c.nodes[0], "k", "v"));
        c.nodes[0].stop();
    }
}
