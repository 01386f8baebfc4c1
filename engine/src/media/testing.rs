//! A real S3-compatible server for tests (feature `test-util`): `moto_server` from PyPI
//! (`pip install 'moto[s3,server]'`), started on a free loopback port and killed on drop.
//!
//! Without `moto_server` on the PATH, [`MotoServer::start`] returns `None` after printing why,
//! so object-storage tests skip with a reason; with `VELLUM_REQUIRE_S3=1` (CI sets it) a
//! missing server is a failure instead, so CI cannot pass by skipping them.
//!
//! moto accepts any credentials; the S3 medium reads them from the usual AWS environment
//! variables, which [`MotoServer::env`] lists for child processes.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running moto server; killed when dropped.
#[derive(Debug)]
pub struct MotoServer {
    child: Child,
    port: u16,
}

/// The credentials and region moto is given (it accepts any).
pub const ENV: [(&str, &str); 4] = [
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
    ("AWS_REGION", "us-east-1"),
    ("AWS_DEFAULT_REGION", "us-east-1"),
];

impl MotoServer {
    /// Starts moto on a free loopback port and waits until it answers (at most 30 s).
    /// `None` (with the reason on stderr) when `moto_server` is not installed, unless
    /// `VELLUM_REQUIRE_S3=1`, which makes that a panic.
    pub fn start() -> Option<MotoServer> {
        MotoServer::start_with_env(&[])
    }

    /// [`MotoServer::start`] with extra environment variables for moto, e.g.
    /// `INITIAL_NO_AUTH_ACTION_COUNT=0`, which makes moto check credentials against its own
    /// (empty) IAM, so every key is refused (`InvalidAccessKeyId`): the wrong-credentials tests.
    pub fn start_with_env(vars: &[(&str, &str)]) -> Option<MotoServer> {
        let required = std::env::var("VELLUM_REQUIRE_S3").is_ok_and(|v| v == "1");
        let skip = |why: String| {
            assert!(!required, "VELLUM_REQUIRE_S3=1 but {why}");
            eprintln!("skipping the object-storage test: {why} (pip install 'moto[s3,server]')");
            None
        };
        let port = match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
            Ok(addr) => addr.port(),
            Err(e) => return skip(format!("no free loopback port: {e}")),
        };
        let child = match Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .envs(vars.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => return skip(format!("moto_server does not start: {e}")),
        };
        let server = MotoServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if server.request("GET", "/").is_ok() {
                return Some(server);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        skip(format!("moto_server did not answer on port {port} within 30 s"))
    }

    /// The loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `s3://BUCKET/KEY?endpoint=...&region=us-east-1`.
    pub fn url(&self, bucket: &str, key: &str) -> String {
        format!("s3://{bucket}/{key}?endpoint={}&region=us-east-1", self.endpoint())
    }

    /// Creates a bucket; returns the HTTP status line moto answered.
    pub fn create_bucket(&self, bucket: &str) -> std::io::Result<String> {
        self.request("PUT", &format!("/{bucket}"))
    }

    /// One plain HTTP/1.1 request (no body); returns the status line.
    fn request(&self, method: &str, path: &str) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n",
            self.port
        )?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer.lines().next().unwrap_or_default().to_string())
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Makes every `s3://` medium opened from now on in this process read its AWS variables
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
/// `AWS_DEFAULT_REGION`) from `vars` instead of the process environment; `set_s3_env(&ENV)`
/// points in-process tests at moto. A stand-in for `std::env::set_var`, which edition 2024
/// makes unsafe (the workspace denies unsafe code). Child processes get [`ENV`] instead.
#[cfg(feature = "s3")]
pub fn set_s3_env(vars: &[(&str, &str)]) {
    let vars = vars.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect();
    *super::s3::ENV_OVERRIDE.write().unwrap_or_else(std::sync::PoisonError::into_inner) =
        Some(vars);
}

/// Opens an `s3://` URL with its AWS variables looked up in `vars` only (neither the process
/// environment nor [`set_s3_env`]): for tests of what a given environment does (no
/// credentials, a session token, a region).
#[cfg(feature = "s3")]
pub fn open_s3_with_env(
    url: &str,
    options: super::MediaOptions,
    vars: &[(&str, &str)],
) -> crate::error::Result<super::Target> {
    let super::MediaUrl::S3(s3) = super::MediaUrl::parse(url, super::Bare::Local)? else {
        return Err(crate::Error::BadUrl { url: url.into(), reason: "not an s3:// URL".into() });
    };
    let lookup = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_string());
    Ok(super::Target {
        media: super::s3::open_with(&s3, options, &lookup)?,
        path: format!("/{}", s3.key),
    })
}

/// GET requests the `s3://` media of this process sent for `object` (`s3://bucket/key`,
/// without the query) so far: tests count requests, not time.
#[cfg(feature = "s3")]
pub fn s3_gets(object: &str) -> u64 {
    super::s3::GETS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .find(|(k, _)| k == object)
        .map_or(0, |(_, n)| *n)
}
