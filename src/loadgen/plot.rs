//! Pictures of a run: per-tenant IOPS and p99 latency per second, as SVG and PNG.
//!
//! Text is drawn with a font compiled into the binary (`font/DejaVuSans-ascii.ttf`, through
//! plotters' `ab_glyph` feature), so no system font or fontconfig is needed. The SVG keeps
//! text as `<text>` elements (the viewer's sans-serif font).

use super::result::{SecondSample, TenantResult};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

const FONT: &[u8] = include_bytes!("font/DejaVuSans-ascii.ttf");
const SIZE: (u32, u32) = (1000, 720);
const COLORS: &[RGBColor] = &[
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
];

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_err() {
            panic!("the built-in plot font does not parse");
        }
    });
}

/// Writes `PREFIX.svg` and `PREFIX.png` and returns their paths.
pub fn write(
    prefix: &Path,
    title: &str,
    results: &[TenantResult],
) -> Result<(PathBuf, PathBuf), String> {
    register_font();
    let with_ext = |ext: &str| {
        let mut p = prefix.as_os_str().to_owned();
        p.push(ext);
        PathBuf::from(p)
    };
    let (svg, png) = (with_ext(".svg"), with_ext(".png"));
    let err = |p: &Path, e: String| format!("plot {}: {e}", p.display());
    draw(
        SVGBackend::new(&svg, SIZE).into_drawing_area(),
        title,
        results,
    )
    .map_err(|e| err(&svg, e))?;
    draw(
        BitMapBackend::new(&png, SIZE).into_drawing_area(),
        title,
        results,
    )
    .map_err(|e| err(&png, e))?;
    Ok((svg, png))
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    results: &[TenantResult],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(e)?;
    let (upper, lower) = root.split_vertically(SIZE.1 / 2 - 20);
    let samples = || results.iter().flat_map(|r| r.per_second.iter());
    // Sample times carry the microseconds a tenant took to start: 4.0001 is second 4.
    let x_max = (samples().map(|s| s.t_s).fold(1.0, f64::max) - 0.01).ceil();
    // Headroom above the data for the legend.
    let iops_max = samples().map(|s| s.iops as f64).fold(1.0, f64::max) * 1.4;
    let lats = || samples().map(|s| s.p99_us).filter(|&v| v > 0.0);
    let lat_min = (lats().fold(f64::INFINITY, f64::min) / 1.5).clamp(1.0, 1e6);
    let lat_max = (lats().fold(0.0, f64::max) * 4.0).max(lat_min * 10.0);

    let mut chart = ChartBuilder::on(&upper)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .caption("throughput per second", ("sans-serif", 17))
        .build_cartesian_2d(0f64..x_max, 0f64..iops_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("IOPS")
        .light_line_style(WHITE)
        .label_style(("sans-serif", 14))
        .y_label_formatter(&|v| format_count(*v))
        .draw()
        .map_err(e)?;
    draw_tenant_lines(&mut chart, results, |s| Some(s.iops as f64))?;

    let mut chart = ChartBuilder::on(&lower)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .caption("p99 latency per second (log scale)", ("sans-serif", 17))
        .build_cartesian_2d(
            0f64..x_max,
            (lat_min..lat_max)
                .log_scale()
                .with_key_points(log_ticks(lat_min, lat_max)),
        )
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("p99 latency")
        .light_line_style(WHITE)
        .label_style(("sans-serif", 14))
        .y_label_formatter(&|v| format_us(*v))
        .draw()
        .map_err(e)?;
    // A second without completions has no latency: leave it out.
    draw_tenant_lines(&mut chart, results, |s| {
        (s.p99_us > 0.0).then_some(s.p99_us)
    })?;
    root.present().map_err(e)?;
    Ok(())
}

/// One line per tenant (`value` picks a sample's y; `None` leaves the sample out), in the
/// tenant's colour, and the legend with the tenant names.
fn draw_tenant_lines<'a, DB, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>,
    results: &[TenantResult],
    value: impl Fn(&SecondSample) -> Option<f64>,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64>,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    for (i, r) in results.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points = r
            .per_second
            .iter()
            .filter_map(|s| value(s).map(|y| (s.t_s - 0.5, y)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(e)?
            .label(r.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    Ok(())
}

/// 1, 2, 5 times the powers of ten inside `[lo, hi]` (log-scale axis labels).
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 10f64.powi(lo.log10().floor() as i32);
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let v = decade * m;
            if (lo..=hi).contains(&v) {
                out.push(v);
            }
        }
        decade *= 10.0;
    }
    out
}

fn format_count(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 1_000.0 {
        format!("{:.1}k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}

fn format_us(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{:.0} s", v / 1e6)
    } else if v >= 1_000.0 {
        format!("{} ms", trim(v / 1000.0))
    } else {
        format!("{} µs", trim(v))
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::SecondSample;

    #[test]
    fn axis_labels() {
        assert_eq!(format_us(250.0), "250 µs");
        assert_eq!(format_us(1500.0), "1.5 ms");
        assert_eq!(format_us(20_000.0), "20 ms");
        assert_eq!(format_count(3000.0), "3.0k");
        assert_eq!(format_count(25_000.0), "25k");
        assert_eq!(log_ticks(150.0, 2500.0), [200.0, 500.0, 1000.0, 2000.0]);
    }

    #[test]
    fn writes_svg_and_png_with_names() {
        let dir = tempfile::tempdir().unwrap();
        let sample = |t: f64, iops: u64, p99: f64| SecondSample {
            t_s: t,
            iops,
            mib_per_s: 0.0,
            p99_us: p99,
        };
        let results = vec![
            TenantResult {
                name: "alpha".into(),
                per_second: (1..=4).map(|t| sample(t as f64, 1000, 300.0)).collect(),
                ..TenantResult::default()
            },
            TenantResult {
                name: "beta".into(),
                start_s: 2.0,
                per_second: vec![sample(3.0, 0, 0.0), sample(4.0, 3000, 20_000.0)],
                ..TenantResult::default()
            },
        ];
        let (svg, png) = write(&dir.path().join("pic"), "test", &results).unwrap();
        let svg = std::fs::read_to_string(svg).unwrap();
        assert!(svg.contains("alpha") && svg.contains("beta"));
        let png = std::fs::read(png).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }
}
