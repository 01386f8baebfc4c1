//! How the node's ports are served and how it reaches other members: plain HTTP on loopback,
//! TLS everywhere else.
//!
//! - The Raft port with `--peer-cert/--peer-key/--peer-ca` is mutual TLS: a connecting peer
//!   must present a certificate of the peer CA (the handshake fails otherwise, and the log
//!   names the address that tried); each request carries the connection's certificate
//!   ([`PeerCert`]) to `raft_api.rs`, which refuses a request whose claimed sender is not the
//!   node the certificate names (`tls.rs`). Outgoing Raft RPCs present this node's
//!   certificate and address the peer by its node name (`https://node-N.vellum:PORT`,
//!   resolved to its Raft address), so the peer's certificate must name the member called.
//! - The client API with `--api-cert/--api-key` is TLS; with `--api-ca`, clients must present
//!   a certificate of that CA. The node's own calls to other members' APIs (forwarding to the
//!   leader, joining, start-up checks) verify them against `--api-ca` and `--peer-ca` and
//!   present this node's API certificate.
//! - Secure by default: a non-loopback address is served only with TLS on both ports, unless
//!   `--insecure` says plain HTTP is wanted (`security/exposure.rs`).
//! - Every port, plain or TLS, is served by the one accept loop of `listener.rs`, with its
//!   connection caps and deadlines; every request carries its connection's [`PeerAddr`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::config::ServeArgs;
pub use super::listener::{Limits, PeerAddr, PeerCert};
use crate::security::tls;

/// The TLS settings of both ports, loaded once at start-up.
pub struct Security {
    /// The Raft port's server config (mutual TLS), if `--peer-*` are given.
    pub raft_server: Option<Arc<ServerConfig>>,
    /// The config of outgoing Raft RPCs: trusts the peer CA, presents this node's
    /// certificate.
    peer_client: Option<ClientConfig>,
    /// The client API's server config, if `--api-cert/--api-key` are given.
    pub api_server: Option<Arc<ServerConfig>>,
    /// The config of calls to other members' APIs (None: plain HTTP).
    api_client: Option<ClientConfig>,
}

impl Security {
    /// Loads the certificates and keys the flags name.
    pub fn load(args: &ServeArgs) -> Result<Security, String> {
        let peer = match (&args.peer_cert, &args.peer_key, &args.peer_ca) {
            (Some(cert), Some(key), Some(ca)) => Some((tls::Identity::load(cert, key)?, ca)),
            (None, None, None) => None,
            _ => return Err("--peer-cert, --peer-key and --peer-ca go together".into()),
        };
        let api = match (&args.api_cert, &args.api_key) {
            (Some(cert), Some(key)) => Some(tls::Identity::load(cert, key)?),
            (None, None) => None,
            _ => return Err("--api-cert and --api-key go together".into()),
        };
        if args.api_ca.is_some() && api.is_none() {
            return Err("--api-ca needs --api-cert and --api-key".into());
        }
        let (raft_server, peer_client) = match peer {
            Some((me, ca)) => {
                let client = tls::client_config(tls::load_roots(ca)?, Some(&me))?;
                (Some(tls::server_config(&me, Some(ca))?), Some(client))
            }
            None => (None, None),
        };
        let (api_server, api_client) = match &api {
            Some(me) => {
                let mut roots = RootCertStore::empty();
                for ca in [&args.api_ca, &args.peer_ca].into_iter().flatten() {
                    roots.extend(tls::load_roots(ca)?.roots);
                }
                if roots.is_empty() {
                    return Err("--api-cert needs --api-ca or --peer-ca: the node verifies other \
                                members' API certificates against it when it forwards a \
                                request to the leader"
                        .into());
                }
                let client = tls::client_config(roots, Some(me))?;
                (Some(tls::server_config(me, args.api_ca.as_deref())?), Some(client))
            }
            None => (None, None),
        };
        Ok(Security { raft_server, peer_client, api_server, api_client })
    }

    /// The clients of other members' Raft ports.
    pub fn peers(&self) -> PeerClients {
        PeerClients { tls: self.peer_client.clone(), clients: Arc::default() }
    }

    /// A client of other members' APIs (forwarding, joining, start-up checks).
    pub fn api_client(
        &self,
        timeout: Duration,
        follow_redirects: bool,
    ) -> Result<ApiClient, String> {
        let mut builder = reqwest::Client::builder().no_proxy().timeout(timeout);
        if !follow_redirects {
            builder = builder.redirect(reqwest::redirect::Policy::none());
        }
        if let Some(config) = &self.api_client {
            // Never plain HTTP to another member's API once ours is TLS: a redirect or an
            // address with http:// must not carry a token in the clear.
            builder = builder.use_preconfigured_tls(config.clone()).https_only(true);
        }
        let client = builder.build().map_err(|e| format!("http client: {e}"))?;
        Ok(ApiClient { client, scheme: if self.api_client.is_some() { "https" } else { "http" } })
    }
}

/// A client of other members' APIs, with the scheme they are served with (the same on every
/// member: TLS settings are the cluster's).
#[derive(Clone)]
pub struct ApiClient {
    pub client: reqwest::Client,
    scheme: &'static str,
}

impl ApiClient {
    /// The base URL of the API at `addr` (`HOST:PORT`, or a URL kept as given).
    pub fn base(&self, addr: &str) -> String {
        let addr = addr.trim_end_matches('/');
        if addr.starts_with("http://") || addr.starts_with("https://") {
            addr.to_string()
        } else {
            format!("{}://{addr}", self.scheme)
        }
    }
}

/// Pooled clients of other members' Raft ports, one per member and address.
#[derive(Clone)]
pub struct PeerClients {
    tls: Option<ClientConfig>,
    clients: Arc<Mutex<HashMap<(u64, String), reqwest::Client>>>,
}

impl PeerClients {
    /// A client for member `target` at `raft_addr` and the base URL to call it with: with TLS,
    /// `https://node-N.vellum:PORT`, resolved to `raft_addr`, whose handshake accepts only a
    /// certificate of the peer CA valid for that name (webpki: the exact name, or a wildcard
    /// it allows; it refuses `*.vellum`, a wildcard over a single label).
    pub fn client(
        &self,
        target: u64,
        raft_addr: &str,
    ) -> Result<(reqwest::Client, String), String> {
        let Some(tls) = &self.tls else {
            let mut clients =
                self.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let client = clients
                .entry((target, raft_addr.to_string()))
                .or_insert_with(|| plain_client().unwrap_or_else(|_| reqwest::Client::new()))
                .clone();
            return Ok((client, format!("http://{raft_addr}")));
        };
        let addr: SocketAddr = raft_addr
            .parse()
            .map_err(|_| format!("the raft address {raft_addr} of node {target} is not IP:PORT"))?;
        let name = tls::node_name(target);
        let base = format!("https://{name}:{}", addr.port());
        let mut clients = self.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = clients.get(&(target, raft_addr.to_string())) {
            return Ok((c.clone(), base));
        }
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(4)
            .tcp_nodelay(true)
            .use_preconfigured_tls(tls.clone())
            .resolve(&name, addr)
            .build()
            .map_err(|e| format!("http client: {e}"))?;
        clients.insert((target, raft_addr.to_string()), client.clone());
        Ok((client, base))
    }
}

fn plain_client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder().no_proxy().pool_max_idle_per_host(4).tcp_nodelay(true).build()
}

/// Serves `router` on `listener` until `stop` turns true, through the one accept loop of
/// every port (`listener.rs`: caps per port and per source address, handshake budget and
/// deadline, idle timeout): plain HTTP without `tls`, TLS with it (each request carrying the
/// connection's [`PeerCert`]). `port` names the port in logs and metrics.
pub fn spawn(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<ServerConfig>>,
    stop: watch::Receiver<bool>,
    port: &'static str,
    limits: Limits,
) -> JoinHandle<()> {
    super::listener::spawn(listener, router, tls, stop, port, limits)
}
