//! The carriers of a volume of several members (docs/OPERATIONS.md, "Adding and replacing
//! carriers"): `vellum format VOL --carrier B ...`, `vellum carrier add`, `carrier replace`
//! and `carrier list`, and the member view `vellum info` and `vellum check` print.
//!
//! Members are concatenated, not mirrored: the volume's block space is member 0's blocks,
//! then member 1's, and so on; losing any member loses the volume. Member 0 holds the
//! journal and the commit point; it is replaced offline by copying its carrier byte for byte.
//!
//! Invariants: a command that refuses its input changes nothing (no carrier file is left
//! behind that the command created, no volume is touched); a carrier file this command
//! created is removed again only while no superblock of member 0 can name it (the engine
//! refused before its commit); every refusal is one line and a non-zero exit.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use vellum_engine::media::{self, Carrier, CarrierOptions};
use vellum_engine::{Error, FormatOptions, MemberCarrier, MemberInfo, Volume, VolumeOptions};

use super::CliError;
use super::size::human;

/// Zero-fills of this size or less show no progress bar.
const PROGRESS_ABOVE: u64 = 8 << 20;

/// Read-only knobs for inspecting a carrier (`info`, `check`): direct IO on a block device
/// only (a file's page cache is coherent with any writer).
pub(super) fn read_only_knobs(path: &Path) -> CarrierOptions {
    CarrierOptions {
        direct_io: media::is_block_device(path),
        write_through: false,
        read_only: true,
    }
}

/// Opens a member read-only by the path member 0's table records.
pub(super) fn open_read_only(path: &Path) -> vellum_engine::Result<Box<dyn Carrier>> {
    media::open_carrier(path, read_only_knobs(path))
}

/// True for the error a file carrier gives when the host file system refuses `O_DIRECT`.
fn refuses_direct_io(e: &Error, path: &Path) -> bool {
    matches!(e, Error::Open { source, .. } if source.kind() == std::io::ErrorKind::InvalidInput)
        && !media::is_block_device(path)
}

/// A progress callback drawing a zero-fill bar on a terminal for fills above 8 MiB.
struct Bar {
    bar: indicatif::ProgressBar,
}

impl Bar {
    fn new(verb: &str) -> Bar {
        let bar = if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::with_draw_target(
                None,
                indicatif::ProgressDrawTarget::stderr(),
            );
            bar.set_style(
                indicatif::ProgressStyle::with_template(&format!(
                    "{verb} {{bar:40}} {{bytes}}/{{total_bytes}} ({{bytes_per_sec}}, {{eta}})"
                ))
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        } else {
            indicatif::ProgressBar::hidden()
        };
        Bar { bar }
    }

    fn report(&self, done: u64, total: u64) {
        if total > PROGRESS_ABOVE {
            self.bar.set_length(total);
            self.bar.set_position(done);
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// The paths as the same file or the same absolute path (a carrier given twice).
fn same_carrier(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(x), Ok(y)) = (std::path::absolute(a), std::path::absolute(b))
        && x == y
    {
        return true;
    }
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// A new carrier for `vellum format --carrier`: a block device whole (refused unless it
/// looks empty or `force`), or a new file of `size` bytes, preallocated and zero-filled.
/// Returns the carrier and whether this call created the file.
fn create_carrier(
    path: &Path,
    size: Option<u64>,
    force: bool,
    bar: &Bar,
) -> Result<(Box<dyn Carrier>, bool), CliError> {
    if size.is_none() && !media::is_block_device(path) {
        return Err(CliError::Usage(
            "--size is required for a file carrier (e.g. --size 64MiB)".into(),
        ));
    }
    if !media::is_block_device(path) {
        super::volume::check_parent(path)?;
    }
    let progress = |done: u64, total: u64| bar.report(done, total);
    media::create_carrier(path, size, force, Some(&progress)).map_err(|e| match e {
        Error::NotEmpty { path } => CliError::Usage(format!(
            "{} does not look empty: pass --force to overwrite it",
            path.display()
        )),
        other => other.into(),
    })
}

/// `vellum format VOL --carrier B ...`: member 0 at `a.carrier` laid out by `a`'s flags,
/// then every carrier of `others`, whole. Preallocated only: the flags that make a volume
/// thin, sparse or growing are refused before anything is created.
pub fn format(a: &super::volume::FormatArgs, others: &[PathBuf]) -> Result<(), CliError> {
    for (flag, on) in [("--thin", a.thin), ("--sparse", a.sparse), ("--grow", a.grow)] {
        if on {
            return Err(CliError::Usage(format!(
                "{flag} cannot be used with --carrier: a volume of several members is \
                 preallocated (only a single-carrier volume is thin, sparse or growing)"
            )));
        }
    }
    let all: Vec<&Path> =
        std::iter::once(a.carrier.as_path()).chain(others.iter().map(PathBuf::as_path)).collect();
    for (i, p) in all.iter().enumerate() {
        if let Some(q) = all[..i].iter().find(|q| same_carrier(p, q)) {
            let also = if p == q { String::new() } else { format!(" (as {} too)", q.display()) };
            return Err(CliError::Usage(format!(
                "{} is given twice{also}: each member needs its own carrier; nothing was \
                 changed",
                p.display(),
            )));
        }
    }
    let size = a.size;
    let journal_bytes = match a.journal {
        Some(n) => n,
        None if a.use_journal => {
            let capacity = match size {
                Some(n) if !media::is_block_device(&a.carrier) => n,
                _ => device_len(&a.carrier)?,
            };
            vellum_engine::default_journal_bytes(capacity)
        }
        None => 0,
    };
    // Refuse a bad geometry of member 0 before creating (and zero-filling) anything.
    if !media::is_block_device(&a.carrier) {
        let Some(capacity) = size else {
            return Err(CliError::Usage(
                "--size is required for a file carrier (e.g. --size 64MiB)".into(),
            ));
        };
        vellum_engine::layout::Layout::for_growing_format(
            capacity,
            None,
            a.block_size,
            journal_bytes,
            None,
        )?;
    }
    // Every carrier must be fit to take before the first is created (and zero-filled).
    if !a.force {
        for p in &all {
            if !media::looks_empty(p)? {
                return Err(CliError::Usage(format!(
                    "{} does not look empty: pass --force to overwrite it (nothing was changed)",
                    p.display()
                )));
            }
        }
    }
    let bar = Bar::new("zero-filling");
    let mut created: Vec<PathBuf> = Vec::new();
    let result = (|| -> Result<Volume, CliError> {
        let mut carriers = Vec::new();
        for p in &all {
            let (carrier, new) = create_carrier(p, size, a.force, &bar)?;
            if new {
                created.push(p.to_path_buf());
            }
            carriers.push(MemberCarrier { carrier, path: Some(p.to_path_buf()) });
        }
        let first = carriers.remove(0);
        let fmt = FormatOptions {
            capacity_bytes: if media::is_block_device(&a.carrier) { None } else { size },
            grow_max_bytes: None,
            block_size: a.block_size,
            journal_bytes,
            journal: a.use_journal,
            image_blocks: None,
            preallocate: true,
            sparse: false,
            force: true,
            progress: None,
        };
        Ok(Volume::format_members(first, carriers, &fmt, VolumeOptions::default())?)
    })();
    drop(bar);
    let v = match result {
        Ok(v) => v,
        Err(e) => {
            for p in &created {
                let _ = std::fs::remove_file(p);
            }
            return Err(e);
        }
    };
    let info = v.info();
    v.close()?;
    let bs = u64::from(info.layout.block_size);
    let total: u64 = info.members.iter().map(|m| m.blocks).sum();
    println!(
        "formatted {} members: {} in {} blocks of {} bytes, preallocated, non-sparse, {}, \
         volume {}",
        info.members.len(),
        human(total * bs),
        total,
        info.layout.block_size,
        info.journal.map_or_else(
            || "no journal".to_string(),
            |j| format!("journal of {} blocks", j.blocks)
        ),
        info.uuid
    );
    for m in &info.members {
        println!("  {}", member_line(m, bs));
    }
    Ok(())
}

/// The size of the file or block device at `path`.
fn device_len(path: &Path) -> Result<u64, CliError> {
    use std::io::Seek;
    std::fs::File::open(path)
        .and_then(|mut f| f.seek(std::io::SeekFrom::End(0)))
        .map_err(|e| CliError::Io(e, format!("reading the size of {}", path.display())))
}

fn member_line(m: &MemberInfo, block_size: u64) -> String {
    format!(
        "member {}: {} ({}), blocks {} .. {} ({}), uuid {}",
        m.index,
        m.path.as_deref().map_or_else(|| "(no path recorded)".into(), |p| p.display().to_string()),
        m.medium,
        m.first_block,
        m.first_block + m.blocks,
        human(m.blocks * block_size),
        m.uuid
    )
}

/// Opens the volume at `path` for a change of its members, offline (the volume must not be
/// open elsewhere: the carrier's lock refuses it).
fn open_for_change(path: &Path) -> Result<Volume, CliError> {
    super::volume::open(path, false).map_err(|e| match e {
        CliError::Engine(Error::Locked { .. }) => CliError::Usage(format!(
            "{} is open elsewhere: the CLI changes members of a closed volume (a running \
             process adds or replaces members through the library)",
            path.display()
        )),
        other => other,
    })
}

/// Runs `change`, which may create the carrier file at `new`, with production knobs, then
/// buffered where the file system refuses `O_DIRECT`; removes a file it created again when
/// the engine refused before its commit (a refusal of the input, or the file's own creation
/// failing), so that a refusal changes nothing.
fn attempt(
    new: &Path,
    mut change: impl FnMut(CarrierOptions) -> vellum_engine::Result<()>,
) -> Result<(), CliError> {
    let existed = new.exists();
    let mut knobs = CarrierOptions::PRODUCTION;
    loop {
        match change(knobs) {
            Err(e) if knobs.direct_io && refuses_direct_io(&e, new) => {
                // The new file stays buffered; the second try starts from nothing.
                if !existed {
                    let _ = std::fs::remove_file(new);
                }
                knobs.direct_io = false;
            }
            Ok(()) => return Ok(()),
            Err(e) => {
                let before_commit = matches!(
                    e,
                    Error::Member { .. }
                        | Error::Invalid(_)
                        | Error::NotEmpty { .. }
                        | Error::Open { .. }
                );
                if before_commit && !existed && new.is_file() {
                    let _ = std::fs::remove_file(new);
                }
                return Err(match e {
                    Error::NotEmpty { path } => CliError::Usage(format!(
                        "{} is not empty and holds no volume: give an empty file or a new path \
                         (nothing was changed)",
                        path.display()
                    )),
                    other => other.into(),
                });
            }
        }
    }
}

/// Refuses a block device that does not look empty unless `force` (the engine refuses one
/// that holds a volume or member always, by name; anything else it would zero-fill).
fn refuse_used_device(path: &Path, force: bool) -> Result<(), CliError> {
    if force || !media::is_block_device(path) {
        return Ok(());
    }
    let device = media::open_carrier(path, read_only_knobs(path))?;
    // A volume or member is left to the engine, which names it.
    let holds_volume = vellum_engine::read_slots(device.as_ref())
        .is_ok_and(|slots| slots.iter().any(|s| s.result.is_ok()));
    drop(device);
    if !holds_volume && !media::looks_empty(path)? {
        return Err(CliError::Usage(format!(
            "{} does not look empty: pass --force to zero-fill it (nothing was changed)",
            path.display()
        )));
    }
    Ok(())
}

/// With `force`, a block device at `new` opened as it is: the engine's path-based calls
/// refuse one that does not look empty; a volume or member on it is still refused by name.
fn forced_device(
    new: &Path,
    force: bool,
    knobs: CarrierOptions,
) -> vellum_engine::Result<Option<MemberCarrier>> {
    if !force || !media::is_block_device(new) {
        return Ok(None);
    }
    let carrier = media::open_carrier(new, knobs)?;
    Ok(Some(MemberCarrier { carrier, path: Some(new.to_owned()) }))
}

/// A member change progress can report on (`Volume::add_member`, `replace_member`, ...).
type Progress<'a> = Option<&'a (dyn Fn(u64, u64) + Sync)>;

/// Runs an add or replace of `new` on `v` offline, with a progress bar named `doing`: `forced`
/// takes a block device given with `--force` as it is, `by_path` lets the engine create or
/// admit the carrier at `new`. Closes the volume either way; returns its members after.
fn change_members(
    v: Volume,
    new: &Path,
    force: bool,
    doing: &str,
    forced: impl Fn(&Volume, MemberCarrier, Progress<'_>) -> vellum_engine::Result<()>,
    by_path: impl Fn(&Volume, CarrierOptions, Progress<'_>) -> vellum_engine::Result<()>,
) -> Result<Vec<MemberInfo>, CliError> {
    if !media::is_block_device(new) {
        super::volume::check_parent(new)?;
    }
    let bar = Bar::new(doing);
    let progress = |done: u64, total: u64| bar.report(done, total);
    let result = attempt(new, |knobs| match forced_device(new, force, knobs)? {
        Some(member) => forced(&v, member, Some(&progress)),
        None => by_path(&v, knobs, Some(&progress)),
    });
    drop(bar);
    if let Err(e) = result {
        let _ = v.close();
        return Err(e);
    }
    let members = v.members();
    v.close()?;
    Ok(members)
}

/// `vellum carrier add VOL NEW [--size SIZE]`, offline: NEW joins as the volume's last
/// member, zero-filled before member 0's table names it.
pub fn add(volume: &Path, new: &Path, size: Option<u64>, force: bool) -> Result<(), CliError> {
    refuse_used_device(new, force)?;
    let v = open_for_change(volume)?;
    let bs = u64::from(v.info().layout.block_size);
    // No --size: an existing file keeps its length, a new (or empty) one gets the size of
    // the last member; a block device is used whole.
    let size = match size {
        Some(s) => Some(s),
        None if media::is_block_device(new) => None,
        None => match std::fs::metadata(new).map(|m| m.len()) {
            Ok(len) if len > 0 => Some(len),
            _ => v.members().last().map(|m| m.blocks * bs),
        },
    };
    let members = change_members(
        v,
        new,
        force,
        "zero-filling",
        |v, member, progress| v.add_member(member, progress),
        |v, knobs, progress| v.add_member_path(new, size, knobs, progress),
    )?;
    let total: u64 = members.iter().map(|m| m.blocks).sum();
    if let Some(m) = members.last() {
        println!("added {}", member_line(m, bs));
    }
    println!(
        "{}: {} members, {} in {total} blocks",
        volume.display(),
        members.len(),
        human(total * bs)
    );
    Ok(())
}

/// `vellum carrier replace VOL OLD NEW`, offline: member OLD's blocks are copied to NEW,
/// verified, and the member table switched to NEW in one commit. Member 0 is refused: it is
/// copied byte for byte (dd) with the volume closed instead.
pub fn replace(volume: &Path, old: &Path, new: &Path, force: bool) -> Result<(), CliError> {
    refuse_used_device(new, force)?;
    // OLD is looked up on a read-only open: a refusal writes nothing to the volume.
    let looked = super::volume::open(volume, true)?;
    let (found, paths) = (looked.member_index(old), looked.members());
    looked.close()?;
    let index = match found {
        None => {
            let paths: Vec<String> = paths
                .iter()
                .map(|m| {
                    m.path
                        .as_deref()
                        .map_or_else(|| format!("member {}", m.index), |p| p.display().to_string())
                })
                .collect();
            return Err(CliError::Usage(format!(
                "{} is not a member of {} (its members: {}); nothing was changed",
                old.display(),
                volume.display(),
                paths.join(", ")
            )));
        }
        Some(0) => {
            return Err(CliError::Usage(format!(
                "{} is member 0 of {}, which holds the journal and the commit point: member 0 \
                 is replaced offline: copy its carrier byte for byte (dd) with the volume \
                 closed and open the copy; nothing was changed",
                old.display(),
                volume.display()
            )));
        }
        Some(k) => k,
    };
    let v = open_for_change(volume)?;
    let bs = u64::from(v.info().layout.block_size);
    let members = change_members(
        v,
        new,
        force,
        "copying",
        |v, member, progress| v.replace_member(index, member, progress),
        |v, knobs, progress| v.replace_member_path(index, new, knobs, progress),
    )?;
    if let Some(m) = members.get(index) {
        println!("replaced {} by {}", old.display(), member_line(m, bs));
    }
    println!(
        "{} is no longer in use by {} (it opens as nothing but a stale member)",
        old.display(),
        volume.display()
    );
    Ok(())
}

/// `vellum carrier list VOL`: every member, member 0 first (read-only).
pub fn list(volume: &Path) -> Result<(), CliError> {
    let v = super::volume::open(volume, true)?;
    let bs = u64::from(v.info().layout.block_size);
    for m in v.members() {
        println!("{}", member_line(&m, bs));
    }
    Ok(())
}

/// One member as `vellum info` shows it, from member 0's table.
pub(super) struct MemberView {
    pub index: usize,
    pub path: Option<PathBuf>,
    pub uuid: vellum_engine::Uuid,
    pub first_block: u64,
    pub blocks: u64,
    pub capacity_blocks: u64,
    pub bytes: u64,
    /// The medium of its carrier, when it could be opened.
    pub medium: Option<String>,
}

/// The carriers of every member of the volume whose member 0 is at `path`, member 0 first,
/// each opened read-only (later members by the paths member 0's table records); the error
/// names a member that cannot be opened or is not the one the table records.
pub(super) fn gather_read_only(path: &Path) -> Result<Vec<Box<dyn Carrier>>, String> {
    let opener = |p: &Path| open_read_only(p);
    open_read_only(path)
        .and_then(|c| {
            vellum_engine::gather_members(
                vec![MemberCarrier { carrier: c, path: Some(path.to_owned()) }],
                Some(&opener),
            )
        })
        .map_err(|e| e.to_string())
}

/// Every member of the volume whose member 0 is at `path` and whose adopted superblock is
/// `sb`, with the mediums of `gathered` (`gather_read_only`); the second value says why the
/// members could not all be opened (`None`: they all were).
pub(super) fn member_views(
    path: &Path,
    sb: &vellum_engine::superblock::Superblock,
    gathered: &Result<Vec<Box<dyn Carrier>>, String>,
) -> (Vec<MemberView>, Option<String>) {
    use std::os::unix::ffi::OsStrExt;
    if sb.carrier_index != 0 {
        let at = sb
            .member_paths
            .first()
            .filter(|p| !p.is_empty())
            .map(|p| format!(" ({})", Path::new(std::ffi::OsStr::from_bytes(p)).display()))
            .unwrap_or_default();
        return (
            Vec::new(),
            Some(format!(
                "{} is member {} of its volume: run this on its member 0{at}",
                path.display(),
                sb.carrier_index
            )),
        );
    }
    let Ok(geometry) = sb.geometry_checked() else {
        return (Vec::new(), Some("the member table places no member".into()));
    };
    let mut mediums: Vec<Option<String>> = vec![None; geometry.spans.len()];
    let mut problem = None;
    match gathered {
        Ok(carriers) => {
            for (m, c) in mediums.iter_mut().zip(carriers) {
                *m = Some(c.medium().to_string());
            }
        }
        Err(e) => problem = Some(e.clone()),
    }
    let bs = u64::from(sb.layout.block_size);
    let views = geometry
        .spans
        .iter()
        .enumerate()
        .map(|(k, span)| {
            let recorded = sb
                .member_paths
                .get(k)
                .filter(|p| !p.is_empty())
                .map(|p| PathBuf::from(std::ffi::OsStr::from_bytes(p)));
            MemberView {
                index: k,
                path: if k == 0 { Some(path.to_owned()) } else { recorded },
                uuid: sb.members.get(k).map(|m| m.uuid).unwrap_or_default(),
                first_block: span.base,
                blocks: span.layout.total_blocks,
                capacity_blocks: sb.members.get(k).map_or(0, |m| m.capacity_blocks),
                bytes: span.layout.total_blocks * bs,
                medium: mediums[k].clone(),
            }
        })
        .collect();
    (views, problem)
}
