//! openraft 0.10 `RaftStateMachine` and `RaftSnapshotBuilder` on the shared KV machine
//! ([`KvMachine`]): entries arrive as a stream, each with the responder of the client that
//! proposed it; snapshot metas carry no id.

use std::io;
use std::io::Cursor;
use std::time::Instant;

use futures_util::{Stream, StreamExt};
use openraft010::storage::{EntryResponder, RaftStateMachine};
use openraft010::type_config::alias::{LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft010::{
    EntryPayload, OptionalSend, RaftSnapshotBuilder, SnapshotMeta, StoredMembership,
};

use super::{SnapshotData, TypeConfig};
use crate::error::Error;
use crate::kv::machine::{Flavor, KvMachine};
use crate::kv::types::KvResponse;
use crate::metrics as m;

/// openraft 0.10's types.
#[derive(Debug)]
pub enum V010 {}

impl Flavor for V010 {
    type LogId = LogIdOf<TypeConfig>;
    type Membership = StoredMembershipOf<TypeConfig>;
    type SnapshotMeta = SnapshotMetaOf<TypeConfig>;
    fn meta_position(meta: &Self::SnapshotMeta) -> (Option<Self::LogId>, Self::Membership) {
        (meta.last_log_id, meta.last_membership.clone())
    }
}

fn io_error(e: Error) -> io::Error {
    io::Error::other(e)
}

impl RaftSnapshotBuilder<TypeConfig> for KvMachine<V010> {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<TypeConfig, SnapshotData>, io::Error> {
        let (snap, _) = self.snapshot_data();
        let meta = SnapshotMeta {
            last_log_id: snap.last_applied,
            last_membership: snap.membership.clone(),
        };
        let bytes = self.build(&meta, &snap).await.map_err(io_error)?;
        Ok(SnapshotOf::<TypeConfig, SnapshotData> { meta, snapshot: Cursor::new(bytes) })
    }
}

impl RaftStateMachine<TypeConfig> for KvMachine<V010> {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<TypeConfig>>, StoredMembershipOf<TypeConfig>), io::Error> {
        let s = self.read_state();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        let started = Instant::now();
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let applied = {
                let mut s = self.write_state();
                s.last_applied = Some(entry.log_id);
                match entry.payload {
                    EntryPayload::Blank => 0,
                    EntryPayload::Normal(req) => s.apply_ops(req.ops),
                    EntryPayload::Membership(mem) => {
                        s.membership = StoredMembership::new(Some(entry.log_id), mem);
                        0
                    }
                }
            };
            if let Some(responder) = responder {
                responder.send(KvResponse { applied });
            }
        }
        metrics::histogram!(m::APPLY_DURATION).record(started.elapsed().as_secs_f64());
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<TypeConfig>,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        self.install(meta, snapshot.into_inner()).await.map_err(io_error)
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TypeConfig, SnapshotData>>, io::Error> {
        let current = self.current_snapshot().map_err(io_error)?;
        Ok(current.map(|(meta, data)| SnapshotOf::<TypeConfig, SnapshotData> {
            meta,
            snapshot: Cursor::new(data),
        }))
    }
}
