//! SVG plots of side-by-side runs: throughput and memory over time,
//! latency CDFs.

use std::path::Path;

use plotters::prelude::*;
use serde_json::{Map, Value};

use super::Report;

type PlotResult = Result<(), Box<dyn std::error::Error>>;

const SIZE: (u32, u32) = (900, 520);

fn color(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 8] = [
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    COLORS[i % COLORS.len()]
}

/// Operations per second over the run, one line per engine.
pub fn throughput(path: &Path, title: &str, series: &[(String, Vec<u64>)]) -> PlotResult {
    let series: Vec<(String, Vec<f64>)> = series
        .iter()
        .map(|(name, ops)| (name.clone(), ops.iter().map(|&n| n as f64).collect()))
        .collect();
    lines(path, title, "operations per second", &series)
}

/// One value a second, one line per series.
pub fn lines(path: &Path, title: &str, y_desc: &str, series: &[(String, Vec<f64>)]) -> PlotResult {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let secs = series.iter().map(|s| s.1.len()).max().unwrap_or(1).max(1) as f64;
    let top = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..secs, 0f64..top)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(y_desc)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for (i, (name, values)) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(
                values.iter().enumerate().map(|(s, &y)| (s as f64 + 1.0, y)),
                c.stroke_width(2),
            ))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}

/// Latency against percentile, one line per engine: x is the number of
/// nines of the percentile (1 = 90%, 2 = 99%, ...), y the latency in µs
/// on a log scale.
pub fn latency_cdf(path: &Path, title: &str, series: &[(String, Vec<(f64, f64)>)]) -> PlotResult {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let nines = |q: f64| -(1.0 - q).max(1e-6).log10();
    let (lo, hi) = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .filter(|&v| v > 0.0)
        .fold((f64::MAX, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if hi > 0.0 {
        (lo * 0.8, hi * 1.25)
    } else {
        (0.1, 10.0)
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..4f64, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .x_labels(5)
        .x_label_formatter(&|x| match x.round() as i32 {
            0 => "0".into(),
            1 => "90".into(),
            2 => "99".into(),
            3 => "99.9".into(),
            4 => "99.99".into(),
            _ => String::new(),
        })
        .y_desc("latency (µs)")
        .y_label_formatter(&|y| format!("{y}"))
        .draw()?;
    for (i, (name, points)) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(
                points
                    .iter()
                    .filter(|p| p.1 > 0.0 && nines(p.0) <= 4.0)
                    .map(|&(q, v)| (nines(q), v)),
                c.stroke_width(2),
            ))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}

/// Every plot of a side-by-side run's `report` into `dir`: throughput and
/// memory over time, and a latency CDF for each kind of operation.
pub fn report_plots(dir: &Path, workload: &str, report: &Report) -> PlotResult {
    std::fs::create_dir_all(dir)?;
    let name = |r: &Map<String, Value>| r["engine"].as_str().unwrap_or("").to_string();
    let per_second: Vec<(String, Vec<u64>)> = report
        .rows()
        .iter()
        .filter_map(|r| {
            // Rows of the disk itself have no timeline.
            let per_sec = r.get("throughput_per_sec")?.as_array()?;
            Some((name(r), per_sec.iter().filter_map(Value::as_u64).collect()))
        })
        .collect();
    let path = dir.join(format!("{workload}-throughput.svg"));
    throughput(&path, &format!("{workload}: throughput"), &per_second)?;
    eprintln!("wrote {}", path.display());
    let f64s = |v: &Value| -> Option<Vec<f64>> {
        Some(v.as_array()?.iter().filter_map(Value::as_f64).collect())
    };
    let mut memory: Vec<(String, Vec<f64>)> = Vec::new();
    for r in report.rows() {
        let Some(rss) = r
            .get("rss_mb_per_sec")
            .and_then(f64s)
            .filter(|v| !v.is_empty())
        else {
            continue;
        };
        memory.push((format!("{} resident", name(r)), rss));
        if let Some(Value::Object(parts)) = r.get("memory_parts_mb_per_sec") {
            for (part, v) in parts {
                if let Some(v) = f64s(v).filter(|v| v.iter().any(|&x| x > 0.0)) {
                    memory.push((format!("{} {part}", name(r)), v));
                }
            }
        }
    }
    if !memory.is_empty() {
        let path = dir.join(format!("{workload}-memory.svg"));
        let title = format!("{workload}: memory (run, then final settle)");
        lines(&path, &title, "MB", &memory)?;
        eprintln!("wrote {}", path.display());
    }
    for kind in ["read", "update", "insert", "scan", "rmw", "delete"] {
        let series: Vec<(String, Vec<(f64, f64)>)> = report
            .rows()
            .iter()
            .filter_map(|r| {
                let cdf = r.get("latency")?.get(kind)?.get("cdf")?.as_array()?;
                let points = cdf
                    .iter()
                    .filter_map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?.as_f64()?)))
                    .collect();
                Some((name(r), points))
            })
            .collect();
        if series.is_empty() {
            continue;
        }
        let path = dir.join(format!("{workload}-latency-{kind}.svg"));
        latency_cdf(&path, &format!("{workload}: {kind} latency"), &series)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
