//! Plots for reports: log-log tail (complementary CDF) charts, PNG with an embedded font.
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
    fn an_empty_chart_is_an_error() {
        let path = std::env::temp_dir().join("kairos-plot-empty.png");
        assert!(tail_chart(&path, "empty", "x", &[]).is_err());
    }
}
