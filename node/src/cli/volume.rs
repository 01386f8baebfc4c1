//! The volume subcommands: `format`, `info`, `check`, `ls`, `stat`, `cat`, `cp`, `rm`,
//! `mkdir`, `mv`. Each opens the volume, does one thing, and closes it cleanly; a failure is
//! one line on stderr and a non-zero exit, never a panic.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use vellum_engine::error::Knob;
use vellum_engine::media::{self, Carrier, CarrierKind, CarrierOptions};
use vellum_engine::superblock::{self, LAYOUT_SPARSE, LAYOUT_THIN, VolumeState};
use vellum_engine::{Error, FileKind, FindingKind, FormatOptions, Volume, VolumeOptions};

use super::CliError;
use super::size::human;

/// Bytes moved per read or write by `cat` and `cp`.
const CHUNK: usize = 1 << 20;

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
fn check_parent(path: &Path) -> Result<(), CliError> {
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
    let slots = superblock::read_slots(carrier.as_ref())?;
    let report = vellum_engine::check(carrier.as_ref());
    let adopted = report.adopted;
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
    let l = sb.layout;
    let medium = carrier.medium();
    let thin = sb.layout_flags & LAYOUT_THIN != 0;
    let sparse = sb.layout_flags & LAYOUT_SPARSE != 0;
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
        "members": sb.members.iter().map(|m| serde_json::json!({"uuid": m.uuid.to_string(), "capacity_blocks": m.capacity_blocks})).collect::<Vec<_>>(),
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
        report.files, report.directories, report.used_blocks, l.total_blocks
    );
    Ok(())
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
    let report = vellum_engine::check(carrier.as_ref());
    for (i, s) in report.slots.iter().enumerate() {
        println!("superblock {}: {s}", ["A", "B"][i]);
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

fn display_name(name: &[u8]) -> String {
    name.escape_ascii().to_string()
}

/// An engine error of a path inside the volume `carrier`, naming the volume where the path
/// is missing ("/a does not exist in v.vlm").
fn in_volume(carrier: &Path) -> impl Fn(Error) -> CliError + '_ {
    move |e| match e {
        Error::NotFound { path } => CliError::Usage(format!(
            "{} does not exist in {}",
            display_name(&path),
            carrier.display()
        )),
        other => other.into(),
    }
}

pub fn ls(path: &Path, dir: &OsStr) -> Result<(), CliError> {
    let v = open(path, true)?;
    let entries = v.list(dir.as_bytes()).map_err(in_volume(path))?;
    for e in entries {
        match e.kind {
            FileKind::Directory => println!("d {:>12}  {}/", "-", display_name(&e.name)),
            FileKind::File => println!("f {:>12}  {}", e.size, display_name(&e.name)),
        }
    }
    Ok(())
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

/// Streams a volume file into `out`, a chunk at a time.
fn copy_out(f: &vellum_engine::File, out: &mut impl Write) -> Result<(), CliError> {
    let mut buf = vec![0u8; CHUNK];
    let mut at = 0u64;
    loop {
        let n = f.read_at(&mut buf, at)?;
        if n == 0 {
            return Ok(());
        }
        out.write_all(&buf[..n]).map_err(|e| CliError::Io(e, "writing the copy".into()))?;
        at += n as u64;
    }
}

pub fn cat(path: &Path, target: &OsStr) -> Result<(), CliError> {
    let v = open(path, true)?;
    let f = v.open_file(target.as_bytes()).map_err(in_volume(path))?;
    let mut out = std::io::stdout().lock();
    match copy_out(&f, &mut out)
        .and_then(|()| out.flush().map_err(|e| CliError::Io(e, "writing to stdout".into())))
    {
        // A closed pipe (`vellum cat ... | head`) is not an error.
        Err(CliError::Io(e, _)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `CARRIER:/path` splits into (carrier, path) when CARRIER exists; anything else is a host
/// path.
fn split_location(arg: &OsStr) -> Option<(PathBuf, Vec<u8>)> {
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

fn read_host(path: &OsStr) -> Result<Box<dyn Read>, CliError> {
    if path == "-" {
        return Ok(Box::new(std::io::stdin()));
    }
    let f = std::fs::File::open(path)
        .map_err(|e| CliError::Io(e, format!("opening {}", Path::new(path).display())))?;
    Ok(Box::new(f))
}

/// Writes `source` into the volume at `dst`, replacing an existing file atomically.
fn copy_into(v: &Volume, dst: &[u8], mut source: impl Read) -> Result<u64, CliError> {
    // The copy goes to a temporary name beside `dst` first: check what the user named (the
    // parent directory), so that no error speaks of the temporary file.
    let parent = match dst.iter().rposition(|&b| b == b'/') {
        Some(0) | None => &b"/"[..],
        Some(i) => &dst[..i],
    };
    match v.stat(parent) {
        Ok(st) if st.kind == FileKind::Directory => {}
        Ok(_) => {
            return Err(CliError::Usage(format!(
                "{} is not a directory in the volume",
                display_name(parent)
            )));
        }
        Err(Error::NotFound { .. }) => {
            return Err(CliError::Usage(format!(
                "the directory {} does not exist in the volume (create it: vellum mkdir -p)",
                display_name(parent)
            )));
        }
        Err(e) => return Err(e.into()),
    }
    if dst.ends_with(b"/") || v.stat(dst).is_ok_and(|st| st.kind == FileKind::Directory) {
        return Err(CliError::Usage(format!(
            "{} is a directory in the volume: name the file to write",
            display_name(dst)
        )));
    }
    let mut tmp = dst.to_vec();
    tmp.extend_from_slice(b".vellum-cp-tmp");
    if v.exists(&tmp)? {
        v.remove(&tmp)?;
    }
    let f = v.create_file(&tmp)?;
    let mut buf = vec![0u8; CHUNK];
    let mut at = 0u64;
    let copied = loop {
        let n = match source.read(&mut buf) {
            Ok(n) => n,
            Err(e) => break Err(CliError::Io(e, "reading the source".into())),
        };
        if n == 0 {
            break Ok(());
        }
        if let Err(e) = f.write_at(&buf[..n], at) {
            break Err(e.into());
        }
        at += n as u64;
    };
    drop(f);
    if let Err(e) = copied {
        // A full volume (or a bad source) leaves no partial copy behind.
        let _ = v.remove(&tmp);
        return Err(e);
    }
    v.rename(&tmp, dst)?;
    Ok(at)
}

pub fn cp(src: &OsString, dst: &OsString) -> Result<(), CliError> {
    match (split_location(src), split_location(dst)) {
        (None, None) => {
            // Name the volume the user meant, if an argument looks like CARRIER:/path.
            for arg in [dst, src] {
                let b = arg.as_bytes();
                if let Some(i) = b.windows(2).position(|w| w == b":/") {
                    let carrier = Path::new(OsStr::from_bytes(&b[..i]));
                    check_parent(carrier)?;
                    return Err(CliError::Usage(format!(
                        "{}: no such volume (vellum format creates one)",
                        carrier.display()
                    )));
                }
            }
            Err(CliError::Usage(
                "one side of cp must be CARRIER:/path (the carrier must exist)".into(),
            ))
        }
        (None, Some((carrier, path))) => {
            let v = open(&carrier, false)?;
            let copied = read_host(src).and_then(|source| copy_into(&v, &path, source));
            // Closed cleanly also when the copy failed (a full volume stays usable).
            let closed = v.close();
            copied?;
            Ok(closed?)
        }
        (Some((carrier, path)), None) if dst == "-" => {
            let v = open(&carrier, true)?;
            let f = v.open_file(&path).map_err(in_volume(&carrier))?;
            let mut out = std::io::stdout().lock();
            match copy_out(&f, &mut out)
                .and_then(|()| out.flush().map_err(|e| CliError::Io(e, "writing to stdout".into())))
            {
                // A closed pipe (`vellum cp VOL:/f - | head`) is not an error.
                Err(CliError::Io(e, _)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                other => other,
            }
        }
        (Some((carrier, path)), None) => {
            let v = open(&carrier, true)?;
            let f = v.open_file(&path).map_err(in_volume(&carrier))?;
            check_parent(Path::new(dst))?;
            let mut out = std::fs::File::create(dst)
                .map_err(|e| CliError::Io(e, format!("creating {}", Path::new(dst).display())))?;
            copy_out(&f, &mut out)?;
            out.sync_all().map_err(|e| CliError::Io(e, "syncing the copy".into()))
        }
        (Some((a, pa)), Some((b, pb))) => {
            let same = std::fs::canonicalize(&a).ok() == std::fs::canonicalize(&b).ok();
            let dst_volume = open(&b, false)?;
            let content = if same {
                dst_volume.open_file(&pa)?.read_to_end()?
            } else {
                let src_volume = open(&a, true)?;
                src_volume.open_file(&pa)?.read_to_end()?
            };
            let copied = copy_into(&dst_volume, &pb, content.as_slice());
            let closed = dst_volume.close();
            copied?;
            Ok(closed?)
        }
    }
}

pub fn rm(path: &Path, target: &OsStr) -> Result<(), CliError> {
    let v = open(path, false)?;
    v.remove(target.as_bytes()).map_err(in_volume(path))?;
    Ok(v.close()?)
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
