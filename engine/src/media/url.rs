//! Media URLs: the one place that reads what a user typed (`local:///p`, `memory:`,
//! `virtual:///vol.vlm:/p`, `s3://bucket/prefix?endpoint=...&region=...`).
//!
//! Rules: a string with a known scheme is that medium; a string that looks like a scheme
//! (`word://`) but is not known is an error naming the known ones; anything else is a bare
//! path, which the caller interprets ([`Bare`]). Query parameters of `s3://` are a closed set:
//! an unknown one is an error (a typo must not silently reach the default endpoint).

use std::path::PathBuf;

use crate::error::{Error, Result};

/// What a bare path (no scheme) means to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bare {
    /// A volume: a file or block device, optionally `VOL:/path/in/volume`.
    Volume,
    /// A host file (`local://`).
    Local,
}

/// An `s3://` URL, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Url {
    /// The bucket.
    pub bucket: String,
    /// The key or key prefix under the bucket, without a leading `/` (may be empty).
    pub key: String,
    /// `endpoint=`: an S3-compatible server (`http://127.0.0.1:9000`); AWS when absent.
    pub endpoint: Option<String>,
    /// `region=`; else `AWS_REGION` / `AWS_DEFAULT_REGION`; else `us-east-1`.
    pub region: Option<String>,
}

/// A parsed media URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaUrl {
    /// `local:///abs/path`.
    Local(PathBuf),
    /// `memory:` or `memory:/path`: the path in the process's memory namespace.
    Memory(String),
    /// `virtual:///vol.vlm[:/path]` (or a bare path taken as a volume): the volume's carrier
    /// and the path inside it (`/` when none is given).
    Virtual {
        /// The file or block device that carries the volume.
        volume: PathBuf,
        /// The path inside the volume.
        path: String,
    },
    /// `s3://bucket/key?...`.
    S3(S3Url),
}

fn bad(url: &str, reason: impl Into<String>) -> Error {
    Error::BadUrl { url: url.into(), reason: reason.into() }
}

impl MediaUrl {
    /// Parses `s`; a bare path means what `bare` says. For a bare path taken as a volume,
    /// `VOL:/inner` splits at the first `:/` whose left side exists on the host.
    pub fn parse(s: &str, bare: Bare) -> Result<MediaUrl> {
        if let Some(rest) = s.strip_prefix("local://") {
            if !rest.starts_with('/') {
                return Err(bad(s, "local:// takes an absolute path: local:///abs/path"));
            }
            return Ok(MediaUrl::Local(PathBuf::from(rest)));
        }
        if let Some(rest) = s.strip_prefix("memory:") {
            let path = if rest.is_empty() { "/".to_string() } else { rest.to_string() };
            if !path.starts_with('/') {
                return Err(bad(s, "memory: takes an absolute path: memory:/dir/file"));
            }
            return Ok(MediaUrl::Memory(path));
        }
        if let Some(rest) = s.strip_prefix("virtual://") {
            if !rest.starts_with('/') {
                return Err(bad(s, "virtual:// takes an absolute volume path: virtual:///vol.vlm"));
            }
            return Ok(split_volume(rest)
                .unwrap_or(MediaUrl::Virtual { volume: PathBuf::from(rest), path: "/".into() }));
        }
        if let Some(rest) = s.strip_prefix("s3://") {
            return parse_s3(s, rest).map(MediaUrl::S3);
        }
        if let Some(i) = s.find("://") {
            let scheme = &s[..i];
            if !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || c == '+') {
                return Err(bad(
                    s,
                    format!(
                        "unknown medium {scheme}:// (known: local:///path, memory:, \
                         virtual:///volume[:/path], s3://bucket/prefix)"
                    ),
                ));
            }
        }
        Ok(match bare {
            Bare::Local => MediaUrl::Local(PathBuf::from(s)),
            Bare::Volume => split_volume(s)
                .unwrap_or(MediaUrl::Virtual { volume: PathBuf::from(s), path: "/".into() }),
        })
    }

    /// The medium the URL names.
    pub fn medium(&self) -> super::Medium {
        match self {
            MediaUrl::Local(_) => super::Medium::Local,
            MediaUrl::Memory(_) => super::Medium::Memory,
            MediaUrl::Virtual { .. } => super::Medium::Virtual,
            MediaUrl::S3(_) => super::Medium::Object,
        }
    }
}

/// `VOL:/inner` where VOL exists on the host.
fn split_volume(s: &str) -> Option<MediaUrl> {
    let mut from = 0;
    while let Some(i) = s[from..].find(":/").map(|i| i + from) {
        let volume = PathBuf::from(&s[..i]);
        if volume.exists() {
            return Some(MediaUrl::Virtual { volume, path: s[i + 1..].to_string() });
        }
        from = i + 1;
    }
    None
}

fn parse_s3(url: &str, rest: &str) -> Result<S3Url> {
    let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (bucket, key) = location.split_once('/').unwrap_or((location, ""));
    if bucket.is_empty() {
        return Err(bad(url, "s3:// needs a bucket: s3://bucket/prefix"));
    }
    let mut parsed = S3Url { bucket: bucket.into(), key: key.into(), endpoint: None, region: None };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if v.is_empty() {
            return Err(bad(url, format!("s3:// parameter {k} needs a value ({k}=...)")));
        }
        match k {
            "endpoint" => parsed.endpoint = Some(v.into()),
            "region" => parsed.region = Some(v.into()),
            other => {
                return Err(bad(
                    url,
                    format!("unknown s3:// parameter {other} (known: endpoint, region)"),
                ));
            }
        }
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn schemes() {
        assert_eq!(
            MediaUrl::parse("local:///tmp/x", Bare::Volume).unwrap(),
            MediaUrl::Local("/tmp/x".into())
        );
        assert_eq!(MediaUrl::parse("memory:", Bare::Volume).unwrap(), MediaUrl::Memory("/".into()));
        assert_eq!(
            MediaUrl::parse("s3://b/p/q?endpoint=http://127.0.0.1:9&region=eu", Bare::Local)
                .unwrap(),
            MediaUrl::S3(S3Url {
                bucket: "b".into(),
                key: "p/q".into(),
                endpoint: Some("http://127.0.0.1:9".into()),
                region: Some("eu".into()),
            })
        );
        assert_eq!(MediaUrl::parse("./f", Bare::Local).unwrap(), MediaUrl::Local("./f".into()));
    }

    #[test]
    fn bad_urls_name_the_problem() {
        for (url, says) in [
            ("local://rel", "absolute"),
            ("ftp://x/y", "unknown medium ftp://"),
            ("s3:///key", "needs a bucket"),
            ("s3://b/k?endpiont=x", "unknown s3:// parameter endpiont"),
            ("s3://b/k?region=", "needs a value"),
        ] {
            let e = MediaUrl::parse(url, Bare::Volume).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
        }
    }
}
