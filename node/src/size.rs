//! Byte sizes on the command line: `4096`, `64MiB`, `1G`, `512k`, `10MB`.
//!
//! Binary units (`K`, `KiB`, `M`, `MiB`, `G`, `GiB`, `T`, `TiB`, case-insensitive) are powers
//! of 1024; `KB`, `MB`, `GB`, `TB` are powers of 1000, as their names say.

/// Parses a size; the error is one sentence for the user.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!("'{text}' is not a size (examples: 4096, 64MiB, 1G)"));
    }
    let n: u64 = digits.parse().map_err(|_| format!("'{text}' is too large"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "unknown size unit '{other}' in '{text}' (use K, M, G, T, KiB, MiB, ...)"
            ));
        }
    };
    n.checked_mul(mult).ok_or_else(|| format!("'{text}' is too large"))
}

/// Formats bytes for people: `64 MiB`, `1.5 GiB`, `512 B`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || (v - v.round()).abs() < 0.05 {
        format!("{:.0} {}", v, UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("10MB"), Ok(10_000_000));
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("-5").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(human(64 << 20), "64 MiB");
        assert_eq!(human(1536 << 20), "1.5 GiB");
    }
}
