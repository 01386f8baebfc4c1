//! Output: the terminal table, JSON lines, and `docs/BENCHMARKS.md` with its plots.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use crate::stats::{Unit, ratio};
use crate::{SuiteResult, svg};

fn fmt_value(x: f64, unit: Unit) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    match unit {
        Unit::Micros | Unit::MegabytesPerSec | Unit::OpsPerSec | Unit::Percent => format!("{x:.0}"),
        Unit::Millis => format!("{x:.3}"),
        Unit::PerOp => format!("{x:.2}"),
    }
}

fn extras(m: &crate::Measurement) -> String {
    m.extra.iter().map(|(k, v)| format!("{k} {v:.2}")).collect::<Vec<_>>().join(", ")
}

/// A table cell: a `|` in a name (`O_DIRECT|O_DSYNC`) must not end the cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// One markdown table per suite, with a ratio column.
pub fn tables(results: &[SuiteResult]) -> String {
    let mut out = String::new();
    for r in results {
        let _ = writeln!(out, "\n### {}\n", r.name);
        for s in &r.skipped {
            let _ = writeln!(out, "- skipped: {s}");
        }
        if r.measurements.is_empty() {
            continue;
        }
        if !r.skipped.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "| case | variant | n | median | p99 | spread (rep medians) | unit | ratio to baseline | other |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
        for m in &r.measurements {
            let s = m.summary();
            let ratio = ratio(m, &r.measurements).map_or_else(
                || "baseline".into(),
                |x| format!("{x:.3}x {}", m.baseline.as_deref().unwrap_or("")),
            );
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {}..{} | {} | {} | {} |",
                cell(&m.case),
                cell(&m.variant),
                s.n,
                fmt_value(s.median, m.unit),
                fmt_value(s.p99, m.unit),
                fmt_value(s.spread.0, m.unit),
                fmt_value(s.spread.1, m.unit),
                m.unit.label(),
                cell(&if m.baseline.is_some() { ratio } else { "baseline".into() }),
                extras(m)
            );
        }
        for n in &r.notes {
            let _ = writeln!(out, "\n{n}");
        }
    }
    out
}

/// The targets, met or missed.
pub fn targets(results: &[SuiteResult]) -> String {
    let mut out = String::new();
    for t in results.iter().flat_map(|r| &r.targets) {
        let verdict = match t.met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "not measured",
        };
        let obs = t.observed.map_or_else(String::new, |x| format!(" (observed {x:.3})"));
        let note = if t.note.is_empty() { String::new() } else { format!(": {}", t.note) };
        let _ = writeln!(out, "- {verdict}: [{}] {}{obs}{note}", t.suite, t.description);
    }
    out
}

/// Prints the human table.
pub fn print(results: &[SuiteResult]) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", tables(results));
    let _ = writeln!(stdout, "targets:\n{}", targets(results));
}

/// Writes one JSON object per measurement and per target.
pub fn json_lines(results: &[SuiteResult], path: &Path) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    for r in results {
        for m in &r.measurements {
            let s = m.summary();
            let line = serde_json::json!({
                "suite": m.suite, "case": m.case, "variant": m.variant, "baseline": m.baseline,
                "unit": m.unit, "n": s.n, "median": s.median, "p99": s.p99, "p999": s.p999,
                "spread": [s.spread.0, s.spread.1], "rep_medians": m.rep_medians,
                "ratio": ratio(m, &r.measurements), "extra": m.extra,
            });
            writeln!(f, "{line}")?;
        }
        for t in &r.targets {
            writeln!(f, "{}", serde_json::json!({ "target": t }))?;
        }
        for s in &r.skipped {
            writeln!(f, "{}", serde_json::json!({ "suite": r.name, "skipped": s }))?;
        }
    }
    Ok(())
}

pub(crate) fn machine() -> String {
    let run = |c: &str, a: &[&str]| {
        std::process::Command::new(c)
            .args(a)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let disks: Vec<String> = run("lsblk", &["-dbno", "NAME,SIZE,ROTA,TYPE"])
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (name, size, rota) = (f.first()?, f.get(1)?.parse::<u64>().ok()?, f.get(2)?);
            (size > 0 && f.get(3) == Some(&"disk"))
                .then(|| format!("{name} {} GiB, rotational={rota}", size >> 30))
        })
        .collect();
    format!("{} ({cpus} vCPU, {cpu}); disks: {}", run("uname", &["-sr"]), disks.join("; "))
}

/// What a report of some suites keeps from the report already in `docs/BENCHMARKS.md`: the
/// target lines, result sections and figure lines of the suites this run did not measure,
/// and the header lines of the runs they came from.
#[derive(Default)]
struct Kept {
    command: String,
    date: String,
    runs: Vec<String>,
    targets: Vec<String>,
    sections: Vec<(String, String)>,
    figures: Vec<String>,
    /// Every section's name in the old report's order (to place sections that are not
    /// suites, such as hand-written ones, after the suite they followed).
    order: Vec<String>,
}

/// The suite a target line (`- met: [log] ...`) or figure line (`![log: ...`) belongs to.
fn line_suite(line: &str) -> Option<&str> {
    if let Some(rest) = line.strip_prefix("![") {
        return rest.split(':').next();
    }
    let start = line.find("] ").and_then(|end| line[..end].rfind('[').map(|s| (s, end)))?;
    Some(&line[start.0 + 1..start.1])
}

fn kept(old: &str, ran: &[&str]) -> Kept {
    let mut k = Kept::default();
    let mut part = "";
    let mut section: Option<(String, String)> = None;
    for line in old.lines() {
        if line.starts_with("## ") {
            part = line;
        }
        if line.starts_with("### ") || line.starts_with("## ") {
            k.sections.extend(section.take());
            if let Some(name) = line.strip_prefix("### ") {
                k.order.push(name.to_string());
            }
            if let Some(name) = line.strip_prefix("### ")
                && !ran.contains(&name)
            {
                section = Some((name.to_string(), String::new()));
            }
        }
        if let Some((_, text)) = section.as_mut() {
            text.push_str(line);
            text.push('\n');
            continue;
        }
        let foreign = line_suite(line).is_some_and(|s| !ran.contains(&s));
        match part {
            "" if line.starts_with("- command: ") => k.command = line[11..].to_string(),
            "" if line.starts_with("- date: ") => k.date = line[8..].to_string(),
            "" if line.starts_with("- earlier run") => k.runs.push(line.to_string()),
            "## Targets" if line.starts_with("- ") && foreign => k.targets.push(line.into()),
            "## Latency distributions" if line.starts_with("![") && foreign => {
                k.figures.push(line.into());
            }
            _ => {}
        }
    }
    k.sections.extend(section);
    k
}

/// Regenerates `docs/BENCHMARKS.md` and the plots beside it in `docs/bench/`. A run of some
/// suites replaces only theirs: the other suites' sections stay as the run that made them
/// left them, and the header names both runs.
pub fn markdown(results: &[SuiteResult], docs: &Path, command: &str) -> std::io::Result<()> {
    let ran: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
    let partial = crate::SUITES.iter().any(|s| !ran.contains(s));
    let old = if partial {
        kept(&std::fs::read_to_string(docs.join("BENCHMARKS.md")).unwrap_or_default(), &ran)
    } else {
        Kept::default()
    };
    let plots = docs.join("bench");
    std::fs::create_dir_all(&plots)?;
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(
        md,
        "Generated by `vellum-bench --report` from one recorded run; do not edit by hand. Every figure is"
    );
    let _ = writeln!(
        md,
        "measured next to its baseline in the same run, repetitions interleaved, and reported as a ratio:"
    );
    let _ = writeln!(
        md,
        "below 1 is faster for latencies, above 1 is faster for rates. Spread is the range of the"
    );
    let _ = writeln!(
        md,
        "per-repetition medians. Machines are noisy: compare ratios, not absolute numbers.\n"
    );
    let _ = writeln!(md, "- command: `{command}`");
    let _ = writeln!(md, "- machine: {}", machine());
    let _ = writeln!(
        md,
        "- date: {}",
        std::process::Command::new("date")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    );
    if !old.sections.is_empty() {
        // The runs the kept sections came from, newest first.
        let names: Vec<&str> = old.sections.iter().map(|(n, _)| n.as_str()).collect();
        let _ = writeln!(
            md,
            "- this run measured: {}; the sections of {} are kept from earlier runs:",
            ran.join(", "),
            names.join(", ")
        );
        if !old.command.is_empty() {
            let _ = writeln!(md, "- earlier run: {} on {}", old.command, old.date);
        }
        for l in &old.runs {
            let _ = writeln!(md, "{l}");
        }
    }
    md.push('\n');
    let mut target_lines = targets(results);
    for t in &old.targets {
        let _ = writeln!(target_lines, "{t}");
    }
    let _ = writeln!(md, "## Targets\n\n{target_lines}");
    // Sections in the order of SUITES, each from this run or kept; a kept section that is no
    // suite (written by hand) follows the suite it followed before.
    let mut sections = String::new();
    let push_kept = |sections: &mut String, text: &str| {
        sections.push('\n');
        sections.push_str(text.trim_end());
        sections.push('\n');
    };
    let anchor = |name: &str| -> Option<&str> {
        let at = old.order.iter().position(|n| n == name)?;
        old.order[..at].iter().rev().map(String::as_str).find(|n| crate::SUITES.contains(n))
    };
    let loose = |after: Option<&str>| -> Vec<String> {
        old.sections
            .iter()
            .filter(|(n, _)| !crate::SUITES.contains(&n.as_str()) && anchor(n) == after)
            .map(|(_, text)| text.clone())
            .collect()
    };
    for text in loose(None) {
        push_kept(&mut sections, &text);
    }
    for name in crate::SUITES {
        if let Some(r) = results.iter().find(|r| r.name == *name) {
            sections.push_str(&tables(std::slice::from_ref(r)));
        } else if let Some((_, text)) = old.sections.iter().find(|(n, _)| n == name) {
            push_kept(&mut sections, text);
        }
        for text in loose(Some(name)) {
            push_kept(&mut sections, &text);
        }
    }
    let _ = writeln!(md, "## Results\n{sections}");
    let mut figures = String::new();
    for r in results {
        for case in
            r.measurements.iter().map(|m| m.case.clone()).collect::<std::collections::BTreeSet<_>>()
        {
            let series: Vec<(String, Vec<f64>)> = r
                .measurements
                .iter()
                .filter(|m| {
                    m.case == case
                        && matches!(m.unit, Unit::Micros | Unit::Millis)
                        && m.samples.len() > 20
                })
                .map(|m| (m.variant.clone(), m.samples.clone()))
                .collect();
            if series.len() < 2 {
                continue;
            }
            let unit =
                r.measurements.iter().find(|m| m.case == case).map_or(Unit::Micros, |m| m.unit);
            let file = format!(
                "{}-{}.svg",
                r.name,
                case.chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
                    .collect::<String>()
            );
            std::fs::write(
                plots.join(&file),
                svg::cdf(
                    &format!("{}: {case}", r.name),
                    &format!("latency ({}) - cumulative fraction of operations", unit.label()),
                    &series,
                ),
            )?;
            let _ = writeln!(figures, "![{}: {case}](bench/{file})\n", r.name);
        }
    }
    for f in &old.figures {
        let _ = writeln!(figures, "{f}\n");
    }
    if !figures.is_empty() {
        let _ = writeln!(md, "\n## Latency distributions\n\n{figures}");
    }
    std::fs::write(docs.join("BENCHMARKS.md"), md)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    const OLD: &str = "# Benchmarks\n\n- command: `old cmd`\n- machine: m\n- date: d1\n\n## Targets\n\n- met: [carrier] a: b (observed 1.0)\n- MISSED: [log] c\n\n## Results\n\n### carrier\n\n| t |\n\n### log\n\n| u |\n\n## Latency distributions\n\n![carrier: x](bench/carrier-x.svg)\n\n![log: y](bench/log-y.svg)\n";

    #[test]
    fn a_partial_report_keeps_the_other_suites_sections() {
        let k = kept(OLD, &["log"]);
        assert_eq!(k.command, "`old cmd`");
        assert_eq!(k.date, "d1");
        assert_eq!(k.targets, vec!["- met: [carrier] a: b (observed 1.0)".to_string()]);
        assert_eq!(k.sections.len(), 1);
        assert_eq!(k.sections[0].0, "carrier");
        assert!(k.sections[0].1.contains("| t |") && !k.sections[0].1.contains("| u |"));
        assert_eq!(k.figures, vec!["![carrier: x](bench/carrier-x.svg)".to_string()]);
    }

    #[test]
    fn a_hand_written_section_is_kept_where_it_was() {
        let old = "# Benchmarks\n\n## Results\n\n### carrier\n\n| t |\n\n### by hand\n\nnotes\n\n### log\n\n| u |\n";
        let dir = tempfile_dir();
        std::fs::write(dir.join("BENCHMARKS.md"), old).unwrap();
        let ran = crate::SuiteResult::new("log");
        markdown(&[ran], &dir, "cmd").unwrap();
        let new = std::fs::read_to_string(dir.join("BENCHMARKS.md")).unwrap();
        let at = |s: &str| new.find(s).unwrap_or_else(|| panic!("{s} missing:\n{new}"));
        assert!(at("### carrier") < at("### by hand") && at("### by hand") < at("### log"));
        assert!(new.contains("notes"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("vellum-bench-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
