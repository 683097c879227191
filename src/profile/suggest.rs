//! The `[device.qos]` a measured device gets. One rule serves both `profile`'s printed
//! suggestion and the daemon's calibrated defaults (`crate::calibration`), so pasting
//! `profile`'s tables gives the daemon exactly what it would have chosen by itself.
//!
//! - **Read target**: `rpct` = [`DEFAULT_PERCENTILE`], `rlat` = [`LATENCY_MARGIN`] × the
//!   read latency at that percentile measured at 90 % of the random-read capacity
//!   (resctl-demo's margin). p90 rather than p50: next to a writer an SSD's read p50
//!   barely moves while its p90 rises 3–12× (`scripts/bench-frontier.sh`), so p50 would
//!   not see the writer. sysfs' `rotational` flag does not choose it: virtio disks report
//!   1 on flash, and a spinning disk's operator can pass `profile --percentile 50`.
//! - **No write latency signal** (`wpct = 0`, `wlat = rlat`, which then only sets the
//!   planning period): a large or deep write's latency measures the writer's own queue,
//!   not the device's health, and reads are what latency-sensitive guests wait for.
//!   `profile` prints the write target it measured as a comment, for an operator who wants
//!   writes judged too.
//! - **vrate within 25–400 %** ([`QosConfig`]'s defaults): the controller must be free to
//!   slow a writer to a quarter of the model's speed, because that is what protecting a
//!   reader takes on a disk whose writes hurt reads. A bound of 60 % (the resctl-demo
//!   suggestion) kept a writer at 684 MB/s beside readers that then missed a low-millisecond
//!   p99 in 218 of 220 seconds. Above 100 % it lets a pessimistic model's device run up to
//!   4× faster. A lone tenant is never throttled, whatever the bounds.

use super::plan::{Profile, PERCENTILES, WRITE_ESTIMATE};
use crate::duration::DurationUs;
use crate::qos::QosConfig;

/// The percentile of the suggested read target.
pub const DEFAULT_PERCENTILE: f64 = 90.0;
/// Target = this × the latency measured at 90 % load.
pub const LATENCY_MARGIN: f64 = 1.5;

/// What the suggestion must achieve, checked in the simulator, on the emulated device and
/// by `tune` on a real one: a QD1 4 KiB random reader beside a QD8 1 MiB sequential writer
/// at equal weights keeps this share of its solo IOPS ...
pub const READER_KEEPS: f64 = 0.60;
/// ... while the writer keeps this share of its solo bandwidth, where the device allows
/// both (`scripts/bench-frontier.sh` measures whether it does).
pub const WRITER_KEEPS: f64 = 0.50;

/// The QoS configuration for a device measured as `p`, targets at `percentile` (one of
/// [`PERCENTILES`]; anything else means p95).
pub fn suggest_qos(p: &Profile, percentile: f64) -> QosConfig {
    let (rpct, rlat) = target(p.read_latency_us, percentile);
    // A derived target, like calibration's: it protects the underserved only.
    let mut q = QosConfig {
        rpct,
        rlat: Some(DurationUs(rlat)),
        protect: Some(crate::qos::Protect::Underserved),
        ..QosConfig::default()
    };
    without_write_signal(&mut q);
    q
}

/// The write target the same rule gives, `(wpct, wlat_µs)`, when writes were measured.
/// Not part of the suggestion (see the module header); `profile` prints it as a comment.
pub fn measured_write_target(p: &Profile, percentile: f64) -> Option<(f64, u64)> {
    p.writes_measured()
        .then(|| target(p.write_latency_us, percentile))
}

/// Writes give no latency signal; the write target follows the read one, since it still
/// sets the planning period.
pub fn without_write_signal(q: &mut QosConfig) {
    q.wpct = 0.0;
    q.wlat = q.rlat;
}

/// `(percentile, margin × latency at it)` from latencies at [`PERCENTILES`].
pub(crate) fn target(latency_us: [u64; 4], percentile: f64) -> (f64, u64) {
    let index = PERCENTILES
        .iter()
        .position(|&q| q == percentile)
        .unwrap_or(2);
    let lat = (latency_us[index] as f64 * LATENCY_MARGIN).ceil().max(1.0) as u64;
    (PERCENTILES[index], lat)
}

impl Profile {
    /// The `[device.model]` and `[device.qos]` tables, ready to paste into a config, with
    /// targets at `percentile` ([`suggest_qos`]: the daemon's own calibrated defaults).
    /// Every table it prints is one the config accepts: unmeasured write coefficients are
    /// printed as estimates, marked so.
    pub fn to_toml(&self, percentile: f64, header: &str) -> String {
        use std::fmt::Write;
        let q = suggest_qos(self, percentile);
        let m = self.model_with_writes();
        let mut out = String::new();
        for line in header.lines() {
            let _ = writeln!(out, "# {line}");
        }
        let _ = writeln!(out, "[device.model]");
        let _ = writeln!(out, "rbps = {}", m.rbps);
        let _ = writeln!(out, "rseqiops = {}", m.rseqiops);
        let _ = writeln!(out, "rrandiops = {}", m.rrandiops);
        let estimated = if self.writes_measured() {
            String::new()
        } else {
            format!(
                "   # estimated: {WRITE_ESTIMATE} x the read value (writes not measured; \
                 --scratch or --destructive measures them)"
            )
        };
        let _ = writeln!(out, "wbps = {}{estimated}", m.wbps);
        let _ = writeln!(out, "wseqiops = {}{estimated}", m.wseqiops);
        let _ = writeln!(out, "wrandiops = {}{estimated}", m.wrandiops);
        let rlat = q.rlat.unwrap_or(DurationUs(1));
        let _ = writeln!(out, "\n[device.qos]");
        let _ = writeln!(
            out,
            "# {LATENCY_MARGIN} x the p{} read latency at 90% load; no write latency signal; \
             vrate free to throttle a writer to 25% (docs/qos.md: Profiling)",
            q.rpct
        );
        let _ = writeln!(out, "rpct = {:.1}", q.rpct);
        let _ = writeln!(out, "rlat = \"{rlat}\"");
        if let Some((wpct, wlat)) = measured_write_target(self, percentile) {
            let _ = writeln!(
                out,
                "# to judge writes too: wpct = {wpct:.1} and wlat = \"{}\" (measured)",
                DurationUs(wlat)
            );
        }
        let _ = writeln!(out, "wpct = {:.1}", q.wpct);
        let _ = writeln!(out, "wlat = \"{}\"", q.wlat.unwrap_or(rlat));
        let _ = writeln!(out, "min = {:.1}", q.min);
        let _ = writeln!(out, "max = {:.1}", q.max);
        let _ = writeln!(
            out,
            "# a derived target: only volumes served below their share lower vrate \
             (\"all\" makes it bind every volume; docs/qos.md: How QoS works)"
        );
        let _ = writeln!(out, "protect = \"underserved\"");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost_model::LinearParams;

    fn measured(writes: bool) -> Profile {
        Profile {
            model: LinearParams {
                rbps: 1000,
                rseqiops: 100,
                rrandiops: 50,
                wbps: if writes { 500 } else { 0 },
                wseqiops: if writes { 50 } else { 0 },
                wrandiops: if writes { 25 } else { 0 },
            },
            read_latency_us: [100, 200, 300, 400],
            write_latency_us: if writes {
                [1000, 2000, 3000, 4000]
            } else {
                [0; 4]
            },
        }
    }

    #[test]
    fn the_read_target_is_the_margin_over_the_measured_percentile() {
        let p = measured(true);
        for (pct, rlat) in [(50.0, 150), (90.0, 300), (95.0, 450), (99.0, 600)] {
            let q = suggest_qos(&p, pct);
            assert_eq!((q.rpct, q.rlat), (pct, Some(DurationUs(rlat))));
        }
        assert_eq!(measured_write_target(&p, 90.0), Some((90.0, 3000)));
        assert_eq!(measured_write_target(&measured(false), 90.0), None);
    }

    /// Measured or not, writes give no signal, and the vrate bounds are the daemon's
    /// defaults: the suggestion is what the daemon would run with by itself.
    #[test]
    fn writes_give_no_signal_and_the_bounds_are_the_defaults() {
        for writes in [false, true] {
            let q = suggest_qos(&measured(writes), DEFAULT_PERCENTILE);
            assert_eq!((q.wpct, q.wlat), (0.0, q.rlat));
            let defaults = QosConfig::default();
            assert_eq!((q.min, q.max, q.enable), (defaults.min, defaults.max, true));
            q.validate().unwrap();
        }
    }

    /// The printed tables are ones the config accepts, and the `[device.qos]` it parses
    /// is exactly [`suggest_qos`]'s, the daemon's calibrated defaults. Without measured
    /// writes the write coefficients are printed as estimates, marked; with them the
    /// measured write target is offered as a comment.
    #[test]
    fn the_printed_tables_parse_to_the_suggestion() {
        let reads_only = Profile {
            model: LinearParams {
                rbps: 1_000_000,
                rseqiops: 100,
                rrandiops: 51,
                ..LinearParams::default()
            },
            read_latency_us: [100, 200, 300, 400],
            write_latency_us: [0; 4],
        };
        let with_writes = Profile {
            model: LinearParams {
                wbps: 400_000,
                wseqiops: 40,
                wrandiops: 20,
                ..reads_only.model
            },
            write_latency_us: [1000, 2000, 3000, 4000],
            ..reads_only.clone()
        };
        for p in [&reads_only, &with_writes] {
            let text = p.to_toml(95.0, "x");
            let config = format!(
                "[device]\npath = \"x\"\n{text}\n[[volume]]\nname = \"v\"\nsocket = \"v.sock\"\nsize = 4096\n"
            );
            let c =
                crate::config::Config::parse(&config).unwrap_or_else(|e| panic!("{e}\n{config}"));
            assert_eq!(c.device.qos, suggest_qos(p, 95.0), "{text}");
            assert_eq!(c.device.model.linear_params(), p.model_with_writes());
            assert!(text.contains("rlat = \"450us\""), "{text}");
        }
        let text = reads_only.to_toml(95.0, "x");
        assert!(text.contains("wrandiops = 26   # estimated"), "{text}");
        assert!(!text.contains("to judge writes"), "{text}");
        let text = with_writes.to_toml(95.0, "x");
        assert!(text.contains("wpct = 95.0 and wlat = \"4500us\""), "{text}");
    }
}
