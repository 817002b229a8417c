//! The benchmark report: one self-contained HTML file with the summary table, the notes, a
//! throughput-over-time chart and a latency percentile chart, both inline SVG drawn here (no
//! plotting library, no script, no external resource).

use std::fmt::Write as _;

use super::result::{BenchResult, Run};

/// Chart size and margins, in SVG user units.
const WIDTH: f64 = 860.0;
const HEIGHT: f64 = 380.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 250.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 48.0;
/// Line colours, cycled.
const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
/// The highest "nines" the percentile chart shows (99.999 %).
const MAX_NINES: f64 = 5.0;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// `(x, y)` points in data units, in x order.
    pub points: Vec<(f64, f64)>,
}

/// An axis: its label, whether it is logarithmic (base 10), and fixed ticks if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// Label.
    pub label: String,
    /// Base-10 logarithmic.
    pub log: bool,
    /// `(value, text)` ticks; `None` picks round ones.
    pub ticks: Option<Vec<(f64, String)>>,
}

/// Escapes text for HTML and SVG.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A round step for about five intervals over `range` (1, 2 or 5 times a power of ten).
pub fn nice_step(range: f64) -> f64 {
    if !range.is_finite() || range <= 0.0 {
        return 1.0;
    }
    let raw = range / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let residual = raw / magnitude;
    let nice = if residual <= 1.0 {
        1.0
    } else if residual <= 2.0 {
        2.0
    } else if residual <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// A number as a short tick label (`1.5k`, `2M`).
pub fn short(v: f64) -> String {
    let a = v.abs();
    let (scaled, unit) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let decimals = if unit.is_empty() && scaled.abs() < 10.0 {
        2
    } else {
        1
    };
    let text = format!("{scaled:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    format!("{text}{unit}")
}

struct Scale {
    min: f64,
    max: f64,
    log: bool,
    from: f64,
    to: f64,
}

impl Scale {
    fn new(
        values: impl Iterator<Item = f64>,
        log: bool,
        from: f64,
        to: f64,
        zero_based: bool,
    ) -> Self {
        let values: Vec<f64> = values
            .filter(|v| v.is_finite() && (!log || *v > 0.0))
            .collect();
        let (mut min, mut max) = values
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                (a.min(*v), b.max(*v))
            });
        if values.is_empty() {
            (min, max) = if log { (1.0, 10.0) } else { (0.0, 1.0) };
        }
        if log {
            min = 10f64.powf(min.log10().floor());
            max = 10f64.powf(max.log10().ceil().max(min.log10() + 1.0));
        } else {
            if zero_based {
                min = min.min(0.0);
            }
            if max <= min {
                max = min + 1.0;
            }
            let step = nice_step(max - min);
            max = (max / step).ceil() * step;
        }
        Self {
            min,
            max,
            log,
            from,
            to,
        }
    }

    fn at(&self, v: f64) -> f64 {
        let (v, lo, hi) = if self.log {
            (v.max(self.min).log10(), self.min.log10(), self.max.log10())
        } else {
            (v, self.min, self.max)
        };
        self.from + (v - lo) / (hi - lo) * (self.to - self.from)
    }

    fn ticks(&self) -> Vec<(f64, String)> {
        if self.log {
            let mut out = Vec::new();
            let mut v = self.min;
            while v <= self.max * 1.000_001 {
                out.push((v, short(v)));
                v *= 10.0;
            }
            return out;
        }
        let step = nice_step(self.max - self.min);
        let mut out = Vec::new();
        let mut v = (self.min / step).ceil() * step;
        while v <= self.max + step * 1e-9 {
            out.push((v, short(v)));
            v += step;
        }
        out
    }
}

/// An SVG line chart.
pub fn line_chart(title: &str, x: &Axis, y: &Axis, series: &[Series]) -> String {
    let xs = Scale::new(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.0)),
        x.log,
        LEFT,
        WIDTH - RIGHT,
        true,
    );
    let ys = Scale::new(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        y.log,
        HEIGHT - BOTTOM,
        TOP,
        true,
    );
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(
        svg,
        r#"<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP);
    for (v, label) in x.ticks.clone().unwrap_or_else(|| xs.ticks()) {
        let px = xs.at(v);
        let _ = write!(
            svg,
            r##"<line x1="{px:.1}" y1="{y0}" x2="{px:.1}" y2="{y1}" stroke="#eee"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            y0 + 16.0,
            escape(&label)
        );
    }
    for (v, label) in y.ticks.clone().unwrap_or_else(|| ys.ticks()) {
        let py = ys.at(v);
        let _ = write!(
            svg,
            r##"<line x1="{x0}" y1="{py:.1}" x2="{x1}" y2="{py:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            py + 4.0,
            escape(&label)
        );
    }
    let _ = write!(
        svg,
        r##"<rect x="{x0}" y="{y1}" width="{:.1}" height="{:.1}" fill="none" stroke="#888"/>"##,
        x1 - x0,
        y0 - y1
    );
    let _ = write!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        f64::midpoint(x0, x1),
        HEIGHT - 8.0,
        escape(&x.label)
    );
    let _ = write!(
        svg,
        r#"<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        f64::midpoint(y0, y1),
        escape(&y.label)
    );
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = s
            .points
            .iter()
            .filter(|(px, py)| px.is_finite() && py.is_finite() && (!y.log || *py > 0.0))
            .map(|(px, py)| format!("{:.1},{:.1}", xs.at(*px), ys.at(*py)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"><title>{}</title></polyline>"#,
            points.join(" "),
            escape(&s.name)
        );
        // A marker per point, so a run of a single interval still shows.
        for p in &points {
            if let Some((cx, cy)) = p.split_once(',') {
                let _ = write!(
                    svg,
                    r#"<circle cx="{cx}" cy="{cy}" r="2.5" fill="{colour}"/>"#
                );
            }
        }
        let ly = TOP + 14.0 + 18.0 * super::result::f(i as u64);
        let _ = write!(
            svg,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            x1 + 12.0,
            x1 + 32.0,
            x1 + 38.0,
            ly + 4.0,
            escape(&s.name)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// A run's label in charts and tables.
pub fn label(run: &Run) -> String {
    format!("{}: {}", run.system, run.name)
}

/// Throughput over time: operations per second of each interval.
pub fn throughput_chart(runs: &[Run]) -> String {
    let series: Vec<Series> = runs
        .iter()
        .filter(|r| !r.timeline.is_empty())
        .map(|r| {
            let mut previous = 0.0;
            Series {
                name: label(r),
                points: r
                    .timeline
                    .iter()
                    .map(|s| {
                        let rate = super::result::f(s.ops) / (s.t - previous).max(1e-9);
                        previous = s.t;
                        (s.t, rate)
                    })
                    .collect(),
            }
        })
        .collect();
    line_chart(
        "Throughput over time",
        &Axis {
            label: "seconds since the start of the run".into(),
            log: false,
            ticks: None,
        },
        &Axis {
            label: "operations per second".into(),
            log: false,
            ticks: None,
        },
        &series,
    )
}

/// The server's resident memory over time, for the runs that recorded it (empty otherwise).
pub fn memory_chart(runs: &[Run]) -> String {
    let series: Vec<Series> = runs
        .iter()
        .map(|r| Series {
            name: label(r),
            points: r
                .timeline
                .iter()
                .filter_map(|s| s.rss_mib.map(|m| (s.t, m)))
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    if series.is_empty() {
        return String::new();
    }
    line_chart(
        "Server resident memory over time",
        &Axis {
            label: "seconds since the start of the run".into(),
            log: false,
            ticks: None,
        },
        &Axis {
            label: "MiB (VmRSS)".into(),
            log: false,
            ticks: None,
        },
        &series,
    )
}

/// Where a percentile sits on the chart's x axis: its number of nines (90 % = 1, 99 % = 2).
pub fn nines(percentile: f64) -> f64 {
    if percentile >= 100.0 {
        return MAX_NINES;
    }
    (-(1.0 - percentile / 100.0).log10()).min(MAX_NINES)
}

/// Latency by percentile, on a nines scale, latencies on a log scale.
pub fn percentile_chart(runs: &[Run]) -> String {
    let series: Vec<Series> = runs
        .iter()
        .filter(|r| !r.spectrum.is_empty())
        .map(|r| Series {
            name: label(r),
            points: r
                .spectrum
                .iter()
                .map(|(p, v)| (nines(*p), super::result::f(*v)))
                .collect(),
        })
        .collect();
    let ticks = [
        (0.0, "0%"),
        (1.0, "90%"),
        (2.0, "99%"),
        (3.0, "99.9%"),
        (4.0, "99.99%"),
        (5.0, "max"),
    ]
    .iter()
    .map(|(v, t)| (*v, (*t).to_owned()))
    .collect();
    line_chart(
        "Latency by percentile",
        &Axis {
            label: "percentile".into(),
            log: false,
            ticks: Some(ticks),
        },
        &Axis {
            label: "latency (microseconds, log scale)".into(),
            log: true,
            ticks: None,
        },
        &series,
    )
}

fn cell(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// The summary rows shared by the HTML table and the terminal: header, then one per run.
pub fn summary_rows(runs: &[Run]) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let header = vec![
        "system",
        "run",
        "ops/s",
        "msgs/s",
        "MB/s",
        "p50 us",
        "p90 us",
        "p99 us",
        "p999 us",
        "max us",
        "server CPU us/op",
        "writes/fsync",
        "peak RSS MiB",
        "errors",
    ];
    let rows = runs
        .iter()
        .map(|r| {
            vec![
                r.system.clone(),
                r.name.clone(),
                format!("{:.0}", r.ops_per_sec),
                format!("{:.0}", r.messages_per_sec),
                format!("{:.1}", r.mb_per_sec),
                r.latency_us.p50.to_string(),
                r.latency_us.p90.to_string(),
                r.latency_us.p99.to_string(),
                r.latency_us.p999.to_string(),
                r.latency_us.max.to_string(),
                cell(r.server_cpu_us_per_op, 2),
                cell(r.writes_per_fsync, 1),
                cell(r.server_peak_rss_mib, 0),
                r.errors.to_string(),
            ]
        })
        .collect();
    (header, rows)
}

/// The whole HTML report.
pub fn html(result: &BenchResult) -> String {
    let mut page = String::new();
    let title = format!("eddy bench {}", result.kind);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font-family:sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}td:nth-child(-n+2),th{{text-align:left}}\
         pre{{background:#f6f6f6;padding:1em}}</style></head><body>",
        escape(&title)
    );
    let _ = write!(
        page,
        "<h1>{}</h1><p>eddy {} on {} CPUs, load average before the run: {}</p>",
        escape(&title),
        escape(&result.eddy_version),
        result.cpus,
        escape(&result.load_average)
    );
    let (header, rows) = summary_rows(&result.runs);
    page.push_str("<h2>Summary</h2><table><tr>");
    for h in header {
        let _ = write!(page, "<th>{}</th>", escape(h));
    }
    page.push_str("</tr>");
    for row in rows {
        page.push_str("<tr>");
        for c in row {
            let _ = write!(page, "<td>{}</td>", escape(&c));
        }
        page.push_str("</tr>");
    }
    page.push_str("</table>");
    if !result.notes.is_empty() {
        page.push_str("<h2>Notes</h2><ul>");
        for n in &result.notes {
            let _ = write!(page, "<li>{}</li>", escape(n));
        }
        page.push_str("</ul>");
    }
    page.push_str("<h2>Throughput</h2>");
    page.push_str(&throughput_chart(&result.runs));
    page.push_str(&memory_chart(&result.runs));
    page.push_str("<h2>Latency</h2>");
    page.push_str(&percentile_chart(&result.runs));
    let config = serde_json::to_string_pretty(&result.config).unwrap_or_default();
    let _ = writeln!(
        page,
        "<h2>Configuration</h2><pre>{}</pre></body></html>",
        escape(&config)
    );
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::result::Sample;

    fn run(name: &str) -> Run {
        Run {
            name: name.into(),
            system: "eddy".into(),
            timeline: vec![
                Sample {
                    t: 0.25,
                    ops: 100,
                    errors: 0,
                    rss_mib: None,
                },
                Sample {
                    t: 0.5,
                    ops: 120,
                    errors: 0,
                    rss_mib: None,
                },
            ],
            spectrum: vec![(0.0, 10), (50.0, 20), (99.0, 80), (100.0, 500)],
            ..Run::default()
        }
    }

    #[test]
    fn ticks_and_scales() {
        assert!((nice_step(100.0) - 20.0).abs() < 1e-9);
        assert!((nice_step(7.0) - 2.0).abs() < 1e-9);
        assert!((nice_step(0.0) - 1.0).abs() < 1e-9);
        assert_eq!(short(1500.0), "1.5k");
        assert_eq!(short(2_000_000.0), "2M");
        assert_eq!(short(12.0), "12");
        assert_eq!(short(0.05), "0.05");
        assert_eq!(short(0.1), "0.1");
        assert_eq!(short(2.5), "2.5");
        assert!((nines(99.0) - 2.0).abs() < 1e-9);
        assert!((nines(0.0)).abs() < 1e-9);
        assert!((nines(100.0) - MAX_NINES).abs() < 1e-9);
        let s = Scale::new([3.0, 420.0].into_iter(), true, 0.0, 100.0, true);
        assert!((s.min - 1.0).abs() < 1e-9 && (s.max - 1000.0).abs() < 1e-9);
        assert!((s.at(10.0) - 33.333).abs() < 0.01);
        assert_eq!(s.ticks().len(), 4);
    }

    #[test]
    fn charts_have_a_line_per_run_and_escape_names() {
        let runs = [run("a <b>"), run("c")];
        let t = throughput_chart(&runs);
        assert!(t.starts_with("<svg") && t.ends_with("</svg>"));
        assert_eq!(t.matches("<polyline").count(), 2);
        assert!(t.contains("a &lt;b&gt;") && !t.contains("a <b>"));
        // 100 ops in the first quarter second: 400 ops/s.
        let p = percentile_chart(&runs);
        assert_eq!(p.matches("<polyline").count(), 2);
        assert!(p.contains("99.9%"));
        let page = html(&BenchResult {
            kind: "streams".into(),
            runs: runs.to_vec(),
            notes: vec!["ratio & more".into()],
            ..BenchResult::default()
        });
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert_eq!(
            page.matches("<svg").count(),
            2,
            "no memory samples, no memory chart"
        );
        assert!(page.contains("ratio &amp; more"));
        // With the server's resident memory sampled: one more chart, a line per run.
        let mut with_rss = runs.to_vec();
        for r in &mut with_rss {
            for (s, mib) in r.timeline.iter_mut().zip([100.0, 110.0]) {
                s.rss_mib = Some(mib);
            }
        }
        let m = memory_chart(&with_rss);
        assert_eq!(m.matches("<polyline").count(), 2);
        assert!(m.contains("VmRSS"));
        let page = html(&BenchResult {
            kind: "events".into(),
            runs: with_rss,
            ..BenchResult::default()
        });
        assert_eq!(page.matches("<svg").count(), 3);
    }
}
