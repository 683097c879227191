//! Parameters derived from the QoS configuration (design §5.1, §3.2).
//!
//! The planning period is a multiple of the larger latency target: long enough that a
//! period holds enough completions to judge the percentile, short enough for fine
//! control. At p90 and above it is 2× the target, at p50 10×, clamped to 10 ms..1 s.
//!
//! Deviation: the kernel's shortest period is 1 ms. A period must also hold enough
//! requests of a paced tenant to tell its usage: a QD1 reader at 500 IOPS issues none or
//! one read per 1 ms, so period by period it looked idle, donated its share, and had its
//! next read throttled (on the emulated device four such readers beside a writer had
//! 18–44 % of their reads throttled and a p99 of 1.1–1.3 ms against a 375 µs target;
//! with 10 ms periods none was throttled and the p99 was 430–460 µs). A userspace planner
//! on a shared host also wakes with tens of µs of jitter, a large part of 1 ms.
//!
//! Budget margins are fractions of one period's worth of vtime *at the base vrate*, so
//! they are recomputed whenever the planner changes the base vrate.

use crate::vtime::{cdiv, MILLION, VTIME_PER_USEC};

use super::class::LatencyTarget;
use super::config::{Protect, QosConfig};

/// Shortest planning period, µs.
pub const MIN_PERIOD_US: u64 = 10_000;
/// The kernel's shortest period, µs (kept for the kernel's test vectors, design §5.1).
#[cfg(test)]
const KERNEL_MIN_PERIOD_US: u64 = 1_000;
/// Longest planning period, µs.
pub const MAX_PERIOD_US: u64 = 1_000_000;
/// Budget below this share of a period: no donation.
pub const MARGIN_MIN_PCT: u64 = 10;
/// Budget above this share of a period: donation candidate; in-period snapback threshold.
pub const MARGIN_LOW_PCT: u64 = 20;
/// Budget handed out on activation; anything above it is discarded.
pub const MARGIN_TARGET_PCT: u64 = 50;
/// Wait-timer slack, percent of the period.
pub const TIMER_SLACK_PCT: u64 = 1;
/// Hard vrate bounds, ppm of 100 %.
pub const VRATE_MIN_PPM: u64 = 10_000;
/// Hard vrate bounds, ppm of 100 %.
pub const VRATE_MAX_PPM: u64 = 100_000_000;

/// Budget margins in vtime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Margins {
    /// 10 % of a period.
    pub min: i64,
    /// 20 % of a period.
    pub low: i64,
    /// 50 % of a period.
    pub target: i64,
}

/// Runtime QoS parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QosParams {
    /// Throttling on.
    pub enable: bool,
    /// Read percentile in ppm.
    pub rppm: u32,
    /// Read latency target, µs.
    pub rlat_us: u32,
    /// Write percentile in ppm.
    pub wppm: u32,
    /// Write latency target, µs.
    pub wlat_us: u32,
    /// Lower vrate bound, ppm.
    pub min_ppm: u64,
    /// Upper vrate bound, ppm.
    pub max_ppm: u64,
    /// Planning period, µs.
    pub period_us: u64,
    /// Wait-timer slack, ns.
    pub timer_slack_ns: u64,
    /// Whose latency misses lower vrate.
    pub protect: Protect,
}

fn pct_to_ppm(pct: f64) -> u64 {
    // `as` saturates and maps NaN to 0: no panic whatever validation let through.
    (pct * 10_000.0).round().max(0.0) as u64
}

/// The planning period for the given targets (design §5.1).
pub fn period_us(rppm: u32, rlat_us: u32, wppm: u32, wlat_us: u32) -> u64 {
    let (ppm, lat) = if rlat_us >= wlat_us {
        (rppm, rlat_us)
    } else {
        (wppm, wlat_us)
    };
    let multi = if ppm != 0 {
        (MILLION.saturating_sub(u64::from(ppm)) / 50_000).max(2)
    } else {
        2
    };
    (multi * u64::from(lat)).clamp(MIN_PERIOD_US, MAX_PERIOD_US)
}

impl QosParams {
    /// Derive from a (validated) configuration; `default_lat_us` fills missing targets.
    pub fn from_config(cfg: &QosConfig, default_lat_us: u32) -> QosParams {
        let lat = |d: Option<crate::duration::DurationUs>| -> u32 {
            d.map(|d| u32::try_from(d.0).unwrap_or(u32::MAX))
                .unwrap_or(default_lat_us)
                .max(1)
        };
        let rppm = pct_to_ppm(cfg.rpct).min(MILLION) as u32;
        let wppm = pct_to_ppm(cfg.wpct).min(MILLION) as u32;
        let rlat_us = lat(cfg.rlat);
        let wlat_us = lat(cfg.wlat);
        let min_ppm = pct_to_ppm(cfg.min).clamp(VRATE_MIN_PPM, VRATE_MAX_PPM);
        let max_ppm = pct_to_ppm(cfg.max).clamp(min_ppm, VRATE_MAX_PPM);
        let period_us = period_us(rppm, rlat_us, wppm, wlat_us);
        QosParams {
            enable: cfg.enable,
            rppm,
            rlat_us,
            wppm,
            wlat_us,
            min_ppm,
            max_ppm,
            period_us,
            timer_slack_ns: period_us * 1000 * TIMER_SLACK_PCT / 100,
            protect: cfg.protect(),
        }
    }

    /// [`Self::from_config`], with the tightest target a latency-class volume or group
    /// declares (`declared`) as the read target when the operator gave none (`rlat`
    /// absent or calibrated) and reads give a signal (`rpct` > 0). A calibrated target
    /// is the device's own latency under load, usually far tighter than what any tenant
    /// needs: held to it, vrate throttles a writer for latency nobody asked for. A
    /// declared target is what the device must deliver for that volume's target to be
    /// possible at all.
    pub fn derive(
        cfg: &QosConfig,
        default_lat_us: u32,
        declared: Option<LatencyTarget>,
    ) -> QosParams {
        let mut p = Self::from_config(cfg, default_lat_us);
        let Some(t) = declared.filter(|_| !cfg.rlat_given() && p.rppm > 0) else {
            return p;
        };
        p.rppm = pct_to_ppm(t.pct).min(MILLION) as u32;
        p.rlat_us = u32::try_from(t.us).unwrap_or(u32::MAX).max(1);
        p.period_us = period_us(p.rppm, p.rlat_us, p.wppm, p.wlat_us);
        p.timer_slack_ns = p.period_us * 1000 * TIMER_SLACK_PCT / 100;
        p
    }

    /// Lower vrate bound in vtime per µs.
    pub fn vrate_min(&self) -> u64 {
        cdiv(self.min_ppm * VTIME_PER_USEC, MILLION)
    }

    /// Upper vrate bound in vtime per µs.
    pub fn vrate_max(&self) -> u64 {
        cdiv(self.max_ppm * VTIME_PER_USEC, MILLION)
    }

    /// Margins for a base vrate (vtime per µs).
    pub fn margins(&self, base_rate: u64) -> Margins {
        let m = |pct: u64| -> i64 {
            i64::try_from((self.period_us * pct / 100).saturating_mul(base_rate))
                .unwrap_or(i64::MAX)
        };
        Margins {
            min: m(MARGIN_MIN_PCT),
            low: m(MARGIN_LOW_PCT),
            target: m(MARGIN_TARGET_PCT),
        }
    }

    /// Period length in ns.
    pub fn period_ns(&self) -> u64 {
        self.period_us * 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The period test vectors of design §5.1, with the daemon's 10 ms floor where the
    /// kernel's would be shorter.
    #[test]
    fn period_matches_spec_vectors() {
        let cases = [
            (25_000, 0, 50_000),
            (250_000, 0, 500_000),
            (5_000, 0, 10_000),
            (3_500, 900_000, 7_000),
            (10_000, 800_000, 40_000),
            (75_000, 950_000, 150_000),
            (1_000, 500_000, 10_000),
            (100, 990_000, 1_000),
        ];
        for (lat, ppm, kernel) in cases {
            assert!(kernel >= KERNEL_MIN_PERIOD_US);
            let want = kernel.max(MIN_PERIOD_US);
            assert_eq!(period_us(ppm, lat, 0, 0), want, "lat {lat} ppm {ppm}");
            assert_eq!(
                period_us(0, 0, ppm, lat),
                want,
                "write side, lat {lat} ppm {ppm}"
            );
        }
        // Ties pick the read pair.
        assert_eq!(period_us(500_000, 1_000, 990_000, 1_000), 10_000);
    }

    #[test]
    fn derived_from_config() {
        let cfg = QosConfig {
            rpct: 90.0,
            rlat: Some(crate::duration::DurationUs(7_000)),
            wpct: 0.0,
            wlat: None,
            min: 50.0,
            max: 150.0,
            ..QosConfig::default()
        };
        let p = QosParams::from_config(&cfg, 1_000);
        assert_eq!(p.rppm, 900_000);
        assert_eq!(p.wlat_us, 1_000);
        assert_eq!(p.period_us, 14_000);
        assert_eq!(p.timer_slack_ns, 140_000);
        assert_eq!(p.min_ppm, 500_000);
        assert_eq!(p.vrate_min(), 68_719);
        assert_eq!(p.vrate_max(), 206_157);
        let m = p.margins(VTIME_PER_USEC);
        assert_eq!(m.target, 7_000 * VTIME_PER_USEC as i64);
        assert_eq!(m.low, 2_800 * VTIME_PER_USEC as i64);
        assert_eq!(m.min, 1_400 * VTIME_PER_USEC as i64);
    }
}
