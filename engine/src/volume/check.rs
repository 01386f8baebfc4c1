//! The read-only checker behind `vellum check` (exit codes like `qemu-img check`).
//!
//! It runs the same adoption and journal replay as open, so "check passes" and "open
//! succeeds" cannot disagree, and then compares what open would trust: both superblock slots,
//! and for a clean volume the bitmap against the reachable set. A destroyed journal region,
//! and the mark an open leaves after finding one, are damage until acknowledged. It never
//! writes.

use std::fmt;

use super::open::{adopt, replay};
use crate::carrier::Carrier;
use crate::error::Error;
use crate::format::checksum;
use crate::io::{Area, AreaRead, Io, Probe};
use crate::records::InodeKind;
use crate::superblock::{self, VolumeState};

/// The state of one superblock slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotStatus {
    /// Checksums and passes every format rule.
    Valid {
        /// The commit generation it records.
        generation: u64,
        /// Whether it was written by a clean close.
        clean: bool,
    },
    /// Fails its checksum or a format rule.
    Damaged(String),
    /// Checksums, but uses something this build does not support.
    Unsupported(String),
}

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FindingKind {
    /// Worth knowing; nothing is wrong.
    Note,
    /// Blocks marked used that nothing references (harmless; open reclaims them).
    Leak,
    /// Damage.
    Corrupt,
    /// The check could not run to the end.
    Incomplete,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// One thing the check found.
pub struct Finding {
    /// How serious it is.
    pub kind: FindingKind,
    /// What it is, in one line.
    pub message: String,
}

/// The result of checking a volume.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// The state of each superblock slot (A, then B).
    pub slots: Vec<SlotStatus>,
    /// Adopted slot and generation.
    pub adopted: Option<(u8, u64)>,
    /// What the check found, most serious first.
    pub findings: Vec<Finding>,
    /// Files in the namespace.
    pub files: u64,
    /// Directories in the namespace, the root included.
    pub directories: u64,
    /// Blocks the checkpoint image uses.
    pub metadata_blocks: u64,
    /// Blocks the bitmap marks used.
    pub used_blocks: u64,
    /// Blocks of the volume.
    pub total_blocks: u64,
    /// What open's journal replay would do (journaled volumes).
    pub journal: Option<crate::journal::ReplayReport>,
    /// Every member after the first: its index and the state of its two superblock slots.
    pub members: Vec<(u32, Vec<SlotStatus>)>,
}

impl CheckReport {
    /// 0 clean, 1 could not complete, 2 corrupt, 3 leaks only.
    pub fn exit_code(&self) -> i32 {
        let worst = self.findings.iter().map(|f| f.kind).max();
        match worst {
            Some(FindingKind::Incomplete) => 1,
            Some(FindingKind::Corrupt) => 2,
            Some(FindingKind::Leak) => 3,
            _ => 0,
        }
    }

    fn add(&mut self, kind: FindingKind, message: impl Into<String>) {
        self.findings.push(Finding { kind, message: message.into() });
    }
}

impl fmt::Display for SlotStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotStatus::Valid { generation, clean } => {
                write!(
                    f,
                    "valid, generation {generation}, {}",
                    if *clean { "clean" } else { "dirty" }
                )
            }
            SlotStatus::Damaged(why) => write!(f, "damaged: {why}"),
            SlotStatus::Unsupported(why) => write!(f, "unsupported: {why}"),
        }
    }
}

/// Checks the volume on `carrier` without writing to it.
pub fn check(carrier: &dyn Carrier) -> CheckReport {
    check_members(&[carrier])
}

/// Checks the volume whose members are `carriers` (member 0 first, in member order: see
/// `Volume::gather_members`) without writing to any of them.
pub fn check_members(carriers: &[&dyn Carrier]) -> CheckReport {
    let mut report = CheckReport::default();
    if carriers.is_empty() {
        report.add(FindingKind::Incomplete, "no carrier to check");
        return report;
    }
    let probe = Probe::over(carriers.to_vec());
    let slots = match super::open::read_slots_in(&probe) {
        Ok(s) => s,
        Err(e) => {
            report.add(FindingKind::Incomplete, e.to_string());
            return report;
        }
    };
    for s in &slots {
        report.slots.push(match &s.result {
            Ok(sb) => SlotStatus::Valid {
                generation: sb.generation,
                clean: sb.state == VolumeState::Clean,
            },
            Err(e @ Error::Unsupported(_)) => SlotStatus::Unsupported(e.to_string()),
            Err(e) => SlotStatus::Damaged(e.to_string()),
        });
    }
    // Every member the newest slot's table names must be given and hold its capacity;
    // adoption then places each candidate by its own table (as open does).
    let newest = slots.iter().filter_map(|s| s.result.as_ref().ok()).max_by_key(|sb| sb.generation);
    if let Some(newest) = newest
        && newest.carrier_index == 0
        && newest.carrier_count > 1
    {
        if carriers.len() < newest.carrier_count as usize {
            report.add(
                FindingKind::Incomplete,
                format!(
                    "the volume has {} members; {} carriers were given",
                    newest.carrier_count,
                    carriers.len()
                ),
            );
            return report;
        }
        for (k, &c) in carriers.iter().enumerate().take(newest.carrier_count as usize).skip(1) {
            if let Err(e) = super::members::fits(newest, k, c) {
                report.add(FindingKind::Corrupt, format!("member {k}: {e}"));
                return report;
            }
        }
    }
    let mut adopted = match adopt(&probe) {
        Ok(a) => a,
        Err(e @ Error::Corrupt { .. }) => {
            report.add(FindingKind::Corrupt, e.to_string());
            return report;
        }
        Err(e) => {
            report.add(FindingKind::Incomplete, e.to_string());
            return report;
        }
    };
    let replayed = match replay(&probe, &mut adopted, None) {
        Ok(r) => r,
        Err(e @ (Error::Corrupt { .. } | Error::Unsupported(_))) => {
            report.add(FindingKind::Corrupt, format!("journal: {e}"));
            return report;
        }
        Err(e) => {
            report.add(FindingKind::Incomplete, e.to_string());
            return report;
        }
    };
    let sb = &adopted.sb;
    let geometry = sb.geometry();
    let layout = geometry.layout();
    report.adopted = Some((adopted.slot, sb.generation));
    check_member_slots(&mut report, sb, carriers);
    report.journal = replayed.as_ref().map(|r| r.report);
    if let Some(j) = replayed.as_ref().map(|r| r.report) {
        if j.batches > 0 {
            report.add(
                FindingKind::Note,
                format!(
                    "the journal holds {} batches ({} records) after the checkpoint; open \
                     replays them",
                    j.batches, j.records
                ),
            );
        }
        if j.destroyed {
            report.add(
                FindingKind::Corrupt,
                "the journal region is destroyed: open goes on from the checkpoint, and \
                 commits after it are lost",
            );
        } else if j.loss_unacknowledged {
            report.add(
                FindingKind::Corrupt,
                format!(
                    "an open found the journal region destroyed (records from sequence {} \
                     lost); `vellum journal ack` acknowledges it",
                    sb.journal.lost_from
                ),
            );
        }
    }
    report.total_blocks = layout.total_blocks;
    report.metadata_blocks = adopted.image.metadata_blocks;
    report.used_blocks = adopted.image.reachable.count_ones();
    for inode in adopted.image.namespace.inodes.values() {
        match inode.kind {
            InodeKind::File => report.files += 1,
            InodeKind::Directory => report.directories += 1,
        }
    }
    if let Some(g) = adopted.fell_back_from {
        report.add(
            FindingKind::Note,
            format!("the interrupted commit of generation {g} was passed over"),
        );
    }
    let clean = sb.state == VolumeState::Clean;
    for (slot, status) in report.slots.clone().iter().enumerate() {
        if let SlotStatus::Damaged(why) = status {
            let kind = if clean { FindingKind::Corrupt } else { FindingKind::Note };
            report.add(
                kind,
                format!(
                    "superblock {} is damaged ({why}); the next commit rewrites it",
                    ["A", "B"][slot]
                ),
            );
        }
    }
    let replayed_batches = replayed.is_some_and(|r| r.report.batches > 0);
    if !clean || replayed_batches {
        report.add(
            FindingKind::Note,
            "the volume was not closed cleanly; open rebuilds its bitmap from the image",
        );
        return report;
    }
    let bs = u64::from(layout.block_size);
    let mut on_disk = crate::bitmap::Bitmap::new(layout.total_blocks);
    let mut crc = 0;
    for span in &geometry.spans {
        let own = span.layout;
        let mut bytes = Io::buffer((own.bitmap.len * bs) as usize);
        let at = (span.base + own.bitmap.start) * bs;
        if let Err(e) = probe.read_in(Some(&own), Area::Bitmap, at, bytes.as_mut_slice()) {
            report.add(FindingKind::Incomplete, format!("reading the bitmap failed: {e}"));
            return report;
        }
        crc = checksum::plain_append(crc, bytes.as_slice());
        on_disk.or_span(span.base, own.total_blocks, bytes.as_slice());
    }
    if crc != sb.bitmap_checksum {
        report.add(FindingKind::Corrupt, "the bitmap of the clean volume fails its checksum");
        return report;
    }
    let missing = adopted.image.reachable.difference(&on_disk);
    if let Some(first) = missing.first() {
        report.add(
            FindingKind::Corrupt,
            format!("{} used blocks are marked free (first: {first})", missing.len()),
        );
    }
    let leaked = on_disk.difference(&adopted.image.reachable);
    if let Some(first) = leaked.first() {
        report.add(
            FindingKind::Leak,
            format!("{} blocks are marked used but unreferenced (first: {first})", leaked.len()),
        );
    }
    report
}

/// The superblock slots of every member after the first: each must verify, belong to this
/// volume and sit where the member table puts it.
fn check_member_slots(
    report: &mut CheckReport,
    sb: &superblock::Superblock,
    carriers: &[&dyn Carrier],
) {
    for k in 1..sb.members.len() {
        let Some(&carrier) = carriers.get(k) else { break };
        let slots = match super::open::read_slots(carrier) {
            Ok(s) => s,
            Err(e) => {
                report.add(FindingKind::Incomplete, format!("member {k}: {e}"));
                continue;
            }
        };
        let mut states = Vec::new();
        for s in slots {
            let status = match &s.result {
                Ok(m) if m.uuid != sb.uuid || m.carrier_index as usize != k => {
                    SlotStatus::Damaged("belongs to another volume or member".to_owned())
                }
                Ok(m) if m.members.get(k) != sb.members.get(k) => {
                    SlotStatus::Damaged("not the member the table records".to_owned())
                }
                Ok(m) => SlotStatus::Valid { generation: m.generation, clean: true },
                Err(e @ Error::Unsupported(_)) => SlotStatus::Unsupported(e.to_string()),
                Err(e) => SlotStatus::Damaged(e.to_string()),
            };
            if let SlotStatus::Damaged(why) | SlotStatus::Unsupported(why) = &status {
                report.add(
                    FindingKind::Corrupt,
                    format!(
                        "member {k}: superblock {} is damaged ({why})",
                        ["A", "B"][s.slot as usize]
                    ),
                );
            }
            states.push(status);
        }
        report.members.push((k as u32, states));
    }
}
