//! `vellum cp`, `ls`, `cat` and `rm` over every medium of the facade (issue 24;
//! `vellum_engine::media`, docs/MEDIA.md).
//!
//! What an argument names:
//! - a URL with a scheme is that medium: `local:///abs/path`, `memory:/path`,
//!   `virtual:///vol.vlm[:/path]`, `s3://bucket/key?endpoint=...&region=...`;
//! - `ls`, `cat`, `rm`: a bare argument is a volume, as before the facade (`VOL`, `VOL PATH`
//!   or `VOL:/path`);
//! - `cp`: `-` is standard input (source) or output (destination); `VOL:/path` where VOL
//!   exists is a file in that volume; any other bare path is a host file, so a whole volume
//!   file copies as its bytes (`vellum cp v.vlm s3://bucket/v.vlm`).
//!
//! What `cp` guarantees when it exits 0: the destination holds exactly the source's bytes,
//! durably (the destination's sync or close returned: an fdatasync on `local://`, a volume
//! commit on `virtual://`, a completed upload on `s3://`; `memory:` ends with the process).
//! A failed copy leaves no complete-looking destination: where the medium's rename is atomic
//! the bytes go to a temporary name beside the destination, renamed over it at the end; on
//! object storage the upload only completes at close, so a failure leaves nothing (or the
//! previous object). `--verify` also reads the destination back and compares its CRC-32C
//! with the one of the bytes sent.
//!
//! One copy loop ([`pump`]) moves the bytes between every pair of media, a 1 MiB chunk at a
//! time, with a progress bar on stderr for copies above 8 MiB when stderr is a terminal.

use std::ffi::{OsStr, OsString};
use std::io::{IsTerminal, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use vellum_engine::error::RemoteFailure;
use vellum_engine::media::{self, Bare, EntryKind, MediaFile, MediaOptions, MediaUrl, Target};
use vellum_engine::{Error, FileKind, Volume};

use super::CliError;
use super::volume::{self, display_name, in_volume};

/// Bytes moved per read and write by `cp` and `cat`.
pub const CHUNK: usize = 1 << 20;

/// Copies larger than this show a progress bar (on a terminal).
const PROGRESS_ABOVE: u64 = 8 << 20;

/// The suffix of the temporary name a copy is written under before its rename.
const TMP_SUFFIX: &str = ".vellum-cp-tmp";

/// An error of the facade on `url`, as one line naming the URL, mapped to the exit codes of
/// docs/OPERATIONS.md (2 bad URL, 5 not found, 6 unreachable).
pub fn media_error(url: &str, e: Error) -> CliError {
    let line = e.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
    let shown = url.split('?').next().unwrap_or(url);
    let named = if line.contains(shown) { line } else { format!("{url}: {line}") };
    match &e {
        Error::BadUrl { .. } => CliError::BadArguments(named),
        Error::NotFound { .. }
        | Error::Remote { kind: RemoteFailure::NotFound | RemoteFailure::NoSuchBucket, .. } => {
            CliError::NotFound(named)
        }
        Error::Remote { kind: RemoteFailure::Unreachable, .. } => CliError::Unreachable(named),
        _ => CliError::Usage(named),
    }
}

fn utf8(arg: &OsStr) -> Result<&str, CliError> {
    arg.to_str().ok_or_else(|| {
        CliError::BadArguments(format!("{}: not valid UTF-8", Path::new(arg).display()))
    })
}

/// A URL with a scheme, parsed; `None` for a bare path.
fn scheme_url(arg: &OsStr) -> Result<Option<MediaUrl>, CliError> {
    let Some(s) = arg.to_str() else { return Ok(None) };
    match MediaUrl::parse(s, Bare::Local) {
        Ok(MediaUrl::Local(_)) if !s.starts_with("local://") => Ok(None),
        Ok(url) => Ok(Some(url)),
        Err(e) => Err(media_error(s, e)),
    }
}

fn open_target(arg: &str, url: &MediaUrl, read_only: bool) -> Result<Target, CliError> {
    let options = MediaOptions { read_only, ..MediaOptions::default() };
    media::open(url, options).map_err(|e| media_error(arg, e))
}

/// `dir` joined with `rel` (an absolute `rel` replaces it).
fn join(dir: &str, rel: &OsStr) -> Result<String, CliError> {
    let rel = utf8(rel)?;
    Ok(if rel.starts_with('/') || dir.is_empty() {
        rel.to_string()
    } else if dir.ends_with('/') {
        format!("{dir}{rel}")
    } else {
        format!("{dir}/{rel}")
    })
}

/// What `ls`/`cat`/`rm` act on.
enum Place {
    /// A path in a volume (the volume commands, as before the facade).
    Volume(PathBuf, OsString),
    /// A path on a medium of the facade.
    Media { arg: String, target: Target },
}

fn place(url: &OsStr, path: Option<&OsStr>, read_only: bool) -> Result<Place, CliError> {
    let Some(parsed) = scheme_url(url)? else {
        // A bare argument: the volume, as before (`VOL`, `VOL PATH` or `VOL:/path`).
        if let Some((carrier, inner)) = volume::split_location(url) {
            if path.is_some() {
                return Err(CliError::BadArguments(format!(
                    "{}: give the path once (VOL:/path or VOL PATH)",
                    Path::new(url).display()
                )));
            }
            return Ok(Place::Volume(carrier, OsString::from(OsStr::from_bytes(&inner))));
        }
        let inner = path.map_or_else(|| OsString::from("/"), OsStr::to_os_string);
        return Ok(Place::Volume(PathBuf::from(url), inner));
    };
    let arg = utf8(url)?.to_string();
    if let MediaUrl::Virtual { volume, path: inner } = &parsed {
        let inner = match path {
            Some(p) => join(inner, p)?,
            None => inner.clone(),
        };
        return Ok(Place::Volume(volume.clone(), OsString::from(inner)));
    }
    let mut target = open_target(&arg, &parsed, read_only)?;
    if let Some(p) = path {
        target.path = join(&target.path, p)?;
    }
    Ok(Place::Media { arg, target })
}

/// `vellum ls URL [PATH]`.
pub fn ls(url: &OsStr, path: Option<&OsStr>) -> Result<(), CliError> {
    match place(url, path, true)? {
        Place::Volume(carrier, inner) => volume::ls(&carrier, &inner),
        Place::Media { arg, target } => {
            let Target { media, path } = target;
            if let Ok(st) = media.stat(&path)
                && st.kind == EntryKind::File
            {
                println!("f {:>12}  {}", st.len, base_name(&path));
                return Ok(());
            }
            let entries = media.list(&path).map_err(|e| media_error(&arg, e))?;
            for e in entries {
                match e.kind {
                    EntryKind::Directory => println!("d {:>12}  {}/", "-", base_name(&e.path)),
                    EntryKind::File => println!("f {:>12}  {}", e.len, base_name(&e.path)),
                }
            }
            Ok(())
        }
    }
}

fn base_name(path: &str) -> &str {
    let trimmed = path.trim_end_matches('/');
    trimmed.rsplit('/').next().filter(|s| !s.is_empty()).unwrap_or(trimmed)
}

/// `vellum cat URL [PATH]`: the file's bytes on standard output.
pub fn cat(url: &OsStr, path: Option<&OsStr>) -> Result<(), CliError> {
    let (source, _volume) = match place(url, path, true)? {
        Place::Volume(carrier, inner) => {
            if path.is_none() && inner == "/" {
                return Err(CliError::BadArguments(format!(
                    "{}: name the file to print (vellum cat VOL /path)",
                    carrier.display()
                )));
            }
            let v = volume::open(&carrier, true)?;
            let file = v.open_file(inner.as_bytes()).map_err(in_volume(&carrier))?;
            (Source::Volume { file, at: 0 }, Some(v))
        }
        Place::Media { arg, target } => {
            let file = target.media.open(&target.path).map_err(|e| media_error(&arg, e))?;
            (Source::Media { file, at: 0, url: arg }, None)
        }
    };
    let mut source = source;
    let mut sink = Sink::Stdout;
    pump(&mut source, &mut sink, false).map(drop)
}

/// `vellum rm URL [PATH]`.
pub fn rm(url: &OsStr, path: Option<&OsStr>) -> Result<(), CliError> {
    match place(url, path, false)? {
        Place::Volume(carrier, inner) => {
            if path.is_none() && inner == "/" {
                return Err(CliError::BadArguments(format!(
                    "{}: name what to remove in the volume (vellum rm VOL /path)",
                    carrier.display()
                )));
            }
            volume::rm(&carrier, &inner)
        }
        Place::Media { arg, target } => {
            target.media.remove(&target.path).map_err(|e| media_error(&arg, e))
        }
    }
}

/// One side of `cp`.
enum Side {
    /// `-`: standard input or output.
    Std,
    /// `VOL:/path`: a file in a volume.
    Volume(PathBuf, Vec<u8>),
    /// A medium of the facade (a bare host path is `local://`).
    Media(String, MediaUrl),
}

fn side(arg: &OsStr) -> Result<Side, CliError> {
    if arg == "-" {
        return Ok(Side::Std);
    }
    if let Some(url) = scheme_url(arg)? {
        return Ok(match url {
            MediaUrl::Virtual { volume, path } => Side::Volume(volume, path.into_bytes()),
            url => Side::Media(utf8(arg)?.to_string(), url),
        });
    }
    if let Some((carrier, path)) = volume::split_location(arg) {
        return Ok(Side::Volume(carrier, path));
    }
    let b = arg.as_bytes();
    if let Some(i) = b.windows(2).position(|w| w == b":/") {
        // VOL:/path whose volume does not exist: name the volume the user meant.
        let carrier = Path::new(OsStr::from_bytes(&b[..i]));
        volume::check_parent(carrier)?;
        return Err(CliError::Usage(format!(
            "{}: no such volume (vellum format creates one)",
            carrier.display()
        )));
    }
    let shown = Path::new(arg).display().to_string();
    Ok(Side::Media(shown, MediaUrl::Local(PathBuf::from(arg))))
}

/// Where the bytes of a copy come from.
enum Source {
    Stdin,
    Volume { file: vellum_engine::File, at: u64 },
    Media { file: Box<dyn MediaFile>, at: u64, url: String },
}

impl Source {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, CliError> {
        match self {
            Source::Stdin => std::io::stdin()
                .read(buf)
                .map_err(|e| CliError::Io(e, "reading standard input".into())),
            Source::Volume { file, at } => {
                let n = file.read_at(buf, *at)?;
                *at += n as u64;
                Ok(n)
            }
            Source::Media { file, at, url } => {
                let n = file.read_at(buf, *at).map_err(|e| media_error(url, e))?;
                *at += n as u64;
                Ok(n)
            }
        }
    }

    /// The bytes to copy, where known (not on stdin).
    fn len(&self) -> Option<u64> {
        match self {
            Source::Stdin => None,
            Source::Volume { file, .. } => file.metadata().ok().map(|m| m.size),
            Source::Media { file, .. } => file.len().ok(),
        }
    }
}

/// Where the bytes of a copy go; nothing looks complete before [`Sink::finish`].
enum Sink {
    Stdout,
    Volume { volume: Volume, file: Option<vellum_engine::File>, tmp: Vec<u8>, dst: Vec<u8> },
    Media { url: String, target: Target, file: Option<Box<dyn MediaFile>>, tmp: Option<String> },
}

impl Sink {
    /// Opens a volume file for writing, under a temporary name beside `dst`.
    fn volume(volume: Volume, dst: Vec<u8>) -> Result<Sink, CliError> {
        // Check what the user named (the parent directory), so that no error speaks of the
        // temporary file.
        let parent = match dst.iter().rposition(|&b| b == b'/') {
            Some(0) | None => &b"/"[..],
            Some(i) => &dst[..i],
        };
        match volume.stat(parent) {
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
        if dst.ends_with(b"/") || volume.stat(&dst).is_ok_and(|st| st.kind == FileKind::Directory) {
            return Err(CliError::Usage(format!(
                "{} is a directory in the volume: name the file to write",
                display_name(&dst)
            )));
        }
        let mut tmp = dst.clone();
        tmp.extend_from_slice(TMP_SUFFIX.as_bytes());
        if volume.exists(&tmp)? {
            volume.remove(&tmp)?;
        }
        let file = volume.create_file(&tmp)?;
        Ok(Sink::Volume { volume, file: Some(file), tmp, dst })
    }

    /// Opens a file of a medium for writing: under a temporary name where the medium renames
    /// atomically, else (object storage) directly, as nothing is there before the close.
    fn media(url: String, target: Target) -> Result<Sink, CliError> {
        let path = target.path.clone();
        if path.ends_with('/') {
            return Err(CliError::Usage(format!(
                "{url}: name the file to write (not a directory)"
            )));
        }
        if let Ok(st) = target.media.stat(&path)
            && st.kind == EntryKind::Directory
        {
            return Err(CliError::Usage(format!("{url} is a directory: name the file to write")));
        }
        let tmp = target.media.rename_is_atomic().then(|| format!("{path}{TMP_SUFFIX}"));
        let file = target
            .media
            .create(tmp.as_deref().unwrap_or(&path))
            .map_err(|e| media_error(&url, e))?;
        Ok(Sink::Media { url, target, file: Some(file), tmp })
    }

    fn write(&mut self, buf: &[u8], at: u64) -> Result<(), CliError> {
        match self {
            Sink::Stdout => std::io::stdout()
                .lock()
                .write_all(buf)
                .map_err(|e| CliError::Io(e, "writing to standard output".into())),
            Sink::Volume { file, .. } => match file {
                Some(f) => Ok(f.write_at(buf, at)?),
                None => Err(CliError::Engine(Error::Closed)),
            },
            Sink::Media { url, file, .. } => match file {
                Some(f) => f.write_at(buf, at).map_err(|e| media_error(url, e)),
                None => Err(CliError::Engine(Error::Closed)),
            },
        }
    }

    /// The durability point: sync and close, then rename the temporary name over the
    /// destination. On failure nothing complete-looking is left.
    fn finish(&mut self) -> Result<(), CliError> {
        match self {
            Sink::Stdout => std::io::stdout()
                .flush()
                .map_err(|e| CliError::Io(e, "writing to standard output".into())),
            Sink::Volume { volume, file, tmp, dst } => {
                drop(file.take());
                // The volume's close (by the caller) commits the rename with the data.
                volume.rename(&tmp, &dst)?;
                Ok(())
            }
            Sink::Media { url, target, file, tmp } => {
                if let Some(f) = file.take() {
                    f.close().map_err(|e| media_error(url, e))?;
                }
                if let Some(tmp) = tmp.take() {
                    target.media.rename(&tmp, &target.path).map_err(|e| media_error(url, e))?;
                }
                Ok(())
            }
        }
    }

    /// Drops what a failed copy wrote (best effort; the failure is what gets reported).
    fn abort(&mut self) {
        match self {
            Sink::Stdout => {}
            Sink::Volume { volume, file, tmp, .. } => {
                drop(file.take());
                let _ = volume.remove(&tmp);
            }
            Sink::Media { target, file, tmp, .. } => {
                // Dropped without close: an object upload never completes.
                drop(file.take());
                if let Some(tmp) = tmp.take() {
                    let _ = target.media.remove(&tmp);
                }
            }
        }
    }
}

/// The one copy loop: `source` to `sink` a chunk at a time, then the sink's durability
/// point. Returns the bytes copied and their CRC-32C. A failure aborts the sink.
fn pump(source: &mut Source, sink: &mut Sink, progress: bool) -> Result<(u64, u32), CliError> {
    let total = source.len();
    let bar = if progress
        && total.unwrap_or(u64::MAX) > PROGRESS_ABOVE
        && std::io::stderr().is_terminal()
    {
        let bar = indicatif::ProgressBar::with_draw_target(
            total,
            indicatif::ProgressDrawTarget::stderr(),
        );
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "copying {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut buf = vec![0u8; CHUNK];
    let mut at = 0u64;
    let mut crc = 0u32;
    let copied = loop {
        // Fill the chunk (stdin and object reads may return less than asked).
        let mut filled = 0;
        while filled < buf.len() {
            match source.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) => {
                    bar.finish_and_clear();
                    sink.abort();
                    return Err(e);
                }
            }
        }
        if filled == 0 {
            break sink.finish();
        }
        if let Err(e) = sink.write(&buf[..filled], at) {
            break Err(e);
        }
        crc = crc32c::crc32c_append(crc, &buf[..filled]);
        at += filled as u64;
        bar.set_position(at);
    };
    bar.finish_and_clear();
    match copied {
        Ok(()) => Ok((at, crc)),
        // A closed pipe (`vellum cat ... | head`) is not an error.
        Err(CliError::Io(e, _)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok((at, crc)),
        Err(e) => {
            sink.abort();
            Err(e)
        }
    }
}

/// `vellum cp SRC DST [--verify]`.
pub fn cp(src: &OsStr, dst: &OsStr, verify: bool) -> Result<(), CliError> {
    let (from, to) = (side(src)?, side(dst)?);
    if let (Side::Media(_, MediaUrl::Local(_)), Side::Media(_, MediaUrl::Local(_))) = (&from, &to)
        && !src.as_bytes().starts_with(b"local://")
        && !dst.as_bytes().starts_with(b"local://")
    {
        return Err(CliError::Usage(
            "one side of cp must be VOLUME:/path (the volume must exist), - or a URL \
             (local:///abs/path, memory:/path, s3://bucket/key): for two host files use cp(1)"
                .into(),
        ));
    }
    if matches!((&from, &to), (Side::Std, Side::Std)) {
        return Err(CliError::Usage("cp from - to -: use cat".into()));
    }
    // The volumes, each opened once (a copy within one volume shares the handle).
    let dst_volume = match &to {
        Side::Volume(carrier, _) => Some(volume::open(carrier, false)?),
        _ => None,
    };
    let src_volume = match (&from, &to, &dst_volume) {
        (Side::Volume(a, _), Side::Volume(b, _), Some(v))
            if std::fs::canonicalize(a).ok() == std::fs::canonicalize(b).ok() =>
        {
            Some((v.clone(), false))
        }
        (Side::Volume(a, _), _, _) => Some((volume::open(a, true)?, true)),
        _ => None,
    };
    let result =
        copy_sides(&from, &to, src_volume.as_ref().map(|v| &v.0), dst_volume.as_ref(), verify);
    // Closed cleanly also when the copy failed (a full volume stays usable).
    let mut closed = Ok(());
    if let Some((v, own)) = src_volume
        && own
    {
        let _ = v.close();
    }
    if let Some(v) = dst_volume {
        closed = v.close();
    }
    result?;
    Ok(closed?)
}

fn copy_sides(
    from: &Side,
    to: &Side,
    src_volume: Option<&Volume>,
    dst_volume: Option<&Volume>,
    verify: bool,
) -> Result<(), CliError> {
    let mut source = match (from, src_volume) {
        (Side::Std, _) => Source::Stdin,
        (Side::Volume(carrier, path), Some(v)) => {
            Source::Volume { file: v.open_file(path).map_err(in_volume(carrier))?, at: 0 }
        }
        (Side::Media(arg, url), _) => {
            let target = open_target(arg, url, true)?;
            let file = target.media.open(&target.path).map_err(|e| media_error(arg, e))?;
            Source::Media { file, at: 0, url: arg.clone() }
        }
        (Side::Volume(..), None) => return Err(CliError::Engine(Error::Closed)),
    };
    let mut sink = match (to, dst_volume) {
        (Side::Std, _) => Sink::Stdout,
        (Side::Volume(_, path), Some(v)) => Sink::volume(v.clone(), path.clone())?,
        (Side::Media(arg, url), _) => {
            if let MediaUrl::Local(p) = url {
                volume::check_parent(p)?;
            }
            Sink::media(arg.clone(), open_target(arg, url, false)?)?
        }
        (Side::Volume(..), None) => return Err(CliError::Engine(Error::Closed)),
    };
    let (bytes, crc) = pump(&mut source, &mut sink, true)?;
    drop(source);
    if !verify {
        return Ok(());
    }
    // Read the destination back and compare what arrived with what was sent.
    let mut back = match (to, dst_volume) {
        (Side::Std, _) => {
            return Err(CliError::Usage(
                "--verify needs a destination that can be read back (not -)".into(),
            ));
        }
        (Side::Volume(carrier, path), Some(v)) => {
            Source::Volume { file: v.open_file(path).map_err(in_volume(carrier))?, at: 0 }
        }
        (Side::Media(arg, url), _) => {
            let target = open_target(arg, url, true)?;
            let file = target.media.open(&target.path).map_err(|e| media_error(arg, e))?;
            Source::Media { file, at: 0, url: arg.clone() }
        }
        (Side::Volume(..), None) => return Err(CliError::Engine(Error::Closed)),
    };
    let (got_bytes, got_crc) = checksum(&mut back)?;
    if (got_bytes, got_crc) != (bytes, crc) {
        return Err(CliError::Usage(format!(
            "verification failed: sent {bytes} bytes (crc32c {crc:08x}), the destination holds \
             {got_bytes} bytes (crc32c {got_crc:08x})"
        )));
    }
    Ok(())
}

/// The length and CRC-32C of everything `source` yields.
fn checksum(source: &mut Source) -> Result<(u64, u32), CliError> {
    let mut buf = vec![0u8; CHUNK];
    let (mut bytes, mut crc) = (0u64, 0u32);
    loop {
        let n = source.read(&mut buf)?;
        if n == 0 {
            return Ok((bytes, crc));
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        bytes += n as u64;
    }
}
