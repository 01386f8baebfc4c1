//! `vellum`: the KV node (`serve`, `demo`), its clients (`kv`, `cluster`), and the volume
//! tools (`format`, `info`, `check`, `ls`, ...).

mod archive;
mod cli;
mod error;
mod security;
mod server;
mod size;

use clap::Parser;

fn main() {
    // A bug must still end in one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("vellum: internal error (please report): {info}");
    }));
    security::tls::install_provider();
    let parsed = match cli::Cli::try_parse() {
        Ok(p) => p,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // Usage errors in one line, like every other failure.
            let text = e.render().to_string();
            let mut lines = text.lines();
            let mut first = lines.next().unwrap_or("invalid arguments").to_string();
            if first.ends_with(':') {
                // "the following required arguments were not provided:" names them next.
                let named: Vec<&str> =
                    lines.take_while(|l| l.starts_with("  ")).map(str::trim).collect();
                first = format!("{first} {}", named.join(" "));
            }
            eprintln!("vellum: {}", first.trim_start_matches("error: "));
            std::process::exit(2);
        }
    };
    // The node logs at info; one-shot commands stay quiet but for errors (which they report
    // in one line of their own).
    let default = if matches!(parsed.command, cli::Command::Serve(_)) {
        "info,openraft=warn"
    } else {
        "error"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VELLUM_LOG")
                .unwrap_or_else(|_| default.into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let code = match cli::run(parsed) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vellum: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}
