//! The harness's workload, independent of openraft and its version: `clients` tasks, each
//! writing one small value at a time through a write function the caller supplies, for a
//! fixed time. An openraft 0.10 adapter reuses it as is (this file is also compiled into
//! `bench/harness-memstore`, so it names nothing from this crate).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Concurrent client tasks, each with one write outstanding.
    pub clients: usize,
    /// How long clients start new writes; writes in flight at the end are waited for.
    pub duration: Duration,
    pub value_bytes: usize,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Writes that completed.
    pub writes: u64,
    /// From the first write's start to the last write's end.
    pub secs: f64,
    /// Every write's latency, microseconds, client by client.
    pub latencies_us: Vec<f64>,
}

impl Outcome {
    pub fn writes_per_sec(&self) -> f64 {
        self.writes as f64 / self.secs
    }
}

/// A value for client `client`'s `seq`-th write: varied bytes, so that nothing can dedupe.
pub fn value(client: usize, seq: u64, len: usize) -> Vec<u8> {
    let mut x = (client as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Runs `load`: every client calls `write(client, seq, value)` and awaits it, again and again,
/// until the duration is over. The first failed write ends the run with its error.
pub async fn drive<W, F>(load: Load, write: W) -> Result<Outcome, String>
where
    W: Fn(usize, u64, Vec<u8>) -> F + Send + Sync + 'static,
    F: Future<Output = Result<(), String>> + Send + 'static,
{
    let write = Arc::new(write);
    let started = Instant::now();
    let deadline = started + load.duration;
    let tasks: Vec<_> = (0..load.clients)
        .map(|client| {
            let write = Arc::clone(&write);
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut seq = 0;
                while Instant::now() < deadline {
                    let v = value(client, seq, load.value_bytes);
                    let at = Instant::now();
                    write(client, seq, v).await?;
                    latencies.push(at.elapsed().as_secs_f64() * 1e6);
                    seq += 1;
                }
                Ok::<_, String>(latencies)
            })
        })
        .collect();
    let mut out = Outcome::default();
    for t in tasks {
        let latencies = t.await.map_err(|e| format!("client task: {e}"))??;
        out.writes += latencies.len() as u64;
        out.latencies_us.extend(latencies);
    }
    out.secs = started.elapsed().as_secs_f64();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    fn load(clients: usize) -> Load {
        Load { clients, duration: Duration::from_millis(30), value_bytes: 8 }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_write_is_counted_once_with_its_latency() {
        let seen = Arc::new(AtomicU64::new(0));
        let s = Arc::clone(&seen);
        let out = drive(load(4), move |_, _, value| {
            assert_eq!(value.len(), 8);
            s.fetch_add(1, Ordering::Relaxed);
            async {
                tokio::task::yield_now().await;
                Ok(())
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.writes, seen.load(Ordering::Relaxed));
        assert_eq!(out.latencies_us.len() as u64, out.writes);
        assert!(out.writes >= 4, "every client writes at least once: {}", out.writes);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_write_ends_the_run_with_its_error() {
        let out = drive(load(2), |client, seq, _| async move {
            if client == 1 && seq == 3 { Err("refused".to_string()) } else { Ok(()) }
        })
        .await;
        assert_eq!(out.err().as_deref(), Some("refused"));
    }
}
