//! What `vellum serve` refuses or warns about before it listens, from the addresses it binds
//! and the protection each port has.
//!
//! Rules:
//! - Plain HTTP off loopback is refused unless `--insecure`: whoever reaches a plain port can
//!   read, write, vote and change membership.
//! - With `--insecure`, each plain port off loopback is named in a warning, the Raft port
//!   too: a plain Raft port authenticates no peer, so anyone who reaches it can vote and
//!   append as any member.
//! - Loopback is `127.0.0.0/8`, `::1` and `::ffff:127.0.0.0/8` (an IPv4-mapped loopback
//!   address is loopback too).

use std::net::{IpAddr, SocketAddr};

/// The ports `vellum serve` is about to open and how each is protected.
#[derive(Debug, Clone)]
pub struct Exposure {
    pub api_addr: SocketAddr,
    pub raft_addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    /// The client API is TLS (`--api-cert`).
    pub api_tls: bool,
    /// Clients of the API must present a certificate (`--api-ca`).
    pub api_client_certs: bool,
    /// The client API requires tokens (`--auth-tokens`).
    pub api_tokens: bool,
    /// The Raft port is mutual TLS (`--peer-cert/--peer-key/--peer-ca`).
    pub raft_tls: bool,
    /// `--insecure`.
    pub insecure: bool,
}

/// Whether `ip` is a loopback address, an IPv4-mapped one included.
pub fn is_loopback_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Whether `addr` is a loopback address.
pub fn is_loopback(addr: SocketAddr) -> bool {
    is_loopback_ip(addr.ip())
}

/// Whether the host of an endpoint (`HOST:PORT` or a URL) is loopback: a loopback IP
/// address or `localhost`. A host name that is not `localhost` is not known to be.
pub fn is_loopback_endpoint(endpoint: &str) -> bool {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Ok(addr) = authority.parse::<SocketAddr>() {
        return is_loopback(addr);
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    match host.parse::<IpAddr>() {
        Ok(ip) => is_loopback_ip(ip),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

/// Refuses plain HTTP on a non-loopback address unless `--insecure`: one line saying what to
/// give instead.
pub fn check(e: &Exposure) -> Result<(), String> {
    let exposed: Vec<String> = [e.api_addr, e.raft_addr]
        .into_iter()
        .filter(|a| !is_loopback(*a))
        .map(|a| a.to_string())
        .collect();
    let plain: Vec<&str> = [
        (!e.api_tls, "the client API (--api-cert, --api-key)"),
        (!e.raft_tls, "the Raft port (--peer-cert, --peer-key, --peer-ca)"),
    ]
    .into_iter()
    .filter_map(|(plain, what)| plain.then_some(what))
    .collect();
    if exposed.is_empty() || plain.is_empty() || e.insecure {
        return Ok(());
    }
    Err(format!(
        "refusing to serve plain HTTP off loopback ({}): give TLS for {} (vellum cert makes \
         certificates), or --insecure to let anyone who reaches these ports read, write, vote \
         and change membership",
        exposed.join(", "),
        plain.join(" and ")
    ))
}

/// What `vellum serve` should warn about before it serves: a plain Raft port off loopback
/// (`--insecure`), an exposed API that authenticates nobody, a metrics address off loopback.
pub fn warnings(e: &Exposure) -> Vec<String> {
    let mut warnings = Vec::new();
    if !e.raft_tls && !is_loopback(e.raft_addr) {
        warnings.push(format!(
            "--insecure: the Raft port at {} is plain HTTP and authenticates no peer: anyone who \
             reaches it can vote, append entries and install snapshots as any member, and so \
             rewrite the cluster's data (give --peer-cert, --peer-key and --peer-ca)",
            e.raft_addr
        ));
    }
    if !is_loopback(e.api_addr) && !e.api_tokens && !e.api_client_certs {
        let plain = if e.api_tls { "" } else { " over plain HTTP" };
        warnings.push(format!(
            "the client API at {}{plain} authenticates nobody (no --auth-tokens, no --api-ca): \
             anyone who reaches it may read, write and change membership",
            e.api_addr
        ));
    }
    if let Some(addr) = e.metrics_addr.filter(|a| !is_loopback(*a)) {
        warnings.push(format!(
            "/metrics is served on {addr} in plain HTTP without a token: keep that address on \
             a management network"
        ));
    }
    warnings
}

#[cfg(test)]
mod tests;
