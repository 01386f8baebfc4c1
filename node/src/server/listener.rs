//! The one accept loop every port of the node goes through (client API, Raft, metrics; plain
//! and TLS alike), so that one host cannot take a port down.
//!
//! A connection lives in two phases:
//!
//! - **handshake**: from `accept` until the headers of its first request have arrived (the
//!   TLS handshake, if any, then the first request's headers; an HTTP/2 connection leaves it
//!   with its first stream). Such connections draw on a small budget of their own
//!   (`Limits::handshakes`, of which one source address may hold `per_source_handshakes`),
//!   and one still there at `handshake_timeout` (3 to 5 s) is dropped. Silent TCP
//!   connections, slow headers, TLS handshakes that never finish and HTTP/2 connections that
//!   open no stream all end there, and never hold an established slot: a Raft-port
//!   connection counts as established only once its mutual-TLS handshake succeeded and it
//!   sent a request.
//! - **established**: counted against `Limits::established`; an HTTP/1 request after the
//!   first gets `header_timeout` for its headers, counted from its first byte; HTTP/2 gets
//!   keep-alive pings; a connection with no request in flight for `idle_timeout` is shut down
//!   gracefully. Both timers are this module's ([`Activity`] counts the requests in flight and
//!   [`Watched`] sees a head's first byte): hyper's HTTP/2 server has no idle timeout, and its
//!   HTTP/1 header timeout also runs while a keep-alive connection waits for its next request,
//!   so it closed every connection idle for 10 s, and a pooled client that sent on one as it
//!   closed got an error (a PUT is not retried). It is turned off.
//!
//! Invariants:
//!
//! - Every admitted connection is one [`Conn`]; its `Drop` gives back exactly what `admit`
//!   and `establish` took (phase counts and the per-source count), whatever way the
//!   connection ends (error, timeout, panic of its task, shutdown).
//! - `Counts::sources` holds an entry only for an address with a connection open: entries
//!   are removed at zero, so the map is bounded by the port's caps, not by the addresses
//!   seen. Addresses are canonical (an IPv4-mapped IPv6 address counts as its IPv4 one).
//! - A refusal is a close at accept (or at the deadline), never a wait: the accept loop
//!   itself never blocks on a slot, and never on a handshake.
//! - Logs never grow with the connections refused: the first refusal of a quiet period is
//!   logged at once (with its address), the others of that interval in one summary line
//!   with the totals by reason and the top sources ([`Summary`]).
//! - The sum of all ports' caps stays below the process's descriptor limit, raised to its
//!   hard limit at start ([`Plan::new`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use rustls::ServerConfig;
use rustls::pki_types::CertificateDer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::metrics as m;

/// The longest any `--conn-*` duration may be.
const MAX_DURATION: Duration = Duration::from_secs(86_400);
/// How long open connections get to finish at shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Descriptors kept out of the ports' caps: the volume, outgoing connections to peers and
/// other members' APIs, logs, the runtime's own.
const FD_RESERVE: u64 = 1024;
/// Distinct source addresses a log summary keeps counts for (the rest are "others").
const SUMMARY_SOURCES: usize = 1024;
/// Sources a summary line names.
const SUMMARY_TOP: usize = 5;
/// The listen backlog (the kernel caps it at `net.core.somaxconn`, 4096 by default): a burst
/// of connections from a flood must not fill the accept queue, or the kernel drops the
/// handshakes of other clients too (they retry after 1 s) until the loop catches up.
const BACKLOG: u32 = 4096;

/// A listener on `addr` with a deep backlog ([`BACKLOG`]); SO_REUSEADDR as
/// `TcpListener::bind` sets it.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// The client certificate of the TLS connection a request came on (`None` when the port
/// does not ask for one). Present on every request of a TLS port, `PeerCert(None)` on plain ones.
#[derive(Clone, Debug)]
pub struct PeerCert(pub Option<CertificateDer<'static>>);

/// The address a request's connection came from. Present on every request of every port.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub SocketAddr);

fn duration_arg(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000)
    } else {
        (s, 1000)
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("'{s}' is not a duration (5s, 500ms)"))?;
    if n == 0 {
        return Err("a duration of 0 turns nothing off here: give a positive one".into());
    }
    let d = Duration::from_millis(n.saturating_mul(scale));
    // Bounded, so that deadlines computed from it (`Instant + d`) cannot overflow.
    if d > MAX_DURATION {
        return Err(format!("'{s}' is longer than a day"));
    }
    Ok(d)
}

/// Connection limits of the client API and Raft ports (`vellum serve`); the metrics port's
/// are fixed and small.
#[derive(clap::Args, Debug, Clone)]
pub struct ConnArgs {
    /// Established connections the client API serves at once (default 4096; the Raft port
    /// serves a quarter of it). Lowered at start if the descriptor limit cannot hold it.
    #[arg(long = "conn-max", env = "VELLUM_CONN_MAX", help_heading = "Connections")]
    pub max: Option<usize>,
    /// Connections one source address may hold open on a port (in handshake or established).
    #[arg(
        long = "conn-per-source",
        env = "VELLUM_CONN_PER_SOURCE",
        default_value_t = 256,
        help_heading = "Connections"
    )]
    pub per_source: usize,
    /// Connections the client API lets be in their handshake at once (TLS handshake, then the
    /// first request's headers), apart from the established ones; one source may hold a
    /// quarter of them. The Raft port gets a quarter of this.
    #[arg(
        long = "conn-handshakes",
        env = "VELLUM_CONN_HANDSHAKES",
        default_value_t = 512,
        help_heading = "Connections"
    )]
    pub handshakes: usize,
    /// How long a new connection has to finish its TLS handshake and send its first
    /// request's headers (an HTTP/2 connection: open its first stream).
    #[arg(
        long = "conn-handshake-timeout",
        env = "VELLUM_CONN_HANDSHAKE_TIMEOUT",
        default_value = "5s",
        value_parser = duration_arg,
        help_heading = "Connections"
    )]
    pub handshake_timeout: Duration,
    /// How long the headers of a later HTTP/1 request may take to arrive, from their first
    /// byte (a connection waiting for its next request is idle: `--conn-idle-timeout`).
    #[arg(
        long = "conn-header-timeout",
        env = "VELLUM_CONN_HEADER_TIMEOUT",
        default_value = "10s",
        value_parser = duration_arg,
        help_heading = "Connections"
    )]
    pub header_timeout: Duration,
    /// A connection (HTTP/1 or HTTP/2) with no request in flight for this long is closed.
    #[arg(
        long = "conn-idle-timeout",
        env = "VELLUM_CONN_IDLE_TIMEOUT",
        default_value = "120s",
        value_parser = duration_arg,
        help_heading = "Connections"
    )]
    pub idle_timeout: Duration,
    /// HTTP/2 keep-alive ping interval (a peer that does not answer within it is dropped).
    #[arg(
        long = "conn-keepalive",
        env = "VELLUM_CONN_KEEPALIVE",
        default_value = "30s",
        value_parser = duration_arg,
        help_heading = "Connections"
    )]
    pub keepalive: Duration,
    /// How often refused connections are summarised in the log.
    #[arg(
        long = "conn-log-interval",
        env = "VELLUM_CONN_LOG_INTERVAL",
        default_value = "10s",
        value_parser = duration_arg,
        hide = true
    )]
    pub log_interval: Duration,
}

/// One port's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Established connections at once.
    pub established: usize,
    /// Connections in their handshake at once.
    pub handshakes: usize,
    /// Connections one source address may hold (both phases).
    pub per_source: usize,
    /// Connections in their handshake one source address may hold.
    pub per_source_handshakes: usize,
    pub handshake_timeout: Duration,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub keepalive: Duration,
    pub log_interval: Duration,
}

impl Limits {
    /// Descriptors this port may use at most.
    fn descriptors(&self) -> u64 {
        (self.established as u64).saturating_add(self.handshakes as u64)
    }
}

/// The limits of every port, sized to the descriptor limit.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub api: Limits,
    pub raft: Limits,
    pub metrics: Limits,
    /// The descriptor limit the caps were sized for.
    pub nofile: u64,
}

/// Raises the soft RLIMIT_NOFILE to the hard one; the soft limit in force afterwards (a
/// generous guess when it cannot be read). The node's only unsafe code: two libc calls.
#[allow(unsafe_code)]
fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the struct we own; no other memory is touched.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) } != 0 {
        return 1 << 16;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        // SAFETY: setrlimit reads one rlimit from a struct we own; raising the soft limit up
        // to the hard one needs no privilege and affects only this process's descriptors.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    if lim.rlim_cur == libc::RLIM_INFINITY { 1 << 20 } else { lim.rlim_cur }
}

impl Plan {
    /// Raises the descriptor limit, sizes every port's caps below it, and logs them once.
    pub fn new(args: &ConnArgs) -> Plan {
        let plan = Plan::sized(args, raise_nofile());
        let Plan { api, raft, metrics, nofile } = plan;
        tracing::info!(
            nofile,
            api_max = api.established,
            api_handshakes = api.handshakes,
            raft_max = raft.established,
            raft_handshakes = raft.handshakes,
            metrics_max = metrics.established,
            per_source = api.per_source,
            handshake_timeout_ms = api.handshake_timeout.as_millis() as u64,
            idle_timeout_s = api.idle_timeout.as_secs(),
            "connection limits"
        );
        plan
    }

    /// The caps for a descriptor limit of `nofile`: the API's and the Raft port's scaled
    /// down together until the sum of all ports' fits below `nofile - FD_RESERVE`.
    pub fn sized(args: &ConnArgs, nofile: u64) -> Plan {
        let api_max = args.max.unwrap_or(4096).max(1);
        let port = |established: usize, handshakes: usize, per_source: usize| {
            let handshakes = handshakes.max(1);
            let per_source = per_source.max(1);
            Limits {
                established: established.max(1),
                handshakes,
                per_source,
                per_source_handshakes: per_source.min((handshakes / 4).max(1)),
                handshake_timeout: args.handshake_timeout,
                header_timeout: args.header_timeout,
                idle_timeout: args.idle_timeout,
                keepalive: args.keepalive,
                log_interval: args.log_interval,
            }
        };
        let metrics = port(16, 8, 8);
        let mut api = port(api_max, args.handshakes, args.per_source);
        let mut raft = port((api_max / 4).max(64), (args.handshakes / 4).max(16), args.per_source);
        let available =
            nofile.saturating_sub(FD_RESERVE).saturating_sub(metrics.descriptors()).max(64);
        let wanted = api.descriptors().saturating_add(raft.descriptors());
        if wanted > available {
            let scale = |n: usize| {
                let scaled = (n as u128 * u128::from(available) / u128::from(wanted)) as usize;
                scaled.max(4)
            };
            for l in [&mut api, &mut raft] {
                l.established = scale(l.established);
                l.handshakes = scale(l.handshakes);
                l.per_source = l.per_source.min(l.established);
                l.per_source_handshakes = l.per_source.min((l.handshakes / 4).max(1));
            }
        }
        Plan { api, raft, metrics, nofile }
    }
}

/// Why a connection was refused or dropped before it was established (a metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The port's established connections are at their cap.
    TotalCap,
    /// The source address holds its share already.
    SourceCap,
    /// The port's handshake budget (or the source's share of it) is spent.
    HandshakeBudget,
    /// No TLS handshake and first request's headers within the deadline.
    HandshakeTimeout,
    /// The TLS handshake failed (a certificate refused, not TLS at all).
    HandshakeFailed,
}

const REFUSALS: [Refusal; 5] = [
    Refusal::TotalCap,
    Refusal::SourceCap,
    Refusal::HandshakeBudget,
    Refusal::HandshakeTimeout,
    Refusal::HandshakeFailed,
];

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::TotalCap => "total_cap",
            Refusal::SourceCap => "source_cap",
            Refusal::HandshakeBudget => "handshake_budget",
            Refusal::HandshakeTimeout => "handshake_timeout",
            Refusal::HandshakeFailed => "handshake_failed",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Refusals counted for the log over one interval: the first of a quiet period is logged at
/// once by the caller, the rest in one line at the end of the interval.
#[derive(Debug)]
pub struct Summary {
    interval: Duration,
    /// Start of the current interval; `None` while quiet.
    since: Option<Instant>,
    by_source: HashMap<IpAddr, u64>,
    /// Refusals of sources beyond [`SUMMARY_SOURCES`].
    others: u64,
    by_reason: [u64; REFUSALS.len()],
    total: u64,
}

impl Summary {
    pub fn new(interval: Duration) -> Summary {
        Summary {
            interval,
            since: None,
            by_source: HashMap::new(),
            others: 0,
            by_reason: [0; REFUSALS.len()],
            total: 0,
        }
    }

    /// Counts one refusal; true when it is the first of a quiet period (log it at once).
    pub fn record(&mut self, ip: IpAddr, why: Refusal, now: Instant) -> bool {
        let first = self.since.is_none();
        if first {
            self.since = Some(now);
        }
        self.total += 1;
        self.by_reason[why.index()] += 1;
        let known = self.by_source.len();
        match self.by_source.get_mut(&ip) {
            Some(n) => *n += 1,
            None if known < SUMMARY_SOURCES => {
                self.by_source.insert(ip, 1);
            }
            None => self.others += 1,
        }
        first
    }

    /// At or after the end of the interval: the summary line (when more than the first
    /// refusal, already logged, happened), and a quiet period begins.
    pub fn flush(&mut self, now: Instant) -> Option<String> {
        let since = self.since?;
        if now.saturating_duration_since(since) < self.interval {
            return None;
        }
        let line = (self.total > 1).then(|| {
            let reasons: Vec<String> = REFUSALS
                .iter()
                .filter(|r| self.by_reason[r.index()] > 0)
                .map(|r| format!("{}={}", r.label(), self.by_reason[r.index()]))
                .collect();
            let mut top: Vec<(&IpAddr, &u64)> = self.by_source.iter().collect();
            top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let mut named: Vec<String> =
                top.iter().take(SUMMARY_TOP).map(|(ip, n)| format!("{ip} ({n})")).collect();
            let rest = top.iter().skip(SUMMARY_TOP).map(|(_, n)| **n).sum::<u64>() + self.others;
            if rest > 0 {
                named.push(format!("others ({rest})"));
            }
            format!(
                "{} connections refused or dropped in {} s: {}; sources: {}",
                self.total,
                now.saturating_duration_since(since).as_secs(),
                reasons.join(" "),
                named.join(", ")
            )
        });
        *self = Summary::new(self.interval);
        line
    }
}

#[derive(Default, Debug)]
struct Source {
    total: u32,
    handshaking: u32,
}

#[derive(Default, Debug)]
struct Counts {
    handshaking: usize,
    established: usize,
    sources: HashMap<IpAddr, Source>,
}

/// One port's accounting.
pub struct Port {
    name: &'static str,
    limits: Limits,
    counts: Mutex<Counts>,
    summary: Mutex<Summary>,
}

impl Port {
    pub fn new(name: &'static str, limits: Limits) -> Arc<Port> {
        Arc::new(Port {
            name,
            limits,
            counts: Mutex::default(),
            summary: Mutex::new(Summary::new(limits.log_interval)),
        })
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, c: &Counts) {
        metrics::gauge!(m::CONN_OPEN, "port" => self.name).set(c.established as f64);
        metrics::gauge!(m::CONN_HANDSHAKES, "port" => self.name).set(c.handshaking as f64);
    }

    /// A new connection from `ip` in its handshake phase, or why not.
    pub fn admit(self: &Arc<Port>, ip: IpAddr) -> Result<Conn, Refusal> {
        let ip = ip.to_canonical();
        let mut c = self.counts();
        let l = &self.limits;
        let (total, handshaking) =
            c.sources.get(&ip).map_or((0, 0), |s| (s.total as usize, s.handshaking as usize));
        if total >= l.per_source {
            return Err(Refusal::SourceCap);
        }
        if c.handshaking >= l.handshakes || handshaking >= l.per_source_handshakes {
            return Err(Refusal::HandshakeBudget);
        }
        c.handshaking += 1;
        let s = c.sources.entry(ip).or_default();
        s.total += 1;
        s.handshaking += 1;
        self.publish(&c);
        drop(c);
        Ok(Conn { port: Arc::clone(self), ip, established: AtomicBool::new(false) })
    }

    /// Counts a refusal (metric and log summary); logs the first of a quiet period at once.
    pub fn refused(&self, peer: SocketAddr, why: Refusal, detail: Option<&dyn std::fmt::Display>) {
        metrics::counter!(m::CONN_REJECTED, "port" => self.name, "reason" => why.label())
            .increment(1);
        let first = self.summary.lock().unwrap_or_else(PoisonError::into_inner).record(
            peer.ip().to_canonical(),
            why,
            Instant::now(),
        );
        if !first {
            return;
        }
        let port = self.name;
        let reason = why.label();
        let interval_s = self.limits.log_interval.as_secs();
        if let (Refusal::HandshakeFailed, Some(e)) = (why, detail) {
            tracing::warn!(
                port, peer = %peer, error = %e, interval_s,
                "refused a TLS connection (more this interval are summarised)"
            );
        } else {
            tracing::warn!(
                port, peer = %peer, reason, interval_s,
                "refused a connection (more this interval are summarised)"
            );
        }
    }

    /// Logs the summary of the interval just ended, if any.
    fn flush_log(&self) {
        let line =
            self.summary.lock().unwrap_or_else(PoisonError::into_inner).flush(Instant::now());
        if let Some(line) = line {
            tracing::warn!(port = self.name, "{line}");
        }
    }

    #[cfg(test)]
    fn open(&self) -> (usize, usize, usize) {
        let c = self.counts();
        (c.handshaking, c.established, c.sources.len())
    }
}

/// One admitted connection's share of its port's counts, given back on drop.
pub struct Conn {
    port: Arc<Port>,
    ip: IpAddr,
    established: AtomicBool,
}

impl Conn {
    pub fn is_established(&self) -> bool {
        self.established.load(Ordering::Acquire)
    }

    /// Moves the connection from its handshake to the established connections; false when
    /// those are at their cap (the connection must then close).
    pub fn establish(&self) -> bool {
        if self.is_established() {
            return true;
        }
        let mut c = self.port.counts();
        if self.is_established() {
            return true;
        }
        if c.established >= self.port.limits.established {
            return false;
        }
        c.handshaking = c.handshaking.saturating_sub(1);
        c.established += 1;
        if let Some(s) = c.sources.get_mut(&self.ip) {
            s.handshaking = s.handshaking.saturating_sub(1);
        }
        self.established.store(true, Ordering::Release);
        self.port.publish(&c);
        drop(c);
        metrics::counter!(m::CONN_ACCEPTED, "port" => self.port.name).increment(1);
        true
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let mut c = self.port.counts();
        let established = self.is_established();
        if established {
            c.established = c.established.saturating_sub(1);
        } else {
            c.handshaking = c.handshaking.saturating_sub(1);
        }
        if let Some(s) = c.sources.get_mut(&self.ip) {
            s.total = s.total.saturating_sub(1);
            if !established {
                s.handshaking = s.handshaking.saturating_sub(1);
            }
            if s.total == 0 {
                c.sources.remove(&self.ip);
            }
        }
        self.port.publish(&c);
    }
}

/// Requests in flight on one connection, and when the last one ended.
struct Activity {
    start: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds from `start` to the last request's start or end.
    last_ms: AtomicU64,
    /// Raised to close the connection now (its first request found the port full).
    close: Notify,
    /// Set by the first request when it is HTTP/1 (the header timer applies).
    http1: AtomicBool,
    /// An HTTP/1 head is arriving: 1 + milliseconds from `start` to its first byte; 0: none.
    /// Set by [`Watched`] for a byte read with no request in flight, cleared by the request.
    head_ms: AtomicU64,
    /// Raised when `head_ms` is set: the connection's loop computes its deadline again.
    head_started: Notify,
}

impl Activity {
    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::AcqRel);
    }

    /// When the connection turns idle if nothing happens meanwhile (`None`: busy now).
    fn idle_at(&self, idle: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(self.start + Duration::from_millis(self.last_ms.load(Ordering::Acquire)) + idle)
    }

    /// When the HTTP/1 head now arriving runs out of time (`None`: no head is arriving).
    fn head_deadline(&self, header_timeout: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        match self.head_ms.load(Ordering::Acquire) {
            0 => None,
            ms => Some(self.start + Duration::from_millis(ms - 1) + header_timeout),
        }
    }

    /// Bytes arrived: with no request in flight on an HTTP/1 connection, they begin a head.
    fn bytes_read(&self) {
        if self.http1.load(Ordering::Acquire)
            && self.in_flight.load(Ordering::Acquire) == 0
            && self.head_ms.load(Ordering::Acquire) == 0
        {
            let ms = self.start.elapsed().as_millis() as u64;
            self.head_ms.store(ms + 1, Ordering::Release);
            self.head_started.notify_one();
        }
    }
}

/// A connection's stream, telling its [`Activity`] when bytes arrive (the first byte of an
/// HTTP/1 head starts the header timer). Reads and writes pass through unchanged.
struct Watched<S> {
    io: S,
    activity: Arc<Activity>,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.bytes_read();
        }
        polled
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Ends a request's count in [`Activity`] however its future ends (dropped mid-way too).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn begin(a: &Arc<Activity>) -> InFlight {
        a.in_flight.fetch_add(1, Ordering::AcqRel);
        a.touch();
        InFlight(Arc::clone(a))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves `router` on `listener` until `stop` turns true: plain HTTP without `tls`, TLS with
/// it (each request carrying the connection's [`PeerCert`]); every request carries its
/// [`PeerAddr`]. `name` names the port in logs and metrics.
pub fn spawn(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<ServerConfig>>,
    mut stop: watch::Receiver<bool>,
    name: &'static str,
    limits: Limits,
) -> JoinHandle<()> {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let port = Port::new(name, limits);
    tokio::spawn(async move {
        // Every connection task holds a sender: the loop waits for them all at shutdown.
        let (alive, mut drained) = tokio::sync::mpsc::channel::<()>(1);
        let mut tick = tokio::time::interval(limits.log_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut accept_failed_logged: Option<Instant> = None;
        loop {
            let (tcp, addr) = tokio::select! {
                () = async { let _ = stop.wait_for(|s| *s).await; } => break,
                _ = tick.tick() => {
                    port.flush_log();
                    continue;
                }
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, do not spin, and say
                        // so once per interval.
                        if accept_failed_logged.is_none_or(|t| t.elapsed() >= limits.log_interval) {
                            accept_failed_logged = Some(Instant::now());
                            tracing::warn!(port = name, error = %e, "accept failed");
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let conn = match port.admit(addr.ip()) {
                Ok(c) => c,
                Err(why) => {
                    drop(tcp);
                    port.refused(addr, why, None);
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let task = ConnTask {
                port: Arc::clone(&port),
                conn,
                addr,
                router: router.clone(),
                acceptor: acceptor.clone(),
                stop: stop.clone(),
                _alive: alive.clone(),
            };
            tokio::spawn(task.run(tcp));
        }
        drop(listener);
        drop(alive);
        port.flush_log();
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, drained.recv()).await;
    })
}

/// One connection, from its handshake to its close.
struct ConnTask {
    port: Arc<Port>,
    conn: Conn,
    addr: SocketAddr,
    router: Router,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    stop: watch::Receiver<bool>,
    _alive: tokio::sync::mpsc::Sender<()>,
}

impl ConnTask {
    async fn run(self, tcp: TcpStream) {
        let deadline = Instant::now() + self.port.limits.handshake_timeout;
        let activity = Arc::new(Activity {
            start: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            close: Notify::new(),
            http1: AtomicBool::new(false),
            head_ms: AtomicU64::new(0),
            head_started: Notify::new(),
        });
        let watched = Watched { io: tcp, activity: Arc::clone(&activity) };
        match self.acceptor.clone() {
            None => {
                let io = hyper_util::rt::TokioIo::new(watched);
                self.serve(io, activity, PeerCert(None), deadline).await;
            }
            Some(acceptor) => {
                let stream = match tokio::time::timeout_at(deadline, acceptor.accept(watched)).await
                {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        self.port.refused(self.addr, Refusal::HandshakeFailed, Some(&e));
                        return;
                    }
                    Err(_) => {
                        self.port.refused(self.addr, Refusal::HandshakeTimeout, None);
                        return;
                    }
                };
                let cert = PeerCert(
                    stream.get_ref().1.peer_certificates().and_then(|c| c.first()).cloned(),
                );
                let io = hyper_util::rt::TokioIo::new(stream);
                self.serve(io, activity, cert, deadline).await;
            }
        }
    }

    async fn serve<I>(self, io: I, activity: Arc<Activity>, cert: PeerCert, deadline: Instant)
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let ConnTask { port, conn, addr, router, mut stop, .. } = self;
        let limits = port.limits;
        let conn = Arc::new(conn);
        let service = {
            let (conn, activity) = (Arc::clone(&conn), Arc::clone(&activity));
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                let (conn, activity, mut router, cert) =
                    (Arc::clone(&conn), Arc::clone(&activity), router.clone(), cert.clone());
                async move {
                    if !conn.establish() {
                        activity.close.notify_one();
                        let mut resp = axum::response::Response::new(axum::body::Body::from(
                            "{\"error\":\"too_many_connections\"}",
                        ));
                        *resp.status_mut() = axum::http::StatusCode::SERVICE_UNAVAILABLE;
                        return Ok(resp);
                    }
                    let _in_flight = InFlight::begin(&activity);
                    // The head arrived: its timer stops (one request's bytes read while it is
                    // in flight start none).
                    activity.head_ms.store(0, Ordering::Release);
                    if req.version() < axum::http::Version::HTTP_2 {
                        activity.http1.store(true, Ordering::Release);
                    }
                    req.extensions_mut().insert(PeerAddr(addr));
                    req.extensions_mut().insert(cert);
                    tower_service::Service::call(&mut router, req).await
                }
            })
        };
        let mut builder =
            hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
        // hyper's own header timer is off: it also runs while a connection waits for its next
        // request (see the module header); `Activity::head_deadline` replaces it.
        builder.http1().timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(None);
        builder
            .http2()
            .timer(hyper_util::rt::TokioTimer::new())
            .keep_alive_interval(limits.keepalive)
            .keep_alive_timeout(limits.keepalive);
        let served = builder.serve_connection_with_upgrades(io, service);
        let mut served = std::pin::pin!(served);
        // Set once the connection is told to finish: it gets DRAIN_TIMEOUT more.
        let mut draining: Option<Instant> = None;
        loop {
            let head = activity.head_deadline(limits.header_timeout);
            let wake = if conn.is_established() {
                let idle = activity
                    .idle_at(limits.idle_timeout)
                    .unwrap_or_else(|| Instant::now() + limits.idle_timeout);
                head.map_or(idle, |h| h.min(idle))
            } else {
                deadline
            };
            let mut shut = false;
            tokio::select! {
                _ = served.as_mut() => break,
                () = tokio::time::sleep_until(draining.unwrap_or(wake)) => {
                    if draining.is_some() {
                        break;
                    }
                    if !conn.is_established() {
                        port.refused(addr, Refusal::HandshakeTimeout, None);
                        break;
                    }
                    if activity
                        .head_deadline(limits.header_timeout)
                        .is_some_and(|t| t <= Instant::now())
                    {
                        // Headers this slow are not a client waiting its turn: no graceful
                        // close (it would wait for the head), the connection is dropped.
                        metrics::counter!(m::CONN_CLOSED, "port" => port.name, "reason" => "header_timeout")
                            .increment(1);
                        break;
                    }
                    if activity.idle_at(limits.idle_timeout).is_some_and(|t| t <= Instant::now()) {
                        metrics::counter!(m::CONN_CLOSED, "port" => port.name, "reason" => "idle_timeout")
                            .increment(1);
                        shut = true;
                    }
                }
                () = activity.close.notified(), if draining.is_none() => shut = true,
                // A head began: its deadline may come before the wake computed above.
                () = activity.head_started.notified() => {}
                () = async { let _ = stop.wait_for(|s| *s).await; }, if draining.is_none() => {
                    shut = true;
                }
            }
            if shut {
                served.as_mut().graceful_shutdown();
                draining = Some(Instant::now() + DRAIN_TIMEOUT);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(established: usize, handshakes: usize, per_source: usize) -> Limits {
        let args = ConnArgs {
            max: Some(established),
            per_source,
            handshakes,
            handshake_timeout: Duration::from_secs(5),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            keepalive: Duration::from_secs(30),
            log_interval: Duration::from_secs(10),
        };
        Plan::sized(&args, 1 << 20).api
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
    }

    #[test]
    fn one_source_cannot_hold_more_than_its_share() {
        let port = Port::new("api", limits(100, 40, 12));
        assert_eq!(port.limits.per_source_handshakes, 10);
        let flood: Vec<Conn> = (0..10).filter_map(|_| port.admit(ip("10.0.0.2")).ok()).collect();
        assert_eq!(flood.len(), 10);
        // Its handshake share is spent; another address still gets in.
        assert_eq!(port.admit(ip("10.0.0.2")).err(), Some(Refusal::HandshakeBudget));
        let other = port.admit(ip("10.0.0.3"));
        assert!(other.is_ok());
        // Established ones leave the handshake share, up to the source's total.
        for c in &flood[..5] {
            assert!(c.establish());
        }
        let more: Vec<Conn> = (0..2).filter_map(|_| port.admit(ip("10.0.0.2")).ok()).collect();
        assert_eq!(more.len(), 2);
        assert_eq!(port.admit(ip("10.0.0.2")).err(), Some(Refusal::SourceCap));
        // An IPv4-mapped IPv6 address is the same source.
        assert_eq!(port.admit(ip("::ffff:10.0.0.2")).err(), Some(Refusal::SourceCap));
        // 10.0.0.2: 5 still in handshake and 2 more; 10.0.0.3: 1.
        assert_eq!(port.open(), (5 + 2 + 1, 5, 2));
        drop(flood);
        drop(more);
        drop(other);
        assert_eq!(port.open(), (0, 0, 0), "every count given back, every entry removed");
    }

    #[test]
    fn the_handshake_budget_and_the_established_cap_are_separate() {
        let port = Port::new("api", limits(3, 8, 100));
        let sources = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"];
        let mut conns: Vec<Conn> = Vec::new();
        for s in sources {
            conns.extend((0..2).filter_map(|_| port.admit(ip(s)).ok()));
        }
        assert_eq!(conns.len(), 8, "the budget holds 8 handshakes");
        assert_eq!(port.admit(ip("10.0.0.9")).err(), Some(Refusal::HandshakeBudget));
        let established = conns.iter().filter(|c| c.establish()).count();
        assert_eq!(established, 3, "the established cap");
        // The 5 left still hold handshake slots until they close (2 per source: the fifth
        // source got none).
        assert_eq!(port.open(), (5, 3, 4));
        conns.retain(Conn::is_established);
        assert_eq!(port.open(), (0, 3, 2));
        assert!(port.admit(ip("10.0.0.9")).is_ok(), "handshake slots are free again");
    }

    #[test]
    fn the_caps_fit_the_descriptor_limit() {
        let args = ConnArgs {
            max: None,
            per_source: 256,
            handshakes: 512,
            handshake_timeout: Duration::from_secs(5),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            keepalive: Duration::from_secs(30),
            log_interval: Duration::from_secs(10),
        };
        let roomy = Plan::sized(&args, 1 << 20);
        assert_eq!(roomy.api.established, 4096);
        assert_eq!(roomy.raft.established, 1024);
        assert_eq!(roomy.api.per_source_handshakes, 128);
        for nofile in [1024, 2048, 4096, 8192] {
            let p = Plan::sized(&args, nofile);
            let sum = p.api.descriptors() + p.raft.descriptors() + p.metrics.descriptors();
            assert!(sum + 512 <= nofile.max(1024 + 64 + 24 + 512), "{nofile}: {p:?}");
            assert!(p.api.per_source <= p.api.established);
            assert!(p.api.per_source_handshakes < p.api.handshakes.max(2));
        }
    }

    #[test]
    fn refusals_are_summarised_not_logged_one_by_one() {
        let mut s = Summary::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert!(s.record(ip("10.0.0.2"), Refusal::SourceCap, t0), "the first is logged at once");
        for i in 0..5000u32 {
            let src = if i % 10 == 0 {
                ip(&format!("10.1.{}.{}", i / 250, i % 250))
            } else {
                ip("10.0.0.2")
            };
            assert!(!s.record(src, Refusal::SourceCap, t0));
        }
        assert!(!s.record(ip("10.0.0.3"), Refusal::HandshakeTimeout, t0));
        assert_eq!(s.flush(t0 + Duration::from_secs(5)), None, "not before the interval ends");
        let line = s.flush(t0 + Duration::from_secs(10)).unwrap_or_default();
        assert!(line.starts_with("5002 connections"), "{line}");
        assert!(line.contains("source_cap=5001 handshake_timeout=1"), "{line}");
        assert!(line.contains("sources: 10.0.0.2 (4501), "), "{line}");
        assert!(line.contains("others ("), "{line}");
        assert_eq!(line.matches(" (").count(), SUMMARY_TOP + 1, "{line}");
        // Quiet again: the next one is logged at once, and one alone makes no summary.
        let t1 = t0 + Duration::from_secs(30);
        assert!(s.record(ip("10.0.0.4"), Refusal::HandshakeFailed, t1));
        assert_eq!(s.flush(t1 + Duration::from_secs(10)), None);
    }

    #[test]
    fn the_summary_keeps_a_bounded_number_of_sources() {
        let mut s = Summary::new(Duration::from_secs(1));
        let t0 = Instant::now();
        for i in 0..(SUMMARY_SOURCES as u32 + 500) {
            s.record(IpAddr::from(std::net::Ipv4Addr::from(i)), Refusal::HandshakeTimeout, t0);
        }
        assert_eq!(s.by_source.len(), SUMMARY_SOURCES);
        assert_eq!(s.others, 500);
    }

    #[test]
    fn durations_parse() {
        assert_eq!(duration_arg("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(duration_arg("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration_arg("7"), Ok(Duration::from_secs(7)));
        assert!(duration_arg("0s").is_err());
        assert!(duration_arg("soon").is_err());
        assert!(duration_arg("86401s").is_err());
        assert!(duration_arg("18446744073709551615s").is_err(), "no overflow, no panic");
    }

    /// Sends one GET on `c` and reads its whole response (the body is "ok").
    async fn get(c: &mut TcpStream) -> std::io::Result<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await?;
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.ends_with(b"\r\n\r\nok") {
            let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf)).await??;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            got.extend_from_slice(&buf[..n]);
        }
        Ok(())
    }

    /// What a connection reads within `within`: `Some(true)` if it was closed (EOF or reset),
    /// `Some(false)` if bytes came, `None` if nothing happened.
    async fn closed_within(c: &mut TcpStream, within: Duration) -> Option<bool> {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 64];
        match tokio::time::timeout(within, c.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => Some(true),
            Ok(Ok(_)) => Some(false),
            Err(_) => None,
        }
    }

    /// An HTTP/1 keep-alive connection waiting for its next request is idle, not slow: only
    /// the idle timeout closes it. hyper's header timer closed it at the header timeout
    /// (10 s by default), and a pooled client's PUT sent as it closed failed. A head that
    /// begins and stalls is still dropped at the header timeout.
    #[tokio::test]
    async fn the_header_timeout_runs_from_a_heads_first_byte_not_while_idle() {
        use tokio::io::AsyncWriteExt;
        let mut l = limits(64, 16, 16);
        l.header_timeout = Duration::from_millis(300);
        l.idle_timeout = Duration::from_secs(4);
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let (stop, stopped) = watch::channel(false);
        let task = spawn(listener, router, None, stopped, "api", l);

        let mut c = TcpStream::connect(addr).await.unwrap();
        get(&mut c).await.unwrap();
        // Idle for four header timeouts: still open, and it serves the next request.
        assert_eq!(closed_within(&mut c, Duration::from_millis(1200)).await, None);
        get(&mut c).await.unwrap();
        // A head's first bytes, then nothing: dropped at the header timeout, well before the
        // idle timeout (4 s from the last request).
        c.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
        assert_eq!(closed_within(&mut c, Duration::from_secs(3)).await, Some(true));

        // Idle, no head: closed at the idle timeout.
        let mut d = TcpStream::connect(addr).await.unwrap();
        get(&mut d).await.unwrap();
        assert_eq!(closed_within(&mut d, Duration::from_secs(10)).await, Some(true));

        let _ = stop.send(true);
        task.await.unwrap();
    }
}
