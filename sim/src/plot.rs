//! SVG plots: admitted over time against the limit per workload, retry arrivals, and latency percentiles.

use std::path::{Path, PathBuf};

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::score::RunResult;

fn color(strategy: &str) -> RGBColor {
    match strategy {
        "owner" => RGBColor(31, 119, 180),
        "gossip" => RGBColor(255, 127, 14),
        "divide" => RGBColor(44, 160, 44),
        _ => RGBColor(148, 103, 189),
    }
}

fn file_stem(label: &str) -> String {
    label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect::<String>()
        .split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

type PlotResult = Result<(), Box<dyn std::error::Error>>;

type TimeChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A chart over seconds into the run, with its caption, mesh and axis labels.
fn time_chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: &str,
    t_max: f64,
    y_max: f64,
    y_desc: &str,
) -> Result<TimeChart<'a, 'b>, Box<dyn std::error::Error>> {
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..t_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(245, 245, 245))
        .x_desc("seconds into the run")
        .y_desc(y_desc)
        .draw()?;
    Ok(chart)
}

/// Admitted in the trailing window over the watched keys, as a multiple of
/// their limit, one line per strategy, with the reference and the limit.
fn admitted(path: &Path, label: &str, runs: &[&RunResult]) -> PlotResult {
    let t_max = runs
        .iter()
        .flat_map(|r| r.series.t_s.last().copied())
        .fold(1.0, f64::max);
    let y_max = runs
        .iter()
        .flat_map(|r| r.series.admitted.iter().chain(&r.series.reference).copied())
        .fold(1.2, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let window = runs.first().map_or(0.0, |r| r.series.window_s);
    let caption = format!("{label}: admitted in the trailing {window}s window / limit");
    let mut chart = time_chart(&root, &caption, t_max, y_max, "x limit")?;
    if let Some(b) = runs.iter().find_map(|r| r.series.boundary_s) {
        chart
            .draw_series(DashedLineSeries::new(
                [(b, 0.0), (b, y_max)],
                3,
                3,
                RGBColor(120, 120, 120).stroke_width(1),
            ))?
            .label("window boundary")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RGBColor(120, 120, 120)));
    }
    // The fault, and when each strategy's survivors saw it.
    let faulted = runs
        .iter()
        .find_map(|r| r.fault.as_ref().filter(|f| f.skipped.is_none()));
    if let Some(f) = faulted {
        chart
            .draw_series(DashedLineSeries::new(
                [(f.at_s, 0.0), (f.at_s, y_max)],
                3,
                3,
                BLACK.stroke_width(1),
            ))?
            .label(format!("{} {}", f.kind, f.node))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK));
        for r in runs {
            let Some(d) = r
                .fault
                .as_ref()
                .and_then(|f| f.detected_after_s.map(|d| f.at_s + d))
            else {
                continue;
            };
            let c = color(&r.strategy);
            chart.draw_series(DashedLineSeries::new(
                [(d, 0.0), (d, y_max)],
                3,
                3,
                c.stroke_width(1),
            ))?;
        }
    }
    chart
        .draw_series(LineSeries::new(
            [(0.0, 1.0), (t_max, 1.0)],
            RED.stroke_width(1),
        ))?
        .label("limit L")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RED));
    if let Some(first) = runs.first() {
        let pts: Vec<(f64, f64)> = first
            .series
            .t_s
            .iter()
            .copied()
            .zip(first.series.reference.iter().copied())
            .collect();
        chart
            .draw_series(DashedLineSeries::new(pts, 6, 4, BLACK.stroke_width(2)))?
            .label("exact reference")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK));
    }
    for r in runs {
        let c = color(&r.strategy);
        let pts: Vec<(f64, f64)> = r
            .series
            .t_s
            .iter()
            .copied()
            .zip(r.series.admitted.iter().copied())
            .collect();
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
            .label(r.strategy.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Retries arriving per 10 ms, one line per jitter mode.
fn retry_storm(path: &Path, runs: &[&RunResult]) -> PlotResult {
    let with: Vec<&&RunResult> = runs.iter().filter(|r| r.buckets.is_some()).collect();
    let t_max = with
        .iter()
        .filter_map(|r| r.buckets.as_ref())
        .map(|b| b.start_s + b.counts.len() as f64 * b.width_s)
        .fold(1.0, f64::max);
    let y_max = with
        .iter()
        .filter_map(|r| r.buckets.as_ref())
        .flat_map(|b| b.counts.iter().copied())
        .max()
        .unwrap_or(1) as f64
        * 1.1;
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let caption = "retry storm: retries arriving per 10 ms";
    let mut chart = time_chart(&root, caption, t_max, y_max, "retries / 10 ms")?;
    let palette = [
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
    ];
    for (i, r) in with.iter().enumerate() {
        let Some(b) = &r.buckets else { continue };
        let c = palette[i % palette.len()];
        let mut pts: Vec<(f64, f64)> = b
            .counts
            .iter()
            .enumerate()
            .map(|(j, &n)| (b.start_s + j as f64 * b.width_s, n as f64))
            .collect();
        // Back to zero after the last retry, so a herd that ends the run
        // does not end the line at its peak.
        pts.push((b.start_s + b.counts.len() as f64 * b.width_s, 0.0));
        pts.push((t_max, 0.0));
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
            .label(format!("{} ({})", r.variant, r.strategy))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}

/// p50 / p99 / p99.9 per strategy, one panel per workload.
fn latency(path: &Path, labels: &[String], results: &[RunResult]) -> PlotResult {
    let cols = 4;
    let rows = labels.len().div_ceil(cols).max(1);
    let root = SVGBackend::new(path, (1200, 300 * rows as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((rows, cols));
    for (label, area) in labels.iter().zip(panels.iter()) {
        let runs: Vec<&RunResult> = results
            .iter()
            .filter(|r| r.error.is_none() && &r.label() == label)
            .collect();
        let y_max = runs.iter().map(|r| r.latency.p999_ms).fold(0.1, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(label, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(24)
            .y_label_area_size(44)
            .build_cartesian_2d(-0.2..2.2, 0.0..y_max)?;
        chart
            .configure_mesh()
            .light_line_style(RGBColor(245, 245, 245))
            .x_labels(3)
            .x_label_formatter(&|x: &f64| match x.round() as i64 {
                0 => "p50".into(),
                1 => "p99".into(),
                2 => "p99.9".into(),
                _ => String::new(),
            })
            .y_desc("ms")
            .draw()?;
        for r in runs {
            let c = color(&r.strategy);
            let pts = [
                (0.0, r.latency.p50_ms),
                (1.0, r.latency.p99_ms),
                (2.0, r.latency.p999_ms),
            ];
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
                .label(r.strategy.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], c.stroke_width(2)));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// A plot written, and the workload it belongs to (None: it covers every
/// workload, as the latency panels do).
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    pub path: PathBuf,
    pub workload: Option<String>,
}

/// Draws every plot into `out`; returns the plots written.
pub fn draw_all(out: &Path, results: &[RunResult]) -> Vec<Plot> {
    let mut labels: Vec<String> = Vec::new();
    for r in results.iter().filter(|r| r.error.is_none()) {
        if !labels.contains(&r.label()) {
            labels.push(r.label());
        }
    }
    let mut written = Vec::new();
    // The regions scenario draws its own plot (allocation and use per
    // region) while it runs; it has no per-key series for these.
    if results.iter().any(|r| r.workload == "regions") {
        let p = out.join("regions.svg");
        if p.exists() {
            written.push(Plot {
                path: p,
                workload: Some("regions".into()),
            });
        }
    }
    let labels: Vec<String> = labels.into_iter().filter(|l| l != "regions").collect();
    let mut keep = |path: PathBuf, workload: Option<&str>, res: PlotResult| match res {
        Ok(()) => written.push(Plot {
            path,
            workload: workload.map(str::to_string),
        }),
        Err(e) => eprintln!("weir-sim: could not draw {}: {e}", path.display()),
    };
    for label in labels.iter().filter(|l| !l.starts_with("retry-storm")) {
        let runs: Vec<&RunResult> = results
            .iter()
            .filter(|r| r.error.is_none() && &r.label() == label)
            .collect();
        let p = out.join(format!("admitted-{}.svg", file_stem(label)));
        let res = admitted(&p, label, &runs);
        keep(p, runs.first().map(|r| r.workload.as_str()), res);
    }
    let storms: Vec<&RunResult> = results
        .iter()
        .filter(|r| r.error.is_none() && r.workload == "retry-storm")
        .collect();
    if !storms.is_empty() {
        let p = out.join("retry-storm.svg");
        let res = retry_storm(&p, &storms);
        keep(p, Some("retry-storm"), res);
    }
    if !labels.is_empty() {
        let p = out.join("latency.svg");
        let res = latency(&p, &labels, results);
        keep(p, None, res);
    }
    written
}

#[cfg(test)]
mod tests {
    #[test]
    fn file_names_keep_only_safe_characters() {
        assert_eq!(
            super::file_stem("retry-storm (no-jitter)"),
            "retry-storm-no-jitter"
        );
    }
}
