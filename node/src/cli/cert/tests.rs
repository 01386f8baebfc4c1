#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn cert_commands_parse() {
    use clap::Parser;
    let parse = |args: &[&str]| crate::cli::Cli::try_parse_from(args);
    let cli = parse(&["vellum", "cert", "node", "d", "--id", "3", "--addr", "h", "--addr", "::1"])
        .unwrap();
    let crate::cli::Command::Cert { op: CertCommand::Node { id, addrs, days, force, .. } } =
        cli.command
    else {
        panic!("not cert node");
    };
    assert_eq!((id, addrs.len(), days, force), (3, 2, 825, false));
    assert!(parse(&["vellum", "cert", "node", "d", "--id", "0", "--addr", "h"]).is_err());
    assert!(parse(&["vellum", "cert", "node", "d", "--id", "1"]).is_err());
    let cli = parse(&["vellum", "cert", "init", "d"]).unwrap();
    let crate::cli::Command::Cert { op: CertCommand::Init { days, .. } } = cli.command else {
        panic!("not cert init");
    };
    assert_eq!(days, 3650);
    assert!(parse(&["vellum", "cert", "init", "d", "--days", "0"]).is_err());
}
