//! Writing the ring: one batch per commit, and the filler blocks (FORMAT.md, "Journaled
//! commit and checkpoint").
//!
//! A batch is written at the ring's head after the data its records reference is durable
//! (the caller's ordered-mode duty): with one durable write per contiguous run of ring
//! blocks under write-through (a run wraps at most once), otherwise plain writes and one
//! barrier. It is the commit point: when this returns Ok the batch is durable, and only then
//! does the caller advance the ring.
//!
//! Fillers go over the whole ring with one write and a barrier: when the journal is enabled,
//! and when a destroyed region is filled again after its loss is durable.

use crate::error::Result;
use crate::format::consts::Uuid;
use crate::io::{Area, Session};
use crate::layout::Layout;

use super::block::blocks_for;
use super::ring::Ring;

/// Writes the batch `payload` (`record::encode_batch`) as batch `ring.next_sequence` at the
/// ring's head and makes it durable. Returns the blocks it took (the caller advances the
/// ring by them).
pub(crate) fn write_batch(
    session: &Session<'_>,
    ring: &Ring,
    layout: &Layout,
    uuid: &Uuid,
    payload: &[u8],
    write_through: bool,
) -> Result<u64> {
    assert!(payload.len() > 4, "an empty batch is not written");
    let blocks = blocks_for(payload.len(), layout.block_size);
    let runs = ring.seal(layout, uuid, payload);
    assert!(runs.len() <= 2, "a batch wraps the ring at most once");
    if write_through {
        for (offset, buf) in &runs {
            session.write_durable(Area::Journal, *offset, buf.as_slice())?;
        }
    } else {
        for (offset, buf) in &runs {
            session.write(Area::Journal, *offset, buf.as_slice())?;
        }
        session.barrier()?;
    }
    Ok(blocks)
}

/// Fills the whole ring with filler blocks and makes them durable.
pub(crate) fn write_fillers(session: &Session<'_>, ring: &Ring, layout: &Layout, uuid: &Uuid) -> Result<()> {
    let (offset, buf) = ring.fillers(layout, uuid);
    session.write(Area::Journal, offset, buf.as_slice())?;
    session.barrier()
}
