//! The member table of the IO layer: which carrier holds which blocks of the volume's block
//! space (FORMAT.md, "Members").
//!
//! A volume is one or more members concatenated, not mirrored: member `k`'s block `i` is the
//! volume's block `base_k + i`, and losing a member loses the volume. Everything above the IO
//! layer addresses the one block space (byte offset = block × block size); this table turns
//! an offset into a member and an offset on that member's carrier, so nothing above learns
//! that there is more than one carrier.
//!
//! Invariants (asserted: a request that breaks one would overwrite a superblock or another
//! member's bitmap, so it stops the process before the write):
//! - every request lies inside one member, and inside its area *of that member* (the bitmap
//!   request inside that member's bitmap region, image and data inside its allocatable
//!   blocks); a request never spans two members;
//! - superblock requests go to member 0, the commit point; later members' superblocks are
//!   written by the code that adds or replaces a member, before the member joins;
//! - the journal lies on member 0 (later members have none);
//! - members only join at the end: spans never move.
//!
//! Barriers apply to every member the commit touched: each member remembers whether a plain
//! write returned since its last barrier, and a barrier flushes each member that has one (and
//! member 0 when none has: a barrier is never silently nothing).

use std::sync::atomic::{AtomicBool, Ordering};

use super::Area;
use crate::carrier::Carrier;
use crate::format::consts::{SUPERBLOCK_LEN, SUPERBLOCKS_LEN};
use crate::layout::{Layout, MemberSpan};

/// One member's carrier and its barrier state.
#[derive(Debug)]
pub(crate) struct IoMember {
    pub(crate) carrier: Box<dyn Carrier>,
    /// A plain write returned on this carrier since its last barrier.
    written: AtomicBool,
}

impl IoMember {
    pub(crate) fn new(carrier: Box<dyn Carrier>) -> IoMember {
        IoMember { carrier, written: AtomicBool::new(false) }
    }

    /// Records a plain write that returned (after it returned: see `Session::write`).
    pub(crate) fn mark_written(&self) {
        self.written.store(true, Ordering::Release);
    }

    /// Takes the "written since the last barrier" flag.
    pub(crate) fn take_written(&self) -> bool {
        self.written.swap(false, Ordering::AcqRel)
    }
}

/// The carriers of an open volume and where their blocks lie.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) members: Vec<IoMember>,
    /// Every member's span at its cap; empty until the geometry is known (adoption reads
    /// member 0 with a candidate superblock's layout).
    pub(crate) spans: Vec<MemberSpan>,
}

/// Where a request lands: the member and the byte offset on its carrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) member: usize,
    pub(crate) offset: u64,
}

impl Table {
    /// Checks that `[offset, offset + len)` of the volume's byte space lies inside `area` of
    /// one member and says where it lands. `layout` is the one to check against while no
    /// geometry is known (member 0 alone).
    pub(crate) fn route(
        &self,
        layout: Option<&Layout>,
        area: Area,
        offset: u64,
        len: usize,
    ) -> Route {
        route(&self.spans, layout, area, offset, len)
    }

    pub(crate) fn carrier(&self, member: usize) -> &dyn Carrier {
        self.members[member].carrier.as_ref()
    }

    /// Members with a plain write since their last barrier (their flags cleared), or member
    /// 0 when none has one.
    pub(crate) fn to_flush(&self) -> Vec<usize> {
        let written: Vec<usize> =
            (0..self.members.len()).filter(|&k| self.members[k].take_written()).collect();
        if written.is_empty() { vec![0] } else { written }
    }
}

/// [`Table::route`] over `spans` (empty: member 0 alone, checked against `layout`).
pub(crate) fn route(
    spans: &[MemberSpan],
    layout: Option<&Layout>,
    area: Area,
    offset: u64,
    len: usize,
) -> Route {
    let end = offset + len as u64;
    match area {
        Area::Superblocks => {
            assert!(offset == 0 && end == SUPERBLOCKS_LEN, "{area:?} request [{offset}, {end})");
            return Route { member: 0, offset };
        }
        Area::Superblock(slot) => {
            let inside = slot < 2
                && offset == u64::from(slot) * SUPERBLOCK_LEN as u64
                && len == SUPERBLOCK_LEN;
            assert!(inside, "{area:?} request [{offset}, {end}) outside its area");
            return Route { member: 0, offset };
        }
        Area::Bitmap | Area::Journal | Area::Image | Area::Data => {}
    }
    let single;
    let spans = if spans.is_empty() {
        let layout = layout.expect("block IO before the layout is known");
        single = [MemberSpan { base: 0, layout: *layout }];
        &single[..]
    } else {
        spans
    };
    let bs = u64::from(spans[0].layout.block_size);
    let block = offset / bs;
    let Some(member) = spans.iter().position(|s| block >= s.base && block < s.end()) else {
        panic!("{area:?} request [{offset}, {end}) outside every member");
    };
    let span = spans[member];
    let at = offset - span.base * bs;
    let range = match area {
        Area::Bitmap => span.layout.bitmap,
        Area::Journal => span.layout.journal,
        _ => span.layout.allocatable(),
    };
    let inside = len > 0 && at >= range.start * bs && at + len as u64 <= range.end() * bs;
    assert!(inside, "{area:?} request [{offset}, {end}) outside its area of member {member}");
    Route { member, offset: at }
}
