//! `vellum-harness-memstore CLIENTS SECS WARM_SECS VALUE_BYTES`: the `harness` suite's
//! workload on three openraft 0.9.25 nodes with openraft-memstore, one JSON line per client
//! count on stdout. `CLIENTS` is a comma-separated list.

// The workload and the network are the suite's own files, so both sides run the same code.
#[path = "../../src/suites/harness/net09.rs"]
#[allow(dead_code)]
mod net09;
#[path = "../../src/suites/harness/workload.rs"]
#[allow(dead_code)]
mod workload;

use std::sync::Arc;
use std::time::Duration;

use openraft::storage::Adaptor;
use openraft_memstore::{ClientRequest, MemStore, TypeConfig};
use workload::{Load, drive};

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> T {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or_else(|| {
        eprintln!("usage: vellum-harness-memstore CLIENTS SECS WARM_SECS VALUE_BYTES ({what})");
        std::process::exit(2)
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let clients: Vec<usize> = args
        .first()
        .map(|a| a.split(',').filter_map(|c| c.parse().ok()).collect())
        .unwrap_or_default();
    let secs: f64 = arg(&args, 1, "SECS");
    let warm: f64 = arg(&args, 2, "WARM_SECS");
    let value_bytes: usize = arg(&args, 3, "VALUE_BYTES");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    if let Err(why) = rt.block_on(run(&clients, secs, warm, value_bytes)) {
        eprintln!("vellum-harness-memstore: {why}");
        std::process::exit(1);
    }
}

async fn run(clients: &[usize], secs: f64, warm: f64, value_bytes: usize) -> Result<(), String> {
    let stores = (0..3).map(|_| Adaptor::new(Arc::new(MemStore::new()))).collect();
    let cluster = net09::Cluster::<TypeConfig>::start(stores, |_| ()).await?;
    for &n in clients {
        let raft = cluster.leader().clone();
        let write = Arc::new(move |client: usize, seq: u64, value: Vec<u8>| {
            let raft = raft.clone();
            // The memstore request carries a string: the value's bytes as hex digits of half
            // the length keep its size at `value_bytes`.
            let status: String =
                value[..value.len() / 2].iter().map(|b| format!("{b:02x}")).collect();
            let req =
                ClientRequest { client: format!("c{client}-{}", seq % 256), serial: seq, status };
            async move { raft.client_write(req).await.map(drop).map_err(|e| e.to_string()) }
        });
        let load = |s: f64| Load { clients: n, duration: Duration::from_secs_f64(s), value_bytes };
        let w = Arc::clone(&write);
        drive(load(warm), move |c, s, v| w(c, s, v)).await?;
        let first = cluster.last_log_index();
        let out = drive(load(secs), move |c, s, v| write(c, s, v)).await?;
        let entries = cluster.last_log_index() - first;
        let line = serde_json::json!({
            "clients": n,
            "writes": out.writes,
            "secs": out.secs,
            "entries_per_write": entries as f64 / out.writes.max(1) as f64,
            // Latencies only where they are reported (one client), to keep the line short.
            "latencies_us": if n == 1 { out.latencies_us } else { Vec::new() },
        });
        println!("{line}");
    }
    cluster.shutdown().await;
    Ok(())
}
