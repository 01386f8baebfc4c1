//! `vellum-bench SUITE... [--dir DIR] [--reps N] [--scale F] [--slow-disk-ms MS] [--json FILE]
//! [--report]`

use std::path::PathBuf;

use clap::Parser;
use vellum_bench::{Options, SUITES, report, run};

/// Benchmarks of Vellum against the physical floor and peer engines, measured side by side.
#[derive(Parser, Debug)]
#[command(name = "vellum-bench", version)]
struct Args {
    /// Suites to run (all when none or `all`): carrier, carriers, prealloc, log, devops,
    /// recovery, metadata, memory, cache, journal, cluster, slow-disk, tls, media, harness,
    /// multiraft, scale-out, hdd-model.
    suites: Vec<String>,
    /// Work directory on a real file system (O_DIRECT must work there: not tmpfs).
    #[arg(long, default_value = "bench-data")]
    dir: PathBuf,
    /// Interleaved repetitions of every variant.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Scale every operation count and size (0.05 for a quick run).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// `slow-disk` suite: milliseconds each durable request costs on the emulated slow disk
    /// (a FUSE mount per node; 8 is about an HDD cache flush); 0 skips the slow-disk rows.
    #[arg(long, default_value_t = 8.0)]
    slow_disk_ms: f64,
    /// `media` suite: MiB of the archive-like object uploaded and read back [default: 1024
    /// times --scale, at least 32].
    #[arg(long)]
    archive_mib: Option<u64>,
    /// Write JSON lines here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Regenerate docs/BENCHMARKS.md and docs/bench/*.svg from this run.
    #[arg(long)]
    report: bool,
}

fn main() {
    std::panic::set_hook(Box::new(|info| eprintln!("vellum-bench: {info}")));
    let args = Args::parse();
    let suites: Vec<String> = if args.suites.is_empty() || args.suites.iter().any(|s| s == "all") {
        SUITES.iter().map(|s| (*s).to_string()).collect()
    } else {
        args.suites.clone()
    };
    let opts = Options {
        dir: args.dir.clone(),
        reps: args.reps.max(1),
        scale: args.scale,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        slow_disk_ms: args.slow_disk_ms,
        archive_bytes: args.archive_mib.map(|m| m << 20),
    };
    let results = match run(&suites, &opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vellum-bench: {e}");
            std::process::exit(1);
        }
    };
    report::print(&results);
    if let Some(path) = &args.json
        && let Err(e) = report::json_lines(&results, path)
    {
        eprintln!("vellum-bench: writing {}: {e}", path.display());
        std::process::exit(1);
    }
    if args.report {
        let build = if cfg!(feature = "peers") {
            "cargo run --release -p vellum-bench --features peers --"
        } else {
            "cargo run --release -p vellum-bench --"
        };
        let command = std::iter::once(build.to_string())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" ");
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
        if let Err(e) = report::markdown(&results, &docs, &command) {
            eprintln!("vellum-bench: writing docs/BENCHMARKS.md: {e}");
            std::process::exit(1);
        }
        println!("wrote docs/BENCHMARKS.md and docs/bench/");
    }
}
