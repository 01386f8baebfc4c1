//! The `vellum` command line: argument definitions and the one-line error report.

pub mod carrier;
pub mod cert;
pub mod client;
pub mod demo;
pub mod media;
pub mod tour;
pub mod volume;

use std::ffi::OsString;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use crate::error::CliError;
pub(crate) use crate::size;

fn size_arg(s: &str) -> Result<u64, String> {
    size::parse_size(s)
}

fn block_size_arg(s: &str) -> Result<u32, String> {
    let n = size::parse_size(s)?;
    u32::try_from(n)
        .ok()
        .filter(|b| b.is_power_of_two() && (4096..=65536).contains(b))
        .ok_or_else(|| format!("block size {s} must be a power of two from 4096 to 65536"))
}

/// Vellum: a Raft log-storage engine on its own virtual volume.
#[derive(Parser, Debug)]
#[command(
    name = "vellum",
    version,
    about,
    long_about = None,
    after_help = "Exit codes: 0 success; 1 failure; 2 bad arguments (check: corrupt); 3 not this \
                  member (check: leaks only); 4 the Raft core stopped; 5 not found (a key, a \
                  member); 6 unreachable (no endpoint answered)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// `Serve` carries every node flag; the enum is parsed once per process.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a volume on a file (or a block device), or over several carriers with
    /// --carrier (members concatenated, not mirrored: losing one loses the volume).
    Format {
        /// A file path or a block device path (member 0 with --carrier: it holds the journal
        /// and the commit point).
        carrier: PathBuf,
        /// Capacity: 64MiB, 1G, ... (required for files; a device defaults to its whole size).
        /// With --carrier, the size of every file carrier.
        #[arg(long, value_parser = size_arg)]
        size: Option<u64>,
        /// A further member, after CARRIER (repeatable): a new file of --size, zero-filled, or
        /// a block device whole. Not with --thin, --sparse or --grow (a volume of several
        /// members is preallocated).
        #[arg(long = "carrier", value_name = "PATH")]
        carriers: Vec<PathBuf>,
        /// Block size in bytes (4096 to 65536, a power of two).
        #[arg(long, default_value = "4096", value_parser = block_size_arg)]
        block_size: u32,
        /// Grow the carrier file as blocks are used, instead of reserving it now.
        #[arg(long)]
        thin: bool,
        /// Auto-grow: start small (--size, default 64MiB or the cap if smaller) and double the
        /// volume's capacity whenever it fills, up to --max-size (zeros really written unless
        /// --sparse). On a block device growth stops at the device's size.
        #[arg(long)]
        grow: bool,
        /// The cap of --grow [default: 64 times the initial size].
        #[arg(long, value_parser = size_arg, requires = "grow")]
        max_size: Option<u64>,
        /// Leave unwritten ranges as holes instead of writing zeros.
        #[arg(long)]
        sparse: bool,
        /// The size of the journal region, used: a commit becomes one journal write
        /// (docs/FORMAT.md, "Journal"). New volumes are journaled by default, as `vellum
        /// serve` formats them [default: 1/64 of the volume, 256 KiB to 64 MiB].
        #[arg(long, value_parser = size_arg, conflicts_with_all = ["journal_reserved", "no_journal"])]
        journal: Option<u64>,
        /// Reserve a journal region of this size without using it (the copy-on-write form;
        /// `vellum journal enable` switches it on later, offline).
        #[arg(long, value_parser = size_arg)]
        journal_reserved: Option<u64>,
        /// No journal: every commit is a copy-on-write checkpoint (no region is reserved
        /// unless --journal-reserved).
        #[arg(long)]
        no_journal: bool,
        /// Overwrite a carrier that does not look empty.
        #[arg(long)]
        force: bool,
    },
    /// The carriers (members) of a volume: add one, replace one by copy, list them (offline:
    /// the volume must not be open elsewhere).
    Carrier {
        #[command(subcommand)]
        op: CarrierCommand,
    },
    /// The metadata journal of a volume (offline: the volume must not be open elsewhere).
    Journal {
        #[command(subcommand)]
        op: JournalCommand,
    },
    /// Show both superblocks, the geometry, the knobs and every member of a volume.
    Info {
        carrier: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Check a volume read-only, every member of it: exit 0 clean, 1 could not complete, 2
    /// corrupt, 3 leaks only.
    Check { carrier: PathBuf },
    /// List a directory: of a volume (VOLUME [PATH], or VOLUME:/path) or of any medium
    /// (local:///dir, memory:/dir, virtual:///v.vlm:/dir, s3://bucket/prefix/?endpoint=...).
    Ls {
        /// A volume, or a URL of any medium.
        url: OsString,
        /// A path inside it [default: /].
        path: Option<OsString>,
    },
    /// Show a file's or directory's metadata, extents and attributes.
    Stat { carrier: PathBuf, path: OsString },
    /// Write a file to stdout: of a volume (VOLUME PATH, or VOLUME:/path) or of any medium
    /// (local:///f, virtual:///v.vlm:/f, s3://bucket/key?endpoint=...).
    Cat {
        /// A volume, or a URL of any medium.
        url: OsString,
        /// A path inside it.
        path: Option<OsString>,
    },
    /// Copy a file between any two media, streaming, with a progress bar for large copies.
    /// Each side is VOLUME:/path (a file in a volume), - (stdin or stdout), a URL
    /// (local:///abs/path, memory:/path, virtual:///v.vlm:/path, s3://bucket/key?endpoint=
    /// ...&region=...), or any other path: a host file (a whole volume file copies as its
    /// bytes). On success the destination holds the source's bytes durably; a failed copy
    /// leaves no complete-looking destination.
    Cp {
        src: OsString,
        dst: OsString,
        /// Read the destination back and compare its CRC-32C with the bytes sent.
        #[arg(long)]
        verify: bool,
    },
    /// Remove a file or an empty directory: of a volume (VOLUME PATH, or VOLUME:/path) or of
    /// any medium (a URL).
    Rm {
        /// A volume, or a URL of any medium.
        url: OsString,
        /// A path inside it.
        path: Option<OsString>,
    },
    /// Create a directory.
    Mkdir {
        carrier: PathBuf,
        path: OsString,
        /// Create missing parents too.
        #[arg(short, long)]
        parents: bool,
    },
    /// Rename (atomically replacing a file or an empty directory at the target).
    Mv { carrier: PathBuf, from: OsString, to: OsString },
    /// Run one node of a KV cluster.
    Serve(crate::server::ServeArgs),
    /// A 3-node cluster on loopback with volumes under ./vellum-data/: start, write, read,
    /// print endpoints and commit latency, serve until Ctrl-C.
    Demo {
        /// Where the volumes and node logs live.
        #[arg(long, default_value = "vellum-data")]
        dir: PathBuf,
        /// Writes in the demo workload.
        #[arg(long, default_value_t = 300)]
        writes: usize,
        /// Stop after the workload instead of serving until Ctrl-C.
        #[arg(long)]
        no_wait: bool,
    },
    /// A short tour of one volume: format, a preallocated segment, durable appends, counts.
    Tour {
        #[arg(long, default_value = "vellum-data")]
        dir: PathBuf,
    },
    /// Read and write keys of a running cluster.
    Kv {
        #[command(subcommand)]
        op: client::KvCommand,
        #[command(flatten)]
        endpoints: client::Endpoints,
        #[command(flatten)]
        access: client::Access,
    },
    /// Write a consistent snapshot of a running cluster as one archive to any medium (etcd's
    /// `snapshot save`; admin role): the leader's snapshot covering a linearizable read.
    Backup {
        /// The cluster's API addresses, comma-separated, tried in order (as --endpoints).
        #[arg(long, value_delimiter = ',', value_name = "API_URLS")]
        from: Vec<String>,
        /// The archive prefix to write to (`s3://...`, `local:///dir`, a host path).
        #[arg(long, value_name = "URL")]
        to: String,
        #[command(flatten)]
        access: client::Access,
    },
    /// Build a new member volume from a snapshot archive (docs/OPERATIONS.md, "Disaster
    /// recovery"): checks the archive's SHA-256 first, refuses a volume with raft state.
    Restore(crate::archive::RestoreArgs),
    /// Make TLS certificates for a cluster: a CA, node and client certificates (see
    /// docs/OPERATIONS.md, "Security").
    Cert {
        #[command(subcommand)]
        op: cert::CertCommand,
    },
    /// Inspect a running cluster.
    Cluster {
        #[command(subcommand)]
        op: client::ClusterCommand,
        #[command(flatten)]
        endpoints: client::Endpoints,
        #[command(flatten)]
        access: client::Access,
    },
}

#[derive(Subcommand, Debug)]
pub enum CarrierCommand {
    /// Add NEW as the volume's last member: a new file, created preallocated and
    /// zero-filled, or a block device whole (zero-filled). The volume is grown to its cap
    /// first if it was formatted with --grow; a thin or sparse volume takes no members.
    Add {
        /// The volume (its member 0).
        volume: PathBuf,
        /// The new member's carrier: a path that does not exist yet, an empty file, or a
        /// block device.
        new: PathBuf,
        /// The new file's size [default: the size of the volume's last member, or an
        /// existing file's length]; ignored for a block device (it is used whole). At least
        /// 64 blocks.
        #[arg(long, value_parser = size_arg)]
        size: Option<u64>,
        /// Zero-fill a block device that does not look empty (it holds no volume: one that
        /// does is always refused).
        #[arg(long)]
        force: bool,
    },
    /// Replace member OLD by a copy on NEW (a new file of OLD's size, or a block device):
    /// copied, read back and compared, then the member table switched in one commit; OLD is
    /// left as it was, no longer in use. Member 0 is refused: copy it byte for byte (dd)
    /// with the volume closed instead.
    Replace {
        /// The volume (its member 0).
        volume: PathBuf,
        /// The member to replace, by the path the volume records for it.
        old: PathBuf,
        /// The carrier to copy it to.
        new: PathBuf,
        /// Overwrite a block device that does not look empty (it holds no volume: one that
        /// does is always refused).
        #[arg(long)]
        force: bool,
    },
    /// List the members of a volume: index, path, medium, blocks, member UUID.
    List {
        /// The volume (its member 0).
        volume: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum JournalCommand {
    /// Switch the journal on in the region the volume reserved at format time (offline: it
    /// is switching on, not reformatting; files and generation go on).
    Enable { carrier: PathBuf },
    /// Acknowledge that open found the journal region destroyed and went on from the last
    /// checkpoint (`vellum check` reports it until then). Refused on a volume that holds a
    /// raft log (treat that member as lost instead) unless `--force`.
    Ack {
        carrier: PathBuf,
        /// Acknowledge even though the volume holds a raft log: the node will then serve a
        /// log that may have lost acknowledged entries.
        #[arg(long)]
        force: bool,
    },
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Io(e, "starting the async runtime".into()))
}

/// The token flags (`--token`, `--join-token`) given on `args`, a command line: a command
/// line is visible to every user of the machine (`ps`, `/proc/PID/cmdline`), so each gets a
/// warning naming the environment variable to use instead.
pub fn tokens_on_command_line(args: &[std::ffi::OsString]) -> Vec<(&'static str, &'static str)> {
    let mut found = Vec::new();
    for arg in args.iter().skip(1).map(|a| a.to_string_lossy()) {
        if arg == "--" {
            break;
        }
        for (flag, env) in [("--token", "VELLUM_TOKEN"), ("--join-token", "VELLUM_JOIN_TOKEN")] {
            let given = arg == flag || arg.strip_prefix(flag).is_some_and(|r| r.starts_with('='));
            if given && !found.contains(&(flag, env)) {
                found.push((flag, env));
            }
        }
    }
    found
}

/// Runs a command; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32, CliError> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    for (flag, env) in tokens_on_command_line(&args) {
        eprintln!(
            "vellum: warning: {flag} on the command line is visible to every user of this \
             machine (ps, /proc): give it in {env} instead"
        );
    }
    match cli.command {
        Command::Format {
            carrier,
            size,
            carriers,
            block_size,
            thin,
            grow,
            max_size,
            sparse,
            journal,
            journal_reserved,
            no_journal,
            force,
        } => {
            let args = volume::FormatArgs {
                carrier,
                size,
                block_size,
                thin,
                grow,
                max_size,
                sparse,
                // Journaled unless --no-journal or --journal-reserved (`serve` formats its
                // new volumes journaled too); `None`: the default size for the capacity.
                journal: journal.or(journal_reserved),
                use_journal: !no_journal && journal_reserved.is_none(),
                force,
            };
            if carriers.is_empty() {
                volume::format(&args)?;
            } else {
                carrier::format(&args, &carriers)?;
            }
        }
        Command::Carrier { op: CarrierCommand::Add { volume, new, size, force } } => {
            carrier::add(&volume, &new, size, force)?;
        }
        Command::Carrier { op: CarrierCommand::Replace { volume, old, new, force } } => {
            carrier::replace(&volume, &old, &new, force)?;
        }
        Command::Carrier { op: CarrierCommand::List { volume } } => carrier::list(&volume)?,
        Command::Journal { op: JournalCommand::Enable { carrier } } => {
            volume::journal_enable(&carrier)?;
        }
        Command::Journal { op: JournalCommand::Ack { carrier, force } } => {
            volume::journal_ack(&carrier, force)?;
        }
        Command::Info { carrier, json } => volume::info(&carrier, json)?,
        Command::Check { carrier } => return volume::check(&carrier),
        Command::Ls { url, path } => media::ls(&url, path.as_deref())?,
        Command::Stat { carrier, path } => volume::stat(&carrier, &path)?,
        Command::Cat { url, path } => media::cat(&url, path.as_deref())?,
        Command::Cp { src, dst, verify } => media::cp(&src, &dst, verify)?,
        Command::Rm { url, path } => media::rm(&url, path.as_deref())?,
        Command::Mkdir { carrier, path, parents } => volume::mkdir(&carrier, &path, parents)?,
        Command::Mv { carrier, from, to } => volume::mv(&carrier, &from, &to)?,
        Command::Tour { dir } => tour::run(&dir)?,
        Command::Serve(args) => runtime()?.block_on(crate::server::serve(args))?,
        Command::Demo { dir, writes, no_wait } => {
            runtime()?.block_on(demo::run(&dir, writes, no_wait))?;
        }
        Command::Cert { op } => cert::run(op)?,
        Command::Backup { from, to, access } => {
            let endpoints = client::Endpoints { endpoints: from };
            runtime()?.block_on(client::backup(&endpoints.list(), &to, &access))?;
        }
        Command::Restore(args) => crate::archive::restore_command(&args)?,
        Command::Kv { op, endpoints, access } => {
            return runtime()?.block_on(client::kv(op, &endpoints, &access));
        }
        Command::Cluster { op, endpoints, access } => {
            return runtime()?.block_on(client::cluster(op, &endpoints, &access));
        }
    }
    Ok(0)
}
