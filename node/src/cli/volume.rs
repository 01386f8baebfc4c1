//! The volume subcommands: `format`, `info`, `check`, `stat`, `mkdir`, `mv` (`cp`, `ls`,
//! `cat` and `rm`, over every medium, are in `media`; the members of a volume of several
//! carriers, in `carrier`). Each opens the volume, does one thing,
//! and closes it cleanly; a failure is one line on stderr and a non-zero exit, never a panic.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use vellum_engine::error::Knob;
use vellum_engine::media::{self, Carrier, CarrierKind, CarrierOptions};
use vellum_engine::superblock::{self, LAYOUT_SPARSE, LAYOUT_THIN, VolumeState};
use vellum_engine::{Error, FileKind, FindingKind, FormatOptions, Volume, VolumeOptions};

use super::CliError;
use super::size::human;

/// Opens with production knobs, or buffered where the host file system refuses O_DIRECT
/// (`media::open_volume`, the one copy of that fallback).
pub fn open(path: &Path, read_only: bool) -> Result<Volume, CliError> {
    if !path.exists() {
        return Err(CliError::Usage(format!("{}: no such file or device", path.display())));
    }
    Ok(media::open_volume(path, read_only)?)
}

fn open_carrier(path: &Path) -> Result<Box<dyn Carrier>, CliError> {
    if !path.exists() {
        return Err(CliError::Usage(format!("{}: no such file or device", path.display())));
    }
    let ro = CarrierOptions {
        direct_io: media::is_block_device(path),
        write_through: false,
        read_only: true,
    };
    Ok(media::open_carrier(path, ro)?)
}

/// The arguments of `vellum format`.
pub struct FormatArgs {
    pub carrier: PathBuf,
    pub size: Option<u64>,
    pub block_size: u32,
    pub thin: bool,
    /// Auto-grow.
    pub grow: bool,
    /// The cap of auto-grow (default: 64 times the initial size).
    pub max_size: Option<u64>,
    pub sparse: bool,
    /// Bytes of the journal region (`None`: the default for the capacity if it is used,
    /// none if not).
    pub journal: Option<u64>,
    /// Use the region (false: reserve it only).
    pub use_journal: bool,
    pub force: bool,
}

/// Initial size of a growing volume when --size is not given.
const GROW_DEFAULT_START: u64 = 64 << 20;

pub fn format(a: &FormatArgs) -> Result<(), CliError> {
    let is_device = media::is_block_device(&a.carrier);
    let (size, grow_max) = match a.grow.then_some(a.max_size) {
        None => (a.size, None),
        Some(max) => {
            let start =
                a.size.unwrap_or(max.map_or(GROW_DEFAULT_START, |m| m.min(GROW_DEFAULT_START)));
            (Some(start), Some(max.unwrap_or(start.saturating_mul(64))))
        }
    };
    if !is_device && size.is_none() {
        return Err(CliError::Usage(
            "--size is required for a file carrier (e.g. --size 64MiB)".into(),
        ));
    }
    if !is_device {
        check_parent(&a.carrier)?;
    }
    let journal_bytes = match a.journal {
        Some(n) => n,
        None if a.use_journal => {
            let capacity = match size {
                Some(n) => n,
                None => device_size(&a.carrier)?,
            };
            vellum_engine::default_journal_bytes(capacity)
        }
        None => 0,
    };
    let bar = indicatif::ProgressBar::new(size.unwrap_or(0));
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "zero-filling {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let progress = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let fmt = FormatOptions {
        capacity_bytes: size,
        grow_max_bytes: grow_max,
        block_size: a.block_size,
        journal_bytes,
        journal: a.use_journal,
        image_blocks: None,
        preallocate: !a.thin,
        sparse: a.sparse,
        force: a.force,
        progress: Some(&progress),
    };
    let mut knobs = CarrierOptions::PRODUCTION;
    let result = match Volume::create_path(&a.carrier, &fmt, knobs, VolumeOptions::default()) {
        Err(Error::Open { source, .. })
            if source.kind() == std::io::ErrorKind::InvalidInput && !is_device =>
        {
            knobs.direct_io = false;
            let again = FormatOptions { force: true, ..fmt };
            Volume::create_path(&a.carrier, &again, knobs, VolumeOptions::default())
        }
        other => other,
    };
    bar.finish_and_clear();
    let v = result.map_err(|e| match e {
        Error::NotEmpty { path } => CliError::Usage(format!(
            "{} does not look empty: pass --force to overwrite it",
            path.display()
        )),
        other => other.into(),
    })?;
    let info = v.info();
    v.close()?;
    let bs = u64::from(info.layout.block_size);
    let growth = if info.layout.max_blocks > info.layout.total_blocks {
        let capped = if is_device && grow_max.is_some_and(|m| m > info.layout.max_blocks * bs) {
            " (the device's size)"
        } else {
            ""
        };
        format!(", grows to {}{capped}", human(info.layout.max_blocks * bs))
    } else {
        String::new()
    };
    let journal = match (info.journal, info.layout.journal.len) {
        (Some(j), _) => format!("journal of {} blocks", j.blocks),
        (None, 0) => "no journal".to_string(),
        (None, n) => format!("journal region of {n} blocks reserved (off)"),
    };
    println!(
        "formatted {}: {}{growth} in {} blocks of {} bytes, {}, {}, {journal}, volume {}",
        a.carrier.display(),
        human(info.layout.capacity_bytes()),
        info.layout.total_blocks,
        info.layout.block_size,
        if info.thin { "thin" } else { "preallocated" },
        if info.sparse { "sparse" } else { "non-sparse" },
        info.uuid
    );
    Ok(())
}

/// Refuses a host path whose parent directory is missing, naming the parent (the open
/// error would name the path only).
pub(super) fn check_parent(path: &Path) -> Result<(), CliError> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() && !parent.is_dir() => Err(CliError::Usage(
            format!("{}: the directory {} does not exist", path.display(), parent.display()),
        )),
        _ => Ok(()),
    }
}

/// The size of a block device (or file) at `path`, read by seeking to its end.
fn device_size(path: &Path) -> Result<u64, CliError> {
    use std::io::Seek;
    std::fs::File::open(path)
        .and_then(|mut f| f.seek(std::io::SeekFrom::End(0)))
        .map_err(|e| CliError::Io(e, format!("reading the size of {}", path.display())))
}

/// Opens `path`'s carrier for writing with production knobs (buffered where the host file
/// system refuses O_DIRECT).
fn open_carrier_rw(path: &Path) -> Result<Box<dyn Carrier>, CliError> {
    if !path.exists() {
        return Err(CliError::Usage(format!("{}: no such file or device", path.display())));
    }
    Ok(media::open_production_carrier(path, false)?)
}

pub fn journal_enable(path: &Path) -> Result<(), CliError> {
    let carrier = open_carrier_rw(path).map_err(|e| match e {
        CliError::Engine(Error::Locked { .. }) => CliError::Usage(format!(
            "{} is open elsewhere: the journal is switched on offline only (stop the node first)",
            path.display()
        )),
        other => other,
    })?;
    Volume::enable_journal(carrier, VolumeOptions::default())?;
    let v = open(path, true)?;
    let blocks = v.info().journal.map_or(0, |j| j.blocks);
    drop(v);
    println!("journal enabled on {}: a ring of {blocks} blocks", path.display());
    Ok(())
}

pub fn journal_ack(path: &Path, force: bool) -> Result<(), CliError> {
    let v = open(path, false)?;
    let raft_dir = vellum_raft_store::LogConfig::default().dir;
    if !force && v.open_report().journal_lost() && v.exists(format!("{raft_dir}/log"))? {
        return Err(CliError::Usage(format!(
            "{} holds a raft log that the lost journal records may have rolled back: \
             acknowledging would let the node serve it; treat the member as lost instead \
             (docs/OPERATIONS.md, \"A member whose volume rolled back\"), or pass --force",
            path.display()
        )));
    }
    let acknowledged = v.acknowledge_journal_loss()?;
    v.close()?;
    if acknowledged {
        println!("journal loss acknowledged on {}", path.display());
    } else {
        println!("{}: nothing to acknowledge", path.display());
    }
    Ok(())
}

pub fn info(path: &Path, json: bool) -> Result<(), CliError> {
    let carrier = open_carrier(path)?;
    let slots = vellum_engine::read_slots(carrier.as_ref())?;
    // Every member, for the check's figures and the member list (read-only, by the paths
    // member 0's table records).
    let gathered = super::carrier::gather_read_only(path);
    let report = match &gathered {
        Ok(carriers) => {
            let refs: Vec<&dyn Carrier> = carriers.iter().map(AsRef::as_ref).collect();
            vellum_engine::check_members(&refs)
        }
        Err(_) => vellum_engine::check(carrier.as_ref()),
    };
    // A volume whose members cannot all be opened is not checked; its member 0 still
    // shows, from its newest valid slot (as open would adopt it).
    let adopted = report.adopted.or_else(|| {
        gathered.is_err().then_some(())?;
        slots
            .iter()
            .filter_map(|s| s.result.as_ref().ok().map(|sb| (s.slot, sb.generation)))
            .max_by_key(|&(_, generation)| generation)
    });
    let mut slot_json = Vec::new();
    let mut chosen = None;
    for s in &slots {
        let (status, generation, state) = match &s.result {
            Ok(sb) => ("valid".to_string(), Some(sb.generation), Some(sb.state)),
            Err(e) => (e.to_string(), None, None),
        };
        let is_adopted = adopted.is_some_and(|(slot, _)| slot == s.slot);
        if is_adopted {
            chosen = s.result.as_ref().ok().cloned();
        }
        slot_json.push(serde_json::json!({
            "slot": slot_name(s.slot),
            "checksum_ok": s.result.is_ok() || matches!(s.result, Err(Error::Unsupported(_))),
            "status": status,
            "generation": generation,
            "state": state.map(|st| if st == VolumeState::Clean { "clean" } else { "dirty" }),
            "adopted": is_adopted,
        }));
    }
    let Some(sb) = chosen else {
        let why = report
            .findings
            .first()
            .map_or_else(|| "no superblock can be adopted".to_string(), |f| f.message.clone());
        if json {
            println!(
                "{}",
                serde_json::json!({ "carrier": path, "slots": slot_json, "error": why })
            );
        } else {
            for (s, j) in slots.iter().zip(&slot_json) {
                println!(
                    "superblock {}: {}",
                    ["A", "B"][s.slot as usize],
                    j["status"].as_str().unwrap_or("")
                );
            }
        }
        return Err(CliError::Usage(why));
    };
    if sb.carrier_index != 0 {
        member_info(path, &sb, &slot_json, json);
        return Ok(());
    }
    let l = sb.layout;
    let medium = carrier.medium();
    let thin = sb.layout_flags & LAYOUT_THIN != 0;
    let sparse = sb.layout_flags & LAYOUT_SPARSE != 0;
    let (views, members_problem) = super::carrier::member_views(path, &sb, &gathered);
    let region = |r: vellum_engine::layout::BlockRange| serde_json::json!({ "start_block": r.start, "blocks": r.len });
    let doc = serde_json::json!({
        "carrier": path,
        "medium": medium.name(),
        "carrier_bytes": carrier.geometry().len_bytes,
        "format_version": sb.version,
        "volume_uuid": sb.uuid.to_string(),
        "state": if sb.state == VolumeState::Clean { "clean" } else { "dirty" },
        "generation": sb.generation,
        "slots": slot_json,
        "geometry": {
            "block_size": l.block_size,
            "total_blocks": l.total_blocks,
            "capacity_bytes": l.capacity_bytes(),
            "max_blocks": l.max_blocks,
            "grows": l.max_blocks > l.total_blocks,
            "bitmap": region(l.bitmap),
            "journal": region(l.journal),
            "image": region(l.image),
            "data": region(l.data),
        },
        "knobs": {
            "preallocation": if thin { "thin" } else { "preallocated" },
            "sparseness": if sparse { "sparse" } else { "non-sparse" },
            "direct_io": "chosen at open (vellum opens with direct IO where the medium allows)",
            "write_through": "chosen at open",
            "cache": cache_knob(medium),
        },
        "journal": journal_json(&sb, report.journal),
        "files": report.files,
        "directories": report.directories,
        "used_blocks": report.used_blocks,
        "members": views.iter().map(|m| serde_json::json!({
            "index": m.index,
            "path": m.path,
            "uuid": m.uuid.to_string(),
            "first_block": m.first_block,
            "blocks": m.blocks,
            "capacity_blocks": m.capacity_blocks,
            "bytes": m.bytes,
            "medium": m.medium,
        })).collect::<Vec<_>>(),
        "members_problem": members_problem,
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(());
    }
    println!("carrier:     {} ({medium}, {})", path.display(), human(carrier.geometry().len_bytes));
    println!("volume:      {} (format v{})", sb.uuid, sb.version);
    println!("state:       {}, generation {}", doc["state"].as_str().unwrap_or(""), sb.generation);
    for (s, j) in slots.iter().zip(&slot_json) {
        let mark = if j["adopted"].as_bool() == Some(true) { " (adopted)" } else { "" };
        let status = match &s.result {
            Ok(x) => format!("generation {}, checksum ok", x.generation),
            Err(e) => e.to_string(),
        };
        println!("superblock {}: {status}{mark}", ["A", "B"][s.slot as usize]);
    }
    println!(
        "geometry:    {} blocks of {} bytes = {}{}",
        l.total_blocks,
        l.block_size,
        human(l.capacity_bytes()),
        if l.max_blocks > l.total_blocks {
            format!(", grows up to {}", human(l.max_blocks * u64::from(l.block_size)))
        } else {
            String::new()
        }
    );
    for (name, r) in
        [("bitmap", l.bitmap), ("journal", l.journal), ("image", l.image), ("data", l.data)]
    {
        println!(
            "  {name:8} blocks {:>10} .. {:<10} ({})",
            r.start,
            r.end(),
            human(r.len * u64::from(l.block_size))
        );
    }
    println!(
        "knobs:       {}, {}",
        if thin { "thin" } else { "preallocated" },
        if sparse { "sparse" } else { "non-sparse" }
    );
    println!("cache:       {}", cache_line(medium));
    println!("journal:     {}", journal_line(&sb, report.journal));
    println!(
        "contents:    {} files, {} directories, {} of {} blocks used",
        report.files,
        report.directories,
        report.used_blocks,
        if report.total_blocks > 0 { report.total_blocks } else { l.total_blocks }
    );
    if views.len() > 1 || members_problem.is_some() {
        let total: u64 = views.iter().map(|m| m.blocks).sum();
        println!(
            "members:     {} (concatenated, not mirrored), {} in {total} blocks",
            views.len(),
            human(total * u64::from(l.block_size))
        );
        for m in &views {
            println!(
                "  member {}: {} ({}), blocks {} .. {} ({}), uuid {}",
                m.index,
                m.path
                    .as_deref()
                    .map_or_else(|| "(no path recorded)".into(), |p| p.display().to_string()),
                m.medium.as_deref().unwrap_or("not opened"),
                m.first_block,
                m.first_block + m.blocks,
                human(m.bytes),
                m.uuid
            );
        }
        if let Some(why) = &members_problem {
            println!("  {why}");
        }
    }
    Ok(())
}

/// `vellum info` of a later member's carrier: its identity and its superblocks (the volume
/// is described by its member 0).
fn member_info(
    path: &Path,
    sb: &superblock::Superblock,
    slot_json: &[serde_json::Value],
    json: bool,
) {
    use std::os::unix::ffi::OsStrExt;
    let first = sb
        .member_paths
        .first()
        .filter(|p| !p.is_empty())
        .map(|p| Path::new(OsStr::from_bytes(p)).display().to_string());
    let k = sb.carrier_index as usize;
    let member_uuid = sb.members.get(k).map(|m| m.uuid.to_string());
    if json {
        let doc = serde_json::json!({
            "carrier": path,
            "volume_uuid": sb.uuid.to_string(),
            "member_index": k,
            "member_uuid": member_uuid,
            "member_blocks": sb.layout.total_blocks,
            "member0_path": first,
            "slots": slot_json,
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return;
    }
    println!("carrier:     {}", path.display());
    println!("volume:      {} (format v{})", sb.uuid, sb.version);
    println!(
        "member:      {k} of the volume, uuid {}, {} blocks of {} bytes",
        member_uuid.unwrap_or_default(),
        sb.layout.total_blocks,
        sb.layout.block_size
    );
    for j in slot_json {
        println!(
            "superblock {}: {}",
            j["slot"].as_str().unwrap_or(""),
            j["status"].as_str().unwrap_or("")
        );
    }
    println!(
        "the volume is described by its member 0: vellum info {}",
        first.as_deref().unwrap_or("MEMBER0")
    );
}

fn journal_json(
    sb: &superblock::Superblock,
    replay: Option<vellum_engine::ReplayReport>,
) -> serde_json::Value {
    let state = match (sb.journaled(), sb.layout.journal.len) {
        (true, _) => "enabled",
        (false, 0) => "none",
        (false, _) => "reserved",
    };
    let mut doc = serde_json::json!({
        "state": state,
        "enabled": sb.journaled(),
        "ring_blocks": sb.layout.journal.len,
    });
    if sb.journaled() {
        let j = replay.unwrap_or_default();
        doc["checkpoint_tail_block"] = sb.journal.tail.into();
        doc["checkpoint_sequence"] = sb.journal.sequence.into();
        doc["pending_batches"] = j.batches.into();
        doc["pending_records"] = j.records.into();
        doc["torn_tail"] = j.torn_tail.into();
        doc["destroyed"] = j.destroyed.into();
        doc["loss_unacknowledged"] = j.loss_unacknowledged.into();
        doc["lost_from"] = lost_from(sb, j).into();
    }
    doc
}

/// The journal sequence from which records may be lost, as an open of this volume reports it
/// (`JournalInfo::lost_from`): the one an earlier open recorded while the loss is
/// unacknowledged, else the checkpoint's when the ring is destroyed now; `None` when nothing
/// is lost.
fn lost_from(sb: &superblock::Superblock, j: vellum_engine::ReplayReport) -> Option<u64> {
    if sb.journal.flags & superblock::JOURNAL_LOSS != 0 {
        Some(sb.journal.lost_from)
    } else if j.destroyed {
        Some(sb.journal.sequence)
    } else {
        None
    }
}

fn journal_line(
    sb: &superblock::Superblock,
    replay: Option<vellum_engine::ReplayReport>,
) -> String {
    let blocks = sb.layout.journal.len;
    if !sb.journaled() {
        return if blocks == 0 {
            "none (every commit is a copy-on-write checkpoint)".into()
        } else {
            format!("{blocks} blocks reserved, off (vellum journal enable switches it on)")
        };
    }
    let j = replay.unwrap_or_default();
    let line = format!(
        "enabled, a ring of {blocks} blocks; checkpoint at sequence {}, {} batches ({} records) \
         to replay",
        sb.journal.sequence, j.batches, j.records
    );
    let from = lost_from(sb, j).unwrap_or_default();
    let loss = if j.destroyed {
        format!(
            "; REGION DESTROYED (opens at the checkpoint; records from sequence {from} on are \
             lost)"
        )
    } else if j.loss_unacknowledged {
        format!(
            "; a loss of records from sequence {from} on is unacknowledged (vellum journal \
             ack)"
        )
    } else {
        String::new()
    };
    line + &loss
}

/// The page cache an open of this medium gets: an open-time setting, not stored on disk.
fn cache_knob(medium: CarrierKind) -> serde_json::Value {
    let options = VolumeOptions::default();
    serde_json::json!({
        "support": medium.knob_support(Knob::Cache).to_string(),
        "default_bytes": options.cache_bytes_for(medium).unwrap_or(0),
        "set_with": "vellum serve --cache-size",
    })
}

fn cache_line(medium: CarrierKind) -> String {
    match VolumeOptions::default().cache_bytes_for(medium) {
        Ok(0) | Err(_) => format!("none ({} on {medium})", medium.knob_support(Knob::Cache)),
        Ok(n) => format!(
            "{} per open by default (vellum serve --cache-size; 0 for none); buffered tiers, \
             write-back only without write-through",
            human(n as u64)
        ),
    }
}

/// `vellum check`: prints findings; the exit code is the report's (0, 1, 2, 3).
pub fn check(path: &Path) -> Result<i32, CliError> {
    let carrier = open_carrier(path)?;
    // Every member, opened read-only by the paths member 0's table records; a member that
    // cannot be gathered is named, and the check of member 0 alone says it is incomplete.
    drop(carrier);
    let carriers = match super::carrier::gather_read_only(path) {
        Ok(carriers) => carriers,
        Err(e) => {
            println!("members: {e}");
            vec![open_carrier(path)?]
        }
    };
    let refs: Vec<&dyn Carrier> = carriers.iter().map(AsRef::as_ref).collect();
    let report = vellum_engine::check_members(&refs);
    for (i, s) in report.slots.iter().enumerate() {
        println!("superblock {}: {s}", ["A", "B"][i]);
    }
    for (k, slots) in &report.members {
        let states: Vec<String> = slots
            .iter()
            .enumerate()
            .map(|(i, s)| format!("superblock {}: {s}", ["A", "B"][i]))
            .collect();
        println!("member {k}: {}", states.join("; "));
    }
    if let Some((slot, generation)) = report.adopted {
        println!("adopted: superblock {}, generation {generation}", ["A", "B"][slot as usize]);
        println!(
            "{} files, {} directories, {} metadata blocks, {} of {} blocks used",
            report.files,
            report.directories,
            report.metadata_blocks,
            report.used_blocks,
            report.total_blocks
        );
    }
    for f in &report.findings {
        let tag = match f.kind {
            FindingKind::Note => "note",
            FindingKind::Leak => "leak",
            FindingKind::Corrupt => "CORRUPT",
            FindingKind::Incomplete => "could not complete",
        };
        println!("{tag}: {}", f.message);
    }
    let code = report.exit_code();
    println!(
        "{}",
        match code {
            0 => "no errors",
            2 => "the volume is damaged",
            3 => "leaked blocks only (open reclaims them)",
            _ => "the check could not complete",
        }
    );
    Ok(code)
}

pub(super) fn display_name(name: &[u8]) -> String {
    name.escape_ascii().to_string()
}

/// An engine error of a path inside the volume `carrier`, naming the volume where the path
/// is missing ("/a does not exist in v.vlm").
pub(super) fn in_volume(carrier: &Path) -> impl Fn(Error) -> CliError + '_ {
    move |e| match e {
        Error::NotFound { path } => CliError::Usage(format!(
            "{} does not exist in {}",
            display_name(&path),
            carrier.display()
        )),
        other => other.into(),
    }
}

pub fn stat(path: &Path, target: &OsStr) -> Result<(), CliError> {
    let v = open(path, true)?;
    let p = target.as_bytes();
    let st = v.stat(p).map_err(in_volume(path))?;
    println!("path:       {}", display_name(p));
    println!("inode:      {}", st.ino);
    println!("kind:       {}", if st.kind == FileKind::File { "file" } else { "directory" });
    println!("size:       {} bytes", st.size);
    println!("allocated:  {} blocks in {} extents", st.allocated_blocks, st.extents);
    println!("created:    {} ns after the epoch", st.created_unix_ns);
    println!("modified:   {} ns after the epoch", st.modified_unix_ns);
    if st.kind == FileKind::File {
        let f = v.open_file(p)?;
        for e in f.extents()? {
            println!(
                "  extent    logical block {} -> block {} ({} blocks)",
                e.logical_block, e.physical_block, e.blocks
            );
        }
        for (k, val) in f.attrs()? {
            println!("  attribute {} = {} bytes", display_name(&k), val.len());
        }
    }
    Ok(())
}

/// `CARRIER:/path` splits into (carrier, path) when CARRIER exists; anything else is a host
/// path.
pub(super) fn split_location(arg: &OsStr) -> Option<(PathBuf, Vec<u8>)> {
    let b = arg.as_bytes();
    let mut from = 0;
    while let Some(i) = b[from..].windows(2).position(|w| w == b":/").map(|i| i + from) {
        let carrier = PathBuf::from(OsStr::from_bytes(&b[..i]));
        if carrier.exists() {
            return Some((carrier, b[i + 1..].to_vec()));
        }
        from = i + 1;
    }
    None
}

pub fn mkdir(path: &Path, target: &OsStr, parents: bool) -> Result<(), CliError> {
    let v = open(path, false)?;
    if parents {
        v.create_dir_all(target.as_bytes())?;
    } else {
        v.create_dir(target.as_bytes())?;
    }
    Ok(v.close()?)
}

pub fn mv(path: &Path, from: &OsStr, to: &OsStr) -> Result<(), CliError> {
    let v = open(path, false)?;
    v.rename(from.as_bytes(), to.as_bytes()).map_err(in_volume(path))?;
    Ok(v.close()?)
}

fn slot_name(slot: u8) -> &'static str {
    if slot == 0 { "A" } else { "B" }
}
