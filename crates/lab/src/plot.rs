//! Plots for reports: log-log tail (complementary CDF) charts and x-y charts (lines for
//! measurements, dashed lines for models), PNG with an embedded font.
//!
//! The font (DejaVu Sans, Bitstream Vera licence, `assets/`) is compiled in, so plots render the
//! same on a machine without fontconfig or any installed font.

use anyhow::{Result, anyhow};
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // A failure leaves text unrendered, which the chart calls below report.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// One line of a tail chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// `(x, fraction of samples above x)` points, x > 0, fraction in (0, 1].
    pub points: Vec<(f64, f64)>,
}

/// Draws `series` as complementary CDFs on log-log axes into a PNG at `path`.
pub fn tail_chart(path: &Path, title: &str, x_label: &str, series: &[Series]) -> Result<()> {
    register_font();
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    let x_min = points().map(|p| p.0).filter(|x| *x > 0.0).fold(f64::INFINITY, f64::min);
    let x_max = points().map(|p| p.0).fold(0.0, f64::max);
    let y_min = points().map(|p| p.1).filter(|y| *y > 0.0).fold(1.0, f64::min);
    if !x_min.is_finite() || x_max <= 0.0 {
        return Err(anyhow!("nothing to plot for {title}"));
    }
    let x_range = (x_min * 0.8)..(x_max * 1.25);
    let y_range = (y_min * 0.5)..1.2;
    let root = BitMapBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x_range.log_scale(), y_range.log_scale())
        .map_err(|e| anyhow!("plot: {e}"))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("fraction of samples above x")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| anyhow!("plot: {e}"))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).mix(0.95);
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2)))
            .map_err(|e| anyhow!("plot: {e}"))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("plot: {e}"))?;
    root.present().map_err(|e| anyhow!("plot: cannot write {}: {e}", path.display()))?;
    Ok(())
}

/// One line of an x-y chart.
#[derive(Debug, Clone)]
pub struct XySeries {
    /// Legend text.
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Dashed, without point markers: for models and bounds drawn beside measurements.
    pub model: bool,
    /// Palette index; series with the same index share a colour (a measurement and its model).
    pub color: usize,
}

/// A tick label with at most four significant digits and no float noise (0.3, not
/// 0.30000000000000004).
pub fn tick(v: &f64) -> String {
    if *v == 0.0 {
        return "0".into();
    }
    let digits = (3 - v.abs().log10().floor() as i32).max(0) as usize;
    let text = format!("{v:.digits$}");
    if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_string() } else { text }
}

/// Axis scales of an x-y chart.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scales {
    pub log_x: bool,
    pub log_y: bool,
}

fn padded_range(values: impl Iterator<Item = f64> + Clone, log: bool) -> Option<(f64, f64)> {
    let usable = values.filter(|v| v.is_finite() && (!log || *v > 0.0));
    let lo = usable.clone().fold(f64::INFINITY, f64::min);
    let hi = usable.fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        return None;
    }
    Some(if log {
        (lo / 1.4, hi * 1.4)
    } else {
        let pad = ((hi - lo) * 0.06).max(hi.abs() * 0.02).max(1e-12);
        ((lo - pad).min(if lo >= 0.0 { 0.0 } else { lo - pad }), hi + pad)
    })
}

/// Draws `series` on an x-y chart into a PNG at `path`. Measured series get lines with point
/// markers; model series are dashed.
pub fn xy_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    scales: Scales,
    series: &[XySeries],
) -> Result<()> {
    register_font();
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (Some((x0, x1)), Some((y0, y1))) = (padded_range(xs, scales.log_x), padded_range(ys, scales.log_y))
    else {
        return Err(anyhow!("nothing to plot for {title}"));
    };
    let root = BitMapBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
    let mut builder = ChartBuilder::on(&root);
    builder.caption(title, ("sans-serif", 22)).margin(14).x_label_area_size(48).y_label_area_size(80);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart.map_err(|e| anyhow!("plot: {e}"))?;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .x_label_formatter(&tick)
                .y_label_formatter(&tick)
                .label_style(("sans-serif", 14))
                .draw()
                .map_err(|e| anyhow!("plot: {e}"))?;
            for s in series {
                let color = Palette99::pick(s.color).mix(0.95);
                let points: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|&(x, y)| (!scales.log_x || x > 0.0) && (!scales.log_y || y > 0.0))
                    .collect();
                if s.model {
                    chart
                        .draw_series(DashedLineSeries::new(points.clone(), 8, 5, color.stroke_width(2)))
                        .map_err(|e| anyhow!("plot: {e}"))?
                        .label(s.name.clone())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
                        });
                } else {
                    chart
                        .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                        .map_err(|e| anyhow!("plot: {e}"))?
                        .label(s.name.clone())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
                        });
                    chart
                        .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                        .map_err(|e| anyhow!("plot: {e}"))?;
                }
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .label_font(("sans-serif", 14))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|e| anyhow!("plot: {e}"))?;
        }};
    }
    match (scales.log_x, scales.log_y) {
        (false, false) => draw!(builder.build_cartesian_2d(x0..x1, y0..y1)),
        (true, false) => draw!(builder.build_cartesian_2d((x0..x1).log_scale(), y0..y1)),
        (false, true) => draw!(builder.build_cartesian_2d(x0..x1, (y0..y1).log_scale())),
        (true, true) => draw!(builder.build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())),
    }
    root.present().map_err(|e| anyhow!("plot: cannot write {}: {e}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_chart_is_written_as_png() {
        let path = std::env::temp_dir().join(format!("kairos-plot-test-{}.png", std::process::id()));
        let series = vec![
            Series { name: "a".into(), points: vec![(1.0, 1.0), (10.0, 0.1), (100.0, 0.001)] },
            Series { name: "b".into(), points: vec![(2.0, 0.5), (20.0, 0.01)] },
        ];
        tail_chart(&path, "test", "x", &series).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn xy_charts_are_written_for_every_scale() {
        let series = vec![
            XySeries {
                name: "measured".into(),
                points: vec![(1.0, 3.0), (2.0, 2.0), (4.0, 5.0)],
                model: false,
                color: 0,
            },
            XySeries { name: "model".into(), points: vec![(1.0, 2.5), (4.0, 4.5)], model: true, color: 0 },
        ];
        for (log_x, log_y) in [(false, false), (true, false), (false, true), (true, true)] {
            let path =
                std::env::temp_dir().join(format!("kairos-xy-{}-{log_x}-{log_y}.png", std::process::id()));
            xy_chart(&path, "t", "x", "y", Scales { log_x, log_y }, &series).unwrap();
            assert_eq!(&std::fs::read(&path).unwrap()[1..4], b"PNG");
            std::fs::remove_file(path).unwrap();
        }
        let path = std::env::temp_dir().join("kairos-xy-empty.png");
        assert!(xy_chart(&path, "t", "x", "y", Scales::default(), &[]).is_err());
    }

    #[test]
    fn ticks_have_no_float_noise() {
        assert_eq!(tick(&0.30000000000000004), "0.3");
        assert_eq!(tick(&1500.0), "1500");
        assert_eq!(tick(&0.00125), "0.00125");
        assert_eq!(tick(&0.0), "0");
    }

    #[test]
    fn an_empty_chart_is_an_error() {
        let path = std::env::temp_dir().join("kairos-plot-empty.png");
        assert!(tail_chart(&path, "empty", "x", &[]).is_err());
    }
}
