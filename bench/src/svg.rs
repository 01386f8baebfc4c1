//! Latency distribution plots (CDF) as small standalone SVG files.

use std::fmt::Write;

const COLORS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

/// A CDF plot of each series (name, samples), x clipped at the largest p99.9.
pub fn cdf(title: &str, unit: &str, series: &[(String, Vec<f64>)]) -> String {
    let (w, h, left, bottom) = (640.0, 360.0, 60.0, 40.0);
    let (pw, ph) = (w - left - 20.0, h - bottom - 40.0);
    let sorted: Vec<(String, Vec<f64>)> = series
        .iter()
        .map(|(n, s)| {
            let mut s = s.clone();
            s.retain(|x| x.is_finite());
            s.sort_by(f64::total_cmp);
            (n.clone(), s)
        })
        .collect();
    let xmax = sorted
        .iter()
        .filter_map(|(_, s)| s.get(((s.len() as f64 - 1.0) * 0.999) as usize))
        .copied()
        .fold(0.0_f64, f64::max)
        .max(1e-9)
        * 1.05;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="{w}" height="{h}" fill="white"/><text x="{}" y="18" font-size="13">{}</text>"#,
        left,
        esc(title)
    );
    let (x0, y0) = (left, 30.0 + ph);
    let _ = writeln!(
        out,
        r#"<line x1="{x0}" y1="{y0}" x2="{}" y2="{y0}" stroke="black"/><line x1="{x0}" y1="30" x2="{x0}" y2="{y0}" stroke="black"/>"#,
        x0 + pw
    );
    for k in 0..=4 {
        let fx = f64::from(k) / 4.0;
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{:.0}</text>"#,
            x0 + fx * pw,
            y0 + 14.0,
            fx * xmax
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{:.2}</text>"#,
            x0 - 4.0,
            y0 - fx * ph + 4.0,
            fx
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        x0 + pw / 2.0,
        h - 6.0,
        esc(unit)
    );
    for (i, (name, s)) in sorted.iter().enumerate() {
        if s.is_empty() {
            continue;
        }
        let color = COLORS[i % COLORS.len()];
        let step = (s.len() / 400).max(1);
        let pts: Vec<String> = s
            .iter()
            .enumerate()
            .step_by(step)
            .map(|(k, v)| {
                format!(
                    "{:.1},{:.1}",
                    x0 + (v / xmax).min(1.0) * pw,
                    y0 - (k as f64 + 1.0) / s.len() as f64 * ph
                )
            })
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
            pts.join(" ")
        );
        let ly = 44.0 + 14.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="10" height="3" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            x0 + pw - 230.0,
            ly - 4.0,
            x0 + pw - 215.0,
            ly,
            esc(name)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
