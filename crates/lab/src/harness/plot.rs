//! Plots for reports: log-log tail (complementary CDF) charts and x-y charts (lines for
//! measurements, dashed lines for models), PNG with an embedded font.
//!
//! Made to be read, not only drawn: colours from a fixed palette that stays apart on white and
//! for colour-blind readers (Okabe and Ito's, without its yellow, plus grey); the legend in a
//! column of its own beside the data, never over it; log axes labelled at every decade, with
//! minor lines at 2-9 (and labels at 1, 2 and 5 when fewer than three decades show); at most
//! eight series in one panel, more are split into panels that share the axes.
//!
//! The font (DejaVu Sans, Bitstream Vera licence, `assets/`) is compiled in, so plots render the
//! same on a machine without fontconfig or any installed font.

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // A failure leaves text unrendered, which the chart calls below report.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// The series colours: Okabe and Ito's palette without yellow (unreadable on white), then grey.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),   // blue
    RGBColor(213, 94, 0),    // vermillion
    RGBColor(0, 158, 115),   // bluish green
    RGBColor(204, 121, 167), // reddish purple
    RGBColor(230, 159, 0),   // orange
    RGBColor(86, 180, 233),  // sky blue
    RGBColor(0, 0, 0),       // black
    RGBColor(120, 120, 120), // grey
];

/// Series one panel shows at most; more are split into panels.
pub const MAX_SERIES_PER_PANEL: usize = 8;

const WIDTH: u32 = 1200;
const PANEL_HEIGHT: u32 = 640;
const LEGEND_WIDTH: u32 = 300;

/// Labelled (bold) and unlabelled (light) tick positions of a log axis over `lo..hi`: every
/// decade labelled, 2-9 of each decade as minor lines; with fewer than three decades in range,
/// 1, 2 and 5 of each decade are labelled too, so an axis never has fewer than two labels.
pub fn log_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let (mut bold, mut light) = (Vec::new(), Vec::new());
    if !(lo > 0.0 && hi > lo && lo.is_finite() && hi.is_finite()) {
        return (bold, light);
    }
    let first = lo.log10().floor() as i32;
    let last = hi.log10().ceil() as i32;
    let decades_in_range = (first..=last).filter(|&e| (lo..=hi).contains(&10f64.powi(e))).count();
    for e in first..=last {
        let base = 10f64.powi(e);
        for m in 1..=9 {
            let v = base * f64::from(m);
            if !(lo..=hi).contains(&v) {
                continue;
            }
            if m == 1 || (decades_in_range < 3 && (m == 2 || m == 5)) {
                bold.push(v);
            } else {
                light.push(v);
            }
        }
    }
    (bold, light)
}

/// One legend entry: a line sample (dashed for models) and the series' name.
struct LegendEntry {
    name: String,
    color: RGBColor,
    dashed: bool,
}

/// Draws `entries` down the legend column `area`.
fn draw_legend(area: &Area<'_>, entries: &[LegendEntry]) -> Result<()> {
    let font = ("sans-serif", 14).into_font();
    for (i, e) in entries.iter().enumerate() {
        let y = 60 + 24 * i as i32;
        let style = e.color.stroke_width(3);
        if e.dashed {
            for x in [4, 16] {
                area.draw(&PathElement::new(vec![(x, y), (x + 8, y)], style))
                    .map_err(|e| anyhow!("plot: {e}"))?;
            }
        } else {
            area.draw(&PathElement::new(vec![(4, y), (28, y)], style)).map_err(|e| anyhow!("plot: {e}"))?;
        }
        let mut name = e.name.clone();
        if name.chars().count() > 36 {
            name = name.chars().take(35).collect::<String>() + "…";
        }
        area.draw(&Text::new(name, (36, y - 8), font.clone())).map_err(|e| anyhow!("plot: {e}"))?;
    }
    Ok(())
}

/// A drawing area of a PNG.
type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// A root area of `panels` panels, each split into the chart and its legend column.
fn panels(path: &Path, count: usize) -> Result<(Area<'_>, Vec<(Area<'_>, Area<'_>)>)> {
    let height = PANEL_HEIGHT * count.max(1) as u32;
    let root = BitMapBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
    let areas = root
        .split_evenly((count.max(1), 1))
        .into_iter()
        .map(|a| a.split_horizontally(WIDTH - LEGEND_WIDTH))
        .collect();
    Ok((root, areas))
}

/// The caption of panel `n` (from 0) of `panels`: the title, numbered when there are several.
fn panel_caption(title: &str, n: usize, panels: usize) -> String {
    if panels > 1 { format!("{title} ({}/{panels})", n + 1) } else { title.to_string() }
}

/// A chart on a panel's chart area: its caption, margin and room for the axes' labels.
fn panel_chart<'a, 'b>(area: &'a Area<'b>, caption: String) -> ChartBuilder<'a, 'b, BitMapBackend<'b>> {
    let mut builder = ChartBuilder::on(area);
    builder.caption(caption, ("sans-serif", 22)).margin(14).x_label_area_size(48).y_label_area_size(80);
    builder
}

/// Draws a chart's grid, axis descriptions and tick labels.
fn draw_mesh<X, Y>(
    chart: &mut ChartContext<'_, BitMapBackend<'_>, Cartesian2d<X, Y>>,
    x_label: &str,
    y_label: &str,
) -> Result<()>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| anyhow!("plot: {e}"))
}

/// One line of a tail chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// `(x, fraction of samples above x)` points, x > 0, fraction in (0, 1].
    pub points: Vec<(f64, f64)>,
}

/// Draws `series` as complementary CDFs on log-log axes into a PNG at `path`, split into
/// panels of at most [`MAX_SERIES_PER_PANEL`].
pub fn tail_chart(path: &Path, title: &str, x_label: &str, series: &[Series]) -> Result<()> {
    register_font();
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    let x_min = points().map(|p| p.0).filter(|x| *x > 0.0).fold(f64::INFINITY, f64::min);
    let x_max = points().map(|p| p.0).fold(0.0, f64::max);
    let y_min = points().map(|p| p.1).filter(|y| *y > 0.0).fold(1.0, f64::min);
    if !x_min.is_finite() || x_max <= 0.0 {
        return Err(anyhow!("nothing to plot for {title}"));
    }
    let (x0, x1) = (x_min * 0.8, x_max * 1.25);
    let (y0, y1) = (y_min * 0.5, 1.2);
    let chunks: Vec<&[Series]> = series.chunks(MAX_SERIES_PER_PANEL).collect();
    let (root, areas) = panels(path, chunks.len())?;
    for (n, (chunk, (chart_area, legend_area))) in chunks.iter().zip(&areas).enumerate() {
        let (xb, xl) = log_ticks(x0, x1);
        let (yb, yl) = log_ticks(y0, y1);
        let mut chart = panel_chart(chart_area, panel_caption(title, n, chunks.len()))
            .build_cartesian_2d(
                (x0..x1).log_scale().with_key_points(xb).with_light_points(xl),
                (y0..y1).log_scale().with_key_points(yb).with_light_points(yl),
            )
            .map_err(|e| anyhow!("plot: {e}"))?;
        draw_mesh(&mut chart, x_label, "fraction of samples above x")?;
        let mut legend = Vec::new();
        for (i, s) in chunk.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2)))
                .map_err(|e| anyhow!("plot: {e}"))?;
            legend.push(LegendEntry { name: s.name.clone(), color, dashed: false });
        }
        draw_legend(legend_area, &legend)?;
    }
    root.present().map_err(|e| anyhow!("plot: cannot write {}: {e}", path.display()))?;
    Ok(())
}

/// One line of an x-y chart.
#[derive(Debug, Clone)]
pub struct XySeries {
    /// Legend text.
    pub name: String,
    /// `(x, y)` points in drawing order.
    pub points: Vec<(f64, f64)>,
    /// Dashed, without point markers: for models and bounds drawn beside measurements.
    pub model: bool,
    /// Palette index; series with the same index share a colour (a measurement and its model).
    pub color: usize,
}

impl XySeries {
    /// A measured series: a line with point markers.
    pub fn measured(name: impl Into<String>, points: Vec<(f64, f64)>, color: usize) -> Self {
        Self { name: name.into(), points, model: false, color }
    }
}

/// One measured series per key of `keys`, coloured by the key's place among them: named
/// `name(key)`, with the points `point` makes of the rows `of_key` picks for the key, in the
/// rows' order. A key that picks no row gets no series (and its colour stays unused, so the
/// other keys keep theirs from chart to chart).
pub fn measured_per_key<K, R>(
    keys: impl IntoIterator<Item = K>,
    rows: &[R],
    name: impl Fn(&K) -> String,
    of_key: impl Fn(&K, &R) -> bool,
    point: impl Fn(&R) -> (f64, f64),
) -> Vec<XySeries> {
    keys.into_iter()
        .enumerate()
        .map(|(color, key)| {
            let points = rows.iter().filter(|r| of_key(&key, r)).map(&point).collect();
            XySeries::measured(name(&key), points, color)
        })
        .filter(|s| !s.points.is_empty())
        .collect()
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
    /// A log-scaled x axis (points with x <= 0 are left out).
    pub log_x: bool,
    /// A log-scaled y axis (points with y <= 0 are left out).
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

/// Splits series into panels of at most [`MAX_SERIES_PER_PANEL`], keeping the series of one
/// colour (a measurement and its model) together.
fn panel_groups(series: &[XySeries]) -> Vec<Vec<&XySeries>> {
    let mut colours: Vec<usize> = Vec::new();
    for s in series {
        if !colours.contains(&s.color) {
            colours.push(s.color);
        }
    }
    // As many panels as needed, filled evenly rather than eight and a remainder.
    let target = series.len().div_ceil(series.len().div_ceil(MAX_SERIES_PER_PANEL).max(1));
    let mut panels: Vec<Vec<&XySeries>> = vec![Vec::new()];
    for c in colours {
        let group: Vec<&XySeries> = series.iter().filter(|s| s.color == c).collect();
        let last = panels.last_mut().expect("one panel at least");
        if !last.is_empty() && (last.len() >= target || last.len() + group.len() > MAX_SERIES_PER_PANEL) {
            panels.push(group);
        } else {
            last.extend(group);
        }
    }
    panels
}

/// Draws `series` on an x-y chart into a PNG at `path`. Measured series get lines with point
/// markers; model series are dashed. More than [`MAX_SERIES_PER_PANEL`] series are split into
/// panels sharing the axes' ranges.
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
    let groups = panel_groups(series);
    let (root, areas) = panels(path, groups.len())?;
    for (n, (group, (chart_area, legend_area))) in groups.iter().zip(&areas).enumerate() {
        // Colours are dealt per panel, in the order the series' colour indices first appear.
        let mut order: Vec<usize> = Vec::new();
        for s in group {
            if !order.contains(&s.color) {
                order.push(s.color);
            }
        }
        let colour_of =
            |s: &XySeries| PALETTE[order.iter().position(|&c| c == s.color).unwrap_or(0) % PALETTE.len()];
        let mut builder = panel_chart(chart_area, panel_caption(title, n, groups.len()));
        let mut legend = Vec::new();
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart.map_err(|e| anyhow!("plot: {e}"))?;
                draw_mesh(&mut chart, x_label, y_label)?;
                for s in group {
                    let color = colour_of(s);
                    let points: Vec<(f64, f64)> = s
                        .points
                        .iter()
                        .copied()
                        .filter(|&(x, y)| (!scales.log_x || x > 0.0) && (!scales.log_y || y > 0.0))
                        .collect();
                    if s.model {
                        chart
                            .draw_series(DashedLineSeries::new(points.clone(), 8, 5, color.stroke_width(2)))
                            .map_err(|e| anyhow!("plot: {e}"))?;
                    } else {
                        chart
                            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                            .map_err(|e| anyhow!("plot: {e}"))?;
                        chart
                            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                            .map_err(|e| anyhow!("plot: {e}"))?;
                    }
                    legend.push(LegendEntry { name: s.name.clone(), color, dashed: s.model });
                }
            }};
        }
        let (xb, xl) = log_ticks(x0, x1);
        let (yb, yl) = log_ticks(y0, y1);
        let log_x = || (x0..x1).log_scale().with_key_points(xb.clone()).with_light_points(xl.clone());
        let log_y = || (y0..y1).log_scale().with_key_points(yb.clone()).with_light_points(yl.clone());
        match (scales.log_x, scales.log_y) {
            (false, false) => draw!(builder.build_cartesian_2d(x0..x1, y0..y1)),
            (true, false) => draw!(builder.build_cartesian_2d(log_x(), y0..y1)),
            (false, true) => draw!(builder.build_cartesian_2d(x0..x1, log_y())),
            (true, true) => draw!(builder.build_cartesian_2d(log_x(), log_y())),
        }
        draw_legend(legend_area, &legend)?;
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
    fn a_series_per_key_keeps_the_keys_colours_and_leaves_out_keys_without_rows() {
        let rows = [(1, 1.0, 10.0), (3, 2.0, 30.0), (1, 3.0, 11.0)];
        let series =
            measured_per_key([1, 2, 3], &rows, |k| format!("key {k}"), |k, r| r.0 == *k, |r| (r.1, r.2));
        let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["key 1", "key 3"]);
        assert_eq!(series[0].points, [(1.0, 10.0), (3.0, 11.0)]);
        assert_eq!(series[1].points, [(2.0, 30.0)]);
        assert_eq!((series[0].color, series[1].color), (0, 2), "key 3 keeps the third colour");
        assert!(series.iter().all(|s| !s.model));
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
    fn log_axes_are_labelled_at_every_decade_with_minor_lines_between() {
        let (bold, light) = log_ticks(0.5, 20_000.0);
        assert_eq!(bold, vec![1.0, 10.0, 100.0, 1000.0, 10_000.0]);
        assert!(light.contains(&2.0) && light.contains(&900.0) && light.contains(&0.5));
        assert_eq!(light.len(), 5 + 8 + 8 + 8 + 8 + 1, "{light:?}");
        // Fewer than three decades: 1, 2 and 5 are labelled too.
        let (bold, _) = log_ticks(1.5, 60.0);
        assert_eq!(bold, vec![2.0, 5.0, 10.0, 20.0, 50.0]);
        assert_eq!(log_ticks(0.0, 1.0), (vec![], vec![]));
    }

    #[test]
    fn more_than_eight_series_are_split_into_panels_keeping_a_model_with_its_measurement() {
        let s = |color: usize, model: bool| XySeries {
            name: format!("{color}{model}"),
            points: vec![(1.0, 1.0)],
            model,
            color,
        };
        let series: Vec<XySeries> = (0..6).flat_map(|c| [s(c, false), s(c, true)]).collect();
        let groups = panel_groups(&series);
        assert_eq!(groups.iter().map(Vec::len).collect::<Vec<_>>(), vec![6, 6]);
        for g in &groups {
            for x in g {
                assert!(g.iter().filter(|y| y.color == x.color).count() == 2, "a pair was split");
            }
        }
        let path = std::env::temp_dir().join(format!("kairos-xy-panels-{}.png", std::process::id()));
        xy_chart(&path, "t", "x", "y", Scales::default(), &series).unwrap();
        assert_eq!(&std::fs::read(&path).unwrap()[1..4], b"PNG");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn the_palette_has_no_yellow_and_distinct_colours() {
        for (i, a) in PALETTE.iter().enumerate() {
            // Yellow: red and green high, blue low.
            assert!(!(a.0 > 200 && a.1 > 200 && a.2 < 100), "{a:?}");
            for b in &PALETTE[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn an_empty_chart_is_an_error() {
        let path = std::env::temp_dir().join("kairos-plot-empty.png");
        assert!(tail_chart(&path, "empty", "x", &[]).is_err());
    }
}
