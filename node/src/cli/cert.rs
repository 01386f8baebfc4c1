//! `vellum cert`: the command line of the certificate tool (`security/cert.rs` makes them).

use std::path::PathBuf;

use clap::Subcommand;

use super::CliError;
use crate::security::cert::{init, node};

#[derive(Subcommand, Debug)]
pub enum CertCommand {
    /// Make the cluster CA (ca.pem, ca-key.pem) and a client certificate (client.pem,
    /// client-key.pem) in DIR.
    Init {
        /// The directory for the certificates (created with mode 0700 if missing).
        dir: PathBuf,
        /// Days the CA and the client certificate stay valid.
        #[arg(long, default_value_t = 3650, value_parser = clap::value_parser!(u32).range(1..))]
        days: u32,
        /// Replace an existing CA (certificates it signed are then no longer trusted by nodes
        /// given the new ca.pem).
        #[arg(long)]
        force: bool,
    },
    /// Make the certificate of node N (node-N.pem, node-N-key.pem), signed by DIR's CA.
    Node {
        /// The directory of `vellum cert init`.
        dir: PathBuf,
        /// The node's id (its certificate is valid for the name node-N.vellum).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        id: u64,
        /// A host name or IP address the node is reached at, without a port (repeat for each).
        #[arg(long = "addr", value_name = "HOST", required = true)]
        addrs: Vec<String>,
        /// Days the certificate stays valid.
        #[arg(long, default_value_t = 825, value_parser = clap::value_parser!(u32).range(1..))]
        days: u32,
        /// Replace an existing certificate of this node.
        #[arg(long)]
        force: bool,
    },
}

/// Runs a `vellum cert` command.
pub fn run(op: CertCommand) -> Result<(), CliError> {
    match op {
        CertCommand::Init { dir, days, force } => init(&dir, days, force),
        CertCommand::Node { dir, id, addrs, days, force } => node(&dir, id, &addrs, days, force),
    }
}

#[cfg(test)]
mod tests;
