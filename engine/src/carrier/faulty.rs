//! `FaultyCarrier`: a test carrier that models power loss and injects IO errors.
//!
//! The model: a write that returned under write-through, and every write that returned before
//! a completed barrier, is durable and survives. Every other write is *pending*: at the power
//! cut it is dropped, applied, torn into an arbitrary subset of its 512-byte sectors (a torn
//! sector may hold garbage), or torn at 4 KiB boundaries (each 4 KiB unit of it lands whole or
//! not at all, in any combination: a multi-block write that a device completed out of order).
//! The operation during which power is cut never completes: it returns an error (so does
//! everything after it) and, if it was a write, it is pending. Reads before the cut see every
//! write (the volatile cache view).
//!
//! An operation log (off by default) records every mutating operation with its number, kind
//! and range, so a test can aim a cut at the operations that touch one region.
//!
//! Mutating operations (writes of either kind, barriers, grows) are numbered from 0, so a
//! crash point is "at operation N" or "at the K-th barrier", and a seeded [`FaultRng`] decides
//! each pending write's fate: the same seed gives the same crash image.
//!
//! A [`PowerGroup`] is one power switch for several carriers (the members of one volume):
//! carriers that join it number their mutating operations in one sequence too, a group
//! crash plan cuts power to all of them at the same operation of that sequence, and from that
//! instant every member's pending writes are its crash image. A carrier in no group behaves
//! exactly as before.
//!
//! For races, a write hook runs inside every write before it takes effect (the write is
//! issued but has not landed), so a test can hold one thread's write there while another
//! thread commits. Unreadable ranges make reads fail with EIO, as a medium error would.

use std::io;
use std::sync::{Arc, Mutex};

use super::{Carrier, CarrierKind, CarrierOptions, CarrierStats, Geometry};
use crate::format::consts::SECTOR_LEN;

/// A small deterministic generator (SplitMix64) for crash images and seeded workloads.
#[derive(Debug, Clone)]
pub struct FaultRng(u64);

impl FaultRng {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> FaultRng {
        FaultRng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        self.next_u64() % n
    }

    /// True with probability `percent` in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// When power is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPlan {
    /// Power is never cut.
    Never,
    /// During mutating operation number N (0-based).
    AtOp(u64),
    /// During the K-th barrier (0-based).
    AtBarrier(u64),
}

/// An IO error the carrier returns once, at mutating operation `at_op`, without effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InjectedError {
    /// The mutating operation (0-based) that fails.
    pub at_op: u64,
    /// `libc::EIO` or `libc::ENOSPC`.
    pub errno: i32,
}

/// Called inside each write before it lands: `(offset, len, durable)`.
pub type WriteHook = std::sync::Arc<dyn Fn(u64, usize, bool) + Send + Sync>;

/// What a mutating operation was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A write that is not durable on return.
    Write,
    /// A write-through write.
    DurableWrite,
    /// A cache flush.
    Barrier,
}

/// One mutating operation in the log: its number (what [`CrashPlan::AtOp`] names), kind and
/// byte range (empty for a barrier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpRecord {
    /// Its number among the mutating operations.
    pub op: u64,
    /// What it was.
    pub kind: OpKind,
    /// First byte on the carrier.
    pub offset: u64,
    /// Bytes written (0 for a barrier).
    pub len: u64,
}

/// One power switch shared by several carriers (see the module docs). Lock order: a
/// carrier's state, then the group's.
#[derive(Debug)]
pub struct PowerGroup {
    state: Mutex<GroupState>,
}

#[derive(Debug)]
struct GroupState {
    ops: u64,
    barriers_done: u64,
    plan: CrashPlan,
    crashed: bool,
}

impl PowerGroup {
    /// A group with power on and no crash plan.
    pub fn new() -> Arc<PowerGroup> {
        let state = GroupState { ops: 0, barriers_done: 0, plan: CrashPlan::Never, crashed: false };
        Arc::new(PowerGroup { state: Mutex::new(state) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Arms a power cut, counted in the group's operations and barriers.
    pub fn set_crash_plan(&self, plan: CrashPlan) {
        self.lock().plan = plan;
    }

    /// Mutating operations issued so far by every member together.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Barriers that completed, on any member.
    pub fn barriers_done(&self) -> u64 {
        self.lock().barriers_done
    }

    /// True once power has been cut.
    pub fn crashed(&self) -> bool {
        self.lock().crashed
    }

    /// Cuts power to every member now.
    pub fn cut_power(&self) {
        self.lock().crashed = true;
    }

    /// Numbers one operation of a member; true when power is cut during it.
    fn tick(&self, is_barrier: bool) -> bool {
        let mut g = self.lock();
        if g.crashed {
            return true;
        }
        let op = g.ops;
        g.ops += 1;
        let crash = match g.plan {
            CrashPlan::Never => false,
            CrashPlan::AtOp(n) => n == op,
            CrashPlan::AtBarrier(k) => is_barrier && k == g.barriers_done,
        };
        g.crashed |= crash;
        crash
    }
}

#[derive(Debug)]
struct Pending {
    offset: u64,
    bytes: Vec<u8>,
}

#[derive(Debug)]
struct State {
    current: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
    ops: u64,
    barriers_done: u64,
    plan: CrashPlan,
    inject: Option<InjectedError>,
    /// Injected errors that fired.
    injected: u64,
    crashed: bool,
    /// The operation log, when it is on.
    log: Option<Vec<OpRecord>>,
    /// Byte ranges whose reads fail with EIO.
    unreadable: Vec<std::ops::Range<u64>>,
}

/// The power-loss model carrier. See the module docs.
#[derive(Debug)]
pub struct FaultyCarrier {
    state: Mutex<State>,
    len_bytes: u64,
    write_through: bool,
    physical_sector: u32,
    hook: Mutex<HookSlot>,
    stats: CarrierStats,
    /// The power switch shared with other carriers, if it joined one.
    group: Option<Arc<PowerGroup>>,
}

/// The armed write hook (a newtype, for `Debug`).
#[derive(Default)]
struct HookSlot(Option<WriteHook>);

impl std::fmt::Debug for HookSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "HookSlot(armed)" } else { "HookSlot(none)" })
    }
}

fn power_cut() -> io::Error {
    io::Error::other("power cut (fault injection)")
}

impl FaultyCarrier {
    /// A zeroed carrier of `len_bytes`; `write_through` makes durable writes durable on return.
    pub fn new(len_bytes: u64, write_through: bool) -> FaultyCarrier {
        Self::from_bytes(vec![0; len_bytes as usize], write_through)
    }

    /// A carrier whose durable and current content is `bytes`.
    pub fn from_bytes(bytes: Vec<u8>, write_through: bool) -> FaultyCarrier {
        let len_bytes = bytes.len() as u64;
        let state = State {
            durable: bytes.clone(),
            current: bytes,
            pending: Vec::new(),
            ops: 0,
            barriers_done: 0,
            plan: CrashPlan::Never,
            inject: None,
            injected: 0,
            crashed: false,
            log: None,
            unreadable: Vec::new(),
        };
        FaultyCarrier {
            state: Mutex::new(state),
            len_bytes,
            write_through,
            physical_sector: 512,
            hook: Mutex::new(HookSlot::default()),
            stats: CarrierStats::default(),
            group: None,
        }
    }

    /// Reports `bytes` as the physical sector (the unit the medium writes atomically).
    pub fn with_physical_sector(mut self, bytes: u32) -> FaultyCarrier {
        self.physical_sector = bytes;
        self
    }

    /// Puts this carrier on `group`'s power switch (see the module docs); its own crash plan,
    /// operation count and log stay as they are.
    pub fn join(mut self, group: &Arc<PowerGroup>) -> FaultyCarrier {
        self.group = Some(Arc::clone(group));
        self
    }

    /// Whether the carrier's group (if any) lost power: then this carrier did too.
    fn group_crashed(&self) -> bool {
        self.group.as_ref().is_some_and(|g| g.crashed())
    }

    /// Runs `hook` inside every later write, before the write lands (`None` removes it).
    pub fn set_write_hook(&self, hook: Option<WriteHook>) {
        *self.hook.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = HookSlot(hook);
    }

    /// Makes every read that touches `range` fail with EIO (a medium error).
    pub fn make_unreadable(&self, range: std::ops::Range<u64>) {
        self.lock().unreadable.push(range);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Arms a power cut.
    pub fn set_crash_plan(&self, plan: CrashPlan) {
        self.lock().plan = plan;
    }

    /// Arms a one-shot IO error.
    pub fn inject_error(&self, error: InjectedError) {
        self.lock().inject = Some(error);
    }

    /// Injected errors that fired so far.
    pub fn injected_errors(&self) -> u64 {
        self.lock().injected
    }

    /// Starts (or clears) the operation log.
    pub fn record_ops(&self) {
        self.lock().log = Some(Vec::new());
    }

    /// The operations logged since [`FaultyCarrier::record_ops`].
    pub fn op_log(&self) -> Vec<OpRecord> {
        self.lock().log.clone().unwrap_or_default()
    }

    /// True once power has been cut (on this carrier or its group).
    pub fn crashed(&self) -> bool {
        self.lock().crashed || self.group_crashed()
    }

    /// Mutating operations issued so far.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Barriers that completed.
    pub fn barriers_done(&self) -> u64 {
        self.lock().barriers_done
    }

    /// Cuts power now (if it is not already cut).
    pub fn cut_power(&self) {
        self.lock().crashed = true;
    }

    /// What the medium holds after the power cut: durable bytes, plus each pending write
    /// dropped, applied or torn as `rng` decides.
    pub fn crash_image(&self, rng: &mut FaultRng) -> Vec<u8> {
        let state = self.lock();
        let mut image = state.durable.clone();
        for p in &state.pending {
            let at = p.offset as usize;
            let old = &mut image[at..at + p.bytes.len()];
            match rng.below(5) {
                0 => {}
                1 => old.copy_from_slice(&p.bytes),
                2 | 3 => tear(old, &p.bytes, rng),
                _ => tear_units(old, &p.bytes, at, rng),
            }
        }
        image
    }

    /// The pending writes' byte ranges, in issue order (what a power cut may drop or tear).
    pub fn pending(&self) -> Vec<std::ops::Range<u64>> {
        self.lock().pending.iter().map(|p| p.offset..p.offset + p.bytes.len() as u64).collect()
    }

    /// What the medium holds after the power cut when each pending write lands unit by unit
    /// as `lands(pending write index, carrier offset of the 4 KiB unit)` decides: for
    /// scripted scenarios that need one tear pattern exactly.
    pub fn crash_image_units(&self, lands: impl Fn(usize, u64) -> bool) -> Vec<u8> {
        const UNIT: u64 = 4096;
        let state = self.lock();
        let mut image = state.durable.clone();
        for (i, p) in state.pending.iter().enumerate() {
            let end = p.offset + p.bytes.len() as u64;
            let mut pos = p.offset;
            while pos < end {
                let next = ((pos / UNIT + 1) * UNIT).min(end);
                if lands(i, pos / UNIT * UNIT) {
                    let (a, b) = ((pos - p.offset) as usize, (next - p.offset) as usize);
                    image[pos as usize..next as usize].copy_from_slice(&p.bytes[a..b]);
                }
                pos = next;
            }
        }
        image
    }

    /// The bytes every reader sees now (no power cut).
    pub fn current_bytes(&self) -> Vec<u8> {
        self.lock().current.clone()
    }

    /// Starts one mutating operation: decides crash or injected error.
    fn begin(
        group: Option<&PowerGroup>,
        state: &mut State,
        kind: OpKind,
        offset: u64,
        len: u64,
    ) -> io::Result<()> {
        if state.crashed || group.is_some_and(PowerGroup::crashed) {
            // Power went out on another member of the group: this operation never starts,
            // and (as every operation after a cut) it fails.
            state.crashed = true;
            return Err(power_cut());
        }
        let op = state.ops;
        state.ops += 1;
        if let Some(log) = state.log.as_mut() {
            log.push(OpRecord { op, kind, offset, len });
        }
        let is_barrier = kind == OpKind::Barrier;
        let mut crash = match state.plan {
            CrashPlan::Never => false,
            CrashPlan::AtOp(n) => n == op,
            CrashPlan::AtBarrier(k) => is_barrier && k == state.barriers_done,
        };
        if let Some(g) = group {
            crash |= g.tick(is_barrier);
        }
        if crash {
            state.crashed = true;
            if let Some(g) = group {
                g.cut_power();
            }
            return Err(power_cut());
        }
        if let Some(inject) = state.inject
            && inject.at_op == op
        {
            state.inject = None;
            state.injected += 1;
            return Err(io::Error::from_raw_os_error(inject.errno));
        }
        Ok(())
    }

    fn check_range(&self, offset: u64, len: usize) -> io::Result<()> {
        if offset.checked_add(len as u64).is_some_and(|e| e <= self.len_bytes) {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::UnexpectedEof, "outside the faulty carrier"))
        }
    }

    fn write(&self, buf: &[u8], offset: u64, durable: bool) -> io::Result<()> {
        self.check_range(offset, buf.len())?;
        let hook = self.hook.lock().unwrap_or_else(std::sync::PoisonError::into_inner).0.clone();
        if let Some(hook) = hook {
            hook(offset, buf.len(), durable);
        }
        let mut state = self.lock();
        let at = offset as usize;
        let kind = if durable { OpKind::DurableWrite } else { OpKind::Write };
        if let Err(e) =
            Self::begin(self.group.as_deref(), &mut state, kind, offset, buf.len() as u64)
        {
            if state.crashed {
                // The write was in flight when power was cut: it may land torn.
                state.pending.push(Pending { offset, bytes: buf.to_vec() });
            }
            return Err(e);
        }
        state.current[at..at + buf.len()].copy_from_slice(buf);
        if durable {
            state.durable[at..at + buf.len()].copy_from_slice(buf);
            // A durable write supersedes what older pending writes had for the same bytes: a
            // device's cache holds the newest data of a sector, so the older bytes can no
            // longer land over it.
            supersede(&mut state.pending, offset, buf.len() as u64);
        } else {
            state.pending.push(Pending { offset, bytes: buf.to_vec() });
        }
        Ok(())
    }
}

/// Cuts `[offset, offset + len)` out of every pending write.
fn supersede(pending: &mut Vec<Pending>, offset: u64, len: u64) {
    let end = offset + len;
    let mut kept = Vec::with_capacity(pending.len());
    for p in pending.drain(..) {
        let p_end = p.offset + p.bytes.len() as u64;
        if p_end <= offset || p.offset >= end {
            kept.push(p);
            continue;
        }
        if p.offset < offset {
            let n = (offset - p.offset) as usize;
            kept.push(Pending { offset: p.offset, bytes: p.bytes[..n].to_vec() });
        }
        if p_end > end {
            let skip = (end - p.offset) as usize;
            kept.push(Pending { offset: end, bytes: p.bytes[skip..].to_vec() });
        }
    }
    *pending = kept;
}

/// Applies a random subset of `new`'s 4 KiB units onto `old` (`at` is the carrier offset of
/// `old[0]`: units are aligned on the carrier, as a device's atomic blocks are), each whole.
fn tear_units(old: &mut [u8], new: &[u8], at: usize, rng: &mut FaultRng) {
    const UNIT: usize = 4096;
    let mut pos = 0;
    while pos < old.len() {
        let end = ((at + pos) / UNIT + 1) * UNIT - at;
        let end = end.min(old.len());
        if rng.chance(50) {
            old[pos..end].copy_from_slice(&new[pos..end]);
        }
        pos = end;
    }
}

/// Applies a random subset of `new`'s sectors onto `old`; some torn sectors become garbage.
fn tear(old: &mut [u8], new: &[u8], rng: &mut FaultRng) {
    for (o, n) in old.chunks_mut(SECTOR_LEN).zip(new.chunks(SECTOR_LEN)) {
        match rng.below(3) {
            0 => {}
            1 => o.copy_from_slice(n),
            _ => rng.fill(o),
        }
    }
}

impl Carrier for FaultyCarrier {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check_range(offset, buf.len())?;
        let state = self.lock();
        if state.crashed || self.group_crashed() {
            return Err(power_cut());
        }
        let end = offset + buf.len() as u64;
        if state.unreadable.iter().any(|r| r.start < end && offset < r.end) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let at = offset as usize;
        buf.copy_from_slice(&state.current[at..at + buf.len()]);
        drop(state);
        self.stats.record_read(buf.len());
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write(buf, offset, false)?;
        self.stats.record_write(buf.len(), None);
        Ok(())
    }

    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.write_through {
            self.write(buf, offset, true)?;
            self.stats.record_write(buf.len(), Some(std::time::Duration::ZERO));
            Ok(())
        } else {
            self.write(buf, offset, false)?;
            self.barrier()?;
            self.stats.record_write(buf.len(), Some(std::time::Duration::ZERO));
            Ok(())
        }
    }

    fn barrier(&self) -> io::Result<()> {
        let mut state = self.lock();
        Self::begin(self.group.as_deref(), &mut state, OpKind::Barrier, 0, 0)?;
        let pending = std::mem::take(&mut state.pending);
        for p in pending {
            let at = p.offset as usize;
            state.durable[at..at + p.bytes.len()].copy_from_slice(&p.bytes);
        }
        state.barriers_done += 1;
        if let Some(g) = &self.group {
            g.lock().barriers_done += 1;
        }
        drop(state);
        self.stats.record_barrier(std::time::Duration::ZERO);
        Ok(())
    }

    fn grow(&self, len_bytes: u64, _sparse: bool) -> io::Result<()> {
        if len_bytes <= self.len_bytes {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::StorageFull, "the faulty carrier cannot grow"))
        }
    }

    fn geometry(&self) -> Geometry {
        Geometry {
            len_bytes: self.len_bytes,
            logical_sector: 512,
            physical_sector: self.physical_sector,
            mem_align: 1,
            offset_align: 1,
        }
    }

    fn options(&self) -> CarrierOptions {
        CarrierOptions { direct_io: false, write_through: self.write_through, read_only: false }
    }

    fn medium(&self) -> CarrierKind {
        CarrierKind::Faulty
    }

    fn stats(&self) -> &CarrierStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barrier_makes_writes_survive_and_unbarriered_ones_may_not() {
        let c = FaultyCarrier::new(4096, false);
        c.write_all_at(&[1; 512], 0).unwrap();
        c.barrier().unwrap();
        c.write_all_at(&[2; 512], 512).unwrap();
        c.cut_power();
        let mut seen_dropped = false;
        for seed in 0..32 {
            let img = c.crash_image(&mut FaultRng::new(seed));
            assert_eq!(&img[..512], &[1; 512]);
            seen_dropped |= img[512..1024] == [0; 512];
        }
        assert!(seen_dropped, "an unbarriered write must sometimes be lost");
    }

    #[test]
    fn write_through_is_durable_on_return() {
        let c = FaultyCarrier::new(4096, true);
        c.write_durable_at(&[7; 1024], 1024).unwrap();
        c.cut_power();
        for seed in 0..16 {
            assert_eq!(&c.crash_image(&mut FaultRng::new(seed))[1024..2048], &[7; 1024]);
        }
    }

    #[test]
    fn crash_op_fails_and_everything_after_it() {
        let c = FaultyCarrier::new(4096, true);
        c.set_crash_plan(CrashPlan::AtOp(1));
        c.write_all_at(&[1; 512], 0).unwrap();
        assert!(c.write_durable_at(&[2; 512], 512).is_err());
        assert!(c.barrier().is_err());
        assert!(c.crashed());
    }

    #[test]
    fn a_group_cuts_every_member_at_one_operation() {
        let group = PowerGroup::new();
        let a = FaultyCarrier::new(4096, false).join(&group);
        let b = FaultyCarrier::new(4096, false).join(&group);
        group.set_crash_plan(CrashPlan::AtOp(3));
        a.write_all_at(&[1; 512], 0).unwrap(); // group op 0
        b.write_all_at(&[2; 512], 0).unwrap(); // 1
        b.barrier().unwrap(); // 2: b's write is durable
        assert!(a.write_all_at(&[3; 512], 512).is_err(), "op 3 is the cut");
        assert!(a.crashed() && b.crashed() && group.crashed());
        assert!(b.barrier().is_err(), "b lost power at the same instant");
        let mut buf = [0; 512];
        assert!(b.read_exact_at(&mut buf, 0).is_err());
        assert_eq!((group.ops(), group.barriers_done()), (4, 1));
        assert_eq!((a.ops(), b.ops()), (2, 2));
        for seed in 0..8 {
            assert_eq!(&b.crash_image(&mut FaultRng::new(seed))[..512], &[2; 512]);
        }
        assert_eq!(a.pending(), vec![0..512, 512..1024], "a's writes were never made durable");
    }

    #[test]
    fn injected_error_fires_once() {
        let c = FaultyCarrier::new(4096, false);
        c.inject_error(InjectedError { at_op: 0, errno: libc::EIO });
        let e = c.write_all_at(&[1; 512], 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        c.write_all_at(&[1; 512], 0).unwrap();
    }
}
