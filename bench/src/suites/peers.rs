//! Peer engines (feature `peers`): raft-engine 0.4 (stock, and with log recycling) and redb.

use std::path::Path;

use raft_engine::{Config, Engine, LogBatch, MessageExt, ReadableSize};
use raft_proto::eraftpb::Entry;

use super::appender::Appender;
use super::e;

/// raft-engine's view of a raft-proto entry (its index), for `LogBatch::add_entries`.
#[derive(Clone)]
pub(crate) struct M;

impl MessageExt for M {
    type Entry = Entry;
    fn index(e: &Entry) -> u64 {
        e.index
    }
}

struct RaftEngine {
    engine: Engine,
    next: u64,
    name: String,
    /// The next append's entries.
    ready: Vec<Entry>,
}

impl Appender for RaftEngine {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn prepare(&mut self, count: usize, len: usize) {
        self.ready = (0..count as u64)
            .map(|i| Entry {
                index: self.next + i,
                term: 1,
                data: crate::payload(len, self.next + i).into(),
                ..Entry::default()
            })
            .collect();
        self.next += count as u64;
    }
    fn write(&mut self) {
        let entries = std::mem::take(&mut self.ready);
        let mut batch = LogBatch::default();
        batch.add_entries::<M>(1, &entries).unwrap_or_else(|e| panic!("raft-engine batch: {e}"));
        self.engine.write(&mut batch, true).unwrap_or_else(|e| panic!("raft-engine write: {e}"));
    }
}

struct Redb {
    db: redb::Database,
    next: u64,
    /// The next append's value and how many entries hold it.
    ready: (Vec<u8>, usize),
}

const TABLE: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("log");

impl Appender for Redb {
    fn name(&self) -> String {
        "redb (Durability::Immediate)".into()
    }
    fn prepare(&mut self, count: usize, len: usize) {
        self.ready = (crate::payload(len, self.next), count);
    }
    fn write(&mut self) {
        let (value, count) = std::mem::take(&mut self.ready);
        let mut tx = self.db.begin_write().unwrap_or_else(|e| panic!("redb begin: {e}"));
        tx.set_durability(redb::Durability::Immediate);
        {
            let mut t = tx.open_table(TABLE).unwrap_or_else(|e| panic!("redb table: {e}"));
            for i in 0..count as u64 {
                t.insert(self.next + i, value.as_slice())
                    .unwrap_or_else(|e| panic!("redb insert: {e}"));
            }
        }
        tx.commit().unwrap_or_else(|e| panic!("redb commit: {e}"));
        self.next += count as u64;
    }
}

fn raft_engine(dir: &Path, recycle: bool) -> Result<RaftEngine, String> {
    let path = dir.join(if recycle { "raft-engine-recycle" } else { "raft-engine" });
    let _ = std::fs::remove_dir_all(&path);
    let config = Config {
        dir: path.to_string_lossy().into_owned(),
        enable_log_recycle: recycle,
        // Recycling needs a budget of pre-formatted files.
        prefill_for_recycle: recycle,
        purge_threshold: ReadableSize::gb(1),
        ..Config::default()
    };
    let engine = Engine::open(config).map_err(e("raft-engine open"))?;
    let name = if recycle { "raft-engine 0.4 (log recycling)" } else { "raft-engine 0.4 (stock)" };
    Ok(RaftEngine { engine, next: 1, name: name.into(), ready: Vec::new() })
}

pub fn appenders(dir: &Path) -> Result<Vec<Box<dyn Appender>>, String> {
    let redb_path = dir.join("redb.db");
    let _ = std::fs::remove_file(&redb_path);
    let db = redb::Database::create(&redb_path).map_err(e("redb"))?;
    Ok(vec![
        Box::new(raft_engine(dir, false)?),
        Box::new(raft_engine(dir, true)?),
        Box::new(Redb { db, next: 1, ready: (Vec::new(), 0) }),
    ])
}
