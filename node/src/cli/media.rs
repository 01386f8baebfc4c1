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
//! One copy loop ([`pump`]) moves the bytes between every pair of media, an 8 MiB chunk at a
//! time, with a progress bar on stderr for copies above 8 MiB when stderr is a terminal.

use std::ffi::OsStr;
use std::io::{IsTerminal, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use vellum_engine::Error;
use vellum_engine::error::RemoteFailure;
use vellum_engine::media::{
    self, Bare, EntryKind, Media, MediaFile, MediaOptions, MediaUrl, Medium, Target,
};

use super::CliError;
use super::volume::{self, display_name};

/// Bytes moved per read and write by `cp` and `cat`: 8 MiB, so that a read from object
/// storage (one ranged GET per `read_at`) carries its request cost over enough bytes.
pub const CHUNK: usize = 8 << 20;

/// Copies larger than this show a progress bar (on a terminal).
const PROGRESS_ABOVE: u64 = 8 << 20;

/// The suffix of the temporary name a copy is written under before its rename.
const TMP_SUFFIX: &str = ".vellum-cp-tmp";

/// An error of the facade on `url`, as one line naming the URL, mapped to the exit codes of
/// docs/OPERATIONS.md (2 bad URL, 5 not found, 6 unreachable).
pub fn media_error(url: &str, e: &Error) -> CliError {
    let line = e.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
    let shown = url.split('?').next().unwrap_or(url);
    let named = if line.contains(shown) { line } else { format!("{url}: {line}") };
    match e {
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
        Err(e) => Err(media_error(s, &e)),
    }
}

/// `dir` joined with `rel` (an absolute `rel` replaces it).
fn join(dir: &str, rel: &str) -> String {
    if rel.starts_with('/') || dir.is_empty() {
        rel.to_string()
    } else if dir.ends_with('/') {
        format!("{dir}{rel}")
    } else {
        format!("{dir}/{rel}")
    }
}

/// A path on a medium, opened, with what the user typed (for messages).
struct Place {
    arg: String,
    url: MediaUrl,
    target: Target,
}

impl Place {
    /// Opens what `arg` names; `bare` says what a bare path means.
    fn open(arg: &OsStr, bare: Bare, read_only: bool) -> Result<Place, CliError> {
        let s = utf8(arg)?;
        let url = MediaUrl::parse(s, bare).map_err(|e| media_error(s, &e))?;
        if let MediaUrl::Virtual { volume, .. } = &url
            && !volume.exists()
        {
            volume::check_parent(volume)?;
            return Err(CliError::Usage(format!(
                "{}: no such file or device (vellum format creates a volume)",
                volume.display()
            )));
        }
        let options = MediaOptions { read_only, ..MediaOptions::default() };
        let target = media::open(&url, options).map_err(|e| media_error(s, &e))?;
        Ok(Place { arg: s.to_string(), url, target })
    }

    /// An error of this place's medium as one line; a path missing in a volume says so as
    /// the volume commands always did ("/a does not exist in v.vlm").
    fn error(&self, e: Error) -> CliError {
        match (&self.url, e) {
            (MediaUrl::Virtual { volume, .. }, Error::NotFound { path }) => CliError::NotFound(
                format!("{} does not exist in {}", display_name(&path), volume.display()),
            ),
            (_, e) => media_error(&self.arg, &e),
        }
    }

    fn media(&self) -> &dyn Media {
        self.target.media.as_ref()
    }

    fn path(&self) -> &str {
        &self.target.path
    }
}

/// What `ls`/`cat`/`rm` act on: a URL of any medium, or a bare volume (`VOL`, `VOL:/path`)
/// with an optional path inside it.
fn place(url: &OsStr, path: Option<&OsStr>, read_only: bool) -> Result<Place, CliError> {
    let mut p = Place::open(url, Bare::Volume, read_only)?;
    if let Some(rel) = path {
        p.target.path = join(&p.target.path, utf8(rel)?);
    }
    Ok(p)
}

/// `vellum ls URL [PATH]`.
pub fn ls(url: &OsStr, path: Option<&OsStr>) -> Result<(), CliError> {
    let p = place(url, path, true)?;
    if let Ok(st) = p.media().stat(p.path())
        && st.kind == EntryKind::File
    {
        println!("f {:>12}  {}", st.len, base_name(p.path()));
        return Ok(());
    }
    let entries = p.media().list(p.path()).map_err(|e| p.error(e))?;
    for e in entries {
        match e.kind {
            EntryKind::Directory => println!("d {:>12}  {}/", "-", base_name(&e.path)),
            EntryKind::File => println!("f {:>12}  {}", e.len, base_name(&e.path)),
        }
    }
    Ok(())
}

fn base_name(path: &str) -> &str {
    let trimmed = path.trim_end_matches('/');
    trimmed.rsplit('/').next().filter(|s| !s.is_empty()).unwrap_or(trimmed)
}

/// `vellum cat URL [PATH]`: the file's bytes on standard output.
pub fn cat(url: &OsStr, path: Option<&OsStr>) -> Result<(), CliError> {
    let p = place(url, path, true)?;
    let file = p.media().open(p.path()).map_err(|e| p.error(e))?;
    let mut source = Source::Media { file, at: 0, place: &p };
    pump(&mut source, &mut Sink::Stdout, false).map(drop)
}

/// `vellum rm URL [PATH]`.
pub fn rm(url: &OsStr, path: Option<&OsStr>) -> Result<(), CliError> {
    let p = place(url, path, false)?;
    if p.path() == "/" {
        return Err(CliError::BadArguments(format!(
            "{}: name what to remove (vellum rm VOLUME /path, or a URL with the path)",
            p.arg
        )));
    }
    p.media().remove(p.path()).map_err(|e| p.error(e))
}

/// One side of `cp`: `-`, or a medium (`VOL:/path` a volume file, any other bare path a host
/// file).
fn side(arg: &OsStr, read_only: bool) -> Result<Option<Place>, CliError> {
    if arg == "-" {
        return Ok(None);
    }
    if scheme_url(arg)?.is_some() {
        return Place::open(arg, Bare::Local, read_only).map(Some);
    }
    if volume::split_location(arg).is_some() {
        return Place::open(arg, Bare::Volume, read_only).map(Some);
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
    volume::check_parent(Path::new(arg))?;
    Place::open(arg, Bare::Local, read_only).map(Some)
}

/// Where the bytes of a copy come from.
enum Source<'a> {
    Stdin,
    Media { file: Box<dyn MediaFile>, at: u64, place: &'a Place },
}

impl Source<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, CliError> {
        match self {
            Source::Stdin => std::io::stdin()
                .read(buf)
                .map_err(|e| CliError::Io(e, "reading standard input".into())),
            Source::Media { file, at, place } => {
                let n = file.read_at(buf, *at).map_err(|e| place.error(e))?;
                *at += n as u64;
                Ok(n)
            }
        }
    }

    /// The bytes to copy, where known (not on stdin).
    fn len(&self) -> Option<u64> {
        match self {
            Source::Stdin => None,
            Source::Media { file, .. } => file.len().ok(),
        }
    }
}

/// Where the bytes of a copy go; nothing looks complete before [`Sink::finish`].
enum Sink<'a> {
    Stdout,
    Media { place: &'a Place, file: Option<Box<dyn MediaFile>>, tmp: Option<String> },
}

impl<'a> Sink<'a> {
    /// Opens a file of a medium for writing: under a temporary name beside it where the
    /// medium renames atomically, else (object storage) directly, as nothing is there before
    /// the upload completes at close.
    fn media(place: &'a Place) -> Result<Sink<'a>, CliError> {
        let (m, path) = (place.media(), place.path());
        let in_volume = matches!(place.url, MediaUrl::Virtual { .. });
        let where_ = if in_volume { " in the volume" } else { "" };
        if m.medium() != Medium::Object {
            // Check what the user named (the parent directory), so that no error speaks of
            // the temporary file.
            let parent = match path.rfind('/') {
                Some(0) | None => "/",
                Some(i) => &path[..i],
            };
            match m.stat(parent) {
                Ok(st) if st.kind == EntryKind::Directory => {}
                Ok(_) => {
                    return Err(CliError::Usage(format!("{parent} is not a directory{where_}")));
                }
                Err(Error::NotFound { .. }) => {
                    let hint = if in_volume { " (create it: vellum mkdir -p)" } else { "" };
                    return Err(CliError::Usage(format!(
                        "the directory {parent} does not exist{where_}{hint}"
                    )));
                }
                Err(e) => return Err(place.error(e)),
            }
        }
        if path.ends_with('/') || m.stat(path).is_ok_and(|st| st.kind == EntryKind::Directory) {
            return Err(CliError::Usage(format!(
                "{path} is a directory{where_}: name the file to write"
            )));
        }
        let tmp = m.rename_is_atomic().then(|| format!("{path}{TMP_SUFFIX}"));
        if let Some(tmp) = &tmp
            && m.stat(tmp).is_ok()
        {
            m.remove(tmp).map_err(|e| place.error(e))?;
        }
        let file = m.create(tmp.as_deref().unwrap_or(path)).map_err(|e| place.error(e))?;
        Ok(Sink::Media { place, file: Some(file), tmp })
    }

    fn write(&mut self, buf: &[u8], at: u64) -> Result<(), CliError> {
        match self {
            Sink::Stdout => std::io::stdout()
                .lock()
                .write_all(buf)
                .map_err(|e| CliError::Io(e, "writing to standard output".into())),
            Sink::Media { place, file, .. } => match file {
                Some(f) => f.write_at(buf, at).map_err(|e| place.error(e)),
                None => Err(CliError::Engine(Error::Closed)),
            },
        }
    }

    /// The durability point: sync and close, then rename the temporary name over the
    /// destination.
    fn finish(&mut self) -> Result<(), CliError> {
        match self {
            Sink::Stdout => std::io::stdout()
                .flush()
                .map_err(|e| CliError::Io(e, "writing to standard output".into())),
            Sink::Media { place, file, tmp } => {
                if let Some(f) = file.take() {
                    f.close().map_err(|e| place.error(e))?;
                }
                if let Some(tmp) = tmp.take() {
                    place.media().rename(&tmp, place.path()).map_err(|e| place.error(e))?;
                }
                Ok(())
            }
        }
    }

    /// Drops what a failed copy wrote (best effort; the failure is what gets reported).
    fn abort(&mut self) {
        if let Sink::Media { place, file, tmp } = self {
            // Dropped without close: an object upload never completes.
            drop(file.take());
            if let Some(tmp) = tmp.take() {
                let _ = place.media().remove(&tmp);
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
    let bare_host = |a: &OsStr| {
        a != "-" && !a.as_bytes().windows(2).any(|w| w == b":/") && !a.as_bytes().contains(&b':')
    };
    if bare_host(src) && bare_host(dst) {
        return Err(CliError::Usage(
            "one side of cp must be VOLUME:/path (the volume must exist), - or a URL \
             (local:///abs/path, memory:/path, s3://bucket/key): for two host files use cp(1)"
                .into(),
        ));
    }
    if src == "-" && dst == "-" {
        return Err(CliError::Usage("cp from - to -: use cat".into()));
    }
    // The destination opens first, for writing: a copy within one volume then shares that
    // open volume (the facade opens a volume once per process).
    let to = side(dst, false)?;
    let from = side(src, true)?;
    let mut source = match &from {
        None => Source::Stdin,
        Some(p) => Source::Media {
            file: p.media().open(p.path()).map_err(|e| p.error(e))?,
            at: 0,
            place: p,
        },
    };
    let mut sink = match &to {
        None => Sink::Stdout,
        Some(p) => Sink::media(p)?,
    };
    let (bytes, crc) = pump(&mut source, &mut sink, true)?;
    drop(source);
    if !verify {
        return Ok(());
    }
    // Read the destination back and compare what arrived with what was sent.
    let Some(p) = &to else {
        return Err(CliError::Usage(
            "--verify needs a destination that can be read back (not -)".into(),
        ));
    };
    let file = p.media().open(p.path()).map_err(|e| p.error(e))?;
    let (got_bytes, got_crc) = checksum(&mut Source::Media { file, at: 0, place: p })?;
    if (got_bytes, got_crc) != (bytes, crc) {
        return Err(CliError::Usage(format!(
            "{}: verification failed: sent {bytes} bytes (crc32c {crc:08x}), the destination \
             holds {got_bytes} bytes (crc32c {got_crc:08x})",
            p.arg
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
