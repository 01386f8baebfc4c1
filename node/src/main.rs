//! `vellum`: the volume tools (and, with the node issue, the KV node).

mod cli;

use clap::Parser;

fn main() {
    // A bug must still end in one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("vellum: internal error (please report): {info}");
    }));
    let parsed = match cli::Cli::try_parse() {
        Ok(p) => p,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // Usage errors in one line, like every other failure.
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            eprintln!("vellum: {}", first.trim_start_matches("error: "));
            std::process::exit(2);
        }
    };
    let code = match cli::run(parsed) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vellum: {e}");
            1
        }
    };
    std::process::exit(code);
}
